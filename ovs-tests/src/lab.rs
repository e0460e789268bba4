//! A mininet-style lab: a cluster of Open vSwitch nodes on this machine, driven by one
//! `svcflow run`, as a TOML [`Topology`] describes it. The `svcflow-lab` binary brings one up
//! from a shell; multi-node tests (`tests/cluster.rs`) use [`Lab`] as their fixture.
//!
//! [`Lab::up`] makes:
//!
//! - per node, a [`Sandbox`]: its own `ovsdb-server` and an `ovs-vswitchd` running in the
//!   node's own network namespace (its host stack), where `br-int`, `svc-gw` and the bridge
//!   ends of every veth live;
//! - a controller namespace `<lab>-ctl` with a management Linux bridge `mgmt` holding the
//!   first address of the management subnet (`100.64.0.0/24` unless the topology says
//!   otherwise), and one veth per node: `m-<i>` on the bridge, `mgmt0` in the node namespace
//!   with the subnet's next addresses in node order. `svcflow run` runs there, with
//!   `--openflow-listen 0.0.0.0:6653 --openflow-advertise <mgmt address>:6653`, REST on
//!   `127.0.0.1:8181` (inside that namespace) and `--ovsdb-remote NODE=unix:<db.sock>` per
//!   node: `ovsdb-server` runs in the machine's namespace, and a unix socket path reaches it
//!   from any network namespace;
//! - the underlay. `routed`: a router namespace `<lab>-rtr` with the underlay subnet's
//!   first address on its loopback, one point-to-point veth per node (`u-<i>` there, the
//!   OVS port `uplink` in the node), a /32 route to each node's address and its pod CIDR via
//!   that address. `l2`: an underlay namespace `<lab>-ul` whose Linux bridge `br0` (the
//!   subnet's first address, which routes the pod CIDRs to the nodes' addresses) joins every
//!   node's uplink. Either way the node's `uplink` port (OpenFlow port 5) carries
//!   `external_ids:svcflow-role=uplink` and `svcflow-next-hop-mac` = the MAC of the router
//!   end (routed) or of `br0` (l2). The node's own address is held by no interface: its
//!   switch answers ARP for it on the uplink with the uplink's own MAC, as svcflow programs
//!   it, so on `l2` the bridge tells the nodes apart;
//! - each node's host side: the commands of `netvirt::node_setup::host_gateway_commands`
//!   (the daemon's `--host-node` configures only the host it runs on), applied in the node
//!   namespace once svcflow has made `svc-gw`, so node hosts reach services;
//! - the pods: hosts on `br-int` (OpenFlow ports 10, 11, … in file order) with
//!   `external_ids:iface-id=<pod name>`, a default route via the pod CIDR's first address,
//!   and `svcflow-probe serve <pod name>` on their `serve` listeners;
//! - an optional `outside` host on the underlay: a client outside the cluster;
//! - then the nodes, pods, services and endpoints are PUT over REST, and `up` returns once
//!   every switch is connected and holds every pod and service.
//!
//! A pod's interface has the MAC the topology gives it (or `0a:58:` followed by the four bytes
//! of its address). Its `mac-source` says how svcflow learns it: `model` (the default) posts it
//! as the pod's `port-mac-address`; `attached` posts an empty one and sets
//! `external_ids:attached-mac` on the interface; `none` posts an empty one and sets nothing,
//! so the switch learns it from the pod's own ARP.
//!
//! Everything is torn down by [`Lab::down`] or on drop, also during a panic. Every
//! namespace carries the owning process id (`svcf-<pid>-…`), so a lab whose process was
//! killed is reaped by the next [`Sandbox::start`], like a sandbox.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::host::netns_argv;
use crate::pki::{Pki, Signed};
use crate::sandbox::read_pid;
use crate::svcflow::Daemon;
use crate::{Host, HostSpec, Process, Sandbox, SandboxError, cmd, netns, wait_for};

/// The integration bridge svcflow makes on every node.
pub const BR: &str = "br-int";
/// The uplink's port name on `br-int`.
pub const UPLINK: &str = "uplink";
/// The uplink's OpenFlow port.
pub const UPLINK_OFPORT: u16 = 5;
/// The OpenFlow port of a node's first pod; the next pods take the next ports.
pub const FIRST_POD_OFPORT: u16 = 10;
/// The node end of the management veth.
pub const MGMT_PORT: &str = "mgmt0";
/// The port svcflow listens on for switches, on every address of the controller namespace.
pub const OPENFLOW_PORT: u16 = 6653;
/// Where svcflow's REST northbound listens, inside the controller namespace.
pub const REST: &str = "127.0.0.1:8181";
/// The management subnet when the topology names none.
pub const DEFAULT_MANAGEMENT: &str = "100.64.0.0/24";
/// What a pod serves when the topology does not say: `svcflow-probe serve` listeners.
pub const DEFAULT_SERVE: &str = "tcp:8080";
/// The MAC of the outside host's `eth0`.
pub const OUTSIDE_MAC: &str = "02:5f:00:00:01:00";
/// The gateway port svcflow creates on every node.
const GATEWAY_PORT: &str = "svc-gw";
/// Names a pod cannot take: the node namespace already has these interfaces.
const RESERVED: [&str; 7] = [
    BR,
    UPLINK,
    MGMT_PORT,
    GATEWAY_PORT,
    "ovs-netdev",
    "eth0",
    "lo",
];
/// How long `up` waits for each step that depends on svcflow.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

static NEXT_LAB: AtomicU32 = AtomicU32::new(0);

// ---------------------------------------------------------------------------------------------
// The topology file
// ---------------------------------------------------------------------------------------------

/// A lab, as its TOML file describes it (see `ovs-tests/lab/three-nodes.toml` and
/// `docs/testing.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Topology {
    /// How the nodes' uplinks are joined.
    pub underlay: Underlay,
    /// The subnet of the management network between svcflow and the nodes.
    #[serde(default = "default_management")]
    pub management: Ipv4Net,
    /// A host on the underlay, outside the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<Outside>,
    /// The nodes, each with its pods.
    pub nodes: Vec<NodeSpec>,
    /// The services.
    #[serde(default)]
    pub services: Vec<ServiceSpec>,
}

fn default_management() -> Ipv4Net {
    DEFAULT_MANAGEMENT.parse().unwrap_or_default()
}

/// The underlay network between the nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Underlay {
    /// `routed` or `l2`.
    pub kind: UnderlayKind,
    /// The subnet of the node and outside addresses; its first address is the router's.
    pub subnet: Ipv4Net,
    /// svcflow's `--encap`: `none` (the router routes each node's pod CIDR), `geneve` or
    /// `vxlan` (the router routes no pod CIDR; each node's underlay address goes onto its
    /// `br-int`, as `svcflow node-setup` prints, and the router answers ARP for the nodes'
    /// addresses). `none` by default.
    #[serde(default = "default_encap")]
    pub encap: String,
    /// Whether the nodes are IPv6-only on the underlay: each node is posted with its
    /// `address6` as its only address, so the overlay's tunnel endpoints are IPv6 (its
    /// `address6`/64 goes onto `br-int`) and the router answers neighbour solicitations for
    /// the nodes' addresses (proxy NDP). Needs an encapsulation and every node's `address6`.
    /// The nodes' IPv4 `address` still numbers their links. `false` by default.
    #[serde(default)]
    pub ipv6_only: bool,
}

fn default_encap() -> String {
    "none".into()
}

impl Underlay {
    /// The router's address: the subnet's first host address.
    pub fn router(&self) -> Ipv4Addr {
        self.subnet.hosts().next().unwrap_or(self.subnet.addr())
    }
}

/// How the nodes' uplinks are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnderlayKind {
    /// A router namespace with one point-to-point link per node.
    Routed,
    /// One shared L2 segment (a Linux bridge) with a router on it.
    L2,
}

impl std::fmt::Display for UnderlayKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Routed => "routed",
            Self::L2 => "l2",
        })
    }
}

/// The outside host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Outside {
    /// Its name, for `svcflow-lab exec`; `outside` by default.
    #[serde(default = "default_outside_name")]
    pub name: String,
    /// Its address, in the underlay subnet.
    pub address: Ipv4Addr,
}

fn default_outside_name() -> String {
    "outside".into()
}

/// A node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct NodeSpec {
    /// The node's name in the model (and its datapath id's source).
    pub name: String,
    /// Its underlay address: its InternalIP, where its node ports answer.
    pub address: Ipv4Addr,
    /// Its IPv6 address on the underlay, if any: posted as the k8s-node's
    /// `external-ip-address` (REST has one internal address), so its switch answers
    /// neighbour solicitations for it on the uplink and its node ports answer there too. A
    /// routed underlay (`encap = "none"`) needs it to route the node's IPv6 pod CIDR: Linux
    /// refuses IPv6 routes with an IPv4 next hop ("IPv6 does not support RTA_VIA").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address6: Option<Ipv6Addr>,
    /// Whether the node alone is IPv6-only on the underlay (as every node is with
    /// `underlay.ipv6-only`): posted with its `address6` as its only address, among nodes
    /// that may have both, so it tunnels over IPv6 with every other node. Needs an
    /// encapsulation and its `address6`. `false` by default.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ipv6_only: bool,
    /// Its pods' range; the first address is their virtual gateway.
    pub pod_cidr: Ipv4Net,
    /// Its pods' IPv6 range, if the node is dual-stack; the first address after the
    /// network is their IPv6 virtual gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_cidr6: Option<Ipv6Net>,
    /// Its pods.
    #[serde(default)]
    pub pods: Vec<PodSpec>,
}

impl NodeSpec {
    /// The pods' virtual gateway: the pod CIDR's first host address.
    pub fn gateway(&self) -> Ipv4Addr {
        self.pod_cidr.hosts().next().unwrap_or(self.pod_cidr.addr())
    }

    /// The pods' IPv6 virtual gateway: the first address after the IPv6 pod CIDR's network.
    pub fn gateway6(&self) -> Option<Ipv6Addr> {
        self.pod_cidr6
            .map(|c| Ipv6Addr::from(u128::from(c.network()).wrapping_add(1)))
    }

    /// The node's addresses in the model: its IPv4 and IPv6 ones, or (an IPv6-only underlay,
    /// or the node alone IPv6-only) its IPv6 one alone.
    pub fn model_ips(&self, underlay_ipv6_only: bool) -> Vec<IpAddr> {
        let v4 = !(underlay_ipv6_only || self.ipv6_only);
        let v4 = v4.then_some(IpAddr::V4(self.address));
        v4.into_iter()
            .chain(self.address6.map(IpAddr::V6))
            .collect()
    }

    /// `pod-cidr` as posted over REST: the IPv4 CIDR, and the IPv6 one after a comma.
    pub fn rest_pod_cidr(&self) -> String {
        match self.pod_cidr6 {
            Some(v6) => format!("{},{v6}", self.pod_cidr),
            None => self.pod_cidr.to_string(),
        }
    }
}

/// A pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PodSpec {
    /// Its name, unique in the lab: also its uid, its `iface-id` and its port's name (at most
    /// 15 characters of `[A-Za-z0-9_-]`).
    pub name: String,
    /// Its Kubernetes namespace; `default` by default.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Its address, in its node's pod CIDR.
    pub ip: Ipv4Addr,
    /// Its IPv6 address, in its node's IPv6 pod CIDR (a dual-stack pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<Ipv6Addr>,
    /// Its interface's MAC; `0a:58:` and the address's four bytes by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// Where svcflow gets that MAC from: the model (by default), the interface's
    /// `external_ids:attached-mac`, or nowhere (the switch learns it from the pod's ARP).
    #[serde(default, skip_serializing_if = "MacSource::is_model")]
    pub mac_source: MacSource,
    /// `svcflow-probe serve` listeners (`tcp:PORT`, `udp:PORT`); by default
    /// [`DEFAULT_SERVE`] and the target port of every service it is an endpoint of. An empty
    /// list starts no server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serve: Option<Vec<String>>,
}

fn default_namespace() -> String {
    "default".into()
}

