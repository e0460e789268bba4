//! The dispatcher: it learns which switch is which node's and starts, replaces and stops one
//! task per connected switch ([`super::agent`]); each task syncs its switch on its own. It
//! also holds each node's OVSDB port bindings, which the node's task follows.
//!
//! With replicas ([`super::election`]), only the switches of the nodes this replica masters
//! get a task; the others are kept connected as slaves ([`super::role::become_slave`]), ready
//! for the election to hand their node over.

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
use super::election::Input;
use super::liveness::Link;
use super::operational::Installed;
use super::{Change, Shutdown, stopped};
use netvirt::shards::Renders;

struct Running {
    connection: u64,
    switch: SwitchHandle,
    /// The node's task and its number; None while another replica masters the switch.
    task: Option<(u64, JoinHandle<()>)>,
    /// The request that makes the connection a slave, while it may be in flight: a task
    /// that claims the switch waits for it, so that the slave request cannot land after the
    /// master request on the same connection.
    standby: Option<JoinHandle<()>>,
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
    /// What was last synced to each switch that left.
    departed: super::departed::DepartedNodes,
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
    /// See [`AgentParams::health_secret`].
    health_secret: u64,
    metrics: Arc<super::metrics::Metrics>,
    status: Arc<super::status::Status>,
    /// With replicas: where the election is told about switches and nodes.
    election: Option<mpsc::UnboundedSender<Input>>,
    /// With replicas: the nodes this replica masters, with their epochs.
    masters: BTreeMap<String, u64>,
    /// Where node tasks report a lost mastership.
    report: mpsc::UnboundedSender<Change>,
    /// The number of the last node task started.
    tasks_started: u64,
}

impl Dispatcher {
    fn elect(&self, input: Input) {
        if let Some(tx) = &self.election {
            let _ = tx.send(input);
        }
    }

