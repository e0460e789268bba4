//! Configuration of the REST northbound. The daemon builds it from its own configuration.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;

/// REST northbound settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestConfig {
    /// Where to listen. Default `127.0.0.1:8181`, OpenDaylight's RESTCONF port.
    pub listen: SocketAddr,
    /// The credentials file (see [`super::auth`]). `None` turns auth off, which is only
    /// allowed when `listen` is a loopback address.
    pub auth_file: Option<PathBuf>,
    /// Where the write-ahead log lives.
    pub state_dir: PathBuf,
    /// Allowed node ports. Default 30000–32767, as Kubernetes.
    pub node_port_range: RangeInclusive<u16>,
    /// OVSDB remote of a node, by node name (host name) or uid, overriding the default
    /// `tcp:<internal-ip-address>:6640`.
    pub ovsdb_remotes: BTreeMap<String, String>,
    /// The largest request body accepted. Default 64 MiB.
    pub max_body_bytes: usize,
    /// How long a client connection may send nothing before it is closed. Default 60 s.
    pub idle_timeout: std::time::Duration,
    /// The bytes request bodies may hold together; a request beyond it gets 503. Default
    /// 256 MiB.
    pub body_budget_bytes: usize,
    /// Where the state is kept: the local write-ahead log in `state_dir` (the default), or a
    /// (clustered) OVSDB database shared by every replica.
    pub store: StoreKind,
    /// If set, every write is refused (405 `operation-not-supported`) with this reason: the
    /// state served is not the one the controller acts on (replicas electing over Kubernetes
    /// Leases each keep their own).
    pub refuse_writes: Option<String>,
    /// HTTPS: the server config every connection's TLS handshake uses; plain HTTP without.
    pub https: Option<super::tls::TlsConfig<tokio_rustls::rustls::ServerConfig>>,
    /// TLS for `ssl:` members of an `ovsdb:` store.
    pub store_tls: Option<super::tls::TlsConfig<tokio_rustls::rustls::ClientConfig>>,
}

/// Where the REST state is kept.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// A write-ahead log in the state directory (`--store local`).
    #[default]
    Local,
    /// The `Svcflow` database of an ovsdb-server cluster, by its members' remotes
    /// (`--store ovsdb:tcp:IP:PORT[,…]`).
    Ovsdb(Vec<String>),
}

impl std::str::FromStr for StoreKind {
    type Err = String;

    /// `local` or `ovsdb:REMOTE[,REMOTE…]`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "local" {
            return Ok(StoreKind::Local);
        }
        let Some(list) = s.strip_prefix("ovsdb:") else {
            return Err(format!(
                "store {s:?}: expected `local` or `ovsdb:REMOTE[,REMOTE...]`"
            ));
        };
        let remotes: Vec<String> = list.split(',').map(|r| r.trim().to_string()).collect();
        for r in &remotes {
            r.parse::<ovsdb::client::Remote>().map_err(|e| {
                format!("store {s:?}: {e} (expected tcp:IP:PORT, ssl:IP:PORT or unix:PATH)")
            })?;
        }
        Ok(StoreKind::Ovsdb(remotes))
    }
}

impl RestConfig {
    /// The defaults, keeping state in `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8181),
            auth_file: None,
            state_dir: state_dir.into(),
            node_port_range: 30000..=32767,
            ovsdb_remotes: BTreeMap::new(),
            max_body_bytes: 64 << 20,
            store: StoreKind::Local,
            idle_timeout: super::limits::IDLE_TIMEOUT,
            body_budget_bytes: super::limits::BODY_BUDGET_BYTES,
            refuse_writes: None,
            https: None,
            store_tls: None,
        }
    }

    /// Checks the settings that do not need I/O.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.auth_file.is_none() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::AuthRequired(self.listen));
        }
        let (lo, hi) = (*self.node_port_range.start(), *self.node_port_range.end());
        if lo == 0 || lo > hi {
            return Err(ConfigError::NodePortRange(lo, hi));
        }
        Ok(())
    }
}

/// A configuration the northbound refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// Auth is off on a non-loopback address.
    #[error(
        "the REST northbound listens on {0}, which is not a loopback address, without \
         authentication; set a credentials file, or listen on 127.0.0.1 or ::1"
    )]
    AuthRequired(SocketAddr),
    /// The node port range is empty or includes 0.
    #[error("node port range {0}-{1} is not a range of ports from 1 to 65535")]
    NodePortRange(u16, u16),
}
