//! The Raft harness itself: a real 3-member clustered `ovsdb-server` forms, replicates, fails
//! over, and loses and regains quorum. These tests fail (never skip) if Open vSwitch is missing.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use std::path::Path;
use std::time::{Duration, Instant};

use ovs_tests::SandboxError;
use ovs_tests::raft::RaftCluster;

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/svcflow.ovsschema");
/// The time any single client call may take when the cluster has quorum.
const T: Duration = Duration::from_secs(5);

fn cluster() -> RaftCluster {
    RaftCluster::start(Path::new(SCHEMA), 3)
        .unwrap_or_else(|e| panic!("cannot start the Raft cluster of ovsdb-servers: {e}"))
}

fn insert_revision(revision: u64) -> String {
    format!(r#"["Svcflow",{{"op":"insert","table":"Revision","row":{{"revision":{revision}}}}}]"#)
}

fn update_revision(revision: u64) -> String {
    format!(
        r#"["Svcflow",{{"op":"update","table":"Revision","where":[],"row":{{"revision":{revision}}}}}]"#
    )
}

const SELECT_REVISION: &str = r#"["Svcflow",{"op":"select","table":"Revision","where":[]}]"#;

/// The `revision` of every `Revision` row member `i` holds now.
fn revisions(c: &RaftCluster, i: usize) -> Vec<u64> {
    let out = c.query(i, SELECT_REVISION, T).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&out).unwrap();
    reply[0]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("unexpected query reply from member {i}: {out}"))
        .iter()
        .map(|row| row["revision"].as_u64().unwrap())
        .collect()
}

