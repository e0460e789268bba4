//! The store as a [`netvirt::model::Model`]. Pure and deterministic.
//!
//! - A k8s-node becomes a [`Node`] named by its host name (its uid if that is empty), with
//!   its internal and external addresses.
//! - Each pod interface becomes a [`PodInterface`] keyed and bound (`iface_id`) by the
//!   interface uid. COE pods name no node, so the node is the one whose address equals the
//!   pod's `host-ip-address`; failing that, the address itself.
//! - A service becomes a [`Service`] keyed by namespace and name (its uid in the minimal form,
//!   which has no name). No ports means "forward every port": see [`super`].
//! - The endpoints object with the service's namespace and name gives its [`Endpoint`]s; a
//!   minimal-form service's pod uids give endpoints from those pods' interface addresses.
//! - Namespaces get the ELAN ids the store allocated.
//!
//! [`Translator`] keeps the model up to date by key: given the items a write touched
//! ([`Changed`]), it re-translates just them and the services whose endpoints depend on them,
//! editing its model in place. The model's maps are persistent, so publishing a copy costs
//! nothing and each node's engine finds the change by diffing (see [`netvirt::model`]).

use std::collections::BTreeMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::Arc;

use netvirt::model::{
    Endpoint, EndpointPort, MacAddr, Model, Namespace, Node, PodInterface, Service, ServiceKey,
    ServicePort, ServiceType, SessionAffinity, TargetPort, TrafficPolicy,
};

use super::durable::Changed;
use super::store::{HashMap, Store, link};
use super::types::{self, Kind, namespace_name};
use crate::addresses::AddressIndex;

/// The model the store describes.
pub fn to_model(store: &Store) -> Model {
    Translator::new(store).model
}

/// The store's model, kept up to date by key.
#[derive(Debug, Clone, Default)]
pub struct Translator {
    model: Model,
    /// Node name by internal or external address (the first node by uid wins).
    node_by_ip: HashMap<IpAddr, String>,
    /// Pods by interface address (the first by uid wins).
    pod_by_ip: HashMap<IpAddr, Vec<String>>,
    /// Endpoints objects by (namespace, name) (the last by uid wins).
    endpoints_by_name: HashMap<ServiceKey, Vec<String>>,
    /// What each stored item became: a pod's interface uids and addresses, an endpoints
    /// object's (namespace, name), a service's key.
    ///
    /// The endpoints objects and the services are kept with the store's item (its `Arc`, which
    /// a write replaces and the translator then indexes again): translating a service finds
    /// both by hash, where a walk of the store's ordered maps compared about 25 uids each
    /// (a fifth of a container PUT's publication).
    pod_items: HashMap<String, (Vec<String>, Vec<IpAddr>)>,
    endpoints_items: HashMap<String, (ServiceKey, Arc<types::Endpoints>)>,
    service_items: HashMap<String, ServiceKey>,
    /// The service uid of each key, and the service.
    service_by_key: HashMap<ServiceKey, (String, Arc<types::Service>)>,
    /// The services whose endpoints read a pod (minimal form) or look a node up by an
    /// endpoint's address, and what each one read (only those that read something).
    ///
    /// Every set here is a sorted vector (see [`link`]): nearly all hold one value, for
    /// which a `BTreeSet` would allocate a node with room for eleven.
    by_pod: HashMap<String, Vec<ServiceKey>>,
    by_ip: HashMap<IpAddr, Vec<ServiceKey>>,
    reads: HashMap<ServiceKey, (Vec<String>, Vec<IpAddr>)>,
}

impl Translator {
    /// Translates the whole store.
    pub fn new(store: &Store) -> Self {
        Self::with_nodes(store, nodes(store))
    }

