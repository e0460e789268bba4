//! Hostile peers against the real daemon (`svcflow run` on a sandbox node): idle connections,
//! a switch that floods echo requests and reads nothing, a second switch claiming a node's
//! datapath id, a message that does not decode, and file-descriptor exhaustion. Each checks
//! what issue 17 found broken: memory stays bounded, the real switch keeps its node, the
//! session survives, the listener never stops.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use openflow::msg::{Body, Features, Hello, Message};
use ovs_tests::Sandbox;
use ovs_tests::bench::rss_kib;
use ovs_tests::kube::in_netns;
use ovs_tests::svcflow::{Daemon, OPENFLOW};

const BR: &str = "br-int";

/// A connection to the daemon's OpenFlow port from inside the node's namespace.
fn dial(sb: &Sandbox) -> TcpStream {
    let s = in_netns(sb.node_netns(), || TcpStream::connect(OPENFLOW)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn send(s: &mut TcpStream, xid: u32, body: Body) {
    s.write_all(&Message::new(xid, body).encode().unwrap())
        .unwrap();
}

/// Reads one whole OpenFlow message, or `None` when the daemon closed the connection.
fn recv(s: &mut TcpStream) -> Option<Message> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head).ok()?;
    let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
    let mut frame = head.to_vec();
    frame.resize(len.max(8), 0);
    s.read_exact(&mut frame[8..]).ok()?;
    Some(Message::decode(&frame).unwrap())
}

/// A fake switch: HELLO, then FEATURES_REPLY with `dpid` to the daemon's request.
fn fake_switch(sb: &Sandbox, dpid: u64) -> TcpStream {
    let mut s = dial(sb);
    send(
        &mut s,
        1,
        Body::Hello(Hello {
            version: 4,
            bitmap: Some(vec![0b1_0000]),
            other: Vec::new(),
        }),
    );
    loop {
        let m = recv(&mut s).expect("the daemon closed the handshake");
        if let Body::FeaturesRequest = m.body {
            send(
                &mut s,
                m.xid,
                Body::FeaturesReply(Features {
                    datapath_id: dpid,
                    n_buffers: 0,
                    n_tables: 254,
                    auxiliary_id: 0,
                    capabilities: 0,
                    reserved: 0,
                }),
            );
            return s;
        }
    }
}

/// Answers the daemon's requests (echo, barrier, multipart) as an empty switch would, until
/// `until` or the daemon closes; returns whether the daemon closed the connection.
fn serve_until(s: &mut TcpStream, until: Instant) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while Instant::now() < until {
        let mut head = [0u8; 8];
        match s.read_exact(&mut head) {
            Ok(()) => {}
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                continue;
            }
            Err(_) => return true,
        }
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        let mut frame = head.to_vec();
        frame.resize(len.max(8), 0);
        if s.read_exact(&mut frame[8..]).is_err() {
            return true;
        }
        let Ok(m) = Message::decode(&frame) else {
            continue;
        };
        let reply = match m.body {
            Body::EchoRequest(d) => Some(Body::EchoReply(d)),
            Body::BarrierRequest => Some(Body::BarrierReply),
            _ => None,
        };
        if let Some(body) = reply {
            let _ = s.write_all(&Message::new(m.xid, body).encode().unwrap());
        }
    }
    false
}

fn started(sb: &Sandbox) -> Daemon {
    let daemon = Daemon::start(sb, 1, "info").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Node n1 in the model, so that its switch is served.
    let node = r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
        "k8s-node:internal-ip-address":"192.168.50.10","k8s-node:pod-cidr":"10.244.0.0/24"}]}"#;
    while ovs_tests::svcflow::rest(sb, "PUT", "k8s-node:k8s-nodes-info/k8s-nodes/node-1", node)
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "the REST northbound never answered:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    while !daemon.log().contains("node n1: synced model revision") {
        assert!(
            Instant::now() < deadline,
            "the daemon never synced n1:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon
}

fn rss_mib(daemon: &Daemon) -> f64 {
    rss_kib(daemon.pid().unwrap()) as f64 / 1024.0
}

