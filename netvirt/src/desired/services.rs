//! A service's flows and groups: table 40 for its addresses (with source ranges and refusal),
//! its select groups, and table 41's endpoint DNAT.

use super::*;

impl Builder<'_> {
    /// One service's flows and groups: its table-40 (and table-42) flows, its groups, the
    /// ARP answers for its external addresses, and the DNAT flows of its endpoints.
    pub(super) fn service(
        &mut self,
        service: &Service,
        plans: Vec<PortPlan>,
        ids: &crate::ids::Ids,
        bindings: &NodeBindings,
    ) {
        let config = self.config;
        self.unserved(service, &plans);
        let unserved_addresses: BTreeSet<IpAddr> = plans
            .first()
            .map(|p| p.unserved_addresses.iter().copied().collect())
            .unwrap_or_default();
        let mut endpoints: BTreeSet<(Protocol, IpAddr, u16)> = BTreeSet::new();
        // The actions of each port's cluster scope, for in-cluster traffic to its external
        // addresses (below).
        let mut internal_actions: BTreeMap<(Protocol, u16, Family), Vec<Action>> = BTreeMap::new();
        for plan in plans {
            let external_scope = plan.scope == Scope::External;
            let cluster_scope = plan.scope == Scope::ClusterForExternal;
            let PortPlan {
                name,
                scope: _,
                family,
                protocol,
                port: service_port,
                addresses,
                found,
                parts,
                unserved: _,
                unserved_addresses: _,
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
                endpoints.extend(part.iter().map(|b| (protocol, b.ip, b.port)));
                groups.push(ServiceGroup {
                    id: group_id,
                    backends: part.clone(),
                });
            }
            let select = match groups.as_slice() {
                [] => vec![reject_action()],
                [one] => vec![Action::Group(one.id)],
                _ => self.chain(&name, id, c, &groups),
            };
            let actions = match affinity {
                Some(timeout) => self.affinity(&name, id, c, family, timeout, &groups, select),
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
                internal_actions
                    .get(&(protocol, service_port, family))
                    .cloned()
            } else if cluster_scope {
                // Every endpoint, for in-cluster traffic to the external addresses only.
                internal_actions.insert((protocol, service_port, family), actions.clone());
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
                    internal_actions.insert((protocol, service_port, family), actions.clone());
                }
                None
            };
            let restricted = lb_source_ranges(service, family);
            for (address, port) in &addresses {
                let mut m = l4_of(family, protocol).with(family.dst(), addr_value(*address));
                if *port != ANY_PORT {
                    m.insert(openflow::OxmField::exact(dst_port_field(protocol), *port));
                }
                let is_lb = *port == service_port && service.lb_ingress_ips.contains(address);
                // (priority, match, actions); empty actions drop.
                let mut flows: Vec<(u16, Match, Vec<Action>)> = Vec::new();
                match &restricted {
                    Some(ranges) if is_lb => {
                        // Only the listed sources reach an LB IP; other new connections
                        // are dropped, as kube-proxy's firewall chain drops them.
                        for &net in ranges {
                            let allowed = with_net(m.clone(), family.src(), net);
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
        // Answer ARP (IPv4) and neighbour solicitations (IPv6) from the uplink for external
        // and LB addresses that land on this node.
        if let Some(uplink) = bindings.uplink {
            let announced: BTreeSet<IpAddr> = service
                .external_ips
                .iter()
                .chain(&service.lb_ingress_ips)
                .filter(|ip| !unserved_addresses.contains(ip))
                .copied()
                .collect();
            for ip in announced {
                self.answer_on_uplink(uplink.mac, ip, cookie::make(cookie::NODE, 0));
            }
        }
        // An endpoint's DNAT flow is the same whichever service renders it, so services that
        // share an endpoint share the flow.
        for (protocol, ip, port) in endpoints {
            let m = with_endpoint(l4_of(Family::of(ip), protocol), ip)
                .with(reg::ENDPOINT_PORT, u32::from(port));
            let dnat = Nat::dnat(ip, (port != ANY_PORT).then_some(port));
            let c = cookie::make(cookie::ENDPOINT, endpoint_cookie_id(ip));
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

    /// The flows that send probes of the service's health-check node port (with
    /// `externalTrafficPolicy: Local`) on each of the node's addresses to the controller,
    /// which answers them as kube-proxy's server would on the node
    /// ([`crate::health_answer`]) with what the render records here: the node's local
    /// endpoint count. The flow names the service (two services on one port collide).
    pub(super) fn health_check(&mut self, service: &Service, endpoints: &[Endpoint], node: &Node) {
        let Some((port, check)) = crate::health::health_check(service, endpoints, &node.name)
        else {
            return;
        };
        let action = to_controller(crate::health_answer::userdata(&check.service));
        let c = cookie::make(cookie::HEALTH, u32::from(port));
        for &ip in &node.ips {
            let family = Family::of(ip);
            let m = l4_of(family, Protocol::Tcp)
                .with(family.dst(), addr_value(ip))
                .with(dst_port_field(Protocol::Tcp), port);
            self.flow(table::SERVICE, 100, m, c, apply(vec![action.clone()]));
        }
        self.out.health.insert(port, check);
    }

    /// Says which of the service's endpoints serve nothing (those of an IP family the service
    /// has no address of: an IPv6 endpoint never serves an IPv4 address), and which of its
    /// external and LB addresses get no flows (those of a family it has no cluster IP of).
    pub(super) fn unserved(&mut self, service: &Service, plans: &[PortPlan]) {
        let Some(plan) = plans.first() else { return };
        for ip in &plan.unserved {
            self.out.conflicts.push(format!(
                "{}: endpoint {ip} is not used: the service has no {} address",
                service.key,
                Family::of(ip)
            ));
        }
        for ip in &plan.unserved_addresses {
            self.out.conflicts.push(format!(
                "{}: address {ip} is not served: the service has no {} cluster IP",
                service.key,
                Family::of(ip)
            ));
        }
    }
}

/// The low 32 bits of an endpoint's cookie: its IPv4 address, or an IPv6 address's last 32
/// bits.
pub(crate) fn endpoint_cookie_id(ip: IpAddr) -> u32 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4),
        IpAddr::V6(v6) => u128::from(v6) as u32,
    }
}

/// A LoadBalancer's source ranges of `family`, or `None` when its LB IPs of that family are
/// open to every source: no range of the family is listed (kube-proxy filters the ranges by
/// family), or one of them is `/0`.
pub(super) fn lb_source_ranges(service: &Service, family: Family) -> Option<Vec<ipnet::IpNet>> {
    let ranges: Vec<ipnet::IpNet> = service
        .lb_source_ranges
        .iter()
        .filter(|net| Family::of_net(net) == family)
        .map(|net| net.trunc())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if ranges.is_empty() || ranges.iter().any(|net| net.prefix_len() == 0) {
        None
    } else {
        Some(ranges)
    }
}

/// A select group with one bucket per backend: load the endpoint, then go to `next` (table
/// 41 to DNAT, or table 44 to learn an affine choice first).
pub(super) fn select_group(backends: &[Backend], next: u8) -> GroupEntry {
    let buckets = backends
        .iter()
        .map(|b| Bucket::endpoint(b.weight, b.ip, b.port, next))
        .collect();
    GroupEntry {
        kind: GroupKind::Select,
        buckets,
    }
}

/// Sends the packet to the controller, which refuses its connection, through the refusal
/// meter, which drops what exceeds its rate.
pub(super) fn reject_action() -> Action {
    to_controller(REJECT_USERDATA.to_vec())
}

/// Sends the whole packet to the controller through the refusal meter, with `userdata`.
fn to_controller(userdata: Vec<u8>) -> Action {
    Action::Controller(openflow::action::Controller {
        max_len: u16::MAX,
        controller_id: 0,
        reason: 1,
        userdata,
        pause: false,
        meter_id: Some(meter::REFUSE),
        legacy: false,
    })
}
