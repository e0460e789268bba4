//! The node's pods and their namespaces' ELANs: classification, ARP, flooding and routes.

use super::*;

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

impl Builder<'_> {
    pub(super) fn pods(
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
                for &ip in &pod.ips {
                    // Its ARP (IPv4) or neighbour solicitation (IPv6) from its own address.
                    let (heard, learn) = match ip {
                        IpAddr::V4(v4) => (
                            in_port(ofport)
                                .with(Field::EthType, 0x0806u16)
                                .with(Field::ArpSpa, u32::from(v4)),
                            learn_mac(ofport, Family::V4),
                        ),
                        IpAddr::V6(v6) => {
                            let mut m = nd_solicit().with(Field::Ipv6Src, u128::from(v6));
                            m.insert(openflow::OxmField::exact(Field::InPortOxm, ofport));
                            (m, learn_mac(ofport, Family::V6))
                        }
                    };
                    self.flow(
                        table::CLASSIFIER,
                        110,
                        heard,
                        c,
                        vec![
                            Instruction::ApplyActions(vec![set(reg::ELAN, elan), learn]),
                            goto(table::ARP),
                        ],
                    );
                }
            }
            for &ip in &pod.ips {
                let family = Family::of(ip);
                let hairpin = from_addr(ip).with(family.dst(), addr_value(ip));
                let loopback = match family {
                    Family::V4 => IpAddr::V4(self.config.loopback_ip),
                    Family::V6 => IpAddr::V6(self.config.loopback_ip6),
                };
                let snat = Nat::snat(loopback);
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
                self.flow(table::L3, 100, to_addr(ip), c, instructions);
            }
        }
        if let Some(gw) = bindings.gateway {
            for ports in members.values_mut() {
                ports.insert(gw.ofport);
            }
        }
        // With the overlay, an ELAN spans the cluster: its flood also reaches, through the
        // tunnel with the ELAN as the tunnel id, every other node that has pods of it, at its
        // tunnel endpoint of a family both nodes have (one with none in common is reported
        // by `tunnel`).
        let mut remote: BTreeMap<u32, BTreeSet<IpAddr>> = BTreeMap::new();
        if let (Some(_), Some(_)) = (self.config.encap.udp_port(), bindings.tunnel) {
            // Each other node's destination, chosen once per node rather than per pod.
            let reached: BTreeMap<&str, IpAddr> = model
                .nodes
                .values()
                .filter(|other| other.name != node.name)
                .filter_map(|other| {
                    Some((other.name.as_str(), tunnel_destination(node, other).ok()?))
                })
                .collect();
            for pod in model.pods.values().filter(|p| p.node != node.name) {
                let (Some(&elan), Some(&ip)) =
                    (elans.get(&pod.namespace), reached.get(pod.node.as_str()))
                else {
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
                .map(|port| Bucket::new(0, vec![output(port)]))
                .collect();
            let mut buckets = local.clone();
            if let (Some(tunnel), Some(ips)) = (bindings.tunnel, remote.get(&elan)) {
                buckets.extend(ips.iter().map(|ip| {
                    Bucket::new(
                        0,
                        vec![
                            set(Field::TunId, u64::from(elan)),
                            set_tunnel_destination(*ip),
                            output(tunnel),
                        ],
                    )
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
                    table::ELAN_FLOOD,
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
                table::ELAN_FLOOD,
                10,
                flood,
                cookie::make(cookie::ELAN, elan),
                apply(vec![Action::Group(id)]),
            );
        }
    }
}
