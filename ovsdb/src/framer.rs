//! Streaming JSON message framer (RFC 7047 §4: messages are JSON objects sent back to back).
//!
//! ovsdb-server writes JSON-RPC messages without separators, so the framer tracks string,
//! escape and nesting state to find where each top-level value ends. It enforces a maximum
//! message size and a maximum nesting depth *while* scanning, so hostile input never makes it
//! buffer more than `max_message_size` bytes or recurse at all (the scanner is iterative).
//!
//! Guarantee: `push` never panics, whatever the bytes; after an error the framer is poisoned
//! and every later call returns the same error.

use std::collections::VecDeque;

/// Limits applied by the framer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramerLimits {
    /// Largest accepted message, in bytes.
    pub max_message_size: usize,
    /// Deepest accepted nesting of objects and arrays (the outer object counts as 1).
    pub max_depth: usize,
}

impl Default for FramerLimits {
    fn default() -> Self {
        // A full dump of a 10k-port Open_vSwitch database is a few MB; 64 MiB leaves room.
        FramerLimits {
            max_message_size: 64 << 20,
            max_depth: 64,
        }
    }
}

/// Why the byte stream cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A message grew beyond [`FramerLimits::max_message_size`].
    #[error("message exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// Objects/arrays nested deeper than [`FramerLimits::max_depth`].
    #[error("message nested deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// A top-level value was not a JSON object (RFC 7047 §4 messages are objects).
    #[error("unexpected byte 0x{byte:02x} between messages")]
    NotAnObject { byte: u8 },
    /// A closing bracket did not match the opening one.
    #[error("mismatched bracket 0x{byte:02x}")]
    Mismatched { byte: u8 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Between messages: only whitespace or `{` allowed.
    Idle,
    /// Inside a message, outside any string.
    Value,
    /// Inside a string.
    Str,
    /// Inside a string, right after a backslash.
    Escape,
}

/// Splits a byte stream into complete top-level JSON objects.
#[derive(Debug)]
pub struct Framer {
    limits: FramerLimits,
    buf: Vec<u8>,
    /// Stack of open brackets as bits: 1 = `{`, 0 = `[`; length is the depth.
    stack: Vec<bool>,
    scan: Scan,
    ready: VecDeque<Vec<u8>>,
    error: Option<FrameError>,
}

