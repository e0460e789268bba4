//! Mutation fuzzing of the other decoders, for a bounded number of cases in every test run
//! (the OpenFlow codec's is `openflow/tests/fuzz.rs`): real inputs are mutated with
//! `ovs_tests::fuzz` and fed to
//! - the OVSDB session (framing, JSON-RPC, monitor updates), as a stream in pieces;
//! - the REST northbound's parser, container and item bodies, whose accepted items must
//!   print back to JSON that parses to the same items;
//! - the Kubernetes translation, on mutated Service, EndpointSlice, Node and Pod JSON that
//!   still deserializes.
//!
//! Each must end in a typed error or a result, quickly, never a panic.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::time::{Duration, Instant};

use coe::rest::parse;
use coe::rest::types::Kind;
use ovs_tests::fuzz::{mutate, mutation};
use proptest::prelude::*;

fn ovsdb_corpus() -> Vec<Vec<u8>> {
    [
        r#"{"id":"echo","method":"echo","params":[]}"#,
        r#"{"id":1,"result":{"Interface":{"5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e11":{"initial":{"name":"svc-gw","ofport":1,"external_ids":["map",[["iface-id","p1"],["attached-mac","02:00:00:00:00:11"]]]}}}},"error":null}"#,
        r#"{"id":null,"method":"update2","params":["m",{"Bridge":{"5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e12":{"modify":{"ports":["set",[["uuid","5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e13"]]]}}}}]}"#,
        r#"{"id":null,"method":"update3","params":["m","0f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e14",{"Open_vSwitch":{"5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e15":{"delete":null}}}]}"#,
        r#"{"id":2,"result":[{"uuid":["uuid","5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e16"]},{"count":1},{"rows":[{"name":"br-int"}]}],"error":null}"#,
        r#"{"id":3,"result":null,"error":{"error":"unknown database","details":"x"}}"#,
        r#"{"id":null,"method":"locked","params":["svcflow"]}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn rest_corpus() -> Vec<(Kind, Vec<u8>)> {
    let s = |k: Kind, t: &str| (k, t.as_bytes().to_vec());
    vec![
        s(
            Kind::Service,
            r#"{"service:service-information":{"service:services":[{"service:uid":"s1",
            "service:name":"web","service:network-NS":"default","service:cluster-ip-address":
            "10.96.0.10","service:external-ip-address":["198.51.100.7"],"service:service-ports":
            [{"service:name":"http","service:port":80,"service:target-port":"8080",
            "service:node-port":30080},{"service:name":"dns","service:port":53,
            "service:protocol":"UDP"}]}]}}"#,
        ),
        s(
            Kind::Endpoints,
            r#"{"service:endpoints":[{"service:uid":"e1","service:name":"web",
            "service:network-NS":"default","service:endpoint-addresses":[{"service:ip-address":
            "10.244.1.5","service:node-name":"n1"},{"service:ip-address":"10.244.1.6",
            "weight":3}],"service:endpoint-ports":[{"service:name":"http","service:port":8080}]}]}"#,
        ),
        s(
            Kind::Pod,
            r#"{"pods":[{"uid":"p1","name":"web-1","host-ip-address":"192.0.2.1",
            "network-NS":"default","port-mac-address":"02:00:00:00:00:11","interface":[{"uid":
            "i1","ip-address":"10.244.1.5","network-type":"VXLAN","segmentation-id":7}]}]}"#,
        ),
        s(
            Kind::Node,
            r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"n1","k8s-node:host-name":"n1",
            "k8s-node:internal-ip-address":"192.0.2.1","k8s-node:pod-cidr":"10.244.1.0/24"}]}"#,
        ),
    ]
}

