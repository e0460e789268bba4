//! An ordered map that nodes can share: persistent (`imbl`), so a clone shares all of it until
//! one side changes, with a fingerprint of its entries kept as they come and go, so that two
//! maps built apart can be found equal (and one of them let go) without comparing most pairs.
//!
//! Pure.

use std::hash::Hash;

use crate::ids::fingerprint_of;

/// An ordered map with a fingerprint of its entries.
#[derive(Debug, Clone)]
pub(super) struct Tracked<K: Ord + Clone, V: Clone> {
    map: imbl::OrdMap<K, V>,
    /// The wrapping sum of a hash of every entry.
    fingerprint: u64,
}

impl<K: Ord + Clone, V: Clone> Default for Tracked<K, V> {
    fn default() -> Self {
        Self {
            map: imbl::OrdMap::new(),
            fingerprint: 0,
        }
    }
}

fn entry_hash<K: Hash, V: Hash>(k: &K, v: &V) -> u64 {
    fingerprint_of(&(k, v))
}

impl<K: Ord + Clone + Hash, V: Clone + Hash + PartialEq> Tracked<K, V> {
    pub(super) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key)
    }

    pub(super) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.contains_key(key)
    }

    pub(super) fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> + Clone + '_ {
        self.map.iter()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Sets `key` to `value`. Setting the value it has changes nothing, so a map shared with
    /// another node stays shared.
    pub(super) fn insert(&mut self, key: K, value: V) {
        match self.map.get(&key) {
            Some(old) if *old == value => return,
            Some(old) => self.fingerprint = self.fingerprint.wrapping_sub(entry_hash(&key, old)),
            None => {}
        }
        self.fingerprint = self.fingerprint.wrapping_add(entry_hash(&key, &value));
        self.map.insert(key, value);
    }

    /// Takes `key` out.
    pub(super) fn remove<Q>(&mut self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        // Looked up first: removing from a shared map copies its path even when the key is
        // absent.
        if !self.map.contains_key(key) {
            return;
        }
        if let Some((k, v)) = self.map.remove_with_key(key) {
            self.fingerprint = self.fingerprint.wrapping_sub(entry_hash(&k, &v));
        }
    }

    /// Whether `other` is this map or a clone of it neither side has changed since.
    pub(super) fn same_as(&self, other: &Self) -> bool {
        self.map.ptr_eq(&other.map)
    }

    /// Whether `other` holds the same entries: at once for the same map, else by comparing
    /// them when the fingerprints agree (skipping the parts both still share).
    pub(super) fn same_entries(&self, other: &Self) -> bool {
        self.same_as(other) || (self.fingerprint == other.fingerprint && self.map == other.map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps built apart, to the same entries, are found equal; any other entry, or another
    /// value, is not. Setting a value a shared map holds keeps it shared.
    #[test]
    fn maps_built_apart_are_found_equal_by_their_entries() {
        let mut a: Tracked<u32, String> = Tracked::default();
        let mut b: Tracked<u32, String> = Tracked::default();
        for i in 0..200 {
            a.insert(i, format!("v{i}"));
        }
        for i in (0..250).rev() {
            b.insert(i, format!("w{i}"));
        }
        for i in 200..250 {
            b.remove(&i);
        }
        assert!(!a.same_entries(&b));
        for i in 0..200 {
            b.insert(i, format!("v{i}"));
        }
        assert!(a.same_entries(&b) && !a.same_as(&b));
        b.remove(&7);
        assert!(!a.same_entries(&b));
        b.insert(7, "v7".into());
        assert!(a.same_entries(&b));
        let mut c = a.clone();
        c.insert(3, "v3".into());
        assert!(c.same_as(&a));
        c.insert(3, "other".into());
        assert!(!c.same_as(&a) && !c.same_entries(&a));
    }
}
