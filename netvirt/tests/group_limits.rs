//! A select group must fit in one OpenFlow message (65,535 bytes). An IPv6 bucket loads four
//! registers where an IPv4 one loads one, so the two families have their own bucket limits
//! (`chain::GROUP_BUCKETS_MAX`, `chain::GROUP_BUCKETS_MAX_V6`). This renders a dual-stack
//! service with exactly that many endpoints of each family, encodes every group with the real
//! encoder, and checks one more endpoint splits the port over chained groups.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use netvirt::apply::group_mod;
use netvirt::chain::{GROUP_BUCKETS_MAX, GROUP_BUCKETS_MAX_V6};
use netvirt::desired::desired;
use netvirt::model::{ServiceKey, SessionAffinity};
use netvirt::scenario::Scenario;
use openflow::msg::{GroupModCommand, Message};

fn dual_stack(v4: usize, v6: usize) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/dual-stack/input.toml");
    let mut s = Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    let key = ServiceKey::new("default", "web");
    // Session affinity: its buckets are no shorter than plain ones.
    s.model.services.get_mut(&key).unwrap().session_affinity = SessionAffinity::ClientIp {
        timeout_seconds: 600,
    };
    let template = s.model.endpoints.get(&key).unwrap()[0].clone();
    let mut endpoints = Vec::new();
    for i in 0..v4 {
        let mut e = template.clone();
        e.address = IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i as u32));
        endpoints.push(e);
    }
    for i in 0..v6 {
        let mut e = template.clone();
        // Full-width addresses: no zero word a shorter encoding could exploit.
        e.address = IpAddr::V6(Ipv6Addr::from(
            0xfd00_1111_2222_3333_4444_5555_0000_0000u128 + i as u128,
        ));
        endpoints.push(e);
    }
    s.model.endpoints.insert(key, endpoints);
    s
}

/// The bucket counts of the web service's groups, per family, after checking that every
/// group of the node encodes.
fn groups(s: &Scenario) -> (Vec<usize>, Vec<usize>) {
    let out = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
    for (id, g) in &out.state.groups {
        let message = Message::new(1, group_mod(GroupModCommand::Add, *id, Some(g)));
        let len = message.encoded_len();
        assert!(
            message.encode().is_ok(),
            "group {id} of {} buckets is {len} bytes",
            g.buckets.len()
        );
    }
    let count = |suffix: bool| -> Vec<usize> {
        out.services
            .iter()
            .filter(|(name, _)| {
                name.starts_with("default/web:80/tcp") && name.ends_with("/ipv6") == suffix
            })
            .flat_map(|(_, p)| p.groups.iter().map(|g| g.backends.len()))
            .collect()
    };
    (count(false), count(true))
}

#[test]
fn a_group_at_each_familys_limit_fits_in_one_message() {
    let (v4, v6) = groups(&dual_stack(GROUP_BUCKETS_MAX, GROUP_BUCKETS_MAX_V6));
    assert_eq!(v4, [GROUP_BUCKETS_MAX]);
    assert_eq!(v6, [GROUP_BUCKETS_MAX_V6]);
}

#[test]
fn one_endpoint_more_splits_the_port_over_chained_groups() {
    let (v4, v6) = groups(&dual_stack(GROUP_BUCKETS_MAX + 1, GROUP_BUCKETS_MAX_V6 + 1));
    assert!(
        v4.len() > 1 && v4.iter().sum::<usize>() == GROUP_BUCKETS_MAX + 1,
        "{v4:?}"
    );
    assert!(
        v6.len() > 1 && v6.iter().sum::<usize>() == GROUP_BUCKETS_MAX_V6 + 1,
        "{v6:?}"
    );
}

#[test]
fn the_ipv6_limit_is_not_far_below_what_fits() {
    // A group at the IPv6 limit, doubled, would not fit: the limit is within a factor of two
    // of what one message holds, not arbitrary.
    let s = dual_stack(0, GROUP_BUCKETS_MAX_V6);
    let out = desired(&s.node, &s.model, &s.config, &s.bindings);
    let biggest = out
        .state
        .groups
        .values()
        .max_by_key(|g| g.buckets.len())
        .unwrap();
    assert_eq!(biggest.buckets.len(), GROUP_BUCKETS_MAX_V6);
    let mut doubled = biggest.clone();
    doubled.buckets.extend(biggest.buckets.clone());
    let message = Message::new(1, group_mod(GroupModCommand::Add, 1, Some(&doubled)));
    assert!(message.encode().is_err(), "{} bytes", message.encoded_len());
}
