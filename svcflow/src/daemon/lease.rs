//! One master per switch among several replicas, elected with Kubernetes Leases
//! (`--election lease`): no shared database, only the API server every replica already
//! watches. [`coe::k8s::lease`] says what a node's Lease holds.
//!
//! The same [`Election`] decides as with OVSDB locks (rendezvous hashing, hold-down, giving
//! up a switch this replica is cut off from); this module carries its orders out on Leases:
//!
//! - *queue for a lock* is: take the node's Lease as soon as it is free, that is, without a
//!   holder, or not renewed for its duration since this replica last saw it change (its
//!   own clock, never the holder's timestamps, so clock skew does not matter);
//! - *steal* is: take it now, whoever holds it; the holder sees the change on its watch
//!   (or at its next renewal) and stops;
//! - *unlock* is: write the Lease without a holder, and leave it to the others for one lease
//!   duration;
//! - *claim* is: the epoch is the Lease's `leaseTransitions`, bumped by every take, so a take
//!   is also the claim (bumped again only if the switch has accepted a later one).
//!
//! A holder renews every third of the duration, and drops a Lease it could not renew for two
//! thirds of it, before anyone else may take it. Whatever the timing, the switch is the fence:
//! a replica that took the Lease claims the switch with a greater generation id, and the
//! switch refuses the writes of the one that lost it.
//!
//! Pure: [`Book`] decides from what it is told and the time passed in. I/O: [`run`], which
//! watches and writes the Leases and tells the dispatcher which nodes this replica masters.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use coe::k8s::lease::{LeaseError, LeaseEvent, Leases, NodeLease};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::election::{Election, Input, Masters, Order};
use super::{Change, Shutdown, stopped};

/// The pause after a write failed for a reason other than a conflict.
const RETRY: Duration = Duration::from_secs(1);

/// What to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Take the node's Lease at `epoch`, replacing the version read (or creating it).
    Take {
        node: String,
        read: Option<NodeLease>,
        epoch: u64,
    },
    /// Renew the Lease this replica holds.
    Renew(NodeLease),
    /// Give it up.
    Release(NodeLease),
    /// Read it again (a write found another version).
    Read(String),
}

/// One node's Lease as this replica knows it.
#[derive(Debug, Default)]
struct Seat {
    /// The election wants it (queued).
    want: bool,
    /// The election wants it now, whoever holds it.
    steal: bool,
    /// The least epoch to take it with (past what the switch has accepted).
    floor: u64,
    /// Not before then (this replica gave it up, or a write failed).
    not_before: Option<Instant>,
    /// The last version seen, and when this replica saw it.
    seen: Option<(NodeLease, Instant)>,
    /// Held by this replica: since when the last renewal succeeded.
    held_since: Option<Instant>,
}

/// The holder and REST address of a Lease as seen: what the operational view shows.
fn holder_of(seen: &Option<(NodeLease, Instant)>) -> Option<(&str, Option<&str>)> {
    let (lease, _) = seen.as_ref()?;
    Some((lease.holder.as_deref()?, lease.rest.as_deref()))
}

impl Seat {
    /// Records `seen` as the Lease's last version; whether its holder or REST address changed.
    fn see(&mut self, seen: Option<(NodeLease, Instant)>) -> bool {
        let before = holder_of(&self.seen).map(|(h, r)| (h.to_string(), r.map(str::to_string)));
        self.seen = seen;
        let after = holder_of(&self.seen);
        before.as_ref().map(|(h, r)| (h.as_str(), r.as_deref())) != after
    }

    /// The Lease as last seen, if this replica holds it.
    fn held(&self) -> Option<&NodeLease> {
        self.held_since?;
        self.seen.as_ref().map(|(l, _)| l)
    }
}

/// What a [`Book`] tells the election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The node's Lease is this replica's, at this epoch.
    Taken(String, u64),
    /// It no longer is.
    Lost(String),
}

/// The Leases of every node, from this replica's side.
#[derive(Debug)]
pub(crate) struct Book {
    me: String,
    duration: Duration,
    /// Whether the watch has listed once: until then a missing Lease may exist.
    listed: bool,
    /// Whether a Lease's holder changed since [`Book::changed_holders`] last said.
    holders_changed: bool,
    seats: BTreeMap<String, Seat>,
}

impl Book {
    /// This replica is `me` (its OpenFlow target), taking Leases for `duration`.
    pub(crate) fn new(me: String, duration: Duration) -> Self {
        Book {
            me,
            duration,
            listed: false,
            holders_changed: false,
            seats: BTreeMap::new(),
        }
    }

    fn renew_every(&self) -> Duration {
        self.duration / 3
    }

    fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Carries an election order out; an order that needs no write is answered at once.
    pub(crate) fn order(&mut self, order: Order, now: Instant) -> (Vec<Op>, Vec<Outcome>) {
        match order {
            Order::Lock(node) => {
                self.seats.entry(node).or_default().want = true;
                (vec![], vec![])
            }
            Order::Steal(node) => {
                let seat = self.seats.entry(node).or_default();
                seat.want = true;
                seat.steal = true;
                seat.not_before = None;
                (vec![], vec![])
            }
            Order::Unlock(node) => {
                let Some(seat) = self.seats.get_mut(&node) else {
                    return (vec![], vec![]);
                };
                seat.want = false;
                seat.steal = false;
                // Leave it to the others for a while: nobody queues behind a Lease.
                seat.not_before = Some(now + self.duration);
                match seat.held().cloned() {
                    Some(held) => {
                        seat.held_since = None;
                        (vec![Op::Release(held)], vec![Outcome::Lost(node)])
                    }
                    None => (vec![], vec![]),
                }
            }
            Order::Claim { node, floor } => {
                let Some(seat) = self.seats.get_mut(&node) else {
                    return (vec![], vec![]);
                };
                seat.floor = seat.floor.max(floor);
                match seat.held() {
                    Some(held) if held.epoch >= floor.max(1) => {
                        (vec![], vec![Outcome::Taken(node, held.epoch)])
                    }
                    // Past what the switch accepted: take our own Lease again, bumped.
                    Some(held) => (
                        vec![Op::Take {
                            node: node.clone(),
                            read: Some(held.clone()),
                            epoch: floor.max(held.epoch + 1),
                        }],
                        vec![],
                    ),
                    None => (vec![], vec![Outcome::Lost(node)]),
                }
            }
        }
    }

    /// The node left: forget it (the caller gave its Lease up first).
    pub(crate) fn forget(&mut self, node: &str) {
        if let Some(seat) = self.seats.remove(node) {
            self.holders_changed |= holder_of(&seat.seen).is_some();
        }
    }

    /// The watch listed every Lease.
    pub(crate) fn listed(&mut self, leases: Vec<NodeLease>, now: Instant) -> Vec<Outcome> {
        self.listed = true;
        let listed: BTreeSet<String> = leases.iter().map(|l| l.node.clone()).collect();
        let mut out = Vec::new();
        for lease in leases {
            out.extend(self.seen(lease, now));
        }
        for (node, seat) in &mut self.seats {
            if !listed.contains(node) {
                self.holders_changed |= seat.see(None);
                if seat.held_since.take().is_some() {
                    out.push(Outcome::Lost(node.clone()));
                }
            }
        }
        out
    }

    /// A version of a Lease, from the watch or a read.
    pub(crate) fn seen(&mut self, lease: NodeLease, now: Instant) -> Vec<Outcome> {
        let seat = self.seats.entry(lease.node.clone()).or_default();
        if let Some((old, _)) = &seat.seen
            && older(&lease.version, &old.version)
        {
            return vec![];
        }
        let ours = lease.holder.as_deref() == Some(self.me.as_str());
        let node = lease.node.clone();
        let changed = seat.seen.as_ref().is_none_or(|(old, _)| *old != lease);
        if changed {
            self.holders_changed |= seat.see(Some((lease, now)));
        }
        if seat.held_since.is_some() && !ours {
            seat.held_since = None;
            return vec![Outcome::Lost(node)];
        }
        vec![]
    }

    /// The Lease of a node was deleted (or a read found none).
    pub(crate) fn deleted(&mut self, node: &str) -> Vec<Outcome> {
        let Some(seat) = self.seats.get_mut(node) else {
            return vec![];
        };
        self.holders_changed |= seat.see(None);
        match seat.held_since.take() {
            Some(_) => vec![Outcome::Lost(node.to_string())],
            None => vec![],
        }
    }

    /// A take or renewal succeeded, writing `lease`.
    pub(crate) fn written(&mut self, lease: NodeLease, now: Instant) -> Vec<Outcome> {
        let node = lease.node.clone();
        let epoch = lease.epoch;
        let seat = self.seats.entry(node.clone()).or_default();
        let was_held = seat.held_since.is_some();
        self.holders_changed |= seat.see(Some((lease, now)));
        seat.steal = false;
        seat.not_before = None;
        if !seat.want {
            // Given up meanwhile: the release follows.
            return vec![];
        }
        seat.held_since = Some(now);
        if !was_held {
            tracing::info!("node {node}: took its lease (epoch {epoch})");
        }
        // A take, a renewal or our own bump: the epoch is what the election claims.
        vec![Outcome::Taken(node, epoch)]
    }

