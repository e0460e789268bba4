//! Text for packet bytes carried in PACKET_IN / PACKET_OUT, as
//! `ofp_packet_to_string()` prints them: the packet's flow (OVS
//! `flow_extract()` + `flow_format()`) and the L4 checksum.
//!
//! Covers Ethernet with one 802.1Q tag, ARP/RARP, IPv4 and IPv6 with TCP,
//! UDP, SCTP, ICMP and ICMPv6. Never panics on short or odd packets.

use crate::field::Field;
use crate::match_fmt::format_match;
use crate::oxm::{Match, OxmField};

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn uint(b: &[u8], at: usize, n: usize) -> Option<u128> {
    let s = b.get(at..at + n)?;
    Some(s.iter().fold(0u128, |a, &x| (a << 8) | u128::from(x)))
}

/// The packet's flow and checksum text, or `None` if it is not even Ethernet.
pub fn packet_to_string(p: &[u8]) -> Option<String> {
    let mut fields = Vec::new();
    let mut push = |f: Field, v: u128, m: Option<u128>| {
        fields.push(OxmField {
            field: f,
            value: v,
            mask: m,
        })
    };
    let dst = uint(p, 0, 6)?;
    let src = uint(p, 6, 6)?;
    let mut off = 12;
    let mut eth_type = be16(p, off)?;
    let mut tci = 0u16;
    if eth_type == 0x8100 || eth_type == 0x88a8 {
        tci = be16(p, off + 2)? | 0x1000;
        off += 4;
        eth_type = be16(p, off)?;
    }
    off += 2;
    if eth_type < 0x600 {
        eth_type = 0x05ff; // OVS FLOW_DL_TYPE_NONE
    }
    push(Field::VlanTci, u128::from(tci), Some(0xffff));
    push(Field::EthSrc, src, None);
    push(Field::EthDst, dst, None);
    push(Field::EthType, u128::from(eth_type), None);
    let mut suffix = String::new();
    match eth_type {
        0x0806 | 0x8035 => {
            let a = p.get(off..off + 28);
            let get = |o: usize, n: usize| a.and_then(|a| uint(a, o, n)).unwrap_or(0);
            let ok = a.is_some_and(|a| {
                be16(a, 0) == Some(1) && be16(a, 2) == Some(0x0800) && a[4] == 6 && a[5] == 4
            });
            let (op, spa, tpa, sha, tha) = if ok {
                (
                    get(6, 2) & 0xff,
                    get(14, 4),
                    get(24, 4),
                    get(8, 6),
                    get(18, 6),
                )
            } else {
                (0, 0, 0, 0, 0)
            };
            push(Field::ArpSpa, spa, None);
            push(Field::ArpTpa, tpa, None);
            push(Field::ArpOp, op, None);
            push(Field::ArpSha, sha, None);
            push(Field::ArpTha, tha, None);
        }
        0x0800 | 0x86dd => {
            let v4 = eth_type == 0x0800;
            let (proto, tos, ttl, frag, l4) = if v4 {
                let ihl = usize::from(*p.get(off)? & 0x0f) * 4;
                let tos = *p.get(off + 1)?;
                let frag_off = be16(p, off + 6)?;
                let ttl = *p.get(off + 8)?;
                let proto = *p.get(off + 9)?;
                push(Field::Ipv4Src, uint(p, off + 12, 4)?, None);
                push(Field::Ipv4Dst, uint(p, off + 16, 4)?, None);
                let mut frag = 0u8;
                if frag_off & 0x3fff != 0 {
                    frag |= 1;
                }
                if frag_off & 0x1fff != 0 {
                    frag |= 2;
                }
                (proto, tos, ttl, frag, off + ihl.max(20))
            } else {
                let vtc = u32::from(be16(p, off)?) << 16 | u32::from(be16(p, off + 2)?);
                let tos = ((vtc >> 20) & 0xff) as u8;
                push(Field::Ipv6Src, uint(p, off + 8, 16)?, None);
                push(Field::Ipv6Dst, uint(p, off + 24, 16)?, None);
                push(
                    Field::Ipv6Label,
                    u128::from(vtc & 0xfffff),
                    Some(0xffff_ffff),
                );
                (*p.get(off + 6)?, tos, *p.get(off + 7)?, 0, off + 40)
            };
            push(Field::IpDscp, u128::from(tos & 0xfc), None);
            push(Field::IpEcn, u128::from(tos & 3), None);
            push(Field::NwTtl, u128::from(ttl), None);
            push(Field::IpFrag, u128::from(frag), Some(3));
            push(Field::IpProto, u128::from(proto), None);
            let l4p = if frag & 2 != 0 {
                &[][..]
            } else {
                p.get(l4..).unwrap_or_default()
            };
            let (mut sp, mut dp) = (0u128, 0u128);
            match proto {
                6 if l4p.len() >= 20 => {
                    sp = uint(l4p, 0, 2)?;
                    dp = uint(l4p, 2, 2)?;
                    let flags = be16(l4p, 12)? & 0x0fff;
                    push(Field::TcpSrc, sp, None);
                    push(Field::TcpDst, dp, None);
                    push(Field::TcpFlags, u128::from(flags), Some(0xfff));
                    suffix = format!(" tcp_csum:{:x}", be16(l4p, 16)?);
                }
                17 if l4p.len() >= 8 => {
                    push(Field::UdpSrc, uint(l4p, 0, 2)?, None);
                    push(Field::UdpDst, uint(l4p, 2, 2)?, None);
                    suffix = format!(" udp_csum:{:x}", be16(l4p, 6)?);
                }
                132 if l4p.len() >= 12 => {
                    push(Field::SctpSrc, uint(l4p, 0, 2)?, None);
                    push(Field::SctpDst, uint(l4p, 2, 2)?, None);
                    suffix = format!(" sctp_csum:{:x}", uint(l4p, 8, 4)?);
                }
                1 if v4 && l4p.len() >= 8 => {
                    push(Field::Icmpv4Type, uint(l4p, 0, 1)?, None);
                    push(Field::Icmpv4Code, uint(l4p, 1, 1)?, None);
                    suffix = format!(" icmp_csum:{:x}", be16(l4p, 2)?);
                }
                58 if !v4 && l4p.len() >= 4 => {
                    push(Field::Icmpv6Type, uint(l4p, 0, 1)?, None);
                    push(Field::Icmpv6Code, uint(l4p, 1, 1)?, None);
                    suffix = format!(" icmp6_csum:{:x}", be16(l4p, 2)?);
                }
                6 | 17 | 132 => {
                    push(Field::TcpSrc, sp, None);
                    push(Field::TcpDst, dp, None);
                }
                _ => {}
            }
        }
        _ => {}
    }
    let m = Match {
        fields,
        unknown: Vec::new(),
    };
    let mut text = format_match(&m, None);
    if tci != 0 {
        // A tagged packet also unwildcards the second (QinQ) tag slot, which
        // OVS prints right after the first tag as `vlan_tci1`.
        if let Some(at) = text.find("dl_src=") {
            text.insert_str(at, "vlan_tci1=0x0000,");
        }
    }
    Some(format!("{text}{suffix}"))
}
