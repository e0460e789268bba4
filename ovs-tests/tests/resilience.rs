//! Restarts without disruption (issue 7, item 3), end to end with the real `svcflow` binary
//! in a sandbox node's namespace, configured only over REST, and real TCP between hosts:
//!
//! - svcflow restarted (SIGTERM, and kill -9) on the same state directory while a client loop
//!   opens new connections to a ClusterIP every 25 ms and one long-lived connection through it
//!   exchanges a line every 100 ms: nothing fails, and the new svcflow adopts the switch's
//!   state by diffing (flow durations and counters run on; a stale svcflow flow and group go,
//!   a foreign flow stays);
//! - ovs-vswitchd killed and restarted: svcflow replays exactly the flows and groups it had,
//!   and the outage (kill to the first connection that works again) is measured;
//! - the OpenFlow connection lost while both processes run (svcflow frozen with SIGSTOP
//!   until ovs-vswitchd's inactivity probe drops it): fail mode stays secure, the flows keep
//!   forwarding, and after SIGCONT svcflow resynchronises with an empty diff;
//! - the OpenFlow connection cut (its packets dropped) while svcflow keeps running and a
//!   service is added over REST: the switch forwards with its old flows, and once the cut
//!   ends svcflow applies just the new service, as a diff.
//!
//! Like `daemon.rs`, it runs `target/<profile>/svcflow`: run `cargo build -p svcflow` first.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ovs_tests::svcflow::fixture::{curl, put_web, web_endpoints_body, web_pods};
use ovs_tests::svcflow::{Daemon, NB, SyncLine, log_time_of_day, time_of_day};
use ovs_tests::{Host, ProbeStream, Process, Sample, Sandbox, wait_for};

const BR: &str = "br-int";
const VIP: &str = "10.96.0.10:80";

/// A flow under svcflow's cookie mark (kind SERVICE) that no model asks for.
const STALE_FLOW: &str =
    "cookie=0x5356020000007777,table=40,priority=5,tcp,nw_dst=10.96.77.77,tp_dst=7777,actions=drop";
const STALE_COOKIE: &str = "cookie=0x5356020000007777";
/// A group no model asks for (svcflow owns every group on its bridge).
const STALE_GROUP: &str = "group_id=4242,type=all";
/// Someone else's flow, in a table svcflow does not use.
const FOREIGN_FLOW: &str = "cookie=0xf00d,table=99,priority=1,actions=drop";
const FOREIGN_COOKIE: &str = "cookie=0xf00d";

/// A node driven by svcflow, with service `web` (10.96.0.10:80) on backends `pa` and `pb`
/// (port 8080) and a client pod `pc`.
struct Cluster {
    // Dropped in this order: the daemon, the servers, then the sandbox.
    daemon: Daemon,
    _servers: Vec<Process>,
    client: Host,
    sb: Sandbox,
}

impl Cluster {
    fn start() -> Cluster {
        let mut sb =
            Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
        let daemon = Daemon::start(&sb, 1, "info").unwrap();
        let ready = wait_for("br-int and svc-gw", Duration::from_secs(30), || {
            sb.vsctl(&["get", "interface", "svc-gw", "ofport"])
                .ok()
                .filter(|p| p.trim().parse::<i64>().is_ok_and(|p| p > 0))
        });
        if let Err(e) = ready {
            panic!("{e}\ndaemon log:\n{}", daemon.log());
        }
        let (pc, servers) = web_pods(&mut sb);
        let up = wait_for("the REST northbound", Duration::from_secs(20), || {
            sb.node(&["curl", "-sf", &format!("{NB}/k8s-node:k8s-nodes-info")])
                .ok()
        });
        if let Err(e) = up {
            panic!("{e}\ndaemon log:\n{}", daemon.log());
        }
        put_web(&|path, body| {
            curl(&sb, "PUT", path, body);
        });
        let works = wait_for("the service to answer", Duration::from_secs(30), || {
            let attempt = pc.connect("tcp", VIP, 1, &["--timeout-ms", "1000"]).ok()?;
            attempt.first()?.as_ref().ok().cloned()
        });
        if let Err(e) = works {
            panic!("{e}\ndaemon log:\n{}", daemon.log());
        }
        assert_eq!(
            sb.vsctl(&["get", "bridge", BR, "fail_mode"])
                .unwrap()
                .trim(),
            "secure"
        );
        Cluster {
            daemon,
            _servers: servers,
            client: pc,
            sb,
        }
    }

    /// Waits until the daemon's log holds more than `seen` sync lines, and returns them all.
    fn wait_for_sync(&self, daemon: &Daemon, seen: usize) -> Vec<SyncLine> {
        let synced = wait_for("svcflow to sync", Duration::from_secs(30), || {
            let syncs = daemon.syncs();
            (syncs.len() > seen).then_some(syncs)
        });
        synced.unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()))
    }
}

