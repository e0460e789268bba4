//! Which endpoints serve a service port on a given node, on which port, with which weight.
//!
//! This follows kube-proxy: ready endpoints serve new connections; when none is ready,
//! endpoints that are serving and terminating take over. Traffic policy `Local` keeps only the
//! endpoints on the node. An endpoint's port comes from its port of the same name and protocol
//! as the service port, or else from a numeric target port.
//!
//! Under policy `Cluster`, topology then narrows the endpoints ([`by_topology`]): the
//! service's topology keys if it has any (a connection fails when no key matches), else zone
//! hints, else `trafficDistribution: PreferClose` by zone (both falling back to every
//! endpoint when the receiving node's zone has none).

use std::net::IpAddr;

use crate::config::Config;
use crate::model::{
    Endpoint, Node, Service, ServicePort, TargetPort, TrafficDistribution, TrafficPolicy,
};

/// The node label that gives a node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The topology key that matches any node.
pub const ANY_NODE: &str = "*";

/// One bucket's worth of endpoint: where to DNAT, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    /// Endpoint address.
    pub ip: IpAddr,
    /// Endpoint port.
    pub port: u16,
    /// Bucket weight (a local endpoint's default differs; see
    /// [`Config::local_endpoint_weight`]). Nothing else about a backend depends on the node
    /// that renders it, so services render alike on every node when the weights agree, and
    /// their shards are shared (`shards::Renders`).
    pub weight: u16,
}

/// The backends of `port` as seen from `node`, sorted by address and port, without topology.
pub fn backends(
    port: &ServicePort,
    endpoints: &[Endpoint],
    node: &str,
    policy: TrafficPolicy,
    config: &Config,
) -> Vec<Backend> {
    backends_in(port, endpoints, node, policy, None, config)
}

/// The backends of `service`'s `port` for traffic that `node` receives under `policy`, sorted
/// by address and port, with the service's topology applied.
pub fn service_backends(
    service: &Service,
    port: &ServicePort,
    endpoints: &[Endpoint],
    node: &Node,
    policy: TrafficPolicy,
    config: &Config,
) -> Vec<Backend> {
    backends_in(
        port,
        endpoints,
        &node.name,
        policy,
        Some((service, node)),
        config,
    )
}

/// Narrows `candidates` (the endpoints that may serve, by their conditions) by topology, for
/// traffic received by `node`:
///
/// - **Topology keys** (the service-topology KEP): the first key, in order, for which some
///   candidate's node has the receiving node's value of that label; `*` takes every
///   candidate. A key the receiving node has no label for is skipped. When no key matches,
///   nothing is left and the connection fails.
/// - Else **node hints** (`trafficDistribution: PreferSameNode`), as kube-proxy uses them:
///   when every candidate has node hints and some name the receiving node, those; for inputs
///   that give no node hints, a `PreferSameNode` service takes the candidates on the
///   receiving node. When none is left this way, the zone steps below decide.
/// - Else **zone hints**, as kube-proxy uses them: only when the node has a zone and every
///   candidate has hints; the candidates hinted for the node's zone, or all of them when none
///   is.
/// - Else **`trafficDistribution: PreferClose`** (or `PreferSameNode`, falling back) by the
///   endpoints' own zones (for inputs that give no hints): the candidates in the node's
///   zone, or all when none is.
pub fn by_topology<'e>(
    candidates: Vec<&'e Endpoint>,
    service: &Service,
    node: &Node,
) -> Vec<&'e Endpoint> {
    let topology = &service.topology;
    if !topology.keys.is_empty() {
        for key in &topology.keys {
            if key == ANY_NODE {
                return candidates;
            }
            let Some(value) = node.labels.get(key) else {
                continue;
            };
            let matching: Vec<&Endpoint> = candidates
                .iter()
                .copied()
                .filter(|e| {
                    e.node
                        .as_ref()
                        .and_then(|n| topology.node_labels.get(n))
                        .and_then(|labels| labels.get(key))
                        == Some(value)
                })
                .collect();
            if !matching.is_empty() {
                return matching;
            }
        }
        return Vec::new();
    }
    let node_hinted = !candidates.is_empty() && candidates.iter().all(|e| !e.node_hints.is_empty());
    let same_node: Vec<&Endpoint> = if node_hinted {
        candidates
            .iter()
            .copied()
            .filter(|e| e.node_hints.contains(&node.name))
            .collect()
    } else if service.traffic_distribution == TrafficDistribution::PreferSameNode {
        candidates
            .iter()
            .copied()
            .filter(|e| e.node.as_ref() == Some(&node.name))
            .collect()
    } else {
        Vec::new()
    };
    if !same_node.is_empty() {
        return same_node;
    }
    let Some(zone) = node.labels.get(ZONE_LABEL) else {
        return candidates;
    };
    let hinted = !candidates.is_empty() && candidates.iter().all(|e| !e.zone_hints.is_empty());
    let close: Vec<&Endpoint> = if hinted {
        candidates
            .iter()
            .copied()
            .filter(|e| e.zone_hints.contains(zone))
            .collect()
    } else if matches!(
        service.traffic_distribution,
        TrafficDistribution::PreferClose | TrafficDistribution::PreferSameNode
    ) {
        candidates
            .iter()
            .copied()
            .filter(|e| e.zone.as_ref() == Some(zone))
            .collect()
    } else {
        Vec::new()
    };
    if close.is_empty() { candidates } else { close }
}

