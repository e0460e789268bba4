//! A service's ports planned for one node: its traffic scopes, addresses and backends, and
//! the group names they need ids for.

use super::*;

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
pub(super) type Scoped = (Scope, TrafficPolicy, Vec<(IpAddr, u16)>);

/// The IP families a service serves: those of its cluster IPs (a dual-stack Service has one
/// of each), else of its other addresses, else of its endpoints; IPv4 when it has none.
pub(crate) fn service_families(
    service: &Service,
    endpoints: &[crate::model::Endpoint],
) -> Vec<Family> {
    let of = |ips: &mut dyn Iterator<Item = &IpAddr>| -> Vec<Family> {
        let set: BTreeSet<Family> = ips.map(Family::of).collect();
        set.into_iter().collect()
    };
    let mut families = of(&mut service.cluster_ips.iter());
    if families.is_empty() {
        families = of(&mut service.external_ips.iter().chain(&service.lb_ingress_ips));
    }
    if families.is_empty() {
        families = of(&mut endpoints.iter().map(|e| &e.address));
    }
    if families.is_empty() {
        families.push(Family::V4);
    }
    families
}

/// The address classes of a service port in one IP family: cluster-internal ones (cluster
/// IPs) follow `internalTrafficPolicy`; the external ones (node ports on the node's addresses
/// of the family, external and LB IPs) follow `externalTrafficPolicy`. Returns
/// `(scope, policy, [(address, port)])`.
pub(super) fn scopes(
    service: &Service,
    port: &ServicePort,
    node: &Node,
    family: Family,
) -> Vec<Scoped> {
    let ours = |ip: &&IpAddr| Family::of(**ip) == family;
    let internal: Vec<(IpAddr, u16)> = service
        .cluster_ips
        .iter()
        .filter(ours)
        .map(|ip| (*ip, port.port))
        .collect();
    let mut external: Vec<(IpAddr, u16)> = service
        .external_ips
        .iter()
        .chain(&service.lb_ingress_ips)
        .filter(ours)
        .map(|ip| (*ip, port.port))
        .collect();
    if let Some(node_port) = port.node_port {
        let gateway = virtual_gateways(node)
            .into_iter()
            .filter(|ip| Family::of(ip) == family);
        external.extend(
            node.ips
                .iter()
                .filter(ours)
                .copied()
                .chain(gateway)
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

/// A service port while its groups are being planned.
pub(crate) struct PortPlan {
    pub(super) name: String,
    pub(super) scope: Scope,
    /// The family of its addresses and backends.
    pub(super) family: Family,
    pub(super) protocol: Protocol,
    /// The service port's `port` (on cluster, external and LB IPs).
    pub(super) port: u16,
    pub(super) addresses: Vec<(IpAddr, u16)>,
    /// Its backends of its family.
    pub(super) found: Vec<Backend>,
    pub(super) parts: Vec<Vec<Backend>>,
    /// The service's endpoints of a family it has no address of, which serve nothing, and
    /// its external and LB addresses of a family it has no cluster IP of, which get no flows
    /// (the same lists in each of its plans).
    pub(super) unserved: Vec<IpAddr>,
    pub(super) unserved_addresses: Vec<IpAddr>,
}

/// Whether `service`'s plans and flows are the same on every node (under one configuration,
/// with the same group ids), so that one node's render of it serves them all
/// (`shards::Renders`). What makes a render differ from node to node, and rules this out:
///
/// - node ports, which are on the node's own addresses;
/// - a `Local` traffic policy, which keeps the node's own endpoints;
/// - external and LB IPs, which the node announces on its uplink (with its MAC);
/// - topology: topology keys, `trafficDistribution`, zone and node hints, which choose
///   endpoints by the receiving node's zone, labels or name;
/// - a local endpoint weight other than the remote one (1), unless every endpoint has a
///   weight of its own.
pub(crate) fn renders_alike_on_every_node(
    service: &Service,
    endpoints: &[crate::model::Endpoint],
    config: &Config,
) -> bool {
    service.ports.iter().all(|p| p.node_port.is_none())
        && service.internal_traffic_policy == TrafficPolicy::Cluster
        && service.external_traffic_policy == TrafficPolicy::Cluster
        && service.external_ips.is_empty()
        && service.lb_ingress_ips.is_empty()
        && service.topology.keys.is_empty()
        && service.traffic_distribution == crate::model::TrafficDistribution::Any
        && endpoints.iter().all(|e| {
            e.zone_hints.is_empty()
                && e.node_hints.is_empty()
                && (config.local_endpoint_weight == 1 || e.weight.is_some())
        })
}

/// Plans `service`'s ports on `node`: one per port, IP family and traffic scope, named
/// stably (`namespace/name:port/protocol[/external|/cluster][/ipv6]`), with its backends of
/// that family split into groups. An endpoint never serves an address of the other family.
pub(crate) fn service_plans(
    service: &Service,
    endpoints: &[crate::model::Endpoint],
    node: &Node,
    config: &Config,
) -> Vec<PortPlan> {
    let families = service_families(service, endpoints);
    let unserved: Vec<IpAddr> = endpoints
        .iter()
        .map(|e| e.address)
        .filter(|ip| !families.contains(&Family::of(ip)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let unserved_addresses: Vec<IpAddr> = service
        .external_ips
        .iter()
        .chain(&service.lb_ingress_ips)
        .filter(|ip| !families.contains(&Family::of(**ip)))
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut plans = Vec::new();
    for port in &ports_of(service) {
        for &family in &families {
            for (scope, policy, addresses) in scopes(service, port, node, family) {
                if addresses.is_empty() {
                    continue;
                }
                let found: Vec<Backend> =
                    service_backends(service, port, endpoints, node, policy, config)
                        .into_iter()
                        .filter(|b| Family::of(b.ip) == family)
                        .collect();
                let name = group_name(service, port.port, port.protocol, scope, family);
                let parts =
                    chain::partition(&found, config.group_buckets_max).unwrap_or_else(|| {
                        if found.is_empty() {
                            Vec::new()
                        } else {
                            vec![found.clone()]
                        }
                    });
                plans.push(PortPlan {
                    name,
                    scope,
                    family,
                    protocol: port.protocol,
                    port: port.port,
                    addresses,
                    found,
                    parts,
                    unserved: unserved.clone(),
                    unserved_addresses: unserved_addresses.clone(),
                });
            }
        }
    }
    plans
}

/// The ports a service forwards: its own, or, for a service that lists none (the REST design
/// document's minimal form, "a VIP in front of pods"), every port of TCP, UDP and SCTP, as
/// port 0: its flows match no destination port and its endpoints are DNATed by address only.
pub(super) fn ports_of(service: &Service) -> Vec<ServicePort> {
    if !service.ports.is_empty() {
        return service.ports.clone();
    }
    [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
        .into_iter()
        .map(|protocol| ServicePort {
            name: String::new(),
            protocol,
            port: ANY_PORT,
            target_port: crate::model::TargetPort::Number(ANY_PORT),
            node_port: None,
        })
        .collect()
}

/// The port number that stands for every port, in a service that lists none.
pub const ANY_PORT: u16 = 0;

/// A port plan's group name, `namespace/name:port/protocol` then the scope's and the family's
/// suffixes: built by appending, as a `format!` of the five parts was 3 % of a first load's
/// render.
fn group_name(
    service: &Service,
    port: u16,
    protocol: Protocol,
    scope: Scope,
    family: Family,
) -> String {
    use std::fmt::Write;
    let (scope, family) = (scope.suffix(), family.suffix());
    let key = &service.key;
    let mut name = String::with_capacity(
        key.namespace.len() + key.name.len() + 12 + scope.len() + family.len(),
    );
    key.push_to(&mut name);
    name.push(':');
    // Writing to a `String` cannot fail.
    let _ = write!(name, "{port}");
    name.push('/');
    name.push_str(protocol.keyword());
    name.push_str(scope);
    name.push_str(family);
    name
}

/// The group names `plans` need ids for: each port's, and a big port's chained groups
/// (`<port name>#<part>`).
pub(crate) fn plan_names(plans: &[PortPlan]) -> Vec<Arc<str>> {
    let mut names: Vec<Arc<str>> = Vec::new();
    for p in plans {
        names.push(Arc::from(p.name.as_str()));
        if p.parts.len() > 1 {
            names.extend((0..p.parts.len()).map(|k| Arc::from(format!("{}#{k}", p.name))));
        }
    }
    names
}
