//! The daemon's `/metrics`, `/healthz` and `/livez`, scraped from a real `svcflow run` on a
//! sandbox node while it syncs a real switch: the counters and histograms must move with the
//! syncs they describe; and, watching the fake API server, the count of watches that relist.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::{Duration, Instant};

use ovs_tests::Sandbox;
use ovs_tests::svcflow::{Daemon, rest, sample};

fn scrape(sb: &Sandbox) -> String {
    sb.node(&["curl", "-sS", "-f", "http://127.0.0.1:10249/metrics"])
        .unwrap()
}

fn wait_until(what: &str, daemon: &Daemon, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn metrics_and_health_follow_real_syncs() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = Daemon::start(&sb, 1, "info").unwrap();
    let node = r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
        "k8s-node:internal-ip-address":"192.168.50.10","k8s-node:pod-cidr":"10.244.0.0/24"}]}"#;
    wait_until("the REST northbound answers", &daemon, || {
        rest(&sb, "PUT", "k8s-node:k8s-nodes-info/k8s-nodes/node-1", node).is_ok()
    });
    wait_until("n1 synced", &daemon, || {
        daemon.log().contains("node n1: synced model revision")
    });
    let first = scrape(&sb);
    assert_eq!(
        sample(&first, "svcflow_switch_connected{node=\"n1\"}"),
        Some(1.0),
        "{first}"
    );
    assert!(sample(&first, "svcflow_flows{node=\"n1\"}").unwrap() > 0.0);
    assert_eq!(
        sample(&first, "svcflow_ovsdb_connected{node=\"n1\"}"),
        Some(1.0)
    );
    let syncs = sample(&first, "kubeproxy_sync_proxy_rules_duration_seconds_count").unwrap();
    assert!(syncs >= 1.0, "{first}");
    assert!(sample(&first, "kubeproxy_sync_proxy_rules_last_timestamp_seconds").unwrap() > 1.7e9);
    let programmed = sample(
        &first,
        "kubeproxy_network_programming_duration_seconds_count",
    )
    .unwrap_or(0.0);
    let services = sample(&first, "kubeproxy_sync_proxy_rules_service_changes_total").unwrap();
    let ok_requests = sample(&first, "svcflow_rest_requests_total{code=\"200\"}").unwrap();
    let committed = "svcflow_bundles_total{node=\"n1\",result=\"committed\"}";
    let bundles = sample(&first, committed).unwrap();
    assert!(bundles >= 1.0, "{first}");
    let no_local = |policy: &str| {
        format!(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total{{node=\"n1\",traffic_policy=\"{policy}\"}}"
        )
    };
    assert_eq!(sample(&first, &no_local("external")), Some(0.0), "{first}");

    // One service: one more service change, a sync, its programming latency, a REST 200.
    rest(
        &sb,
        "PUT",
        "service:service-information/services/svc-m",
        r#"{"service:services":[{"service:uid":"svc-m","service:name":"m",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.88",
        "service:service-ports":[{"service:name":"http","service:port":80,
        "service:target-port":"8080"}]}]}"#,
    )
    .unwrap();
    wait_until("the service synced", &daemon, || {
        sb.dump_flows("br-int")
            .unwrap()
            .contains("nw_dst=10.96.0.88")
    });
    let mut then = String::new();
    wait_until("the metrics moved", &daemon, || {
        then = scrape(&sb);
        sample(
            &then,
            "kubeproxy_network_programming_duration_seconds_count",
        )
        .is_some_and(|n| n > programmed)
    });
    assert_eq!(
        sample(&then, "kubeproxy_sync_proxy_rules_service_changes_total"),
        Some(services + 1.0),
        "{then}"
    );
    assert!(sample(&then, "kubeproxy_sync_proxy_rules_duration_seconds_count").unwrap() > syncs);
    assert_eq!(
        sample(&then, "svcflow_rest_requests_total{code=\"200\"}"),
        Some(ok_requests + 1.0)
    );
    assert_eq!(
        sample(&then, "kubeproxy_sync_proxy_rules_service_changes_pending"),
        Some(0.0)
    );
    assert!(sample(&then, committed).unwrap() > bundles, "{then}");
    assert_eq!(
        sample(
            &then,
            "svcflow_bundles_total{node=\"n1\",result=\"failed\"}"
        ),
        None,
        "{then}"
    );

    // A NodePort with externalTrafficPolicy Local and no endpoint anywhere: one port
    // without a local endpoint, as kube-proxy counts it; gone with the service.
    let local = "service:service-information/services/svc-l";
    rest(
        &sb,
        "PUT",
        local,
        r#"{"service:services":[{"service:uid":"svc-l","service:name":"l",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.89",
        "service:external-traffic-policy":"Local",
        "service:service-ports":[{"service:name":"http","service:port":80,
        "service:target-port":"8080","service:node-port":30089}]}]}"#,
    )
    .unwrap();
    wait_until("the Local service counted", &daemon, || {
        sample(&scrape(&sb), &no_local("external")) == Some(1.0)
    });
    assert_eq!(sample(&scrape(&sb), &no_local("internal")), Some(0.0));
    rest(&sb, "DELETE", local, "").unwrap();
    wait_until("the Local service no longer counted", &daemon, || {
        sample(&scrape(&sb), &no_local("external")) == Some(0.0)
    });
    // A 404 is counted by its status.
    let _ = rest(&sb, "GET", "service:service-information/services/nope", "");
    let after = scrape(&sb);
    assert_eq!(
        sample(&after, "svcflow_rest_requests_total{code=\"404\"}"),
        Some(1.0),
        "{after}"
    );

    // `svcflow get services` reads the operational view over REST, in the node's namespace.
    let bin = ovs_tests::svcflow::svcflow_binary().unwrap();
    let bin = bin.to_string_lossy().to_string();
    let table = sb.node(&[&bin, "get", "services", "default/m"]).unwrap();
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(row.starts_with("default") && row.contains(" m "), "{table}");
    let json = sb.node(&[&bin, "get", "services", "-o", "json"]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v.as_array().unwrap().iter().any(|s| s["name"] == "m"),
        "{json}"
    );
    assert!(
        sb.node(&[&bin, "get", "services", "default/absent"])
            .is_err()
    );

    // Health: 200 with kube-proxy's body, on both paths.
    for path in ["/healthz", "/livez"] {
        let body = sb
            .node(&[
                "curl",
                "-sS",
                "-f",
                &format!("http://127.0.0.1:10256{path}"),
            ])
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(v["lastUpdated"].as_str().unwrap().ends_with('Z'), "{body}");
        assert!(v["currentTime"].as_str().unwrap().ends_with('Z'), "{body}");
    }
}

