//! A dual-stack Service end to end, driven only through the fake API server: `svcflow run
//! --kubeconfig` on a dual-stack sandbox node (`KubeNode::start_dual_stack`: Nodes with an
//! InternalIP and a pod CIDR of each family, pods with both addresses in `status.podIPs`)
//! serves a `RequireDualStack` NodePort Service with a cluster IP of each family and one
//! EndpointSlice per address type. Real traffic checks that:
//!
//! - TCP from a pod to the IPv4 and to the IPv6 cluster IP reaches both endpoints, each
//!   connection over its own family (the endpoint sees the pod's IPv6 source on the IPv6
//!   cluster IP: it landed on an IPv6 endpoint address);
//! - the node port answers from the external host on the node's IPv6 InternalIP (and on its
//!   IPv4 one), the local endpoints seeing the client's own address;
//! - an update of the IPv6 slice alone (one endpoint removed) changes the IPv6 cluster IP and
//!   node port only: IPv4 keeps both endpoints;
//! - an IPv6 endpoint on the other node (an address of the external host, served as `n2`):
//!   a pod reaches it over TCP and UDP through the cluster IP with its own source, and the
//!   node port from outside reaches it masqueraded to the node's IPv6 InternalIP, so that
//!   the reply comes back through the node, as for IPv4.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::BTreeMap;

use ovs_tests::kube::{
    Conditions, EXT_IP, EXT_IP6, KubeNode, NODE, NODE_IP, NODE_IP6, POD_CIDR6, REMOTE_NODE,
    endpoint,
};
use ovs_tests::kube::{service, slice, slice6};
use ovs_tests::{Host, tally};
use serde_json::json;

const VIP4: &str = "10.96.0.80";
const VIP6: &str = "fd00:10:96::80";
const NODE_PORT: u16 = 30080;

fn ports() -> serde_json::Value {
    json!([{"name": "http", "protocol": "TCP", "port": 8080}])
}

/// `count` TCP connections from `host` to `target` with `--peer`: the tally of `NAME@SOURCE`.
fn peers(k: &KubeNode, host: &Host, target: &str, count: u32) -> BTreeMap<String, usize> {
    tally(&k.connect(
        host,
        "tcp",
        target,
        count,
        &["--peer", "--timeout-ms", "2000"],
    ))
}

/// Whether every connection in `counts` reached one of `backends`, seeing source `source`,
/// and each backend got at least one.
fn spread_over(counts: &BTreeMap<String, usize>, backends: &[&str], source: &str) -> bool {
    let allowed: Vec<String> = backends.iter().map(|b| format!("{b}@{source}")).collect();
    !counts.is_empty()
        && counts.keys().all(|k| allowed.contains(k))
        && allowed.iter().all(|a| counts.contains_key(a))
}

#[test]
fn a_dual_stack_service_serves_each_family_from_its_own_slice() {
    let mut k = KubeNode::start_dual_stack();
    let pa = k.add_dual_stack_pod("pa", "10.244.0.11", "fd00:10:244::11", 11);
    let pb = k.add_dual_stack_pod("pb", "10.244.0.12", "fd00:10:244::12", 12);
    let pc = k.add_dual_stack_pod("pc", "10.244.0.13", "fd00:10:244::13", 13);
    // `svcflow-probe serve` binds [::]: one server answers both families.
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        pb.serve("pb", &["tcp:8080"]).unwrap(),
    ];
    k.put(&service(
        "dual",
        json!({"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
               "ipFamilies": ["IPv4", "IPv6"],
               "clusterIP": VIP4, "clusterIPs": [VIP4, VIP6],
               "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080,
                          "nodePort": NODE_PORT}]}),
        None,
    ));
    k.put(&slice(
        "dual",
        "dual-v4",
        ports(),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::READY),
            endpoint("10.244.0.12", NODE, Conditions::READY),
        ],
    ));
    let both6 = vec![
        endpoint("fd00:10:244::11", NODE, Conditions::READY),
        endpoint("fd00:10:244::12", NODE, Conditions::READY),
    ];
    k.put(&slice6("dual", "dual-v6", ports(), both6));

    let vip4 = format!("{VIP4}:80");
    let vip6 = format!("[{VIP6}]:80");
    let (pc4, pc6) = (pc.ip().to_string(), pc.ip6().unwrap().to_string());
    k.wait("the IPv6 cluster IP to reach both endpoints", || {
        let counts = peers(&k, &pc, &vip6, 10);
        spread_over(&counts, &["pa", "pb"], &pc6).then_some(())
    });

    // Each family's cluster IP: both endpoints, over that family (the endpoint sees the
    // pod's address of the family, so an IPv6 connection was DNATed to an IPv6 endpoint).
    let v6 = peers(&k, &pc, &vip6, 20);
    assert!(
        spread_over(&v6, &["pa", "pb"], &pc6) && v6.values().sum::<usize>() == 20,
        "20 connections to {vip6} should reach pa and pb from {pc6}: {v6:?}\n{}",
        k.daemon.log()
    );
    let v4 = peers(&k, &pc, &vip4, 20);
    assert!(
        spread_over(&v4, &["pa", "pb"], &pc4) && v4.values().sum::<usize>() == 20,
        "20 connections to {vip4} should reach pa and pb from {pc4}: {v4:?}\n{}",
        k.daemon.log()
    );

    // The node port on each InternalIP, from outside: local endpoints, which see the client.
    let ext = k.ext.clone();
    let np6 = format!("[{NODE_IP6}]:{NODE_PORT}");
    let np4 = format!("{NODE_IP}:{NODE_PORT}");
    let outside6 = k.wait("the IPv6 node port to answer from outside", || {
        let counts = peers(&k, &ext, &np6, 20);
        spread_over(&counts, &["pa", "pb"], EXT_IP6).then_some(counts)
    });
    assert_eq!(outside6.values().sum::<usize>(), 20, "{outside6:?}");
    let outside4 = peers(&k, &ext, &np4, 20);
    assert!(
        spread_over(&outside4, &["pa", "pb"], EXT_IP),
        "the IPv4 node port {np4} from outside: {outside4:?}\n{}",
        k.daemon.log()
    );

    // pb leaves the IPv6 slice only: IPv6 goes to pa alone, IPv4 still to both.
    k.put(&slice6(
        "dual",
        "dual-v6",
        ports(),
        vec![endpoint("fd00:10:244::11", NODE, Conditions::READY)],
    ));
    k.wait("the IPv6 cluster IP to reach pa alone", || {
        let counts = peers(&k, &pc, &vip6, 10);
        (counts.get(&format!("pa@{pc6}")) == Some(&10)).then_some(())
    });
    let v6 = peers(&k, &pc, &vip6, 20);
    assert_eq!(
        v6.get(&format!("pa@{pc6}")),
        Some(&20),
        "after the IPv6 slice update: {v6:?}\n{}",
        k.daemon.log()
    );
    let outside6 = peers(&k, &ext, &np6, 20);
    assert_eq!(
        outside6.get(&format!("pa@{EXT_IP6}")),
        Some(&20),
        "the IPv6 node port after the IPv6 slice update: {outside6:?}\n{}",
        k.daemon.log()
    );
    let v4 = peers(&k, &pc, &vip4, 20);
    assert!(
        spread_over(&v4, &["pa", "pb"], &pc4),
        "the IPv4 slice did not change, so IPv4 should still reach pa and pb: {v4:?}\n{}",
        k.daemon.log()
    );
    let outside4 = peers(&k, &ext, &np4, 20);
    assert!(
        spread_over(&outside4, &["pa", "pb"], EXT_IP),
        "the IPv4 node port after the IPv6 slice update: {outside4:?}\n{}",
        k.daemon.log()
    );
}

