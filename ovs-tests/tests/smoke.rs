//! Smoke tests that prove the sandbox harness against a real Open vSwitch.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use ovs_tests::recipe::StaticService;
use ovs_tests::{Host, HostSpec, Sandbox, leftover_namespaces, tally};

const BR: &str = "br-int";

fn sandbox() -> Sandbox {
    Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"))
}

/// A bridge with hosts `a` (10.0.0.1, port 1) and `b` (10.0.0.2, port 2).
fn two_hosts(sb: &mut Sandbox) -> (Host, Host) {
    sb.add_bridge(BR).unwrap();
    let a = sb.add_host(
        BR,
        HostSpec::new("a", "10.0.0.1/24", "02:00:00:00:00:01", 1),
    );
    let b = sb.add_host(
        BR,
        HostSpec::new("b", "10.0.0.2/24", "02:00:00:00:00:02", 2),
    );
    (a.unwrap(), b.unwrap())
}

fn probe_env() {
    // Integration tests know where Cargo put the probe; the library finds it from here.
    assert!(
        std::path::Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file(),
        "svcflow-probe was not built"
    );
}

#[test]
fn two_hosts_ping_and_connect_through_normal() {
    probe_env();
    let mut sb = sandbox();
    let (a, b) = two_hosts(&mut sb);

    // Fail mode is secure: with no flow at all, nothing passes.
    let silent = a.output(&["ping", "-c", "1", "-W", "1", b.ip()]).unwrap();
    assert!(!silent.status.success(), "ping passed an empty flow table");

    sb.add_flows(BR, &["priority=0,actions=NORMAL"]).unwrap();
    let ping = a.run(&["ping", "-c", "2", "-W", "2", b.ip()]).unwrap();
    assert!(ping.contains("2 received"), "{ping}");
    let pong = b.run(&["ping", "-c", "1", "-W", "2", a.ip()]).unwrap();
    assert!(pong.contains("1 received"), "{pong}");

    let _server = b.serve("backend-b", &["tcp:8080"]).unwrap();
    let attempts = a.connect("tcp", "10.0.0.2:8080", 3, &[]).unwrap();
    assert_eq!(attempts, vec![Ok("backend-b".to_string()); 3]);
}

#[test]
fn select_group_with_ct_nat_spreads_connections_across_backends() {
    probe_env();
    let mut sb = sandbox();
    sb.add_bridge(BR).unwrap();
    let gw_mac = "02:00:00:00:00:fe";
    let client = sb
        .add_host(
            BR,
            HostSpec::new("client", "10.0.0.1/24", "02:00:00:00:00:01", 1)
                .with_gateway("10.0.0.254"),
        )
        .unwrap();
    let b1 = sb
        .add_host(
            BR,
            HostSpec::new("b1", "10.0.0.2/24", "02:00:00:00:00:02", 2),
        )
        .unwrap();
    let b2 = sb
        .add_host(
            BR,
            HostSpec::new("b2", "10.0.0.3/24", "02:00:00:00:00:03", 3),
        )
        .unwrap();
    // The VIP lies off-link; the client reaches it via a gateway that OVS answers for.
    client
        .run(&[
            "ip",
            "neigh",
            "replace",
            "10.0.0.254",
            "lladdr",
            gw_mac,
            "dev",
            "eth0",
        ])
        .unwrap();

    let service = StaticService {
        vip: "10.96.0.10",
        port: 80,
        backends: vec![&b1, &b2],
        target_port: 8080,
    };
    service.install(&sb, BR, &[&client, &b1, &b2]).unwrap();

    let _s1 = b1.serve("b1", &["tcp:8080"]).unwrap();
    let _s2 = b2.serve("b2", &["tcp:8080"]).unwrap();
    let attempts = client.connect("tcp", "10.96.0.10:80", 50, &[]).unwrap();
    let counts = tally(&attempts);
    assert_eq!(attempts.len(), 50);
    assert_eq!(
        counts.get("b1").copied().unwrap_or(0) + counts.get("b2").copied().unwrap_or(0),
        50,
        "{counts:?}"
    );
    assert!(
        counts.get("b1").copied().unwrap_or(0) >= 5,
        "b1 got too few: {counts:?}"
    );
    assert!(
        counts.get("b2").copied().unwrap_or(0) >= 5,
        "b2 got too few: {counts:?}"
    );

    // The datapath really NATed: conntrack holds entries towards both backends in zone 1.
    let ct = sb.dump_conntrack(Some(ovs_tests::recipe::ZONE)).unwrap();
    assert!(
        ct.contains("dst=10.96.0.10") && ct.contains("src=10.0.0.2") && ct.contains("src=10.0.0.3"),
        "{ct}"
    );
}

