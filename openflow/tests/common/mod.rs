//! Test support: a fake OF1.3 switch that records what `ovs-ofctl` sends,
//! and helpers to run `ovs-ofctl` as an oracle.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Path of `ovs-ofctl`; panics (never skips) when it is missing.
pub fn ofctl() -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/local/bin"])
    {
        let p = PathBuf::from(dir).join("ovs-ofctl");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "ovs-ofctl not found: install openvswitch-switch (Open vSwitch 3.1: \
         apt-get install -y openvswitch-switch) to run the differential tests"
    );
}

fn read_msg(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut h = [0u8; 8];
    s.read_exact(&mut h).ok()?;
    let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
    let mut m = h.to_vec();
    m.resize(len.max(8), 0);
    s.read_exact(&mut m[8..]).ok()?;
    Some(m)
}

fn reply(s: &mut TcpStream, ty: u8, xid: [u8; 4], body: &[u8]) {
    let len = (8 + body.len()) as u16;
    let mut m = vec![4, ty];
    m.extend_from_slice(&len.to_be_bytes());
    m.extend_from_slice(&xid);
    m.extend_from_slice(body);
    let _ = s.write_all(&m);
}

/// Serves one `ovs-ofctl` connection: answers HELLO, FEATURES, ECHO,
/// BARRIER, bundle control and multipart requests (with empty replies), and
/// records every other message.
fn serve(mut s: TcpStream) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    reply(&mut s, 0, [0, 0, 0, 1], &[0, 1, 0, 8, 0, 0, 0, 0x10]);
    while let Some(m) = read_msg(&mut s) {
        let xid = [m[4], m[5], m[6], m[7]];
        match m[1] {
            0 => {}
            2 => reply(&mut s, 3, xid, &m[8..]),
            5 => reply(
                &mut s,
                6,
                xid,
                &[
                    0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0xff, 0, 0, 0, 0, 0, 0, 0x47, 0, 0, 0, 0,
                ],
            ),
            20 => reply(&mut s, 21, xid, &[]),
            7 => reply(&mut s, 8, xid, &[0, 0, 0, 128]),
            ty => {
                out.push(m.clone());
                if ty == 4
                    && m.len() >= 20
                    && m[8..16] == [0x4f, 0x4e, 0x46, 0x00, 0, 0, 0x08, 0xfc]
                {
                    let mut body = m[8..].to_vec();
                    body[13] += 1;
                    reply(&mut s, 4, xid, &body);
                }
                if ty == 18 {
                    let mut body = vec![m[8], m[9], 0, 0, 0, 0, 0, 0];
                    // An OFPMP_METER_FEATURES reply has a fixed 16-byte body.
                    if m[8..10] == [0, 11] {
                        body.extend([0u8; 16]);
                    }
                    reply(&mut s, 19, xid, &body);
                }
            }
        }
    }
    out
}

/// Runs `ovs-ofctl -O OpenFlow13 --no-names ARGS` against a fake switch
/// (the word `TARGET` in `args` becomes the switch address) and returns the
/// recorded messages.
pub fn capture(args: &[&str]) -> Vec<Vec<u8>> {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        if let Ok((s, _)) = listener.accept() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
            let _ = tx.send(serve(s));
        }
    });
    let target = format!("tcp:127.0.0.1:{port}");
    let args: Vec<String> = args.iter().map(|a| a.replace("TARGET", &target)).collect();
    let mut child = Command::new(ofctl())
        .args(["-O", "OpenFlow13", "--no-names"])
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ovs-ofctl");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            // Commands that read replies our fake switch does not model fully.
            let lenient = args
                .iter()
                .any(|a| a.starts_with("dump") || a.ends_with("-frags"));
            assert!(
                lenient || status.success(),
                "ovs-ofctl {args:?} failed: {err}"
            );
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ovs-ofctl {args:?} timed out");
        }
        thread::sleep(Duration::from_millis(5));
    }
    rx.recv_timeout(Duration::from_secs(20))
        .expect("fake switch saw no connection")
}

/// `ovs-ofctl ofp-print HEX` output, trailing whitespace trimmed.
pub fn ofp_print(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let out = Command::new(ofctl())
        .args(["ofp-print", &hex])
        .output()
        .expect("ofp-print");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

/// Hex string to bytes (spaces allowed).
pub fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Bytes to hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `openflow/tests/corpus`, from the openflow crate or a sibling crate that
/// includes this module with `#[path]`.
pub fn corpus_dir() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .unwrap_or(&manifest)
        .join("openflow/tests/corpus")
}

/// Non-empty, non-comment lines of a corpus file.
pub fn corpus(name: &str) -> Vec<String> {
    let path = corpus_dir().join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Checks one captured message: decode, text equals `ofp-print`, re-encode
/// is identical. Returns a description of the first mismatch.
pub fn check_message(bytes: &[u8]) -> Result<openflow::Message, String> {
    let msg = openflow::Message::decode(bytes)
        .map_err(|e| format!("decode error {e:?} for {}", hex(bytes)))?;
    let again = msg.encode().map_err(|e| format!("encode error {e:?}"))?;
    if again != bytes {
        return Err(format!(
            "re-encode differs:\n  ours {}\n  ovs  {}",
            hex(&again),
            hex(bytes)
        ));
    }
    let ours = msg.to_string();
    let theirs = ofp_print(bytes);
    if ours.trim_end() != theirs {
        return Err(format!(
            "text differs for {}:\n  ours: {ours}\n  ovs:  {theirs}",
            hex(bytes)
        ));
    }
    Ok(msg)
}

/// The `name ;; hex` lines of a vector corpus file.
pub fn vectors(name: &str) -> Vec<(String, Vec<u8>)> {
    corpus(name)
        .iter()
        .map(|l| {
            let (n, h) = l
                .split_once(" ;; ")
                .unwrap_or_else(|| panic!("{name}: no ` ;; ` in `{l}`"));
            (n.to_string(), unhex(h))
        })
        .collect()
}

/// Every message of the corpus: what `ovs-ofctl` sends for flows.txt,
/// groups.txt and commands.txt (captured by the fake switch), and the
/// vectors.txt messages it cannot send. Each is (description, bytes).
pub fn all_messages() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (cmd, file) in [("add-flows", "flows.txt"), ("add-groups", "groups.txt")] {
        let lines = corpus(file);
        let path = std::env::temp_dir().join(format!(
            "ofctl-corpus-{}-{:?}-{file}",
            std::process::id(),
            thread::current().id()
        ));
        std::fs::write(&path, lines.join("\n") + "\n").expect("write corpus");
        let msgs = capture(&[cmd, "TARGET", path.to_str().expect("utf-8 temp path")]);
        let _ = std::fs::remove_file(&path);
        assert_eq!(msgs.len(), lines.len(), "message count for {file}");
        out.extend(
            lines
                .into_iter()
                .zip(msgs)
                .map(|(l, m)| (format!("{file}: {l}"), m)),
        );
    }
    for line in corpus("commands.txt") {
        let args: Vec<&str> = line.split(" ;; ").collect();
        for m in capture(&args) {
            out.push((format!("commands.txt: {line}"), m));
        }
    }
    out.extend(
        vectors("vectors.txt")
            .into_iter()
            .map(|(n, b)| (format!("vectors.txt: {n}"), b)),
    );
    out
}
