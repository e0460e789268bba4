//! Property tests: decode(encode(x)) == x for generated messages.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::net::{Ipv4Addr, Ipv6Addr};

use openflow::action::{Action, Resubmit};
use openflow::ct::{Ct, CtZone, Nat};
use openflow::field::Field;
use openflow::instruction::Instruction;
use openflow::msg::{
    Bucket, CtFlush, CtTuple, FlowMod, FlowModCommand, GroupMod, GroupModCommand, GroupType,
    MeterBand, MeterConfig, MeterMod, MeterStats, MultipartBody, MultipartReply, RawProperty,
};
use openflow::oxm::{Match, RawOxm};
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

/// A `NXT_CT_FLUSH` tuple whose addresses are all IPv4 (mapped) or all IPv6.
fn ct_tuple(v4: bool) -> impl Strategy<Value = CtTuple> {
    let addr = move |a: [u8; 16]| {
        let ip = Ipv6Addr::from(a);
        if v4 {
            Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_ipv6_mapped()
        } else if ip.to_ipv4_mapped().is_some() {
            Ipv6Addr::UNSPECIFIED
        } else {
            ip
        }
    };
    (
        (
            proptest::option::of(any::<[u8; 16]>()),
            proptest::option::of(any::<[u8; 16]>()),
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u16>()),
        ),
        (
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            proptest::option::of(any::<u8>()),
            proptest::collection::vec(
                (7u16.., proptest::collection::vec(any::<u8>(), 0..12)),
                0..3,
            ),
        ),
    )
        .prop_map(
            move |((src, dst, src_port, dst_port), (icmp_id, icmp_type, icmp_code, unknown))| {
                CtTuple {
                    src: src.map(addr),
                    dst: dst.map(addr),
                    src_port,
                    dst_port,
                    icmp_id,
                    icmp_type,
                    icmp_code,
                    unknown: unknown
                        .into_iter()
                        .map(|(ty, body)| RawProperty { ty, body })
                        .collect(),
                }
            },
        )
}

fn ct_flush() -> impl Strategy<Value = CtFlush> {
    any::<bool>().prop_flat_map(|v4| {
        (
            any::<u8>(),
            proptest::option::of(ct_tuple(v4)),
            proptest::option::of(ct_tuple(v4)),
            proptest::option::of(any::<u16>()),
            proptest::collection::vec(
                (3u16.., proptest::collection::vec(any::<u8>(), 0..12)),
                0..3,
            ),
        )
            .prop_map(|(ip_proto, orig, reply, zone, unknown)| CtFlush {
                ip_proto,
                orig,
                reply,
                zone,
                unknown: unknown
                    .into_iter()
                    .map(|(ty, body)| RawProperty { ty, body })
                    .collect(),
            })
    })
}

fn meter_band() -> impl Strategy<Value = MeterBand> {
    prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(r, b)| MeterBand::drop(r, b)),
        (any::<u32>(), any::<u32>(), any::<u8>()).prop_map(|(rate, burst_size, prec_level)| {
            MeterBand::DscpRemark {
                rate,
                burst_size,
                prec_level,
            }
        }),
        (
            3u16..,
            any::<u32>(),
            any::<u32>(),
            proptest::collection::vec(any::<u8>(), 0..24)
        )
            .prop_map(|(band_type, rate, burst_size, data)| MeterBand::Unknown {
                band_type,
                rate,
                burst_size,
                data
            }),
    ]
}

fn meter_config() -> impl Strategy<Value = MeterConfig> {
    (
        any::<u32>(),
        any::<u16>(),
        proptest::collection::vec(meter_band(), 0..4),
    )
        .prop_map(|(meter_id, flags, bands)| MeterConfig {
            meter_id,
            flags,
            bands,
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
        let fm = FlowMod { cookie, priority, table_id, command: FlowModCommand::from(cmd), match_: m, instructions: instructions.into(), ..FlowMod::default() };
        let msg = Message::new(7, Body::FlowMod(fm));
        let bytes = msg.encode().unwrap();
        prop_assert_eq!(bytes.len(), msg.encoded_len());
        prop_assert_eq!(Message::decode(&bytes).unwrap(), msg);
    }

    #[test]
    fn ct_flush_round_trips(c in ct_flush()) {
        let msg = Message::new(3, Body::CtFlush(c));
        let bytes = msg.encode().unwrap();
        prop_assert_eq!(bytes.len(), msg.encoded_len());
        prop_assert_eq!(Message::decode(&bytes).unwrap(), msg.clone());
        let _ = msg.to_string();
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
    fn meter_mod_round_trips(command in any::<u16>(), meter in meter_config()) {
        let msg = Message::new(4, Body::MeterMod(MeterMod { command: command.into(), meter }));
        let bytes = msg.encode().unwrap();
        prop_assert_eq!(bytes.len(), msg.encoded_len());
        prop_assert_eq!(Message::decode(&bytes).unwrap(), msg.clone());
        let _ = msg.to_string();
    }

    #[test]
    fn meter_replies_round_trip(
        configs in proptest::collection::vec(meter_config(), 0..4),
        stats in proptest::collection::vec(
            (any::<[u32; 4]>(), any::<[u64; 2]>(), proptest::collection::vec(any::<(u64, u64)>(), 0..4)),
            0..4,
        ),
    ) {
        let stats = stats.into_iter().map(|([meter_id, flow_count, duration_sec, duration_nsec], [packet_in_count, byte_in_count], bands)| MeterStats {
            meter_id, flow_count, packet_in_count, byte_in_count, duration_sec, duration_nsec, bands,
        }).collect();
        for body in [MultipartBody::MeterConfig(configs), MultipartBody::Meter(stats)] {
            let msg = Message::new(5, Body::MultipartReply(MultipartReply { flags: 0, body }));
            let bytes = msg.encode().unwrap();
            prop_assert_eq!(Message::decode(&bytes).unwrap(), msg.clone());
            let _ = msg.to_string();
        }
    }

    /// Unknown entries anywhere among the known ones survive a round trip in their places.
    #[test]
    fn unknown_match_fields_round_trip(
        m in flow_match(),
        raws in proptest::collection::vec(
            (any::<usize>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 1..8), any::<bool>()),
            0..4,
        ),
    ) {
        let mut m = m;
        let mut unknown: Vec<(usize, RawOxm)> = raws
            .into_iter()
            .map(|(at, field, value, masked)| {
                let field = field >> 1;
                // A mask of all ones keeps the value inside its mask.
                let mask = masked.then(|| vec![0xff; value.len()]);
                (at % (m.fields.len() + 1), RawOxm { class: 0x0005, field, experimenter: 0, value, mask })
            })
            .collect();
        unknown.sort_by_key(|(at, _)| *at);
        m.unknown = unknown;
        let msg = Message::new(7, Body::FlowMod(FlowMod { match_: m, ..FlowMod::default() }));
        let bytes = msg.encode().unwrap();
        prop_assert_eq!(bytes.len(), msg.encoded_len());
        prop_assert_eq!(Message::decode(&bytes).unwrap(), msg);
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Message::decode(&bytes);
    }
}
