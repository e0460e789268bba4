//! Unreachable nodes on the three-node lab (`ovs-tests/lab/three-nodes.toml`): svcflow runs
//! with `--node-down-after 2`, so when a node's switch stays away for 2 s its endpoints leave
//! the other nodes' groups, and they return when its switch is back.
//!
//! It runs `target/<profile>/svcflow`: `cargo build -p svcflow` first (or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use ovs_tests::lab::{Lab, LabOptions, Topology};
use ovs_tests::wait_for;

const VIP: &str = "10.96.0.10:80";

fn fail(lab: &Lab, what: &dyn std::fmt::Display) -> ! {
    panic!(
        "{what}\n{}\nsvcflow log tail:\n{}",
        lab.status(),
        lab.daemon_log_tail(60)
    );
}

fn ip(lab: &Lab, pod: &str) -> Ipv4Addr {
    lab.pod(pod).unwrap().ip().to_string().parse().unwrap()
}

/// Waits until node `node`'s switch has a group of exactly `want`.
fn wait_group(lab: &Lab, node: &str, want: &BTreeSet<Ipv4Addr>, timeout: Duration) -> Duration {
    let since = Instant::now();
    let found = wait_for(
        &format!("node {node}'s switch to get the group {want:?}"),
        timeout,
        || {
            lab.group_endpoints(node)
                .ok()?
                .contains(want)
                .then(|| since.elapsed())
        },
    );
    found.unwrap_or_else(|e| fail(lab, &e))
}

/// Which backends `count` connections from pod `from` to the VIP reach.
fn tally(lab: &Lab, from: &str, count: u32) -> BTreeMap<String, usize> {
    let attempts = lab
        .pod(from)
        .unwrap()
        .connect("tcp", VIP, count, &["--timeout-ms", "2000"])
        .unwrap_or_else(|e| fail(lab, &format!("svcflow-probe connect: {e}")));
    let mut seen = BTreeMap::new();
    for a in attempts {
        let name = a.unwrap_or_else(|e| fail(lab, &format!("a connection failed: {e}")));
        *seen.entry(name).or_default() += 1;
    }
    seen
}

#[test]
fn a_node_whose_switch_stays_away_leaves_the_other_nodes_groups_until_it_returns() {
    assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lab/three-nodes.toml");
    let topology = Topology::load(&path).unwrap();
    assert_eq!(topology.service("web").unwrap().endpoints, ["n2-a", "n3-a"]);
    let options = LabOptions {
        daemon_args: vec!["--node-down-after".into(), "2".into()],
        ..LabOptions::default()
    };
    let mut lab = Lab::up(&topology, &options).unwrap_or_else(|e| panic!("lab: {e}"));
    let both: BTreeSet<Ipv4Addr> = [ip(&lab, "n2-a"), ip(&lab, "n3-a")].into();
    let n2_only: BTreeSet<Ipv4Addr> = [ip(&lab, "n2-a")].into();
    wait_group(&lab, "n1", &both, Duration::from_secs(10));

    // n3's switch goes away: after 2 s its endpoint leaves n1's and n2's groups.
    let gone = Instant::now();
    lab.node_mut("n3").unwrap().stop_vswitchd(false).unwrap();
    let took = wait_group(&lab, "n1", &n2_only, Duration::from_secs(15));
    wait_group(&lab, "n2", &n2_only, Duration::from_secs(5));
    let after = gone.elapsed();
    eprintln!("n3's endpoint left n1's group {took:?} after its switch went away");
    assert!(
        after >= Duration::from_secs(2),
        "the endpoint left after {after:?}, before --node-down-after"
    );
    let log = lab.daemon_log_tail(200);
    assert!(
        log.contains("node n3: its switch has been disconnected for over 2s"),
        "{log}"
    );
    // Every connection from n1 now reaches n2's endpoint: none is sent to the dead node.
    let seen = tally(&lab, "n1-a", 10);
    assert_eq!(seen, BTreeMap::from([("n2-a".to_string(), 10)]));

    // n3's switch comes back: its endpoint returns everywhere.
    lab.node_mut("n3").unwrap().start_vswitchd().unwrap();
    wait_group(&lab, "n1", &both, Duration::from_secs(15));
    wait_group(&lab, "n3", &both, Duration::from_secs(15));
    let log = lab.daemon_log_tail(200);
    assert!(log.contains("node n3: back; its endpoints return"), "{log}");
    let seen = tally(&lab, "n1-a", 30);
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["n2-a", "n3-a"],
        "both endpoints serve again: {seen:?}"
    );
    lab.down().unwrap();
}
