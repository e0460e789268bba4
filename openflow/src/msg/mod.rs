//! OpenFlow 1.3 messages (OF1.3 §7.1 `struct ofp_header`, §7.3–7.5).
//!
//! [`Message`] is an xid plus a typed [`Body`]. Message types and
//! experimenter messages we do not interpret are kept raw and re-encode
//! identically. Encoding fails only when the message would exceed 65,535
//! bytes.

mod basic;
mod ext;
mod fixed;
mod flow;
mod group;
mod meter;
mod multipart;
mod packet;
mod port;

pub use basic::{
    AsyncConfig, ErrorMsg, Features, Hello, OFPET_EXPERIMENTER, PortMod, Role, SwitchConfig,
    TableMod, error_name, ofperr_name,
};
pub use ext::{BundleAdd, BundleControl, CtFlush, CtTuple, RawProperty};
pub use fixed::FixedStr;
pub use flow::{FlowMod, FlowModCommand, FlowRemoved};
pub use group::{Bucket, GroupMod, GroupModCommand, GroupType};
pub use meter::{
    MeterBand, MeterConfig, MeterFeatures, MeterMod, MeterModCommand, MeterStats, OFPM_ALL,
    OFPM_CONTROLLER, OFPM_MAX, OFPM_SLOWPATH, OFPMF_BURST, OFPMF_KBPS, OFPMF_PKTPS, OFPMF_STATS,
};
pub use multipart::{
    AggregateStats, FlowStats, FlowStatsRequest, GroupDesc, GroupFeatures, GroupStats,
    MultipartBody, MultipartReply, MultipartRequest, PortStats, SwitchDesc, TableStats,
};
pub use packet::{PacketIn, PacketOut};
pub use port::{PortDesc, PortStatus};

use std::fmt;

use crate::error::{DecodeError, EncodeError};
use crate::wire::{Reader, Writer};

/// `OFP13_VERSION`.
pub const OFP13_VERSION: u8 = 0x04;
/// Size of `struct ofp_header`.
pub const HEADER_LEN: usize = 8;
/// The largest message an OpenFlow length field can describe.
pub const MAX_MESSAGE_LEN: usize = 65_535;
/// Nicira experimenter id.
pub const NX_EXPERIMENTER: u32 = 0x0000_2320;
/// ONF experimenter id.
pub const ONF_EXPERIMENTER: u32 = 0x4f4e_4600;

/// `enum ofp_type` values (OF1.3 §7.1).
pub mod ofpt {
    #![allow(missing_docs)]
    pub const HELLO: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const ECHO_REQUEST: u8 = 2;
    pub const ECHO_REPLY: u8 = 3;
    pub const EXPERIMENTER: u8 = 4;
    pub const FEATURES_REQUEST: u8 = 5;
    pub const FEATURES_REPLY: u8 = 6;
    pub const GET_CONFIG_REQUEST: u8 = 7;
    pub const GET_CONFIG_REPLY: u8 = 8;
    pub const SET_CONFIG: u8 = 9;
    pub const PACKET_IN: u8 = 10;
    pub const FLOW_REMOVED: u8 = 11;
    pub const PORT_STATUS: u8 = 12;
    pub const PACKET_OUT: u8 = 13;
    pub const FLOW_MOD: u8 = 14;
    pub const GROUP_MOD: u8 = 15;
    pub const PORT_MOD: u8 = 16;
    pub const TABLE_MOD: u8 = 17;
    pub const MULTIPART_REQUEST: u8 = 18;
    pub const MULTIPART_REPLY: u8 = 19;
    pub const BARRIER_REQUEST: u8 = 20;
    pub const BARRIER_REPLY: u8 = 21;
    pub const ROLE_REQUEST: u8 = 24;
    pub const ROLE_REPLY: u8 = 25;
    pub const GET_ASYNC_REQUEST: u8 = 26;
    pub const GET_ASYNC_REPLY: u8 = 27;
    pub const SET_ASYNC: u8 = 28;
    pub const METER_MOD: u8 = 29;
}

/// Experimenter message subtypes we interpret.
mod exp {
    pub const NXT_CT_FLUSH_ZONE: u32 = 29;
    pub const NXT_CT_FLUSH: u32 = 32;
    pub const ONFT_BUNDLE_CONTROL: u32 = 2300;
    pub const ONFT_BUNDLE_ADD_MESSAGE: u32 = 2301;
    /// `ONFT_ROLE_STATUS` (OF1.4's `ofp_role_status` in OF1.3 experimenter form).
    pub const ONFT_ROLE_STATUS: u32 = 1911;
}

