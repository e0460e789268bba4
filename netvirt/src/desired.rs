//! `desired(node, model, config, bindings)`: the flows and groups one node's `br-int` should
//! hold. Pure and deterministic: the same inputs give the same state, ids and cookies.
//!
//! Flow count is O(service addresses + endpoints + local pods): each endpoint's DNAT is one
//! flow shared by every service that uses it, and a service's buckets only load the endpoint
//! into registers.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use openflow::action::{Multipath, OFPP_IN_PORT16, Resubmit};
use openflow::ct::{Ct, CtZone, Nat};
use openflow::instruction::Instruction;
use openflow::learn::{Learn, LearnDst, LearnSpec, LearnSrc, NX_LEARN_F_DELETE_LEARNED};
use openflow::subfield::Subfield;
use openflow::{Action, Field, Match, OxmField};

use crate::chain::{self, V4Backend};
use crate::config::Config;
use crate::flow::{Bucket, FlowEntry, FlowKey, GroupEntry, GroupKind};
use crate::ids;
use crate::model::{
    MacAddr, Model, Node, Protocol, Service, ServicePort, SessionAffinity, TrafficPolicy,
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

/// Computes `node`'s desired state.
pub fn desired(
    node: &Node,
    model: &Model,
    config: &Config,
    bindings: &NodeBindings,
) -> DesiredState {
    let mut shards = crate::shards::Shards::default();
    shards.update(node, model, config, bindings);
    shards.materialize()
}

/// The node's own part of its desired state: the pipeline's skeleton, its pods, its gateway
/// port and uplink. Services are rendered one by one by [`render_service`].
pub(crate) fn render_base(
    node: &Node,
    model: &Model,
    config: &Config,
    bindings: &NodeBindings,
) -> DesiredState {
    let mut b = Builder {
        out: DesiredState::default(),
        config,
    };
    b.skeleton();
    let gateway_ip = virtual_gateway_ip(node);
    let elans = elan_ids(model);
    b.pods(node, model, bindings, &elans);
    for ip in node.ips.iter().filter(|ip| ip.is_ipv6()) {
        b.out.conflicts.push(format!(
            "node {}: IPv6 address {ip} gets no node ports (svcflow programs IPv4 only for now)",
            node.name
        ));
    }
    b.node_ports(node, bindings, gateway_ip);
    b.tunnel(node, model, bindings);
    b.out
}

/// The virtual gateway's IP: the first address of the node's pod CIDR.
pub fn virtual_gateway_ip(node: &Node) -> Option<Ipv4Addr> {
    match node.pod_cidr {
        Some(ipnet::IpNet::V4(net)) => net.hosts().next(),
        _ => None,
    }
}

/// ELAN ids of every namespace that has pods, explicit ones first.
pub fn elan_ids(model: &Model) -> BTreeMap<String, u32> {
    let mut names: BTreeSet<&str> = model.pods.values().map(|p| p.namespace.as_str()).collect();
    let mut ids = BTreeMap::new();
    for ns in model.namespaces.values() {
        names.remove(ns.name.as_str());
        ids.insert(ns.name.clone(), ns.elan);
    }
    let taken: BTreeSet<u32> = ids.values().copied().collect();
    let mut allocated = ids::allocate(names, group::ELAN_MAX);
    // An allocated id may collide with an explicit one: move it past the explicit ids.
    for id in allocated.values_mut() {
        while taken.contains(id) {
            *id = if *id >= group::ELAN_MAX { 1 } else { *id + 1 };
        }
    }
    ids.extend(allocated);
    ids
}

struct Builder<'a> {
    out: DesiredState,
    config: &'a Config,
}

