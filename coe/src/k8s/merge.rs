//! Merging the REST northbound's model with the Kubernetes one. Pure.
//!
//! **Precedence: Kubernetes wins.** The two models are merged object by object, keyed as the
//! model keys them: nodes and namespaces by name, pods by uid, services (with their endpoints)
//! by `namespace/name`. A key that only one input has is taken from it. On a key that both
//! have, the Kubernetes object is taken and a [`Conflict`] names the key, so the daemon can warn.
//!
//! Why Kubernetes: in a cluster the API server is the system of record, and it is live. The
//! REST store is durable: it replays whatever was written to it, possibly long ago, so letting
//! it win would let a forgotten REST write shadow a live Service indefinitely. REST stays
//! useful for what Kubernetes does not hold (services with endpoints outside the cluster,
//! nodes it does not know), and those merge in unchanged.
//!
//! A REST namespace keeps its ELAN id unless a Kubernetes namespace already uses that id; then
//! the REST namespace is left out of the merged model, so `netvirt::desired::elan_ids`
//! allocates it a free id (reported as a conflict too).

use std::collections::{BTreeMap, BTreeSet};

use netvirt::model::Model;

/// A key both inputs define; the Kubernetes object was taken.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Conflict {
    /// `node`, `namespace`, `pod`, `service`, `endpoints` (REST endpoints for a service only
    /// Kubernetes defines) or `namespace-elan`.
    pub kind: &'static str,
    /// The key.
    pub key: String,
}

impl std::fmt::Display for Conflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.kind == "namespace-elan" {
            write!(
                f,
                "REST namespace {} has the ELAN id of a Kubernetes namespace; it gets another",
                self.key
            )
        } else if self.kind == "endpoints" {
            write!(
                f,
                "REST endpoints {} are for a service Kubernetes defines; Kubernetes' endpoints \
                 are used",
                self.key
            )
        } else {
            write!(
                f,
                "{} {} is defined by both REST and Kubernetes; Kubernetes wins",
                self.kind, self.key
            )
        }
    }
}

/// The merged model and OVSDB remotes, and the keys both inputs defined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// The model.
    pub model: Model,
    /// OVSDB remotes by node name.
    pub ovsdb_remotes: BTreeMap<String, String>,
    /// Keys defined by both, sorted.
    pub conflicts: Vec<Conflict>,
}

/// Merges `rest` (with its OVSDB remotes) and `kube` (with its); Kubernetes wins.
pub fn merge(
    rest: &Model,
    rest_remotes: &BTreeMap<String, String>,
    kube: &Model,
    kube_remotes: &BTreeMap<String, String>,
) -> Merged {
    let mut conflicts = Vec::new();
    let mut model = kube.clone();
    for (name, node) in &rest.nodes {
        if model.nodes.contains_key(name) {
            conflicts.push(Conflict {
                kind: "node",
                key: name.clone(),
            });
        } else {
            model.nodes.insert(name.clone(), node.clone());
        }
    }
    let kube_elans: BTreeSet<u32> = kube.namespaces.values().map(|n| n.elan).collect();
    for (name, ns) in &rest.namespaces {
        if model.namespaces.contains_key(name) {
            conflicts.push(Conflict {
                kind: "namespace",
                key: name.clone(),
            });
        } else if kube_elans.contains(&ns.elan) {
            conflicts.push(Conflict {
                kind: "namespace-elan",
                key: name.clone(),
            });
        } else {
            model.namespaces.insert(name.clone(), ns.clone());
        }
    }
    for (uid, pod) in &rest.pods {
        if model.pods.contains_key(uid) {
            conflicts.push(Conflict {
                kind: "pod",
                key: uid.clone(),
            });
        } else {
            model.pods.insert(uid.clone(), pod.clone());
        }
    }
    for (key, service) in &rest.services {
        if model.services.contains_key(key) {
            conflicts.push(Conflict {
                kind: "service",
                key: key.to_string(),
            });
        } else {
            model.services.insert(key.clone(), service.clone());
            if let Some(endpoints) = rest.endpoints.get(key) {
                model.endpoints.insert(key.clone(), endpoints.clone());
            }
        }
    }
    // A service's endpoints come with it: REST endpoints without a REST service do not go
    // into a Kubernetes service (said, rather than dropped unseen).
    for key in rest.endpoints.keys() {
        if endpoints_shadowed(key, rest, kube) {
            conflicts.push(Conflict {
                kind: "endpoints",
                key: key.to_string(),
            });
        }
    }
    let mut ovsdb_remotes = kube_remotes.clone();
    for (node, remote) in rest_remotes {
        // A node's remote comes with the node: REST only for REST-only nodes.
        if !kube.nodes.contains_key(node) {
            ovsdb_remotes.insert(node.clone(), remote.clone());
        }
    }
    conflicts.sort();
    Merged {
        model,
        ovsdb_remotes,
        conflicts,
    }
}

