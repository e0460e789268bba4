//! The in-memory state of the northbound, and atomic, validated changes to it. Pure: no I/O.
//!
//! A request becomes a [`Change`]. [`Store::apply`] turns it into [`Effect`]s, applies them
//! in place while keeping an [`Undo`], and validates the result as a whole (duplicate VIP:port
//! across services, node ports, clashing names). If validation fails the undo runs, so the
//! store is as before; the caller can also [`Store::revert`] an accepted change (when logging
//! it fails). The effects are what the write-ahead log records.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::RequestError;
use super::types::{Endpoints, Item, K8sNode, Kind, Pod, Protocol, Service, namespace_name};

/// The REST side's hash maps and sets (the store's and the translator's): foldhash, seeded at
/// random per process (as hashbrown's own default is), since their keys come from the writes.
/// A container PUT of 30,000 services fills several from empty; SipHash, the standard
/// library's, was a tenth of that and of its publication.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// An empty map with room for `n` entries.
fn map_for<K, V>(n: usize) -> HashMap<K, V> {
    HashMap::with_capacity_and_hasher(n, Default::default())
}

/// An empty set with room for `n` entries.
fn set_for<T>(n: usize) -> HashSet<T> {
    HashSet::with_capacity_and_hasher(n, Default::default())
}

/// Limits that depend on configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// The allowed node ports (Kubernetes' `--service-node-port-range`).
    pub node_port_range: RangeInclusive<u16>,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            node_port_range: 30000..=32767,
        }
    }
}

/// Everything posted over REST.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Store {
    /// Services by uid. Behind a pointer, as are endpoints: a B-tree node has room for eleven
    /// values, about half of it empty after ordered inserts, and a service is ~250 bytes
    /// (issue 19: ~9 MiB at 30,000 services). Shared (`Arc`) with the write that parsed it.
    pub services: BTreeMap<String, Arc<Service>>,
    /// Endpoints by uid.
    pub endpoints: BTreeMap<String, Arc<Endpoints>>,
    /// Pods by uid.
    pub pods: BTreeMap<String, Pod>,
    /// Nodes by uid.
    pub nodes: BTreeMap<String, K8sNode>,
    /// ELAN id of each namespace, given on first use and never reused.
    pub elans: BTreeMap<String, u32>,
    /// Who holds each address, node port, name and interface: what a change can clash
    /// with, so that validating it looks at those items only. Derived; rebuilt when lost.
    #[serde(skip)]
    index: Index,
}

/// The items that hold each value a change can clash on.
///
/// Names are held by a hash of (namespace, name), not the strings: a lookup gives the items
/// whose names may clash, a superset of those that do, which is all [`Store::scope`] needs
/// (the check itself compares the names). At 30,000 services and endpoints objects that
/// saves four strings and their allocations per item.
#[derive(Debug, Clone, Default)]
struct Index {
    /// The kinds whose parts describe the store: not those of a list replaced or emptied
    /// since (a container PUT), nor any after a load.
    built: BTreeSet<Kind>,
    vips: HashMap<IpAddr, Holders>,
    node_ports: HashMap<u16, Holders>,
    service_names: HashMap<u64, Holders>,
    endpoints_names: HashMap<u64, Holders>,
    ifaces: HashMap<String, Holders>,
    node_names: HashMap<String, Holders>,
}

/// The index is derived from the store, so two stores are equal by their items alone.
impl PartialEq for Index {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Index {}

/// The uids holding one value, sorted and without repeats: nearly always one, which a
/// vector holds in one small allocation (a one-entry `BTreeSet` allocates a whole node).
type Holders = Vec<String>;

/// Adds (`on`) or removes `value` in the sorted, repeat-free list at `key`, which holds
/// exactly what it needs: nearly every list holds one value, and a vector grown by `push`
/// reserves room for four.
pub(crate) fn link<K, V, Q>(map: &mut HashMap<K, Vec<V>>, key: K, value: &Q, on: bool)
where
    K: Eq + std::hash::Hash,
    V: std::borrow::Borrow<Q>,
    Q: Ord + ToOwned<Owned = V> + ?Sized,
{
    if on {
        let set = map.entry(key).or_default();
        if let Err(at) = set.binary_search_by(|u| u.borrow().cmp(value)) {
            set.reserve_exact(1);
            set.insert(at, value.to_owned());
        }
    } else if let Some(set) = map.get_mut(&key) {
        if let Ok(at) = set.binary_search_by(|u| u.borrow().cmp(value)) {
            set.remove(at);
        }
        if set.is_empty() {
            map.remove(&key);
        }
    }
}

/// The key of a (namespace, name) in the index.
fn name_key(namespace: &str, name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (namespace, name).hash(&mut h);
    h.finish()
}

impl Index {
    /// Builds the parts of the kinds not built from `store`'s lists: after a container PUT
    /// of services, the services' parts only.
    fn build(&mut self, store: &Store) {
        for kind in Kind::ALL {
            if self.built.contains(&kind) {
                continue;
            }
            self.unbuild(kind);
            match kind {
                Kind::Service => store.services.values().for_each(|s| self.service(s, true)),
                Kind::Endpoints => store
                    .endpoints
                    .values()
                    .for_each(|e| self.endpoints(e, true)),
                Kind::Pod => store.pods.values().for_each(|p| self.pod(p, true)),
                Kind::Node => store.nodes.values().for_each(|n| self.node(n, true)),
            }
            self.built.insert(kind);
        }
    }

