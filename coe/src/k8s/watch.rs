//! The watchers: kube-rs watchers for the five kinds feeding [`super::store`]s of their
//! [`super::slim`] projections, and the task that publishes their translation. This is the
//! I/O half of [`super`]; [`super::translate`] and [`super::keyed`] do the thinking. Each
//! event records the key of the object it touched; the publisher translates just those
//! objects again (a relist translates everything).

use std::fmt::Debug;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use super::keyed::{Changes, Keyed, ObjKey, Objects};
use super::slim;
use super::store::{Store, Touched, Writer, WriterGone};
use super::translate::{ENDPOINT_SLICE_SELECTOR, SERVICE_SELECTOR, Snapshot, Translation};

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
    /// After an event, wait this long for more before translating once for the whole burst
    /// (zero by default: the translation is by key, and events that come while it runs are
    /// taken together by the next one).
    pub coalesce: Duration,
    /// Retry a failed list or watch after this long at first, doubling each time...
    pub min_backoff: Duration,
    /// ...up to this.
    pub max_backoff: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            coalesce: Duration::ZERO,
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// What a watcher reports to a [`WatchObserver`], with the resource it watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchSignal {
    /// The watch started over with a fresh list (after an expired `resourceVersion`, or
    /// after an error it could not resume from). The first list is not one.
    Relisted,
    /// A list or watch request failed; it is retried with backoff.
    Failed,
}

/// Told of every [`WatchSignal`] (for metrics): `observer(resource, signal)`, with
/// `services`, `endpointslices`, `nodes`, `pods` or `namespaces`.
pub type WatchObserver = Arc<dyn Fn(&'static str, WatchSignal) + Send + Sync>;

/// What the watchers publish: the translation of the stores, numbered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeModel {
    /// Grows by one per published change.
    pub generation: u64,
    /// The model, remotes and warnings.
    pub translation: Translation,
    /// When the change this generation carries began, as the EndpointSlice controller says:
    /// the earliest `endpoints.kubernetes.io/last-change-trigger-time` of the slices it
    /// changed (kube-proxy measures its network-programming latency from there), if any.
    pub triggered_at: Option<std::time::SystemTime>,
}