    /// Whether this replica writes to `node`'s switch, and with which epoch (None: no
    /// election, a single controller).
    fn mastership(&self, node: &str) -> Option<Option<u64>> {
        match &self.election {
            None => Some(None),
            Some(_) => self.masters.get(node).map(|e| Some(*e)),
        }
    }

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
        self.link(Link::Up(node.clone()));
        self.elect(Input::Switch(node.clone(), true));
        self.status.connected(&node, connection, switch.clone());
        self.agents.insert(
            node.clone(),
            Running {
                connection,
                switch,
                task: None,
                standby: None,
            },
        );
        match self.mastership(&node) {
            Some(epoch) => self.start_agent(&node, epoch),
            None => self.standby(&node),
        }
    }

    /// Starts `node`'s task on its running connection.
    fn start_agent(&mut self, node: &str, epoch: Option<u64>) {
        let Some(running) = self.agents.get_mut(node) else {
            return;
        };
        let (connection, switch) = (running.connection, running.switch.clone());
        let after = running.standby.take();
        self.metrics.master(node, true);
        self.tasks_started += 1;
        let task_id = self.tasks_started;
        let params = AgentParams {
            node: node.to_string(),
            connection,
            switch,
            config: self.config.clone(),
            host: self.host_node.as_deref() == Some(node),
            models: self.models.clone(),
            bindings: self.bindings_of(node).subscribe(),
            installed: self.installed.clone(),
            departed: self.departed.clone(),
            renders: self.renders.clone(),
            health_secret: self.health_secret,
            metrics: self.metrics.clone(),
            status: self.status.clone(),
            epoch,
            report: self.report.clone(),
            task_id,
            after,
        };
        let task = tokio::spawn(agent::run(params, self.shutdown.clone()));
        if let Some(running) = self.agents.get_mut(node) {
            running.task = Some((task_id, task));
        }
    }

    /// Makes `node`'s connection a slave, off the dispatcher's loop: it must not write, and
    /// must not get the packet-ins that only the master answers.
    fn standby(&mut self, node: &str) {
        let Some(running) = self.agents.get(node) else {
            return;
        };
        let (connection, switch) = (running.connection, running.switch.clone());
        self.metrics.master(node, false);
        let name = node.to_string();
        let task = tokio::spawn(async move {
            match super::role::become_slave(&switch).await {
                Ok(()) => tracing::info!(
                    "node {name}: another replica masters it; connection {connection} is a slave"
                ),
                Err(e) => {
                    tracing::warn!("node {name}: cannot make connection {connection} a slave: {e}")
                }
            }
        });
        if let Some(running) = self.agents.get_mut(node) {
            running.standby = Some(task);
        }
    }

    /// Stops a node's task, if it has one, and takes it out of the operational view.
    fn stop_agent(&mut self, node: &str) {
        let Some(running) = self.agents.get_mut(node) else {
            return;
        };
        let Some((_, task)) = running.task.take() else {
            return;
        };
        task.abort();
        let connection = running.connection;
        self.metrics.switch(node, false);
        if let Ok(mut installed) = self.installed.write()
            && installed
                .get(node)
                .is_some_and(|v| v.connection == connection)
        {
            installed.remove(node);
        }
    }

    /// Forgets a node's switch, stopping its task.
    fn stop(&mut self, node: &str) {
        self.stop_agent(node);
        if let Some(running) = self.agents.remove(node) {
            self.status.disconnected(node, running.connection);
            self.metrics.master(node, false);
            self.link(Link::Down(node.to_string()));
            self.elect(Input::Switch(node.to_string(), false));
        }
    }

    /// The election changed this replica's mastership of `node`.
    fn master(&mut self, node: String, epoch: Option<u64>) {
        match epoch {
            Some(e) => self.masters.insert(node.clone(), e),
            None => self.masters.remove(&node),
        };
        if !self.agents.contains_key(&node) {
            return;
        }
        self.stop_agent(&node);
        match epoch {
            Some(e) => self.start_agent(&node, Some(e)),
            None => self.standby(&node),
        }
    }

    /// A node's task stopped because the switch refused it (`stale`: its epoch was too old).
    fn demoted(&mut self, node: String, task_id: u64, stale: Option<Option<u64>>) {
        let current = self
            .agents
            .get(&node)
            .and_then(|r| r.task.as_ref())
            .map(|(id, _)| *id);
        if current != Some(task_id) {
            return; // a task that was already replaced or stopped
        }
        // The task has ended; this takes it out of the operational view and the metrics.
        self.stop_agent(&node);
        self.masters.remove(&node);
        self.metrics.master(&node, false);
        match stale {
            Some(generation) => self.elect(Input::Stale(node, generation)),
            None => self.elect(Input::Deposed(node)),
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
                self.elect(Input::Gone(node));
            }
            Change::Controllers(node, live) => self.elect(Input::Controllers(node, live)),
            Change::Master(node, epoch) => self.master(node, epoch),
            Change::Deposed(node, task_id) => self.demoted(node, task_id, None),
            Change::Stale(node, task_id, generation) => {
                self.demoted(node, task_id, Some(generation))
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
    election: Option<mpsc::UnboundedSender<Input>>,
    report: mpsc::UnboundedSender<Change>,
    mut changes: mpsc::UnboundedReceiver<Change>,
    shutdown: Shutdown,
    metrics: Arc<super::metrics::Metrics>,
    status: Arc<super::status::Status>,
    departed: super::departed::DepartedNodes,
) {
    let mut watch_models = models.clone();
    let (contests, mut contest_results) = mpsc::unbounded_channel();
    let mut d = Dispatcher {
        config,
        host_node,
        installed,
        departed,
        models,
        shutdown: shutdown.clone(),
        bindings: BTreeMap::new(),
        agents: BTreeMap::new(),
        renders: Renders::new(),
        health_secret: netvirt::health_answer::random_secret(),
        metrics,
        status,
        idle: BTreeMap::new(),
        links,
        contested: BTreeMap::new(),
        contests,
        election,
        masters: BTreeMap::new(),
        report,
        tasks_started: 0,
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
        if let Some((_, task)) = running.task {
            let _ = task.await;
        }
    }
}
