//! The HTTP server: RESTCONF routes over the durable store, publishing each new model.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use coe::rest::{Northbound, RestConfig, operational::Unavailable};
//!
//! let nb = Northbound::open(&RestConfig::new("/var/lib/svcflow"), Arc::new(Unavailable))?;
//! let mut models = nb.subscribe(); // watch::Receiver<Arc<Published>>
//! tokio::spawn(async move {
//!     loop {
//!         // The first model is the state replayed from disk.
//!         let published = models.borrow_and_update().clone();
//!         // hand published.model and published.ovsdb_remotes to the controller
//!         if models.changed().await.is_err() {
//!             break;
//!         }
//!     }
//! });
//! nb.serve(std::future::pending()).await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak, mpsc};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use netvirt::model::Model;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::auth::{AuthFileError, Credentials};
use super::body::WholeBody;
use super::config::StoreKind;
use super::config::{ConfigError, RestConfig};
use super::durable::{ApplyError, Changed, DurableStore, OpenError};
use super::error::{RequestError, error_body};
use super::limits::{BodyBudget, IdleListener};
use super::operational::OperationalSource;
use super::replicated::{Mirror, Replicated, WriteError};
use super::store::{Change, Rules, Store};
use super::tls::RestListener;
use super::to_model::{Translator, ovsdb_remotes};
use super::types::{DATASTORE_PATH, Kind};
use super::{openapi, parse};

/// Where the OpenAPI document is served.
pub const OPENAPI_PATH: &str = "/openapi.json";
/// The operational view of all services.
pub const OPERATIONAL_PATH: &str = "/restconf/operational/service:service-information";
/// Where the dry-run plan is served (`/{node}` below it for one node).
pub const PLAN_PATH: &str = "/restconf/operational/svcflow:plan";
/// Where the live packet trace is asked for (a RESTCONF operation: `{"input": {…}}` in,
/// `{"output": {…}}` out).
pub const TRACE_PATH: &str = "/restconf/operations/svcflow:trace";
/// Where the nodes view is served (`/{node}` below it for one node).
pub const NODES_PATH: &str = "/restconf/operational/svcflow:nodes";
/// Where the HTML status page is served.
pub const STATUS_PAGE_PATH: &str = "/";

/// What the northbound publishes after accepted writes (and once at startup).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// The model the REST state describes.
    pub model: Model,
    /// The OVSDB remote of each node, by node name.
    pub ovsdb_remotes: BTreeMap<String, String>,
    /// The sequence number of the last write it includes; it grows by one per accepted write
    /// and survives restarts.
    pub revision: u64,
    /// Set on a publication made partway through translating a long change (more than
    /// [`PUBLISH_PART`] services): the model holds `revision` and part of the writes up to
    /// this revision, so that the switches start on the change while the rest translates. A
    /// publication of this revision with `part_of` unset follows.
    pub part_of: Option<u64>,
}

impl Published {
    /// The revision this publication brings the switches to: `revision`, or the one it is
    /// part of.
    pub fn target(&self) -> u64 {
        self.part_of.unwrap_or(self.revision)
    }
}

/// How many services the publisher translates before it publishes what it has, when a write
/// changes more: a container PUT of 30,000 services took 0.12–0.15 s to translate, during
/// which the switches had nothing to do (`docs/performance.md`). The first early publication
/// comes after an eighth of it (512 services), so that the switches start sooner.
pub const PUBLISH_PART: usize = 4_096;

