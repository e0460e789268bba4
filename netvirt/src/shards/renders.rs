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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use foldhash::fast::RandomState;
use smallvec::SmallVec;

use crate::config::Config;
use crate::model::{Endpoint, Map, Model, Service, ServiceKey};

use super::Shard;

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
}

/// How many services the nodes sharing a [`Renders`] rendered, and how many one of them took
/// from another's render of the same model instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenderCounts {
    /// Services planned and rendered.
    pub rendered: u64,
    /// Services taken as another node rendered them.
    pub reused: u64,
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