/// The `ovs-ofctl` name of a message type code (multipart and experimenter
/// messages need their bodies for a precise name).
pub(crate) fn type_name_of(ty: u8) -> String {
    let names = [
        "OFPT_HELLO",
        "OFPT_ERROR",
        "OFPT_ECHO_REQUEST",
        "OFPT_ECHO_REPLY",
        "OFPT_EXPERIMENTER",
        "OFPT_FEATURES_REQUEST",
        "OFPT_FEATURES_REPLY",
        "OFPT_GET_CONFIG_REQUEST",
        "OFPT_GET_CONFIG_REPLY",
        "OFPT_SET_CONFIG",
        "OFPT_PACKET_IN",
        "OFPT_FLOW_REMOVED",
        "OFPT_PORT_STATUS",
        "OFPT_PACKET_OUT",
        "OFPT_FLOW_MOD",
        "OFPT_GROUP_MOD",
        "OFPT_PORT_MOD",
        "OFPT_TABLE_MOD",
        "OFPT_MULTIPART_REQUEST",
        "OFPT_MULTIPART_REPLY",
        "OFPT_BARRIER_REQUEST",
        "OFPT_BARRIER_REPLY",
        "OFPT_QUEUE_GET_CONFIG_REQUEST",
        "OFPT_QUEUE_GET_CONFIG_REPLY",
        "OFPT_ROLE_REQUEST",
        "OFPT_ROLE_REPLY",
        "OFPT_GET_ASYNC_REQUEST",
        "OFPT_GET_ASYNC_REPLY",
        "OFPT_SET_ASYNC",
        "OFPT_METER_MOD",
    ];
    names
        .get(usize::from(ty))
        .map_or_else(|| format!("OFPT_UNKNOWN({ty})"), |s| s.to_string())
}

/// One OpenFlow message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Transaction id.
    pub xid: u32,
    /// The typed body.
    pub body: Body,
}

/// A message body, by type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// `OFPT_HELLO`.
    Hello(Hello),
    /// `OFPT_ERROR`.
    Error(ErrorMsg),
    /// `OFPT_ECHO_REQUEST` with its payload.
    EchoRequest(Vec<u8>),
    /// `OFPT_ECHO_REPLY` with its payload.
    EchoReply(Vec<u8>),
    /// `OFPT_FEATURES_REQUEST`.
    FeaturesRequest,
    /// `OFPT_FEATURES_REPLY`.
    FeaturesReply(Features),
    /// `OFPT_GET_CONFIG_REQUEST`.
    GetConfigRequest,
    /// `OFPT_GET_CONFIG_REPLY`.
    GetConfigReply(SwitchConfig),
    /// `OFPT_SET_CONFIG`.
    SetConfig(SwitchConfig),
    /// `OFPT_PACKET_IN`.
    PacketIn(PacketIn),
    /// `OFPT_FLOW_REMOVED`.
    FlowRemoved(FlowRemoved),
    /// `OFPT_PORT_STATUS`.
    PortStatus(PortStatus),
    /// `OFPT_PACKET_OUT`.
    PacketOut(PacketOut),
    /// `OFPT_FLOW_MOD`.
    FlowMod(FlowMod),
    /// `OFPT_GROUP_MOD`.
    GroupMod(GroupMod),
    /// `OFPT_PORT_MOD`.
    PortMod(PortMod),
    /// `OFPT_TABLE_MOD`.
    TableMod(TableMod),
    /// `OFPT_MULTIPART_REQUEST`.
    MultipartRequest(MultipartRequest),
    /// `OFPT_MULTIPART_REPLY`.
    MultipartReply(MultipartReply),
    /// `OFPT_BARRIER_REQUEST`.
    BarrierRequest,
    /// `OFPT_BARRIER_REPLY`.
    BarrierReply,
    /// `OFPT_ROLE_REQUEST`.
    RoleRequest(Role),
    /// `OFPT_ROLE_REPLY`.
    RoleReply(Role),
    /// `OFPT_GET_ASYNC_REQUEST`.
    GetAsyncRequest,
    /// `OFPT_GET_ASYNC_REPLY`.
    GetAsyncReply(AsyncConfig),
    /// `OFPT_SET_ASYNC`.
    SetAsync(AsyncConfig),
    /// `OFPT_METER_MOD`.
    MeterMod(MeterMod),
    /// ONF `ONFT_BUNDLE_CONTROL` in OF1.3 experimenter form.
    BundleControl(BundleControl),
    /// ONF `ONFT_BUNDLE_ADD_MESSAGE` in OF1.3 experimenter form.
    BundleAdd(BundleAdd),
    /// Nicira `NXT_CT_FLUSH_ZONE`.
    CtFlushZone(u16),
    /// Nicira `NXT_CT_FLUSH`.
    CtFlush(CtFlush),
    /// Any other `OFPT_EXPERIMENTER` message.
    Experimenter {
        /// Experimenter id.
        experimenter: u32,
        /// Experimenter-defined type.
        exp_type: u32,
        /// Body after the experimenter header.
        data: Vec<u8>,
    },
    /// A message type we do not interpret: the bytes after the header.
    Unknown {
        /// `ofp_type`.
        msg_type: u8,
        /// Body.
        data: Vec<u8>,
    },
}

