//! Byte-level reading and writing shared by every OpenFlow type.
//!
//! `Reader` never panics: every getter checks the remaining length and returns
//! [`DecodeError::Truncated`]. `Writer` reserves length fields with `place_*`
//! and fills them in with `replace_*` once the body is written, so no struct
//! stores a length or padding (hickory `place/replace` discipline).

use crate::error::DecodeError;

/// A checked cursor over an input buffer.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `buf` from its start.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not yet consumed.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// True when every byte was consumed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Offset of the cursor from the start of the buffer.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        match self.pos.checked_add(n).filter(|&e| e <= self.buf.len()) {
            Some(end) => {
                let out = &self.buf[self.pos..end];
                self.pos = end;
                Ok(out)
            }
            None => Err(truncated(n, self.remaining())),
        }
    }

    /// Takes the next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// Looks at the next `n` bytes without consuming them.
    #[inline]
    pub fn peek(&self, n: usize) -> Result<&'a [u8], DecodeError> {
        self.clone().take(n)
    }

    /// Reads a `u8`.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    /// Reads a big-endian `u16`.
    #[inline]
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// Reads a big-endian `u64`.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// Reads `n` bytes (at most 16) as a big-endian unsigned integer.
    #[inline]
    pub fn uint(&mut self, n: usize) -> Result<u128, DecodeError> {
        Ok(match n {
            1 => u128::from(self.u8()?),
            2 => u128::from(self.u16()?),
            4 => u128::from(self.u32()?),
            8 => u128::from(self.u64()?),
            16 => u128::from_be_bytes(self.array()?),
            n if n < 16 => self
                .take(n)?
                .iter()
                .fold(0u128, |acc, &b| (acc << 8) | u128::from(b)),
            n => {
                return Err(DecodeError::BadLength {
                    what: "integer",
                    len: n,
                });
            }
        })
    }

    /// The unread bytes, without consuming them.
    #[inline]
    pub(crate) fn unread(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Counts the records in the unread bytes, where `len_of(record)` gives a
    /// record's total length from its first bytes (`None` when too short).
    /// Stops at the first record shorter than `min` (the smallest valid one)
    /// or longer than what is left; the decoder then reports it. Used to size
    /// a `Vec` exactly before decoding into it, so the count (and the memory
    /// reserved) is at most `remaining / min`, whatever the input.
    #[inline]
    pub(crate) fn count_records(
        &self,
        min: usize,
        len_of: impl Fn(&[u8]) -> Option<usize>,
    ) -> usize {
        let mut rest = self.unread();
        let mut n = 0;
        while let Some(len) = len_of(rest).filter(|&l| l >= min.max(1) && l <= rest.len()) {
            rest = &rest[len..];
            n += 1;
        }
        n
    }

    /// Skips `n` bytes of padding, which must all be zero.
    #[inline]
    pub fn pad(&mut self, n: usize, what: &'static str) -> Result<(), DecodeError> {
        if self.take(n)?.iter().any(|&b| b != 0) {
            return Err(DecodeError::BadPadding(what));
        }
        Ok(())
    }

    /// Splits off a sub-reader over the next `n` bytes.
    #[inline]
    pub fn sub(&mut self, n: usize) -> Result<Reader<'a>, DecodeError> {
        Ok(Reader::new(self.take(n)?))
    }

    /// Takes every remaining byte.
    #[inline]
    pub fn rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// Fails with [`DecodeError::TrailingData`] unless every byte was consumed.
    #[inline]
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(DecodeError::TrailingData(n)),
        }
    }
}

/// A fixed-size header already read with one bounds check
/// ([`Reader::array`]), with big-endian getters at offsets. Callers pass
/// constant offsets inside `N`, so the input cannot make a getter panic, and
/// the compiler drops the index checks.
#[derive(Clone, Copy)]
pub(crate) struct Fixed<const N: usize>(pub(crate) [u8; N]);

impl<const N: usize> Fixed<N> {
    #[inline(always)]
    pub(crate) fn u8(&self, at: usize) -> u8 {
        self.0[at]
    }

    #[inline(always)]
    pub(crate) fn u16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.0[at], self.0[at + 1]])
    }

    #[inline(always)]
    pub(crate) fn u32(&self, at: usize) -> u32 {
        u32::from_be_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }

    #[inline(always)]
    pub(crate) fn u64(&self, at: usize) -> u64 {
        (u64::from(self.u32(at)) << 32) | u64::from(self.u32(at + 4))
    }
}

