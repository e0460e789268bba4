//! What the nodes of a central controller share of their services' renders.
//!
//! A central controller keeps one [`Shards`](super::Shards) per switch, and most of a
//! service's flows and groups are the same on every node (a ClusterIP service's, whenever
//! its endpoints weigh the same wherever they run). Two things are shared:
//!
//! - **What is held.** A node's render of a service is looked up among the live shards of
//!   that service, and an equal one is used instead, so that what is identical across nodes
//!   is held once, not once per node. A node whose render differs (its own node ports, local
//!   endpoints, another group id) keeps its own.
//! - **The render itself.** A service whose plans and flows cannot depend on the node
//!   ([`crate::desired::renders_alike_on_every_node`]) is planned and rendered by the first
//!   node that renders it from a model; the other nodes rendering the same model take that
//!   shard, unplanned and unrendered, when it was made with the group ids they give its
//!   group names and the same configuration. So a change (or a first load) costs one render
//!   per such service, not one per node.
//!
//! "The same model" is decided by identity, not by comparing values: the models the nodes
//! render are shared structurally, and a render remembers the addresses of the service and
//! endpoints it was made from. The maps of every model some node renders (or last rendered)
//! are held here, so an address seen again is the same value, never a new one put where a
//! freed one was; a model no node is on any more is let go.
//!
//! With a single node sharing the cache, and no other in the model, nothing of the second
//! kind is recorded: there is nobody to take it.
//!
//! A third thing is shared: **the group bookkeeping** (each node's group ids, and the owners
//! of its group names and of its groups). Each node keeps its own allocator
//! ([`ids::Allocator`]), whose ids are a function of the group names it holds, and an update
//! settles its services' names a part at a time. While the nodes move together, a node's
//! change of its allocator (names taken out, names added) is kept here with the allocator it
//! started from; another node that makes the same change from that same allocator (one it
//! took from the first node, compared by identity) takes the result instead of placing the
//! names again. A change is kept until every other node sharing the cache has taken it, or
//! [`TRANSITIONS_KEPT`] newer ones came; a node further behind places its names itself. At
//! the end of every update, a node's allocator and its two owner maps are each compared with
//! those the nodes ended their latest updates with (by identity, else by a fingerprint of
//! their entries and then the entries), and replaced by an equal one: from then on the nodes
//! hold one of each. All three are persistent maps, so a shared one costs a reference count
//! and a node's next change copies only the part it touches. A node whose names or groups
//! differ (a service or group rendered per node) keeps its own.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use foldhash::fast::RandomState;
use smallvec::SmallVec;

use crate::config::Config;
use crate::ids::Allocator;
use crate::model::{Endpoint, Map, Model, Service, ServiceKey};

use super::tracked::Tracked;
use super::{Owner, Shard};

/// Services' rendered shards, shared by every node's [`Shards`](super::Shards) that renders
/// one alike. Entries are weak: a shard lives while some node uses it.
#[derive(Clone, Default)]
pub struct Renders(Arc<Mutex<RenderCache>>);

/// Keyed by the shards' own `Arc`'d keys, one small list each: a copy of every service's
/// key and a four-entry vector per service cost ~3 MiB at 30,000 services (issue 19). Hashed
/// with foldhash seeded per process (SipHash was 2% of a 30,000-service load's CPU).
#[derive(Default)]
struct RenderCache {
    by_service: HashMap<Arc<ServiceKey>, Vec<Weak<Shard>>, RandomState>,
    alike: Alike,
    /// How many [`Shards`](super::Shards) share the cache.
    nodes: usize,
    counts: RenderCounts,
    /// The nodes' latest changes of their group-id allocators, oldest first.
    transitions: VecDeque<Transition>,
    /// The allocators the nodes ended their latest updates with, and the same for their
    /// owners of group names and of groups.
    allocators: Kept<Allocator>,
    name_owners: Kept<Tracked<Arc<str>, Arc<ServiceKey>>>,
    group_owners: Kept<Tracked<u32, Owner>>,
}

/// Distinct values some nodes ended their latest updates with, newest first, at most
/// [`ALLOCATORS_KEPT`], each with how many updates ended on it.
type Kept<T> = VecDeque<(T, usize)>;

/// What a node's end of update is shared by: an allocator, or an owner map.
trait Shareable: Clone {
    /// The very same value (a clone neither side changed since).
    fn same_as(&self, other: &Self) -> bool;
    /// An equal value, however it was built.
    fn equal(&self, other: &Self) -> bool;
}

