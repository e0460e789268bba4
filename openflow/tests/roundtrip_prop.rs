//! Property tests: decode(encode(x)) == x for generated messages.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::Ipv4Addr;

use openflow::action::{Action, Resubmit};
use openflow::ct::{Ct, CtZone, Nat};
use openflow::field::Field;
use openflow::instruction::Instruction;
use openflow::msg::{Bucket, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType};
use openflow::oxm::Match;
use openflow::subfield::Subfield;
use openflow::{Body, Message};
use proptest::prelude::*;

fn reg() -> impl Strategy<Value = Field> {
    (0u8..16).prop_map(|n| Field::reg(n).unwrap())
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        (any::<u32>(), any::<u16>()).prop_map(|(port, max_len)| Action::Output { port, max_len }),
        any::<u32>().prop_map(Action::Group),
        (reg(), any::<u32>()).prop_map(|(f, v)| Action::set_field(f, v)),
        (reg(), 0u16..16, any::<u16>()).prop_map(|(f, ofs, v)| Action::RegLoad {
            dst: Subfield::range(f, ofs, ofs + 15),
            value: u64::from(v)
        }),
        (reg(), reg()).prop_map(|(a, b)| Action::RegMove {
            src: Subfield::whole(a),
            dst: Subfield::whole(b)
        }),
        (any::<u16>(), any::<u8>(), any::<bool>()).prop_map(|(in_port, table, ct)| {
            Action::Resubmit(Resubmit {
                in_port,
                table,
                ct,
                legacy: false,
            })
        }),
        (
            any::<bool>(),
            any::<u16>(),
            proptest::option::of(any::<u8>()),
            any::<[u8; 4]>(),
            proptest::option::of(any::<u16>())
        )
            .prop_map(|(commit, zone, table, ip, port)| Action::Ct(Ct {
                commit,
                zone: CtZone::Imm(zone),
                table: table.filter(|&t| t != 255),
                nat: Some(Nat::dnat(Ipv4Addr::from(ip), port)),
                exec: vec![Action::set_field(Field::CtMark, 1u32)],
                ..Ct::default()
            })),
        Just(Action::CtClear),
        proptest::collection::vec(any::<u8>(), 6..20).prop_map(|mut v| {
            let pad = (v.len() + 10).next_multiple_of(8) - (v.len() + 10);
            v.extend(std::iter::repeat_n(0, pad));
            Action::Note(v)
        }),
        (1u32.., 2u8..10).prop_map(|(id, n)| Action::Conjunction {
            id,
            clause: n - 1,
            n_clauses: n
        }),
    ]
}

fn flow_match() -> impl Strategy<Value = Match> {
    (
        any::<u32>(),
        any::<[u8; 4]>(),
        0u8..33,
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(r0, ip, plen, port, tcp)| {
            let mask = if plen == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(plen))
            };
            let mut m = Match::new()
                .with(Field::Reg0, r0)
                .with(Field::EthType, 0x0800u16);
            if mask != 0 {
                m = m.with_masked(Field::Ipv4Dst, u32::from(Ipv4Addr::from(ip)) & mask, mask);
            }
            if tcp {
                m = m.with(Field::IpProto, 6u8).with(Field::TcpDst, port);
            }
            m
        })
}

proptest! {
    #[test]
    fn flow_mod_round_trips(
        m in flow_match(),
        actions in proptest::collection::vec(action(), 0..6),
        cookie in any::<u64>(),
        priority in any::<u16>(),
        table_id in any::<u8>(),
        cmd in 0u8..5,
        goto in proptest::option::of(any::<u8>()),
    ) {
        let mut instructions = vec![Instruction::ApplyActions(actions)];
        if let Some(t) = goto { instructions.push(Instruction::GotoTable(t)); }
        let fm = FlowMod { cookie, priority, table_id, command: FlowModCommand::from(cmd), match_: m, instructions, ..FlowMod::default() };
        let msg = Message::new(7, Body::FlowMod(fm));
        let bytes = msg.encode().unwrap();
        prop_assert_eq!(bytes.len(), msg.encoded_len());
        prop_assert_eq!(Message::decode(&bytes).unwrap(), msg);
    }

    #[test]
    fn group_mod_round_trips(buckets in proptest::collection::vec((any::<u16>(), proptest::collection::vec(action(), 0..4)), 0..10)) {
        let gm = GroupMod {
            command: GroupModCommand::Add,
            group_type: GroupType::Select,
            group_id: 9,
            buckets: buckets.into_iter().map(|(w, a)| Bucket::new(w, a)).collect(),
        };
        let msg = Message::new(1, Body::GroupMod(gm));
        let bytes = msg.encode().unwrap();
        prop_assert_eq!(Message::decode(&bytes).unwrap(), msg);
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Message::decode(&bytes);
    }
}
