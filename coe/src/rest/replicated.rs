//! The REST state in a Raft-clustered `ovsdb-server` (`--store ovsdb:REMOTE[,REMOTE…]`),
//! shared by every svcflow replica.
//!
//! Each replica keeps a [`Mirror`] of the `Svcflow` database ([`SCHEMA`]), fed by a monitor
//! on the cluster's leader ([`ovsdb::Client::connect_cluster`]). A write is validated as the
//! local store validates it, against the mirror at revision R, then committed as one OVSDB
//! transaction that first waits for the `Revision` row to still say R: two replicas that both
//! validated against R cannot both commit. The transaction also allocates the new namespaces'
//! ELAN ids, bumps the revision to R + 1, and records the write's token in `Revision.recent`,
//! so that a write whose reply was lost (a leader change) is looked up rather than sent again.
//! A write is acknowledged once the cluster committed it and the mirror shows it.
//!
//! Pure: the rows of an item ([`item_row`]), the transaction ([`transaction`]), and the
//! mirror's reading of monitor updates ([`Mirror::apply`]). I/O: [`Replicated`], which
//! drives the client.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ovsdb::monitor::MonitorRequest;
use ovsdb::{
    Client, ClientConfig, ClientEvent, Condition, Datum, Mutation, Operation, ReplicaHandle, Row,
    Until, UpdateKind, Uuid,
};
use tokio::sync::watch;

use super::durable::Changed;
use super::error::RequestError;
use super::store::{Change, Effect, Rules, Store};
use super::types::{Endpoints, Item, K8sNode, Kind, Pod, Service, namespace_name};

/// The database schema (also shipped as `deploy/svcflow.ovsschema`).
pub const SCHEMA: &str = include_str!("../../../deploy/svcflow.ovsschema");
/// The database's name.
pub const DB: &str = "Svcflow";
/// How many writes' tokens `Revision.recent` keeps.
pub const RECENT: u64 = 64;
/// How long a write may wait for a leader and for its commit before it is answered 503.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

const MONITOR: &str = "svcflow";

fn table(kind: Kind) -> &'static str {
    match kind {
        Kind::Service => "Service",
        Kind::Endpoints => "Endpoints",
        Kind::Pod => "Pod",
        Kind::Node => "Node",
    }
}

fn kind_of(table: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| self::table(*k) == table)
}

/// An item's row: its uid and names for `ovsdb-client` users, a few columns to read it by,
/// and the whole object as the REST API returns it.
pub fn item_row(item: &Item) -> Row {
    let mut row = Row::new();
    row.insert("uid".into(), Datum::string(item.uid()));
    row.insert("object".into(), Datum::string(item.to_json().to_string()));
    match item {
        Item::Service(s) => {
            row.insert(
                "namespace".into(),
                Datum::string(namespace_name(&s.network_ns)),
            );
            row.insert("name".into(), Datum::string(&s.name));
            row.insert(
                "cluster_ip".into(),
                Datum::set(s.cluster_ip.iter().map(|ip| ip.to_string())),
            );
            row.insert(
                "ports".into(),
                Datum::set(
                    s.service_ports
                        .iter()
                        .map(|p| format!("{}/{}", p.port, p.protocol.as_str())),
                ),
            );
        }
        Item::Endpoints(e) => {
            row.insert(
                "namespace".into(),
                Datum::string(namespace_name(&e.network_ns)),
            );
            row.insert("name".into(), Datum::string(&e.name));
            row.insert(
                "addresses".into(),
                Datum::set(
                    e.endpoint_addresses
                        .iter()
                        .map(|a| a.ip_address.to_string()),
                ),
            );
        }
        Item::Pod(p) => {
            row.insert(
                "namespace".into(),
                Datum::string(namespace_name(&p.network_ns)),
            );
            row.insert("name".into(), Datum::string(&p.name));
        }
        Item::Node(n) => {
            row.insert("name".into(), Datum::string(n.model_name()));
        }
    }
    row
}

/// The item a row holds.
fn item_of(kind: Kind, row: &Row) -> Result<Item, String> {
    let object = row
        .get("object")
        .and_then(Datum::as_str)
        .ok_or("no object column")?;
    let parsed = match kind {
        Kind::Service => {
            serde_json::from_str::<Service>(object).map(|s| Item::Service(Arc::new(s)))
        }
        Kind::Endpoints => {
            serde_json::from_str::<Endpoints>(object).map(|e| Item::Endpoints(Arc::new(e)))
        }
        Kind::Pod => serde_json::from_str::<Pod>(object).map(Item::Pod),
        Kind::Node => serde_json::from_str::<K8sNode>(object).map(Item::Node),
    };
    parsed.map_err(|e| e.to_string())
}

