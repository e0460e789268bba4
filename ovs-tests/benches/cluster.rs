//! A cluster: how long one endpoint change takes from the REST write until EVERY node's switch
//! has confirmed it, with one `svcflow run` driving N nodes (a lab, `ovs_tests::lab`).
//!
//! For each N (nodes) and S (services), it brings up a lab of N nodes on a routed underlay,
//! each its own `ovsdb-server` and `ovs-vswitchd` (userspace datapath) in its own namespace,
//! with [`PODS_PER_NODE`] pods each (no servers: no traffic is sent). Then it loads S
//! ClusterIP services (10.96.0.0/12, TCP 80 → 8080) with two endpoints each, pods on two
//! different nodes (service i: pod `a` of node i mod N and pod `b` of the next node), with two
//! container PUTs: every endpoints object, then every service (endpoints first, so no switch
//! renders services without endpoints that the second write would have to replace). Every
//! node holds every service. The endpoints are the lab's pods, so each pod is an endpoint of
//! about S/N services, which share its endpoint flows: a node holds about one flow per service
//! besides its fixed ones. Then it times `SVCFLOW_CLUSTER_UPDATES` endpoint changes, each
//! an item PUT of one service's endpoints with its first endpoint swapped between pods `a`
//! and `c` of its node (rotating over the services), from just before the request is sent
//! until the last of the N nodes has confirmed it.
//!
//! Confirmation comes from the daemon's log: after each switch's barrier it logs
//! `node NAME: synced model revision R: … (F flows, G groups desired)` ([`SyncLine`]), and R
//! grows by one per accepted REST write. The bench is the only writer once the lab is up, so
//! it counts its writes and waits until every node has logged a sync with revision >= its
//! last write's; a revision beyond its count stops the bench. The bench sleeps until the daemon
//! writes to its log (inotify), then reads only the appended bytes, so a line is seen as it is
//! written.
//!
//! The REST writes use the in-process HTTP/1.1 client of [`ovs_tests::http`] (a `curl`
//! process per write would cost milliseconds), whose socket is opened inside the lab's
//! controller namespace, where svcflow's REST northbound listens.
//!
//! Spacing: the daemon paces the bundles to each switch (`svcflow/src/daemon/pace.rs`: three
//! at once after an idle spell, then one per 50 ms counted from the confirmations) and holds a
//! change that comes when the allowance is used up (an isolated change waits for nothing).
//! Each measured write is sent `SVCFLOW_CLUSTER_GAP_MS` (default and minimum 60) after the
//! last node confirmed the previous one, so that it measures one isolated change, never that
//! hold.
//!
//! The table: N, S, flows and groups per node (desired, from the sync lines: the services'
//! groups and the pods' flood group), the load (both
//! container PUTs until every node synced them), the change's p50 / p99 until every node
//! confirmed it and p50 / p99 until the first did, the CPU time per change of the daemon and
//! of all `ovs-vswitchd`s together (`/proc/PID/stat`, 10 ms ticks, over all the changes), and
//! the daemon's peak RSS (`VmHWM`).
//!
//! Run, with the daemon built optimized first (the bench runs `$SVCFLOW_BIN`, else `svcflow`
//! next to its own executable, which under `cargo bench` is `target/release/svcflow`):
//!
//! ```sh
//! cargo build --release -p svcflow
//! cargo bench -p ovs-tests --bench cluster
//! SVCFLOW_CLUSTER_N=10 SVCFLOW_CLUSTER_S=10000 cargo bench -p ovs-tests --bench cluster
//! ```
//!
//! After the load it also prints what the nodes shared of it, from the daemon's metrics
//! (`svcflow_service_renders_total` and `svcflow_group_id_changes_total`, see
//! `docs/observability.md`).
//!
//! `SVCFLOW_CLUSTER_N` picks the node counts (default 3,10), `SVCFLOW_CLUSTER_S` the service
//! counts (default 1000), `SVCFLOW_CLUSTER_UPDATES` the number of changes (default 200),
//! `SVCFLOW_CLUSTER_TLS` the transport (1, TLS as beyond loopback svcflow requires, by
//! default: each node's OVS with a certificate naming it, the bridges dialling `ssl:`, the REST
//! writes over HTTPS, [`LabOptions::tls`]; 0, plain TCP with `--insecure`; `0,1` both). Every
//! (N, S, transport) runs, each on a fresh lab. The load's row also gives the CPU time the
//! daemon and all the switches used in it.

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use ovs_tests::bench::{
    command_output, cpu_time, env_list, ms, peak_rss_kib, percentiles, release_daemon, rss_kib,
};
use ovs_tests::http::Http;
use ovs_tests::lab::{
    DEFAULT_MANAGEMENT, Lab, LabOptions, NodeSpec, PodSpec, REST, Topology, Underlay, UnderlayKind,
};
use ovs_tests::svcflow::{LogLines, SyncLine};

