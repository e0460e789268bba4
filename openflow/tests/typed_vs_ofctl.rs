//! Values built in Rust encode to exactly the bytes `ovs-ofctl` sends for
//! the same text, and messages `ovs-ofctl` cannot send print as
//! `ovs-ofctl ofp-print` prints our encoding.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::net::Ipv4Addr;

use common::{capture, ofp_print};
use openflow::action::{Action, Controller, Resubmit};
use openflow::ct::{Ct, CtZone, Nat};
use openflow::field::Field;
use openflow::instruction::Instruction;
use openflow::msg::*;
use openflow::oxm::Match;
use openflow::subfield::Subfield;
use openflow::{Body, Message};

fn ip(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from(Ipv4Addr::new(a, b, c, d))
}

/// The flow_mod `ovs-ofctl add-flow` sends for `text`, with xid zeroed.
fn ofctl_flow(text: &str) -> Vec<u8> {
    let msgs = match text.strip_prefix("delete ") {
        Some(rest) => capture(&["del-flows", "TARGET", rest]),
        None => capture(&["add-flow", "TARGET", text]),
    };
    let mut m = msgs.into_iter().find(|m| m[1] == 14).expect("flow_mod");
    m[4..8].copy_from_slice(&[0; 4]);
    m
}

fn ofctl_group(text: &str) -> Vec<u8> {
    let msgs = capture(&["add-group", "TARGET", text]);
    let mut m = msgs.into_iter().find(|m| m[1] == 15).expect("group_mod");
    m[4..8].copy_from_slice(&[0; 4]);
    m
}

fn flow(fm: FlowMod) -> Vec<u8> {
    Message::new(0, Body::FlowMod(fm)).encode().unwrap()
}

fn apply(actions: Vec<Action>) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(actions)]
}

#[test]
fn service_dnat_flow() {
    let fm = FlowMod {
        table_id: 10,
        priority: 100,
        cookie: 0x1234,
        match_: Match::new()
            .with_masked(Field::CtState, 0x21u32, 0x21u32)
            .with(Field::EthType, 0x0800u16)
            .with(Field::IpProto, 6u8)
            .with(Field::Ipv4Dst, ip(10, 96, 0, 10))
            .with(Field::TcpDst, 80u16),
        instructions: apply(vec![Action::Ct(Ct {
            commit: true,
            zone: CtZone::Imm(5),
            table: Some(20),
            nat: Some(Nat::dnat(Ipv4Addr::new(10, 244, 1, 5), Some(8080))),
            exec: vec![Action::set_field(Field::CtMark, 1u32)],
            ..Ct::default()
        })])
        .into(),
        ..FlowMod::default()
    };
    assert_eq!(
        flow(fm),
        ofctl_flow(
            "table=10,priority=100,cookie=0x1234,ct_state=+new+trk,tcp,nw_dst=10.96.0.10,tp_dst=80 \
             actions=ct(commit,zone=5,table=20,nat(dst=10.244.1.5:8080),exec(set_field:1->ct_mark))"
        )
    );
}

