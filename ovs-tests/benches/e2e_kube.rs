//! The daemon driven by Kubernetes, end to end: `svcflow run --kubeconfig` (release build) on a
//! sandbox node, watching the in-process fake API server (`coe::k8s::fake`, real list/watch
//! JSON, so the real kube-rs code runs) bound in the node's namespace.
//!
//! 1. Full load from the initial list: S ClusterIP Services and their EndpointSlices (E
//!    endpoints each) are in the API server before the daemon starts; timed from the daemon's
//!    start to its first sync line holding every flow and group (this includes the daemon's
//!    own start: creating `br-int` over OVSDB and the switch connecting, shown apart as the
//!    time to the first sync of an empty cluster, measured first in the same run).
//! 2. One endpoint change: `SVCFLOW_E2E_UPDATES` EndpointSlice updates (one endpoint's address
//!    changes), each timed from the API server's write to the daemon's next sync line, each
//!    `SVCFLOW_E2E_GAP_MS` after the previous one was confirmed.
//! 3. One added service: as many times, a new EndpointSlice and then its Service written to
//!    the API server, timed from the first write to the sync line that holds the new group.
//! 4. The daemon's RSS: its peak (`VmHWM`), right after the full load, and after the changes.
//! 5. The anchor, in the same run: the flows and groups the daemon installed by the full load,
//!    dumped then and loaded with `ovs-ofctl --bundle` onto an empty bridge of the same
//!    `ovs-vswitchd` once the daemon is gone (as in `benches/e2e.rs`), and the ratio of the
//!    full load (the daemon's own start included) to it.
//!
//! `SVCFLOW_E2E_TLS` picks the switch's transport (1, `ssl:` with certificates from `ovs-pki`,
//! as beyond loopback, by default; 0, plain TCP on loopback; `0,1` both; the daemon's start
//! is then measured for each).
//!
//! ```sh
//! cargo build --release -p svcflow
//! SVCFLOW_E2E_S=30000 SVCFLOW_E2E_E=2 cargo bench -p ovs-tests --bench e2e_kube
//! ```

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use coe::k8s::fake::FakeApiServer;
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use ovs_tests::Sandbox;
use ovs_tests::bench::{
    Anchor, AnchorFiles, command_output, env_list, ms, peak_rss_kib, percentiles, release_daemon,
    rss_kib,
};
use ovs_tests::kube::{from, in_netns};
use ovs_tests::pki::Pki;
use ovs_tests::svcflow::{Daemon, LogLines, SyncLine};
use serde_json::json;

const BR: &str = "br-int";
const ANCHOR_BR: &str = "br-anchor";

fn vip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(0x0a60_0001 + i as u32)
}

fn endpoint_ip(i: usize, j: usize, flip: bool) -> Ipv4Addr {
    // 16 addresses per service in 10.128.0.0/9; a flipped endpoint takes the upper half.
    Ipv4Addr::from(0x0a80_0000 + (i as u32) * 16 + j as u32 + if flip { 8 } else { 0 })
}

