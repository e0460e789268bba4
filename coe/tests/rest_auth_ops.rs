//! Auth, the loopback rule, the operational view, the OpenAPI document, and a real listener.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::io::{Read, Write};
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use base64::Engine;
use coe::rest::operational::{
    BoxFuture, BucketState, FlowState, GroupState, OperationalSource, ServiceState, Unavailable,
};
use coe::rest::server::{OPENAPI_PATH, OPERATIONAL_PATH};
use coe::rest::types::Kind;
use coe::rest::{Northbound, RestConfig, StartError};
use common::*;
use serde_json::{Value, json};

fn with_auth(h_dir: &std::path::Path) -> std::path::PathBuf {
    let path = h_dir.join("credentials");
    std::fs::write(
        &path,
        "# svcflow REST users\nbasic admin admin\nbearer s3cr3t-t0ken\n",
    )
    .unwrap();
    path
}

fn basic(user_pass: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(user_pass)
    )
}

#[tokio::test]
async fn auth_accepts_basic_and_bearer_and_refuses_the_rest() {
    let cred_dir = tempfile::tempdir().unwrap();
    let file = with_auth(cred_dir.path());
    let h = Harness::with(|c| c.auth_file = Some(file), Arc::new(Unavailable));
    let path = item(Kind::Service, "s1");
    let body = wrapped(Kind::Service, watcher_service("s1", "web", "10.96.0.1", 80)).to_string();
    let put = |auth: Option<String>| {
        let mut r = Request::put(&path).header(header::CONTENT_TYPE, "application/json");
        if let Some(a) = auth {
            r = r.header(header::AUTHORIZATION, a);
        }
        r.body(Body::from(body.clone())).unwrap()
    };
    for bad in [
        None,
        Some(basic("admin:wrong")),
        Some(basic("root:admin")),
        Some("Bearer nope".into()),
        Some("Basic ***".into()),
    ] {
        let resp = tower::ServiceExt::oneshot(h.router.clone(), put(bad.clone()))
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::UNAUTHORIZED, "{bad:?}");
        assert!(
            resp.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap()
                .contains("Basic")
        );
    }
    assert!(
        h.nb.store().services.is_empty(),
        "refused requests change nothing"
    );
    let (s, _) = send(&h.router, put(Some(basic("admin:admin")))).await;
    assert_eq!(s, StatusCode::OK);
    let get = Request::get(&path)
        .header(header::AUTHORIZATION, "Bearer s3cr3t-t0ken")
        .body(Body::empty())
        .unwrap();
    let (s, v) = send(&h.router, get).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["service:services"][0]["name"], "web");
    // Every route is behind auth, the OpenAPI document and unknown paths too.
    for p in [OPENAPI_PATH, OPERATIONAL_PATH, "/nowhere"] {
        let (s, _) = send(&h.router, Request::get(p).body(Body::empty()).unwrap()).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{p}");
    }
}

#[test]
fn auth_may_be_off_only_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    for (listen, auth, ok) in [
        ("127.0.0.1:8181", false, true),
        ("[::1]:8181", false, true),
        ("0.0.0.0:8181", false, false),
        ("192.0.2.1:8181", false, false),
        ("0.0.0.0:8181", true, true),
    ] {
        let mut c = RestConfig::new(dir.path().join(listen));
        c.listen = listen.parse().unwrap();
        if auth {
            c.auth_file = Some(with_auth(dir.path()));
        }
        match Northbound::open(&c, Arc::new(Unavailable)) {
            Ok(_) => assert!(ok, "{listen} without auth must be refused"),
            Err(e) => {
                assert!(!ok, "{listen}: {e}");
                assert!(matches!(e, StartError::Config(_)), "{e}");
                assert!(e.to_string().contains("not a loopback address"), "{e}");
            }
        }
    }
    // A missing or empty credentials file is a startup error too.
    let mut c = RestConfig::new(dir.path().join("x"));
    c.auth_file = Some(dir.path().join("missing"));
    assert!(matches!(
        Northbound::open(&c, Arc::new(Unavailable)),
        Err(StartError::Auth(_))
    ));
    std::fs::write(dir.path().join("empty"), "# nobody\n").unwrap();
    c.auth_file = Some(dir.path().join("empty"));
    let e = Northbound::open(&c, Arc::new(Unavailable)).unwrap_err();
    assert!(e.to_string().contains("holds no credentials"), "{e}");
    // And a node port range that is not one.
    let mut c = RestConfig::new(dir.path().join("y"));
    c.node_port_range = 0..=100;
    assert!(matches!(
        Northbound::open(&c, Arc::new(Unavailable)),
        Err(StartError::Config(_))
    ));
}

