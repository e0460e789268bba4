//! The node's own ports and addresses: the gateway port, the uplink, the overlay's tunnel, and
//! the masquerade of what leaves the node.

use super::*;

impl Builder<'_> {
    pub(super) fn node_ports(&mut self, node: &Node, bindings: &NodeBindings) {
        let gateways = virtual_gateways(node);
        let gw_mac = self.config.gateway_mac;
        let c = cookie::make(cookie::NODE, 0);
        // The bridge answers for the node's addresses on the uplink (below). One the node's
        // host holds behind the bridge (the overlay's LOCAL) takes what comes for it and no
        // node port takes (`tunnel`). The others have no one behind them: what comes from
        // the uplink for one of them and no node port takes is refused (a new connection) or
        // dropped, where routing it would send it back out of the uplink, to come back
        // again until its TTL ran out.
        let hosted = self.host_addresses(node, bindings);
        if bindings.uplink.is_some() {
            for &ip in node.ips.iter().filter(|ip| !hosted.contains(ip)) {
                self.refuse_unserved(ip, true);
                let from_uplink = to_addr(ip).with(reg::FROM_UPLINK, 1u32);
                self.flow(table::L3, 100, from_uplink, c, vec![]);
            }
        }
        // The virtual gateway address carries the node's node ports (for pods, and for the
        // node's own host, whose connections to its own address on a node port its nftables
        // rule sends here: `node_setup::host_gateway_commands`). A new connection to it that no
        // node port takes is refused at once, as in the service CIDR, not routed away.
        for &vgw in &gateways {
            self.refuse_unserved(vgw, false);
        }
        if let Some(gw) = bindings.gateway {
            self.flow(
                table::CLASSIFIER,
                100,
                in_port(gw.ofport),
                c,
                vec![goto(table::ARP)],
            );
            let host = [
                IpAddr::V4(self.config.gateway_host_ip),
                IpAddr::V6(self.config.gateway_host_ip6),
            ];
            for ip in host {
                self.flow(
                    table::L3,
                    100,
                    to_addr(ip),
                    c,
                    route(gw_mac, gw.mac, gw.ofport),
                );
            }
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
        // From the uplink, answer ARP and neighbour solicitations only for the node's own
        // addresses (and services' external ones), never proxy for everything.
        self.flow(
            table::ARP,
            190,
            Match::new()
                .with(Field::EthType, 0x0806u16)
                .with(reg::FROM_UPLINK, 1u32),
            c,
            vec![],
        );
        self.flow(
            table::ARP,
            190,
            nd_solicit().with(reg::FROM_UPLINK, 1u32),
            c,
            vec![],
        );
        for &ip in node.ips.iter().chain(&gateways) {
            self.answer_on_uplink(uplink.mac, ip, c);
        }
        // Off-node destinations leave by the uplink, from its own MAC to its next hop.
        for family in Family::BOTH {
            self.flow(
                table::L3,
                10,
                ip_of(family),
                c,
                route(uplink.mac, uplink.next_hop_mac, uplink.ofport),
            );
        }
        self.masquerade(node);
        self.masquerade_egress(node, bindings);
    }

    /// With an overlay the underlay routes no pod CIDR, so a local pod's connection that
    /// leaves the cluster (the default route: every in-cluster destination, a pod CIDR, a
    /// node's own address or the gateway's, has a route above it) is SNATed to the node's
    /// address in the hairpin zone, as Antrea and OVN-Kubernetes do; its replies, addressed to
    /// the node from the uplink, are un-SNATed by table 20 like a node port's. Only the
    /// original direction (`-rpl`): a pod's reply to a client that reached it with its own
    /// source (a node port with `externalTrafficPolicy: Local`) keeps its source. A routed
    /// underlay (`--encap none`) routes the pod CIDRs back, so pods keep their source there,
    /// and so does a node whose tunnel port is not (yet) on its bridge.
    fn masquerade_egress(&mut self, node: &Node, bindings: &NodeBindings) {
        if !self.overlay(bindings) {
            return;
        }
        let c = cookie::make(cookie::NODE, 0);
        for family in Family::BOTH {
            let (node_ip, pods) = match (node.ip_of(family), node.pod_cidr_of(family)) {
                (Some(ip), Some(pods)) => (ip, pods),
                (None, Some(pods)) => {
                    self.out.conflicts.push(format!(
                        "pod CIDR {pods} but no {family} node address to masquerade its \
                         pods' connections out of the cluster to: they leave with their own \
                         source, which the overlay's underlay does not route back"
                    ));
                    continue;
                }
                (_, None) => continue,
            };
            let leaving = with_net(ip_of(family), family.src(), pods).with_masked(
                Field::CtState,
                ct_state::TRK,
                ct_state::RPL | ct_state::TRK,
            );
            self.flow(
                table::L3,
                11,
                leaving,
                c,
                apply(vec![ct(
                    self.config.hairpin_zone,
                    table::L3,
                    true,
                    Some(Nat::snat(node_ip)),
                )]),
            );
        }
    }

    /// Refuses a new TCP, UDP or SCTP connection to `ip` that no service port takes (table
    /// 40 below the services), from anywhere or only from the uplink.
    fn refuse_unserved(&mut self, ip: IpAddr, only_from_uplink: bool) {
        let family = Family::of(ip);
        for protocol in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
            let mut m = l4_of(family, protocol).with(family.dst(), addr_value(ip));
            if only_from_uplink {
                m = m.with(reg::FROM_UPLINK, 1u32);
            }
            self.flow(
                table::SERVICE,
                1,
                m,
                cookie::make(cookie::REFUSE, 0),
                apply(vec![reject_action()]),
            );
        }
    }

    /// The node's addresses its host holds behind the bridge, on its own (LOCAL) port: the
    /// overlay's tunnel endpoints on the userspace datapath (`svcflow node-setup --address`
    /// for each), its [`tunnel_endpoints`].
    fn host_addresses(&self, node: &Node, bindings: &NodeBindings) -> Vec<IpAddr> {
        let hosted =
            self.overlay(bindings) && bindings.uplink.is_some() && bindings.local_mac.is_some();
        if hosted {
            tunnel_endpoints(node).collect()
        } else {
            Vec::new()
        }
    }

    /// Whether the overlay is in use: an encapsulation, and the tunnel port on the bridge.
    fn overlay(&self, bindings: &NodeBindings) -> bool {
        self.config.encap.udp_port().is_some() && bindings.tunnel.is_some()
    }

    /// Answers "who has `ip`?" from the uplink with the uplink's `mac`: an ARP request for
    /// an IPv4 address, a neighbour solicitation for an IPv6 one.
    pub(super) fn answer_on_uplink(&mut self, mac: MacAddr, ip: IpAddr, c: u64) {
        match ip {
            IpAddr::V4(v4) => {
                let m = arp_request()
                    .with(reg::FROM_UPLINK, 1u32)
                    .with(Field::ArpTpa, u32::from(v4));
                self.flow(table::ARP, 200, m, c, apply(arp_reply_for(mac, v4)));
            }
            IpAddr::V6(v6) => {
                let m = nd_solicit()
                    .with(reg::FROM_UPLINK, 1u32)
                    .with(Field::NdTarget, u128::from(v6));
                self.flow(table::ARP, 200, m, c, nd_reply(mac, NA_HOST));
            }
        }
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
    pub(super) fn tunnel(&mut self, node: &Node, model: &Model, bindings: &NodeBindings) {
        let cfg = self.config;
        let (Some(udp), Some(tunnel), Some(uplink), Some(local_mac)) = (
            cfg.encap.udp_port(),
            bindings.tunnel,
            bindings.uplink,
            bindings.local_mac,
        ) else {
            return;
        };
        // The node's addresses on LOCAL, as `node_ports` decided which addresses the host
        // holds: one tunnel endpoint per family it has an address of.
        let hosted = self.host_addresses(node, bindings);
        if hosted.is_empty() {
            self.out.conflicts.push(format!(
                "node {}: no address, so no tunnel endpoint: its pods and the other nodes' \
                 pods cannot reach each other",
                node.name
            ));
            return;
        }
        let c = cookie::make(cookie::NODE, 0);
        for &node_ip in &hosted {
            self.tunnel_endpoint(node_ip, udp, uplink.ofport, local_mac);
        }
        // What LOCAL sends of no endpoint's family (ARP, say) leaves by the uplink too.
        self.flow(
            table::CLASSIFIER,
            119,
            in_port(OFPP_LOCAL),
            c,
            apply(vec![output(uplink.ofport)]),
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
            // The other node's endpoint of a family this one has an endpoint of (IPv4 when
            // both have both) carries both families of pods.
            let to_other = match tunnel_destination(node, other) {
                Ok(ip) => set_tunnel_destination(ip),
                Err(why) => {
                    if !other.pod_cidrs.is_empty() {
                        let cidrs: Vec<String> =
                            other.pod_cidrs.iter().map(ToString::to_string).collect();
                        self.out.conflicts.push(format!(
                            "node {}: no tunnel to it ({why}): its pod CIDRs {} are not \
                             routed into the tunnel, so its pods are unreachable from this \
                             node",
                            other.name,
                            cidrs.join(", ")
                        ));
                    }
                    continue;
                }
            };
            for &pods in &other.pod_cidrs {
                let m = to_net(pods);
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
                            to_other.clone(),
                            set(reg::OUT_PORT, tunnel),
                        ]),
                        goto(table::OUTPUT),
                    ],
                );
            }
        }
    }

    /// The flows of one of the node's tunnel endpoints, `node_ip`, which its host holds on
    /// LOCAL: the datapath's encapsulated packets of its family leave by the uplink, and
    /// what comes for it (encapsulated or not) goes to LOCAL.
    fn tunnel_endpoint(&mut self, node_ip: IpAddr, udp: u16, uplink: u32, local_mac: MacAddr) {
        let cfg = self.config;
        let family = Family::of(node_ip);
        let eth_type = family.eth_type();
        let c = cookie::make(cookie::NODE, 0);
        // LOCAL's own output leaves by the uplink. The host's connections of the endpoint's
        // family are committed in the hairpin zone on the way, so a pod's connection
        // masqueraded to the same address (`masquerade_egress`) never takes the address and
        // port of one of them: conntrack gives it another port. The datapath's encapsulated
        // packets need no tracking.
        self.flow(
            table::CLASSIFIER,
            121,
            in_port(OFPP_LOCAL)
                .with(Field::EthType, eth_type)
                .with(Field::IpProto, 17u8)
                .with(Field::UdpDst, udp),
            c,
            apply(vec![output(uplink)]),
        );
        self.flow(
            table::CLASSIFIER,
            120,
            in_port(OFPP_LOCAL).with(Field::EthType, eth_type),
            c,
            apply(vec![ct_commit(cfg.hairpin_zone), output(uplink)]),
        );
        let encapsulated = in_port(uplink)
            .with(Field::EthType, eth_type)
            .with(Field::IpProto, 17u8)
            .with(family.dst(), addr_value(node_ip))
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
        // The node's own host holds its address on LOCAL, so what comes from the uplink for
        // that address and is for no node port goes to the host, as it would reach a host
        // without svcflow: a connection to it (new, and no service took it in table 40, which
        // leaves it uncommitted) and every later packet, including the replies to the host's
        // own connections (LOCAL's traffic is committed in the hairpin zone only, never in
        // the service zone, so these are invalid there, table 30). Replies to masqueraded
        // connections are not addressed to the node any more once table 20 has un-SNATed
        // them; a node port's connections are DNATed by table 21 before either of these
        // matches.
        let for_host = to_addr(node_ip).with(reg::FROM_UPLINK, 1u32);
        let to_host = apply(vec![
            set(Field::EthDst, mac_value(local_mac)),
            output(OFPP_LOCAL),
        ]);
        self.flow(table::SERVICE, 2, for_host.clone(), c, to_host.clone());
        // And from anywhere (a pod, or the uplink once a connection is committed), the
        // node's address is routed to its host, not out of the uplink to come back.
        self.flow(table::L3, 100, to_addr(node_ip), c, to_host.clone());
        self.flow(
            table::CT_STATE,
            210,
            for_host.with_masked(
                Field::CtState,
                ct_state::INV | ct_state::TRK,
                ct_state::INV | ct_state::TRK,
            ),
            c,
            to_host,
        );
        // The answers to the host's (and the datapath's) ARP requests or neighbour
        // solicitations for the next hop.
        let arp_reply = match family {
            Family::V4 => in_port(uplink)
                .with(Field::EthType, 0x0806u16)
                .with(Field::ArpOp, 2u16),
            Family::V6 => in_port(uplink)
                .with(Field::EthType, eth_type)
                .with(Field::IpProto, 58u8)
                .with(Field::Icmpv6Type, 136u8)
                .with(Field::Icmpv6Code, 0u8),
        };
        self.flow(
            table::CLASSIFIER,
            120,
            arp_reply,
            c,
            apply(vec![output(OFPP_LOCAL)]),
        );
    }

    /// Service connections from outside the node (the uplink) or from the node's own host
    /// (the gateway port's address) that land on an endpoint of another node are SNATed to
    /// the node's IP in the hairpin zone, as kube-proxy masquerades them: the endpoint's
    /// replies then come back through this node, which un-SNATs them (table 20) and
    /// un-DNATs them (table 21). Connections to local endpoints keep their source, which is
    /// what `externalTrafficPolicy: Local` promises.
    pub(super) fn masquerade(&mut self, node: &Node) {
        for family in Family::BOTH {
            let host_ip = match family {
                Family::V4 => IpAddr::V4(self.config.gateway_host_ip),
                Family::V6 => IpAddr::V6(self.config.gateway_host_ip6),
            };
            if let Some(node_ip) = node.ip_of(family) {
                self.masquerade_family(node_ip, host_ip, node.pod_cidr_of(family));
            }
        }
    }

    fn masquerade_family(&mut self, node_ip: IpAddr, host_ip: IpAddr, pods: Option<ipnet::IpNet>) {
        let family = Family::of(node_ip);
        let cfg = self.config;
        let c = cookie::make(cookie::NODE, 0);
        self.flow(
            table::UNSNAT,
            100,
            to_addr(node_ip).with(reg::FROM_UPLINK, 1u32),
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
            ip_of(family).with(reg::FROM_UPLINK, 1u32),
            from_addr(host_ip),
        ];
        for from in sources {
            if let Some(pods) = pods {
                let local = with_net(new_service(from.clone()), family.dst(), pods);
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
}

/// A node's overlay tunnel endpoints: its first IPv4 address and its first IPv6 one (each
/// that it has), which its host holds on LOCAL (the datapath routes an outer packet from the
/// endpoint of its family).
pub(crate) fn tunnel_endpoints(node: &Node) -> impl Iterator<Item = IpAddr> + '_ {
    Family::BOTH.into_iter().filter_map(|f| node.ip_of(f))
}

/// Where `from`'s tunnel sends what is for `to`'s pods: `to`'s IPv4 endpoint when both nodes
/// have one, else its IPv6 one when both have one. Else why there is no tunnel between them.
pub(crate) fn tunnel_destination(from: &Node, to: &Node) -> Result<IpAddr, String> {
    for family in Family::BOTH {
        if let (Some(_), Some(theirs)) = (from.ip_of(family), to.ip_of(family)) {
            return Ok(theirs);
        }
    }
    let families = |n: &Node| -> String {
        let fs: Vec<String> = tunnel_endpoints(n)
            .map(|ip| format!("{ip} ({})", Family::of(ip)))
            .collect();
        if fs.is_empty() {
            "none".into()
        } else {
            fs.join(", ")
        }
    };
    if to.ips.is_empty() {
        return Err("it has no address".into());
    }
    Err(format!(
        "no address family in common: its tunnel endpoints are {}, this node's {}",
        families(to),
        families(from)
    ))
}

/// Sets the tunnel's destination to `ip`: `tun_dst` for IPv4, `tun_ipv6_dst` for IPv6.
pub(crate) fn set_tunnel_destination(ip: IpAddr) -> Action {
    match ip {
        IpAddr::V4(v4) => set(Field::TunDst, u32::from(v4)),
        IpAddr::V6(v6) => set(Field::TunIpv6Dst, u128::from(v6)),
    }
}
