//! The desired state kept incrementally, one shard per owner: the node's own part (skeleton,
//! pods, ports) and one per service. A model change re-renders only the shards whose inputs
//! changed, and yields the plan for just the flows and groups they touch, so an endpoint change
//! costs the same with 10 services or 10,000.
//!
//! Shards may render the same flow: services sharing an endpoint share its DNAT flow, and two
//! services on one address and port collide. The first owner wins (the node's part, then
//! services by namespace/name), exactly as one full render would decide; a collision with a
//! different flow is reported as a conflict.
//!
//! Change detection is by key: the shards keep the model's maps as they last rendered them
//! (persistent maps, so keeping them costs nothing) and diff them with the new ones, which
//! skips every subtree the two share. An update therefore costs time in the size of the
//! change, not of the model: no service is hashed or compared unless it changed. A change of
//! what every shard depends on (the node, the configuration, the port bindings) re-renders
//! everything.
//!
//! A central controller keeps one `Shards` per switch, all sharing one [`Renders`]
//! (`shards/renders.rs`): a service's shard is held once for every node that renders it alike, and a
//! service that cannot differ from node to node is planned and rendered by one node for all.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hash};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use openflow::Field;

use openflow::msg::{Body, FlowModCommand, GroupModCommand};

use crate::agent::SwitchState;
use crate::apply::{flow_mod, group_mod};
use crate::config::Config;
use crate::desired::{
    DesiredState, NodeBindings, PortPlan, ServicePortState, collision_message, plan_names,
    render_base, render_service, renders_alike_on_every_node, service_plans,
};
use crate::flow::{FlowEntry, FlowKey, GroupEntry};
use crate::health::{HealthCheck, NoLocal, no_local_endpoints};
use crate::ids;
use crate::model::{Map, Model, Namespace, Node, PodInterface, Service, ServiceKey, diff_key};
use crate::pipeline::{group, table};
use crate::plan::Step;

mod renders;
mod tracked;

pub use renders::{RenderCounts, Renders};
use tracked::Tracked;

/// Who rendered a flow or group; the order decides which of two colliding flows wins.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Owner {
    Node,
    Service(Arc<ServiceKey>),
}

#[derive(PartialEq)]
struct Shard {
    /// The service it renders (none for the node's part), held once for every node.
    key: Option<Arc<ServiceKey>>,
    /// Group names it needs ids for, shared with the allocators of every node that holds it.
    names: Arc<[Arc<str>]>,
    /// Its flows; the keys are shared with the index.
    flows: SortedVec<Arc<FlowKey>, FlowEntry>,
    groups: SortedVec<u32, GroupEntry>,
    services: SortedVec<String, ServicePortState>,
    conflicts: Vec<String>,
    /// Its ports under a `Local` traffic policy without a local endpoint on the node.
    no_local: NoLocal,
    /// What its health-check node port answers on the node (boxed: few services have one,
    /// and every shard pays for the field).
    health: Option<Box<(u16, HealthCheck)>>,
}

/// A small read-only map: sorted pairs with no spare capacity. A shard holds a dozen flows
/// and one group; a `BTreeMap` would allocate room for eleven entries per node, which at
/// 10,000 services costs tens of megabytes.
struct SortedVec<K, V>(Box<[(K, V)]>);

impl<K: PartialEq, V: PartialEq> PartialEq for SortedVec<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<K: Ord, V> SortedVec<K, V> {
    fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
    {
        let i = self.0.binary_search_by(|(k, _)| k.borrow().cmp(key)).ok()?;
        Some(&self.0[i].1)
    }

    fn keys(&self) -> impl Iterator<Item = &K> {
        self.0.iter().map(|(k, _)| k)
    }

    fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl<K: Ord, V> FromIterator<(K, V)> for SortedVec<K, V> {
    /// From pairs with distinct keys (as a map's are).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut v: Vec<(K, V)> = pairs.into_iter().collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        SortedVec(v.into_boxed_slice())
    }
}

impl<'a, K: Ord, V> IntoIterator for &'a SortedVec<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (K, V)>, fn(&'a (K, V)) -> (&'a K, &'a V)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl Shard {
    fn new(key: Option<ServiceKey>, names: Arc<[Arc<str>]>, out: DesiredState) -> Self {
        Shard {
            key: key.map(Arc::new),
            names,
            flows: out
                .state
                .flows
                .into_iter()
                .map(|(k, v)| (Arc::new(k), v))
                .collect(),
            groups: out.state.groups.into_iter().collect(),
            services: out.services.into_iter().collect(),
            conflicts: out.conflicts,
            no_local: NoLocal::default(),
            health: out.health.into_iter().next().map(Box::new),
        }
    }

    /// The shard with its count of ports without a local endpoint.
    fn with_no_local(mut self, no_local: NoLocal) -> Self {
        self.no_local = no_local;
        self
    }
}

/// The model's maps as the shards last rendered them, to diff the next model with.
struct Seen {
    nodes: Map<String, Node>,
    pods: Map<String, PodInterface>,
    namespaces: Map<String, Namespace>,
    services: Map<ServiceKey, Service>,
    endpoints: Map<ServiceKey, Vec<crate::model::Endpoint>>,
    /// How many pods each namespace has on each node: ELAN ids are allocated over the
    /// namespaces that have pods, and (with the overlay) an ELAN's flood reaches the nodes
    /// that have pods of it, so the node's part changes when a namespace gains its first pod
    /// on a node or loses its last.
    pod_namespaces: BTreeMap<(String, String), usize>,
}

/// A flow's owners; nearly every flow has one, held inline.
type Owners = smallvec::SmallVec<[Owner; 1]>;

/// A flow with more than one owner: all of them, in order (the first one's entry is the
/// desired one), and how many of the others render it differently (its collisions).
struct SharedFlow {
    owners: Owners,
    differing: usize,
}

/// Whether two owners' entries for one flow collide (the first one's wins).
fn differs(a: &FlowEntry, b: &FlowEntry) -> bool {
    a.instructions != b.instructions
}

/// Adds `owner` to `owners` in its place: they are kept in order, the first one winning.
fn add_owner(owners: &mut Owners, owner: &Owner) {
    let at = owners.partition_point(|o| o < owner);
    owners.insert(at, owner.clone());
}

/// A hash map keyed by flow keys. A B-tree over 90,000 packed matches spent a third of a
/// service's render comparing their bytes (every lookup about 17 `memcmp`s); where the order
/// matters (a plan, a dump) the keys are sorted when asked for. Seeded at random per process,
/// since the keys come from the inputs.
type KeyMap<V> = HashMap<Arc<FlowKey>, V, foldhash::fast::RandomState>;

/// The service shards by key: hashed, as every step of an update looks its flow's owner up
/// here (ordered, the key comparisons were a tenth of a first load's CPU, issue 19). Seeded
/// at random per process, as [`KeyMap`]: services are named by the inputs.
type ServiceMap = HashMap<Arc<ServiceKey>, Arc<Shard>, foldhash::fast::RandomState>;

