//! README command 1 (`bash scripts/demo.sh`): the cluster story, on the lab of
//! `ovs-tests/lab/three-nodes.toml` (`ovs_tests::lab`). Three Open vSwitch nodes on a routed
//! underlay, one `svcflow run` driving them all; service `web` is posted over REST with its
//! endpoints on n2 and n3, reached by ClusterIP from a pod on n1 and by NodePort from a host
//! outside the cluster through n1; n2's `ovs-vswitchd` is killed and restarted and the traffic
//! works again; svcflow stops with SIGTERM, the switches keep forwarding, and the lab is torn
//! down. The lab is torn down on an error or a panic too; `svcflow-demo --clean-up` (which
//! `scripts/demo.sh` runs on exit) removes what a demo killed midway left.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ovs_tests::lab::{Lab, LabOptions, REST, Topology};
use ovs_tests::{SandboxError, wait_for};

const TOPOLOGY: &str = include_str!("../../lab/three-nodes.toml");
const VIP: &str = "10.96.0.10:80";

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

/// The UTC time of day of `t`, in seconds, as svcflow's log stamps it.
fn seconds_of_day(t: std::time::SystemTime) -> f64 {
    let since = t
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    since.rem_euclid(86400.0)
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

fn run() -> Result<(), SandboxError> {
    let mut topology = Topology::parse(TOPOLOGY)?;
    // The demo posts the service itself, below.
    let web = topology
        .services
        .pop()
        .ok_or_else(|| invalid("three-nodes.toml has no service"))?;

    println!(
        "== a three-node cluster: each node its own ovsdb-server and ovs-vswitchd (userspace \
         datapath) in its own namespace, on a routed underlay 192.168.50.0/24, and one \
         `svcflow run` driving all three"
    );
    let started = Instant::now();
    let mut lab = Lab::up(&topology, &LabOptions::default())?;
    println!(
        "   svcflow run --openflow-listen 0.0.0.0:6653 --openflow-advertise {}:6653 --rest-listen \
         {REST} --ovsdb-remote n1=unix:…/db.sock (and n2, n3)",
        lab.controller_ip()
    );
    println!(
        "   over OVSDB, svcflow created br-int (fail mode secure) and its gateway port svc-gw on \
         every node, and each br-int dialled it over the management network ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    for node in lab.node_names() {
        let spec = lab.node_spec(node)?;
        println!(
            "   {node}: address {}, pods {} ({})",
            spec.address,
            spec.pod_cidr,
            pods_of(&lab, node)
        );
    }
    println!("   the nodes and pods were posted over svcflow's REST northbound, as below");

    println!("== posting service web and its endpoints (on n2 and n3; none on n1) over REST");
    let nb = format!("http://{REST}/restconf/config");
    println!(
        "   $ curl -X PUT {nb}/{} -d '{{web: {}:{} -> {}, node port {}}}'",
        web.rest_path(),
        web.cluster_ip,
        web.port,
        web.target(),
        web.node_port.map(|p| p.to_string()).unwrap_or_default()
    );
    println!(
        "   $ curl -X PUT {nb}/{} -d '{{endpoints of web: {}}}'",
        web.endpoints_rest_path(),
        web.endpoints.join(", ")
    );
    let posted = Instant::now();
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
        "== the operational view (GET /restconf/operational/service:service-information): \
         each node's group for web, read from its switch"
    );
    // OVS folds datapath counters into its statistics about once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let url = format!("http://{REST}/restconf/operational/service:service-information");
    let out = lab.exec("ctl", &["curl", "-sS", "-f", &url])?;
    let op: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| invalid(format!("operational view: {e}")))?;
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
        "== n2's ovs-vswitchd killed (SIGKILL) and started again: it comes back with no flow \
         and no group"
    );
    let syncs_before = lab.daemon().syncs().len();
    let log_before = lab.daemon().log().len();
    let killed = Instant::now();
    let killed_at = seconds_of_day(std::time::SystemTime::now());
    lab.restart_vswitchd("n2")?;
    let restarted = killed.elapsed();
    lab.wait_synced(Duration::from_secs(30))?;
    println!(
        "   ovs-vswitchd ran again with its ports after {:.0} ms; svcflow logged (ms after the \
         kill):",
        restarted.as_secs_f64() * 1e3
    );
    let log = lab.daemon().log();
    for line in log.get(log_before..).unwrap_or("").lines() {
        let Some(at) = line.find("node n2: ").or_else(|| line.find("switch ")) else {
            continue;
        };
        let when = line
            .split_once('T')
            .and_then(|(_, rest)| rest.split_once('Z'))
            .and_then(|(time, _)| {
                let mut parts = time.split(':');
                let h: f64 = parts.next()?.parse().ok()?;
                let m: f64 = parts.next()?.parse().ok()?;
                let s: f64 = parts.next()?.parse().ok()?;
                Some(h * 3600.0 + m * 60.0 + s)
            })
            .map(|t| format!("{:>6.0}", (t - killed_at).rem_euclid(86400.0) * 1e3))
            .unwrap_or_else(|| "     ?".into());
        println!("   {when}  {}", &line[at..]);
    }
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

    println!("== svcflow stopped with SIGTERM: the switches keep their flows and keep forwarding");
    let mut before = BTreeMap::new();
    for node in lab.node_names() {
        before.insert(node, counts(&lab, node)?);
    }
    let pid = lab
        .daemon()
        .pid()
        .ok_or_else(|| invalid("svcflow is not running"))?;
    lab.daemon().signal("TERM")?;
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
