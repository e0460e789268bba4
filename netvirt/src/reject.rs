//! Replies that refuse a connection to a service with no endpoint, as iptables' REJECT does:
//! a TCP RST for TCP, and ICMP port unreachable for UDP and SCTP (RFC 792; RFC 4960 §10.1
//! treats it as an ABORT). Over IPv6 the same: a TCP RST, or ICMPv6 destination unreachable,
//! port unreachable (RFC 4443 §3.1) for any other upper-layer protocol but ICMPv6 itself. The
//! switch sends the offending packet to the controller, which answers with [`reply`] through a
//! packet-out on the same port. Pure: bytes in, bytes out.

const ETH_LEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const IPV6_LEN: usize = 40;
/// The IPv6 minimum MTU: an ICMPv6 error quotes as much as fits in it (RFC 4443 §2.4(c)).
const IPV6_MIN_MTU: usize = 1280;
/// The TTL (IPv4) and hop limit (IPv6) of every reply.
const HOP_LIMIT: u8 = 64;
/// At most this many IPv6 extension headers are walked before the upper-layer header.
const MAX_EXTENSION_HEADERS: usize = 8;
const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_SCTP: u8 = 132;
const PROTO_ICMPV6: u8 = 58;
// IPv6 extension headers (RFC 8200 §4).
const EXT_HOP_BY_HOP: u8 = 0;
const EXT_ROUTING: u8 = 43;
const EXT_FRAGMENT: u8 = 44;
const EXT_ESP: u8 = 50;
const EXT_AH: u8 = 51;
const EXT_DESTINATION: u8 = 60;
const EXT_MOBILITY: u8 = 135;
const EXT_HIP: u8 = 139;
const EXT_SHIM6: u8 = 140;
const EXT_EXPERIMENTAL: [u8; 2] = [253, 254];
const ICMPV6_DEST_UNREACHABLE: u8 = 1;
const ICMPV6_PORT_UNREACHABLE: u8 = 4;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// Why no reply was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectError {
    /// The frame ends before its headers do.
    Truncated,
    /// Neither IPv4 nor IPv6: another EtherType, or an IP version that does not match it.
    NotIp,
    /// A protocol that is not answered: over IPv4 anything but TCP, UDP and SCTP; over IPv6,
    /// ICMPv6 (an ICMPv6 error is never answered with another, RFC 4443 §2.4(e), and neither
    /// is an informational message such as neighbor discovery).
    Protocol(u8),
    /// A TCP RST, which must never be answered.
    Reset,
    /// A fragment other than the first.
    Fragment,
    /// A packet from or to an address that names no single host (over IPv4: 0.0.0.0, a
    /// multicast address, or 240.0.0.0/4, which holds the limited broadcast; over IPv6: the
    /// unspecified or a multicast address), or in a link-layer multicast or broadcast frame:
    /// never answered (RFC 1122 §3.2.2 and §4.2.3.10, RFC 4443 §2.4(e)), and the reply would
    /// have no valid source or destination.
    NotUnicast,
    /// An IPv6 extension header that is not walked (ESP, AH, mobility, HIP, shim6 or an
    /// experimental one), so the upper-layer protocol is not known.
    ExtensionHeader(u8),
    /// An IPv6 routing header with segments left: the packet is on its way to another
    /// destination, so the address it was sent to is not the one to refuse it from.
    SegmentsLeft,
    /// More IPv6 extension headers than are walked (`MAX_EXTENSION_HEADERS`).
    TooManyExtensionHeaders,
}

impl std::fmt::Display for RejectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated frame"),
            Self::NotIp => f.write_str("neither an IPv4 nor an IPv6 frame"),
            Self::Protocol(p) => write!(f, "IP protocol {p} is not rejected"),
            Self::Reset => f.write_str("a TCP RST is never answered"),
            Self::Fragment => f.write_str("a non-first fragment"),
            Self::NotUnicast => f.write_str(
                "a packet from or to a multicast, broadcast or unspecified address, or in a \
                 link-layer multicast frame",
            ),
            Self::ExtensionHeader(h) => write!(f, "IPv6 extension header {h} is not walked"),
            Self::SegmentsLeft => f.write_str("an IPv6 routing header with segments left"),
            Self::TooManyExtensionHeaders => write!(
                f,
                "more than {MAX_EXTENSION_HEADERS} IPv6 extension headers"
            ),
        }
    }
}

impl std::error::Error for RejectError {}

