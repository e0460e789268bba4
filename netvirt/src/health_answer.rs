//! Health-check probes answered for every node by its switch, on the controller's behalf.
//!
//! A load balancer in front of a `LoadBalancer` service with `externalTrafficPolicy: Local`
//! probes every node's address on the service's `healthCheckNodePort` over HTTP, and sends
//! traffic only to the nodes that answer 200 (those with local endpoints). kube-proxy runs a
//! server on each node for it; a central controller has no process on the nodes. So each
//! node's switch sends the probes' TCP segments to the controller (table 40, under the
//! [`cookie::HEALTH`](crate::pipeline::cookie::HEALTH) cookie, whose low bits are the port),
//! and the controller answers each segment with a packet-out, from what the node's desired
//! state says of the port (`Shards::health_check`), statelessly:
//!
//! - a SYN gets a SYN-ACK whose sequence number is keyed by a secret and the connection's
//!   addresses and ports (so the later segments are answered alike, on any replica that
//!   holds the same secret);
//! - the first segment with data (the request, whatever it asks) gets the whole response
//!   (kube-proxy's: [`HealthCheck::http_response`]) with FIN;
//! - the client's FIN, once it has everything, gets its ACK (and a FIN before any request, as
//!   a TCP-only health check closes, gets a FIN);
//! - a pure ACK gets nothing, a RST nothing, and a segment that acknowledges what was never
//!   sent a RST.
//!
//! A response fits one segment (a few hundred bytes, under the 536 every TCP accepts without
//! an MSS option). Pure: bytes in, bytes out.

use std::hash::BuildHasher;

use crate::health::HealthCheck;
use crate::model::ServiceKey;
use crate::reject::{RejectError, Segment, parse, segment};

const PROTO_TCP: u8 = 6;
const TCP_FIN: u8 = 0x01;
const TCP_SYN: u8 = 0x02;
const TCP_RST: u8 = 0x04;
const TCP_PSH: u8 = 0x08;
const TCP_ACK: u8 = 0x10;
/// The receive window advertised.
const WINDOW: u16 = 65_535;

/// What a health-check flow's userdata starts with; the service's `namespace/name` follows
/// (for whoever reads the flow: an OpenFlow 1.3 packet-in does not carry it).
pub const USERDATA_PREFIX: &[u8] = b"svcflow-health ";

/// The userdata of the flow that sends `service`'s health-check probes to the controller.
pub fn userdata(service: &ServiceKey) -> Vec<u8> {
    let mut out = USERDATA_PREFIX.to_vec();
    out.extend_from_slice(format!("{}/{}", service.namespace, service.name).as_bytes());
    out
}

/// A secret to key the answers' sequence numbers with, drawn at random.
pub fn random_secret() -> u64 {
    std::collections::hash_map::RandomState::new().hash_one(0u8)
}

/// Why a segment gets no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAnswer {
    /// Not a unicast TCP segment that could be answered at all.
    Frame(RejectError),
    /// Not TCP.
    NotTcp(u8),
    /// A RST, or a segment that needs no answer (an ACK of what was sent).
    Nothing,
}

