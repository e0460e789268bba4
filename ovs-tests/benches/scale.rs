//! Scale: svcflow's whole path (model → desired state → plan → bundle → barrier) against a
//! real `ovs-vswitchd`, for S services × 10 endpoints, with `ovs-ofctl --bundle` loading the
//! same flows and groups as the anchor.
//!
//! For each S it prints:
//! - full sync: time from the model to the switch's confirmation, on an empty switch, with
//!   the flow and group counts and the process's peak RSS during the sync (`VmHWM`, reset
//!   before each size through `/proc/self/clear_refs`);
//! - `ovs-ofctl --bundle add-groups` plus `--bundle add-flows` of the same state, from files
//!   written beforehand (its text parsing is inside its time, as our encoding is in ours);
//! - at the largest S, single-endpoint updates: one endpoint of one service replaced, timed
//!   from the model change to the bundle's confirmation, p50 and p99.
//!
//! Run: `cargo bench -p ovs-tests --bench scale`. `SVCFLOW_BENCH_S=100,1000` picks the sizes
//! (default 100,1000,10000), `SVCFLOW_BENCH_UPDATES` the number of updates (default 500).

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use netvirt::config::Config;
use netvirt::desired::{GatewayPort, NodeBindings, Uplink};
use netvirt::engine::Engine;
use netvirt::flow::{DumpFlow, DumpGroup};
use netvirt::model::{Endpoint, MacAddr, Model, Node, Service, ServiceKey, ServicePort};
use openflow::driver::{self, DriverConfig, SwitchHandle};
use ovs_tests::Sandbox;

const BR: &str = "br-int";
const ENDPOINTS: u32 = 10;

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn node() -> Node {
    Node {
        name: "n1".to_string(),
        ips: vec![IpAddr::V4(Ipv4Addr::new(198, 18, 0, 10))],
        pod_cidrs: vec!["10.244.0.0/24".parse().unwrap()],
        labels: BTreeMap::new(),
    }
}

fn bindings() -> NodeBindings {
    NodeBindings {
        ofports: BTreeMap::new(),
        macs: BTreeMap::new(),
        gateway: Some(GatewayPort {
            ofport: 2,
            mac: MacAddr([0x0a, 0x58, 0, 0, 0, 2]),
        }),
        uplink: Some(Uplink {
            ofport: 1,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            next_hop_mac: MacAddr([2, 0, 0, 0, 0, 0xe1]),
        }),
        tunnel: None,
        local_mac: None,
    }
}

/// Endpoint `j` of service `i`: a remote pod in 10.128.0.0/10, one address per endpoint.
fn endpoint(i: u32, j: u32) -> Endpoint {
    Endpoint::new(
        IpAddr::V4(Ipv4Addr::from(0x0a80_0000 + i * 16 + j)),
        Vec::new(),
        Some("n2".to_string()),
    )
}

fn model(services: u32) -> Model {
    let mut m = Model::default();
    m.nodes.insert("n1".to_string(), node());
    for i in 0..services {
        let key = ServiceKey::new("bench", &format!("svc-{i}"));
        let service = Service::cluster_ip(
            key.clone(),
            format!("uid-{i}"),
            IpAddr::V4(Ipv4Addr::from(0x0a60_0000 + i + 1)),
            vec![ServicePort::tcp("http", 80, 8080)],
        );
        m.services.insert(key.clone(), service);
        m.endpoints
            .insert(key, (0..ENDPOINTS).map(|j| endpoint(i, j)).collect());
    }
    m
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn reset_peak_rss() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct Bench {
    sb: Sandbox,
    sw: SwitchHandle,
}

impl Bench {
    fn clear(&self) {
        self.sb.ofctl("del-flows", BR, &[]).unwrap();
        self.sb.ofctl("del-groups", BR, &[]).unwrap();
    }

    fn counts(&self) -> (usize, usize) {
        let flows = self.sb.dump_flows(BR).unwrap().lines().count();
        let groups = self
            .sb
            .dump_groups(BR)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(" group_id="))
            .count();
        (flows, groups)
    }
}

struct Row {
    services: u32,
    flows: usize,
    groups: usize,
    ours: Duration,
    rss_kib: u64,
    ofctl: Duration,
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let sizes = env_list("SVCFLOW_BENCH_S", &[100, 1_000, 10_000]);
    let updates = env_list("SVCFLOW_BENCH_UPDATES", &[500])
        .first()
        .copied()
        .unwrap_or(500)
        .max(1);
    let sb = Sandbox::start().unwrap();
    sb.add_bridge(BR).unwrap();
    let sw = driver::connect(&sb.mgmt_target(BR), DriverConfig::default())
        .await
        .unwrap();
    let b = Bench { sb, sw };
    let config = Config::default();
    let version = b.sb.appctl(&["version"]).unwrap();
    println!("{}", version.lines().next().unwrap_or(""));

