//! IPv6 through svcflow on a real Open vSwitch: the `dual-stack` scenario's node, installed by
//! svcflow's own engine, with real IPv6 traffic between namespace pods, the node's own host
//! and an external host on the uplink. The switch must print exactly netvirt's render (so OVS
//! accepts every IPv6 flow svcflow encodes), answer neighbour solicitations for the virtual
//! gateways, learn the MAC of a pod the model gives none from its own solicitations, route
//! pods to pods, balance v6 services over v6 endpoints (hairpin included), serve node ports,
//! external and load-balancer addresses on the uplink (source ranges enforced), refuse at once
//! what no endpoint serves (TCP RST, ICMPv6 port unreachable), keep ClientIP affinity, flush a
//! removed endpoint's UDP conntrack, and let the node's host reach services and its own v6
//! node port through the gateway port.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;
use std::time::{Duration, Instant};

use netvirt::flow::DumpFlow;
use netvirt::model::ServiceKey;
use netvirt::node_setup::{NodeSetup, host_gateway_commands};
use ovs_tests::scenario_node::{BR, ScenarioNode as Node, link_local, only, scenario};
use ovs_tests::{Host, HostSpec, Sandbox, tally};

/// The external host on the uplink (also the uplink's next hop), in both families.
const EXT_IP: &str = "198.18.0.1/24";
const EXT_IP6: &str = "2001:db8:18::99/64";
/// An address of the external host inside ext6's IPv6 source range 2001:db8:99::/48.
const EXT_IN_RANGE: &str = "2001:db8:99::1";
/// The MAC the pods' virtual gateway answers with.
const GATEWAY_MAC: &str = "0a:58:0a:f4:00:01";
/// The MAC of p3, which the model does not know.
const P3_MAC: &str = "02:00:00:00:00:13";

/// `[address]:port`.
fn v6(address: &str, port: u16) -> String {
    format!("[{address}]:{port}")
}

/// Builds the dual-stack node: pods with each of their addresses (an IPv6-only pod without a
/// model MAC gets one of its own), the gateway port with its host side, and a dual-stack
/// external host on the uplink.
fn build() -> Node {
    assert!(Path::new(env!("CARGO_BIN_EXE_svcflow-probe")).is_file());
    let scenario = scenario("dual-stack");
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    sb.add_bridge(BR).unwrap();
    let node = &scenario.node;
    let gateway = netvirt::desired::virtual_gateway_ip(node)
        .unwrap()
        .to_string();
    let gateway6 = netvirt::desired::virtual_gateway_ip6(node)
        .unwrap()
        .to_string();
    let prefix = node.pod_cidr4().unwrap().prefix_len();
    let prefix6 = node.pod_cidr6().unwrap().prefix_len();
    let uplink = scenario.bindings.uplink.unwrap();
    let ext = sb
        .add_host(
            BR,
            HostSpec::new(
                "ext",
                EXT_IP,
                &uplink.next_hop_mac.to_string(),
                uplink.ofport as u16,
            )
            .with_ipv6(EXT_IP6, None),
        )
        .unwrap();
    // A second address, inside ext6's source range, which the external host uses as its
    // source only where a test routes through it.
    ext.run(&[
        "ip",
        "-6",
        "addr",
        "add",
        &format!("{EXT_IN_RANGE}/128"),
        "dev",
        "eth0",
        "nodad",
    ])
    .unwrap();
    let gw = scenario.bindings.gateway.unwrap();
    let mac = format!("mac=\"{}\"", gw.mac);
    sb.add_internal_port_with(BR, "svc-gw", gw.ofport as u16, &[&mac])
        .unwrap();
    for command in host_gateway_commands(&NodeSetup::default(), &scenario.config, node) {
        let argv: Vec<&str> = command.iter().map(String::as_str).collect();
        sb.node(&argv).unwrap();
    }
    let mut pods = BTreeMap::new();
    let mut servers = Vec::new();
    for pod in scenario.model.pods.values() {
        let Some(&ofport) = scenario.bindings.ofports.get(&pod.iface_id) else {
            continue;
        };
        let ip4 = pod.ips.iter().find(|ip| ip.is_ipv4());
        let ip6 = pod.ips.iter().find(|ip| ip.is_ipv6()).unwrap();
        let ip6 = format!("{ip6}/{prefix6}");
        let mac = pod.mac.map_or(P3_MAC.to_string(), |m| m.to_string());
        let spec = match ip4 {
            Some(ip4) => HostSpec::new(&pod.name, &format!("{ip4}/{prefix}"), &mac, ofport as u16)
                .with_gateway(&gateway)
                .with_ipv6(&ip6, Some(&gateway6)),
            None => HostSpec::ipv6_only(&pod.name, &ip6, &mac, ofport as u16, Some(&gateway6)),
        };
        let host = sb.add_host(BR, spec).unwrap();
        servers.push(host.serve(&pod.name, &["tcp:8080", "udp:5353"]).unwrap());
        pods.insert(pod.name.clone(), host);
    }
    Node::new(sb, scenario, pods, ext, servers)
}

