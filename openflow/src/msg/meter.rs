//! Meters: `OFPT_METER_MOD` (OF1.3 §7.3.4.4) and the bodies of the
//! `OFPMP_METER`, `OFPMP_METER_CONFIG` and `OFPMP_METER_FEATURES` multipart
//! messages (§7.3.5.12–14).
//!
//! Bands of types other than DROP and DSCP_REMARK are kept raw and re-encode
//! identically. `ovs-ofctl` 3.1 refuses some messages this codec accepts (an
//! unknown command, both KBPS and PKTPS, an unknown band type, a band that is
//! not 16 bytes long); [`MeterMod::ovs_error`] and [`config_ovs_error`] name
//! its refusal, and [`crate::Message`]'s `Display` prints it as `ovs-ofctl`
//! does (`lib/ofp-meter.c`).

use std::fmt::{self, Write as _};

use crate::error::DecodeError;
use crate::wire::{Reader, Writer, tlv_len};

use super::flow::duration;

/// `OFPMF_KBPS`: rates in kb/s.
pub const OFPMF_KBPS: u16 = 1 << 0;
/// `OFPMF_PKTPS`: rates in packets/s.
pub const OFPMF_PKTPS: u16 = 1 << 1;
/// `OFPMF_BURST`: the bands' burst sizes apply.
pub const OFPMF_BURST: u16 = 1 << 2;
/// `OFPMF_STATS`: the meter keeps statistics.
pub const OFPMF_STATS: u16 = 1 << 3;

/// `OFPM_MAX`: the last usable meter id.
pub const OFPM_MAX: u32 = 0xffff_0000;
/// `OFPM_SLOWPATH`: the virtual meter for the slow datapath.
pub const OFPM_SLOWPATH: u32 = 0xffff_fffd;
/// `OFPM_CONTROLLER`: the virtual meter for the controller connection.
pub const OFPM_CONTROLLER: u32 = 0xffff_fffe;
/// `OFPM_ALL`: every meter, in requests and deletes.
pub const OFPM_ALL: u32 = 0xffff_ffff;

/// `OFPMBT_DROP`.
const OFPMBT_DROP: u16 = 1;
/// `OFPMBT_DSCP_REMARK`.
const OFPMBT_DSCP_REMARK: u16 = 2;
/// The size of every band OF1.3 defines (`struct ofp_meter_band_drop`).
const BAND_LEN: usize = 16;
/// `struct ofp_meter_band_header`: type, len, rate, burst_size.
const BAND_HEADER_LEN: usize = 12;
/// `struct ofp_meter_stats` without its band stats.
const STATS_LEN: usize = 40;
/// `struct ofp_meter_band_stats`.
const BAND_STATS_LEN: usize = 16;

/// `enum ofp_meter_mod_command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MeterModCommand {
    /// `OFPMC_ADD`.
    Add,
    /// `OFPMC_MODIFY`.
    Modify,
    /// `OFPMC_DELETE`.
    Delete,
    /// Any other value.
    Unknown(u16),
}

impl From<u16> for MeterModCommand {
    fn from(v: u16) -> Self {
        match v {
            0 => MeterModCommand::Add,
            1 => MeterModCommand::Modify,
            2 => MeterModCommand::Delete,
            v => MeterModCommand::Unknown(v),
        }
    }
}

impl From<MeterModCommand> for u16 {
    fn from(c: MeterModCommand) -> u16 {
        match c {
            MeterModCommand::Add => 0,
            MeterModCommand::Modify => 1,
            MeterModCommand::Delete => 2,
            MeterModCommand::Unknown(v) => v,
        }
    }
}

/// One meter band (`struct ofp_meter_band_header` and its type's body).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MeterBand {
    /// `OFPMBT_DROP`: drop packets above `rate`.
    Drop {
        /// Rate, in the meter's unit.
        rate: u32,
        /// Burst size, used with `OFPMF_BURST`.
        burst_size: u32,
    },
    /// `OFPMBT_DSCP_REMARK`: raise the drop precedence above `rate`.
    DscpRemark {
        /// Rate, in the meter's unit.
        rate: u32,
        /// Burst size, used with `OFPMF_BURST`.
        burst_size: u32,
        /// How much to add to the drop precedence.
        prec_level: u8,
    },
    /// Any other band type (`OFPMBT_EXPERIMENTER` among them), kept raw.
    Unknown {
        /// `ofp_meter_band_type`.
        band_type: u16,
        /// Rate.
        rate: u32,
        /// Burst size.
        burst_size: u32,
        /// The bytes after the 12-byte band header.
        data: Vec<u8>,
    },
}

