//! The register layout (`netvirt::pipeline::reg::LAYOUT`) is the pipeline's: no two named
//! fields share a bit, and every register bit a flow or group of any golden scenario matches,
//! loads, moves, learns or outputs from lies in one named field. A new use of a register that
//! the layout does not name, or a field laid over another, fails here.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;

use netvirt::desired::desired;
use netvirt::pipeline::reg::{LAYOUT, RegField};
use netvirt::scenario::Scenario;
use openflow::Field;
use openflow::action::Action;
use openflow::instruction::Instruction;
use openflow::learn::{LearnDst, LearnSrc};
use openflow::subfield::Subfield;

/// A use of register bits: the 32-bit register (`reg0`..`reg7`), and the bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Bits {
    reg: u8,
    lo: u8,
    hi: u8,
}

/// The 32-bit register a field is, if it is one.
fn reg_index(field: Field) -> Option<u8> {
    let all = [
        Field::Reg0,
        Field::Reg1,
        Field::Reg2,
        Field::Reg3,
        Field::Reg4,
        Field::Reg5,
        Field::Reg6,
        Field::Reg7,
        Field::Reg8,
        Field::Reg9,
        Field::Reg10,
        Field::Reg11,
        Field::Reg12,
        Field::Reg13,
        Field::Reg14,
        Field::Reg15,
    ];
    all.iter().position(|f| *f == field).map(|i| i as u8)
}

/// The register bits `lo..=hi` of `field` touch, split per 32-bit register: `xxregN` is
/// `reg(4N)` (most significant) to `reg(4N+3)`, `xregN` is `reg(2N)` and `reg(2N+1)`.
fn bits_of(field: Field, lo: u16, hi: u16) -> Vec<Bits> {
    if let Some(reg) = reg_index(field) {
        return vec![Bits {
            reg,
            lo: lo as u8,
            hi: hi as u8,
        }];
    }
    let wide = [
        (Field::Xreg0, 0u8, 2u8),
        (Field::Xreg1, 2, 2),
        (Field::Xreg2, 4, 2),
        (Field::Xreg3, 6, 2),
        (Field::Xxreg0, 0, 4),
        (Field::Xxreg1, 4, 4),
    ];
    let Some(&(_, first, regs)) = wide.iter().find(|(f, _, _)| *f == field) else {
        return Vec::new();
    };
    (lo..=hi)
        .map(|bit| Bits {
            reg: first + regs - 1 - (bit / 32) as u8,
            lo: (bit % 32) as u8,
            hi: (bit % 32) as u8,
        })
        .collect()
}

fn subfield_bits(s: &Subfield) -> Vec<Bits> {
    bits_of(s.field, s.ofs, s.ofs + s.n_bits.saturating_sub(1))
}

/// The bits a (possibly masked) match or set-field on `field` touches.
fn masked_bits(field: Field, mask: Option<u128>) -> Vec<Bits> {
    let width = field.len() as u32 * 8;
    match mask {
        None => bits_of(field, 0, (width - 1) as u16),
        Some(0) => Vec::new(),
        Some(m) => {
            let lo = m.trailing_zeros() as u16;
            let hi = (127 - m.leading_zeros()) as u16;
            bits_of(field, lo, hi)
        }
    }
}

fn action_bits(action: &Action, out: &mut Vec<Bits>) {
    match action {
        Action::SetField(oxm) => out.extend(masked_bits(oxm.field, oxm.mask)),
        Action::RegLoad { dst, .. } => out.extend(subfield_bits(dst)),
        Action::RegMove { src, dst } => {
            out.extend(subfield_bits(src));
            out.extend(subfield_bits(dst));
        }
        Action::OutputReg { src, .. } => out.extend(subfield_bits(src)),
        Action::Multipath(m) => out.extend(subfield_bits(&m.dst)),
        Action::Learn(learn) => {
            for spec in &learn.specs {
                if let LearnSrc::Field(s) = &spec.src {
                    out.extend(subfield_bits(s));
                }
                if let LearnDst::Match(s) | LearnDst::Load(s) = &spec.dst {
                    out.extend(subfield_bits(s));
                }
            }
        }
        Action::Ct(ct) => {
            for a in &ct.exec {
                action_bits(a, out);
            }
        }
        _ => {}
    }
}

