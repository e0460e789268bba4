//! Keeps one node's switch equal to the model, incrementally.
//!
//! After a connect (or a failed sync) the engine reads the switch and sends the full
//! difference; from then on each model change is re-rendered only where it changed
//! ([`Shards`]) and just the steps it causes are sent. The changed services are planned
//! ([`crate::shards::SETTLE_PART`] at a time) and render [`RENDER_PART`] at a time, and their
//! steps fill bundles as they come, so the switch applies one bundle while the next services
//! plan and render. A model that a next one soon continues (part of a long change being
//! translated) is sent without waiting for its last bundles ([`Then::Continue`]):
//! the next sync waits for them behind its own. A change of at most [`BUNDLE_MAX`] steps
//! holding at most [`BUNDLE_BUCKETS_MAX`] group buckets is one atomic bundle. A longer one (a
//! change to thousands of services at once) goes as several bundles in order, and a full
//! sync as bundles of [`FULL_SYNC_BUNDLE`] messages, each atomic, none leaving a flow pointing
//! at a missing group: within a part of an update, and in a full sync, groups come before the
//! flows that use them and flows are deleted before their groups. The next bundle is
//! rendered and encoded while the switch applies the ones before (at most
//! [`PIPELINE_DEPTH`] sent and unconfirmed).
//! Likewise a full sync first makes sure the switch holds the refusal meter
//! ([`crate::meter`]) that the refusal flows name.

use std::collections::VecDeque;

use openflow::driver::{Error, QueuedBundle, SwitchHandle};

use openflow::msg::{Body, CtFlush, CtTuple};

use crate::agent::{SyncReport, read_state};
use crate::apply::message;
use crate::config::Config;
use crate::desired::{NodeBindings, ServicePortState};
use crate::model::{Model, Node};
use crate::shards::{Change, Shards};

/// How many times a stale-conntrack flush is sent. A flush that names only part of a tuple
/// makes `ovs-vswitchd` walk its connection table while deleting from it, and one walk can
/// miss matching entries (measured on OVS 3.1). OpenFlow gives no way to read the table back,
/// so the flush is repeated, each round confirmed by a barrier.
pub const FLUSH_ROUNDS: usize = 3;

/// The most messages in one bundle.
pub const BUNDLE_MAX: usize = 5_000;

/// How many bundles may wait at the switch, sent and unconfirmed, while the next one fills.
/// With one, the engine sat idle while the switch committed it (`ovs-vswitchd` reads no
/// more of the connection meanwhile), then the switch while the engine rendered; two keep
/// both busy: a 30,000-service load's sync went from 1.27 to 1.02 s on average, side by side
/// (`docs/performance.md`). The engine renders a bundle of [`BUNDLE_MAX`] in about the time
/// the switch applies one, but not evenly (11–20 ms, and now and then twice that), so with
/// two the switch still waited for it at times; with three the engine gets ahead when it
/// can and the switch has one more bundle to apply through a slow render. Their messages
/// wait in the connection's output, which takes another bundle only while less than
/// [`openflow::driver::DriverConfig::high_water`] bytes wait unwritten.
pub const PIPELINE_DEPTH: usize = 3;

/// How many changed services an update renders before sending what they changed (in
/// bundles of up to [`BUNDLE_MAX`] messages, so several parts may go as one bundle).
pub const RENDER_PART: usize = 256;

/// The most messages in one bundle of a full sync (after a connect), which is several
/// bundles anyway: each switch's task holds one bundle's messages at a time, and a central
/// controller syncs all its switches at once after it starts, so smaller bundles keep its
/// peak memory down. `ovs-vswitchd` installs bundles of 1,000 as fast as bigger ones (see
/// `docs/performance.md`, the session bench).
pub const FULL_SYNC_BUNDLE: usize = 1_000;