/// Why the northbound cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A bad setting.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The credentials file.
    #[error(transparent)]
    Auth(#[from] AuthFileError),
    /// The durable state.
    #[error(transparent)]
    State(#[from] OpenError),
    /// The replicated store could not start.
    #[error("the OVSDB store: {0}")]
    Store(String),
    /// The model publisher thread could not start.
    #[error("starting the REST model publisher: {0}")]
    Thread(std::io::Error),
    /// Binding or serving failed.
    #[error("REST listener {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
}

/// Where the state is: the local log, or a replicated OVSDB store.
enum Backing {
    Local(Arc<Mutex<DurableStore>>),
    Replicated(Arc<Replicated>),
}

impl Backing {
    /// Runs `f` on the current state; `None` if a lock is poisoned.
    fn with_store<T>(&self, f: impl FnOnce(&Store) -> T) -> Option<T> {
        match self {
            Backing::Local(d) => d.lock().ok().map(|d| f(d.store())),
            Backing::Replicated(r) => r.mirror().lock().ok().map(|m| f(&m.store)),
        }
    }

    fn revision(&self) -> u64 {
        match self {
            Backing::Local(d) => d.lock().map(|d| d.seq()).unwrap_or_default(),
            Backing::Replicated(r) => r.mirror().lock().map(|m| m.revision).unwrap_or_default(),
        }
    }

    /// Whether reads may be stale (a replicated store without a leader).
    fn stale(&self) -> bool {
        match self {
            Backing::Local(_) => false,
            Backing::Replicated(r) => r.stale(),
        }
    }
}

/// The header that marks a read answered from a state that may be stale (RFC 7234's
/// `Warning: 110`), when the replicated store has no leader.
pub const STALE_WARNING: &str = "110 svcflow \"Response is Stale\"";

struct Shared {
    backing: Backing,
    /// Wakes the publisher after a write.
    dirty: mpsc::Sender<()>,
    models: watch::Receiver<Arc<Published>>,
    credentials: Option<Credentials>,
    operational: Arc<dyn OperationalSource>,
    /// Told each response's status (the daemon's metrics).
    observer: Option<Observer>,
    /// What request bodies may hold together.
    budget: BodyBudget,
    /// Why writes are refused, if they are.
    refuse_writes: Option<String>,
}

/// A callback told each REST response's HTTP status.
pub type Observer = Arc<dyn Fn(u16) + Send + Sync>;

/// The REST northbound: open it, mount or serve its router, and subscribe to its models.
pub struct Northbound {
    shared: Arc<Shared>,
    listen: SocketAddr,
    max_body_bytes: usize,
    idle_timeout: std::time::Duration,
    https: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

impl std::fmt::Debug for Northbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Northbound")
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl Northbound {
    /// Checks `config`, loads the credentials, and opens and replays the durable state.
    /// Blocking: call it before serving, or from `spawn_blocking`.
    pub fn open(
        config: &RestConfig,
        operational: Arc<dyn OperationalSource>,
    ) -> Result<Self, StartError> {
        config.validate()?;
        let credentials = config
            .auth_file
            .as_deref()
            .map(Credentials::load)
            .transpose()?;
        let rules = Rules {
            node_port_range: config.node_port_range.clone(),
        };
        let (dirty, wake) = mpsc::channel();
        let (backing, first, source, translator) = match &config.store {
            StoreKind::Local => {
                let durable = DurableStore::open(&config.state_dir, rules)?;
                if let Some(torn) = durable.torn() {
                    tracing::warn!(
                        "{}: removed a torn, never acknowledged final record of {} bytes at byte {}; saved it to {}",
                        durable.wal().path().display(),
                        torn.len,
                        torn.offset,
                        torn.saved_to.display()
                    );
                }
                let mut durable = durable;
                let mut translator = Translator::default();
                let first = publish(
                    durable.take_changed(),
                    durable.store(),
                    (durable.seq(), durable.seq()),
                    &mut translator,
                    &config.ovsdb_remotes,
                    |_| {},
                );
                let durable = Arc::new(Mutex::new(durable));
                let source = Source::Local(Arc::downgrade(&durable));
                (Backing::Local(durable), first, source, translator)
            }
            StoreKind::Ovsdb(remotes) => {
                let wake_publisher = dirty.clone();
                let client = ovsdb::ClientConfig {
                    tls_client: config.store_tls.as_ref().map(|t| t.0.clone()),
                    ..ovsdb::ClientConfig::default()
                };
                let replicated = Replicated::start_with(remotes, rules, client, move || {
                    let _ = wake_publisher.send(());
                })
                .map_err(StartError::Store)?;
                tracing::info!(
                    "REST state: the {} database of the OVSDB cluster {}",
                    super::replicated::DB,
                    remotes.join(",")
                );
                let replicated = Arc::new(replicated);
                let source = Source::Replicated(Arc::downgrade(replicated.mirror()));
                (
                    Backing::Replicated(replicated),
                    Published::default(),
                    source,
                    Translator::default(),
                )
            }
        };
        let (tx, models) = watch::channel(Arc::new(first));
        let publisher = Publisher {
            source,
            translator,
            overrides: config.ovsdb_remotes.clone(),
            tx,
            wake,
        };
        std::thread::Builder::new()
            .name("svcflow-rest-publish".into())
            .spawn(move || publisher.run())
            .map_err(StartError::Thread)?;
        Ok(Self {
            shared: Arc::new(Shared {
                backing,
                dirty,
                models,
                credentials,
                operational,
                observer: None,
                budget: BodyBudget::new(config.body_budget_bytes, config.max_body_bytes),
                refuse_writes: config.refuse_writes.clone(),
            }),
            listen: config.listen,
            max_body_bytes: config.max_body_bytes,
            idle_timeout: config.idle_timeout,
            https: config.https.as_ref().map(|t| t.0.clone()),
        })
    }

    /// Tells `observer` the status of every response from now on (set it before mounting or
    /// serving the router).
    pub fn observe(mut self, observer: Observer) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.observer = Some(observer);
        }
        self
    }

    /// A receiver of the models; it starts with the model replayed from disk. A burst of
    /// writes may be published as one model: the latest always is.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Published>> {
        self.shared.models.clone()
    }

    /// With a replicated store, why its state breaks this replica's rules (`None` while it
    /// meets them) and every change of that; `None` with a local store, which refuses to open
    /// such a state instead.
    pub fn store_refusal(&self) -> Option<watch::Receiver<Option<RequestError>>> {
        match &self.shared.backing {
            Backing::Local(_) => None,
            Backing::Replicated(r) => Some(r.refusal()),
        }
    }

    /// The latest publication.
    pub fn published(&self) -> Arc<Published> {
        self.shared.models.borrow().clone()
    }

    /// The revision of the latest accepted write (what [`Published::revision`] reaches).
    pub fn revision(&self) -> u64 {
        self.shared.backing.revision()
    }

    /// Waits until the model of the latest accepted write is published, and returns it.
    pub async fn settled(&self) -> Arc<Published> {
        let want = self.revision();
        let mut models = self.subscribe();
        match models.wait_for(|p| p.revision >= want).await {
            Ok(p) => p.clone(),
            Err(_) => self.published(),
        }
    }

    /// A copy of the current REST state.
    pub fn store(&self) -> Store {
        self.shared
            .backing
            .with_store(Store::clone)
            .unwrap_or_default()
    }

    /// The routes, with auth and the body limit applied; mount it or serve it.
    pub fn router(&self) -> Router {
        router(self.shared.clone(), self.max_body_bytes)
    }

    /// Binds the configured address and serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let listener =
            TcpListener::bind(self.listen)
                .await
                .map_err(|source| StartError::Listen {
                    addr: self.listen,
                    source,
                })?;
        self.serve_on(listener, shutdown).await
    }

    /// Serves on an already bound listener, over HTTPS if the config had
    /// [`RestConfig::https`]. Without credentials, it must be on loopback.
    pub async fn serve_on(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartError> {
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: self.listen,
            source,
        })?;
        if self.shared.credentials.is_none() && !addr.ip().is_loopback() {
            return Err(ConfigError::AuthRequired(addr).into());
        }
        let idle = self.idle_timeout;
        let listener = RestListener::new(IdleListener::new(listener, idle), self.https.clone());
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(|source| StartError::Listen { addr, source })
    }
}

