//! What operators graph and probe: Prometheus metrics on `--metrics-listen` (`/metrics`), and
//! kube-proxy's `/healthz` and `/livez` on `--healthz-listen`.
//!
//! kube-proxy's metric names and buckets are kept where the meaning is the same, so that its
//! dashboards work: a "sync" is one node's switch brought to a model revision. svcflow's own
//! metrics carry a `node` label (one series per node, never per service or endpoint).
//!
//! The registry and the health state are pure bookkeeping; [`serve`] is the I/O (a minimal
//! HTTP/1.1 responder, as the health-check node ports use).

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A watched Kubernetes resource, as a label (five values).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResourceLabel {
    pub resource: String,
}

/// A node, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct NodeLabel {
    pub node: String,
}

/// A node and how a bundle went.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct BundleLabel {
    pub node: String,
    pub result: String,
}

/// A node and a traffic policy (`internal`, `external`), as kube-proxy labels
/// `no_local_endpoints`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PolicyLabel {
    pub node: String,
    pub traffic_policy: String,
}

/// An HTTP status code, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CodeLabel {
    pub code: String,
}

/// How the nodes came by a service's render or a change of their group ids, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct HowLabel {
    pub how: &'static str,
}

/// kube-proxy's `network_programming_duration_seconds` buckets
/// (`pkg/proxy/metrics/metrics.go`): 0.25 s steps to 1 s, then 1 s to 59 s, 5 s to 115 s,
/// 30 s to 300 s.
fn programming_buckets() -> Vec<f64> {
    let mut b = vec![0.25, 0.5];
    b.extend((1..=59).map(f64::from));
    b.extend((0..12).map(|i| 60.0 + 5.0 * f64::from(i)));
    b.extend((0..7).map(|i| 120.0 + 30.0 * f64::from(i)));
    b
}

/// How long an update may wait to be applied before `/healthz` says 503 (kube-proxy's
/// default: twice its 30 s sync period).
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);

/// One published model revision, until every connected node has it.
struct Pending {
    revision: u64,
    at: Instant,
    services: u64,
    endpoints: u64,
}

#[derive(Default)]
struct Health {
    /// When the changes of revisions not yet published began (the EndpointSlice's trigger
    /// time), by revision: the programming latency counts from there.
    triggers: BTreeMap<u64, SystemTime>,
    /// Revisions not yet synced on every connected node, oldest first.
    pending: VecDeque<Pending>,
    /// Each connected node's last synced revision.
    synced: BTreeMap<String, u64>,
    /// When a sync last succeeded.
    last_updated: Option<SystemTime>,
}

/// The daemon's metrics and health.
pub(crate) struct Metrics {
    registry: Registry,
    sync_duration: Histogram,
    last_sync: Gauge<f64, AtomicU64>,
    programming: Histogram,
    service_changes: Counter,
    endpoint_changes: Counter,
    service_pending: Gauge,
    endpoint_pending: Gauge,
    flows: Family<NodeLabel, Gauge>,
    groups: Family<NodeLabel, Gauge>,
    switch_connected: Family<NodeLabel, Gauge>,
    switch_master: Family<NodeLabel, Gauge>,
    bundles: Family<BundleLabel, Counter>,
    sent_bundles: Family<BundleLabel, Counter>,
    no_local: Family<PolicyLabel, Gauge>,
    conflicts: Family<NodeLabel, Gauge>,
    conntrack_flushes: Family<NodeLabel, Counter>,
    ovsdb_connected: Family<NodeLabel, Gauge>,
    rest_requests: Family<CodeLabel, Counter>,
    store_refused: Gauge,
    watch_relists: Family<ResourceLabel, Counter>,
    watch_failures: Family<ResourceLabel, Counter>,
    service_renders: Family<HowLabel, Counter>,
    group_id_changes: Family<HowLabel, Counter>,
    /// The render counts last turned into the two families above.
    render_counts: Mutex<netvirt::shards::RenderCounts>,
    health: Mutex<Health>,
}

