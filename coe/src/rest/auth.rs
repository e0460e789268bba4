//! Credentials for HTTP basic auth and bearer tokens, read from a file.
//!
//! The file holds one credential a line; blank lines and lines starting with `#` are skipped
//! (there are no trailing comments: a password is the rest of its line, inner spaces
//! included, outer spaces trimmed):
//!
//! ```text
//! basic admin s3cret
//! bearer 9f2c0e3a51d84b…
//! ```

use std::path::{Path, PathBuf};

use base64::Engine;

/// Why the credentials file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// It cannot be read.
    #[error("credentials file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A line is not `basic <user> <password>` or `bearer <token>`.
    #[error("credentials file {path}, line {line}: {reason}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// It holds no credentials, so nobody could log in.
    #[error("credentials file {0} holds no credentials")]
    Empty(PathBuf),
}

/// The accepted credentials.
#[derive(Clone, Default)]
pub struct Credentials {
    basic: Vec<(String, String)>,
    bearer: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field(
                "basic_users",
                &self.basic.iter().map(|(u, _)| u).collect::<Vec<_>>(),
            )
            .field("bearer_tokens", &self.bearer.len())
            .finish()
    }
}

impl Credentials {
    /// Reads a credentials file.
    pub fn load(path: &Path) -> Result<Self, AuthFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text).map_err(|e| match e {
            ParseError::Line(line, reason) => AuthFileError::Syntax {
                path: path.to_path_buf(),
                line,
                reason,
            },
            ParseError::Empty => AuthFileError::Empty(path.to_path_buf()),
        })
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut creds = Self::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| ParseError::Line(i + 1, reason.to_string());
            let (kind, rest) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| bad("expected `basic <user> <password>` or `bearer <token>`"))?;
            let rest = rest.trim_start();
            match kind {
                "basic" => {
                    let (user, password) = rest
                        .split_once(char::is_whitespace)
                        .ok_or_else(|| bad("expected `basic <user> <password>`"))?;
                    if user.contains(':') {
                        return Err(bad("a basic-auth user name cannot contain `:`"));
                    }
                    creds
                        .basic
                        .push((user.to_string(), password.trim_start().to_string()));
                }
                "bearer" if !rest.is_empty() && !rest.contains(char::is_whitespace) => {
                    creds.bearer.push(rest.to_string());
                }
                "bearer" => return Err(bad("expected `bearer <token>`, the token without spaces")),
                _ => {
                    return Err(bad(
                        "expected `basic <user> <password>` or `bearer <token>`",
                    ));
                }
            }
        }
        if creds.basic.is_empty() && creds.bearer.is_empty() {
            return Err(ParseError::Empty);
        }
        Ok(creds)
    }

    /// Whether an `Authorization` header value carries valid credentials.
    pub fn check(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization.and_then(|v| std::str::from_utf8(v).ok()) else {
            return false;
        };
        let Some((scheme, rest)) = value.trim().split_once(' ') else {
            return false;
        };
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest) else {
                return false;
            };
            let Some(colon) = decoded.iter().position(|b| *b == b':') else {
                return false;
            };
            let (user, password) = (&decoded[..colon], &decoded[colon + 1..]);
            // Compare against every entry, so timing does not reveal which one matched.
            self.basic.iter().fold(false, |ok, (u, p)| {
                (ct_eq(u.as_bytes(), user) & ct_eq(p.as_bytes(), password)) | ok
            })
        } else if scheme.eq_ignore_ascii_case("bearer") {
            self.bearer
                .iter()
                .fold(false, |ok, t| ct_eq(t.as_bytes(), rest.as_bytes()) | ok)
        } else {
            false
        }
    }
}

/// Why a credentials text is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Line number (from 1) and reason.
    Line(usize, String),
    /// No credentials at all.
    Empty,
}

/// Compares two byte strings in time that depends only on their lengths.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user_pass: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_pass)
        )
        .into_bytes()
    }

    #[test]
    fn parses_and_checks_both_schemes() {
        let c = Credentials::parse("# comment\n\nbasic admin pa ss:word\nbearer tok3n\n").unwrap();
        assert!(c.check(Some(&basic("admin:pa ss:word"))));
        assert!(!c.check(Some(&basic("admin:wrong"))));
        assert!(!c.check(Some(&basic("root:pa ss:word"))));
        assert!(c.check(Some(b"Bearer tok3n")));
        assert!(c.check(Some(b"bearer tok3n")));
        assert!(!c.check(Some(b"Bearer tok3")));
        assert!(!c.check(Some(b"Basic !!!")));
        assert!(!c.check(Some(b"Digest x")));
        assert!(!c.check(None));
    }

    #[test]
    fn rejects_bad_lines_and_empty_files() {
        assert_eq!(
            Credentials::parse("# only\n").unwrap_err(),
            ParseError::Empty
        );
        assert!(matches!(
            Credentials::parse("basic admin\n"),
            Err(ParseError::Line(1, _))
        ));
        assert!(matches!(
            Credentials::parse("bearer\n"),
            Err(ParseError::Line(1, _))
        ));
        assert!(matches!(
            Credentials::parse("\ntoken abc\n"),
            Err(ParseError::Line(2, _))
        ));
    }
}
