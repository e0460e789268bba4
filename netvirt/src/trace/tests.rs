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
        src: Ipv4Addr::new(10, 244, 0, 11),
        dst: Ipv4Addr::from(dst),
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
    let onward = tunnel.map(|port| Onward { port, dst: None });
    let s = scenario();
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let scope = Scope {
        id: 7,
        tag: 49,
        proto: p.as_ref().map_or(Proto::Tcp, |p| p.proto),
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
            let entry = FlowEntry {
                cookie: 0,
                instructions: t.entry.instructions.clone(),
            };
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
        assert!(t.key.matches.check_prereqs().is_ok(), "{}", t.original);
        assert_eq!(
            t.key.matches.get(Field::IpDscpShifted).map(|f| f.value),
            Some(49)
        );
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
    assert!(
        remote
            .iter()
            .all(|t| t.key.matches.get(Field::Ipv4Dst).is_none())
    );
}

#[test]
fn a_twin_is_not_made_where_another_flow_could_take_the_probe_first() {
    let s = scenario();
    let mut out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    // A flow at priority 101 for the same address: the service's twin would tie with it.
    let key = FlowKey {
        table: table::SERVICE,
        priority: 101,
        matches: Match::new()
            .with(Field::EthType, 0x0800u16)
            .with(Field::IpProto, 6u8)
            .with(Field::Ipv4Dst, u32::from(Ipv4Addr::new(10, 96, 0, 10))),
    };
    out.state.flows.insert(
        key,
        FlowEntry {
            cookie: cookie::make(cookie::NODE, 0),
            instructions: vec![Instruction::GotoTable(45)],
        },
    );
    let scope = Scope {
        id: 1,
        tag: 49,
        proto: Proto::Tcp,
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
    dnat.dst = Ipv4Addr::new(10, 244, 0, 12);
    dnat.dport = 8080;
    let out_meta = Match::new()
        .with(Field::Reg3, u32::from(dnat.dst))
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
    assert_eq!(r.destination(), Ok((Ipv4Addr::new(10, 96, 0, 10), 80)));
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
    // IPv6 is served but not traced: the error says so, not that the address is malformed.
    r.to = "[fd00:10:96::10]:80".into();
    let e = r.destination().unwrap_err();
    assert!(e.contains("IPv4 only") && e.contains("IPv6"), "{e}");
}

#[test]
fn over_a_routed_underlay_only_other_nodes_pod_cidrs_go_on_by_the_uplink() {
    let s = scenario();
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let scope = Scope {
        id: 2,
        tag: 51,
        proto: Proto::Tcp,
        probe: Some(probe([10, 96, 0, 10], 80, Proto::Tcp)),
        onward: vec![
            Onward {
                port: 1,
                dst: Some((Ipv4Addr::new(10, 244, 2, 0), 24)),
            },
            Onward {
                port: 1,
                dst: Some((Ipv4Addr::new(10, 244, 3, 0), 24)),
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
        pod_cidrs: vec![(Ipv4Addr::new(10, 244, 2, 0), 24, "n2".into())],
        ..Names::default()
    };
    assert_eq!(names.node_of_pod(Ipv4Addr::new(10, 244, 2, 11)), Some("n2"));
    assert_eq!(names.node_of_pod(Ipv4Addr::new(10, 244, 3, 11)), None);
}

#[test]
fn a_path_is_whole_once_the_probes_node_reported_sending_it_on() {
    let s = scenario();
    let out = crate::desired::desired(&s.node, &s.model, &s.config, &s.bindings);
    let p = probe([10, 96, 0, 10], 80, Proto::Tcp);
    let onward = vec![Onward {
        port: 1,
        dst: Some((Ipv4Addr::new(10, 244, 2, 0), 24)),
    }];
    let scope = |probe: Option<Probe>| Scope {
        id: 3,
        tag: 49,
        proto: Proto::Tcp,
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
