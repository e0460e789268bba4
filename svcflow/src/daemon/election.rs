//! One master per switch among several replicas, elected with RFC 7047 locks on the shared
//! northbound database (`--store ovsdb:`), as `ovn-northd` runs active/standby.
//!
//! Each node has a lock, `svcflow_node_<datapath id>`, and every replica queues for every
//! node's lock: when the holder dies, its OVSDB session ends and `ovsdb-server` hands the lock
//! to the next replica in the queue at once. The holder becomes the switch's master
//! ([`super::role`]): it first bumps the node's epoch in the `Master` table, in a transaction
//! that asserts the lock (so only the holder can), and uses that epoch as the OpenFlow
//! generation id. The switch refuses an older one, which is the fence: a replica that lost
//! its lock, frozen or cut off, cannot take the switch back.
//!
//! Nodes spread over the replicas by rendezvous hashing: each node prefers, among the
//! replicas its switch is connected to (the bridge's controllers with `is_connected`), the
//! one whose target scores highest with the node's name. A preferred replica that does not
//! hold the lock steals it once its own connection to the switch has lasted the hold-down
//! time, and no sooner than a hold-down after the node last moved, so a returning replica
//! takes its nodes back without flapping. A holder whose own connection to the switch has
//! been gone for [`SWITCH_GRACE`] while another replica reaches the switch gives the lock up.
//!
//! Pure: [`Election`] decides from what it is told and the time passed in. I/O: [`run`],
//! which holds the OVSDB connection and tells the dispatcher which nodes it masters.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use netvirt::node_setup::datapath_id;
use ovsdb::datum::{Datum, Row};
use ovsdb::monitor::MonitorRequest;
use ovsdb::ops::{Condition, ErrorKind, Operation, Until};
use ovsdb::{Client, ClientConfig, ClientEvent, ReplicaHandle};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Change, Shutdown, stopped};

/// The shared database, and its table of each node's epoch and master.
const DB: &str = "Svcflow";
const MASTER: &str = "Master";

/// How long a master's own connection to a switch may be gone before it hands the node to a
/// replica the switch is connected to.
pub(crate) const SWITCH_GRACE: Duration = Duration::from_secs(2);

/// Every node's master as the election knows it, for the operational view: the OVSDB
/// `Master` table's rows (kept up to date by the client), or the holders of the Leases.
#[derive(Clone, Default)]
pub(crate) struct Masters(std::sync::Arc<std::sync::RwLock<MasterSource>>);

#[derive(Default)]
enum MasterSource {
    #[default]
    Unknown,
    Rows(ReplicaHandle),
    Leases(BTreeMap<String, (String, String)>),
}

impl Masters {
    /// Whether the `Master` rows are monitored yet.
    fn has_rows(&self) -> bool {
        self.0
            .read()
            .map(|m| matches!(*m, MasterSource::Rows(_)))
            .unwrap_or(false)
    }

    fn set(&self, source: MasterSource) {
        if let Ok(mut m) = self.0.write() {
            *m = source;
        }
    }

    /// Each node's holder and its REST address, from the Leases.
    pub(crate) fn set_leases(&self, holders: BTreeMap<String, (String, String)>) {
        self.set(MasterSource::Leases(holders));
    }

    /// Each node's master: its OpenFlow target and REST address (empty until known).
    pub(crate) fn by_node(&self) -> BTreeMap<String, (String, String)> {
        let Ok(guard) = self.0.read() else {
            return BTreeMap::new();
        };
        let handle = match &*guard {
            MasterSource::Unknown => return BTreeMap::new(),
            MasterSource::Leases(holders) => return holders.clone(),
            MasterSource::Rows(handle) => handle,
        };
        let replica = handle.read();
        replica
            .table(MASTER)
            .filter_map(|(_, row)| {
                let text = |c: &str| row.get(c).and_then(Datum::as_str).map(str::to_string);
                Some((text("node")?, (text("owner")?, text("rest")?)))
            })
            .collect()
    }
}

/// The pause after a claim failed for a reason other than the lock.
const CLAIM_RETRY: Duration = Duration::from_secs(1);

