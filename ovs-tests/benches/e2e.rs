//! End to end (issue 19): the real `svcflow run` daemon, driven through its REST northbound,
//! programming a real `ovs-vswitchd` (userspace datapath) in a sandbox.
//!
//! For each size S (services) and E (endpoints per service), on a fresh sandbox with a fresh
//! daemon and state directory, it measures:
//! 1. full load: ONE container PUT of `service:endpoints-info` (every endpoints object), then
//!    ONE container PUT of `service:service-information` (every service), timed from just
//!    before the first request is sent until the daemon logs the sync of the second write's
//!    revision with the expected flow and group totals. Endpoints go first: endpoints without
//!    their service render nothing, so the switch never sees services without endpoints
//!    (refusal flows) that the second write would have to replace. With
//!    `SVCFLOW_E2E_LOAD=datastore` the full load is instead ONE PUT of the whole datastore
//!    (`/restconf/config`: node n1 as it is, an empty pod list, the endpoints and the
//!    services), one write and one revision; `containers,datastore` runs both, each on its
//!    own sandbox;
//! 2. the anchor: the flows and groups svcflow installed, dumped with `ovs-ofctl --no-names`
//!    after the full load, loaded from files with `ovs-ofctl --bundle add-groups` plus
//!    `--bundle add-flows` onto a new, empty bridge of the same `ovs-vswitchd` once the daemon
//!    is gone and `br-int` deleted (its text parsing is inside its time, as REST parsing is in
//!    ours), and the ratio full load / anchor;
//! 3. one endpoint change: `SVCFLOW_E2E_UPDATES` item PUTs of one service's endpoints object
//!    with one address replaced (rotating over the services), each timed from just before
//!    the request is sent to the sync line of its revision; p50 and p99;
//! 4. one added service: as many times, an item PUT of a new endpoints object and then an item
//!    PUT of its service (same order and reason as 1), timed from the first request to the
//!    sync line of the second's revision; p50 and p99;
//! 5. the daemon's peak RSS (`VmHWM` of its `/proc/PID/status`) after all of the above, and
//!    its RSS (`VmRSS`) just after the full load and at the end;
//! 6. the CPU time of the daemon and of `ovs-vswitchd` during the full load and of
//!    `ovs-ofctl` and `ovs-vswitchd` during the anchor; for the daemon also its user and
//!    kernel time and its minor page faults in the load (printed with each size, not in the
//!    table).
//!
//! Confirmation comes from the daemon's log: after the switch's barrier it logs
//! `node n1: synced model revision R: … (F flows, G groups desired)`
//! ([`SyncLine`]). R grows by one per accepted REST write; this bench is the only writer, so
//! it counts its writes and waits for a sync line with R equal to its last write's revision
//! (a burst of writes may be synced as one, at its last revision) and the totals it expects.
//! The fixed flows are read from node n1's syncs once they stop (n1 syncs again when its
//! gateway port is bound). The bench sleeps until the daemon writes to its log (inotify) and
//! then reads only the appended bytes, so a line is seen as it is written, without the bench
//! waking on the cores it measures. Before each full load's clock starts it calls `sync(2)`,
//! so that the daemon's `fdatasync` does not wait on what the bench wrote (the anchor never
//! syncs). A sync line with a revision beyond the bench's count
//! means the count is wrong, and stops the bench.
//!
//! The HTTP client is in-process ([`ovs_tests::http`]: HTTP/1.1, `Content-Length`, keep-alive
//! over one `std::net::TcpStream`), since a `curl` process per request would cost
//! milliseconds. The daemon runs inside the sandbox's node network namespace
//! ([`Daemon::start`] uses `ip netns exec`) and its REST listener is on that namespace's
//! loopback, so the client opens its socket on a short-lived thread that entered the namespace
//! (`setns`); a socket keeps its namespace whichever thread uses it afterwards. Every reply's
//! status must be 200, 201 or 204.
//!
//! Endpoints are remote (`node-name` `n2`, a node the model does not have, as in the `scale`
//! bench), one distinct address each in 10.128.0.0/9; node n1 has pod CIDR 10.244.0.0/16.
//! With more endpoints per service than one group holds (`netvirt::chain::GROUP_BUCKETS_MAX`,
//! e.g. `SVCFLOW_E2E_S=100 SVCFLOW_E2E_E=1000`) each service is split over chained groups:
//! the full load's totals must then divide evenly by S, and a change is confirmed by its
//! revision alone, since the chain's flows move with the endpoints.
//! Services are ClusterIP (10.96.0.0/12), one TCP port each (80 → 8080).
//!
//! Run, with the daemon built optimized first (Cargo does not build another package's binary
//! for a bench; the bench runs `$SVCFLOW_BIN`, else `svcflow` next to its own executable,
//! which under `cargo bench` is `target/release/svcflow`):
//!
//! ```sh
//! cargo build --release -p svcflow
//! cargo bench -p ovs-tests --bench e2e
//! SVCFLOW_E2E_S=1000 SVCFLOW_E2E_E=2 SVCFLOW_E2E_UPDATES=50 cargo bench -p ovs-tests --bench e2e
//! ```
//!
//! `SVCFLOW_E2E_S` picks the sizes (default 1000,10000,30000), `SVCFLOW_E2E_E` the endpoints
//! per service (default 2,10), `SVCFLOW_E2E_UPDATES` the number of each kind of update
//! (default 200), `SVCFLOW_E2E_GAP_MS` the pause before each measured write (default 100),
//! `SVCFLOW_E2E_PERF=FILE` records the daemon with `perf record` during the full load (call
//! graphs by frame pointers; `SVCFLOW_E2E_PERF_CALLGRAPH=dwarf` for perf's DWARF unwinding, which
//! also sees through libc; `SVCFLOW_E2E_PERF_ALL=1` records every process on the machine instead,
//! to see `ovs-vswitchd` beside the daemon), and `SVCFLOW_E2E_TLS` the transports (default 1:
//! TLS everywhere, as `svcflow run` requires beyond loopback, with certificates from `ovs-pki`
//! ([`ovs_tests::pki`]): the bridge dials the daemon over `ssl:` and the REST writes go over
//! HTTPS; 0: plain TCP on loopback; `0,1` runs both), `SVCFLOW_E2E_LOAD` the shape of the
//! full load (`containers` by default, `datastore`, or both, above), and `SVCFLOW_E2E_ROUNDS`
//! how many times each (S, E, transport, load) runs (default 1), each round on a fresh
//! sandbox and daemon with its own anchor: the row then gives the round whose ratio is the
//! median (its full load, anchor and CPU times) and every round's ratio, since both the load
//! and the anchor move with whatever else the host runs; the changes, replies and memory are
//! the first round's (the other rounds make one change of each kind; with
//! `SVCFLOW_E2E_PERF` each round records, over the file of the one before). The anchor is
//! the same either way: `ovs-ofctl` over the bridge's Unix socket, its fastest transport
//! (over `ssl:` it took longer and cost `ovs-vswitchd` more, `docs/performance.md`).
//! Every (S, E, transport) runs; S = 30,000 takes one to two minutes per E.
//!
//! The pause: the daemon paces the bundles to a switch (`svcflow/src/daemon/pace.rs`: three at
//! once after an idle spell, then one per 50 ms counted from the confirmations) and holds a
//! change that comes when that allowance is used up. Writes sent back to back would measure
//! that hold (about 50 ms each) once the allowance is gone, not the latency of one change;
//! each measured write therefore comes `SVCFLOW_E2E_GAP_MS` after the previous confirmation,
//! as an isolated change would.

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ovs_tests::Sandbox;
use ovs_tests::bench::{
    Anchor, AnchorFiles, ProcStat, command_output, cpu_time, env_list, ms, peak_rss_kib,
    percentiles, release_daemon, rss_kib,
};
use ovs_tests::http::Http;
use ovs_tests::pki::Pki;
use ovs_tests::svcflow::fixture::NODE_IP;
use ovs_tests::svcflow::{Daemon, LogLines, REST, SyncLine};