/// Every use of register bits in the golden scenarios' desired states.
fn scenario_uses() -> Vec<(String, Bits)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut uses = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path().join("input.toml");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let s = Scenario::parse(&text).unwrap();
        let out = desired(&s.node, &s.model, &s.config, &s.bindings);
        let name = path.display().to_string();
        for (key, entry) in &out.state.flows {
            let mut bits = Vec::new();
            for m in &key.matches().fields {
                bits.extend(masked_bits(m.field, m.mask));
            }
            for i in entry.instructions().iter() {
                if let Instruction::ApplyActions(actions) | Instruction::WriteActions(actions) = i {
                    for a in actions {
                        action_bits(a, &mut bits);
                    }
                }
            }
            uses.extend(bits.into_iter().map(|b| (format!("{name}: {key:?}"), b)));
        }
        for (id, group) in &out.state.groups {
            let mut bits = Vec::new();
            for bucket in &group.buckets {
                for a in bucket.actions().iter() {
                    action_bits(a, &mut bits);
                }
            }
            uses.extend(bits.into_iter().map(|b| (format!("{name}: group {id}"), b)));
        }
    }
    uses
}

fn field_bits(f: &RegField) -> Bits {
    Bits {
        reg: reg_index(f.reg).unwrap_or_else(|| panic!("{} is not in a 32-bit register", f.name)),
        lo: f.lo,
        hi: f.hi,
    }
}

#[test]
fn no_two_register_fields_share_a_bit() {
    for (i, a) in LAYOUT.iter().enumerate() {
        let x = field_bits(a);
        assert!(
            x.lo <= x.hi && x.hi < 32,
            "{} has bits {}..={}",
            a.name,
            x.lo,
            x.hi
        );
        for b in &LAYOUT[i + 1..] {
            let y = field_bits(b);
            assert!(
                x.reg != y.reg || x.hi < y.lo || y.hi < x.lo,
                "{} and {} overlap in reg{}",
                a.name,
                b.name,
                x.reg
            );
        }
    }
    // The check itself catches an overlap.
    let (a, b) = (
        field_bits(&LAYOUT[0]),
        Bits {
            lo: 31,
            ..field_bits(&LAYOUT[0])
        },
    );
    assert!(!(a.reg != b.reg || a.hi < b.lo || b.hi < a.lo));
}

#[test]
fn every_register_bit_the_scenarios_use_is_a_named_field() {
    let uses = scenario_uses();
    let fields: Vec<(Bits, &str)> = LAYOUT.iter().map(|f| (field_bits(f), f.name)).collect();
    let mut seen = std::collections::BTreeSet::new();
    for (what, used) in &uses {
        let named = fields
            .iter()
            .find(|(f, _)| f.reg == used.reg && f.lo <= used.lo && used.hi <= f.hi);
        match named {
            Some((_, name)) => {
                seen.insert(*name);
            }
            None => panic!(
                "reg{} bits {}..={} are used but no field of the layout names them: {what}",
                used.reg, used.lo, used.hi
            ),
        }
    }
    // Not vacuous: the scenarios use every field of the layout.
    let all: std::collections::BTreeSet<&str> = LAYOUT.iter().map(|f| f.name).collect();
    assert_eq!(seen, all, "fields no scenario uses");
    // And with one field fewer in the layout, the walk finds uses nothing names.
    for dropped in 0..fields.len() {
        let fewer: Vec<&(Bits, &str)> = fields
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != dropped)
            .map(|(_, f)| f)
            .collect();
        let unnamed = uses.iter().any(|(_, u)| {
            !fewer
                .iter()
                .any(|(f, _)| f.reg == u.reg && f.lo <= u.lo && u.hi <= f.hi)
        });
        assert!(
            unnamed,
            "without {}, every use is still named",
            fields[dropped].1
        );
    }
}
