//! Unreachable nodes (REST mode): a node whose switch has been disconnected for longer than
//! `--node-down-after` is taken to be down, and its endpoints leave every other node's groups
//! until its switch is back. Both moves are logged.
//!
//! It sits between the model the inputs publish and the node tasks: the tasks see the model
//! with the endpoints on down nodes marked neither ready nor serving, which no group uses.
//! The marking is by key ([`Overlay`]): a change of the model re-marks only the services it
//! touched, and a node going down or coming back re-marks only the services with an endpoint
//! there. With no node down, the tasks get the inputs' model itself, and nothing is indexed:
//! the first node to go down indexes the services by node in one pass over the endpoints.
//!
//! Kubernetes mode does not use it: the node lifecycle controller marks a lost node's
//! endpoints not ready in its EndpointSlices, and svcflow follows the slices.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use coe::rest::Published;
use netvirt::model::{DiffItem, Endpoint, Map, Model, ServiceKey};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::{Shutdown, stopped};

/// A node's switch connected or disconnected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// Its switch is connected.
    Up(String),
    /// Its switch is gone.
    Down(String),
}

/// Endpoints on `down` nodes, marked neither ready nor serving.
fn marked(endpoints: &[Endpoint], down: &BTreeSet<String>) -> Vec<Endpoint> {
    endpoints
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if e.node.as_ref().is_some_and(|n| down.contains(n)) {
                e.conditions.ready = false;
                e.conditions.serving = false;
            }
            e
        })
        .collect()
}

/// The services with an endpoint on each node.
fn by_node(model: &Model) -> HashMap<String, BTreeSet<ServiceKey>> {
    let mut by_node: HashMap<String, BTreeSet<ServiceKey>> = HashMap::new();
    for (key, endpoints) in model.endpoints.iter() {
        for node in endpoints.iter().filter_map(|e| e.node.as_ref()) {
            by_node.entry(node.clone()).or_default().insert(key.clone());
        }
    }
    by_node
}

/// The model with the endpoints of down nodes marked, kept up to date by key.
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    input: Model,
    /// The services with an endpoint on each node, kept only while a node is down: the
    /// first node to go down builds it in one pass over the endpoints, and changes keep it
    /// by key until every node is back. With every node up, a change costs nothing here.
    by_node: HashMap<String, BTreeSet<ServiceKey>>,
    down: BTreeSet<String>,
}

impl Overlay {
    /// The model as the node tasks should see it, after the input became `input`.
    pub(crate) fn update(&mut self, input: &Model) -> Model {
        if !self.down.is_empty() {
            self.follow(input);
        }
        self.input = input.clone();
        self.output()
    }

    /// Keeps `by_node` up to date, by key, as the input becomes `input`.
    fn follow(&mut self, input: &Model) {
        for item in self.input.endpoints.diff(&input.endpoints) {
            let (key, old, new) = match item {
                DiffItem::Add(k, v) => (k, None, Some(v)),
                DiffItem::Remove(k, v) => (k, Some(v), None),
                DiffItem::Update { old, new } => (new.0, Some(old.1), Some(new.1)),
            };
            for e in old.into_iter().flatten() {
                if let Some(node) = &e.node
                    && let Some(set) = self.by_node.get_mut(node)
                {
                    set.remove(key);
                }
            }
            for e in new.into_iter().flatten() {
                if let Some(node) = &e.node {
                    self.by_node
                        .entry(node.clone())
                        .or_default()
                        .insert(key.clone());
                }
            }
        }
        self.by_node.retain(|_, s| !s.is_empty());
    }

    /// Sets the down nodes; returns the model the node tasks should see now.
    pub(crate) fn set_down(&mut self, down: BTreeSet<String>) -> Model {
        if self.down.is_empty() && !down.is_empty() {
            self.by_node = by_node(&self.input);
        }
        self.down = down;
        if self.down.is_empty() {
            self.by_node = HashMap::new();
        }
        self.output()
    }

    fn output(&self) -> Model {
        let mut out = self.input.clone();
        if self.down.is_empty() {
            return out;
        }
        let keys: BTreeSet<&ServiceKey> = self
            .down
            .iter()
            .filter_map(|n| self.by_node.get(n))
            .flatten()
            .collect();
        let mut endpoints: Map<ServiceKey, Vec<Endpoint>> = out.endpoints.clone();
        for key in keys {
            if let Some(list) = self.input.endpoints.get(key) {
                endpoints.insert(key.clone(), marked(list, &self.down));
            }
        }
        out.endpoints = endpoints;
        out
    }
}