const BR: &str = "br-int";
const ANCHOR_BR: &str = "br-anchor";
const CONFIG: &str = "/restconf/config";
const NAMESPACE: &str = "bench";
/// Endpoint addresses: 10.128.0.0/9.
const ENDPOINT_BASE: u32 = 0x0a80_0000;
const ENDPOINT_SPACE: u32 = 1 << 23;
/// Cluster IPs: 10.96.0.0/12.
const VIP_BASE: u32 = 0x0a60_0000;
const VIP_SPACE: u32 = 1 << 20;

// ---------------------------------------------------------------------------------------------
// The daemon's log, read as it grows.

struct LogWatch {
    log: LogLines,
    /// Every sync line so far, with when this process saw it.
    syncs: Vec<(Instant, SyncLine)>,
    /// Lines before this index were already consumed by a wait.
    cursor: usize,
    /// The revision the REST state was loaded at, once logged.
    loaded: Option<u64>,
}

impl LogWatch {
    fn new(path: PathBuf) -> Self {
        let log = LogLines::open(path.clone())
            .unwrap_or_else(|e| panic!("opening the daemon log {}: {e}", path.display()));
        Self {
            log,
            syncs: Vec::new(),
            cursor: 0,
            loaded: None,
        }
    }

    /// Reads what was appended since the last call.
    fn poll(&mut self) {
        let lines = self.log.poll().unwrap();
        let now = Instant::now();
        for line in lines.iter().map(String::as_str) {
            if let Some(sync) = SyncLine::parse(line) {
                self.syncs.push((now, sync));
            } else if self.loaded.is_none() && line.contains("REST state loaded") {
                self.loaded = line
                    .split_once("revision=")
                    .and_then(|(_, r)| r.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|r| r.parse().ok());
            }
        }
    }

