//! Text helpers reproducing Open vSwitch's printf conventions
//! (`lib/dynamic-string.c`, `lib/packets.c`, `lib/ofp-port.c`).

use std::fmt::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr};

/// C's `%#x`: `0` for zero, else `0x` and lowercase hex.
pub fn hash_x(v: impl Into<u128>) -> String {
    let v = v.into();
    if v == 0 {
        "0".to_string()
    } else {
        format!("{v:#x}")
    }
}

/// `ds_put_hex()`: `0x` plus hex digits without leading zeros, `0` for zero.
pub fn put_hex(v: u128) -> String {
    hash_x(v)
}

/// `ds_put_hex()` over a byte string.
pub fn put_hex_bytes(b: &[u8]) -> String {
    let mut s = String::new();
    let mut printed = false;
    for &x in b {
        if x != 0 || printed {
            if printed {
                let _ = write!(s, "{x:02x}");
            } else {
                let _ = write!(s, "0x{x:x}");
            }
            printed = true;
        }
    }
    if !printed {
        s.push('0');
    }
    s
}

/// `ETH_ADDR_FMT`.
pub fn eth(v: u128) -> String {
    let b = v.to_be_bytes();
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[10], b[11], b[12], b[13], b[14], b[15]
    )
}

/// `eth_format_masked()`.
pub fn eth_masked(v: u128, m: u128) -> String {
    if m == 0xffff_ffff_ffff {
        eth(v)
    } else {
        format!("{}/{}", eth(v), eth(m))
    }
}

/// `ip_format_masked()`.
pub fn ipv4_masked(v: u128, m: u128) -> String {
    let ip = Ipv4Addr::from(v as u32);
    let m = m as u32;
    if m == u32::MAX {
        ip.to_string()
    } else if m.leading_ones() + m.trailing_zeros() == 32 {
        format!("{ip}/{}", m.leading_ones())
    } else {
        format!("{ip}/{}", Ipv4Addr::from(m))
    }
}

/// glibc `inet_ntop(AF_INET6)`, which Open vSwitch prints addresses with: the
/// first longest run of two or more zero words becomes `::`, and an
/// IPv4-compatible or IPv4-mapped address ends in a dotted quad
/// (`::10.0.0.1`, `::ffff:10.0.0.1`). Rust's `Ipv6Addr` `Display` differs on
/// IPv4-compatible addresses (`::a00:1`).
pub fn inet_ntop6(a: &Ipv6Addr) -> String {
    let w = a.segments();
    let o = a.octets();
    // First longest run of zero words, if at least 2 long.
    let (mut best, mut cur): ((usize, usize), Option<usize>) = ((0, 0), None);
    for i in 0..=8 {
        match (w.get(i).copied(), cur) {
            (Some(0), None) => cur = Some(i),
            (Some(0), Some(_)) => {}
            (_, Some(start)) => {
                if i - start > best.1 {
                    best = (start, i - start);
                }
                cur = None;
            }
            _ => {}
        }
    }
    let (base, len) = if best.1 >= 2 { best } else { (usize::MAX, 0) };
    let mut s = String::with_capacity(40);
    let mut i = 0;
    while i < 8 {
        if i == base {
            s.push(':');
            i += len;
            continue;
        }
        if i != 0 {
            s.push(':');
        }
        if i == 6 && base == 0 && (len == 6 || (len == 5 && w[5] == 0xffff)) {
            s.push_str(&Ipv4Addr::new(o[12], o[13], o[14], o[15]).to_string());
            return s;
        }
        s.push_str(&format!("{:x}", w[i]));
        i += 1;
    }
    if base != usize::MAX && base + len == 8 {
        s.push(':');
    }
    s
}

/// `ipv6_format_masked()`.
pub fn ipv6_masked(v: u128, m: u128) -> String {
    let ip = inet_ntop6(&Ipv6Addr::from(v));
    if m == u128::MAX {
        ip
    } else if m.leading_ones() + m.trailing_zeros() == 128 {
        format!("{ip}/{}", m.leading_ones())
    } else {
        format!("{ip}/{}", inet_ntop6(&Ipv6Addr::from(m)))
    }
}

/// `ofputil_format_port()` for a 16-bit port.
pub fn port16(p: u16) -> String {
    match p {
        0xfff7 => "UNSET".into(),
        0xfff8 => "IN_PORT".into(),
        0xfff9 => "TABLE".into(),
        0xfffa => "NORMAL".into(),
        0xfffb => "FLOOD".into(),
        0xfffc => "ALL".into(),
        0xfffd => "CONTROLLER".into(),
        0xfffe => "LOCAL".into(),
        0xffff => "ANY".into(),
        p => p.to_string(),
    }
}

