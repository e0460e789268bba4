//! A live packet trace through a node's pipeline, as Antrea's Traceflow does it: pure parts.
//!
//! The daemon injects a probe (a TCP SYN or a UDP datagram whose IP header carries a DSCP
//! *tag*) into the source port with a packet-out, after installing *twins* of the flows the
//! probe can meet: each twin is its original with `ip_dscp=TAG` added to the match, one
//! priority higher, a trace cookie, and a short hard timeout. A twin either reports and goes on
//! (`controller` prepended to the original's actions: the classifier, the service's flow, the
//! way on to another node) or reports instead of acting (the exits: output, drop, refusal). The switch
//! sends each report as a packet-in, with the twin's cookie, the packet as it is at that point
//! (after any NAT), and its registers; [`Trace`] turns them into the path.
//!
//! Nothing here does I/O: [`plan`] chooses the twins from the node's desired flows, [`Probe`]
//! builds the frame, [`Trace::report`] explains the packet-ins.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use openflow::action::OFPP_CONTROLLER;
use openflow::field::Field;
use openflow::instruction::Instruction;
use openflow::msg::{Body, FlowMod, FlowModCommand, PacketIn};
use openflow::{Action, Match};
use serde::{Deserialize, Serialize};

use crate::flow::{DumpFlow, FlowEntry, FlowKey};
use crate::pipeline::{cookie, table};
use crate::reject::{internet_checksum, transport_checksum, transport_checksum_v6};

/// `OFPP_ANY`.
const OFPP_ANY: u32 = 0xffff_ffff;
/// `OFPG_ANY`.
const OFPG_ANY: u32 = 0xffff_ffff;

/// Twins carry this mark ("ST"), not svcflow's, so syncs never see nor delete them.
pub const MARK: u64 = 0x5354 << 48;
/// The cookie mask that selects one trace's twins.
pub const TRACE_MASK: u64 = 0xffff_ffff_ffff_0000;
/// Twins remove themselves this many seconds after they are installed, even if the
/// controller that installed them dies mid-trace.
pub const HARD_TIMEOUT: u16 = 10;
/// The DSCP values a trace can tag its probe with, one per concurrent trace. Rare in real
/// traffic (odd class selectors' neighbours); a real packet carrying one during a trace is
/// reported instead of forwarded at the exits.
pub const TAGS: [u8; 8] = [49, 51, 53, 55, 57, 59, 61, 63];
/// At most this many twins per node and trace (the affinity and refusal flows of every
/// service are exits too); a trace that would need more is refused.
pub const MAX_TWINS: usize = 4096;

/// The cookie of twin `index` of trace `id`.
pub const fn twin_cookie(id: u16, index: u16) -> u64 {
    MARK | ((id as u64) << 16) | index as u64
}

/// The cookie (with [`TRACE_MASK`]) that selects every twin of trace `id`.
pub const fn trace_cookie(id: u16) -> u64 {
    twin_cookie(id, 0)
}

/// The transport of the probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// A TCP SYN.
    Tcp,
    /// A UDP datagram.
    Udp,
}

impl Proto {
    fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        })
    }
}

pub use crate::family::Family;
use crate::family::addr_value as bits;

/// What to trace, as asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceRequest {
    /// The node whose switch the probe enters.
    pub node: String,
    /// The source: a pod (`namespace/name`), or an address of the destination's family (a
    /// pod's, else a host beyond the node's uplink). A dual-stack pod named sends from its
    /// address of the destination's family.
    pub from: String,
    /// The destination, `IPv4:PORT` or `[IPv6]:PORT`.
    pub to: String,
    /// `tcp` (the default) or `udp`.
    #[serde(default = "tcp")]
    pub protocol: Proto,
}

fn tcp() -> Proto {
    Proto::Tcp
}

impl TraceRequest {
    /// The destination address and port: `IPv4:PORT`, or `[IPv6]:PORT` (an IPv6 address
    /// without brackets is refused: its last group could be the port).
    pub fn destination(&self) -> Result<(IpAddr, u16), String> {
        let to = self.to.trim();
        let (ip, port) = to
            .rsplit_once(':')
            .ok_or_else(|| format!("to: {:?} is not IP:PORT", excerpt(to)))?;
        let ip: IpAddr = match ip.strip_prefix('[') {
            Some(inner) => {
                let inner = inner
                    .strip_suffix(']')
                    .ok_or_else(|| format!("to: {:?} is not [IPv6]:PORT", excerpt(to)))?;
                inner
                    .parse::<Ipv6Addr>()
                    .map(IpAddr::V6)
                    .map_err(|_| format!("to: {:?} is not an IPv6 address", excerpt(inner)))?
            }
            None => match ip.parse::<Ipv4Addr>() {
                Ok(v4) => IpAddr::V4(v4),
                Err(_) if ip.contains(':') || to.parse::<Ipv6Addr>().is_ok() => {
                    return Err(format!(
                        "to: {:?}: write an IPv6 destination as [ADDRESS]:PORT",
                        excerpt(to)
                    ));
                }
                Err(_) => return Err(format!("to: {:?} is not an IP address", excerpt(ip))),
            },
        };
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("to: {:?} is not a port (1-65535)", excerpt(port)))?;
        Ok((ip, port))
    }

    /// The family of the destination, if it parses.
    pub fn family(&self) -> Result<Family, String> {
        self.destination().map(|(ip, _)| Family::of(ip))
    }
}

