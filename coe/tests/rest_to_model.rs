//! The pure translation from the REST store to `netvirt::model::Model`.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::net::IpAddr;

use coe::rest::parse;
use coe::rest::store::{Change, Rules, Store};
use coe::rest::to_model::{ovsdb_remotes, to_model};
use coe::rest::types::Kind;
use netvirt::model::{MacAddr, ServiceKey, ServiceType};
use serde_json::{Value, json};

fn store(items: &[(Kind, Value)]) -> Store {
    let mut store = Store::default();
    for (kind, body) in items {
        let body = json!({ kind.list(): body });
        let items = parse::container_body(*kind, body.to_string().as_bytes()).unwrap();
        store
            .apply(Change::Create(*kind, items), &Rules::default())
            .unwrap();
    }
    store
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn nodes_and_their_ovsdb_remotes() {
    let s = store(&[(
        Kind::Node,
        json!([
            { "uid": "n1", "host-name": "a", "internal-ip-address": "172.18.0.2", "external-ip-address": "172.18.0.2" },
            { "uid": "n2", "host-name": "b", "internal-ip-address": "fd00::2" },
            { "uid": "n3", "host-name": "c", "internal-ip-address": "172.18.0.4" },
            { "uid": "n4" },
        ]),
    )]);
    let m = to_model(&s);
    assert_eq!(
        m.nodes["a"].ips,
        vec![ip("172.18.0.2")],
        "repeated addresses once"
    );
    assert!(
        m.nodes.contains_key("n4"),
        "no host name: the uid names the node"
    );
    let overrides = BTreeMap::from([
        ("c".to_string(), "ssl:10.0.0.4:6640".to_string()),
        ("n4".to_string(), "unix:/run/ovs.sock".to_string()),
    ]);
    let remotes = ovsdb_remotes(&s, &overrides);
    assert_eq!(remotes["a"], "tcp:172.18.0.2:6640");
    assert_eq!(remotes["b"], "tcp:[fd00::2]:6640");
    assert_eq!(remotes["c"], "ssl:10.0.0.4:6640");
    assert_eq!(remotes["n4"], "unix:/run/ovs.sock", "overrides by uid too");
    let s = store(&[(Kind::Node, json!([{ "uid": "n5", "host-name": "e" }]))]);
    assert!(
        ovsdb_remotes(&s, &BTreeMap::new()).is_empty(),
        "no address, no remote"
    );
}

#[test]
fn pods_become_interfaces_bound_by_iface_id() {
    let s = store(&[
        (
            Kind::Node,
            json!([{ "uid": "n1", "host-name": "worker", "external-ip-address": "198.51.100.2" }]),
        ),
        (
            Kind::Pod,
            json!([{ "uid": "p1", "name": "db", "network-NS": "prod", "host-ip-address": "198.51.100.2",
            "port-mac-address": "0A:58:0A:F4:01:05",
            "interface": [ { "uid": "if-a", "ip-address": "10.244.1.5" }, { "uid": "if-b", "ip-address": "fd00::5" } ] }]),
        ),
    ]);
    let m = to_model(&s);
    assert_eq!(m.pods.len(), 2);
    let a = &m.pods["if-a"];
    assert_eq!(
        (
            a.iface_id.as_str(),
            a.name.as_str(),
            a.namespace.as_str(),
            a.node.as_str()
        ),
        ("if-a", "db", "prod", "worker")
    );
    assert_eq!(a.mac, Some(MacAddr([0x0a, 0x58, 0x0a, 0xf4, 0x01, 0x05])));
    assert_eq!(m.pods["if-b"].ips, vec![ip("fd00::5")]);
    assert_eq!(m.namespaces["prod"].elan, 1);
}

#[test]
fn a_dual_stack_interface_is_listed_once_per_family() {
    let s = store(&[(
        Kind::Pod,
        json!([{ "uid": "p1", "name": "web", "host-ip-address": "198.51.100.2",
        "interface": [ { "uid": "if-a", "ip-address": "10.244.1.5" },
                       { "uid": "if-a", "ip-address": "fd00:10:244:1::5" } ] }]),
    )]);
    let m = to_model(&s);
    assert_eq!(m.pods.len(), 1, "one interface, bound once");
    assert_eq!(
        m.pods["if-a"].ips,
        vec![ip("10.244.1.5"), ip("fd00:10:244:1::5")]
    );
    // The same uid again with an address of the same family (or none) is refused.
    for second in [json!("10.244.1.6"), json!("")] {
        let body = json!({ Kind::Pod.list(): [{ "uid": "p2", "name": "bad",
            "interface": [ { "uid": "if-b", "ip-address": "10.244.1.7" },
                           { "uid": "if-b", "ip-address": second } ] }] });
        let refused = parse::container_body(Kind::Pod, body.to_string().as_bytes());
        assert!(refused.is_err(), "{second}: {refused:?}");
    }
}

#[test]
fn service_types_and_addresses() {
    let s = store(&[(
        Kind::Service,
        json!([
            { "uid": "s1", "name": "lb", "cluster-ip-address": "10.96.0.1", "load-balancer-IP": "203.0.113.1",
              "ingress-ip-address": ["203.0.113.2", "203.0.113.1"], "service-ports": [ { "port": 80, "node-port": 30001 } ] },
            { "uid": "s2", "name": "headless", "cluster-ip-address": "", "service-ports": [ { "port": 80 } ] },
        ]),
    )]);
    let m = to_model(&s);
    let lb = &m.services[&ServiceKey::new("default", "lb")];
    assert_eq!(lb.kind, ServiceType::LoadBalancer);
    assert_eq!(
        lb.lb_ingress_ips,
        vec![ip("203.0.113.2"), ip("203.0.113.1")]
    );
    let headless = &m.services[&ServiceKey::new("default", "headless")];
    assert_eq!(headless.kind, ServiceType::ClusterIp);
    assert!(headless.cluster_ips.is_empty());
    assert!(m.endpoints[&ServiceKey::new("default", "headless")].is_empty());
}

#[test]
fn the_translation_is_deterministic() {
    let items = [
        (
            Kind::Node,
            json!([{ "uid": "n1", "host-name": "w", "internal-ip-address": "172.18.0.2" }]),
        ),
        (
            Kind::Pod,
            json!([{ "uid": "p1", "host-ip-address": "172.18.0.2", "interface": [ { "uid": "p1", "ip-address": "10.244.1.5" } ] }]),
        ),
        (
            Kind::Service,
            json!([{ "uid": "s1", "name": "web", "cluster-ip-address": "10.96.0.1", "service-ports": [ { "port": 80 } ] }]),
        ),
        (
            Kind::Endpoints,
            json!([{ "uid": "e1", "name": "web", "endpoint-addresses": [ { "ip-address": "10.244.1.5" } ],
            "endpoint-ports": [ { "port": 80 } ] }]),
        ),
    ];
    let a = to_model(&store(&items));
    let b = to_model(&store(&items));
    assert_eq!(a, b);
    let key = ServiceKey::new("default", "web");
    assert_eq!(a.endpoints[&key][0].node.as_deref(), Some("w"));
}

/// One write of the random sequences below: an item (by kind and number) put in one of two
/// versions, or deleted.
#[derive(Debug, Clone)]
enum Write {
    Put(Kind, usize, bool),
    Delete(Kind, usize),
    /// A container PUT: the kind's list becomes these items.
    Replace(Kind, Vec<(usize, bool)>),
    /// A PUT of the whole datastore: each kind's list becomes these items, except the
    /// nodes' when `None`, which are given again as the store holds them (as a resync that
    /// changes no node sends them).
    Datastore(Option<Vec<(usize, bool)>>, [Vec<(usize, bool)>; 3]),
}

fn item(kind: Kind, n: usize, alt: bool) -> Value {
    let pod_ip = |n: usize| format!("10.244.{}.{}", n % 2, 10 + n);
    match kind {
        Kind::Node => json!({ "uid": format!("n{n}"), "host-name": format!("h{n}"),
            "internal-ip-address": format!("172.18.0.{}", if alt { 50 + n } else { 2 + n }) }),
        Kind::Pod => json!({ "uid": format!("p{n}"), "name": format!("p{n}"),
            "network-NS": if alt { "other" } else { "default" },
            "host-ip-address": format!("172.18.0.{}", 2 + n % 3),
            "interface": [ { "uid": format!("p{n}"),
                "ip-address": if alt { pod_ip(n + 10) } else { pod_ip(n) } } ] }),
        Kind::Service => {
            if n % 2 == 0 {
                // Minimal form: endpoints are pods by uid.
                json!({ "uid": format!("s{n}"), "cluster-ip-address": format!("10.96.0.{}", 1 + n),
                    "service-ports": [ { "port": 80 } ],
                    "endpoints": if alt { vec![format!("p{n}")] } else { vec![format!("p{}", n + 1), "p9".to_string()] } })
            } else {
                // s1 and s5 share a name: a batch can remove one and add the other.
                json!({ "uid": format!("s{n}"), "name": format!("web{}", n % 4),
                    "cluster-ip-address": format!("10.96.0.{}", 1 + n),
                    "service-ports": [ { "name": "http", "port": if alt { 81 } else { 80 } } ] })
            }
        }
        Kind::Endpoints => {
            json!({ "uid": format!("e{n}"), "name": format!("web{}", if alt { n + 2 } else { n }),
            "endpoint-addresses": [ { "ip-address": pod_ip(n) }, { "ip-address": pod_ip(n + 10) } ],
            "endpoint-ports": [ { "name": "http", "port": 8080 } ] })
        }
    }
}

fn write() -> impl proptest::strategy::Strategy<Value = Write> {
    use proptest::prelude::*;
    let kind = prop_oneof![
        Just(Kind::Node),
        Just(Kind::Pod),
        Just(Kind::Pod),
        Just(Kind::Service),
        Just(Kind::Service),
        Just(Kind::Endpoints),
        Just(Kind::Endpoints),
    ];
    let list = || proptest::collection::vec((0..6usize, any::<bool>()), 0..4);
    prop_oneof![
        3 => (kind.clone(), 0..6usize, any::<bool>()).prop_map(|(k, n, alt)| Write::Put(k, n, alt)),
        1 => (kind.clone(), 0..6usize).prop_map(|(k, n)| Write::Delete(k, n)),
        1 => (kind, list()).prop_map(|(k, items)| Write::Replace(k, items)),
        1 => (proptest::option::of(list()), list(), list(), list())
            .prop_map(|(nodes, pods, services, endpoints)| Write::Datastore(nodes, [pods, services, endpoints])),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// The translator, fed only what each write touched, always holds the model a full
    /// translation of the store gives: after each write, or after a burst of them (the
    /// publisher translates what a burst touched at once). Translated in parts, each early
    /// model holds every service (with its endpoints) as it was before or as it is after, and
    /// everything else as it is after.
    #[test]
    fn the_translator_follows_writes_by_key(
        writes in proptest::collection::vec((write(), proptest::prelude::any::<bool>()), 1..40),
        part in 1..4usize,
    ) {
        use coe::rest::durable::Changed;
        use coe::rest::to_model::Translator;
        let mut store = Store::default();
        let mut translator = Translator::new(&store);
        let mut changed = Changed::default();
        let last = writes.len() - 1;
        for (i, (w, publish)) in writes.into_iter().enumerate() {
            let body = |kind: Kind, items: &[(usize, bool)]| {
                let items: Vec<Value> = items.iter().map(|(n, alt)| item(kind, *n, *alt)).collect();
                json!({ kind.list(): items }).to_string()
            };
            let change = match &w {
                Write::Put(kind, n, alt) => {
                    let mut items = parse::container_body(*kind, body(*kind, &[(*n, *alt)]).as_bytes()).unwrap();
                    Change::Upsert(items.remove(0))
                }
                Write::Delete(kind, n) => {
                    let prefix = match kind { Kind::Node => "n", Kind::Pod => "p", Kind::Service => "s", Kind::Endpoints => "e" };
                    Change::Delete(*kind, format!("{prefix}{n}"))
                }
                Write::Replace(kind, items) => {
                    let mut items = items.clone();
                    items.sort_by_key(|(n, _)| *n);
                    items.dedup_by_key(|(n, _)| *n);
                    match parse::container_body(*kind, body(*kind, &items).as_bytes()) {
                        Ok(items) => Change::Replace(*kind, items),
                        Err(_) => continue,
                    }
                }
                Write::Datastore(nodes, lists) => {
                    let mut doc = serde_json::Map::new();
                    let nodes = match nodes {
                        Some(nodes) => (Kind::Node, nodes.clone()),
                        None => (Kind::Node, Vec::new()),
                    };
                    let given = [
                        nodes,
                        (Kind::Pod, lists[0].clone()),
                        (Kind::Service, lists[1].clone()),
                        (Kind::Endpoints, lists[2].clone()),
                    ];
                    for (kind, items) in &given {
                        let mut items = items.clone();
                        items.sort_by_key(|(n, _)| *n);
                        items.dedup_by_key(|(n, _)| *n);
                        let items: Vec<Value> = items.iter().map(|(n, alt)| item(*kind, *n, *alt)).collect();
                        doc.insert(kind.qualified_container(), json!({ kind.list(): items }));
                    }
                    if matches!(w, Write::Datastore(None, _)) {
                        doc.insert(Kind::Node.qualified_container(), store.container_json(Kind::Node));
                    }
                    match parse::datastore_body(Value::Object(doc).to_string().as_bytes()) {
                        Ok(lists) => Change::Datastore(lists),
                        Err(_) => continue,
                    }
                }
            };
            if let Ok(applied) = store.apply(change, &Rules::default()) {
                changed.record(&applied.effects);
            }
            if publish || i == last {
                let before = translator.model().clone();
                let mut early = Vec::new();
                translator.apply_in_parts(&store, &std::mem::take(&mut changed), part, |m| {
                    early.push(m.clone());
                });
                let after = to_model(&store);
                proptest::prop_assert_eq!(translator.model(), &after, "after {:?}", w);
                for m in &early {
                    proptest::prop_assert_eq!(&m.nodes, &after.nodes);
                    proptest::prop_assert_eq!(&m.pods, &after.pods);
                    proptest::prop_assert_eq!(&m.namespaces, &after.namespaces);
                    let keys = before.services.keys().chain(after.services.keys()).chain(m.services.keys());
                    for key in keys {
                        let of = |m: &netvirt::model::Model| (m.services.get(key).cloned(), m.endpoints.get(key).cloned());
                        let now = of(m);
                        proptest::prop_assert!(now == of(&before) || now == of(&after), "{key:?} after {w:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn external_traffic_policy_local_reaches_the_model_and_other_values_are_refused() {
    let s = store(&[(
        Kind::Service,
        json!([
            { "uid": "s1", "name": "web", "cluster-ip-address": "10.96.0.1",
              "service-ports": [ { "port": 80, "node-port": 30080 } ],
              "external-traffic-policy": "Local" },
            { "uid": "s2", "name": "db", "cluster-ip-address": "10.96.0.2",
              "service-ports": [ { "port": 5432 } ], "service:external-traffic-policy": "Cluster" },
        ]),
    )]);
    let m = to_model(&s);
    let policy = |name: &str| m.services[&ServiceKey::new("default", name)].external_traffic_policy;
    assert_eq!(policy("web"), netvirt::model::TrafficPolicy::Local);
    assert_eq!(policy("db"), netvirt::model::TrafficPolicy::Cluster);
    let bad = json!({ "services": [ { "uid": "s3", "external-traffic-policy": "local" } ] });
    let err = parse::container_body(Kind::Service, bad.to_string().as_bytes()).unwrap_err();
    let text = format!("{err}");
    assert!(text.contains("expected Cluster or Local"), "{text}");
}

#[test]
fn a_health_check_node_port_reaches_the_model_and_needs_a_local_policy_and_its_own_port() {
    let s = store(&[(
        Kind::Service,
        json!([
            { "uid": "s1", "name": "lb", "cluster-ip-address": "10.96.0.1",
              "ingress-ip-address": ["192.0.2.10"],
              "service-ports": [ { "port": 80, "node-port": 30080 } ],
              "external-traffic-policy": "Local", "health-check-node-port": 32000 },
        ]),
    )]);
    let m = to_model(&s);
    let lb = &m.services[&ServiceKey::new("default", "lb")];
    assert_eq!(lb.health_check_node_port, Some(32000));
    // Without the Local policy nothing would ever probe it: refused, not ignored.
    let body = json!({ "services": [ { "uid": "s3", "health-check-node-port": 32000 } ] });
    let err = parse::container_body(Kind::Service, body.to_string().as_bytes()).unwrap_err();
    let text = format!("{err}");
    assert!(
        text.contains("health-check-node-port") && text.contains("external-traffic-policy Local"),
        "{text}"
    );
    // Outside the node port range, or on another service's node port: refused.
    for (port, why) in [
        (80, "outside the configured range"),
        (30080, "already used by service s1"),
    ] {
        let other = json!({ "uid": "s4", "name": "other", "cluster-ip-address": "10.96.0.4",
            "service-ports": [ { "port": 80 } ],
            "external-traffic-policy": "Local", "health-check-node-port": port });
        let item = parse::item_body(
            Kind::Service,
            "s4",
            json!({ "services": [other] }).to_string().as_bytes(),
        )
        .unwrap();
        let mut st = s.clone();
        let err = st
            .apply(Change::Upsert(item), &Rules::default())
            .unwrap_err();
        let text = format!("{err}");
        assert!(
            text.contains("health-check-node-port") && text.contains(why),
            "{port}: {text}"
        );
    }
}

/// A dual-stack service over REST: `cluster-ip-addresses` (svcflow's `spec.clusterIPs`)
/// gives the model both cluster IPs, so endpoints of both families serve it; its addresses
/// are checked as the API server checks them, and both are claimed against other services.
#[test]
fn a_dual_stack_service_has_both_cluster_ips() {
    let s = store(&[
        (
            Kind::Service,
            json!([
                { "uid": "s1", "name": "web", "cluster-ip-address": "10.96.0.10",
                  "cluster-ip-addresses": ["10.96.0.10", "fd00:10:96::10"],
                  "service-ports": [ { "port": 80, "target-port": 8080 } ] },
                // Without cluster-ip-address: the first becomes it.
                { "uid": "s2", "name": "db", "cluster-ip-addresses": ["fd00:10:96::20", "10.96.0.20"],
                  "service-ports": [ { "port": 5432 } ] },
            ]),
        ),
        (
            Kind::Endpoints,
            json!([{ "uid": "e1", "name": "web",
                "endpoint-addresses": [ { "ip-address": "10.244.1.5" }, { "ip-address": "fd00:10:244:1::5" } ],
                "endpoint-ports": [ { "port": 8080 } ] }]),
        ),
    ]);
    let m = to_model(&s);
    let web = &m.services[&ServiceKey::new("default", "web")];
    assert_eq!(web.cluster_ips, [ip("10.96.0.10"), ip("fd00:10:96::10")]);
    let db = &m.services[&ServiceKey::new("default", "db")];
    assert_eq!(db.cluster_ips, [ip("fd00:10:96::20"), ip("10.96.0.20")]);
    let stored = s.get(Kind::Service, "s2").unwrap().to_json().to_string();
    assert!(
        stored.contains(r#""cluster-ip-address":"fd00:10:96::20""#),
        "{stored}"
    );
    // Both endpoints serve web: none is reported unused.
    let node = netvirt::model::Node {
        name: "n1".into(),
        ips: vec![ip("192.168.50.11")],
        pod_cidrs: vec![],
        labels: BTreeMap::new(),
    };
    let mut m = m;
    m.nodes.insert("n1".into(), node.clone());
    let desired = netvirt::desired::desired(
        &node,
        &m,
        &netvirt::config::Config::default(),
        &netvirt::desired::NodeBindings::default(),
    );
    assert!(
        !desired.conflicts.iter().any(|c| c.contains("is not used")),
        "{:?}",
        desired.conflicts
    );
    // One group of one endpoint per family.
    let backends = |port: &str| desired.services[port].backends.len();
    assert_eq!(
        (
            backends("default/web:80/tcp"),
            backends("default/web:80/tcp/ipv6")
        ),
        (1, 1),
        "{:?}",
        desired.services.keys().collect::<Vec<_>>()
    );
    // Refused: two of one family, three, a first that is not cluster-ip-address.
    for (addresses, primary, why) in [
        (
            json!(["10.96.0.30", "10.96.0.31"]),
            None,
            "one IPv4 and one IPv6",
        ),
        (
            json!(["10.96.0.30", "fd00:10:96::30", "fd00:10:96::31"]),
            None,
            "at most two",
        ),
        (
            json!(["fd00:10:96::30", "10.96.0.30"]),
            Some("10.96.0.30"),
            "its first address must be cluster-ip-address 10.96.0.30",
        ),
    ] {
        let mut body = json!({ "uid": "s3", "cluster-ip-addresses": addresses });
        if let Some(p) = primary {
            body["cluster-ip-address"] = json!(p);
        }
        let body = json!({ "services": [body] });
        let err = parse::container_body(Kind::Service, body.to_string().as_bytes()).unwrap_err();
        let text = format!("{err}");
        assert!(
            text.contains("services[s3].cluster-ip-addresses") && text.contains(why),
            "{body}: {text}"
        );
    }
    // Its IPv6 cluster IP is its own: another service on it is refused.
    let other = json!({ "services": [{ "uid": "s4", "name": "other",
        "cluster-ip-address": "fd00:10:96::10", "service-ports": [ { "port": 80 } ] }] });
    let item = parse::item_body(Kind::Service, "s4", other.to_string().as_bytes()).unwrap();
    let err = s
        .clone()
        .apply(Change::Upsert(item), &Rules::default())
        .unwrap_err();
    assert!(
        format!("{err}").contains("is already used by service s1"),
        "{err}"
    );
}

/// A node port claimed twice by one service (on two of its ports of one protocol, or as a
/// port's node port and its health-check node port) is refused as another service's would be:
/// both would be flows for one port on every node. The same port on TCP and UDP is two ports.
#[test]
fn a_service_cannot_claim_one_node_port_twice() {
    let write = |service: Value| {
        let item = parse::item_body(
            Kind::Service,
            "s1",
            json!({ "services": [service] }).to_string().as_bytes(),
        )
        .unwrap();
        Store::default().apply(Change::Upsert(item), &Rules::default())
    };
    let refused = [
        (
            json!({ "uid": "s1", "name": "lb", "cluster-ip-address": "10.96.0.1",
                "service-ports": [ { "port": 80, "node-port": 30080 } ],
                "external-traffic-policy": "Local", "health-check-node-port": 30080 }),
            "services[s1].service-ports[0].node-port",
        ),
        (
            json!({ "uid": "s1", "name": "web", "cluster-ip-address": "10.96.0.1",
                "service-ports": [ { "name": "a", "port": 80, "node-port": 30080 },
                                   { "name": "b", "port": 81, "node-port": 30080 } ] }),
            "services[s1].service-ports[1].node-port",
        ),
    ];
    for (service, field) in refused {
        let err = write(service.clone()).unwrap_err();
        let text = format!("{err}");
        assert!(
            text.contains(field) && text.contains("node port 30080/TCP is given twice"),
            "{service}: {text}"
        );
    }
    // Allowed: the same number on TCP and on UDP, and a health check on a UDP port's number.
    for service in [
        json!({ "uid": "s1", "name": "dns", "cluster-ip-address": "10.96.0.1",
            "service-ports": [ { "name": "a", "port": 53, "node-port": 30053 },
                               { "name": "b", "port": 53, "protocol": "UDP", "node-port": 30053 } ] }),
        json!({ "uid": "s1", "name": "dns", "cluster-ip-address": "10.96.0.1",
            "service-ports": [ { "port": 53, "protocol": "UDP", "node-port": 30053 } ],
            "external-traffic-policy": "Local", "health-check-node-port": 30053 }),
    ] {
        write(service.clone()).unwrap_or_else(|e| panic!("{service}: {e}"));
    }
}

#[test]
fn load_balancer_source_ranges_reach_the_model_and_bad_ranges_are_refused() {
    let s = store(&[(
        Kind::Service,
        json!([
            { "uid": "s1", "name": "lb", "cluster-ip-address": "10.96.0.1",
              "ingress-ip-address": ["192.0.2.10"],
              "service-ports": [ { "port": 80 } ],
              "load-balancer-source-ranges": ["203.0.113.0/24", "2001:db8::/32", "203.0.113.0/24"] },
        ]),
    )]);
    let m = to_model(&s);
    let ranges = &m.services[&ServiceKey::new("default", "lb")].lb_source_ranges;
    let want: Vec<ipnet::IpNet> = vec![
        "203.0.113.0/24".parse().unwrap(),
        "2001:db8::/32".parse().unwrap(),
    ];
    assert_eq!(ranges, &want, "without repeats, in order");
    for bad in [json!(["203.0.113.0"]), json!([7]), json!("203.0.113.0/24")] {
        let body = json!({ "services": [ { "uid": "s3", "load-balancer-source-ranges": bad } ] });
        let err = parse::container_body(Kind::Service, body.to_string().as_bytes()).unwrap_err();
        let text = format!("{err}");
        assert!(
            text.contains("load-balancer-source-ranges"),
            "{bad}: {text}"
        );
    }
}

/// A service's endpoints hold each address once, as first listed, however long the list (a
/// long one is checked through a set instead of by searching the list).
#[test]
fn a_repeated_endpoint_address_is_served_once_in_short_and_long_lists() {
    for n in [3usize, 31, 32, 33, 200] {
        let addr = |i: usize| format!("10.128.{}.{}", i / 250, i % 250 + 1);
        let mut listed: Vec<String> = (0..n).map(addr).collect();
        // Again after the first, in the middle and at the end.
        listed.insert(1, addr(0));
        listed.insert(n / 2, addr(n - 1));
        listed.push(addr(n / 3));
        let addresses: Vec<Value> = listed
            .iter()
            .map(|a| json!({ "ip-address": a, "node-name": "n1" }))
            .collect();
        let s = store(&[
            (
                Kind::Service,
                json!([{ "uid": "s1", "name": "web", "network-NS": "default",
                         "cluster-ip-address": "10.96.0.10",
                         "service-ports": [{ "name": "http", "port": 80, "target-port": "8080" }] }]),
            ),
            (
                Kind::Endpoints,
                json!([{ "uid": "e1", "name": "web", "network-NS": "default",
                         "endpoint-addresses": addresses,
                         "endpoint-ports": [{ "name": "http", "port": 8080 }] }]),
            ),
        ]);
        let m = to_model(&s);
        let got: Vec<IpAddr> = m.endpoints[&ServiceKey::new("default", "web")]
            .iter()
            .map(|e| e.address)
            .collect();
        let mut want: Vec<IpAddr> = Vec::new();
        for a in &listed {
            if !want.contains(&ip(a)) {
                want.push(ip(a));
            }
        }
        assert_eq!(want.len(), n);
        assert_eq!(got, want, "{n} addresses");
    }
}

/// A PUT of the whole datastore gives the nodes again; when they are as they were, the
/// translator follows the services by key, publishing early parts as for a container PUT,
/// instead of translating everything again at once (what a change of nodes needs).
#[test]
fn nodes_given_again_as_they_were_keep_the_translation_by_key() {
    use coe::rest::durable::Changed;
    use coe::rest::to_model::Translator;
    let mut store = Store::default();
    let nodes = parse::container_body(
        Kind::Node,
        json!({ "k8s-nodes": [item(Kind::Node, 0, false)] })
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    store
        .apply(Change::Replace(Kind::Node, nodes), &Rules::default())
        .unwrap();
    let mut translator = Translator::new(&store);
    let services: Vec<Value> = [0, 1, 2, 3]
        .iter()
        .map(|n| item(Kind::Service, *n, false))
        .collect();
    let doc = |nodes: Value| {
        json!({
            "k8s-node:k8s-nodes-info": nodes,
            "pod:coe": { "pods": [] },
            "service:service-information": { "services": services },
            "service:endpoints-info": { "endpoints": [] },
        })
    };
    // A PUT of the whole datastore, and what it changed.
    let put = |store: &mut Store, doc: Value| {
        let lists = parse::datastore_body(doc.to_string().as_bytes()).unwrap();
        let applied = store
            .apply(Change::Datastore(lists), &Rules::default())
            .unwrap();
        let mut changed = Changed::default();
        changed.record(&applied.effects);
        changed
    };
    let mut early = 0;
    let same = doc(store.container_json(Kind::Node));
    let changed = put(&mut store, same);
    assert!(
        changed.cleared.contains(&Kind::Node) && changed.items.is_empty(),
        "{changed:?}"
    );
    translator.apply_in_parts(&store, &changed, 1, |_| early += 1);
    assert_eq!(translator.model(), &to_model(&store));
    assert!(early > 0, "translated by key, in parts");

    // Another node address: everything at once.
    let mut early = 0;
    let moved = doc(json!({ "k8s-nodes": [item(Kind::Node, 0, true)] }));
    let changed = put(&mut store, moved);
    translator.apply_in_parts(&store, &changed, 1, |_| early += 1);
    assert_eq!(translator.model(), &to_model(&store));
    assert_eq!(early, 0);
}

/// A container write of thousands of services (enough for their keys to be found on two
/// threads) translates as a full translation of the store does, every service once, with
/// a service whose uid sorts apart from its name's order among them.
#[test]
fn a_container_of_thousands_translates_as_a_full_translation() {
    use coe::rest::durable::Changed;
    use coe::rest::to_model::Translator;
    let n = coe::par::WORTH_A_THREAD * 2 + 3;
    let services: Vec<Value> = (0..n)
        .map(|i| {
            json!({ "uid": format!("uid-{:05}", n - i), "name": format!("web-{i}"),
                "cluster-ip-address": format!("10.96.{}.{}", i / 250, 1 + i % 250),
                "service-ports": [ { "name": "http", "port": 80 } ] })
        })
        .collect();
    let endpoints: Vec<Value> = (0..n)
        .map(|i| {
            json!({ "uid": format!("e-{i}"), "name": format!("web-{i}"),
                "endpoint-addresses": [ { "ip-address": format!("10.244.{}.{}", i / 250, 1 + i % 250) } ],
                "endpoint-ports": [ { "name": "http", "port": 8080 } ] })
        })
        .collect();
    let mut store = Store::default();
    let mut translator = Translator::new(&store);
    for (kind, list) in [(Kind::Endpoints, endpoints), (Kind::Service, services)] {
        let body = json!({ kind.list(): list }).to_string();
        let items = parse::container_body(kind, body.as_bytes()).unwrap();
        let applied = store
            .apply(Change::Replace(kind, items), &Rules::default())
            .unwrap();
        let mut changed = Changed::default();
        changed.record(&applied.effects);
        let mut parts = 0;
        translator.apply_in_parts(&store, &changed, 1024, |_| parts += 1);
        if kind == Kind::Service {
            assert!(parts > 1, "{parts} early models");
        }
    }
    let full = to_model(&store);
    assert_eq!(full.services.len(), n);
    assert_eq!(translator.model(), &full);
}

/// A container of thousands of services replacing another (some services gone, some new,
/// some renamed or moved to another namespace) translates as a full translation: the keys of
/// the written uids are found by walking the store beside them, and the uids that are gone
/// (in the middle of that walk, and past its end) have none.
#[test]
fn a_container_replacing_thousands_translates_as_a_full_translation() {
    use coe::rest::durable::Changed;
    use coe::rest::to_model::Translator;
    let n = coe::par::WORTH_A_THREAD * 2 + 5;
    let container = |round: usize| -> Vec<u8> {
        let services: Vec<Value> = (0..n)
            // The second round drops every third service and the last few, and adds others.
            .filter(|i| round == 0 || (i % 3 != 0 && *i < n - 4))
            .map(|i| i + if round == 1 && i % 7 == 0 { 10 * n } else { 0 })
            .map(|i| {
                let ns = if (i / 100 + round) % 2 == 0 { "a" } else { "b" };
                json!({ "uid": format!("uid-{i:06}"), "name": format!("web-{}", i + round),
                    "network-NS": ns,
                    "cluster-ip-address": format!("10.96.{}.{}", (i / 250) % 250, 1 + i % 250),
                    "service-ports": [ { "name": "http", "port": 80 } ] })
            })
            .collect();
        json!({ "services": services }).to_string().into_bytes()
    };
    let mut store = Store::default();
    let mut translator = Translator::new(&store);
    for round in 0..2 {
        let items = parse::container_body(Kind::Service, &container(round)).unwrap();
        let applied = store
            .apply(Change::Replace(Kind::Service, items), &Rules::default())
            .unwrap();
        let mut changed = Changed::default();
        changed.record(&applied.effects);
        translator.apply_in_parts(&store, &changed, 1024, |_| {});
        assert_eq!(translator.model(), &to_model(&store), "round {round}");
    }
    assert!(translator.model().services.len() < n);
}
