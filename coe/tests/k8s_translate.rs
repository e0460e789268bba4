//! Table-driven tests of the pure translation from Kubernetes objects to the model.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use coe::k8s::translate::{Dropped, Snapshot, translate};
use netvirt::model::{
    Endpoint, EndpointConditions, EndpointPort, Protocol, Service, ServiceKey, ServicePort,
    ServiceType, SessionAffinity, TargetPort, Topology, TrafficDistribution, TrafficPolicy,
};
use serde_json::{Value, json};

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn svc(spec: Value) -> Value {
    json!({"metadata": {"namespace": "default", "name": "web", "uid": "u1"}, "spec": spec})
}

fn slice(name: &str, ports: Value, endpoints: Value) -> Value {
    json!({
        "metadata": {"namespace": "default", "name": name,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "ports": ports,
        "endpoints": endpoints,
    })
}

fn port(
    name: &str,
    protocol: Protocol,
    port: u16,
    target: TargetPort,
    node_port: Option<u16>,
) -> ServicePort {
    ServicePort {
        name: name.into(),
        protocol,
        port,
        target_port: target,
        node_port,
    }
}

fn base(cluster_ip: &str, ports: Vec<ServicePort>) -> Service {
    Service {
        key: ServiceKey::new("default", "web"),
        uid: "u1".into(),
        kind: ServiceType::ClusterIp,
        cluster_ips: vec![ip(cluster_ip)],
        ports,
        external_ips: vec![],
        lb_ingress_ips: vec![],
        session_affinity: SessionAffinity::None,
        external_traffic_policy: TrafficPolicy::Cluster,
        internal_traffic_policy: TrafficPolicy::Cluster,
        lb_source_ranges: Vec::new(),
        health_check_node_port: None,
        topology: Default::default(),
        traffic_distribution: Default::default(),
    }
}

fn http80() -> ServicePort {
    port("", Protocol::Tcp, 80, TargetPort::Number(8080), None)
}

/// Each Service shape → the model's Service.
#[test]
fn services_translate_field_by_field() {
    let cases: Vec<(&str, Value, Option<Service>)> = vec![
        (
            "ClusterIP, defaults",
            svc(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80, "targetPort": 8080}]})),
            Some(base("10.96.0.10", vec![http80()])),
        ),
        (
            "dual-stack clusterIPs",
            svc(
                json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
                       "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
            Some(Service {
                cluster_ips: vec![ip("10.96.0.10"), ip("fd00::10")],
                ..base("10.96.0.10", vec![http80()])
            }),
        ),
        (
            "NodePort, Local external traffic",
            svc(
                json!({"type": "NodePort", "clusterIP": "10.96.0.10", "externalTrafficPolicy": "Local",
                       "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]}),
            ),
            Some(Service {
                kind: ServiceType::NodePort,
                external_traffic_policy: TrafficPolicy::Local,
                ..base(
                    "10.96.0.10",
                    vec![port(
                        "",
                        Protocol::Tcp,
                        80,
                        TargetPort::Number(8080),
                        Some(30080),
                    )],
                )
            }),
        ),
        (
            "LoadBalancer with ingress IPs; Proxy mode and hostnames skipped",
            json!({"metadata": {"namespace": "default", "name": "web", "uid": "u1"},
                   "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                            "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]},
                   "status": {"loadBalancer": {"ingress": [
                       {"ip": "203.0.113.7"}, {"ip": "203.0.113.8", "ipMode": "Proxy"},
                       {"hostname": "lb.example"}, {"ip": "203.0.113.9", "ipMode": "VIP"}]}}}),
            Some(Service {
                kind: ServiceType::LoadBalancer,
                lb_ingress_ips: vec![ip("203.0.113.7"), ip("203.0.113.9")],
                ..base(
                    "10.96.0.10",
                    vec![port(
                        "",
                        Protocol::Tcp,
                        80,
                        TargetPort::Number(8080),
                        Some(30080),
                    )],
                )
            }),
        ),
        (
            "ingress IPs of a ClusterIP service are ignored; externalIPs kept",
            json!({"metadata": {"namespace": "default", "name": "web", "uid": "u1"},
                   "spec": {"clusterIP": "10.96.0.10", "externalIPs": ["198.51.100.1"],
                            "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]},
                   "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}}),
            Some(Service {
                external_ips: vec![ip("198.51.100.1")],
                ..base("10.96.0.10", vec![http80()])
            }),
        ),
        (
            "multi-port TCP/UDP/SCTP, named and missing target ports",
            svc(json!({"clusterIP": "10.96.0.10", "ports": [
                {"name": "http", "port": 80, "targetPort": "web"},
                {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353},
                {"name": "sig", "protocol": "SCTP", "port": 3868}]})),
            Some(base(
                "10.96.0.10",
                vec![
                    port(
                        "http",
                        Protocol::Tcp,
                        80,
                        TargetPort::Name("web".into()),
                        None,
                    ),
                    port("dns", Protocol::Udp, 53, TargetPort::Number(5353), None),
                    port("sig", Protocol::Sctp, 3868, TargetPort::Number(3868), None),
                ],
            )),
        ),
        (
            "ClientIP affinity with a timeout, Local internal traffic",
            svc(
                json!({"clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP",
                       "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                       "internalTrafficPolicy": "Local",
                       "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
            Some(Service {
                session_affinity: SessionAffinity::ClientIp {
                    timeout_seconds: 600,
                },
                internal_traffic_policy: TrafficPolicy::Local,
                ..base("10.96.0.10", vec![http80()])
            }),
        ),
        (
            "ClientIP affinity defaults to 10800 s",
            svc(
                json!({"clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP",
                       "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
            Some(Service {
                session_affinity: SessionAffinity::ClientIp {
                    timeout_seconds: 10800,
                },
                ..base("10.96.0.10", vec![http80()])
            }),
        ),
        (
            "LoadBalancer with source ranges (trimmed, truncated, deduplicated) and a health-check node port",
            json!({"metadata": {"namespace": "default", "name": "web", "uid": "u1"},
                   "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                            "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000,
                            "loadBalancerSourceRanges": ["10.0.0.0/8", " 192.168.1.7/32 ",
                                                         "2001:db8::/64", "10.1.2.3/8"],
                            "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]},
                   "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.60"}]}}}),
            Some(Service {
                kind: ServiceType::LoadBalancer,
                lb_ingress_ips: vec![ip("198.18.0.60")],
                external_traffic_policy: TrafficPolicy::Local,
                lb_source_ranges: vec![
                    "10.0.0.0/8".parse().unwrap(),
                    "192.168.1.7/32".parse().unwrap(),
                    "2001:db8::/64".parse().unwrap(),
                ],
                health_check_node_port: Some(32000),
                ..base(
                    "10.96.0.10",
                    vec![port(
                        "",
                        Protocol::Tcp,
                        80,
                        TargetPort::Number(8080),
                        Some(30080),
                    )],
                )
            }),
        ),
        (
            "a health-check node port without Local, and source ranges without LoadBalancer, are ignored",
            svc(
                json!({"type": "NodePort", "clusterIP": "10.96.0.10", "healthCheckNodePort": 32000,
                       "loadBalancerSourceRanges": ["10.0.0.0/8"],
                       "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30080}]}),
            ),
            Some(Service {
                kind: ServiceType::NodePort,
                ..base(
                    "10.96.0.10",
                    vec![port(
                        "",
                        Protocol::Tcp,
                        80,
                        TargetPort::Number(8080),
                        Some(30080),
                    )],
                )
            }),
        ),
        (
            "topology keys from the annotation, trafficDistribution PreferClose",
            json!({"metadata": {"namespace": "default", "name": "web", "uid": "u1",
                                "annotations": {"svcflow.io/topology-keys":
                                    "kubernetes.io/hostname, topology.kubernetes.io/zone,*"}},
                   "spec": {"clusterIP": "10.96.0.10", "trafficDistribution": "PreferClose",
                            "ports": [{"port": 80, "targetPort": 8080}]}}),
            Some(Service {
                topology: Topology {
                    keys: vec![
                        "kubernetes.io/hostname".into(),
                        "topology.kubernetes.io/zone".into(),
                        "*".into(),
                    ],
                    node_labels: BTreeMap::new(),
                },
                traffic_distribution: TrafficDistribution::PreferClose,
                ..base("10.96.0.10", vec![http80()])
            }),
        ),
        (
            "trafficDistribution PreferSameNode",
            svc(
                json!({"clusterIP": "10.96.0.10", "trafficDistribution": "PreferSameNode",
                       "ports": [{"port": 80, "targetPort": 8080}]}),
            ),
            Some(Service {
                traffic_distribution: TrafficDistribution::PreferSameNode,
                ..base("10.96.0.10", vec![http80()])
            }),
        ),
        (
            "headless is ignored",
            svc(json!({"clusterIP": "None", "ports": [{"port": 80}]})),
            None,
        ),
        (
            "ExternalName is ignored",
            svc(json!({"type": "ExternalName", "externalName": "db.example"})),
            None,
        ),
        (
            "another proxy's service is ignored",
            json!({"metadata": {"namespace": "default", "name": "web",
                                "labels": {"service.kubernetes.io/service-proxy-name": "other"}},
                   "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}),
            None,
        ),
    ];
    for (name, service, want) in cases {
        let t = translate(&Snapshot {
            services: vec![obj(service)],
            ..Snapshot::default()
        });
        let key = ServiceKey::new("default", "web");
        assert_eq!(t.model.services.get(&key), want.as_ref(), "{name}");
        assert_eq!(
            t.model.endpoints.contains_key(&key),
            want.is_some(),
            "{name}"
        );
        assert!(t.warnings.is_empty(), "{name}: {:?}", t.warnings);
    }
}

/// Invalid values are skipped with a warning naming the object and field; never a panic.
#[test]
fn invalid_services_warn_and_are_skipped() {
    let cases: Vec<(&str, Value, bool, &str, Dropped)> = vec![
        (
            "bad cluster IP",
            svc(json!({"clusterIP": "10.96.0.300", "ports": [{"port": 80}]})),
            false,
            "spec.clusterIP",
            Dropped::Value,
        ),
        (
            "port out of range",
            svc(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 70000}, {"port": 81}]})),
            true,
            "spec.ports[0].port",
            Dropped::Value,
        ),
        (
            "only port invalid",
            svc(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 0}]})),
            false,
            "spec.ports",
            Dropped::Object,
        ),
        (
            "negative target port",
            svc(
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80, "targetPort": -1}, {"port": 81}]}),
            ),
            true,
            "spec.ports[0].targetPort",
            Dropped::Value,
        ),
        (
            "bad protocol",
            svc(
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80, "protocol": "ICMP"}, {"port": 81}]}),
            ),
            true,
            "spec.ports[0].protocol",
            Dropped::Value,
        ),
        (
            "node port out of range",
            svc(
                json!({"type": "NodePort", "clusterIP": "10.96.0.10", "ports": [{"port": 80, "nodePort": 65536}, {"port": 81}]}),
            ),
            true,
            "spec.ports[0].nodePort",
            Dropped::Value,
        ),
        (
            "bad external IP",
            svc(
                json!({"clusterIP": "10.96.0.10", "externalIPs": ["nope"], "ports": [{"port": 80}]}),
            ),
            true,
            "spec.externalIPs[0]",
            Dropped::Value,
        ),
        (
            "affinity timeout too long",
            svc(
                json!({"clusterIP": "10.96.0.10", "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 90000}}, "ports": [{"port": 80}]}),
            ),
            true,
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
            Dropped::Value,
        ),
        (
            "bad source range",
            json!({"metadata": {"namespace": "default", "name": "web"},
                   "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                            "loadBalancerSourceRanges": ["10.0.0.300/8"], "ports": [{"port": 80}]}}),
            true,
            "spec.loadBalancerSourceRanges[0]",
            Dropped::Value,
        ),
        (
            "health-check node port out of range",
            json!({"metadata": {"namespace": "default", "name": "web"},
                   "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                            "externalTrafficPolicy": "Local", "healthCheckNodePort": 70000,
                            "ports": [{"port": 80}]}}),
            true,
            "spec.healthCheckNodePort",
            Dropped::Value,
        ),
        (
            "topology keys with externalTrafficPolicy Local",
            json!({"metadata": {"namespace": "default", "name": "web",
                                "annotations": {"svcflow.io/topology-keys": "kubernetes.io/hostname"}},
                   "spec": {"type": "NodePort", "clusterIP": "10.96.0.10",
                            "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}}),
            true,
            "metadata.annotations[svcflow.io/topology-keys]",
            Dropped::Value,
        ),
        (
            "topology keys with `*` not last",
            json!({"metadata": {"namespace": "default", "name": "web",
                                "annotations": {"svcflow.io/topology-keys": "*,kubernetes.io/hostname"}},
                   "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}),
            true,
            "metadata.annotations[svcflow.io/topology-keys]",
            Dropped::Value,
        ),
        (
            "unknown traffic distribution",
            svc(
                json!({"clusterIP": "10.96.0.10", "trafficDistribution": "Anywhere", "ports": [{"port": 80}]}),
            ),
            true,
            "spec.trafficDistribution",
            Dropped::Value,
        ),
        (
            "bad traffic policy",
            svc(
                json!({"clusterIP": "10.96.0.10", "externalTrafficPolicy": "Nearby", "ports": [{"port": 80}]}),
            ),
            true,
            "spec.externalTrafficPolicy",
            Dropped::Value,
        ),
        (
            "unknown type",
            svc(json!({"type": "Magic", "clusterIP": "10.96.0.10", "ports": [{"port": 80}]})),
            false,
            "spec.type",
            Dropped::Object,
        ),
        (
            "no spec",
            json!({"metadata": {"namespace": "default", "name": "web"}}),
            false,
            "spec",
            Dropped::Object,
        ),
    ];
    for (name, service, kept, field, dropped) in cases {
        let t = translate(&Snapshot {
            services: vec![obj(service)],
            ..Snapshot::default()
        });
        let key = ServiceKey::new("default", "web");
        assert_eq!(t.model.services.contains_key(&key), kept, "{name}");
        let w = t
            .warnings
            .iter()
            .find(|w| w.field == field)
            .unwrap_or_else(|| panic!("{name}: {:?}", t.warnings));
        assert_eq!(
            (w.kind, w.object.as_str(), w.dropped),
            ("Service", "default/web", dropped),
            "{name}"
        );
        assert!(w.to_string().starts_with("Service default/web: "), "{w}");
    }
}

fn ep(
    address: &str,
    ports: Vec<EndpointPort>,
    node: Option<&str>,
    ready: bool,
    serving: bool,
    terminating: bool,
) -> Endpoint {
    Endpoint {
        address: ip(address),
        ports,
        node: node.map(str::to_string),
        conditions: EndpointConditions {
            ready,
            serving,
            terminating,
        },
        zone: None,
        zone_hints: Vec::new(),
        node_hints: Vec::new(),
        weight: None,
    }
}

fn eport(name: &str, protocol: Protocol, port: u16) -> EndpointPort {
    EndpointPort {
        name: name.into(),
        protocol,
        port,
    }
}

/// EndpointSlices → the service's endpoints.
#[test]
fn endpoint_slices_translate_with_conditions_and_ports() {
    let service = svc(json!({"clusterIP": "10.96.0.10", "ports": [
        {"name": "http", "port": 80, "targetPort": "web"},
        {"name": "dns", "protocol": "UDP", "port": 53}]}));
    let http = eport("http", Protocol::Tcp, 8080);
    let cases: Vec<(&str, Vec<Value>, Vec<Endpoint>)> = vec![
        (
            "nil conditions mean ready, serving, not terminating",
            vec![slice(
                "web-a",
                json!([{"name": "http", "port": 8080}]),
                json!([{"addresses": ["10.1.0.5"], "nodeName": "n1", "zone": "z1"}]),
            )],
            vec![Endpoint {
                zone: Some("z1".into()),
                ..ep(
                    "10.1.0.5",
                    vec![http.clone()],
                    Some("n1"),
                    true,
                    true,
                    false,
                )
            }],
        ),
        (
            "explicit conditions; nil serving follows ready",
            vec![slice(
                "web-a",
                json!([{"name": "http", "port": 8080}]),
                json!([
                {"addresses": ["10.1.0.6"], "conditions": {"ready": false, "serving": true, "terminating": true}},
                {"addresses": ["10.1.0.7"], "conditions": {"ready": false}}]),
            )],
            vec![
                ep("10.1.0.6", vec![http.clone()], None, false, true, true),
                ep("10.1.0.7", vec![http.clone()], None, false, false, false),
            ],
        ),
        (
            "slices merge; one address in two slices gets both ports",
            vec![
                slice(
                    "web-b",
                    json!([{"name": "dns", "protocol": "UDP", "port": 5353}]),
                    json!([{"addresses": ["10.1.0.5"]}]),
                ),
                slice(
                    "web-a",
                    json!([{"name": "http", "port": 8080}]),
                    json!([{"addresses": ["10.1.0.5"]}, {"addresses": ["10.1.0.4"]}]),
                ),
            ],
            vec![
                ep("10.1.0.4", vec![http.clone()], None, true, true, false),
                ep(
                    "10.1.0.5",
                    vec![http.clone(), eport("dns", Protocol::Udp, 5353)],
                    None,
                    true,
                    true,
                    false,
                ),
            ],
        ),
        (
            "other services', headless and FQDN slices are ignored",
            vec![
                json!({"metadata": {"namespace": "default", "name": "x",
                                    "labels": {"kubernetes.io/service-name": "other"}},
                       "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.9"]}]}),
                json!({"metadata": {"namespace": "prod", "name": "y",
                                    "labels": {"kubernetes.io/service-name": "web"}},
                       "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.9"]}]}),
                json!({"metadata": {"namespace": "default", "name": "z",
                                    "labels": {"kubernetes.io/service-name": "web",
                                               "service.kubernetes.io/headless": ""}},
                       "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.0.9"]}]}),
                json!({"metadata": {"namespace": "default", "name": "f",
                                    "labels": {"kubernetes.io/service-name": "web"}},
                       "addressType": "FQDN", "endpoints": [{"addresses": ["web.example"]}]}),
            ],
            vec![],
        ),
    ];
    for (name, slices, want) in cases {
        let t = translate(&Snapshot {
            services: vec![obj(service.clone())],
            endpoint_slices: slices.into_iter().map(obj).collect(),
            ..Snapshot::default()
        });
        assert_eq!(
            t.model.endpoints[&ServiceKey::new("default", "web")],
            want,
            "{name}"
        );
        assert!(t.warnings.is_empty(), "{name}: {:?}", t.warnings);
    }
}