/// The frame that answers the TCP segment in `frame`, a probe of `check`'s health-check
/// port, with sequence numbers keyed by `secret`.
pub fn answer(frame: &[u8], check: &HealthCheck, secret: u64) -> Result<Vec<u8>, NoAnswer> {
    let p = parse(frame).map_err(NoAnswer::Frame)?;
    if p.proto != PROTO_TCP {
        return Err(NoAnswer::NotTcp(p.proto));
    }
    let Segment {
        ports,
        seq,
        ack,
        flags,
        data_len,
    } = segment(p.upper).map_err(NoAnswer::Frame)?;
    if flags & TCP_RST != 0 {
        return Err(NoAnswer::Nothing);
    }
    let fin = u32::from(flags & TCP_FIN != 0);
    // The connection's initial sequence number: the same for every segment of it.
    let isn =
        foldhash::quality::FixedState::with_seed(secret).hash_one((p.src(), p.dst(), ports)) as u32;
    let response = check.http_response();
    let sent = response.len() as u32;
    let (out_seq, out_ack, out_flags, payload): (u32, u32, u8, &[u8]) = if flags & TCP_SYN != 0 {
        if flags & TCP_ACK != 0 {
            // A SYN-ACK: nobody here opened a connection.
            (ack, 0, TCP_RST, &[])
        } else {
            (isn, seq.wrapping_add(1), TCP_SYN | TCP_ACK, &[])
        }
    } else if flags & TCP_ACK == 0 {
        return Err(NoAnswer::Nothing);
    } else if ack == isn.wrapping_add(1) && data_len > 0 {
        // The request: the whole response, and the end of ours.
        let next = seq.wrapping_add(data_len + fin);
        (ack, next, TCP_ACK | TCP_PSH | TCP_FIN, response.as_bytes())
    } else if ack == isn.wrapping_add(1) && fin == 1 {
        // Closed before any request (a TCP-only health check): closed here too.
        (ack, seq.wrapping_add(1), TCP_ACK | TCP_FIN, &[])
    } else if ack == isn.wrapping_add(1) {
        // The handshake's ACK: nothing yet.
        return Err(NoAnswer::Nothing);
    } else if ack == isn.wrapping_add(1).wrapping_add(sent).wrapping_add(1)
        || ack == isn.wrapping_add(2)
    {
        // After our FIN, with the response or without.
        if fin == 0 && data_len == 0 {
            return Err(NoAnswer::Nothing);
        }
        // The client's FIN (or more data, which is acknowledged and ignored).
        (ack, seq.wrapping_add(data_len + fin), TCP_ACK, &[])
    } else {
        // It acknowledges what was never sent.
        (ack, 0, TCP_RST, &[])
    };
    let mut out = Vec::with_capacity(20 + payload.len());
    out.extend_from_slice(&ports[2..4]); // from the port it was sent to
    out.extend_from_slice(&ports[0..2]);
    out.extend_from_slice(&out_seq.to_be_bytes());
    out.extend_from_slice(&out_ack.to_be_bytes());
    out.push(5 << 4);
    out.push(out_flags);
    out.extend_from_slice(&WINDOW.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]); // checksum, urgent pointer
    out.extend_from_slice(payload);
    Ok(p.answer(PROTO_TCP, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reject::{internet_checksum, transport_checksum, transport_checksum_v6};

    const CLIENT: [u8; 4] = [192, 168, 50, 200];
    const NODE: [u8; 4] = [192, 168, 50, 12];
    const CLIENT6: [u8; 16] = [0xfd, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20];
    const NODE6: [u8; 16] = [0xfd, 0, 0, 0x50, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12];

    fn check(count: usize) -> HealthCheck {
        HealthCheck {
            service: ServiceKey::new("default", "lb"),
            local_endpoints: count,
        }
    }

    fn segment(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&40000u16.to_be_bytes());
        tcp.extend_from_slice(&32000u16.to_be_bytes());
        tcp.extend_from_slice(&seq.to_be_bytes());
        tcp.extend_from_slice(&ack.to_be_bytes());
        tcp.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
        tcp.extend_from_slice(payload);
        tcp
    }

    /// A frame from the client to the node carrying `tcp`.
    fn frame(tcp: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 0x12, 2, 0, 0, 0, 0, 0xe1, 0x08, 0x00];
        let total = (20 + tcp.len()) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&CLIENT);
        ip.extend_from_slice(&NODE);
        f.extend_from_slice(&ip);
        f.extend_from_slice(tcp);
        f
    }

    fn frame6(tcp: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 0x12, 2, 0, 0, 0, 0, 0xe1, 0x86, 0xdd];
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        f.extend_from_slice(&[6, 64]);
        f.extend_from_slice(&CLIENT6);
        f.extend_from_slice(&NODE6);
        f.extend_from_slice(tcp);
        f
    }

    /// The answer's TCP segment, after checking that it goes back to the client from the
    /// node, with valid IPv4 and TCP checksums.
    fn tcp_of(reply: &[u8]) -> Vec<u8> {
        assert_eq!(&reply[0..6], &[2, 0, 0, 0, 0, 0xe1], "to the sender's MAC");
        assert_eq!(&reply[6..12], &[2, 0, 0, 0, 0, 0x12]);
        let ip = &reply[14..];
        assert_eq!(internet_checksum(&[&ip[..20]]), 0, "IPv4 header checksum");
        assert_eq!(&ip[12..16], &NODE);
        assert_eq!(&ip[16..20], &CLIENT);
        let tcp = &ip[20..];
        assert_eq!(
            transport_checksum(&NODE, &CLIENT, 6, tcp),
            0,
            "TCP checksum"
        );
        assert_eq!(&tcp[0..2], &32000u16.to_be_bytes());
        assert_eq!(&tcp[2..4], &40000u16.to_be_bytes());
        tcp.to_vec()
    }

    fn fields(tcp: &[u8]) -> (u32, u32, u8) {
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let ack = u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]]);
        (seq, ack, tcp[13])
    }

    #[test]
    fn a_probe_gets_a_handshake_the_response_and_its_fin_acknowledged() {
        let c = check(2);
        let secret = 7;
        // SYN -> SYN-ACK.
        let synack = tcp_of(&answer(&frame(&segment(1000, 0, TCP_SYN, &[])), &c, secret).unwrap());
        let (isn, ack, flags) = fields(&synack);
        assert_eq!((ack, flags), (1001, TCP_SYN | TCP_ACK));
        // The same SYN again (retransmitted) gets the same SYN-ACK.
        let again = tcp_of(&answer(&frame(&segment(1000, 0, TCP_SYN, &[])), &c, secret).unwrap());
        assert_eq!(fields(&again).0, isn);
        // The handshake's ACK: nothing.
        let handshake = frame(&segment(1001, isn.wrapping_add(1), TCP_ACK, &[]));
        assert_eq!(answer(&handshake, &c, secret), Err(NoAnswer::Nothing));
        // The request: the response, with FIN, acknowledging the request.
        let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let reply = answer(
            &frame(&segment(
                1001,
                isn.wrapping_add(1),
                TCP_ACK | TCP_PSH,
                request,
            )),
            &c,
            secret,
        )
        .unwrap();
        let tcp = tcp_of(&reply);
        let (seq, ack, flags) = fields(&tcp);
        assert_eq!(seq, isn.wrapping_add(1));
        assert_eq!(ack, 1001 + request.len() as u32);
        assert_eq!(flags, TCP_ACK | TCP_PSH | TCP_FIN);
        let body = std::str::from_utf8(&tcp[20..]).unwrap();
        assert_eq!(body, c.http_response());
        assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
        assert!(
            body.ends_with(r#""localEndpoints":2,"serviceProxyHealthy":true}"#),
            "{body}"
        );
        // The client acknowledges it all: nothing; then its FIN gets an ACK.
        let done = isn.wrapping_add(1).wrapping_add(body.len() as u32 + 1);
        let client_ack = frame(&segment(ack, done, TCP_ACK, &[]));
        assert_eq!(answer(&client_ack, &c, secret), Err(NoAnswer::Nothing));
        let fin = tcp_of(
            &answer(
                &frame(&segment(ack, done, TCP_ACK | TCP_FIN, &[])),
                &c,
                secret,
            )
            .unwrap(),
        );
        assert_eq!(fields(&fin), (done, ack + 1, TCP_ACK));
    }

    #[test]
    fn no_local_endpoint_answers_503_and_strays_get_a_reset_or_nothing() {
        let c = check(0);
        let secret = 11;
        let synack = tcp_of(&answer(&frame(&segment(5, 0, TCP_SYN, &[])), &c, secret).unwrap());
        let isn = fields(&synack).0;
        let reply = answer(
            &frame(&segment(
                6,
                isn.wrapping_add(1),
                TCP_ACK,
                b"GET / HTTP/1.0\r\n\r\n",
            )),
            &c,
            secret,
        )
        .unwrap();
        let tcp = tcp_of(&reply);
        let body = std::str::from_utf8(&tcp[20..]).unwrap();
        assert!(
            body.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{body}"
        );
        assert!(body.contains(r#""localEndpoints":0"#), "{body}");
        // Another secret makes another connection: its ACK acknowledges nothing sent.
        let stray = answer(
            &frame(&segment(6, isn.wrapping_add(1), TCP_ACK, b"x")),
            &c,
            secret + 1,
        )
        .unwrap();
        let (seq, _, flags) = fields(&tcp_of(&stray));
        assert_eq!((seq, flags), (isn.wrapping_add(1), TCP_RST));
        // A TCP-only check closes right after the handshake: its FIN gets ours, and the ACK
        // of ours nothing.
        let close = answer(
            &frame(&segment(6, isn.wrapping_add(1), TCP_ACK | TCP_FIN, &[])),
            &c,
            secret,
        )
        .unwrap();
        assert_eq!(
            fields(&tcp_of(&close)),
            (isn.wrapping_add(1), 7, TCP_ACK | TCP_FIN)
        );
        let last = frame(&segment(7, isn.wrapping_add(2), TCP_ACK, &[]));
        assert_eq!(answer(&last, &c, secret), Err(NoAnswer::Nothing));
        // A RST is never answered, nor a bare segment without ACK.
        let rst = frame(&segment(6, 0, TCP_RST, &[]));
        assert_eq!(answer(&rst, &c, secret), Err(NoAnswer::Nothing));
        assert_eq!(
            answer(&frame(&segment(6, 0, 0, &[])), &c, secret),
            Err(NoAnswer::Nothing)
        );
        // Not TCP.
        let mut udp = frame(&[0; 8]);
        udp[14 + 9] = 17;
        assert_eq!(answer(&udp, &c, secret), Err(NoAnswer::NotTcp(17)));
    }

    #[test]
    fn ipv6_probes_are_answered_too() {
        let c = check(1);
        let reply = answer(&frame6(&segment(1, 0, TCP_SYN, &[])), &c, 3).unwrap();
        assert_eq!(&reply[12..14], &[0x86, 0xdd]);
        let ip = &reply[14..];
        assert_eq!(&ip[8..24], &NODE6);
        assert_eq!(&ip[24..40], &CLIENT6);
        let tcp = &ip[40..];
        assert_eq!(transport_checksum_v6(&NODE6, &CLIENT6, 6, tcp), 0);
        assert_eq!(fields(tcp).2, TCP_SYN | TCP_ACK);
    }

    #[test]
    fn hostile_frames_never_panic() {
        let c = check(1);
        let base = frame(&segment(1, 2, TCP_ACK, b"abc"));
        for len in 0..base.len() {
            let _ = answer(&base[..len], &c, 1);
        }
        let mut x: u32 = 12345;
        for _ in 0..2000 {
            let mut f = base.clone();
            for _ in 0..4 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                let at = (x >> 8) as usize % f.len();
                f[at] = (x >> 16) as u8;
            }
            let _ = answer(&f, &c, 1);
        }
    }
}