/// How svcflow learns a pod's MAC (`mac-source` in the topology file).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MacSource {
    /// The pod is posted over REST with its MAC (`port-mac-address`).
    #[default]
    Model,
    /// The pod is posted with `"port-mac-address": ""`, and its OVS interface carries
    /// `external_ids:attached-mac=<mac>` (as OVN, OpenStack and libvirt set it).
    Attached,
    /// The pod is posted with an empty MAC and its interface says none: the switch learns it
    /// from the pod's own ARP (table 51), so the pod is unreachable until it sends one.
    None,
}

impl MacSource {
    /// Whether this is the default, [`MacSource::Model`].
    pub fn is_model(&self) -> bool {
        *self == Self::Model
    }

    /// `model`, `attached` or `none`, as in the topology file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Attached => "attached",
            Self::None => "none",
        }
    }
}

impl std::fmt::Display for MacSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PodSpec {
    /// The MAC posted over REST as its `port-mac-address`: its MAC if the model gives it,
    /// else empty.
    pub fn model_mac(&self) -> String {
        match self.mac_source {
            MacSource::Model => self.mac(),
            MacSource::Attached | MacSource::None => String::new(),
        }
    }

    /// The pod interface's MAC.
    pub fn mac(&self) -> String {
        match &self.mac {
            Some(mac) => mac.to_ascii_lowercase(),
            None => {
                let [a, b, c, d] = self.ip.octets();
                format!("0a:58:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
            }
        }
    }
}

/// A service with one port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServiceSpec {
    /// Its name.
    pub name: String,
    /// Its namespace; `default` by default.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Its cluster IP, in the service CIDR (10.96.0.0/12), or in the IPv6 service CIDR given
    /// to svcflow (`--service-cidr6`): an IPv6 service, whose endpoints are its pods' IPv6
    /// addresses.
    pub cluster_ip: IpAddr,
    /// A dual-stack service's IPv6 cluster IP (with an IPv4 `cluster-ip`), posted with it as
    /// svcflow's `cluster-ip-addresses`; its endpoints are then its pods' addresses of both
    /// families.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip6: Option<Ipv6Addr>,
    /// The port on the cluster IP.
    pub port: u16,
    /// The endpoints' port; `port` by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<u16>,
    /// `TCP` (default), `UDP` or `SCTP`.
    #[serde(default)]
    pub protocol: Protocol,
    /// Its node port, if any (30000-32767).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_port: Option<u16>,
    /// The pods behind it, by name.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

impl ServiceSpec {
    /// The endpoints' port.
    pub fn target(&self) -> u16 {
        self.target_port.unwrap_or(self.port)
    }

    /// Its cluster IPs: `cluster-ip`, and `cluster-ip6` if any.
    pub fn cluster_ips(&self) -> Vec<IpAddr> {
        std::iter::once(self.cluster_ip)
            .chain(self.cluster_ip6.map(IpAddr::V6))
            .collect()
    }

    /// Whether it has an IPv6 cluster IP (so its endpoints need IPv6 addresses).
    fn ipv6(&self) -> bool {
        self.cluster_ips().iter().any(IpAddr::is_ipv6)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The port's name in the REST objects: `tcp-80`.
    fn port_name(&self) -> String {
        format!(
            "{}-{}",
            self.protocol.as_str().to_ascii_lowercase(),
            self.port
        )
    }

    fn uid(&self) -> String {
        format!("svc-{}-{}", self.namespace, self.name)
    }

    fn endpoints_uid(&self) -> String {
        format!("ep-{}-{}", self.namespace, self.name)
    }

    /// Its REST path under `restconf/config/`.
    pub fn rest_path(&self) -> String {
        format!("service:service-information/services/{}", self.uid())
    }

    /// Its endpoints' REST path under `restconf/config/`.
    pub fn endpoints_rest_path(&self) -> String {
        format!("service:endpoints-info/endpoints/{}", self.endpoints_uid())
    }

    /// The body that PUTs it (without its endpoints) at [`ServiceSpec::rest_path`].
    pub fn rest_body(&self) -> String {
        let mut port = json!({
            "service:name": self.port_name(),
            "service:protocol": self.protocol.as_str(),
            "service:port": self.port,
            "service:target-port": self.target().to_string(),
        });
        if let Some(node_port) = self.node_port {
            port["service:node-port"] = json!(node_port);
        }
        let mut body = json!({"service:services": [{
            "service:uid": self.uid(),
            "service:name": self.name,
            "service:network-NS": self.namespace,
            "service:cluster-ip-address": self.cluster_ip.to_string(),
            "service:service-ports": [port],
        }]});
        if let Some(ip6) = self.cluster_ip6 {
            body["service:services"][0]["service:cluster-ip-addresses"] =
                json!([self.cluster_ip.to_string(), ip6.to_string()]);
        }
        body.to_string()
    }
}

/// A service port's protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Protocol {
    /// TCP.
    #[default]
    #[serde(rename = "TCP", alias = "tcp")]
    Tcp,
    /// UDP.
    #[serde(rename = "UDP", alias = "udp")]
    Udp,
    /// SCTP.
    #[serde(rename = "SCTP", alias = "sctp")]
    Sctp,
}

impl Protocol {
    /// `TCP`, `UDP` or `SCTP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tcp => "TCP",
            Self::Udp => "UDP",
            Self::Sctp => "SCTP",
        }
    }
}

fn invalid(why: impl Into<String>) -> SandboxError {
    SandboxError::Invalid(why.into())
}

impl Topology {
    /// Parses and checks a topology file's text.
    pub fn parse(text: &str) -> Result<Topology, SandboxError> {
        let topology: Topology =
            toml::from_str(text).map_err(|e| invalid(format!("topology: {e}")))?;
        topology.check()?;
        Ok(topology)
    }

    /// Reads, parses and checks a topology file.
    pub fn load(path: &Path) -> Result<Topology, SandboxError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        Self::parse(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))
    }

    /// Whether some node has an IPv6 pod CIDR: the router then forwards IPv6 too.
    pub fn dual_stack(&self) -> bool {
        self.nodes.iter().any(|n| n.pod_cidr6.is_some())
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodeSpec> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The pod named `name`, with its node.
    pub fn pod(&self, name: &str) -> Option<(&NodeSpec, &PodSpec)> {
        self.nodes
            .iter()
            .find_map(|n| n.pods.iter().find(|p| p.name == name).map(|p| (n, p)))
    }

    /// The service `name` (in any namespace) or `namespace/name`.
    pub fn service(&self, name: &str) -> Option<&ServiceSpec> {
        self.services
            .iter()
            .find(|s| s.name == name || s.key() == name)
    }

    /// The `svcflow-probe serve` listeners of pod `pod`.
    pub fn serve_of(&self, pod: &PodSpec) -> Vec<String> {
        if let Some(serve) = &pod.serve {
            return serve.clone();
        }
        let mut listens = vec![DEFAULT_SERVE.to_string()];
        for s in &self.services {
            if s.endpoints.contains(&pod.name) {
                let listen = format!(
                    "{}:{}",
                    s.protocol.as_str().to_ascii_lowercase(),
                    s.target()
                );
                if !listens.contains(&listen) {
                    listens.push(listen);
                }
            }
        }
        listens
    }

    /// The management address of the controller (index 0) and of node `i` (index `i + 1`).
    fn management_ip(&self, index: usize) -> Option<Ipv4Addr> {
        self.management.hosts().nth(index)
    }

    /// Checks what the lab relies on, with an error that names the culprit.
    pub fn check(&self) -> Result<(), SandboxError> {
        if self.nodes.is_empty() {
            return Err(invalid("a topology needs at least one node"));
        }
        self.underlay
            .encap
            .parse::<netvirt::config::Encap>()
            .map_err(|e| invalid(format!("underlay.encap: {e}")))?;
        if self.nodes.len() > 200 {
            // Link names and next-hop MACs number the nodes.
            return Err(invalid("a lab has at most 200 nodes"));
        }
        if self.management_ip(self.nodes.len()).is_none() {
            return Err(invalid(format!(
                "management subnet {} is too small for {} nodes",
                self.management,
                self.nodes.len()
            )));
        }
        if self.underlay.ipv6_only {
            if self.underlay.encap == "none" {
                return Err(invalid(
                    "underlay.ipv6-only needs an encapsulation (geneve or vxlan): it is the \
                     overlay's IPv6 underlay",
                ));
            }
            if let Some(node) = self.nodes.iter().find(|n| n.address6.is_none()) {
                return Err(invalid(format!(
                    "node {}: underlay.ipv6-only needs every node's `address6`",
                    node.name
                )));
            }
        }
        let unfit =
            |n: &&NodeSpec| n.ipv6_only && (self.underlay.encap == "none" || n.address6.is_none());
        if let Some(node) = self.nodes.iter().find(unfit) {
            return Err(invalid(format!(
                "node {}: ipv6-only needs an encapsulation (geneve or vxlan) and the node's \
                 `address6`: it tunnels over IPv6",
                node.name
            )));
        }
        let router = self.underlay.router();
        let mut addresses = BTreeSet::from([router]);
        let mut names = BTreeSet::new();
        let mut pod_ips = BTreeSet::new();
        let mut pod_ips6 = BTreeSet::new();
        let underlay_ok = |ip: Ipv4Addr| {
            self.underlay.subnet.contains(&ip)
                && ip != self.underlay.subnet.network()
                && ip != self.underlay.subnet.broadcast()
        };
        for node in &self.nodes {
            check_name(&node.name, "node")?;
            if !names.insert(node.name.clone()) {
                return Err(invalid(format!("node name `{}` is used twice", node.name)));
            }
            if !underlay_ok(node.address) || !addresses.insert(node.address) {
                return Err(invalid(format!(
                    "node {}: address {} must be a free address of underlay subnet {} \
                     (whose first address, {router}, is the router's)",
                    node.name, node.address, self.underlay.subnet
                )));
            }
            if self
                .nodes
                .iter()
                .any(|o| o.name != node.name && o.pod_cidr.contains(&node.pod_cidr.network()))
            {
                return Err(invalid(format!(
                    "node {}: pod CIDR {} overlaps another node's",
                    node.name, node.pod_cidr
                )));
            }
            if node.pod_cidr6.is_some() && self.underlay.encap == "none" && node.address6.is_none()
            {
                return Err(invalid(format!(
                    "node {}: with encap none, an IPv6 pod CIDR needs the node's `address6`: \
                     the underlay routes it there (Linux has no IPv6 route via an IPv4 next hop)",
                    node.name
                )));
            }
            if let Some(mine) = node.pod_cidr6 {
                let overlaps = self.nodes.iter().any(|o| {
                    o.name != node.name
                        && o.pod_cidr6.is_some_and(|c| {
                            c.contains(&mine.network()) || mine.contains(&c.network())
                        })
                });
                if overlaps {
                    return Err(invalid(format!(
                        "node {}: IPv6 pod CIDR {mine} overlaps another node's",
                        node.name
                    )));
                }
            }
            for pod in &node.pods {
                let ifname_ok = !pod.name.is_empty()
                    && pod.name.len() <= 15
                    && pod
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
                if !ifname_ok || RESERVED.contains(&pod.name.as_str()) {
                    return Err(invalid(format!(
                        "pod `{}`: a pod name is also an interface name: 1 to 15 of \
                         [A-Za-z0-9_-], and none of {RESERVED:?}",
                        pod.name
                    )));
                }
                check_name(&pod.namespace, "namespace")?;
                if !names.insert(pod.name.clone()) {
                    return Err(invalid(format!(
                        "pod `{}`: the name is already a node's or a pod's",
                        pod.name
                    )));
                }
                let cidr = node.pod_cidr;
                let in_cidr = cidr.contains(&pod.ip)
                    && pod.ip != cidr.network()
                    && pod.ip != cidr.broadcast()
                    && pod.ip != node.gateway();
                if !in_cidr || !pod_ips.insert(pod.ip) {
                    return Err(invalid(format!(
                        "pod {}: address {} must be a free address of node {}'s pod CIDR {} \
                         other than its gateway {}",
                        pod.name,
                        pod.ip,
                        node.name,
                        cidr,
                        node.gateway()
                    )));
                }
                match (pod.ip6, node.pod_cidr6) {
                    (None, _) => {}
                    (Some(ip6), Some(cidr6))
                        if cidr6.contains(&ip6)
                            && ip6 != cidr6.network()
                            && Some(ip6) != node.gateway6()
                            && pod_ips6.insert(ip6) => {}
                    (Some(ip6), _) => {
                        return Err(invalid(format!(
                            "pod {}: IPv6 address {ip6} must be a free address of node {}'s \
                             IPv6 pod CIDR ({}) other than its gateway",
                            pod.name,
                            node.name,
                            node.pod_cidr6
                                .map_or_else(|| "none".to_string(), |c| c.to_string()),
                        )));
                    }
                }
                if let Some(mac) = &pod.mac {
                    let ok = mac.split(':').count() == 6
                        && mac
                            .split(':')
                            .all(|b| b.len() == 2 && u8::from_str_radix(b, 16).is_ok());
                    if !ok {
                        return Err(invalid(format!("pod {}: `{mac}` is not a MAC", pod.name)));
                    }
                }
            }
        }
        if let Some(outside) = &self.outside {
            if !underlay_ok(outside.address) || !addresses.insert(outside.address) {
                return Err(invalid(format!(
                    "outside: address {} must be a free address of underlay subnet {}",
                    outside.address, self.underlay.subnet
                )));
            }
            if !names.insert(outside.name.clone()) {
                return Err(invalid(format!(
                    "outside: the name `{}` is already a node's or a pod's",
                    outside.name
                )));
            }
        }
        let mut keys = BTreeSet::new();
        for s in &self.services {
            check_name(&s.name, "service")?;
            check_name(&s.namespace, "namespace")?;
            if !keys.insert(s.key()) {
                return Err(invalid(format!("service {} is defined twice", s.key())));
            }
            if s.cluster_ip6.is_some() && s.cluster_ip.is_ipv6() {
                return Err(invalid(format!(
                    "service {}: a dual-stack service's `cluster-ip` is its IPv4 one",
                    s.key()
                )));
            }
            if s.port == 0 || s.target_port == Some(0) || s.node_port == Some(0) {
                return Err(invalid(format!("service {}: ports start at 1", s.key())));
            }
            for ep in &s.endpoints {
                match self.pod(ep) {
                    None => {
                        return Err(invalid(format!(
                            "service {}: endpoint `{ep}` is no pod of the topology",
                            s.key()
                        )));
                    }
                    Some((_, pod)) if s.ipv6() && pod.ip6.is_none() => {
                        return Err(invalid(format!(
                            "service {}: an IPv6 service needs IPv6 endpoints, and pod `{ep}` \
                             has no IPv6 address",
                            s.key()
                        )));
                    }
                    Some(_) => {}
                }
            }
        }
        Ok(())
    }
}

