//! The Kubernetes translation kept up to date by key. Pure: no I/O, no clock.
//!
//! The watchers record which objects each event touched ([`Changes`]); [`Keyed::apply`]
//! translates just those again, with what depends on them: a Service with its
//! EndpointSlices, a slice's Service (the one its `kubernetes.io/service-name` label names,
//! before and after the event), a Node with the Services whose topology keys read its labels.
//! Namespaces are few, and their ELAN ids are allocated over the whole set, so a namespace
//! event allocates them again. A relist (`all`) translates everything, then keeps the
//! structure the new model shares with the old one.
//!
//! The result always equals [`super::translate::translate`] of the same objects (a property
//! test checks it), and its model shares all unchanged structure with the previous one, so
//! each node's engine finds the change by a diff that costs the change.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use netvirt::model::ServiceKey;

use super::slim;
pub use super::slim::ObjKey;
use super::translate::{HEADLESS_LABEL, SERVICE_NAME_LABEL, Snapshot, Translation, Translator};

/// What watch events touched since the last [`Keyed::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Everything (a relist): translate all again.
    pub all: bool,
    /// Services by (namespace, name).
    pub services: BTreeSet<ObjKey>,
    /// EndpointSlices by (namespace, name).
    pub slices: BTreeSet<ObjKey>,
    /// Nodes by name.
    pub nodes: BTreeSet<String>,
    /// Pods by (namespace, name).
    pub pods: BTreeSet<ObjKey>,
    /// Whether any namespace came or went.
    pub namespaces: bool,
}

impl Changes {
    /// Whether nothing was touched.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

/// The watched objects, looked up by key (the watchers' stores, or a snapshot in tests).
pub trait Objects {
    /// A Service.
    fn service(&self, key: &ObjKey) -> Option<Arc<slim::Service>>;
    /// An EndpointSlice.
    fn slice(&self, key: &ObjKey) -> Option<Arc<slim::EndpointSlice>>;
    /// A Node.
    fn node(&self, name: &str) -> Option<Arc<slim::Node>>;
    /// A Pod.
    fn pod(&self, key: &ObjKey) -> Option<Arc<slim::Pod>>;
    /// Every namespace's name.
    fn namespace_names(&self) -> Vec<String>;
    /// Everything.
    fn snapshot(&self) -> Snapshot;
}

/// The objects of a snapshot, by key.
impl Objects for Snapshot {
    fn service(&self, key: &ObjKey) -> Option<Arc<slim::Service>> {
        self.services
            .iter()
            .find(|o| o.metadata.key() == *key)
            .cloned()
    }
    fn slice(&self, key: &ObjKey) -> Option<Arc<slim::EndpointSlice>> {
        self.endpoint_slices
            .iter()
            .find(|o| o.metadata.key() == *key)
            .cloned()
    }
    fn node(&self, name: &str) -> Option<Arc<slim::Node>> {
        self.nodes
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(name))
            .cloned()
    }
    fn pod(&self, key: &ObjKey) -> Option<Arc<slim::Pod>> {
        self.pods.iter().find(|o| o.metadata.key() == *key).cloned()
    }
    fn namespace_names(&self) -> Vec<String> {
        self.namespaces
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    }
    fn snapshot(&self) -> Snapshot {
        self.clone()
    }
}

