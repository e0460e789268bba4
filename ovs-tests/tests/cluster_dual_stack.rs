//! IPv6 across nodes: a two-node dual-stack lab (each node an IPv6 pod CIDR besides its IPv4
//! one, each pod an address of each family with an IPv6 default route via its node's IPv6
//! virtual gateway; each node also an IPv6 underlay address), driven by one `svcflow run
//! --service-cidr6 …` over REST, with the geneve overlay and with the routed underlay
//! (`--encap none`). The overlay carries the IPv6 pods in IPv4 tunnels (tunnel endpoints are
//! the nodes' IPv4 addresses); the routed underlay's router routes each IPv6 pod CIDR via the
//! node's IPv6 address, for which the node's switch answers neighbour solicitations (Linux
//! has no IPv6 route via an IPv4 next hop).
//!
//! Each checks, with real TCP: a pod on n1 reaches a pod on n2 over IPv6 directly and back,
//! each seeing the other's own IPv6 address, and an IPv6 ClusterIP whose only endpoint is on
//! n2 is reached from n1 (the endpoint sees the client pod's address), next to an IPv4
//! ClusterIP on the same endpoint and a dual-stack service (REST's `cluster-ip-addresses`)
//! whose two cluster IPs reach the endpoint's address of their family. A third lab runs the
//! overlay over an IPv6-only underlay (`underlay.ipv6-only`): the same checks, through IPv6
//! tunnels.
//!
//! Over the overlay, a pod's IPv6 and IPv4 connections to the router (outside the cluster,
//! routing no pod CIDR) are masqueraded to its node's address of each family. Over the routed
//! underlay, each node answers the router's health-check probes of its IPv6 address (an
//! IPv6 service under `externalTrafficPolicy: Local`): 503 without a local endpoint, 200
//! with one.
//!
//! Each also traces (`svcflow trace`) a TCP probe from n1-a to the IPv6 cluster IP: seen by
//! n1's classifier and the service's flow, sent on towards n2 (by the tunnel, or the uplink
//! towards n2's IPv6 pod CIDR), taken in by n2 and output to n2-a, with the IPv6 NAT and the
//! endpoint (reg12..reg15, reg4) named; then typed refusals of a source of the wrong family,
//! and no trace flow left on either switch.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ovs_tests::lab::{Lab, LabOptions, PeerAnswer, Topology};
use ovs_tests::wait_for;
use serde_json::Value;

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

const SERVICE_CIDR6: &str = "fd00:10:96::/112";
const VIP6: &str = "[fd00:10:96::10]:80";
const VIP4: &str = "10.96.0.10:80";

fn topology(encap: &str) -> Topology {
    Topology::parse(&format!(
        r#"
[underlay]
kind = "routed"
subnet = "192.168.50.0/24"
encap = "{encap}"

[[nodes]]
name = "n1"
address = "192.168.50.11"
address6 = "fd00:50::11"
pod-cidr = "10.244.1.0/24"
pod-cidr6 = "fd00:10:244:1::/64"
pods = [
  {{ name = "n1-a", ip = "10.244.1.11", ip6 = "fd00:10:244:1::11" }},
  # IPv4 only: the trace says it has no IPv6 address to probe an IPv6 service from.
  {{ name = "n1-b", ip = "10.244.1.12" }},
]

[[nodes]]
name = "n2"
address = "192.168.50.12"
address6 = "fd00:50::12"
pod-cidr = "10.244.2.0/24"
pod-cidr6 = "fd00:10:244:2::/64"
pods = [{{ name = "n2-a", ip = "10.244.2.11", ip6 = "fd00:10:244:2::11" }}]

# One endpoint, on n2, behind a cluster IP of each family.
[[services]]
name = "web6"
cluster-ip = "fd00:10:96::10"
port = 80
target-port = 8080
endpoints = ["n2-a"]

[[services]]
name = "web"
cluster-ip = "10.96.0.10"
port = 80
target-port = 8080
endpoints = ["n2-a"]

# One dual-stack service (REST's `cluster-ip-addresses`) on the same endpoint.
[[services]]
name = "both"
cluster-ip = "10.96.0.20"
cluster-ip6 = "fd00:10:96::20"
port = 80
target-port = 8080
endpoints = ["n2-a"]
"#
    ))
    .unwrap()
}

