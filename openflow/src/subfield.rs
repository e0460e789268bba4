//! Bit ranges of fields as used by Nicira actions (`struct mf_subfield`,
//! `lib/meta-flow.c`), printed as `NXM_NX_REG0[0..15]`.

use std::fmt;

use crate::error::DecodeError;
use crate::field::Field;
use crate::oxm::{read_header, write_header};
use crate::wire::{Reader, Writer};

/// A contiguous bit range of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subfield {
    /// The field.
    pub field: Field,
    /// First bit (0 = least significant).
    pub ofs: u16,
    /// Number of bits.
    pub n_bits: u16,
}

impl Subfield {
    /// The whole field.
    pub fn whole(field: Field) -> Self {
        Subfield {
            field,
            ofs: 0,
            n_bits: field.bits(),
        }
    }

    /// Bits `start..=end`.
    pub fn range(field: Field, start: u16, end: u16) -> Self {
        Subfield {
            field,
            ofs: start,
            n_bits: end.saturating_sub(start) + 1,
        }
    }

    /// `nxm_encode_ofs_nbits()`: `ofs << 6 | (n_bits - 1)`.
    pub fn ofs_nbits(&self) -> u16 {
        (self.ofs << 6) | (self.n_bits.saturating_sub(1) & 0x3f)
    }

    /// Checks that the range lies inside the field.
    pub fn check(&self) -> Result<(), DecodeError> {
        if self.n_bits == 0
            || u32::from(self.ofs) + u32::from(self.n_bits) > u32::from(self.field.bits())
        {
            return Err(DecodeError::BadValue("subfield range"));
        }
        Ok(())
    }

    /// Builds from a field and an `ofs_nbits` word.
    pub fn from_ofs_nbits(field: Field, ofs_nbits: u16) -> Result<Self, DecodeError> {
        let sf = Subfield {
            field,
            ofs: ofs_nbits >> 6,
            n_bits: (ofs_nbits & 0x3f) + 1,
        };
        sf.check()?;
        Ok(sf)
    }
}

impl fmt::Display for Subfield {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field.nxm_name())?;
        if self.ofs == 0 && self.n_bits == self.field.bits() {
            f.write_str("[]")
        } else if self.n_bits == 1 {
            write!(f, "[{}]", self.ofs)
        } else {
            write!(f, "[{}..{}]", self.ofs, self.ofs + self.n_bits - 1)
        }
    }
}

/// Writes a field's NXM header as Nicira actions carry it (`nx_put_mff_header`).
pub(crate) fn put_nxm_header(w: &mut Writer, field: Field) {
    let h = field.nxm_header();
    write_header(w, h.class, h.field, h.experimenter, field.len(), false);
}

/// Size of [`put_nxm_header`]'s output.
pub(crate) fn nxm_header_len(field: Field) -> usize {
    if field.nxm_header().experimenter != 0 {
        8
    } else {
        4
    }
}

/// Reads an unmasked NXM header (`nx_pull_header`).
pub(crate) fn pull_nxm_header(r: &mut Reader<'_>) -> Result<Field, DecodeError> {
    let (field, hasmask, len) = read_header(r)?;
    if hasmask || len != field.len() {
        return Err(DecodeError::BadOxmLength {
            field: field.name(),
            len,
        });
    }
    Ok(field)
}
