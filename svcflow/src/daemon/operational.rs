//! The operational view the REST northbound serves: per service, its group on each node with
//! buckets, endpoints, weights and counters, and its flows with counters, read live from the
//! switches (flow and group statistics) and explained by the desired state last synced, which
//! each node's task builds when asked (nothing is kept for it between requests).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use coe::rest::Published;
use coe::rest::operational::{
    BoxFuture, BucketState, FlowState, GroupState, NodePlan, NodeState, OperationalSource,
    ServiceState, TraceFailure, Unreported,
};
use netvirt::desired::ServicePortState;
use netvirt::flow::{DumpFlow, FlowEntry, FlowKey};
use netvirt::pipeline::cookie;
use openflow::driver::{FlowFilter, SwitchHandle};
use openflow::msg::{GroupStats, MultipartBody};
use tokio::sync::{mpsc, oneshot};

use super::agent::Query;

/// `OFPG_ALL`.
const OFPG_ALL: u32 = 0xffff_fffc;

/// What a node's switch was last synced to: each service port's groups and backends, and the
/// model they came from.
pub(crate) struct Snapshot {
    pub services: Arc<BTreeMap<String, ServicePortState>>,
    pub model: Arc<Published>,
}

/// A synced node: its switch, and how to ask its task for a [`Snapshot`].
#[derive(Clone)]
pub(crate) struct NodeView {
    /// The switch connection it serves.
    pub connection: u64,
    pub switch: SwitchHandle,
    pub query: mpsc::Sender<Query>,
}

/// Shared between the node tasks (which register) and the REST server (which reads).
pub(crate) type Installed = Arc<RwLock<BTreeMap<String, NodeView>>>;

/// The daemon's [`OperationalSource`].
pub(crate) struct Operational {
    pub installed: Installed,
    /// What was last synced to each switch that left, to plan for it.
    pub departed: super::departed::DepartedNodes,
    /// The pipeline's configuration, to render a departed node.
    pub config: netvirt::config::Config,
    /// The model the node tasks follow (set once the inputs are up), for the nodes to report.
    pub models: Arc<std::sync::OnceLock<tokio::sync::watch::Receiver<Arc<Published>>>>,
    /// With replicas: this replica's OpenFlow target, and every node's master.
    pub masters: Option<(String, super::election::Masters)>,
    /// The nodes' bridge, as plans name it.
    pub bridge: String,
    /// The tags of the traces running.
    pub traces: super::trace::Tags,
    /// Each node's switch connection and last syncs.
    pub status: Arc<super::status::Status>,
}

/// How long the nodes view waits for a switch to say its role.
const ROLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A role as the nodes view names it.
fn role_name(role: u32) -> &'static str {
    use openflow::session::role;
    match role {
        role::MASTER => "master",
        role::SLAVE => "slave",
        role::EQUAL => "equal",
        _ => "unknown",
    }
}

impl Operational {
    /// The plans of the nodes whose switch left (all, or `node`), not served now by a task
    /// (`served`): the current model rendered for each, against what svcflow last synced to
    /// its switch. A node another replica masters now is not planned here.
    async fn departed_plans(
        &self,
        node: Option<&String>,
        served: &[(String, NodeView)],
    ) -> Result<Vec<NodePlan>, String> {
        let Some(models) = self.models.get() else {
            return Ok(Vec::new());
        };
        let elsewhere: BTreeSet<String> = self
            .unreported()
            .into_iter()
            .filter(|u| u.master.is_some())
            .map(|u| u.node)
            .collect();
        let wanted: Vec<String> = match self.departed.read() {
            Ok(map) => map
                .keys()
                .filter(|n| node.is_none_or(|want| *n == want))
                .filter(|n| !served.iter().any(|(s, _)| s == *n) && !elsewhere.contains(*n))
                .cloned()
                .collect(),
            Err(_) => return Err("operational state is unavailable".to_string()),
        };
        let mut plans = Vec::new();
        for name in wanted {
            let model = models.borrow().clone();
            let (departed, config) = (self.departed.clone(), self.config.clone());
            let planned = tokio::task::spawn_blocking(move || {
                departed_plan(&name, &model, &config, &departed).map(|p| (name, p))
            })
            .await
            .map_err(|e| format!("planning: {e}"))?;
            if let Some((name, (changes, against))) = planned {
                plans.push(NodePlan {
                    node: name,
                    bridge: self.bridge.clone(),
                    changes,
                    against: Some(against),
                });
            }
        }
        Ok(plans)
    }
}

