//! `svcflow ofp print`: decode OpenFlow 1.3 messages given in hex and print them as
//! `ovs-ofctl ofp-print` (Open vSwitch 3.1) does, or check that they re-encode byte for byte.
//!
//! Differences from `ovs-ofctl ofp-print HEX` (see docs/cli.md):
//! - several arguments are one hex input (`ovs-ofctl` takes a verbosity as its second argument);
//! - stdin is read whole (`ovs-ofctl ... -` reads its first line only);
//! - several concatenated messages are each printed (`ovs-ofctl` prints
//!   `(***only uses N bytes out of M***)` and a hex dump of the whole input);
//! - input that is not a valid OF1.3 message is an error with a non-zero exit
//!   (`ovs-ofctl` prints `***decode error: ...***` or a truncation note and exits 0).

use std::fmt;
use std::io::{Read, Write};

use openflow::{DecodeError, EncodeError, Message};

/// Why `svcflow ofp print` could not print its input.
#[derive(Debug)]
pub enum OfpError {
    /// A character that is neither a hex digit nor whitespace.
    BadHexChar {
        /// The character.
        ch: char,
        /// Its position among the input's non-whitespace characters (from 0).
        pos: usize,
    },
    /// An odd number of hex digits.
    OddDigits(usize),
    /// No hex digits at all.
    Empty,
    /// Reading stdin failed.
    Stdin(std::io::Error),
    /// `-` (stdin) given together with other arguments.
    StdinMixed,
    /// Fewer than 8 bytes left where a message header should start.
    ShortHeader {
        /// Index of the message (from 1).
        index: usize,
        /// Byte offset in the input.
        offset: usize,
        /// Bytes left.
        available: usize,
    },
    /// A header whose length field is below the 8-byte header size.
    BadLength {
        /// Index of the message (from 1).
        index: usize,
        /// Byte offset in the input.
        offset: usize,
        /// The length field.
        len: usize,
    },
    /// A header whose length field runs past the end of the input.
    Truncated {
        /// Index of the message (from 1).
        index: usize,
        /// Byte offset in the input.
        offset: usize,
        /// The length field.
        len: usize,
        /// Bytes left.
        available: usize,
    },
    /// A complete message the codec refuses.
    Decode {
        /// Index of the message (from 1).
        index: usize,
        /// Byte offset in the input.
        offset: usize,
        /// What the codec found.
        error: DecodeError,
    },
    /// A decoded message that cannot be encoded again.
    Encode {
        /// Index of the message (from 1).
        index: usize,
        /// What the encoder found.
        error: EncodeError,
    },
    /// A message that re-encodes to different bytes.
    Reencode {
        /// Index of the message (from 1).
        index: usize,
        /// Byte offset in the input.
        offset: usize,
        /// The input bytes, in hex.
        input: String,
        /// The re-encoded bytes, in hex.
        output: String,
    },
}

impl fmt::Display for OfpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OfpError::BadHexChar { ch, pos } => {
                write!(f, "bad hex: {ch:?} at hex digit {pos} is not a hex digit")
            }
            OfpError::OddDigits(n) => {
                write!(f, "bad hex: odd number of hex digits ({n})")
            }
            OfpError::Empty => f.write_str("no hex input"),
            OfpError::Stdin(e) => write!(f, "reading stdin: {e}"),
            OfpError::StdinMixed => f.write_str("'-' (stdin) must be the only argument"),
            OfpError::ShortHeader {
                index,
                offset,
                available,
            } => write!(
                f,
                "message {index} at byte {offset}: truncated header: {available} bytes, \
                 an OpenFlow header needs 8"
            ),
            OfpError::BadLength { index, offset, len } => write!(
                f,
                "message {index} at byte {offset}: bad length {len} in OpenFlow header \
                 (at least 8)"
            ),
            OfpError::Truncated {
                index,
                offset,
                len,
                available,
            } => write!(
                f,
                "message {index} at byte {offset}: truncated: header says {len} bytes, \
                 {available} available"
            ),
            OfpError::Decode {
                index,
                offset,
                error,
            } => write!(
                f,
                "message {index} at byte {offset}: invalid message: {error}"
            ),
            OfpError::Encode { index, error } => {
                write!(f, "message {index}: cannot re-encode: {error}")
            }
            OfpError::Reencode {
                index,
                offset,
                input,
                output,
            } => write!(
                f,
                "message {index} at byte {offset}: re-encoding differs\n  input:     \
                 {input}\n  re-encoded: {output}"
            ),
        }
    }
}

