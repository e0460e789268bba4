//! OXM match entries and the OF1.3 `ofp_match` structure (OF1.3 §7.2.3).
//!
//! A [`Match`] keeps its entries in wire order so that decoding then
//! encoding reproduces the input bytes. [`Match::insert`] places new entries
//! in the order Open vSwitch's `nx_put_raw()` emits them, so a match built in
//! Rust encodes exactly as `ovs-ofctl` would. [`Match::try_insert`] and
//! [`Match::try_with`] also check prerequisites as the match is built, and
//! [`Match::checked`] ends an order-free build with [`Match::with`]; the
//! message encoder still checks every match, for those built unchecked.
//!
//! Entries of fields this codec does not know are kept as [`RawOxm`]s in
//! [`Match::unknown`], with their place among the known entries, and
//! re-encode byte for byte. Like OVS's loose decoding (`nx_pull_raw()` with
//! `strict` off, which `ovs-ofctl` and a switch's flow-stats replies use),
//! they have no prerequisites, meet none, and print as nothing (where OVS
//! knows a field this codec does not, `ovs-ofctl` names it and we do not).

use crate::error::DecodeError;
use crate::field::{Field, OXM_CLASS_EXPERIMENTER, Prereq};
use crate::wire::{Reader, Writer};

/// `OFPMT_OXM` (OF1.3 §7.2.3.1 `enum ofp_match_type`).
pub const OFPMT_OXM: u16 = 1;

/// One OXM TLV: a field, its value and an optional mask (OF1.3 §7.2.3.2).
///
/// Values and masks hold the field's bytes as a big-endian integer in the
/// low [`Field::len`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OxmField {
    /// The field.
    pub field: Field,
    /// The value.
    pub value: u128,
    /// The mask, if the entry is masked (`OXM_HASMASK`).
    pub mask: Option<u128>,
}

impl OxmField {
    /// An exact-match entry.
    pub fn exact(field: Field, value: impl Into<u128>) -> Self {
        OxmField {
            field,
            value: value.into(),
            mask: None,
        }
    }

    /// A masked entry.
    pub fn masked(field: Field, value: impl Into<u128>, mask: impl Into<u128>) -> Self {
        OxmField {
            field,
            value: value.into(),
            mask: Some(mask.into()),
        }
    }

    /// The effective mask: the given one or all ones.
    pub fn mask_or_full(&self) -> u128 {
        self.mask.unwrap_or_else(|| self.field.full_mask())
    }

    /// Encoded size of this entry.
    pub fn encoded_len(&self) -> usize {
        let n = self.field.len();
        4 + exp_len(self.field.oxm_header().class) + if self.mask.is_some() { 2 * n } else { n }
    }

    /// Writes the entry with its OF1.3 header.
    pub fn encode(&self, w: &mut Writer) {
        let h = self.field.oxm_header();
        write_header(
            w,
            h.class,
            h.field,
            h.experimenter,
            self.field.len(),
            self.mask.is_some(),
        );
        w.uint(self.value, self.field.len());
        if let Some(m) = self.mask {
            w.uint(m, self.field.len());
        }
    }

    /// Reads one entry.
    #[inline]
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let (field, hasmask, payload) = read_header(r)?;
        Self::decode_payload(field, hasmask, payload, r)
    }

    /// Reads the value (and mask) of an entry whose header was read.
    #[inline]
    fn decode_payload(
        field: Field,
        hasmask: bool,
        payload: usize,
        r: &mut Reader<'_>,
    ) -> Result<Self, DecodeError> {
        let info = field.info();
        let n = usize::from(info.bytes);
        let want = if hasmask { 2 * n } else { n };
        if payload != want {
            return Err(DecodeError::BadOxmLength {
                field: info.name,
                len: payload,
            });
        }
        if hasmask && !info.maskable {
            return Err(DecodeError::BadValue(info.name));
        }
        // One bounds check for the value and the mask.
        let bytes = r.take(want)?;
        let (v, m) = bytes.split_at(n);
        let value = be_uint(v);
        let mask = if hasmask {
            let m = be_uint(m);
            if value & !m != 0 {
                return Err(DecodeError::BadValue(info.name));
            }
            Some(m)
        } else {
            None
        };
        Ok(OxmField { field, value, mask })
    }
}

