//! Scenario files: one node's inputs in TOML, for golden tests and for end-to-end tests that
//! install the same state on a real switch. See `tests/scenarios/*/input.toml`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;

use crate::config::Config;
use crate::desired::{GatewayPort, NodeBindings, Uplink};
use crate::model::{
    Endpoint, EndpointConditions, EndpointPort, MacAddr, Model, ModelError, Node, PodInterface,
    Protocol, Service, ServiceKey, ServicePort, ServiceType, SessionAffinity, TargetPort, Topology,
    TrafficDistribution, TrafficPolicy,
};

/// A parsed scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The node whose state is computed.
    pub node: Node,
    /// The model.
    pub model: Model,
    /// The configuration.
    pub config: Config,
    /// The node's port bindings.
    pub bindings: NodeBindings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    config: ConfigFile,
    node: NodeFile,
    /// Other nodes of the cluster (their labels matter to topology keys).
    #[serde(default)]
    nodes: Vec<NodeFile>,
    #[serde(default)]
    bindings: BindingsFile,
    #[serde(default)]
    pods: Vec<PodFile>,
    #[serde(default)]
    services: Vec<ServiceFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    local_endpoint_weight: Option<u16>,
    group_buckets_max: Option<usize>,
    /// `none`, `geneve` or `vxlan`.
    encap: Option<String>,
    /// The IPv6 service CIDR.
    service_cidr6: Option<ipnet::Ipv6Net>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeFile {
    name: String,
    #[serde(default)]
    ips: Vec<IpAddr>,
    pod_cidr: Option<IpNet>,
    /// More pod CIDRs (a dual-stack node's IPv6 one), after `pod_cidr`.
    #[serde(default)]
    pod_cidrs: Vec<IpNet>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BindingsFile {
    gateway: Option<PortFile>,
    uplink: Option<PortFile>,
    /// The tunnel port's OpenFlow port.
    tunnel: Option<u32>,
    /// The MAC of the bridge's own (LOCAL) port.
    local_mac: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortFile {
    ofport: u32,
    mac: String,
    /// The uplink's own MAC (`mac` is its next hop's).
    own_mac: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PodFile {
    name: String,
    namespace: String,
    ips: Vec<IpAddr>,
    /// The pod's MAC as the model has it; none, as a CNI-attached pod has it.
    mac: Option<String>,
    /// The MAC its OVS interface's `external_ids:attached-mac` gives.
    attached_mac: Option<String>,
    node: String,
    /// The pod's port on this node's switch, if it is bound here.
    ofport: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceFile {
    namespace: String,
    name: String,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    cluster_ips: Vec<IpAddr>,
    ports: Vec<PortSpecFile>,
    #[serde(default)]
    external_ips: Vec<IpAddr>,
    #[serde(default)]
    lb_ingress_ips: Vec<IpAddr>,
    #[serde(default)]
    external_traffic_policy_local: bool,
    #[serde(default)]
    internal_traffic_policy_local: bool,
    /// `sessionAffinity: ClientIP` with this timeout.
    session_affinity_timeout: Option<u32>,
    #[serde(default)]
    lb_source_ranges: Vec<IpNet>,
    health_check_node_port: Option<u16>,
    #[serde(default)]
    topology_keys: Vec<String>,
    #[serde(default)]
    prefer_close: bool,
    /// `trafficDistribution: PreferSameNode`.
    #[serde(default)]
    prefer_same_node: bool,
    #[serde(default)]
    endpoints: Vec<EndpointFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PortSpecFile {
    #[serde(default)]
    name: String,
    #[serde(default = "tcp")]
    protocol: String,
    port: u16,
    target_port: u16,
    node_port: Option<u16>,
}

fn tcp() -> String {
    "TCP".to_string()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndpointFile {
    address: IpAddr,
    node: Option<String>,
    #[serde(default = "yes")]
    ready: bool,
    weight: Option<u16>,
    zone: Option<String>,
    #[serde(default)]
    zone_hints: Vec<String>,
    #[serde(default)]
    node_hints: Vec<String>,
}

fn yes() -> bool {
    true
}

impl Scenario {
    /// Parses a scenario file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let model_err = |e: ModelError| e.to_string();
        let mut config = Config::default();
        if let Some(weight) = file.config.local_endpoint_weight {
            config.local_endpoint_weight = weight;
        }
        if let Some(max) = file.config.group_buckets_max {
            if !(1..=crate::chain::GROUP_BUCKETS_MAX).contains(&max) {
                return Err(format!(
                    "config.group_buckets_max: {max} is not in 1..={}",
                    crate::chain::GROUP_BUCKETS_MAX
                ));
            }
            config.group_buckets_max = max;
        }
        config.service_cidr6 = file.config.service_cidr6;
        if let Some(encap) = &file.config.encap {
            config.encap = encap.parse().map_err(|e| format!("config.encap: {e}"))?;
        }
        let node = Node {
            name: file.node.name,
            ips: file.node.ips,
            pod_cidrs: file
                .node
                .pod_cidr
                .into_iter()
                .chain(file.node.pod_cidrs)
                .collect(),
            labels: file.node.labels,
        };
        let mut bindings = NodeBindings {
            tunnel: file.bindings.tunnel,
            local_mac: file
                .bindings
                .local_mac
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(model_err)?,
            ..NodeBindings::default()
        };
        if let Some(gw) = file.bindings.gateway {
            bindings.gateway = Some(GatewayPort {
                ofport: gw.ofport,
                mac: gw.mac.parse().map_err(model_err)?,
            });
        }
        if let Some(up) = file.bindings.uplink {
            bindings.uplink = Some(Uplink {
                ofport: up.ofport,
                next_hop_mac: up.mac.parse().map_err(model_err)?,
                mac: up
                    .own_mac
                    .as_deref()
                    .ok_or_else(|| {
                        model_err(ModelError::invalid("uplink", "", "own_mac is required"))
                    })?
                    .parse()
                    .map_err(model_err)?,
            });
        }
        let mut model = Model::default();
        for pod in file.pods {
            let uid = format!("{}/{}", pod.namespace, pod.name);
            if let Some(ofport) = pod.ofport {
                bindings.ofports.insert(uid.clone(), ofport);
            }
            if let Some(mac) = &pod.attached_mac {
                bindings
                    .macs
                    .insert(uid.clone(), mac.parse().map_err(model_err)?);
            }
            let mac: Option<MacAddr> = pod
                .mac
                .as_deref()
                .map(str::parse)
                .transpose()
                .map_err(model_err)?;
            model.pods.insert(
                uid.clone(),
                PodInterface {
                    iface_id: uid.clone(),
                    uid,
                    namespace: pod.namespace,
                    name: pod.name,
                    ips: pod.ips,
                    mac,
                    node: pod.node,
                },
            );
        }
        for svc in file.services {
            let key = ServiceKey::new(&svc.namespace, &svc.name);
            let kind = match svc.kind.as_deref() {
                None | Some("ClusterIP") => ServiceType::ClusterIp,
                Some("NodePort") => ServiceType::NodePort,
                Some("LoadBalancer") => ServiceType::LoadBalancer,
                Some(other) => return Err(format!("{key}: unknown type {other}")),
            };
            let mut ports = Vec::new();
            for p in &svc.ports {
                ports.push(ServicePort {
                    name: p.name.clone(),
                    protocol: p.protocol.parse::<Protocol>().map_err(model_err)?,
                    port: p.port,
                    target_port: TargetPort::Number(p.target_port),
                    node_port: p.node_port,
                });
            }
            let endpoints = svc
                .endpoints
                .iter()
                .map(|e| Endpoint {
                    address: e.address,
                    ports: ports
                        .iter()
                        .map(|p| EndpointPort {
                            name: p.name.clone(),
                            protocol: p.protocol,
                            port: match p.target_port {
                                TargetPort::Number(n) => n,
                                TargetPort::Name(_) => 0,
                            },
                        })
                        .collect(),
                    node: e.node.clone(),
                    conditions: EndpointConditions {
                        ready: e.ready,
                        serving: e.ready,
                        terminating: false,
                    },
                    zone: e.zone.clone(),
                    zone_hints: e.zone_hints.clone(),
                    node_hints: e.node_hints.clone(),
                    weight: e.weight,
                })
                .collect();
            let external_policy = if svc.external_traffic_policy_local {
                TrafficPolicy::Local
            } else {
                TrafficPolicy::Cluster
            };
            let internal_policy = if svc.internal_traffic_policy_local {
                TrafficPolicy::Local
            } else {
                TrafficPolicy::Cluster
            };
            let session_affinity = match svc.session_affinity_timeout {
                Some(timeout_seconds) => SessionAffinity::ClientIp { timeout_seconds },
                None => SessionAffinity::None,
            };
            let traffic_distribution = if svc.prefer_same_node {
                TrafficDistribution::PreferSameNode
            } else if svc.prefer_close {
                TrafficDistribution::PreferClose
            } else {
                TrafficDistribution::Any
            };
            model.endpoints.insert(key.clone(), endpoints);
            model.services.insert(
                key.clone(),
                Service {
                    uid: key.to_string(),
                    key,
                    kind,
                    cluster_ips: svc.cluster_ips,
                    ports,
                    external_ips: svc.external_ips,
                    lb_ingress_ips: svc.lb_ingress_ips,
                    session_affinity,
                    external_traffic_policy: external_policy,
                    internal_traffic_policy: internal_policy,
                    lb_source_ranges: svc.lb_source_ranges,
                    health_check_node_port: svc.health_check_node_port,
                    topology: Topology {
                        keys: svc.topology_keys,
                        node_labels: BTreeMap::new(),
                    },
                    traffic_distribution,
                },
            );
        }
        model.nodes.insert(node.name.clone(), node.clone());
        for other in file.nodes {
            model.nodes.insert(
                other.name.clone(),
                Node {
                    name: other.name,
                    ips: other.ips,
                    pod_cidrs: other.pod_cidr.into_iter().chain(other.pod_cidrs).collect(),
                    labels: other.labels,
                },
            );
        }
        // Topology keys compare the labels of the endpoints' nodes, as the translation from
        // Kubernetes attaches them.
        let keys: Vec<ServiceKey> = model.services.keys().cloned().collect();
        for key in keys {
            let endpoints = model.endpoints_of(&key);
            let topology = model.services.get(&key).map(|s| s.topology.keys.clone());
            let topology = Topology::new(topology.unwrap_or_default(), endpoints, &model.nodes);
            if let Some(service) = model.services.get_mut(&key) {
                service.topology = topology;
            }
        }
        Ok(Self {
            node,
            model,
            config,
            bindings,
        })
    }
}

/// What a scenario renders to: its node's flows as `ovs-ofctl dump-flows --no-stats` prints
/// them and its groups as `ovs-ofctl -O OpenFlow13 dump-groups` prints them (one per line,
/// in svcflow's order), and the inputs that could not all be honoured.
pub struct Rendered {
    /// The flows' lines.
    pub flows: String,
    /// The groups' lines.
    pub groups: String,
    /// Conflicts (two services on one address and port, …).
    pub conflicts: Vec<String>,
}

impl Scenario {
    /// The scenario's node's desired state.
    pub fn desired(&self) -> crate::desired::DesiredState {
        crate::desired::desired(&self.node, &self.model, &self.config, &self.bindings)
    }

    /// Renders the scenario's node (pure: the same file always gives the same text).
    pub fn render(&self) -> Rendered {
        let out = self.desired();
        let flows = out
            .state
            .flows
            .iter()
            .map(|(k, v)| format!("{}\n", crate::flow::DumpFlow(k, v)))
            .collect();
        let groups = out
            .state
            .groups
            .iter()
            .map(|(id, g)| format!("{}\n", crate::flow::DumpGroup(*id, g)))
            .collect();
        Rendered {
            flows,
            groups,
            conflicts: out.conflicts,
        }
    }
}
