//! Sans-IO tests with simulated time: a [`Session`] against a scripted in-memory switch.

use std::time::{Duration, Instant};

use super::*;
use crate::msg::{
    ErrorMsg, FlowMod, FlowStats, Hello, MultipartBody, MultipartReply, MultipartRequest,
    ONF_EXPERIMENTER, Role, ofpt,
};

const DPID: u64 = 0x0000_1234_5678_9abc;
const SEC: Duration = Duration::from_secs(1);

/// Decodes every message in `bytes`.
fn frames(bytes: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some(len) = Message::frame_len(rest) {
        let (one, tail) = rest.split_at(len);
        out.push(Message::decode(one).expect("our own output decodes"));
        rest = tail;
    }
    assert!(rest.is_empty(), "partial message in output");
    out
}

fn sent(s: &mut Session) -> Vec<Message> {
    s.poll_transmit().map(|b| frames(&b)).unwrap_or_default()
}

fn events(s: &mut Session) -> Vec<Event> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn feed(s: &mut Session, xid: u32, body: Body, now: Instant) {
    let bytes = Message::new(xid, body)
        .encode()
        .expect("test message encodes");
    s.handle_bytes(&bytes, now);
}

fn features() -> Features {
    Features {
        datapath_id: DPID,
        n_buffers: 0,
        n_tables: 254,
        auxiliary_id: 0,
        capabilities: 0x4f,
        reserved: 0,
    }
}

fn error(err_type: u16, code: u16) -> ErrorMsg {
    ErrorMsg {
        err_type,
        code,
        experimenter: None,
        data: Vec::new(),
    }
}

/// A session that has completed HELLO and FEATURES at `t0`.
fn connected(t0: Instant) -> Session {
    let mut s = Session::new(Config::default(), t0);
    let out = sent(&mut s);
    assert!(matches!(&out[..], [Message { body: Body::Hello(h), .. }] if h.versions() == [4]));
    // OVS offers every version the bridge allows: here OF1.0 to OF1.3.
    let hello = Hello {
        version: 4,
        bitmap: Some(vec![0b1_1110]),
        other: Vec::new(),
    };
    feed(&mut s, 7, Body::Hello(hello), t0);
    let out = sent(&mut s);
    let [
        Message {
            xid,
            body: Body::FeaturesRequest,
        },
    ] = out[..]
    else {
        panic!("expected FEATURES_REQUEST, got {out:?}");
    };
    feed(&mut s, xid, Body::FeaturesReply(features()), t0);
    assert_eq!(events(&mut s), vec![Event::Connected(features())]);
    assert_eq!(s.datapath_id(), Some(DPID));
    s
}

fn flow(n: u32) -> Body {
    use crate::field::Field;
    let match_ = crate::oxm::Match::new()
        .with(Field::EthType, 0x0800u16)
        .with(Field::Ipv4Dst, 0x0a00_0000 | n);
    Body::FlowMod(FlowMod {
        priority: 100,
        match_,
        ..FlowMod::default()
    })
}