impl Builder<'_> {
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
        let key = FlowKey {
            table,
            priority,
            matches,
        };
        if let Some(existing) = self.out.state.flows.get(&key) {
            if existing.instructions != instructions {
                self.out.conflicts.push(format!(
                    "table {table} priority {priority}: two flows with one match; keeping cookie {:#x}, \
                     dropping cookie {cookie:#x}",
                    existing.cookie
                ));
            }
            return false;
        }
        self.out.state.flows.insert(
            key,
            FlowEntry {
                cookie,
                instructions,
            },
        );
        true
    }

    fn skeleton(&mut self) {
        let c = cookie::make(cookie::SKELETON, 0);
        let cfg = self.config;
        self.flow(table::CLASSIFIER, 0, Match::new(), c, vec![]);
        // ARP: proxy-answer every request from a local port with the gateway MAC, so all IP
        // traffic is routed by the L3 table; IP goes on to conntrack; the rest is dropped
        // unless an ELAN flood below takes it.
        self.flow(
            table::ARP,
            100,
            arp_request(),
            c,
            apply(arp_proxy_reply(cfg.gateway_mac)),
        );
        self.flow(table::ARP, 50, ip(), c, vec![goto(table::UNSNAT)]);
        self.flow(table::ARP, 0, Match::new(), c, vec![]);
        // Hairpin replies are un-SNATed in their own zone before anything else.
        let loopback = ip().with(Field::Ipv4Dst, u32::from(cfg.loopback_ip));
        self.flow(
            table::UNSNAT,
            100,
            loopback,
            c,
            apply(vec![ct(
                cfg.hairpin_zone,
                table::CONNTRACK,
                false,
                Some(Nat::default()),
            )]),
        );
        self.flow(
            table::UNSNAT,
            0,
            Match::new(),
            c,
            vec![goto(table::CONNTRACK)],
        );
        self.flow(
            table::CONNTRACK,
            0,
            ip(),
            c,
            apply(vec![ct(
                cfg.service_zone,
                table::CT_STATE,
                false,
                Some(Nat::default()),
            )]),
        );
        self.flow(
            table::CT_STATE,
            200,
            ct_match(ct_state::INV | ct_state::TRK, ct_state::INV | ct_state::TRK),
            c,
            vec![],
        );
        self.flow(
            table::CT_STATE,
            100,
            ct_match(ct_state::NEW | ct_state::TRK, ct_state::NEW | ct_state::TRK),
            c,
            vec![goto(table::SERVICE)],
        );
        self.flow(
            table::CT_STATE,
            0,
            Match::new(),
            c,
            vec![goto(table::HAIRPIN)],
        );
        // Every other new connection is committed, so its replies are +est, not +inv.
        self.flow(
            table::SERVICE,
            0,
            ip(),
            c,
            apply(vec![ct(cfg.service_zone, table::HAIRPIN, true, None)]),
        );
        // Except in the service CIDR: a new connection there that no service port takes (an
        // address no service owns, or a port a service address does not serve) is refused at
        // once, as kube-proxy's nftables mode refuses it, instead of leaving by the uplink to
        // time out. (A /0 "CIDR" would refuse everything; it is not one.)
        let cidr = cfg.service_cidr;
        let refuse = cookie::make(cookie::REFUSE, 0);
        if cidr.prefix_len() > 0 {
            let (net, mask) = (u32::from(cidr.network()), u32::from(cidr.netmask()));
            for protocol in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
                let m = if mask == u32::MAX {
                    l4(protocol).with(Field::Ipv4Dst, net)
                } else {
                    l4(protocol).with_masked(Field::Ipv4Dst, net, mask)
                };
                self.flow(table::SERVICE, 1, m, refuse, apply(vec![reject_action()]));
            }
        }
        self.flow(table::HAIRPIN, 0, Match::new(), c, vec![goto(table::L3)]);
        // Clearing in_port lets hairpin traffic leave by the port it came in on.
        self.flow(
            table::OUTPUT,
            0,
            Match::new(),
            c,
            apply(vec![
                Action::RegLoad {
                    dst: Subfield::whole(Field::InPort),
                    value: 0,
                },
                // `ovs-ofctl` parses `output:REG` with max_len 65535 (it prints no max_len),
                // so the same flow loaded from text compares equal.
                Action::OutputReg {
                    src: Subfield::whole(reg::OUT_PORT),
                    max_len: u16::MAX,
                },
            ]),
        );
    }

    fn pods(
        &mut self,
        node: &Node,
        model: &Model,
        bindings: &NodeBindings,
        elans: &BTreeMap<String, u32>,
    ) {
        let gw_mac = self.config.gateway_mac;
        let mut members: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for pod in model.pods.values().filter(|p| p.node == node.name) {
            let (Some(&ofport), Some(&elan)) = (
                bindings.ofports.get(&pod.iface_id),
                elans.get(&pod.namespace),
            ) else {
                continue;
            };
            let c = cookie::make(cookie::POD, ofport);
            members.entry(elan).or_default().insert(ofport);
            for ip in pod.ips.iter().filter(|ip| ip.is_ipv6()) {
                self.out.conflicts.push(format!(
                    "pod {}/{}: IPv6 address {ip} is not routed (svcflow programs IPv4 only \
                     for now)",
                    pod.namespace, pod.name
                ));
            }
            self.flow(
                table::CLASSIFIER,
                100,
                in_port(ofport),
                c,
                vec![
                    Instruction::ApplyActions(vec![set(reg::ELAN, elan)]),
                    goto(table::ARP),
                ],
            );
            // The model's MAC, else the interface's `attached-mac`, else the switch learns it
            // from the pod's own ARP (`learn_mac`).
            let mac = pod
                .mac
                .or_else(|| bindings.macs.get(&pod.iface_id).copied());
            if mac.is_none() {
                for ip in pod.ips.iter().filter_map(v4) {
                    let arp = in_port(ofport)
                        .with(Field::EthType, 0x0806u16)
                        .with(Field::ArpSpa, u32::from(ip));
                    self.flow(
                        table::CLASSIFIER,
                        110,
                        arp,
                        c,
                        vec![
                            Instruction::ApplyActions(vec![
                                set(reg::ELAN, elan),
                                learn_mac(ofport),
                            ]),
                            goto(table::ARP),
                        ],
                    );
                }
            }
            for ip in pod.ips.iter().filter_map(v4) {
                let hairpin = self::ip()
                    .with(Field::Ipv4Src, u32::from(ip))
                    .with(Field::Ipv4Dst, u32::from(ip));
                let snat = Nat::snat(self.config.loopback_ip);
                self.flow(
                    table::HAIRPIN,
                    100,
                    hairpin,
                    c,
                    apply(vec![ct(
                        self.config.hairpin_zone,
                        table::L3,
                        true,
                        Some(snat),
                    )]),
                );
                let instructions = match mac {
                    Some(mac) => route(gw_mac, mac, ofport),
                    None => route_learned(gw_mac, ofport),
                };
                self.flow(table::L3, 100, to_ip(ip), c, instructions);
            }
        }
        if let Some(gw) = bindings.gateway {
            for ports in members.values_mut() {
                ports.insert(gw.ofport);
            }
        }
        // With the overlay, an ELAN spans the cluster: its flood also reaches, through the
        // tunnel with the ELAN as the tunnel id, every other node that has pods of it.
        let mut remote: BTreeMap<u32, BTreeSet<Ipv4Addr>> = BTreeMap::new();
        if let (Some(_), Some(_)) = (self.config.encap.udp_port(), bindings.tunnel) {
            for pod in model.pods.values().filter(|p| p.node != node.name) {
                let (Some(&elan), Some(ip)) = (
                    elans.get(&pod.namespace),
                    model
                        .nodes
                        .get(&pod.node)
                        .and_then(|n| n.ips.iter().find_map(v4)),
                ) else {
                    continue;
                };
                if members.contains_key(&elan) {
                    remote.entry(elan).or_default().insert(ip);
                }
            }
        }
        for (elan, ports) in members {
            let local: Vec<Bucket> = ports
                .into_iter()
                .map(|port| Bucket {
                    weight: 0,
                    actions: vec![output(port)],
                })
                .collect();
            let mut buckets = local.clone();
            if let (Some(tunnel), Some(ips)) = (bindings.tunnel, remote.get(&elan)) {
                buckets.extend(ips.iter().map(|ip| Bucket {
                    weight: 0,
                    actions: vec![
                        set(Field::TunId, u64::from(elan)),
                        set(Field::TunDst, u32::from(*ip)),
                        output(tunnel),
                    ],
                }));
                // What came out of the tunnel floods only here.
                let id = group::ELAN_LOCAL_BASE | elan;
                self.out.state.groups.insert(
                    id,
                    GroupEntry {
                        kind: GroupKind::All,
                        buckets: local,
                    },
                );
                let from_tunnel = Match::new()
                    .with(reg::FROM_UPLINK, reg::FROM_TUNNEL)
                    .with(reg::ELAN, elan);
                self.flow(
                    table::ARP,
                    11,
                    from_tunnel,
                    cookie::make(cookie::ELAN, elan),
                    apply(vec![Action::Group(id)]),
                );
            }
            let id = group::ELAN_BASE | elan;
            self.out.state.groups.insert(
                id,
                GroupEntry {
                    kind: GroupKind::All,
                    buckets,
                },
            );
            let flood = Match::new().with(reg::ELAN, elan);
            self.flow(
                table::ARP,
                10,
                flood,
                cookie::make(cookie::ELAN, elan),
                apply(vec![Action::Group(id)]),
            );
        }
    }

    fn node_ports(&mut self, node: &Node, bindings: &NodeBindings, gateway_ip: Option<Ipv4Addr>) {
        let gw_mac = self.config.gateway_mac;
        let c = cookie::make(cookie::NODE, 0);
        if let Some(gw) = bindings.gateway {
            self.flow(
                table::CLASSIFIER,
                100,
                in_port(gw.ofport),
                c,
                vec![goto(table::ARP)],
            );
            self.flow(
                table::L3,
                100,
                to_ip(self.config.gateway_host_ip),
                c,
                route(gw_mac, gw.mac, gw.ofport),
            );
        }
        let Some(uplink) = bindings.uplink else {
            return;
        };
        self.flow(
            table::CLASSIFIER,
            100,
            in_port(uplink.ofport),
            c,
            vec![
                Instruction::ApplyActions(vec![set(reg::FROM_UPLINK, 1u32)]),
                goto(table::ARP),
            ],
        );
        // From the uplink, answer ARP only for the node's own addresses (and, below, service
        // addresses), never proxy for everything.
        let from_uplink = || arp_request().with(reg::FROM_UPLINK, 1u32);
        self.flow(
            table::ARP,
            190,
            Match::new()
                .with(Field::EthType, 0x0806u16)
                .with(reg::FROM_UPLINK, 1u32),
            c,
            vec![],
        );
        for ip in node.ips.iter().filter_map(v4).chain(gateway_ip) {
            let m = from_uplink().with(Field::ArpTpa, u32::from(ip));
            self.flow(table::ARP, 200, m, c, apply(arp_reply_for(uplink.mac, ip)));
        }
        // Off-node destinations leave by the uplink, from its own MAC to its next hop.
        self.flow(
            table::L3,
            10,
            ip(),
            c,
            route(uplink.mac, uplink.next_hop_mac, uplink.ofport),
        );
        self.masquerade(node);
    }

    /// The overlay (`--encap geneve|vxlan`): each other node's pod CIDR is routed into the
    /// flow-based tunnel port with `tun_dst` set to that node's address. The tunnel's
    /// endpoint is the bridge's own (LOCAL) port, which holds the node's address on the
    /// node: the userspace datapath routes the encapsulated packet out of it (into this
    /// pipeline again, which sends it out of the uplink), and decapsulates a packet for the
    /// node when it is output to it. ARP replies from the uplink go there too, so the
    /// datapath learns the next hop. Traffic from the tunnel is in-cluster traffic: it is
    /// not marked as coming from outside (`reg0`), so masquerade and
    /// `externalTrafficPolicy` apply only to what really came from outside.
    fn tunnel(&mut self, node: &Node, model: &Model, bindings: &NodeBindings) {
        let cfg = self.config;
        let (Some(udp), Some(tunnel), Some(uplink), Some(local_mac)) = (
            cfg.encap.udp_port(),
            bindings.tunnel,
            bindings.uplink,
            bindings.local_mac,
        ) else {
            return;
        };
        let Some(node_ip) = node.ips.iter().find_map(v4) else {
            return;
        };
        let c = cookie::make(cookie::NODE, 0);
        self.flow(
            table::CLASSIFIER,
            120,
            in_port(OFPP_LOCAL),
            c,
            apply(vec![output(uplink.ofport)]),
        );
        let encapsulated = in_port(uplink.ofport)
            .with(Field::EthType, 0x0800u16)
            .with(Field::IpProto, 17u8)
            .with(Field::Ipv4Dst, u32::from(node_ip))
            .with(Field::UdpDst, udp);
        self.flow(
            table::CLASSIFIER,
            120,
            encapsulated,
            c,
            apply(vec![
                set(Field::EthDst, mac_value(local_mac)),
                output(OFPP_LOCAL),
            ]),
        );
        let arp_reply = in_port(uplink.ofport)
            .with(Field::EthType, 0x0806u16)
            .with(Field::ArpOp, 2u16);
        self.flow(
            table::CLASSIFIER,
            120,
            arp_reply,
            c,
            apply(vec![output(OFPP_LOCAL)]),
        );
        // Out of the tunnel: the tunnel id is the ELAN (for floods), and the packet is
        // marked as from the tunnel, which is neither from outside nor from a local pod.
        self.flow(
            table::CLASSIFIER,
            100,
            in_port(tunnel),
            c,
            vec![
                Instruction::ApplyActions(vec![
                    Action::RegMove {
                        src: Subfield {
                            field: Field::TunId,
                            ofs: 0,
                            n_bits: 24,
                        },
                        dst: Subfield {
                            field: reg::ELAN,
                            ofs: 0,
                            n_bits: 24,
                        },
                    },
                    set(reg::FROM_UPLINK, reg::FROM_TUNNEL),
                ]),
                goto(table::ARP),
            ],
        );
        for other in model.nodes.values().filter(|n| n.name != node.name) {
            let (Some(ipnet::IpNet::V4(pods)), Some(ip)) =
                (other.pod_cidr, other.ips.iter().find_map(v4))
            else {
                continue;
            };
            let m = ip_net(pods);
            self.flow(
                table::L3,
                50,
                m,
                c,
                vec![
                    Instruction::ApplyActions(vec![
                        set(Field::EthSrc, mac_value(cfg.gateway_mac)),
                        set(Field::EthDst, mac_value(cfg.gateway_mac)),
                        Action::DecNwTtl,
                        set(Field::TunDst, u32::from(ip)),
                        set(reg::OUT_PORT, tunnel),
                    ]),
                    goto(table::OUTPUT),
                ],
            );
        }
    }

    /// Service connections from outside the node (the uplink) or from the node's own host
    /// (the gateway port's address) that land on an endpoint of another node are SNATed to
    /// the node's IP in the hairpin zone, as kube-proxy masquerades them: the endpoint's
    /// replies then come back through this node, which un-SNATs them (table 20) and
    /// un-DNATs them (table 21). Connections to local endpoints keep their source, which is
    /// what `externalTrafficPolicy: Local` promises.
    fn masquerade(&mut self, node: &Node) {
        let Some(node_ip) = node.ips.iter().find_map(v4) else {
            return;
        };
        let cfg = self.config;
        let c = cookie::make(cookie::NODE, 0);
        self.flow(
            table::UNSNAT,
            100,
            ip().with(reg::FROM_UPLINK, 1u32)
                .with(Field::Ipv4Dst, u32::from(node_ip)),
            c,
            apply(vec![ct(
                cfg.hairpin_zone,
                table::CONNTRACK,
                false,
                Some(Nat::default()),
            )]),
        );
        let dnat_forward = ct_state::DNAT | ct_state::RPL | ct_state::TRK;
        let new_service =
            |m: Match| m.with_masked(Field::CtState, ct_state::DNAT | ct_state::TRK, dnat_forward);
        let sources = [
            ip().with(reg::FROM_UPLINK, 1u32),
            ip().with(Field::Ipv4Src, u32::from(cfg.gateway_host_ip)),
        ];
        for from in sources {
            if let Some(ipnet::IpNet::V4(pods)) = node.pod_cidr {
                let local = new_service(from.clone()).with_masked(
                    Field::Ipv4Dst,
                    u32::from(pods.network()),
                    u32::from(pods.netmask()),
                );
                self.flow(table::HAIRPIN, 95, local, c, vec![goto(table::L3)]);
            }
            let snat = Nat::snat(node_ip);
            self.flow(
                table::HAIRPIN,
                90,
                new_service(from),
                c,
                apply(vec![ct(cfg.hairpin_zone, table::L3, true, Some(snat))]),
            );
        }
    }

    /// One service's flows and groups: its table-40 (and table-42) flows, its groups, the
    /// ARP answers for its external addresses, and the DNAT flows of its endpoints.
    fn service(
        &mut self,
        service: &Service,
        plans: Vec<PortPlan>,
        ids: &BTreeMap<std::sync::Arc<str>, u32>,
        bindings: &NodeBindings,
    ) {
        let config = self.config;
        self.ipv6_not_served(service, &plans);
        let mut endpoints: BTreeSet<(Protocol, Ipv4Addr, u16)> = BTreeSet::new();
        // The actions of each port's cluster scope, for in-cluster traffic to its external
        // addresses (below).
        let mut internal_actions: BTreeMap<(Protocol, u16), Vec<Action>> = BTreeMap::new();
        for plan in plans {
            let external_scope = plan.scope == Scope::External;
            let cluster_scope = plan.scope == Scope::ClusterForExternal;
            let PortPlan {
                name,
                scope: _,
                protocol,
                port: service_port,
                addresses,
                found,
                parts,
            } = plan;
            let Some(&id) = ids.get(name.as_str()) else {
                self.out.conflicts.push(format!("{name}: no group id left"));
                continue;
            };
            let c = cookie::make(cookie::SERVICE, id);
            let affinity = match service.session_affinity {
                SessionAffinity::ClientIp { timeout_seconds } if !parts.is_empty() => {
                    Some(timeout_seconds)
                }
                _ => None,
            };
            // With affinity, a bucket comes back to table 44, which learns the choice.
            let bucket_table = if affinity.is_some() {
                table::AFFINITY_LEARN
            } else {
                table::ENDPOINT
            };
            let mut groups = Vec::new();
            for (k, part) in parts.iter().enumerate() {
                let group_id = if parts.len() == 1 {
                    Some(id)
                } else {
                    ids.get(format!("{name}#{k}").as_str()).copied()
                };
                let Some(group_id) = group_id else {
                    self.out
                        .conflicts
                        .push(format!("{name}#{k}: no group id left"));
                    continue;
                };
                self.out
                    .state
                    .groups
                    .insert(group_id, select_group(part, bucket_table));
                endpoints.extend(part.iter().map(|(b, ip)| (protocol, *ip, b.port)));
                groups.push(ServiceGroup {
                    id: group_id,
                    backends: part.iter().map(|(b, _)| *b).collect(),
                });
            }
            let select = match groups.as_slice() {
                [] => vec![reject_action()],
                [one] => vec![Action::Group(one.id)],
                _ => self.chain(&name, id, c, &groups),
            };
            let actions = match affinity {
                Some(timeout) => self.affinity(&name, id, c, timeout, &groups, select),
                // A big service's slot ranges in table 42 are keyed by `reg5`.
                None if groups.len() > 1 => {
                    let mut a = vec![set(reg::SERVICE_ID, id)];
                    a.extend(select);
                    a
                }
                None => select,
            };
            // externalTrafficPolicy Local applies to traffic from outside only: in-cluster
            // traffic (from pods and the node itself) to a port's external addresses goes to
            // every endpoint, as in kube-proxy: to the internal scope's group when that is
            // Cluster, else to a `/cluster` group of its own. The external scope's flows match
            // the uplink (`reg0=1`) at 10 above, and the same addresses without it take those
            // cluster-wide actions.
            let in_cluster = if external_scope {
                internal_actions.get(&(protocol, service_port)).cloned()
            } else if cluster_scope {
                // Every endpoint, for in-cluster traffic to the external addresses only.
                internal_actions.insert((protocol, service_port), actions.clone());
                self.out.services.insert(
                    name,
                    ServicePortState {
                        groups,
                        cookie: c,
                        backends: found,
                    },
                );
                continue;
            } else {
                if service.internal_traffic_policy == TrafficPolicy::Cluster {
                    internal_actions.insert((protocol, service_port), actions.clone());
                }
                None
            };
            let restricted = lb_source_ranges(service);
            for (address, port) in &addresses {
                let m = l4(protocol)
                    .with(Field::Ipv4Dst, u32::from(*address))
                    .with(dst_port_field(protocol), *port);
                let is_lb =
                    *port == service_port && service.lb_ingress_ips.contains(&IpAddr::V4(*address));
                // (priority, match, actions); empty actions drop.
                let mut flows: Vec<(u16, Match, Vec<Action>)> = Vec::new();
                match &restricted {
                    Some(ranges) if is_lb => {
                        // Only the listed sources reach an LB IP; other new connections
                        // are dropped, as kube-proxy's firewall chain drops them.
                        for &(net, mask) in ranges {
                            let allowed = if mask == u32::MAX {
                                m.clone().with(Field::Ipv4Src, net)
                            } else {
                                m.clone().with_masked(Field::Ipv4Src, net, mask)
                            };
                            flows.push((100, allowed, actions.clone()));
                        }
                        flows.push((90, m, Vec::new()));
                    }
                    _ => flows.push((100, m, actions.clone())),
                }
                for (priority, m, flow_actions) in flows {
                    let instructions =
                        |a: Vec<Action>| if a.is_empty() { vec![] } else { apply(a) };
                    match &in_cluster {
                        Some(inside) => {
                            let inside = if flow_actions.is_empty() {
                                Vec::new()
                            } else {
                                inside.clone()
                            };
                            let outside = m.clone().with(reg::FROM_UPLINK, 1u32);
                            self.flow(
                                table::SERVICE,
                                priority + 10,
                                outside,
                                c,
                                instructions(flow_actions),
                            );
                            self.flow(table::SERVICE, priority, m, c, instructions(inside));
                        }
                        None => {
                            self.flow(table::SERVICE, priority, m, c, instructions(flow_actions));
                        }
                    }
                }
            }
            self.out.services.insert(
                name,
                ServicePortState {
                    groups,
                    cookie: c,
                    backends: found,
                },
            );
        }
        // Answer ARP from the uplink for external and LB addresses that land on this node.
        if let Some(uplink) = bindings.uplink {
            let announced: BTreeSet<Ipv4Addr> = service
                .external_ips
                .iter()
                .chain(&service.lb_ingress_ips)
                .filter_map(v4)
                .collect();
            for ip in announced {
                let m = arp_request()
                    .with(reg::FROM_UPLINK, 1u32)
                    .with(Field::ArpTpa, u32::from(ip));
                self.flow(
                    table::ARP,
                    200,
                    m,
                    cookie::make(cookie::NODE, 0),
                    apply(arp_reply_for(uplink.mac, ip)),
                );
            }
        }
        // An endpoint's DNAT flow is the same whichever service renders it, so services that
        // share an endpoint share the flow.
        for (protocol, ip, port) in endpoints {
            let m = l4(protocol)
                .with(reg::ENDPOINT_IP, u32::from(ip))
                .with(reg::ENDPOINT_PORT, u32::from(port));
            let dnat = Nat::dnat(ip, Some(port));
            let c = cookie::make(cookie::ENDPOINT, u32::from(ip));
            self.flow(
                table::ENDPOINT,
                100,
                m,
                c,
                apply(vec![ct(
                    config.service_zone,
                    table::HAIRPIN,
                    true,
                    Some(dnat),
                )]),
            );
        }
    }

    /// Says which of the service's IPv6 addresses and endpoints get no flows: svcflow programs
    /// IPv4 only for now, and an address it skips must not be skipped silently.
    fn ipv6_not_served(&mut self, service: &Service, plans: &[PortPlan]) {
        let addresses: BTreeSet<&IpAddr> = service
            .cluster_ips
            .iter()
            .chain(&service.external_ips)
            .chain(&service.lb_ingress_ips)
            .filter(|ip| ip.is_ipv6())
            .collect();
        for ip in addresses {
            self.out.conflicts.push(format!(
                "{}: IPv6 address {ip} is not served (svcflow programs IPv4 only for now)",
                service.key
            ));
        }
        let endpoints: BTreeSet<IpAddr> = plans
            .iter()
            .flat_map(|p| p.found.iter().map(|b| b.ip))
            .filter(IpAddr::is_ipv6)
            .collect();
        for ip in endpoints {
            self.out.conflicts.push(format!(
                "{}: IPv6 endpoint {ip} is not used (svcflow programs IPv4 only for now)",
                service.key
            ));
        }
    }

    /// Session affinity for one service port (tables 43 and 44), given the actions that
    /// choose an endpoint without it (`select`); returns the actions of its table-40 flows:
    /// note the service port in `reg5`, look the client up in table 43 (a hit loads the
    /// remembered endpoint into `reg3`/`reg4`), then go on in table 44.
    ///
    /// In table 44 an endpoint that still serves the port (one flow per backend) is learned
    /// into table 43 again, which restarts its idle timeout, and DNATed in table 41; anything
    /// else (no remembered endpoint, or one that no longer serves) goes to `select`, whose
    /// buckets come back to table 44 with their choice.
    fn affinity(
        &mut self,
        name: &str,
        id: u32,
        c: u64,
        timeout_seconds: u32,
        groups: &[ServiceGroup],
        select: Vec<Action>,
    ) -> Vec<Action> {
        let idle_timeout = affinity_idle_timeout(timeout_seconds);
        if timeout_seconds > u32::from(u16::MAX) {
            self.out.conflicts.push(format!(
                "{name}: session affinity timeout {timeout_seconds} s is above Open vSwitch's \
                 {} s; clamped to {idle_timeout} s",
                u16::MAX
            ));
        }
        let learn = affinity_learn(id, idle_timeout);
        for g in groups {
            for b in &g.backends {
                let Some(ip) = v4(&b.ip) else { continue };
                // `ip`: the learned flow matches the client's `nw_src`, whose prerequisite
                // the learning flow must match too.
                let m = self::ip()
                    .with(reg::ENDPOINT_IP, u32::from(ip))
                    .with(reg::ENDPOINT_PORT, u32::from(b.port))
                    .with(reg::SERVICE_ID, id);
                self.flow(
                    table::AFFINITY_LEARN,
                    200,
                    m,
                    c,
                    apply(vec![learn.clone(), resubmit(table::ENDPOINT)]),
                );
            }
        }
        self.flow(
            table::AFFINITY_LEARN,
            100,
            Match::new().with(reg::SERVICE_ID, id),
            c,
            apply(select),
        );
        // An explicit miss in table 43 (below the learned flows) for this service port, so a
        // client seen for the first time never takes the switch's table-miss path.
        self.flow(
            table::AFFINITY,
            0,
            Match::new().with(reg::SERVICE_ID, id),
            c,
            vec![],
        );
        vec![
            set(reg::SERVICE_ID, id),
            resubmit(table::AFFINITY),
            resubmit(table::AFFINITY_LEARN),
        ]
    }

    /// The slot-range flows of a big service port split over `groups`, and the actions of
    /// its table-40 flows after `reg5` is set: hash the connection into a slot, then look the
    /// slot up.
    fn chain(&mut self, name: &str, id: u32, c: u64, groups: &[ServiceGroup]) -> Vec<Action> {
        let weights: Vec<u64> = groups
            .iter()
            .map(|g| g.backends.iter().map(|b| u64::from(b.weight)).sum())
            .collect();
        let slots = chain::slots(&weights);
        if !slots.exact {
            self.out.conflicts.push(format!(
                "{name}: total endpoint weight above {}; weights across its {} groups are \
                 approximated",
                chain::SLOTS_MAX,
                groups.len()
            ));
        }
        for (g, ranges) in groups.iter().zip(&slots.ranges) {
            for &(value, mask) in ranges {
                let m = Match::new().with(reg::SERVICE_ID, id);
                let m = if mask == u32::MAX {
                    m.with(reg::CHAIN_SLOT, value)
                } else {
                    m.with_masked(reg::CHAIN_SLOT, value, mask)
                };
                self.flow(table::CHAIN, 100, m, c, apply(vec![Action::Group(g.id)]));
            }
        }
        vec![
            Action::Multipath(Multipath {
                fields: NX_HASH_FIELDS_SYMMETRIC_L4,
                basis: chain::MULTIPATH_BASIS,
                algorithm: NX_MP_ALG_MODULO_N,
                max_link: (slots.n_links - 1) as u16,
                arg: 0,
                dst: Subfield::range(reg::CHAIN_SLOT, 0, 15),
            }),
            resubmit(table::CHAIN),
        ]
    }
}

