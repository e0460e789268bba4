//! HTTPS for the REST listener: each connection's TLS handshake runs on its first read or
//! write ([`MaybeTls`]), inside the task that serves the connection, so a slow or silent
//! client holds up no other accept, and the idle timeout of [`super::limits::IdleListener`]
//! bounds the handshake too. The rustls configs are built by the daemon (certificates, CA,
//! whether a client certificate is asked for); [`TlsConfig`] only carries them.
//!
//! I/O: the listener and the stream wrapper.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::limits::{IdleListener, IdleStream};

/// A rustls config in [`super::RestConfig`], compared by identity (rustls configs have no
/// equality).
#[derive(Debug)]
pub struct TlsConfig<T>(pub Arc<T>);

impl<T> Clone for TlsConfig<T> {
    fn clone(&self) -> Self {
        TlsConfig(self.0.clone())
    }
}

impl<T> PartialEq for TlsConfig<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T> Eq for TlsConfig<T> {}

/// The REST listener: plain, or TLS when given a server config.
pub struct RestListener {
    inner: IdleListener,
    tls: Option<TlsAcceptor>,
}

impl RestListener {
    /// Wraps `inner`; with `tls`, every connection is HTTPS.
    pub fn new(inner: IdleListener, tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>) -> Self {
        Self {
            inner,
            tls: tls.map(TlsAcceptor::from),
        }
    }
}

impl axum::serve::Listener for RestListener {
    type Io = MaybeTls<IdleStream<TcpStream>>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        let io = match &self.tls {
            Some(tls) => MaybeTls::Handshaking(Box::new(tls.accept(stream))),
            None => MaybeTls::Plain(stream),
        };
        (io, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        axum::serve::Listener::local_addr(&self.inner)
    }
}

/// A server-side stream that is plain, or TLS whose handshake completes on first use.
pub enum MaybeTls<S> {
    /// No TLS.
    Plain(S),
    /// The TLS handshake, not yet done.
    Handshaking(Box<tokio_rustls::Accept<S>>),
    /// TLS, after the handshake.
    Tls(Box<tokio_rustls::server::TlsStream<S>>),
    /// The handshake failed; every further use fails.
    Failed,
}

impl<S: AsyncRead + AsyncWrite + Unpin> MaybeTls<S> {
    /// Drives the handshake, if one is in progress.
    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let MaybeTls::Handshaking(accept) = self {
            match Pin::new(&mut **accept).poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(stream)) => *self = MaybeTls::Tls(Box::new(stream)),
                Poll::Ready(Err(e)) => {
                    tracing::debug!("REST: TLS handshake failed: {e}");
                    *self = MaybeTls::Failed;
                    return Poll::Ready(Err(e));
                }
            }
        }
        match self {
            MaybeTls::Failed => Poll::Ready(Err(io::Error::other("the TLS handshake failed"))),
            _ => Poll::Ready(Ok(())),
        }
    }
}

/// Runs `$op` on the ready stream once the handshake is done.
macro_rules! ready_stream {
    ($self:ident, $cx:ident, $stream:ident => $op:expr) => {{
        let this = $self.get_mut();
        match this.poll_handshake($cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match this {
            MaybeTls::Plain($stream) => {
                let mut $stream = Pin::new($stream);
                $op
            }
            MaybeTls::Tls($stream) => {
                let mut $stream = Pin::new(&mut **$stream);
                $op
            }
            MaybeTls::Handshaking(_) | MaybeTls::Failed => {
                Poll::Ready(Err(io::Error::other("the TLS handshake failed")))
            }
        }
    }};
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        ready_stream!(self, cx, s => s.as_mut().poll_read(cx, buf))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready_stream!(self, cx, s => s.as_mut().poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready_stream!(self, cx, s => s.as_mut().poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready_stream!(self, cx, s => s.as_mut().poll_shutdown(cx))
    }
}
