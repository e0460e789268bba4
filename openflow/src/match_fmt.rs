//! `ovs-ofctl` text for a match: OVS folds the OXM entries into its
//! `struct flow` and wildcards, then prints them in `match_format()` order
//! (`lib/match.c`). `FlowView` is that folded form.

use std::fmt::{self, Write};

use crate::field::Field;
use crate::oxm::Match;
use crate::text;

/// A value and its mask.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Vm {
    v: u128,
    m: u128,
}

impl Vm {
    fn set(&mut self, v: u128, m: u128) {
        self.v = (self.v & !m) | (v & m);
        self.m |= m;
    }
    fn on(&self) -> bool {
        self.m != 0
    }
}

/// The `struct flow` + `struct flow_wildcards` view of a match.
#[derive(Debug, Clone, Default)]
struct FlowView {
    pkt_mark: Vm,
    recirc_id: Vm,
    dp_hash: Vm,
    conj_id: Vm,
    actset_output: Vm,
    ct_state: Vm,
    ct_zone: Vm,
    ct_mark: Vm,
    ct_label: Vm,
    ct_nw_src: Vm,
    ct_nw_dst: Vm,
    ct_ipv6_src: Vm,
    ct_ipv6_dst: Vm,
    ct_nw_proto: Vm,
    ct_tp_src: Vm,
    ct_tp_dst: Vm,
    dl_type: Vm,
    nw_proto: Vm,
    regs: [Vm; 16],
    tun_id: Vm,
    tun_src: Vm,
    tun_dst: Vm,
    tun_ipv6_src: Vm,
    tun_ipv6_dst: Vm,
    metadata: Vm,
    in_port: Vm,
    vlan_tci: Vm,
    dl_src: Vm,
    dl_dst: Vm,
    ipv6_src: Vm,
    ipv6_dst: Vm,
    ipv6_label: Vm,
    nw_src: Vm,
    nw_dst: Vm,
    arp_sha: Vm,
    arp_tha: Vm,
    nw_tos: Vm,
    nw_ttl: Vm,
    mpls_lse: Vm,
    nw_frag: Vm,
    tp_src: Vm,
    tp_dst: Vm,
    nd_target: Vm,
    nd_reserved: Vm,
    nd_options_type: Vm,
    tcp_flags: Vm,
}

