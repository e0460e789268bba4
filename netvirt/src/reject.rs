//! Replies that refuse a connection to a service with no endpoint, as iptables' REJECT does:
//! a TCP RST for TCP, and ICMP port unreachable for UDP and SCTP (RFC 792; RFC 4960 §10.1
//! treats it as an ABORT). The switch sends the offending packet to the controller, which
//! answers with [`reply`] through a packet-out on the same port. Pure: bytes in, bytes out.

const ETH_LEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const PROTO_ICMP: u8 = 1;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_SCTP: u8 = 132;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_ACK: u8 = 0x10;

/// Why no reply was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectError {
    /// The frame ends before its headers do.
    Truncated,
    /// Not IPv4 (IPv6 is not handled yet).
    NotIpv4,
    /// A protocol other than TCP, UDP or SCTP.
    Protocol(u8),
    /// A TCP RST, which must never be answered.
    Reset,
    /// A fragment other than the first.
    Fragment,
}

impl std::fmt::Display for RejectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated frame"),
            Self::NotIpv4 => f.write_str("not an IPv4 frame"),
            Self::Protocol(p) => write!(f, "IP protocol {p} is not rejected"),
            Self::Reset => f.write_str("a TCP RST is never answered"),
            Self::Fragment => f.write_str("a non-first fragment"),
        }
    }
}

impl std::error::Error for RejectError {}

/// Builds the Ethernet frame that refuses `frame`, addressed back to its sender.
pub fn reply(frame: &[u8]) -> Result<Vec<u8>, RejectError> {
    let eth = frame.get(..ETH_LEN).ok_or(RejectError::Truncated)?;
    if u16::from_be_bytes([eth[12], eth[13]]) != ETHERTYPE_IPV4 {
        return Err(RejectError::NotIpv4);
    }
    let ip = &frame[ETH_LEN..];
    let version_ihl = *ip.first().ok_or(RejectError::Truncated)?;
    let ihl = usize::from(version_ihl & 0x0f) * 4;
    if version_ihl >> 4 != 4 || ihl < 20 {
        return Err(RejectError::NotIpv4);
    }
    let header = ip.get(..ihl).ok_or(RejectError::Truncated)?;
    let total_len = usize::from(u16::from_be_bytes([header[2], header[3]])).clamp(ihl, ip.len());
    if u16::from_be_bytes([header[6], header[7]]) & 0x1fff != 0 {
        return Err(RejectError::Fragment);
    }
    let proto = header[9];
    let (src, dst) = (&header[12..16], &header[16..20]);
    let payload = &ip[ihl..total_len];
    let mut out = Vec::with_capacity(ETH_LEN + 60);
    // Ethernet: back to the sender, from whom it was sent to.
    out.extend_from_slice(&eth[6..12]);
    out.extend_from_slice(&eth[0..6]);
    out.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    match proto {
        PROTO_TCP => tcp_reset(&mut out, dst, src, payload)?,
        PROTO_UDP | PROTO_SCTP => port_unreachable(&mut out, dst, src, &ip[..total_len])?,
        other => return Err(RejectError::Protocol(other)),
    }
    Ok(out)
}

fn tcp_reset(out: &mut Vec<u8>, src: &[u8], dst: &[u8], tcp: &[u8]) -> Result<(), RejectError> {
    let header = tcp.get(..20).ok_or(RejectError::Truncated)?;
    let flags = header[13];
    if flags & TCP_RST != 0 {
        return Err(RejectError::Reset);
    }
    let data_offset = usize::from(header[12] >> 4) * 4;
    let data_len = tcp.len().saturating_sub(data_offset) as u32;
    let seq = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let ack = u32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    // RFC 793 §3.4, "Reset Generation".
    let (rst_seq, rst_ack, rst_flags) = if flags & TCP_ACK != 0 {
        (ack, 0, TCP_RST)
    } else {
        let consumed = data_len + u32::from(flags & TCP_SYN != 0) + u32::from(flags & TCP_FIN != 0);
        (0, seq.wrapping_add(consumed), TCP_RST | TCP_ACK)
    };
    let mut segment = Vec::with_capacity(20);
    segment.extend_from_slice(&header[2..4]); // source port = the original destination port
    segment.extend_from_slice(&header[0..2]);
    segment.extend_from_slice(&rst_seq.to_be_bytes());
    segment.extend_from_slice(&rst_ack.to_be_bytes());
    segment.extend_from_slice(&[5 << 4, rst_flags, 0, 0, 0, 0, 0, 0]);
    let checksum = transport_checksum(src, dst, PROTO_TCP, &segment);
    segment[16..18].copy_from_slice(&checksum.to_be_bytes());
    push_ipv4(out, src, dst, PROTO_TCP, &segment);
    Ok(())
}

fn port_unreachable(
    out: &mut Vec<u8>,
    src: &[u8],
    dst: &[u8],
    original: &[u8],
) -> Result<(), RejectError> {
    // The original IP header plus the first 8 bytes of its payload (RFC 792).
    let ihl = usize::from(original.first().ok_or(RejectError::Truncated)? & 0x0f) * 4;
    let quoted = original.get(..ihl + 8).unwrap_or(original);
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    let checksum = internet_checksum(&[&icmp]);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    push_ipv4(out, src, dst, PROTO_ICMP, &icmp);
    Ok(())
}

fn push_ipv4(out: &mut Vec<u8>, src: &[u8], dst: &[u8], proto: u8, payload: &[u8]) {
    let total = (20 + payload.len()) as u16;
    let mut header = [0u8; 20];
    header[0] = 0x45;
    header[2..4].copy_from_slice(&total.to_be_bytes());
    header[6] = 0x40; // don't fragment
    header[8] = 64;
    header[9] = proto;
    header[12..16].copy_from_slice(src);
    header[16..20].copy_from_slice(dst);
    let checksum = internet_checksum(&[&header]);
    header[10..12].copy_from_slice(&checksum.to_be_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
}

fn transport_checksum(src: &[u8], dst: &[u8], proto: u8, segment: &[u8]) -> u16 {
    let len = (segment.len() as u16).to_be_bytes();
    let pseudo = [0, proto, len[0], len[1]];
    internet_checksum(&[src, dst, &pseudo, segment])
}

/// RFC 1071 one's-complement sum over the concatenation of `parts` (each of even length,
/// except possibly the last).
fn internet_checksum(parts: &[&[u8]]) -> u16 {
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
        assert_eq!(reply(&v6), Err(RejectError::NotIpv4));
        // Every truncation gives an error, never a panic.
        let whole = frame(PROTO_TCP, &syn());
        for len in 0..whole.len() {
            assert!(reply(&whole[..len]).is_err(), "{len} bytes");
        }
    }
}