#[test]
fn pipeline_flows() {
    let cases: Vec<(FlowMod, &str)> = vec![
        (
            FlowMod {
                priority: 5,
                match_: Match::new().with(Field::EthType, 0x0800u16),
                ..FlowMod::default()
            },
            "priority=5,ip actions=drop",
        ),
        (
            FlowMod {
                match_: Match::new()
                    .with_masked(Field::CtState, 0x22u32, 0x22u32)
                    .with(Field::EthType, 0x0800u16),
                instructions: apply(vec![Action::resubmit_table(30)]).into(),
                ..FlowMod::default()
            },
            "ct_state=+est+trk,ip actions=resubmit(,30)",
        ),
        (
            FlowMod {
                match_: Match::new()
                    .with(Field::Reg0, 5u32)
                    .with(Field::InPortOxm, 3u32)
                    .with(Field::EthType, 0x0800u16),
                instructions: apply(vec![
                    Action::RegLoad {
                        dst: Subfield::range(Field::Reg1, 0, 15),
                        value: 0x50,
                    },
                    Action::RegMove {
                        src: Subfield::whole(Field::Ipv4Src),
                        dst: Subfield::whole(Field::Reg2),
                    },
                    Action::Resubmit(Resubmit {
                        in_port: 0xfff8,
                        table: 3,
                        ct: false,
                        legacy: false,
                    }),
                ])
                .into(),
                ..FlowMod::default()
            },
            "reg0=5,in_port=3,ip actions=load:0x50->NXM_NX_REG1[0..15],move:NXM_OF_IP_SRC[]->NXM_NX_REG2[],resubmit(,3)",
        ),
        (
            FlowMod {
                match_: Match::new().with(Field::EthType, 0x0800u16),
                instructions: apply(vec![
                    Action::Ct(Ct {
                        zone: CtZone::Field(Subfield::range(Field::Reg6, 0, 15)),
                        table: Some(2),
                        nat: Some(Nat::default()),
                        ..Ct::default()
                    }),
                    Action::CtClear,
                ])
                .into(),
                ..FlowMod::default()
            },
            "ip actions=ct(table=2,zone=NXM_NX_REG6[0..15],nat),ct_clear",
        ),
        (
            FlowMod {
                command: FlowModCommand::Delete,
                table_id: 255,
                cookie: 5,
                cookie_mask: u64::MAX,
                ..FlowMod::default()
            },
            "delete cookie=0x5/-1",
        ),
        (
            FlowMod {
                idle_timeout: 10,
                hard_timeout: 20,
                flags: 1,
                match_: Match::new()
                    .with(Field::EthType, 0x0806u16)
                    .with(Field::ArpOp, 1u16),
                instructions: vec![
                    Instruction::ApplyActions(vec![
                        Action::Controller(Controller {
                            max_len: 128,
                            controller_id: 0,
                            reason: 0,
                            userdata: vec![1, 2],
                            pause: false,
                            meter_id: None,
                            legacy: false,
                        }),
                        Action::Note(vec![0xaa, 0, 0, 0, 0, 0]),
                    ]),
                    Instruction::GotoTable(4),
                ]
                .into(),
                ..FlowMod::default()
            },
            "idle_timeout=10,hard_timeout=20,send_flow_rem,arp,arp_op=1 actions=controller(reason=no_match,max_len=128,userdata=01.02),note:aa,goto_table:4",
        ),
    ];
    for (fm, text) in cases {
        let mut expected = ofctl_flow(text);
        if text.starts_with("delete") {
            // ovs-ofctl sends DELETE as command 3 with table ALL.
            expected[4..8].copy_from_slice(&[0; 4]);
        }
        assert_eq!(common::hex(&flow(fm)), common::hex(&expected), "{text}");
    }
}

#[test]
fn select_group() {
    let bucket = |ipa: u32| {
        Bucket::new(
            1,
            vec![Action::Ct(Ct {
                commit: true,
                nat: Some(Nat::dnat(Ipv4Addr::from(ipa), Some(80))),
                ..Ct::default()
            })],
        )
    };
    let gm = GroupMod {
        command: GroupModCommand::Add,
        group_type: GroupType::Select,
        group_id: 7,
        buckets: vec![bucket(ip(10, 0, 0, 1)), bucket(ip(10, 0, 0, 2))],
    };
    assert_eq!(
        gm.buckets[0].encoded_len(),
        64,
        "bucket with ct(commit,nat(dst)) is 64 bytes in OF1.3"
    );
    let ours = Message::new(0, Body::GroupMod(gm)).encode().unwrap();
    assert_eq!(
        ours,
        ofctl_group(
            "group_id=7,type=select,bucket=actions=ct(commit,nat(dst=10.0.0.1:80)),bucket=actions=ct(commit,nat(dst=10.0.0.2:80))"
        )
    );
}

