//! Three `svcflow run` replicas drive the three-node lab (issue 14): a real 3-member
//! Raft-clustered `ovsdb-server` holds the REST state and the election's locks, every node's
//! bridge lists the three replicas, and each switch's own Controller `role` column says which
//! one is its master.
//!
//! - every switch settles with one master and two slaves;
//! - `kill -9` of a replica while a pod's client loop runs through a service whose endpoints
//!   are on other nodes: no connection fails, and a REST change made through a survivor right
//!   after the kill is on every switch within 2 s;
//! - a rolling restart of the three replicas, one by one, under the client loop: no
//!   connection fails, and every switch ends with one master;
//! - after the kill and after the restarts, each node's master finds nothing to change in
//!   its dry run against the live switch;
//! - a replica frozen with SIGSTOP: its nodes move to the others, a change made meanwhile
//!   reaches every switch, and once woken it gives each of its nodes up before any write to
//!   it, no flow on any switch installed again and no connection failed;
//! - a replica whose OpenFlow packets are dropped on every node: its nodes move, a change
//!   made through its own REST reaches every switch through the others, and once the cut
//!   ends every switch has one master again.
//!
//! Like `cluster.rs`, it runs `target/<profile>/svcflow`: run `cargo build -p svcflow` first.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use ovs_tests::lab::{Lab, LabOptions, Topology};
use ovs_tests::raft::RaftCluster;
use ovs_tests::svcflow::fixture::service_body;
use ovs_tests::svcflow::{flows_touched, sole_master};
use ovs_tests::{ProbeStream, Sample, wait_for, wait_stable};

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/svcflow.ovsschema");
const TOPOLOGY: &str = include_str!("../lab/three-nodes.toml");
const REPLICAS: usize = 3;
const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Service `web`; its endpoints are on n2 and n3, so n1's pods reach it through the underlay.
const VIP: &str = "10.96.0.10:80";

/// The replica `node`'s switch has as master, once the switch lists every running replica
/// of `running`, exactly one as master and the others as slaves.
fn master_of(lab: &Lab, node: &str, running: &[usize]) -> Option<usize> {
    let targets: Vec<(usize, String)> = running
        .iter()
        .map(|i| (*i, lab.replica_target(*i)))
        .collect();
    sole_master(&lab.node(node).unwrap().controller_roles(), &targets)
}

/// Waits until every node has one master among `running`, unchanged for 5 s (no move
/// pending), and returns each node's master.
fn wait_settled(lab: &Lab, running: &[usize]) -> BTreeMap<String, usize> {
    let each = || -> Option<BTreeMap<String, usize>> {
        NODES
            .iter()
            .map(|n| master_of(lab, n, running).map(|m| (n.to_string(), m)))
            .collect()
    };
    wait_stable(
        "one master on every switch",
        Duration::from_secs(90),
        Duration::from_secs(5),
        each,
    )
    .unwrap_or_else(|e| {
        let roles: Vec<_> = NODES
            .iter()
            .map(|n| (n, lab.node(n).unwrap().controller_roles()))
            .collect();
        panic!(
            "the switches never settled on one master each among {running:?} ({e}): {roles:?}\n{}",
            lab.replica_logs()
        )
    })
}

/// Each node's master, asked for its dry run (`svcflow:plan`, which reads the live switch as
/// a new master does), finds nothing to change: every node is planned by one of `running`
/// (the others name its master) with no change.
fn assert_masters_hold_the_model(lab: &Lab, running: &[usize]) {
    let mut planned = BTreeMap::new();
    for i in running {
        let text = lab
            .replica_get(*i, "/restconf/operational/svcflow:plan")
            .unwrap_or_else(|e| panic!("replica {i}'s plan: {e}\n{}", lab.replica_logs()));
        let plan: serde_json::Value = serde_json::from_str(&text).unwrap();
        for node in plan["svcflow:plan"]["nodes"].as_array().unwrap() {
            let name = node["node"].as_str().unwrap().to_string();
            let changes = node["changes"].as_array().unwrap();
            assert!(changes.is_empty(), "replica {i}, {name}: {changes:?}");
            planned.insert(name, *i);
        }
    }
    assert_eq!(
        planned.len(),
        NODES.len(),
        "every node planned once: {planned:?}"
    );
}

