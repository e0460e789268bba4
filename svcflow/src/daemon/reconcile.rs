//! The dispatcher: it learns which switch is which node's and starts, replaces and stops one
//! task per connected switch ([`super::agent`]); each task syncs its switch on its own. It
//! also holds each node's OVSDB port bindings, which the node's task follows.

use std::collections::BTreeMap;
use std::sync::Arc;

use coe::rest::Published;
use netvirt::config::Config;
use netvirt::desired::NodeBindings;
use netvirt::node_setup::datapath_id;
use openflow::driver::SwitchHandle;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::agent::{self, AgentParams};
use super::liveness::Link;
use super::operational::Installed;
use super::{Change, Shutdown, stopped};
use netvirt::shards::Renders;

struct Running {
    connection: u64,
    switch: SwitchHandle,
    task: JoinHandle<()>,
}

/// How long the switch a node already has may take to answer before a second connection that
/// claims its datapath id replaces it.
const INCUMBENT_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// The outcome of a probe of the switch a node already has, when another connection claims
/// the same datapath id.
struct Contest {
    node: String,
    connection: u64,
    switch: SwitchHandle,
    incumbent: u64,
    incumbent_alive: bool,
}

struct Dispatcher {
    config: Config,
    host_node: Option<String>,
    installed: Installed,
    models: watch::Receiver<Arc<Published>>,
    shutdown: Shutdown,
    /// Each node's bindings, as its OVSDB replica says (None until it has).
    bindings: BTreeMap<String, watch::Sender<Option<NodeBindings>>>,
    /// The task of each node whose switch is connected.
    agents: BTreeMap<String, Running>,
    /// Switches whose datapath id names no known node, by connection.
    idle: BTreeMap<u64, SwitchHandle>,
    /// Where switches coming and going are told (unreachable-node detection), if on.
    links: Option<mpsc::UnboundedSender<Link>>,
    /// Connections that claim a node's datapath id while the node's switch is connected,
    /// waiting for the probe of that switch.
    contested: BTreeMap<u64, String>,
    contests: mpsc::UnboundedSender<Contest>,
    /// The services' rendered flows and groups, shared by every node that renders them
    /// alike, so a central controller holds them once and not once per node.
    renders: Renders,
    metrics: Arc<super::metrics::Metrics>,
}

impl Dispatcher {
    fn link(&self, link: Link) {
        if let Some(tx) = &self.links {
            let _ = tx.send(link);
        }
    }

    /// The node whose datapath id `dpid` is, among the model's nodes and the nodes svcflow
    /// dials over OVSDB.
    fn node_of(&self, dpid: u64) -> Option<String> {
        let model = self.models.borrow();
        model
            .model
            .nodes
            .keys()
            .chain(model.ovsdb_remotes.keys())
            .chain(self.bindings.keys())
            .find(|name| datapath_id(name) == dpid)
            .cloned()
    }

    fn bindings_of(&mut self, node: &str) -> &watch::Sender<Option<NodeBindings>> {
        self.bindings
            .entry(node.to_string())
            .or_insert_with(|| watch::channel(None).0)
    }

    fn switch_up(&mut self, connection: u64, switch: SwitchHandle) {
        let dpid = switch.datapath_id();
        match self.node_of(dpid) {
            Some(node) => self.claim(node, connection, switch),
            None => {
                tracing::warn!(
                    "switch with datapath id {dpid:016x} (connection {connection}) is no known \
                     node's; leaving it idle until a node with that id appears"
                );
                self.idle.insert(connection, switch);
            }
        }
    }

    /// A connection claims `node`. If the node's switch is already connected, the newcomer is
    /// held until that switch has been probed: it replaces it only if it does not answer (a
    /// switch that restarted, or a connection that died unseen), and is refused otherwise, so
    /// a second peer with a node's datapath id can neither take the node over nor orphan its
    /// real connection.
    fn claim(&mut self, node: String, connection: u64, switch: SwitchHandle) {
        let Some(running) = self.agents.get(&node) else {
            return self.adopt(node, connection, switch);
        };
        if running.switch.is_closed() {
            return self.adopt(node, connection, switch);
        }
        let incumbent = running.switch.clone();
        let incumbent_id = running.connection;
        self.contested.insert(connection, node.clone());
        let tx = self.contests.clone();
        tokio::spawn(async move {
            let alive = matches!(
                tokio::time::timeout(INCUMBENT_PROBE, incumbent.barrier()).await,
                Ok(Ok(()))
            );
            let _ = tx.send(Contest {
                node,
                connection,
                switch,
                incumbent: incumbent_id,
                incumbent_alive: alive,
            });
        });
    }

