//! Kubernetes Service semantics end to end, driven only through the fake API server: each
//! test runs `svcflow run --kubeconfig` on a sandbox node (`ovs_tests::kube`), publishes
//! Services, EndpointSlices, Nodes and Pods as Kubernetes JSON, and sends real traffic from
//! pods and from an external host on the uplink:
//!
//! - LoadBalancer ingress IPs and `spec.externalIPs` reach their endpoints from outside, and an
//!   ingress IP that moves stops answering at its old address (`ipMode: Proxy` never does);
//! - a multi-port Service sends each port (TCP and UDP on one port number, a named target port
//!   that resolves to a different container port per pod) to the right endpoint port;
//! - `externalTrafficPolicy: Local` sends node-port and LB traffic only to this node's
//!   endpoints, with the client's own source address, and refuses it when none is local;
//! - `internalTrafficPolicy: Local` does the same for cluster-IP traffic;
//! - with no ready endpoint, serving-and-terminating endpoints take the traffic, and a ready
//!   endpoint that appears takes every new connection while established ones stay.
//!
//! The other node's endpoints are addresses of the external host (`n2`'s pods), answered by
//! a server named `n2`; every test checks that they are reachable where the policy allows it,
//! so that "only local endpoints answered" cannot come from a remote endpoint being dead.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::time::Duration;

use ovs_tests::kube::{
    Conditions, EXT_IP, KubeNode, NODE, NODE_IP, REMOTE_NODE, endpoint, peer, service,
};
use ovs_tests::{Attempt, tally};
use serde_json::json;

/// A pod of the other node, served by the external host as `n2`.
const REMOTE_POD: &str = "10.244.1.21";

fn tcp_http(port: u16) -> serde_json::Value {
    json!([{"name": "http", "protocol": "TCP", "port": port}])
}

/// Whether every attempt succeeded, at a backend in `allowed`.
fn only(counts: &BTreeMap<String, usize>, allowed: &[&str]) -> bool {
    !counts.is_empty() && counts.keys().all(|k| allowed.contains(&k.as_str()))
}

/// Whether every attempt failed.
fn all_failed(attempts: &[Attempt]) -> bool {
    !attempts.is_empty() && attempts.iter().all(Result::is_err)
}