/// Stops the loop and checks that no connection failed.
fn no_failures(mut probes: ProbeStream, lab: &Lab, what: &str) -> usize {
    let samples = probes.stop().unwrap();
    let failed: Vec<&Sample> = samples.iter().filter(|s| s.outcome.is_err()).collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} connections failed: {failed:?}\n{}",
        failed.len(),
        samples.len(),
        lab.replica_logs()
    );
    samples.len()
}

fn lab(cluster: &RaftCluster) -> Lab {
    let topology = Topology::parse(TOPOLOGY).unwrap();
    let options = LabOptions {
        replicas: REPLICAS,
        daemon_args: vec![
            format!("--store=ovsdb:{}", cluster.unix_remote_list()),
            "--hold-down=3".into(),
        ],
        ..LabOptions::default()
    };
    Lab::up(&topology, &options).unwrap_or_else(|e| panic!("lab: {e}"))
}

/// A 3-member Raft cluster and the lab's three replicas on it.
fn start() -> (RaftCluster, Lab) {
    let raft = RaftCluster::start(Path::new(SCHEMA), 3)
        .unwrap_or_else(|e| panic!("cannot start the 3-member ovsdb-server cluster: {e}"));
    raft.wait_leader(Duration::from_secs(30)).unwrap();
    let lab = lab(&raft);
    (raft, lab)
}

/// Waits until the lab's switches settle with every replica running; returns the replicas,
/// each node's master, n1's master, and the other replicas.
fn settled_on_n1(lab: &Lab) -> (Vec<usize>, BTreeMap<String, usize>, usize, Vec<usize>) {
    let all: Vec<usize> = (0..REPLICAS).collect();
    let masters = wait_settled(lab, &all);
    let victim = masters["n1"];
    let survivors = all.iter().copied().filter(|i| *i != victim).collect();
    (all, masters, victim, survivors)
}

/// [`wait_settled`] among `survivors`, calling `undo` (which lets a stopped or cut-off
/// replica go again) before failing.
fn settled_or_undo(lab: &Lab, survivors: &[usize], undo: &dyn Fn()) -> BTreeMap<String, usize> {
    let moved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_settled(lab, survivors)
    }));
    moved.unwrap_or_else(|e| {
        undo();
        std::panic::resume_unwind(e)
    })
}