/// `NX_HASH_FIELDS_SYMMETRIC_L4` (`include/openflow/nicira-ext.h`).
const NX_HASH_FIELDS_SYMMETRIC_L4: u16 = 1;
/// `NX_MP_ALG_MODULO_N` (`include/openflow/nicira-ext.h`).
const NX_MP_ALG_MODULO_N: u16 = 0;

/// A service port while its groups are being planned.
pub(crate) struct PortPlan {
    name: String,
    scope: Scope,
    protocol: Protocol,
    /// The service port's `port` (on cluster, external and LB IPs).
    port: u16,
    addresses: Vec<(Ipv4Addr, u16)>,
    found: Vec<Backend>,
    parts: Vec<Vec<V4Backend>>,
}

/// Plans `service`'s ports on `node`: one per port and traffic scope, named stably
/// (`namespace/name:port/protocol[/external]`), with its backends split into groups.
pub(crate) fn service_plans(
    service: &Service,
    endpoints: &[crate::model::Endpoint],
    node: &Node,
    config: &Config,
) -> Vec<PortPlan> {
    let gateway_ip = virtual_gateway_ip(node);
    let mut plans = Vec::new();
    for port in &service.ports {
        for (scope, policy, addresses) in scopes(service, port, node, gateway_ip) {
            if addresses.is_empty() {
                continue;
            }
            let found = service_backends(service, port, endpoints, node, policy, config);
            let name = format!(
                "{}:{}/{}{}",
                service.key,
                port.port,
                port.protocol.keyword(),
                scope.suffix()
            );
            let v4_backends: Vec<V4Backend> = found
                .iter()
                .filter_map(|b| v4(&b.ip).map(|ip| (*b, ip)))
                .collect();
            let parts =
                chain::partition(&v4_backends, config.group_buckets_max).unwrap_or_else(|| {
                    if v4_backends.is_empty() {
                        Vec::new()
                    } else {
                        vec![v4_backends]
                    }
                });
            plans.push(PortPlan {
                name,
                scope,
                protocol: port.protocol,
                port: port.port,
                addresses,
                found,
                parts,
            });
        }
    }
    plans
}

