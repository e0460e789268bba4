//! Instructions (OF1.3 §7.2.4 `struct ofp_instruction`).

use std::fmt;

use crate::action::{Action, encode_actions, format_actions};
use crate::error::DecodeError;
use crate::text;
use crate::wire::{Reader, Writer, tlv_len};

mod ofpit {
    pub const GOTO_TABLE: u16 = 1;
    pub const WRITE_METADATA: u16 = 2;
    pub const WRITE_ACTIONS: u16 = 3;
    pub const APPLY_ACTIONS: u16 = 4;
    pub const CLEAR_ACTIONS: u16 = 5;
    pub const METER: u16 = 6;
}

/// One instruction.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `OFPIT_GOTO_TABLE`.
    GotoTable(u8),
    /// `OFPIT_WRITE_METADATA`.
    WriteMetadata {
        /// Value.
        metadata: u64,
        /// Mask.
        mask: u64,
    },
    /// `OFPIT_WRITE_ACTIONS`.
    WriteActions(Vec<Action>),
    /// `OFPIT_APPLY_ACTIONS`.
    ApplyActions(Vec<Action>),
    /// `OFPIT_CLEAR_ACTIONS`.
    ClearActions,
    /// `OFPIT_METER`.
    Meter(u32),
    /// Any other instruction type, kept raw (bytes after the header).
    Unknown {
        /// Instruction type.
        instruction_type: u16,
        /// Body.
        body: Vec<u8>,
    },
}

impl Instruction {
    /// Writes the instruction.
    pub fn encode(&self, w: &mut Writer) {
        let start = w.len();
        let ty = match self {
            Instruction::GotoTable(_) => ofpit::GOTO_TABLE,
            Instruction::WriteMetadata { .. } => ofpit::WRITE_METADATA,
            Instruction::WriteActions(_) => ofpit::WRITE_ACTIONS,
            Instruction::ApplyActions(_) => ofpit::APPLY_ACTIONS,
            Instruction::ClearActions => ofpit::CLEAR_ACTIONS,
            Instruction::Meter(_) => ofpit::METER,
            Instruction::Unknown {
                instruction_type, ..
            } => *instruction_type,
        };
        w.u16(ty);
        let len = w.place_u16();
        match self {
            Instruction::GotoTable(t) => {
                w.u8(*t);
                w.zeros(3);
            }
            Instruction::WriteMetadata { metadata, mask } => {
                w.zeros(4);
                w.u64(*metadata);
                w.u64(*mask);
            }
            Instruction::WriteActions(a) | Instruction::ApplyActions(a) => {
                w.zeros(4);
                encode_actions(a, w);
            }
            Instruction::ClearActions => w.zeros(4),
            Instruction::Meter(m) => w.u32(*m),
            Instruction::Unknown { body, .. } => w.bytes(body),
        }
        w.fill_len(len, start);
    }

    /// Reads one instruction.
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let ty = r.u16()?;
        let len = usize::from(r.u16()?);
        if len < 8 || len % 8 != 0 {
            return Err(DecodeError::BadLength {
                what: "instruction",
                len,
            });
        }
        let mut b = r.sub(len - 4)?;
        let i = match ty {
            ofpit::GOTO_TABLE => {
                let t = b.u8()?;
                b.pad(3, "ofp_instruction_goto_table")?;
                Instruction::GotoTable(t)
            }
            ofpit::WRITE_METADATA => {
                b.pad(4, "ofp_instruction_write_metadata")?;
                Instruction::WriteMetadata {
                    metadata: b.u64()?,
                    mask: b.u64()?,
                }
            }
            ofpit::WRITE_ACTIONS | ofpit::APPLY_ACTIONS => {
                b.pad(4, "ofp_instruction_actions")?;
                let a = Action::decode_list(&mut b)?;
                if ty == ofpit::WRITE_ACTIONS {
                    Instruction::WriteActions(a)
                } else {
                    Instruction::ApplyActions(a)
                }
            }
            ofpit::CLEAR_ACTIONS => {
                b.pad(4, "ofp_instruction_actions")?;
                Instruction::ClearActions
            }
            ofpit::METER => Instruction::Meter(b.u32()?),
            _ => Instruction::Unknown {
                instruction_type: ty,
                body: b.rest().to_vec(),
            },
        };
        b.finish()?;
        Ok(i)
    }
}

/// Writes instructions.
pub fn encode_instructions(list: &[Instruction], w: &mut Writer) {
    for i in list {
        i.encode(w);
    }
}

/// Reads instructions until the reader is empty.
pub fn decode_instructions(r: &mut Reader<'_>) -> Result<Vec<Instruction>, DecodeError> {
    let mut out = Vec::with_capacity(r.count_records(8, tlv_len));
    while !r.is_empty() {
        out.push(Instruction::decode(r)?);
    }
    Ok(out)
}

/// Instructions as `ovs-ofctl` prints them after `actions=`: OVS order
/// (meter, apply, clear, write, write_metadata, goto_table), `drop` when empty.
pub fn format_instructions(list: &[Instruction]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let rank = |i: &Instruction| match i {
        Instruction::Meter(_) => 0,
        Instruction::ApplyActions(_) => 1,
        Instruction::ClearActions => 2,
        Instruction::WriteActions(_) => 3,
        Instruction::WriteMetadata { .. } => 4,
        Instruction::GotoTable(_) => 5,
        Instruction::Unknown { .. } => 6,
    };
    let mut sorted: Vec<&Instruction> = list.iter().collect();
    sorted.sort_by_key(|i| rank(i));
    for i in sorted {
        match i {
            Instruction::Meter(m) => parts.push(format!("meter:{m}")),
            Instruction::ApplyActions(a) => {
                if !a.is_empty() {
                    parts.push(format_actions(a));
                }
            }
            Instruction::ClearActions => parts.push("clear_actions".into()),
            Instruction::WriteActions(a) => {
                parts.push(format!("write_actions({})", format_actions(a)))
            }
            Instruction::WriteMetadata { metadata, mask } => {
                if *mask == u64::MAX {
                    parts.push(format!("write_metadata:{}", text::hash_x(*metadata)));
                } else {
                    parts.push(format!(
                        "write_metadata:{}/{}",
                        text::hash_x(*metadata),
                        text::hash_x(*mask)
                    ));
                }
            }
            Instruction::GotoTable(t) => parts.push(format!("goto_table:{t}")),
            Instruction::Unknown {
                instruction_type, ..
            } => parts.push(format!("unknown_instruction({instruction_type})")),
        }
    }
    if parts.is_empty() {
        "drop".into()
    } else {
        parts.join(",")
    }
}

/// Wrapper printing a list of instructions.
pub struct Instructions<'a>(pub &'a [Instruction]);

impl fmt::Display for Instructions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_instructions(self.0))
    }
}