/// Pods per node.
const PODS_PER_NODE: usize = 3;
const CONFIG: &str = "/restconf/config";
const NAMESPACE: &str = "bench";
/// Cluster IPs: 10.96.0.0/12.
const VIP_BASE: u32 = 0x0a60_0000;
/// The least pause before each measured write; see the module docs.
const MIN_GAP_MS: u64 = 60;

// ---------------------------------------------------------------------------------------------
// The daemon's log, read as it grows: every node's sync lines.

struct Sync {
    at: Instant,
    node: String,
    line: SyncLine,
}

struct LogWatch {
    log: LogLines,
    syncs: Vec<Sync>,
    /// Syncs before this index were consumed by a wait.
    cursor: usize,
}

impl LogWatch {
    fn new(path: PathBuf) -> Self {
        let log = LogLines::open(path.clone())
            .unwrap_or_else(|e| panic!("opening the daemon log {}: {e}", path.display()));
        Self {
            log,
            syncs: Vec::new(),
            cursor: 0,
        }
    }

    /// Reads what was appended since the last call.
    fn poll(&mut self) {
        let lines = self.log.poll().unwrap();
        let now = Instant::now();
        for text in lines.iter().map(String::as_str) {
            let Some(line) = SyncLine::parse(text) else {
                continue;
            };
            let Some((before, _)) = text.split_once(": synced model revision ") else {
                continue;
            };
            let Some((_, node)) = before.rsplit_once("node ") else {
                continue;
            };
            self.syncs.push(Sync {
                at: now,
                node: node.to_string(),
                line,
            });
        }
    }

    /// The last `n` lines of the log, for panics.
    fn tail(&self, n: usize) -> String {
        self.log.tail(n)
    }

    fn fail(&self, what: &str) -> ! {
        panic!("{what}\n--- daemon log tail ---\n{}", self.tail(40))
    }

    /// Waits until every node of `nodes` has logged a new sync of revision >= `revision`
    /// (and, if given, with `groups` groups desired); returns when each first did.
    fn wait_all(
        &mut self,
        nodes: &[String],
        revision: u64,
        groups: Option<u64>,
        timeout: Duration,
        what: &str,
    ) -> BTreeMap<String, (Instant, SyncLine)> {
        let mut arrived: BTreeMap<String, (Instant, SyncLine)> = BTreeMap::new();
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            while self.cursor < self.syncs.len() {
                let sync = &self.syncs[self.cursor];
                self.cursor += 1;
                if sync.line.revision > revision {
                    self.fail(&format!(
                        "{what}: node {} synced revision {} while the bench's last write is \
                         revision {revision}: the bench's count of writes is wrong",
                        sync.node, sync.line.revision
                    ));
                }
                let wanted = sync.line.revision >= revision
                    && groups.is_none_or(|g| sync.line.groups == g)
                    && nodes.contains(&sync.node);
                if wanted && !arrived.contains_key(&sync.node) {
                    arrived.insert(sync.node.clone(), (sync.at, sync.line));
                }
            }
            if arrived.len() == nodes.len() {
                return arrived;
            }
            if Instant::now() >= deadline {
                let missing: Vec<&String> =
                    nodes.iter().filter(|n| !arrived.contains_key(*n)).collect();
                self.fail(&format!(
                    "{what}: nodes {missing:?} logged no sync of revision {revision} (groups \
                     {groups:?}) within {timeout:?}"
                ));
            }
            self.log
                .wait_until(deadline)
                .unwrap_or_else(|e| self.fail(&format!("{what}: watching the daemon log: {e}")));
        }
    }

    /// Waits until no sync has been logged for `quiet`; returns the highest revision seen.
    fn settle(&mut self, quiet: Duration, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.syncs.len();
            std::thread::sleep(quiet);
            self.poll();
            if self.syncs.len() == seen {
                break;
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "the nodes kept syncing for {timeout:?} with no write"
                ));
            }
        }
        self.cursor = self.syncs.len();
        self.syncs
            .iter()
            .map(|s| s.line.revision)
            .max()
            .unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// The lab and the REST bodies.

