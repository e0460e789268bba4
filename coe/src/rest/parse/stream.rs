//! A container body read entry by entry. A body that is exactly the container and its list,
//! all plain JSON (no escapes, no floats: what clients send), has its entries found by
//! [`super::plain`]; any other body has serde visitors walk the top object and the container
//! object and find the extent of each list entry (its JSON checked, nothing built). Then each
//! entry is read as its own small JSON tree (borrowing its strings from the body; by
//! [`super::plain`] when it is plain, else by [`super::tree`]), checked and converted
//! ([`super::item_value`]), a long list's two halves on two threads. Either way a body gives
//! the same items or the same error. A body of the whole datastore is read the same way,
//! container by container (the biggest on a thread of its own). The rules are [`super`]'s:
//! module prefixes on member names, a member given twice refused with its path, unknown
//! members ignored (but checked for repeats; at the top of a datastore body they are
//! refused), the container taking precedence over a bare list.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::plain;
use super::tree::{Json, Read};
use super::{Item, Kind, RequestError, bare, item_value, join, no_repeated_members, prefix_len};

/// Where a visitor leaves the request error that stopped it (serde's own error type can
/// only carry text).
type Slot<'a> = &'a RefCell<Option<RequestError>>;

fn fail<E: serde::de::Error>(slot: Slot<'_>, e: RequestError) -> E {
    let text = e.to_string();
    *slot.borrow_mut() = Some(e);
    E::custom(text)
}

/// The `visit_*` methods of a visitor that accepts only what it defines itself: every other
/// JSON value gets `$wrong` (compound values are skipped over first, so the error is ours).
macro_rules! reject_others {
    ($value:ty, $self:ident => $wrong:expr) => {
        fn visit_bool<E: serde::de::Error>($self, _: bool) -> Result<$value, E> {
            Err($wrong)
        }
        fn visit_i64<E: serde::de::Error>($self, _: i64) -> Result<$value, E> {
            Err($wrong)
        }
        fn visit_u64<E: serde::de::Error>($self, _: u64) -> Result<$value, E> {
            Err($wrong)
        }
        fn visit_f64<E: serde::de::Error>($self, _: f64) -> Result<$value, E> {
            Err($wrong)
        }
        fn visit_str<E: serde::de::Error>($self, _: &str) -> Result<$value, E> {
            Err($wrong)
        }
    };
}

/// Parses a container body.
pub(super) fn container(kind: Kind, body: &[u8]) -> Result<Vec<Item>, RequestError> {
    match plain::list_entries(kind, body) {
        Some((path, entries)) => items(kind, &path, &entries),
        None => container_serde(kind, body),
    }
}

/// [`container`] through serde_json alone: any body, every error named.
pub(super) fn container_serde(kind: Kind, body: &[u8]) -> Result<Vec<Item>, RequestError> {
    let slot = RefCell::new(None);
    let parsed = whole(body, Top { kind, slot: &slot });
    finish(parsed, slot)
}

/// Parses a body of the whole datastore: every container, each as `GET` on it returns it.
pub(super) fn datastore(body: &[u8]) -> Result<Vec<(Kind, Vec<Item>)>, RequestError> {
    datastore_with(body, true)
}

/// [`datastore`], each container read through serde_json alone when `plain` is false.
pub(super) fn datastore_with(
    body: &[u8],
    plain: bool,
) -> Result<Vec<(Kind, Vec<Item>)>, RequestError> {
    let slot = RefCell::new(None);
    let parsed = whole(body, Datastore { slot: &slot, plain });
    finish(parsed, slot)
}

/// Reads all of `body` (nothing may follow the value) with `seed`.
fn whole<'de, S: DeserializeSeed<'de>>(body: &'de [u8], seed: S) -> serde_json::Result<S::Value> {
    let mut de = serde_json::Deserializer::from_slice(body);
    seed.deserialize(&mut de)
        .and_then(|value| de.end().map(|()| value))
}

/// The request error a visitor left in `slot`, else serde's (then about the JSON itself).
fn finish<T>(
    parsed: serde_json::Result<T>,
    slot: RefCell<Option<RequestError>>,
) -> Result<T, RequestError> {
    parsed.map_err(|e| {
        slot.into_inner()
            .unwrap_or_else(|| RequestError::malformed(format!("body is not JSON: {e}")))
    })
}

/// The datastore's top object: one member per container, in any order.
struct Datastore<'a> {
    slot: Slot<'a>,
    /// Whether a container may be read by [`plain`].
    plain: bool,
}