impl FlowView {
    fn from_match(m: &Match) -> FlowView {
        let mut f = FlowView::default();
        for e in &m.fields {
            let mask = e.mask_or_full();
            let v = e.value & mask;
            use Field::*;
            match e.field {
                InPort => f.in_port.set(v, 0xffff),
                InPortOxm => f.in_port.set(
                    u128::from(text::port32_to_16(v as u32).unwrap_or(0)),
                    0xffff,
                ),
                InPhyPort | PbbIsid | Ipv6Exthdr => {}
                Metadata => f.metadata.set(v, mask),
                EthDst => f.dl_dst.set(v, mask),
                EthSrc => f.dl_src.set(v, mask),
                EthType => f.dl_type.set(v, mask),
                VlanTci => f.vlan_tci.set(v, mask),
                VlanVid => f.vlan_tci.set(v & 0x1fff, mask & 0x1fff),
                VlanPcp => f.vlan_tci.set(((v & 7) << 13) | 0x1000, 0xf000),
                IpDscp => f.nw_tos.set(v & 0xfc, 0xfc),
                IpDscpShifted => f.nw_tos.set((v << 2) & 0xfc, 0xfc),
                IpEcn => f.nw_tos.set(v & 3, 3),
                IpProto => f.nw_proto.set(v, 0xff),
                Ipv4Src => f.nw_src.set(v, mask),
                Ipv4Dst => f.nw_dst.set(v, mask),
                TcpSrc | UdpSrc | SctpSrc => f.tp_src.set(v, mask),
                TcpDst | UdpDst | SctpDst => f.tp_dst.set(v, mask),
                Icmpv4Type | Icmpv6Type => f.tp_src.set(v, 0xffff),
                Icmpv4Code | Icmpv6Code => f.tp_dst.set(v, 0xffff),
                ArpOp => f.nw_proto.set(v & 0xff, 0xff),
                ArpSpa => f.nw_src.set(v, mask),
                ArpTpa => f.nw_dst.set(v, mask),
                ArpSha | NdSll => f.arp_sha.set(v, mask),
                ArpTha | NdTll => f.arp_tha.set(v, mask),
                Ipv6Src => f.ipv6_src.set(v, mask),
                Ipv6Dst => f.ipv6_dst.set(v, mask),
                Ipv6Label => f.ipv6_label.set(v, e.mask.unwrap_or(0xffff_ffff)),
                NdTarget => f.nd_target.set(v, mask),
                NdReserved => f.nd_reserved.set(v, mask),
                NdOptionsType => f.nd_options_type.set(v, mask),
                MplsLabel => f.mpls_lse.set((v & 0xfffff) << 12, 0xffff_f000),
                MplsTc => f.mpls_lse.set((v & 7) << 9, 0xe00),
                MplsBos => f.mpls_lse.set((v & 1) << 8, 0x100),
                MplsTtl => f.mpls_lse.set(v & 0xff, 0xff),
                TunId => f.tun_id.set(v, mask),
                Reg0 | Reg1 | Reg2 | Reg3 | Reg4 | Reg5 | Reg6 | Reg7 | Reg8 | Reg9 | Reg10
                | Reg11 | Reg12 | Reg13 | Reg14 | Reg15 => {
                    let i = e.field.reg_index().unwrap_or(0);
                    f.regs[i].set(v, mask);
                }
                Xreg0 | Xreg1 | Xreg2 | Xreg3 | Xreg4 | Xreg5 | Xreg6 | Xreg7 => {
                    let i = (e.field as usize - Xreg0 as usize) * 2;
                    f.set_regs(i, 2, v, mask);
                }
                Xxreg0 | Xxreg1 | Xxreg2 | Xxreg3 => {
                    let i = (e.field as usize - Xxreg0 as usize) * 4;
                    f.set_regs(i, 4, v, mask);
                }
                TunSrc => f.tun_src.set(v, mask),
                TunDst => f.tun_dst.set(v, mask),
                TunIpv6Src => f.tun_ipv6_src.set(v, mask),
                TunIpv6Dst => f.tun_ipv6_dst.set(v, mask),
                PktMark => f.pkt_mark.set(v, mask),
                TcpFlags => f.tcp_flags.set(v, mask),
                DpHash => f.dp_hash.set(v, mask),
                RecircId => f.recirc_id.set(v, mask),
                ConjId => f.conj_id.set(v, mask),
                IpFrag => f.nw_frag.set(v, mask),
                NwTtl => f.nw_ttl.set(v, 0xff),
                CtState => f.ct_state.set(v, mask),
                CtZone => f.ct_zone.set(v, mask),
                CtMark => f.ct_mark.set(v, mask),
                CtLabel => f.ct_label.set(v, mask),
                CtNwProto => f.ct_nw_proto.set(v, mask),
                CtNwSrc => f.ct_nw_src.set(v, mask),
                CtNwDst => f.ct_nw_dst.set(v, mask),
                CtIpv6Src => f.ct_ipv6_src.set(v, mask),
                CtIpv6Dst => f.ct_ipv6_dst.set(v, mask),
                CtTpSrc => f.ct_tp_src.set(v, mask),
                CtTpDst => f.ct_tp_dst.set(v, mask),
                ActsetOutput => f.actset_output.set(
                    u128::from(text::port32_to_16(v as u32).unwrap_or(0)),
                    0xffff,
                ),
            }
        }
        f
    }

    /// Spreads a wide register over `n` 32-bit registers, most significant first.
    fn set_regs(&mut self, first: usize, n: usize, v: u128, m: u128) {
        for k in 0..n {
            let shift = 32 * (n - 1 - k);
            if let Some(r) = self.regs.get_mut(first + k) {
                r.set((v >> shift) & 0xffff_ffff, (m >> shift) & 0xffff_ffff);
            }
        }
    }
}