fn done(ev: &[Event]) -> Vec<(Token, Result<Reply, RequestError>)> {
    ev.iter()
        .filter_map(|e| match e {
            Event::Done { token, result } => Some((*token, result.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn handshake_gives_datapath_id() {
    let s = connected(Instant::now());
    assert_eq!(s.features().map(|f| f.n_tables), Some(254));
}

#[test]
fn api_refuses_before_connect() {
    let mut s = Session::new(Config::default(), Instant::now());
    assert_eq!(s.send(flow(1)), Err(SendError::NotConnected));
    assert_eq!(s.barrier(), Err(SendError::NotConnected));
}

#[test]
fn peer_without_of13_gets_hello_failed() {
    for hello in [
        Hello {
            version: 1,
            bitmap: None,
            other: Vec::new(),
        },
        Hello {
            version: 6,
            bitmap: Some(vec![(1 << 1) | (1 << 5) | (1 << 6)]),
            other: Vec::new(),
        },
    ] {
        let t0 = Instant::now();
        let mut s = Session::new(Config::default(), t0);
        sent(&mut s);
        let offered = hello.versions();
        feed(&mut s, 99, Body::Hello(hello), t0);
        let out = sent(&mut s);
        let [
            Message {
                xid: 99,
                body: Body::Error(e),
            },
        ] = &out[..]
        else {
            panic!("expected one error, got {out:?}");
        };
        assert_eq!(
            (e.err_type, e.code),
            (OFPET_HELLO_FAILED, OFPHFC_INCOMPATIBLE)
        );
        assert_eq!(e.name(), Some("OFPHFC_INCOMPATIBLE"));
        assert_eq!(
            events(&mut s),
            vec![Event::Closed(SessionError::VersionMismatch { offered })]
        );
        assert!(s.is_closed());
    }
}

#[test]
fn hello_failed_from_peer_closes() {
    let t0 = Instant::now();
    let mut s = Session::new(Config::default(), t0);
    let hello = Hello {
        version: 4,
        bitmap: None,
        other: Vec::new(),
    };
    feed(&mut s, 1, Body::Hello(hello), t0);
    let mut e = error(0, 0);
    e.data = b"no".to_vec();
    feed(&mut s, 1, Body::Error(e), t0);
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::HelloFailed("no".into()))]
    );
}

#[test]
fn hello_failed_instead_of_hello_closes() {
    let t0 = Instant::now();
    let mut s = Session::new(Config::default(), t0);
    // An OF1.0 header: the codec would refuse the version, the session still reads the text.
    let mut bytes = vec![1, ofpt::ERROR, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0];
    bytes.extend_from_slice(b"no");
    s.handle_bytes(&bytes, t0);
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::HelloFailed("no".into()))]
    );
}

#[test]
fn first_message_must_be_hello() {
    let t0 = Instant::now();
    let mut s = Session::new(Config::default(), t0);
    feed(&mut s, 1, Body::EchoRequest(vec![]), t0);
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::NoHello(ofpt::ECHO_REQUEST))]
    );
}

#[test]
fn answers_echo_requests() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    feed(&mut s, 0x77, Body::EchoRequest(b"ping".to_vec()), t0);
    assert_eq!(
        sent(&mut s),
        vec![Message::new(0x77, Body::EchoReply(b"ping".to_vec()))]
    );
}

#[test]
fn silent_peer_is_probed_then_declared_dead() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s.request(Body::GetAsyncRequest).expect("queued");
    sent(&mut s);
    assert_eq!(s.poll_timeout(), Some(t0 + 5 * SEC));
    s.handle_timeout(t0 + 4 * SEC);
    assert_eq!(s.poll_transmit(), None);
    s.handle_timeout(t0 + 5 * SEC);
    assert!(matches!(
        &sent(&mut s)[..],
        [Message {
            body: Body::EchoRequest(_),
            ..
        }]
    ));
    assert_eq!(s.poll_timeout(), Some(t0 + 15 * SEC));
    s.handle_timeout(t0 + 15 * SEC);
    let err = SessionError::EchoTimeout(15 * SEC);
    assert_eq!(
        events(&mut s),
        vec![
            Event::Done {
                token,
                result: Err(RequestError::Closed(err.clone()))
            },
            Event::Closed(err)
        ]
    );
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn echo_reply_keeps_peer_alive() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    for round in 0..10u32 {
        let now = t0 + (round + 1) * 5 * SEC + round * SEC;
        s.handle_timeout(now);
        let out = sent(&mut s);
        let [
            Message {
                xid,
                body: Body::EchoRequest(_),
            },
        ] = out[..]
        else {
            panic!("expected an echo request, got {out:?}");
        };
        feed(&mut s, xid, Body::EchoReply(vec![]), now + SEC);
    }
    assert!(!s.is_closed());
    assert!(events(&mut s).is_empty(), "echo replies are not reported");
}

#[test]
fn handshake_times_out() {
    let t0 = Instant::now();
    let mut s = Session::new(Config::default(), t0);
    s.handle_timeout(t0 + 10 * SEC);
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::HandshakeTimeout(10 * SEC))]
    );
}

