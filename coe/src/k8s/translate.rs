//! Kubernetes objects → [`netvirt::model::Model`]. Pure: no I/O, no clock, deterministic.
//!
//! The input is a [`Snapshot`] of the watchers' stores; the output a [`Translation`]: the model,
//! the OVSDB remote of each node, and a [`Warning`] for every object or value left out because
//! it is not valid. Nothing here panics on bad input.
//!
//! The rules, kind by kind (docs/kubernetes.md has the same list for users):
//!
//! - **Service** (keyed `namespace/name`). Skipped without a warning when kube-proxy would
//!   skip it too: the `service.kubernetes.io/service-proxy-name` label, `type: ExternalName`,
//!   or headless (`clusterIP: None`). Cluster IPs come from `spec.clusterIPs` (else
//!   `spec.clusterIP`); `spec.externalIPs` give external IPs; for `type: LoadBalancer` the `ip`
//!   of each `status.loadBalancer.ingress` entry whose `ipMode` is not `Proxy` gives LB IPs.
//!   A port keeps its name, protocol (default TCP), port, target port (a number, a name, or
//!   the port itself when absent) and, for NodePort and LoadBalancer services, its node port.
//!   `sessionAffinity: ClientIP` takes `sessionAffinityConfig.clientIP.timeoutSeconds`
//!   (default 10800). `externalTrafficPolicy` / `internalTrafficPolicy` `Local` map to
//!   [`TrafficPolicy::Local`]. A LoadBalancer's `loadBalancerSourceRanges` become CIDRs and,
//!   with `externalTrafficPolicy: Local`, its `healthCheckNodePort` is kept. The annotation
//!   [`TOPOLOGY_KEYS_ANNOTATION`] gives topology keys ([`topology_keys`]); with
//!   `externalTrafficPolicy: Local` they are dropped with a warning. `trafficDistribution`
//!   `PreferClose` (or `PreferSameZone`) maps to [`TrafficDistribution::PreferClose`],
//!   `PreferSameNode` to [`TrafficDistribution::PreferSameNode`].
//! - **EndpointSlice** (`discovery.k8s.io/v1`), joined to its Service by the
//!   `kubernetes.io/service-name` label in the same namespace. `FQDN` slices and slices with the
//!   `service.kubernetes.io/headless` label are ignored. Each endpoint's first address becomes
//!   an [`Endpoint`] carrying the slice's ports (so named target ports resolve in
//!   `netvirt::resolve`), its node, zone, zone hints (`hints.forZones`) and conditions: a missing `ready` means ready, a
//!   missing `serving` means the value of `ready`, a missing `terminating` means not
//!   terminating. An address listed by several slices of one service is one endpoint with the
//!   union of their ports.
//! - **Node**: its `InternalIP` then `ExternalIP` addresses, its pod CIDR (`spec.podCIDRs`,
//!   IPv4 first, else `spec.podCIDR`) and its labels. Its OVSDB remote is
//!   `tcp:<first InternalIP>:6640`.
//! - **Pod**: one [`PodInterface`] keyed by the pod's uid, for a pod that is scheduled
//!   (`spec.nodeName`), not `hostNetwork`, not finished (`Succeeded`/`Failed`) and has an
//!   address. Its `iface_id`, the `external_ids:iface-id` the CNI sets on the pod's OVS
//!   interface, is [`iface_id`]: `<namespace>_<name>`. Kubernetes does not know the pod's MAC;
//!   the annotation [`MAC_ANNOTATION`] can give it.
//! - **Namespace**: an ELAN id from [`netvirt::ids::allocate`] over the names of all
//!   namespaces, so that every replica and every restart computes the same ids.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::slim::{self, Address, Meta};
use crate::addresses::AddressIndex;
use ipnet::IpNet;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use netvirt::model::{
    Endpoint, EndpointConditions, EndpointPort, MacAddr, Model, Namespace, Node, PodInterface,
    Protocol, Service, ServiceKey, ServicePort, ServiceType, SessionAffinity, TargetPort, Topology,
    TrafficDistribution, TrafficPolicy,
};