    /// Forgets the parts of `kind` (its list was replaced or emptied).
    fn unbuild(&mut self, kind: Kind) {
        self.built.remove(&kind);
        match kind {
            Kind::Service => {
                self.vips = HashMap::default();
                self.node_ports = HashMap::default();
                self.service_names = HashMap::default();
            }
            Kind::Endpoints => self.endpoints_names = HashMap::default(),
            Kind::Pod => self.ifaces = HashMap::default(),
            Kind::Node => self.node_names = HashMap::default(),
        }
    }

    /// Adds (`on`) or removes what `item` holds, if its kind's parts are built.
    fn item(&mut self, item: &Item, on: bool) {
        if !self.built.contains(&item.kind()) {
            return;
        }
        match item {
            Item::Service(s) => self.service(s, on),
            Item::Endpoints(e) => self.endpoints(e, on),
            Item::Pod(p) => self.pod(p, on),
            Item::Node(n) => self.node(n, on),
        }
    }

    fn service(&mut self, s: &Service, on: bool) {
        for vip in s.vips() {
            link(&mut self.vips, vip, s.uid.as_str(), on);
        }
        for np in s.claimed_node_ports() {
            link(&mut self.node_ports, np, s.uid.as_str(), on);
        }
        let (ns, name) = service_name(s);
        link(
            &mut self.service_names,
            name_key(ns, name),
            s.uid.as_str(),
            on,
        );
    }

    fn endpoints(&mut self, e: &Endpoints, on: bool) {
        let key = name_key(namespace_name(&e.network_ns), &e.name);
        link(&mut self.endpoints_names, key, e.uid.as_str(), on);
    }

    fn pod(&mut self, p: &Pod, on: bool) {
        for iface in &p.interface {
            link(&mut self.ifaces, iface.uid.clone(), p.uid.as_str(), on);
        }
    }

    fn node(&mut self, n: &K8sNode, on: bool) {
        link(
            &mut self.node_names,
            n.model_name().to_string(),
            n.uid.as_str(),
            on,
        );
    }
}

/// A requested change.
#[derive(Debug, Clone, PartialEq, Eq)]
// One per request, moved and never stored: boxing the item would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Change {
    /// PUT on a container: its list becomes exactly `items`.
    Replace(Kind, Vec<Item>),
    /// PUT on the whole datastore: each listed kind's list becomes exactly its items, all
    /// at once (one check, one log record, one revision). Each kind may be listed once; one
    /// that is not listed is left as it is (the REST route requires all four).
    Datastore(Vec<(Kind, Vec<Item>)>),
    /// PUT on an item: create or replace it.
    Upsert(Item),
    /// POST: create `items`; none may exist yet.
    Create(Kind, Vec<Item>),
    /// DELETE on an item; it must exist.
    Delete(Kind, String),
    /// DELETE on a container: empty its list.
    Clear(Kind),
}

/// One step of a change, as the write-ahead log records it. Applying effects cannot fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
// Nearly every effect is an upsert, so the small variants waste little.
#[allow(clippy::large_enum_variant)]
pub enum Effect {
    /// Empty a list.
    Clear(Kind),
    /// Create or replace an item.
    Upsert(Item),
    /// Remove an item if present.
    Remove(Kind, String),
}

/// The items a change writes, by kind: some by uid, or every item of a kind whose list the
/// change replaces (a container or datastore PUT), which needs no list of its uids: after
/// the change every item of that kind is one it wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    some: BTreeMap<Kind, HashSet<String>>,
    /// Kinds replaced whole.
    whole: BTreeSet<Kind>,
}

impl Touched {
    /// Makes room for `n` items of `kind` at once (a container write's).
    fn make_room(&mut self, kind: Kind, n: usize) {
        self.some.entry(kind).or_default().reserve(n);
    }

    fn insert(&mut self, kind: Kind, uid: &str) {
        self.some.entry(kind).or_default().insert(uid.to_string());
    }

    /// Marks every item of `kind` as written: its list is replaced.
    fn replace_all(&mut self, kind: Kind) {
        self.whole.insert(kind);
    }

    fn contains(&self, kind: Kind, uid: &str) -> bool {
        self.whole.contains(&kind) || self.some.get(&kind).is_some_and(|s| s.contains(uid))
    }

    /// How many items were written by uid (a kind replaced whole is not counted).
    fn len(&self) -> usize {
        self.some.values().map(HashSet::len).sum()
    }

    /// The kinds written.
    fn kinds(&self) -> BTreeSet<Kind> {
        self.some.keys().chain(&self.whole).copied().collect()
    }
}

/// An accepted change: its effects, and how to take it back.
#[derive(Debug)]
pub struct Applied {
    /// What to log.
    pub effects: Vec<Effect>,
    /// Reverts the change.
    pub undo: Undo,
}

/// The inverse of applied effects.
#[derive(Debug, Default)]
pub struct Undo(Vec<UndoStep>);

#[derive(Debug)]
enum UndoStep {
    /// Put back what an item was (None: it did not exist).
    Item(Kind, String, Option<Box<Item>>),
    /// Put back a whole list.
    Services(BTreeMap<String, Arc<Service>>),
    Endpoints(BTreeMap<String, Arc<Endpoints>>),
    Pods(BTreeMap<String, Pod>),
    Nodes(BTreeMap<String, K8sNode>),
    /// Forget a namespace's new ELAN id.
    Elan(String),
}