/// The transaction that commits `effects`, validated against `mirror` (the mirror at
/// `revision`, before the effects), with the ELAN ids they allocate (`new_elans`), under
/// `token`.
///
/// It writes only what the effects change, each row by its `_uuid` (which `ovsdb-server`
/// finds at once, where a `uid` condition scans the table): the effects are first reduced
/// to each item's outcome, so a container PUT that replaces a list deletes the rows of the
/// items it drops, updates those it changes, inserts the new ones, and leaves the rows of
/// the items it keeps as they are, for the cluster to log, replicate and monitor nothing of
/// them. A list emptied for good is one `delete`.
pub fn transaction(
    effects: &[Effect],
    mirror: &Mirror,
    new_elans: &BTreeMap<String, u32>,
    revision: u64,
    token: &str,
) -> Vec<Operation> {
    let mut ops = vec![Operation::wait(
        "Revision",
        vec![],
        &["revision"],
        Until::Equal,
        vec![Row::from([(
            "revision".into(),
            Datum::integer(revision as i64),
        )])],
    )];
    // Each item's outcome (its last write since its kind's last clear), in first-write order.
    let mut outcome: HashMap<(Kind, &str), Option<&Item>> = HashMap::new();
    let mut order: Vec<(Kind, &str)> = Vec::new();
    let mut cleared: Vec<Kind> = Vec::new();
    for effect in effects {
        let (key, value) = match effect {
            Effect::Clear(kind) => {
                if !cleared.contains(kind) {
                    cleared.push(*kind);
                }
                outcome.retain(|(k, _), _| k != kind);
                continue;
            }
            Effect::Upsert(item) => ((item.kind(), item.uid()), Some(item)),
            Effect::Remove(kind, uid) => ((*kind, uid.as_str()), None),
        };
        if outcome.insert(key, value).is_none() {
            order.push(key);
        }
    }
    for kind in &cleared {
        let kept = |uid: &str| matches!(outcome.get(&(*kind, uid)), Some(Some(_)));
        if !outcome.iter().any(|((k, _), v)| k == kind && v.is_some()) {
            ops.push(Operation::delete(table(*kind), vec![]));
            continue;
        }
        let mut gone: Vec<Uuid> = mirror
            .rows
            .get(kind)
            .into_iter()
            .flatten()
            .filter(|(uid, _)| !kept(uid))
            .map(|(_, uuid)| *uuid)
            .collect();
        gone.sort_unstable();
        ops.extend(
            gone.into_iter()
                .map(|uuid| Operation::delete(table(*kind), vec![Condition::uuid(uuid)])),
        );
    }
    for key in order {
        // A key written again after its kind's clear is listed twice: the first listing
        // takes its outcome.
        let Some(value) = outcome.remove(&key) else {
            continue;
        };
        let (kind, uid) = key;
        let row = mirror.row(kind, uid);
        match (value, row) {
            (Some(item), Some(_)) if mirror.store.holds(item) => {}
            (Some(item), Some(uuid)) => ops.push(Operation::update(
                table(kind),
                vec![Condition::uuid(uuid)],
                item_row(item),
            )),
            (Some(item), None) => ops.push(Operation::insert(table(kind), item_row(item))),
            // A cleared kind's gone rows are deleted above.
            (None, Some(_)) if cleared.contains(&kind) => {}
            (None, Some(uuid)) => {
                ops.push(Operation::delete(table(kind), vec![Condition::uuid(uuid)]));
            }
            (None, None) => {}
        }
    }
    for (namespace, id) in new_elans {
        ops.push(Operation::insert(
            "Elan",
            Row::from([
                ("namespace".into(), Datum::string(namespace)),
                ("elan_id".into(), Datum::integer(i64::from(*id))),
            ]),
        ));
    }
    let next = revision + 1;
    let mut mutations = vec![Mutation::insert(
        "recent",
        Datum::map([(next as i64, token.to_string())]),
    )];
    if next > RECENT {
        mutations.push(Mutation::delete(
            "recent",
            Datum::set([(next - RECENT) as i64]),
        ));
    }
    ops.push(Operation::update(
        "Revision",
        vec![],
        Row::from([("revision".into(), Datum::integer(next as i64))]),
    ));
    ops.push(Operation::mutate("Revision", vec![], mutations));
    ops
}

/// The first transaction on an empty database: its `Revision` row.
fn bootstrap() -> Vec<Operation> {
    vec![
        Operation::wait("Revision", vec![], &["revision"], Until::Equal, vec![]),
        Operation::insert(
            "Revision",
            Row::from([("revision".into(), Datum::integer(0))]),
        ),
    ]
}

/// The replica's copy of the database, fed by the monitor.
#[derive(Default)]
pub struct Mirror {
    /// The REST state.
    pub store: Store,
    /// The `Revision` row's revision (0 before the first write).
    pub revision: u64,
    /// Recent writes' tokens by the revision they made.
    pub recent: BTreeMap<u64, String>,
    /// Whether the mirror holds the database's state (after the monitor's first dump).
    pub synced: bool,
    /// Whether a `Revision` row exists.
    pub has_revision: bool,
    /// How many times the monitor sent the whole database (its first dump, and after a
    /// reconnect that `monitor_cond_since` could not resume).
    pub full_reads: u64,
    items: HashMap<Uuid, (Kind, String)>,
    /// The row of each item by kind and uid (the reverse of `items`), for a write to name
    /// the rows it changes by `_uuid`. A row whose object cannot be read is here too, by
    /// its `uid` column, so that a write of its uid replaces it and a container PUT drops it.
    rows: HashMap<Kind, HashMap<String, Uuid>>,
    elans: HashMap<Uuid, String>,
    changed: Changed,
    /// Rows that could not be read, with why (reported once each).
    pub bad_rows: Vec<String>,
    /// This replica's rules, which the state other replicas wrote is checked against.
    rules: Rules,
    /// The first of this replica's rules the mirrored state breaks, if it breaks one: the
    /// other replicas run with other rules (a wider node-port range), or this one's were
    /// narrowed. The publisher then holds the last state it accepted, as a local store
    /// refuses to open such a state (`docs/store.md`); [`Replicated::refusal`] follows it.
    refused: watch::Sender<Option<RequestError>>,
}

