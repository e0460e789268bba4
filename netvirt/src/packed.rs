//! Compact forms of what the desired state keeps per flow: its match and its instructions.
//!
//! A big cluster's state is mostly flows (330,000 at 30,000 services × 10 endpoints, on every
//! node), and as Rust values each flow took about 600 bytes: a match is a vector of 64-byte
//! [`OxmField`]s and an action is 96 bytes. Packed, a match is the bytes of its fields (about
//! 20 for an endpoint's DNAT flow, kept inline) and the instructions are their OpenFlow
//! encoding (about 60 bytes for a DNAT). Both unpack to the values they were made from.
//! A flow_mod carries the instructions' encoding as it is kept
//! ([`PackedInstructions::to_wire`], [`openflow::Instructions::Encoded`]): sending a flow to a
//! switch copies those bytes instead of decoding them into a list and encoding it again.
//!
//! [`PackedMatch`]'s bytes are laid out so that comparing them as byte strings orders matches
//! exactly as comparing their fields `(field, value, mask)` in turn does, so a map of flow
//! keys keeps the order `ovs-ofctl`-style dumps and the plans have always had.
//!
//! Pure: no I/O.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use openflow::instruction::{Instruction, decode_instructions, encode_instructions};
use openflow::oxm::{OxmField, RawOxm};
use openflow::wire::{Reader, Writer};
use openflow::{Field, Match};
use smallvec::SmallVec;

/// Bytes kept up to this many inline, so that a typical match needs no allocation of its own.
const INLINE: usize = 30;

/// A byte string, inline when short. Compared, ordered and hashed as its bytes; a string
/// that fits inline is always inline, so equal strings have equal forms.
#[derive(Clone)]
enum Bytes {
    Inline { len: u8, data: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Bytes {
    fn new(b: &[u8]) -> Self {
        match u8::try_from(b.len()) {
            Ok(len) if b.len() <= INLINE => {
                let mut data = [0; INLINE];
                data[..b.len()].copy_from_slice(b);
                Bytes::Inline { len, data }
            }
            _ => Bytes::Heap(b.into()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, data } => &data[..usize::from(*len)],
            Bytes::Heap(b) => b,
        }
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl Eq for Bytes {}
impl Ord for Bytes {
    fn cmp(&self, other: &Self) -> Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}
impl PartialOrd for Bytes {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Hash for Bytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

/// Marks an entry of a field this codec does not know; [`Field`]s are numbered below it.
const UNKNOWN: u8 = 0xff;

/// A [`Match`], packed.
///
/// Each known entry is its field's number, its value in the field's width (big-endian), then
/// 0, or 1 and the mask in the same width. Entries of unknown fields follow, each as
/// [`UNKNOWN`], its place among the known entries, its header and its bytes. Values are kept in
/// their field's width, as the wire keeps them: a value with bits beyond it (which no
/// encoder sends) loses them here too.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PackedMatch(Bytes);

impl PackedMatch {
    /// Packs `m`.
    pub fn new(m: &Match) -> Self {
        // Built on the stack: a match that fits inline allocates nothing here.
        let mut out: SmallVec<[u8; INLINE]> = SmallVec::new();
        for f in &m.fields {
            let n = f.field.len();
            out.push(f.field as u8);
            push_uint(&mut out, f.value, n);
            match f.mask {
                None => out.push(0),
                Some(mask) => {
                    out.push(1);
                    push_uint(&mut out, mask, n);
                }
            }
        }
        for (place, raw) in &m.unknown {
            out.push(UNKNOWN);
            out.extend_from_slice(&u16::try_from(*place).unwrap_or(u16::MAX).to_be_bytes());
            out.extend_from_slice(&raw.class.to_be_bytes());
            out.push(raw.field);
            out.extend_from_slice(&raw.experimenter.to_be_bytes());
            // An OXM entry's length is one byte, so its value is shorter than 256.
            let value = &raw.value[..raw.value.len().min(255)];
            out.push(value.len() as u8);
            out.extend_from_slice(value);
            match &raw.mask {
                None => out.push(0),
                Some(mask) => {
                    out.push(1);
                    // As long as the value (RawOxm's rule).
                    let mask = &mask[..mask.len().min(value.len())];
                    out.extend_from_slice(mask);
                    out.extend(std::iter::repeat_n(0, value.len() - mask.len()));
                }
            }
        }
        PackedMatch(Bytes::new(&out))
    }

    /// The entries of known fields, in order.
    pub fn fields(&self) -> impl Iterator<Item = OxmField> + '_ {
        let mut c = Cursor(self.0.as_slice());
        std::iter::from_fn(move || c.field())
    }

    /// The entry for `field`, if present.
    pub fn get(&self, field: Field) -> Option<OxmField> {
        self.fields().find(|f| f.field == field)
    }

    /// The match it was made from.
    pub fn to_match(&self) -> Match {
        let mut c = Cursor(self.0.as_slice());
        let mut fields = Vec::new();
        while let Some(f) = c.field() {
            fields.push(f);
        }
        let mut unknown = Vec::new();
        while let Some(u) = c.unknown() {
            unknown.push(u);
        }
        Match { fields, unknown }
    }
}

impl fmt::Debug for PackedMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.fields()).finish()
    }
}

fn push_uint(out: &mut SmallVec<[u8; INLINE]>, v: u128, n: usize) {
    out.extend_from_slice(&v.to_be_bytes()[16 - n.min(16)..]);
}

/// Reads what [`PackedMatch::new`] wrote. It only ever reads its own bytes; anything
/// malformed ends the entries rather than panicking.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn uint(&mut self, n: usize) -> Option<u128> {
        Some(
            self.take(n)?
                .iter()
                .fold(0u128, |v, b| (v << 8) | u128::from(*b)),
        )
    }

    fn field(&mut self) -> Option<OxmField> {
        let id = *self.0.first()?;
        let field = *Field::ALL.get(usize::from(id))?;
        self.take(1)?;
        let n = field.len();
        let value = self.uint(n)?;
        let mask = match self.take(1)? {
            [0] => None,
            _ => Some(self.uint(n)?),
        };
        Some(OxmField { field, value, mask })
    }

    fn unknown(&mut self) -> Option<(usize, RawOxm)> {
        if self.take(1)? != [UNKNOWN] {
            return None;
        }
        let place = usize::try_from(self.uint(2)?).ok()?;
        let class = u16::try_from(self.uint(2)?).ok()?;
        let field = *self.take(1)?.first()?;
        let experimenter = u32::try_from(self.uint(4)?).ok()?;
        let len = usize::from(*self.take(1)?.first()?);
        let value = self.take(len)?.to_vec();
        let mask = match self.take(1)? {
            [0] => None,
            _ => Some(self.take(len)?.to_vec()),
        };
        Some((
            place,
            RawOxm {
                class,
                field,
                experimenter,
                value,
                mask,
            },
        ))
    }
}

