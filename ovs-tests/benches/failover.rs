//! Failover between replicas (issue 14): how long a node's switch goes without a master when
//! the master is killed, from the `kill -9` to the first barrier from the new master (its first
//! sync after claiming the switch, as its log stamps it).
//!
//! Two optimized `svcflow run` replicas drive one sandbox node with a service on two pods,
//! electing in each of the two ways:
//!
//! - REST mode: `--store ovsdb:` on a real 3-member Raft-clustered `ovsdb-server`, OVSDB
//!   locks;
//! - Kubernetes mode: watching the in-process fake API server, `--election lease` with
//!   Leases of `SVCFLOW_FAILOVER_LEASE` seconds (default 2; the target is under the lease
//!   duration plus 1 s).
//!
//! Both with `--hold-down 2`. Each round kills the current master, waits for the survivor's
//! first sync, restarts the killed replica and lets the node settle. The anchor, in the same
//! run: one daemon and no replica, killed and restarted at once (what a supervisor does),
//! from the kill to its first sync.
//!
//! ```sh
//! cargo build --release -p svcflow
//! cargo bench -p ovs-tests --bench failover
//! ```
//!
//! `SVCFLOW_FAILOVER_KILLS` (default 20) rounds of each.

use std::path::Path;
use std::time::{Duration, Instant};

use ovs_tests::bench::{command_output, env_list, ms, percentiles, release_daemon};
use ovs_tests::raft::RaftCluster;
use ovs_tests::svcflow::fixture::{put_web, web_pods};
use ovs_tests::svcflow::{Daemon, log_time_of_day, rest_on, time_of_day};
use ovs_tests::{Sandbox, wait_for};

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/svcflow.ovsschema");

/// The time from `since` (seconds of the day) to the first sync that follows a line
/// containing `after` at or after `since` in `log`.
fn first_sync_after(log: &str, after: &str, since: f64) -> Option<Duration> {
    let mut claimed = false;
    for line in log.lines() {
        let Some(at) = log_time_of_day(line) else {
            continue;
        };
        let at = if at + 43_200.0 < since {
            at + 86_400.0
        } else {
            at
        };
        if at < since {
            continue;
        }
        if line.contains(after) {
            claimed = true;
        } else if claimed && line.contains("synced model revision") {
            return Some(Duration::from_secs_f64(at - since));
        }
    }
    None
}

/// Whether the last mastership line of `log` says this replica masters the switch.
fn is_master(log: &str) -> bool {
    log.lines()
        .rev()
        .find(|l| l.contains("master of its switch") || l.contains("no longer its master"))
        .is_some_and(|l| l.contains("master of its switch"))
}

struct Node {
    // Dropped in this order.
    _servers: Vec<ovs_tests::Process>,
    client: ovs_tests::Host,
}

/// Once a daemon made `br-int`: the pods of the web service.
fn pods(sb: &mut Sandbox, logs: &dyn Fn() -> String) -> Node {
    let made = wait_for("br-int and svc-gw", Duration::from_secs(30), || {
        sb.vsctl(&["get", "interface", "svc-gw", "ofport"])
            .ok()
            .filter(|p| p.trim().parse::<i64>().is_ok_and(|p| p > 0))
    });
    if let Err(e) = made {
        panic!("{e}\n{}", logs());
    }
    let (client, servers) = web_pods(sb);
    Node {
        _servers: servers,
        client,
    }
}

fn sandbox() -> Sandbox {
    Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"))
}

