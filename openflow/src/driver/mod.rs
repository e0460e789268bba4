//! The tokio driver for [`crate::session::Session`]: one task per switch connection, and a
//! cloneable [`SwitchHandle`] for the rest of the controller.
//!
//! Active mode dials a switch ([`connect`], [`connect_with_retry`], e.g. a bridge's
//! `unix:…/br-int.mgmt`); passive mode listens for switches ([`Listener`]). Either way a handle
//! exists only once HELLO and FEATURES completed, so it always knows its datapath id. Messages
//! are pipelined; a caller that wants to know they were applied asks for one
//! [`SwitchHandle::barrier`] per batch. TLS is not supported.

mod conn;
mod error;
mod handle;
mod listener;
mod target;
#[cfg(test)]
mod tests;

pub use error::Error;
pub use handle::{ConnState, FlowFilter, SwitchEvent, SwitchHandle};
pub use listener::Listener;
pub use target::{ListenTarget, Target};

use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};

use crate::session::Config;

/// Driver settings.
#[derive(Debug, Clone)]
pub struct DriverConfig {
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

/// Dials `target` (`tcp:IP:PORT` or `unix:PATH`) and completes the handshake.
pub async fn connect(target: &str, config: DriverConfig) -> Result<SwitchHandle, Error> {
    match Target::parse(target)? {
        Target::Tcp(addr) => {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            handle::start(stream, config).await
        }
        Target::Unix(path) => handle::start(UnixStream::connect(path).await?, config).await,
    }
}