/// Asks the tasks of the nodes this controller writes (`installed`) for their conflicts, all
/// at once, starting now; a task that does not answer within [`ROLE_TIMEOUT`] (its switch
/// left meanwhile, or a long sync holds it) is left out.
fn ask_conflicts(installed: &Installed) -> tokio::task::JoinSet<Option<(String, Vec<String>)>> {
    let mut asks = tokio::task::JoinSet::new();
    let views: Vec<(String, NodeView)> = match installed.read() {
        Ok(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Err(_) => return asks,
    };
    for (node, view) in views {
        asks.spawn(async move {
            let ask = async {
                let (tx, rx) = oneshot::channel();
                view.query.send(Query::Conflicts(tx)).await.ok()?;
                rx.await.ok()
            };
            let answer = tokio::time::timeout(ROLE_TIMEOUT, ask).await.ok()??;
            Some((node, answer))
        });
    }
    asks
}

/// One departed node's plan and what it is planned against, or None if it is not departed
/// (its switch came back meanwhile) or no longer in the model.
fn departed_plan(
    node: &str,
    model: &Published,
    config: &netvirt::config::Config,
    departed: &super::departed::DepartedNodes,
) -> Option<(Vec<String>, String)> {
    let spec = model.model.nodes.get(node)?;
    let map = departed.read().ok()?;
    let d = map.get(node)?;
    let bindings = d.bindings.clone()?;
    let want = netvirt::desired::desired(spec, &model.model, config, &bindings);
    let had = d.shards.materialize();
    let changes = netvirt::plan::plan(&want.state, &had.state)
        .iter()
        .map(|step| netvirt::flow::OfctlStep(step).to_string())
        .collect();
    let since = humantime_since(d.since);
    let against = if d.confirmed {
        format!(
            "the switch is not connected (since {since}): planned against the state svcflow \
             last synced to it"
        )
    } else {
        format!(
            "the switch is not connected (since {since}): planned against the state svcflow \
             last sent it, which the switch did not confirm"
        )
    };
    Some((changes, against))
}

/// A time as RFC 3339 (UTC, seconds).
fn humantime_since(t: std::time::SystemTime) -> String {
    super::metrics::rfc3339(
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
    )
}

impl OperationalSource for Operational {
    fn unreported(&self) -> Vec<Unreported> {
        let Some(models) = self.models.get() else {
            return Vec::new();
        };
        let nodes: Vec<String> = models.borrow().model.nodes.keys().cloned().collect();
        let here: BTreeSet<String> = match self.installed.read() {
            Ok(map) => map.keys().cloned().collect(),
            Err(_) => BTreeSet::new(),
        };
        let (me, masters) = match &self.masters {
            Some((me, rows)) => (me.as_str(), rows.by_node()),
            None => ("", BTreeMap::new()),
        };
        nodes
            .into_iter()
            .filter(|n| !here.contains(n))
            .map(
                |node| match masters.get(&node).filter(|(owner, _)| owner != me) {
                    Some((master, rest)) => Unreported {
                        node,
                        reason: "mastered by another replica".into(),
                        master: Some(master.clone()),
                        rest: Some(rest.clone()),
                    },
                    None => Unreported {
                        node,
                        reason: "switch not connected or not synced yet".into(),
                        master: None,
                        rest: None,
                    },
                },
            )
            .collect()
    }

    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeState>, String>> {
        Box::pin(async move {
            let model: BTreeSet<String> = match self.models.get() {
                Some(models) => models.borrow().model.nodes.keys().cloned().collect(),
                None => BTreeSet::new(),
            };
            let records = self.status.read(&model);
            let writing: BTreeSet<String> = match self.installed.read() {
                Ok(map) => map.keys().cloned().collect(),
                Err(_) => return Err("operational state is unavailable".to_string()),
            };
            let (me, masters) = match &self.masters {
                Some((me, rows)) => (me.as_str(), rows.by_node()),
                None => ("", BTreeMap::new()),
            };
            // Each written node's task says its conflicts, and each connected switch this
            // connection's role, all at once.
            let mut conflict_asks = ask_conflicts(&self.installed);
            let mut asks = tokio::task::JoinSet::new();
            for (node, record) in &records {
                if let Some((_, switch)) = &record.switch {
                    let (node, switch) = (node.clone(), switch.clone());
                    asks.spawn(async move {
                        let role =
                            tokio::time::timeout(ROLE_TIMEOUT, super::role::current(&switch)).await;
                        let name = match role {
                            Ok(Ok((role, _))) => role_name(role),
                            _ => "unknown",
                        };
                        (node, name)
                    });
                }
            }
            let mut roles = BTreeMap::new();
            while let Some(answer) = asks.join_next().await {
                if let Ok((node, role)) = answer {
                    roles.insert(node, role);
                }
            }
            let mut conflicts = BTreeMap::new();
            while let Some(answer) = conflict_asks.join_next().await {
                if let Ok(Some((node, listed))) = answer {
                    conflicts.insert(node, listed);
                }
            }
            let names: BTreeSet<&String> = model.iter().chain(records.keys()).collect();
            Ok(names
                .into_iter()
                .map(|node| {
                    let record = records.get(node).cloned().unwrap_or_default();
                    let other = masters.get(node).filter(|(owner, _)| owner != me);
                    NodeState {
                        node: node.clone(),
                        switch_connected: record.switch.is_some(),
                        connection: record.switch.as_ref().map(|(c, _)| *c),
                        role: record
                            .switch
                            .as_ref()
                            .map(|_| roles.get(node).copied().unwrap_or("unknown").to_string()),
                        writes: writing.contains(node),
                        master: other.map(|(target, _)| target.clone()),
                        rest: other.map(|(_, rest)| rest.clone()),
                        flows: record.totals.map(|t| t.0),
                        groups: record.totals.map(|t| t.1),
                        last_sync: record.last_ok,
                        syncs: record.history.into_iter().collect(),
                        conflicts: conflicts.get(node).cloned(),
                    }
                })
                .collect())
        })
    }

    fn plan(&self, node: Option<String>) -> BoxFuture<'_, Result<Vec<NodePlan>, String>> {
        Box::pin(async move {
            let nodes: Vec<(String, NodeView)> = match self.installed.read() {
                Ok(map) => map
                    .iter()
                    .filter(|(n, _)| node.as_ref().is_none_or(|want| *n == want))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                Err(_) => return Err("operational state is unavailable".to_string()),
            };
            let mut plans = self.departed_plans(node.as_ref(), &nodes).await?;
            for (node, view) in nodes {
                let (tx, rx) = oneshot::channel();
                let asked = view.query.send(Query::Plan(tx)).await;
                let Some(planned) = asked.ok().and(rx.await.ok()) else {
                    // Its switch left meanwhile: it is among the unreported nodes now.
                    continue;
                };
                plans.push(NodePlan {
                    node,
                    bridge: self.bridge.clone(),
                    changes: planned?,
                    against: None,
                });
            }
            Ok(plans)
        })
    }

    fn trace(
        &self,
        request: netvirt::trace::TraceRequest,
    ) -> BoxFuture<'_, Result<netvirt::trace::TraceReport, TraceFailure>> {
        Box::pin(async move {
            let views: Vec<(String, NodeView)> = match self.installed.read() {
                Ok(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                Err(_) => {
                    return Err(TraceFailure::Unavailable(
                        "operational state is unavailable".to_string(),
                    ));
                }
            };
            if !views.iter().any(|(n, _)| *n == request.node) {
                let known = self
                    .models
                    .get()
                    .is_some_and(|m| m.borrow().model.nodes.contains_key(&request.node));
                let node = coe::rest::error::excerpt(&request.node);
                if !known {
                    return Err(TraceFailure::NotFound(format!(
                        "no node `{node}` in the model"
                    )));
                }
                let why = self
                    .unreported()
                    .into_iter()
                    .find(|u| u.node == request.node)
                    .map_or_else(
                        || "switch not connected or not synced yet".to_string(),
                        |u| match u.rest {
                            Some(rest) => format!("{}; ask {rest}", u.reason),
                            None => u.reason,
                        },
                    );
                return Err(TraceFailure::Unavailable(format!("node {node}: {why}")));
            }
            super::trace::run(views, &self.traces, request).await
        })
    }

    fn services(&self) -> BoxFuture<'_, Result<Vec<ServiceState>, String>> {
        Box::pin(async move {
            let nodes: Vec<(String, NodeView)> = match self.installed.read() {
                Ok(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                Err(_) => return Err("operational state is unavailable".to_string()),
            };
            if nodes.is_empty() {
                // A replica that masters no node still answers, listing who does.
                if self.unreported().iter().any(|u| u.master.is_some()) {
                    return Ok(Vec::new());
                }
                return Err("no node's switch is connected and synced yet".to_string());
            }
            let mut services: BTreeMap<String, ServiceState> = BTreeMap::new();
            for (node, view) in nodes {
                let (tx, rx) = oneshot::channel();
                let asked = view.query.send(Query::Snapshot(tx)).await;
                let Some(snapshot) = asked.ok().and(rx.await.ok()) else {
                    // Its switch left meanwhile.
                    continue;
                };
                node_services(&node, &view.switch, &snapshot, &mut services)
                    .await
                    .map_err(|e| format!("node {node}: {e}"))?;
            }
            Ok(services.into_values().collect())
        })
    }
}

