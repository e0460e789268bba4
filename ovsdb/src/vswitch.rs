//! Typed Open_vSwitch rows (Open_vSwitch, Bridge, Port, Interface, Controller, Manager) and
//! idempotent helpers that turn a desired state plus a [`Replica`] into the smallest
//! transaction (often none). See vswitchd/vswitch.xml for the column meanings.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::client::{Client, ClientConfig, Error, Events, ReplicaHandle};
use crate::datum::{Datum, Row, Uuid};
use crate::monitor::MonitorRequest;
use crate::ops::{Condition, Mutation, Operation};
use crate::replica::Replica;

/// The database name.
pub const DB: &str = "Open_vSwitch";

fn smap(r: &Row, c: &str) -> BTreeMap<String, String> {
    r.get(c).map(Datum::string_map).unwrap_or_default()
}
fn string(r: &Row, c: &str) -> Option<String> {
    r.get(c).and_then(Datum::as_str).map(str::to_owned)
}
fn integer(r: &Row, c: &str) -> Option<i64> {
    r.get(c).and_then(Datum::as_integer)
}
fn uuids(r: &Row, c: &str) -> Vec<Uuid> {
    r.get(c).map(Datum::uuids).unwrap_or_default()
}
fn strings(r: &Row, c: &str) -> Vec<String> {
    r.get(c).map(Datum::strings).unwrap_or_default()
}

/// The root row.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenVSwitch {
    pub uuid: Uuid,
    pub bridges: Vec<Uuid>,
    pub manager_options: Vec<Uuid>,
    pub external_ids: BTreeMap<String, String>,
    pub other_config: BTreeMap<String, String>,
    pub ovs_version: Option<String>,
    pub cur_cfg: i64,
    pub next_cfg: i64,
}

/// A Bridge row.
#[derive(Debug, Clone, PartialEq)]
pub struct Bridge {
    pub uuid: Uuid,
    pub name: String,
    pub datapath_type: String,
    pub datapath_id: Option<String>,
    pub fail_mode: Option<String>,
    pub protocols: Vec<String>,
    pub other_config: BTreeMap<String, String>,
    pub external_ids: BTreeMap<String, String>,
    pub ports: Vec<Uuid>,
    pub controllers: Vec<Uuid>,
}

/// A Port row.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub uuid: Uuid,
    pub name: String,
    pub interfaces: Vec<Uuid>,
    pub external_ids: BTreeMap<String, String>,
    pub tag: Option<i64>,
}

/// An Interface row.
#[derive(Debug, Clone, PartialEq)]
pub struct Interface {
    pub uuid: Uuid,
    pub name: String,
    pub kind: String,
    pub options: BTreeMap<String, String>,
    pub ofport: Option<i64>,
    pub ofport_request: Option<i64>,
    pub external_ids: BTreeMap<String, String>,
    pub error: Option<String>,
    /// The MAC requested for the interface (`mac` column), if any.
    pub mac: Option<String>,
    /// The MAC the interface actually has (`mac_in_use`), once ovs-vswitchd has set it.
    pub mac_in_use: Option<String>,
}

/// A Controller row.
#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    pub uuid: Uuid,
    pub target: String,
    pub connection_mode: Option<String>,
    /// Packet-ins per second the switch sends this controller (`controller_rate_limit`).
    pub rate_limit: Option<i64>,
    /// Packet-ins it may send in a burst above the rate (`controller_burst_limit`).
    pub burst_limit: Option<i64>,
    /// The longest the switch waits between attempts to connect, in milliseconds
    /// (`max_backoff`; unset: OVS's 8 s).
    pub max_backoff: Option<i64>,
    pub is_connected: bool,
    pub external_ids: BTreeMap<String, String>,
    /// What ovs-vswitchd reports: `state`, `sec_since_connect`, `sec_since_disconnect`, …
    pub status: BTreeMap<String, String>,
}

/// A Manager row.
#[derive(Debug, Clone, PartialEq)]
pub struct Manager {
    pub uuid: Uuid,
    pub target: String,
    pub is_connected: bool,
}