impl Store {
    /// Applies `change` and validates the result; on error the store is unchanged.
    pub fn apply(&mut self, change: Change, rules: &Rules) -> Result<Applied, RequestError> {
        self.apply_beside(change, rules, |_| ())
            .map(|(applied, ())| applied)
    }

    /// [`Store::apply`], with `beside` given the change's effects while they are applied and
    /// checked: on another thread when there are at least [`crate::par::WORTH_A_THREAD`] of them (the
    /// durable store encodes its log record there), here otherwise. `beside` runs only if
    /// the change is well formed, and its result is returned only if the change is accepted.
    pub fn apply_beside<T: Send>(
        &mut self,
        change: Change,
        rules: &Rules,
        beside: impl FnOnce(&[Effect]) -> T + Send,
    ) -> Result<(Applied, T), RequestError> {
        let (effects, touched) = self.plan(change)?;
        let apply_and_check = |store: &mut Store| {
            let undo = store.apply_effects_undoable(&effects);
            let scope = store.scope(&touched);
            match store.check_in(rules, &touched, &scope) {
                Ok(()) => Ok(undo),
                Err(e) => {
                    store.revert(undo);
                    Err(e)
                }
            }
        };
        let (checked, side) =
            crate::par::join_for(effects.len(), || apply_and_check(self), || beside(&effects));
        let undo = checked?;
        Ok((Applied { effects, undo }, side))
    }

    /// Builds the index of what each item holds if a whole-list change or a load left it
    /// unbuilt (a no-op otherwise). The next small write builds it anyway; the northbound's
    /// publisher calls this once it has published a container PUT, so that the first write
    /// after a bulk load does not wait for it (25 ms at 30,000 services).
    pub fn build_index(&mut self) {
        if self.needs_index() {
            let mut index = std::mem::take(&mut self.index);
            index.build(self);
            self.index = index;
        }
    }

    /// Whether the validation index is unbuilt, whole or in part (after a load or a
    /// container write).
    pub fn needs_index(&self) -> bool {
        self.index.built.len() < Kind::ALL.len()
    }

    /// Takes back an applied change.
    pub fn revert(&mut self, undo: Undo) {
        for step in undo.0.into_iter().rev() {
            match step {
                UndoStep::Item(kind, uid, None) => drop(self.take(kind, &uid)),
                UndoStep::Item(_, _, Some(item)) => drop(self.put(*item)),
                UndoStep::Services(m) => {
                    self.services = m;
                    self.index.unbuild(Kind::Service);
                }
                UndoStep::Endpoints(m) => {
                    self.endpoints = m;
                    self.index.unbuild(Kind::Endpoints);
                }
                UndoStep::Pods(m) => {
                    self.pods = m;
                    self.index.unbuild(Kind::Pod);
                }
                UndoStep::Nodes(m) => {
                    self.nodes = m;
                    self.index.unbuild(Kind::Node);
                }
                UndoStep::Elan(ns) => drop(self.elans.remove(&ns)),
            }
        }
    }

    /// The effects of `change`, and the items it writes.
    fn plan(&self, change: Change) -> Result<(Vec<Effect>, Touched), RequestError> {
        let mut touched = Touched::default();
        let effects = match change {
            Change::Replace(kind, items) => {
                let mut effects = Vec::with_capacity(items.len() + 1);
                replace(kind, items, &mut effects, &mut touched)?;
                effects
            }
            Change::Datastore(lists) => {
                let mut effects =
                    Vec::with_capacity(lists.iter().map(|(_, items)| items.len() + 1).sum());
                let mut seen = BTreeSet::new();
                for (kind, items) in lists {
                    if !seen.insert(kind) {
                        return Err(RequestError::invalid(
                            kind.qualified_container(),
                            "container given more than once",
                        ));
                    }
                    replace(kind, items, &mut effects, &mut touched)?;
                }
                effects
            }
            Change::Upsert(item) => {
                touched.insert(item.kind(), item.uid());
                vec![Effect::Upsert(item)]
            }
            Change::Create(kind, items) => {
                no_repeats(kind, &items)?;
                touched.make_room(kind, items.len());
                let mut effects = Vec::with_capacity(items.len());
                for item in items {
                    check_kind(kind, &item)?;
                    if self.contains(kind, item.uid()) {
                        return Err(RequestError::Exists {
                            path: kind.item_name(item.uid()),
                        });
                    }
                    touched.insert(kind, item.uid());
                    effects.push(Effect::Upsert(item));
                }
                effects
            }
            Change::Delete(kind, uid) => {
                if !self.contains(kind, &uid) {
                    return Err(RequestError::NotFound {
                        path: kind.item_name(&uid),
                    });
                }
                vec![Effect::Remove(kind, uid)]
            }
            Change::Clear(kind) => vec![Effect::Clear(kind)],
        };
        Ok((effects, touched))
    }

    /// Checks what `effects` wrote (already applied) against `rules`, as a write's check
    /// does: in time proportional to them, on a store that was valid before them. A replica
    /// of the replicated store checks so what other replicas wrote, under their own rules.
    pub fn check_effects(&mut self, rules: &Rules, effects: &[Effect]) -> Result<(), RequestError> {
        let mut touched = Touched::default();
        for effect in effects {
            // Taking an item out never breaks a rule: every rule is about one item or a pair.
            if let Effect::Upsert(item) = effect {
                touched.insert(item.kind(), item.uid());
            }
        }
        if touched.len() == 0 {
            return Ok(());
        }
        let scope = self.scope(&touched);
        self.check_in(rules, &touched, &scope)
    }