/// The desired state of one node, by shard.
pub struct Shards {
    /// Hash of what every shard depends on besides its own inputs.
    context: Option<u64>,
    seen: Option<Seen>,
    node: Option<Arc<Shard>>,
    services: ServiceMap,
    /// Where service shards are shared with other nodes' `Shards`.
    renders: Renders,
    /// The model this node renders or last rendered, among those `renders` holds (none
    /// while renders are not shared).
    generation: Option<u64>,
    /// Services removed by the last render: a [`Pending`] may still hold their shards then,
    /// so the cache forgets them at the next render.
    released: Vec<Arc<ServiceKey>>,
    /// Every desired flow's first owner, whose entry is the desired one (nearly every flow
    /// has one owner, so this is all the index holds for it: 16 bytes a flow, paid per
    /// node). Unordered: [`Shards::sorted_flows`] gives them in table order.
    flow_owner: KeyMap<Owner>,
    /// The flows with more than one owner, where collisions can be: all their owners, in
    /// order (the first is `flow_owner`'s), and their collisions.
    shared: KeyMap<SharedFlow>,
    /// How many conflicts the shards report of their own, summed as they come and go.
    own_conflicts: usize,
    /// How many collisions the shared flows have, summed as they change.
    collided: usize,
    group_owners: Tracked<u32, Owner>,
    ids: ids::Allocator,
    /// The service that needs each group name. Shared with the other nodes' while equal,
    /// as `group_owners` and `ids` ([`Renders`]).
    name_owner: Tracked<Arc<str>, Arc<ServiceKey>>,
    /// The shards that report conflicts of their own.
    conflicted: BTreeSet<Owner>,
    /// The conflicts of what the last update or refresh rendered (all of them after a
    /// refresh): what is worth logging after a sync, found in time proportional to it.
    recent: Vec<String>,
    /// Conntrack entries made stale by updates since the last [`Shards::take_stale`].
    stale: Vec<StaleConntrack>,
    /// The services' ports without a local endpoint under a `Local` policy, summed over the
    /// shards as they come and go.
    no_local: NoLocal,
    /// The owners of each health-check node port, in order (the first one answers).
    health_owners: BTreeMap<u16, Owners>,
    /// Changes whenever what a health-check node port answers does.
    health_version: u64,
    /// See [`Shards::keep_plans_up_to`].
    plans_kept_max: usize,
    /// See [`Shards::settle_up_to`].
    settle_max: usize,
}

impl Default for Shards {
    fn default() -> Self {
        Self::sharing(&Renders::default())
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.renders.leave(self.generation.take());
    }
}

impl Shards {
    /// Shards that share the service shards they render alike with the other nodes' shards
    /// made with the same `renders`, and their renders of the services that cannot differ
    /// from node to node.
    pub fn sharing(renders: &Renders) -> Self {
        renders.join();
        Self {
            context: None,
            seen: None,
            node: None,
            services: ServiceMap::default(),
            renders: renders.clone(),
            generation: None,
            released: Vec::new(),
            flow_owner: KeyMap::default(),
            shared: KeyMap::default(),
            own_conflicts: 0,
            collided: 0,
            group_owners: Tracked::default(),
            ids: ids::Allocator::new(group::SERVICE_MAX),
            name_owner: Tracked::default(),
            conflicted: BTreeSet::new(),
            recent: Vec::new(),
            stale: Vec::new(),
            no_local: NoLocal::default(),
            health_owners: BTreeMap::new(),
            health_version: 0,
            plans_kept_max: PLANS_KEPT_MAX,
            settle_max: SETTLE_PART,
        }
    }
}

/// Connections that a removed endpoint may still hold through a service address: UDP and SCTP
/// have no end, so their conntrack entries would keep sending a client to the gone endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct StaleConntrack {
    /// IP protocol (17 or 132).
    pub ip_proto: u8,
    /// The service address and port the client connected to.
    pub address: IpAddr,
    /// The service port (0: every port, see [`crate::desired::ANY_PORT`]).
    pub port: u16,
    /// The endpoint that is gone (of the address's family).
    pub endpoint: IpAddr,
    /// Its port (0: every port).
    pub endpoint_port: u16,
}

/// What one message of a full plan does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Adds a flow.
    AddFlow,
    /// Modifies a flow.
    ModifyFlow,
    /// Deletes a flow.
    DeleteFlow,
    /// Adds, modifies or deletes a group.
    Group,
}

/// What one update changed, as steps from the previous state to the new one.
pub type Delta = Vec<Step<FlowKey, FlowEntry, GroupEntry>>;

/// A 64-bit fingerprint of `value` (foldhash's quality variant with a fixed seed: fast on
/// many small fields, and well distributed).
fn hash_of(value: &impl Hash) -> u64 {
    foldhash::quality::FixedState::with_seed(0x5356).hash_one(value)
}

/// The UDP and SCTP connections of `old`'s service ports to endpoints that `new` no longer
/// has. A port's addresses are the destinations of its table-40 flows.
fn stale_conntrack(old: &Shard, new: Option<&Shard>) -> Vec<StaleConntrack> {
    let mut out = Vec::new();
    for (name, was) in &old.services {
        let now = new.and_then(|n| n.services.get(name));
        let gone: Vec<(IpAddr, u16)> = was
            .backends
            .iter()
            .filter(|b| {
                now.is_none_or(|n| !n.backends.iter().any(|x| x.ip == b.ip && x.port == b.port))
            })
            .map(|b| (b.ip, b.port))
            .collect();
        if gone.is_empty() {
            continue;
        }
        for key in old
            .flows
            .iter()
            .filter(|(k, e)| k.table == table::SERVICE && e.cookie == was.cookie)
            .map(|(k, _)| k)
        {
            let value = |f: Field| key.get(f).map(|x| x.value);
            let Some(ip_proto) = value(Field::IpProto).and_then(|p| u8::try_from(p).ok()) else {
                continue;
            };
            // A flow without a destination port is a service that forwards every port.
            let port = match ip_proto {
                17 => value(Field::UdpDst),
                132 => value(Field::SctpDst),
                _ => continue,
            }
            .map_or(Some(crate::desired::ANY_PORT), |p| u16::try_from(p).ok());
            let address = match (value(Field::Ipv4Dst), value(Field::Ipv6Dst)) {
                (Some(a), _) => u32::try_from(a).ok().map(|a| IpAddr::V4(Ipv4Addr::from(a))),
                (None, Some(a)) => Some(IpAddr::V6(std::net::Ipv6Addr::from(a))),
                (None, None) => None,
            };
            let (Some(address), Some(port)) = (address, port) else {
                continue;
            };
            // A port's backends share its addresses' family; a flow of the other family
            // (a dual-stack port's other plan has its own name) never pairs with them.
            for &(endpoint, endpoint_port) in gone
                .iter()
                .filter(|(e, _)| e.is_ipv6() == address.is_ipv6())
            {
                out.push(StaleConntrack {
                    ip_proto,
                    address,
                    port,
                    endpoint,
                    endpoint_port,
                });
            }
        }
    }
    out
}

/// What an update touched, to send as steps ([`Shards::steps`]): the previous entries of the
/// flows it touched in table order, and of the groups.
pub struct Pending {
    flows: Vec<(Arc<FlowKey>, Held)>,
    groups: BTreeMap<u32, Held>,
}

/// The most changed services settled at once whose plans an update keeps to their render
/// (unless [`Shards::keep_plans_up_to`] says otherwise): at least [`SETTLE_PART`], so by
/// default every plan is kept, at most a part's at a time (ten engines of a central
/// controller each holding 10,000 plans while waiting on its switch took its peak from 144
/// to 200 MiB).
pub const PLANS_KEPT_MAX: usize = 256;

/// How many changed services an update settles at a time (unless [`Shards::settle_up_to`]
/// says otherwise): planned, and their group names given ids. Settling the 30,000 services of
/// a first load at once took 0.09 s before the first step could go out (`docs/performance.md`).
pub const SETTLE_PART: usize = PLANS_KEPT_MAX;

/// An update under way ([`Shards::begin_update`]): the changed services it has still to
/// render, in key order, with their plans when it keeps them.
pub struct Update<'a> {
    node: &'a Node,
    model: &'a Model,
    config: &'a Config,
    bindings: &'a NodeBindings,
    /// The changed services still in the model, in key order; those from `settled` on are
    /// not planned yet.
    unsettled: Vec<InModel<'a>>,
    settled: usize,
    /// The settled services to render.
    dirty: std::collections::btree_map::IntoIter<&'a ServiceKey, (InModel<'a>, Prepared)>,
    /// The model, to remember once every service is rendered; `None` after.
    seen: Option<Seen>,
}

