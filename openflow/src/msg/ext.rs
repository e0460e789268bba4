//! Extension messages: the ONF bundle extension in OF1.3 experimenter form
//! (ONF EXT-230, `openflow/onf-ext.h`: `ONFT_BUNDLE_CONTROL` 2300,
//! `ONFT_BUNDLE_ADD_MESSAGE` 2301) and Nicira `NXT_CT_FLUSH`
//! (`nicira-ext.h` `struct nx_ct_flush`).

use std::fmt::{self, Write as _};
use std::net::Ipv6Addr;

use super::Message;
use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

/// `OFPBF_ATOMIC`.
pub const OFPBF_ATOMIC: u16 = 1;
/// `OFPBF_ORDERED`.
pub const OFPBF_ORDERED: u16 = 2;

/// `ONFT_BUNDLE_CONTROL` (body of `struct ofp14_bundle_ctrl_msg`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleControl {
    /// Bundle id.
    pub bundle_id: u32,
    /// `OFPBCT_*`: 0 open, 2 close, 4 commit, 6 discard; replies are +1.
    pub ctrl_type: u16,
    /// `OFPBF_*`.
    pub flags: u16,
    /// Properties, raw.
    pub properties: Vec<u8>,
}

impl BundleControl {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.bundle_id);
        w.u16(self.ctrl_type);
        w.u16(self.flags);
        w.bytes(&self.properties);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(BundleControl {
            bundle_id: r.u32()?,
            ctrl_type: r.u16()?,
            flags: r.u16()?,
            properties: r.rest().to_vec(),
        })
    }
}

fn bundle_flags(f: u16) -> String {
    let mut v = Vec::new();
    if f & OFPBF_ATOMIC != 0 {
        v.push("atomic");
    }
    if f & OFPBF_ORDERED != 0 {
        v.push("ordered");
    }
    v.join(" ")
}

impl fmt::Display for BundleControl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const T: &[&str] = &[
            "OPEN_REQUEST",
            "OPEN_REPLY",
            "CLOSE_REQUEST",
            "CLOSE_REPLY",
            "COMMIT_REQUEST",
            "COMMIT_REPLY",
            "DISCARD_REQUEST",
            "DISCARD_REPLY",
        ];
        let t = T
            .get(usize::from(self.ctrl_type))
            .map_or_else(|| format!("{}", self.ctrl_type), |s| s.to_string());
        write!(
            f,
            "\n bundle_id={} type={t} flags={}",
            self.bundle_id,
            bundle_flags(self.flags)
        )
    }
}

/// `ONFT_BUNDLE_ADD_MESSAGE` (body of `struct ofp14_bundle_add_msg`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleAdd {
    /// Bundle id.
    pub bundle_id: u32,
    /// `OFPBF_*`.
    pub flags: u16,
    /// The message to add.
    pub message: Box<Message>,
    /// Properties after the message, raw.
    pub properties: Vec<u8>,
}

impl BundleAdd {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u32(self.bundle_id);
        w.zeros(2);
        w.u16(self.flags);
        self.message.write_inner(w);
        w.bytes(&self.properties);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bundle_id = r.u32()?;
        r.pad(2, "ofp14_bundle_add_msg")?;
        let flags = r.u16()?;
        let len = Message::frame_len(r.peek(4)?).unwrap_or(0);
        let message = Box::new(Message::decode(r.take(len)?)?);
        Ok(BundleAdd {
            bundle_id,
            flags,
            message,
            properties: r.rest().to_vec(),
        })
    }
}

impl fmt::Display for BundleAdd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\n bundle_id={} flags={}\n{}",
            self.bundle_id,
            bundle_flags(self.flags),
            self.message
        )
    }
}

/// One direction's tuple in `NXT_CT_FLUSH` (`NXT_CT_TUPLE_*` properties).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtTuple {
    /// Source address (IPv4 as IPv4-mapped IPv6).
    pub src: Option<Ipv6Addr>,
    /// Destination address.
    pub dst: Option<Ipv6Addr>,
    /// Source port.
    pub src_port: Option<u16>,
    /// Destination port.
    pub dst_port: Option<u16>,
    /// ICMP id.
    pub icmp_id: Option<u16>,
    /// ICMP type.
    pub icmp_type: Option<u8>,
    /// ICMP code.
    pub icmp_code: Option<u8>,
}

/// `ofpprop_put_u16()` pads the value inside the property (length 8).
fn put_prop16(w: &mut Writer, ty: u16, v: u16) {
    put_prop(w, ty, &[(v >> 8) as u8, v as u8, 0, 0]);
}

fn put_prop(w: &mut Writer, ty: u16, body: &[u8]) {
    let start = w.len();
    w.u16(ty);
    w.u16(u16::try_from(4 + body.len()).unwrap_or(u16::MAX));
    w.bytes(body);
    w.pad_to(start, 8);
}

