//! `svcflow run` end to end: the daemon, running in the node namespace beside ovs-vswitchd,
//! sets up `br-int` over OVSDB, takes its switch over OpenFlow, and programs a ClusterIP
//! service posted over REST, so that real TCP connections from a pod reach both backends.
//! Restarted on the same state directory (with the switch's flows wiped meanwhile), it serves
//! the same state and puts the flows back; SIGTERM stops it and leaves the flows in place.
//!
//! It runs `target/<profile>/svcflow`, which Cargo does not build for this package's tests:
//! `scripts/test.sh` runs `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::Duration;

use ovs_tests::svcflow::fixture::{
    NODE_IP, add_pod, curl, pod_body, put_node_and_pods, put_web_endpoints,
};
use ovs_tests::svcflow::{Daemon, NB, OPENFLOW};
use ovs_tests::{Host, Sandbox, tally, wait_for};

const BR: &str = "br-int";
const VIP: &str = "10.96.0.10:80";

/// Waits until one connection from `client` to the VIP succeeds, then makes 30.
fn spread(daemon: &Daemon, client: &Host) -> std::collections::BTreeMap<String, usize> {
    let first = wait_for("the service to answer", Duration::from_secs(30), || {
        let attempt = client
            .connect("tcp", VIP, 1, &["--timeout-ms", "1000"])
            .ok()?;
        attempt.first()?.as_ref().ok().cloned()
    });
    if let Err(e) = first {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    tally(&client.connect("tcp", VIP, 30, &[]).unwrap())
}

fn assert_spread(counts: &std::collections::BTreeMap<String, usize>, daemon: &Daemon) {
    assert!(
        counts.keys().all(|k| k == "pa" || k == "pb")
            && counts.get("pa").copied().unwrap_or(0) > 0
            && counts.get("pb").copied().unwrap_or(0) > 0
            && counts.values().sum::<usize>() == 30,
        "30 connections should reach both backends and nothing else: {counts:?}\ndaemon log:\n{}",
        daemon.log()
    );
}

fn sorted_flows(sb: &Sandbox) -> Vec<String> {
    let mut flows: Vec<String> = sb
        .dump_flows(BR)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    flows.sort();
    flows
}

#[test]
fn the_daemon_serves_a_cluster_ip_survives_a_restart_and_stops_cleanly() {
    assert!(std::path::Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let mut daemon = Daemon::start(&sb, 1, "debug").unwrap();

    // The daemon creates br-int, points it at itself and adds the gateway port.
    let ready = wait_for("br-int and svc-gw", Duration::from_secs(30), || {
        sb.vsctl(&["get", "interface", "svc-gw", "ofport"])
            .ok()
            .filter(|p| p.trim().parse::<i64>().is_ok_and(|p| p > 0))
    });
    if let Err(e) = ready {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    assert_eq!(
        sb.vsctl(&["get-controller", BR]).unwrap().trim(),
        format!("tcp:{OPENFLOW}")
    );

    let pa = add_pod(&mut sb, "pa", "10.244.0.11", "0a:58:0a:f4:00:0b", 11);
    let pb = add_pod(&mut sb, "pb", "10.244.0.12", "0a:58:0a:f4:00:0c", 12);
    let pc = add_pod(&mut sb, "pc", "10.244.0.13", "0a:58:0a:f4:00:0d", 13);
    let _servers = [
        pa.serve("pa", &["tcp:8080"]).unwrap(),
        pb.serve("pb", &["tcp:8080"]).unwrap(),
    ];

    // The REST northbound answers once the daemon is up.
    let up = wait_for("the REST northbound", Duration::from_secs(20), || {
        sb.node(&["curl", "-sf", &format!("{NB}/k8s-node:k8s-nodes-info")])
            .ok()
    });
    if let Err(e) = up {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    curl(
        &sb,
        "PUT",
        "k8s-node:k8s-nodes-info/k8s-nodes/node-1",
        &format!(
            r#"{{"k8s-node:k8s-nodes":[{{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
            "k8s-node:internal-ip-address":"{NODE_IP}","k8s-node:pod-cidr":"10.244.0.0/24"}}]}}"#
        ),
    );
    for (uid, host) in [("pa", &pa), ("pb", &pb), ("pc", &pc)] {
        curl(
            &sb,
            "PUT",
            &format!("pod:coe/pods/{uid}"),
            &pod_body(uid, host.ip(), host.mac()),
        );
    }
    curl(
        &sb,
        "PUT",
        "service:service-information/services/svc-web",
        r#"{"service:services":[{"service:uid":"svc-web","service:name":"web",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.10",
        "service:service-ports":[{"service:name":"http","service:port":80,
        "service:target-port":"8080"}]}]}"#,
    );
    put_web_endpoints(&sb, &["10.244.0.11", "10.244.0.12"]);

    let counts = spread(&daemon, &pc);
    assert_spread(&counts, &daemon);
    assert!(daemon.log().contains("node n1: synced model revision"));

    // The operational view shows the service's group, its buckets with endpoints and
    // counters, and its flow, read from the switch.
    let op = sb
        .node(&[
            "curl",
            "-sS",
            "-f",
            "http://127.0.0.1:8181/restconf/operational/service:service-information",
        ])
        .unwrap();
    let op: serde_json::Value = serde_json::from_str(&op).unwrap();
    let text = op.to_string();
    assert!(text.contains("\"uid\":\"svc-web\""), "{text}");
    let buckets: Vec<&serde_json::Value> = op
        .pointer("/service:service-information/services")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .flat_map(|s| s["groups"].as_array().into_iter().flatten())
        .flat_map(|g| g["buckets"].as_array().into_iter().flatten())
        .collect();
    let endpoints: Vec<&str> = buckets
        .iter()
        .filter_map(|b| b["endpoint"].as_str())
        .collect();
    assert_eq!(
        endpoints,
        ["10.244.0.11:8080", "10.244.0.12:8080"],
        "{text}"
    );
    let packets: u64 = buckets
        .iter()
        .filter_map(|b| b["packet-count"].as_u64())
        .sum();
    // Statistics reach the switch's counters with a short delay; some have arrived.
    assert!(
        packets > 0,
        "bucket counters should count the connections: {text}"
    );
    assert!(
        text.contains("nw_dst=10.96.0.10,tp_dst=80 actions=group:"),
        "{text}"
    );

    // The node's own host reaches the service through the gateway port svcflow configured.
    let from_host = tally(&sb.connect_from_node("tcp", VIP, 10, &[]).unwrap());
    assert_eq!(
        from_host
            .iter()
            .filter(|(k, _)| k.starts_with('p'))
            .map(|(_, n)| n)
            .sum::<usize>(),
        10,
        "{from_host:?}"
    );

    // `svcflow ofp dump-flows` and `dump-groups` print what ovs-ofctl prints.
    let svcflow = ovs_tests::svcflow::svcflow_binary().unwrap();
    let svcflow = svcflow.to_string_lossy();
    let target = sb.mgmt_target(BR);
    let mut ours: Vec<String> = sb
        .node(&[&svcflow, "ofp", "dump-flows", &target])
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    ours.sort();
    assert_eq!(ours, sorted_flows(&sb));
    let mut ours: Vec<String> = sb
        .node(&[&svcflow, "ofp", "dump-groups", &target])
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let mut theirs: Vec<String> = sb
        .dump_groups(BR)
        .unwrap()
        .lines()
        .skip(1) // the reply header, with its xid
        .map(String::from)
        .collect();
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);

    // A change over REST reaches the switch: without pb's address, every connection goes to pa.
    put_web_endpoints(&sb, &["10.244.0.11"]);
    let only_pa = wait_for("pb's endpoint to go", Duration::from_secs(20), || {
        let counts = tally(&pc.connect("tcp", VIP, 10, &[]).ok()?);
        (counts.get("pa") == Some(&10)).then_some(())
    });
    if let Err(e) = only_pa {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    put_web_endpoints(&sb, &["10.244.0.11", "10.244.0.12"]);
    let pb_back = wait_for(
        "pb's endpoint to come back",
        Duration::from_secs(20),
        || {
            let counts = tally(&pc.connect("tcp", VIP, 10, &[]).ok()?);
            counts.contains_key("pb").then_some(())
        },
    );
    if let Err(e) = pb_back {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    let counts = tally(&pc.connect("tcp", VIP, 30, &[]).unwrap());
    assert_spread(&counts, &daemon);

    // ovs-vswitchd crashes and comes back without flows; its switch reconnects, and a new
    // agent reads it and puts the flows back.
    sb.restart_vswitchd().unwrap();
    let counts = spread(&daemon, &pc);
    assert_spread(&counts, &daemon);
    assert!(
        daemon.log().contains("(connection 2)"),
        "the switch did not reconnect:\n{}",
        daemon.log()
    );

    // Restart on the same state directory. While the daemon is down, wipe the switch, so
    // that only the new daemon can make the service work again.
    daemon.kill();
    sb.ofctl("del-flows", BR, &[]).unwrap();
    sb.ofctl("del-groups", BR, &[]).unwrap();
    assert_eq!(sb.dump_flows(BR).unwrap().trim(), "");
    let mut daemon = Daemon::start(&sb, 2, "debug").unwrap();
    let counts = spread(&daemon, &pc);
    assert_spread(&counts, &daemon);
    // The state came back from disk: GET serves what was posted before the restart.
    let services = curl(&sb, "GET", "service:service-information", "");
    assert!(
        services.contains("svc-web") && services.contains("10.96.0.10"),
        "{services}"
    );
    let endpoints = curl(&sb, "GET", "service:endpoints-info", "");
    assert!(endpoints.contains("10.244.0.12"), "{endpoints}");

    // SIGTERM: a clean exit, and the flows stay on the switch.
    let before = sorted_flows(&sb);
    assert!(before.len() > 5, "{before:?}");
    let status = daemon
        .terminate()
        .unwrap_or_else(|e| panic!("{e}\n{}", daemon.log()));
    assert!(status.success(), "{status}\n{}", daemon.log());
    assert!(daemon.log().contains("SIGTERM"), "{}", daemon.log());
    assert_eq!(sorted_flows(&sb), before);
    let counts = tally(&pc.connect("tcp", VIP, 30, &[]).unwrap());
    assert_spread(&counts, &daemon);
}

/// Passive OVSDB: the node's ovsdb-server is pointed at svcflow with `set-manager`, and svcflow
/// sets the node up over that connection, naming it by `external_ids:hostname`. (The daemon
/// runs in the test's namespace here, where ovsdb-server can reach it; the switch, in the node
/// namespace, cannot reach its OpenFlow address, so this test stops at the OVSDB side.)
#[test]
fn a_node_pointed_at_svcflow_with_set_manager_is_set_up() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let (daemon, openflow, manager) = Daemon::start_manager(&sb, 1).unwrap();
    sb.vsctl(&["set", "Open_vSwitch", ".", "external_ids:hostname=n1"])
        .unwrap();
    sb.vsctl(&["set-manager", &format!("tcp:127.0.0.1:{manager}")])
        .unwrap();
    let ready = wait_for(
        "svcflow to set up br-int over the manager connection",
        Duration::from_secs(30),
        || {
            let role = sb
                .vsctl(&["get", "interface", "svc-gw", "external_ids:svcflow-role"])
                .ok()?;
            (role.trim() == "service-gateway").then_some(())
        },
    );
    if let Err(e) = ready {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    assert_eq!(
        sb.vsctl(&["get-controller", BR]).unwrap().trim(),
        format!("tcp:127.0.0.1:{openflow}")
    );
    let dpid = sb
        .vsctl(&["get", "bridge", BR, "other_config:datapath-id"])
        .unwrap();
    assert_eq!(
        dpid.trim().trim_matches('"'),
        format!("{:016x}", netvirt::node_setup::datapath_id("n1"))
    );
    assert!(
        daemon.log().contains("node n1: its OVSDB server connected"),
        "{}",
        daemon.log()
    );
}

/// The REST design document's minimal form (a service with a cluster IP and pod uids, and no
/// ports) forwards every port: TCP on two ports and UDP reach the pods on the port the client
/// used; the same form without pods refuses at once.
#[test]
fn the_design_documents_minimal_form_forwards_every_port() {
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = Daemon::start(&sb, 1, "info").unwrap();
    let bridge = wait_for("br-int", Duration::from_secs(30), || sb.dump_flows(BR).ok());
    bridge.unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()));
    let pa = add_pod(&mut sb, "pa", "10.244.0.11", "0a:58:0a:f4:00:0b", 11);
    let pb = add_pod(&mut sb, "pb", "10.244.0.12", "0a:58:0a:f4:00:0c", 12);
    let pc = add_pod(&mut sb, "pc", "10.244.0.13", "0a:58:0a:f4:00:0d", 13);
    let _servers = [
        pa.serve("pa", &["tcp:8080", "tcp:9090", "udp:5353"])
            .unwrap(),
        pb.serve("pb", &["tcp:8080", "tcp:9090", "udp:5353"])
            .unwrap(),
    ];
    let up = wait_for("the REST northbound", Duration::from_secs(20), || {
        sb.node(&["curl", "-sf", &format!("{NB}/k8s-node:k8s-nodes-info")])
            .ok()
    });
    up.unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()));
    put_node_and_pods(&|path, body| {
        curl(&sb, "PUT", path, body);
    });
    // The design document's own sample, with our pods and a second VIP without pods.
    curl(
        &sb,
        "POST",
        "service:service-information",
        r#"{"service:service-information":{"service:services":[
            {"service:uid":"EeafFFB7-D9Fc-aAeD-FBc9-8Af8BFaacDD9",
             "service:cluster-ip-address":"10.96.0.40","service:endpoints":["pa","pb"]},
            {"service:uid":"empty-vip","service:cluster-ip-address":"10.96.0.41",
             "service:endpoints":[]}]}}"#,
    );
    for target in ["10.96.0.40:8080", "10.96.0.40:9090"] {
        let first = wait_for("the VIP to answer", Duration::from_secs(20), || {
            let a = pc
                .connect("tcp", target, 1, &["--timeout-ms", "1000"])
                .ok()?;
            a.first()?.as_ref().ok().cloned()
        });
        first.unwrap_or_else(|e| panic!("{target}: {e}\ndaemon log:\n{}", daemon.log()));
        let counts = tally(&pc.connect("tcp", target, 20, &[]).unwrap());
        assert!(
            counts.keys().all(|k| k == "pa" || k == "pb") && counts.values().sum::<usize>() == 20,
            "{target}: {counts:?}"
        );
    }
    let udp = tally(&pc.connect("udp", "10.96.0.40:5353", 10, &[]).unwrap());
    assert!(
        udp.keys().all(|k| k == "pa" || k == "pb") && udp.values().sum::<usize>() == 10,
        "udp: {udp:?}"
    );
    let refused = |target: &str| {
        let answer = pc
            .connect("tcp", target, 1, &["--timeout-ms", "2000"])
            .unwrap();
        assert!(
            answer[0].as_ref().is_err_and(|e| e.contains("refused")),
            "{target}: {answer:?}"
        );
    };
    // The port the client used is the port the pod sees: 7070, which no pod serves, is
    // refused by the pod's host stack, not forwarded to another port.
    refused("10.96.0.40:7070");
    // No pods: every port refused at once by svcflow.
    refused("10.96.0.41:8080");
}