/// The log line of the first sync the daemon logged after its switch connected as
/// connection `n`.
fn sync_line_on_connection(daemon: &Daemon, n: u32) -> Option<String> {
    let log = daemon.log();
    let (_, after) = log.split_once(&format!("(connection {n})"))?;
    after
        .lines()
        .find(|l| SyncLine::parse(l).is_some())
        .map(str::to_string)
}

/// The first sync the daemon logged after its switch connected as connection `n`.
fn first_sync_on_connection(daemon: &Daemon, n: u32) -> Option<SyncLine> {
    SyncLine::parse(&sync_line_on_connection(daemon, n)?)
}

/// Waits for [`first_sync_on_connection`].
fn wait_for_sync_on_connection(daemon: &Daemon, n: u32) -> SyncLine {
    let synced = wait_for(
        &format!("svcflow to sync over connection {n}"),
        Duration::from_secs(40),
        || first_sync_on_connection(daemon, n),
    );
    synced.unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", daemon.log()))
}

/// The client loop (a new connection every 25 ms) and the long-lived connection (a line every
/// 100 ms), both through the VIP, both from the client pod.
struct Traffic {
    new_connections: ProbeStream,
    long_lived: ProbeStream,
}

impl Traffic {
    fn start(client: &Host) -> Traffic {
        let new_connections = client
            .probe_loop("tcp", VIP, &["--timeout-ms", "3000", "--gap-ms", "25"])
            .unwrap();
        let long_lived = client
            .probe_hold(VIP, &["--timeout-ms", "3000", "--gap-ms", "100"])
            .unwrap();
        let traffic = Traffic {
            new_connections,
            long_lived,
        };
        traffic.progress(10);
        traffic
    }

    /// Waits until the client loop has made `n` more attempts and the long-lived connection
    /// `n / 4` more exchanges: the traffic really runs through whatever happens meanwhile.
    fn progress(&self, n: usize) {
        let (loops, holds) = (
            self.new_connections.samples().len(),
            self.long_lived.samples().len(),
        );
        self.new_connections
            .wait_for_samples(loops + n, Duration::from_secs(30))
            .unwrap();
        self.long_lived
            .wait_for_samples(holds + n / 4, Duration::from_secs(30))
            .unwrap();
    }

    /// Stops both and checks that not one attempt failed, that the long-lived connection never
    /// broke (and so stayed with one backend), and that each phase `(name, from, to)` saw
    /// traffic of both kinds. Returns a summary for the log.
    fn finish(mut self, phases: &[(&str, Instant, Instant)], daemon_log: &str) -> String {
        assert!(
            self.long_lived.running(),
            "the long-lived connection's probe ended early: {:?}\ndaemon log:\n{daemon_log}",
            self.long_lived.samples().last()
        );
        let loops = self.new_connections.stop().unwrap();
        let holds = self.long_lived.stop().unwrap();
        let failed: Vec<&Sample> = loops.iter().filter(|s| s.outcome.is_err()).collect();
        assert!(
            failed.is_empty(),
            "{} of {} new connections failed: {failed:?}\ndaemon log:\n{daemon_log}",
            failed.len(),
            loops.len()
        );
        let backends: BTreeSet<&str> = loops
            .iter()
            .filter_map(|s| s.outcome.as_deref().ok())
            .collect();
        assert_eq!(
            backends,
            BTreeSet::from(["pa", "pb"]),
            "new connections should reach both backends"
        );
        let broken: Vec<&Sample> = holds.iter().filter(|s| s.outcome.is_err()).collect();
        assert!(
            broken.is_empty(),
            "the long-lived connection broke: {broken:?}\ndaemon log:\n{daemon_log}"
        );
        let held: BTreeSet<&str> = holds
            .iter()
            .filter_map(|s| s.outcome.as_deref().ok())
            .collect();
        assert_eq!(held.len(), 1, "{held:?}");
        for (phase, from, to) in phases {
            let within = |s: &&Sample| s.started() >= *from && s.at <= *to;
            let (l, h) = (
                loops.iter().filter(within).count(),
                holds.iter().filter(within).count(),
            );
            assert!(
                l >= 5 && h >= 2,
                "too little traffic while {phase}: {l} new connections, {h} exchanges"
            );
        }
        let slowest = |samples: &[Sample]| samples.iter().map(|s| s.took).max().unwrap_or_default();
        // A dropped SYN is retransmitted after 1 s, so a slower attempt means a lost packet,
        // even if the connection then worked.
        let slow: Vec<&Sample> = loops
            .iter()
            .chain(&holds)
            .filter(|s| s.took >= Duration::from_secs(1))
            .collect();
        assert!(
            slow.is_empty(),
            "attempts or exchanges took a second or more (a lost packet): {slow:?}\n\
             daemon log:\n{daemon_log}"
        );
        format!(
            "{} new connections, none failed (slowest {:?}); {} exchanges on one long-lived \
             connection to {}, none failed (slowest {:?})",
            loops.len(),
            slowest(&loops),
            holds.len(),
            held.first().unwrap_or(&"?"),
            slowest(&holds)
        )
    }
}

