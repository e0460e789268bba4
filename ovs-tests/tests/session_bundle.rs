//! Bundles, barriers and dumps through our session against a real `ovs-vswitchd`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod session_util;

use openflow::action::Action;
use openflow::driver::{Error, FlowFilter};
use openflow::instruction::Instruction;
use openflow::msg::{AsyncConfig, Body, Bucket, GroupMod, GroupModCommand, GroupType};
use openflow::session::{RequestError, SendError};
use session_util::{BR, connect_mgmt, flow, flow_body, flow_text, sandbox};

const ALL_COOKIE_BITS: FlowFilter = FlowFilter {
    table_id: None,
    cookie: 0x5e55,
    cookie_mask: u64::MAX,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_flows_in_one_bundle_then_dump() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    sw.bundle((0..10_000).map(flow_body).collect())
        .await
        .unwrap();

    let flows = sw.dump_flows(ALL_COOKIE_BITS).await.unwrap();
    assert_eq!(flows.len(), 10_000);
    let mut dsts: Vec<u128> = flows
        .iter()
        .map(|f| f.match_.get(openflow::Field::Ipv4Dst).unwrap().value)
        .collect();
    dsts.sort_unstable();
    dsts.dedup();
    assert_eq!(dsts.len(), 10_000, "every flow is distinct");
    assert!(flows.iter().all(|f| f.priority == 100 && f.table_id == 0));

    // ovs-ofctl agrees.
    let text = tokio::task::block_in_place(|| sb.dump_flows(BR)).unwrap();
    assert_eq!(
        text.lines().filter(|l| l.contains("nw_dst=")).count(),
        10_000
    );
    assert!(
        text.contains(&format!("{} actions=output:1", flow_text(9_999))),
        "{}",
        &text[..300]
    );

    // A filter on table and cookie.
    let none = FlowFilter {
        table_id: Some(1),
        ..ALL_COOKIE_BITS
    };
    assert!(sw.dump_flows(none).await.unwrap().is_empty());
    let other_cookie = FlowFilter {
        cookie: 0x1,
        ..ALL_COOKIE_BITS
    };
    assert!(sw.dump_flows(other_cookie).await.unwrap().is_empty());
}

/// A bundle with one bad flow rolls back completely and names the flow, whether OVS refuses
/// it when adding (goto_table backwards) or when committing (output to a missing group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_flow_rolls_back_the_whole_bundle() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    sw.bundle((0..10).map(flow_body).collect()).await.unwrap();

    let mut missing_group = flow(1_000_057);
    missing_group.instructions = vec![Instruction::ApplyActions(vec![Action::Group(999)])].into();
    let mut goto_back = flow(1_000_057);
    goto_back.table_id = 3;
    goto_back.instructions = vec![Instruction::GotoTable(1)].into();
    for (bad, name, committed) in [
        (missing_group, "OFPBAC_BAD_OUT_GROUP", true),
        (goto_back, "OFPBIC_BAD_TABLE_ID", false),
    ] {
        let mut bodies: Vec<Body> = (1_000_000..1_000_100).map(flow_body).collect();
        bodies[57] = Body::FlowMod(bad);
        let err = sw.bundle(bodies).await.unwrap_err();
        let Error::Request(RequestError::Bundle(failure)) = &err else {
            panic!("expected a bundle failure, got {err}");
        };
        assert_eq!(failure.members.len(), 1, "{err}");
        assert_eq!(failure.members[0].index, 57, "{err}");
        assert_eq!(failure.members[0].error.name(), Some(name), "{err}");
        // OVS quotes the whole BUNDLE_ADD, whose xid is also the inner message's.
        assert!(
            err.to_string().contains(&format!(
                "message 57 (xid {:#x}): {name} (for ONFT_BUNDLE_ADD_MESSAGE)",
                failure.members[0].xid
            )),
            "{err}"
        );
        // A failed commit also fails the COMMIT itself; an ADD-time failure means DISCARD.
        assert_eq!(failure.control.is_some(), committed, "{err}");
        if committed {
            assert!(
                err.to_string()
                    .ends_with("control: OFPBFC_MSG_FAILED (for ONFT_BUNDLE_CONTROL)"),
                "{err}"
            );
        }
        let flows = sw.dump_flows(ALL_COOKIE_BITS).await.unwrap();
        assert_eq!(
            flows.len(),
            10,
            "nothing of the failed bundle was installed"
        );
    }
    let text = tokio::task::block_in_place(|| sb.dump_flows(BR)).unwrap();
    assert!(!text.contains("nw_dst=10.15."), "{text}");
}

