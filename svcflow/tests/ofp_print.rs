//! `svcflow ofp print` against `ovs-ofctl ofp-print` (Open vSwitch 3.1) on the openflow
//! crate's differential corpus: what `ovs-ofctl` sends for flows.txt, groups.txt and
//! commands.txt (captured by a fake switch), and the vectors.txt messages it cannot send.
//! Also: `--reencode` round trips, stdin and multi-argument input, several messages in one
//! input, and typed errors with a non-zero exit. Fails (never skips) without `ovs-ofctl`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

#[path = "../../openflow/tests/common/mod.rs"]
mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::thread;

use common::{hex, ofctl};
use openflow::msg::{MultipartBody, ofpt};
use openflow::{Action, Body, Instruction, Message};

const BIN: &str = env!("CARGO_BIN_EXE_svcflow");

/// The corpus, captured once per test binary.
fn corpus() -> &'static [(String, Vec<u8>)] {
    static CORPUS: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut seen = std::collections::HashSet::new();
        common::all_messages()
            .into_iter()
            .filter(|(_, b)| seen.insert(b.clone()))
            .collect()
    })
}

fn svcflow(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(BIN)
        .args(["ofp", "print"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn svcflow");
    let mut input = child.stdin.take().unwrap();
    let text = stdin.unwrap_or("").to_string();
    let writer = thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `ovs-ofctl ofp-print HEX`, trailing whitespace trimmed.
fn ofp_print(hex: &str) -> String {
    let out = Command::new(ofctl())
        .args(["ofp-print", hex])
        .output()
        .expect("ovs-ofctl ofp-print");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// Counts the kinds of message the corpus must cover.
fn coverage(msgs: &[(String, Vec<u8>)]) -> Vec<(&'static str, usize)> {
    let mut kinds: Vec<(&'static str, usize)> = [
        "flow_mod with ct",
        "flow_mod with nat",
        "flow_mod with learn",
        "group_mod",
        "bundle control",
        "bundle add",
        "ct flush",
        "packet_in",
        "packet_out",
        "multipart request",
        "multipart reply",
        "desc reply",
        "table reply",
        "port stats reply",
        "error",
        "experimenter error",
    ]
    .into_iter()
    .map(|k| (k, 0))
    .collect();
    let mut bump = |k: &str| {
        if let Some(e) = kinds.iter_mut().find(|(n, _)| *n == k) {
            e.1 += 1;
        }
    };
    for (_, b) in msgs {
        let Ok(m) = Message::decode(b) else { continue };
        match &m.body {
            Body::FlowMod(f) => {
                let text = m.to_string();
                let ct = f.instructions.list().is_ok_and(|l| l.iter().any(|i| {
                    matches!(i, Instruction::ApplyActions(a) if a.iter().any(|a| matches!(a, Action::Ct(_))))
                }));
                if ct {
                    bump("flow_mod with ct");
                }
                if text.contains("nat(") || text.contains(",nat)") {
                    bump("flow_mod with nat");
                }
                if text.contains("learn(") {
                    bump("flow_mod with learn");
                }
            }
            Body::GroupMod(_) => bump("group_mod"),
            Body::BundleControl(_) => bump("bundle control"),
            Body::BundleAdd(_) => bump("bundle add"),
            Body::CtFlush(_) | Body::CtFlushZone(_) => bump("ct flush"),
            Body::PacketIn(_) => bump("packet_in"),
            Body::PacketOut(_) => bump("packet_out"),
            Body::MultipartRequest(_) => bump("multipart request"),
            Body::MultipartReply(r) => {
                bump("multipart reply");
                match r.body {
                    MultipartBody::Desc(_) => bump("desc reply"),
                    MultipartBody::Table(_) => bump("table reply"),
                    MultipartBody::PortStats(_) => bump("port stats reply"),
                    _ => {}
                }
            }
            Body::Error(e) => {
                bump("error");
                if e.experimenter_error().is_some() {
                    bump("experimenter error");
                }
            }
            _ => {}
        }
    }
    kinds
}

/// Runs `check` on every corpus message, on a few threads; returns the failures.
fn each_message(check: fn(&str, &[u8]) -> Result<(), String>) -> Vec<String> {
    let msgs = corpus();
    let chunk = msgs.len().div_ceil(8).max(1);
    thread::scope(|s| {
        let handles: Vec<_> = msgs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter_map(|(name, b)| check(name, b).err())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

#[test]
fn prints_what_ovs_ofctl_prints() {
    let msgs = corpus();
    assert!(msgs.len() >= 100, "only {} distinct messages", msgs.len());
    let kinds = coverage(msgs);
    eprintln!("{} distinct messages: {kinds:?}", msgs.len());
    for (kind, n) in kinds {
        assert!(n > 0, "the corpus has no {kind}");
    }
    let types: std::collections::BTreeSet<u8> = msgs.iter().map(|(_, b)| b[1]).collect();
    assert!(types.len() >= 10, "message types {types:?}");
    let failures = each_message(|name, b| {
        let h = hex(b);
        let out = svcflow(&[&h], None);
        let ours = stdout(&out);
        let theirs = ofp_print(&h);
        if !out.status.success() {
            return Err(format!("{name}: svcflow failed: {}\n  {h}", stderr(&out)));
        }
        if ours.trim_end() != theirs {
            return Err(format!(
                "{name}: text differs for {h}\n  svcflow:   {ours}\n  ovs-ofctl: {theirs}"
            ));
        }
        Ok(())
    });
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        msgs.len(),
        failures.join("\n")
    );
}

#[test]
fn reencode_round_trips() {
    let failures = each_message(|name, b| {
        let h = hex(b);
        let out = svcflow(&["--reencode", &h], None);
        if !out.status.success() || stdout(&out) != format!("{h}\n") {
            return Err(format!(
                "{name}: --reencode of {h} gave {:?} ({})",
                stdout(&out),
                stderr(&out)
            ));
        }
        Ok(())
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The whole corpus as one input on stdin: every message printed in order, and
/// `--reencode` gives the input back in one lowercase run.
#[test]
fn concatenated_messages_on_stdin() {
    let msgs = corpus();
    let all: Vec<u8> = msgs.iter().flat_map(|(_, b)| b.clone()).collect();
    // Upper case, spaces and newlines, as from a packet capture.
    let text: String = all
        .chunks(16)
        .map(|l| {
            l.iter()
                .map(|b| format!("{b:02X}"))
                .collect::<Vec<_>>()
                .join(" ")
                + "\n"
        })
        .collect();
    let out = svcflow(&[], Some(&text));
    assert!(out.status.success(), "{}", stderr(&out));
    let mut want = String::new();
    for (_, b) in msgs {
        want.push_str(Message::decode(b).unwrap().to_string().trim_end());
        want.push('\n');
    }
    assert_eq!(stdout(&out), want);
    let out = svcflow(&["--reencode", "-"], Some(&text));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("{}\n", hex(&all)));
}

/// ovs-ofctl reads one line of stdin and prints concatenated messages as one
/// message with trailing data; we read all of stdin and print each message.
#[test]
fn stdin_and_multi_argument_input() {
    let flow = &corpus()
        .iter()
        .find(|(_, b)| b[1] == ofpt::FLOW_MOD)
        .unwrap()
        .1;
    let h = hex(flow);
    let want = ofp_print(&h);
    // Several arguments, split anywhere (even inside a byte) and spaced.
    let (a, b) = h.split_at(h.len() / 2 + 1);
    let out = svcflow(&[a, " ", b], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), want);
    // Stdin, with no argument and with `-`, over several lines.
    let lines = format!("{}\n{}\n", &h[..10], &h[10..]);
    for args in [&[][..], &["-"][..]] {
        let out = svcflow(args, Some(&lines));
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out).trim_end(), want);
    }
    // Two messages: each printed. ovs-ofctl prints "(***only uses N bytes out of M***)".
    let barrier = "0414000800000002";
    let out = svcflow(&[&h, barrier], None);
    assert_eq!(
        stdout(&out),
        format!("{want}\nOFPT_BARRIER_REQUEST (OF1.3) (xid=0x2):\n")
    );
    assert!(ofp_print(&format!("{h}{barrier}")).starts_with("(***only uses"));
}

#[test]
fn bad_input_is_a_typed_error_and_a_failure() {
    let barrier = "0414000800000002";
    // A DESC reply whose string field has bytes after its NUL: its fields are kept byte for
    // byte (`msg::FixedStr`), so it re-encodes identically.
    let mut desc = common::vectors("vectors.txt")
        .into_iter()
        .find(|(n, _)| n == "DESC reply OVS")
        .unwrap()
        .1;
    desc[16 + 200] = b'x';
    let desc = hex(&desc);
    let cases: Vec<(Vec<String>, Option<&str>, &str)> = vec![
        (vec!["04zz".into()], None, "bad hex: 'z' at hex digit 2"),
        (vec!["0x0414".into()], None, "bad hex: 'x'"),
        (vec!["041".into()], None, "odd number of hex digits (3)"),
        (vec![], Some(" \n"), "no hex input"),
        (vec!["0414".into()], None, "truncated header: 2 bytes"),
        (
            vec![barrier.into(), "0414".into()],
            None,
            "message 2 at byte 8: truncated header",
        ),
        (
            vec!["0414000400000002".into()],
            None,
            "bad length 4 in OpenFlow header",
        ),
        (
            vec!["0414001000000002".into()],
            None,
            "truncated: header says 16 bytes, 8 available",
        ),
        (
            vec!["0914000800000002".into()],
            None,
            "invalid message: unsupported OpenFlow version 0x09",
        ),
        (
            vec!["04140010000000020000000000000000".into()],
            None,
            "invalid message: 8 trailing bytes",
        ),
        (
            vec![barrier.into(), "-".into()],
            None,
            "'-' (stdin) must be the only argument",
        ),
    ];
    let same = svcflow(&["--reencode", &desc], None);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert_eq!(String::from_utf8_lossy(&same.stdout).trim(), desc);
    for (args, stdin, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = svcflow(&args, stdin);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("svcflow ofp print: ") && err.contains(want),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Every prefix of a flow_mod and a packet-in is refused with a typed error, not a panic.
#[test]
fn truncations_never_panic() {
    for (_, b) in corpus()
        .iter()
        .filter(|(_, b)| [ofpt::FLOW_MOD, ofpt::PACKET_IN].contains(&b[1]))
        .take(2)
    {
        for n in 1..b.len() {
            let out = svcflow(&[&hex(&b[..n])], None);
            assert_eq!(out.status.code(), Some(1), "{}", hex(&b[..n]));
            assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        }
    }
}
