//! The store as a [`netvirt::model::Model`]. Pure and deterministic.
//!
//! - A k8s-node becomes a [`Node`] named by its host name (its uid if that is empty), with
//!   its internal and external addresses.
//! - Each pod interface becomes a [`PodInterface`] keyed and bound (`iface_id`) by the
//!   interface uid. COE pods name no node, so the node is the one whose address equals the
//!   pod's `host-ip-address`; failing that, the address itself.
//! - A service becomes a [`Service`] keyed by namespace and name (its uid in the minimal form,
//!   which has no name). No ports means "forward every port": see [`super`].
//! - The endpoints object with the service's namespace and name gives its [`Endpoint`]s; a
//!   minimal-form service's pod uids give endpoints from those pods' interface addresses.
//! - Namespaces get the ELAN ids the store allocated.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use netvirt::model::{
    Endpoint, EndpointConditions, EndpointPort, MacAddr, Model, Namespace, Node, PodInterface,
    Service, ServiceKey, ServicePort, ServiceType, SessionAffinity, TargetPort, TrafficPolicy,
};

use super::store::Store;
use super::types::{self, namespace_name};

/// The model the store describes.
pub fn to_model(store: &Store) -> Model {
    let index = Index::new(store);
    let mut model = Model::default();
    for n in store.nodes.values() {
        let mut ips = Vec::new();
        for ip in n.internal_ip.iter().chain(&n.external_ip) {
            if !ips.contains(ip) {
                ips.push(*ip);
            }
        }
        let name = n.model_name().to_string();
        model.nodes.insert(
            name.clone(),
            Node {
                name,
                ips,
                pod_cidr: n.pod_cidr,
                labels: BTreeMap::new(),
            },
        );
    }
    for (name, elan) in &store.elans {
        model.namespaces.insert(
            name.clone(),
            Namespace {
                name: name.clone(),
                elan: *elan,
            },
        );
    }
    for pod in store.pods.values() {
        let node = index.node_of(pod);
        let mac = pod
            .port_mac
            .as_deref()
            .and_then(|m| m.parse::<MacAddr>().ok());
        for iface in &pod.interface {
            model.pods.insert(
                iface.uid.clone(),
                PodInterface {
                    uid: iface.uid.clone(),
                    namespace: namespace_name(&pod.network_ns).to_string(),
                    name: pod.name.clone(),
                    ips: iface.ip_address.into_iter().collect(),
                    mac,
                    node: node.clone(),
                    iface_id: iface.uid.clone(),
                },
            );
        }
    }
    for s in store.services.values() {
        let key = service_key(s);
        let endpoints = endpoints_of(store, &index, s, &key);
        model.endpoints.insert(key.clone(), endpoints);
        model.services.insert(key.clone(), service(s, key));
    }
    model
}

/// Lookups built once per translation, so that it stays linear in the size of the store.
struct Index<'a> {
    /// Node name by internal or external address.
    node_by_ip: HashMap<IpAddr, &'a str>,
    /// Pod by interface address.
    pod_by_ip: HashMap<IpAddr, &'a types::Pod>,
    /// Endpoints object by (namespace, name).
    endpoints: HashMap<(&'a str, &'a str), &'a types::Endpoints>,
}

impl<'a> Index<'a> {
    fn new(store: &'a Store) -> Self {
        let mut node_by_ip = HashMap::new();
        for n in store.nodes.values() {
            for ip in n.internal_ip.iter().chain(&n.external_ip) {
                node_by_ip.entry(*ip).or_insert(n.model_name());
            }
        }
        let mut pod_by_ip = HashMap::new();
        for p in store.pods.values() {
            for ip in p.interface.iter().filter_map(|i| i.ip_address) {
                pod_by_ip.entry(ip).or_insert(p);
            }
        }
        let endpoints = store
            .endpoints
            .values()
            .map(|e| ((namespace_name(&e.network_ns), e.name.as_str()), e))
            .collect();
        Self {
            node_by_ip,
            pod_by_ip,
            endpoints,
        }
    }

    /// The node a pod runs on: the node with its host address, else that address, else "".
    fn node_of(&self, pod: &types::Pod) -> String {
        let Some(host) = pod.host_ip else {
            return String::new();
        };
        self.node_by_ip
            .get(&host)
            .map_or_else(|| host.to_string(), |n| n.to_string())
    }

    /// The node of the pod that has `ip` on an interface, if known.
    fn node_by_pod_ip(&self, ip: IpAddr) -> Option<String> {
        self.pod_by_ip
            .get(&ip)
            .map(|p| self.node_of(p))
            .filter(|n| !n.is_empty())
    }
}

