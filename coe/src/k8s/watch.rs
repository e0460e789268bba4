//! The watchers: kube-rs reflectors for the five kinds, and the task that publishes their
//! translation. This is the I/O half of [`super`]; [`super::translate`] does the thinking.

use std::fmt::Debug;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::runtime::reflector::{self, Store};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::translate::{self, ENDPOINT_SLICE_SELECTOR, SERVICE_SELECTOR, Snapshot, Translation};

/// Where the API server and the credentials come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, the mounted token and CA).
    InCluster,
    /// A kubeconfig file, with its current context.
    Kubeconfig(PathBuf),
}

/// Why the Kubernetes client cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// In-cluster configuration is missing (not running in a pod?).
    #[error("in-cluster Kubernetes configuration: {0}")]
    InCluster(String),
    /// The kubeconfig file cannot be read or used.
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The client cannot be built from the configuration.
    #[error("Kubernetes client: {0}")]
    Client(String),
}

/// A client for `source`. It does not contact the API server.
pub async fn client(source: &Source) -> Result<Client, ClientError> {
    let config = match source {
        Source::InCluster => {
            kube::Config::incluster().map_err(|e| ClientError::InCluster(e.to_string()))?
        }
        Source::Kubeconfig(path) => {
            let bad = |reason: String| ClientError::Kubeconfig {
                path: path.clone(),
                reason,
            };
            let kubeconfig =
                kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|e| bad(e.to_string()))?
        }
    };
    Client::try_from(config).map_err(|e| ClientError::Client(e.to_string()))
}

/// How the watchers behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    /// After an event, wait this long for more before translating once for the whole burst.
    pub coalesce: Duration,
    /// Retry a failed list or watch after this long at first, doubling each time...
    pub min_backoff: Duration,
    /// ...up to this.
    pub max_backoff: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            coalesce: Duration::from_millis(100),
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What the watchers publish: the translation of the stores, numbered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeModel {
    /// Grows by one per published change.
    pub generation: u64,
    /// The model, remotes and warnings.
    pub translation: Translation,
}

/// Running watchers. Dropping this stops them.
#[derive(Debug)]
pub struct Watchers {
    models: watch::Receiver<Option<Arc<KubeModel>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Watchers {
    /// Starts watching with `client`. Nothing is published until every kind has been listed
    /// once; after that, a new [`KubeModel`] whenever the translation changes.
    pub fn start(client: Client, config: WatchConfig) -> Self {
        let notify = Arc::new(Notify::new());
        let mut tasks = Vec::new();
        let services = reflect::<core::Service>(
            Api::all(client.clone()),
            "services",
            watcher::Config::default().labels(SERVICE_SELECTOR),
            &config,
            &notify,
            &mut tasks,
        );
        let slices = reflect::<discovery::EndpointSlice>(
            Api::all(client.clone()),
            "endpointslices",
            watcher::Config::default().labels(ENDPOINT_SLICE_SELECTOR),
            &config,
            &notify,
            &mut tasks,
        );
        let nodes = reflect::<core::Node>(
            Api::all(client.clone()),
            "nodes",
            watcher::Config::default(),
            &config,
            &notify,
            &mut tasks,
        );
        let pods = reflect::<core::Pod>(
            Api::all(client.clone()),
            "pods",
            watcher::Config::default(),
            &config,
            &notify,
            &mut tasks,
        );
        let namespaces = reflect::<core::Namespace>(
            Api::all(client),
            "namespaces",
            watcher::Config::default(),
            &config,
            &notify,
            &mut tasks,
        );
        let stores = Stores {
            services,
            slices,
            nodes,
            pods,
            namespaces,
        };
        let (tx, models) = watch::channel(None);
        tasks.push(tokio::spawn(publish(stores, notify, config.coalesce, tx)));
        Self { models, tasks }
    }

    /// The published models: `None` until every kind has been listed once.
    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<KubeModel>>> {
        self.models.clone()
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

struct Stores {
    services: Store<core::Service>,
    slices: Store<discovery::EndpointSlice>,
    nodes: Store<core::Node>,
    pods: Store<core::Pod>,
    namespaces: Store<core::Namespace>,
}

impl Stores {
    fn snapshot(&self) -> Snapshot {
        Snapshot {
            services: self.services.state(),
            endpoint_slices: self.slices.state(),
            nodes: self.nodes.state(),
            pods: self.pods.state(),
            namespaces: self.namespaces.state(),
        }
    }

    /// Whether every store has been listed; `Err` if a watcher is gone.
    async fn ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await
    }
}

/// Exponential backoff with a floor and a ceiling; reset by every successful event.
struct Doubling {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Iterator for Doubling {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        Some(now)
    }
}

impl Backoff for Doubling {
    fn reset(&mut self) {
        self.next = self.min;
    }
}

/// Starts a reflector for one kind; every event pokes `notify`.
fn reflect<K>(
    api: Api<K>,
    what: &'static str,
    wc: watcher::Config,
    config: &WatchConfig,
    notify: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let backoff = Doubling {
        min: config.min_backoff,
        max: config.max_backoff.max(config.min_backoff),
        next: config.min_backoff,
    };
    let stream = reflector::reflector(writer, watcher(api, wc)).backoff(backoff);
    let notify = notify.clone();
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failing = false;
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => {
                    if failing {
                        tracing::info!("Kubernetes watch of {what} is back");
                        failing = false;
                    }
                    notify.notify_one();
                }
                Err(e) if !failing => {
                    tracing::warn!(
                        "Kubernetes watch of {what}: {e}; keeping the last state and retrying"
                    );
                    failing = true;
                }
                Err(e) => tracing::debug!("Kubernetes watch of {what}: {e}"),
            }
        }
    }));
    reader
}

/// Publishes the translation of the stores once all are listed, then after each burst.
async fn publish(
    stores: Stores,
    notify: Arc<Notify>,
    coalesce: Duration,
    tx: watch::Sender<Option<Arc<KubeModel>>>,
) {
    if stores.ready().await.is_err() {
        return;
    }
    tracing::info!("Kubernetes: every watched kind is listed");
    let mut last: Option<Translation> = None;
    let mut generation = 0;
    loop {
        let translation = translate::translate(&stores.snapshot());
        if last.as_ref() != Some(&translation) {
            let old = last.as_ref().map(|t| t.warnings.as_slice()).unwrap_or(&[]);
            for w in translation.warnings.iter().filter(|w| !old.contains(w)) {
                tracing::warn!("Kubernetes: {w}");
            }
            generation += 1;
            tracing::debug!(
                generation,
                services = translation.model.services.len(),
                nodes = translation.model.nodes.len(),
                pods = translation.model.pods.len(),
                "Kubernetes model"
            );
            let model = KubeModel {
                generation,
                translation: translation.clone(),
            };
            if tx.send(Some(Arc::new(model))).is_err() {
                return;
            }
            last = Some(translation);
        }
        notify.notified().await;
        tokio::time::sleep(coalesce).await;
    }
}