/// The lock of `node`: an OVSDB id (letters, digits, `_`), so from the datapath id.
pub(crate) fn lock_name(node: &str) -> String {
    format!("svcflow_node_{:016x}", datapath_id(node))
}

/// Rendezvous (highest random weight) score of `replica` for `node`: FNV-1a over both, then
/// a 64-bit mix, stable across processes and versions.
fn score(replica: &str, node: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in replica.bytes().chain([0]).chain(node.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser: FNV alone spreads similar names poorly.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The replica among `live` that `node` prefers.
pub(crate) fn preferred<'a>(live: &'a BTreeSet<String>, node: &str) -> Option<&'a str> {
    live.iter()
        .max_by_key(|r| (score(r, node), r.as_str()))
        .map(String::as_str)
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Order {
    /// Queue for the node's lock.
    Lock(String),
    /// Take the node's lock from its holder.
    Steal(String),
    /// Give the node's lock up (a [`Order::Lock`] follows to queue again).
    Unlock(String),
    /// Bump the node's epoch to at least `floor`, asserting the lock.
    Claim { node: String, floor: u64 },
}

/// One node's seat.
#[derive(Debug, Default)]
struct Seat {
    /// Queued for (or holding) the lock.
    requested: bool,
    /// Holding the lock.
    owner: bool,
    /// The epoch claimed while holding it.
    epoch: Option<u64>,
    /// The least epoch to claim (past what the switch has accepted).
    floor: u64,
    /// Since when our connection to the node's switch is up.
    switch_since: Option<Instant>,
    /// Since when it is down, if it was up once.
    switch_lost: Option<Instant>,
    /// The replicas the switch says it is connected to.
    live: BTreeSet<String>,
    /// When this replica last took or gave up the node.
    last_move: Option<Instant>,
    /// No claim or lock request before then (the last one failed).
    retry_at: Option<Instant>,
    /// A lock request failed: leave the server's queue before queueing again.
    rerequest: bool,
}

impl Seat {
    /// No longer the owner (a new claim starts from scratch).
    fn lose(&mut self) {
        self.owner = false;
        self.epoch = None;
    }

    /// Gives the lock up and queues again at the back: the orders that do it.
    fn release(&mut self, node: &str, now: Instant) -> Vec<Order> {
        self.lose();
        self.last_move = Some(now);
        vec![
            Order::Unlock(node.to_string()),
            Order::Lock(node.to_string()),
        ]
    }

    /// Whether the node last moved a hold-down ago or more (or never).
    fn settled(&self, now: Instant, hold_down: Duration) -> bool {
        self.last_move
            .is_none_or(|t| now.saturating_duration_since(t) >= hold_down)
    }
}

/// The election's decisions for this replica.
#[derive(Debug)]
pub(crate) struct Election {
    me: String,
    pub(crate) hold_down: Duration,
    seats: BTreeMap<String, Seat>,
}

impl Election {
    /// This replica is `me` (its OpenFlow target as switches list it).
    pub(crate) fn new(me: String, hold_down: Duration) -> Self {
        Election {
            me,
            hold_down,
            seats: BTreeMap::new(),
        }
    }

    fn seat_at(&mut self, node: &str, now: Instant) -> &mut Seat {
        self.seats.entry(node.to_string()).or_insert_with(|| Seat {
            // No connection to the switch yet counts as lost from the start.
            switch_lost: Some(now),
            ..Seat::default()
        })
    }

    /// The replicas `node`'s switch is connected to.
    pub(crate) fn controllers(&mut self, node: &str, live: BTreeSet<String>, now: Instant) {
        self.seat_at(node, now).live = live;
    }

    /// Our own connection to `node`'s switch came up or went.
    pub(crate) fn switch(&mut self, node: &str, up: bool, now: Instant) {
        let seat = self.seat_at(node, now);
        if up {
            seat.switch_since.get_or_insert(now);
            seat.switch_lost = None;
        } else if seat.switch_since.take().is_some() || seat.switch_lost.is_none() {
            seat.switch_lost = Some(now);
        }
    }

    /// The node left: give its lock up.
    pub(crate) fn gone(&mut self, node: &str) -> Vec<Order> {
        match self.seats.remove(node) {
            Some(seat) if seat.requested => vec![Order::Unlock(node.to_string())],
            _ => vec![],
        }
    }

    /// The lock is ours.
    pub(crate) fn locked(&mut self, node: &str, now: Instant) {
        if let Some(seat) = self.seats.get_mut(node) {
            seat.requested = true;
            if !seat.owner {
                seat.owner = true;
                seat.epoch = None;
                seat.last_move = Some(now);
            }
        }
    }

    /// The lock was stolen, or a claim found we no longer hold it. Either way this replica
    /// stays queued for it (ovsdb-server keeps a robbed owner in the queue).
    pub(crate) fn lost(&mut self, node: &str) {
        if let Some(seat) = self.seats.get_mut(node) {
            seat.lose();
        }
    }

    /// The database connection dropped: no lock is ours until the server says so again (the
    /// client re-queues for the locks it had requested).
    pub(crate) fn disconnected(&mut self) {
        for seat in self.seats.values_mut() {
            seat.lose();
        }
    }

    /// A claim committed `epoch`.
    pub(crate) fn claimed(&mut self, node: &str, epoch: u64) {
        if let Some(seat) = self.seats.get_mut(node)
            && seat.owner
        {
            seat.epoch = Some(epoch);
            seat.floor = seat.floor.max(epoch);
        }
    }

    /// A lock or steal request failed (the connection was down): request it again a little
    /// later, leaving whatever queue the server may still hold us in first.
    pub(crate) fn lock_failed(&mut self, node: &str, now: Instant) {
        if let Some(seat) = self.seats.get_mut(node) {
            seat.requested = false;
            seat.rerequest = true;
            seat.retry_at = Some(now + CLAIM_RETRY);
        }
    }

    /// A claim failed for a reason other than the lock: try again a little later.
    pub(crate) fn claim_failed(&mut self, node: &str, now: Instant) {
        if let Some(seat) = self.seats.get_mut(node) {
            seat.retry_at = Some(now + CLAIM_RETRY);
        }
    }

    /// The switch has accepted generation id `generation` from someone: claim past it.
    pub(crate) fn stale(&mut self, node: &str, generation: Option<u64>) {
        if let Some(seat) = self.seats.get_mut(node) {
            let past = seat.epoch.unwrap_or(0).max(generation.unwrap_or(0));
            seat.floor = seat.floor.max(past.saturating_add(1));
            seat.epoch = None;
        }
    }

    /// The switch made another controller its master while we held the lock (a leader change
    /// of the database, or a controller that is not svcflow): give the lock up rather than
    /// fight over the switch.
    pub(crate) fn deposed(&mut self, node: &str, now: Instant) -> Vec<Order> {
        match self.seats.get_mut(node) {
            Some(seat) if seat.owner => seat.release(node, now),
            _ => vec![],
        }
    }

    /// Takes in what the dispatcher says; returns the orders it calls for at once.
    pub(crate) fn follow(&mut self, input: Input, now: Instant) -> Vec<Order> {
        match input {
            Input::Controllers(node, live) => self.controllers(&node, live, now),
            Input::Switch(node, up) => self.switch(&node, up, now),
            Input::Gone(node) => return self.gone(&node),
            Input::Stale(node, generation) => self.stale(&node, generation),
            Input::Deposed(node) => {
                tracing::warn!("node {node}: its switch has another master; giving the node up");
                return self.deposed(&node, now);
            }
        }
        Vec::new()
    }

    /// What to do now.
    pub(crate) fn poll(&mut self, now: Instant) -> Vec<Order> {
        let mut out = Vec::new();
        let (me, hold_down) = (self.me.as_str(), self.hold_down);
        for (node, seat) in &mut self.seats {
            let settled = seat.settled(now, hold_down);
            if !seat.requested {
                if seat.retry_at.is_some_and(|t| t > now) {
                    continue;
                }
                seat.requested = true;
                seat.retry_at = None;
                if std::mem::take(&mut seat.rerequest) {
                    out.push(Order::Unlock(node.clone()));
                }
                out.push(Order::Lock(node.clone()));
            } else if seat.owner {
                let cut_off = seat
                    .switch_lost
                    .is_some_and(|t| now.saturating_duration_since(t) >= SWITCH_GRACE);
                let others = seat.live.iter().any(|r| r != me);
                if cut_off && others && settled {
                    out.extend(seat.release(node, now));
                } else if seat.epoch.is_none() && seat.retry_at.is_none_or(|t| t <= now) {
                    seat.retry_at = None;
                    out.push(Order::Claim {
                        node: node.clone(),
                        floor: seat.floor,
                    });
                }
            } else if preferred(&seat.live, node) == Some(me)
                && settled
                && seat
                    .switch_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= hold_down)
            {
                seat.last_move = Some(now);
                out.push(Order::Steal(node.clone()));
            }
        }
        out
    }

    /// The nodes this replica masters, with the epoch to claim their switches with.
    pub(crate) fn masters(&self) -> BTreeMap<String, u64> {
        self.seats
            .iter()
            .filter(|(_, s)| s.owner)
            .filter_map(|(n, s)| s.epoch.map(|e| (n.clone(), e)))
            .collect()
    }

    /// The earliest time [`Election::poll`] may decide something new without being told
    /// anything (a hold-down or grace period ending).
    pub(crate) fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| {
            if t > now {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        for seat in self.seats.values() {
            if let Some(t) = seat.switch_since {
                at(t + self.hold_down);
            }
            if let Some(t) = seat.switch_lost {
                at(t + SWITCH_GRACE);
            }
            if let Some(t) = seat.last_move {
                at(t + self.hold_down);
            }
            if let Some(t) = seat.retry_at {
                at(t);
            }
        }
        next
    }
}

/// What the dispatcher tells the election.
#[derive(Debug)]
pub(crate) enum Input {
    /// The replicas a node's switch is connected to.
    Controllers(String, BTreeSet<String>),
    /// Our connection to the node's switch came up (true) or went.
    Switch(String, bool),
    /// The node left the configuration.
    Gone(String),
    /// The switch refused our epoch: it has accepted this generation id.
    Stale(String, Option<u64>),
    /// The switch has another master.
    Deposed(String),
}

/// The node's epoch transaction: read it, under the lock.
fn read_ops(lock: &str, node: &str) -> Vec<Operation> {
    vec![
        Operation::Assert {
            lock: lock.to_string(),
        },
        Operation::select(MASTER, vec![Condition::eq("node", Datum::string(node))]),
    ]
}

/// This replica, as the `Master` rows name it: its OpenFlow target, and where it serves REST.
#[derive(Debug, Clone)]
pub(crate) struct Me {
    pub target: String,
    pub rest: String,
}

/// The node's epoch transaction: write `epoch` (the row held `old`), under the lock.
fn write_ops(lock: &str, node: &str, me: &Me, old: Option<i64>, epoch: u64) -> Vec<Operation> {
    let mut row = Row::new();
    row.insert("epoch".into(), Datum::integer(epoch as i64));
    row.insert("owner".into(), Datum::string(&me.target));
    row.insert("rest".into(), Datum::string(&me.rest));
    let by_node = || vec![Condition::eq("node", Datum::string(node))];
    let mut ops = vec![Operation::Assert {
        lock: lock.to_string(),
    }];
    match old {
        Some(old) => {
            let mut was = Row::new();
            was.insert("epoch".into(), Datum::integer(old));
            ops.push(Operation::wait(
                MASTER,
                by_node(),
                &["epoch"],
                Until::Equal,
                vec![was],
            ));
            ops.push(Operation::update(MASTER, by_node(), row));
        }
        None => {
            row.insert("node".into(), Datum::string(node));
            ops.push(Operation::insert(MASTER, row));
        }
    }
    ops
}

/// Why a claim did not commit.
enum ClaimFailed {
    /// We do not hold the lock (anymore).
    NotOwner,
    Other(String),
}

/// Bumps the node's epoch past the stored one and `floor`, asserting the lock.
async fn claim(client: &Client, me: &Me, node: &str, floor: u64) -> Result<u64, ClaimFailed> {
    let lock = lock_name(node);
    let fail = |e: ovsdb::Error| match e.transact().and_then(|t| t.kind()) {
        Some(ErrorKind::NotOwner) => ClaimFailed::NotOwner,
        _ => ClaimFailed::Other(e.to_string()),
    };
    let read = client
        .transact(DB, read_ops(&lock, node))
        .await
        .map_err(fail)?;
    let old = read
        .get(1)
        .and_then(|r| r.rows().first())
        .and_then(|row| row.get("epoch"))
        .and_then(Datum::as_integer);
    let stored = old.and_then(|e| u64::try_from(e).ok()).unwrap_or(0);
    let epoch = stored
        .saturating_add(1)
        .max(floor)
        .clamp(1, i64::MAX as u64);
    client
        .transact(DB, write_ops(&lock, node, me, old, epoch))
        .await
        .map_err(fail)?;
    Ok(epoch)
}

/// Tells the dispatcher which nodes this replica now masters, and with which epochs, where
/// that changed since `announced`.
pub(crate) fn announce(
    election: &Election,
    announced: &mut BTreeMap<String, u64>,
    changes: &mpsc::UnboundedSender<Change>,
) {
    let mastered = election.masters();
    for (node, epoch) in &mastered {
        if announced.get(node) != Some(epoch) {
            tracing::info!("node {node}: this replica is its master (epoch {epoch})");
            let _ = changes.send(Change::Master(node.clone(), Some(*epoch)));
        }
    }
    for node in announced.keys() {
        if !mastered.contains_key(node) {
            tracing::info!("node {node}: this replica is no longer its master");
            let _ = changes.send(Change::Master(node.clone(), None));
        }
    }
    *announced = mastered;
}

/// Runs the election until shutdown: queues for the nodes' locks on the shared database,
/// follows what `inputs` says, and tells the dispatcher through `changes` which nodes this
/// replica masters (`Change::Master`).
// The election's wiring: the database, its state, who this replica is, and its channels.
#[allow(clippy::too_many_arguments)]
/// The shared store's members, and how to reach them (TLS for `ssl:` members).
pub(crate) struct StoreClient {
    pub(crate) remotes: Vec<String>,
    pub(crate) config: ClientConfig,
}

pub(crate) async fn run(
    store: StoreClient,
    election: Election,
    me: Me,
    masters: Masters,
    mut inputs: mpsc::UnboundedReceiver<Input>,
    changes: mpsc::UnboundedSender<Change>,
    shutdown: Shutdown,
) {
    let StoreClient { remotes, config } = store;
    let (client, events) = match Client::connect_cluster(&remotes, DB, config) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("election: cannot use the northbound database: {e}");
            return;
        }
    };
    tracing::info!(
        "election: this replica is {} (REST {}); hold-down {:?}",
        me.target,
        me.rest,
        election.hold_down
    );
    let mut d = Driver {
        client: &client,
        me: &me,
        masters: &masters,
        election,
        locks: BTreeMap::new(),
        events,
        first_member: true,
        closed: false,
    };
    let mut announced: BTreeMap<String, u64> = BTreeMap::new();
    while !d.closed {
        // Until nothing is left to do: a lock granted at once is claimed at once.
        let mut now = Instant::now();
        loop {
            let orders = d.election.poll(now);
            if orders.is_empty() {
                break;
            }
            for order in orders {
                d.execute(order).await;
            }
            now = Instant::now();
        }
        announce(&d.election, &mut announced, &changes);
        let wake = d
            .election
            .next_deadline(now)
            .unwrap_or(now + Duration::from_secs(3600));
        tokio::select! {
            _ = stopped(shutdown.clone()) => break,
            _ = tokio::time::sleep_until(wake) => {}
            input = inputs.recv() => match input {
                None => break,
                Some(input) => {
                    for order in d.election.follow(input, Instant::now()) {
                        d.execute(order).await;
                    }
                }
            },
            event = d.events.recv() => match event {
                None => break,
                Some(event) => d.on_event(event).await,
            },
        }
    }
    client.shutdown();
}

