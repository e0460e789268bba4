//! What a session reports: completions, asynchronous switch messages and connection changes.

use crate::msg::{ErrorMsg, Features, FlowRemoved, Message, PacketIn, PortStatus};

use super::error::{RequestError, SessionError};

/// Names one request, barrier or bundle until its [`Event::Done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub(crate) u64);

/// A completed request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The single reply message (ROLE_REPLY, GET_ASYNC_REPLY, ECHO_REPLY, …).
    Message(Message),
    /// Every part of a multipart reply, in order (OF1.3 §7.3.5: parts flagged
    /// `OFPMPF_REPLY_MORE` are followed by more).
    Multipart(Vec<Message>),
    /// A barrier or a bundle commit succeeded.
    Done,
}

/// `ONFT_ROLE_STATUS` (ONF experimenter 1911, OF1.4 §7.4.4 `ofp_role_status` in OF1.3 form):
/// another controller changed our role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoleStatus {
    /// Our new `OFPCR_ROLE_*`.
    pub role: u32,
    /// `OFPCRR_*` reason: 0 master request, 1 config, 2 experimenter.
    pub reason: u8,
    /// The generation id now in force.
    pub generation_id: u64,
}

/// Something the driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// HELLO and FEATURES completed.
    Connected(Features),
    /// A request, barrier or bundle finished.
    Done {
        /// What `request`, `barrier` or `bundle` returned.
        token: Token,
        /// The outcome.
        result: Result<Reply, RequestError>,
    },
    /// `OFPT_PACKET_IN`.
    PacketIn(PacketIn),
    /// `OFPT_PORT_STATUS`.
    PortStatus(PortStatus),
    /// `OFPT_FLOW_REMOVED`.
    FlowRemoved(FlowRemoved),
    /// `ONFT_ROLE_STATUS`.
    RoleStatus(RoleStatus),
    /// An error for a sent message while no barrier was outstanding to collect it.
    Error {
        /// The offending message's xid.
        xid: u32,
        /// The error.
        error: ErrorMsg,
    },
    /// Any other message nobody waits for.
    Message(Message),
    /// An unsolicited message that did not decode. The peer was sent an `OFPT_ERROR`
    /// (`OFPET_BAD_REQUEST`, with the message's first 64 bytes) and the session goes on.
    Discarded {
        /// Its `ofp_type`.
        msg_type: u8,
        /// Its xid.
        xid: u32,
        /// Why it did not decode.
        error: crate::error::DecodeError,
    },
    /// The session is over; nothing more will happen except flushing queued output.
    Closed(SessionError),
}