#[test]
fn load_balancer_ingress_and_external_ips_reach_the_endpoints_from_outside() {
    let mut k = KubeNode::start();
    let pa = k.add_pod("pa", "10.244.0.11", 11);
    let pb = k.add_pod("pb", "10.244.0.12", 12);
    let _servers = [
        pa.serve("pa", &["tcp:8080", "udp:5353"]).unwrap(),
        pb.serve("pb", &["tcp:8080", "udp:5353"]).unwrap(),
    ];
    let lb_ports = json!([
        {"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30030},
        {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353, "nodePort": 30053},
    ]);
    let lb_spec = json!({"type": "LoadBalancer", "clusterIP": "10.96.0.30", "ports": lb_ports});
    // 192.168.50.102 is handled by the load balancer itself (`ipMode: Proxy`): kube-proxy
    // leaves such IPs alone, and so must svcflow.
    let ingress = |ip: &str| {
        json!({"loadBalancer": {"ingress": [{"ip": ip, "ipMode": "VIP"},
                                            {"ip": "192.168.50.102", "ipMode": "Proxy"}]}})
    };
    k.put(&service(
        "lb",
        lb_spec.clone(),
        Some(ingress("192.168.50.100")),
    ));
    k.put_slice(
        "lb",
        "lb-1",
        json!([{"name": "http", "protocol": "TCP", "port": 8080},
               {"name": "dns", "protocol": "UDP", "port": 5353}]),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::READY),
            endpoint("10.244.0.12", NODE, Conditions::READY),
        ],
    );
    // externalIPs on a plain ClusterIP Service, over pb alone.
    k.put(&service(
        "ext-ips",
        json!({"clusterIP": "10.96.0.31", "externalIPs": ["192.168.50.101"],
               "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
        None,
    ));
    k.put_slice(
        "ext-ips",
        "ext-ips-1",
        tcp_http(8080),
        vec![endpoint("10.244.0.12", NODE, Conditions::READY)],
    );

    let ext = k.ext.clone();
    k.wait("the LB IP to answer from outside", || {
        let attempt = k.connect(
            &ext,
            "tcp",
            "192.168.50.100:80",
            1,
            &["--timeout-ms", "500"],
        );
        attempt.first()?.as_ref().ok().cloned()
    });
    let lb = tally(&k.connect(&ext, "tcp", "192.168.50.100:80", 20, &[]));
    assert!(
        only(&lb, &["pa", "pb"]) && lb.len() == 2 && lb.values().sum::<usize>() == 20,
        "20 TCP connections to the LB IP should reach both endpoints: {lb:?}\n{}",
        k.daemon.log()
    );
    let lb_udp = tally(&k.connect(
        &ext,
        "udp",
        "192.168.50.100:53",
        5,
        &["--timeout-ms", "1000"],
    ));
    assert!(
        only(&lb_udp, &["pa", "pb"]) && lb_udp.values().sum::<usize>() == 5,
        "UDP to the LB IP should reach the endpoints: {lb_udp:?}\n{}",
        k.daemon.log()
    );
    let external = k.wait("the external IP to answer from outside", || {
        let counts = tally(&k.connect(
            &ext,
            "tcp",
            "192.168.50.101:80",
            5,
            &["--timeout-ms", "1000"],
        ));
        (counts.get("pb") == Some(&5)).then_some(counts)
    });
    assert_eq!(external.get("pb"), Some(&5), "{external:?}");
    let proxy = k.connect(
        &ext,
        "tcp",
        "192.168.50.102:80",
        2,
        &["--timeout-ms", "500"],
    );
    assert!(
        all_failed(&proxy),
        "an `ipMode: Proxy` ingress IP must not be served by the node: {proxy:?}"
    );

    // The load balancer moves to another IP: the new one answers, the old one stops.
    k.put(&service("lb", lb_spec, Some(ingress("192.168.50.103"))));
    k.wait("the new LB IP to answer", || {
        let counts = tally(&k.connect(
            &ext,
            "tcp",
            "192.168.50.103:80",
            5,
            &["--timeout-ms", "500"],
        ));
        (only(&counts, &["pa", "pb"]) && counts.values().sum::<usize>() == 5).then_some(())
    });
    k.wait("the old LB IP to stop answering", || {
        let old = k.connect(
            &ext,
            "tcp",
            "192.168.50.100:80",
            2,
            &["--timeout-ms", "500"],
        );
        all_failed(&old).then_some(())
    });
    // The external IP is unaffected.
    let external = tally(&k.connect(&ext, "tcp", "192.168.50.101:80", 5, &[]));
    assert_eq!(external.get("pb"), Some(&5), "{external:?}");
}

#[test]
fn a_multi_port_service_sends_each_port_to_its_own_target_port() {
    let mut k = KubeNode::start();
    let pa = k.add_pod("pa", "10.244.0.11", 11);
    let pb = k.add_pod("pb", "10.244.0.12", 12);
    let pc = k.add_pod("pc", "10.244.0.13", 13);
    // The named target port `web` is 8080 in pa and 8081 in pb; each pod also listens on the
    // other's port, as `…-wrong`, so that a port resolved for the wrong pod shows.
    let _servers = [
        pa.serve("pa-http", &["tcp:8080"]).unwrap(),
        pa.serve("pa-wrong", &["tcp:8081"]).unwrap(),
        pa.serve("pa-admin", &["tcp:9090"]).unwrap(),
        pa.serve("pa-dns", &["udp:5353"]).unwrap(),
        pb.serve("pb-http", &["tcp:8081"]).unwrap(),
        pb.serve("pb-wrong", &["tcp:8080"]).unwrap(),
        pb.serve("pb-admin", &["tcp:9090"]).unwrap(),
        pb.serve("pb-dns", &["udp:5353"]).unwrap(),
    ];
    // Port 81 twice: TCP to 9090 (numeric) and UDP to 5353.
    k.put(&service(
        "multi",
        json!({"clusterIP": "10.96.0.40", "ports": [
            {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "web"},
            {"name": "admin", "protocol": "TCP", "port": 81, "targetPort": 9090},
            {"name": "dns", "protocol": "UDP", "port": 81, "targetPort": 5353},
        ]}),
        None,
    ));
    // Pods whose named port differs get separate slices, as the EndpointSlice controller
    // makes them.
    for (slice, ip, web) in [
        ("multi-a", "10.244.0.11", 8080),
        ("multi-b", "10.244.0.12", 8081),
    ] {
        k.put_slice(
            "multi",
            slice,
            json!([{"name": "http", "protocol": "TCP", "port": web},
                   {"name": "admin", "protocol": "TCP", "port": 9090},
                   {"name": "dns", "protocol": "UDP", "port": 5353}]),
            vec![endpoint(ip, NODE, Conditions::READY)],
        );
    }

    // Both backends answering, and nothing else: a failed attempt while the second slice
    // is on its way must not count as the second backend.
    k.wait("both endpoints of port 80", || {
        let counts = tally(&k.connect(&pc, "tcp", "10.96.0.40:80", 10, &["--timeout-ms", "1000"]));
        (only(&counts, &["pa-http", "pb-http"]) && counts.len() == 2).then_some(())
    });
    let http = tally(&k.connect(&pc, "tcp", "10.96.0.40:80", 20, &[]));
    assert!(
        only(&http, &["pa-http", "pb-http"])
            && http.len() == 2
            && http.values().sum::<usize>() == 20,
        "port 80 (targetPort `web`) should reach pa:8080 and pb:8081: {http:?}\n{}",
        k.daemon.log()
    );
    let admin = tally(&k.connect(&pc, "tcp", "10.96.0.40:81", 20, &[]));
    assert!(
        only(&admin, &["pa-admin", "pb-admin"])
            && admin.len() == 2
            && admin.values().sum::<usize>() == 20,
        "TCP port 81 (targetPort 9090) should reach both pods' 9090: {admin:?}\n{}",
        k.daemon.log()
    );
    // (One probe keeps one source port, so its datagrams all reach one endpoint.)
    let dns = tally(&k.connect(&pc, "udp", "10.96.0.40:81", 5, &["--timeout-ms", "1000"]));
    assert!(
        only(&dns, &["pa-dns", "pb-dns"]) && dns.values().sum::<usize>() == 5,
        "UDP port 81 (targetPort 5353) should reach the pods' 5353: {dns:?}\n{}",
        k.daemon.log()
    );
    // Port 82 is no port of the service.
    let none = k.connect(&pc, "tcp", "10.96.0.40:82", 1, &["--timeout-ms", "500"]);
    assert!(all_failed(&none), "{none:?}");
}

#[test]
fn external_traffic_policy_local_keeps_external_traffic_on_the_node_with_its_source() {
    let mut k = KubeNode::start();
    let pa = k.add_pod("pa", "10.244.0.11", 11);
    let pc = k.add_pod("pc", "10.244.0.13", 13);
    k.add_remote_pod_ip(REMOTE_POD);
    let ext = k.ext.clone();
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        ext.serve(REMOTE_NODE, &["tcp:8080"]).unwrap(),
    ];
    k.put(&service(
        "etp",
        json!({"type": "LoadBalancer", "clusterIP": "10.96.0.50",
               "externalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30050}]}),
        Some(json!({"loadBalancer": {"ingress": [{"ip": "192.168.50.110"}]}})),
    ));
    let both = vec![
        endpoint("10.244.0.11", NODE, Conditions::READY),
        endpoint(REMOTE_POD, REMOTE_NODE, Conditions::READY),
    ];
    k.put_slice("etp", "etp-1", tcp_http(8080), both);

    // The cluster IP (internalTrafficPolicy Cluster) reaches both endpoints: the remote one
    // is alive and reachable from this node.
    k.wait("the cluster IP to reach pa and n2", || {
        let counts = tally(&k.connect(&pc, "tcp", "10.96.0.50:80", 10, &["--timeout-ms", "1000"]));
        (counts.contains_key("pa") && counts.contains_key(REMOTE_NODE)).then_some(())
    });
    // From outside, the node port and the LB IP reach only pa, which sees the client itself.
    let client = format!("pa@{EXT_IP}");
    for target in [format!("{NODE_IP}:30050"), "192.168.50.110:80".to_string()] {
        let counts = tally(&k.connect(&ext, "tcp", &target, 20, &["--peer"]));
        assert_eq!(
            counts.get(&client),
            Some(&20),
            "externalTrafficPolicy Local: every connection from outside to {target} should \
             reach the local endpoint pa, from the client's own address {EXT_IP}: \
             {counts:?}\n{}",
            k.daemon.log()
        );
    }
    // A pod's connections to the cluster IP keep their source too.
    let from_pod = k.connect(&pc, "tcp", "10.96.0.50:80", 10, &["--peer"]);
    for attempt in &from_pod {
        let answer = attempt.as_ref().unwrap();
        assert_eq!(peer(answer).1, pc.ip(), "{from_pod:?}");
    }

    // pa stops being ready: with no local endpoint, external traffic is refused, while the
    // cluster IP still reaches n2.
    k.put_slice(
        "etp",
        "etp-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::NOT_READY),
            endpoint(REMOTE_POD, REMOTE_NODE, Conditions::READY),
        ],
    );
    k.wait("the node port to refuse without a local endpoint", || {
        let attempts = k.connect(
            &ext,
            "tcp",
            &format!("{NODE_IP}:30050"),
            3,
            &["--timeout-ms", "1000"],
        );
        all_failed(&attempts).then_some(())
    });
    let lb = k.connect(
        &ext,
        "tcp",
        "192.168.50.110:80",
        3,
        &["--timeout-ms", "1000"],
    );
    assert!(
        all_failed(&lb),
        "the LB IP must not reach the remote endpoint: {lb:?}"
    );
    let cluster = tally(&k.connect(&pc, "tcp", "10.96.0.50:80", 10, &[]));
    assert_eq!(
        cluster.get(REMOTE_NODE),
        Some(&10),
        "the cluster IP should still reach n2: {cluster:?}\n{}",
        k.daemon.log()
    );
    // The policy is for traffic from outside: a pod reaching the node port or the LB IP is
    // in-cluster traffic and takes the cluster-wide endpoints, as with kube-proxy.
    for target in [format!("{NODE_IP}:30050"), "192.168.50.110:80".to_string()] {
        let inside = tally(&k.connect(&pc, "tcp", &target, 5, &["--timeout-ms", "1000"]));
        assert_eq!(
            inside.get(REMOTE_NODE),
            Some(&5),
            "a pod's connections to {target} should reach n2: {inside:?}\n{}",
            k.daemon.log()
        );
    }
}

#[test]
fn internal_traffic_policy_local_keeps_cluster_ip_traffic_on_the_node() {
    let mut k = KubeNode::start();
    let pa = k.add_pod("pa", "10.244.0.11", 11);
    let pb = k.add_pod("pb", "10.244.0.12", 12);
    let pc = k.add_pod("pc", "10.244.0.13", 13);
    k.add_remote_pod_ip(REMOTE_POD);
    let ext = k.ext.clone();
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        pb.serve("pb", &["tcp:8080"]).unwrap(),
        ext.serve(REMOTE_NODE, &["tcp:8080"]).unwrap(),
    ];
    k.put(&service(
        "itp",
        json!({"type": "NodePort", "clusterIP": "10.96.0.60",
               "internalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30060}]}),
        None,
    ));
    k.put_slice(
        "itp",
        "itp-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::READY),
            endpoint("10.244.0.12", NODE, Conditions::READY),
            endpoint(REMOTE_POD, REMOTE_NODE, Conditions::READY),
        ],
    );
    let node_port = format!("{NODE_IP}:30060");
    // The node port (externalTrafficPolicy Cluster) reaches n2: the remote endpoint is
    // alive and reachable from this node.
    k.wait("the node port to reach n2", || {
        let counts = tally(&k.connect(&pc, "tcp", &node_port, 10, &["--timeout-ms", "1000"]));
        counts.contains_key(REMOTE_NODE).then_some(())
    });
    let cluster = tally(&k.connect(&pc, "tcp", "10.96.0.60:80", 30, &[]));
    assert!(
        only(&cluster, &["pa", "pb"])
            && cluster.len() == 2
            && cluster.values().sum::<usize>() == 30,
        "internalTrafficPolicy Local: the cluster IP should reach pa and pb, never n2: \
         {cluster:?}\n{}",
        k.daemon.log()
    );

    // No local endpoint left: the cluster IP fails, the node port still reaches n2.
    k.put_slice(
        "itp",
        "itp-1",
        tcp_http(8080),
        vec![endpoint(REMOTE_POD, REMOTE_NODE, Conditions::READY)],
    );
    k.wait("the cluster IP to fail without a local endpoint", || {
        let attempts = k.connect(&pc, "tcp", "10.96.0.60:80", 3, &["--timeout-ms", "1000"]);
        all_failed(&attempts).then_some(())
    });
    let failed = k.connect(&pc, "tcp", "10.96.0.60:80", 10, &["--timeout-ms", "1000"]);
    assert!(all_failed(&failed), "{failed:?}");
    let np = tally(&k.connect(&pc, "tcp", &node_port, 10, &[]));
    assert_eq!(np.get(REMOTE_NODE), Some(&10), "{np:?}\n{}", k.daemon.log());
    // From outside, the node port (externalTrafficPolicy Cluster) reaches the endpoint on n2
    // too: the connection is SNATed to the node's IP, so n2's replies come back through
    // this node to be un-NATed, as kube-proxy masquerades it.
    let outside = tally(&k.connect(&k.ext, "tcp", &node_port, 10, &["--peer"]));
    let masqueraded = format!("{REMOTE_NODE}@{NODE_IP}");
    assert_eq!(
        outside.get(&masqueraded),
        Some(&10),
        "from outside to {node_port}: {outside:?}\n{}",
        k.daemon.log()
    );
}

#[test]
fn serving_terminating_endpoints_take_over_until_one_is_ready() {
    let mut k = KubeNode::start();
    let pa = k.add_pod("pa", "10.244.0.11", 11);
    let pb = k.add_pod("pb", "10.244.0.12", 12);
    let pc = k.add_pod("pc", "10.244.0.13", 13);
    let pd = k.add_pod("pd", "10.244.0.14", 14);
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        pb.serve("pb", &["tcp:8080"]).unwrap(),
        pd.serve("pd", &["tcp:8080"]).unwrap(),
    ];
    const VIP: &str = "10.96.0.70:80";
    k.put(&service(
        "term",
        json!({"clusterIP": "10.96.0.70",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
        None,
    ));
    // Nothing serves: pa is not ready, pb terminates and no longer serves. Refused.
    k.put_slice(
        "term",
        "term-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::NOT_READY),
            endpoint("10.244.0.12", NODE, Conditions::TERMINATING),
        ],
    );
    k.wait("the service to refuse with no serving endpoint", || {
        let attempts = k.connect(&pc, "tcp", VIP, 2, &["--timeout-ms", "1000"]);
        (attempts
            .iter()
            .all(|a| a.as_ref().err().map(String::as_str) == Some("refused")))
        .then_some(())
    });

    // pa terminates but still serves, and nothing is ready: pa takes every connection.
    k.put_slice(
        "term",
        "term-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::SERVING_TERMINATING),
            endpoint("10.244.0.12", NODE, Conditions::TERMINATING),
        ],
    );
    k.wait("the serving-terminating pa to take over", || {
        let counts = tally(&k.connect(&pc, "tcp", VIP, 5, &["--timeout-ms", "1000"]));
        (counts.get("pa") == Some(&5)).then_some(())
    });
    let counts = tally(&k.connect(&pc, "tcp", VIP, 20, &[]));
    assert_eq!(
        counts.get("pa"),
        Some(&20),
        "with no ready endpoint, the serving-terminating one should get every connection: \
         {counts:?}\n{}",
        k.daemon.log()
    );
    // A long-lived connection to pa, which must outlive what follows.
    let mut held = pc.probe_hold(VIP, &["--timeout-ms", "2000"]).unwrap();
    held.wait_for_samples(3, Duration::from_secs(10)).unwrap();

    // pd is ready: only pd gets new connections; pa's established connection goes on.
    k.put_slice(
        "term",
        "term-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::SERVING_TERMINATING),
            endpoint("10.244.0.12", NODE, Conditions::TERMINATING),
            endpoint("10.244.0.14", NODE, Conditions::READY),
        ],
    );
    k.wait("the ready pd to take every new connection", || {
        let counts = tally(&k.connect(&pc, "tcp", VIP, 5, &["--timeout-ms", "1000"]));
        (counts.get("pd") == Some(&5)).then_some(())
    });
    let counts = tally(&k.connect(&pc, "tcp", VIP, 20, &[]));
    assert_eq!(
        counts.get("pd"),
        Some(&20),
        "once an endpoint is ready, serving-terminating ones get no new connection: \
         {counts:?}\n{}",
        k.daemon.log()
    );
    let before = held.samples().len();
    held.wait_for_samples(before + 3, Duration::from_secs(10))
        .unwrap();
    let samples = held.stop().unwrap();
    assert!(
        samples.iter().all(|s| s.outcome.as_deref() == Ok("pa")),
        "the connection established with the terminating pa should keep working: {:?}",
        samples.iter().map(|s| &s.outcome).collect::<Vec<_>>()
    );

    // pd stops being ready: back to the serving-terminating pa.
    k.put_slice(
        "term",
        "term-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::SERVING_TERMINATING),
            endpoint("10.244.0.12", NODE, Conditions::TERMINATING),
            endpoint("10.244.0.14", NODE, Conditions::NOT_READY),
        ],
    );
    k.wait("the serving-terminating pa to take over again", || {
        let counts = tally(&k.connect(&pc, "tcp", VIP, 10, &["--timeout-ms", "1000"]));
        (counts.get("pa") == Some(&10)).then_some(())
    });
}

