//! Per-node `coordination.k8s.io/v1` Leases, for electing each switch's master among several
//! replicas without a shared database (`svcflow run --election lease`).
//!
//! Each node has one Lease, `svcflow-node-<datapath id>`, in the replicas' namespace, labelled
//! `app.kubernetes.io/managed-by=svcflow` and annotated with the node's name. Its
//! `holderIdentity` is the holder's OpenFlow target (as the switches list their controllers),
//! its `svcflow.io/rest` annotation where that replica serves REST, and its
//! `leaseTransitions` the node's epoch: every take bumps it, and the holder uses it as its
//! OpenFlow generation id, so the switch itself refuses a replica that lost the lease.
//!
//! Writes use the API server's optimistic concurrency: a take replaces the version it read
//! (or creates the Lease when none exists), so of two replicas taking one Lease, one gets 409
//! and loses. This is kube's API used directly rather than a leader-election crate
//! (`kube-lease-manager`, `kube-leader-election`): those hold one Lease per process with their
//! own renewal loop, and svcflow needs one per node, a forced take (a preferred replica takes
//! its node back after a hold-down) and the transition count as a fencing epoch.
//!
//! I/O: every `async fn` here talks to the API server; [`NodeLease`] and the names are pure.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::chrono::Utc;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};

/// The label every node Lease carries, as `key=value`.
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=svcflow";
/// The annotation naming the node a Lease elects.
pub const NODE_ANNOTATION: &str = "svcflow.io/node";
/// The annotation saying where the holder serves REST.
pub const REST_ANNOTATION: &str = "svcflow.io/rest";

/// The Lease of `node`: a DNS label, so from the node's datapath id.
pub fn lease_name(node: &str) -> String {
    format!(
        "svcflow-node-{:016x}",
        netvirt::node_setup::datapath_id(node)
    )
}

/// A node's Lease, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLease {
    /// The node it elects.
    pub node: String,
    /// Its holder's identity (an OpenFlow target), if held.
    pub holder: Option<String>,
    /// Where the holder serves REST.
    pub rest: Option<String>,
    /// The node's epoch (`leaseTransitions`).
    pub epoch: u64,
    /// How long it lasts unrenewed (`leaseDurationSeconds`).
    pub duration: Duration,
    /// Its `resourceVersion`: a write must name it.
    pub version: String,
}

impl NodeLease {
    /// Reads a Lease of svcflow's; None if it is not one (no node annotation or version).
    pub fn from_lease(lease: &Lease) -> Option<NodeLease> {
        let meta = &lease.metadata;
        let annotation = |k: &str| meta.annotations.as_ref()?.get(k).cloned();
        let spec = lease.spec.as_ref();
        Some(NodeLease {
            node: annotation(NODE_ANNOTATION)?,
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            rest: annotation(REST_ANNOTATION),
            epoch: spec
                .and_then(|s| s.lease_transitions)
                .and_then(|t| u64::try_from(t).ok())
                .unwrap_or(0),
            duration: Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .and_then(|d| u64::try_from(d).ok())
                    .unwrap_or(15),
            ),
            version: meta.resource_version.clone()?,
        })
    }
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another writer got there first (409): read again.
    #[error("another replica wrote the lease first")]
    Conflict,
    /// The Lease is not there (404).
    #[error("the lease does not exist")]
    NotFound,
    /// The epoch does not fit a Lease's 32-bit transition count.
    #[error("epoch {0} does not fit leaseTransitions")]
    Epoch(u64),
    /// Anything else: the API server is unreachable, refuses, or answered something else.
    #[error("{0}")]
    Api(String),
}

impl From<kube::Error> for LeaseError {
    fn from(e: kube::Error) -> Self {
        match &e {
            kube::Error::Api(s) if s.code == 409 => LeaseError::Conflict,
            kube::Error::Api(s) if s.code == 404 => LeaseError::NotFound,
            _ => LeaseError::Api(e.to_string()),
        }
    }
}

/// What the Lease watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEvent {
    /// Every node Lease there is (after a list or relist).
    Listed(Vec<NodeLease>),
    /// One was created or changed.
    Seen(NodeLease),
    /// The Lease of this node was deleted.
    Deleted(String),
}

/// The node Leases of one namespace, written as one replica.
#[derive(Clone)]
pub struct Leases {
    api: Api<Lease>,
    me: String,
    rest: String,
    duration: Duration,
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("me", &self.me)
            .field("duration", &self.duration)
            .finish()
    }
}

impl Leases {
    /// The Leases in `namespace`, written as holder `me` (serving REST at `rest`) with
    /// `duration`.
    pub fn new(client: Client, namespace: &str, me: &str, rest: &str, duration: Duration) -> Self {
        Leases {
            api: Api::namespaced(client, namespace),
            me: me.to_string(),
            rest: rest.to_string(),
            duration,
        }
    }

