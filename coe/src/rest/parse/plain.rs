//! A reader of plain JSON, without serde, for what a COE body is made of: objects, lists,
//! strings without escapes, non-negative integers, `true`, `false` and `null`.
//!
//! It finds a container body's entries ([`list_entries`]) and reads each entry's tree
//! ([`tree`]). Through serde_json's visitors, finding the entries was a fifth of the parse of
//! a 30,000-service PUT (on one thread, before the entries are read on two), and reading
//! their trees a third; here the two bodies of a 30,000 × 2 load parse in 18 % fewer
//! instructions and about a quarter less time (`docs/performance.md`). It is strict JSON (RFC 8259), and it gives up (`None`) on anything else it meets:
//! a string with an escape or a control character, a number with a sign, a fraction, an
//! exponent, a leading zero or more than 19 digits, nesting deeper than [`DEPTH`], invalid
//! UTF-8, a body of any other shape than one container with its list. What it gives up on
//! is read by the serde path ([`super::stream`]), which reads every JSON text and names
//! what is wrong; what it reads, it reads as that path does (tests hold it to that on
//! mutated bodies and entries). So an error never comes from here.
//!
//! Pure: no I/O.

use std::borrow::Cow;

use super::tree::{Json, Member, Object};
use super::{Kind, bare, join};

/// How deep this reader goes (a COE entry is four levels deep); deeper text goes to
/// serde_json, whose own limit is 128.
const DEPTH: usize = 32;

/// Reads one JSON text as [`Json::parse_str`] does, or gives up.
pub(super) fn tree<'a>(text: &'a str, prefix_len: fn(&str) -> usize) -> Option<Json<'a>> {
    let mut reader = Reader::new(text, prefix_len);
    let value = reader.value()?;
    reader.end().then_some(value)
}

/// The entries of a container body's list, each as its text, with the list's path for
/// errors (as the serde path names it): for a body that is exactly the container holding
/// its list (`{"service:service-information":{"service:services":[…]}}`) or exactly the list
/// (`{"service:services":[…]}`), both all plain JSON. Any other body gives up, even a valid
/// one (another member beside them, an empty object, a `null` list).
pub(super) fn list_entries(kind: Kind, body: &[u8]) -> Option<(String, Vec<&str>)> {
    let text = std::str::from_utf8(body).ok()?;
    let mut reader = Reader::new(text, |_| 0);
    reader.open(b'{')?;
    let name = bare(reader.name()?);
    let found = if name == kind.container() {
        reader.container(kind)?
    } else if name == kind.list() {
        (name.to_string(), reader.entries()?)
    } else {
        return None;
    };
    reader.close(b'}').then_some(())?;
    reader.end().then_some(found)
}

/// [`list_entries`] for one container of a body of the whole datastore, given as its text
/// (`{"service:services":[…]}`).
pub(super) fn container_entries(kind: Kind, text: &str) -> Option<(String, Vec<&str>)> {
    let mut reader = Reader::new(text, |_| 0);
    let found = reader.container(kind)?;
    reader.end().then_some(found)
}

