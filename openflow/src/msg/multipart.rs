//! `OFPT_MULTIPART_REQUEST` / `OFPT_MULTIPART_REPLY` (OF1.3 §7.3.5).
//!
//! DESC, FLOW, AGGREGATE, TABLE, PORT_STATS, PORT_DESC, GROUP, GROUP_DESC,
//! GROUP_FEATURES, METER, METER_CONFIG and METER_FEATURES are typed (the
//! meter bodies live in [`super::meter`]); other multipart types are kept raw.

use std::fmt::{self, Write as _};

use super::fixed::FixedStr;
use super::flow::duration;
use super::group::{Bucket, GroupType, format_group};
use super::meter::{self, MeterConfig, MeterFeatures, MeterStats};
use super::port::PortDesc;
use crate::error::DecodeError;
use crate::instruction::{
    Instruction, decode_instructions, encode_instructions, format_instructions,
};
use crate::match_fmt::format_match;
use crate::oxm::Match;
use crate::text;
use crate::wire::{Fixed, Reader, Writer};

/// `OFPMPF_REPLY_MORE` / `OFPMPF_REQ_MORE`.
pub const OFPMPF_MORE: u16 = 1;

mod ofpmp {
    pub const DESC: u16 = 0;
    pub const FLOW: u16 = 1;
    pub const AGGREGATE: u16 = 2;
    pub const TABLE: u16 = 3;
    pub const PORT_STATS: u16 = 4;
    pub const GROUP: u16 = 6;
    pub const GROUP_DESC: u16 = 7;
    pub const GROUP_FEATURES: u16 = 8;
    pub const METER: u16 = 9;
    pub const METER_CONFIG: u16 = 10;
    pub const METER_FEATURES: u16 = 11;
    pub const PORT_DESC: u16 = 13;
}

/// `struct ofp_desc`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchDesc {
    /// Manufacturer.
    pub mfr_desc: FixedStr,
    /// Hardware.
    pub hw_desc: FixedStr,
    /// Software.
    pub sw_desc: FixedStr,
    /// Serial number.
    pub serial_num: FixedStr,
    /// Datapath description.
    pub dp_desc: FixedStr,
}

/// `struct ofp_flow_stats_request` / `struct ofp_aggregate_stats_request`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStatsRequest {
    /// Table, `OFPTT_ALL` for all.
    pub table_id: u8,
    /// Output port filter.
    pub out_port: u32,
    /// Output group filter.
    pub out_group: u32,
    /// Cookie.
    pub cookie: u64,
    /// Cookie mask.
    pub cookie_mask: u64,
    /// Match.
    pub match_: Match,
}

impl Default for FlowStatsRequest {
    fn default() -> Self {
        FlowStatsRequest {
            table_id: 0xff,
            out_port: u32::MAX,
            out_group: u32::MAX,
            cookie: 0,
            cookie_mask: 0,
            match_: Match::new(),
        }
    }
}

/// `struct ofp_flow_stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowStats {
    /// Table.
    pub table_id: u8,
    /// Seconds alive.
    pub duration_sec: u32,
    /// Nanoseconds beyond that.
    pub duration_nsec: u32,
    /// Priority.
    pub priority: u16,
    /// Idle timeout.
    pub idle_timeout: u16,
    /// Hard timeout.
    pub hard_timeout: u16,
    /// `OFPFF_*`.
    pub flags: u16,
    /// Cookie.
    pub cookie: u64,
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Match.
    pub match_: Match,
    /// Instructions.
    pub instructions: Vec<Instruction>,
}

/// `struct ofp_aggregate_stats_reply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateStats {
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Flows.
    pub flow_count: u32,
}

/// `struct ofp_table_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableStats {
    /// Table.
    pub table_id: u8,
    /// Active entries.
    pub active_count: u32,
    /// Lookups.
    pub lookup_count: u64,
    /// Hits.
    pub matched_count: u64,
}

/// `struct ofp_port_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortStats {
    /// Port.
    pub port_no: u32,
    /// rx_packets, tx_packets, rx_bytes, tx_bytes, rx_dropped, tx_dropped,
    /// rx_errors, tx_errors, rx_frame_err, rx_over_err, rx_crc_err, collisions.
    pub counters: [u64; 12],
    /// Seconds alive.
    pub duration_sec: u32,
    /// Nanoseconds beyond that.
    pub duration_nsec: u32,
}