fn service(i: usize) -> Service {
    from(json!({
        "metadata": {"namespace": "bench", "name": format!("s{i}")},
        "spec": {"type": "ClusterIP", "clusterIP": vip(i).to_string(),
                 "clusterIPs": [vip(i).to_string()],
                 "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]},
    }))
}

fn slice(i: usize, e: usize, flipped: Option<usize>) -> EndpointSlice {
    let endpoints: Vec<_> = (0..e)
        .map(|j| {
            json!({"addresses": [endpoint_ip(i, j, flipped == Some(j)).to_string()],
                   "conditions": {"ready": true, "serving": true, "terminating": false}})
        })
        .collect();
    from(json!({
        "metadata": {"namespace": "bench", "name": format!("s{i}-x"),
                     "labels": {"kubernetes.io/service-name": format!("s{i}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": endpoints,
    }))
}

/// Follows the daemon's sync lines.
struct Syncs {
    log: LogLines,
    seen: Vec<(Instant, SyncLine)>,
}

impl Syncs {
    fn poll(&mut self) {
        let now = Instant::now();
        for line in self.log.poll().unwrap() {
            if let Some(s) = SyncLine::parse(&line) {
                self.seen.push((now, s));
            }
        }
    }

    /// How many sync lines have come so far: a wait from here sees only later ones.
    fn mark(&mut self) -> usize {
        self.poll();
        self.seen.len()
    }

    /// Waits for a sync line after the first `after` that satisfies `ok`.
    fn wait(
        &mut self,
        after: usize,
        timeout: Duration,
        daemon: &Daemon,
        ok: impl Fn(&SyncLine) -> bool,
    ) -> (usize, Instant) {
        let deadline = Instant::now() + timeout;
        loop {
            self.poll();
            if let Some((k, (at, _))) = self
                .seen
                .iter()
                .enumerate()
                .skip(after)
                .find(|(_, (_, s))| ok(s))
            {
                return (k, *at);
            }
            assert!(
                Instant::now() < deadline,
                "no such sync within {timeout:?}; log tail:\n{}",
                daemon
                    .log()
                    .lines()
                    .rev()
                    .take(20)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            // Until the daemon writes to its log (inotify), or the deadline.
            self.log
                .wait_until(deadline)
                .unwrap_or_else(|e| panic!("watching the daemon log: {e}"));
        }
    }
}

struct Row {
    tls: bool,
    services: usize,
    endpoints: usize,
    flows: u64,
    empty_start: Duration,
    full_load: Duration,
    anchor: Anchor,
    change: (Duration, Duration),
    added: (Duration, Duration),
    rss_mib: u64,
    rss_loaded_mib: u64,
    rss_after_mib: u64,
}

/// Starts a sandbox, the fake API server (holding `objects` services) and the daemon; returns
/// them once the first sync holding `flows` flows has come, with the time it took.
fn start(
    rt: &tokio::runtime::Runtime,
    s: usize,
    e: usize,
    tls: bool,
) -> (Sandbox, FakeApiServer, Daemon, Syncs, Duration, u64) {
    let sb = Sandbox::start().unwrap();
    let mut flags = Vec::new();
    if tls {
        // The switch's certificate names node n1 (before the daemon starts: not timed).
        flags = Pki::for_sandbox(&sb, "n1").unwrap().1;
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let api = {
        let handle = rt.handle().clone();
        in_netns(sb.node_netns(), move || {
            handle.block_on(FakeApiServer::start_new()).unwrap()
        })
    };
    api.apply(&from::<Namespace>(json!({"metadata": {"name": "bench"}})))
        .unwrap();
    api.apply(&from::<Node>(json!({
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.168.50.10"}]},
    })))
    .unwrap();
    for i in 0..s {
        api.apply(&service(i)).unwrap();
        api.apply(&slice(i, e, None)).unwrap();
    }
    let started = Instant::now();
    let daemon = Daemon::start_kube(&sb, 1, &api.kubeconfig(), &flags).unwrap();
    let mut syncs = Syncs {
        log: LogLines::open(sb.dir().join("svcflow-1.log")).unwrap(),
        seen: Vec::new(),
    };
    let groups = s as u64;
    let timeout = Duration::from_secs(120) + Duration::from_millis((s * e) as u64);
    let (_, at) = syncs.wait(0, timeout, &daemon, |l| l.groups == groups && l.flows > 0);
    // Over TLS, the switch must have been taken by its certificate (not over plain TCP).
    assert!(
        !tls || daemon.log().contains("certificate of node n1"),
        "the switch is not connected over TLS with node n1's certificate:\n{}",
        daemon.log()
    );
    let flows = syncs.seen.last().map(|(_, l)| l.flows).unwrap_or(0);
    (sb, api, daemon, syncs, at - started, flows)
}

fn run(s: usize, e: usize, tls: bool, updates: usize, gap: Duration, empty_start: Duration) -> Row {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let transport = if tls { "TLS" } else { "TCP" };
    println!("S={s} E={e} {transport}: loading the API server and starting the daemon");
    let (sb, api, daemon, mut syncs, full_load, flows) = start(&rt, s, e, tls);
    println!(
        "S={s} E={e} {transport}: full load from the initial list {:.3} s ({flows} flows)",
        full_load.as_secs_f64()
    );
    let rss_loaded_mib = rss_kib(daemon.pid().unwrap()) / 1024;
    let anchor_files = AnchorFiles::dump(&sb, BR);
    assert_eq!(
        anchor_files.counts,
        (flows, s as u64),
        "the switch holds what the daemon reported"
    );
    let mut times = Vec::with_capacity(updates);
    let mut flipped = vec![false; s];
    for k in 0..updates {
        std::thread::sleep(gap);
        let i = k * 7919 % s;
        flipped[i] = !flipped[i];
        let after = syncs.mark();
        let t = Instant::now();
        api.apply(&slice(i, e, flipped[i].then_some(0))).unwrap();
        let (_, at) = syncs.wait(after, Duration::from_secs(30), &daemon, |l| {
            l.groups_changed >= 1
        });
        times.push(at - t);
    }
    let mut added = Vec::with_capacity(updates);
    for n in 0..updates {
        std::thread::sleep(gap);
        let k = s + n;
        let after = syncs.mark();
        let t = Instant::now();
        api.apply(&slice(k, e, None)).unwrap();
        api.apply(&service(k)).unwrap();
        let groups = (k + 1) as u64;
        let (_, at) = syncs.wait(after, Duration::from_secs(30), &daemon, |l| {
            l.groups == groups
        });
        added.push(at - t);
    }
    let rss_after_mib = rss_kib(daemon.pid().unwrap()) / 1024;
    let rss_mib = peak_rss_kib(daemon.pid().unwrap()) / 1024;
    drop(daemon);
    drop(api);
    sb.vsctl(&["del-br", BR]).unwrap();
    sb.add_bridge(ANCHOR_BR).unwrap();
    let anchor = anchor_files.load(&sb, ANCHOR_BR);
    println!(
        "S={s} E={e} {transport}: anchor {:.3} s (ratio {:.2}); CPU in the anchor: ovs-ofctl {:.3} s, \
         ovs-vswitchd {:.3} s",
        anchor.time.as_secs_f64(),
        full_load.as_secs_f64() / anchor.time.as_secs_f64(),
        anchor.cpu.0.as_secs_f64(),
        anchor.cpu.1.as_secs_f64(),
    );
    drop(sb);
    Row {
        tls,
        services: s,
        endpoints: e,
        flows,
        empty_start,
        full_load,
        anchor,
        change: percentiles(&mut times),
        added: percentiles(&mut added),
        rss_mib,
        rss_loaded_mib,
        rss_after_mib,
    }
}

fn main() {
    let _ = release_daemon("e2e_kube");
    let sizes = env_list("SVCFLOW_E2E_S", &[1_000, 10_000, 30_000]);
    let per_service = env_list("SVCFLOW_E2E_E", &[2, 10]);
    let updates = env_list("SVCFLOW_E2E_UPDATES", &[200])[0].max(1);
    let gap = Duration::from_millis(env_list("SVCFLOW_E2E_GAP_MS", &[100])[0] as u64);
    let date = command_output(&["date", "-u", "+%Y-%m-%d %H:%M:%S UTC"]);
    let nproc = command_output(&["nproc"]);
    let transports: Vec<bool> = env_list("SVCFLOW_E2E_TLS", &[1])
        .into_iter()
        .map(|t| t != 0)
        .collect();
    // The daemon's own start, with one service: the part of a full load that is not the load.
    let empty_start = |tls: bool| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (_sb, _api, _daemon, _syncs, took, _) = start(&rt, 1, 1, tls);
        println!(
            "svcflow e2e (Kubernetes), {date}, nproc {nproc}; the daemon's start to its first \
             sync with one service, over {}: {:.3} s",
            if tls { "TLS" } else { "TCP" },
            took.as_secs_f64()
        );
        took
    };
    let empty: Vec<Duration> = transports.iter().map(|&tls| empty_start(tls)).collect();
    let mut rows = Vec::new();
    for &s in &sizes {
        for &e in &per_service {
            for (&tls, &empty) in transports.iter().zip(&empty) {
                rows.push(run(s, e, tls, updates, gap, empty));
            }
        }
    }
    println!();
    println!(
        "svcflow e2e through the fake API server, {date}, nproc {nproc}, {updates} EndpointSlice \
         updates and {updates} added services, {} ms before each",
        gap.as_millis()
    );
    println!();
    println!(
        "| S | E | transport | flows | start with 1 service (s) | full load from the initial list (s) | \
         ovs-ofctl --bundle (s) | ratio | endpoint change p50 / p99 (ms) | \
         added service p50 / p99 (ms) | RSS peak / after the load / at the end (MiB) |"
    );
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {} / {} / {} |",
            r.services,
            r.endpoints,
            if r.tls { "TLS" } else { "TCP" },
            r.flows,
            r.empty_start.as_secs_f64(),
            r.full_load.as_secs_f64(),
            r.anchor.time.as_secs_f64(),
            r.full_load.as_secs_f64() / r.anchor.time.as_secs_f64(),
            ms(r.change.0),
            ms(r.change.1),
            ms(r.added.0),
            ms(r.added.1),
            r.rss_mib,
            r.rss_loaded_mib,
            r.rss_after_mib
        );
    }
}