fn check_name(name: &str, what: &str) -> Result<(), SandboxError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "{what} name `{name}` must be 1 to 63 of [A-Za-z0-9._-]"
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------------------------

/// One connection of [`Lab::connect_peer`]: the backend that answered and the source address
/// it saw, or why it failed.
pub type PeerAnswer = Result<(String, String), String>;

/// `svcflow-probe connect --peer` attempts as [`PeerAnswer`]s: `NAME@IP` split in two.
pub fn peer_answers(attempts: Vec<crate::Attempt>) -> Vec<PeerAnswer> {
    attempts
        .into_iter()
        .map(|a| {
            a.map(|answer| match answer.split_once('@') {
                Some((name, ip)) => (name.to_string(), ip.to_string()),
                None => (answer, String::new()),
            })
        })
        .collect()
}

/// Choices made when a lab comes up.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// svcflow's `--log-level`.
    pub log_level: String,
    /// More `svcflow run` arguments, for every replica.
    pub daemon_args: Vec<String>,
    /// How many `svcflow run` replicas drive the nodes (at least 1). Replica `i` listens for
    /// OpenFlow on port 6653 + `i` of the controller address, serves REST on 8181 + `i`,
    /// metrics on 10249 + 10 `i` and health on 10256 + 10 `i`, in the controller namespace.
    /// More than one needs a shared store (`--store ovsdb:…` in `daemon_args`): see
    /// docs/ha.md.
    pub replicas: usize,
    /// TLS instead of `--insecure`: a PKI from `ovs-pki` ([`crate::pki`]), each node's OVS
    /// presenting a certificate that names it, the bridges dialling `ssl:`, and REST and
    /// metrics over HTTPS (which [`Lab::rest`] and [`Lab::metrics`] follow; see
    /// [`Lab::controller_ca`] for other clients).
    pub tls: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            log_level: "info".into(),
            daemon_args: Vec::new(),
            replicas: 1,
            tls: false,
        }
    }
}

/// One node of a lab.
#[derive(Debug)]
struct LabNode {
    spec: NodeSpec,
    sandbox: Sandbox,
    pods: Vec<Host>,
    mgmt_ip: Ipv4Addr,
}

/// A running lab; see the module docs. Torn down by [`Lab::down`] or on drop.
#[derive(Debug)]
pub struct Lab {
    topology: Topology,
    id: String,
    controller_netns: String,
    underlay_netns: String,
    /// Replica 0 (the only one unless [`LabOptions::replicas`] says more).
    daemon: Option<Daemon>,
    /// Replicas 1 and on, while they run.
    replicas: BTreeMap<usize, Daemon>,
    /// What the replicas are started with, for restarts: every replica's arguments, and how
    /// many there are.
    options: LabOptions,
    /// Starts so far, for log file names.
    starts: u32,
    /// With [`LabOptions::tls`]: the PKI, and svcflow's TLS flags.
    tls: Option<(Pki, Vec<String>)>,
    servers: Vec<Process>,
    nodes: Vec<LabNode>,
    outside: Option<Host>,
    /// The lab's own namespaces (controller, underlay, outside); the nodes' are the
    /// sandboxes'.
    namespaces: Vec<String>,
}

impl Lab {
    /// Brings a lab up: see the module docs. On an error, whatever was made is torn down.
    pub fn up(topology: &Topology, options: &LabOptions) -> Result<Lab, SandboxError> {
        topology.check()?;
        cmd::require_program("curl", "curl")?;
        let seq = NEXT_LAB.fetch_add(1, Ordering::Relaxed);
        let id = format!("{}{}-lab{seq}", netns::NETNS_PREFIX, std::process::id());
        let underlay_netns = match topology.underlay.kind {
            UnderlayKind::Routed => format!("{id}-rtr"),
            UnderlayKind::L2 => format!("{id}-ul"),
        };
        let mut lab = Lab {
            topology: topology.clone(),
            controller_netns: format!("{id}-ctl"),
            underlay_netns,
            id,
            daemon: None,
            replicas: BTreeMap::new(),
            options: options.clone(),
            starts: 0,
            tls: None,
            servers: Vec::new(),
            nodes: Vec::new(),
            outside: None,
            namespaces: Vec::new(),
        };
        // From here on, Drop tears down whatever was made.
        lab.make_controller()?;
        lab.make_underlay()?;
        for index in 0..topology.nodes.len() {
            lab.add_node(index)?;
        }
        if options.tls {
            lab.make_pki()?;
        }
        if options.replicas > 1
            && !options
                .daemon_args
                .iter()
                .any(|a| a.starts_with("--store") || a.starts_with("ovsdb:"))
        {
            return Err(invalid(
                "several replicas need a shared store (--store ovsdb:…)",
            ));
        }
        for i in 0..options.replicas.max(1) {
            lab.start_replica(i)?;
        }
        for index in 0..lab.nodes.len() {
            lab.wait_gateway(index)?;
            lab.attach_uplink(index)?;
            lab.apply_host_side_at(index)?;
            lab.add_pods(index)?;
        }
        lab.add_outside()?;
        lab.post_model()?;
        lab.wait_synced(STEP_TIMEOUT)?;
        Ok(lab)
    }

    /// Tears the lab down (as drop does) and checks that none of its namespaces is left.
    pub fn down(mut self) -> Result<(), SandboxError> {
        let left = self.teardown();
        if left.is_empty() {
            Ok(())
        } else {
            Err(invalid(format!("namespaces left behind: {left:?}")))
        }
    }

    /// The lab's id, `svcf-<pid>-lab<n>`: the prefix of its own namespaces.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The topology it was made from, with the endpoints as last put.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The controller's namespace, where svcflow runs.
    pub fn controller_netns(&self) -> &str {
        &self.controller_netns
    }

    /// svcflow's management address, which the switches dial.
    pub fn controller_ip(&self) -> Ipv4Addr {
        self.topology
            .management_ip(0)
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// The router's (routed) or the underlay bridge's (l2) namespace.
    pub fn underlay_netns(&self) -> &str {
        &self.underlay_netns
    }

    /// The nodes' names, in topology order.
    pub fn node_names(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| n.spec.name.as_str()).collect()
    }

    fn index(&self, node: &str) -> Result<usize, SandboxError> {
        self.nodes
            .iter()
            .position(|n| n.spec.name == node)
            .ok_or_else(|| invalid(format!("no node `{node}` in the lab")))
    }

    /// Node `node`'s sandbox: its OVSDB, switch and namespace.
    pub fn node(&self, node: &str) -> Result<&Sandbox, SandboxError> {
        Ok(&self.nodes[self.index(node)?].sandbox)
    }

    /// Node `node`'s sandbox, to restart its daemons.
    pub fn node_mut(&mut self, node: &str) -> Result<&mut Sandbox, SandboxError> {
        let index = self.index(node)?;
        Ok(&mut self.nodes[index].sandbox)
    }

    /// Node `node`'s spec.
    pub fn node_spec(&self, node: &str) -> Result<&NodeSpec, SandboxError> {
        Ok(&self.nodes[self.index(node)?].spec)
    }

    /// The svcflow daemon (its log, its syncs).
    pub fn daemon(&self) -> &Daemon {
        // Set in `up` before any caller can see the lab, taken only by the teardown.
        self.daemon
            .as_ref()
            .expect("the lab's daemon runs until the lab is torn down")
    }

    /// The pod `name`'s host.
    pub fn pod(&self, name: &str) -> Result<&Host, SandboxError> {
        self.nodes
            .iter()
            .flat_map(|n| &n.pods)
            .find(|h| h.spec.name == name)
            .ok_or_else(|| invalid(format!("no pod `{name}` in the lab")))
    }

    /// The node pod `name` runs on.
    pub fn node_of_pod(&self, name: &str) -> Result<&str, SandboxError> {
        self.topology
            .pod(name)
            .map(|(n, _)| n.name.as_str())
            .ok_or_else(|| invalid(format!("no pod `{name}` in the lab")))
    }

    /// The outside host, if the topology has one.
    pub fn outside(&self) -> Option<&Host> {
        self.outside.as_ref()
    }

    /// `count` TCP connections (`svcflow-probe connect --peer`) from `from`, a pod or the
    /// outside host, to `target`: each answered `(backend, source address it saw)`, or
    /// failed with why (`refused`, `timeout`, …).
    pub fn connect_peer(
        &self,
        from: &str,
        target: &str,
        count: u32,
    ) -> Result<Vec<PeerAnswer>, SandboxError> {
        let host = match self.outside() {
            Some(o) if o.spec.name == from => o,
            _ => self.pod(from)?,
        };
        let attempts = host.connect("tcp", target, count, &["--peer", "--timeout-ms", "2000"])?;
        Ok(peer_answers(attempts))
    }

    /// svcflow's log file.
    pub fn daemon_log_path(&self) -> PathBuf {
        self.nodes
            .first()
            .map(|n| n.sandbox.dir().join("svcflow-1.log"))
            .unwrap_or_default()
    }

