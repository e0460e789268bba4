//! Match fields: the OXM basic fields (OF1.3 §7.2.3.7) and the Nicira/ONF
//! extension fields Open vSwitch uses (`include/openvswitch/meta-flow.h`).
//!
//! Each [`Field`] knows its NXM header (used by Nicira actions such as
//! `reg_move`, which always speak NXM), its OXM header (used in OF1.3
//! matches and `set_field`), its width, whether it is maskable and its
//! prerequisite.

/// Header class of the OXM basic fields (OF1.3 §7.2.3.2 `OFPXMC_OPENFLOW_BASIC`).
pub const OXM_CLASS_BASIC: u16 = 0x8000;
/// `OFPXMC_PACKET_REGS` (OF1.5, used by OVS for `xreg`).
pub const OXM_CLASS_PACKET_REGS: u16 = 0x8001;
/// `NXM_OF_*` class.
pub const NXM_CLASS_0: u16 = 0x0000;
/// `NXM_NX_*` class.
pub const NXM_CLASS_1: u16 = 0x0001;
/// The class of the Ericsson fields Open vSwitch adopted (`ERICOXM_OF_*`, the ND reserved
/// word and option type, since OVS 2.11).
pub const OXM_CLASS_ERICSSON: u16 = 0x1000;
/// `OFPXMC_EXPERIMENTER`.
pub const OXM_CLASS_EXPERIMENTER: u16 = 0xffff;
/// The ONF experimenter id (`ONF_VENDOR_ID`, openflow-common.h).
pub const ONF_EXPERIMENTER: u32 = 0x4f4e_4600;

/// A field's header in one encoding: class, field number and, for
/// `OFPXMC_EXPERIMENTER`, the experimenter id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeaderId {
    /// OXM class.
    pub class: u16,
    /// Field number (7 bits).
    pub field: u8,
    /// Experimenter id, 0 unless `class == 0xffff`.
    pub experimenter: u32,
}

/// What must already be matched before a field may be (OF1.3 §7.2.3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prereq {
    /// No prerequisite.
    None,
    /// `vlan_vid` with the present bit.
    Vlan,
    /// IPv4 or IPv6.
    Ip,
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// ARP or RARP.
    Arp,
    /// TCP over IP.
    Tcp,
    /// UDP over IP.
    Udp,
    /// SCTP over IP.
    Sctp,
    /// ICMPv4.
    Icmpv4,
    /// ICMPv6.
    Icmpv6,
    /// ICMPv6 neighbour solicitation or advertisement.
    Nd,
    /// ICMPv6 neighbour solicitation.
    NdSolicit,
    /// ICMPv6 neighbour advertisement.
    NdAdvert,
    /// MPLS unicast or multicast.
    Mpls,
    /// PBB (802.1ah).
    Pbb,
}

/// How `ovs-ofctl` prints a field value (meta-flow.h `enum mf_string`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Decimal integer.
    Decimal,
    /// `0x`-prefixed hex without leading zeros.
    Hex,
    /// Ethernet address.
    Eth,
    /// IPv4 address.
    Ipv4,
    /// IPv6 address.
    Ipv6,
    /// 16-bit OpenFlow port.
    Port,
    /// 32-bit OpenFlow port.
    PortOxm,
    /// Connection tracking state flags.
    CtState,
    /// TCP flags.
    TcpFlags,
    /// Fragment flags.
    Frag,
}

