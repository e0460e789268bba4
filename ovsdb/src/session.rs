//! A sans-IO OVSDB client session (RFC 7047 §4), shaped like quinn-proto's `Connection`.
//!
//! Feed received bytes with [`Session::handle_bytes`], collect bytes to send with
//! [`Session::poll_transmit`], events with [`Session::poll_event`], and call
//! [`Session::handle_timeout`] at [`Session::poll_timeout`]. The session never reads the clock
//! and does no I/O. It answers the server's `echo` requests itself (§4.1.11), probes an idle
//! peer with its own `echo`, and remembers monitors and locks so that [`Session::reset`] on a
//! new connection re-establishes them and then reports [`Event::Resynced`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::datum::DatumError;
use crate::framer::{FrameError, Framer, FramerLimits};
use crate::jsonrpc::{Message, MessageError, RpcError};
use crate::monitor::{
    MonitorMethod, MonitorRequest, TableUpdates, monitor_params, parse_table_updates,
};
use crate::ops::{OpResult, Operation, TransactError, parse_transact_result, transact_params};
use crate::schema::{DatabaseSchema, SchemaError};

/// Identifies a request made through a session.
pub type RequestId = u64;

/// Session settings.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub limits: FramerLimits,
    /// Send an `echo` after this long without receiving anything, and close the session if
    /// nothing arrives for as long again. `None` disables probing.
    pub probe_interval: Option<Duration>,
    /// Newest monitor method to try first.
    pub monitor_method: MonitorMethod,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            limits: FramerLimits::default(),
            probe_interval: Some(Duration::from_secs(5)),
            monitor_method: MonitorMethod::MonitorCondSince,
        }
    }
}

