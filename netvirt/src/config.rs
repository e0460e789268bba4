//! Controller-wide settings that shape the pipeline.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

use crate::model::MacAddr;

/// How traffic between nodes' pods crosses the underlay.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Encap {
    /// Routed by the underlay, unencapsulated: off-node traffic leaves by the uplink to its
    /// next hop, which must route every node's pod CIDR to that node.
    None,
    /// Geneve (UDP 6081) through each node's flow-based tunnel port: the default, as in
    /// Antrea and OVN-Kubernetes.
    #[default]
    Geneve,
    /// VXLAN (UDP 4789) through each node's flow-based tunnel port.
    Vxlan,
}

impl Encap {
    /// The UDP port the encapsulation arrives on, if any.
    pub fn udp_port(self) -> Option<u16> {
        match self {
            Encap::None => None,
            Encap::Geneve => Some(6081),
            Encap::Vxlan => Some(4789),
        }
    }

    /// `none`, `geneve` or `vxlan`.
    pub fn name(self) -> &'static str {
        match self {
            Encap::None => "none",
            Encap::Geneve => "geneve",
            Encap::Vxlan => "vxlan",
        }
    }
}

impl std::str::FromStr for Encap {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Encap::None),
            "geneve" => Ok(Encap::Geneve),
            "vxlan" => Ok(Encap::Vxlan),
            other => Err(format!(
                "encapsulation `{other}`: expected geneve, vxlan or none"
            )),
        }
    }
}

/// Settings shared by every node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// The IPv4 service CIDR; the node host routes it into `br-int` through the gateway port.
    pub service_cidr: Ipv4Net,
    /// The IPv6 service CIDR of a dual-stack or IPv6 cluster, routed the same way. Without
    /// one, IPv6 service addresses are still served, but the host does not route them into
    /// `br-int` and a new connection to an IPv6 address no service owns is not refused.
    pub service_cidr6: Option<Ipv6Net>,
    /// The virtual gateway's MAC, answered by the ARP responder and used as the routed
    /// source MAC.
    pub gateway_mac: MacAddr,
    /// The virtual loopback IP that hairpin traffic is SNATed to.
    pub loopback_ip: Ipv4Addr,
    /// The virtual loopback IPv6 address that IPv6 hairpin traffic is SNATed to.
    pub loopback_ip6: Ipv6Addr,
    /// The address of the service-gateway port on the node's host side.
    pub gateway_host_ip: Ipv4Addr,
    /// The IPv6 address of the service-gateway port on the node's host side.
    pub gateway_host_ip6: Ipv6Addr,
    /// The conntrack zone in which every connection is committed and services are DNATed.
    pub service_zone: u16,
    /// The conntrack zone of hairpin SNAT.
    pub hairpin_zone: u16,
    /// The weight of an endpoint on the node itself; remote endpoints weigh 1.
    pub local_endpoint_weight: u16,
    /// The NodePort range, inclusive.
    pub node_port_range: (u16, u16),
    /// The most buckets in one select group; a service port with more endpoints is split
    /// over chained groups (`chain.rs`). At most [`crate::chain::GROUP_BUCKETS_MAX`]; lower
    /// values serve tests and demos.
    pub group_buckets_max: usize,
    /// How pod traffic crosses to other nodes.
    pub encap: Encap,
    /// The refusal meter's rate, in packets/s: at most this many refused connection attempts
    /// a second reach the controller from one node; the switch drops the rest
    /// (`crate::meter`). At least 1.
    pub refuse_rate: u32,
    /// The refusal meter's burst, in packets. At least 1.
    pub refuse_burst: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            service_cidr: Ipv4Net::new(Ipv4Addr::new(10, 96, 0, 0), 12).unwrap_or_default(),
            service_cidr6: None,
            gateway_mac: MacAddr([0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x01]),
            loopback_ip: Ipv4Addr::new(169, 254, 0, 253),
            loopback_ip6: Ipv6Addr::new(0xfd00, 0x5356, 0, 0, 0, 0, 0, 0xfd),
            gateway_host_ip: Ipv4Addr::new(169, 254, 0, 1),
            gateway_host_ip6: Ipv6Addr::new(0xfd00, 0x5356, 0, 0, 0, 0, 0, 1),
            service_zone: 65000,
            hairpin_zone: 65001,
            local_endpoint_weight: 1,
            node_port_range: (30000, 32767),
            group_buckets_max: crate::chain::GROUP_BUCKETS_MAX,
            encap: Encap::Geneve,
            refuse_rate: 1000,
            refuse_burst: 1000,
        }
    }
}
