//! OVSDB data values (RFC 7047 §5.1): atoms, sets, maps, `uuid` and `named-uuid`.
//!
//! `Datum` is the value of one column. A one-element set is written as a bare atom on the
//! wire, as RFC 7047 allows; parsing accepts both forms.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};
pub use uuid::Uuid;

/// Why a JSON value is not a valid OVSDB datum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid OVSDB datum: {0}")]
pub struct DatumError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, DatumError> {
    Err(DatumError(msg.into()))
}

/// One scalar value (RFC 7047 §5.1 `<atom>`).
#[derive(Debug, Clone)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(String),
    /// `["uuid", "..."]`
    Uuid(Uuid),
    /// `["named-uuid", "..."]`: refers to a row inserted earlier in the same transaction.
    NamedUuid(String),
}

impl Atom {
    fn rank(&self) -> u8 {
        match self {
            Atom::Integer(_) => 0,
            Atom::Real(_) => 1,
            Atom::Boolean(_) => 2,
            Atom::String(_) => 3,
            Atom::Uuid(_) => 4,
            Atom::NamedUuid(_) => 5,
        }
    }

    /// Parses an atom from JSON.
    pub fn from_json(v: &Value) -> Result<Atom, DatumError> {
        match v {
            Value::Bool(b) => Ok(Atom::Boolean(*b)),
            Value::String(s) => Ok(Atom::String(s.clone())),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Ok(Atom::Integer(i))
                } else if let Some(f) = n.as_f64() {
                    Ok(Atom::Real(f))
                } else {
                    err(format!("number out of range: {n}"))
                }
            }
            Value::Array(a) => match (a.first().and_then(Value::as_str), a.get(1), a.len()) {
                (Some("uuid"), Some(Value::String(s)), 2) => Uuid::parse_str(s)
                    .map(Atom::Uuid)
                    .map_err(|e| DatumError(format!("bad uuid {s:?}: {e}"))),
                (Some("named-uuid"), Some(Value::String(s)), 2) => Ok(Atom::NamedUuid(s.clone())),
                _ => err("array is not a uuid or named-uuid"),
            },
            _ => err(format!("not an atom: {}", short(v))),
        }
    }

    /// The JSON encoding of this atom.
    pub fn to_json(&self) -> Value {
        match self {
            Atom::Integer(i) => json!(i),
            Atom::Real(f) => json!(f),
            Atom::Boolean(b) => json!(b),
            Atom::String(s) => json!(s),
            Atom::Uuid(u) => json!(["uuid", u.to_string()]),
            Atom::NamedUuid(n) => json!(["named-uuid", n]),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Atom::String(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Atom::Integer(i) => Some(*i),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Atom::Boolean(b) => Some(*b),
            _ => None,
        }
    }
    pub fn as_uuid(&self) -> Option<Uuid> {
        match self {
            Atom::Uuid(u) => Some(*u),
            _ => None,
        }
    }
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 80 {
        let mut cut = 80;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

impl PartialEq for Atom {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Atom {}
impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Atom::Integer(a), Atom::Integer(b)) => a.cmp(b),
            (Atom::Real(a), Atom::Real(b)) => a.total_cmp(b),
            (Atom::Boolean(a), Atom::Boolean(b)) => a.cmp(b),
            (Atom::String(a), Atom::String(b)) => a.cmp(b),
            (Atom::Uuid(a), Atom::Uuid(b)) => a.cmp(b),
            (Atom::NamedUuid(a), Atom::NamedUuid(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}
impl Hash for Atom {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Atom::Integer(i) => i.hash(state),
            Atom::Real(f) => f.to_bits().hash(state),
            Atom::Boolean(b) => b.hash(state),
            Atom::String(s) | Atom::NamedUuid(s) => s.hash(state),
            Atom::Uuid(u) => u.hash(state),
        }
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Integer(i) => write!(f, "{i}"),
            Atom::Real(r) => write!(f, "{r}"),
            Atom::Boolean(b) => write!(f, "{b}"),
            Atom::String(s) => write!(f, "{s:?}"),
            Atom::Uuid(u) => write!(f, "{u}"),
            Atom::NamedUuid(n) => write!(f, "@{n}"),
        }
    }
}

impl From<&str> for Atom {
    fn from(s: &str) -> Self {
        Atom::String(s.to_owned())
    }
}
impl From<String> for Atom {
    fn from(s: String) -> Self {
        Atom::String(s)
    }
}
impl From<i64> for Atom {
    fn from(i: i64) -> Self {
        Atom::Integer(i)
    }
}
impl From<bool> for Atom {
    fn from(b: bool) -> Self {
        Atom::Boolean(b)
    }
}
impl From<Uuid> for Atom {
    fn from(u: Uuid) -> Self {
        Atom::Uuid(u)
    }
}

/// The value of a column (RFC 7047 §5.1 `<value>`): a set (including scalars) or a map.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Datum {
    Set(BTreeSet<Atom>),
    Map(BTreeMap<Atom, Atom>),
}