/// Brings `translator` up to the writes since its last call and returns its model (a copy
/// that shares all its structure) for `revision`. A change of more than [`PUBLISH_PART`]
/// services hands `early` a publication after each part (see [`Published::part_of`]), whose
/// revision is `previous`.
fn publish(
    changed: Changed,
    store: &Store,
    (previous, revision): (u64, u64),
    translator: &mut Translator,
    overrides: &BTreeMap<String, String>,
    mut early: impl FnMut(Published),
) -> Published {
    let ovsdb_remotes = ovsdb_remotes(store, overrides);
    translator.apply_in_parts(store, &changed, PUBLISH_PART, |model| {
        early(Published {
            model: model.clone(),
            ovsdb_remotes: ovsdb_remotes.clone(),
            revision: previous,
            part_of: Some(revision),
        });
    });
    Published {
        model: translator.model().clone(),
        ovsdb_remotes,
        revision,
        part_of: None,
    }
}

/// How long the publisher leaves the store to a waiting write before building the
/// validation index (30,000 services' index took 13 ms, which a container PUT of the services
/// right after one of the endpoints waited for).
const INDEX_AFTER: std::time::Duration = std::time::Duration::from_millis(1);

/// What the publisher follows, weakly, so that dropping the northbound closes the store.
enum Source {
    Local(Weak<Mutex<DurableStore>>),
    Replicated(Weak<Mutex<Mirror>>),
}

