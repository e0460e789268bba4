//! The operational nodes view (`/restconf/operational/svcflow:nodes`) and the HTML status
//! page at `/`, served from a stub source: routes, 404 and 503, the page's content type and
//! hooks, and the auth every other route has.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use base64::Engine;
use coe::rest::operational::{
    BoxFuture, BucketState, GroupState, NodeState, OperationalSource, ServiceState, SyncState,
};
use coe::rest::server::{NODES_PATH, STATUS_PAGE_PATH};
use common::*;
use http_body_util::BodyExt;
use serde_json::json;

struct Source;

fn sync(revision: u64) -> SyncState {
    SyncState {
        time: "2026-11-24T09:41:00.120Z".into(),
        revision,
        result: "ok".into(),
        duration_ms: Some(3.25),
        error: None,
        flows_added: 12,
        flows_modified: 0,
        flows_deleted: 0,
        groups_changed: 1,
        conntrack_flushed: 0,
    }
}

impl OperationalSource for Source {
    fn services(&self) -> BoxFuture<'_, Result<Vec<ServiceState>, String>> {
        Box::pin(async {
            Ok(vec![ServiceState {
                uid: "s1".into(),
                namespace: "default".into(),
                name: "web".into(),
                cluster_ips: vec!["10.96.0.10".into()],
                external_ips: vec![],
                ports: vec!["80/TCP".into()],
                groups: vec![GroupState {
                    node: "n1".into(),
                    group_id: 7,
                    group_type: "select".into(),
                    buckets: vec![BucketState {
                        bucket_id: 0,
                        endpoint: "10.244.0.11:8080".into(),
                        weight: 100,
                        packet_count: 9,
                        byte_count: 900,
                    }],
                    packet_count: 9,
                    byte_count: 900,
                }],
                flows: vec![],
                packet_count: 9,
                byte_count: 900,
            }])
        })
    }

    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeState>, String>> {
        Box::pin(async {
            Ok(vec![
                NodeState {
                    node: "n1".into(),
                    switch_connected: true,
                    connection: Some(1),
                    role: Some("master".into()),
                    writes: true,
                    master: None,
                    rest: None,
                    flows: Some(120),
                    groups: Some(2),
                    last_sync: Some(sync(4)),
                    syncs: vec![sync(4), sync(3)],
                    conflicts: Some(vec![]),
                },
                NodeState {
                    node: "n2".into(),
                    switch_connected: false,
                    connection: None,
                    role: None,
                    writes: false,
                    master: Some("tcp:10.0.0.2:6653".into()),
                    rest: Some("http://10.0.0.2:8181".into()),
                    flows: None,
                    groups: None,
                    last_sync: None,
                    syncs: vec![],
                    conflicts: None,
                },
            ])
        })
    }
}

#[tokio::test]
async fn the_nodes_view_serves_every_node_or_one_and_404s_an_unknown_one() {
    let h = Harness::with(|_| {}, Arc::new(Source));
    let (s, all) = h.call("GET", NODES_PATH, None).await;
    assert_eq!(s, StatusCode::OK, "{all}");
    let nodes = &all["svcflow:nodes"]["nodes"];
    assert_eq!(nodes.as_array().unwrap().len(), 2, "{all}");
    assert_eq!(nodes[0]["switch-connected"], true);
    assert_eq!(nodes[0]["connection"], 1);
    assert_eq!(nodes[0]["role"], "master");
    assert_eq!(nodes[0]["flows"], 120);
    assert_eq!(
        nodes[0]["last-sync"],
        json!({"time": "2026-11-24T09:41:00.120Z", "revision": 4, "result": "ok",
               "duration-ms": 3.25, "flows-added": 12, "flows-modified": 0,
               "flows-deleted": 0, "groups-changed": 1, "conntrack-flushed": 0})
    );
    assert_eq!(nodes[0]["syncs"].as_array().unwrap().len(), 2);
    // A node another replica masters: where to ask, and nothing it does not know.
    assert_eq!(
        nodes[1],
        json!({"node": "n2", "switch-connected": false, "writes": false,
               "master": "tcp:10.0.0.2:6653", "rest": "http://10.0.0.2:8181", "syncs": []})
    );
    let (s, one) = h.call("GET", &format!("{NODES_PATH}/n2"), None).await;
    assert_eq!(s, StatusCode::OK, "{one}");
    assert_eq!(one["svcflow:nodes"]["nodes"], json!([nodes[1]]));
    let (s, body) = h.call("GET", &format!("{NODES_PATH}/nope"), None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        error_of(&body),
        ("svcflow:nodes/nope".into(), "data-missing".into())
    );
    // A source that reports no node: 503, as the other operational views.
    let (s, body) = Harness::new().call("GET", NODES_PATH, None).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(error_of(&body).1, "operation-failed");
}

#[tokio::test]
async fn the_status_page_is_html_with_the_nodes_services_and_syncs() {
    let h = Harness::with(|_| {}, Arc::new(Source));
    let resp = tower::ServiceExt::oneshot(
        h.router.clone(),
        Request::get(STATUS_PAGE_PATH).body(Body::empty()).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(
        resp.headers()[header::CONTENT_TYPE],
        "text/html; charset=utf-8"
    );
    let csp = resp.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    let html = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(
        html.contains("<tr class=\"node\" data-node=\"n1\" data-connected=\"true\" data-role=\"master\" data-writes=\"true\">"),
        "{html}"
    );
    assert!(
        html.contains("data-node=\"n2\" data-connected=\"false\""),
        "{html}"
    );
    assert!(
        html.contains("<tr class=\"service\" data-service=\"default/web\""),
        "{html}"
    );
    assert!(
        html.contains("<li class=\"endpoint\" data-endpoint=\"10.244.0.11:8080\" data-node=\"n1\"><code>10.244.0.11:8080</code> <span class=\"packets\">9</span></li>"),
        "{html}"
    );
    assert!(
        html.contains("<td class=\"ports\"><code>80/TCP</code></td>"),
        "{html}"
    );
    assert_eq!(
        html.matches("<tr class=\"sync\" data-node=\"n1\"").count(),
        2
    );

    // With no state yet the page still answers, and says why each part is missing.
    let (s, page) = Harness::new().call("GET", STATUS_PAGE_PATH, None).await;
    assert_eq!(s, StatusCode::OK);
    let page = page.as_str().unwrap();
    assert!(page.contains("class=\"error nodes-error\""), "{page}");
    assert!(page.contains("class=\"error services-error\""), "{page}");
}

#[tokio::test]
async fn the_status_page_and_the_nodes_view_need_credentials_as_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(&file, "basic admin admin\n").unwrap();
    let h = Harness::with(|c| c.auth_file = Some(file), Arc::new(Source));
    for path in [STATUS_PAGE_PATH, NODES_PATH] {
        let (s, _) = h.call("GET", path, None).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{path}");
        let auth = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("admin:admin")
        );
        let req = Request::get(path)
            .header(header::AUTHORIZATION, auth)
            .body(Body::empty())
            .unwrap();
        let (s, _) = send(&h.router, req).await;
        assert_eq!(s, StatusCode::OK, "{path}");
    }
}