fn k8s_corpus() -> Vec<Vec<u8>> {
    [
        r#"{"apiVersion":"v1","kind":"Service","metadata":{"namespace":"default","name":"web","uid":"u1","annotations":{"svcflow.io/topology-keys":"kubernetes.io/hostname,*"}},"spec":{"type":"LoadBalancer","clusterIP":"10.96.0.10","clusterIPs":["10.96.0.10"],"externalIPs":["198.51.100.7"],"externalTrafficPolicy":"Local","healthCheckNodePort":32000,"sessionAffinity":"ClientIP","sessionAffinityConfig":{"clientIP":{"timeoutSeconds":30}},"loadBalancerSourceRanges":["10.0.0.0/8"],"ports":[{"name":"http","protocol":"TCP","port":80,"targetPort":"http","nodePort":30080}]},"status":{"loadBalancer":{"ingress":[{"ip":"203.0.113.9"}]}}}"#,
        r#"{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"namespace":"default","name":"web-x","labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","ports":[{"name":"http","protocol":"TCP","port":8080}],"endpoints":[{"addresses":["10.244.0.11"],"nodeName":"n1","zone":"a","hints":{"forZones":[{"name":"a"}]},"conditions":{"ready":true,"serving":true,"terminating":false}}]}"#,
        r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"kubernetes.io/hostname":"n1","topology.kubernetes.io/zone":"a"}},"spec":{"podCIDR":"10.244.0.0/24","podCIDRs":["10.244.0.0/24"]},"status":{"addresses":[{"type":"InternalIP","address":"192.168.50.10"}]}}"#,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"namespace":"default","name":"p1","annotations":{"svcflow.io/mac-address":"02:00:00:00:00:11"}},"spec":{"nodeName":"n1","containers":[]},"status":{"phase":"Running","podIP":"10.244.0.11","podIPs":[{"ip":"10.244.0.11"}]}}"#,
        r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default"}}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: ovs_tests::fuzz::cases(2000), ..ProptestConfig::default() })]

    #[test]
    fn the_ovsdb_session_takes_mutated_messages_without_panicking(
        seeds in proptest::collection::vec((any::<usize>(), proptest::collection::vec(mutation(), 0..4)), 1..6),
        piece in 1usize..200,
    ) {
        let corpus = ovsdb_corpus();
        let t0 = std::time::Instant::now();
        let mut s = ovsdb::Session::new(ovsdb::SessionConfig::default(), t0);
        let _ = s.monitor("Open_vSwitch", "m", Default::default());
        let mut stream = Vec::new();
        for (seed, ms) in &seeds {
            stream.extend(mutate(&corpus[seed % corpus.len()], ms, &corpus));
        }
        let started = Instant::now();
        for chunk in stream.chunks(piece) {
            let _ = s.handle_bytes(chunk, t0);
            while s.poll_event().is_some() {}
            while s.poll_transmit().is_some() {}
        }
        prop_assert!(started.elapsed() < Duration::from_millis(250));
    }

    #[test]
    fn rest_bodies_parse_or_fail_with_a_typed_error(
        seed in any::<usize>(),
        ms in proptest::collection::vec(mutation(), 1..5),
    ) {
        let corpus = rest_corpus();
        let (kind, body) = &corpus[seed % corpus.len()];
        let bytes: Vec<Vec<u8>> = corpus.iter().map(|(_, b)| b.clone()).collect();
        let mutated = mutate(body, &ms, &bytes);
        let started = Instant::now();
        match parse::container_body(*kind, &mutated) {
            Ok(items) => {
                // What is accepted prints back to JSON that parses to the same items.
                let list: Vec<serde_json::Value> = items.iter().map(|i| i.to_json()).collect();
                let again = serde_json::json!({ kind.list(): list }).to_string();
                let back = parse::container_body(*kind, again.as_bytes());
                prop_assert!(back.is_ok(), "{:?} does not parse back: {:?}", again, back);
                prop_assert_eq!(back.unwrap(), items);
            }
            Err(e) => {
                prop_assert!((400..500).contains(&e.status()), "{}", e);
                let _ = e.body();
            }
        }
        let _ = parse::item_body(*kind, "u1", &mutated);
        prop_assert!(started.elapsed() < Duration::from_millis(250));
    }

    #[test]
    fn datastore_bodies_parse_or_fail_with_a_typed_error(
        ms in proptest::collection::vec(mutation(), 1..5),
    ) {
        let corpus = rest_corpus();
        // The seed: every container, each with the corpus's first body of its kind that parses.
        let mut doc = serde_json::Map::new();
        for kind in coe::rest::types::Kind::ALL {
            let items = corpus
                .iter()
                .filter(|(k, _)| *k == kind)
                .find_map(|(_, b)| parse::container_body(kind, b).ok())
                .unwrap_or_default();
            let list: Vec<serde_json::Value> = items.iter().map(|i| i.to_json()).collect();
            doc.insert(kind.qualified_container(), serde_json::json!({ kind.list(): list }));
        }
        let seed = serde_json::Value::Object(doc).to_string().into_bytes();
        prop_assert!(parse::datastore_body(&seed).is_ok());
        let bytes: Vec<Vec<u8>> = corpus.iter().map(|(_, b)| b.clone()).collect();
        let mutated = mutate(&seed, &ms, &bytes);
        let started = Instant::now();
        match parse::datastore_body(&mutated) {
            Ok(lists) => {
                // What is accepted prints back to JSON that parses to the same lists.
                let doc: serde_json::Map<String, serde_json::Value> = lists
                    .iter()
                    .map(|(kind, items)| {
                        let list: Vec<serde_json::Value> = items.iter().map(|i| i.to_json()).collect();
                        (kind.qualified_container(), serde_json::json!({ kind.list(): list }))
                    })
                    .collect();
                let again = serde_json::Value::Object(doc).to_string();
                let back = parse::datastore_body(again.as_bytes());
                prop_assert!(back.is_ok(), "{:?} does not parse back: {:?}", again, back);
                prop_assert_eq!(back.unwrap(), lists);
            }
            Err(e) => {
                prop_assert!((400..500).contains(&e.status()), "{}", e);
                let _ = e.body();
            }
        }
        prop_assert!(started.elapsed() < Duration::from_millis(250));
    }

    #[test]
    fn kubernetes_objects_translate_or_are_refused(
        seeds in proptest::collection::vec((any::<usize>(), proptest::collection::vec(mutation(), 0..4)), 1..8),
    ) {
        use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        let corpus = k8s_corpus();
        let mut snapshot = coe::k8s::Snapshot::default();
        for (seed, ms) in &seeds {
            let bytes = mutate(&corpus[seed % corpus.len()], ms, &corpus);
            // Only what still deserializes reaches the translation, as with the API server.
            if let Ok(s) = serde_json::from_slice::<Service>(&bytes) {
                snapshot.services.push(Arc::new(s.into()));
            } else if let Ok(e) = serde_json::from_slice::<EndpointSlice>(&bytes) {
                snapshot.endpoint_slices.push(Arc::new(e.into()));
            } else if let Ok(n) = serde_json::from_slice::<Node>(&bytes) {
                snapshot.nodes.push(Arc::new(n.into()));
            } else if let Ok(p) = serde_json::from_slice::<Pod>(&bytes) {
                snapshot.pods.push(Arc::new(p.into()));
            } else if let Ok(n) = serde_json::from_slice::<Namespace>(&bytes) {
                snapshot.namespaces.push(Arc::new(n.into()));
            }
        }
        let started = Instant::now();
        let _ = coe::k8s::translate(&snapshot);
        prop_assert!(started.elapsed() < Duration::from_millis(250));
    }
}