#[test]
fn replies_are_matched_by_xid_in_any_order() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let role = |r| {
        Body::RoleRequest(Role {
            role: r,
            generation_id: 5,
        })
    };
    let a = s.request(role(2)).expect("queued");
    let b = s.request(role(3)).expect("queued");
    let out = sent(&mut s);
    assert_eq!(out.len(), 2);
    let reply = |m: &Message| match &m.body {
        Body::RoleRequest(r) => Body::RoleReply(*r),
        other => panic!("unexpected {other:?}"),
    };
    feed(&mut s, out[1].xid, reply(&out[1]), t0);
    feed(&mut s, out[0].xid, reply(&out[0]), t0);
    let d = done(&events(&mut s));
    assert_eq!(d.len(), 2);
    assert_eq!(d[0].0, b);
    assert_eq!(d[1].0, a);
    assert!(
        matches!(&d[1].1, Ok(Reply::Message(Message { body: Body::RoleReply(r), .. })) if r.role == 2)
    );
}

#[test]
fn request_refuses_messages_without_reply() {
    let mut s = connected(Instant::now());
    assert_eq!(s.request(flow(1)), Err(SendError::NoReply(ofpt::FLOW_MOD)));
}

#[test]
fn multipart_parts_are_joined() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let req = MultipartRequest {
        flags: 0,
        body: MultipartBody::FlowRequest(Default::default()),
    };
    let token = s.request(Body::MultipartRequest(req)).expect("queued");
    let xid = sent(&mut s)[0].xid;
    let part = |flags, n: u16| {
        let stats = FlowStats {
            table_id: 0,
            duration_sec: 0,
            duration_nsec: 0,
            priority: n,
            idle_timeout: 0,
            hard_timeout: 0,
            flags: 0,
            cookie: 0,
            packet_count: 0,
            byte_count: 0,
            match_: crate::oxm::Match::new(),
            instructions: Vec::new(),
        };
        Body::MultipartReply(MultipartReply {
            flags,
            body: MultipartBody::Flow(vec![stats]),
        })
    };
    feed(&mut s, xid, part(OFPMPF_REPLY_MORE, 1), t0);
    feed(&mut s, xid, part(OFPMPF_REPLY_MORE, 2), t0);
    assert!(events(&mut s).is_empty());
    feed(&mut s, xid, part(0, 3), t0);
    let d = done(&events(&mut s));
    let [(t, Ok(Reply::Multipart(parts)))] = &d[..] else {
        panic!("expected a multipart reply, got {d:?}");
    };
    assert_eq!(*t, token);
    assert_eq!(parts.len(), 3);
}

#[test]
fn error_goes_to_its_request() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s
        .request(Body::RoleRequest(Role {
            role: 2,
            generation_id: 1,
        }))
        .expect("queued");
    let xid = sent(&mut s)[0].xid;
    feed(&mut s, xid, Body::Error(error(11, 0)), t0);
    let d = done(&events(&mut s));
    assert_eq!(d, vec![(token, Err(RequestError::Refused(error(11, 0))))]);
    if let Err(e) = &d[0].1 {
        assert!(e.to_string().contains("OFPRRFC_STALE"), "{e}");
    }
}

#[test]
fn barrier_collects_errors_of_earlier_sends() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let xids: Vec<u32> = (0..3).map(|i| s.send(flow(i)).expect("queued")).collect();
    let token = s.barrier().expect("queued");
    let out = sent(&mut s);
    assert_eq!(out.len(), 4);
    assert_eq!(out.iter().map(|m| m.xid).take(3).collect::<Vec<_>>(), xids);
    feed(&mut s, xids[1], Body::Error(error(5, 0)), t0);
    feed(&mut s, out[3].xid, Body::BarrierReply, t0);
    let d = done(&events(&mut s));
    let want = RequestError::SendsFailed(vec![Failure {
        xid: xids[1],
        error: error(5, 0),
    }]);
    assert_eq!(d, vec![(token, Err(want))]);
    // A clean barrier succeeds.
    let token = s.barrier().expect("queued");
    let xid = sent(&mut s)[0].xid;
    feed(&mut s, xid, Body::BarrierReply, t0);
    assert_eq!(done(&events(&mut s)), vec![(token, Ok(Reply::Done))]);
}

