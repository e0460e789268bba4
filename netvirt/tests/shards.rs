//! The incremental desired state must always equal a fresh render of the same model, and its
//! deltas, applied to the previous state, must give the new one.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;

use netvirt::desired::desired;
use netvirt::health::{NoLocal, no_local_endpoints};
use netvirt::model::{Endpoint, ServiceKey, TrafficDistribution, TrafficPolicy};
use netvirt::plan::apply;
use netvirt::resolve::ZONE_LABEL;
use netvirt::scenario::Scenario;
use netvirt::shards::{Renders, Shards};
use proptest::prelude::*;

fn base() -> Scenario {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/node-services/input.toml");
    Scenario::parse(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[derive(Debug, Clone)]
enum Edit {
    /// Drop endpoint `i` of service `s`.
    DropEndpoint(usize, usize),
    /// Add an endpoint 10.244.9.`n` to service `s`.
    AddEndpoint(usize, u8),
    /// Set endpoint `i` of service `s` to weight `w`.
    Weigh(usize, usize, u16),
    /// Remove service `s`.
    RemoveService(usize),
    /// Copy service `s` under a new name, on its own address or (colliding) on the same.
    CopyService(usize, u8, bool),
    /// Remove pod `p`.
    RemovePod(usize),
    /// Lower the group size limit, splitting services.
    Split(usize),
    /// Set service `s`'s internal and external traffic policies (`true`: Local).
    Policy(usize, bool, bool),
    /// Add an IPv6 endpoint fd00:10:244:9::`n` to service `s`.
    AddEndpoint6(usize, u8),
    /// Give service `s` an IPv6 cluster IP fd00:10:96:9::`n` (dual-stack), or take its IPv6
    /// addresses away.
    DualStack(usize, u8, bool),
    /// Hint service `s`'s endpoints for zones (`true`) or nodes, alternating from the `i`th.
    Hint(usize, usize, bool),
    /// Set service `s`'s `trafficDistribution` (0: none, 1: PreferClose, 2: PreferSameNode).
    Distribution(usize, u8),
    /// Move endpoint `i` of service `s` to node `n1` (`true`) or `other`, in that node's zone.
    Place(usize, usize, bool),
    /// Weigh endpoints on the node itself `w` by default.
    LocalWeight(u16),
    /// Give service `s`'s first port node port 30000 + `n`, or take it away.
    NodePort(usize, u8, bool),
    /// Give service `s` health-check node port 32000 + `n` (and `externalTrafficPolicy:
    /// Local`), or take it away.
    HealthCheck(usize, u8, bool),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..8usize, 0..4usize).prop_map(|(s, i)| Edit::DropEndpoint(s, i)),
        (0..8usize, 1..250u8).prop_map(|(s, n)| Edit::AddEndpoint(s, n)),
        (0..8usize, 0..4usize, 0..4u16).prop_map(|(s, i, w)| Edit::Weigh(s, i, w)),
        (0..8usize).prop_map(Edit::RemoveService),
        (0..8usize, any::<bool>(), any::<bool>()).prop_map(|(s, i, e)| Edit::Policy(s, i, e)),
        (0..8usize, 1..250u8, any::<bool>()).prop_map(|(s, n, same)| Edit::CopyService(s, n, same)),
        (0..4usize).prop_map(Edit::RemovePod),
        (1..4usize).prop_map(Edit::Split),
        (0..8usize, 1..250u8).prop_map(|(s, n)| Edit::AddEndpoint6(s, n)),
        (0..8usize, 1..250u8, any::<bool>()).prop_map(|(s, n, on)| Edit::DualStack(s, n, on)),
        (0..8usize, 0..4usize, any::<bool>()).prop_map(|(s, i, z)| Edit::Hint(s, i, z)),
        (0..8usize, 0..3u8).prop_map(|(s, d)| Edit::Distribution(s, d)),
        (0..8usize, 0..4usize, any::<bool>()).prop_map(|(s, i, here)| Edit::Place(s, i, here)),
        (1..4u16).prop_map(Edit::LocalWeight),
        (0..8usize, 1..250u8, any::<bool>()).prop_map(|(s, n, on)| Edit::NodePort(s, n, on)),
        // Few ports, so that two services claim one.
        (0..8usize, 1..4u8, any::<bool>()).prop_map(|(s, n, on)| Edit::HealthCheck(s, n, on)),
    ]
}