/// Flow statistics: each flow (its text without statistics) with its age in seconds and its
/// packet count, as `ovs-ofctl dump-flows` prints them.
fn flow_stats(sb: &Sandbox) -> (BTreeMap<String, (f64, u64)>, Instant) {
    let flows = sb.flow_stats(BR).unwrap();
    (flows, Instant::now())
}

/// Group ages in seconds, by group id (`ovs-ofctl dump-group-stats`).
fn group_ages(sb: &Sandbox) -> BTreeMap<u32, f64> {
    let text = sb.ofctl("dump-group-stats", BR, &[]).unwrap();
    text.lines()
        .filter_map(|line| {
            let mut id = None;
            let mut age = None;
            for field in line.trim().split(',') {
                if let Some(v) = field.strip_prefix("group_id=") {
                    id = v.parse::<u32>().ok();
                } else if let Some(v) = field.strip_prefix("duration=") {
                    age = v.trim_end_matches('s').parse::<f64>().ok();
                }
            }
            Some((id?, age?))
        })
        .collect()
}

/// Checks that every flow of `before` is still on the switch and was never re-created: its age
/// grew by the time between the two dumps and its packet counter did not go back. A flush and
/// reinstall resets both.
fn assert_not_reinstalled(
    (before, before_at): &(BTreeMap<String, (f64, u64)>, Instant),
    (after, after_at): &(BTreeMap<String, (f64, u64)>, Instant),
    log: &str,
) {
    let elapsed = after_at.duration_since(*before_at).as_secs_f64();
    for (flow, (age, packets)) in before {
        let Some((age_after, packets_after)) = after.get(flow) else {
            panic!("flow `{flow}` is gone\ndaemon log:\n{log}");
        };
        // Ages have millisecond resolution; the dumps' own latency is well under 0.5 s.
        assert!(
            age_after + 0.5 >= age + elapsed,
            "flow `{flow}` was re-created: {age} s old, then {age_after} s old {elapsed:.3} s \
             later\ndaemon log:\n{log}"
        );
        assert!(
            packets_after >= packets,
            "flow `{flow}`'s counter went back from {packets} to {packets_after}\n\
             daemon log:\n{log}"
        );
    }
}

