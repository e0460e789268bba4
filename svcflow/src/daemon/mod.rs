//! `svcflow run`: the daemon. It wires the parts together:
//!
//! - the REST northbound ([`coe::rest::Northbound`]) publishes models; with Kubernetes on,
//!   [`kubernetes`] merges them with the watchers' model (Kubernetes wins on shared keys);
//! - one task per node ([`node`]) dials the node's OVSDB server, converges `br-int`, its
//!   controller and the gateway port, and reports the node's port bindings;
//! - the OpenFlow listener accepts switches, known by datapath id ([`switches`]);
//! - the dispatcher ([`reconcile`]) runs one task per connected switch ([`agent`]), which
//!   keeps that switch equal to its node's desired state on its own schedule: a slow or hung
//!   switch delays no other; the services they render alike are held once for all of them;
//! - with replicas, [`election`] decides which nodes this replica masters (OVSDB locks on
//!   the shared database with `--store ovsdb:`, or Kubernetes Leases through [`lease`]), and
//!   only those get a task; [`role`] makes the switch the fence (OpenFlow roles and
//!   generation ids);
//! - [`metrics`] serves `/metrics`, `/healthz` and `/livez` from what the tasks report;
//!   [`status`] keeps each node's connection and last syncs for the REST nodes view and the
//!   status page.
//!
//! With `--ssl-*`, every listener and remote runs TLS with the configs of [`crate::tls`], and
//! [`switches`] and [`node`] check that each peer is the node its certificate names.
//!
//! SIGTERM or SIGINT stops everything; flows stay on the switches (fail mode secure).

mod agent;
mod departed;
mod election;
mod health;
mod kubernetes;
mod lease;
mod liveness;
mod metrics;
mod node;
mod operational;
mod pace;
mod reconcile;
mod role;
mod status;
mod switches;
mod trace;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;

use coe::rest::{Northbound, Published, RestConfig};
use netvirt::desired::NodeBindings;
use netvirt::node_setup::NodeSetup;
use openflow::driver::{DriverConfig, Listener, SwitchHandle};
use tokio::sync::{mpsc, watch};

use crate::config::{ElectionMode, RunConfig};

/// What the reconcile task is told.
#[derive(Debug)]
pub(crate) enum Change {
    /// A node's port bindings, as its OVSDB replica now says.
    Bindings(String, NodeBindings),
    /// A node's OVSDB task stopped (the node left the configuration).
    NodeGone(String),
    /// The controller targets a node's switch says it is connected to (`is_connected`).
    Controllers(String, std::collections::BTreeSet<String>),
    /// A node's task (by its number) found its switch taken by another master and stopped.
    Deposed(String, u64),
    /// A node's task (by its number) had its master request refused as stale: the switch has
    /// accepted this generation id.
    Stale(String, u64, Option<u64>),
    /// The election: this replica masters the node, with this epoch (Some), or no longer does.
    Master(String, Option<u64>),
    /// A switch connected; the number tells its connections apart.
    SwitchUp(u64, SwitchHandle),
    /// That connection closed.
    SwitchDown(u64),
}

/// A shutdown signal: `true` once the daemon is stopping.
pub(crate) type Shutdown = watch::Receiver<bool>;

/// TLS and the plain-TCP rule, as the daemon's tasks need them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Security {
    /// The configs built from `--ssl-*`, if TLS is on.
    pub(crate) tls: Option<Arc<crate::tls::Tls>>,
    /// `--insecure`: plain TCP beyond loopback is allowed.
    pub(crate) insecure: bool,
}

/// Waits until `shutdown` says stop (or its sender is gone).
pub(crate) async fn stopped(mut shutdown: Shutdown) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Runs the daemon until a signal; the exit code says whether it started and stopped cleanly.
pub fn run(config: RunConfig) -> ExitCode {
    init_logging(&config.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(level: &str) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let level = tracing::Level::from_str(level).unwrap_or(tracing::Level::INFO);
    // kube's client logs every failed request as an ERROR (its HTTP trace layer), so an API
    // server outage would log one per watch and retry; svcflow's watchers say it once, as a
    // warning (`coe::k8s::watch`), and each retry at debug. Those lines are kept at trace.
    let kube_requests = if level >= tracing::Level::TRACE {
        LevelFilter::from_level(level)
    } else {
        LevelFilter::OFF
    };
    let filter = Targets::new()
        .with_default(LevelFilter::from_level(level))
        .with_target("kube_client::client::builder", kube_requests);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false),
        )
        .with(filter)
        .try_init();
}