fn topology(n: usize) -> Topology {
    assert!((1..=200).contains(&n), "SVCFLOW_CLUSTER_N: 1 to 200 nodes");
    let nodes = (0..n)
        .map(|i| {
            let third = u8::try_from(i + 1).unwrap();
            let pods = (0..PODS_PER_NODE)
                .map(|j| PodSpec {
                    name: format!("n{}-{}", i + 1, char::from(b'a' + j as u8)),
                    namespace: NAMESPACE.into(),
                    ip: Ipv4Addr::new(10, 244, third, 11 + j as u8),
                    ip6: None,
                    mac: None,
                    mac_source: Default::default(),
                    serve: Some(Vec::new()),
                })
                .collect();
            NodeSpec {
                name: format!("n{}", i + 1),
                address: Ipv4Addr::new(192, 168, 50, 10 + third),
                address6: None,
                ipv6_only: false,
                pod_cidr: Ipv4Net::new(Ipv4Addr::new(10, 244, third, 0), 24).unwrap(),
                pod_cidr6: None,
                pods,
            }
        })
        .collect();
    let topology = Topology {
        underlay: Underlay {
            kind: UnderlayKind::Routed,
            subnet: "192.168.50.0/24".parse().unwrap(),
            // The default; SVCFLOW_CLUSTER_ENCAP=geneve measures the overlay.
            encap: std::env::var("SVCFLOW_CLUSTER_ENCAP").unwrap_or_else(|_| "none".into()),
            ipv6_only: false,
        },
        management: DEFAULT_MANAGEMENT.parse().unwrap(),
        outside: None,
        nodes,
        services: Vec::new(),
    };
    topology.check().unwrap();
    topology
}

/// Every pod, in node order, with its node: `PODS_PER_NODE` per node.
struct Pods(Vec<(String, Ipv4Addr)>);

impl Pods {
    fn of(topology: &Topology) -> Self {
        Self(
            topology
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter().map(|p| (n.name.clone(), p.ip)))
                .collect(),
        )
    }

    fn at(&self, k: usize) -> &(String, Ipv4Addr) {
        &self.0[k % self.0.len()]
    }

    /// Service `i`'s endpoints: pod `a` (or `c` when `swapped`) of node i mod N, and pod `b`
    /// of the next node.
    fn endpoints_object(&self, i: usize, swapped: bool) -> String {
        let first = self.at(PODS_PER_NODE * i + if swapped { 2 } else { 0 });
        let second = self.at(PODS_PER_NODE * (i + 1) + 1);
        let mut addresses = String::new();
        for (k, (node, ip)) in [first, second].into_iter().enumerate() {
            if k > 0 {
                addresses.push(',');
            }
            let _ = write!(addresses, r#"{{"ip-address":"{ip}","node-name":"{node}"}}"#);
        }
        format!(
            r#"{{"uid":"ep-{i}","name":"svc-{i}","network-NS":"{NAMESPACE}","endpoint-addresses":[{addresses}],"endpoint-ports":[{{"name":"http","port":8080}}]}}"#
        )
    }

    fn endpoints_container(&self, services: usize) -> String {
        let items: Vec<String> = (0..services)
            .map(|i| self.endpoints_object(i, false))
            .collect();
        format!(
            r#"{{"service:endpoints-info":{{"endpoints":[{}]}}}}"#,
            items.join(",")
        )
    }
}

