//! The switch side shared by the engine and the daemon: read what the switch holds, count what
//! a sync did, and answer the packets that ask to refuse a connection or probe a health-check
//! node port. The I/O goes through an
//! [`openflow::driver::SwitchHandle`]; every decision is made by the pure functions of this
//! crate. [`crate::engine::Engine`] keeps a switch equal to the model.

use openflow::Action;
use openflow::driver::{Error, FlowFilter, SwitchHandle};
use openflow::msg::{FlowStats, GroupDesc, PacketIn, PacketOut};
use openflow::{Body, Field};

use std::collections::BTreeMap;

use crate::apply::group_from_wire;
use crate::flow::{FlowEntry, FlowKey, GroupEntry};
use crate::health::HealthCheck;
use crate::pipeline::cookie;
use crate::plan::{State, Step};

/// `OFPP_CONTROLLER`.
const OFPP_CONTROLLER: u32 = 0xffff_fffd;

/// A switch's state as svcflow sees it: flows under svcflow's cookie mark and every group.
pub type SwitchState = State<FlowKey, FlowEntry, GroupEntry>;

/// svcflow owns every group on its bridge (service groups and ELAN floods), but only the flows
/// whose cookie carries its mark.
pub fn state_from_dumps(flows: &[FlowStats], groups: &[GroupDesc]) -> SwitchState {
    let mut state = SwitchState::default();
    for f in flows
        .iter()
        .filter(|f| f.cookie & cookie::MARK_MASK == cookie::MARK)
    {
        let key = FlowKey::new(f.table_id, f.priority, &f.match_);
        let entry = FlowEntry::new(f.cookie, f.instructions.clone());
        state.flows.insert(key, entry);
    }
    for g in groups {
        // A group of a type svcflow never installs is kept under an impossible shape, so
        // the plan replaces it.
        let entry = group_from_wire(g.group_type, &g.buckets).unwrap_or(GroupEntry {
            kind: crate::flow::GroupKind::All,
            buckets: Vec::new(),
        });
        state.groups.insert(g.group_id, entry);
    }
    state
}

/// Reads the switch's svcflow state.
pub async fn read_state(switch: &SwitchHandle) -> Result<SwitchState, Error> {
    let filter = FlowFilter {
        table_id: None,
        cookie: cookie::MARK,
        cookie_mask: cookie::MARK_MASK,
    };
    let flows = switch.dump_flows(filter).await?;
    let groups = switch.dump_groups().await?;
    Ok(state_from_dumps(&flows, &groups))
}

/// What one synchronisation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Flows added.
    pub flows_added: usize,
    /// Flows modified in place.
    pub flows_modified: usize,
    /// Flows deleted.
    pub flows_deleted: usize,
    /// Groups added, modified or deleted.
    pub groups_changed: usize,
    /// Stale UDP/SCTP conntrack matches flushed (each sent [`crate::engine::FLUSH_ROUNDS`]
    /// times).
    pub conntrack_flushed: usize,
}

impl SyncReport {
    /// Adds `other`'s counts to these.
    pub fn absorb(&mut self, other: &SyncReport) {
        self.flows_added += other.flows_added;
        self.flows_modified += other.flows_modified;
        self.flows_deleted += other.flows_deleted;
        self.groups_changed += other.groups_changed;
        self.conntrack_flushed += other.conntrack_flushed;
    }

    /// The counts of a plan.
    pub fn of(steps: &[Step<FlowKey, FlowEntry, GroupEntry>]) -> Self {
        let mut r = Self::default();
        for s in steps {
            r.count(s);
        }
        r
    }

    /// Counts one more step.
    pub fn count<K, F, G>(&mut self, step: &Step<K, F, G>) {
        match step {
            Step::AddFlow(..) => self.flows_added += 1,
            // A replaced flow is a changed one too, of the same key.
            Step::ModifyFlow(..) | Step::ReplaceFlow(..) => self.flows_modified += 1,
            Step::DeleteFlow(..) => self.flows_deleted += 1,
            _ => self.groups_changed += 1,
        }
    }

    /// Whether nothing had to change.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// The packet-out that refuses the connection of a packet sent to the controller by a service
/// with no endpoint, or by the service CIDR's catch-all (`table=40` `controller` actions under
/// a service or refusal cookie), or `None` for any other packet-in.
pub fn reject(packet_in: &PacketIn) -> Option<PacketOut> {
    if !matches!(
        cookie::kind_of(packet_in.cookie),
        Some(cookie::SERVICE | cookie::REFUSE)
    ) {
        return None;
    }
    back_out(packet_in, crate::reject::reply(&packet_in.data).ok()?)
}

/// The packet-out that sends `data` out of the port `packet_in` came in on.
fn back_out(packet_in: &PacketIn, data: Vec<u8>) -> Option<PacketOut> {
    let in_port = packet_in.match_.get(Field::InPortOxm)?.value;
    let in_port = u32::try_from(in_port).ok()?;
    Some(PacketOut {
        buffer_id: u32::MAX,
        in_port: OFPP_CONTROLLER,
        actions: vec![Action::Output {
            port: in_port,
            max_len: 0,
        }],
        data,
    })
}

/// What a node's health-check node ports answer, by port, as its task last rendered them
/// ([`crate::shards::Shards::health_checks`]).
pub type HealthChecks = tokio::sync::watch::Receiver<BTreeMap<u16, HealthCheck>>;

/// The packet-out that answers a health-check probe that a node's health-check flow sent to
/// the controller (`table=40` `controller` actions under a health cookie, whose low bits are
/// the port), with what `checks` says the port answers ([`crate::health_answer`]), or `None`
/// for any other packet-in, or a port that answers nothing now.
pub fn health_answer(
    packet_in: &PacketIn,
    checks: &BTreeMap<u16, HealthCheck>,
    secret: u64,
) -> Option<PacketOut> {
    if cookie::kind_of(packet_in.cookie) != Some(cookie::HEALTH) {
        return None;
    }
    let port = u16::try_from(cookie::id_of(packet_in.cookie)).ok()?;
    let check = checks.get(&port)?;
    let data = crate::health_answer::answer(&packet_in.data, check, secret).ok()?;
    back_out(packet_in, data)
}

/// Answers `switch`'s refusal and health-check packet-ins until its session closes, the
/// health checks with what `checks` holds when each probe comes, their sequence numbers keyed
/// by `secret` ([`crate::health_answer::random_secret`], drawn once for every session of a
/// controller, so that a probe whose connection straddles a reconnect is answered alike).
pub async fn serve_packet_ins(switch: SwitchHandle, checks: HealthChecks, secret: u64) {
    let mut events = switch.events();
    loop {
        match events.recv().await {
            Ok(openflow::driver::SwitchEvent::PacketIn(pi)) => {
                let out = reject(&pi).or_else(|| health_answer(&pi, &checks.borrow(), secret));
                if let Some(out) = out {
                    // A refused reply is not worth more than a lost packet: the client retries.
                    let _ = switch.send(Body::PacketOut(out)).await;
                }
            }
            Ok(openflow::driver::SwitchEvent::Disconnected(_)) => return,
            Ok(_) => {}
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}