/// The controller target nodes' switches dial (`ssl:` with TLS, else `tcp:`): the advertised
/// address, else the listen address, else (listening on every address) loopback, which
/// reaches the listener only from the controller's own host.
fn controller_target(listen: SocketAddr, advertise: Option<SocketAddr>, tls: bool) -> String {
    let dial = advertise.unwrap_or(listen);
    let scheme = if tls { "ssl" } else { "tcp" };
    if dial.ip().is_unspecified() {
        format!("{scheme}:127.0.0.1:{}", dial.port())
    } else {
        match dial {
            SocketAddr::V4(a) => format!("{scheme}:{}:{}", a.ip(), a.port()),
            SocketAddr::V6(a) => format!("{scheme}:[{}]:{}", a.ip(), a.port()),
        }
    }
}

/// The listen target of an address, in OVS syntax: `pssl:PORT:IP` with TLS, else `ptcp:`.
fn listen_target(addr: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "pssl" } else { "ptcp" };
    format!("{scheme}:{}:{}", addr.port(), addr.ip())
}

/// Where this replica's REST northbound is reached, as other replicas' operational views
/// point to it: the listen address, or (listening on every address) the advertised OpenFlow
/// address's host, else loopback.
fn rest_url(listen: SocketAddr, advertise: Option<SocketAddr>, tls: bool) -> String {
    let ip = match (listen.ip().is_unspecified(), advertise) {
        (false, _) => listen.ip(),
        (true, Some(a)) => a.ip(),
        (true, None) => std::net::IpAddr::from([127, 0, 0, 1]),
    };
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{}", SocketAddr::new(ip, listen.port()))
}

