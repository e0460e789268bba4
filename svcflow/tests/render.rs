//! `svcflow render`: every golden scenario renders, from the binary, exactly to its golden
//! flows and groups; a bad file is a clear error.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;
use std::process::Command;

fn svcflow(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_svcflow"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn every_golden_scenario_renders_to_its_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../netvirt/tests/scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let input = dir.join("input.toml");
        if !input.is_file() {
            continue;
        }
        seen += 1;
        let input = input.to_string_lossy().to_string();
        let flows = std::fs::read_to_string(dir.join("flows.txt")).unwrap();
        let groups = std::fs::read_to_string(dir.join("groups.txt")).unwrap();
        let all = svcflow(&["render", &input]);
        assert!(
            all.status.success(),
            "{}",
            String::from_utf8_lossy(&all.stderr)
        );
        assert_eq!(
            String::from_utf8(all.stdout).unwrap(),
            flows.clone() + &groups
        );
        let only = svcflow(&["render", "--flows", &input]);
        assert_eq!(String::from_utf8(only.stdout).unwrap(), flows);
        let only = svcflow(&["render", "--groups", &input]);
        assert_eq!(String::from_utf8(only.stdout).unwrap(), groups);
    }
    assert!(seen >= 5, "{seen} scenarios");
}

#[test]
fn a_bad_model_file_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("svcflow-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[node]\nname = 3\n").unwrap();
    let out = svcflow(&["render", &file.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("svcflow render: "), "{err}");
    assert!(err.contains("bad.toml"), "{err}");
    let missing = svcflow(&["render", "/nonexistent/model.toml"]);
    assert_eq!(missing.status.code(), Some(1));
    let _ = std::fs::remove_dir_all(&dir);
}
