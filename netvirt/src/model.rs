//! The service model: what the inputs (REST northbound, Kubernetes) say the cluster holds.
//!
//! It is plain data with no Kubernetes types. Collections are ordered maps so that the same
//! model always yields the same desired state, byte for byte.
//!
//! The maps of [`Model`] are persistent ([`Map`], a B-tree whose nodes are shared between
//! versions): cloning a model costs nothing, a write copies only the path to the entry it
//! changes, and two versions of one model tell what differs between them by skipping the
//! subtrees they share ([`Map::diff`]). That is how a change travels by key from an input to
//! each node's engine: the input keeps its model and edits it in place, and each engine diffs
//! the model it last rendered against the new one, in time proportional to the change.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

/// A persistent ordered map: O(1) clones that share structure, and [`Map::diff`] in time
/// proportional to what differs.
pub type Map<K, V> = imbl::OrdMap<K, V>;

/// The key of one difference between two [`Map`]s.
pub(crate) fn diff_key<'a, K, V>(item: &imbl::ordmap::DiffItem<'a, 'a, K, V>) -> &'a K {
    match item {
        imbl::ordmap::DiffItem::Add(k, _) | imbl::ordmap::DiffItem::Remove(k, _) => k,
        imbl::ordmap::DiffItem::Update { new: (k, _), .. } => k,
    }
}

/// One difference between two versions of a [`Map`], as [`Map::diff`] yields them.
pub use imbl::ordmap::DiffItem;

/// Everything the controller knows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Model {
    /// Nodes by name.
    pub nodes: Map<String, Node>,
    /// Namespaces by name.
    pub namespaces: Map<String, Namespace>,
    /// Pod interfaces by uid.
    pub pods: Map<String, PodInterface>,
    /// Services by namespace/name.
    pub services: Map<ServiceKey, Service>,
    /// Endpoints of each service, by the service's namespace/name.
    pub endpoints: Map<ServiceKey, Vec<Endpoint>>,
}

impl Model {
    /// The endpoints of service `key` (none listed: none).
    pub fn endpoints_of(&self, key: &ServiceKey) -> &[Endpoint] {
        self.endpoints.get(key).map_or(&[][..], Vec::as_slice)
    }

    /// `self` with every entry that equals `old`'s taken from `old`, so that the two share
    /// their unchanged structure and a diff between them costs what changed. For inputs that
    /// rebuild a whole model (a relist, a container replaced): the engines downstream then
    /// still see only the change.
    ///
    /// A map where most entries are new or changed (a first load) is kept as it is: copying
    /// its entries into `old`'s structure would hold the map twice while it is built, to share
    /// little. Diffs compare values, so that only costs a comparison per entry.
    pub fn sharing_with(self, old: &Model) -> Model {
        fn keep<K: Ord + Clone, V: Clone + PartialEq>(
            old: &Map<K, V>,
            new: Map<K, V>,
        ) -> Map<K, V> {
            let written = old
                .diff(&new)
                .filter(|d| !matches!(d, imbl::ordmap::DiffItem::Remove(..)))
                .count();
            if written > new.len() / 2 {
                return new;
            }
            let mut out = old.clone();
            for item in old.diff(&new) {
                match item {
                    imbl::ordmap::DiffItem::Add(k, v)
                    | imbl::ordmap::DiffItem::Update { new: (k, v), .. } => {
                        out.insert(k.clone(), v.clone());
                    }
                    imbl::ordmap::DiffItem::Remove(k, _) => {
                        out.remove(k);
                    }
                }
            }
            out
        }
        Model {
            nodes: keep(&old.nodes, self.nodes),
            namespaces: keep(&old.namespaces, self.namespaces),
            pods: keep(&old.pods, self.pods),
            services: keep(&old.services, self.services),
            endpoints: keep(&old.endpoints, self.endpoints),
        }
    }
}

/// A node: one Open vSwitch with its `br-int`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// The node's own addresses (internal and external). NodePorts answer on each.
    pub ips: Vec<IpAddr>,
    /// The ranges pods on this node take their addresses from: at most one per IP family
    /// (a dual-stack node has an IPv4 and an IPv6 one).
    pub pod_cidrs: Vec<IpNet>,
    /// Node labels, used by topology-aware routing.
    pub labels: BTreeMap<String, String>,
}

impl Node {
    /// The node's IPv4 pod CIDR.
    pub fn pod_cidr4(&self) -> Option<ipnet::Ipv4Net> {
        self.pod_cidrs.iter().find_map(|c| match c {
            IpNet::V4(v4) => Some(*v4),
            IpNet::V6(_) => None,
        })
    }