fn service_object(i: usize) -> String {
    let vip = Ipv4Addr::from(VIP_BASE + 1 + u32::try_from(i).unwrap());
    format!(
        r#"{{"uid":"svc-{i}","name":"svc-{i}","network-NS":"{NAMESPACE}","cluster-ip-address":"{vip}","service-ports":[{{"name":"http","port":80,"target-port":"8080"}}]}}"#
    )
}

fn services_container(services: usize) -> String {
    let items: Vec<String> = (0..services).map(service_object).collect();
    format!(
        r#"{{"service:service-information":{{"services":[{}]}}}}"#,
        items.join(",")
    )
}

/// A PUT that must succeed; returns how long the reply took.
fn put(http: &mut Http, log: &LogWatch, path: &str, body: &[u8]) -> Duration {
    let start = Instant::now();
    let reply = http
        .request("PUT", path, body)
        .unwrap_or_else(|e| log.fail(&format!("PUT {path}: {e}")));
    if !matches!(reply.status, 200 | 201 | 204) {
        let text = String::from_utf8_lossy(&reply.body);
        log.fail(&format!(
            "PUT {path}: HTTP {}: {}",
            reply.status,
            &text[..text.len().min(2000)]
        ));
    }
    start.elapsed()
}

// ---------------------------------------------------------------------------------------------

struct Row {
    tls: bool,
    nodes: usize,
    services: usize,
    flows: (u64, u64),
    groups: u64,
    load: Duration,
    /// CPU time in the load: the daemon's, and all `ovs-vswitchd`s' together.
    load_cpu: (Duration, Duration),
    all: (Duration, Duration),
    first: (Duration, Duration),
    /// CPU time per change: the daemon's, and all `ovs-vswitchd`s' together.
    cpu_per_change: (Duration, Duration),
    rss_kib: u64,
    /// The daemon's resident set after the changes.
    rss_after_kib: u64,
}

