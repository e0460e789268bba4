//! The watched objects as svcflow keeps them: only what the translation reads. Pure.
//!
//! The watchers decode each object as `k8s-openapi` does and keep this projection of it, not
//! the object: a `k8s-openapi` EndpointSlice endpoint is 352 bytes before its strings (its
//! `targetRef` alone is seven optional strings), a Service 800, and every object carries the
//! whole `ObjectMeta` (`managedFields`, owner references, timestamps). At 30,000 Services of
//! ten endpoints the full objects were about 230 MiB of the daemon; these are a fraction of
//! that (docs/performance.md has the figures).
//!
//! What is kept, kind by kind, is exactly what [`super::translate`] reads, and nothing it
//! reads is normalised away: a value it would warn about is kept as the text it came as, so
//! the warnings are the same as from the full objects. An endpoint keeps its first address
//! only (the translation uses no other), already parsed when it is an IP address. Labels are
//! kept only where the translation reads them (a Service's
//! `service.kubernetes.io/service-proxy-name`, a slice's `kubernetes.io/service-name` and
//! `service.kubernetes.io/headless`, every label of a Node), and so are annotations (a
//! Service's topology keys, a slice's trigger time, a Pod's MAC address).
//!
//! Each type converts from its `k8s-openapi` type ([`From`]), and deserializes through it, so
//! JSON that `k8s-openapi` accepts is accepted here the same way.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use super::translate::{
    HEADLESS_LABEL, MAC_ANNOTATION, SERVICE_NAME_LABEL, SERVICE_PROXY_NAME_LABEL,
    TOPOLOGY_KEYS_ANNOTATION,
};
use super::watch::TRIGGER_TIME_ANNOTATION;

/// A namespaced object's (namespace, name).
pub type ObjKey = (String, String);

/// Labels or annotations, sorted by key; only the ones kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(Box<[(String, String)]>);

impl Labels {
    /// The entries of `map` whose key `keep` accepts.
    fn kept(map: Option<BTreeMap<String, String>>, keep: impl Fn(&str) -> bool) -> Self {
        Labels(
            map.into_iter()
                .flatten()
                .filter(|(k, _)| keep(k))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .and_then(|i| self.0.get(i))
            .map(|(_, v)| v)
    }

    /// Whether `key` is there.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every entry, as a map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.0.iter().cloned().collect()
    }
}

/// What the translation reads of an object's metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// `metadata.namespace`.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: Option<String>,
    /// `metadata.uid`, for the kinds whose uid the translation reads (Services and Pods).
    pub uid: Option<String>,
    /// The labels the translation reads.
    pub labels: Labels,
    /// The annotations the translation reads.
    pub annotations: Labels,
}

impl Meta {
    fn new(
        m: ObjectMeta,
        uid: bool,
        labels: impl Fn(&str) -> bool,
        annotations: impl Fn(&str) -> bool,
    ) -> Self {
        Meta {
            namespace: m.namespace,
            name: m.name,
            uid: m.uid.filter(|_| uid),
            labels: Labels::kept(m.labels, labels),
            annotations: Labels::kept(m.annotations, annotations),
        }
    }

    /// The object's (namespace, name), empty strings for what it lacks.
    pub fn key(&self) -> ObjKey {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name.clone().unwrap_or_default(),
        )
    }
}

fn none(_: &str) -> bool {
    false
}

/// A kept list at its length: serde builds one by pushing, which leaves room for four (a
/// Service's one port in 448 bytes, a slice's in 320).
fn exact<T>(v: Option<Vec<T>>) -> Option<Vec<T>> {
    exact_each(v, |_| {})
}

/// [`exact`], after `strip` dropped from each entry what the translation does not read.
fn exact_each<T>(v: Option<Vec<T>>, strip: impl Fn(&mut T)) -> Option<Vec<T>> {
    v.map(|mut v| {
        v.iter_mut().for_each(strip);
        v.shrink_to_fit();
        v
    })
}

/// Any of the kept kinds.
pub trait Object {
    /// Its metadata.
    fn meta(&self) -> &Meta;
}