/// `struct ofp_group_stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStats {
    /// Group.
    pub group_id: u32,
    /// Flows or groups forwarding to it.
    pub ref_count: u32,
    /// Packets.
    pub packet_count: u64,
    /// Bytes.
    pub byte_count: u64,
    /// Seconds alive.
    pub duration_sec: u32,
    /// Nanoseconds beyond that.
    pub duration_nsec: u32,
    /// Per-bucket (packets, bytes).
    pub bucket_stats: Vec<(u64, u64)>,
}

/// `struct ofp_group_desc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDesc {
    /// Type.
    pub group_type: GroupType,
    /// Group.
    pub group_id: u32,
    /// Buckets.
    pub buckets: Vec<Bucket>,
}

/// `struct ofp_group_features`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupFeatures {
    /// Supported group types bitmap.
    pub types: u32,
    /// `OFPGFC_*`.
    pub capabilities: u32,
    /// Maximum groups per type.
    pub max_groups: [u32; 4],
    /// Supported actions per type.
    pub actions: [u32; 4],
}

/// A multipart body, request or reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultipartBody {
    /// `OFPMP_DESC` request.
    DescRequest,
    /// `OFPMP_DESC` reply.
    Desc(SwitchDesc),
    /// `OFPMP_FLOW` request.
    FlowRequest(FlowStatsRequest),
    /// `OFPMP_FLOW` reply.
    Flow(Vec<FlowStats>),
    /// `OFPMP_AGGREGATE` request.
    AggregateRequest(FlowStatsRequest),
    /// `OFPMP_AGGREGATE` reply.
    Aggregate(AggregateStats),
    /// `OFPMP_TABLE` request.
    TableRequest,
    /// `OFPMP_TABLE` reply.
    Table(Vec<TableStats>),
    /// `OFPMP_PORT_STATS` request for a port (`OFPP_ANY` for all).
    PortStatsRequest(u32),
    /// `OFPMP_PORT_STATS` reply.
    PortStats(Vec<PortStats>),
    /// `OFPMP_PORT_DESC` request.
    PortDescRequest,
    /// `OFPMP_PORT_DESC` reply.
    PortDesc(Vec<PortDesc>),
    /// `OFPMP_GROUP` request for a group (`OFPG_ALL` for all).
    GroupRequest(u32),
    /// `OFPMP_GROUP` reply.
    Group(Vec<GroupStats>),
    /// `OFPMP_GROUP_DESC` request.
    GroupDescRequest,
    /// `OFPMP_GROUP_DESC` reply.
    GroupDesc(Vec<GroupDesc>),
    /// `OFPMP_GROUP_FEATURES` request.
    GroupFeaturesRequest,
    /// `OFPMP_GROUP_FEATURES` reply.
    GroupFeatures(GroupFeatures),
    /// `OFPMP_METER` request for a meter (`OFPM_ALL` for all).
    MeterRequest(u32),
    /// `OFPMP_METER` reply.
    Meter(Vec<MeterStats>),
    /// `OFPMP_METER_CONFIG` request for a meter (`OFPM_ALL` for all).
    MeterConfigRequest(u32),
    /// `OFPMP_METER_CONFIG` reply.
    MeterConfig(Vec<MeterConfig>),
    /// `OFPMP_METER_FEATURES` request.
    MeterFeaturesRequest,
    /// `OFPMP_METER_FEATURES` reply.
    MeterFeatures(MeterFeatures),
    /// Any other multipart type, raw.
    Raw {
        /// `ofp_multipart_type`.
        mp_type: u16,
        /// Body.
        data: Vec<u8>,
    },
}

/// `OFPT_MULTIPART_REQUEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartRequest {
    /// `OFPMPF_REQ_MORE`.
    pub flags: u16,
    /// Body.
    pub body: MultipartBody,
}

/// `OFPT_MULTIPART_REPLY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartReply {
    /// `OFPMPF_REPLY_MORE`.
    pub flags: u16,
    /// Body.
    pub body: MultipartBody,
}