#[test]
fn three_replicas_share_three_nodes_and_a_killed_or_restarted_replica_fails_no_connection() {
    let (raft, mut lab) = start();
    let all: Vec<usize> = (0..REPLICAS).collect();
    // The replicas set the bridges up at once; one whose transaction lost retries.
    let mut want: Vec<String> = all.iter().map(|i| lab.replica_target(*i)).collect();
    want.sort();
    for node in NODES {
        let sb = lab.node(node).unwrap();
        let listed = wait_for(
            &format!("{node} to list every replica"),
            Duration::from_secs(15),
            || {
                let listed = sb.vsctl(&["get-controller", "br-int"]).ok()?;
                let listed: Vec<String> = listed.lines().map(str::to_string).collect();
                (listed == want).then_some(())
            },
        );
        if let Err(e) = listed {
            panic!(
                "{e}: {:?}\n{}",
                sb.vsctl(&["get-controller", "br-int"]),
                lab.replica_logs()
            );
        }
    }
    let masters = wait_settled(&lab, &all);
    eprintln!("masters: {masters:?}");

    // Kill the master of n1 under a client loop from n1 to a service on n2 and n3.
    let client = lab.pod("n1-a").unwrap();
    let probes = client.connection_loop(VIP).unwrap();
    let victim = masters["n1"];
    let survivor = (victim + 1) % REPLICAS;
    let killed = Instant::now();
    lab.kill_replica(victim);
    lab.replica_rest(
        survivor,
        "PUT",
        "service:service-information/services/svc-after-kill",
        &service_body("svc-after-kill", "10.96.0.77"),
    )
    .unwrap_or_else(|e| {
        panic!(
            "PUT through replica {survivor}: {e}\n{}",
            lab.replica_logs()
        )
    });
    for node in NODES {
        let sb = lab.node(node).unwrap();
        let on = sb.wait_for_flow("br-int", "nw_dst=10.96.0.77", Duration::from_secs(30));
        on.unwrap_or_else(|e| panic!("{e}\n{}", lab.replica_logs()));
        let took = killed.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "{node}: the change after the kill took {took:?}\n{}",
            lab.replica_logs()
        );
        eprintln!("{node}: the change through replica {survivor} {took:?} after the kill");
    }
    let seen = probes.samples().len();
    probes
        .wait_for_samples(seen + 40, Duration::from_secs(30))
        .unwrap();
    let survivors: Vec<usize> = all.iter().copied().filter(|i| *i != victim).collect();
    let after_kill = wait_settled(&lab, &survivors);
    let n = no_failures(probes, &lab, "kill -9 of a master");
    eprintln!("after the kill of replica {victim}: masters {after_kill:?}; {n} connections");
    assert_masters_hold_the_model(&lab, &survivors);

    // The killed replica comes back, then each replica restarts in turn.
    lab.start_replica(victim).unwrap();
    wait_settled(&lab, &all);
    let probes = lab.pod("n1-a").unwrap().connection_loop(VIP).unwrap();
    for i in all.clone() {
        lab.terminate_replica(i)
            .unwrap_or_else(|e| panic!("replica {i}: {e}"));
        lab.start_replica(i).unwrap();
        wait_settled(&lab, &all);
        let seen = probes.samples().len();
        probes
            .wait_for_samples(seen + 20, Duration::from_secs(30))
            .unwrap();
    }
    let n = no_failures(probes, &lab, "a rolling restart");
    eprintln!("rolling restart of {REPLICAS} replicas: {n} connections, none failed");
    assert_masters_hold_the_model(&lab, &all);
    drop(lab);
    drop(raft);
}