/// The election's driver: the pure [`Election`], and the database client it acts through.
struct Driver<'a> {
    client: &'a Client,
    me: &'a Me,
    masters: &'a Masters,
    election: Election,
    /// Each lock asked for, by its name: the node it is for.
    locks: BTreeMap<String, String>,
    events: ovsdb::client::Events,
    /// Whether the next `Member` event is the first session's.
    first_member: bool,
    /// The client's event channel closed.
    closed: bool,
}

impl Driver<'_> {
    async fn on_event(&mut self, event: ClientEvent) {
        let election = &mut self.election;
        match event {
            ClientEvent::Locked(lock) => {
                if let Some(node) = self.locks.get(&lock) {
                    election.locked(node, Instant::now());
                }
            }
            ClientEvent::Stolen(lock) => {
                if let Some(node) = self.locks.get(&lock) {
                    tracing::info!("node {node}: another replica took its lock");
                    election.lost(node);
                }
            }
            ClientEvent::Disconnected(e) => {
                tracing::warn!("election: northbound database connection lost: {e}");
                election.disconnected();
            }
            ClientEvent::Member(member) => {
                tracing::info!("election: using {member}");
                // A later member is a new session: the locks of the old one are gone. The
                // first one follows no session, so it takes nothing away. (Events queued
                // before a lock call's answer are read before the answer is applied, see
                // `settle`, so a lock granted by a new session is never taken away by that
                // session's own Member event.)
                if !std::mem::replace(&mut self.first_member, false) {
                    election.disconnected();
                }
            }
            // Every node's master, for the operational view (kept by the client).
            ClientEvent::Connected if !self.masters.has_rows() => {
                let requests = BTreeMap::from([(
                    MASTER.to_string(),
                    MonitorRequest::columns(&["node", "owner", "rest"]),
                )]);
                match self.client.replica(DB, "svcflow-masters", requests).await {
                    Ok(handle) => self.masters.set(MasterSource::Rows(handle)),
                    Err(e) => tracing::warn!("election: monitoring {MASTER} failed: {e}"),
                }
            }
            _ => {}
        }
    }

    /// Reads the events the client queued while a call was under way, so that what happened
    /// before its answer (a new session's `Member`, say) is applied before the answer is.
    async fn settle(&mut self) {
        loop {
            match self.events.try_recv() {
                Ok(event) => self.on_event(event).await,
                Err(mpsc::error::TryRecvError::Empty) => return,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// Carries out one order.
    async fn execute(&mut self, order: Order) {
        let client = self.client;
        match order {
            Order::Lock(node) => {
                let lock = lock_name(&node);
                self.locks.insert(lock.clone(), node.clone());
                let answer = client.lock(&lock).await;
                self.settle().await;
                match answer {
                    Ok(true) => self.election.locked(&node, Instant::now()),
                    Ok(false) => tracing::debug!("node {node}: queued for its lock"),
                    Err(e) => {
                        tracing::info!("node {node}: lock request: {e}; retrying");
                        self.election.lock_failed(&node, Instant::now());
                    }
                }
            }
            Order::Steal(node) => {
                let lock = lock_name(&node);
                self.locks.insert(lock.clone(), node.clone());
                tracing::info!(
                    "node {node}: this replica is its preferred master; taking its lock"
                );
                // A replica queued for a lock must leave the queue before it steals.
                let _ = client.unlock(&lock).await;
                let answer = client.steal(&lock).await;
                self.settle().await;
                match answer {
                    Ok(_) => self.election.locked(&node, Instant::now()),
                    Err(e) => {
                        tracing::warn!("node {node}: steal: {e}");
                        self.election.lock_failed(&node, Instant::now());
                    }
                }
            }
            Order::Unlock(node) => {
                tracing::info!("node {node}: giving its lock up");
                if let Err(e) = client.unlock(&lock_name(&node)).await {
                    tracing::debug!("node {node}: unlock: {e}");
                }
            }
            Order::Claim { node, floor } => match claim(client, self.me, &node, floor).await {
                Ok(epoch) => self.election.claimed(&node, epoch),
                Err(ClaimFailed::NotOwner) => {
                    tracing::info!("node {node}: the database says its lock is not ours");
                    self.election.lost(&node);
                }
                Err(ClaimFailed::Other(e)) => {
                    tracing::warn!("node {node}: cannot claim its epoch: {e}; retrying");
                    self.election.claim_failed(&node, Instant::now());
                }
            },
        }
    }
}

#[cfg(test)]
mod tests;