impl Body {
    /// The `ofp_type` of this body.
    pub fn msg_type(&self) -> u8 {
        use ofpt::*;
        match self {
            Body::Hello(_) => HELLO,
            Body::Error(_) => ERROR,
            Body::EchoRequest(_) => ECHO_REQUEST,
            Body::EchoReply(_) => ECHO_REPLY,
            Body::FeaturesRequest => FEATURES_REQUEST,
            Body::FeaturesReply(_) => FEATURES_REPLY,
            Body::GetConfigRequest => GET_CONFIG_REQUEST,
            Body::GetConfigReply(_) => GET_CONFIG_REPLY,
            Body::SetConfig(_) => SET_CONFIG,
            Body::PacketIn(_) => PACKET_IN,
            Body::FlowRemoved(_) => FLOW_REMOVED,
            Body::PortStatus(_) => PORT_STATUS,
            Body::PacketOut(_) => PACKET_OUT,
            Body::FlowMod(_) => FLOW_MOD,
            Body::GroupMod(_) => GROUP_MOD,
            Body::PortMod(_) => PORT_MOD,
            Body::TableMod(_) => TABLE_MOD,
            Body::MultipartRequest(_) => MULTIPART_REQUEST,
            Body::MultipartReply(_) => MULTIPART_REPLY,
            Body::BarrierRequest => BARRIER_REQUEST,
            Body::BarrierReply => BARRIER_REPLY,
            Body::RoleRequest(_) => ROLE_REQUEST,
            Body::RoleReply(_) => ROLE_REPLY,
            Body::GetAsyncRequest => GET_ASYNC_REQUEST,
            Body::GetAsyncReply(_) => GET_ASYNC_REPLY,
            Body::SetAsync(_) => SET_ASYNC,
            Body::MeterMod(_) => METER_MOD,
            Body::BundleControl(_)
            | Body::BundleAdd(_)
            | Body::CtFlushZone(_)
            | Body::CtFlush(_)
            | Body::Experimenter { .. } => EXPERIMENTER,
            Body::Unknown { msg_type, .. } => *msg_type,
        }
    }
}

impl Message {
    /// A message with the given xid and body.
    pub fn new(xid: u32, body: Body) -> Self {
        Message { xid, body }
    }

    /// The length a message starting at `buf` declares, once 4 bytes are available.
    pub fn frame_len(buf: &[u8]) -> Option<usize> {
        match buf {
            [_, _, a, b, ..] => Some(usize::from(u16::from_be_bytes([*a, *b]))),
            _ => None,
        }
    }