/// A big-endian unsigned integer of at most 16 bytes (OXM values are 1, 2,
/// 4, 6, 8 or 16 bytes wide); 64-bit arithmetic below 9 bytes.
#[inline]
fn be_uint(b: &[u8]) -> u128 {
    match *b {
        [a] => u128::from(a),
        [a, b] => u128::from(u16::from_be_bytes([a, b])),
        [a, b, c, d] => u128::from(u32::from_be_bytes([a, b, c, d])),
        [a, b, c, d, e, f, g, h] => u128::from(u64::from_be_bytes([a, b, c, d, e, f, g, h])),
        _ if b.len() <= 8 => u128::from(b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x))),
        _ => match <[u8; 16]>::try_from(b) {
            Ok(a) => u128::from_be_bytes(a),
            // No field is wider than 16 bytes; keep the low 16 bytes.
            Err(_) => b.iter().fold(0u128, |acc, &x| (acc << 8) | u128::from(x)),
        },
    }
}

/// The size of the experimenter id after an OXM header of `class`.
#[inline]
fn exp_len(class: u16) -> usize {
    if class == OXM_CLASS_EXPERIMENTER {
        4
    } else {
        0
    }
}

/// Writes an OXM/NXM header (`class`, `field`, `hasmask`, length), plus the
/// experimenter id for `OFPXMC_EXPERIMENTER`. `n` is the value width.
pub(crate) fn write_header(
    w: &mut Writer,
    class: u16,
    field: u8,
    experimenter: u32,
    n: usize,
    hasmask: bool,
) {
    let exp = exp_len(class);
    let len = exp + if hasmask { 2 * n } else { n };
    w.u16(class);
    w.u8((field << 1) | u8::from(hasmask));
    w.u8(u8::try_from(len).unwrap_or(u8::MAX));
    if exp != 0 {
        w.u32(experimenter);
    }
}

/// An OXM/NXM header as read: class, field number, experimenter id (0
/// unless the class is `OFPXMC_EXPERIMENTER`), the mask bit, and the payload
/// length that follows (excluding any experimenter id).
struct Header {
    class: u16,
    field: u8,
    experimenter: u32,
    hasmask: bool,
    payload: usize,
}

#[inline]
fn read_raw_header(r: &mut Reader<'_>) -> Result<Header, DecodeError> {
    let [c0, c1, fh, len] = r.array::<4>()?;
    let class = u16::from_be_bytes([c0, c1]);
    let mut len = usize::from(len);
    let mut experimenter = 0;
    if class == OXM_CLASS_EXPERIMENTER {
        experimenter = r.u32()?;
        len = len.checked_sub(4).ok_or(DecodeError::BadLength {
            what: "experimenter OXM",
            len,
        })?;
    }
    Ok(Header {
        class,
        field: fh >> 1,
        experimenter,
        hasmask: fh & 1 == 1,
        payload: len,
    })
}

/// Reads an OXM/NXM header and returns the field, the mask bit and the
/// payload length that follows (excluding any experimenter id).
#[inline]
pub(crate) fn read_header(r: &mut Reader<'_>) -> Result<(Field, bool, usize), DecodeError> {
    let h = read_raw_header(r)?;
    let field =
        Field::from_header(h.class, h.field, h.experimenter).ok_or(DecodeError::UnknownOxm {
            class: h.class,
            field: h.field,
            experimenter: h.experimenter,
        })?;
    Ok((field, h.hasmask, h.payload))
}