/// Messages only a switch sends: encode ours and compare our text with
/// `ovs-ofctl ofp-print` of our bytes.
#[test]
fn switch_messages_print_like_ofp_print() {
    let m = Match::new()
        .with(Field::InPortOxm, 1u32)
        .with(Field::Reg0, 5u32);
    let bodies = vec![
        Body::Hello(Hello::of13()),
        Body::Hello(Hello {
            version: 6,
            bitmap: Some(vec![0x52]),
            other: vec![],
        }),
        Body::EchoRequest(vec![]),
        Body::FeaturesRequest,
        Body::GetConfigRequest,
        Body::SetConfig(SwitchConfig {
            flags: 0,
            miss_send_len: 0xffff,
        }),
        Body::GetConfigReply(SwitchConfig {
            flags: 1,
            miss_send_len: 128,
        }),
        Body::BarrierRequest,
        Body::BarrierReply,
        Body::RoleRequest(Role {
            role: 2,
            generation_id: 10,
        }),
        Body::RoleReply(Role {
            role: 3,
            generation_id: 11,
        }),
        Body::RoleRequest(Role {
            role: 0,
            generation_id: u64::MAX,
        }),
        Body::GetAsyncRequest,
        Body::SetAsync(AsyncConfig {
            packet_in_mask: [1, 1],
            port_status_mask: [3, 3],
            flow_removed_mask: [15, 15],
        }),
        Body::GetAsyncReply(AsyncConfig {
            packet_in_mask: [7, 0],
            port_status_mask: [7, 0],
            flow_removed_mask: [0, 0],
        }),
        Body::CtFlushZone(5),
        Body::FlowRemoved(FlowRemoved {
            cookie: 0x10,
            priority: 100,
            reason: 0,
            table_id: 3,
            duration_sec: 5,
            duration_nsec: 500_000_000,
            idle_timeout: 10,
            hard_timeout: 0,
            packet_count: 3,
            byte_count: 180,
            match_: m.clone(),
        }),
        Body::TableMod(TableMod {
            table_id: 3,
            config: 0,
        }),
        Body::MultipartRequest(MultipartRequest {
            flags: 0,
            body: MultipartBody::DescRequest,
        }),
        Body::MultipartRequest(MultipartRequest {
            flags: 0,
            body: MultipartBody::FlowRequest(FlowStatsRequest::default()),
        }),
        Body::MultipartReply(MultipartReply {
            flags: 0,
            body: MultipartBody::Aggregate(AggregateStats {
                packet_count: 1,
                byte_count: 2,
                flow_count: 3,
            }),
        }),
        Body::MultipartReply(MultipartReply {
            flags: 1,
            body: MultipartBody::Flow(vec![FlowStats {
                table_id: 2,
                duration_sec: 1,
                duration_nsec: 0,
                priority: 10,
                idle_timeout: 0,
                hard_timeout: 0,
                flags: 0,
                cookie: 0x5,
                packet_count: 7,
                byte_count: 700,
                match_: Match::new().with(Field::EthType, 0x0800u16),
                instructions: vec![Instruction::ApplyActions(vec![Action::output(1)])],
            }]),
        }),
        Body::MultipartReply(MultipartReply {
            flags: 0,
            body: MultipartBody::GroupDesc(vec![GroupDesc {
                group_type: GroupType::Select,
                group_id: 1,
                buckets: vec![Bucket::new(5, vec![Action::output(2)])],
            }]),
        }),
        Body::MultipartReply(MultipartReply {
            flags: 0,
            body: MultipartBody::Desc(SwitchDesc {
                mfr_desc: "Nicira, Inc.".into(),
                hw_desc: "Open vSwitch".into(),
                sw_desc: "3.1.0".into(),
                serial_num: "None".into(),
                dp_desc: "None".into(),
            }),
        }),
        Body::Error(ErrorMsg {
            err_type: 1,
            code: 1,
            experimenter: None,
            data: Message::new(5, Body::BarrierRequest).encode().unwrap(),
        }),
    ];
    let mut failures = Vec::new();
    for body in bodies {
        let msg = Message::new(0x42, body);
        let bytes = msg.encode().unwrap();
        assert_eq!(Message::decode(&bytes).unwrap(), msg);
        let theirs = ofp_print(&bytes);
        let ours = msg.to_string();
        if ours.trim_end() != theirs {
            failures.push(format!(
                "{}\n  ours: {ours}\n  ovs:  {theirs}",
                common::hex(&bytes)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
