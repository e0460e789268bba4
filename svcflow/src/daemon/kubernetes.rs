//! The Kubernetes input of the daemon: starts the watchers ([`coe::k8s::Watchers`]) and merges
//! their model with the REST northbound's into the one channel the rest of the daemon reads.
//!
//! Precedence (see [`coe::k8s::merge`]): Kubernetes wins on a key both define; each conflict
//! is logged once, when it appears. The merged model's revision is the REST revision plus the
//! Kubernetes generation, so that it grows with a change of either input. Until every watched kind has been listed once, the REST
//! model is published alone; while the API server is unreachable the last Kubernetes model
//! stays in the merge, so installed flows stay as they are.

use std::sync::Arc;

use coe::k8s::{KubeModel, Source, WatchConfig, Watchers};
use coe::rest::Published;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{Shutdown, stopped};

/// Starts the watchers; returns the merged models and the task that keeps them up to date.
pub(crate) async fn start(
    source: &Source,
    rest: watch::Receiver<Arc<Published>>,
    shutdown: Shutdown,
    metrics: Arc<super::metrics::Metrics>,
) -> Result<(watch::Receiver<Arc<Published>>, JoinHandle<()>), String> {
    let client = coe::k8s::client(source)
        .await
        .map_err(|e| format!("Kubernetes: {e}"))?;
    tracing::info!("Kubernetes: watching services, endpoint slices, nodes, pods and namespaces");
    let observed = metrics.clone();
    let watchers = Watchers::start_observed(
        client,
        WatchConfig::default(),
        Arc::new(move |resource, signal| observed.kube(resource, signal)),
    );
    let kube = watchers.subscribe();
    let first = rest.borrow().clone();
    let (tx, merged) = watch::channel(first);
    let task = tokio::spawn(run(watchers, rest, kube, tx, shutdown, metrics));
    Ok((merged, task))
}

/// What the daemon sees: the REST model alone until Kubernetes has listed, then the merge.
/// The merge follows both inputs by key (`merger`), so a change costs its own size.
pub(crate) fn combine(
    merger: &mut coe::k8s::Merger,
    rest: &Published,
    kube: Option<&KubeModel>,
) -> (Published, Vec<coe::k8s::Conflict>) {
    let Some(kube) = kube else {
        return (rest.clone(), Vec::new());
    };
    let merged = merger.update(
        &rest.model,
        &rest.ovsdb_remotes,
        &kube.translation.model,
        &kube.translation.ovsdb_remotes,
    );
    // Both inputs' counters only grow, so their sum grows with every change of either: a
    // Kubernetes change is a new revision too, which the node tasks, the programming latency
    // and the pending counts follow as they follow REST writes.
    let published = Published {
        model: merged.model,
        ovsdb_remotes: merged.ovsdb_remotes,
        revision: rest.revision.saturating_add(kube.generation),
        part_of: rest.part_of.map(|r| r.saturating_add(kube.generation)),
    };
    (published, merged.conflicts)
}

async fn run(
    watchers: Watchers,
    mut rest: watch::Receiver<Arc<Published>>,
    mut kube: watch::Receiver<Option<Arc<KubeModel>>>,
    tx: watch::Sender<Arc<Published>>,
    shutdown: Shutdown,
    metrics: Arc<super::metrics::Metrics>,
) {
    // The watchers stop when this task does.
    let _watchers = watchers;
    let mut conflicts = Vec::new();
    let mut merger = coe::k8s::Merger::default();
    let mut told = 0;
    loop {
        let r = rest.borrow_and_update().clone();
        let k = kube.borrow_and_update().clone();
        let (published, now) = combine(&mut merger, &r, k.as_deref());
        // A REST change published in parts is judged once it is whole.
        if published.part_of.is_none() {
            for c in now.iter().filter(|c| !conflicts.contains(*c)) {
                tracing::warn!("{c}");
            }
            conflicts = now;
        }
        if let Some(k) = &k {
            tracing::debug!(
                generation = k.generation,
                services = published.model.services.len(),
                "merged the Kubernetes model"
            );
        }
        // When the change began, for the programming latency of the revision that carries it
        // (told before the revision is published, so that it is there when counted).
        // Once per generation: a REST write later is not that change.
        if let Some(k) = k.as_ref().filter(|k| k.generation > told) {
            told = k.generation;
            if let Some(at) = k.triggered_at {
                metrics.triggered(published.revision, at);
            }
        }
        tx.send_if_modified(|current| {
            if **current == published {
                false
            } else {
                *current = Arc::new(published);
                true
            }
        });
        tokio::select! {
            _ = stopped(shutdown.clone()) => return,
            changed = rest.changed() => if changed.is_err() { return },
            changed = kube.changed() => if changed.is_err() { return },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netvirt::model::Node;

    #[test]
    fn rest_alone_until_kubernetes_has_listed_then_the_merge() {
        let mut rest = Published {
            revision: 4,
            ..Published::default()
        };
        rest.model.nodes.insert(
            "vm".into(),
            Node {
                name: "vm".into(),
                ips: vec![],
                pod_cidrs: vec![],
                labels: Default::default(),
            },
        );
        let mut merger = coe::k8s::Merger::default();
        let (alone, conflicts) = combine(&mut merger, &rest, None);
        assert_eq!(alone, rest);
        assert!(conflicts.is_empty());
        let mut kube = KubeModel::default();
        kube.translation.model.nodes.insert(
            "n1".into(),
            Node {
                name: "n1".into(),
                ips: vec![],
                pod_cidrs: vec![],
                labels: Default::default(),
            },
        );
        kube.generation = 3;
        let (merged, _) = combine(&mut merger, &rest, Some(&kube));
        assert_eq!(merged.revision, 7, "REST's 4 plus Kubernetes' 3");
        assert_eq!(merged.model.nodes.keys().collect::<Vec<_>>(), ["n1", "vm"]);
    }
}