/// Why a session closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("framing: {0}")]
    Frame(#[from] FrameError),
    #[error("{0}")]
    Message(#[from] MessageError),
    #[error("peer sent a malformed {what}: {detail}")]
    Protocol { what: &'static str, detail: String },
    #[error("no reply to echo probe within {0:?}")]
    Timeout(Duration),
    #[error("connection closed by peer")]
    PeerClosed,
    #[error("connection closed by peer in the middle of a message")]
    Truncated,
    #[error("closed locally")]
    Local,
    #[error("peer is not reading: {0} bytes queued")]
    SendBacklog(usize),
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// The server replied with a JSON-RPC error.
    #[error("server error: {0}")]
    Rpc(RpcError),
    /// A transaction was rejected (typed per operation).
    #[error("{0}")]
    Transact(#[from] TransactError),
    /// The reply had an unexpected shape.
    #[error("malformed reply: {0}")]
    Malformed(String),
    /// The connection closed before the reply arrived (the request may or may not have run).
    #[error("disconnected")]
    Disconnected,
    /// Cancelled with [`Session::cancel`] (the transaction may or may not have committed if
    /// it was not blocked in a `wait`).
    #[error("canceled")]
    Canceled,
    /// The request was refused locally.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<DatumError> for RequestError {
    fn from(e: DatumError) -> Self {
        RequestError::Malformed(e.to_string())
    }
}
impl From<SchemaError> for RequestError {
    fn from(e: SchemaError) -> Self {
        RequestError::Malformed(e.to_string())
    }
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `list_dbs` (§4.1.1).
    Dbs(Vec<String>),
    /// `get_schema` (§4.1.2).
    Schema(Box<DatabaseSchema>),
    /// `transact` (§4.1.3).
    Transact(Vec<OpResult>),
    /// A monitor is established; its initial contents came just before as [`Event::Update`].
    Monitor {
        monitor: String,
        method: MonitorMethod,
    },
    /// `lock`/`steal` (§4.1.8–§4.1.9): whether the lock is now held.
    Lock { locked: bool },
    /// `echo` (§4.1.11): the echoed params.
    Echo(Value),
    /// Replies with nothing to report (`unlock`, `monitor_cancel`).
    Done,
}

/// What a monitor update means for a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateKind {
    /// The reply to a (re-)established monitor. If `replace`, drop every cached row of this
    /// monitor first: the update is a full dump. Otherwise it is a diff since the last
    /// transaction seen (`monitor_cond_since` with `found: true`).
    Initial { replace: bool },
    /// A change notification.
    Change,
}

/// An output of the session.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The reply to request `id`.
    Reply {
        id: RequestId,
        result: Result<Reply, RequestError>,
    },
    /// Table updates for a monitor.
    Update {
        monitor: String,
        kind: UpdateKind,
        updates: TableUpdates,
    },
    /// We now hold the lock (§4.1.10 `locked`).
    Locked(String),
    /// Another client stole our lock (§4.1.10 `stolen`).
    Stolen(String),
    /// After [`Session::reset`], every monitor is re-established and every lock re-requested.
    Resynced,
    /// The session closed; call [`Session::reset`] after reconnecting.
    Closed(SessionError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockOp {
    Lock,
    Steal,
    Unlock,
}

#[derive(Debug)]
enum Pending {
    ListDbs(RequestId),
    GetSchema(RequestId),
    Transact(RequestId, Vec<Operation>),
    Monitor {
        user: Option<RequestId>,
        key: String,
        method: MonitorMethod,
    },
    MonitorCancel(RequestId),
    Lock(Option<RequestId>, LockOp, String),
    Echo(Option<RequestId>),
}

#[derive(Debug, Clone)]
struct MonitorSpec {
    db: String,
    requests: BTreeMap<String, MonitorRequest>,
    method: MonitorMethod,
    last_txn_id: Option<String>,
}

/// The client side of one OVSDB connection (and its successors after [`Session::reset`]).
#[derive(Debug)]
pub struct Session {
    config: SessionConfig,
    framer: Framer,
    out: Vec<u8>,
    events: VecDeque<Event>,
    next_wire_id: u64,
    next_user_id: RequestId,
    pending: HashMap<u64, Pending>,
    monitors: BTreeMap<String, MonitorSpec>,
    /// Locks we want held (re-requested with `lock` after a reset).
    locks: BTreeSet<String>,
    /// Newest monitor method the server is known to accept.
    monitor_method: MonitorMethod,
    /// Monitors and locks still to be re-established after a reset.
    resyncing: Option<usize>,
    last_rx: Instant,
    probe_sent: Option<Instant>,
    closed: Option<SessionError>,
}

impl Session {
    /// A session on a freshly connected transport.
    pub fn new(config: SessionConfig, now: Instant) -> Session {
        Session {
            framer: Framer::new(config.limits),
            monitor_method: config.monitor_method,
            config,
            out: Vec::new(),
            events: VecDeque::new(),
            next_wire_id: 1,
            next_user_id: 1,
            pending: HashMap::new(),
            monitors: BTreeMap::new(),
            locks: BTreeSet::new(),
            resyncing: None,
            last_rx: now,
            probe_sent: None,
            closed: None,
        }
    }

    /// Whether the session has closed (until the next [`Session::reset`]).
    pub fn is_closed(&self) -> bool {
        self.closed.is_some()
    }

    /// Requests waiting for a reply.
    pub fn pending_requests(&self) -> usize {
        self.pending.len()
    }

    /// Bytes to send, if any (all queued messages, concatenated).
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        if self.out.is_empty() {
            None
        } else {
            Some(std::mem::take(&mut self.out))
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`Session::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.closed.is_some() {
            return None;
        }
        let p = self.config.probe_interval?;
        Some(self.probe_sent.unwrap_or(self.last_rx) + p)
    }

    /// Advances timers: sends an echo probe, or closes the session if the probe went unanswered.
    pub fn handle_timeout(&mut self, now: Instant) {
        let (Some(p), None) = (self.config.probe_interval, &self.closed) else {
            return;
        };
        match self.probe_sent {
            Some(sent) if now >= sent + p => self.close(SessionError::Timeout(p)),
            Some(_) => {}
            None if now >= self.last_rx + p => {
                self.probe_sent = Some(now);
                self.send_request("echo", json!([]), Pending::Echo(None));
            }
            None => {}
        }
    }

    /// Feeds bytes received from the peer. On error the session closes (and reports
    /// [`Event::Closed`]); the same error is returned.
    pub fn handle_bytes(&mut self, data: &[u8], now: Instant) -> Result<(), SessionError> {
        if let Some(e) = &self.closed {
            return Err(e.clone());
        }
        self.last_rx = now;
        self.probe_sent = None;
        if let Err(e) = self.framer.push(data) {
            let e = SessionError::from(e);
            self.close(e.clone());
            return Err(e);
        }
        while let Some(frame) = self.framer.next_message() {
            let r = Message::parse(&frame)
                .map_err(SessionError::from)
                .and_then(|m| self.handle_message(m));
            if let Err(e) = r {
                self.close(e.clone());
                return Err(e);
            }
        }
        Ok(())
    }

    /// The peer closed the connection.
    pub fn handle_eof(&mut self) {
        if self.closed.is_none() {
            let e = if self.framer.mid_message() {
                SessionError::Truncated
            } else {
                SessionError::PeerClosed
            };
            self.close(e);
        }
    }

    /// Closes the session locally (e.g. on a transport error).
    pub fn close_local(&mut self) {
        if self.closed.is_none() {
            self.close(SessionError::Local);
        }
    }

    /// Closes the session with the given reason (for drivers that detect transport problems).
    pub fn abort(&mut self, e: SessionError) {
        if self.closed.is_none() {
            self.close(e);
        }
    }

    /// Starts over on a new connection: pending requests fail with
    /// [`RequestError::Disconnected`], then monitors and locks are re-requested. When all are
    /// back, [`Event::Resynced`] is reported.
    pub fn reset(&mut self, now: Instant) {
        if self.closed.is_none() {
            self.close(SessionError::Local);
        }
        self.closed = None;
        self.framer.reset();
        self.out.clear();
        self.last_rx = now;
        self.probe_sent = None;
        let keys: Vec<String> = self.monitors.keys().cloned().collect();
        let locks: Vec<String> = self.locks.iter().cloned().collect();
        self.resyncing = Some(keys.len() + locks.len());
        for key in keys {
            self.send_monitor(None, key);
        }
        // Re-request with `lock`, never `steal`: whoever got the lock while we were away
        // keeps it (RFC 7047 §4.1.8).
        for name in locks {
            self.send_lock(None, &name, LockOp::Lock);
        }
        self.check_resynced();
    }

    // ---- requests (RFC 7047 §4.1) ----

    /// `list_dbs` (§4.1.1).
    pub fn list_dbs(&mut self) -> RequestId {
        let id = self.user_id();
        self.send_request("list_dbs", json!([]), Pending::ListDbs(id));
        id
    }

    /// `get_schema` (§4.1.2).
    pub fn get_schema(&mut self, db: &str) -> RequestId {
        let id = self.user_id();
        self.send_request("get_schema", json!([db]), Pending::GetSchema(id));
        id
    }

    /// `transact` (§4.1.3). Returns the request id and the wire id usable with [`Session::cancel`].
    pub fn transact(&mut self, db: &str, ops: Vec<Operation>) -> RequestId {
        let id = self.user_id();
        let params = transact_params(db, &ops);
        self.send_request("transact", params, Pending::Transact(id, ops));
        id
    }

    /// `cancel` (§4.1.4) of a `transact` in flight. The request completes at once with
    /// [`RequestError::Canceled`].
    pub fn cancel(&mut self, id: RequestId) {
        let wire = self.pending.iter().find_map(|(w, p)| match p {
            Pending::Transact(u, _) if *u == id => Some(*w),
            _ => None,
        });
        if let Some(w) = wire {
            self.queue(&Message::Notification {
                method: "cancel".into(),
                params: json!([w]),
            });
            // ovsdb-server 3.1 drops a cancelled trigger without replying (unlike RFC 7047
            // §4.1.4 says), so complete the request here; a late reply is ignored.
            self.pending.remove(&w);
            self.events.push_back(Event::Reply {
                id,
                result: Err(RequestError::Canceled),
            });
        }
    }

    /// Starts a monitor named `monitor` (§4.1.5, or `monitor_cond`/`monitor_cond_since` where
    /// supported). Its data arrives as [`Event::Update`]; it is re-established after a reset.
    pub fn monitor(
        &mut self,
        db: &str,
        monitor: &str,
        requests: BTreeMap<String, MonitorRequest>,
    ) -> RequestId {
        let id = self.user_id();
        if self.monitors.contains_key(monitor) {
            let e = RequestError::InvalidArgument(format!("monitor {monitor:?} already exists"));
            self.events.push_back(Event::Reply { id, result: Err(e) });
            return id;
        }
        self.monitors.insert(
            monitor.to_owned(),
            MonitorSpec {
                db: db.to_owned(),
                requests,
                method: self.monitor_method,
                last_txn_id: None,
            },
        );
        self.send_monitor(Some(id), monitor.to_owned());
        id
    }

    /// `monitor_cancel` (§4.1.7).
    pub fn monitor_cancel(&mut self, monitor: &str) -> RequestId {
        let id = self.user_id();
        self.monitors.remove(monitor);
        self.send_request(
            "monitor_cancel",
            json!([monitor]),
            Pending::MonitorCancel(id),
        );
        id
    }

    /// `lock` (§4.1.8). The reply says whether it was granted at once; otherwise
    /// [`Event::Locked`] follows when it is.
    pub fn lock(&mut self, name: &str) -> RequestId {
        self.locks.insert(name.to_owned());
        let id = self.user_id();
        self.send_lock(Some(id), name, LockOp::Lock);
        id
    }

    /// `steal` (§4.1.9).
    pub fn steal(&mut self, name: &str) -> RequestId {
        self.locks.insert(name.to_owned());
        let id = self.user_id();
        self.send_lock(Some(id), name, LockOp::Steal);
        id
    }

    /// `unlock` (§4.1.10).
    pub fn unlock(&mut self, name: &str) -> RequestId {
        self.locks.remove(name);
        let id = self.user_id();
        self.send_lock(Some(id), name, LockOp::Unlock);
        id
    }

    /// `echo` (§4.1.11) with the given params.
    pub fn echo(&mut self, params: Value) -> RequestId {
        let id = self.user_id();
        let params = if params.is_array() {
            params
        } else {
            json!([params])
        };
        self.send_request("echo", params, Pending::Echo(Some(id)));
        id
    }

    // ---- internals ----

    fn user_id(&mut self) -> RequestId {
        let id = self.next_user_id;
        self.next_user_id += 1;
        id
    }

    fn queue(&mut self, m: &Message) {
        if self.closed.is_none() {
            self.out.extend_from_slice(&m.to_bytes());
        }
    }

    fn send_request(&mut self, method: &str, params: Value, p: Pending) {
        if self.closed.is_some() {
            self.fail(p);
            return;
        }
        let wire = self.next_wire_id;
        self.next_wire_id += 1;
        self.queue(&Message::request(method, params, json!(wire)));
        self.pending.insert(wire, p);
    }

    fn send_monitor(&mut self, user: Option<RequestId>, key: String) {
        let Some(spec) = self.monitors.get(&key) else {
            return;
        };
        let method = spec.method.min(self.monitor_method);
        let params = monitor_params(
            method,
            &spec.db,
            &json!(key),
            &spec.requests,
            spec.last_txn_id.as_deref(),
        );
        self.send_request(
            method.method_name(),
            params,
            Pending::Monitor { user, key, method },
        );
    }

    fn send_lock(&mut self, user: Option<RequestId>, name: &str, op: LockOp) {
        let m = match op {
            LockOp::Lock => "lock",
            LockOp::Steal => "steal",
            LockOp::Unlock => "unlock",
        };
        self.send_request(m, json!([name]), Pending::Lock(user, op, name.to_owned()));
    }

    fn fail(&mut self, p: Pending) {
        let id = match p {
            Pending::ListDbs(id)
            | Pending::GetSchema(id)
            | Pending::Transact(id, _)
            | Pending::MonitorCancel(id) => Some(id),
            Pending::Monitor { user, .. } => user,
            Pending::Lock(user, _, _) | Pending::Echo(user) => user,
        };
        if let Some(id) = id {
            self.events.push_back(Event::Reply {
                id,
                result: Err(RequestError::Disconnected),
            });
        }
    }

    fn close(&mut self, e: SessionError) {
        self.closed = Some(e.clone());
        self.out.clear();
        let mut pending: Vec<(u64, Pending)> = self.pending.drain().collect();
        pending.sort_by_key(|(w, _)| *w);
        for (_, p) in pending {
            self.fail(p);
        }
        self.resyncing = None;
        self.events.push_back(Event::Closed(e));
    }

    fn check_resynced(&mut self) {
        if self.resyncing == Some(0) {
            self.resyncing = None;
            self.events.push_back(Event::Resynced);
        }
    }

    fn resync_step(&mut self, counted: bool) {
        if counted {
            if let Some(n) = &mut self.resyncing {
                *n = n.saturating_sub(1);
            }
            self.check_resynced();
        }
    }

    fn handle_message(&mut self, m: Message) -> Result<(), SessionError> {
        match m {
            Message::Request { method, params, id } => {
                let reply = if method == "echo" {
                    Message::reply(id, params)
                } else {
                    Message::Response {
                        id,
                        result: Value::Null,
                        error: json!("unknown method"),
                    }
                };
                self.queue(&reply);
                Ok(())
            }
            Message::Notification { method, params } => self.handle_notification(&method, params),
            Message::Response { id, result, error } => {
                let Some(wire) = id.as_u64() else {
                    return Ok(()); // not one of ours; ignore
                };
                let Some(p) = self.pending.remove(&wire) else {
                    return Ok(());
                };
                let res = if error.is_null() {
                    Ok(result)
                } else {
                    Err(RpcError::from_value(&error))
                };
                self.handle_reply(p, res);
                Ok(())
            }
        }
    }

    fn handle_notification(&mut self, method: &str, params: Value) -> Result<(), SessionError> {
        let proto = |detail: &str| SessionError::Protocol {
            what: "notification",
            detail: detail.to_owned(),
        };
        let Value::Array(mut p) = params else {
            return Err(proto("params"));
        };
        match method {
            "update" | "update2" | "update3" => {
                let key = match p.first() {
                    Some(Value::String(s)) => s.clone(),
                    _ => return Err(proto("monitor id")),
                };
                let (txn, upd) = match (method, p.len()) {
                    ("update3", 3) => {
                        (p.get(1).and_then(Value::as_str).map(str::to_owned), p.pop())
                    }
                    (_, 2) => (None, p.pop()),
                    _ => return Err(proto("update params")),
                };
                let upd = upd.ok_or_else(|| proto("update params"))?;
                let updates =
                    parse_table_updates(&upd, method != "update").map_err(|e| proto(&e.0))?;
                if let (Some(spec), Some(t)) = (self.monitors.get_mut(&key), txn) {
                    spec.last_txn_id = Some(t);
                }
                self.events.push_back(Event::Update {
                    monitor: key,
                    kind: UpdateKind::Change,
                    updates,
                });
            }
            "locked" | "stolen" => {
                let name = p
                    .first()
                    .and_then(Value::as_str)
                    .ok_or_else(|| proto("lock name"))?
                    .to_owned();
                if method == "locked" {
                    self.events.push_back(Event::Locked(name));
                } else {
                    // The former owner stays queued for the lock (ovsdb-server keeps its
                    // waiter, and answers a new `lock` with "must issue unlock"), so it is
                    // re-requested on reset like any queued lock; `unlock` leaves the queue.
                    self.events.push_back(Event::Stolen(name));
                }
            }
            _ => {} // unknown notifications are ignored
        }
        Ok(())
    }

    fn handle_reply(&mut self, p: Pending, res: Result<Value, RpcError>) {
        let push = |s: &mut Self, id: RequestId, result: Result<Reply, RequestError>| {
            s.events.push_back(Event::Reply { id, result });
        };
        match p {
            Pending::ListDbs(id) => {
                let r = res.map_err(RequestError::Rpc).and_then(|v| {
                    serde_json::from_value::<Vec<String>>(v)
                        .map(Reply::Dbs)
                        .map_err(|e| RequestError::Malformed(e.to_string()))
                });
                push(self, id, r);
            }
            Pending::GetSchema(id) => {
                let r = res
                    .map_err(RequestError::Rpc)
                    .and_then(|v| Ok(Reply::Schema(Box::new(DatabaseSchema::from_json(&v)?))));
                push(self, id, r);
            }
            Pending::Transact(id, ops) => {
                let r = res
                    .map_err(RequestError::Rpc)
                    .and_then(|v| Ok(Reply::Transact(parse_transact_result(&ops, &v)?)));
                push(self, id, r);
            }
            Pending::MonitorCancel(id) => push(
                self,
                id,
                res.map(|_| Reply::Done).map_err(RequestError::Rpc),
            ),
            Pending::Echo(None) => {}
            Pending::Echo(Some(id)) => {
                push(self, id, res.map(Reply::Echo).map_err(RequestError::Rpc))
            }
            Pending::Lock(user, op, name) => {
                let r = res.map_err(RequestError::Rpc).and_then(|v| match op {
                    LockOp::Unlock => Ok(Reply::Done),
                    _ => v
                        .get("locked")
                        .and_then(Value::as_bool)
                        .map(|locked| Reply::Lock { locked })
                        .ok_or_else(|| RequestError::Malformed("lock reply without locked".into())),
                });
                match user {
                    Some(id) => push(self, id, r),
                    // A lock re-requested after a reconnect and granted at once: no `locked`
                    // notification follows, so say it here.
                    None if matches!(r, Ok(Reply::Lock { locked: true })) => {
                        self.events.push_back(Event::Locked(name));
                    }
                    None => {}
                }
                self.resync_step(user.is_none() && op != LockOp::Unlock);
            }
            Pending::Monitor { user, key, method } => {
                self.handle_monitor_reply(user, key, method, res)
            }
        }
    }

    fn handle_monitor_reply(
        &mut self,
        user: Option<RequestId>,
        key: String,
        method: MonitorMethod,
        res: Result<Value, RpcError>,
    ) {
        let resync = user.is_none();
        let v = match res {
            Ok(v) => v,
            Err(e) => {
                // ovsdb-server answers an unsupported method with "unknown method".
                if e.error == "unknown method" {
                    if let Some(older) = method.fallback() {
                        self.monitor_method = self.monitor_method.min(older);
                        if let Some(spec) = self.monitors.get_mut(&key) {
                            spec.method = older;
                            self.send_monitor(user, key);
                            return;
                        }
                    }
                }
                self.monitors.remove(&key);
                if let Some(id) = user {
                    self.events.push_back(Event::Reply {
                        id,
                        result: Err(RequestError::Rpc(e)),
                    });
                }
                self.resync_step(resync);
                return;
            }
        };
        let parsed = match method {
            MonitorMethod::Monitor => parse_table_updates(&v, false).map(|u| (u, true, None)),
            MonitorMethod::MonitorCond => parse_table_updates(&v, true).map(|u| (u, true, None)),
            MonitorMethod::MonitorCondSince => match v.as_array().map(Vec::as_slice) {
                Some([Value::Bool(found), Value::String(txn), upd]) => {
                    parse_table_updates(upd, true).map(|u| (u, !found, Some(txn.clone())))
                }
                _ => Err(DatumError(
                    "monitor_cond_since reply is not [found, txn-id, updates]".into(),
                )),
            },
        };
        match parsed {
            Ok((updates, replace, txn)) => {
                if let Some(spec) = self.monitors.get_mut(&key) {
                    if txn.is_some() {
                        spec.last_txn_id = txn;
                    }
                }
                self.events.push_back(Event::Update {
                    monitor: key.clone(),
                    kind: UpdateKind::Initial { replace },
                    updates,
                });
                if let Some(id) = user {
                    self.events.push_back(Event::Reply {
                        id,
                        result: Ok(Reply::Monitor {
                            monitor: key,
                            method,
                        }),
                    });
                }
            }
            Err(e) => {
                if let Some(id) = user {
                    self.events.push_back(Event::Reply {
                        id,
                        result: Err(e.into()),
                    });
                }
            }
        }
        self.resync_step(resync);
    }
}

#[cfg(test)]
mod tests;
