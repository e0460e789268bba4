//! An in-process fake Kubernetes API server, for tests (cargo feature `fake-apiserver`).
//!
//! It serves real Kubernetes JSON over HTTP/1.1 on loopback, so that kube-rs's real client and
//! watchers run against it unchanged:
//!
//! - `GET /api/v1/{services,nodes,pods,namespaces}` and
//!   `GET /apis/discovery.k8s.io/v1/endpointslices` (also under `namespaces/{ns}/`) list, with
//!   `metadata.resourceVersion` in the list, filtered by `labelSelector` (`key`, `!key`,
//!   `key=value`, `key==value`, `key!=value`, comma-separated), in pages of `limit` items
//!   with a `continue` token, every page from the first page's snapshot (as etcd serves
//!   them); a token from before the last [`FakeApiServer::compact`] gets HTTP 410 `Expired`;
//! - `?watch=true` streams newline-delimited `ADDED` / `MODIFIED` / `DELETED` events after the
//!   given `resourceVersion` (all objects as `ADDED` for none or `0`), `BOOKMARK`s when
//!   `allowWatchBookmarks=true`, and ends after `timeoutSeconds`;
//! - a watch from a `resourceVersion` older than the last [`FakeApiServer::compact`] gets an
//!   `ERROR` event carrying a `Status` with code 410 (as a real API server does), or with
//!   [`FakeApiServer::answer_gone_with_http`] a plain HTTP 410; a list with
//!   `resourceVersionMatch=Exact` on such a version gets HTTP 410;
//! - `coordination.k8s.io/v1` Leases too, and objects of every kind can be written as a
//!   client writes them: `GET`, `PUT` and `DELETE` on `.../{plural}/{name}`, `POST` on the
//!   collection. A `PUT` whose `metadata.resourceVersion` is not the stored one gets 409
//!   `Conflict`, a `POST` of an existing name 409 `AlreadyExists`, a missing name 404, as
//!   the optimistic concurrency that leader election relies on requires.
//!
//! Tests change objects with [`FakeApiServer::apply`] and [`FakeApiServer::delete`], end every
//! watch with [`FakeApiServer::close_watches`] or [`FakeApiServer::expire_watches`], and make
//! the server vanish with [`FakeApiServer::stop`] and come back on the same port with
//! [`FakeApiServer::start`]; its objects and versions survive that.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The kinds the fake server serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `v1` Service.
    Service,
    /// `discovery.k8s.io/v1` EndpointSlice.
    EndpointSlice,
    /// `v1` Node.
    Node,
    /// `v1` Pod.
    Pod,
    /// `v1` Namespace.
    Namespace,
    /// `coordination.k8s.io/v1` Lease.
    Lease,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::Service,
        Kind::EndpointSlice,
        Kind::Node,
        Kind::Pod,
        Kind::Namespace,
        Kind::Lease,
    ];

    /// The `kind` field.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Service => "Service",
            Kind::EndpointSlice => "EndpointSlice",
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::Namespace => "Namespace",
            Kind::Lease => "Lease",
        }
    }

    fn api_version(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io/v1",
            Kind::Lease => "coordination.k8s.io/v1",
            _ => "v1",
        }
    }

    fn group_prefix(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "/apis/discovery.k8s.io/v1",
            Kind::Lease => "/apis/coordination.k8s.io/v1",
            _ => "/api/v1",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::EndpointSlice => "endpointslices",
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::Namespace => "namespaces",
            Kind::Lease => "leases",
        }
    }

    /// The API group as resource names carry it (`""` for the core group).
    fn group(self) -> &'static str {
        match self {
            Kind::EndpointSlice => "discovery.k8s.io",
            Kind::Lease => "coordination.k8s.io",
            _ => "",
        }
    }

    fn namespaced(self) -> bool {
        matches!(
            self,
            Kind::Service | Kind::EndpointSlice | Kind::Pod | Kind::Lease
        )
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The kind, namespace and (for one object) name a request path names, e.g.
    /// `/api/v1/namespaces/x/pods` or `/api/v1/namespaces/x/pods/p`.
    fn from_path(path: &str) -> Option<Target> {
        let path = path.trim_end_matches('/');
        for kind in Self::ALL {
            let Some(rest) = path.strip_prefix(kind.group_prefix()) else {
                continue;
            };
            let split = match rest.strip_prefix("/namespaces/") {
                Some(tail) if kind.namespaced() => tail
                    .split_once('/')
                    .filter(|(ns, _)| !ns.is_empty())
                    .map(|(ns, tail)| (Some(ns.to_string()), tail)),
                _ => rest.strip_prefix('/').map(|tail| (None, tail)),
            };
            let Some((namespace, tail)) = split else {
                continue;
            };
            let mut parts = tail.split('/');
            if parts.next() != Some(kind.plural()) {
                continue;
            }
            let name = match (parts.next(), parts.next()) {
                (None, _) => None,
                (Some(name), None) if !name.is_empty() => Some(name.to_string()),
                _ => continue,
            };
            // One namespaced object needs its namespace.
            if name.is_some() && kind.namespaced() && namespace.is_none() {
                continue;
            }
            return Some(Target {
                kind,
                namespace,
                name,
            });
        }
        None
    }
}