fn replica(sb: &Sandbox, store: &str, i: usize, run: u32) -> Daemon {
    let args = [
        format!("--openflow-listen=127.0.0.1:{}", 6653 + i),
        format!("--rest-listen=127.0.0.1:{}", 8181 + i),
        format!("--metrics-listen=127.0.0.1:{}", 10249 + 10 * i),
        format!("--healthz-listen=127.0.0.1:{}", 10256 + 10 * i),
        format!("--ovsdb-remote=n1={}", sb.db_remote()),
        format!("--store={store}"),
        "--hold-down=2".into(),
        "--encap=none".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Daemon::spawn(sb, run, Some(sb.node_netns()), &args).expect("a replica")
}

/// Waits until the service answers from the client.
fn wait_serving(client: &ovs_tests::Host, logs: &dyn Fn() -> String) {
    let works = wait_for("the service to answer", Duration::from_secs(60), || {
        let attempt = client
            .connect("tcp", "10.96.0.10:80", 1, &["--timeout-ms", "1000"])
            .ok()?;
        attempt.first()?.as_ref().ok().cloned()
    });
    if let Err(e) = works {
        panic!("{e}\n{}", logs());
    }
}

/// Puts the web service through the REST server on 8181, and waits until it answers.
fn load(sb: &Sandbox, node: &Node, logs: &dyn Fn() -> String) {
    let up = wait_for("the REST northbound", Duration::from_secs(30), || {
        sb.node(&[
            "curl",
            "-sf",
            "http://127.0.0.1:8181/restconf/config/service:service-information",
        ])
        .ok()
    });
    if let Err(e) = up {
        panic!("{e}\n{}", logs());
    }
    put_web(&|path, body| {
        rest_on(sb, 8181, "PUT", path, body).unwrap_or_else(|e| panic!("PUT {path}: {e}"));
    });
    wait_serving(&node.client, logs);
}

fn replicas_round(kills: usize) -> Vec<Duration> {
    let raft = RaftCluster::start(Path::new(SCHEMA), 3)
        .unwrap_or_else(|e| panic!("cannot start the 3-member ovsdb-server cluster: {e}"));
    raft.wait_leader(Duration::from_secs(30)).expect("a leader");
    let store = format!("ovsdb:{}", raft.unix_remote_list());
    let mut sb = sandbox();
    let mut replicas: Vec<Daemon> = (0..2).map(|i| replica(&sb, &store, i, i as u32)).collect();
    let logs = |r: &[Daemon]| -> String { r.iter().map(Daemon::log).collect() };
    let node = pods(&mut sb, &|| logs(&replicas));
    load(&sb, &node, &|| logs(&replicas));
    let out = kill_rounds(kills, &mut replicas, &|i, run| replica(&sb, &store, i, run));
    wait_serving(&node.client, &|| logs(&replicas));
    drop(replicas);
    drop(node);
    drop(sb);
    drop(raft);
    out
}

/// Kills the master of two replicas `kills` times; returns the time from each kill to the
/// survivor's first sync as master. `replicas` are the running two, `start(i, run)` starts
/// replica `i` again.
fn kill_rounds(
    kills: usize,
    replicas: &mut [Daemon],
    start: &dyn Fn(usize, u32) -> Daemon,
) -> Vec<Duration> {
    let logs = |r: &[Daemon]| -> String { r.iter().map(Daemon::log).collect() };
    let mut run = 10u32;
    let mut out = Vec::new();
    for round in 0..kills {
        // Settled: one replica masters the switch, past the other's hold-down.
        std::thread::sleep(Duration::from_secs(4));
        let master = (0..2)
            .find(|i| is_master(&replicas[*i].log()))
            .unwrap_or_else(|| panic!("round {round}: no master\n{}", logs(replicas)));
        let survivor = 1 - master;
        let since = time_of_day();
        replicas[master].kill();
        let took = wait_for("the survivor's first sync", Duration::from_secs(60), || {
            first_sync_after(&replicas[survivor].log(), "master of its switch", since)
        })
        .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", logs(replicas)));
        out.push(took);
        run += 1;
        replicas[master] = start(master, run);
    }
    out
}

/// Kubernetes mode: two replicas electing over the fake API server's Leases.
fn leases_round(kills: usize, lease_seconds: u64) -> Vec<Duration> {
    use ovs_tests::kube::{KubeNode, lease_replica, write_kubeconfig};
    let mut node = KubeNode::start_daemons(|sb, kubeconfig| {
        let path = write_kubeconfig(sb, kubeconfig);
        (0..2)
            .map(|i| lease_replica(sb, i, i as u32, &path, lease_seconds).expect("a replica"))
            .collect()
    });
    let _pods: Vec<_> = [("pa", "10.244.0.11", 11), ("pb", "10.244.0.12", 12)]
        .into_iter()
        .map(|(name, ip, port)| {
            let pod = node.add_pod(name, ip, port);
            let server = pod.serve(name, &["tcp:8080"]).expect("a server");
            (pod, server)
        })
        .collect();
    let client = node.add_pod("pc", "10.244.0.13", 13);
    node.put_web("web", "10.96.0.10");
    let mut replicas = vec![node.daemon, node.others.remove(0)];
    wait_serving(&client, &|| replicas.iter().map(Daemon::log).collect());
    let path = node
        .sb
        .dir()
        .join("kubeconfig")
        .to_string_lossy()
        .to_string();
    let sb = &node.sb;
    let out = kill_rounds(kills, &mut replicas, &|i, run| {
        lease_replica(sb, i, run, &path, lease_seconds).expect("a replica")
    });
    wait_serving(&client, &|| replicas.iter().map(Daemon::log).collect());
    drop(replicas);
    out
}

fn single_round(kills: usize) -> Vec<Duration> {
    let mut sb = sandbox();
    let mut run = 1u32;
    let mut daemon = Daemon::start(&sb, run, "info").expect("the daemon");
    let node = pods(&mut sb, &|| daemon.log());
    load(&sb, &node, &|| daemon.log());
    let mut out = Vec::new();
    for round in 0..kills {
        std::thread::sleep(Duration::from_millis(500));
        let since = time_of_day();
        daemon.kill();
        run += 1;
        daemon = Daemon::start(&sb, run, "info").expect("the daemon");
        let took = wait_for(
            "the restarted daemon's first sync",
            Duration::from_secs(60),
            || first_sync_after(&daemon.log(), "switch connected", since),
        )
        .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", daemon.log()));
        out.push(took);
    }
    drop(daemon);
    drop(node);
    drop(sb);
    out
}

fn main() {
    release_daemon("failover");
    let kills = env_list("SVCFLOW_FAILOVER_KILLS", &[20])[0];
    let lease = env_list("SVCFLOW_FAILOVER_LEASE", &[2])[0] as u64;
    println!(
        "# failover: {} cores, {}; {kills} kills each",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        command_output(&["ovs-vswitchd", "--version"])
            .lines()
            .next()
            .unwrap_or("")
    );
    let started = Instant::now();
    let mut replicated = replicas_round(kills);
    let mut leased = leases_round(kills, lease);
    let mut single = single_round(kills);
    println!();
    println!("| after `kill -9` of | until | kills | p50 | p99 | max |");
    println!("| --- | --- | --- | ---: | ---: | ---: |");
    for (what, until, samples) in [
        (
            &"the master, 2 replicas (OVSDB locks)".to_string(),
            "the new master's first sync",
            &mut replicated,
        ),
        (
            &format!("the master, 2 replicas (Kubernetes Leases of {lease} s)"),
            "the new master's first sync",
            &mut leased,
        ),
        (
            &"the only daemon, restarted at once (anchor)".to_string(),
            "its first sync",
            &mut single,
        ),
    ] {
        let max = samples.iter().max().copied().unwrap_or_default();
        let (p50, p99) = percentiles(samples);
        println!(
            "| {what} | {until} | {} | {:.0} ms | {:.0} ms | {:.0} ms |",
            samples.len(),
            ms(p50),
            ms(p99),
            ms(max)
        );
    }
    println!("\n# {:.0} s in all", started.elapsed().as_secs_f64());
}