impl Shareable for Allocator {
    fn same_as(&self, other: &Self) -> bool {
        Allocator::same_as(self, other)
    }
    fn equal(&self, other: &Self) -> bool {
        self.same_names(other)
    }
}

impl<K, V> Shareable for Tracked<K, V>
where
    K: Ord + Clone + std::hash::Hash,
    V: Clone + std::hash::Hash + PartialEq,
{
    fn same_as(&self, other: &Self) -> bool {
        Tracked::same_as(self, other)
    }
    fn equal(&self, other: &Self) -> bool {
        self.same_entries(other)
    }
}

/// How many allocators of finished updates are kept for nodes that end theirs with the same
/// names.
pub const ALLOCATORS_KEPT: usize = 4;

/// How many allocator changes are kept for the other nodes at most: a node more than this
/// many parts of an update behind the first places its names itself. Ten nodes' tasks on two
/// cores were more than 16 parts apart during a 30,000-service load (`docs/performance.md`).
pub const TRANSITIONS_KEPT: usize = 64;

/// One node's change of its group-id allocator, for the others to take.
struct Transition {
    before: Allocator,
    gone: Vec<Arc<str>>,
    new: Vec<Arc<str>>,
    after: Allocator,
    /// The names whose ids the change moved ([`Allocator::update`]).
    moved: BTreeSet<Arc<str>>,
    /// How many other nodes may still take it.
    takers: usize,
}

/// How many services the nodes sharing a [`Renders`] rendered, and how many one of them took
/// from another's render of the same model instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderCounts {
    /// Services planned and rendered.
    pub rendered: u64,
    /// Services taken as another node rendered them.
    pub reused: u64,
    /// Changes of a node's group-id allocator it made itself.
    pub ids_placed: u64,
    /// Changes of a node's group-id allocator it took from another node.
    pub ids_taken: u64,
    /// Updates after which a node's allocator, placed on its own, was found to hold the same
    /// names as another node's and was replaced by it.
    pub ids_joined: u64,
}

/// The renders of services alike on every node, and the models they were made from.
#[derive(Default)]
struct Alike {
    held: Vec<Held>,
    next: u64,
    /// Each such service's last renders, from different models (nodes on different models
    /// each find theirs): at most [`RENDERS_KEPT`].
    entries: HashMap<Arc<ServiceKey>, SmallVec<[Entry; 1]>, RandomState>,
}

/// How many renders of one service, from different models, are kept for other nodes.
const RENDERS_KEPT: usize = 2;

/// A model some node renders or last rendered, with the configuration it renders it under.
struct Held {
    id: u64,
    services: Map<ServiceKey, Service>,
    endpoints: Map<ServiceKey, Vec<Endpoint>>,
    config: Config,
    /// The nodes on it.
    users: usize,
}

/// One service's render, and what it was made from.
struct Entry {
    /// The [`Held`] model.
    generation: u64,
    /// The addresses of the service and of its endpoints (0: none) in that model.
    service: usize,
    endpoints: usize,
    /// The group ids its group names had.
    ids: Arc<[Option<u32>]>,
    shard: Weak<Shard>,
}

fn address<T>(value: Option<&T>) -> usize {
    value.map_or(0, |v| std::ptr::from_ref(v) as usize)
}

/// A render another node made that this one may take, if its group ids are this node's.
pub(super) struct Candidate {
    pub(super) shard: Arc<Shard>,
    pub(super) ids: Arc<[Option<u32>]>,
}

impl Renders {
    /// A cache for the [`Shards`](super::Shards) of several nodes to share.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RenderCache> {
        // The cache holds no invariant that a panic elsewhere could break: keep using it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `shard`, or an equal one that another node already holds.
    pub(super) fn intern(&self, key: &ServiceKey, shard: Shard) -> Arc<Shard> {
        let mut cache = self.lock();
        cache.counts.rendered += 1;
        let Some(live) = cache.by_service.get_mut(key) else {
            let held = shard.key.clone().unwrap_or_else(|| Arc::new(key.clone()));
            let shard = Arc::new(shard);
            cache.by_service.insert(held, vec![Arc::downgrade(&shard)]);
            return shard;
        };
        let mut found = None;
        live.retain(|weak| match weak.upgrade() {
            Some(held) => {
                if found.is_none() && *held == shard {
                    found = Some(held);
                }
                true
            }
            None => false,
        });
        match found {
            Some(held) => held,
            None => {
                let shard = Arc::new(shard);
                live.push(Arc::downgrade(&shard));
                shard
            }
        }
    }