struct DualStack {
    lab: Lab,
    _turn: MutexGuard<'static, ()>,
}

impl DualStack {
    fn up(encap: &str) -> DualStack {
        Self::up_with(topology(encap))
    }

    fn up_with(topology: Topology) -> DualStack {
        assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
        let turn = ONE_LAB_AT_A_TIME
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let options = LabOptions {
            daemon_args: vec!["--service-cidr6".into(), SERVICE_CIDR6.into()],
            ..LabOptions::default()
        };
        let lab = Lab::up(&topology, &options).unwrap_or_else(|e| panic!("lab: {e}"));
        DualStack { lab, _turn: turn }
    }

    fn fail(&self, what: &dyn std::fmt::Display) -> ! {
        panic!(
            "{what}\n{}\nsvcflow log tail:\n{}",
            self.lab.status(),
            self.lab.daemon_log_tail(60)
        );
    }

    fn ip6(&self, pod: &str) -> String {
        self.lab.pod(pod).unwrap().ip6().unwrap().to_string()
    }

    fn connect(&self, from: &str, target: &str, count: u32) -> Vec<PeerAnswer> {
        self.lab
            .connect_peer(from, target, count)
            .unwrap_or_else(|e| self.fail(&e))
    }

    /// Waits until `count` connections from `from` to `target` all reach `backend`, which
    /// sees source `source`; fails with the last answers otherwise.
    fn expect(&self, from: &str, target: &str, backend: &str, source: &str) {
        let want = Ok((backend.to_string(), source.to_string()));
        let mut last = Vec::new();
        let reached = wait_for(
            &format!("{from} to reach {backend} at {target}"),
            Duration::from_secs(20),
            || {
                last = self.connect(from, target, 5);
                last.iter().all(|a| *a == want).then_some(())
            },
        );
        if let Err(e) = reached {
            self.fail(&format!(
                "{e}: every connection from {from} to {target} should reach {backend} from \
                 {source}; the last five: {last:?}"
            ));
        }
    }

    /// `svcflow trace --node n1 --from FROM --to TO -o json` in the controller's namespace:
    /// the report, or the command's error.
    fn trace(&self, from: &str, to: &str) -> Result<Value, String> {
        let args = [
            "trace", "--node", "n1", "--from", from, "--to", to, "-o", "json",
        ];
        let out = self.lab.svcflow(&args).unwrap_or_else(|e| self.fail(&e));
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    }