    /// Applies logged effects. Never fails; used for replay.
    pub fn apply_effects(&mut self, effects: &[Effect]) {
        drop(self.apply_effects_undoable(effects));
    }

    fn apply_effects_undoable(&mut self, effects: &[Effect]) -> Undo {
        let mut undo = Vec::new();
        let mut rest = effects;
        while let Some((effect, after)) = rest.split_first() {
            rest = after;
            match effect {
                Effect::Clear(kind) => {
                    self.index.unbuild(*kind);
                    undo.push(match kind {
                        Kind::Service => UndoStep::Services(std::mem::take(&mut self.services)),
                        Kind::Endpoints => UndoStep::Endpoints(std::mem::take(&mut self.endpoints)),
                        Kind::Pod => UndoStep::Pods(std::mem::take(&mut self.pods)),
                        Kind::Node => UndoStep::Nodes(std::mem::take(&mut self.nodes)),
                    });
                    // The upserts of that kind right after it (a container PUT) fill the list
                    // it emptied at once, with no undo step each: putting the old list back
                    // undoes them.
                    let run = rest
                        .iter()
                        .take_while(|e| matches!(e, Effect::Upsert(i) if i.kind() == *kind))
                        .count();
                    let (upserts, after) = rest.split_at(run);
                    self.fill(*kind, upserts, &mut undo);
                    rest = after;
                }
                Effect::Upsert(item) => {
                    if let Some(ns) = item.namespace() {
                        self.elan(namespace_name(ns), &mut undo);
                    }
                    let old = self.put(item.clone());
                    undo.push(UndoStep::Item(
                        item.kind(),
                        item.uid().to_string(),
                        old.map(Box::new),
                    ));
                }
                Effect::Remove(kind, uid) => {
                    let old = self.take(*kind, uid);
                    undo.push(UndoStep::Item(*kind, uid.clone(), old.map(Box::new)));
                }
            }
        }
        Undo(undo)
    }

    /// Gives namespace `ns` an ELAN id if it has none.
    fn elan(&mut self, ns: &str, undo: &mut Vec<UndoStep>) {
        if !self.elans.contains_key(ns) {
            let id = self.elans.values().max().map_or(1, |m| m.saturating_add(1));
            self.elans.insert(ns.to_string(), id);
            undo.push(UndoStep::Elan(ns.to_string()));
        }
    }

    /// Fills the emptied list of `kind` with the items of `upserts` (all of that kind), as
    /// putting them one by one would (a later item of a uid replaces an earlier one), but
    /// built from the sorted items at once instead of by thousands of inserts.
    fn fill(&mut self, kind: Kind, upserts: &[Effect], undo: &mut Vec<UndoStep>) {
        let items = || {
            upserts.iter().filter_map(|e| match e {
                Effect::Upsert(item) => Some(item),
                _ => None,
            })
        };
        // Items come grouped by namespace, mostly: look each run's up once.
        let mut last: Option<&str> = None;
        for ns in items().filter_map(Item::namespace).map(namespace_name) {
            if last != Some(ns) {
                self.elan(ns, undo);
                last = Some(ns);
            }
        }
        match kind {
            Kind::Service => {
                self.services = filled(items(), |i| match i {
                    Item::Service(s) => Some(Arc::clone(s)),
                    _ => None,
                });
            }
            Kind::Endpoints => {
                self.endpoints = filled(items(), |i| match i {
                    Item::Endpoints(e) => Some(Arc::clone(e)),
                    _ => None,
                });
            }
            Kind::Pod => {
                self.pods = filled(items(), |i| match i {
                    Item::Pod(p) => Some(p.clone()),
                    _ => None,
                });
            }
            Kind::Node => {
                self.nodes = filled(items(), |i| match i {
                    Item::Node(n) => Some(n.clone()),
                    _ => None,
                });
            }
        }
    }

    /// Inserts an item, returning the one it replaced.
    fn put(&mut self, item: Item) -> Option<Item> {
        let uid = item.uid().to_string();
        if self.index.built.contains(&item.kind())
            && let Some(old) = self.get(item.kind(), &uid)
        {
            self.index.item(&old, false);
        }
        self.index.item(&item, true);
        match item {
            Item::Service(s) => self.services.insert(uid, s).map(Item::Service),
            Item::Endpoints(e) => self.endpoints.insert(uid, e).map(Item::Endpoints),
            Item::Pod(p) => self.pods.insert(uid, p).map(Item::Pod),
            Item::Node(n) => self.nodes.insert(uid, n).map(Item::Node),
        }
    }

    /// Removes an item, returning it.
    fn take(&mut self, kind: Kind, uid: &str) -> Option<Item> {
        let old = match kind {
            Kind::Service => self.services.remove(uid).map(Item::Service),
            Kind::Endpoints => self.endpoints.remove(uid).map(Item::Endpoints),
            Kind::Pod => self.pods.remove(uid).map(Item::Pod),
            Kind::Node => self.nodes.remove(uid).map(Item::Node),
        };
        if let Some(old) = &old {
            self.index.item(old, false);
        }
        old
    }

    /// Whether an item exists.
    pub fn contains(&self, kind: Kind, uid: &str) -> bool {
        match kind {
            Kind::Service => self.services.contains_key(uid),
            Kind::Endpoints => self.endpoints.contains_key(uid),
            Kind::Pod => self.pods.contains_key(uid),
            Kind::Node => self.nodes.contains_key(uid),
        }
    }

