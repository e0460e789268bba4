//! Kubernetes as an input: watchers (kube-rs) and their translation into the model.
//!
//! - [`translate`] is pure: a [`translate::Snapshot`] of the watched objects becomes a
//!   [`netvirt::model::Model`], the nodes' OVSDB remotes, and typed warnings for whatever is
//!   invalid. It is where every Service rule lives, and it is tested table by table.
//! - [`keyed`] keeps that translation up to date by key: the watchers record which objects
//!   each event touched, and only those (with what depends on them) are translated again.
//! - [`merge`] is pure too: the REST northbound's model and the Kubernetes one become one
//!   model. Kubernetes wins on a key both define (see [`merge`] for why).
//! - [`slim`] is pure: what the translation reads of each watched object, which is all the
//!   watchers keep of it ([`store`] holds them by key, swapping a relisted kind in whole).
//! - [`watch`] is the I/O: one kube-rs watcher per kind (Services without
//!   `service.kubernetes.io/service-proxy-name`, EndpointSlices without
//!   `service.kubernetes.io/headless`, Nodes, Pods, Namespaces), and a publisher that, once
//!   every store has listed, translates the stores after each burst of events and publishes
//!   the result. While the API server is unreachable the stores keep their last contents, so
//!   the published model (and the flows) stay as they are; a relist swaps a store at once.
//! - [`lease`] is I/O too: the per-node `coordination.k8s.io` Leases replicas elect each
//!   switch's master with (`svcflow run --election lease`).
//! - `fake` (cargo feature `fake-apiserver`) is an in-process API server for tests.

#[cfg(feature = "fake-apiserver")]
pub mod fake;
pub mod keyed;
pub mod lease;
pub mod merge;
pub mod slim;
mod store;
pub mod translate;
pub mod watch;

pub use merge::{Conflict, Merged, Merger, merge};
pub use translate::{Snapshot, Translation, Warning, iface_id, translate};
pub use watch::{
    KubeModel, Source, TRIGGER_TIME_ANNOTATION, WatchConfig, WatchObserver, WatchSignal, Watchers,
    client, trigger_time,
};
