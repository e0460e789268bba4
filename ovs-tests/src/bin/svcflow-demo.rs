//! README command 1 (`bash scripts/demo.sh`): the cluster story, on the lab of
//! `ovs-tests/lab/three-nodes.toml` (`ovs_tests::lab`). Three Open vSwitch nodes on a routed
//! underlay, one `svcflow run` driving them all over TLS (`LabOptions::tls`: certificates from
//! `ovs-pki`, each node's naming it); service `web` is posted over REST (HTTPS) with its
//! endpoints on n2 and n3, reached by ClusterIP from a pod on n1 and by NodePort from a host
//! outside the cluster through n1; a Local LoadBalancer's health-check node port is probed on
//! every node and answered through each node's switch with its own local endpoints; n2's
//! `ovs-vswitchd` is killed and restarted and the traffic
//! works again; a second svcflow replica joins as a standby (the REST state is in a 3-member
//! Raft-clustered `ovsdb-server`) and takes every switch over when the first is killed, with
//! no connection failing, and its dry run (`svcflow plan`) finds every switch holding its
//! model; svcflow stops with SIGTERM, the switches keep forwarding, and the
//! lab is torn down. The lab is torn down on an error or a panic too; `svcflow-demo --clean-up` (which
//! `scripts/demo.sh` runs on exit) removes what a demo killed midway left.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ovs_tests::lab::{Lab, LabOptions, REST, Topology};
use ovs_tests::raft::RaftCluster;
use ovs_tests::{SandboxError, wait_for};

