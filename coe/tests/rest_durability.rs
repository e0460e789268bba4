//! Durability: the REST state survives restarts and `kill -9`; damage is detected, torn
//! final records are recovered, and nothing is ever silently emptied.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use axum::http::StatusCode;
use coe::rest::durable::{DurableStore, OpenError, WAL_FILE};
use coe::rest::parse;
use coe::rest::store::{Change, Rules};
use coe::rest::types::Kind;
use coe::rest::wal::{MAGIC, Wal, WalError, frame};
use common::*;
use serde_json::json;

/// Opens a state directory. The lock is free once the last holder closes it, but a process
/// that another test is spawning holds a copy of every descriptor until it execs, so a
/// reopen right after a close may need a moment.
fn open_store(dir: &Path, rules: Rules) -> Result<DurableStore, OpenError> {
    for _ in 0..200 {
        match DurableStore::open(dir, rules.clone()) {
            Err(OpenError::Locked(_)) => std::thread::sleep(std::time::Duration::from_millis(10)),
            other => return other,
        }
    }
    DurableStore::open(dir, rules)
}

/// Items `a` and `b` of every kind ([`sample`]), one container PUT per kind.
async fn put_samples_a_and_b(h: &Harness) {
    for kind in Kind::ALL {
        let body = container_body(kind, vec![sample(kind, "a", 1), sample(kind, "b", 2)]);
        assert_eq!(
            h.call("PUT", &container(kind), Some(body)).await.0,
            StatusCode::OK
        );
    }
}

fn wal_path(dir: &Path) -> PathBuf {
    dir.join(WAL_FILE)
}

fn service_change(i: u32) -> Change {
    let body = wrapped(
        Kind::Service,
        watcher_service(
            &format!("s{i}"),
            &format!("svc{i}"),
            &format!("10.96.{}.{}", i / 250, i % 250 + 1),
            80,
        ),
    );
    Change::Upsert(
        parse::item_body(Kind::Service, &format!("s{i}"), body.to_string().as_bytes()).unwrap(),
    )
}