/// An OXM/NXM match entry whose field this codec does not know, kept as read
/// (OF1.3 §7.2.3.2): its header's class, field number and mask bit, the
/// experimenter id of an `OFPXMC_EXPERIMENTER` entry, and the payload split
/// into value and mask.
///
/// The header's length is `value.len()` plus `mask`'s length (plus 4 for an
/// experimenter id), so those must total at most 255 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawOxm {
    /// OXM class (`OFPXMC_*`, or an NXM vendor class).
    pub class: u16,
    /// Field number within the class.
    pub field: u8,
    /// Experimenter id; 0 unless `class` is `OFPXMC_EXPERIMENTER`.
    pub experimenter: u32,
    /// The value bytes.
    pub value: Vec<u8>,
    /// The mask bytes, as long as the value, for a masked entry (`OXM_HASMASK`).
    pub mask: Option<Vec<u8>>,
}

impl RawOxm {
    /// Encoded size of this entry.
    pub fn encoded_len(&self) -> usize {
        4 + exp_len(self.class) + self.value.len() + self.mask.as_ref().map_or(0, Vec::len)
    }

    /// Writes the entry with its header.
    pub fn encode(&self, w: &mut Writer) {
        write_header(
            w,
            self.class,
            self.field,
            self.experimenter,
            self.value.len(),
            self.mask.is_some(),
        );
        w.bytes(&self.value);
        if let Some(m) = &self.mask {
            w.bytes(m);
        }
    }

    /// Reads the payload of an entry whose header named no known field. As
    /// in OVS's `nx_pull_entry__()`, a masked payload is value then mask of
    /// equal width, and a value with a bit outside its mask is refused.
    fn decode_payload(h: &Header, r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if h.hasmask && h.payload % 2 != 0 {
            return Err(DecodeError::BadOxmLength {
                field: "unknown masked OXM",
                len: h.payload,
            });
        }
        let bytes = r.take(h.payload)?;
        let (value, mask) = if h.hasmask {
            let (v, m) = bytes.split_at(h.payload / 2);
            if v.iter().zip(m).any(|(v, m)| v & !m != 0) {
                return Err(DecodeError::BadValue("unknown masked OXM"));
            }
            (v.to_vec(), Some(m.to_vec()))
        } else {
            (bytes.to_vec(), None)
        };
        Ok(RawOxm {
            class: h.class,
            field: h.field,
            experimenter: h.experimenter,
            value,
            mask,
        })
    }
}

/// An OF1.3 match: a list of OXM entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Match {
    /// Entries of known fields, in wire order.
    pub fields: Vec<OxmField>,
    /// Entries of unknown fields, each with the number of [`Match::fields`]
    /// entries before it on the wire (entries at the same place keep their
    /// order). Empty unless decoded.
    pub unknown: Vec<(usize, RawOxm)>,
}

impl Match {
    /// The empty (match-everything) match.
    pub fn new() -> Self {
        Match::default()
    }