/// Translates the writes into the model, off the request path: by key, and a burst of writes
/// costs one publication, not one each (a write of more than [`PUBLISH_PART`] services also
/// publishes as it translates, see [`Published::part_of`]). Its thread runs below the
/// daemon's priority ([`crate::priority`]). Ends when the northbound is dropped.
struct Publisher {
    source: Source,
    translator: Translator,
    overrides: BTreeMap<String, String>,
    tx: watch::Sender<Arc<Published>>,
    wake: mpsc::Receiver<()>,
}

impl Publisher {
    fn run(mut self) {
        // The switches' engines go first when the cores are contended (`crate::priority`).
        if let Err(e) = crate::priority::background_thread() {
            tracing::warn!("the REST publisher runs at the daemon's priority, not below it: {e}");
        }
        while self.wake.recv().is_ok() {
            while self.wake.try_recv().is_ok() {}
            let published = self.tx.borrow().revision;
            match &self.source {
                Source::Local(durable) => {
                    let Some(durable) = durable.upgrade() else {
                        return;
                    };
                    let Ok(mut d) = durable.lock() else { return };
                    if d.seq() == published {
                        continue;
                    }
                    let changed = d.take_changed();
                    let next = publish(
                        changed,
                        d.store(),
                        (published, d.seq()),
                        &mut self.translator,
                        &self.overrides,
                        |early| {
                            self.tx.send_replace(Arc::new(early));
                        },
                    );
                    let revision = next.revision;
                    self.tx.send_replace(Arc::new(next));
                    // The validation index, after a container PUT, while the engines render
                    // what was published and before the next small write needs it; but a
                    // write already waiting for the store goes first (a container PUT after
                    // this one does not need it, and the next publication builds it then).
                    if !d.needs_index() {
                        continue;
                    }
                    drop(d);
                    std::thread::sleep(INDEX_AFTER);
                    let Ok(mut d) = durable.lock() else { return };
                    if d.seq() == revision {
                        d.build_index();
                    }
                }
                Source::Replicated(mirror) => {
                    let Some(mirror) = mirror.upgrade() else {
                        return;
                    };
                    let Ok(mut m) = mirror.lock() else { return };
                    if m.revision == published && !m.has_changes() {
                        continue;
                    }
                    // A state this replica's rules refuse is not published: the switches
                    // keep the last one it accepted. Its changes wait for the state to be
                    // mended (the mirror says why, once).
                    if m.refuses() {
                        continue;
                    }
                    let changed = m.take_changed();
                    let next = publish(
                        changed,
                        &m.store,
                        (published, m.revision),
                        &mut self.translator,
                        &self.overrides,
                        |early| {
                            self.tx.send_replace(Arc::new(early));
                        },
                    );
                    self.tx.send_replace(Arc::new(next));
                    // As above: a write validates against the mirror's index.
                    m.store.build_index();
                }
            }
        }
    }
}

/// The router's state.
type AppState = Arc<Shared>;