    /// Whether the store holds `item` exactly as it is (same uid, same content).
    pub fn holds(&self, item: &Item) -> bool {
        match item {
            Item::Service(s) => self.services.get(&s.uid).is_some_and(|x| x == s),
            Item::Endpoints(e) => self.endpoints.get(&e.uid).is_some_and(|x| x == e),
            Item::Pod(p) => self.pods.get(&p.uid).is_some_and(|x| x == p),
            Item::Node(n) => self.nodes.get(&n.uid).is_some_and(|x| x == n),
        }
    }

    /// One item.
    pub fn get(&self, kind: Kind, uid: &str) -> Option<Item> {
        match kind {
            Kind::Service => self.services.get(uid).map(|s| Item::Service(Arc::clone(s))),
            Kind::Endpoints => self
                .endpoints
                .get(uid)
                .map(|e| Item::Endpoints(Arc::clone(e))),
            Kind::Pod => self.pods.get(uid).cloned().map(Item::Pod),
            Kind::Node => self.nodes.get(uid).cloned().map(Item::Node),
        }
    }

    /// A container as `GET` on it answers, without its name: `{"services": [...]}`.
    pub fn container_json(&self, kind: Kind) -> serde_json::Value {
        let items: Vec<serde_json::Value> = self.list(kind).iter().map(Item::to_json).collect();
        serde_json::json!({ kind.list(): items })
    }

    /// The whole datastore as `GET /restconf/config` answers it: every container by its
    /// qualified name.
    pub fn datastore_json(&self) -> serde_json::Map<String, serde_json::Value> {
        Kind::ALL
            .into_iter()
            .map(|kind| (kind.qualified_container(), self.container_json(kind)))
            .collect()
    }

    /// Every item of a kind, by uid.
    pub fn list(&self, kind: Kind) -> Vec<Item> {
        match kind {
            Kind::Service => self
                .services
                .values()
                .map(|s| Item::Service(Arc::clone(s)))
                .collect(),
            Kind::Endpoints => self
                .endpoints
                .values()
                .map(|e| Item::Endpoints(Arc::clone(e)))
                .collect(),
            Kind::Pod => self.pods.values().cloned().map(Item::Pod).collect(),
            Kind::Node => self.nodes.values().cloned().map(Item::Node).collect(),
        }
    }

    /// Validates the whole store. Items in `touched` are visited last, so that a clash
    /// between an old and a new item is reported on the new one.
    pub fn check(&self, rules: &Rules, touched: &Touched) -> Result<(), RequestError> {
        self.check_in(rules, touched, &Scope::All)
    }

