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

use ovs_tests::lab::{Lab, LabOptions, MacSource, Topology, UnderlayKind};
use ovs_tests::wait_for;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

const VIP: &str = "10.96.0.10:80";

/// A lab, and the turn it holds. Fields drop in order: the lab, then the turn.
struct Cluster {
    lab: Lab,
    _turn: MutexGuard<'static, ()>,
}

fn cluster() -> Cluster {
    cluster_with(|_| {})
}

/// The lab of `three-nodes.toml`, changed by `change` before it comes up.
fn cluster_with(change: impl FnOnce(&mut Topology)) -> Cluster {
    assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let turn = ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/three-nodes.toml");
    let mut topology = Topology::load(&path).unwrap();
    // What the tests below rely on.
    let web = topology.service("web").unwrap();
    assert_eq!(web.endpoints, ["n2-a", "n3-a"]);
    assert_eq!(web.node_port, Some(30080));
    assert!(topology.outside.is_some());
    change(&mut topology);
    topology.check().unwrap();
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
    /// The daemon's dry run against every live switch (`svcflow:plan`) changes nothing: each
    /// switch holds the model exactly as a fresh read sees it, as a new master would.
    fn assert_switches_hold_the_model(&self) {
        let text = self
            .lab
            .get("/restconf/operational/svcflow:plan")
            .unwrap_or_else(|e| self.fail(&format!("GET the plan: {e}")));
        let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
        let nodes = plan["svcflow:plan"]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3, "every node planned: {text}");
        for node in nodes {
            let changes = node["changes"].as_array().unwrap();
            assert!(changes.is_empty(), "{}: {changes:?}", node["node"]);
        }
    }

    fn fail(&self, what: &dyn std::fmt::Display) -> ! {
        panic!(
            "{what}\n{}\nsvcflow log tail:\n{}",
            self.lab.status(),
            self.lab.daemon_log_tail(60)
        );
    }

    /// `count` TCP connections from `from` to `target`: see [`Lab::connect_peer`].
    fn connect(
        &self,
        from: &str,
        target: &str,
        count: u32,
    ) -> Vec<Result<(String, String), String>> {
        self.lab
            .connect_peer(from, target, count)
            .unwrap_or_else(|e| self.fail(&format!("svcflow-probe connect {target}: {e}")))
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

    /// Every pod reaches every pod of the other nodes over TCP, and the server sees the
    /// client pod's own address; n1-a and n3-b ping each other. Returns the number of pairs.
    fn assert_pods_reach_each_other(&self) -> usize {
        let pods: Vec<(String, String)> = self
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
                let target = format!("{}:8080", self.ip(server));
                let answers = self.connect(client, &target, 1);
                let want = Ok((server.clone(), self.ip(client)));
                if answers != [want.clone()] {
                    wrong.push(format!(
                        "{client} -> {server}: {answers:?}, wanted {want:?}"
                    ));
                }
            }
        }
        if !wrong.is_empty() {
            self.fail(&format!(
                "{} of {pairs} pod pairs failed:\n{}",
                wrong.len(),
                wrong.join("\n")
            ));
        }
        // ICMP too, across the underlay: n1-a to n3-b and back.
        for (from, to) in [("n1-a", "n3-b"), ("n3-b", "n1-a")] {
            self.ping(from, to);
        }
        pairs
    }

    /// One ping from pod `from` to pod `to`, which must be answered.
    fn ping(&self, from: &str, to: &str) {
        let out = self
            .lab
            .exec(from, &["ping", "-c", "1", "-W", "2", &self.ip(to)])
            .unwrap();
        if !out.status.success() {
            self.fail(&format!(
                "ping {from} -> {to} failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }

    /// `ovs-ofctl dump-flows br-int table=TABLE` on node `node`, one flow a line.
    fn flows(&self, node: &str, table: u8) -> Vec<String> {
        let text = self
            .lab
            .node(node)
            .unwrap()
            .ofctl("dump-flows", "br-int", &[&format!("table={table}")])
            .unwrap_or_else(|e| self.fail(&format!("dump-flows on {node}: {e}")));
        text.lines()
            .filter(|l| l.contains("actions="))
            .map(|l| l.trim().to_string())
            .collect()
    }
}

/// Whether a flow's actions set the destination MAC to `mac`, as a `set_field` (svcflow's
/// flows) or as the `load` that a `learn` action writes.
fn sets_eth_dst(flow: &str, mac: &str) -> bool {
    let value = u64::from_str_radix(&mac.replace(':', ""), 16).unwrap();
    flow.contains(&format!("set_field:{mac}->eth_dst"))
        || flow.contains(&format!("load:{value:#x}->NXM_OF_ETH_DST[]"))
}

#[test]
fn pods_on_different_nodes_reach_each_other_and_keep_their_source_address() {
    let c = cluster();
    let pairs = c.assert_pods_reach_each_other();
    eprintln!("{pairs} cross-node pod pairs and 2 pings passed");
}

#[test]
fn a_cluster_ip_with_endpoints_on_other_nodes_answers_a_pod_on_every_node() {
    let c = cluster();
    // n1 has no endpoint; n2's and n3's clients reach one local and one remote endpoint.
    for client in ["n1-b", "n2-b", "n3-b"] {
        c.assert_spread(client, VIP, 20, &["n2-a", "n3-a"], &c.ip(client));
    }
    // One controller, three nodes giving `web` the same group names: they placed them once
    // between them, or each placed them and found, at the end of its update, another node
    // holding the same, which it shares from then on. (`web` has a node port, so each node
    // renders it itself.) The lab is up, so every node has synced.
    let metrics = c
        .lab
        .metrics()
        .unwrap_or_else(|e| c.fail(&format!("metrics: {e}")));
    // Counters: whole numbers.
    let value = |line: &str| -> u64 {
        ovs_tests::svcflow::sample(&metrics, line)
            .unwrap_or_else(|| c.fail(&format!("no `{line}` in the metrics:\n{metrics}")))
            as u64
    };
    let rendered = value("svcflow_service_renders_total{how=\"rendered\"}");
    let taken = value("svcflow_service_renders_total{how=\"taken\"}");
    assert!(rendered >= 3, "renders: {rendered} made, {taken} taken");
    let placed = value("svcflow_group_id_changes_total{how=\"placed\"}");
    let shared = value("svcflow_group_id_changes_total{how=\"taken\"}")
        + value("svcflow_group_id_changes_total{how=\"joined\"}");
    assert!(
        placed > 0 && shared > 0,
        "group ids: {placed} placed, {shared} shared"
    );
    eprintln!(
        "renders: {rendered} made, {taken} taken; group ids: {placed} placed, {shared} shared"
    );
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
    // A port no node port takes on n1's address, which no host holds behind n1's bridge
    // here: refused at once, not routed back out of the uplink (the router would send it
    // back, again and again until its TTL ran out, each pass counted by n1's default route).
    let routed_out = || -> u64 {
        c.lab
            .node("n1")
            .unwrap()
            .settled_packets("br-int", |l| {
                l.contains("table=50") && l.contains("priority=10,ip ")
            })
            .unwrap_or_else(|e| c.fail(&format!("n1's default route: {e}")))
    };
    let before = routed_out();
    let unserved = format!("{n1}:9000");
    let answers = c.lab.connect_peer("outside", &unserved, 3).unwrap();
    assert!(
        answers
            .iter()
            .all(|a| a.as_ref().is_err_and(|e| e == "refused")),
        "outside to {unserved}: {answers:?}"
    );
    assert_eq!(
        routed_out(),
        before,
        "n1 routed traffic for its own address out"
    );
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
    c.assert_switches_hold_the_model();
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
    c.assert_switches_hold_the_model();
}

#[test]
fn on_a_shared_l2_underlay_nodes_are_told_apart_by_their_uplink_macs_and_carry_traffic() {
    let c = cluster_with(|t| t.underlay.kind = UnderlayKind::L2);
    // Pod to pod across nodes, with the source kept.
    let pairs = c.assert_pods_reach_each_other();
    // The ClusterIP from every node, to endpoints on the other nodes (n1 has none).
    for client in ["n1-b", "n2-b", "n3-b"] {
        c.assert_spread(client, VIP, 20, &["n2-a", "n3-a"], &c.ip(client));
    }
    // The NodePort from the outside host, on the same segment, through n1 (no endpoints):
    // masqueraded to n1's address.
    let n1 = c.lab.node_spec("n1").unwrap().address.to_string();
    let node_port = format!("{n1}:30080");
    c.wait_answer("outside", &node_port, Duration::from_secs(10));
    c.assert_spread("outside", &node_port, 20, &["n2-a", "n3-a"], &n1);

    // The segment's bridge learned each node's uplink MAC on that node's own port (the lab
    // joins node i's uplink to `br0` as `u-<i>`), and the router resolved each node's address
    // to it. The cluster's one gateway MAC never left a node.
    let run = |argv: &[&str]| {
        let out = c.lab.exec("underlay", argv).unwrap();
        assert!(out.status.success(), "{argv:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let fdb = run(&["bridge", "fdb", "show", "br", "br0"]);
    let neighbours = run(&["ip", "neigh", "show", "dev", "br0"]);
    let learned: BTreeMap<String, String> = fdb
        .lines()
        .filter(|l| !l.contains("permanent"))
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let dev = words.iter().position(|w| *w == "dev")?;
            Some((words[0].to_string(), words.get(dev + 1)?.to_string()))
        })
        .collect();
    let mut uplinks = BTreeMap::new();
    for (i, node) in c.lab.node_names().iter().enumerate() {
        let mac = c
            .lab
            .node(node)
            .unwrap()
            .vsctl(&["get", "interface", "uplink", "mac_in_use"])
            .unwrap()
            .trim()
            .trim_matches('"')
            .to_string();
        let port = format!("u-{i}");
        if learned.get(&mac) != Some(&port) {
            c.fail(&format!(
                "node {node}'s uplink MAC {mac} should be learned on {port}; br0's table:\n{fdb}"
            ));
        }
        let address = c.lab.node_spec(node).unwrap().address.to_string();
        let resolved = neighbours.lines().any(|l| {
            l.split_whitespace().next() == Some(address.as_str())
                && l.contains(&format!("lladdr {mac}"))
        });
        if !resolved {
            c.fail(&format!(
                "the router should resolve node {node}'s address {address} to its uplink MAC \
                 {mac}:\n{neighbours}"
            ));
        }
        uplinks.insert(node.to_string(), mac);
    }
    let distinct: BTreeSet<&String> = uplinks.values().collect();
    assert_eq!(distinct.len(), uplinks.len(), "{uplinks:?}");
    let gateway = netvirt::config::Config::default().gateway_mac.to_string();
    assert!(
        !fdb.to_ascii_lowercase()
            .contains(&gateway.to_ascii_lowercase()),
        "the gateway MAC {gateway} reached the underlay:\n{fdb}"
    );
    eprintln!(
        "l2 underlay: {pairs} pod pairs, ClusterIP from 3 nodes and NodePort passed; uplink \
         MACs {uplinks:?} each on its own port"
    );
    c.assert_switches_hold_the_model();
}

#[test]
fn pods_whose_mac_is_not_in_the_model_are_reached_across_nodes_and_through_a_cluster_ip() {
    // The endpoints of `web`: n2-a is posted without a MAC and its interface says it in
    // `external_ids:attached-mac`; n3-a is posted without one and its interface says none.
    let c = cluster_with(|t| {
        for node in &mut t.nodes {
            for pod in &mut node.pods {
                match pod.name.as_str() {
                    "n2-a" => pod.mac_source = MacSource::Attached,
                    "n3-a" => pod.mac_source = MacSource::None,
                    _ => {}
                }
            }
        }
    });
    let mac = |pod: &str| c.lab.pod(pod).unwrap().mac().to_string();
    let route = |node: &str, pod: &str| {
        let want = format!("ip,nw_dst={} actions=", c.ip(pod));
        c.flows(node, 50)
            .into_iter()
            .find(|f| f.contains(&want))
            .unwrap_or_else(|| c.fail(&format!("{node} has no route to {pod} in table 50")))
    };
    let learned = |node: &str, pod: &str| {
        let want = format!("nw_dst={}", c.ip(pod));
        c.flows(node, 51).into_iter().find(|f| f.contains(&want))
    };

    // attached: the route to n2-a sets the interface's MAC itself, and nothing is learned.
    let n2a = route("n2", "n2-a");
    assert!(sets_eth_dst(&n2a, &mac("n2-a")), "{n2a}");
    assert!(!n2a.contains("resubmit(,51)"), "{n2a}");
    let answers = c.connect("n1-a", &format!("{}:8080", c.ip("n2-a")), 1);
    assert_eq!(answers, [Ok(("n2-a".to_string(), c.ip("n1-a")))]);

    // none: the route to n3-a looks the MAC up in table 51, where nothing is yet, since n3-a
    // has sent no ARP.
    let n3a = route("n3", "n3-a");
    assert!(n3a.contains("resubmit(,51)"), "{n3a}");
    assert!(!n3a.contains("->eth_dst"), "{n3a}");
    if let Some(flow) = learned("n3", "n3-a") {
        c.fail(&format!(
            "n3 learned n3-a's MAC before n3-a sent anything: {flow}"
        ));
    }
    // The switch learns a pod's MAC from the pod's own ARP, so n3-a first sends something: a
    // ping to a pod on another node, for which it ARPs for its gateway.
    c.ping("n3-a", "n1-a");
    let flow = learned("n3", "n3-a").unwrap_or_else(|| {
        c.fail(&format!(
            "n3 learned no MAC for n3-a from its ARP; table 51: {:?}",
            c.flows("n3", 51)
        ))
    });
    assert!(sets_eth_dst(&flow, &mac("n3-a")), "{flow}");
    eprintln!("n3 learned: {flow}");
    let answers = c.connect("n1-a", &format!("{}:8080", c.ip("n3-a")), 1);
    assert_eq!(answers, [Ok(("n3-a".to_string(), c.ip("n1-a")))]);

    // Both through the ClusterIP, from every node (n1 and n2 forward to n3-a across the
    // underlay, n3 delivers to it locally), with the client's address kept.
    for client in ["n1-b", "n2-b", "n3-b"] {
        c.assert_spread(client, VIP, 20, &["n2-a", "n3-a"], &c.ip(client));
    }
    // The attached pod still learned nothing: its MAC came from its interface.
    if let Some(flow) = learned("n2", "n2-a") {
        c.fail(&format!(
            "n2 learned a MAC for n2-a, whose interface says it: {flow}"
        ));
    }
}

#[test]
fn external_traffic_policy_local_keeps_the_source_never_crosses_nodes_and_every_node_answers_its_health_check()
 {
    let c = cluster();
    // web with externalTrafficPolicy Local (svcflow's REST extension).
    let web = c.lab.topology().service("web").unwrap().clone();
    let mut body: serde_json::Value = serde_json::from_str(&web.rest_body()).unwrap();
    body["service:services"][0]["service:external-traffic-policy"] = "Local".into();
    body["service:services"][0]["service:health-check-node-port"] = 32080.into();
    if let Err(e) = c.lab.rest("PUT", &web.rest_path(), &body.to_string()) {
        c.fail(&format!("PUT web: {e}"));
    }
    let outside = c.lab.outside().unwrap().ip().to_string();
    let address = |node: &str| c.lab.node_spec(node).unwrap().address.to_string();
    // Through n3, which has one endpoint: only that one, which sees the client itself.
    let target = format!("{}:30080", address("n3"));
    let local = wait_for(
        "the Local policy to reach n3",
        Duration::from_secs(10),
        || {
            let answers = c.connect("outside", &target, 5);
            answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(|(b, _)| b == "n3-a"))
                .then_some(answers)
        },
    );
    let answers = local.unwrap_or_else(|e| c.fail(&e));
    assert!(
        answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|(_, source)| *source == outside)),
        "through n3 the source must be kept: {answers:?}"
    );
    // Through n1, which has none: refused, never sent to another node.
    let target = format!("{}:30080", address("n1"));
    let refused = wait_for(
        "n1 to refuse its node port",
        Duration::from_secs(10),
        || {
            let answers = c.connect("outside", &target, 3);
            answers
                .iter()
                .all(|a| a.as_ref().is_err_and(|e| e.contains("refused")))
                .then_some(())
        },
    );
    refused.unwrap_or_else(|e| c.fail(&e));
    // In-cluster traffic is not affected.
    c.assert_spread("n1-b", VIP, 20, &["n2-a", "n3-a"], &c.ip("n1-b"));
    // Every node answers its load balancer's probes of the health-check node port, though
    // svcflow runs on none of them: n1 (no endpoint) 503, n2 and n3 (one each) 200.
    let outside_host = c.lab.outside().unwrap();
    for (node, status, count) in [
        ("n1", "HTTP/1.1 503 Service Unavailable", 0),
        ("n2", "HTTP/1.1 200 OK", 1),
        ("n3", "HTTP/1.1 200 OK", 1),
    ] {
        let url = format!("http://{}:32080/healthz", address(node));
        let answer = wait_for(
            &format!("{node} to answer its health check"),
            Duration::from_secs(10),
            || {
                outside_host
                    .run(&["curl", "-s", "-i", "--max-time", "2", &url])
                    .ok()
                    .filter(|a| a.starts_with(status))
            },
        );
        let answer = answer.unwrap_or_else(|e| c.fail(&e));
        let body = format!(
            r#"{{"service":{{"namespace":"default","name":"web"}},"localEndpoints":{count},"serviceProxyHealthy":true}}"#
        );
        assert!(answer.ends_with(&body), "{node}: {answer}");
    }
    // The node-port flows changed owner (cookie) with the policy: each switch carries the
    // new cookies, so a fresh read finds nothing to change.
    c.assert_switches_hold_the_model();
}