    /// The last `lines` lines of svcflow's log.
    pub fn daemon_log_tail(&self, lines: usize) -> String {
        let log = self.daemon.as_ref().map(Daemon::log).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// A timeout or failure that depends on svcflow, with the tail of its log.
    fn with_log(&self, e: SandboxError) -> SandboxError {
        let log = format!("\nsvcflow log:\n{}", self.daemon_log_tail(40));
        match e {
            SandboxError::Timeout { what, after } => SandboxError::Timeout {
                what: what + &log,
                after,
            },
            other => invalid(format!("{other}{log}")),
        }
    }

    /// Runs `argv` in the namespace of a pod, a node, the outside host, `ctl` or `underlay`
    /// (see [`LabState::netns_of`]), and returns its output whatever its status.
    pub fn exec(&self, name: &str, argv: &[&str]) -> Result<Output, SandboxError> {
        let state = self.state();
        let netns = state
            .netns_of(name)
            .ok_or_else(|| invalid(format!("no pod, node or host `{name}` in the lab")))?;
        cmd::output_env(&netns_argv(netns, argv), &[])
    }

    /// Starts `svcflow-probe serve NAME LISTENS…` in the namespace of `host` (as
    /// [`Lab::exec`] names them: a pod, a node's host, the outside host, `router`…) and waits
    /// until it listens; it is killed when the [`crate::Process`] drops.
    pub fn serve(
        &self,
        host: &str,
        name: &str,
        listens: &[&str],
    ) -> Result<crate::Process, SandboxError> {
        let state = self.state();
        let netns = state
            .netns_of(host)
            .ok_or_else(|| invalid(format!("no pod, node or host `{host}` in the lab")))?;
        crate::host::probe_serve(netns, name, listens)
    }

    /// Runs `svcflow ARGS…` (the binary the lab's daemon runs) in the controller's namespace,
    /// where its REST is `http://127.0.0.1:8181`, and returns its output whatever its status.
    pub fn svcflow(&self, args: &[&str]) -> Result<Output, SandboxError> {
        let bin = crate::svcflow::svcflow_binary()?;
        let bin = bin.to_string_lossy();
        let mut argv = vec![bin.as_ref()];
        argv.extend_from_slice(args);
        self.exec("ctl", &argv)
    }

    /// `curl -X METHOD http://127.0.0.1:8181/restconf/config/PATH [-d BODY]` in the controller
    /// namespace (HTTPS with [`LabOptions::tls`]); fails on an HTTP error, with the answer.
    pub fn rest(&self, method: &str, path: &str, body: &str) -> Result<String, SandboxError> {
        self.replica_rest(0, method, path, body)
    }

    /// The (first) daemon's Prometheus metrics, `curl`ed in the controller namespace.
    pub fn metrics(&self) -> Result<String, SandboxError> {
        let target = self.curl_args("127.0.0.1:10249", "/metrics");
        let mut argv = vec!["curl", "-sS", "-f"];
        argv.extend(target.iter().map(String::as_str));
        cmd::run(&netns_argv(&self.controller_netns, &argv))
    }

    /// `GET PATH` (from the root, e.g. `/restconf/operational/…`) from replica 0's REST
    /// northbound, in the controller namespace (HTTPS with [`LabOptions::tls`]).
    pub fn get(&self, path: &str) -> Result<String, SandboxError> {
        self.replica_get(0, path)
    }

    /// [`Lab::get`] from replica `i`.
    pub fn replica_get(&self, i: usize, path: &str) -> Result<String, SandboxError> {
        rest_at(
            &self.controller_netns,
            &self.curl_args(&self.replica_rest_addr(i), path),
            "GET",
            "",
        )
    }

    /// How a user reaches replica `i`'s REST `path` (from the root) with `curl`, for showing:
    /// the URL, after `--cacert CA --resolve svcflow:PORT:127.0.0.1` with TLS.
    pub fn curl_target(&self, i: usize, path: &str) -> String {
        self.curl_args(&self.replica_rest_addr(i), path).join(" ")
    }

    /// The `svcflow get|plan|trace` flags that reach replica 0's REST northbound: none over
    /// plain HTTP (the default address), `--rest https://… --ca-cert CA` with TLS.
    pub fn cli_rest_flags(&self) -> Vec<String> {
        match self.controller_ca() {
            None => Vec::new(),
            Some(_) => self.replica_cli_rest_flags(0),
        }
    }

    /// The `svcflow get|plan|trace` flags that reach replica `i`'s REST northbound:
    /// `--rest http://ADDR`, or `--rest https://ADDR --ca-cert CA` with TLS.
    pub fn replica_cli_rest_flags(&self, i: usize) -> Vec<String> {
        let addr = self.replica_rest_addr(i);
        match self.controller_ca() {
            None => vec!["--rest".into(), format!("http://{addr}")],
            Some(ca) => vec![
                "--rest".into(),
                format!("https://{addr}"),
                "--ca-cert".into(),
                ca,
            ],
        }
    }

    /// With [`LabOptions::tls`], the CA that signed svcflow's certificate (named `svcflow`),
    /// for HTTPS clients of its REST and metrics.
    pub fn controller_ca(&self) -> Option<String> {
        self.tls.as_ref().map(|(pki, _)| pki.ca("controller"))
    }

    /// `curl`'s arguments for `PATH` (from the root) at `addr`: `http://ADDR/PATH`, or with
    /// TLS `--cacert CA --resolve svcflow:PORT:HOST https://svcflow:PORT/PATH` (the name
    /// svcflow's certificate gives, resolved to `addr`). The URL comes last.
    fn curl_args(&self, addr: &str, path: &str) -> Vec<String> {
        let Some((pki, _)) = &self.tls else {
            return vec![format!("http://{addr}{path}")];
        };
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, ""));
        vec![
            "--cacert".into(),
            pki.ca("controller"),
            "--resolve".into(),
            format!("svcflow:{port}:{host}"),
            format!("https://svcflow:{port}{path}"),
        ]
    }

    /// The PKI of [`LabOptions::tls`], in the first node's directory: each node's OVS
    /// presents a certificate naming it (`ovs-vsctl set-ssl`, trusting the controller CA).
    fn make_pki(&mut self) -> Result<(), SandboxError> {
        let first = &self
            .nodes
            .first()
            .ok_or_else(|| invalid("a lab needs a node"))?
            .sandbox;
        let pki = Pki::new(&first.dir().join("lab-pki"))?;
        for node in &self.nodes {
            let Signed { key, cert } = pki.sign(&node.spec.name, "switch")?;
            node.sandbox
                .vsctl(&["set-ssl", &key, &cert, &pki.ca("controller")])?;
        }
        let flags = pki.daemon_flags()?;
        self.tls = Some((pki, flags));
        Ok(())
    }

    /// The process id of node `node`'s `ovs-vswitchd`, from its pidfile.
    pub fn vswitchd_pid(&self, node: &str) -> Result<u32, SandboxError> {
        self.node(node)?
            .vswitchd_pid()
            .ok_or_else(|| invalid(format!("node {node}: ovs-vswitchd has no pidfile")))
    }

    /// Sends `signal` (a `kill` name: `STOP`, `CONT`, …) to node `node`'s `ovs-vswitchd`.
    pub fn signal_vswitchd(&self, node: &str, signal: &str) -> Result<(), SandboxError> {
        let pid = self.vswitchd_pid(node)?;
        cmd::run(&["kill", &format!("-{signal}"), &pid.to_string()]).map(|_| ())
    }

    /// Kills node `node`'s `ovs-vswitchd` (SIGKILL) and starts it again, waits for svcflow to
    /// put `svc-gw` back, and re-applies the node's host side (a new `svc-gw` tap has no
    /// address).
    pub fn restart_vswitchd(&mut self, node: &str) -> Result<(), SandboxError> {
        let index = self.index(node)?;
        self.nodes[index].sandbox.restart_vswitchd()?;
        self.wait_gateway(index)?;
        self.apply_host_side_at(index)
    }

    /// Puts the endpoints of service `service` (`name` or `namespace/name`): the pods named.
    pub fn put_endpoints(&mut self, service: &str, pods: &[&str]) -> Result<(), SandboxError> {
        let position = self
            .topology
            .services
            .iter()
            .position(|s| s.name == service || s.key() == service)
            .ok_or_else(|| invalid(format!("no service `{service}` in the lab")))?;
        let mut spec = self.topology.services[position].clone();
        spec.endpoints = pods.iter().map(|p| p.to_string()).collect();
        let body = endpoints_body(&self.topology, &spec)?;
        self.rest("PUT", &spec.endpoints_rest_path(), &body)?;
        self.topology.services[position] = spec;
        Ok(())
    }

    /// Adds (or replaces) service `spec` over REST, the service and then its endpoints, and
    /// records it in the lab's topology, so [`Lab::wait_synced`] and the status include it.
    pub fn put_service(&mut self, spec: ServiceSpec) -> Result<(), SandboxError> {
        let mut topology = self.topology.clone();
        topology.services.retain(|s| s.key() != spec.key());
        topology.services.push(spec.clone());
        topology.check()?;
        self.post_service(&spec)?;
        self.topology = topology;
        Ok(())
    }

    /// The IPv4 endpoint addresses of each group on node `node`'s switch, one set per group
    /// (read from the buckets' `set_field:…->reg3`).
    pub fn group_endpoints(&self, node: &str) -> Result<Vec<BTreeSet<Ipv4Addr>>, SandboxError> {
        let text = self.node(node)?.dump_groups(BR)?;
        Ok(parse_group_endpoints(&text)
            .into_iter()
            .map(|g| {
                g.into_iter()
                    .filter_map(|ip| match ip {
                        IpAddr::V4(v4) => Some(v4),
                        IpAddr::V6(_) => None,
                    })
                    .collect()
            })
            .collect())
    }

    /// Whether node `node`'s switch holds every pod of the node and every service, each with
    /// a group of exactly its endpoints (services without endpoints need only their flow).
    pub fn node_synced(&self, node: &str) -> Result<bool, SandboxError> {
        let index = self.index(node)?;
        let n = &self.nodes[index];
        let flows = n.sandbox.dump_flows(BR)?;
        let pods_ok = n.spec.pods.iter().all(|p| {
            flows.contains(&format!("ip,nw_dst={} actions=", p.ip))
                && p.ip6
                    .is_none_or(|ip6| flows.contains(&format!("ipv6,ipv6_dst={ip6} actions=")))
        });
        let services_ok = self.topology.services.iter().all(|s| {
            s.cluster_ips().into_iter().all(|ip| {
                let dst = match ip {
                    IpAddr::V4(ip) => format!("nw_dst={ip}"),
                    IpAddr::V6(ip) => format!("ipv6_dst={ip}"),
                };
                flows.contains(&format!("{dst},tp_dst={}", s.port))
            })
        });
        if !(pods_ok && services_ok) {
            return Ok(false);
        }
        let groups = parse_group_endpoints(&n.sandbox.dump_groups(BR)?);
        // A group per cluster IP's family, of the endpoints' addresses of that family.
        let groups_ok = self.topology.services.iter().all(|s| {
            s.cluster_ips().into_iter().all(|cluster_ip| {
                let want: BTreeSet<IpAddr> = s
                    .endpoints
                    .iter()
                    .filter_map(|p| self.topology.pod(p))
                    .flat_map(|(_, pod)| endpoint_ips(s, pod))
                    .filter(|ip| ip.is_ipv4() == cluster_ip.is_ipv4())
                    .collect();
                want.is_empty() || groups.contains(&want)
            })
        });
        Ok(groups_ok)
    }

    /// Waits until every switch is connected and [`Lab::node_synced`].
    ///
    /// Connected: svcflow has logged a sync of the node on the switch's latest connection, or
    /// OVSDB's `Controller.is_connected` says so. OVSDB alone would do, but `ovs-vswitchd`
    /// writes that column late after a restart (measured: about 5 s after the kill, while
    /// svcflow had synced the new connection after 0.17 s).
    pub fn wait_synced(&self, timeout: Duration) -> Result<(), SandboxError> {
        for n in &self.nodes {
            let name = n.spec.name.clone();
            wait_for(
                &format!("node {name}'s switch to connect and hold the model"),
                timeout,
                || {
                    let connected = self.synced_on_current_connection(&name)
                        || n.sandbox
                            .vsctl(&["--bare", "--columns=is_connected", "list", "controller"])
                            .is_ok_and(|c| c.split_whitespace().any(|w| w == "true"));
                    (connected && self.node_synced(&name).unwrap_or(false)).then_some(())
                },
            )
            .map_err(|e| self.with_log(e))?;
        }
        Ok(())
    }

    /// Whether svcflow's log has a sync of node `node` on its switch's latest connection.
    fn synced_on_current_connection(&self, node: &str) -> bool {
        (0..self.options.replicas.max(1))
            .filter_map(|i| self.replica(i))
            .any(|d| synced_on_current_connection(&d.log(), node))
    }

    /// What `svcflow-lab` records: everything needed to find and tear down the lab.
    pub fn state(&self) -> LabState {
        let daemon_log = self.daemon_log_path();
        let mut namespaces = self.namespaces.clone();
        let mut nodes = Vec::new();
        for n in &self.nodes {
            namespaces.push(n.sandbox.node_netns().to_string());
            namespaces.extend(n.pods.iter().map(|h| h.netns.clone()));
            nodes.push(NodeState {
                name: n.spec.name.clone(),
                address: n.spec.address,
                pod_cidr: n.spec.pod_cidr,
                address6: n.spec.address6,
                pod_cidr6: n.spec.pod_cidr6,
                netns: n.sandbox.node_netns().to_string(),
                dir: n.sandbox.dir().to_path_buf(),
                mgmt_ip: n.mgmt_ip,
                pods: n
                    .pods
                    .iter()
                    .map(|h| HostState {
                        name: h.spec.name.clone(),
                        namespace: self
                            .topology
                            .pod(&h.spec.name)
                            .map(|(_, p)| p.namespace.clone()),
                        ip: h.ip().parse().unwrap_or(Ipv4Addr::UNSPECIFIED),
                        ip6: h.ip6().and_then(|ip| ip.parse().ok()),
                        mac: h.mac().to_string(),
                        mac_source: self
                            .topology
                            .pod(&h.spec.name)
                            .map(|(_, p)| p.mac_source)
                            .unwrap_or_default(),
                        netns: h.netns.clone(),
                    })
                    .collect(),
            });
        }
        LabState {
            id: self.id.clone(),
            underlay: self.topology.underlay.clone(),
            underlay_netns: self.underlay_netns.clone(),
            controller_netns: self.controller_netns.clone(),
            controller_ip: self.controller_ip(),
            rest: self.curl_target(0, "/restconf/config"),
            daemon_pid: self.daemon.as_ref().and_then(Daemon::pid),
            daemon_log,
            keeper_pid: None,
            nodes,
            outside: self.outside.as_ref().map(|h| HostState {
                name: h.spec.name.clone(),
                namespace: None,
                ip: h.ip().parse().unwrap_or(Ipv4Addr::UNSPECIFIED),
                ip6: None,
                mac: h.mac().to_string(),
                mac_source: MacSource::Model,
                netns: h.netns.clone(),
            }),
            services: self.topology.services.clone(),
            namespaces,
        }
    }

    /// A text summary: nodes, their switch's connection, flow and group counts, pods,
    /// services.
    pub fn status(&self) -> String {
        self.state().status()
    }

    // --- building ------------------------------------------------------------------------

    fn ns_run(&self, netns: &str, argv: &[&str]) -> Result<String, SandboxError> {
        cmd::run(&netns_argv(netns, argv))
    }

    fn new_netns(&mut self, name: &str) -> Result<(), SandboxError> {
        cmd::run(&["ip", "netns", "add", name])?;
        self.namespaces.push(name.to_string());
        self.ns_run(name, &["ip", "link", "set", "dev", "lo", "up"])?;
        // Nothing here speaks IPv6; keep router solicitations and the like off the switches.
        for key in ["all", "default"] {
            self.ns_run(
                name,
                &[
                    "sysctl",
                    "-qw",
                    &format!("net.ipv6.conf.{key}.disable_ipv6=1"),
                ],
            )?;
        }
        Ok(())
    }

    fn make_controller(&mut self) -> Result<(), SandboxError> {
        let ns = self.controller_netns.clone();
        self.new_netns(&ns)?;
        let address = format!(
            "{}/{}",
            self.controller_ip(),
            self.topology.management.prefix_len()
        );
        self.ns_run(&ns, &["ip", "link", "add", "mgmt", "type", "bridge"])?;
        self.ns_run(&ns, &["ip", "addr", "add", &address, "dev", "mgmt"])?;
        self.ns_run(&ns, &["ip", "link", "set", "dev", "mgmt", "up"])?;
        Ok(())
    }

    fn make_underlay(&mut self) -> Result<(), SandboxError> {
        let ns = self.underlay_netns.clone();
        self.new_netns(&ns)?;
        for key in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ] {
            self.ns_run(&ns, &["sysctl", "-qw", key])?;
        }
        if self.topology.dual_stack() {
            // The router forwards the pods' IPv6 too (with `encap = "none"`, to the nodes'
            // `address6`).
            for key in [
                "net.ipv6.conf.all.disable_ipv6=0",
                "net.ipv6.conf.default.disable_ipv6=0",
                "net.ipv6.conf.all.forwarding=1",
            ] {
                self.ns_run(&ns, &["sysctl", "-qw", key])?;
            }
        }
        let router = self.topology.underlay.router();
        match self.topology.underlay.kind {
            UnderlayKind::Routed => {
                self.ns_run(
                    &ns,
                    &["ip", "addr", "add", &format!("{router}/32"), "dev", "lo"],
                )?;
            }
            UnderlayKind::L2 => {
                let address = format!("{router}/{}", self.topology.underlay.subnet.prefix_len());
                self.ns_run(&ns, &["ip", "link", "add", "br0", "type", "bridge"])?;
                self.ns_run(
                    &ns,
                    &[
                        "ip",
                        "link",
                        "set",
                        "dev",
                        "br0",
                        "address",
                        &next_hop_mac(None),
                    ],
                )?;
                self.ns_run(&ns, &["ip", "addr", "add", &address, "dev", "br0"])?;
                self.ns_run(&ns, &["ip", "link", "set", "dev", "br0", "up"])?;
            }
        }
        Ok(())
    }

    fn add_node(&mut self, index: usize) -> Result<(), SandboxError> {
        let spec = self.topology.nodes[index].clone();
        let mgmt_ip = self
            .topology
            .management_ip(index + 1)
            .ok_or_else(|| invalid("the management subnet is too small"))?;
        let sandbox = Sandbox::start()?;
        let ctl = self.controller_netns.clone();
        let peer = format!("m-{index}");
        self.nodes.push(LabNode {
            spec,
            sandbox,
            pods: Vec::new(),
            mgmt_ip,
        });
        let sb = &self.nodes[index].sandbox;
        sb.node(&[
            "ip", "link", "add", "name", MGMT_PORT, "type", "veth", "peer", "name", &peer, "netns",
            &ctl,
        ])?;
        let address = format!("{mgmt_ip}/{}", self.topology.management.prefix_len());
        sb.node(&["ip", "addr", "add", &address, "dev", MGMT_PORT])?;
        sb.node(&["ip", "link", "set", "dev", MGMT_PORT, "up"])?;
        self.ns_run(
            &ctl,
            &["ip", "link", "set", "dev", &peer, "master", "mgmt", "up"],
        )?;
        Ok(())
    }

    /// Starts replica `i` (again, if it ran before): see [`LabOptions::replicas`].
    pub fn start_replica(&mut self, i: usize) -> Result<(), SandboxError> {
        let port = OPENFLOW_PORT + i as u16;
        let rest = self.replica_rest_addr(i);
        let mut args: Vec<String> = vec![
            "--openflow-listen".into(),
            format!("0.0.0.0:{port}"),
            "--openflow-advertise".into(),
            format!("{}:{port}", self.controller_ip()),
            "--rest-listen".into(),
            rest,
            "--log-level".into(),
            self.options.log_level.clone(),
            "--encap".into(),
            self.topology.underlay.encap.clone(),
        ];
        match &self.tls {
            Some((_, flags)) => args.extend(flags.iter().cloned()),
            // The lab's management network is private to the test: plain TCP there, without
            // TLS unless asked (tests/tls.rs covers TLS).
            None => args.push("--insecure".into()),
        }
        if i > 0 {
            args.push(format!("--metrics-listen=127.0.0.1:{}", 10249 + 10 * i));
            args.push(format!("--healthz-listen=127.0.0.1:{}", 10256 + 10 * i));
        }
        for n in &self.nodes {
            args.push("--ovsdb-remote".into());
            args.push(format!("{}={}", n.spec.name, n.sandbox.db_remote()));
        }
        args.extend(self.options.daemon_args.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let first = &self
            .nodes
            .first()
            .ok_or_else(|| invalid("a lab needs a node"))?
            .sandbox;
        // Replica 0's first run logs to svcflow-1.log, as a lab with one daemon always has.
        let n = if i == 0 && self.starts == 0 {
            1
        } else {
            1000 + 10 * self.starts + i as u32
        };
        self.starts += 1;
        let daemon = Daemon::spawn(first, n, Some(&self.controller_netns), &args)?;
        if i == 0 {
            self.daemon = Some(daemon);
        } else {
            self.replicas.insert(i, daemon);
        }
        Ok(())
    }

    /// Replica `i`, while it runs.
    pub fn replica(&self, i: usize) -> Option<&Daemon> {
        match i {
            0 => self.daemon.as_ref(),
            _ => self.replicas.get(&i),
        }
    }

    /// Kills replica `i` (SIGKILL), if it runs.
    pub fn kill_replica(&mut self, i: usize) {
        let daemon = match i {
            0 => self.daemon.take(),
            _ => self.replicas.remove(&i),
        };
        if let Some(mut d) = daemon {
            d.kill();
        }
    }

    /// Stops replica `i` with SIGTERM and waits for it to exit, if it runs.
    pub fn terminate_replica(&mut self, i: usize) -> Result<(), SandboxError> {
        let daemon = match i {
            0 => self.daemon.take(),
            _ => self.replicas.remove(&i),
        };
        match daemon {
            Some(mut d) => {
                let status = d.terminate()?;
                if status.success() {
                    Ok(())
                } else {
                    Err(invalid(format!(
                        "replica {i} exited with {status}\n{}",
                        d.log()
                    )))
                }
            }
            None => Ok(()),
        }
    }

    /// Drops (or, `cut` false, stops dropping) every packet between replica `i`'s OpenFlow
    /// port and every node's switch, on the nodes' management ports: the replica runs and
    /// reaches the database, but no switch.
    pub fn cut_replica(&self, i: usize, cut: bool) -> Result<(), SandboxError> {
        for n in &self.nodes {
            n.sandbox
                .cut_tcp_port_on(MGMT_PORT, OPENFLOW_PORT + i as u16, cut)?;
        }
        Ok(())
    }

    /// The OpenFlow target replica `i` advertises to the bridges.
    pub fn replica_target(&self, i: usize) -> String {
        let scheme = if self.tls.is_some() { "ssl" } else { "tcp" };
        format!(
            "{scheme}:{}:{}",
            self.controller_ip(),
            OPENFLOW_PORT + i as u16
        )
    }

    /// Where replica `i` serves REST, in the controller namespace.
    pub fn replica_rest_addr(&self, i: usize) -> String {
        match i {
            0 => REST.to_string(),
            _ => format!("127.0.0.1:{}", 8181 + i),
        }
    }

    /// [`Lab::rest`] through replica `i`.
    pub fn replica_rest(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: &str,
    ) -> Result<String, SandboxError> {
        let target = self.curl_args(
            &self.replica_rest_addr(i),
            &format!("/restconf/config/{path}"),
        );
        rest_at(&self.controller_netns, &target, method, body)
    }

    /// Every running replica's log, each under a heading.
    pub fn replica_logs(&self) -> String {
        (0..self.options.replicas.max(1))
            .filter_map(|i| self.replica(i).map(|d| (i, d)))
            .map(|(i, d)| {
                format!(
                    "--- replica {i} ({}) ---\n{}",
                    self.replica_target(i),
                    d.log()
                )
            })
            .collect()
    }

    /// Waits until svcflow has made `br-int` and `svc-gw` on node `index`.
    fn wait_gateway(&self, index: usize) -> Result<(), SandboxError> {
        let sb = &self.nodes[index].sandbox;
        wait_for(
            &format!(
                "svcflow to make br-int and svc-gw on {}",
                self.nodes[index].spec.name
            ),
            STEP_TIMEOUT,
            || {
                let ofport = sb
                    .vsctl(&["get", "interface", GATEWAY_PORT, "ofport"])
                    .ok()?;
                let up = sb
                    .node(&["ip", "link", "show", "dev", GATEWAY_PORT])
                    .is_ok();
                (ofport.trim().parse::<i64>().is_ok_and(|p| p > 0) && up).then_some(())
            },
        )
        .map_err(|e| self.with_log(e))
    }

    fn attach_uplink(&mut self, index: usize) -> Result<(), SandboxError> {
        let underlay = self.underlay_netns.clone();
        let kind = self.topology.underlay.kind;
        let encapsulated = self.topology.underlay.encap != "none";
        let node = &self.nodes[index];
        let (sb, spec) = (&node.sandbox, &node.spec);
        let peer = format!("u-{index}");
        let next_hop = match kind {
            UnderlayKind::Routed => next_hop_mac(Some(index)),
            UnderlayKind::L2 => next_hop_mac(None),
        };
        sb.node(&[
            "ip", "link", "add", "name", UPLINK, "type", "veth", "peer", "name", &peer, "netns",
            &underlay,
        ])?;
        // As for a host's port: the node's own stack must not answer what OVS reads here.
        sb.node(&["ip", "link", "set", "dev", UPLINK, "up", "arp", "off"])?;
        sb.node(&[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{UPLINK}.disable_ipv6=1"),
        ])?;
        sb.vsctl(&[
            "add-port",
            BR,
            UPLINK,
            "--",
            "set",
            "interface",
            UPLINK,
            &format!("ofport_request={UPLINK_OFPORT}"),
            "external_ids:svcflow-role=uplink",
            &format!("external_ids:svcflow-next-hop-mac=\"{next_hop}\""),
        ])?;
        let run = |argv: &[&str]| cmd::run(&netns_argv(&underlay, argv));
        // The userspace datapath does not complete partial checksums of what it reads.
        run(&["ethtool", "-K", &peer, "tx", "off"])?;
        match kind {
            UnderlayKind::Routed => {
                let node_ip = spec.address.to_string();
                run(&["ip", "link", "set", "dev", &peer, "address", &next_hop])?;
                run(&["ip", "link", "set", "dev", &peer, "up"])?;
                run(&["ip", "route", "add", &format!("{node_ip}/32"), "dev", &peer])?;
                if let Some(node_ip6) = spec.address6 {
                    // Its switch answers neighbour solicitations for it on the uplink.
                    run(&[
                        "ip",
                        "-6",
                        "route",
                        "add",
                        &node_ip6.to_string(),
                        "dev",
                        &peer,
                    ])?;
                }
                if encapsulated {
                    // The nodes' addresses are on-link for each other through the router.
                    run(&[
                        "sysctl",
                        "-qw",
                        &format!("net.ipv4.conf.{peer}.proxy_arp=1"),
                    ])?;
                    if spec.address6.is_some() {
                        // Its IPv6 endpoint's peers are on-link too. Linux proxies neighbour
                        // discovery only for the addresses listed.
                        run(&[
                            "sysctl",
                            "-qw",
                            &format!("net.ipv6.conf.{peer}.proxy_ndp=1"),
                        ])?;
                        let others = self.topology.nodes.iter().filter(|o| o.name != spec.name);
                        for other in others.filter_map(|o| o.address6) {
                            let other = other.to_string();
                            run(&["ip", "-6", "neigh", "add", "proxy", &other, "dev", &peer])?;
                        }
                    }
                    return Ok(());
                }
                run(&[
                    "ip",
                    "route",
                    "add",
                    &spec.pod_cidr.to_string(),
                    "via",
                    &node_ip,
                    "dev",
                    &peer,
                ])?;
                if let (Some(cidr6), Some(node_ip6)) = (spec.pod_cidr6, spec.address6) {
                    // Via the node's IPv6 address, for which its switch answers neighbour
                    // solicitations on the uplink (never for its pods' addresses).
                    let (cidr6, node_ip6) = (cidr6.to_string(), node_ip6.to_string());
                    run(&[
                        "ip", "-6", "route", "add", &cidr6, "via", &node_ip6, "dev", &peer,
                    ])?;
                }
            }
            UnderlayKind::L2 => {
                run(&["ip", "link", "set", "dev", &peer, "master", "br0", "up"])?;
                if encapsulated {
                    return Ok(());
                }
                run(&[
                    "ip",
                    "route",
                    "add",
                    &spec.pod_cidr.to_string(),
                    "via",
                    &spec.address.to_string(),
                    "dev",
                    "br0",
                ])?;
                if let (Some(cidr6), Some(node_ip6)) = (spec.pod_cidr6, spec.address6) {
                    let (cidr6, node_ip6) = (cidr6.to_string(), node_ip6.to_string());
                    run(&["ip", "-6", "route", "add", &node_ip6, "dev", "br0"])?;
                    run(&[
                        "ip", "-6", "route", "add", &cidr6, "via", &node_ip6, "dev", "br0",
                    ])?;
                }
            }
        }
        Ok(())
    }

    /// Applies `netvirt::node_setup::host_gateway_commands` in node `index`'s namespace.
    fn apply_host_side_at(&self, index: usize) -> Result<(), SandboxError> {
        let n = &self.nodes[index];
        let node = netvirt::model::Node {
            name: n.spec.name.clone(),
            ips: n.spec.model_ips(self.topology.underlay.ipv6_only),
            pod_cidrs: std::iter::once(ipnet::IpNet::V4(n.spec.pod_cidr))
                .chain(n.spec.pod_cidr6.map(ipnet::IpNet::V6))
                .collect(),
            labels: BTreeMap::new(),
        };
        let setup = netvirt::node_setup::NodeSetup::default();
        let config = netvirt::config::Config::default();
        let mut commands = netvirt::node_setup::host_gateway_commands(&setup, &config, &node);
        if self.topology.underlay.encap != "none" {
            // The tunnel endpoints (the node's address of each family in the model), as
            // `svcflow node-setup NODE --address ADDR/LEN …` prints them.
            let addresses = node
                .ips
                .iter()
                .map(|&ip| {
                    let prefix = match ip {
                        IpAddr::V4(_) => self.topology.underlay.subnet.prefix_len(),
                        IpAddr::V6(_) => 64,
                    };
                    ipnet::IpNet::new(ip, prefix)
                        .map_err(|e| invalid(format!("node {}: {e}", n.spec.name)))
                })
                .collect::<Result<Vec<_>, _>>()?;
            commands.extend(netvirt::node_setup::tunnel_endpoint_commands(
                &setup, &addresses,
            ));
        }
        for command in commands {
            let argv: Vec<&str> = command.iter().map(String::as_str).collect();
            n.sandbox.node(&argv)?;
        }
        Ok(())
    }

    fn add_pods(&mut self, index: usize) -> Result<(), SandboxError> {
        let spec = self.nodes[index].spec.clone();
        let gateway = spec.gateway().to_string();
        for (j, pod) in spec.pods.iter().enumerate() {
            let ofport = u16::try_from(j)
                .ok()
                .and_then(|j| FIRST_POD_OFPORT.checked_add(j))
                .ok_or_else(|| invalid("too many pods on one node"))?;
            let ip = format!("{}/{}", pod.ip, spec.pod_cidr.prefix_len());
            let mut host_spec =
                HostSpec::new(&pod.name, &ip, &pod.mac(), ofport).with_gateway(&gateway);
            if let (Some(ip6), Some(cidr6), Some(gateway6)) =
                (pod.ip6, spec.pod_cidr6, spec.gateway6())
            {
                let ip6 = format!("{ip6}/{}", cidr6.prefix_len());
                host_spec = host_spec.with_ipv6(&ip6, Some(&gateway6.to_string()));
            }
            let sb = &mut self.nodes[index].sandbox;
            let host = sb.add_host(BR, host_spec)?;
            // The CNI's part: bind the interface to the pod and, for `attached`, say its MAC,
            // in one transaction so svcflow never sees the binding without it.
            let iface_id = format!("external_ids:iface-id={}", pod.name);
            let attached = format!("external_ids:attached-mac=\"{}\"", pod.mac());
            let mut set = vec!["set", "interface", pod.name.as_str(), iface_id.as_str()];
            if pod.mac_source == MacSource::Attached {
                set.push(attached.as_str());
            }
            sb.vsctl(&set)?;
            let listens = self.topology.serve_of(pod);
            if !listens.is_empty() {
                let listens: Vec<&str> = listens.iter().map(String::as_str).collect();
                self.servers.push(host.serve(&pod.name, &listens)?);
            }
            self.nodes[index].pods.push(host);
        }
        Ok(())
    }

    fn add_outside(&mut self) -> Result<(), SandboxError> {
        let Some(outside) = self.topology.outside.clone() else {
            return Ok(());
        };
        let netns = format!("{}-out", self.id);
        self.new_netns(&netns)?;
        let underlay = self.underlay_netns.clone();
        let router = self.topology.underlay.router().to_string();
        let peer = "u-out";
        self.ns_run(
            &underlay,
            &[
                "ip", "link", "add", "name", peer, "type", "veth", "peer", "name", "eth0", "netns",
                &netns,
            ],
        )?;
        self.ns_run(&underlay, &["ethtool", "-K", peer, "tx", "off"])?;
        self.ns_run(&netns, &["ethtool", "-K", "eth0", "tx", "off"])?;
        self.ns_run(
            &netns,
            &["ip", "link", "set", "dev", "eth0", "address", OUTSIDE_MAC],
        )?;
        self.ns_run(&netns, &["ip", "link", "set", "dev", "eth0", "up"])?;
        let address = match self.topology.underlay.kind {
            UnderlayKind::Routed => {
                self.ns_run(&underlay, &["ip", "link", "set", "dev", peer, "up"])?;
                self.ns_run(
                    &underlay,
                    &[
                        "ip",
                        "route",
                        "add",
                        &format!("{}/32", outside.address),
                        "dev",
                        peer,
                    ],
                )?;
                let address = format!("{}/32", outside.address);
                self.ns_run(&netns, &["ip", "addr", "add", &address, "dev", "eth0"])?;
                self.ns_run(&netns, &["ip", "route", "add", &router, "dev", "eth0"])?;
                address
            }
            UnderlayKind::L2 => {
                self.ns_run(
                    &underlay,
                    &["ip", "link", "set", "dev", peer, "master", "br0", "up"],
                )?;
                let address = format!(
                    "{}/{}",
                    outside.address,
                    self.topology.underlay.subnet.prefix_len()
                );
                self.ns_run(&netns, &["ip", "addr", "add", &address, "dev", "eth0"])?;
                address
            }
        };
        self.ns_run(
            &netns,
            &[
                "ip", "route", "add", "default", "via", &router, "dev", "eth0",
            ],
        )?;
        self.outside = Some(Host {
            spec: HostSpec::new(&outside.name, &address, OUTSIDE_MAC, 0),
            bridge: String::new(),
            netns,
        });
        Ok(())
    }

    fn post_model(&self) -> Result<(), SandboxError> {
        wait_for("svcflow's REST northbound", STEP_TIMEOUT, || {
            self.rest("GET", "k8s-node:k8s-nodes-info", "").ok()
        })
        .map_err(|e| self.with_log(e))?;
        let t = &self.topology;
        for node in &t.nodes {
            let ips = node.model_ips(t.underlay.ipv6_only);
            let mut body = json!({
                "k8s-node:uid": node.name,
                "k8s-node:host-name": node.name,
                "k8s-node:internal-ip-address": ips.first().map(ToString::to_string),
                "k8s-node:pod-cidr": node.rest_pod_cidr(),
            });
            if let Some(second) = ips.get(1) {
                body["k8s-node:external-ip-address"] = json!(second.to_string());
            }
            let body = json!({"k8s-node:k8s-nodes": [body]});
            self.rest(
                "PUT",
                &format!("k8s-node:k8s-nodes-info/k8s-nodes/{}", node.name),
                &body.to_string(),
            )?;
        }
        for node in &t.nodes {
            let host_ip = node
                .model_ips(t.underlay.ipv6_only)
                .first()
                .map(ToString::to_string);
            for pod in &node.pods {
                // A dual-stack interface is listed once per family.
                let interfaces: Vec<serde_json::Value> = std::iter::once(IpAddr::V4(pod.ip))
                    .chain(pod.ip6.map(IpAddr::V6))
                    .map(|ip| {
                        json!({
                            "pod:uid": pod.name,
                            "pod:ip-address": ip.to_string(),
                            "pod:network-type": "FLAT",
                        })
                    })
                    .collect();
                let body = json!({"pod:pods": [{
                    "pod:uid": pod.name,
                    "pod:name": pod.name,
                    "pod:network-NS": pod.namespace,
                    "pod:host-ip-address": host_ip,
                    "pod:port-mac-address": pod.model_mac(),
                    "pod:interface": interfaces,
                }]});
                self.rest(
                    "PUT",
                    &format!("pod:coe/pods/{}", pod.name),
                    &body.to_string(),
                )?;
            }
        }
        for s in &t.services {
            self.post_service(s)?;
        }
        Ok(())
    }

    /// PUTs service `s` and then its endpoints.
    fn post_service(&self, s: &ServiceSpec) -> Result<(), SandboxError> {
        self.rest("PUT", &s.rest_path(), &s.rest_body())?;
        self.rest(
            "PUT",
            &s.endpoints_rest_path(),
            &endpoints_body(&self.topology, s)?,
        )?;
        Ok(())
    }

    // --- tearing down --------------------------------------------------------------------

    /// Stops everything; returns the lab's namespaces that are still there.
    fn teardown(&mut self) -> Vec<String> {
        let mut ours: Vec<String> = self.namespaces.clone();
        for n in &self.nodes {
            ours.push(n.sandbox.node_netns().to_string());
            ours.extend(n.pods.iter().map(|h| h.netns.clone()));
            // A frozen switch could not exit when its sandbox asks it to.
            if let Some(pid) = n.sandbox.vswitchd_pid() {
                let _ = cmd::run(&["kill", "-CONT", &pid.to_string()]);
            }
        }
        if let Some(mut daemon) = self.daemon.take() {
            daemon.kill();
        }
        for (_, mut daemon) in std::mem::take(&mut self.replicas) {
            daemon.kill();
        }
        self.servers.clear();
        self.outside = None;
        // Each sandbox stops its hosts, ovs-vswitchd and ovsdb-server and deletes its
        // namespaces, which removes the management and uplink veths with them.
        self.nodes.clear();
        for ns in self.namespaces.drain(..) {
            netns::delete(&ns);
        }
        let now = netns::list();
        ours.into_iter().filter(|ns| now.contains(ns)).collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if std::thread::panicking() && self.daemon.is_some() {
            eprintln!(
                "lab {} torn down after a panic; svcflow log tail:\n{}",
                self.id,
                self.daemon_log_tail(60)
            );
        }
        let left = self.teardown();
        if !left.is_empty() {
            eprintln!("lab {}: namespaces left behind: {left:?}", self.id);
        }
    }
}

