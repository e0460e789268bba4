//! A thin tokio driver around [`Session`]: active `unix:PATH` / `tcp:IP:PORT` / `ssl:IP:PORT`
//! with reconnect and backoff, and passive `ptcp:PORT[:IP]` / `pssl:PORT[:IP]` (a node's
//! ovsdb-server pointed at us with `ovs-vsctl set-manager tcp:CONTROLLER:6640`, or `ssl:`).
//!
//! TLS runs under the session with the rustls configs in [`ClientConfig`], which the caller
//! builds: what its verifier accepts (the CA, a name) is the caller's policy. As in Open
//! vSwitch, the server name given to rustls when dialing is the address, not a host name.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::datum::Uuid;
use crate::monitor::{MonitorRequest, TableUpdates};
use crate::ops::{OpResult, Operation};
use crate::replica::Replica;
use crate::schema::DatabaseSchema;
use crate::session::{
    Event, Reply, RequestError, RequestId, Session, SessionConfig, SessionError, UpdateKind,
};

/// Where to connect (active mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// `unix:PATH`
    Unix(PathBuf),
    /// `tcp:IP:PORT` (IPv6 as `tcp:[::1]:PORT`)
    Tcp(SocketAddr),
    /// `ssl:IP:PORT`: TCP with TLS ([`ClientConfig::tls_client`]).
    Ssl(SocketAddr),
}

/// The DER end-entity certificate a TLS peer presented.
pub type PeerCertificate = tokio_rustls::rustls::pki_types::CertificateDer<'static>;

/// A remote or listen address that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad OVSDB address {0:?}")]
pub struct AddrError(pub String);

impl FromStr for Remote {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, AddrError> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(AddrError(s.into()));
            }
            Ok(Remote::Unix(PathBuf::from(p)))
        } else if let Some(a) = s.strip_prefix("tcp:") {
            a.parse().map(Remote::Tcp).map_err(|_| AddrError(s.into()))
        } else if let Some(a) = s.strip_prefix("ssl:") {
            a.parse().map(Remote::Ssl).map_err(|_| AddrError(s.into()))
        } else {
            Err(AddrError(s.into()))
        }
    }
}

/// Parses a passive address `ptcp:PORT[:IP]` (IP defaults to 0.0.0.0).
pub fn parse_passive(s: &str) -> Result<SocketAddr, AddrError> {
    let rest = s.strip_prefix("ptcp:").ok_or_else(|| AddrError(s.into()))?;
    parse_port_ip(s, rest)
}

/// Parses `ptcp:PORT[:IP]` or `pssl:PORT[:IP]`; true for `pssl:`.
pub fn parse_passive_tls(s: &str) -> Result<(SocketAddr, bool), AddrError> {
    match (s.strip_prefix("ptcp:"), s.strip_prefix("pssl:")) {
        (Some(rest), _) => Ok((parse_port_ip(s, rest)?, false)),
        (None, Some(rest)) => Ok((parse_port_ip(s, rest)?, true)),
        (None, None) => Err(AddrError(s.into())),
    }
}

fn parse_port_ip(s: &str, rest: &str) -> Result<SocketAddr, AddrError> {
    let (port, ip) = match rest.split_once(':') {
        Some((p, ip)) => (
            p,
            ip.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .ok(),
        ),
        None => (rest, Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED))),
    };
    let port: u16 = port.parse().map_err(|_| AddrError(s.into()))?;
    let ip = ip.ok_or_else(|| AddrError(s.into()))?;
    Ok(SocketAddr::new(ip, port))
}

/// Driver settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub session: SessionConfig,
    /// First reconnect delay (active mode); doubles per failure up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Timeout for one connect attempt.
    pub connect_timeout: Duration,
    /// Bytes queued for a peer that does not read before the session is closed.
    pub max_send_backlog: usize,
    /// TLS for dialing `ssl:` remotes (its verifier decides which server certificates pass).
    pub tls_client: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
    /// TLS for `pssl:` listeners (whether, and against which CA, a peer must present a
    /// certificate).
    pub tls_server: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            session: SessionConfig::default(),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(5),
            max_send_backlog: 128 << 20,
            tls_client: None,
            tls_server: None,
        }
    }
}

