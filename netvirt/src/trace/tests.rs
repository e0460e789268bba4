#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use super::*;
use crate::scenario::Scenario;

/// A trace from pod p1 on n1 to web's cluster IP.
fn request() -> TraceRequest {
    TraceRequest {
        node: "n1".into(),
        from: "default/p1".into(),
        to: "10.96.0.10:80".into(),
        protocol: Proto::Tcp,
    }
}

fn scenario() -> Scenario {
    Scenario::parse(include_str!(
        "../../tests/scenarios/node-services/input.toml"
    ))
    .unwrap()
}

fn probe(dst: [u8; 4], dport: u16, proto: Proto) -> Probe {
    Probe {
        in_port: 11,
        eth_src: [2, 0, 0, 0, 0, 0x11],
        eth_dst: [0x0a, 0x58, 0x0a, 0xf4, 0, 1],
        src: Ipv4Addr::new(10, 244, 0, 11).into(),
        dst: Ipv4Addr::from(dst).into(),
        proto,
        sport: 40001,
        dport,
        tag: 49,
    }
}

/// The one's complement sum of `bytes` folded to 16 bits (0xffff when a checksum inside
/// them is right).
fn folded(bytes: &[u8], extra: u32) -> u16 {
    let mut sum = extra;
    for i in (0..bytes.len()).step_by(2) {
        let word = (u32::from(bytes[i]) << 8) | bytes.get(i + 1).map_or(0, |b| u32::from(*b));
        sum += word;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[test]
fn the_probe_is_a_tagged_syn_or_datagram_with_right_checksums() {
    for proto in [Proto::Tcp, Proto::Udp] {
        let p = probe([10, 96, 0, 10], 80, proto);
        let f = p.frame();
        let ip = &f[14..34];
        assert_eq!(folded(ip, 0), 0xffff, "IPv4 header checksum");
        assert_eq!(ip[1] >> 2, 49, "DSCP tag");
        let l4 = &f[34..];
        let pseudo = folded(&[10, 244, 0, 11, 10, 96, 0, 10], 0);
        let extra = u32::from(pseudo) + u32::from(proto.number()) + l4.len() as u32;
        assert_eq!(folded(l4, extra), 0xffff, "{proto} checksum");
        let text = openflow::packet_fmt::packet_to_string(&f).unwrap();
        let want = match proto {
            Proto::Tcp => {
                "tcp,vlan_tci=0x0000,dl_src=02:00:00:00:00:11,dl_dst=0a:58:0a:f4:00:01,nw_src=10.244.0.11,nw_dst=10.96.0.10,nw_tos=196,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40001,tp_dst=80,tcp_flags=syn"
            }
            Proto::Udp => {
                "udp,vlan_tci=0x0000,dl_src=02:00:00:00:00:11,dl_dst=0a:58:0a:f4:00:01,nw_src=10.244.0.11,nw_dst=10.96.0.10,nw_tos=196,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40001,tp_dst=80"
            }
        };
        assert!(text.starts_with(want), "{text}");
        assert_eq!(
            Tuple::of(&f),
            Some(Tuple {
                src: p.src,
                dst: p.dst,
                sport: 40001,
                dport: 80
            })
        );
    }
}

fn twins_for(p: Option<Probe>, tunnel: Option<u32>) -> (Vec<Twin>, Vec<String>) {
    twins_in(&scenario(), p, tunnel)
}

fn twins_in(s: &Scenario, p: Option<Probe>, tunnel: Option<u32>) -> (Vec<Twin>, Vec<String>) {
    let onward = tunnel.map(|port| Onward { port, dst: None });
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let scope = Scope {
        id: 7,
        tag: 49,
        proto: p.as_ref().map_or(Proto::Tcp, |p| p.proto),
        family: Family::V4,
        probe: p,
        onward: onward.into_iter().collect(),
        arrivals: tunnel.into_iter().collect(),
    };
    plan(out.state.flows.iter(), &scope).unwrap()
}

fn lines(twins: &[Twin], role: Role) -> Vec<String> {
    twins
        .iter()
        .filter(|t| t.role == role)
        .map(|t| {
            // Cookies are checked on their own: here, what each twin matches and does.
            let entry = FlowEntry::new(0, t.entry.instructions().into_owned());
            DumpFlow(&t.key, &entry).to_string()
        })
        .collect()
}

#[test]
fn the_source_node_watches_its_port_the_service_and_every_exit_the_probe_can_meet() {
    let (twins, unseen) = twins_for(Some(probe([10, 96, 0, 10], 80, Proto::Tcp)), None);
    assert!(unseen.is_empty(), "{unseen:?}");
    assert_eq!(
        lines(&twins, Role::Classifier),
        [
            " priority=101,ip,in_port=11,nw_tos=196 actions=CONTROLLER:65535,set_field:0xc6c832->reg6,goto_table:10"
        ]
    );
    assert_eq!(
        lines(&twins, Role::Service),
        [
            " table=40, priority=101,tcp,nw_dst=10.96.0.10,nw_tos=196,tp_dst=80 actions=CONTROLLER:65535,group:25881117"
        ],
    );
    let refuse = lines(&twins, Role::Refuse);
    // The service CIDR's catch-all for TCP, not UDP's nor SCTP's, nor other services'.
    assert_eq!(refuse.len(), 1, "{refuse:?}");
    assert!(
        refuse[0].contains(
            "table=40, priority=2,tcp,nw_dst=10.96.0.0/12,nw_tos=196 actions=CONTROLLER:65535"
        ),
        "{refuse:?}"
    );
    let drops = lines(&twins, Role::Drop);
    assert!(
        drops.iter().any(|d| d.contains(
            "table=30, priority=201,ct_state=+inv+trk,ip,nw_tos=196 actions=CONTROLLER:65535"
        )),
        "{drops:?}"
    );
    assert!(
        drops
            .iter()
            .any(|d| d.contains(" priority=1,ip,nw_tos=196 actions=CONTROLLER:65535")),
        "{drops:?}"
    );
    assert_eq!(
        lines(&twins, Role::Output),
        [" table=60, priority=1,ip,nw_tos=196 actions=CONTROLLER:65535"]
    );
    // Each twin: its own cookie, one priority above its original, and the tag in its match.
    for (i, t) in twins.iter().enumerate() {
        assert_eq!(t.entry.cookie, twin_cookie(7, i as u16));
        assert!(t.key.matches().check_prereqs().is_ok(), "{}", t.original);
        assert_eq!(t.key.get(Field::IpDscpShifted).map(|f| f.value), Some(49));
    }
}

#[test]
fn a_refused_service_port_is_watched_as_a_refusal() {
    let (twins, _) = twins_for(Some(probe([10, 96, 0, 30], 80, Proto::Tcp)), None);
    let refuse = lines(&twins, Role::Refuse);
    assert!(refuse.iter().any(|r| r.contains("table=40, priority=101,tcp,nw_dst=10.96.0.30,nw_tos=196,tp_dst=80 actions=CONTROLLER:65535")), "{refuse:?}");
    assert!(lines(&twins, Role::Service).is_empty());
    let (udp, _) = twins_for(Some(probe([10, 96, 0, 30], 53, Proto::Udp)), None);
    assert!(
        lines(&udp, Role::Refuse)
            .iter()
            .any(|r| r.contains("udp,nw_dst=10.96.0.30,nw_tos=196,tp_dst=53"))
    );
}

/// A probe of a node's health-check node port ends where svcflow answers it for the node,
/// not where a service refuses.
#[test]
fn a_health_check_probe_is_watched_as_answered_by_svcflow() {
    let s = Scenario::parse(include_str!(
        "../../tests/scenarios/service-semantics/input.toml"
    ))
    .unwrap();
    let (twins, _) = twins_in(&s, Some(probe([198, 18, 0, 10], 32082, Proto::Tcp)), None);
    let answer = lines(&twins, Role::Answer);
    assert!(
        answer
            .iter()
            .any(|l| l.contains("tcp,nw_dst=198.18.0.10,nw_tos=196,tp_dst=32082")),
        "{answer:?}"
    );
    assert!(
        lines(&twins, Role::Refuse)
            .iter()
            .all(|l| !l.contains("32082"))
    );
}

#[test]
fn table_60_reports_and_goes_on_towards_other_nodes_and_they_watch_it() {
    let (twins, _) = twins_for(Some(probe([10, 96, 0, 10], 80, Proto::Tcp)), Some(3));
    let to_tunnel = lines(&twins, Role::Onward);
    assert_eq!(to_tunnel.len(), 1);
    assert!(to_tunnel[0].contains("table=60, priority=2,ip,reg7=0x3,nw_tos=196 actions=CONTROLLER:65535,load:0->NXM_OF_IN_PORT[],output:NXM_NX_REG7[]"), "{to_tunnel:?}");
    assert_eq!(lines(&twins, Role::Output).len(), 1);
    // Another node: no probe enters it; it watches the tunnel's classifier (none in this
    // scenario, which has no tunnel port) and its exits that name no destination.
    let (remote, _) = twins_for(None, Some(3));
    assert!(lines(&remote, Role::Service).is_empty());
    assert!(lines(&remote, Role::Classifier).is_empty());
    assert!(
        lines(&remote, Role::Refuse).is_empty(),
        "{:?}",
        lines(&remote, Role::Refuse)
    );
    assert!(!lines(&remote, Role::Drop).is_empty());
    assert!(remote.iter().all(|t| t.key.get(Field::Ipv4Dst).is_none()));
}

#[test]
fn a_twin_is_not_made_where_another_flow_could_take_the_probe_first() {
    let s = scenario();
    let mut out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    // A flow at priority 101 for the same address: the service's twin would tie with it.
    let key = FlowKey::new(
        table::SERVICE,
        101,
        &Match::new()
            .with(Field::EthType, 0x0800u16)
            .with(Field::IpProto, 6u8)
            .with(Field::Ipv4Dst, u32::from(Ipv4Addr::new(10, 96, 0, 10))),
    );
    out.state.flows.insert(
        key,
        FlowEntry::new(
            cookie::make(cookie::NODE, 0),
            vec![Instruction::GotoTable(45)],
        ),
    );
    let scope = Scope {
        id: 1,
        tag: 49,
        proto: Proto::Tcp,
        family: Family::V4,
        probe: Some(probe([10, 96, 0, 10], 80, Proto::Tcp)),
        onward: Vec::new(),
        arrivals: Vec::new(),
    };
    let (twins, unseen) = plan(out.state.flows.iter(), &scope).unwrap();
    // The new flow is watched, above itself; the service's own flow is not.
    assert_eq!(
        lines(&twins, Role::Service),
        [
            " table=40, priority=102,tcp,nw_dst=10.96.0.10,nw_tos=196 actions=CONTROLLER:65535,goto_table:45"
        ]
    );
    assert_eq!(unseen.len(), 1, "{unseen:?}");
    assert!(
        unseen[0].contains("nw_dst=10.96.0.10,tp_dst=80"),
        "{unseen:?}"
    );
}

fn packet_in(cookie: u64, table: u8, data: Vec<u8>, m: Match) -> PacketIn {
    PacketIn {
        buffer_id: u32::MAX,
        total_len: data.len() as u16,
        reason: 1,
        table_id: table,
        cookie,
        match_: m,
        data,
    }
}

#[test]
fn the_report_names_the_service_the_endpoint_the_nat_and_the_port() {
    let p = probe([10, 96, 0, 10], 80, Proto::Tcp);
    let (twins, unwatched) = twins_for(Some(p.clone()), None);
    let mut names = Names::default();
    names.ports.insert(12, "pod default/p2".into());
    names
        .services
        .insert(0x53560200018aea1d, "default/web:80/TCP".into());
    let trace = Trace {
        request: request(),
        probe: p.clone(),
        nodes: vec![NodeTwins {
            node: "n1".into(),
            twins: twins.clone(),
            names,
        }],
        unwatched,
    };
    let index = |role: Role| twins.iter().position(|t| t.role == role).unwrap() as u16;
    let mut dnat = p.clone();
    dnat.dst = Ipv4Addr::new(10, 244, 0, 12).into();
    dnat.dport = 8080;
    let out_meta = Match::new()
        .with(Field::Reg3, u32::from(Ipv4Addr::new(10, 244, 0, 12)))
        .with(Field::Reg4, 8080u32)
        .with(Field::Reg7, 12u32);
    let reports = vec![
        (
            "n1".to_string(),
            packet_in(
                twin_cookie(7, index(Role::Classifier)),
                0,
                p.frame(),
                Match::new().with(Field::InPortOxm, 11u32),
            ),
        ),
        (
            "n1".to_string(),
            packet_in(
                twin_cookie(7, index(Role::Service)),
                40,
                p.frame(),
                Match::new(),
            ),
        ),
        // Another trace's report is not ours.
        (
            "n1".to_string(),
            packet_in(twin_cookie(8, 0), 0, p.frame(), Match::new()),
        ),
        (
            "n1".to_string(),
            packet_in(
                twin_cookie(7, index(Role::Output)),
                60,
                dnat.frame(),
                out_meta,
            ),
        ),
    ];
    assert!(trace.ends("n1", &reports[3].1));
    assert!(!trace.ends("n1", &reports[1].1));
    let r = trace.report(&reports);
    assert_eq!(r.outcome, Outcome::Delivered);
    assert_eq!(r.hops.len(), 3);
    assert_eq!(r.hops[0].note, "in from port 11");
    assert_eq!(r.hops[1].note, "service port default/web:80/TCP");
    assert_eq!(
        r.result,
        "output to port 12 (pod default/p2) on node n1, endpoint 10.244.0.12:8080 chosen by the group's bucket (reg3, reg4)"
    );
    assert_eq!(
        r.nat.as_deref(),
        Some("dst 10.96.0.10:80 -> 10.244.0.12:8080")
    );
    let text = r.to_string();
    assert!(text.contains("n1 table=40 service: service port default/web:80/TCP\n   cookie=0x53560200018aea1d, table=40, priority=100,tcp,nw_dst=10.96.0.10,tp_dst=80 actions=group:25881117"), "{text}");
    assert!(
        text.contains("reg3=0xaf4000c,reg4=0x1f90,reg7=0xc"),
        "{text}"
    );
    // Served as JSON and read back by the CLI.
    let json = serde_json_roundtrip(&r);
    assert_eq!(json, r);
    // Without an exit: lost.
    let lost = trace.report(&reports[..2]);
    assert_eq!(lost.outcome, Outcome::Lost);
}

fn serde_json_roundtrip(r: &TraceReport) -> TraceReport {
    let text = serde_json::to_string(r).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn destinations_parse_with_typed_errors() {
    let mut r = TraceRequest {
        node: "n1".into(),
        from: "10.0.0.1".into(),
        to: "10.96.0.10:80".into(),
        protocol: Proto::Tcp,
    };
    assert_eq!(
        r.destination(),
        Ok((IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10)), 80))
    );
    for bad in [
        "10.96.0.10",
        "10.96.0.10:0",
        "x:80",
        "10.96.0.10:99999",
        ":80",
    ] {
        r.to = bad.into();
        assert!(r.destination().is_err(), "{bad}");
    }
    r.to = "y".repeat(10_000) + ":1";
    let e = r.destination().unwrap_err();
    assert!(e.len() < 200, "{e}");
    // IPv6: bracketed, as URLs and `ovs-ofctl` (`nat(dst=[…]:80)`) write it.
    r.to = "[fd00:10:96::10]:80".into();
    assert_eq!(r.destination(), Ok(("fd00:10:96::10".parse().unwrap(), 80)));
    assert_eq!(r.family(), Ok(Family::V6));
    // Unbracketed, its last group could be the port: refused, saying how to write it.
    for bare in ["fd00:10:96::10:80", "fd00:10:96::10"] {
        r.to = bare.into();
        let e = r.destination().unwrap_err();
        assert!(e.contains("[ADDRESS]:PORT"), "{bare}: {e}");
    }
    for bad in [
        "[fd00:10:96::10]",
        "[fd00:10:96::10]:0",
        "[fd00:10:96::10:80",
        "[10.96.0.10]:80",
        "[x]:80",
        "[]:80",
        "[fd00::1]:99999",
    ] {
        r.to = bad.into();
        assert!(r.destination().is_err(), "{bad}");
    }
}

#[test]
fn over_a_routed_underlay_only_other_nodes_pod_cidrs_go_on_by_the_uplink() {
    let s = scenario();
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let scope = Scope {
        id: 2,
        tag: 51,
        proto: Proto::Tcp,
        family: Family::V4,
        probe: Some(probe([10, 96, 0, 10], 80, Proto::Tcp)),
        onward: vec![
            Onward {
                port: 1,
                dst: Some((Ipv4Addr::new(10, 244, 2, 0).into(), 24)),
            },
            Onward {
                port: 1,
                dst: Some((Ipv4Addr::new(10, 244, 3, 0).into(), 24)),
            },
        ],
        arrivals: vec![1],
    };
    let (twins, _) = plan(out.state.flows.iter(), &scope).unwrap();
    assert_eq!(
        lines(&twins, Role::Onward),
        [
            " table=60, priority=2,ip,reg7=0x1,nw_dst=10.244.2.0/24,nw_tos=204 actions=CONTROLLER:65535,load:0->NXM_OF_IN_PORT[],output:NXM_NX_REG7[]",
            " table=60, priority=2,ip,reg7=0x1,nw_dst=10.244.3.0/24,nw_tos=204 actions=CONTROLLER:65535,load:0->NXM_OF_IN_PORT[],output:NXM_NX_REG7[]",
        ]
    );
    // The uplink's classifier is where other nodes' packets arrive.
    assert_eq!(lines(&twins, Role::Arrived).len(), 1, "{twins:#?}");
    let names = Names {
        pod_cidrs: vec![(Ipv4Addr::new(10, 244, 2, 0).into(), 24, "n2".into())],
        ..Names::default()
    };
    assert_eq!(
        names.node_of_pod(Ipv4Addr::new(10, 244, 2, 11).into()),
        Some("n2")
    );
    assert_eq!(
        names.node_of_pod(Ipv4Addr::new(10, 244, 3, 11).into()),
        None
    );
}

#[test]
fn a_path_is_whole_once_the_probes_node_reported_sending_it_on() {
    let s = scenario();
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let p = probe([10, 96, 0, 10], 80, Proto::Tcp);
    let onward = vec![Onward {
        port: 1,
        dst: Some((Ipv4Addr::new(10, 244, 2, 0).into(), 24)),
    }];
    let scope = |probe: Option<Probe>| Scope {
        id: 3,
        tag: 49,
        proto: Proto::Tcp,
        family: Family::V4,
        probe,
        onward: onward.clone(),
        arrivals: vec![1],
    };
    let (n1, _) = plan(out.state.flows.iter(), &scope(Some(p.clone()))).unwrap();
    let (n2, _) = plan(out.state.flows.iter(), &scope(None)).unwrap();
    let trace = Trace {
        request: request(),
        probe: p.clone(),
        nodes: vec![
            NodeTwins {
                node: "n1".into(),
                twins: n1.clone(),
                names: Names::default(),
            },
            NodeTwins {
                node: "n2".into(),
                twins: n2.clone(),
                names: Names::default(),
            },
        ],
        unwatched: Vec::new(),
    };
    let report = |node: &str, twins: &[Twin], role: Role| {
        let i = twins.iter().position(|t| t.role == role).unwrap() as u16;
        (
            node.to_string(),
            packet_in(twin_cookie(3, i), 0, p.frame(), Match::new()),
        )
    };
    // The far node's arrival and output came first: not whole until n1 says it sent it on.
    let mut reports = vec![
        report("n1", &n1, Role::Classifier),
        report("n2", &n2, Role::Arrived),
        report("n2", &n2, Role::Output),
    ];
    assert!(!trace.complete(&reports));
    reports.push(report("n1", &n1, Role::Onward));
    assert!(trace.complete(&reports));
    let r = trace.report(&reports);
    let path: Vec<(String, Role)> = r.hops.iter().map(|h| (h.node.clone(), h.role)).collect();
    assert_eq!(
        path,
        [
            ("n1".to_string(), Role::Classifier),
            ("n1".to_string(), Role::Onward),
            ("n2".to_string(), Role::Arrived),
            ("n2".to_string(), Role::Output),
        ]
    );
    // On one node, an exit is enough.
    assert!(trace.complete(&[report("n1", &n1, Role::Output)]));
    assert!(!trace.complete(&[report("n1", &n1, Role::Classifier)]));
}

// IPv6, on the dual-stack golden scenario (node n1: pods p1 at port 11 and p2 at port 12,
// dual-stack; p3 at port 13, IPv6 only; web at 10.96.0.10 and fd00:10:96::10, port 80).

fn dual_stack() -> Scenario {
    Scenario::parse(include_str!("../../tests/scenarios/dual-stack/input.toml")).unwrap()
}

fn v6(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A probe from p1 (fd00:10:244::11) to `dst`.
fn probe6(dst: &str, dport: u16, proto: Proto) -> Probe {
    Probe {
        in_port: 11,
        eth_src: [2, 0, 0, 0, 0, 0x11],
        eth_dst: [0x0a, 0x58, 0x0a, 0xf4, 0, 1],
        src: v6("fd00:10:244::11"),
        dst: v6(dst),
        proto,
        sport: 40001,
        dport,
        tag: 49,
    }
}

fn twins6(p: Option<Probe>, onward: Vec<Onward>, arrivals: Vec<u32>) -> (Vec<Twin>, Vec<String>) {
    let s = dual_stack();
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let scope = Scope {
        id: 7,
        tag: 49,
        proto: p.as_ref().map_or(Proto::Tcp, |p| p.proto),
        family: Family::V6,
        probe: p,
        onward,
        arrivals,
    };
    plan(out.state.flows.iter(), &scope).unwrap()
}

#[test]
fn the_ipv6_probe_carries_the_tag_in_its_traffic_class_with_right_checksums() {
    for proto in [Proto::Tcp, Proto::Udp] {
        let p = probe6("fd00:10:96::10", 80, proto);
        assert_eq!(p.family(), Family::V6);
        let f = p.frame();
        assert_eq!(f[12..14], [0x86, 0xdd], "IPv6 ethertype");
        let ip = &f[14..54];
        assert_eq!(ip[0] >> 4, 6, "version");
        let traffic_class = ((ip[0] & 0x0f) << 4) | (ip[1] >> 4);
        assert_eq!(traffic_class >> 2, 49, "DSCP tag");
        assert_eq!(traffic_class & 3, 0, "ECN");
        assert_eq!(ip[1] & 0x0f, 0, "flow label");
        assert_eq!(ip[2..4], [0, 0], "flow label");
        let l4 = &f[54..];
        assert_eq!(
            usize::from(u16::from_be_bytes([ip[4], ip[5]])),
            l4.len(),
            "payload length"
        );
        assert_eq!(ip[6], proto.number(), "next header");
        assert_eq!(ip[7], 64, "hop limit");
        // The checksum over the IPv6 pseudo-header (RFC 8200 §8.1): addresses, the
        // upper-layer length as 32 bits, three zero bytes and the next header.
        let addrs = folded(&ip[8..40], 0);
        let extra = u32::from(addrs) + l4.len() as u32 + u32::from(proto.number());
        assert_eq!(folded(l4, extra), 0xffff, "{proto} checksum");
        if proto == Proto::Udp {
            assert_ne!(
                u16::from_be_bytes([l4[6], l4[7]]),
                0,
                "UDP over IPv6 has a checksum"
            );
        }
        let text = openflow::packet_fmt::packet_to_string(&f).unwrap();
        // Exactly as `ovs-ofctl ofp-print` (Open vSwitch 3.1) prints this frame in an
        // OFPT_PACKET_IN, checksums included.
        let want = match proto {
            Proto::Tcp => {
                "tcp6,vlan_tci=0x0000,dl_src=02:00:00:00:00:11,dl_dst=0a:58:0a:f4:00:01,ipv6_src=fd00:10:244::11,ipv6_dst=fd00:10:96::10,ipv6_label=0x00000,nw_tos=196,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40001,tp_dst=80,tcp_flags=syn tcp_csum:c7ed"
            }
            Proto::Udp => {
                "udp6,vlan_tci=0x0000,dl_src=02:00:00:00:00:11,dl_dst=0a:58:0a:f4:00:01,ipv6_src=fd00:10:244::11,ipv6_dst=fd00:10:96::10,ipv6_label=0x00000,nw_tos=196,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=40001,tp_dst=80 udp_csum:b96e"
            }
        };
        assert_eq!(text, want);
        assert_eq!(
            Tuple::of(&f),
            Some(Tuple {
                src: p.src,
                dst: p.dst,
                sport: 40001,
                dport: 80
            })
        );
    }
}

#[test]
fn an_ipv6_probe_is_watched_by_the_ipv6_flows_it_can_meet_and_no_ipv4_one() {
    let (twins, unseen) = twins6(
        Some(probe6("fd00:10:96::10", 80, Proto::Tcp)),
        Vec::new(),
        Vec::new(),
    );
    assert!(unseen.is_empty(), "{unseen:?}");
    assert_eq!(
        lines(&twins, Role::Classifier),
        [
            " priority=101,ipv6,in_port=11,nw_tos=196 actions=CONTROLLER:65535,set_field:0xc6c832->reg6,goto_table:10"
        ]
    );
    assert_eq!(
        lines(&twins, Role::Service),
        [
            " table=40, priority=101,tcp6,ipv6_dst=fd00:10:96::10,nw_tos=196,tp_dst=80 actions=CONTROLLER:65535,group:776560251"
        ],
    );
    // The IPv6 service CIDR's catch-all for TCP; not IPv4's, nor UDP's.
    let refuse = lines(&twins, Role::Refuse);
    assert_eq!(refuse.len(), 1, "{refuse:?}");
    assert!(
        refuse[0].contains(
            "table=40, priority=2,tcp6,ipv6_dst=fd00:10:96::/112,nw_tos=196 actions=CONTROLLER:65535"
        ),
        "{refuse:?}"
    );
    let drops = lines(&twins, Role::Drop);
    assert!(
        drops.iter().any(|d| d.contains(
            "table=30, priority=201,ct_state=+inv+trk,ipv6,nw_tos=196 actions=CONTROLLER:65535"
        )),
        "{drops:?}"
    );
    assert_eq!(
        lines(&twins, Role::Output),
        [" table=60, priority=1,ipv6,nw_tos=196 actions=CONTROLLER:65535"]
    );
    for (i, t) in twins.iter().enumerate() {
        assert_eq!(t.entry.cookie, twin_cookie(7, i as u16));
        // ip_dscp over IPv6 (the traffic class): a valid match, and only IPv6 twins.
        assert!(t.key.matches().checked().is_ok(), "{}", t.original);
        assert_eq!(
            t.key.get(Field::EthType).map(|f| f.value),
            Some(0x86dd),
            "{}",
            t.original
        );
        assert_eq!(t.key.get(Field::IpDscpShifted).map(|f| f.value), Some(49));
    }
    // An IPv6-only pod whose port also has a neighbour-solicitation flow: that flow (ICMPv6)
    // is no way in for a TCP probe.
    let mut from_p3 = probe6("fd00:10:96::20", 80, Proto::Tcp);
    from_p3.in_port = 13;
    from_p3.src = v6("fd00:10:244::13");
    let (twins, _) = twins6(Some(from_p3), Vec::new(), Vec::new());
    assert_eq!(
        lines(&twins, Role::Classifier),
        [
            " priority=101,ipv6,in_port=13,nw_tos=196 actions=CONTROLLER:65535,set_field:0x3963d->reg6,goto_table:10"
        ]
    );
    // No endpoint: the service's own flow refuses it.
    let (twins, _) = twins6(
        Some(probe6("fd00:10:96::30", 80, Proto::Tcp)),
        Vec::new(),
        Vec::new(),
    );
    assert!(
        lines(&twins, Role::Refuse)
            .iter()
            .any(|r| r.contains("table=40, priority=101,tcp6,ipv6_dst=fd00:10:96::30,nw_tos=196,tp_dst=80 actions=CONTROLLER:65535")),
        "{:?}",
        lines(&twins, Role::Refuse)
    );
    // UDP: the IPv6-only service with affinity.
    let (twins, _) = twins6(
        Some(probe6("fd00:10:96::53", 53, Proto::Udp)),
        Vec::new(),
        Vec::new(),
    );
    assert!(
        lines(&twins, Role::Service).iter().any(|r| r
            .contains("table=40, priority=101,udp6,ipv6_dst=fd00:10:96::53,nw_tos=196,tp_dst=53")),
        "{:?}",
        lines(&twins, Role::Service)
    );
}

#[test]
fn an_ipv6_probe_goes_on_towards_other_nodes_ipv6_pod_cidrs_and_they_watch_it() {
    let onward = vec![
        Onward {
            port: 1,
            dst: Some((Ipv4Addr::new(10, 244, 2, 0).into(), 24)),
        },
        Onward {
            port: 1,
            dst: Some((v6("fd00:10:244:2::"), 64)),
        },
        Onward { port: 3, dst: None },
    ];
    let (twins, _) = twins6(
        Some(probe6("fd00:10:96::10", 80, Proto::Tcp)),
        onward.clone(),
        vec![1, 3],
    );
    // The IPv4 pod CIDR makes no twin for an IPv6 probe.
    assert_eq!(
        lines(&twins, Role::Onward),
        [
            " table=60, priority=2,ipv6,reg7=0x1,ipv6_dst=fd00:10:244:2::/64,nw_tos=196 actions=CONTROLLER:65535,load:0->NXM_OF_IN_PORT[],output:NXM_NX_REG7[]",
            " table=60, priority=2,ipv6,reg7=0x3,nw_tos=196 actions=CONTROLLER:65535,load:0->NXM_OF_IN_PORT[],output:NXM_NX_REG7[]",
        ]
    );
    // Another node: the uplink's classifier takes it in; its exits name no address.
    let (remote, _) = twins6(None, onward, vec![1]);
    assert_eq!(
        lines(&remote, Role::Arrived),
        [
            " priority=101,ipv6,in_port=1,nw_tos=196 actions=CONTROLLER:65535,set_field:0x1->reg0,goto_table:10"
        ]
    );
    assert!(lines(&remote, Role::Service).is_empty());
    assert!(!lines(&remote, Role::Drop).is_empty());
    assert!(remote.iter().all(|t| {
        t.key.get(Field::Ipv6Src).is_none()
            && t.key.get(Field::Ipv4Dst).is_none()
            && t.key.get(Field::EthType).map(|f| f.value) == Some(0x86dd)
    }));
    let names = Names {
        pod_cidrs: vec![
            (Ipv4Addr::new(10, 244, 2, 0).into(), 24, "n2".into()),
            (v6("fd00:10:244:2::"), 64, "n2".into()),
        ],
        ..Names::default()
    };
    assert_eq!(names.node_of_pod(v6("fd00:10:244:2::11")), Some("n2"));
    assert_eq!(names.node_of_pod(v6("fd00:10:244:3::11")), None);
}

#[test]
fn the_ipv6_report_names_the_endpoint_from_reg12_to_reg15_and_the_nat() {
    let p = probe6("fd00:10:96::10", 80, Proto::Tcp);
    let (twins, unwatched) = twins6(Some(p.clone()), Vec::new(), Vec::new());
    let mut names = Names::default();
    names.ports.insert(12, "pod default/p2".into());
    names
        .services
        .insert(0x535602002e495e7b, "default/web:http/TCP".into());
    let trace = Trace {
        request: TraceRequest {
            node: "n1".into(),
            from: "default/p1".into(),
            to: "[fd00:10:96::10]:80".into(),
            protocol: Proto::Tcp,
        },
        probe: p.clone(),
        nodes: vec![NodeTwins {
            node: "n1".into(),
            twins: twins.clone(),
            names,
        }],
        unwatched,
    };
    let index = |role: Role| twins.iter().position(|t| t.role == role).unwrap() as u16;
    let mut dnat = p.clone();
    dnat.dst = v6("fd00:10:244::12");
    dnat.dport = 8080;
    // The registers as the switch reports them: the endpoint's address, most significant
    // word in reg12 (reg14 is 0, so the switch leaves it out), its port in reg4.
    let out_meta = Match::new()
        .with(Field::Reg4, 8080u32)
        .with(Field::Reg7, 12u32)
        .with(Field::Reg12, 0xfd00_0010u32)
        .with(Field::Reg13, 0x0244_0000u32)
        .with(Field::Reg15, 0x12u32);
    let reports = vec![
        (
            "n1".to_string(),
            packet_in(
                twin_cookie(7, index(Role::Classifier)),
                0,
                p.frame(),
                Match::new().with(Field::InPortOxm, 11u32),
            ),
        ),
        (
            "n1".to_string(),
            packet_in(
                twin_cookie(7, index(Role::Service)),
                40,
                p.frame(),
                Match::new(),
            ),
        ),
        (
            "n1".to_string(),
            packet_in(
                twin_cookie(7, index(Role::Output)),
                60,
                dnat.frame(),
                out_meta,
            ),
        ),
    ];
    assert!(trace.complete(&reports));
    let r = trace.report(&reports);
    assert_eq!(r.outcome, Outcome::Delivered);
    assert_eq!(r.hops.len(), 3);
    assert_eq!(r.hops[1].note, "service port default/web:http/TCP");
    assert_eq!(
        r.result,
        "output to port 12 (pod default/p2) on node n1, endpoint [fd00:10:244::12]:8080 chosen by the group's bucket (reg12..reg15, reg4)"
    );
    assert_eq!(
        r.nat.as_deref(),
        Some("dst [fd00:10:96::10]:80 -> [fd00:10:244::12]:8080")
    );
    assert!(r.probe.starts_with("tcp6,"), "{}", r.probe);
    assert!(
        r.hops[2]
            .packet
            .contains("ipv6_src=fd00:10:244::11,ipv6_dst=fd00:10:244::12"),
        "{}",
        r.hops[2].packet
    );
    let text = r.to_string();
    assert!(
        text.contains("reg4=0x1f90,reg7=0xc,reg12=0xfd000010,reg13=0x2440000,reg15=0x12"),
        "{text}"
    );
    assert!(
        text.contains("nat: dst [fd00:10:96::10]:80 -> [fd00:10:244::12]:8080"),
        "{text}"
    );
    assert_eq!(serde_json_roundtrip(&r), r);

    // Hairpin: p1 reaching itself through the service is masqueraded to fd00:5356::fd.
    let mut hairpin = dnat.clone();
    hairpin.dst = p.src;
    hairpin.src = v6("fd00:5356::fd");
    let mut reports = reports;
    reports[2].1.data = hairpin.frame();
    let r = trace.report(&reports);
    assert_eq!(
        r.nat.as_deref(),
        Some(
            "dst [fd00:10:96::10]:80 -> [fd00:10:244::11]:8080, src [fd00:10:244::11]:40001 -> [fd00:5356::fd]:40001"
        )
    );
}

#[test]
fn hostile_packet_ins_are_explained_without_panicking() {
    let p = probe6("fd00:10:96::10", 80, Proto::Udp);
    let (twins, _) = twins6(Some(p.clone()), Vec::new(), Vec::new());
    let trace = Trace {
        request: request(),
        probe: p.clone(),
        nodes: vec![NodeTwins {
            node: "n1".into(),
            twins: twins.clone(),
            names: Names::default(),
        }],
        unwatched: Vec::new(),
    };
    let output = twins.iter().position(|t| t.role == Role::Output).unwrap() as u16;
    let frame = p.frame();
    // Every truncation of the frame, an IPv6 header claiming another next header, and
    // registers of every width.
    let mut odd = frame.clone();
    odd[14 + 6] = 0;
    let meta = Match::new()
        .with(Field::Reg4, 0xffff_ffffu32)
        .with(Field::Reg12, 0xffff_ffffu32)
        .with(Field::Reg7, u32::MAX);
    let mut datas: Vec<Vec<u8>> = (0..frame.len()).map(|n| frame[..n].to_vec()).collect();
    datas.push(odd);
    for data in datas {
        let _ = Tuple::of(&data);
        let reports = vec![(
            "n1".to_string(),
            packet_in(twin_cookie(7, output), 60, data, meta.clone()),
        )];
        let r = trace.report(&reports);
        assert_eq!(r.outcome, Outcome::Delivered);
    }
}