impl FlowStatsRequest {
    fn encode(&self, w: &mut Writer) {
        w.u8(self.table_id);
        w.zeros(3);
        w.u32(self.out_port);
        w.u32(self.out_group);
        w.zeros(4);
        w.u64(self.cookie);
        w.u64(self.cookie_mask);
        self.match_.write(w);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let table_id = r.u8()?;
        r.pad(3, "ofp_flow_stats_request")?;
        let out_port = r.u32()?;
        let out_group = r.u32()?;
        r.pad(4, "ofp_flow_stats_request")?;
        Ok(FlowStatsRequest {
            table_id,
            out_port,
            out_group,
            cookie: r.u64()?,
            cookie_mask: r.u64()?,
            match_: Match::decode(r)?,
        })
    }
}

impl fmt::Display for FlowStatsRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.table_id != 0xff {
            write!(f, " table={}", self.table_id)?;
        }
        if self.out_port != u32::MAX {
            write!(f, " out_port={}", text::port32(self.out_port))?;
        }
        write!(f, " {}", format_match(&self.match_, None))
    }
}

impl FlowStats {
    /// Encoded size.
    pub fn encoded_len(&self) -> usize {
        let mut w = Writer::new();
        self.encode(&mut w);
        w.len()
    }

    fn encode(&self, w: &mut Writer) {
        let start = w.len();
        let len = w.place_u16();
        w.u8(self.table_id);
        w.u8(0);
        w.u32(self.duration_sec);
        w.u32(self.duration_nsec);
        w.u16(self.priority);
        w.u16(self.idle_timeout);
        w.u16(self.hard_timeout);
        w.u16(self.flags);
        w.zeros(4);
        w.u64(self.cookie);
        w.u64(self.packet_count);
        w.u64(self.byte_count);
        self.match_.write(w);
        encode_instructions(&self.instructions, w);
        w.fill_len(len, start);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = usize::from(r.u16()?);
        if len < 56 {
            return Err(DecodeError::BadLength {
                what: "ofp_flow_stats",
                len,
            });
        }
        let mut b = r.sub(len - 2)?;
        // The fixed part after `length`, with one bounds check.
        let h = Fixed(b.array::<46>()?);
        if h.u8(1) != 0 || h.u32(18) != 0 {
            return Err(DecodeError::BadPadding("ofp_flow_stats"));
        }
        let table_id = h.u8(0);
        let duration_sec = h.u32(2);
        let duration_nsec = h.u32(6);
        let priority = h.u16(10);
        let idle_timeout = h.u16(12);
        let hard_timeout = h.u16(14);
        let flags = h.u16(16);
        let cookie = h.u64(22);
        let packet_count = h.u64(30);
        let byte_count = h.u64(38);
        let match_ = Match::decode(&mut b)?;
        let instructions = decode_instructions(&mut b)?;
        Ok(FlowStats {
            table_id,
            duration_sec,
            duration_nsec,
            priority,
            idle_timeout,
            hard_timeout,
            flags,
            cookie,
            packet_count,
            byte_count,
            match_,
            instructions,
        })
    }
}

impl fmt::Display for FlowStats {
    /// `ofputil_flow_stats_format()` as `dump-flows` prints a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = format!(
            " cookie={:#x}, duration={}, ",
            self.cookie,
            duration(self.duration_sec, self.duration_nsec)
        );
        if s.starts_with(" cookie=0x0") || self.cookie == 0 {
            s = format!(
                " cookie=0x0, duration={}, ",
                duration(self.duration_sec, self.duration_nsec)
            );
        }
        let _ = write!(
            s,
            "table={}, n_packets={}, n_bytes={}, ",
            self.table_id, self.packet_count, self.byte_count
        );
        if self.idle_timeout != 0 {
            let _ = write!(s, "idle_timeout={}, ", self.idle_timeout);
        }
        if self.hard_timeout != 0 {
            let _ = write!(s, "hard_timeout={}, ", self.hard_timeout);
        }
        for (bit, name) in [
            (1, "send_flow_rem "),
            (2, "check_overlap "),
            (4, "reset_counts "),
            (8, "no_packet_counts "),
            (16, "no_byte_counts "),
        ] {
            if self.flags & bit != 0 {
                s.push_str(name);
            }
        }
        let m = format_match(&self.match_, Some(self.priority));
        if !m.is_empty() {
            s.push_str(&m);
            s.push(' ');
        }
        s.push_str("actions=");
        s.push_str(&format_instructions(&self.instructions));
        f.write_str(&s)
    }
}

