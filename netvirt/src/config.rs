//! Controller-wide settings that shape the pipeline.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use crate::model::MacAddr;

/// Settings shared by every node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// The service CIDR; the node host routes it into `br-int` through the gateway port.
    pub service_cidr: Ipv4Net,
    /// The virtual gateway's MAC, answered by the ARP responder and used as the routed
    /// source MAC.
    pub gateway_mac: MacAddr,
    /// The virtual loopback IP that hairpin traffic is SNATed to.
    pub loopback_ip: Ipv4Addr,
    /// The address of the service-gateway port on the node's host side.
    pub gateway_host_ip: Ipv4Addr,
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            service_cidr: Ipv4Net::new(Ipv4Addr::new(10, 96, 0, 0), 12).unwrap_or_default(),
            gateway_mac: MacAddr([0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x01]),
            loopback_ip: Ipv4Addr::new(169, 254, 0, 253),
            gateway_host_ip: Ipv4Addr::new(169, 254, 0, 1),
            service_zone: 65000,
            hairpin_zone: 65001,
            local_endpoint_weight: 1,
            node_port_range: (30000, 32767),
            group_buckets_max: crate::chain::GROUP_BUCKETS_MAX,
        }
    }
}