/// The MAC of the router end of node `index`'s link (routed), or of the underlay bridge
/// (`None`, l2): the uplinks' next hop.
fn next_hop_mac(index: Option<usize>) -> String {
    match index {
        Some(i) => format!("02:5f:00:00:00:{:02x}", (i + 1) % 256),
        None => "02:5f:00:00:00:00".into(),
    }
}

fn endpoints_body(topology: &Topology, s: &ServiceSpec) -> Result<String, SandboxError> {
    let mut addresses = Vec::new();
    for pod in &s.endpoints {
        let (node, spec) = topology
            .pod(pod)
            .ok_or_else(|| invalid(format!("service {}: no pod `{pod}`", s.key())))?;
        let ips = endpoint_ips(s, spec);
        if s.ipv6() && !ips.iter().any(IpAddr::is_ipv6) {
            return Err(invalid(format!(
                "service {}: pod `{pod}` has no IPv6",
                s.key()
            )));
        }
        for ip in ips {
            addresses.push(json!({
                "service:ip-address": ip.to_string(),
                "service:node-name": node.name,
            }));
        }
    }
    let body = json!({"service:endpoints": [{
        "service:uid": s.endpoints_uid(),
        "service:name": s.name,
        "service:network-NS": s.namespace,
        "service:endpoint-addresses": addresses,
        "service:endpoint-ports": [{
            "service:name": s.port_name(),
            "service:port": s.target(),
            "service:protocol": s.protocol.as_str(),
        }],
    }]});
    Ok(body.to_string())
}

