//! Typed session errors: why a session closed, why a message could not be queued, and why a
//! request failed.

use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::error::{DecodeError, EncodeError};
use crate::msg::{ErrorMsg, HEADER_LEN, ONF_EXPERIMENTER, ofpt};

/// Why a session closed. Every outstanding request fails with [`RequestError::Closed`] carrying
/// the same value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SessionError {
    /// The peer's HELLO offers no OpenFlow 1.3 (OF1.3 §6.3.1). We answered with
    /// `OFPET_HELLO_FAILED`/`OFPHFC_INCOMPATIBLE`.
    #[error("peer does not support OpenFlow 1.3 (it offers versions {offered:?})")]
    VersionMismatch {
        /// Wire versions the peer offered (4 is OF1.3).
        offered: Vec<u8>,
    },
    /// The peer refused our HELLO with `OFPET_HELLO_FAILED`.
    #[error("peer refused the handshake: {0}")]
    HelloFailed(String),
    /// The first message from the peer was not HELLO.
    #[error("peer's first message has type {0}, not OFPT_HELLO")]
    NoHello(u8),
    /// A header whose length field is below 8 bytes (OF1.3 §7.1): the stream cannot be framed.
    #[error("bad message length {len} in OpenFlow header (type {msg_type}, xid {xid:#x})")]
    BadLength {
        /// The length field.
        len: usize,
        /// `ofp_type`.
        msg_type: u8,
        /// The header's xid.
        xid: u32,
    },
    /// A message with a version other than the negotiated one.
    #[error("message with OpenFlow version {version:#04x} after negotiating 0x04")]
    BadVersion {
        /// The header's version.
        version: u8,
    },
    /// An unsolicited message (or the handshake) that does not decode.
    #[error("undecodable message of type {msg_type} (xid {xid:#x}): {error}")]
    Decode {
        /// `ofp_type`.
        msg_type: u8,
        /// The header's xid.
        xid: u32,
        /// What the codec found.
        error: DecodeError,
    },
    /// Nothing arrived for this long although we sent an echo request: the peer is dead.
    #[error("peer silent for {0:?} despite an echo request")]
    EchoTimeout(Duration),
    /// HELLO and FEATURES did not complete in time.
    #[error("handshake not complete after {0:?}")]
    HandshakeTimeout(Duration),
    /// The peer closed the connection between messages.
    #[error("connection closed by peer")]
    Eof,
    /// The peer closed the connection in the middle of a message.
    #[error("connection closed by peer inside a message ({0} bytes of it received)")]
    TruncatedEof(usize),
    /// The transport failed (reported by the driver).
    #[error("I/O error: {0}")]
    Io(String),
    /// We closed the session.
    #[error("session closed locally")]
    Local,
}

/// Why a message could not be queued; nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SendError {
    /// The handshake has not finished.
    #[error("session is not connected yet")]
    NotConnected,
    /// The session has closed.
    #[error("session closed: {0}")]
    Closed(SessionError),
    /// The message does not encode (too long, or a match lacks a prerequisite).
    #[error("cannot encode message: {0}")]
    Encode(#[from] EncodeError),
    /// Member `index` of a bundle does not fit in one `ONFT_BUNDLE_ADD_MESSAGE`.
    #[error("bundle member {index} does not fit in a BUNDLE_ADD message: {error}")]
    BundleMember {
        /// Position in the bundle.
        index: usize,
        /// Why.
        error: EncodeError,
    },
    /// [`crate::session::Session::request`] was given a message type that has no reply.
    #[error("message type {0} has no reply; use send() and barrier()")]
    NoReply(u8),
}

/// A switch error together with the xid of the message that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The xid of the offending message (as returned by `send`).
    pub xid: u32,
    /// The `OFPT_ERROR` the switch sent.
    pub error: ErrorMsg,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "xid {:#x}: {}", self.xid, error_text(&self.error))
    }
}

/// A failed bundle member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberFailure {
    /// Position of the message in the bundle.
    pub index: usize,
    /// Its xid (the BUNDLE_ADD and the inner message share it; OVS requires that).
    pub xid: u32,
    /// The error the switch reported for it.
    pub error: ErrorMsg,
}