/// The most group buckets in one bundle (past its first message). A group's message holds its
/// buckets as actions, about 330 bytes each, so 5,000 group messages of ten buckets were
/// 17 MiB held at once while a 30,000-service load sent its groups (issue 19); 20,000 buckets
/// are about 6.5 MiB. A change whose groups hold fewer buckets in all (one service with up to
/// 20,000 endpoints, say, or a thousand services of ten) stays one bundle.
pub const BUNDLE_BUCKETS_MAX: usize = 20_000;

/// A bundle being filled: at most `max` messages, holding at most [`BUNDLE_BUCKETS_MAX`]
/// group buckets unless its first message alone holds more.
struct Filling {
    max: usize,
    bodies: Vec<Body>,
    buckets: usize,
}

impl Filling {
    fn new(max: usize) -> Self {
        Filling {
            max,
            bodies: Vec::new(),
            buckets: 0,
        }
    }

    /// Adds `body`; returns the bundle filled so far if `body` did not fit in it (`body`
    /// then starts the next one).
    fn push(&mut self, body: Body) -> Option<Vec<Body>> {
        let more = body_buckets(&body);
        let full = self.bodies.len() == self.max
            || (!self.bodies.is_empty() && self.buckets + more > BUNDLE_BUCKETS_MAX);
        let done = full.then(|| {
            self.buckets = 0;
            // The next bundle of a long plan is as full as this one: its room is taken at
            // once, not grown by doubling from nothing (each growth copies the 192-byte
            // bodies so far and touches fresh pages; a full load has 24 such bundles).
            let room = self.bodies.len();
            std::mem::replace(&mut self.bodies, Vec::with_capacity(room))
        });
        self.buckets += more;
        self.bodies.push(body);
        done
    }

    /// The bundle filled so far, if any.
    fn rest(&mut self) -> Option<Vec<Body>> {
        self.buckets = 0;
        Some(std::mem::take(&mut self.bodies)).filter(|b| !b.is_empty())
    }
}

/// The buckets a message carries.
fn body_buckets(body: &Body) -> usize {
    match body {
        Body::GroupMod(g) => g.buckets.len(),
        _ => 0,
    }
}

/// What a sync does once it has sent everything ([`Engine::sync_then`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Waits for the switch to confirm every bundle, then flushes the stale conntrack.
    Confirm,
    /// Leaves the last bundles to the next sync, which comes soon.
    Continue,
}

/// Bundles an engine has sent its switch since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BundleCounts {
    /// Committed: the switch applied them.
    pub committed: u64,
    /// Refused or lost: the switch applied none of their messages.
    pub failed: u64,
}

/// Sends a plan's bundles to a switch, up to [`PIPELINE_DEPTH`] sent and unconfirmed while
/// the next is made: the switch applies bundles N to N + 2 while svcflow renders and
/// encodes bundle N + 3, so a long plan costs about the longer of the two, not their sum.
/// Bundles are applied in the order they are sent. When one is refused the plan stops there
/// (the engine reads the switch again on its next sync); the bundles sent behind it may still
/// be applied, which that read finds.
struct Pipeline<'a> {
    switch: &'a SwitchHandle,
    counts: &'a mut BundleCounts,
    /// Sent, oldest first, not yet confirmed.
    in_flight: VecDeque<QueuedBundle>,
    filling: Filling,
}

impl<'a> Pipeline<'a> {
    /// A pipeline of bundles of at most `max` messages, behind `in_flight` (bundles an
    /// earlier sync left unconfirmed).
    fn new(
        switch: &'a SwitchHandle,
        counts: &'a mut BundleCounts,
        max: usize,
        in_flight: VecDeque<QueuedBundle>,
    ) -> Self {
        Pipeline {
            switch,
            counts,
            in_flight,
            filling: Filling::new(max),
        }
    }

    /// Adds `body` to the bundle being filled, sending that bundle first if `body` does not
    /// fit in it.
    async fn push(&mut self, body: Body) -> Result<(), Error> {
        match self.filling.push(body) {
            Some(full) => self.send(full).await,
            None => Ok(()),
        }
    }