/// What the dual-stack tests ask of their node beyond the shared harness.
trait DualStack {
    fn ip6(&self, name: &str) -> String;
    fn p3_speaks(&self);
}

impl DualStack for Node {
    /// The pod's IPv6 address.
    fn ip6(&self, name: &str) -> String {
        self.pod(name).ip6().unwrap().to_string()
    }

    /// p3 has no MAC in the model: the switch learns it from p3's own neighbour solicitation,
    /// which p3 sends when it first talks through its gateway (here to p1's server).
    fn p3_speaks(&self) {
        let p1 = v6(&self.ip6("p1"), 8080);
        let got = tally(&self.pod("p3").connect("tcp", &p1, 1, &[]).unwrap());
        assert_eq!(got.get("p1"), Some(&1), "p3 to p1: {got:?}");
        assert_eq!(
            self.learned(Some(51)).len(),
            1,
            "{:#?}",
            self.learned(Some(51))
        );
    }
}

/// The dual-stack node with svcflow's engine in control and the render installed.
async fn installed() -> Node {
    let mut node = build();
    node.connect_controller().await;
    let report = node.sync().await;
    assert_eq!(report.flows_added, node.desired().state.flows.len());
    node
}

fn add(total: &mut BTreeMap<String, usize>, counts: BTreeMap<String, usize>) {
    for (k, v) in counts {
        *total.entry(k).or_insert(0) += v;
    }
}

/// `--peer` answers (`NAME@ADDRESS`) split into the endpoint's name and the source address it
/// saw.
fn peers(counts: &BTreeMap<String, usize>) -> Vec<(String, IpAddr)> {
    counts
        .keys()
        .map(|k| {
            let (name, ip) = k
                .split_once('@')
                .unwrap_or_else(|| panic!("not a --peer answer: {k}"));
            (name.to_string(), ip.parse().unwrap())
        })
        .collect()
}

/// Adds `address` (/64) to the host with duplicate address detection and returns its
/// `ip addr` line once DAD has finished (`dadfailed` if it found a duplicate).
fn dad(host: &Host, address: &str) -> String {
    let with_prefix = format!("{address}/64");
    host.run(&["ip", "-6", "addr", "add", &with_prefix, "dev", "eth0"])
        .unwrap();
    ovs_tests::wait_for(
        &format!("DAD of {address}"),
        Duration::from_secs(10),
        || {
            let out = host
                .run(&["ip", "-6", "addr", "show", "dev", "eth0"])
                .ok()?;
            let line = out.lines().find(|l| l.contains(&with_prefix))?.to_string();
            (!line.contains("tentative") || line.contains("dadfailed")).then_some(line)
        },
    )
    .unwrap()
}

/// Whether `from` gets answers to 2 pings of `target`.
fn pings(from: &Host, target: &str) -> bool {
    from.output(&["ping", "-6", "-c", "2", "-i", "0.2", "-W", "1", target])
        .unwrap()
        .status
        .success()
}