    /// Translates the whole store, whose nodes translate to `nodes` ([`nodes`]).
    fn with_nodes(store: &Store, nodes: Nodes) -> Self {
        let mut t = Translator::default();
        (t.model.nodes, t.node_by_ip) = nodes;
        t.namespaces(store);
        for uid in store.pods.keys() {
            t.pod(store, uid);
        }
        let endpoints = store.endpoints.keys().map(String::as_str).collect();
        t.index_endpoints(&written(&store.endpoints, endpoints, endpoints_key_parts));
        let services = store.services.keys().map(String::as_str).collect();
        t.index_services(&written(&store.services, services, service_key_parts));
        let keys: Vec<ServiceKey> = t.service_by_key.keys().cloned().collect();
        for key in keys {
            t.service(store, &key);
        }
        t
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Brings the model to `store`'s state after the writes that `changed` lists.
    pub fn apply(&mut self, store: &Store, changed: &Changed) {
        self.apply_in_parts(store, changed, usize::MAX, |_| {});
    }

    /// [`Self::apply`], handing the model to `early` after the first `part / 8` services it
    /// translates (that the model had or has) and then after every `part`, when more are
    /// left: a consumer can start on a long translation's first services while the rest
    /// translate. Each service is translated once, so an early model
    /// holds every service either as it was or as it will be; the pods, endpoints objects,
    /// nodes and namespaces are already translated. A change of nodes translates everything
    /// at once, with no early model. In a write of services alone, the first `part / 8` are
    /// indexed and translated before the others are indexed, so the first early model does
    /// not wait for the whole write's indexes.
    pub fn apply_in_parts(
        &mut self,
        store: &Store,
        changed: &Changed,
        part: usize,
        mut early: impl FnMut(&Model),
    ) {
        // Nodes decide every pod's and many endpoints' node: translate everything again when
        // they changed (not when their container was written again as it was, as a PUT of the
        // whole datastore does).
        let nodes_written = changed.cleared.contains(&Kind::Node)
            || changed.items.iter().any(|(k, _)| *k == Kind::Node);
        let new_nodes = nodes_written
            .then(|| nodes(store))
            .filter(|(nodes, by_ip)| *nodes != self.model.nodes || *by_ip != self.node_by_ip);
        if changed.all || new_nodes.is_some() {
            let old = std::mem::take(&mut self.model);
            *self = match new_nodes {
                Some(nodes) => Translator::with_nodes(store, nodes),
                None => Translator::new(store),
            };
            // Keep the structure the new model shares with the old one where values agree,
            // so that the engines' diffs stay small.
            self.model = std::mem::take(&mut self.model).sharing_with(&old);
            return;
        }
        if store.elans.len() != self.model.namespaces.len() {
            self.namespaces(store);
        }
        // The items to look at again: those written, and every item of a list that was
        // emptied (a container replaced), as this translator last saw them and as the store
        // holds them now (`changed.items` lists none of those).
        let before: Vec<(Kind, String)> = changed
            .cleared
            .iter()
            .flat_map(|kind| {
                let uids: Vec<&String> = match kind {
                    Kind::Service => self.service_items.keys().collect(),
                    Kind::Endpoints => self.endpoints_items.keys().collect(),
                    Kind::Pod => self.pod_items.keys().collect(),
                    Kind::Node => Vec::new(),
                };
                uids.into_iter().map(|u| (*kind, u.clone()))
            })
            .collect();
        // The written items and those of the emptied lists, each once (the written ones are
        // already a set, and usually all there is).
        let mut items: Vec<(Kind, &str)> = changed
            .items
            .iter()
            .map(|(k, u)| (*k, u.as_str()))
            .collect();
        if !changed.cleared.is_empty() {
            items.extend(before.iter().map(|(k, u)| (*k, u.as_str())));
            for kind in &changed.cleared {
                let now: Vec<&String> = match kind {
                    Kind::Service => store.services.keys().collect(),
                    Kind::Endpoints => store.endpoints.keys().collect(),
                    Kind::Pod => store.pods.keys().collect(),
                    Kind::Node => Vec::new(),
                };
                items.extend(now.into_iter().map(|u| (*kind, u.as_str())));
            }
            items.sort_unstable();
            items.dedup();
        }
        let uids = |kind: Kind| -> Vec<&str> {
            items
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, uid)| *uid)
                .collect()
        };
        let (service_uids, endpoints_uids) = (uids(Kind::Service), uids(Kind::Endpoints));
        // A container write fills the indexes with thousands at once: room first, not
        // rehashing as they grow (a tenth of a 30,000-service publication).
        let (new_services, new_endpoints) = (service_uids.len(), endpoints_uids.len());
        self.service_items.reserve(new_services);
        self.service_by_key.reserve(new_services);
        self.endpoints_items.reserve(new_endpoints);
        self.endpoints_by_name.reserve(new_endpoints);
        // Collected, then sorted once: the services translate in key order.
        let mut services: Vec<ServiceKey> = Vec::with_capacity(new_services + new_endpoints);
        // Services leave their keys before any takes one: a batch may remove one service
        // and add another of the same namespace and name.
        for uid in &service_uids {
            services.extend(self.unindex_service(uid));
        }
        // The services written ([`written`]), then their two indexes, on the way to the first
        // early model; likewise the endpoints objects, each leaving the name it had first.
        let written_services = written(&store.services, service_uids, service_key_parts);
        let part = part.max(1);
        let first = (part / 8).max(1);
        // A long write of services alone (a container PUT of them): its first services are
        // indexed and translated, and the first early model handed over, before the rest are
        // indexed and sorted (about 6 ms of 30,000, which the switches waited for). They are
        // not translated again below unless their key went to another service meanwhile
        // (which a valid store, whose keys are unique, never holds; the indexes decide).
        let alone = endpoints_uids.is_empty() && uids(Kind::Pod).is_empty();
        let mut done = 0;
        match written_services.split_at_checked(first) {
            Some((first_ones, rest)) if alone && !rest.is_empty() => {
                self.index_services(first_ones);
                for (_, key, _) in first_ones {
                    if self.service(store, key) {
                        done += 1;
                    }
                }
                early(&self.model);
                self.index_services(rest);
                let taken = |(uid, key, _): &&Written<'_, types::Service>| {
                    self.service_by_key.get(key).is_none_or(|(u, _)| u != uid)
                };
                services.extend(
                    first_ones
                        .iter()
                        .filter(taken)
                        .map(|(_, key, _)| key.clone()),
                );
                services.extend(rest.iter().map(|(_, key, _)| key.clone()));
            }
            _ => {
                self.index_services(&written_services);
                services.extend(written_services.into_iter().map(|(_, key, _)| key));
            }
        }
        for uid in &endpoints_uids {
            services.extend(self.unindex_endpoints(uid));
        }
        let written_endpoints = written(&store.endpoints, endpoints_uids, endpoints_key_parts);
        self.index_endpoints(&written_endpoints);
        services.extend(written_endpoints.into_iter().map(|(_, key, _)| key));
        for uid in uids(Kind::Pod) {
            let (old_ips, new_ips) = self.pod(store, uid);
            services.extend(self.by_pod.get(uid).into_iter().flatten().cloned());
            for ip in old_ips.iter().chain(&new_ips) {
                services.extend(self.by_ip.get(ip).into_iter().flatten().cloned());
            }
        }
        services.sort_unstable();
        services.dedup();
        // Counted: the services translated that were or are in the model (an endpoints object
        // of no service changes nothing to publish). The first early model comes after an
        // eighth of a part, so that the switches start sooner.
        let mut left = services.len();
        for key in services {
            left -= 1;
            if self.service(store, &key) {
                done += 1;
                if left > 0 && (done % part == 0 || done == first) {
                    early(&self.model);
                }
            }
        }
    }

    fn namespaces(&mut self, store: &Store) {
        self.model.namespaces = store
            .elans
            .iter()
            .map(|(name, elan)| {
                let ns = Namespace {
                    name: name.clone(),
                    elan: *elan,
                };
                (name.clone(), ns)
            })
            .collect();
    }

    /// The node a pod runs on: the node with its host address, else that address, else "".
    fn node_of(&self, pod: &types::Pod) -> String {
        let Some(host) = pod.host_ip else {
            return String::new();
        };
        self.node_by_ip
            .get(&host)
            .map_or_else(|| host.to_string(), String::clone)
    }

    /// The node of the pod that has `ip` on an interface, if known.
    fn node_by_pod_ip(&self, store: &Store, ip: IpAddr) -> Option<String> {
        let uid = self.pod_by_ip.get(&ip)?.first()?;
        let pod = store.pods.get(uid)?;
        Some(self.node_of(pod)).filter(|n| !n.is_empty())
    }

    /// Translates pod `uid` again; returns its addresses before and after.
    fn pod(&mut self, store: &Store, uid: &str) -> (Vec<IpAddr>, Vec<IpAddr>) {
        let (old_ifaces, old_ips) = self.pod_items.remove(uid).unwrap_or_default();
        for iface in &old_ifaces {
            self.model.pods.remove(iface);
        }
        for ip in &old_ips {
            link(&mut self.pod_by_ip, *ip, uid, false);
        }
        let Some(pod) = store.pods.get(uid) else {
            return (old_ips, Vec::new());
        };
        let node = self.node_of(pod);
        let mac = pod
            .port_mac
            .as_deref()
            .and_then(|m| m.parse::<MacAddr>().ok());
        let mut ifaces = Vec::new();
        let mut ips = Vec::new();
        for iface in &pod.interface {
            // The second entry of a dual-stack interface (see the parser): one more address.
            if ifaces.contains(&iface.uid) {
                if let (Some(ip), Some(p)) = (iface.ip_address, self.model.pods.get_mut(&iface.uid))
                {
                    p.ips.push(ip);
                    link(&mut self.pod_by_ip, ip, uid, true);
                    ips.push(ip);
                }
                continue;
            }
            self.model.pods.insert(
                iface.uid.clone(),
                PodInterface {
                    uid: iface.uid.clone(),
                    namespace: namespace_name(&pod.network_ns).to_string(),
                    name: pod.name.clone(),
                    ips: iface.ip_address.into_iter().collect(),
                    mac,
                    node: node.clone(),
                    iface_id: iface.uid.clone(),
                },
            );
            ifaces.push(iface.uid.clone());
            if let Some(ip) = iface.ip_address {
                link(&mut self.pod_by_ip, ip, uid, true);
                ips.push(ip);
            }
        }
        self.pod_items
            .insert(uid.to_string(), (ifaces, ips.clone()));
        (old_ips, ips)
    }

    /// Forgets which name endpoints object `uid` had; returns it.
    fn unindex_endpoints(&mut self, uid: &str) -> Option<ServiceKey> {
        let (old, _) = self.endpoints_items.remove(uid)?;
        link(&mut self.endpoints_by_name, old.clone(), uid, false);
        Some(old)
    }

    /// Indexes the endpoints objects `written` (uid and the key of the service they are for)
    /// by uid and by that key, beside each other for a container's thousands (the two took
    /// about 15 ms for 30,000 on one thread, while the services' body is read and parsed).
    fn index_endpoints(&mut self, written: &[Written<'_, types::Endpoints>]) {
        let by_uid = |items: &mut HashMap<String, (ServiceKey, Arc<types::Endpoints>)>| {
            for (uid, key, item) in written {
                items.insert((*uid).to_string(), (key.clone(), Arc::clone(item)));
            }
        };
        let by_name = |by_name: &mut HashMap<ServiceKey, Vec<String>>| {
            for (uid, key, _) in written {
                link(by_name, key.clone(), *uid, true);
            }
        };
        let (items, names) = (&mut self.endpoints_items, &mut self.endpoints_by_name);
        crate::par::join_for(written.len(), || by_uid(items), || by_name(names));
    }

    /// Forgets which key service `uid` had; returns it.
    fn unindex_service(&mut self, uid: &str) -> Option<ServiceKey> {
        let old = self.service_items.remove(uid)?;
        if self.service_by_key.get(&old).is_some_and(|(u, _)| u == uid) {
            self.service_by_key.remove(&old);
        }
        Some(old)
    }

    /// Indexes the services `written` (uid and key) by uid and by key, the two
    /// indexes beside each other for a container's thousands, on the way to the first early
    /// model (both took 9.4–10.3 ms for 30,000 on one thread; beside each other the first
    /// early model comes about 1.5 ms sooner: the inserts wait on memory more than on a core).
    fn index_services(&mut self, written: &[Written<'_, types::Service>]) {
        let by_uid = |items: &mut HashMap<String, ServiceKey>| {
            for (uid, key, _) in written {
                items.insert((*uid).to_string(), key.clone());
            }
        };
        // Two services with one key: the last by uid wins, as in a full translation.
        let by_key = |by_key: &mut HashMap<ServiceKey, (String, Arc<types::Service>)>| {
            for (uid, key, item) in written {
                let entry = ((*uid).to_string(), Arc::clone(item));
                match by_key.entry(key.clone()) {
                    Entry::Occupied(mut other) if other.get().0.as_str() <= *uid => {
                        *other.get_mut() = entry;
                    }
                    Entry::Occupied(_) => {}
                    Entry::Vacant(v) => {
                        v.insert(entry);
                    }
                }
            }
        };
        let (items, keys) = (&mut self.service_items, &mut self.service_by_key);
        crate::par::join_for(written.len(), || by_uid(items), || by_key(keys));
    }

    /// Translates the service with `key` and its endpoints again; returns whether the model
    /// had or has it.
    fn service(&mut self, store: &Store, key: &ServiceKey) -> bool {
        if let Some((pods, ips)) = self.reads.remove(key) {
            for pod in pods {
                link(&mut self.by_pod, pod, key, false);
            }
            for ip in ips {
                link(&mut self.by_ip, ip, key, false);
            }
        }
        let Some(s) = self.service_by_key.get(key).map(|(_, s)| Arc::clone(s)) else {
            let had = self.model.services.remove(key).is_some();
            return self.model.endpoints.remove(key).is_some() || had;
        };
        let (endpoints, reads) = self.endpoints_of(store, &s, key);
        for pod in &reads.0 {
            link(&mut self.by_pod, pod.clone(), key, true);
        }
        for ip in &reads.1 {
            link(&mut self.by_ip, *ip, key, true);
        }
        if !reads.0.is_empty() || !reads.1.is_empty() {
            self.reads.insert(key.clone(), reads);
        }
        self.model.endpoints.insert(key.clone(), endpoints);
        self.model
            .services
            .insert(key.clone(), service(&s, key.clone()));
        true
    }

    /// A service's endpoints, with the pods and addresses it read to find them.
    fn endpoints_of(
        &self,
        store: &Store,
        s: &types::Service,
        key: &ServiceKey,
    ) -> (Vec<Endpoint>, (Vec<String>, Vec<IpAddr>)) {
        let mut out: Vec<Endpoint> = Vec::new();
        // An address listed again (or by two pods) is served once, as first listed.
        let mut seen = AddressIndex::default();
        let mut read_pods = Vec::new();
        let mut read_ips = Vec::new();
        let object = self
            .endpoints_by_name
            .get(key)
            .and_then(|uids| uids.last())
            .and_then(|uid| self.endpoints_items.get(uid))
            .map(|(_, e)| e);
        if let Some(e) = object {
            let ports: Vec<EndpointPort> = e
                .endpoint_ports
                .iter()
                .map(|p| EndpointPort {
                    name: p.name.clone(),
                    protocol: p
                        .protocol
                        .or_else(|| {
                            s.service_ports
                                .iter()
                                .find(|sp| sp.name == p.name)
                                .map(|sp| sp.protocol)
                        })
                        .unwrap_or_default()
                        .to_model(),
                    port: p.port,
                })
                .collect();
            for a in &e.endpoint_addresses {
                if seen.find(&out, a.ip_address).is_some() {
                    continue;
                }
                let node = if a.node_name.is_empty() {
                    read_ips.push(a.ip_address);
                    self.node_by_pod_ip(store, a.ip_address)
                } else {
                    Some(a.node_name.clone())
                };
                seen.push(
                    &mut out,
                    Endpoint {
                        weight: a.weight,
                        ..Endpoint::new(a.ip_address, ports.clone(), node)
                    },
                );
            }
        }
        // Minimal form: pods by uid; each serves the target port of every service port.
        // The ports are built only for a service that lists pods (most list none: their
        // endpoints come from endpoints objects, above).
        let pods = s.endpoints.iter().flatten();
        let ports = if pods.clone().next().is_some() {
            minimal_ports(s)
        } else {
            Vec::new()
        };
        for pod_uid in pods {
            read_pods.push(pod_uid.clone());
            let Some(pod) = store.pods.get(pod_uid) else {
                continue;
            };
            let node = Some(self.node_of(pod)).filter(|n| !n.is_empty());
            for ip in pod.interface.iter().filter_map(|i| i.ip_address) {
                if seen.find(&out, ip).is_some() {
                    continue;
                }
                seen.push(&mut out, Endpoint::new(ip, ports.clone(), node.clone()));
            }
        }
        // The model keeps the list: at its length, not with the room pushing left (four
        // ~150-byte `Endpoint`s for two, sixteen for ten; issue 19).
        out.shrink_to_fit();
        (out, (read_pods, read_ips))
    }
}

/// The namespace and name a service is keyed by (its uid in the minimal form, which has no
/// name).
fn service_key_parts(s: &types::Service) -> (&str, &str) {
    let name = if s.name.is_empty() { &s.uid } else { &s.name };
    (namespace_name(&s.network_ns), name)
}

/// The namespace and name of the service an endpoints object is for.
fn endpoints_key_parts(e: &types::Endpoints) -> (&str, &str) {
    (namespace_name(&e.network_ns), &e.name)
}

/// A written item: its uid, its key and the item as the store holds it.
type Written<'a, T> = (&'a str, ServiceKey, Arc<T>);

