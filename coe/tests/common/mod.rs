//! Shared helpers for the REST tests: an in-process northbound and sample COE bodies.
#![allow(dead_code)]

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use coe::rest::operational::{OperationalSource, Unavailable};
use coe::rest::types::Kind;
use coe::rest::{Northbound, RestConfig};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tempfile::TempDir;
use tower::ServiceExt;

/// A northbound over a fresh state directory.
pub struct Harness {
    pub dir: TempDir,
    pub nb: Northbound,
    pub router: Router,
}

impl Harness {
    pub fn new() -> Self {
        Self::with(|_| {}, Arc::new(Unavailable))
    }

    pub fn with(edit: impl FnOnce(&mut RestConfig), op: Arc<dyn OperationalSource>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = RestConfig::new(dir.path().join("state"));
        edit(&mut config);
        let nb = Northbound::open(&config, op).unwrap();
        let router = nb.router();
        Self { dir, nb, router }
    }

    /// Reopens the same state directory, as a restarted daemon would.
    pub fn reopen(self) -> Self {
        let Harness { dir, nb, router } = self;
        drop((nb, router));
        let config = RestConfig::new(dir.path().join("state"));
        // The old store closes (and frees its lock) once its publisher lets go of it.
        let mut tries = 0;
        let nb = loop {
            match Northbound::open(&config, Arc::new(Unavailable)) {
                Err(coe::rest::StartError::State(coe::rest::durable::OpenError::Locked(_)))
                    if tries < 200 =>
                {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.unwrap(),
            }
        };
        let router = nb.router();
        Self { dir, nb, router }
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let mut req = Request::builder().method(method).uri(path);
        let body = match body {
            Some(v) => {
                req = req.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        send(&self.router, req.body(body).unwrap()).await
    }
}

/// Sends one request through the router; the body is parsed as JSON (Null if empty).
pub async fn send(router: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, value)
}

/// The `error-path` and `error-tag` of a RESTCONF error body.
pub fn error_of(body: &Value) -> (String, String) {
    let e = &body["errors"]["error"][0];
    (
        e["error-path"].as_str().unwrap_or("").to_string(),
        e["error-tag"].as_str().unwrap_or("").to_string(),
    )
}

pub fn container(kind: Kind) -> String {
    kind.container_path()
}

pub fn item(kind: Kind, uid: &str) -> String {
    format!("{}/{}/{uid}", kind.container_path(), kind.list())
}

/// A service as the COE watcher sends it: prefixed keys, `cluster-id`, node port 0.
pub fn watcher_service(uid: &str, name: &str, vip: &str, port: u16) -> Value {
    json!({
        "service:uid": uid,
        "service:cluster-id": "00000000-0000-0000-0000-000000000000",
        "service:name": name,
        "service:cluster-ip-address": vip,
        "service:network-NS": "default",
        "service:service-ports": [
            { "service:name": "http", "service:port": port, "service:target-port": "8080", "service:node-port": 0 }
        ]
    })
}

/// Endpoints as the watcher sends them (node-name may be null).
pub fn watcher_endpoints(uid: &str, name: &str, ips: &[&str]) -> Value {
    let addrs: Vec<Value> = ips
        .iter()
        .map(|ip| json!({ "service:ip-address": ip, "service:host-name": "", "service:node-name": null }))
        .collect();
    json!({
        "service:uid": uid,
        "service:cluster-id": "c1",
        "service:name": name,
        "service:network-NS": "default",
        "service:endpoint-addresses": addrs,
        "service:endpoint-ports": [ { "service:name": "http", "service:port": 8080 } ]
    })
}

/// A pod as the watcher sends it: unprefixed keys, interface uid = pod uid.
pub fn watcher_pod(uid: &str, name: &str, ip: &str, host_ip: &str) -> Value {
    json!({
        "uid": uid, "cluster-id": "c1", "name": name, "host-ip-address": host_ip,
        "network-NS": "default", "port-mac-address": "",
        "interface": [ { "uid": uid, "ip-address": ip, "network-id": "00000000-0000-0000-0000-000000000000",
                         "network-type": "FLAT", "segmentation-id": 0 } ]
    })
}

/// A node as the watcher sends it: `k8s-node:` keys.
pub fn watcher_node(uid: &str, host: &str, internal: &str) -> Value {
    json!({
        "k8s-node:uid": uid, "k8s-node:cluster-id": "c1", "k8s-node:pod-cidr": "10.244.1.0/24",
        "k8s-node:host-name": host, "k8s-node:internal-ip-address": internal,
        "k8s-node:external-ip-address": "192.0.2.10"
    })
}

/// A valid item of each kind, with the given uid.
pub fn sample(kind: Kind, uid: &str, n: u8) -> Value {
    match kind {
        Kind::Service => watcher_service(uid, &format!("svc-{uid}"), &format!("10.96.0.{n}"), 80),
        Kind::Endpoints => {
            watcher_endpoints(uid, &format!("svc-{uid}"), &[&format!("10.244.1.{n}")])
        }
        Kind::Pod => watcher_pod(
            uid,
            &format!("pod-{uid}"),
            &format!("10.244.1.{n}"),
            "172.18.0.2",
        ),
        Kind::Node => watcher_node(uid, &format!("node-{uid}"), &format!("172.18.0.{n}")),
    }
}

/// The list-wrapped body the watcher PUTs to an item URL.
pub fn wrapped(kind: Kind, item: Value) -> Value {
    json!({ kind.qualified_list(): [item] })
}

/// A container body.
pub fn container_body(kind: Kind, items: Vec<Value>) -> Value {
    json!({ kind.qualified_container(): { kind.qualified_list(): items } })
}

/// Sets the members of `patch` on `target`.
pub fn merge(target: &mut Value, patch: Value) {
    if let (Some(t), Value::Object(p)) = (target.as_object_mut(), patch) {
        for (k, v) in p {
            t.insert(k, v);
        }
    }
}