/// The pod's neighbour entry for `address` (`ip -6 neigh show`).
fn neighbour(host: &Host, address: &str) -> String {
    host.run(&["ip", "-6", "neigh", "show", address, "dev", "eth0"])
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dual_stack_scenario_installs_exactly() {
    // `installed` checks that the switch prints exactly netvirt's flows and groups, which
    // only holds if OVS accepted every IPv6 match and action svcflow encoded.
    let mut node = installed().await;
    let want = node.desired();
    let v6_flows = want
        .state
        .flows
        .iter()
        .map(|(k, v)| DumpFlow(k, v).to_string())
        .filter(|l| l.contains("ipv6") || l.contains("icmp6") || l.contains("tcp6"))
        .count();
    assert!(v6_flows >= 40, "only {v6_flows} IPv6 flows rendered");
    assert!(node.learned(Some(43)).is_empty() && node.learned(Some(51)).is_empty());
    // Converged: the next sync changes nothing.
    assert!(node.sync().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_resolve_their_v6_gateway_and_a_pod_without_a_mac_is_learned_from_its_solicitation() {
    let node = installed().await;
    let gateway6 = netvirt::desired::virtual_gateway_ip6(&node.scenario.node)
        .unwrap()
        .to_string();
    // p1 resolves its gateway by a neighbour solicitation that the switch answers (with the
    // router flag, as the gateway is a router) when it first sends through it: to a service.
    let got = tally(
        &node
            .pod("p1")
            .connect("tcp", &v6("fd00:10:96::10", 80), 3, &[])
            .unwrap(),
    );
    assert!(
        only(&got, &["p1", "p2"]) && got.values().sum::<usize>() == 3,
        "p1 to web over IPv6: {got:?}"
    );
    let entry = neighbour(node.pod("p1"), &gateway6);
    assert!(
        entry.contains(&format!("lladdr {GATEWAY_MAC} router"))
            && !entry.contains("FAILED")
            && !entry.contains("INCOMPLETE"),
        "p1's neighbour entry of its gateway {gateway6}: {entry:?}"
    );
    // p2 is on p1's link (same /64) and resolves, by proxy, to the gateway MAC as well.
    let got = tally(
        &node
            .pod("p1")
            .connect("tcp", &v6(&node.ip6("p2"), 8080), 3, &[])
            .unwrap(),
    );
    assert_eq!(got.get("p2"), Some(&3), "p1 to p2 over IPv6: {got:?}");
    let entry = neighbour(node.pod("p1"), &node.ip6("p2"));
    assert!(
        entry.contains(&format!("lladdr {GATEWAY_MAC}")),
        "p2 should resolve to the gateway MAC: {entry:?}"
    );

    // Duplicate address detection (an NS from `::`) is not proxy-answered like other
    // solicitations, which would fail every new address: it goes over the namespace's L2
    // segment (the ELAN), where only a real duplicate answers.
    let dad_flow = || {
        // The datapath's packets reach the rules' counters at a revalidation round.
        node.sb.appctl(&["revalidator/wait"]).unwrap();
        node.sb
            .flow_stats(BR)
            .unwrap()
            .into_iter()
            .find(|(f, _)| f.contains("table=10, priority=110,icmp6,ipv6_src=::,"))
            .map(|(_, (_, packets))| packets)
            .expect("no DAD flow")
    };
    let before = dad_flow();
    let fresh = dad(node.pod("p2"), "fd00:10:244::112");
    assert!(!fresh.contains("dadfailed"), "{fresh}");
    assert!(
        dad_flow() > before,
        "p2's DAD solicitation missed the DAD flow"
    );
    // p1's own address, on p2 (same namespace): p1 defends it, and p2 finds the duplicate.
    let duplicate = dad(node.pod("p2"), &node.ip6("p1"));
    assert!(duplicate.contains("dadfailed"), "{duplicate}");

    // Link-local addresses are not routed: they stay on the namespace's segment, where p2
    // (same namespace as p1) answers and p3 (another namespace) is out of reach.
    let (p2_ll, p3_ll) = (link_local(node.pod("p2")), link_local(node.pod("p3")));
    assert!(
        pings(node.pod("p1"), &format!("{p2_ll}%eth0")),
        "p1 to {p2_ll}"
    );
    assert!(
        !pings(node.pod("p1"), &format!("{p3_ll}%eth0")),
        "p1 reached {p3_ll}"
    );

    // p3 has no MAC in the model: the switch knows none until p3 solicits.
    assert!(
        node.learned(Some(51)).is_empty(),
        "{:#?}",
        node.learned(Some(51))
    );
    node.p3_speaks();
    let learned = node.learned(Some(51));
    let mac = u64::from_str_radix(&P3_MAC.replace(':', ""), 16).unwrap();
    let loads_mac = learned[0].contains(&format!("load:{mac:#x}->NXM_OF_ETH_DST[]"));
    assert!(
        learned[0].contains(&format!("ipv6_dst={}", node.ip6("p3"))) && loads_mac,
        "{learned:#?}"
    );
    // (p3 solicited p1, on its link, and got the gateway MAC.)
    let entry = neighbour(node.pod("p3"), &node.ip6("p1"));
    assert!(entry.contains(GATEWAY_MAC), "{entry:?}");
    // Now p3 is reachable, from its own namespace's pods and others'.
    let got = tally(
        &node
            .pod("p1")
            .connect("tcp", &v6(&node.ip6("p3"), 8080), 3, &[])
            .unwrap(),
    );
    assert_eq!(got.get("p3"), Some(&3), "p1 to p3 over IPv6: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v6_cluster_ips_spread_over_v6_endpoints_and_a_dual_stack_service_answers_both() {
    let node = installed().await;
    node.p3_speaks();
    let web = ["p1", "p2"];
    // Pods reach each other directly over IPv6, across namespaces too.
    for (client, server) in [("p1", "p2"), ("p2", "p1"), ("p1", "p3"), ("p3", "p2")] {
        let got = tally(
            &node
                .pod(client)
                .connect("tcp", &v6(&node.ip6(server), 8080), 2, &[])
                .unwrap(),
        );
        assert_eq!(got.get(server), Some(&2), "{client} to {server}: {got:?}");
        let got = tally(
            &node
                .pod(client)
                .connect("udp", &v6(&node.ip6(server), 5353), 2, &[])
                .unwrap(),
        );
        assert_eq!(
            got.get(server),
            Some(&2),
            "{client} to {server} (UDP): {got:?}"
        );
    }
    let ping = node
        .pod("p1")
        .output(&[
            "ping",
            "-6",
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            "-s",
            "3000",
            &node.ip6("p3"),
        ])
        .unwrap();
    // (3000 bytes: fragments, which the userspace conntrack reassembles.)
    assert!(
        ping.status.success(),
        "p1 cannot ping p3 with fragmented echoes: {}",
        String::from_utf8_lossy(&ping.stdout)
    );

    // TCP to the v6 cluster IP spreads over both v6 endpoints from several clients.
    let cluster6 = v6("fd00:10:96::10", 80);
    let mut total = BTreeMap::new();
    for client in ["p3", "p1", "p2"] {
        let counts = tally(&node.pod(client).connect("tcp", &cluster6, 40, &[]).unwrap());
        assert!(only(&counts, &web), "{client}: {counts:?}");
        assert_eq!(counts.values().sum::<usize>(), 40, "{client}: {counts:?}");
        add(&mut total, counts);
    }
    assert!(
        total["p1"] >= 10 && total["p2"] >= 10,
        "uneven spread: {total:?}"
    );

    // The node port on the pods' v6 gateway address.
    let gw = tally(
        &node
            .pod("p3")
            .connect("tcp", &v6("fd00:10:244::1", 30080), 10, &[])
            .unwrap(),
    );
    assert!(
        only(&gw, &web) && gw.values().sum::<usize>() == 10,
        "gateway NodePort: {gw:?}"
    );

    // UDP to the v6 dns6 service: every request from every client answered by an endpoint.
    let mut udp = BTreeMap::new();
    for client in ["p3", "p1", "p2"] {
        add(
            &mut udp,
            tally(
                &node
                    .pod(client)
                    .connect(
                        "udp",
                        &v6("fd00:10:96::53", 53),
                        5,
                        &["--timeout-ms", "1000"],
                    )
                    .unwrap(),
            ),
        );
    }
    assert!(
        only(&udp, &web) && udp.values().sum::<usize>() == 15,
        "{udp:?}"
    );

    // The dual-stack service answers on both cluster IPs; each connection reaches an
    // endpoint of its own family, which sees the client's own address of that family.
    let v4 = tally(
        &node
            .pod("p3")
            .connect("tcp", "10.96.0.10:80", 1, &[])
            .unwrap_or_default(),
    );
    assert!(
        v4.keys().all(|k| k.starts_with("err")),
        "p3 has no IPv4: {v4:?}"
    );
    for (client, target, family6) in [
        ("p1", "10.96.0.10:80".to_string(), false),
        ("p1", cluster6.clone(), true),
        ("p3", cluster6.clone(), true),
    ] {
        let counts = tally(
            &node
                .pod(client)
                .connect("tcp", &target, 20, &["--peer"])
                .unwrap(),
        );
        assert_eq!(counts.values().sum::<usize>(), 20, "{counts:?}");
        for (endpoint, seen) in peers(&counts) {
            assert!(web.contains(&endpoint.as_str()), "{target}: {counts:?}");
            if endpoint == client {
                // Hairpin: the pod sees itself as the virtual loopback address.
                continue;
            }
            let want: IpAddr = if family6 {
                node.ip6(client).parse().unwrap()
            } else {
                node.pod(client).ip().parse().unwrap()
            };
            assert_eq!(seen, want, "{client} to {target}: {counts:?}");
        }
    }
    // The IPv6 connections were DNATed to IPv6 endpoints in the service zone.
    let ct = node
        .sb
        .dump_conntrack(Some(node.scenario.config.service_zone))
        .unwrap();
    assert!(
        ct.lines().any(|l| l.contains("dst=fd00:10:96::10")
            && l.contains("reply=(src=fd00:10:244::1")
            && l.contains("sport=8080")),
        "{ct}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_reaches_itself_through_the_v6_cluster_ip() {
    let node = installed().await;
    let counts = tally(
        &node
            .pod("p1")
            .connect("tcp", &v6("fd00:10:96::10", 80), 30, &["--peer"])
            .unwrap(),
    );
    assert_eq!(counts.values().sum::<usize>(), 30, "{counts:?}");
    let loopback = IpAddr::V6(node.scenario.config.loopback_ip6);
    let mut hairpins = 0;
    for (endpoint, seen) in peers(&counts) {
        if endpoint == "p1" {
            hairpins += 1;
            assert_eq!(seen, loopback, "hairpin not SNATed: {counts:?}");
        } else {
            assert_eq!(endpoint, "p2", "{counts:?}");
        }
    }
    assert!(hairpins > 0, "hairpin never chose p1 itself: {counts:?}");
    let ct = node
        .sb
        .dump_conntrack(Some(node.scenario.config.hairpin_zone))
        .unwrap();
    assert!(ct.contains(&format!("dst={loopback}")), "{ct}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_external_host_reaches_v6_node_ports_external_and_lb_ips_within_source_ranges() {
    let node = installed().await;
    node.p3_speaks();
    let ext6: IpAddr = EXT_IP6.split('/').next().unwrap().parse().unwrap();
    // The node port on the node's IPv6 address, from the uplink; the local endpoints see the
    // client itself (no masquerade for local endpoints).
    let np = tally(
        &node
            .ext
            .connect("tcp", &v6("2001:db8:18::10", 30080), 20, &["--peer"])
            .unwrap(),
    );
    assert_eq!(np.values().sum::<usize>(), 20, "NodePort: {np:?}");
    for (endpoint, seen) in peers(&np) {
        assert!(
            ["p1", "p2"].contains(&endpoint.as_str()),
            "NodePort: {np:?}"
        );
        assert_eq!(seen, ext6, "NodePort: {np:?}");
    }
    // The external IP.
    let ext = tally(
        &node
            .ext
            .connect("tcp", &v6("2001:db8:18::50", 80), 5, &[])
            .unwrap(),
    );
    assert_eq!(ext.get("p3"), Some(&5), "external IP: {ext:?}");
    // The LB IP admits only 2001:db8:99::/48 over IPv6: from 2001:db8:18::99 it drops.
    let lb = v6("2001:db8:18::60", 80);
    let outside = node
        .ext
        .connect("tcp", &lb, 2, &["--timeout-ms", "700"])
        .unwrap();
    assert!(
        outside
            .iter()
            .all(|a| a.as_ref().is_err_and(|e| e == "timeout")),
        "LB IP from outside its source ranges: {outside:?}"
    );
    // From inside the range (the route to the LB IP takes the in-range source).
    node.ext
        .run(&[
            "ip",
            "-6",
            "route",
            "add",
            "2001:db8:18::60/128",
            "dev",
            "eth0",
            "src",
            EXT_IN_RANGE,
        ])
        .unwrap();
    let inside = tally(&node.ext.connect("tcp", &lb, 5, &["--peer"]).unwrap());
    assert_eq!(
        inside.get(&format!("p3@{EXT_IN_RANGE}")),
        Some(&5),
        "LB IP from inside its source range: {inside:?}"
    );
    // The source ranges restrict the LB IP only: the cluster IP answers any pod.
    let cluster = tally(
        &node
            .pod("p1")
            .connect("tcp", &v6("fd00:10:96::20", 80), 3, &[])
            .unwrap(),
    );
    assert_eq!(
        cluster.get("p3"),
        Some(&3),
        "ext6's cluster IP: {cluster:?}"
    );
}

/// The controller answers a load balancer's health-check probes through the switch on both of
/// the node's addresses, IPv6 and IPv4, to a real client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_probes_are_answered_on_the_nodes_v6_and_v4_addresses() {
    let node = installed().await;
    for url in [
        "http://[2001:db8:18::10]:32061/healthz",
        "http://198.18.0.10:32061/healthz",
    ] {
        let answer = node
            .ext
            .run(&["curl", "-s", "-i", "--max-time", "3", url])
            .unwrap_or_else(|e| format!("curl failed: {e}"));
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{url}: {answer}");
        assert!(
            answer.ends_with(
                r#"{"service":{"namespace":"other","name":"lb6-local"},"localEndpoints":1,"serviceProxyHealthy":true}"#
            ),
            "{url}: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v6_without_an_endpoint_or_a_service_is_refused_at_once() {
    let node = installed().await;
    let started = Instant::now();
    for (proto, target, what) in [
        ("tcp", v6("fd00:10:96::30", 80), "TCP to empty6"),
        ("udp", v6("fd00:10:96::30", 80), "UDP to empty6's address"),
        ("tcp", v6("fd00:10:96::99", 80), "TCP to an unowned address"),
        ("udp", v6("fd00:10:96::99", 53), "UDP to an unowned address"),
        (
            "tcp",
            v6("fd00:10:96::10", 81),
            "TCP to a port web does not serve",
        ),
    ] {
        let got = node
            .pod("p1")
            .connect(proto, &target, 2, &["--timeout-ms", "3000"])
            .unwrap();
        assert_eq!(got, vec![Err("refused".to_string()); 2], "{what}");
    }
    let host = node
        .sb
        .connect_from_node(
            "tcp",
            &v6("fd00:10:96::30", 80),
            1,
            &["--timeout-ms", "3000"],
        )
        .unwrap();
    assert_eq!(host, vec![Err("refused".to_string())], "the node's host");
    // Refused by a reply, not by giving up: far below one 3 s client timeout.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let served = node
        .pod("p1")
        .connect("tcp", &v6("fd00:10:96::10", 80), 1, &[])
        .unwrap();
    assert!(served[0].is_ok(), "{served:?}");
    // Every refusal went through svcflow's metered packet-ins, none dropped.
    let switch = node.engine.as_ref().unwrap().switch().clone();
    let stats = switch
        .meter_stats(netvirt::pipeline::meter::REFUSE)
        .await
        .unwrap();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert!(stats[0].packet_in_count >= 11, "{stats:?}");
    assert_eq!(stats[0].bands, vec![(0, 0)], "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ip_affinity_over_v6_sticks_and_is_learned() {
    let mut node = installed().await;
    node.p3_speaks();
    let dns6 = v6("fd00:10:96::53", 53);
    let mut chosen = BTreeMap::new();
    for client in ["p3", "p1", "p2"] {
        let counts = tally(
            &node
                .pod(client)
                .connect(
                    "udp",
                    &dns6,
                    10,
                    &["--gap-ms", "20", "--timeout-ms", "1000"],
                )
                .unwrap(),
        );
        assert_eq!(counts.len(), 1, "{client}: affinity broken: {counts:?}");
        let (endpoint, n) = counts.into_iter().next().unwrap();
        assert_eq!(n, 10, "{client}");
        assert!(["p1", "p2"].contains(&endpoint.as_str()), "{endpoint}");
        chosen.insert(client.to_string(), endpoint);
    }
    // One learned flow per client, under the learned cookie, remembering its endpoint.
    let id = node.desired().services["default/dns6:53/udp/ipv6"].groups[0].id;
    let learned = node.learned(Some(43));
    assert_eq!(learned.len(), 3, "{learned:#?}");
    for (client, endpoint) in &chosen {
        let ip: Ipv6Addr = node.ip6(endpoint).parse().unwrap();
        let last = u32::from_be_bytes(ip.octets()[12..].try_into().unwrap());
        let flow = learned
            .iter()
            .find(|l| l.contains(&format!("ipv6_src={} ", node.ip6(client))))
            .unwrap_or_else(|| panic!("nothing learned for {client}: {learned:#?}"));
        assert!(
            flow.contains(&format!(
                "cookie={:#x}",
                netvirt::pipeline::cookie::learned(id)
            )) && flow.contains("idle_timeout=600")
                && flow.contains(&format!("reg5={id:#x}"))
                && flow.contains(&format!("load:{last:#x}->NXM_NX_REG15[]")),
            "{client} to {endpoint}: {flow}"
        );
    }
    // p3's endpoint leaves: p3 moves to the other one and sticks there.
    let gone: IpAddr = node.ip6(&chosen["p3"]).parse().unwrap();
    let key = ServiceKey::new("default", "dns6");
    node.scenario
        .model
        .endpoints
        .get_mut(&key)
        .unwrap()
        .retain(|e| e.address != gone);
    node.sync().await;
    let other = if chosen["p3"] == "p1" { "p2" } else { "p1" };
    let after = tally(
        &node
            .pod("p3")
            .connect("udp", &dns6, 5, &["--timeout-ms", "1000"])
            .unwrap(),
    );
    assert_eq!(
        after.get(other),
        Some(&5),
        "p3 after the removal: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v6_udp_client_moves_to_a_remaining_endpoint_within_a_second_of_its_endpoints_removal() {
    let mut node = installed().await;
    // Without affinity, so only conntrack pins the client (dns6 has it: remove it).
    let key = ServiceKey::new("default", "dns6");
    node.scenario
        .model
        .services
        .get_mut(&key)
        .unwrap()
        .session_affinity = netvirt::model::SessionAffinity::None;
    node.sync().await;
    node.p3_speaks();
    node.udp_client_leaves_a_removed_endpoint(
        "p3",
        &v6("fd00:10:96::53", 53),
        &key,
        |node, pinned| node.ip6(pinned).parse().unwrap(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_host_reaches_the_v6_cluster_ip_and_its_own_v6_node_port() {
    let node = installed().await;
    // Through svc-gw, from the gateway port's v6 host address.
    let cluster = tally(
        &node
            .sb
            .connect_from_node("tcp", &v6("fd00:10:96::10", 80), 20, &["--peer"])
            .unwrap(),
    );
    assert_eq!(cluster.values().sum::<usize>(), 20, "{cluster:?}");
    let host6 = IpAddr::V6(node.scenario.config.gateway_host_ip6);
    for (endpoint, seen) in peers(&cluster) {
        assert!(["p1", "p2"].contains(&endpoint.as_str()), "{cluster:?}");
        assert_eq!(seen, host6, "{cluster:?}");
    }
    // Its own v6 node port: the node's address is on the node (as on a real node's NIC); the
    // `ip6 svcflow` nftables rules send the connection through svc-gw.
    node.sb
        .node(&[
            "ip",
            "-6",
            "addr",
            "add",
            "2001:db8:18::10/128",
            "dev",
            "lo",
        ])
        .unwrap();
    let own = tally(
        &node
            .sb
            .connect_from_node("tcp", &v6("2001:db8:18::10", 30080), 20, &["--peer"])
            .unwrap(),
    );
    assert_eq!(own.values().sum::<usize>(), 20, "{own:?}");
    for (endpoint, seen) in peers(&own) {
        assert!(["p1", "p2"].contains(&endpoint.as_str()), "{own:?}");
        // SNATed by the postrouting rule to the gateway port's address, so replies return.
        assert_eq!(seen, host6, "{own:?}");
    }
    // A node port no service takes is refused at once.
    let unused = node
        .sb
        .connect_from_node(
            "tcp",
            &v6("2001:db8:18::10", 30999),
            1,
            &["--timeout-ms", "3000"],
        )
        .unwrap();
    assert_eq!(unused, vec![Err("refused".to_string())]);
}

/// A service whose one endpoint is not on this node: the external host itself
/// (2001:db8:18::99:8080, "on node n2"), which the node reaches through its uplink. This is
/// the only way a single node exercises masquerade: a connection that arrives from outside
/// (the uplink, or the node's host) and leaves for a remote endpoint is SNATed to the node's
/// IPv6 address, so the endpoint's replies come back through the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_v6_endpoint_is_reached_from_pods_and_masqueraded_from_outside() {
    let mut node = build();
    let key = ServiceKey::new("default", "remote6");
    let mut service = node.scenario.model.services[&ServiceKey::new("default", "web")].clone();
    service.key = key.clone();
    service.uid = "remote6".to_string();
    service.cluster_ips = vec!["fd00:10:96::40".parse().unwrap()];
    service.ports[0].node_port = Some(30081);
    let ext6: IpAddr = EXT_IP6.split('/').next().unwrap().parse().unwrap();
    let endpoint = netvirt::model::Endpoint::new(ext6, Vec::new(), Some("n2".to_string()));
    node.scenario.model.services.insert(key.clone(), service);
    node.scenario
        .model
        .endpoints
        .insert(key.clone(), vec![endpoint]);
    node.connect_controller().await;
    node.sync().await;
    let _server = node.ext.serve("ext", &["tcp:8080"]).unwrap();
    // The external host routes the pods' addresses back through the node.
    node.ext
        .run(&[
            "ip",
            "-6",
            "route",
            "add",
            "fd00:10:244::/64",
            "via",
            "2001:db8:18::10",
            "dev",
            "eth0",
        ])
        .unwrap();
    let node6: IpAddr = "2001:db8:18::10".parse().unwrap();

    // A pod reaches the outside directly, and the remote endpoint through the cluster IP,
    // with its own address (pods are not masqueraded).
    let p1: IpAddr = node.ip6("p1").parse().unwrap();
    for target in [v6("2001:db8:18::99", 8080), v6("fd00:10:96::40", 80)] {
        let got = tally(
            &node
                .pod("p1")
                .connect("tcp", &target, 3, &["--peer"])
                .unwrap(),
        );
        assert_eq!(
            got.get(&format!("ext@{p1}")),
            Some(&3),
            "p1 to {target}: {got:?}"
        );
    }
    // From the uplink, through the node port, back out of the uplink: masqueraded to the
    // node's address, and the replies un-SNATed and un-DNATed on the way back.
    let got = tally(
        &node
            .ext
            .connect("tcp", &v6("2001:db8:18::10", 30081), 5, &["--peer"])
            .unwrap(),
    );
    assert_eq!(
        got.get(&format!("ext@{node6}")),
        Some(&5),
        "NodePort: {got:?}"
    );
    // From the node's host, through svc-gw: masqueraded as well.
    let got = tally(
        &node
            .sb
            .connect_from_node("tcp", &v6("fd00:10:96::40", 80), 5, &["--peer"])
            .unwrap(),
    );
    assert_eq!(
        got.get(&format!("ext@{node6}")),
        Some(&5),
        "node host: {got:?}"
    );
    let ct = node
        .sb
        .dump_conntrack(Some(node.scenario.config.hairpin_zone))
        .unwrap();
    assert!(
        ct.lines().any(|l| l.contains("dst=2001:db8:18::99")
            && l.contains("reply=(src=2001:db8:18::99,dst=2001:db8:18::10")),
        "{ct}"
    );
}

/// A dual-stack service has a group per family: removing one IPv6 endpoint rewrites only the
/// IPv6 group (and drops that endpoint's DNAT flows), incrementally; new IPv6 connections
/// stop reaching it while IPv4 still spreads over both pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_v6_endpoint_rewrites_only_the_v6_group() {
    let mut node = installed().await;
    let before = node.desired();
    let key = ServiceKey::new("default", "web");
    node.scenario
        .model
        .endpoints
        .get_mut(&key)
        .unwrap()
        .retain(|e| e.address.to_string() != "fd00:10:244::12");
    let after = node.desired();
    let v6_group = after.services["default/web:80/tcp/ipv6"].groups[0].id;
    let v4_group = after.services["default/web:80/tcp"].groups[0].id;
    assert_eq!(
        before.state.groups[&v4_group], after.state.groups[&v4_group],
        "the IPv4 group changed"
    );
    let steps = netvirt::plan::plan(&after.state, &before.state);
    assert!(
        steps.iter().all(|s| match s {
            netvirt::plan::Step::ModifyGroup(id, _) => *id == v6_group,
            netvirt::plan::Step::DeleteFlow(k) => k.table == netvirt::pipeline::table::ENDPOINT,
            _ => false,
        }),
        "{steps:?}"
    );
    let report = node.sync().await;
    assert_eq!(
        (report.groups_changed, report.flows_added),
        (1, 0),
        "{report:?}"
    );
    assert!(report.flows_deleted >= 1, "{report:?}");
    let v6only = tally(
        &node
            .pod("p3")
            .connect("tcp", &v6("fd00:10:96::10", 80), 20, &[])
            .unwrap(),
    );
    assert_eq!(v6only.get("p1"), Some(&20), "{v6only:?}");
    let v4 = tally(
        &node
            .pod("p1")
            .connect("tcp", "10.96.0.10:80", 30, &[])
            .unwrap(),
    );
    assert!(
        v4.contains_key("p1") && v4.contains_key("p2"),
        "IPv4 should still spread: {v4:?}"
    );
    assert!(node.sync().await.is_empty());
}

/// Refusals travel back out of the port they came in by: an external client of an IPv6 node
/// port without endpoints is refused at once (TCP RST, ICMPv6 port unreachable) through the
/// uplink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpointless_v6_node_port_refuses_the_external_host_at_once() {
    let mut node = build();
    let key = ServiceKey::new("other", "empty6");
    let service = node.scenario.model.services.get_mut(&key).unwrap();
    service.kind = netvirt::model::ServiceType::NodePort;
    service.ports[0].node_port = Some(30090);
    // And a UDP port on the same node port number.
    let mut udp = service.ports[0].clone();
    udp.name = "dns".to_string();
    udp.protocol = netvirt::model::Protocol::Udp;
    service.ports.push(udp);
    node.connect_controller().await;
    node.sync().await;
    let started = Instant::now();
    let target = v6("2001:db8:18::10", 30090);
    for proto in ["tcp", "udp"] {
        let got = node
            .ext
            .connect(proto, &target, 2, &["--timeout-ms", "3000"])
            .unwrap();
        assert_eq!(
            got,
            vec![Err("refused".to_string()); 2],
            "{proto} to {target}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}
