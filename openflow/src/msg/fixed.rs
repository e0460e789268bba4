//! Fixed-size `char[n]` fields (`ofp_desc`'s strings, `ofp_port`'s name) kept as sent.

use std::borrow::Cow;
use std::fmt;

use crate::error::DecodeError;
use crate::wire::{Reader, Writer};

/// A `char[n]` field exactly as the peer sent it: every byte is kept (a switch's string need
/// not be UTF-8, nor end in a NUL, nor be zeros after its NUL), so the field re-encodes byte
/// for byte. It reads and prints as text up to its first NUL, as `ovs-ofctl` prints it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FixedStr(Vec<u8>);

impl FixedStr {
    /// The field's bytes, trailing zeros left out.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text: the bytes up to the first NUL, invalid UTF-8 replaced.
    pub fn text(&self) -> Cow<'_, str> {
        let end = self.0.iter().position(|&b| b == 0).unwrap_or(self.0.len());
        String::from_utf8_lossy(&self.0[..end])
    }

    /// Reads an `n`-byte field.
    pub(crate) fn read(r: &mut Reader<'_>, n: usize) -> Result<Self, DecodeError> {
        let b = r.take(n)?;
        let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
        Ok(FixedStr(b[..end].to_vec()))
    }

    /// Writes it as an `n`-byte field: its bytes (cut at `n`), then zeros.
    pub(crate) fn write(&self, w: &mut Writer, n: usize) {
        let k = self.0.len().min(n);
        w.bytes(&self.0[..k]);
        w.zeros(n - k);
    }
}

impl From<&str> for FixedStr {
    fn from(s: &str) -> Self {
        FixedStr(s.as_bytes().to_vec())
    }
}

impl From<String> for FixedStr {
    fn from(s: String) -> Self {
        FixedStr(s.into_bytes())
    }
}

impl PartialEq<&str> for FixedStr {
    fn eq(&self, other: &&str) -> bool {
        self.text() == *other
    }
}

impl fmt::Display for FixedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_survive_and_print_up_to_the_nul() {
        let raw = [b'a', 0x80, b'b', 0, b'x', 0, 0, 0];
        let mut r = Reader::new(&raw);
        let s = FixedStr::read(&mut r, 8).unwrap();
        assert_eq!(s.text(), "a\u{FFFD}b");
        let mut w = Writer::new();
        s.write(&mut w, 8);
        assert_eq!(w.into_vec(), raw.to_vec());
    }
}
