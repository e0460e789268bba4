//! The COE objects after validation: what the store holds, the WAL logs and GET returns.
//!
//! Field names follow the COE YANG models (`cluster-ip-address`, `network-NS`, …) without a
//! module prefix. The svcflow extensions are `protocol` on ports, `weight` on endpoint
//! addresses, and the minimal form's `endpoints` (pod uids) on a service.
//! Parsing the wire form, with its prefixes and leniencies, is in [`super::parse`].

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The whole config datastore; each container's path is below it.
pub const DATASTORE_PATH: &str = "/restconf/config";

/// One of the four COE containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `service:service-information`, list `services`.
    Service,
    /// `service:endpoints-info`, list `endpoints`.
    Endpoints,
    /// `pod:coe`, list `pods`.
    Pod,
    /// `k8s-node:k8s-nodes-info`, list `k8s-nodes`.
    Node,
}

impl Kind {
    /// All kinds, in the order the router and the OpenAPI document list them.
    pub const ALL: [Kind; 4] = [Kind::Service, Kind::Endpoints, Kind::Pod, Kind::Node];

    /// The YANG module: `service`, `pod` or `k8s-node`.
    pub fn module(self) -> &'static str {
        match self {
            Self::Service | Self::Endpoints => "service",
            Self::Pod => "pod",
            Self::Node => "k8s-node",
        }
    }

    /// The container name without prefix.
    pub fn container(self) -> &'static str {
        match self {
            Self::Service => "service-information",
            Self::Endpoints => "endpoints-info",
            Self::Pod => "coe",
            Self::Node => "k8s-nodes-info",
        }
    }

    /// The list name without prefix.
    pub fn list(self) -> &'static str {
        match self {
            Self::Service => "services",
            Self::Endpoints => "endpoints",
            Self::Pod => "pods",
            Self::Node => "k8s-nodes",
        }
    }

    /// `module:container`, as in the URL and the GET body.
    pub fn qualified_container(self) -> String {
        format!("{}:{}", self.module(), self.container())
    }

    /// `module:list`, as in an item's GET body.
    pub fn qualified_list(self) -> String {
        format!("{}:{}", self.module(), self.list())
    }

    /// The container's URL path.
    pub fn container_path(self) -> String {
        format!("{DATASTORE_PATH}/{}", self.qualified_container())
    }

    /// The path of an item, with `{uid}` for the key.
    pub fn item_path_template(self) -> String {
        format!("{}/{}/{{uid}}", self.container_path(), self.list())
    }

    /// How errors name an item: `services[uid]`.
    pub fn item_name(self, uid: &str) -> String {
        format!("{}[{uid}]", self.list())
    }
}

/// L4 protocol of a port (svcflow extension; TCP when absent).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    /// TCP.
    #[default]
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The model's protocol.
    pub fn to_model(self) -> netvirt::model::Protocol {
        match self {
            Self::Tcp => netvirt::model::Protocol::Tcp,
            Self::Udp => netvirt::model::Protocol::Udp,
            Self::Sctp => netvirt::model::Protocol::Sctp,
        }
    }

    /// `TCP`, `UDP` or `SCTP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = netvirt::model::ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.parse::<netvirt::model::Protocol>()? {
            netvirt::model::Protocol::Tcp => Self::Tcp,
            netvirt::model::Protocol::Udp => Self::Udp,
            netvirt::model::Protocol::Sctp => Self::Sctp,
        })
    }
}