#[test]
fn idle_connections_and_an_echo_flood_cost_bounded_memory() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = started(&sb);
    let before = rss_mib(&daemon);
    // 200 connections that never send a byte (the daemon holds at most 256 handshakes).
    let idle: Vec<TcpStream> = (0..200).map(|_| dial(&sb)).collect();
    std::thread::sleep(Duration::from_secs(1));
    let with_idle = rss_mib(&daemon);
    let per_connection_kib = (with_idle - before) * 1024.0 / 200.0;
    println!(
        "RSS {before:.1} MiB, with 200 idle connections {with_idle:.1} MiB: \
         {per_connection_kib:.1} KiB each"
    );
    assert!(
        per_connection_kib < 64.0,
        "an idle connection costs {per_connection_kib:.1} KiB"
    );
    drop(idle);

    // A switch that floods echo requests and reads nothing.
    let mut flood = fake_switch(&sb, 0x00ba_d0ec_0000_0001);
    flood
        .set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let echo = Message::new(7, Body::EchoRequest(vec![0; 1024]))
        .encode()
        .unwrap()
        .repeat(64);
    let start = Instant::now();
    let mut sent = 0usize;
    while start.elapsed() < Duration::from_secs(5) {
        match flood.write(&echo) {
            Ok(n) => sent += n,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    let flooded = rss_mib(&daemon);
    println!(
        "echo flood: {:.1} MiB sent in 5 s, unread; daemon RSS {flooded:.1} MiB",
        sent as f64 / (1 << 20) as f64
    );
    assert!(
        flooded - before < 64.0,
        "an echo flood grew the daemon from {before:.1} to {flooded:.1} MiB"
    );
    drop(flood);
    // The real switch is still served.
    assert!(sb.dump_flows(BR).unwrap().contains("cookie="));
}

#[test]
fn a_second_switch_with_a_nodes_datapath_id_is_refused_and_the_real_one_stays() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = started(&sb);
    let mut impostor = fake_switch(&sb, netvirt::node_setup::datapath_id("n1"));
    // The impostor answers the probe the daemon makes of the real switch? No: the daemon
    // probes its incumbent, which answers, and refuses the newcomer.
    let closed = serve_until(&mut impostor, Instant::now() + Duration::from_secs(10));
    assert!(
        closed,
        "the impostor was not disconnected:\n{}",
        daemon.log()
    );
    assert!(
        daemon.log().contains("refusing the newcomer"),
        "{}",
        daemon.log()
    );
    // The real switch still gets changes: a node port added over REST reaches it.
    let before = daemon.log().matches("synced model revision").count();
    ovs_tests::svcflow::rest(
        &sb,
        "PUT",
        "service:service-information/services/svc-h",
        r#"{"service:services":[{"service:uid":"svc-h","service:name":"h",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.77",
        "service:service-ports":[{"service:name":"http","service:port":80,
        "service:target-port":"8080"}]}]}"#,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sb.dump_flows(BR).unwrap().contains("nw_dst=10.96.0.77") {
        assert!(
            Instant::now() < deadline,
            "the real switch lost its node:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(daemon.log().matches("synced model revision").count() > before);
}

#[test]
fn a_message_that_does_not_decode_is_answered_and_the_connection_stays() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = started(&sb);
    // A switch no node has: the daemon keeps it idle. It sends a PORT_STATUS 3 bytes long.
    let mut s = fake_switch(&sb, 0x00ba_d0ec_0000_0002);
    let bad = [4u8, 12, 0, 11, 0, 0, 0, 42, 1, 2, 3];
    s.write_all(&bad).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        assert!(Instant::now() < deadline, "no error came back");
        let m = recv(&mut s).expect("the daemon closed the connection");
        if let Body::Error(e) = m.body {
            assert_eq!(m.xid, 42);
            break e;
        }
    };
    assert_eq!((error.err_type, error.code), (1, 6), "OFPBRC_BAD_LEN");
    // Still up: an echo is answered.
    send(&mut s, 43, Body::EchoRequest(b"still".to_vec()));
    loop {
        let m = recv(&mut s).expect("the daemon closed the connection");
        if let Body::EchoReply(d) = m.body {
            assert_eq!((m.xid, d.as_slice()), (43, &b"still"[..]));
            break;
        }
    }
    assert!(
        daemon.log().contains("sent a message that does not decode"),
        "{}",
        daemon.log()
    );
}