/// The uids of `uids` that `stored` holds, each with its key (from `parts`) and the item, in
/// order; for thousands, half of them on a thread of their own.
fn written<'a, T: Send + Sync>(
    stored: &BTreeMap<String, Arc<T>>,
    uids: Vec<&'a str>,
    parts: fn(&T) -> (&str, &str),
) -> Vec<Written<'a, T>> {
    let (mut keys, second) = crate::par::halves(&uids, |_, half| keys_of(stored, half, parts));
    keys.extend(second);
    uids.into_iter()
        .zip(keys)
        .filter_map(|(uid, found)| found.map(|(key, item)| (uid, key, item)))
        .collect()
}

/// The key and the item of each of `uids` that `stored` holds, for [`written`] on one thread. The uids of
/// a container write come sorted, as the store keeps its items: those are found by walking
/// the store beside them (30,000 services in 0.9–1.2 ms on two threads, against 2.2–3.0 ms by
/// lookups), others by lookups. A namespace's name is shared by the keys as they come (a
/// container's items come namespace by namespace).
fn keys_of<T>(
    stored: &BTreeMap<String, Arc<T>>,
    uids: &[&str],
    parts: fn(&T) -> (&str, &str),
) -> Vec<Option<(ServiceKey, Arc<T>)>> {
    let mut namespace: Option<Arc<str>> = None;
    let mut key = |item: &Arc<T>| {
        let (ns, name) = parts(item);
        let shared = match &namespace {
            Some(n) if **n == *ns => n.clone(),
            _ => namespace.insert(Arc::from(ns)).clone(),
        };
        let key = ServiceKey {
            namespace: shared,
            name: Arc::from(name),
        };
        (key, Arc::clone(item))
    };
    let Some(first) = uids.first().filter(|_| uids.is_sorted()) else {
        return uids
            .iter()
            .map(|uid| stored.get(*uid).map(&mut key))
            .collect();
    };
    let mut walk = stored
        .range::<str, _>((
            std::ops::Bound::Included(*first),
            std::ops::Bound::Unbounded,
        ))
        .peekable();
    uids.iter()
        .map(|uid| {
            while walk.next_if(|(u, _)| u.as_str() < *uid).is_some() {}
            walk.next_if(|(u, _)| u.as_str() == *uid)
                .map(|(_, item)| key(item))
        })
        .collect()
}