impl std::error::Error for OfpError {}

/// Bytes to lowercase hex, in one run.
pub fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Parses hex digits, ignoring whitespace (spaces, tabs, newlines) anywhere.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, OfpError> {
    let mut digits = Vec::with_capacity(text.len());
    for ch in text.chars().filter(|c| !c.is_whitespace()) {
        let Some(d) = ch.to_digit(16) else {
            return Err(OfpError::BadHexChar {
                ch,
                pos: digits.len(),
            });
        };
        digits.push(d as u8);
    }
    if digits.is_empty() {
        return Err(OfpError::Empty);
    }
    if digits.len() % 2 != 0 {
        return Err(OfpError::OddDigits(digits.len()));
    }
    Ok(digits.chunks(2).map(|p| (p[0] << 4) | p[1]).collect())
}

/// The hex text: the arguments joined, or stdin when there are none or only `-`.
pub fn input_text(args: &[String], stdin: &mut dyn Read) -> Result<String, OfpError> {
    match args {
        [] => read_all(stdin),
        [one] if one == "-" => read_all(stdin),
        _ if args.iter().any(|a| a == "-") => Err(OfpError::StdinMixed),
        _ => Ok(args.join(" ")),
    }
}

fn read_all(stdin: &mut dyn Read) -> Result<String, OfpError> {
    let mut s = String::new();
    stdin.read_to_string(&mut s).map_err(OfpError::Stdin)?;
    Ok(s)
}

/// One message of the input: where it starts, its bytes, and its decoding.
pub struct Frame<'a> {
    /// Byte offset in the input.
    pub offset: usize,
    /// The message's bytes.
    pub bytes: &'a [u8],
    /// The decoded message.
    pub message: Message,
}

/// Splits the input at the header lengths and decodes each message.
pub fn decode_all(bytes: &[u8]) -> Result<Vec<Frame<'_>>, OfpError> {
    let mut frames = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let index = frames.len() + 1;
        let rest = &bytes[offset..];
        let available = rest.len();
        if available < openflow::msg::HEADER_LEN {
            return Err(OfpError::ShortHeader {
                index,
                offset,
                available,
            });
        }
        let len = Message::frame_len(rest).unwrap_or(0);
        if len < openflow::msg::HEADER_LEN {
            return Err(OfpError::BadLength { index, offset, len });
        }
        let Some(frame) = rest.get(..len) else {
            return Err(OfpError::Truncated {
                index,
                offset,
                len,
                available,
            });
        };
        let message = Message::decode(frame).map_err(|error| OfpError::Decode {
            index,
            offset,
            error,
        })?;
        frames.push(Frame {
            offset,
            bytes: frame,
            message,
        });
        offset += len;
    }
    Ok(frames)
}