    /// Forgets `key`'s shards that no node holds any more.
    pub(super) fn release(&self, key: &ServiceKey) {
        let mut cache = self.lock();
        if let Some(live) = cache.by_service.get_mut(key) {
            live.retain(|weak| weak.strong_count() > 0);
            if live.is_empty() {
                cache.by_service.remove(key);
            }
        }
        if let Some(entries) = cache.alike.entries.get_mut(key) {
            entries.retain(|e| e.shard.strong_count() > 0);
            if entries.is_empty() {
                cache.alike.entries.remove(key);
            }
        }
    }

    /// How many distinct service shards are alive, over every node.
    pub fn len(&self) -> usize {
        let cache = self.lock();
        cache
            .by_service
            .values()
            .map(|live| live.iter().filter(|w| w.strong_count() > 0).count())
            .sum()
    }

    /// Whether no service shard is alive.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many services the nodes rendered, and how many they took from another's render.
    pub fn counts(&self) -> RenderCounts {
        self.lock().counts
    }

    /// One more node shares the cache.
    pub(super) fn join(&self) {
        self.lock().nodes += 1;
    }

    /// A node leaves the cache, and the model it was on.
    pub(super) fn leave(&self, generation: Option<u64>) {
        let mut cache = self.lock();
        cache.nodes = cache.nodes.saturating_sub(1);
        cache.alike.release(generation);
        if cache.nodes < 2 {
            // Nobody to take them.
            cache.transitions.clear();
            cache.allocators.clear();
            cache.name_owners.clear();
            cache.group_owners.clear();
        }
    }

    /// A node starts rendering `model` under `config`, leaving the model it was on
    /// (`previous`): the model's id among those held, or `None` when renders are not
    /// shared: a single node shares the cache and the model has no other node to come.
    pub(super) fn enter(
        &self,
        model: &Model,
        config: &Config,
        previous: Option<u64>,
    ) -> Option<u64> {
        let mut cache = self.lock();
        let id = if cache.nodes >= 2 || model.nodes.len() >= 2 {
            Some(cache.alike.acquire(model, config))
        } else {
            None
        };
        cache.alike.release(previous);
        if cache.alike.held.is_empty() {
            cache.alike.entries.clear();
        }
        id
    }

    /// The render of `key` another node made from the same `service` and `endpoints` under
    /// the same configuration as model `generation`'s, if one is alive.
    pub(super) fn candidate(
        &self,
        generation: u64,
        key: &ServiceKey,
        service: &Service,
        endpoints: Option<&Vec<Endpoint>>,
    ) -> Option<Candidate> {
        let cache = self.lock();
        let now = cache.alike.held(generation)?;
        let entry = cache.alike.entries.get(key)?.iter().find(|entry| {
            cache.alike.held(entry.generation).is_some_and(|made| {
                entry.service == address(Some(service))
                    && entry.endpoints == address(endpoints)
                    && (made.id == now.id || made.config == now.config)
            })
        })?;
        Some(Candidate {
            shard: entry.shard.upgrade()?,
            ids: Arc::clone(&entry.ids),
        })
    }

    /// Takes `gone` out of `ids` and adds `new` ([`Allocator::update`]), returning the
    /// names whose ids moved: another node's result when it made that change from this
    /// allocator, else placed here (and kept for the other nodes, if any).
    pub(super) fn update_ids(
        &self,
        ids: &mut Allocator,
        gone: &[Arc<str>],
        new: &[Arc<str>],
    ) -> BTreeSet<Arc<str>> {
        let mut cache = self.lock();
        let found = cache
            .transitions
            .iter()
            .position(|t| t.before.same_as(ids) && *t.gone == *gone && *t.new == *new);
        if let Some(at) = found {
            cache.counts.ids_taken += 1;
            let t = &mut cache.transitions[at];
            *ids = t.after.clone();
            let moved = t.moved.clone();
            t.takers = t.takers.saturating_sub(1);
            if t.takers == 0 {
                cache.transitions.remove(at);
            }
            return moved;
        }
        cache.counts.ids_placed += 1;
        // Placed under the lock: the other nodes would wait for it anyway, to take it.
        let before = (cache.nodes >= 2).then(|| ids.clone());
        let moved = ids.update(gone.iter().map(|n| &**n), new);
        let Some(before) = before else {
            // Nobody to take it.
            return moved;
        };
        let takers = cache.nodes - 1;
        cache.transitions.push_back(Transition {
            before,
            gone: gone.to_vec(),
            new: new.to_vec(),
            after: ids.clone(),
            moved: moved.clone(),
            takers,
        });
        while cache.transitions.len() > TRANSITIONS_KEPT {
            cache.transitions.pop_front();
        }
        moved
    }