fn u32_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        let _ = write!(s, "{name}={}", text::hash_x(x.v));
        if x.m != 0xffff_ffff {
            let _ = write!(s, "/{}", text::hash_x(x.m));
        }
        s.push(',');
    }
}

fn u16_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        if x.m == 0xffff {
            let _ = write!(s, "{name}={},", x.v);
        } else {
            let _ = write!(s, "{name}={:#x}/{:#x},", x.v, x.m);
        }
    }
}

fn be16_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        if x.m == 0xffff {
            let _ = write!(s, "{name}={},", x.v);
        } else {
            let _ = write!(s, "{name}=0x{:x}/0x{:x},", x.v, x.m);
        }
    }
}

fn be64_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        let _ = write!(s, "{name}={}", text::hash_x(x.v));
        if x.m != u128::from(u64::MAX) {
            let _ = write!(s, "/{}", text::hash_x(x.m));
        }
        s.push(',');
    }
}

fn ip_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        let _ = write!(s, "{name}={},", text::ipv4_masked(x.v, x.m));
    }
}

fn ipv6_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        let _ = write!(s, "{name}={},", text::ipv6_masked(x.v, x.m));
    }
}

fn eth_masked(s: &mut String, name: &str, x: Vm) {
    if x.on() {
        let _ = write!(s, "{name}={},", text::eth_masked(x.v, x.m));
    }
}