/// Bundles queued back to back (`queue_bundle`, as the engine sends a long plan: the next one
/// queued while the switch applies the one before) are applied in order, each answered on its
/// own: a refused one fails alone, and the ones around it are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_bundles_apply_in_order_and_fail_alone() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    // Bundle 0 adds a group; bundle 1 adds flows that output to it, so it only succeeds if
    // bundle 0 was applied first; bundle 2 is refused (a missing group); bundle 3 goes on.
    let group = Body::GroupMod(GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::All,
        group_id: 5,
        buckets: vec![Bucket::new(
            0,
            vec![Action::Output {
                port: 1,
                max_len: 0,
            }],
        )],
    });
    let to_group = |n: u32, g: u32| {
        let mut f = flow(n);
        f.instructions = vec![Instruction::ApplyActions(vec![Action::Group(g)])].into();
        Body::FlowMod(f)
    };
    let bundles = vec![
        vec![group],
        (0..500).map(|n| to_group(n, 5)).collect(),
        vec![to_group(600, 5), to_group(601, 999)],
        (700..1_200).map(flow_body).collect::<Vec<_>>(),
    ];
    let mut queued = Vec::new();
    for b in bundles {
        queued.push(sw.queue_bundle(b).await.unwrap());
    }
    let mut results = Vec::new();
    for q in queued {
        results.push(q.applied().await);
    }
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    let Err(Error::Request(RequestError::Bundle(failure))) = &results[2] else {
        panic!("bundle 2 should be refused: {:?}", results[2]);
    };
    assert_eq!(failure.members[0].index, 1, "{failure:?}");
    assert!(results[3].is_ok(), "{:?}", results[3]);
    let flows = sw.dump_flows(ALL_COOKIE_BITS).await.unwrap();
    assert_eq!(flows.len(), 1_000, "bundles 1 and 3, nothing of bundle 2");
    let text = tokio::task::block_in_place(|| sb.dump_flows(BR)).unwrap();
    assert!(!text.contains(&flow_text(600)), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn barrier_names_the_sends_that_failed() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    let mut bad = flow(2);
    bad.instructions = vec![Instruction::ApplyActions(vec![Action::Group(77)])].into();
    let xids = sw
        .send_batch(vec![flow_body(1), Body::FlowMod(bad), flow_body(3)])
        .await
        .unwrap();
    let err = sw.barrier().await.unwrap_err();
    let Error::Request(RequestError::SendsFailed(failures)) = &err else {
        panic!("expected failed sends, got {err}");
    };
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].xid, xids[1]);
    assert_eq!(failures[0].error.name(), Some("OFPBAC_BAD_OUT_GROUP"));
    assert!(
        err.to_string()
            .contains("OFPBAC_BAD_OUT_GROUP (for OFPT_FLOW_MOD)"),
        "{err}"
    );
    // The good ones went in; a clean barrier succeeds.
    assert_eq!(sw.dump_flows(ALL_COOKIE_BITS).await.unwrap().len(), 2);
    sw.barrier().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_and_flows_in_one_bundle_then_dump_groups() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    let group = GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::Select,
        group_id: 7,
        buckets: (1..=3)
            .map(|p| Bucket::new(1, vec![Action::output(p)]))
            .collect(),
    };
    let mut to_group = flow(1);
    to_group.instructions = vec![Instruction::ApplyActions(vec![Action::Group(7)])].into();
    sw.bundle(vec![Body::GroupMod(group), Body::FlowMod(to_group)])
        .await
        .unwrap();
    let groups = sw.dump_groups().await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].group_id, groups[0].buckets.len()), (7, 3));
    let text = tokio::task::block_in_place(|| sb.dump_groups(BR)).unwrap();
    assert!(text.contains("group_id=7,type=select"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_member_fails_before_sending() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    let huge = GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::Select,
        group_id: 1,
        buckets: (0..5000)
            .map(|p| Bucket::new(1, vec![Action::output(p + 1)]))
            .collect(),
    };
    let err = sw
        .bundle(vec![flow_body(1), Body::GroupMod(huge)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Send(SendError::BundleMember { index: 1, .. })),
        "{err}"
    );
    assert!(sw.dump_flows(ALL_COOKIE_BITS).await.unwrap().is_empty());
    // The session is unharmed.
    sw.bundle(vec![flow_body(1)]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_config_round_trips() {
    let sb = sandbox();
    let sw = connect_mgmt(&sb).await;
    let config = AsyncConfig {
        packet_in_mask: [0b1, 0],
        port_status_mask: [0b111, 0b1],
        flow_removed_mask: [0b11, 0],
    };
    sw.set_async(config).await.unwrap();
    assert_eq!(sw.get_async().await.unwrap(), config);
}
