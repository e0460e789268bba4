//! The common name in a certificate's subject: a node's identity, as OVN's chassis
//! certificates carry it (`ovs-pki -u req+sign NODE switch` makes `CN = NODE`).
//!
//! A minimal DER reader, pure: it walks `Certificate → tbsCertificate → subject` (RFC 5280
//! §4.1) and nothing else. Every read is checked against what is left of its enclosing value,
//! so a hostile certificate costs one pass over its bytes and ends in a [`NameError`]; the
//! certificate has been verified against the CA before its name is read.

use thiserror::Error;

/// Why a certificate's common name could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    /// The DER does not parse where the subject should be.
    #[error("the certificate does not parse: {0}")]
    Malformed(&'static str),
    /// The subject has no common name.
    #[error("the certificate's subject has no common name")]
    Missing,
    /// The subject has more than one, so which one names the peer is ambiguous.
    #[error("the certificate's subject has more than one common name")]
    Ambiguous,
    /// The common name is not a printable UTF-8 string of at most [`MAX_NAME`] bytes.
    #[error("the certificate's common name is not printable text of at most 64 bytes")]
    Unprintable,
}

/// The longest common name accepted (X.520 `ub-common-name`).
pub const MAX_NAME: usize = 64;

/// `id-at-commonName`, 2.5.4.3, as DER content octets.
const OID_COMMON_NAME: [u8; 3] = [0x55, 0x04, 0x03];

mod tag {
    pub const INTEGER: u8 = 0x02;
    pub const OID: u8 = 0x06;
    pub const UTF8_STRING: u8 = 0x0c;
    pub const PRINTABLE_STRING: u8 = 0x13;
    pub const IA5_STRING: u8 = 0x16;
    pub const SEQUENCE: u8 = 0x30;
    pub const SET: u8 = 0x31;
    /// `[0] EXPLICIT`, the certificate's version.
    pub const VERSION: u8 = 0xa0;
}

