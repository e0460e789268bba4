//! Small builders of matches, actions and instructions that the render's parts share.

use super::*;

/// Packets of `family`.
pub(super) fn ip_of(family: Family) -> Match {
    Match::new().with(Field::EthType, family.eth_type())
}

/// Packets to `ip`, of its family.
pub(super) fn to_addr(ip: IpAddr) -> Match {
    let family = Family::of(ip);
    ip_of(family).with(family.dst(), addr_value(ip))
}

/// Packets from `ip`, of its family.
pub(super) fn from_addr(ip: IpAddr) -> Match {
    let family = Family::of(ip);
    ip_of(family).with(family.src(), addr_value(ip))
}

/// `m` with `field` matching `net`: exact for a host route, masked otherwise.
pub(super) fn with_net(m: Match, field: Field, net: ipnet::IpNet) -> Match {
    let net = net.trunc();
    let (value, mask) = match net {
        ipnet::IpNet::V4(v4) => (
            u128::from(u32::from(v4.network())),
            u128::from(u32::from(v4.netmask())),
        ),
        ipnet::IpNet::V6(v6) => (u128::from(v6.network()), u128::from(v6.netmask())),
    };
    let full = match net {
        ipnet::IpNet::V4(_) => u128::from(u32::MAX),
        ipnet::IpNet::V6(_) => u128::MAX,
    };
    if mask == full {
        m.with(field, value)
    } else {
        m.with_masked(field, value, mask)
    }
}

/// Packets of `net`'s family to `net`.
pub(super) fn to_net(net: ipnet::IpNet) -> Match {
    let family = Family::of_net(&net);
    with_net(ip_of(family), family.dst(), net)
}

/// `protocol` over `family`.
pub(super) fn l4_of(family: Family, protocol: Protocol) -> Match {
    ip_of(family).with(Field::IpProto, protocol.ip_proto())
}

/// `m` matching the endpoint `ip` in its family's registers.
pub(super) fn with_endpoint(m: Match, ip: IpAddr) -> Match {
    match ip {
        IpAddr::V4(v4) => m.with(reg::ENDPOINT_IP, u32::from(v4)),
        IpAddr::V6(v6) => reg::ENDPOINT_IP6
            .iter()
            .zip(crate::flow::ipv6_words(v6))
            .fold(m, |m, (f, w)| m.with(f.reg, w)),
    }
}

pub(super) fn mac_value(mac: MacAddr) -> u128 {
    mac.0
        .iter()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b))
}

pub(super) fn dst_port_field(protocol: Protocol) -> Field {
    match protocol {
        Protocol::Tcp => Field::TcpDst,
        Protocol::Udp => Field::UdpDst,
        Protocol::Sctp => Field::SctpDst,
    }
}

pub(super) fn in_port(port: u32) -> Match {
    Match::new().with(Field::InPortOxm, port)
}

pub(super) fn arp_request() -> Match {
    Match::new()
        .with(Field::EthType, 0x0806u16)
        .with(Field::ArpOp, 1u16)
}

pub(super) fn ct_match(value: u32, mask: u32) -> Match {
    Match::new().with_masked(Field::CtState, value, mask)
}

pub(super) fn set(field: Field, value: impl Into<u128>) -> Action {
    Action::SetField(OxmField::exact(field, value))
}

pub(super) fn output(port: u32) -> Action {
    Action::Output { port, max_len: 0 }
}

pub(super) fn resubmit(table: u8) -> Action {
    Action::Resubmit(Resubmit {
        in_port: OFPP_IN_PORT16,
        table,
        ct: false,
        legacy: false,
    })
}

pub(super) fn ct(zone: u16, table: u8, commit: bool, nat: Option<Nat>) -> Action {
    Action::Ct(Ct {
        commit,
        zone: CtZone::Imm(zone),
        table: Some(table),
        nat,
        ..Ct::default()
    })
}

/// Commits the packet's connection in `zone` and goes on with the next action (no
/// recirculation).
pub(super) fn ct_commit(zone: u16) -> Action {
    Action::Ct(Ct {
        commit: true,
        zone: CtZone::Imm(zone),
        ..Ct::default()
    })
}

pub(super) fn goto(table: u8) -> Instruction {
    Instruction::GotoTable(table)
}

pub(super) fn apply(actions: Vec<Action>) -> Vec<Instruction> {
    vec![Instruction::ApplyActions(actions)]
}

pub(super) fn moved(src: Field, dst: Field) -> Action {
    Action::RegMove {
        src: Subfield::whole(src),
        dst: Subfield::whole(dst),
    }
}

/// The MAC-swapping head of every ARP reply: back to the requester, from `mac`.
pub(super) fn arp_reply_head(mac: MacAddr) -> Vec<Action> {
    vec![
        moved(Field::EthSrc, Field::EthDst),
        set(Field::EthSrc, mac_value(mac)),
        set(Field::ArpOp, 2u16),
        moved(Field::ArpSha, Field::ArpTha),
        set(Field::ArpSha, mac_value(mac)),
    ]
}