/// The named target port resolves through the slice's port of the same name.
#[test]
fn named_target_ports_resolve_through_slice_ports() {
    let t = translate(&Snapshot {
        services: vec![obj(svc(json!({"clusterIP": "10.96.0.10", "ports": [
            {"name": "http", "port": 80, "targetPort": "web"}]})))],
        endpoint_slices: vec![obj(slice(
            "web-a",
            json!([{"name": "http", "port": 8080}]),
            json!([{"addresses": ["10.1.0.5"]}]),
        ))],
        ..Snapshot::default()
    });
    let key = ServiceKey::new("default", "web");
    let service = &t.model.services[&key];
    let endpoint = &t.model.endpoints[&key][0];
    assert_eq!(
        netvirt::resolve::endpoint_port(&service.ports[0], endpoint),
        Some(8080)
    );
}

#[test]
fn bad_endpoints_warn_and_the_rest_are_kept() {
    let t = translate(&Snapshot {
        services: vec![obj(svc(
            json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
        ))],
        endpoint_slices: vec![obj(slice(
            "web-a",
            json!([{"port": 0}, {"port": 8080}]),
            json!([
            {"addresses": ["10.1.0.999"]}, {"addresses": []}, {"addresses": ["fd00::1"]},
            {"addresses": ["10.1.0.5"]}]),
        ))],
        ..Snapshot::default()
    });
    assert_eq!(
        t.model.endpoints[&ServiceKey::new("default", "web")],
        vec![ep(
            "10.1.0.5",
            vec![eport("", Protocol::Tcp, 8080)],
            None,
            true,
            true,
            false
        )]
    );
    let fields: Vec<&str> = t.warnings.iter().map(|w| w.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "endpoints[0].addresses[0]",
            "endpoints[1].addresses",
            "endpoints[2].addresses[0]",
            "ports[0].port"
        ]
    );
    assert!(
        t.warnings
            .iter()
            .all(|w| w.object == "default/web-a" && w.kind == "EndpointSlice")
    );
}

