//! The Nicira `ct` and `nat` actions (`nicira-ext.h` `struct
//! nx_action_conntrack`, `struct nx_action_nat`; `lib/ofp-actions.c`).

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::action::Action;
use crate::error::DecodeError;
use crate::subfield::{Subfield, pull_nxm_header, put_nxm_header};
use crate::wire::{Reader, Writer};

/// `NX_CT_F_COMMIT`.
pub const NX_CT_F_COMMIT: u16 = 1;
/// `NX_CT_F_FORCE`.
pub const NX_CT_F_FORCE: u16 = 2;
/// `NX_CT_RECIRC_NONE`: no recirculation table.
pub const NX_CT_RECIRC_NONE: u8 = 0xff;

/// Where the conntrack zone comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CtZone {
    /// An immediate zone (`zone=5`; 0 is the default zone).
    Imm(u16),
    /// A field's bits (`zone=NXM_NX_REG0[0..15]`).
    Field(Subfield),
}

/// `ct(...)`: send the packet through the connection tracker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ct {
    /// Commit the connection (`commit`).
    pub commit: bool,
    /// Commit even if the connection goes the other way (`force`).
    pub force: bool,
    /// Zone.
    pub zone: CtZone,
    /// Table to recirculate to (`table=N`), if any.
    pub table: Option<u8>,
    /// ALG port (21 = ftp, 69 = tftp), 0 for none.
    pub alg: u16,
    /// NAT, encoded as the first nested action.
    pub nat: Option<Nat>,
    /// Other nested actions (`exec(...)`), only `set_field` to `ct_mark`/`ct_label` in OVS.
    pub exec: Vec<Action>,
}

impl Default for Ct {
    fn default() -> Self {
        Ct {
            commit: false,
            force: false,
            zone: CtZone::Imm(0),
            table: None,
            alg: 0,
            nat: None,
            exec: Vec::new(),
        }
    }
}

impl Ct {
    /// Writes the body after the Nicira subtype (nicira-ext.h `struct nx_action_conntrack`).
    pub(crate) fn encode_body(&self, w: &mut Writer) {
        w.u16((u16::from(self.commit) * NX_CT_F_COMMIT) | (u16::from(self.force) * NX_CT_F_FORCE));
        match self.zone {
            CtZone::Imm(z) => {
                w.u32(0);
                w.u16(z);
            }
            CtZone::Field(sf) => {
                put_nxm_header(w, sf.field);
                w.u16(sf.ofs_nbits());
            }
        }
        w.u8(self.table.unwrap_or(NX_CT_RECIRC_NONE));
        w.zeros(3);
        w.u16(self.alg);
        if let Some(nat) = &self.nat {
            nat.encode(w);
        }
        for a in &self.exec {
            a.encode(w);
        }
    }

    pub(crate) fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let flags = r.u16()?;
        if flags & !(NX_CT_F_COMMIT | NX_CT_F_FORCE) != 0 {
            return Err(DecodeError::BadValue("ct flags"));
        }
        let zone_src = r.peek(4)?;
        let zone = if zone_src == [0, 0, 0, 0] {
            r.u32()?;
            CtZone::Imm(r.u16()?)
        } else {
            let field = pull_nxm_header(r)?;
            CtZone::Field(Subfield::from_ofs_nbits(field, r.u16()?)?)
        };
        let table = r.u8()?;
        r.pad(3, "nx_action_conntrack")?;
        let alg = r.u16()?;
        let mut nat = None;
        let mut actions = Vec::new();
        while !r.is_empty() {
            if nat.is_none() && actions.is_empty() {
                if let Some(n) = Nat::decode_action(r)? {
                    nat = Some(n);
                    continue;
                }
            }
            match Action::decode(r)? {
                Action::Nat(n) if nat.is_none() && actions.is_empty() => nat = Some(n),
                a => actions.push(a),
            }
        }
        Ok(Ct {
            commit: flags & NX_CT_F_COMMIT != 0,
            force: flags & NX_CT_F_FORCE != 0,
            zone,
            table: (table != NX_CT_RECIRC_NONE).then_some(table),
            alg,
            nat,
            exec: actions,
        })
    }
}

impl fmt::Display for Ct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::from("ct(");
        if self.commit {
            s.push_str("commit,");
        }
        if self.force {
            s.push_str("force,");
        }
        if let Some(t) = self.table {
            let _ = write!(s, "table={t},");
        }
        match self.zone {
            CtZone::Field(sf) => {
                let _ = write!(s, "zone={sf},");
            }
            CtZone::Imm(0) => {}
            CtZone::Imm(z) => {
                let _ = write!(s, "zone={z},");
            }
        }
        if let Some(nat) = &self.nat {
            let _ = write!(s, "{nat},");
        }
        if !self.exec.is_empty() {
            s.push_str("exec(");
            s.push_str(&crate::action::format_actions(&self.exec));
            s.push_str("),");
        }
        match self.alg {
            0 => {}
            21 => s.push_str("alg=ftp,"),
            69 => s.push_str("alg=tftp,"),
            a => {
                let _ = write!(s, "alg={a},");
            }
        }
        if s.ends_with(',') {
            s.pop();
        }
        s.push(')');
        f.write_str(&s)
    }
}