fn router(shared: AppState, max_body: usize) -> Router {
    let mut r = Router::new();
    for kind in Kind::ALL {
        r = r
            .route(&kind.container_path(), container_routes(kind))
            .route(&kind.item_path_template(), item_routes(kind));
    }
    r.route(DATASTORE_PATH, datastore_routes())
        .route(PLAN_PATH, get(plan_all))
        .route(TRACE_PATH, axum::routing::post(trace))
        .route(&format!("{PLAN_PATH}/{{node}}"), get(plan_one))
        .route(OPERATIONAL_PATH, get(operational_all))
        .route(NODES_PATH, get(nodes_all))
        .route(&format!("{NODES_PATH}/{{node}}"), get(nodes_one))
        .route(STATUS_PAGE_PATH, get(status_page))
        .route(
            &format!("{OPERATIONAL_PATH}/services/{{uid}}"),
            get(operational_one),
        )
        .route(
            OPENAPI_PATH,
            get(|| async { axum::Json(openapi::document()) }),
        )
        .fallback(|| async {
            restconf_error(
                StatusCode::NOT_FOUND,
                "data-missing",
                None,
                "no such resource",
            )
        })
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(shared.clone(), budgeted))
        .layer(middleware::from_fn_with_state(shared.clone(), refusing))
        .layer(middleware::map_response(restconf_bodies))
        .layer(middleware::from_fn_with_state(shared.clone(), authenticate))
        .layer(middleware::map_response_with_state(
            shared.clone(),
            observed,
        ))
        .with_state(shared)
}

fn container_routes(kind: Kind) -> MethodRouter<AppState> {
    // A PUT replaces the list; a POST adds to it (409 if an item exists).
    let written = move |method: Method,
                        State(s): State<AppState>,
                        h: HeaderMap,
                        WholeBody(b): WholeBody| async move {
        let items = match json_body(&h).and_then(|()| parse::container_body(kind, &b)) {
            Ok(items) => items,
            Err(e) => return request_error(&e),
        };
        if method == Method::POST {
            write(s, Change::Create(kind, items), StatusCode::CREATED, None).await
        } else {
            write(s, Change::Replace(kind, items), StatusCode::OK, None).await
        }
    };
    get(move |State(s): State<AppState>| read(s, move |store| container_json(store, kind)))
        .put(written)
        .post(written)
        .delete(move |State(s): State<AppState>| async move {
            write(s, Change::Clear(kind), StatusCode::OK, None).await
        })
}

/// The whole datastore: every container in one body. A PUT replaces each container's list
/// as one write (one check, one log record, one revision), so a resync never shows the
/// switches services without their endpoints; it must give every container.
fn datastore_routes() -> MethodRouter<AppState> {
    get(|State(s): State<AppState>| read(s, |store| Ok(Value::Object(store.datastore_json())))).put(
        |State(s): State<AppState>, h: HeaderMap, WholeBody(b): WholeBody| async move {
            let lists = match json_body(&h).and_then(|()| parse::datastore_body(&b)) {
                Ok(lists) => lists,
                Err(e) => return request_error(&e),
            };
            write(s, Change::Datastore(lists), StatusCode::OK, None).await
        },
    )
}

fn item_routes(kind: Kind) -> MethodRouter<AppState> {
    // A PUT writes the item whether or not it exists; a POST creates it (409 if it exists).
    let written = move |method: Method,
                        State(s): State<AppState>,
                        Path(uid): Path<String>,
                        h: HeaderMap,
                        WholeBody(b): WholeBody| async move {
        let item = match json_body(&h).and_then(|()| parse::item_body(kind, &uid, &b)) {
            Ok(item) => item,
            Err(e) => return request_error(&e),
        };
        if method == Method::POST {
            let location = format!("{}/{}/{}", kind.container_path(), kind.list(), uid);
            let change = Change::Create(kind, vec![item]);
            write(s, change, StatusCode::CREATED, Some(location)).await
        } else {
            write(s, Change::Upsert(item), StatusCode::OK, None).await
        }
    };
    get(move |State(s): State<AppState>, Path(uid): Path<String>| {
        read(s, move |store| match store.get(kind, &uid) {
            Some(item) => Ok(json!({ kind.qualified_list(): [item.to_json()] })),
            None => Err(RequestError::NotFound {
                path: kind.item_name(&uid),
            }),
        })
    })
    .put(written)
    .post(written)
    .delete(
        move |State(s): State<AppState>, Path(uid): Path<String>| async move {
            write(s, Change::Delete(kind, uid), StatusCode::OK, None).await
        },
    )
}

