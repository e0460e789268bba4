//! Scenario tests: the real kube-rs watchers against the in-process fake API server.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use coe::k8s::fake::{FakeApiServer, Kind};
use coe::k8s::{KubeModel, WatchConfig, Watchers};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use netvirt::model::ServiceKey;
use serde_json::json;
use tokio::sync::watch;

fn config() -> WatchConfig {
    WatchConfig {
        coalesce: Duration::from_millis(20),
        min_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_millis(400),
    }
}

fn service(name: &str, ip: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name},
        "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80, "targetPort": "web"}]},
    }))
    .unwrap()
}

fn slice(service: &str, name: &str, ips: &[&str]) -> EndpointSlice {
    let endpoints: Vec<_> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "nodeName": "n1"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}],
        "endpoints": endpoints,
    }))
    .unwrap()
}

async fn seeded() -> FakeApiServer {
    let server = FakeApiServer::start_new().await.unwrap();
    server
        .apply::<Namespace>(
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap(),
        )
        .unwrap();
    server
        .apply::<Node>(
            &serde_json::from_value(json!({
                "metadata": {"name": "n1"},
                "spec": {"podCIDR": "10.1.0.0/24"},
                "status": {"addresses": [{"type": "InternalIP", "address": "192.168.0.1"}]},
            }))
            .unwrap(),
        )
        .unwrap();
    server
}

type Models = watch::Receiver<Option<Arc<KubeModel>>>;

/// Waits until the published model satisfies `pred`, or fails after 10 s showing the last one.
async fn until(
    models: &mut Models,
    what: &str,
    pred: impl Fn(&KubeModel) -> bool,
) -> Arc<KubeModel> {
    let found = {
        let wait = models.wait_for(|m| m.as_deref().is_some_and(&pred));
        match tokio::time::timeout(Duration::from_secs(10), wait).await {
            Ok(Ok(m)) => m.clone(),
            _ => None,
        }
    };
    match found {
        Some(m) => m,
        None => panic!(
            "timed out waiting for {what}; last model: {:#?}",
            models.borrow()
        ),
    }
}

/// The seeded server with service `web` on one endpoint (10.1.0.5), and watchers that have
/// published it.
async fn watching_web() -> (FakeApiServer, Watchers, Models) {
    let server = seeded().await;
    server.apply(&service("web", "10.96.0.10")).unwrap();
    server.apply(&slice("web", "web-a", &["10.1.0.5"])).unwrap();
    let watchers = Watchers::start(server.client().unwrap(), config());
    let mut models = watchers.subscribe();
    until(&mut models, "one endpoint", |m| {
        endpoints(m, "web").is_some_and(|e| e == ["10.1.0.5"])
    })
    .await;
    (server, watchers, models)
}