/// A service (`service:service-information/services`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Service {
    /// Key.
    pub uid: String,
    /// Kubernetes name; empty in the minimal form.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Namespace; empty means `default`.
    #[serde(
        rename = "network-NS",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub network_ns: String,
    /// The cluster IP; absent for a headless service.
    #[serde(
        rename = "cluster-ip-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_ip: Option<IpAddr>,
    /// svcflow's extension: `spec.clusterIPs`, a dual-stack service's cluster IPs, at most
    /// one of each family, the first being `cluster-ip-address` (filled from it when that is
    /// absent). Empty: the service has `cluster-ip-address` alone.
    #[serde(
        rename = "cluster-ip-addresses",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.externalIPs`.
    #[serde(
        rename = "external-ip-address",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub external_ips: Vec<IpAddr>,
    /// `spec.loadBalancerIP`.
    #[serde(
        rename = "load-balancer-IP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub load_balancer_ip: Option<IpAddr>,
    /// Load balancer ingress IPs.
    #[serde(
        rename = "ingress-ip-address",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ingress_ips: Vec<IpAddr>,
    /// Ports; none means every port is forwarded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_ports: Vec<ServicePort>,
    /// Minimal form (design document): the uids of the pods behind the service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<String>>,
    /// svcflow's extension: `externalTrafficPolicy`, `Cluster` (absent) or `Local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<String>,
    /// svcflow's extension: `spec.loadBalancerSourceRanges`, the only sources that reach the
    /// load-balancer ingress addresses (none: every source).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load_balancer_source_ranges: Vec<ipnet::IpNet>,
    /// svcflow's extension: `spec.healthCheckNodePort`, where every node answers its load
    /// balancer's HTTP probes with its local endpoint count (needs
    /// `external-traffic-policy: Local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<u16>,
}

impl Service {
    /// The node ports it claims: its ports' and its health check's.
    pub fn claimed_node_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.service_ports
            .iter()
            .filter_map(|p| p.node_port)
            .chain(self.health_check_node_port)
    }

    /// Its cluster IPs: `cluster-ip-addresses`, else `cluster-ip-address`.
    pub fn all_cluster_ips(&self) -> Vec<IpAddr> {
        if self.cluster_ips.is_empty() {
            self.cluster_ip.into_iter().collect()
        } else {
            self.cluster_ips.clone()
        }
    }

    /// Every address the service answers on, without repeats, in a stable order.
    pub fn vips(&self) -> Vec<IpAddr> {
        let mut vips: Vec<IpAddr> = Vec::new();
        let all = self
            .cluster_ip
            .iter()
            .chain(&self.cluster_ips)
            .chain(&self.external_ips)
            .chain(&self.load_balancer_ip)
            .chain(&self.ingress_ips);
        for ip in all {
            if !vips.contains(ip) {
                vips.push(*ip);
            }
        }
        vips
    }
}

/// A service port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServicePort {
    /// Port name, matching the endpoints' port names.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Protocol (extension).
    #[serde(default)]
    pub protocol: Protocol,
    /// The port on the service addresses, 1 to 65535.
    pub port: u16,
    /// A port number or a named port; empty means the same as `port`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_port: String,
    /// The node port, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<u16>,
}

/// The endpoints of one service (`service:endpoints-info/endpoints`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Endpoints {
    /// Key.
    pub uid: String,
    /// Name; equal to the service's name.
    #[serde(default)]
    pub name: String,
    /// Namespace; empty means `default`.
    #[serde(
        rename = "network-NS",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub network_ns: String,
    /// Addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_addresses: Vec<EndpointAddress>,
    /// Ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoint_ports: Vec<EndpointPort>,
}

/// One endpoint address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EndpointAddress {
    /// The pod's address.
    pub ip_address: IpAddr,
    /// Host name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_name: String,
    /// The node it runs on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Relative weight (extension), 0 to 65535.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u16>,
}

/// One endpoint port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EndpointPort {
    /// Name, matching a service port's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Port number, 1 to 65535.
    pub port: u16,
    /// Protocol (extension); absent takes the protocol of the service port with this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
}

/// A pod (`pod:coe/pods`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Pod {
    /// Key.
    pub uid: String,
    /// Name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The address of the node it runs on.
    #[serde(
        rename = "host-ip-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub host_ip: Option<IpAddr>,
    /// Namespace; empty means `default`.
    #[serde(
        rename = "network-NS",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub network_ns: String,
    /// MAC address of its port, normalised to lower case.
    #[serde(
        rename = "port-mac-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub port_mac: Option<String>,
    /// Interfaces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interface: Vec<Interface>,
}