    /// The node's IPv6 pod CIDR.
    pub fn pod_cidr6(&self) -> Option<ipnet::Ipv6Net> {
        self.pod_cidrs.iter().find_map(|c| match c {
            IpNet::V6(v6) => Some(*v6),
            IpNet::V4(_) => None,
        })
    }

    /// The node's first address of each family.
    pub fn ip4(&self) -> Option<std::net::Ipv4Addr> {
        self.ips.iter().find_map(|ip| match ip {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
    }

    /// The node's first IPv6 address.
    pub fn ip6(&self) -> Option<std::net::Ipv6Addr> {
        self.ips.iter().find_map(|ip| match ip {
            IpAddr::V6(v6) => Some(*v6),
            IpAddr::V4(_) => None,
        })
    }

    /// The node's first address of `family`.
    pub fn ip_of(&self, family: crate::family::Family) -> Option<IpAddr> {
        self.ips
            .iter()
            .copied()
            .find(|ip| crate::family::Family::of(ip) == family)
    }

    /// The node's pod CIDR of `family`.
    pub fn pod_cidr_of(&self, family: crate::family::Family) -> Option<IpNet> {
        self.pod_cidrs
            .iter()
            .copied()
            .find(|c| crate::family::Family::of_net(c) == family)
    }
}

/// A namespace and the ELAN (L2 broadcast domain) it maps to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace {
    /// Namespace name.
    pub name: String,
    /// ELAN id, unique per namespace.
    pub elan: u32,
}

/// One interface of a pod, bound to an OVS interface by `iface_id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodInterface {
    /// Unique id of the interface.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Its addresses.
    pub ips: Vec<IpAddr>,
    /// Its MAC address.
    pub mac: Option<MacAddr>,
    /// The node it runs on.
    pub node: String,
    /// The `external_ids:iface-id` of the OVS Interface it is attached to.
    pub iface_id: String,
}

/// A 48-bit Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MacAddr(pub [u8; 6]);

impl std::fmt::Display for MacAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl std::str::FromStr for MacAddr {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad =
            || ModelError::invalid("mac", s, "expected six hex octets like 0a:58:0a:f4:00:01");
        let mut octets = [0u8; 6];
        let mut parts = s.split(':');
        for octet in &mut octets {
            let part = parts.next().ok_or_else(bad)?;
            if part.len() != 2 {
                return Err(bad());
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self(octets))
    }
}

/// A service's identity: namespace and name.
///
/// Shared strings: the key is copied into many maps (the model's two, the translator's
/// indexes, each node's shards and plans), and a copy is two reference counts, not two
/// allocations. Ordered and hashed as the strings are.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Arc<str>,
}

impl ServiceKey {
    /// `namespace/name`.
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
        }
    }

    /// The pieces of the key's text form, `namespace/name`, in order: what `Display` writes
    /// and [`Self::push_to`] appends.
    fn text(&self) -> [&str; 3] {
        [&self.namespace, "/", &self.name]
    }

    /// Appends the key's text form, `namespace/name`, to `out` (as `Display` writes it,
    /// without going through a formatter).
    pub fn push_to(&self, out: &mut String) {
        for piece in self.text() {
            out.push_str(piece);
        }
    }
}

impl std::fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.text().iter().try_for_each(|piece| f.write_str(piece))
    }
}