fn backends_in(
    port: &ServicePort,
    endpoints: &[Endpoint],
    node: &str,
    policy: TrafficPolicy,
    topology: Option<(&Service, &Node)>,
    config: &Config,
) -> Vec<Backend> {
    let is_local = |e: &Endpoint| e.node.as_deref() == Some(node);
    let in_scope = |e: &&Endpoint| policy == TrafficPolicy::Cluster || is_local(e);
    let ready: Vec<&Endpoint> = endpoints
        .iter()
        .filter(in_scope)
        .filter(|e| e.conditions.ready)
        .collect();
    let chosen = if ready.is_empty() {
        endpoints
            .iter()
            .filter(in_scope)
            .filter(|e| e.conditions.serving && e.conditions.terminating)
            .collect()
    } else {
        ready
    };
    let chosen = match topology {
        Some((service, node)) if policy == TrafficPolicy::Cluster => {
            by_topology(chosen, service, node)
        }
        _ => chosen,
    };
    let mut out: Vec<Backend> = chosen
        .into_iter()
        .filter_map(|e| {
            let local = is_local(e);
            let default_weight = if local {
                config.local_endpoint_weight
            } else {
                1
            };
            Some(Backend {
                ip: e.address,
                port: endpoint_port(port, e)?,
                weight: e.weight.unwrap_or(default_weight),
            })
        })
        .filter(|b| b.weight > 0)
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.ip == b.ip && a.port == b.port);
    out
}