    /// Which items can clash with the touched ones. Every rule is about one item or a pair,
    /// and the store was valid before the change, so a clash needs a touched item and one
    /// sharing an address, node port, name or interface with it; checking just those gives
    /// the verdict of a full check, in time that does not grow with the store's size.
    ///
    /// No rule relates items of two kinds, so a change of many items (a container PUT) checks
    /// every item of the kinds it writes, and none of the others.
    ///
    /// Only a small change reads the index, so only it builds the index when a whole-list
    /// change left it unbuilt; built after the change's effects, it describes the store with
    /// the change, as keeping it up to date would have (see [`Store::build_index`]).
    fn scope(&mut self, touched: &Touched) -> Scope {
        // A list replaced whole holds only written items, which are checked against each
        // other; rules are about pairs of one kind, so no other kind needs a look.
        if touched.len() > SCOPED_CHECK_LIMIT || !touched.whole.is_empty() {
            return Scope::Kinds(touched.kinds());
        }
        self.build_index();
        // The touched items themselves, whatever they share.
        let mut keep: BTreeMap<Kind, BTreeSet<String>> = touched
            .some
            .iter()
            .map(|(kind, uids)| (*kind, uids.iter().cloned().collect()))
            .collect();
        let uids = |kind: Kind| touched.some.get(&kind).into_iter().flatten();

        let index = &self.index;
        let set = keep.entry(Kind::Service).or_default();
        for s in uids(Kind::Service).filter_map(|u| self.services.get(u)) {
            for vip in s.vips() {
                set.extend(index.vips.get(&vip).into_iter().flatten().cloned());
            }
            for np in s.claimed_node_ports() {
                set.extend(index.node_ports.get(&np).into_iter().flatten().cloned());
            }
            let (ns, name) = service_name(s);
            set.extend(
                index
                    .service_names
                    .get(&name_key(ns, name))
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
        let set = keep.entry(Kind::Endpoints).or_default();
        for e in uids(Kind::Endpoints).filter_map(|u| self.endpoints.get(u)) {
            let name = name_key(namespace_name(&e.network_ns), &e.name);
            set.extend(
                index
                    .endpoints_names
                    .get(&name)
                    .into_iter()
                    .flatten()
                    .cloned(),
            );
        }
        let set = keep.entry(Kind::Pod).or_default();
        for p in uids(Kind::Pod).filter_map(|u| self.pods.get(u)) {
            for iface in &p.interface {
                set.extend(index.ifaces.get(&iface.uid).into_iter().flatten().cloned());
            }
        }
        let set = keep.entry(Kind::Node).or_default();
        for n in uids(Kind::Node).filter_map(|u| self.nodes.get(u)) {
            let name = n.model_name();
            set.extend(index.node_names.get(name).into_iter().flatten().cloned());
        }
        Scope::Some(keep)
    }

    fn check_in(
        &self,
        rules: &Rules,
        touched: &Touched,
        scope: &Scope,
    ) -> Result<(), RequestError> {
        let services = ordered(&self.services, Kind::Service, touched, scope);
        // Names and addresses are checked apart (beside each other for a container PUT's
        // thousands); the error given is the one the first failing service in order has,
        // its name's before its addresses', as when one loop checks both.
        let names = || {
            let mut names = map_for(services.len());
            for (i, (uid, s)) in services.iter().enumerate() {
                let at = || format!("{}.name", Kind::Service.item_name(uid));
                unique(&mut names, service_name(s), uid, at, "service").map_err(|e| (i, e))?;
            }
            Ok(())
        };
        let addresses = || {
            let mut vips = VipTable::with_room(services.len());
            for (i, (uid, s)) in services.iter().enumerate() {
                let at = || Kind::Service.item_name(uid);
                vips.add(s, rules, &at).map_err(|e| (i, e))?;
            }
            Ok(())
        };
        let (names, addresses): (FirstFailure, FirstFailure) =
            if services.len() >= crate::par::WORTH_A_THREAD {
                crate::par::join(names, addresses)
            } else {
                (names(), addresses())
            };
        match (names, addresses) {
            (Err((i, e)), Err((j, _))) if i <= j => return Err(e),
            (_, Err((_, e))) | (Err((_, e)), Ok(())) => return Err(e),
            (Ok(()), Ok(())) => {}
        }

        let endpoints = ordered(&self.endpoints, Kind::Endpoints, touched, scope);
        let mut names = map_for(endpoints.len());
        for (uid, e) in endpoints {
            let at = || format!("{}.name", Kind::Endpoints.item_name(uid));
            if e.name.is_empty() {
                return Err(RequestError::invalid(
                    at(),
                    "required: the name of its service",
                ));
            }
            let key = (namespace_name(&e.network_ns), e.name.as_str());
            unique(&mut names, key, uid, at, "endpoints object")?;
        }

        let mut ifaces: HashMap<&str, &str> = HashMap::default();
        for (uid, p) in ordered(&self.pods, Kind::Pod, touched, scope) {
            for (i, iface) in p.interface.iter().enumerate() {
                if let Some(other) = ifaces.insert(&iface.uid, uid) {
                    if other != uid {
                        return Err(RequestError::invalid(
                            format!("{}.interface[{i}].uid", Kind::Pod.item_name(uid)),
                            format!("interface `{}` already belongs to pod {other}", iface.uid),
                        ));
                    }
                }
            }
        }

        let mut names = HashMap::default();
        for (uid, n) in ordered(&self.nodes, Kind::Node, touched, scope) {
            let at = || format!("{}.host-name", Kind::Node.item_name(uid));
            unique(&mut names, ("", n.model_name()), uid, at, "node")?;
        }
        Ok(())
    }
}

/// Above this many touched items, a change is checked against the whole store.
const SCOPED_CHECK_LIMIT: usize = 64;

/// The items a check looks at.
enum Scope {
    /// Everything.
    All,
    /// Every item of these kinds (a kind not listed: none).
    Kinds(BTreeSet<Kind>),
    /// These uids of each kind (a kind not listed: none).
    Some(BTreeMap<Kind, BTreeSet<String>>),
}

/// A service's namespace and name (its uid when it has no name).
fn service_name(s: &Service) -> (&str, &str) {
    let name = if s.name.is_empty() { &s.uid } else { &s.name };
    (namespace_name(&s.network_ns), name.as_str())
}

/// The entries of `map` in `scope`, those not in `touched` first.
fn ordered<'a, T>(
    map: &'a BTreeMap<String, T>,
    kind: Kind,
    touched: &Touched,
    scope: &'a Scope,
) -> Vec<(&'a str, &'a T)> {
    let entries: Vec<(&'a str, &'a T)> = match scope {
        Scope::All => map.iter().map(|(u, v)| (u.as_str(), v)).collect(),
        Scope::Kinds(kinds) if kinds.contains(&kind) => {
            map.iter().map(|(u, v)| (u.as_str(), v)).collect()
        }
        Scope::Kinds(_) => Vec::new(),
        Scope::Some(keep) => keep
            .get(&kind)
            .into_iter()
            .flatten()
            .filter_map(|u| map.get_key_value(u))
            .map(|(u, v)| (u.as_str(), v))
            .collect(),
    };
    let (new, mut old): (Vec<_>, Vec<_>) = entries
        .into_iter()
        .partition(|(u, _)| touched.contains(kind, u));
    old.extend(new);
    old
}

/// Records `key` for `uid`, failing if another uid holds it.
fn unique<'a>(
    seen: &mut HashMap<(&'a str, &'a str), &'a str>,
    key: (&'a str, &'a str),
    uid: &'a str,
    path: impl FnOnce() -> String,
    what: &str,
) -> Result<(), RequestError> {
    if let Some(other) = seen.insert(key, uid) {
        if other != uid {
            let (ns, name) = key;
            let name = if ns.is_empty() {
                name.to_string()
            } else {
                format!("{ns}/{name}")
            };
            return Err(RequestError::invalid(
                path(),
                format!("{what} `{name}` already exists with uid {other}"),
            ));
        }
    }
    Ok(())
}