/// Services with this label belong to another proxy (kube-proxy's filter).
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// EndpointSlices with this label belong to headless services (kube-proxy's filter).
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// The label joining an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Optional pod annotation giving the MAC address of the pod's interface on `br-int`.
pub const MAC_ANNOTATION: &str = "svcflow.io/mac-address";
/// The default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;
/// The largest `timeoutSeconds` Kubernetes accepts (1 day).
pub const MAX_AFFINITY_TIMEOUT: u32 = 86_400;

/// The Service annotation holding topology keys (the `topologyKeys` of the service-topology
/// KEP, which the API no longer has): comma-separated node-label keys, `*` for any node.
pub const TOPOLOGY_KEYS_ANNOTATION: &str = "svcflow.io/topology-keys";
/// At most this many topology keys, as the KEP validated.
pub const MAX_TOPOLOGY_KEYS: usize = 16;

/// The label selector the Service watcher uses.
pub const SERVICE_SELECTOR: &str = "!service.kubernetes.io/service-proxy-name";
/// The label selector the EndpointSlice watcher uses.
pub const ENDPOINT_SLICE_SELECTOR: &str = "!service.kubernetes.io/headless";

/// The watched objects, as the watchers keep them ([`slim`] projections).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Services.
    pub services: Vec<Arc<slim::Service>>,
    /// EndpointSlices.
    pub endpoint_slices: Vec<Arc<slim::EndpointSlice>>,
    /// Nodes.
    pub nodes: Vec<Arc<slim::Node>>,
    /// Pods.
    pub pods: Vec<Arc<slim::Pod>>,
    /// Namespaces.
    pub namespaces: Vec<Arc<slim::Namespace>>,
}

/// What a [`Snapshot`] says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translation {
    /// The model.
    pub model: Model,
    /// The OVSDB remote of each node, by node name: `tcp:<InternalIP>:6640`.
    pub ovsdb_remotes: BTreeMap<String, String>,
    /// What was left out, in a stable order.
    pub warnings: Vec<Warning>,
}

/// An object or value that is not valid and was left out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Warning {
    /// `Service`, `EndpointSlice`, `Node`, `Pod` or `Namespace`.
    pub kind: &'static str,
    /// `namespace/name`, or `name` for cluster-scoped kinds.
    pub object: String,
    /// The field, e.g. `spec.ports[1].port`.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
    /// What was dropped.
    pub dropped: Dropped,
}

/// How much of an object a [`Warning`] cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dropped {
    /// The whole object.
    Object,
    /// Only the value named by the field; the rest of the object is used.
    Value,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.dropped {
            Dropped::Object => "object skipped",
            Dropped::Value => "value skipped",
        };
        write!(
            f,
            "{} {}: {}: {} ({what})",
            self.kind, self.object, self.field, self.reason
        )
    }
}

/// The `external_ids:iface-id` a CNI sets on a pod's OVS interface: `<namespace>_<name>`, the
/// convention of OVN-Kubernetes, which every CNI can compute from `K8S_POD_NAMESPACE` and
/// `K8S_POD_NAME`.
pub fn iface_id(namespace: &str, name: &str) -> String {
    format!("{namespace}_{name}")
}

/// Translates a snapshot.
pub fn translate(snapshot: &Snapshot) -> Translation {
    let mut t = Translator::default();
    t.namespaces(
        snapshot
            .namespaces
            .iter()
            .filter_map(|n| n.metadata.name.as_deref()),
    );
    for node in &snapshot.nodes {
        t.node(node);
    }
    for pod in &snapshot.pods {
        t.pod(pod);
    }
    for service in &snapshot.services {
        t.service(service);
    }
    let mut slices: Vec<&slim::EndpointSlice> =
        snapshot.endpoint_slices.iter().map(|s| &**s).collect();
    slices.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    for slice in slices {
        t.slice(slice);
    }
    let keys: Vec<ServiceKey> = t.model.endpoints.keys().cloned().collect();
    for key in keys {
        t.finish_endpoints(&key);
    }
    t.translation()
}

/// The translation under way: what [`translate`] builds at once and
/// [`super::keyed::Keyed`] keeps up to date object by object.
#[derive(Debug, Clone, Default)]
pub(crate) struct Translator {
    pub(crate) model: Model,
    pub(crate) ovsdb_remotes: BTreeMap<String, String>,
    /// Warnings by the object they are about (kind, `namespace/name`), so that translating
    /// an object again replaces its warnings.
    pub(crate) warnings: BTreeMap<(&'static str, String), Vec<Warning>>,
}

/// Names one object for warnings.
struct Obj {
    kind: &'static str,
    name: String,
}

impl Obj {
    fn new(kind: &'static str, meta: &Meta) -> Self {
        let name = meta.name.clone().unwrap_or_default();
        let name = match meta.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name,
        };
        Self { kind, name }
    }

