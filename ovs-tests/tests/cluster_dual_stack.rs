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
//! ClusterIP on the same endpoint.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ovs_tests::lab::{Lab, LabOptions, PeerAnswer, Topology};
use ovs_tests::wait_for;

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
pods = [{{ name = "n1-a", ip = "10.244.1.11", ip6 = "fd00:10:244:1::11" }}]

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
        assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
        let turn = ONE_LAB_AT_A_TIME
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let options = LabOptions {
            daemon_args: vec!["--service-cidr6".into(), SERVICE_CIDR6.into()],
            ..LabOptions::default()
        };
        let lab = Lab::up(&topology(encap), &options).unwrap_or_else(|e| panic!("lab: {e}"));
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
}