#[test]
fn nodes_pods_and_namespaces() {
    let t = translate(&Snapshot {
        nodes: vec![
            obj(
                json!({"metadata": {"name": "n1", "labels": {"topology.kubernetes.io/zone": "z1"}},
                       "spec": {"podCIDR": "10.1.0.0/24", "podCIDRs": ["fd00:1::/64", "10.1.0.0/24"]},
                       "status": {"addresses": [
                           {"type": "Hostname", "address": "n1"},
                           {"type": "ExternalIP", "address": "203.0.113.1"},
                           {"type": "InternalIP", "address": "192.168.0.1"},
                           {"type": "InternalIP", "address": "bogus"}]}}),
            ),
            obj(json!({"metadata": {"name": "n2"}, "spec": {"podCIDR": "10.1.1.0/24"}})),
        ],
        pods: vec![
            obj(
                json!({"metadata": {"namespace": "default", "name": "client", "uid": "p1",
                                    "annotations": {"svcflow.io/mac-address": "0a:58:0a:01:00:05"}},
                       "spec": {"nodeName": "n1", "containers": []},
                       "status": {"phase": "Running", "podIP": "10.1.0.5", "podIPs": [{"ip": "10.1.0.5"}]}}),
            ),
            obj(
                json!({"metadata": {"namespace": "default", "name": "pending", "uid": "p2"},
                       "spec": {"containers": []}}),
            ),
            obj(
                json!({"metadata": {"namespace": "kube-system", "name": "hostnet", "uid": "p3"},
                       "spec": {"nodeName": "n1", "hostNetwork": true, "containers": []},
                       "status": {"podIP": "192.168.0.1"}}),
            ),
            obj(
                json!({"metadata": {"namespace": "default", "name": "done", "uid": "p4"},
                       "spec": {"nodeName": "n1", "containers": []},
                       "status": {"phase": "Succeeded", "podIP": "10.1.0.6"}}),
            ),
            obj(
                json!({"metadata": {"namespace": "prod", "name": "badmac", "uid": "p5",
                                    "annotations": {"svcflow.io/mac-address": "zz"}},
                       "spec": {"nodeName": "n2", "containers": []},
                       "status": {"podIP": "10.1.1.5"}}),
            ),
        ],
        namespaces: vec![
            obj(json!({"metadata": {"name": "default"}})),
            obj(json!({"metadata": {"name": "prod"}})),
        ],
        ..Snapshot::default()
    });
    let n1 = &t.model.nodes["n1"];
    assert_eq!(n1.ips, vec![ip("192.168.0.1"), ip("203.0.113.1")]);
    assert_eq!(n1.pod_cidrs[0].to_string(), "10.1.0.0/24");
    assert_eq!(n1.labels["topology.kubernetes.io/zone"], "z1");
    assert!(t.model.nodes["n2"].ips.is_empty());
    assert_eq!(
        t.ovsdb_remotes,
        BTreeMap::from([("n1".to_string(), "tcp:192.168.0.1:6640".to_string())])
    );
    assert_eq!(t.model.pods.keys().collect::<Vec<_>>(), ["p1", "p5"]);
    let p1 = &t.model.pods["p1"];
    assert_eq!(
        (
            p1.iface_id.as_str(),
            p1.node.as_str(),
            p1.ips.clone(),
            p1.mac.unwrap().to_string()
        ),
        (
            "default_client",
            "n1",
            vec![ip("10.1.0.5")],
            "0a:58:0a:01:00:05".to_string()
        )
    );
    assert_eq!(t.model.pods["p5"].mac, None);
    let ids = netvirt::ids::allocate(["default", "prod"], netvirt::pipeline::group::ELAN_MAX);
    assert_eq!(t.model.namespaces["default"].elan, ids["default"]);
    assert_eq!(t.model.namespaces["prod"].elan, ids["prod"]);
    let warned: Vec<(&str, &str, &str)> = t
        .warnings
        .iter()
        .map(|w| (w.kind, w.object.as_str(), w.field.as_str()))
        .collect();
    assert_eq!(
        warned,
        [
            ("Node", "n1", "status.addresses[3].address"),
            (
                "Pod",
                "prod/badmac",
                "metadata.annotations[svcflow.io/mac-address]"
            ),
        ]
    );
}