    /// Adds an entry at its `nx_put_raw()` position (replacing an entry for
    /// the same field), without checking prerequisites ([`Match::try_insert`]
    /// checks them).
    /// An unknown entry stays just before the known entry it preceded.
    pub fn insert(&mut self, f: OxmField) {
        let old = self.fields.iter().position(|e| e.field == f.field);
        let rank = put_rank(f.field);
        let at = self
            .fields
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != old)
            .position(|(_, e)| put_rank(e.field) > rank)
            .unwrap_or(self.fields.len() - usize::from(old.is_some()));
        if let Some(old) = old {
            if old == at {
                self.fields[at] = f;
                return;
            }
            self.fields.remove(old);
            self.unknown
                .iter_mut()
                .filter(|(u, _)| *u > old)
                .for_each(|(u, _)| *u -= 1);
        }
        self.fields.insert(at, f);
        self.unknown
            .iter_mut()
            .filter(|(u, _)| *u >= at)
            .for_each(|(u, _)| *u += 1);
    }

    /// [`Match::insert`], then checks the prerequisites of the whole match
    /// ([`Match::check_prereqs`]); on failure the match is left as it was and
    /// the error names the field whose prerequisite is unmet (or that repeats).
    /// Building a match only through the `try_` forms (prerequisites first,
    /// e.g. `eth_type`, then `ip_proto`, then `tcp_dst`) gives one that
    /// encodes, whatever order the fields are added in beyond that.
    pub fn try_insert(&mut self, f: OxmField) -> Result<(), &'static str> {
        let before = self.clone();
        self.insert(f);
        self.check_prereqs().inspect_err(|_| *self = before)
    }

    /// Builder form of [`Match::try_insert`] for an exact match.
    pub fn try_with(mut self, field: Field, value: impl Into<u128>) -> Result<Self, &'static str> {
        self.try_insert(OxmField::exact(field, value))?;
        Ok(self)
    }

    /// Builder form of [`Match::try_insert`] for a masked match.
    pub fn try_with_masked(
        mut self,
        field: Field,
        value: impl Into<u128>,
        mask: impl Into<u128>,
    ) -> Result<Self, &'static str> {
        self.try_insert(OxmField::masked(field, value, mask))?;
        Ok(self)
    }

    /// The match, if its prerequisites hold: the checked end of a build with
    /// the unchecked [`Match::with`] forms, which may add a field before its
    /// prerequisite.
    pub fn checked(self) -> Result<Self, &'static str> {
        self.check_prereqs()?;
        Ok(self)
    }

    /// Builder form of [`Match::insert`] for an exact match. It does not
    /// check prerequisites, so that fields can come in any order; end the
    /// build with [`Match::checked`], or use [`Match::try_with`].
    pub fn with(mut self, field: Field, value: impl Into<u128>) -> Self {
        self.insert(OxmField::exact(field, value));
        self
    }

    /// Builder form of [`Match::insert`] for a masked match (unchecked, as
    /// [`Match::with`]).
    pub fn with_masked(
        mut self,
        field: Field,
        value: impl Into<u128>,
        mask: impl Into<u128>,
    ) -> Self {
        self.insert(OxmField::masked(field, value, mask));
        self
    }

    /// The entry for `field`, if present.
    pub fn get(&self, field: Field) -> Option<&OxmField> {
        self.fields.iter().find(|e| e.field == field)
    }

    /// Checks that each entry's prerequisite is matched by an earlier entry
    /// and that no field repeats (OVS `nx_pull_raw()` order semantics).
    pub fn check_prereqs(&self) -> Result<(), &'static str> {
        let mut check = PrereqCheck::default();
        self.fields.iter().try_for_each(|e| check.check(e))
    }

    /// Encoded size including the `ofp_match` header and padding.
    pub fn encoded_len(&self) -> usize {
        let n = 4
            + self.fields.iter().map(OxmField::encoded_len).sum::<usize>()
            + self
                .unknown
                .iter()
                .map(|(_, u)| u.encoded_len())
                .sum::<usize>();
        n.next_multiple_of(8)
    }

    /// Writes `struct ofp_match` (OF1.3 §7.2.3.1), padded to 8 bytes. It cannot fail:
    /// prerequisites are checked where a match is built ([`Match::checked`],
    /// [`Match::try_with`]), and a match decoded from the wire is checked on decode.
    pub fn encode(&self, w: &mut Writer) {
        self.write(w);
    }

    /// Writes `struct ofp_match`.
    pub(crate) fn write(&self, w: &mut Writer) {
        let start = w.len();
        w.u16(OFPMT_OXM);
        let len = w.place_u16();
        self.encode_fields(w);
        w.fill_len(len, start);
        w.pad_to(start, 8);
    }

    /// Writes the bare OXM entries, the unknown ones in their places.
    pub fn encode_fields(&self, w: &mut Writer) {
        let unknown_at = |w: &mut Writer, i: usize| {
            self.unknown
                .iter()
                .filter(|(at, _)| *at == i)
                .for_each(|(_, u)| u.encode(w));
        };
        for (i, f) in self.fields.iter().enumerate() {
            unknown_at(w, i);
            f.encode(w);
        }
        self.unknown
            .iter()
            .filter(|(at, _)| *at >= self.fields.len())
            .for_each(|(_, u)| u.encode(w));
    }

    /// Reads `struct ofp_match`, including its padding.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if ty != OFPMT_OXM {
            return Err(DecodeError::BadValue("ofp_match type"));
        }
        if len < 4 {
            return Err(DecodeError::BadLength {
                what: "ofp_match",
                len,
            });
        }
        let mut body = r.sub(len - 4)?;
        let m = Match::decode_fields(&mut body)?;
        r.pad(len.next_multiple_of(8) - len, "ofp_match")?;
        Ok(m)
    }

    /// Reads bare OXM entries until the reader is empty.
    pub fn decode_fields(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        // OXM header: class (2), field|hasmask (1), payload length (1); the
        // smallest entry is the header and a 1-byte value.
        let mut fields =
            Vec::with_capacity(r.count_records(5, |b| b.get(3).map(|&l| 4 + usize::from(l))));
        let mut unknown = Vec::new();
        while !r.is_empty() {
            let h = read_raw_header(r)?;
            match Field::from_header(h.class, h.field, h.experimenter) {
                Some(f) => fields.push(OxmField::decode_payload(f, h.hasmask, h.payload, r)?),
                None => unknown.push((fields.len(), RawOxm::decode_payload(&h, r)?)),
            }
        }
        let m = Match { fields, unknown };
        m.check_prereqs().map_err(DecodeError::Prerequisite)?;
        Ok(m)
    }
}