fn excerpt(s: &str) -> String {
    s.chars().take(64).collect()
}

/// The probe's headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// The port it enters by.
    pub in_port: u32,
    /// Source and destination MACs.
    pub eth_src: [u8; 6],
    /// Destination MAC (the virtual gateway's).
    pub eth_dst: [u8; 6],
    /// Source address, of the destination's family.
    pub src: IpAddr,
    /// Destination address: its family is the probe's.
    pub dst: IpAddr,
    /// Transport.
    pub proto: Proto,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// The DSCP tag (in the IPv4 TOS or the IPv6 traffic class).
    pub tag: u8,
}

impl Probe {
    /// Its family: the destination's.
    pub fn family(&self) -> Family {
        Family::of(self.dst)
    }

    /// The Ethernet frame, checksums included: IPv4 or IPv6 as the destination is. (A
    /// source of the other family, which the daemon never gives, is written as its
    /// IPv4-mapped IPv6 address, or as 0.0.0.0.)
    pub fn frame(&self) -> Vec<u8> {
        let l4 = self.transport();
        let mut f = Vec::with_capacity(14 + 40 + l4.len());
        f.extend_from_slice(&self.eth_dst);
        f.extend_from_slice(&self.eth_src);
        f.extend_from_slice(&self.family().eth_type().to_be_bytes());
        let csum_at = match self.proto {
            Proto::Tcp => 16,
            Proto::Udp => 6,
        };
        let mut l4 = l4;
        let sum = match self.dst {
            IpAddr::V4(dst) => {
                let src = match self.src {
                    IpAddr::V4(v4) => v4,
                    IpAddr::V6(v6) => v6.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
                };
                let total = 20 + l4.len();
                let mut ip = Vec::with_capacity(20);
                ip.push(0x45);
                ip.push(self.tag << 2);
                ip.extend_from_slice(&(total as u16).to_be_bytes());
                ip.extend_from_slice(&[0, 0, 0x40, 0]); // id 0, don't fragment
                ip.push(64);
                ip.push(self.proto.number());
                ip.extend_from_slice(&[0, 0]);
                ip.extend_from_slice(&src.octets());
                ip.extend_from_slice(&dst.octets());
                let sum = internet_checksum(&[&ip]);
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
                f.extend_from_slice(&ip);
                transport_checksum(&src.octets(), &dst.octets(), self.proto.number(), &l4)
            }
            IpAddr::V6(dst) => {
                let src = match self.src {
                    IpAddr::V6(v6) => v6,
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                };
                // Version 6, the tag in the traffic class's DSCP bits, flow label 0.
                let first = (6u32 << 28) | (u32::from(self.tag & 0x3f) << 22);
                f.extend_from_slice(&first.to_be_bytes());
                f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
                f.push(self.proto.number());
                f.push(64); // hop limit
                f.extend_from_slice(&src.octets());
                f.extend_from_slice(&dst.octets());
                transport_checksum_v6(&src.octets(), &dst.octets(), self.proto.number(), &l4)
            }
        };
        // A UDP checksum that sums to zero is sent as all ones (0 means none, which IPv6
        // forbids).
        let sum = match (self.proto, sum) {
            (Proto::Udp, 0) => 0xffff,
            _ => sum,
        };
        l4[csum_at..csum_at + 2].copy_from_slice(&sum.to_be_bytes());
        f.extend_from_slice(&l4);
        f
    }

    /// The TCP SYN or UDP datagram, its checksum zero.
    fn transport(&self) -> Vec<u8> {
        let mut l4 = Vec::with_capacity(20);
        l4.extend_from_slice(&self.sport.to_be_bytes());
        l4.extend_from_slice(&self.dport.to_be_bytes());
        match self.proto {
            Proto::Tcp => {
                l4.extend_from_slice(&0x5356_0000u32.to_be_bytes()); // sequence
                l4.extend_from_slice(&[0, 0, 0, 0]); // acknowledgement
                l4.extend_from_slice(&[0x50, 0x02]); // 5 words, SYN
                l4.extend_from_slice(&64240u16.to_be_bytes()); // window
                l4.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent
            }
            Proto::Udp => {
                l4.extend_from_slice(&16u16.to_be_bytes());
                l4.extend_from_slice(&[0, 0]);
                l4.extend_from_slice(b"svctrace");
            }
        }
        l4
    }
}