/// The group names `plans` need ids for: each port's, and a big port's chained groups
/// (`<port name>#<part>`).
pub(crate) fn plan_names(plans: &[PortPlan]) -> Vec<String> {
    let mut names = Vec::new();
    for p in plans {
        names.push(p.name.clone());
        if p.parts.len() > 1 {
            names.extend((0..p.parts.len()).map(|k| format!("{}#{k}", p.name)));
        }
    }
    names
}

/// One service's part of the desired state, with the group ids allocated over all services.
pub(crate) fn render_service(
    service: &Service,
    plans: Vec<PortPlan>,
    ids: &BTreeMap<std::sync::Arc<str>, u32>,
    config: &Config,
    bindings: &NodeBindings,
) -> DesiredState {
    let mut b = Builder {
        out: DesiredState::default(),
        config,
    };
    b.service(service, plans, ids, bindings);
    b.out
}

/// The idle timeout of a learned affinity flow: the service's timeout, clamped to the 16 bits
/// Open vSwitch has (65,535 s; Kubernetes allows up to 86,400 s).
pub fn affinity_idle_timeout(timeout_seconds: u32) -> u16 {
    u16::try_from(timeout_seconds.max(1)).unwrap_or(u16::MAX)
}

/// The priority of flows learned into table 43 (all alike: they never overlap).
const AFFINITY_PRIORITY: u16 = 100;