#[test]
fn the_listener_survives_running_out_of_file_descriptors() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = started(&sb);
    let pid = daemon.pid().unwrap().to_string();
    // Few descriptors: connections beyond them fail to be accepted (EMFILE). Only the soft
    // limit is lowered, so that it can be raised again.
    let original = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile", "--output=SOFT", "--noheadings"])
        .output()
        .unwrap();
    let original = String::from_utf8_lossy(&original.stdout).trim().to_string();
    assert!(!original.is_empty(), "prlimit could not read the limit");
    let limit = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=64:"])
        .status()
        .unwrap();
    assert!(limit.success(), "prlimit failed");
    let held: Vec<TcpStream> = (0..80).map(|_| dial(&sb)).collect();
    std::thread::sleep(Duration::from_millis(500));
    drop(held);
    let restore = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={original}:")])
        .status()
        .unwrap();
    assert!(restore.success());
    // A new switch completes its handshake: the listener kept going.
    let mut s = fake_switch(&sb, 0x00ba_d0ec_0000_0003);
    send(&mut s, 5, Body::EchoRequest(Vec::new()));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no echo reply");
        let m = recv(&mut s).expect("closed");
        if matches!(m.body, Body::EchoReply(_)) {
            break;
        }
    }
    let log = daemon.log();
    assert!(log.contains("accept failed"), "{log}");
    assert!(!log.contains("listener stopped"), "{log}");
}