/// The model's nodes, and the node of each of their addresses.
type Nodes = (netvirt::model::Map<String, Node>, HashMap<IpAddr, String>);

/// The model's nodes, and the node of each of their addresses (the first node by uid wins).
fn nodes(store: &Store) -> Nodes {
    let mut by_ip = HashMap::default();
    let mut nodes = netvirt::model::Map::new();
    for n in store.nodes.values() {
        let mut ips = Vec::new();
        for ip in n.internal_ip.iter().chain(&n.external_ip) {
            if !ips.contains(ip) {
                ips.push(*ip);
            }
            by_ip
                .entry(*ip)
                .or_insert_with(|| n.model_name().to_string());
        }
        let name = n.model_name().to_string();
        nodes.insert(
            name.clone(),
            Node {
                name,
                ips,
                pod_cidrs: n.pod_cidrs.clone(),
                labels: BTreeMap::new(),
            },
        );
    }
    (nodes, by_ip)
}

/// The OVSDB remote of each node, by model node name: `overrides` (keyed by node name or
/// uid), else `tcp:<internal-ip-address>:6640`. Nodes with neither are left out.
pub fn ovsdb_remotes(
    store: &Store,
    overrides: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut remotes = BTreeMap::new();
    for n in store.nodes.values() {
        let name = n.model_name();
        let remote = overrides
            .get(name)
            .or_else(|| overrides.get(&n.uid))
            .cloned()
            .or_else(|| {
                n.internal_ip.map(|ip| match ip {
                    IpAddr::V4(v4) => format!("tcp:{v4}:6640"),
                    IpAddr::V6(v6) => format!("tcp:[{v6}]:6640"),
                })
            });
        if let Some(remote) = remote {
            remotes.insert(name.to_string(), remote);
        }
    }
    remotes
}

