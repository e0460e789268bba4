//! Passive mode: switches connect to us (`ovs-vsctl set-controller BR tcp:…|unix:…`).

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::handle::{SwitchHandle, start};
use super::target::ListenTarget;
use super::{DriverConfig, Error};

/// Listens on `ptcp:` or `punix:` and hands out each switch once its handshake completed, so
/// switches are known by datapath id from the start. Handshakes run concurrently: a slow or
/// silent peer delays nobody and is dropped when its handshake times out.
#[derive(Debug)]
pub struct Listener {
    switches: mpsc::Receiver<SwitchHandle>,
    task: JoinHandle<()>,
    local_addr: Option<SocketAddr>,
    unix_path: Option<PathBuf>,
}

impl Listener {
    /// Binds `target` (`ptcp:PORT[:IP]` or `punix:PATH`; a stale unix socket is replaced).
    pub async fn bind(target: &str, config: DriverConfig) -> Result<Self, Error> {
        let (tx, switches) = mpsc::channel(64);
        match ListenTarget::parse(target)? {
            ListenTarget::Tcp(addr) => {
                let l = TcpListener::bind(addr).await?;
                let local_addr = Some(l.local_addr()?);
                let task = tokio::spawn(async move {
                    while let Ok((stream, _)) = l.accept().await {
                        let _ = stream.set_nodelay(true);
                        handshake(stream, config.clone(), tx.clone());
                    }
                });
                Ok(Listener {
                    switches,
                    task,
                    local_addr,
                    unix_path: None,
                })
            }
            ListenTarget::Unix(path) => {
                let _ = std::fs::remove_file(&path);
                let l = UnixListener::bind(&path)?;
                let task = tokio::spawn(async move {
                    while let Ok((stream, _)) = l.accept().await {
                        handshake(stream, config.clone(), tx.clone());
                    }
                });
                Ok(Listener {
                    switches,
                    task,
                    local_addr: None,
                    unix_path: Some(path),
                })
            }
        }
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

fn handshake<S>(stream: S, config: DriverConfig, tx: mpsc::Sender<SwitchHandle>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    tokio::spawn(async move {
        // A failed handshake only ends that connection.
        if let Ok(handle) = start(stream, config).await {
            let _ = tx.send(handle).await;
        }
    });
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(path) = &self.unix_path {
            let _ = std::fs::remove_file(path);
        }
    }
}