impl MeterBand {
    /// A DROP band.
    pub fn drop(rate: u32, burst_size: u32) -> Self {
        MeterBand::Drop { rate, burst_size }
    }

    fn band_type(&self) -> u16 {
        match self {
            MeterBand::Drop { .. } => OFPMBT_DROP,
            MeterBand::DscpRemark { .. } => OFPMBT_DSCP_REMARK,
            MeterBand::Unknown { band_type, .. } => *band_type,
        }
    }

    fn rate_burst(&self) -> (u32, u32) {
        match self {
            MeterBand::Drop { rate, burst_size }
            | MeterBand::DscpRemark {
                rate, burst_size, ..
            }
            | MeterBand::Unknown {
                rate, burst_size, ..
            } => (*rate, *burst_size),
        }
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            MeterBand::Unknown { data, .. } => BAND_HEADER_LEN + data.len(),
            _ => BAND_LEN,
        }
    }

    fn encode(&self, w: &mut Writer) {
        let start = w.len();
        let (rate, burst_size) = self.rate_burst();
        w.u16(self.band_type());
        let len = w.place_u16();
        w.u32(rate);
        w.u32(burst_size);
        match self {
            MeterBand::Drop { .. } => w.zeros(4),
            MeterBand::DscpRemark { prec_level, .. } => {
                w.u8(*prec_level);
                w.zeros(3);
            }
            MeterBand::Unknown { data, .. } => w.bytes(data),
        }
        w.fill_len(len, start);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let band_type = r.u16()?;
        let len = usize::from(r.u16()?);
        let known = matches!(band_type, OFPMBT_DROP | OFPMBT_DSCP_REMARK);
        if len < BAND_HEADER_LEN || (known && len != BAND_LEN) {
            return Err(DecodeError::BadLength {
                what: "ofp_meter_band",
                len,
            });
        }
        let mut b = r.sub(len - 4)?;
        let rate = b.u32()?;
        let burst_size = b.u32()?;
        Ok(match band_type {
            OFPMBT_DROP => {
                b.pad(4, "ofp_meter_band_drop")?;
                MeterBand::Drop { rate, burst_size }
            }
            OFPMBT_DSCP_REMARK => {
                let prec_level = b.u8()?;
                b.pad(3, "ofp_meter_band_dscp_remark")?;
                MeterBand::DscpRemark {
                    rate,
                    burst_size,
                    prec_level,
                }
            }
            _ => MeterBand::Unknown {
                band_type,
                rate,
                burst_size,
                data: b.rest().to_vec(),
            },
        })
    }

    /// The error `ofputil_pull_bands()` gives this band, if any.
    fn ovs_error(&self) -> Option<&'static str> {
        if self.encoded_len() != BAND_LEN {
            Some("OFPBRC_BAD_LEN")
        } else if matches!(self, MeterBand::Unknown { .. }) {
            Some("OFPMMFC_BAD_BAND")
        } else {
            None
        }
    }

    /// `ofputil_format_meter_band()`.
    fn format(&self, flags: u16, s: &mut String) {
        let (rate, burst_size) = self.rate_burst();
        let _ = match self {
            MeterBand::Drop { .. } => write!(s, "\ntype=drop rate={rate}"),
            MeterBand::DscpRemark { .. } => write!(s, "\ntype=dscp_remark rate={rate}"),
            MeterBand::Unknown { band_type, .. } => write!(s, "\ntype={band_type} rate={rate}"),
        };
        if flags & OFPMF_BURST != 0 {
            let _ = write!(s, " burst_size={burst_size}");
        }
        if let MeterBand::DscpRemark { prec_level, .. } = self {
            let _ = write!(s, " prec_level={prec_level}");
        }
    }
}

/// Decodes the bands filling `r`.
fn decode_bands(r: &mut Reader<'_>) -> Result<Vec<MeterBand>, DecodeError> {
    // A band has the TLV layout of an action: type, then its 16-bit length.
    let mut bands = Vec::with_capacity(r.count_records(BAND_HEADER_LEN, tlv_len));
    while !r.is_empty() {
        bands.push(MeterBand::decode(r)?);
    }
    Ok(bands)
}