impl MultipartBody {
    fn mp_type(&self) -> u16 {
        use MultipartBody::*;
        match self {
            DescRequest | Desc(_) => ofpmp::DESC,
            FlowRequest(_) | Flow(_) => ofpmp::FLOW,
            AggregateRequest(_) | Aggregate(_) => ofpmp::AGGREGATE,
            TableRequest | Table(_) => ofpmp::TABLE,
            PortStatsRequest(_) | PortStats(_) => ofpmp::PORT_STATS,
            PortDescRequest | PortDesc(_) => ofpmp::PORT_DESC,
            GroupRequest(_) | Group(_) => ofpmp::GROUP,
            GroupDescRequest | GroupDesc(_) => ofpmp::GROUP_DESC,
            GroupFeaturesRequest | GroupFeatures(_) => ofpmp::GROUP_FEATURES,
            MeterRequest(_) | Meter(_) => ofpmp::METER,
            MeterConfigRequest(_) | MeterConfig(_) => ofpmp::METER_CONFIG,
            MeterFeaturesRequest | MeterFeatures(_) => ofpmp::METER_FEATURES,
            Raw { mp_type, .. } => *mp_type,
        }
    }

    fn stem(&self) -> String {
        match self.mp_type() {
            ofpmp::DESC => "OFPST_DESC".into(),
            ofpmp::FLOW => "OFPST_FLOW".into(),
            ofpmp::AGGREGATE => "OFPST_AGGREGATE".into(),
            ofpmp::TABLE => "OFPST_TABLE".into(),
            ofpmp::PORT_STATS => "OFPST_PORT".into(),
            5 => "OFPST_QUEUE".into(),
            ofpmp::GROUP => "OFPST_GROUP".into(),
            ofpmp::GROUP_DESC => "OFPST_GROUP_DESC".into(),
            ofpmp::GROUP_FEATURES => "OFPST_GROUP_FEATURES".into(),
            ofpmp::METER => "OFPST_METER".into(),
            ofpmp::METER_CONFIG => "OFPST_METER_CONFIG".into(),
            ofpmp::METER_FEATURES => "OFPST_METER_FEATURES".into(),
            12 => "OFPST_TABLE_FEATURES".into(),
            ofpmp::PORT_DESC => "OFPST_PORT_DESC".into(),
            t => format!("OFPST_UNKNOWN({t})"),
        }
    }

    /// Type name of a request carrying this body.
    pub fn request_name(&self) -> String {
        format!("{} request", self.stem())
    }

    /// Type name of a reply carrying this body.
    pub fn reply_name(&self) -> String {
        format!("{} reply", self.stem())
    }

