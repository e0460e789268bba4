//! One scenario's node on a real switch, driven by svcflow's own engine as the daemon drives
//! it: the harness the pipeline tests share (`tests/pipeline.rs` over IPv4,
//! `tests/pipeline6.rs` dual-stack). Each test file attaches its node's hosts to a
//! [`Sandbox`] (the two families need different ones) and hands them to
//! [`ScenarioNode::new`]; this module connects the switch to svcflow, syncs the scenario's
//! model, answers the switch's packet-ins as the daemon does, and checks that the switch holds
//! exactly netvirt's render, as `ovs-ofctl` prints it.
//!
//! I/O: all of it (the switch session, `ovs-vsctl` and `ovs-ofctl`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use netvirt::agent::{SyncReport, serve_packet_ins};
use netvirt::desired::{DesiredState, desired};
use netvirt::engine::Engine;
use netvirt::flow::{DumpFlow, DumpGroup};
use netvirt::health::HealthCheck;
use netvirt::model::ServiceKey;
use netvirt::scenario::Scenario;
use openflow::driver::{DriverConfig, Listener};

use crate::{Host, Process, Sandbox};

/// The node's bridge.
pub const BR: &str = "br-int";

/// What the cookie of a flow the switch learned (session affinity) starts with, as
/// `ovs-ofctl dump-flows` prints it: those flows are the switch's own, not netvirt's.
const LEARNED: &str = " cookie=0x5341";