#[test]
fn the_translation_is_deterministic_whatever_the_store_order() {
    let services = vec![obj(svc(
        json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}),
    ))];
    let a = slice(
        "a",
        json!([{"port": 80}]),
        json!([{"addresses": ["10.1.0.9"]}, {"addresses": ["10.1.0.2"]}]),
    );
    let b = slice(
        "b",
        json!([{"port": 80}]),
        json!([{"addresses": ["10.1.0.5"]}]),
    );
    let one = translate(&Snapshot {
        services: services.clone(),
        endpoint_slices: vec![obj(a.clone()), obj(b.clone())],
        ..Snapshot::default()
    });
    let two = translate(&Snapshot {
        services,
        endpoint_slices: vec![obj(b), obj(a)],
        ..Snapshot::default()
    });
    assert_eq!(one, two);
}

/// Zone and node hints (`hints.forZones`, `hints.forNodes`) reach the model; empty names are
/// dropped.
#[test]
fn endpoint_zone_and_node_hints_translate() {
    let service =
        svc(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80, "targetPort": 8080}]}));
    let t = translate(&Snapshot {
        services: vec![obj(service)],
        endpoint_slices: vec![obj(slice(
            "web-a",
            json!([{"port": 8080}]),
            json!([{"addresses": ["10.1.0.5"], "zone": "z1", "nodeName": "n1",
                    "hints": {"forZones": [{"name": "z1"}, {"name": "z2"}, {"name": ""}],
                              "forNodes": [{"name": "n1"}, {"name": ""}]}},
                   {"addresses": ["10.1.0.6"], "zone": "z2"}]),
        ))],
        ..Snapshot::default()
    });
    let eps = &t.model.endpoints[&ServiceKey::new("default", "web")];
    let hints: Vec<Vec<String>> = eps.iter().map(|e| e.zone_hints.clone()).collect();
    assert_eq!(
        hints,
        vec![vec!["z1".to_string(), "z2".to_string()], vec![]]
    );
    let nodes: Vec<Vec<String>> = eps.iter().map(|e| e.node_hints.clone()).collect();
    assert_eq!(nodes, vec![vec!["n1".to_string()], vec![]]);
    assert!(t.warnings.is_empty(), "{:?}", t.warnings);
}