    fn warning(&self, field: &str, reason: impl Into<String>, dropped: Dropped) -> Warning {
        Warning {
            kind: self.kind,
            object: self.name.clone(),
            field: field.to_string(),
            reason: reason.into(),
            dropped,
        }
    }
}

fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse::<IpAddr>()
        .map_err(|_| format!("`{text}` is not an IP address"))
}

fn port_number(value: i32) -> Result<u16, String> {
    u16::try_from(value)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("{value} is not a port (1 to 65535)"))
}

fn protocol(value: Option<&str>) -> Result<Protocol, String> {
    match value {
        None | Some("") => Ok(Protocol::Tcp),
        Some(p) => p
            .parse::<Protocol>()
            .map_err(|_| format!("`{p}` is not TCP, UDP or SCTP")),
    }
}

/// Parses the [`TOPOLOGY_KEYS_ANNOTATION`]: comma-separated node-label keys, in order of
/// preference, at most 16, no duplicates, `*` (any node) only last, as the topology KEP
/// validated `topologyKeys`. An empty annotation means no keys.
pub fn topology_keys(text: &str) -> Result<Vec<String>, String> {
    let mut keys: Vec<String> = Vec::new();
    if text.trim().is_empty() {
        return Ok(keys);
    }
    for key in text.split(',').map(str::trim) {
        if key.is_empty() {
            return Err(format!("`{text}` has an empty key"));
        }
        if keys.last().is_some_and(|k| k == "*") {
            return Err(format!("`{text}`: `*` must be the last key"));
        }
        if keys.iter().any(|k| k == key) {
            return Err(format!("`{text}`: `{key}` is listed twice"));
        }
        if key != "*" && key.contains(char::is_whitespace) {
            return Err(format!("`{key}` is not a label key"));
        }
        keys.push(key.to_string());
    }
    if keys.len() > MAX_TOPOLOGY_KEYS {
        return Err(format!(
            "`{text}` has {} keys (at most {MAX_TOPOLOGY_KEYS})",
            keys.len()
        ));
    }
    Ok(keys)
}

fn traffic_policy(value: Option<&str>) -> Result<TrafficPolicy, String> {
    match value {
        None | Some("") | Some("Cluster") => Ok(TrafficPolicy::Cluster),
        Some("Local") => Ok(TrafficPolicy::Local),
        Some(other) => Err(format!("`{other}` is not Cluster or Local")),
    }
}

impl Translator {
    fn warn(&mut self, w: Warning) {
        self.warnings
            .entry((w.kind, w.object.clone()))
            .or_default()
            .push(w);
    }

    /// The model, the remotes and every warning, sorted.
    pub(crate) fn translation(&self) -> Translation {
        let mut warnings: Vec<Warning> = self.warnings.values().flatten().cloned().collect();
        warnings.sort();
        warnings.dedup();
        Translation {
            model: self.model.clone(),
            ovsdb_remotes: self.ovsdb_remotes.clone(),
            warnings,
        }
    }