/// Follows `input` and the switches' links, and publishes the model the node tasks see.
pub(crate) async fn run(
    down_after: Duration,
    mut input: watch::Receiver<Arc<Published>>,
    mut links: mpsc::UnboundedReceiver<Link>,
    output: watch::Sender<Arc<Published>>,
    shutdown: Shutdown,
) {
    let started = Instant::now();
    let mut overlay = Overlay::default();
    // When each node's switch was last seen gone (from the start for a node never seen).
    let mut gone_since: BTreeMap<String, Instant> = BTreeMap::new();
    let mut connected: BTreeSet<String> = BTreeSet::new();
    let mut down: BTreeSet<String> = BTreeSet::new();
    let mut published = input.borrow_and_update().clone();
    loop {
        // The nodes whose switch has been gone for longer than `down_after`.
        let now = Instant::now();
        let mut next_check: Option<Instant> = None;
        let mut want: BTreeSet<String> = BTreeSet::new();
        for node in published.model.nodes.keys() {
            if connected.contains(node) {
                continue;
            }
            let since = *gone_since.entry(node.clone()).or_insert(started);
            let due = since + down_after;
            if due <= now {
                want.insert(node.clone());
            } else {
                next_check = Some(next_check.map_or(due, |n: Instant| n.min(due)));
            }
        }
        for node in want.difference(&down) {
            tracing::warn!(
                "node {node}: its switch has been disconnected for over {down_after:?}; its \
                 endpoints leave the other nodes' groups until it is back"
            );
        }
        for node in down.difference(&want) {
            tracing::info!("node {node}: back; its endpoints return to the other nodes' groups");
        }
        let mut model = overlay.update(&published.model);
        if want != down {
            down = want;
            model = overlay.set_down(down.clone());
        }
        let out = Published {
            model,
            ovsdb_remotes: published.ovsdb_remotes.clone(),
            revision: published.revision,
            part_of: published.part_of,
        };
        output.send_if_modified(|current| {
            if **current == out {
                false
            } else {
                *current = Arc::new(out);
                true
            }
        });
        let check = async {
            match next_check {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stopped(shutdown.clone()) => return,
            changed = input.changed() => {
                if changed.is_err() {
                    return;
                }
                published = input.borrow_and_update().clone();
            }
            link = links.recv() => match link {
                Some(Link::Up(node)) => {
                    gone_since.remove(&node);
                    connected.insert(node);
                }
                Some(Link::Down(node)) => {
                    connected.remove(&node);
                    gone_since.insert(node, Instant::now());
                }
                None => return,
            },
            _ = check => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(ip: &str, node: &str) -> Endpoint {
        Endpoint::new(ip.parse().unwrap(), Vec::new(), Some(node.to_string()))
    }

    #[test]
    fn endpoints_on_down_nodes_are_marked_and_come_back() {
        let mut model = Model::default();
        let web = ServiceKey::new("default", "web");
        let db = ServiceKey::new("default", "db");
        model.endpoints.insert(
            web.clone(),
            vec![endpoint("10.0.1.1", "n1"), endpoint("10.0.2.1", "n2")],
        );
        model
            .endpoints
            .insert(db.clone(), vec![endpoint("10.0.1.2", "n1")]);
        let mut overlay = Overlay::default();
        assert_eq!(
            overlay.update(&model),
            model,
            "no node down: the model itself"
        );
        let out = overlay.set_down(BTreeSet::from(["n2".to_string()]));
        let ready = |m: &Model, k: &ServiceKey| -> Vec<bool> {
            m.endpoints[k].iter().map(|e| e.conditions.ready).collect()
        };
        assert_eq!(ready(&out, &web), [true, false]);
        assert!(!out.endpoints[&web][1].conditions.serving);
        assert_eq!(ready(&out, &db), [true]);
        // A change while n2 is down is marked too.
        model
            .endpoints
            .insert(db.clone(), vec![endpoint("10.0.2.9", "n2")]);
        let out = overlay.update(&model);
        assert_eq!(ready(&out, &db), [false]);
        // n2 back: everything as the input says.
        assert_eq!(overlay.set_down(BTreeSet::new()), model);
        assert!(
            overlay.by_node.is_empty(),
            "nothing kept with every node up"
        );
        // Changes while every node is up are seen when a node goes down again.
        model.endpoints.insert(
            web.clone(),
            vec![endpoint("10.0.1.1", "n1"), endpoint("10.0.3.1", "n3")],
        );
        assert_eq!(overlay.update(&model), model);
        let out = overlay.set_down(BTreeSet::from(["n3".to_string()]));
        assert_eq!(ready(&out, &web), [true, false]);
        assert_eq!(ready(&out, &db), [true]);
        let out = overlay.set_down(BTreeSet::from(["n1".to_string(), "n3".to_string()]));
        assert_eq!(ready(&out, &web), [false, false]);
        assert_eq!(ready(&out, &db), [true], "db's endpoint is on n2");
    }
}