fn service(s: &types::Service, key: ServiceKey) -> Service {
    let ports: Vec<ServicePort> = s
        .service_ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            protocol: p.protocol.to_model(),
            port: p.port,
            target_port: target_port(p),
            node_port: p.node_port,
        })
        .collect();
    let mut lb_ingress_ips = s.ingress_ips.clone();
    if let Some(ip) = s.load_balancer_ip {
        if !lb_ingress_ips.contains(&ip) {
            lb_ingress_ips.push(ip);
        }
    }
    let kind = if !lb_ingress_ips.is_empty() {
        ServiceType::LoadBalancer
    } else if ports.iter().any(|p| p.node_port.is_some()) {
        ServiceType::NodePort
    } else {
        ServiceType::ClusterIp
    };
    Service {
        key,
        uid: s.uid.clone(),
        kind,
        cluster_ips: s.all_cluster_ips(),
        ports,
        external_ips: s.external_ips.clone(),
        lb_ingress_ips,
        session_affinity: SessionAffinity::None,
        external_traffic_policy: match s.external_traffic_policy.as_deref() {
            Some("Local") => TrafficPolicy::Local,
            _ => TrafficPolicy::Cluster,
        },
        internal_traffic_policy: TrafficPolicy::Cluster,
        lb_source_ranges: s.load_balancer_source_ranges.clone(),
        health_check_node_port: s.health_check_node_port,
        topology: Default::default(),
        traffic_distribution: Default::default(),
    }
}

/// The ports every pod of a minimal-form service serves: each service port's target port.
fn minimal_ports(s: &types::Service) -> Vec<EndpointPort> {
    s.service_ports
        .iter()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            protocol: p.protocol.to_model(),
            port: match target_port(p) {
                TargetPort::Number(n) => n,
                TargetPort::Name(_) => p.port,
            },
        })
        .collect()
}

fn target_port(p: &types::ServicePort) -> TargetPort {
    if p.target_port.is_empty() {
        return TargetPort::Number(p.port);
    }
    match p.target_port.parse::<u16>() {
        Ok(n) => TargetPort::Number(n),
        Err(_) => TargetPort::Name(p.target_port.clone()),
    }
}