/// What a request path names.
#[derive(Debug)]
struct Target {
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
}

type Key = (Kind, String, String);

#[derive(Debug, Clone)]
struct Event {
    rv: u64,
    kind: Kind,
    kind_name: &'static str,
    object: Value,
}

#[derive(Debug, Default)]
struct State {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    /// Every change since the last compaction, oldest first.
    history: Vec<Event>,
    /// Watches from before this version get 410.
    compacted: u64,
    next_uid: u64,
    lists: BTreeMap<Kind, u64>,
    /// The rest of each paged list, by its continue token.
    pages: BTreeMap<u64, Page>,
    next_page: u64,
    watches_open: u64,
    writes: u64,
    conflicts: u64,
}

/// At most this many paged lists wait for their next page.
const MAX_PAGED_LISTS: usize = 64;

/// What a paged list has not served yet: the items of its snapshot at `rv`.
#[derive(Debug)]
struct Page {
    rv: u64,
    rest: std::collections::VecDeque<Value>,
}

/// Signals to open watch streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Signals {
    /// Bumped to end every open watch.
    close: u64,
    /// Bumped to send every open watch a 410 `ERROR` and end it.
    gone: u64,
    /// The server is stopping.
    stop: bool,
}

struct Shared {
    /// Answer a watch from a compacted version with a plain HTTP 410, as some API servers
    /// and proxies do, instead of a 200 stream carrying an `ERROR` event.
    gone_as_http: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// The current resource version, for waking watches.
    changed: watch::Sender<u64>,
    signals: watch::Sender<Signals>,
    bookmark_interval: Duration,
}

/// How a write treats an object that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Write {
    /// Create it or replace it, whatever its version (what tests do).
    Upsert,
    /// `POST`: it must not exist.
    Create,
    /// `PUT`: it must exist, at the version the object names (if it names one).
    Replace,
}

