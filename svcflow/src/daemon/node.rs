//! The OVSDB side of each node: dial its OVSDB server, converge `br-int` (with its controller
//! and gateway port), and report the port bindings whenever they change.
//!
//! With TLS, a node's OVSDB server is who its certificate says: dialled (`ssl:`), its
//! certificate must carry the node's name as its common name (checked by the rustls verifier
//! on every reconnection); on the manager port, the name it claims must be its certificate's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::metrics::Metrics;

use coe::rest::Published;
use netvirt::desired::NodeBindings;
use netvirt::node_setup::{
    NodeSetup, bindings, connected_controllers, datapath_id, reconfigure_ops, setup_ops,
};
use ovsdb::ClientConfig;
use ovsdb::vswitch::VSwitch;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::{Change, Security, Shutdown, stopped};

/// The OVSDB remote of every node: the command line's, then the REST model's for the others.
fn remotes(
    overrides: &BTreeMap<String, String>,
    published: &Published,
) -> BTreeMap<String, String> {
    let mut all = published.ovsdb_remotes.clone();
    all.extend(overrides.iter().map(|(n, r)| (n.clone(), r.clone())));
    all
}

/// Keeps one node task per OVSDB remote, following the model's nodes: a new node gets a task,
/// a changed remote a fresh one, a removed node loses its task.
pub(crate) async fn manage(
    overrides: BTreeMap<String, String>,
    security: Security,
    base: NodeSetup,
    mut models: watch::Receiver<Arc<Published>>,
    changes: mpsc::UnboundedSender<Change>,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
) {
    let mut running: BTreeMap<String, (String, JoinHandle<()>)> = BTreeMap::new();
    // Remotes refused by the plain-TCP rule, so each is logged once.
    let mut refused: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let mut wanted = remotes(&overrides, &models.borrow_and_update());
        wanted.retain(|node, remote| {
            if overrides.contains_key(node) {
                return true;
            }
            let secure =
                crate::tls::policy::model_remote(remote, security.tls.is_some(), security.insecure);
            match secure {
                Ok(dial) => {
                    *remote = dial;
                    refused.remove(node);
                    true
                }
                Err(why) => {
                    if refused.get(node) != Some(remote) {
                        tracing::error!("node {node}: not dialling its OVSDB server: {why}");
                        refused.insert(node.clone(), remote.clone());
                    }
                    false
                }
            }
        });
        running.retain(|node, (remote, task)| {
            if wanted.get(node) == Some(remote) {
                return true;
            }
            tracing::info!("node {node}: no longer dialling OVSDB at {remote}");
            task.abort();
            metrics.ovsdb(node, false);
            let _ = changes.send(Change::NodeGone(node.clone()));
            false
        });
        for (node, remote) in wanted {
            if running.contains_key(&node) {
                continue;
            }
            let setup = NodeSetup {
                datapath_id: datapath_id(&node),
                ..base.clone()
            };
            let client = match &security.tls {
                Some(tls) if remote.starts_with("ssl:") => match tls.client_for(&node) {
                    Ok(tls) => ClientConfig {
                        tls_client: Some(tls),
                        ..ClientConfig::default()
                    },
                    Err(e) => {
                        tracing::error!("node {node}: TLS: {e}");
                        continue;
                    }
                },
                _ => ClientConfig::default(),
            };
            let task = tokio::spawn(run_node(
                node.clone(),
                remote.clone(),
                client,
                setup,
                changes.clone(),
                shutdown.clone(),
                metrics.clone(),
            ));
            running.insert(node, (remote, task));
        }
        tokio::select! {
            _ = stopped(shutdown.clone()) => break,
            changed = models.changed() => if changed.is_err() { break },
        }
    }
    for (_, (_, task)) in running {
        task.abort();
    }
}

/// How long to wait for the replica to change before looking again anyway.
const IDLE_CHECK: Duration = Duration::from_secs(60);
/// Pause after a failed connect, transaction or setup computation.
const RETRY: Duration = Duration::from_secs(2);
/// Pause after a setup transaction lost a race with another writer of the same rows.
const RACE_RETRY: Duration = Duration::from_millis(100);
/// The longest pause between attempts to reach an OVSDB server for the first time.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

async fn run_node(
    node: String,
    remote: String,
    client: ClientConfig,
    setup: NodeSetup,
    changes: mpsc::UnboundedSender<Change>,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
) {
    tokio::select! {
        _ = stopped(shutdown) => {}
        _ = converge(&node, &remote, client, &setup, &changes, &metrics) => {}
    }
}