fn run(n: usize, s: usize, tls: bool, updates: usize, gap: Duration) -> Row {
    assert!(
        (1..(1 << 20) - 1).contains(&s),
        "SVCFLOW_CLUSTER_S must fit 10.96.0.0/12"
    );
    let topology = topology(n);
    let transport = if tls { "TLS" } else { "TCP" };
    println!("N={n} S={s} {transport}: bringing up the lab");
    let started = Instant::now();
    let options = LabOptions {
        tls,
        ..LabOptions::default()
    };
    let lab =
        Lab::up(&topology, &options).unwrap_or_else(|e| panic!("cannot bring the lab up: {e}"));
    let pid = lab.daemon().pid().unwrap();
    let nodes: Vec<String> = lab.node_names().iter().map(|n| n.to_string()).collect();
    let pods = Pods::of(&topology);
    let mut log = LogWatch::new(lab.daemon_log_path());
    let mut http = Http::new(lab.controller_netns(), REST);
    if let Some(ca) = lab.controller_ca() {
        http = http.with_tls(&ca, "svcflow").unwrap();
        // The switches must have been taken by their certificates (not over plain TCP).
        for node in lab.node_names() {
            let taken = format!("certificate of node {node}");
            assert!(
                lab.daemon().log().contains(&taken),
                "no {taken:?} in the daemon's log"
            );
        }
    }
    let switches: Vec<u32> = lab
        .node_names()
        .iter()
        .map(|node| lab.vswitchd_pid(node).unwrap())
        .collect();
    let cpu = |pids: &[u32]| pids.iter().map(|&p| cpu_time(p)).sum::<Duration>();
    let mut revision = log.settle(Duration::from_millis(500), Duration::from_secs(60));
    // Groups before the services: the flood group of the pods' namespace.
    let base_groups = log.syncs.last().map(|s| s.line.groups).unwrap_or(0);
    let groups = base_groups + s as u64;
    println!(
        "N={n} S={s} {transport}: lab {} up in {:.1} s at revision {revision}",
        lab.id(),
        started.elapsed().as_secs_f64()
    );

    // The load: every endpoints object, then every service.
    let endpoints_body = pods.endpoints_container(s);
    let services_body = services_container(s);
    let load_cpu_before = (cpu(&[pid]), cpu(&switches));
    let start = Instant::now();
    put(
        &mut http,
        &log,
        &format!("{CONFIG}/service:endpoints-info"),
        endpoints_body.as_bytes(),
    );
    put(
        &mut http,
        &log,
        &format!("{CONFIG}/service:service-information"),
        services_body.as_bytes(),
    );
    revision += 2;
    let timeout = Duration::from_secs(60) + Duration::from_millis((s * n) as u64);
    let loaded = log.wait_all(&nodes, revision, Some(groups), timeout, "the load");
    let load = loaded.values().map(|(at, _)| *at).max().unwrap() - start;
    let load_cpu = (
        cpu(&[pid]) - load_cpu_before.0,
        cpu(&switches) - load_cpu_before.1,
    );
    let flows = loaded.values().map(|(_, l)| l.flows);
    let flows = (flows.clone().min().unwrap(), flows.max().unwrap());
    println!(
        "N={n} S={s} {transport}: loaded on every node in {:.3} s: {}–{} flows, {groups} groups per node",
        load.as_secs_f64(),
        flows.0,
        flows.1
    );
    // Let any further sync of the load (none is expected) pass before measuring.
    let settled = log.settle(gap.max(Duration::from_millis(200)), Duration::from_secs(30));
    assert_eq!(settled, revision, "no write came between");
    // What the nodes shared of the load: one render of each service, its group ids once.
    let metrics = lab.metrics().expect("the daemon's metrics");
    let shared: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("svcflow_service_renders_total")
                || l.starts_with("svcflow_group_id_changes_total")
        })
        .collect();
    println!("N={n} S={s} {transport}: {}", shared.join(", "));

    // One endpoint change at a time.
    let cpu_before = (cpu(&[pid]), cpu(&switches));
    let mut swapped = vec![false; s];
    let mut all = Vec::with_capacity(updates);
    let mut first = Vec::with_capacity(updates);
    for k in 0..updates {
        let i = k * 7919 % s;
        swapped[i] = !swapped[i];
        let body = format!(
            r#"{{"service:endpoints":[{}]}}"#,
            pods.endpoints_object(i, swapped[i])
        );
        let path = format!("{CONFIG}/service:endpoints-info/endpoints/ep-{i}");
        std::thread::sleep(gap);
        let start = Instant::now();
        put(&mut http, &log, &path, body.as_bytes());
        revision += 1;
        let arrived = log.wait_all(
            &nodes,
            revision,
            Some(groups),
            Duration::from_secs(30),
            &format!("endpoint change {k} (service {i})"),
        );
        for (node, (_, line)) in &arrived {
            assert!(
                line.groups_changed >= 1,
                "node {node}: change {k} changed no group: {line:?}"
            );
        }
        let times: Vec<Instant> = arrived.values().map(|(at, _)| *at).collect();
        all.push(*times.iter().max().unwrap() - start);
        first.push(*times.iter().min().unwrap() - start);
        if (k + 1) % 50 == 0 {
            println!("N={n} S={s} {transport}: {} changes", k + 1);
        }
    }
    let per_change = |used: Duration| used / u32::try_from(updates).unwrap();
    let cpu_per_change = (
        per_change(cpu(&[pid]) - cpu_before.0),
        per_change(cpu(&switches) - cpu_before.1),
    );
    let rss_after_kib = rss_kib(pid);
    let rss_kib = peak_rss_kib(pid);
    lab.down().unwrap();
    let row = Row {
        tls,
        nodes: n,
        services: s,
        flows,
        groups,
        load,
        load_cpu,
        all: percentiles(&mut all),
        first: percentiles(&mut first),
        cpu_per_change,
        rss_kib,
        rss_after_kib,
    };
    println!(
        "N={n} S={s} {transport}: endpoint change on every node p50 {:.2} / p99 {:.2} ms (first node p50 \
         {:.2} / p99 {:.2} ms); CPU per change: svcflow {:.1} ms, the switches {:.1} ms; \
         peak RSS {} MiB, RSS after the changes {} MiB",
        ms(row.all.0),
        ms(row.all.1),
        ms(row.first.0),
        ms(row.first.1),
        ms(row.cpu_per_change.0),
        ms(row.cpu_per_change.1),
        rss_kib / 1024,
        rss_after_kib / 1024
    );
    row
}