/// A pod interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Interface {
    /// Key; equals the OVS Interface's `external_ids:iface-id`.
    pub uid: String,
    /// Address from IPAM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<IpAddr>,
    /// Network uuid.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network_id: String,
    /// `FLAT`, `VLAN`, `VXLAN` or `GRE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_type: Option<NetworkType>,
    /// VLAN id or VNI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segmentation_id: Option<u32>,
}

/// COE network types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum NetworkType {
    /// No encapsulation.
    Flat,
    /// 802.1Q.
    Vlan,
    /// VXLAN.
    Vxlan,
    /// GRE.
    Gre,
}

/// A Kubernetes node (`k8s-node:k8s-nodes-info/k8s-nodes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct K8sNode {
    /// Key.
    pub uid: String,
    /// Host name; the node's name in the model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_name: String,
    /// Cluster-internal address; the default OVSDB remote is `tcp:<it>:6640`.
    #[serde(
        rename = "internal-ip-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub internal_ip: Option<IpAddr>,
    /// Externally routable address.
    #[serde(
        rename = "external-ip-address",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_ip: Option<IpAddr>,
    /// The pods' address ranges, at most one per IP family: `pod-cidr` on the wire, one CIDR
    /// or a dual-stack pair separated by a comma (`10.244.1.0/24,fd00:10:244:1::/64`), as
    /// Kubernetes spells `--cluster-cidr`.
    #[serde(
        rename = "pod-cidr",
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "cidr_list"
    )]
    pub pod_cidrs: Vec<IpNet>,
}

/// A list of CIDRs as one comma-separated string.
mod cidr_list {
    use ipnet::IpNet;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(cidrs: &[IpNet], s: S) -> Result<S::Ok, S::Error> {
        let text: Vec<String> = cidrs.iter().map(ToString::to_string).collect();
        s.serialize_str(&text.join(","))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
        let text = String::deserialize(d)?;
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

impl K8sNode {
    /// The node's name in the model: its host name, or its uid when that is empty.
    pub fn model_name(&self) -> &str {
        if self.host_name.is_empty() {
            &self.uid
        } else {
            &self.host_name
        }
    }
}

/// One object of any kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Item {
    /// A service. Shared: the store keeps the very value a write parsed, while the write's
    /// log record is encoded from it beside (a container PUT of 30,000 services copied every
    /// one of them).
    Service(Arc<Service>),
    /// An endpoints object, shared as a service is.
    Endpoints(Arc<Endpoints>),
    /// A pod.
    Pod(Pod),
    /// A node.
    Node(K8sNode),
}

impl Item {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Self::Service(_) => Kind::Service,
            Self::Endpoints(_) => Kind::Endpoints,
            Self::Pod(_) => Kind::Pod,
            Self::Node(_) => Kind::Node,
        }
    }

    /// Its key.
    pub fn uid(&self) -> &str {
        match self {
            Self::Service(s) => &s.uid,
            Self::Endpoints(e) => &e.uid,
            Self::Pod(p) => &p.uid,
            Self::Node(n) => &n.uid,
        }
    }

    /// Its namespace, if its kind has one (`""` means `default`).
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Self::Service(s) => Some(&s.network_ns),
            Self::Endpoints(e) => Some(&e.network_ns),
            Self::Pod(p) => Some(&p.network_ns),
            Self::Node(_) => None,
        }
    }

    /// Its JSON form, as GET returns it.
    pub fn to_json(&self) -> serde_json::Value {
        let value = match self {
            Self::Service(s) => serde_json::to_value(s),
            Self::Endpoints(e) => serde_json::to_value(e),
            Self::Pod(p) => serde_json::to_value(p),
            Self::Node(n) => serde_json::to_value(n),
        };
        // These types only hold strings, numbers and addresses, which always serialise.
        value.unwrap_or(serde_json::Value::Null)
    }
}

/// The namespace a (possibly empty) `network-NS` names.
pub fn namespace_name(network_ns: &str) -> &str {
    if network_ns.is_empty() {
        "default"
    } else {
        network_ns
    }
}
