//! `svcflow run` configuration: a TOML file, overridden by command-line flags.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use ipnet::Ipv4Net;
use serde::Deserialize;

pub use crate::tls::TlsFiles;

/// Everything `svcflow run` needs, after the file and the flags are merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// TLS material: with it, every listener speaks TLS and nodes are dialled over `ssl:`.
    pub tls: Option<TlsFiles>,
    /// Plain TCP beyond loopback is allowed (each such endpoint is logged as a warning).
    pub insecure: bool,
    /// Where switches connect over OpenFlow.
    pub openflow_listen: SocketAddr,
    /// The address nodes' bridges are told to dial, when it differs from the listen address
    /// (a central controller listening on every address, or behind NAT).
    pub openflow_advertise: Option<SocketAddr>,
    /// The datapath type of the bridges svcflow creates: `system` (the kernel module) or
    /// `netdev` (the userspace datapath).
    pub datapath_type: String,
    /// OVSDB servers svcflow dials, one per node: `unix:PATH`, `tcp:IP:PORT` or `ssl:IP:PORT`.
    pub ovsdb_remotes: Vec<OvsdbRemote>,
    /// Where node `ovsdb-server`s pointed at svcflow with `set-manager` connect, if anywhere.
    pub ovsdb_manager_listen: Option<SocketAddr>,
    /// The REST northbound.
    pub rest_listen: SocketAddr,
    /// Where `/metrics` is served.
    pub metrics_listen: SocketAddr,
    /// Where `/healthz` and `/livez` are served.
    pub healthz_listen: SocketAddr,
    /// The file holding REST credentials, if auth is on.
    pub auth_file: Option<PathBuf>,
    /// Pipeline settings.
    pub pipeline: netvirt::config::Config,
    /// Durable state lives here.
    pub state_dir: PathBuf,
    /// Where the REST state is kept: the local log in `state_dir`, or a (clustered) OVSDB
    /// database shared by every replica.
    pub store: coe::rest::StoreKind,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub log_level: String,
    /// The node whose host svcflow runs on; it configures that node's gateway port's host side.
    pub host_node: Option<String>,
    /// Where to watch Kubernetes from, if at all.
    pub kubernetes: Option<coe::k8s::Source>,
    /// REST mode: a node whose switch has been disconnected this long leaves the other nodes'
    /// groups until it is back; zero means never.
    pub node_down_after: std::time::Duration,
    /// Replicas (`store` is `ovsdb:`): how long a replica's connection to a switch must last,
    /// and how long after the node last moved, before it takes the node it is preferred for.
    pub hold_down: std::time::Duration,
    /// Replicas: a bridge drops another replica's target once the switch has been
    /// disconnected from it this long; zero keeps every target.
    pub replica_gone_after: std::time::Duration,
    /// The longest a node's switch waits between attempts to dial this daemon (the
    /// Controller row's `max_backoff`), in whole seconds.
    pub switch_max_backoff: std::time::Duration,
    /// How replicas elect each switch's master.
    pub election: ElectionMode,
}

/// How several replicas elect each switch's master (`--election`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionMode {
    /// One replica: it masters every switch it reaches.
    Off,
    /// RFC 7047 locks on the shared `ovsdb:` store, whose members these are.
    Ovsdb(Vec<String>),
    /// One Kubernetes Lease per node, in this namespace, lasting this long unrenewed.
    Lease {
        /// The Leases' namespace.
        namespace: String,
        /// Their `leaseDurationSeconds`.
        duration: std::time::Duration,
    },
}

impl ElectionMode {
    /// Whether several replicas share the switches.
    pub fn replicated(&self) -> bool {
        !matches!(self, ElectionMode::Off)
    }
}

/// `--switch-max-backoff SECONDS`: 1 to 3600, [`netvirt::node_setup::MAX_BACKOFF_SECS`] by
/// default.
pub fn parse_max_backoff(seconds: Option<u64>) -> Result<u64, ConfigError> {
    match seconds.unwrap_or(netvirt::node_setup::MAX_BACKOFF_SECS) {
        s @ 1..=3600 => Ok(s),
        s => Err(ConfigError(format!(
            "switch max backoff {s} s: from 1 to 3600 s (OVS waits at least a second between \
             attempts to dial)"
        ))),
    }
}