/// The `ovs-ofctl ofp-print` text of every message in `bytes`, each ending in a newline.
pub fn print(bytes: &[u8]) -> Result<String, OfpError> {
    let mut out = String::new();
    for frame in decode_all(bytes)? {
        out.push_str(frame.message.to_string().trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// Decodes and re-encodes every message in `bytes`; returns the re-encoding in hex,
/// which equals the input, or the first message whose re-encoding differs.
pub fn reencode(bytes: &[u8]) -> Result<String, OfpError> {
    let mut out = Vec::with_capacity(bytes.len());
    for (i, frame) in decode_all(bytes)?.into_iter().enumerate() {
        let again = frame.message.encode().map_err(|error| OfpError::Encode {
            index: i + 1,
            error,
        })?;
        if again != frame.bytes {
            return Err(OfpError::Reencode {
                index: i + 1,
                offset: frame.offset,
                input: hex(frame.bytes),
                output: hex(&again),
            });
        }
        out.extend_from_slice(&again);
    }
    Ok(hex(&out))
}

/// Runs `svcflow ofp print`: writes the text (or, with `reencode`, the hex) to `out`.
pub fn run(
    args: &[String],
    reencode_only: bool,
    stdin: &mut dyn Read,
    out: &mut dyn Write,
) -> Result<(), OfpError> {
    let bytes = parse_hex(&input_text(args, stdin)?)?;
    let text = if reencode_only {
        reencode(&bytes)? + "\n"
    } else {
        print(&bytes)?
    };
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BARRIER: &str = "0414000800000002";

    #[test]
    fn hex_with_whitespace_and_case() {
        assert_eq!(
            parse_hex("04 14\n00\t08 0000000A").unwrap(),
            vec![4, 0x14, 0, 8, 0, 0, 0, 0xa]
        );
    }

    #[test]
    fn bad_hex_is_typed() {
        assert!(matches!(
            parse_hex("04zz"),
            Err(OfpError::BadHexChar { ch: 'z', pos: 2 })
        ));
        assert!(matches!(parse_hex("041"), Err(OfpError::OddDigits(3))));
        assert!(matches!(parse_hex(" \n"), Err(OfpError::Empty)));
        assert!(matches!(
            parse_hex("0x04"),
            Err(OfpError::BadHexChar { ch: 'x', .. })
        ));
    }

    #[test]
    fn args_and_stdin() {
        let mut stdin: &[u8] = b"04 14\n";
        let args = vec!["-".to_string()];
        assert_eq!(input_text(&args, &mut stdin).unwrap(), "04 14\n");
        let mut empty: &[u8] = b"";
        let args = vec!["0414".to_string(), "0008".to_string()];
        assert_eq!(input_text(&args, &mut empty).unwrap(), "0414 0008");
        let args = vec!["0414".to_string(), "-".to_string()];
        assert!(matches!(
            input_text(&args, &mut empty),
            Err(OfpError::StdinMixed)
        ));
    }

    #[test]
    fn several_messages_print_each() {
        let two = parse_hex(&format!("{BARRIER}0415000800000003")).unwrap();
        assert_eq!(
            print(&two).unwrap(),
            "OFPT_BARRIER_REQUEST (OF1.3) (xid=0x2):\nOFPT_BARRIER_REPLY (OF1.3) (xid=0x3):\n"
        );
        assert_eq!(
            reencode(&two).unwrap(),
            format!("{BARRIER}0415000800000003")
        );
    }

    #[test]
    fn framing_errors() {
        let b = parse_hex(&format!("{BARRIER}0414")).unwrap();
        assert!(matches!(
            print(&b),
            Err(OfpError::ShortHeader {
                index: 2,
                offset: 8,
                available: 2
            })
        ));
        let b = parse_hex("0414000400000002").unwrap();
        assert!(matches!(print(&b), Err(OfpError::BadLength { len: 4, .. })));
        let b = parse_hex("0414001000000002").unwrap();
        assert!(matches!(
            print(&b),
            Err(OfpError::Truncated {
                len: 16,
                available: 8,
                ..
            })
        ));
        let b = parse_hex("0914000800000002").unwrap();
        assert!(matches!(
            print(&b),
            Err(OfpError::Decode {
                error: DecodeError::BadVersion(9),
                ..
            })
        ));
    }

    #[test]
    fn every_prefix_and_flip_is_an_error_or_text_never_a_panic() {
        // priority=5,ip actions=drop
        let flow = parse_hex(
            "040e004000000002000000000000000000000000000000000000000000000005ffffffffffffffff\
             ffffffff000000000001000a80000a020800000000000000",
        )
        .unwrap();
        for n in 0..flow.len() {
            let _ = print(&flow[..n]);
            let _ = reencode(&flow[..n]);
        }
        for i in 0..flow.len() {
            for bit in 0..8 {
                let mut b = flow.clone();
                b[i] ^= 1 << bit;
                let _ = print(&b);
                let _ = reencode(&b);
            }
        }
    }
}
