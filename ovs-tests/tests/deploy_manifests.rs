//! The Deployments in `deploy/` run what `svcflow run` accepts: each container's arguments,
//! with the pod's address and the database hosts filled in, pass `svcflow run --check`; and
//! the replicated ones (`deploy/ha/`) are what docs/ha.md says: three replicas, one per host,
//! replaced one at a time without a surge, ready on `/healthz`, electing on a shared
//! `--store ovsdb:` or over Leases that their Role lets them write.
//!
//! It runs `target/<profile>/svcflow`: run `cargo build -p svcflow` first.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;

use ovs_tests::svcflow::svcflow_binary;
use serde_yaml::Value;

fn deployment(path: &str) -> Value {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    let doc: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(doc["kind"].as_str(), Some("Deployment"), "{path}");
    doc
}

fn yaml(path: &str) -> Value {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()
}

/// The container's arguments after `run`, with `$(POD_IP)`, `$(POD_NAMESPACE)` and `DB-n`
/// filled in.
fn run_args(doc: &Value) -> Vec<String> {
    let args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap();
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$(POD_IP)", "192.0.2.10")
                .replace("$(POD_NAMESPACE)", "svcflow-system")
                .replace("DB-1", "192.0.2.11")
                .replace("DB-2", "192.0.2.12")
                .replace("DB-3", "192.0.2.13")
        })
        .collect();
    assert_eq!(args[0], "run");
    args[1..].to_vec()
}

fn check(path: &str) -> String {
    let args = run_args(&deployment(path));
    let out = Command::new(svcflow_binary().unwrap())
        .arg("run")
        .args(&args)
        .arg("--check")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{path}: svcflow run {args:?} --check failed:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_single_controller_deployment_runs_a_valid_configuration() {
    let doc = deployment("deploy/deployment.yaml");
    assert_eq!(doc["spec"]["replicas"].as_u64(), Some(1));
    let config = check("deploy/deployment.yaml");
    assert!(config.contains("store: Local"), "{config}");
}

#[test]
fn the_replicated_deployment_runs_three_replicas_on_a_shared_store() {
    let doc = deployment("deploy/ha/deployment.yaml");
    let spec = &doc["spec"];
    assert_eq!(spec["replicas"].as_u64(), Some(3));
    assert_eq!(spec["strategy"]["type"].as_str(), Some("RollingUpdate"));
    assert_eq!(
        spec["strategy"]["rollingUpdate"]["maxSurge"].as_u64(),
        Some(0)
    );
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["hostNetwork"].as_bool(), Some(true));
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"].as_str(), Some("kubernetes.io/hostname"));
    let container = &pod["containers"][0];
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    let config = check("deploy/ha/deployment.yaml");
    assert!(config.contains("Ovsdb("), "{config}");
    assert!(config.contains("tcp:192.0.2.13:6641"), "{config}");
    assert!(config.contains("hold_down: 30s"), "{config}");
}

#[test]
fn the_lease_deployment_runs_three_replicas_electing_over_leases_its_role_allows() {
    let doc = deployment("deploy/ha/lease-deployment.yaml");
    let spec = &doc["spec"];
    assert_eq!(spec["replicas"].as_u64(), Some(3));
    assert_eq!(
        spec["strategy"]["rollingUpdate"]["maxSurge"].as_u64(),
        Some(0)
    );
    let pod = &spec["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    // The namespace the Leases live in is the pod's own, from the downward API.
    let env = container["env"].as_sequence().unwrap();
    let namespace = env
        .iter()
        .find(|e| e["name"].as_str() == Some("POD_NAMESPACE"))
        .unwrap();
    assert_eq!(
        namespace["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.namespace")
    );
    let config = check("deploy/ha/lease-deployment.yaml");
    assert!(config.contains("Lease {"), "{config}");
    assert!(config.contains("namespace: \"svcflow-system\""), "{config}");
    assert!(config.contains("duration: 15s"), "{config}");
    assert!(config.contains("store: Local"), "{config}");

    // The Role grants exactly what the election does to Leases, bound to the pods' account.
    let role = yaml("deploy/ha/lease-role.yaml");
    assert_eq!(role["kind"].as_str(), Some("Role"));
    assert_eq!(
        role["metadata"]["namespace"], doc["metadata"]["namespace"],
        "the Role is in the pods' namespace"
    );
    let rule = &role["rules"][0];
    assert_eq!(rule["apiGroups"][0].as_str(), Some("coordination.k8s.io"));
    assert_eq!(rule["resources"][0].as_str(), Some("leases"));
    let verbs: Vec<&str> = rule["verbs"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(verbs, ["get", "list", "watch", "create", "update"]);
    let binding = yaml("deploy/ha/lease-rolebinding.yaml");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"][0]["name"].as_str(),
        pod["serviceAccountName"].as_str()
    );
    assert_eq!(
        binding["subjects"][0]["namespace"],
        doc["metadata"]["namespace"]
    );
}