/// Kubernetes watches that start over are counted by resource: after the fake API server
/// expires every watch (a 410, as after an etcd compaction), each watcher relists and
/// `svcflow_kubernetes_watch_relists_total` counts it; the first lists are not counted.
#[test]
fn kubernetes_watch_relists_are_counted() {
    let node = ovs_tests::kube::KubeNode::start();
    node.wait("the first lists", || {
        node.daemon
            .log()
            .contains("every watched kind is listed")
            .then_some(())
    });
    let relists = |scrape: &str| {
        ["services", "endpointslices", "nodes", "pods", "namespaces"].map(|r| {
            sample(
                scrape,
                &format!("svcflow_kubernetes_watch_relists_total{{resource=\"{r}\"}}"),
            )
            .unwrap_or(0.0)
        })
    };
    assert_eq!(relists(&scrape(&node.sb)), [0.0; 5], "no relist yet");
    node.api.expire_watches();
    node.wait("every watch to relist", || {
        relists(&scrape(&node.sb))
            .iter()
            .all(|n| *n >= 1.0)
            .then_some(())
    });
}

/// `svcflow plan` is a dry run against the live switch: empty while the switch holds the
/// model; after flows and a group are changed behind svcflow's back, it prints the bundle
/// that puts them back (and changes nothing itself); applied with `ovs-ofctl bundle`, that
/// bundle leaves nothing more to plan.
#[test]
fn a_plan_shows_drift_on_the_live_switch_and_ovs_ofctl_applies_it() {
    use ovs_tests::svcflow::fixture::{put_web, web_pods};
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = Daemon::start(&sb, 1, "info").unwrap();
    wait_until("br-int", &daemon, || sb.dump_flows("br-int").is_ok());
    let (_client, _servers) = web_pods(&mut sb);
    put_web(&|path, body| {
        rest(&sb, "PUT", path, body).unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    });
    wait_until("the service synced", &daemon, || {
        sb.dump_flows("br-int")
            .is_ok_and(|flows| flows.contains("nw_dst=10.96.0.10"))
    });
    let bin = ovs_tests::svcflow::svcflow_binary().unwrap();
    let bin = bin.to_string_lossy().to_string();
    let plan = |sb: &Sandbox, more: &[&str]| -> String {
        let mut argv = vec![bin.as_str(), "plan"];
        argv.extend_from_slice(more);
        sb.node(&argv)
            .unwrap_or_else(|e| panic!("svcflow plan: {e}\n{}", daemon.log()))
    };
    let in_sync = "# node n1: the switch holds the model; nothing to change\n";
    assert_eq!(plan(&sb, &[]), in_sync);

    // Drift: the service's flows deleted, and a group's buckets emptied.
    let before = sb.dump_flows("br-int").unwrap();
    let groups = sb.ofctl("dump-groups", "br-int", &[]).unwrap();
    let group = groups
        .lines()
        .find_map(|l| l.trim().strip_prefix("group_id=")?.split(',').next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no group: {groups}"));
    sb.ofctl("del-flows", "br-int", &["ip,nw_dst=10.96.0.10"])
        .unwrap();
    sb.ofctl(
        "mod-group",
        "br-int",
        &[&format!("group_id={group},type=all")],
    )
    .unwrap();
    let drifted = plan(&sb, &["--node", "n1"]);
    let lines: Vec<&str> = drifted.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("flow add") && l.contains("nw_dst=10.96.0.10")),
        "{drifted}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("group modify group_id={group},"))),
        "{drifted}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("flow add") || l.starts_with("group modify")),
        "only what drifted: {drifted}"
    );
    eprintln!("the plan after the drift:\n{drifted}");
    // The plan changed nothing: the flows are still gone.
    assert!(
        !sb.dump_flows("br-int")
            .unwrap()
            .contains("nw_dst=10.96.0.10")
    );
    // The JSON form says the same.
    let json: serde_json::Value =
        serde_json::from_str(&plan(&sb, &["--node", "n1", "-o", "json"])).unwrap();
    assert_eq!(json["nodes"][0]["node"], "n1");
    assert_eq!(
        json["nodes"][0]["changes"].as_array().unwrap().len(),
        lines.len()
    );

    // Applied by hand, as its header says, it restores the switch exactly.
    let owned: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    sb.ofctl_bundle("br-int", &owned).unwrap();
    assert_eq!(sb.dump_flows("br-int").unwrap(), before);
    assert_eq!(plan(&sb, &[]), in_sync);

    // The switch gone, a REST change meanwhile: planned against what svcflow last
    // synced to the switch, so the plan is that change alone.
    // (svcflow keeps the bridge's controller set over OVSDB: the switch goes by stopping.)
    sb.stop_vswitchd(true).unwrap();
    wait_until("n1's switch gone", &daemon, || {
        plan(&sb, &["--node", "n1"]).contains("the switch is not connected")
    });
    let extra = r#"{"service:services":[{"service:uid":"svc-extra","service:name":"extra",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.77",
        "service:service-ports":[{"service:name":"http","service:protocol":"TCP",
        "service:port":80,"service:target-port":"8080"}]}]}"#;
    rest(
        &sb,
        "PUT",
        "service:service-information/services/svc-extra",
        extra,
    )
    .unwrap();
    let away = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    };
    let mut offline = String::new();
    wait_until(
        "the change planned for the departed switch",
        &daemon,
        || {
            offline = plan(&sb, &["--node", "n1"]);
            away(&offline)
                .iter()
                .any(|l| l.contains("nw_dst=10.96.0.77"))
        },
    );
    assert!(
        offline.starts_with("# node n1: the switch is not connected (since 20"),
        "{offline}"
    );
    assert!(
        away(&offline)
            .iter()
            .all(|l| l.starts_with("flow add") && l.contains("nw_dst=10.96.0.77")),
        "only the change: {offline}"
    );
    // Back: the daemon syncs it, and the live plan is empty again.
    sb.start_vswitchd().unwrap();
    wait_until("the switch back and synced", &daemon, || {
        sb.dump_flows("br-int")
            .is_ok_and(|f| f.contains("nw_dst=10.96.0.77"))
            && plan(&sb, &[]) == in_sync
    });

    // A node the model does not have is an error, said.
    let mut argv = vec![bin.as_str(), "plan", "--node", "nope"];
    argv.truncate(4);
    let err = sb.node(&argv).unwrap_err().to_string();
    assert!(err.contains("no node `nope` in the model"), "{err}");
}

