//! Kubernetes service semantics of slice 2, end to end: `svcflow run --kubeconfig
//! --host-node n1` watches the in-process fake API server (as in `kubernetes.rs`, bound in
//! the node's network namespace beside the daemon), and Services with `sessionAffinity:
//! ClientIP`, `loadBalancerSourceRanges` and a `healthCheckNodePort` behave as Kubernetes
//! says: a client's connections stick to one endpoint, only listed sources reach the LB IP,
//! and the node answers its load balancer's health checks with its local endpoint count.
//! Topology: the EndpointSlices place one of two local pods on another node (`n2`, in another
//! zone), so topology keys, zone hints and `trafficDistribution: PreferSameNode` visibly
//! narrow the endpoints n1 uses, and keys that match nothing refuse connections.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::Duration;

use coe::k8s::fake::FakeApiServer;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use ovs_tests::kube::{from, in_netns};
use ovs_tests::svcflow::Daemon;
use ovs_tests::{Host, HostSpec, Sandbox, tally, wait_for};
use serde_json::json;

const BR: &str = "br-int";
const NODE_IP: &str = "192.168.50.10";
const STICKY: &str = "10.96.0.20:80";
const LB: &str = "198.18.0.90:80";
const HEALTH_PORT: u16 = 32100;
const TOPOLOGY_KEYS: &str = "svcflow.io/topology-keys";

fn add_pod(sb: &mut Sandbox, name: &str, ip: &str, mac: &str, ofport: u16) -> Host {
    let spec = HostSpec::new(name, &format!("{ip}/24"), mac, ofport).with_gateway("10.244.0.1");
    let host = sb.add_host(BR, spec).unwrap();
    let iface_id = coe::k8s::iface_id("default", name);
    sb.vsctl(&[
        "set",
        "interface",
        name,
        &format!("external_ids:iface-id={iface_id}"),
    ])
    .unwrap();
    host
}

fn pod(name: &str, host: &Host) -> Pod {
    from(json!({
        "metadata": {"namespace": "default", "name": name,
                     "annotations": {"svcflow.io/mac-address": host.mac()}},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running", "podIP": host.ip(), "podIPs": [{"ip": host.ip()}]},
    }))
}

