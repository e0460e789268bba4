//! The driver over an in-memory stream (`tokio::io::duplex`) with a scripted switch.

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::handle::start;
use super::*;
use crate::msg::{
    AsyncConfig, Body, Features, FlowStats, Hello, Message, MultipartBody, MultipartReply,
};
use crate::session::{SendError, SessionError, role};

const DPID: u64 = 0xabc;

async fn read(s: &mut DuplexStream) -> Option<Message> {
    let mut header = [0u8; 8];
    s.read_exact(&mut header).await.ok()?;
    let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    let mut buf = header.to_vec();
    buf.resize(len.max(8), 0);
    s.read_exact(&mut buf[8..]).await.ok()?;
    Message::decode(&buf).ok()
}

async fn write(s: &mut DuplexStream, xid: u32, body: Body) {
    let bytes = Message::new(xid, body)
        .encode()
        .expect("fake reply encodes");
    s.write_all(&bytes).await.expect("fake switch writes");
}

fn stats(priority: u16) -> FlowStats {
    FlowStats {
        table_id: 0,
        duration_sec: 0,
        duration_nsec: 0,
        priority,
        idle_timeout: 0,
        hard_timeout: 0,
        flags: 0,
        cookie: 0,
        packet_count: 0,
        byte_count: 0,
        match_: crate::oxm::Match::new(),
        instructions: Vec::new(),
    }
}

/// A switch that answers the handshake, role, async, barrier and flow-dump requests.
async fn fake_switch(mut s: DuplexStream) {
    let Some(_hello) = read(&mut s).await else {
        return;
    };
    write(&mut s, 1, Body::Hello(Hello::of13())).await;
    while let Some(m) = read(&mut s).await {
        let reply = match m.body {
            Body::FeaturesRequest => Body::FeaturesReply(Features {
                datapath_id: DPID,
                n_buffers: 0,
                n_tables: 254,
                auxiliary_id: 0,
                capabilities: 0,
                reserved: 0,
            }),
            Body::RoleRequest(r) => Body::RoleReply(r),
            Body::GetAsyncRequest => Body::GetAsyncReply(AsyncConfig {
                packet_in_mask: [1, 0],
                port_status_mask: [7, 7],
                flow_removed_mask: [0, 0],
            }),
            Body::BarrierRequest => Body::BarrierReply,
            Body::MultipartRequest(_) => {
                let part = MultipartReply {
                    flags: 1,
                    body: MultipartBody::Flow(vec![stats(1)]),
                };
                write(&mut s, m.xid, Body::MultipartReply(part)).await;
                let part = MultipartReply {
                    flags: 0,
                    body: MultipartBody::Flow(vec![stats(2)]),
                };
                Body::MultipartReply(part)
            }
            _ => continue,
        };
        write(&mut s, m.xid, reply).await;
    }
}

#[tokio::test]
async fn handle_api_over_an_in_memory_stream() {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let peer = tokio::spawn(fake_switch(theirs));
    let sw = start(ours, DriverConfig::default(), None)
        .await
        .expect("handshake");
    assert_eq!(sw.datapath_id(), DPID);
    assert!(matches!(*sw.state().borrow(), ConnState::Connected(_)));

    // Concurrent requests on clones are told apart by xid.
    let other = sw.clone();
    let (r, a) = tokio::join!(sw.set_role(role::MASTER, 4), other.get_async());
    assert_eq!(r.expect("role").role, role::MASTER);
    assert_eq!(a.expect("async").port_status_mask, [7, 7]);
    let flows = sw.dump_flows(FlowFilter::default()).await.expect("dump");
    assert_eq!(flows.iter().map(|f| f.priority).collect::<Vec<_>>(), [1, 2]);
    sw.barrier().await.expect("barrier");

    let mut events = sw.events();
    sw.close().await;
    assert_eq!(sw.closed().await, SessionError::Local);
    assert_eq!(
        events.recv().await.ok(),
        Some(SwitchEvent::Disconnected(SessionError::Local))
    );
    let err = sw.barrier().await.expect_err("closed");
    assert!(
        matches!(
            err,
            Error::Closed(SessionError::Local) | Error::Send(SendError::Closed(_))
        ),
        "{err}"
    );
    peer.await.expect("fake switch ends when we close");
}