impl Mirror {
    /// Applies one monitor update, reading whole rows from `replica` (which has applied it).
    pub fn apply(
        &mut self,
        kind: UpdateKind,
        updates: &ovsdb::monitor::TableUpdates,
        replica: &ovsdb::Replica,
    ) {
        let whole = kind == (UpdateKind::Initial { replace: true });
        if whole {
            self.full_reads += 1;
            self.store = Store::default();
            self.items.clear();
            self.rows.clear();
            self.elans.clear();
            self.recent.clear();
            self.revision = 0;
            self.has_revision = false;
            self.changed.all = true;
        }
        // ELAN ids first, so that items of a new namespace find theirs.
        if let Some(rows) = updates.get("Elan") {
            for uuid in rows.keys() {
                if let Some(ns) = self.elans.remove(uuid) {
                    self.store.elans.remove(&ns);
                }
                if let Some(row) = replica.row("Elan", uuid) {
                    let ns = row.get("namespace").and_then(Datum::as_str);
                    let id = row.get("elan_id").and_then(Datum::as_integer);
                    if let (Some(ns), Some(id)) = (ns, id.and_then(|i| u32::try_from(i).ok())) {
                        self.store.elans.insert(ns.to_string(), id);
                        self.elans.insert(*uuid, ns.to_string());
                    }
                }
            }
        }
        // Every row that went or changed leaves first, then every row there now comes in:
        // a transaction that deletes an item's row and inserts a new row for the same uid
        // (a container PUT that keeps the item) gives both rows in one update, in the order
        // of their random uuids, and the old row's removal must not take the new one's item.
        let mut effects = Vec::new();
        for (name, rows) in updates {
            if kind_of(name).is_none() {
                continue;
            }
            for uuid in rows.keys() {
                if let Some((k, uid)) = self.items.remove(uuid) {
                    if let Some(of_kind) = self.rows.get_mut(&k) {
                        of_kind.remove(&uid);
                    }
                    effects.push(Effect::Remove(k, uid));
                }
            }
        }
        for (name, rows) in updates {
            let Some(kind) = kind_of(name) else { continue };
            for uuid in rows.keys() {
                let Some(row) = replica.row(name, uuid) else {
                    continue;
                };
                let uid = match item_of(kind, row) {
                    Ok(item) => {
                        let uid = item.uid().to_string();
                        effects.push(Effect::Upsert(item));
                        uid
                    }
                    Err(e) => {
                        self.bad_rows.push(format!("{name} row {uuid}: {e}"));
                        let uid = row.get("uid").and_then(Datum::as_str).unwrap_or_default();
                        uid.to_string()
                    }
                };
                self.rows
                    .entry(kind)
                    .or_default()
                    .insert(uid.clone(), *uuid);
                self.items.insert(*uuid, (kind, uid));
            }
        }
        self.store.apply_effects(&effects);
        self.changed.record(&effects);
        self.check(whole, &effects);
        if let Some(rows) = updates.get("Revision") {
            for uuid in rows.keys() {
                match replica.row("Revision", uuid) {
                    Some(row) => {
                        self.has_revision = true;
                        self.revision = row
                            .get("revision")
                            .and_then(Datum::as_integer)
                            .and_then(|r| u64::try_from(r).ok())
                            .unwrap_or(0);
                        self.recent = match row.get("recent") {
                            Some(Datum::Map(m)) => m
                                .iter()
                                .filter_map(|(k, v)| {
                                    Some((
                                        u64::try_from(k.as_integer()?).ok()?,
                                        v.as_str()?.to_string(),
                                    ))
                                })
                                .collect(),
                            _ => BTreeMap::new(),
                        };
                    }
                    None => {
                        self.has_revision = false;
                        self.revision = 0;
                    }
                }
            }
        }
        self.synced = true;
    }

    /// The row that holds `kind`'s item `uid`, if any.
    fn row(&self, kind: Kind, uid: &str) -> Option<Uuid> {
        self.rows.get(&kind)?.get(uid).copied()
    }

    /// Checks the state against this replica's rules after `effects`: all of it after a
    /// whole read or while it is refused (a write may have mended it), else what they wrote.
    fn check(&mut self, whole: bool, effects: &[Effect]) {
        let was = self.refused.borrow().clone();
        let verdict = if whole || was.is_some() {
            self.store.check(&self.rules, &Default::default())
        } else {
            self.store.check_effects(&self.rules, effects)
        };
        match (&verdict, &was) {
            (Err(e), None) => tracing::error!(
                "OVSDB store: the cluster's state breaks this replica's rules: {e}; this replica \
                 keeps its switches on the last state it accepted until the state or its \
                 configuration (--node-port-range) is corrected (docs/store.md)"
            ),
            (Err(e), Some(was)) if e != was => {
                tracing::error!(
                    "OVSDB store: the cluster's state still breaks this replica's rules: {e}"
                )
            }
            (Ok(()), Some(_)) => tracing::info!(
                "OVSDB store: the cluster's state meets this replica's rules again; publishing it"
            ),
            _ => {}
        }
        let now = verdict.err();
        self.refused.send_if_modified(|refused| {
            let changed = *refused != now;
            *refused = now;
            changed
        });
    }