impl Metrics {
    pub(crate) fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let sync_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let last_sync = Gauge::<f64, AtomicU64>::default();
        let programming = Histogram::new(programming_buckets());
        let m = Metrics {
            sync_duration,
            last_sync,
            programming,
            service_changes: Counter::default(),
            endpoint_changes: Counter::default(),
            service_pending: Gauge::default(),
            endpoint_pending: Gauge::default(),
            flows: Family::default(),
            groups: Family::default(),
            switch_connected: Family::default(),
            switch_master: Family::default(),
            bundles: Family::default(),
            sent_bundles: Family::default(),
            no_local: Family::default(),
            conflicts: Family::default(),
            conntrack_flushes: Family::default(),
            ovsdb_connected: Family::default(),
            rest_requests: Family::default(),
            store_refused: Gauge::default(),
            watch_relists: Family::default(),
            watch_failures: Family::default(),
            service_renders: Family::default(),
            group_id_changes: Family::default(),
            render_counts: Mutex::default(),
            health: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "One node's sync of its switch to a model revision, from the start of the render to the switch's barrier",
            m.sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "When a node's switch was last synced (Unix time)",
            m.last_sync.clone(),
        );
        registry.register(
            "kubeproxy_network_programming_duration_seconds",
            "From a model revision's publication (the REST write, or the Kubernetes event, translated) to a node's switch confirming it",
            m.programming.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Services changed by published model revisions",
            m.service_changes.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Services whose endpoints changed in published model revisions",
            m.endpoint_changes.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Service changes not yet synced on every connected node",
            m.service_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Endpoint changes not yet synced on every connected node",
            m.endpoint_pending.clone(),
        );
        registry.register(
            "svcflow_flows",
            "Flows desired on the node's switch",
            m.flows.clone(),
        );
        registry.register(
            "svcflow_service_renders",
            "Services the nodes' tasks rendered (how=rendered) or took as another node rendered them from the same model (how=taken): a change costs one render per service that cannot differ from node to node, whatever the number of nodes",
            m.service_renders.clone(),
        );
        registry.register(
            "svcflow_group_id_changes",
            "Changes of a node's group ids (names given ids, a part of an update at a time) that it placed itself (how=placed), took from another node that made the same change (how=taken), or whose result it found another node holding at the end of an update and shared from then on (how=joined)",
            m.group_id_changes.clone(),
        );
        registry.register(
            "svcflow_conflicts",
            "Inputs the node's desired state cannot all honour (as the nodes view lists them): an endpoint or address its service cannot use, a node the overlay cannot reach, a flow two services render differently",
            m.conflicts.clone(),
        );
        registry.register(
            "svcflow_store_refused",
            "1 while the replicated store's state breaks this replica's rules (another \
             node-port range): the replica publishes none of it and its switches keep the last \
             state it accepted; 0 otherwise",
            m.store_refused.clone(),
        );
        registry.register(
            "svcflow_groups",
            "Groups desired on the node's switch",
            m.groups.clone(),
        );
        registry.register(
            "svcflow_switch_connected",
            "Whether the node's switch is connected and served",
            m.switch_connected.clone(),
        );
        registry.register(
            "svcflow_switch_master",
            "Whether this replica writes to the node's switch: 1 as its master (or its only \
             controller), 0 while its connection is a slave of another replica",
            m.switch_master.clone(),
        );
        registry.register(
            "svcflow_syncs",
            "Syncs of the node's switch, by result (ok, failed)",
            m.bundles.clone(),
        );
        registry.register(
            "svcflow_bundles",
            "OpenFlow bundles sent to the node's switch, by result (committed, failed)",
            m.sent_bundles.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Service ports with a Local traffic policy (internal or external) and no local endpoint on the node",
            m.no_local.clone(),
        );
        registry.register(
            "svcflow_conntrack_flushes",
            "Stale UDP/SCTP conntrack entries flushed on the node",
            m.conntrack_flushes.clone(),
        );
        registry.register(
            "svcflow_ovsdb_connected",
            "Whether svcflow is connected to the node's OVSDB server",
            m.ovsdb_connected.clone(),
        );
        registry.register(
            "svcflow_kubernetes_watch_relists",
            "Kubernetes watches that started over with a fresh list (an expired resourceVersion, \
             or an error they could not resume from), by resource; the first list is not counted",
            m.watch_relists.clone(),
        );
        registry.register(
            "svcflow_kubernetes_watch_failures",
            "Kubernetes list or watch requests that failed and are retried with backoff, by \
             resource",
            m.watch_failures.clone(),
        );
        registry.register(
            "svcflow_rest_requests",
            "REST northbound requests, by HTTP status",
            m.rest_requests.clone(),
        );
        Arc::new(Metrics { registry, ..m })
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A model revision was published, changing `services` services and the endpoints of
    /// `endpoints` services.
    pub(crate) fn published(&self, revision: u64, services: u64, endpoints: u64) {
        self.service_changes.inc_by(services);
        self.endpoint_changes.inc_by(endpoints);
        let mut h = self.health();
        // A trigger time for this revision moves its start back to when the change began.
        let mut at = Instant::now();
        let triggered = h.triggers.remove(&revision);
        h.triggers.retain(|r, _| *r > revision);
        if let Some(began) = triggered
            && let Ok(ago) = SystemTime::now().duration_since(began)
        {
            at = at.checked_sub(ago).unwrap_or(at);
        }
        if h.pending.back().is_some_and(|p| p.revision >= revision) {
            return;
        }
        // The nodes whose tasks synced the revision before this count of it ran (both follow
        // the same published model, in tasks of their own) reached it by now: their samples
        // are taken here, as `synced` took them before the revision was pending.
        let reached = h.synced.values().filter(|r| **r >= revision).count();
        for _ in 0..reached {
            self.programming.observe(at.elapsed().as_secs_f64());
        }
        h.pending.push_back(Pending {
            revision,
            at,
            services,
            endpoints,
        });
        self.update_pending(&mut h);
    }