/// What a twin reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The classifier took the probe in from its port (goes on).
    Classifier,
    /// The probe came in from another node (tunnel or uplink) (goes on).
    Arrived,
    /// A service's flow matched (goes on).
    Service,
    /// Table 60 sends it on to another node (goes on, to be seen there).
    Onward,
    /// Table 60 would output it here (reported instead of delivered).
    Output,
    /// A flow drops it.
    Drop,
    /// A flow refuses it (TCP RST or ICMP port unreachable to the sender).
    Refuse,
    /// A flow sends it to svcflow, which answers it for the node (a health-check node port).
    Answer,
}

impl Role {
    /// Whether the probe ends here.
    pub fn is_exit(self) -> bool {
        matches!(
            self,
            Role::Output | Role::Drop | Role::Refuse | Role::Answer
        )
    }
}

/// A twin to install: the flow to add, and what it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Twin {
    /// The twin's table, priority and match.
    pub key: FlowKey,
    /// The twin's cookie and instructions.
    pub entry: FlowEntry,
    /// What it reports.
    pub role: Role,
    /// The original flow, as `ovs-ofctl dump-flows` prints it.
    pub original: String,
}

impl Twin {
    /// The flow_mod that installs it.
    pub fn flow_mod(&self) -> Body {
        Body::FlowMod(FlowMod {
            cookie: self.entry.cookie,
            table_id: self.key.table,
            command: FlowModCommand::Add,
            hard_timeout: HARD_TIMEOUT,
            priority: self.key.priority,
            out_port: OFPP_ANY,
            out_group: OFPG_ANY,
            match_: self.key.matches(),
            instructions: self.entry.instructions.to_wire(),
            ..FlowMod::default()
        })
    }
}

/// The flow_mod that removes every twin of trace `id` (from every table).
pub fn remove(id: u16) -> Body {
    Body::FlowMod(FlowMod {
        cookie: trace_cookie(id),
        cookie_mask: TRACE_MASK,
        table_id: 0xff,
        command: FlowModCommand::Delete,
        out_port: OFPP_ANY,
        out_group: OFPG_ANY,
        ..FlowMod::default()
    })
}

/// What the twins of one node are chosen for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The trace's id and tag.
    pub id: u16,
    /// DSCP tag.
    pub tag: u8,
    /// The probe's transport.
    pub proto: Proto,
    /// The probe's family (the destination's): only flows of it are watched.
    pub family: Family,
    /// On the probe's own node: it, as it enters.
    pub probe: Option<Probe>,
    /// Where table 60 sends packets on to another node: the tunnel port (anything it
    /// outputs there), or the uplink towards one node's pod CIDR. A probe output there is
    /// reported and goes on, to be seen by that node.
    pub onward: Vec<Onward>,
    /// The ports packets from other nodes come in by (tunnel, uplink).
    pub arrivals: Vec<u32>,
}

/// A way out of the node towards another node this controller serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Onward {
    /// The output port.
    pub port: u32,
    /// Only packets to this range (a node's pod CIDR of either family): address and
    /// prefix length. A range of the other family than the probe's makes no twin.
    pub dst: Option<(IpAddr, u8)>,
}

/// Why no twins could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// More twins than [`MAX_TWINS`].
    TooMany(usize),
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::TooMany(n) => write!(
                f,
                "the trace would need {n} temporary flows on one node (at most {MAX_TWINS})"
            ),
        }
    }
}

