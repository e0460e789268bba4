//! The overlay (`svcflow run --encap geneve|vxlan`) on the three-node lab
//! (`ovs-tests/lab/three-nodes.toml`), with the underlay's router no longer routing any pod
//! CIDR: pods on different nodes can reach each other only through the tunnel.
//!
//! The lab (`underlay.encap`) runs on each node what `svcflow node-setup NODE --address
//! ADDR/24 --encap geneve` prints for the userspace datapath: its underlay address on
//! `br-int`'s own port, the datapath's tunnel endpoint. The router answers ARP for the nodes'
//! addresses (`proxy_arp`), so those addresses are on-link through the uplink.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ovs_tests::lab::{Lab, LabOptions, Topology, peer_answers};
use ovs_tests::wait_for;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

const VIP: &str = "10.96.0.10:80";

struct Overlay {
    lab: Lab,
    _turn: MutexGuard<'static, ()>,
}

fn overlay(encap: &str) -> Overlay {
    assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let turn = ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/three-nodes.toml");
    let mut topology = Topology::load(&path).unwrap();
    assert_eq!(topology.service("web").unwrap().endpoints, ["n2-a", "n3-a"]);
    // The lab then routes no pod CIDR in the underlay, runs `svcflow run --encap ENCAP`, and
    // sets up each node's tunnel endpoint as `svcflow node-setup` prints it.
    topology.underlay.encap = encap.into();
    let lab = Lab::up(&topology, &LabOptions::default()).unwrap_or_else(|e| panic!("lab: {e}"));
    let o = Overlay { lab, _turn: turn };
    // Check the premise: the router has no route to any pod CIDR.
    let routes = run(
        &o.lab,
        &["ip", "netns", "exec", o.lab.underlay_netns(), "ip", "route"],
    );
    assert!(
        !routes.contains("10.244."),
        "the router routes pod CIDRs:\n{routes}"
    );
    o
}