impl Default for Datum {
    fn default() -> Self {
        Datum::Set(BTreeSet::new())
    }
}

impl Datum {
    /// A one-atom set (a scalar).
    pub fn atom(a: impl Into<Atom>) -> Datum {
        Datum::Set(BTreeSet::from([a.into()]))
    }
    /// A string scalar.
    pub fn string(s: impl Into<String>) -> Datum {
        Datum::atom(Atom::String(s.into()))
    }
    /// An integer scalar.
    pub fn integer(i: i64) -> Datum {
        Datum::atom(Atom::Integer(i))
    }
    /// A boolean scalar.
    pub fn boolean(b: bool) -> Datum {
        Datum::atom(Atom::Boolean(b))
    }
    /// A uuid scalar.
    pub fn uuid(u: Uuid) -> Datum {
        Datum::atom(Atom::Uuid(u))
    }
    /// A named-uuid scalar.
    pub fn named_uuid(n: impl Into<String>) -> Datum {
        Datum::atom(Atom::NamedUuid(n.into()))
    }
    /// The empty set.
    pub fn empty() -> Datum {
        Datum::default()
    }
    /// A set of atoms.
    pub fn set<A: Into<Atom>>(items: impl IntoIterator<Item = A>) -> Datum {
        Datum::Set(items.into_iter().map(Into::into).collect())
    }
    /// A map.
    pub fn map<K: Into<Atom>, V: Into<Atom>>(items: impl IntoIterator<Item = (K, V)>) -> Datum {
        Datum::Map(
            items
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// Whether this is an empty set or map.
    pub fn is_empty(&self) -> bool {
        match self {
            Datum::Set(s) => s.is_empty(),
            Datum::Map(m) => m.is_empty(),
        }
    }

    /// The single atom of a one-element set.
    pub fn as_atom(&self) -> Option<&Atom> {
        match self {
            Datum::Set(s) if s.len() == 1 => s.iter().next(),
            _ => None,
        }
    }
    /// The string of a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        self.as_atom().and_then(Atom::as_str)
    }
    /// The integer of an integer scalar.
    pub fn as_integer(&self) -> Option<i64> {
        self.as_atom().and_then(Atom::as_integer)
    }
    /// The boolean of a boolean scalar.
    pub fn as_bool(&self) -> Option<bool> {
        self.as_atom().and_then(Atom::as_bool)
    }
    /// The uuid of a uuid scalar.
    pub fn as_uuid(&self) -> Option<Uuid> {
        self.as_atom().and_then(Atom::as_uuid)
    }
    /// The atoms of a set (empty for a map).
    pub fn set_iter(&self) -> impl Iterator<Item = &Atom> {
        match self {
            Datum::Set(s) => Some(s.iter()),
            Datum::Map(_) => None,
        }
        .into_iter()
        .flatten()
    }
    /// All uuids in a set.
    pub fn uuids(&self) -> Vec<Uuid> {
        self.set_iter().filter_map(Atom::as_uuid).collect()
    }
    /// All strings in a set.
    pub fn strings(&self) -> Vec<String> {
        self.set_iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect()
    }
    /// A string→string map (non-string entries are skipped; an empty set is an empty map).
    pub fn string_map(&self) -> BTreeMap<String, String> {
        match self {
            Datum::Map(m) => m
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect(),
            Datum::Set(_) => BTreeMap::new(),
        }
    }

    /// Parses a datum from JSON.
    pub fn from_json(v: &Value) -> Result<Datum, DatumError> {
        if let Value::Array(a) = v {
            match (a.first().and_then(Value::as_str), a.get(1), a.len()) {
                (Some("set"), Some(Value::Array(items)), 2) => {
                    return items
                        .iter()
                        .map(Atom::from_json)
                        .collect::<Result<_, _>>()
                        .map(Datum::Set);
                }
                (Some("map"), Some(Value::Array(pairs)), 2) => {
                    let mut m = BTreeMap::new();
                    for p in pairs {
                        match p.as_array().map(Vec::as_slice) {
                            Some([k, v]) => {
                                m.insert(Atom::from_json(k)?, Atom::from_json(v)?);
                            }
                            _ => return err("map entry is not a [key, value] pair"),
                        }
                    }
                    return Ok(Datum::Map(m));
                }
                _ => {}
            }
        }
        Atom::from_json(v).map(Datum::atom)
    }

    /// The JSON encoding (a one-element set is written as its atom).
    pub fn to_json(&self) -> Value {
        match self {
            Datum::Set(s) if s.len() == 1 => {
                s.iter().next().map(Atom::to_json).unwrap_or(Value::Null)
            }
            Datum::Set(s) => json!(["set", s.iter().map(Atom::to_json).collect::<Vec<_>>()]),
            Datum::Map(m) => json!([
                "map",
                m.iter()
                    .map(|(k, v)| json!([k.to_json(), v.to_json()]))
                    .collect::<Vec<_>>()
            ]),
        }
    }

    /// Applies an `update2` diff (RFC 7047bis / ovsdb-server(7) `<diff>`): sets take the
    /// symmetric difference; maps remove equal pairs and add or replace the others.
    pub fn apply_diff(&mut self, diff: &Datum) {
        match (&mut *self, diff) {
            (Datum::Set(cur), Datum::Set(d)) => {
                for a in d {
                    if !cur.remove(a) {
                        cur.insert(a.clone());
                    }
                }
            }
            (Datum::Map(cur), Datum::Map(d)) => {
                for (k, v) in d {
                    if cur.get(k) == Some(v) {
                        cur.remove(k);
                    } else {
                        cur.insert(k.clone(), v.clone());
                    }
                }
            }
            // An empty set parsed where a map is meant.
            (Datum::Set(cur), Datum::Map(d)) if cur.is_empty() => *self = Datum::Map(d.clone()),
            (_, d) => *self = d.clone(),
        }
    }
}

impl Serialize for Atom {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}
impl<'de> Deserialize<'de> for Atom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Atom::from_json(&v).map_err(serde::de::Error::custom)
    }
}
impl Serialize for Datum {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}
impl<'de> Deserialize<'de> for Datum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Datum::from_json(&v).map_err(serde::de::Error::custom)
    }
}