/// The twins for one node, from its desired flows (in table order).
///
/// On the probe's node: the classifier's flows for its port, the flows of table 40 (services)
/// it matches as it enters, and every exit it could meet: drop and refusal flows of tables up
/// to 40 that its headers match, those of later tables (where its addresses may have been
/// translated) that its protocol matches, and table 60's output. On the other nodes: the
/// classifier of the ports other nodes' packets come in by, the exits whose match names no
/// destination address, and output. A twin sits one priority above its original (two for
/// the ways on to other nodes); where another flow
/// of the table already sits there and could match the probe, no twin is made, and the
/// original is listed in the second part of the result (the trace cannot see it).
pub fn plan<'a>(
    flows: impl Iterator<Item = (&'a FlowKey, &'a FlowEntry)> + Clone,
    scope: &Scope,
) -> Result<(Vec<Twin>, Vec<String>), PlanError> {
    // The flows at each table and priority, so that finding who sits where a twin would is a
    // lookup, not a scan of the node's flows per twin.
    let mut at: BTreeMap<(u8, u16), Vec<&FlowKey>> = BTreeMap::new();
    for (k, _) in flows.clone() {
        at.entry((k.table, k.priority)).or_default().push(k);
    }
    let mut twins = Vec::new();
    let mut unseen = Vec::new();
    let probe = scope.probe.as_ref();
    for (key, entry) in flows.clone() {
        let Some((role, lift)) = role_of(key, entry, scope) else {
            continue;
        };
        let priority = match key.priority.checked_add(lift) {
            Some(p) => p,
            None => {
                unseen.push(DumpFlow(key, entry).to_string());
                continue;
            }
        };
        // Another flow where the twin would sit, which the probe may match: the switch could
        // pick either, so the twin is not made.
        let crowded = (1..=lift).any(|l| {
            at.get(&(key.table, key.priority + l))
                .into_iter()
                .flatten()
                .any(|k| {
                    matches(
                        &k.matches(),
                        probe,
                        scope.family,
                        scope.proto,
                        k.table <= table::SERVICE,
                    )
                })
        });
        if crowded {
            unseen.push(DumpFlow(key, entry).to_string());
            continue;
        }
        let mut matches = key.matches();
        if matches.get(Field::EthType).is_none() {
            matches.insert(openflow::OxmField::exact(
                Field::EthType,
                scope.family.eth_type(),
            ));
        }
        matches.insert(openflow::OxmField::exact(Field::IpDscpShifted, scope.tag));
        let original = DumpFlow(key, entry).to_string();
        let mut add = |twins: &mut Vec<Twin>, role: Role, priority: u16, matches: Match| {
            // Built from a checked match plus fields of the probe's family (`ip_dscp` is
            // the IPv4 TOS's or the IPv6 traffic class's), so its prerequisites hold; a
            // twin that would not is not made, and its original is listed as not watched.
            let Ok(matches) = matches.checked() else {
                unseen.push(original.clone());
                return;
            };
            let instructions = if role.is_exit() {
                vec![Instruction::ApplyActions(vec![report_action()])]
            } else {
                report_then(&entry.instructions(), report_action())
            };
            let index = twins.len() as u16;
            twins.push(Twin {
                key: FlowKey::new(key.table, priority, &matches),
                entry: FlowEntry::new(twin_cookie(scope.id, index), instructions),
                role,
                original: original.clone(),
            });
        };
        // Table 60's flow: one twin per way on to another node (reports and goes on), and
        // one that reports output here instead.
        if role == Role::Onward {
            for onward in &scope.onward {
                let mut m = matches.clone();
                m.insert(openflow::OxmField::exact(Field::Reg7, onward.port));
                if let Some((net, len)) = onward.dst {
                    if Family::of(net) != scope.family {
                        continue;
                    }
                    let width: u8 = match net {
                        IpAddr::V4(_) => 32,
                        IpAddr::V6(_) => 128,
                    };
                    let mask = u128::MAX
                        .checked_shl(128 - u32::from(len.min(width)))
                        .unwrap_or(0)
                        >> (128 - u32::from(width));
                    m.insert(openflow::OxmField::masked(
                        scope.family.dst(),
                        bits(net) & mask,
                        mask,
                    ));
                }
                add(&mut twins, Role::Onward, priority, m);
            }
            add(&mut twins, Role::Output, key.priority + 1, matches);
        } else {
            add(&mut twins, role, priority, matches);
        }
        if twins.len() > MAX_TWINS {
            return Err(PlanError::TooMany(twins.len()));
        }
    }
    Ok((twins, unseen))
}

fn report_action() -> Action {
    Action::Output {
        port: OFPP_CONTROLLER,
        max_len: 0xffff,
    }
}

/// `instructions` with `report` first among the applied actions.
fn report_then(instructions: &[Instruction], report: Action) -> Vec<Instruction> {
    let mut out = Vec::with_capacity(instructions.len() + 1);
    let mut done = false;
    for i in instructions {
        match i {
            Instruction::ApplyActions(actions) if !done => {
                let mut a = Vec::with_capacity(actions.len() + 1);
                a.push(report.clone());
                a.extend(actions.iter().cloned());
                out.push(Instruction::ApplyActions(a));
                done = true;
            }
            other => out.push(other.clone()),
        }
    }
    if !done {
        out.insert(0, Instruction::ApplyActions(vec![report]));
    }
    out
}

/// What a flow's twin reports, and how far above it the twin sits; `None` for no twin.
fn role_of(key: &FlowKey, entry: &FlowEntry, scope: &Scope) -> Option<(Role, u16)> {
    let m = &key.matches();
    let family = scope.family;
    if matches!(m.get(Field::EthType), Some(f) if f.value != u128::from(family.eth_type())) {
        return None;
    }
    if key.table == table::OUTPUT {
        return Some(match scope.onward.is_empty() {
            false => (Role::Onward, 2),
            true => (Role::Output, 1),
        });
    }
    let probe = scope.probe.as_ref();
    let in_port = m.get(Field::InPortOxm).map(|f| f.value);
    if key.table == table::CLASSIFIER && in_port.is_some() {
        // Not the port's flows for other protocols (IPv6 neighbour solicitations).
        if !matches(m, None, family, scope.proto, false) {
            return None;
        }
        if let Some(p) = probe
            && in_port == Some(u128::from(p.in_port))
        {
            return Some((Role::Classifier, 1));
        }
        if scope
            .arrivals
            .iter()
            .any(|a| in_port == Some(u128::from(*a)))
        {
            return Some((Role::Arrived, 1));
        }
        return None;
    }
    let exit = exit_kind(entry);
    match probe {
        Some(_) => {
            let addresses = key.table <= table::SERVICE;
            if !matches(m, probe, family, scope.proto, addresses) {
                return None;
            }
            match exit {
                Some(role) => Some((role, 1)),
                None if key.table == table::SERVICE && m.get(family.dst()).is_some() => {
                    Some((Role::Service, 1))
                }
                None => None,
            }
        }
        None => {
            let role = exit?;
            (m.get(Field::Ipv4Dst).is_none()
                && m.get(Field::Ipv6Dst).is_none()
                && matches(m, None, family, scope.proto, false))
            .then_some((role, 1))
        }
    }
}

