//! The OpenFlow 1.3 switch session as a sans-IO state machine.
//!
//! A [`Session`] holds one connection's protocol state and nothing else: it never reads the
//! clock and does no I/O (the shape of `quinn-proto`). A driver feeds it received bytes
//! ([`Session::handle_bytes`]) and the time ([`Session::handle_timeout`]), and takes out bytes to
//! write ([`Session::poll_transmit`], giving each buffer back once written with
//! [`Session::recycle`]), [`Event`]s ([`Session::poll_event`]) and the next deadline
//! ([`Session::poll_timeout`]).
//!
//! It covers OF1.3 §6.3: HELLO with version-bitmap negotiation (OF1.3 only; any other peer gets
//! `OFPET_HELLO_FAILED`/`OFPHFC_INCOMPATIBLE`), FEATURES for the datapath id, echo in both
//! directions with dead-peer detection, xid allocation and reply correlation (multipart parts
//! joined across `OFPMPF_REPLY_MORE`), barriers that collect the errors of the messages sent
//! before them, bundles (see `bundle.rs`), role status and everything else by request.
//! Messages are pipelined: nothing waits for a reply before the next message is queued.
//!
//! Malformed input never panics: a header that cannot be framed or a wrong version closes the
//! session with a [`SessionError`]. An unsolicited message that does not decode is answered with
//! an `OFPT_ERROR` quoting it and reported as [`Event::Discarded`]; the session goes on. A reply
//! that does not decode fails only its request.

mod bundle;
mod config;
mod error;
mod event;
mod framer;
mod liveness;
mod recv;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

pub use config::{Config, OFPBF_ATOMIC, OFPBF_ORDERED};
pub use error::{
    BundleFailure, Failure, MemberFailure, RequestError, SendError, SessionError, error_text,
};
pub use event::{Event, Reply, RoleStatus, Token};

use crate::error::{DecodeError, EncodeError};
use crate::msg::{Body, BundleAdd, BundleControl, Features, Hello, Message};
use crate::wire::Writer;
use bundle::{Bundle, Bundles, Stage};
use framer::Framer;
use liveness::{Due, Liveness};

/// `OFPCR_ROLE_*` controller roles (OF1.3 §6.3.4, §7.3.9).
pub mod role {
    /// Keep the current role (to read it and the generation id).
    pub const NOCHANGE: u32 = 0;
    /// Full access, with other equal controllers (the default).
    pub const EQUAL: u32 = 1;
    /// Full access; every other master becomes slave.
    pub const MASTER: u32 = 2;
    /// Read-only: modifications fail with `OFPBRC_IS_SLAVE`.
    pub const SLAVE: u32 = 3;
}

/// `ONFT_ROLE_STATUS` (`openflow/onf-ext.h`).
const ONFT_ROLE_STATUS: u32 = 1911;
/// `OFPBCT_OPEN_REQUEST`, `OFPBCT_COMMIT_REQUEST`, `OFPBCT_DISCARD_REQUEST` (OF1.4 §7.3.9).
const OFPBCT_OPEN_REQUEST: u16 = 0;
const OFPBCT_COMMIT_REQUEST: u16 = 4;
const OFPBCT_DISCARD_REQUEST: u16 = 6;
/// `OFPET_HELLO_FAILED` / `OFPHFC_INCOMPATIBLE` (OF1.3 §7.4.4.1).
const OFPET_HELLO_FAILED: u16 = 0;
const OFPHFC_INCOMPATIBLE: u16 = 0;
/// At most this many errors wait for the next barrier; older ones were reported as events.
const MAX_UNCLAIMED: usize = 1024;
/// `OFPMPF_REPLY_MORE` (OF1.3 §7.3.5).
const OFPMPF_REPLY_MORE: u16 = 1;

/// Where the connection is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Our HELLO is queued; waiting for the peer's.
    AwaitHello,
    /// Versions agreed; FEATURES_REQUEST sent.
    AwaitFeatures {
        /// Its xid.
        xid: u32,
    },
    /// Ready for traffic.
    Connected(Features),
    /// Over, for this reason.
    Closed(SessionError),
}

