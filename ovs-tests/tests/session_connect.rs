//! Connecting our session to a real `ovs-vswitchd` in both modes, losing it and finding it
//! again, and telling apart dead or broken peers (scripted fake switches).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod session_util;

use std::time::{Duration, Instant};

use openflow::action::{Action, OFPP_CONTROLLER};
use openflow::driver::{self, ConnState, DriverConfig, Error, Listener, SwitchEvent};
use openflow::msg::{Body, ErrorMsg, Hello, PacketOut};
use openflow::session::{Config, RequestError, SessionError};
use session_util::{
    BR, accept, connect_mgmt, fake, flow, flow_body, listen_as_controller, sandbox,
};

/// `OFPFF_SEND_FLOW_REM` (OF1.3 §7.3.4.1).
const OFPFF_SEND_FLOW_REM: u16 = 1;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UnixStream};

/// The bridge's datapath id as OVSDB reports it.
fn ovsdb_dpid(sb: &ovs_tests::Sandbox) -> u64 {
    let text = sb.vsctl(&["get", "bridge", BR, "datapath_id"]).unwrap();
    u64::from_str_radix(text.trim().trim_matches('"'), 16).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_mode_dials_the_management_socket() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    assert_eq!(sw.datapath_id(), ovsdb_dpid(&sb));
    assert_eq!(sw.features().n_tables, 254);
    assert!(matches!(*sw.state().borrow(), ConnState::Connected(_)));
    sw.barrier().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_mode_switch_connects_and_reports_port_status() {
    let sb = sandbox();
    let mut listener = listen_as_controller(&sb, "ctl").await;
    let sw = accept(&mut listener, 20).await;
    assert_eq!(sw.datapath_id(), ovsdb_dpid(&sb));
    let mut events = sw.events();
    tokio::task::block_in_place(|| sb.add_internal_port(BR, "p5", 5)).unwrap();
    let port = next_event(&mut events, |e| match e {
        SwitchEvent::PortStatus(p) if p.desc.port_no == 5 => Some(p),
        _ => None,
    })
    .await;
    assert_eq!(port.desc.name, "p5");
    // The controller connection may program the bridge.
    sw.bundle((0..100).map(flow_body).collect()).await.unwrap();
    let text = tokio::task::block_in_place(|| sb.dump_flows(BR)).unwrap();
    assert_eq!(text.lines().filter(|l| l.contains("nw_dst")).count(), 100);

    // PACKET_IN: a packet-out whose action sends the packet back to the controller.
    let frame: Vec<u8> = [[0xff; 6], [2, 0, 0, 0, 0, 1]]
        .concat()
        .into_iter()
        .chain([0x88, 0xb5])
        .chain(std::iter::repeat_n(0x5a, 46))
        .collect();
    let out = PacketOut {
        buffer_id: u32::MAX,
        in_port: OFPP_CONTROLLER,
        actions: vec![Action::Output {
            port: OFPP_CONTROLLER,
            max_len: u16::MAX,
        }],
        data: frame.clone(),
    };
    sw.send(Body::PacketOut(out)).await.unwrap();
    let packet_in = next_event(&mut events, |e| match e {
        SwitchEvent::PacketIn(p) => Some(p),
        _ => None,
    })
    .await;
    assert_eq!(packet_in.data, frame);

    // FLOW_REMOVED: a flow that asks to be reported when its hard timeout expires.
    let mut expiring = flow(7_777);
    expiring.hard_timeout = 1;
    expiring.flags = OFPFF_SEND_FLOW_REM;
    expiring.cookie = 0xdead;
    sw.send(Body::FlowMod(expiring)).await.unwrap();
    sw.barrier().await.unwrap();
    let removed = next_event(&mut events, |e| match e {
        SwitchEvent::FlowRemoved(f) => Some(f),
        _ => None,
    })
    .await;
    assert_eq!(removed.cookie, 0xdead);
}

/// The first event `pick` accepts, within 10 s.
async fn next_event<T>(
    events: &mut tokio::sync::broadcast::Receiver<SwitchEvent>,
    pick: impl Fn(SwitchEvent) -> Option<T>,
) -> T {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(t) = pick(events.recv().await.unwrap()) {
                return t;
            }
        }
    })
    .await
    .expect("the event within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_switch_is_found_again_in_both_modes() {
    let mut sb = sandbox();
    let mut listener = listen_as_controller(&sb, "ctl").await;
    let passive = accept(&mut listener, 20).await;
    let active = connect_mgmt(&sb).await;
    let dpid = active.datapath_id();
    active
        .bundle((0..10).map(flow_body).collect())
        .await
        .unwrap();

    tokio::task::block_in_place(|| sb.restart_vswitchd()).unwrap();
    for sw in [&active, &passive] {
        let why = tokio::time::timeout(Duration::from_secs(10), sw.closed())
            .await
            .unwrap();
        assert!(
            matches!(why, SessionError::Eof | SessionError::Io(_)),
            "{why}"
        );
        let err = sw.barrier().await.unwrap_err();
        assert!(matches!(err, Error::Closed(_) | Error::Send(_)), "{err}");
    }
    // The switch dials the controller again by itself (OVS backs off for up to 8 s).
    let passive = accept(&mut listener, 30).await;
    assert_eq!(passive.datapath_id(), dpid);
    // Active mode dials again (the management socket is back once ovs-vswitchd is up).
    let target = sb.mgmt_target(BR);
    let active =
        driver::connect_with_retry(&target, DriverConfig::default(), Duration::from_secs(20))
            .await
            .unwrap();
    assert_eq!(active.datapath_id(), dpid);
    assert!(
        active
            .dump_flows(Default::default())
            .await
            .unwrap()
            .is_empty(),
        "a restart loses flows"
    );
    passive
        .bundle((0..10).map(flow_body).collect())
        .await
        .unwrap();
    assert_eq!(
        active.dump_flows(Default::default()).await.unwrap().len(),
        10
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_dial_gives_up_with_the_last_error() {
    let started = Instant::now();
    let missing = format!(
        "unix:{}/no-such-switch.mgmt",
        std::env::temp_dir().display()
    );
    let err = driver::connect_with_retry(
        &missing,
        DriverConfig::default(),
        Duration::from_millis(500),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Io(_)), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let err = driver::connect_with_retry(
        "ssl:1.2.3.4:6653",
        DriverConfig::default(),
        Duration::from_secs(60),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Target { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_listener_accepts_a_switch_and_refuses_other_versions() {
    let mut listener = Listener::bind("ptcp:0:127.0.0.1", DriverConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();

    // An OpenFlow 1.0-only peer is told HELLO_FAILED and dropped.
    let mut old = TcpStream::connect(addr).await.unwrap();
    let ours = fake::read(&mut old).await.unwrap();
    assert!(matches!(&ours.body, Body::Hello(h) if h.versions() == [4]));
    fake::write(
        &mut old,
        1,
        Body::Hello(Hello {
            version: 1,
            bitmap: None,
            other: vec![],
        }),
    )
    .await;
    let refusal = fake::read(&mut old).await.unwrap();
    let Body::Error(ErrorMsg {
        err_type: 0,
        code: 0,
        data,
        ..
    }) = &refusal.body
    else {
        panic!("expected HELLO_FAILED/INCOMPATIBLE, got {refusal}");
    };
    assert!(String::from_utf8_lossy(data).contains("0x04"));
    assert!(fake::read(&mut old).await.is_err(), "connection closed");

    // A real OF1.3 peer gets through and is known by its datapath id.
    let peer = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        fake::handshake(&mut s).await;
        let m = fake::read(&mut s).await.unwrap();
        assert_eq!(m.body, Body::BarrierRequest);
        fake::write(&mut s, m.xid, Body::BarrierReply).await;
        s
    });
    let sw = accept(&mut listener, 10).await;
    assert_eq!(sw.datapath_id(), fake::DPID);
    sw.barrier().await.unwrap();
    drop(peer.await.unwrap());
    assert_eq!(sw.closed().await, SessionError::Eof);
}

/// Dials a fake switch on a unix socket; returns our handle and the switch's end once the
/// handshake is done.
async fn fake_session(config: Config) -> (openflow::driver::SwitchHandle, UnixStream) {
    let dir = std::env::temp_dir().join(format!(
        "of-session-{}-{:?}",
        std::process::id(),
        Instant::now()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sw.sock");
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    let target = format!("unix:{}", path.display());
    let dial = tokio::spawn(async move {
        driver::connect(
            &target,
            DriverConfig {
                session: config,
                ..DriverConfig::default()
            },
        )
        .await
    });
    let (mut s, _) = listener.accept().await.unwrap();
    fake::handshake(&mut s).await;
    let sw = dial.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (sw, s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_that_stops_answering_echo_is_declared_dead() {
    let config = Config {
        echo_interval: Duration::from_millis(200),
        echo_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let (sw, mut peer) = fake_session(config).await;
    let started = Instant::now();
    // The peer keeps the socket open but never answers: the barrier must not hang.
    let err = sw.barrier().await.unwrap_err();
    let Error::Request(RequestError::Closed(SessionError::EchoTimeout(silence))) = err else {
        panic!("expected an echo timeout, got {err}");
    };
    assert!(silence >= Duration::from_millis(500), "{silence:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // It did get an echo request first.
    let mut seen = Vec::new();
    while let Ok(Ok(m)) =
        tokio::time::timeout(Duration::from_millis(200), fake::read(&mut peer)).await
    {
        seen.push(m.body);
    }
    assert!(seen.contains(&Body::BarrierRequest), "{seen:?}");
    assert!(
        seen.iter().any(|b| matches!(b, Body::EchoRequest(_))),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_that_talks_but_stops_reading_is_dropped() {
    let config = Config {
        echo_interval: Duration::from_millis(200),
        echo_timeout: Duration::from_millis(300),
        ..Config::default()
    };
    let (sw, peer) = fake_session(config).await;
    let (_rd, mut wr) = peer.into_split();
    let chatter = tokio::spawn(async move {
        let mut xid = 100;
        loop {
            xid += 1;
            fake::write(&mut wr, xid, Body::EchoRequest(vec![])).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    // Far more than the socket buffers hold.
    let started = Instant::now();
    let err = sw
        .bundle((0..200_000).map(flow_body).collect())
        .await
        .unwrap_err();
    let Error::Request(RequestError::Closed(SessionError::Io(why))) = &err else {
        panic!("expected a write stall, got {err}");
    };
    assert!(why.contains("read nothing"), "{why}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    chatter.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_answering_echo_stays_up() {
    let config = Config {
        echo_interval: Duration::from_millis(100),
        echo_timeout: Duration::from_millis(1000),
        ..Config::default()
    };
    let (sw, mut peer) = fake_session(config).await;
    let echoer = tokio::spawn(async move {
        let mut echoes = 0;
        while let Ok(m) = fake::read(&mut peer).await {
            if let Body::EchoRequest(d) = m.body {
                fake::write(&mut peer, m.xid, Body::EchoReply(d)).await;
                echoes += 1;
            }
        }
        echoes
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(!sw.is_closed());
    sw.close().await;
    assert_eq!(sw.closed().await, SessionError::Local);
    assert!(echoer.await.unwrap() >= 4);
}

/// What cannot be framed closes the session with a typed error. (A whole message that does not
/// decode does not: it is answered with an error and the session goes on; see
/// `openflow`'s session tests and `tests/hostile.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_closes_with_a_typed_error() {
    for (garbage, check) in [
        (vec![4u8, 0, 0, 3, 0, 0, 0, 1], "bad message length 3"),
        (vec![1u8, 2, 0, 8, 0, 0, 0, 1], "version 0x01"),
        (vec![4u8, 2, 0, 200, 0, 0], "inside a message"),
    ] {
        let (sw, mut peer) = fake_session(Config::default()).await;
        peer.write_all(&garbage).await.unwrap();
        peer.shutdown().await.unwrap();
        let why = tokio::time::timeout(Duration::from_secs(5), sw.closed())
            .await
            .unwrap();
        assert!(why.to_string().contains(check), "{garbage:?}: {why}");
    }
}