/// Errors from [`Client`] calls.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Request(#[from] RequestError),
    #[error("unexpected reply {0:?}")]
    UnexpectedReply(Box<Reply>),
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
    #[error("timed out")]
    Timeout,
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The typed transaction error, if that is what this is.
    pub fn transact(&self) -> Option<&crate::ops::TransactError> {
        match self {
            Error::Request(RequestError::Transact(e)) => Some(e),
            _ => None,
        }
    }
}

/// Something that happened on the connection.
#[derive(Debug, Clone)]
pub enum ClientEvent {
    /// (Re)connected. Monitors and locks are being re-established.
    Connected,
    /// The connection closed; active clients reconnect with backoff.
    Disconnected(SessionError),
    /// All monitors and locks are back after a reconnect.
    Resynced,
    /// A monitor update (already applied to the monitor's replica, if it has one).
    Update {
        monitor: String,
        kind: UpdateKind,
        updates: Arc<TableUpdates>,
    },
    Locked(String),
    Stolen(String),
    /// A cluster client ([`Client::connect_cluster`]) is about to use this member, its
    /// database's leader; [`ClientEvent::Connected`] follows.
    Member(String),
}

/// Receives [`ClientEvent`]s. The channel is unbounded: either drain it or drop it (events are
/// then discarded). Replicas are updated by the driver whether or not anyone reads it.
pub type Events = mpsc::UnboundedReceiver<ClientEvent>;

enum Call {
    ListDbs,
    GetSchema(String),
    Transact(String, Vec<Operation>),
    Monitor {
        db: String,
        key: String,
        requests: BTreeMap<String, MonitorRequest>,
        replica: Option<ReplicaHandle>,
    },
    MonitorCancel(String),
    Lock(String),
    Steal(String),
    Unlock(String),
    Echo(Value),
}

enum Command {
    Call(
        Call,
        oneshot::Sender<Result<Reply, RequestError>>,
        Option<u64>,
    ),
    Cancel(u64),
    Shutdown,
}

/// A handle to a connection driver. Cheap to clone; the driver stops when every handle is
/// dropped or [`Client::shutdown`] is called.
#[derive(Clone)]
pub struct Client {
    cmd: mpsc::UnboundedSender<Command>,
    tokens: Arc<AtomicU64>,
}

/// A `transact` in flight that can be cancelled (RFC 7047 §4.1.4).
pub struct PendingTransact {
    client: Client,
    token: u64,
    rx: oneshot::Receiver<Result<Reply, RequestError>>,
}

impl PendingTransact {
    /// Asks the server to cancel the transaction; [`PendingTransact::result`] then returns the
    /// server's error (`canceled`) unless the transaction already completed.
    pub fn cancel(&self) {
        let _ = self.client.cmd.send(Command::Cancel(self.token));
    }

    /// Waits for the outcome.
    pub async fn result(self) -> Result<Vec<OpResult>, Error> {
        match self.rx.await.map_err(|_| RequestError::Disconnected)?? {
            Reply::Transact(r) => Ok(r),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }
}

/// A replica kept up to date by the driver. Updates are applied in stream order, before any
/// later reply is delivered, so after a `transact` returns its own effects are visible.
#[derive(Clone, Debug)]
pub struct ReplicaHandle {
    inner: Arc<RwLock<Replica>>,
    generation: Arc<watch::Sender<u64>>,
}

impl ReplicaHandle {
    fn new(schema: DatabaseSchema) -> Self {
        ReplicaHandle {
            inner: Arc::new(RwLock::new(Replica::new(schema))),
            generation: Arc::new(watch::channel(0).0),
        }
    }

    /// Read access to the current state (no I/O). Do not hold it across an await.
    pub fn read(&self) -> RwLockReadGuard<'_, Replica> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn apply(&self, kind: UpdateKind, updates: &TableUpdates) {
        let g = {
            let mut r = self.inner.write().unwrap_or_else(|e| e.into_inner());
            r.apply(kind, updates);
            r.generation()
        };
        self.generation.send_replace(g);
    }

