//! Typed decode and encode errors.

use thiserror::Error;

/// Why a byte sequence is not a valid OpenFlow message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Fewer bytes than the layout requires.
    #[error("truncated: needed {needed} bytes, {available} available")]
    Truncated {
        /// Bytes the next field needs.
        needed: usize,
        /// Bytes left.
        available: usize,
    },
    /// Bytes left over after a complete structure.
    #[error("{0} trailing bytes")]
    TrailingData(usize),
    /// A length field inconsistent with its structure.
    #[error("bad length {len} in {what}")]
    BadLength {
        /// The structure.
        what: &'static str,
        /// The length found.
        len: usize,
    },
    /// Padding bytes that are not zero.
    #[error("nonzero padding in {0}")]
    BadPadding(&'static str),
    /// A message header with a version other than OpenFlow 1.3.
    #[error("unsupported OpenFlow version {0:#04x}")]
    BadVersion(u8),
    /// An OXM field we do not know.
    #[error(
        "unknown OXM field (class {class:#06x}, field {field}, experimenter {experimenter:#x})"
    )]
    UnknownOxm {
        /// OXM class.
        class: u16,
        /// OXM field number.
        field: u8,
        /// Experimenter id, 0 when not an experimenter OXM.
        experimenter: u32,
    },
    /// An OXM entry whose length does not fit its field.
    #[error("bad OXM length {len} for {field}")]
    BadOxmLength {
        /// Field name.
        field: &'static str,
        /// Payload length found.
        len: usize,
    },
    /// A field value outside its legal range, or a masked field that is not maskable.
    #[error("bad value for {0}")]
    BadValue(&'static str),
    /// A match field appears twice.
    #[error("duplicate OXM field {0}")]
    DuplicateField(&'static str),
    /// A match field whose prerequisite is absent.
    #[error("field {0} lacks its prerequisite")]
    Prerequisite(&'static str),
    /// An experimenter message or action we do not know.
    #[error("unknown experimenter {experimenter:#x} type {exp_type}")]
    UnknownExperimenter {
        /// Experimenter id.
        experimenter: u32,
        /// Experimenter subtype.
        exp_type: u32,
    },
}

/// Why a value cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EncodeError {
    /// The encoded message is longer than an OpenFlow length field can state. (The only
    /// way encoding fails: values are checked where they are built.)
    #[error("message of {0} bytes exceeds the 65535-byte OpenFlow limit")]
    TooLong(usize),
}