    /// Encodes the message, failing if it exceeds 65,535 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        let mut w = Writer::new();
        self.encode_into(&mut w)?;
        Ok(w.into_vec())
    }

    /// The encoded size (also valid above the limit, for splitting decisions).
    pub fn encoded_len(&self) -> usize {
        let mut w = Writer::new();
        self.write_inner(&mut w);
        w.len()
    }

    /// Appends the encoded message to `w`. It fails only when the message exceeds 65,535
    /// bytes: what could be refused is refused where the value is built (a match's
    /// prerequisites by [`crate::Match::checked`], a conntrack flush's address families by
    /// [`CtFlush::checked`]), or on decode for what comes from the wire.
    pub fn encode_into(&self, w: &mut Writer) -> Result<(), EncodeError> {
        let start = w.len();
        self.write_inner(w);
        let len = w.len() - start;
        if len > MAX_MESSAGE_LEN {
            return Err(EncodeError::TooLong(len));
        }
        Ok(())
    }

    pub(crate) fn write_inner(&self, w: &mut Writer) {
        let start = w.len();
        let version = match &self.body {
            Body::Hello(h) => h.version,
            _ => OFP13_VERSION,
        };
        w.u8(version);
        w.u8(self.body.msg_type());
        let len = w.place_u16();
        w.u32(self.xid);
        match &self.body {
            Body::Hello(h) => h.encode(w),
            Body::Error(e) => e.encode(w),
            Body::EchoRequest(d) | Body::EchoReply(d) => w.bytes(d),
            Body::FeaturesRequest
            | Body::GetConfigRequest
            | Body::BarrierRequest
            | Body::BarrierReply
            | Body::GetAsyncRequest => {}
            Body::FeaturesReply(f) => f.encode(w),
            Body::GetConfigReply(c) | Body::SetConfig(c) => c.encode(w),
            Body::PacketIn(p) => p.encode(w),
            Body::FlowRemoved(f) => f.encode(w),
            Body::PortStatus(p) => p.encode(w),
            Body::PacketOut(p) => p.encode(w),
            Body::FlowMod(f) => f.encode(w),
            Body::GroupMod(g) => g.encode(w),
            Body::PortMod(p) => p.encode(w),
            Body::TableMod(t) => t.encode(w),
            Body::MultipartRequest(m) => m.encode(w),
            Body::MultipartReply(m) => m.encode(w),
            Body::RoleRequest(r) | Body::RoleReply(r) => r.encode(w),
            Body::GetAsyncReply(a) | Body::SetAsync(a) => a.encode(w),
            Body::MeterMod(m) => m.encode(w),
            Body::BundleControl(b) => {
                w.u32(ONF_EXPERIMENTER);
                w.u32(exp::ONFT_BUNDLE_CONTROL);
                b.encode(w);
            }
            Body::BundleAdd(b) => {
                w.u32(ONF_EXPERIMENTER);
                w.u32(exp::ONFT_BUNDLE_ADD_MESSAGE);
                b.encode(w);
            }
            Body::CtFlushZone(z) => {
                w.u32(NX_EXPERIMENTER);
                w.u32(exp::NXT_CT_FLUSH_ZONE);
                w.zeros(6);
                w.u16(*z);
            }
            Body::CtFlush(c) => {
                w.u32(NX_EXPERIMENTER);
                w.u32(exp::NXT_CT_FLUSH);
                c.encode(w);
            }
            Body::Experimenter {
                experimenter,
                exp_type,
                data,
            } => {
                w.u32(*experimenter);
                w.u32(*exp_type);
                w.bytes(data);
            }
            Body::Unknown { data, .. } => w.bytes(data),
        }
        w.fill_len(len, start);
    }

    /// Decodes exactly one message occupying all of `buf`.
    pub fn decode(buf: &[u8]) -> Result<Message, DecodeError> {
        let mut r = Reader::new(buf);
        let version = r.u8()?;
        let ty = r.u8()?;
        let len = usize::from(r.u16()?);
        let xid = r.u32()?;
        if len < HEADER_LEN {
            return Err(DecodeError::BadLength {
                what: "ofp_header",
                len,
            });
        }
        if len != buf.len() {
            return if len > buf.len() {
                Err(DecodeError::Truncated {
                    needed: len,
                    available: buf.len(),
                })
            } else {
                Err(DecodeError::TrailingData(buf.len() - len))
            };
        }
        if version != OFP13_VERSION && ty != ofpt::HELLO {
            return Err(DecodeError::BadVersion(version));
        }
        let b = &mut r;
        use ofpt::*;
        let body = match ty {
            HELLO => Body::Hello(Hello::decode(version, b)?),
            ERROR => Body::Error(ErrorMsg::decode(b)?),
            ECHO_REQUEST => Body::EchoRequest(b.rest().to_vec()),
            ECHO_REPLY => Body::EchoReply(b.rest().to_vec()),
            FEATURES_REQUEST => Body::FeaturesRequest,
            FEATURES_REPLY => Body::FeaturesReply(Features::decode(b)?),
            GET_CONFIG_REQUEST => Body::GetConfigRequest,
            GET_CONFIG_REPLY => Body::GetConfigReply(SwitchConfig::decode(b)?),
            SET_CONFIG => Body::SetConfig(SwitchConfig::decode(b)?),
            PACKET_IN => Body::PacketIn(PacketIn::decode(b)?),
            FLOW_REMOVED => Body::FlowRemoved(FlowRemoved::decode(b)?),
            PORT_STATUS => Body::PortStatus(PortStatus::decode(b)?),
            PACKET_OUT => Body::PacketOut(PacketOut::decode(b)?),
            FLOW_MOD => Body::FlowMod(FlowMod::decode(b)?),
            GROUP_MOD => Body::GroupMod(GroupMod::decode(b)?),
            PORT_MOD => Body::PortMod(PortMod::decode(b)?),
            TABLE_MOD => Body::TableMod(TableMod::decode(b)?),
            MULTIPART_REQUEST => Body::MultipartRequest(MultipartRequest::decode(b)?),
            MULTIPART_REPLY => Body::MultipartReply(MultipartReply::decode(b)?),
            BARRIER_REQUEST => Body::BarrierRequest,
            BARRIER_REPLY => Body::BarrierReply,
            ROLE_REQUEST => Body::RoleRequest(Role::decode(b)?),
            ROLE_REPLY => Body::RoleReply(Role::decode(b)?),
            GET_ASYNC_REQUEST => Body::GetAsyncRequest,
            GET_ASYNC_REPLY => Body::GetAsyncReply(AsyncConfig::decode(b)?),
            SET_ASYNC => Body::SetAsync(AsyncConfig::decode(b)?),
            METER_MOD => Body::MeterMod(MeterMod::decode(b)?),
            EXPERIMENTER => {
                let experimenter = b.u32()?;
                let exp_type = b.u32()?;
                match (experimenter, exp_type) {
                    (ONF_EXPERIMENTER, exp::ONFT_BUNDLE_CONTROL) => {
                        Body::BundleControl(BundleControl::decode(b)?)
                    }
                    (ONF_EXPERIMENTER, exp::ONFT_BUNDLE_ADD_MESSAGE) => {
                        Body::BundleAdd(BundleAdd::decode(b)?)
                    }
                    (NX_EXPERIMENTER, exp::NXT_CT_FLUSH_ZONE) => {
                        b.pad(6, "nx_zone_id")?;
                        Body::CtFlushZone(b.u16()?)
                    }
                    (NX_EXPERIMENTER, exp::NXT_CT_FLUSH) => Body::CtFlush(CtFlush::decode(b)?),
                    _ => Body::Experimenter {
                        experimenter,
                        exp_type,
                        data: b.rest().to_vec(),
                    },
                }
            }
            _ => Body::Unknown {
                msg_type: ty,
                data: b.rest().to_vec(),
            },
        };
        r.finish()?;
        Ok(Message { xid, body })
    }

    /// The `ofperr` name with which `ovs-ofctl` 3.1 refuses a message this
    /// codec accepts: an error OVS cannot name (`ofp_print_error_msg()`
    /// answers `OFPBRC_BAD_LEN`), a port-stats reply with a port number
    /// outside OVS's 16-bit range (`OFPBAC_BAD_OUT_PORT`), or a message type,
    /// experimenter id or multipart type OVS has no `ofpraw` for in OF1.3
    /// (`OFPBRC_BAD_TYPE`, `OFPBRC_BAD_VENDOR`, `OFPBRC_BAD_STAT`; see
    /// `lib/ofp-msgs.c`).
    pub fn ovs_decode_error(&self) -> Option<&'static str> {
        self.ovs_refusal().map(|(error, _)| error)
    }

    /// [`Message::ovs_decode_error`], and whether `ovs-ofctl` prints the
    /// header line before it (it does once `ofpraw_decode()` has succeeded).
    fn ovs_refusal(&self) -> Option<(&'static str, bool)> {
        // OF1.3 multipart types end at OFPMP_PORT_DESC (13); 0xffff is OFPMP_EXPERIMENTER.
        let raw_multipart = |b: &MultipartBody| match b {
            MultipartBody::Raw { mp_type, .. } => (14..0xffff).contains(mp_type),
            _ => false,
        };
        match &self.body {
            Body::Error(e) if e.ovs_name().is_none() => Some(("OFPBRC_BAD_LEN", true)),
            Body::MeterMod(m) => m.ovs_error().map(|e| (e, true)),
            // OVS decodes these matches strictly (`oxm_pull_match()`): a field it does not
            // know is `OFPBMC_BAD_FIELD`. Packet-ins are decoded loosely and skip it.
            Body::FlowMod(FlowMod { match_, .. })
            | Body::FlowRemoved(FlowRemoved { match_, .. })
            | Body::MultipartRequest(MultipartRequest {
                body:
                    MultipartBody::FlowRequest(FlowStatsRequest { match_, .. })
                    | MultipartBody::AggregateRequest(FlowStatsRequest { match_, .. }),
                ..
            }) if !match_.unknown.is_empty() => Some(("OFPBMC_BAD_FIELD", true)),
            Body::MultipartReply(MultipartReply {
                body: MultipartBody::Flow(v),
                ..
            }) if v.iter().any(|s| !s.match_.unknown.is_empty()) => {
                Some(("OFPBMC_BAD_FIELD", true))
            }
            Body::MultipartReply(MultipartReply {
                body: MultipartBody::MeterConfig(v),
                ..
            }) => meter::config_ovs_error(v).map(|(_, e)| (e, true)),
            Body::MultipartReply(MultipartReply {
                body: MultipartBody::PortStats(v),
                ..
            }) if multipart::valid_port_stats(v) < v.len() => Some(("OFPBAC_BAD_OUT_PORT", true)),
            Body::Unknown { msg_type, .. } if *msg_type > 29 => Some(("OFPBRC_BAD_TYPE", false)),
            Body::Experimenter { experimenter, .. }
                if ![NX_EXPERIMENTER, ONF_EXPERIMENTER].contains(experimenter) =>
            {
                Some(("OFPBRC_BAD_VENDOR", false))
            }
            Body::MultipartRequest(MultipartRequest { body, .. })
            | Body::MultipartReply(MultipartReply { body, .. })
                if raw_multipart(body) =>
            {
                Some(("OFPBRC_BAD_STAT", false))
            }
            _ => None,
        }
    }

    /// The name `ovs-ofctl` prints for the message type.
    pub fn type_name(&self) -> String {
        let n = match &self.body {
            Body::Hello(_) => "OFPT_HELLO",
            Body::Error(_) => "OFPT_ERROR",
            Body::EchoRequest(_) => "OFPT_ECHO_REQUEST",
            Body::EchoReply(_) => "OFPT_ECHO_REPLY",
            Body::FeaturesRequest => "OFPT_FEATURES_REQUEST",
            Body::FeaturesReply(_) => "OFPT_FEATURES_REPLY",
            Body::GetConfigRequest => "OFPT_GET_CONFIG_REQUEST",
            Body::GetConfigReply(_) => "OFPT_GET_CONFIG_REPLY",
            Body::SetConfig(_) => "OFPT_SET_CONFIG",
            Body::PacketIn(_) => "OFPT_PACKET_IN",
            Body::FlowRemoved(_) => "OFPT_FLOW_REMOVED",
            Body::PortStatus(_) => "OFPT_PORT_STATUS",
            Body::PacketOut(_) => "OFPT_PACKET_OUT",
            Body::FlowMod(_) => "OFPT_FLOW_MOD",
            Body::GroupMod(_) => "OFPT_GROUP_MOD",
            Body::PortMod(_) => "OFPT_PORT_MOD",
            Body::TableMod(_) => "OFPT_TABLE_MOD",
            Body::MultipartRequest(m) => return m.body.request_name().to_string(),
            Body::MultipartReply(m) => return m.body.reply_name().to_string(),
            Body::BarrierRequest => "OFPT_BARRIER_REQUEST",
            Body::BarrierReply => "OFPT_BARRIER_REPLY",
            Body::RoleRequest(_) => "OFPT_ROLE_REQUEST",
            Body::RoleReply(_) => "OFPT_ROLE_REPLY",
            Body::GetAsyncRequest => "OFPT_GET_ASYNC_REQUEST",
            Body::GetAsyncReply(_) => "OFPT_GET_ASYNC_REPLY",
            Body::SetAsync(_) => "OFPT_SET_ASYNC",
            Body::MeterMod(_) => "OFPT_METER_MOD",
            Body::BundleControl(_) => "ONFT_BUNDLE_CONTROL",
            Body::BundleAdd(_) => "ONFT_BUNDLE_ADD_MESSAGE",
            Body::CtFlushZone(_) => "NXT_CT_FLUSH_ZONE",
            Body::CtFlush(_) => "NXT_CT_FLUSH",
            Body::Experimenter {
                experimenter: ONF_EXPERIMENTER,
                exp_type: exp::ONFT_ROLE_STATUS,
                data,
            } if role_status_text(data).is_some() => "ONFT_ROLE_STATUS",
            Body::Experimenter { .. } => "OFPT_EXPERIMENTER",
            Body::Unknown { msg_type, .. } => return format!("OFPT_UNKNOWN({msg_type})"),
        };
        n.to_string()
    }
}