/// A stream that keeps what it is given until flushed (as a TLS stream may keep its last
/// records when the socket is full): the handshake, requests and replies still go out.
#[tokio::test]
async fn a_stream_that_buffers_writes_is_flushed() {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let peer = tokio::spawn(fake_switch(theirs));
    let buffered = tokio::io::BufWriter::with_capacity(1 << 20, ours);
    let within = std::time::Duration::from_secs(10);
    let sw = tokio::time::timeout(within, start(buffered, DriverConfig::default(), None))
        .await
        .expect("the handshake went out without waiting for another write")
        .expect("handshake");
    assert_eq!(sw.datapath_id(), DPID);
    tokio::time::timeout(within, sw.barrier())
        .await
        .expect("the barrier went out without waiting for another write")
        .expect("barrier");
    sw.close().await;
    peer.await.expect("fake switch ends when we close");
}

/// A stream that fails its read with `UnexpectedEof` where the peer's side ends, as a TLS
/// stream does when the peer closes TCP without a `close_notify`.
struct EndsWithoutCloseNotify(DuplexStream);

impl tokio::io::AsyncRead for EndsWithoutCloseNotify {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut self.0).poll_read(cx, buf) {
            std::task::Poll::Ready(Ok(())) if buf.filled().len() == before => {
                std::task::Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "peer closed connection without sending TLS close_notify: https://docs.rs/rustls",
                )))
            }
            other => other,
        }
    }
}

impl tokio::io::AsyncWrite for EndsWithoutCloseNotify {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A switch that goes away without ending TLS (killed): the session closes with a reason a
/// user can read, not rustls's wording with a link to its manual.
#[tokio::test]
async fn a_peer_gone_without_close_notify_is_reported_plainly() {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let (gone_tx, gone_rx) = tokio::sync::oneshot::channel::<()>();
    // The fake switch, dropped (its side of the stream with it) when told to go.
    let peer = tokio::spawn(async move {
        tokio::select! {
            () = fake_switch(theirs) => {}
            _ = gone_rx => {}
        }
    });
    let start = start(EndsWithoutCloseNotify(ours), DriverConfig::default(), None);
    let sw = match tokio::time::timeout(std::time::Duration::from_secs(10), start).await {
        Ok(Ok(sw)) => sw,
        Ok(Err(e)) => panic!("handshake: {e}"),
        Err(_) => panic!("handshake timed out"),
    };
    let _ = gone_tx.send(());
    peer.await.expect("fake switch");
    let why = tokio::time::timeout(std::time::Duration::from_secs(10), sw.closed())
        .await
        .expect("the session closed");
    let SessionError::Io(text) = &why else {
        panic!("{why}");
    };
    assert!(
        text.contains("without ending TLS (no close_notify)"),
        "{text}"
    );
    assert!(!text.contains("https://"), "{text}");
}

#[tokio::test]
async fn incompatible_peer_fails_the_handshake() {
    let (ours, mut theirs) = tokio::io::duplex(1 << 16);
    let peer = tokio::spawn(async move {
        let _ = read(&mut theirs).await;
        let old = Hello {
            version: 1,
            bitmap: None,
            other: Vec::new(),
        };
        write(&mut theirs, 1, Body::Hello(old)).await;
        read(&mut theirs).await
    });
    let err = start(ours, DriverConfig::default(), None)
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, Error::Closed(SessionError::VersionMismatch { offered }) if offered == &[1]),
        "{err}"
    );
    let refusal = peer
        .await
        .expect("peer")
        .expect("HELLO_FAILED was flushed before closing");
    assert!(matches!(refusal.body, Body::Error(e) if e.err_type == 0 && e.code == 0));
}

#[tokio::test]
async fn dropping_every_handle_closes_the_connection() {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let peer = tokio::spawn(fake_switch(theirs));
    let sw = start(ours, DriverConfig::default(), None)
        .await
        .expect("handshake");
    drop(sw);
    tokio::time::timeout(std::time::Duration::from_secs(5), peer)
        .await
        .expect("the switch saw EOF")
        .expect("fake switch");
}