/// `NX_NAT_F_SRC`.
pub const NX_NAT_F_SRC: u16 = 1 << 0;
/// `NX_NAT_F_DST`.
pub const NX_NAT_F_DST: u16 = 1 << 1;
/// `NX_NAT_F_PERSISTENT`.
pub const NX_NAT_F_PERSISTENT: u16 = 1 << 2;
/// `NX_NAT_F_PROTO_HASH`.
pub const NX_NAT_F_PROTO_HASH: u16 = 1 << 3;
/// `NX_NAT_F_PROTO_RANDOM`.
pub const NX_NAT_F_PROTO_RANDOM: u16 = 1 << 4;

/// `nat(...)` inside `ct` (nicira-ext.h `struct nx_action_nat`).
///
/// Range members are optional exactly as `range_present` bits are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Nat {
    /// `NX_NAT_F_*` flags.
    pub flags: u16,
    /// Lowest IPv4 address.
    pub ipv4_min: Option<Ipv4Addr>,
    /// Highest IPv4 address.
    pub ipv4_max: Option<Ipv4Addr>,
    /// Lowest IPv6 address.
    pub ipv6_min: Option<Ipv6Addr>,
    /// Highest IPv6 address.
    pub ipv6_max: Option<Ipv6Addr>,
    /// Lowest port.
    pub proto_min: Option<u16>,
    /// Highest port.
    pub proto_max: Option<u16>,
}

impl Nat {
    /// `nat(dst=IP:PORT)` (`nat(dst=[IPv6]:PORT)`).
    pub fn dnat(ip: impl Into<IpAddr>, port: Option<u16>) -> Self {
        Nat {
            flags: NX_NAT_F_DST,
            proto_min: port,
            ..Nat::default()
        }
        .at(ip.into())
    }

    /// `nat(src=IP)`.
    pub fn snat(ip: impl Into<IpAddr>) -> Self {
        Nat {
            flags: NX_NAT_F_SRC,
            ..Nat::default()
        }
        .at(ip.into())
    }

    /// The same with `ip` as its lowest address, in its family's member.
    fn at(self, ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Nat {
                ipv4_min: Some(v4),
                ..self
            },
            IpAddr::V6(v6) => Nat {
                ipv6_min: Some(v6),
                ..self
            },
        }
    }

    fn range_present(&self) -> u16 {
        u16::from(self.ipv4_min.is_some())
            | u16::from(self.ipv4_max.is_some()) << 1
            | u16::from(self.ipv6_min.is_some()) << 2
            | u16::from(self.ipv6_max.is_some()) << 3
            | u16::from(self.proto_min.is_some()) << 4
            | u16::from(self.proto_max.is_some()) << 5
    }

    /// Writes the whole `NXAST_NAT` action (`struct nx_action_nat`): the one
    /// NAT encoder, for [`Action::Nat`] and for the `nat` inside a `ct`.
    pub(crate) fn encode(&self, w: &mut Writer) {
        crate::action::nx_action(w, |w| {
            w.u16(crate::action::nxast::NAT);
            self.encode_fields(w);
        });
    }

    fn encode_fields(&self, w: &mut Writer) {
        w.zeros(2);
        w.u16(self.flags);
        w.u16(self.range_present());
        if let Some(a) = self.ipv4_min {
            w.bytes(&a.octets());
        }
        if let Some(a) = self.ipv4_max {
            w.bytes(&a.octets());
        }
        if let Some(a) = self.ipv6_min {
            w.bytes(&a.octets());
        }
        if let Some(a) = self.ipv6_max {
            w.bytes(&a.octets());
        }
        if let Some(p) = self.proto_min {
            w.u16(p);
        }
        if let Some(p) = self.proto_max {
            w.u16(p);
        }
    }

    /// A whole `NXAST_NAT` action (`struct nx_action_nat`), read directly
    /// rather than through [`Action::decode`], with the same checks and
    /// errors. `None`, consuming nothing, when the next action is something
    /// else or malformed at the header level, for the generic path to handle.
    #[inline]
    fn decode_action(r: &mut Reader<'_>) -> Result<Option<Self>, DecodeError> {
        let Ok(&[0xff, 0xff, l0, l1, v0, v1, v2, v3, s0, s1]) = r.peek(10) else {
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([l0, l1]));
        if u32::from_be_bytes([v0, v1, v2, v3]) != crate::action::NX_VENDOR_ID
            || u16::from_be_bytes([s0, s1]) != crate::action::nxast::NAT
            || len < 16
            || len % 8 != 0
            || len > r.remaining()
        {
            return Ok(None);
        }
        let mut b = r.sub(len)?;
        b.take(10)?;
        Nat::decode(&mut b).map(Some)
    }

    /// Reads an `NXAST_NAT` action after its subtype, to the end of `r`: the
    /// one NAT decoder, for [`Action::decode`] and for the `nat` inside a `ct`.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        r.pad(2, "nx_action_nat")?;
        let flags = r.u16()?;
        let present = r.u16()?;
        if present & !0x3f != 0 || flags & !0x1f != 0 {
            return Err(DecodeError::BadValue("nat"));
        }
        let bit = |b: u16| present & b != 0;
        let v4 = |r: &mut Reader<'_>| r.array::<4>().map(Ipv4Addr::from);
        let v6 = |r: &mut Reader<'_>| r.array::<16>().map(Ipv6Addr::from);
        let nat = Nat {
            flags,
            ipv4_min: if bit(1) { Some(v4(r)?) } else { None },
            ipv4_max: if bit(2) { Some(v4(r)?) } else { None },
            ipv6_min: if bit(4) { Some(v6(r)?) } else { None },
            ipv6_max: if bit(8) { Some(v6(r)?) } else { None },
            proto_min: if bit(16) { Some(r.u16()?) } else { None },
            proto_max: if bit(32) { Some(r.u16()?) } else { None },
        };
        r.pad(r.remaining(), "nx_action_nat")?;
        Ok(nat)
    }
}