    /// Traces n1-a to the IPv6 cluster IP (its endpoint on n2) and checks the path; `way`
    /// is how n1 sends it on (`(tunnel) to 192.168.50.12 (node n2)`, `(uplink) towards
    /// node n2`).
    fn check_trace(&self, way: &str) {
        let r = self
            .trace("default/n1-a", VIP6)
            .unwrap_or_else(|e| self.fail(&e));
        let path: Vec<String> = r["hops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                format!(
                    "{} {}",
                    h["node"].as_str().unwrap(),
                    h["role"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(
            path,
            [
                "n1 classifier",
                "n1 service",
                "n1 onward",
                "n2 arrived",
                "n2 output"
            ],
            "{r:#}"
        );
        assert_eq!(r["outcome"], "delivered", "{r:#}");
        let (a, b) = (self.ip6("n1-a"), self.ip6("n2-a"));
        assert_eq!(
            r["nat"],
            format!("dst {VIP6} -> [{b}]:8080").as_str(),
            "{r:#}"
        );
        let hop = |role: &str| -> &Value {
            r["hops"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["role"] == role)
                .unwrap()
        };
        assert!(r["probe"].as_str().unwrap().starts_with("tcp6,"), "{r:#}");
        assert!(
            hop("service")["note"]
                .as_str()
                .unwrap()
                .contains("default/web6:80/tcp"),
            "{r:#}"
        );
        let onward = hop("onward")["note"].as_str().unwrap();
        assert!(
            onward.contains(way)
                && onward.contains(&format!(
                    "endpoint [{b}]:8080 chosen by the group's bucket (reg12..reg15, reg4)"
                )),
            "{r:#}"
        );
        assert!(
            r["result"]
                .as_str()
                .unwrap()
                .contains("(pod default/n2-a) on node n2"),
            "{r:#}"
        );
        // The exit's packet is the translated one, as n2's switch reported it.
        let out = hop("output")["packet"].as_str().unwrap();
        assert!(
            out.starts_with("tcp6,") && out.contains(&format!("ipv6_src={a},ipv6_dst={b},")),
            "{r:#}"
        );
        // The text names the same path in ovs-ofctl terms.
        let args = [
            "trace",
            "--node",
            "n1",
            "--from",
            "default/n1-a",
            "--to",
            VIP6,
        ];
        let out = self.lab.svcflow(&args).unwrap_or_else(|e| self.fail(&e));
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("svcflow trace printed:\n{text}");
        assert!(
            text.contains(&format!("nat: dst {VIP6} -> [{b}]:8080"))
                && text.contains("n2 table=60 output: output to port"),
            "{text}"
        );
        // The same service over IPv4 still traces the same way.
        let r4 = self
            .trace("default/n1-a", VIP4)
            .unwrap_or_else(|e| self.fail(&e));
        assert_eq!(r4["outcome"], "delivered", "{r4:#}");
        assert_eq!(r4["hops"].as_array().unwrap().len(), 5, "{r4:#}");

        // Typed refusals: a source address of the other family, a pod without an address
        // of the destination's family, an IPv6 destination without brackets.
        let e = self.trace("10.244.1.11", VIP6).unwrap_err();
        assert!(e.contains("is an IPv4 address"), "{e}");
        let e = self.trace("default/n1-b", VIP6).unwrap_err();
        assert!(e.contains("has no IPv6 address"), "{e}");
        let e = self.trace("default/n1-a", "fd00:10:96::10:80").unwrap_err();
        assert!(e.contains("[ADDRESS]:PORT"), "{e}");

        // Nothing of the traces is left on either switch.
        for node in ["n1", "n2"] {
            let flows = self.lab.node(node).unwrap().dump_flows("br-int").unwrap();
            assert!(!flows.contains("cookie=0x5354"), "{node}:\n{flows}");
            assert!(!flows.contains("nw_tos="), "{node}:\n{flows}");
        }
    }

    /// web6 under `externalTrafficPolicy: Local` with a health-check node port: each node
    /// answers the router's probes of its IPv6 address through its switch, though svcflow
    /// runs on neither: n1 (no endpoint) 503, n2 (web6's one) 200.
    fn check_health_checks6(&self) {
        let web6 = self.lab.topology().service("web6").unwrap().clone();
        let mut body: Value = serde_json::from_str(&web6.rest_body()).unwrap();
        body["service:services"][0]["service:external-traffic-policy"] = "Local".into();
        body["service:services"][0]["service:health-check-node-port"] = 32061.into();
        if let Err(e) = self.lab.rest("PUT", &web6.rest_path(), &body.to_string()) {
            self.fail(&format!("PUT web6: {e}"));
        }
        for (node, status, count) in [
            ("n1", "HTTP/1.1 503 Service Unavailable", 0),
            ("n2", "HTTP/1.1 200 OK", 1),
        ] {
            let address = self.lab.node_spec(node).unwrap().address6.unwrap();
            let url = format!("http://[{address}]:32061/healthz");
            let answer = wait_for(
                &format!("{node} to answer its health check over IPv6"),
                Duration::from_secs(10),
                || {
                    let out = self
                        .lab
                        .exec(
                            "router",
                            &["curl", "-g", "-s", "-i", "--max-time", "2", &url],
                        )
                        .ok()?;
                    let text = String::from_utf8_lossy(&out.stdout).into_owned();
                    text.starts_with(status).then_some(text)
                },
            );
            let answer = answer.unwrap_or_else(|e| self.fail(&e));
            let want = format!(
                r#"{{"service":{{"namespace":"default","name":"web6"}},"localEndpoints":{count},"serviceProxyHealthy":true}}"#
            );
            assert!(answer.ends_with(&want), "{node}: {answer}");
        }
    }

    /// The router's IPv6 routes.
    fn router_routes6(&self) -> String {
        let out = self
            .lab
            .exec("router", &["ip", "-6", "route"])
            .unwrap_or_else(|e| self.fail(&e));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn check(&self) {
        let (a, b) = (self.ip6("n1-a"), self.ip6("n2-a"));
        // Pod to pod over IPv6, both ways, each seeing the other's own address.
        self.expect("n1-a", &format!("[{b}]:8080"), "n2-a", &a);
        self.expect("n2-a", &format!("[{a}]:8080"), "n1-a", &b);
        // The IPv6 cluster IP, its only endpoint on the other node: the endpoint sees the
        // client pod (no masquerade for pod traffic).
        self.expect("n1-a", VIP6, "n2-a", &a);
        // The IPv4 cluster IP on the same endpoint, as before.
        let a4 = self.lab.pod("n1-a").unwrap().ip().to_string();
        self.expect("n1-a", VIP4, "n2-a", &a4);
        // One dual-stack service: each of its cluster IPs reaches the endpoint's address of
        // its family.
        self.expect("n1-a", "[fd00:10:96::20]:80", "n2-a", &a);
        self.expect("n1-a", "10.96.0.20:80", "n2-a", &a4);
        // Many connections, not just the first ones.
        let answers = self.connect("n1-a", VIP6, 20);
        let want = Ok(("n2-a".to_string(), a.clone()));
        assert!(
            answers.iter().all(|x| *x == want),
            "20 connections to {VIP6}: {answers:?}\n{}",
            self.lab.status()
        );
    }
}

#[test]
fn ipv6_pods_and_an_ipv6_cluster_ip_work_across_nodes_over_the_geneve_overlay() {
    let c = DualStack::up("geneve");
    // The premise: the router routes no IPv6 pod CIDR; only the tunnel carries them.
    let routes = c.router_routes6();
    assert!(
        !routes.contains("fd00:10:244"),
        "the router routes IPv6 pod CIDRs:\n{routes}"
    );
    c.check();
    c.check_trace("(tunnel) to 192.168.50.12 (node n2)");
    // A pod's connections out of the cluster, to the router (a host outside the cluster
    // that routes no pod CIDR), are masqueraded to its node's address of their family.
    let router6 = "fd00:50::1";
    c.lab
        .exec("router", &["ip", "-6", "addr", "add", router6, "dev", "lo"])
        .unwrap_or_else(|e| c.fail(&e));
    let _server = c
        .lab
        .serve("router", "router", &["tcp:9003"])
        .unwrap_or_else(|e| c.fail(&e));
    c.expect(
        "n1-a",
        &format!("[{router6}]:9003"),
        "router",
        "fd00:50::11",
    );
    c.expect("n1-a", "192.168.50.1:9003", "router", "192.168.50.11");
}

#[test]
fn ipv6_pods_and_an_ipv6_cluster_ip_work_across_nodes_over_the_routed_underlay() {
    let c = DualStack::up("none");
    // The premise: the router routes each node's IPv6 pod CIDR to its IPv4 address.
    let routes = c.router_routes6();
    for (cidr, node) in [
        ("fd00:10:244:1::/64", "fd00:50::11"),
        ("fd00:10:244:2::/64", "fd00:50::12"),
    ] {
        assert!(
            routes
                .lines()
                .any(|l| l.starts_with(cidr) && l.contains(&format!("via {node}"))),
            "the router should route {cidr} via {node}:\n{routes}"
        );
    }
    c.check();
    c.check_trace("(uplink) towards node n2");
    c.check_health_checks6();
}

/// The overlay over an IPv6 underlay (`underlay.ipv6-only`): the nodes are posted with their
/// IPv6 addresses alone, so each node's tunnel endpoint is its IPv6 address on `br-int` (as
/// `svcflow node-setup --address fd00:50::11/64` prints it) and the other nodes' pod CIDRs
/// of both families go into the tunnel with `tun_ipv6_dst` set. The router routes no pod
/// CIDR and answers neighbour solicitations for the nodes' addresses (proxy NDP), so only
/// the IPv6 tunnel can carry the pods' packets between the nodes.
#[test]
fn pods_of_both_families_work_across_nodes_over_an_ipv6_underlay() {
    let mut t = topology("geneve");
    t.underlay.ipv6_only = true;
    let c = DualStack::up_with(t);
    let routes = c.router_routes6();
    assert!(
        !routes.contains("fd00:10:244"),
        "the router routes IPv6 pod CIDRs:\n{routes}"
    );
    // The premise: n1 reaches n2 by n2's IPv6 address only.
    let flows = c.lab.node("n1").unwrap().dump_flows("br-int").unwrap();
    assert!(
        flows.contains("set_field:fd00:50::12->tun_ipv6_dst") && !flows.contains("->tun_dst"),
        "n1's flows should set tun_ipv6_dst to n2's address and never tun_dst:\n{flows}"
    );
    c.check();
    c.check_trace("(tunnel) to fd00:50::12 (node n2)");
    // n1's datapath resolved its IPv6 next hop from a neighbour advertisement (snooped as
    // it went to LOCAL), and it encapsulates over IPv6: its tunnel's outer packets.
    let neighbours = c
        .lab
        .node("n1")
        .unwrap()
        .appctl(&["tnl/neigh/show"])
        .unwrap_or_else(|e| c.fail(&e));
    assert!(
        neighbours.contains("fd00:50::12"),
        "n1 should have learned n2's address's next hop:\n{neighbours}"
    );
}

/// A mixed underlay: n2 is IPv6-only (posted with its IPv6 address alone) among dual-stack
/// nodes n1 and n3, whose hosts hold both their addresses on `br-int` (`svcflow node-setup
/// --address` once per family). Each pair of nodes tunnels over a family both have: n1 and
/// n3 over IPv4, either of them and n2 over IPv6. Pods of both families reach each other
/// across every pair, and the services work from n1 as on the other underlays.
#[test]
fn an_ipv6_only_node_among_dual_stack_nodes_is_reached_over_ipv6_tunnels() {
    let mut t = topology("geneve");
    t.nodes[1].ipv6_only = true;
    let mut n3 = t.nodes[1].clone();
    n3.name = "n3".into();
    n3.ipv6_only = false;
    n3.address = "192.168.50.13".parse().unwrap();
    n3.address6 = Some("fd00:50::13".parse().unwrap());
    n3.pod_cidr = "10.244.3.0/24".parse().unwrap();
    n3.pod_cidr6 = Some("fd00:10:244:3::/64".parse().unwrap());
    n3.pods[0].name = "n3-a".into();
    n3.pods[0].ip = "10.244.3.11".parse().unwrap();
    n3.pods[0].ip6 = Some("fd00:10:244:3::11".parse().unwrap());
    t.nodes.push(n3);
    let c = DualStack::up_with(t);
    let routes = c.router_routes6();
    assert!(
        !routes.contains("fd00:10:244"),
        "the router routes IPv6 pod CIDRs:\n{routes}"
    );
    // The premise: each pair tunnels over the family both have.
    let flows = |node: &str| c.lab.node(node).unwrap().dump_flows("br-int").unwrap();
    let n1 = flows("n1");
    for want in [
        "set_field:fd00:50::12->tun_ipv6_dst",
        "set_field:192.168.50.13->tun_dst",
    ] {
        assert!(n1.contains(want), "n1's flows should {want}:\n{n1}");
    }
    let n2 = flows("n2");
    for want in [
        "set_field:fd00:50::11->tun_ipv6_dst",
        "set_field:fd00:50::13->tun_ipv6_dst",
    ] {
        assert!(n2.contains(want), "n2's flows should {want}:\n{n2}");
    }
    assert!(!n2.contains("->tun_dst"), "n2 has no IPv4 endpoint:\n{n2}");
    assert!(
        !c.lab.daemon_log_tail(400).contains("no tunnel to it"),
        "a conflict:\n{}",
        c.lab.daemon_log_tail(400)
    );
    c.check();
    c.check_trace("(tunnel) to fd00:50::12 (node n2)");
    // Every pair, both families, each side seeing the other's own address.
    let pods = ["n1-a", "n2-a", "n3-a"];
    for from in pods {
        for to in pods.iter().filter(|p| **p != from) {
            let (a4, b4) = (
                c.lab.pod(from).unwrap().ip().to_string(),
                c.lab.pod(to).unwrap().ip().to_string(),
            );
            c.expect(from, &format!("{b4}:8080"), to, &a4);
            c.expect(from, &format!("[{}]:8080", c.ip6(to)), to, &c.ip6(from));
        }
    }
}