/// Converts from the `k8s-openapi` type `$from` and deserializes through it.
macro_rules! through {
    ($ty:ident, $from:ty) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                <$from>::deserialize(d).map(Self::from)
            }
        }

        impl Object for $ty {
            fn meta(&self) -> &Meta {
                &self.metadata
            }
        }
    };
}

/// A Service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Service {
    /// Name, namespace, uid; the proxy-name label; the topology-keys annotation.
    pub metadata: Meta,
    /// What the translation reads of `spec`.
    pub spec: Option<ServiceSpec>,
    /// `status.loadBalancer`.
    pub load_balancer: Option<core::LoadBalancerStatus>,
}

/// What the translation reads of a Service's `spec`; each field is the one of the same name.
/// What most Services leave unset (or at its default) is in [`ServiceSpecMore`], allocated
/// only when there is any.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(missing_docs)]
pub struct ServiceSpec {
    pub type_: Option<String>,
    pub cluster_ip: Option<String>,
    pub cluster_ips: Option<Vec<String>>,
    pub ports: Option<Vec<core::ServicePort>>,
    more: Option<Box<ServiceSpecMore>>,
}

impl ServiceSpec {
    /// The rest of the fields.
    pub fn more(&self) -> &ServiceSpecMore {
        const NONE: &ServiceSpecMore = &ServiceSpecMore::NONE;
        self.more.as_deref().unwrap_or(NONE)
    }
}

/// The fields of a Service's `spec` most Services leave unset. `sessionAffinity: None` and
/// the traffic policies' `Cluster` (what the API server fills in) are kept as unset, which
/// the translation reads the same way.
#[derive(Debug, Clone, Default, PartialEq)]
#[allow(missing_docs)]
pub struct ServiceSpecMore {
    pub external_ips: Option<Vec<String>>,
    pub session_affinity: Option<String>,
    pub session_affinity_config: Option<core::SessionAffinityConfig>,
    pub external_traffic_policy: Option<String>,
    pub internal_traffic_policy: Option<String>,
    pub load_balancer_source_ranges: Option<Vec<String>>,
    pub health_check_node_port: Option<i32>,
    pub traffic_distribution: Option<String>,
}

impl ServiceSpecMore {
    const NONE: ServiceSpecMore = ServiceSpecMore {
        external_ips: None,
        session_affinity: None,
        session_affinity_config: None,
        external_traffic_policy: None,
        internal_traffic_policy: None,
        load_balancer_source_ranges: None,
        health_check_node_port: None,
        traffic_distribution: None,
    };
}

impl From<core::Service> for Service {
    fn from(s: core::Service) -> Self {
        Service {
            metadata: Meta::new(
                s.metadata,
                true,
                |k| k == SERVICE_PROXY_NAME_LABEL,
                |k| k == TOPOLOGY_KEYS_ANNOTATION,
            ),
            spec: s.spec.map(|s| {
                let default = |v: Option<String>, default: &str| v.filter(|v| v != default);
                let more = ServiceSpecMore {
                    external_ips: exact(s.external_ips),
                    session_affinity: default(s.session_affinity, "None"),
                    session_affinity_config: s.session_affinity_config,
                    external_traffic_policy: default(s.external_traffic_policy, "Cluster"),
                    internal_traffic_policy: default(s.internal_traffic_policy, "Cluster"),
                    load_balancer_source_ranges: exact(s.load_balancer_source_ranges),
                    health_check_node_port: s.health_check_node_port,
                    traffic_distribution: s.traffic_distribution,
                };
                ServiceSpec {
                    type_: s.type_,
                    cluster_ip: s.cluster_ip,
                    cluster_ips: exact(s.cluster_ips),
                    ports: exact_each(s.ports, |p| p.app_protocol = None),
                    more: (more != ServiceSpecMore::NONE).then(|| Box::new(more)),
                }
            }),
            load_balancer: s.status.and_then(|s| s.load_balancer).map(|mut l| {
                l.ingress = exact(l.ingress);
                l
            }),
        }
    }
}
through!(Service, core::Service);