/// `Drop`, `Refuse` or `Answer` for a flow that sends the packet nowhere but maybe the
/// controller (which answers a health-check node port's, and refuses the others).
fn exit_kind(entry: &FlowEntry) -> Option<Role> {
    let mut refuse = false;
    for i in entry.instructions().iter() {
        match i {
            Instruction::GotoTable(_) | Instruction::Unknown { .. } => return None,
            Instruction::ApplyActions(actions) | Instruction::WriteActions(actions) => {
                for a in actions {
                    match a {
                        Action::Controller(_) => refuse = true,
                        Action::Output { port, .. } if *port == OFPP_CONTROLLER => refuse = true,
                        Action::Output { .. }
                        | Action::Group(_)
                        | Action::Resubmit(_)
                        | Action::Experimenter { .. }
                        | Action::Unknown { .. } => return None,
                        Action::Ct(ct) if ct.table.is_some() => return None,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(match (refuse, cookie::kind_of(entry.cookie)) {
        (true, Some(cookie::HEALTH)) => Role::Answer,
        (true, _) => Role::Refuse,
        (false, _) => Role::Drop,
    })
}

/// Whether a flow's match can take the probe: the family and protocol always, its
/// addresses, ports and port of entry when `addresses` (before any translation); other
/// fields (registers, connection state) are assumed to.
fn matches(
    m: &Match,
    probe: Option<&Probe>,
    family: Family,
    proto: Proto,
    addresses: bool,
) -> bool {
    let fits = |field: Field, value: u128| {
        m.get(field)
            .is_none_or(|f| value & f.mask_or_full() == f.value & f.mask_or_full())
    };
    if !fits(Field::EthType, u128::from(family.eth_type()))
        || !fits(Field::IpProto, u128::from(proto.number()))
    {
        return false;
    }
    let (other_dst, other_src) = match proto {
        Proto::Tcp => (Field::UdpDst, Field::UdpSrc),
        Proto::Udp => (Field::TcpDst, Field::TcpSrc),
    };
    if m.get(other_dst).is_some() || m.get(other_src).is_some() {
        return false;
    }
    let Some(p) = probe.filter(|_| addresses) else {
        return true;
    };
    let (dst_port, src_port) = match proto {
        Proto::Tcp => (Field::TcpDst, Field::TcpSrc),
        Proto::Udp => (Field::UdpDst, Field::UdpSrc),
    };
    fits(family.dst(), bits(p.dst))
        && fits(family.src(), bits(p.src))
        && fits(dst_port, u128::from(p.dport))
        && fits(src_port, u128::from(p.sport))
        && fits(Field::InPortOxm, u128::from(p.in_port))
}

/// One report of the probe: where, which flow, and the packet there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hop {
    /// The node whose switch reported it.
    pub node: String,
    /// The table.
    pub table: u8,
    /// What the flow did.
    pub role: Role,
    /// The flow the probe met (the twin's original), as `ovs-ofctl dump-flows` prints it.
    pub flow: String,
    /// The packet at that point, as `ovs-ofctl` prints packets.
    pub packet: String,
    /// Registers and tunnel fields the switch reported with it (`reg3=0x…`, `tun_dst=…`).
    pub metadata: String,
    /// What the hop means: the service, the endpoint, the port.
    pub note: String,
}

/// How the trace ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Output to a port of a node.
    Delivered,
    /// Dropped by a flow.
    Dropped,
    /// Refused (TCP RST or ICMP port unreachable).
    Refused,
    /// Answered by svcflow for the node (a health-check node port's probe).
    Answered,
    /// Sent on to another node, and not seen there (not served by this controller).
    Forwarded,
    /// No exit reported within the trace's time.
    Lost,
}

/// The trace, as printed and served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceReport {
    /// What was asked.
    pub request: TraceRequest,
    /// The trace's tag (DSCP value).
    pub tag: u8,
    /// The probe as injected, as `ovs-ofctl` prints packets.
    pub probe: String,
    /// The probe's port of entry.
    pub in_port: u32,
    /// The reports, in the order they came.
    pub hops: Vec<Hop>,
    /// How it ended.
    pub outcome: Outcome,
    /// The end in words: the port and what is behind it, or the reason.
    pub result: String,
    /// The address translation between the probe and its last report, if any.
    pub nat: Option<String>,
    /// Flows the trace could not watch (another flow sits where their twin would).
    pub unwatched: Vec<String>,
}

impl std::fmt::Display for TraceReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.request;
        writeln!(
            f,
            "trace {} {} -> {} on node {} (in_port={}, ip_dscp={})",
            r.protocol, r.from, r.to, r.node, self.in_port, self.tag
        )?;
        writeln!(f, "probe: {}", self.probe)?;
        for h in &self.hops {
            writeln!(f)?;
            writeln!(
                f,
                "{} table={} {}: {}",
                h.node,
                h.table,
                role_word(h.role),
                h.note
            )?;
            writeln!(f, "   {}", h.flow.trim_start())?;
            writeln!(f, "   packet: {}", h.packet)?;
            if !h.metadata.is_empty() {
                writeln!(f, "   {}", h.metadata)?;
            }
        }
        writeln!(f)?;
        if let Some(nat) = &self.nat {
            writeln!(f, "nat: {nat}")?;
        }
        writeln!(f, "result: {}", self.result)?;
        for u in &self.unwatched {
            writeln!(
                f,
                "not watched (another flow shares its twin's priority): {u}"
            )?;
        }
        Ok(())
    }
}