impl CtTuple {
    fn encode(&self, w: &mut Writer, ty: u16) {
        let start = w.len();
        w.u16(ty);
        let len = w.place_u16();
        w.zeros(4);
        if let Some(a) = self.src {
            put_prop(w, 0, &a.octets());
        }
        if let Some(a) = self.dst {
            put_prop(w, 1, &a.octets());
        }
        if let Some(p) = self.src_port {
            put_prop16(w, 2, p);
        }
        if let Some(p) = self.dst_port {
            put_prop16(w, 3, p);
        }
        if let Some(p) = self.icmp_id {
            put_prop16(w, 4, p);
        }
        if let Some(p) = self.icmp_type {
            put_prop(w, 5, &[p]);
        }
        if let Some(p) = self.icmp_code {
            put_prop(w, 6, &[p]);
        }
        w.fill_len(len, start);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.pad(4, "nx_ct_flush tuple")?;
        let mut t = CtTuple::default();
        while !r.is_empty() {
            let ty = r.u16()?;
            let len = usize::from(r.u16()?);
            if len < 4 {
                return Err(DecodeError::BadLength {
                    what: "ct tuple property",
                    len,
                });
            }
            let mut p = r.sub(len - 4)?;
            match ty {
                0 => t.src = Some(Ipv6Addr::from(p.array::<16>()?)),
                1 => t.dst = Some(Ipv6Addr::from(p.array::<16>()?)),
                2 => t.src_port = Some(p.u16()?),
                3 => t.dst_port = Some(p.u16()?),
                4 => t.icmp_id = Some(p.u16()?),
                5 => t.icmp_type = Some(p.u8()?),
                6 => t.icmp_code = Some(p.u8()?),
                _ => return Err(DecodeError::BadValue("ct tuple property")),
            }
            p.pad(p.remaining(), "ct tuple property")?;
            r.pad(len.next_multiple_of(8) - len, "ct tuple property")?;
        }
        Ok(t)
    }

    fn format(&self, s: &mut String, ip_proto: u8, v4: bool) {
        let ip = |a: Option<Ipv6Addr>| {
            let a = a.unwrap_or(Ipv6Addr::UNSPECIFIED);
            match a.to_ipv4_mapped() {
                Some(v) if v4 => v.to_string(),
                _ => a.to_string(),
            }
        };
        let (sn, dn) = if v4 {
            ("ct_nw_src", "ct_nw_dst")
        } else {
            ("ct_ipv6_src", "ct_ipv6_dst")
        };
        let _ = write!(s, "{sn}={},{dn}={}", ip(self.src), ip(self.dst));
        if ip_proto == 1 || ip_proto == 58 {
            let _ = write!(
                s,
                ",icmp_id={},icmp_type={},icmp_code={}",
                self.icmp_id.unwrap_or(0),
                self.icmp_type.unwrap_or(0),
                self.icmp_code.unwrap_or(0)
            );
        } else {
            let _ = write!(
                s,
                ",ct_tp_src={},ct_tp_dst={}",
                self.src_port.unwrap_or(0),
                self.dst_port.unwrap_or(0)
            );
        }
    }

    fn is_v4(&self) -> bool {
        [self.src, self.dst]
            .iter()
            .flatten()
            .any(|a| a.to_ipv4_mapped().is_some())
    }
}

/// `NXT_CT_FLUSH`: flush conntrack entries of a zone matching tuples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtFlush {
    /// IP protocol of the tuples (0 = any).
    pub ip_proto: u8,
    /// Address family byte.
    pub family: u8,
    /// Original-direction tuple.
    pub orig: Option<CtTuple>,
    /// Reply-direction tuple.
    pub reply: Option<CtTuple>,
    /// Zone, `None` for zone 0 without a property.
    pub zone: Option<u16>,
}

impl CtFlush {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u8(self.ip_proto);
        w.u8(self.family);
        w.zeros(6);
        if let Some(t) = &self.orig {
            t.encode(w, 0);
        }
        if let Some(t) = &self.reply {
            t.encode(w, 1);
        }
        if let Some(z) = self.zone {
            put_prop16(w, 2, z);
        }
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let mut c = CtFlush {
            ip_proto: r.u8()?,
            family: r.u8()?,
            ..CtFlush::default()
        };
        r.pad(6, "nx_ct_flush")?;
        while !r.is_empty() {
            let ty = r.u16()?;
            let len = usize::from(r.u16()?);
            if len < 4 {
                return Err(DecodeError::BadLength {
                    what: "ct flush property",
                    len,
                });
            }
            let mut p = r.sub(len - 4)?;
            match ty {
                0 => c.orig = Some(CtTuple::decode(&mut p)?),
                1 => c.reply = Some(CtTuple::decode(&mut p)?),
                2 => c.zone = Some(p.u16()?),
                _ => return Err(DecodeError::BadValue("ct flush property")),
            }
            p.pad(p.remaining(), "ct flush property")?;
            r.pad(len.next_multiple_of(8) - len, "ct flush property")?;
        }
        Ok(c)
    }
}

impl fmt::Display for CtFlush {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let empty = CtTuple::default();
        let orig = self.orig.as_ref().unwrap_or(&empty);
        let reply = self.reply.as_ref().unwrap_or(&empty);
        let v4 = orig.is_v4() || reply.is_v4();
        let mut s = format!(" zone={} '", self.zone.unwrap_or(0));
        orig.format(&mut s, self.ip_proto, v4);
        let _ = write!(s, ",ct_nw_proto={}' '", self.ip_proto);
        reply.format(&mut s, self.ip_proto, v4);
        s.push('\'');
        f.write_str(&s)
    }
}