impl fmt::Display for Nat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("nat")?;
        if self.flags & (NX_NAT_F_SRC | NX_NAT_F_DST) == 0 {
            return Ok(());
        }
        let mut s = String::from("(");
        s.push_str(if self.flags & NX_NAT_F_SRC != 0 {
            "src"
        } else {
            "dst"
        });
        let pmin = self.proto_min.unwrap_or(0);
        let has_range = self.ipv4_min.is_some() || self.ipv6_min.is_some();
        if has_range {
            s.push('=');
            if let Some(min) = self.ipv4_min {
                let _ = write!(s, "{min}");
                if let Some(max) = self.ipv4_max.filter(|m| !m.is_unspecified() && *m != min) {
                    let _ = write!(s, "-{max}");
                }
            } else if let Some(min) = self.ipv6_min {
                let br = |a: Ipv6Addr| {
                    if pmin != 0 {
                        format!("[{}]", crate::text::inet_ntop6(&a))
                    } else {
                        crate::text::inet_ntop6(&a)
                    }
                };
                s.push_str(&br(min));
                if let Some(max) = self.ipv6_max.filter(|m| !m.is_unspecified() && *m != min) {
                    let _ = write!(s, "-{}", br(max));
                }
            }
            if pmin != 0 {
                let _ = write!(s, ":{pmin}");
                if let Some(max) = self.proto_max.filter(|&m| m != 0 && m != pmin) {
                    let _ = write!(s, "-{max}");
                }
            }
        }
        s.push(',');
        if self.flags & NX_NAT_F_PERSISTENT != 0 {
            s.push_str("persistent,");
        }
        if self.flags & NX_NAT_F_PROTO_HASH != 0 {
            s.push_str("hash,");
        }
        if self.flags & NX_NAT_F_PROTO_RANDOM != 0 {
            s.push_str("random,");
        }
        s.pop();
        s.push(')');
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A standalone `nat` action and the `nat` inside a `ct` are the same bytes, written by
    /// one encoder and read back by one decoder on both paths (the `ct` fast path and
    /// `Action::decode`).
    #[test]
    fn one_nat_codec_for_both_paths() {
        let nat = Nat {
            flags: NX_NAT_F_DST | NX_NAT_F_PROTO_HASH,
            ipv4_min: Some(Ipv4Addr::new(10, 0, 0, 1)),
            ipv4_max: Some(Ipv4Addr::new(10, 0, 0, 9)),
            proto_min: Some(80),
            proto_max: Some(90),
            ..Nat::default()
        };
        let mut alone = Writer::new();
        Action::Nat(nat.clone()).encode(&mut alone);
        let ct = Action::Ct(Ct {
            commit: true,
            nat: Some(nat.clone()),
            exec: vec![Action::Nat(nat.clone())],
            ..Ct::default()
        });
        let mut inside = Writer::new();
        ct.encode(&mut inside);
        // ct's 24-byte header, then the nat (read by the fast path), then the same nat
        // again as an exec action (read by `Action::decode`).
        let n = alone.len();
        assert_eq!(&inside.as_slice()[24..24 + n], alone.as_slice());
        assert_eq!(&inside.as_slice()[24 + n..], alone.as_slice());
        assert_eq!(
            Action::decode(&mut Reader::new(alone.as_slice())).unwrap(),
            Action::Nat(nat)
        );
        assert_eq!(
            Action::decode(&mut Reader::new(inside.as_slice())).unwrap(),
            ct
        );
    }
}
