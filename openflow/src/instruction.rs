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

/// A flow_mod's instructions: a list, or their encoding as [`encode_instructions`] writes it.
///
/// The encoded form is for a controller that keeps its flows' instructions encoded (svcflow's
/// desired state does, to save memory): it is written as it is, rather than decoded into a
/// list only to be encoded again for every message. A decoded message always holds a
/// [`Instructions::List`]. The two forms of the same instructions encode to the same bytes but
/// do not compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Instructions {
    /// The instructions.
    List(Vec<Instruction>),
    /// Their encoding, whole instructions one after the other, written as given: whoever
    /// makes it vouches that it is what [`encode_instructions`] writes for some list.
    Encoded(Box<[u8]>),
}

impl Default for Instructions {
    fn default() -> Self {
        Instructions::List(Vec::new())
    }
}

impl From<Vec<Instruction>> for Instructions {
    fn from(list: Vec<Instruction>) -> Self {
        Instructions::List(list)
    }
}

impl Instructions {
    /// Writes them.
    pub fn encode(&self, w: &mut Writer) {
        match self {
            Instructions::List(list) => encode_instructions(list, w),
            Instructions::Encoded(bytes) => w.bytes(bytes),
        }
    }

    /// The list (an encoded form is decoded).
    pub fn list(&self) -> Result<std::borrow::Cow<'_, [Instruction]>, DecodeError> {
        match self {
            Instructions::List(list) => Ok(std::borrow::Cow::Borrowed(list)),
            Instructions::Encoded(bytes) => {
                decode_instructions(&mut Reader::new(bytes)).map(std::borrow::Cow::Owned)
            }
        }
    }

    /// As `ovs-ofctl` prints them after `actions=` ([`format_instructions`]); an encoding
    /// that does not decode prints as `bad_instructions`.
    pub fn format(&self) -> String {
        match self.list() {
            Ok(list) => format_instructions(&list),
            Err(_) => "bad_instructions".into(),
        }
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
pub struct DisplayInstructions<'a>(pub &'a [Instruction]);

impl fmt::Display for DisplayInstructions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_instructions(self.0))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::msg::{Body, FlowMod, Message};

    fn list() -> Vec<Instruction> {
        vec![
            Instruction::Meter(1),
            Instruction::ApplyActions(vec![Action::Group(7), Action::output(3)]),
            Instruction::GotoTable(40),
        ]
    }

    #[test]
    fn an_encoded_list_is_written_as_the_list_is_and_decodes_to_it() {
        let mut w = Writer::new();
        encode_instructions(&list(), &mut w);
        let encoded = Instructions::Encoded(w.into_vec().into_boxed_slice());
        let as_list = Instructions::from(list());
        assert_eq!(encoded.list().unwrap(), &list()[..]);
        assert_eq!(encoded.format(), as_list.format());
        assert_eq!(encoded.format(), "meter:1,group:7,output:3,goto_table:40");
        let message = |instructions| {
            Message::new(
                3,
                Body::FlowMod(FlowMod {
                    instructions,
                    ..FlowMod::default()
                }),
            )
            .encode()
            .unwrap()
        };
        let bytes = message(encoded);
        assert_eq!(bytes, message(as_list.clone()));
        // A decoded flow_mod holds the list.
        let Body::FlowMod(back) = Message::decode(&bytes).unwrap().body else {
            panic!("not a flow_mod");
        };
        assert_eq!(back.instructions, as_list);
    }

    #[test]
    fn an_encoding_that_does_not_decode_prints_as_bad() {
        let bad = Instructions::Encoded(vec![0, 1, 0, 3].into_boxed_slice());
        assert!(bad.list().is_err());
        assert_eq!(bad.format(), "bad_instructions");
    }
}