/// The service's flows (to its group) counted traffic, so the counter check means something.
fn assert_service_counts(flows: &BTreeMap<String, (f64, u64)>) {
    let service: Vec<_> = flows
        .iter()
        .filter(|(f, _)| f.contains("nw_dst=10.96.0.10,tp_dst=80 actions=group:"))
        .collect();
    assert!(
        !service.is_empty() && service.iter().all(|(_, (_, packets))| *packets > 0),
        "the service flow should have counted packets: {service:?}"
    );
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

fn sorted_flows(sb: &Sandbox) -> Vec<String> {
    sorted_lines(&sb.dump_flows(BR).unwrap())
}

fn sorted_groups(sb: &Sandbox) -> Vec<String> {
    // Without the reply header, which carries an xid.
    sorted_lines(&sb.dump_groups(BR).unwrap())
        .into_iter()
        .filter(|l| l.trim_start().starts_with("group_id="))
        .collect()
}

#[derive(Debug, Clone, Copy)]
enum Stop {
    Term,
    Kill,
}

/// svcflow stops (cleanly or not) and starts again on the same state directory while traffic
/// runs through the service.
fn restart_without_disruption(stop: Stop) {
    let mut c = Cluster::start();
    let traffic = Traffic::start(&c.client);

    // Leftovers for the restarted svcflow to judge: a stale flow under its mark and a stale
    // group must go; a foreign flow must stay.
    let groups = c.sb.dump_groups(BR).unwrap();
    assert!(!groups.contains("group_id=4242,"), "{groups}");
    c.sb.add_flows(BR, &[STALE_FLOW, FOREIGN_FLOW]).unwrap();
    c.sb.add_groups(BR, &[STALE_GROUP]).unwrap();
    traffic.progress(20);
    let before = flow_stats(&c.sb);
    assert_service_counts(&before.0);
    let group_ages_before = (group_ages(&c.sb), Instant::now());
    assert!(group_ages_before.0.contains_key(&4242));

    let stopped = Instant::now();
    match stop {
        Stop::Term => {
            let status = c.daemon.terminate().unwrap();
            assert!(status.success(), "{status}\n{}", c.daemon.log());
        }
        Stop::Kill => c.daemon.kill(),
    }
    // svcflow is gone; the switch keeps its flows (fail mode secure) and the traffic runs.
    traffic.progress(40);
    let (down, _) = flow_stats(&c.sb);
    assert_eq!(
        down.keys().collect::<Vec<_>>(),
        before.0.keys().collect::<Vec<_>>(),
        "the flows changed while svcflow was down"
    );
    let restarted = Instant::now();
    let daemon = Daemon::start(&c.sb, 2, "info").unwrap();
    let syncs = c.wait_for_sync(&daemon, 0);
    let synced = Instant::now();
    traffic.progress(40);
    let after = flow_stats(&c.sb);
    let group_ages_after = (group_ages(&c.sb), Instant::now());
    let summary = traffic.finish(
        &[
            ("svcflow was down", stopped, restarted),
            ("svcflow ran again", synced, Instant::now()),
        ],
        &daemon.log(),
    );
    eprintln!(
        "{stop:?}: svcflow down for {:?}, synced {:?} after its start; {summary}",
        restarted - stopped,
        synced - restarted
    );

    // The first sync of the new svcflow read the switch and changed only what it no longer
    // wants: the stale flow and the stale group. Nothing was added or rewritten.
    let log = daemon.log();
    let first = syncs[0];
    assert_eq!(
        (
            first.added,
            first.modified,
            first.deleted,
            first.groups_changed
        ),
        (0, 0, 1, 1),
        "the restarted svcflow should delete just the stale flow and group: {first:?}\n{log}"
    );
    let syncs = daemon.syncs();
    assert!(
        syncs.iter().all(|s| s.added == 0 && s.modified == 0),
        "{syncs:?}\n{log}"
    );
    assert!(
        !after.0.keys().any(|f| f.contains(STALE_COOKIE)),
        "the stale svcflow flow survived"
    );
    assert!(
        after.0.keys().any(|f| f.contains(FOREIGN_COOKIE)),
        "the foreign flow was removed"
    );
    assert!(
        !group_ages_after.0.contains_key(&4242),
        "the stale group survived"
    );
    let mut kept = before.clone();
    kept.0.retain(|f, _| !f.contains(STALE_COOKIE));
    assert_not_reinstalled(&kept, &after, &log);
    let elapsed = group_ages_after
        .1
        .duration_since(group_ages_before.1)
        .as_secs_f64();
    for (id, age) in group_ages_before.0.iter().filter(|(id, _)| **id != 4242) {
        let age_after = group_ages_after.0.get(id).copied().unwrap_or(0.0);
        assert!(
            age_after + 0.5 >= age + elapsed,
            "group {id} was re-created: {age} s old, then {age_after} s\n{log}"
        );
    }
    assert_eq!(
        c.sb.vsctl(&["get", "bridge", BR, "fail_mode"])
            .unwrap()
            .trim(),
        "secure"
    );
    drop(daemon);
}

#[test]
fn svcflow_restarted_with_sigterm_adopts_the_switch_without_dropping_a_connection() {
    restart_without_disruption(Stop::Term);
}

#[test]
fn svcflow_killed_and_restarted_adopts_the_switch_without_dropping_a_connection() {
    restart_without_disruption(Stop::Kill);
}

/// ovs-vswitchd dies and comes back without flows or groups; svcflow replays exactly what was
/// there. The outage is measured from the kill to the first new connection that works again.
#[test]
fn after_an_ovs_vswitchd_restart_svcflow_replays_the_same_flows_and_groups() {
    let mut c = Cluster::start();
    let flows = sorted_flows(&c.sb);
    let groups = sorted_groups(&c.sb);
    assert!(
        flows.len() > 5 && !groups.is_empty(),
        "{flows:?} {groups:?}"
    );

    // Short attempts, one after another, so the first working one is seen within ~0.2 s.
    let mut probe = c
        .client
        .probe_loop("tcp", VIP, &["--timeout-ms", "200", "--gap-ms", "10"])
        .unwrap();
    wait_for("the probe loop to work", Duration::from_secs(10), || {
        probe
            .samples()
            .iter()
            .any(|s| s.outcome.is_ok())
            .then_some(())
    })
    .unwrap();

    let killed_at = time_of_day();
    let killed = Instant::now();
    c.sb.restart_vswitchd().unwrap();
    let vswitchd_up = Instant::now();
    let back = wait_for(
        "a connection through the service after the restart",
        Duration::from_secs(30),
        || {
            probe
                .samples()
                .into_iter()
                .find(|s| s.started() >= killed && s.outcome.is_ok())
        },
    );
    let back = back.unwrap_or_else(|e| panic!("{e}\ndaemon log:\n{}", c.daemon.log()));
    let replay = wait_for_sync_on_connection(&c.daemon, 2);
    // When svcflow logged that sync, from its log's timestamp (across midnight, too).
    let flows_back = sync_line_on_connection(&c.daemon, 2)
        .and_then(|line| log_time_of_day(&line))
        .map(|at| Duration::from_secs_f64((at - killed_at).rem_euclid(86_400.0)));
    let samples = probe.stop().unwrap();
    let failed = samples
        .iter()
        .filter(|s| s.started() >= killed && s.at <= back.at && s.outcome.is_err())
        .count();
    let outage = back.at - killed;
    eprintln!(
        "ovs-vswitchd restart: switch up again after {:?}; flows and groups back after {:?} \
         (svcflow's sync report); first new connection through the service {:?} after the kill \
         ({failed} attempts of up to 200 ms failed meanwhile)",
        vswitchd_up - killed,
        flows_back.unwrap_or_default(),
        outage
    );
    assert!(
        outage < Duration::from_secs(15),
        "the service was out for {outage:?}\n{}",
        c.daemon.log()
    );
    let log = c.daemon.log();
    // The new connection's agent read an empty switch and replayed everything.
    assert!(
        replay.added == replay.flows
            && replay.modified == 0
            && replay.deleted == 0
            && replay.groups_changed == replay.groups,
        "{replay:?}\n{log}"
    );
    // Exactly what was there before: nothing missing, nothing stale.
    assert_eq!(sorted_flows(&c.sb), flows, "{log}");
    assert_eq!(sorted_groups(&c.sb), groups, "{log}");
    // And traffic works, spread over both backends.
    let counts = ovs_tests::tally(&c.client.connect("tcp", VIP, 20, &[]).unwrap());
    assert!(
        counts.len() == 2 && counts.contains_key("pa") && counts.contains_key("pb"),
        "{counts:?}"
    );
}

/// The OpenFlow connection is lost while both ends keep running: svcflow is frozen (SIGSTOP)
/// until ovs-vswitchd's inactivity probe gives up on it. The switch stays in fail mode secure
/// and keeps forwarding with its flows; after SIGCONT svcflow reconnects, reads the switch and
/// finds nothing to change.
#[test]
fn a_lost_controller_connection_keeps_forwarding_and_resyncs_with_a_diff() {
    let c = Cluster::start();
    let traffic = Traffic::start(&c.client);
    traffic.progress(20);
    let before = flow_stats(&c.sb);
    assert_service_counts(&before.0);
    let flows = sorted_flows(&c.sb);
    let groups = sorted_groups(&c.sb);
    let is_connected = || {
        c.sb.vsctl(&["--columns=is_connected", "--bare", "list", "controller"])
            .unwrap()
            .trim()
            .to_string()
    };
    // ovs-vswitchd writes the controller's status to its database a little later.
    wait_for(
        "the switch to report its controller",
        Duration::from_secs(20),
        || (is_connected() == "true").then_some(()),
    )
    .unwrap();
    let pid = c.daemon.pid().unwrap();
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim(),
        "svcflow"
    );

    let frozen = Instant::now();
    c.daemon.signal("STOP").unwrap();
    // ovs-vswitchd probes after 5 s of silence and disconnects 5 s later.
    let vswitchd_log = c.sb.dir().join("log/ovs-vswitchd.log");
    let dropped = wait_for(
        "ovs-vswitchd to drop the silent controller",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&vswitchd_log).unwrap_or_default();
            log.lines()
                .find(|l| l.contains("no response to inactivity probe"))
                .map(str::to_string)
        },
    );
    let dropped_line = match dropped {
        Ok(line) => line,
        Err(e) => {
            let _ = c.daemon.signal("CONT");
            panic!("{e}\n{}", c.sb.log_tail("log/ovs-vswitchd.log", 20));
        }
    };
    let disconnected = Instant::now();
    // Disconnected, and still secure: flows and groups in place, traffic flowing.
    let reported = wait_for(
        "the switch to report no controller",
        Duration::from_secs(20),
        || (is_connected() == "false").then_some(()),
    );
    traffic.progress(40);
    let outage_checks = (
        c.sb.vsctl(&["get", "bridge", BR, "fail_mode"])
            .unwrap()
            .trim()
            .to_string(),
        sorted_flows(&c.sb),
        sorted_groups(&c.sb),
        reported,
    );
    let resumed = Instant::now();
    c.daemon.signal("CONT").unwrap();
    assert_eq!(outage_checks.0, "secure");
    assert_eq!(
        outage_checks.1, flows,
        "the flows changed without a controller"
    );
    assert_eq!(outage_checks.2, groups);
    outage_checks.3.unwrap();
    eprintln!(
        "controller connection: dropped {:?} after SIGSTOP ({dropped_line}); SIGCONT {:?} \
         after the drop",
        disconnected - frozen,
        resumed - disconnected
    );

    let resync = wait_for_sync_on_connection(&c.daemon, 2);
    let synced = Instant::now();
    traffic.progress(20);
    let after = flow_stats(&c.sb);
    let log = c.daemon.log();
    let summary = traffic.finish(
        &[
            ("svcflow was frozen", frozen, disconnected),
            ("the switch had no controller", disconnected, resumed),
            ("svcflow resynced", resumed, Instant::now()),
        ],
        &log,
    );
    eprintln!(
        "controller connection: resynced {:?} after SIGCONT; {summary}",
        synced - resumed
    );
    assert_eq!(
        (
            resync.added,
            resync.modified,
            resync.deleted,
            resync.groups_changed
        ),
        (0, 0, 0, 0),
        "the model did not change, so the resync should change nothing: {resync:?}\n{log}"
    );
    assert_not_reinstalled(&before, &after, &log);
    assert_eq!(sorted_flows(&c.sb), flows);
    assert_eq!(sorted_groups(&c.sb), groups);
    wait_for(
        "the switch to be connected",
        Duration::from_secs(20),
        || (is_connected() == "true").then_some(()),
    )
    .unwrap();
}