/// `ofputil_format_meter_id()`: `meter=N`, or the name of a virtual meter.
pub(crate) fn format_meter_id(id: u32, sep: char) -> String {
    let name = match id {
        id if id <= OFPM_MAX => return format!("meter{sep}{id}"),
        OFPM_SLOWPATH => "slowpath",
        OFPM_CONTROLLER => "controller",
        OFPM_ALL => "all",
        _ => "unknown",
    };
    format!("meter{sep}{name}")
}

/// `ofp_print_meter_flags()`.
fn format_flags(flags: u16, s: &mut String) {
    for (bit, name) in [
        (OFPMF_KBPS, "kbps "),
        (OFPMF_PKTPS, "pktps "),
        (OFPMF_BURST, "burst "),
        (OFPMF_STATS, "stats "),
    ] {
        if flags & bit != 0 {
            s.push_str(name);
        }
    }
    let rest = flags & !(OFPMF_KBPS | OFPMF_PKTPS | OFPMF_BURST | OFPMF_STATS);
    if rest != 0 {
        let _ = write!(s, "flags:{rest:#x} ");
    }
}

/// A meter's configuration: `struct ofp_meter_config` in a
/// `OFPMP_METER_CONFIG` reply, and the body of a `OFPT_METER_MOD`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct MeterConfig {
    /// Meter id.
    pub meter_id: u32,
    /// `OFPMF_*`.
    pub flags: u16,
    /// Bands.
    pub bands: Vec<MeterBand>,
}

impl MeterConfig {
    /// The first band `ovs-ofctl` refuses, as its error name.
    fn ovs_error(&self) -> Option<&'static str> {
        self.bands.iter().find_map(MeterBand::ovs_error)
    }

    /// `ofputil_format_meter_config()`, with its trailing newline.
    fn format(&self, s: &mut String) {
        s.push_str(&format_meter_id(self.meter_id, '='));
        s.push(' ');
        format_flags(self.flags, s);
        s.push_str("bands=");
        for b in &self.bands {
            b.format(self.flags, s);
        }
        s.push('\n');
    }

    fn encode_entry(&self, w: &mut Writer) {
        let start = w.len();
        let len = w.place_u16();
        w.u16(self.flags);
        w.u32(self.meter_id);
        self.bands.iter().for_each(|b| b.encode(w));
        w.fill_len(len, start);
    }

    fn decode_entry(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = usize::from(r.u16()?);
        if len < 8 {
            return Err(DecodeError::BadLength {
                what: "ofp_meter_config",
                len,
            });
        }
        let mut b = r.sub(len - 2)?;
        let flags = b.u16()?;
        let meter_id = b.u32()?;
        Ok(MeterConfig {
            meter_id,
            flags,
            bands: decode_bands(&mut b)?,
        })
    }
}

/// `OFPT_METER_MOD` (`struct ofp_meter_mod` and its bands).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MeterMod {
    /// Command.
    pub command: MeterModCommand,
    /// The meter's id, flags and bands (`ovs-ofctl` ignores the flags and
    /// bands of a delete; they are kept for the round trip).
    pub meter: MeterConfig,
}

impl MeterMod {
    /// `OFPMC_ADD` of `meter`.
    pub fn add(meter: MeterConfig) -> Self {
        MeterMod {
            command: MeterModCommand::Add,
            meter,
        }
    }

    /// `OFPMC_MODIFY` of `meter`.
    pub fn modify(meter: MeterConfig) -> Self {
        MeterMod {
            command: MeterModCommand::Modify,
            meter,
        }
    }

    /// `OFPMC_DELETE` of meter `meter_id` (`OFPM_ALL` for all).
    pub fn delete(meter_id: u32) -> Self {
        MeterMod {
            command: MeterModCommand::Delete,
            meter: MeterConfig {
                meter_id,
                ..MeterConfig::default()
            },
        }
    }

    pub(crate) fn encode(&self, w: &mut Writer) {
        w.u16(self.command.into());
        w.u16(self.meter.flags);
        w.u32(self.meter.meter_id);
        self.meter.bands.iter().for_each(|b| b.encode(w));
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let command = r.u16()?.into();
        let flags = r.u16()?;
        let meter_id = r.u32()?;
        Ok(MeterMod {
            command,
            meter: MeterConfig {
                meter_id,
                flags,
                bands: decode_bands(r)?,
            },
        })
    }