/// Where the first quote, backslash or control character of `bytes` is, if any: eight bytes
/// at a time (as serde_json looks for the end of a string), since strings are most of a COE
/// body's bytes.
fn special(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte's high bit is set in `(x - ONES * n) & !x & HIGH` when it is below `n` (at most
    // 128); bytes above the lowest one so marked may be marked wrongly, the lowest never is.
    fn below(x: u64, n: u8) -> u64 {
        x.wrapping_sub(ONES * u64::from(n)) & !x & HIGH
    }
    let found = |x: u64| {
        below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1)
            | below(x, 0x20)
    };
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in chunks.by_ref() {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let marks = found(u64::from_le_bytes(word));
        if marks != 0 {
            return Some(at + (marks.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .map(|i| at + i)
}

/// Recursive descent over the text; every method gives up with `None`.
struct Reader<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
    prefix_len: fn(&str) -> usize,
}

impl<'a> Reader<'a> {
    fn new(text: &'a str, prefix_len: fn(&str) -> usize) -> Self {
        Self {
            text,
            pos: 0,
            depth: 0,
            prefix_len,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// JSON's whitespace: space, tab, line feed, carriage return.
    fn whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Whether only whitespace is left.
    fn end(&mut self) -> bool {
        self.whitespace();
        self.pos == self.text.len()
    }

    /// `byte`, after whitespace.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.whitespace();
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// Whether `byte` comes next (after whitespace), taking it if so.
    fn close(&mut self, byte: u8) -> bool {
        self.expect(byte).is_some()
    }

    /// An object's or a list's opening `byte`, one level deeper.
    fn open(&mut self, byte: u8) -> Option<()> {
        self.expect(byte)?;
        self.depth += 1;
        (self.depth <= DEPTH).then_some(())
    }

    /// A container object holding only its list: the list's path and its entries.
    fn container(&mut self, kind: Kind) -> Option<(String, Vec<&'a str>)> {
        self.open(b'{')?;
        let list = bare(self.name()?);
        if list != kind.list() {
            return None;
        }
        let entries = self.entries()?;
        self.close(b'}').then_some(())?;
        Some((join(kind.container(), list), entries))
    }

    /// A list's entries, each as its text, checked as [`Reader::value`] reads it.
    fn entries(&mut self) -> Option<Vec<&'a str>> {
        let mut entries = Vec::new();
        self.sequence(b'[', b']', |r| {
            r.whitespace();
            let start = r.pos;
            r.skip()?;
            entries.push(r.text.get(start..r.pos)?);
            Some(())
        })?;
        Some(entries)
    }

    /// An object or a list, from its opening byte `open` to its `close`, one level deeper:
    /// `each` reads a member or an entry, and they are separated by commas.
    fn sequence(
        &mut self,
        open: u8,
        close: u8,
        mut each: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.open(open)?;
        if !self.close(close) {
            loop {
                each(self)?;
                if self.close(close) {
                    break;
                }
                self.expect(b',')?;
            }
        }
        self.depth -= 1;
        Some(())
    }

    /// A member's name and its colon.
    fn name(&mut self) -> Option<&'a str> {
        self.whitespace();
        let name = self.string()?;
        self.expect(b':')?;
        Some(name)
    }

    /// A string without escapes or control characters, at its opening quote, borrowed.
    fn string(&mut self) -> Option<&'a str> {
        let bytes = self.text.as_bytes();
        if bytes.get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let end = start + special(bytes.get(start..)?)?;
        if bytes.get(end) != Some(&b'"') {
            return None;
        }
        self.pos = end + 1;
        // Both ends are ASCII quotes, so the slice lies on character boundaries.
        self.text.get(start..end)
    }

    /// A non-negative integer of at most 19 digits (which always fits a `u64`).
    fn number(&mut self) -> Option<u64> {
        let bytes = self.text.as_bytes();
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            if self.pos - start == 19 {
                return None;
            }
            n = n * 10 + u64::from(d - b'0');
            self.pos += 1;
        }
        let digits = self.pos - start;
        let leading_zero = digits > 1 && bytes.get(start) == Some(&b'0');
        match self.peek() {
            _ if digits == 0 || leading_zero => None,
            // A fraction or an exponent: a float, serde_json's to read.
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(n),
        }
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let rest = self.text.as_bytes().get(self.pos..)?;
        rest.starts_with(word.as_bytes())
            .then(|| self.pos += word.len())
    }

    /// One value, built.
    fn value(&mut self) -> Option<Json<'a>> {
        self.whitespace();
        Some(match self.peek()? {
            b'"' => Json::Str(Cow::Borrowed(self.string()?)),
            b'{' => {
                let mut members = Vec::with_capacity(8);
                self.sequence(b'{', b'}', |r| {
                    let name = r.name()?;
                    let value = r.value()?;
                    let bare = (r.prefix_len)(name);
                    let name = Cow::Borrowed(name);
                    members.push(Member { name, bare, value });
                    Some(())
                })?;
                Json::Object(Object(members))
            }
            b'[' => {
                let mut items = Vec::new();
                self.sequence(b'[', b']', |r| {
                    items.push(r.value()?);
                    Some(())
                })?;
                Json::Array(items)
            }
            b't' => self.literal("true").map(|()| Json::Bool(true))?,
            b'f' => self.literal("false").map(|()| Json::Bool(false))?,
            b'n' => self.literal("null").map(|()| Json::Null)?,
            _ => Json::Uint(self.number()?),
        })
    }

    /// One value, checked as [`Reader::value`] reads it, nothing built.
    fn skip(&mut self) -> Option<()> {
        self.whitespace();
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.sequence(b'{', b'}', |r| {
                r.name()?;
                r.skip()
            }),
            b'[' => self.sequence(b'[', b']', Self::skip),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => self.number().map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::super::prefix_len;
    use super::super::stream::{container, container_serde, datastore_with};
    use super::*;

    /// Bodies as the COE watcher and svcflow's own clients send them.
    const BODIES: [(Kind, &str); 8] = [
        (
            Kind::Service,
            r#"{"service:service-information":{"service:services":[{"service:uid":"s1",
            "service:name":"web","service:network-NS":"default","service:cluster-id":"c1",
            "service:cluster-ip-address":"10.96.0.10","service:external-ip-address":
            ["198.51.100.7"],"service:service-ports":[{"service:name":"http","service:port":80,
            "service:target-port":"8080","service:node-port":30080},{"service:name":"dns",
            "service:port":53,"service:protocol":"UDP"}]},{"service:uid":"s2","service:name":
            "db","service:network-NS":"default","service:cluster-ip-address":"fd00::10",
            "service:service-ports":[{"service:port":5432,"service:target-port":0}]}]}}"#,
        ),
        (
            Kind::Endpoints,
            r#"{"service:endpoints":[{"service:uid":"e1","service:name":"web",
            "service:network-NS":"default","service:endpoint-addresses":[{"service:ip-address":
            "10.244.1.5","service:node-name":"n1"},{"service:ip-address":"10.244.1.6",
            "weight":3}],"service:endpoint-ports":[{"service:name":"http","service:port":8080}]}]}"#,
        ),
        (
            Kind::Endpoints,
            r#" { "endpoints-info" : { "endpoints" : [ ] } } "#,
        ),
        (
            Kind::Pod,
            r#"{"pod:coe":{"pod:pods":[{"uid":"p1","name":"web-1","host-ip-address":"192.0.2.1",
            "network-NS":"default","port-mac-address":"02:00:00:00:00:11","interface":[{"uid":
            "i1","ip-address":"10.244.1.5","network-type":"VXLAN","segmentation-id":7}]}]}}"#,
        ),
        (
            Kind::Node,
            r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"n1","k8s-node:host-name":"n1",
            "k8s-node:internal-ip-address":"192.0.2.1","k8s-node:pod-cidr":"10.244.1.0/24"}]}"#,
        ),
        // A member given twice in an entry: the error names the list's path.
        (
            Kind::Service,
            r#"{"service:service-information":{"service:services":[{"uid":"s9","name":"a",
            "service:name":"b"}]}}"#,
        ),
        (
            Kind::Service,
            r#"{"service:services":[{"uid":"s9","name":"a","service:name":"b"}]}"#,
        ),
        (
            Kind::Service,
            r#"{"services":[{"uid":"s3","name":"odd","network-NS":"default","x":[true,false,
            null,{},[],0,1234567890123456789],"service-ports":[{"port":"80"}]}]}"#,
        ),
    ];

    /// A body of the whole datastore, each container as `GET` on it returns it.
    const DATASTORE: &str = r#"{"service:service-information":{"service:services":[
        {"service:uid":"s1","service:name":"web","service:network-NS":"default",
        "service:cluster-ip-address":"10.96.0.10","service:service-ports":[{"service:port":80,
        "service:target-port":"http"}]}]},"service:endpoints-info":{"service:endpoints":[
        {"service:uid":"e1","service:name":"web","service:network-NS":"default",
        "service:endpoint-addresses":[{"service:ip-address":"10.244.1.5",
        "service:node-name":"n1"}],"service:endpoint-ports":[{"service:name":"http",
        "service:port":8080}]}]},"pod:coe":{"pod:pods":[]},"k8s-node:k8s-nodes-info":
        {"k8s-node:k8s-nodes":[{"k8s-node:uid":"n1","k8s-node:host-name":"n1"}]}}"#;

    #[test]
    fn the_bodies_clients_send_are_read_here_entry_by_entry() {
        // Whatever the serde path still reads, these must not need it: the plain reader is
        // what makes a bulk PUT fast, and a change that made it give up would only show as
        // a slower parse.
        for (kind, body) in BODIES {
            let (_, entries) = list_entries(kind, body.as_bytes()).expect(body);
            for entry in entries {
                let plain = tree(entry, prefix_len).expect(entry);
                assert_eq!(plain, Json::parse_str(entry, prefix_len).unwrap());
            }
            assert_eq!(
                container(kind, body.as_bytes()),
                container_serde(kind, body.as_bytes())
            );
        }
        let top = tree(DATASTORE, prefix_len).unwrap();
        for (name, _, _) in top.as_object().unwrap().iter() {
            let kind = Kind::ALL
                .into_iter()
                .find(|k| k.qualified_container() == name)
                .unwrap();
            let start = DATASTORE.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
            let mut reader = Reader::new(DATASTORE, prefix_len);
            reader.pos = start;
            reader.skip().unwrap();
            let text = &DATASTORE[start..reader.pos];
            assert!(container_entries(kind, text).is_some(), "{text}");
        }
        let twice = DATASTORE.replace(
            r#""service:name":"web""#,
            r#""name":"a","service:name":"web""#,
        );
        let refused = datastore_with(twice.as_bytes(), true).unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("service-information.services[0].name"),
            "{refused}"
        );
        assert_eq!(Err(refused), datastore_with(twice.as_bytes(), false));
        let parsed = datastore_with(DATASTORE.as_bytes(), true).unwrap();
        assert_eq!(
            parsed.iter().map(|(_, items)| items.len()).sum::<usize>(),
            3
        );
        assert_eq!(Ok(parsed), datastore_with(DATASTORE.as_bytes(), false));
    }

    #[test]
    fn what_it_gives_up_on() {
        for text in [
            r#""a\"b""#,
            "\"tab\there\"",
            "-1",
            "1.5",
            "1e3",
            "01",
            "12345678901234567890",
            "[1,]",
            r#"{"a":1,}"#,
            r#"{"a" 1}"#,
            r#"{"a":1"#,
            "[1] x",
            "tru",
            "",
            "\u{feff}1",
        ] {
            assert_eq!(tree(text, prefix_len), None, "{text}");
        }
        let deep = "[".repeat(DEPTH + 1) + &"]".repeat(DEPTH + 1);
        assert_eq!(tree(&deep, prefix_len), None);
        let shallow = "[".repeat(DEPTH) + &"]".repeat(DEPTH);
        assert!(tree(&shallow, prefix_len).is_some());
        // Valid bodies of other shapes go to serde: another member, a null list, no list.
        for body in [
            r#"{"services":[],"x":1}"#,
            r#"{"service-information":{"services":null}}"#,
            r#"{"service-information":{}}"#,
            r#"{}"#,
            r#"{"endpoints":[]}"#,
        ] {
            assert_eq!(list_entries(Kind::Service, body.as_bytes()), None, "{body}");
        }
        assert_eq!(list_entries(Kind::Service, b"{\"services\":[\xff]}"), None);
    }

    #[test]
    fn a_string_s_end_is_found_at_every_offset() {
        for len in 0..40 {
            for tail in ["\"", "\\", "\n", "\u{1f}"] {
                let text = "é".repeat(len / 2) + &"a".repeat(len % 2) + tail + "zz";
                let at = text.len() - tail.len() - 2;
                assert_eq!(special(text.as_bytes()), Some(at), "{len} {tail:?}");
            }
            assert_eq!(special("a".repeat(len).as_bytes()), None);
        }
    }

    /// Bytes that steer a JSON reader: what a mutation inserts or writes over.
    const STEER: &[u8] = b"{}[]\",:\\ \t\n0123456789-+.eEtrufalsn/\x01\xc3\xa9";

    fn mutated(seed: &[u8], edits: &[(usize, u8, usize)]) -> Vec<u8> {
        let mut out = seed.to_vec();
        for &(at, op, pick) in edits {
            let at = at % (out.len() + 1);
            let byte = STEER[pick % STEER.len()];
            match op % 4 {
                0 => out.insert(at, byte),
                1 if at < out.len() => drop(out.remove(at)),
                2 if at < out.len() => out[at] = byte,
                3 => out.truncate(at),
                _ => {}
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Whatever the plain reader reads, serde_json reads to the same tree; a body it
        /// takes parses to what the serde path gives, items or the same error.
        #[test]
        fn it_reads_what_it_reads_as_serde_does(
            seed in 0..BODIES.len(),
            edits in proptest::collection::vec((0usize..4096, 0u8..4, 0usize..64), 0..4),
        ) {
            let (kind, body) = BODIES[seed];
            let bytes = mutated(body.as_bytes(), &edits);
            if let Some((_, entries)) = list_entries(kind, &bytes) {
                for entry in entries {
                    prop_assert!(tree(entry, prefix_len).is_some());
                }
            }
            prop_assert_eq!(container(kind, &bytes), container_serde(kind, &bytes));
            let whole = mutated(DATASTORE.as_bytes(), &edits);
            prop_assert_eq!(datastore_with(&whole, true), datastore_with(&whole, false));
            if let Ok(text) = std::str::from_utf8(&bytes) {
                // The whole body as one value, and the text of each of its entries.
                if let Some(value) = tree(text, prefix_len) {
                    prop_assert_eq!(Some(value), Json::parse_str(text, prefix_len).ok());
                }
                let mut reader = Reader::new(text, prefix_len);
                let skipped = reader.skip().map(|()| reader.pos);
                let mut reader = Reader::new(text, prefix_len);
                let read = reader.value().map(|_| reader.pos);
                prop_assert_eq!(skipped, read);
            }
        }
    }
}