/// An EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointSlice {
    /// Name, namespace; the service-name and headless labels; the trigger-time annotation.
    pub metadata: Meta,
    /// `addressType`.
    pub address_type: String,
    /// `endpoints`.
    pub endpoints: Box<[Endpoint]>,
    /// `ports`.
    pub ports: Option<Vec<discovery::EndpointPort>>,
}

/// An endpoint of a slice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Endpoint {
    /// `addresses[0]`, if any: the translation uses no other.
    pub address: Option<Address>,
    /// `conditions`.
    pub conditions: Option<discovery::EndpointConditions>,
    /// `hints`.
    pub hints: Option<Box<discovery::EndpointHints>>,
    /// `nodeName`.
    pub node_name: Option<Box<str>>,
    /// `zone`.
    pub zone: Option<Box<str>>,
}

/// An address as the API server gave it: parsed when the text is an IP address written the
/// way it prints (so the text can be had back), else the text itself, which the translation
/// parses (or refuses with a warning) as it would the full object's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// An IP address, written as it prints.
    Ip(IpAddr),
    /// Anything else, as it came.
    Text(Box<str>),
}

impl Address {
    fn new(text: String) -> Self {
        match text.parse::<IpAddr>() {
            Ok(ip) if ip.to_string() == text => Address::Ip(ip),
            _ => Address::Text(text.into()),
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Ip(ip) => ip.fmt(f),
            Address::Text(text) => f.write_str(text),
        }
    }
}

impl From<discovery::EndpointSlice> for EndpointSlice {
    fn from(s: discovery::EndpointSlice) -> Self {
        EndpointSlice {
            metadata: Meta::new(
                s.metadata,
                false,
                |k| k == SERVICE_NAME_LABEL || k == HEADLESS_LABEL,
                |k| k == TRIGGER_TIME_ANNOTATION,
            ),
            address_type: s.address_type,
            endpoints: s
                .endpoints
                .into_iter()
                .map(|e| Endpoint {
                    address: e.addresses.into_iter().next().map(Address::new),
                    conditions: e.conditions,
                    hints: e.hints.map(|mut h| {
                        h.for_zones = exact(h.for_zones);
                        h.for_nodes = exact(h.for_nodes);
                        Box::new(h)
                    }),
                    node_name: e.node_name.map(String::into_boxed_str),
                    zone: e.zone.map(String::into_boxed_str),
                })
                .collect(),
            ports: exact_each(s.ports, |p| p.app_protocol = None),
        }
    }
}
through!(EndpointSlice, discovery::EndpointSlice);

/// A Node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    /// Name and every label.
    pub metadata: Meta,
    /// `spec.podCIDR`.
    pub pod_cidr: Option<String>,
    /// `spec.podCIDRs`.
    pub pod_cidrs: Option<Vec<String>>,
    /// `status.addresses`.
    pub addresses: Option<Vec<core::NodeAddress>>,
}

impl From<core::Node> for Node {
    fn from(n: core::Node) -> Self {
        let (pod_cidr, pod_cidrs) = n
            .spec
            .map(|s| (s.pod_cidr, s.pod_cidrs))
            .unwrap_or_default();
        Node {
            metadata: Meta::new(n.metadata, false, |_| true, none),
            pod_cidr,
            pod_cidrs: exact(pod_cidrs),
            addresses: exact(n.status.and_then(|s| s.addresses)),
        }
    }
}
through!(Node, core::Node);