/// The annotation the EndpointSlice controller stamps with when a slice's change began.
pub const TRIGGER_TIME_ANNOTATION: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// A slice's trigger time, if it carries a valid one (RFC 3339).
pub fn trigger_time(slice: &slim::EndpointSlice) -> Option<std::time::SystemTime> {
    let text = slice.metadata.annotations.get(TRIGGER_TIME_ANNOTATION)?;
    let at = k8s_openapi::chrono::DateTime::parse_from_rfc3339(text).ok()?;
    Some(at.with_timezone(&k8s_openapi::chrono::Utc).into())
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
        Self::start_observed(client, config, Arc::new(|_, _| {}))
    }

    /// [`Watchers::start`], telling `observer` when a watch relists or fails.
    pub fn start_observed(client: Client, config: WatchConfig, observer: WatchObserver) -> Self {
        let notify = Arc::new(Notify::new());
        let pending: Pending = Arc::new(Mutex::new(Changes::default()));
        let mut tasks = Vec::new();
        let outage = Outage::default();
        let kinds = Kinds {
            notify: &notify,
            pending: &pending,
            config: &config,
            observer: &observer,
            outage: &outage,
        };
        let services = kinds.watch::<core::Service, slim::Service>(
            Api::all(client.clone()),
            "services",
            watcher::Config::default().labels(SERVICE_SELECTOR),
            |c, k| {
                c.services.insert(k);
            },
            &mut tasks,
        );
        let slices = kinds.watch::<discovery::EndpointSlice, slim::EndpointSlice>(
            Api::all(client.clone()),
            "endpointslices",
            watcher::Config::default().labels(ENDPOINT_SLICE_SELECTOR),
            |c, k| {
                c.slices.insert(k);
            },
            &mut tasks,
        );
        let nodes = kinds.watch::<core::Node, slim::Node>(
            Api::all(client.clone()),
            "nodes",
            watcher::Config::default(),
            |c, k| {
                c.nodes.insert(k.1);
            },
            &mut tasks,
        );
        let pods = kinds.watch::<core::Pod, slim::Pod>(
            Api::all(client.clone()),
            "pods",
            watcher::Config::default(),
            |c, k| {
                c.pods.insert(k);
            },
            &mut tasks,
        );
        let namespaces = kinds.watch::<core::Namespace, slim::Namespace>(
            Api::all(client),
            "namespaces",
            watcher::Config::default(),
            |c, _| c.namespaces = true,
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
        tasks.push(tokio::spawn(publish(
            stores,
            notify,
            pending,
            config.coalesce,
            tx,
        )));
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
    services: Store<slim::Service>,
    slices: Store<slim::EndpointSlice>,
    nodes: Store<slim::Node>,
    pods: Store<slim::Pod>,
    namespaces: Store<slim::Namespace>,
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
    async fn ready(&self) -> Result<(), WriterGone> {
        self.services.ready().await?;
        self.slices.ready().await?;
        self.nodes.ready().await?;
        self.pods.ready().await?;
        self.namespaces.ready().await
    }
}

impl Objects for Stores {
    fn service(&self, key: &ObjKey) -> Option<Arc<slim::Service>> {
        self.services.get(key)
    }
    fn slice(&self, key: &ObjKey) -> Option<Arc<slim::EndpointSlice>> {
        self.slices.get(key)
    }
    fn node(&self, name: &str) -> Option<Arc<slim::Node>> {
        self.nodes.get(&(String::new(), name.to_string()))
    }
    fn pod(&self, key: &ObjKey) -> Option<Arc<slim::Pod>> {
        self.pods.get(key)
    }
    fn namespace_names(&self) -> Vec<String> {
        self.namespaces
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    }
    fn snapshot(&self) -> Snapshot {
        Stores::snapshot(self)
    }
}

/// What events touched since the publisher last looked.
type Pending = Arc<Mutex<Changes>>;

/// What every watcher shares: where to record what an event touched, and whom to wake.
struct Kinds<'a> {
    notify: &'a Arc<Notify>,
    pending: &'a Pending,
    config: &'a WatchConfig,
    observer: &'a WatchObserver,
    outage: &'a Outage,
}

/// The kinds whose watch is failing now: an API server outage is said once, as one warning
/// when the first watch fails, and once more when the last one is back; each watch's own
/// retries are at debug.
#[derive(Default, Clone)]
struct Outage(Arc<std::sync::Mutex<std::collections::BTreeSet<&'static str>>>);

impl Outage {
    fn failed(&self, what: &'static str, e: &dyn std::fmt::Display) {
        // A poisoned lock only means another watcher panicked; the set is still a set.
        let mut failing = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let first = failing.is_empty();
        if failing.insert(what) && first {
            tracing::warn!(
                "Kubernetes API: the watch of {what} failed: {e}; keeping the last state and \
                 retrying (each watch's retries are logged at debug until the API server is back)"
            );
        } else {
            tracing::debug!("Kubernetes watch of {what}: {e}");
        }
    }

    fn back(&self, what: &'static str) {
        let mut failing = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if failing.remove(what) {
            tracing::debug!("Kubernetes watch of {what} is back");
            if failing.is_empty() {
                tracing::info!("Kubernetes API: every watch is back");
            }
        }
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

impl Kinds<'_> {
    /// Starts a watcher for one kind, keeping the projection `T` of its objects; every event
    /// records the key it touched with `record` (a relist records everything) and pokes the
    /// publisher.
    fn watch<K, T>(
        &self,
        api: Api<K>,
        what: &'static str,
        wc: watcher::Config,
        record: fn(&mut Changes, ObjKey),
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Store<T>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
        T: From<K> + Send + Sync + 'static,
    {
        let (reader, mut writer) = Writer::<T>::new();
        let backoff = Doubling {
            min: self.config.min_backoff,
            max: self.config.max_backoff.max(self.config.min_backoff),
            next: self.config.min_backoff,
        };
        let stream = relisting(api, wc).backoff(backoff);
        let notify = self.notify.clone();
        let pending = self.pending.clone();
        let observer = self.observer.clone();
        let outage = self.outage.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                if let Ok(watcher::Event::Init) = &event {
                    if listed {
                        observer(what, WatchSignal::Relisted);
                    }
                    listed = true;
                }
                if event.is_err() {
                    observer(what, WatchSignal::Failed);
                }
                match event {
                    Ok(event) => {
                        outage.back(what);
                        let touched = writer.apply(event);
                        // A poisoned lock only means another recorder panicked; the set is
                        // still a set of keys.
                        let p = || pending.lock().unwrap_or_else(|e| e.into_inner());
                        match touched {
                            Touched::Nothing => continue,
                            Touched::Object(key) => record(&mut p(), key),
                            Touched::Everything => p().all = true,
                        }
                        notify.notify_one();
                    }
                    Err(e) => outage.failed(what, &e),
                }
            }
        }));
        reader
    }
}