    /// Queues `chunk` as the next bundle, then waits for the one before it.
    async fn send(&mut self, chunk: Vec<Body>) -> Result<(), Error> {
        let queued = match self.switch.queue_bundle(chunk).await {
            Ok(q) => q,
            Err(e) => {
                self.counts.failed += 1;
                return Err(e);
            }
        };
        self.in_flight.push_back(queued);
        // Queueing woke the connection's task into this worker's next slot, which the
        // runtime's other worker cannot take: without a yield the bundle would reach the
        // switch only at this task's next await, after the next bundle's services rendered,
        // and the switch would sit idle meanwhile. The bundle being filled is empty here, so
        // the other engines that run meanwhile see no half-filled bundle held.
        tokio::task::yield_now().await;
        while self.in_flight.len() > PIPELINE_DEPTH {
            let Some(oldest) = self.in_flight.pop_front() else {
                break;
            };
            self.wait(oldest).await?;
        }
        Ok(())
    }

    /// Sends the bundle being filled, then waits for every bundle sent.
    async fn finish(mut self) -> Result<(), Error> {
        if let Some(rest) = self.filling.rest() {
            self.send(rest).await?;
        }
        while let Some(bundle) = self.in_flight.pop_front() {
            self.wait(bundle).await?;
        }
        Ok(())
    }

    /// Sends the bundle being filled and returns the bundles not yet confirmed.
    async fn leave(mut self) -> Result<VecDeque<QueuedBundle>, Error> {
        if let Some(rest) = self.filling.rest() {
            self.send(rest).await?;
        }
        Ok(self.in_flight)
    }

    /// Waits for every bundle sent, counting each answer, and ignores refusals: for a sync
    /// that reads the switch anyway.
    async fn drain(&mut self) {
        while let Some(bundle) = self.in_flight.pop_front() {
            let _ = self.wait(bundle).await;
        }
    }

    /// Waits for `bundle`'s answer and counts it.
    async fn wait(&mut self, bundle: QueuedBundle) -> Result<(), Error> {
        let result = bundle.applied().await;
        match &result {
            Ok(()) => self.counts.committed += 1,
            Err(_) => self.counts.failed += 1,
        }
        result
    }
}

/// One node's desired state and its switch.
pub struct Engine {
    switch: SwitchHandle,
    shards: Shards,
    /// Whether the switch holds exactly what `shards` held before the next update.
    in_sync: bool,
    bundles: BundleCounts,
    /// Bundles the last sync sent and left unconfirmed ([`Then::Continue`]); the
    /// next sync waits for them behind its own.
    unconfirmed: VecDeque<QueuedBundle>,
}

impl Engine {
    /// An engine for a freshly connected switch; its first sync reads the switch.
    pub fn new(switch: SwitchHandle) -> Self {
        Self {
            switch,
            shards: Shards::default(),
            in_sync: false,
            bundles: BundleCounts::default(),
            unconfirmed: VecDeque::new(),
        }
    }

    /// An engine whose service renders are shared with the other engines made with
    /// `renders` (one per switch of a central controller).
    pub fn sharing(switch: SwitchHandle, renders: &crate::shards::Renders) -> Self {
        Self {
            switch,
            shards: Shards::sharing(renders),
            in_sync: false,
            bundles: BundleCounts::default(),
            unconfirmed: VecDeque::new(),
        }
    }

    /// The switch.
    pub fn switch(&self) -> &SwitchHandle {
        &self.switch
    }

    /// The bundles sent so far.
    pub fn bundles(&self) -> BundleCounts {
        self.bundles
    }

    /// The desired state, by shard.
    pub fn shards(&self) -> &Shards {
        &self.shards
    }

    /// Whether the switch holds exactly the desired state (its last sync succeeded).
    pub fn in_sync(&self) -> bool {
        self.in_sync
    }

    /// The desired state, when the engine is done (its switch left).
    pub fn into_shards(self) -> Shards {
        self.shards
    }