/// `ofputil_port_from_ofp11()`: a 32-bit port as the 16-bit port OVS uses.
pub fn port32_to_16(p: u32) -> Option<u16> {
    if p < 0xff00 {
        Some(p as u16)
    } else if p >= 0xffff_ff00 {
        Some((p - 0xffff_0000) as u16)
    } else {
        None
    }
}

/// A 32-bit OpenFlow port printed as OVS does.
pub fn port32(p: u32) -> String {
    match port32_to_16(p) {
        Some(p) => port16(p),
        None => p.to_string(),
    }
}

/// `ct_state_to_string()`.
pub fn ct_state_bit(bit: u32) -> Option<&'static str> {
    Some(match bit {
        0x01 => "new",
        0x02 => "est",
        0x04 => "rel",
        0x08 => "rpl",
        0x10 => "inv",
        0x20 => "trk",
        0x40 => "snat",
        0x80 => "dnat",
        _ => return None,
    })
}

/// `packet_tcp_flag_to_string()`.
pub fn tcp_flag_bit(bit: u32) -> Option<&'static str> {
    Some(match bit {
        0x001 => "fin",
        0x002 => "syn",
        0x004 => "rst",
        0x008 => "psh",
        0x010 => "ack",
        0x020 => "urg",
        0x040 => "ece",
        0x080 => "cwr",
        0x100 => "ns",
        0x200 => "[200]",
        0x400 => "[400]",
        0x800 => "[800]",
        _ => return None,
    })
}

/// `format_flags()`.
pub fn flags(names: fn(u32) -> Option<&'static str>, mut v: u32, del: char) -> String {
    if v == 0 {
        return "0".into();
    }
    let mut s = String::new();
    let mut bad = 0u32;
    while v != 0 {
        let bit = v & v.wrapping_neg();
        match names(bit) {
            Some(n) => {
                s.push_str(n);
                s.push(del);
            }
            None => bad |= bit,
        }
        v &= !bit;
    }
    if bad != 0 {
        let _ = write!(s, "{bad:#x}{del}");
    }
    s.pop();
    s
}

/// `format_flags_masked()` without the name.
pub fn flags_masked(
    names: fn(u32) -> Option<&'static str>,
    v: u32,
    mut m: u32,
    max: u32,
) -> String {
    if m == max {
        return flags(names, v, '|');
    }
    if m == 0 {
        return "0/0".into();
    }
    let mut s = String::new();
    while m != 0 {
        let bit = m & m.wrapping_neg();
        s.push(if v & bit != 0 { '+' } else { '-' });
        s.push_str(names(bit).unwrap_or("[Unknown]"));
        m &= !bit;
    }
    s
}

/// Hex dump of bytes with a separator, as in `note:01.02` or `userdata=01.02`.
pub fn hex_dotted(b: &[u8], sep: char) -> String {
    let mut s = String::new();
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            s.push(sep);
        }
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// `ovs_hex_dump()` with offsets and an ASCII column, lines joined by `\n`.
pub fn hex_dump(b: &[u8]) -> String {
    let mut lines = Vec::new();
    for (i, chunk) in b.chunks(16).enumerate() {
        let mut s = format!("{:08x}  ", i * 16);
        for j in 0..16 {
            match chunk.get(j) {
                Some(x) => {
                    let _ = write!(s, "{x:02x}{}", if j == 7 { '-' } else { ' ' });
                }
                None => s.push_str("   "),
            }
        }
        s.push('|');
        for j in 0..16 {
            s.push(match chunk.get(j) {
                Some(&x) if (0x20..0x7f).contains(&x) => char::from(x),
                Some(_) => '.',
                None => ' ',
            });
        }
        s.push('|');
        lines.push(s);
    }
    lines.join("\n")
}

/// Writes `items` joined by `sep`.
pub fn join<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T], sep: &str) -> fmt::Result {
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write!(f, "{it}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::inet_ntop6;

    /// Outputs of glibc `inet_ntop()` (via `ovs-ofctl ofp-print` 3.1).
    #[test]
    fn inet_ntop6_matches_glibc() {
        for (a, s) in [
            ("::", "::"),
            ("::1", "::1"),
            ("::2", "::2"),
            ("1::", "1::"),
            ("fd00::1", "fd00::1"),
            ("::a00:1", "::10.0.0.1"),
            ("::1:2", "::0.1.0.2"),
            ("::ffff:a00:1", "::ffff:10.0.0.1"),
            ("::ffff:1:2", "::ffff:0.1.0.2"),
            ("::ffff:0:1:2", "::ffff:0:1:2"),
            ("1:0:0:2::3", "1:0:0:2::3"),
            ("1:0:2:3:4:5:6:7", "1:0:2:3:4:5:6:7"),
            ("1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("1:0:0:2:3:0:0:4", "1::2:3:0:0:4"),
        ] {
            let ip: Ipv6Addr = a.parse().unwrap();
            assert_eq!(inet_ntop6(&ip), s, "{a}");
        }
    }
}
