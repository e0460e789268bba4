//! Splits the received byte stream into whole OpenFlow messages using the header's length
//! field (OF1.3 §7.1 `struct ofp_header`).

use crate::msg::HEADER_LEN;

use super::error::SessionError;

/// Buffers received bytes until whole messages are available.
#[derive(Debug, Default)]
pub(crate) struct Framer {
    buf: Vec<u8>,
    /// Start of the first unconsumed byte in `buf`.
    start: usize,
}

impl Framer {
    /// Appends received bytes.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
    }

    /// The next whole message, `Ok(None)` if more bytes are needed, or an error if the header
    /// cannot be framed (after which the stream is unusable).
    pub(crate) fn next_frame(&mut self) -> Result<Option<&[u8]>, SessionError> {
        let pending = self.buf.get(self.start..).unwrap_or_default();
        let Some(header) = pending.get(..HEADER_LEN) else {
            self.compact();
            return Ok(None);
        };
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        if len < HEADER_LEN {
            let xid = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
            return Err(SessionError::BadLength {
                len,
                msg_type: header[1],
                xid,
            });
        }
        if pending.len() < len {
            self.compact();
            return Ok(None);
        }
        let at = self.start;
        self.start += len;
        Ok(self.buf.get(at..at + len))
    }

    /// Bytes of an incomplete message still buffered.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Drops consumed bytes once they are the larger part of the buffer.
    fn compact(&mut self) {
        if self.start > 0 && self.start * 2 >= self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_and_joined_messages() {
        let mut f = Framer::default();
        let a = [4u8, 2, 0, 8, 0, 0, 0, 1];
        let b = [4u8, 3, 0, 10, 0, 0, 0, 2, 0xaa, 0xbb];
        f.push(&a[..5]);
        assert_eq!(f.next_frame(), Ok(None));
        f.push(&a[5..]);
        f.push(&b[..9]);
        assert_eq!(f.next_frame(), Ok(Some(&a[..])));
        assert_eq!(f.next_frame(), Ok(None));
        assert_eq!(f.buffered(), 9);
        f.push(&b[9..]);
        assert_eq!(f.next_frame(), Ok(Some(&b[..])));
        assert_eq!(f.next_frame(), Ok(None));
        assert_eq!(f.buffered(), 0);
    }

    #[test]
    fn short_length_field_is_an_error() {
        let mut f = Framer::default();
        f.push(&[4, 0, 0, 4, 0, 0, 0, 9]);
        assert_eq!(
            f.next_frame(),
            Err(SessionError::BadLength {
                len: 4,
                msg_type: 0,
                xid: 9
            })
        );
    }
}