/// A row: column name → value (RFC 7047 §5.1 `<row>`).
pub type Row = BTreeMap<String, Datum>;

/// Parses a `<row>` JSON object.
pub fn row_from_json(v: &Value) -> Result<Row, DatumError> {
    let Some(obj) = v.as_object() else {
        return err("row is not an object");
    };
    obj.iter()
        .map(|(k, v)| Ok((k.clone(), Datum::from_json(v)?)))
        .collect()
}

/// Encodes a row as a JSON object.
pub fn row_to_json(row: &Row) -> Value {
    Value::Object(row.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "36c1d4a9-8ef1-4b49-9d3f-4f4f4f4f4f4f";

    #[test]
    fn table_round_trip() {
        let u = Uuid::parse_str(U).unwrap();
        let cases: Vec<(Datum, Value)> = vec![
            (Datum::integer(7), json!(7)),
            (Datum::string("br-int"), json!("br-int")),
            (Datum::boolean(true), json!(true)),
            (Datum::atom(Atom::Real(1.5)), json!(1.5)),
            (Datum::uuid(u), json!(["uuid", U])),
            (Datum::named_uuid("row1"), json!(["named-uuid", "row1"])),
            (Datum::empty(), json!(["set", []])),
            (
                Datum::set(["OpenFlow13", "OpenFlow15"]),
                json!(["set", ["OpenFlow13", "OpenFlow15"]]),
            ),
            (
                Datum::map([("a", "1"), ("b", "2")]),
                json!(["map", [["a", "1"], ["b", "2"]]]),
            ),
            (Datum::Map(BTreeMap::new()), json!(["map", []])),
        ];
        for (d, j) in cases {
            assert_eq!(d.to_json(), j, "encode {d:?}");
            assert_eq!(Datum::from_json(&j).unwrap(), d, "decode {j}");
            let via_serde: Datum = serde_json::from_value(j.clone()).unwrap();
            assert_eq!(via_serde, d);
            assert_eq!(serde_json::to_value(&d).unwrap(), j);
        }
    }

    #[test]
    fn rejects_bad_values() {
        for j in [
            json!(null),
            json!({"a": 1}),
            json!(["uuid", "not-a-uuid"]),
            json!(["uuid"]),
            json!(["set", [["set", []]]]),
            json!(["map", [["a"]]]),
            json!(["map", "x"]),
            json!(["bogus", []]),
        ] {
            assert!(Datum::from_json(&j).is_err(), "{j}");
        }
    }

    #[test]
    fn diffs() {
        let mut s = Datum::set([1i64, 2, 3]);
        s.apply_diff(&Datum::set([3i64, 4]));
        assert_eq!(s, Datum::set([1i64, 2, 4]));
        let mut m = Datum::map([("a", "1"), ("b", "2")]);
        m.apply_diff(&Datum::map([("a", "1"), ("b", "3"), ("c", "4")]));
        assert_eq!(m, Datum::map([("b", "3"), ("c", "4")]));
        let mut e = Datum::empty();
        e.apply_diff(&Datum::map([("k", "v")]));
        assert_eq!(e, Datum::map([("k", "v")]));
    }

    #[test]
    fn accessors() {
        let m = Datum::map([("a", "1")]);
        assert_eq!(m.string_map().get("a").map(String::as_str), Some("1"));
        assert_eq!(Datum::empty().string_map().len(), 0);
        assert_eq!(Datum::integer(3).as_integer(), Some(3));
        assert_eq!(Datum::set([1i64, 2]).as_integer(), None);
        let row = row_from_json(&json!({"name": "x", "ofport": ["set", []]})).unwrap();
        assert_eq!(row["name"].as_str(), Some("x"));
        assert_eq!(
            row_to_json(&row),
            json!({"name": "x", "ofport": ["set", []]})
        );
    }
}