/// A cursor over DER values.
struct Der<'a> {
    rest: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Der { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn peek_tag(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    /// The next value: its tag and its content. Only single-byte tags and definite lengths
    /// of up to four bytes (DER never needs more for a certificate).
    fn next(&mut self) -> Result<(u8, &'a [u8]), NameError> {
        let (&tag, rest) = self
            .rest
            .split_first()
            .ok_or(NameError::Malformed("truncated"))?;
        if tag & 0x1f == 0x1f {
            return Err(NameError::Malformed("multi-byte tag"));
        }
        let (&first, mut rest) = rest
            .split_first()
            .ok_or(NameError::Malformed("truncated length"))?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let n = usize::from(first & 0x7f);
            if n == 0 || n > 4 {
                return Err(NameError::Malformed("unsupported length"));
            }
            let (bytes, after) = rest
                .split_at_checked(n)
                .ok_or(NameError::Malformed("truncated length"))?;
            rest = after;
            bytes
                .iter()
                .fold(0usize, |acc, &b| (acc << 8) | usize::from(b))
        };
        let (content, after) = rest
            .split_at_checked(len)
            .ok_or(NameError::Malformed("length beyond the data"))?;
        self.rest = after;
        Ok((tag, content))
    }

    /// The next value, which must have `tag`.
    fn expect(&mut self, want: u8, what: &'static str) -> Result<&'a [u8], NameError> {
        match self.next()? {
            (tag, content) if tag == want => Ok(content),
            _ => Err(NameError::Malformed(what)),
        }
    }
}

/// The subject's common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Result<String, NameError> {
    let mut outer = Der::new(der);
    let cert = outer.expect(tag::SEQUENCE, "not a certificate")?;
    let mut cert = Der::new(cert);
    let mut tbs = Der::new(cert.expect(tag::SEQUENCE, "no tbsCertificate")?);
    if tbs.peek_tag() == Some(tag::VERSION) {
        tbs.next()?;
    }
    tbs.expect(tag::INTEGER, "no serial number")?;
    tbs.expect(tag::SEQUENCE, "no signature algorithm")?;
    tbs.expect(tag::SEQUENCE, "no issuer")?;
    tbs.expect(tag::SEQUENCE, "no validity")?;
    let mut subject = Der::new(tbs.expect(tag::SEQUENCE, "no subject")?);
    let mut found: Option<&[u8]> = None;
    let mut found_tag = 0;
    while !subject.is_empty() {
        let mut rdn = Der::new(subject.expect(tag::SET, "a subject entry is not a SET")?);
        while !rdn.is_empty() {
            let mut attribute =
                Der::new(rdn.expect(tag::SEQUENCE, "an attribute is not a SEQUENCE")?);
            let oid = attribute.expect(tag::OID, "an attribute has no type")?;
            let (value_tag, value) = attribute.next()?;
            if oid == OID_COMMON_NAME {
                if found.is_some() {
                    return Err(NameError::Ambiguous);
                }
                found = Some(value);
                found_tag = value_tag;
            }
        }
    }
    let value = found.ok_or(NameError::Missing)?;
    if !matches!(
        found_tag,
        tag::UTF8_STRING | tag::PRINTABLE_STRING | tag::IA5_STRING
    ) || value.len() > MAX_NAME
    {
        return Err(NameError::Unprintable);
    }
    let name = std::str::from_utf8(value).map_err(|_| NameError::Unprintable)?;
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(NameError::Unprintable);
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_with(dn: rcgen::DistinguishedName) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn;
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn dn(entries: &[(rcgen::DnType, &str)]) -> rcgen::DistinguishedName {
        let mut dn = rcgen::DistinguishedName::new();
        for (t, v) in entries {
            dn.push(t.clone(), *v);
        }
        dn
    }

    #[test]
    fn reads_the_common_name_among_other_attributes() {
        let der = cert_with(dn(&[
            (rcgen::DnType::CountryName, "US"),
            (rcgen::DnType::OrganizationName, "Open vSwitch"),
            (rcgen::DnType::OrganizationalUnitName, "switch"),
            (rcgen::DnType::CommonName, "n1"),
        ]));
        assert_eq!(common_name(&der), Ok("n1".to_string()));
    }

    #[test]
    fn a_subject_without_one_or_with_an_unprintable_one_is_refused() {
        let der = cert_with(dn(&[(rcgen::DnType::OrganizationName, "x")]));
        assert_eq!(common_name(&der), Err(NameError::Missing));
        let der = cert_with(dn(&[(rcgen::DnType::CommonName, "n1\u{7}")]));
        assert_eq!(common_name(&der), Err(NameError::Unprintable));
        let long = "n".repeat(MAX_NAME + 1);
        let der = cert_with(dn(&[(rcgen::DnType::CommonName, &long)]));
        assert_eq!(common_name(&der), Err(NameError::Unprintable));
    }

    #[test]
    fn two_common_names_are_ambiguous() {
        // rcgen keeps one value per type; build the second by hand from a real certificate:
        // swap the organization's OID for the common name's, in the subject (the last of the
        // two names: this certificate's issuer is itself).
        let der = cert_with(dn(&[
            (rcgen::DnType::OrganizationName, "n2"),
            (rcgen::DnType::CommonName, "n1"),
        ]));
        let org = [0x06, 0x03, 0x55, 0x04, 0x0a];
        let at = der
            .windows(org.len())
            .rposition(|w| w == org)
            .expect("organization OID");
        let mut twice = der.clone();
        twice[at + 4] = 0x03;
        assert_eq!(common_name(&twice), Err(NameError::Ambiguous));
    }

    #[test]
    fn every_truncation_and_byte_flip_ends_in_a_value_or_an_error() {
        let der = cert_with(dn(&[(rcgen::DnType::CommonName, "node-1")]));
        for cut in 0..der.len() {
            assert!(common_name(&der[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..der.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut bad = der.clone();
                bad[i] ^= flip;
                let _ = common_name(&bad);
            }
        }
        assert!(common_name(&[]).is_err());
        assert!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