/// A request waiting for its reply.
#[derive(Debug)]
struct Pending {
    token: Token,
    parts: Vec<Message>,
    /// A part that did not decode; reported once the last part arrives.
    broken: Option<DecodeError>,
}

/// A barrier waiting for its reply, with the errors of earlier messages seen meanwhile.
#[derive(Debug)]
struct BarrierWait {
    xid: u32,
    token: Token,
    failures: Vec<Failure>,
}

/// One OpenFlow 1.3 session with a switch; see the module docs.
#[derive(Debug)]
pub struct Session {
    config: Config,
    phase: Phase,
    started: Instant,
    rx: Framer,
    out: Vec<u8>,
    events: VecDeque<Event>,
    next_xid: u32,
    next_token: u64,
    next_bundle_id: u32,
    requests: HashMap<u32, Pending>,
    barriers: VecDeque<BarrierWait>,
    /// Errors that arrived while no barrier was outstanding, for the next barrier.
    unclaimed: Vec<Failure>,
    bundles: Bundles,
    live: Liveness,
}

impl Session {
    /// A session that has just queued its HELLO (OF1.3 §6.3.1).
    pub fn new(config: Config, now: Instant) -> Self {
        let live = Liveness::new(config.echo_interval, config.echo_timeout, now);
        let mut s = Session {
            config,
            phase: Phase::AwaitHello,
            started: now,
            rx: Framer::default(),
            out: Vec::new(),
            events: VecDeque::new(),
            next_xid: 1,
            next_token: 0,
            next_bundle_id: 1,
            requests: HashMap::new(),
            barriers: VecDeque::new(),
            unclaimed: Vec::new(),
            bundles: Bundles::default(),
            live,
        };
        let xid = s.alloc_xid();
        s.write_internal(xid, Body::Hello(Hello::of13()));
        s
    }

    /// The connection's phase.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The switch's FEATURES_REPLY, once connected.
    pub fn features(&self) -> Option<&Features> {
        match &self.phase {
            Phase::Connected(f) => Some(f),
            _ => None,
        }
    }

    /// The datapath id, once connected.
    pub fn datapath_id(&self) -> Option<u64> {
        self.features().map(|f| f.datapath_id)
    }