/// In Kubernetes mode a change that comes from the API server is a new model revision too:
/// the network-programming latency gets a sample for it once the switch has it, and nothing
/// stays pending; an EndpointSlice's `last-change-trigger-time` starts its sample, as
/// kube-proxy's does.
#[test]
fn kubernetes_changes_are_programmed_and_measured() {
    let mut node = ovs_tests::kube::KubeNode::start();
    let pa = node.add_pod("pa", "10.244.0.11", 11);
    let _server = pa.serve("pa", &["tcp:8080"]).unwrap();
    node.wait("the first sync", || {
        node.daemon
            .log()
            .contains("node n1: synced model revision")
            .then_some(())
    });
    let programmed = |scrape: &str| {
        sample(
            scrape,
            "kubeproxy_network_programming_duration_seconds_count",
        )
        .unwrap_or(0.0)
    };
    let before = programmed(&scrape(&node.sb));
    node.put(&ovs_tests::kube::service(
        "measured",
        serde_json::json!({"type": "ClusterIP", "clusterIP": "10.96.0.66",
            "clusterIPs": ["10.96.0.66"],
            "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]}),
        None,
    ));
    node.wait("the Service on the switch", || {
        node.sb
            .dump_flows("br-int")
            .ok()
            .filter(|f| f.contains("nw_dst=10.96.0.66"))
    });
    node.wait("a programming sample for it", || {
        let now = scrape(&node.sb);
        (programmed(&now) > before
            && sample(&now, "kubeproxy_sync_proxy_rules_service_changes_pending") == Some(0.0))
        .then_some(())
    });

    // Its endpoints, as the EndpointSlice controller wrote them 5 s after the change began.
    let sum = |scrape: &str| {
        sample(scrape, "kubeproxy_network_programming_duration_seconds_sum").unwrap_or(0.0)
    };
    let (count_before, sum_before) = {
        let now = scrape(&node.sb);
        (programmed(&now), sum(&now))
    };
    let began = k8s_openapi::chrono::Utc::now() - k8s_openapi::chrono::Duration::seconds(5);
    let mut slice = ovs_tests::kube::slice(
        "measured",
        "measured-1",
        serde_json::json!([{"name": "http", "protocol": "TCP", "port": 8080}]),
        vec![ovs_tests::kube::endpoint(
            "10.244.0.11",
            ovs_tests::kube::NODE,
            ovs_tests::kube::Conditions::READY,
        )],
    );
    slice.metadata.annotations = Some(
        [(
            coe::k8s::TRIGGER_TIME_ANNOTATION.to_string(),
            began.to_rfc3339_opts(k8s_openapi::chrono::SecondsFormat::Secs, true),
        )]
        .into(),
    );
    node.put(&slice);
    node.wait("a sample from the trigger time", || {
        let now = scrape(&node.sb);
        (programmed(&now) > count_before).then(|| sum(&now) - sum_before)
    });
    let now = scrape(&node.sb);
    let took = sum(&now) - sum_before;
    assert!(
        (4.0..30.0).contains(&took),
        "the sample should count from the trigger time, 5 s back: {took} s\n{now}"
    );
}