/// The effects of replacing `kind`'s list with `items`: empty it, then write each.
fn replace(
    kind: Kind,
    items: Vec<Item>,
    effects: &mut Vec<Effect>,
    touched: &mut Touched,
) -> Result<(), RequestError> {
    no_repeats(kind, &items)?;
    touched.replace_all(kind);
    effects.reserve(items.len() + 1);
    effects.push(Effect::Clear(kind));
    for item in items {
        check_kind(kind, &item)?;
        effects.push(Effect::Upsert(item));
    }
    Ok(())
}

fn no_repeats(kind: Kind, items: &[Item]) -> Result<(), RequestError> {
    let mut seen: HashSet<&str> = set_for(items.len());
    for item in items {
        if !seen.insert(item.uid()) {
            return Err(RequestError::invalid(
                format!("{}.uid", kind.item_name(item.uid())),
                "key given more than once in the request",
            ));
        }
    }
    Ok(())
}

fn check_kind(kind: Kind, item: &Item) -> Result<(), RequestError> {
    if item.kind() == kind {
        Ok(())
    } else {
        Err(RequestError::malformed(format!(
            "a {:?} item sent to {}",
            item.kind(),
            kind.qualified_container()
        )))
    }
}

/// A list by uid of what `pick` takes from `items` (a later item of a uid wins).
fn filled<'a, T>(
    items: impl Iterator<Item = &'a Item>,
    pick: impl Fn(&'a Item) -> Option<T>,
) -> BTreeMap<String, T> {
    items
        .filter_map(|i| Some((i.uid().to_string(), pick(i)?)))
        .collect()
}

/// A check of items in order: the index of the first that fails, and why.
type FirstFailure = Result<(), (usize, RequestError)>;

/// Up to this many ports, a service's repeated port is found by a scan of the ports before
/// it; beyond, with a set (a hostile service of thousands of ports stays linear).
const OWN_PORTS_SCANNED: usize = 16;

/// Who answers on each VIP and node port.
#[derive(Default)]
struct VipTable<'a> {
    /// (VIP, protocol, port) → owning service uid.
    ports: HashMap<(IpAddr, Protocol, u16), &'a str>,
    /// VIP → a service that forwards every port on it.
    wildcard: HashMap<IpAddr, &'a str>,
    /// VIP → any service using it.
    users: HashMap<IpAddr, &'a str>,
    /// (protocol, node port) → owning service uid.
    node_ports: HashMap<(Protocol, u16), &'a str>,
}

impl<'a> VipTable<'a> {
    /// An empty table with room for `services` services of one port and address each.
    fn with_room(services: usize) -> Self {
        VipTable {
            ports: map_for(services),
            wildcard: HashMap::default(),
            users: map_for(services),
            node_ports: HashMap::default(),
        }
    }

    /// Adds service `s`, named in errors by `at` (made only for an error).
    fn add(
        &mut self,
        s: &'a Service,
        rules: &Rules,
        at: &dyn Fn() -> String,
    ) -> Result<(), RequestError> {
        if let Some(hc) = s.health_check_node_port {
            let hc_at = || format!("{}.health-check-node-port", at());
            self.claim_node_port(s, rules, (Protocol::Tcp, hc), &hc_at)?;
        }
        let vips = s.vips();
        if s.service_ports.is_empty() {
            for vip in &vips {
                if let Some(other) = self.users.get(vip).filter(|o| **o != s.uid.as_str()) {
                    return Err(RequestError::invalid(
                        format!("{}.service-ports", at()),
                        format!(
                            "this service forwards every port of {vip}, which service {other} also uses"
                        ),
                    ));
                }
                self.wildcard.insert(*vip, s.uid.as_str());
                self.users.insert(*vip, s.uid.as_str());
            }
            return Ok(());
        }
        // A service has a few ports: a scan finds a repeat with no set to allocate.
        let mut own = (s.service_ports.len() > OWN_PORTS_SCANNED).then(BTreeSet::new);
        for (i, p) in s.service_ports.iter().enumerate() {
            let port_at = || format!("{}.service-ports[{i}]", at());
            let repeated = match &mut own {
                Some(own) => !own.insert((p.protocol, p.port)),
                None => s.service_ports[..i]
                    .iter()
                    .any(|q| (q.protocol, q.port) == (p.protocol, p.port)),
            };
            if repeated {
                return Err(RequestError::invalid(
                    format!("{}.port", port_at()),
                    format!(
                        "port {}/{} is given twice in this service",
                        p.port,
                        p.protocol.as_str()
                    ),
                ));
            }
            for vip in &vips {
                if let Some(other) = self.wildcard.get(vip).filter(|o| **o != s.uid.as_str()) {
                    return Err(RequestError::invalid(
                        format!("{}.port", port_at()),
                        format!("service {other} already forwards every port of {vip}"),
                    ));
                }
                let vip_port = || match vip {
                    IpAddr::V4(v4) => format!("{v4}:{}", p.port),
                    IpAddr::V6(v6) => format!("[{v6}]:{}", p.port),
                };
                if let Some(other) = self
                    .ports
                    .insert((*vip, p.protocol, p.port), s.uid.as_str())
                {
                    if other != s.uid {
                        return Err(RequestError::invalid(
                            format!("{}.port", port_at()),
                            format!(
                                "VIP {}/{} is already used by service {other}",
                                vip_port(),
                                p.protocol.as_str()
                            ),
                        ));
                    }
                }
                self.users.insert(*vip, s.uid.as_str());
            }
            if let Some(np) = p.node_port {
                let np_at = || format!("{}.node-port", port_at());
                self.claim_node_port(s, rules, (p.protocol, np), &np_at)?;
            }
        }
        Ok(())
    }

