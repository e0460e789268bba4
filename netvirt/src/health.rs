//! Local endpoints, as kube-proxy reports them:
//!
//! - `healthCheckNodePort`: what each node answers for the LoadBalancer services with
//!   `externalTrafficPolicy: Local`, as kube-proxy's health-check server does. A load balancer
//!   probes every node on the service's health-check node port and sends traffic only to the
//!   nodes that answer 200, which are the nodes with local endpoints;
//! - [`no_local_endpoints`]: the service ports with a `Local` traffic policy that have no
//!   local endpoint on a node, which kube-proxy counts in
//!   `kubeproxy_sync_proxy_rules_no_local_endpoints_total`.
//!
//! Pure: the server that answers lives in the `svcflow` daemon.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::model::{
    DiffItem, Endpoint, Map, Model, Service, ServiceKey, ServiceType, TrafficPolicy, diff_key,
};
use crate::resolve::endpoint_port;

/// What one health-check node port answers on one node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    /// The service.
    pub service: ServiceKey,
    /// Its ready endpoints on the node, counted as kube-proxy counts them: distinct
    /// (address, port) pairs over the service's ports.
    pub local_endpoints: usize,
}

impl HealthCheck {
    /// The HTTP status: 200 with local endpoints, 503 without.
    pub fn status(&self) -> u16 {
        if self.local_endpoints > 0 { 200 } else { 503 }
    }

    /// The whole HTTP response, as kube-proxy's health-check server gives it: the status,
    /// JSON, the endpoint count as the load-balancing weight, and the connection closed.
    pub fn http_response(&self) -> String {
        http_response(self.status(), self.local_endpoints, &self.body())
    }

    /// The JSON body, as kube-proxy's:
    /// `{"service":{"namespace":"default","name":"web"},"localEndpoints":1,"serviceProxyHealthy":true}`.
    pub fn body(&self) -> String {
        format!(
            "{{\"service\":{{\"namespace\":{},\"name\":{}}},\"localEndpoints\":{},\"serviceProxyHealthy\":true}}",
            json_string(&self.service.namespace),
            json_string(&self.service.name),
            self.local_endpoints
        )
    }
}