/// `learn` into table 43: for this service port (`reg5`) and this client (`nw_src`), load the
/// chosen endpoint (`reg3`/`reg4`). `delete_learned` removes a service port's learned flows
/// with its last table-44 flow.
fn affinity_learn(id: u32, idle_timeout: u16) -> Action {
    let whole = Subfield::whole;
    Action::Learn(Learn {
        idle_timeout,
        priority: AFFINITY_PRIORITY,
        cookie: cookie::learned(id),
        flags: NX_LEARN_F_DELETE_LEARNED,
        table_id: table::AFFINITY,
        specs: vec![
            learn_ipv4(),
            learn_spec(32, reg::SERVICE_ID, LearnDst::Match(whole(reg::SERVICE_ID))),
            learn_spec(32, Field::Ipv4Src, LearnDst::Match(whole(Field::Ipv4Src))),
            learn_spec(
                32,
                reg::ENDPOINT_IP,
                LearnDst::Load(whole(reg::ENDPOINT_IP)),
            ),
            learn_spec(
                32,
                reg::ENDPOINT_PORT,
                LearnDst::Load(whole(reg::ENDPOINT_PORT)),
            ),
        ],
        ..Learn::default()
    })
}

/// A `learn` spec: the learned flow matches IPv4 (`eth_type=0x800`).
fn learn_ipv4() -> LearnSpec {
    LearnSpec {
        n_bits: 16,
        src: LearnSrc::Imm(0x0800u16.to_be_bytes().to_vec()),
        dst: LearnDst::Match(Subfield::whole(Field::EthType)),
    }
}