    /// The last `n` lines of the log, for panics.
    fn tail(&self, n: usize) -> String {
        self.log.tail(n)
    }

    fn fail(&self, what: &str) -> ! {
        panic!("{what}\n--- daemon log tail ---\n{}", self.tail(40))
    }

    /// Waits for the first new sync line with revision >= `revision` and, if given, these
    /// totals (flows, groups).
    fn wait_sync(
        &mut self,
        revision: u64,
        totals: Option<(u64, u64)>,
        timeout: Duration,
        what: &str,
    ) -> (Instant, SyncLine) {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            while self.cursor < self.syncs.len() {
                let (at, sync) = self.syncs[self.cursor];
                self.cursor += 1;
                if sync.revision > revision {
                    self.fail(&format!(
                        "{what}: the daemon synced revision {} while the bench's last write is \
                         revision {revision}: the bench's count of writes is wrong",
                        sync.revision
                    ));
                }
                if sync.revision == revision
                    && totals.is_none_or(|(f, g)| sync.flows == f && sync.groups == g)
                {
                    return (at, sync);
                }
            }
            if Instant::now() >= deadline {
                let seen: Vec<String> = self.syncs[self.syncs.len().saturating_sub(5)..]
                    .iter()
                    .map(|(_, s)| format!("{s:?}"))
                    .collect();
                self.fail(&format!(
                    "{what}: no sync of revision {revision} with totals {totals:?} (flows, \
                     groups) within {timeout:?}; last syncs seen: {seen:?}"
                ));
            }
            self.log
                .wait_until(deadline)
                .unwrap_or_else(|e| self.fail(&format!("{what}: watching the daemon log: {e}")));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The REST bodies.

fn addr(n: u32) -> Ipv4Addr {
    Ipv4Addr::from(n)
}

struct Layout {
    /// Addresses per service in the endpoint space: E plus a spare, rounded up.
    stride: u32,
    endpoints: u32,
}

impl Layout {
    fn endpoint(&self, service: u32, j: u32) -> Ipv4Addr {
        addr(ENDPOINT_BASE + service * self.stride + j)
    }

    fn vip(service: u32) -> Ipv4Addr {
        addr(VIP_BASE + service + 1)
    }

    /// One endpoints object; endpoint 0 is the spare address when `swapped`.
    fn endpoints_object(&self, i: u32, swapped: bool) -> String {
        let mut addresses = String::new();
        for j in 0..self.endpoints {
            let ip = if j == 0 && swapped {
                self.endpoint(i, self.endpoints)
            } else {
                self.endpoint(i, j)
            };
            if j > 0 {
                addresses.push(',');
            }
            let _ = write!(addresses, r#"{{"ip-address":"{ip}","node-name":"n2"}}"#);
        }
        format!(
            r#"{{"uid":"ep-{i}","name":"svc-{i}","network-NS":"{NAMESPACE}","endpoint-addresses":[{addresses}],"endpoint-ports":[{{"name":"http","port":8080}}]}}"#
        )
    }

    fn service_object(i: u32) -> String {
        format!(
            r#"{{"uid":"svc-{i}","name":"svc-{i}","network-NS":"{NAMESPACE}","cluster-ip-address":"{}","service-ports":[{{"name":"http","port":80,"target-port":"8080"}}]}}"#,
            Self::vip(i)
        )
    }

    fn endpoints_container(&self, services: u32) -> String {
        let items: Vec<String> = (0..services)
            .map(|i| self.endpoints_object(i, false))
            .collect();
        format!(
            r#"{{"service:endpoints-info":{{"endpoints":[{}]}}}}"#,
            items.join(",")
        )
    }

    fn services_container(services: u32) -> String {
        let items: Vec<String> = (0..services).map(Self::service_object).collect();
        format!(
            r#"{{"service:service-information":{{"services":[{}]}}}}"#,
            items.join(",")
        )
    }
}

/// Node n1, as its item PUT and the datastore's node container give it.
fn node_object() -> String {
    format!(
        r#"{{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
        "k8s-node:internal-ip-address":"{NODE_IP}","k8s-node:pod-cidr":"10.244.0.0/16"}}"#
    )
}

/// The datastore's node container, as a member of its body.
fn node_member() -> String {
    format!(
        r#""k8s-node:k8s-nodes-info":{{"k8s-nodes":[{}]}}"#,
        node_object()
    )
}

fn endpoints_item_path(i: u32) -> String {
    format!("{CONFIG}/service:endpoints-info/endpoints/ep-{i}")
}

fn service_item_path(i: u32) -> String {
    format!("{CONFIG}/service:service-information/services/svc-{i}")
}

// ---------------------------------------------------------------------------------------------

/// How the full load reaches the daemon (`SVCFLOW_E2E_LOAD`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Two container PUTs: the endpoints, then the services.
    Containers,
    /// One PUT of the whole datastore (`/restconf/config`): the node, the endpoints, the
    /// services and an empty pod list, replaced as one write.
    Datastore,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Self::Containers => "2 PUTs",
            Self::Datastore => "1 PUT",
        }
    }
}