/// The resource version an object carries.
fn version_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock (a test failing) must not hide the next error.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `value` as an object of `kind`: returns it as stored, or the status code and
    /// `Status` a real API server would answer with.
    fn store(&self, kind: Kind, mut value: Value, write: Write) -> Result<Value, (u16, Value)> {
        let name = value["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| (422, status(422, "Invalid", "metadata.name is missing")))?
            .to_string();
        let namespace = if kind.namespaced() {
            let ns = value["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            value["metadata"]["namespace"] = json!(ns);
            ns
        } else {
            String::new()
        };
        value["apiVersion"] = json!(kind.api_version());
        value["kind"] = json!(kind.name());
        let what = format!("{}.{} \"{name}\"", kind.plural(), kind.group());
        let stored = {
            let mut state = self.lock();
            let key = (kind, namespace, name);
            let old = state.objects.get(&key);
            let refused = match (write, old) {
                (Write::Create, Some(_)) => Some((
                    409,
                    status(409, "AlreadyExists", &format!("{what} already exists")),
                )),
                (Write::Replace, None) => {
                    Some((404, status(404, "NotFound", &format!("{what} not found"))))
                }
                (Write::Replace, Some(old))
                    if value["metadata"]["resourceVersion"]
                        .as_str()
                        .is_some_and(|v| v != old["metadata"]["resourceVersion"]) =>
                {
                    Some((
                        409,
                        status(
                            409,
                            "Conflict",
                            &format!(
                                "Operation cannot be fulfilled on {what}: the object has been \
                                 modified; please apply your changes to the latest version and \
                                 try again"
                            ),
                        ),
                    ))
                }
                _ => None,
            };
            if write != Write::Upsert {
                state.writes += 1;
            }
            if let Some(refused) = refused {
                if refused.0 == 409 {
                    state.conflicts += 1;
                }
                return Err(refused);
            }
            let old_uid = state
                .objects
                .get(&key)
                .and_then(|o| o["metadata"]["uid"].as_str().map(str::to_string));
            state.rv += 1;
            let rv = state.rv;
            let uid = match (value["metadata"]["uid"].as_str(), old_uid) {
                (Some(uid), _) => uid.to_string(),
                (None, Some(uid)) => uid,
                (None, None) => {
                    state.next_uid += 1;
                    format!("00000000-0000-0000-0000-{:012}", state.next_uid)
                }
            };
            value["metadata"]["uid"] = json!(uid);
            value["metadata"]["resourceVersion"] = json!(rv.to_string());
            let kind_name = if state.objects.contains_key(&key) {
                "MODIFIED"
            } else {
                "ADDED"
            };
            state.objects.insert(key, value.clone());
            state.history.push(Event {
                rv,
                kind,
                kind_name,
                object: value.clone(),
            });
            value
        };
        self.changed.send_replace(version_of(&stored));
        Ok(stored)
    }

    /// Removes an object; returns it as last seen (with the deletion's version).
    fn remove(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        let object = {
            let mut state = self.lock();
            let mut object =
                state
                    .objects
                    .remove(&(kind, namespace.to_string(), name.to_string()))?;
            state.rv += 1;
            let rv = state.rv;
            object["metadata"]["resourceVersion"] = json!(rv.to_string());
            state.history.push(Event {
                rv,
                kind,
                kind_name: "DELETED",
                object: object.clone(),
            });
            object
        };
        self.changed.send_replace(version_of(&object));
        Some(object)
    }
}

/// The fake API server. Its state lives as long as this value, across stops and starts.
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    running: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("addr", &self.addr)
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl FakeApiServer {
    /// Starts serving on a free loopback port.
    pub async fn start_new() -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0".parse().map_err(std::io::Error::other)?).await
    }

    /// Starts serving on `addr` (port 0 picks one).
    pub async fn start_on(addr: SocketAddr) -> std::io::Result<Self> {
        let (changed, _) = watch::channel(1);
        let (signals, _) = watch::channel(Signals::default());
        // Like etcd's, versions start above 0: "0" in a request means "any version".
        let state = State {
            rv: 1,
            compacted: 0,
            ..State::default()
        };
        let shared = Arc::new(Shared {
            gone_as_http: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(state),
            changed,
            signals,
            bookmark_interval: Duration::from_millis(500),
        });
        let mut server = Self {
            shared,
            addr,
            running: None,
        };
        server.start().await?;
        Ok(server)
    }

    /// The address it listens on (the same after a restart).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig file's text pointing at this server, with no credentials.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
             current-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            self.url()
        )
    }

    /// A kube-rs client for this server.
    pub fn client(&self) -> Result<kube::Client, String> {
        let uri = self.url().parse().map_err(|e| format!("{e}"))?;
        kube::Client::try_from(kube::Config::new(uri)).map_err(|e| e.to_string())
    }

    /// Starts listening again (after [`Self::stop`]) on the same address.
    pub async fn start(&mut self) -> std::io::Result<()> {
        if self.running.is_some() {
            return Ok(());
        }
        let listener = TcpListener::bind(self.addr).await?;
        self.addr = listener.local_addr()?;
        self.shared.signals.send_modify(|s| s.stop = false);
        let shared = self.shared.clone();
        let app = Router::new().fallback(move |method: Method, uri: Uri, body: Bytes| {
            let shared = shared.clone();
            async move { handle(shared, method, uri, body) }
        });
        let mut stop = self.shared.signals.subscribe();
        self.running = Some(tokio::spawn(async move {
            let shutdown = async move {
                let _ = stop.wait_for(|s| s.stop).await;
            };
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await;
        }));
        Ok(())
    }

    /// Stops listening and closes every connection; the state is kept.
    pub async fn stop(&mut self) {
        let Some(task) = self.running.take() else {
            return;
        };
        self.shared.signals.send_modify(|s| s.stop = true);
        let abort = task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }

    /// Creates or replaces an object; returns its new resource version.
    pub fn apply<K>(&self, object: &K) -> Result<u64, String>
    where
        K: k8s_openapi::Resource + serde::Serialize,
    {
        let kind =
            Kind::from_name(K::KIND).ok_or_else(|| format!("kind {} not served", K::KIND))?;
        let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
        let stored = self
            .shared
            .store(kind, value, Write::Upsert)
            .map_err(|(_, status)| status["message"].as_str().unwrap_or("").to_string())?;
        Ok(version_of(&stored))
    }

    /// Deletes an object (`namespace` is ignored for cluster-scoped kinds); returns the new
    /// resource version, or `None` if it did not exist.
    pub fn delete<K: k8s_openapi::Resource>(&self, namespace: &str, name: &str) -> Option<u64> {
        let kind = Kind::from_name(K::KIND)?;
        let namespace = if kind.namespaced() { namespace } else { "" };
        self.shared
            .remove(kind, namespace, name)
            .map(|o| version_of(&o))
    }

    /// An object as stored (`namespace` is ignored for cluster-scoped kinds).
    pub fn get<K: k8s_openapi::Resource>(&self, namespace: &str, name: &str) -> Option<Value> {
        let kind = Kind::from_name(K::KIND)?;
        let namespace = if kind.namespaced() { namespace } else { "" };
        let state = self.shared.lock();
        state
            .objects
            .get(&(kind, namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// How many writes (`POST`, `PUT`, `DELETE`) clients have made, and how many were refused
    /// with 409.
    pub fn writes(&self) -> (u64, u64) {
        let state = self.shared.lock();
        (state.writes, state.conflicts)
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    /// Forgets the history: a watch from an older version gets 410 Gone and must relist.
    pub fn compact(&self) {
        let mut state = self.shared.lock();
        state.compacted = state.rv;
        state.history.clear();
        state.pages.clear();
    }

    /// Ends every open watch stream cleanly (as the API server's timeout does); watchers
    /// resume from their last version.
    pub fn close_watches(&self) {
        self.shared.signals.send_modify(|s| s.close += 1);
    }

    /// Compacts, then sends every open watch an `ERROR` event with a 410 `Status` and ends it:
    /// watchers must relist.
    pub fn expire_watches(&self) {
        self.compact();
        self.shared.signals.send_modify(|s| s.gone += 1);
    }

    /// From now on (or, `on` false, no longer), a watch from a version older than the last
    /// compaction is refused with a plain HTTP 410 `Status`, before any stream starts.
    pub fn answer_gone_with_http(&self, on: bool) {
        self.shared
            .gone_as_http
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many lists of `kind` it has served.
    pub fn lists(&self, kind: Kind) -> u64 {
        self.shared.lock().lists.get(&kind).copied().unwrap_or(0)
    }

    /// How many watch streams are open.
    pub fn open_watches(&self) -> u64 {
        self.shared.lock().watches_open
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        self.shared.signals.send_modify(|s| s.stop = true);
        if let Some(task) = self.running.take() {
            task.abort();
        }
    }
}

/// A `Status` object.
fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn error(code: u16, reason: &str, message: &str) -> Response {
    let status_code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status_code, &status(code, reason, message))
}

/// One term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Exists(String),
    NotExists(String),
    Equals(String, String),
    NotEquals(String, String),
}

fn parse_selector(text: &str) -> Result<Vec<Term>, String> {
    let mut terms = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let term = if let Some(key) = part.strip_prefix('!') {
            Term::NotExists(key.trim().to_string())
        } else if let Some((k, v)) = part.split_once("!=") {
            Term::NotEquals(k.trim().to_string(), v.trim().to_string())
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            Term::Equals(k.trim().to_string(), v.trim().to_string())
        } else if part.contains(' ') || part.contains('(') {
            return Err(format!("unsupported selector term `{part}`"));
        } else {
            Term::Exists(part.to_string())
        };
        terms.push(term);
    }
    Ok(terms)
}

fn selected(terms: &[Term], object: &Value) -> bool {
    let labels = &object["metadata"]["labels"];
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    terms.iter().all(|t| match t {
        Term::Exists(k) => get(k).is_some(),
        Term::NotExists(k) => get(k).is_none(),
        Term::Equals(k, v) => get(k) == Some(v.as_str()),
        Term::NotEquals(k, v) => get(k) != Some(v.as_str()),
    })
}

/// A decoded query string.
#[derive(Debug, Default)]
struct Query {
    watch: bool,
    resource_version: Option<String>,
    exact: bool,
    selector: Vec<Term>,
    bookmarks: bool,
    timeout: Option<Duration>,
    limit: Option<usize>,
    continue_: Option<String>,
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(uri: &Uri) -> Result<Query, String> {
    let mut q = Query::default();
    for pair in uri.query().unwrap_or_default().split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode(v);
        match k {
            "watch" => q.watch = v == "true" || v == "1",
            "resourceVersion" => q.resource_version = Some(v).filter(|v| !v.is_empty()),
            "resourceVersionMatch" => q.exact = v == "Exact",
            "labelSelector" => q.selector = parse_selector(&v)?,
            "allowWatchBookmarks" => q.bookmarks = v == "true",
            "timeoutSeconds" => {
                q.timeout = v.parse::<u64>().ok().map(Duration::from_secs);
            }
            "limit" => q.limit = v.parse::<usize>().ok().filter(|l| *l > 0),
            "continue" => q.continue_ = Some(v).filter(|v| !v.is_empty()),
            _ => {}
        }
    }
    Ok(q)
}

fn handle(shared: Arc<Shared>, method: Method, uri: Uri, body: Bytes) -> Response {
    let Some(target) = Kind::from_path(uri.path()) else {
        return error(404, "NotFound", &format!("no resource at {}", uri.path()));
    };
    let Target {
        kind,
        namespace,
        name,
    } = target;
    match (&method, name) {
        (&Method::GET, None) => {}
        (&Method::GET, Some(name)) => {
            let state = shared.lock();
            let key = (kind, namespace.unwrap_or_default(), name.clone());
            return match state.objects.get(&key) {
                Some(object) => json_response(StatusCode::OK, object),
                None => not_found(kind, &name),
            };
        }
        (&Method::POST, None) => return write(&shared, kind, namespace, None, &body),
        (&Method::PUT, Some(name)) => return write(&shared, kind, namespace, Some(name), &body),
        (&Method::DELETE, Some(name)) => {
            shared.lock().writes += 1;
            return match shared.remove(kind, namespace.as_deref().unwrap_or_default(), &name) {
                Some(object) => json_response(StatusCode::OK, &object),
                None => not_found(kind, &name),
            };
        }
        _ => {
            return error(
                405,
                "MethodNotAllowed",
                &format!("{method} is not served on {}", uri.path()),
            );
        }
    }
    let query = match parse_query(&uri) {
        Ok(q) => q,
        Err(e) => return error(400, "BadRequest", &e),
    };
    let matches = {
        let namespace = namespace.clone();
        let selector = query.selector.clone();
        move |k: Kind, object: &Value| {
            k == kind
                && selected(&selector, object)
                && namespace
                    .as_deref()
                    .is_none_or(|ns| object["metadata"]["namespace"].as_str() == Some(ns))
        }
    };
    if query.watch {
        return watch_stream(shared, kind, query, matches);
    }
    let mut state = shared.lock();
    if let Some(rv) = query
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
    {
        if query.exact && rv < state.compacted {
            return error(
                410,
                "Expired",
                &format!("too old resource version: {rv} ({})", state.compacted),
            );
        }
    }
    let (rv, mut rest) = match &query.continue_ {
        Some(token) => match token
            .parse::<u64>()
            .ok()
            .and_then(|t| state.pages.remove(&t))
        {
            Some(page) => (page.rv, page.rest),
            None => {
                return error(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter.",
                );
            }
        },
        None => {
            *state.lists.entry(kind).or_default() += 1;
            let items = state
                .objects
                .iter()
                .filter(|((k, _, _), o)| matches(*k, o))
                .map(|(_, o)| o.clone())
                .collect();
            (state.rv, items)
        }
    };
    let items: Vec<Value> = rest
        .drain(..query.limit.unwrap_or(usize::MAX).min(rest.len()))
        .collect();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if !rest.is_empty() {
        let token = state.next_page;
        state.next_page += 1;
        metadata["continue"] = json!(token.to_string());
        metadata["remainingItemCount"] = json!(rest.len());
        state.pages.insert(token, Page { rv, rest });
        // Lists a client gave up on expire, oldest first, as their snapshots would.
        while state.pages.len() > MAX_PAGED_LISTS {
            state.pages.pop_first();
        }
    }
    drop(state);
    let body = json!({
        "kind": format!("{}List", kind.name()),
        "apiVersion": kind.api_version(),
        "metadata": metadata,
        "items": items,
    });
    json_response(StatusCode::OK, &body)
}

fn not_found(kind: Kind, name: &str) -> Response {
    let what = format!("{}.{} \"{name}\"", kind.plural(), kind.group());
    error(404, "NotFound", &format!("{what} not found"))
}

/// A `POST` (no `name`) or a `PUT` of `body` as an object of `kind` in `namespace`.
fn write(
    shared: &Shared,
    kind: Kind,
    namespace: Option<String>,
    name: Option<String>,
    body: &[u8],
) -> Response {
    let mut value: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return error(400, "BadRequest", "the body is not an object"),
        Err(e) => return error(400, "BadRequest", &format!("the body is not JSON: {e}")),
    };
    if value["kind"].as_str().is_some_and(|k| k != kind.name()) {
        return error(400, "BadRequest", "the body's kind does not match the path");
    }
    if let Some(ns) = &namespace {
        match value["metadata"]["namespace"].as_str() {
            Some(given) if given != ns => {
                return error(
                    400,
                    "BadRequest",
                    "the body's namespace does not match the path",
                );
            }
            _ => value["metadata"]["namespace"] = json!(ns),
        }
    } else if kind.namespaced() {
        return error(
            404,
            "NotFound",
            "a namespaced object is written under its namespace",
        );
    }
    if let Some(name) = &name
        && value["metadata"]["name"].as_str() != Some(name)
    {
        return error(400, "BadRequest", "the body's name does not match the path");
    }
    let (mode, code) = match name {
        Some(_) => (Write::Replace, StatusCode::OK),
        None => (Write::Create, StatusCode::CREATED),
    };
    match shared.store(kind, value, mode) {
        Ok(stored) => json_response(code, &stored),
        Err((code, status)) => json_response(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &status,
        ),
    }
}