    /// The change `revision` will carry began at `at` (a Kubernetes EndpointSlice's
    /// `last-change-trigger-time`), as kube-proxy measures network programming from.
    pub(crate) fn triggered(&self, revision: u64, at: SystemTime) {
        let mut h = self.health();
        // Bounded: only revisions still to come are kept.
        if h.triggers.len() < 1024 {
            h.triggers.insert(revision, at);
        }
    }

    /// A node's switch was synced to `revision`.
    pub(crate) fn synced(
        &self,
        node: &str,
        revision: u64,
        took: Duration,
        report: &netvirt::agent::SyncReport,
        totals: (usize, usize),
    ) {
        let label = NodeLabel {
            node: node.to_string(),
        };
        self.sync_duration.observe(took.as_secs_f64());
        let now = SystemTime::now();
        let unix = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        self.last_sync.set(unix);
        self.flows.get_or_create(&label).set(totals.0 as i64);
        self.groups.get_or_create(&label).set(totals.1 as i64);
        self.conntrack_flushes
            .get_or_create(&label)
            .inc_by(report.conntrack_flushed as u64);
        self.bundles
            .get_or_create(&BundleLabel {
                node: node.to_string(),
                result: "ok".into(),
            })
            .inc();
        let mut h = self.health();
        let before = h.synced.insert(node.to_string(), revision).unwrap_or(0);
        // The node's programming latency of each revision it just reached.
        for p in h
            .pending
            .iter()
            .filter(|p| p.revision > before && p.revision <= revision)
        {
            self.programming.observe(p.at.elapsed().as_secs_f64());
        }
        h.last_updated = Some(now);
        self.update_pending(&mut h);
    }

    /// What the nodes' render cache has counted so far.
    pub(crate) fn renders(&self, now: netvirt::shards::RenderCounts) {
        let Ok(mut last) = self.render_counts.lock() else {
            return;
        };
        let counters = [
            (
                &self.service_renders,
                "rendered",
                now.rendered,
                last.rendered,
            ),
            (&self.service_renders, "taken", now.reused, last.reused),
            (
                &self.group_id_changes,
                "placed",
                now.ids_placed,
                last.ids_placed,
            ),
            (
                &self.group_id_changes,
                "taken",
                now.ids_taken,
                last.ids_taken,
            ),
            (
                &self.group_id_changes,
                "joined",
                now.ids_joined,
                last.ids_joined,
            ),
        ];
        for (family, how, now, last) in counters {
            family
                .get_or_create(&HowLabel { how })
                .inc_by(now.saturating_sub(last));
        }
        *last = now;
    }

    /// A node's sync failed.
    pub(crate) fn sync_failed(&self, node: &str) {
        self.bundles
            .get_or_create(&BundleLabel {
                node: node.to_string(),
                result: "failed".into(),
            })
            .inc();
    }