/// The length of an action or instruction TLV (`ofp_action_header`,
/// `ofp_instruction`: type, then a 16-bit total length), for
/// [`Reader::count_records`].
#[inline]
pub(crate) fn tlv_len(b: &[u8]) -> Option<usize> {
    match b {
        [_, _, hi, lo, ..] => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

/// Builds a truncation error off the hot path.
#[cold]
#[inline(never)]
fn truncated(needed: usize, available: usize) -> DecodeError {
    DecodeError::Truncated { needed, available }
}

/// A reserved 16-bit length field, filled in later with [`Writer::replace_u16`].
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct Place16(usize);

/// An output buffer.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    #[inline]
    pub fn new() -> Self {
        Writer { buf: Vec::new() }
    }

    /// Appends to an existing buffer.
    #[inline]
    pub fn from_vec(buf: Vec<u8>) -> Self {
        Writer { buf }
    }

    /// Forgets the contents, keeping the allocation.
    #[inline]
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Bytes written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True if nothing was written.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The written bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// Returns the buffer.
    #[inline]
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Appends a `u8`.
    #[inline]
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends a big-endian `u16`.
    #[inline]
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends a big-endian `u32`.
    #[inline]
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends a big-endian `u64`.
    #[inline]
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Appends the low `n` bytes (at most 16) of `v`, big-endian.
    #[inline]
    pub fn uint(&mut self, v: u128, n: usize) {
        let bytes = v.to_be_bytes();
        let n = n.min(16);
        self.buf.extend_from_slice(&bytes[16 - n..]);
    }

    /// Appends raw bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Appends `n` zero bytes.
    #[inline]
    pub fn zeros(&mut self, n: usize) {
        self.buf.resize(self.buf.len() + n, 0);
    }

    /// Pads with zeros up to a multiple of `align` measured from `start`.
    #[inline]
    pub fn pad_to(&mut self, start: usize, align: usize) {
        let len = self.buf.len() - start;
        self.zeros(len.next_multiple_of(align) - len);
    }

    /// Reserves a 16-bit length field.
    #[inline]
    pub fn place_u16(&mut self) -> Place16 {
        let at = self.buf.len();
        self.u16(0);
        Place16(at)
    }

    /// Fills a reserved field. Values above 65,535 saturate; the message
    /// encoder rejects such messages as a whole.
    #[inline]
    pub fn replace_u16(&mut self, place: Place16, v: usize) {
        let v = u16::try_from(v).unwrap_or(u16::MAX).to_be_bytes();
        if let Some(slot) = self.buf.get_mut(place.0..place.0 + 2) {
            slot.copy_from_slice(&v);
        }
    }

    /// Fills a reserved field with the number of bytes written since `start`.
    #[inline]
    pub fn fill_len(&mut self, place: Place16, start: usize) {
        let len = self.buf.len() - start;
        self.replace_u16(place, len);
    }
}

#[cfg(test)]
mod tests {
    use super::{Fixed, Reader, tlv_len};

    #[test]
    fn count_records_stops_at_short_or_overlong_records() {
        // Two 8-byte TLVs, then one claiming 1 byte.
        let b = [
            0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0,
        ];
        let r = Reader::new(&b);
        assert_eq!(r.count_records(8, tlv_len), 2);
        // Without a minimum, the 1-byte claim would count.
        assert_eq!(r.count_records(1, tlv_len), 3);
        // A record longer than what is left is not counted.
        assert_eq!(Reader::new(&b[..12]).count_records(8, tlv_len), 1);
        // Zero-length records never loop.
        assert_eq!(Reader::new(&[0u8; 8]).count_records(0, tlv_len), 0);
        assert_eq!(Reader::new(&[]).count_records(8, tlv_len), 0);
    }

    #[test]
    fn fixed_reads_big_endian() {
        let h = Fixed([1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(h.u8(0), 1);
        assert_eq!(h.u16(1), 0x0203);
        assert_eq!(h.u32(1), 0x0203_0405);
        assert_eq!(h.u64(1), 0x0203_0405_0607_0809);
    }
}
