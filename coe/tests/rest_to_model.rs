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