fn main() {
    let binary = release_daemon("cluster");
    let node_counts = env_list("SVCFLOW_CLUSTER_N", &[3, 10]);
    let service_counts = env_list("SVCFLOW_CLUSTER_S", &[1_000]);
    let updates = env_list("SVCFLOW_CLUSTER_UPDATES", &[200])[0].max(1);
    let gap_ms = env_list("SVCFLOW_CLUSTER_GAP_MS", &[MIN_GAP_MS as usize])[0] as u64;
    assert!(
        gap_ms >= MIN_GAP_MS,
        "SVCFLOW_CLUSTER_GAP_MS={gap_ms}: at least {MIN_GAP_MS}, or the daemon's pace of one \
         bundle per 50 ms may be measured"
    );
    let gap = Duration::from_millis(gap_ms);
    let date = command_output(&["date", "-u", "+%Y-%m-%d %H:%M:%S UTC"]);
    let nproc = command_output(&["nproc"]);
    println!(
        "svcflow cluster bench: daemon {}, {date}, nproc {nproc}, {updates} endpoint changes, \
         {gap_ms} ms before each",
        binary.display()
    );
    let transports = env_list("SVCFLOW_CLUSTER_TLS", &[1]);
    let mut rows = Vec::new();
    for &n in &node_counts {
        for &s in &service_counts {
            for &tls in &transports {
                rows.push(run(n, s, tls != 0, updates, gap));
            }
        }
    }
    println!();
    println!(
        "svcflow cluster, {date}, nproc {nproc}, routed underlay, {PODS_PER_NODE} pods per node, \
         2 endpoints per service, {updates} endpoint changes, {gap_ms} ms before each"
    );
    println!();
    println!(
        "| N | S | transport | flows per node | groups per node | load on every node (s) | CPU in \
         the load: svcflow / all switches (s) | change on every node p50 / p99 (ms) | on the first node p50 / p99 (ms) | CPU per change: svcflow / \
         all switches (ms) | daemon RSS: peak / after (MiB) |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let flows = if r.flows.0 == r.flows.1 {
            r.flows.0.to_string()
        } else {
            format!("{}–{}", r.flows.0, r.flows.1)
        };
        println!(
            "| {} | {} | {} | {flows} | {} | {:.3} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.1} / {:.1} | {} / {} |",
            r.nodes,
            r.services,
            if r.tls { "TLS" } else { "TCP" },
            r.groups,
            r.load.as_secs_f64(),
            r.load_cpu.0.as_secs_f64(),
            r.load_cpu.1.as_secs_f64(),
            ms(r.all.0),
            ms(r.all.1),
            ms(r.first.0),
            ms(r.first.1),
            ms(r.cpu_per_change.0),
            ms(r.cpu_per_change.1),
            r.rss_kib / 1024,
            r.rss_after_kib / 1024
        );
    }
}