#[test]
fn a_sandbox_leaves_nothing_behind() {
    probe_env();
    let links_before = root_links();
    let (namespaces, pids, dir) = {
        let mut sb = sandbox();
        sb.add_bridge(BR).unwrap();
        sb.add_host(
            BR,
            HostSpec::new("a", "10.0.0.1/24", "02:00:00:00:00:01", 1),
        )
        .unwrap();
        sb.add_host(
            BR,
            HostSpec::new("b", "10.0.0.2/24", "02:00:00:00:00:02", 2),
        )
        .unwrap();
        sb.add_internal_port(BR, "svc-gw", 100).unwrap();
        let mut namespaces = vec![sb.node_netns().to_string()];
        namespaces.extend(sb.hosts().iter().map(|h| h.netns.clone()));
        let pids = sb.daemon_pids();
        assert_eq!(pids.len(), 2);
        let existing = leftover_namespaces();
        for ns in &namespaces {
            assert!(existing.contains(ns), "{ns} was never created");
        }
        (namespaces, pids, sb.dir().to_path_buf())
    };
    let remaining = leftover_namespaces();
    for ns in &namespaces {
        assert!(
            !remaining.contains(ns),
            "namespace {ns} survived the sandbox"
        );
    }
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "daemon {pid} survived"
        );
    }
    assert!(!dir.exists(), "{} survived", dir.display());
    // Nothing was ever created in the machine's own namespace.
    assert_eq!(root_links(), links_before);
}

fn root_links() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split(": ")
                .nth(1)
                .map(|n| n.split('@').next().unwrap_or(n).to_string())
        })
        .collect();
    names.sort();
    names
}

#[test]
fn a_panicking_test_still_tears_its_sandbox_down() {
    probe_env();
    let made = std::thread::spawn(|| {
        let mut sb = sandbox();
        sb.add_bridge(BR).unwrap();
        let host = sb
            .add_host(
                BR,
                HostSpec::new("a", "10.0.0.1/24", "02:00:00:00:00:01", 1),
            )
            .unwrap();
        let _server = host.serve("a", &["tcp:8080", "udp:8080"]).unwrap();
        // Hand the names out through the panic payload.
        std::panic::panic_any((
            sb.node_netns().to_string(),
            host.netns.clone(),
            sb.daemon_pids(),
        ));
    })
    .join()
    .expect_err("the thread was meant to panic");
    let (node, host, pids) = made
        .downcast::<(String, String, Vec<u32>)>()
        .unwrap()
        .as_ref()
        .clone();
    let remaining = leftover_namespaces();
    assert!(
        !remaining.contains(&node) && !remaining.contains(&host),
        "{remaining:?}"
    );
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "daemon {pid} survived"
        );
    }
}

#[test]
fn vswitchd_restart_loses_flows_but_keeps_ports() {
    probe_env();
    let mut sb = sandbox();
    let (a, b) = two_hosts(&mut sb);
    sb.add_flows(BR, &["priority=0,actions=NORMAL"]).unwrap();
    assert!(
        a.run(&["ping", "-c", "1", "-W", "2", b.ip()])
            .unwrap()
            .contains("1 received")
    );

    sb.restart_vswitchd().unwrap();
    assert_eq!(
        sb.dump_flows(BR)
            .unwrap()
            .lines()
            .filter(|l| l.contains("actions="))
            .count(),
        0
    );
    let ports = sb.ofctl("dump-ports-desc", BR, &[]).unwrap();
    assert!(
        ports.contains(" 1(a)") && ports.contains(" 2(b)"),
        "{ports}"
    );

    sb.add_flows(BR, &["priority=0,actions=NORMAL"]).unwrap();
    assert!(
        a.run(&["ping", "-c", "1", "-W", "2", b.ip()])
            .unwrap()
            .contains("1 received")
    );
}