/// Answers "who has TPA?" with `mac`, whatever TPA is (proxy ARP).
pub(super) fn arp_proxy_reply(mac: MacAddr) -> Vec<Action> {
    let mut actions = arp_reply_head(mac);
    actions.extend([
        moved(Field::ArpTpa, reg::SCRATCH),
        moved(Field::ArpSpa, Field::ArpTpa),
        moved(reg::SCRATCH, Field::ArpSpa),
        output(OFPP_IN_PORT),
    ]);
    actions
}

/// Answers "who has `ip`?" with `mac`.
pub(super) fn arp_reply_for(mac: MacAddr, ip: Ipv4Addr) -> Vec<Action> {
    let mut actions = arp_reply_head(mac);
    actions.extend([
        moved(Field::ArpSpa, Field::ArpTpa),
        set(Field::ArpSpa, u32::from(ip)),
        output(OFPP_IN_PORT),
    ]);
    actions
}

/// ICMPv6 neighbour solicitations (`icmp6,icmp_type=135,icmp_code=0`).
pub(super) fn nd_solicit() -> Match {
    ip_of(Family::V6)
        .with(Field::IpProto, 58u8)
        .with(Field::Icmpv6Type, 135u8)
        .with(Field::Icmpv6Code, 0u8)
}

/// An advertisement's flags from a router: router, solicited, override (RFC 4861 §4.4).
pub(super) const NA_ROUTER: u32 = 0xe000_0000;
/// An advertisement's flags from a host: solicited, override.
pub(super) const NA_HOST: u32 = 0x6000_0000;

/// Answers a neighbour solicitation with an advertisement of its target at `mac`, built in
/// place as [`arp_proxy_reply`] builds an ARP reply: back to the soliciting address and MAC,
/// from the target address, type 136 with `flags`, its option now a target link-layer one.
/// Table 11 writes `mac` into that option: Open vSwitch checks a `set_field` of `nd_tll`
/// against the flow's match, which is a solicitation's here, and would refuse it. The switch
/// recomputes the ICMPv6 checksum.
pub(super) fn nd_reply(mac: MacAddr, flags: u32) -> Vec<Instruction> {
    vec![
        Instruction::ApplyActions(vec![
            moved(Field::EthSrc, Field::EthDst),
            set(Field::EthSrc, mac_value(mac)),
            moved(Field::Ipv6Src, Field::Ipv6Dst),
            moved(Field::NdTarget, Field::Ipv6Src),
            set(Field::Icmpv6Type, 136u8),
            set(Field::NdReserved, flags),
            set(Field::NdOptionsType, 2u8),
        ]),
        goto(table::ND_ANSWER),
    ]
}

/// Routes to a port: from the gateway MAC to `mac`, with the TTL decremented.
pub(super) fn route(gw_mac: MacAddr, mac: MacAddr, ofport: u32) -> Vec<Instruction> {
    vec![
        Instruction::ApplyActions(vec![
            set(Field::EthSrc, mac_value(gw_mac)),
            set(Field::EthDst, mac_value(mac)),
            Action::DecNwTtl,
            set(reg::OUT_PORT, ofport),
        ]),
        goto(table::OUTPUT),
    ]
}

/// Route to a pod whose MAC the switch learns: as [`route`], with the destination MAC loaded
/// by the flow `learn_mac` put in table 51 (none yet: the frame keeps the gateway MAC, which
/// the pod drops, until the pod's first ARP).
pub(super) fn route_learned(gw_mac: MacAddr, ofport: u32) -> Vec<Instruction> {
    vec![
        Instruction::ApplyActions(vec![
            set(Field::EthSrc, mac_value(gw_mac)),
            Action::DecNwTtl,
            set(reg::OUT_PORT, ofport),
            resubmit(table::LEARNED_MAC),
        ]),
        goto(table::OUTPUT),
    ]
}

/// `learn` into table 51, from an ARP packet (IPv4) or a neighbour solicitation (IPv6) of the
/// pod on `ofport`, whose sender address the classifier checked is the pod's: traffic of that
/// family to the sender's address gets the sender's MAC. The learned flow carries the
/// learned-flow mark, so syncs never delete it.
pub(super) fn learn_mac(ofport: u32, family: Family) -> Action {
    let whole = Subfield::whole;
    let (sender, sender_mac) = match family {
        Family::V4 => (Field::ArpSpa, Field::ArpSha),
        Family::V6 => (Field::Ipv6Src, Field::EthSrc),
    };
    Action::Learn(Learn {
        priority: 100,
        cookie: cookie::learned_mac(ofport),
        table_id: table::LEARNED_MAC,
        specs: vec![
            learn_family(family),
            learn_spec(family.bits(), sender, LearnDst::Match(whole(family.dst()))),
            learn_spec(48, sender_mac, LearnDst::Load(whole(Field::EthDst))),
        ],
        ..Learn::default()
    })
}

/// `OFPP_LOCAL` as a 32-bit port: the bridge's own port.
pub(super) const OFPP_LOCAL: u32 = 0xffff_fffe;

/// `OFPP_IN_PORT` as a 32-bit port.
pub(super) const OFPP_IN_PORT: u32 = 0xffff_fff8;
