//! Kubernetes service semantics of slice 2 on a real Open vSwitch: session affinity (ClientIP)
//! and `loadBalancerSourceRanges`, from the golden scenario `service-semantics` (and topology,
//! from `topology`, installed only: its endpoints are on other nodes), installed by
//! svcflow's own switch session and node agent. The switch must print exactly netvirt's flows
//! (besides what it learned), and real connections between namespace pods must stick, spread,
//! pass or be dropped as Kubernetes says.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use netvirt::agent::{SwitchAgent, serve_rejects};
use netvirt::desired::{DesiredState, desired};
use netvirt::flow::{DumpFlow, DumpGroup};
use netvirt::model::ServiceKey;
use netvirt::node_setup::{NodeSetup, host_gateway_commands};
use netvirt::pipeline::cookie;
use netvirt::scenario::Scenario;
use openflow::driver::{DriverConfig, Listener};
use ovs_tests::{Host, HostSpec, Process, Sandbox, tally};

const BR: &str = "br-int";
const EXT_IP: &str = "198.18.0.1/24";

struct Node {
    sb: Sandbox,
    scenario: Scenario,
    pods: BTreeMap<String, Host>,
    ext: Host,
    _servers: Vec<Process>,
    _listener: Listener,
    agent: SwitchAgent,
}

fn scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../netvirt/tests/scenarios")
        .join(name)
        .join("input.toml");
    Scenario::parse(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The scenario's node as `tests/pipeline.rs` builds it (pods, gateway port with its host
/// side, an external host on the uplink), with svcflow's agent in control and the desired
/// state installed.
async fn installed(name: &str) -> Node {
    let scenario = scenario(name);
    let mut sb = Sandbox::start().unwrap_or_else(|e| panic!("cannot start the OVS sandbox: {e}"));
    sb.add_bridge(BR).unwrap();
    let node = &scenario.node;
    let gateway_ip = netvirt::desired::virtual_gateway_ip(node)
        .unwrap()
        .to_string();
    let prefix = node.pod_cidr.unwrap().prefix_len();
    let uplink = scenario.bindings.uplink.unwrap();
    let ext = sb
        .add_host(
            BR,
            HostSpec::new(
                "ext",
                EXT_IP,
                &uplink.next_hop_mac.to_string(),
                uplink.ofport as u16,
            ),
        )
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
        let ip = format!("{}/{prefix}", pod.ips[0]);
        let spec = HostSpec::new(&pod.name, &ip, &pod.mac.unwrap().to_string(), ofport as u16)
            .with_gateway(&gateway_ip);
        let host = sb.add_host(BR, spec).unwrap();
        servers.push(host.serve(&pod.name, &["tcp:8080"]).unwrap());
        pods.insert(pod.name.clone(), host);
    }
    let sock = sb.dir().join("run/svcflow.sock");
    let mut listener = Listener::bind(
        &format!("punix:{}", sock.display()),
        DriverConfig::default(),
    )
    .await
    .unwrap();
    sb.set_controller(BR, &format!("unix:{}", sock.display()))
        .unwrap();
    let switch = tokio::time::timeout(Duration::from_secs(15), listener.accept())
        .await
        .expect("the switch did not connect")
        .unwrap();
    tokio::spawn(serve_rejects(switch.clone()));
    let mut node = Node {
        sb,
        scenario,
        pods,
        ext,
        _servers: servers,
        _listener: listener,
        agent: SwitchAgent::new(switch),
    };
    node.sync().await;
    node
}

impl Node {
    fn desired(&self) -> DesiredState {
        let s = &self.scenario;
        let out = desired(&s.node, &s.model, &s.config, &s.bindings);
        assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
        out
    }

    async fn sync(&mut self) {
        let want = self.desired();
        self.agent.sync(&want).await.unwrap();
        self.assert_switch_holds(&want);
    }

    /// The flows the switch learned for session affinity (cookie mark `0x5341`).
    fn learned(&self) -> Vec<String> {
        self.sb
            .dump_flows(BR)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(" cookie=0x5341"))
            .map(str::to_string)
            .collect()
    }

    /// The switch holds exactly the desired state, as `ovs-ofctl` prints it, besides the
    /// flows it learned.
    fn assert_switch_holds(&self, want: &DesiredState) {
        let mut expected: Vec<String> = want
            .state
            .flows
            .iter()
            .map(|(k, v)| DumpFlow(k, v).to_string())
            .collect();
        let mut actual: Vec<String> = self
            .sb
            .dump_flows(BR)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with(" cookie=0x5341"))
            .map(str::to_string)
            .collect();
        expected.sort();
        actual.sort();
        assert_eq!(
            actual, expected,
            "flows on the switch differ from netvirt's"
        );
        let mut expected: Vec<String> = want
            .state
            .groups
            .iter()
            .map(|(id, g)| DumpGroup(*id, g).to_string())
            .collect();
        let mut actual: Vec<String> = self
            .sb
            .dump_groups(BR)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(" group_id="))
            .map(str::to_string)
            .collect();
        expected.sort();
        actual.sort();
        assert_eq!(
            actual, expected,
            "groups on the switch differ from netvirt's"
        );
    }

    fn pod(&self, name: &str) -> &Host {
        &self.pods[name]
    }
}