async fn node_services(
    node: &str,
    switch: &SwitchHandle,
    synced: &Snapshot,
    out: &mut BTreeMap<String, ServiceState>,
) -> Result<(), String> {
    let filter = FlowFilter {
        table_id: None,
        cookie: cookie::MARK,
        cookie_mask: cookie::MARK_MASK,
    };
    let flows = switch.dump_flows(filter).await.map_err(|e| e.to_string())?;
    let mut groups: BTreeMap<u32, GroupStats> = BTreeMap::new();
    let replies = switch
        .multipart(MultipartBody::GroupRequest(OFPG_ALL))
        .await
        .map_err(|e| e.to_string())?;
    for reply in replies {
        if let MultipartBody::Group(stats) = reply {
            groups.extend(stats.into_iter().map(|g| (g.group_id, g)));
        }
    }
    for (port, state) in synced.services.iter() {
        // `namespace/name:port/protocol[/external|/cluster]`.
        let key = port.split(':').next().unwrap_or(port);
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let model = synced
            .model
            .model
            .services
            .get(&netvirt::model::ServiceKey::new(namespace, name));
        let service = out.entry(key.to_string()).or_insert_with(|| ServiceState {
            uid: model.map_or_else(|| key.to_string(), |s| s.uid.clone()),
            namespace: namespace.to_string(),
            name: name.to_string(),
            cluster_ips: model
                .map(|s| s.cluster_ips.iter().map(|ip| ip.to_string()).collect())
                .unwrap_or_default(),
            external_ips: model
                .map(|s| {
                    s.external_ips
                        .iter()
                        .chain(&s.lb_ingress_ips)
                        .map(|ip| ip.to_string())
                        .collect()
                })
                .unwrap_or_default(),
            ports: model.map(kubectl_ports).unwrap_or_default(),
            groups: Vec::new(),
            flows: Vec::new(),
            packet_count: 0,
            byte_count: 0,
        });
        for group in &state.groups {
            let group_id = group.id;
            let stats = groups.get(&group_id);
            let buckets = group
                .backends
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let (packets, bytes) = stats
                        .and_then(|s| s.bucket_stats.get(i).copied())
                        .unwrap_or_default();
                    let endpoint = match b.ip {
                        std::net::IpAddr::V4(ip) => format!("{ip}:{}", b.port),
                        std::net::IpAddr::V6(ip) => format!("[{ip}]:{}", b.port),
                    };
                    BucketState {
                        bucket_id: i as u32,
                        endpoint,
                        weight: b.weight,
                        packet_count: packets,
                        byte_count: bytes,
                    }
                })
                .collect();
            let (packets, bytes) = stats.map_or((0, 0), |s| (s.packet_count, s.byte_count));
            service.packet_count += packets;
            service.byte_count += bytes;
            service.groups.push(GroupState {
                node: node.to_string(),
                group_id,
                group_type: "select".to_string(),
                buckets,
                packet_count: packets,
                byte_count: bytes,
            });
        }
        for f in flows.iter().filter(|f| f.cookie == state.cookie) {
            let key = FlowKey::new(f.table_id, f.priority, &f.match_);
            let entry = FlowEntry::new(f.cookie, f.instructions.clone());
            service.flows.push(FlowState {
                node: node.to_string(),
                table_id: f.table_id,
                priority: f.priority,
                cookie: f.cookie,
                flow: DumpFlow(&key, &entry).to_string().trim_start().to_string(),
                packet_count: f.packet_count,
                byte_count: f.byte_count,
            });
        }
    }
    Ok(())
}

/// A service's ports as `kubectl get services` prints them: `80/TCP`, `80:30080/TCP`.
fn kubectl_ports(service: &netvirt::model::Service) -> Vec<String> {
    service
        .ports
        .iter()
        .map(|p| {
            let protocol = p.protocol.keyword().to_ascii_uppercase();
            match p.node_port {
                Some(node_port) => format!("{}:{node_port}/{protocol}", p.port),
                None => format!("{}/{protocol}", p.port),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_read_as_kubectl_prints_them() {
        use netvirt::model::{Protocol, Service, ServiceKey, ServicePort};
        let mut dns = ServicePort::tcp("dns", 53, 53);
        dns.protocol = Protocol::Udp;
        let mut web = ServicePort::tcp("web", 80, 8080);
        web.node_port = Some(30080);
        let service = Service::cluster_ip(
            ServiceKey::new("default", "s"),
            "s",
            "10.96.0.10".parse().unwrap(),
            vec![web, dns],
        );
        assert_eq!(kubectl_ports(&service), ["80:30080/TCP", "53/UDP"]);
        assert_eq!(role_name(openflow::session::role::EQUAL), "equal");
    }
}