/// The topology-keys annotation, as the KEP validated `topologyKeys`.
#[test]
fn topology_key_annotations_parse_or_explain() {
    use coe::k8s::translate::topology_keys;
    let ok: Vec<(&str, Vec<&str>)> = vec![
        ("", vec![]),
        ("  ", vec![]),
        ("*", vec!["*"]),
        ("kubernetes.io/hostname", vec!["kubernetes.io/hostname"]),
        (
            " kubernetes.io/hostname ,topology.kubernetes.io/zone, *",
            vec!["kubernetes.io/hostname", "topology.kubernetes.io/zone", "*"],
        ),
    ];
    for (text, want) in ok {
        assert_eq!(topology_keys(text).unwrap(), want, "{text:?}");
    }
    let too_many = (0..17)
        .map(|i| format!("k{i}"))
        .collect::<Vec<_>>()
        .join(",");
    for bad in ["a,,b", "*,a", "a,a", "a b", ",", too_many.as_str()] {
        assert!(topology_keys(bad).is_err(), "{bad:?}");
    }
}

/// Topology keys carry the labels (among the keys) of the nodes the endpoints run on.
#[test]
fn topology_keys_carry_the_endpoint_nodes_labels() {
    let service = json!({"metadata": {"namespace": "default", "name": "web", "uid": "u1",
                         "annotations": {"svcflow.io/topology-keys": "topology.kubernetes.io/zone,*"}},
                         "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80, "targetPort": 8080}]}});
    let node = |name: &str, zone: &str| {
        obj(json!({"metadata": {"name": name, "labels": {
                       "topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name}},
                   "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.11"}]}}))
    };
    let t = translate(&Snapshot {
        services: vec![obj(service)],
        endpoint_slices: vec![obj(slice(
            "web-a",
            json!([{"port": 8080}]),
            json!([{"addresses": ["10.1.0.5"], "nodeName": "n2"},
                   {"addresses": ["10.1.0.6"], "nodeName": "n3"},
                   {"addresses": ["10.1.0.7"], "nodeName": "unknown"}]),
        ))],
        nodes: vec![node("n2", "z1"), node("n3", "z2"), node("n9", "z3")],
        ..Snapshot::default()
    });
    let topology = &t.model.services[&ServiceKey::new("default", "web")].topology;
    assert_eq!(topology.keys, ["topology.kubernetes.io/zone", "*"]);
    let zone = |n: &str| -> BTreeMap<String, String> {
        [("topology.kubernetes.io/zone".to_string(), n.to_string())].into()
    };
    assert_eq!(
        topology.node_labels,
        BTreeMap::from([
            ("n2".to_string(), zone("z1")),
            ("n3".to_string(), zone("z2"))
        ])
    );
}

/// Slices that list hundreds of endpoints merge as a few do: each address once, with the
/// ports of every slice that lists it (a long list is merged through an index of where each
/// address is, not by searching it).
#[test]
fn long_slices_merge_each_address_once_with_every_port() {
    let service = svc(json!({"clusterIP": "10.96.0.10", "ports": [
        {"name": "http", "port": 80, "targetPort": "web"},
        {"name": "dns", "protocol": "UDP", "port": 53}]}));
    let addresses = |from: usize, to: usize| -> Value {
        (from..to)
            .map(|i| json!({"addresses": [format!("10.1.{}.{}", i / 250, i % 250 + 1)]}))
            .collect()
    };
    for (a, b) in [(10, 20), (30, 40), (300, 400)] {
        // web-a: 0..b over http; web-b: a..2b over dns, so a..b are in both.
        let slices = vec![
            slice(
                "web-a",
                json!([{"name": "http", "port": 8080}]),
                addresses(0, b),
            ),
            slice(
                "web-b",
                json!([{"name": "dns", "protocol": "UDP", "port": 5353}]),
                addresses(a, 2 * b),
            ),
        ];
        let t = translate(&Snapshot {
            services: vec![obj(service.clone())],
            endpoint_slices: slices.into_iter().map(obj).collect(),
            ..Snapshot::default()
        });
        let list = &t.model.endpoints[&ServiceKey::new("default", "web")];
        let mut seen: Vec<IpAddr> = list.iter().map(|e| e.address).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(
            (list.len(), seen.len()),
            (2 * b, 2 * b),
            "each address once"
        );
        for e in list {
            let [.., n2, n3] = match e.address {
                IpAddr::V4(v4) => v4.octets(),
                IpAddr::V6(_) => unreachable!(),
            };
            let i = usize::from(n2) * 250 + usize::from(n3) - 1;
            let names: Vec<&str> = e.ports.iter().map(|p| p.name.as_str()).collect();
            let want: &[&str] = match (i < b, i >= a) {
                (true, true) => &["http", "dns"],
                (true, false) => &["http"],
                _ => &["dns"],
            };
            assert_eq!(names, want, "{} in slices {a}..{b}", e.address);
        }
        assert!(t.warnings.is_empty(), "{:?}", t.warnings);
    }
}