const TOPOLOGY: &str = include_str!("../../lab/three-nodes.toml");
const VIP: &str = "10.96.0.10:80";
/// The IPv6 service's cluster IP and port.
const VIP6: &str = "[fd00:10:96::10]:80";
/// Service lb's cluster IP and health-check node port.
const LB_VIP: &str = "10.96.0.20";
const LB_HEALTH: u16 = 32090;
const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/svcflow.ovsschema");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args == ["--clean-up"] {
        return clean_up();
    }
    if !args.is_empty() {
        eprintln!("usage: svcflow-demo [--clean-up]");
        return ExitCode::FAILURE;
    }
    let started = Instant::now();
    match run() {
        Ok(()) => {
            println!(
                "== done in {:.1} s; nothing is left behind",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Removes the namespaces, switches and directories of a demo (or any sandbox) whose process
/// is gone, e.g. one stopped with Ctrl-C.
fn clean_up() -> ExitCode {
    let before = ovs_tests::leftover_namespaces();
    ovs_tests::reap_dead_sandboxes();
    let removed = before.len() - before.len().min(ovs_tests::leftover_namespaces().len());
    if removed > 0 {
        println!("svcflow-demo: removed {removed} namespaces left by a stopped run");
    }
    ExitCode::SUCCESS
}

fn invalid(why: impl Into<String>) -> SandboxError {
    SandboxError::Invalid(why.into())
}

/// `svcflow ARGS…` in the controller's namespace: its output, or an error with what it said
/// (named by its subcommand) if it failed.
fn svcflow_cli(lab: &Lab, args: &[&str]) -> Result<String, SandboxError> {
    let out = lab.svcflow(args)?;
    if !out.status.success() {
        return Err(invalid(format!(
            "svcflow {}: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `count` TCP connections from `from` (a pod or the outside host) to `target`; prints how
/// many each backend answered and the source address it saw. Fails unless every connection
/// was answered by one of `backends`.
fn connections(
    lab: &Lab,
    from: &str,
    target: &str,
    count: u32,
    backends: &[&str],
) -> Result<(), SandboxError> {
    let host = match lab.outside() {
        Some(outside) if outside.spec.name == from => outside,
        _ => lab.pod(from)?,
    };
    let extra = ["--peer", "--timeout-ms", "2000"];
    // The first connection after a change may race the last switch's barrier.
    wait_for(
        &format!("{from} to reach {target}"),
        Duration::from_secs(10),
        || {
            host.connect("tcp", target, 1, &extra)
                .ok()
                .filter(|a| a.iter().all(Result::is_ok))
        },
    )?;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for attempt in host.connect("tcp", target, count, &extra)? {
        let answer = attempt.map_err(|why| invalid(format!("{from} -> {target}: {why}")))?;
        let (backend, source) = answer.split_once('@').unwrap_or((&answer, "?"));
        if !backends.contains(&backend) {
            return Err(invalid(format!(
                "{from} -> {target}: answered by {backend}, not one of {backends:?}"
            )));
        }
        *seen
            .entry(format!("{backend} (saw the client as {source})"))
            .or_default() += 1;
    }
    for (backend, n) in &seen {
        println!("   {n:>2} answered by {backend}");
    }
    Ok(())
}

/// The flows and groups on node `node`'s switch.
fn counts(lab: &Lab, node: &str) -> Result<(usize, usize), SandboxError> {
    let sandbox = lab.node(node)?;
    let flows = sandbox.dump_flows("br-int")?;
    let groups = sandbox.dump_groups("br-int")?;
    Ok((
        flows.lines().filter(|l| l.contains("actions=")).count(),
        groups.lines().filter(|l| l.contains("group_id=")).count(),
    ))
}

/// The pod names of each node, for the summary.
fn pods_of(lab: &Lab, node: &str) -> String {
    lab.topology()
        .node(node)
        .map(|n| {
            n.pods
                .iter()
                .map(|p| format!("{} {}", p.name, p.ip))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// Prints the lines of `log` that `start` finds something in, from there, each with its time
/// in milliseconds after `since` (seconds of the day).
fn print_log_since(log: &str, since: f64, start: &dyn Fn(&str) -> Option<usize>) {
    for line in log.lines() {
        let Some(at) = start(line) else {
            continue;
        };
        let when = ovs_tests::svcflow::log_time_of_day(line)
            .map(|t| format!("{:>6.0}", (t - since).rem_euclid(86400.0) * 1e3))
            .unwrap_or_else(|| "     ?".into());
        println!("   {when}  {}", &line[at..]);
    }
}

/// A second replica joins as a standby on every switch; the first is killed; the standby
/// masters every switch, a change made through it reaches all of them, and a client loop
/// running through it all loses no connection.
fn standby_takes_over(lab: &mut Lab) -> Result<(), SandboxError> {
    println!(
        "== a second svcflow replica joins (its own OpenFlow port {}, REST {}, same store): \
         every bridge gets its target, and it stands by as a slave",
        lab.replica_target(1),
        lab.replica_rest_addr(1)
    );
    lab.start_replica(1)?;
    let standby_log = |lab: &Lab| lab.replica(1).map(|d| d.log()).unwrap_or_default();
    wait_for(
        "the standby on every switch",
        Duration::from_secs(30),
        || (standby_log(lab).matches("is a slave").count() >= 3).then_some(()),
    )?;
    for node in lab.node_names() {
        let targets = lab.node(node)?.vsctl(&["get-controller", "br-int"])?;
        let targets: Vec<&str> = targets.lines().collect();
        println!(
            "   {node}: $ ovs-vsctl get-controller br-int: {}",
            targets.join(", ")
        );
    }
    println!("   replica 1 logged:");
    for line in standby_log(lab)
        .lines()
        .filter(|l| l.contains("is a slave"))
    {
        if let Some(at) = line.find("node n") {
            println!("   {}", &line[at..]);
        }
    }
    let probes = lab.pod("n1-b")?.connection_loop(VIP)?;
    println!(
        "== replica 0, the master of every switch, killed (SIGKILL) while pod n1-b opens a \
         connection to {VIP} every 25 ms"
    );
    let log_before = standby_log(lab).len();
    let killed_at = ovs_tests::svcflow::time_of_day();
    let killed = Instant::now();
    lab.kill_replica(0);
    wait_for(
        "replica 1 to master every switch",
        Duration::from_secs(30),
        || {
            let log = standby_log(lab);
            let since = log.get(log_before..).unwrap_or("");
            (since.matches("master of its switch").count() >= 3).then_some(())
        },
    )?;
    println!("   replica 1 logged (ms after the kill):");
    let log = standby_log(lab);
    print_log_since(log.get(log_before..).unwrap_or(""), killed_at, &|line| {
        if line.contains("master") || line.contains("synced") {
            line.find("node n")
        } else {
            None
        }
    });
    let body = ovs_tests::svcflow::fixture::service_body("svc-after", "10.96.0.77");
    let path = "service:service-information/services/svc-after";
    println!(
        "   $ curl -X PUT {} -d '{{svc-after: 10.96.0.77:80}}'",
        lab.curl_target(1, &format!("/restconf/config/{path}"))
    );
    lab.replica_rest(1, "PUT", path, &body)?;
    for node in lab.node_names() {
        lab.node(node)?
            .wait_for_flow("br-int", "nw_dst=10.96.0.77", Duration::from_secs(30))?;
    }
    println!(
        "   svc-after is on all three switches {:.0} ms after the kill",
        killed.elapsed().as_secs_f64() * 1e3
    );
    // The new master's dry run: it reads every switch it now masters and diffs it with its
    // own render, changing nothing.
    let rest = lab.replica_cli_rest_flags(1);
    let mut args = vec!["plan"];
    args.extend(rest.iter().map(String::as_str));
    let planned = svcflow_cli(lab, &args)?;
    println!(
        "   $ svcflow plan {}   (replica 1's dry run: each switch read back and diffed with \
         its render)",
        rest.join(" ")
    );
    for line in planned.lines() {
        println!("   {line}");
    }
    let mut probes = probes;
    let seen = probes.samples().len();
    probes.wait_for_samples(seen + 40, Duration::from_secs(30))?;
    let samples = probes.stop()?;
    let failed = samples.iter().filter(|s| s.outcome.is_err()).count();
    if failed > 0 {
        return Err(invalid(format!(
            "{failed} of {} connections failed across the takeover",
            samples.len()
        )));
    }
    println!(
        "   {} connections from n1-b across the takeover, none failed",
        samples.len()
    );
    Ok(())
}

fn run() -> Result<(), SandboxError> {
    let mut topology = Topology::parse(TOPOLOGY)?;
    // The demo posts the service itself, below.
    let web = topology
        .services
        .pop()
        .ok_or_else(|| invalid("three-nodes.toml has no service"))?;
    // The demo's cluster is dual-stack: each node also gets an IPv6 address on the underlay
    // (the router routes its IPv6 pod CIDR to it) and an IPv6 pod CIDR, each pod an IPv6
    // address, and service web (later) an IPv6 cluster IP beside its IPv4 one.
    for (k, node) in topology.nodes.iter_mut().enumerate() {
        let n = k as u16 + 1;
        node.address6 = Some(std::net::Ipv6Addr::new(
            0xfd00,
            0x50,
            0,
            0,
            0,
            0,
            0,
            0x10 + n,
        ));
        node.pod_cidr6 = Some(
            ipnet::Ipv6Net::new(
                std::net::Ipv6Addr::new(0xfd00, 0x10, 0x244, n, 0, 0, 0, 0),
                64,
            )
            .map_err(|e| invalid(e.to_string()))?,
        );
        for pod in &mut node.pods {
            // 10.244.1.12 -> fd00:10:244:1::12: the same digits, read in hex.
            let last = u16::from_str_radix(&pod.ip.octets()[3].to_string(), 16)
                .map_err(|e| invalid(e.to_string()))?;
            pod.ip6 = Some(std::net::Ipv6Addr::new(
                0xfd00, 0x10, 0x244, n, 0, 0, 0, last,
            ));
        }
    }
    let dual_stack_web = ovs_tests::lab::ServiceSpec {
        cluster_ip6: Some(
            "fd00:10:96::10"
                .parse()
                .map_err(|_| invalid("bad IPv6 cluster IP"))?,
        ),
        ..web.clone()
    };

    println!(
        "== a three-node cluster: each node its own ovsdb-server and ovs-vswitchd (userspace \
         datapath) in its own namespace, on a routed underlay 192.168.50.0/24, and one \
         `svcflow run` driving all three"
    );
    let started = Instant::now();
    // The REST state lives in a Raft cluster, so that a second replica can share it below.
    let raft = RaftCluster::start(std::path::Path::new(SCHEMA), 3)?;
    raft.wait_leader(Duration::from_secs(30))?;
    let options = LabOptions {
        daemon_args: vec![
            format!("--store=ovsdb:{}", raft.unix_remote_list()),
            // No node moves to the standby on its own during the demo.
            "--hold-down=120".into(),
        ],
        // TLS, as svcflow requires beyond loopback: each node's OVS presents a certificate
        // that names the node.
        tls: true,
        ..LabOptions::default()
    };
    let mut lab = Lab::up(&topology, &options)?;
    println!(
        "   svcflow run --openflow-listen 0.0.0.0:6653 --openflow-advertise {}:6653 --rest-listen \
         {REST} --ovsdb-remote n1=unix:…/db.sock (and n2, n3) --store ovsdb:unix:…/m0.sock,… \
         --ssl-private-key svcflow-privkey.pem --ssl-certificate svcflow-cert.pem --ssl-ca-cert \
         switchca/cacert.pem (its REST state in a 3-member Raft-clustered ovsdb-server; \
         certificates from ovs-pki)",
        lab.controller_ip()
    );
    println!(
        "   over OVSDB, svcflow created br-int (fail mode secure) and its gateway port svc-gw on \
         every node, and each br-int dialled it over TLS on the management network (ssl:), \
         presenting a certificate that names its node ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    for node in lab.node_names() {
        let spec = lab.node_spec(node)?;
        let v6 = |x: Option<String>| x.map(|x| format!(" and {x}")).unwrap_or_default();
        println!(
            "   {node}: address {}{}, pods {}{} ({})",
            spec.address,
            v6(spec.address6.map(|a| a.to_string())),
            spec.pod_cidr,
            v6(spec.pod_cidr6.map(|c| c.to_string())),
            pods_of(&lab, node)
        );
    }
    println!("   the nodes and pods were posted over svcflow's REST northbound, as below");

    println!("== posting service web and its endpoints (on n2 and n3; none on n1) over REST");
    println!(
        "   $ curl -X PUT {} -d '{{web: {}:{} -> {}, node port {}}}'",
        lab.curl_target(0, &format!("/restconf/config/{}", web.rest_path())),
        web.cluster_ip,
        web.port,
        web.target(),
        web.node_port.map(|p| p.to_string()).unwrap_or_default()
    );
    println!(
        "   $ curl -X PUT {} -d '{{endpoints of web: {}}}'",
        lab.curl_target(
            0,
            &format!("/restconf/config/{}", web.endpoints_rest_path())
        ),
        web.endpoints.join(", ")
    );
    let posted = Instant::now();
    let web_spec = web.clone();
    lab.put_service(web)?;
    lab.wait_synced(Duration::from_secs(30))?;
    println!(
        "   every node's switch holds web's group and flows {:.0} ms after the first PUT",
        posted.elapsed().as_secs_f64() * 1e3
    );
    println!("   $ svcflow-lab status");
    for line in lab.status().lines() {
        println!("   {line}");
    }

    println!("== ClusterIP: 20 connections from pod n1-b (on n1, which has no endpoint) to {VIP}");
    println!("   n1's switch picks an endpoint and sends the connection across the underlay:");
    connections(&lab, "n1-b", VIP, 20, &["n2-a", "n3-a"])?;

    println!(
        "== Dual-stack: service web gets a second cluster IP, {VIP6} (REST's \
         cluster-ip-addresses, Kubernetes' clusterIPs), its pods' IPv6 addresses behind it; 20 \
         connections from pod n1-b"
    );
    let posted = Instant::now();
    lab.put_service(dual_stack_web)?;
    lab.wait_synced(Duration::from_secs(30))?;
    println!(
        "   every node's switch holds web's IPv6 group beside its IPv4 one (IPv6 buckets load \
         the endpoint into reg12..reg15) {:.0} ms after the first PUT; n1's switch answers the \
         pod's neighbour solicitation for its IPv6 gateway, and DNATs to [endpoint]:8080:",
        posted.elapsed().as_secs_f64() * 1e3
    );
    connections(&lab, "n1-b", VIP6, 20, &["n2-a", "n3-a"])?;

    let n1 = lab.node_spec("n1")?.address;
    let node_port = format!("{n1}:30080");
    let outside = lab
        .outside()
        .map(|o| o.ip().to_string())
        .unwrap_or_default();
    println!(
        "== NodePort: 20 connections from the outside host {outside} to n1's address \
         {node_port}"
    );
    println!(
        "   n1 has no endpoint: it forwards each connection to n2 or n3, masqueraded to its own \
         address so that the reply comes back through n1:"
    );
    connections(&lab, "outside", &node_port, 20, &["n2-a", "n3-a"])?;

    println!(
        "== a LoadBalancer with externalTrafficPolicy Local: service lb ({LB_VIP}:80, node port \
         30090), the same endpoints as web, and health-check node port {LB_HEALTH}"
    );
    let lb = ovs_tests::lab::ServiceSpec {
        name: "lb".into(),
        cluster_ip: LB_VIP.parse().map_err(|_| invalid("bad cluster IP"))?,
        node_port: Some(30090),
        ..web_spec.clone()
    };
    let path = lb.rest_path();
    let mut body: serde_json::Value =
        serde_json::from_str(&lb.rest_body()).map_err(|e| invalid(e.to_string()))?;
    lab.put_service(lb)?;
    body["service:services"][0]["service:external-traffic-policy"] = "Local".into();
    body["service:services"][0]["service:health-check-node-port"] = LB_HEALTH.into();
    lab.rest("PUT", &path, &body.to_string())?;
    lab.wait_synced(Duration::from_secs(30))?;
    println!(
        "   a load balancer probes every node's address on {LB_HEALTH} and sends traffic only to \
         those that answer 200; svcflow runs on none of them, so each node's switch sends the \
         probe to svcflow, which answers for that node with its own local endpoints:"
    );
    for node in lab.node_names() {
        let address = lab.node_spec(node)?.address;
        let url = format!("http://{address}:{LB_HEALTH}/healthz");
        let outside_host = lab
            .outside()
            .ok_or_else(|| invalid("the lab has no outside host"))?;
        let answer = outside_host.run(&["curl", "-s", "-i", "--max-time", "3", &url])?;
        let status = answer.lines().next().unwrap_or_default().trim_end();
        let body = answer.lines().last().unwrap_or_default();
        println!("   $ curl {url}   ({node})\n     {status}  {body}");
    }

    println!(
        "== the operational view (GET /restconf/operational/service:service-information): \
         each node's groups for web and lb, read from its switch"
    );
    // OVS folds datapath counters into its statistics about once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let out = lab.get("/restconf/operational/service:service-information")?;
    let op: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| invalid(format!("operational view: {e}")))?;
    let services = op
        .pointer("/service:service-information/services")
        .and_then(|v| v.as_array());
    for service in services.into_iter().flatten() {
        for group in service["groups"].as_array().into_iter().flatten() {
            let buckets: Vec<String> = group["buckets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| {
                    format!(
                        "{} weight {}: {} packets",
                        b["endpoint"].as_str().unwrap_or("?"),
                        b["weight"],
                        b["packet-count"]
                    )
                })
                .collect();
            println!(
                "   {} on {}: group {}: {}",
                service["name"].as_str().unwrap_or("?"),
                group["node"].as_str().unwrap_or("?"),
                group["group-id"],
                buckets.join("; ")
            );
        }
    }
    println!("   (n1 chose the endpoint of every connection above; n2 and n3 only delivered them)");

    println!(
        "== what svcflow installed on n1 for web (svcflow ofp dump-groups / dump-flows, the \
         same text as ovs-ofctl)"
    );
    let svcflow = ovs_tests::svcflow::svcflow_binary()?;
    let svcflow = svcflow.to_string_lossy();
    let n1_node = lab.node("n1")?;
    let target = n1_node.mgmt_target("br-int");
    for line in n1_node
        .node(&[&svcflow, "ofp", "dump-groups", &target])?
        .lines()
        .filter(|l| l.contains("type=select"))
    {
        println!("  {line}");
    }
    let flows = n1_node.node(&[&svcflow, "ofp", "dump-flows", &target])?;
    for line in flows
        .lines()
        .filter(|l| l.contains("10.96.0.10") || l.contains("tp_dst=30080"))
    {
        println!("  {line}");
    }
    println!(
        "   ({} flows in all on n1; the full pipeline is in docs/pipeline.md)",
        flows.lines().filter(|l| l.contains("actions=")).count()
    );

    println!(
        "== svcflow trace --node n1 --from default/n1-b --to {VIP}: a tagged probe injected \
         into n1's switch, reported by temporary flows on every switch it crosses"
    );
    let rest = lab.cli_rest_flags();
    let mut args = vec![
        "trace",
        "--node",
        "n1",
        "--from",
        "default/n1-b",
        "--to",
        VIP,
    ];
    args.extend(rest.iter().map(String::as_str));
    let traced = svcflow_cli(&lab, &args)?;
    // The hops and the result; `svcflow trace` also prints each hop's flow and packet.
    for line in traced.lines().filter(|l| {
        l.starts_with("n1 ")
            || l.starts_with("n2 ")
            || l.starts_with("n3 ")
            || l.starts_with("nat:")
            || l.starts_with("result:")
    }) {
        println!("   {line}");
    }

    println!(
        "== n2's ovs-vswitchd killed (SIGKILL) and started again: it comes back with no flow \
         and no group"
    );
    let syncs_before = lab.daemon().syncs().len();
    let log_before = lab.daemon().log().len();
    let killed = Instant::now();
    let killed_at = ovs_tests::svcflow::time_of_day();
    lab.restart_vswitchd("n2")?;
    let restarted = killed.elapsed();
    lab.wait_synced(Duration::from_secs(30))?;
    println!(
        "   ovs-vswitchd ran again with its ports after {:.0} ms; svcflow logged (ms after the \
         kill):",
        restarted.as_secs_f64() * 1e3
    );
    let log = lab.daemon().log();
    print_log_since(log.get(log_before..).unwrap_or(""), killed_at, &|line| {
        line.find("node n2: ").or_else(|| line.find("switch "))
    });
    println!(
        "   every switch connected and holding web again {:.0} ms after the kill",
        killed.elapsed().as_secs_f64() * 1e3
    );
    if lab.daemon().syncs().len() <= syncs_before {
        return Err(invalid("svcflow logged no sync after the restart"));
    }
    println!("   20 connections from pod n2-b (on the restarted node) to {VIP}:");
    connections(&lab, "n2-b", VIP, 20, &["n2-a", "n3-a"])?;
    println!("   and 20 from pod n1-b, through the underlay to n2 and n3:");
    connections(&lab, "n1-b", VIP, 20, &["n2-a", "n3-a"])?;
    println!("   $ svcflow-lab status   (the nodes' lines)");
    for line in lab
        .status()
        .lines()
        .filter(|l| l.starts_with("node ") || l.contains("switch"))
    {
        println!("   {line}");
    }

    standby_takes_over(&mut lab)?;

    println!(
        "== svcflow (replica 1) stopped with SIGTERM: the switches keep their flows and keep \
         forwarding"
    );
    let mut before = BTreeMap::new();
    for node in lab.node_names() {
        before.insert(node, counts(&lab, node)?);
    }
    let last = lab
        .replica(1)
        .ok_or_else(|| invalid("replica 1 is not running"))?;
    let pid = last
        .pid()
        .ok_or_else(|| invalid("svcflow is not running"))?;
    last.signal("TERM")?;
    wait_for("svcflow to exit", Duration::from_secs(10), || {
        (!ovs_tests::lab::process_is_alive(pid)).then_some(())
    })?;
    for node in lab.node_names() {
        let (flows, groups) = counts(&lab, node)?;
        if (flows, groups) != before[node] {
            return Err(invalid(format!(
                "{node}: {flows} flows and {groups} groups after svcflow stopped, {:?} before",
                before[node]
            )));
        }
        println!("   {node}: still {flows} flows and {groups} groups");
    }
    println!("   20 connections from pod n1-b to {VIP}, with no controller:");
    connections(&lab, "n1-b", VIP, 20, &["n2-a", "n3-a"])?;

    println!("== tearing the lab down");
    let id = lab.id().to_string();
    lab.down()?;
    drop(raft);
    let left: Vec<String> = ovs_tests::leftover_namespaces()
        .into_iter()
        .filter(|ns| {
            ns.starts_with(&format!(
                "{}{}-",
                ovs_tests::NETNS_PREFIX,
                std::process::id()
            ))
        })
        .collect();
    if !left.is_empty() {
        return Err(invalid(format!("lab {id} left namespaces: {left:?}")));
    }
    Ok(())
}