    /// Shares `ids`, which a node ended an update with, with another node's allocator that
    /// holds the same names, if one is kept; else keeps it for the others. A node that placed
    /// its own names (it fell behind, or took a model in other parts) holds one allocator
    /// with the others again from then on. The node's owners of group names and of groups
    /// are shared the same way, each on its own (they agree between nodes whenever the
    /// nodes' services give the same names, which their allocators may not show at once).
    pub(super) fn converge(
        &self,
        ids: &mut Allocator,
        name_owner: &mut Tracked<Arc<str>, Arc<ServiceKey>>,
        group_owners: &mut Tracked<u32, Owner>,
    ) {
        let mut cache = self.lock();
        if cache.nodes < 2 {
            return;
        }
        let (joined, ended) = share(&mut cache.allocators, ids);
        if joined {
            cache.counts.ids_joined += 1;
        }
        // Once as many updates ended on one allocator as there are nodes, the changes that
        // led there are most likely of no more use: let them (and the allocators they hold)
        // go. Should a node still be on its way, it places its names itself.
        if ended >= cache.nodes {
            cache.transitions.clear();
        }
        share(&mut cache.name_owners, name_owner);
        share(&mut cache.group_owners, group_owners);
    }

    /// A node took another's render instead of its own.
    pub(super) fn reused(&self) {
        self.lock().counts.reused += 1;
    }

    /// Remembers `shard` as `key`'s render from `service` and `endpoints` of model
    /// `generation`, with the group ids its names had, for the other nodes to take.
    pub(super) fn record(
        &self,
        generation: u64,
        key: &Arc<ServiceKey>,
        service: &Service,
        endpoints: Option<&Vec<Endpoint>>,
        ids: Arc<[Option<u32>]>,
        shard: &Arc<Shard>,
    ) {
        let mut cache = self.lock();
        let alike = &mut cache.alike;
        if alike.held(generation).is_none() {
            return;
        }
        let entry = Entry {
            generation,
            service: address(Some(service)),
            endpoints: address(endpoints),
            ids,
            shard: Arc::downgrade(shard),
        };
        let held = &alike.held;
        let entries = alike.entries.entry(Arc::clone(key)).or_default();
        // Those of models no node is on are of no use (and their addresses could be reused);
        // one from this model is replaced; else the oldest goes.
        entries.retain(|e| e.generation != generation && held.iter().any(|h| h.id == e.generation));
        if entries.len() >= RENDERS_KEPT {
            entries.sort_by_key(|e| std::cmp::Reverse(e.generation));
            entries.truncate(RENDERS_KEPT - 1);
        }
        entries.push(entry);
    }
}

/// `value` replaced by an equal one of `kept` (which then moves to the front, one more update
/// having ended on it), or kept there for the others; returns whether it was replaced, and
/// how many updates ended on what it now is.
fn share<T: Shareable>(kept: &mut Kept<T>, value: &mut T) -> (bool, usize) {
    match kept.iter().position(|(k, _)| k.equal(value)) {
        Some(at) => {
            let (equal, ended) = kept.remove(at).unwrap_or_else(|| (value.clone(), 0));
            let joined = !equal.same_as(value);
            if joined {
                *value = equal.clone();
            }
            kept.push_front((equal, ended + 1));
            (joined, ended + 1)
        }
        None => {
            kept.push_front((value.clone(), 1));
            kept.truncate(ALLOCATORS_KEPT);
            (false, 1)
        }
    }
}

impl Alike {
    fn held(&self, id: u64) -> Option<&Held> {
        self.held.iter().find(|h| h.id == id)
    }

