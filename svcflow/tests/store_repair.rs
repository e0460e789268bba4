//! `svcflow store export` and `import` on a local store that the current rules refuse (a node
//! port outside a range narrowed since; after an upgrade, a rule tightened): `svcflow run`
//! refuses to start on it, so export writes the state out all the same and says what is
//! refused, and import takes the corrected file back, after which the store opens.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use coe::rest::durable::{DurableStore, OpenError};
use coe::rest::parse;
use coe::rest::store::{Change, Rules};
use coe::rest::types::Kind;

/// A fresh directory under the system's temporary one, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("svcflow-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn store(args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_svcflow"))
        .arg("store")
        .args(args)
        .args(["--state-dir", &dir.to_string_lossy()])
        .args(["--node-port-range", "31000-32000"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn a_refused_local_store_is_exported_corrected_and_imported_back() {
    let tmp = TempDir::new("store-repair");
    let state = tmp.0.join("state");
    // Written under the default range (30000-32767), node port 30080.
    let mut d = DurableStore::open(&state, Rules::default()).unwrap();
    let body = r#"{"services":[{"uid":"s1","name":"web","network-NS":"default",
        "cluster-ip-address":"10.96.0.1","service-ports":[{"port":80,"node-port":30080}]}]}"#;
    d.apply(Change::Upsert(
        parse::item_body(Kind::Service, "s1", body.as_bytes()).unwrap(),
    ))
    .unwrap();
    drop(d);
    let narrow = || Rules {
        node_port_range: 31000..=32000,
    };
    // The daemon's open refuses it, and says how to get out.
    let err = DurableStore::open(&state, narrow()).err().unwrap();
    assert!(matches!(err, OpenError::Invalid { .. }), "{err}");
    assert!(err.to_string().contains("svcflow store export"), "{err}");

    let file = tmp.0.join("state.json");
    let file_arg = file.to_string_lossy().to_string();
    let (ok, text) = store(&["export", &file_arg], &state);
    assert!(ok, "{text}");
    assert!(
        text.contains("the current rules refuse this state")
            && text.contains("services[s1].service-ports[0].node-port"),
        "{text}"
    );
    let exported = std::fs::read_to_string(&file).unwrap();
    assert!(exported.contains("30080"), "{exported}");

    // Imported uncorrected, it is refused as a PUT would be, and as one write: the node
    // added to the file beside the bad service is not taken either.
    let mut doc: serde_json::Value = serde_json::from_str(&exported).unwrap();
    doc["k8s-node:k8s-nodes-info"]["k8s-nodes"] = serde_json::json!([
        { "uid": "n1", "host-name": "n1", "internal-ip-address": "192.0.2.1" }
    ]);
    std::fs::write(&file, doc.to_string()).unwrap();
    let (ok, text) = store(&["import", &file_arg], &state);
    assert!(!ok && text.contains("node-port"), "{text}");
    let (d, _) = DurableStore::open_for_repair(&state, narrow()).unwrap();
    assert!(
        d.store().nodes.is_empty(),
        "a refused import changed the store"
    );
    drop(d);
    std::fs::write(&file, exported.replace("30080", "31080")).unwrap();
    let (ok, text) = store(&["import", &file_arg], &state);
    assert!(ok, "{text}");
    let d = DurableStore::open(&state, narrow()).unwrap();
    assert_eq!(d.store().services.len(), 1);
    drop(d);
    let (ok, text) = store(&["export", &file_arg], &state);
    assert!(ok && !text.contains("refuse"), "{text}");
}