fn container_json(store: &Store, kind: Kind) -> Result<Value, RequestError> {
    Ok(json!({ kind.qualified_container(): store.container_json(kind) }))
}

/// Runs `f` on the current store and answers 200 with its JSON. Off the async threads, as a
/// write may hold the store while it syncs.
async fn read(
    s: AppState,
    f: impl FnOnce(&Store) -> Result<Value, RequestError> + Send + 'static,
) -> Response {
    let task = tokio::task::spawn_blocking(move || {
        let stale = s.backing.stale();
        s.backing.with_store(f).map(|r| (r, stale)).ok_or(())
    });
    match task.await {
        Ok(Ok((Ok(v), stale))) => {
            let mut resp = (StatusCode::OK, axum::Json(v)).into_response();
            if stale {
                resp.headers_mut()
                    .insert(header::WARNING, HeaderValue::from_static(STALE_WARNING));
            }
            resp
        }
        Ok(Ok((Err(e), _))) => request_error(&e),
        Ok(Err(())) => internal("the store lock is poisoned"),
        Err(e) => internal(&format!("the read task failed: {e}")),
    }
}

/// Validates, logs (fsync) and applies a change off the async threads, then publishes.
async fn write(s: AppState, change: Change, ok: StatusCode, location: Option<String>) -> Response {
    let durable = match &s.backing {
        Backing::Local(d) => d.clone(),
        Backing::Replicated(r) => {
            let result = r.write(change).await;
            return match result {
                Ok(()) => {
                    let _ = s.dirty.send(());
                    created(ok, location)
                }
                Err(WriteError::Request(e)) => request_error(&e),
                Err(WriteError::Unavailable(why)) => {
                    tracing::warn!("REST write not applied: {why}");
                    restconf_error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "resource-denied",
                        None,
                        &format!("the replicated store cannot take writes now: {why}"),
                    )
                }
                Err(WriteError::Unknown(why)) => {
                    tracing::warn!("REST write outcome unknown: {why}");
                    restconf_error(
                        StatusCode::GATEWAY_TIMEOUT,
                        "operation-failed",
                        None,
                        &format!("the replicated store did not confirm the write: {why}"),
                    )
                }
                Err(WriteError::Failed(why)) => {
                    tracing::error!("REST write not applied: {why}");
                    internal(&format!("the replicated store refused the change: {why}"))
                }
            };
        }
    };
    let task = tokio::task::spawn_blocking(move || -> Result<(), Failed> {
        let mut d = durable
            .lock()
            .map_err(|_| Failed::Internal("the store lock is poisoned".into()))?;
        match d.apply(change) {
            Ok(_) => {
                // The publisher only ends with the northbound, so this cannot fail here.
                let _ = s.dirty.send(());
                Ok(())
            }
            Err(ApplyError::Request(e)) => Err(Failed::Request(e)),
            Err(ApplyError::Wal(e)) => {
                tracing::error!("REST write not applied: {e}");
                Err(Failed::Internal(format!(
                    "the change could not be stored: {e}"
                )))
            }
        }
    });
    match task.await {
        Ok(Ok(())) => created(ok, location),
        Ok(Err(Failed::Request(e))) => request_error(&e),
        Ok(Err(Failed::Internal(message))) => internal(&message),
        Err(e) => internal(&format!("the write task failed: {e}")),
    }
}

/// The answer to an accepted write.
fn created(ok: StatusCode, location: Option<String>) -> Response {
    let mut resp = ok.into_response();
    if let Some(loc) = location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    resp
}

/// Why a write failed.
enum Failed {
    Request(RequestError),
    Internal(String),
}

/// Accepts JSON content types, or none.
fn json_body(headers: &HeaderMap) -> Result<(), RequestError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ct = ct
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        "application/json" | "application/yang.data+json" | "application/yang-data+json" => Ok(()),
        _ => Err(RequestError::MediaType { content_type: ct }),
    }
}