    /// Waits until `f` returns `Some` for the replica, or `timeout` passes.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&Replica) -> Option<T>,
    ) -> Result<T, Error> {
        let mut rx = self.generation.subscribe();
        let fut = async {
            loop {
                if let Some(v) = f(&self.read()) {
                    return Ok(v);
                }
                if rx.changed().await.is_err() {
                    return Err(Error::Other("replica closed".into()));
                }
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| Error::Timeout)?
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// Writes what `rx` gives, in order, and counts it off `backlog`; shuts the stream down once
/// `rx` closes. Each message is flushed once nothing else waits behind it: a TLS stream may
/// keep its last records when the socket is full (tokio-rustls returns as soon as it is), and
/// without the flush they would wait for the next message, an echo seconds later.
async fn write_out<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    backlog: Arc<std::sync::atomic::AtomicUsize>,
) {
    while let Some(b) = rx.recv().await {
        if wr.write_all(&b).await.is_err() {
            return;
        }
        backlog.fetch_sub(b.len(), Ordering::Relaxed);
        if rx.is_empty() && wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

async fn connect(
    remote: &Remote,
    timeout: Duration,
    tls: Option<&Arc<tokio_rustls::rustls::ClientConfig>>,
) -> io::Result<Box<dyn Stream>> {
    let fut = async {
        Ok::<Box<dyn Stream>, io::Error>(match remote {
            Remote::Unix(p) => Box::new(UnixStream::connect(p).await?),
            Remote::Tcp(a) => {
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
            Remote::Ssl(a) => {
                let Some(tls) = tls else {
                    return Err(io::Error::other("ssl: needs a TLS client configuration"));
                };
                let s = TcpStream::connect(a).await?;
                s.set_nodelay(true)?;
                let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(a.ip().into());
                Box::new(
                    tokio_rustls::TlsConnector::from(tls.clone())
                        .connect(name, s)
                        .await?,
                )
            }
        })
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
}

impl Client {
    /// Connects to `remote` (`unix:PATH` or `tcp:IP:PORT`) and keeps reconnecting with backoff
    /// after a disconnect. Fails if the first attempt fails.
    pub async fn connect(remote: &str, config: ClientConfig) -> Result<(Client, Events), Error> {
        let remote: Remote = remote
            .parse()
            .map_err(|e: AddrError| Error::Other(e.to_string()))?;
        let stream = connect(&remote, config.connect_timeout, config.tls_client.as_ref()).await?;
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let mut d = Driver::new(&config, cmd_rx, ev_tx);
        tokio::spawn(async move {
            let mut stream = Some(stream);
            let mut backoff = config.backoff_min;
            loop {
                if let Some(s) = stream.take() {
                    backoff = config.backoff_min;
                    d.emit(ClientEvent::Connected);
                    if d.serve(s).await == Served::Shutdown {
                        return;
                    }
                }
                if d.idle(backoff).await == Served::Shutdown {
                    return;
                }
                backoff = (backoff * 2).min(config.backoff_max);
                if let Ok(s) =
                    connect(&remote, config.connect_timeout, config.tls_client.as_ref()).await
                {
                    d.session.reset(Instant::now());
                    stream = Some(s);
                }
            }
        });
        Ok((Client::from_sender(cmd_tx), ev_rx))
    }

    /// Connects to the leader of `db`'s Raft cluster among `remotes` (every member, or some),
    /// as `ovsdb-idl` does for clustered databases: each member is asked through `_Server`
    /// whether it is the connected leader, and only the leader is used (a standalone server
    /// is used as it is). When the leader goes away or says it no longer leads (a `_Server`
    /// monitor), the client moves to the next member that does. Monitors and locks are
    /// re-established on the new member, monitors with `monitor_cond_since` from the last
    /// transaction seen, so a move does not re-read the database.
    ///
    /// Returns at once: the search runs in the background, and [`ClientEvent::Member`] then
    /// [`ClientEvent::Connected`] report each member used. Calls made while no member is
    /// in use fail with [`RequestError::Disconnected`] when the next one is found.
    pub fn connect_cluster(
        remotes: &[String],
        db: &str,
        config: ClientConfig,
    ) -> Result<(Client, Events), Error> {
        let members: Vec<(String, Remote)> = remotes
            .iter()
            .map(|r| {
                r.parse()
                    .map(|remote| (r.clone(), remote))
                    .map_err(|e: AddrError| Error::Other(e.to_string()))
            })
            .collect::<Result<_, _>>()?;
        if members.is_empty() {
            return Err(Error::Other("no cluster member to connect to".into()));
        }
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let mut d = Driver::new(&config, cmd_rx, ev_tx);
        let db = db.to_string();
        tokio::spawn(async move {
            let mut next = 0;
            let mut backoff = config.backoff_min;
            let mut used_one = false;
            loop {
                let mut found = false;
                for _ in 0..members.len() {
                    let (name, remote) = &members[next];
                    next = (next + 1) % members.len();
                    let Ok(mut stream) =
                        connect(remote, config.connect_timeout, config.tls_client.as_ref()).await
                    else {
                        continue;
                    };
                    match crate::cluster::probe(&mut stream, &db, config.connect_timeout).await {
                        Ok(status) if status.usable() => {}
                        _ => continue,
                    }
                    found = true;
                    backoff = config.backoff_min;
                    if used_one {
                        d.session.reset(Instant::now());
                    } else {
                        used_one = true;
                        let mut requests = BTreeMap::new();
                        requests.insert(
                            "Database".to_string(),
                            MonitorRequest::columns(&["name", "model", "connected", "leader"]),
                        );
                        d.session
                            .monitor("_Server", crate::cluster::SERVER_MONITOR, requests);
                    }
                    d.server_watch = Some(crate::cluster::ServerWatch::new(&db));
                    d.emit(ClientEvent::Member(name.clone()));
                    d.emit(ClientEvent::Connected);
                    if d.serve(stream).await == Served::Shutdown {
                        return;
                    }
                }
                if !found {
                    if d.idle(backoff).await == Served::Shutdown {
                        return;
                    }
                    backoff = (backoff * 2).min(config.backoff_max);
                }
            }
        });
        Ok((Client::from_sender(cmd_tx), ev_rx))
    }

    /// Runs a session over an already connected stream, without reconnecting.
    pub fn from_stream<S>(stream: S, config: ClientConfig) -> (Client, Events)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        let mut d = Driver::new(&config, cmd_rx, ev_tx);
        tokio::spawn(async move {
            d.emit(ClientEvent::Connected);
            let _ = d.serve(Box::new(stream)).await;
        });
        (Client::from_sender(cmd_tx), ev_rx)
    }

    fn from_sender(cmd: mpsc::UnboundedSender<Command>) -> Client {
        Client {
            cmd,
            tokens: Arc::new(AtomicU64::new(1)),
        }
    }

    async fn call(&self, c: Call) -> Result<Reply, Error> {
        let (tx, rx) = oneshot::channel();
        self.cmd
            .send(Command::Call(c, tx, None))
            .map_err(|_| RequestError::Disconnected)?;
        Ok(rx.await.map_err(|_| RequestError::Disconnected)??)
    }

    /// `list_dbs` (RFC 7047 §4.1.1).
    pub async fn list_dbs(&self) -> Result<Vec<String>, Error> {
        match self.call(Call::ListDbs).await? {
            Reply::Dbs(d) => Ok(d),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }

    /// `get_schema` (§4.1.2).
    pub async fn get_schema(&self, db: &str) -> Result<DatabaseSchema, Error> {
        match self.call(Call::GetSchema(db.into())).await? {
            Reply::Schema(s) => Ok(*s),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }

    /// `transact` (§4.1.3). A failed operation gives a typed [`crate::TransactError`].
    pub async fn transact(&self, db: &str, ops: Vec<Operation>) -> Result<Vec<OpResult>, Error> {
        match self.call(Call::Transact(db.into(), ops)).await? {
            Reply::Transact(r) => Ok(r),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }

    /// Starts a `transact` that can be cancelled with [`PendingTransact::cancel`].
    pub fn start_transact(&self, db: &str, ops: Vec<Operation>) -> PendingTransact {
        let (tx, rx) = oneshot::channel();
        let token = self.tokens.fetch_add(1, Ordering::Relaxed);
        // If the driver is gone, `tx` is dropped and `result` reports Disconnected.
        let _ = self.cmd.send(Command::Call(
            Call::Transact(db.into(), ops),
            tx,
            Some(token),
        ));
        PendingTransact {
            client: self.clone(),
            token,
            rx,
        }
    }

    /// Starts monitor `key` (§4.1.5; `monitor_cond_since` → `monitor_cond` → `monitor`).
    /// Updates arrive as [`ClientEvent::Update`]. Re-established after reconnects.
    pub async fn monitor(
        &self,
        db: &str,
        key: &str,
        requests: BTreeMap<String, MonitorRequest>,
    ) -> Result<(), Error> {
        let c = Call::Monitor {
            db: db.into(),
            key: key.into(),
            requests,
            replica: None,
        };
        self.call(c).await.map(|_| ())
    }

    /// Starts monitor `key` feeding a [`Replica`] (fetches the schema first).
    pub async fn replica(
        &self,
        db: &str,
        key: &str,
        requests: BTreeMap<String, MonitorRequest>,
    ) -> Result<ReplicaHandle, Error> {
        let schema = self.get_schema(db).await?;
        let h = ReplicaHandle::new(schema);
        let c = Call::Monitor {
            db: db.into(),
            key: key.into(),
            requests,
            replica: Some(h.clone()),
        };
        self.call(c).await?;
        Ok(h)
    }

    /// `monitor_cancel` (§4.1.7).
    pub async fn monitor_cancel(&self, key: &str) -> Result<(), Error> {
        self.call(Call::MonitorCancel(key.into())).await.map(|_| ())
    }

    /// `lock` (§4.1.8): whether it was granted at once ([`ClientEvent::Locked`] follows otherwise).
    pub async fn lock(&self, name: &str) -> Result<bool, Error> {
        match self.call(Call::Lock(name.into())).await? {
            Reply::Lock { locked } => Ok(locked),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }

    /// `steal` (§4.1.9).
    pub async fn steal(&self, name: &str) -> Result<bool, Error> {
        match self.call(Call::Steal(name.into())).await? {
            Reply::Lock { locked } => Ok(locked),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }

    /// `unlock` (§4.1.10).
    pub async fn unlock(&self, name: &str) -> Result<(), Error> {
        self.call(Call::Unlock(name.into())).await.map(|_| ())
    }

    /// `echo` (§4.1.11).
    pub async fn echo(&self, params: Value) -> Result<Value, Error> {
        match self.call(Call::Echo(params)).await? {
            Reply::Echo(v) => Ok(v),
            r => Err(Error::UnexpectedReply(Box::new(r))),
        }
    }

    /// Stops the driver and closes the connection.
    pub fn shutdown(&self) {
        let _ = self.cmd.send(Command::Shutdown);
    }

    /// Whether the driver has stopped.
    pub fn is_closed(&self) -> bool {
        self.cmd.is_closed()
    }
}

/// Accepts connections from ovsdb-servers (passive mode, `ptcp:PORT[:IP]` or
/// `pssl:PORT[:IP]`). Connections are accepted in the background and each TLS handshake runs
/// on its own, bounded by [`ClientConfig::connect_timeout`], so a silent peer delays nobody;
/// at most [`MAX_HANDSHAKES`] run at once, and more wait in the kernel's backlog. A failed
/// accept (out of file descriptors, …) is retried after 10 ms, doubling to 1 s: the listener
/// stops only when it is dropped.
pub struct Listener {
    accepted: tokio::sync::Mutex<mpsc::Receiver<Accepted>>,
    local_addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// TLS handshakes in progress at once, per listener.
pub const MAX_HANDSHAKES: usize = 64;

/// One ovsdb-server that connected, with a session running on its connection.
pub struct Accepted {
    /// The session's handle; it lives as long as that connection.
    pub client: Client,
    /// Its events.
    pub events: Events,
    /// Where it connected from.
    pub peer: SocketAddr,
    /// The certificate it presented on `pssl:` (verified against the CA of the rustls
    /// config); `None` on `ptcp:`. Which name it must carry is the caller's policy.
    pub certificate: Option<PeerCertificate>,
}

impl Listener {
    /// Listens on `ptcp:PORT[:IP]`, or `pssl:PORT[:IP]` with [`ClientConfig::tls_server`].
    pub async fn bind(addr: &str, config: ClientConfig) -> Result<Listener, Error> {
        let (a, tls) = parse_passive_tls(addr).map_err(|e| Error::Other(e.to_string()))?;
        let tls = match (tls, &config.tls_server) {
            (false, _) => None,
            (true, Some(tls)) => Some(tokio_rustls::TlsAcceptor::from(tls.clone())),
            (true, None) => {
                return Err(Error::Other(format!(
                    "{addr}: pssl: needs a TLS server configuration"
                )));
            }
        };
        let inner = TcpListener::bind(a).await?;
        let local_addr = inner.local_addr()?;
        let (tx, rx) = mpsc::channel(16);
        let task = tokio::spawn(accept_loop(inner, tls, config, tx));
        Ok(Listener {
            accepted: tokio::sync::Mutex::new(rx),
            local_addr,
            task,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    /// Waits for the next ovsdb-server to connect (and, on `pssl:`, complete its TLS
    /// handshake). The client lives as long as that connection; the server reconnects on its
    /// own and shows up here again.
    pub async fn accept(&self) -> Result<Accepted, Error> {
        self.accepted
            .lock()
            .await
            .recv()
            .await
            .ok_or_else(|| Error::Other("listener stopped".into()))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts until the listener is dropped; each TLS handshake runs in its own task.
async fn accept_loop(
    inner: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    config: ClientConfig,
    tx: mpsc::Sender<Accepted>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    let mut pause = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (s, peer) = match inner.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                let wait = pause.unwrap_or(Duration::from_millis(10));
                tracing::warn!("OVSDB listener: accept failed ({e}); retrying in {wait:?}");
                tokio::time::sleep(wait).await;
                pause = Some((wait * 2).min(Duration::from_secs(1)));
                continue;
            }
        };
        pause = None;
        let _ = s.set_nodelay(true);
        let (tls, config, tx) = (tls.clone(), config.clone(), tx.clone());
        tokio::spawn(async move {
            let (stream, certificate): (Box<dyn Stream>, _) = match tls {
                None => (Box::new(s), None),
                Some(tls) => {
                    match tokio::time::timeout(config.connect_timeout, tls.accept(s)).await {
                        Ok(Ok(s)) => {
                            let cert = s
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(<[_]>::first)
                                .map(|c| c.clone().into_owned());
                            (Box::new(s), cert)
                        }
                        Ok(Err(e)) => {
                            tracing::debug!("OVSDB listener: TLS handshake with {peer}: {e}");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!("OVSDB listener: TLS handshake with {peer} timed out");
                            return;
                        }
                    }
                }
            };
            drop(slot);
            let (client, events) = Client::from_stream(stream, config);
            let _ = tx
                .send(Accepted {
                    client,
                    events,
                    peer,
                    certificate,
                })
                .await;
        });
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Served {
    Closed,
    Shutdown,
}

struct Driver {
    session: Session,
    cmd_rx: mpsc::UnboundedReceiver<Command>,
    ev_tx: mpsc::UnboundedSender<ClientEvent>,
    max_send_backlog: usize,
    calls: HashMap<RequestId, oneshot::Sender<Result<Reply, RequestError>>>,
    /// Client-side cancel tokens of transactions in flight.
    tokens: HashMap<u64, RequestId>,
    replicas: HashMap<String, ReplicaHandle>,
    /// A cluster client's view of its member's leadership (see [`Client::connect_cluster`]).
    server_watch: Option<crate::cluster::ServerWatch>,
    /// The member stopped leading: leave it for the next.
    moving: bool,
}

impl Driver {
    fn new(
        config: &ClientConfig,
        cmd_rx: mpsc::UnboundedReceiver<Command>,
        ev_tx: mpsc::UnboundedSender<ClientEvent>,
    ) -> Driver {
        Driver {
            session: Session::new(config.session.clone(), Instant::now()),
            cmd_rx,
            ev_tx,
            max_send_backlog: config.max_send_backlog,
            calls: HashMap::new(),
            tokens: HashMap::new(),
            replicas: HashMap::new(),
            server_watch: None,
            moving: false,
        }
    }

    fn emit(&self, e: ClientEvent) {
        let _ = self.ev_tx.send(e);
    }

    fn command(&mut self, cmd: Command) -> Option<Served> {
        match cmd {
            Command::Shutdown => return Some(Served::Shutdown),
            Command::Call(c, tx, token) => {
                let id = self.issue(c, tx);
                if let Some(t) = token {
                    self.tokens.insert(t, id);
                }
            }
            Command::Cancel(t) => {
                if let Some(id) = self.tokens.get(&t) {
                    self.session.cancel(*id);
                }
            }
        }
        None
    }

    fn issue(&mut self, c: Call, tx: oneshot::Sender<Result<Reply, RequestError>>) -> RequestId {
        let s = &mut self.session;
        let id = match c {
            Call::ListDbs => s.list_dbs(),
            Call::GetSchema(db) => s.get_schema(&db),
            Call::Transact(db, ops) => s.transact(&db, ops),
            Call::Monitor {
                db,
                key,
                requests,
                replica,
            } => {
                if let Some(r) = replica {
                    self.replicas.insert(key.clone(), r);
                }
                s.monitor(&db, &key, requests)
            }
            Call::MonitorCancel(key) => {
                self.replicas.remove(&key);
                s.monitor_cancel(&key)
            }
            Call::Lock(n) => s.lock(&n),
            Call::Steal(n) => s.steal(&n),
            Call::Unlock(n) => s.unlock(&n),
            Call::Echo(v) => s.echo(v),
        };
        self.calls.insert(id, tx);
        id
    }

    fn dispatch(&mut self) {
        while let Some(ev) = self.session.poll_event() {
            match ev {
                Event::Reply { id, result } => {
                    if !self.tokens.is_empty() {
                        self.tokens.retain(|_, r| *r != id);
                    }
                    if let Some(tx) = self.calls.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Event::Update {
                    monitor,
                    kind,
                    updates,
                } if monitor == crate::cluster::SERVER_MONITOR => {
                    if let Some(w) = self.server_watch.as_mut()
                        && w.apply(kind, &updates)
                    {
                        self.moving = true;
                    }
                }
                Event::Update {
                    monitor,
                    kind,
                    updates,
                } => {
                    if let Some(r) = self.replicas.get(&monitor) {
                        r.apply(kind, &updates);
                    }
                    self.emit(ClientEvent::Update {
                        monitor,
                        kind,
                        updates: Arc::new(updates),
                    });
                }
                Event::Locked(n) => self.emit(ClientEvent::Locked(n)),
                Event::Stolen(n) => self.emit(ClientEvent::Stolen(n)),
                Event::Resynced => self.emit(ClientEvent::Resynced),
                Event::Closed(e) => self.emit(ClientEvent::Disconnected(e)),
            }
        }
    }

    /// Handles commands while disconnected, for `wait`.
    async fn idle(&mut self, wait: Duration) -> Served {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Served::Closed,
                cmd = self.cmd_rx.recv() => {
                    let Some(cmd) = cmd else { return Served::Shutdown };
                    if let Some(s) = self.command(cmd) {
                        return s;
                    }
                    let _ = self.session.poll_transmit();
                    self.dispatch();
                }
            }
        }
    }

    async fn serve(&mut self, stream: Box<dyn Stream>) -> Served {
        let (mut rd, wr) = tokio::io::split(stream);
        let (wtx, wrx) = mpsc::unbounded_channel::<Vec<u8>>();
        let backlog = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let wbacklog = backlog.clone();
        // Writes go through their own task so a slow reader never stalls our reads.
        let mut writer = tokio::spawn(write_out(wr, wrx, wbacklog));
        let mut buf = vec![0u8; 64 * 1024];
        let result = loop {
            while let Some(b) = self.session.poll_transmit() {
                let queued = backlog.fetch_add(b.len(), Ordering::Relaxed) + b.len();
                let _ = wtx.send(b);
                if queued > self.max_send_backlog {
                    self.session.abort(SessionError::SendBacklog(queued));
                }
            }
            self.dispatch();
            if std::mem::take(&mut self.moving) {
                // The member no longer leads: pending requests fail (the caller checks their
                // outcome) and the next member is tried.
                self.session.close_local();
                self.dispatch();
                break Served::Closed;
            }
            if self.session.is_closed() {
                break Served::Closed;
            }
            let timeout = self
                .session
                .poll_timeout()
                .map(tokio::time::Instant::from_std);
            tokio::select! {
                r = rd.read(&mut buf) => match r {
                    Ok(0) => self.session.handle_eof(),
                    Ok(n) => { let _ = self.session.handle_bytes(&buf[..n], Instant::now()); }
                    Err(_) => self.session.close_local(),
                },
                cmd = self.cmd_rx.recv() => {
                    if cmd.is_none_or(|c| self.command(c).is_some()) {
                        self.session.close_local();
                        self.dispatch();
                        break Served::Shutdown;
                    }
                }
                _ = async { match timeout { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                    self.session.handle_timeout(Instant::now());
                }
                _ = &mut writer => self.session.close_local(),
            }
        };
        drop(wtx);
        writer.abort();
        result
    }
}

/// The uuid of an inserted row in a transact result.
pub fn inserted(results: &[OpResult], index: usize) -> Option<Uuid> {
    results.get(index).and_then(OpResult::uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that keeps what it is given until flushed (as a TLS stream may keep its last
    /// records when the socket is full): every message still reaches the peer while the
    /// channel stays open.
    #[tokio::test]
    async fn the_writer_flushes_a_stream_that_buffers() {
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writer = tokio::spawn(write_out(
            tokio::io::BufWriter::with_capacity(1 << 20, ours),
            rx,
            backlog,
        ));
        for message in [&b"first"[..], b"second"] {
            tx.send(message.to_vec()).expect("the writer runs");
            let mut got = vec![0u8; message.len()];
            tokio::time::timeout(Duration::from_secs(10), theirs.read_exact(&mut got))
                .await
                .expect("the message went out without waiting for another")
                .expect("read");
            assert_eq!(got, message);
        }
        drop(tx);
        writer.await.expect("the writer ends with its channel");
    }

    #[test]
    fn parses_addresses() {
        assert_eq!(
            "unix:/a/b".parse::<Remote>(),
            Ok(Remote::Unix("/a/b".into()))
        );
        assert_eq!(
            "tcp:127.0.0.1:6640".parse::<Remote>(),
            Ok(Remote::Tcp("127.0.0.1:6640".parse().unwrap()))
        );
        assert_eq!(
            "tcp:[::1]:6640".parse::<Remote>(),
            Ok(Remote::Tcp("[::1]:6640".parse().unwrap()))
        );
        assert!("tcp:1.2.3.4".parse::<Remote>().is_err());
        assert_eq!(
            "ssl:10.0.0.1:6640".parse::<Remote>(),
            Ok(Remote::Ssl("10.0.0.1:6640".parse().unwrap()))
        );
        assert!("ssl:1.2.3.4".parse::<Remote>().is_err());
        assert!("udp:1.2.3.4:1".parse::<Remote>().is_err());
        assert_eq!(
            parse_passive_tls("pssl:6640:127.0.0.1"),
            Ok(("127.0.0.1:6640".parse().unwrap(), true))
        );
        assert_eq!(
            parse_passive_tls("ptcp:6640"),
            Ok(("0.0.0.0:6640".parse().unwrap(), false))
        );
        assert!(parse_passive_tls("pssl:x").is_err());
        assert!("unix:".parse::<Remote>().is_err());
        assert_eq!(
            parse_passive("ptcp:6640"),
            Ok("0.0.0.0:6640".parse().unwrap())
        );
        assert_eq!(
            parse_passive("ptcp:0:127.0.0.1"),
            Ok("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(
            parse_passive("ptcp:6640:[::1]"),
            Ok("[::1]:6640".parse().unwrap())
        );
        assert!(parse_passive("ptcp:x").is_err());
        assert!(parse_passive("tcp:1").is_err());
    }
}