#[test]
fn error_without_barrier_is_an_event() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let xid = s.send(flow(1)).expect("queued");
    feed(&mut s, xid, Body::Error(error(5, 0)), t0);
    assert_eq!(
        events(&mut s),
        vec![Event::Error {
            xid,
            error: error(5, 0)
        }]
    );
    // The next barrier still reports it: the error may well beat the caller's barrier().
    let token = s.barrier().expect("queued");
    let barrier_xid = sent(&mut s).last().map(|m| m.xid).expect("barrier sent");
    feed(&mut s, barrier_xid, Body::BarrierReply, t0);
    let want = RequestError::SendsFailed(vec![Failure {
        xid,
        error: error(5, 0),
    }]);
    assert_eq!(done(&events(&mut s)), vec![(token, Err(want))]);
    let token = s.barrier().expect("queued");
    let barrier_xid = sent(&mut s)[0].xid;
    feed(&mut s, barrier_xid, Body::BarrierReply, t0);
    assert_eq!(
        done(&events(&mut s)),
        vec![(token, Ok(Reply::Done))],
        "reported once"
    );
}

/// The messages of a bundle as sent: (open, adds, fence).
fn bundle_out(s: &mut Session, n: usize) -> (Message, Vec<Message>, Message) {
    let mut out = sent(s);
    assert_eq!(out.len(), n + 2, "{out:?}");
    let fence = out.pop().expect("fence");
    let open = out.remove(0);
    assert!(matches!(&open.body, Body::BundleControl(b) if b.ctrl_type == 0 && b.flags == 3));
    assert_eq!(fence.body, Body::BarrierRequest);
    for add in &out {
        let Body::BundleAdd(a) = &add.body else {
            panic!("expected BUNDLE_ADD, got {add:?}")
        };
        assert_eq!(
            a.message.xid, add.xid,
            "OVS requires the inner xid to equal the outer"
        );
        assert_eq!(a.flags, 3);
    }
    (open, out, fence)
}

fn ctrl_reply(m: &Message) -> Body {
    match &m.body {
        Body::BundleControl(b) => Body::BundleControl(BundleControl {
            ctrl_type: b.ctrl_type + 1,
            ..b.clone()
        }),
        other => panic!("not a bundle control: {other:?}"),
    }
}

#[test]
fn bundle_commits_after_fence() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s.bundle((0..3).map(flow)).expect("queued");
    let (open, _adds, fence) = bundle_out(&mut s, 3);
    feed(&mut s, open.xid, ctrl_reply(&open), t0);
    feed(&mut s, fence.xid, Body::BarrierReply, t0);
    let out = sent(&mut s);
    let [commit] = &out[..] else {
        panic!("expected COMMIT, got {out:?}")
    };
    assert!(matches!(&commit.body, Body::BundleControl(b) if b.ctrl_type == OFPBCT_COMMIT_REQUEST));
    assert!(events(&mut s).is_empty());
    feed(&mut s, commit.xid, ctrl_reply(commit), t0);
    assert_eq!(done(&events(&mut s)), vec![(token, Ok(Reply::Done))]);
    assert_eq!(s.outstanding(), 0);
}

/// Completes the bundle whose messages are `out` (open, adds, fence), through its commit.
fn complete_bundle(s: &mut Session, out: &[u8], t0: Instant) {
    let msgs = frames(out);
    let (open, fence) = (&msgs[0], &msgs[msgs.len() - 1]);
    feed(s, open.xid, ctrl_reply(open), t0);
    feed(s, fence.xid, Body::BarrierReply, t0);
    let commit = sent(s).pop().expect("the commit");
    feed(s, commit.xid, ctrl_reply(&commit), t0);
    assert!(matches!(&done(&events(s))[..], [(_, Ok(Reply::Done))]));
}