/// Dials `remote`, then forever: applies `setup_ops` until there are none, reports bindings
/// that changed, and waits for the replica to change.
async fn converge(
    node: &str,
    remote: &str,
    client: ClientConfig,
    setup: &NodeSetup,
    changes: &mpsc::UnboundedSender<Change>,
    metrics: &Arc<Metrics>,
) {
    let mut backoff = Duration::from_secs(1);
    let vs = loop {
        match VSwitch::connect(remote, client.clone()).await {
            Ok((vs, mut events)) => {
                tracing::info!(
                    "node {node}: connected to OVSDB at {remote}; its switch dials {} as datapath {:016x}",
                    setup.controller,
                    setup.datapath_id
                );
                // Log connection changes; the client reconnects by itself.
                let name = node.to_string();
                metrics.ovsdb(node, true);
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    while let Some(event) = events.recv().await {
                        match event {
                            // Our own close, at shutdown or when the node leaves.
                            ovsdb::ClientEvent::Disconnected(ovsdb::SessionError::Local) => {
                                tracing::debug!("node {name}: OVSDB connection closed");
                                metrics.ovsdb(&name, false);
                            }
                            ovsdb::ClientEvent::Disconnected(e) => {
                                tracing::warn!("node {name}: OVSDB connection lost: {e}");
                                metrics.ovsdb(&name, false);
                            }
                            ovsdb::ClientEvent::Resynced => {
                                tracing::info!("node {name}: OVSDB reconnected");
                                metrics.ovsdb(&name, true);
                            }
                            _ => {}
                        }
                    }
                });
                break vs;
            }
            Err(e) => {
                tracing::warn!(
                    "node {node}: cannot connect to OVSDB at {remote}: {e}; retrying in {backoff:?}"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    };
    keep_converged(node, &vs, setup, changes).await;
}

/// Forever: applies `setup_ops` until there are none, reports bindings that changed, and
/// waits for the replica to change.
async fn keep_converged(
    node: &str,
    vs: &VSwitch,
    setup: &NodeSetup,
    changes: &mpsc::UnboundedSender<Change>,
) {
    let mut reported: Option<NodeBindings> = None;
    let mut controllers: Option<std::collections::BTreeSet<String>> = None;
    // Whether the switch was connected to this daemon when last looked at.
    let mut dialled = false;
    loop {
        // Compute into a local: the replica guard must not live across an await.
        let ops = setup_ops(&vs.replica.read(), setup);
        match ops {
            Err(e) => {
                tracing::warn!("node {node}: cannot plan the bridge setup: {e}");
                tokio::time::sleep(RETRY).await;
                continue;
            }
            Ok(ops) if !ops.is_empty() => {
                tracing::info!(
                    "node {node}: setting up {} ({} OVSDB operations)",
                    setup.bridge,
                    ops.len()
                );
                if let Err(e) = vs.client.transact("Open_vSwitch", ops).await {
                    // Another replica setting the same bridge up at the same moment makes
                    // ours break a unique index: its rows are on their way to the replica,
                    // so look again soon rather than after the usual pause.
                    let raced = matches!(
                        e.transact().and_then(|t| t.kind()),
                        Some(ovsdb::ops::ErrorKind::ConstraintViolation)
                    );
                    if raced {
                        tracing::info!(
                            "node {node}: bridge setup raced another writer ({e}); looking again"
                        );
                        tokio::time::sleep(RACE_RETRY).await;
                    } else {
                        tracing::warn!("node {node}: bridge setup transaction failed: {e}");
                        tokio::time::sleep(RETRY).await;
                    }
                }
                continue;
            }
            Ok(_) => {}
        }
        let now = bindings(&vs.replica.read(), &setup.bridge);
        if reported.as_ref() != Some(&now) {
            tracing::info!(
                "node {node}: {} pod interfaces bound, gateway port {}",
                now.ofports.len(),
                now.gateway
                    .map_or("missing".to_string(), |g| format!("on port {}", g.ofport))
            );
            if changes
                .send(Change::Bindings(node.to_string(), now.clone()))
                .is_err()
            {
                return;
            }
            reported = Some(now);
        }
        // The replicas the switch is connected to, for the election of its master (only
        // replicas share a switch, and only they elect).
        let live = |r: &ovsdb::Replica| {
            setup
                .shared_controller
                .then(|| connected_controllers(r, &setup.bridge))
        };
        if let Some(connected) = live(&vs.replica.read())
            && controllers.as_ref() != Some(&connected)
        {
            if changes
                .send(Change::Controllers(node.to_string(), connected.clone()))
                .is_err()
            {
                return;
            }
            controllers = Some(connected);
        }
        // Once the switch has dialled this daemon, ovs-vswitchd reconfigures (`next_cfg`), so
        // that the live connection takes the Controller row's `max_backoff`
        // (`reconfigure_ops` says why).
        let dials_me = |r: &ovsdb::Replica| {
            connected_controllers(r, &setup.bridge).contains(&setup.controller)
        };
        let connected = dials_me(&vs.replica.read());
        if connected && !dialled {
            let ops = reconfigure_ops(&vs.replica.read());
            if let Err(e) = vs.client.transact("Open_vSwitch", ops).await {
                tracing::warn!("node {node}: asking ovs-vswitchd to reconfigure failed: {e}");
                tokio::time::sleep(RETRY).await;
                continue;
            }
            tracing::info!(
                "node {node}: its switch dialled this daemon; ovs-vswitchd asked to reconfigure, \
                 so that the connection takes max_backoff"
            );
        }
        dialled = connected;
        let last = reported.clone();
        let last_controllers = controllers.clone();
        let changed = vs
            .replica
            .wait_for(IDLE_CHECK, |r| {
                let setup_needed = setup_ops(r, setup).map_or(true, |ops| !ops.is_empty());
                (setup_needed
                    || Some(bindings(r, &setup.bridge)) != last
                    || live(r).is_some_and(|c| Some(c) != last_controllers)
                    || dials_me(r) != dialled)
                    .then_some(())
            })
            .await;
        match changed {
            Ok(()) | Err(ovsdb::Error::Timeout) => {}
            Err(e) => {
                tracing::warn!("node {node}: OVSDB replica: {e}");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// Passive mode: node `ovsdb-server`s pointed at svcflow with
/// `ovs-vsctl set-manager tcp:ADDR` (`ssl:ADDR` with TLS) connect here. Each is named by its
/// Open_vSwitch `external_ids:hostname` (or `system-id`), which must be a node's name in the
/// model, and with TLS its certificate's common name; it is then set up and watched like a
/// dialled one, for as long as its connection lasts.
pub(crate) async fn listen(
    addr: std::net::SocketAddr,
    security: Security,
    base: NodeSetup,
    changes: mpsc::UnboundedSender<Change>,
    shutdown: Shutdown,
) {
    let tls = security.tls.is_some();
    let target = super::listen_target(addr, tls);
    let config = ClientConfig {
        tls_server: security.tls.as_ref().map(|t| t.mutual.clone()),
        ..ClientConfig::default()
    };
    let listener = match ovsdb::Listener::bind(&target, config).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("cannot listen for OVSDB managers on {target}: {e}");
            return;
        }
    };
    let scheme = if tls { "ssl" } else { "tcp" };
    tracing::info!("listening for node OVSDB servers (set-manager {scheme}:{addr})");
    // The node each live connection serves: a second server claiming a node that already has
    // one is refused until the first is gone (its connection closed or stopped answering the
    // client's probes), so it can neither replace the node's bindings nor orphan them.
    let serving: Arc<std::sync::Mutex<BTreeMap<String, std::net::SocketAddr>>> = Arc::default();
    loop {
        let accepted = tokio::select! {
            _ = stopped(shutdown.clone()) => return,
            accepted = listener.accept() => accepted,
        };
        let ovsdb::Accepted {
            client,
            mut events,
            peer,
            certificate,
        } = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accepting an OVSDB manager connection: {e}");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let base = base.clone();
        let changes = changes.clone();
        let serving = serving.clone();
        tokio::spawn(async move {
            let vs = match VSwitch::new(client).await {
                Ok(vs) => vs,
                Err(e) => {
                    tracing::warn!("OVSDB server at {peer}: {e}");
                    return;
                }
            };
            let name = {
                let replica = vs.replica.read();
                ovsdb::vswitch::VSwitchQuery::open_vswitch(&*replica).and_then(|o| {
                    o.external_ids
                        .get("hostname")
                        .or_else(|| o.external_ids.get("system-id"))
                        .cloned()
                })
            };
            let Some(node) = name else {
                tracing::warn!(
                    "OVSDB server at {peer} has no external_ids:hostname or system-id; ignoring it"
                );
                return;
            };
            if tls && let Err(why) = crate::tls::check_node(certificate.as_deref(), &node) {
                tracing::warn!(
                    "node {node}: an OVSDB server at {peer} claims it, but {why}; refusing it"
                );
                return;
            }
            {
                let mut serving = serving.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(first) = serving.get(&node) {
                    tracing::warn!(
                        "node {node}: an OVSDB server at {peer} claims it while the one at \
                         {first} is connected; refusing it"
                    );
                    return;
                }
                serving.insert(node.clone(), peer);
            }
            tracing::info!("node {node}: its OVSDB server connected from {peer}");
            let setup = NodeSetup {
                datapath_id: datapath_id(&node),
                ..base
            };
            tokio::select! {
                _ = keep_converged(&node, &vs, &setup, &changes) => {}
                _ = async {
                    while let Some(event) = events.recv().await {
                        if matches!(event, ovsdb::ClientEvent::Disconnected(_)) {
                            break;
                        }
                    }
                } => {
                    tracing::info!("node {node}: its OVSDB server disconnected");
                }
            }
            serving
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&node);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_remotes_override_the_models() {
        let published = Published {
            ovsdb_remotes: BTreeMap::from([
                ("n1".to_string(), "tcp:10.0.0.1:6640".to_string()),
                ("n2".to_string(), "tcp:10.0.0.2:6640".to_string()),
            ]),
            ..Published::default()
        };
        let overrides = BTreeMap::from([
            ("n1".to_string(), "unix:/run/db.sock".to_string()),
            ("n3".to_string(), "tcp:10.0.0.3:6640".to_string()),
        ]);
        let all = remotes(&overrides, &published);
        assert_eq!(all.len(), 3);
        assert_eq!(all["n1"], "unix:/run/db.sock");
        assert_eq!(all["n2"], "tcp:10.0.0.2:6640");
        assert_eq!(all["n3"], "tcp:10.0.0.3:6640");
    }
}