    /// Claims node port `np` of `protocol` for `s`, named in errors by `at`: it must be in
    /// the configured range and claimed by no other service, nor already by `s` (a node port
    /// given on two of its ports of one protocol, or its health-check node port on one of its
    /// TCP ports, would make two flows for one port on every node, as the API server's
    /// allocator refuses it). Each service is added to a table once.
    fn claim_node_port(
        &mut self,
        s: &'a Service,
        rules: &Rules,
        (protocol, np): (Protocol, u16),
        at: &dyn Fn() -> String,
    ) -> Result<(), RequestError> {
        if !rules.node_port_range.contains(&np) {
            return Err(RequestError::invalid(
                at(),
                format!(
                    "node port {np} is outside the configured range {}-{}",
                    rules.node_port_range.start(),
                    rules.node_port_range.end()
                ),
            ));
        }
        match self.node_ports.insert((protocol, np), s.uid.as_str()) {
            Some(other) if other == s.uid => Err(RequestError::invalid(
                at(),
                format!(
                    "node port {np}/{} is given twice in this service (on two of its ports, \
                     or as a port's node port and its health-check node port)",
                    protocol.as_str()
                ),
            )),
            Some(other) => Err(RequestError::invalid(
                at(),
                format!(
                    "node port {np}/{} is already used by service {other}",
                    protocol.as_str()
                ),
            )),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::parse;

    fn pod(uid: &str, ns: &str) -> Item {
        let body = serde_json::json!({ "pods": [ { "uid": uid, "network-NS": ns } ] });
        parse::item_body(Kind::Pod, uid, body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn elan_ids_are_stable_and_never_reused() {
        let rules = Rules::default();
        let mut s = Store::default();
        s.apply(Change::Upsert(pod("a", "")), &rules).unwrap();
        s.apply(Change::Upsert(pod("b", "prod")), &rules).unwrap();
        assert_eq!(s.elans["default"], 1);
        assert_eq!(s.elans["prod"], 2);
        s.apply(Change::Clear(Kind::Pod), &rules).unwrap();
        s.apply(Change::Upsert(pod("c", "dev")), &rules).unwrap();
        assert_eq!((s.elans["prod"], s.elans["dev"]), (2, 3));
    }

    #[test]
    fn a_list_filled_at_once_is_what_putting_its_items_one_by_one_makes() {
        let effects = vec![
            Effect::Upsert(pod("a", "x")),
            Effect::Clear(Kind::Pod),
            Effect::Upsert(pod("b", "y")),
            Effect::Upsert(pod("c", "")),
            // A uid given twice (a log written by hand): the later one wins, as with puts.
            Effect::Upsert(pod("b", "z")),
            Effect::Upsert(pod("e", "y")),
            Effect::Remove(Kind::Pod, "c".into()),
            Effect::Upsert(pod("d", "w")),
        ];
        let mut one_by_one = Store::default();
        for effect in &effects {
            // Alone, a clear is followed by no upsert and each upsert is put by itself.
            one_by_one.apply_effects(std::slice::from_ref(effect));
        }
        let mut at_once = Store::default();
        let undo = at_once.apply_effects_undoable(&effects);
        assert_eq!(at_once, one_by_one);
        assert_eq!(at_once.elans, one_by_one.elans);
        assert_eq!(at_once.pods.keys().collect::<Vec<_>>(), ["b", "d", "e"]);
        assert_eq!(at_once.pods["b"].network_ns, "z");
        at_once.revert(undo);
        assert_eq!(at_once, Store::default());
        assert!(at_once.elans.is_empty());
    }

    #[test]
    fn a_container_put_leaves_the_other_kinds_index_built() {
        let rules = Rules::default();
        let mut s = Store::default();
        assert!(s.needs_index(), "a new or loaded store has no index");
        s.apply(Change::Upsert(pod("a", "x")), &rules).unwrap();
        assert!(!s.needs_index(), "a small write builds it");
        s.apply(Change::Replace(Kind::Pod, vec![pod("b", "y")]), &rules)
            .unwrap();
        assert!(s.needs_index());
        assert_eq!(s.index.built.len(), Kind::ALL.len() - 1);
        assert!(!s.index.built.contains(&Kind::Pod));
        s.build_index();
        assert!(!s.needs_index());
    }

    #[test]
    fn effects_replay_to_the_same_store() {
        let rules = Rules::default();
        let mut replayed = Store::default();
        let mut live = Store::default();
        for change in [
            Change::Upsert(pod("a", "x")),
            Change::Replace(Kind::Pod, vec![pod("b", "y"), pod("c", "")]),
            Change::Delete(Kind::Pod, "b".into()),
            Change::Create(Kind::Pod, vec![pod("d", "x")]),
        ] {
            let before = live.clone();
            let applied = live.apply(change, &rules).unwrap();
            replayed.apply_effects(&applied.effects);
            assert_eq!(replayed, live);
            // Undo restores the store exactly, ELAN ids included.
            let mut reverted = live.clone();
            reverted.revert(applied.undo);
            assert_eq!(reverted, before);
        }
        assert!(
            live.apply(Change::Delete(Kind::Pod, "b".into()), &rules)
                .is_err()
        );
        assert!(
            live.apply(Change::Create(Kind::Pod, vec![pod("c", "")]), &rules)
                .is_err()
        );
    }
}
