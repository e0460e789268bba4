//! A node's OVSDB side: what `br-int` and the service-gateway port must look like, and the
//! port bindings read back from the database. Pure: it reads a replica and returns
//! operations; the caller sends them.
//!
//! svcflow marks the interfaces it cares about with `external_ids`:
//! - `svcflow-role=service-gateway` on the gateway port it creates;
//! - `svcflow-role=uplink` plus `svcflow-next-hop-mac=MAC` on an uplink an operator adds;
//! - `iface-id=UID` on pod interfaces, set by the CNI, binds them to pods in the model.

use std::collections::BTreeMap;

use ovsdb::Operation;
use ovsdb::Replica;
use ovsdb::vswitch::{
    BridgeSpec, Controller, ControllerSpec, FailMode, HelperError, InterfaceType, PortSpec,
    VSwitchQuery, add_controller_ops, add_port_ops_named, ensure_bridge_ops,
    remove_controllers_ops, set_controllers_ops,
};

use crate::desired::{Family, GatewayPort, NodeBindings, Uplink};
use crate::model::MacAddr;

/// The `external_ids` key that marks svcflow's interfaces.
pub const ROLE_KEY: &str = "svcflow-role";
/// [`ROLE_KEY`] of the service-gateway port.
pub const ROLE_GATEWAY: &str = "service-gateway";
/// [`ROLE_KEY`] of an uplink.
pub const ROLE_UPLINK: &str = "uplink";
/// [`ROLE_KEY`] of the flow-based tunnel port.
pub const ROLE_TUNNEL: &str = "tunnel";
/// The tunnel port's name.
pub const TUNNEL_PORT: &str = "svc-tun";
/// The `external_ids` key of an uplink's next-hop MAC.
pub const NEXT_HOP_KEY: &str = "svcflow-next-hop-mac";
/// The `external_ids` key that binds an interface to a pod.
pub const IFACE_ID_KEY: &str = "iface-id";
/// The `external_ids` key that gives the MAC of the pod behind an interface (OVN's,
/// OpenStack's and libvirt's convention).
pub const ATTACHED_MAC_KEY: &str = "attached-mac";

/// How svcflow sets up each node's switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSetup {
    /// The integration bridge, normally `br-int`.
    pub bridge: String,
    /// `netdev` (userspace) or `system` (kernel).
    pub datapath_type: String,
    /// The OpenFlow controller target the node's switch connects to.
    pub controller: String,
    /// The gateway port's name.
    pub gateway_port: String,
    /// The gateway port's fixed MAC.
    pub gateway_mac: MacAddr,
    /// The bridge's datapath id, by which the controller knows which node a switch is.
    pub datapath_id: u64,
    /// The encapsulation of pod traffic between nodes: with one, the bridge gets a
    /// flow-based tunnel port ([`TUNNEL_PORT`]).
    pub encap: crate::config::Encap,
    /// Whether other svcflow replicas share the switch: then `controller` is added to the
    /// bridge's controllers and the others' targets stay ([`add_controller_ops`]); otherwise
    /// it is the bridge's only controller.
    pub shared_controller: bool,
    /// With a shared controller list: the bridge drops another replica's target (marked
    /// [`REPLICA_KEY`]) once the switch has been disconnected from it this many seconds
    /// (`status:sec_since_disconnect`); None keeps every target.
    pub departed_after: Option<u64>,
    /// The longest the switch waits between attempts to dial svcflow, in seconds (the
    /// Controller row's `max_backoff`): after a restart, svcflow has its switches back
    /// within this long. OVS's own default is 8.
    pub max_backoff_secs: u64,
}

/// svcflow's default [`NodeSetup::max_backoff_secs`]: a switch dials a restarted svcflow
/// within a second instead of OVS's up to 8.
pub const MAX_BACKOFF_SECS: u64 = 1;

/// The `external_ids` key that marks a controller target as an svcflow replica's.
pub const REPLICA_KEY: &str = "svcflow-replica";

/// A node's datapath id: svcflow's mark `0x5356` over 48 bits of the node name's hash, so a
/// switch that connects is recognised as its node, across restarts and replicas.
pub fn datapath_id(node: &str) -> u64 {
    (0x5356 << 48) | (crate::ids::fnv1a(node.as_bytes()) & 0xffff_ffff_ffff)
}