fn only(counts: &BTreeMap<String, usize>, allowed: &[&str]) -> bool {
    counts.keys().all(|k| allowed.contains(&k.as_str()))
}

/// The one endpoint that answered every attempt, or a failure naming the spread.
fn one_endpoint(counts: &BTreeMap<String, usize>, n: usize, what: &str) -> String {
    assert_eq!(counts.len(), 1, "{what}: affinity broken: {counts:?}");
    let (name, count) = counts.iter().next().unwrap();
    assert_eq!(*count, n, "{what}: {counts:?}");
    name.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_ip_affinity_sticks_to_one_endpoint_and_without_it_connections_spread() {
    let mut node = installed("service-semantics").await;
    let web = ["p1", "p2"];

    // Without affinity, 30 connections from one client reach both endpoints.
    let spread = tally(
        &node
            .pod("p3")
            .connect("tcp", "10.96.0.71:80", 30, &[])
            .unwrap(),
    );
    assert!(
        only(&spread, &web) && spread.len() == 2,
        "no affinity: {spread:?}"
    );

    // With it, every connection from p3 reaches one endpoint, on the cluster IP and on the
    // node port through the gateway address alike (affinity is per service port).
    let first = tally(
        &node
            .pod("p3")
            .connect("tcp", "10.96.0.70:80", 30, &[])
            .unwrap(),
    );
    let chosen = one_endpoint(&first, 30, "p3 to the cluster IP");
    let via_node_port = tally(
        &node
            .pod("p3")
            .connect("tcp", "10.244.0.1:30070", 10, &[])
            .unwrap(),
    );
    assert_eq!(
        one_endpoint(&via_node_port, 10, "p3 to the node port"),
        chosen
    );
    // Another client sticks as well (to whichever endpoint it got).
    let ext = tally(
        &node
            .ext
            .connect("tcp", "198.18.0.10:30070", 10, &[])
            .unwrap(),
    );
    one_endpoint(&ext, 10, "the external host to the node port");

    // The switch learned one flow per client, under the learned cookie, with the timeout.
    let learned = node.learned();
    assert_eq!(learned.len(), 2, "{learned:#?}");
    let sticky = &node.desired().services["default/sticky:80/tcp"];
    let id = sticky.groups[0].id;
    for l in &learned {
        assert!(
            l.contains(&format!("cookie={:#x}", cookie::learned(id)))
                && l.contains("table=43")
                && l.contains("idle_timeout=600")
                && l.contains(&format!("reg5={id:#x}")),
            "{l}"
        );
    }
    assert!(
        learned.iter().any(|l| l.contains("nw_src=10.244.0.13")),
        "{learned:#?}"
    );

    // A sync leaves what the switch learned alone.
    node.sync().await;
    assert_eq!(node.learned().len(), 2);

    // The remembered endpoint stops serving: p3 moves to the other one, and sticks there.
    let key = ServiceKey::new("default", "sticky");
    let gone: std::net::IpAddr = node.pods[&chosen].ip().parse().unwrap();
    node.scenario
        .model
        .endpoints
        .get_mut(&key)
        .unwrap()
        .retain(|e| e.address != gone);
    node.sync().await;
    let other = if chosen == "p1" { "p2" } else { "p1" };
    let after = tally(
        &node
            .pod("p3")
            .connect("tcp", "10.96.0.70:80", 10, &[])
            .unwrap(),
    );
    assert_eq!(one_endpoint(&after, 10, "p3 after the removal"), other);
    assert!(
        node.learned()
            .iter()
            .any(|l| l.contains("nw_src=10.244.0.13")
                && l.contains(&format!("load:{:#x}->NXM_NX_REG3[]", {
                    let ip: std::net::Ipv4Addr = node.pods[other].ip().parse().unwrap();
                    u32::from(ip)
                }))),
        "{:#?}",
        node.learned()
    );

    // The service is deleted: the switch forgets what it learned for it (delete_learned).
    node.scenario.model.services.remove(&key);
    node.scenario.model.endpoints.remove(&key);
    node.sync().await;
    assert!(node.learned().is_empty(), "{:#?}", node.learned());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_source_ranges_admit_only_the_listed_sources() {
    let node = installed("service-semantics").await;
    // 198.18.0.1 is inside lb-open's 198.18.0.0/28.
    let open = tally(&node.ext.connect("tcp", "198.18.0.80:80", 3, &[]).unwrap());
    assert_eq!(open.get("p3"), Some(&3), "lb-open: {open:?}");
    // lb-closed admits only 203.0.113.0/24: the external host's SYNs are dropped.
    let closed = node
        .ext
        .connect("tcp", "198.18.0.81:80", 2, &["--timeout-ms", "700"])
        .unwrap();
    assert!(closed.iter().all(Result::is_err), "lb-closed: {closed:?}");
    // The ranges restrict the LB IP only: the cluster IP still answers.
    let cluster = tally(
        &node
            .pod("p1")
            .connect("tcp", "10.96.0.81:80", 3, &[])
            .unwrap(),
    );
    assert_eq!(
        cluster.get("p3"),
        Some(&3),
        "lb-closed's cluster IP: {cluster:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_scenario_installs_exactly() {
    // `installed` checks that the switch prints exactly netvirt's flows and groups.
    let node = installed("topology").await;
    assert!(node.learned().is_empty());
}