/// The golden scenario `name` (`netvirt/tests/scenarios/NAME/input.toml`).
///
/// # Panics
/// If it cannot be read or parsed: the test cannot run.
pub fn scenario(name: &str) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../netvirt/tests/scenarios")
        .join(name)
        .join("input.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A scenario's node: its switch, its hosts, and svcflow's engine once connected.
pub struct ScenarioNode {
    pub sb: Sandbox,
    pub scenario: Scenario,
    /// The pods, by name, each attached on its ofport.
    pub pods: BTreeMap<String, Host>,
    /// The host on the uplink.
    pub ext: Host,
    /// The pods' servers, stopped with the node.
    _servers: Vec<Process>,
    /// svcflow's OpenFlow listener, which the switch dials as its controller.
    listener: Option<Listener>,
    /// svcflow's engine on the switch's current connection.
    pub engine: Option<Engine>,
    /// What the node's health-check node ports answer, for the packet-in server, as the
    /// daemon keeps it: from the desired state of the last sync.
    health: tokio::sync::watch::Sender<BTreeMap<u16, HealthCheck>>,
}

impl ScenarioNode {
    /// The node of `scenario` whose hosts `sb` holds (bridge [`BR`]).
    pub fn new(
        sb: Sandbox,
        scenario: Scenario,
        pods: BTreeMap<String, Host>,
        ext: Host,
        servers: Vec<Process>,
    ) -> Self {
        Self {
            sb,
            scenario,
            pods,
            ext,
            _servers: servers,
            listener: None,
            engine: None,
            health: tokio::sync::watch::channel(BTreeMap::new()).0,
        }
    }

    /// netvirt's render of the scenario, which must have no conflicts.
    ///
    /// # Panics
    /// If it has some.
    pub fn desired(&self) -> DesiredState {
        let s = &self.scenario;
        let out = desired(&s.node, &s.model, &s.config, &s.bindings);
        assert!(out.conflicts.is_empty(), "{:?}", out.conflicts);
        out
    }

    /// Points the switch at a listener of svcflow's (a unix socket in the sandbox) and takes
    /// the connection. Setting the first controller flushes the switch, so this comes first.
    ///
    /// # Panics
    /// If the listener cannot bind or the switch does not connect.
    pub async fn connect_controller(&mut self) {
        // ovs-vswitchd accepts unix controllers only inside its run directory.
        let sock = self.sb.dir().join("run/svcflow.sock");
        let listener = Listener::bind(
            &format!("punix:{}", sock.display()),
            DriverConfig::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("binding {}: {e}", sock.display()));
        self.listener = Some(listener);
        self.sb
            .set_controller(BR, &format!("unix:{}", sock.display()))
            .unwrap_or_else(|e| panic!("setting the controller: {e}"));
        self.accept().await;
    }

    /// Accepts the switch's (next) connection and starts an engine and a packet-in server
    /// for it.
    ///
    /// # Panics
    /// If the switch does not connect within 15 s, or is another datapath.
    pub async fn accept(&mut self) {
        let listener = self
            .listener
            .as_mut()
            .expect("connect_controller binds the listener first");
        let switch = tokio::time::timeout(Duration::from_secs(15), listener.accept())
            .await
            .expect("the switch did not connect")
            .unwrap_or_else(|e| panic!("accepting the switch: {e}"));
        assert_eq!(switch.datapath_id(), self.dpid());
        tokio::spawn(serve_packet_ins(
            switch.clone(),
            self.health.subscribe(),
            netvirt::health_answer::random_secret(),
        ));
        self.engine = Some(Engine::new(switch));
    }

    /// The bridge's datapath id, as `ovs-vsctl` reads it.
    ///
    /// # Panics
    /// If it cannot be read.
    pub fn dpid(&self) -> u64 {
        let text = self
            .sb
            .vsctl(&["get", "bridge", BR, "datapath_id"])
            .unwrap_or_else(|e| panic!("reading the datapath id: {e}"));
        u64::from_str_radix(text.trim().trim_matches('"'), 16)
            .unwrap_or_else(|e| panic!("datapath id {text:?}: {e}"))
    }

    /// Syncs the scenario through svcflow's engine, as the daemon does, and checks that the
    /// switch then holds exactly the render.
    ///
    /// # Panics
    /// If there is no engine, the sync fails, or the switch holds anything else.
    pub async fn sync(&mut self) -> SyncReport {
        let want = self.desired();
        let s = &self.scenario;
        let report = self
            .engine
            .as_mut()
            .expect("connect_controller starts the engine first")
            .sync(&s.node, &s.model, &s.config, &s.bindings)
            .await
            .unwrap_or_else(|e| panic!("sync: {e}"));
        self.assert_switch_holds(&want);
        self.health.send_replace(want.health);
        report
    }

    /// The switch must hold exactly the desired state, as `ovs-ofctl` prints it (the flows
    /// it learned for session affinity aside).
    ///
    /// # Panics
    /// If it holds anything else, naming the lines that differ.
    pub fn assert_switch_holds(&self, want: &DesiredState) {
        let expected = want
            .state
            .flows
            .iter()
            .map(|(k, v)| DumpFlow(k, v).to_string())
            .collect();
        let actual = self.dump(|l| !l.starts_with(LEARNED)).into_iter().collect();
        assert_same_lines(actual, expected, "flows");
        let expected = want
            .state
            .groups
            .iter()
            .map(|(id, g)| DumpGroup(*id, g).to_string())
            .collect();
        let actual = self
            .sb
            .dump_groups(BR)
            .unwrap_or_else(|e| panic!("dump-groups: {e}"))
            .lines()
            .filter(|l| l.starts_with(" group_id="))
            .map(str::to_string)
            .collect();
        assert_same_lines(actual, expected, "groups");
    }

    /// The pod `name`.
    ///
    /// # Panics
    /// If the node has no such pod.
    pub fn pod(&self, name: &str) -> &Host {
        self.pods
            .get(name)
            .unwrap_or_else(|| panic!("no pod {name}"))
    }

    /// The flows the switch learned for session affinity (cookie mark `0x5341`), in `table`
    /// or in every table.
    pub fn learned(&self, table: Option<u8>) -> Vec<String> {
        let table = table.map(|t| format!(" table={t},"));
        self.dump(|l| {
            l.starts_with(LEARNED) && table.as_ref().is_none_or(|t| l.contains(t.as_str()))
        })
    }

    /// The pod `client` sends UDP to `service_address` from one fixed source port, so
    /// conntrack pins it to one of `service`'s endpoints; that endpoint (its address given by
    /// `address_of` from the name it answers with) is then removed from the model and synced.
    /// The sync must flush its conntrack entry, the client must move to another endpoint
    /// within a second and never come back, and no UDP conntrack entry from the removed
    /// address may remain in the service zone.
    ///
    /// # Panics
    /// If any of that fails.
    pub async fn udp_client_leaves_a_removed_endpoint(
        &mut self,
        client: &str,
        service_address: &str,
        service: &ServiceKey,
        address_of: impl Fn(&Self, &str) -> IpAddr,
    ) {
        let mut stream = self
            .pod(client)
            .probe_loop(
                "udp",
                service_address,
                &[
                    "--src-port",
                    "40053",
                    "--gap-ms",
                    "50",
                    "--timeout-ms",
                    "200",
                ],
            )
            .unwrap_or_else(|e| panic!("the UDP client: {e}"));
        stream
            .wait_for_samples(5, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("the UDP client: {e}"));
        let pinned = match stream.samples().last().map(|s| s.outcome.clone()) {
            Some(Ok(name)) => name,
            Some(Err(e)) => panic!("the UDP client got no answer: {e}"),
            None => panic!("the UDP client has no sample"),
        };
        let address = address_of(self, &pinned);
        self.scenario
            .model
            .endpoints
            .get_mut(service)
            .unwrap_or_else(|| panic!("{service:?} has no endpoints"))
            .retain(|e| e.address != address);
        let removed = Instant::now();
        let report = self.sync().await;
        assert_eq!(report.conntrack_flushed, 1, "{report:?}");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let samples = stream
            .stop()
            .unwrap_or_else(|e| panic!("the UDP client: {e}"));
        let after: Vec<_> = samples.iter().filter(|x| x.at > removed).collect();
        let moved = after
            .iter()
            .find(|x| matches!(&x.outcome, Ok(name) if *name != pinned))
            .unwrap_or_else(|| panic!("the client never left {pinned}: {after:?}"));
        let took = moved.at - removed;
        eprintln!(
            "the UDP client to {service_address} moved off {pinned} {took:?} after the removal"
        );
        assert!(took < Duration::from_secs(1), "moved only after {took:?}");
        assert!(
            after
                .iter()
                .filter(|x| x.at > moved.at)
                .all(|x| !matches!(&x.outcome, Ok(name) if *name == pinned)),
            "the client went back to {pinned}: {after:?}"
        );
        let ct = self
            .sb
            .dump_conntrack(Some(self.scenario.config.service_zone))
            .unwrap_or_else(|e| panic!("dump-conntrack: {e}"));
        let gone = format!("src={address},");
        assert!(
            !ct.lines()
                .any(|l| l.starts_with("udp") && l.contains(&gone)),
            "a conntrack entry from {address} survived:\n{ct}"
        );
    }

    /// The lines of `ovs-ofctl dump-flows` that `keep` keeps.
    fn dump(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        self.sb
            .dump_flows(BR)
            .unwrap_or_else(|e| panic!("dump-flows: {e}"))
            .lines()
            .filter(|l| keep(l))
            .map(str::to_string)
            .collect()
    }
}

/// Fails with the lines that differ (sorted; each clipped to 400 characters), not with whole
/// dumps, which can be megabytes.
///
/// # Panics
/// If `actual` and `expected` hold other lines.
pub fn assert_same_lines(mut actual: Vec<String>, mut expected: Vec<String>, what: &str) {
    actual.sort();
    expected.sort();
    if actual == expected {
        return;
    }
    let clip = |l: &&String| l.chars().take(400).collect::<String>();
    let missing: Vec<String> = expected
        .iter()
        .filter(|l| actual.binary_search(l).is_err())
        .map(|l| clip(&l))
        .collect();
    let extra: Vec<String> = actual
        .iter()
        .filter(|l| expected.binary_search(l).is_err())
        .map(|l| clip(&l))
        .collect();
    panic!(
        "{what} on the switch differ from netvirt's ({} on the switch, {} expected)\n\
         missing from the switch:\n{}\nonly on the switch:\n{}",
        actual.len(),
        expected.len(),
        missing.join("\n"),
        extra.join("\n")
    );
}

/// Whether every answer in `counts` came from one of `allowed`.
pub fn only(counts: &BTreeMap<String, usize>, allowed: &[&str]) -> bool {
    counts.keys().all(|k| allowed.contains(&k.as_str()))
}

/// A host's IPv6 link-local address, once its duplicate address detection has finished.
///
/// # Panics
/// If it has none within 10 s.
pub fn link_local(host: &Host) -> String {
    crate::wait_for(
        "a usable IPv6 link-local address",
        Duration::from_secs(10),
        || {
            let out = host
                .run(&[
                    "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link",
                ])
                .ok()?;
            if out.contains("tentative") {
                return None;
            }
            let addr = out
                .split_whitespace()
                .skip_while(|w| *w != "inet6")
                .nth(1)?;
            Some(addr.split('/').next()?.to_string())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}
