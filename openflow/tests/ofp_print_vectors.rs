//! Hex vectors from Open vSwitch's `tests/ofp-print.at` for messages
//! `ovs-ofctl` cannot send (switch-to-controller messages and replies).
//! Each must decode, re-encode identically, and print exactly as the
//! installed `ovs-ofctl ofp-print` prints it.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::{check_message, unhex};
use openflow::Body;

/// (name, hex) — OF1.1/OF1.2 vectors whose layout is identical in OF1.3 have
/// their version byte rewritten to 0x04.
const VECTORS: &[(&str, &str)] = &[
    (
        "OFPT_FLOW_REMOVED - OF1.3",
        "04 0b 00 40 00 00 00 00 fe dc ba 98 76 54 32 10 80 00 01 05 00 00 00 01 00 98 96 80 00 3c 00 78 \
         00 00 00 00 00 12 d6 87 00 00 00 00 6f 68 ba 66 00 01 00 0a 80 00 0c 02 10 09 00 00 00 00 00 00",
    ),
    (
        "OFPT_FLOW_MOD - OF1.3 - flags (table 0: OVS 3.1 rejects ADD to table 255)",
        "04 0e 00 90 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ff ff \
         ff ff ff ff ff ff ff ff ff ff ff ff 00 1f 00 00 00 01 00 42 80 00 00 04 00 00 00 01 80 00 08 06 \
         50 54 00 00 00 06 80 00 06 06 50 54 00 00 00 05 80 00 0a 02 08 06 80 00 0c 02 00 00 80 00 2a 02 \
         00 02 80 00 2c 04 c0 a8 00 02 80 00 2e 04 c0 a8 00 01 00 00 00 00 00 00 00 04 00 18 00 00 00 00 \
         00 00 00 10 00 00 00 03 00 00 00 00 00 00 00 00",
    ),
    (
        "OFPT_PORT_STATUS - OF1.1 layout",
        "04 0c 00 50 00 00 00 00 02 00 00 00 00 00 00 00 00 00 00 03 00 00 00 00 50 54 00 00 00 01 00 00 \
         65 74 68 30 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 20 08 00 00 28 0f \
         00 00 28 0f 00 00 00 00 00 01 86 a0 00 01 86 a0",
    ),
    (
        "OFPST_PORT reply - OF1.3",
        "04 13 01 60 00 00 00 02 00 04 00 00 00 00 00 00 \
         00 00 00 02 00 00 00 00 00 00 00 00 00 01 95 56 \
         00 00 00 00 00 00 00 88 00 00 00 00 02 5d 08 98 \
         00 00 00 00 00 00 2c f8 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 01 00 0f 42 40 \
         ff ff ff fe 00 00 00 00 \
         00 00 00 00 00 00 00 44 00 00 00 00 00 00 9d 2c \
         00 00 00 00 00 00 16 7c 00 00 00 00 01 1e 36 44 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         ff ff ff ff ff ff ff ff \
         00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 44 \
         00 00 00 00 00 00 9d 2c 00 00 00 00 00 00 16 7c \
         00 00 00 00 01 1e 36 44 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 07 54 d4 c0",
    ),
    (
        "OFPST_GROUP reply - OF1.3",
        "04 13 00 b0 00 00 00 02 00 06 00 00 00 00 00 00 00 58 00 00 87 65 43 21 00 00 00 04 00 00 00 00 \
         00 00 00 00 00 00 88 88 00 00 00 00 00 77 77 77 00 00 00 12 1d cd 65 00 00 00 00 00 00 00 11 11 \
         00 00 00 00 00 22 22 22 00 00 00 00 00 00 11 11 00 00 00 00 00 22 22 22 00 00 00 00 00 00 66 66 \
         00 00 00 00 00 33 33 33 00 48 00 00 00 00 00 05 00 00 00 02 00 00 00 00 00 00 00 00 00 00 88 88 \
         00 00 00 00 00 77 77 77 00 00 00 10 1d cd 65 00 00 00 00 00 00 00 11 11 00 00 00 00 00 22 22 22 \
         00 00 00 00 00 00 11 11 00 00 00 00 00 22 22 22",
    ),
    (
        "OFPST_GROUP_DESC reply - OF1.1 layout",
        "04 13 00 78 00 00 00 02 00 07 00 00 00 00 00 00 00 68 01 00 00 00 20 00 \
         00 20 00 64 00 00 00 01 ff ff ff ff 00 00 00 00 00 00 00 10 00 00 00 01 00 00 00 00 00 00 00 00 \
         00 20 00 c8 00 00 00 02 ff ff ff ff 00 00 00 00 00 00 00 10 00 00 00 02 00 00 00 00 00 00 00 00 \
         00 20 00 c8 00 00 00 03 ff ff ff ff 00 00 00 00 00 00 00 10 00 00 00 03 00 00 00 00 00 00 00 00",
    ),
    (
        "OFPST_GROUP_FEATURES reply - OF1.2 layout",
        "04 13 00 38 00 00 00 02 00 08 00 00 00 00 00 00 00 00 00 0f 00 00 00 0f \
         00 00 00 01 00 00 00 02 00 00 00 03 00 00 00 04 00 00 00 01 00 00 00 03 00 00 00 07 00 00 00 0f",
    ),
    (
        "OFPST_GROUP request - OF1.1 layout",
        "04 12 00 18 00 00 00 02 00 06 00 00 00 00 00 00 ff ff ff ff 00 00 00 00",
    ),
    // Meters (ofp-print.at).
    (
        "OFPT_METER_MOD request - OF1.3",
        "04 1d 00 20 00 00 00 02 00 00 00 0d 00 00 00 05 00 01 00 10 00 00 04 00 00 00 00 80 00 00 00 00",
    ),
    (
        "OFPT_METER_MOD request - bad band - OF1.3 (kept raw, refused by OVS)",
        "04 1d 00 20 85 01 d7 38 00 00 00 00 00 00 00 01 00 05 00 10 00 00 00 02 00 00 00 02 00 00 00 00",
    ),
    (
        "OFPT_METER_MOD request - bad command - OF1.3 (kept, refused by OVS)",
        "04 1d 00 10 28 a6 26 52 00 08 00 00 00 00 00 01",
    ),
    (
        "OFPT_METER_MOD request - bad flags - OF1.3 (kept, refused by OVS)",
        "04 1d 00 20 82 b3 a1 a4 00 00 00 03 00 00 00 01 00 01 00 10 00 00 00 02 00 00 00 02 00 00 00 00",
    ),
    (
        "OFPST_METER request - OF1.3",
        "041200180000000200090000000000000000000100000000",
    ),
    (
        "OFPST_METER_CONFIG request - OF1.3",
        "0412001800000002000a0000000000000000000100000000",
    ),
    (
        "OFPST_METER_FEATURES request - OF1.3",
        "0412001000000002000b000000000000",
    ),
    (
        "OFPST_METER_FEATURES reply - OF1.3",
        "04 13 00 20 00 00 00 02 00 0b 00 00 00 00 00 00 00 01 00 00 00 00 00 06 00 00 00 0F 10 02 00 00",
    ),
    (
        "OFPST_METER_CONFIG reply - OF1.3",
        "04 13 00 50 00 00 00 02 00 0a 00 00 00 00 00 00 00 28 00 05 00 00 00 01 \
         00 01 00 10 00 01 00 00 00 00 05 00 00 00 00 00 00 02 00 10 00 10 00 00 00 00 f0 00 00 00 00 00 \
         00 18 00 09 00 00 00 02 00 01 00 10 00 02 00 00 00 00 00 00 00 00 00 00",
    ),
    (
        "OFPST_METER reply - OF1.3",
        "04 13 00 90 00 00 00 02 00 09 00 00 00 00 00 00 00 00 00 01 00 48 00 00 00 00 00 00 00 00 00 05 \
         00 00 00 00 00 00 10 00 00 00 00 00 00 02 30 00 00 00 01 8a 0a 6e 23 44 \
         00 00 00 00 00 00 00 7e 00 00 00 00 00 00 34 33 00 00 00 00 00 00 00 e7 00 00 00 00 00 00 94 2e \
         00 00 00 02 00 38 00 00 00 00 00 00 00 00 00 02 00 00 00 00 00 00 02 00 00 00 00 00 00 00 30 00 \
         00 00 01 87 0a 23 6e 44 00 00 00 00 00 00 00 2a 00 00 00 00 00 00 04 33",
    ),
    // Roles and asynchronous configuration (ofp-print.at; the OF1.2 role vectors have the
    // OF1.3 layout).
    (
        "OFPT_SET_ASYNC - OF1.3 (bit 12 set: kept, not printed)",
        "04 1c 00 20 00 00 00 00 00 00 10 05 00 00 10 07 00 00 00 03 00 00 00 07 00 00 00 00 00 00 00 03",
    ),
    (
        "OFPT_GET_ASYNC_REPLY - OF1.3 (the SET_ASYNC vector's body)",
        "04 1b 00 20 00 00 00 05 00 00 10 05 00 00 10 07 00 00 00 03 00 00 00 07 00 00 00 00 00 00 00 03",
    ),
    ("OFPT_GET_ASYNC_REQUEST - OF1.3", "04 1a 00 08 00 00 00 04"),
    (
        "OFPT_ROLE_REQUEST - OF1.2 layout",
        "04 18 00 18 00 00 00 02 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 03",
    ),
    (
        "OFPT_ROLE_REQUEST - nochange - OF1.2 layout",
        "04 18 00 18 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    ),
    (
        "OFPT_ROLE_REPLY - OF1.2 layout",
        "04 19 00 18 00 00 00 02 00 00 00 03 00 00 00 00 12 34 56 78 ab cd ef 90",
    ),
    (
        "ONFT_ROLE_STATUS - primary, experimenter - OF1.3",
        "04 04 00 20 00 00 00 0a 4f 4e 46 00 00 00 07 77 00 00 00 02 02 00 00 00 ff ff ff ff ff ff ff ff",
    ),
    (
        "ONFT_ROLE_STATUS - primary, config - OF1.3",
        "04 04 00 20 00 00 00 0a 4f 4e 46 00 00 00 07 77 00 00 00 02 01 00 00 00 ff ff ff ff ff ff ff ff",
    ),
    (
        "ONFT_ROLE_STATUS - primary, config, generation - OF1.3",
        "04 04 00 20 00 00 00 0a 4f 4e 46 00 00 00 07 77 00 00 00 02 01 00 00 00 00 00 00 00 00 00 00 10",
    ),
];

#[test]
fn ofp_print_vectors() {
    let mut failures = Vec::new();
    for (name, hex) in VECTORS {
        if let Err(e) = check_message(&unhex(hex)) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        VECTORS.len(),
        failures.join("\n")
    );
}

/// tests/corpus/vectors.txt: errors (standard, Nicira, ONF, unknown), DESC,
/// TABLE and PORT_STATS replies, multipart requests, packet-ins and more.
#[test]
fn corpus_vectors() {
    let vectors = common::vectors("vectors.txt");
    assert!(vectors.len() >= 90, "{}", vectors.len());
    let mut failures = Vec::new();
    for (name, bytes) in &vectors {
        if let Err(e) = check_message(bytes) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        vectors.len(),
        failures.join("\n")
    );
}

/// Experimenter errors decode with their experimenter id and type, and carry OVS's names.
#[test]
fn experimenter_errors() {
    use openflow::msg::{ErrorMsg, OFPET_EXPERIMENTER};
    let m = openflow::Message::decode(&unhex("0401001000000005ffff000d00002320")).unwrap();
    let Body::Error(e) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(e.experimenter_error(), Some((0x2320, 13)));
    assert_eq!(e.ovs_name(), Some("NXFMFC_BAD_TABLE_ID"));
    assert_eq!(e.name(), None);
    let onf = ErrorMsg {
        err_type: OFPET_EXPERIMENTER,
        code: 2313,
        experimenter: Some(openflow::msg::ONF_EXPERIMENTER),
        data: vec![],
    };
    assert_eq!(onf.ovs_name(), Some("OFPBFC_MSG_FAILED"));
    let unknown = ErrorMsg {
        experimenter: Some(0x1234),
        ..onf.clone()
    };
    assert_eq!(unknown.experimenter_error(), Some((0x1234, 2313)));
    assert_eq!(unknown.ovs_name(), None);
    let standard = ErrorMsg {
        err_type: 1,
        code: 10,
        experimenter: None,
        data: vec![],
    };
    assert_eq!(standard.experimenter_error(), None);
    // The OF1.3 name and the name ovs-ofctl 3.1 prints.
    assert_eq!(standard.name(), Some("OFPBRC_IS_SLAVE"));
    assert_eq!(standard.ovs_name(), Some("OFPBRC_IS_SECONDARY"));
}

/// Every error code around the ones OVS names prints as `ovs-ofctl` prints it:
/// the name, or `***decode error: OFPBRC_BAD_LEN***` and a dump when OVS knows none.
#[test]
fn error_names_match_ovs_ofctl() {
    let mut codes: Vec<(u16, u16, Option<u32>)> = Vec::new();
    for ty in 0..=14 {
        codes.extend((0..=16).map(|c| (ty, c, None)));
    }
    codes.extend((0..=50).map(|c| (0xffff, c, Some(0x2320))));
    for range in [
        2295..2320,
        2355..2375,
        2595..2605,
        2635..2645,
        4245..4255,
        4440..4450,
    ] {
        codes.extend(range.map(|c| (0xffff, c, Some(0x4f4e_4600))));
    }
    codes.push((0xffff, 2, Some(0x1234)));
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = codes
            .chunks(codes.len().div_ceil(8))
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter_map(|&(err_type, code, experimenter)| {
                            let msg = openflow::Message::new(
                                5,
                                Body::Error(openflow::msg::ErrorMsg {
                                    err_type,
                                    code,
                                    experimenter,
                                    data: unhex("0414000800000002"),
                                }),
                            );
                            check_message(&msg.encode().unwrap()).err()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {}:\n{}",
        failures.len(),
        codes.len(),
        failures.join("\n")
    );
}

/// PACKET_IN - OF1.3 from ofp-print.at, including the dissected packet line.
#[test]
fn packet_in_vector() {
    let b = unhex(
        "04 0a 00 54 00 00 00 00 ff ff ff 00 00 2a 00 00 01 02 03 04 05 06 07 08 00 01 00 0c 80 00 00 04 \
         ff ff ff fe 00 00 00 00 00 00 ff ff ff ff ff ff 00 23 20 83 c1 5f 80 35 00 01 08 00 06 04 00 03 \
         00 23 20 83 c1 5f 00 00 00 00 00 23 20 83 c1 5f 00 00 00 00",
    );
    let m = openflow::Message::decode(&b).unwrap();
    assert!(matches!(m.body, Body::PacketIn(_)));
    assert_eq!(m.encode().unwrap(), b);
    assert_eq!(m.to_string(), common::ofp_print(&b));
}

/// `NXT_CT_FLUSH` messages `ovs-ofctl ofp-print` 3.1 refuses (`lib/ofp-ct.c`
/// `ofp_ct_match_decode()`): we refuse them too, with a typed error.
#[test]
fn ct_flush_refused_like_ovs_ofctl() {
    const REFUSED: &[(&str, &str)] = &[
        (
            "family byte 2",
            "040400180000000200002320000000200002000000000000",
        ),
        (
            "nonzero zero[]",
            "040400180000000200002320000000200000000000010000",
        ),
        (
            "src v4, dst v6",
            "04040050000000020000232000000020060000000000000000000038000000000000001400000000000000000000ffff0a00000100000000000100140000000000000000000000000000000200000000",
        ),
        (
            "orig v6, reply v4",
            "040400580000000200002320000000200600000000000000000000200000000000000014000000000000000000000000000000020000000000010020000000000001001400000000000000000000ffff0a00000100000000",
        ),
        (
            "::ffff:0.0.0.0 then v6",
            "04040050000000020000232000000020060000000000000000000038000000000000001400000000000000000000ffff0000000000000000000100140000000000000000000000000000000200000000",
        ),
        (
            "tuple length 4",
            "0404002000000002000023200000002006000000000000000000000400000000",
        ),
        (
            "address length 12",
            "04040030000000020000232000000020060000000000000000000018000000000000000c000000000000000000000000",
        ),
        (
            "u8 length 4",
            "04040028000000020000232000000020010000000000000000000010000000000005000400000000",
        ),
        (
            "u16 length 5",
            "04040028000000020000232000000020010000000000000000000010000000000004000501000000",
        ),
        (
            "property length 0",
            "0404002000000002000023200000002000000000000000000002000000000000",
        ),
        (
            "property past the end",
            "0404002000000002000023200000002000000000000000000002001000000000",
        ),
        (
            "half a property",
            "0404001c000000020000232000000020000000000000000000020008",
        ),
    ];
    for (name, hex) in REFUSED {
        let b = unhex(hex);
        assert!(
            openflow::Message::decode(&b).is_err(),
            "{name}: we accept what ovs-ofctl refuses"
        );
        let theirs = common::ofp_print(&b);
        assert!(
            theirs.contains("decode error") || theirs.is_empty(),
            "{name}: ovs-ofctl accepts it: {theirs}"
        );
    }
}

/// The meter vectors decode to typed bodies, not raw ones.
#[test]
fn meter_vectors_are_typed() {
    use openflow::msg::{MeterBand, MultipartBody as Mp};
    let typed = |hex: &str| openflow::Message::decode(&unhex(hex)).unwrap().body;
    let name = |n: &str| VECTORS.iter().find(|(v, _)| v.starts_with(n)).unwrap().1;
    let Body::MeterMod(m) = typed(name("OFPT_METER_MOD request - OF1.3")) else {
        panic!()
    };
    assert_eq!(m.meter.meter_id, 5);
    assert_eq!(m.meter.bands, vec![MeterBand::drop(1024, 128)]);
    let Body::MeterMod(bad) = typed(name("OFPT_METER_MOD request - bad band")) else {
        panic!()
    };
    assert!(matches!(
        bad.meter.bands[..],
        [MeterBand::Unknown { band_type: 5, .. }]
    ));
    let body = |n: &str| match typed(name(n)) {
        Body::MultipartRequest(r) => r.body,
        Body::MultipartReply(r) => r.body,
        b => panic!("{n}: {b:?}"),
    };
    assert!(matches!(body("OFPST_METER request"), Mp::MeterRequest(1)));
    assert!(matches!(
        body("OFPST_METER_CONFIG request"),
        Mp::MeterConfigRequest(1)
    ));
    assert!(matches!(
        body("OFPST_METER_FEATURES request"),
        Mp::MeterFeaturesRequest
    ));
    assert!(
        matches!(body("OFPST_METER reply"), Mp::Meter(v) if v.len() == 2 && v[0].bands.len() == 2)
    );
    assert!(matches!(body("OFPST_METER_CONFIG reply"), Mp::MeterConfig(v) if v.len() == 2));
    assert!(
        matches!(body("OFPST_METER_FEATURES reply"), Mp::MeterFeatures(f) if f.max_meter == 65536)
    );
}