fn line(kind_name: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind_name, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// Counts an open watch for as long as it lives.
struct OpenWatch(Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.watches_open = state.watches_open.saturating_sub(1);
    }
}

fn watch_stream(
    shared: Arc<Shared>,
    kind: Kind,
    query: Query,
    matches: impl Fn(Kind, &Value) -> bool + Send + 'static,
) -> Response {
    let from = query
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|v| *v != 0);
    if let Some(rv) = from
        && shared
            .gone_as_http
            .load(std::sync::atomic::Ordering::Relaxed)
    {
        let compacted = shared.lock().compacted;
        if rv < compacted {
            let message = format!("too old resource version: {rv} ({compacted})");
            return error(410, "Expired", &message);
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let mut changed = shared.changed.subscribe();
    let mut signals = shared.signals.subscribe();
    let start = *signals.borrow_and_update();
    // The first batch, read under the same lock as the position it leaves us at.
    let (mut last, first): (u64, Vec<Bytes>) = {
        let mut state = shared.lock();
        state.watches_open += 1;
        match from {
            Some(rv) if rv < state.compacted => {
                let message = format!("too old resource version: {rv} ({})", state.compacted);
                (
                    u64::MAX,
                    vec![line("ERROR", &status(410, "Expired", &message))],
                )
            }
            Some(rv) => (rv, Vec::new()),
            None => {
                let adds = state
                    .objects
                    .iter()
                    .filter(|((k, _, _), o)| matches(*k, o))
                    .map(|(_, o)| line("ADDED", o))
                    .collect();
                (state.rv, adds)
            }
        }
    };
    let guard = OpenWatch(shared.clone());
    let bookmark_interval = shared.bookmark_interval;
    tokio::spawn(async move {
        let _guard = guard;
        for chunk in first {
            if tx.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
        if last == u64::MAX {
            return;
        }
        let deadline = query.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut bookmarks = tokio::time::interval(bookmark_interval);
        bookmarks.reset();
        loop {
            // Signals first, so that a change made after `expire_watches` is not streamed.
            let now = *signals.borrow_and_update();
            if now.stop || now.close != start.close {
                return;
            }
            if now.gone != start.gone {
                let gone = status(410, "Expired", "too old resource version");
                let _ = tx.send(Ok(line("ERROR", &gone))).await;
                return;
            }
            // Everything after `last`, unless the history no longer reaches back that far.
            let batch: Result<Vec<Bytes>, Bytes> = {
                let state = shared.lock();
                if last < state.compacted {
                    let message = format!("too old resource version: {last}");
                    Err(line("ERROR", &status(410, "Expired", &message)))
                } else {
                    let batch = state
                        .history
                        .iter()
                        .filter(|e| e.rv > last)
                        .filter(|e| matches(e.kind, &e.object))
                        .map(|e| line(e.kind_name, &e.object))
                        .collect();
                    last = last.max(state.rv);
                    Ok(batch)
                }
            };
            match batch {
                Ok(batch) => {
                    for chunk in batch {
                        if tx.send(Ok(chunk)).await.is_err() {
                            return;
                        }
                    }
                }
                Err(gone) => {
                    let _ = tx.send(Ok(gone)).await;
                    return;
                }
            }
            let timeout = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                r = signals.changed() => if r.is_err() { return },
                r = changed.changed() => if r.is_err() { return },
                _ = bookmarks.tick(), if query.bookmarks => {
                    let bookmark = json!({
                        "kind": kind.name(),
                        "apiVersion": kind.api_version(),
                        "metadata": {"resourceVersion": last.to_string()},
                    });
                    if tx.send(Ok(line("BOOKMARK", &bookmark))).await.is_err() {
                        return;
                    }
                }
                _ = timeout => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