    /// The error with which `ovs-ofctl` 3.1 refuses this message
    /// (`ofputil_decode_meter_mod()`), or `None` if it decodes it.
    pub fn ovs_error(&self) -> Option<&'static str> {
        match self.command {
            MeterModCommand::Unknown(_) => Some("OFPMMFC_BAD_COMMAND"),
            MeterModCommand::Delete => None,
            _ if self.meter.flags & OFPMF_KBPS != 0 && self.meter.flags & OFPMF_PKTPS != 0 => {
                Some("OFPMMFC_BAD_FLAGS")
            }
            _ => self.meter.ovs_error(),
        }
    }
}

impl fmt::Display for MeterMod {
    /// `ofputil_format_meter_mod()`; a delete prints no flags or bands.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = match self.command {
            MeterModCommand::Add => " ADD ".to_string(),
            MeterModCommand::Modify => " MOD ".to_string(),
            MeterModCommand::Delete => " DEL ".to_string(),
            MeterModCommand::Unknown(c) => format!(" cmd:{c} "),
        };
        if self.command == MeterModCommand::Delete {
            MeterConfig {
                meter_id: self.meter.meter_id,
                ..MeterConfig::default()
            }
            .format(&mut s);
        } else {
            self.meter.format(&mut s);
        }
        f.write_str(s.trim_end_matches('\n'))
    }
}

/// `struct ofp_meter_stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MeterStats {
    /// Meter id.
    pub meter_id: u32,
    /// Flows using the meter.
    pub flow_count: u32,
    /// Packets into the meter.
    pub packet_in_count: u64,
    /// Bytes into the meter.
    pub byte_in_count: u64,
    /// Seconds alive.
    pub duration_sec: u32,
    /// Nanoseconds beyond that.
    pub duration_nsec: u32,
    /// Per band (packets, bytes) the band acted on, in band order.
    pub bands: Vec<(u64, u64)>,
}

impl MeterStats {
    fn encode(&self, w: &mut Writer) {
        let start = w.len();
        w.u32(self.meter_id);
        let len = w.place_u16();
        w.zeros(6);
        w.u32(self.flow_count);
        w.u64(self.packet_in_count);
        w.u64(self.byte_in_count);
        w.u32(self.duration_sec);
        w.u32(self.duration_nsec);
        for (p, b) in &self.bands {
            w.u64(*p);
            w.u64(*b);
        }
        w.fill_len(len, start);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let meter_id = r.u32()?;
        let len = usize::from(r.u16()?);
        if len < STATS_LEN || (len - STATS_LEN) % BAND_STATS_LEN != 0 {
            return Err(DecodeError::BadLength {
                what: "ofp_meter_stats",
                len,
            });
        }
        let mut b = r.sub(len - 6)?;
        b.pad(6, "ofp_meter_stats")?;
        let mut s = MeterStats {
            meter_id,
            flow_count: b.u32()?,
            packet_in_count: b.u64()?,
            byte_in_count: b.u64()?,
            duration_sec: b.u32()?,
            duration_nsec: b.u32()?,
            bands: Vec::with_capacity(b.remaining() / BAND_STATS_LEN),
        };
        while !b.is_empty() {
            s.bands.push((b.u64()?, b.u64()?));
        }
        Ok(s)
    }

    /// `ofputil_format_meter_stats()`, with its trailing newline.
    fn format(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "{} flow_count:{} packet_in_count:{} byte_in_count:{} duration:{} bands:",
            format_meter_id(self.meter_id, ':'),
            self.flow_count,
            self.packet_in_count,
            self.byte_in_count,
            duration(self.duration_sec, self.duration_nsec)
        );
        for (i, (p, b)) in self.bands.iter().enumerate() {
            let _ = writeln!(s, "{i}: packet_count:{p} byte_count:{b}");
        }
    }
}

/// `struct ofp_meter_features`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MeterFeatures {
    /// Maximum number of meters.
    pub max_meter: u32,
    /// Bitmap of `1 << OFPMBT_*` supported.
    pub band_types: u32,
    /// Bitmap of `OFPMF_*` supported.
    pub capabilities: u32,
    /// Maximum bands per meter.
    pub max_bands: u8,
    /// Maximum color value.
    pub max_color: u8,
}