/// The election from `--election MODE` (with the store, Kubernetes, and the Lease settings
/// it needs): `ovsdb` is the default with an `ovsdb:` store, `off` otherwise.
pub fn parse_election(
    mode: Option<&str>,
    store: &coe::rest::StoreKind,
    kubernetes: bool,
    lease_namespace: Option<&str>,
    lease_duration: u64,
) -> Result<ElectionMode, ConfigError> {
    let shared = match store {
        coe::rest::StoreKind::Ovsdb(remotes) => Some(remotes.clone()),
        coe::rest::StoreKind::Local => None,
    };
    match (mode, shared) {
        (None | Some("ovsdb"), Some(remotes)) => Ok(ElectionMode::Ovsdb(remotes)),
        (Some("ovsdb"), None) => Err(ConfigError(
            "election `ovsdb` needs the shared store: give --store ovsdb:REMOTE[,REMOTE...]".into(),
        )),
        (None | Some("off"), None) => Ok(ElectionMode::Off),
        (Some("off"), Some(_)) => Err(ConfigError(
            "election `off` with an `ovsdb:` store: replicas sharing a store must elect \
             their switches' masters (--election ovsdb or lease)"
                .into(),
        )),
        (Some("lease"), _) => {
            if !kubernetes {
                return Err(ConfigError(
                    "election `lease` needs Kubernetes: give --kubeconfig or --kubernetes \
                     in-cluster"
                        .into(),
                ));
            }
            if lease_duration < 2 {
                return Err(ConfigError(format!(
                    "lease duration {lease_duration} s: at least 2 s"
                )));
            }
            let namespace = lease_namespace.unwrap_or("default");
            let dns_label = !namespace.is_empty()
                && namespace.len() <= 63
                && namespace
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !namespace.starts_with('-')
                && !namespace.ends_with('-');
            if !dns_label {
                return Err(ConfigError(format!(
                    "lease namespace `{namespace}`: not a Kubernetes namespace name"
                )));
            }
            Ok(ElectionMode::Lease {
                namespace: namespace.to_string(),
                duration: std::time::Duration::from_secs(lease_duration),
            })
        }
        (Some(other), _) => Err(ConfigError(format!(
            "election `{other}`: expected off, ovsdb or lease"
        ))),
    }
}

/// An OVSDB server to dial, and the node it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvsdbRemote {
    /// The node's name, as in the model.
    pub node: String,
    /// `unix:PATH`, `tcp:IP:PORT` or `ssl:IP:PORT`.
    pub target: String,
}

/// The TOML file's shape. Every key is optional; flags override it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    /// See [`RunConfig::tls`].
    pub ssl_private_key: Option<PathBuf>,
    /// See [`RunConfig::tls`].
    pub ssl_certificate: Option<PathBuf>,
    /// See [`RunConfig::tls`].
    pub ssl_ca_cert: Option<PathBuf>,
    /// See [`RunConfig::insecure`].
    pub insecure: Option<bool>,
    /// See [`RunConfig::openflow_listen`].
    pub openflow_listen: Option<SocketAddr>,
    /// See [`RunConfig::openflow_advertise`].
    pub openflow_advertise: Option<SocketAddr>,
    /// See [`RunConfig::datapath_type`].
    pub datapath_type: Option<String>,
    /// `geneve`, `vxlan` or `none`.
    pub encap: Option<String>,
    /// `NODE=REMOTE` entries.
    pub ovsdb_remotes: Option<Vec<String>>,
    /// See [`RunConfig::ovsdb_manager_listen`].
    pub ovsdb_manager_listen: Option<SocketAddr>,
    /// See [`RunConfig::rest_listen`].
    pub rest_listen: Option<SocketAddr>,
    /// See [`RunConfig::metrics_listen`].
    pub metrics_listen: Option<SocketAddr>,
    /// See [`RunConfig::healthz_listen`].
    pub healthz_listen: Option<SocketAddr>,
    /// See [`RunConfig::auth_file`].
    pub auth_file: Option<PathBuf>,
    /// Service CIDR.
    pub service_cidr: Option<Ipv4Net>,
    /// IPv6 service CIDR.
    pub service_cidr6: Option<ipnet::Ipv6Net>,
    /// Virtual gateway MAC.
    pub gateway_mac: Option<String>,
    /// Hairpin loopback IP.
    pub loopback_ip: Option<Ipv4Addr>,
    /// `LOW-HIGH`.
    pub node_port_range: Option<String>,
    /// Weight of local endpoints.
    pub local_endpoint_weight: Option<u16>,
    /// The refusal meter's rate, packets/s (also its burst).
    pub refuse_rate: Option<u32>,
    /// State directory.
    pub state_dir: Option<PathBuf>,
    /// `local` or `ovsdb:REMOTE[,REMOTE...]`.
    pub store: Option<String>,
    /// Log level.
    pub log_level: Option<String>,
    /// See [`RunConfig::host_node`].
    pub host_node: Option<String>,
    /// `in-cluster` or `off`.
    pub kubernetes: Option<String>,
    /// A kubeconfig file; turns Kubernetes on.
    pub kubeconfig: Option<PathBuf>,
    /// See [`RunConfig::node_down_after`], in seconds.
    pub node_down_after: Option<u64>,
    /// See [`RunConfig::hold_down`], in seconds.
    pub hold_down: Option<u64>,
    /// See [`RunConfig::replica_gone_after`], in seconds.
    pub replica_gone_after: Option<u64>,
    /// See [`RunConfig::switch_max_backoff`], in seconds.
    pub switch_max_backoff: Option<u64>,
    /// `off`, `ovsdb` or `lease`.
    pub election: Option<String>,
    /// The Leases' namespace.
    pub lease_namespace: Option<String>,
    /// The Leases' duration, in seconds.
    pub lease_duration: Option<u64>,
}