    fn encode(&self, w: &mut Writer) {
        use MultipartBody::*;
        match self {
            DescRequest | TableRequest | PortDescRequest | GroupDescRequest
            | GroupFeaturesRequest | MeterFeaturesRequest => {}
            MeterRequest(m) | MeterConfigRequest(m) => meter::encode_request(*m, w),
            Meter(v) => meter::encode_stats(v, w),
            MeterConfig(v) => meter::encode_configs(v, w),
            MeterFeatures(m) => meter::encode_features(m, w),
            Desc(d) => {
                d.mfr_desc.write(w, 256);
                d.hw_desc.write(w, 256);
                d.sw_desc.write(w, 256);
                d.serial_num.write(w, 32);
                d.dp_desc.write(w, 256);
            }
            FlowRequest(r) | AggregateRequest(r) => r.encode(w),
            Flow(v) => v.iter().for_each(|s| s.encode(w)),
            Aggregate(a) => {
                w.u64(a.packet_count);
                w.u64(a.byte_count);
                w.u32(a.flow_count);
                w.zeros(4);
            }
            Table(v) => {
                for t in v {
                    w.u8(t.table_id);
                    w.zeros(3);
                    w.u32(t.active_count);
                    w.u64(t.lookup_count);
                    w.u64(t.matched_count);
                }
            }
            PortStatsRequest(p) | GroupRequest(p) => {
                w.u32(*p);
                w.zeros(4);
            }
            PortStats(v) => {
                for p in v {
                    w.u32(p.port_no);
                    w.zeros(4);
                    p.counters.iter().for_each(|c| w.u64(*c));
                    w.u32(p.duration_sec);
                    w.u32(p.duration_nsec);
                }
            }
            PortDesc(v) => v.iter().for_each(|p| p.encode(w)),
            Group(v) => {
                for g in v {
                    let start = w.len();
                    let len = w.place_u16();
                    w.zeros(2);
                    w.u32(g.group_id);
                    w.u32(g.ref_count);
                    w.zeros(4);
                    w.u64(g.packet_count);
                    w.u64(g.byte_count);
                    w.u32(g.duration_sec);
                    w.u32(g.duration_nsec);
                    for (p, b) in &g.bucket_stats {
                        w.u64(*p);
                        w.u64(*b);
                    }
                    w.fill_len(len, start);
                }
            }
            GroupDesc(v) => {
                for g in v {
                    let start = w.len();
                    let len = w.place_u16();
                    w.u8(g.group_type.into());
                    w.u8(0);
                    w.u32(g.group_id);
                    g.buckets.iter().for_each(|b| b.encode(w));
                    w.fill_len(len, start);
                }
            }
            GroupFeatures(g) => {
                w.u32(g.types);
                w.u32(g.capabilities);
                g.max_groups.iter().for_each(|x| w.u32(*x));
                g.actions.iter().for_each(|x| w.u32(*x));
            }
            Raw { data, .. } => w.bytes(data),
        }
    }

