//! README command 1: one Open vSwitch node in a sandbox, three pods, and `svcflow run`
//! programming a service that is posted over its REST northbound with curl.

use std::process::ExitCode;
use std::time::Duration;

use ovs_tests::svcflow::{Daemon, NB, OPENFLOW, REST, rest};
use ovs_tests::{Host, HostSpec, Sandbox, SandboxError, wait_for};

const BR: &str = "br-int";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a REST call as a curl command line, runs it, and prints the answer's size.
fn post(sb: &Sandbox, what: &str, path: &str, body: &str) -> Result<(), SandboxError> {
    println!("   $ curl -X PUT {NB}/{path} -d '{what}'");
    rest(sb, "PUT", path, &body.replace('\n', " "))?;
    Ok(())
}

fn pod(sb: &mut Sandbox, name: &str, ip: &str, ofport: u16) -> Result<Host, SandboxError> {
    let mac = format!("0a:58:0a:f4:00:{ofport:02x}");
    let spec = HostSpec::new(name, &format!("{ip}/24"), &mac, ofport).with_gateway("10.244.0.1");
    let host = sb.add_host(BR, spec)?;
    // The CNI's part: bind the pod's interface to its uid.
    sb.vsctl(&[
        "set",
        "interface",
        name,
        &format!("external_ids:iface-id={name}"),
    ])?;
    Ok(host)
}

fn pod_body(host: &Host) -> String {
    let (uid, ip, mac) = (&host.spec.name, host.ip(), host.mac());
    format!(
        r#"{{"pod:pods":[{{"pod:uid":"{uid}","pod:name":"{uid}","pod:network-NS":"default",
        "pod:host-ip-address":"192.168.50.10","pod:port-mac-address":"{mac}",
        "pod:interface":[{{"pod:uid":"{uid}","pod:ip-address":"{ip}","pod:network-type":"FLAT"}}]}}]}}"#
    )
}

fn run() -> Result<(), SandboxError> {
    println!("== a private Open vSwitch node (userspace datapath) and svcflow");
    let mut sb = Sandbox::start()?;
    let mut daemon = Daemon::start(&sb, 1, "info")?;
    println!(
        "   svcflow run --openflow-listen {OPENFLOW} --rest-listen {REST} --ovsdb-remote n1=unix:…/db.sock"
    );
    wait_for(
        "svcflow to create br-int and its gateway port",
        Duration::from_secs(30),
        || {
            sb.vsctl(&["get", "interface", "svc-gw", "ofport"])
                .ok()
                .filter(|p| p.trim() != "[]")
        },
    )?;
    println!(
        "   svcflow created br-int (fail mode secure, controller tcp:{OPENFLOW}) and port svc-gw"
    );
    let client = pod(&mut sb, "client", "10.244.0.10", 10)?;
    let web1 = pod(&mut sb, "web-1", "10.244.0.11", 11)?;
    let web2 = pod(&mut sb, "web-2", "10.244.0.12", 12)?;
    let _servers = [
        web1.serve("web-1", &["tcp:8080"])?,
        web2.serve("web-2", &["tcp:8080"])?,
    ];
    println!("   pods: client 10.244.0.10, web-1 10.244.0.11 and web-2 10.244.0.12 (HTTP on 8080)");

    println!("== posting the node, the pods, a service and its endpoints over REST");
    wait_for("the REST northbound", Duration::from_secs(20), || {
        rest(&sb, "GET", "k8s-node:k8s-nodes-info", "").ok()
    })?;
    post(
        &sb,
        "{node n1, pod CIDR 10.244.0.0/24}",
        "k8s-node:k8s-nodes-info/k8s-nodes/node-1",
        r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
        "k8s-node:internal-ip-address":"192.168.50.10","k8s-node:pod-cidr":"10.244.0.0/24"}]}"#,
    )?;
    for host in [&client, &web1, &web2] {
        let path = format!("pod:coe/pods/{}", host.spec.name);
        post(
            &sb,
            &format!("{{pod {} {}}}", host.spec.name, host.ip()),
            &path,
            &pod_body(host),
        )?;
    }
    post(
        &sb,
        "{service web, 10.96.0.10:80 -> 8080}",
        "service:service-information/services/svc-web",
        r#"{"service:services":[{"service:uid":"svc-web","service:name":"web",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.10",
        "service:service-ports":[{"service:name":"http","service:port":80,"service:target-port":"8080"}]}]}"#,
    )?;
    post(
        &sb,
        "{endpoints of web: web-1, web-2}",
        "service:endpoints-info/endpoints/ep-web",
        r#"{"service:endpoints":[{"service:uid":"ep-web","service:name":"web","service:network-NS":"default",
        "service:endpoint-addresses":[{"service:ip-address":"10.244.0.11","service:node-name":"n1"},
        {"service:ip-address":"10.244.0.12","service:node-name":"n1"}],
        "service:endpoint-ports":[{"service:name":"http","service:port":8080}]}]}"#,
    )?;

    println!("== 20 x curl http://10.96.0.10/ from the client pod");
    let curl = || client.output(&["curl", "-s", "-m", "2", "http://10.96.0.10/"]);
    wait_for("the service to answer", Duration::from_secs(20), || {
        curl().ok().filter(|o| o.status.success())
    })?;
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let out = curl()?;
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let key = if out.status.success() {
            answer
        } else {
            "(failed)".to_string()
        };
        *counts.entry(key).or_insert(0) += 1;
    }
    for (backend, n) in &counts {
        println!("   {backend:<8} answered {n}");
    }

    println!("== the operational view (GET /restconf/operational/service:service-information)");
    // OVS folds datapath counters into its statistics about once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let op = sb.node(&[
        "curl",
        "-sS",
        "-f",
        "http://127.0.0.1:8181/restconf/operational/service:service-information",
    ])?;
    let op: serde_json::Value = serde_json::from_str(&op)
        .map_err(|e| SandboxError::Invalid(format!("operational view: {e}")))?;
    let services = op
        .pointer("/service:service-information/services")
        .and_then(|v| v.as_array());
    for service in services.into_iter().flatten() {
        for group in service["groups"].as_array().into_iter().flatten() {
            println!(
                "   service {} on {}: group {}",
                service["name"].as_str().unwrap_or("?"),
                group["node"].as_str().unwrap_or("?"),
                group["group-id"]
            );
            for bucket in group["buckets"].as_array().into_iter().flatten() {
                println!(
                    "     endpoint {} weight {}: {} packets",
                    bucket["endpoint"].as_str().unwrap_or("?"),
                    bucket["weight"],
                    bucket["packet-count"]
                );
            }
        }
    }

    println!("== what svcflow installed for the service (svcflow ofp dump-groups / dump-flows)");
    let svcflow = ovs_tests::svcflow::svcflow_binary()?;
    let svcflow = svcflow.to_string_lossy();
    let target = sb.mgmt_target(BR);
    for line in sb.node(&[&svcflow, "ofp", "dump-groups", &target])?.lines() {
        println!("  {line}");
    }
    let flows = sb.node(&[&svcflow, "ofp", "dump-flows", &target])?;
    let service_flows: Vec<&str> = flows
        .lines()
        .filter(|l| l.contains("table=40,") && l.contains("group:") || l.contains("table=41,"))
        .collect();
    for line in &service_flows {
        println!("  {line}");
    }
    println!(
        "   ({} flows in all; the full pipeline is in docs/pipeline.md)",
        flows.lines().count()
    );

    println!("== stopping svcflow (SIGTERM leaves the flows in place) and cleaning up");
    daemon.terminate()?;
    Ok(())
}