/// A written buffer given back holds the next bundle while one is in flight; a buffer given
/// back while something is queued, or to an idle session, is not kept.
#[test]
fn a_recycled_buffer_holds_the_next_bundle_while_one_is_in_flight() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    s.bundle((0..100).map(flow)).expect("queued");
    let first = s.poll_transmit().expect("the first bundle");
    let (room, at) = (first.capacity(), first.as_ptr());
    let first_copy = first.clone();
    s.recycle(first);
    s.bundle((100..150).map(flow)).expect("queued");
    let second = s.poll_transmit().expect("the second bundle");
    assert_eq!(
        (second.as_ptr(), second.capacity()),
        (at, room),
        "encoded into the buffer given back"
    );
    assert_eq!(
        frames(&second).len(),
        52,
        "only the second bundle's messages"
    );
    // Not kept while something is queued.
    s.barrier().expect("queued");
    let queued = s.transmit_len();
    s.recycle(second.clone());
    assert_eq!(s.transmit_len(), queued);
    let barrier = s.poll_transmit().expect("the barrier");
    assert!(
        barrier.capacity() < room,
        "the barrier has a buffer of its own"
    );
    // Once nothing is outstanding, the room kept goes at the next poll.
    complete_bundle(&mut s, &first_copy, t0);
    complete_bundle(&mut s, &second, t0);
    s.recycle(Vec::with_capacity(room));
    let barrier_xid = frames(&barrier)[0].xid;
    feed(&mut s, barrier_xid, Body::BarrierReply, t0);
    assert_eq!(s.outstanding(), 0);
    assert!(s.poll_transmit().is_none());
    s.barrier().expect("queued");
    let alone = s.poll_transmit().expect("a barrier");
    assert!(
        alone.capacity() < room,
        "the room was let go: {}",
        alone.capacity()
    );
    // And an idle session takes none.
    let barrier_xid = frames(&alone)[0].xid;
    feed(&mut s, barrier_xid, Body::BarrierReply, t0);
    let _ = events(&mut s);
    s.recycle(Vec::with_capacity(room));
    s.barrier().expect("queued");
    assert!(s.poll_transmit().expect("a barrier").capacity() < room);
}

#[test]
fn bundle_with_refused_add_is_discarded() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s.bundle((0..4).map(flow)).expect("queued");
    let (open, adds, fence) = bundle_out(&mut s, 4);
    feed(&mut s, open.xid, ctrl_reply(&open), t0);
    // OVS reports an ADD-time error with the BUNDLE_ADD's xid.
    feed(&mut s, adds[2].xid, Body::Error(error(4, 9)), t0);
    feed(&mut s, fence.xid, Body::BarrierReply, t0);
    let out = sent(&mut s);
    let [discard] = &out[..] else {
        panic!("expected DISCARD, got {out:?}")
    };
    assert!(
        matches!(&discard.body, Body::BundleControl(b) if b.ctrl_type == OFPBCT_DISCARD_REQUEST)
    );
    feed(&mut s, discard.xid, ctrl_reply(discard), t0);
    let d = done(&events(&mut s));
    let [(t, Err(RequestError::Bundle(f)))] = &d[..] else {
        panic!("expected failure: {d:?}")
    };
    assert_eq!(*t, token);
    assert_eq!(
        f.members,
        vec![MemberFailure {
            index: 2,
            xid: adds[2].xid,
            error: error(4, 9)
        }]
    );
    assert!(
        RequestError::Bundle(f.clone())
            .to_string()
            .contains("message 2")
    );
}

#[test]
fn bundle_commit_failure_names_the_member() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s.bundle((0..3).map(flow)).expect("queued");
    let (_open, adds, fence) = bundle_out(&mut s, 3);
    feed(&mut s, fence.xid, Body::BarrierReply, t0);
    let commit = sent(&mut s).remove(0);
    // At commit OVS sends the member's error with the inner xid, then MSG_FAILED on the commit.
    feed(&mut s, adds[1].xid, Body::Error(error(5, 1)), t0);
    let msg_failed = ErrorMsg {
        err_type: 0xffff,
        code: 2313,
        experimenter: Some(ONF_EXPERIMENTER),
        data: Vec::new(),
    };
    feed(&mut s, commit.xid, Body::Error(msg_failed.clone()), t0);
    let d = done(&events(&mut s));
    let want = BundleFailure {
        bundle_id: 1,
        members: vec![MemberFailure {
            index: 1,
            xid: adds[1].xid,
            error: error(5, 1),
        }],
        control: Some(msg_failed),
    };
    assert_eq!(d, vec![(token, Err(RequestError::Bundle(want)))]);
    let Err(e) = &d[0].1 else { unreachable!() };
    assert_eq!(
        e.to_string(),
        format!(
            "bundle 0x1 rolled back; message 1 (xid {:#x}): OFPFMFC_TABLE_FULL; \
             control: OFPBFC_MSG_FAILED",
            adds[1].xid
        )
    );
}