#[test]
fn an_ipv6_endpoint_on_another_node_is_reached_and_node_port_traffic_to_it_is_masqueraded() {
    const REMOTE_POD6: &str = "fd00:10:244:1::21";
    const VIP: &str = "fd00:10:96::81";
    let mut k = KubeNode::start_dual_stack();
    let pc = k.add_dual_stack_pod("pc", "10.244.0.13", "fd00:10:244::13", 13);
    k.add_remote_pod_ip(REMOTE_POD6);
    let ext = k.ext.clone();
    let _server = ext.serve(REMOTE_NODE, &["tcp:8080", "udp:5353"]).unwrap();
    k.put(&service(
        "remote6",
        json!({"type": "NodePort", "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"],
               "clusterIP": VIP, "clusterIPs": [VIP],
               "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080,
                          "nodePort": 30081},
                         {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353}]}),
        None,
    ));
    k.put(&slice6(
        "remote6",
        "remote6-1",
        json!([{"name": "http", "protocol": "TCP", "port": 8080},
               {"name": "dns", "protocol": "UDP", "port": 5353}]),
        vec![endpoint(REMOTE_POD6, REMOTE_NODE, Conditions::READY)],
    ));
    let pc6 = pc.ip6().unwrap().to_string();
    let from_pod = format!("{REMOTE_NODE}@{pc6}");
    let vip = format!("[{VIP}]:80");
    k.wait("the IPv6 cluster IP to reach the endpoint on n2", || {
        (peers(&k, &pc, &vip, 5).get(&from_pod) == Some(&5)).then_some(())
    });
    let tcp = peers(&k, &pc, &vip, 20);
    assert_eq!(
        tcp.get(&from_pod),
        Some(&20),
        "TCP from a pod to {vip}: {tcp:?}\n{}",
        k.daemon.log()
    );
    // `svcflow-probe serve` answers UDP from the address its route picks, not from the one
    // it was asked on: make n2's pod address the source of what `ext` sends to this node's
    // pods, as the pod itself would answer (else the reply, from `ext`'s own address, matches
    // no connection and never reaches the client; IPv4 would be no different).
    ext.run(&[
        "ip",
        "-6",
        "route",
        "add",
        POD_CIDR6,
        "via",
        NODE_IP6,
        "dev",
        "eth0",
        "src",
        REMOTE_POD6,
    ])
    .unwrap();
    let udp = tally(&k.connect(&pc, "udp", &format!("[{VIP}]:53"), 5, &["--peer"]));
    assert_eq!(
        udp.get(&from_pod),
        Some(&5),
        "UDP from a pod to [{VIP}]:53: {udp:?}\n{}",
        k.daemon.log()
    );
    // From outside, to the node port on the node's IPv6 InternalIP: the endpoint is on
    // another node, so the connection is SNATed to that address (its replies must come back
    // through this node to be un-NATed).
    let node_port = format!("[{NODE_IP6}]:30081");
    let outside = peers(&k, &ext, &node_port, 10);
    assert_eq!(
        outside.get(&format!("{REMOTE_NODE}@{NODE_IP6}")),
        Some(&10),
        "from outside to {node_port}: {outside:?}\n{}",
        k.daemon.log()
    );
}
