//! Controller roles (OF1.3 §6.3.4) against a real `ovs-vswitchd`: two controllers as master
//! and slave, generation ids, and role status.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod session_util;

use std::time::Duration;

use openflow::driver::{DriverConfig, Error, Listener, SwitchEvent, SwitchHandle};
use openflow::session::{RequestError, role};
use session_util::{BR, accept, flow_body, sandbox};

/// Two listeners, both set as the bridge's controllers; returns their sessions.
async fn two_controllers(sb: &ovs_tests::Sandbox) -> (SwitchHandle, SwitchHandle, Vec<Listener>) {
    let mut listeners = Vec::new();
    let mut targets = Vec::new();
    for name in ["a", "b"] {
        let path = sb.dir().join(format!("run/{name}.sock"));
        listeners.push(
            Listener::bind(
                &format!("punix:{}", path.display()),
                DriverConfig::default(),
            )
            .await
            .unwrap(),
        );
        targets.push(format!("unix:{}", path.display()));
    }
    let mut args = vec!["set-controller", BR];
    args.extend(targets.iter().map(String::as_str));
    tokio::task::block_in_place(|| sb.vsctl(&args)).unwrap();
    let a = accept(&mut listeners[0], 20).await;
    let b = accept(&mut listeners[1], 20).await;
    (a, b, listeners)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slave_cannot_modify_flows_and_stale_generations_are_refused() {
    let sb = sandbox();
    let (a, b, _listeners) = two_controllers(&sb).await;
    let mut a_events = a.events();

    let r = a.set_role(role::MASTER, 10).await.unwrap();
    assert_eq!((r.role, r.generation_id), (role::MASTER, 10));
    let r = b.set_role(role::SLAVE, 10).await.unwrap();
    assert_eq!(r.role, role::SLAVE);

    // The slave's flow_mod is refused with OFPBRC_IS_SLAVE, and so is its bundle.
    let xid = b.send(flow_body(1)).await.unwrap();
    let err = b.barrier().await.unwrap_err();
    let Error::Request(RequestError::SendsFailed(f)) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (f[0].xid, f[0].error.name()),
        (xid, Some("OFPBRC_IS_SLAVE")),
        "{err}"
    );
    let err = b.bundle(vec![flow_body(2)]).await.unwrap_err();
    assert!(err.to_string().contains("OFPBRC_IS_SLAVE"), "{err}");
    // The slave may still read; the master may write.
    a.bundle(vec![flow_body(3)]).await.unwrap();
    assert_eq!(b.dump_flows(Default::default()).await.unwrap().len(), 1);

    // A generation id older than the newest seen is stale (OFPRRFC_STALE).
    let err = b.set_role(role::MASTER, 9).await.unwrap_err();
    let Error::Request(RequestError::Refused(e)) = &err else {
        panic!("{err}")
    };
    assert_eq!(e.name(), Some("OFPRRFC_STALE"), "{err}");

    // A newer generation takes over; the old master is told by ROLE_STATUS and demoted.
    let r = b.set_role(role::MASTER, 11).await.unwrap();
    assert_eq!(r.role, role::MASTER);
    let status = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let SwitchEvent::RoleStatus(s) = a_events.recv().await.unwrap() {
                return s;
            }
        }
    })
    .await
    .expect("ROLE_STATUS for the demoted master");
    assert_eq!((status.role, status.generation_id), (role::SLAVE, 11));
    assert_eq!(
        *a.role_status().borrow(),
        Some(status),
        "the role watch has it too"
    );
    let err = a.bundle(vec![flow_body(4)]).await.unwrap_err();
    assert!(err.to_string().contains("OFPBRC_IS_SLAVE"), "{err}");
    b.bundle(vec![flow_body(4)]).await.unwrap();
    let r = a.set_role(role::NOCHANGE, 0).await.unwrap();
    assert_eq!(r.role, role::SLAVE);
}
