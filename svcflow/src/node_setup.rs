//! `svcflow node-setup NODE`: the commands a node runs itself, which svcflow cannot do over
//! OVSDB, printed as a shell script. Pure: it prints, it runs nothing.

use netvirt::config::{Config, Encap};
use netvirt::model::Node;
use netvirt::node_setup::{NodeSetup, host_gateway_commands, tunnel_endpoint_commands};

use crate::cli::NodeSetupArgs;
use crate::config::parse_datapath_type;

/// The script for `args`.
pub fn script(args: &NodeSetupArgs) -> Result<String, String> {
    let mut config = Config::default();
    if let Some(cidr) = args.service_cidr {
        config.service_cidr = cidr;
    }
    config.service_cidr6 = args.service_cidr6;
    let encap: Encap = args.encap.as_deref().unwrap_or("geneve").parse()?;
    let datapath =
        parse_datapath_type(args.datapath_type.as_deref().unwrap_or("netdev")).map_err(|e| e.0)?;
    let setup = NodeSetup::default();
    let node = Node {
        name: args.node.clone(),
        ips: args.address.iter().map(|a| a.addr()).collect(),
        pod_cidrs: args
            .pod_cidr
            .map(ipnet::IpNet::V4)
            .into_iter()
            .chain(args.pod_cidr6.map(ipnet::IpNet::V6))
            .collect(),
        labels: Default::default(),
    };
    let line = |c: &Vec<String>| {
        let words: Vec<String> = c.iter().map(|w| shell_word(w)).collect();
        format!("{}\n", words.join(" "))
    };
    let mut out = format!(
        "#!/bin/sh\n# svcflow node-setup for node {}: run on the node, as root, once svcflow has \
         created br-int and its ports.\nset -e\n",
        args.node
    );
    out.push_str("# The gateway port's host side: the node's own processes reach services.\n");
    for c in host_gateway_commands(&setup, &config, &node) {
        out.push_str(&line(&c));
    }
    for (i, a) in args.address.iter().enumerate() {
        if let Some(b) = args.address[i + 1..]
            .iter()
            .find(|b| b.addr().is_ipv6() == a.addr().is_ipv6())
        {
            return Err(format!(
                "--address {a} and --address {b} are of one family: give the node's underlay \
                 address once per family (its first of each is a tunnel endpoint)"
            ));
        }
    }
    match (encap, datapath.as_str(), &args.address[..]) {
        (Encap::None, _, _) => {}
        (_, "system", _) => out.push_str(
            "# The overlay on the kernel datapath: the node's own routing reaches the other \
             nodes; nothing more to do.\n",
        ),
        (_, _, []) => {
            return Err(
                "the overlay on the userspace datapath needs --address (the node's underlay \
                 address and prefix, once per family)"
                    .into(),
            );
        }
        (_, _, addresses) => {
            out.push_str(&format!(
                "# The overlay ({}) on the userspace datapath: the node's underlay addresses move \
                 onto br-int's own port, the tunnel endpoints. The other nodes' addresses must be \
                 on-link through it, or reached through a router that answers ARP (and neighbour \
                 solicitations) for them.\n",
                encap.name()
            ));
            for c in tunnel_endpoint_commands(&setup, addresses) {
                out.push_str(&line(&c));
            }
        }
    }
    Ok(out)
}

/// `word` as one shell word: as it is when it is plain, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run(argv: &[&str]) -> Result<String, String> {
        let mut full = vec!["svcflow", "node-setup"];
        full.extend_from_slice(argv);
        match crate::cli::Cli::try_parse_from(full)
            .map_err(|e| e.to_string())?
            .command
        {
            crate::cli::Command::NodeSetup(args) => script(&args),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn the_overlay_puts_the_underlay_address_on_br_int() {
        let text = run(&[
            "n1",
            "--address",
            "192.168.50.11/24",
            "--pod-cidr",
            "10.244.1.0/24",
            "--encap",
            "geneve",
        ])
        .unwrap();
        assert!(
            text.contains("ip addr replace 192.168.50.11/24 dev br-int\n"),
            "{text}"
        );
        assert!(text.contains("ip link set br-int up\n"), "{text}");
        // A node with no IPv4 address: its IPv6 one is the endpoint.
        let v6 = run(&["n1", "--address", "fd00:50::11/64", "--encap", "geneve"]).unwrap();
        assert!(
            v6.contains("ip -6 addr replace fd00:50::11/64 dev br-int nodad\n"),
            "{v6}"
        );
        // A dual-stack node: an endpoint of each family, the bridge brought up once.
        let both = run(&[
            "n1",
            "--address",
            "192.168.50.11/24",
            "--address",
            "fd00:50::11/64",
        ])
        .unwrap();
        assert!(
            both.contains(
                "ip addr replace 192.168.50.11/24 dev br-int\n\
                 ip -6 addr replace fd00:50::11/64 dev br-int nodad\n\
                 ip link set br-int up\n"
            ),
            "{both}"
        );
        let twice = run(&[
            "n1",
            "--address",
            "192.168.50.11/24",
            "--address",
            "10.0.0.1/8",
        ])
        .unwrap_err();
        assert!(twice.contains("once per family"), "{twice}");
        assert!(text.contains("svc-gw"), "{text}");
        let none = run(&["n1", "--pod-cidr", "10.244.1.0/24", "--encap", "none"]).unwrap();
        assert!(!none.contains("dev br-int"), "{none}");
        let kernel = run(&["n1", "--encap", "vxlan", "--datapath-type", "system"]).unwrap();
        assert!(!kernel.contains("dev br-int"), "{kernel}");
        let err = run(&["n1"]).unwrap_err();
        assert!(err.contains("--address"), "{err}");
        assert!(
            run(&["n1", "--encap", "gre"])
                .unwrap_err()
                .contains("expected geneve")
        );
    }
}