impl MeterFeatures {
    fn encode(&self, w: &mut Writer) {
        w.u32(self.max_meter);
        w.u32(self.band_types);
        w.u32(self.capabilities);
        w.u8(self.max_bands);
        w.u8(self.max_color);
        w.zeros(2);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let f = MeterFeatures {
            max_meter: r.u32()?,
            band_types: r.u32()?,
            capabilities: r.u32()?,
            max_bands: r.u8()?,
            max_color: r.u8()?,
        };
        r.pad(2, "ofp_meter_features")?;
        Ok(f)
    }
}

/// `ofp_print_bit_names()` with a space separator.
fn bit_names(bits: u32, name: impl Fn(u32) -> Option<&'static str>) -> String {
    if bits == 0 {
        return "0".into();
    }
    let mut names = Vec::new();
    let mut rest = bits;
    for i in 0..32 {
        let bit = 1u32 << i;
        if let Some(n) = name(bit).filter(|_| bits & bit != 0) {
            names.push(n.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        names.push(format!("{rest:#x}"));
    }
    names.join(" ")
}

impl fmt::Display for MeterFeatures {
    /// `ofputil_format_meter_features()`, without its trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let band = |bit| match bit {
            0x2 => Some("drop"),
            0x4 => Some("dscp_remark"),
            _ => None,
        };
        let cap = |bit| match bit {
            0x1 => Some("kbps"),
            0x2 => Some("pktps"),
            0x4 => Some("burst"),
            0x8 => Some("stats"),
            _ => None,
        };
        write!(
            f,
            "\nmax_meter:{} max_bands:{} max_color:{}\nband_types: {}\ncapabilities: {}",
            self.max_meter,
            self.max_bands,
            self.max_color,
            bit_names(self.band_types, band),
            bit_names(self.capabilities, cap)
        )
    }
}

/// The `OFPMP_METER` and `OFPMP_METER_CONFIG` request body
/// (`struct ofp_meter_multipart_request`).
pub(crate) fn encode_request(meter_id: u32, w: &mut Writer) {
    w.u32(meter_id);
    w.zeros(4);
}

pub(crate) fn decode_request(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let id = r.u32()?;
    r.pad(4, "ofp_meter_multipart_request")?;
    Ok(id)
}

pub(crate) fn encode_stats(v: &[MeterStats], w: &mut Writer) {
    v.iter().for_each(|s| s.encode(w));
}

pub(crate) fn decode_stats(r: &mut Reader<'_>) -> Result<Vec<MeterStats>, DecodeError> {
    let mut v = Vec::with_capacity(r.count_records(STATS_LEN, |b| match b {
        [_, _, _, _, hi, lo, ..] => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }));
    while !r.is_empty() {
        v.push(MeterStats::decode(r)?);
    }
    Ok(v)
}

pub(crate) fn encode_configs(v: &[MeterConfig], w: &mut Writer) {
    v.iter().for_each(|c| c.encode_entry(w));
}

pub(crate) fn decode_configs(r: &mut Reader<'_>) -> Result<Vec<MeterConfig>, DecodeError> {
    let mut v = Vec::with_capacity(r.count_records(8, |b| match b {
        [hi, lo, ..] => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }));
    while !r.is_empty() {
        v.push(MeterConfig::decode_entry(r)?);
    }
    Ok(v)
}

pub(crate) fn encode_features(m: &MeterFeatures, w: &mut Writer) {
    m.encode(w);
}

pub(crate) fn decode_features(r: &mut Reader<'_>) -> Result<MeterFeatures, DecodeError> {
    MeterFeatures::decode(r)
}

/// How many leading entries of a meter-config reply `ovs-ofctl` decodes, and
/// the error it stops at (`ofp_print_meter_config_reply()`).
pub(crate) fn config_ovs_error(v: &[MeterConfig]) -> Option<(usize, &'static str)> {
    v.iter()
        .enumerate()
        .find_map(|(i, c)| c.ovs_error().map(|e| (i, e)))
}

/// `ofp_print_meter_stats_reply()`: each entry after a newline, each ending
/// in one.
pub(crate) fn format_stats(v: &[MeterStats]) -> String {
    let mut s = String::new();
    for m in v {
        s.push('\n');
        m.format(&mut s);
    }
    s
}