struct Stub;

impl OperationalSource for Stub {
    fn services(&self) -> BoxFuture<'_, Result<Vec<ServiceState>, String>> {
        Box::pin(async {
            Ok(vec![ServiceState {
                uid: "s1".into(),
                namespace: "default".into(),
                name: "web".into(),
                cluster_ips: vec!["10.96.0.1".into()],
                external_ips: vec![],
                ports: vec!["80/TCP".into()],
                groups: vec![GroupState {
                    node: "worker1".into(),
                    group_id: 7,
                    group_type: "select".into(),
                    buckets: vec![BucketState {
                        bucket_id: 0,
                        endpoint: "10.244.1.5:8080".into(),
                        weight: 100,
                        packet_count: 5,
                        byte_count: 500,
                    }],
                    packet_count: 5,
                    byte_count: 500,
                }],
                flows: vec![FlowState {
                    node: "worker1".into(),
                    table_id: 20,
                    priority: 100,
                    cookie: 0x1234,
                    flow: "table=20,priority=100,tcp,nw_dst=10.96.0.1,tp_dst=80 actions=group:7"
                        .into(),
                    packet_count: 5,
                    byte_count: 500,
                }],
                packet_count: 5,
                byte_count: 500,
            }])
        })
    }
}

/// [`Stub`], with a node another replica masters and one not synced yet.
struct Partial;

impl OperationalSource for Partial {
    fn services(&self) -> BoxFuture<'_, Result<Vec<ServiceState>, String>> {
        Stub.services()
    }

    fn unreported(&self) -> Vec<coe::rest::operational::Unreported> {
        use coe::rest::operational::Unreported;
        vec![
            Unreported {
                node: "worker2".into(),
                reason: "mastered by another replica".into(),
                master: Some("tcp:10.0.0.2:6653".into()),
                rest: Some("http://10.0.0.2:8181".into()),
            },
            Unreported {
                node: "worker3".into(),
                reason: "switch not connected or not synced yet".into(),
                master: None,
                rest: None,
            },
        ]
    }

    fn plan(
        &self,
        node: Option<String>,
    ) -> BoxFuture<'_, Result<Vec<coe::rest::operational::NodePlan>, String>> {
        Box::pin(async move {
            let plan = coe::rest::operational::NodePlan {
                node: "worker1".into(),
                bridge: "br-int".into(),
                changes: vec!["flow add table=20, priority=100,ip actions=drop".into()],
                against: None,
            };
            Ok(match node.as_deref() {
                None | Some("worker1") => vec![plan],
                Some(_) => vec![],
            })
        })
    }
}