struct Row {
    tls: bool,
    load: Load,
    services: u32,
    endpoints: u32,
    flows: u64,
    groups: u64,
    full_load: Duration,
    anchor: Duration,
    change: (Duration, Duration),
    added: (Duration, Duration),
    reply: (Duration, Duration),
    rss_kib: u64,
    /// The daemon's resident set just after the full load, and at the end.
    rss_loaded_kib: u64,
    rss_after_kib: u64,
    /// CPU time during the full load: the daemon's, `ovs-vswitchd`'s.
    load_cpu: (Duration, Duration),
    /// CPU time during the anchor: `ovs-ofctl`'s, `ovs-vswitchd`'s.
    anchor_cpu: (Duration, Duration),
    /// Full load / anchor in each round, in the order run (`SVCFLOW_E2E_ROUNDS`).
    ratios: Vec<f64>,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.full_load.as_secs_f64() / self.anchor.as_secs_f64()
    }
}

/// One row out of the rounds of a size: the first round's changes and memory (only it
/// measures the `SVCFLOW_E2E_UPDATES` changes), and the full load, anchor and CPU times of the
/// round whose ratio is the median (the lower middle one for an even count), with every
/// round's ratio.
fn median_round(mut rounds: Vec<Row>) -> Row {
    let ratios: Vec<f64> = rounds.iter().map(Row::ratio).collect();
    let mut order: Vec<usize> = (0..rounds.len()).collect();
    order.sort_by(|&a, &b| ratios[a].total_cmp(&ratios[b]));
    let middle = order[(order.len() - 1) / 2];
    let (full_load, anchor, load_cpu, anchor_cpu) = {
        let m = &rounds[middle];
        (m.full_load, m.anchor, m.load_cpu, m.anchor_cpu)
    };
    let mut row = rounds.swap_remove(0);
    row.full_load = full_load;
    row.anchor = anchor;
    row.load_cpu = load_cpu;
    row.anchor_cpu = anchor_cpu;
    row.ratios = ratios;
    row
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with('Z'))
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