    let mut rows = Vec::new();
    let mut last: Option<(Engine, Model, u32)> = None;
    for &s in &sizes {
        let s = s as u32;
        // Only one size's model and engine live at a time.
        drop(last.take());
        let m = model(s);
        tokio::task::block_in_place(|| b.clear());

        // svcflow: model to confirmed switch state, from an empty switch.
        reset_peak_rss();
        let start = Instant::now();
        let mut engine = Engine::new(b.sw.clone());
        let report = engine
            .sync(&node(), &m, &config, &bindings())
            .await
            .unwrap();
        let ours = start.elapsed();
        let rss_kib = peak_rss_kib();
        let (flows, groups) = tokio::task::block_in_place(|| b.counts());
        let want = engine.shards().materialize();
        assert_eq!(flows, want.state.flows.len(), "every flow installed");
        assert_eq!(groups, want.state.groups.len(), "every group installed");
        assert_eq!(report.flows_added, flows);
        println!(
            "S={s:>6}: svcflow full sync {:>8.1} ms  ({flows} flows, {groups} groups, peak RSS {} MiB)",
            ms(ours),
            rss_kib / 1024
        );

        // The anchor: the same state from files with ovs-ofctl --bundle.
        let flow_file = b.sb.dir().join(format!("flows-{s}.txt"));
        let group_file = b.sb.dir().join(format!("groups-{s}.txt"));
        let flow_text: String = want
            .state
            .flows
            .iter()
            .map(|(k, v)| format!("{}\n", DumpFlow(k, v)))
            .collect();
        let group_text: String = want
            .state
            .groups
            .iter()
            .map(|(id, g)| format!("{}\n", DumpGroup(*id, g)))
            .collect();
        std::fs::write(&flow_file, flow_text).unwrap();
        std::fs::write(&group_file, group_text).unwrap();
        let ofctl = tokio::task::block_in_place(|| {
            b.clear();
            let start = Instant::now();
            b.sb.ofctl(
                "add-groups",
                BR,
                &["--bundle", &group_file.to_string_lossy()],
            )
            .unwrap();
            b.sb.ofctl("add-flows", BR, &["--bundle", &flow_file.to_string_lossy()])
                .unwrap();
            let took = start.elapsed();
            assert_eq!(
                b.counts(),
                (flows, groups),
                "ovs-ofctl installed everything"
            );
            took
        });
        println!(
            "S={s:>6}: ovs-ofctl --bundle  {:>8.1} ms  (ratio svcflow / ovs-ofctl {:.2})",
            ms(ofctl),
            ours.as_secs_f64() / ofctl.as_secs_f64()
        );
        rows.push(Row {
            services: s,
            flows,
            groups,
            ours,
            rss_kib,
            ofctl,
        });
        last = Some((engine, m, s));
    }

    // Single-endpoint updates at the largest size. The switch holds ovs-ofctl's copy of the
    // same state; a fresh engine adopts it by diffing (nothing to change), then each update
    // replaces one endpoint of one service.
    let Some((_, mut m, s)) = last else { return };
    let mut engine = Engine::new(b.sw.clone());
    let adopted = engine
        .sync(&node(), &m, &config, &bindings())
        .await
        .unwrap();
    assert!(
        adopted.is_empty(),
        "adopting ovs-ofctl's identical state changed: {adopted:?}"
    );
    let mut samples = Vec::with_capacity(updates);
    for n in 0..updates as u32 {
        let i = (n * 7919) % s;
        let key = ServiceKey::new("bench", &format!("svc-{i}"));
        let start = Instant::now();
        let eps = m.endpoints.get_mut(&key).unwrap();
        // Alternate endpoint 0 between its own address and a spare one.
        let spare = endpoint(i, ENDPOINTS);
        eps[0] = if eps[0].address == spare.address {
            endpoint(i, 0)
        } else {
            spare
        };
        let report = engine
            .sync(&node(), &m, &config, &bindings())
            .await
            .unwrap();
        samples.push(start.elapsed());
        assert_eq!(report.groups_changed, 1, "{report:?}");
    }
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.5), percentile(&samples, 0.99));
    println!(
        "S={s:>6}: {updates} single-endpoint updates: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(p50),
        ms(p99),
        ms(*samples.last().unwrap())
    );

    println!();
    println!(
        "| services × 10 endpoints | flows | groups | svcflow full sync | peak RSS | ovs-ofctl --bundle | svcflow / ovs-ofctl |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.0} ms | {} MiB | {:.0} ms | {:.2} |",
            r.services,
            r.flows,
            r.groups,
            ms(r.ours),
            r.rss_kib / 1024,
            ms(r.ofctl),
            r.ours.as_secs_f64() / r.ofctl.as_secs_f64()
        );
    }
    println!();
    println!("| single-endpoint update at S = {s} | p50 | p99 |");
    println!("|---|---:|---:|");
    println!(
        "| model change → bundle confirmed ({updates} updates) | {:.2} ms | {:.2} ms |",
        ms(p50),
        ms(p99)
    );
}