impl Default for NodeSetup {
    fn default() -> Self {
        Self {
            bridge: "br-int".into(),
            datapath_type: "netdev".into(),
            controller: "tcp:127.0.0.1:6653".into(),
            gateway_port: "svc-gw".into(),
            gateway_mac: MacAddr([0x0a, 0x58, 0xa9, 0xfe, 0x00, 0x01]),
            datapath_id: datapath_id(""),
            encap: crate::config::Encap::None,
            shared_controller: false,
            departed_after: None,
            max_backoff_secs: MAX_BACKOFF_SECS,
        }
    }
}

/// Packet-ins per second a node's switch sends svcflow (`controller_rate_limit`).
pub const PACKET_IN_RATE: i64 = 1000;
/// Packet-ins above the rate it may send in a burst (`controller_burst_limit`).
pub const PACKET_IN_BURST: i64 = 250;

/// Operations that make the bridge, its controller and the gateway port as `setup` says;
/// empty when they already are.
pub fn setup_ops(replica: &Replica, setup: &NodeSetup) -> Result<Vec<Operation>, HelperError> {
    let mut bridge = BridgeSpec::new(&setup.bridge);
    bridge.datapath_type = Some(setup.datapath_type.clone());
    bridge.fail_mode = Some(FailMode::Secure);
    bridge.protocols = vec!["OpenFlow13".into()];
    bridge.datapath_id = Some(format!("{:016x}", setup.datapath_id));
    let mut ops = ensure_bridge_ops(replica, &bridge);
    if replica.bridge(&setup.bridge).is_none() {
        // The bridge is created by these ops; the rest follows on the next pass.
        return Ok(ops);
    }
    let controller = ControllerSpec {
        target: setup.controller.clone(),
        connection_mode: Some("out-of-band".into()),
        // Refusals of services without endpoints reach svcflow as packet-ins: the switch
        // sends at most this many per second, queueing a burst and dropping the rest, so a
        // flood of connection attempts cannot take svcflow's CPU.
        rate_limit: Some(PACKET_IN_RATE),
        burst_limit: Some(PACKET_IN_BURST),
        // OVS takes milliseconds and keeps whole seconds.
        max_backoff: Some(
            i64::try_from(setup.max_backoff_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        ),
        external_ids: if setup.shared_controller {
            BTreeMap::from([(REPLICA_KEY.to_string(), "true".to_string())])
        } else {
            BTreeMap::new()
        },
    };
    if setup.shared_controller {
        ops.extend(add_controller_ops(replica, &setup.bridge, &controller)?);
        if let Some(after) = setup.departed_after {
            ops.extend(remove_controllers_ops(replica, &setup.bridge, |c| {
                departed(c, &setup.controller, after)
            })?);
        }
    } else {
        ops.extend(set_controllers_ops(replica, &setup.bridge, &[controller])?);
    }
    let mut gw = PortSpec::new(&setup.gateway_port, InterfaceType::Internal);
    gw.iface_external_ids = BTreeMap::from([(ROLE_KEY.to_string(), ROLE_GATEWAY.to_string())]);
    gw.mac = Some(setup.gateway_mac.to_string());
    ops.extend(add_port_ops_named(replica, &setup.bridge, &gw, "gw")?);
    let flow = || "flow".to_string();
    let tunnel = match setup.encap {
        crate::config::Encap::None => None,
        crate::config::Encap::Geneve => Some(InterfaceType::Geneve {
            remote_ip: flow(),
            key: Some(flow()),
        }),
        crate::config::Encap::Vxlan => Some(InterfaceType::Vxlan {
            remote_ip: flow(),
            key: Some(flow()),
        }),
    };
    if let Some(kind) = tunnel {
        let mut tun = PortSpec::new(TUNNEL_PORT, kind);
        tun.iface_external_ids = BTreeMap::from([(ROLE_KEY.to_string(), ROLE_TUNNEL.to_string())]);
        ops.extend(add_port_ops_named(replica, &setup.bridge, &tun, "tun")?);
    }
    Ok(ops)
}

/// Whether controller `c` is another replica's target (not `me`) that the switch has been
/// disconnected from for `after` seconds or more. A target the switch never reached has no
/// disconnection time and stays.
fn departed(c: &Controller, me: &str, after: u64) -> bool {
    c.target != me
        && !c.is_connected
        && c.external_ids.get(REPLICA_KEY).map(String::as_str) == Some("true")
        && c.status
            .get("sec_since_disconnect")
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s >= after)
}