#[tokio::test]
async fn rest_state_survives_a_restart() {
    let h = Harness::new();
    put_samples_a_and_b(&h).await;
    assert_eq!(
        h.call("DELETE", &item(Kind::Pod, "b"), None).await.0,
        StatusCode::OK
    );
    let store = h.nb.store();
    let model = h.nb.settled().await.model.clone();
    let h = h.reopen();
    assert_eq!(h.nb.store(), store);
    assert_eq!(
        h.nb.published().model,
        model,
        "the restarted daemon publishes the same model at once"
    );
    assert_eq!(
        h.nb.published().revision,
        5,
        "revisions continue across restarts"
    );
    let (s, v) = h.call("GET", &item(Kind::Service, "a"), None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["service:services"][0]["name"], "svc-a");
    assert_eq!(
        h.call("GET", &item(Kind::Pod, "b"), None).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn one_process_at_a_time() {
    let h = Harness::new();
    let config = coe::rest::RestConfig::new(h.dir.path().join("state"));
    let err = coe::rest::Northbound::open(
        &config,
        std::sync::Arc::new(coe::rest::operational::Unavailable),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("in use by another svcflow process"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = DurableStore::open(dir.path(), Rules::default()).unwrap();
    assert!(matches!(
        DurableStore::open(dir.path(), Rules::default()),
        Err(OpenError::Locked(_))
    ));
    drop(d);
    open_store(dir.path(), Rules::default()).unwrap();
}

#[test]
fn rejected_changes_are_not_logged() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    d.apply(service_change(1)).unwrap();
    let len = std::fs::metadata(wal_path(dir.path())).unwrap().len();
    assert!(
        d.apply(Change::Delete(Kind::Service, "nope".into()))
            .is_err()
    );
    assert_eq!(std::fs::metadata(wal_path(dir.path())).unwrap().len(), len);
}

#[test]
fn a_torn_final_record_is_saved_aside_and_truncated() {
    for tear in ["short header", "short body", "bad checksum", "zero fill"] {
        let dir = tempfile::tempdir().unwrap();
        let mut d = open_store(dir.path(), Rules::default()).unwrap();
        d.apply(service_change(1)).unwrap();
        d.apply(service_change(2)).unwrap();
        let good = d.store().clone();
        drop(d);
        let path = wal_path(dir.path());
        let clean = std::fs::read(&path).unwrap();
        // What a crash during the third append could leave behind.
        let record = frame(br#"{"effects":{"seq":3,"effects":[]}}"#).unwrap();
        let tail: Vec<u8> = match tear {
            "short header" => record[..5].to_vec(),
            "short body" => record[..record.len() - 3].to_vec(),
            "bad checksum" => {
                let mut r = record.clone();
                let last = r.len() - 1;
                r[last] ^= 0xff;
                r
            }
            _ => vec![0; 4096],
        };
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&tail)
            .unwrap();

        let d = open_store(dir.path(), Rules::default()).unwrap();
        assert_eq!(d.store(), &good, "{tear}");
        let torn = d.torn().expect(tear).clone();
        assert_eq!(torn.offset, clean.len() as u64, "{tear}");
        assert_eq!(
            std::fs::read(&torn.saved_to).unwrap(),
            tail,
            "{tear}: the torn bytes are kept"
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            clean,
            "{tear}: truncated to the last good record"
        );
        drop(d);
        // A second torn append at the same place keeps the first one's bytes.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&tail)
            .unwrap();
        let d = open_store(dir.path(), Rules::default()).unwrap();
        let again = d.torn().expect(tear).saved_to.clone();
        assert_eq!(
            again.to_string_lossy(),
            format!("{}.1", torn.saved_to.display())
        );
        assert_eq!(std::fs::read(&torn.saved_to).unwrap(), tail);
        drop(d);
        // Appends continue after the good records.
        let mut d = open_store(dir.path(), Rules::default()).unwrap();
        assert!(d.torn().is_none());
        d.apply(service_change(3)).unwrap();
        drop(d);
        assert_eq!(
            open_store(dir.path(), Rules::default())
                .unwrap()
                .store()
                .services
                .len(),
            3
        );
    }
}

#[test]
fn damage_before_the_end_is_a_clear_error_and_the_file_is_left_alone() {
    let setup = || {
        let dir = tempfile::tempdir().unwrap();
        let mut d = open_store(dir.path(), Rules::default()).unwrap();
        for i in 1..=3 {
            d.apply(service_change(i)).unwrap();
        }
        drop(d);
        let bytes = std::fs::read(wal_path(dir.path())).unwrap();
        (dir, bytes)
    };
    let check = |dir: &Path, damaged: &[u8], expect: &str| {
        std::fs::write(wal_path(dir), damaged).unwrap();
        let err = open_store(dir, Rules::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(expect), "{msg}");
        assert!(
            msg.contains("refusing to start") || msg.contains("not valid"),
            "{msg}"
        );
        assert_eq!(
            std::fs::read(wal_path(dir)).unwrap(),
            damaged,
            "the file is never changed"
        );
    };

    // A flipped bit inside the first record.
    let (dir, mut bytes) = setup();
    bytes[MAGIC.len() + 20] ^= 0x01;
    check(
        dir.path(),
        &bytes,
        "checksum mismatch with more records after it",
    );
    assert!(matches!(
        open_store(dir.path(), Rules::default()),
        Err(OpenError::Wal(WalError::Corrupt { offset: 8, .. }))
    ));

    // Bad magic.
    let (dir, mut bytes) = setup();
    bytes[0] = b'X';
    check(dir.path(), &bytes, "bad magic");

    // Truncated below the header.
    let (dir, _) = setup();
    check(dir.path(), b"SVC", "shorter than its header");

    // An impossible length in the middle.
    let (dir, bytes) = setup();
    let mut damaged = bytes[..MAGIC.len()].to_vec();
    damaged.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    damaged.extend_from_slice(&bytes[MAGIC.len()..]);
    check(dir.path(), &damaged, "impossible record length 0");

    // An intact record (right checksum) that is not a record we wrote.
    let (dir, mut bytes) = setup();
    bytes.extend_from_slice(&frame(b"{\"bogus\":1}").unwrap());
    check(dir.path(), &bytes, "record 3: cannot decode");

    // A missing record: sequence numbers 1, 3.
    let dir = tempfile::tempdir().unwrap();
    let path = wal_path(dir.path());
    let mut damaged = MAGIC.to_vec();
    damaged.extend_from_slice(&frame(br#"{"effects":{"seq":1,"effects":[]}}"#).unwrap());
    damaged.extend_from_slice(&frame(br#"{"effects":{"seq":3,"effects":[]}}"#).unwrap());
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(&path, &damaged).unwrap();
    check(dir.path(), &damaged, "a record is missing");
}

#[test]
fn state_invalid_under_a_new_configuration_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    let body = json!({ "services": [ { "uid": "s1", "cluster-ip-address": "10.96.0.1",
        "service-ports": [ { "port": 80, "node-port": 30080 } ] } ] });
    d.apply(Change::Upsert(
        parse::item_body(Kind::Service, "s1", body.to_string().as_bytes()).unwrap(),
    ))
    .unwrap();
    drop(d);
    let err = open_store(
        dir.path(),
        Rules {
            node_port_range: 31000..=32000,
        },
    )
    .unwrap_err();
    assert!(matches!(err, OpenError::Invalid { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("services[s1].service-ports[0].node-port"),
        "{err}"
    );
    assert_eq!(
        open_store(dir.path(), Rules::default())
            .unwrap()
            .store()
            .services
            .len(),
        1
    );
    // Opened for repair, the same state comes with the rule it breaks and the file stays
    // as it was; writes are still checked, and one that corrects the item makes the state
    // valid again.
    let narrow = Rules {
        node_port_range: 31000..=32000,
    };
    let bytes = std::fs::read(wal_path(dir.path())).unwrap();
    let (mut d, invalid) = DurableStore::open_for_repair(dir.path(), narrow.clone()).unwrap();
    assert!(
        invalid
            .unwrap()
            .to_string()
            .contains("services[s1].service-ports[0].node-port")
    );
    assert_eq!(d.store().services.len(), 1);
    assert_eq!(std::fs::read(wal_path(dir.path())).unwrap(), bytes);
    let with_port = |port: u16| {
        let body = json!({ "services": [ { "uid": "s1", "cluster-ip-address": "10.96.0.1",
            "service-ports": [ { "port": 80, "node-port": port } ] } ] });
        Change::Upsert(parse::item_body(Kind::Service, "s1", body.to_string().as_bytes()).unwrap())
    };
    assert!(d.apply(with_port(30081)).is_err(), "still checked");
    d.apply(with_port(31080)).unwrap();
    drop(d);
    assert_eq!(
        open_store(dir.path(), narrow)
            .unwrap()
            .store()
            .services
            .len(),
        1
    );
}

#[test]
fn compaction_keeps_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    for i in 1..=20 {
        d.apply(service_change(i)).unwrap();
    }
    d.apply(Change::Delete(Kind::Service, "s7".into())).unwrap();
    let state = d.store().clone();
    assert_eq!(d.wal().records(), 21);
    d.compact().unwrap();
    assert_eq!(d.wal().records(), 1);
    d.apply(service_change(30)).unwrap();
    drop(d);
    let d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!(d.wal().records(), 2);
    let mut expected = state.services.clone();
    expected.insert("s30".into(), d.store().services["s30"].clone());
    assert_eq!(d.store().services, expected);
    assert!(!d.store().services.contains_key("s7"));
    assert!(!dir.path().join(format!("{WAL_FILE}.tmp")).exists());
}

/// A log written before the binary form (JSON records, a snapshot among them) opens with its
/// state; new records are appended in the binary form beside them, and all of it reads back,
/// before and after a compaction (which rewrites it as one binary snapshot).
#[test]
fn a_log_of_json_records_opens_and_grows_in_the_binary_form() {
    use coe::rest::store::Effect;
    use coe::rest::types::Item;
    let dir = tempfile::tempdir().unwrap();
    // The state an older svcflow would have logged, built by a store of today.
    let mut old = open_store(dir.path(), Rules::default()).unwrap();
    for i in 1..=3 {
        old.apply(service_change(i)).unwrap();
    }
    let snapshot = old.store().clone();
    old.apply(service_change(4)).unwrap();
    old.apply(Change::Delete(Kind::Service, "s2".into()))
        .unwrap();
    let state = old.store().clone();
    drop(old);
    let s4 = vec![Effect::Upsert(Item::Service(state.services["s4"].clone()))];
    let s2 = vec![Effect::Remove(Kind::Service, "s2".into())];
    let mut bytes = MAGIC.to_vec();
    let json = |record: serde_json::Value| serde_json::to_vec(&record).unwrap();
    bytes.extend_from_slice(
        &frame(&json(
            json!({ "snapshot": { "seq": 3, "store": snapshot } }),
        ))
        .unwrap(),
    );
    bytes.extend_from_slice(
        &frame(&json(json!({ "effects": { "seq": 4, "effects": s4 } }))).unwrap(),
    );
    bytes.extend_from_slice(
        &frame(&json(json!({ "effects": { "seq": 5, "effects": s2 } }))).unwrap(),
    );
    std::fs::write(wal_path(dir.path()), bytes).unwrap();

    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!(d.seq(), 5);
    assert_eq!(d.store().services, state.services);
    assert_eq!(d.store().elans, state.elans);
    d.apply(service_change(9)).unwrap();
    drop(d);
    let payloads = Wal::open(&wal_path(dir.path())).unwrap().records;
    let forms: Vec<u8> = payloads.iter().map(|p| p[0]).collect();
    assert_eq!(forms, vec![b'{', b'{', b'{', 1]);

    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!(d.seq(), 6);
    let mut expected = state.services.clone();
    expected.insert("s9".into(), d.store().services["s9"].clone());
    assert_eq!(d.store().services, expected);
    d.compact().unwrap();
    drop(d);
    let payloads = Wal::open(&wal_path(dir.path())).unwrap().records;
    assert_eq!(payloads.len(), 1);
    assert_eq!(payloads[0][0], 2, "a snapshot in the binary form");
    let d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!((d.seq(), &d.store().services), (6, &expected));
    assert_eq!(d.store().elans, state.elans);
}

#[test]
fn the_log_compacts_itself_when_long() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    let n = coe::rest::durable::COMPACT_AT as u32 + 5;
    for i in 0..n {
        d.apply(Change::Upsert(
            parse::item_body(
                Kind::Node,
                "n1",
                json!({ "k8s-nodes": [ { "uid": "n1", "host-name": format!("h{i}") } ] })
                    .to_string()
                    .as_bytes(),
            )
            .unwrap(),
        ))
        .unwrap();
    }
    assert!(d.wal().records() < 10, "{}", d.wal().records());
    drop(d);
    let d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!(d.store().nodes["n1"].host_name, format!("h{}", n - 1));
}

#[test]
fn a_stale_compaction_file_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    d.apply(service_change(1)).unwrap();
    drop(d);
    std::fs::write(
        dir.path().join(format!("{WAL_FILE}.tmp")),
        b"half a snapshot",
    )
    .unwrap();
    let d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!(d.store().services.len(), 1);
    assert!(!dir.path().join(format!("{WAL_FILE}.tmp")).exists());
}

#[test]
fn the_raw_log_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut opened = Wal::open(&path).unwrap();
    assert!(opened.records.is_empty());
    opened.wal.append(b"one").unwrap();
    opened.wal.append(b"two").unwrap();
    assert!(matches!(opened.wal.append(b""), Err(WalError::TooLarge(0))));
    drop(opened);
    let opened = Wal::open(&path).unwrap();
    assert_eq!(opened.records, vec![b"one".to_vec(), b"two".to_vec()]);
    assert_eq!(opened.wal.len(), std::fs::metadata(&path).unwrap().len());
}

/// Environment variable that turns `kill9_writer` into the child process of `kill9`.
const CHILD_DIR: &str = "SVCFLOW_KILL9_CHILD_DIR";

/// The child: applies changes forever, printing each acknowledged one.
#[test]
fn kill9_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let mut d = open_store(Path::new(&dir), Rules::default()).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 1.. {
        d.apply(service_change(i)).unwrap();
        writeln!(out, "acked {i}").unwrap();
        out.flush().unwrap();
    }
}

/// Acknowledged writes survive `kill -9` of the writer at an arbitrary moment.
#[test]
fn acknowledged_writes_survive_kill_9() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "kill9_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acked = 0;
        let want = 30 + round * 17;
        while acked < want {
            let line = lines.next().unwrap().unwrap();
            if let Some(n) = line.strip_prefix("acked ") {
                acked = n.parse().unwrap();
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Acknowledgements printed before the kill but not read yet.
        for line in lines {
            if let Some(n) = line.unwrap().strip_prefix("acked ") {
                acked = n.parse().unwrap();
            }
        }
        let d = open_store(dir.path(), Rules::default()).unwrap();
        let services = &d.store().services;
        for i in 1..=acked {
            assert!(
                services.contains_key(&format!("s{i}")),
                "round {round}: acknowledged s{i} lost"
            );
        }
        assert!(
            services.len() as u32 <= acked + 1,
            "round {round}: at most the in-flight write may also be there"
        );
    }
}

/// Environment variable that turns `wal_full_writer` into the child process of
/// `a_failed_append_is_a_500_and_changes_nothing`.
const FULL_CHILD_DIR: &str = "SVCFLOW_WAL_FULL_CHILD_DIR";

/// The child: runs under a small file size limit and writes until the log cannot grow.
#[tokio::test]
async fn wal_full_writer() {
    let Some(dir) = std::env::var_os(FULL_CHILD_DIR) else {
        return;
    };
    let config = coe::rest::RestConfig::new(PathBuf::from(dir));
    let nb = coe::rest::Northbound::open(
        &config,
        std::sync::Arc::new(coe::rest::operational::Unavailable),
    )
    .unwrap();
    let router = nb.router();
    for i in 1..10_000u32 {
        let body = wrapped(
            Kind::Service,
            watcher_service(
                &format!("s{i}"),
                &format!("svc{i}"),
                &format!("10.96.{}.{}", i / 250, i % 250 + 1),
                80,
            ),
        );
        let before = nb.store();
        let req = axum::http::Request::put(item(Kind::Service, &format!("s{i}")))
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let (status, v) = send(&router, req).await;
        if status == StatusCode::OK {
            println!("acked {i}");
            continue;
        }
        println!(
            "failed {i} status {} tag {}",
            status.as_u16(),
            error_of(&v).1
        );
        println!("unchanged {}", nb.store() == before);
        // The same write again: its record is as long, so it cannot fit either (a smaller
        // one, such as a delete's, might).
        let (status, _) = send(
            &router,
            axum::http::Request::put(item(Kind::Service, &format!("s{i}")))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body.to_string()))
                .unwrap(),
        )
        .await;
        println!("then {}", status.as_u16());
        println!("unchanged {}", nb.store() == before);
        return;
    }
}

/// A log that cannot grow (here: `ulimit -f`) makes writes fail with a 500 that changes
/// nothing, in memory or on disk; the acknowledged writes are all there after a restart.
#[test]
fn a_failed_append_is_a_500_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 16 && exec \"$0\" --exact wal_full_writer --nocapture --test-threads=1")
        .arg(std::env::current_exe().unwrap())
        .env(FULL_CHILD_DIR, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let acked = stdout.lines().filter(|l| l.contains("acked ")).count();
    assert!(acked > 5, "{stdout}");
    assert!(
        stdout.contains(&format!(
            "failed {} status 500 tag operation-failed",
            acked + 1
        )),
        "{stdout}"
    );
    assert!(stdout.contains("then 500"), "{stdout}");
    assert!(!stdout.contains("unchanged false"), "{stdout}");
    let d = open_store(dir.path(), Rules::default()).unwrap();
    assert!(
        d.torn().is_none(),
        "the partial record was truncated at once"
    );
    assert_eq!(d.store().services.len(), acked);
    assert!(d.store().services.contains_key(&format!("s{acked}")));
}