impl Framer {
    /// A framer with the given limits.
    pub fn new(limits: FramerLimits) -> Self {
        Framer {
            limits,
            buf: Vec::new(),
            stack: Vec::new(),
            scan: Scan::Idle,
            ready: VecDeque::new(),
            error: None,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> FramerLimits {
        self.limits
    }

    /// Feeds bytes. Complete messages become available through [`Framer::next_message`].
    pub fn push(&mut self, data: &[u8]) -> Result<(), FrameError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let r = self.scan_bytes(data);
        if let Err(e) = &r {
            self.error = Some(e.clone());
            self.buf = Vec::new();
            self.stack = Vec::new();
        }
        r
    }

    fn scan_bytes(&mut self, data: &[u8]) -> Result<(), FrameError> {
        let mut start = 0usize; // start of the not-yet-copied slice of `data`
        let mut i = 0usize;
        while i < data.len() {
            let b = data[i];
            match self.scan {
                Scan::Idle => match b {
                    b' ' | b'\t' | b'\r' | b'\n' => start = i + 1,
                    b'{' => {
                        self.scan = Scan::Value;
                        self.stack.push(true);
                        start = i;
                        self.check_depth()?;
                    }
                    _ => return Err(FrameError::NotAnObject { byte: b }),
                },
                Scan::Str => {
                    // Fast path: skip ordinary string bytes.
                    match memchr2(b'"', b'\\', &data[i..]) {
                        Some(off) => {
                            i += off;
                            self.scan = if data[i] == b'"' {
                                Scan::Value
                            } else {
                                Scan::Escape
                            };
                        }
                        None => i = data.len() - 1,
                    }
                }
                Scan::Escape => self.scan = Scan::Str,
                Scan::Value => match b {
                    b'"' => self.scan = Scan::Str,
                    b'{' | b'[' => {
                        self.stack.push(b == b'{');
                        self.check_depth()?;
                    }
                    b'}' | b']' => {
                        let want_obj = b == b'}';
                        match self.stack.pop() {
                            Some(open) if open == want_obj => {}
                            _ => return Err(FrameError::Mismatched { byte: b }),
                        }
                        if self.stack.is_empty() {
                            let piece = &data[start..=i];
                            self.check_size(piece.len())?;
                            let mut msg = std::mem::take(&mut self.buf);
                            msg.extend_from_slice(piece);
                            self.ready.push_back(msg);
                            self.scan = Scan::Idle;
                            start = i + 1;
                        }
                    }
                    _ => {}
                },
            }
            // Enforce the size limit as we go, not only at the end of a message.
            if self.scan != Scan::Idle {
                self.check_size(i + 1 - start)?;
            }
            i += 1;
        }
        if self.scan != Scan::Idle && start < data.len() {
            self.buf.extend_from_slice(&data[start..]);
        }
        Ok(())
    }

    fn check_depth(&self) -> Result<(), FrameError> {
        if self.stack.len() > self.limits.max_depth {
            Err(FrameError::TooDeep {
                limit: self.limits.max_depth,
            })
        } else {
            Ok(())
        }
    }

    fn check_size(&self, pending_in_data: usize) -> Result<(), FrameError> {
        if self.buf.len().saturating_add(pending_in_data) > self.limits.max_message_size {
            Err(FrameError::TooLarge {
                limit: self.limits.max_message_size,
            })
        } else {
            Ok(())
        }
    }

    /// The next complete message, if any.
    pub fn next_message(&mut self) -> Option<Vec<u8>> {
        self.ready.pop_front()
    }

    /// Bytes buffered for an incomplete message.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Whether the stream ended inside a message (an unterminated message at EOF).
    pub fn mid_message(&self) -> bool {
        self.scan != Scan::Idle
    }

    /// Forgets all state, e.g. for a new connection.
    pub fn reset(&mut self) {
        *self = Framer::new(self.limits);
    }
}

fn memchr2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&c| c == a || c == b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(limits: FramerLimits, chunks: &[&[u8]]) -> Result<Vec<String>, FrameError> {
        let mut f = Framer::new(limits);
        let mut out = Vec::new();
        for c in chunks {
            f.push(c)?;
            while let Some(m) = f.next_message() {
                out.push(String::from_utf8(m).unwrap());
            }
        }
        Ok(out)
    }

    #[test]
    fn splits_back_to_back_messages() {
        let input = br#"{"id":1,"result":[]}{"id":2,"result":{"a":"}{]["}} {"x":"\"}"}"#;
        let got = frames(FramerLimits::default(), &[input]).unwrap();
        assert_eq!(
            got,
            vec![
                r#"{"id":1,"result":[]}"#,
                r#"{"id":2,"result":{"a":"}{]["}}"#,
                r#"{"x":"\"}"}"#
            ]
        );
    }

    #[test]
    fn every_split_point_gives_same_frames() {
        let input: &[u8] = br#"{"a":"\\","b":["\"",{"c":[]}]}{"d":"\u00e9"}"#;
        let whole = frames(FramerLimits::default(), &[input]).unwrap();
        assert_eq!(whole.len(), 2);
        for cut in 0..input.len() {
            let (a, b) = input.split_at(cut);
            assert_eq!(
                frames(FramerLimits::default(), &[a, b]).unwrap(),
                whole,
                "cut {cut}"
            );
        }
        // one byte at a time
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(frames(FramerLimits::default(), &bytes).unwrap(), whole);
    }

    #[test]
    fn rejects_garbage_between_messages() {
        assert_eq!(
            frames(FramerLimits::default(), &[b"\x00\xff garbage"]),
            Err(FrameError::NotAnObject { byte: 0 })
        );
        assert_eq!(
            frames(FramerLimits::default(), &[b"[1,2]"]),
            Err(FrameError::NotAnObject { byte: b'[' })
        );
    }

    #[test]
    fn rejects_mismatched_brackets() {
        assert_eq!(
            frames(FramerLimits::default(), &[b"{]"]),
            Err(FrameError::Mismatched { byte: b']' })
        );
    }