/// An object's (namespace, name), empty strings for what it lacks.
pub fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> ObjKey {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The Service a slice joins, if it is one a proxy uses.
fn slice_service(slice: &slim::EndpointSlice) -> Option<ServiceKey> {
    let labels = &slice.metadata.labels;
    if labels.contains_key(HEADLESS_LABEL) {
        return None;
    }
    let service = labels.get(SERVICE_NAME_LABEL)?;
    let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
    Some(ServiceKey::new(namespace, service))
}

/// The translation, with the indexes that let it follow changes by key.
#[derive(Debug, Clone, Default)]
pub struct Keyed {
    t: Translator,
    /// The Service each slice joins. (These two indexes are B-trees: a hash table of 30,000
    /// entries has room for 65,536, 6 MiB for this one.)
    slice_service: BTreeMap<ObjKey, ServiceKey>,
    /// The slices of each Service, sorted: a vector, since nearly every Service has one
    /// slice, for which a `BTreeSet` allocates a node with room for eleven (16 MiB at
    /// 30,000 Services).
    slices_of: BTreeMap<ServiceKey, Vec<ObjKey>>,
    /// The uid each pod was translated under.
    pod_uid: HashMap<ObjKey, String>,
    /// Services with topology keys (they read their endpoints' nodes' labels).
    with_topology: BTreeSet<ServiceKey>,
}

impl Keyed {
    /// Translates everything.
    pub fn new(objects: &impl Objects) -> Self {
        let snapshot = objects.snapshot();
        let mut k = Keyed::default();
        k.t.namespaces(
            snapshot
                .namespaces
                .iter()
                .filter_map(|n| n.metadata.name.as_deref()),
        );
        for node in &snapshot.nodes {
            k.t.node(node);
        }
        for pod in &snapshot.pods {
            k.pod(pod);
        }
        let mut slices = HashMap::new();
        for slice in &snapshot.endpoint_slices {
            let key = slice.metadata.key();
            k.index_slice(key.clone(), Some(slice));
            slices.insert(key, slice.clone());
        }
        let slice = |key: &ObjKey| slices.get(key).cloned();
        for service in &snapshot.services {
            let key = service.metadata.key();
            k.service(&slice, &ServiceKey::new(&key.0, &key.1), Some(service));
        }
        k
    }

    /// What the objects say now.
    pub fn translation(&self) -> Translation {
        self.t.translation()
    }

    /// Translates what `changes` touched again, from `objects` as they are now.
    pub fn apply(&mut self, objects: &impl Objects, changes: &Changes) {
        if changes.all {
            let old = std::mem::take(&mut self.t.model);
            *self = Keyed::new(objects);
            self.t.model = std::mem::take(&mut self.t.model).sharing_with(&old);
            return;
        }
        if changes.namespaces {
            let names = objects.namespace_names();
            self.t.namespaces(names.iter().map(String::as_str));
        }
        let mut services: BTreeSet<ServiceKey> = BTreeSet::new();
        for name in &changes.nodes {
            self.t.model.nodes.remove(name);
            self.t.ovsdb_remotes.remove(name);
            self.t.warnings.remove(&("Node", name.clone()));
            if let Some(node) = objects.node(name) {
                self.t.node(&node);
            }
            services.extend(self.with_topology.iter().cloned());
        }
        for key in &changes.pods {
            if let Some(uid) = self.pod_uid.remove(key) {
                self.t.model.pods.remove(&uid);
            }
            self.t.warnings.remove(&("Pod", object_name(key)));
            if let Some(pod) = objects.pod(key) {
                self.pod(&pod);
            }
        }
        for key in &changes.slices {
            self.t.warnings.remove(&("EndpointSlice", object_name(key)));
            let slice = objects.slice(key);
            services.extend(self.index_slice(key.clone(), slice.as_deref()));
        }
        for (namespace, name) in &changes.services {
            services.insert(ServiceKey::new(namespace, name));
        }
        let slice = |key: &ObjKey| objects.slice(key);
        for key in services {
            let service = objects.service(&(key.namespace.to_string(), key.name.to_string()));
            self.service(&slice, &key, service.as_deref());
        }
    }

    fn pod(&mut self, pod: &slim::Pod) {
        self.t.pod(pod);
        let key = pod.metadata.key();
        if let Some(uid) = pod.metadata.uid.clone()
            && self.t.model.pods.get(&uid).is_some_and(|p| {
                (p.namespace.as_str(), p.name.as_str()) == (key.0.as_str(), key.1.as_str())
            })
        {
            self.pod_uid.insert(key, uid);
        }
    }

    /// Records which Service the slice `key` joins now; returns the Services it joined before
    /// and joins now.
    fn index_slice(&mut self, key: ObjKey, slice: Option<&slim::EndpointSlice>) -> Vec<ServiceKey> {
        let mut touched = Vec::new();
        if let Some(old) = self.slice_service.remove(&key) {
            if let Some(set) = self.slices_of.get_mut(&old) {
                if let Ok(i) = set.binary_search(&key) {
                    set.remove(i);
                }
                if set.is_empty() {
                    self.slices_of.remove(&old);
                }
            }
            touched.push(old);
        }
        if let Some(service) = slice.and_then(slice_service) {
            let set = self.slices_of.entry(service.clone()).or_default();
            if let Err(i) = set.binary_search(&key) {
                set.insert(i, key.clone());
                set.shrink_to_fit();
            }
            self.slice_service.insert(key, service.clone());
            touched.push(service);
        }
        touched
    }

    /// Translates the Service `key` and its slices again.
    fn service(
        &mut self,
        slice_of: &dyn Fn(&ObjKey) -> Option<Arc<slim::EndpointSlice>>,
        key: &ServiceKey,
        service: Option<&slim::Service>,
    ) {
        self.t.model.services.remove(key);
        self.t.model.endpoints.remove(key);
        self.with_topology.remove(key);
        let object = object_name(&(key.namespace.to_string(), key.name.to_string()));
        self.t.warnings.remove(&("Service", object));
        let slices: Vec<ObjKey> = self
            .slices_of
            .get(key)
            .map(|s| s.to_vec())
            .unwrap_or_default();
        for slice in &slices {
            self.t
                .warnings
                .remove(&("EndpointSlice", object_name(slice)));
        }
        let Some(service) = service else {
            return;
        };
        self.t.service(service);
        if !self.t.model.endpoints.contains_key(key) {
            return;
        }
        // In (namespace, name) order, as a whole translation takes them.
        for slice in slices.iter().filter_map(slice_of) {
            self.t.slice(&slice);
        }
        self.t.finish_endpoints(key);
        if self
            .t
            .model
            .services
            .get(key)
            .is_some_and(|s| !s.topology.keys.is_empty())
        {
            self.with_topology.insert(key.clone());
        }
    }
}

/// How warnings name a namespaced object: `namespace/name`, or `name` without a namespace.
fn object_name((namespace, name): &ObjKey) -> String {
    if namespace.is_empty() {
        name.clone()
    } else {
        format!("{namespace}/{name}")
    }
}