/// A flow's instructions, packed: their OpenFlow 1.3 encoding.
///
/// Made from a list only when that encoding decodes back to the same list (always, for what
/// this codec encodes; checked as it is made); otherwise the list is kept as it is. The same
/// list always takes the same form, so equal lists compare equal.
#[derive(Clone, PartialEq, Eq)]
pub struct PackedInstructions(Form);

#[derive(Clone, PartialEq, Eq)]
enum Form {
    Wire(Box<[u8]>),
    List(Box<[Instruction]>),
}

impl PackedInstructions {
    /// Packs `list`.
    pub fn new(list: Vec<Instruction>) -> Self {
        // Room for a typical flow's instructions (a DNAT's are about 60 bytes), then kept at
        // their length: growing the writer from empty and shrinking it to a box took four
        // reallocations a flow.
        let mut w = Writer::from_vec(Vec::with_capacity(128));
        encode_instructions(&list, &mut w);
        let bytes = w.as_slice();
        let back = decode_instructions(&mut Reader::new(bytes));
        PackedInstructions(match back {
            Ok(back) if back == list => Form::Wire(bytes.into()),
            _ => Form::List(list.into_boxed_slice()),
        })
    }

    /// The instructions.
    pub fn get(&self) -> Cow<'_, [Instruction]> {
        match &self.0 {
            // These bytes decoded to the list they were made from (checked in `new`).
            Form::Wire(bytes) => {
                Cow::Owned(decode_instructions(&mut Reader::new(bytes)).unwrap_or_default())
            }
            Form::List(list) => Cow::Borrowed(list),
        }
    }

    /// The instructions for a flow_mod: their encoding as it is kept (it was checked to
    /// decode to the list it was made from), so sending a flow costs a copy of its bytes
    /// rather than a decode and an encode.
    pub fn to_wire(&self) -> openflow::Instructions {
        match &self.0 {
            Form::Wire(bytes) => openflow::Instructions::Encoded(bytes.clone()),
            Form::List(list) => openflow::Instructions::List(list.to_vec()),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Form::Wire(bytes) => bytes.is_empty(),
            Form::List(list) => list.is_empty(),
        }
    }
}

