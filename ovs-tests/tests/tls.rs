//! TLS with mutual authentication, end to end with real Open vSwitch and certificates from its
//! own `ovs-pki`: a bridge dials `svcflow run` over `ssl:` and gets its pipeline; OVSDB runs
//! over `ssl:` both ways (svcflow dialling a node's `ovsdb-server`, and an `ovsdb-server`
//! pointed at svcflow with `set-manager ssl:`); a peer whose certificate names another node,
//! or that presents none, is refused; REST and metrics answer over HTTPS; and plain TCP beyond
//! loopback needs `--insecure`.
//!
//! It runs `target/<profile>/svcflow` (`cargo build -p svcflow` first, or set `SVCFLOW_BIN`).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use ovs_tests::http::Http;
use ovs_tests::pki::Pki;
use ovs_tests::svcflow::fixture::put_web;
use ovs_tests::svcflow::{Daemon, svcflow_binary};
use ovs_tests::{Sandbox, free_port, wait_for};

const BR: &str = "br-int";

fn wait_log(daemon: &Daemon, what: &str, needle: &str) {
    let found = wait_for(what, Duration::from_secs(40), || {
        daemon.log().contains(needle).then_some(())
    });
    if let Err(e) = found {
        panic!("{e}: no {needle:?} in the daemon log:\n{}", daemon.log());
    }
}

/// `curl` over HTTPS in the node namespace, verifying the daemon's certificate (its name is
/// `svcflow`) against the controller CA.
fn https(sb: &Sandbox, ca: &str, port: u16, method: &str, path: &str, body: &str) -> String {
    let resolve = format!("svcflow:{port}:127.0.0.1");
    let url = format!("https://svcflow:{port}{path}");
    let mut argv = vec![
        "curl",
        "-sS",
        "-f",
        "--cacert",
        ca,
        "--resolve",
        &resolve,
        "-X",
        method,
        &url,
    ];
    if !body.is_empty() {
        argv.extend(["-H", "Content-Type: application/json", "-d", body]);
    }
    sb.node(&argv)
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"))
}

#[test]
fn a_bridge_dials_svcflow_over_tls_and_is_known_by_its_certificate() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let pki = Pki::new(&sb.dir().join("pki-files")).unwrap();
    let n1 = pki.sign("n1", "switch").unwrap();
    let n2 = pki.sign("n2", "switch").unwrap();
    let controller_ca = pki.ca("controller");
    // The node's switch first presents node n2's certificate for n1's datapath.
    sb.vsctl(&["set-ssl", &n2.key, &n2.cert, &controller_ca])
        .unwrap();
    let mut flags = pki.daemon_flags().unwrap();
    flags.extend(["--log-level".into(), "debug".into()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let daemon = Daemon::start_as(&sb, 1, "n1", &flags).unwrap();

    let told = wait_for("br-int to be told ssl:", Duration::from_secs(30), || {
        let target = sb.vsctl(&["get-controller", BR]).ok()?;
        (target.trim() == "ssl:127.0.0.1:6653").then_some(())
    });
    if let Err(e) = told {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    wait_log(
        &daemon,
        "the impostor to be refused",
        "refused: its certificate is node \"n2\"'s",
    );
    assert!(
        !daemon.log().contains("switch connected"),
        "{}",
        daemon.log()
    );

    // Its own certificate: taken, and programmed over the TLS connection.
    sb.vsctl(&["set-ssl", &n1.key, &n1.cert, &controller_ca])
        .unwrap();
    wait_log(
        &daemon,
        "the switch to connect with its own certificate",
        "certificate of node n1",
    );
    put_web(&|path, body| {
        https(
            &sb,
            &controller_ca,
            8181,
            "PUT",
            &format!("/restconf/config/{path}"),
            body,
        );
    });
    let programmed = wait_for(
        "the service's flows over TLS",
        Duration::from_secs(30),
        || {
            let flows = sb.dump_flows(BR).ok()?;
            flows.contains("nw_dst=10.96.0.10").then_some(flows)
        },
    );
    if let Err(e) = programmed {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }

    // REST and metrics answer over HTTPS only.
    let service = https(
        &sb,
        &controller_ca,
        8181,
        "GET",
        "/restconf/config/service:service-information",
        "",
    );
    assert!(service.contains("10.96.0.10"), "{service}");
    // The benches' in-process client too (`SVCFLOW_E2E_TLS`), which checks the name.
    let path = "/restconf/config/service:service-information";
    let reply = Http::new(sb.node_netns(), "127.0.0.1:8181")
        .with_tls(&controller_ca, "svcflow")
        .unwrap()
        .request("GET", path, b"")
        .unwrap();
    let body = String::from_utf8_lossy(&reply.body);
    assert!(reply.status == 200 && body.contains("10.96.0.10"), "{body}");
    let misnamed = Http::new(sb.node_netns(), "127.0.0.1:8181")
        .with_tls(&controller_ca, "n1")
        .unwrap()
        .request("GET", path, b"");
    assert!(
        misnamed.is_err(),
        "a certificate of another name: {misnamed:?}"
    );
    let metrics = https(&sb, &controller_ca, 10249, "GET", "/metrics", "");
    assert!(metrics.contains("kubeproxy_sync_proxy_rules"), "{metrics}");
    assert!(
        sb.node(&[
            "curl",
            "-sS",
            "-f",
            "http://127.0.0.1:8181/restconf/config/service:service-information"
        ])
        .is_err(),
        "plain HTTP must not be served"
    );
    // The CLI reaches it with the CA.
    let out = Command::new("ip")
        .args(["netns", "exec", sb.node_netns()])
        .arg(svcflow_binary().unwrap())
        .args([
            "get",
            "nodes",
            "--rest",
            "https://127.0.0.1:8181",
            "--ca-cert",
        ])
        .arg(&controller_ca)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("n1"),
        "svcflow get nodes over HTTPS: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A TLS client without a certificate, trusting the controller CA: connects to `port` on
/// loopback, sends `hello`, and returns what it read before the connection ended (nothing,
/// if the server refused the handshake).
fn read_without_certificate(ca: &str, port: u16, hello: &[u8]) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_file(ca).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("svcflow").unwrap();
        let Ok(mut tls) = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
        else {
            return Vec::new();
        };
        let _ = tls.write_all(hello).await;
        let mut got = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut got)).await;
        got
    })
}