    /// The Lease object holding `node` as this replica, at `epoch`, replacing `version` (or
    /// created, without one).
    fn held(&self, node: &str, epoch: u64, version: Option<&str>) -> Result<Lease, LeaseError> {
        let transitions = i32::try_from(epoch).map_err(|_| LeaseError::Epoch(epoch))?;
        let now = MicroTime(Utc::now());
        Ok(Lease {
            metadata: ObjectMeta {
                name: Some(lease_name(node)),
                labels: Some([("app.kubernetes.io/managed-by".into(), "svcflow".into())].into()),
                annotations: Some(
                    [
                        (NODE_ANNOTATION.into(), node.to_string()),
                        (REST_ANNOTATION.into(), self.rest.clone()),
                    ]
                    .into(),
                ),
                resource_version: version.map(str::to_string),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.me.clone()),
                lease_duration_seconds: Some(
                    i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX),
                ),
                lease_transitions: Some(transitions),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..LeaseSpec::default()
            }),
        })
    }

    fn read(lease: &Lease) -> Result<NodeLease, LeaseError> {
        NodeLease::from_lease(lease).ok_or_else(|| {
            LeaseError::Api("the API server returned a lease without a version".into())
        })
    }

    /// Takes `node`'s Lease at `epoch`: replaces the version read (`read`), or creates the
    /// Lease if none was read. 409 means another replica wrote first.
    pub async fn take(
        &self,
        node: &str,
        read: Option<&NodeLease>,
        epoch: u64,
    ) -> Result<NodeLease, LeaseError> {
        let written = match read {
            Some(read) => {
                let lease = self.held(node, epoch, Some(&read.version))?;
                self.api
                    .replace(&lease_name(node), &PostParams::default(), &lease)
                    .await?
            }
            None => {
                let lease = self.held(node, epoch, None)?;
                self.api.create(&PostParams::default(), &lease).await?
            }
        };
        Self::read(&written)
    }

    /// Renews the Lease this replica holds (as last written): same epoch, a new renew time.
    pub async fn renew(&self, held: &NodeLease) -> Result<NodeLease, LeaseError> {
        self.rewrite(held, |_| {}).await
    }

    /// Gives the Lease this replica holds up: no holder, so any replica may take it at once.
    pub async fn release(&self, held: &NodeLease) -> Result<NodeLease, LeaseError> {
        self.rewrite(held, |spec| spec.holder_identity = None).await
    }

    /// Replaces the Lease this replica holds, at the version it last wrote, as `edit` changes
    /// the held spec (the acquire time is kept).
    async fn rewrite(
        &self,
        held: &NodeLease,
        edit: impl FnOnce(&mut LeaseSpec),
    ) -> Result<NodeLease, LeaseError> {
        let mut lease = self.held(&held.node, held.epoch, Some(&held.version))?;
        if let Some(spec) = lease.spec.as_mut() {
            spec.acquire_time = None;
            edit(spec);
        }
        let written = self
            .api
            .replace(&lease_name(&held.node), &PostParams::default(), &lease)
            .await?;
        Self::read(&written)
    }

    /// Reads `node`'s Lease now.
    pub async fn get(&self, node: &str) -> Result<Option<NodeLease>, LeaseError> {
        match self.api.get_opt(&lease_name(node)).await? {
            Some(lease) => Self::read(&lease).map(Some),
            None => Ok(None),
        }
    }

    /// Watches every node Lease of the namespace (list, then watch; relists when the watch
    /// expires). Errors are reported as they come; the stream goes on after them, with
    /// kube's default backoff.
    pub fn watch(&self) -> impl Stream<Item = Result<LeaseEvent, String>> + Send + 'static {
        use kube::runtime::WatchStreamExt;
        let config = watcher::Config::default().labels(SELECTOR);
        let mut listing: Vec<NodeLease> = Vec::new();
        super::watch::relisting(self.api.clone(), config)
            .default_backoff()
            .filter_map(move |event| {
                let out = match event {
                    Err(e) => Some(Err(e.to_string())),
                    Ok(watcher::Event::Init) => {
                        listing.clear();
                        None
                    }
                    Ok(watcher::Event::InitApply(lease)) => {
                        listing.extend(NodeLease::from_lease(&lease));
                        None
                    }
                    Ok(watcher::Event::InitDone) => {
                        Some(Ok(LeaseEvent::Listed(std::mem::take(&mut listing))))
                    }
                    Ok(watcher::Event::Apply(lease)) => {
                        NodeLease::from_lease(&lease).map(|l| Ok(LeaseEvent::Seen(l)))
                    }
                    Ok(watcher::Event::Delete(lease)) => {
                        NodeLease::from_lease(&lease).map(|l| Ok(LeaseEvent::Deleted(l.node)))
                    }
                };
                std::future::ready(out)
            })
    }
}