impl OpenVSwitch {
    pub fn from_row(uuid: Uuid, r: &Row) -> Self {
        OpenVSwitch {
            uuid,
            bridges: uuids(r, "bridges"),
            manager_options: uuids(r, "manager_options"),
            external_ids: smap(r, "external_ids"),
            other_config: smap(r, "other_config"),
            ovs_version: string(r, "ovs_version"),
            cur_cfg: integer(r, "cur_cfg").unwrap_or(0),
            next_cfg: integer(r, "next_cfg").unwrap_or(0),
        }
    }
}
impl Bridge {
    pub fn from_row(uuid: Uuid, r: &Row) -> Self {
        Bridge {
            uuid,
            name: string(r, "name").unwrap_or_default(),
            datapath_type: string(r, "datapath_type").unwrap_or_default(),
            datapath_id: string(r, "datapath_id"),
            fail_mode: string(r, "fail_mode"),
            protocols: strings(r, "protocols"),
            other_config: smap(r, "other_config"),
            external_ids: smap(r, "external_ids"),
            ports: uuids(r, "ports"),
            controllers: uuids(r, "controller"),
        }
    }
}
impl Port {
    pub fn from_row(uuid: Uuid, r: &Row) -> Self {
        Port {
            uuid,
            name: string(r, "name").unwrap_or_default(),
            interfaces: uuids(r, "interfaces"),
            external_ids: smap(r, "external_ids"),
            tag: integer(r, "tag"),
        }
    }
}
impl Interface {
    pub fn from_row(uuid: Uuid, r: &Row) -> Self {
        Interface {
            uuid,
            name: string(r, "name").unwrap_or_default(),
            kind: string(r, "type").unwrap_or_default(),
            options: smap(r, "options"),
            ofport: integer(r, "ofport"),
            ofport_request: integer(r, "ofport_request"),
            external_ids: smap(r, "external_ids"),
            error: string(r, "error"),
            mac: string(r, "mac"),
            mac_in_use: string(r, "mac_in_use"),
        }
    }
}
impl Controller {
    pub fn from_row(uuid: Uuid, r: &Row) -> Self {
        Controller {
            uuid,
            target: string(r, "target").unwrap_or_default(),
            connection_mode: string(r, "connection_mode"),
            rate_limit: r.get("controller_rate_limit").and_then(Datum::as_integer),
            burst_limit: r.get("controller_burst_limit").and_then(Datum::as_integer),
            max_backoff: r.get("max_backoff").and_then(Datum::as_integer),
            is_connected: r
                .get("is_connected")
                .and_then(Datum::as_bool)
                .unwrap_or(false),
            external_ids: smap(r, "external_ids"),
            status: smap(r, "status"),
        }
    }
}
impl Manager {
    pub fn from_row(uuid: Uuid, r: &Row) -> Self {
        Manager {
            uuid,
            target: string(r, "target").unwrap_or_default(),
            is_connected: r
                .get("is_connected")
                .and_then(Datum::as_bool)
                .unwrap_or(false),
        }
    }
}

/// Typed queries on a replica of the Open_vSwitch database.
pub trait VSwitchQuery {
    fn open_vswitch(&self) -> Option<OpenVSwitch>;
    fn bridges(&self) -> Vec<Bridge>;
    fn bridge(&self, name: &str) -> Option<Bridge>;
    fn port(&self, name: &str) -> Option<Port>;
    fn interface(&self, name: &str) -> Option<Interface>;
    fn controllers(&self) -> Vec<Controller>;
    fn managers(&self) -> Vec<Manager>;
    /// The ports of a bridge, by name.
    fn bridge_ports(&self, bridge: &str) -> Vec<Port>;
    /// The bridge a port belongs to.
    fn port_bridge(&self, port: Uuid) -> Option<Bridge>;
}

impl VSwitchQuery for Replica {
    fn open_vswitch(&self) -> Option<OpenVSwitch> {
        self.table("Open_vSwitch")
            .next()
            .map(|(u, r)| OpenVSwitch::from_row(*u, r))
    }
    fn bridges(&self) -> Vec<Bridge> {
        self.table("Bridge")
            .map(|(u, r)| Bridge::from_row(*u, r))
            .collect()
    }
    fn bridge(&self, name: &str) -> Option<Bridge> {
        self.row_by_name("Bridge", name)
            .map(|(u, r)| Bridge::from_row(u, r))
    }
    fn port(&self, name: &str) -> Option<Port> {
        self.row_by_name("Port", name)
            .map(|(u, r)| Port::from_row(u, r))
    }
    fn interface(&self, name: &str) -> Option<Interface> {
        self.row_by_name("Interface", name)
            .map(|(u, r)| Interface::from_row(u, r))
    }
    fn controllers(&self) -> Vec<Controller> {
        self.table("Controller")
            .map(|(u, r)| Controller::from_row(*u, r))
            .collect()
    }
    fn managers(&self) -> Vec<Manager> {
        self.table("Manager")
            .map(|(u, r)| Manager::from_row(*u, r))
            .collect()
    }
    fn bridge_ports(&self, bridge: &str) -> Vec<Port> {
        let Some(b) = self.bridge(bridge) else {
            return vec![];
        };
        b.ports
            .iter()
            .filter_map(|u| self.row("Port", u).map(|r| Port::from_row(*u, r)))
            .collect()
    }
    fn port_bridge(&self, port: Uuid) -> Option<Bridge> {
        self.bridges().into_iter().find(|b| b.ports.contains(&port))
    }
}

