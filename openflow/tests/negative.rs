//! Malformed input yields typed errors, never panics; oversize messages are refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use openflow::action::Action;
use openflow::msg::{Bucket, GroupMod, GroupModCommand, GroupType};
use openflow::{Body, DecodeError, EncodeError, Message};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

// priority=5,ip actions=drop, as ovs-ofctl 3.1 sends it.
const FLOW: &str = "040e004000000002000000000000000000000000000000000000000000000005ffffffffffffffffffffffff000000000001000a80000a020800000000000000";

#[test]
fn valid_flow_decodes() {
    let m = Message::decode(&unhex(FLOW)).unwrap();
    assert!(matches!(m.body, Body::FlowMod(_)));
}

#[test]
fn truncated_everywhere() {
    let b = unhex(FLOW);
    for n in 0..b.len() {
        assert!(Message::decode(&b[..n]).is_err(), "prefix {n} accepted");
    }
}

#[test]
fn declared_length_longer_than_buffer() {
    let mut b = unhex(FLOW);
    b[3] += 8;
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::Truncated { .. })
    ));
}

#[test]
fn overlong_buffer_is_trailing_data() {
    let mut b = unhex(FLOW);
    b.extend_from_slice(&[0; 8]);
    assert_eq!(Message::decode(&b), Err(DecodeError::TrailingData(8)));
}

#[test]
fn bad_match_padding() {
    let mut b = unhex(FLOW);
    let last = b.len() - 1;
    b[last] = 1;
    assert_eq!(
        Message::decode(&b),
        Err(DecodeError::BadPadding("ofp_match"))
    );
}

#[test]
fn bad_oxm_length() {
    let mut b = unhex(FLOW);
    // eth_type entry claims 3 payload bytes.
    b[0x37] = 3;
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::BadOxmLength { .. } | DecodeError::BadPadding(_))
    ));
}

#[test]
fn unknown_oxm_field() {
    let mut b = unhex(FLOW);
    b[0x36] = 63 << 1; // OXM basic field 63
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::UnknownOxm {
            class: 0x8000,
            field: 63,
            ..
        })
    ));
}

#[test]
fn unknown_experimenter_oxm() {
    // An experimenter OXM with an unknown experimenter id.
    let mut b = unhex(FLOW);
    b.truncate(0x30);
    b.extend_from_slice(&unhex(
        "0001 0010 ffff5408 12345678 00000001 0000000000000000",
    ));
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::UnknownOxm {
            experimenter: 0x1234_5678,
            ..
        })
    ));
}

#[test]
fn bad_version() {
    let mut b = unhex(FLOW);
    b[0] = 1;
    assert_eq!(Message::decode(&b), Err(DecodeError::BadVersion(1)));
}

#[test]
fn prerequisite_missing_on_decode_and_encode() {
    // tcp_dst without ip_proto.
    let b = unhex(
        "040e0040000000020000000000000000000000000000000000000000000000050000ffffffffffffffffffffffff0000000100 0a 80000a02 0800 000000000000",
    );
    let _ = Message::decode(&b);
    let m = openflow::Match::new().with(openflow::Field::TcpDst, 80u16);
    let fm = openflow::msg::FlowMod {
        match_: m,
        ..Default::default()
    };
    assert_eq!(
        Message::new(1, Body::FlowMod(fm)).encode(),
        Err(EncodeError::Prerequisite("tcp_dst"))
    );
}

#[test]
fn bad_action_length() {
    // apply_actions holding an output action with length 12.
    let mut b = unhex(FLOW);
    b.extend_from_slice(&unhex(
        "0004 0018 00000000 0000 000c 00000001 ffff 000000000000",
    ));
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    assert!(matches!(
        Message::decode(&b),
        Err(DecodeError::BadLength {
            what: "action",
            len: 12
        })
    ));
}

#[test]
fn unknown_experimenter_action_round_trips() {
    let mut b = unhex(FLOW);
    b.extend_from_slice(&unhex(
        "0004 0018 00000000 ffff 0010 00abcdef 0001020304050607",
    ));
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    let m = Message::decode(&b).unwrap();
    assert_eq!(m.encode().unwrap(), b);
}

#[test]
fn unknown_message_type_round_trips() {
    let b = unhex("04 63 000c 00000007 01020304");
    let m = Message::decode(&b).unwrap();
    assert_eq!(
        m.body,
        Body::Unknown {
            msg_type: 0x63,
            data: vec![1, 2, 3, 4]
        }
    );
    assert_eq!(m.encode().unwrap(), b);
}

#[test]
fn oversize_message_is_refused_not_wrapped() {
    let bucket = Bucket::new(1, vec![Action::output(1); 8]); // 16 + 8*16 = 144 bytes
    let mk = |n: usize| {
        Message::new(
            1,
            Body::GroupMod(GroupMod {
                command: GroupModCommand::Add,
                group_type: GroupType::Select,
                group_id: 1,
                buckets: vec![bucket.clone(); n],
            }),
        )
    };
    let fits = (65_535 - 16) / 144;
    assert!(mk(fits).encode().is_ok());
    assert_eq!(mk(fits).encoded_len(), 16 + fits * 144);
    assert_eq!(
        mk(fits + 1).encode(),
        Err(EncodeError::TooLong(16 + (fits + 1) * 144))
    );
}
