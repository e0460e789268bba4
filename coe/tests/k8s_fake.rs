//! The fake API server speaks the protocol the watchers rely on: lists with a resourceVersion,
//! label selectors, watch streams with bookmarks, and 410 Gone.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use axum::http::Request;
use coe::k8s::fake::FakeApiServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use serde_json::json;

fn service(name: &str, labels: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name, "labels": labels},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]},
    }))
    .unwrap()
}

/// The names of a list's items.
fn names(l: &kube::core::ObjectList<Service>) -> Vec<String> {
    l.items
        .iter()
        .map(|s| s.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_filter_by_label_and_carry_the_resource_version() {
    let server = FakeApiServer::start_new().await.unwrap();
    server.apply(&service("a", json!({}))).unwrap();
    server
        .apply(&service(
            "b",
            json!({"service.kubernetes.io/service-proxy-name": "x"}),
        ))
        .unwrap();
    let rv = server.apply(&service("c", json!({"tier": "web"}))).unwrap();
    let api: Api<Service> = Api::all(server.client().unwrap());
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&all), ["a", "b", "c"]);
    assert_eq!(all.metadata.resource_version, Some(rv.to_string()));
    assert_eq!(all.items[0].metadata.resource_version, Some("2".into()));
    assert!(all.items[0].metadata.uid.is_some());
    let cases = [
        ("!service.kubernetes.io/service-proxy-name", vec!["a", "c"]),
        ("service.kubernetes.io/service-proxy-name", vec!["b"]),
        ("tier=web", vec!["c"]),
        ("tier!=web", vec!["a", "b"]),
        (
            "tier==web,!service.kubernetes.io/service-proxy-name",
            vec!["c"],
        ),
    ];
    for (selector, want) in cases {
        let list = api
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        assert_eq!(names(&list), want, "{selector}");
    }
    // Namespaced paths filter by namespace.
    let other: Api<Service> = Api::namespaced(server.client().unwrap(), "other");
    assert!(
        other
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // An unsupported selector is a 400 Status, not a hang or a panic.
    let err = api
        .list(&ListParams::default().labels("tier in (web)"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unsupported selector"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_stream_changes_bookmarks_and_gone() {
    let server = FakeApiServer::start_new().await.unwrap();
    let rv = server.apply(&service("a", json!({}))).unwrap();
    let api: Api<Service> = Api::all(server.client().unwrap());
    let mut stream = api
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    server.apply(&service("b", json!({}))).unwrap();
    server.apply(&service("b", json!({"x": "y"}))).unwrap();
    server.delete::<Service>("default", "a").unwrap();
    let mut seen = Vec::new();
    let mut bookmark = None;
    while bookmark.is_none() || seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            WatchEvent::Added(s) => seen.push(format!("ADDED {}", s.metadata.name.unwrap())),
            WatchEvent::Modified(s) => seen.push(format!("MODIFIED {}", s.metadata.name.unwrap())),
            WatchEvent::Deleted(s) => seen.push(format!("DELETED {}", s.metadata.name.unwrap())),
            WatchEvent::Bookmark(b) => bookmark = Some(b.metadata.resource_version),
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(seen, ["ADDED b", "MODIFIED b", "DELETED a"]);
    assert_eq!(bookmark, Some(server.resource_version().to_string()));

    // A watch from before a compaction gets an ERROR event with a 410 Status.
    server.compact();
    let mut old = api
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    match old.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("{other:?}"),
    }
    // Open watches get one too when expired, and their stream ends.
    server.expire_watches();
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .unwrap()
        {
            Some(Ok(WatchEvent::Error(e))) => {
                assert_eq!(e.code, 410);
                break;
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    // An exact list at a compacted version is HTTP 410.
    let client = server.client().unwrap();
    let request = Request::get("/api/v1/services?resourceVersion=2&resourceVersionMatch=Exact")
        .body(Vec::new())
        .unwrap();
    let err = client.request_text(request).await.unwrap_err();
    assert!(
        err.to_string().contains("410") || err.to_string().contains("too old"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_vanishes_and_comes_back_on_the_same_port_with_its_state() {
    let mut server = FakeApiServer::start_new().await.unwrap();
    server.apply(&service("a", json!({}))).unwrap();
    let addr = server.addr();
    server.stop().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    server.start().await.unwrap();
    assert_eq!(server.addr(), addr);
    let api: Api<Service> = Api::all(server.client().unwrap());
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

/// Leases are written as leader election writes them: a create of an existing name and a
/// replace from a stale version are refused with 409, so two writers never both win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_written_with_optimistic_concurrency() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{DeleteParams, PostParams};
    let server = FakeApiServer::start_new().await.unwrap();
    let api: Api<Lease> = Api::namespaced(server.client().unwrap(), "kube-system");
    let lease = |holder: &str| -> Lease {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"app": "svcflow"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 0},
        }))
        .unwrap()
    };
    assert!(api.get_opt("n1").await.unwrap().is_none());
    let first = api
        .create(&PostParams::default(), &lease("a"))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.metadata.namespace.as_deref(), Some("kube-system"));
    // A second create of the same name loses.
    let err = api
        .create(&PostParams::default(), &lease("b"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err}"
    );
    // A replace from the version read wins once; the same version again is a conflict.
    let mut take = lease("b");
    take.metadata.resource_version = Some(rv.clone());
    let taken = api
        .replace("n1", &PostParams::default(), &take)
        .await
        .unwrap();
    assert_ne!(taken.metadata.resource_version, Some(rv));
    let err = api
        .replace("n1", &PostParams::default(), &take)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err}"
    );
    let now = api.get("n1").await.unwrap();
    assert_eq!(
        now.spec.unwrap().holder_identity.as_deref(),
        Some("b"),
        "the winner's write stands"
    );
    assert_eq!(server.writes(), (4, 2));
    // Replacing a missing lease is a 404; a list by label finds the lease; delete removes it.
    let err = api
        .replace("n2", &PostParams::default(), &lease("a"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400 || s.code == 404),
        "{err}"
    );
    let listed = api
        .list(&ListParams::default().labels("app=svcflow"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    api.delete("n1", &DeleteParams::default()).await.unwrap();
    assert!(api.get_opt("n1").await.unwrap().is_none());
    // Every other kind is written the same way.
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    services
        .create(&PostParams::default(), &service("s", json!({})))
        .await
        .unwrap();
    assert!(server.get::<Service>("default", "s").is_some());
}

/// A list with `limit` comes in pages joined by `continue` tokens, all from the first page's
/// snapshot (an object written between pages is not in them); a token the server no longer
/// has, as after a compaction, gets 410 Expired. The watchers list this way (500 a page).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_come_in_pages_from_one_snapshot() {
    let server = FakeApiServer::start_new().await.unwrap();
    for name in ["a", "b", "c", "d", "e"] {
        server.apply(&service(name, json!({}))).unwrap();
    }
    let rv = server.resource_version();
    let api: Api<Service> = Api::all(server.client().unwrap());
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    server.apply(&service("bb", json!({}))).unwrap();
    server.delete::<Service>("default", "e").unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["c", "d"], "the first page's snapshot");
    assert_eq!(second.metadata.resource_version, Some(rv.to_string()));
    let token = second.metadata.continue_.clone().unwrap();
    let last = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&last), ["e"]);
    assert_eq!(last.metadata.continue_, None);
    assert_eq!(server.lists(coe::k8s::fake::Kind::Service), 1, "one list");
    // A used token, and one from before a compaction, are gone.
    let again = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await;
    assert!(
        matches!(&again, Err(kube::Error::Api(s)) if s.code == 410),
        "{again:?}"
    );
    let first = api.list(&ListParams::default().limit(3)).await.unwrap();
    server.compact();
    let token = first.metadata.continue_.unwrap();
    let expired = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await;
    assert!(
        matches!(&expired, Err(kube::Error::Api(s)) if s.code == 410 && s.reason == "Expired"),
        "{expired:?}"
    );
}