/// Whether a watcher error is a watch refused with a plain HTTP 410 (Gone). kube's client
/// does not look at a watch response's status: it reads the body's `Status` as an error
/// item of the stream (`WatchFailed`), after which the watcher resumes from the same version.
fn gone(e: &watcher::Error) -> bool {
    matches!(
        e,
        watcher::Error::WatchFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 410
    )
}

/// kube's watcher, started over with a fresh list when the API server refuses to resume a
/// watch with a plain HTTP 410. kube-runtime handles a 410 that comes as an `ERROR` event
/// in the stream, but retries a watch request answered with HTTP 410 from the same
/// `resourceVersion` forever (kube-rs issue 1042), so the store would never change again.
/// The error is still passed on (the caller counts it and backs off); the next item comes
/// from a new watcher, whose list the store swaps in.
pub(crate) fn relisting<K>(
    api: Api<K>,
    wc: watcher::Config,
) -> impl futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let start = move |api: &Api<K>, wc: &watcher::Config| watcher(api.clone(), wc.clone()).boxed();
    let first = start(&api, &wc);
    futures::stream::unfold((api, wc, first), move |(api, wc, mut inner)| async move {
        let item = inner.next().await?;
        if let Err(e) = &item
            && gone(e)
        {
            tracing::info!("Kubernetes watch refused with 410 Gone; listing again");
            inner = start(&api, &wc);
        }
        Some((item, (api, wc, inner)))
    })
}

/// Publishes the translation of the stores once all are listed, then after each burst, by
/// key: only what the events touched is translated again.
async fn publish(
    stores: Stores,
    notify: Arc<Notify>,
    pending: Pending,
    coalesce: Duration,
    tx: watch::Sender<Option<Arc<KubeModel>>>,
) {
    if stores.ready().await.is_err() {
        return;
    }
    tracing::info!("Kubernetes: every watched kind is listed");
    // Everything recorded so far is in the first, whole translation.
    *pending.lock().unwrap_or_else(|e| e.into_inner()) = Changes::default();
    let mut keyed = Keyed::new(&stores);
    let mut last: Option<Translation> = None;
    let mut generation = 0;
    let mut triggered_at = None;
    loop {
        let translation = keyed.translation();
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
                triggered_at: triggered_at.take(),
            };
            if tx.send(Some(Arc::new(model))).is_err() {
                return;
            }
            last = Some(translation);
        }
        notify.notified().await;
        if !coalesce.is_zero() {
            tokio::time::sleep(coalesce).await;
        }
        let changes = std::mem::take(&mut *pending.lock().unwrap_or_else(|e| e.into_inner()));
        // The earliest trigger among the slices this burst changed (kept until a change is
        // published, so a burst that changes nothing passes its trigger on).
        let trigger = changes
            .slices
            .iter()
            .filter_map(|key| stores.slice(key))
            .filter_map(|slice| trigger_time(&slice))
            .min();
        triggered_at = match (triggered_at, trigger) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        keyed.apply(&stores, &changes);
    }
}