fn run_size(s: u32, e: u32, tls: bool, load: Load, updates: u32, gap: Duration) -> Row {
    assert!(e >= 1, "SVCFLOW_E2E_E must be at least 1");
    let layout = Layout {
        stride: (e + 1).next_power_of_two(),
        endpoints: e,
    };
    let total = s + updates;
    assert!(
        u64::from(total) * u64::from(layout.stride) <= u64::from(ENDPOINT_SPACE)
            && total < VIP_SPACE - 1,
        "S={s}, E={e} and {updates} updates do not fit 10.128.0.0/9 and 10.96.0.0/12"
    );
    let transport = format!("{} {}", if tls { "TLS" } else { "TCP" }, load.name());
    println!("S={s} E={e} {transport}: starting a sandbox and the daemon");
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let mut http = Http::new(sb.node_netns(), REST);
    let mut flags = Vec::new();
    if tls {
        // The switch's certificate names node n1; the daemon's is `svcflow`'s (the REST
        // client checks it against the controller CA).
        let pki;
        (pki, flags) = Pki::for_sandbox(&sb, "n1").unwrap();
        http = http.with_tls(&pki.ca("controller"), "svcflow").unwrap();
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start_with(&sb, 1, "info", &flags).unwrap();
    let pid = daemon.pid().unwrap();
    let mut log = LogWatch::new(sb.dir().join("svcflow-1.log"));

    // The daemon is up once it answers over REST; its first log lines name the loaded revision.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let up = http
            .request("GET", &format!("{CONFIG}/k8s-node:k8s-nodes-info"), b"")
            .is_ok_and(|r| r.status == 200);
        if up {
            break;
        }
        if !alive(pid) {
            log.fail("the daemon exited");
        }
        if Instant::now() >= deadline {
            log.fail("the REST northbound did not answer within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    log.poll();
    let mut revision = log.loaded.unwrap_or(0);

    // Node n1, and its first sync: the fixed flows, no group.
    let node = format!(r#"{{"k8s-node:k8s-nodes":[{}]}}"#, node_object());
    put(
        &mut http,
        &log,
        &format!("{CONFIG}/k8s-node:k8s-nodes-info/k8s-nodes/node-1"),
        node.as_bytes(),
    );
    revision += 1;
    let (_, base) = log.wait_sync(
        revision,
        None,
        Duration::from_secs(60),
        "node n1's first sync",
    );
    // Over TLS, the switch must have been taken by its certificate (not over plain TCP).
    if tls && !daemon.log().contains("certificate of node n1") {
        log.fail("the switch is not connected over TLS with node n1's certificate");
    }
    // The node may sync again at that revision once its gateway port is bound and its host
    // side configured (13 flows, then 15): wait until the syncs stop for a while.
    let mut base = base;
    let settle = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = log.syncs.len();
        std::thread::sleep(Duration::from_millis(500).max(gap));
        log.poll();
        if log.syncs.len() == seen {
            break;
        }
        if Instant::now() >= settle {
            log.fail("node n1 kept syncing for 30 s with no REST write");
        }
    }
    if let Some(&(_, last)) = log.syncs.last() {
        base = last;
    }
    log.cursor = log.syncs.len();
    assert_eq!(base.groups, 0, "{base:?}");
    // A service of at most `GROUP_BUCKETS_MAX` endpoints renders one flow per address and
    // endpoint and one group; a bigger one is split over chained groups (more groups, and the
    // chain's flows in table 42), whose totals the full load gives (below).
    let chained = e as usize > netvirt::chain::GROUP_BUCKETS_MAX;
    let mut per_service = (1 + u64::from(e), 1);
    let mut flows = base.flows + u64::from(s) * per_service.0;
    let mut groups = u64::from(s) * per_service.1;

    // 1. Full load; the pause above isolates it from the node's syncs.
    let endpoints_body = layout.endpoints_container(s);
    let services_body = Layout::services_container(s);
    // The whole datastore: the node as it is, an empty pod list, and the two containers' bodies
    // (each `{"module:container":{…}}`) as its members.
    let datastore_body = match load {
        Load::Containers => String::new(),
        Load::Datastore => format!(
            r#"{{{nodes},"pod:coe":{{"pods":[]}},{},{}}}"#,
            &endpoints_body[1..endpoints_body.len() - 1],
            &services_body[1..services_body.len() - 1],
            nodes = node_member(),
        ),
    };
    println!(
        "S={s} E={e} {transport}: {} fixed flows; full load of {:.1} MB of endpoints and {:.1} MB of services",
        base.flows,
        endpoints_body.len() as f64 / 1e6,
        services_body.len() as f64 / 1e6
    );
    // `SVCFLOW_E2E_PERF=FILE`: record the daemon's profile during the full load.
    let perf = std::env::var("SVCFLOW_E2E_PERF").ok().map(|file| {
        let child = std::process::Command::new("perf")
            .args([
                "record",
                "--call-graph",
                &std::env::var("SVCFLOW_E2E_PERF_CALLGRAPH").unwrap_or_else(|_| "fp".into()),
                "-F",
                "999",
                "-o",
                &file,
            ])
            .args(if std::env::var_os("SVCFLOW_E2E_PERF_ALL").is_some() {
                vec!["-a".to_string()]
            } else {
                vec!["-p".to_string(), pid.to_string()]
            })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("SVCFLOW_E2E_PERF: cannot run perf: {e}"));
        std::thread::sleep(Duration::from_millis(500));
        child
    });
    let vswitchd = sb
        .vswitchd_pid()
        .expect("the sandbox's ovs-vswitchd pidfile");
    // Write back what this bench left dirty before the clock starts (the round before's
    // sandbox, logs and the anchor's flow files, tens of megabytes): the daemon's fdatasync
    // of its log may otherwise wait on it, as no anchor does.
    rustix::fs::sync();
    let cpu_before = (ProcStat::of(pid), cpu_time(vswitchd));
    let start = Instant::now();
    let (ep_reply, svc_reply) = match load {
        Load::Containers => {
            let ep_reply = put(
                &mut http,
                &log,
                &format!("{CONFIG}/service:endpoints-info"),
                endpoints_body.as_bytes(),
            );
            let svc_reply = put(
                &mut http,
                &log,
                &format!("{CONFIG}/service:service-information"),
                services_body.as_bytes(),
            );
            revision += 2;
            (ep_reply, svc_reply)
        }
        Load::Datastore => {
            let reply = put(&mut http, &log, CONFIG, datastore_body.as_bytes());
            revision += 1;
            (reply, Duration::ZERO)
        }
    };
    let timeout = Duration::from_secs(60) + Duration::from_millis(u64::from(s) * u64::from(e));
    let expected = (!chained).then_some((flows, groups));
    let (done, full) = log.wait_sync(revision, expected, timeout, "the full load");
    if chained {
        // Every service has the same shape, so the totals divide evenly by S. A change then
        // is known by its revision alone: which chained group an endpoint lands in, and so the
        // chain's flows, moves with the endpoints (`netvirt::chain`).
        let (f, g) = (full.flows - base.flows, full.groups);
        assert!(
            f % u64::from(s) == 0 && g % u64::from(s) == 0 && g > u64::from(s),
            "S={s} E={e} {transport}: {f} service flows and {g} groups for chained services: {full:?}"
        );
        per_service = (f / u64::from(s), g / u64::from(s));
        (flows, groups) = (full.flows, full.groups);
    }
    let totals = |flows: u64, groups: u64| (!chained).then_some((flows, groups));
    let full_load = done - start;
    let load_stat = ProcStat::of(pid).since(cpu_before.0);
    let load_cpu = (load_stat.cpu(), cpu_time(vswitchd) - cpu_before.1);
    let rss_loaded_kib = rss_kib(pid);
    if let Some(child) = perf {
        // perf writes its file on SIGINT.
        let _ = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let _ = child.wait_with_output();
    }
    drop((endpoints_body, services_body, datastore_body));
    let replies = match load {
        Load::Containers => format!(
            "endpoints {:.0} ms, services {:.0} ms after it",
            ms(ep_reply),
            ms(svc_reply)
        ),
        Load::Datastore => format!("{:.0} ms", ms(ep_reply)),
    };
    println!(
        "S={s} E={e} {transport}: full load {:.3} s (replies: {replies}; sync: {} flows added, {} \
         groups changed)",
        full_load.as_secs_f64(),
        full.added,
        full.groups_changed
    );

    // What svcflow installed, for the anchor.
    let anchor_files = AnchorFiles::dump(&sb, BR);
    assert_eq!(
        anchor_files.counts,
        (flows, groups),
        "the switch holds what the daemon reported"
    );

    // 3. One endpoint change at a time.
    let mut swapped = vec![false; s as usize];
    let mut change = Vec::with_capacity(updates as usize);
    let mut replies = Vec::with_capacity(2 * updates as usize);
    for n in 0..updates {
        let i = (u64::from(n) * 7919 % u64::from(s)) as u32;
        swapped[i as usize] = !swapped[i as usize];
        let body = format!(
            r#"{{"service:endpoints":[{}]}}"#,
            layout.endpoints_object(i, swapped[i as usize])
        );
        let path = endpoints_item_path(i);
        std::thread::sleep(gap);
        let start = Instant::now();
        replies.push(put(&mut http, &log, &path, body.as_bytes()));
        revision += 1;
        let (done, sync) = log.wait_sync(
            revision,
            totals(flows, groups),
            Duration::from_secs(30),
            &format!("endpoint change {n} (service {i})"),
        );
        assert!(sync.groups_changed >= 1, "{sync:?}");
        change.push(done - start);
    }

    // 4. One added service at a time: its endpoints, then the service.
    let mut added = Vec::with_capacity(updates as usize);
    for n in 0..updates {
        let k = s + n;
        let ep_body = format!(
            r#"{{"service:endpoints":[{}]}}"#,
            layout.endpoints_object(k, false)
        );
        let svc_body = format!(r#"{{"service:services":[{}]}}"#, Layout::service_object(k));
        let (ep_path, svc_path) = (endpoints_item_path(k), service_item_path(k));
        flows += per_service.0;
        groups += per_service.1;
        std::thread::sleep(gap);
        let start = Instant::now();
        replies.push(put(&mut http, &log, &ep_path, ep_body.as_bytes()));
        replies.push(put(&mut http, &log, &svc_path, svc_body.as_bytes()));
        revision += 2;
        let (done, _) = log.wait_sync(
            revision,
            totals(flows, groups),
            Duration::from_secs(30),
            &format!("added service {k}"),
        );
        added.push(done - start);
    }

    // 5. Peak RSS, then the daemon goes.
    let rss_after_kib = rss_kib(pid);
    let rss_kib = peak_rss_kib(pid);
    let syncs = log.syncs.len();
    daemon.kill();

    // 2. The anchor, on an empty bridge of the same ovs-vswitchd.
    sb.vsctl(&["del-br", BR]).unwrap();
    sb.add_bridge(ANCHOR_BR).unwrap();
    let Anchor {
        time: anchor,
        cpu: anchor_cpu,
    } = anchor_files.load(&sb, ANCHOR_BR);

    let row = Row {
        tls,
        load,
        services: s,
        endpoints: e,
        flows: full.flows,
        groups: full.groups,
        full_load,
        anchor,
        change: percentiles(&mut change),
        added: percentiles(&mut added),
        reply: percentiles(&mut replies),
        rss_kib,
        rss_loaded_kib,
        rss_after_kib,
        load_cpu,
        anchor_cpu,
        ratios: Vec::new(),
    };
    println!(
        "S={s} E={e} {transport}: anchor {:.3} s (ratio {:.2}); endpoint change p50 {:.2} / p99 {:.2} ms; \
         added service p50 {:.2} / p99 {:.2} ms; item PUT reply p50 {:.2} / p99 {:.2} ms; \
         {syncs} syncs logged; RSS peak {} MiB, after the load {} MiB, at the end {} MiB; CPU \
         during the load: svcflow {:.3} s (user {:.2} s, kernel {:.2} s; {} minor faults), \
         ovs-vswitchd {:.3} s; during the anchor: ovs-ofctl {:.3} s, ovs-vswitchd {:.3} s",
        anchor.as_secs_f64(),
        row.ratio(),
        ms(row.change.0),
        ms(row.change.1),
        ms(row.added.0),
        ms(row.added.1),
        ms(row.reply.0),
        ms(row.reply.1),
        rss_kib / 1024,
        rss_loaded_kib / 1024,
        rss_after_kib / 1024,
        load_cpu.0.as_secs_f64(),
        load_stat.user.as_secs_f64(),
        load_stat.kernel.as_secs_f64(),
        load_stat.minor_faults,
        load_cpu.1.as_secs_f64(),
        anchor_cpu.0.as_secs_f64(),
        anchor_cpu.1.as_secs_f64(),
    );
    drop(daemon);
    drop(sb);
    row
}

fn main() {
    let binary = release_daemon("e2e");
    let sizes = env_list("SVCFLOW_E2E_S", &[1_000, 10_000, 30_000]);
    let per_service = env_list("SVCFLOW_E2E_E", &[2, 10]);
    let updates = env_list("SVCFLOW_E2E_UPDATES", &[200])[0].max(1) as u32;
    let rounds = env_list("SVCFLOW_E2E_ROUNDS", &[1])[0].max(1);
    let gap = Duration::from_millis(env_list("SVCFLOW_E2E_GAP_MS", &[100])[0] as u64);
    let date = command_output(&["date", "-u", "+%Y-%m-%d %H:%M:%S UTC"]);
    let nproc = command_output(&["nproc"]);
    println!(
        "svcflow e2e bench: daemon {}, {date}, nproc {nproc}, {updates} updates of each kind, \
         {} ms before each",
        binary.display(),
        gap.as_millis()
    );

    let transports = env_list("SVCFLOW_E2E_TLS", &[1]);
    let loads: Vec<Load> = std::env::var("SVCFLOW_E2E_LOAD")
        .unwrap_or_else(|_| "containers".into())
        .split(',')
        .map(|l| match l.trim() {
            "containers" => Load::Containers,
            "datastore" => Load::Datastore,
            other => panic!("SVCFLOW_E2E_LOAD: `{other}` is neither containers nor datastore"),
        })
        .collect();
    let mut rows = Vec::new();
    for &s in &sizes {
        for &e in &per_service {
            for &tls in &transports {
                for &load in &loads {
                    // Each round on a fresh sandbox and daemon; only the first measures
                    // the changes.
                    let row = (0..rounds)
                        .map(|r| {
                            let updates = if r == 0 { updates } else { 1 };
                            run_size(s as u32, e as u32, tls != 0, load, updates, gap)
                        })
                        .collect();
                    rows.push(median_round(row));
                }
            }
        }
    }

    println!();
    println!(
        "svcflow e2e, {date}, nproc {nproc}, {updates} updates of each kind, {} ms before each",
        gap.as_millis()
    );
    println!();
    println!(
        "| S | E | transport | full load as | flows | groups | full load (s) | ovs-ofctl --bundle (s) | ratio | ratio \
         in each round | endpoint \
         change p50 / p99 (ms) | added service p50 / p99 (ms) | item PUT reply p50 / p99 (ms) \
         | RSS: peak / after the load / at the end (MiB) | CPU in the load: svcflow / \
         ovs-vswitchd (s) | CPU in the anchor: ovs-ofctl / ovs-vswitchd (s) |"
    );
    println!("|---:|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.3} | {:.3} | {:.2} | {} | {:.2} / {:.2} | {:.2} / {:.2} | \
             {:.2} / {:.2} | {} / {} / {} | {:.2} / {:.2} | {:.2} / {:.2} |",
            r.services,
            r.endpoints,
            if r.tls { "TLS" } else { "TCP" },
            r.load.name(),
            r.flows,
            r.groups,
            r.full_load.as_secs_f64(),
            r.anchor.as_secs_f64(),
            r.ratio(),
            r.ratios
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            ms(r.change.0),
            ms(r.change.1),
            ms(r.added.0),
            ms(r.added.1),
            ms(r.reply.0),
            ms(r.reply.1),
            r.rss_kib / 1024,
            r.rss_loaded_kib / 1024,
            r.rss_after_kib / 1024,
            r.load_cpu.0.as_secs_f64(),
            r.load_cpu.1.as_secs_f64(),
            r.anchor_cpu.0.as_secs_f64(),
            r.anchor_cpu.1.as_secs_f64(),
        );
    }
}