/// A service of an update's model, with the model's own key and endpoints for it: found
/// once, as the update begins, and not looked up again in the model's ordered maps (several
/// string-comparing lookups per service were a tenth of a bulk load's engine time).
#[derive(Clone, Copy)]
struct InModel<'a> {
    key: &'a ServiceKey,
    service: &'a Service,
    endpoints: Option<&'a Vec<crate::model::Endpoint>>,
}

impl<'a> InModel<'a> {
    /// The service with `key` in `model`, if it has one.
    fn find(model: &'a Model, key: &ServiceKey) -> Option<Self> {
        let (key, service) = model.services.get_key_value(key)?;
        Some(InModel {
            key,
            service,
            endpoints: model.endpoints.get(key),
        })
    }
}

/// Every service of `model` in key order, each with its endpoints (both maps walked once,
/// side by side).
fn all_services(model: &Model) -> Vec<InModel<'_>> {
    let mut endpoints = model.endpoints.iter().peekable();
    model
        .services
        .iter()
        .map(|(key, service)| {
            while endpoints.next_if(|(k, _)| *k < key).is_some() {}
            InModel {
                key,
                service,
                endpoints: endpoints.next_if(|(k, _)| *k == key).map(|(_, e)| e),
            }
        })
        .collect()
}

/// The services whose service or endpoints differ between `seen` and `model`, each once
/// and in key order: those still in `model` (with what it holds for them), and the keys of
/// those that left it. Both diffs come in key order, so they are merged, not collected into
/// a set; for a key in both, the services' diff says whether it stays and the endpoints'
/// diff gives its endpoints, so a first load looks nothing up.
fn changed_services<'a>(seen: &Seen, model: &'a Model) -> (Vec<InModel<'a>>, Vec<ServiceKey>) {
    use imbl::ordmap::DiffItem;
    use std::cmp::Ordering;
    let mut present = Vec::new();
    let mut left = Vec::new();
    let mut services = seen.services.diff(&model.services).peekable();
    let mut endpoints = seen.endpoints.diff(&model.endpoints).peekable();
    loop {
        let order = match (services.peek(), endpoints.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(s), Some(e)) => diff_key(s).cmp(diff_key(e)),
        };
        let service = if order == Ordering::Greater {
            None
        } else {
            services.next()
        };
        let listed = if order == Ordering::Less {
            None
        } else {
            endpoints.next()
        };
        match (service, listed) {
            (
                Some(
                    DiffItem::Add(key, service)
                    | DiffItem::Update {
                        new: (key, service),
                        ..
                    },
                ),
                listed,
            ) => {
                let endpoints = match listed {
                    Some(DiffItem::Add(_, e) | DiffItem::Update { new: (_, e), .. }) => Some(e),
                    Some(DiffItem::Remove(..)) => None,
                    None => model.endpoints.get(key),
                };
                present.push(InModel {
                    key,
                    service,
                    endpoints,
                });
            }
            (Some(DiffItem::Remove(key, _)), _) => left.push(key.clone()),
            // Only the endpoints changed.
            (None, Some(item)) => {
                let key = diff_key(&item);
                match InModel::find(model, key) {
                    Some(found) => present.push(found),
                    None => left.push(key.clone()),
                }
            }
            (None, None) => break,
        }
    }
    (present, left)
}

/// What settling a service prepared for its render.
enum Prepared {
    /// Nothing: it is planned as it renders.
    Later,
    /// Its plans.
    Planned(Vec<PortPlan>, Arc<[Arc<str>]>),
    /// Another node's render of it, to take if its group ids are this node's.
    Rendered(renders::Candidate),
}

/// The previous entries of the flows and groups an update touches, and the shards it
/// rendered.
#[derive(Default)]
struct Before {
    flows: KeyMap<Held>,
    groups: BTreeMap<u32, Held>,
    rendered: Vec<Owner>,
}

/// Where an entry was before an update: the shard that held it (none: there was none).
/// Shards are immutable and shared, so keeping one costs a reference count where a copy of
/// its entries cost their bytes: a re-render of every service (a changed node,
/// configuration or port binding) at 30,000 services × 10 endpoints copied ~150 MiB of
/// entries, most of them unchanged (issue 19).
type Held = Option<Arc<Shard>>;

fn held_flow<'a>(held: &'a Held, key: &FlowKey) -> Option<&'a FlowEntry> {
    held.as_ref()?.flows.get(key)
}

fn held_group(held: &Held, id: u32) -> Option<&GroupEntry> {
    held.as_ref()?.groups.get(&id)
}

/// How many pods each namespace has on each node.
fn pod_namespaces(pods: &Map<String, PodInterface>) -> BTreeMap<(String, String), usize> {
    let mut out: BTreeMap<(String, String), usize> = BTreeMap::new();
    for pod in pods.values() {
        *out.entry((pod.namespace.clone(), pod.node.clone()))
            .or_default() += 1;
    }
    out
}

/// The namespaces' pod counts after the pods changed from `seen`'s to `model`'s, and whether
/// the node's own part must be rendered again: a pod on `node` changed, the namespaces or
/// the nodes changed, or a namespace gained its first pod on some node or lost its last.
fn pods_changed(
    seen: &Seen,
    model: &Model,
    node: &str,
) -> (BTreeMap<(String, String), usize>, bool) {
    let mut counts = seen.pod_namespaces.clone();
    // The other nodes' addresses and pod CIDRs are the overlay's routes.
    let mut dirty = seen.namespaces != model.namespaces || seen.nodes != model.nodes;
    let mut count = |pod: &PodInterface, up: bool, dirty: &mut bool| {
        *dirty |= pod.node == node;
        let key = (pod.namespace.clone(), pod.node.clone());
        let n = counts.entry(key.clone()).or_default();
        if up {
            *n += 1;
            *dirty |= *n == 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&key);
                *dirty = true;
            }
        }
    };
    for item in seen.pods.diff(&model.pods) {
        match item {
            imbl::ordmap::DiffItem::Add(_, pod) => count(pod, true, &mut dirty),
            imbl::ordmap::DiffItem::Remove(_, pod) => count(pod, false, &mut dirty),
            imbl::ordmap::DiffItem::Update { old, new } => {
                count(old.1, false, &mut dirty);
                count(new.1, true, &mut dirty);
            }
        }
    }
    (counts, dirty)
}

impl Shards {
    /// How many changed services' plans an update keeps from where their group names are
    /// settled ([`Shards::settle_up_to`] at a time) to their render; when it settles more at
    /// once it plans each again as it renders ([`PLANS_KEPT_MAX`] by default). Either way the
    /// result is the same.
    pub fn keep_plans_up_to(&mut self, max: usize) {
        self.plans_kept_max = max;
    }

    /// How many changed services an update plans and gives group ids at a time
    /// ([`SETTLE_PART`] by default): an update settles the first ones at its start and the
    /// next ones once it has rendered those. Either way the result is the same.
    pub fn settle_up_to(&mut self, max: usize) {
        self.settle_max = max;
    }

    /// Brings the shards to `model`'s state for `node` and returns the steps from the
    /// previous state to the new one.
    pub fn update(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
    ) -> Delta {
        let pending = self.update_pending(node, model, config, bindings);
        self.steps(&pending).map(Step::cloned).collect()
    }

    /// Brings the shards to `model`'s state for `node`, like [`Shards::update`], and returns
    /// what it touched, whose steps [`Shards::steps`] gives one at a time: a change to every
    /// service is sent without holding a copy of the whole state.
    pub fn update_pending(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
    ) -> Pending {
        self.recent.clear();
        let mut before = Some(Before::default());
        self.render(node, model, config, bindings, &mut before);
        self.pending(before.unwrap_or_default())
    }

