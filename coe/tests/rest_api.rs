//! REST contract tests: every route and method, status codes, the COE watcher's exact
//! bodies, and the design document's minimal form.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::net::IpAddr;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use coe::rest::types::Kind;
use common::*;
use netvirt::model::{Protocol, ServiceKey, ServiceType, TargetPort};
use serde_json::{Value, json};

#[tokio::test]
async fn every_method_on_every_container_and_item() {
    let h = Harness::new();
    for kind in Kind::ALL {
        let name = format!("{kind:?}");
        // PUT container replaces it.
        let body = container_body(kind, vec![sample(kind, "a", 1), sample(kind, "b", 2)]);
        let (s, _) = h.call("PUT", &container(kind), Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{name} PUT container");
        let (s, v) = h.call("GET", &container(kind), None).await;
        assert_eq!(s, StatusCode::OK, "{name} GET container");
        let list = &v[kind.qualified_container()][kind.list()];
        assert_eq!(list.as_array().map(Vec::len), Some(2), "{name}: {v}");
        assert_eq!(list[0]["uid"], "a");

        // POST container creates; an existing uid is a 409 and nothing is added.
        let (s, _) = h
            .call(
                "POST",
                &container(kind),
                Some(container_body(kind, vec![sample(kind, "c", 3)])),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{name} POST container");
        let (s, v) = h
            .call(
                "POST",
                &container(kind),
                Some(container_body(
                    kind,
                    vec![sample(kind, "d", 4), sample(kind, "a", 1)],
                )),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{name} POST container existing");
        assert_eq!(error_of(&v), (kind.item_name("a"), "data-exists".into()));
        assert_eq!(
            h.call("GET", &item(kind, "d"), None).await.0,
            StatusCode::NOT_FOUND
        );

        // Item routes.
        let (s, v) = h.call("GET", &item(kind, "a"), None).await;
        assert_eq!(s, StatusCode::OK, "{name} GET item");
        assert_eq!(v[kind.qualified_list()][0]["uid"], "a");
        let (s, _) = h
            .call(
                "PUT",
                &item(kind, "a"),
                Some(wrapped(kind, sample(kind, "a", 1))),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{name} PUT existing item");
        let (s, _) = h
            .call(
                "PUT",
                &item(kind, "e"),
                Some(wrapped(kind, sample(kind, "e", 5))),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{name} PUT new item");
        let (s, _) = h
            .call(
                "POST",
                &item(kind, "e"),
                Some(wrapped(kind, sample(kind, "e", 5))),
            )
            .await;
        assert_eq!(s, StatusCode::CONFLICT, "{name} POST existing item");
        let req = Request::post(item(kind, "f"))
            .header(header::CONTENT_TYPE, "application/yang-data+json")
            .body(Body::from(wrapped(kind, sample(kind, "f", 6)).to_string()))
            .unwrap();
        let resp = tower::ServiceExt::oneshot(h.router.clone(), req)
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED, "{name} POST new item");
        assert_eq!(resp.headers()[header::LOCATION], item(kind, "f").as_str());
        let (s, _) = h.call("DELETE", &item(kind, "f"), None).await;
        assert_eq!(s, StatusCode::OK, "{name} DELETE item");
        let (s, v) = h.call("DELETE", &item(kind, "f"), None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{name} DELETE missing item");
        assert_eq!(error_of(&v), (kind.item_name("f"), "data-missing".into()));
        assert_eq!(
            h.call("GET", &item(kind, "f"), None).await.0,
            StatusCode::NOT_FOUND
        );

        // PUT container again replaces everything; DELETE container empties it.
        let (s, _) = h
            .call(
                "PUT",
                &container(kind),
                Some(container_body(kind, vec![sample(kind, "z", 9)])),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        let (_, v) = h.call("GET", &container(kind), None).await;
        assert_eq!(
            v[kind.qualified_container()][kind.list()]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        let (s, _) = h.call("DELETE", &container(kind), None).await;
        assert_eq!(s, StatusCode::OK, "{name} DELETE container");
        let (s, v) = h.call("GET", &container(kind), None).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            v,
            json!({ kind.qualified_container(): { kind.list(): [] } })
        );
    }
}

#[tokio::test]
async fn the_coe_watcher_flow_builds_the_model() {
    let h = Harness::new();
    let mut models = h.nb.subscribe();
    assert_eq!(models.borrow_and_update().revision, 0);
    let puts = [
        (
            item(Kind::Node, "n1"),
            json!({ "k8s-node:k8s-nodes": [watcher_node("n1", "worker1", "172.18.0.2")] }),
        ),
        (
            item(Kind::Pod, "p1"),
            json!({ "pods": [watcher_pod("p1", "web-1", "10.244.1.5", "172.18.0.2")] }),
        ),
        (
            item(Kind::Pod, "p2"),
            json!({ "pods": [watcher_pod("p2", "web-2", "10.244.1.6", "172.18.0.99")] }),
        ),
        (
            item(Kind::Service, "s1"),
            json!({ "service:services": [{
            "service:uid": "s1", "service:cluster-id": "c1", "service:name": "web",
            "service:cluster-ip-address": "10.96.0.10", "service:network-NS": "default",
            "service:external-ip-address": ["198.51.100.7", ""], "service:ingress-ip-address": [],
            "service:service-ports": [
                { "service:name": "http", "service:port": 80, "service:target-port": "8080", "service:node-port": 30080 },
                { "service:name": "dns", "service:port": "53", "service:target-port": "dns", "service:node-port": 0,
                  "service:protocol": "udp" }
            ]
        }] }),
        ),
        (
            item(Kind::Endpoints, "e1"),
            json!({ "service:endpoints": [{
            "service:uid": "e1", "service:cluster-id": "c1", "service:name": "web", "service:network-NS": "default",
            "service:endpoint-addresses": [
                { "service:ip-address": "10.244.1.5", "service:host-name": "", "service:node-name": null },
                { "service:ip-address": "10.244.1.6", "service:host-name": "", "service:node-name": "worker9", "weight": 3 }
            ],
            "service:endpoint-ports": [ { "service:name": "http", "service:port": 8080 }, { "service:name": "dns", "service:port": 5353 } ]
        }] }),
        ),
    ];
    for (path, body) in puts {
        let (s, v) = h.call("PUT", &path, Some(body)).await;
        assert_eq!(s, StatusCode::OK, "{path}: {v}");
    }
    let published = models.wait_for(|p| p.revision == 5).await.unwrap().clone();
    assert_eq!(h.nb.revision(), 5);
    let m = &published.model;

    let node = &m.nodes["worker1"];
    assert_eq!(
        node.ips,
        vec![
            "172.18.0.2".parse::<IpAddr>().unwrap(),
            "192.0.2.10".parse().unwrap()
        ]
    );
    assert_eq!(node.pod_cidrs[0].to_string(), "10.244.1.0/24");
    assert_eq!(published.ovsdb_remotes["worker1"], "tcp:172.18.0.2:6640");

    let p1 = &m.pods["p1"];
    assert_eq!(
        (
            p1.iface_id.as_str(),
            p1.node.as_str(),
            p1.namespace.as_str()
        ),
        ("p1", "worker1", "default")
    );
    assert_eq!(p1.ips, vec!["10.244.1.5".parse::<IpAddr>().unwrap()]);
    // No node has this pod's host address: the address stands in for the node.
    assert_eq!(m.pods["p2"].node, "172.18.0.99");
    assert_eq!(m.namespaces["default"].elan, 1);

    let key = ServiceKey::new("default", "web");
    let svc = &m.services[&key];
    assert_eq!(svc.uid, "s1");
    assert_eq!(svc.kind, ServiceType::NodePort);
    assert_eq!(
        svc.cluster_ips,
        vec!["10.96.0.10".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(
        svc.external_ips,
        vec!["198.51.100.7".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(svc.ports.len(), 2);
    assert_eq!(
        (
            svc.ports[0].port,
            svc.ports[0].node_port,
            svc.ports[0].protocol
        ),
        (80, Some(30080), Protocol::Tcp)
    );
    assert_eq!(svc.ports[0].target_port, TargetPort::Number(8080));
    assert_eq!(
        (svc.ports[1].protocol, svc.ports[1].node_port),
        (Protocol::Udp, None)
    );
    assert_eq!(svc.ports[1].target_port, TargetPort::Name("dns".into()));

    let eps = &m.endpoints[&key];
    assert_eq!(eps.len(), 2);
    assert_eq!(
        eps[0].node.as_deref(),
        Some("worker1"),
        "node found through the pod with that address"
    );
    assert_eq!(eps[0].weight, None);
    assert_eq!(
        (eps[1].node.as_deref(), eps[1].weight),
        (Some("worker9"), Some(3))
    );
    assert_eq!(
        eps[0].ports[1].protocol,
        Protocol::Udp,
        "protocol from the same-named service port"
    );
    assert_eq!(eps[0].ports[1].port, 5353);

    // DELETE as the watcher does, expecting 200.
    let (s, _) = h.call("DELETE", &item(Kind::Service, "s1"), None).await;
    assert_eq!(s, StatusCode::OK);
    let published = h.nb.settled().await;
    assert!(published.model.services.is_empty());
    assert!(published.model.endpoints.is_empty());
}

#[tokio::test]
async fn the_design_document_minimal_form() {
    let h = Harness::new();
    let (s, _) = h
        .call(
            "PUT",
            &container(Kind::Pod),
            Some(json!({ "pod:coe": { "pod:pods": [
            watcher_pod("AFbcF0EB-Fc3f-acea-A438-5CFDfCEfbcb0", "p", "10.244.1.5", "172.18.0.2")
        ] } })),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let body = json!({
        "service:service-information": {
            "service:services": [ {
                "service:uid": "EeafFFB7-D9Fc-aAeD-FBc9-8Af8BFaacDD9",
                "service:cluster-ip-address": "5.21.5.0",
                "service:endpoints": [ "AFbcF0EB-Fc3f-acea-A438-5CFDfCEfbcb0", "not-yet-posted" ]
            } ]
        }
    });
    let (s, v) = h.call("POST", &container(Kind::Service), Some(body)).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let m = h.nb.settled().await.model.clone();
    let key = ServiceKey::new("default", "EeafFFB7-D9Fc-aAeD-FBc9-8Af8BFaacDD9");
    let svc = &m.services[&key];
    assert!(
        svc.ports.is_empty(),
        "no service-ports: every port is forwarded"
    );
    assert_eq!(svc.cluster_ips, vec!["5.21.5.0".parse::<IpAddr>().unwrap()]);
    let eps = &m.endpoints[&key];
    assert_eq!(eps.len(), 1, "an unknown pod uid gives no endpoint yet");
    assert_eq!(eps[0].address, "10.244.1.5".parse::<IpAddr>().unwrap());
    assert!(eps[0].ports.is_empty());

    // With ports, the pods serve each port's target port.
    let (s, _) = h
        .call(
            "PUT",
            &item(Kind::Service, "m2"),
            Some(json!({ "services": [ {
            "uid": "m2", "cluster-ip-address": "5.21.5.1",
            "service-ports": [ { "port": 80, "target-port": 8080 } ],
            "endpoints": [ "AFbcF0EB-Fc3f-acea-A438-5CFDfCEfbcb0" ] } ] })),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let m = h.nb.settled().await.model.clone();
    let eps = &m.endpoints[&ServiceKey::new("default", "m2")];
    assert_eq!(eps[0].ports[0].port, 8080);
    // A wildcard service and a port service cannot share a VIP.
    let (s, v) = h
        .call(
            "PUT",
            &item(Kind::Service, "m3"),
            Some(json!({ "services": [ {
            "uid": "m3", "cluster-ip-address": "5.21.5.1" } ] })),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(error_of(&v).0, "services[m3].service-ports");
}

#[tokio::test]
async fn validation_errors_name_the_field_and_change_nothing() {
    let h = Harness::new();
    let (s, _) = h
        .call(
            "PUT",
            &item(Kind::Service, "s1"),
            Some(wrapped(
                Kind::Service,
                watcher_service("s1", "a", "10.96.0.1", 80),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let before = h.nb.store();
    let revision = h.nb.settled().await.revision;

    let svc = |patch: Value| {
        let mut s = json!({ "uid": "s2", "name": "b", "cluster-ip-address": "10.96.0.2",
            "service-ports": [ { "name": "http", "port": 80, "target-port": "8080" } ] });
        merge(&mut s, patch);
        wrapped(Kind::Service, s)
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "bad cluster IP",
            svc(json!({ "cluster-ip-address": "10.96.0.300" })),
            "services[s2].cluster-ip-address",
        ),
        (
            "bad external IP",
            svc(json!({ "external-ip-address": ["x"] })),
            "services[s2].external-ip-address[0]",
        ),
        (
            "bad LB IP",
            svc(json!({ "load-balancer-IP": "1.2.3" })),
            "services[s2].load-balancer-IP",
        ),
        (
            "port too big",
            svc(json!({ "service-ports": [ { "port": 70000 } ] })),
            "services[s2].service-ports[0].port",
        ),
        (
            "port zero",
            svc(json!({ "service-ports": [ { "port": 0 } ] })),
            "services[s2].service-ports[0].port",
        ),
        (
            "port missing",
            svc(json!({ "service-ports": [ { "name": "x" } ] })),
            "services[s2].service-ports[0].port",
        ),
        (
            "port not a number",
            svc(json!({ "service-ports": [ { "port": "eighty" } ] })),
            "services[s2].service-ports[0].port",
        ),
        (
            "target port too big",
            svc(json!({ "service-ports": [ { "port": 80, "target-port": "65536" } ] })),
            "services[s2].service-ports[0].target-port",
        ),
        (
            "bad target port name",
            svc(json!({ "service-ports": [ { "port": 80, "target-port": "a b" } ] })),
            "services[s2].service-ports[0].target-port",
        ),
        (
            "unknown protocol",
            svc(json!({ "service-ports": [ { "port": 80, "protocol": "ICMP" } ] })),
            "services[s2].service-ports[0].protocol",
        ),
        (
            "node port below range",
            svc(json!({ "service-ports": [ { "port": 80, "node-port": 8080 } ] })),
            "services[s2].service-ports[0].node-port",
        ),
        (
            "node port above 65535",
            svc(json!({ "service-ports": [ { "port": 80, "node-port": 70000 } ] })),
            "services[s2].service-ports[0].node-port",
        ),
        (
            "duplicate VIP:port",
            svc(json!({ "cluster-ip-address": "10.96.0.1" })),
            "services[s2].service-ports[0].port",
        ),
        (
            "VIP:port taken through an external IP",
            svc(json!({ "external-ip-address": ["10.96.0.1"] })),
            "services[s2].service-ports[0].port",
        ),
        (
            "port twice in one service",
            svc(json!({ "service-ports": [ { "port": 80 }, { "port": 80 } ] })),
            "services[s2].service-ports[1].port",
        ),
        (
            "same name as another service",
            svc(json!({ "name": "a", "network-NS": "default" })),
            "services[s2].name",
        ),
        (
            "uid differs from URL",
            wrapped(Kind::Service, json!({ "uid": "other" })),
            "services[s2].uid",
        ),
        (
            "prefixed and bare key",
            wrapped(Kind::Service, json!({ "uid": "s2", "service:uid": "s2" })),
            "services[0].uid",
        ),
        (
            "two items for one URL",
            json!({ "services": [ { "uid": "s2" }, { "uid": "s2" } ] }),
            "services",
        ),
    ];
    for (what, body, path) in cases {
        let (s, v) = h.call("PUT", &item(Kind::Service, "s2"), Some(body)).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{what}: {v}");
        let (got_path, tag) = error_of(&v);
        assert_eq!(got_path, path, "{what}: {v}");
        assert_eq!(tag, "invalid-value", "{what}");
        assert_eq!(v["errors"]["error"][0]["error-type"], "application");
        assert!(
            v["errors"]["error"][0]["error-message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let (s, v) = h
        .call(
            "POST",
            &container(Kind::Service),
            Some(json!({ "services": [ { "uid": "s 2" } ] })),
        )
        .await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "services[0].uid"),
        "bad uid"
    );
    let (s, v) = h
        .call(
            "POST",
            &container(Kind::Service),
            Some(json!({ "services": [ { "name": "x" } ] })),
        )
        .await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "services[0].uid"),
        "missing uid"
    );
    // UDP 80 on the same VIP is a different VIP:port.
    let (s, v) = h
        .call(
            "PUT",
            &item(Kind::Service, "s2"),
            Some(svc(json!({ "cluster-ip-address": "10.96.0.1",
        "service-ports": [ { "port": 80, "protocol": "UDP" } ] }))),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        h.call("DELETE", &item(Kind::Service, "s2"), None).await.0,
        StatusCode::OK
    );
    assert_eq!(h.nb.store(), before);
    let revision = revision + 2;

    let other: Vec<(Kind, Value, &str)> = vec![
        (
            Kind::Endpoints,
            json!({ "uid": "e", "name": "a", "endpoint-addresses": [ { "ip-address": "10.0.0.256" } ] }),
            "endpoints[e].endpoint-addresses[0].ip-address",
        ),
        (
            Kind::Endpoints,
            json!({ "uid": "e", "name": "a", "endpoint-addresses": [ { "host-name": "x" } ] }),
            "endpoints[e].endpoint-addresses[0].ip-address",
        ),
        (
            Kind::Endpoints,
            json!({ "uid": "e", "name": "a", "endpoint-addresses": [ { "ip-address": "10.0.0.1", "weight": 65536 } ] }),
            "endpoints[e].endpoint-addresses[0].weight",
        ),
        (
            Kind::Endpoints,
            json!({ "uid": "e", "name": "a", "endpoint-ports": [ { "port": -1 } ] }),
            "endpoints[e].endpoint-ports[0].port",
        ),
        (
            Kind::Endpoints,
            json!({ "uid": "e", "name": "a", "endpoint-ports": [ { "port": 80, "protocol": "tcpx" } ] }),
            "endpoints[e].endpoint-ports[0].protocol",
        ),
        (Kind::Endpoints, json!({ "uid": "e" }), "endpoints[e].name"),
        (
            Kind::Pod,
            json!({ "uid": "e", "host-ip-address": "host" }),
            "pods[e].host-ip-address",
        ),
        (
            Kind::Pod,
            json!({ "uid": "e", "port-mac-address": "0a:58:0a" }),
            "pods[e].port-mac-address",
        ),
        (
            Kind::Pod,
            json!({ "uid": "e", "interface": [ { "uid": "i", "ip-address": "::g" } ] }),
            "pods[e].interface[0].ip-address",
        ),
        (
            Kind::Pod,
            json!({ "uid": "e", "interface": [ { "uid": "i", "network-type": "MPLS" } ] }),
            "pods[e].interface[0].network-type",
        ),
        (
            Kind::Pod,
            json!({ "uid": "e", "interface": [ { "uid": "i", "segmentation-id": -5 } ] }),
            "pods[e].interface[0].segmentation-id",
        ),
        (
            Kind::Pod,
            json!({ "uid": "e", "interface": [ { "uid": "" } ] }),
            "pods[e].interface[0].uid",
        ),
        (
            Kind::Node,
            json!({ "uid": "e", "internal-ip-address": "1.1.1.1.1" }),
            "k8s-nodes[e].internal-ip-address",
        ),
        (
            Kind::Node,
            json!({ "uid": "e", "pod-cidr": "10.244.0.0/33" }),
            "k8s-nodes[e].pod-cidr",
        ),
    ];
    for (kind, body, path) in other {
        let (s, v) = h
            .call("PUT", &item(kind, "e"), Some(wrapped(kind, body)))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{path}: {v}");
        assert_eq!(error_of(&v).0, path, "{v}");
    }
    assert_eq!(h.nb.store(), before, "no rejected request changed anything");
    assert_eq!(h.nb.revision(), revision, "nothing was logged");
    assert_eq!(
        h.nb.settled().await.revision,
        revision,
        "nothing was published"
    );
}

#[tokio::test]
async fn clashes_across_objects_are_rejected() {
    let h = Harness::new();
    let ok = |v: (StatusCode, Value)| assert_eq!(v.0, StatusCode::OK, "{}", v.1);
    ok(h.call(
        "PUT",
        &item(Kind::Service, "s1"),
        Some(wrapped(
            Kind::Service,
            json!({ "uid": "s1", "cluster-ip-address": "10.96.0.1",
        "service-ports": [ { "port": 80, "node-port": 30080 } ] }),
        )),
    )
    .await);
    let (s, v) = h
        .call(
            "PUT",
            &item(Kind::Service, "s2"),
            Some(wrapped(
                Kind::Service,
                json!({ "uid": "s2", "cluster-ip-address": "10.96.0.2",
        "service-ports": [ { "port": 80, "node-port": 30080 } ] }),
            )),
        )
        .await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "services[s2].service-ports[0].node-port"
        )
    );

    ok(h.call(
        "PUT",
        &item(Kind::Endpoints, "e1"),
        Some(wrapped(
            Kind::Endpoints,
            json!({ "uid": "e1", "name": "web" }),
        )),
    )
    .await);
    let (s, v) = h
        .call(
            "PUT",
            &item(Kind::Endpoints, "e2"),
            Some(wrapped(
                Kind::Endpoints,
                json!({ "uid": "e2", "name": "web", "network-NS": "default" }),
            )),
        )
        .await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "endpoints[e2].name")
    );

    ok(h.call(
        "PUT",
        &item(Kind::Pod, "p1"),
        Some(wrapped(Kind::Pod, watcher_pod("p1", "a", "10.244.1.1", ""))),
    )
    .await);
    let (s, v) = h
        .call(
            "PUT",
            &item(Kind::Pod, "p2"),
            Some(wrapped(
                Kind::Pod,
                json!({ "uid": "p2", "interface": [ { "uid": "p1" } ] }),
            )),
        )
        .await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "pods[p2].interface[0].uid")
    );

    ok(h.call(
        "PUT",
        &item(Kind::Node, "n1"),
        Some(wrapped(
            Kind::Node,
            watcher_node("n1", "worker", "172.18.0.2"),
        )),
    )
    .await);
    let (s, v) = h
        .call(
            "PUT",
            &item(Kind::Node, "n2"),
            Some(wrapped(
                Kind::Node,
                watcher_node("n2", "worker", "172.18.0.3"),
            )),
        )
        .await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "k8s-nodes[n2].host-name")
    );
}

#[tokio::test]
async fn requests_are_atomic() {
    let h = Harness::new();
    let initial = container_body(
        Kind::Service,
        vec![
            watcher_service("s1", "a", "10.96.0.1", 80),
            watcher_service("s2", "b", "10.96.0.2", 80),
        ],
    );
    assert_eq!(
        h.call("PUT", &container(Kind::Service), Some(initial))
            .await
            .0,
        StatusCode::OK
    );
    let before = h.nb.store();
    let revision = h.nb.settled().await.revision;

    // PUT container: two good items and one bad one: nothing changes, s1 and s2 survive.
    let mut bad = watcher_service("s5", "e", "10.96.0.5", 80);
    bad["service:service-ports"][0]["service:port"] = json!(65536);
    let body = container_body(
        Kind::Service,
        vec![
            watcher_service("s3", "c", "10.96.0.3", 80),
            watcher_service("s4", "d", "10.96.0.4", 80),
            bad,
        ],
    );
    let (s, v) = h.call("PUT", &container(Kind::Service), Some(body)).await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "services[s5].service-ports[0].port"
        )
    );
    assert_eq!(h.nb.store(), before);

    // A clash between two new items of one request.
    let body = container_body(
        Kind::Service,
        vec![
            watcher_service("s3", "c", "10.96.0.9", 80),
            watcher_service("s4", "d", "10.96.0.9", 80),
        ],
    );
    let (s, v) = h.call("POST", &container(Kind::Service), Some(body)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(h.nb.store(), before);

    // A key twice in one request.
    let body = container_body(
        Kind::Service,
        vec![
            watcher_service("s3", "c", "10.96.0.3", 80),
            watcher_service("s3", "c", "10.96.0.3", 81),
        ],
    );
    let (s, v) = h.call("PUT", &container(Kind::Service), Some(body)).await;
    assert_eq!(
        (s, error_of(&v).0.as_str()),
        (StatusCode::BAD_REQUEST, "services[s3].uid")
    );
    assert_eq!(h.nb.store(), before);
    assert_eq!(h.nb.settled().await.revision, revision);
    assert_eq!(
        h.call("GET", &item(Kind::Service, "s3"), None).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn protocol_errors() {
    let h = Harness::new();
    let path = container(Kind::Service);
    // Not JSON.
    let req = Request::put(&path)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{"))
        .unwrap();
    let (s, v) = send(&h.router, req).await;
    assert_eq!(
        (s, error_of(&v).1.as_str()),
        (StatusCode::BAD_REQUEST, "malformed-message")
    );
    // Wrong container.
    let (s, v) = h
        .call("PUT", &path, Some(json!({ "pod:coe": { "pods": [] } })))
        .await;
    assert_eq!(
        (s, error_of(&v).1.as_str()),
        (StatusCode::BAD_REQUEST, "malformed-message")
    );
    // Not a list.
    let (s, _) = h
        .call("PUT", &path, Some(json!({ "services": { "uid": "x" } })))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    // Not JSON content.
    let req = Request::put(&path)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("{}"))
        .unwrap();
    let (s, v) = send(&h.router, req).await;
    assert_eq!(s, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{v}");
    let req = Request::put(item(Kind::Pod, "p"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(
        send(&h.router, req).await.0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    // Methods the API does not have.
    for (method, p) in [
        ("PATCH", path.clone()),
        ("PATCH", item(Kind::Node, "n")),
        ("PUT", coe::rest::server::OPERATIONAL_PATH.to_string()),
    ] {
        let req = Request::builder()
            .method(method)
            .uri(&p)
            .body(Body::empty())
            .unwrap();
        let resp = tower::ServiceExt::oneshot(h.router.clone(), req)
            .await
            .unwrap();
        assert_eq!(
            resp.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {p}"
        );
        assert!(resp.headers().contains_key(header::ALLOW));
        let bytes = http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(error_of(&v).1, "operation-not-supported");
    }
    // Unknown paths.
    let (s, v) = h
        .call("GET", "/restconf/config/service:nothing", None)
        .await;
    assert_eq!(
        (s, error_of(&v).1.as_str()),
        (StatusCode::NOT_FOUND, "data-missing")
    );
    // An empty container body is an empty list.
    assert_eq!(
        h.call("PUT", &path, Some(json!({}))).await.0,
        StatusCode::OK
    );
    // Bodies over the limit.
    let h = Harness::with(
        |c| c.max_body_bytes = 64,
        std::sync::Arc::new(coe::rest::operational::Unavailable),
    );
    let big = container_body(
        Kind::Service,
        vec![watcher_service("s1", "a", "10.96.0.1", 80)],
    );
    let (s, v) = h.call("PUT", &path, Some(big)).await;
    assert_eq!(
        (s, error_of(&v).1.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "too-big")
    );
    assert!(h.nb.store().services.is_empty());
}

#[tokio::test]
async fn get_returns_the_normalised_form_with_extensions() {
    let h = Harness::new();
    let body = wrapped(
        Kind::Service,
        json!({
            "service:uid": "s1", "service:name": "web", "service:network-NS": "prod",
            "service:cluster-ip-address": "fd00::10", "service:load-balancer-IP": "",
            "service:service-ports": [ { "service:port": 443, "service:protocol": "sctp", "service:target-port": "0" } ]
        }),
    );
    assert_eq!(
        h.call("PUT", &item(Kind::Service, "s1"), Some(body))
            .await
            .0,
        StatusCode::OK
    );
    let (_, v) = h.call("GET", &item(Kind::Service, "s1"), None).await;
    assert_eq!(
        v,
        json!({ "service:services": [ {
        "uid": "s1", "name": "web", "network-NS": "prod", "cluster-ip-address": "fd00::10",
        "service-ports": [ { "protocol": "SCTP", "port": 443 } ]
    } ] })
    );
    let m = h.nb.settled().await.model.clone();
    assert_eq!(m.namespaces["prod"].elan, 1);
    let svc = &m.services[&ServiceKey::new("prod", "web")];
    assert_eq!(
        svc.ports[0].target_port,
        TargetPort::Number(443),
        "target port 0 means the service port"
    );
}
