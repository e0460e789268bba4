//! The receive side of [`Session`]: each whole message from the peer, routed to the handshake,
//! its request, barrier or bundle, or out as an event (OF1.3 §6.3, §7).

use std::time::Instant;

use super::bundle::Outcome;
use super::error::{Failure, RequestError, SessionError, error_text};
use super::event::{Event, Reply, RoleStatus};
use super::{
    MAX_UNCLAIMED, OFPBCT_COMMIT_REQUEST, OFPBCT_DISCARD_REQUEST, OFPET_HELLO_FAILED,
    OFPHFC_INCOMPATIBLE, OFPMPF_REPLY_MORE, ONFT_ROLE_STATUS, Phase, Session, bundle_ctrl,
};
use crate::error::DecodeError;
use crate::msg::{Body, ErrorMsg, Message, OFP13_VERSION, ONF_EXPERIMENTER, ofpt};

/// `OFPET_BAD_REQUEST` (OF1.3 §7.4.4.2).
const OFPET_BAD_REQUEST: u16 = 1;
/// `OFPBRC_BAD_LEN`: wrong length for the type.
const OFPBRC_BAD_LEN: u16 = 6;
/// `OFPBRC_EPERM`: not processed (here: a field or value the codec does not know).
const OFPBRC_EPERM: u16 = 5;

impl Session {
    /// Handles one whole message. `frame` comes from the framer, so it holds at least the
    /// 8-byte header and exactly the length the header states.
    pub(super) fn on_frame(&mut self, frame: &[u8], now: Instant) {
        self.live.on_rx(now);
        let (version, msg_type) = (frame[0], frame[1]);
        let xid = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        if self.phase == Phase::AwaitHello {
            return self.on_hello(frame, msg_type, xid);
        }
        if version != OFP13_VERSION {
            return self.close_with(SessionError::BadVersion { version });
        }
        let more = msg_type == ofpt::MULTIPART_REPLY
            && frame
                .get(10..12)
                .is_some_and(|f| u16::from_be_bytes([f[0], f[1]]) & OFPMPF_REPLY_MORE != 0);
        match Message::decode(frame) {
            Ok(msg) => self.on_message(msg, more),
            Err(error) => self.on_undecodable(frame, msg_type, xid, error, more),
        }
    }

    fn on_hello(&mut self, frame: &[u8], msg_type: u8, xid: u32) {
        if msg_type == ofpt::ERROR && frame.get(8..10) == Some(&[0, 0]) {
            // A peer that refuses our HELLO may not send its own first (OF1.3 §6.3.1); its
            // header may carry any version, so read the text without the codec.
            let text = String::from_utf8_lossy(frame.get(12..).unwrap_or_default()).into_owned();
            return self.close_with(SessionError::HelloFailed(text));
        }
        if msg_type != ofpt::HELLO {
            return self.close_with(SessionError::NoHello(msg_type));
        }
        let hello = match Message::decode(frame) {
            Ok(Message {
                body: Body::Hello(h),
                ..
            }) => h,
            Ok(_) => return self.close_with(SessionError::NoHello(msg_type)),
            Err(error) => {
                return self.close_with(SessionError::Decode {
                    msg_type,
                    xid,
                    error,
                });
            }
        };
        // OF1.3 §6.3.1: with bitmaps on both sides the highest common bit wins; without one,
        // the smaller of the two header versions.
        let ok = match &hello.bitmap {
            Some(_) => hello.versions().contains(&OFP13_VERSION),
            None => hello.version >= OFP13_VERSION,
        };
        if ok {
            let xid = self.alloc_xid();
            self.write_internal(xid, Body::FeaturesRequest);
            self.phase = Phase::AwaitFeatures { xid };
        } else {
            let offered = hello.versions();
            let text = format!("We support version 0x04, you support {offered:02x?}");
            let error = ErrorMsg {
                err_type: OFPET_HELLO_FAILED,
                code: OFPHFC_INCOMPATIBLE,
                experimenter: None,
                data: text.into_bytes(),
            };
            self.write_internal(xid, Body::Error(error));
            self.close_with(SessionError::VersionMismatch { offered });
        }
    }

    fn on_undecodable(
        &mut self,
        frame: &[u8],
        msg_type: u8,
        xid: u32,
        error: DecodeError,
        more: bool,
    ) {
        let Some(p) = self.requests.get_mut(&xid) else {
            // Unsolicited: one bad message does not end the connection (OF1.3 §6.4: answer
            // what cannot be processed with an error that quotes it, at least 64 bytes).
            let code = match error {
                DecodeError::Truncated { .. }
                | DecodeError::TrailingData(_)
                | DecodeError::BadLength { .. } => OFPBRC_BAD_LEN,
                _ => OFPBRC_EPERM,
            };
            let reply = ErrorMsg {
                err_type: OFPET_BAD_REQUEST,
                code,
                experimenter: None,
                data: frame[..frame.len().min(64)].to_vec(),
            };
            self.write_internal(xid, Body::Error(reply));
            self.events.push_back(Event::Discarded {
                msg_type,
                xid,
                error,
            });
            return;
        };
        p.broken.get_or_insert(error);
        if !more {
            if let Some(p) = self.requests.remove(&xid) {
                let e = p.broken.unwrap_or(DecodeError::TrailingData(0));
                self.push_done(p.token, Err(RequestError::Decode(e)));
            }
        }
    }

