use super::*;
use crate::datum::{Datum, Row};
use crate::framer::FrameError;
use crate::ops::ErrorKind;

const U: &str = "36c1d4a9-8ef1-4b49-9d3f-4f4f4f4f4f4f";

fn t0() -> Instant {
    Instant::now()
}

/// Parses everything the session wants to send.
fn sent(s: &mut Session) -> Vec<Value> {
    let Some(bytes) = s.poll_transmit() else {
        return vec![];
    };
    let mut f = Framer::new(FramerLimits::default());
    f.push(&bytes).unwrap();
    let mut out = vec![];
    while let Some(m) = f.next_message() {
        out.push(serde_json::from_slice(&m).unwrap());
    }
    out
}

fn events(s: &mut Session) -> Vec<Event> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn feed(s: &mut Session, v: Value, now: Instant) {
    s.handle_bytes(&serde_json::to_vec(&v).unwrap(), now)
        .unwrap();
}

#[test]
fn list_dbs_round_trip() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    let id = s.list_dbs();
    let out = sent(&mut s);
    assert_eq!(out, vec![json!({"method":"list_dbs","params":[],"id":1})]);
    feed(
        &mut s,
        json!({"id":1,"result":["Open_vSwitch"],"error":null}),
        now,
    );
    assert_eq!(
        events(&mut s),
        vec![Event::Reply {
            id,
            result: Ok(Reply::Dbs(vec!["Open_vSwitch".into()]))
        }]
    );
    assert_eq!(s.pending_requests(), 0);
}

#[test]
fn answers_echo_and_unknown_requests() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    feed(
        &mut s,
        json!({"id":"echo","method":"echo","params":[]}),
        now,
    );
    feed(
        &mut s,
        json!({"id":7,"method":"frobnicate","params":[]}),
        now,
    );
    assert_eq!(
        sent(&mut s),
        vec![
            json!({"id":"echo","result":[],"error":null}),
            json!({"id":7,"result":null,"error":"unknown method"})
        ]
    );
    assert!(events(&mut s).is_empty());
}

#[test]
fn echo_probe_and_deadline() {
    let now = t0();
    let cfg = SessionConfig {
        probe_interval: Some(Duration::from_secs(5)),
        ..Default::default()
    };
    let mut s = Session::new(cfg, now);
    assert_eq!(s.poll_timeout(), Some(now + Duration::from_secs(5)));
    s.handle_timeout(now + Duration::from_secs(4));
    assert!(sent(&mut s).is_empty());
    let t1 = now + Duration::from_secs(5);
    s.handle_timeout(t1);
    let out = sent(&mut s);
    assert_eq!(out[0]["method"], "echo");
    assert_eq!(s.poll_timeout(), Some(t1 + Duration::from_secs(5)));
    // Reply arrives: timer restarts from the receive time.
    let t2 = t1 + Duration::from_secs(1);
    feed(
        &mut s,
        json!({"id": out[0]["id"], "result": [], "error": null}),
        t2,
    );
    assert!(events(&mut s).is_empty(), "probe replies are not reported");
    assert_eq!(s.poll_timeout(), Some(t2 + Duration::from_secs(5)));
    // Second probe unanswered: closed.
    let t3 = t2 + Duration::from_secs(5);
    s.handle_timeout(t3);
    assert_eq!(sent(&mut s).len(), 1);
    s.handle_timeout(t3 + Duration::from_secs(5));
    assert_eq!(
        events(&mut s),
        vec![Event::Closed(SessionError::Timeout(Duration::from_secs(5)))]
    );
    assert!(s.is_closed());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn transact_typed_results_and_errors() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    let row: Row = [("name".to_owned(), Datum::string("br0"))]
        .into_iter()
        .collect();
    let a = s.transact("Open_vSwitch", vec![Operation::insert("Bridge", row)]);
    let b = s.transact(
        "Open_vSwitch",
        vec![Operation::Comment("x".into()), Operation::Abort],
    );
    let out = sent(&mut s);
    assert_eq!(out[0]["params"][1]["op"], "insert");
    feed(
        &mut s,
        json!({"id":2,"result":[{}, {"error":"aborted"}],"error":null}),
        now,
    );
    feed(
        &mut s,
        json!({"id":1,"result":[{"uuid":["uuid",U]}],"error":null}),
        now,
    );
    let ev = events(&mut s);
    assert!(
        matches!(&ev[0], Event::Reply { id, result: Err(RequestError::Transact(e)) } if *id == b && e.kind() == Some(&ErrorKind::Aborted))
    );
    assert!(
        matches!(&ev[1], Event::Reply { id, result: Ok(Reply::Transact(r)) } if *id == a && r[0].uuid().is_some())
    );
}

