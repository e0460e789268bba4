//! The Nicira `learn` action (nicira-ext.h `struct nx_action_learn`,
//! `struct nx_action_learn2`; `lib/learn.c`).

use std::fmt::{self, Write as _};

use crate::error::DecodeError;
use crate::subfield::{Subfield, pull_nxm_header, put_nxm_header};
use crate::text;
use crate::wire::{Reader, Writer};

/// `NX_LEARN_F_SEND_FLOW_REM`.
pub const NX_LEARN_F_SEND_FLOW_REM: u16 = 1;
/// `NX_LEARN_F_DELETE_LEARNED`.
pub const NX_LEARN_F_DELETE_LEARNED: u16 = 2;
/// `NX_LEARN_F_WRITE_RESULT`.
pub const NX_LEARN_F_WRITE_RESULT: u16 = 4;

/// Source of a learned value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LearnSrc {
    /// Bits of a field of the packet being processed.
    Field(Subfield),
    /// An immediate value, big-endian, `2 * ceil(n_bits / 16)` bytes on the wire.
    Imm(Vec<u8>),
}

/// What the learned flow does with the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LearnDst {
    /// Match on it (`NX_LEARN_DST_MATCH`).
    Match(Subfield),
    /// Load it (`NX_LEARN_DST_LOAD`).
    Load(Subfield),
    /// Output to the port it names (`NX_LEARN_DST_OUTPUT`).
    Output,
}

/// One `flow_mod_spec`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LearnSpec {
    /// Width in bits.
    pub n_bits: u16,
    /// Source.
    pub src: LearnSrc,
    /// Destination.
    pub dst: LearnDst,
}

/// `learn(...)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Learn {
    /// Idle timeout of the learned flow.
    pub idle_timeout: u16,
    /// Hard timeout.
    pub hard_timeout: u16,
    /// Priority.
    pub priority: u16,
    /// Cookie.
    pub cookie: u64,
    /// `NX_LEARN_F_*`.
    pub flags: u16,
    /// Table of the learned flow.
    pub table_id: u8,
    /// Idle timeout after FIN/RST.
    pub fin_idle_timeout: u16,
    /// Hard timeout after FIN/RST.
    pub fin_hard_timeout: u16,
    /// Maximum number of learned flows (`NXAST_LEARN2`), 0 for none.
    pub limit: u32,
    /// Where to write whether learning succeeded (`NXAST_LEARN2`).
    pub result_dst: Option<Subfield>,
    /// The specs.
    pub specs: Vec<LearnSpec>,
}

impl Default for Learn {
    fn default() -> Self {
        Learn {
            idle_timeout: 0,
            hard_timeout: 0,
            priority: 0x8000,
            cookie: 0,
            flags: 0,
            table_id: 1,
            fin_idle_timeout: 0,
            fin_hard_timeout: 0,
            limit: 0,
            result_dst: None,
            specs: Vec::new(),
        }
    }
}

impl Learn {
    /// Whether this needs `NXAST_LEARN2`.
    pub(crate) fn is_learn2(&self) -> bool {
        self.limit != 0 || self.result_dst.is_some()
    }

    pub(crate) fn encode_body(&self, w: &mut Writer) {
        w.u16(self.idle_timeout);
        w.u16(self.hard_timeout);
        w.u16(self.priority);
        w.u64(self.cookie);
        w.u16(self.flags);
        w.u8(self.table_id);
        w.u8(0);
        w.u16(self.fin_idle_timeout);
        w.u16(self.fin_hard_timeout);
        if self.is_learn2() {
            w.u32(self.limit);
            w.u16(self.result_dst.map_or(0, |d| d.ofs));
            w.zeros(2);
            if let Some(d) = self.result_dst {
                put_nxm_header(w, d.field);
            }
        }
        for spec in &self.specs {
            let src_bit = if matches!(spec.src, LearnSrc::Imm(_)) {
                1 << 13
            } else {
                0
            };
            let dst_bits = match spec.dst {
                LearnDst::Match(_) => 0,
                LearnDst::Load(_) => 1 << 11,
                LearnDst::Output => 2 << 11,
            };
            w.u16(src_bit | dst_bits | (spec.n_bits & 0x3ff));
            match &spec.src {
                LearnSrc::Field(sf) => {
                    put_nxm_header(w, sf.field);
                    w.u16(sf.ofs);
                }
                LearnSrc::Imm(bytes) => {
                    let n = imm_len(spec.n_bits);
                    w.zeros(n.saturating_sub(bytes.len()));
                    let skip = bytes.len().saturating_sub(n);
                    w.bytes(bytes.get(skip..).unwrap_or_default());
                }
            }
            if let LearnDst::Match(sf) | LearnDst::Load(sf) = spec.dst {
                put_nxm_header(w, sf.field);
                w.u16(sf.ofs);
            }
        }
    }

