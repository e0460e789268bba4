//! Small builders of matches, actions and instructions that the render's parts share.

use super::*;

pub(super) fn v4(ip: &IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    }
}

pub(super) fn mac_value(mac: MacAddr) -> u128 {
    mac.0
        .iter()
        .fold(0u128, |acc, b| (acc << 8) | u128::from(*b))
}

pub(super) fn ip() -> Match {
    Match::new().with(Field::EthType, 0x0800u16)
}

pub(super) fn to_ip(ip: Ipv4Addr) -> Match {
    self::ip().with(Field::Ipv4Dst, u32::from(ip))
}

pub(super) fn l4(protocol: Protocol) -> Match {
    ip().with(Field::IpProto, protocol.ip_proto())
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

/// `learn` into table 51, from an ARP packet of the pod on `ofport` (whose sender address the
/// classifier checked is the pod's): IPv4 to the sender's address gets the sender's MAC. The
/// learned flow carries the learned-flow mark, so syncs never delete it.
pub(super) fn learn_mac(ofport: u32) -> Action {
    let whole = Subfield::whole;
    Action::Learn(Learn {
        priority: 100,
        cookie: cookie::learned_mac(ofport),
        table_id: table::LEARNED_MAC,
        specs: vec![
            learn_ipv4(),
            learn_spec(32, Field::ArpSpa, LearnDst::Match(whole(Field::Ipv4Dst))),
            learn_spec(48, Field::ArpSha, LearnDst::Load(whole(Field::EthDst))),
        ],
        ..Learn::default()
    })
}

/// IPv4 to `net`.
pub(super) fn ip_net(net: ipnet::Ipv4Net) -> Match {
    ip().with_masked(
        Field::Ipv4Dst,
        u32::from(net.network()),
        u32::from(net.netmask()),
    )
}

/// `OFPP_LOCAL` as a 32-bit port: the bridge's own port.
pub(super) const OFPP_LOCAL: u32 = 0xffff_fffe;

/// `OFPP_IN_PORT` as a 32-bit port.
pub(super) const OFPP_IN_PORT: u32 = 0xffff_fff8;