/// The addresses of pod `pod` as an endpoint of service `s`: of its cluster IPs' families.
fn endpoint_ips(s: &ServiceSpec, pod: &PodSpec) -> Vec<IpAddr> {
    s.cluster_ips()
        .into_iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(_) => Some(IpAddr::V4(pod.ip)),
            IpAddr::V6(_) => pod.ip6.map(IpAddr::V6),
        })
        .collect()
}

/// `curl` against svcflow's REST northbound inside `netns`, at `target` ([`Lab::curl_args`]:
/// the URL last, after what HTTPS needs).
fn rest_at(
    netns: &str,
    target: &[String],
    method: &str,
    body: &str,
) -> Result<String, SandboxError> {
    let url = target.last().map_or("", String::as_str);
    let mut argv = vec!["curl", "-sS", "--fail-with-body", "-X", method];
    argv.extend(target.iter().map(String::as_str));
    if !body.is_empty() {
        argv.extend(["-H", "Content-Type: application/json", "-d", body]);
    }
    let out = cmd::output_env(&netns_argv(netns, &argv), &[])?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(SandboxError::Command {
            command: format!("curl -X {method} {url}"),
            status: out.status.to_string(),
            stderr: format!(
                "{} {}",
                String::from_utf8_lossy(&out.stderr).trim(),
                stdout.trim()
            ),
        })
    }
}