/// `ofp_print_meter_config_reply()`: each entry after a newline, each ending
/// in one.
pub(crate) fn format_configs(v: &[MeterConfig]) -> String {
    let mut s = String::new();
    for c in v {
        s.push('\n');
        c.format(&mut s);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::unhex;

    /// (band, bytes) pairs, one table for both directions.
    fn bands() -> Vec<(MeterBand, &'static str)> {
        vec![
            (
                MeterBand::drop(1024, 128),
                "0001001000000400000000800000 0000",
            ),
            (
                MeterBand::DscpRemark {
                    rate: 0x10_0000,
                    burst_size: 0xf000,
                    prec_level: 3,
                },
                "000200100010000000 00f000 03000000",
            ),
            (
                MeterBand::Unknown {
                    band_type: 0xffff,
                    rate: 5,
                    burst_size: 6,
                    data: vec![0, 0, 0x23, 0x20, 1, 2, 3, 4],
                },
                "ffff0014 00000005 00000006 00002320 01020304",
            ),
        ]
    }

    #[test]
    fn band_parse_and_emit() {
        for (band, hex) in bands() {
            let bytes = unhex(&hex.replace(' ', ""));
            let mut r = Reader::new(&bytes);
            assert_eq!(MeterBand::decode(&mut r).unwrap(), band, "{hex}");
            assert!(r.is_empty());
            let mut w = Writer::from_vec(vec![0xa5; 3]);
            band.encode(&mut w);
            assert_eq!(&w.as_slice()[3..], bytes.as_slice());
            assert_eq!(band.encoded_len(), bytes.len());
        }
    }

    #[test]
    fn bad_bands_are_typed_errors() {
        for hex in [
            "0001000c0000000100000001",           // DROP must be 16 bytes
            "0009000800000001",                   // shorter than the header
            "0001001000000001000000010000",       // truncated
            "00010010000000010000000100000001",   // nonzero padding
            "00050010000000010000000100000000ff", // band then a stray byte
        ] {
            let b = unhex(&hex.replace(' ', ""));
            assert!(decode_bands(&mut Reader::new(&b)).is_err(), "{hex}");
        }
    }

    #[test]
    fn ovs_refusals() {
        let mm = |command, flags, bands| MeterMod {
            command,
            meter: MeterConfig {
                meter_id: 1,
                flags,
                bands,
            },
        };
        use MeterModCommand::*;
        let unknown = MeterBand::Unknown {
            band_type: 5,
            rate: 1,
            burst_size: 0,
            data: vec![0; 4],
        };
        let long = MeterBand::Unknown {
            band_type: 5,
            rate: 1,
            burst_size: 0,
            data: vec![0; 12],
        };
        assert_eq!(
            mm(Unknown(8), 0, vec![]).ovs_error(),
            Some("OFPMMFC_BAD_COMMAND")
        );
        assert_eq!(
            mm(Add, OFPMF_KBPS | OFPMF_PKTPS, vec![]).ovs_error(),
            Some("OFPMMFC_BAD_FLAGS")
        );
        assert_eq!(
            mm(Add, 1, vec![unknown.clone()]).ovs_error(),
            Some("OFPMMFC_BAD_BAND")
        );
        assert_eq!(
            mm(Modify, 1, vec![long]).ovs_error(),
            Some("OFPBRC_BAD_LEN")
        );
        assert_eq!(mm(Delete, 3, vec![unknown]).ovs_error(), None);
        assert_eq!(mm(Add, 2, vec![MeterBand::drop(1, 0)]).ovs_error(), None);
    }

    #[test]
    fn meter_ids_print_as_ovs_names_them() {
        assert_eq!(format_meter_id(1, '='), "meter=1");
        assert_eq!(format_meter_id(OFPM_MAX, ':'), "meter:4294901760");
        assert_eq!(format_meter_id(OFPM_SLOWPATH, '='), "meter=slowpath");
        assert_eq!(format_meter_id(OFPM_CONTROLLER, '='), "meter=controller");
        assert_eq!(format_meter_id(OFPM_ALL, '='), "meter=all");
        assert_eq!(format_meter_id(0xffff_fff0, '='), "meter=unknown");
    }

    #[test]
    fn bit_names_like_ofp_print_bit_names() {
        let cap = |bit| (bit == 1).then_some("kbps");
        assert_eq!(bit_names(0, cap), "0");
        assert_eq!(bit_names(1, cap), "kbps");
        assert_eq!(bit_names(0x31, cap), "kbps 0x30");
    }
}