/// Drops (or stops dropping) every packet to or from the OpenFlow port on the node's loopback,
/// where svcflow and ovs-vswitchd talk: the connection dies while both keep running, and the
/// REST northbound (another port) still answers.
fn cut_openflow(sb: &Sandbox, cut: bool) {
    sb.cut_tcp_port(6653, cut).unwrap();
}

/// The OpenFlow connection is cut (its packets dropped) while svcflow and ovs-vswitchd both
/// keep running, and a service is added over REST meanwhile. The switch keeps forwarding with
/// its flows; svcflow cannot apply the change until its switch reconnects, and then applies
/// just that change as a diff, leaving the flows it had alone.
#[test]
fn a_rest_change_made_while_the_controller_connection_is_cut_is_applied_as_a_diff() {
    let c = Cluster::start();
    let traffic = Traffic::start(&c.client);
    traffic.progress(20);
    let before = flow_stats(&c.sb);
    let flows = sorted_flows(&c.sb);
    let groups = sorted_groups(&c.sb);
    let syncs = c.daemon.syncs().len();

    let cut = Instant::now();
    cut_openflow(&c.sb, true);
    curl(
        &c.sb,
        "PUT",
        "service:service-information/services/svc-new",
        r#"{"service:services":[{"service:uid":"svc-new","service:name":"new",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.20",
        "service:service-ports":[{"service:name":"http","service:port":80,
        "service:target-port":"8080"}]}]}"#,
    );
    curl(
        &c.sb,
        "PUT",
        "service:endpoints-info/endpoints/ep-new",
        r#"{"service:endpoints":[{"service:uid":"ep-new","service:name":"new",
        "service:network-NS":"default","service:endpoint-addresses":[
        {"service:ip-address":"10.244.0.11","service:node-name":"n1"}],
        "service:endpoint-ports":[{"service:name":"http","service:port":8080}]}]}"#,
    );
    let vswitchd_log = c.sb.dir().join("log/ovs-vswitchd.log");
    let dropped = wait_for(
        "ovs-vswitchd to drop the silent controller",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&vswitchd_log).unwrap_or_default();
            log.lines()
                .find(|l| l.contains("no response to inactivity probe"))
                .map(str::to_string)
        },
    );
    let dropped = dropped.unwrap_or_else(|e| {
        cut_openflow(&c.sb, false);
        panic!("{e}\n{}", c.daemon.log())
    });
    let disconnected = Instant::now();
    traffic.progress(40);
    let during = (sorted_flows(&c.sb), sorted_groups(&c.sb));
    let restored = Instant::now();
    cut_openflow(&c.sb, false);
    assert_eq!(
        during.0, flows,
        "the flows changed while the connection was cut"
    );
    assert_eq!(during.1, groups);

    // svcflow reconnects and syncs the new revision.
    let resync = wait_for_sync_on_connection(&c.daemon, 2);
    let synced = Instant::now();
    traffic.progress(20);
    let after = flow_stats(&c.sb);
    let log = c.daemon.log();
    let summary = traffic.finish(
        &[
            ("the connection was cut", cut, disconnected),
            ("the switch had no controller", disconnected, restored),
            ("svcflow resynced", restored, Instant::now()),
        ],
        &log,
    );
    eprintln!(
        "cut controller connection: dropped by ovs-vswitchd {:?} after the cut ({dropped}); \
         resynced {:?} after the cut ended: {resync:?}; {summary}",
        disconnected - cut,
        synced - restored
    );
    // Just what the new service adds, its flows and its group: nothing modified, deleted or
    // reinstalled.
    let last = c.daemon.syncs()[syncs - 1];
    assert_eq!(
        (
            resync.added,
            resync.modified,
            resync.deleted,
            resync.groups_changed
        ),
        (resync.flows - last.flows, 0, 0, resync.groups - last.groups),
        "the resync should add just the new service ({last:?} before): {resync:?}\n{log}"
    );
    assert!(resync.added > 0, "{resync:?}");
    assert_not_reinstalled(&before, &after, &log);
    let counts = ovs_tests::tally(&c.client.connect("tcp", "10.96.0.20:80", 5, &[]).unwrap());
    assert_eq!(counts.get("pa"), Some(&5), "{counts:?}");
}

