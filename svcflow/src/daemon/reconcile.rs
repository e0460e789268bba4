//! The reconcile task: whenever the model, a node's bindings or the set of connected switches
//! changes, recompute each node's desired state and sync its switch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use coe::rest::Published;
use netvirt::agent::serve_rejects;
use netvirt::config::Config;
use netvirt::desired::NodeBindings;
use netvirt::engine::Engine;
use netvirt::node_setup::datapath_id;
use netvirt::node_setup::{NodeSetup, host_gateway_commands};
use openflow::driver::SwitchHandle;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::operational::{Installed, Synced};
use super::{Change, Shutdown, stopped};

/// After a failed sync, try again this much later (unless something else changes first).
const RETRY: Duration = Duration::from_secs(2);

/// A switch that has not confirmed a sync within this long is given up on for this round
/// (its engine reads the switch afresh next time); a full sync of 110,000 flows takes
/// about 1.3 s.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// A burst of changes ends when none has come for this long…
const QUIET: Duration = Duration::from_millis(20);

/// …or when its first change is this old: a steady stream of changes is synced in batches at
/// least this often.
const MAX_DELAY: Duration = Duration::from_millis(250);

struct Agent {
    connection: u64,
    engine: Engine,
}

struct State {
    config: Config,
    /// The node whose host this daemon runs on, whose gateway port's host side it configures.
    host_node: Option<String>,
    /// The host commands last applied there.
    host_applied: Option<Vec<Vec<String>>>,
    /// What was last synced, for the operational view.
    installed: Installed,
    bindings: BTreeMap<String, NodeBindings>,
    /// The agent of each node whose switch is connected.
    agents: BTreeMap<String, Agent>,
    /// Switches whose datapath id names no known node, by connection.
    idle: BTreeMap<u64, SwitchHandle>,
}

impl State {
    /// The node whose datapath id `dpid` is, among the model's nodes and the nodes svcflow
    /// dials over OVSDB.
    fn node_of(&self, dpid: u64, model: &Published) -> Option<String> {
        model
            .model
            .nodes
            .keys()
            .chain(model.ovsdb_remotes.keys())
            .chain(self.bindings.keys())
            .find(|name| datapath_id(name) == dpid)
            .cloned()
    }

    fn switch_up(&mut self, connection: u64, switch: SwitchHandle, model: &Published) {
        let dpid = switch.datapath_id();
        match self.node_of(dpid, model) {
            Some(node) => self.adopt(node, connection, switch),
            None => {
                tracing::warn!(
                    "switch with datapath id {dpid:016x} (connection {connection}) is no known \
                     node's; leaving it idle until a node with that id appears"
                );
                self.idle.insert(connection, switch);
            }
        }
    }

    fn adopt(&mut self, node: String, connection: u64, switch: SwitchHandle) {
        tracing::info!("node {node}: its switch is connection {connection}");
        tokio::spawn(serve_rejects(switch.clone()));
        // A new engine reads the switch on its first sync, so a reconnect starts from truth.
        self.agents.insert(
            node,
            Agent {
                connection,
                engine: Engine::new(switch),
            },
        );
    }

    fn switch_down(&mut self, connection: u64) {
        self.idle.remove(&connection);
        self.agents.retain(|node, a| {
            let keep = a.connection != connection;
            if !keep {
                tracing::info!("node {node}: switch gone; its flows stay until it reconnects");
                if let Ok(mut installed) = self.installed.write() {
                    installed.remove(node);
                }
            }
            keep
        });
    }

    /// Idle switches whose node has since become known get their agent.
    fn adopt_idle(&mut self, model: &Published) {
        let idle = std::mem::take(&mut self.idle);
        for (connection, switch) in idle {
            match self.node_of(switch.datapath_id(), model) {
                Some(node) => self.adopt(node, connection, switch),
                None => {
                    self.idle.insert(connection, switch);
                }
            }
        }
    }

    fn apply(&mut self, change: Change, model: &Published) {
        match change {
            Change::Bindings(node, b) => {
                self.bindings.insert(node, b);
            }
            Change::NodeGone(node) => {
                self.bindings.remove(&node);
            }
            Change::SwitchUp(connection, switch) => self.switch_up(connection, switch, model),
            Change::SwitchDown(connection) => self.switch_down(connection),
        }
    }