fn nth_key(s: &Scenario, i: usize) -> Option<ServiceKey> {
    let n = s.model.services.len();
    (n > 0).then(|| s.model.services.keys().nth(i % n).unwrap().clone())
}

fn perform(s: &mut Scenario, e: &Edit) {
    match *e {
        Edit::DropEndpoint(svc, i) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(eps) = s.model.endpoints.get_mut(&k)
                && !eps.is_empty()
            {
                let i = i % eps.len();
                eps.remove(i);
            }
        }
        Edit::AddEndpoint(svc, n) => {
            if let Some(k) = nth_key(s, svc) {
                s.model.endpoints.entry(k).or_default().push(Endpoint::new(
                    format!("10.244.9.{n}").parse().unwrap(),
                    Vec::new(),
                    Some("n2".to_string()),
                ));
            }
        }
        Edit::AddEndpoint6(svc, n) => {
            if let Some(k) = nth_key(s, svc) {
                s.model.endpoints.entry(k).or_default().push(Endpoint::new(
                    format!("fd00:10:244:9::{n:x}").parse().unwrap(),
                    Vec::new(),
                    Some("n1".to_string()),
                ));
            }
        }
        Edit::DualStack(svc, n, on) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(service) = s.model.services.get_mut(&k)
            {
                service.cluster_ips.retain(|ip| ip.is_ipv4());
                if on {
                    service
                        .cluster_ips
                        .push(format!("fd00:10:96:9::{n:x}").parse().unwrap());
                }
            }
        }
        Edit::Weigh(svc, i, w) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(eps) = s.model.endpoints.get_mut(&k)
                && !eps.is_empty()
            {
                let i = i % eps.len();
                eps[i].weight = Some(w);
            }
        }
        Edit::RemoveService(svc) => {
            if let Some(k) = nth_key(s, svc) {
                s.model.services.remove(&k);
                s.model.endpoints.remove(&k);
            }
        }
        Edit::CopyService(svc, n, same) => {
            if let Some(k) = nth_key(s, svc) {
                let mut copy = s.model.services[&k].clone();
                let key = ServiceKey::new(&k.namespace, &format!("{}-{n}", k.name));
                copy.key = key.clone();
                if !same {
                    copy.cluster_ips = vec![format!("10.96.9.{n}").parse().unwrap()];
                    copy.external_ips.clear();
                    copy.lb_ingress_ips.clear();
                    for p in &mut copy.ports {
                        p.node_port = None;
                    }
                }
                let eps = s.model.endpoints.get(&k).cloned().unwrap_or_default();
                s.model.services.insert(key.clone(), copy);
                s.model.endpoints.insert(key, eps);
            }
        }
        Edit::RemovePod(p) => {
            let n = s.model.pods.len();
            if n > 0 {
                let uid = s.model.pods.keys().nth(p % n).unwrap().clone();
                s.model.pods.remove(&uid);
            }
        }
        Edit::Split(max) => s.config.group_buckets_max = max,
        Edit::Hint(svc, i, zone) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(eps) = s.model.endpoints.get_mut(&k)
                && !eps.is_empty()
            {
                // Hints count only when every endpoint has them: each gets one, alternating
                // between the two zones (or nodes) from the `i`th on.
                for (j, e) in eps.iter_mut().enumerate() {
                    let first = (j + i) % 2 == 0;
                    if zone {
                        e.zone_hints = vec![if first { "zone-a" } else { "zone-b" }.to_string()];
                    } else {
                        e.node_hints = vec![if first { "n1" } else { "other" }.to_string()];
                    }
                }
            }
        }
        Edit::Distribution(svc, d) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(service) = s.model.services.get_mut(&k)
            {
                service.traffic_distribution = match d {
                    0 => TrafficDistribution::Any,
                    1 => TrafficDistribution::PreferClose,
                    _ => TrafficDistribution::PreferSameNode,
                };
            }
        }
        Edit::Place(svc, i, here) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(eps) = s.model.endpoints.get_mut(&k)
                && !eps.is_empty()
            {
                let i = i % eps.len();
                let (node, zone) = if here {
                    ("n1", "zone-a")
                } else {
                    ("other", "zone-b")
                };
                eps[i].node = Some(node.to_string());
                eps[i].zone = Some(zone.to_string());
            }
        }
        Edit::LocalWeight(w) => s.config.local_endpoint_weight = w,
        Edit::HealthCheck(svc, n, on) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(service) = s.model.services.get_mut(&k)
            {
                service.health_check_node_port = on.then_some(32000 + u16::from(n));
                if on {
                    service.external_traffic_policy = TrafficPolicy::Local;
                }
            }
        }
        Edit::NodePort(svc, n, on) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(service) = s.model.services.get_mut(&k)
                && let Some(port) = service.ports.first_mut()
            {
                port.node_port = on.then_some(30000 + u16::from(n));
            }
        }
        Edit::Policy(svc, internal, external) => {
            if let Some(k) = nth_key(s, svc)
                && let Some(service) = s.model.services.get_mut(&k)
            {
                let policy = |local| {
                    if local {
                        TrafficPolicy::Local
                    } else {
                        TrafficPolicy::Cluster
                    }
                };
                service.internal_traffic_policy = policy(internal);
                service.external_traffic_policy = policy(external);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn incremental_state_equals_a_fresh_render(edits in proptest::collection::vec(edit(), 1..12)) {
        let mut s = base();
        let mut shards = Shards::default();
        let first = shards.update(&s.node, &s.model, &s.config, &s.bindings);
        let mut state = netvirt::plan::State::default();
        apply(&mut state, &first).unwrap();
        for e in &edits {
            perform(&mut s, e);
            let previous: std::collections::BTreeSet<String> =
                shards.conflicts().into_iter().collect();
            let delta = shards.update(&s.node, &s.model, &s.config, &s.bindings);
            // What an update reports is a conflict, and every conflict it made is reported.
            let listed = shards.conflicts();
            // The count kept as shards change is the number listed.
            prop_assert_eq!(shards.conflict_count(), listed.len(), "after {:?}", e);
            let now: std::collections::BTreeSet<String> = listed.into_iter().collect();
            let recent: std::collections::BTreeSet<String> =
                shards.recent_conflicts().iter().cloned().collect();
            prop_assert!(recent.is_subset(&now), "{:?} not in {:?}", recent, now);
            for made in now.difference(&previous) {
                prop_assert!(recent.contains(made), "{} made by {:?} but not reported", made, e);
            }
            let fresh = desired(&s.node, &s.model, &s.config, &s.bindings);
            let kept = shards.materialize();
            prop_assert_eq!(&kept.state, &fresh.state, "after {:?}", e);
            prop_assert_eq!(&kept.services, &fresh.services);
            // What each health-check node port answers: the first service's that claims it.
            prop_assert_eq!(&kept.health, &fresh.health, "after {:?}", e);
            prop_assert_eq!(&kept.health, &netvirt::health::health_checks(&s.model, &s.node.name));
            let mut a = kept.conflicts.clone();
            let mut b = fresh.conflicts.clone();
            a.sort();
            b.sort();
            prop_assert_eq!(a, b);
            apply(&mut state, &delta).unwrap();
            prop_assert_eq!(&state, &fresh.state, "the delta after {:?} does not lead there", e);
            // The ports without a local endpoint, kept by shard, are those counted afresh.
            let counted = s.model.services.iter().fold(NoLocal::default(), |sum, (k, svc)| {
                let eps = s.model.endpoints.get(k).map_or(&[][..], Vec::as_slice);
                sum + no_local_endpoints(svc, eps, &s.node.name)
            });
            prop_assert_eq!(shards.no_local_endpoints(), counted, "after {:?}", e);
        }
    }
}

/// An update made a part at a time, each part's steps applied to the switch before the next
/// part renders (as the engine sends them): every part's steps apply, and the parts lead to
/// what one update would. One given up after its first part leaves the next update to
/// render everything, from the state those steps made.
fn update_in_parts(
    shards: &mut Shards,
    s: &Scenario,
    state: &mut netvirt::plan::State<
        netvirt::flow::FlowKey,
        netvirt::flow::FlowEntry,
        netvirt::flow::GroupEntry,
    >,
    part: usize,
    give_up: bool,
) -> Result<(), String> {
    let (mut update, first) = shards.begin_update(&s.node, &s.model, &s.config, &s.bindings);
    let mut pending = Some(first);
    while let Some(p) = pending.take() {
        let steps: Vec<_> = shards.steps(&p).map(netvirt::plan::Step::cloned).collect();
        drop(p);
        apply(state, &steps)?;
        if give_up {
            break;
        }
        pending = shards.continue_update(&mut update, part);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn an_update_in_parts_equals_one_update(
        edits in proptest::collection::vec((edit(), 1..4usize, proptest::bool::weighted(0.2)), 1..12),
        keep in 0..3usize,
        settle in 1..4usize,
    ) {
        let mut s = base();
        let mut shards = Shards::default();
        // Plans kept from an update's start to its render, or made again there.
        shards.keep_plans_up_to(keep);
        // Services settled (planned, given group ids) a few at a time as they render.
        shards.settle_up_to(settle);
        let mut state = netvirt::plan::State::default();
        update_in_parts(&mut shards, &s, &mut state, 2, false).unwrap();
        for (e, part, give_up) in &edits {
            perform(&mut s, e);
            let result = update_in_parts(&mut shards, &s, &mut state, *part, *give_up);
            prop_assert!(result.is_ok(), "a part's steps do not apply after {:?}: {:?}", e, result);
            if *give_up {
                let delta = shards.update(&s.node, &s.model, &s.config, &s.bindings);
                apply(&mut state, &delta).unwrap();
            }
            let fresh = desired(&s.node, &s.model, &s.config, &s.bindings);
            prop_assert_eq!(&shards.materialize().state, &fresh.state, "after {:?}", e);
            prop_assert_eq!(&state, &fresh.state, "the parts after {:?} do not lead there", e);
        }
    }
}

/// The base scenario with a second node (its own name, address and uplink MAC), that node
/// and its bindings, and two shards sharing their renders.
fn two_nodes() -> (
    Scenario,
    netvirt::model::Node,
    netvirt::desired::NodeBindings,
    Renders,
    Shards,
    Shards,
) {
    let mut s = base();
    // Each node in a zone of its own, so that topology tells them apart.
    s.node
        .labels
        .insert(ZONE_LABEL.to_string(), "zone-a".to_string());
    s.model.nodes.insert(s.node.name.clone(), s.node.clone());
    let mut node = s.node.clone();
    node.name = "other".to_string();
    node.ips = vec!["192.0.2.77".parse().unwrap()];
    node.labels
        .insert(ZONE_LABEL.to_string(), "zone-b".to_string());
    let mut bindings = s.bindings.clone();
    if let Some(uplink) = bindings.uplink.as_mut() {
        uplink.mac = "02:00:00:00:77:01".parse().unwrap();
    }
    s.model.nodes.insert(node.name.clone(), node.clone());
    let renders = Renders::new();
    let (a, b) = (Shards::sharing(&renders), Shards::sharing(&renders));
    (s, node, bindings, renders, a, b)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// Two nodes sharing their renders each hold exactly what a render of their own gives,
    /// after every edit: a shard is only shared when it is equal.
    #[test]
    fn nodes_sharing_renders_each_equal_their_own_render(
        edits in proptest::collection::vec(edit(), 1..10),
    ) {
        let (mut s, other, other_bindings, _renders, mut a, mut b) = two_nodes();
        for e in std::iter::once(None).chain(edits.iter().map(Some)) {
            if let Some(e) = e {
                perform(&mut s, e);
            }
            a.update(&s.node, &s.model, &s.config, &s.bindings);
            b.update(&other, &s.model, &s.config, &other_bindings);
            let fresh_a = desired(&s.node, &s.model, &s.config, &s.bindings);
            let fresh_b = desired(&other, &s.model, &s.config, &other_bindings);
            prop_assert_eq!(&a.materialize().state, &fresh_a.state, "after {:?}", e);
            prop_assert_eq!(&b.materialize().state, &fresh_b.state, "after {:?}", e);
            prop_assert_eq!(&b.materialize().services, &fresh_b.services);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    /// Two nodes sharing their renders, each update settled and rendered a few services at a
    /// time in turns (as the daemon's node tasks take turns), the second node sometimes
    /// missing a model: each holds exactly what a render of its own gives after every edit,
    /// whether it took the other's group ids or placed its own.
    #[test]
    fn nodes_taking_each_others_group_ids_each_equal_their_own_render(
        edits in proptest::collection::vec((edit(), proptest::bool::weighted(0.25)), 1..10),
        settle in 1..4usize,
        turn in 1..3usize,
    ) {
        let (mut s, other, other_bindings, _renders, mut a, mut b) = two_nodes();
        a.settle_up_to(settle);
        b.settle_up_to(settle);
        for (e, b_misses) in std::iter::once((None, false)).chain(edits.iter().map(|(e, m)| (Some(e), *m))) {
            if let Some(e) = e {
                perform(&mut s, e);
            }
            let (mut on_a, _) = a.begin_update(&s.node, &s.model, &s.config, &s.bindings);
            let mut on_b = (!b_misses)
                .then(|| b.begin_update(&other, &s.model, &s.config, &other_bindings).0);
            loop {
                let going_a = a.continue_update(&mut on_a, turn).is_some();
                let going_b = on_b
                    .as_mut()
                    .is_some_and(|u| b.continue_update(u, turn).is_some());
                if !going_a && !going_b {
                    break;
                }
            }
            let fresh_a = desired(&s.node, &s.model, &s.config, &s.bindings);
            prop_assert_eq!(&a.materialize().state, &fresh_a.state, "after {:?}", e);
            if !b_misses {
                let fresh_b = desired(&other, &s.model, &s.config, &other_bindings);
                prop_assert_eq!(&b.materialize().state, &fresh_b.state, "after {:?}", e);
            }
        }
    }
}

/// Nodes that give their services the same group names place them once: the second takes
/// each change of the first one's allocator, a part at a time, and still holds exactly its
/// own render. A node that missed a model places its names itself, correctly, and shares the
/// first node's allocator again once both end an update with the same names.
#[test]
fn nodes_with_the_same_group_names_place_them_once() {
    let (mut s, other, other_bindings, renders, mut a, mut b) = two_nodes();
    a.settle_up_to(2);
    b.settle_up_to(2);
    let both = |a: &mut Shards, b: &mut Shards, s: &netvirt::scenario::Scenario| {
        let (mut on_a, _) = a.begin_update(&s.node, &s.model, &s.config, &s.bindings);
        let (mut on_b, _) = b.begin_update(&other, &s.model, &s.config, &other_bindings);
        while a.continue_update(&mut on_a, 2).is_some() | b.continue_update(&mut on_b, 2).is_some()
        {
        }
    };
    both(&mut a, &mut b, &s);
    let counts = renders.counts();
    assert!(counts.ids_placed >= 2, "{counts:?}");
    assert_eq!(counts.ids_taken, counts.ids_placed, "{counts:?}");
    let fresh = desired(&other, &s.model, &s.config, &other_bindings);
    assert_eq!(b.materialize().state, fresh.state);
    // The second node misses a model that adds a service: from then on its allocator is its
    // own, so it places its names itself, and still renders exactly its own state.
    perform(&mut s, &Edit::CopyService(0, 40, false));
    a.update(&s.node, &s.model, &s.config, &s.bindings);
    perform(&mut s, &Edit::CopyService(0, 41, false));
    let before = renders.counts();
    both(&mut a, &mut b, &s);
    let counts = renders.counts();
    assert_eq!(counts.ids_taken, before.ids_taken, "{counts:?}");
    assert!(counts.ids_placed >= before.ids_placed + 2, "{counts:?}");
    let fresh = desired(&other, &s.model, &s.config, &other_bindings);
    assert_eq!(b.materialize().state, fresh.state);
    // Both ended that update with the same names: the second node's allocator was replaced
    // by the first one's, so the next change is placed once again.
    assert_eq!(counts.ids_joined, before.ids_joined + 1, "{counts:?}");
    perform(&mut s, &Edit::CopyService(1, 42, false));
    both(&mut a, &mut b, &s);
    let after = renders.counts();
    assert_eq!(after.ids_taken, counts.ids_taken + 1, "{after:?}");
    assert_eq!(after.ids_placed, counts.ids_placed + 1, "{after:?}");
    let fresh = desired(&other, &s.model, &s.config, &other_bindings);
    assert_eq!(b.materialize().state, fresh.state);
}

/// How many of the scenario's services have something of the node's own in their render:
/// node ports (the node's addresses), external or LB addresses (its uplink's MAC).
fn on_the_node(s: &Scenario) -> usize {
    s.model
        .services
        .values()
        .filter(|svc| {
            svc.ports.iter().any(|p| p.node_port.is_some())
                || !svc.external_ips.is_empty()
                || !svc.lb_ingress_ips.is_empty()
        })
        .count()
}

/// Services that render alike on two nodes are held once; those that differ (node ports on
/// each node's own address) are held per node.
#[test]
fn services_that_render_alike_are_held_once() {
    let (s, other, other_bindings, renders, mut a, mut b) = two_nodes();
    a.update(&s.node, &s.model, &s.config, &s.bindings);
    let one = renders.len();
    assert_eq!(one, s.model.services.len());
    b.update(&other, &s.model, &s.config, &other_bindings);
    let node_ported = on_the_node(&s);
    assert!(
        node_ported > 0 && node_ported < one,
        "{node_ported} of {one}"
    );
    assert_eq!(renders.len(), one + node_ported);
    drop(b);
    assert_eq!(renders.len(), one, "a shard lives while some node holds it");
}

/// A service that cannot render differently from node to node is rendered once for both
/// nodes; the others (node ports, external addresses) once per node.
#[test]
fn services_alike_on_every_node_are_rendered_once() {
    let (s, other, other_bindings, renders, mut a, mut b) = two_nodes();
    a.update(&s.node, &s.model, &s.config, &s.bindings);
    b.update(&other, &s.model, &s.config, &other_bindings);
    let n = s.model.services.len() as u64;
    let per_node = on_the_node(&s) as u64;
    let counts = renders.counts();
    assert_eq!(counts.rendered + counts.reused, 2 * n, "{counts:?}");
    assert!(
        counts.reused >= 1 && counts.reused <= n - per_node,
        "{counts:?}: {per_node} of {n} render per node"
    );
    // The second node's state is still exactly its own render.
    let fresh = desired(&other, &s.model, &s.config, &other_bindings);
    assert_eq!(b.materialize().state, fresh.state);
}

/// A node still on an older model renders that model's services itself, not another node's
/// render of a newer one: a render is taken only for the very service and endpoints it was
/// made from.
#[test]
fn a_node_on_an_older_model_does_not_take_renders_of_a_newer_one() {
    let (mut s, other, other_bindings, renders, mut a, mut b) = two_nodes();
    let old = s.model.clone();
    for svc in 0..s.model.services.len() {
        perform(&mut s, &Edit::AddEndpoint(svc, 200));
    }
    a.update(&s.node, &s.model, &s.config, &s.bindings);
    b.update(&other, &old, &s.config, &other_bindings);
    assert_eq!(renders.counts().reused, 0, "{:?}", renders.counts());
    let fresh = desired(&other, &old, &s.config, &other_bindings);
    assert_eq!(b.materialize().state, fresh.state);
    // Once on the same model, it takes them.
    b.update(&other, &s.model, &s.config, &other_bindings);
    assert!(renders.counts().reused >= 1, "{:?}", renders.counts());
    let fresh = desired(&other, &s.model, &s.config, &other_bindings);
    assert_eq!(b.materialize().state, fresh.state);
}

#[test]
fn an_endpoint_change_touches_only_its_service() {
    let mut s = base();
    let mut shards = Shards::default();
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    let key = ServiceKey::new("default", "web");
    s.model.endpoints.get_mut(&key).unwrap()[0].weight = Some(5);
    let delta = shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(delta.len(), 1, "{delta:?}");
    assert!(matches!(delta[0], netvirt::plan::Step::ModifyGroup(..)));
    let none = shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert!(none.is_empty());
}

#[test]
fn endpoints_leaving_udp_services_are_reported_stale_and_tcp_ones_are_not() {
    let mut s = base();
    let mut shards = Shards::default();
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert!(shards.take_stale().is_empty());
    for name in ["dns", "web"] {
        s.model
            .endpoints
            .get_mut(&ServiceKey::new("default", name))
            .unwrap()
            .retain(|e| e.address.to_string() != "10.244.0.11");
    }
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    let stale = shards.take_stale();
    assert_eq!(
        stale,
        vec![netvirt::shards::StaleConntrack {
            ip_proto: 17,
            address: "10.96.0.53".parse().unwrap(),
            port: 53,
            endpoint: "10.244.0.11".parse().unwrap(),
            endpoint_port: 5353,
        }]
    );
    assert!(
        shards.take_stale().is_empty(),
        "each stale entry is taken once"
    );
    // A UDP service losing all its endpoints makes them all stale.
    s.model.endpoints.remove(&ServiceKey::new("default", "dns"));
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(shards.take_stale().len(), 1);
}

/// After an update, the conflicts to log are those of what it rendered: a service copied
/// onto another's address collides once; an unrelated change reports nothing; a refresh
/// reports everything.
#[test]
fn recent_conflicts_are_those_of_the_last_update() {
    let mut s = base();
    let mut shards = Shards::default();
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert!(
        shards.recent_conflicts().is_empty(),
        "{:?}",
        shards.recent_conflicts()
    );
    perform(&mut s, &Edit::CopyService(0, 7, true));
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    let recent = shards.recent_conflicts().to_vec();
    assert!(
        !recent.is_empty(),
        "a colliding copy reports its collisions"
    );
    assert_eq!(recent.len(), shards.conflicts().len(), "{recent:?}");
    // Service 2 is neither the copied service nor its copy.
    let (copied, unrelated) = (nth_key(&s, 0).unwrap(), nth_key(&s, 2).unwrap());
    assert!(
        !unrelated.name.starts_with(&*copied.name),
        "{copied} {unrelated}"
    );
    perform(&mut s, &Edit::AddEndpoint(2, 77));
    let delta = shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert!(!delta.is_empty());
    assert!(
        shards.recent_conflicts().is_empty(),
        "{:?}",
        shards.recent_conflicts()
    );
    assert_eq!(
        shards.conflicts().len(),
        recent.len(),
        "the collision is still there"
    );
    shards.refresh(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(shards.recent_conflicts(), shards.conflicts());
}

/// The conflict count kept as shards change follows the winner of a shared flow: two
/// colliding copies of a service each collide with it, and once it leaves, the first copy
/// wins and the second still collides with it.
#[test]
fn the_conflict_count_follows_the_winner_of_a_shared_flow() {
    let mut s = base();
    let mut shards = Shards::default();
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    let counted = |shards: &Shards| {
        assert_eq!(shards.conflict_count(), shards.conflicts().len());
        shards.conflict_count()
    };
    let alone = counted(&shards);
    let original = nth_key(&s, 0).unwrap();
    perform(&mut s, &Edit::CopyService(0, 7, true));
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    let one_copy = counted(&shards);
    assert!(one_copy > alone, "a colliding copy collides");
    perform(&mut s, &Edit::CopyService(0, 8, true));
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    let two_copies = counted(&shards);
    assert_eq!(two_copies - alone, 2 * (one_copy - alone));
    // The original, which sorts first and wins, leaves.
    s.model.services.remove(&original);
    s.model.endpoints.remove(&original);
    shards.update(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(counted(&shards), one_copy, "the copies still collide");
}

/// IPv6 addresses svcflow does not program are said, not skipped silently: a dual-stack
/// service's IPv6 cluster IP and an IPv6 endpoint each get a conflict, and the IPv4 part is
/// rendered as before.
#[test]
fn a_second_family_adds_its_own_flows_and_never_mixes_endpoints() {
    let mut s = base();
    let key = nth_key(&s, 0).unwrap();
    let before = desired(&s.node, &s.model, &s.config, &s.bindings);
    // An IPv6 endpoint on an IPv4-only service serves nothing, and says so.
    if let Some(eps) = s.model.endpoints.get_mut(&key) {
        let mut v6 = eps[0].clone();
        v6.address = "fd00:10:244::11".parse().unwrap();
        eps.push(v6);
    }
    let v4_only = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert_eq!(
        v4_only.state, before.state,
        "an unserved endpoint adds nothing"
    );
    if s.model.endpoints.contains_key(&key) {
        assert!(
            v4_only
                .conflicts
                .iter()
                .any(|c| c.contains("fd00:10:244::11")
                    && c.contains("no IPv6 address")
                    && c.contains(&key.to_string())),
            "{:?}",
            v4_only.conflicts
        );
    }
    // With an IPv6 cluster IP it is dual-stack: the IPv4 part stays as it was, and the IPv6
    // address gets flows of its own, to groups holding IPv6 endpoints only.
    s.model
        .services
        .get_mut(&key)
        .unwrap()
        .cluster_ips
        .push("fd00:10:96::10".parse().unwrap());
    let after = desired(&s.node, &s.model, &s.config, &s.bindings);
    assert!(after.conflicts.is_empty(), "{:?}", after.conflicts);
    for (k, e) in &before.state.flows {
        assert_eq!(after.state.flows.get(k), Some(e), "IPv4 flow {k:?} is kept");
    }
    for (id, g) in &before.state.groups {
        assert_eq!(
            after.state.groups.get(id),
            Some(g),
            "IPv4 group {id} is kept"
        );
    }
    let v6_flows: Vec<_> = after
        .state
        .flows
        .keys()
        .filter(|k| {
            k.table == 40
                && k.get(openflow::Field::Ipv6Dst).map(|f| f.value)
                    == Some(u128::from(
                        "fd00:10:96::10".parse::<std::net::Ipv6Addr>().unwrap(),
                    ))
        })
        .collect();
    assert!(
        !v6_flows.is_empty(),
        "the IPv6 cluster IP has table-40 flows"
    );
    for (name, port) in &after.services {
        let v6 = name.ends_with("/ipv6");
        assert!(
            port.backends.iter().all(|b| b.ip.is_ipv6() == v6),
            "{name} mixes families: {:?}",
            port.backends
        );
    }
    if s.model.endpoints.contains_key(&key) {
        assert!(
            after
                .services
                .iter()
                .any(|(n, p)| n.starts_with(&key.to_string())
                    && n.ends_with("/ipv6")
                    && !p.backends.is_empty()),
            "{:?}",
            after.services.keys().collect::<Vec<_>>()
        );
    }
}
