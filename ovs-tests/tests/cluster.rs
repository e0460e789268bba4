//! A three-node cluster: the lab of `ovs-tests/lab/three-nodes.toml` (see `ovs_tests::lab`).
//! Three `ovs-vswitchd`s, each in its node's namespace, on a routed underlay (a router
//! namespace, one point-to-point link per node uplink, no encapsulation), driven by one
//! `svcflow run` in a controller namespace over a management network. Service `web`
//! (10.96.0.10:80 → 8080, node port 30080) has its endpoints on n2 and n3; n1 has none.
//!
//! Each test brings its own lab up and tears it down; they run one at a time (a lab is three
//! switches, svcflow and eight probe servers, on a machine of two cores).
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ovs_tests::lab::{Lab, LabOptions, Topology};
use ovs_tests::wait_for;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

const VIP: &str = "10.96.0.10:80";

/// A lab, and the turn it holds. Fields drop in order: the lab, then the turn.
struct Cluster {
    lab: Lab,
    _turn: MutexGuard<'static, ()>,
}

fn cluster() -> Cluster {
    assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let turn = ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/three-nodes.toml");
    let topology = Topology::load(&path).unwrap();
    // What the tests below rely on.
    let web = topology.service("web").unwrap();
    assert_eq!(web.endpoints, ["n2-a", "n3-a"]);
    assert_eq!(web.node_port, Some(30080));
    assert!(topology.outside.is_some());
    let started = Instant::now();
    let lab = Lab::up(&topology, &LabOptions::default())
        .unwrap_or_else(|e| panic!("cannot bring the lab up: {e}"));
    eprintln!(
        "lab {} up in {:.1} s",
        lab.id(),
        started.elapsed().as_secs_f64()
    );
    Cluster { lab, _turn: turn }
}

impl Cluster {
    fn fail(&self, what: &dyn std::fmt::Display) -> ! {
        panic!(
            "{what}\n{}\nsvcflow log tail:\n{}",
            self.lab.status(),
            self.lab.daemon_log_tail(60)
        );
    }

    /// `count` TCP connections from `from` (a pod, or the outside host) to `target`, each
    /// answered `(backend, source address it saw)` or failed with why.
    fn connect(
        &self,
        from: &str,
        target: &str,
        count: u32,
    ) -> Vec<Result<(String, String), String>> {
        let host = if self.lab.outside().is_some_and(|o| o.spec.name == from) {
            self.lab.outside().unwrap()
        } else {
            self.lab.pod(from).unwrap()
        };
        let attempts = host
            .connect("tcp", target, count, &["--peer", "--timeout-ms", "2000"])
            .unwrap_or_else(|e| self.fail(&format!("svcflow-probe connect {target}: {e}")));
        attempts
            .into_iter()
            .map(|a| {
                a.map(|answer| match answer.split_once('@') {
                    Some((name, ip)) => (name.to_string(), ip.to_string()),
                    None => (answer, String::new()),
                })
            })
            .collect()
    }

    /// Waits until one connection from `from` to `target` succeeds.
    fn wait_answer(&self, from: &str, target: &str, timeout: Duration) {
        let answered = wait_for(&format!("{from} to reach {target}"), timeout, || {
            self.connect(from, target, 1)
                .first()?
                .as_ref()
                .ok()
                .map(|_| ())
        });
        if let Err(e) = answered {
            self.fail(&e);
        }
    }

    /// Asserts that `count` connections from `from` to `target` all reach one of `backends`,
    /// each of them at least once, and that the backends saw `source`.
    fn assert_spread(&self, from: &str, target: &str, count: u32, backends: &[&str], source: &str) {
        let answers = self.connect(from, target, count);
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut wrong = Vec::new();
        for answer in &answers {
            match answer {
                Ok((name, ip)) if backends.contains(&name.as_str()) && ip == source => {
                    *seen.entry(name.clone()).or_default() += 1;
                }
                other => wrong.push(format!("{other:?}")),
            }
        }
        if !wrong.is_empty() || seen.len() != backends.len() {
            self.fail(&format!(
                "{count} connections from {from} to {target} should all reach {backends:?}, each \
                 at least once, seen from {source}: reached {seen:?}, and also {wrong:?}"
            ));
        }
        eprintln!("{from} -> {target}: {seen:?}, source {source}");
    }

    fn ip(&self, pod: &str) -> String {
        self.lab.pod(pod).unwrap().ip().to_string()
    }