impl<'de> DeserializeSeed<'de> for Datastore<'_> {
    type Value = Vec<(Kind, Vec<Item>)>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Datastore<'_> {
    type Value = Vec<(Kind, Vec<Item>)>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let slot = self.slot;
        // Each container's extent first (its JSON checked, nothing built), then the
        // containers read at once: the biggest on a thread of its own, the others here.
        let mut raw: Vec<(Kind, &'de RawValue)> = Vec::with_capacity(Kind::ALL.len());
        while let Some(key) = map.next_key::<String>()? {
            let name = bare(&key);
            let Some(kind) = Kind::ALL.into_iter().find(|k| k.container() == name) else {
                let known: Vec<String> =
                    Kind::ALL.iter().map(|k| k.qualified_container()).collect();
                return Err(fail(
                    slot,
                    RequestError::invalid(
                        name,
                        format!(
                            "not a container of this datastore, which has {}",
                            known.join(", ")
                        ),
                    ),
                ));
            };
            if raw.iter().any(|(k, _)| *k == kind) {
                return Err(fail(
                    slot,
                    RequestError::invalid(name, "member given more than once"),
                ));
            }
            raw.push((kind, map.next_value::<&'de RawValue>()?));
        }
        let missing: Vec<String> = Kind::ALL
            .iter()
            .filter(|k| !raw.iter().any(|(l, _)| l == *k))
            .map(|k| format!("`{}`", k.qualified_container()))
            .collect();
        if !missing.is_empty() {
            return Err(fail(
                slot,
                RequestError::malformed(format!(
                    "missing {}: a PUT of the whole datastore replaces every container, so it \
                     gives each one (with an empty list to empty it)",
                    missing.join(", ")
                )),
            ));
        }
        containers(&raw, self.plain).map_err(|e| fail(slot, e))
    }

    reject_others!(Vec<(Kind, Vec<Item>)>, self => not_an_object(self.slot));

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Err(not_an_object(self.slot))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Err(not_an_object(self.slot))
    }
}

/// The items of each container, in the order given; the error is the first container's
/// by that order. The biggest (by its text) is read on a thread of its own when it is worth
/// one, beside the others.
fn containers(
    raw: &[(Kind, &RawValue)],
    plain: bool,
) -> Result<Vec<(Kind, Vec<Item>)>, RequestError> {
    let one = |(kind, text): &(Kind, &RawValue)| {
        if let Some((path, entries)) = plain
            .then(|| plain::container_entries(*kind, text.get()))
            .flatten()
        {
            return items(*kind, &path, &entries).map(|items| (*kind, items));
        }
        let slot = RefCell::new(None);
        let parsed = whole(
            text.get().as_bytes(),
            Container {
                kind: *kind,
                slot: &slot,
            },
        );
        finish(parsed, slot).map(|found| (*kind, found.items))
    };
    let biggest = raw
        .iter()
        .enumerate()
        .max_by_key(|(_, (_, text))| text.get().len())
        .map(|(i, _)| i);
    // About 200 bytes per entry: a container this big has thousands of entries.
    const WORTH_A_THREAD_BYTES: usize = crate::par::WORTH_A_THREAD * 200;
    match biggest {
        Some(b) if raw[b].1.get().len() >= WORTH_A_THREAD_BYTES => {
            let (before, after) = (&raw[..b], &raw[b + 1..]);
            let (mut results, big) = crate::par::join(
                || before.iter().chain(after).map(one).collect::<Vec<_>>(),
                || one(&raw[b]),
            );
            results.insert(b, big);
            results.into_iter().collect()
        }
        _ => raw.iter().map(one).collect(),
    }
}

/// The body's top object.
struct Top<'a> {
    kind: Kind,
    slot: Slot<'a>,
}

/// The items read from a list.
struct Found {
    items: Vec<Item>,
}

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = Vec<Item>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Item>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Top<'_> {
    type Value = Vec<Item>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Item>, A::Error> {
        let (kind, slot) = (self.kind, self.slot);
        let mut seen: Vec<String> = Vec::new();
        let mut container: Option<Found> = None;
        let mut list: Option<Found> = None;
        let mut any = false;
        while let Some(key) = map.next_key::<String>()? {
            any = true;
            let name = bare(&key).to_string();
            if seen.contains(&name) {
                return Err(fail(
                    slot,
                    RequestError::invalid(name, "member given more than once"),
                ));
            }
            if name == kind.container() {
                container = Some(map.next_value_seed(Container { kind, slot })?);
            } else if name == kind.list() {
                let path = kind.list().to_string();
                list = Some(map.next_value_seed(List { kind, slot, path })?);
            } else {
                let value = map.next_value_seed(Read { prefix_len })?;
                no_repeated_members(&value, &|| name.clone()).map_err(|e| fail(slot, e))?;
            }
            seen.push(name);
        }
        match container.or(list) {
            Some(found) => Ok(found.items),
            None if !any => Ok(Vec::new()),
            None => Err(fail(
                slot,
                RequestError::malformed(format!(
                    "expected member `{}` or `{}`",
                    kind.qualified_container(),
                    kind.qualified_list()
                )),
            )),
        }
    }

    reject_others!(Vec<Item>, self => not_an_object(self.slot));

    fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<Item>, E> {
        Err(not_an_object(self.slot))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Item>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Err(not_an_object(self.slot))
    }
}