#[test]
fn oversized_bundle_member_queues_nothing() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let big = Body::EchoRequest(vec![0; 65_535 - 8 - 24 + 1]);
    let r = s.bundle(vec![flow(1), big]);
    assert!(
        matches!(r, Err(SendError::BundleMember { index: 1, .. })),
        "{r:?}"
    );
    assert_eq!(s.poll_transmit(), None);
    // The session is still usable and xids stay dense.
    s.bundle(vec![flow(1)]).expect("queued");
    bundle_out(&mut s, 1);
}

#[test]
fn role_status_is_an_event() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let mut data = vec![0, 0, 0, 3, 0, 0, 0, 0];
    data.extend_from_slice(&9u64.to_be_bytes());
    let body = Body::Experimenter {
        experimenter: ONF_EXPERIMENTER,
        exp_type: ONFT_ROLE_STATUS,
        data,
    };
    feed(&mut s, 0, body, t0);
    assert_eq!(
        events(&mut s),
        vec![Event::RoleStatus(RoleStatus {
            role: 3,
            reason: 0,
            generation_id: 9
        })]
    );
}

#[test]
fn bad_length_closes_with_typed_error() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s.barrier().expect("queued");
    s.handle_bytes(&[4, 2, 0, 5, 0, 0, 0, 1], t0);
    let err = SessionError::BadLength {
        len: 5,
        msg_type: 2,
        xid: 1,
    };
    assert_eq!(
        events(&mut s),
        vec![
            Event::Done {
                token,
                result: Err(RequestError::Closed(err.clone()))
            },
            Event::Closed(err.clone())
        ]
    );
    assert_eq!(s.barrier(), Err(SendError::Closed(err)));
}

#[test]
fn wrong_version_after_handshake_closes() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    s.handle_bytes(&[1, 2, 0, 8, 0, 0, 0, 1], t0);
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::BadVersion { version: 1 })]
    );
}

#[test]
fn an_undecodable_unsolicited_message_is_answered_and_the_session_goes_on() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    // A PORT_STATUS whose body is 3 bytes long.
    let bad = [4, ofpt::PORT_STATUS, 0, 11, 0, 0, 0, 5, 1, 2, 3];
    s.handle_bytes(&bad, t0);
    let ev = events(&mut s);
    assert!(
        matches!(
            &ev[..],
            [Event::Discarded {
                msg_type: ofpt::PORT_STATUS,
                xid: 5,
                ..
            }]
        ),
        "{ev:?}"
    );
    assert!(!s.is_closed());
    // The peer hears OFPET_BAD_REQUEST / OFPBRC_BAD_LEN quoting the message, under its xid.
    let out = sent(&mut s);
    match &out[..] {
        [
            Message {
                xid: 5,
                body: Body::Error(e),
                ..
            },
        ] => {
            assert_eq!((e.err_type, e.code), (1, 6));
            assert_eq!(e.data, bad.to_vec());
        }
        other => panic!("{other:?}"),
    }
    // And the session still works.
    feed(&mut s, 9, Body::EchoRequest(vec![7]), t0);
    assert!(matches!(
        &sent(&mut s)[..],
        [Message {
            xid: 9,
            body: Body::EchoReply(_),
            ..
        }]
    ));
}

#[test]
fn undecodable_reply_fails_only_its_request() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    let token = s.request(Body::GetAsyncRequest).expect("queued");
    let xid = sent(&mut s)[0].xid;
    let mut bad = vec![4, ofpt::GET_ASYNC_REPLY, 0, 12];
    bad.extend_from_slice(&xid.to_be_bytes());
    bad.extend_from_slice(&[0, 0, 0, 0]);
    s.handle_bytes(&bad, t0);
    let d = done(&events(&mut s));
    assert!(
        matches!(&d[..], [(t, Err(RequestError::Decode(_)))] if *t == token),
        "{d:?}"
    );
    assert!(!s.is_closed());
}