    /// Each service port's group and backends.
    pub fn services(&self) -> std::collections::BTreeMap<String, ServicePortState> {
        self.shards.services()
    }

    /// Brings the switch to the model's state for `node`. On error the engine reads the
    /// switch again on the next sync.
    pub async fn sync(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
    ) -> Result<SyncReport, Error> {
        self.sync_then(node, model, config, bindings, Then::Confirm)
            .await
    }

    /// [`Self::sync`], and then what `then` says: with [`Then::Continue`] (a model that a
    /// next one soon continues, part of a long change) everything is sent but the last
    /// bundles are left unconfirmed and the stale conntrack unflushed, so that the switch
    /// applies them while the next sync renders; the next sync waits for them behind its own
    /// bundles, and fails (so the engine reads the switch again) if the switch refused one.
    pub async fn sync_then(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
        then: Then,
    ) -> Result<SyncReport, Error> {
        let was_in_sync = std::mem::replace(&mut self.in_sync, false);
        let unconfirmed = std::mem::take(&mut self.unconfirmed);
        let report = if was_in_sync {
            let mut report = SyncReport::default();
            // The services render a part at a time and their steps are sent as bundles fill:
            // the switch applies one bundle while the next services render, and a change to
            // every service never holds a copy of the whole state. A change that fits one
            // bundle is still one bundle.
            let (mut update, first) = self.shards.begin_update(node, model, config, bindings);
            let mut pipeline =
                Pipeline::new(&self.switch, &mut self.bundles, BUNDLE_MAX, unconfirmed);
            let mut part = Some(first);
            while let Some(pending) = part.take() {
                for step in self.shards.steps(&pending) {
                    report.count(&step);
                    pipeline.push(message(&step)).await?;
                }
                drop(pending);
                // No await between parts but the sends: a bundle half filled is never held
                // while other switches' engines run (ten of them holding one each took a
                // central controller's peak from 144 to 200 MiB).
                part = self.shards.continue_update(&mut update, RENDER_PART);
            }
            if then == Then::Continue {
                self.unconfirmed = pipeline.leave().await?;
                self.in_sync = true;
                return Ok(report);
            }
            pipeline.finish().await?;
            report.conntrack_flushed = self.flush(config.service_zone).await?;
            report
        } else {
            // What an earlier sync left unconfirmed is applied or refused before the switch
            // is read.
            Pipeline::new(&self.switch, &mut self.bundles, 0, unconfirmed)
                .drain()
                .await;
            // Before any flow that names it. A switch restart (which loses meters) always
            // comes back through here, as a reconnect.
            let refuse = crate::meter::refuse_meter(config);
            let meter = crate::meter::ensure(&self.switch, &refuse).await?;
            self.shards.refresh(node, model, config, bindings);
            // Stale conntrack that an earlier, failed sync meant to flush stays pending and
            // is flushed below.
            let mut actual = read_state(&self.switch).await?;
            if meter == crate::meter::MeterChange::Added {
                // Flows installed while the meter was missing are unmetered: write them
                // again.
                crate::meter::outdate_flows_naming(&mut actual, refuse.meter_id);
            }
            let mut report = SyncReport::default();
            let mut pipeline = Pipeline::new(
                &self.switch,
                &mut self.bundles,
                FULL_SYNC_BUNDLE,
                VecDeque::new(),
            );
            for (change, body) in self.shards.full_plan(&actual) {
                match change {
                    Change::AddFlow => report.flows_added += 1,
                    Change::ModifyFlow => report.flows_modified += 1,
                    Change::DeleteFlow => report.flows_deleted += 1,
                    Change::Group => report.groups_changed += 1,
                }
                pipeline.push(body).await?;
            }
            pipeline.finish().await?;
            report.conntrack_flushed = self.flush(config.service_zone).await?;
            report
        };
        self.in_sync = true;
        Ok(report)
    }