#[test]
fn cancel_sends_notification_with_wire_id() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    let _ = s.list_dbs();
    let t = s.transact("db", vec![Operation::Comment("c".into())]);
    sent(&mut s);
    s.cancel(t);
    assert_eq!(
        sent(&mut s),
        vec![json!({"method":"cancel","params":[2],"id":null})]
    );
    assert_eq!(
        events(&mut s),
        vec![Event::Reply {
            id: t,
            result: Err(RequestError::Canceled)
        }]
    );
    // A late reply for it is ignored.
    feed(
        &mut s,
        json!({"id":2,"result":null,"error":"canceled"}),
        now,
    );
    assert!(events(&mut s).is_empty());
    assert_eq!(s.pending_requests(), 1);
}

fn monitor_reqs() -> BTreeMap<String, MonitorRequest> {
    [("Bridge".to_owned(), MonitorRequest::columns(&["name"]))]
        .into_iter()
        .collect()
}

#[test]
fn monitor_falls_back_and_updates() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    let id = s.monitor("Open_vSwitch", "m", monitor_reqs());
    let out = sent(&mut s);
    assert_eq!(out[0]["method"], "monitor_cond_since");
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":null,"error":"unknown method"}),
        now,
    );
    let out = sent(&mut s);
    assert_eq!(out[0]["method"], "monitor_cond");
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":null,"error":"unknown method"}),
        now,
    );
    let out = sent(&mut s);
    assert_eq!(out[0]["method"], "monitor");
    assert_eq!(
        out[0]["params"],
        json!(["Open_vSwitch", "m", {"Bridge":[{"columns":["name"]}]}])
    );
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":{"Bridge":{U:{"new":{"name":"br0"}}}},"error":null}),
        now,
    );
    let ev = events(&mut s);
    assert!(matches!(
        &ev[0],
        Event::Update {
            kind: UpdateKind::Initial { replace: true },
            ..
        }
    ));
    assert_eq!(
        ev[1],
        Event::Reply {
            id,
            result: Ok(Reply::Monitor {
                monitor: "m".into(),
                method: MonitorMethod::Monitor
            })
        }
    );
    feed(
        &mut s,
        json!({"id":null,"method":"update","params":["m",{"Bridge":{U:{"old":{"name":"br0"}}}}]}),
        now,
    );
    assert!(matches!(
        &events(&mut s)[0],
        Event::Update {
            kind: UpdateKind::Change,
            ..
        }
    ));
    // Later monitors start with the method known to work.
    s.monitor("Open_vSwitch", "m2", monitor_reqs());
    assert_eq!(sent(&mut s)[0]["method"], "monitor");
}

