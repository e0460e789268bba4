//! Helpers shared by the crate's unit tests.

/// Bytes from a hex string such as `ovs-ofctl` prints (no spaces).
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}