    /// Whether the state breaks this replica's rules (it is not published meanwhile).
    pub fn refuses(&self) -> bool {
        self.refused.borrow().is_some()
    }

    /// What changed since the last call, for the publisher.
    pub fn take_changed(&mut self) -> Changed {
        std::mem::take(&mut self.changed)
    }

    /// Whether items changed since the last [`Mirror::take_changed`] (a first dump, a
    /// re-read, changes under the same revision): the publisher publishes them even when the
    /// revision it published is current.
    pub fn has_changes(&self) -> bool {
        !self.changed.is_empty()
    }
}

/// Why a replicated write failed.
#[derive(Debug)]
pub enum WriteError {
    /// The request is invalid against the current state: nothing changed.
    Request(RequestError),
    /// The cluster could not commit it in time (no leader, no quorum): nothing changed.
    Unavailable(String),
    /// The transaction reached a leader that lost its quorum before answering: it may still
    /// commit when the quorum is back, or never. `GET` tells, once the cluster answers.
    Unknown(String),
    /// The cluster refused the transaction for another reason.
    Failed(String),
}

/// What the replica's connection is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Looking for the cluster's leader.
    Searching,
    /// Using this member, the leader.
    Leader(String),
    /// The leader's database cannot be used (missing, or another schema version).
    Unusable(String),
}

/// Whether the server's schema `version` is one this svcflow reads and writes: the same
/// major version as [`SCHEMA`]'s, and no older minor version (OVSDB schema versioning: a
/// minor version adds, a major version changes).
pub fn compatible(version: &str) -> Result<(), String> {
    let ours = schema_version();
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split('.');
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (parse(version), parse(&ours)) {
        (Some((major, minor)), Some((our_major, our_minor)))
            if major == our_major && minor >= our_minor =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the cluster's {DB} schema is version {version}; this svcflow needs {ours} \
             (convert it with `ovsdb-client convert` and deploy/svcflow.ovsschema)"
        )),
    }
}

