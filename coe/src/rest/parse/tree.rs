//! A JSON tree that borrows its strings from the body, for the checks of [`super`].
//!
//! `serde_json::Value` copies every member name and string into its own allocation and keeps
//! each object in a B-tree; a 30,000-service body is about 300,000 of them, built and dropped
//! again within milliseconds. Here an object is its members in order, a string is a slice of
//! the body unless it holds an escape, and a member is found by a scan of its object (a COE
//! object has a dozen members at most). Numbers keep serde_json's three kinds, so that the
//! checks see what `Value` showed them. The nesting depth is serde_json's (128), so hostile
//! input is refused at bounded cost.
//!
//! Pure: no I/O.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value, borrowing its strings from the text it was read from where it can.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Json<'a> {
    Null,
    Bool(bool),
    /// A non-negative integer.
    Uint(u64),
    /// A negative integer.
    Int(i64),
    Float(f64),
    Str(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Object<'a>),
}

/// An object's members, in the order they were given (repeats included: the checks refuse
/// them, naming the member).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Object<'a>(pub(super) Vec<Member<'a>>);

/// A member: its name as given, where the name proper starts (past a module prefix such as
/// `service:`, found once when read rather than at every lookup), its value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Member<'a> {
    pub(super) name: Cow<'a, str>,
    pub(super) bare: usize,
    pub(super) value: Json<'a>,
}

impl Member<'_> {
    fn bare(&self) -> &str {
        self.name.get(self.bare..).unwrap_or(&self.name)
    }
}

impl<'a> Object<'a> {
    /// The first member named `key` once its module prefix is stripped.
    pub(super) fn get(&self, key: &str) -> Option<&Json<'a>> {
        self.0.iter().find(|m| m.bare() == key).map(|m| &m.value)
    }

    /// The members in order: the name as given, and the name without its module prefix.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &str, &Json<'a>)> {
        self.0.iter().map(|m| (m.name.as_ref(), m.bare(), &m.value))
    }

    /// How many members.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

impl<'a> Json<'a> {
    /// Reads one JSON text, finding each member name's module prefix with `prefix_len`; what
    /// follows the text must be whitespace.
    pub(super) fn parse(
        text: &'a [u8],
        prefix_len: fn(&str) -> usize,
    ) -> Result<Self, serde_json::Error> {
        Self::read(serde_json::Deserializer::from_slice(text), prefix_len)
    }

    /// [`Json::parse`] of a text already known to be UTF-8 (a list entry found in a body),
    /// which its strings then need not be checked for again.
    pub(super) fn parse_str(
        text: &'a str,
        prefix_len: fn(&str) -> usize,
    ) -> Result<Self, serde_json::Error> {
        Self::read(serde_json::Deserializer::from_str(text), prefix_len)
    }

    fn read<R: serde_json::de::Read<'a>>(
        mut de: serde_json::Deserializer<R>,
        prefix_len: fn(&str) -> usize,
    ) -> Result<Self, serde_json::Error> {
        let value = Read { prefix_len }.deserialize(&mut de)?;
        de.end()?;
        Ok(value)
    }

    pub(super) fn as_object(&self) -> Option<&Object<'a>> {
        match self {
            Json::Object(o) => Some(o),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The number as an `i64`, if it is an integer that fits (as `serde_json::Number::as_i64`).
    pub(super) fn as_i64(&self) -> Option<i64> {
        match self {
            Json::Uint(u) => i64::try_from(*u).ok(),
            Json::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The number as a `u64`, if it is a non-negative integer (as
    /// `serde_json::Number::as_u64`).
    pub(super) fn as_u64(&self) -> Option<u64> {
        match self {
            Json::Uint(u) => Some(*u),
            _ => None,
        }
    }

    pub(super) fn is_number(&self) -> bool {
        matches!(self, Json::Uint(_) | Json::Int(_) | Json::Float(_))
    }

    /// Whether it holds members or entries (the values whose members the checks walk).
    pub(super) fn is_compound(&self) -> bool {
        matches!(self, Json::Object(_) | Json::Array(_))
    }
}

/// Reads a [`Json`], with the rule for module prefixes.
#[derive(Clone, Copy)]
pub(super) struct Read {
    pub(super) prefix_len: fn(&str) -> usize,
}

impl<'de> DeserializeSeed<'de> for Read {
    type Value = Json<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

/// A member name, borrowed from the text unless it holds an escape (`Cow`'s own
/// `Deserialize` always copies).
struct Name<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Visitor<'de> for Read {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(b))
    }
    fn visit_u64<E>(self, u: u64) -> Result<Json<'de>, E> {
        Ok(Json::Uint(u))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Json<'de>, E> {
        // serde_json gives non-negative integers as u64; keep that split whatever the source.
        Ok(match u64::try_from(i) {
            Ok(u) => Json::Uint(u),
            Err(_) => Json::Int(i),
        })
    }
    fn visit_f64<E>(self, f: f64) -> Result<Json<'de>, E> {
        Ok(Json::Float(f))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Json<'de>, E> {
        Ok(Json::Str(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(Name(name)) = map.next_key()? {
            let bare = (self.prefix_len)(&name);
            let value = map.next_value_seed(self)?;
            members.push(Member { name, bare, value });
        }
        Ok(Json::Object(Object(members)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn prefix(name: &str) -> usize {
        name.strip_prefix("p:").map_or(0, |_| 2)
    }

    #[test]
    fn strings_without_escapes_borrow_from_the_text() {
        let text = br#"{"a":"plain","b\u0041":"esc\"aped","p:c":[1,-2,3.5,null,true]}"#;
        let json = Json::parse(text, prefix).unwrap();
        let o = json.as_object().unwrap();
        assert!(matches!(
            o.get("a"),
            Some(Json::Str(Cow::Borrowed("plain")))
        ));
        assert!(matches!(o.get("bA"), Some(Json::Str(Cow::Owned(s))) if s == "esc\"aped"));
        assert_eq!(
            o.get("c"),
            Some(&Json::Array(vec![
                Json::Uint(1),
                Json::Int(-2),
                Json::Float(3.5),
                Json::Null,
                Json::Bool(true)
            ]))
        );
        let names: Vec<(&str, &str)> = o.iter().map(|(k, bare, _)| (k, bare)).collect();
        assert_eq!(names, [("a", "a"), ("bA", "bA"), ("p:c", "c")]);
    }

    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        for text in [
            "0",
            "7",
            "-7",
            "9223372036854775807",
            "9223372036854775808",
            "-1.5",
            "1e3",
        ] {
            let ours = Json::parse(text.as_bytes(), prefix).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours.as_i64(), theirs.as_i64(), "{text}");
            assert_eq!(ours.as_u64(), theirs.as_u64(), "{text}");
            assert!(ours.is_number(), "{text}");
        }
    }

    #[test]
    fn repeats_are_kept_and_trailing_text_and_deep_nesting_refused() {
        let json = Json::parse(br#"{"a":1,"a":2}"#, prefix).unwrap();
        assert_eq!(json.as_object().unwrap().len(), 2);
        assert!(Json::parse(br#"{"a":1} x"#, prefix).is_err());
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(Json::parse(deep.as_bytes(), prefix).is_err());
    }
}