/// A service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Service {
    /// Namespace and name.
    pub key: ServiceKey,
    /// Unique id.
    pub uid: String,
    /// The Kubernetes service type.
    pub kind: ServiceType,
    /// Cluster IPs (one per family).
    pub cluster_ips: Vec<IpAddr>,
    /// Ports.
    pub ports: Vec<ServicePort>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress` IPs.
    pub lb_ingress_ips: Vec<IpAddr>,
    /// Session affinity.
    pub session_affinity: SessionAffinity,
    /// `externalTrafficPolicy`.
    pub external_traffic_policy: TrafficPolicy,
    /// `internalTrafficPolicy`.
    pub internal_traffic_policy: TrafficPolicy,
    /// `spec.loadBalancerSourceRanges`: when not empty (for a family), only these sources
    /// reach the LB ingress IPs (of that family).
    pub lb_source_ranges: Vec<IpNet>,
    /// `spec.healthCheckNodePort` (externalTrafficPolicy `Local` LoadBalancers): the node
    /// port where each node answers whether it has local endpoints.
    pub health_check_node_port: Option<u16>,
    /// Topology keys and what they need of the endpoints' nodes.
    pub topology: Topology,
    /// `spec.trafficDistribution`.
    pub traffic_distribution: TrafficDistribution,
}

impl Service {
    /// A ClusterIP service on `cluster_ip` with `ports`, every other field at its default
    /// (no external addresses, no affinity, traffic policies `Cluster`).
    pub fn cluster_ip(
        key: ServiceKey,
        uid: impl Into<String>,
        cluster_ip: IpAddr,
        ports: Vec<ServicePort>,
    ) -> Self {
        Service {
            key,
            uid: uid.into(),
            kind: ServiceType::ClusterIp,
            cluster_ips: vec![cluster_ip],
            ports,
            external_ips: Vec::new(),
            lb_ingress_ips: Vec::new(),
            session_affinity: Default::default(),
            external_traffic_policy: Default::default(),
            internal_traffic_policy: Default::default(),
            lb_source_ranges: Vec::new(),
            health_check_node_port: None,
            topology: Default::default(),
            traffic_distribution: Default::default(),
        }
    }
}

/// Topology keys (the service-topology KEP's `topologyKeys`, from the `svcflow.io/topology-keys`
/// annotation), with the labels they compare.
///
/// The endpoints' nodes' labels travel with the service, so that a service's state depends
/// only on the service, its endpoints and the receiving node (`shards.rs` re-renders a service
/// exactly when those change).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Topology {
    /// Ordered node-label keys; `*` means any node. Empty: no topology keys.
    pub keys: Vec<String>,
    /// For each node that runs an endpoint, by name: its labels among `keys`.
    pub node_labels: BTreeMap<String, BTreeMap<String, String>>,
}

impl Topology {
    /// `keys`, with the labels they need from the nodes (in `nodes`) of `endpoints`.
    pub fn new(keys: Vec<String>, endpoints: &[Endpoint], nodes: &Map<String, Node>) -> Self {
        let mut node_labels = BTreeMap::new();
        if !keys.is_empty() {
            for name in endpoints.iter().filter_map(|e| e.node.as_ref()) {
                let Some(node) = nodes.get(name) else {
                    continue;
                };
                let labels: BTreeMap<String, String> = node
                    .labels
                    .iter()
                    .filter(|(k, _)| keys.contains(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                node_labels.insert(name.clone(), labels);
            }
        }
        Self { keys, node_labels }
    }
}

/// `spec.trafficDistribution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrafficDistribution {
    /// Not set: every endpoint (hints are ignored).
    #[default]
    Any,
    /// `PreferClose` (or `PreferSameZone`): prefer the endpoints of the receiving node's
    /// zone, by the EndpointSlice zone hints, or by the endpoints' zones when there are none.
    PreferClose,
    /// `PreferSameNode`: prefer the endpoints on the receiving node, by the EndpointSlice
    /// node hints, or by the endpoints' nodes when there are none; then as `PreferClose`.
    PreferSameNode,
}

/// Kubernetes service types that svcflow programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ServiceType {
    /// Reachable on its cluster IPs.
    #[default]
    ClusterIp,
    /// Also on a port of every node address.
    NodePort,
    /// Also on the load balancer's ingress IPs.
    LoadBalancer,
}

/// One port of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServicePort {
    /// Port name; may be empty for a single-port service.
    pub name: String,
    /// L4 protocol.
    pub protocol: Protocol,
    /// The port on the service addresses.
    pub port: u16,
    /// The port on the endpoints.
    pub target_port: TargetPort,
    /// The node port, if any.
    pub node_port: Option<u16>,
}

impl ServicePort {
    /// A TCP port named `name` on `port`, to `target` on the endpoints, with no node port.
    pub fn tcp(name: &str, port: u16, target: u16) -> Self {
        ServicePort {
            name: name.to_string(),
            protocol: Protocol::Tcp,
            port,
            target_port: TargetPort::Number(target),
            node_port: None,
        }
    }
}

/// Where a service port forwards to on its endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetPort {
    /// A port number.
    Number(u16),
    /// A named container port, resolved through the endpoints' named ports.
    Name(String),
}

/// L4 protocols a service port may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
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
    /// The IP protocol number.
    pub fn ip_proto(self) -> u8 {
        match self {
            Self::Tcp => 6,
            Self::Udp => 17,
            Self::Sctp => 132,
        }
    }

    /// The `ovs-ofctl` keyword for IPv4 (`tcp`, `udp`, `sctp`).
    pub fn keyword(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "TCP" => Ok(Self::Tcp),
            "UDP" => Ok(Self::Udp),
            "SCTP" => Ok(Self::Sctp),
            _ => Err(ModelError::invalid(
                "protocol",
                s,
                "expected TCP, UDP or SCTP",
            )),
        }
    }
}