/// An HTTP response of a health-check node port: `status` (200 or 503), `body` as JSON, and
/// `local_endpoints` as the load-balancing weight, the connection closed after it.
pub fn http_response(status: u16, local_endpoints: usize, body: &str) -> String {
    let reason = if status == 200 {
        "OK"
    } else {
        "Service Unavailable"
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n\
         X-Content-Type-Options: nosniff\r\nX-Load-Balancing-Endpoint-Weight: {local_endpoints}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// The health checks `node` serves, by health-check node port: one per service that has a
/// `health_check_node_port` and `externalTrafficPolicy: Local`. When two services claim one
/// port (the API server forbids it) the first by namespace/name keeps it.
pub fn health_checks(model: &Model, node: &str) -> BTreeMap<u16, HealthCheck> {
    let mut out = BTreeMap::new();
    for (key, service) in &model.services {
        if let Some((port, check)) = health_check(service, model.endpoints_of(key), node) {
            out.entry(port).or_insert(check);
        }
    }
    out
}

/// [`health_checks`] kept from model to model in time proportional to what changed: the
/// services and endpoints that differ from the previous model's (persistent maps, so the diff
/// skips what the two share) are checked again, the others are not looked at. For a server
/// that follows every change of a large cluster.
#[derive(Default)]
pub struct KeptHealthChecks {
    /// What the last update was for.
    seen: Option<Seen>,
    /// Each port's claims, by service: the first one answers.
    claims: BTreeMap<u16, BTreeMap<ServiceKey, HealthCheck>>,
    /// The port each service claims.
    ports: BTreeMap<ServiceKey, u16>,
}

impl KeptHealthChecks {
    /// Brings the checks to `model`'s, for `node`.
    pub fn update(&mut self, model: &Model, node: &str) {
        match self.seen.take() {
            // A key in both diffs may be checked twice, which gives what checking it once
            // does: no set of the changed keys is built (a full load changes every service).
            // Only a service that has a check, or had one, is looked at again: the diff holds
            // the service as it is now, and a service's endpoints matter only to a service
            // that claims a port (after the services' diff, `ports` holds those). Looking
            // every changed key up in the model again was 3 % of the daemon's CPU in a full
            // load of 30,000 services, none of them with a check.
            Some(seen) if seen.node == node => {
                for d in seen.services.diff(&model.services) {
                    let now = match &d {
                        DiffItem::Add(_, s) | DiffItem::Update { new: (_, s), .. } => Some(*s),
                        DiffItem::Remove(..) => None,
                    };
                    let key = diff_key(&d);
                    if now.and_then(check_port).is_some() || self.ports.contains_key(key) {
                        self.check(key, model, node);
                    }
                }
                for d in seen.endpoints.diff(&model.endpoints) {
                    let key = diff_key(&d);
                    if self.ports.contains_key(key) {
                        self.check(key, model, node);
                    }
                }
            }
            _ => {
                self.claims.clear();
                self.ports.clear();
                for key in model.services.keys() {
                    self.check(key, model, node);
                }
            }
        }
        self.seen = Some(Seen {
            services: model.services.clone(),
            endpoints: model.endpoints.clone(),
            node: node.to_string(),
        });
    }

    /// Checks service `key` again, as `model` has it.
    fn check(&mut self, key: &ServiceKey, model: &Model, node: &str) {
        if let Some(port) = self.ports.remove(key)
            && let Some(claims) = self.claims.get_mut(&port)
        {
            claims.remove(key);
            if claims.is_empty() {
                self.claims.remove(&port);
            }
        }
        let Some(service) = model.services.get(key) else {
            return;
        };
        if let Some((port, check)) = health_check(service, model.endpoints_of(key), node) {
            self.claims
                .entry(port)
                .or_default()
                .insert(key.clone(), check);
            self.ports.insert(key.clone(), port);
        }
    }

    /// What each port answers, as [`health_checks`] gives it.
    pub fn checks(&self) -> BTreeMap<u16, HealthCheck> {
        self.claims
            .iter()
            .filter_map(|(port, claims)| Some((*port, claims.values().next()?.clone())))
            .collect()
    }
}

/// The maps and node of a [`KeptHealthChecks`] update.
struct Seen {
    services: Map<ServiceKey, Service>,
    endpoints: Map<ServiceKey, Vec<Endpoint>>,
    node: String,
}

/// `service`'s health-check node port, if it answers: it has one, and
/// `externalTrafficPolicy: Local`.
fn check_port(service: &Service) -> Option<u16> {
    service
        .health_check_node_port
        .filter(|_| service.external_traffic_policy == TrafficPolicy::Local)
}

/// What `service`'s health-check node port answers on `node`, and the port: `None` unless it
/// has one and `externalTrafficPolicy: Local`.
pub fn health_check(
    service: &Service,
    endpoints: &[Endpoint],
    node: &str,
) -> Option<(u16, HealthCheck)> {
    let port = check_port(service)?;
    let mut local: BTreeSet<(IpAddr, u16)> = BTreeSet::new();
    for e in endpoints
        .iter()
        .filter(|e| e.conditions.ready && e.node.as_deref() == Some(node))
    {
        for p in &service.ports {
            if let Some(number) = endpoint_port(p, e) {
                local.insert((e.address, number));
            }
        }
    }
    Some((
        port,
        HealthCheck {
            service: service.key.clone(),
            local_endpoints: local.len(),
        },
    ))
}

/// How many ports of a service have a `Local` traffic policy and no local endpoint on a
/// node, by policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NoLocal {
    /// `internalTrafficPolicy: Local` (traffic to its cluster IPs from the node's pods).
    pub internal: usize,
    /// `externalTrafficPolicy: Local`, for services reached from outside (node ports, load
    /// balancer or external IPs).
    pub external: usize,
}

impl std::ops::Add for NoLocal {
    type Output = NoLocal;

    fn add(self, other: NoLocal) -> NoLocal {
        NoLocal {
            internal: self.internal.saturating_add(other.internal),
            external: self.external.saturating_add(other.external),
        }
    }
}

/// Takes counts away, never below zero.
impl std::ops::Sub for NoLocal {
    type Output = NoLocal;

    fn sub(self, other: NoLocal) -> NoLocal {
        NoLocal {
            internal: self.internal.saturating_sub(other.internal),
            external: self.external.saturating_sub(other.external),
        }
    }
}

/// The ports of `service` that `node` serves under a `Local` traffic policy without a local
/// endpoint: traffic to them from the node's pods (internal) or from outside (external)
/// finds nothing to go to there, as kube-proxy counts them (a ready endpoint on the node
/// that serves the port counts as local).
pub fn no_local_endpoints(service: &Service, endpoints: &[Endpoint], node: &str) -> NoLocal {
    let external = service.external_traffic_policy == TrafficPolicy::Local
        && (matches!(
            service.kind,
            ServiceType::NodePort | ServiceType::LoadBalancer
        ) || !service.external_ips.is_empty());
    let internal = service.internal_traffic_policy == TrafficPolicy::Local;
    if !external && !internal {
        return NoLocal::default();
    }
    let bare = service
        .ports
        .iter()
        .filter(|p| {
            !endpoints.iter().any(|e| {
                e.conditions.ready
                    && e.node.as_deref() == Some(node)
                    && endpoint_port(p, e).is_some()
            })
        })
        .count();
    NoLocal {
        internal: if internal { bare } else { 0 },
        external: if external { bare } else { 0 },
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Endpoint, EndpointConditions, Protocol, Service, ServicePort, ServiceType, TargetPort,
    };

    fn service(name: &str, hc: Option<u16>, policy: TrafficPolicy) -> Service {
        Service {
            key: ServiceKey::new("default", name),
            uid: name.into(),
            kind: ServiceType::LoadBalancer,
            cluster_ips: vec!["10.96.0.1".parse().unwrap()],
            ports: ["http", "https"]
                .iter()
                .enumerate()
                .map(|(i, n)| ServicePort {
                    name: (*n).into(),
                    protocol: Protocol::Tcp,
                    port: 80 + i as u16,
                    target_port: TargetPort::Number(8080 + i as u16),
                    node_port: Some(30080 + i as u16),
                })
                .collect(),
            external_ips: vec![],
            lb_ingress_ips: vec![],
            session_affinity: Default::default(),
            external_traffic_policy: policy,
            internal_traffic_policy: TrafficPolicy::Cluster,
            lb_source_ranges: vec![],
            health_check_node_port: hc,
            topology: Default::default(),
            traffic_distribution: Default::default(),
        }
    }

    fn ep(ip: &str, node: &str, ready: bool) -> Endpoint {
        Endpoint {
            address: ip.parse().unwrap(),
            ports: vec![],
            node: Some(node.into()),
            conditions: EndpointConditions {
                ready,
                serving: true,
                terminating: !ready,
            },
            zone: None,
            zone_hints: vec![],
            node_hints: Vec::new(),
            weight: None,
        }
    }

    #[test]
    fn counts_ready_local_endpoints_per_port_and_answers_like_kube_proxy() {
        let mut model = Model::default();
        for (svc, eps) in [
            (
                service("web", Some(32000), TrafficPolicy::Local),
                vec![ep("10.0.0.1", "n1", true), ep("10.0.0.2", "n2", true)],
            ),
            (
                service("draining", Some(32001), TrafficPolicy::Local),
                vec![ep("10.0.0.3", "n1", false)],
            ),
            // No health check without Local, or without a port.
            (
                service("cluster", Some(32002), TrafficPolicy::Cluster),
                vec![ep("10.0.0.4", "n1", true)],
            ),
            (
                service("none", None, TrafficPolicy::Local),
                vec![ep("10.0.0.5", "n1", true)],
            ),
        ] {
            model.endpoints.insert(svc.key.clone(), eps);
            model.services.insert(svc.key.clone(), svc);
        }
        let n1 = health_checks(&model, "n1");
        assert_eq!(n1.keys().copied().collect::<Vec<_>>(), [32000, 32001]);
        // Two ports, one pod: two (address, port) pairs, as kube-proxy counts.
        assert_eq!(n1[&32000].local_endpoints, 2);
        assert_eq!(n1[&32000].status(), 200);
        assert_eq!(
            n1[&32000].body(),
            r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":2,"serviceProxyHealthy":true}"#
        );
        // Only a terminating endpoint: not counted.
        assert_eq!(n1[&32001].local_endpoints, 0);
        assert_eq!(n1[&32001].status(), 503);
        let n3 = health_checks(&model, "n3");
        assert_eq!(n3[&32000].status(), 503);
    }

    #[test]
    fn ports_under_a_local_policy_without_a_ready_local_endpoint_are_counted_by_policy() {
        // A LoadBalancer with externalTrafficPolicy Local and two ports, endpoints on n1
        // (ready) and n2 (terminating).
        let web = service("web", Some(32000), TrafficPolicy::Local);
        let eps = [ep("10.0.0.1", "n1", true), ep("10.0.0.2", "n2", false)];
        assert_eq!(no_local_endpoints(&web, &eps, "n1"), NoLocal::default());
        let both = NoLocal {
            internal: 0,
            external: 2,
        };
        assert_eq!(no_local_endpoints(&web, &eps, "n2"), both);
        assert_eq!(no_local_endpoints(&web, &[], "n3"), both);
        // Internal Local counts too, for any type; external only for outside reach.
        let mut internal = service("internal", None, TrafficPolicy::Local);
        internal.kind = ServiceType::ClusterIp;
        internal.internal_traffic_policy = TrafficPolicy::Local;
        assert_eq!(
            no_local_endpoints(&internal, &eps, "n2"),
            NoLocal {
                internal: 2,
                external: 0
            }
        );
        internal.external_ips = vec!["192.0.2.9".parse().unwrap()];
        assert_eq!(
            no_local_endpoints(&internal, &eps, "n2"),
            NoLocal {
                internal: 2,
                external: 2
            }
        );
        // Cluster policies are never counted.
        let cluster = service("cluster", None, TrafficPolicy::Cluster);
        assert_eq!(no_local_endpoints(&cluster, &[], "n1"), NoLocal::default());
        assert_eq!(both + both - both, both);
    }

    /// Random edits (services gaining, moving or losing a port, their policy, endpoints
    /// coming, going, moving node or readiness), each followed by an update: the kept checks
    /// are always what a full computation gives, and a change of node starts over.
    #[test]
    fn kept_checks_follow_every_change_as_a_full_computation_would() {
        let mut x: u64 = 0x5356;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut model = Model::default();
        let mut kept = KeptHealthChecks::default();
        for round in 0..3000 {
            let name = format!("s{}", next(6));
            let key = ServiceKey::new("default", &name);
            match next(5) {
                0 => {
                    // Few ports, so that services claim the same one.
                    let hc = (next(3) > 0).then(|| 32000 + next(3) as u16);
                    let policy = if next(4) > 0 {
                        TrafficPolicy::Local
                    } else {
                        TrafficPolicy::Cluster
                    };
                    model
                        .services
                        .insert(key.clone(), service(&name, hc, policy));
                }
                1 => {
                    model.services.remove(&key);
                }
                2 => {
                    let e = ep(
                        &format!("10.244.0.{}", next(4)),
                        &format!("n{}", next(2)),
                        next(3) > 0,
                    );
                    model.endpoints.entry(key).or_default().push(e);
                }
                3 => {
                    model.endpoints.remove(&key);
                }
                _ => {
                    if let Some(eps) = model.endpoints.get_mut(&key)
                        && !eps.is_empty()
                    {
                        let i = next(eps.len() as u64) as usize;
                        eps[i].conditions.ready = !eps[i].conditions.ready;
                    }
                }
            }
            let node = if round % 500 < 450 { "n0" } else { "n1" };
            kept.update(&model, node);
            assert_eq!(kept.checks(), health_checks(&model, node), "round {round}");
        }
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
    }
}
