//! The OVSDB client against a real, private `ovsdb-server` (and the sandbox's `ovs-vswitchd`,
//! where ofports matter), each test in its own [`Sandbox`].

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::collections::BTreeMap;
use std::time::Duration;

use ovs_tests::{Sandbox, SandboxOptions};
use ovsdb::client::{Client, ClientConfig, ClientEvent, Events, Listener};
use ovsdb::monitor::MonitorRequest;
use ovsdb::vswitch::{
    self, BridgeSpec, ControllerSpec, FailMode, InterfaceType, NamedTable, PortSpec, VSwitch,
    VSwitchQuery,
};
use ovsdb::{Condition, Datum, ErrorKind, Operation, Row, Until};

const T: Duration = Duration::from_secs(10);

fn cfg() -> ClientConfig {
    ClientConfig {
        backoff_min: Duration::from_millis(50),
        backoff_max: Duration::from_millis(400),
        ..Default::default()
    }
}

async fn next_event(ev: &mut Events, mut pred: impl FnMut(&ClientEvent) -> bool) -> ClientEvent {
    tokio::time::timeout(T, async {
        loop {
            let e = ev.recv().await.expect("event stream ended");
            if pred(&e) {
                return e;
            }
        }
    })
    .await
    .expect("timed out waiting for event")
}