/// A Pod.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pod {
    /// Name, namespace, uid; the MAC annotation.
    pub metadata: Meta,
    /// Whether it has a `spec` at all.
    pub has_spec: bool,
    /// `spec.hostNetwork`.
    pub host_network: Option<bool>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.podIP`.
    pub pod_ip: Option<String>,
    /// `status.podIPs`.
    pub pod_ips: Option<Vec<core::PodIP>>,
}

impl From<core::Pod> for Pod {
    fn from(p: core::Pod) -> Self {
        let (has_spec, host_network, node_name) = match p.spec {
            Some(s) => (true, s.host_network, s.node_name),
            None => (false, None, None),
        };
        let (phase, pod_ip, pod_ips) = p
            .status
            .map(|s| (s.phase, s.pod_ip, s.pod_ips))
            .unwrap_or_default();
        Pod {
            metadata: Meta::new(p.metadata, true, none, |k| k == MAC_ANNOTATION),
            has_spec,
            host_network,
            node_name,
            phase,
            pod_ip,
            pod_ips: exact(pod_ips),
        }
    }
}
through!(Pod, core::Pod);

/// A Namespace: its name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Namespace {
    /// The name.
    pub metadata: Meta,
}

impl From<core::Namespace> for Namespace {
    fn from(n: core::Namespace) -> Self {
        Namespace {
            metadata: Meta::new(n.metadata, false, none, none),
        }
    }
}
through!(Namespace, core::Namespace);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    #[test]
    fn only_the_labels_and_annotations_the_translation_reads_are_kept() {
        let meta = |extra: serde_json::Value| {
            json!({"namespace": "ns", "name": "x", "uid": "u",
                   "labels": {"app": "web", (SERVICE_NAME_LABEL): "web",
                              (HEADLESS_LABEL): "", (SERVICE_PROXY_NAME_LABEL): "other"},
                   "annotations": {"note": "n", (TRIGGER_TIME_ANNOTATION): "t",
                                   (TOPOLOGY_KEYS_ANNOTATION): "*", (MAC_ANNOTATION): "m"},
                   "managedFields": [{"manager": "kubectl"}], "extra": extra})
        };
        let slice: EndpointSlice =
            serde_json::from_value(json!({"metadata": meta(json!(1)), "addressType": "IPv4"}))
                .unwrap();
        assert_eq!(
            slice
                .metadata
                .labels
                .to_map()
                .into_keys()
                .collect::<Vec<_>>(),
            [SERVICE_NAME_LABEL, HEADLESS_LABEL]
        );
        assert_eq!(
            slice.metadata.labels.get(SERVICE_NAME_LABEL).unwrap(),
            "web"
        );
        assert!(slice.metadata.labels.contains_key(HEADLESS_LABEL));
        assert!(!slice.metadata.labels.contains_key("app"));
        assert_eq!(
            slice
                .metadata
                .annotations
                .to_map()
                .into_keys()
                .collect::<Vec<_>>(),
            [TRIGGER_TIME_ANNOTATION]
        );
        let service: Service = serde_json::from_value(json!({"metadata": meta(json!(2))})).unwrap();
        assert_eq!(
            service
                .metadata
                .labels
                .to_map()
                .into_keys()
                .collect::<Vec<_>>(),
            [SERVICE_PROXY_NAME_LABEL]
        );
        assert_eq!(
            service
                .metadata
                .annotations
                .to_map()
                .into_keys()
                .collect::<Vec<_>>(),
            [TOPOLOGY_KEYS_ANNOTATION]
        );
        let pod: Pod = serde_json::from_value(json!({"metadata": meta(json!(3))})).unwrap();
        assert!(pod.metadata.labels.to_map().is_empty());
        assert_eq!(
            pod.metadata
                .annotations
                .to_map()
                .into_keys()
                .collect::<Vec<_>>(),
            [MAC_ANNOTATION]
        );
        assert!(!pod.has_spec);
        let node: Node = serde_json::from_value(json!({"metadata": meta(json!(4))})).unwrap();
        assert_eq!(
            node.metadata.labels.to_map().len(),
            4,
            "a node keeps every label"
        );
        assert!(node.metadata.annotations.to_map().is_empty());
        assert_eq!(node.metadata.key(), ("ns".to_string(), "x".to_string()));
        assert_eq!(service.metadata.uid.as_deref(), Some("u"));
        assert_eq!(pod.metadata.uid.as_deref(), Some("u"));
        assert_eq!(node.metadata.uid, None, "not read, not kept");
        assert_eq!(slice.metadata.uid, None);
    }

    /// What the API server fills in for every Service costs no allocation; anything else,
    /// a value the translation warns about included, is kept as it came.
    #[test]
    fn a_service_keeps_its_uncommon_fields_apart_and_only_when_set() {
        let spec = |extra: serde_json::Value| -> ServiceSpec {
            let mut spec = json!({"clusterIP": "10.96.0.1", "ports": [{"port": 80}]});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            serde_json::from_value::<Service>(json!({"spec": spec}))
                .unwrap()
                .spec
                .unwrap()
        };
        let plain = spec(
            json!({"sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                                "externalTrafficPolicy": "Cluster"}),
        );
        assert!(plain.more.is_none());
        assert_eq!(plain.more(), &ServiceSpecMore::default());
        let odd = spec(
            json!({"sessionAffinity": "Sticky", "internalTrafficPolicy": "Local",
                              "loadBalancerSourceRanges": ["10.0.0.0/8"]}),
        );
        assert_eq!(odd.more().session_affinity.as_deref(), Some("Sticky"));
        assert_eq!(odd.more().internal_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(odd.more().external_traffic_policy, None);
        assert_eq!(
            odd.ports.as_ref().unwrap().capacity(),
            1,
            "kept at its length"
        );
        assert_eq!(
            odd.more().load_balancer_source_ranges.as_deref(),
            Some(&["10.0.0.0/8".to_string()][..])
        );
    }

    #[test]
    fn an_address_is_parsed_only_when_it_prints_back_as_it_came() {
        for (text, parsed) in [
            ("10.1.0.5", true),
            ("fd00::5", true),
            ("FD00::5", false),
            (" 10.1.0.5", false),
            ("10.1.0.05", false),
            ("web-0.example", false),
            ("", false),
        ] {
            let a = Address::new(text.to_string());
            assert_eq!(matches!(a, Address::Ip(_)), parsed, "{text:?}");
            assert_eq!(a.to_string(), text, "the text comes back");
        }
    }

    /// An endpoint keeps its first address and what else the translation reads; the JSON's
    /// `null` and absent values mean what they mean to `k8s-openapi`.
    #[test]
    fn an_endpoint_keeps_its_first_address_and_what_the_translation_reads() {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "s"},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80, "appProtocol": "http"}],
            "endpoints": [
                {"addresses": ["10.1.0.5", "10.1.0.6"], "conditions": {"ready": false},
                 "nodeName": "n1", "zone": "z1", "hints": {"forZones": [{"name": "z1"}]},
                 "targetRef": {"kind": "Pod", "name": "p", "namespace": "ns", "uid": "u"}},
                {"addresses": null},
                {"addresses": []},
            ],
        }))
        .unwrap();
        assert_eq!(slice.endpoints.len(), 3);
        let e = &slice.endpoints[0];
        assert_eq!(e.address, Some(Address::Ip("10.1.0.5".parse().unwrap())));
        assert_eq!(e.conditions.as_ref().unwrap().ready, Some(false));
        assert_eq!(e.node_name.as_deref(), Some("n1"));
        assert_eq!(e.zone.as_deref(), Some("z1"));
        assert_eq!(
            e.hints.as_ref().unwrap().for_zones.as_ref().unwrap()[0].name,
            "z1"
        );
        assert_eq!(slice.endpoints[1].address, None);
        assert_eq!(slice.endpoints[2].address, None);
        let ports = slice.ports.as_ref().unwrap();
        assert_eq!(
            (ports[0].name.as_deref(), ports[0].port),
            (Some("http"), Some(80))
        );
        assert_eq!(ports[0].app_protocol, None, "not read, not kept");
        assert_eq!(ports.capacity(), 1, "kept at its length");
        // What an endpoint costs before its strings: a fifth of the full type's 352 bytes.
        assert!(
            std::mem::size_of::<Endpoint>() <= 72,
            "{}",
            std::mem::size_of::<Endpoint>()
        );
        // null where k8s-openapi takes null, refused where it refuses.
        let empty: EndpointSlice = serde_json::from_value(json!({"endpoints": null})).unwrap();
        assert!(empty.endpoints.is_empty() && empty.address_type.is_empty());
        assert!(serde_json::from_value::<EndpointSlice>(json!({"endpoints": 5})).is_err());
        assert!(serde_json::from_value::<Service>(json!({"kind": "Pod"})).is_err());
    }
}