/// Every group's endpoint addresses, from `ovs-ofctl dump-groups` text: IPv4 endpoints from
/// the buckets' `set_field:…->reg3`, IPv6 ones from `reg12`..`reg15` (most significant
/// first), or `xxreg3` if `ovs-ofctl` prints them as one.
pub fn parse_group_endpoints(dump: &str) -> Vec<BTreeSet<IpAddr>> {
    dump.lines()
        .filter(|l| l.contains("group_id="))
        .map(|line| {
            let mut ips = BTreeSet::new();
            for bucket in line.split("bucket=").skip(1) {
                let mut words = [None; 4];
                for rest in bucket.split("set_field:").skip(1) {
                    let Some((value, after)) = rest.split_once("->") else {
                        continue;
                    };
                    // `0x…`, or `0` for a zero word.
                    let hex = value.strip_prefix("0x").unwrap_or(value);
                    let reg: String = after
                        .chars()
                        .take_while(char::is_ascii_alphanumeric)
                        .collect();
                    match reg.as_str() {
                        "reg3" => {
                            if let Ok(v) = u32::from_str_radix(hex, 16) {
                                ips.insert(IpAddr::V4(Ipv4Addr::from(v)));
                            }
                        }
                        "xxreg3" => {
                            if let Ok(v) = u128::from_str_radix(hex, 16) {
                                ips.insert(IpAddr::V6(Ipv6Addr::from(v)));
                            }
                        }
                        "reg12" | "reg13" | "reg14" | "reg15" => {
                            let i = usize::from(reg.as_bytes()[4] - b'2');
                            words[i] = u32::from_str_radix(hex, 16).ok();
                        }
                        _ => {}
                    }
                }
                if let [Some(a), Some(b), Some(c), Some(d)] = words {
                    let v = (u128::from(a) << 96)
                        | (u128::from(b) << 64)
                        | (u128::from(c) << 32)
                        | u128::from(d);
                    ips.insert(IpAddr::V6(Ipv6Addr::from(v)));
                }
            }
            ips
        })
        .collect()
}

/// Whether a process with this id exists and is not a zombie.
pub fn process_is_alive(pid: u32) -> bool {
    netns::process_alive(pid)
}

/// Kills process `pid` (SIGKILL) if it is alive and its command name is `comm`.
fn kill_if(pid: u32, comm: &str) {
    let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if process_is_alive(pid) && name.trim() == comm {
        let _ = cmd::run(&["kill", "-9", &pid.to_string()]);
    }
}

// ---------------------------------------------------------------------------------------------
// The recorded state, for `svcflow-lab` invocations that did not make the lab
// ---------------------------------------------------------------------------------------------

/// A lab as `svcflow-lab up` records it in `<dir>/state.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabState {
    /// The lab's id.
    pub id: String,
    /// Its underlay.
    pub underlay: Underlay,
    /// The router's (routed) or underlay bridge's (l2) namespace.
    pub underlay_netns: String,
    /// Where svcflow runs.
    pub controller_netns: String,
    /// svcflow's management address.
    pub controller_ip: Ipv4Addr,
    /// The RESTCONF config root, inside the controller namespace, as `curl` reaches it (with
    /// TLS, `--cacert CA --resolve svcflow:PORT:127.0.0.1 https://svcflow:PORT/…`).
    pub rest: String,
    /// svcflow's process id.
    pub daemon_pid: Option<u32>,
    /// svcflow's log.
    pub daemon_log: PathBuf,
    /// The process that owns the lab (`svcflow-lab up`'s keeper), once recorded.
    pub keeper_pid: Option<u32>,
    /// The nodes.
    pub nodes: Vec<NodeState>,
    /// The outside host.
    pub outside: Option<HostState>,
    /// The services, with their endpoints.
    pub services: Vec<ServiceSpec>,
    /// Every namespace of the lab.
    pub namespaces: Vec<String>,
}

/// A node, as recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeState {
    /// Its name.
    pub name: String,
    /// Its underlay address.
    pub address: Ipv4Addr,
    /// Its pod CIDR.
    pub pod_cidr: Ipv4Net,
    /// Its IPv6 underlay address, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address6: Option<Ipv6Addr>,
    /// Its IPv6 pod CIDR, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_cidr6: Option<Ipv6Net>,
    /// Its namespace.
    pub netns: String,
    /// Its sandbox directory (`run/db.sock`, `run/br-int.mgmt`, `log/`).
    pub dir: PathBuf,
    /// Its management address.
    pub mgmt_ip: Ipv4Addr,
    /// Its pods.
    pub pods: Vec<HostState>,
}

/// A pod or the outside host, as recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostState {
    /// Its name.
    pub name: String,
    /// Its Kubernetes namespace (pods).
    pub namespace: Option<String>,
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its IPv6 address, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip6: Option<Ipv6Addr>,
    /// Its MAC.
    pub mac: String,
    /// Where svcflow gets the MAC from (pods).
    #[serde(default)]
    pub mac_source: MacSource,
    /// Its network namespace.
    pub netns: String,
}

impl NodeState {
    /// The environment that points the OVS tools at this node.
    pub fn ovs_env(&self) -> Vec<(&'static str, String)> {
        let path = |sub: &str| self.dir.join(sub).to_string_lossy().into_owned();
        vec![
            ("OVS_RUNDIR", path("run")),
            ("OVS_DBDIR", path("db")),
            ("OVS_LOGDIR", path("log")),
            ("OVS_SYSCONFDIR", path("etc")),
        ]
    }

    fn vsctl(&self, args: &[&str]) -> Result<String, SandboxError> {
        let db = format!("--db=unix:{}", self.dir.join("run/db.sock").display());
        let mut argv = vec!["ovs-vsctl", "--timeout=5", db.as_str()];
        argv.extend_from_slice(args);
        cmd::run(&argv)
    }

    fn ofctl(&self, subcommand: &str) -> Result<String, SandboxError> {
        let target = format!("unix:{}", self.dir.join(format!("run/{BR}.mgmt")).display());
        cmd::run(&[
            "ovs-ofctl",
            "--timeout=3",
            "-O",
            "OpenFlow13",
            subcommand,
            &target,
        ])
    }
}