/// The version of [`SCHEMA`].
pub fn schema_version() -> String {
    serde_json::from_str::<serde_json::Value>(SCHEMA)
        .ok()
        .and_then(|v| {
            v.get("version")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// The REST state in a clustered OVSDB, for one replica.
pub struct Replicated {
    mirror: Arc<Mutex<Mirror>>,
    client: Client,
    status: watch::Receiver<Status>,
    /// Bumped after each monitor update the mirror applied.
    applied: watch::Receiver<u64>,
    rules: Rules,
    /// Serializes this replica's writes (validation uses the mirror, which a concurrent write
    /// of this replica would make stale anyway).
    writing: tokio::sync::Mutex<()>,
    tokens: std::sync::atomic::AtomicU64,
}

impl Replicated {
    /// Connects to the cluster (in the background) and mirrors it; `on_change` is called
    /// after each update the mirror applied (the publisher's wake-up).
    pub fn start(
        remotes: &[String],
        rules: Rules,
        on_change: impl Fn() + Send + 'static,
    ) -> Result<Self, String> {
        Self::start_with(remotes, rules, ClientConfig::default(), on_change)
    }

    /// [`Replicated::start`] with the client's settings (TLS for `ssl:` members).
    pub fn start_with(
        remotes: &[String],
        rules: Rules,
        config: ClientConfig,
        on_change: impl Fn() + Send + 'static,
    ) -> Result<Self, String> {
        let (client, mut events) =
            Client::connect_cluster(remotes, DB, config).map_err(|e| e.to_string())?;
        let mirror = Arc::new(Mutex::new(Mirror {
            rules: rules.clone(),
            ..Mirror::default()
        }));
        let (status_tx, status) = watch::channel(Status::Searching);
        let (applied_tx, applied) = watch::channel(0u64);
        let task_mirror = mirror.clone();
        let task_client = client.clone();
        tokio::spawn(async move {
            let mut replica: Option<ReplicaHandle> = None;
            let mut member = String::new();
            while let Some(event) = events.recv().await {
                match event {
                    ClientEvent::Member(m) => member = m,
                    ClientEvent::Connected => {
                        if replica.is_none() {
                            let checked = match task_client.get_schema(DB).await {
                                Ok(schema) => compatible(&schema.version),
                                Err(e) => Err(format!(
                                    "{member} has no usable {DB} database ({e}); create the \
                                     cluster with deploy/svcflow.ovsschema (docs/store.md)"
                                )),
                            };
                            if let Err(why) = checked {
                                tracing::error!("OVSDB store: {why}");
                                status_tx.send_replace(Status::Unusable(why));
                                continue;
                            }
                        }
                        status_tx.send_replace(Status::Leader(member.clone()));
                        if replica.is_none() {
                            let requests: BTreeMap<String, MonitorRequest> =
                                ["Service", "Endpoints", "Pod", "Node", "Elan", "Revision"]
                                    .into_iter()
                                    .map(|t| (t.to_string(), MonitorRequest::all()))
                                    .collect();
                            let c = task_client.clone();
                            // The monitor's first dump arrives as an event, applied below.
                            match c.replica(DB, MONITOR, requests).await {
                                Ok(r) => replica = Some(r),
                                Err(e) => {
                                    tracing::warn!("OVSDB store: monitoring {DB} failed: {e}")
                                }
                            }
                            if let Some(r) = &replica {
                                ensure_revision(&c, &task_mirror, r).await;
                            }
                        }
                    }
                    ClientEvent::Disconnected(e) => {
                        tracing::warn!("OVSDB store: lost {member}: {e}; looking for the leader");
                        status_tx.send_replace(Status::Searching);
                    }
                    ClientEvent::Update {
                        monitor,
                        kind,
                        updates,
                        ..
                    } if monitor == MONITOR => {
                        if let Some(r) = &replica {
                            let reading = r.read();
                            let mut m = task_mirror.lock().unwrap_or_else(PoisonError::into_inner);
                            m.apply(kind, &updates, &reading);
                            for bad in m.bad_rows.drain(..) {
                                tracing::warn!("OVSDB store: skipped {bad}");
                            }
                        }
                        applied_tx.send_modify(|n| *n += 1);
                        on_change();
                    }
                    _ => {}
                }
            }
        });
        Ok(Self {
            mirror,
            client,
            status,
            applied,
            rules,
            writing: tokio::sync::Mutex::new(()),
            tokens: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The mirror.
    pub fn mirror(&self) -> &Arc<Mutex<Mirror>> {
        &self.mirror
    }

    /// Whether reads may be stale: no leader in use, or no state mirrored yet.
    pub fn stale(&self) -> bool {
        let synced = self
            .mirror
            .lock()
            .map(|m| m.synced && m.has_revision)
            .unwrap_or(false);
        !synced || !matches!(*self.status.borrow(), Status::Leader(_))
    }

    /// Why the mirrored state breaks this replica's rules (`None` while it meets them), and
    /// every change of that: the state is not published meanwhile ([`Mirror::refuses`]).
    pub fn refusal(&self) -> watch::Receiver<Option<RequestError>> {
        let m = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
        m.refused.subscribe()
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    fn token(&self) -> String {
        let n = self
            .tokens
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!("{}-{nanos:x}-{n}", std::process::id())
    }

    /// Validates `change` against the mirror and commits it; returns once the cluster
    /// committed it and the mirror shows it.
    pub async fn write(&self, change: Change) -> Result<(), WriteError> {
        let _one = self.writing.lock().await;
        let deadline = Instant::now() + WRITE_TIMEOUT;
        let token = self.token();
        loop {
            self.ready(deadline).await?;
            let (ops, revision) = {
                let mut m = self.mirror.lock().unwrap_or_else(PoisonError::into_inner);
                let revision = m.revision;
                let before = m.store.elans.clone();
                let applied = m
                    .store
                    .apply(change.clone(), &self.rules)
                    .map_err(WriteError::Request)?;
                let new_elans: BTreeMap<String, u32> = m
                    .store
                    .elans
                    .iter()
                    .filter(|(ns, _)| !before.contains_key(*ns))
                    .map(|(ns, id)| (ns.clone(), *id))
                    .collect();
                let effects = applied.effects.clone();
                m.store.revert(applied.undo);
                let ops = transaction(&effects, &m, &new_elans, revision, &token);
                (ops, revision)
            };
            let remaining = deadline.saturating_duration_since(Instant::now());
            let outcome = tokio::time::timeout(remaining, self.client.transact(DB, ops)).await;
            match outcome {
                Ok(Ok(_)) => {
                    // Committed: the leader answers only then. Wait (briefly) for the mirror,
                    // so that a read on this replica right after sees the write.
                    let _ = self
                        .wait_revision(revision + 1, Instant::now() + Duration::from_secs(2))
                        .await;
                    return Ok(());
                }
                // The wait failed: another replica wrote since; validate again.
                Ok(Err(e))
                    if matches!(
                        e.transact(),
                        Some(ovsdb::TransactError::Operation { index: 0, .. })
                    ) =>
                {
                    self.wait_past(revision, deadline).await?;
                }
                Ok(Err(e)) if e.transact().is_some() => {
                    return Err(WriteError::Failed(e.to_string()));
                }
                // The reply is lost (the member left or lost its quorum): did it commit?
                lost => {
                    let why = match lost {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {} s", WRITE_TIMEOUT.as_secs()),
                    };
                    tracing::info!(
                        "OVSDB store: write at revision {revision}: {why}; checking its outcome"
                    );
                    match self.committed(revision, &token, deadline).await {
                        Some(true) => return Ok(()),
                        // Not committed, and it never will be: a new leader has it or not.
                        Some(false) if Instant::now() < deadline => continue,
                        Some(false) => {
                            return Err(WriteError::Unavailable(format!(
                                "the cluster did not commit the write within {} s",
                                WRITE_TIMEOUT.as_secs()
                            )));
                        }
                        None => {
                            return Err(WriteError::Unknown(format!(
                                "the write reached the cluster's leader, which lost its quorum \
                                 before answering ({why}); it is committed if the quorum comes \
                                 back with it, else not: read it back then"
                            )));
                        }
                    }
                }
            }
        }
    }

    /// Waits up to `timeout` for a leader and a mirrored state.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<(), WriteError> {
        self.ready(Instant::now() + timeout).await
    }

    /// Waits for a leader and a mirrored state.
    async fn ready(&self, deadline: Instant) -> Result<(), WriteError> {
        let mut applied = self.applied.clone();
        loop {
            if let Status::Unusable(why) = &*self.status.borrow() {
                return Err(WriteError::Unavailable(why.clone()));
            }
            let ok = matches!(*self.status.borrow(), Status::Leader(_))
                && self
                    .mirror
                    .lock()
                    .map(|m| m.synced && m.has_revision)
                    .unwrap_or(false);
            if ok {
                return Ok(());
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(WriteError::Unavailable(
                    "no leader of the OVSDB cluster is reachable (no quorum?)".into(),
                ));
            }
            let mut status = self.status.clone();
            let _ = tokio::time::timeout(remaining.min(Duration::from_millis(100)), async {
                tokio::select! {
                    _ = status.changed() => {}
                    _ = applied.changed() => {}
                }
            })
            .await;
        }
    }

    async fn wait_mirror(
        &self,
        deadline: Instant,
        done: impl Fn(&Mirror) -> bool,
    ) -> Result<(), WriteError> {
        let mut applied = self.applied.clone();
        loop {
            if self.mirror.lock().map(|m| done(&m)).unwrap_or(false) {
                return Ok(());
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(WriteError::Unavailable(
                    "the write's outcome is not known: the cluster did not answer in time".into(),
                ));
            }
            let _ =
                tokio::time::timeout(remaining.min(Duration::from_millis(100)), applied.changed())
                    .await;
        }
    }

    async fn wait_revision(&self, revision: u64, deadline: Instant) -> Result<(), WriteError> {
        self.wait_mirror(deadline, |m| m.revision >= revision).await
    }

    async fn wait_past(&self, revision: u64, deadline: Instant) -> Result<(), WriteError> {
        self.wait_mirror(deadline, |m| m.revision > revision).await
    }

    /// After a lost reply: whether the write made revision `revision + 1`, read from a
    /// leader (which holds every committed write). `None` when no leader answers before
    /// `deadline`: the outcome is unknown.
    async fn committed(&self, revision: u64, token: &str, deadline: Instant) -> Option<bool> {
        loop {
            self.ready(deadline).await.ok()?;
            let read = vec![Operation::select("Revision", vec![])];
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, self.client.transact(DB, read)).await {
                Ok(Ok(results)) => {
                    let row = results.first()?.rows().first()?.clone();
                    let now = row
                        .get("revision")
                        .and_then(Datum::as_integer)
                        .and_then(|r| u64::try_from(r).ok())?;
                    if now <= revision {
                        return Some(false);
                    }
                    let made = match row.get("recent") {
                        Some(Datum::Map(m)) => m.iter().any(|(k, v)| {
                            k.as_integer() == i64::try_from(revision + 1).ok()
                                && v.as_str() == Some(token)
                        }),
                        _ => false,
                    };
                    return Some(made);
                }
                Ok(Err(_)) => continue,
                Err(_) => return None,
            }
        }
    }
}

/// Creates the `Revision` row of an empty database (one replica wins; the others' waits fail).
async fn ensure_revision(client: &Client, mirror: &Arc<Mutex<Mirror>>, replica: &ReplicaHandle) {
    let _ = replica
        .wait_for(Duration::from_secs(5), |r| {
            (r.generation() > 0).then_some(())
        })
        .await;
    let empty = mirror.lock().map(|m| !m.has_revision).unwrap_or(false)
        && replica.read().len("Revision") == 0;
    if empty && let Err(e) = client.transact(DB, bootstrap()).await {
        tracing::debug!("OVSDB store: creating the Revision row: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::parse;

    fn svc(uid: &str, ns: &str) -> Item {
        parse::item_body(
            Kind::Service,
            uid,
            format!(
                r#"{{"service:services":[{{"service:uid":"{uid}","service:name":"{uid}",
                "service:network-NS":"{ns}","service:cluster-ip-address":"10.96.0.9",
                "service:service-ports":[{{"service:port":80}}]}}]}}"#
            )
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn a_write_waits_on_the_revision_and_records_its_token() {
        let effects = vec![
            Effect::Upsert(svc("new", "prod")),
            Effect::Upsert(svc("old", "default")),
            Effect::Remove(Kind::Pod, "p1".into()),
        ];
        let elans = BTreeMap::from([("prod".to_string(), 2)]);
        let (mirror, _) = mirror_of(&[(svc("old", "prod"), 5), (pod("p1"), 6), (pod("p2"), 7)]);
        let ops = transaction(&effects, &mirror, &elans, 70, "tok");
        let json: Vec<serde_json::Value> = ops.iter().map(Operation::to_json).collect();
        assert_eq!(json[0]["op"], "wait");
        assert_eq!(json[0]["until"], "==");
        assert_eq!(json[0]["rows"][0]["revision"], 70);
        assert_eq!(json[1]["op"], "insert");
        assert_eq!(json[1]["table"], "Service");
        // Rows are named by `_uuid`, which `ovsdb-server` finds without a scan.
        assert_eq!(json[2]["op"], "update");
        assert_eq!(json[2]["where"][0], where_uuid(5));
        assert_eq!(json[3]["op"], "delete");
        assert_eq!(json[3]["table"], "Pod");
        assert_eq!(json[3]["where"][0], where_uuid(6));
        assert_eq!(json[4]["table"], "Elan");
        assert_eq!(json[4]["row"]["elan_id"], 2);
        assert_eq!(json[5]["row"]["revision"], 71);
        // The token goes in at 71; the one 64 writes back leaves.
        assert_eq!(
            json[6]["mutations"],
            serde_json::json!([
                ["recent", "insert", ["map", [[71, "tok"]]]],
                ["recent", "delete", 7]
            ])
        );
    }

    /// A container PUT that keeps item `web` deletes its row and inserts a new one: the
    /// mirror keeps `web` whichever of the two uuids its update gives first.
    #[test]
    fn a_row_replaced_under_a_new_uuid_keeps_its_item_in_either_order() {
        use ovsdb::Uuid;
        use ovsdb::monitor::{RowUpdate, TableUpdates};
        use ovsdb::schema::DatabaseSchema;
        let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
        let schema = DatabaseSchema::from_json(&schema).unwrap();
        let (low, high) = (Uuid::from_u128(1), Uuid::from_u128(u128::MAX));
        for (old, new) in [(low, high), (high, low)] {
            let mut replica = ovsdb::Replica::new(schema.clone());
            let mut mirror = Mirror::default();
            let web = svc("web", "default");
            let first: TableUpdates = BTreeMap::from([(
                "Service".to_string(),
                BTreeMap::from([(old, RowUpdate::Insert(item_row(&web)))]),
            )]);
            let initial = UpdateKind::Initial { replace: true };
            replica.apply(initial, &first);
            mirror.apply(initial, &first, &replica);
            assert!(mirror.store.contains(Kind::Service, "web"));
            let replaced: TableUpdates = BTreeMap::from([(
                "Service".to_string(),
                BTreeMap::from([
                    (old, RowUpdate::Delete),
                    (new, RowUpdate::Insert(item_row(&web))),
                ]),
            )]);
            replica.apply(UpdateKind::Change, &replaced);
            mirror.apply(UpdateKind::Change, &replaced, &replica);
            assert!(
                mirror.store.contains(Kind::Service, "web"),
                "old row {old}, new row {new}"
            );
        }
    }

    /// A mirror holding `items`, each in the row of the given uuid, and the replica it reads.
    fn mirror_of(items: &[(Item, u128)]) -> (Mirror, ovsdb::Replica) {
        use ovsdb::monitor::{RowUpdate, TableUpdates};
        use ovsdb::schema::DatabaseSchema;
        let schema: serde_json::Value = serde_json::from_str(SCHEMA).unwrap();
        let schema = DatabaseSchema::from_json(&schema).unwrap();
        let mut replica = ovsdb::Replica::new(schema);
        let mut mirror = Mirror::default();
        let mut updates = TableUpdates::new();
        for (item, uuid) in items {
            updates
                .entry(table(item.kind()).to_string())
                .or_default()
                .insert(Uuid::from_u128(*uuid), RowUpdate::Insert(item_row(item)));
        }
        let initial = UpdateKind::Initial { replace: true };
        replica.apply(initial, &updates);
        mirror.apply(initial, &updates, &replica);
        (mirror, replica)
    }

    fn pod(uid: &str) -> Item {
        parse::item_body(
            Kind::Pod,
            uid,
            format!(r#"{{"pod:pods":[{{"pod:uid":"{uid}","pod:name":"{uid}"}}]}}"#).as_bytes(),
        )
        .unwrap()
    }

    fn where_uuid(uuid: u128) -> serde_json::Value {
        serde_json::json!(["_uuid", "==", ["uuid", Uuid::from_u128(uuid).to_string()]])
    }

    /// The operations `transaction` makes of `effects` (no new ELANs, revision `revision`), as
    /// the JSON sent to the server.
    fn ops_json(effects: &[Effect], mirror: &Mirror, revision: u64) -> Vec<serde_json::Value> {
        transaction(effects, mirror, &BTreeMap::new(), revision, "t")
            .iter()
            .map(Operation::to_json)
            .collect()
    }

    /// A container PUT writes only what it changes: the rows of the items it keeps as they
    /// are stay untouched, so a PUT of the same list again commits nothing but the revision.
    #[test]
    fn a_replaced_list_writes_only_what_changed() {
        let (mirror, _) = mirror_of(&[
            (svc("same", "default"), 1),
            (svc("changed", "default"), 2),
            (svc("dropped", "default"), 3),
            (pod("p1"), 4),
        ]);
        let effects = vec![
            Effect::Clear(Kind::Service),
            Effect::Upsert(svc("same", "default")),
            Effect::Upsert(svc("changed", "prod")),
            Effect::Upsert(svc("new", "default")),
        ];
        let json = ops_json(&effects, &mirror, 9);
        let writes: Vec<(String, serde_json::Value)> = json[1..json.len() - 2]
            .iter()
            .map(|op| {
                (
                    op["op"].as_str().unwrap().to_string(),
                    op["where"][0].clone(),
                )
            })
            .collect();
        assert_eq!(
            writes,
            vec![
                ("delete".to_string(), where_uuid(3)),
                ("update".to_string(), where_uuid(2)),
                ("insert".to_string(), serde_json::Value::Null),
            ]
        );
        assert_eq!(json[2]["row"]["namespace"], "prod");
        assert_eq!(json[3]["row"]["uid"], "new");

        // The same list again: nothing but the revision.
        let again = vec![
            Effect::Clear(Kind::Service),
            Effect::Upsert(svc("same", "default")),
            Effect::Upsert(svc("changed", "default")),
            Effect::Upsert(svc("dropped", "default")),
        ];
        let ops = transaction(&again, &mirror, &BTreeMap::new(), 9, "t");
        assert_eq!(ops.len(), 3, "wait, revision, recent: {ops:?}");
    }

    /// Writes are reduced to each item's outcome, in any order of clears, upserts and
    /// removals; a list emptied for good is one `delete` of the whole table.
    #[test]
    fn effects_reduce_to_each_items_outcome() {
        let (mirror, _) = mirror_of(&[(svc("a", "default"), 1), (svc("b", "default"), 2)]);
        let ops_of = |effects: &[Effect]| -> Vec<(String, serde_json::Value)> {
            let json = ops_json(effects, &mirror, 1);
            json[1..json.len() - 2]
                .iter()
                .map(|op| (op["op"].as_str().unwrap().to_string(), op["where"].clone()))
                .collect()
        };
        let all = ("delete".to_string(), serde_json::json!([]));
        assert_eq!(ops_of(&[Effect::Clear(Kind::Service)]), vec![all.clone()]);
        // Written, then cleared: the clear wins.
        assert_eq!(
            ops_of(&[
                Effect::Upsert(svc("a", "prod")),
                Effect::Clear(Kind::Service)
            ]),
            vec![all]
        );
        // Cleared, then one item put back as it was and the other removed.
        assert_eq!(
            ops_of(&[
                Effect::Clear(Kind::Service),
                Effect::Upsert(svc("a", "default")),
                Effect::Remove(Kind::Service, "b".into()),
            ]),
            vec![("delete".to_string(), serde_json::json!([where_uuid(2)]))]
        );
        // Removed, then written again as it was: nothing.
        assert_eq!(
            ops_of(&[
                Effect::Remove(Kind::Service, "a".into()),
                Effect::Upsert(svc("a", "default")),
            ]),
            vec![]
        );
        // Removing what is not there: nothing.
        assert_eq!(ops_of(&[Effect::Remove(Kind::Pod, "nope".into())]), vec![]);
    }

    /// A row whose object this replica cannot read is still known by its uid: a write of
    /// that uid replaces it and a container PUT that leaves it out deletes it.
    #[test]
    fn an_unreadable_row_is_replaced_or_dropped_by_its_uid() {
        use ovsdb::monitor::{RowUpdate, TableUpdates};
        let (mut mirror, mut replica) = mirror_of(&[(svc("a", "default"), 1)]);
        let mut bad = item_row(&svc("b", "default"));
        bad.insert("object".into(), Datum::string("{not json"));
        let updates: TableUpdates = BTreeMap::from([(
            "Service".to_string(),
            BTreeMap::from([(Uuid::from_u128(2), RowUpdate::Insert(bad))]),
        )]);
        replica.apply(UpdateKind::Change, &updates);
        mirror.apply(UpdateKind::Change, &updates, &replica);
        assert_eq!(mirror.bad_rows.len(), 1);
        assert!(!mirror.store.contains(Kind::Service, "b"));

        let json = ops_json(&[Effect::Upsert(svc("b", "default"))], &mirror, 1);
        assert_eq!(json[1]["op"], "update");
        assert_eq!(json[1]["where"][0], where_uuid(2));

        let json = ops_json(
            &[
                Effect::Clear(Kind::Service),
                Effect::Upsert(svc("a", "default")),
            ],
            &mirror,
            1,
        );
        assert_eq!(json[1]["op"], "delete");
        assert_eq!(json[1]["where"][0], where_uuid(2));
        assert_eq!(json.len(), 4, "a is kept as it is: {json:?}");
    }

    #[test]
    fn rows_hold_the_object_as_get_returns_it() {
        let item = svc("web", "");
        let row = item_row(&item);
        assert_eq!(row["namespace"].as_str(), Some("default"));
        assert_eq!(row["ports"].strings(), vec!["80/TCP".to_string()]);
        assert_eq!(item_of(Kind::Service, &row).unwrap(), item);
    }

    #[test]
    fn schema_versions_must_share_the_major_and_not_be_older() {
        let ours = schema_version();
        assert_eq!(ours, "1.1.0");
        assert!(compatible("1.1.0").is_ok());
        assert!(compatible("1.0.0").is_err(), "1.0.0 has no Master table");
        assert!(compatible("1.3.1").is_ok());
        assert!(compatible("2.0.0").is_err());
        assert!(compatible("0.9.0").is_err());
        assert!(compatible("garbage").is_err());
    }
}