/// A second `ovsdb-server` that dials the manager port claiming an existing node's name is
/// refused while the node's own is connected: it is not set up, and the node keeps its setup.
#[test]
fn an_ovsdb_server_claiming_a_connected_node_is_refused() {
    let sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let impostor =
        Sandbox::start().unwrap_or_else(|e| panic!("cannot start the second sandbox: {e}"));
    let (daemon, _, manager) = Daemon::start_manager(&sb, 1).unwrap();
    let set_up = |s: &Sandbox| {
        s.vsctl(&["get", "interface", "svc-gw", "external_ids:svcflow-role"])
            .is_ok_and(|r| r.trim() == "service-gateway")
    };
    sb.vsctl(&["set", "Open_vSwitch", ".", "external_ids:hostname=n1"])
        .unwrap();
    sb.vsctl(&["set-manager", &format!("tcp:127.0.0.1:{manager}")])
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !set_up(&sb) {
        assert!(
            Instant::now() < deadline,
            "n1 never set up:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    impostor
        .vsctl(&["set", "Open_vSwitch", ".", "external_ids:hostname=n1"])
        .unwrap();
    impostor
        .vsctl(&["set-manager", &format!("tcp:127.0.0.1:{manager}")])
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !daemon.log().contains("claims it while the one at") {
        assert!(
            Instant::now() < deadline,
            "the impostor was not refused:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    assert!(!set_up(&impostor), "the impostor was set up as n1");
    impostor.vsctl(&["del-manager"]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(set_up(&sb), "n1 lost its setup");
}

/// A flood of datagrams to a service without endpoints: every one would reach svcflow as a
/// packet-in to be refused, but the refusal flow's meter (meter 1: 1,000 packets a second,
/// a burst of 1,000) drops what exceeds its rate in the switch, and the switch sends svcflow
/// at most its controller rate limit (1,000 a second and a burst of 250), so the refusals are
/// bounded and REST keeps answering. `ovs-ofctl meter-stats` shows the meter's drops.
#[test]
fn a_flood_to_a_service_without_endpoints_is_rate_limited() {
    use ovs_tests::svcflow::fixture::{add_pod, pod_body};
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    let daemon = started(&sb);
    let pod = add_pod(&mut sb, "pa", "10.244.0.11", "0a:58:0a:f4:00:0b", 11);
    ovs_tests::svcflow::rest(
        &sb,
        "PUT",
        "pod:coe/pods/pa",
        &pod_body("pa", pod.ip(), pod.mac()),
    )
    .unwrap();
    ovs_tests::svcflow::rest(
        &sb,
        "PUT",
        "service:service-information/services/svc-empty",
        r#"{"service:services":[{"service:uid":"svc-empty","service:name":"empty",
        "service:network-NS":"default","service:cluster-ip-address":"10.96.0.99",
        "service:service-ports":[{"service:name":"dns","service:port":53,
        "service:protocol":"UDP"}]}]}"#,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !sb.dump_flows(BR).unwrap().contains("nw_dst=10.96.0.99") {
        assert!(Instant::now() < deadline, "no flow:\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // 3 s of datagrams from the pod; a connected UDP socket hears each refusal (ICMP port
    // unreachable) as ECONNREFUSED on a later send.
    let script = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("10.96.0.99", 53))
s.setblocking(False)
sent = refused = 0
end = time.time() + 3
while time.time() < end:
    try:
        s.send(b"x" * 32)
        sent += 1
    except ConnectionRefusedError:
        refused += 1
    except BlockingIOError:
        pass
print(sent, refused)
"#;
    // The daemon's CPU time (user + system, in clock ticks of 1/100 s) across the flood.
    let pid = daemon.pid().unwrap();
    let cpu_ticks = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // Fields after the command's closing parenthesis: utime and stime are the 12th and
        // 13th of them.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let cpu_before = cpu_ticks();
    let before = std::time::Instant::now();
    let flood = std::thread::spawn({
        let pod = pod.clone();
        move || pod.run(&["python3", "-c", script]).unwrap()
    });
    // REST answers during the flood.
    let mut slowest = Duration::ZERO;
    while !flood.is_finished() {
        let t = Instant::now();
        ovs_tests::svcflow::rest(
            &sb,
            "GET",
            "service:service-information/services/svc-empty",
            "",
        )
        .unwrap();
        slowest = slowest.max(t.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = flood.join().unwrap();
    let took = before.elapsed().as_secs_f64();
    let cpu = (cpu_ticks() - cpu_before) as f64 / 100.0 / took;
    let mut counts = out.split_whitespace().map(|n| n.parse::<u64>().unwrap());
    let (sent, refused) = (counts.next().unwrap(), counts.next().unwrap());
    println!(
        "flood: {sent} datagrams in {took:.1} s, {refused} refused; slowest REST read during it \
         {slowest:?}; the daemon used {:.0}% of a core",
        cpu * 100.0
    );
    // The meter and the rate limit leave the daemon a few thousand packet-ins to answer.
    assert!(cpu < 0.5, "the daemon used {:.0}% of a core", cpu * 100.0);
    assert!(
        sent > 10_000,
        "the flood was too slow to test anything: {sent}"
    );
    assert!(refused > 0, "nothing was refused at all");
    // 3 s at 1,000 a second, a burst of 250, and slack for timing.
    assert!(
        refused <= 4_500,
        "{refused} refusals for {sent} datagrams: no rate limit"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "REST took {slowest:?} during the flood"
    );
    // The meter dropped most of the flood before it became packet-ins.
    let stats = sb.ofctl("meter-stats", BR, &[]).unwrap();
    println!("{stats}");
    let field = |name: &str| -> u64 {
        let at = stats
            .find(name)
            .unwrap_or_else(|| panic!("no {name} in:\n{stats}"));
        stats[at + name.len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} in:\n{stats}"))
    };
    assert!(stats.contains("meter:1 "), "{stats}");
    let (metered, dropped) = (field("packet_in_count:"), field("0: packet_count:"));
    assert!(
        metered >= 10_000 && dropped > 0 && dropped + 5_000 >= metered,
        "meter 1 saw {metered} packets and dropped {dropped}:\n{stats}"
    );
}