    fn decode(mp_type: u16, reply: bool, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use MultipartBody::*;
        let body = match (mp_type, reply) {
            (ofpmp::DESC, false) => DescRequest,
            (ofpmp::TABLE, false) => TableRequest,
            (ofpmp::PORT_DESC, false) => PortDescRequest,
            (ofpmp::GROUP_DESC, false) => GroupDescRequest,
            (ofpmp::GROUP_FEATURES, false) => GroupFeaturesRequest,
            (ofpmp::METER_FEATURES, false) => MeterFeaturesRequest,
            (ofpmp::METER, false) => MeterRequest(meter::decode_request(r)?),
            (ofpmp::METER_CONFIG, false) => MeterConfigRequest(meter::decode_request(r)?),
            (ofpmp::METER, true) => Meter(meter::decode_stats(r)?),
            (ofpmp::METER_CONFIG, true) => MeterConfig(meter::decode_configs(r)?),
            (ofpmp::METER_FEATURES, true) => MeterFeatures(meter::decode_features(r)?),
            (ofpmp::FLOW, false) => FlowRequest(FlowStatsRequest::decode(r)?),
            (ofpmp::AGGREGATE, false) => AggregateRequest(FlowStatsRequest::decode(r)?),
            (ofpmp::PORT_STATS, false) | (ofpmp::GROUP, false) => {
                let p = r.u32()?;
                r.pad(4, "multipart request")?;
                if mp_type == ofpmp::GROUP {
                    GroupRequest(p)
                } else {
                    PortStatsRequest(p)
                }
            }
            (ofpmp::DESC, true) => Desc(SwitchDesc {
                mfr_desc: FixedStr::read(r, 256)?,
                hw_desc: FixedStr::read(r, 256)?,
                sw_desc: FixedStr::read(r, 256)?,
                serial_num: FixedStr::read(r, 32)?,
                dp_desc: FixedStr::read(r, 256)?,
            }),
            (ofpmp::FLOW, true) => {
                // `ofp_flow_stats` starts with its 16-bit length; 56 bytes at least.
                let mut v = Vec::with_capacity(r.count_records(56, |b| match b {
                    [hi, lo, ..] => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
                    _ => None,
                }));
                while !r.is_empty() {
                    v.push(FlowStats::decode(r)?);
                }
                Flow(v)
            }
            (ofpmp::AGGREGATE, true) => {
                let a = AggregateStats {
                    packet_count: r.u64()?,
                    byte_count: r.u64()?,
                    flow_count: r.u32()?,
                };
                r.pad(4, "ofp_aggregate_stats_reply")?;
                Aggregate(a)
            }
            (ofpmp::TABLE, true) => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    let table_id = r.u8()?;
                    r.pad(3, "ofp_table_stats")?;
                    v.push(TableStats {
                        table_id,
                        active_count: r.u32()?,
                        lookup_count: r.u64()?,
                        matched_count: r.u64()?,
                    });
                }
                Table(v)
            }
            (ofpmp::PORT_STATS, true) => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    let port_no = r.u32()?;
                    r.pad(4, "ofp_port_stats")?;
                    let mut counters = [0u64; 12];
                    for c in &mut counters {
                        *c = r.u64()?;
                    }
                    v.push(self::PortStats {
                        port_no,
                        counters,
                        duration_sec: r.u32()?,
                        duration_nsec: r.u32()?,
                    });
                }
                PortStats(v)
            }
            (ofpmp::PORT_DESC, true) => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    v.push(super::port::PortDesc::decode(r)?);
                }
                PortDesc(v)
            }
            (ofpmp::GROUP, true) => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    let len = usize::from(r.u16()?);
                    if len < 40 || (len - 40) % 16 != 0 {
                        return Err(DecodeError::BadLength {
                            what: "ofp_group_stats",
                            len,
                        });
                    }
                    let mut b = r.sub(len - 2)?;
                    b.pad(2, "ofp_group_stats")?;
                    let group_id = b.u32()?;
                    let ref_count = b.u32()?;
                    b.pad(4, "ofp_group_stats")?;
                    let mut g = GroupStats {
                        group_id,
                        ref_count,
                        packet_count: b.u64()?,
                        byte_count: b.u64()?,
                        duration_sec: b.u32()?,
                        duration_nsec: b.u32()?,
                        bucket_stats: Vec::new(),
                    };
                    while !b.is_empty() {
                        g.bucket_stats.push((b.u64()?, b.u64()?));
                    }
                    v.push(g);
                }
                Group(v)
            }
            (ofpmp::GROUP_DESC, true) => {
                let mut v = Vec::new();
                while !r.is_empty() {
                    let len = usize::from(r.u16()?);
                    if len < 8 {
                        return Err(DecodeError::BadLength {
                            what: "ofp_group_desc",
                            len,
                        });
                    }
                    let mut b = r.sub(len - 2)?;
                    let group_type = b.u8()?.into();
                    b.pad(1, "ofp_group_desc")?;
                    let group_id = b.u32()?;
                    let mut buckets = Vec::new();
                    while !b.is_empty() {
                        buckets.push(Bucket::decode(&mut b)?);
                    }
                    v.push(self::GroupDesc {
                        group_type,
                        group_id,
                        buckets,
                    });
                }
                GroupDesc(v)
            }
            (ofpmp::GROUP_FEATURES, true) => {
                let types = r.u32()?;
                let capabilities = r.u32()?;
                let mut max_groups = [0u32; 4];
                for x in &mut max_groups {
                    *x = r.u32()?;
                }
                let mut actions = [0u32; 4];
                for x in &mut actions {
                    *x = r.u32()?;
                }
                GroupFeatures(self::GroupFeatures {
                    types,
                    capabilities,
                    max_groups,
                    actions,
                })
            }
            _ => Raw {
                mp_type,
                data: r.rest().to_vec(),
            },
        };
        r.finish()?;
        Ok(body)
    }
}

/// `ofputil_format_group()`.
fn group_name(g: u32) -> String {
    match g {
        0xffff_fffc => "ALL".into(),
        0xffff_ffff => "ANY".into(),
        g => g.to_string(),
    }
}

/// OF1.3 action-type bitmap as OVS names the actions it maps to, in OVS's
/// `enum ofpact_type` order.
fn action_bitmap(bits: u32) -> String {
    const ORDER: &[(u32, &str)] = &[
        (0, "output"),
        (22, "group"),
        (25, "set_field"),
        (18, "strip_vlan"),
        (17, "push_vlan"),
        (23, "mod_nw_ttl"),
        (24, "dec_ttl"),
        (15, "set_mpls_ttl"),
        (16, "dec_mpls_ttl"),
        (19, "push_mpls"),
        (20, "pop_mpls"),
        (21, "set_queue"),
        (11, "copy_ttl_out"),
        (12, "copy_ttl_in"),
    ];
    let v: Vec<&str> = ORDER
        .iter()
        .filter(|(b, _)| bits & (1 << b) != 0)
        .map(|(_, n)| *n)
        .collect();
    v.join(" ")
}