    #[test]
    fn depth_limit() {
        let limits = FramerLimits {
            max_message_size: 1 << 20,
            max_depth: 4,
        };
        assert!(frames(limits, &[br#"{"a":[[{"b":1}]]}"#]).is_ok());
        assert_eq!(
            frames(limits, &[br#"{"a":[[[{"b":1}]]]}"#]),
            Err(FrameError::TooDeep { limit: 4 })
        );
        // Brackets inside strings do not count.
        assert!(frames(limits, &[br#"{"a":"[[[[[[[[[[[["}"#]).is_ok());
    }

    #[test]
    fn size_limit_is_enforced_while_streaming() {
        let limits = FramerLimits {
            max_message_size: 16,
            max_depth: 8,
        };
        let mut f = Framer::new(limits);
        f.push(br#"{"a":"01234"#).unwrap();
        assert_eq!(
            f.push(b"56789abcdef"),
            Err(FrameError::TooLarge { limit: 16 })
        );
        assert_eq!(f.buffered(), 0);
        // Poisoned afterwards.
        assert!(f.push(b"{}").is_err());
        // Exactly at the limit is fine.
        let ok = br#"{"a":"012345678"}"#;
        assert_eq!(ok.len(), 17);
        let limits = FramerLimits {
            max_message_size: 17,
            max_depth: 8,
        };
        assert_eq!(frames(limits, &[ok]).unwrap().len(), 1);
    }

    #[test]
    fn unterminated_is_mid_message() {
        let mut f = Framer::new(FramerLimits::default());
        f.push(br#"{"a":"x"#).unwrap();
        assert!(f.mid_message());
        assert!(f.next_message().is_none());
        f.reset();
        assert!(!f.mid_message());
    }
}

#[cfg(test)]
mod random_tests {
    //! Deterministic pseudo-random inputs: the framer agrees with serde_json on valid streams
    //! split anywhere, and never panics on noise.
    use super::*;
    use serde_json::{Value, json};

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn value(r: &mut Lcg, depth: u32) -> Value {
        let pick = if depth == 0 { r.below(4) } else { r.below(6) };
        match pick {
            0 => json!(r.next() as i64 - (1 << 30)),
            1 => json!(r.below(2) == 1),
            2 => Value::Null,
            3 => {
                let chars = ['a', '"', '\\', '{', '}', '[', ']', 'é', '\n', '\u{1}', '/'];
                let s: String = (0..r.below(12))
                    .map(|_| chars[r.below(chars.len() as u64) as usize])
                    .collect();
                json!(s)
            }
            4 => Value::Array((0..r.below(4)).map(|_| value(r, depth - 1)).collect()),
            _ => Value::Object(
                (0..r.below(4))
                    .map(|i| (format!("k{i}\"}}"), value(r, depth - 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn valid_streams_split_anywhere() {
        let mut r = Lcg(7);
        for _ in 0..300 {
            let msgs: Vec<Value> = (0..1 + r.below(5))
                .map(|_| json!({"id": r.next(), "v": value(&mut r, 5)}))
                .collect();
            let mut bytes = Vec::new();
            for m in &msgs {
                bytes.extend(serde_json::to_vec(m).unwrap());
                if r.below(3) == 0 {
                    bytes.extend(b" \n");
                }
            }
            let mut f = Framer::new(FramerLimits::default());
            let mut got = Vec::new();
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let n = (1 + r.below(40) as usize).min(rest.len());
                f.push(&rest[..n]).unwrap();
                rest = &rest[n..];
                while let Some(m) = f.next_message() {
                    got.push(serde_json::from_slice::<Value>(&m).unwrap());
                }
            }
            assert_eq!(got, msgs);
            assert!(!f.mid_message());
        }
    }

    #[test]
    fn noise_never_panics_and_stays_bounded() {
        let mut r = Lcg(11);
        let limits = FramerLimits {
            max_message_size: 4096,
            max_depth: 16,
        };
        for _ in 0..2000 {
            let mut f = Framer::new(limits);
            let alphabet = b"{}[]\"\\ ax:,0\xff";
            for _ in 0..r.below(50) {
                let chunk: Vec<u8> = (0..r.below(200))
                    .map(|_| alphabet[r.below(alphabet.len() as u64) as usize])
                    .collect();
                if f.push(&chunk).is_err() {
                    break;
                }
                assert!(f.buffered() <= limits.max_message_size);
                while let Some(m) = f.next_message() {
                    let _ = crate::jsonrpc::Message::parse(&m);
                }
            }
        }
    }
}