/// Static description of a field.
#[derive(Debug)]
pub struct FieldInfo {
    /// Open vSwitch field name, as printed by `set_field:...->NAME`.
    pub name: &'static str,
    /// NXM header and name, if the field has one.
    pub nxm: Option<(u16, u8, &'static str)>,
    /// OXM header usable in OF1.3 and its name, if any.
    pub oxm: Option<(u16, u8, u32, &'static str)>,
    /// Width in bytes.
    pub bytes: u8,
    /// Width in bits.
    pub bits: u16,
    /// Whether a mask may be given.
    pub maskable: bool,
    /// Prerequisite.
    pub prereq: Prereq,
    /// Print style.
    pub style: Style,
}

macro_rules! fields {
    ($( $(#[$m:meta])* $var:ident = $name:literal, $nxm:expr, $oxm:expr, $bytes:literal, $bits:literal, $mask:literal, $pre:ident, $style:ident; )*) => {
        /// A match field known to this codec.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Field {
            $( $(#[$m])* $var, )*
        }

        /// Field descriptions, indexed by `Field as usize`.
        const FIELDS: &[FieldInfo] = &[
            $( FieldInfo { name: $name, nxm: $nxm, oxm: $oxm, bytes: $bytes, bits: $bits, maskable: $mask, prereq: Prereq::$pre, style: Style::$style }, )*
        ];

        impl Field {
            /// Every field, in declaration order.
            pub const ALL: &'static [Field] = &[ $( Field::$var, )* ];
        }
    };
}

const fn nx0(f: u8, n: &'static str) -> Option<(u16, u8, &'static str)> {
    Some((NXM_CLASS_0, f, n))
}
const fn nx1(f: u8, n: &'static str) -> Option<(u16, u8, &'static str)> {
    Some((NXM_CLASS_1, f, n))
}
const fn of(f: u8, n: &'static str) -> Option<(u16, u8, u32, &'static str)> {
    Some((OXM_CLASS_BASIC, f, 0, n))
}
const fn onf(f: u8, n: &'static str) -> Option<(u16, u8, u32, &'static str)> {
    Some((OXM_CLASS_EXPERIMENTER, f, ONF_EXPERIMENTER, n))
}
const fn pkt(f: u8, n: &'static str) -> Option<(u16, u8, u32, &'static str)> {
    Some((OXM_CLASS_PACKET_REGS, f, 0, n))
}
const fn eric(f: u8, n: &'static str) -> Option<(u16, u8, u32, &'static str)> {
    Some((OXM_CLASS_ERICSSON, f, 0, n))
}
const NO_NXM: Option<(u16, u8, &'static str)> = None;
const NO_OXM: Option<(u16, u8, u32, &'static str)> = None;

fields! {
    /// `in_port` as a 16-bit port (NXM only).
    InPort = "in_port", nx0(0, "NXM_OF_IN_PORT"), NO_OXM, 2, 16, false, None, Port;
    /// `in_port` as a 32-bit OXM port.
    InPortOxm = "in_port_oxm", NO_NXM, of(0, "OXM_OF_IN_PORT"), 4, 32, false, None, PortOxm;
    /// Physical input port.
    InPhyPort = "in_phy_port", NO_NXM, of(1, "OXM_OF_IN_PHY_PORT"), 4, 32, false, None, PortOxm;
    /// Pipeline metadata.
    Metadata = "metadata", NO_NXM, of(2, "OXM_OF_METADATA"), 8, 64, true, None, Hex;
    /// Ethernet destination.
    EthDst = "eth_dst", nx0(1, "NXM_OF_ETH_DST"), of(3, "OXM_OF_ETH_DST"), 6, 48, true, None, Eth;
    /// Ethernet source.
    EthSrc = "eth_src", nx0(2, "NXM_OF_ETH_SRC"), of(4, "OXM_OF_ETH_SRC"), 6, 48, true, None, Eth;
    /// Ethernet type.
    EthType = "eth_type", nx0(3, "NXM_OF_ETH_TYPE"), of(5, "OXM_OF_ETH_TYPE"), 2, 16, false, None, Hex;
    /// 802.1Q TCI (NXM).
    VlanTci = "vlan_tci", nx0(4, "NXM_OF_VLAN_TCI"), NO_OXM, 2, 16, true, None, Hex;
    /// VLAN id with the `OFPVID_PRESENT` bit.
    VlanVid = "vlan_vid", NO_NXM, of(6, "OXM_OF_VLAN_VID"), 2, 12, true, None, Decimal;
    /// VLAN priority.
    VlanPcp = "vlan_pcp", NO_NXM, of(7, "OXM_OF_VLAN_PCP"), 1, 3, false, Vlan, Decimal;
    /// IP TOS byte with the ECN bits clear (NXM).
    IpDscp = "nw_tos", nx0(5, "NXM_OF_IP_TOS"), NO_OXM, 1, 8, false, Ip, Decimal;
    /// IP DSCP shifted right by two (OXM).
    IpDscpShifted = "ip_dscp", NO_NXM, of(8, "OXM_OF_IP_DSCP"), 1, 6, false, Ip, Decimal;
    /// IP ECN.
    IpEcn = "nw_ecn", nx1(28, "NXM_NX_IP_ECN"), of(9, "OXM_OF_IP_ECN"), 1, 2, false, Ip, Decimal;
    /// IP protocol.
    IpProto = "nw_proto", nx0(6, "NXM_OF_IP_PROTO"), of(10, "OXM_OF_IP_PROTO"), 1, 8, false, Ip, Decimal;
    /// IPv4 source.
    Ipv4Src = "ip_src", nx0(7, "NXM_OF_IP_SRC"), of(11, "OXM_OF_IPV4_SRC"), 4, 32, true, Ipv4, Ipv4;
    /// IPv4 destination.
    Ipv4Dst = "ip_dst", nx0(8, "NXM_OF_IP_DST"), of(12, "OXM_OF_IPV4_DST"), 4, 32, true, Ipv4, Ipv4;
    /// TCP source port.
    TcpSrc = "tcp_src", nx0(9, "NXM_OF_TCP_SRC"), of(13, "OXM_OF_TCP_SRC"), 2, 16, true, Tcp, Decimal;
    /// TCP destination port.
    TcpDst = "tcp_dst", nx0(10, "NXM_OF_TCP_DST"), of(14, "OXM_OF_TCP_DST"), 2, 16, true, Tcp, Decimal;
    /// UDP source port.
    UdpSrc = "udp_src", nx0(11, "NXM_OF_UDP_SRC"), of(15, "OXM_OF_UDP_SRC"), 2, 16, true, Udp, Decimal;
    /// UDP destination port.
    UdpDst = "udp_dst", nx0(12, "NXM_OF_UDP_DST"), of(16, "OXM_OF_UDP_DST"), 2, 16, true, Udp, Decimal;
    /// SCTP source port.
    SctpSrc = "sctp_src", NO_NXM, of(17, "OXM_OF_SCTP_SRC"), 2, 16, true, Sctp, Decimal;
    /// SCTP destination port.
    SctpDst = "sctp_dst", NO_NXM, of(18, "OXM_OF_SCTP_DST"), 2, 16, true, Sctp, Decimal;
    /// ICMPv4 type.
    Icmpv4Type = "icmp_type", nx0(13, "NXM_OF_ICMP_TYPE"), of(19, "OXM_OF_ICMPV4_TYPE"), 1, 8, false, Icmpv4, Decimal;
    /// ICMPv4 code.
    Icmpv4Code = "icmp_code", nx0(14, "NXM_OF_ICMP_CODE"), of(20, "OXM_OF_ICMPV4_CODE"), 1, 8, false, Icmpv4, Decimal;
    /// ARP opcode.
    ArpOp = "arp_op", nx0(15, "NXM_OF_ARP_OP"), of(21, "OXM_OF_ARP_OP"), 2, 16, false, Arp, Decimal;
    /// ARP source IPv4.
    ArpSpa = "arp_spa", nx0(16, "NXM_OF_ARP_SPA"), of(22, "OXM_OF_ARP_SPA"), 4, 32, true, Arp, Ipv4;
    /// ARP target IPv4.
    ArpTpa = "arp_tpa", nx0(17, "NXM_OF_ARP_TPA"), of(23, "OXM_OF_ARP_TPA"), 4, 32, true, Arp, Ipv4;
    /// ARP source hardware address.
    ArpSha = "arp_sha", nx1(17, "NXM_NX_ARP_SHA"), of(24, "OXM_OF_ARP_SHA"), 6, 48, true, Arp, Eth;
    /// ARP target hardware address.
    ArpTha = "arp_tha", nx1(18, "NXM_NX_ARP_THA"), of(25, "OXM_OF_ARP_THA"), 6, 48, true, Arp, Eth;
    /// IPv6 source.
    Ipv6Src = "ipv6_src", nx1(19, "NXM_NX_IPV6_SRC"), of(26, "OXM_OF_IPV6_SRC"), 16, 128, true, Ipv6, Ipv6;
    /// IPv6 destination.
    Ipv6Dst = "ipv6_dst", nx1(20, "NXM_NX_IPV6_DST"), of(27, "OXM_OF_IPV6_DST"), 16, 128, true, Ipv6, Ipv6;
    /// IPv6 flow label.
    Ipv6Label = "ipv6_label", nx1(27, "NXM_NX_IPV6_LABEL"), of(28, "OXM_OF_IPV6_FLABEL"), 4, 20, true, Ipv6, Hex;
    /// ICMPv6 type.
    Icmpv6Type = "icmpv6_type", nx1(21, "NXM_NX_ICMPV6_TYPE"), of(29, "OXM_OF_ICMPV6_TYPE"), 1, 8, false, Icmpv6, Decimal;
    /// ICMPv6 code.
    Icmpv6Code = "icmpv6_code", nx1(22, "NXM_NX_ICMPV6_CODE"), of(30, "OXM_OF_ICMPV6_CODE"), 1, 8, false, Icmpv6, Decimal;
    /// ND target.
    NdTarget = "nd_target", nx1(23, "NXM_NX_ND_TARGET"), of(31, "OXM_OF_IPV6_ND_TARGET"), 16, 128, true, Nd, Ipv6;
    /// ND source link-layer address.
    NdSll = "nd_sll", nx1(24, "NXM_NX_ND_SLL"), of(32, "OXM_OF_IPV6_ND_SLL"), 6, 48, true, NdSolicit, Eth;
    /// ND target link-layer address.
    NdTll = "nd_tll", nx1(25, "NXM_NX_ND_TLL"), of(33, "OXM_OF_IPV6_ND_TLL"), 6, 48, true, NdAdvert, Eth;
    /// MPLS label.
    MplsLabel = "mpls_label", NO_NXM, of(34, "OXM_OF_MPLS_LABEL"), 4, 20, false, Mpls, Decimal;
    /// MPLS traffic class.
    MplsTc = "mpls_tc", NO_NXM, of(35, "OXM_OF_MPLS_TC"), 1, 3, false, Mpls, Decimal;
    /// MPLS bottom of stack.
    MplsBos = "mpls_bos", NO_NXM, of(36, "OXM_OF_MPLS_BOS"), 1, 1, false, Mpls, Decimal;
    /// PBB I-SID.
    PbbIsid = "pbb_isid", NO_NXM, of(37, "OXM_OF_PBB_ISID"), 3, 24, true, Pbb, Decimal;
    /// Tunnel id.
    TunId = "tun_id", nx1(16, "NXM_NX_TUN_ID"), of(38, "OXM_OF_TUNNEL_ID"), 8, 64, true, None, Hex;
    /// IPv6 extension header pseudo-field.
    Ipv6Exthdr = "ipv6_exthdr", NO_NXM, of(39, "OXM_OF_IPV6_EXTHDR"), 2, 9, true, Ipv6, Hex;
    /// Register 0.
    Reg0 = "reg0", nx1(0, "NXM_NX_REG0"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 1.
    Reg1 = "reg1", nx1(1, "NXM_NX_REG1"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 2.
    Reg2 = "reg2", nx1(2, "NXM_NX_REG2"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 3.
    Reg3 = "reg3", nx1(3, "NXM_NX_REG3"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 4.
    Reg4 = "reg4", nx1(4, "NXM_NX_REG4"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 5.
    Reg5 = "reg5", nx1(5, "NXM_NX_REG5"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 6.
    Reg6 = "reg6", nx1(6, "NXM_NX_REG6"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 7.
    Reg7 = "reg7", nx1(7, "NXM_NX_REG7"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 8.
    Reg8 = "reg8", nx1(8, "NXM_NX_REG8"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 9.
    Reg9 = "reg9", nx1(9, "NXM_NX_REG9"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 10.
    Reg10 = "reg10", nx1(10, "NXM_NX_REG10"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 11.
    Reg11 = "reg11", nx1(11, "NXM_NX_REG11"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 12.
    Reg12 = "reg12", nx1(12, "NXM_NX_REG12"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 13.
    Reg13 = "reg13", nx1(13, "NXM_NX_REG13"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 14.
    Reg14 = "reg14", nx1(14, "NXM_NX_REG14"), NO_OXM, 4, 32, true, None, Hex;
    /// Register 15.
    Reg15 = "reg15", nx1(15, "NXM_NX_REG15"), NO_OXM, 4, 32, true, None, Hex;
    /// 64-bit register 0 (`reg0`:`reg1`).
    Xreg0 = "xreg0", NO_NXM, pkt(0, "OXM_OF_PKT_REG0"), 8, 64, true, None, Hex;
    /// 64-bit register 1.
    Xreg1 = "xreg1", NO_NXM, pkt(1, "OXM_OF_PKT_REG1"), 8, 64, true, None, Hex;
    /// 64-bit register 2.
    Xreg2 = "xreg2", NO_NXM, pkt(2, "OXM_OF_PKT_REG2"), 8, 64, true, None, Hex;
    /// 64-bit register 3.
    Xreg3 = "xreg3", NO_NXM, pkt(3, "OXM_OF_PKT_REG3"), 8, 64, true, None, Hex;
    /// 64-bit register 4.
    Xreg4 = "xreg4", NO_NXM, pkt(4, "OXM_OF_PKT_REG4"), 8, 64, true, None, Hex;
    /// 64-bit register 5.
    Xreg5 = "xreg5", NO_NXM, pkt(5, "OXM_OF_PKT_REG5"), 8, 64, true, None, Hex;
    /// 64-bit register 6.
    Xreg6 = "xreg6", NO_NXM, pkt(6, "OXM_OF_PKT_REG6"), 8, 64, true, None, Hex;
    /// 64-bit register 7.
    Xreg7 = "xreg7", NO_NXM, pkt(7, "OXM_OF_PKT_REG7"), 8, 64, true, None, Hex;
    /// 128-bit register 0 (`reg0`..`reg3`).
    Xxreg0 = "xxreg0", nx1(111, "NXM_NX_XXREG0"), NO_OXM, 16, 128, true, None, Hex;
    /// 128-bit register 1.
    Xxreg1 = "xxreg1", nx1(112, "NXM_NX_XXREG1"), NO_OXM, 16, 128, true, None, Hex;
    /// 128-bit register 2.
    Xxreg2 = "xxreg2", nx1(113, "NXM_NX_XXREG2"), NO_OXM, 16, 128, true, None, Hex;
    /// 128-bit register 3.
    Xxreg3 = "xxreg3", nx1(114, "NXM_NX_XXREG3"), NO_OXM, 16, 128, true, None, Hex;
    /// Tunnel IPv4 source.
    TunSrc = "tun_src", nx1(31, "NXM_NX_TUN_IPV4_SRC"), NO_OXM, 4, 32, true, None, Ipv4;
    /// Tunnel IPv4 destination.
    TunDst = "tun_dst", nx1(32, "NXM_NX_TUN_IPV4_DST"), NO_OXM, 4, 32, true, None, Ipv4;
    /// Packet mark.
    PktMark = "pkt_mark", nx1(33, "NXM_NX_PKT_MARK"), NO_OXM, 4, 32, true, None, Hex;
    /// TCP flags (ONF experimenter OXM in OF1.3).
    TcpFlags = "tcp_flags", nx1(34, "NXM_NX_TCP_FLAGS"), onf(42, "ONFOXM_ET_TCP_FLAGS"), 2, 12, true, Tcp, TcpFlags;
    /// Datapath hash.
    DpHash = "dp_hash", nx1(35, "NXM_NX_DP_HASH"), NO_OXM, 4, 32, true, None, Hex;
    /// Recirculation id.
    RecircId = "recirc_id", nx1(36, "NXM_NX_RECIRC_ID"), NO_OXM, 4, 32, false, None, Decimal;
    /// Conjunction id.
    ConjId = "conj_id", nx1(37, "NXM_NX_CONJ_ID"), NO_OXM, 4, 32, false, None, Decimal;
    /// IP fragment flags.
    IpFrag = "ip_frag", nx1(26, "NXM_NX_IP_FRAG"), NO_OXM, 1, 2, true, Ip, Frag;
    /// IP TTL.
    NwTtl = "nw_ttl", nx1(29, "NXM_NX_IP_TTL"), NO_OXM, 1, 8, false, Ip, Decimal;
    /// MPLS TTL.
    MplsTtl = "mpls_ttl", nx1(30, "NXM_NX_MPLS_TTL"), NO_OXM, 1, 8, false, Mpls, Decimal;
    /// Connection tracking state.
    CtState = "ct_state", nx1(105, "NXM_NX_CT_STATE"), NO_OXM, 4, 32, true, None, CtState;
    /// Connection tracking zone.
    CtZone = "ct_zone", nx1(106, "NXM_NX_CT_ZONE"), NO_OXM, 2, 16, false, None, Hex;
    /// Connection tracking mark.
    CtMark = "ct_mark", nx1(107, "NXM_NX_CT_MARK"), NO_OXM, 4, 32, true, None, Hex;
    /// Connection tracking label.
    CtLabel = "ct_label", nx1(108, "NXM_NX_CT_LABEL"), NO_OXM, 16, 128, true, None, Hex;
    /// Original direction IP protocol.
    CtNwProto = "ct_nw_proto", nx1(119, "NXM_NX_CT_NW_PROTO"), NO_OXM, 1, 8, false, None, Decimal;
    /// Original direction IPv4 source.
    CtNwSrc = "ct_nw_src", nx1(120, "NXM_NX_CT_NW_SRC"), NO_OXM, 4, 32, true, Ipv4, Ipv4;
    /// Original direction IPv4 destination.
    CtNwDst = "ct_nw_dst", nx1(121, "NXM_NX_CT_NW_DST"), NO_OXM, 4, 32, true, Ipv4, Ipv4;
    /// Original direction IPv6 source.
    CtIpv6Src = "ct_ipv6_src", nx1(122, "NXM_NX_CT_IPV6_SRC"), NO_OXM, 16, 128, true, Ipv6, Ipv6;
    /// Original direction IPv6 destination.
    CtIpv6Dst = "ct_ipv6_dst", nx1(123, "NXM_NX_CT_IPV6_DST"), NO_OXM, 16, 128, true, Ipv6, Ipv6;
    /// Original direction transport source port.
    CtTpSrc = "ct_tp_src", nx1(124, "NXM_NX_CT_TP_SRC"), NO_OXM, 2, 16, true, None, Decimal;
    /// Original direction transport destination port.
    CtTpDst = "ct_tp_dst", nx1(125, "NXM_NX_CT_TP_DST"), NO_OXM, 2, 16, true, None, Decimal;
    /// Output port in the action set.
    ActsetOutput = "actset_output", NO_NXM, onf(43, "ONFOXM_ET_ACTSET_OUTPUT"), 4, 32, false, None, PortOxm;
    /// The reserved word of an ND message (an advertisement's R, S and O flags).
    NdReserved = "nd_reserved", NO_NXM, eric(1, "ERICOXM_OF_ICMPV6_ND_RESERVED"), 4, 32, false, Nd, Decimal;
    /// The type of an ND message's option (1 source, 2 target link-layer address).
    NdOptionsType = "nd_options_type", NO_NXM, eric(2, "ERICOXM_OF_ICMPV6_ND_OPTIONS_TYPE"), 1, 8, false, Nd, Decimal;
    /// Tunnel IPv6 source (last, so that adding it moved no other field's place in the
    /// order of matches).
    TunIpv6Src = "tun_ipv6_src", nx1(109, "NXM_NX_TUN_IPV6_SRC"), NO_OXM, 16, 128, true, None, Ipv6;
    /// Tunnel IPv6 destination.
    TunIpv6Dst = "tun_ipv6_dst", nx1(110, "NXM_NX_TUN_IPV6_DST"), NO_OXM, 16, 128, true, None, Ipv6;
}

impl Field {
    /// The static description.
    #[inline]
    pub fn info(self) -> &'static FieldInfo {
        // FIELDS has one entry per variant, in order (checked by a test).
        &FIELDS[self as usize]
    }

    /// Open vSwitch field name.
    #[inline]
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Width in bytes.
    #[allow(clippy::len_without_is_empty)] // a field width, not a container
    #[inline]
    pub fn len(self) -> usize {
        usize::from(self.info().bytes)
    }

    /// Width in bits.
    pub fn bits(self) -> u16 {
        self.info().bits
    }

    /// All-ones value of this field's width.
    #[inline]
    pub fn full_mask(self) -> u128 {
        width_mask(self.len() * 8)
    }

    /// Register `n` (0..16).
    pub fn reg(n: u8) -> Option<Field> {
        Field::ALL
            .get(Field::Reg0 as usize + usize::from(n))
            .copied()
            .filter(|_| n < 16)
    }

    /// The register index of `Reg0..Reg15`.
    pub fn reg_index(self) -> Option<usize> {
        let i = (self as usize).checked_sub(Field::Reg0 as usize)?;
        (i < 16).then_some(i)
    }

    /// The header used in an OF1.3 match or `set_field` (OXM when the field
    /// has one, else NXM), as OVS's `mf_oxm_header(id, OFP13_VERSION)`.
    #[inline]
    pub fn oxm_header(self) -> HeaderId {
        let info = self.info();
        match (info.oxm, info.nxm) {
            (Some((class, field, experimenter, _)), _) => HeaderId {
                class,
                field,
                experimenter,
            },
            (None, Some((class, field, _))) => HeaderId {
                class,
                field,
                experimenter: 0,
            },
            (None, None) => HeaderId {
                class: 0,
                field: 0,
                experimenter: 0,
            },
        }
    }

    /// The header used by Nicira actions (`nx_put_mff_header(.., 0, ..)`):
    /// NXM when the field has one, else OXM.
    pub fn nxm_header(self) -> HeaderId {
        let info = self.info();
        match (info.nxm, info.oxm) {
            (Some((class, field, _)), _) => HeaderId {
                class,
                field,
                experimenter: 0,
            },
            (None, Some((class, field, experimenter, _))) => HeaderId {
                class,
                field,
                experimenter,
            },
            (None, None) => HeaderId {
                class: 0,
                field: 0,
                experimenter: 0,
            },
        }
    }

    /// The name Nicira subfield syntax prints (`NXM_NX_REG0`, `OXM_OF_METADATA`).
    pub fn nxm_name(self) -> &'static str {
        let info = self.info();
        match (info.nxm, info.oxm) {
            (Some((_, _, n)), _) => n,
            (None, Some((_, _, _, n))) => n,
            (None, None) => info.name,
        }
    }

    /// Finds the field for a header in any encoding.
    #[inline]
    pub fn from_header(class: u16, field: u8, experimenter: u32) -> Option<Field> {
        let table = match (class, experimenter) {
            (NXM_CLASS_0, 0) => 0,
            (NXM_CLASS_1, 0) => 1,
            (OXM_CLASS_BASIC, 0) => 2,
            (OXM_CLASS_PACKET_REGS, 0) => 3,
            (OXM_CLASS_EXPERIMENTER, ONF_EXPERIMENTER) => 4,
            (OXM_CLASS_ERICSSON, 0) => 5,
            _ => return None,
        };
        let idx = *LOOKUP.get(table)?.get(usize::from(field))?;
        Field::ALL.get(usize::from(idx)).copied()
    }

    /// Finds a field by its OVS name.
    pub fn from_name(name: &str) -> Option<Field> {
        Field::ALL.iter().copied().find(|f| f.name() == name)
    }
}

/// Header lookup tables: NXM0, NXM1, OXM basic, packet regs, ONF, Ericsson; 0xff = none.
static LOOKUP: [[u8; 128]; 6] = build_lookup();

const fn build_lookup() -> [[u8; 128]; 6] {
    let mut t = [[0xffu8; 128]; 6];
    let mut i = 0;
    while i < FIELDS.len() {
        let f = &FIELDS[i];
        if let Some((class, field, _)) = f.nxm {
            let table = if class == NXM_CLASS_0 { 0 } else { 1 };
            t[table][(field & 0x7f) as usize] = i as u8;
        }
        if let Some((class, field, _, _)) = f.oxm {
            let table = match class {
                OXM_CLASS_BASIC => 2,
                OXM_CLASS_PACKET_REGS => 3,
                OXM_CLASS_ERICSSON => 5,
                _ => 4,
            };
            t[table][(field & 0x7f) as usize] = i as u8;
        }
        i += 1;
    }
    t
}

/// A mask of the low `bits` bits.
#[inline]
pub fn width_mask(bits: usize) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_enum() {
        assert_eq!(FIELDS.len(), Field::ALL.len());
        for (i, f) in Field::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i);
        }
        assert_eq!(Field::reg(3), Some(Field::Reg3));
        assert_eq!(Field::reg(16), None);
        assert_eq!(Field::Reg15.reg_index(), Some(15));
    }

    #[test]
    fn headers_resolve() {
        for f in Field::ALL {
            let h = f.oxm_header();
            assert_eq!(
                Field::from_header(h.class, h.field, h.experimenter),
                Some(*f),
                "{f:?}"
            );
            let h = f.nxm_header();
            assert_eq!(
                Field::from_header(h.class, h.field, h.experimenter),
                Some(*f),
                "{f:?}"
            );
        }
    }
}
