//! Errors of the tokio driver.

use thiserror::Error;

use crate::session::{RequestError, SendError, SessionError};

/// Why a driver call failed.
#[derive(Debug, Error)]
pub enum Error {
    /// A target string that is not OVS syntax.
    #[error("bad target `{target}`: {why}")]
    Target {
        /// The string.
        target: String,
        /// What is wrong.
        why: &'static str,
    },
    /// Dialing, listening or accepting failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The message could not be queued.
    #[error(transparent)]
    Send(#[from] SendError),
    /// The switch refused, or the session closed before answering.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// The session closed (during the handshake, or before the call).
    #[error("session closed: {0}")]
    Closed(SessionError),
    /// The reply has an unexpected type.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
}