impl LabState {
    /// The network namespace of a pod, a node, the outside host, `ctl` (svcflow's) or
    /// `underlay` (the router's).
    pub fn netns_of(&self, name: &str) -> Option<&str> {
        if matches!(name, "ctl" | "controller") {
            return Some(&self.controller_netns);
        }
        if matches!(name, "underlay" | "router") {
            return Some(&self.underlay_netns);
        }
        for n in &self.nodes {
            if n.name == name {
                return Some(&n.netns);
            }
            if let Some(p) = n.pods.iter().find(|p| p.name == name) {
                return Some(&p.netns);
            }
        }
        self.outside
            .as_ref()
            .filter(|o| o.name == name)
            .map(|o| o.netns.as_str())
    }

    /// The node named `name`.
    pub fn node(&self, name: &str) -> Option<&NodeState> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Removes whatever of the lab is still there, without its keeper: svcflow, every
    /// process in the lab's namespaces (the switches, the pods' servers) and the namespaces,
    /// each node's `ovsdb-server` (by its pidfile) and directory. Returns the namespaces that
    /// are still there afterwards.
    pub fn force_down(&self) -> Vec<String> {
        if let Some(pid) = self.daemon_pid {
            kill_if(pid, "svcflow");
        }
        let present = netns::list();
        for ns in self.namespaces.iter().filter(|ns| present.contains(ns)) {
            netns::delete(ns);
        }
        for n in &self.nodes {
            if let Some(pid) = read_pid(&n.dir.join("run/ovsdb-server.pid")) {
                kill_if(pid, "ovsdb-server");
            }
            let _ = std::fs::remove_dir_all(&n.dir);
        }
        let now = netns::list();
        self.namespaces
            .iter()
            .filter(|ns| now.contains(ns))
            .cloned()
            .collect()
    }

    /// A text summary, read live from the switches and svcflow's log.
    pub fn status(&self) -> String {
        use std::fmt::Write as _;
        let log = std::fs::read_to_string(&self.daemon_log).unwrap_or_default();
        let running = self.daemon_pid.is_some_and(netns::process_alive);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "lab {}: {} nodes, {} underlay {} (router {}), svcflow {} in {} at {} \
             (REST: curl {} there)",
            self.id,
            self.nodes.len(),
            self.underlay.kind,
            self.underlay.subnet,
            self.underlay.router(),
            match (running, self.daemon_pid) {
                (true, Some(pid)) => format!("pid {pid}"),
                _ => "NOT RUNNING".into(),
            },
            self.controller_netns,
            self.controller_ip,
            self.rest,
        );
        let _ = writeln!(out, "svcflow log: {}", self.daemon_log.display());
        for n in &self.nodes {
            // svcflow's log says it first: OVSDB's `is_connected` lags by seconds after a
            // switch (re)starts.
            let synced = running && synced_on_current_connection(&log, &n.name);
            let connected = match n.vsctl(&["get", "controller", BR, "is_connected"]) {
                Ok(c) if c.trim() == "true" => "connected".to_string(),
                Ok(_) if synced => "connected (OVSDB's is_connected not yet true)".to_string(),
                Ok(_) => "NOT connected".to_string(),
                Err(_) if synced => "connected (OVSDB does not answer)".to_string(),
                Err(_) => "unknown (OVSDB does not answer)".to_string(),
            };
            let target = n
                .vsctl(&["get-controller", BR])
                .map(|t| t.trim().to_string())
                .unwrap_or_default();
            // How many lines of `ovs-ofctl SUBCOMMAND` contain `marker`, or `?`.
            let count = |subcommand: &str, marker: &str| {
                n.ofctl(subcommand)
                    .map(|t| t.lines().filter(|l| l.contains(marker)).count().to_string())
                    .unwrap_or_else(|_| "?".into())
            };
            let flows = count("dump-flows", "actions=");
            let groups = count("dump-groups", "group_id=");
            let connection =
                last_log_value(&log, &format!("node {}: its switch is connection ", n.name));
            let revision =
                last_log_value(&log, &format!("node {}: synced model revision ", n.name));
            let v6 = match (n.address6, n.pod_cidr6) {
                (None, None) => String::new(),
                (address6, pods6) => format!(
                    "  IPv6 {}  pods {}",
                    address6.map_or_else(|| "-".to_string(), |a| a.to_string()),
                    pods6.map_or_else(|| "-".to_string(), |c| c.to_string())
                ),
            };
            let _ = writeln!(
                out,
                "node {}  {}  pods {}{v6}  mgmt {}  netns {}",
                n.name, n.address, n.pod_cidr, n.mgmt_ip, n.netns
            );
            let _ = writeln!(
                out,
                "  switch {connected} to {target} (svcflow connection {}, last sync of \
                 revision {}): {flows} flows, {groups} groups",
                connection.unwrap_or("-"),
                revision.unwrap_or("-"),
            );
            for p in &n.pods {
                let source = match p.mac_source {
                    MacSource::Model => "",
                    MacSource::Attached => " (MAC from attached-mac)",
                    MacSource::None => " (MAC learned from its ARP)",
                };
                let ip6 = p.ip6.map(|ip| format!(" {ip}")).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  pod {:<12} {:<10} {:<15} {}{source}{ip6}  netns {}",
                    p.name,
                    p.namespace.as_deref().unwrap_or("default"),
                    p.ip,
                    p.mac,
                    p.netns
                );
            }
        }
        if let Some(o) = &self.outside {
            let _ = writeln!(out, "outside {}  {}  netns {}", o.name, o.ip, o.netns);
        }
        for s in &self.services {
            let _ = writeln!(
                out,
                "service {}  {}/{} -> {}{}  endpoints: {}",
                s.key(),
                std::net::SocketAddr::new(s.cluster_ip, s.port),
                s.protocol.as_str(),
                s.target(),
                s.node_port
                    .map(|p| format!("  node port {p}"))
                    .unwrap_or_default(),
                if s.endpoints.is_empty() {
                    "none".to_string()
                } else {
                    s.endpoints.join(", ")
                }
            );
        }
        out
    }
}

/// Whether svcflow's log `log` has a sync of node `node` after the last time its switch
/// connected, and no disconnection since.
fn synced_on_current_connection(log: &str, node: &str) -> bool {
    let connected = log.rfind(&format!("node {node}: its switch is connection "));
    let synced = log.rfind(&format!("node {node}: synced model revision "));
    let gone = log.rfind(&format!("node {node}: switch gone"));
    match (connected, synced) {
        (Some(c), Some(s)) => s > c && gone.is_none_or(|g| g < c),
        _ => false,
    }
}

/// The first word after the last occurrence of `prefix` in `log`.
fn last_log_value<'a>(log: &'a str, prefix: &str) -> Option<&'a str> {
    let (_, rest) = log.rsplit_once(prefix)?;
    rest.split(|c: char| c.is_whitespace() || c == ':').next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three_nodes() -> Topology {
        let text = include_str!("../lab/three-nodes.toml");
        Topology::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_three_node_topology_parses_and_derives_macs_gateways_and_servers() {
        let t = three_nodes();
        assert_eq!(t.nodes.len(), 3);
        assert_eq!(t.underlay.kind, UnderlayKind::Routed);
        assert_eq!(t.management, default_management());
        let (node, pod) = t.pod("n2-a").unwrap_or_else(|| panic!("no n2-a"));
        assert_eq!(node.name, "n2");
        assert_eq!(node.gateway(), Ipv4Addr::new(10, 244, 2, 1));
        assert_eq!(pod.mac(), "0a:58:0a:f4:02:0b");
        let web = t.service("web").unwrap_or_else(|| panic!("no web"));
        assert_eq!(web.endpoints, ["n2-a", "n3-a"]);
        assert_eq!(t.serve_of(pod), ["tcp:8080"]);
    }

    #[test]
    fn a_pod_mac_source_is_model_by_default_and_attached_or_none_post_no_mac() {
        let t = three_nodes();
        let (_, pod) = t.pod("n1-a").unwrap_or_else(|| panic!("no n1-a"));
        assert_eq!(pod.mac_source, MacSource::Model);
        assert_eq!(pod.model_mac(), pod.mac());
        let text = include_str!("../lab/three-nodes.toml")
            .replace(
                r#"{ name = "n2-a", ip = "10.244.2.11" }"#,
                r#"{ name = "n2-a", ip = "10.244.2.11", mac-source = "attached" }"#,
            )
            .replace(
                r#"{ name = "n3-a", ip = "10.244.3.11" }"#,
                r#"{ name = "n3-a", ip = "10.244.3.11", mac-source = "none" }"#,
            );
        let t = Topology::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        for (name, source) in [("n2-a", MacSource::Attached), ("n3-a", MacSource::None)] {
            let (_, pod) = t.pod(name).unwrap_or_else(|| panic!("no {name}"));
            assert_eq!(pod.mac_source, source);
            assert_eq!(pod.model_mac(), "");
            assert!(pod.mac().starts_with("0a:58:0a:f4:0"), "{}", pod.mac());
        }
        let bad = text.replace(r#"mac-source = "none""#, r#"mac-source = "guess""#);
        let err = Topology::parse(&bad).err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("guess")),
            "{err:?}"
        );
    }

    #[test]
    fn a_topology_with_a_pod_outside_its_node_cidr_is_refused() {
        let text = include_str!("../lab/three-nodes.toml").replace("10.244.2.11", "10.244.9.11");
        let err = Topology::parse(&text).err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("n2-a")),
            "{err:?}"
        );
    }

    #[test]
    fn an_ipv6_only_underlay_needs_an_encapsulation_and_every_node_s_address6() {
        let base = include_str!("../lab/three-nodes.toml");
        let with = |encap: &str| {
            base.replace(
                "[underlay]\n",
                &format!("[underlay]\nipv6-only = true\nencap = \"{encap}\"\n"),
            )
        };
        let err = Topology::parse(&with("none")).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("ipv6-only needs an encapsulation")),
            "{err:?}"
        );
        let err = Topology::parse(&with("geneve"))
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("node n1: underlay.ipv6-only needs")),
            "{err:?}"
        );
    }

    #[test]
    fn an_ipv6_only_node_needs_an_encapsulation_and_its_address6() {
        let base = include_str!("../lab/three-nodes.toml");
        let n2 = "name = \"n2\"\n";
        assert!(base.contains(n2));
        let only = base.replace(n2, &format!("{n2}ipv6-only = true\n"));
        let err = Topology::parse(&only).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("node n2: ipv6-only needs")),
            "{err:?}"
        );
        let encapsulated = only.replace("[underlay]\n", "[underlay]\nencap = \"geneve\"\n");
        let err = Topology::parse(&encapsulated).err().map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("node n2: ipv6-only needs")),
            "{err:?}"
        );
        let t = Topology::parse(
            &encapsulated.replace(n2, &format!("{n2}address6 = \"fd00:50::12\"\n")),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let n2 = &t.nodes[1];
        assert_eq!(
            n2.model_ips(false),
            [IpAddr::V6("fd00:50::12".parse().unwrap())]
        );
        assert_eq!(
            t.nodes[0].model_ips(false),
            [IpAddr::V4(t.nodes[0].address)]
        );
    }

    #[test]
    fn group_endpoints_are_read_from_reg3_loads() {
        let dump = "OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):\n \
             group_id=1,type=select,bucket=actions=set_field:0xaf4020b->reg3,\
             set_field:0x1f90->reg4,resubmit(,41),bucket=actions=set_field:0xaf4030b->reg3,\
             set_field:0x1f90->reg4,resubmit(,41)\n";
        assert_eq!(
            parse_group_endpoints(dump),
            [BTreeSet::from([
                IpAddr::V4(Ipv4Addr::new(10, 244, 2, 11)),
                IpAddr::V4(Ipv4Addr::new(10, 244, 3, 11))
            ])]
        );
        let dump6 = " group_id=2,type=select,bucket=actions=set_field:0xfd000010->reg12,\
             set_field:0x2440002->reg13,set_field:0->reg14,set_field:0x11->reg15,\
             set_field:0x1f90->reg4,resubmit(,41)\n";
        assert_eq!(
            parse_group_endpoints(dump6),
            [BTreeSet::from(["fd00:10:244:2::11"
                .parse::<IpAddr>()
                .unwrap()])]
        );
    }
}