    /// A node's switch is served (`true`) or gone.
    pub(crate) fn switch(&self, node: &str, up: bool) {
        let label = NodeLabel {
            node: node.to_string(),
        };
        self.switch_connected
            .get_or_create(&label)
            .set(i64::from(up));
        if !up {
            let mut h = self.health();
            h.synced.remove(node);
            self.update_pending(&mut h);
        }
    }

    /// Bundles a node's task sent since it last said (committed, failed).
    pub(crate) fn bundles(&self, node: &str, committed: u64, failed: u64) {
        for (result, n) in [("committed", committed), ("failed", failed)] {
            if n > 0 {
                self.sent_bundles
                    .get_or_create(&BundleLabel {
                        node: node.to_string(),
                        result: result.into(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// A node's service ports with a `Local` policy and no local endpoint, as last synced.
    pub(crate) fn no_local(&self, node: &str, counts: netvirt::health::NoLocal) {
        for (policy, n) in [("internal", counts.internal), ("external", counts.external)] {
            self.no_local
                .get_or_create(&PolicyLabel {
                    node: node.to_string(),
                    traffic_policy: policy.into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// How many conflicts a node's desired state has, as last synced.
    pub(crate) fn conflicts(&self, node: &str, count: usize) {
        self.conflicts
            .get_or_create(&NodeLabel {
                node: node.to_string(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Whether the replicated store's state breaks this replica's rules.
    pub(crate) fn store_refused(&self, refused: bool) {
        self.store_refused.set(i64::from(refused));
    }

    /// A Kubernetes watch relisted or failed.
    pub(crate) fn kube(&self, resource: &str, signal: coe::k8s::WatchSignal) {
        let label = ResourceLabel {
            resource: resource.to_string(),
        };
        match signal {
            coe::k8s::WatchSignal::Relisted => self.watch_relists.get_or_create(&label).inc(),
            coe::k8s::WatchSignal::Failed => self.watch_failures.get_or_create(&label).inc(),
        };
    }

    /// This replica masters the node's switch (`true`), or its connection is a slave.
    pub(crate) fn master(&self, node: &str, master: bool) {
        self.switch_master
            .get_or_create(&NodeLabel {
                node: node.to_string(),
            })
            .set(i64::from(master));
    }

    /// svcflow's connection to a node's OVSDB server is up or down.
    pub(crate) fn ovsdb(&self, node: &str, up: bool) {
        self.ovsdb_connected
            .get_or_create(&NodeLabel {
                node: node.to_string(),
            })
            .set(i64::from(up));
    }

    /// A REST request was answered with `status`.
    pub(crate) fn rest(&self, status: u16) {
        self.rest_requests
            .get_or_create(&CodeLabel {
                code: status.to_string(),
            })
            .inc();
    }

    /// Drops the revisions every connected node has, and sets the pending gauges.
    fn update_pending(&self, h: &mut Health) {
        let floor = h.synced.values().min().copied();
        match floor {
            Some(floor) => h.pending.retain(|p| p.revision > floor),
            // No node connected: nothing waits on svcflow.
            None => h.pending.clear(),
        }
        let (s, e) = h
            .pending
            .iter()
            .fold((0, 0), |(s, e), p| (s + p.services, e + p.endpoints));
        self.service_pending.set(s as i64);
        self.endpoint_pending.set(e as i64);
    }

    /// `/healthz`: 503 once an update has waited longer than [`HEALTH_TIMEOUT`], with
    /// kube-proxy's body.
    pub(crate) fn healthz(&self) -> (u16, String) {
        let h = self.health();
        let healthy = h
            .pending
            .front()
            .is_none_or(|p| p.at.elapsed() < HEALTH_TIMEOUT);
        let rfc3339 = |t: SystemTime| {
            let secs = t
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            rfc3339(secs)
        };
        let body = serde_json::json!({
            "lastUpdated": h.last_updated.map(rfc3339).unwrap_or_default(),
            "currentTime": rfc3339(SystemTime::now()),
            "nodeEligible": true,
        })
        .to_string();
        (if healthy { 200 } else { 503 }, body)
    }

    /// The Prometheus text exposition.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// `secs` since the epoch as RFC 3339 UTC (`2026-11-24T09:41:00Z`).
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What one of the two listeners serves.
#[derive(Clone, Copy)]
pub(crate) enum Endpoint {
    /// `/metrics`.
    Metrics,
    /// `/healthz` and `/livez`.
    Health,
}

/// Serves `what` on `addr` until the task is dropped, over HTTPS with `tls` (each handshake
/// in the connection's own task, within the 5 s a request may take).
pub(crate) async fn serve(
    addr: SocketAddr,
    what: Endpoint,
    metrics: Arc<Metrics>,
    tls: Option<Arc<rustls::ServerConfig>>,
) {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let listener = match TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot listen on {addr}: {e}");
            return;
        }
    };
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (tls, metrics) = (tls.clone(), metrics.clone());
                tokio::spawn(async move {
                    match tls {
                        None => answer(stream, what, metrics).await,
                        Some(tls) => {
                            let handshake = tokio::time::timeout(REQUEST_TIME, tls.accept(stream));
                            if let Ok(Ok(stream)) = handshake.await {
                                answer(stream, what, metrics).await;
                            }
                        }
                    }
                });
            }
            Err(e) => {
                tracing::debug!("{addr}: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// How long a client has to send its request (and, over HTTPS, to complete the handshake).
const REQUEST_TIME: Duration = Duration::from_secs(5);

async fn answer<S>(mut stream: S, what: Endpoint, metrics: Arc<Metrics>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while head.len() < 8192 && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(buf.get(..n).unwrap_or_default()),
            }
        }
    };
    let _ = tokio::time::timeout(REQUEST_TIME, read).await;
    let path = String::from_utf8_lossy(&head)
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('?')
        .next()
        .unwrap_or("")
        .to_string();
    let (status, content_type, body) = match (what, path.as_str()) {
        (Endpoint::Metrics, "/metrics") => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        (Endpoint::Health, "/healthz" | "/livez") => {
            let (status, body) = metrics.healthz();
            (status, "application/json", body)
        }
        _ => (404, "text/plain", "not found\n".to_string()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nX-Content-Type-Options: \
         nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_print_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_599_660), "2026-11-25T09:41:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    /// The value of the sample `name` (with its labels, as printed) in `m`'s encoding.
    fn sample(m: &Metrics, name: &str) -> Option<f64> {
        m.encode()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }

    /// The sum of the network-programming histogram, in seconds.
    fn programming_sum(m: &Metrics) -> f64 {
        sample(m, "kubeproxy_network_programming_duration_seconds_sum").unwrap_or(0.0)
    }

    /// The render cache's counts are totals since the start: each call adds what grew.
    #[test]
    fn render_counts_become_counters_of_what_grew() {
        let m = Metrics::new();
        // Counters: whole numbers.
        let value = |line: &str| sample(&m, line).map(|v| v as u64);
        let mut counts = netvirt::shards::RenderCounts {
            rendered: 5,
            reused: 10,
            ids_placed: 2,
            ids_taken: 4,
            ids_joined: 0,
        };
        m.renders(counts);
        counts.rendered = 7;
        counts.ids_joined = 1;
        m.renders(counts);
        m.renders(counts);
        let renders = |how: &str| value(&format!("svcflow_service_renders_total{{how=\"{how}\"}}"));
        let ids = |how: &str| value(&format!("svcflow_group_id_changes_total{{how=\"{how}\"}}"));
        assert_eq!((renders("rendered"), renders("taken")), (Some(7), Some(10)));
        assert_eq!(
            (ids("placed"), ids("taken"), ids("joined")),
            (Some(2), Some(4), Some(1))
        );
    }

    #[test]
    fn a_trigger_time_starts_the_programming_latency_of_its_revision_only() {
        let m = Metrics::new();
        m.switch("n1", true);
        let report = netvirt::agent::SyncReport::default();
        m.synced("n1", 1, Duration::from_millis(3), &report, (10, 1));
        m.triggered(2, SystemTime::now() - Duration::from_secs(3));
        m.published(2, 0, 1);
        m.synced("n1", 2, Duration::from_millis(3), &report, (10, 1));
        let sum = programming_sum(&m);
        assert!((3.0..4.0).contains(&sum), "{sum}");
        // The next revision has no trigger: it counts from its publication.
        m.published(3, 1, 0);
        m.synced("n1", 3, Duration::from_millis(3), &report, (10, 1));
        assert!(programming_sum(&m) - sum < 0.5);
        // A trigger for a revision already published is dropped, not kept for later.
        m.triggered(1, SystemTime::now() - Duration::from_secs(60));
        m.published(4, 1, 0);
        assert!(m.health().triggers.is_empty());
    }

    /// Metrics with nodes n1 and n2 connected and synced to revision 1.
    fn two_nodes_at_revision_1() -> (Arc<Metrics>, netvirt::agent::SyncReport) {
        let m = Metrics::new();
        m.switch("n1", true);
        m.switch("n2", true);
        let report = netvirt::agent::SyncReport::default();
        m.synced("n1", 1, Duration::from_millis(3), &report, (10, 1));
        m.synced("n2", 1, Duration::from_millis(3), &report, (10, 1));
        (m, report)
    }

    /// A node's task can sync a revision before the task counting publications gets to it:
    /// the node's programming sample is taken then, not lost.
    #[test]
    fn a_revision_synced_before_its_publication_is_counted_still_gets_its_samples() {
        let (m, report) = two_nodes_at_revision_1();
        m.triggered(2, SystemTime::now() - Duration::from_secs(3));
        // n1 is there first; n2 after the count.
        m.synced("n1", 2, Duration::from_millis(3), &report, (10, 1));
        m.published(2, 0, 1);
        let count = |m: &Metrics| sample(m, "kubeproxy_network_programming_duration_seconds_count");
        assert_eq!(count(&m), Some(1.0));
        assert!(m.encode().contains("endpoint_changes_pending 1"));
        m.synced("n2", 2, Duration::from_millis(3), &report, (10, 1));
        assert_eq!(count(&m), Some(2.0));
        let sum = programming_sum(&m);
        assert!((6.0..8.0).contains(&sum), "{sum}");
        assert!(m.encode().contains("endpoint_changes_pending 0"));
    }

    #[test]
    fn pending_changes_clear_once_every_connected_node_has_them() {
        let (m, report) = two_nodes_at_revision_1();
        m.published(2, 1, 0);
        m.published(3, 0, 2);
        let text = m.encode();
        assert!(
            text.contains("kubeproxy_sync_proxy_rules_service_changes_pending 1"),
            "{text}"
        );
        assert!(
            text.contains("kubeproxy_sync_proxy_rules_endpoint_changes_pending 2"),
            "{text}"
        );
        m.synced("n1", 3, Duration::from_millis(3), &report, (12, 1));
        assert!(m.encode().contains("endpoint_changes_pending 2"));
        m.synced("n2", 3, Duration::from_millis(3), &report, (12, 1));
        let text = m.encode();
        assert!(
            text.contains("kubeproxy_sync_proxy_rules_endpoint_changes_pending 0"),
            "{text}"
        );
        assert!(
            text.contains("kubeproxy_sync_proxy_rules_service_changes_total 1"),
            "{text}"
        );
        assert!(text.contains("svcflow_flows{node=\"n1\"} 12"), "{text}");
        m.conflicts("n1", 2);
        assert!(
            m.encode().contains("svcflow_conflicts{node=\"n1\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("svcflow_syncs_total{node=\"n2\",result=\"ok\"} 2"),
            "{text}"
        );
        // Four programming samples: n1 and n2 each reached revisions 2 and 3.
        assert!(
            text.contains("kubeproxy_network_programming_duration_seconds_count 4"),
            "{text}"
        );
        assert_eq!(m.healthz().0, 200);
    }

    #[test]
    fn health_fails_once_an_update_waits_too_long() {
        let m = Metrics::new();
        m.switch("n1", true);
        m.synced(
            "n1",
            1,
            Duration::ZERO,
            &netvirt::agent::SyncReport::default(),
            (0, 0),
        );
        m.published(2, 1, 0);
        assert_eq!(m.healthz().0, 200);
        m.health().pending.front_mut().unwrap().at -= HEALTH_TIMEOUT;
        let (status, body) = m.healthz();
        assert_eq!(status, 503);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(v["lastUpdated"].as_str().unwrap().ends_with('Z'));
        // The node leaving takes its wait with it.
        m.switch("n1", false);
        assert_eq!(m.healthz().0, 200);
    }
}
