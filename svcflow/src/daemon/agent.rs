//! One task per connected switch: it keeps that switch equal to its node's desired state on
//! its own schedule, so a slow, frozen or hung switch delays no other.
//!
//! The task follows the model (a `watch` of [`Published`]) and its node's port bindings. Each
//! sync hands the model to the node's [`Engine`], which finds what changed by diffing it with
//! the model it last rendered, so a change costs its own size, not the cluster's.
//!
//! When to sync: at once, unless the switch used up its allowance of bundles ([`super::pace`]:
//! three at once after an idle spell, then one per 50 ms); then when the next is allowed, with
//! every change that came meanwhile. An isolated change, even one that comes in two halves,
//! waits for nothing, and a long burst reaches the switch at most once per interval. A sync
//! that sends nothing does not count.
//!
//! A long change may be published in parts ([`Published::part_of`]): the task sends each
//! part as it comes, with no pause between them and without waiting for the switch to
//! confirm a part's last bundles before rendering the next ([`Then::Continue`]),
//! and reports the change once, when its whole revision is on the switch and confirmed (one
//! sync line, status and metrics entry with the sum of the parts, timed from the first).

use std::sync::Arc;
use std::time::Duration;

use coe::rest::Published;
use netvirt::agent::serve_packet_ins;
use netvirt::config::Config;
use netvirt::desired::NodeBindings;
use netvirt::engine::{Engine, Then};
use netvirt::node_setup::{NodeSetup, host_gateway_commands};
use openflow::driver::SwitchHandle;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::operational::{Installed, NodeView, Snapshot};
use super::pace::Pace;
use super::{Shutdown, stopped};

/// After a failed sync, try again this much later (unless something else changes first).
const RETRY: Duration = Duration::from_secs(2);

/// A switch that has not confirmed a sync within this long is given up on for this round
/// (its engine reads the switch afresh next time); a full sync of 110,000 flows takes
/// about 1.3 s.
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

/// What the operational view asks a node's task.
pub(crate) enum Query {
    /// What the node's switch was last synced to.
    Snapshot(oneshot::Sender<Snapshot>),
    /// What the node's desired state cannot honour, as last rendered.
    Conflicts(oneshot::Sender<Vec<String>>),
    /// The dry-run plan: what a sync would change on the live switch now, as the lines of an
    /// `ovs-ofctl bundle` file.
    Plan(oneshot::Sender<Result<Vec<String>, String>>),
    /// A trace's temporary flows for this node, and its probe if it enters here.
    Trace(
        Box<super::trace::Ask>,
        oneshot::Sender<Result<super::trace::Prepared, coe::rest::operational::TraceFailure>>,
    ),
}

/// What a node's task needs.
pub(crate) struct AgentParams {
    pub node: String,
    pub connection: u64,
    pub switch: SwitchHandle,
    pub config: Config,
    /// Whether this daemon runs on the node's host and configures its gateway's host side.
    pub host: bool,
    pub models: watch::Receiver<Arc<Published>>,
    pub bindings: watch::Receiver<Option<NodeBindings>>,
    pub installed: Installed,
    /// Where the engine's state goes when the task ends, for `svcflow plan`.
    pub departed: super::departed::DepartedNodes,
    /// Service renders shared with the other nodes' tasks.
    pub renders: netvirt::shards::Renders,
    /// What the health-check answers' sequence numbers are keyed by, the same for every
    /// node and session of this daemon.
    pub health_secret: u64,
    pub metrics: Arc<super::metrics::Metrics>,
    /// Each node's last syncs, for the nodes view and the status page.
    pub status: Arc<super::status::Status>,
    /// With replicas: the node's epoch, claimed as the switch's master generation id before
    /// anything is written; the task ends, and says so on `report`, once the switch has
    /// another master.
    pub epoch: Option<u64>,
    pub report: mpsc::UnboundedSender<super::Change>,
    /// This task's number, in what it reports, so that a late report of an ended task never
    /// stops its successor.
    pub task_id: u64,
    /// A slave request on this connection that must finish before the claim (see
    /// `reconcile`).
    pub after: Option<tokio::task::JoinHandle<()>>,
}