/// An `ONFT_ROLE_STATUS` body (`ofp14_role_status` after the experimenter header: role,
/// reason, 3 pad bytes, generation id) as `ovs-ofctl` prints it, or `None` if it is not one
/// (it then prints as any experimenter message).
fn role_status_text(data: &[u8]) -> Option<String> {
    if data.len() != 16 || data.get(5..8) != Some(&[0, 0, 0]) {
        return None;
    }
    let role = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?);
    let role = match role {
        0 => "nochange",
        1 => "equal",
        2 => "primary",
        3 => "secondary",
        _ => return None,
    };
    let reason = match data.get(4)? {
        0 => "primary_request",
        1 => "configuration_changed",
        2 => "experimenter_data_changed",
        _ => "(unknown)",
    };
    let generation = u64::from_be_bytes(data.get(8..16)?.try_into().ok()?);
    let mut s = format!(" role={role}");
    if generation != u64::MAX {
        s.push_str(&format!(" generation_id={generation}"));
    }
    s.push_str(&format!(" reason={reason}"));
    Some(s)
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let version = match &self.body {
            Body::Hello(h) => h.version,
            _ => OFP13_VERSION,
        };
        let v = match version {
            1 => "OF1.0".to_string(),
            2 => "OF1.1".to_string(),
            3 => "OF1.2".to_string(),
            4 => "OF1.3".to_string(),
            5 => "OF1.4".to_string(),
            6 => "OF1.5".to_string(),
            v => format!("OF 0x{v:02x}"),
        };
        if let Some((error, header)) = self.ovs_refusal() {
            // `ofp_to_string()`: what it printed before the failure, then the
            // error and a dump of the whole message.
            if header {
                write!(f, "{} ({v}) (xid={:#x}):", self.type_name(), self.xid)?;
                // What it printed of the body, then a newline; or a space if nothing.
                let body = match &self.body {
                    Body::MultipartReply(m) => m.to_string(),
                    _ => String::new(),
                };
                match body.trim_end_matches(' ') {
                    "" => f.write_str(" ")?,
                    b => writeln!(f, "{b}")?,
                }
            }
            let bytes = self.encode().unwrap_or_default();
            return write!(
                f,
                "***decode error: {error}***\n{}",
                crate::text::hex_dump(&bytes)
            );
        }
        write!(f, "{} ({v}) (xid={:#x}):", self.type_name(), self.xid)?;
        match &self.body {
            Body::Hello(h) => write!(f, "{h}"),
            Body::Error(e) => write!(f, "{e}"),
            // `ofp_print_echo()` at `ofp-print`'s verbosity 2 dumps the payload.
            Body::EchoRequest(d) | Body::EchoReply(d) if !d.is_empty() => write!(
                f,
                " {} bytes of payload\n{}",
                d.len(),
                crate::text::hex_dump(d)
            ),
            Body::EchoRequest(d) | Body::EchoReply(d) => write!(f, " {} bytes of payload", d.len()),
            Body::FeaturesReply(x) => write!(f, "{x}"),
            Body::GetConfigReply(c) | Body::SetConfig(c) => write!(f, "{c}"),
            Body::PacketIn(p) => write!(f, "{p}"),
            Body::FlowRemoved(x) => write!(f, "{x}"),
            Body::PortStatus(p) => write!(f, "{p}"),
            Body::PacketOut(p) => write!(f, "{p}"),
            Body::FlowMod(m) => write!(f, "{m}"),
            Body::GroupMod(g) => write!(f, "{g}"),
            Body::PortMod(p) => write!(f, "{p}"),
            Body::TableMod(t) => write!(f, "{t}"),
            Body::MultipartRequest(m) => write!(f, "{m}"),
            Body::MultipartReply(m) => write!(f, "{m}"),
            // A request's generation id means nothing with `nochange` (`lib/ofp-connection.c`).
            Body::RoleRequest(r) if r.role == 0 => f.write_str(" role=nochange"),
            Body::RoleRequest(r) | Body::RoleReply(r) => write!(f, "{r}"),
            Body::GetAsyncReply(a) | Body::SetAsync(a) => write!(f, "{a}"),
            Body::MeterMod(m) => write!(f, "{m}"),
            Body::BundleControl(b) => write!(f, "{b}"),
            Body::BundleAdd(b) => write!(f, "{b}"),
            Body::CtFlushZone(z) => write!(f, " zone_id={z}"),
            Body::CtFlush(c) => write!(f, "{c}"),
            Body::Experimenter {
                experimenter: ONF_EXPERIMENTER,
                exp_type: exp::ONFT_ROLE_STATUS,
                data,
            } if role_status_text(data).is_some() => {
                f.write_str(&role_status_text(data).unwrap_or_default())
            }
            Body::Experimenter {
                experimenter,
                exp_type,
                data,
            } => {
                write!(
                    f,
                    " experimenter={experimenter:#x} exp_type={exp_type} ({} bytes)",
                    data.len()
                )
            }
            Body::Unknown { data, .. } => write!(f, " ({} bytes)", data.len()),
            Body::FeaturesRequest
            | Body::GetConfigRequest
            | Body::BarrierRequest
            | Body::BarrierReply
            | Body::GetAsyncRequest => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::Field;
    use crate::oxm::Match;
    use crate::test_util::unhex;

    /// (message, bytes as ovs-ofctl 3.1 sends them, ovs-ofctl ofp-print text).
    fn table() -> Vec<(Message, &'static str, &'static str)> {
        vec![
            (
                Message::new(1, Body::Hello(Hello::of13())),
                "04000010000000010001000800000010",
                "OFPT_HELLO (OF1.3) (xid=0x1):\n version bitmap: 0x04",
            ),
            (
                Message::new(2, Body::BarrierRequest),
                "0414000800000002",
                "OFPT_BARRIER_REQUEST (OF1.3) (xid=0x2):",
            ),
            (
                Message::new(
                    2,
                    Body::FlowMod(FlowMod {
                        priority: 5,
                        match_: Match::new().with(Field::EthType, 0x0800u16),
                        ..FlowMod::default()
                    }),
                ),
                "040e004000000002000000000000000000000000000000000000000000000005ffffffffffffffffffffffff000000000001000a80000a020800000000000000",
                "OFPT_FLOW_MOD (OF1.3) (xid=0x2): ADD priority=5,ip actions=drop",
            ),
            (
                Message::new(
                    2,
                    Body::GroupMod(GroupMod {
                        command: GroupModCommand::Delete,
                        group_type: GroupType::All,
                        group_id: 1,
                        buckets: vec![],
                    }),
                ),
                "040f0010000000020002000000000001",
                "OFPT_GROUP_MOD (OF1.3) (xid=0x2):\n DEL group_id=1,type=all",
            ),
            (
                Message::new(
                    4,
                    Body::BundleControl(BundleControl {
                        bundle_id: 0,
                        ctrl_type: 0,
                        flags: 3,
                        properties: vec![],
                    }),
                ),
                "04040018000000044f4e4600000008fc0000000000000003",
                "ONFT_BUNDLE_CONTROL (OF1.3) (xid=0x4):\n bundle_id=0 type=OPEN_REQUEST flags=atomic ordered",
            ),
            (
                Message::new(
                    2,
                    Body::CtFlush(CtFlush {
                        zone: Some(5),
                        ..CtFlush::default()
                    }),
                ),
                "0404002000000002000023200000002000000000000000000002000800050000",
                "NXT_CT_FLUSH (OF1.3) (xid=0x2): zone=5 'ct_ipv6_src=::,ct_ipv6_dst=::,ct_tp_src=0,ct_tp_dst=0,ct_nw_proto=0' 'ct_ipv6_src=::,ct_ipv6_dst=::,ct_tp_src=0,ct_tp_dst=0'",
            ),
            (
                Message::new(
                    2,
                    Body::SetConfig(SwitchConfig {
                        flags: 0,
                        miss_send_len: 128,
                    }),
                ),
                "0409000c0000000200000080",
                "OFPT_SET_CONFIG (OF1.3) (xid=0x2): frags=normal miss_send_len=128",
            ),
            (
                Message::new(
                    2,
                    Body::RoleRequest(Role {
                        role: 2,
                        generation_id: 10,
                    }),
                ),
                "04180018000000020000000200000000000000000000000a",
                "OFPT_ROLE_REQUEST (OF1.3) (xid=0x2): role=primary generation_id=10",
            ),
        ]
    }

    #[test]
    fn parse() {
        for (msg, hex, _) in table() {
            assert_eq!(Message::decode(&unhex(hex)).unwrap(), msg, "{hex}");
        }
    }

    #[test]
    fn emit() {
        for (msg, hex, _) in table() {
            let mut w = Writer::from_vec(vec![0xa5; 5]);
            msg.encode_into(&mut w).unwrap();
            assert_eq!(&w.as_slice()[..5], &[0xa5; 5]);
            assert_eq!(&w.as_slice()[5..], unhex(hex).as_slice());
            assert_eq!(msg.encoded_len(), hex.len() / 2);
        }
    }

    #[test]
    fn text() {
        for (msg, _, text) in table() {
            assert_eq!(msg.to_string(), text);
        }
    }

    #[test]
    fn frame_len() {
        assert_eq!(Message::frame_len(&[4, 0, 0, 16]), Some(16));
        assert_eq!(Message::frame_len(&[4, 0, 0]), None);
    }
}