#[test]
fn reset_reestablishes_monitors_and_locks() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    s.monitor("Open_vSwitch", "m", monitor_reqs());
    let out = sent(&mut s);
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":[false, "11111111-1111-1111-1111-111111111111", {}],"error":null}),
        now,
    );
    feed(
        &mut s,
        json!({"id":null,"method":"update3","params":["m","22222222-2222-2222-2222-222222222222",{}]}),
        now,
    );
    let l = s.lock("leader");
    let out = sent(&mut s);
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":{"locked":false},"error":null}),
        now,
    );
    feed(
        &mut s,
        json!({"id":null,"method":"locked","params":["leader"]}),
        now,
    );
    let ev = events(&mut s);
    assert!(ev.contains(&Event::Reply {
        id: l,
        result: Ok(Reply::Lock { locked: false })
    }));
    assert!(ev.contains(&Event::Locked("leader".into())));
    let pending = s.list_dbs();
    sent(&mut s);

    s.handle_eof();
    let ev = events(&mut s);
    assert_eq!(
        ev[0],
        Event::Reply {
            id: pending,
            result: Err(RequestError::Disconnected)
        }
    );
    assert_eq!(ev[1], Event::Closed(SessionError::PeerClosed));
    assert!(s.list_dbs() > 0);
    assert!(matches!(
        events(&mut s)[0],
        Event::Reply {
            result: Err(RequestError::Disconnected),
            ..
        }
    ));

    s.reset(now);
    let out = sent(&mut s);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0]["method"], "monitor_cond_since");
    assert_eq!(out[0]["params"][3], "22222222-2222-2222-2222-222222222222");
    assert_eq!(out[1]["method"], "lock");
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":[true, "33333333-3333-3333-3333-333333333333", {}],"error":null}),
        now,
    );
    let ev = events(&mut s);
    assert!(matches!(
        ev[0],
        Event::Update {
            kind: UpdateKind::Initial { replace: false },
            ..
        }
    ));
    assert_eq!(ev.len(), 1, "no Resynced before the lock reply");
    feed(
        &mut s,
        json!({"id":out[1]["id"],"result":{"locked":true},"error":null}),
        now,
    );
    // Granted at once on the new connection: no `locked` notification comes, so the session
    // says so itself.
    assert_eq!(
        events(&mut s),
        vec![Event::Locked("leader".into()), Event::Resynced]
    );
}

#[test]
fn reset_without_monitors_resyncs_at_once() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    s.handle_eof();
    events(&mut s);
    s.reset(now);
    assert_eq!(events(&mut s), vec![Event::Resynced]);
}

#[test]
fn steal_and_stolen() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    let id = s.steal("l");
    let out = sent(&mut s);
    assert_eq!(out[0]["method"], "steal");
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":{"locked":true},"error":null}),
        now,
    );
    feed(
        &mut s,
        json!({"id":null,"method":"stolen","params":["l"]}),
        now,
    );
    assert_eq!(
        events(&mut s),
        vec![
            Event::Reply {
                id,
                result: Ok(Reply::Lock { locked: true })
            },
            Event::Stolen("l".into())
        ]
    );
    let u = s.unlock("l");
    let out = sent(&mut s);
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":{},"error":null}),
        now,
    );
    assert_eq!(
        events(&mut s),
        vec![Event::Reply {
            id: u,
            result: Ok(Reply::Done)
        }]
    );
}

// ---- hostile input ----

fn closes_with(input: &[u8], limits: FramerLimits) -> SessionError {
    let now = t0();
    let mut s = Session::new(
        SessionConfig {
            limits,
            ..Default::default()
        },
        now,
    );
    let id = s.list_dbs();
    let err = s.handle_bytes(input, now).unwrap_err();
    let ev = events(&mut s);
    assert_eq!(
        ev[0],
        Event::Reply {
            id,
            result: Err(RequestError::Disconnected)
        }
    );
    assert_eq!(ev[1], Event::Closed(err.clone()));
    assert!(s.is_closed());
    assert!(s.handle_bytes(b"{}", now).is_err(), "stays closed");
    err
}

#[test]
fn hostile_garbage() {
    let e = closes_with(b"\x16\x03\x01\x02\x00garbage", FramerLimits::default());
    assert!(matches!(
        e,
        SessionError::Frame(FrameError::NotAnObject { .. })
    ));
    let e = closes_with(
        br#"{"id":1,"result":"\xff\xfe","error":null}"#,
        FramerLimits::default(),
    );
    assert!(matches!(e, SessionError::Message(_)));
    let e = closes_with(
        br#"{"id":null,"method":"update","params":["m", 5]}"#,
        FramerLimits::default(),
    );
    assert!(matches!(e, SessionError::Protocol { .. }));
}

