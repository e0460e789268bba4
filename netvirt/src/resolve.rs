//! Which endpoints serve a service port on a given node, on which port, with which weight.
//!
//! This follows kube-proxy: ready endpoints serve new connections; when none is ready,
//! endpoints that are serving and terminating take over. Traffic policy `Local` keeps only the
//! endpoints on the node. An endpoint's port comes from its port of the same name and protocol
//! as the service port, or else from a numeric target port.

use std::net::IpAddr;

use crate::config::Config;
use crate::model::{Endpoint, ServicePort, TargetPort, TrafficPolicy};

/// One bucket's worth of endpoint: where to DNAT, and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    /// Endpoint address.
    pub ip: IpAddr,
    /// Endpoint port.
    pub port: u16,
    /// Bucket weight.
    pub weight: u16,
    /// Whether the endpoint runs on this node.
    pub local: bool,
}

/// The backends of `port` as seen from `node`, sorted by address and port.
pub fn backends(
    port: &ServicePort,
    endpoints: &[Endpoint],
    node: &str,
    policy: TrafficPolicy,
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
                local,
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
}
