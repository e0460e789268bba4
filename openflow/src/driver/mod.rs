//! The tokio driver for [`crate::session::Session`]: one task per switch connection, and a
//! cloneable [`SwitchHandle`] for the rest of the controller.
//!
//! Active mode dials a switch ([`connect`], [`connect_with_retry`], e.g. a bridge's
//! `unix:…/br-int.mgmt`); passive mode listens for switches ([`Listener`]). Either way a handle
//! exists only once HELLO and FEATURES completed, so it always knows its datapath id. Messages
//! are pipelined; a caller that wants to know they were applied asks for one
//! [`SwitchHandle::barrier`] per batch.
//!
//! `ssl:` and `pssl:` targets run TLS (`tls`, with tokio-rustls) under the session, with the
//! rustls configs in [`DriverConfig`]; a TLS peer's certificate is kept on its handle
//! ([`SwitchHandle::peer_certificate`]) for the caller to check the name it carries.
//!
//! This module and its submodules do I/O; [`crate::session`] below them does none.

mod conn;
mod error;
mod handle;
mod listener;
mod target;
#[cfg(test)]
mod tests;
mod tls;

pub use error::Error;
pub use handle::{ConnState, FlowFilter, QueuedBundle, SwitchEvent, SwitchHandle};
pub use listener::Listener;
pub use target::{ListenTarget, Target};

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};
pub use tokio_rustls::rustls;

use crate::session::Config;

/// The DER end-entity certificate a TLS peer presented.
pub type PeerCertificate = rustls::pki_types::CertificateDer<'static>;

/// Driver settings.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// TLS for `pssl:` listeners: the certificate presented, and whether (and against which CA)
    /// a switch must present one. A `pssl:` target without it is refused.
    pub tls_server: Option<Arc<rustls::ServerConfig>>,
    /// TLS for dialing `ssl:` targets. An `ssl:` target without it is refused.
    pub tls_client: Option<Arc<rustls::ClientConfig>>,
    /// The session's timers.
    pub session: Config,
    /// Commands a connection buffers before callers wait.
    pub command_queue: usize,
    /// Events buffered per subscriber before the oldest are dropped.
    pub event_queue: usize,
    /// Unwritten bytes above which no new commands are taken.
    pub high_water: usize,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            tls_server: None,
            tls_client: None,
            session: Config::default(),
            command_queue: 1024,
            event_queue: 4096,
            high_water: 4 << 20,
        }
    }
}

/// Dials `target` until a handshake completes or `give_up_after` has passed, backing off from
/// 100 ms to 2 s between attempts (as after `ovs-vswitchd` restarts: its management socket
/// reappears once it is up again). Returns the last error when it gives up.
pub async fn connect_with_retry(
    target: &str,
    config: DriverConfig,
    give_up_after: Duration,
) -> Result<SwitchHandle, Error> {
    let deadline = tokio::time::Instant::now() + give_up_after;
    let mut backoff = Duration::from_millis(100);
    loop {
        match connect(target, config.clone()).await {
            Ok(handle) => return Ok(handle),
            Err(e @ Error::Target { .. }) => return Err(e),
            Err(e) if tokio::time::Instant::now() + backoff > deadline => return Err(e),
            Err(_) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// Dials `target` (`tcp:IP:PORT`, `ssl:IP:PORT` or `unix:PATH`) and completes the handshake.
pub async fn connect(target: &str, config: DriverConfig) -> Result<SwitchHandle, Error> {
    match Target::parse(target)? {
        Target::Tcp(addr) => {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            handle::start(stream, config, None).await
        }
        Target::Ssl(addr) => {
            let Some(tls) = config.tls_client.clone() else {
                return Err(Error::Target {
                    target: target.to_string(),
                    why: "ssl: needs a TLS client configuration",
                });
            };
            let (stream, peer) = tls::dial(addr, tls, config.session.handshake_timeout).await?;
            handle::start(stream, config, peer).await
        }
        Target::Unix(path) => handle::start(UnixStream::connect(path).await?, config, None).await,
    }
}