/// Session affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SessionAffinity {
    /// Every new connection is balanced on its own.
    #[default]
    None,
    /// Connections from one client IP stick to one endpoint for `timeout_seconds`.
    ClientIp {
        /// Stickiness timeout, 1 to 86,400 s.
        timeout_seconds: u32,
    },
}

/// `externalTrafficPolicy` / `internalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TrafficPolicy {
    /// Any endpoint in the cluster.
    #[default]
    Cluster,
    /// Only endpoints on the receiving node.
    Local,
}

/// One endpoint of a service.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// Its address.
    pub address: IpAddr,
    /// Named ports it serves (name, protocol, port); the name may be empty.
    pub ports: Vec<EndpointPort>,
    /// The node it runs on, if known.
    pub node: Option<String>,
    /// Conditions.
    pub conditions: EndpointConditions,
    /// Topology zone.
    pub zone: Option<String>,
    /// `hints.forZones`: the zones whose nodes should use this endpoint (topology-aware
    /// routing); empty when the slice gives no hint.
    pub zone_hints: Vec<String>,
    /// `hints.forNodes`: the nodes that should use this endpoint (`trafficDistribution:
    /// PreferSameNode`); empty when the slice gives no hint.
    pub node_hints: Vec<String>,
    /// Relative weight; `None` takes the default (local or remote weight).
    pub weight: Option<u16>,
}

impl Endpoint {
    /// An endpoint at `address` on `node` serving `ports`, every other field at its default
    /// (ready, no zone or hints, the default weight).
    pub fn new(address: IpAddr, ports: Vec<EndpointPort>, node: Option<String>) -> Self {
        Endpoint {
            address,
            ports,
            node,
            conditions: EndpointConditions::default(),
            zone: None,
            zone_hints: Vec::new(),
            node_hints: Vec::new(),
            weight: None,
        }
    }
}

/// A port an endpoint serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EndpointPort {
    /// The port's name, matching a service port's name.
    pub name: String,
    /// Protocol.
    pub protocol: Protocol,
    /// Port number.
    pub port: u16,
}

/// `EndpointSlice` endpoint conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointConditions {
    /// Ready for new connections.
    pub ready: bool,
    /// Serving (may be terminating).
    pub serving: bool,
    /// Terminating.
    pub terminating: bool,
}

impl Default for EndpointConditions {
    fn default() -> Self {
        Self {
            ready: true,
            serving: true,
            terminating: false,
        }
    }
}

/// A model value that is not valid; names the field, as REST errors must.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelError {
    /// The field, e.g. `service-ports[0].port`.
    pub field: String,
    /// The offending value.
    pub value: String,
    /// What was expected.
    pub reason: String,
}

impl ModelError {
    /// A new error for `field` holding `value`.
    pub fn invalid(field: &str, value: &str, reason: &str) -> Self {
        Self {
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        }
    }
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: invalid value `{}`: {}",
            self.field, self.value, self.reason
        )
    }
}

impl std::error::Error for ModelError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key's text form is `namespace/name` whichever way it is made.
    #[test]
    fn a_service_key_appends_what_it_displays() {
        for (namespace, name) in [("default", "web"), ("", "x"), ("kube-system", "dns-ü")] {
            let key = ServiceKey::new(namespace, name);
            let mut out = String::from("prefix ");
            key.push_to(&mut out);
            assert_eq!(out, format!("prefix {namespace}/{name}"));
            assert_eq!(key.to_string(), format!("{namespace}/{name}"));
        }
    }

    #[test]
    fn mac_addresses_parse_and_print_like_ovs() {
        let mac: MacAddr = "0A:58:0a:f4:00:01".parse().unwrap();
        assert_eq!(mac.0, [0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x01]);
        assert_eq!(mac.to_string(), "0a:58:0a:f4:00:01");
        for bad in [
            "",
            "0a:58:0a:f4:00",
            "0a:58:0a:f4:00:01:02",
            "0a:58:0a:f4:00:1",
            "zz:58:0a:f4:00:01",
        ] {
            let err = bad.parse::<MacAddr>().unwrap_err();
            assert_eq!(err.field, "mac", "{bad}");
        }
    }

    #[test]
    fn protocols_parse_case_insensitively_and_reject_others() {
        assert_eq!("tcp".parse::<Protocol>().unwrap(), Protocol::Tcp);
        assert_eq!("UDP".parse::<Protocol>().unwrap(), Protocol::Udp);
        assert_eq!("Sctp".parse::<Protocol>().unwrap().ip_proto(), 132);
        assert_eq!("icmp".parse::<Protocol>().unwrap_err().field, "protocol");
    }
}
