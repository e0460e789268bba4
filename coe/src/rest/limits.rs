//! What one REST client can hold: a connection that sends nothing for [`IDLE_TIMEOUT`] is
//! closed ([`IdleListener`]), and request bodies together may hold at most
//! [`BODY_BUDGET_BYTES`] at once ([`BodyBudget`]); a request that would go beyond it is
//! answered 503 at once rather than queued.
//!
//! I/O: the listener and the stream wrapper. The budget is plain bookkeeping.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// How long a connection may send nothing (between requests, or inside one) before it is
/// closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The bytes all request bodies being read may hold together.
pub const BODY_BUDGET_BYTES: usize = 256 << 20;

/// A TCP listener whose connections close after [`IDLE_TIMEOUT`] without a byte from the
/// client. Accept errors (out of descriptors, …) are retried after a pause: the listener
/// never ends.
pub struct IdleListener {
    inner: TcpListener,
    idle: Duration,
}

impl IdleListener {
    /// Wraps `inner`.
    pub fn new(inner: TcpListener, idle: Duration) -> Self {
        Self { inner, idle }
    }
}

impl axum::serve::Listener for IdleListener {
    type Io = IdleStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    return (IdleStream::new(stream, self.idle), addr);
                }
                Err(e) => {
                    tracing::warn!("REST listener: accept failed ({e}); retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A stream whose reads fail with `TimedOut` once the peer has sent nothing for `idle`.
pub struct IdleStream<S> {
    inner: S,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl<S> IdleStream<S> {
    fn new(inner: S, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for IdleStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    let at = Instant::now() + self.idle;
                    self.deadline.as_mut().reset(at);
                }
                Poll::Ready(r)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent nothing for too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for IdleStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The bytes request bodies may hold together, in KiB permits.
#[derive(Clone)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    max_body: usize,
}

impl BodyBudget {
    /// A budget of `total` bytes, for bodies of at most `max_body` bytes each.
    pub fn new(total: usize, max_body: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(kib(total) as usize)),
            max_body,
        }
    }

    /// Reserves room for a body of `declared` bytes (its `Content-Length`; the most a body
    /// may be when it has none), or `None` when the budget is spent.
    pub fn reserve(&self, declared: Option<usize>) -> Option<OwnedSemaphorePermit> {
        let bytes = declared.unwrap_or(self.max_body).min(self.max_body);
        self.permits.clone().try_acquire_many_owned(kib(bytes)).ok()
    }
}

/// Bytes in KiB permits, rounded up (at least one).
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_bodies_beyond_it_and_frees_their_room_when_done() {
        let b = BodyBudget::new(10 << 20, 8 << 20);
        let big = b.reserve(Some(8 << 20)).expect("8 MiB fits");
        assert!(b.reserve(Some(4 << 20)).is_none(), "12 MiB does not");
        assert!(
            b.reserve(None).is_none(),
            "an undeclared body counts as the largest"
        );
        let small = b.reserve(Some(100)).expect("1 KiB still fits");
        drop(big);
        assert!(b.reserve(Some(4 << 20)).is_some());
        drop(small);
    }

    #[tokio::test]
    async fn a_silent_client_is_cut_off() {
        let (client, server) = tokio::io::duplex(64);
        let mut s = IdleStream::new(server, Duration::from_millis(50));
        let mut buf = [0u8; 8];
        let err = tokio::io::AsyncReadExt::read(&mut s, &mut buf)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(client);
    }
}