/// A `learn` spec from the whole field `src` (`n_bits` wide) of the packet that learns.
fn learn_spec(n_bits: u16, src: Field, dst: LearnDst) -> LearnSpec {
    LearnSpec {
        n_bits,
        src: LearnSrc::Field(Subfield::whole(src)),
        dst,
    }
}

/// A LoadBalancer's IPv4 source ranges as (network, mask) pairs, or `None` when its LB IPs
/// are open to every source: no IPv4 range is listed (kube-proxy filters the ranges by
/// family), or one of them is `0.0.0.0/0`.
fn lb_source_ranges(service: &Service) -> Option<Vec<(u32, u32)>> {
    let ranges: Vec<(u32, u32)> = service
        .lb_source_ranges
        .iter()
        .filter_map(|net| match net {
            ipnet::IpNet::V4(v4) => {
                let v4 = v4.trunc();
                Some((u32::from(v4.network()), u32::from(v4.netmask())))
            }
            ipnet::IpNet::V6(_) => None,
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if ranges.is_empty() || ranges.iter().any(|&(_, mask)| mask == 0) {
        None
    } else {
        Some(ranges)
    }
}

/// A select group with one bucket per backend: load the endpoint, then go to `next` (table
/// 41 to DNAT, or table 44 to learn an affine choice first).
fn select_group(backends: &[V4Backend], next: u8) -> GroupEntry {
    let buckets = backends
        .iter()
        .map(|(b, ip)| Bucket {
            weight: b.weight,
            actions: vec![
                set(reg::ENDPOINT_IP, u32::from(*ip)),
                set(reg::ENDPOINT_PORT, u32::from(b.port)),
                resubmit(next),
            ],
        })
        .collect();
    GroupEntry {
        kind: GroupKind::Select,
        buckets,
    }
}

/// Sends the packet to the controller, which refuses its connection, through the refusal
/// meter, which drops what exceeds its rate.
fn reject_action() -> Action {
    Action::Controller(openflow::action::Controller {
        max_len: u16::MAX,
        controller_id: 0,
        reason: 1,
        userdata: REJECT_USERDATA.to_vec(),
        pause: false,
        meter_id: Some(meter::REFUSE),
        legacy: false,
    })
}

/// The traffic scopes of a service port, each with its own group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Its cluster IPs, and its external addresses too when both policies agree.
    Internal,
    /// Its external addresses (node ports, external and LB IPs), under the external policy
    /// when it differs from the internal one.
    External,
    /// Every endpoint, for in-cluster traffic to the external addresses when both policies
    /// are `Local` (its addresses get no flows of their own).
    ClusterForExternal,
}

impl Scope {
    /// The suffix of the scope's group name after `namespace/name:port/protocol`.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Scope::Internal => "",
            Scope::External => "/external",
            Scope::ClusterForExternal => "/cluster",
        }
    }
}

