//! A fake OVSDB peer on loopback TCP sends hostile input; the client must report an error and
//! close the session, never panic, hang or buffer without bound.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::time::Duration;

use ovsdb::client::{Client, ClientConfig, ClientEvent};
use ovsdb::framer::FrameError;
use ovsdb::{RequestError, SessionError};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Runs a fake server that writes `payload` (repeated `repeat` times) and then either closes or
/// lingers. Returns the session error and the bytes the peer managed to write.
async fn against(
    prefix: &[u8],
    chunk: Vec<u8>,
    repeat: usize,
    close: bool,
) -> (SessionError, usize) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let prefix = prefix.to_vec();
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut written = 0usize;
        if s.write_all(&prefix).await.is_ok() {
            written += prefix.len();
            for _ in 0..repeat {
                if s.write_all(&chunk).await.is_err() {
                    break;
                }
                written += chunk.len();
            }
        }
        if !close {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        written
    });
    let stream = TcpStream::connect(addr).await.unwrap();
    let (client, mut ev) = Client::from_stream(stream, ClientConfig::default());
    let pending = tokio::spawn({
        let c = client.clone();
        async move { c.list_dbs().await }
    });
    let err = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match ev.recv().await {
                Some(ClientEvent::Disconnected(e)) => return e,
                Some(_) => {}
                None => panic!("events ended without Disconnected"),
            }
        }
    })
    .await
    .expect("client did not close the session");
    // The pending request fails instead of hanging, and later calls fail fast.
    let r = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("pending call hung")
        .unwrap();
    assert!(
        matches!(r, Err(ovsdb::Error::Request(RequestError::Disconnected))),
        "{r:?}"
    );
    let r = tokio::time::timeout(Duration::from_secs(5), client.list_dbs())
        .await
        .expect("call hung");
    assert!(r.is_err());
    let written = if close {
        peer.await.unwrap()
    } else {
        peer.abort();
        0
    };
    (err, written)
}

#[tokio::test]
async fn garbage_bytes() {
    let (e, _) = against(
        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03garbage",
        vec![],
        0,
        false,
    )
    .await;
    assert!(
        matches!(e, SessionError::Frame(FrameError::NotAnObject { .. })),
        "{e:?}"
    );
}

#[tokio::test]
async fn invalid_json_inside_object() {
    let (e, _) = against(br#"{"id":1,"result":[1,2,,]}"#, vec![], 0, false).await;
    assert!(matches!(e, SessionError::Message(_)), "{e:?}");
}

#[tokio::test]
async fn unterminated_json_then_close() {
    let (e, _) = against(br#"{"id":1,"result":["Open_vSwitch""#, vec![], 0, true).await;
    assert_eq!(e, SessionError::Truncated);
}

#[tokio::test]
async fn hundred_megabyte_string() {
    let chunk = vec![b'x'; 1 << 20];
    let (e, written) = against(br#"{"id":1,"result":""#, chunk, 100, true).await;
    let limit = ovsdb::framer::FramerLimits::default().max_message_size;
    assert_eq!(e, SessionError::Frame(FrameError::TooLarge { limit }));
    // The client stopped reading at the limit; the peer could not push all 100 MB
    // beyond what socket buffers hold.
    assert!(written < limit + (16 << 20), "peer wrote {written} bytes");
}

#[tokio::test]
async fn nested_hundred_thousand_levels() {
    let chunk = vec![b'['; 100_000];
    let (e, _) = against(br#"{"id":1,"result":"#, chunk, 1, false).await;
    assert!(
        matches!(e, SessionError::Frame(FrameError::TooDeep { .. })),
        "{e:?}"
    );
}

#[tokio::test]
async fn jsonrpc_reply_with_unknown_id_is_ignored_then_bad_update_closes() {
    let (e, _) = against(
        br#"{"id":999,"result":[],"error":null}{"id":null,"method":"update","params":["m",[]]}"#,
        vec![],
        0,
        false,
    )
    .await;
    assert!(matches!(e, SessionError::Protocol { .. }), "{e:?}");
}

#[tokio::test]
async fn peer_that_never_reads_is_dropped() {
    // The peer floods echo requests and never reads our replies.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let pad = "x".repeat(1024);
        for i in 0..20_000u32 {
            let m = format!(r#"{{"id":{i},"method":"echo","params":["{pad}"]}}"#);
            if s.write_all(m.as_bytes()).await.is_err() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let stream = TcpStream::connect(addr).await.unwrap();
    let cfg = ClientConfig {
        max_send_backlog: 1 << 20,
        ..Default::default()
    };
    let (_client, mut ev) = Client::from_stream(stream, cfg);
    let e = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(ClientEvent::Disconnected(e)) = ev.recv().await {
                return e;
            }
        }
    })
    .await
    .expect("session closed");
    assert!(matches!(e, SessionError::SendBacklog(_)), "{e:?}");
    peer.abort();
}