/// The dry-run plan is served for every node or one, with the nodes not planned here and
/// why; a node nobody has is a 404; a source that cannot plan is a 503.
#[tokio::test]
async fn the_plan_is_served_with_the_nodes_it_leaves_out() {
    let h = Harness::with(|_| {}, Arc::new(Partial));
    let (s, all) = h.call("GET", coe::rest::server::PLAN_PATH, None).await;
    assert_eq!(s, StatusCode::OK, "{all}");
    let plan = &all["svcflow:plan"];
    assert_eq!(plan["nodes"][0]["node"], "worker1");
    assert_eq!(plan["nodes"][0]["bridge"], "br-int");
    assert_eq!(
        plan["nodes"][0]["changes"][0],
        "flow add table=20, priority=100,ip actions=drop"
    );
    assert_eq!(
        plan["unreported-nodes"].as_array().unwrap().len(),
        2,
        "{all}"
    );
    let one = format!("{}/worker2", coe::rest::server::PLAN_PATH);
    let (s, two) = h.call("GET", &one, None).await;
    assert_eq!(s, StatusCode::OK, "{two}");
    assert_eq!(two["svcflow:plan"]["nodes"], json!([]));
    assert_eq!(
        two["svcflow:plan"]["unreported-nodes"][0]["master"],
        "tcp:10.0.0.2:6653"
    );
    let missing = format!("{}/nope", coe::rest::server::PLAN_PATH);
    let (s, body) = h.call("GET", &missing, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(error_of(&body).1, "data-missing");
    let h = Harness::new();
    let (s, _) = h.call("GET", coe::rest::server::PLAN_PATH, None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn the_operational_view_lists_the_nodes_it_has_no_state_for() {
    let (_, v) = Harness::with(|_| {}, Arc::new(Stub))
        .call("GET", OPERATIONAL_PATH, None)
        .await;
    assert!(
        v["service:service-information"]
            .get("unreported-nodes")
            .is_none(),
        "{v}"
    );
    let h = Harness::with(|_| {}, Arc::new(Partial));
    let (s, v) = h.call("GET", OPERATIONAL_PATH, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["service:service-information"]["unreported-nodes"],
        json!([
            {"node": "worker2", "reason": "mastered by another replica",
             "master": "tcp:10.0.0.2:6653", "rest": "http://10.0.0.2:8181"},
            {"node": "worker3", "reason": "switch not connected or not synced yet"},
        ])
    );
    let (_, v) = h
        .call("GET", &format!("{OPERATIONAL_PATH}/services/s1"), None)
        .await;
    assert_eq!(v["unreported-nodes"][0]["node"], "worker2");
    assert_eq!(v["service:services"][0]["uid"], "s1");
}

#[tokio::test]
async fn operational_view_serves_the_source() {
    let h = Harness::with(|_| {}, Arc::new(Stub));
    let (s, v) = h.call("GET", OPERATIONAL_PATH, None).await;
    assert_eq!(s, StatusCode::OK);
    let svc = &v["service:service-information"]["services"][0];
    assert_eq!(svc["uid"], "s1");
    assert_eq!(svc["network-NS"], "default");
    assert_eq!(svc["groups"][0]["group-id"], 7);
    assert_eq!(
        svc["groups"][0]["buckets"][0],
        json!({
        "bucket-id": 0, "endpoint": "10.244.1.5:8080", "weight": 100, "packet-count": 5, "byte-count": 500 })
    );
    assert_eq!(svc["flows"][0]["table-id"], 20);
    assert_eq!(svc["packet-count"], 5);
    let (s, v) = h
        .call("GET", &format!("{OPERATIONAL_PATH}/services/s1"), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["service:services"][0]["name"], "web");
    let (s, v) = h
        .call("GET", &format!("{OPERATIONAL_PATH}/services/nope"), None)
        .await;
    assert_eq!(
        (s, error_of(&v).1.as_str()),
        (StatusCode::NOT_FOUND, "data-missing")
    );

    let h = Harness::new();
    for p in [
        OPERATIONAL_PATH.to_string(),
        format!("{OPERATIONAL_PATH}/services/s1"),
    ] {
        let (s, v) = h.call("GET", &p, None).await;
        assert_eq!(
            (s, error_of(&v).1.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "operation-failed"),
            "{p}"
        );
    }
}

#[tokio::test]
async fn openapi_document_is_served_kept_in_docs_and_covers_every_route() {
    let h = Harness::new();
    let (s, served) = h.call("GET", OPENAPI_PATH, None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(served, coe::rest::openapi::document());
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let pretty = serde_json::to_string_pretty(&served).unwrap() + "\n";
    if std::env::var_os("SVCFLOW_REGEN_OPENAPI").is_some() {
        std::fs::write(&file, &pretty).unwrap();
    }
    let kept = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        kept == pretty,
        "docs/openapi.json is stale; rerun with SVCFLOW_REGEN_OPENAPI=1"
    );

    // Every documented path and method is routed.
    let paths = served["paths"].as_object().unwrap();
    assert_eq!(paths.len(), 18);
    for (path, ops) in paths {
        let concrete = path.replace("{uid}", "x").replace("{node}", "x");
        for method in ["get", "put", "post", "delete"] {
            if ops.get(method).is_none() {
                continue;
            }
            let req = Request::builder()
                .method(method.to_uppercase().as_str())
                .uri(&concrete)
                .body(Body::empty())
                .unwrap();
            let (s, v) = send(&h.router, req).await;
            assert_ne!(s, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(
                s != StatusCode::NOT_FOUND || v["errors"]["error"][0]["error-path"].is_string(),
                "{method} {path} is not routed"
            );
        }
    }
}

/// The COE watcher's exact requests over a real socket: HTTP/1.1, basic auth, list-wrapped
/// PUT to the item URL, and a 200 for PUT and DELETE.
#[tokio::test]
async fn a_real_listener_serves_the_watcher() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = RestConfig::new(dir.path().join("state"));
    config.auth_file = Some(with_auth(dir.path()));
    let nb = Northbound::open(&config, Arc::new(Unavailable)).unwrap();
    let mut models = nb.subscribe();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(nb.serve_on(listener, async {
        let _ = stopped.await;
    }));

    let request = move |method: &'static str, path: String, body: Option<Value>| {
        tokio::task::spawn_blocking(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let body = body.map(|b| b.to_string()).unwrap_or_default();
            write!(
                s,
                "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                basic("admin:admin"),
                body.len()
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        })
    };
    let resp = request(
        "PUT",
        item(Kind::Service, "s1"),
        Some(wrapped(
            Kind::Service,
            watcher_service("s1", "web", "10.96.0.1", 80),
        )),
    )
    .await
    .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    let published = models.wait_for(|p| p.revision == 1).await.unwrap().clone();
    assert_eq!(published.model.services.len(), 1);
    let resp = request("GET", item(Kind::Service, "s1"), None)
        .await
        .unwrap();
    assert!(
        resp.starts_with("HTTP/1.1 200 OK")
            && resp.contains("\"cluster-ip-address\":\"10.96.0.1\""),
        "{resp}"
    );
    let resp = request("DELETE", item(Kind::Service, "s1"), None)
        .await
        .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

/// A client that connects and sends nothing is cut off after the idle timeout, and a request
/// that arrives first is still served on its connection.
#[tokio::test]
async fn an_idle_connection_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = RestConfig::new(dir.path().join("state"));
    config.idle_timeout = std::time::Duration::from_millis(300);
    let nb = Northbound::open(&config, Arc::new(Unavailable)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(nb.serve_on(listener, std::future::pending()));
    let closed_after = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 16];
        let n = s.read(&mut buf).unwrap_or(0);
        (n, started.elapsed())
    })
    .await
    .unwrap();
    assert_eq!(closed_after.0, 0, "the server closed the connection");
    assert!(
        closed_after.1 >= std::time::Duration::from_millis(250)
            && closed_after.1 < std::time::Duration::from_secs(5),
        "{:?}",
        closed_after.1
    );
    server.abort();
}