#[test]
fn with_both_traffic_policies_local_in_cluster_traffic_to_external_addresses_takes_every_endpoint()
{
    let mut k = KubeNode::start();
    let pa = k.add_pod("pa", "10.244.0.11", 11);
    let pc = k.add_pod("pc", "10.244.0.13", 13);
    k.add_remote_pod_ip(REMOTE_POD);
    let ext = k.ext.clone();
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        ext.serve(REMOTE_NODE, &["tcp:8080"]).unwrap(),
    ];
    k.put(&service(
        "both",
        json!({"type": "NodePort", "clusterIP": "10.96.0.70",
               "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local",
               "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30070}]}),
        None,
    ));
    k.put_slice(
        "both",
        "both-1",
        tcp_http(8080),
        vec![
            endpoint("10.244.0.11", NODE, Conditions::READY),
            endpoint(REMOTE_POD, REMOTE_NODE, Conditions::READY),
        ],
    );
    let node_port = format!("{NODE_IP}:30070");
    // A pod's connections to the node port are in-cluster traffic: every endpoint, n2 too
    // (externalTrafficPolicy applies to traffic from outside only, as in kube-proxy).
    k.wait("a pod's node-port connections to reach pa and n2", || {
        let counts = tally(&k.connect(&pc, "tcp", &node_port, 20, &["--timeout-ms", "1000"]));
        (counts.contains_key("pa") && counts.contains_key(REMOTE_NODE)).then_some(())
    });
    // The cluster IP (internalTrafficPolicy Local) reaches only the local endpoint.
    let cluster = tally(&k.connect(&pc, "tcp", "10.96.0.70:80", 20, &[]));
    assert_eq!(
        cluster.get("pa"),
        Some(&20),
        "{cluster:?}\n{}",
        k.daemon.log()
    );
    // From outside, the node port reaches only the local endpoint, which sees the client.
    let outside = tally(&k.connect(&ext, "tcp", &node_port, 20, &["--peer"]));
    assert_eq!(
        outside.get(&format!("pa@{EXT_IP}")),
        Some(&20),
        "{outside:?}\n{}",
        k.daemon.log()
    );
}