#[test]
fn hostile_unterminated() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    s.handle_bytes(br#"{"id":1,"result":"never ends"#, now)
        .unwrap();
    s.handle_eof();
    assert_eq!(events(&mut s), vec![Event::Closed(SessionError::Truncated)]);
}

#[test]
fn hostile_huge_string_is_bounded() {
    let limits = FramerLimits {
        max_message_size: 1 << 20,
        max_depth: 64,
    };
    let now = t0();
    let mut s = Session::new(
        SessionConfig {
            limits,
            ..Default::default()
        },
        now,
    );
    s.handle_bytes(br#"{"id":1,"result":""#, now).unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut fed = 0usize;
    let mut result = Ok(());
    // 100 MB, streamed; must fail once the limit is crossed, long before the end.
    while fed < 100 << 20 {
        result = s.handle_bytes(&chunk, now);
        fed += chunk.len();
        if result.is_err() {
            break;
        }
    }
    assert_eq!(
        result,
        Err(SessionError::Frame(FrameError::TooLarge { limit: 1 << 20 }))
    );
    assert!(fed <= (1 << 20) + chunk.len());
}

#[test]
fn hostile_deep_nesting() {
    let mut deep = br#"{"id":1,"result":"#.to_vec();
    deep.extend(std::iter::repeat_n(b'[', 100_000));
    let e = closes_with(&deep, FramerLimits::default());
    assert_eq!(e, SessionError::Frame(FrameError::TooDeep { limit: 64 }));
}

#[test]
fn depth_at_limit_still_parses() {
    // serde_json's own recursion limit (128) must be above our framer limit.
    let now = t0();
    let limits = FramerLimits {
        max_message_size: 1 << 20,
        max_depth: 100,
    };
    let mut s = Session::new(
        SessionConfig {
            limits,
            ..Default::default()
        },
        now,
    );
    let id = s.echo(json!([]));
    let mut m = br#"{"id":1,"error":null,"result":"#.to_vec();
    m.extend(std::iter::repeat_n(b'[', 99));
    m.extend(std::iter::repeat_n(b']', 99));
    m.push(b'}');
    s.handle_bytes(&m, now).unwrap();
    assert!(
        matches!(&events(&mut s)[0], Event::Reply { id: i, result: Ok(Reply::Echo(_)) } if *i == id)
    );
}

#[test]
fn duplicate_monitor_is_refused_locally() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    s.monitor("db", "m", monitor_reqs());
    sent(&mut s);
    let id = s.monitor("db", "m", monitor_reqs());
    assert!(sent(&mut s).is_empty());
    assert!(
        matches!(&events(&mut s)[0], Event::Reply { id: i, result: Err(RequestError::InvalidArgument(_)) } if *i == id)
    );
}

#[test]
fn a_stolen_lock_stays_queued_and_steal_becomes_lock_on_reset() {
    let now = t0();
    let mut s = Session::new(SessionConfig::default(), now);
    s.steal("a");
    s.lock("b");
    let out = sent(&mut s);
    feed(
        &mut s,
        json!({"id":out[0]["id"],"result":{"locked":true},"error":null}),
        now,
    );
    feed(
        &mut s,
        json!({"id":out[1]["id"],"result":{"locked":true},"error":null}),
        now,
    );
    feed(
        &mut s,
        json!({"id":null,"method":"stolen","params":["b"]}),
        now,
    );
    events(&mut s);
    s.handle_eof();
    s.reset(now);
    let out = sent(&mut s);
    assert_eq!(
        out,
        vec![
            json!({"method":"lock","params":["a"],"id":out[0]["id"]}),
            json!({"method":"lock","params":["b"],"id":out[1]["id"]}),
        ]
    );
}