/// `system` or `netdev`.
pub fn parse_datapath_type(text: &str) -> Result<String, ConfigError> {
    match text {
        "system" | "netdev" => Ok(text.to_string()),
        other => Err(ConfigError(format!(
            "datapath type `{other}`: expected `system` (kernel) or `netdev` (userspace)"
        ))),
    }
}

/// Why a configuration was refused.
#[derive(Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl FileConfig {
    /// Reads and parses a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))
    }
}

/// Parses `NODE=REMOTE`, where REMOTE is `unix:PATH`, `tcp:IP:PORT` or `ssl:IP:PORT`.
pub fn parse_ovsdb_remote(text: &str) -> Result<OvsdbRemote, ConfigError> {
    let (node, target) = text.split_once('=').ok_or_else(|| {
        ConfigError(format!(
            "ovsdb remote `{text}`: expected NODE=unix:PATH, NODE=tcp:IP:PORT or NODE=ssl:IP:PORT"
        ))
    })?;
    if node.is_empty() {
        return Err(ConfigError(format!(
            "ovsdb remote `{text}`: empty node name"
        )));
    }
    let valid = match target.split_once(':') {
        Some(("unix", path)) => !path.is_empty(),
        Some(("tcp" | "ssl", addr)) => addr.parse::<SocketAddr>().is_ok(),
        _ => false,
    };
    if !valid {
        return Err(ConfigError(format!(
            "ovsdb remote `{text}`: expected unix:PATH, tcp:IP:PORT or ssl:IP:PORT after `{node}=`"
        )));
    }
    Ok(OvsdbRemote {
        node: node.to_string(),
        target: target.to_string(),
    })
}

/// Parses `LOW-HIGH`.
pub fn parse_port_range(text: &str) -> Result<(u16, u16), ConfigError> {
    let bad = || {
        ConfigError(format!(
            "node port range `{text}`: expected LOW-HIGH, e.g. 30000-32767"
        ))
    };
    let (low, high) = text.split_once('-').ok_or_else(bad)?;
    let low: u16 = low.trim().parse().map_err(|_| bad())?;
    let high: u16 = high.trim().parse().map_err(|_| bad())?;
    if low == 0 || low > high {
        return Err(bad());
    }
    Ok((low, high))
}

/// Checks the log level name.
pub fn parse_log_level(text: &str) -> Result<String, ConfigError> {
    match text {
        "error" | "warn" | "info" | "debug" | "trace" => Ok(text.to_string()),
        _ => Err(ConfigError(format!(
            "log level `{text}`: expected error, warn, info, debug or trace"
        ))),
    }
}

/// The Kubernetes source from `--kubernetes MODE` and `--kubeconfig PATH`: `in-cluster`, or
/// the kubeconfig file, or (mode `off` or neither given) none.
pub fn parse_kubernetes(
    mode: Option<&str>,
    kubeconfig: Option<&Path>,
) -> Result<Option<coe::k8s::Source>, ConfigError> {
    match (mode, kubeconfig) {
        (None | Some("kubeconfig"), Some(path)) => {
            Ok(Some(coe::k8s::Source::Kubeconfig(path.to_path_buf())))
        }
        (Some("kubeconfig"), None) => Err(ConfigError(
            "kubernetes `kubeconfig` needs --kubeconfig PATH".into(),
        )),
        (Some("in-cluster"), None) => Ok(Some(coe::k8s::Source::InCluster)),
        (Some("in-cluster"), Some(_)) => Err(ConfigError(
            "kubernetes: give either in-cluster or --kubeconfig, not both".into(),
        )),
        (Some("off"), Some(_)) => Err(ConfigError(
            "kubernetes is off but --kubeconfig is given".into(),
        )),
        (None | Some("off"), None) => Ok(None),
        (Some(other), _) => Err(ConfigError(format!(
            "kubernetes `{other}`: expected in-cluster, kubeconfig or off"
        ))),
    }
}