#[test]
fn eof_inside_a_message_is_truncation() {
    let t0 = Instant::now();
    let mut s = connected(t0);
    s.handle_bytes(&[4, 2, 0, 16, 0, 0, 0, 1, 9], t0);
    s.handle_eof();
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::TruncatedEof(9))]
    );
    let t0 = Instant::now();
    let mut s = connected(t0);
    s.handle_eof();
    assert_eq!(events(&mut s), vec![Event::Closed(SessionError::Eof)]);
}

#[test]
fn garbage_never_panics_and_ends_in_a_typed_close_or_wait() {
    // A small xorshift generator: deterministic, no extra dependency.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..2000 {
        let t0 = Instant::now();
        let mut s = if round % 2 == 0 {
            connected(t0)
        } else {
            Session::new(Config::default(), t0)
        };
        let len = usize::try_from(next() % 300).unwrap_or(0);
        let mut data: Vec<u8> = (0..len).map(|_| (next() & 0xff) as u8).collect();
        if round % 3 == 0 && data.len() >= 4 {
            // Plausible headers reach deeper into the decoders.
            data[0] = 4;
            let len = u16::try_from(data.len()).unwrap_or(8).to_be_bytes();
            data[2..4].copy_from_slice(&len);
        }
        for chunk in data.chunks(1 + round % 17) {
            s.handle_bytes(chunk, t0);
        }
        s.handle_eof();
        let ev = events(&mut s);
        assert!(
            matches!(ev.last(), Some(Event::Closed(_))),
            "round {round}: {ev:?}"
        );
    }
}

/// A minimal in-memory switch: the other end, for end-to-end runs of the sans-IO core.
#[derive(Default)]
struct FakeSwitch {
    rx: Vec<u8>,
    out: Vec<u8>,
    flows: Vec<FlowMod>,
    /// Open bundles: id → flow mods.
    bundles: std::collections::HashMap<u32, Vec<FlowMod>>,
    /// Stop answering (a hung switch).
    hung: bool,
}

impl FakeSwitch {
    fn reply(&mut self, xid: u32, body: Body) {
        self.out.extend(
            Message::new(xid, body)
                .encode()
                .expect("fake reply encodes"),
        );
    }

    fn handle(&mut self, bytes: &[u8]) {
        self.rx.extend_from_slice(bytes);
        while let Some(len) = Message::frame_len(&self.rx).filter(|&l| self.rx.len() >= l) {
            let frame: Vec<u8> = self.rx.drain(..len).collect();
            if self.hung {
                continue;
            }
            let m = Message::decode(&frame).expect("session output decodes");
            match m.body {
                Body::Hello(_) => self.reply(m.xid, Body::Hello(Hello::of13())),
                Body::FeaturesRequest => self.reply(m.xid, Body::FeaturesReply(features())),
                Body::EchoRequest(d) => self.reply(m.xid, Body::EchoReply(d)),
                Body::BarrierRequest => self.reply(m.xid, Body::BarrierReply),
                Body::FlowMod(f) => self.flows.push(f),
                Body::BundleControl(b) => {
                    match b.ctrl_type {
                        0 => {
                            self.bundles.insert(b.bundle_id, Vec::new());
                        }
                        4 => {
                            let fl = self.bundles.remove(&b.bundle_id).unwrap_or_default();
                            self.flows.extend(fl);
                        }
                        _ => {
                            self.bundles.remove(&b.bundle_id);
                        }
                    }
                    self.reply(
                        m.xid,
                        Body::BundleControl(BundleControl {
                            ctrl_type: b.ctrl_type + 1,
                            ..b
                        }),
                    );
                }
                Body::BundleAdd(a) => match a.message.body {
                    Body::FlowMod(f) if f.priority != 0 => {
                        self.bundles.entry(a.bundle_id).or_default().push(f);
                    }
                    _ => self.reply(m.xid, Body::Error(error(1, 1))),
                },
                Body::MultipartRequest(_) => {
                    // Two parts per dump, to exercise reassembly.
                    let stats = |f: &FlowMod| FlowStats {
                        table_id: f.table_id,
                        duration_sec: 0,
                        duration_nsec: 0,
                        priority: f.priority,
                        idle_timeout: 0,
                        hard_timeout: 0,
                        flags: 0,
                        cookie: f.cookie,
                        packet_count: 0,
                        byte_count: 0,
                        match_: f.match_.clone(),
                        instructions: Vec::new(),
                    };
                    let half = self.flows.len() / 2;
                    let a: Vec<FlowStats> = self.flows[..half].iter().map(stats).collect();
                    let b: Vec<FlowStats> = self.flows[half..].iter().map(stats).collect();
                    let mp = |flags, v| {
                        Body::MultipartReply(MultipartReply {
                            flags,
                            body: MultipartBody::Flow(v),
                        })
                    };
                    self.reply(m.xid, mp(OFPMPF_REPLY_MORE, a));
                    self.reply(m.xid, mp(0, b));
                }
                _ => {}
            }
        }
    }
}