fn smap(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A sandbox whose `ovsdb-server` also listens on loopback TCP. Fails (never skips) with the
/// sandbox's message, e.g. which package to install, if Open vSwitch is missing.
fn sandbox() -> Sandbox {
    Sandbox::start_with(SandboxOptions { ovsdb_tcp: true })
        .unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"))
}

/// The sandbox's OVSDB unix socket remote.
fn unix_remote(sb: &Sandbox) -> String {
    sb.db_remote()
}

/// The sandbox's OVSDB loopback TCP remote.
fn tcp_remote(sb: &Sandbox) -> String {
    let port = sb
        .ovsdb_tcp_port()
        .expect("the sandbox was started with ovsdb_tcp");
    format!("tcp:127.0.0.1:{port}")
}

/// `ovs-vsctl --no-wait ARGS` against the sandbox's database; panics if it fails.
fn vsctl(sb: &Sandbox, args: &[&str]) -> String {
    let mut argv = vec!["--no-wait"];
    argv.extend_from_slice(args);
    sb.vsctl(&argv)
        .unwrap_or_else(|e| panic!("ovs-vsctl {}: {e}", args.join(" ")))
}

#[tokio::test]
async fn basic_requests_over_unix_and_tcp() {
    let sb = sandbox();
    for remote in [unix_remote(&sb), tcp_remote(&sb)] {
        let (c, _ev) = Client::connect(&remote, cfg()).await.unwrap();
        assert!(
            c.list_dbs()
                .await
                .unwrap()
                .contains(&"Open_vSwitch".to_owned())
        );
        let s = c.get_schema("Open_vSwitch").await.unwrap();
        assert!(s.tables.contains_key("Bridge"));
        assert_eq!(
            c.echo(serde_json::json!(["hi"])).await.unwrap(),
            serde_json::json!(["hi"])
        );
        let e = c.get_schema("nope").await.unwrap_err();
        assert!(e.to_string().contains("unknown database"), "{e}");
        c.shutdown();
    }
}

#[tokio::test]
async fn bridge_with_internal_port_and_external_ids() {
    let sb = sandbox();
    let (vs, _ev) = VSwitch::connect(&unix_remote(&sb), cfg()).await.unwrap();
    let mut spec = BridgeSpec::new("br-test");
    spec.datapath_type = Some("netdev".into());
    spec.fail_mode = Some(FailMode::Secure);
    spec.protocols = vec!["OpenFlow13".into()];
    spec.datapath_id = Some("00000000000000ab".into());
    spec.external_ids = smap(&[("owner", "svcflow")]);
    assert!(vs.ensure_bridge(&spec).await.unwrap() > 0);
    assert_eq!(vs.ensure_bridge(&spec).await.unwrap(), 0, "idempotent");

    let mut port = PortSpec::new("svc-gw", InterfaceType::Internal);
    port.port_external_ids = smap(&[("role", "gateway")]);
    port.iface_external_ids = smap(&[("iface-id", "gw0")]);
    assert!(vs.add_port("br-test", &port).await.unwrap() > 0);
    assert_eq!(
        vs.add_port("br-test", &port).await.unwrap(),
        0,
        "idempotent"
    );

    let ctl = vec![ControllerSpec {
        target: "tcp:127.0.0.1:6653".into(),
        connection_mode: Some("out-of-band".into()),
        rate_limit: Some(1000),
        burst_limit: Some(250),
        max_backoff: Some(1000),
        ..ControllerSpec::default()
    }];
    assert!(vs.set_controllers("br-test", &ctl).await.unwrap() > 0);
    assert_eq!(vs.set_controllers("br-test", &ctl).await.unwrap(), 0);
    // The real server took the packet-in limits and the backoff (its schema checks them).
    let c = vs.replica.read().controllers();
    assert_eq!(
        (c[0].rate_limit, c[0].burst_limit, c[0].max_backoff),
        (Some(1000), Some(250), Some(1000))
    );

    // Controllers sharing the switch each add their own target and keep the others'.
    let other = ovsdb::vswitch::ControllerSpec {
        target: "tcp:127.0.0.1:6654".into(),
        ..ctl[0].clone()
    };
    assert_eq!(vs.add_controller("br-test", &other).await.unwrap(), 2);
    assert_eq!(vs.add_controller("br-test", &other).await.unwrap(), 0);
    assert_eq!(vs.add_controller("br-test", &ctl[0]).await.unwrap(), 0);
    assert_eq!(
        vsctl(&sb, &["get-controller", "br-test"]).trim(),
        "tcp:127.0.0.1:6653\ntcp:127.0.0.1:6654"
    );
    assert!(vs.set_controllers("br-test", &ctl).await.unwrap() > 0);

    // Own writes are visible in the replica as soon as the transaction returns.
    assert_eq!(vs.replica.read().bridge_ports("br-test").len(), 2);

    // Verify with ovs-vsctl.
    assert_eq!(vsctl(&sb, &["list-br"]).trim(), "br-test");
    let ports = vsctl(&sb, &["list-ports", "br-test"]);
    assert_eq!(ports.trim(), "svc-gw");
    assert_eq!(
        vsctl(&sb, &["get", "Interface", "svc-gw", "type"]).trim(),
        "internal"
    );
    assert_eq!(
        vsctl(&sb, &["get", "Port", "svc-gw", "external_ids:role"]).trim(),
        "gateway"
    );
    assert_eq!(
        vsctl(
            &sb,
            &["get", "Interface", "svc-gw", "external_ids:iface-id"]
        )
        .trim(),
        "gw0"
    );
    assert_eq!(
        vsctl(&sb, &["get", "Bridge", "br-test", "fail_mode"]).trim(),
        "secure"
    );
    assert_eq!(
        vsctl(&sb, &["get", "Bridge", "br-test", "protocols"]).trim(),
        "[OpenFlow13]"
    );
    assert_eq!(
        vsctl(
            &sb,
            &["get", "Bridge", "br-test", "other_config:datapath-id"]
        )
        .trim(),
        "\"00000000000000ab\""
    );
    assert_eq!(
        vsctl(&sb, &["get", "Bridge", "br-test", "external_ids:owner"]).trim(),
        "svcflow"
    );
    assert_eq!(
        vsctl(&sb, &["get-controller", "br-test"]).trim(),
        "tcp:127.0.0.1:6653"
    );
    assert_eq!(
        vsctl(&sb, &["get", "Controller", "br-test", "connection_mode"]).trim(),
        "out-of-band"
    );

    // external_ids write/remove on all three tables.
    for (t, name) in [
        (NamedTable::Bridge, "br-test"),
        (NamedTable::Port, "svc-gw"),
        (NamedTable::Interface, "svc-gw"),
    ] {
        vs.set_external_ids(t, name, &smap(&[("k", "v1")]), &[])
            .await
            .unwrap();
        assert_eq!(vs.external_ids(t, name).unwrap()["k"], "v1");
        vs.set_external_ids(t, name, &smap(&[("k", "v2")]), &[])
            .await
            .unwrap();
        let table = t.as_str();
        assert_eq!(
            vsctl(&sb, &["get", table, name, "external_ids:k"]).trim(),
            "v2"
        );
        vs.set_external_ids(t, name, &BTreeMap::new(), &["k"])
            .await
            .unwrap();
        assert!(!vs.external_ids(t, name).unwrap().contains_key("k"));
    }

    // Patch, vxlan and geneve ports with options; then removal.
    let mut p0 = PortSpec::new(
        "patch0",
        InterfaceType::Patch {
            peer: "patch1".into(),
        },
    );
    p0.ofport_request = Some(7);
    vs.add_port("br-test", &p0).await.unwrap();
    vs.add_port(
        "br-test",
        &PortSpec::new(
            "vx0",
            InterfaceType::Vxlan {
                remote_ip: "flow".into(),
                key: Some("flow".into()),
            },
        ),
    )
    .await
    .unwrap();
    vs.add_port(
        "br-test",
        &PortSpec::new(
            "gnv0",
            InterfaceType::Geneve {
                remote_ip: "192.0.2.9".into(),
                key: None,
            },
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        vsctl(&sb, &["get", "Interface", "patch0", "options:peer"]).trim(),
        "patch1"
    );
    assert_eq!(
        vsctl(&sb, &["get", "Interface", "vx0", "type"]).trim(),
        "vxlan"
    );
    assert_eq!(
        vsctl(&sb, &["get", "Interface", "gnv0", "options:remote_ip"]).trim(),
        "\"192.0.2.9\""
    );
    assert_eq!(vs.del_port("br-test", "vx0").await.unwrap(), 1);
    assert_eq!(vs.del_port("br-test", "vx0").await.unwrap(), 0);
    assert!(!vsctl(&sb, &["list-ports", "br-test"]).contains("vx0"));
    assert!(
        vs.replica.read().port("vx0").is_none(),
        "garbage-collected row left the replica"
    );
}

#[tokio::test]
async fn monitor_sees_vsctl_changes() {
    let sb = sandbox();
    let (vs, mut ev) = VSwitch::connect(&tcp_remote(&sb), cfg()).await.unwrap();
    vsctl(
        &sb,
        &[
            "add-br",
            "br0",
            "--",
            "set",
            "Bridge",
            "br0",
            "external_ids:a=1",
            "fail_mode=secure",
        ],
    );
    let b = vs.replica.wait_for(T, |r| r.bridge("br0")).await.unwrap();
    assert_eq!(b.external_ids["a"], "1");
    assert_eq!(b.fail_mode.as_deref(), Some("secure"));
    vsctl(
        &sb,
        &[
            "set",
            "Bridge",
            "br0",
            "external_ids:a=2",
            "external_ids:b=3",
            "--",
            "clear",
            "Bridge",
            "br0",
            "fail_mode",
        ],
    );
    vs.replica
        .wait_for(T, |r| {
            r.bridge("br0").filter(|b| {
                b.external_ids.get("a").map(String::as_str) == Some("2") && b.fail_mode.is_none()
            })
        })
        .await
        .unwrap();
    vsctl(
        &sb,
        &[
            "add-port",
            "br0",
            "p1",
            "--",
            "set",
            "Interface",
            "p1",
            "type=internal",
        ],
    );
    vs.replica
        .wait_for(T, |r| r.interface("p1").filter(|i| i.kind == "internal"))
        .await
        .unwrap();
    vsctl(&sb, &["del-br", "br0"]);
    vs.replica
        .wait_for(T, |r| r.bridge("br0").is_none().then_some(()))
        .await
        .unwrap();
    assert!(vs.replica.read().port("p1").is_none());
    // The raw update events were delivered too.
    let e = next_event(&mut ev, |e| matches!(e, ClientEvent::Update { .. })).await;
    assert!(matches!(e, ClientEvent::Update { .. }));
    // A second, plain monitor on the same connection.
    let reqs: BTreeMap<String, MonitorRequest> =
        [("Bridge".to_owned(), MonitorRequest::columns(&["name"]))].into();
    vs.client
        .monitor("Open_vSwitch", "plain", reqs)
        .await
        .unwrap();
    vsctl(&sb, &["add-br", "br9"]);
    next_event(
        &mut ev,
        |e| matches!(e, ClientEvent::Update { monitor, .. } if monitor == "plain"),
    )
    .await;
    vs.client.monitor_cancel("plain").await.unwrap();
}

#[tokio::test]
async fn failed_wait_rejects_whole_transaction() {
    let sb = sandbox();
    let (c, _ev) = Client::connect(&unix_remote(&sb), cfg()).await.unwrap();
    vsctl(&sb, &["add-br", "br0"]);
    let row: Row = [("name".to_owned(), Datum::string("br-new"))]
        .into_iter()
        .collect();
    let ops = vec![
        Operation::insert_named("Bridge", row, "b"),
        Operation::mutate(
            "Open_vSwitch",
            vec![],
            vec![ovsdb::Mutation::insert("bridges", Datum::named_uuid("b"))],
        ),
        // Fails: a bridge named br0 exists.
        Operation::wait(
            "Bridge",
            vec![Condition::eq("name", Datum::string("br0"))],
            &["name"],
            Until::Equal,
            vec![],
        ),
    ];
    let e = c.transact("Open_vSwitch", ops).await.unwrap_err();
    let te = e.transact().expect("typed transact error");
    assert_eq!(te.kind(), Some(&ErrorKind::TimedOut));
    assert!(
        matches!(
            te,
            ovsdb::TransactError::Operation {
                index: 2,
                op: "wait",
                ..
            }
        ),
        "{te:?}"
    );
    assert_eq!(vsctl(&sb, &["list-br"]).trim(), "br0", "nothing changed");

    // Referential integrity: a Port not referenced by any Bridge is fine (GC), but a dangling
    // strong reference is not.
    let ops = vec![Operation::insert(
        "Port",
        [
            ("name".to_owned(), Datum::string("x")),
            (
                "interfaces".to_owned(),
                Datum::uuid(uuid::Uuid::from_u128(5)),
            ),
        ]
        .into_iter()
        .collect(),
    )];
    let e = c.transact("Open_vSwitch", ops).await.unwrap_err();
    let te = e.transact().expect("typed transact error");
    assert_eq!(
        te.kind(),
        Some(&ErrorKind::ReferentialIntegrityViolation),
        "{te:?}"
    );
    assert!(
        matches!(te, ovsdb::TransactError::Commit(_)),
        "reported after the operations: {te:?}"
    );
    // A constraint violation: duplicate bridge name (indexed column).
    let ops = vec![
        Operation::insert_named(
            "Bridge",
            [("name".to_owned(), Datum::string("br0"))]
                .into_iter()
                .collect(),
            "b",
        ),
        Operation::mutate(
            "Open_vSwitch",
            vec![],
            vec![ovsdb::Mutation::insert("bridges", Datum::named_uuid("b"))],
        ),
    ];
    let e = c.transact("Open_vSwitch", ops).await.unwrap_err();
    assert_eq!(
        e.transact().and_then(|t| t.kind()),
        Some(&ErrorKind::ConstraintViolation),
        "{e}"
    );
    // abort and comment
    let e = c
        .transact(
            "Open_vSwitch",
            vec![Operation::Comment("test".into()), Operation::Abort],
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.transact().and_then(|t| t.kind()),
        Some(&ErrorKind::Aborted)
    );
    // select
    let r = c
        .transact("Open_vSwitch", vec![Operation::select("Bridge", vec![])])
        .await
        .unwrap();
    assert_eq!(r[0].rows()[0]["name"].as_str(), Some("br0"));
}

#[tokio::test]
async fn survives_server_restart_and_resyncs() {
    let mut sb = sandbox();
    for remote in [unix_remote(&sb), tcp_remote(&sb)] {
        let (vs, mut ev) = VSwitch::connect(&remote, cfg()).await.unwrap();
        assert!(vs.client.lock("survivor").await.unwrap());
        vsctl(&sb, &["--may-exist", "add-br", "before"]);
        vs.replica
            .wait_for(T, |r| r.bridge("before"))
            .await
            .unwrap();
        sb.restart_ovsdb().unwrap();
        next_event(&mut ev, |e| matches!(e, ClientEvent::Disconnected(_))).await;
        // Calls while disconnected fail fast or succeed after reconnecting; never hang.
        let _ = tokio::time::timeout(T, vs.client.list_dbs())
            .await
            .expect("no hang");
        next_event(&mut ev, |e| matches!(e, ClientEvent::Resynced)).await;
        // The lock was re-acquired as part of the resync.
        vs.client
            .transact(
                "Open_vSwitch",
                vec![Operation::Assert {
                    lock: "survivor".into(),
                }],
            )
            .await
            .unwrap();
        vsctl(&sb, &["--may-exist", "add-br", "after"]);
        vs.replica.wait_for(T, |r| r.bridge("after")).await.unwrap();
        assert!(vs.replica.read().bridge("before").is_some());
        vsctl(&sb, &["del-br", "after"]);
        vs.replica
            .wait_for(T, |r| r.bridge("after").is_none().then_some(()))
            .await
            .unwrap();
        vs.client.shutdown();
    }
}

#[tokio::test]
async fn passive_mode_accepts_manager_connection() {
    let sb = sandbox();
    let l = Listener::bind("ptcp:0:127.0.0.1", cfg()).await.unwrap();
    let port = l.local_addr().unwrap().port();
    vsctl(&sb, &["set-manager", &format!("tcp:127.0.0.1:{port}")]);
    let ovsdb::Accepted { client, peer, .. } = tokio::time::timeout(T, l.accept())
        .await
        .expect("server connected")
        .unwrap();
    assert!(peer.ip().is_loopback());
    let vs = VSwitch::new(client).await.unwrap();
    vs.ensure_bridge(&BridgeSpec::new("br-passive"))
        .await
        .unwrap();
    assert_eq!(vsctl(&sb, &["list-br"]).trim(), "br-passive");
    let m = vs
        .replica
        .wait_for(T, |r| r.managers().into_iter().find(|m| m.is_connected))
        .await
        .unwrap();
    assert_eq!(m.target, format!("tcp:127.0.0.1:{port}"));

    // The server reconnects to us after a restart; the new connection is a new client.
    let mut sb = sb;
    sb.restart_ovsdb().unwrap();
    let ovsdb::Accepted {
        client,
        events: mut ev,
        ..
    } = tokio::time::timeout(Duration::from_secs(30), l.accept())
        .await
        .expect("server reconnected")
        .unwrap();
    let vs2 = VSwitch::new(client).await.unwrap();
    assert!(vs2.replica.read().bridge("br-passive").is_some());
    let _ = &mut ev;
    // The old client saw its connection close and stopped.
    tokio::time::timeout(T, async {
        while !vs.client.is_closed() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("old passive client stopped");
}

#[tokio::test]
async fn lock_steal_unlock() {
    let sb = sandbox();
    let (a, mut aev) = Client::connect(&unix_remote(&sb), cfg()).await.unwrap();
    let (b, mut bev) = Client::connect(&unix_remote(&sb), cfg()).await.unwrap();
    assert!(a.lock("leader").await.unwrap());
    assert!(!b.lock("leader").await.unwrap());
    // assert op works for the holder only
    a.transact(
        "Open_vSwitch",
        vec![Operation::Assert {
            lock: "leader".into(),
        }],
    )
    .await
    .unwrap();
    let e = b
        .transact(
            "Open_vSwitch",
            vec![Operation::Assert {
                lock: "leader".into(),
            }],
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.transact().and_then(|t| t.kind()),
        Some(&ErrorKind::NotOwner)
    );
    a.unlock("leader").await.unwrap();
    next_event(
        &mut bev,
        |e| matches!(e, ClientEvent::Locked(n) if n == "leader"),
    )
    .await;
    assert!(a.steal("leader").await.unwrap());
    next_event(
        &mut bev,
        |e| matches!(e, ClientEvent::Stolen(n) if n == "leader"),
    )
    .await;
    let _ = &mut aev;
}

#[tokio::test]
async fn wait_for_ofport_with_vswitchd() {
    let sb = sandbox();
    // Every sandbox runs ovs-vswitchd, which assigns the ofports.
    let (vs, _ev) = VSwitch::connect(&unix_remote(&sb), cfg()).await.unwrap();
    let mut spec = BridgeSpec::new("br-of");
    spec.datapath_type = Some("netdev".into());
    vs.ensure_bridge(&spec).await.unwrap();
    let mut p = PortSpec::new("of-int", InterfaceType::Internal);
    p.ofport_request = Some(42);
    vs.add_port("br-of", &p).await.unwrap();
    let ofport = vs.wait_ofport("of-int", T).await.unwrap();
    assert_eq!(ofport, 42);
    let local = vs.wait_ofport("br-of", T).await.unwrap();
    assert!(local > 0);
    // The replica agrees with vsctl.
    assert_eq!(
        vsctl(&sb, &["get", "Interface", "of-int", "ofport"]).trim(),
        "42"
    );
    // cur_cfg tracks vswitchd
    assert!(vs.replica.read().open_vswitch().is_some());
    let _ = vswitch::DB;
}

#[tokio::test]
async fn cancel_blocked_transaction() {
    let sb = sandbox();
    let (c, _ev) = Client::connect(&unix_remote(&sb), cfg()).await.unwrap();
    // A wait that blocks for up to 60 s: the (empty) selection never equals one row.
    let row: Row = [("name".to_owned(), Datum::string("never"))]
        .into_iter()
        .collect();
    let op = Operation::Wait {
        table: "Bridge".into(),
        conditions: vec![Condition::eq("name", Datum::string("never"))],
        columns: vec!["name".into()],
        until: Until::Equal,
        rows: vec![row],
        timeout_ms: Some(60_000),
    };
    let p = c.start_transact("Open_vSwitch", vec![op]);
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.cancel();
    let e = tokio::time::timeout(T, p.result())
        .await
        .expect("cancel took effect")
        .unwrap_err();
    assert!(
        matches!(e, ovsdb::Error::Request(ovsdb::RequestError::Canceled)),
        "{e}"
    );
    // The connection is still usable.
    c.list_dbs().await.unwrap();
}
