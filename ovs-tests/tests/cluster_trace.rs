//! The live packet trace (`svcflow trace`) on the three-node lab
//! (`ovs-tests/lab/three-nodes.toml`, routed underlay): the CLI asks the daemon's REST, which
//! injects a tagged probe into the real switch and reports its path. Four paths: a service
//! hit delivered on the same node, a service whose endpoint is on another node (seen leaving
//! n1 and arriving on n2), a service without endpoints (refused), and a load balancer whose
//! source ranges leave the client out (dropped). Afterwards no temporary flow is left.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::time::Duration;

use ovs_tests::lab::{Lab, LabOptions, ServiceSpec, Topology};
use serde_json::Value;

fn fail(lab: &Lab, what: &dyn std::fmt::Display) -> ! {
    panic!(
        "{what}\n{}\nsvcflow log tail:\n{}",
        lab.status(),
        lab.daemon_log_tail(60)
    );
}

fn service(name: &str, ip: &str, endpoints: &[&str]) -> ServiceSpec {
    ServiceSpec {
        name: name.into(),
        namespace: "default".into(),
        cluster_ip: ip.parse().unwrap(),
        cluster_ip6: None,
        port: 80,
        target_port: Some(8080),
        protocol: Default::default(),
        node_port: None,
        endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
    }
}

/// `svcflow trace --node NODE --from FROM --to TO [EXTRA…]` in the controller's namespace:
/// its standard output, or its standard error.
fn svcflow_trace(
    lab: &Lab,
    node: &str,
    from: &str,
    to: &str,
    extra: &[&str],
) -> Result<String, String> {
    let mut args = vec!["trace", "--node", node, "--from", from, "--to", to];
    args.extend_from_slice(extra);
    let out = lab.svcflow(&args).unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The trace's JSON (`-o json`), or the command's error.
fn trace(lab: &Lab, node: &str, from: &str, to: &str) -> Result<Value, String> {
    svcflow_trace(lab, node, from, to, &["-o", "json"]).map(|o| serde_json::from_str(&o).unwrap())
}

/// Each hop as `node:table:role`.
fn path(report: &Value) -> Vec<String> {
    report["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            format!(
                "{}:{}:{}",
                h["node"].as_str().unwrap(),
                h["table"],
                h["role"].as_str().unwrap()
            )
        })
        .collect()
}

fn hop<'a>(report: &'a Value, role: &str) -> &'a Value {
    report["hops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["role"] == role)
        .unwrap_or_else(|| panic!("no {role} hop: {report:#}"))
}