    /// ELAN ids for `names`, allocated over the whole set so that every replica and every
    /// restart computes the same ids.
    pub(crate) fn namespaces<'a>(&mut self, names: impl Iterator<Item = &'a str>) {
        let mut names: Vec<&str> = names.filter(|n| !n.is_empty()).collect();
        names.sort_unstable();
        self.model.namespaces = netvirt::ids::allocate(names, netvirt::pipeline::group::ELAN_MAX)
            .into_iter()
            .map(|(name, elan)| (name.clone(), Namespace { name, elan }))
            .collect();
    }

    /// After a service's slices: its endpoints in address order, and the labels its topology
    /// keys compare (of the nodes its endpoints run on).
    pub(crate) fn finish_endpoints(&mut self, key: &ServiceKey) {
        if let Some(endpoints) = self.model.endpoints.get_mut(key) {
            endpoints.sort_by_key(|e| e.address);
        }
        let Some(keys) = self
            .model
            .services
            .get(key)
            .map(|s| s.topology.keys.clone())
            .filter(|k| !k.is_empty())
        else {
            return;
        };
        let endpoints = self
            .model
            .endpoints
            .get(key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let topology = Topology::new(keys, endpoints, &self.model.nodes);
        if let Some(service) = self.model.services.get_mut(key) {
            service.topology = topology;
        }
    }

    pub(crate) fn node(&mut self, node: &slim::Node) {
        let obj = Obj::new("Node", &node.metadata);
        let Some(name) = node.metadata.name.clone().filter(|n| !n.is_empty()) else {
            self.warn(obj.warning("metadata.name", "missing", Dropped::Object));
            return;
        };
        let addresses = node.addresses.as_deref().unwrap_or_default();
        let mut ips: Vec<IpAddr> = Vec::new();
        let mut internal: Option<IpAddr> = None;
        for kind in ["InternalIP", "ExternalIP"] {
            for (i, a) in addresses.iter().enumerate() {
                if a.type_ != kind {
                    continue;
                }
                match parse_ip(&a.address) {
                    Ok(ip) => {
                        if kind == "InternalIP" && internal.is_none() {
                            internal = Some(ip);
                        }
                        if !ips.contains(&ip) {
                            ips.push(ip);
                        }
                    }
                    Err(e) => self.warn(obj.warning(
                        &format!("status.addresses[{i}].address"),
                        e,
                        Dropped::Value,
                    )),
                }
            }
        }
        let mut cidrs: Vec<(String, String)> = node
            .pod_cidrs
            .as_ref()
            .map(|c| {
                c.iter()
                    .enumerate()
                    .map(|(i, c)| (format!("spec.podCIDRs[{i}]"), c.clone()))
                    .collect()
            })
            .unwrap_or_default();
        if cidrs.is_empty() {
            if let Some(c) = node.pod_cidr.clone() {
                cidrs.push(("spec.podCIDR".to_string(), c));
            }
        }
        let mut parsed: Vec<IpNet> = Vec::new();
        for (field, text) in cidrs {
            match text.trim().parse::<IpNet>() {
                Ok(net) => parsed.push(net),
                Err(_) => self.warn(obj.warning(
                    &field,
                    format!("`{text}` is not a CIDR"),
                    Dropped::Value,
                )),
            }
        }
        // At most one of each family, the first one listed, as Kubernetes allows.
        let mut pod_cidrs: Vec<IpNet> = Vec::new();
        for net in parsed {
            let same_family = |c: &IpNet| {
                matches!(
                    (c, &net),
                    (IpNet::V4(_), IpNet::V4(_)) | (IpNet::V6(_), IpNet::V6(_))
                )
            };
            if pod_cidrs.iter().any(same_family) {
                self.warn(obj.warning(
                    "spec.podCIDRs",
                    format!("`{net}` is a second CIDR of its IP family"),
                    Dropped::Value,
                ));
            } else {
                pod_cidrs.push(net);
            }
        }
        // IPv4 first, as the module docs say, whichever family `spec.podCIDRs` lists first.
        pod_cidrs.sort_by_key(|c| matches!(c, IpNet::V6(_)));
        if let Some(ip) = internal {
            let remote = match ip {
                IpAddr::V4(v4) => format!("tcp:{v4}:6640"),
                IpAddr::V6(v6) => format!("tcp:[{v6}]:6640"),
            };
            self.ovsdb_remotes.insert(name.clone(), remote);
        }
        self.model.nodes.insert(
            name.clone(),
            Node {
                name,
                ips,
                pod_cidrs,
                labels: node.metadata.labels.to_map(),
            },
        );
    }

    pub(crate) fn pod(&mut self, pod: &slim::Pod) {
        let obj = Obj::new("Pod", &pod.metadata);
        let (Some(namespace), Some(name)) = (
            pod.metadata.namespace.as_deref().filter(|n| !n.is_empty()),
            pod.metadata.name.as_deref().filter(|n| !n.is_empty()),
        ) else {
            self.warn(obj.warning("metadata", "missing namespace or name", Dropped::Object));
            return;
        };
        if !pod.has_spec || pod.host_network == Some(true) {
            return;
        }
        let Some(node) = pod.node_name.as_deref().filter(|n| !n.is_empty()) else {
            return; // not scheduled yet
        };
        if matches!(pod.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return; // its address is released
        }
        let mut texts: Vec<(String, &str)> = pod
            .pod_ips
            .as_ref()
            .map(|ips| {
                ips.iter()
                    .enumerate()
                    .map(|(i, p)| (format!("status.podIPs[{i}].ip"), p.ip.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        if texts.is_empty() {
            if let Some(ip) = pod.pod_ip.as_deref() {
                texts.push(("status.podIP".to_string(), ip));
            }
        }
        let mut ips = Vec::new();
        for (field, text) in texts {
            match parse_ip(text) {
                Ok(ip) if !ips.contains(&ip) => ips.push(ip),
                Ok(_) => {}
                Err(e) => self.warn(obj.warning(&field, e, Dropped::Value)),
            }
        }
        if ips.is_empty() {
            return; // no address yet
        }
        let uid = match pod.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
            Some(uid) => uid.to_string(),
            None => {
                self.warn(obj.warning("metadata.uid", "missing", Dropped::Object));
                return;
            }
        };
        let mac = match pod.metadata.annotations.get(MAC_ANNOTATION) {
            Some(text) => match text.parse::<MacAddr>() {
                Ok(mac) => Some(mac),
                Err(e) => {
                    self.warn(obj.warning(
                        &format!("metadata.annotations[{MAC_ANNOTATION}]"),
                        e.reason,
                        Dropped::Value,
                    ));
                    None
                }
            },
            None => None,
        };
        self.model.pods.insert(
            uid.clone(),
            PodInterface {
                uid,
                namespace: namespace.to_string(),
                name: name.to_string(),
                ips,
                mac,
                node: node.to_string(),
                iface_id: iface_id(namespace, name),
            },
        );
    }

    pub(crate) fn service(&mut self, svc: &slim::Service) {
        let obj = Obj::new("Service", &svc.metadata);
        if svc.metadata.labels.contains_key(SERVICE_PROXY_NAME_LABEL) {
            return;
        }
        let (Some(namespace), Some(name)) = (
            svc.metadata.namespace.as_deref().filter(|n| !n.is_empty()),
            svc.metadata.name.as_deref().filter(|n| !n.is_empty()),
        ) else {
            self.warn(obj.warning("metadata", "missing namespace or name", Dropped::Object));
            return;
        };
        let Some(spec) = svc.spec.as_ref() else {
            self.warn(obj.warning("spec", "missing", Dropped::Object));
            return;
        };
        let more = spec.more();
        let kind = match spec.type_.as_deref() {
            None | Some("") | Some("ClusterIP") => ServiceType::ClusterIp,
            Some("NodePort") => ServiceType::NodePort,
            Some("LoadBalancer") => ServiceType::LoadBalancer,
            Some("ExternalName") => return,
            Some(other) => {
                self.warn(obj.warning(
                    "spec.type",
                    format!("`{other}` is not ClusterIP, NodePort, LoadBalancer or ExternalName"),
                    Dropped::Object,
                ));
                return;
            }
        };
        let ip_texts: Vec<(String, &str)> =
            match spec.cluster_ips.as_ref().filter(|v| !v.is_empty()) {
                Some(ips) => ips
                    .iter()
                    .enumerate()
                    .map(|(i, ip)| (format!("spec.clusterIPs[{i}]"), ip.as_str()))
                    .collect(),
                None => spec
                    .cluster_ip
                    .iter()
                    .map(|ip| ("spec.clusterIP".to_string(), ip.as_str()))
                    .collect(),
            };
        if ip_texts.iter().any(|(_, t)| *t == "None") {
            return; // headless
        }
        let mut cluster_ips = Vec::new();
        for (field, text) in ip_texts.into_iter().filter(|(_, t)| !t.is_empty()) {
            match parse_ip(text) {
                Ok(ip) if !cluster_ips.contains(&ip) => cluster_ips.push(ip),
                Ok(_) => {}
                Err(e) => self.warn(obj.warning(&field, e, Dropped::Value)),
            }
        }
        if cluster_ips.is_empty() {
            self.warn(obj.warning("spec.clusterIPs", "no valid cluster IP", Dropped::Object));
            return;
        }
        let mut ports = Vec::new();
        for (i, p) in spec.ports.iter().flatten().enumerate() {
            match service_port(p, kind) {
                Ok(port) => ports.push(port),
                Err((field, reason)) => self.warn(obj.warning(
                    &format!("spec.ports[{i}]{field}"),
                    reason,
                    Dropped::Value,
                )),
            }
        }
        if ports.is_empty() {
            self.warn(obj.warning("spec.ports", "no valid port", Dropped::Object));
            return;
        }
        let mut external_ips = Vec::new();
        for (i, text) in more.external_ips.iter().flatten().enumerate() {
            match parse_ip(text) {
                Ok(ip) if !external_ips.contains(&ip) => external_ips.push(ip),
                Ok(_) => {}
                Err(e) => {
                    self.warn(obj.warning(&format!("spec.externalIPs[{i}]"), e, Dropped::Value))
                }
            }
        }
        let mut lb_ingress_ips = Vec::new();
        if kind == ServiceType::LoadBalancer {
            let ingress = svc
                .load_balancer
                .as_ref()
                .and_then(|l| l.ingress.as_deref())
                .unwrap_or_default();
            for (i, entry) in ingress.iter().enumerate() {
                // ipMode Proxy: the load balancer proxies to the nodes; the VIP never
                // reaches them, and kube-proxy does not program it either.
                if entry.ip_mode.as_deref() == Some("Proxy") {
                    continue;
                }
                let Some(text) = entry.ip.as_deref().filter(|t| !t.is_empty()) else {
                    continue; // hostname-only entries
                };
                match parse_ip(text) {
                    Ok(ip) if !lb_ingress_ips.contains(&ip) => lb_ingress_ips.push(ip),
                    Ok(_) => {}
                    Err(e) => self.warn(obj.warning(
                        &format!("status.loadBalancer.ingress[{i}].ip"),
                        e,
                        Dropped::Value,
                    )),
                }
            }
        }
        let session_affinity = match more.session_affinity.as_deref() {
            None | Some("") | Some("None") => SessionAffinity::None,
            Some("ClientIP") => {
                let timeout = more
                    .session_affinity_config
                    .as_ref()
                    .and_then(|c| c.client_ip.as_ref())
                    .and_then(|c| c.timeout_seconds);
                let timeout_seconds = match timeout {
                    None => DEFAULT_AFFINITY_TIMEOUT,
                    Some(t) => match u32::try_from(t) {
                        Ok(t) if (1..=MAX_AFFINITY_TIMEOUT).contains(&t) => t,
                        _ => {
                            self.warn(obj.warning(
                                "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                                format!(
                                    "{t} is not 1 to {MAX_AFFINITY_TIMEOUT}; using {DEFAULT_AFFINITY_TIMEOUT}"
                                ),
                                Dropped::Value,
                            ));
                            DEFAULT_AFFINITY_TIMEOUT
                        }
                    },
                };
                SessionAffinity::ClientIp { timeout_seconds }
            }
            Some(other) => {
                self.warn(obj.warning(
                    "spec.sessionAffinity",
                    format!("`{other}` is not None or ClientIP; using None"),
                    Dropped::Value,
                ));
                SessionAffinity::None
            }
        };
        let mut policy = |field: &str, value: Option<&str>| {
            traffic_policy(value).unwrap_or_else(|e| {
                self.warn(obj.warning(field, format!("{e}; using Cluster"), Dropped::Value));
                TrafficPolicy::Cluster
            })
        };
        let external_traffic_policy = policy(
            "spec.externalTrafficPolicy",
            more.external_traffic_policy.as_deref(),
        );
        let internal_traffic_policy = policy(
            "spec.internalTrafficPolicy",
            more.internal_traffic_policy.as_deref(),
        );
        let mut lb_source_ranges: Vec<IpNet> = Vec::new();
        if kind == ServiceType::LoadBalancer {
            for (i, text) in more
                .load_balancer_source_ranges
                .iter()
                .flatten()
                .enumerate()
            {
                match text.trim().parse::<IpNet>() {
                    Ok(net) if !lb_source_ranges.contains(&net.trunc()) => {
                        lb_source_ranges.push(net.trunc())
                    }
                    Ok(_) => {}
                    Err(_) => self.warn(obj.warning(
                        &format!("spec.loadBalancerSourceRanges[{i}]"),
                        format!("`{text}` is not a CIDR"),
                        Dropped::Value,
                    )),
                }
            }
        }
        let health_check_node_port = match more.health_check_node_port {
            Some(n)
                if n != 0
                    && kind == ServiceType::LoadBalancer
                    && external_traffic_policy == TrafficPolicy::Local =>
            {
                match port_number(n) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.warn(obj.warning("spec.healthCheckNodePort", e, Dropped::Value));
                        None
                    }
                }
            }
            _ => None,
        };
        let annotation = svc.metadata.annotations.get(TOPOLOGY_KEYS_ANNOTATION);
        let field = format!("metadata.annotations[{TOPOLOGY_KEYS_ANNOTATION}]");
        let topology_keys = match annotation.map(|text| topology_keys(text)) {
            None => Vec::new(),
            Some(Err(e)) => {
                self.warn(obj.warning(&field, e, Dropped::Value));
                Vec::new()
            }
            Some(Ok(keys))
                if !keys.is_empty() && external_traffic_policy == TrafficPolicy::Local =>
            {
                self.warn(obj.warning(
                    &field,
                    "topology keys cannot be used with externalTrafficPolicy Local",
                    Dropped::Value,
                ));
                Vec::new()
            }
            Some(Ok(keys)) => keys,
        };
        let traffic_distribution = match more.traffic_distribution.as_deref() {
            None | Some("") => TrafficDistribution::Any,
            Some("PreferClose") | Some("PreferSameZone") => TrafficDistribution::PreferClose,
            Some("PreferSameNode") => TrafficDistribution::PreferSameNode,
            Some(other) => {
                self.warn(obj.warning(
                    "spec.trafficDistribution",
                    format!(
                        "`{other}` is not PreferClose, PreferSameZone or PreferSameNode; ignored"
                    ),
                    Dropped::Value,
                ));
                TrafficDistribution::Any
            }
        };
        let key = ServiceKey::new(namespace, name);
        self.model.endpoints.insert(key.clone(), Vec::new());
        self.model.services.insert(
            key.clone(),
            Service {
                key,
                uid: svc.metadata.uid.clone().unwrap_or_default(),
                kind,
                cluster_ips,
                ports,
                external_ips,
                lb_ingress_ips,
                session_affinity,
                external_traffic_policy,
                internal_traffic_policy,
                lb_source_ranges,
                health_check_node_port,
                topology: Topology {
                    keys: topology_keys,
                    node_labels: BTreeMap::new(),
                },
                traffic_distribution,
            },
        );
    }

    pub(crate) fn slice(&mut self, slice: &slim::EndpointSlice) {
        let obj = Obj::new("EndpointSlice", &slice.metadata);
        let labels = &slice.metadata.labels;
        if labels.contains_key(HEADLESS_LABEL) {
            return;
        }
        let Some(service) = labels.get(SERVICE_NAME_LABEL) else {
            return; // not managed for a Service
        };
        let namespace = slice.metadata.namespace.as_deref().unwrap_or_default();
        let key = ServiceKey::new(namespace, service);
        if !self.model.endpoints.contains_key(&key) {
            return; // its Service is unknown, skipped or filtered
        }
        if slice.address_type != "IPv4" && slice.address_type != "IPv6" {
            return; // FQDN slices are not for proxies
        }
        let mut ports = Vec::new();
        for (i, p) in slice.ports.iter().flatten().enumerate() {
            let Some(number) = p.port else {
                continue; // "all ports": not used for Services
            };
            let port = match port_number(number) {
                Ok(n) => n,
                Err(e) => {
                    self.warn(obj.warning(&format!("ports[{i}].port"), e, Dropped::Value));
                    continue;
                }
            };
            let protocol = match protocol(p.protocol.as_deref()) {
                Ok(p) => p,
                Err(e) => {
                    self.warn(obj.warning(&format!("ports[{i}].protocol"), e, Dropped::Value));
                    continue;
                }
            };
            ports.push(EndpointPort {
                name: p.name.clone().unwrap_or_default(),
                protocol,
                port,
            });
        }
        let mut found: Vec<Endpoint> = Vec::new();
        for (i, e) in slice.endpoints.iter().enumerate() {
            // Consumers use the first address (the API documents the others as unused).
            let Some(first) = &e.address else {
                self.warn(obj.warning(
                    &format!("endpoints[{i}].addresses"),
                    "empty",
                    Dropped::Value,
                ));
                continue;
            };
            let parsed = match first {
                Address::Ip(ip) => Ok(*ip),
                Address::Text(text) => parse_ip(text),
            };
            let address = match parsed {
                Ok(ip) if ip.is_ipv4() == (slice.address_type == "IPv4") => ip,
                Ok(_) => {
                    self.warn(obj.warning(
                        &format!("endpoints[{i}].addresses[0]"),
                        format!("`{first}` is not an {} address", slice.address_type),
                        Dropped::Value,
                    ));
                    continue;
                }
                Err(err) => {
                    self.warn(obj.warning(
                        &format!("endpoints[{i}].addresses[0]"),
                        err,
                        Dropped::Value,
                    ));
                    continue;
                }
            };
            let c = e.conditions.as_ref();
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let conditions = EndpointConditions {
                ready,
                serving: c.and_then(|c| c.serving).unwrap_or(ready),
                terminating: c.and_then(|c| c.terminating).unwrap_or(false),
            };
            found.push(Endpoint {
                address,
                ports: ports.clone(),
                node: e
                    .node_name
                    .as_deref()
                    .filter(|n| !n.is_empty())
                    .map(String::from),
                conditions,
                zone: e
                    .zone
                    .as_deref()
                    .filter(|z| !z.is_empty())
                    .map(String::from),
                zone_hints: hint_names(
                    e.hints
                        .iter()
                        .flat_map(|h| h.for_zones.iter().flatten().map(|z| &z.name)),
                ),
                node_hints: hint_names(
                    e.hints
                        .iter()
                        .flat_map(|h| h.for_nodes.iter().flatten().map(|n| &n.name)),
                ),
                weight: None,
            });
        }
        let Some(list) = self.model.endpoints.get_mut(&key) else {
            return;
        };
        let mut at = AddressIndex::default();
        for e in found {
            match at.find(list, e.address).and_then(|k| list.get_mut(k)) {
                Some(existing) => {
                    for p in e.ports {
                        if !existing.ports.contains(&p) {
                            existing.ports.push(p);
                        }
                    }
                    if e.conditions.ready && !existing.conditions.ready {
                        existing.conditions = e.conditions;
                    }
                }
                None => at.push(list, e),
            }
        }
        // The model keeps the list until the service's slices change: at its length, not
        // with the room pushing left (an `Endpoint` is ~150 bytes; issue 19).
        list.shrink_to_fit();
    }
}