/// The EndpointSlice of `service`: (address, ready) pairs on TCP 8080, all on n1.
fn slice(service: &str, endpoints: &[(&str, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, ready)| {
            json!({"addresses": [ip], "nodeName": "n1",
                   "conditions": {"ready": ready, "serving": ready}})
        })
        .collect();
    from(json!({
        "metadata": {"namespace": "default", "name": format!("{service}-abcde"),
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": endpoints,
    }))
}

#[test]
fn affinity_source_ranges_health_checks_and_topology_from_kubernetes() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let server = {
        let handle = rt.handle().clone();
        in_netns(sb.node_netns(), move || {
            handle.block_on(FakeApiServer::start_new()).unwrap()
        })
    };
    let daemon = Daemon::start_kube(
        &sb,
        1,
        &server.kubeconfig(),
        &["--host-node", "n1", "--log-level", "debug"],
    )
    .unwrap();
    let fail = |e: &dyn std::fmt::Display| -> ! {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    };
    let ready = wait_for("br-int and svc-gw", Duration::from_secs(30), || {
        sb.vsctl(&["get", "interface", "svc-gw", "ofport"])
            .ok()
            .filter(|p| p.trim().parse::<i64>().is_ok_and(|p| p > 0))
    });
    if let Err(e) = ready {
        fail(&e);
    }

    let pa = add_pod(&mut sb, "pa", "10.244.0.11", "0a:58:0a:f4:00:0b", 11);
    let pb = add_pod(&mut sb, "pb", "10.244.0.12", "0a:58:0a:f4:00:0c", 12);
    let pc = add_pod(&mut sb, "pc", "10.244.0.13", "0a:58:0a:f4:00:0d", 13);
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        pb.serve("pb", &["tcp:8080"]).unwrap(),
    ];
    server
        .apply::<Namespace>(&from(json!({"metadata": {"name": "default"}})))
        .unwrap();
    server
        .apply::<Node>(&from(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1",
                                                  "topology.kubernetes.io/zone": "z1"}},
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
        })))
        .unwrap();
    for (name, host) in [("pa", &pa), ("pb", &pb), ("pc", &pc)] {
        server.apply(&pod(name, host)).unwrap();
    }
    server
        .apply::<Service>(&from(json!({
            "metadata": {"namespace": "default", "name": "sticky"},
            "spec": {"clusterIP": "10.96.0.20", "sessionAffinity": "ClientIP",
                     "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
        })))
        .unwrap();
    server
        .apply(&slice(
            "sticky",
            &[("10.244.0.11", true), ("10.244.0.12", true)],
        ))
        .unwrap();
    // Only pc may reach the LB IP; pa is its one endpoint, on this node.
    server
        .apply::<Service>(&from(json!({
            "metadata": {"namespace": "default", "name": "lb"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.21",
                     "externalTrafficPolicy": "Local", "healthCheckNodePort": HEALTH_PORT,
                     "loadBalancerSourceRanges": ["10.244.0.13/32"],
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30090}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.90"}]}},
        })))
        .unwrap();
    server
        .apply(&slice("lb", &[("10.244.0.11", true)]))
        .unwrap();

    // Topology: pa runs on n1 (zone z1); the slices say pb runs on n2 (zone z2).
    server
        .apply::<Node>(&from(json!({
            "metadata": {"name": "n2", "labels": {"kubernetes.io/hostname": "n2",
                                                  "topology.kubernetes.io/zone": "z2"}},
            "spec": {"podCIDR": "10.244.9.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.50.11"}]},
        })))
        .unwrap();
    let hinted_by_zone = json!([
        {"addresses": ["10.244.0.11"], "nodeName": "n1", "zone": "z1",
         "hints": {"forZones": [{"name": "z1"}]}},
        {"addresses": ["10.244.0.12"], "nodeName": "n2", "zone": "z2",
         "hints": {"forZones": [{"name": "z2"}]}},
    ]);
    // Zone hints that point n1 (z1) at pb: PreferSameNode must still keep n1's own pa.
    let same_node = json!([
        {"addresses": ["10.244.0.11"], "nodeName": "n1", "zone": "z2",
         "hints": {"forZones": [{"name": "z2"}]}},
        {"addresses": ["10.244.0.12"], "nodeName": "n2", "zone": "z1",
         "hints": {"forZones": [{"name": "z1"}]}},
    ]);
    for (name, ip, annotations, spec, endpoints) in [
        (
            "by-host",
            "10.96.0.22",
            json!({TOPOLOGY_KEYS: "kubernetes.io/hostname,*"}),
            json!({}),
            &hinted_by_zone,
        ),
        (
            "nowhere",
            "10.96.0.23",
            json!({TOPOLOGY_KEYS: "rack"}),
            json!({}),
            &hinted_by_zone,
        ),
        (
            "hinted",
            "10.96.0.24",
            json!({}),
            json!({"trafficDistribution": "PreferClose"}),
            &hinted_by_zone,
        ),
        (
            "same-node",
            "10.96.0.25",
            json!({}),
            json!({"trafficDistribution": "PreferSameNode"}),
            &same_node,
        ),
    ] {
        let mut spec = spec;
        spec["clusterIP"] = json!(ip);
        spec["ports"] = json!([{"name": "http", "port": 80, "targetPort": 8080}]);
        server
            .apply::<Service>(&from(json!({
                "metadata": {"namespace": "default", "name": name, "annotations": annotations},
                "spec": spec,
            })))
            .unwrap();
        server
            .apply::<EndpointSlice>(&from(json!({
                "metadata": {"namespace": "default", "name": format!("{name}-abcde"),
                             "labels": {"kubernetes.io/service-name": name}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
                "endpoints": endpoints,
            })))
            .unwrap();
    }

    // Session affinity: once the service answers, 30 connections of pc reach one endpoint.
    let first = wait_for(
        "the sticky service to answer",
        Duration::from_secs(40),
        || {
            let attempt = pc
                .connect("tcp", STICKY, 1, &["--timeout-ms", "1000"])
                .ok()?;
            attempt.first()?.as_ref().ok().cloned()
        },
    );
    let first = first.unwrap_or_else(|e| fail(&e));
    let counts = tally(&pc.connect("tcp", STICKY, 30, &[]).unwrap());
    assert_eq!(
        counts.get(&first),
        Some(&30),
        "every connection of one client should reach {first}: {counts:?}\n{}",
        daemon.log()
    );

    // Topology keys: the first key (same host) keeps n1's pa only; zone hints keep z1's pa;
    // PreferSameNode keeps n1's own pa over the zone hints; keys that match nothing on n1
    // refuse the connection.
    for (vip, what) in [
        ("10.96.0.22:80", "topology keys"),
        ("10.96.0.24:80", "zone hints"),
        ("10.96.0.25:80", "PreferSameNode"),
    ] {
        let counts = tally(&pc.connect("tcp", vip, 10, &[]).unwrap());
        assert_eq!(
            counts.get("pa"),
            Some(&10),
            "{what}: {counts:?}\n{}",
            daemon.log()
        );
    }
    let nowhere = pc
        .connect("tcp", "10.96.0.23:80", 2, &["--timeout-ms", "2000"])
        .unwrap();
    assert_eq!(
        nowhere,
        vec![Err("refused".to_string()); 2],
        "no key matches"
    );

    // loadBalancerSourceRanges: pc (listed) reaches the LB IP, pb (not listed) does not.
    let lb = tally(&pc.connect("tcp", LB, 5, &[]).unwrap());
    assert_eq!(lb.get("pa"), Some(&5), "{lb:?}\n{}", daemon.log());
    let refused = pb.connect("tcp", LB, 2, &["--timeout-ms", "700"]).unwrap();
    assert!(refused.iter().all(Result::is_err), "{refused:?}");

    // The health-check node port answers on the node: 200 with one local endpoint...
    let url = format!("http://127.0.0.1:{HEALTH_PORT}/healthz");
    let curl = || sb.node(&["curl", "-s", "-i", "--max-time", "2", &url]).ok();
    let healthy = wait_for(
        "the health check to answer 200",
        Duration::from_secs(20),
        || curl().filter(|t| t.starts_with("HTTP/1.1 200")),
    );
    let healthy = healthy.unwrap_or_else(|e| fail(&e));
    assert!(
        healthy.ends_with(
            r#"{"service":{"namespace":"default","name":"lb"},"localEndpoints":1,"serviceProxyHealthy":true}"#
        ),
        "{healthy}"
    );
    // ...and 503 once the node has no ready endpoint left.
    server
        .apply(&slice("lb", &[("10.244.0.11", false)]))
        .unwrap();
    let unhealthy = wait_for(
        "the health check to answer 503",
        Duration::from_secs(20),
        || curl().filter(|t| t.starts_with("HTTP/1.1 503")),
    );
    let unhealthy = unhealthy.unwrap_or_else(|e| fail(&e));
    assert!(unhealthy.contains(r#""localEndpoints":0"#), "{unhealthy}");
    drop(server);
    drop(rt);
}