    /// The endpoint sets of node `node`'s groups.
    fn groups(&self, node: &str) -> Vec<BTreeSet<Ipv4Addr>> {
        self.lab
            .group_endpoints(node)
            .unwrap_or_else(|e| self.fail(&format!("dump-groups on {node}: {e}")))
    }

    /// Waits until node `node` has a group of exactly `want`; returns how long that took.
    fn wait_group(
        &self,
        node: &str,
        want: &BTreeSet<Ipv4Addr>,
        since: Instant,
        timeout: Duration,
    ) -> Duration {
        let found = wait_for(
            &format!("node {node}'s switch to get the group {want:?}"),
            timeout,
            || self.groups(node).contains(want).then(|| since.elapsed()),
        );
        found.unwrap_or_else(|e| self.fail(&format!("{e}; it has {:?}", self.groups(node))))
    }

    fn endpoint_set(&self, pods: &[&str]) -> BTreeSet<Ipv4Addr> {
        pods.iter().map(|p| self.ip(p).parse().unwrap()).collect()
    }
}

#[test]
fn pods_on_different_nodes_reach_each_other_and_keep_their_source_address() {
    let c = cluster();
    let pods: Vec<(String, String)> = c
        .lab
        .topology()
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(|p| (n.name.clone(), p.name.clone())))
        .collect();
    let mut wrong = Vec::new();
    let mut pairs = 0;
    for (client_node, client) in &pods {
        for (server_node, server) in &pods {
            if client_node == server_node {
                continue;
            }
            pairs += 1;
            let target = format!("{}:8080", c.ip(server));
            let answers = c.connect(client, &target, 1);
            let want = Ok((server.clone(), c.ip(client)));
            if answers != [want.clone()] {
                wrong.push(format!(
                    "{client} -> {server}: {answers:?}, wanted {want:?}"
                ));
            }
        }
    }
    if !wrong.is_empty() {
        c.fail(&format!(
            "{} of {pairs} pod pairs failed:\n{}",
            wrong.len(),
            wrong.join("\n")
        ));
    }
    // ICMP too, across the router: n1-a to n3-b and back.
    for (from, to) in [("n1-a", "n3-b"), ("n3-b", "n1-a")] {
        let out = c
            .lab
            .exec(from, &["ping", "-c", "1", "-W", "2", &c.ip(to)])
            .unwrap();
        if !out.status.success() {
            c.fail(&format!(
                "ping {from} -> {to} failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    eprintln!("{pairs} cross-node pod pairs and 2 pings passed");
}

#[test]
fn a_cluster_ip_with_endpoints_on_other_nodes_answers_a_pod_on_every_node() {
    let c = cluster();
    // n1 has no endpoint; n2's and n3's clients reach one local and one remote endpoint.
    for client in ["n1-b", "n2-b", "n3-b"] {
        c.assert_spread(client, VIP, 20, &["n2-a", "n3-a"], &c.ip(client));
    }
}

#[test]
fn a_node_port_answers_the_outside_host_through_a_node_without_endpoints() {
    let c = cluster();
    let n1 = c.lab.node_spec("n1").unwrap().address.to_string();
    let target = format!("{n1}:30080");
    c.wait_answer("outside", &target, Duration::from_secs(10));
    // Forwarded to another node, the connection is masqueraded to n1's address, as
    // kube-proxy does, so that the reply comes back through n1.
    c.assert_spread("outside", &target, 20, &["n2-a", "n3-a"], &n1);
}

#[test]
fn a_restarted_ovs_vswitchd_is_synced_again_and_carries_traffic() {
    let mut c = cluster();
    c.assert_spread("n1-b", VIP, 10, &["n2-a", "n3-a"], &c.ip("n1-b"));
    let connections = |c: &Cluster| {
        c.lab
            .daemon()
            .log()
            .matches("node n2: its switch is connection")
            .count()
    };
    let before = connections(&c);

    let killed = Instant::now();
    c.lab.restart_vswitchd("n2").unwrap_or_else(|e| c.fail(&e));
    let restarted = killed.elapsed();
    if let Err(e) = c.lab.wait_synced(Duration::from_secs(30)) {
        c.fail(&e);
    }
    let synced = killed.elapsed();
    c.wait_answer(
        "n1-b",
        &format!("{}:8080", c.ip("n2-a")),
        Duration::from_secs(10),
    );
    let works = killed.elapsed();
    eprintln!(
        "n2's ovs-vswitchd: restarted after {restarted:?}, switch synced after {synced:?}, \
         traffic through it after {works:?}"
    );
    assert!(
        connections(&c) > before,
        "svcflow did not see n2's switch connect again:\n{}",
        c.lab.daemon_log_tail(40)
    );
    // Through the restarted node, to it, and from it.
    c.assert_spread("n1-b", VIP, 20, &["n2-a", "n3-a"], &c.ip("n1-b"));
    c.assert_spread("n2-b", VIP, 20, &["n2-a", "n3-a"], &c.ip("n2-b"));
    let answers = c.connect("n2-a", &format!("{}:8080", c.ip("n1-a")), 1);
    assert_eq!(answers, [Ok(("n1-a".to_string(), c.ip("n2-a")))]);
}

#[test]
fn a_frozen_switch_delays_no_other_node_and_catches_up_when_thawed() {
    let mut c = cluster();
    let all = c
        .lab
        .node_names()
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>();
    let original = c.endpoint_set(&["n2-a", "n3-a"]);
    for node in &all {
        assert!(
            c.groups(node).contains(&original),
            "{node}: {:?}",
            c.groups(node)
        );
    }

    // The usual time, with every switch running: n3's endpoint leaves, then comes back.
    let without_n3 = c.endpoint_set(&["n2-a"]);
    let since = Instant::now();
    c.lab
        .put_endpoints("web", &["n2-a"])
        .unwrap_or_else(|e| c.fail(&e));
    let usual: Vec<Duration> = all
        .iter()
        .map(|n| c.wait_group(n, &without_n3, since, Duration::from_secs(5)))
        .collect();
    c.lab
        .put_endpoints("web", &["n2-a", "n3-a"])
        .unwrap_or_else(|e| c.fail(&e));
    for node in &all {
        c.wait_group(node, &original, Instant::now(), Duration::from_secs(5));
    }

    // n3's switch freezes (the lab resumes it on drop, should this test fail meanwhile). Two
    // endpoint changes follow: n1-a joins, then n3-a leaves, the second one after svcflow's
    // sync to n3 has hung for a while. Each must reach n1 and n2 in about the usual time.
    c.lab.signal_vswitchd("n3", "STOP").unwrap();
    let frozen_at = Instant::now();
    let mut frozen_timings = Vec::new();
    let changes: [&[&str]; 2] = [&["n1-a", "n2-a", "n3-a"], &["n1-a", "n2-a"]];
    for (i, pods) in changes.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(4));
        }
        let want = c.endpoint_set(pods);
        let since = Instant::now();
        c.lab
            .put_endpoints("web", pods)
            .unwrap_or_else(|e| c.fail(&e));
        for node in ["n1", "n2"] {
            let took = c.wait_group(node, &want, since, Duration::from_secs(15));
            frozen_timings.push((format!("change {} on {node}", i + 1), took));
        }
    }
    eprintln!(
        "endpoint change, every switch running: {usual:?} (n1, n2, n3); with n3 frozen: \
         {frozen_timings:?}"
    );
    for (what, took) in &frozen_timings {
        assert!(
            *took <= Duration::from_secs(2),
            "{what} took {took:?} while n3 was frozen (usual: {usual:?})"
        );
    }
    // Hold n3 frozen past svcflow's 10 s limit for one sync, then thaw it: it catches up
    // with the last change.
    std::thread::sleep(Duration::from_secs(12).saturating_sub(frozen_at.elapsed()));
    c.lab.signal_vswitchd("n3", "CONT").unwrap();
    let thawed = Instant::now();
    let last = c.endpoint_set(changes[1]);
    let caught_up = c.wait_group("n3", &last, thawed, Duration::from_secs(40));
    eprintln!(
        "n3 frozen for {:?}, caught up {caught_up:?} after SIGCONT",
        thawed - frozen_at
    );
    if let Err(e) = c.lab.wait_synced(Duration::from_secs(30)) {
        c.fail(&e);
    }
    c.wait_answer(
        "n3-b",
        &format!("{}:8080", c.ip("n1-a")),
        Duration::from_secs(10),
    );
    c.assert_spread("n3-b", VIP, 20, &["n1-a", "n2-a"], &c.ip("n3-b"));
    c.assert_spread("n1-b", VIP, 20, &["n1-a", "n2-a"], &c.ip("n1-b"));
}