    /// Starts bringing the shards to `model`'s state for `node` a part at a time, so that
    /// the steps of the first services go to the switch while the next ones render: returns
    /// the update, and what its first part touched (the node's own flows and the services
    /// that left). [`Shards::continue_update`] renders the changed services. Until the update
    /// is done the shards remember no model, so one given up halfway (its switch failed)
    /// leaves the next update to render everything.
    pub fn begin_update<'a>(
        &mut self,
        node: &'a Node,
        model: &'a Model,
        config: &'a Config,
        bindings: &'a NodeBindings,
    ) -> (Update<'a>, Pending) {
        self.recent.clear();
        let mut before = Some(Before::default());
        let update = self.begin(node, model, config, bindings, &mut before);
        (update, self.pending(before.unwrap_or_default()))
    }

    /// Renders up to `max` more of `update`'s changed services and returns what they touched;
    /// `None` once the update is done. Each part's steps ([`Shards::steps`]) take the switch
    /// from the state the parts before left to one where these services are up to date too.
    pub fn continue_update(&mut self, update: &mut Update<'_>, max: usize) -> Option<Pending> {
        update.seen.as_ref()?;
        let mut before = Some(Before::default());
        self.render_dirty(update, max, &mut before);
        Some(self.pending(before.unwrap_or_default()))
    }

    /// What `before` recorded, with the conflicts of what it rendered added to the recent
    /// ones.
    fn pending(&mut self, before: Before) -> Pending {
        let recent: Vec<String> = before
            .rendered
            .iter()
            .filter(|o| self.conflicted.contains(*o))
            .filter_map(|o| self.shard(o))
            .flat_map(|s| s.conflicts.iter().cloned())
            .collect();
        self.recent.extend(recent);
        let rendered: BTreeSet<&Owner> = before.rendered.iter().collect();
        let mut flows: Vec<(Arc<FlowKey>, Held)> = before.flows.into_iter().collect();
        flows.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut collisions = Vec::new();
        for (key, was) in flows.iter().filter(|(k, _)| self.shared.contains_key(k)) {
            collisions.extend(self.collision_since(key, held_flow(was, key), &rendered));
        }
        self.recent.extend(collisions);
        Pending {
            flows,
            groups: before.groups,
        }
    }

    /// The steps from the state before `pending`'s update to the current one, in the order
    /// [`crate::plan::plan`] gives them: groups added, then modified, flows added or
    /// modified, flows deleted, groups deleted. svcflow's groups never point at other groups,
    /// so no group needs another first.
    pub fn steps<'a>(
        &'a self,
        pending: &'a Pending,
    ) -> impl Iterator<Item = Step<&'a FlowKey, &'a FlowEntry, &'a GroupEntry>> + Send + 'a {
        let before = pending;
        let groups = move |added: bool| {
            before.groups.iter().filter_map(move |(id, held)| {
                let now = self.group(*id)?;
                match held_group(held, *id) {
                    None if added => Some(Step::AddGroup(*id, now)),
                    Some(was) if !added && was != now => Some(Step::ModifyGroup(*id, now)),
                    _ => None,
                }
            })
        };
        let flows = before.flows.iter().filter_map(move |(key, held)| {
            let now = self.flow(key)?;
            match held_flow(held, key) {
                None => Some(Step::AddFlow(&**key, now)),
                Some(was) if was != now => Some(crate::plan::changed_flow(&was, &**key, now)),
                Some(_) => None,
            }
        });
        let flow_deletes = before
            .flows
            .iter()
            .filter(move |(key, held)| held_flow(held, key).is_some() && self.flow(key).is_none())
            .map(|(key, _)| Step::DeleteFlow(&**key));
        let group_deletes = before
            .groups
            .iter()
            .rev()
            .filter(move |(id, held)| {
                held_group(held, **id).is_some() && self.group(**id).is_none()
            })
            .map(|(id, _)| Step::DeleteGroup(*id));
        groups(true)
            .chain(groups(false))
            .chain(flows)
            .chain(flow_deletes)
            .chain(group_deletes)
    }

    /// The conflicts of what the last [`Shards::update`] rendered, or all of them after a
    /// [`Shards::refresh`].
    pub fn recent_conflicts(&self) -> &[String] {
        &self.recent
    }

    /// The conntrack entries that updates since the last call made stale, each once.
    pub fn take_stale(&mut self) -> Vec<StaleConntrack> {
        let mut stale = std::mem::take(&mut self.stale);
        stale.sort_unstable();
        stale.dedup();
        stale
    }

    /// Puts back stale entries that could not be flushed yet.
    pub fn restore_stale(&mut self, stale: Vec<StaleConntrack>) {
        self.stale.extend(stale);
    }

    /// Brings the shards to `model`'s state without working out what changed, for when the
    /// switch is about to be compared with the whole state anyway.
    pub fn refresh(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
    ) {
        self.render(node, model, config, bindings, &mut None);
        self.recent = self.conflicts();
    }

    fn render(
        &mut self,
        node: &Node,
        model: &Model,
        config: &Config,
        bindings: &NodeBindings,
        before: &mut Option<Before>,
    ) {
        let mut update = self.begin(node, model, config, bindings, before);
        self.render_dirty(&mut update, usize::MAX, before);
    }

    /// The first part of an update: what changed, the node's own part, the services that
    /// left, and the first changed services' plans and group ids ([`Shards::settle_up_to`]);
    /// the changed services are left in the returned update.
    fn begin<'a>(
        &mut self,
        node: &'a Node,
        model: &'a Model,
        config: &'a Config,
        bindings: &'a NodeBindings,
        before: &mut Option<Before>,
    ) -> Update<'a> {
        for key in std::mem::take(&mut self.released) {
            self.renders.release(&key);
        }
        self.generation = self.renders.enter(model, config, self.generation.take());
        let context = hash_of(&(node, config, bindings));
        let seen = self.seen.take().filter(|_| self.context == Some(context));
        self.context = Some(context);
        let (pod_namespaces, node_dirty) = match &seen {
            Some(seen) => pods_changed(seen, model, &node.name),
            None => (pod_namespaces(&model.pods), true),
        };
        if node_dirty {
            let out = render_base(node, model, config, bindings);
            self.replace(
                Owner::Node,
                Some(Arc::new(Shard::new(None, Arc::from([]), out))),
                before,
            );
        }
        // The services whose service or endpoints changed: all of them without a previous
        // model to diff with. Services that left go at once, with their group names; the
        // changed services that remain are settled (planned, their group names given ids) a
        // part at a time as they render, so that the first part's steps go to the switch
        // before the rest is planned.
        let (unsettled, left) = match &seen {
            Some(seen) => changed_services(seen, model),
            None => {
                let mut left: Vec<ServiceKey> = self
                    .services
                    .keys()
                    .filter(|k| !model.services.contains_key(&***k))
                    .map(|k| ServiceKey::clone(k))
                    .collect();
                left.sort_unstable();
                (all_services(model), left)
            }
        };
        let mut removed: Vec<ServiceKey> = Vec::new();
        let mut gone: Vec<Arc<str>> = Vec::new();
        for key in left {
            // A key that left the model but was never rendered has nothing to take away.
            let Some(s) = self.services.get(&key) else {
                continue;
            };
            gone.extend(s.names.iter().cloned());
            removed.push(key);
        }
        let mut dirty = BTreeMap::new();
        self.give_ids(&gone, &[], model, &mut dirty, &unsettled);
        for key in removed {
            let owner = Owner::Service(Arc::new(key));
            self.replace(owner.clone(), None, before);
            if let Owner::Service(key) = owner {
                self.renders.release(&key);
                self.released.push(key);
            }
        }
        let seen = Seen {
            nodes: model.nodes.clone(),
            pods: model.pods.clone(),
            namespaces: model.namespaces.clone(),
            services: model.services.clone(),
            endpoints: model.endpoints.clone(),
            pod_namespaces,
        };
        let mut update = Update {
            node,
            model,
            config,
            bindings,
            unsettled,
            settled: 0,
            dirty: dirty.into_iter(),
            seen: Some(seen),
        };
        self.settle(&mut update);
        update
    }

    /// Plans the next [`Shards::settle_up_to`] of `update`'s unsettled services and gives
    /// their group names ids, adding them to the services it has to render (with their plans
    /// when [`Shards::keep_plans_up_to`] allows), after those left from before.
    fn settle<'a>(&mut self, update: &mut Update<'a>) {
        let (node, model, config) = (update.node, update.model, update.config);
        let from = update.settled;
        let to = from
            .saturating_add(self.settle_max.max(1))
            .min(update.unsettled.len());
        update.settled = to;
        let part = &update.unsettled[from..to];
        let keep = part.len() <= self.plans_kept_max;
        let mut dirty: BTreeMap<&'a ServiceKey, (InModel<'a>, Prepared)> =
            update.dirty.by_ref().collect();
        // The part's services, built into a map at once and appended to what is left from
        // before, where an insert each compared keys down the tree (2.5 % of a first load's
        // render).
        let mut fresh: Vec<(&'a ServiceKey, (InModel<'a>, Prepared))> =
            Vec::with_capacity(part.len());
        let mut gone: Vec<Arc<str>> = Vec::new();
        let mut new: Vec<Arc<str>> = Vec::new();
        for found in part {
            let InModel {
                key,
                service,
                endpoints: listed,
            } = *found;
            let was = self
                .services
                .get(key)
                .map(|s| &s.names[..])
                .unwrap_or_default();
            let endpoints = listed.map_or(&[][..], Vec::as_slice);
            // Another node's render of the same service and endpoints, when nothing in it
            // can depend on the node: its group names are this node's too.
            let rendered = self
                .generation
                .filter(|_| renders_alike_on_every_node(service, endpoints, config))
                .and_then(|g| self.renders.candidate(g, key, service, listed));
            let (now, prepared) = match rendered {
                Some(candidate) => (
                    Arc::clone(&candidate.shard.names),
                    Prepared::Rendered(candidate),
                ),
                None => {
                    let plans = service_plans(service, endpoints, node, config);
                    let names: Arc<[Arc<str>]> = plan_names(&plans).into();
                    let prepared = if keep {
                        Prepared::Planned(plans, Arc::clone(&names))
                    } else {
                        Prepared::Later
                    };
                    (names, prepared)
                }
            };
            gone.extend(was.iter().filter(|n| !now.contains(n)).cloned());
            new.extend(now.iter().filter(|n| !was.contains(n)).cloned());
            fresh.push((key, (*found, prepared)));
        }
        dirty.append(&mut fresh.into_iter().collect());
        let later = &update.unsettled[to..];
        self.give_ids(&gone, &new, model, &mut dirty, later);
        update.dirty = dirty.into_iter();
    }

    /// Takes `gone` group names from the allocator and gives `new` ones ids; the services of
    /// names whose id moved (a collision resolved anew) join `dirty`, unless they are still
    /// to settle (`later`, sorted).
    fn give_ids<'a>(
        &mut self,
        gone: &[Arc<str>],
        new: &[Arc<str>],
        model: &'a Model,
        dirty: &mut BTreeMap<&'a ServiceKey, (InModel<'a>, Prepared)>,
        later: &[InModel<'a>],
    ) {
        if gone.is_empty() && new.is_empty() {
            return;
        }
        for name in gone {
            self.name_owner.remove(name);
        }
        let moved = self.renders.update_ids(&mut self.ids, gone, new);
        // A moved name is an old one: its entry still names its service (the dirty services'
        // entries are brought up to date once they are rendered).
        for name in moved {
            let Some(key) = self.name_owner.get(&name) else {
                continue;
            };
            if dirty.contains_key(&**key) || later.binary_search_by(|l| l.key.cmp(key)).is_ok() {
                continue;
            }
            // Planned as it renders.
            if let Some(found) = InModel::find(model, key) {
                dirty.insert(found.key, (found, Prepared::Later));
            }
        }
    }

    /// Renders up to `max` of `update`'s changed services; once none is left the shards
    /// remember the update's model.
    fn render_dirty(&mut self, update: &mut Update<'_>, max: usize, before: &mut Option<Before>) {
        let mut left = max;
        loop {
            left -= self.render_settled(update, left, before);
            if left == 0 || update.settled == update.unsettled.len() {
                break;
            }
            self.settle(update);
        }
        if update.dirty.len() == 0 && update.settled == update.unsettled.len() {
            self.seen = update.seen.take();
            self.renders
                .converge(&mut self.ids, &mut self.name_owner, &mut self.group_owners);
        }
    }

    /// Renders up to `max` of `update`'s settled services; returns how many it took.
    fn render_settled(
        &mut self,
        update: &mut Update<'_>,
        max: usize,
        before: &mut Option<Before>,
    ) -> usize {
        let (node, config, bindings) = (update.node, update.config, update.bindings);
        let mut taken = 0;
        for (key, (found, prepared)) in update.dirty.by_ref().take(max) {
            taken += 1;
            let (service, listed) = (found.service, found.endpoints);
            let endpoints = listed.map_or(&[][..], Vec::as_slice);
            let (plans, names) = match prepared {
                Prepared::Rendered(candidate)
                    if self.has_ids(&candidate.shard.names, &candidate.ids) =>
                {
                    self.renders.reused();
                    let shard = candidate.shard;
                    let key = shard.key.clone().unwrap_or_else(|| Arc::new(key.clone()));
                    self.own(&shard, &key);
                    self.replace(Owner::Service(key), Some(shard), before);
                    continue;
                }
                // The names settling gave the allocator, so the node holds each once.
                Prepared::Planned(plans, names) => (plans, names),
                Prepared::Rendered(_) | Prepared::Later => {
                    let plans = service_plans(service, endpoints, node, config);
                    let names = plan_names(&plans).into();
                    (plans, names)
                }
            };
            let no_local = no_local_endpoints(service, endpoints, &node.name);
            let out = render_service(
                service,
                endpoints,
                node,
                plans,
                self.ids.ids(),
                config,
                bindings,
            );
            let shard = self.renders.intern(
                key,
                Shard::new(Some(key.clone()), names, out).with_no_local(no_local),
            );
            let key = shard.key.clone().unwrap_or_else(|| Arc::new(key.clone()));
            if let Some(generation) = self.generation
                && renders_alike_on_every_node(service, endpoints, config)
            {
                let ids = self.ids_of(&shard.names);
                self.renders
                    .record(generation, &key, service, listed, ids, &shard);
            }
            self.own(&shard, &key);
            self.replace(Owner::Service(key), Some(shard), before);
        }
        taken
    }

    /// Whether this node's allocator gives `names` the ids `ids`.
    fn has_ids(&self, names: &[Arc<str>], ids: &[Option<u32>]) -> bool {
        names.len() == ids.len()
            && names
                .iter()
                .zip(ids)
                .all(|(n, id)| self.ids.ids().get(n) == id.as_ref())
    }

    /// The ids this node's allocator gives `names`.
    fn ids_of(&self, names: &[Arc<str>]) -> Arc<[Option<u32>]> {
        names
            .iter()
            .map(|n| self.ids.ids().get(n).copied())
            .collect()
    }

    /// Records that `key`'s service needs `shard`'s group names.
    fn own(&mut self, shard: &Shard, key: &Arc<ServiceKey>) {
        for name in shard.names.iter() {
            // The allocator's copy of the name (most often this very one), so the node
            // keeps no other alive.
            let name = self.ids.ids().get_key_value(name).map_or(name, |(n, _)| n);
            self.name_owner.insert(Arc::clone(name), Arc::clone(key));
        }
    }

    /// What health-check node port `port` answers on the node: its first owner's answer.
    pub fn health_check(&self, port: u16) -> Option<&HealthCheck> {
        let owner = self.health_owners.get(&port)?.first()?;
        let (_, check) = self.shard(owner)?.health.as_deref()?;
        Some(check)
    }

    /// What every health-check node port answers on the node.
    pub fn health_checks(&self) -> BTreeMap<u16, HealthCheck> {
        self.health_owners
            .keys()
            .filter_map(|&port| Some((port, self.health_check(port)?.clone())))
            .collect()
    }

    /// A number that changes whenever what a health-check node port answers may have.
    pub fn health_version(&self) -> u64 {
        self.health_version
    }

    /// The whole desired state, as one render of the model would give it.
    pub fn materialize(&self) -> DesiredState {
        let mut out = DesiredState {
            health: self.health_checks(),
            ..DesiredState::default()
        };
        for (key, owner) in &self.flow_owner {
            if let Some(entry) = self.entry(owner, key) {
                out.state.flows.insert(FlowKey::clone(key), entry.clone());
            }
        }
        for (id, owner) in self.group_owners.iter() {
            if let Some(g) = self.shard(owner).and_then(|s| s.groups.get(id)) {
                out.state.groups.insert(*id, g.clone());
            }
        }
        let mut services: Vec<(&Arc<ServiceKey>, &Arc<Shard>)> = self.services.iter().collect();
        services.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for shard in self.node.iter().chain(services.into_iter().map(|(_, s)| s)) {
            out.services
                .extend(shard.services.iter().map(|(k, v)| (k.clone(), v.clone())));
            out.conflicts.extend(shard.conflicts.iter().cloned());
        }
        out.conflicts.extend(self.collisions());
        out
    }

    /// The messages that turn a switch holding `actual` into the desired state, each with
    /// what it does: groups first, then flows, then deletions of flows and then of groups.
    /// svcflow's groups never point at other groups, so no group needs another first. The
    /// messages are made as they are taken, so a full sync never holds a second copy of the
    /// state.
    pub fn full_plan<'a>(
        &'a self,
        actual: &'a SwitchState,
    ) -> impl Iterator<Item = (Change, Body)> + Send + 'a {
        let groups = self.group_owners.iter().filter_map(move |(id, owner)| {
            let g = self.shard(owner)?.groups.get(id)?;
            let command = match actual.groups.get(id) {
                None => GroupModCommand::Add,
                Some(a) if a != g => GroupModCommand::Modify,
                Some(_) => return None,
            };
            Some((Change::Group, group_mod(command, *id, Some(g))))
        });
        let flows = self.sorted_flows().into_iter().filter_map(move |(key, e)| {
            // The same steps, and so the same messages, as an update's (a changed cookie is
            // a replace).
            let (change, step): (_, Step<_, _, &GroupEntry>) = match actual.flows.get(key) {
                None => (Change::AddFlow, Step::AddFlow(key, e)),
                Some(a) if a != e => (Change::ModifyFlow, crate::plan::changed_flow(&a, key, e)),
                Some(_) => return None,
            };
            Some((change, crate::apply::message(&step)))
        });
        let flow_deletes = actual
            .flows
            .keys()
            .filter(move |k| !self.flow_owner.contains_key(*k))
            .map(|k| {
                (
                    Change::DeleteFlow,
                    flow_mod(FlowModCommand::DeleteStrict, k, None),
                )
            });
        let group_deletes = actual
            .groups
            .keys()
            .filter(move |id| !self.group_owners.contains_key(*id))
            .map(|id| (Change::Group, group_mod(GroupModCommand::Delete, *id, None)));
        groups.chain(flows).chain(flow_deletes).chain(group_deletes)
    }

    /// Each service port's group and backends, by `namespace/name:port/protocol`.
    pub fn services(&self) -> BTreeMap<String, ServicePortState> {
        self.services
            .values()
            .flat_map(|s| s.services.iter().map(|(k, v)| (k.clone(), v.clone())))
            .collect()
    }

    /// The services' ports under a `Local` traffic policy without a local endpoint on this
    /// node, by policy (kept up to date as shards change, not counted again).
    pub fn no_local_endpoints(&self) -> NoLocal {
        self.no_local
    }

    /// The number of desired flows and groups.
    pub fn len(&self) -> (usize, usize) {
        (self.flow_owner.len(), self.group_owners.len())
    }

    /// Whether nothing is desired yet.
    pub fn is_empty(&self) -> bool {
        self.flow_owner.is_empty() && self.group_owners.is_empty()
    }

    /// Every desired flow, in table order.
    pub fn flows(&self) -> impl Iterator<Item = (&FlowKey, &FlowEntry)> + Clone + '_ {
        self.sorted_flows().into_iter()
    }

    /// Every desired flow and its entry, sorted into table order (the index is unordered).
    fn sorted_flows(&self) -> Vec<(&FlowKey, &FlowEntry)> {
        let mut out: Vec<(&FlowKey, &FlowEntry)> = self
            .flow_owner
            .iter()
            .filter_map(|(key, owner)| Some((&**key, self.entry(owner, key)?)))
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out
    }

    /// The desired entry of one flow.
    pub fn flow(&self, key: &FlowKey) -> Option<&FlowEntry> {
        self.entry(self.flow_owner.get(key)?, key)
    }

    /// Inputs that could not all be honoured: each shard's own, and flows rendered by two
    /// owners with different entries.
    pub fn conflicts(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .conflicted
            .iter()
            .filter_map(|o| self.shard(o))
            .flat_map(|s| s.conflicts.iter().cloned())
            .collect();
        out.extend(self.collisions());
        out
    }

    /// Flows rendered by two owners with different entries; the first owner's wins.
    fn collisions(&self) -> Vec<String> {
        let mut keys: Vec<&Arc<FlowKey>> = self.shared.keys().collect();
        keys.sort_unstable();
        keys.into_iter().flat_map(|k| self.collision(k)).collect()
    }

    /// The collisions on flow `key` that an update rendering `rendered` may have made, given
    /// the entry it had before (`was`). A flow that thousands of services share (the DNAT
    /// flow of an endpoint backing them all) costs only the owners just rendered, unless the
    /// winning entry itself changed, when every owner is compared with it again.
    fn collision_since(
        &self,
        key: &FlowKey,
        was: Option<&FlowEntry>,
        rendered: &BTreeSet<&Owner>,
    ) -> Vec<String> {
        let Some(owners) = self.owners(key) else {
            return Vec::new();
        };
        let Some(first) = owners.first() else {
            return Vec::new();
        };
        let kept = self.entry(first, key);
        if rendered.contains(first) || kept != was {
            return self.collision(key);
        }
        let Some(kept) = kept else {
            return Vec::new();
        };
        rendered
            .iter()
            .filter(|o| *o != &first && owners.binary_search(o).is_ok())
            .filter_map(|o| self.entry(o, key))
            .filter(|dropped| differs(dropped, kept))
            .map(|dropped| collision_message(key, kept, dropped))
            .collect()
    }

    /// The owners of flow `key` whose entries differ from the first owner's, which wins.
    fn collision(&self, key: &FlowKey) -> Vec<String> {
        let owners = self.owners(key).unwrap_or_default();
        self.differing(key, owners)
            .map(|(kept, dropped)| collision_message(key, kept, dropped))
            .collect()
    }

    /// The entries of `owners` after the first that render flow `key` differently from the
    /// first's, each with the first's (which wins).
    fn differing<'a>(
        &'a self,
        key: &'a FlowKey,
        owners: &'a [Owner],
    ) -> impl Iterator<Item = (&'a FlowEntry, &'a FlowEntry)> + 'a {
        let kept = owners.first().and_then(|o| self.entry(o, key));
        owners
            .iter()
            .skip(1)
            .filter_map(move |o| Some((kept?, self.entry(o, key)?)))
            .filter(|(kept, e)| differs(e, kept))
    }

    /// The owners of flow `key`, in order.
    fn owners(&self, key: &FlowKey) -> Option<&[Owner]> {
        match self.shared.get(key) {
            Some(shared) => Some(&shared.owners),
            None => self.flow_owner.get(key).map(std::slice::from_ref),
        }
    }

    /// How many conflicts [`Shards::conflicts`] would list, kept as shards come and go (in
    /// time proportional to what they touch, not to the state).
    pub fn conflict_count(&self) -> usize {
        self.own_conflicts + self.collided
    }

    /// Counts flow `key`'s collisions again (its first owner changed) and keeps the sum.
    fn recount(&mut self, key: &FlowKey) {
        let Some(shared) = self.shared.get(key) else {
            return;
        };
        let (was, now) = (
            shared.differing,
            self.differing(key, &shared.owners).count(),
        );
        if let Some(shared) = self.shared.get_mut(key) {
            shared.differing = now;
        }
        self.collided = self.collided - was + now;
    }

    /// Adds `owner`, whose shard is already held, to flow `key`'s owners.
    fn add_flow_owner(&mut self, key: &Arc<FlowKey>, owner: &Owner) {
        use std::collections::hash_map::Entry;
        let first = match self.flow_owner.entry(Arc::clone(key)) {
            Entry::Vacant(slot) => {
                slot.insert(owner.clone());
                return;
            }
            Entry::Occupied(first) => first.get().clone(),
        };
        let wins = *owner < first;
        // Unless it wins (when every other owner is compared with it), one comparison.
        let differing = !wins
            && matches!(
                (self.entry(owner, key), self.entry(&first, key)),
                (Some(e), Some(kept)) if differs(e, kept)
            );
        let shared = self
            .shared
            .entry(Arc::clone(key))
            .or_insert_with(|| SharedFlow {
                owners: smallvec::smallvec![first],
                differing: 0,
            });
        add_owner(&mut shared.owners, owner);
        if wins {
            self.flow_owner.insert(Arc::clone(key), owner.clone());
            self.recount(key);
        } else if differing {
            shared.differing += 1;
            self.collided += 1;
        }
    }

    /// Takes `owner`, whose shard is no longer held and rendered flow `key` as `was`, from
    /// the flow's owners, if it is one.
    fn remove_owner(&mut self, key: &FlowKey, owner: &Owner, was: &FlowEntry) {
        let Some(shared) = self.shared.get(key) else {
            if self.flow_owner.get(key) == Some(owner) {
                self.flow_owner.remove(key);
            }
            return;
        };
        let Some(first) = shared.owners.first() else {
            return;
        };
        let won = first == owner;
        let differing = !won
            && shared.owners.contains(owner)
            && self.entry(first, key).is_some_and(|k| differs(was, k));
        let Some(shared) = self.shared.get_mut(key) else {
            return;
        };
        shared.owners.retain(|o| o != owner);
        if differing {
            shared.differing -= 1;
            self.collided -= 1;
        }
        match shared.owners.first().cloned() {
            Some(winner) => {
                let alone = shared.owners.len() < 2;
                if let Some(first) = self.flow_owner.get_mut(key) {
                    *first = winner;
                }
                if won {
                    self.recount(key);
                }
                if alone && let Some(gone) = self.shared.remove(key) {
                    self.collided -= gone.differing;
                }
            }
            None => {
                if let Some(gone) = self.shared.remove(key) {
                    self.collided -= gone.differing;
                }
                self.flow_owner.remove(key);
            }
        }
    }

    fn shard(&self, owner: &Owner) -> Option<&Shard> {
        self.held(owner).map(|s| &**s)
    }

    fn held(&self, owner: &Owner) -> Option<&Arc<Shard>> {
        match owner {
            Owner::Node => self.node.as_ref(),
            Owner::Service(key) => self.services.get(key.as_ref()),
        }
    }

    /// The desired entry of one group.
    fn group(&self, id: u32) -> Option<&GroupEntry> {
        self.shard(self.group_owners.get(&id)?)?.groups.get(&id)
    }

    fn entry(&self, owner: &Owner, key: &FlowKey) -> Option<&FlowEntry> {
        self.shard(owner)?.flows.get(key)
    }

    fn remember(&self, before: &mut Before, shard: &Shard) {
        use std::collections::hash_map::Entry;
        for key in shard.flows.keys() {
            // One lookup: an update's keys are mostly new to it.
            if let Entry::Vacant(slot) = before.flows.entry(Arc::clone(key)) {
                let held = self
                    .flow_owner
                    .get(key)
                    .and_then(|owner| self.held(owner))
                    .cloned();
                slot.insert(held);
            }
        }
        for id in shard.groups.keys() {
            if !before.groups.contains_key(id) {
                let held = self
                    .group_owners
                    .get(id)
                    .and_then(|owner| self.held(owner))
                    .cloned();
                before.groups.insert(*id, held);
            }
        }
    }

    /// Replaces `owner`'s shard, recording the previous entries of everything it touches.
    fn replace(&mut self, owner: Owner, new: Option<Arc<Shard>>, before: &mut Option<Before>) {
        // What the switch holds for every key either shard touches, before anything moves.
        if let Some(before) = before.as_mut() {
            if new.is_some() {
                before.rendered.push(owner.clone());
            }
            if let Some(old) = self.shard(&owner) {
                self.remember(before, old);
            }
            if let Some(new) = &new {
                self.remember(before, new);
            }
        }
        let old = match &owner {
            Owner::Node => self.node.take(),
            Owner::Service(key) => self.services.remove(key.as_ref()),
        };
        if let Some(old) = &old {
            self.no_local = self.no_local - old.no_local;
            if let Some((port, _)) = old.health.as_deref()
                && let Some(owners) = self.health_owners.get_mut(port)
            {
                owners.retain(|o| o != &owner);
                if owners.is_empty() {
                    self.health_owners.remove(port);
                }
                self.health_version += 1;
            }
            if before.is_some() {
                self.stale.extend(stale_conntrack(old, new.as_deref()));
            }
            self.own_conflicts -= old.conflicts.len();
            for (key, was) in old.flows.iter() {
                self.remove_owner(key, &owner, was);
            }
            for id in old.groups.keys() {
                if self.group_owners.get(id) == Some(&owner) {
                    self.group_owners.remove(id);
                }
            }
        }
        self.conflicted.remove(&owner);
        let Some(new) = new else { return };
        self.no_local = self.no_local + new.no_local;
        if let Some((port, _)) = new.health.as_deref() {
            add_owner(self.health_owners.entry(*port).or_default(), &owner);
            self.health_version += 1;
        }
        if !new.conflicts.is_empty() {
            self.conflicted.insert(owner.clone());
        }
        self.own_conflicts += new.conflicts.len();
        // Held first, so that its entries can be compared with the other owners'.
        match &owner {
            Owner::Node => self.node = Some(Arc::clone(&new)),
            Owner::Service(key) => {
                self.services.insert(Arc::clone(key), Arc::clone(&new));
            }
        }
        for key in new.flows.keys() {
            self.add_flow_owner(key, &owner);
        }
        for id in new.groups.keys() {
            self.group_owners.insert(*id, owner.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::scenario::Scenario;

    /// The `node-services` scenario, a second node of it ("other"), and its model with both.
    fn with_another_node() -> (Scenario, Node, Model) {
        let s = Scenario::parse(include_str!(
            "../../tests/scenarios/node-services/input.toml"
        ))
        .unwrap();
        let mut other = s.node.clone();
        other.name = "other".to_string();
        other.ips = vec!["192.0.2.77".parse().unwrap()];
        let mut model = s.model.clone();
        model.nodes.insert(s.node.name.clone(), s.node.clone());
        model.nodes.insert(other.name.clone(), other.clone());
        (s, other, model)
    }

    /// An update's changed services come once each and in key order, whichever of the
    /// service and its endpoints changed, holding the new model's own entries; the keys
    /// whose service left the model come apart, also when only endpoints are left of it.
    #[test]
    fn changed_services_merge_both_diffs_in_key_order() {
        let s = Scenario::parse(include_str!(
            "../../tests/scenarios/node-services/input.toml"
        ))
        .unwrap();
        let mut before = s.model.clone();
        let keys: Vec<ServiceKey> = before.services.keys().cloned().collect();
        assert!(keys.len() >= 4, "the scenario has {} services", keys.len());
        let endpoint = before.endpoints.values().flatten().next().unwrap().clone();
        before
            .endpoints
            .insert(keys[3].clone(), vec![endpoint.clone(); 2]);
        let mut model = before.clone();
        // keys[0]: its service and its endpoints change; keys[1]: only its endpoints;
        // keys[2]: its service leaves, its endpoints stay; keys[3]: only its service; and
        // endpoints come for a service there is not.
        model.services.get_mut(&keys[0]).unwrap().uid = "changed".to_string();
        model.services.get_mut(&keys[3]).unwrap().uid = "changed too".to_string();
        model
            .endpoints
            .insert(keys[0].clone(), vec![endpoint.clone()]);
        model
            .endpoints
            .insert(keys[1].clone(), vec![endpoint.clone(); 3]);
        model.services.remove(&keys[2]);
        let nothing = ServiceKey::new("zzz", "no-service");
        model.endpoints.insert(nothing.clone(), vec![endpoint]);
        let seen = Seen {
            nodes: before.nodes.clone(),
            pods: before.pods.clone(),
            namespaces: before.namespaces.clone(),
            services: before.services.clone(),
            endpoints: before.endpoints.clone(),
            pod_namespaces: BTreeMap::new(),
        };
        let (present, left) = changed_services(&seen, &model);
        let present_keys: Vec<&ServiceKey> = present.iter().map(|p| p.key).collect();
        assert_eq!(present_keys, vec![&keys[0], &keys[1], &keys[3]]);
        for p in &present {
            assert!(std::ptr::eq(p.service, model.services.get(p.key).unwrap()));
            assert!(std::ptr::eq(
                p.endpoints.unwrap(),
                model.endpoints.get(p.key).unwrap()
            ));
        }
        assert_eq!(left, vec![keys[2].clone(), nothing]);
        // Without a model before, every service is changed, each with its endpoints.
        let all = all_services(&model);
        assert_eq!(all.len(), model.services.len());
        for found in &all {
            assert_eq!(found.endpoints, model.endpoints.get(found.key));
        }
    }

    /// Two nodes that end their updates with the same group names, owners of names and of
    /// groups share all three, even when each built them alone (one node's whole update
    /// before the other's), and each still holds exactly its own render; a node with a
    /// group of its own keeps its own owners of groups.
    #[test]
    fn nodes_ending_an_update_alike_share_their_group_bookkeeping() {
        let (s, other, mut model) = with_another_node();
        let mut third = other.clone();
        third.name = "third".to_string();
        third.ips = vec!["192.0.2.78".parse().unwrap()];
        model.nodes.insert(third.name.clone(), third.clone());
        let renders = Renders::new();
        let mut a = Shards::sharing(&renders);
        let (mut b, mut c) = (Shards::sharing(&renders), Shards::sharing(&renders));
        a.update(&s.node, &model, &s.config, &s.bindings);
        b.update(&other, &model, &s.config, &s.bindings);
        c.update(&third, &model, &s.config, &s.bindings);
        assert!(!a.name_owner.is_empty() && !a.group_owners.is_empty());
        assert!(a.ids.same_as(&b.ids) && a.ids.same_as(&c.ids));
        assert!(a.name_owner.same_as(&b.name_owner) && a.name_owner.same_as(&c.name_owner));
        // The first node's pods give it flood groups of its own: its owners of groups differ
        // from the others', which share theirs.
        assert!(!a.group_owners.same_entries(&b.group_owners));
        assert!(!a.group_owners.same_as(&b.group_owners));
        assert!(b.group_owners.same_as(&c.group_owners));
        for (node, shards) in [(&other, &b), (&third, &c)] {
            let fresh = crate::desired::desired(node, &model, &s.config, &s.bindings);
            assert!(shards.materialize().state == fresh.state);
        }
        let fresh = crate::desired::desired(&s.node, &model, &s.config, &s.bindings);
        assert!(a.materialize().state == fresh.state);
    }

    /// A node takes another node's render of a service only when its own allocator gives the
    /// service's group names the same ids: here the second node's allocator also holds names
    /// the first one's does not (as names of services that render differently per node
    /// would), in a range small enough that they push the shared names to other ids. The
    /// second node must then hold exactly what it holds rendering alone.
    #[test]
    fn a_render_is_not_taken_when_the_group_ids_differ() {
        let (s, other, model) = with_another_node();
        let max = 64;
        let seeded = |renders: &Renders| {
            let mut shards = Shards::sharing(renders);
            shards.ids = ids::Allocator::new(max);
            shards
        };
        // The group names of the services another node may take.
        let alike: Vec<Arc<str>> = {
            let mut a = seeded(&Renders::new());
            a.update(&s.node, &model, &s.config, &s.bindings);
            model
                .services
                .iter()
                .filter(|(key, service)| {
                    renders_alike_on_every_node(service, model.endpoints_of(key), &s.config)
                })
                .filter_map(|(key, _)| a.services.get(key))
                .flat_map(|shard| shard.names.iter().cloned())
                .collect()
        };
        assert!(!alike.is_empty());
        // As few other names as move one of them to another id (names are placed in sorted
        // order, so these sort first).
        let ids_of = |shards: &Shards| -> Vec<Option<u32>> {
            alike
                .iter()
                .map(|n| shards.ids.ids().get(n).copied())
                .collect()
        };
        let crowd = |shards: &mut Shards, n: usize| {
            let extra: Vec<String> = (0..n).map(|i| format!("0-extra-{i}")).collect();
            shards
                .ids
                .update(std::iter::empty(), extra.iter().map(String::as_str));
        };
        let renders = Renders::new();
        let (mut a, mut b, mut n) = (seeded(&renders), seeded(&renders), 0);
        a.update(&s.node, &model, &s.config, &s.bindings);
        while n < 40 {
            n += 1;
            b = seeded(&renders);
            crowd(&mut b, n);
            b.update(&other, &model, &s.config, &s.bindings);
            if ids_of(&a) != ids_of(&b) {
                break;
            }
        }
        assert_ne!(ids_of(&a), ids_of(&b), "no crowd moved a shared name");
        // Alone, with the same allocator, the second node holds the same state.
        let mut alone = seeded(&Renders::new());
        crowd(&mut alone, n);
        alone.update(&other, &model, &s.config, &s.bindings);
        assert!(
            b.materialize().state == alone.materialize().state,
            "the second node holds a render made with the first node's group ids"
        );
        // And the renders whose ids agreed were still taken.
        assert!(renders.counts().reused > 0, "{:?}", renders.counts());
    }
}