    fn on_message(&mut self, msg: Message, more: bool) {
        let xid = msg.xid;
        match msg.body {
            Body::EchoRequest(data) => self.write_internal(xid, Body::EchoReply(data)),
            // The answer to our liveness probe: receiving it was the point.
            Body::EchoReply(_) if !self.requests.contains_key(&xid) => {}
            Body::Error(error) => self.on_error(xid, error),
            Body::FeaturesReply(f) if self.phase == (Phase::AwaitFeatures { xid }) => {
                self.phase = Phase::Connected(f);
                self.events.push_back(Event::Connected(f));
            }
            Body::BarrierReply => self.on_barrier_reply(xid),
            Body::BundleControl(bc) => match self.bundles.on_ctrl_reply(xid) {
                Outcome::NotOurs => self.on_reply(Message::new(xid, Body::BundleControl(bc)), more),
                outcome => self.on_bundle_outcome(outcome),
            },
            Body::PacketIn(p) => self.events.push_back(Event::PacketIn(p)),
            Body::PortStatus(p) => self.events.push_back(Event::PortStatus(p)),
            Body::FlowRemoved(f) => self.events.push_back(Event::FlowRemoved(f)),
            Body::Experimenter {
                experimenter,
                exp_type,
                data,
            } => match (experimenter, exp_type, role_status(&data)) {
                (ONF_EXPERIMENTER, ONFT_ROLE_STATUS, Some(r)) => {
                    self.events.push_back(Event::RoleStatus(r));
                }
                _ => {
                    let body = Body::Experimenter {
                        experimenter,
                        exp_type,
                        data,
                    };
                    self.on_reply(Message::new(xid, body), more);
                }
            },
            body => self.on_reply(Message::new(xid, body), more),
        }
    }

    /// Matches a reply to its request; anything unclaimed becomes [`Event::Message`].
    fn on_reply(&mut self, msg: Message, more: bool) {
        let xid = msg.xid;
        let Some(p) = self.requests.get_mut(&xid) else {
            return self.events.push_back(Event::Message(msg));
        };
        if matches!(msg.body, Body::MultipartReply(_)) {
            p.parts.push(msg);
            if more {
                return;
            }
            if let Some(p) = self.requests.remove(&xid) {
                let result = match p.broken {
                    Some(e) => Err(RequestError::Decode(e)),
                    None => Ok(Reply::Multipart(p.parts)),
                };
                self.push_done(p.token, result);
            }
        } else if let Some(p) = self.requests.remove(&xid) {
            self.push_done(p.token, Ok(Reply::Message(msg)));
        }
    }

    /// Routes `OFPT_ERROR`: to its request, to its bundle, to the oldest barrier, or out.
    fn on_error(&mut self, xid: u32, error: ErrorMsg) {
        if let Some(p) = self.requests.remove(&xid) {
            return self.push_done(p.token, Err(RequestError::Refused(error)));
        }
        match self.bundles.on_error(xid, &error) {
            Outcome::NotOurs => {}
            outcome => return self.on_bundle_outcome(outcome),
        }
        if error.err_type == OFPET_HELLO_FAILED {
            let text = String::from_utf8_lossy(&error.data).into_owned();
            return self.close_with(SessionError::HelloFailed(text));
        }
        if matches!(self.phase, Phase::AwaitFeatures { xid: x } if x == xid) {
            return self.close_with(SessionError::HelloFailed(error_text(&error)));
        }
        match self.barriers.front_mut() {
            Some(b) => b.failures.push(Failure { xid, error }),
            None => {
                if self.unclaimed.len() < MAX_UNCLAIMED {
                    self.unclaimed.push(Failure {
                        xid,
                        error: error.clone(),
                    });
                }
                self.events.push_back(Event::Error { xid, error });
            }
        }
    }

    fn on_barrier_reply(&mut self, xid: u32) {
        match self.bundles.on_barrier_reply(xid) {
            Outcome::NotOurs => {}
            outcome => return self.on_bundle_outcome(outcome),
        }
        let Some(pos) = self.barriers.iter().position(|b| b.xid == xid) else {
            return self
                .events
                .push_back(Event::Message(Message::new(xid, Body::BarrierReply)));
        };
        // Replies come in order, so earlier barriers (if any) are complete too.
        for b in self.barriers.drain(..=pos).collect::<Vec<_>>() {
            let result = if b.failures.is_empty() {
                Ok(Reply::Done)
            } else {
                Err(RequestError::SendsFailed(b.failures))
            };
            self.push_done(b.token, result);
        }
    }

    fn on_bundle_outcome(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::NotOurs | Outcome::Noted => {}
            Outcome::FenceDone { bundle_id, commit } => {
                let ctrl = if commit {
                    OFPBCT_COMMIT_REQUEST
                } else {
                    OFPBCT_DISCARD_REQUEST
                };
                let xid = self.alloc_xid();
                self.write_internal(xid, bundle_ctrl(bundle_id, ctrl, self.config.bundle_flags));
                self.bundles.set_ctrl_xid(bundle_id, xid);
            }
            Outcome::Finished { token, result } => {
                self.push_done(
                    token,
                    result.map(|()| Reply::Done).map_err(RequestError::Bundle),
                );
            }
        }
    }
}

/// Parses the body of `ONFT_ROLE_STATUS` after the experimenter header: role (4), reason (1),
/// pad (3), generation id (8), then properties we ignore.
fn role_status(data: &[u8]) -> Option<RoleStatus> {
    let role = u32::from_be_bytes(data.get(0..4)?.try_into().ok()?);
    let reason = *data.get(4)?;
    let generation_id = u64::from_be_bytes(data.get(8..16)?.try_into().ok()?);
    Some(RoleStatus {
        role,
        reason,
        generation_id,
    })
}