    /// A write about `node` failed.
    pub(crate) fn failed(&mut self, node: &str, error: &LeaseError, now: Instant) -> Vec<Op> {
        let Some(seat) = self.seats.get_mut(node) else {
            return vec![];
        };
        seat.steal = false;
        match error {
            LeaseError::Conflict | LeaseError::NotFound => vec![Op::Read(node.to_string())],
            _ => {
                seat.not_before = Some(now + RETRY);
                vec![]
            }
        }
    }

    /// Whether the Lease as seen is free for this replica to take at `now`.
    fn free(&self, seen: &Option<(NodeLease, Instant)>, now: Instant) -> bool {
        match seen {
            None => self.listed,
            Some((lease, at)) => match &lease.holder {
                None => true,
                // A holder of our name is a former run of this replica.
                Some(holder) if *holder == self.me => true,
                Some(_) => now.saturating_duration_since(*at) >= lease.duration,
            },
        }
    }

    /// What to write now, and what the election must hear (a Lease this replica could not
    /// renew in time is dropped before anyone else may take it).
    pub(crate) fn poll(&mut self, now: Instant) -> (Vec<Op>, Vec<Outcome>) {
        let (renew_every, deadline) = (self.renew_every(), self.renew_deadline());
        let mut ops = Vec::new();
        let mut out = Vec::new();
        let frees: BTreeSet<String> = self
            .seats
            .iter()
            .filter(|(_, s)| self.free(&s.seen, now))
            .map(|(n, _)| n.clone())
            .collect();
        for (node, seat) in &mut self.seats {
            if seat.not_before.is_some_and(|t| t > now) {
                continue;
            }
            if let Some(since) = seat.held_since {
                let Some(held) = seat.held().cloned() else {
                    continue;
                };
                if now.saturating_duration_since(since) >= deadline {
                    tracing::warn!(
                        "node {node}: its lease could not be renewed for {deadline:?}; giving \
                         the node up"
                    );
                    seat.held_since = None;
                    out.push(Outcome::Lost(node.clone()));
                } else if now.saturating_duration_since(since) >= renew_every {
                    ops.push(Op::Renew(held));
                }
            } else if seat.want && (seat.steal || frees.contains(node)) {
                let read = seat.seen.as_ref().map(|(l, _)| l.clone());
                let epoch = read
                    .as_ref()
                    .map_or(1, |l| l.epoch.saturating_add(1))
                    .max(seat.floor)
                    .max(1);
                ops.push(Op::Take {
                    node: node.clone(),
                    read,
                    epoch,
                });
            }
        }
        (ops, out)
    }

    /// When [`Book::poll`] may have something new to do without being told anything.
    pub(crate) fn next_deadline(&self, now: Instant) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| {
            let t = t.max(now);
            next = Some(next.map_or(t, |n| n.min(t)));
        };
        for seat in self.seats.values() {
            if let Some(t) = seat.not_before {
                at(t);
            }
            if let Some(since) = seat.held_since {
                at(since + self.renew_every());
            } else if seat.want
                && let Some((lease, seen)) = &seat.seen
                && lease.holder.is_some()
            {
                at(*seen + lease.duration);
            }
        }
        next
    }

    /// Each node's holder and its REST address, as last seen.
    pub(crate) fn holders(&self) -> BTreeMap<String, (String, String)> {
        self.seats
            .iter()
            .filter_map(|(node, seat)| {
                let (holder, rest) = holder_of(&seat.seen)?;
                Some((
                    node.clone(),
                    (holder.to_string(), rest.unwrap_or_default().to_string()),
                ))
            })
            .collect()
    }

    /// [`Book::holders`], only when a holder changed since it was last asked (a renewal
    /// changes none, so the map is not rebuilt for each).
    pub(crate) fn changed_holders(&mut self) -> Option<BTreeMap<String, (String, String)>> {
        std::mem::take(&mut self.holders_changed).then(|| self.holders())
    }
}

/// Whether resource version `a` is older than `b` (both numbers on every API server svcflow
/// knows; if not, neither is older).
fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

