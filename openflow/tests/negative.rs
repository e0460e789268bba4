//! Malformed input yields typed errors, never panics; oversize messages are refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use openflow::action::Action;
use openflow::msg::{Bucket, GroupMod, GroupModCommand, GroupType};
use openflow::oxm::RawOxm;
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

/// An entry of a field the codec does not know is kept raw, in its place, and re-encodes
/// byte for byte; the known entries around it still decode.
#[test]
fn unknown_oxm_field_is_kept_raw() {
    let mut b = unhex(FLOW);
    b[0x36] = 63 << 1; // OXM basic field 63 instead of eth_type
    let m = Message::decode(&b).unwrap();
    let Body::FlowMod(fm) = &m.body else {
        panic!("{m:?}")
    };
    assert!(fm.match_.fields.is_empty());
    assert_eq!(
        fm.match_.unknown,
        vec![(
            0,
            RawOxm {
                class: 0x8000,
                field: 63,
                experimenter: 0,
                value: vec![0x08, 0x00],
                mask: None,
            }
        )]
    );
    assert_eq!(m.encode().unwrap(), b);
    // ovs-ofctl refuses a flow_mod with a field it does not know.
    assert!(
        m.to_string()
            .contains("***decode error: OFPBMC_BAD_FIELD***")
    );
}

#[test]
fn unknown_experimenter_oxm_is_kept_raw() {
    // An experimenter OXM with an unknown experimenter id, then eth_type.
    let mut b = unhex(FLOW);
    b.truncate(0x30);
    b.extend_from_slice(&unhex(
        "0001 0016 ffff5408 12345678 00000001 80000a02 0800 0000",
    ));
    let len = b.len() as u16;
    b[2..4].copy_from_slice(&len.to_be_bytes());
    let m = Message::decode(&b).unwrap();
    let Body::FlowMod(fm) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(fm.match_.unknown.len(), 1);
    assert_eq!(fm.match_.unknown[0].0, 0);
    assert_eq!(fm.match_.unknown[0].1.experimenter, 0x1234_5678);
    assert_eq!(fm.match_.unknown[0].1.value, vec![0, 0, 0, 1]);
    assert_eq!(fm.match_.fields.len(), 1);
    assert_eq!(m.encode().unwrap(), b);
}