async fn serve(config: RunConfig) -> Result<(), String> {
    let (stop_tx, shutdown) = watch::channel(false);
    let security = Security {
        tls: config
            .tls
            .as_ref()
            .map(crate::tls::Tls::load)
            .transpose()
            .map_err(|e| format!("TLS: {e}"))?
            .map(Arc::new),
        insecure: config.insecure,
    };
    let tls = security.tls.is_some();
    if let Some(files) = &config.tls {
        tracing::info!(
            "TLS on every listener and OVSDB remote: certificate {}, CA {}; a node's \
             certificate must carry its name as its common name",
            files.certificate.display(),
            files.ca_cert.display()
        );
    }
    for exposed in crate::tls::policy::plain_beyond_loopback(&config) {
        tracing::warn!(
            "{exposed}: plain TCP beyond loopback (--insecure): whoever reaches it can read \
             and forge its traffic, and claim any node"
        );
    }

    // The northbound: open (and replay) the durable state first, so a bad state dir fails fast.
    let overrides: BTreeMap<String, String> = config
        .ovsdb_remotes
        .iter()
        .map(|r| (r.node.clone(), r.target.clone()))
        .collect();
    let mut rest = RestConfig::new(config.state_dir.clone());
    rest.listen = config.rest_listen;
    rest.auth_file = config.auth_file.clone();
    rest.ovsdb_remotes = overrides.clone();
    rest.node_port_range = config.pipeline.node_port_range.0..=config.pipeline.node_port_range.1;
    rest.store = config.store.clone();
    rest.https = security
        .tls
        .as_ref()
        .map(|t| coe::rest::tls::TlsConfig(t.https.clone()));
    rest.store_tls = security
        .tls
        .as_ref()
        .map(|t| coe::rest::tls::TlsConfig(t.client.clone()));
    if matches!(config.election, ElectionMode::Lease { .. }) {
        // Each replica's REST state is its own: a write would reach this replica alone.
        rest.refuse_writes = Some(
            "this replica elects over Kubernetes Leases (--election lease) and keeps its own \
             REST state, which the other replicas never see, so a write here could be ignored \
             or lost: change the cluster through Kubernetes, or run the replicas with \
             --store ovsdb: to share REST state"
                .into(),
        );
    }
    let installed = operational::Installed::default();
    let departed = departed::DepartedNodes::default();
    let status = Arc::new(status::Status::default());
    let masters = election::Masters::default();
    let operational_models = Arc::new(std::sync::OnceLock::new());
    let me = election::Me {
        target: controller_target(config.openflow_listen, config.openflow_advertise, tls),
        rest: rest_url(config.rest_listen, config.openflow_advertise, tls),
    };
    let replicated = config.election.replicated();
    let operational: Arc<dyn coe::rest::operational::OperationalSource> =
        Arc::new(operational::Operational {
            installed: installed.clone(),
            departed: departed.clone(),
            config: config.pipeline.clone(),
            models: operational_models.clone(),
            masters: replicated.then(|| (me.target.clone(), masters.clone())),
            bridge: NodeSetup::default().bridge,
            traces: Default::default(),
            status: status.clone(),
        });
    let nb = tokio::task::spawn_blocking(move || Northbound::open(&rest, operational))
        .await
        .map_err(|e| format!("opening the REST northbound: {e}"))?
        .map_err(|e| format!("opening the REST northbound: {e}"))?;
    let metrics = metrics::Metrics::new();
    let nb = nb.observe({
        let metrics = metrics.clone();
        Arc::new(move |status| metrics.rest(status))
    });
    if let Some(mut refusal) = nb.store_refusal() {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            loop {
                metrics.store_refused(refusal.borrow_and_update().is_some());
                if refusal.changed().await.is_err() {
                    return;
                }
            }
        });
    }
    let models = nb.subscribe();
    tracing::info!(
        revision = models.borrow().revision,
        nodes = models.borrow().model.nodes.len(),
        services = models.borrow().model.services.len(),
        "REST state loaded from {}",
        match &config.store {
            coe::rest::StoreKind::Local => config.state_dir.display().to_string(),
            coe::rest::StoreKind::Ovsdb(remotes) => format!("ovsdb:{}", remotes.join(",")),
        }
    );

    // Kubernetes, if on: its model merged with REST's feeds the same channel.
    let (models, kube_task) = match &config.kubernetes {
        Some(source) => {
            let (merged, task) =
                kubernetes::start(source, models, shutdown.clone(), metrics.clone()).await?;
            (merged, Some(task))
        }
        None => (models, None),
    };

    let _ = operational_models.set(models.clone());

    // The OpenFlow listener.
    let target = listen_target(config.openflow_listen, tls);
    let driver = DriverConfig {
        tls_server: security.tls.as_ref().map(|t| t.mutual.clone()),
        ..DriverConfig::default()
    };
    let listener = Listener::bind(&target, driver)
        .await
        .map_err(|e| format!("OpenFlow listener {}: {e}", config.openflow_listen))?;
    tracing::info!("OpenFlow listener on {target}");
    let node_setup = NodeSetup {
        controller: controller_target(config.openflow_listen, config.openflow_advertise, tls),
        datapath_type: config.datapath_type.clone(),
        encap: config.pipeline.encap,
        shared_controller: replicated,
        departed_after: Some(config.replica_gone_after.as_secs()).filter(|s| replicated && *s > 0),
        max_backoff_secs: config.switch_max_backoff.as_secs(),
        ..NodeSetup::default()
    };
    if config.pipeline.encap != netvirt::config::Encap::None && config.datapath_type == "netdev" {
        tracing::info!(
            "pod traffic between nodes is encapsulated ({}) on the userspace datapath: each node \
             must put its underlay address on br-int, as `svcflow node-setup NODE --address \
             ADDR/LEN --encap {}` prints, or ovs-vswitchd logs \"native tunnel routing failed\" \
             and drops it",
            config.pipeline.encap.name(),
            config.pipeline.encap.name()
        );
    }
    if config.openflow_advertise.is_none() && config.openflow_listen.ip().is_unspecified() {
        tracing::warn!(
            "switches are told to dial {}, which reaches svcflow only from its own host; give \
             --openflow-advertise with an address the nodes can reach",
            node_setup.controller
        );
    }

    let (changes_tx, changes_rx) = mpsc::unbounded_channel();
    // Replicas: one master per switch, elected on the shared database or over Leases.
    let (tx, rx) = mpsc::unbounded_channel();
    let election = election::Election::new(me.target.clone(), config.hold_down);
    let election_task = match &config.election {
        ElectionMode::Off => None,
        ElectionMode::Ovsdb(remotes) => Some(tokio::spawn(election::run(
            election::StoreClient {
                remotes: remotes.clone(),
                config: ovsdb::ClientConfig {
                    tls_client: security.tls.as_ref().map(|t| t.client.clone()),
                    ..ovsdb::ClientConfig::default()
                },
            },
            election,
            me.clone(),
            masters.clone(),
            rx,
            changes_tx.clone(),
            shutdown.clone(),
        ))),
        ElectionMode::Lease {
            namespace,
            duration,
        } => {
            let Some(source) = &config.kubernetes else {
                return Err("election over Leases needs Kubernetes".into());
            };
            let client = coe::k8s::client(source)
                .await
                .map_err(|e| format!("Kubernetes (for the Leases): {e}"))?;
            let leases =
                coe::k8s::lease::Leases::new(client, namespace, &me.target, &me.rest, *duration);
            tracing::info!(
                "election: this replica is {} (REST {}); Leases in namespace {namespace}, \
                 {duration:?} each; hold-down {:?}",
                me.target,
                me.rest,
                config.hold_down
            );
            Some(tokio::spawn(lease::run(
                leases,
                election,
                lease::Book::new(me.target.clone(), *duration),
                masters.clone(),
                rx,
                changes_tx.clone(),
                shutdown.clone(),
            )))
        }
    };
    let election_tx = election_task.is_some().then_some(tx);
    let http = if tls { "https" } else { "http" };
    tracing::info!(
        "metrics on {http}://{}/metrics, health on {http}://{}/healthz",
        config.metrics_listen,
        config.healthz_listen
    );
    let https = security.tls.as_ref().map(|t| t.https.clone());
    let metrics_tasks = [
        tokio::spawn(metrics::serve(
            config.metrics_listen,
            metrics::Endpoint::Metrics,
            metrics.clone(),
            https.clone(),
        )),
        tokio::spawn(metrics::serve(
            config.healthz_listen,
            metrics::Endpoint::Health,
            metrics.clone(),
            https,
        )),
        tokio::spawn(count_changes(models.clone(), metrics.clone())),
    ];

    let rest_task = tokio::spawn({
        let shutdown = shutdown.clone();
        let listen = config.rest_listen;
        async move {
            let http = if tls { "https" } else { "http" };
            tracing::info!("REST northbound on {http}://{listen}");
            nb.serve(stopped(shutdown)).await
        }
    });
    let accept_task = tokio::spawn(switches::accept(
        listener,
        tls,
        changes_tx.clone(),
        shutdown.clone(),
    ));
    let passive_task = config.ovsdb_manager_listen.map(|addr| {
        tokio::spawn(node::listen(
            addr,
            security.clone(),
            node_setup.clone(),
            changes_tx.clone(),
            shutdown.clone(),
        ))
    });
    let changes_tx_for_agents = changes_tx.clone();
    let nodes_task = tokio::spawn(node::manage(
        overrides,
        security,
        node_setup,
        models.clone(),
        changes_tx,
        shutdown.clone(),
        metrics.clone(),
    ));
    // The host node's healthCheckNodePort answers (externalTrafficPolicy Local).
    let health_task = config.host_node.clone().map(|node| {
        tokio::spawn(health::serve(
            node,
            std::net::IpAddr::from([0, 0, 0, 0]),
            models.clone(),
            shutdown.clone(),
        ))
    });
    // REST mode: nodes whose switch stays away lose their endpoints from other nodes' groups.
    let (agent_models, links, liveness_task) =
        if config.kubernetes.is_none() && !config.node_down_after.is_zero() {
            let (links_tx, links_rx) = mpsc::unbounded_channel();
            let (tx, rx) = watch::channel(models.borrow().clone());
            let task = tokio::spawn(liveness::run(
                config.node_down_after,
                models.clone(),
                links_rx,
                tx,
                shutdown.clone(),
            ));
            (rx, Some(links_tx), Some(task))
        } else {
            (models.clone(), None, None)
        };
    let reconcile_task = tokio::spawn(reconcile::run(
        config.pipeline.clone(),
        config.host_node.clone(),
        installed,
        agent_models,
        links,
        election_tx,
        changes_tx_for_agents,
        changes_rx,
        shutdown.clone(),
        metrics.clone(),
        status,
        departed,
    ));

    let mut failure = None;
    tokio::select! {
        signal = wait_for_signal() => match signal {
            Ok(name) => tracing::info!("{name}: shutting down; flows stay on the switches"),
            Err(e) => failure = Some(format!("cannot listen for signals: {e}")),
        },
        result = rest_task => {
            let why = match result {
                Ok(Ok(())) => "the REST northbound stopped".to_string(),
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("the REST northbound task failed: {e}"),
            };
            failure = Some(why);
        }
    }
    let _ = stop_tx.send(true);
    for task in metrics_tasks {
        task.abort();
    }
    let wait = async {
        let _ = accept_task.await;
        let _ = nodes_task.await;
        if let Some(task) = passive_task {
            let _ = task.await;
        }
        if let Some(task) = kube_task {
            let _ = task.await;
        }
        if let Some(task) = health_task {
            let _ = task.await;
        }
        if let Some(task) = liveness_task {
            let _ = task.await;
        }
        if let Some(task) = election_task {
            let _ = task.await;
        }
        let _ = reconcile_task.await;
    };
    if tokio::time::timeout(std::time::Duration::from_secs(5), wait)
        .await
        .is_err()
    {
        tracing::warn!("some tasks did not stop within 5 s; exiting anyway");
    }
    match failure {
        Some(why) => Err(why),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

/// Counts the services and endpoints each published model revision changes, for the
/// metrics, by diffing it with the previous one (persistent maps: the cost is the change's).
async fn count_changes(
    mut models: watch::Receiver<Arc<Published>>,
    metrics: Arc<metrics::Metrics>,
) {
    let mut last = models.borrow_and_update().clone();
    while models.changed().await.is_ok() {
        let now = models.borrow_and_update().clone();
        if now.part_of.is_some() {
            // Counted once whole.
            continue;
        }
        let services = last.model.services.diff(&now.model.services).count() as u64;
        let endpoints = last.model.endpoints.diff(&now.model.endpoints).count() as u64;
        metrics.published(now.revision, services, endpoints);
        last = now;
    }
}

async fn wait_for_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_dial_the_advertised_or_listen_address_or_loopback() {
        let t = |a: &str| controller_target(a.parse().unwrap(), None, false);
        assert_eq!(t("127.0.0.1:6653"), "tcp:127.0.0.1:6653");
        assert_eq!(t("0.0.0.0:6653"), "tcp:127.0.0.1:6653");
        assert_eq!(t("10.1.2.3:6633"), "tcp:10.1.2.3:6633");
        assert_eq!(t("[fd00::1]:6653"), "tcp:[fd00::1]:6653");
        let adv = |l: &str, a: &str| controller_target(l.parse().unwrap(), a.parse().ok(), false);
        assert_eq!(adv("0.0.0.0:6653", "192.0.2.7:6653"), "tcp:192.0.2.7:6653");
        assert_eq!(adv("[::]:6653", "[fd00::9]:6000"), "tcp:[fd00::9]:6000");
        let ssl = |a: &str| controller_target(a.parse().unwrap(), None, true);
        assert_eq!(ssl("10.1.2.3:6653"), "ssl:10.1.2.3:6653");
        assert_eq!(ssl("0.0.0.0:6653"), "ssl:127.0.0.1:6653");
        assert_eq!(
            listen_target("0.0.0.0:6653".parse().unwrap(), true),
            "pssl:6653:0.0.0.0"
        );
    }

    #[test]
    fn other_replicas_reach_the_rest_listen_address_or_the_advertised_host() {
        let url = |l: &str, a: Option<&str>| {
            rest_url(l.parse().unwrap(), a.map(|a| a.parse().unwrap()), false)
        };
        assert_eq!(
            rest_url("10.0.0.5:8181".parse().unwrap(), None, true),
            "https://10.0.0.5:8181"
        );
        assert_eq!(url("10.0.0.5:8181", None), "http://10.0.0.5:8181");
        assert_eq!(
            url("0.0.0.0:8181", Some("192.0.2.7:6653")),
            "http://192.0.2.7:8181"
        );
        assert_eq!(
            url("[::]:8181", Some("[fd00::9]:6653")),
            "http://[fd00::9]:8181"
        );
        assert_eq!(url("0.0.0.0:8181", None), "http://127.0.0.1:8181");
    }
}
