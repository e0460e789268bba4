//! The keyed Kubernetes translation follows random object changes exactly as a whole
//! translation of the same objects would.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use coe::k8s::keyed::{Changes, Keyed, key_of};
use coe::k8s::translate::{Snapshot, translate};
use proptest::prelude::*;
use serde_json::{Value, json};

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

/// One object, by kind and number, in one of a few versions.
fn service(n: usize, v: usize) -> Value {
    let mut meta = json!({"namespace": if n % 3 == 2 { "prod" } else { "default" },
        "name": format!("s{n}"), "uid": format!("su{n}")});
    if v == 1 {
        meta["annotations"] = json!({"svcflow.io/topology-keys": "zone,*"});
    }
    let ports = if v == 2 {
        json!([{"name": "http", "port": 80, "targetPort": "web"}, {"name": "bad", "port": 0}])
    } else {
        json!([{"name": "http", "port": 80, "targetPort": 8080}])
    };
    json!({"metadata": meta, "spec": {"clusterIP": format!("10.96.0.{}", 10 + n), "ports": ports}})
}

fn slice(n: usize, v: usize) -> Value {
    // Slice n belongs to service n % 4, or (version 1) to another service.
    let service = if v == 1 { (n + 1) % 4 } else { n % 4 };
    let namespace = if service % 3 == 2 { "prod" } else { "default" };
    let endpoints: Vec<Value> = (0..(1 + v))
        .map(|i| {
            json!({"addresses": [format!("10.244.{}.{}", i % 2, n * 4 + i)],
            "nodeName": format!("node{}", i % 3),
            "conditions": {"ready": i % 2 == 0}})
        })
        .chain(if v == 2 {
            vec![json!({"addresses": ["not-an-ip"]})]
        } else {
            vec![]
        })
        .collect();
    json!({"metadata": {"namespace": namespace, "name": format!("sl{n}"),
            "labels": {"kubernetes.io/service-name": format!("s{service}")}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080 + v as i32}],
        "endpoints": endpoints})
}

fn node(n: usize, v: usize) -> Value {
    json!({"metadata": {"name": format!("node{n}"), "labels": {"zone": format!("z{}", (n + v) % 2)}},
        "spec": {"podCIDR": format!("10.244.{n}.0/24")},
        "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.0.{}", 1 + n + v)}]}})
}

fn pod(n: usize, v: usize) -> Value {
    json!({"metadata": {"namespace": if v == 1 { "prod" } else { "default" }, "name": format!("p{n}"),
            "uid": format!("pu{n}-{v}")},
        "spec": {"nodeName": format!("node{}", n % 3), "containers": []},
        "status": {"podIP": if v == 2 { "bogus".to_string() } else { format!("10.244.{}.{}", n % 3, 100 + n) }}})
}

fn namespace(n: usize) -> Value {
    let name = ["default", "prod", "dev"][n % 3];
    json!({"metadata": {"name": name}})
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Service,
    Slice,
    Node,
    Pod,
    Namespace,
}

#[derive(Debug, Clone)]
enum Event {
    Apply(Kind, usize, usize),
    Delete(Kind, usize),
    Relist,
}

fn event() -> impl Strategy<Value = Event> {
    let kind = prop_oneof![
        3 => Just(Kind::Service),
        3 => Just(Kind::Slice),
        1 => Just(Kind::Node),
        2 => Just(Kind::Pod),
        1 => Just(Kind::Namespace),
    ];
    prop_oneof![
        6 => (kind.clone(), 0..5usize, 0..3usize).prop_map(|(k, n, v)| Event::Apply(k, n, v)),
        2 => (kind, 0..5usize).prop_map(|(k, n)| Event::Delete(k, n)),
        1 => Just(Event::Relist),
    ]
}

/// Puts (or with `None` removes) an object into the snapshot, recording the change.
fn put<T: serde::de::DeserializeOwned + coe::k8s::slim::Object>(
    list: &mut Vec<Arc<T>>,
    value: Option<Value>,
    name: &Value,
) -> (String, String) {
    let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
        serde_json::from_value(name.clone()).unwrap();
    let key = key_of(&meta);
    list.retain(|o| o.meta().key() != key);
    if let Some(v) = value {
        list.push(obj(v));
    }
    key
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_keyed_translation_equals_a_whole_one(events in proptest::collection::vec(event(), 1..40)) {
        let mut snap = Snapshot::default();
        let mut keyed = Keyed::new(&snap);
        for e in &events {
            let mut changes = Changes::default();
            match *e {
                Event::Relist => changes.all = true,
                Event::Apply(kind, n, _) | Event::Delete(kind, n) => {
                    let version = match *e { Event::Apply(_, _, v) => v, _ => 0 };
                    let apply = matches!(e, Event::Apply(..));
                    match kind {
                        Kind::Service => {
                            let value = service(n, version);
                            let key = put(&mut snap.services, apply.then(|| value.clone()), &value["metadata"]);
                            changes.services.insert(key);
                        }
                        Kind::Slice => {
                            let value = slice(n, version);
                            // A slice's namespace follows its service: delete both spellings.
                            for other in 0..3 {
                                let old = slice(n, other);
                                if old["metadata"]["namespace"] != value["metadata"]["namespace"] {
                                    let key = put(&mut snap.endpoint_slices, None, &old["metadata"]);
                                    changes.slices.insert(key);
                                }
                            }
                            let key = put(&mut snap.endpoint_slices, apply.then(|| value.clone()), &value["metadata"]);
                            changes.slices.insert(key);
                        }
                        Kind::Node => {
                            let value = node(n, version);
                            let key = put(&mut snap.nodes, apply.then(|| value.clone()), &value["metadata"]);
                            changes.nodes.insert(key.1);
                        }
                        Kind::Pod => {
                            let value = pod(n, version);
                            for other in 0..3 {
                                let old = pod(n, other);
                                if old["metadata"]["namespace"] != value["metadata"]["namespace"] {
                                    let key = put(&mut snap.pods, None, &old["metadata"]);
                                    changes.pods.insert(key);
                                }
                            }
                            let key = put(&mut snap.pods, apply.then(|| value.clone()), &value["metadata"]);
                            changes.pods.insert(key);
                        }
                        Kind::Namespace => {
                            let value = namespace(n);
                            put(&mut snap.namespaces, apply.then(|| value.clone()), &value["metadata"]);
                            changes.namespaces = true;
                        }
                    }
                }
            }
            keyed.apply(&snap, &changes);
            prop_assert_eq!(keyed.translation(), translate(&snap), "after {:?}", e);
        }
    }
}