fn more_flags(f: &mut fmt::Formatter<'_>, flags: u16) -> fmt::Result {
    if flags != 0 {
        f.write_str(" flags=")?;
        if flags & OFPMPF_MORE != 0 {
            f.write_str("[more]")?;
        }
        let rest = flags & !OFPMPF_MORE;
        if rest != 0 {
            write!(f, "[***unknown flags 0x{rest:04x}***]")?;
        }
    }
    Ok(())
}

impl MultipartRequest {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u16(self.body.mp_type());
        w.u16(self.flags);
        w.zeros(4);
        self.body.encode(w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.pad(4, "ofp_multipart_request")?;
        Ok(MultipartRequest {
            flags,
            body: MultipartBody::decode(ty, false, r)?,
        })
    }
}

impl MultipartReply {
    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u16(self.body.mp_type());
        w.u16(self.flags);
        w.zeros(4);
        self.body.encode(w);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ty = r.u16()?;
        let flags = r.u16()?;
        r.pad(4, "ofp_multipart_reply")?;
        Ok(MultipartReply {
            flags,
            body: MultipartBody::decode(ty, true, r)?,
        })
    }
}

impl fmt::Display for MultipartRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        more_flags(f, self.flags)?;
        match &self.body {
            MultipartBody::FlowRequest(r) | MultipartBody::AggregateRequest(r) => write!(f, "{r}"),
            MultipartBody::PortStatsRequest(p) => write!(f, " port_no={}", text::port32(*p)),
            MultipartBody::PortDescRequest => f.write_str(" port=ANY"),
            MultipartBody::GroupDescRequest => f.write_str(" group_id=ALL"),
            MultipartBody::GroupRequest(g) => write!(f, " group_id={}", group_name(*g)),
            MultipartBody::MeterRequest(m) | MultipartBody::MeterConfigRequest(m) => {
                write!(f, " {}", meter::format_meter_id(*m, '='))
            }
            _ => Ok(()),
        }
    }
}

/// A port-stats counter as `ofputil_format_port_stats()` prints it: `?` for
/// `UINT64_MAX`, which OF1.3 §7.3.5.6 uses for "not available".
fn counter(c: u64) -> String {
    if c == u64::MAX {
        "?".into()
    } else {
        c.to_string()
    }
}

/// How many leading entries of a port-stats reply OVS decodes: it refuses a
/// port number it cannot map to 16 bits (`ofputil_port_from_ofp11()`:
/// 0xff00 through 0xfffffeff are `OFPBAC_BAD_OUT_PORT`).
pub(crate) fn valid_port_stats(v: &[PortStats]) -> usize {
    v.iter()
        .position(|p| text::port32_to_16(p.port_no).is_none())
        .unwrap_or(v.len())
}

/// `ofp_print_table_stats_reply()` with `ofputil_table_features_format()`:
/// an OF1.3 table-stats entry carries no features, so a table whose counters
/// equal the previous entry's is a "ditto", and runs of dittos collapse into
/// `tables A...B: ditto`.
fn format_table_stats(v: &[TableStats]) -> String {
    let mut blocks: Vec<String> = Vec::new();
    let mut ditto: Option<(u8, u8)> = None;
    let flush = |blocks: &mut Vec<String>, ditto: &mut Option<(u8, u8)>| match ditto.take() {
        Some((a, b)) if a == b => blocks.push(format!("  table {a}: ditto")),
        Some((a, b)) => blocks.push(format!("  tables {a}...{b}: ditto")),
        None => {}
    };
    let counts = |t: &TableStats| (t.active_count, t.lookup_count, t.matched_count);
    for (i, t) in v.iter().enumerate() {
        let same = i > 0 && v.get(i - 1).map(counts) == Some(counts(t));
        if same {
            ditto = Some(ditto.map_or((t.table_id, t.table_id), |(a, _)| (a, t.table_id)));
            continue;
        }
        flush(&mut blocks, &mut ditto);
        blocks.push(format!(
            "  table {}:\n    active={}, lookup={}, matched={}",
            t.table_id, t.active_count, t.lookup_count, t.matched_count
        ));
    }
    flush(&mut blocks, &mut ditto);
    if blocks.is_empty() {
        String::new()
    } else {
        format!("\n{}", blocks.join("\n\n"))
    }
}