fn endpoints(m: &KubeModel, name: &str) -> Option<Vec<String>> {
    m.translation
        .model
        .endpoints
        .get(&ServiceKey::new("default", name))
        .map(|eps| eps.iter().map(|e| e.address.to_string()).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_scale_and_delete_a_service() {
    let server = seeded().await;
    let watchers = Watchers::start(server.client().unwrap(), config());
    let mut models = watchers.subscribe();
    let first = until(&mut models, "the first model", |_| true).await;
    assert!(first.translation.model.services.is_empty());
    assert_eq!(first.translation.model.nodes.len(), 1);
    assert_eq!(
        first.translation.ovsdb_remotes["n1"],
        "tcp:192.168.0.1:6640"
    );

    server.apply(&service("web", "10.96.0.10")).unwrap();
    server
        .apply(&slice("web", "web-a", &["10.1.0.5", "10.1.0.6"]))
        .unwrap();
    // Services of another proxy never reach the model (filtered by the label selector).
    let mut other = service("other", "10.96.0.11");
    other.metadata.labels = Some(
        [(
            "service.kubernetes.io/service-proxy-name".to_string(),
            "x".to_string(),
        )]
        .into(),
    );
    server.apply(&other).unwrap();
    let m = until(&mut models, "web with two endpoints", |m| {
        endpoints(m, "web").is_some_and(|e| e.len() == 2)
    })
    .await;
    assert_eq!(endpoints(&m, "web").unwrap(), ["10.1.0.5", "10.1.0.6"]);
    assert!(endpoints(&m, "other").is_none());

    // Scale up with a second slice, then down.
    server.apply(&slice("web", "web-b", &["10.1.0.7"])).unwrap();
    until(&mut models, "three endpoints", |m| {
        endpoints(m, "web").is_some_and(|e| e.len() == 3)
    })
    .await;
    server.apply(&slice("web", "web-a", &["10.1.0.6"])).unwrap();
    let m = until(&mut models, "two endpoints", |m| {
        endpoints(m, "web").is_some_and(|e| e.len() == 2)
    })
    .await;
    assert_eq!(endpoints(&m, "web").unwrap(), ["10.1.0.6", "10.1.0.7"]);

    // Pods become pod interfaces.
    server
        .apply::<Pod>(
            &serde_json::from_value(json!({
                "metadata": {"namespace": "default", "name": "client"},
                "spec": {"nodeName": "n1", "containers": []},
                "status": {"podIP": "10.1.0.9"},
            }))
            .unwrap(),
        )
        .unwrap();
    let m = until(&mut models, "the pod", |m| {
        !m.translation.model.pods.is_empty()
    })
    .await;
    assert_eq!(
        m.translation.model.pods.values().next().unwrap().iface_id,
        "default_client"
    );

    server.delete::<Service>("default", "web").unwrap();
    let m = until(&mut models, "web gone", |m| endpoints(m, "web").is_none()).await;
    assert!(m.translation.model.services.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_that_end_or_expire_resume_and_converge() {
    let (server, _watchers, mut models) = watching_web().await;

    // The server ends every watch (its timeout); watchers resume from their version, so a
    // change made in between is seen without a relist.
    let lists = server.lists(Kind::EndpointSlice);
    server.close_watches();
    server
        .apply(&slice("web", "web-a", &["10.1.0.5", "10.1.0.6"]))
        .unwrap();
    until(&mut models, "two endpoints", |m| {
        endpoints(m, "web").is_some_and(|e| e.len() == 2)
    })
    .await;
    assert_eq!(
        server.lists(Kind::EndpointSlice),
        lists,
        "resumed without a relist"
    );

    // 410 Gone: the history is compacted and every watch gets an ERROR event; watchers relist.
    server.expire_watches();
    server.apply(&slice("web", "web-a", &["10.1.0.7"])).unwrap();
    let m = until(&mut models, "the relisted endpoint", |m| {
        endpoints(m, "web").is_some_and(|e| e == ["10.1.0.7"])
    })
    .await;
    assert!(
        server.lists(Kind::EndpointSlice) > lists,
        "relisted after 410"
    );
    assert_eq!(m.translation.model.services.len(), 1);

    // A delete during a compaction is seen through the relist.
    server.expire_watches();
    server.delete::<EndpointSlice>("default", "web-a").unwrap();
    server.compact();
    until(&mut models, "no endpoints", |m| {
        endpoints(m, "web").is_some_and(|e| e.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_survives_an_api_server_outage_and_resyncs_after() {
    let mut server = seeded().await;
    server.apply(&service("web", "10.96.0.10")).unwrap();
    server
        .apply(&slice("web", "web-a", &["10.1.0.5", "10.1.0.6"]))
        .unwrap();
    let watchers = Watchers::start(server.client().unwrap(), config());
    let mut models = watchers.subscribe();
    let before = until(&mut models, "two endpoints", |m| {
        endpoints(m, "web").is_some_and(|e| e.len() == 2)
    })
    .await;
    let addr = server.addr();

    // The API server vanishes. While it is gone nothing new is published: the model (and so
    // the flows) stay as they were.
    server.stop().await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "stopped listening"
    );
    models.borrow_and_update();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !models.has_changed().unwrap(),
        "nothing published during the outage"
    );
    assert_eq!(models.borrow().as_deref(), Some(&*before));

    // Meanwhile the cluster changed, and its history was compacted.
    server.apply(&slice("web", "web-a", &["10.1.0.6"])).unwrap();
    server.apply(&service("api", "10.96.0.12")).unwrap();
    server.compact();

    // It comes back on the same port: the watchers relist and converge.
    server.start().await.unwrap();
    assert_eq!(server.addr(), addr);
    let m = until(&mut models, "the resynced model", |m| {
        endpoints(m, "web").is_some_and(|e| e == ["10.1.0.6"]) && endpoints(m, "api").is_some()
    })
    .await;
    assert!(m.generation > before.generation);
}

/// An API server (or a proxy in front of it) that refuses to resume a watch with a plain HTTP
/// 410, not an `ERROR` event in a stream: the watchers list again and converge, instead of
/// retrying the same version forever (kube-rs issue 1042).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_refused_with_a_plain_http_410_lists_again() {
    let (mut server, _watchers, mut models) = watching_web().await;
    let lists = server.lists(Kind::EndpointSlice);
    server.answer_gone_with_http(true);
    // While the API server is away, a change, then the history forgotten: every watcher
    // comes back from a version the server no longer has, whatever it had seen before, and
    // is refused. (Ending the watches instead races: a watcher that saw the change resumes
    // from the newest version, which compaction keeps.)
    server.stop().await;
    server.apply(&slice("web", "web-a", &["10.1.0.8"])).unwrap();
    server.compact();
    server.start().await.unwrap();
    until(&mut models, "the endpoint seen through a new list", |m| {
        endpoints(m, "web").is_some_and(|e| e == ["10.1.0.8"])
    })
    .await;
    assert!(
        server.lists(Kind::EndpointSlice) > lists,
        "listed again after the 410"
    );
}

/// The EndpointSlice controller's `last-change-trigger-time` reaches the model that carries
/// the change, the earliest of a burst's; a generation without a slice change has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slice_change_carries_its_trigger_time() {
    let (server, _watchers, mut models) = watching_web().await;
    let mut changed = slice("web", "web-a", &["10.1.0.9"]);
    changed.metadata.annotations = Some(
        [(
            coe::k8s::TRIGGER_TIME_ANNOTATION.to_string(),
            "2026-11-24T09:41:00Z".to_string(),
        )]
        .into(),
    );
    server.apply(&changed).unwrap();
    let m = until(&mut models, "the changed endpoint", |m| {
        endpoints(m, "web").is_some_and(|e| e == ["10.1.0.9"])
    })
    .await;
    let want = std::time::UNIX_EPOCH + Duration::from_secs(1_795_513_260);
    assert_eq!(m.triggered_at, Some(want));
    server.apply(&service("api", "10.96.0.12")).unwrap();
    let m = until(&mut models, "the new service", |m| {
        m.translation
            .model
            .services
            .contains_key(&ServiceKey::new("default", "api"))
    })
    .await;
    assert_eq!(m.triggered_at, None, "a Service change has no trigger time");
    // A slice without the annotation, or with a malformed one, has none either.
    let mut bad = slice("web", "web-a", &["10.1.0.10"]);
    bad.metadata.annotations = Some(
        [(
            coe::k8s::TRIGGER_TIME_ANNOTATION.to_string(),
            "yesterday".to_string(),
        )]
        .into(),
    );
    assert_eq!(coe::k8s::trigger_time(&bad.into()), None);
}

/// A kind with more objects than a list page (the watchers ask for 500 at a time) is read
/// whole before the first model: every Service and every slice of 1,201 is in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_longer_than_a_page_is_read_whole() {
    let server = seeded().await;
    let n = 1_201;
    for i in 0..n {
        let ip = format!("10.96.{}.{}", i / 250, 1 + i % 250);
        let ep = format!("10.2.{}.{}", i / 250, 1 + i % 250);
        server.apply(&service(&format!("s{i}"), &ip)).unwrap();
        server
            .apply(&slice(&format!("s{i}"), &format!("s{i}-a"), &[&ep]))
            .unwrap();
    }
    let watchers = Watchers::start(server.client().unwrap(), config());
    let mut models = watchers.subscribe();
    let m = until(&mut models, "the first model", |_| true).await;
    assert_eq!(m.translation.model.services.len(), n);
    assert_eq!(endpoints(&m, "s1200").unwrap(), ["10.2.4.201"]);
    assert_eq!(endpoints(&m, "s0").unwrap(), ["10.2.0.1"]);
    assert_eq!(server.lists(Kind::Service), 1);
    assert_eq!(server.lists(Kind::EndpointSlice), 1);
}