#[test]
fn traces_a_local_hit_a_cross_node_path_a_refusal_and_a_drop_and_leaves_nothing() {
    assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let topology =
        Topology::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/three-nodes.toml"))
            .unwrap();
    let mut lab = Lab::up(&topology, &LabOptions::default())
        .unwrap_or_else(|e| panic!("cannot bring the lab up: {e}"));
    for spec in [
        service("near", "10.96.0.21", &["n1-a"]),
        service("far", "10.96.0.22", &["n2-a"]),
        service("none", "10.96.0.23", &[]),
        service("guarded", "10.96.0.24", &["n1-a"]),
    ] {
        if let Err(e) = lab.put_service(spec) {
            fail(&lab, &format!("PUT service: {e}"));
        }
    }
    // guarded: a load balancer at 192.168.50.100 open to 10.9.9.0/24 only (svcflow's REST
    // extension), which leaves the outside host (192.168.50.200) out.
    let guarded = lab.topology().service("guarded").unwrap().clone();
    let mut body: Value = serde_json::from_str(&guarded.rest_body()).unwrap();
    body["service:services"][0]["service:ingress-ip-address"] =
        serde_json::json!(["192.168.50.100"]);
    body["service:services"][0]["service:load-balancer-source-ranges"] =
        serde_json::json!(["10.9.9.0/24"]);
    if let Err(e) = lab.rest("PUT", &guarded.rest_path(), &body.to_string()) {
        fail(&lab, &format!("PUT guarded: {e}"));
    }
    if let Err(e) = lab.wait_synced(Duration::from_secs(20)) {
        fail(&lab, &e);
    }
    let drop_flow = "priority=90,tcp,nw_dst=192.168.50.100,tp_dst=80 actions=drop";
    let synced = ovs_tests::wait_for(
        "the load balancer's drop on n1",
        Duration::from_secs(10),
        || {
            lab.node("n1")
                .unwrap()
                .dump_flows("br-int")
                .unwrap()
                .contains(drop_flow)
                .then_some(())
        },
    );
    synced.unwrap_or_else(|e| fail(&lab, &e));

    // A hit on the same node: classifier, the service's flow, output to the endpoint's port.
    let near =
        trace(&lab, "n1", "default/n1-b", "10.96.0.21:80").unwrap_or_else(|e| fail(&lab, &e));
    assert_eq!(
        path(&near),
        ["n1:0:classifier", "n1:40:service", "n1:60:output"],
        "{near:#}"
    );
    assert_eq!(near["outcome"], "delivered", "{near:#}");
    assert_eq!(
        near["nat"], "dst 10.96.0.21:80 -> 10.244.1.11:8080",
        "{near:#}"
    );
    assert!(
        hop(&near, "service")["note"]
            .as_str()
            .unwrap()
            .contains("default/near:80/tcp"),
        "{near:#}"
    );
    let result = near["result"].as_str().unwrap();
    assert!(
        result.contains("(pod default/n1-a) on node n1")
            && result.contains("endpoint 10.244.1.11:8080"),
        "{near:#}"
    );
    // The packet at the exit is the translated one, as the switch reported it.
    assert!(
        hop(&near, "output")["packet"]
            .as_str()
            .unwrap()
            .contains("nw_src=10.244.1.12,nw_dst=10.244.1.11"),
        "{near:#}"
    );

    // Across nodes: n1 sends it on by its uplink, n2 takes it in and outputs it to n2-a.
    let far = trace(&lab, "n1", "default/n1-a", "10.96.0.22:80").unwrap_or_else(|e| fail(&lab, &e));
    assert_eq!(
        path(&far),
        [
            "n1:0:classifier",
            "n1:40:service",
            "n1:60:onward",
            "n2:0:arrived",
            "n2:60:output"
        ],
        "{far:#}"
    );
    assert_eq!(far["outcome"], "delivered", "{far:#}");
    assert!(
        hop(&far, "onward")["note"]
            .as_str()
            .unwrap()
            .contains("(uplink) towards node n2"),
        "{far:#}"
    );
    assert!(
        far["result"]
            .as_str()
            .unwrap()
            .contains("(pod default/n2-a) on node n2"),
        "{far:#}"
    );

    // No endpoint: refused by the service's own flow.
    let none =
        trace(&lab, "n2", "default/n2-b", "10.96.0.23:80").unwrap_or_else(|e| fail(&lab, &e));
    assert_eq!(path(&none), ["n2:0:classifier", "n2:40:refuse"], "{none:#}");
    assert_eq!(none["outcome"], "refused", "{none:#}");
    assert!(
        none["result"]
            .as_str()
            .unwrap()
            .contains("default/none:80/tcp has no endpoint"),
        "{none:#}"
    );

    // From the outside host, through n1's uplink, to the load balancer it may not reach.
    let dropped =
        trace(&lab, "n1", "192.168.50.200", "192.168.50.100:80").unwrap_or_else(|e| fail(&lab, &e));
    assert_eq!(
        path(&dropped),
        ["n1:0:classifier", "n1:40:drop"],
        "{dropped:#}"
    );
    assert_eq!(dropped["outcome"], "dropped", "{dropped:#}");
    assert!(
        hop(&dropped, "drop")["flow"]
            .as_str()
            .unwrap()
            .contains(drop_flow),
        "{dropped:#}"
    );

    // The text names the same path in ovs-ofctl terms.
    let text = svcflow_trace(&lab, "n1", "default/n1-a", "10.96.0.22:80", &[])
        .unwrap_or_else(|e| fail(&lab, &e));
    eprintln!("svcflow trace printed:\n{text}");
    assert!(
        text.contains("n2 table=60 output: output to port"),
        "{text}"
    );
    assert!(
        text.contains("nat: dst 10.96.0.22:80 -> 10.244.2.11:8080"),
        "{text}"
    );

    // Typed refusals: an unknown node, a bad destination, a pod of another node.
    let e = trace(&lab, "n9", "default/n1-a", "10.96.0.22:80").unwrap_err();
    assert!(e.contains("no node `n9`"), "{e}");
    let e = trace(&lab, "n1", "default/n1-a", "10.96.0.22").unwrap_err();
    assert!(e.contains("is not IP:PORT"), "{e}");
    let e = trace(&lab, "n1", "default/n2-a", "10.96.0.22:80").unwrap_err();
    assert!(e.contains("is on node n2"), "{e}");

    // Nothing of the traces is left on any switch, and svcflow's own flows are untouched.
    for node in ["n1", "n2", "n3"] {
        let flows = lab.node(node).unwrap().dump_flows("br-int").unwrap();
        assert!(!flows.contains("cookie=0x5354"), "{node}:\n{flows}");
        assert!(!flows.contains("nw_tos="), "{node}:\n{flows}");
    }
    if let Err(e) = lab.wait_synced(Duration::from_secs(5)) {
        fail(&lab, &e);
    }
    lab.down().unwrap();
}