/// Builds the Ethernet frame that refuses `frame`, addressed back to its sender.
pub fn reply(frame: &[u8]) -> Result<Vec<u8>, RejectError> {
    let p = parse(frame)?;
    match (p.v6, p.proto) {
        (_, PROTO_TCP) => {
            let segment = tcp_reset(p.upper)?;
            Ok(p.answer(PROTO_TCP, segment.to_vec()))
        }
        (false, PROTO_UDP | PROTO_SCTP) => Ok(p.answer(PROTO_ICMP, port_unreachable(p.packet)?)),
        (false, other) | (true, other @ PROTO_ICMPV6) => Err(RejectError::Protocol(other)),
        // UDP, SCTP and any other upper layer, as ip6tables' REJECT does by default.
        (true, _) => {
            // As much of the offending packet as keeps the reply within the minimum MTU.
            let room = IPV6_MIN_MTU - IPV6_LEN - 8;
            let quoted = p.packet.get(..room).unwrap_or(p.packet);
            let mut icmp = Vec::with_capacity(8 + quoted.len());
            icmp.extend_from_slice(&[ICMPV6_DEST_UNREACHABLE, ICMPV6_PORT_UNREACHABLE]);
            icmp.extend_from_slice(&[0; 6]); // checksum, unused
            icmp.extend_from_slice(quoted);
            Ok(p.answer(PROTO_ICMPV6, icmp))
        }
    }
}

/// A unicast IP packet to answer, taken apart: what [`reply`] refuses, and what the
/// health-check answers (`crate::health_answer`) reply to.
pub(crate) struct Parsed<'a> {
    eth: &'a [u8],
    v6: bool,
    /// Its source and destination addresses (4 or 16 bytes).
    src: &'a [u8],
    dst: &'a [u8],
    /// The upper-layer protocol, and its header and payload.
    pub(crate) proto: u8,
    pub(crate) upper: &'a [u8],
    /// The IP packet, as long as its header says.
    packet: &'a [u8],
}

/// Takes `frame` apart, refusing what is never answered: not IP, not unicast (at either
/// layer), a non-first fragment, an IPv6 extension header that is not walked.
pub(crate) fn parse(frame: &[u8]) -> Result<Parsed<'_>, RejectError> {
    let eth = frame.get(..ETH_LEN).ok_or(RejectError::Truncated)?;
    let ip = &frame[ETH_LEN..];
    match u16::from_be_bytes([eth[12], eth[13]]) {
        ETHERTYPE_IPV4 => parse_v4(eth, ip),
        ETHERTYPE_IPV6 => parse_v6(eth, ip),
        _ => Err(RejectError::NotIp),
    }
}

impl<'a> Parsed<'a> {
    /// Its source address (4 or 16 bytes).
    pub(crate) fn src(&self) -> &'a [u8] {
        self.src
    }

    /// Its destination address.
    pub(crate) fn dst(&self) -> &'a [u8] {
        self.dst
    }

    /// The frame that carries `upper` (of protocol `proto`, its checksum left zero) back to
    /// the sender, from the address it was sent to, with its checksum filled in: TCP's and
    /// ICMPv6's over the pseudo-header, ICMP's over the message alone.
    pub(crate) fn answer(&self, proto: u8, mut upper: Vec<u8>) -> Vec<u8> {
        let (src, dst) = (self.dst, self.src);
        let at = match proto {
            PROTO_TCP => Some(16),
            PROTO_ICMPV6 | PROTO_ICMP => Some(2),
            _ => None,
        };
        if let Some(at) = at
            && upper.len() >= at + 2
        {
            let checksum = match (self.v6, proto) {
                (_, PROTO_ICMP) => internet_checksum(&[&upper]),
                (true, _) => transport_checksum_v6(src, dst, proto, &upper),
                (false, _) => transport_checksum(src, dst, proto, &upper),
            };
            upper[at..at + 2].copy_from_slice(&checksum.to_be_bytes());
        }
        if self.v6 {
            let mut out = ethernet(self.eth, ETHERTYPE_IPV6, IPV6_LEN + upper.len());
            push_ipv6(&mut out, src, dst, proto, &upper);
            out
        } else {
            let mut out = ethernet(self.eth, ETHERTYPE_IPV4, 20 + upper.len());
            push_ipv4(&mut out, src, dst, proto, &upper);
            out
        }
    }
}

/// Ethernet: back to the sender, from whom it was sent to.
fn ethernet(eth: &[u8], ethertype: u16, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(ETH_LEN + capacity);
    out.extend_from_slice(&eth[6..12]);
    out.extend_from_slice(&eth[0..6]);
    out.extend_from_slice(&ethertype.to_be_bytes());
    out
}

fn parse_v4<'a>(eth: &'a [u8], ip: &'a [u8]) -> Result<Parsed<'a>, RejectError> {
    let version_ihl = *ip.first().ok_or(RejectError::Truncated)?;
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || ihl < 20 {
        return Err(RejectError::NotIp);
    }
    let header = ip.get(..ihl).ok_or(RejectError::Truncated)?;
    let total_len = usize::from(u16::from_be_bytes([header[2], header[3]])).clamp(ihl, ip.len());
    if u16::from_be_bytes([header[6], header[7]]) & 0x1fff != 0 {
        return Err(RejectError::Fragment);
    }
    let (src, dst) = (&header[12..16], &header[16..20]);
    // As over IPv6: neither address may name several hosts or none (224.0.0.0/4 multicast,
    // 240.0.0.0/4 with the limited broadcast, 0.0.0.0), nor the frame be a link-layer
    // multicast or broadcast.
    let not_unicast = |a: &[u8]| a[0] >= 224 || a.iter().all(|&b| b == 0);
    if not_unicast(src) || not_unicast(dst) || eth[0] & 0x01 != 0 {
        return Err(RejectError::NotUnicast);
    }
    Ok(Parsed {
        eth,
        v6: false,
        src,
        dst,
        proto: header[9],
        upper: &ip[ihl..total_len],
        packet: &ip[..total_len],
    })
}