/// [`merge`], kept up to date by key: each input is diffed with its previous version (the
/// models are persistent maps, so the diff skips what they share) and only the keys that
/// changed on either side are merged again. The result always equals [`merge`] of the same
/// inputs, and its model shares structure with the previous result.
///
/// While the REST model is small (at most [`WHOLE_MERGE_MAX`] entries; empty in a cluster
/// driven by Kubernetes alone) it merges whole instead: [`merge`] starts from the Kubernetes
/// model, so that costs the REST model's size, and the result shares every Kubernetes entry
/// with the Kubernetes model rather than holding copies of the entries that changed (which,
/// merged by key, would in time be a second copy of every service and endpoint list).
#[derive(Debug, Clone)]
pub struct Merger {
    rest: Model,
    kube: Model,
    merged: Model,
    /// Node, pod and service keys both inputs define.
    shared: BTreeSet<Conflict>,
    /// Merge whole while the REST model has at most this many entries (never: `None`).
    whole_max: Option<usize>,
}

/// A REST model of at most this many nodes, pods, services and endpoint lists is merged
/// whole (see [`Merger`]).
pub const WHOLE_MERGE_MAX: usize = 4096;

impl Default for Merger {
    fn default() -> Self {
        Merger {
            rest: Model::default(),
            kube: Model::default(),
            merged: Model::default(),
            shared: BTreeSet::new(),
            whole_max: Some(WHOLE_MERGE_MAX),
        }
    }
}

/// The keys whose entries differ between two versions of a map.
fn changed<K: Ord + Clone, V: PartialEq + Clone>(
    old: &netvirt::model::Map<K, V>,
    new: &netvirt::model::Map<K, V>,
    out: &mut BTreeSet<K>,
) {
    for item in old.diff(new) {
        let key = match item {
            imbl::ordmap::DiffItem::Add(k, _) | imbl::ordmap::DiffItem::Remove(k, _) => k,
            imbl::ordmap::DiffItem::Update { new: (k, _), .. } => k,
        };
        out.insert(key.clone());
    }
}

/// Kubernetes' entry, else REST's; records a conflict when both have one.
fn pick<K: Ord + Clone, V: Clone>(
    key: &K,
    kube: &netvirt::model::Map<K, V>,
    rest: &netvirt::model::Map<K, V>,
    merged: &mut netvirt::model::Map<K, V>,
) -> bool {
    match (kube.get(key), rest.get(key)) {
        (Some(v), both) => {
            merged.insert(key.clone(), v.clone());
            both.is_some()
        }
        (None, Some(v)) => {
            merged.insert(key.clone(), v.clone());
            false
        }
        (None, None) => {
            merged.remove(key);
            false
        }
    }
}

/// Whether REST gives endpoints for `key` whose service only Kubernetes defines.
fn endpoints_shadowed(key: &netvirt::model::ServiceKey, rest: &Model, kube: &Model) -> bool {
    rest.endpoints.contains_key(key)
        && !rest.services.contains_key(key)
        && kube.services.contains_key(key)
}

/// Merges again the keys of one map that changed on either side since the last versions
/// (`(previous, now)` for REST and for Kubernetes), recording which keys both define.
fn merge_keys<V: Clone + PartialEq>(
    kind: &'static str,
    rest: (
        &netvirt::model::Map<String, V>,
        &netvirt::model::Map<String, V>,
    ),
    kube: (
        &netvirt::model::Map<String, V>,
        &netvirt::model::Map<String, V>,
    ),
    merged: &mut netvirt::model::Map<String, V>,
    shared: &mut BTreeSet<Conflict>,
) {
    let mut keys = BTreeSet::new();
    changed(rest.0, rest.1, &mut keys);
    changed(kube.0, kube.1, &mut keys);
    for key in keys {
        let both = pick(&key, kube.1, rest.1, merged);
        let conflict = Conflict { kind, key };
        if both {
            shared.insert(conflict);
        } else {
            shared.remove(&conflict);
        }
    }
}

