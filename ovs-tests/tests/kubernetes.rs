//! Kubernetes end to end: `svcflow run --kubeconfig` watches the in-process fake API server
//! (`coe::k8s::fake`), which this test binds inside the node's network namespace so that the
//! daemon, running there beside ovs-vswitchd, reaches it on loopback. A Node, three Pods, a
//! NodePort Service with a named TCP target port and a UDP port, and its EndpointSlice become
//! flows: real TCP and UDP connections from a pod reach both endpoints through the cluster IP,
//! and TCP through the node port; an endpoint that stops being ready stops getting
//! connections; while the API server is gone the flows stay as they are, and after it comes
//! back the change made meanwhile arrives; a deleted Service stops answering.
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
const VIP: &str = "10.96.0.10:80";

/// Starts the fake API server with its listener in network namespace `netns`.
fn fake_server_in(rt: &tokio::runtime::Runtime, netns: &str) -> FakeApiServer {
    let handle = rt.handle().clone();
    in_netns(netns, move || {
        handle.block_on(FakeApiServer::start_new()).unwrap()
    })
}

/// Makes a stopped fake API server listen again, on its port in `netns`.
fn restart_in(
    rt: &tokio::runtime::Runtime,
    netns: &str,
    mut server: FakeApiServer,
) -> FakeApiServer {
    let handle = rt.handle().clone();
    in_netns(netns, move || {
        handle.block_on(server.start()).unwrap();
        server
    })
}

/// A pod host on `ofport`, bound by the iface-id rule `<namespace>_<name>`.
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

/// The EndpointSlice of `web`: (address, ready) pairs on TCP 8080 named `http` and UDP 5353
/// named `dns`.
fn slice(endpoints: &[(&str, bool)]) -> EndpointSlice {
    let endpoints: Vec<_> = endpoints
        .iter()
        .map(|(ip, ready)| {
            json!({"addresses": [ip], "nodeName": "n1",
                                   "conditions": {"ready": ready, "serving": ready}})
        })
        .collect();
    from(json!({
        "metadata": {"namespace": "default", "name": "web-abcde",
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080},
                  {"name": "dns", "protocol": "UDP", "port": 5353}],
        "endpoints": endpoints,
    }))
}