fn run(lab: &Lab, argv: &[&str]) -> String {
    let out = std::process::Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .unwrap();
    if !out.status.success() {
        panic!(
            "{argv:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            lab.status()
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `svcflow-probe connect tcp TARGET --count N --peer` from node `node`'s own host (its
/// network namespace): each attempt as `Ok((backend, source it saw))` or `Err(why)`.
fn connect_from_host(
    c: &Overlay,
    node: &str,
    target: &str,
    count: u32,
) -> Vec<Result<(String, String), String>> {
    probe_from_host(c, node, "tcp", target, count, &[])
}

/// [`connect_from_host`] with a protocol and more probe options.
fn probe_from_host(
    c: &Overlay,
    node: &str,
    proto: &str,
    target: &str,
    count: u32,
    extra: &[&str],
) -> Vec<Result<(String, String), String>> {
    let mut options = vec!["--peer", "--timeout-ms", "2000"];
    options.extend_from_slice(extra);
    let attempts = c
        .lab
        .node(node)
        .and_then(|n| n.connect_from_node(proto, target, count, &options))
        .unwrap_or_else(|e| c.fail(&e));
    peer_answers(attempts)
}

impl Overlay {
    fn fail(&self, what: &dyn std::fmt::Display) -> ! {
        panic!(
            "{what}\n{}\nsvcflow log tail:\n{}",
            self.lab.status(),
            self.lab.daemon_log_tail(60)
        );
    }

    /// `svcflow-probe serve NAME LISTEN` on node `node`'s own host, until it drops.
    fn serve_on_host(&self, node: &str, name: &str, listen: &str) -> ovs_tests::Process {
        self.lab
            .node(node)
            .and_then(|n| n.serve_on_node(name, &[listen]))
            .unwrap_or_else(|e| self.fail(&e))
    }

    fn ip(&self, pod: &str) -> String {
        self.lab.pod(pod).unwrap().ip().to_string()
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

    /// Waits until a connection from `from` to `target` is answered (the first one across
    /// a node waits for the datapath to resolve its next hop).
    fn wait_answer(&self, from: &str, target: &str) {
        let answered = wait_for(
            &format!("{from} to reach {target}"),
            Duration::from_secs(10),
            || {
                self.connect(from, target, 1)
                    .first()?
                    .as_ref()
                    .ok()
                    .map(|_| ())
            },
        );
        if let Err(e) = answered {
            self.fail(&e);
        }
    }

    /// Which backends `count` connections reach, each with the source it saw.
    fn spread(&self, from: &str, target: &str, count: u32) -> BTreeMap<(String, String), usize> {
        let mut seen = BTreeMap::new();
        for answer in self.connect(from, target, count) {
            match answer {
                Ok(pair) => *seen.entry(pair).or_default() += 1,
                Err(e) => self.fail(&format!("{from} -> {target}: {e}")),
            }
        }
        seen
    }

    /// The packets node `node`'s switch sent into its tunnel (table 50's routes to the other
    /// nodes' pod CIDRs) and took out of it (the tunnel port's classifier flow), from the
    /// flows' counters once they have settled.
    fn tunnel_packets(&self, node: &str) -> (u64, u64) {
        let sb = self.lab.node(node).unwrap();
        let count = |what: &str, matches: &dyn Fn(&str) -> bool| {
            sb.settled_packets("br-int", matches)
                .unwrap_or_else(|e| self.fail(&format!("{what} on {node}: {e}")))
        };
        let sent = count("packets into the tunnel", &|l| {
            l.contains("table=50") && l.contains("->tun_dst")
        });
        let received = count("packets out of the tunnel", &|l| {
            l.contains("move:NXM_NX_TUN_ID[0..23]->NXM_NX_REG6[0..23]")
        });
        (sent, received)
    }
}

#[test]
fn over_geneve_pods_services_and_node_ports_work_across_nodes_with_the_right_sources() {
    let o = overlay("geneve");
    // Pod to pod across nodes, both ways, with the source kept.
    for (client, server) in [("n1-a", "n2-b"), ("n2-b", "n1-a"), ("n3-a", "n1-b")] {
        let target = format!("{}:8080", o.ip(server));
        o.wait_answer(client, &target);
        let seen = o.spread(client, &target, 5);
        assert_eq!(
            seen,
            BTreeMap::from([((server.to_string(), o.ip(client)), 5)]),
            "{client} -> {server}"
        );
    }
    // The traffic went through the tunnels.
    // The traffic went through the tunnels, both ways (the router routes no pod CIDR).
    for node in ["n1", "n2", "n3"] {
        let (sent, received) = o.tunnel_packets(node);
        assert!(
            sent > 0 && received > 0,
            "{node} sent {sent} packets into its tunnel and took {received} out"
        );
    }
    // ClusterIP from every node to web's endpoints on n2 and n3, source kept.
    for client in ["n1-b", "n2-b", "n3-b"] {
        o.wait_answer(client, VIP);
        let seen = o.spread(client, VIP, 20);
        let backends: Vec<&str> = seen.keys().map(|(b, _)| b.as_str()).collect();
        assert_eq!(backends, ["n2-a", "n3-a"], "from {client}: {seen:?}");
        assert!(
            seen.keys().all(|(_, source)| *source == o.ip(client)),
            "from {client}, the source was not kept: {seen:?}"
        );
    }
    // NodePort from outside through n1, which has no endpoint: masqueraded to n1's address,
    // so the endpoint on the other node answers back through n1.
    let n1 = o.lab.node_spec("n1").unwrap().address.to_string();
    let target = format!("{n1}:30080");
    o.wait_answer("outside", &target);
    let seen = o.spread("outside", &target, 20);
    let backends: Vec<&str> = seen.keys().map(|(b, _)| b.as_str()).collect();
    assert_eq!(backends, ["n2-a", "n3-a"], "{seen:?}");
    assert!(seen.keys().all(|(_, source)| *source == n1), "{seen:?}");
    // `svcflow trace` sees the probe go into n1's tunnel and come out on the endpoint's node.
    let traced = o
        .lab
        .svcflow(&[
            "trace",
            "--node",
            "n1",
            "--from",
            "default/n1-b",
            "--to",
            VIP,
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| o.fail(&e));
    if !traced.status.success() {
        o.fail(&String::from_utf8_lossy(&traced.stderr));
    }
    let out = String::from_utf8_lossy(&traced.stdout);
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hops: Vec<String> = report["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            format!(
                "{}:{}",
                h["node"].as_str().unwrap(),
                h["role"].as_str().unwrap()
            )
        })
        .collect();
    let far = hops
        .get(3)
        .and_then(|h| h.split(':').next())
        .unwrap_or("?")
        .to_string();
    assert!(far == "n2" || far == "n3", "{report:#}");
    assert_eq!(
        hops,
        [
            "n1:classifier".to_string(),
            "n1:service".into(),
            "n1:onward".into(),
            format!("{far}:arrived"),
            format!("{far}:output"),
        ],
        "{report:#}"
    );
    let onward = report["hops"][2]["note"].as_str().unwrap();
    let address = o.lab.node_spec(&far).unwrap().address.to_string();
    assert!(
        onward.contains("(tunnel) to ") && onward.contains(&format!("{address} (node {far})")),
        "{report:#}"
    );
    assert!(
        report["hops"][2]["metadata"]
            .as_str()
            .unwrap()
            .contains(&format!("tun_dst={address}")),
        "{report:#}"
    );
    assert!(
        report["result"]
            .as_str()
            .unwrap()
            .contains(&format!("(pod default/{far}-a) on node {far}")),
        "{report:#}"
    );
    // A node's own processes reach a node port on the node's own address (its underlay
    // address, on br-int's own port here), as kube-proxy's OUTPUT rules allow: the nftables
    // rule of the host's gateway side sends it through br-int. From n1, which has no
    // endpoint, and from n2, which has one. A node port no service takes is refused at once.
    for node in ["n1", "n2"] {
        let address = o.lab.node_spec(node).unwrap().address.to_string();
        let target = format!("{address}:30080");
        let answered = wait_for(
            &format!("{node} to reach {target}"),
            Duration::from_secs(10),
            || {
                let a = connect_from_host(&o, node, &target, 1);
                a.first()?.as_ref().ok().cloned()
            },
        );
        answered.unwrap_or_else(|e| o.fail(&e));
        let answers = connect_from_host(&o, node, &target, 20);
        assert!(
            answers
                .iter()
                .all(|a| a.as_ref().is_ok_and(|(b, _)| b == "n2-a" || b == "n3-a")),
            "from {node} to {target}: {answers:?}"
        );
    }
    let unused = connect_from_host(&o, "n1", &format!("{n1}:30999"), 1);
    assert!(
        unused[0].as_ref().is_err_and(|e| e.contains("refused")),
        "{unused:?}"
    );
}

/// The node's own host holds its address on `br-int`'s own port (the datapath's tunnel
/// endpoint), so the uplink also carries the host's traffic: a host on the underlay reaches a
/// process of the node on a port no service takes (neither sent back out of the uplink nor
/// dropped as invalid), the node's host reaches the underlay (the replies to its own
/// connections, which the service zone never saw leave, reach it), and a pod reaches its node's
/// address (routed to the host, not out of the uplink to loop back). A node port still goes
/// to its service.
#[test]
fn over_geneve_the_node_host_keeps_its_address_for_its_own_traffic() {
    let o = overlay("geneve");
    o.wait_answer("n1-a", VIP);
    let n1 = o.lab.node_spec("n1").unwrap().address.to_string();
    // A process of the node's host, on its address and a port no service takes.
    let server = o.serve_on_host("n1", "n1-host", "tcp:9000");
    let outside = o.lab.outside().expect("the lab's outside host");
    let target = format!("{n1}:9000");
    let answers = wait_for(
        &format!("the outside host to reach {target}"),
        Duration::from_secs(10),
        || {
            let a = o.connect("outside", &target, 5);
            a.iter().all(Result::is_ok).then_some(a)
        },
    )
    .unwrap_or_else(|e| o.fail(&e));
    let outside_ip = outside.ip().to_string();
    assert!(
        answers.iter().all(|a| a
            .as_ref()
            .is_ok_and(|(name, seen)| name == "n1-host" && seen == &outside_ip)),
        "{answers:?}"
    );
    // From a pod of the node to its node's address: the host sees the pod's own address.
    let pod_ip = o.ip("n1-a");
    let from_pod = o.connect("n1-a", &target, 5);
    drop(server);
    assert!(
        from_pod.iter().all(|a| a
            .as_ref()
            .is_ok_and(|(name, seen)| name == "n1-host" && seen == &pod_ip)),
        "{from_pod:?}"
    );
    // The node's host connects out over the underlay.
    let _outside_server = outside
        .serve("outside", &["tcp:9001"])
        .unwrap_or_else(|e| o.fail(&e));
    let out = connect_from_host(&o, "n1", &format!("{outside_ip}:9001"), 5);
    assert!(
        out.iter()
            .all(|a| a.as_ref().is_ok_and(|(name, _)| name == "outside")),
        "n1's host to {outside_ip}:9001: {out:?}"
    );
    // A node port on the same address still goes to the service's endpoints.
    let node_port = format!("{n1}:30080");
    let answers = o.connect("outside", &node_port, 10);
    assert!(
        answers
            .iter()
            .all(|a| a.as_ref().is_ok_and(|(b, _)| b == "n2-a" || b == "n3-a")),
        "outside to {node_port}: {answers:?}"
    );
}

#[test]
fn over_geneve_a_pod_leaving_the_cluster_is_masqueraded_to_its_node_address() {
    let o = overlay("geneve");
    let outside = o.lab.outside().expect("the lab's outside host");
    let _outside_server = outside
        .serve("outside", &["tcp:9001", "udp:9002"])
        .unwrap_or_else(|e| o.fail(&e));
    let to_outside = format!("{}:9001", outside.ip());
    let n1 = o.lab.node_spec("n1").unwrap().address.to_string();
    let n2 = o.lab.node_spec("n2").unwrap().address.to_string();
    // The underlay routes no pod CIDR: a pod's connection out of the cluster comes back
    // only because it left with its node's address.
    o.wait_answer("n2-a", &to_outside);
    let seen = o.spread("n2-a", &to_outside, 10);
    assert_eq!(
        seen,
        BTreeMap::from([(("outside".to_string(), n2.clone()), 10)]),
        "n2-a -> {to_outside}"
    );
    // Another node's host is outside the cluster's pod network too (the hosts route only
    // their own pod CIDR): it sees n2's address, and its replies find their way back.
    let host_server = o.serve_on_host("n1", "n1-host", "tcp:9000");
    let to_host = format!("{n1}:9000");
    o.wait_answer("n2-a", &to_host);
    let seen = o.spread("n2-a", &to_host, 10);
    drop(host_server);
    assert_eq!(
        seen,
        BTreeMap::from([(("n1-host".to_string(), n2.clone()), 10)]),
        "n2-a -> {to_host}"
    );
    // The node host's own connections share its address with the masqueraded ones: a pod
    // sending from the source port one of the host's UDP flows uses, toward the same
    // destination, gets another port, and the host's flow keeps its replies.
    let to_udp = format!("{}:9002", outside.ip());
    let from_host = |round: &str| {
        let got = probe_from_host(&o, "n2", "udp", &to_udp, 1, &["--src-port", "40000"]);
        assert_eq!(
            got,
            [Ok(("outside".to_string(), n2.clone()))],
            "n2's host to {to_udp} from port 40000, {round}"
        );
    };
    from_host("first");
    let from_pod = o
        .lab
        .pod("n2-a")
        .unwrap()
        .connect("udp", &to_udp, 1, &["--peer", "--src-port", "40000"])
        .unwrap_or_else(|e| o.fail(&e));
    assert_eq!(from_pod, [Ok(format!("outside@{n2}"))], "n2-a to {to_udp}");
    from_host("after the pod's");
    // In the cluster the source stays the pod's: pod to pod across nodes, and the node port
    // from outside to a pod with `externalTrafficPolicy: Local` (its replies are replies,
    // not masqueraded), are checked by the tests above; here, a pod on another node.
    let target = format!("{}:8080", o.ip("n1-a"));
    o.wait_answer("n2-a", &target);
    assert_eq!(
        o.spread("n2-a", &target, 5),
        BTreeMap::from([(("n1-a".to_string(), o.ip("n2-a")), 5)]),
    );
}

#[test]
fn over_geneve_a_namespace_broadcast_reaches_its_pods_on_other_nodes() {
    let o = overlay("geneve");
    // Give the tunnel its neighbours first (the datapath resolves its next hop once).
    o.wait_answer("n1-a", &format!("{}:8080", o.ip("n2-a")));
    o.wait_answer("n1-a", &format!("{}:8080", o.ip("n3-a")));
    // IPv6 link-local and multicast traffic is not routed: an all-nodes ping floods the
    // sender's ELAN, which now spans the cluster. Every pod of the namespace answers, on every node (each once its link-local
    // address has passed duplicate address detection, which a loaded machine can delay: the
    // ping is tried again until then).
    let mut last = String::new();
    let answered = ovs_tests::wait_for(
        "every pod of the namespace to answer the all-nodes ping",
        Duration::from_secs(20),
        || {
            let out = o
                .lab
                .exec(
                    "n1-a",
                    &[
                        "ping",
                        "-6",
                        "-c",
                        "3",
                        "-i",
                        "0.3",
                        "-w",
                        "4",
                        "ff02::1%eth0",
                    ],
                )
                .unwrap_or_else(|e| o.fail(&format!("ping: {e}")));
            last = String::from_utf8_lossy(&out.stdout).to_string();
            let others: std::collections::BTreeSet<String> = last
                .lines()
                .filter_map(|l| l.split("bytes from ").nth(1))
                .filter_map(|rest| rest.split(['%', ' ']).next())
                .map(|a| a.trim_end_matches(':').to_string())
                .collect();
            (others.len() >= 5).then_some(others)
        },
    );
    if let Err(e) = answered {
        o.fail(&format!(
            "{e}: the all-nodes ping from n1-a should be answered by every pod of the namespace \
             on the three nodes (5 others); the last one:\n{last}"
        ));
    }
}

#[test]
fn over_vxlan_pods_reach_each_other_across_nodes() {
    let o = overlay("vxlan");
    for (client, server) in [("n1-a", "n3-b"), ("n3-b", "n1-a")] {
        let target = format!("{}:8080", o.ip(server));
        o.wait_answer(client, &target);
        let seen = o.spread(client, &target, 3);
        assert_eq!(
            seen,
            BTreeMap::from([((server.to_string(), o.ip(client)), 3)])
        );
    }
    for node in ["n1", "n3"] {
        let (sent, received) = o.tunnel_packets(node);
        assert!(
            sent > 0 && received > 0,
            "{node} sent {sent} packets into its tunnel and took {received} out"
        );
    }
}

#[test]
fn over_geneve_external_traffic_policy_local_keeps_the_source_and_never_crosses_nodes() {
    let o = overlay("geneve");
    // web with externalTrafficPolicy Local (svcflow's REST extension).
    let web = o.lab.topology().service("web").unwrap().clone();
    let mut body: serde_json::Value = serde_json::from_str(&web.rest_body()).unwrap();
    body["service:services"][0]["service:external-traffic-policy"] = "Local".into();
    o.lab
        .rest("PUT", &web.rest_path(), &body.to_string())
        .unwrap_or_else(|e| o.fail(&format!("PUT web: {e}")));
    let outside = o.lab.outside().unwrap().ip().to_string();
    let address = |node: &str| o.lab.node_spec(node).unwrap().address.to_string();
    // Through n2, which has one endpoint: only that endpoint, which sees the client itself.
    let target = format!("{}:30080", address("n2"));
    let took = wait_for(
        "the Local policy to reach n2",
        Duration::from_secs(10),
        || {
            let seen = o.spread("outside", &target, 5);
            (seen.len() == 1).then_some(seen)
        },
    );
    let seen = took.unwrap_or_else(|e| o.fail(&e));
    assert_eq!(
        seen,
        BTreeMap::from([(("n2-a".to_string(), outside.clone()), 5)]),
        "through n2: its own endpoint only, source kept"
    );
    // Through n1, which has none: refused, never sent to another node.
    let target = format!("{}:30080", address("n1"));
    let refused = wait_for(
        "n1 to refuse its node port",
        Duration::from_secs(10),
        || {
            o.connect("outside", &target, 1)
                .first()?
                .as_ref()
                .err()
                .filter(|e| e.contains("refused"))
                .cloned()
        },
    );
    refused.unwrap_or_else(|e| o.fail(&e));
    let answers = o.connect("outside", &target, 5);
    assert!(
        answers
            .iter()
            .all(|a| a.as_ref().is_err_and(|e| e.contains("refused"))),
        "through n1, with no local endpoint: {answers:?}"
    );
    // In-cluster traffic is not affected: the ClusterIP still reaches both endpoints.
    let seen = o.spread("n1-b", VIP, 20);
    let backends: Vec<&str> = seen.keys().map(|(b, _)| b.as_str()).collect();
    assert_eq!(backends, ["n2-a", "n3-a"], "{seen:?}");
}

#[test]
fn over_geneve_a_node_whose_ovs_vswitchd_restarts_is_reached_again() {
    let mut o = overlay("geneve");
    let target = format!("{}:8080", o.ip("n2-a"));
    o.wait_answer("n1-a", &target);
    // The restarted switch has no flow, no group and a new br-int port without the node's
    // address: svcflow resyncs it, and the node (here the lab) puts its tunnel endpoint back.
    if let Err(e) = o.lab.restart_vswitchd("n2") {
        o.fail(&format!("restarting n2's ovs-vswitchd: {e}"));
    }
    o.wait_answer("n1-a", &target);
    let seen = o.spread("n1-a", &target, 5);
    assert_eq!(
        seen,
        BTreeMap::from([(("n2-a".to_string(), o.ip("n1-a")), 5)]),
        "n1-a -> n2-a after n2's restart"
    );
    o.wait_answer("n2-b", VIP);
    let seen = o.spread("n2-b", VIP, 20);
    let backends: Vec<&str> = seen.keys().map(|(b, _)| b.as_str()).collect();
    assert_eq!(
        backends,
        ["n2-a", "n3-a"],
        "from n2-b after its restart: {seen:?}"
    );
}