/// Checks a match's entries one at a time, in order: no field repeats, and
/// each field's prerequisite is met by an earlier entry (OVS `nx_pull_raw()`).
#[derive(Default)]
struct PrereqCheck {
    st: PrereqState,
    seen: [u64; 2],
}

impl PrereqCheck {
    /// Checks and records the next entry; the error names its field.
    #[inline]
    fn check(&mut self, e: &OxmField) -> Result<(), &'static str> {
        let idx = e.field as usize;
        let (word, bit) = (idx / 64, 1u64 << (idx % 64));
        if self.seen.get(word).is_some_and(|w| w & bit != 0) {
            return Err(e.field.name());
        }
        if let Some(w) = self.seen.get_mut(word) {
            *w |= bit;
        }
        if !self.st.allows(e.field) {
            return Err(e.field.name());
        }
        self.st.record(e);
        Ok(())
    }
}

/// The flow values prerequisites look at, as fields are read in order.
/// Compared for equality (`eth`, `proto`, `icmp6_type`), a value wider than
/// the field saturates to `MAX`, which equals none of the constants; tested
/// bitwise (`vlan_vid`, `ct_state`), only the low bits matter.
#[derive(Default)]
struct PrereqState {
    eth: u32,
    proto: u32,
    icmp6_type: u32,
    vlan_vid: u32,
    ct_state: u32,
    ct_state_mask: u32,
}

/// `v` if it fits in 32 bits, else `u32::MAX`.
#[inline]
fn sat32(v: u128) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

impl PrereqState {
    #[inline]
    fn record(&mut self, e: &OxmField) {
        match e.field {
            Field::EthType => self.eth = sat32(e.value),
            Field::IpProto => self.proto = sat32(e.value),
            Field::Icmpv6Type => self.icmp6_type = sat32(e.value),
            Field::VlanVid => self.vlan_vid = e.value as u32,
            Field::CtState => {
                self.ct_state = e.value as u32;
                self.ct_state_mask = e.mask.map_or(u32::MAX, |m| m as u32);
            }
            _ => {}
        }
    }

    /// OVS `is_ct_valid()`: the match implies a valid conntrack entry.
    #[inline]
    fn ct_valid(&self) -> bool {
        let (v, m) = (self.ct_state, self.ct_state_mask);
        v & 0xcf != 0 || (v & 0x20 != 0 && m & 0x10 != 0 && v & 0x10 == 0)
    }

