//! svcflow's OVSDB side of a node against a real ovsdb-server and ovs-vswitchd: it creates
//! `br-int` (secure, OpenFlow 1.3, the configured datapath type), points it at the controller,
//! adds the service-gateway port with its marker and fixed MAC, and reads the port bindings
//! (gateway, pods by `iface-id`) back from its replica.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::time::Duration;

use netvirt::node_setup::{NodeSetup, bindings, setup_ops};
use ovs_tests::{HostSpec, Sandbox};
use ovsdb::ClientConfig;
use ovsdb::vswitch::VSwitch;

fn get(sb: &Sandbox, table: &str, record: &str, column: &str) -> String {
    sb.vsctl(&["get", table, record, column])
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test]
async fn node_setup_converges_and_reads_back_bindings() {
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let (vs, _events) = VSwitch::connect(&sb.db_remote(), ClientConfig::default())
        .await
        .unwrap();
    let setup = NodeSetup {
        controller: format!("unix:{}/run/svcflow.sock", sb.dir().display()),
        datapath_id: netvirt::node_setup::datapath_id("n1"),
        ..NodeSetup::default()
    };

    // The bridge comes first; the controller and the gateway port follow on the next pass.
    let mut passes = 0;
    loop {
        let ops = setup_ops(&vs.replica.read(), &setup).unwrap();
        if ops.is_empty() {
            break;
        }
        passes += 1;
        assert!(passes <= 3, "node setup does not converge: {ops:?}");
        vs.client.transact("Open_vSwitch", ops).await.unwrap();
    }
    assert_eq!(passes, 2);

    assert_eq!(get(&sb, "bridge", "br-int", "fail_mode"), "secure");
    assert_eq!(get(&sb, "bridge", "br-int", "datapath_type"), "netdev");
    assert_eq!(get(&sb, "bridge", "br-int", "protocols"), "[OpenFlow13]");
    // ovs-vswitchd adopts the datapath id svcflow chose for the node.
    let dpid = format!("\"{:016x}\"", setup.datapath_id);
    let adopted = || (get(&sb, "bridge", "br-int", "datapath_id") == dpid).then_some(());
    ovs_tests::wait_for("the datapath id", Duration::from_secs(10), adopted).unwrap();
    assert_eq!(
        sb.vsctl(&["get-controller", "br-int"]).unwrap().trim(),
        setup.controller
    );
    assert_eq!(
        get(&sb, "controller", "br-int", "connection_mode"),
        "out-of-band"
    );
    assert_eq!(get(&sb, "interface", "svc-gw", "type"), "internal");
    assert_eq!(
        get(&sb, "interface", "svc-gw", "mac"),
        format!("\"{}\"", setup.gateway_mac)
    );
    assert_eq!(
        get(&sb, "interface", "svc-gw", "external_ids:svcflow-role"),
        "service-gateway"
    );

    // ovs-vswitchd gives the gateway port an OpenFlow port, and the replica sees it.
    let gw = vs
        .replica
        .wait_for(Duration::from_secs(10), |r| bindings(r, "br-int").gateway)
        .await
        .unwrap();
    assert_eq!(gw.mac, setup.gateway_mac);
    assert_eq!(
        gw.ofport.to_string(),
        get(&sb, "interface", "svc-gw", "ofport")
    );

    // A pod interface is bound by its iface-id.
    sb.add_host(
        "br-int",
        HostSpec::new("pod-a", "10.244.0.11/24", "02:00:00:00:00:11", 11),
    )
    .unwrap();
    sb.vsctl(&[
        "set",
        "interface",
        "pod-a",
        "external_ids:iface-id=default/pod-a",
    ])
    .unwrap();
    let ofport = vs
        .replica
        .wait_for(Duration::from_secs(10), |r| {
            bindings(r, "br-int").ofports.get("default/pod-a").copied()
        })
        .await
        .unwrap();
    assert_eq!(ofport, 11);

    // Nothing more to do, and a changed MAC is put back.
    assert!(setup_ops(&vs.replica.read(), &setup).unwrap().is_empty());
    sb.vsctl(&["set", "interface", "svc-gw", "mac=\"02:11:22:33:44:55\""])
        .unwrap();
    vs.replica
        .wait_for(Duration::from_secs(10), |r| {
            (!setup_ops(r, &setup).unwrap().is_empty()).then_some(())
        })
        .await
        .unwrap();
    // (The replica's read guard must not live across an await.)
    let ops = setup_ops(&vs.replica.read(), &setup).unwrap();
    vs.client.transact("Open_vSwitch", ops).await.unwrap();
    assert_eq!(
        get(&sb, "interface", "svc-gw", "mac"),
        format!("\"{}\"", setup.gateway_mac)
    );
}