    /// True once the session has closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed(_))
    }

    /// Requests, barriers and bundles still waiting.
    pub fn outstanding(&self) -> usize {
        self.requests.len() + self.barriers.len() + self.bundles.len()
    }

    // ---- input ----

    /// Feeds bytes received from the peer.
    pub fn handle_bytes(&mut self, data: &[u8], now: Instant) {
        if self.is_closed() {
            return;
        }
        let mut rx = std::mem::take(&mut self.rx);
        rx.push(data);
        loop {
            match rx.next_frame() {
                Ok(Some(frame)) => self.on_frame(frame, now),
                Ok(None) => break,
                Err(e) => self.close_with(e),
            }
            if self.is_closed() {
                break;
            }
        }
        self.rx = rx;
    }

    /// The peer closed its side of the connection.
    pub fn handle_eof(&mut self) {
        let buffered = self.rx.buffered();
        self.close_with(if buffered == 0 {
            SessionError::Eof
        } else {
            SessionError::TruncatedEof(buffered)
        });
    }

    /// The transport failed.
    pub fn handle_io_error(&mut self, error: String) {
        self.close_with(SessionError::Io(error));
    }

    /// Runs the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.is_closed() {
            return;
        }
        if self.features().is_none() && now >= self.started + self.config.handshake_timeout {
            self.close_with(SessionError::HandshakeTimeout(
                self.config.handshake_timeout,
            ));
            return;
        }
        match self.live.due(now) {
            Due::Nothing => {}
            Due::SendEcho => {
                let xid = self.alloc_xid();
                self.write_internal(xid, Body::EchoRequest(Vec::new()));
            }
            Due::Dead(silence) => self.close_with(SessionError::EchoTimeout(silence)),
        }
    }

    /// Closes the session; queued output can still be flushed.
    pub fn close(&mut self) {
        self.close_with(SessionError::Local);
    }

    // ---- output ----

    /// Bytes to write, all queued messages in one buffer.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.out.is_empty() {
            // Room kept by `recycle` for a load that has ended goes back to the allocator.
            if self.out.capacity() > 0 && self.outstanding() == 0 {
                self.out = Vec::new();
            }
            None
        } else {
            Some(std::mem::take(&mut self.out))
        }
    }

    /// Gives back a buffer [`Session::poll_transmit`] returned, once the driver has written
    /// it, so that the next messages are encoded into memory already in use rather than a
    /// buffer grown from nothing (a load's bundles are megabytes each: growing each one again
    /// copied it and faulted in fresh pages). The room is kept only while requests, barriers
    /// or bundles are outstanding and nothing is queued; an idle session holds none.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.out.is_empty() && self.outstanding() > 0 && buf.capacity() > self.out.capacity() {
            buf.clear();
            self.out = buf;
        }
    }

    /// Bytes queued for [`Session::poll_transmit`].
    pub fn transmit_len(&self) -> usize {
        self.out.len()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Session::handle_timeout`] must next be called; `None` once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Closed(_) => None,
            Phase::Connected(_) => Some(self.live.deadline()),
            _ => Some(
                self.live
                    .deadline()
                    .min(self.started + self.config.handshake_timeout),
            ),
        }
    }

    // ---- API ----

    /// Queues a message that expects no reply and returns its xid. If the switch refuses it,
    /// the error goes to the oldest outstanding barrier; if none is outstanding when it
    /// arrives, it becomes [`Event::Error`] and also goes to the next barrier queued.
    pub fn send(&mut self, body: Body) -> Result<u32, SendError> {
        self.check_ready()?;
        let xid = self.alloc_xid();
        self.write(&Message::new(xid, body))?;
        Ok(xid)
    }

    /// Queues a request whose reply (or `OFPT_ERROR`) completes the returned token. Only
    /// message types that have replies are accepted.
    pub fn request(&mut self, body: Body) -> Result<Token, SendError> {
        self.check_ready()?;
        if !has_reply(&body) {
            return Err(SendError::NoReply(body.msg_type()));
        }
        let xid = self.alloc_xid();
        self.write(&Message::new(xid, body))?;
        let token = self.alloc_token();
        self.requests.insert(
            xid,
            Pending {
                token,
                parts: Vec::new(),
                broken: None,
            },
        );
        Ok(token)
    }

    /// Queues a barrier (OF1.3 §6.2). It completes with [`Reply::Done`], or with
    /// [`RequestError::SendsFailed`] naming each message sent before it that the switch refused.
    pub fn barrier(&mut self) -> Result<Token, SendError> {
        self.check_ready()?;
        let xid = self.alloc_xid();
        self.write_internal(xid, Body::BarrierRequest);
        let token = self.alloc_token();
        let failures = std::mem::take(&mut self.unclaimed);
        self.barriers.push_back(BarrierWait {
            xid,
            token,
            failures,
        });
        Ok(token)
    }

    /// Queues an atomic, ordered bundle of `bodies` (see `bundle.rs` for the exchange). It
    /// completes with [`Reply::Done`] once committed, or [`RequestError::Bundle`] after a
    /// rollback naming the refused messages by index. Nothing is split: a member that does not
    /// fit in one BUNDLE_ADD fails the call and nothing is queued.
    ///
    /// The COMMIT leaves one round trip after the ADDs, so messages queued after this call
    /// reach the switch before the commit: wait for the bundle's [`Event::Done`] first when
    /// they depend on it.
    pub fn bundle(&mut self, bodies: impl IntoIterator<Item = Body>) -> Result<Token, SendError> {
        self.check_ready()?;
        let (mark_out, mark_xid) = (self.out.len(), self.next_xid);
        let bundle_id = self.next_bundle_id;
        let flags = self.config.bundle_flags;
        let open_xid = self.alloc_xid();
        self.write_internal(open_xid, bundle_ctrl(bundle_id, OFPBCT_OPEN_REQUEST, flags));
        let first_member_xid = self.next_xid;
        let mut members: u32 = 0;
        for (index, body) in bodies.into_iter().enumerate() {
            let xid = self.alloc_xid();
            if let Err(error) = self.write_bundle_add(bundle_id, flags, Message::new(xid, body)) {
                self.out.truncate(mark_out);
                self.next_xid = mark_xid;
                return Err(SendError::BundleMember { index, error });
            }
            members = members.wrapping_add(1);
        }
        let fence_xid = self.alloc_xid();
        self.write_internal(fence_xid, Body::BarrierRequest);
        self.next_bundle_id = bundle_id.wrapping_add(1);
        let token = self.alloc_token();
        self.bundles.insert(Bundle {
            token,
            open_xid,
            first_member_xid,
            members,
            fence_xid,
            ctrl_xid: None,
            stage: Stage::Adding,
            failure: BundleFailure {
                bundle_id,
                members: Vec::new(),
                control: None,
            },
        });
        Ok(token)
    }

    // ---- internals ----

    fn check_ready(&self) -> Result<(), SendError> {
        match &self.phase {
            Phase::Connected(_) => Ok(()),
            Phase::Closed(e) => Err(SendError::Closed(e.clone())),
            _ => Err(SendError::NotConnected),
        }
    }

    fn alloc_xid(&mut self) -> u32 {
        let xid = self.next_xid;
        self.next_xid = self.next_xid.wrapping_add(1);
        xid
    }

    fn alloc_token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    /// Encodes `msg` onto the output, leaving the output unchanged on failure.
    fn write(&mut self, msg: &Message) -> Result<(), EncodeError> {
        let mut w = Writer::from_vec(std::mem::take(&mut self.out));
        let start = w.len();
        let result = msg.encode_into(&mut w);
        self.out = w.into_vec();
        if result.is_err() {
            self.out.truncate(start);
        }
        result
    }

    /// Encodes a message of our own making, which always fits.
    fn write_internal(&mut self, xid: u32, body: Body) {
        // Control messages are a few bytes long; encoding them cannot fail.
        let _ = self.write(&Message::new(xid, body));
    }

    /// Writes `ONFT_BUNDLE_ADD_MESSAGE` around `inner`, whose xid it shares (OVS checks this).
    fn write_bundle_add(
        &mut self,
        bundle_id: u32,
        flags: u16,
        inner: Message,
    ) -> Result<(), EncodeError> {
        // The codec checks the inner message's matches too.
        let xid = inner.xid;
        let add = BundleAdd {
            bundle_id,
            flags,
            message: Box::new(inner),
            properties: Vec::new(),
        };
        self.write(&Message::new(xid, Body::BundleAdd(add)))
    }

    fn push_done(&mut self, token: Token, result: Result<Reply, RequestError>) {
        self.events.push_back(Event::Done { token, result });
    }

    fn close_with(&mut self, error: SessionError) {
        if self.is_closed() {
            return;
        }
        self.phase = Phase::Closed(error.clone());
        let mut done: Vec<Token> = self.requests.drain().map(|(_, p)| p.token).collect();
        done.extend(self.barriers.drain(..).map(|b| b.token));
        done.extend(self.bundles.drain().map(|b| b.token));
        done.sort();
        for token in done {
            self.push_done(token, Err(RequestError::Closed(error.clone())));
        }
        self.events.push_back(Event::Closed(error));
    }
}

/// A BUNDLE_CONTROL request.
fn bundle_ctrl(bundle_id: u32, ctrl_type: u16, flags: u16) -> Body {
    Body::BundleControl(BundleControl {
        bundle_id,
        ctrl_type,
        flags,
        properties: Vec::new(),
    })
}

/// Message types that are answered by a reply of their own (OF1.3 §7.3).
fn has_reply(body: &Body) -> bool {
    matches!(
        body,
        Body::EchoRequest(_)
            | Body::FeaturesRequest
            | Body::GetConfigRequest
            | Body::MultipartRequest(_)
            | Body::RoleRequest(_)
            | Body::GetAsyncRequest
    )
}