/// Adds the nodes the operational view has no state for to `body`'s `object` (the root when
/// None), if any.
fn with_unreported(
    mut body: serde_json::Value,
    object: Option<&str>,
    s: &AppState,
) -> serde_json::Value {
    let unreported = s.operational.unreported();
    let target = match object {
        Some(key) => body.get_mut(key),
        None => Some(&mut body),
    };
    if !unreported.is_empty()
        && let Some(o) = target.and_then(|o| o.as_object_mut())
    {
        o.insert("unreported-nodes".into(), json!(unreported));
    }
    body
}

async fn operational_all(State(s): State<AppState>) -> Response {
    match s.operational.services().await {
        Ok(services) => (
            StatusCode::OK,
            axum::Json(with_unreported(
                json!({ "service:service-information": { "services": services } }),
                Some("service:service-information"),
                &s,
            )),
        )
            .into_response(),
        Err(e) => restconf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "operation-failed",
            None,
            &e,
        ),
    }
}

async fn plan_all(State(s): State<AppState>) -> Response {
    plan(s, None).await
}

async fn plan_one(State(s): State<AppState>, Path(node): Path<String>) -> Response {
    plan(s, Some(node)).await
}

/// Every node's plan (or `node`'s), with the nodes it cannot plan and why.
async fn plan(s: AppState, node: Option<String>) -> Response {
    match s.operational.plan(node.clone()).await {
        Ok(plans) => {
            let mut unreported = s.operational.unreported();
            // A node whose switch left is planned against what was last synced to it.
            unreported.retain(|u| !plans.iter().any(|p| p.node == u.node));
            if let Some(node) = &node {
                unreported.retain(|u| &u.node == node);
                if plans.is_empty() && unreported.is_empty() {
                    return restconf_error(
                        StatusCode::NOT_FOUND,
                        "data-missing",
                        Some(&format!("svcflow:plan/{}", super::error::excerpt(node))),
                        &format!("no node `{}` in the model", super::error::excerpt(node)),
                    );
                }
            }
            let mut body = json!({ "nodes": plans });
            if !unreported.is_empty()
                && let Some(o) = body.as_object_mut()
            {
                o.insert("unreported-nodes".into(), json!(unreported));
            }
            (StatusCode::OK, axum::Json(json!({ "svcflow:plan": body }))).into_response()
        }
        Err(e) => restconf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "operation-failed",
            None,
            &e,
        ),
    }
}

async fn nodes_all(State(s): State<AppState>) -> Response {
    nodes(s, None).await
}

async fn nodes_one(State(s): State<AppState>, Path(node): Path<String>) -> Response {
    nodes(s, Some(node)).await
}

/// Every node of the model (or `node` alone: 404 if the model has no such node).
async fn nodes(s: AppState, node: Option<String>) -> Response {
    match s.operational.nodes().await {
        Ok(mut nodes) => {
            if let Some(node) = &node {
                nodes.retain(|n| &n.node == node);
                if nodes.is_empty() {
                    return restconf_error(
                        StatusCode::NOT_FOUND,
                        "data-missing",
                        Some(&format!("svcflow:nodes/{}", super::error::excerpt(node))),
                        &format!("no node `{}` in the model", super::error::excerpt(node)),
                    );
                }
            }
            (
                StatusCode::OK,
                axum::Json(json!({ "svcflow:nodes": { "nodes": nodes } })),
            )
                .into_response()
        }
        Err(e) => restconf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "operation-failed",
            None,
            &e,
        ),
    }
}

/// The HTML status page (always a 200: what cannot be read is said on the page).
async fn status_page(State(s): State<AppState>) -> Response {
    let html = super::status_page::render(s.operational.as_ref()).await;
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            // No script, no asset from anywhere, no framing: only the inline style runs.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
            ),
        ],
        html,
    )
        .into_response()
}