/// The master of n1 frozen with SIGSTOP past the switches' inactivity probes: every node it
/// mastered moves to another replica, and a change made meanwhile through a survivor reaches
/// every switch. After SIGCONT the woken replica says, for each of those nodes, that it is no
/// longer its master before it logs any sync of it, no flow on any switch is installed again,
/// and the client loop through the service fails no connection.
#[test]
fn a_frozen_replica_hands_every_node_over_and_wakes_without_a_write() {
    let (raft, lab) = start();
    let (all, masters, victim, survivors) = settled_on_n1(&lab);
    let held: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|n| masters[*n] == victim)
        .collect();
    let probes = lab.pod("n1-a").unwrap().connection_loop(VIP).unwrap();
    let frozen_replica = lab.replica(victim).unwrap();
    frozen_replica.signal("STOP").unwrap();
    let frozen = Instant::now();
    // Settled among the survivors: the frozen one is master of no switch.
    let moved = settled_or_undo(&lab, &survivors, &|| {
        let _ = frozen_replica.signal("CONT");
    });
    let took = frozen.elapsed();
    let survivor = survivors[0];
    lab.replica_rest(
        survivor,
        "PUT",
        "service:service-information/services/svc-while-frozen",
        &service_body("svc-while-frozen", "10.96.0.78"),
    )
    .unwrap_or_else(|e| {
        panic!(
            "PUT through replica {survivor}: {e}\n{}",
            lab.replica_logs()
        )
    });
    for node in NODES {
        let sb = lab.node(node).unwrap();
        let on = sb.wait_for_flow("br-int", "nw_dst=10.96.0.78", Duration::from_secs(30));
        on.unwrap_or_else(|e| panic!("{e}\n{}", lab.replica_logs()));
    }
    let before: BTreeMap<&str, _> = NODES
        .iter()
        .map(|n| (*n, lab.node(n).unwrap().flow_ages("br-int").unwrap()))
        .collect();
    let before_at = Instant::now();
    let slept = frozen_replica.log().len();
    frozen_replica.signal("CONT").unwrap();
    let woke = wait_for(
        "the woken replica to give its nodes up",
        Duration::from_secs(30),
        || {
            let log = frozen_replica.log();
            let after = log.get(slept..)?;
            held.iter()
                .all(|n| after.contains(&format!("node {n}: this replica is no longer its master")))
                .then(|| after.to_string())
        },
    );
    let after_wake = woke.unwrap_or_else(|e| panic!("{e}\n{}", lab.replica_logs()));
    for node in &held {
        let gave_up = format!("node {node}: this replica is no longer its master");
        let synced = format!("node {node}: synced model revision");
        let first = after_wake
            .lines()
            .find(|l| l.contains(&gave_up) || l.contains(&synced))
            .unwrap_or("");
        assert!(
            first.contains(&gave_up),
            "the woken replica synced {node} before giving it up: {first}\n{}",
            lab.replica_logs()
        );
    }
    wait_settled(&lab, &all);
    let elapsed = before_at.elapsed().as_secs_f64();
    for node in NODES {
        let after = lab.node(node).unwrap().flow_ages("br-int").unwrap();
        let touched = flows_touched(&before[node], &after, elapsed);
        assert!(
            touched.is_empty(),
            "{node}: flows changed after the frozen replica woke: {touched:#?}\n{}",
            lab.replica_logs()
        );
    }
    let n = no_failures(probes, &lab, "a frozen master");
    eprintln!(
        "replica {victim} frozen (master of {held:?}): every switch had a master among \
         {survivors:?} {took:?} later ({moved:?}); woken, it gave {held:?} up without a \
         write; {n} connections, none failed"
    );
    drop(lab);
    drop(raft);
}

/// The master of n1 cut off from every switch (its OpenFlow packets dropped on the nodes'
/// management ports) while it runs and reaches the database: every node it mastered moves to
/// another replica, and a change made through the cut-off replica's own REST reaches every
/// switch through the new masters. Once the cut ends, every switch has one master among the
/// three again, and the client loop failed no connection.
#[test]
fn a_replica_cut_off_from_every_switch_loses_its_nodes_to_the_others() {
    let (raft, lab) = start();
    let (all, _, victim, survivors) = settled_on_n1(&lab);
    let probes = lab.pod("n1-a").unwrap().connection_loop(VIP).unwrap();
    lab.cut_replica(victim, true).unwrap();
    let cut = Instant::now();
    let moved = settled_or_undo(&lab, &survivors, &|| {
        let _ = lab.cut_replica(victim, false);
    });
    let took = cut.elapsed();
    lab.replica_rest(
        victim,
        "PUT",
        "service:service-information/services/svc-while-cut",
        &service_body("svc-while-cut", "10.96.0.79"),
    )
    .unwrap_or_else(|e| panic!("PUT through replica {victim}: {e}\n{}", lab.replica_logs()));
    for node in NODES {
        let sb = lab.node(node).unwrap();
        let on = sb.wait_for_flow("br-int", "nw_dst=10.96.0.79", Duration::from_secs(30));
        if let Err(e) = on {
            let _ = lab.cut_replica(victim, false);
            panic!("{e}\n{}", lab.replica_logs());
        }
    }
    lab.cut_replica(victim, false).unwrap();
    let back = wait_settled(&lab, &all);
    let n = no_failures(probes, &lab, "a cut-off master");
    eprintln!(
        "replica {victim} cut off: every switch had a master among {survivors:?} {took:?} \
         later ({moved:?}); its REST change reached every switch; after the cut {back:?}; {n} \
         connections, none failed"
    );
    drop(lab);
    drop(raft);
}