    #[inline]
    fn allows(&self, f: Field) -> bool {
        use Field::*;
        if matches!(
            f,
            CtNwProto | CtNwSrc | CtNwDst | CtIpv6Src | CtIpv6Dst | CtTpSrc | CtTpDst
        ) && !self.ct_valid()
        {
            return false;
        }
        let (eth, proto) = (self.eth, self.proto);
        let ip = eth == 0x0800 || eth == 0x86dd;
        let icmp6 = eth == 0x86dd && proto == 58;
        match f.info().prereq {
            Prereq::None => true,
            Prereq::Vlan => self.vlan_vid & 0x1000 != 0,
            Prereq::Ip => ip,
            Prereq::Ipv4 => eth == 0x0800,
            Prereq::Ipv6 => eth == 0x86dd,
            Prereq::Arp => eth == 0x0806 || eth == 0x8035,
            Prereq::Tcp => ip && proto == 6,
            Prereq::Udp => ip && proto == 17,
            Prereq::Sctp => ip && proto == 132,
            Prereq::Icmpv4 => eth == 0x0800 && proto == 1,
            Prereq::Icmpv6 => icmp6,
            Prereq::Nd => icmp6 && (self.icmp6_type == 135 || self.icmp6_type == 136),
            Prereq::NdSolicit => icmp6 && self.icmp6_type == 135,
            Prereq::NdAdvert => icmp6 && self.icmp6_type == 136,
            Prereq::Mpls => eth == 0x8847 || eth == 0x8848,
            Prereq::Pbb => eth == 0x88e7,
        }
    }
}

/// Position of a field in OVS's `nx_put_raw()` output for OF1.3.
fn put_rank(f: Field) -> u16 {
    // Every insert ranks each field already in the match: a table, not a search of `ORDER`
    // (a search was 5 % of a 30,000-service render).
    PUT_RANKS.get(f as usize).copied().unwrap_or(u16::MAX)
}

/// Each field's place in [`PUT_ORDER`], indexed by `Field as usize`; `u16::MAX` for a field
/// not in it.
const PUT_RANKS: [u16; Field::ALL.len()] = {
    let mut ranks = [u16::MAX; Field::ALL.len()];
    let mut i = 0;
    while i < PUT_ORDER.len() {
        ranks[PUT_ORDER[i] as usize] = i as u16;
        i += 1;
    }
    ranks
};