/// Runs a live trace: `{"input": {"node", "from", "to", "protocol"}}`.
async fn trace(State(s): State<AppState>, h: HeaderMap, WholeBody(b): WholeBody) -> Response {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Input {
        input: netvirt::trace::TraceRequest,
    }
    if let Err(e) = json_body(&h) {
        return request_error(&e);
    }
    let input: Input = match serde_json::from_slice(&b) {
        Ok(i) => i,
        Err(e) => {
            return restconf_error(
                StatusCode::BAD_REQUEST,
                "malformed-message",
                Some("svcflow:trace"),
                &super::error::excerpt(&format!("the trace's input: {e}")),
            );
        }
    };
    use super::operational::TraceFailure;
    match s.operational.trace(input.input).await {
        Ok(report) => (
            StatusCode::OK,
            axum::Json(json!({ "svcflow:output": report })),
        )
            .into_response(),
        Err(TraceFailure::Invalid(e)) => restconf_error(
            StatusCode::BAD_REQUEST,
            "invalid-value",
            Some("svcflow:trace"),
            &e,
        ),
        Err(TraceFailure::NotFound(e)) => restconf_error(
            StatusCode::NOT_FOUND,
            "data-missing",
            Some("svcflow:trace"),
            &e,
        ),
        Err(TraceFailure::Unavailable(e)) => restconf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "operation-failed",
            Some("svcflow:trace"),
            &e,
        ),
    }
}

async fn operational_one(State(s): State<AppState>, Path(uid): Path<String>) -> Response {
    match s.operational.services().await {
        Ok(services) => match services.into_iter().find(|x| x.uid == uid) {
            Some(one) => (
                StatusCode::OK,
                axum::Json(with_unreported(
                    json!({ "service:services": [one] }),
                    None,
                    &s,
                )),
            )
                .into_response(),
            None => request_error(&RequestError::NotFound {
                path: Kind::Service.item_name(&uid),
            }),
        },
        Err(e) => restconf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "operation-failed",
            None,
            &e,
        ),
    }
}

async fn authenticate(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(creds) = &s.credentials {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes);
        if !creds.check(given) {
            let mut resp = restconf_error(
                StatusCode::UNAUTHORIZED,
                "access-denied",
                None,
                "missing or bad credentials",
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"svcflow\", Bearer realm=\"svcflow\""),
            );
            return resp;
        }
    }
    next.run(req).await
}

/// Refuses every write to the config tree when writes are refused, before its body is read.
async fn refusing(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let write = matches!(req.method().as_str(), "PUT" | "POST" | "DELETE");
    match &s.refuse_writes {
        Some(why) if write && is_config(req.uri().path()) => restconf_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "operation-not-supported",
            None,
            why,
        ),
        _ => next.run(req).await,
    }
}

/// Whether `path` is in the config tree: the datastore or below it.
fn is_config(path: &str) -> bool {
    path.strip_prefix(DATASTORE_PATH)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Reserves room for the request's body in the shared budget, holding it until the answer;
/// 503 at once when the budget is spent.
async fn budgeted(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if !matches!(req.method().as_str(), "PUT" | "POST" | "PATCH") {
        return next.run(req).await;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    match s.budget.reserve(declared) {
        Some(_room) => next.run(req).await,
        None => restconf_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "resource-denied",
            None,
            "too many request bodies are being read at once; retry",
        ),
    }
}

/// Tells the observer, if any, the response's status.
async fn observed(State(s): State<AppState>, resp: Response) -> Response {
    if let Some(observer) = &s.observer {
        observer(resp.status().as_u16());
    }
    resp
}

/// Gives the errors axum produces itself (405, 413) a RESTCONF body too.
async fn restconf_bodies(resp: Response) -> Response {
    // A handler's own RESTCONF error stands; only the router's bare answers are rewritten.
    let json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if json {
        return resp;
    }
    let (tag, message) = match resp.status() {
        StatusCode::METHOD_NOT_ALLOWED => (
            "operation-not-supported",
            "this method is not allowed on this resource",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ("too-big", "the request body is larger than the limit"),
        _ => return resp,
    };
    let (mut parts, _) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let body = error_body(tag, None, message).to_string();
    Response::from_parts(parts, axum::body::Body::from(body))
}

fn request_error(e: &RequestError) -> Response {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(e.body())).into_response()
}

fn restconf_error(status: StatusCode, tag: &str, path: Option<&str>, message: &str) -> Response {
    (status, axum::Json(error_body(tag, path, message))).into_response()
}

fn internal(message: &str) -> Response {
    restconf_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "operation-failed",
        None,
        message,
    )
}
