use super::*;
use crate::flow::DumpFlow;
use crate::model::ServiceKey;
use crate::scenario::Scenario;

/// A flow whose match lacks a prerequisite is reported and never reaches the state.
#[test]
fn a_match_without_its_prerequisite_is_reported_not_rendered() {
    let config = Config::default();
    let mut b = Builder::new(&config);
    let bad = Match::new().with(Field::TcpDst, 80u16);
    assert!(!b.flow(table::SERVICE, 7, bad, 9, vec![]));
    assert!(b.out.state.flows.is_empty());
    assert_eq!(
        b.out.conflicts,
        vec![
            "table 40 priority 7: cookie 0x9: `tcp_dst` lacks its prerequisite; flow dropped"
                .to_string()
        ]
    );
    assert!(b.flow(
        table::SERVICE,
        7,
        l4_of(Family::V4, Protocol::Tcp).with(Field::TcpDst, 80u16),
        9,
        vec![]
    ));
}

fn scenario() -> Scenario {
    let text = include_str!("../../tests/scenarios/service-semantics/input.toml");
    Scenario::parse(text).unwrap()
}

fn flows(out: &DesiredState) -> Vec<String> {
    out.state
        .flows
        .iter()
        .map(|(k, v)| DumpFlow(k, v).to_string())
        .collect()
}

#[test]
fn affinity_timeouts_above_16_bits_are_clamped_and_reported() {
    assert_eq!(affinity_idle_timeout(1), 1);
    assert_eq!(affinity_idle_timeout(10_800), 10_800);
    assert_eq!(affinity_idle_timeout(65_535), 65_535);
    assert_eq!(affinity_idle_timeout(65_536), 65_535);
    assert_eq!(affinity_idle_timeout(86_400), 65_535);
    assert_eq!(affinity_idle_timeout(0), 1);
    let mut s = scenario();
    let key = ServiceKey::new("default", "sticky");
    s.model.services.get_mut(&key).unwrap().session_affinity = SessionAffinity::ClientIp {
        timeout_seconds: 86_400,
    };
    let out = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(
        out.conflicts,
        [
            "default/sticky:80/tcp: session affinity timeout 86400 s is above Open vSwitch's \
          65535 s; clamped to 65535 s"
        ]
    );
    let learning: Vec<String> = flows(&out)
        .into_iter()
        .filter(|f| f.contains("learn("))
        .collect();
    assert_eq!(learning.len(), 2);
    assert!(learning.iter().all(|f| f.contains("idle_timeout=65535,")));
}

#[test]
fn affinity_over_a_chained_service_learns_after_the_slot_lookup() {
    let mut s = scenario();
    s.config.group_buckets_max = 1;
    let out = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
    let sticky = &out.services["default/sticky:80/tcp"];
    assert_eq!(sticky.groups.len(), 2);
    let text = flows(&out).join("\n");
    // Table 40 looks the client up; table 44's miss hashes into the slot ranges.
    assert!(text.contains(
        "table=44, priority=100,reg5=0x19c3c29a actions=multipath(symmetric_l4,21334,modulo_n,2,0,NXM_NX_REG1[0..15]),resubmit(,42)"
    ), "{text}");
    for g in &sticky.groups {
        let group = &out.state.groups[&g.id];
        assert!(
            group
                .buckets
                .iter()
                .all(|b| b.actions().last() == Some(&resubmit(table::AFFINITY_LEARN)))
        );
    }
}

#[test]
fn source_ranges_restrict_only_lb_ips_and_open_ranges_lift_them() {
    let mut s = scenario();
    let key = ServiceKey::new("other", "lb-closed");
    let text = flows(&desired(&s.node, &s.model, &s.config, &s.bindings)).join("\n");
    assert!(text.contains("priority=90,tcp,nw_dst=198.18.0.81,tp_dst=80 actions=drop"));
    assert!(text.contains("priority=100,tcp,nw_dst=10.96.0.81,tp_dst=80 actions=group:"));
    // 0.0.0.0/0 among the ranges, or only IPv6 ranges: no restriction for IPv4.
    for ranges in [vec!["203.0.113.0/24", "0.0.0.0/0"], vec!["2001:db8::/32"]] {
        s.model.services.get_mut(&key).unwrap().lb_source_ranges =
            ranges.iter().map(|r| r.parse().unwrap()).collect();
        let text = flows(&desired(&s.node, &s.model, &s.config, &s.bindings)).join("\n");
        assert!(
            !text.contains("nw_dst=198.18.0.81,tp_dst=80 actions=drop"),
            "{ranges:?}"
        );
        assert!(
            text.contains("priority=100,tcp,nw_dst=198.18.0.81,tp_dst=80 actions=group:"),
            "{ranges:?}"
        );
    }
}

#[test]
fn an_address_of_a_family_the_service_has_no_cluster_ip_of_is_reported_not_dropped() {
    let mut s = scenario();
    let key = ServiceKey::new("other", "lb-closed");
    let before = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert!(before.conflicts.is_empty(), "{:?}", before.conflicts);
    s.model
        .services
        .get_mut(&key)
        .unwrap()
        .external_ips
        .push("2001:db8::81".parse().unwrap());
    let after = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert!(
        after.state == before.state,
        "an IPv6 address of an IPv4 service gets no flows, nor a neighbour answer"
    );
    assert_eq!(
        after.conflicts,
        [format!(
            "{key}: address 2001:db8::81 is not served: the service has no IPv6 cluster IP"
        )]
    );
}

/// With the overlay, a pod CIDR of a family the node has no address of cannot be masqueraded:
/// reported, and masqueraded once the node has such an address.
#[test]
fn an_overlay_pod_cidr_without_a_node_address_of_its_family_is_reported() {
    let text = include_str!("../../tests/scenarios/overlay/input.toml");
    let mut s = Scenario::parse(text).unwrap();
    let cidr6: ipnet::IpNet = "fd00:10:244:1::/64".parse().unwrap();
    s.node.pod_cidrs.push(cidr6);
    s.node.ips.retain(IpAddr::is_ipv4);
    let out = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(
        out.conflicts,
        [format!(
            "pod CIDR {cidr6} but no IPv6 node address to masquerade its pods' connections out \
             of the cluster to: they leave with their own source, which the overlay's underlay \
             does not route back"
        )]
    );
    let masquerade6 = |out: &DesiredState| {
        flows(out)
            .into_iter()
            .filter(|f| f.contains("ipv6_src=fd00:10:244:1::/64") && f.contains("nat(src="))
            .collect::<Vec<_>>()
    };
    assert_eq!(masquerade6(&out), Vec::<String>::new());
    s.node.ips.push("fd00:50::11".parse().unwrap());
    let out = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
    assert_eq!(
        masquerade6(&out),
        [
            " cookie=0x5356050000000000, table=50, priority=11,ct_state=-rpl+trk,ipv6,\
          ipv6_src=fd00:10:244:1::/64 actions=ct(commit,table=50,zone=65001,\
          nat(src=fd00:50::11))"
        ]
    );
}