/// Runs the election over `leases` until shutdown: follows what `inputs` says and tells the
/// dispatcher through `changes` which nodes this replica masters.
pub(crate) async fn run(
    leases: Leases,
    mut election: Election,
    mut book: Book,
    masters: Masters,
    mut inputs: mpsc::UnboundedReceiver<Input>,
    changes: mpsc::UnboundedSender<Change>,
    shutdown: Shutdown,
) {
    let mut watch = Box::pin(leases.watch());
    let mut announced: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let mut now = Instant::now();
        // Until nothing is left to do: a Lease taken at once is claimed at once.
        for _ in 0..16 {
            let mut busy = false;
            for order in election.poll(now) {
                busy = true;
                let (ops, outcomes) = book.order(order, now);
                tell(&mut election, outcomes, now);
                execute(&leases, &mut book, &mut election, ops).await;
            }
            let (ops, outcomes) = book.poll(now);
            busy |= !ops.is_empty() || !outcomes.is_empty();
            tell(&mut election, outcomes, now);
            execute(&leases, &mut book, &mut election, ops).await;
            now = Instant::now();
            if !busy {
                break;
            }
        }
        if let Some(holders) = book.changed_holders() {
            masters.set_leases(holders);
        }
        super::election::announce(&election, &mut announced, &changes);
        let wake = [election.next_deadline(now), book.next_deadline(now)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_secs(3600));
        tokio::select! {
            _ = stopped(shutdown.clone()) => break,
            _ = tokio::time::sleep_until(wake) => {}
            input = inputs.recv() => match input {
                None => break,
                Some(input) => {
                    let gone = match &input {
                        Input::Gone(node) => Some(node.clone()),
                        _ => None,
                    };
                    let now = Instant::now();
                    for order in election.follow(input, now) {
                        let (ops, outcomes) = book.order(order, now);
                        tell(&mut election, outcomes, now);
                        execute(&leases, &mut book, &mut election, ops).await;
                    }
                    if let Some(node) = gone {
                        book.forget(&node);
                    }
                }
            },
            event = watch.next() => {
                let now = Instant::now();
                let outcomes = match event {
                    None => break,
                    Some(Ok(LeaseEvent::Listed(all))) => {
                        tracing::info!("election: {} node leases listed", all.len());
                        book.listed(all, now)
                    }
                    Some(Ok(LeaseEvent::Seen(lease))) => book.seen(lease, now),
                    Some(Ok(LeaseEvent::Deleted(node))) => book.deleted(&node),
                    Some(Err(e)) => {
                        tracing::warn!("election: watching the leases: {e}");
                        vec![]
                    }
                };
                tell(&mut election, outcomes, now);
            }
        }
    }
}

/// Tells the election what happened to the Leases.
fn tell(election: &mut Election, outcomes: Vec<Outcome>, now: Instant) {
    for outcome in outcomes {
        match outcome {
            Outcome::Taken(node, epoch) => {
                election.locked(&node, now);
                election.claimed(&node, epoch);
            }
            Outcome::Lost(node) => {
                tracing::info!("node {node}: its lease is not this replica's");
                election.lost(&node);
            }
        }
    }
}

/// `call`, given up after a third of the lease duration (a hung API server must not hold
/// the election past a renewal).
async fn bounded<T>(
    book: &Book,
    call: impl std::future::Future<Output = Result<T, LeaseError>>,
) -> Result<T, LeaseError> {
    let limit = book.renew_every().max(Duration::from_millis(500));
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => Err(LeaseError::Api(format!(
            "the API server did not answer within {limit:?}"
        ))),
    }
}

/// Carries writes out, with whatever they lead to.
async fn execute(leases: &Leases, book: &mut Book, election: &mut Election, ops: Vec<Op>) {
    let mut queue = std::collections::VecDeque::from(ops);
    while let Some(op) = queue.pop_front() {
        let (node, result) = match op {
            Op::Take { node, read, epoch } => {
                tracing::info!(
                    "node {node}: taking its lease (epoch {epoch}{})",
                    read.as_ref()
                        .and_then(|l| l.holder.as_deref())
                        .map(|h| format!(", from {h}"))
                        .unwrap_or_default()
                );
                let r = bounded(book, leases.take(&node, read.as_ref(), epoch)).await;
                (node, r)
            }
            Op::Renew(held) => (held.node.clone(), bounded(book, leases.renew(&held)).await),
            Op::Release(held) => {
                tracing::info!("node {}: giving its lease up", held.node);
                let node = held.node.clone();
                match bounded(book, leases.release(&held)).await {
                    Ok(lease) => {
                        let outcomes = book.seen(lease, Instant::now());
                        tell(election, outcomes, Instant::now());
                    }
                    Err(e) => tracing::info!("node {node}: releasing its lease: {e}"),
                }
                continue;
            }
            Op::Read(node) => {
                let now = Instant::now();
                let outcomes = match bounded(book, leases.get(&node)).await {
                    Ok(Some(lease)) => book.seen(lease, now),
                    Ok(None) => book.deleted(&node),
                    Err(e) => {
                        tracing::info!("node {node}: reading its lease: {e}");
                        vec![]
                    }
                };
                tell(election, outcomes, now);
                continue;
            }
        };
        let now = Instant::now();
        match result {
            Ok(lease) => {
                let outcomes = book.written(lease, now);
                tell(election, outcomes, now);
            }
            Err(e) => {
                tracing::info!("node {node}: lease write: {e}");
                queue.extend(book.failed(&node, &e, now));
            }
        }
    }
}

#[cfg(test)]
mod tests;