/// A scope of a service port, its traffic policy, and its (address, port) pairs.
type Scoped = (Scope, TrafficPolicy, Vec<(Ipv4Addr, u16)>);

/// The address classes of a service port: cluster-internal ones (cluster IPs) follow
/// `internalTrafficPolicy`; the external ones (node ports, external and LB IPs) follow
/// `externalTrafficPolicy`. Returns `(scope, policy, [(address, port)])`.
fn scopes(
    service: &Service,
    port: &ServicePort,
    node: &Node,
    gateway_ip: Option<Ipv4Addr>,
) -> Vec<Scoped> {
    let internal: Vec<(Ipv4Addr, u16)> = service
        .cluster_ips
        .iter()
        .filter_map(v4)
        .map(|ip| (ip, port.port))
        .collect();
    let mut external: Vec<(Ipv4Addr, u16)> = service
        .external_ips
        .iter()
        .chain(&service.lb_ingress_ips)
        .filter_map(v4)
        .map(|ip| (ip, port.port))
        .collect();
    if let Some(node_port) = port.node_port {
        external.extend(
            node.ips
                .iter()
                .filter_map(v4)
                .chain(gateway_ip)
                .map(|ip| (ip, node_port)),
        );
    }
    match (
        service.internal_traffic_policy,
        service.external_traffic_policy,
    ) {
        (TrafficPolicy::Cluster, TrafficPolicy::Cluster) => {
            let mut all = internal;
            all.extend(external);
            vec![(Scope::Internal, TrafficPolicy::Cluster, all)]
        }
        (TrafficPolicy::Local, TrafficPolicy::Cluster) => vec![
            (Scope::Internal, TrafficPolicy::Local, internal),
            (Scope::External, TrafficPolicy::Cluster, external),
        ],
        (TrafficPolicy::Cluster, TrafficPolicy::Local) => vec![
            (Scope::Internal, TrafficPolicy::Cluster, internal),
            (Scope::External, TrafficPolicy::Local, external),
        ],
        // In-cluster traffic to the external addresses needs every endpoint, which neither
        // Local scope has: a `/cluster` scope holds them (its addresses get no flows of
        // their own). It comes before `/external`, which uses its actions.
        (TrafficPolicy::Local, TrafficPolicy::Local) => vec![
            (Scope::Internal, TrafficPolicy::Local, internal),
            (
                Scope::ClusterForExternal,
                TrafficPolicy::Cluster,
                external.clone(),
            ),
            (Scope::External, TrafficPolicy::Local, external),
        ],
    }
}

fn v4(ip: &IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    }
}

fn mac_value(mac: MacAddr) -> u128 {
    mac.0
        .iter()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b))
}

fn ip() -> Match {
    Match::new().with(Field::EthType, 0x0800u16)
}

fn to_ip(ip: Ipv4Addr) -> Match {
    self::ip().with(Field::Ipv4Dst, u32::from(ip))
}

fn l4(protocol: Protocol) -> Match {
    ip().with(Field::IpProto, protocol.ip_proto())
}

fn dst_port_field(protocol: Protocol) -> Field {
    match protocol {
        Protocol::Tcp => Field::TcpDst,
        Protocol::Udp => Field::UdpDst,
        Protocol::Sctp => Field::SctpDst,
    }
}

fn in_port(port: u32) -> Match {
    Match::new().with(Field::InPortOxm, port)
}

fn arp_request() -> Match {
    Match::new()
        .with(Field::EthType, 0x0806u16)
        .with(Field::ArpOp, 1u16)
}

fn ct_match(value: u32, mask: u32) -> Match {
    Match::new().with_masked(Field::CtState, value, mask)
}

fn set(field: Field, value: impl Into<u128>) -> Action {
    Action::SetField(OxmField::exact(field, value))
}

fn output(port: u32) -> Action {
    Action::Output { port, max_len: 0 }
}

fn resubmit(table: u8) -> Action {
    Action::Resubmit(Resubmit {
        in_port: OFPP_IN_PORT16,
        table,
        ct: false,
        legacy: false,
    })
}

fn ct(zone: u16, table: u8, commit: bool, nat: Option<Nat>) -> Action {
    Action::Ct(Ct {
        commit,
        zone: CtZone::Imm(zone),
        table: Some(table),
        nat,
        ..Ct::default()
    })
}

fn goto(table: u8) -> Instruction {
    Instruction::GotoTable(table)
}

fn apply(actions: Vec<Action>) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(actions)]
}

fn moved(src: Field, dst: Field) -> Action {
    Action::RegMove {
        src: Subfield::whole(src),
        dst: Subfield::whole(dst),
    }
}

/// The MAC-swapping head of every ARP reply: back to the requester, from `mac`.
fn arp_reply_head(mac: MacAddr) -> Vec<Action> {
    vec![
        moved(Field::EthSrc, Field::EthDst),
        set(Field::EthSrc, mac_value(mac)),
        set(Field::ArpOp, 2u16),
        moved(Field::ArpSha, Field::ArpTha),
        set(Field::ArpSha, mac_value(mac)),
    ]
}

/// Answers "who has TPA?" with `mac`, whatever TPA is (proxy ARP).
fn arp_proxy_reply(mac: MacAddr) -> Vec<Action> {
    let mut actions = arp_reply_head(mac);
    actions.extend([
        moved(Field::ArpTpa, reg::SCRATCH),
        moved(Field::ArpSpa, Field::ArpTpa),
        moved(reg::SCRATCH, Field::ArpSpa),
        output(OFPP_IN_PORT),
    ]);
    actions
}

/// Answers "who has `ip`?" with `mac`.
fn arp_reply_for(mac: MacAddr, ip: Ipv4Addr) -> Vec<Action> {
    let mut actions = arp_reply_head(mac);
    actions.extend([
        moved(Field::ArpSpa, Field::ArpTpa),
        set(Field::ArpSpa, u32::from(ip)),
        output(OFPP_IN_PORT),
    ]);
    actions
}

/// Routes to a port: from the gateway MAC to `mac`, with the TTL decremented.
fn route(gw_mac: MacAddr, mac: MacAddr, ofport: u32) -> Vec<Instruction> {
    vec![
        Instruction::ApplyActions(vec![
            set(Field::EthSrc, mac_value(gw_mac)),
            set(Field::EthDst, mac_value(mac)),
            Action::DecNwTtl,
            set(reg::OUT_PORT, ofport),
        ]),
        goto(table::OUTPUT),
    ]
}

