//! Golden scenarios: each folder under `tests/scenarios/` holds `input.toml` and the expected
//! `flows.txt` and `groups.txt`, in the exact text of `ovs-ofctl dump-flows --no-stats` and
//! `dump-groups`. Set `SVCFLOW_BLESS=1` to rewrite the expected files after an intended
//! change, then review the diff like code.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::path::Path;

use netvirt::scenario::Scenario;

fn render(dir: &Path) -> (String, String) {
    let text = std::fs::read_to_string(dir.join("input.toml")).unwrap();
    let s = Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let out = s.render();
    assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
    // Determinism: a second run gives the same bytes.
    let again = s.render();
    assert_eq!((&again.flows, &again.groups), (&out.flows, &out.groups));
    (out.flows, out.groups)
}

#[test]
fn scenarios_match_their_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let bless = std::env::var_os("SVCFLOW_BLESS").is_some();
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("input.toml").is_file() {
            continue;
        }
        seen += 1;
        let (flows, groups) = render(&dir);
        for (file, actual) in [("flows.txt", flows), ("groups.txt", groups)] {
            let path = dir.join(file);
            if bless {
                std::fs::write(&path, &actual).unwrap();
                continue;
            }
            let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
                panic!("{} is missing; run with SVCFLOW_BLESS=1", path.display())
            });
            assert_eq!(
                actual,
                expected,
                "{} differs (SVCFLOW_BLESS=1 rewrites it)",
                path.display()
            );
        }
    }
    assert!(seen > 0, "no scenario found under {}", root.display());
}

/// `docs/pipeline.md` quotes flows and groups; each quoted line must be one the golden
/// scenario really produces, so the document cannot drift from the code.
#[test]
fn the_pipeline_document_quotes_only_real_output() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("../docs/pipeline.md")).unwrap();
    let mut rendered = String::new();
    for name in [
        "node-services",
        "big-service",
        "service-semantics",
        "topology",
        "pod-macs",
        "overlay",
        "minimal-form",
        "dual-stack",
        "overlay6",
        "overlay-mixed",
    ] {
        let (flows, groups) = render(&root.join("tests/scenarios").join(name));
        rendered.push_str(&flows);
        rendered.push_str(&groups);
    }
    let produced: Vec<&str> = rendered.lines().collect();
    let quoted: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with(" cookie=") || l.starts_with(" group_id="))
        .collect();
    assert!(
        quoted.len() >= 20,
        "the document quotes only {} lines",
        quoted.len()
    );
    for line in quoted {
        assert!(
            produced.contains(&line),
            "docs/pipeline.md quotes a line netvirt does not produce:\n{line}"
        );
    }
}

/// A flow_mod is written from the instructions' packed encoding as it is kept, not decoded
/// and encoded again: for every flow of every scenario its bytes are those of the same
/// flow_mod holding the decoded list, and they decode back to that list.
#[test]
fn flow_mods_are_written_from_the_packed_instructions_byte_for_byte() {
    use netvirt::apply::flow_mod;
    use openflow::msg::{Body, FlowModCommand};
    use openflow::{Instructions, Message};

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let (mut encoded, mut flows) = (0, 0);
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("input.toml")) else {
            continue;
        };
        let desired = Scenario::parse(&text).unwrap().desired();
        for (key, e) in &desired.state.flows {
            flows += 1;
            for command in [FlowModCommand::Add, FlowModCommand::ModifyStrict] {
                let Body::FlowMod(sent) = flow_mod(command, key, Some(e)) else {
                    panic!("not a flow_mod");
                };
                encoded += usize::from(matches!(sent.instructions, Instructions::Encoded(_)));
                let mut listed = sent.clone();
                listed.instructions = Instructions::List(e.instructions().into_owned());
                let bytes = Message::new(9, Body::FlowMod(sent)).encode().unwrap();
                let want = Message::new(9, Body::FlowMod(listed.clone()))
                    .encode()
                    .unwrap();
                assert_eq!(bytes, want, "{}: {key:?}", dir.display());
                let back = Message::decode(&bytes).unwrap();
                assert_eq!(back.body, Body::FlowMod(listed), "{}", dir.display());
            }
        }
    }
    assert!(flows > 100, "{flows} flows");
    // Every flow's instructions are kept in their encoding.
    assert_eq!(encoded, 2 * flows);
}