#[test]
fn ovsdb_runs_over_tls_both_ways_and_refuses_other_nodes_and_anonymous_peers() {
    let dialled = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let dialling = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let pki = Pki::new(&dialled.dir().join("pki-files")).unwrap();
    let n1 = pki.sign("n1", "switch").unwrap();
    let n2 = pki.sign("n2", "switch").unwrap();
    let controller_ca = pki.ca("controller");

    // Node n1's ovsdb-server listens with TLS (pssl:) and n1's certificate.
    dialled
        .vsctl(&["set-ssl", &n1.key, &n1.cert, &controller_ca])
        .unwrap();
    let db_port = free_port();
    let ctl = dialled.dir().join("run/ovsdb-server.ctl");
    let added = Command::new("ovs-appctl")
        .arg("-t")
        .arg(&ctl)
        .arg("ovsdb-server/add-remote")
        .arg(format!("pssl:{db_port}:127.0.0.1"))
        .status()
        .unwrap();
    assert!(added.success());

    // Node n2's ovsdb-server dials svcflow (set-manager ssl:), first claiming to be n1.
    let manager = free_port();
    dialling
        .vsctl(&["set-ssl", &n2.key, &n2.cert, &controller_ca])
        .unwrap();
    dialling
        .vsctl(&["set", "Open_vSwitch", ".", "external_ids:hostname=n1"])
        .unwrap();

    let (openflow, rest) = (free_port(), free_port());
    let mut args = vec![
        format!("--openflow-listen=127.0.0.1:{openflow}"),
        format!("--rest-listen=127.0.0.1:{rest}"),
        format!("--metrics-listen=127.0.0.1:{}", free_port()),
        format!("--healthz-listen=127.0.0.1:{}", free_port()),
        format!("--ovsdb-manager-listen=127.0.0.1:{manager}"),
        format!("--ovsdb-remote=n1=ssl:127.0.0.1:{db_port}"),
        // n1's server under another node's name: its certificate says n1.
        format!("--ovsdb-remote=n9=ssl:127.0.0.1:{db_port}"),
    ];
    args.extend(pki.daemon_flags().unwrap());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::spawn(&dialled, 1, None, &args).unwrap();
    dialling
        .vsctl(&["set-manager", &format!("ssl:127.0.0.1:{manager}")])
        .unwrap();

    // Dialled over ssl: n1 is set up, and its bridge is told to dial ssl:.
    let set_up = |sb: &Sandbox| {
        let role = sb
            .vsctl(&["get", "interface", "svc-gw", "external_ids:svcflow-role"])
            .ok()?;
        (role.trim() == "service-gateway").then_some(())
    };
    if let Err(e) = wait_for("n1 set up over ssl:", Duration::from_secs(30), || {
        set_up(&dialled)
    }) {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    assert_eq!(
        dialled.vsctl(&["get-controller", BR]).unwrap().trim(),
        format!("ssl:127.0.0.1:{openflow}")
    );
    wait_log(
        &daemon,
        "n9's remote to be refused",
        "cannot connect to OVSDB at ssl:",
    );
    assert!(
        daemon.log().contains("the server is not node \"n9\""),
        "{}",
        daemon.log()
    );

    // On the manager port, n2's certificate cannot claim n1.
    wait_log(
        &daemon,
        "the impostor to be refused",
        "claims it, but its certificate is node \"n2\"'s; refusing it",
    );
    assert!(set_up(&dialling).is_none(), "the impostor was set up");
    // Under its own name it is set up.
    dialling
        .vsctl(&["set", "Open_vSwitch", ".", "external_ids:hostname=n2"])
        .unwrap();
    if let Err(e) = wait_for(
        "n2 set up over the manager port",
        Duration::from_secs(40),
        || set_up(&dialling),
    ) {
        panic!("{e}\ndaemon log:\n{}", daemon.log());
    }
    wait_log(
        &daemon,
        "n2 to connect",
        "node n2: its OVSDB server connected",
    );

    // Peers without a certificate get nothing: no OpenFlow HELLO, no OVSDB reply.
    let hello = [0x04, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01];
    let got = read_without_certificate(&controller_ca, openflow, &hello);
    assert!(
        got.is_empty(),
        "OpenFlow answered a peer without a certificate: {got:?}"
    );
    let echo = br#"{"id":1,"method":"echo","params":[]}"#;
    let got = read_without_certificate(&controller_ca, manager, echo);
    assert!(
        got.is_empty(),
        "OVSDB answered a peer without a certificate: {got:?}"
    );
    assert!(
        !daemon.log().contains("switch connected"),
        "{}",
        daemon.log()
    );
}

/// `svcflow ofp dump-flows|dump-groups ssl:…` read a bridge's `pssl:` service listener as
/// `ovs-ofctl --private-key … ssl:…` would, and print what `ovs-ofctl` prints; without the
/// flags, or with a certificate the switch does not trust, they fail and say so.
#[test]
fn svcflow_ofp_reads_a_switch_over_tls() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let pki = Pki::new(&sb.dir().join("pki-files")).unwrap();
    let n1 = pki.sign("n1", "switch").unwrap();
    sb.vsctl(&["set-ssl", &n1.key, &n1.cert, &pki.ca("controller")])
        .unwrap();
    let bridge = "br-t";
    sb.add_bridge(bridge).unwrap();
    let port = free_port();
    sb.set_controller(bridge, &format!("pssl:{port}:127.0.0.1"))
        .unwrap();
    sb.add_groups(
        bridge,
        &["group_id=7,type=select,bucket=weight:100,actions=output:1"],
    )
    .unwrap();
    sb.add_flows(
        bridge,
        &["table=0,priority=10,ip,nw_dst=10.96.0.10,actions=group:7"],
    )
    .unwrap();
    let svcflow = svcflow_binary().unwrap();
    let svcflow = svcflow.to_string_lossy();
    let target = format!("ssl:127.0.0.1:{port}");
    let controller = pki.sign("svcflow", "controller").unwrap();
    let switch_ca = pki.ca("switch");
    let tls = [
        "--ssl-private-key",
        &controller.key,
        "--ssl-certificate",
        &controller.cert,
        "--ssl-ca-cert",
        &switch_ca,
    ];
    let sorted = |text: String, skip: usize| {
        let mut lines: Vec<String> = text.lines().skip(skip).map(String::from).collect();
        lines.sort();
        lines
    };
    // The switch's listener may take a moment to come up.
    let flows = wait_for("the pssl: listener", Duration::from_secs(20), || {
        let mut argv = vec![svcflow.as_ref(), "ofp", "dump-flows", &target];
        argv.extend(tls);
        sb.node(&argv).ok()
    })
    .unwrap();
    assert!(flows.contains("nw_dst=10.96.0.10"), "{flows}");
    assert_eq!(sorted(flows, 0), sorted(sb.dump_flows(bridge).unwrap(), 0));
    let mut argv = vec![svcflow.as_ref(), "ofp", "dump-groups", &target];
    argv.extend(tls);
    let groups = sb.node(&argv).unwrap();
    assert!(groups.contains("group_id=7"), "{groups}");
    // `ovs-ofctl dump-groups` prints its reply's header first.
    assert_eq!(
        sorted(groups, 0),
        sorted(sb.dump_groups(bridge).unwrap(), 1)
    );

    // Without the flags: refused before dialling, by name.
    let err = sb
        .node(&[&svcflow, "ofp", "dump-flows", &target])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("an ssl: target needs --ssl-private-key"),
        "{err}"
    );
    // With only some of them.
    let err = sb
        .node(&[
            &svcflow,
            "ofp",
            "dump-flows",
            &target,
            "--ssl-private-key",
            &controller.key,
        ])
        .unwrap_err()
        .to_string();
    assert!(err.contains("TLS needs all three"), "{err}");
    // A certificate the switch's CA (the controller CA) did not sign: the switch refuses it.
    let argv = [
        svcflow.as_ref(),
        "ofp",
        "dump-flows",
        &target,
        "--ssl-private-key",
        &n1.key,
        "--ssl-certificate",
        &n1.cert,
        "--ssl-ca-cert",
        &switch_ca,
    ];
    assert!(
        sb.node(&argv).is_err(),
        "a switch certificate taken as a controller's"
    );
}