/// Operations that make `ovs-vswitchd` reconfigure (`next_cfg` one higher, as `ovs-vsctl`
/// does), or none without an Open_vSwitch row.
///
/// svcflow runs them once the switch reports its connection to it (`is_connected`):
/// `ovs-vswitchd` hands a controller's `max_backoff` to the connection only at a
/// reconfiguration while that connection is up (a new controller's starts with OVS's 8 s,
/// and `connmgr`'s new connections do not take the row's value; the value then holds across
/// reconnections), so without one the switch would still wait up to 8 s between attempts
/// after svcflow stops.
pub fn reconfigure_ops(replica: &Replica) -> Vec<Operation> {
    let Some(root) = replica.open_vswitch() else {
        return Vec::new();
    };
    vec![Operation::mutate(
        "Open_vSwitch",
        vec![ovsdb::ops::Condition::uuid(root.uuid)],
        vec![ovsdb::ops::Mutation::new(
            "next_cfg",
            ovsdb::ops::Mutator::Add,
            ovsdb::datum::Datum::integer(1),
        )],
    )]
}

/// The targets of `bridge`'s controllers that its switch says it is connected to: the
/// svcflow replicas the switch can reach, as ovs-vswitchd reports them (`is_connected`).
pub fn connected_controllers(
    replica: &Replica,
    bridge: &str,
) -> std::collections::BTreeSet<String> {
    let Some(b) = replica.bridge(bridge) else {
        return Default::default();
    };
    b.controllers
        .iter()
        .filter_map(|u| {
            replica
                .row("Controller", u)
                .map(|row| Controller::from_row(*u, row))
        })
        .filter(|c| c.is_connected)
        .map(|c| c.target)
        .collect()
}

/// The bindings of `bridge`'s interfaces that have an OpenFlow port.
pub fn bindings(replica: &Replica, bridge: &str) -> NodeBindings {
    let mut out = NodeBindings::default();
    for port in replica.bridge_ports(bridge) {
        let Some(iface) = replica.interface(&port.name) else {
            continue;
        };
        let Some(ofport) = iface
            .ofport
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        if port.name == bridge {
            let mac = iface.mac_in_use.as_deref().or(iface.mac.as_deref());
            out.local_mac = mac.and_then(|m| m.parse().ok());
        }
        match iface.external_ids.get(ROLE_KEY).map(String::as_str) {
            Some(ROLE_TUNNEL) => out.tunnel = Some(ofport),
            Some(ROLE_GATEWAY) => {
                let mac = iface.mac_in_use.as_deref().or(iface.mac.as_deref());
                if let Some(mac) = mac.and_then(|m| m.parse().ok()) {
                    out.gateway = Some(GatewayPort { ofport, mac });
                }
            }
            Some(ROLE_UPLINK) => {
                let next_hop = iface
                    .external_ids
                    .get(NEXT_HOP_KEY)
                    .and_then(|m| m.parse().ok());
                let own = iface.mac_in_use.as_deref().or(iface.mac.as_deref());
                if let (Some(next_hop_mac), Some(mac)) =
                    (next_hop, own.and_then(|m| m.parse().ok()))
                {
                    out.uplink = Some(Uplink {
                        ofport,
                        mac,
                        next_hop_mac,
                    });
                }
            }
            _ => {}
        }
        if let Some(id) = iface.external_ids.get(IFACE_ID_KEY) {
            out.ofports.insert(id.clone(), ofport);
            if let Some(mac) = iface
                .external_ids
                .get(ATTACHED_MAC_KEY)
                .and_then(|m| m.parse().ok())
            {
                out.macs.insert(id.clone(), mac);
            }
        }
    }
    out
}

/// What a node of the userspace datapath runs for the overlay (`--encap geneve|vxlan`), as
/// `ip` commands: its underlay addresses `addresses` (each with the underlay's prefix; one
/// per family the node has, its tunnel endpoints) go onto the bridge's own port, which the
/// datapath's native tunnelling uses as the tunnel endpoint: it routes the encapsulated
/// packets out of it (svcflow's flows send them on out of the uplink) and decapsulates what
/// svcflow sends to it. With the kernel datapath the node's own routing does this and
/// nothing is needed. The other nodes' addresses must be on-link through it, or routed by a
/// gateway on-link (a routed underlay's router answering ARP or neighbour solicitations for
/// them, or a route the node adds).
///
/// An IPv6 address is added without duplicate address detection (`nodad`): the switch
/// answers neighbour solicitations for the node's addresses on the uplink, so the host would
/// never hear a duplicate, and a tentative address cannot be the tunnel's source for the
/// first second or two.
pub fn tunnel_endpoint_commands(setup: &NodeSetup, addresses: &[ipnet::IpNet]) -> Vec<Vec<String>> {
    let bridge = setup.bridge.clone();
    let words = |w: &[&str]| w.iter().map(|w| w.to_string()).collect::<Vec<String>>();
    let mut out: Vec<Vec<String>> = addresses
        .iter()
        .map(|a| {
            let address = a.to_string();
            if a.addr().is_ipv6() {
                words(&[
                    "ip", "-6", "addr", "replace", &address, "dev", &bridge, "nodad",
                ])
            } else {
                words(&["ip", "addr", "replace", &address, "dev", &bridge])
            }
        })
        .collect();
    out.push(words(&["ip", "link", "set", &bridge, "up"]));
    out
}