/// The order in which `nx_put_raw()` writes the fields.
const PUT_ORDER: &[Field] = {
    use Field::*;
    &[
        DpHash,
        RecircId,
        ConjId,
        InPort,
        InPortOxm,
        InPhyPort,
        ActsetOutput,
        EthSrc,
        EthDst,
        EthType,
        VlanTci,
        VlanVid,
        VlanPcp,
        MplsTc,
        MplsBos,
        MplsTtl,
        MplsLabel,
        PbbIsid,
        Ipv4Src,
        Ipv4Dst,
        Ipv6Src,
        Ipv6Dst,
        IpFrag,
        IpDscp,
        IpDscpShifted,
        IpEcn,
        NwTtl,
        Ipv6Label,
        Ipv6Exthdr,
        IpProto,
        TcpSrc,
        TcpDst,
        TcpFlags,
        UdpSrc,
        UdpDst,
        SctpSrc,
        SctpDst,
        Icmpv4Type,
        Icmpv4Code,
        Icmpv6Type,
        Icmpv6Code,
        NdTarget,
        NdSll,
        NdTll,
        ArpOp,
        ArpSpa,
        ArpTpa,
        ArpSha,
        ArpTha,
        TunId,
        TunSrc,
        TunDst,
        TunIpv6Src,
        TunIpv6Dst,
        Reg0,
        Reg1,
        Reg2,
        Reg3,
        Reg4,
        Reg5,
        Reg6,
        Reg7,
        Reg8,
        Reg9,
        Reg10,
        Reg11,
        Reg12,
        Reg13,
        Reg14,
        Reg15,
        Xreg0,
        Xreg1,
        Xreg2,
        Xreg3,
        Xreg4,
        Xreg5,
        Xreg6,
        Xreg7,
        Xxreg0,
        Xxreg1,
        Xxreg2,
        Xxreg3,
        PktMark,
        CtState,
        CtZone,
        CtMark,
        CtLabel,
        CtNwSrc,
        CtIpv6Src,
        CtNwDst,
        CtIpv6Dst,
        CtNwProto,
        CtTpSrc,
        CtTpDst,
        Metadata,
    ]
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The rank table gives each field its first place in `PUT_ORDER`, as a search of it
    /// would, and `u16::MAX` to a field not listed; no field is listed twice.
    #[test]
    fn put_ranks_are_the_places_in_put_order() {
        for &f in Field::ALL {
            let searched = PUT_ORDER
                .iter()
                .position(|&o| o == f)
                .map_or(u16::MAX, |p| p as u16);
            assert_eq!(put_rank(f), searched, "{f:?}");
            assert!(PUT_ORDER.iter().filter(|&&o| o == f).count() <= 1, "{f:?}");
        }
    }

    // priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80 as ovs-ofctl 3.1 encodes it.
    const TCP_MATCH: [u8; 32] = [
        0x00, 0x01, 0x00, 0x1d, 0x80, 0x00, 0x0a, 0x02, 0x08, 0x00, 0x80, 0x00, 0x18, 0x04, 0x0a,
        0x60, 0x00, 0x0a, 0x80, 0x00, 0x14, 0x01, 0x06, 0x80, 0x00, 0x1c, 0x02, 0x00, 0x50, 0x00,
        0x00, 0x00,
    ];

    fn tcp_match() -> Match {
        Match::new()
            .with(Field::TcpDst, 80u16)
            .with(
                Field::Ipv4Dst,
                u32::from(std::net::Ipv4Addr::new(10, 96, 0, 10)),
            )
            .with(Field::IpProto, 6u8)
            .with(Field::EthType, 0x0800u16)
    }

    #[test]
    fn parse() {
        let mut r = Reader::new(&TCP_MATCH);
        assert_eq!(Match::decode(&mut r).unwrap(), tcp_match());
        assert!(r.is_empty());
    }

    #[test]
    fn emit() {
        let mut w = Writer::from_vec(vec![0xa5; 0]);
        tcp_match().encode(&mut w);
        assert_eq!(w.as_slice(), &TCP_MATCH);
        assert_eq!(tcp_match().encoded_len(), TCP_MATCH.len());
    }

    #[test]
    fn prereq_missing_is_found_when_the_match_is_built() {
        let m = Match::new().with(Field::TcpDst, 80u16);
        assert_eq!(m.clone().checked(), Err("tcp_dst"));
        assert_eq!(Match::new().try_with(Field::TcpDst, 80u16), Err("tcp_dst"));
        // Encoding writes what it is given; it fails only on a message's size.
        let mut w = Writer::new();
        m.encode(&mut w);
        assert_eq!(w.len(), m.encoded_len());
    }

    fn raw(field: u8) -> RawOxm {
        RawOxm {
            class: 0x8000,
            field,
            experimenter: 0,
            value: vec![0x12, 0x34],
            mask: None,
        }
    }

    /// eth_type, unknown field 63, ip_proto, unknown field 62, tcp_dst: the unknown entries
    /// keep their places and meet no prerequisite, and the known ones still meet theirs.
    #[test]
    fn unknown_fields_keep_their_place() {
        let bytes = [
            "00010021",
            "80000a020800",
            "80007e021234",
            "8000140106",
            "80007c021234",
            "80001c020050",
            "00000000000000",
        ]
        .concat();
        let bytes: Vec<u8> = (0..bytes.len() / 2)
            .map(|i| u8::from_str_radix(&bytes[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let m = Match::decode(&mut Reader::new(&bytes)).unwrap();
        assert_eq!(m.fields.len(), 3);
        assert_eq!(m.unknown, vec![(1, raw(63)), (2, raw(62))]);
        assert_eq!(m.check_prereqs(), Ok(()));
        let mut w = Writer::new();
        m.encode(&mut w);
        assert_eq!(w.as_slice(), bytes.as_slice());
        assert_eq!(m.encoded_len(), bytes.len());

        // An unknown entry stays before the known entry it preceded: ipv4_dst goes
        // before unknown 63 (which precedes ip_proto), and replacing ip_proto moves nothing.
        let mut m2 = m.clone();
        m2.insert(OxmField::exact(Field::Ipv4Dst, 1u32));
        assert_eq!(m2.fields[1].field, Field::Ipv4Dst);
        assert_eq!(m2.unknown, vec![(2, raw(63)), (3, raw(62))]);
        m2.insert(OxmField::exact(Field::IpProto, 17u8));
        assert_eq!(m2.unknown, vec![(2, raw(63)), (3, raw(62))]);
        assert_eq!(m2.fields[2], OxmField::exact(Field::IpProto, 17u8));
        // A field out of its put order moves to its place; the unknown entries follow
        // their known neighbours.
        let mut m3 = Match {
            fields: vec![
                OxmField::exact(Field::IpProto, 6u8),
                OxmField::exact(Field::EthType, 0x0800u16),
            ],
            unknown: vec![(1, raw(63))],
        };
        m3.insert(OxmField::exact(Field::IpProto, 17u8));
        assert_eq!(
            m3.fields.iter().map(|e| e.field).collect::<Vec<_>>(),
            vec![Field::EthType, Field::IpProto]
        );
        assert_eq!(m3.unknown, vec![(0, raw(63))]);

        // An unknown field is no prerequisite: tcp_dst after an unknown entry still needs
        // ip_proto=6 among the known ones.
        let lone = Match {
            fields: vec![OxmField::exact(Field::TcpDst, 80u16)],
            unknown: vec![(0, raw(63))],
        };
        assert_eq!(lone.check_prereqs(), Err("tcp_dst"));
    }

    /// The checked builders refuse a field whose prerequisite is missing or
    /// contradicted, and leave the match as it was.
    #[test]
    fn checked_building() {
        let m = Match::new()
            .try_with(Field::EthType, 0x0800u16)
            .and_then(|m| m.try_with(Field::IpProto, 6u8))
            .and_then(|m| {
                m.try_with(
                    Field::Ipv4Dst,
                    u32::from(std::net::Ipv4Addr::new(10, 96, 0, 10)),
                )
            })
            .and_then(|m| m.try_with(Field::TcpDst, 80u16))
            .unwrap();
        assert_eq!(m, tcp_match());
        assert_eq!(Match::new().try_with(Field::TcpDst, 80u16), Err("tcp_dst"));
        // A prerequisite that contradicts what depends on it: ARP under ipv4_dst.
        let mut ip = Match::new()
            .with(Field::EthType, 0x0800u16)
            .with(Field::Ipv4Dst, 1u32);
        let before = ip.clone();
        assert_eq!(
            ip.try_insert(OxmField::exact(Field::EthType, 0x0806u16)),
            Err("ip_dst")
        );
        assert_eq!(ip, before);
        assert_eq!(
            Match::new()
                .try_with_masked(Field::CtState, 0x20u32, 0x20u32)
                .map(|m| m.fields.len()),
            Ok(1)
        );
        // Unchecked building in any order, checked at the end.
        assert_eq!(tcp_match().checked(), Ok(tcp_match()));
        assert_eq!(
            Match::new().with(Field::TcpDst, 80u16).checked(),
            Err("tcp_dst")
        );
    }

    #[test]
    fn bad_padding_and_length() {
        let mut bad = TCP_MATCH;
        bad[31] = 1;
        assert_eq!(
            Match::decode(&mut Reader::new(&bad)),
            Err(DecodeError::BadPadding("ofp_match"))
        );
        let mut bad = TCP_MATCH;
        bad[7] = 3; // eth_type with 3-byte payload
        assert!(Match::decode(&mut Reader::new(&bad)).is_err());
    }
}