/// Moves bytes both ways until neither side has anything to say.
fn pump(s: &mut Session, sw: &mut FakeSwitch, now: Instant) {
    loop {
        let mut moved = false;
        if let Some(b) = s.poll_transmit() {
            sw.handle(&b);
            moved = true;
        }
        if !sw.out.is_empty() {
            let b = std::mem::take(&mut sw.out);
            // Deliver in odd-sized pieces to exercise framing.
            for chunk in b.chunks(97) {
                s.handle_bytes(chunk, now);
            }
            moved = true;
        }
        if !moved {
            break;
        }
    }
}

#[test]
fn end_to_end_bundle_and_dump_with_in_memory_switch() {
    let t0 = Instant::now();
    let mut s = Session::new(Config::default(), t0);
    let mut sw = FakeSwitch::default();
    pump(&mut s, &mut sw, t0);
    assert_eq!(s.datapath_id(), Some(DPID));
    events(&mut s);

    let ok = s.bundle((0..1000).map(flow)).expect("queued");
    // Member 5 has priority 0, which this fake switch refuses at ADD time.
    let mut bad: Vec<Body> = (0..10).map(flow).collect();
    if let Body::FlowMod(f) = &mut bad[5] {
        f.priority = 0;
    }
    let failed = s.bundle(bad).expect("queued");
    pump(&mut s, &mut sw, t0);
    // The commit follows the fence's reply, so a dump queued with the bundles could overtake it:
    // ask once they are done.
    let req = MultipartRequest {
        flags: 0,
        body: MultipartBody::FlowRequest(Default::default()),
    };
    let dump = s.request(Body::MultipartRequest(req)).expect("queued");
    pump(&mut s, &mut sw, t0);

    let d = done(&events(&mut s));
    assert_eq!(d.len(), 3, "{d:?}");
    assert_eq!(d[0], (ok, Ok(Reply::Done)));
    assert!(
        matches!(&d[1], (t, Err(RequestError::Bundle(f))) if *t == failed && f.members[0].index == 5)
    );
    let (t, Ok(Reply::Multipart(parts))) = &d[2] else {
        panic!("{:?}", d[2])
    };
    assert_eq!(*t, dump);
    let n: usize = parts
        .iter()
        .map(|p| match &p.body {
            Body::MultipartReply(MultipartReply {
                body: MultipartBody::Flow(v),
                ..
            }) => v.len(),
            _ => 0,
        })
        .sum();
    assert_eq!(n, 1000, "the failed bundle left nothing behind");
    assert_eq!(sw.flows.len(), 1000);
}

#[test]
fn end_to_end_hung_switch_is_detected() {
    let t0 = Instant::now();
    let mut s = Session::new(Config::default(), t0);
    let mut sw = FakeSwitch::default();
    pump(&mut s, &mut sw, t0);
    events(&mut s);
    sw.hung = true;
    let token = s.barrier().expect("queued");
    let mut now = t0;
    while let Some(deadline) = s.poll_timeout() {
        now = deadline;
        s.handle_timeout(now);
        pump(&mut s, &mut sw, now);
    }
    assert_eq!(now, t0 + 15 * SEC);
    let ev = events(&mut s);
    assert_eq!(done(&ev).len(), 1);
    assert_eq!(done(&ev)[0].0, token);
    assert_eq!(
        ev.last(),
        Some(&Event::Closed(SessionError::EchoTimeout(15 * SEC)))
    );
}