/// Runs the node's sync loop until shutdown or until the task is aborted (its switch left).
pub(crate) async fn run(mut p: AgentParams, shutdown: Shutdown) {
    let node = p.node.clone();
    tracing::info!("node {node}: its switch is connection {}", p.connection);
    // Followed from before the claim, so that no role change after it is missed.
    let mut role = p.switch.role_status();
    role.borrow_and_update();
    if let Some(standby) = p.after.take() {
        let _ = tokio::time::timeout(SYNC_TIMEOUT, standby).await;
    }
    if let Some(epoch) = p.epoch {
        match super::role::claim_master(&p.switch, epoch).await {
            Ok(()) => tracing::info!(
                "node {node}: master of its switch on connection {} (generation id {epoch})",
                p.connection
            ),
            Err(e) => {
                tracing::warn!("node {node}: cannot become its switch's master: {e}");
                let report = match e {
                    super::role::ClaimError::Stale(g) => {
                        super::Change::Stale(node.clone(), p.task_id, g)
                    }
                    super::role::ClaimError::Failed(_) => {
                        super::Change::Deposed(node.clone(), p.task_id)
                    }
                };
                let _ = p.report.send(report);
                return;
            }
        }
    }
    // What the node's health-check node ports answer, for the probes its switch sends here.
    let (health, health_checks) = watch::channel(std::collections::BTreeMap::new());
    let mut health_seen = 0;
    let rejects = tokio::spawn(serve_packet_ins(
        p.switch.clone(),
        health_checks,
        p.health_secret,
    ));
    let (query_tx, mut queries) = mpsc::channel::<Query>(16);
    let mut engine = super::departed::Kept::new(
        &node,
        Engine::sharing(p.switch.clone(), &p.renders),
        p.departed.clone(),
    );
    let mut bundles_told = netvirt::engine::BundleCounts::default();
    p.metrics.switch(&node, true);
    let mut host_applied: Option<Vec<Vec<String>>> = None;
    let mut pace = Pace::default();
    let mut retry_at: Option<Instant> = None;
    let mut dirty = true;
    let mut synced: Option<Arc<Published>> = None;
    let mut parts: Option<Parts> = None;
    let mut macs = MacWatch::default();
    loop {
        if dirty {
            // Paced ([`Pace`]); changes that come meanwhile join the sync. The parts of a
            // change published in parts follow each other at once.
            let continuing = parts.is_some() || p.models.borrow().part_of.is_some();
            if let Some(at) = pace.next_at(Instant::now())
                && !continuing
            {
                tokio::select! {
                    _ = stopped(shutdown.clone()) => break,
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            dirty = false;
            let model = p.models.borrow_and_update().clone();
            let bindings = p.bindings.borrow_and_update().clone();
            let outcome = sync(
                &p,
                &mut engine,
                &mut host_applied,
                &mut parts,
                &model,
                bindings.as_ref(),
            )
            .await;
            if engine.shards().health_version() != health_seen {
                health_seen = engine.shards().health_version();
                health.send_replace(engine.shards().health_checks());
            }
            let sent = engine.bundles();
            p.metrics.bundles(
                &node,
                sent.committed.saturating_sub(bundles_told.committed),
                sent.failed.saturating_sub(bundles_told.failed),
            );
            bundles_told = sent;
            match outcome {
                Ok(sent) => {
                    retry_at = None;
                    if sent {
                        pace.sent(Instant::now());
                    }
                    engine.synced = true;
                    engine.bindings.clone_from(&bindings);
                    if synced.is_none() {
                        // Known to the operational view from its first sync on.
                        if let Ok(mut installed) = p.installed.write() {
                            installed.insert(
                                node.clone(),
                                NodeView {
                                    connection: p.connection,
                                    switch: p.switch.clone(),
                                    query: query_tx.clone(),
                                },
                            );
                        }
                    }
                    if let Some(bindings) = &bindings {
                        macs.check(&node, &model.model, bindings);
                    }
                    synced = Some(model);
                }
                Err(Skip::NotReady) => {}
                Err(Skip::Failed(e)) => {
                    p.metrics.sync_failed(&node);
                    p.status.failed(&node, model.target(), &e);
                    if p.epoch.is_some() && !still_master(&p.switch).await {
                        tracing::warn!(
                            "node {node}: sync failed: {e}; the switch has another master, \
                             stopping"
                        );
                        break;
                    }
                    tracing::warn!("node {node}: sync failed: {e}; retrying");
                    retry_at = Some(Instant::now() + RETRY);
                }
            }
        }
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stopped(shutdown.clone()) => break,
            changed = p.models.changed() => match changed {
                Ok(()) => dirty = true,
                Err(_) => break,
            },
            changed = p.bindings.changed() => match changed {
                Ok(()) => dirty = true,
                Err(_) => break,
            },
            _ = retry => dirty = true,
            // A closed connection ends the watch: the dispatcher stops this task then.
            Ok(()) = role.changed(), if p.epoch.is_some() => {
                let status = *role.borrow_and_update();
                if let Some(r) = status.filter(|r| r.role != openflow::session::role::MASTER) {
                    tracing::warn!(
                        "node {node}: the switch made another controller its master \
                         (generation id {}); stopping",
                        r.generation_id
                    );
                    break;
                }
            }
            Some(query) = queries.recv() => match query {
                Query::Snapshot(reply) => {
                    if let Some(model) = &synced {
                        let _ = reply.send(Snapshot {
                            services: Arc::new(engine.services()),
                            model: model.clone(),
                        });
                    }
                }
                Query::Conflicts(reply) => {
                    let _ = reply.send(engine.shards().conflicts());
                }
                Query::Trace(ask, reply) => {
                    let model = p.models.borrow().clone();
                    let bindings = p.bindings.borrow().clone();
                    let prepared = super::trace::prepare(
                        &node,
                        &model,
                        bindings.as_ref(),
                        &engine,
                        &p.config,
                        &ask,
                    );
                    let _ = reply.send(prepared);
                }
                Query::Plan(reply) => {
                    // Read and diffed off this loop: a plan never delays a sync.
                    let model = p.models.borrow().clone();
                    let bindings = p.bindings.borrow().clone();
                    let (switch, config, name) = (p.switch.clone(), p.config.clone(), node.clone());
                    tokio::spawn(async move {
                        let planned = dry_run(&name, &switch, &model, &config, bindings).await;
                        let _ = reply.send(planned);
                    });
                }
            }
        }
    }
    rejects.abort();
    if p.epoch.is_some() && !*shutdown.borrow() {
        let _ = p.report.send(super::Change::Deposed(node, p.task_id));
    }
}

/// What a sync would change on `switch` now: the full render of the node in `model`
/// against the switch as read, as `ovs-ofctl bundle` lines in the order they would be sent.
async fn dry_run(
    node: &str,
    switch: &SwitchHandle,
    model: &Published,
    config: &Config,
    bindings: Option<NodeBindings>,
) -> Result<Vec<String>, String> {
    let Some(spec) = model.model.nodes.get(node) else {
        return Err(format!("node {node} is not in the model"));
    };
    let Some(bindings) = bindings else {
        return Err(format!("node {node}: no OVSDB bindings yet"));
    };
    let actual = tokio::time::timeout(SYNC_TIMEOUT, netvirt::agent::read_state(switch))
        .await
        .map_err(|_| format!("node {node}: the switch did not answer within {SYNC_TIMEOUT:?}"))?
        .map_err(|e| format!("node {node}: reading the switch: {e}"))?;
    let want = netvirt::desired::desired(spec, &model.model, config, &bindings);
    Ok(netvirt::plan::plan(&want.state, &actual)
        .iter()
        .map(|step| netvirt::flow::OfctlStep(step).to_string())
        .collect())
}

/// Whether the switch still has this connection as its master.
async fn still_master(switch: &SwitchHandle) -> bool {
    !matches!(
        super::role::current(switch).await,
        Ok((role, _)) if role != openflow::session::role::MASTER
    )
}

/// Logs, once each, the pods of a node whose MAC no input gives (neither the model nor their
/// interface's `attached-mac`): the switch learns it from their first ARP. Follows the pods
/// by key: only changed pods are looked at, all of the node's when its bindings change.
#[derive(Default)]
struct MacWatch {
    pods: netvirt::model::Map<String, netvirt::model::PodInterface>,
    macs: std::collections::BTreeMap<String, netvirt::model::MacAddr>,
    ofports: std::collections::BTreeMap<String, u32>,
    logged: std::collections::BTreeSet<String>,
}

impl MacWatch {
    fn check(&mut self, node: &str, model: &netvirt::model::Model, bindings: &NodeBindings) {
        let mut look: Vec<&netvirt::model::PodInterface> = Vec::new();
        if self.macs != bindings.macs || self.ofports != bindings.ofports {
            self.macs = bindings.macs.clone();
            self.ofports = bindings.ofports.clone();
            look.extend(model.pods.values().filter(|p| p.node == node));
        } else {
            for item in self.pods.diff(&model.pods) {
                if let netvirt::model::DiffItem::Add(_, pod)
                | netvirt::model::DiffItem::Update { new: (_, pod), .. } = item
                    && pod.node == node
                {
                    look.push(pod);
                }
            }
        }
        for pod in look {
            let known = pod.mac.is_some() || bindings.macs.contains_key(&pod.iface_id);
            if known {
                self.logged.remove(&pod.uid);
            } else if bindings.ofports.contains_key(&pod.iface_id)
                && self.logged.insert(pod.uid.clone())
            {
                tracing::info!(
                    "node {node}: pod {}/{} has no MAC in the model nor in its interface's \
                     external_ids:attached-mac; the switch learns it from the pod's first ARP",
                    pod.namespace,
                    pod.name
                );
            }
        }
        self.pods = model.pods.clone();
    }
}

/// Why a round did not sync.
enum Skip {
    /// The model does not name the node yet, or its OVSDB bindings are not in.
    NotReady,
    /// The switch refused or did not answer.
    Failed(String),
}

/// One sync: the host side if this is the host's node, then the switch. Returns whether a
/// bundle went to the switch.
/// The parts of a change published in parts that are on the switch so far.
struct Parts {
    /// When the first part's sync began.
    started: Instant,
    /// What the parts' syncs did, summed.
    report: netvirt::agent::SyncReport,
}

async fn sync(
    p: &AgentParams,
    engine: &mut Engine,
    host_applied: &mut Option<Vec<Vec<String>>>,
    parts: &mut Option<Parts>,
    model: &Arc<Published>,
    bindings: Option<&NodeBindings>,
) -> Result<bool, Skip> {
    let name = &p.node;
    let Some(node) = model.model.nodes.get(name) else {
        tracing::debug!("node {name}: not in the model yet; not syncing");
        return Err(Skip::NotReady);
    };
    let Some(bindings) = bindings else {
        tracing::debug!("node {name}: no OVSDB bindings yet; not syncing");
        return Err(Skip::NotReady);
    };
    if p.host && bindings.gateway.is_some() {
        let commands = host_gateway_commands(&NodeSetup::default(), &p.config, node);
        if host_applied.as_ref() != Some(&commands) {
            // The routes are needed to reach services at all; the nftables rule only for
            // the host's own node ports: without `nft`, say so and go on.
            let (nft, ip): (Vec<Vec<String>>, Vec<Vec<String>>) = commands
                .iter()
                .cloned()
                .partition(|c| c.first().is_some_and(|p| p == "nft"));
            run_host_commands(&ip).await.map_err(|e| {
                Skip::Failed(format!("configuring the gateway port's host side: {e}"))
            })?;
            if let Err(e) = run_host_commands(&nft).await {
                tracing::warn!(
                    "node {name}: cannot set the nftables rule that lets this host reach its own \
                     node ports on its own addresses (they will be refused to its own \
                     processes; install nftables): {e}"
                );
            }
            tracing::info!("node {name}: configured the gateway port's host side");
            *host_applied = Some(commands);
        }
    }
    let started = Instant::now();
    // The rest of a change published in parts follows at once: the switch applies this
    // part's last bundles while the next part renders.
    let then = match model.part_of {
        Some(_) => Then::Continue,
        None => Then::Confirm,
    };
    let sync = engine.sync_then(node, &model.model, &p.config, bindings, then);
    let mut report = match tokio::time::timeout(SYNC_TIMEOUT, sync).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => return Err(Skip::Failed(e.to_string())),
        Err(_) => return Err(Skip::Failed(format!("no answer within {SYNC_TIMEOUT:?}"))),
    };
    let sent = !report.is_empty();
    if let Some(whole) = model.part_of {
        let so_far = parts.get_or_insert_with(|| Parts {
            started,
            report: Default::default(),
        });
        so_far.report.absorb(&report);
        tracing::debug!(
            "node {name}: sent part of model revision {whole} ({} services in the model so far): {} flows \
             added, {} modified, {} deleted, {} groups changed",
            model.model.services.len(),
            report.flows_added,
            report.flows_modified,
            report.flows_deleted,
            report.groups_changed,
        );
        return Ok(sent);
    }
    let mut started = started;
    if let Some(before) = parts.take() {
        started = before.started;
        report.absorb(&before.report);
    }
    let (flows, groups) = engine.shards().len();
    p.metrics
        .no_local(name, engine.shards().no_local_endpoints());
    p.metrics.conflicts(name, engine.shards().conflict_count());
    p.metrics.renders(p.renders.counts());
    let took = started.elapsed();
    p.metrics
        .synced(name, model.revision, took, &report, (flows, groups));
    p.status
        .synced(name, model.revision, took, &report, (flows, groups));
    if !report.is_empty() {
        for conflict in engine.shards().recent_conflicts() {
            tracing::warn!("node {name}: {conflict}");
        }
    }
    tracing::info!(
        "node {name}: synced model revision {}: {} flows added, {} modified, {} deleted, {} \
         groups changed ({flows} flows, {groups} groups desired)",
        model.revision,
        report.flows_added,
        report.flows_modified,
        report.flows_deleted,
        report.groups_changed,
    );
    if report.conntrack_flushed > 0 {
        tracing::info!(
            "node {name}: flushed the conntrack entries of {} endpoint(s) that left UDP/SCTP \
             services",
            report.conntrack_flushed
        );
    }
    Ok(sent)
}

/// Runs `ip` commands on this host, stopping at the first that fails; off the runtime's
/// threads (a child process each, awaited).
async fn run_host_commands(commands: &[Vec<String>]) -> Result<(), String> {
    for command in commands {
        let Some((program, args)) = command.split_first() else {
            continue;
        };
        let out = tokio::process::Command::new(program)
            .args(args)
            .output()
            .await
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