/// A node's tunnel endpoints are its first address of each family, and two nodes reach each
/// other through the tunnel over a family both have (IPv4 when both have both). A node with no
/// family in common with this one (or with no address) cannot be reached, and its peers say so
/// (a conflict, kept in the nodes view) rather than leaving its pods without a route in
/// silence; so does a node with no address at all. Once this node has an address of the
/// peer's family too, the peer is reached over it (the `overlay-mixed` scenario holds such a
/// cluster's flows); an all-IPv6 cluster has no conflict (`overlay6`).
#[test]
fn an_overlay_peer_of_the_other_family_is_reported_not_skipped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let text = |name: &str| std::fs::read_to_string(root.join(name).join("input.toml")).unwrap();
    for (scenario, peer_ip, cidr, why, own_other) in [
        (
            "overlay",
            "fd00:50::16",
            "fd00:10:244:6::/64",
            "no address family in common: its tunnel endpoints are fd00:50::16 (IPv6), \
             this node's 192.168.50.11 (IPv4)",
            "fd00:50::11",
        ),
        (
            "overlay6",
            "192.168.50.16",
            "10.244.6.0/24",
            "no address family in common: its tunnel endpoints are 192.168.50.16 (IPv4), \
             this node's fd00:50::11 (IPv6)",
            "192.168.50.11",
        ),
    ] {
        let mut s = Scenario::parse(&text(scenario)).unwrap();
        assert!(s.desired().conflicts.is_empty(), "{scenario}");
        let mut n6 = s.model.nodes["n2"].clone();
        n6.name = "n6".into();
        n6.ips = vec![peer_ip.parse().unwrap()];
        n6.pod_cidrs = vec![cidr.parse().unwrap()];
        s.model.nodes.insert(n6.name.clone(), n6);
        let conflicts = s.desired().conflicts;
        assert_eq!(conflicts.len(), 1, "{scenario}: {conflicts:?}");
        assert!(
            conflicts[0].starts_with("node n6: no tunnel to it")
                && conflicts[0].contains(why)
                && conflicts[0].contains(cidr),
            "{scenario}: {conflicts:?}"
        );
        // This node gets an address of the peer's family too: the peer is reached over it.
        let mut both = s.clone();
        both.node.ips.push(own_other.parse().unwrap());
        both.model
            .nodes
            .insert(both.node.name.clone(), both.node.clone());
        let out = both.desired();
        assert!(out.conflicts.is_empty(), "{scenario}: {:?}", out.conflicts);
        let field = if peer_ip.contains(':') {
            "tun_ipv6_dst"
        } else {
            "tun_dst"
        };
        let routed = out.state.flows.iter().any(|(k, e)| {
            let text = netvirt::flow::DumpFlow(k, e).to_string();
            text.contains(&format!("dst={cidr} ")) && text.contains(&format!("{peer_ip}->{field}"))
        });
        assert!(
            routed,
            "{scenario}: {cidr} should go to {peer_ip} by {field}"
        );
        // A peer with no address at all.
        s.model.nodes.get_mut("n6").unwrap().ips.clear();
        let conflicts = s.desired().conflicts;
        assert!(
            conflicts[0].starts_with("node n6: no tunnel to it (it has no address)"),
            "{scenario}: {conflicts:?}"
        );
    }
    // The node itself without an address.
    let mut s = Scenario::parse(&text("overlay")).unwrap();
    s.node.ips.clear();
    s.model.nodes.insert(s.node.name.clone(), s.node.clone());
    let conflicts = s.desired().conflicts;
    assert!(
        conflicts
            .iter()
            .any(|c| c.starts_with("node n1: no address, so no tunnel endpoint")),
        "{conflicts:?}"
    );
}