/// OVS's `nx_pull_entry__()` refuses a masked unknown entry with a value bit outside its mask
/// (`OFPBMC_BAD_WILDCARDS`); a masked payload must split into value and mask.
#[test]
fn malformed_unknown_oxm_fields() {
    for (entry, ok) in [
        ("00050102 0c0f", true),
        ("00050102 ab0f", false),   // 0xab has bits outside 0x0f
        ("00050103 0c0f00", false), // odd masked payload
        ("00050004 0c0f", false),   // payload past the match
    ] {
        let mut b = unhex(FLOW);
        b.truncate(0x30);
        let entry = unhex(entry);
        let mlen = 4 + entry.len();
        b.extend_from_slice(&[0, 1]);
        b.extend_from_slice(&(mlen as u16).to_be_bytes());
        b.extend_from_slice(&entry);
        b.resize(0x30 + mlen.next_multiple_of(8), 0);
        let len = b.len() as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(Message::decode(&b).is_ok(), ok, "{}", hex(&b));
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn bad_version() {
    let mut b = unhex(FLOW);
    b[0] = 1;
    assert_eq!(Message::decode(&b), Err(DecodeError::BadVersion(1)));
}

#[test]
fn prerequisite_missing_on_decode_and_when_built() {
    // tcp_dst without ip_proto.
    let b = unhex(
        "040e0040000000020000000000000000000000000000000000000000000000050000ffffffffffffffffffffffff0000000100 0a 80000a02 0800 000000000000",
    );
    let _ = Message::decode(&b);
    // Built without its prerequisite, a match is refused where it is built; the encoder
    // writes what it is given and fails only on size.
    let m = openflow::Match::new().with(openflow::Field::TcpDst, 80u16);
    assert_eq!(m.clone().checked(), Err("tcp_dst"));
    let fm = openflow::msg::FlowMod {
        match_: m,
        ..Default::default()
    };
    assert!(Message::new(1, Body::FlowMod(fm)).encode().is_ok());
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

// zone=65000 'ct_nw_proto=17,ct_nw_dst=10.244.1.5,ct_tp_dst=8080' 'ct_nw_src=10.244.1.5,ct_tp_src=8080',
// as ovs-ofctl 3.1 sends it.
const CT_FLUSH: &str = "04040070000000020000232000000020110000000000000000000028000000000001001400000000000000000000ffff0af4010500000000000300081f90000000010028000000000000001400000000000000000000ffff0af4010500000000000200081f90000000020008fde80000";

#[test]
fn ct_flush_truncated_everywhere() {
    let b = unhex(CT_FLUSH);
    assert!(matches!(
        Message::decode(&b).unwrap().body,
        Body::CtFlush(_)
    ));
    for n in 0..b.len() {
        assert!(Message::decode(&b[..n]).is_err(), "prefix {n} accepted");
        // The same prefix with the header length fixed up: a truncated TLV
        // is an error; a prefix that ends on a property boundary is a valid,
        // shorter message.
        if n >= 8 {
            let mut t = b[..n].to_vec();
            t[2..4].copy_from_slice(&(n as u16).to_be_bytes());
            if let Ok(m) = Message::decode(&t) {
                assert_eq!(n % 8, 0, "fixed-up prefix {n} accepted");
                assert_eq!(m.encode().unwrap(), t);
            }
        }
    }
}

/// Every single-byte corruption decodes to a value or a typed error, never a
/// panic, and what decodes re-encodes to the same bytes.
#[test]
fn ct_flush_corrupted_bytes() {
    let b = unhex(CT_FLUSH);
    for i in 8..b.len() {
        for v in [0x00, 0x01, 0x07, 0x80, 0xff] {
            let mut c = b.clone();
            c[i] = v;
            if let Ok(m) = Message::decode(&c) {
                assert_eq!(m.encode().unwrap(), c, "byte {i} = {v:#x}");
                let _ = m.to_string();
            }
        }
    }
}

/// Messages `ovs-ofctl` 3.1 accepts but that would not re-encode to the same
/// bytes: repeated or reordered properties, odd lengths, nonzero padding.
#[test]
fn ct_flush_stricter_than_ovs() {
    const CASES: &[(&str, &str)] = &[
        (
            "repeated zone",
            "04040028000000020000232000000020000000000000000000020008000100000002000800020000",
        ),
        (
            "zone before orig",
            "040400300000000200002320000000200600000000000000000200080001000000000010000000000003000800500000",
        ),
        (
            "reply before orig",
            "04040048000000020000232000000020060000000000000000010020000000000001001400000000000000000000ffff0a0000010000000000000010000000000002000800050000",
        ),
        (
            "repeated src",
            "040400300000000200002320000000200600000000000000000000180000000000020008000100000002000800020000",
        ),
        (
            "known after unknown",
            "04040028000000020000232000000020060000000000000000030008000100000002000800010000",
        ),
        (
            "nonzero padding in a u16 property",
            "0404002000000002000023200000002000000000000000000002000800010001",
        ),
        (
            "zone of length 6",
            "0404002000000002000023200000002000000000000000000002000600010000",
        ),
        (
            "zone of length 12",
            "0404002800000002000023200000002000000000000000000002000c000100000000000000000000",
        ),
        (
            "address of length 28",
            "04040040000000020000232000000020060000000000000000000028000000000000001c00000000000000000000000000000000000000000000000000000000",
        ),
        (
            "nonzero tuple padding",
            "0404002000000002000023200000002006000000000000000000000800000001",
        ),
        (
            "nonzero alignment after unknown",
            "0404002000000002000023200000002006000000000000000003000501010000",
        ),
    ];
    for (name, hex) in CASES {
        assert!(Message::decode(&unhex(hex)).is_err(), "{name} accepted");
    }
    let order = DecodeError::BadValue("NXT_CT_FLUSH property repeated or out of order");
    assert_eq!(Message::decode(&unhex(CASES[0].1)), Err(order.clone()));
    assert_eq!(Message::decode(&unhex(CASES[4].1)), Err(order));
    assert_eq!(
        Message::decode(&unhex(CASES[6].1)),
        Err(DecodeError::BadLength {
            what: "NXT_CT_FLUSH property",
            len: 6
        })
    );
    assert_eq!(
        Message::decode(&unhex(CASES[9].1)),
        Err(DecodeError::BadPadding("NXT_CT_FLUSH tuple"))
    );
}

#[test]
fn ct_flush_typed_errors() {
    // OVS 3.1's zero[7] after ip_proto (NXBRC_MUST_BE_ZERO).
    assert_eq!(
        Message::decode(&unhex("040400180000000200002320000000200002000000000000")),
        Err(DecodeError::BadPadding("nx_ct_flush"))
    );
    // IPv4 next to IPv6 (OFPBPC_BAD_VALUE).
    assert_eq!(
        Message::decode(&unhex(
            "04040050000000020000232000000020060000000000000000000038000000000000001400000000000000000000ffff0a00000100000000000100140000000000000000000000000000000200000000"
        )),
        Err(DecodeError::BadValue(
            "NXT_CT_FLUSH mixes IPv4 and IPv6 addresses"
        ))
    );
    // Property length below its header.
    assert_eq!(
        Message::decode(&unhex(
            "0404002000000002000023200000002000000000000000000002000000000000"
        )),
        Err(DecodeError::BadLength {
            what: "NXT_CT_FLUSH property",
            len: 0
        })
    );
}
