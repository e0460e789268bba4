//! The render: `desired(node, model, config, bindings)`, the flows and groups one node's
//! `br-int` should hold. Pure and deterministic (no I/O, no clock): the same inputs give the
//! same state, ids and cookies.
//!
//! [`desired`] renders the node's own part ([`render_base`]) and each service
//! ([`render_service`]) and merges them, straight through. The incremental engine
//! (`crate::shards`) keeps the same parts per owner and updates only what a change touches; it
//! builds on this module, never the reverse, and `netvirt/tests/shards.rs` checks it against
//! [`desired`].
//!
//! By concern: `skeleton` (every table's defaults, conntrack, the service CIDR's refusal,
//! output), `pods` (pods and their namespaces' ELANs), `node` (gateway port, uplink, tunnel,
//! masquerade), `plans` (a service's scopes, addresses and backends on the node), `services`
//! (table 40, select groups, table 41's DNAT), `affinity` (tables 43 and 44), `chained` (big
//! services, table 42), and `build` (small match and action builders).
//!
//! Flow count is O(service addresses + endpoints + local pods): each endpoint's DNAT is one
//! flow shared by every service that uses it, and a service's buckets only load the endpoint
//! into registers.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use openflow::action::{Multipath, OFPP_IN_PORT16, Resubmit};
use openflow::ct::{Ct, CtZone, Nat};
use openflow::instruction::Instruction;
use openflow::learn::{Learn, LearnDst, LearnSpec, LearnSrc, NX_LEARN_F_DELETE_LEARNED};
use openflow::subfield::Subfield;
use openflow::{Action, Field, Match, OxmField};

use crate::chain;
use crate::config::Config;
use crate::flow::{Bucket, FlowEntry, FlowKey, GroupEntry, GroupKind};
use crate::ids;
use crate::model::{
    Endpoint, MacAddr, Model, Node, Protocol, Service, ServicePort, SessionAffinity, TrafficPolicy,
};
use crate::pipeline::{REJECT_USERDATA, cookie, ct_state, group, meter, reg, table};
use crate::plan::State;
use crate::resolve::{Backend, service_backends};

/// The switch-side facts about a node that OVSDB supplies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeBindings {
    /// OpenFlow port of each OVS Interface, by its `external_ids:iface-id`.
    pub ofports: BTreeMap<String, u32>,
    /// The MAC of each OVS Interface that says it (`external_ids:attached-mac`, the convention
    /// of OVN, OpenStack and libvirt), by its `external_ids:iface-id`.
    pub macs: BTreeMap<String, MacAddr>,
    /// The service-gateway port, once it exists.
    pub gateway: Option<GatewayPort>,
    /// The uplink to the node's network, if any.
    pub uplink: Option<Uplink>,
    /// The flow-based tunnel port (`--encap geneve|vxlan`), once it exists.
    pub tunnel: Option<u32>,
    /// The MAC of the bridge's own (LOCAL) port, which holds the node's underlay address
    /// when pods' traffic is encapsulated: tunnelled packets for the node go to it.
    pub local_mac: Option<MacAddr>,
}

/// The node's service-gateway port: an internal port whose host side reaches services.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GatewayPort {
    /// Its OpenFlow port.
    pub ofport: u32,
    /// Its MAC address.
    pub mac: MacAddr,
}

/// The port towards the node's network, and the next hop beyond it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Uplink {
    /// Its OpenFlow port.
    pub ofport: u32,
    /// Its own MAC (the interface's `mac_in_use`): the node answers ARP on the underlay with
    /// it and sends from it, so nodes sharing one L2 segment are told apart.
    pub mac: MacAddr,
    /// The MAC address that off-node traffic is sent to.
    pub next_hop_mac: MacAddr,
}

/// A node's desired flows and groups, plus what a user needs to read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredState {
    /// Flows and groups.
    pub state: State<FlowKey, FlowEntry, GroupEntry>,
    /// Each service port's group and backends, by `namespace/name:port/protocol`.
    pub services: BTreeMap<String, ServicePortState>,
    /// Inputs that could not all be honoured, e.g. two services on one address and port, and
    /// flows the render could not build (a match field without its prerequisite).
    pub conflicts: Vec<String>,
    /// What the node answers on each health-check node port ([`crate::health_answer`]).
    pub health: BTreeMap<u16, crate::health::HealthCheck>,
}

/// How one service port is programmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortState {
    /// Its select group; a big service's chained groups (`chain.rs`); none when it has no
    /// backend and refuses connections.
    pub groups: Vec<ServiceGroup>,
    /// Its cookie (the flows that steer to the group or refuse).
    pub cookie: u64,
    /// All its backends, sorted by address and port; `groups` gives the bucket order.
    pub backends: Vec<Backend>,
}

/// One select group of a service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceGroup {
    /// Group id.
    pub id: u32,
    /// Its backends, in bucket order.
    pub backends: Vec<Backend>,
}

mod affinity;
mod build;
mod chained;
mod node;
mod plans;
mod pods;
mod services;
mod skeleton;

use affinity::*;
use build::*;
use node::{set_tunnel_destination, tunnel_destination};
use services::*;

pub(crate) use crate::family::{Family, addr_value};
pub use affinity::affinity_idle_timeout;
pub use plans::ANY_PORT;
pub(crate) use plans::{PortPlan, Scope, plan_names, renders_alike_on_every_node, service_plans};
pub use pods::elan_ids;

