//! Bundles in flight (ONF EXT-230 in OF1.3 experimenter form; OF1.4 §7.3.9).
//!
//! A bundle goes out as OPEN, N × ADD, then a BARRIER we call the fence, all pipelined. OVS
//! checks each added message when it receives it (`handle_bundle_add` →
//! `ofproto_flow_mod_init`); a refused ADD leaves the bundle open *without* that message, so
//! committing blindly would install the rest. Once the fence's reply arrives every ADD error has
//! arrived too (OVS answers in order), so we send COMMIT if none failed and DISCARD otherwise:
//! one round trip per bundle, not per message.
//!
//! Which xid names a refused member? OVS requires the inner message's xid to equal the ADD's
//! (`OFPBFC_MSG_BAD_XID` otherwise), and we always send them equal, so both readings route the
//! same way. Measured on OVS 3.1 (`ovs-tests/tests/session_bundle.rs`): ADD-time errors (e.g.
//! `OFPBIC_BAD_TABLE_ID`) and COMMIT-time errors (e.g. `OFPBAC_BAD_OUT_GROUP`) both carry that
//! xid and quote the whole BUNDLE_ADD; a COMMIT-time error is followed by ONF
//! `OFPBFC_MSG_FAILED` (2313) on the COMMIT.

use crate::msg::ErrorMsg;

use super::error::{BundleFailure, MemberFailure};
use super::event::Token;

/// Where a bundle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// OPEN and the ADDs are out; waiting for the fence's BARRIER_REPLY.
    Adding,
    /// COMMIT is out.
    Committing,
    /// DISCARD is out, because a member failed.
    Discarding,
}

/// One bundle in flight.
#[derive(Debug)]
pub(crate) struct Bundle {
    pub(crate) token: Token,
    pub(crate) open_xid: u32,
    /// Members have consecutive xids starting here.
    pub(crate) first_member_xid: u32,
    pub(crate) members: u32,
    pub(crate) fence_xid: u32,
    /// The COMMIT or DISCARD xid, once sent.
    pub(crate) ctrl_xid: Option<u32>,
    pub(crate) stage: Stage,
    pub(crate) failure: BundleFailure,
}

/// What an error or reply meant for a bundle.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The message was not about a bundle.
    NotOurs,
    /// Recorded; nothing else to do.
    Noted,
    /// The fence returned: send COMMIT (`true`) or DISCARD (`false`) for this bundle id.
    FenceDone { bundle_id: u32, commit: bool },
    /// The bundle finished.
    Finished {
        token: Token,
        result: Result<(), BundleFailure>,
    },
}

/// All bundles in flight, oldest first. There are few, so a vector is enough.
#[derive(Debug, Default)]
pub(crate) struct Bundles {
    list: Vec<Bundle>,
}

impl Bundles {
    pub(crate) fn insert(&mut self, b: Bundle) {
        self.list.push(b);
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Routes an `OFPT_ERROR` by xid.
    pub(crate) fn on_error(&mut self, xid: u32, error: &ErrorMsg) -> Outcome {
        let Some(pos) = self.list.iter().position(|b| b.owns(xid)) else {
            return Outcome::NotOurs;
        };
        let b = &mut self.list[pos];
        let offset = xid.wrapping_sub(b.first_member_xid);
        if offset < b.members {
            let index = usize::try_from(offset).unwrap_or(usize::MAX);
            b.failure.members.push(MemberFailure {
                index,
                xid,
                error: error.clone(),
            });
            return Outcome::Noted;
        }
        if xid == b.open_xid {
            b.failure.control = Some(error.clone());
            return Outcome::Noted;
        }
        if Some(xid) == b.ctrl_xid {
            if b.failure.control.is_none() {
                b.failure.control = Some(error.clone());
            }
            return self.finish(pos);
        }
        Outcome::Noted
    }

    /// Routes a BARRIER_REPLY (a fence) by xid.
    pub(crate) fn on_barrier_reply(&mut self, xid: u32) -> Outcome {
        match self
            .list
            .iter_mut()
            .find(|b| b.fence_xid == xid && b.stage == Stage::Adding)
        {
            Some(b) => {
                let commit = b.failure.members.is_empty() && b.failure.control.is_none();
                b.stage = if commit {
                    Stage::Committing
                } else {
                    Stage::Discarding
                };
                Outcome::FenceDone {
                    bundle_id: b.failure.bundle_id,
                    commit,
                }
            }
            None => Outcome::NotOurs,
        }
    }

    /// Records the COMMIT/DISCARD xid sent after a fence.
    pub(crate) fn set_ctrl_xid(&mut self, bundle_id: u32, xid: u32) {
        if let Some(b) = self
            .list
            .iter_mut()
            .find(|b| b.failure.bundle_id == bundle_id)
        {
            b.ctrl_xid = Some(xid);
        }
    }

    /// Routes a BUNDLE_CONTROL reply by xid.
    pub(crate) fn on_ctrl_reply(&mut self, xid: u32) -> Outcome {
        if let Some(pos) = self.list.iter().position(|b| b.ctrl_xid == Some(xid)) {
            return self.finish(pos);
        }
        if self.list.iter().any(|b| b.open_xid == xid) {
            return Outcome::Noted;
        }
        Outcome::NotOurs
    }

    /// Every bundle, for failing them all when the session closes.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Bundle> + '_ {
        self.list.drain(..)
    }

    fn finish(&mut self, pos: usize) -> Outcome {
        let b = self.list.remove(pos);
        let ok = b.stage == Stage::Committing
            && b.failure.members.is_empty()
            && b.failure.control.is_none();
        Outcome::Finished {
            token: b.token,
            result: if ok { Ok(()) } else { Err(b.failure) },
        }
    }
}

impl Bundle {
    fn owns(&self, xid: u32) -> bool {
        xid == self.open_xid
            || xid == self.fence_xid
            || Some(xid) == self.ctrl_xid
            || xid.wrapping_sub(self.first_member_xid) < self.members
    }
}