/// Request bodies share a budget: while one client holds it (a body announced but not sent),
/// another write is answered 503 at once, and goes through once the first is done.
#[tokio::test]
async fn request_bodies_share_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = RestConfig::new(dir.path().join("state"));
    config.body_budget_bytes = 1 << 20;
    let nb = Northbound::open(&config, Arc::new(Unavailable)).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(nb.serve_on(listener, std::future::pending()));
    let path = item(Kind::Service, "s1");
    let body = wrapped(Kind::Service, watcher_service("s1", "web", "10.96.0.1", 80)).to_string();
    let (path2, body2) = (path.clone(), body.clone());
    let statuses = tokio::task::spawn_blocking(move || {
        let status = |s: &mut std::net::TcpStream| {
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out.split_whitespace().nth(1).unwrap_or("").to_string()
        };
        // Announces a 1 MiB body and sends none of it: the budget is taken.
        let mut hog = std::net::TcpStream::connect(addr).unwrap();
        write!(
            hog,
            "PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            1 << 20
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let put = |body: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(
                s,
                "PUT {path2} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            status(&mut s)
        };
        let refused = put(&body2);
        drop(hog);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let accepted = put(&body2);
        (refused, accepted)
    })
    .await
    .unwrap();
    assert_eq!(statuses, ("503".to_string(), "200".to_string()));
    server.abort();
}

/// A northbound whose state the controller does not act on (replicas electing over Leases)
/// refuses every write with 405 and the reason, and still serves reads.
#[tokio::test]
async fn a_northbound_that_refuses_writes_says_why_and_still_reads() {
    let h = Harness::with(
        |c| c.refuse_writes = Some("writes go to Kubernetes here".into()),
        Arc::new(Unavailable),
    );
    let path = item(Kind::Service, "svc-1");
    let body = json!({"service:services": [watcher_service("svc-1", "web", "10.96.0.10", 80)]});
    for method in ["PUT", "POST", "DELETE"] {
        let (status, reply) = h.call(method, &path, Some(body.clone())).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method}: {reply}");
        let error = &reply["errors"]["error"][0];
        assert_eq!(error["error-tag"], "operation-not-supported", "{method}");
        assert_eq!(
            error["error-message"], "writes go to Kubernetes here",
            "{method}"
        );
    }
    // The whole datastore is in the config tree too.
    let (status, reply) = h.call("PUT", "/restconf/config", Some(json!({}))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{reply}");
    assert_eq!(
        reply["errors"]["error"][0]["error-message"],
        "writes go to Kubernetes here"
    );
    let (status, reply) = h.call("GET", &container(Kind::Service), None).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let (status, reply) = h.call("GET", "/restconf/config", None).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    // A method the resource has no route for keeps the router's own answer.
    let (status, reply) = h.call("PATCH", &path, Some(body)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(error_of(&reply).1, "operation-not-supported");
    assert_ne!(
        reply["errors"]["error"][0]["error-message"],
        "writes go to Kubernetes here"
    );
}