    /// The id of `model` under `config` among the held models (held anew if it is not),
    /// with one more node on it.
    fn acquire(&mut self, model: &Model, config: &Config) -> u64 {
        let found = self.held.iter_mut().find(|h| {
            h.services.ptr_eq(&model.services)
                && h.endpoints.ptr_eq(&model.endpoints)
                && h.config == *config
        });
        if let Some(held) = found {
            held.users += 1;
            return held.id;
        }
        let id = self.next;
        self.next += 1;
        self.held.push(Held {
            id,
            services: model.services.clone(),
            endpoints: model.endpoints.clone(),
            config: config.clone(),
            users: 1,
        });
        id
    }

    /// One node less on model `id`; a model no node is on is let go, and the renders made
    /// from it with it (their addresses could be reused).
    fn release(&mut self, id: Option<u64>) {
        let Some(id) = id else { return };
        let Some(at) = self.held.iter().position(|h| h.id == id) else {
            return;
        };
        self.held[at].users = self.held[at].users.saturating_sub(1);
        if self.held[at].users == 0 {
            self.held.swap_remove(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<Arc<str>> {
        v.iter().map(|n| Arc::from(*n)).collect()
    }

    /// A node takes another's change of its allocator only when it makes the same change from
    /// the very same allocator: one that holds other names places them itself.
    #[test]
    fn a_change_is_taken_only_from_the_same_allocator() {
        let renders = Renders::new();
        for _ in 0..3 {
            renders.join();
        }
        let new = names(&["a/x:80/TCP", "a/y:80/TCP", "a/z:53/UDP"]);
        let (mut first, mut second) = (Allocator::new(4), Allocator::new(4));
        renders.update_ids(&mut first, &[], &new);
        // A name of its own, sorted before the others, that pushes one of theirs to another
        // id in so small a range.
        let shared = ["a/x:80/TCP", "a/y:80/TCP", "a/z:53/UDP"];
        let alone = crate::ids::allocate(shared, 4);
        let extra = (0..100)
            .map(|i| format!("0-extra-{i}"))
            .find(|extra| {
                let with = crate::ids::allocate(shared.into_iter().chain([extra.as_str()]), 4);
                shared.iter().any(|n| with.get(*n) != alone.get(*n))
            })
            .unwrap();
        let mut crowded = Allocator::new(4);
        crowded.update(std::iter::empty(), [extra.as_str()]);
        renders.update_ids(&mut crowded, &[], &new);
        let counts = renders.counts();
        assert_eq!((counts.ids_placed, counts.ids_taken), (2, 0), "{counts:?}");
        let want = crate::ids::allocate(shared.into_iter().chain([extra.as_str()]), 4);
        let got: std::collections::BTreeMap<String, u32> = crowded
            .ids()
            .iter()
            .map(|(n, id)| (n.to_string(), *id))
            .collect();
        assert_eq!(got, want);
        // The same change from the same (empty) allocator is taken, and shares it.
        let moved = renders.update_ids(&mut second, &[], &new);
        assert!(moved.is_empty());
        assert!(second.same_as(&first));
        assert_eq!(renders.counts().ids_taken, 1);
        // A change with other names is not.
        let mut fourth = Allocator::new(4);
        renders.update_ids(&mut fourth, &[], &new[..2]);
        assert_eq!(renders.counts().ids_taken, 1);
        assert!(!fourth.same_as(&first));
        assert_eq!(fourth.len(), 2);
    }

    /// With one node, nothing is kept: nobody would take it.
    #[test]
    fn a_lone_node_keeps_no_change() {
        let renders = Renders::new();
        renders.join();
        let mut ids = Allocator::new(100);
        renders.update_ids(&mut ids, &[], &names(&["a/x:80/TCP"]));
        assert_eq!(ids.len(), 1);
        assert!(renders.lock().transitions.is_empty());
    }

    /// A change is let go once every other node took it.
    #[test]
    fn a_change_goes_once_every_other_node_took_it() {
        let renders = Renders::new();
        for _ in 0..3 {
            renders.join();
        }
        let new = names(&["a/x:80/TCP"]);
        let mut nodes = [
            Allocator::new(100),
            Allocator::new(100),
            Allocator::new(100),
        ];
        for (i, ids) in nodes.iter_mut().enumerate() {
            assert_eq!(renders.lock().transitions.len(), usize::from(i > 0));
            renders.update_ids(ids, &[], &new);
        }
        assert!(renders.lock().transitions.is_empty());
        assert_eq!(renders.counts().ids_taken, 2);
    }
}