fn role_word(role: Role) -> &'static str {
    match role {
        Role::Classifier => "classifier",
        Role::Arrived => "arrived",
        Role::Service => "service",
        Role::Onward => "onward",
        Role::Output => "output",
        Role::Drop => "drop",
        Role::Refuse => "refuse",
        Role::Answer => "answer",
    }
}

/// The 5-tuple of an IPv4 or IPv6 frame, if it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

impl Tuple {
    /// Reads it from an Ethernet frame (no VLAN tag; svcflow's ports carry none; an IPv6
    /// packet's transport right after the fixed header, as the probe's is).
    pub fn of(frame: &[u8]) -> Option<Tuple> {
        let ip = frame.get(14..)?;
        let (src, dst, l4): (IpAddr, IpAddr, usize) = match frame.get(12..14)? {
            [0x08, 0x00] => {
                let addr = |at: usize| -> Option<IpAddr> {
                    let b: [u8; 4] = ip.get(at..at + 4)?.try_into().ok()?;
                    Some(IpAddr::from(b))
                };
                (addr(12)?, addr(16)?, usize::from(ip.first()? & 0x0f) * 4)
            }
            [0x86, 0xdd] => {
                let addr = |at: usize| -> Option<IpAddr> {
                    let b: [u8; 16] = ip.get(at..at + 16)?.try_into().ok()?;
                    Some(IpAddr::from(b))
                };
                if !matches!(ip.get(6)?, 6 | 17 | 132) {
                    return None;
                }
                (addr(8)?, addr(24)?, 40)
            }
            _ => return None,
        };
        let port = |at: usize| -> Option<u16> {
            let b: [u8; 2] = ip.get(l4 + at..l4 + at + 2)?.try_into().ok()?;
            Some(u16::from_be_bytes(b))
        };
        Some(Tuple {
            src,
            dst,
            sport: port(0)?,
            dport: port(2)?,
        })
    }
}

/// What the daemon knows of a node to explain its reports.
#[derive(Debug, Clone, Default)]
pub struct Names {
    /// What is behind each OpenFlow port (`pod default/web-1`, `uplink`, …).
    pub ports: BTreeMap<u32, String>,
    /// Each service port's name, by its cookie.
    pub services: BTreeMap<u64, String>,
    /// The nodes' underlay addresses (both families), for tunnel exits.
    pub nodes: BTreeMap<IpAddr, String>,
    /// The nodes' pod CIDRs of both families (address, prefix length), for exits towards
    /// them.
    pub pod_cidrs: Vec<(IpAddr, u8, String)>,
}

impl Names {
    /// The node whose pod CIDR holds `ip`.
    pub fn node_of_pod(&self, ip: IpAddr) -> Option<&str> {
        self.pod_cidrs.iter().find_map(|(net, len, node)| {
            let net = ipnet::IpNet::new(*net, *len).ok()?;
            net.contains(&ip).then_some(node.as_str())
        })
    }
}

/// One node's twins, as installed, for [`Trace::report`].
#[derive(Debug, Clone)]
pub struct NodeTwins {
    /// The node.
    pub node: String,
    /// Its twins, by index.
    pub twins: Vec<Twin>,
    /// What is behind its ports and cookies.
    pub names: Names,
}

/// Everything needed to explain one trace's packet-ins.
#[derive(Debug, Clone)]
pub struct Trace {
    /// What was asked.
    pub request: TraceRequest,
    /// The probe.
    pub probe: Probe,
    /// Every node's twins.
    pub nodes: Vec<NodeTwins>,
    /// Flows no twin watches.
    pub unwatched: Vec<String>,
}

impl Trace {
    /// The twin a packet-in of this trace reports, with its node.
    pub fn twin(&self, node: &str, packet_in: &PacketIn) -> Option<(&NodeTwins, &Twin)> {
        let id = trace_cookie(self.id());
        if packet_in.cookie & TRACE_MASK != id {
            return None;
        }
        let n = self.nodes.iter().find(|n| n.node == node)?;
        let t = n.twins.get((packet_in.cookie & 0xffff) as usize)?;
        Some((n, t))
    }