fn not_an_object<E: serde::de::Error>(slot: Slot<'_>) -> E {
    fail(slot, RequestError::malformed("body must be a JSON object"))
}

/// The container object: its list, other members ignored.
struct Container<'a> {
    kind: Kind,
    slot: Slot<'a>,
}

impl<'de> DeserializeSeed<'de> for Container<'_> {
    type Value = Found;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Container<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let (kind, slot) = (self.kind, self.slot);
        let mut seen: Vec<String> = Vec::new();
        let mut found = Found { items: Vec::new() };
        while let Some(key) = map.next_key::<String>()? {
            let name = bare(&key).to_string();
            let path = join(kind.container(), &name);
            if seen.contains(&name) {
                return Err(fail(
                    slot,
                    RequestError::invalid(path, "member given more than once"),
                ));
            }
            if name == kind.list() {
                found = map.next_value_seed(List { kind, slot, path })?;
            } else {
                let value = map.next_value_seed(Read { prefix_len })?;
                no_repeated_members(&value, &|| path.clone()).map_err(|e| fail(slot, e))?;
            }
            seen.push(name);
        }
        Ok(found)
    }

    reject_others!(Found, self => self.wrong());

    fn visit_unit<E: serde::de::Error>(self) -> Result<Found, E> {
        Err(self.wrong())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Err(self.wrong())
    }
}

impl Container<'_> {
    fn wrong<E: serde::de::Error>(&self) -> E {
        fail(
            self.slot,
            RequestError::invalid(self.kind.container(), "expected an object"),
        )
    }
}

/// The list, read entry by entry.
struct List<'a> {
    kind: Kind,
    slot: Slot<'a>,
    /// Its path, for errors about the list itself and the repeats in its entries.
    path: String,
}

impl<'de> DeserializeSeed<'de> for List<'_> {
    type Value = Found;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for List<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        // The entries' extents first (JSON checked, nothing built), then their items.
        let mut entries: Vec<&'de str> = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(entry) = seq.next_element::<&'de RawValue>()? {
            entries.push(entry.get());
        }
        match items(self.kind, &self.path, &entries) {
            Ok(items) => Ok(Found { items }),
            Err(e) => Err(fail(self.slot, e)),
        }
    }

    reject_others!(Found, self => self.wrong());

    fn visit_unit<E: serde::de::Error>(self) -> Result<Found, E> {
        Ok(Found { items: Vec::new() })
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Err(self.wrong())
    }
}

/// The items of a list's `entries` (JSON already checked), in order; the error is the first
/// entry's by position, as reading them one by one finds it. A long list is converted in two
/// halves at once (30,000 services: 64–67 ms on one thread, 44–45 ms on two; the bulk bench in
/// `docs/performance.md`).
fn items(kind: Kind, path: &str, entries: &[&str]) -> Result<Vec<Item>, RequestError> {
    let convert = |first: usize, entries: &[&str]| {
        let mut items = Vec::with_capacity(entries.len());
        for (i, entry) in (first..).zip(entries) {
            let value = match plain::tree(entry, prefix_len) {
                Some(value) => value,
                None => Json::parse_str(entry, prefix_len)
                    .map_err(|e| RequestError::malformed(format!("body is not JSON: {e}")))?,
            };
            no_repeated_members(&value, &|| format!("{path}[{i}]"))?;
            items.push(item_value(kind, &value, None, i)?);
        }
        Ok::<_, RequestError>(items)
    };
    let (first, second) = crate::par::halves(entries, convert);
    let mut items = first?;
    items.extend(second?);
    Ok(items)
}

impl List<'_> {
    fn wrong<E: serde::de::Error>(&self) -> E {
        fail(
            self.slot,
            RequestError::invalid(self.kind.list(), "expected a list"),
        )
    }
}