    /// Syncs every node that has a model entry, bindings and a switch, all at once, each
    /// within [`SYNC_TIMEOUT`]. Returns whether any sync failed (and so should be retried).
    async fn sync_all(&mut self, model: &Arc<Published>) -> bool {
        let mut failed = false;
        // The host side first: it is this host's, and quick.
        if let Some(name) = self.host_node.clone()
            && self.agents.contains_key(&name)
            && let (Some(node), Some(bindings)) =
                (model.model.nodes.get(&name), self.bindings.get(&name))
            && bindings.gateway.is_some()
        {
            let commands = host_gateway_commands(&NodeSetup::default(), &self.config, node);
            if self.host_applied.as_ref() != Some(&commands) {
                match run_host_commands(&commands) {
                    Ok(()) => {
                        tracing::info!("node {name}: configured the gateway port's host side");
                        self.host_applied = Some(commands);
                    }
                    Err(e) => {
                        tracing::warn!(
                            "node {name}: configuring the gateway port's host side: {e}"
                        );
                        failed = true;
                    }
                }
            }
        }
        let (config, all_bindings, installed) = (&self.config, &self.bindings, &self.installed);
        // Every switch syncs concurrently, so a slow or silently dead one delays no other.
        let jobs = self.agents.iter_mut().filter_map(|(name, agent)| {
            let Some(node) = model.model.nodes.get(name) else {
                tracing::debug!("node {name}: not in the model yet; not syncing");
                return None;
            };
            let Some(bindings) = all_bindings.get(name) else {
                tracing::debug!("node {name}: no OVSDB bindings yet; not syncing");
                return None;
            };
            Some(async move {
                let sync = agent.engine.sync(node, &model.model, config, bindings);
                let result = match tokio::time::timeout(SYNC_TIMEOUT, sync).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err(format!("no answer within {SYNC_TIMEOUT:?}")),
                };
                (name, agent, result)
            })
        });
        for (name, agent, result) in futures::future::join_all(jobs).await {
            let (flows, groups) = agent.engine.shards().len();
            match result {
                Ok(report) => {
                    // The services' programming only changes with the switch's state.
                    let unchanged = installed
                        .read()
                        .ok()
                        .and_then(|i| i.get(name).map(|s| s.services.clone()))
                        .filter(|_| report.is_empty());
                    let synced = Synced {
                        switch: agent.engine.switch().clone(),
                        services: unchanged.unwrap_or_else(|| Arc::new(agent.engine.services())),
                        model: model.clone(),
                    };
                    if let Ok(mut installed) = installed.write() {
                        installed.insert(name.clone(), synced);
                    }
                    if !report.is_empty() {
                        for conflict in agent.engine.shards().conflicts() {
                            tracing::warn!("node {name}: {conflict}");
                        }
                    }
                    tracing::info!(
                        "node {name}: synced model revision {}: {} flows added, {} modified, {} \
                         deleted, {} groups changed ({flows} flows, {groups} groups desired)",
                        model.revision,
                        report.flows_added,
                        report.flows_modified,
                        report.flows_deleted,
                        report.groups_changed,
                    );
                    if report.conntrack_flushed > 0 {
                        tracing::info!(
                            "node {name}: flushed the conntrack entries of {} endpoint(s) that \
                             left UDP/SCTP services",
                            report.conntrack_flushed
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!("node {name}: sync failed: {e}; retrying");
                    failed = true;
                }
            }
        }
        failed
    }
}

/// Runs `ip` commands on this host, stopping at the first that fails.
fn run_host_commands(commands: &[Vec<String>]) -> Result<(), String> {
    for command in commands {
        let Some((program, args)) = command.split_first() else {
            continue;
        };
        let out = std::process::Command::new(program)
            .args(args)
            .output()
            .map_err(|e| format!("{}: {e}", command.join(" ")))?;
        if !out.status.success() {
            return Err(format!(
                "{}: {}",
                command.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// Runs until shutdown.
pub(crate) async fn run(
    config: Config,
    host_node: Option<String>,
    installed: Installed,
    mut models: watch::Receiver<Arc<Published>>,
    mut changes: mpsc::UnboundedReceiver<Change>,
    shutdown: Shutdown,
) {
    let mut state = State {
        config,
        host_node,
        host_applied: None,
        installed,
        bindings: BTreeMap::new(),
        agents: BTreeMap::new(),
        idle: BTreeMap::new(),
    };
    let mut retry_at: Option<Instant> = None;
    loop {
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let mut model = models.borrow().clone();
        tokio::select! {
            _ = stopped(shutdown.clone()) => return,
            changed = models.changed() => {
                if changed.is_err() {
                    return;
                }
                model = models.borrow_and_update().clone();
            }
            change = changes.recv() => match change {
                Some(change) => state.apply(change, &model),
                None => return,
            },
            _ = retry => {}
        }
        // Coalesce a burst: keep taking changes until none has come for QUIET, or for at
        // most MAX_DELAY, then sync once.
        let burst = Instant::now();
        loop {
            while let Ok(change) = changes.try_recv() {
                state.apply(change, &model);
            }
            if models.has_changed().unwrap_or(false) {
                model = models.borrow_and_update().clone();
            }
            let left = MAX_DELAY.saturating_sub(burst.elapsed());
            if left.is_zero() {
                break;
            }
            tokio::select! {
                _ = stopped(shutdown.clone()) => return,
                _ = tokio::time::sleep(QUIET.min(left)) => break,
                changed = models.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    model = models.borrow_and_update().clone();
                }
                change = changes.recv() => match change {
                    Some(change) => state.apply(change, &model),
                    None => return,
                },
            }
        }
        // A switch that connected before its node was known may be known now.
        if !state.idle.is_empty() {
            state.adopt_idle(&model);
        }
        let failed = state.sync_all(&model).await;
        retry_at = failed.then(|| Instant::now() + RETRY);
    }
}