fn parse_v6<'a>(eth: &'a [u8], ip: &'a [u8]) -> Result<Parsed<'a>, RejectError> {
    let header = ip.get(..IPV6_LEN).ok_or(RejectError::Truncated)?;
    if header[0] >> 4 != 6 {
        return Err(RejectError::NotIp);
    }
    let (src, dst) = (&header[8..24], &header[24..40]);
    // The reply's source is the original destination and its destination the original
    // source, at both layers: neither may be multicast or unspecified. Nor is a frame sent to
    // a link-layer multicast (or broadcast) address answered.
    let not_unicast = |a: &[u8]| a[0] == 0xff || a.iter().all(|&b| b == 0);
    if not_unicast(src) || not_unicast(dst) || eth[0] & 0x01 != 0 {
        return Err(RejectError::NotUnicast);
    }
    let payload_len = usize::from(u16::from_be_bytes([header[4], header[5]]));
    let packet = &ip[..(IPV6_LEN + payload_len).min(ip.len())];
    let (proto, offset) = upper_layer(header[6], packet)?;
    let upper = packet.get(offset..).ok_or(RejectError::Truncated)?;
    Ok(Parsed {
        eth,
        v6: true,
        src,
        dst,
        proto,
        upper,
        packet,
    })
}

/// Walks the IPv6 extension headers of `packet` from `next` (the fixed header's next header)
/// to the upper-layer protocol, which it returns with the offset of its header. At most
/// [`MAX_EXTENSION_HEADERS`] are walked (each in constant time); a non-first fragment, a
/// routing header with segments left and an extension header not walked are errors.
fn upper_layer(mut next: u8, packet: &[u8]) -> Result<(u8, usize), RejectError> {
    let mut offset = IPV6_LEN;
    for _ in 0..=MAX_EXTENSION_HEADERS {
        match next {
            EXT_HOP_BY_HOP | EXT_ROUTING | EXT_DESTINATION => {
                let ext = packet
                    .get(offset..offset + 4)
                    .ok_or(RejectError::Truncated)?;
                if next == EXT_ROUTING && ext[3] != 0 {
                    return Err(RejectError::SegmentsLeft);
                }
                next = ext[0];
                offset += (usize::from(ext[1]) + 1) * 8;
            }
            EXT_FRAGMENT => {
                let ext = packet
                    .get(offset..offset + 8)
                    .ok_or(RejectError::Truncated)?;
                if u16::from_be_bytes([ext[2], ext[3]]) >> 3 != 0 {
                    return Err(RejectError::Fragment);
                }
                next = ext[0];
                offset += 8;
            }
            EXT_ESP | EXT_AH | EXT_MOBILITY | EXT_HIP | EXT_SHIM6 => {
                return Err(RejectError::ExtensionHeader(next));
            }
            h if EXT_EXPERIMENTAL.contains(&h) => return Err(RejectError::ExtensionHeader(h)),
            upper => return Ok((upper, offset)),
        }
    }
    Err(RejectError::TooManyExtensionHeaders)
}

/// What answering a TCP segment needs of it.
pub(crate) struct Segment<'a> {
    /// Its source and destination ports, as sent.
    pub(crate) ports: &'a [u8],
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u8,
    /// How many bytes of data it carries.
    pub(crate) data_len: u32,
}

/// Reads the TCP segment `tcp`.
pub(crate) fn segment(tcp: &[u8]) -> Result<Segment<'_>, RejectError> {
    let header = tcp.get(..20).ok_or(RejectError::Truncated)?;
    let data_offset = usize::from(header[12] >> 4) * 4;
    Ok(Segment {
        ports: &header[0..4],
        seq: u32::from_be_bytes([header[4], header[5], header[6], header[7]]),
        ack: u32::from_be_bytes([header[8], header[9], header[10], header[11]]),
        flags: header[13],
        data_len: tcp.len().saturating_sub(data_offset) as u32,
    })
}

/// The RST that answers the TCP segment `tcp`, its checksum left zero.
fn tcp_reset(tcp: &[u8]) -> Result<[u8; 20], RejectError> {
    let t = segment(tcp)?;
    let (seq, ack, flags, data_len) = (t.seq, t.ack, t.flags, t.data_len);
    if flags & TCP_RST != 0 {
        return Err(RejectError::Reset);
    }
    // RFC 793 §3.4, "Reset Generation".
    let (rst_seq, rst_ack, rst_flags) = if flags & TCP_ACK != 0 {
        (ack, 0, TCP_RST)
    } else {
        let consumed = data_len + u32::from(flags & TCP_SYN != 0) + u32::from(flags & TCP_FIN != 0);
        (0, seq.wrapping_add(consumed), TCP_RST | TCP_ACK)
    };
    let mut segment = [0u8; 20];
    segment[0..2].copy_from_slice(&t.ports[2..4]); // source port = the original destination port
    segment[2..4].copy_from_slice(&t.ports[0..2]);
    segment[4..8].copy_from_slice(&rst_seq.to_be_bytes());
    segment[8..12].copy_from_slice(&rst_ack.to_be_bytes());
    segment[12] = 5 << 4;
    segment[13] = rst_flags;
    Ok(segment)
}