/// `match_format()` for a match and priority (OVS's default priority 32768
/// is omitted).
pub fn format_match(m: &Match, priority: Option<u16>) -> String {
    let f = FlowView::from_match(m);
    let mut s = String::new();
    if let Some(p) = priority.filter(|&p| p != 0x8000) {
        let _ = write!(s, "priority={p},");
    }
    u32_masked(&mut s, "pkt_mark", f.pkt_mark);
    u32_masked(&mut s, "recirc_id", f.recirc_id);
    u32_masked(&mut s, "dp_hash", f.dp_hash);
    if f.conj_id.on() {
        let _ = write!(s, "conj_id={},", f.conj_id.v);
    }
    if f.actset_output.on() {
        let _ = write!(
            s,
            "actset_output={},",
            text::port16(f.actset_output.v as u16)
        );
    }
    if f.ct_state.on() {
        s.push_str("ct_state=");
        if f.ct_state.m == 0xffff_ffff {
            s.push_str(&text::flags(text::ct_state_bit, f.ct_state.v as u32, '|'));
        } else {
            s.push_str(&text::flags_masked(
                text::ct_state_bit,
                f.ct_state.v as u32,
                f.ct_state.m as u32,
                u32::MAX,
            ));
        }
        s.push(',');
    }
    u16_masked(&mut s, "ct_zone", f.ct_zone);
    u32_masked(&mut s, "ct_mark", f.ct_mark);
    if f.ct_label.on() {
        let _ = write!(
            s,
            "ct_label={}",
            text::put_hex_bytes(&f.ct_label.v.to_be_bytes())
        );
        if f.ct_label.m != u128::MAX {
            let _ = write!(s, "/{}", text::put_hex_bytes(&f.ct_label.m.to_be_bytes()));
        }
        s.push(',');
    }
    ip_masked(&mut s, "ct_nw_src", f.ct_nw_src);
    ipv6_masked(&mut s, "ct_ipv6_src", f.ct_ipv6_src);
    ip_masked(&mut s, "ct_nw_dst", f.ct_nw_dst);
    ipv6_masked(&mut s, "ct_ipv6_dst", f.ct_ipv6_dst);
    if f.ct_nw_proto.on() {
        let _ = write!(s, "ct_nw_proto={},", f.ct_nw_proto.v);
        be16_masked(&mut s, "ct_tp_src", f.ct_tp_src);
        be16_masked(&mut s, "ct_tp_dst", f.ct_tp_dst);
    }
    let dl_type = f.dl_type.v;
    let nw_proto = f.nw_proto.v;
    let mut skip_type = false;
    let mut skip_proto = false;
    if f.dl_type.on() {
        skip_type = true;
        let name = match dl_type {
            0x0800 => {
                skip_proto = f.nw_proto.on();
                match (f.nw_proto.on(), nw_proto) {
                    (true, 1) => "icmp",
                    (true, 2) => "igmp",
                    (true, 6) => "tcp",
                    (true, 17) => "udp",
                    (true, 132) => "sctp",
                    _ => {
                        skip_proto = false;
                        "ip"
                    }
                }
            }
            0x86dd => {
                skip_proto = f.nw_proto.on();
                match (f.nw_proto.on(), nw_proto) {
                    (true, 58) => "icmp6",
                    (true, 6) => "tcp6",
                    (true, 17) => "udp6",
                    (true, 132) => "sctp6",
                    _ => {
                        skip_proto = false;
                        "ipv6"
                    }
                }
            }
            0x0806 => "arp",
            0x8035 => "rarp",
            0x8847 => "mpls",
            0x8848 => "mplsm",
            _ => {
                skip_type = false;
                ""
            }
        };
        if skip_type {
            s.push_str(name);
            s.push(',');
        }
    }
    for (i, r) in f.regs.iter().enumerate() {
        u32_masked(&mut s, &format!("reg{i}"), *r);
    }
    be64_masked(&mut s, "tun_id", f.tun_id);
    ip_masked(&mut s, "tun_src", f.tun_src);
    ip_masked(&mut s, "tun_dst", f.tun_dst);
    ipv6_masked(&mut s, "tun_ipv6_src", f.tun_ipv6_src);
    ipv6_masked(&mut s, "tun_ipv6_dst", f.tun_ipv6_dst);
    be64_masked(&mut s, "metadata", f.metadata);
    if f.in_port.on() {
        let _ = write!(s, "in_port={},", text::port16(f.in_port.v as u16));
    }
    if f.vlan_tci.on() {
        let (v, m) = (f.vlan_tci.v as u16, f.vlan_tci.m as u16);
        let vid_mask = m & 0x0fff;
        let pcp_mask = m & 0xe000;
        let cfi = m & 0x1000;
        if cfi != 0
            && v & 0x1000 != 0
            && (vid_mask == 0 || vid_mask == 0x0fff)
            && (pcp_mask == 0 || pcp_mask == 0xe000)
            && (vid_mask != 0 || pcp_mask != 0)
        {
            if vid_mask != 0 {
                let _ = write!(s, "dl_vlan={},", v & 0xfff);
            }
            if pcp_mask != 0 {
                let _ = write!(s, "dl_vlan_pcp={},", v >> 13);
            }
        } else if m == 0xffff {
            let _ = write!(s, "vlan_tci=0x{v:04x},");
        } else {
            let _ = write!(s, "vlan_tci=0x{v:04x}/0x{m:04x},");
        }
    }
    eth_masked(&mut s, "dl_src", f.dl_src);
    eth_masked(&mut s, "dl_dst", f.dl_dst);
    if !skip_type && f.dl_type.on() {
        let _ = write!(s, "dl_type=0x{dl_type:04x},");
    }
    let arp = dl_type == 0x0806 || dl_type == 0x8035;
    if dl_type == 0x86dd {
        ipv6_masked(&mut s, "ipv6_src", f.ipv6_src);
        ipv6_masked(&mut s, "ipv6_dst", f.ipv6_dst);
        if f.ipv6_label.on() {
            if f.ipv6_label.m == 0xffff_ffff {
                let _ = write!(s, "ipv6_label=0x{:05x},", f.ipv6_label.v);
            } else {
                let _ = write!(
                    s,
                    "ipv6_label=0x{:05x}/0x{:05x},",
                    f.ipv6_label.v, f.ipv6_label.m
                );
            }
        }
    } else if arp {
        ip_masked(&mut s, "arp_spa", f.nw_src);
        ip_masked(&mut s, "arp_tpa", f.nw_dst);
    } else {
        ip_masked(&mut s, "nw_src", f.nw_src);
        ip_masked(&mut s, "nw_dst", f.nw_dst);
    }
    if !skip_proto && f.nw_proto.on() {
        let name = if arp { "arp_op" } else { "nw_proto" };
        let _ = write!(s, "{name}={nw_proto},");
    }
    if arp {
        eth_masked(&mut s, "arp_sha", f.arp_sha);
        eth_masked(&mut s, "arp_tha", f.arp_tha);
    }
    if f.nw_tos.m & 0xfc != 0 {
        let _ = write!(s, "nw_tos={},", f.nw_tos.v & 0xfc);
    }
    if f.nw_tos.m & 3 != 0 {
        let _ = write!(s, "nw_ecn={},", f.nw_tos.v & 3);
    }
    if f.nw_ttl.on() {
        let _ = write!(s, "nw_ttl={},", f.nw_ttl.v);
    }
    let (lse, lm) = (f.mpls_lse.v as u32, f.mpls_lse.m as u32);
    if lm & 0xffff_f000 != 0 {
        let _ = write!(s, "mpls_label={},", lse >> 12);
    }
    if lm & 0xe00 != 0 {
        let _ = write!(s, "mpls_tc={},", (lse >> 9) & 7);
    }
    if lm & 0xff != 0 {
        let _ = write!(s, "mpls_ttl={},", lse & 0xff);
    }
    if lm & 0x100 != 0 {
        let _ = write!(s, "mpls_bos={},", (lse >> 8) & 1);
    }
    let frag = f.nw_frag.v;
    match f.nw_frag.m & 3 {
        3 => {
            let t = match frag & 3 {
                3 => "later",
                1 => "first",
                2 => "<error>",
                _ => "no",
            };
            let _ = write!(s, "nw_frag={t},");
        }
        1 => {
            let _ = write!(s, "nw_frag={},", if frag & 1 != 0 { "yes" } else { "no" });
        }
        2 => {
            let _ = write!(
                s,
                "nw_frag={},",
                if frag & 2 != 0 { "later" } else { "not_later" }
            );
        }
        _ => {}
    }
    if dl_type == 0x0800 && nw_proto == 1 {
        be16_masked(&mut s, "icmp_type", f.tp_src);
        be16_masked(&mut s, "icmp_code", f.tp_dst);
    } else if dl_type == 0x0800 && nw_proto == 2 {
        be16_masked(&mut s, "igmp_type", f.tp_src);
        be16_masked(&mut s, "igmp_code", f.tp_dst);
    } else if dl_type == 0x86dd && nw_proto == 58 {
        be16_masked(&mut s, "icmp_type", f.tp_src);
        be16_masked(&mut s, "icmp_code", f.tp_dst);
        ipv6_masked(&mut s, "nd_target", f.nd_target);
        eth_masked(&mut s, "nd_sll", f.arp_sha);
        eth_masked(&mut s, "nd_tll", f.arp_tha);
        // `lib/match.c`: both print in decimal, unmasked.
        if f.nd_reserved.on() {
            let _ = write!(s, "nd_reserved={},", f.nd_reserved.v);
        }
        if f.nd_options_type.on() {
            let _ = write!(s, "nd_options_type={},", f.nd_options_type.v);
        }
    } else {
        be16_masked(&mut s, "tp_src", f.tp_src);
        be16_masked(&mut s, "tp_dst", f.tp_dst);
    }
    if (dl_type == 0x0800 || dl_type == 0x86dd) && nw_proto == 6 && f.tcp_flags.on() {
        let _ = write!(
            s,
            "tcp_flags={},",
            text::flags_masked(
                text::tcp_flag_bit,
                f.tcp_flags.v as u32,
                (f.tcp_flags.m & 0xfff) as u32,
                0xfff
            )
        );
    }
    if s.ends_with(',') {
        s.pop();
    }
    s
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_match(self, None))
    }
}
