//! The operational view: what the controller actually installed for each service, with
//! counters, the dry-run plan: what it would change on each switch now, and the live packet
//! trace. The daemon implements [`OperationalSource`]; the server serves its answers at
//! `GET /restconf/operational/service:service-information`,
//! `GET /restconf/operational/svcflow:plan` and `POST /restconf/operations/svcflow:trace`,
//! and the nodes (switch, role, syncs) at `GET /restconf/operational/svcflow:nodes`.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;

/// A boxed future, as [`OperationalSource`] returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Supplies the operational state of every service.
pub trait OperationalSource: Send + Sync + 'static {
    /// The services, with their groups, buckets, flows and counters from the latest flow and
    /// group statistics. `Err` (e.g. no switch connected yet) becomes a 503.
    fn services(&self) -> BoxFuture<'_, Result<Vec<ServiceState>, String>>;

    /// The model's nodes that [`OperationalSource::services`] says nothing about, and why:
    /// the answer lists them, so that a node missing from it is never silently missing.
    fn unreported(&self) -> Vec<Unreported> {
        Vec::new()
    }

    /// What the controller would change on each node's switch (or on `node`'s only) to bring
    /// it to the current model, read from the live switch and changing nothing. `Err` becomes
    /// a 503.
    fn plan(&self, node: Option<String>) -> BoxFuture<'_, Result<Vec<NodePlan>, String>> {
        let _ = node;
        Box::pin(async { Err("this controller does not plan".to_string()) })
    }

    /// Every node of the model: its switch connection, this controller's OpenFlow role on
    /// it, what is installed and the last syncs. `Err` becomes a 503.
    fn nodes(&self) -> BoxFuture<'_, Result<Vec<NodeState>, String>> {
        Box::pin(async { Err("this controller does not report nodes".to_string()) })
    }

    /// Traces a probe through a node's switch (`netvirt::trace`).
    fn trace(
        &self,
        request: netvirt::trace::TraceRequest,
    ) -> BoxFuture<'_, Result<netvirt::trace::TraceReport, TraceFailure>> {
        let _ = request;
        Box::pin(async {
            Err(TraceFailure::Unavailable(
                "this controller does not trace".to_string(),
            ))
        })
    }
}

/// Why a trace was not run, as the REST answer's status says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceFailure {
    /// The request names no valid source or destination (400).
    Invalid(String),
    /// The node is not in the model (404).
    NotFound(String),
    /// This controller does not serve the node's switch now, or every trace tag is in use, or
    /// the switch refused the temporary flows (503).
    Unavailable(String),
}

impl std::fmt::Display for TraceFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TraceFailure::Invalid(s) | TraceFailure::NotFound(s) | TraceFailure::Unavailable(s) => {
                f.write_str(s)
            }
        }
    }
}

/// One node, as the controller serves it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodeState {
    /// The node.
    pub node: String,
    /// Whether its switch is connected to this controller.
    pub switch_connected: bool,
    /// The switch's connection number (it changes at each reconnection), while connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection: Option<u64>,
    /// This controller's OpenFlow role on the switch, as the switch answers a role request
    /// now: `master`, `slave`, `equal` (a sole controller that never asked for a role), or
    /// `unknown` (no answer); absent while the switch is not connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Whether this controller writes to the switch: its task for the node runs and has
    /// synced the switch at least once.
    pub writes: bool,
    /// The replica that masters the node's switch (its OpenFlow target), when another does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// Where that replica serves REST.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest: Option<String>,
    /// Flows desired on the switch, as of this controller's last successful sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flows: Option<u64>,
    /// Groups desired on the switch, as of that sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<u64>,
    /// The last successful sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_sync: Option<SyncState>,
    /// The last syncs, successful or not, newest first (a bounded few).
    pub syncs: Vec<SyncState>,
    /// What the node's desired state cannot honour, as its task last rendered it (each also
    /// logged when rendered): inputs the pipeline cannot serve on the node, and flows that
    /// two owners render differently. Absent for a node this controller does not write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<Vec<String>>,
}

