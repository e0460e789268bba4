//! Codec benchmarks: (a) a service DNAT flow_mod, (b) a 500-bucket select
//! group_mod, (c) a 10,000-flow flow-stats reply split into <= 64 KiB
//! multipart messages with the MORE flag.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use openflow::action::Action;
use openflow::ct::{Ct, CtZone, Nat};
use openflow::field::Field;
use openflow::instruction::Instruction;
use openflow::msg::{
    Bucket, FlowMod, FlowStats, GroupMod, GroupModCommand, GroupType, MultipartBody, MultipartReply,
};
use openflow::oxm::Match;
use openflow::wire::Writer;
use openflow::{Body, Message};

fn dnat_flow() -> Message {
    let fm = FlowMod {
        table_id: 10,
        priority: 100,
        match_: Match::new()
            .with_masked(Field::CtState, 0x21u32, 0x21u32)
            .with(Field::EthType, 0x0800u16)
            .with(Field::IpProto, 6u8)
            .with(Field::Ipv4Dst, u32::from(Ipv4Addr::new(10, 96, 0, 10)))
            .with(Field::TcpDst, 80u16),
        instructions: vec![Instruction::ApplyActions(vec![Action::Ct(Ct {
            commit: true,
            zone: CtZone::Imm(5),
            table: Some(20),
            nat: Some(Nat::dnat(Ipv4Addr::new(10, 244, 1, 5), Some(8080))),
            ..Ct::default()
        })])]
        .into(),
        ..FlowMod::default()
    };
    Message::new(1, Body::FlowMod(fm))
}

fn big_group() -> Message {
    let buckets = (0..500u32)
        .map(|i| {
            Bucket::new(
                1,
                vec![Action::Ct(Ct {
                    commit: true,
                    table: Some(20),
                    zone: CtZone::Imm(5),
                    nat: Some(Nat::dnat(Ipv4Addr::from(0x0af4_0000 + i), Some(8080))),
                    ..Ct::default()
                })],
            )
        })
        .collect();
    Message::new(
        2,
        Body::GroupMod(GroupMod {
            command: GroupModCommand::Add,
            group_type: GroupType::Select,
            group_id: 1,
            buckets,
        }),
    )
}

/// 10,000 flow stats split into messages of at most 65,535 bytes.
fn flow_stats_stream() -> Vec<u8> {
    let stat = |i: u32| FlowStats {
        table_id: 10,
        duration_sec: i,
        duration_nsec: 0,
        priority: 100,
        idle_timeout: 0,
        hard_timeout: 0,
        flags: 0,
        cookie: u64::from(i),
        packet_count: 10,
        byte_count: 1000,
        match_: Match::new()
            .with(Field::EthType, 0x0800u16)
            .with(Field::IpProto, 6u8)
            .with(Field::Ipv4Dst, 0x0a60_0000 + i)
            .with(Field::TcpDst, 80u16),
        instructions: vec![Instruction::ApplyActions(vec![Action::Group(i)])],
    };
    let all: Vec<FlowStats> = (0..10_000).map(stat).collect();
    let per = 65_000 / all[0].encoded_len();
    let chunks: Vec<&[FlowStats]> = all.chunks(per).collect();
    let mut w = Writer::new();
    for (i, c) in chunks.iter().enumerate() {
        let flags = u16::from(i + 1 < chunks.len());
        let m = Message::new(
            3,
            Body::MultipartReply(MultipartReply {
                flags,
                body: MultipartBody::Flow(c.to_vec()),
            }),
        );
        m.encode_into(&mut w).expect("fits");
    }
    w.into_vec()
}

fn decode_stream(mut buf: &[u8]) -> usize {
    let mut n = 0;
    while let Some(len) = Message::frame_len(buf) {
        let (m, rest) = buf.split_at(len.min(buf.len()));
        if let Ok(Message {
            body: Body::MultipartReply(r),
            ..
        }) = Message::decode(m)
        {
            if let MultipartBody::Flow(v) = r.body {
                n += v.len();
            }
        }
        buf = rest;
    }
    n
}

fn bench(c: &mut Criterion) {
    let flow = dnat_flow();
    let flow_bytes = flow.encode().expect("encode");
    let mut w = Writer::new();
    c.bench_function("a/dnat_flow_mod/encode", |b| {
        b.iter(|| {
            w.clear();
            black_box(&flow).encode_into(&mut w).expect("encode");
            black_box(w.len())
        })
    });
    // Decoding and dropping the result, as a caller pays both. (Keeping every result for a
    // later drop, `iter_with_large_drop`, measured page faults more than decoding.)
    c.bench_function("a/dnat_flow_mod/decode", |b| {
        b.iter(|| Message::decode(black_box(&flow_bytes)).expect("decode"))
    });

    let group = big_group();
    let group_bytes = group.encode().expect("encode");
    c.bench_function("b/select_group_500/encode", |b| {
        b.iter(|| black_box(&group).encode().expect("encode"))
    });
    c.bench_function("b/select_group_500/decode", |b| {
        b.iter(|| Message::decode(black_box(&group_bytes)).expect("decode"))
    });

    let stream = flow_stats_stream();
    assert_eq!(decode_stream(&stream), 10_000);
    let mut g = c.benchmark_group("c/flow_stats_10k");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("decode", |b| b.iter(|| decode_stream(black_box(&stream))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