#[test]
fn plain_tcp_beyond_loopback_needs_insecure() {
    let state = std::env::temp_dir().join(format!("svcflow-tls-test-{}", std::process::id()));
    let run = |extra: &[&str]| {
        Command::new(svcflow_binary().unwrap())
            .args(["run", "--openflow-listen", "192.0.2.1:6653", "--state-dir"])
            .arg(&state)
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("plain TCP beyond loopback: OpenFlow listener 192.0.2.1:6653")
            && stderr.contains("--insecure"),
        "{stderr}"
    );
    let allowed = run(&["--insecure", "--check"]);
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    let _ = std::fs::remove_dir_all(&state);
}

/// With TLS, a connection that never sends a byte (no ClientHello) costs the daemon little,
/// as it does in plain TCP (`hostile.rs`): under 64 KiB each, for 200 of them.
#[test]
fn idle_connections_to_the_tls_listener_cost_bounded_memory() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let pki = Pki::new(&sb.dir().join("pki-files")).unwrap();
    let flags = pki.daemon_flags().unwrap();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let daemon = Daemon::start_as(&sb, 1, "n1", &flags).unwrap();
    wait_log(&daemon, "the OpenFlow listener", "OpenFlow listener on");
    let log = daemon.log();
    let listener = log
        .lines()
        .find(|l| l.contains("OpenFlow listener on"))
        .unwrap_or_default();
    assert!(
        listener.contains("TLS") || listener.contains("pssl"),
        "{listener}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let pid = daemon.pid().unwrap();
    let fds = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count()
    };
    let (before, fds_before) = (ovs_tests::bench::rss_kib(pid) as f64, fds());
    let idle: Vec<std::net::TcpStream> = (0..200)
        .map(|_| {
            ovs_tests::kube::in_netns(sb.node_netns(), || {
                std::net::TcpStream::connect(ovs_tests::svcflow::OPENFLOW)
            })
            .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let with_idle = ovs_tests::bench::rss_kib(pid) as f64;
    // The daemon did accept them (each is an open socket of its own, waiting for a
    // ClientHello), so the figure is theirs.
    assert!(
        fds() >= fds_before + 190,
        "{fds_before} -> {} descriptors",
        fds()
    );
    let each = (with_idle - before) / 200.0;
    println!(
        "TLS listener: RSS {:.1} MiB, with 200 idle connections {:.1} MiB: {each:.1} KiB each",
        before / 1024.0,
        with_idle / 1024.0
    );
    assert!(each < 64.0, "an idle TLS connection costs {each:.1} KiB");
    drop(idle);
}