    fn id(&self) -> u16 {
        self.nodes
            .iter()
            .flat_map(|n| n.twins.first())
            .map(|t| ((t.entry.cookie >> 16) & 0xffff) as u16)
            .next()
            .unwrap_or(0)
    }

    /// Whether a report ends the trace: an exit, or a packet-in from a twin of none.
    pub fn ends(&self, node: &str, packet_in: &PacketIn) -> bool {
        self.twin(node, packet_in)
            .is_some_and(|(_, t)| t.role.is_exit())
    }

    /// Whether the reports gathered so far tell a whole path: an exit is among them, and if
    /// another node took the probe in, the probe's node reported sending it on. (Each switch
    /// reports on its own connection, and a loaded switch sends its packet-ins late: the far
    /// node's exit can come first.)
    pub fn complete(&self, reports: &[(String, PacketIn)]) -> bool {
        let roles: Vec<(&str, Role)> = reports
            .iter()
            .filter_map(|(node, pi)| self.twin(node, pi).map(|(_, t)| (node.as_str(), t.role)))
            .collect();
        let exit = reports.iter().any(|(node, pi)| self.ends(node, pi));
        let arrived_elsewhere = roles
            .iter()
            .any(|(n, r)| *r == Role::Arrived && *n != self.request.node);
        let sent_on = roles
            .iter()
            .any(|(n, r)| *r == Role::Onward && *n == self.request.node);
        exit && (!arrived_elsewhere || sent_on)
    }

    /// The path, from the packet-ins of this trace (by node, in the order they came). Each
    /// switch's reports come in its own order; the probe's node comes first, then the node it
    /// went on to.
    pub fn report(&self, reports: &[(String, PacketIn)]) -> TraceReport {
        let first = Tuple::of(&self.probe.frame());
        let mut hops = Vec::new();
        let mut last: Option<(Tuple, &Twin, &NodeTwins, &PacketIn)> = None;
        let mut ordered: Vec<&(String, PacketIn)> = reports.iter().collect();
        ordered.sort_by_key(|(node, _)| *node != self.request.node);
        for (node, pi) in ordered {
            let Some((n, twin)) = self.twin(node, pi) else {
                continue;
            };
            let note = note(twin, n, pi);
            hops.push(Hop {
                node: node.clone(),
                table: twin.key.table,
                role: twin.role,
                flow: twin.original.clone(),
                packet: openflow::packet_fmt::packet_to_string(&pi.data)
                    .map(|s| s.trim_end().to_string())
                    .unwrap_or_else(|| format!("({} bytes, not Ethernet)", pi.data.len())),
                metadata: metadata(&pi.match_),
                note,
            });
            if let Some(t) = Tuple::of(&pi.data) {
                last = Some((t, twin, n, pi));
            }
        }
        let nat = match (first, last.as_ref()) {
            (Some(a), Some((b, ..))) if a != *b => Some(nat_text(&a, b)),
            _ => None,
        };
        let end = hops.last().map(|h| (h.role, h.note.clone()));
        let (outcome, result) = match end {
            Some((Role::Output, note)) => (Outcome::Delivered, note),
            Some((Role::Drop, note)) => (Outcome::Dropped, note),
            Some((Role::Refuse, note)) => (Outcome::Refused, note),
            Some((Role::Answer, note)) => (Outcome::Answered, note),
            Some((Role::Onward, note)) => (
                Outcome::Forwarded,
                format!("{note}; no report from the other side"),
            ),
            _ => (
                Outcome::Lost,
                "no exit reported: the probe left the pipeline where no twin watches".to_string(),
            ),
        };
        TraceReport {
            request: self.request.clone(),
            tag: self.probe.tag,
            probe: openflow::packet_fmt::packet_to_string(&self.probe.frame())
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default(),
            in_port: self.probe.in_port,
            hops,
            outcome,
            result,
            nat,
            unwatched: self.unwatched.clone(),
        }
    }
}

fn reg(m: &Match, field: Field) -> Option<u32> {
    m.get(field).and_then(|f| u32::try_from(f.value).ok())
}