/// Waits until member `i` holds exactly `want`.
fn wait_rows(c: &RaftCluster, i: usize, want: &[u64]) {
    let deadline = Instant::now() + T;
    loop {
        let got = revisions(c, i);
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "member {i} holds {got:?}, not {want:?}, after {T:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Member `i`'s `_Server` row for the database: `(connected, leader)`.
fn server_row(c: &RaftCluster, i: usize) -> (bool, bool) {
    let txn = format!(
        r#"["_Server",{{"op":"select","table":"Database","where":[["name","==","{}"]],"columns":["connected","leader","model"]}}]"#,
        c.db()
    );
    let out = c.query(i, &txn, T).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = &reply[0]["rows"][0];
    assert_eq!(row["model"], "clustered", "member {i}: {out}");
    (
        row["connected"].as_bool().unwrap(),
        row["leader"].as_bool().unwrap(),
    )
}

fn role(c: &RaftCluster, i: usize) -> String {
    let status = c.cluster_status(i).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Role: "))
        .unwrap_or("")
        .to_string()
}

#[test]
fn the_cluster_forms_and_replicates_through_any_member() {
    let c = cluster();
    assert_eq!(c.db(), "Svcflow");
    let remotes = c.remotes();
    assert_eq!(remotes.len(), 3);
    assert!(remotes.iter().all(|r| r.starts_with("tcp:127.0.0.1:")));
    assert_eq!(c.remote_list(), remotes.join(","));
    assert!(c.dir().join("m0.db").is_file());

    let leader = c.wait_leader(T).unwrap();
    assert_eq!(c.leader(), Some(leader));
    for i in 0..3 {
        assert!(c.is_running(i));
        // Every member is connected; only the leader says it is leader.
        assert_eq!(server_row(&c, i), (true, i == leader), "member {i}");
    }

    // A follower accepts the write (it forwards it to the leader) ...
    let follower = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let out = c
        .transact(follower, &insert_revision(1), T)
        .unwrap_or_else(|e| panic!("transact on follower {follower}: {e}"));
    assert!(out.contains("uuid"), "{out}");
    // ... and the other follower and the leader see it.
    wait_rows(&c, other, &[1]);
    wait_rows(&c, leader, &[1]);
    wait_rows(&c, follower, &[1]);
}

#[test]
fn a_killed_leader_is_replaced_and_rejoins_when_restarted() {
    let mut c = cluster();
    let old = c.wait_leader(T).unwrap();
    c.transact(old, &insert_revision(1), T).unwrap();

    c.kill(old).unwrap();
    assert!(!c.is_running(old));
    let killed = Instant::now();
    let new = c.wait_leader(Duration::from_secs(10)).unwrap();
    let failover = killed.elapsed();
    println!("leader failover took {failover:?} (member {old} -> {new})");
    assert_ne!(new, old);
    assert!(failover < Duration::from_secs(10), "{failover:?}");

    // The survivors commit new writes.
    c.transact(new, &update_revision(2), T).unwrap();
    let survivor = (0..3).find(|i| *i != old && *i != new).unwrap();
    wait_rows(&c, survivor, &[2]);

    c.restart(old).unwrap();
    let restarted = Instant::now();
    let leader = c.wait_connected(3, Duration::from_secs(10)).unwrap();
    println!(
        "member {old} rejoined as a follower {:?} after its restart",
        restarted.elapsed()
    );
    assert_ne!(leader, old);
    assert_eq!(role(&c, old), "follower");
    assert!(
        c.cluster_status(old)
            .unwrap()
            .contains("Status: cluster member")
    );
    wait_rows(&c, old, &[2]);
}

#[test]
fn two_of_three_killed_leaves_no_quorum_until_they_return() {
    let mut c = cluster();
    let leader = c.wait_leader(T).unwrap();
    c.transact(leader, &insert_revision(1), T).unwrap();
    let lone = (leader + 1) % 3;
    wait_rows(&c, lone, &[1]);

    // Kill the leader and the other follower, leaving `lone` alone.
    let others: Vec<usize> = (0..3).filter(|i| *i != lone).collect();
    for &i in &others {
        c.kill(i).unwrap();
    }
    let killed = Instant::now();
    // The lone member's _Server row says it is not connected, though only once it has failed
    // an election and is retrying (until then it still says connected).
    let deadline = killed + Duration::from_secs(10);
    while server_row(&c, lone) != (false, false) {
        assert_eq!(c.leader(), None, "{}", c.cluster_status(lone).unwrap());
        assert!(Instant::now() < deadline, "{:?}", server_row(&c, lone));
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "the lone member's _Server row said connected: false {:?} after the kills",
        killed.elapsed()
    );
    // It tries, and fails, to become leader.
    assert_eq!(c.leader(), None, "{}", c.cluster_status(lone).unwrap());
    assert!(c.wait_leader(Duration::from_millis(1500)).is_err());
    assert_ne!(role(&c, lone), "leader");
    assert!(
        c.cluster_status(lone)
            .unwrap()
            .contains("Status: disconnected from the cluster"),
        "{}",
        c.cluster_status(lone).unwrap()
    );
    // It still answers reads, from its own copy ...
    assert_eq!(revisions(&c, lone), vec![1]);
    // ... but holds a write without replying.
    match c.transact(lone, &update_revision(2), Duration::from_secs(2)) {
        Err(SandboxError::Timeout { .. }) => {}
        other => panic!("a write without quorum returned {other:?}"),
    }

    for &i in &others {
        c.restart(i).unwrap();
    }
    let restarted = Instant::now();
    let back = c.wait_leader(Duration::from_secs(10)).unwrap();
    println!(
        "a leader (member {back}) was back {:?} after the restarts",
        restarted.elapsed()
    );
    c.wait_connected(3, Duration::from_secs(10)).unwrap();
    // The abandoned write (its client was killed) was not committed later.
    for i in 0..3 {
        wait_rows(&c, i, &[1]);
    }
    c.transact(lone, &update_revision(3), T).unwrap();
    for i in 0..3 {
        wait_rows(&c, i, &[3]);
    }
}

/// Kills the two followers: the lone leader must notice it has lost its majority.
#[test]
fn a_leader_whose_followers_die_stops_being_leader() {
    let mut c = cluster();
    let leader = c.wait_leader(T).unwrap();
    let followers: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for &i in &followers {
        c.kill(i).unwrap();
    }
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(10);
    while c.leader().is_some() {
        assert!(
            Instant::now() < deadline,
            "member {leader} still says it is leader without followers:\n{}",
            c.cluster_status(leader).unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "the lone leader stepped down {:?} after its followers died; _Server row \
         (connected, leader): {:?}",
        killed.elapsed(),
        server_row(&c, leader)
    );
    while server_row(&c, leader) != (false, false) {
        assert!(Instant::now() < deadline, "{:?}", server_row(&c, leader));
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "... and its _Server row said connected: false {:?} after they died",
        killed.elapsed()
    );
    for &i in &followers {
        c.restart(i).unwrap();
    }
    c.wait_connected(3, Duration::from_secs(10)).unwrap();
}

/// A listener on a free loopback port below the ephemeral range (where the harness picks).
fn listener_below_ephemeral(from: u16) -> std::net::TcpListener {
    (from..32_000)
        .find_map(|port| std::net::TcpListener::bind(("127.0.0.1", port)).ok())
        .unwrap()
}

#[test]
fn a_port_another_process_holds_sends_the_start_to_other_ports() {
    // Another process listens on the leader's raft port: its members would join that
    // listener and never the leader, which retries its bind every second for ever.
    let holder = listener_below_ephemeral(29_000);
    let taken = holder.local_addr().unwrap().port();
    let mut ports = vec![taken];
    let mut from = 29_500;
    while ports.len() < 6 {
        let port = listener_below_ephemeral(from).local_addr().unwrap().port();
        ports.push(port);
        from = port + 1;
    }
    let started = Instant::now();
    let c = RaftCluster::start_first_on(Path::new(SCHEMA), 3, Some(ports))
        .unwrap_or_else(|e| panic!("the start did not move to other ports: {e}"));
    let raft = c.raft_remote(0);
    assert_ne!(raft, format!("tcp:127.0.0.1:{taken}"));
    // It gave up on the taken port when the log said so, not after the start's timeout.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let leader = c.wait_leader(T).unwrap();
    let out = c
        .transact((leader + 1) % 3, &insert_revision(7), T)
        .unwrap();
    assert!(out.contains("uuid"), "{out}");
    wait_rows(&c, leader, &[7]);
    drop(holder);
}
