//! The demo until the controller exists: one OVS node in a sandbox, a client and two backends,
//! and a VIP load-balanced by a select group of `ct(commit,nat(dst=…))` buckets.

use std::process::ExitCode;

use ovs_tests::recipe::StaticService;
use ovs_tests::{HostSpec, Sandbox, SandboxError, tally};

const BR: &str = "br-int";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), SandboxError> {
    println!("== starting a private Open vSwitch node (userspace datapath)");
    let mut sb = Sandbox::start()?;
    sb.add_bridge(BR)?;
    let client = sb.add_host(
        BR,
        HostSpec::new("client", "10.0.0.1/24", "02:00:00:00:00:01", 1).with_gateway("10.0.0.254"),
    )?;
    let b1 = sb.add_host(
        BR,
        HostSpec::new("backend1", "10.0.0.2/24", "02:00:00:00:00:02", 2),
    )?;
    let b2 = sb.add_host(
        BR,
        HostSpec::new("backend2", "10.0.0.3/24", "02:00:00:00:00:03", 3),
    )?;
    client.run(&[
        "ip",
        "neigh",
        "replace",
        "10.0.0.254",
        "lladdr",
        "02:00:00:00:00:fe",
        "dev",
        "eth0",
    ])?;
    for h in [&client, &b1, &b2] {
        println!(
            "   host {:<9} {:<9} port {}",
            h.spec.name,
            h.ip(),
            h.ofport()
        );
    }
    let _s1 = b1.serve("backend1", &["tcp:8080"])?;
    let _s2 = b2.serve("backend2", &["tcp:8080"])?;

    let service = StaticService {
        vip: "10.96.0.10",
        port: 80,
        backends: vec![&b1, &b2],
        target_port: 8080,
    };
    service.install(&sb, BR, &[&client, &b1, &b2])?;

    println!("== 40 connections from client to VIP 10.96.0.10:80");
    let attempts = client.connect("tcp", "10.96.0.10:80", 40, &[])?;
    for (backend, count) in tally(&attempts) {
        println!("   {backend:<10} answered {count}");
    }
    let _curl = client
        .output(&["curl", "-s", "-m", "2", "http://10.96.0.10/"])
        .map(|o| {
            println!(
                "   curl http://10.96.0.10/ -> {}",
                String::from_utf8_lossy(&o.stdout).trim()
            );
        });

    println!("== groups (ovs-ofctl dump-groups)");
    for line in sb.dump_groups(BR)?.lines().skip(1) {
        println!("  {}", line.trim());
    }
    println!("== flows (ovs-ofctl dump-flows --no-stats)");
    for line in sb.dump_flows(BR)?.lines() {
        println!("  {}", line.trim());
    }
    println!("== cleaning up");
    Ok(())
}