/// What a hop means.
fn note(twin: &Twin, n: &NodeTwins, pi: &PacketIn) -> String {
    let m = &pi.match_;
    let original_cookie = twin
        .original
        .split("cookie=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let port_name = |p: u32| {
        n.names
            .ports
            .get(&p)
            .map_or_else(|| format!("port {p}"), |name| format!("port {p} ({name})"))
    };
    match twin.role {
        Role::Classifier => match reg(m, Field::InPortOxm).or(reg(m, Field::InPort)) {
            Some(p) => format!("in from {}", port_name(p)),
            None => "in".to_string(),
        },
        Role::Arrived => match reg(m, Field::InPortOxm).or(reg(m, Field::InPort)) {
            Some(p) => format!("in from another node by {}", port_name(p)),
            None => "in from another node".to_string(),
        },
        Role::Service => match original_cookie.and_then(|c| n.names.services.get(&c)) {
            Some(s) => format!("service port {s}"),
            None => "a service's flow".to_string(),
        },
        Role::Onward | Role::Output => {
            let endpoint = endpoint(m);
            let port = reg(m, Field::Reg7).unwrap_or(0);
            if twin.role == Role::Onward {
                let tunnel_destination = reg(m, Field::TunDst)
                    .map(|d| IpAddr::V4(Ipv4Addr::from(d)))
                    .or_else(|| {
                        let v6 = m.get(Field::TunIpv6Dst)?.value;
                        Some(IpAddr::V6(std::net::Ipv6Addr::from(v6)))
                    });
                let to = match tunnel_destination {
                    Some(d) => match n.names.nodes.get(&d) {
                        Some(node) => format!(" to {d} (node {node})"),
                        None => format!(" to {d}"),
                    },
                    None => match Tuple::of(&pi.data).and_then(|t| n.names.node_of_pod(t.dst)) {
                        Some(node) => format!(" towards node {node}"),
                        None => String::new(),
                    },
                };
                format!("on to another node by {}{to}{endpoint}", port_name(port))
            } else {
                format!("output to {} on node {}{endpoint}", port_name(port), n.node)
            }
        }
        Role::Drop => match original_cookie.and_then(|c| n.names.services.get(&c)) {
            Some(s) => format!("dropped on node {} by service port {s}'s flow", n.node),
            None => format!("dropped on node {} by the flow above", n.node),
        },
        Role::Refuse => match original_cookie.and_then(|c| n.names.services.get(&c)) {
            Some(s) => format!(
                "refused on node {}: service port {s} has no endpoint (TCP RST or ICMP port \
                 unreachable to the sender)",
                n.node
            ),
            None if original_cookie.and_then(cookie::kind_of) == Some(cookie::REFUSE) => {
                format!(
                    "refused on node {}: no service port takes this address and port (the \
                     service CIDR, or the virtual gateway's node ports)",
                    n.node
                )
            }
            None => format!("refused on node {}", n.node),
        },
        Role::Answer => format!(
            "answered by svcflow for node {}: health-check node port {}, with the node's local \
             endpoint count",
            n.node,
            original_cookie.map_or(0, cookie::id_of)
        ),
    }
}

/// The endpoint a group's bucket chose, from a packet-in's registers: an IPv6 address in
/// reg12..reg15 (most significant word first), else an IPv4 one in reg3; its port in reg4.
fn endpoint(m: &Match) -> String {
    let Some(port) = reg(m, Field::Reg4).and_then(|p| u16::try_from(p).ok()) else {
        return String::new();
    };
    let words = [Field::Reg12, Field::Reg13, Field::Reg14, Field::Reg15].map(|f| reg(m, f));
    let v6 = words
        .iter()
        .fold(0u128, |a, w| (a << 32) | u128::from(w.unwrap_or(0)));
    if v6 != 0 {
        let at = SocketAddr::new(IpAddr::V6(Ipv6Addr::from(v6)), port);
        return format!(", endpoint {at} chosen by the group's bucket (reg12..reg15, reg4)");
    }
    match reg(m, Field::Reg3) {
        Some(ip) if ip != 0 => {
            let at = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port);
            format!(", endpoint {at} chosen by the group's bucket (reg3, reg4)")
        }
        _ => String::new(),
    }
}

/// The registers and tunnel fields of a packet-in, as `ovs-ofctl` names them.
fn metadata(m: &Match) -> String {
    let wanted = [
        Field::Reg0,
        Field::Reg3,
        Field::Reg4,
        Field::Reg5,
        Field::Reg6,
        Field::Reg7,
        Field::Reg12,
        Field::Reg13,
        Field::Reg14,
        Field::Reg15,
        Field::TunDst,
        Field::TunIpv6Dst,
        Field::TunId,
    ];
    let mut kept = Match::new();
    for f in &m.fields {
        if wanted.contains(&f.field) {
            kept.insert(*f);
        }
    }
    if kept.fields.is_empty() {
        return String::new();
    }
    openflow::match_fmt::format_match(&kept, None)
}

/// `dst 10.96.0.10:80 -> 10.244.0.12:8080`, `dst [fd00:10:96::10]:80 -> [fd00:…]:8080`.
fn nat_text(a: &Tuple, b: &Tuple) -> String {
    let at = |ip: IpAddr, port: u16| SocketAddr::new(ip, port);
    let mut parts = Vec::new();
    if (a.dst, a.dport) != (b.dst, b.dport) {
        parts.push(format!(
            "dst {} -> {}",
            at(a.dst, a.dport),
            at(b.dst, b.dport)
        ));
    }
    if (a.src, a.sport) != (b.src, b.sport) {
        parts.push(format!(
            "src {} -> {}",
            at(a.src, a.sport),
            at(b.src, b.sport)
        ));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests;