/// Route to a pod whose MAC the switch learns: as [`route`], with the destination MAC loaded
/// by the flow `learn_mac` put in table 51 (none yet: the frame keeps the gateway MAC, which
/// the pod drops, until the pod's first ARP).
fn route_learned(gw_mac: MacAddr, ofport: u32) -> Vec<Instruction> {
    vec![
        Instruction::ApplyActions(vec![
            set(Field::EthSrc, mac_value(gw_mac)),
            Action::DecNwTtl,
            set(reg::OUT_PORT, ofport),
            resubmit(table::LEARNED_MAC),
        ]),
        goto(table::OUTPUT),
    ]
}

/// `learn` into table 51, from an ARP packet of the pod on `ofport` (whose sender address the
/// classifier checked is the pod's): IPv4 to the sender's address gets the sender's MAC. The
/// learned flow carries the learned-flow mark, so syncs never delete it.
fn learn_mac(ofport: u32) -> Action {
    let whole = Subfield::whole;
    Action::Learn(Learn {
        priority: 100,
        cookie: cookie::learned_mac(ofport),
        table_id: table::LEARNED_MAC,
        specs: vec![
            learn_ipv4(),
            learn_spec(32, Field::ArpSpa, LearnDst::Match(whole(Field::Ipv4Dst))),
            learn_spec(48, Field::ArpSha, LearnDst::Load(whole(Field::EthDst))),
        ],
        ..Learn::default()
    })
}

/// IPv4 to `net`.
fn ip_net(net: ipnet::Ipv4Net) -> Match {
    ip().with_masked(
        Field::Ipv4Dst,
        u32::from(net.network()),
        u32::from(net.netmask()),
    )
}

/// `OFPP_LOCAL` as a 32-bit port: the bridge's own port.
const OFPP_LOCAL: u32 = 0xffff_fffe;

/// `OFPP_IN_PORT` as a 32-bit port.
const OFPP_IN_PORT: u32 = 0xffff_fff8;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::DumpFlow;
    use crate::model::ServiceKey;
    use crate::scenario::Scenario;

    /// A flow whose match lacks a prerequisite is reported and never reaches the state.
    #[test]
    fn a_match_without_its_prerequisite_is_reported_not_rendered() {
        let config = Config::default();
        let mut b = Builder {
            out: DesiredState::default(),
            config: &config,
        };
        let bad = Match::new().with(Field::TcpDst, 80u16);
        assert!(!b.flow(table::SERVICE, 7, bad, 9, vec![]));
        assert!(b.out.state.flows.is_empty());
        assert_eq!(
            b.out.conflicts,
            vec![
                "table 40 priority 7: cookie 0x9: `tcp_dst` lacks its prerequisite; flow dropped"
                    .to_string()
            ]
        );
        assert!(b.flow(
            table::SERVICE,
            7,
            l4(Protocol::Tcp).with(Field::TcpDst, 80u16),
            9,
            vec![]
        ));
    }

    fn scenario() -> Scenario {
        let text = include_str!("../tests/scenarios/service-semantics/input.toml");
        Scenario::parse(text).unwrap()
    }

    fn flows(out: &DesiredState) -> Vec<String> {
        out.state
            .flows
            .iter()
            .map(|(k, v)| DumpFlow(k, v).to_string())
            .collect()
    }

    #[test]
    fn affinity_timeouts_above_16_bits_are_clamped_and_reported() {
        assert_eq!(affinity_idle_timeout(1), 1);
        assert_eq!(affinity_idle_timeout(10_800), 10_800);
        assert_eq!(affinity_idle_timeout(65_535), 65_535);
        assert_eq!(affinity_idle_timeout(65_536), 65_535);
        assert_eq!(affinity_idle_timeout(86_400), 65_535);
        assert_eq!(affinity_idle_timeout(0), 1);
        let mut s = scenario();
        let key = ServiceKey::new("default", "sticky");
        s.model.services.get_mut(&key).unwrap().session_affinity = SessionAffinity::ClientIp {
            timeout_seconds: 86_400,
        };
        let out = desired(&s.node, &s.model, &s.config, &s.bindings);
        assert_eq!(
            out.conflicts,
            [
                "default/sticky:80/tcp: session affinity timeout 86400 s is above Open vSwitch's \
              65535 s; clamped to 65535 s"
            ]
        );
        let learning: Vec<String> = flows(&out)
            .into_iter()
            .filter(|f| f.contains("learn("))
            .collect();
        assert_eq!(learning.len(), 2);
        assert!(learning.iter().all(|f| f.contains("idle_timeout=65535,")));
    }

    #[test]
    fn affinity_over_a_chained_service_learns_after_the_slot_lookup() {
        let mut s = scenario();
        s.config.group_buckets_max = 1;
        let out = desired(&s.node, &s.model, &s.config, &s.bindings);
        assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
        let sticky = &out.services["default/sticky:80/tcp"];
        assert_eq!(sticky.groups.len(), 2);
        let text = flows(&out).join("\n");
        // Table 40 looks the client up; table 44's miss hashes into the slot ranges.
        assert!(text.contains(
            "table=44, priority=100,reg5=0x19c3c29a actions=multipath(symmetric_l4,21334,modulo_n,2,0,NXM_NX_REG1[0..15]),resubmit(,42)"
        ), "{text}");
        for g in &sticky.groups {
            let group = &out.state.groups[&g.id];
            assert!(
                group
                    .buckets
                    .iter()
                    .all(|b| b.actions.last() == Some(&resubmit(table::AFFINITY_LEARN)))
            );
        }
    }

    #[test]
    fn source_ranges_restrict_only_lb_ips_and_open_ranges_lift_them() {
        let mut s = scenario();
        let key = ServiceKey::new("other", "lb-closed");
        let text = flows(&desired(&s.node, &s.model, &s.config, &s.bindings)).join("\n");
        assert!(text.contains("priority=90,tcp,nw_dst=198.18.0.81,tp_dst=80 actions=drop"));
        assert!(text.contains("priority=100,tcp,nw_dst=10.96.0.81,tp_dst=80 actions=group:"));
        // 0.0.0.0/0 among the ranges, or only IPv6 ranges: no restriction for IPv4.
        for ranges in [vec!["203.0.113.0/24", "0.0.0.0/0"], vec!["2001:db8::/32"]] {
            s.model.services.get_mut(&key).unwrap().lb_source_ranges =
                ranges.iter().map(|r| r.parse().unwrap()).collect();
            let text = flows(&desired(&s.node, &s.model, &s.config, &s.bindings)).join("\n");
            assert!(
                !text.contains("nw_dst=198.18.0.81,tp_dst=80 actions=drop"),
                "{ranges:?}"
            );
            assert!(
                text.contains("priority=100,tcp,nw_dst=198.18.0.81,tp_dst=80 actions=group:"),
                "{ranges:?}"
            );
        }
    }
}
