//! Passive mode: switches connect to us (`ovs-vsctl set-controller BR tcp:…|ssl:…|unix:…`).

use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

use super::handle::{SwitchHandle, start};
use super::target::ListenTarget;
use super::{DriverConfig, Error};

/// Listens on `ptcp:`, `pssl:` or `punix:` and hands out each switch once its handshake
/// completed, so switches are known by datapath id from the start. Handshakes (TLS, then
/// HELLO and FEATURES) run concurrently: a slow or silent peer delays nobody and is dropped
/// when its handshake times out (the TLS one and the OpenFlow one each get the session's
/// handshake timeout). At most [`MAX_HANDSHAKES`] run at once (a connection before FEATURES
/// costs a few KiB, plus rustls's buffers with TLS); more wait in the kernel's backlog. A
/// peer that fails the TLS handshake (no certificate, one the CA did not sign) is closed and
/// logged at debug. An accept error (out of file descriptors, …) is retried with backoff: the
/// listener only stops when it is dropped.
#[derive(Debug)]
pub struct Listener {
    switches: mpsc::Receiver<SwitchHandle>,
    task: JoinHandle<()>,
    local_addr: Option<SocketAddr>,
    unix_path: Option<PathBuf>,
}

/// Handshakes in progress at once, per listener.
pub const MAX_HANDSHAKES: usize = 256;

/// The longest pause after a failed accept.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Listener {
    /// Binds `target` (`ptcp:PORT[:IP]`, `pssl:PORT[:IP]` with [`DriverConfig::tls_server`],
    /// or `punix:PATH`; a stale unix socket is replaced).
    pub async fn bind(target: &str, config: DriverConfig) -> Result<Self, Error> {
        let (tx, switches) = mpsc::channel(64);
        let (addr, tls) = match ListenTarget::parse(target)? {
            ListenTarget::Tcp(addr) => (addr, false),
            ListenTarget::Ssl(addr) => {
                if config.tls_server.is_none() {
                    return Err(Error::Target {
                        target: target.to_string(),
                        why: "pssl: needs a TLS server configuration",
                    });
                }
                (addr, true)
            }
            ListenTarget::Unix(path) => {
                let _ = std::fs::remove_file(&path);
                let l = Arc::new(UnixListener::bind(&path)?);
                let task = tokio::spawn(serve(
                    move || {
                        let l = l.clone();
                        async move { Ok(Incoming::Unix(l.accept().await?.0)) }
                    },
                    config,
                    tx,
                ));
                return Ok(Listener {
                    switches,
                    task,
                    local_addr: None,
                    unix_path: Some(path),
                });
            }
        };
        let l = TcpListener::bind(addr).await?;
        let local_addr = Some(l.local_addr()?);
        let l = Arc::new(l);
        let task = tokio::spawn(serve(
            move || {
                let l = l.clone();
                async move {
                    let (stream, _) = l.accept().await?;
                    let _ = stream.set_nodelay(true);
                    Ok(if tls {
                        Incoming::Tls(stream)
                    } else {
                        Incoming::Tcp(stream)
                    })
                }
            },
            config,
            tx,
        ));
        Ok(Listener {
            switches,
            task,
            local_addr,
            unix_path: None,
        })
    }

    /// The bound TCP address (useful with `ptcp:0`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// The next switch that connected and completed HELLO and FEATURES.
    pub async fn accept(&mut self) -> Result<SwitchHandle, Error> {
        self.switches
            .recv()
            .await
            .ok_or_else(|| Error::Io(std::io::Error::other("listener stopped")))
    }
}

/// An accepted connection, before any handshake.
enum Incoming {
    Tcp(TcpStream),
    /// A TCP connection on a `pssl:` listener.
    Tls(TcpStream),
    Unix(UnixStream),
}

impl Incoming {
    /// Runs the TLS handshake if there is one, then HELLO and FEATURES.
    async fn start(self, config: DriverConfig) -> Result<SwitchHandle, Error> {
        match self {
            Incoming::Tcp(stream) => start(stream, config, None).await,
            Incoming::Unix(stream) => start(stream, config, None).await,
            Incoming::Tls(stream) => {
                let Some(tls) = config.tls_server.clone() else {
                    return Err(Error::Io(std::io::Error::other("no TLS configuration")));
                };
                let peer = stream.peer_addr().ok();
                match super::tls::accept(stream, tls, config.session.handshake_timeout).await {
                    Ok((stream, cert)) => start(stream, config, cert).await,
                    Err(e) => {
                        tracing::debug!("OpenFlow listener: TLS handshake with {peer:?}: {e}");
                        Err(e)
                    }
                }
            }
        }
    }
}

/// Accepts with `accept` until the listener is dropped, running each handshake on its own.
async fn serve<F, Fut>(mut accept: F, config: DriverConfig, tx: mpsc::Sender<SwitchHandle>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::io::Result<Incoming>>,
{
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let mut backoff = Backoff::default();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match accept().await {
            Ok(stream) => {
                backoff.reset();
                handshake(stream, config.clone(), tx.clone(), slot);
            }
            Err(e) => backoff.wait(&e).await,
        }
    }
}

fn handshake(
    stream: Incoming,
    config: DriverConfig,
    tx: mpsc::Sender<SwitchHandle>,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    tokio::spawn(async move {
        // A failed handshake only ends that connection.
        let started = stream.start(config).await;
        drop(slot);
        if let Ok(handle) = started {
            let _ = tx.send(handle).await;
        }
    });
}

/// Pauses after failed accepts, from 10 ms doubling to [`ACCEPT_BACKOFF_MAX`].
#[derive(Default)]
struct Backoff {
    next: Option<Duration>,
}

impl Backoff {
    fn reset(&mut self) {
        self.next = None;
    }

    async fn wait(&mut self, e: &std::io::Error) {
        let pause = self.next.unwrap_or(Duration::from_millis(10));
        tracing::warn!("OpenFlow listener: accept failed ({e}); retrying in {pause:?}");
        tokio::time::sleep(pause).await;
        self.next = Some((pause * 2).min(ACCEPT_BACKOFF_MAX));
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(path) = &self.unix_path {
            let _ = std::fs::remove_file(path);
        }
    }
}