/// The commands that give the gateway port's host side its address and routes, so that the
/// node's own processes reach services (and pods) through `br-int`: the gateway host address
/// as a /32, and the service CIDR and the pod CIDR routed via the virtual gateway, on-link.
/// They are `ip` commands for the node itself to run (OVSDB cannot configure host addresses);
/// each is idempotent (`replace`).
pub fn host_gateway_commands(
    setup: &NodeSetup,
    config: &crate::config::Config,
    node: &crate::model::Node,
) -> Vec<Vec<String>> {
    let port = setup.gateway_port.clone();
    let mut commands = vec![
        vec![
            "ip".into(),
            "link".into(),
            "set".into(),
            "dev".into(),
            port.clone(),
            "up".into(),
        ],
        vec![
            "ip".into(),
            "addr".into(),
            "replace".into(),
            format!("{}/32", config.gateway_host_ip),
            "dev".into(),
            port.clone(),
        ],
    ];
    let gateway6 = crate::desired::virtual_gateway_ip6(node);
    if gateway6.is_some() {
        commands.push(
            [
                "ip",
                "addr",
                "replace",
                &format!("{}/128", config.gateway_host_ip6),
                "dev",
                &port,
                "nodad",
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    let route = |cidr: String, gateway: String| -> Vec<String> {
        [
            "ip", "route", "replace", &cidr, "via", &gateway, "dev", &port, "onlink",
        ]
        .map(String::from)
        .to_vec()
    };
    if let Some(gateway) = crate::desired::virtual_gateway_ip(node) {
        commands.push(route(config.service_cidr.to_string(), gateway.to_string()));
        if let Some(pods) = node.pod_cidr4() {
            commands.push(route(pods.to_string(), gateway.to_string()));
        }
        let own: Vec<String> = node
            .ips
            .iter()
            .filter(|ip| ip.is_ipv4())
            .map(ToString::to_string)
            .collect();
        commands.push(host_node_ports(
            Family::V4,
            &port,
            config,
            &own,
            &gateway.to_string(),
        ));
    }
    if let Some(gateway) = gateway6 {
        if let Some(cidr) = config.service_cidr6 {
            commands.push(route(cidr.to_string(), gateway.to_string()));
        }
        if let Some(pods) = node.pod_cidr6() {
            commands.push(route(pods.to_string(), gateway.to_string()));
        }
        let own: Vec<String> = node
            .ips
            .iter()
            .filter(|ip| ip.is_ipv6())
            .map(ToString::to_string)
            .collect();
        commands.push(host_node_ports(
            Family::V6,
            &port,
            config,
            &own,
            &gateway.to_string(),
        ));
    }
    commands
}

/// The nftables rules (one `nft` command, one transaction that replaces table `ip svcflow`,
/// or `ip6 svcflow` for IPv6) that let the node's own processes reach a node port on the
/// node's own addresses (`own`, of `family`), as kube-proxy's `OUTPUT` rules do: such a
/// connection would otherwise stay on the host and be refused there. Its destination becomes
/// the virtual gateway address, which the host routes through the gateway port and whose node
/// ports `br-int` serves; its source becomes the gateway port's host address, so the replies
/// come back through the port. The whole node-port range is redirected (Kubernetes reserves
/// it for node ports); a port no service takes is refused by `br-int`.
fn host_node_ports(
    family: Family,
    port: &str,
    config: &crate::config::Config,
    own: &[String],
    gateway: &str,
) -> Vec<String> {
    let (table, addr, host) = match family {
        Family::V4 => ("ip", "ip", config.gateway_host_ip.to_string()),
        Family::V6 => ("ip6", "ip6", config.gateway_host_ip6.to_string()),
    };
    let mut script = format!(
        "add table {table} svcflow; delete table {table} svcflow; add table {table} svcflow; \
         add chain {table} svcflow output {{ type nat hook output priority -100; }}; \
         add chain {table} svcflow postrouting {{ type nat hook postrouting priority 100; }}",
    );
    if !own.is_empty() {
        let own = own.join(", ");
        let (low, high) = config.node_port_range;
        script.push_str(&format!(
            "; add rule {table} svcflow output {addr} daddr {{ {own} }} meta l4proto \
             {{ tcp, udp, sctp }} th dport {low}-{high} dnat {addr} to {gateway}; \
             add rule {table} svcflow postrouting oifname \"{port}\" {addr} saddr {{ {own} }} \
             ct status dnat snat {addr} to {host}"
        ));
    }
    vec!["nft".into(), script]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dual_stack_node_gets_its_ipv6_host_side_too() {
        let node = crate::model::Node {
            name: "n1".into(),
            ips: vec![
                "192.168.50.11".parse().unwrap(),
                "2001:db8:50::11".parse().unwrap(),
            ],
            pod_cidrs: vec![
                "10.244.3.0/24".parse().unwrap(),
                "fd00:10:244:3::/64".parse().unwrap(),
            ],
            labels: Default::default(),
        };
        let config = crate::config::Config {
            service_cidr6: Some("fd00:10:96::/112".parse().unwrap()),
            ..Default::default()
        };
        let lines: Vec<String> = host_gateway_commands(&NodeSetup::default(), &config, &node)
            .iter()
            .map(|c| c.join(" "))
            .collect();
        for want in [
            "ip addr replace fd00:5356::1/128 dev svc-gw nodad",
            "ip route replace fd00:10:96::/112 via fd00:10:244:3::1 dev svc-gw onlink",
            "ip route replace fd00:10:244:3::/64 via fd00:10:244:3::1 dev svc-gw onlink",
            "ip route replace 10.96.0.0/12 via 10.244.3.1 dev svc-gw onlink",
        ] {
            assert!(
                lines.iter().any(|l| l == want),
                "{want} missing from {lines:#?}"
            );
        }
        let ip6 = lines.last().unwrap();
        assert!(ip6.starts_with("nft add table ip6 svcflow"), "{ip6}");
        assert!(
            ip6.contains(
                "add rule ip6 svcflow output ip6 daddr { 2001:db8:50::11 } meta l4proto \
                 { tcp, udp, sctp } th dport 30000-32767 dnat ip6 to fd00:10:244:3::1"
            ) && ip6.contains("snat ip6 to fd00:5356::1"),
            "{ip6}"
        );
        // The IPv4 table names only IPv4 addresses.
        let ip4 = lines
            .iter()
            .find(|l| l.starts_with("nft add table ip svcflow"))
            .unwrap();
        assert!(!ip4.contains("2001:db8"), "{ip4}");
    }

    #[test]
    fn host_gateway_commands_address_the_port_and_route_services_and_pods() {
        let node = crate::model::Node {
            name: "n1".into(),
            ips: vec![],
            pod_cidrs: vec!["10.244.3.0/24".parse().unwrap()],
            labels: Default::default(),
        };
        let lines = |node: &crate::model::Node| -> Vec<String> {
            host_gateway_commands(&NodeSetup::default(), &Default::default(), node)
                .iter()
                .map(|c| c.join(" "))
                .collect()
        };
        let table = "nft add table ip svcflow; delete table ip svcflow; add table ip svcflow; \
                     add chain ip svcflow output { type nat hook output priority -100; }; \
                     add chain ip svcflow postrouting { type nat hook postrouting priority 100; }";
        assert_eq!(
            lines(&node),
            [
                "ip link set dev svc-gw up",
                "ip addr replace 169.254.0.1/32 dev svc-gw",
                "ip route replace 10.96.0.0/12 via 10.244.3.1 dev svc-gw onlink",
                "ip route replace 10.244.3.0/24 via 10.244.3.1 dev svc-gw onlink",
                table,
            ]
        );
        // With the node's addresses: its own node ports go through the gateway port.
        let node = crate::model::Node {
            ips: vec![
                "192.168.50.11".parse().unwrap(),
                "fd00::11".parse().unwrap(),
            ],
            ..node
        };
        assert_eq!(
            lines(&node).last().map(String::as_str),
            Some(
                format!(
                    "{table}; add rule ip svcflow output ip daddr {{ 192.168.50.11 }} meta \
                     l4proto {{ tcp, udp, sctp }} th dport 30000-32767 dnat ip to 10.244.3.1; \
                     add rule ip svcflow postrouting oifname \"svc-gw\" ip saddr \
                     {{ 192.168.50.11 }} ct status dnat snat ip to 169.254.0.1"
                )
                .as_str()
            )
        );
    }
}