    pub(crate) fn decode_body(r: &mut Reader<'_>, learn2: bool) -> Result<Self, DecodeError> {
        let mut l = Learn {
            idle_timeout: r.u16()?,
            hard_timeout: r.u16()?,
            priority: r.u16()?,
            cookie: r.u64()?,
            flags: r.u16()?,
            table_id: r.u8()?,
            ..Learn::default()
        };
        r.pad(1, "nx_action_learn")?;
        l.fin_idle_timeout = r.u16()?;
        l.fin_hard_timeout = r.u16()?;
        if l.flags & !7 != 0 || l.table_id == 0xff {
            return Err(DecodeError::BadValue("learn"));
        }
        if learn2 {
            l.limit = r.u32()?;
            let ofs = r.u16()?;
            r.pad(2, "nx_action_learn2")?;
            if l.flags & NX_LEARN_F_WRITE_RESULT != 0 {
                let field = pull_nxm_header(r)?;
                let sf = Subfield {
                    field,
                    ofs,
                    n_bits: 1,
                };
                sf.check()?;
                l.result_dst = Some(sf);
            }
        }
        while r.remaining() >= 2 {
            let header = r.u16()?;
            if header == 0 {
                break;
            }
            let n_bits = header & 0x3ff;
            let src = if header & (1 << 13) != 0 {
                LearnSrc::Imm(r.take(imm_len(n_bits))?.to_vec())
            } else {
                let field = pull_nxm_header(r)?;
                let sf = Subfield {
                    field,
                    ofs: r.u16()?,
                    n_bits,
                };
                sf.check()?;
                LearnSrc::Field(sf)
            };
            let mut dst_sf = || -> Result<Subfield, DecodeError> {
                let field = pull_nxm_header(r)?;
                let sf = Subfield {
                    field,
                    ofs: r.u16()?,
                    n_bits,
                };
                sf.check()?;
                Ok(sf)
            };
            let dst = match (header >> 11) & 3 {
                0 => LearnDst::Match(dst_sf()?),
                1 => LearnDst::Load(dst_sf()?),
                2 => LearnDst::Output,
                _ => return Err(DecodeError::BadValue("learn spec")),
            };
            l.specs.push(LearnSpec { n_bits, src, dst });
        }
        // Whatever follows the specs is padding.
        let rest = r.rest();
        if rest.iter().any(|&b| b != 0) {
            return Err(DecodeError::BadPadding("nx_action_learn"));
        }
        Ok(l)
    }
}

/// Wire size of an immediate of `n_bits`: whole 16-bit words.
fn imm_len(n_bits: u16) -> usize {
    2 * usize::from(n_bits).div_ceil(16)
}

/// The low `ceil(n_bits/8)` bytes of an immediate, as OVS stores it.
fn imm_bytes(bytes: &[u8], n_bits: u16) -> &[u8] {
    let n = usize::from(n_bits).div_ceil(8);
    bytes
        .get(bytes.len().saturating_sub(n)..)
        .unwrap_or_default()
}

impl fmt::Display for Learn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = format!("learn(table={}", self.table_id);
        if self.idle_timeout != 0 {
            let _ = write!(s, ",idle_timeout={}", self.idle_timeout);
        }
        if self.hard_timeout != 0 {
            let _ = write!(s, ",hard_timeout={}", self.hard_timeout);
        }
        if self.fin_idle_timeout != 0 {
            let _ = write!(s, ",fin_idle_timeout={}", self.fin_idle_timeout);
        }
        if self.fin_hard_timeout != 0 {
            let _ = write!(s, ",fin_hard_timeout={}", self.fin_hard_timeout);
        }
        if self.priority != 0x8000 {
            let _ = write!(s, ",priority={}", self.priority);
        }
        if self.flags & NX_LEARN_F_SEND_FLOW_REM != 0 {
            s.push_str(",send_flow_rem");
        }
        if self.flags & NX_LEARN_F_DELETE_LEARNED != 0 {
            s.push_str(",delete_learned");
        }
        if self.cookie != 0 {
            let _ = write!(s, ",cookie={:#x}", self.cookie);
        }
        if self.limit != 0 {
            let _ = write!(s, ",limit={}", self.limit);
        }
        if let Some(d) = self
            .result_dst
            .filter(|_| self.flags & NX_LEARN_F_WRITE_RESULT != 0)
        {
            let _ = write!(s, ",result_dst={d}");
        }
        for spec in &self.specs {
            s.push(',');
            match (&spec.src, spec.dst) {
                (LearnSrc::Imm(b), LearnDst::Match(dst)) => {
                    let imm = imm_bytes(b, spec.n_bits);
                    if dst.ofs == 0 && dst.n_bits == dst.field.bits() {
                        let v = imm.iter().fold(0u128, |a, &x| (a << 8) | u128::from(x));
                        let _ = write!(
                            s,
                            "{}={}",
                            dst.field.name(),
                            crate::action::format_value(dst.field, v, None)
                        );
                    } else {
                        let _ = write!(s, "{dst}={}", text::put_hex_bytes(imm));
                    }
                }
                (LearnSrc::Field(src), LearnDst::Match(dst)) => {
                    let _ = write!(s, "{dst}");
                    if src.field != dst.field || src.ofs != dst.ofs {
                        let _ = write!(s, "={src}");
                    }
                }
                (LearnSrc::Imm(b), LearnDst::Load(dst)) => {
                    let _ = write!(
                        s,
                        "load:{}->{dst}",
                        text::put_hex_bytes(imm_bytes(b, spec.n_bits))
                    );
                }
                (LearnSrc::Field(src), LearnDst::Load(dst)) => {
                    let _ = write!(s, "load:{src}->{dst}");
                }
                (LearnSrc::Field(src), LearnDst::Output) => {
                    let _ = write!(s, "output:{src}");
                }
                (LearnSrc::Imm(_), LearnDst::Output) => {}
            }
        }
        s.push(')');
        f.write_str(&s)
    }
}