    /// Flushes the conntrack entries of endpoints that left UDP and SCTP services, in the
    /// service zone: those whose original destination is the service address and port and
    /// whose reply comes from the endpoint.
    async fn flush(&mut self, zone: u16) -> Result<usize, Error> {
        let stale = self.shards.take_stale();
        if stale.is_empty() {
            return Ok(0);
        }
        let result = async {
            for _ in 0..FLUSH_ROUNDS {
                let bodies = stale.iter().map(|s| {
                    // Port 0 (a service forwarding every port): no port in the tuple, which
                    // OVS then does not compare.
                    let mut orig = CtTuple::default().with_dst(s.address);
                    let mut reply = CtTuple::default().with_src(s.endpoint);
                    if s.port != crate::desired::ANY_PORT {
                        orig = orig.with_dst_port(s.port);
                    }
                    if s.endpoint_port != crate::desired::ANY_PORT {
                        reply = reply.with_src_port(s.endpoint_port);
                    }
                    Body::CtFlush(
                        CtFlush::zone(zone)
                            .with_ip_proto(s.ip_proto)
                            .with_orig(orig)
                            .with_reply(reply),
                    )
                });
                self.switch.send_batch(bodies.collect()).await?;
                self.switch.barrier().await?;
            }
            Ok(stale.len())
        }
        .await;
        if result.is_err() {
            // Try again with the next sync.
            self.shards.restore_stale(stale);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openflow::msg::{Bucket, FlowMod, GroupMod, GroupModCommand, GroupType};

    fn group(buckets: usize) -> Body {
        Body::GroupMod(GroupMod {
            command: GroupModCommand::Add,
            group_type: GroupType::Select,
            group_id: 1,
            buckets: (0..buckets).map(|_| Bucket::new(1, Vec::new())).collect(),
        })
    }

    fn sizes(bodies: Vec<Body>, max: usize) -> Vec<(usize, usize)> {
        let mut filling = Filling::new(max);
        let mut bundles: Vec<Vec<Body>> =
            bodies.into_iter().filter_map(|b| filling.push(b)).collect();
        bundles.extend(filling.rest());
        bundles
            .iter()
            .map(|b| (b.len(), b.iter().map(body_buckets).sum()))
            .collect()
    }

    #[test]
    fn bundles_are_bounded_by_messages_and_by_buckets() {
        let flow = || Body::FlowMod(FlowMod::default());
        // Messages alone.
        let flows: Vec<Body> = (0..12).map(|_| flow()).collect();
        assert_eq!(sizes(flows, 5), vec![(5, 0), (5, 0), (2, 0)]);
        // 3,000 groups of ten buckets: 2,000 per bundle by buckets, though 5,000 messages
        // would be allowed.
        let groups: Vec<Body> = (0..3_000).map(|_| group(10)).collect();
        assert_eq!(
            sizes(groups, BUNDLE_MAX),
            vec![(2_000, 20_000), (1_000, 10_000)]
        );
        // A group bigger than the bound goes alone; flows follow the groups.
        let mixed = vec![
            group(5),
            group(BUNDLE_BUCKETS_MAX + 1),
            group(5),
            flow(),
            flow(),
        ];
        assert_eq!(
            sizes(mixed, BUNDLE_MAX),
            vec![(1, 5), (1, BUNDLE_BUCKETS_MAX + 1), (3, 5)]
        );
    }

    #[test]
    fn a_filled_bundle_leaves_its_room_to_the_next() {
        let mut filling = Filling::new(100);
        let first: Vec<Vec<Body>> = (0..101)
            .filter_map(|_| filling.push(Body::FlowMod(FlowMod::default())))
            .collect();
        assert_eq!(first.len(), 1);
        assert_eq!(filling.bodies.len(), 1);
        assert!(
            filling.bodies.capacity() >= 100,
            "room for a bundle as full as the last: {}",
            filling.bodies.capacity()
        );
        // A change that fits one bundle takes no more room than it needs to grow.
        let mut small = Filling::new(100);
        assert!(small.push(Body::FlowMod(FlowMod::default())).is_none());
        assert!(small.bodies.capacity() < 100);
    }
}