impl fmt::Display for MultipartReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        more_flags(f, self.flags)?;
        match &self.body {
            MultipartBody::Desc(d) => write!(
                f,
                "\nManufacturer: {}\nHardware: {}\nSoftware: {}\nSerial Num: {}\nDP Description: {}",
                d.mfr_desc, d.hw_desc, d.sw_desc, d.serial_num, d.dp_desc
            ),
            MultipartBody::Flow(v) => {
                // `ovs-ofctl` stops at the first flow with a match field it
                // refuses; `Message`'s `Display` adds the decode error.
                for s in v.iter().take_while(|s| s.match_.unknown.is_empty()) {
                    write!(f, "\n{s}")?;
                }
                Ok(())
            }
            MultipartBody::Aggregate(a) => {
                write!(
                    f,
                    " packet_count={} byte_count={} flow_count={}",
                    a.packet_count, a.byte_count, a.flow_count
                )
            }
            MultipartBody::Table(v) => f.write_str(&format_table_stats(v)),
            MultipartBody::PortStats(v) => {
                // `ofputil_count_port_stats()` stops at the first port OVS
                // cannot decode; `Message`'s `Display` adds the decode error.
                let n = valid_port_stats(v);
                write!(f, " {n} ports")?;
                for p in &v[..n] {
                    let c = p.counters.map(counter);
                    write!(
                        f,
                        "\n  port {:>2}: rx pkts={}, bytes={}, drop={}, errs={}, frame={}, over={}, crc={}\n           tx pkts={}, bytes={}, drop={}, errs={}, coll={}",
                        text::port32(p.port_no),
                        c[0],
                        c[2],
                        c[4],
                        c[6],
                        c[8],
                        c[9],
                        c[10],
                        c[1],
                        c[3],
                        c[5],
                        c[7],
                        c[11]
                    )?;
                    if p.duration_sec != u32::MAX {
                        write!(
                            f,
                            "\n           duration={}",
                            duration(p.duration_sec, p.duration_nsec)
                        )?;
                    }
                }
                Ok(())
            }
            MultipartBody::PortDesc(v) => {
                for p in v {
                    write!(f, "\n{p}")?;
                }
                Ok(())
            }
            MultipartBody::Group(v) => {
                for g in v {
                    write!(
                        f,
                        "\n group_id={},duration={},ref_count={},packet_count={},byte_count={}",
                        g.group_id,
                        duration(g.duration_sec, g.duration_nsec),
                        g.ref_count,
                        g.packet_count,
                        g.byte_count
                    )?;
                    for (i, (p, b)) in g.bucket_stats.iter().enumerate() {
                        write!(f, ",bucket{i}:packet_count={p},byte_count={b}")?;
                    }
                }
                Ok(())
            }
            MultipartBody::GroupDesc(v) => {
                for g in v {
                    write!(
                        f,
                        "\n {}",
                        format_group(g.group_id, g.group_type, &g.buckets)
                    )?;
                }
                Ok(())
            }
            MultipartBody::Meter(v) => f.write_str(meter::format_stats(v).trim_end_matches('\n')),
            MultipartBody::MeterConfig(v) => {
                // `ovs-ofctl` stops at the first entry it refuses; `Message`'s
                // `Display` adds the decode error.
                let n = meter::config_ovs_error(v).map_or(v.len(), |(n, _)| n);
                f.write_str(meter::format_configs(&v[..n]).trim_end_matches('\n'))
            }
            MultipartBody::MeterFeatures(m) => write!(f, "{m}"),
            MultipartBody::GroupFeatures(g) => {
                write!(
                    f,
                    "\n Group table:\n    Types:  {:#x}\n    Capabilities:  {:#x}",
                    g.types, g.capabilities
                )?;
                let names = ["all", "select", "indirect", "fast failover"];
                for (i, name) in names.iter().enumerate() {
                    if g.types & (1 << i) != 0 {
                        write!(
                            f,
                            "\n    {name} group:\n       max_groups={:#x}",
                            g.max_groups[i]
                        )?;
                        write!(f, "\n       actions: {}", action_bitmap(g.actions[i]))?;
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