#[test]
fn services_from_kubernetes_carry_traffic() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let mut server = fake_server_in(&rt, sb.node_netns());
    let daemon =
        Daemon::start_kube(&sb, 1, &server.kubeconfig(), &["--log-level", "debug"]).unwrap();
    let fail = |e: &dyn std::fmt::Display| -> ! {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    };

    // The daemon creates br-int (with its gateway port) before pods can be attached.
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
        pa.serve("pa", &["tcp:8080", "udp:5353"]).unwrap(),
        pb.serve("pb", &["tcp:8080", "udp:5353"]).unwrap(),
    ];

    server
        .apply::<Namespace>(&from(json!({"metadata": {"name": "default"}})))
        .unwrap();
    server
        .apply::<Node>(&from(json!({
            "metadata": {"name": "n1"},
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
        })))
        .unwrap();
    for (name, host) in [("pa", &pa), ("pb", &pb), ("pc", &pc)] {
        server.apply(&pod(name, host)).unwrap();
    }
    server
        .apply::<Service>(&from(json!({
            "metadata": {"namespace": "default", "name": "web"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
                     "ports": [{"name": "http", "port": 80, "targetPort": "web", "nodePort": 30080},
                               {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353,
                                "nodePort": 30053}]},
        })))
        .unwrap();
    server
        .apply(&slice(&[("10.244.0.11", true), ("10.244.0.12", true)]))
        .unwrap();

    // Both ready endpoints get connections.
    let first = wait_for("the service to answer", Duration::from_secs(40), || {
        let attempt = pc.connect("tcp", VIP, 1, &["--timeout-ms", "1000"]).ok()?;
        attempt.first()?.as_ref().ok().cloned()
    });
    if let Err(e) = first {
        fail(&e);
    }
    let counts = tally(&pc.connect("tcp", VIP, 30, &[]).unwrap());
    assert!(
        counts.get("pa").copied().unwrap_or(0) > 0
            && counts.get("pb").copied().unwrap_or(0) > 0
            && counts.values().sum::<usize>() == 30,
        "30 connections should reach both endpoints: {counts:?}\n{}",
        daemon.log()
    );
    assert!(
        daemon.log().contains("every watched kind is listed"),
        "{}",
        daemon.log()
    );
    let udp = tally(
        &pc.connect("udp", "10.96.0.10:53", 20, &["--timeout-ms", "1000"])
            .unwrap(),
    );
    // (One probe keeps one source port, so its datagrams all hash to one endpoint.)
    assert_eq!(
        udp.iter()
            .filter(|(k, _)| *k == "pa" || *k == "pb")
            .map(|(_, n)| n)
            .sum::<usize>(),
        20,
        "UDP to the cluster IP should reach the endpoints: {udp:?}\n{}",
        daemon.log()
    );
    let node_port = tally(
        &pc.connect("tcp", &format!("{NODE_IP}:30080"), 10, &[])
            .unwrap(),
    );
    assert_eq!(
        node_port
            .iter()
            .filter(|(k, _)| *k == "pa" || *k == "pb")
            .map(|(_, n)| n)
            .sum::<usize>(),
        10,
        "the node port should reach the endpoints: {node_port:?}\n{}",
        daemon.log()
    );

    // pb is no longer ready: every connection goes to pa.
    server
        .apply(&slice(&[("10.244.0.11", true), ("10.244.0.12", false)]))
        .unwrap();
    let only_pa = wait_for(
        "pb to stop getting connections",
        Duration::from_secs(20),
        || {
            let counts = tally(&pc.connect("tcp", VIP, 10, &[]).ok()?);
            (counts.get("pa") == Some(&10)).then_some(())
        },
    );
    if let Err(e) = only_pa {
        fail(&e);
    }

    // The API server vanishes. The flows stay as they are: the service keeps answering, from
    // pa only, even though the cluster changes meanwhile (pb is ready again).
    rt.block_on(server.stop());
    server
        .apply(&slice(&[("10.244.0.11", true), ("10.244.0.12", true)]))
        .unwrap();
    server.compact();
    std::thread::sleep(Duration::from_secs(3));
    let during = tally(&pc.connect("tcp", VIP, 10, &[]).unwrap());
    assert_eq!(during.get("pa"), Some(&10), "{during:?}\n{}", daemon.log());

    // It comes back on the same port: the watchers relist, and pb gets connections again.
    let server = restart_in(&rt, sb.node_netns(), server);
    let pb_back = wait_for("pb to come back", Duration::from_secs(40), || {
        let counts = tally(&pc.connect("tcp", VIP, 10, &[]).ok()?);
        counts.contains_key("pb").then_some(())
    });
    if let Err(e) = pb_back {
        fail(&e);
    }
    // The outage was said once, as a warning, not as an error per watch and retry.
    let log = daemon.log();
    let errors: Vec<&str> = log.lines().filter(|l| l.contains(" ERROR ")).collect();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("Kubernetes"))
        .collect();
    assert!(errors.is_empty(), "errors logged: {errors:#?}");
    assert_eq!(warned.len(), 1, "one warning for the outage: {warned:#?}");

    // The Service is deleted: the VIP stops answering.
    server.delete::<Service>("default", "web").unwrap();
    let gone = wait_for(
        "the service to stop answering",
        Duration::from_secs(20),
        || {
            let attempt = pc.connect("tcp", VIP, 1, &["--timeout-ms", "500"]).ok()?;
            attempt.first()?.is_err().then_some(())
        },
    );
    if let Err(e) = gone {
        fail(&e);
    }
    drop(server);
    drop(rt);
}