impl fmt::Debug for PackedInstructions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.get().iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openflow::Action;

    fn m(fields: &[OxmField]) -> Match {
        Match {
            fields: fields.to_vec(),
            unknown: Vec::new(),
        }
    }

    #[test]
    fn a_match_unpacks_to_itself() {
        let raw = RawOxm {
            class: 0xffff,
            field: 9,
            experimenter: 0x00d0_f0fe,
            value: vec![1, 2, 3],
            mask: Some(vec![0xff, 0, 0xff]),
        };
        let cases = [
            Match::new(),
            m(&[
                OxmField::exact(Field::EthType, 0x0800u16),
                OxmField::exact(Field::IpProto, 6u8),
                OxmField::exact(Field::Reg3, 0x0af4_000bu32),
                OxmField::exact(Field::Reg4, 0u32),
            ]),
            m(&[
                OxmField::exact(Field::EthType, 0x86ddu16),
                OxmField::masked(
                    Field::Ipv6Dst,
                    0xfd00_0000_0000_0000_0000_0000_0000_0000u128,
                    u128::MAX << 64,
                ),
            ]),
            Match {
                fields: vec![OxmField::exact(Field::InPort, 7u32)],
                unknown: vec![(0, raw.clone()), (1, RawOxm { mask: None, ..raw })],
            },
        ];
        for c in cases {
            let packed = PackedMatch::new(&c);
            assert_eq!(packed.to_match(), c);
            assert_eq!(packed.fields().collect::<Vec<_>>(), c.fields);
            for f in &c.fields {
                assert_eq!(packed.get(f.field), Some(*f));
            }
        }
    }

    /// Byte order is field order: the packed form sorts as the fields do.
    #[test]
    fn packed_matches_sort_as_their_fields() {
        let key = |f: &OxmField| (f.field, f.value, f.mask);
        let pool = [
            OxmField::exact(Field::EthType, 0x0800u16),
            OxmField::exact(Field::EthType, 0x86ddu16),
            OxmField::exact(Field::IpProto, 6u8),
            OxmField::exact(Field::IpProto, 17u8),
            OxmField::exact(Field::Ipv4Dst, 0x0a60_0001u32),
            OxmField::masked(Field::Ipv4Dst, 0x0a60_0000u32, 0xffff_0000u32),
            OxmField::masked(Field::Ipv4Dst, 0x0a60_0000u32, 0xff00_0000u32),
            OxmField::exact(Field::Reg3, 1u32),
            OxmField::exact(Field::Reg3, 0x100u32),
            OxmField::exact(Field::TcpDst, 80u16),
        ];
        // Every list of up to three entries from the pool, in pool order.
        let mut lists: Vec<Vec<OxmField>> = vec![Vec::new()];
        for _ in 0..3 {
            let mut more = Vec::new();
            for l in &lists {
                for f in &pool {
                    let mut l = l.clone();
                    l.push(*f);
                    more.push(l);
                }
            }
            lists.extend(more);
        }
        lists.sort_by(|a, b| a.iter().map(key).cmp(b.iter().map(key)));
        lists.dedup();
        let packed: Vec<PackedMatch> = lists.iter().map(|l| PackedMatch::new(&m(l))).collect();
        for (i, a) in packed.iter().enumerate() {
            for (j, b) in packed.iter().enumerate() {
                assert_eq!(a.cmp(b), i.cmp(&j), "{:?} against {:?}", lists[i], lists[j]);
            }
        }
    }

    #[test]
    fn a_short_match_is_inline() {
        let p = PackedMatch::new(&m(&[
            OxmField::exact(Field::EthType, 0x0800u16),
            OxmField::exact(Field::IpProto, 6u8),
            OxmField::exact(Field::Reg3, 0x0af4_000bu32),
            OxmField::exact(Field::Reg4, 0u32),
        ]));
        assert!(matches!(p.0, Bytes::Inline { .. }));
        assert!(std::mem::size_of::<PackedMatch>() <= 32);
    }

    #[test]
    fn instructions_unpack_to_themselves() {
        let list = vec![
            Instruction::ApplyActions(vec![
                Action::Group(7),
                Action::Output {
                    port: 3,
                    max_len: 0,
                },
            ]),
            Instruction::GotoTable(20),
        ];
        let p = PackedInstructions::new(list.clone());
        assert!(matches!(p.0, Form::Wire(_)));
        assert_eq!(p.get().as_ref(), list.as_slice());
        let empty = PackedInstructions::new(Vec::new());
        assert!(empty.is_empty());
        assert_eq!(empty, PackedInstructions::new(Vec::new()));
    }

    /// Every flow svcflow renders (every golden scenario's) keeps its instructions as wire
    /// bytes: the fallback to a list is for what this codec cannot round trip, never for
    /// svcflow's own flows, whose bytes a big cluster holds hundreds of thousands of.
    #[test]
    fn every_rendered_flow_packs_to_wire_bytes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
        let mut flows = 0;
        for dir in std::fs::read_dir(&root).unwrap() {
            let dir = dir.unwrap().path();
            let Ok(text) = std::fs::read_to_string(dir.join("input.toml")) else {
                continue;
            };
            let s = crate::scenario::Scenario::parse(&text).unwrap();
            let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
            for (key, entry) in &out.state.flows {
                assert!(
                    matches!(entry.instructions.0, Form::Wire(_)),
                    "{}: {}",
                    dir.display(),
                    crate::flow::DumpFlow(key, entry)
                );
                flows += 1;
            }
        }
        assert!(flows > 500, "{flows} flows in the scenarios");
    }
}