impl Merger {
    /// The merge of `rest` and `kube` (with their remotes), after merging again only the keys
    /// that changed since the last call.
    pub fn update(
        &mut self,
        rest: &Model,
        rest_remotes: &BTreeMap<String, String>,
        kube: &Model,
        kube_remotes: &BTreeMap<String, String>,
    ) -> Merged {
        let rest_size =
            rest.nodes.len() + rest.pods.len() + rest.services.len() + rest.endpoints.len();
        if self.whole_max.is_some_and(|max| rest_size <= max) {
            let whole = merge(rest, rest_remotes, kube, kube_remotes);
            self.shared = whole
                .conflicts
                .iter()
                .filter(|c| !c.kind.starts_with("namespace"))
                .cloned()
                .collect();
            self.merged = whole.model.clone();
            self.rest = rest.clone();
            self.kube = kube.clone();
            return whole;
        }
        merge_keys(
            "node",
            (&self.rest.nodes, &rest.nodes),
            (&self.kube.nodes, &kube.nodes),
            &mut self.merged.nodes,
            &mut self.shared,
        );
        merge_keys(
            "pod",
            (&self.rest.pods, &rest.pods),
            (&self.kube.pods, &kube.pods),
            &mut self.merged.pods,
            &mut self.shared,
        );
        let mut services = BTreeSet::new();
        changed(&self.rest.services, &rest.services, &mut services);
        changed(&self.kube.services, &kube.services, &mut services);
        changed(&self.rest.endpoints, &rest.endpoints, &mut services);
        changed(&self.kube.endpoints, &kube.endpoints, &mut services);
        for key in services {
            let conflict = Conflict {
                kind: "service",
                key: key.to_string(),
            };
            if pick(
                &key,
                &kube.services,
                &rest.services,
                &mut self.merged.services,
            ) {
                self.shared.insert(conflict);
            } else {
                self.shared.remove(&conflict);
            }
            let shadowed = Conflict {
                kind: "endpoints",
                key: key.to_string(),
            };
            if endpoints_shadowed(&key, rest, kube) {
                self.shared.insert(shadowed);
            } else {
                self.shared.remove(&shadowed);
            }
            // A service's endpoints come with it; Kubernetes' otherwise, as in `merge`.
            let endpoints = if kube.services.contains_key(&key) {
                kube.endpoints.get(&key)
            } else if rest.services.contains_key(&key) {
                rest.endpoints
                    .get(&key)
                    .or_else(|| kube.endpoints.get(&key))
            } else {
                kube.endpoints.get(&key)
            };
            match endpoints {
                Some(e) => {
                    self.merged.endpoints.insert(key, e.clone());
                }
                None => {
                    self.merged.endpoints.remove(&key);
                }
            }
        }
        // Namespaces and remotes are few: merged whole, as `merge` does.
        let whole = merge(
            &Model {
                namespaces: rest.namespaces.clone(),
                ..Model::default()
            },
            rest_remotes,
            &Model {
                namespaces: kube.namespaces.clone(),
                nodes: kube.nodes.clone(),
                ..Model::default()
            },
            kube_remotes,
        );
        if self.merged.namespaces != whole.model.namespaces {
            self.merged.namespaces = whole.model.namespaces;
        }
        let mut conflicts: Vec<Conflict> = whole
            .conflicts
            .into_iter()
            .filter(|c| c.kind.starts_with("namespace"))
            .chain(self.shared.iter().cloned())
            .collect();
        conflicts.sort();
        self.rest = rest.clone();
        self.kube = kube.clone();
        Merged {
            model: self.merged.clone(),
            ovsdb_remotes: whole.ovsdb_remotes,
            conflicts,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use netvirt::model::{Namespace, Node, Service, ServiceKey};

    fn node(name: &str, ip: &str) -> Node {
        Node {
            name: name.into(),
            ips: vec![ip.parse().unwrap()],
            pod_cidrs: vec![],
            labels: BTreeMap::new(),
        }
    }

    fn service(ns: &str, name: &str, ip: &str) -> Service {
        Service::cluster_ip(
            ServiceKey::new(ns, name),
            "",
            ip.parse().unwrap(),
            Vec::new(),
        )
    }

    #[test]
    fn kubernetes_wins_on_shared_keys_and_each_side_keeps_its_own() {
        let mut rest = Model::default();
        rest.nodes.insert("n1".into(), node("n1", "10.0.0.1"));
        rest.nodes.insert("vm".into(), node("vm", "10.0.0.9"));
        let both = ServiceKey::new("default", "web");
        let rest_only = ServiceKey::new("legacy", "db");
        rest.services
            .insert(both.clone(), service("default", "web", "10.96.0.1"));
        rest.endpoints.insert(both.clone(), Vec::new());
        rest.services
            .insert(rest_only.clone(), service("legacy", "db", "10.96.0.2"));
        rest.endpoints.insert(rest_only.clone(), Vec::new());
        rest.namespaces.insert(
            "legacy".into(),
            Namespace {
                name: "legacy".into(),
                elan: 7,
            },
        );
        rest.namespaces.insert(
            "clash".into(),
            Namespace {
                name: "clash".into(),
                elan: 5,
            },
        );
        let mut kube = Model::default();
        kube.nodes.insert("n1".into(), node("n1", "192.168.0.1"));
        kube.services
            .insert(both.clone(), service("default", "web", "10.96.0.100"));
        kube.endpoints.insert(both.clone(), Vec::new());
        kube.namespaces.insert(
            "default".into(),
            Namespace {
                name: "default".into(),
                elan: 5,
            },
        );
        let rest_remotes = BTreeMap::from([
            ("n1".to_string(), "tcp:10.0.0.1:6640".to_string()),
            ("vm".to_string(), "tcp:10.0.0.9:6640".to_string()),
        ]);
        let kube_remotes = BTreeMap::from([("n1".to_string(), "tcp:192.168.0.1:6640".to_string())]);
        let m = merge(&rest, &rest_remotes, &kube, &kube_remotes);
        assert_eq!(m.model.nodes["n1"].ips[0].to_string(), "192.168.0.1");
        assert!(m.model.nodes.contains_key("vm"));
        assert_eq!(
            m.model.services[&both].cluster_ips[0].to_string(),
            "10.96.0.100"
        );
        assert!(m.model.services.contains_key(&rest_only));
        assert!(m.model.endpoints.contains_key(&rest_only));
        assert_eq!(m.model.namespaces["legacy"].elan, 7);
        assert!(!m.model.namespaces.contains_key("clash"));
        assert_eq!(m.ovsdb_remotes["n1"], "tcp:192.168.0.1:6640");
        assert_eq!(m.ovsdb_remotes["vm"], "tcp:10.0.0.9:6640");
        let names: Vec<String> = m.conflicts.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            names,
            [
                "REST namespace clash has the ELAN id of a Kubernetes namespace; it gets another",
                "node n1 is defined by both REST and Kubernetes; Kubernetes wins",
                "service default/web is defined by both REST and Kubernetes; Kubernetes wins",
            ]
        );
    }

    #[test]
    fn an_empty_kubernetes_model_leaves_rest_unchanged() {
        let mut rest = Model::default();
        rest.nodes.insert("n1".into(), node("n1", "10.0.0.1"));
        let m = merge(&rest, &BTreeMap::new(), &Model::default(), &BTreeMap::new());
        assert_eq!(m.model, rest);
        assert!(m.conflicts.is_empty());
    }

    /// With no REST model (a cluster driven by Kubernetes alone) the merged model is the
    /// Kubernetes one, shared, not a copy of its entries; after a change, still.
    #[test]
    fn a_kubernetes_model_alone_is_shared_not_copied() {
        let mut kube = Model::default();
        for i in 0..100 {
            let key = ServiceKey::new("default", &format!("s{i}"));
            kube.services
                .insert(key.clone(), service("default", &key.name, "10.96.0.1"));
            kube.endpoints.insert(key, Vec::new());
        }
        let mut merger = Merger::default();
        for round in 0..2 {
            if round == 1 {
                kube.services.remove(&ServiceKey::new("default", "s7"));
            }
            let m = merger.update(&Model::default(), &BTreeMap::new(), &kube, &BTreeMap::new());
            assert!(m.model.services.ptr_eq(&kube.services), "round {round}");
            assert!(m.model.endpoints.ptr_eq(&kube.endpoints), "round {round}");
        }
        // Merged by key, the same change leaves a map of its own.
        let mut by_key = Merger {
            whole_max: None,
            ..Merger::default()
        };
        let m = by_key.update(&Model::default(), &BTreeMap::new(), &kube, &BTreeMap::new());
        assert!(!m.model.services.ptr_eq(&kube.services));
    }

    /// REST endpoints for a service that only Kubernetes defines are not merged into it, and
    /// the merge says so; with a REST service of their own they merge as before.
    #[test]
    fn rest_endpoints_of_a_kubernetes_service_are_reported_not_merged() {
        let web = ServiceKey::new("default", "web");
        let ep = |ip: &str| netvirt::model::Endpoint::new(ip.parse().unwrap(), Vec::new(), None);
        let mut rest = Model::default();
        rest.endpoints.insert(web.clone(), vec![ep("10.244.9.9")]);
        let mut kube = Model::default();
        kube.services
            .insert(web.clone(), service("default", "web", "10.96.0.100"));
        kube.endpoints.insert(web.clone(), vec![ep("10.244.1.1")]);
        let m = merge(&rest, &BTreeMap::new(), &kube, &BTreeMap::new());
        assert_eq!(m.model.endpoints[&web], kube.endpoints[&web]);
        let said: Vec<String> = m.conflicts.iter().map(ToString::to_string).collect();
        assert_eq!(
            said,
            [
                "REST endpoints default/web are for a service Kubernetes defines; Kubernetes' \
              endpoints are used"
            ]
        );
        // The same by key.
        let mut by_key = Merger {
            whole_max: None,
            ..Merger::default()
        };
        assert_eq!(
            by_key.update(&rest, &BTreeMap::new(), &kube, &BTreeMap::new()),
            m
        );
        // Without the Kubernetes service there is nothing to say (and nothing to render).
        kube.services.remove(&web);
        let m = merge(&rest, &BTreeMap::new(), &kube, &BTreeMap::new());
        assert!(m.conflicts.is_empty(), "{:?}", m.conflicts);
        assert_eq!(
            by_key.update(&rest, &BTreeMap::new(), &kube, &BTreeMap::new()),
            m
        );
    }

    /// The merger follows random edits of both inputs exactly as a whole merge would.
    #[test]
    fn the_merger_equals_a_whole_merge_after_every_edit() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let (mut rest, mut kube) = (Model::default(), Model::default());
        let mut remotes = (BTreeMap::new(), BTreeMap::new());
        // By key, and whole (a small REST model), and switching between the two.
        let mut by_key = Merger {
            whole_max: None,
            ..Merger::default()
        };
        let mut whole = Merger::default();
        let mut switching = Merger {
            whole_max: Some(3),
            ..Merger::default()
        };
        for _ in 0..3000 {
            let side = if next(2) == 0 { &mut rest } else { &mut kube };
            let k = next(6);
            let on = next(3) != 0;
            match next(5) {
                0 => {
                    let name = format!("n{k}");
                    if on {
                        side.nodes
                            .insert(name.clone(), node(&name, &format!("10.0.0.{}", next(9))));
                    } else {
                        side.nodes.remove(&name);
                    }
                }
                1 => {
                    let name = format!("ns{k}");
                    if on {
                        let elan = 1 + next(4) as u32;
                        side.namespaces
                            .insert(name.clone(), Namespace { name, elan });
                    } else {
                        side.namespaces.remove(&name);
                    }
                }
                2 => {
                    let key = ServiceKey::new("default", &format!("s{k}"));
                    if on {
                        let ip = format!("10.96.0.{}", next(9));
                        side.services
                            .insert(key.clone(), service("default", &key.name, &ip));
                    } else {
                        side.services.remove(&key);
                    }
                }
                3 => {
                    let key = ServiceKey::new("default", &format!("s{k}"));
                    if on {
                        side.endpoints.insert(key, Vec::new());
                    } else {
                        side.endpoints.remove(&key);
                    }
                }
                _ => {
                    let remotes = if next(2) == 0 {
                        &mut remotes.0
                    } else {
                        &mut remotes.1
                    };
                    remotes.insert(format!("n{k}"), format!("tcp:10.0.0.{}:6640", next(9)));
                }
            }
            let want = merge(&rest, &remotes.0, &kube, &remotes.1);
            for merger in [&mut by_key, &mut whole, &mut switching] {
                let got = merger.update(&rest, &remotes.0, &kube, &remotes.1);
                assert_eq!(got, want);
            }
        }
    }
}