/// The endpoint's port for `port`, if it serves it.
pub fn endpoint_port(port: &ServicePort, endpoint: &Endpoint) -> Option<u16> {
    let named = endpoint
        .ports
        .iter()
        .find(|p| p.name == port.name && p.protocol == port.protocol)
        .map(|p| p.port);
    match (&port.target_port, named) {
        (_, Some(number)) => Some(number),
        (TargetPort::Number(number), None) if endpoint.ports.is_empty() || port.name.is_empty() => {
            Some(*number)
        }
        (TargetPort::Number(number), None) => {
            // The endpoint lists ports, but none for this service port: it serves this port
            // only if a port of the same protocol carries the target number.
            endpoint
                .ports
                .iter()
                .any(|p| p.port == *number && p.protocol == port.protocol)
                .then_some(*number)
        }
        (TargetPort::Name(_), None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EndpointConditions, EndpointPort, Protocol};

    fn http() -> ServicePort {
        ServicePort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 80,
            target_port: TargetPort::Name("web".into()),
            node_port: None,
        }
    }

    fn ep(ip: &str, node: &str, port: u16, conditions: (bool, bool, bool)) -> Endpoint {
        Endpoint {
            address: ip.parse().unwrap(),
            ports: vec![EndpointPort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port,
            }],
            node: Some(node.into()),
            conditions: EndpointConditions {
                ready: conditions.0,
                serving: conditions.1,
                terminating: conditions.2,
            },
            zone: None,
            zone_hints: Vec::new(),
            node_hints: Vec::new(),
            weight: None,
        }
    }

    const READY: (bool, bool, bool) = (true, true, false);
    const DRAINING: (bool, bool, bool) = (false, true, true);
    const GONE: (bool, bool, bool) = (false, false, true);

    fn ips(backends: &[Backend]) -> Vec<String> {
        backends
            .iter()
            .map(|b| format!("{}:{}/{}", b.ip, b.port, b.weight))
            .collect()
    }

    #[test]
    fn ready_endpoints_win_and_local_ones_weigh_more() {
        let config = Config {
            local_endpoint_weight: 3,
            ..Config::default()
        };
        let eps = [
            ep("10.0.0.2", "n2", 8080, READY),
            ep("10.0.0.1", "n1", 8080, READY),
            ep("10.0.0.3", "n1", 8080, DRAINING),
        ];
        let got = backends(&http(), &eps, "n1", TrafficPolicy::Cluster, &config);
        assert_eq!(ips(&got), ["10.0.0.1:8080/3", "10.0.0.2:8080/1"]);
    }

    #[test]
    fn serving_terminating_endpoints_take_over_when_none_is_ready() {
        let eps = [
            ep("10.0.0.3", "n1", 8080, DRAINING),
            ep("10.0.0.4", "n1", 8080, GONE),
        ];
        let got = backends(
            &http(),
            &eps,
            "n1",
            TrafficPolicy::Cluster,
            &Config::default(),
        );
        assert_eq!(ips(&got), ["10.0.0.3:8080/1"]);
    }

    #[test]
    fn local_policy_keeps_only_this_nodes_endpoints() {
        let eps = [
            ep("10.0.0.1", "n1", 8080, READY),
            ep("10.0.0.2", "n2", 8080, READY),
        ];
        let got = backends(
            &http(),
            &eps,
            "n2",
            TrafficPolicy::Local,
            &Config::default(),
        );
        assert_eq!(ips(&got), ["10.0.0.2:8080/1"]);
        // A ready remote endpoint does not hide a local terminating one under Local.
        let eps = [
            ep("10.0.0.1", "n1", 8080, READY),
            ep("10.0.0.2", "n2", 8080, DRAINING),
        ];
        let got = backends(
            &http(),
            &eps,
            "n2",
            TrafficPolicy::Local,
            &Config::default(),
        );
        assert_eq!(ips(&got), ["10.0.0.2:8080/1"]);
    }

    #[test]
    fn named_target_ports_resolve_per_endpoint() {
        let eps = [
            ep("10.0.0.1", "n1", 8080, READY),
            ep("10.0.0.2", "n1", 9090, READY),
        ];
        let got = backends(
            &http(),
            &eps,
            "n1",
            TrafficPolicy::Cluster,
            &Config::default(),
        );
        assert_eq!(ips(&got), ["10.0.0.1:8080/1", "10.0.0.2:9090/1"]);
        let mut dns = http();
        dns.name = "dns".into();
        assert!(backends(&dns, &eps, "n1", TrafficPolicy::Cluster, &Config::default()).is_empty());
    }

    #[test]
    fn numeric_target_ports_apply_to_endpoints_without_ports() {
        let port = ServicePort {
            target_port: TargetPort::Number(5353),
            ..http()
        };
        let mut e = ep("10.0.0.9", "n1", 0, READY);
        e.ports.clear();
        let got = backends(
            &port,
            &[e],
            "n1",
            TrafficPolicy::Cluster,
            &Config::default(),
        );
        assert_eq!(ips(&got), ["10.0.0.9:5353/1"]);
    }

    #[test]
    fn explicit_weights_win_and_zero_weight_endpoints_are_dropped() {
        let mut a = ep("10.0.0.1", "n1", 8080, READY);
        a.weight = Some(7);
        let mut b = ep("10.0.0.2", "n1", 8080, READY);
        b.weight = Some(0);
        let got = backends(
            &http(),
            &[a, b],
            "n1",
            TrafficPolicy::Cluster,
            &Config::default(),
        );
        assert_eq!(ips(&got), ["10.0.0.1:8080/7"]);
    }

    fn node(name: &str, labels: &[(&str, &str)]) -> crate::model::Node {
        crate::model::Node {
            name: name.into(),
            ips: vec![],
            pod_cidrs: vec![],
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn service(keys: &[&str], distribution: TrafficDistribution) -> Service {
        Service {
            key: crate::model::ServiceKey::new("default", "web"),
            uid: "u".into(),
            kind: crate::model::ServiceType::ClusterIp,
            cluster_ips: vec![],
            ports: vec![http()],
            external_ips: vec![],
            lb_ingress_ips: vec![],
            session_affinity: Default::default(),
            external_traffic_policy: TrafficPolicy::Cluster,
            internal_traffic_policy: TrafficPolicy::Cluster,
            lb_source_ranges: vec![],
            health_check_node_port: None,
            topology: Default::default(),
            traffic_distribution: distribution,
        }
        .with_keys(keys)
    }

    trait WithKeys {
        fn with_keys(self, keys: &[&str]) -> Self;
    }

    impl WithKeys for Service {
        fn with_keys(mut self, keys: &[&str]) -> Self {
            self.topology.keys = keys.iter().map(|k| k.to_string()).collect();
            self
        }
    }

    /// One endpoint per node n1..n4, each in its node's zone, with `hints` (zones) if given.
    fn topology_endpoints(hints: &[&[&str]]) -> Vec<Endpoint> {
        ["n1", "n2", "n3", "n4"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut e = ep(&format!("10.0.0.{}", i + 1), n, 8080, READY);
                e.zone = Some(ZONES[i].to_string());
                e.zone_hints = hints
                    .get(i)
                    .map(|h| h.iter().map(|z| z.to_string()).collect())
                    .unwrap_or_default();
                e
            })
            .collect()
    }

    /// (case, keys, distribution, hints, receiving node, endpoints left by node).
    type TopologyCase<'a> = (
        &'a str,
        Vec<&'a str>,
        TrafficDistribution,
        &'a [&'a [&'a str]],
        &'a str,
        Vec<&'a str>,
    );

    /// The zones of n1..n4.
    const ZONES: [&str; 4] = ["z1", "z1", "z2", "z3"];

    fn cluster() -> Vec<crate::model::Node> {
        vec![
            node(
                "n1",
                &[
                    ("kubernetes.io/hostname", "n1"),
                    (ZONE_LABEL, "z1"),
                    ("rack", "r1"),
                ],
            ),
            node(
                "n2",
                &[
                    ("kubernetes.io/hostname", "n2"),
                    (ZONE_LABEL, "z1"),
                    ("rack", "r2"),
                ],
            ),
            node(
                "n3",
                &[
                    ("kubernetes.io/hostname", "n3"),
                    (ZONE_LABEL, "z2"),
                    ("rack", "r2"),
                ],
            ),
            node(
                "n4",
                &[("kubernetes.io/hostname", "n4"), (ZONE_LABEL, "z3")],
            ),
        ]
    }

    #[test]
    fn prefer_same_node_takes_the_receiving_nodes_endpoints_then_its_zones() {
        let nodes: crate::model::Map<String, crate::model::Node> =
            cluster().into_iter().map(|n| (n.name.clone(), n)).collect();
        let left = |endpoints: &[Endpoint], distribution, at: &str| -> Vec<String> {
            let svc = service(&[], distribution);
            let receiving = nodes
                .get(at)
                .cloned()
                .unwrap_or_else(|| node(at, &[(ZONE_LABEL, "z1")]));
            by_topology(endpoints.iter().collect(), &svc, &receiving)
                .iter()
                .map(|e| e.node.clone().unwrap_or_default())
                .collect()
        };
        let plain = topology_endpoints(&[]);
        // Without hints: the endpoints on the node; none there, the node's zone; else all.
        assert_eq!(
            left(&plain, TrafficDistribution::PreferSameNode, "n3"),
            ["n3"]
        );
        assert_eq!(
            left(&plain, TrafficDistribution::PreferSameNode, "n5"),
            ["n1", "n2"],
            "n5 (z1) has no endpoint: its zone's"
        );
        // Not asked for: every endpoint.
        assert_eq!(
            left(&plain, TrafficDistribution::Any, "n3"),
            ["n1", "n2", "n3", "n4"]
        );
        // Node hints, as the EndpointSlice controller sets them for PreferSameNode, decide
        // whatever the service says: n1's endpoint is hinted for n1 and n2.
        let mut hinted = topology_endpoints(&[]);
        for e in &mut hinted {
            e.node_hints = vec![e.node.clone().unwrap_or_default()];
        }
        hinted[0].node_hints.push("n2".into());
        hinted.remove(1);
        assert_eq!(left(&hinted, TrafficDistribution::Any, "n2"), ["n1"]);
        assert_eq!(left(&hinted, TrafficDistribution::Any, "n4"), ["n4"]);
        // Hints that name other nodes only: the zone steps decide (n5 is in z1, whose only
        // endpoint left is n1's).
        assert_eq!(
            left(&hinted, TrafficDistribution::PreferSameNode, "n5"),
            ["n1"]
        );
        // Hints on some endpoints only are ignored, as kube-proxy ignores them.
        let mut half = topology_endpoints(&[]);
        half[0].node_hints = vec!["n3".into()];
        assert_eq!(
            left(&half, TrafficDistribution::Any, "n3"),
            ["n1", "n2", "n3", "n4"]
        );
    }

    #[test]
    fn topology_keys_hints_and_prefer_close_narrow_the_endpoints() {
        let nodes: crate::model::Map<String, crate::model::Node> =
            cluster().into_iter().map(|n| (n.name.clone(), n)).collect();
        let none: &[&[&str]] = &[];
        let all_hinted: &[&[&str]] = &[&["z1"], &["z1"], &["z2"], &["z3"]];
        let half_hinted: &[&[&str]] = &[&["z1"], &["z1"], &[], &["z3"]];
        let hinted_away: &[&[&str]] = &[&["z2"], &["z2"], &["z2"], &["z3"]];
        // (case, keys, distribution, hints, receiving node, endpoints left by node)
        let cases: Vec<TopologyCase<'_>> = vec![
            (
                "no topology: all",
                vec![],
                TrafficDistribution::Any,
                none,
                "n1",
                vec!["n1", "n2", "n3", "n4"],
            ),
            (
                "hostname key: only the node's own",
                vec!["kubernetes.io/hostname"],
                TrafficDistribution::Any,
                none,
                "n2",
                vec!["n2"],
            ),
            (
                "first matching key wins",
                vec!["rack", ZONE_LABEL],
                TrafficDistribution::Any,
                none,
                "n3",
                vec!["n2", "n3"],
            ),
            (
                "the node's own rack",
                vec!["rack", ZONE_LABEL],
                TrafficDistribution::Any,
                none,
                "n1",
                vec!["n1"],
            ),
            (
                "a key with no match falls to the next",
                vec!["rack", ZONE_LABEL],
                TrafficDistribution::Any,
                none,
                "n5",
                vec!["n1", "n2"],
            ),
            (
                "a key the node lacks is skipped",
                vec!["rack", ZONE_LABEL],
                TrafficDistribution::Any,
                none,
                "n4",
                vec!["n4"],
            ),
            (
                "nothing matches: nothing, the connection fails",
                vec!["rack"],
                TrafficDistribution::Any,
                none,
                "n4",
                vec![],
            ),
            (
                "* takes any node",
                vec!["rack", "*"],
                TrafficDistribution::Any,
                none,
                "n4",
                vec!["n1", "n2", "n3", "n4"],
            ),
            (
                "keys win over hints",
                vec!["kubernetes.io/hostname"],
                TrafficDistribution::PreferClose,
                all_hinted,
                "n3",
                vec!["n3"],
            ),
            (
                "hints: the node's zone",
                vec![],
                TrafficDistribution::Any,
                all_hinted,
                "n1",
                vec!["n1", "n2"],
            ),
            (
                "hints only when every endpoint has some",
                vec![],
                TrafficDistribution::Any,
                half_hinted,
                "n1",
                vec!["n1", "n2", "n3", "n4"],
            ),
            (
                "hints for other zones only: all",
                vec![],
                TrafficDistribution::Any,
                hinted_away,
                "n1",
                vec!["n1", "n2", "n3", "n4"],
            ),
            (
                "PreferClose without hints: the node's zone",
                vec![],
                TrafficDistribution::PreferClose,
                none,
                "n3",
                vec!["n3"],
            ),
            (
                "PreferClose, nothing in the zone: all",
                vec![],
                TrafficDistribution::PreferClose,
                none,
                "n6",
                vec!["n1", "n2", "n3", "n4"],
            ),
        ];
        // Nodes without endpoints: n5 in a rack of its own in z1, n6 in a zone of its own.
        let others = [
            node("n5", &[(ZONE_LABEL, "z1"), ("rack", "r9")]),
            node("n6", &[(ZONE_LABEL, "z9")]),
        ];
        for (case, keys, distribution, hints, at, want) in cases {
            let endpoints = topology_endpoints(hints);
            let mut svc = service(&keys, distribution);
            svc.topology =
                crate::model::Topology::new(svc.topology.keys.clone(), &endpoints, &nodes);
            let receiving = nodes
                .get(at)
                .or_else(|| others.iter().find(|n| n.name == at))
                .unwrap();
            let got: Vec<&str> = by_topology(endpoints.iter().collect(), &svc, receiving)
                .iter()
                .map(|e| e.node.as_deref().unwrap())
                .collect();
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn topology_applies_to_cluster_policy_after_conditions() {
        let nodes: crate::model::Map<String, crate::model::Node> =
            cluster().into_iter().map(|n| (n.name.clone(), n)).collect();
        let mut endpoints = topology_endpoints(&[]);
        // n2's endpoint is terminating: the zone key finds only n1's.
        endpoints[1].conditions = EndpointConditions {
            ready: false,
            serving: true,
            terminating: true,
        };
        let mut svc = service(&[ZONE_LABEL], TrafficDistribution::Any);
        svc.topology = crate::model::Topology::new(svc.topology.keys.clone(), &endpoints, &nodes);
        let config = Config::default();
        let got = service_backends(
            &svc,
            &http(),
            &endpoints,
            &nodes["n2"],
            TrafficPolicy::Cluster,
            &config,
        );
        assert_eq!(ips(&got), ["10.0.0.1:8080/1"]);
        // Under Local the node's own endpoints are taken as they are (here: the terminating
        // one, for want of a ready one).
        let got = service_backends(
            &svc,
            &http(),
            &endpoints,
            &nodes["n2"],
            TrafficPolicy::Local,
            &config,
        );
        assert_eq!(ips(&got), ["10.0.0.2:8080/1"]);
    }
}