/// A bundle that was not committed, or whose commit failed. Nothing of it is installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFailure {
    /// The bundle id.
    pub bundle_id: u32,
    /// Members the switch refused, when it was adding them or when committing.
    pub members: Vec<MemberFailure>,
    /// An error on OPEN, COMMIT or DISCARD itself (`OFPBFC_MSG_FAILED` on a commit that failed
    /// because of a member).
    pub control: Option<ErrorMsg>,
}

impl fmt::Display for BundleFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bundle {:#x} rolled back", self.bundle_id)?;
        for m in &self.members {
            write!(
                f,
                "; message {} (xid {:#x}): {}",
                m.index,
                m.xid,
                error_text(&m.error)
            )?;
        }
        if let Some(e) = &self.control {
            write!(f, "; control: {}", error_text(e))?;
        }
        Ok(())
    }
}

/// Why a request, barrier or bundle failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// The switch answered the request with `OFPT_ERROR`.
    #[error("switch refused the request: {}", error_text(.0))]
    Refused(ErrorMsg),
    /// The barrier completed, but messages sent before it failed.
    #[error("{} message(s) before the barrier failed: {}", .0.len(), list(.0))]
    SendsFailed(Vec<Failure>),
    /// The bundle rolled back.
    #[error("{0}")]
    Bundle(BundleFailure),
    /// The reply did not decode.
    #[error("reply does not decode: {0}")]
    Decode(DecodeError),
    /// The session closed before the reply came.
    #[error("session closed: {0}")]
    Closed(SessionError),
}

fn list(v: &[Failure]) -> String {
    let s: Vec<String> = v.iter().map(Failure::to_string).collect();
    s.join("; ")
}

/// `OFPBRC_IS_SLAVE`-style name of an error, or its type and code, with the type of the
/// offending message the error quotes (OF1.3 §7.4.4: at least its first 64 bytes).
pub fn error_text(e: &ErrorMsg) -> String {
    // Standard errors by their OF1.3 names; Nicira and ONF experimenter errors by their OVS
    // names (`OFPBFC_*` for bundles).
    let name = match (e.name().or_else(|| e.ovs_name()), e.experimenter) {
        (Some(n), _) => n.to_string(),
        (None, Some(ONF_EXPERIMENTER)) => format!("ONF error {}", e.code),
        (None, Some(x)) => format!("experimenter {x:#x} error {}", e.code),
        (None, None) => format!("OFPET {} code {}", e.err_type, e.code),
    };
    match offending_type(&e.data) {
        Some(t) if e.err_type != 0 => format!("{name} (for {t})"),
        _ => name,
    }
}

/// The type name of the message at the start of an error's data, if it has a header.
fn offending_type(data: &[u8]) -> Option<String> {
    let ty = *data.get(1)?;
    if data.len() < HEADER_LEN {
        return None;
    }
    let name = match ty {
        ofpt::EXPERIMENTER => {
            let exp = u32::from_be_bytes(data.get(8..12)?.try_into().ok()?);
            let sub = u32::from_be_bytes(data.get(12..16)?.try_into().ok()?);
            match (exp, sub) {
                (ONF_EXPERIMENTER, 2300) => "ONFT_BUNDLE_CONTROL".to_string(),
                (ONF_EXPERIMENTER, 2301) => "ONFT_BUNDLE_ADD_MESSAGE".to_string(),
                _ => format!("experimenter {exp:#x} type {sub}"),
            }
        }
        ofpt::FLOW_MOD => "OFPT_FLOW_MOD".to_string(),
        ofpt::GROUP_MOD => "OFPT_GROUP_MOD".to_string(),
        ofpt::MULTIPART_REQUEST => "OFPT_MULTIPART_REQUEST".to_string(),
        ofpt::ROLE_REQUEST => "OFPT_ROLE_REQUEST".to_string(),
        t => format!("message type {t}"),
    };
    Some(name)
}