/// One service port, or the field suffix and reason it is not valid.
fn service_port(p: &core::ServicePort, kind: ServiceType) -> Result<ServicePort, (String, String)> {
    let port = port_number(p.port).map_err(|e| (".port".to_string(), e))?;
    let protocol = protocol(p.protocol.as_deref()).map_err(|e| (".protocol".to_string(), e))?;
    let target_port = match &p.target_port {
        None => TargetPort::Number(port),
        Some(IntOrString::Int(n)) => {
            TargetPort::Number(port_number(*n).map_err(|e| (".targetPort".to_string(), e))?)
        }
        Some(IntOrString::String(s)) if s.is_empty() => TargetPort::Number(port),
        Some(IntOrString::String(s)) => match s.parse::<i32>() {
            Ok(n) => {
                TargetPort::Number(port_number(n).map_err(|e| (".targetPort".to_string(), e))?)
            }
            Err(_) => TargetPort::Name(s.clone()),
        },
    };
    let node_port = match (kind, p.node_port) {
        (ServiceType::NodePort | ServiceType::LoadBalancer, Some(n)) if n != 0 => {
            Some(port_number(n).map_err(|e| (".nodePort".to_string(), e))?)
        }
        _ => None,
    };
    Ok(ServicePort {
        name: p.name.clone().unwrap_or_default(),
        protocol,
        port,
        target_port,
        node_port,
    })
}

/// The names of an endpoint's hints, without empty ones.
fn hint_names<'a>(names: impl Iterator<Item = &'a String>) -> Vec<String> {
    names.filter(|n| !n.is_empty()).cloned().collect()
}