/// The endpoint addresses in service web's group, as `ovs-ofctl dump-groups` shows them
/// (`set_field:0xaf4000b->reg3` is 10.244.0.11).
fn web_group_endpoints(sb: &Sandbox) -> BTreeSet<String> {
    let groups = sb.dump_groups(BR).unwrap();
    groups
        .lines()
        .filter(|l| l.contains("type=select"))
        .flat_map(|l| l.split("set_field:").skip(1))
        // The text after `set_field:` up to the action's end, when it loads reg3.
        .filter_map(|a| a.split(',').next()?.strip_suffix("->reg3"))
        .filter_map(|hex| u32::from_str_radix(hex.trim_start_matches("0x"), 16).ok())
        .map(|ip| std::net::Ipv4Addr::from(ip).to_string())
        .collect()
}

#[test]
fn a_burst_of_1000_endpoint_changes_coalesces_into_a_few_bundles_and_converges() {
    let cluster = Cluster::start();
    let sb = &cluster.sb;
    let before = cluster.daemon.syncs().len();
    // 1,000 PUTs of web's endpoints, back to back over one keep-alive connection (one curl,
    // its requests in a config file): the sets alternate, and the last is 10.244.0.11 alone.
    let sets: [&[&str]; 3] = [
        &["10.244.0.11", "10.244.0.12"],
        &["10.244.0.12"],
        &["10.244.0.11"],
    ];
    let mut config = String::new();
    for i in 0..1000 {
        let body = web_endpoints_body(if i == 999 { sets[2] } else { sets[i % 2] });
        if i > 0 {
            config.push_str("next\n");
        }
        config.push_str(&format!(
            "url = \"{NB}/service:endpoints-info/endpoints/ep-web\"\nrequest = \"PUT\"\n\
             header = \"Content-Type: application/json\"\nfail\nsilent\nshow-error\n\
             output = \"/dev/null\"\ndata = \"{}\"\n",
            body.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    let file = sb.dir().join("burst.curl");
    std::fs::write(&file, config).unwrap();
    let started = Instant::now();
    sb.node(&["curl", "-K", &file.to_string_lossy()]).unwrap();
    let sent = started.elapsed();
    let want: BTreeSet<String> = ["10.244.0.11".to_string()].into();
    let converged = wait_for(
        "the switch to hold the last endpoint set",
        Duration::from_secs(30),
        || (web_group_endpoints(sb) == want).then_some(()),
    );
    if let Err(e) = converged {
        panic!(
            "{e}: {:?}\ndaemon log:\n{}",
            web_group_endpoints(sb),
            cluster.daemon.log()
        );
    }
    let took = started.elapsed();
    // No flapping: nothing moves once the last model is in.
    std::thread::sleep(Duration::from_secs(1));
    // Each node's task sends a switch that was idle up to three bundles at once, then one
    // per interval with every change that came meanwhile (svcflow/src/daemon/pace.rs).
    const MIN_INTERVAL_MS: u128 = 50;
    const BURST: u128 = 3;
    let syncs = cluster.daemon.syncs();
    let bundles = syncs[before..]
        .iter()
        .filter(|s| s.added + s.modified + s.deleted + s.groups_changed > 0)
        .count();
    eprintln!(
        "1,000 endpoint changes sent in {sent:?}, converged {took:?} after the first, in {} \
         syncs, {bundles} of which sent a bundle",
        syncs.len() - before
    );
    assert_eq!(
        web_group_endpoints(sb),
        want,
        "the state moved after converging"
    );
    let most = took.as_millis() / MIN_INTERVAL_MS + 2 + (BURST - 1);
    assert!(
        bundles as u128 <= most,
        "{bundles} bundles for 1,000 changes in {took:?}, more than one per \
         {MIN_INTERVAL_MS} ms: bursts are not coalesced\n{}",
        cluster.daemon.log()
    );
    let counts = ovs_tests::tally(&cluster.client.connect("tcp", VIP, 10, &[]).unwrap());
    assert_eq!(counts, BTreeMap::from([("pa".to_string(), 10)]));
}

/// When ovs-vswitchd's attempts to dial a controller failed, in seconds of the day, from its
/// log after the first `skip` bytes (`…Z|…|rconn|WARN|br-int<->TARGET: connection failed`).
fn failed_dials(sb: &Sandbox, skip: usize) -> Vec<f64> {
    let log = std::fs::read_to_string(sb.dir().join("log/ovs-vswitchd.log")).unwrap();
    log.get(skip..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("|rconn|") && l.contains(": connection failed"))
        .filter_map(|l| {
            // 2026-11-29T08:11:39.417Z|…
            let time = l.split_once('T')?.1.split_once('Z')?.0;
            let mut hms = time.split(':');
            let (h, m, s) = (hms.next()?, hms.next()?, hms.next()?);
            Some(
                h.parse::<f64>().ok()? * 3600.0
                    + m.parse::<f64>().ok()? * 60.0
                    + s.parse::<f64>().ok()?,
            )
        })
        .collect()
}

/// A stopped svcflow is redialled every `--switch-max-backoff` seconds: svcflow writes its
/// Controller row's `max_backoff` (1 s by default, where OVS alone doubles its wait up to
/// 8 s), and has ovs-vswitchd reconfigure once the switch reports the connection (only then
/// does the connection take the row's value), so a daemon restarted after a longer stop has
/// its switch back within that long. ovs-vswitchd logs each failed attempt, and the row
/// follows the flag in place, without a reconnect.
#[test]
fn a_stopped_svcflow_is_redialled_every_max_backoff_seconds() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    // Waits until the switch has dialled `daemon`, and ovs-vswitchd has reconfigured since
    // (it hands the connection the row's `max_backoff` only then).
    let dialled = |daemon: &Daemon| {
        let up = wait_for(
            "the switch to dial svcflow",
            Duration::from_secs(30),
            || {
                let log = daemon.log();
                (log.contains("node n1: its switch is connection")
                    && log.contains("node n1: its switch dialled this daemon; ovs-vswitchd asked"))
                .then_some(())
            },
        );
        if let Err(e) = up {
            panic!("{e}\n{}", daemon.log());
        }
        let cfg = |column: &str| sb.vsctl(&["get", "Open_vSwitch", ".", column]).unwrap();
        let caught_up = wait_for(
            "ovs-vswitchd to reconfigure",
            Duration::from_secs(10),
            || (cfg("cur_cfg") == cfg("next_cfg")).then_some(()),
        );
        if let Err(e) = caught_up {
            panic!("{e}\n{}", daemon.log());
        }
    };
    let next_cfg = || {
        sb.vsctl(&["get", "Open_vSwitch", ".", "next_cfg"])
            .unwrap()
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    let before = next_cfg();
    let mut daemon = Daemon::start(&sb, 1, "info").unwrap();
    dialled(&daemon);
    // svcflow's own request: nothing else here raises next_cfg (read-only ovs-vsctl calls
    // do not).
    assert!(next_cfg() > before, "no reconfiguration was asked for");
    let backoff = |sb: &Sandbox| {
        sb.vsctl(&["get", "controller", BR, "max_backoff"])
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(backoff(&sb), "1000");
    let skip = std::fs::read_to_string(sb.dir().join("log/ovs-vswitchd.log"))
        .unwrap()
        .len();
    daemon.kill();
    // Long enough for OVS's own backoff to have waited 1, 2 and 4 seconds: two failed
    // attempts in 6 s, against five or so a second apart. ovs-vswitchd counts its wait in
    // whole seconds of its busy main loop, so one gap may stretch toward 2 s on a loaded
    // machine (1.5 s was seen in CI); none reaches the doubled waits.
    std::thread::sleep(Duration::from_secs(6));
    let dials = failed_dials(&sb, skip);
    let gaps: Vec<f64> = dials.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        dials.len() >= 4 && gaps.iter().all(|g| *g < 2.5),
        "ovs-vswitchd should have dialled about every second: {dials:?}"
    );
    // Restarted with another bound: the row follows, and the switch stays connected.
    let daemon = Daemon::start_with(&sb, 2, "info", &["--switch-max-backoff", "3"]).unwrap();
    dialled(&daemon);
    let moved = wait_for("max_backoff 3000", Duration::from_secs(10), || {
        (backoff(&sb) == "3000").then_some(())
    });
    if let Err(e) = moved {
        panic!("{e}: {}\n{}", backoff(&sb), daemon.log());
    }
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        daemon.log().matches("its switch is connection").count(),
        1,
        "one connection, not dropped by the change:\n{}",
        daemon.log()
    );
}