/// The OVSDB remote of each node, by model node name: `overrides` (keyed by node name or
/// uid), else `tcp:<internal-ip-address>:6640`. Nodes with neither are left out.
pub fn ovsdb_remotes(
    store: &Store,
    overrides: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut remotes = BTreeMap::new();
    for n in store.nodes.values() {
        let name = n.model_name();
        let remote = overrides
            .get(name)
            .or_else(|| overrides.get(&n.uid))
            .cloned()
            .or_else(|| {
                n.internal_ip.map(|ip| match ip {
                    IpAddr::V4(v4) => format!("tcp:{v4}:6640"),
                    IpAddr::V6(v6) => format!("tcp:[{v6}]:6640"),
                })
            });
        if let Some(remote) = remote {
            remotes.insert(name.to_string(), remote);
        }
    }
    remotes
}

/// A service's key: its namespace, and its name or (minimal form) its uid.
pub fn service_key(s: &types::Service) -> ServiceKey {
    let name = if s.name.is_empty() { &s.uid } else { &s.name };
    ServiceKey::new(namespace_name(&s.network_ns), name)
}

fn service(s: &types::Service, key: ServiceKey) -> Service {
    let ports: Vec<ServicePort> = s
        .service_ports
        .iter()
        .map(|p| ServicePort {
            name: p.name.clone(),
            protocol: p.protocol.to_model(),
            port: p.port,
            target_port: target_port(p),
            node_port: p.node_port,
        })
        .collect();
    let mut lb_ingress_ips = s.ingress_ips.clone();
    if let Some(ip) = s.load_balancer_ip {
        if !lb_ingress_ips.contains(&ip) {
            lb_ingress_ips.push(ip);
        }
    }
    let kind = if !lb_ingress_ips.is_empty() {
        ServiceType::LoadBalancer
    } else if ports.iter().any(|p| p.node_port.is_some()) {
        ServiceType::NodePort
    } else {
        ServiceType::ClusterIp
    };
    Service {
        key,
        uid: s.uid.clone(),
        kind,
        cluster_ips: s.cluster_ip.into_iter().collect(),
        ports,
        external_ips: s.external_ips.clone(),
        lb_ingress_ips,
        session_affinity: SessionAffinity::None,
        external_traffic_policy: TrafficPolicy::Cluster,
        internal_traffic_policy: TrafficPolicy::Cluster,
        lb_source_ranges: Vec::new(),
        health_check_node_port: None,
        topology: Default::default(),
        traffic_distribution: Default::default(),
    }
}

fn target_port(p: &types::ServicePort) -> TargetPort {
    if p.target_port.is_empty() {
        return TargetPort::Number(p.port);
    }
    match p.target_port.parse::<u16>() {
        Ok(n) => TargetPort::Number(n),
        Err(_) => TargetPort::Name(p.target_port.clone()),
    }
}

fn endpoints_of(
    store: &Store,
    index: &Index<'_>,
    s: &types::Service,
    key: &ServiceKey,
) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = Vec::new();
    if let Some(e) = index
        .endpoints
        .get(&(key.namespace.as_str(), key.name.as_str()))
    {
        let ports: Vec<EndpointPort> = e
            .endpoint_ports
            .iter()
            .map(|p| EndpointPort {
                name: p.name.clone(),
                protocol: p
                    .protocol
                    .or_else(|| {
                        s.service_ports
                            .iter()
                            .find(|sp| sp.name == p.name)
                            .map(|sp| sp.protocol)
                    })
                    .unwrap_or_default()
                    .to_model(),
                port: p.port,
            })
            .collect();
        for a in &e.endpoint_addresses {
            if out.iter().any(|x| x.address == a.ip_address) {
                continue;
            }
            let node = if a.node_name.is_empty() {
                index.node_by_pod_ip(a.ip_address)
            } else {
                Some(a.node_name.clone())
            };
            out.push(Endpoint {
                address: a.ip_address,
                ports: ports.clone(),
                node,
                conditions: EndpointConditions::default(),
                zone: None,
                zone_hints: Vec::new(),
                weight: a.weight,
            });
        }
    }
    // Minimal form: pods by uid; each serves the target port of every service port.
    let ports: Vec<EndpointPort> = s
        .service_ports
        .iter()
        .map(|p| EndpointPort {
            name: p.name.clone(),
            protocol: p.protocol.to_model(),
            port: match target_port(p) {
                TargetPort::Number(n) => n,
                TargetPort::Name(_) => p.port,
            },
        })
        .collect();
    for pod_uid in s.endpoints.iter().flatten() {
        let Some(pod) = store.pods.get(pod_uid) else {
            continue;
        };
        let node = Some(index.node_of(pod)).filter(|n| !n.is_empty());
        for ip in pod.interface.iter().filter_map(|i| i.ip_address) {
            if out.iter().any(|x| x.address == ip) {
                continue;
            }
            out.push(Endpoint {
                address: ip,
                ports: ports.clone(),
                node: node.clone(),
                conditions: EndpointConditions::default(),
                zone: None,
                zone_hints: Vec::new(),
                weight: None,
            });
        }
    }
    out
}