/// The ICMP port unreachable that quotes `original`, its checksum left zero.
fn port_unreachable(original: &[u8]) -> Result<Vec<u8>, RejectError> {
    // The original IP header plus the first 8 bytes of its payload (RFC 792).
    let ihl = usize::from(original.first().ok_or(RejectError::Truncated)? & 0x0f) * 4;
    let quoted = original.get(..ihl + 8).unwrap_or(original);
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    Ok(icmp)
}

fn push_ipv4(out: &mut Vec<u8>, src: &[u8], dst: &[u8], proto: u8, payload: &[u8]) {
    let total = (20 + payload.len()) as u16;
    let mut header = [0u8; 20];
    header[0] = 0x45;
    header[2..4].copy_from_slice(&total.to_be_bytes());
    header[6] = 0x40; // don't fragment
    header[8] = HOP_LIMIT;
    header[9] = proto;
    header[12..16].copy_from_slice(src);
    header[16..20].copy_from_slice(dst);
    let checksum = internet_checksum(&[&header]);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

fn push_ipv6(out: &mut Vec<u8>, src: &[u8], dst: &[u8], next_header: u8, payload: &[u8]) {
    let payload_len = payload.len() as u16;
    out.extend_from_slice(&[6 << 4, 0, 0, 0]); // traffic class and flow label 0
    out.extend_from_slice(&payload_len.to_be_bytes());
    out.extend_from_slice(&[next_header, HOP_LIMIT]);
    out.extend_from_slice(src);
    out.extend_from_slice(dst);
    out.extend_from_slice(payload);
}

pub(crate) fn transport_checksum(src: &[u8], dst: &[u8], proto: u8, segment: &[u8]) -> u16 {
    let len = (segment.len() as u16).to_be_bytes();
    let pseudo = [0, proto, len[0], len[1]];
    internet_checksum(&[src, dst, &pseudo, segment])
}

/// The upper-layer checksum over the IPv6 pseudo-header (RFC 8200 §8.1).
pub(crate) fn transport_checksum_v6(src: &[u8], dst: &[u8], next_header: u8, upper: &[u8]) -> u16 {
    let len = (upper.len() as u32).to_be_bytes();
    let pseudo = [0, 0, 0, next_header];
    internet_checksum(&[src, dst, &len, &pseudo, upper])
}

/// RFC 1071 one's-complement sum over the concatenation of `parts` (each of even length,
/// except possibly the last).
pub(crate) fn internet_checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    for part in parts {
        let mut chunks = part.chunks_exact(2);
        for pair in &mut chunks {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        if let [last] = chunks.remainder() {
            sum += u32::from(*last) << 8;
        }
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const GW_MAC: [u8; 6] = [0x0a, 0x58, 0x0a, 0xf4, 0, 1];

    fn frame(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&GW_MAC);
        f.extend_from_slice(&CLIENT_MAC);
        f.extend_from_slice(&[0x08, 0x00]);
        push_ipv4(&mut f, &[10, 244, 0, 11], &[10, 96, 0, 10], proto, l4);
        f
    }

    fn syn() -> Vec<u8> {
        // 40000 -> 80, seq 0x01020304, SYN, window 64240.
        let mut tcp = vec![
            0x9c, 0x40, 0, 80, 1, 2, 3, 4, 0, 0, 0, 0, 0x50, TCP_SYN, 0xfa, 0xf0, 0, 0, 0, 0,
        ];
        let c = transport_checksum(&[10, 244, 0, 11], &[10, 96, 0, 10], PROTO_TCP, &tcp);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        tcp
    }

    #[test]
    fn a_syn_gets_a_rst_ack_from_the_vip() {
        let out = reply(&frame(PROTO_TCP, &syn())).unwrap();
        let expected: Vec<u8> = [
            &CLIENT_MAC[..],
            &GW_MAC,
            &[0x08, 0x00],
            // IPv4: 40 bytes, DF, TTL 64, TCP, 10.96.0.10 -> 10.244.0.11.
            &[0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6],
            &[0, 0],
            &[10, 96, 0, 10],
            &[10, 244, 0, 11],
            // TCP: 80 -> 40000, seq 0, ack 0x01020305, RST|ACK.
            &[
                0, 80, 0x9c, 0x40, 0, 0, 0, 0, 1, 2, 3, 5, 0x50, 0x14, 0, 0, 0, 0, 0, 0,
            ],
        ]
        .concat();
        // Compare everything but the two checksums, then verify those.
        let mut masked = out.clone();
        masked[24..26].fill(0);
        masked[50..52].fill(0);
        assert_eq!(masked, expected);
        assert_eq!(internet_checksum(&[&out[14..34]]), 0, "IP checksum");
        assert_eq!(
            transport_checksum(&out[26..30], &out[30..34], PROTO_TCP, &out[34..]),
            0,
            "TCP checksum"
        );
    }

    #[test]
    fn a_segment_with_ack_gets_a_bare_rst_at_that_sequence() {
        let mut tcp = syn();
        tcp[13] = TCP_ACK;
        tcp[8..12].copy_from_slice(&[9, 9, 9, 9]);
        let out = reply(&frame(PROTO_TCP, &tcp)).unwrap();
        assert_eq!(&out[38..42], &[9, 9, 9, 9]);
        assert_eq!(out[47], TCP_RST);
    }

    #[test]
    fn udp_gets_icmp_port_unreachable_quoting_the_datagram() {
        let udp = [0x9c, 0x40, 0, 53, 0, 13, 0, 0, b'h', b'e', b'l', b'l', b'o'];
        let original = frame(PROTO_UDP, &udp);
        let out = reply(&original).unwrap();
        assert_eq!(out[14 + 9], PROTO_ICMP);
        assert_eq!(&out[34..36], &[3, 3]);
        assert_eq!(&out[42..], &original[14..14 + 28], "IP header plus 8 bytes");
        assert_eq!(internet_checksum(&[&out[34..]]), 0, "ICMP checksum");
    }

    #[test]
    fn what_must_not_be_answered_is_refused_with_a_reason() {
        let mut rst = syn();
        rst[13] = TCP_RST;
        assert_eq!(reply(&frame(PROTO_TCP, &rst)), Err(RejectError::Reset));
        assert_eq!(
            reply(&frame(PROTO_ICMP, &[8, 0, 0, 0])),
            Err(RejectError::Protocol(1))
        );
        assert_eq!(
            reply(&frame(PROTO_TCP, &syn())[..40]),
            Err(RejectError::Truncated)
        );
        let mut v6 = frame(PROTO_TCP, &syn());
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        assert_eq!(reply(&v6), Err(RejectError::NotIp));
        // Not from or to an address that names no single host, nor in a multicast or
        // broadcast frame (the source is at bytes 26..30, the destination at 30..34).
        for proto in [PROTO_TCP, PROTO_UDP] {
            let whole = frame(proto, &syn());
            assert!(reply(&whole).is_ok());
            for (at, address) in [
                (26, [0, 0, 0, 0]),
                (26, [255, 255, 255, 255]),
                (26, [224, 0, 0, 1]),
                (26, [240, 0, 0, 1]),
                (30, [0, 0, 0, 0]),
                (30, [255, 255, 255, 255]),
                (30, [239, 1, 2, 3]),
            ] {
                let mut f = whole.clone();
                f[at..at + 4].copy_from_slice(&address);
                assert_eq!(reply(&f), Err(RejectError::NotUnicast), "{at} {address:?}");
            }
            for mac in [[0xff; 6], [0x01, 0x00, 0x5e, 0, 0, 1]] {
                let mut f = whole.clone();
                f[..6].copy_from_slice(&mac);
                assert_eq!(reply(&f), Err(RejectError::NotUnicast), "{mac:?}");
            }
        }
        // Every truncation gives an error, never a panic.
        let whole = frame(PROTO_TCP, &syn());
        for len in 0..whole.len() {
            assert!(reply(&whole[..len]).is_err(), "{len} bytes");
        }
    }

    // fd00:10:244::b (a pod) -> fd00:10:96::a (a service).
    const CLIENT6: [u8; 16] = [
        0xfd, 0, 0, 0x10, 0x02, 0x44, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b,
    ];
    const VIP6: [u8; 16] = [0xfd, 0, 0, 0x10, 0, 0x96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a];

    /// An IPv6 frame from the client to the service: `next_header`, then `rest` (extension
    /// headers, if any, and the upper layer).
    fn frame6(next_header: u8, rest: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&GW_MAC);
        f.extend_from_slice(&CLIENT_MAC);
        f.extend_from_slice(&[0x86, 0xdd]);
        push_ipv6(&mut f, &CLIENT6, &VIP6, next_header, rest);
        f
    }

    fn syn6() -> Vec<u8> {
        // 40000 -> 80, seq 0x01020304, SYN, window 64240.
        let mut tcp = vec![
            0x9c, 0x40, 0, 80, 1, 2, 3, 4, 0, 0, 0, 0, 0x50, TCP_SYN, 0xfa, 0xf0, 0, 0, 0, 0,
        ];
        let c = transport_checksum_v6(&CLIENT6, &VIP6, PROTO_TCP, &tcp);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        tcp
    }

    fn udp6(payload: &[u8]) -> Vec<u8> {
        let len = (8 + payload.len()) as u16;
        let mut udp = vec![0x9c, 0x40, 0, 53];
        udp.extend_from_slice(&len.to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(payload);
        let c = transport_checksum_v6(&CLIENT6, &VIP6, PROTO_UDP, &udp);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        udp
    }

    /// Whether the upper-layer checksum of an IPv6 reply holds, computed apart from the code
    /// under test: the pseudo-header (RFC 8200 §8.1) spelled out byte by byte, then a plain
    /// 16-bit one's-complement sum, which must come to 0xffff over a correct segment.
    fn v6_checksum_holds(reply: &[u8]) -> bool {
        let ip = &reply[14..];
        let upper = &ip[40..];
        let len = upper.len() as u32;
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&ip[8..24]); // source
        bytes.extend_from_slice(&ip[24..40]); // destination
        bytes.extend_from_slice(&[(len >> 24) as u8, (len >> 16) as u8, (len >> 8) as u8]);
        bytes.push(len as u8);
        bytes.extend_from_slice(&[0, 0, 0, ip[6]]); // zero, next header
        bytes.extend_from_slice(upper);
        if bytes.len() % 2 == 1 {
            bytes.push(0);
        }
        let mut sum: u64 = 0;
        for i in (0..bytes.len()).step_by(2) {
            sum += u64::from(bytes[i]) * 256 + u64::from(bytes[i + 1]);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum == 0xffff
    }

    #[test]
    fn a_syn_over_ipv6_gets_a_rst_ack_from_the_service_address() {
        let out = reply(&frame6(PROTO_TCP, &syn6())).unwrap();
        let expected: Vec<u8> = [
            &CLIENT_MAC[..],
            &GW_MAC,
            &[0x86, 0xdd],
            // IPv6: payload 20 bytes, TCP, hop limit 64, fd00:10:96::a -> fd00:10:244::b.
            &[0x60, 0, 0, 0, 0, 20, 6, 64],
            &VIP6,
            &CLIENT6,
            // TCP: 80 -> 40000, seq 0, ack 0x01020305, RST|ACK.
            &[
                0, 80, 0x9c, 0x40, 0, 0, 0, 0, 1, 2, 3, 5, 0x50, 0x14, 0, 0, 0, 0, 0, 0,
            ],
        ]
        .concat();
        let mut masked = out.clone();
        masked[70..72].fill(0);
        assert_eq!(masked, expected);
        assert!(v6_checksum_holds(&out), "TCP checksum");
        assert_ne!(&out[70..72], &[0, 0]);
    }

    #[test]
    fn tcp_over_ipv6_follows_the_ipv4_sequence_rules() {
        // With ACK: a bare RST at the acknowledged sequence.
        let mut tcp = syn6();
        tcp[13] = TCP_ACK;
        tcp[8..12].copy_from_slice(&[9, 9, 9, 9]);
        let out = reply(&frame6(PROTO_TCP, &tcp)).unwrap();
        assert_eq!(&out[58..62], &[9, 9, 9, 9], "seq");
        assert_eq!(&out[62..66], &[0, 0, 0, 0], "ack");
        assert_eq!(out[67], TCP_RST);
        assert!(v6_checksum_holds(&out));
        // Without: RST|ACK acknowledging the data, SYN and FIN.
        let mut tcp = syn6();
        tcp[13] = TCP_SYN | TCP_FIN;
        tcp.extend_from_slice(b"hello");
        let out = reply(&frame6(PROTO_TCP, &tcp)).unwrap();
        assert_eq!(&out[58..62], &[0, 0, 0, 0], "seq");
        assert_eq!(&out[62..66], &[1, 2, 3, 4 + 7], "ack");
        assert_eq!(out[67], TCP_RST | TCP_ACK);
        assert!(v6_checksum_holds(&out));
    }

    #[test]
    fn udp_over_ipv6_gets_icmpv6_port_unreachable_quoting_the_packet() {
        let original = frame6(PROTO_UDP, &udp6(b"hello"));
        let out = reply(&original).unwrap();
        assert_eq!(
            &out[..14],
            &[&CLIENT_MAC[..], &GW_MAC, &[0x86, 0xdd]].concat()
        );
        let icmp_len = (8 + original.len() - 14) as u16;
        assert_eq!(&out[18..20], &icmp_len.to_be_bytes(), "payload length");
        assert_eq!(out[20], PROTO_ICMPV6, "next header");
        assert_eq!(out[21], 64, "hop limit");
        assert_eq!(&out[22..38], &VIP6, "from the service address");
        assert_eq!(&out[38..54], &CLIENT6, "to the client");
        assert_eq!(
            &out[54..56],
            &[1, 4],
            "destination unreachable, port unreachable"
        );
        assert_eq!(&out[58..62], &[0, 0, 0, 0], "unused");
        assert_eq!(&out[62..], &original[14..], "the whole offending packet");
        assert!(v6_checksum_holds(&out), "ICMPv6 checksum");
    }

    #[test]
    fn the_icmpv6_quote_stops_at_the_ipv6_minimum_mtu() {
        // An IPv6 packet of 1232 bytes fits whole: 40 + 8 + 1232 = 1280.
        let fits = frame6(PROTO_UDP, &udp6(&[0xab; 1232 - 48]));
        let out = reply(&fits).unwrap();
        assert_eq!(out.len(), 14 + 1280);
        assert_eq!(&out[62..], &fits[14..]);
        assert!(v6_checksum_holds(&out));
        // One byte more, or far more, is cut at 1232 bytes.
        for extra in [1, 2, 3, 1000, 8000] {
            let big = frame6(PROTO_UDP, &udp6(&vec![0xcd; 1232 - 48 + extra]));
            let out = reply(&big).unwrap();
            assert_eq!(out.len(), 14 + 1280, "{extra}");
            assert_eq!(&out[18..20], &1240u16.to_be_bytes(), "payload length");
            assert_eq!(&out[62..], &big[14..14 + 1232], "{extra}");
            assert!(v6_checksum_holds(&out), "{extra}");
        }
    }

    #[test]
    fn sctp_and_other_protocols_over_ipv6_get_port_unreachable() {
        for proto in [PROTO_SCTP, 47, 59] {
            let original = frame6(proto, &[0x9c, 0x40, 0, 80, 0, 0, 0, 0, 1]);
            let out = reply(&original).unwrap();
            assert_eq!(&out[54..56], &[1, 4], "{proto}");
            assert_eq!(&out[62..], &original[14..], "{proto}");
            assert!(v6_checksum_holds(&out), "{proto}");
        }
    }

    #[test]
    fn ipv6_extension_headers_are_walked_to_the_upper_layer() {
        // Hop-by-hop (8 bytes of PadN), destination options (16), routing with no segments
        // left (8), first fragment with more to come (8), then TCP.
        let mut rest = vec![EXT_DESTINATION, 0, 1, 4, 0, 0, 0, 0];
        rest.extend_from_slice(&[EXT_ROUTING, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        rest.extend_from_slice(&[EXT_FRAGMENT, 0, 0, 0, 0, 0, 0, 0]);
        rest.extend_from_slice(&[PROTO_TCP, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef]);
        let tcp_at = 14 + 40 + rest.len();
        rest.extend_from_slice(&syn6());
        let original = frame6(EXT_HOP_BY_HOP, &rest);
        let out = reply(&original).unwrap();
        assert_eq!(out.len(), 14 + 40 + 20, "no extension header in the reply");
        assert_eq!(out[20], PROTO_TCP);
        assert_eq!(
            &out[54..56],
            &original[tcp_at + 2..tcp_at + 4],
            "ports swapped"
        );
        assert_eq!(&out[56..58], &original[tcp_at..tcp_at + 2], "ports swapped");
        assert_eq!(&out[62..66], &[1, 2, 3, 5]);
        assert!(v6_checksum_holds(&out));

        // The same chain before UDP: the quote keeps the extension headers.
        let mut udp_rest = rest[..tcp_at - 54].to_vec();
        udp_rest[32] = PROTO_UDP; // the fragment header's next header
        udp_rest.extend_from_slice(&udp6(b"x"));
        let original = frame6(EXT_HOP_BY_HOP, &udp_rest);
        let out = reply(&original).unwrap();
        assert_eq!(&out[54..56], &[1, 4]);
        assert_eq!(&out[62..], &original[14..]);
        assert!(v6_checksum_holds(&out));

        // A non-first fragment cannot be refused.
        let mut later = rest.clone();
        later[34] = 0x05; // fragment offset 0x05 << 5 = 160 (in 8-byte units)
        assert_eq!(
            reply(&frame6(EXT_HOP_BY_HOP, &later)),
            Err(RejectError::Fragment)
        );
        // A routing header with segments left was not meant for the service.
        let mut onward = rest.clone();
        onward[27] = 1;
        assert_eq!(
            reply(&frame6(EXT_HOP_BY_HOP, &onward)),
            Err(RejectError::SegmentsLeft)
        );
        // Headers not walked.
        for h in [EXT_ESP, EXT_AH, EXT_MOBILITY, EXT_HIP, EXT_SHIM6, 253, 254] {
            assert_eq!(
                reply(&frame6(h, &[PROTO_TCP; 64])),
                Err(RejectError::ExtensionHeader(h))
            );
        }
        // Eight destination options headers are walked, nine are too many.
        let chain = |n: usize| {
            let mut r = Vec::new();
            for i in 0..n {
                let next = if i + 1 == n {
                    PROTO_TCP
                } else {
                    EXT_DESTINATION
                };
                r.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
            }
            r.extend_from_slice(&syn6());
            frame6(EXT_DESTINATION, &r)
        };
        assert!(reply(&chain(MAX_EXTENSION_HEADERS)).is_ok());
        assert_eq!(
            reply(&chain(MAX_EXTENSION_HEADERS + 1)),
            Err(RejectError::TooManyExtensionHeaders)
        );
    }

    #[test]
    fn what_must_not_be_answered_over_ipv6_is_refused_with_a_reason() {
        let mut rst = syn6();
        rst[13] = TCP_RST | TCP_ACK;
        assert_eq!(reply(&frame6(PROTO_TCP, &rst)), Err(RejectError::Reset));
        // No ICMPv6 is answered: an error (here a port unreachable), an echo request, or a
        // neighbor solicitation.
        for icmp in [
            [1, 4, 0, 0, 0, 0, 0, 0],
            [128, 0, 0, 0, 0, 1, 0, 1],
            [135; 8],
        ] {
            assert_eq!(
                reply(&frame6(PROTO_ICMPV6, &icmp)),
                Err(RejectError::Protocol(PROTO_ICMPV6))
            );
        }
        // Not from or to a multicast or the unspecified address, nor in a multicast frame.
        let whole = frame6(PROTO_UDP, &udp6(b"hi"));
        let all_nodes = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        for (at, address) in [
            (22, all_nodes),
            (22, [0; 16]),
            (38, all_nodes),
            (38, [0; 16]),
        ] {
            let mut f = whole.clone();
            f[at..at + 16].copy_from_slice(&address);
            assert_eq!(reply(&f), Err(RejectError::NotUnicast), "{at} {address:?}");
        }
        let mut f = whole.clone();
        f[..6].copy_from_slice(&[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(reply(&f), Err(RejectError::NotUnicast));
        // An IPv4 packet in an IPv6 EtherType, and another EtherType.
        let mut f = frame(PROTO_UDP, &[0; 8]);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f.resize(80, 0);
        assert_eq!(reply(&f), Err(RejectError::NotIp));
        let mut f = whole.clone();
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(reply(&f), Err(RejectError::NotIp));
    }

    #[test]
    fn truncated_or_hostile_ipv6_frames_never_panic() {
        // Every truncation of a TCP segment, bare or behind extension headers, is an error.
        let mut behind = vec![EXT_DESTINATION, 0, 1, 4, 0, 0, 0, 0];
        behind.extend_from_slice(&[PROTO_TCP, 0, 1, 4, 0, 0, 0, 0]);
        behind.extend_from_slice(&syn6());
        for whole in [frame6(PROTO_TCP, &syn6()), frame6(EXT_HOP_BY_HOP, &behind)] {
            for len in 0..whole.len() {
                assert!(reply(&whole[..len]).is_err(), "{len} bytes");
            }
            assert!(reply(&whole).is_ok());
        }
        // A cut UDP datagram is still refused, quoting what arrived, once the IPv6 header has.
        let whole = frame6(PROTO_UDP, &udp6(b"hello"));
        for len in 0..whole.len() {
            match reply(&whole[..len]) {
                Ok(out) => {
                    assert!(len >= 54, "{len} bytes");
                    assert_eq!(&out[62..], &whole[14..len]);
                    assert!(v6_checksum_holds(&out));
                }
                Err(e) => assert!(len < 54 && e == RejectError::Truncated, "{len}: {e}"),
            }
        }
        // A payload length that lies either way.
        for lie in [0u16, 1, 0xffff] {
            let mut f = frame6(PROTO_UDP, &udp6(b"hello"));
            f[18..20].copy_from_slice(&lie.to_be_bytes());
            let out = reply(&f).unwrap();
            assert!(out.len() <= f.len() + 8 + 40, "{lie}");
            assert!(v6_checksum_holds(&out));
        }
        // Random corruption and cuts of valid frames: a reply or an error, never a panic, and
        // any reply is well-formed.
        let mut big_rest = vec![EXT_HOP_BY_HOP, 0, 1, 4, 0, 0, 0, 0];
        big_rest.extend_from_slice(&[EXT_ROUTING, 0, 0, 0, 0, 0, 0, 0]);
        big_rest.extend_from_slice(&[EXT_FRAGMENT, 0, 0, 0, 0, 0, 0, 0]);
        big_rest.extend_from_slice(&[PROTO_UDP, 0, 0, 0, 0, 0, 0, 0]);
        big_rest.extend_from_slice(&udp6(&[7; 1400]));
        let bases = [
            frame6(PROTO_TCP, &syn6()),
            frame6(EXT_HOP_BY_HOP, &behind),
            frame6(PROTO_UDP, &udp6(b"hello")),
            frame6(EXT_DESTINATION, &big_rest),
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let mut f = bases[next() as usize % bases.len()].clone();
            for _ in 0..1 + next() % 4 {
                // Mostly the headers, sometimes anywhere.
                let span = if next() % 4 == 0 {
                    f.len()
                } else {
                    120.min(f.len())
                };
                let at = next() as usize % span;
                f[at] = next() as u8;
            }
            f.truncate(next() as usize % (f.len() + 1));
            if let Ok(out) = reply(&f) {
                if out[12..14] == [0x86, 0xdd] {
                    assert!(out.len() <= 14 + 1280);
                    assert_eq!(
                        usize::from(u16::from_be_bytes([out[18], out[19]])) + 54,
                        out.len()
                    );
                    assert!(v6_checksum_holds(&out));
                }
            }
        }
    }
}