/// The monitor requests a vswitch replica uses: the six tables, without fast-changing
/// statistics columns.
pub fn monitor_requests() -> BTreeMap<String, MonitorRequest> {
    let t = |cols: &[&str]| MonitorRequest::columns(cols);
    [
        (
            "Open_vSwitch",
            t(&[
                "bridges",
                "manager_options",
                "external_ids",
                "other_config",
                "ovs_version",
                "cur_cfg",
                "next_cfg",
            ]),
        ),
        (
            "Bridge",
            t(&[
                "name",
                "datapath_type",
                "datapath_id",
                "fail_mode",
                "protocols",
                "other_config",
                "external_ids",
                "ports",
                "controller",
            ]),
        ),
        ("Port", t(&["name", "interfaces", "external_ids", "tag"])),
        (
            "Interface",
            t(&[
                "name",
                "type",
                "options",
                "ofport",
                "ofport_request",
                "external_ids",
                "error",
                "mac",
                "mac_in_use",
            ]),
        ),
        (
            "Controller",
            t(&[
                "target",
                "connection_mode",
                "controller_rate_limit",
                "controller_burst_limit",
                "max_backoff",
                "is_connected",
                "external_ids",
                "status",
            ]),
        ),
        ("Manager", t(&["target", "is_connected"])),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Bridge `fail_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    Standalone,
    Secure,
}

impl FailMode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailMode::Standalone => "standalone",
            FailMode::Secure => "secure",
        }
    }
}

/// The desired state of a bridge. `None`/empty fields are left as they are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BridgeSpec {
    pub name: String,
    /// e.g. `netdev` (userspace) or `system`.
    pub datapath_type: Option<String>,
    pub fail_mode: Option<FailMode>,
    /// e.g. `["OpenFlow13"]`.
    pub protocols: Vec<String>,
    /// 16 hex digits, written to `other_config:datapath-id`.
    pub datapath_id: Option<String>,
    /// Keys to set in `other_config` (others are kept).
    pub other_config: BTreeMap<String, String>,
    /// Keys to set in `external_ids` (others are kept).
    pub external_ids: BTreeMap<String, String>,
}

impl BridgeSpec {
    pub fn new(name: &str) -> Self {
        BridgeSpec {
            name: name.to_owned(),
            ..Default::default()
        }
    }
    fn other_config(&self) -> BTreeMap<String, String> {
        let mut m = self.other_config.clone();
        if let Some(d) = &self.datapath_id {
            m.insert("datapath-id".into(), d.clone());
        }
        m
    }
}

fn datum_smap(m: &BTreeMap<String, String>) -> Datum {
    Datum::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// Mutations that make the given keys of a map column equal `want` (keeping other keys).
/// Map `insert` never overwrites, so changed keys are deleted first (RFC 7047 §5.1).
fn merge_map(
    column: &str,
    have: &BTreeMap<String, String>,
    want: &BTreeMap<String, String>,
) -> Vec<Mutation> {
    let changed: BTreeMap<String, String> = want
        .iter()
        .filter(|(k, v)| have.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if changed.is_empty() {
        return vec![];
    }
    let stale: Vec<&str> = changed
        .keys()
        .filter(|k| have.contains_key(*k))
        .map(String::as_str)
        .collect();
    let mut m = vec![];
    if !stale.is_empty() {
        m.push(Mutation::delete(column, Datum::set(stale)));
    }
    m.push(Mutation::insert(column, datum_smap(&changed)));
    m
}

fn row(pairs: Vec<(&str, Datum)>) -> Row {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Operations that make bridge `spec.name` exist with the given settings (empty if it already
/// does). A new bridge gets its local internal port, as `ovs-vsctl add-br` does.
pub fn ensure_bridge_ops(r: &Replica, spec: &BridgeSpec) -> Vec<Operation> {
    let other = spec.other_config();
    let Some(b) = r.bridge(&spec.name) else {
        let mut br = row(vec![
            ("name", Datum::string(&spec.name)),
            ("ports", Datum::named_uuid("localport")),
            ("other_config", datum_smap(&other)),
            ("external_ids", datum_smap(&spec.external_ids)),
            (
                "protocols",
                Datum::set(spec.protocols.iter().map(String::as_str)),
            ),
        ]);
        if let Some(d) = &spec.datapath_type {
            br.insert("datapath_type".into(), Datum::string(d));
        }
        if let Some(f) = spec.fail_mode {
            br.insert("fail_mode".into(), Datum::string(f.as_str()));
        }
        return vec![
            Operation::insert_named(
                "Interface",
                row(vec![
                    ("name", Datum::string(&spec.name)),
                    ("type", Datum::string("internal")),
                ]),
                "localif",
            ),
            Operation::insert_named(
                "Port",
                row(vec![
                    ("name", Datum::string(&spec.name)),
                    ("interfaces", Datum::named_uuid("localif")),
                ]),
                "localport",
            ),
            Operation::insert_named("Bridge", br, "bridge"),
            Operation::mutate(
                "Open_vSwitch",
                vec![],
                vec![Mutation::insert("bridges", Datum::named_uuid("bridge"))],
            ),
        ];
    };
    let mut upd = Row::new();
    if let Some(d) = &spec.datapath_type {
        if &b.datapath_type != d {
            upd.insert("datapath_type".into(), Datum::string(d));
        }
    }
    if let Some(f) = spec.fail_mode {
        if b.fail_mode.as_deref() != Some(f.as_str()) {
            upd.insert("fail_mode".into(), Datum::string(f.as_str()));
        }
    }
    if !spec.protocols.is_empty() {
        let mut have = b.protocols.clone();
        let mut want = spec.protocols.clone();
        have.sort();
        want.sort();
        want.dedup();
        if have != want {
            upd.insert(
                "protocols".into(),
                Datum::set(want.iter().map(String::as_str)),
            );
        }
    }
    let mut muts = merge_map("other_config", &b.other_config, &other);
    muts.extend(merge_map(
        "external_ids",
        &b.external_ids,
        &spec.external_ids,
    ));
    let cond = vec![Condition::uuid(b.uuid)];
    let mut ops = vec![];
    if !upd.is_empty() {
        ops.push(Operation::update("Bridge", cond.clone(), upd));
    }
    if !muts.is_empty() {
        ops.push(Operation::mutate("Bridge", cond, muts));
    }
    ops
}

/// A controller target, its `connection_mode` (`in-band` / `out-of-band`), and the limits on
/// the packet-ins the switch sends it (`controller_rate_limit`, at least 100 per second, and
/// `controller_burst_limit`, at least 25; none: unlimited).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ControllerSpec {
    pub target: String,
    pub connection_mode: Option<String>,
    pub rate_limit: Option<i64>,
    pub burst_limit: Option<i64>,
    /// `max_backoff`, in milliseconds (OVS takes whole seconds, at least 1).
    pub max_backoff: Option<i64>,
    /// The row's `external_ids` (all of them: others are removed).
    pub external_ids: BTreeMap<String, String>,
}

impl ControllerSpec {
    /// The columns this spec sets on a Controller row.
    fn columns(&self) -> Row {
        let opt_str = |v: &Option<String>| v.as_deref().map(Datum::string).unwrap_or_default();
        let opt_int = |v: Option<i64>| v.map(Datum::integer).unwrap_or_default();
        row(vec![
            ("connection_mode", opt_str(&self.connection_mode)),
            ("controller_rate_limit", opt_int(self.rate_limit)),
            ("controller_burst_limit", opt_int(self.burst_limit)),
            ("max_backoff", opt_int(self.max_backoff)),
            ("external_ids", datum_smap(&self.external_ids)),
        ])
    }

    /// Whether row `c` already has what this spec sets.
    fn matches(&self, c: &Controller) -> bool {
        (
            &c.connection_mode,
            c.rate_limit,
            c.burst_limit,
            c.max_backoff,
            &c.external_ids,
        ) == (
            &self.connection_mode,
            self.rate_limit,
            self.burst_limit,
            self.max_backoff,
            &self.external_ids,
        )
    }
}

/// Why a helper cannot build a transaction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HelperError {
    #[error("no bridge named {0}")]
    NoSuchBridge(String),
    #[error("port {port} is on bridge {bridge}")]
    PortOnOtherBridge { port: String, bridge: String },
    #[error("no {table} named {name}")]
    NoSuchRow { table: &'static str, name: String },
}

/// Bridge `bridge` and its controllers' rows.
fn bridge_controllers(r: &Replica, bridge: &str) -> Result<(Bridge, Vec<Controller>), HelperError> {
    let b = r
        .bridge(bridge)
        .ok_or_else(|| HelperError::NoSuchBridge(bridge.into()))?;
    let controllers = b
        .controllers
        .iter()
        .filter_map(|u| {
            r.row("Controller", u)
                .map(|row| Controller::from_row(*u, row))
        })
        .collect();
    Ok((b, controllers))
}

/// Operations that make bridge `bridge`'s controllers exactly `want` (empty if they are).
/// Targets kept from before keep their rows, so only changed targets reconnect.
pub fn set_controllers_ops(
    r: &Replica,
    bridge: &str,
    want: &[ControllerSpec],
) -> Result<Vec<Operation>, HelperError> {
    let (b, have) = bridge_controllers(r, bridge)?;
    let mut ops = vec![];
    let mut refs: Vec<crate::datum::Atom> = vec![];
    let mut changed = have.len() != want.len();
    for (i, w) in want.iter().enumerate() {
        match have.iter().find(|c| c.target == w.target) {
            Some(c) => {
                refs.push(crate::datum::Atom::Uuid(c.uuid));
                if !w.matches(c) {
                    ops.push(Operation::update(
                        "Controller",
                        vec![Condition::uuid(c.uuid)],
                        w.columns(),
                    ));
                }
            }
            None => {
                changed = true;
                let name = format!("ctl{i}");
                let mut cr = w.columns();
                cr.insert("target".into(), Datum::string(&w.target));
                ops.push(Operation::insert_named("Controller", cr, &name));
                refs.push(crate::datum::Atom::NamedUuid(name));
            }
        }
    }
    if changed {
        ops.push(Operation::update(
            "Bridge",
            vec![Condition::uuid(b.uuid)],
            row(vec![("controller", Datum::set(refs))]),
        ));
    }
    Ok(ops)
}

/// Operations that put `want` among the bridge's controllers, keeping every other controller
/// it has: what each of several controllers sharing a switch runs for itself. The reference is
/// added with a `mutate`, so two of them adding their own targets at once both land, and the
/// bridge never has an empty controller list on the way (setting the first controller, or
/// removing the last, makes OVS flush the flow table). Empty when `want` is there as asked.
pub fn add_controller_ops(
    r: &Replica,
    bridge: &str,
    want: &ControllerSpec,
) -> Result<Vec<Operation>, HelperError> {
    let (b, all) = bridge_controllers(r, bridge)?;
    let have = all.into_iter().find(|c| c.target == want.target);
    Ok(match have {
        Some(c) if want.matches(&c) => vec![],
        Some(c) => vec![Operation::update(
            "Controller",
            vec![Condition::uuid(c.uuid)],
            want.columns(),
        )],
        None => {
            let mut cr = want.columns();
            cr.insert("target".into(), Datum::string(&want.target));
            vec![
                Operation::insert_named("Controller", cr, "ctl"),
                Operation::mutate(
                    "Bridge",
                    vec![Condition::uuid(b.uuid)],
                    vec![Mutation::insert(
                        "controller",
                        Datum::set(vec![crate::datum::Atom::NamedUuid("ctl".into())]),
                    )],
                ),
            ]
        }
    })
}

/// Operations that take off the bridge the controllers `gone` picks, as one `mutate` that
/// deletes their references (the rows go with them, as OVS collects unreferenced rows); empty
/// if it picks none. It never takes the last controller (that would flush the flow table).
pub fn remove_controllers_ops(
    r: &Replica,
    bridge: &str,
    gone: impl Fn(&Controller) -> bool,
) -> Result<Vec<Operation>, HelperError> {
    let (b, all) = bridge_controllers(r, bridge)?;
    let drop: Vec<crate::datum::Atom> = all
        .iter()
        .filter(|c| gone(c))
        .map(|c| crate::datum::Atom::Uuid(c.uuid))
        .collect();
    if drop.is_empty() || drop.len() >= all.len() {
        return Ok(vec![]);
    }
    Ok(vec![Operation::mutate(
        "Bridge",
        vec![Condition::uuid(b.uuid)],
        vec![Mutation::delete("controller", Datum::set(drop))],
    )])
}

/// The type of an interface and its type-specific options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterfaceType {
    /// A port backed by an existing network device (`type` empty).
    System,
    /// A port OVS creates (a tap device on the userspace datapath).
    Internal,
    /// A patch port to `peer`.
    Patch { peer: String },
    /// A VXLAN tunnel (`options:remote_ip`, `options:key`, …).
    Vxlan {
        remote_ip: String,
        key: Option<String>,
    },
    /// A Geneve tunnel.
    Geneve {
        remote_ip: String,
        key: Option<String>,
    },
}

impl InterfaceType {
    pub fn type_name(&self) -> &'static str {
        match self {
            InterfaceType::System => "",
            InterfaceType::Internal => "internal",
            InterfaceType::Patch { .. } => "patch",
            InterfaceType::Vxlan { .. } => "vxlan",
            InterfaceType::Geneve { .. } => "geneve",
        }
    }
    fn options(&self) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        match self {
            InterfaceType::System | InterfaceType::Internal => {}
            InterfaceType::Patch { peer } => {
                m.insert("peer".into(), peer.clone());
            }
            InterfaceType::Vxlan { remote_ip, key } | InterfaceType::Geneve { remote_ip, key } => {
                m.insert("remote_ip".into(), remote_ip.clone());
                if let Some(k) = key {
                    m.insert("key".into(), k.clone());
                }
            }
        }
        m
    }
}

/// The desired state of a single-interface port.
#[derive(Debug, Clone, PartialEq)]
pub struct PortSpec {
    pub name: String,
    pub kind: InterfaceType,
    /// Extra interface options (merged over the type's own).
    pub options: BTreeMap<String, String>,
    pub ofport_request: Option<i64>,
    /// Keys to set in the Port's `external_ids`.
    pub port_external_ids: BTreeMap<String, String>,
    /// Keys to set in the Interface's `external_ids`.
    pub iface_external_ids: BTreeMap<String, String>,
    /// A fixed MAC for the interface (`mac` column; honoured for internal ports).
    pub mac: Option<String>,
}

impl PortSpec {
    pub fn new(name: &str, kind: InterfaceType) -> Self {
        PortSpec {
            name: name.to_owned(),
            kind,
            options: BTreeMap::new(),
            ofport_request: None,
            port_external_ids: BTreeMap::new(),
            iface_external_ids: BTreeMap::new(),
            mac: None,
        }
    }
    fn all_options(&self) -> BTreeMap<String, String> {
        let mut m = self.kind.options();
        m.extend(self.options.clone());
        m
    }
}

/// Operations that make port `spec.name` exist on `bridge` as specified (empty if it does).
/// `uuid_prefix` keeps named uuids unique when several specs share one transaction.
pub fn add_port_ops_named(
    r: &Replica,
    bridge: &str,
    spec: &PortSpec,
    uuid_prefix: &str,
) -> Result<Vec<Operation>, HelperError> {
    let b = r
        .bridge(bridge)
        .ok_or_else(|| HelperError::NoSuchBridge(bridge.into()))?;
    let options = spec.all_options();
    let Some(p) = r.port(&spec.name) else {
        let (ifn, pn) = (format!("{uuid_prefix}if"), format!("{uuid_prefix}port"));
        let mut ir = row(vec![
            ("name", Datum::string(&spec.name)),
            ("type", Datum::string(spec.kind.type_name())),
            ("options", datum_smap(&options)),
            ("external_ids", datum_smap(&spec.iface_external_ids)),
        ]);
        if let Some(o) = spec.ofport_request {
            ir.insert("ofport_request".into(), Datum::integer(o));
        }
        if let Some(mac) = &spec.mac {
            ir.insert("mac".into(), Datum::string(mac));
        }
        return Ok(vec![
            Operation::insert_named("Interface", ir, &ifn),
            Operation::insert_named(
                "Port",
                row(vec![
                    ("name", Datum::string(&spec.name)),
                    ("interfaces", Datum::named_uuid(&ifn)),
                    ("external_ids", datum_smap(&spec.port_external_ids)),
                ]),
                &pn,
            ),
            Operation::mutate(
                "Bridge",
                vec![Condition::uuid(b.uuid)],
                vec![Mutation::insert("ports", Datum::named_uuid(&pn))],
            ),
        ]);
    };
    if !b.ports.contains(&p.uuid) {
        let other = r.port_bridge(p.uuid).map(|x| x.name).unwrap_or_default();
        return Err(HelperError::PortOnOtherBridge {
            port: spec.name.clone(),
            bridge: other,
        });
    }
    let mut ops = vec![];
    let pm = merge_map("external_ids", &p.external_ids, &spec.port_external_ids);
    if !pm.is_empty() {
        ops.push(Operation::mutate("Port", vec![Condition::uuid(p.uuid)], pm));
    }
    if let Some(i) = r.interface(&spec.name) {
        let mut upd = Row::new();
        if i.kind != spec.kind.type_name() {
            upd.insert("type".into(), Datum::string(spec.kind.type_name()));
        }
        if i.options != options {
            upd.insert("options".into(), datum_smap(&options));
        }
        if spec.mac.is_some() && i.mac != spec.mac {
            upd.insert(
                "mac".into(),
                spec.mac.as_deref().map(Datum::string).unwrap_or_default(),
            );
        }
        if spec.ofport_request.is_some() && i.ofport_request != spec.ofport_request {
            upd.insert(
                "ofport_request".into(),
                spec.ofport_request.map(Datum::integer).unwrap_or_default(),
            );
        }
        if !upd.is_empty() {
            ops.push(Operation::update(
                "Interface",
                vec![Condition::uuid(i.uuid)],
                upd,
            ));
        }
        let im = merge_map("external_ids", &i.external_ids, &spec.iface_external_ids);
        if !im.is_empty() {
            ops.push(Operation::mutate(
                "Interface",
                vec![Condition::uuid(i.uuid)],
                im,
            ));
        }
    }
    Ok(ops)
}

/// [`add_port_ops_named`] with the default named-uuid prefix.
pub fn add_port_ops(
    r: &Replica,
    bridge: &str,
    spec: &PortSpec,
) -> Result<Vec<Operation>, HelperError> {
    add_port_ops_named(r, bridge, spec, "p")
}

/// Operations that remove port `name` from `bridge` (empty if it is not there). The Port and
/// its Interfaces are garbage-collected by the server (non-root tables).
pub fn del_port_ops(r: &Replica, bridge: &str, name: &str) -> Result<Vec<Operation>, HelperError> {
    let b = r
        .bridge(bridge)
        .ok_or_else(|| HelperError::NoSuchBridge(bridge.into()))?;
    Ok(match r.port(name) {
        Some(p) if b.ports.contains(&p.uuid) => vec![Operation::mutate(
            "Bridge",
            vec![Condition::uuid(b.uuid)],
            vec![Mutation::delete("ports", Datum::uuid(p.uuid))],
        )],
        _ => vec![],
    })
}

/// A table whose rows carry `external_ids` and a unique `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedTable {
    Bridge,
    Port,
    Interface,
}

impl NamedTable {
    pub fn as_str(self) -> &'static str {
        match self {
            NamedTable::Bridge => "Bridge",
            NamedTable::Port => "Port",
            NamedTable::Interface => "Interface",
        }
    }
}

/// The `external_ids` of a Bridge, Port or Interface.
pub fn external_ids(
    r: &Replica,
    table: NamedTable,
    name: &str,
) -> Option<BTreeMap<String, String>> {
    r.row_by_name(table.as_str(), name)
        .map(|(_, row)| smap(row, "external_ids"))
}

/// Operations that set keys in and remove keys from a row's `external_ids`.
pub fn set_external_ids_ops(
    r: &Replica,
    table: NamedTable,
    name: &str,
    set: &BTreeMap<String, String>,
    remove: &[&str],
) -> Result<Vec<Operation>, HelperError> {
    let (uuid, row) =
        r.row_by_name(table.as_str(), name)
            .ok_or_else(|| HelperError::NoSuchRow {
                table: table.as_str(),
                name: name.into(),
            })?;
    let have = smap(row, "external_ids");
    let mut muts = merge_map("external_ids", &have, set);
    let gone: Vec<&str> = remove
        .iter()
        .copied()
        .filter(|k| have.contains_key(*k) && !set.contains_key(*k))
        .collect();
    if !gone.is_empty() {
        muts.insert(0, Mutation::delete("external_ids", Datum::set(gone)));
    }
    Ok(if muts.is_empty() {
        vec![]
    } else {
        vec![Operation::mutate(
            table.as_str(),
            vec![Condition::uuid(uuid)],
            muts,
        )]
    })
}

/// A client plus a live replica of the Open_vSwitch database, with idempotent helpers.
#[derive(Clone)]
pub struct VSwitch {
    pub client: Client,
    pub replica: ReplicaHandle,
}

impl VSwitch {
    /// Connects to `remote` and starts the replica.
    pub async fn connect(remote: &str, config: ClientConfig) -> Result<(VSwitch, Events), Error> {
        let (client, events) = Client::connect(remote, config).await?;
        let v = VSwitch::new(client).await?;
        Ok((v, events))
    }

    /// Starts the replica on an existing client.
    pub async fn new(client: Client) -> Result<VSwitch, Error> {
        let replica = client.replica(DB, "vswitch", monitor_requests()).await?;
        Ok(VSwitch { client, replica })
    }

    /// Sends what a helper planned, if anything; returns how many operations went.
    async fn run(&self, ops: Result<Vec<Operation>, HelperError>) -> Result<usize, Error> {
        let ops = ops.map_err(|e| Error::Other(e.to_string()))?;
        let n = ops.len();
        if n > 0 {
            self.client.transact(DB, ops).await?;
        }
        Ok(n)
    }

    /// Makes the bridge exist as specified. Returns the number of operations sent (0 if
    /// nothing changed).
    pub async fn ensure_bridge(&self, spec: &BridgeSpec) -> Result<usize, Error> {
        let ops = ensure_bridge_ops(&self.replica.read(), spec);
        self.run(Ok(ops)).await
    }

    /// Sets the bridge's controllers.
    pub async fn set_controllers(
        &self,
        bridge: &str,
        want: &[ControllerSpec],
    ) -> Result<usize, Error> {
        let ops = set_controllers_ops(&self.replica.read(), bridge, want);
        self.run(ops).await
    }

    /// Puts `want` among the bridge's controllers, keeping the others ([`add_controller_ops`]).
    pub async fn add_controller(
        &self,
        bridge: &str,
        want: &ControllerSpec,
    ) -> Result<usize, Error> {
        let ops = add_controller_ops(&self.replica.read(), bridge, want);
        self.run(ops).await
    }

    /// Makes the port exist on the bridge as specified.
    pub async fn add_port(&self, bridge: &str, spec: &PortSpec) -> Result<usize, Error> {
        let ops = add_port_ops(&self.replica.read(), bridge, spec);
        self.run(ops).await
    }

    /// Removes the port from the bridge.
    pub async fn del_port(&self, bridge: &str, name: &str) -> Result<usize, Error> {
        let ops = del_port_ops(&self.replica.read(), bridge, name);
        self.run(ops).await
    }

    /// Sets and removes `external_ids` keys.
    pub async fn set_external_ids(
        &self,
        table: NamedTable,
        name: &str,
        set: &BTreeMap<String, String>,
        remove: &[&str],
    ) -> Result<usize, Error> {
        let ops = set_external_ids_ops(&self.replica.read(), table, name, set, remove);
        self.run(ops).await
    }

    /// Reads `external_ids` from the replica.
    pub fn external_ids(&self, table: NamedTable, name: &str) -> Option<BTreeMap<String, String>> {
        external_ids(&self.replica.read(), table, name)
    }

    /// Waits until ovs-vswitchd has given the interface an OpenFlow port number.
    /// An `ofport` of -1 (failed interface) is reported as an error.
    pub async fn wait_ofport(&self, iface: &str, timeout: Duration) -> Result<u16, Error> {
        let r = self
            .replica
            .wait_for(timeout, |r| {
                let i = r.interface(iface)?;
                match i.ofport {
                    Some(p) if p > 0 => {
                        Some(u16::try_from(p).map_err(|_| format!("ofport {p} out of range")))
                    }
                    Some(-1) => Some(Err(format!(
                        "interface {iface} failed: {}",
                        i.error.unwrap_or_default()
                    ))),
                    _ => None,
                }
            })
            .await?;
        r.map_err(Error::Other)
    }
}

#[cfg(test)]
mod tests;