    fn contest(&mut self, c: Contest) {
        if self.contested.remove(&c.connection).is_none() {
            return; // it went away meanwhile
        }
        let current = self.agents.get(&c.node).map(|r| r.connection);
        if c.incumbent_alive && current == Some(c.incumbent) {
            tracing::warn!(
                "node {}: connection {} claims datapath id {:016x}, which connection {} has and \
                 answers on; refusing the newcomer",
                c.node,
                c.connection,
                c.switch.datapath_id(),
                c.incumbent
            );
            tokio::spawn(async move { c.switch.close().await });
            return;
        }
        if current == Some(c.incumbent) {
            tracing::warn!(
                "node {}: connection {} did not answer within {:?}; connection {} replaces it",
                c.node,
                c.incumbent,
                INCUMBENT_PROBE,
                c.connection
            );
        }
        self.adopt(c.node, c.connection, c.switch);
    }

    fn adopt(&mut self, node: String, connection: u64, switch: SwitchHandle) {
        // A new task reads the switch on its first sync, so a reconnect starts from truth.
        self.stop(&node);
        let params = AgentParams {
            node: node.clone(),
            connection,
            switch: switch.clone(),
            config: self.config.clone(),
            host: self.host_node.as_deref() == Some(node.as_str()),
            models: self.models.clone(),
            bindings: self.bindings_of(&node).subscribe(),
            installed: self.installed.clone(),
            renders: self.renders.clone(),
            metrics: self.metrics.clone(),
        };
        let task = tokio::spawn(agent::run(params, self.shutdown.clone()));
        self.link(Link::Up(node.clone()));
        self.agents.insert(
            node,
            Running {
                connection,
                switch,
                task,
            },
        );
    }

    /// Stops a node's task and takes it out of the operational view.
    fn stop(&mut self, node: &str) {
        if let Some(running) = self.agents.remove(node) {
            running.task.abort();
            self.metrics.switch(node, false);
            self.link(Link::Down(node.to_string()));
            if let Ok(mut installed) = self.installed.write()
                && installed
                    .get(node)
                    .is_some_and(|v| v.connection == running.connection)
            {
                installed.remove(node);
            }
        }
    }

    fn switch_down(&mut self, connection: u64) {
        self.idle.remove(&connection);
        self.contested.remove(&connection);
        let gone: Vec<String> = self
            .agents
            .iter()
            .filter(|(_, r)| r.connection == connection)
            .map(|(n, _)| n.clone())
            .collect();
        for node in gone {
            tracing::info!("node {node}: switch gone; its flows stay until it reconnects");
            self.stop(&node);
        }
    }

    /// Idle switches whose node has since become known get their task.
    fn adopt_idle(&mut self) {
        let idle = std::mem::take(&mut self.idle);
        for (connection, switch) in idle {
            match self.node_of(switch.datapath_id()) {
                Some(node) => self.claim(node, connection, switch),
                None => {
                    self.idle.insert(connection, switch);
                }
            }
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Bindings(node, b) => {
                self.bindings_of(&node).send_replace(Some(b));
            }
            Change::NodeGone(node) => {
                if let Some(tx) = self.bindings.get(&node) {
                    tx.send_replace(None);
                }
            }
            Change::SwitchUp(connection, switch) => self.switch_up(connection, switch),
            Change::SwitchDown(connection) => self.switch_down(connection),
        }
    }
}

/// Runs until shutdown. The node tasks follow `models`; `links` hears each switch come and
/// go, if unreachable-node detection is on.
// The daemon's wiring: each argument is a channel or a handle the tasks share.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    config: Config,
    host_node: Option<String>,
    installed: Installed,
    models: watch::Receiver<Arc<Published>>,
    links: Option<mpsc::UnboundedSender<Link>>,
    mut changes: mpsc::UnboundedReceiver<Change>,
    shutdown: Shutdown,
    metrics: Arc<super::metrics::Metrics>,
) {
    let mut watch_models = models.clone();
    let (contests, mut contest_results) = mpsc::unbounded_channel();
    let mut d = Dispatcher {
        config,
        host_node,
        installed,
        models,
        shutdown: shutdown.clone(),
        bindings: BTreeMap::new(),
        agents: BTreeMap::new(),
        renders: Renders::new(),
        metrics,
        idle: BTreeMap::new(),
        links,
        contested: BTreeMap::new(),
        contests,
    };
    loop {
        tokio::select! {
            _ = stopped(shutdown.clone()) => break,
            change = changes.recv() => match change {
                Some(change) => d.apply(change),
                None => break,
            },
            Some(contest) = contest_results.recv() => d.contest(contest),
            // A switch that connected before its node was known may be known now.
            changed = watch_models.changed(), if !d.idle.is_empty() => {
                if changed.is_err() {
                    break;
                }
                d.adopt_idle();
            }
        }
        if !d.idle.is_empty() {
            d.adopt_idle();
        }
    }
    // The tasks see the same shutdown; wait for them briefly so their last logs are out.
    for (_, running) in std::mem::take(&mut d.agents) {
        let _ = running.task.await;
    }
}