/// A container PUT of at least `WORTH_A_THREAD` items has its log record encoded while it is
/// applied and checked: accepted, its record replays to the same state; refused (two services
/// on one cluster IP, the clash between its last item and its first), nothing is logged and
/// the state is as before.
#[test]
fn a_large_write_is_logged_as_one_record_or_not_at_all() {
    use coe::par::WORTH_A_THREAD;
    let n = u32::try_from(WORTH_A_THREAD).unwrap() + 10;
    let services = |clash: bool| {
        let items: Vec<_> = (0..n)
            .map(|i| {
                let vip = if clash && i == n - 1 {
                    "10.96.0.1".to_string()
                } else {
                    format!("10.96.{}.{}", i / 250, i % 250 + 1)
                };
                watcher_service(&format!("s{i}"), &format!("svc{i}"), &vip, 80)
            })
            .collect();
        let body = container_body(Kind::Service, items).to_string();
        Change::Replace(
            Kind::Service,
            parse::container_body(Kind::Service, body.as_bytes()).unwrap(),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let mut d = open_store(dir.path(), Rules::default()).unwrap();
    d.apply(service_change(7)).unwrap();
    let len = std::fs::metadata(wal_path(dir.path())).unwrap().len();
    let before = serde_json::to_value(d.store()).unwrap();
    assert!(d.apply(services(true)).is_err());
    assert_eq!(std::fs::metadata(wal_path(dir.path())).unwrap().len(), len);
    assert_eq!(serde_json::to_value(d.store()).unwrap(), before);

    d.apply(services(false)).unwrap();
    assert_eq!(d.store().services.len(), n as usize);
    let after = serde_json::to_value(d.store()).unwrap();
    drop(d);
    let raw = Wal::open(&wal_path(dir.path())).unwrap();
    assert_eq!(raw.records.len(), 2, "one record per accepted write");
    drop(raw);
    let d = open_store(dir.path(), Rules::default()).unwrap();
    assert_eq!(serde_json::to_value(d.store()).unwrap(), after);
}

/// A record framed where it is encoded is byte for byte the one `frame` makes of its payload.
#[test]
fn a_record_framed_in_place_is_the_framed_payload() {
    use coe::rest::wal::Framed;
    for payload in [&b"x"[..], b"{\"seq\":1}", &[7u8; 100_000]] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let mut wa = Wal::open(&a).unwrap().wal;
        wa.append(payload).unwrap();
        let mut buf = Framed::buffer(3);
        buf.extend_from_slice(payload);
        let framed = Framed::seal(buf).unwrap();
        let mut wb = Wal::open(&b).unwrap().wal;
        wb.append_framed(&framed).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        let mut expected = std::fs::read(&a).unwrap();
        expected.truncate(expected.len() - payload.len() - 8);
        expected.extend_from_slice(&frame(payload).unwrap());
        assert_eq!(std::fs::read(&a).unwrap(), expected);
    }
    let empty = Framed::seal(Framed::buffer(0));
    assert!(matches!(empty, Err(WalError::TooLarge(0))));
}

/// The whole datastore: `GET /restconf/config` gives every container as its own GET does, and
/// a PUT of it replaces them all as one write (one revision, one log record), or, refused,
/// changes nothing; it must name every container.
#[tokio::test]
async fn a_put_of_the_datastore_is_one_write_or_none() {
    let h = Harness::new();
    put_samples_a_and_b(&h).await;
    let (status, whole) = h.call("GET", "/restconf/config", None).await;
    assert_eq!(status, StatusCode::OK);
    for kind in Kind::ALL {
        let (_, one) = h.call("GET", &container(kind), None).await;
        assert_eq!(
            whole[kind.qualified_container()],
            one[kind.qualified_container()]
        );
    }
    assert_eq!(whole.as_object().unwrap().len(), 4);
    let records = || {
        Wal::open(&wal_path(&h.dir.path().join("state")))
            .unwrap()
            .records
            .len()
    };
    let (revision, logged) = (h.nb.revision(), records());

    // The services and endpoints replaced, the pods emptied, the nodes given as they are.
    let mut next = whole.clone();
    for kind in [Kind::Service, Kind::Endpoints] {
        next[kind.qualified_container()] =
            json!({ kind.list(): [sample(kind, "b", 2), sample(kind, "c", 3)] });
    }
    next[Kind::Pod.qualified_container()] = json!({ "pods": [] });
    let (status, body) = h.call("PUT", "/restconf/config", Some(next.clone())).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(h.nb.revision(), revision + 1, "one write");
    assert_eq!(records(), logged + 1, "one log record");
    let (_, now) = h.call("GET", "/restconf/config", None).await;
    let uids = |doc: &serde_json::Value, kind: Kind| -> Vec<String> {
        doc[kind.qualified_container()][kind.list()]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["uid"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(uids(&now, Kind::Service), ["b", "c"]);
    assert_eq!(uids(&now, Kind::Endpoints), ["b", "c"]);
    assert_eq!(uids(&now, Kind::Node), ["a", "b"]);
    assert!(uids(&now, Kind::Pod).is_empty());
    let model = &h.nb.settled().await.model;
    assert_eq!(model.services.len(), 2);
    assert!(model.pods.is_empty());

    // Refused: service d takes c's address and port. Nothing changes, the pods included.
    let mut clash = now.clone();
    clash[Kind::Service.qualified_container()] =
        json!({ "services": [sample(Kind::Service, "c", 3), sample(Kind::Service, "d", 3)] });
    clash[Kind::Pod.qualified_container()] = json!({ "pods": [sample(Kind::Pod, "x", 9)] });
    let (status, body) = h.call("PUT", "/restconf/config", Some(clash)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (path, _) = error_of(&body);
    assert!(path.starts_with("services[d]"), "{body}");
    // And one that leaves a container out, which would empty it.
    let mut short = now.clone();
    short.as_object_mut().unwrap().remove("pod:coe");
    let (status, body) = h.call("PUT", "/restconf/config", Some(short)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("missing `pod:coe`"), "{body}");
    assert_eq!(h.call("GET", "/restconf/config", None).await.1, now);
    assert_eq!((h.nb.revision(), records()), (revision + 1, logged + 1));

    // The write replays as it was taken.
    let store = h.nb.store();
    let h = h.reopen();
    assert_eq!(h.nb.store(), store);
}