/// One sync of a node's switch to a model revision.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SyncState {
    /// When it ended, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// The model revision.
    pub revision: u64,
    /// `ok` or `failed`.
    pub result: String,
    /// How long it took, from the start of the render to the switch's barrier (successful
    /// syncs), in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<f64>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Flows added.
    pub flows_added: u64,
    /// Flows modified in place.
    pub flows_modified: u64,
    /// Flows deleted.
    pub flows_deleted: u64,
    /// Groups added, modified or deleted.
    pub groups_changed: u64,
    /// Stale UDP/SCTP conntrack matches flushed.
    pub conntrack_flushed: u64,
}

/// One node's dry-run plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct NodePlan {
    /// The node.
    pub node: String,
    /// Its bridge.
    pub bridge: String,
    /// The changes, in the order the controller would send them, as the lines of an
    /// `ovs-ofctl bundle` file (`flow add …`, `flow modify_strict …`, `flow delete_strict …`,
    /// `group add|modify|delete …`): empty when the switch holds the model.
    pub changes: Vec<String>,
    /// When the switch is not connected: what the plan is computed against instead of the
    /// live switch (the state svcflow last synced to it), and since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<String>,
}

/// A node the operational view has no state for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Unreported {
    /// The node.
    pub node: String,
    /// Why: `mastered by another replica`, or `switch not connected or not synced yet`.
    pub reason: String,
    /// The replica that masters the node's switch (its OpenFlow target), when another does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// Where that replica serves REST, to ask it for this node's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rest: Option<String>,
}

/// A source with nothing to report yet: every request gets a 503.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unavailable;

impl OperationalSource for Unavailable {
    fn services(&self) -> BoxFuture<'_, Result<Vec<ServiceState>, String>> {
        Box::pin(async {
            Err("the controller has not published operational state yet".to_string())
        })
    }
}

/// One service as installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct ServiceState {
    /// The service's uid.
    pub uid: String,
    /// Namespace.
    #[serde(rename = "network-NS")]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its cluster IPs, as the model the nodes were last synced to has them.
    pub cluster_ips: Vec<String>,
    /// Its external addresses: `externalIPs` and load-balancer ingress IPs.
    pub external_ips: Vec<String>,
    /// Its ports as `kubectl get services` prints them: `PORT/PROTOCOL`, or
    /// `PORT:NODEPORT/PROTOCOL`.
    pub ports: Vec<String>,
    /// Its select group on each node.
    pub groups: Vec<GroupState>,
    /// Its flows on each node.
    pub flows: Vec<FlowState>,
    /// Packets, summed over its groups.
    pub packet_count: u64,
    /// Bytes, summed over its groups.
    pub byte_count: u64,
}

/// A service's group on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct GroupState {
    /// The node.
    pub node: String,
    /// The group id.
    pub group_id: u32,
    /// `select`, `all`, …
    pub group_type: String,
    /// Buckets.
    pub buckets: Vec<BucketState>,
    /// Group packet counter.
    pub packet_count: u64,
    /// Group byte counter.
    pub byte_count: u64,
}

/// One bucket: one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct BucketState {
    /// Bucket id.
    pub bucket_id: u32,
    /// The endpoint, `ip:port` (`[ip]:port` for IPv6).
    pub endpoint: String,
    /// The bucket's weight.
    pub weight: u16,
    /// Bucket packet counter.
    pub packet_count: u64,
    /// Bucket byte counter.
    pub byte_count: u64,
}

/// One flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct FlowState {
    /// The node.
    pub node: String,
    /// Table.
    pub table_id: u8,
    /// Priority.
    pub priority: u16,
    /// Cookie.
    pub cookie: u64,
    /// The flow in `ovs-ofctl` syntax.
    pub flow: String,
    /// Packet counter.
    pub packet_count: u64,
    /// Byte counter.
    pub byte_count: u64,
}