/// A REST write of more services than the publisher translates at once
/// (`coe::rest::PUBLISH_PART`) is published in parts as it is translated: the node's task
/// sends each part as it comes (a debug line each) and logs the revision once, with the
/// counts of the whole write, once all of it is on the switch.
#[test]
fn a_write_of_thousands_of_services_is_sent_in_parts_and_reported_once() {
    use ovs_tests::http::Http;
    use ovs_tests::svcflow::REST;
    const S: usize = 12_000;
    const _: () = assert!(
        S > 2 * coe::rest::PUBLISH_PART,
        "enough services for two parts"
    );
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = Daemon::start(&sb, 1, "debug").unwrap();
    let mut http = Http::new(sb.node_netns(), REST);
    let mut put = |path: &str, body: &str| {
        let reply = wait_for(&format!("PUT {path}"), Duration::from_secs(30), || {
            http.request("PUT", &format!("/restconf/config/{path}"), body.as_bytes())
                .ok()
        })
        .unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()));
        assert!(
            matches!(reply.status, 200 | 201 | 204),
            "PUT {path}: HTTP {}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
    };
    put(
        "k8s-node:k8s-nodes-info/k8s-nodes/node-1",
        &format!(
            r#"{{"k8s-node:k8s-nodes":[{{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
            "k8s-node:internal-ip-address":"{NODE_IP}","k8s-node:pod-cidr":"10.244.0.0/16"}}]}}"#
        ),
    );
    // The node's first syncs (its gateway port is bound a little later) come before the
    // write, so that its line counts the write alone.
    let syncs = || {
        daemon
            .log()
            .matches("node n1: synced model revision")
            .count()
    };
    wait_for("node n1's first sync", Duration::from_secs(30), || {
        (syncs() > 0).then_some(())
    })
    .unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()));
    loop {
        let seen = syncs();
        std::thread::sleep(Duration::from_millis(700));
        if syncs() == seen {
            break;
        }
    }
    let ip = |base: u32, i: usize| std::net::Ipv4Addr::from(base + i as u32).to_string();
    let endpoints: Vec<String> = (0..S)
        .map(|i| {
            format!(
                r#"{{"uid":"ep-{i}","name":"svc-{i}","network-NS":"bulk","endpoint-addresses":[{{"ip-address":"{}","node-name":"n2"}}],"endpoint-ports":[{{"name":"http","port":8080}}]}}"#,
                ip(0x0a80_0000, i)
            )
        })
        .collect();
    let services: Vec<String> = (0..S)
        .map(|i| {
            format!(
                r#"{{"uid":"svc-{i}","name":"svc-{i}","network-NS":"bulk","cluster-ip-address":"{}","service-ports":[{{"name":"http","port":80,"target-port":"8080"}}]}}"#,
                ip(0x0a60_0001, i)
            )
        })
        .collect();
    put(
        "service:endpoints-info",
        &format!(
            r#"{{"service:endpoints-info":{{"endpoints":[{}]}}}}"#,
            endpoints.join(",")
        ),
    );
    put(
        "service:service-information",
        &format!(
            r#"{{"service:service-information":{{"services":[{}]}}}}"#,
            services.join(",")
        ),
    );
    let desired = format!("{S} groups desired)");
    let line = wait_for("the write's sync line", Duration::from_secs(60), || {
        daemon
            .log()
            .lines()
            .find(|l| l.contains("node n1: synced model revision") && l.contains(&desired))
            .map(str::to_string)
    })
    .unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()));
    let log = daemon.log();
    // Each service: its group, its address's flow and its endpoint's DNAT flow.
    assert!(
        line.contains(&format!(
            ": {} flows added, 0 modified, 0 deleted, {S} groups changed",
            2 * S
        )),
        "one line for the whole write: {line}\n{log}"
    );
    let parts = log
        .lines()
        .filter(|l| l.contains("node n1: sent part of model revision"))
        .count();
    assert!(
        parts >= 1,
        "no part was sent before the whole write:\n{log}"
    );
    let groups = sb.ofctl("dump-groups", BR, &["--no-names"]).unwrap();
    assert_eq!(
        groups
            .lines()
            .filter(|l| l.trim().starts_with("group_id="))
            .count(),
        S
    );
}
