//! Differential tests against `ovs-ofctl` 3.1: for every corpus entry,
//! `ovs-ofctl` encodes it (captured by a fake switch), our decoder prints
//! exactly what `ovs-ofctl ofp-print` prints, and our re-encode is
//! byte-identical.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::{capture, check_message, corpus};

fn run_file(cmd: &str, file: &str, expect_per_line: usize) {
    let lines = corpus(file);
    let dir = std::env::temp_dir().join(format!("ofctl-diff-{}-{file}", std::process::id()));
    std::fs::write(&dir, lines.join("\n") + "\n").unwrap();
    let msgs = capture(&[cmd, "TARGET", dir.to_str().unwrap()]);
    let _ = std::fs::remove_file(&dir);
    assert_eq!(
        msgs.len(),
        lines.len() * expect_per_line,
        "message count for {file}"
    );
    let mut failures = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if let Err(e) = check_message(m) {
            failures.push(format!(
                "{file}:{} `{}`: {e}",
                i + 1,
                lines[i / expect_per_line]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        msgs.len(),
        failures.join("\n")
    );
}

#[test]
fn flows_match_ovs_ofctl() {
    run_file("add-flows", "flows.txt", 1);
}

#[test]
fn groups_match_ovs_ofctl() {
    run_file("add-groups", "groups.txt", 1);
}

/// Each line of commands.txt is one `ovs-ofctl` command; fields are
/// separated by ` ;; ` and the word TARGET is the fake switch.
#[test]
fn commands_match_ovs_ofctl() {
    let mut failures = Vec::new();
    let mut n = 0;
    for line in corpus("commands.txt") {
        let args: Vec<&str> = line.split(" ;; ").collect();
        for m in capture(&args) {
            n += 1;
            if let Err(e) = check_message(&m) {
                failures.push(format!("`{line}`: {e}"));
            }
        }
    }
    assert!(n > 0);
    assert!(
        failures.is_empty(),
        "{} of {n} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