/// Computes `node`'s desired state: the node's own part, then every service in key order,
/// with group ids allocated over all of them, merged. A flow two parts render with different
/// actions is kept as the first part rendered it, and reported.
pub fn desired(
    node: &Node,
    model: &Model,
    config: &Config,
    bindings: &NodeBindings,
) -> DesiredState {
    let mut out = render_base(node, model, config, bindings);
    let plans: Vec<(&Service, &[Endpoint], Vec<PortPlan>)> = model
        .services
        .iter()
        .map(|(key, service)| {
            let endpoints = model.endpoints_of(key);
            (
                service,
                endpoints,
                service_plans(service, endpoints, node, config),
            )
        })
        .collect();
    let names: Vec<Arc<str>> = plans.iter().flat_map(|(_, _, p)| plan_names(p)).collect();
    let mut ids = ids::Allocator::new(group::SERVICE_MAX);
    ids.update(std::iter::empty(), &names);
    for (service, endpoints, plans) in plans {
        let part = render_service(service, endpoints, node, plans, ids.ids(), config, bindings);
        merge(&mut out, part);
    }
    out
}

/// Adds `part` to `out`: its flows where `out` has none for the key (a different one already
/// there is a conflict, reported), its groups, services and conflicts.
fn merge(out: &mut DesiredState, part: DesiredState) {
    for (key, entry) in part.state.flows {
        match out.state.flows.entry(key) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(entry);
            }
            std::collections::btree_map::Entry::Occupied(o) => {
                if o.get().instructions != entry.instructions {
                    out.conflicts
                        .push(collision_message(o.key(), o.get(), &entry));
                }
            }
        }
    }
    out.state.groups.extend(part.state.groups);
    out.services.extend(part.services);
    out.conflicts.extend(part.conflicts);
    // The port's flow of the first service decides (a second one collides above).
    for (port, check) in part.health {
        out.health.entry(port).or_insert(check);
    }
}

/// What is said of a flow two parts render with different actions.
pub(crate) fn collision_message(key: &FlowKey, kept: &FlowEntry, dropped: &FlowEntry) -> String {
    format!(
        "table {} priority {}: two flows with one match; keeping cookie {:#x}, dropping \
         cookie {:#x}",
        key.table, key.priority, kept.cookie, dropped.cookie
    )
}

/// The node's own part of its desired state: the pipeline's skeleton, its pods, its gateway
/// port and uplink. Services are rendered one by one by [`render_service`].
pub(crate) fn render_base(
    node: &Node,
    model: &Model,
    config: &Config,
    bindings: &NodeBindings,
) -> DesiredState {
    let mut b = Builder::new(config);
    b.skeleton();
    let elans = elan_ids(model);
    b.pods(node, model, bindings, &elans);
    b.node_ports(node, bindings);
    b.tunnel(node, model, bindings);
    b.out
}

/// The virtual gateway's IP: the first address of the node's IPv4 pod CIDR.
pub fn virtual_gateway_ip(node: &Node) -> Option<Ipv4Addr> {
    node.pod_cidr4().and_then(|net| net.hosts().next())
}

/// The virtual gateway's IPv6 address: the first address after the network's of the node's
/// IPv6 pod CIDR (`fd00:10:244:1::1` in `fd00:10:244:1::/64`).
pub fn virtual_gateway_ip6(node: &Node) -> Option<Ipv6Addr> {
    let net = node.pod_cidr6()?;
    (net.prefix_len() < 128).then(|| Ipv6Addr::from(u128::from(net.network()) + 1))
}

/// The virtual gateway's addresses, one per family of the node's pod CIDRs.
pub fn virtual_gateways(node: &Node) -> Vec<IpAddr> {
    virtual_gateway_ip(node)
        .map(IpAddr::V4)
        .into_iter()
        .chain(virtual_gateway_ip6(node).map(IpAddr::V6))
        .collect()
}

struct Builder<'a> {
    out: DesiredState,
    config: &'a Config,
}

impl<'a> Builder<'a> {
    fn new(config: &'a Config) -> Self {
        Builder {
            out: DesiredState::default(),
            config,
        }
    }

    fn flow(
        &mut self,
        table: u8,
        priority: u16,
        matches: Match,
        cookie: u64,
        instructions: Vec<Instruction>,
    ) -> bool {
        // Every match is checked where it is built, so the encoder never meets one the switch
        // would refuse: a field without its prerequisite is a render bug, reported here.
        let matches = match matches.checked() {
            Ok(m) => m,
            Err(field) => {
                self.out.conflicts.push(format!(
                    "table {table} priority {priority}: cookie {cookie:#x}: `{field}` lacks its \
                     prerequisite; flow dropped"
                ));
                return false;
            }
        };
        let key = FlowKey::new(table, priority, &matches);
        let entry = FlowEntry::new(cookie, instructions);
        use std::collections::btree_map::Entry;
        // One descent of the map, where a lookup and an insert took two.
        match self.out.state.flows.entry(key) {
            Entry::Occupied(existing) => {
                let existing = existing.get();
                if existing.instructions != entry.instructions {
                    self.out.conflicts.push(format!(
                        "table {table} priority {priority}: two flows with one match; keeping cookie {:#x}, \
                         dropping cookie {cookie:#x}",
                        existing.cookie
                    ));
                }
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(entry);
                true
            }
        }
    }
}

/// One service's part of the desired state, with the group ids allocated over all services.
pub(crate) fn render_service(
    service: &Service,
    endpoints: &[Endpoint],
    node: &Node,
    plans: Vec<PortPlan>,
    ids: &crate::ids::Ids,
    config: &Config,
    bindings: &NodeBindings,
) -> DesiredState {
    let mut b = Builder::new(config);
    b.service(service, plans, ids, bindings);
    b.health_check(service, endpoints, node);
    b.out
}

#[cfg(test)]
mod tests;
