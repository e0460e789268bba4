//! Stable identifiers derived from object identity, so that the same model always gives the
//! same group ids and cookies, and a change to one object does not renumber the others.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// FNV-1a, 64-bit: stable across Rust releases and platforms, unlike `DefaultHasher`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Assigns each name an id in `1..=max` from its hash. Names are placed in sorted order and a
/// collision probes to the next free id, so an id depends only on the set of names, and only
/// a colliding name can move when another is added.
pub fn allocate<'a>(names: impl IntoIterator<Item = &'a str>, max: u32) -> BTreeMap<String, u32> {
    let sorted: Vec<&str> = names
        .into_iter()
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .collect();
    let ids = place_sorted(&sorted, max);
    sorted
        .into_iter()
        .zip(ids)
        .filter_map(|(name, id)| Some((name.to_string(), id?)))
        .collect()
}

/// A name given to [`Allocator::update`].
pub trait Name {
    /// The name.
    fn as_str(&self) -> &str;
    /// The name as the allocator keeps it.
    fn to_shared(&self) -> Arc<str>;
}

impl Name for str {
    fn as_str(&self) -> &str {
        self
    }
    fn to_shared(&self) -> Arc<str> {
        Arc::from(self)
    }
}

impl Name for Arc<str> {
    fn as_str(&self) -> &str {
        self
    }
    fn to_shared(&self) -> Arc<str> {
        Arc::clone(self)
    }
}

/// [`allocate`], kept up to date name by name: adding or removing names costs time in the
/// number of names whose probe runs they share, not in the number of names, and the ids are
/// always exactly those [`allocate`] gives the same set.
///
/// Why that holds: with linear probing, every name lands in the run of taken ids (a cluster)
/// that holds its home id, and a cluster's layout depends only on the names whose home is in
/// it, placed in sorted order. A change can only rearrange the clusters it touches, so the
/// allocator re-places just their names; if one of them probes into a cluster it did not
/// expect, that cluster joins the re-placed names and the placement starts again.
///
/// Its maps are persistent (`imbl`): a clone costs a reference count and shares every node of
/// them until one side changes, so the nodes of a central controller that give the same
/// names the same ids hold one allocator between them ([`Allocator::same_as`]).
#[derive(Debug, Clone)]
pub struct Allocator {
    max: u32,
    /// Each name is held once, shared by both maps.
    by_name: Ids,
    by_id: imbl::OrdMap<u32, Arc<str>>,
    /// Names that found no free id (only when there are more names than ids).
    unassigned: imbl::OrdSet<Arc<str>>,
    /// The sum of a hash of every name it holds, kept as names come and go: two allocators
    /// with other names almost surely differ in it ([`Allocator::same_names`]).
    fingerprint: u64,
}

/// Every name's id ([`Allocator::ids`]).
pub type Ids = imbl::OrdMap<Arc<str>, u32>;

impl Allocator {
    /// An allocator of ids in `1..=max` with no names.
    pub fn new(max: u32) -> Self {
        Self {
            max,
            by_name: Ids::new(),
            by_id: imbl::OrdMap::new(),
            unassigned: imbl::OrdSet::new(),
            fingerprint: 0,
        }
    }

    /// Every name's id.
    pub fn ids(&self) -> &Ids {
        &self.by_name
    }

    /// Whether `other` holds the same names, and so gives each the same id (ids depend on
    /// the set of names only): at once for the same allocator, else by comparing the names
    /// when their fingerprints agree.
    pub fn same_names(&self, other: &Self) -> bool {
        self.same_as(other)
            || (self.max == other.max
                && self.fingerprint == other.fingerprint
                && self.by_name == other.by_name
                && self.unassigned == other.unassigned)
    }

    /// Whether `other` is this allocator or a clone of it that neither side has changed since:
    /// then both give every name the same id (found in constant time, not by comparing).
    pub fn same_as(&self, other: &Self) -> bool {
        self.max == other.max
            && self.by_name.ptr_eq(&other.by_name)
            && self.by_id.ptr_eq(&other.by_id)
            && self.unassigned.ptr_eq(&other.unassigned)
    }

    /// How many names have ids.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether no name has an id.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    fn home(&self, name: &str) -> u32 {
        (fnv1a(name.as_bytes()) % u64::from(self.max)) as u32 + 1
    }

    fn next(&self, id: u32) -> u32 {
        if id == self.max { 1 } else { id + 1 }
    }

    fn prev(&self, id: u32) -> u32 {
        if id == 1 { self.max } else { id - 1 }
    }

    /// The names in the run of taken ids that holds `id` (none if `id` is free).
    fn cluster(&self, id: u32, out: &mut BTreeSet<Arc<str>>) {
        if !self.by_id.contains_key(&id) {
            return;
        }
        // At least one id is free (see `update`), so both walks end.
        let mut start = id;
        while self.by_id.contains_key(&self.prev(start)) {
            start = self.prev(start);
        }
        let mut at = start;
        while let Some(name) = self.by_id.get(&at) {
            out.insert(Arc::clone(name));
            at = self.next(at);
        }
    }

    /// Removes `removed` and adds `added` (names already present or absent are ignored), and
    /// returns the names that kept an id but got another. A name given shared
    /// (`&Arc<str>`) is kept as it is, so every node's allocator holds the one copy of it
    /// that the render made; a `&str` is copied.
    pub fn update<'a, N: Name + ?Sized + 'a>(
        &mut self,
        removed: impl IntoIterator<Item = &'a str>,
        added: impl IntoIterator<Item = &'a N>,
    ) -> BTreeSet<Arc<str>> {
        let known = |n: &str| self.by_name.contains_key(n) || self.unassigned.contains(n);
        let removed: BTreeSet<&str> = removed.into_iter().filter(|n| known(n)).collect();
        let added: BTreeMap<&str, &N> = added
            .into_iter()
            .map(|n| (n.as_str(), n))
            .filter(|(n, _)| !known(n) || removed.contains(n))
            .collect();
        for name in &removed {
            self.fingerprint = self.fingerprint.wrapping_sub(fingerprint_of(*name));
        }
        for name in added.keys() {
            self.fingerprint = self.fingerprint.wrapping_add(fingerprint_of(*name));
        }
        let len = self.by_name.len() + self.unassigned.len() - removed.len() + added.len();
        // More names coming than there are (a first load): placing them all at once is a
        // sort and one pass, where placing them one cluster at a time searches ordered maps
        // for every name (30 ms of a 30,000-service load's 130 ms before its first bundle).
        if len >= self.max as usize
            || !self.unassigned.is_empty()
            || added.len() > self.by_name.len()
        {
            return self.reallocate(&removed, &added);
        }
        if removed.is_empty() && self.place_at_homes(&added) {
            return BTreeSet::new();
        }
        // Taking a name out leaves a hole in its cluster: the names after it may move back.
        let mut before: BTreeMap<Arc<str>, u32> = BTreeMap::new();
        let mut holes = Vec::new();
        for name in &removed {
            if let Some((name, id)) = self.by_name.remove_with_key(*name) {
                self.by_id.remove(&id);
                before.insert(name, id);
                holes.push(id);
            }
        }
        let mut pending: BTreeSet<Arc<str>> = BTreeSet::new();
        for id in holes {
            self.cluster(self.next(id), &mut pending);
        }
        // A new name goes into the cluster that holds its home, in sorted order.
        for (name, shared) in &added {
            self.cluster(self.home(name), &mut pending);
            pending.insert(shared.to_shared());
        }
        self.unplace(&pending, &mut before);
        loop {
            match self.place(&pending) {
                Ok(placed) => {
                    for (id, name) in placed {
                        self.by_name.insert(Arc::clone(name), id);
                        self.by_id.insert(id, Arc::clone(name));
                    }
                    break;
                }
                // A probe ran into a cluster of names not being placed: place them too.
                Err(id) => {
                    let mut more = BTreeSet::new();
                    self.cluster(id, &mut more);
                    self.unplace(&more, &mut before);
                    pending.extend(more);
                }
            }
        }
        before
            .into_iter()
            .filter(|(name, id)| self.by_name.get(name).is_some_and(|now| now != id))
            .map(|(name, _)| name)
            .collect()
    }

    /// Adds `added` (none of them held) each at its home id, if every home is free and no two
    /// share one, and says whether it did; else changes nothing. Then nothing else moves, so
    /// this is [`allocate`]'s result too: every held name's probe run is made of taken ids and
    /// holds no free home, so it takes the same id whatever the new names' places in the
    /// sorted order, and each new name finds its home free of the others. The common case of
    /// names added to a sparse range (a part of a bulk load), at one lookup and two inserts a
    /// name instead of the cluster search's sets and maps.
    fn place_at_homes<N: Name + ?Sized>(&mut self, added: &BTreeMap<&str, &N>) -> bool {
        let mut homes: Vec<(u32, &N)> = added
            .iter()
            .map(|(name, shared)| (self.home(name), *shared))
            .collect();
        homes.sort_unstable_by_key(|(id, _)| *id);
        let clear = homes.windows(2).all(|w| w[0].0 != w[1].0)
            && homes.iter().all(|(id, _)| !self.by_id.contains_key(id));
        if clear {
            for (id, shared) in homes {
                let name = shared.to_shared();
                self.by_name.insert(Arc::clone(&name), id);
                self.by_id.insert(id, name);
            }
        }
        clear
    }

    /// Frees the ids of `names`, remembering them in `before`.
    fn unplace(&mut self, names: &BTreeSet<Arc<str>>, before: &mut BTreeMap<Arc<str>, u32>) {
        for name in names {
            if let Some(id) = self.by_name.remove(name) {
                self.by_id.remove(&id);
                before.insert(Arc::clone(name), id);
            }
        }
    }

    /// Places `names` in sorted order by linear probing over the free ids, or returns the
    /// first taken id a probe ran into.
    fn place<'a>(&self, names: &'a BTreeSet<Arc<str>>) -> Result<BTreeMap<u32, &'a Arc<str>>, u32> {
        let mut placed: BTreeMap<u32, &Arc<str>> = BTreeMap::new();
        for name in names {
            let mut id = self.home(name);
            loop {
                if self.by_id.contains_key(&id) {
                    return Err(id);
                }
                if !placed.contains_key(&id) {
                    break;
                }
                id = self.next(id);
            }
            placed.insert(id, name);
        }
        Ok(placed)
    }

    /// The whole allocation again, for when the ids run out or most names are new: the names
    /// sorted once and placed in one pass (what [`allocate`] does), the maps built from
    /// sorted runs.
    fn reallocate<N: Name + ?Sized>(
        &mut self,
        removed: &BTreeSet<&str>,
        added: &BTreeMap<&str, &N>,
    ) -> BTreeSet<Arc<str>> {
        let mut names: Vec<Arc<str>> = self
            .by_name
            .keys()
            .chain(&self.unassigned)
            .filter(|n| !removed.contains(&***n))
            .cloned()
            .chain(added.values().map(|n| n.to_shared()))
            .collect();
        names.sort_unstable();
        names.dedup();
        let ids = place_sorted(&names, self.max);
        let mut by_name = Vec::with_capacity(names.len());
        let mut unassigned = Vec::new();
        for (name, id) in names.into_iter().zip(ids) {
            match id {
                Some(id) => by_name.push((name, id)),
                None => unassigned.push(name),
            }
        }
        // The names that kept an id but got another: both lists are sorted by name.
        let mut moved = BTreeSet::new();
        let mut now = by_name.iter().peekable();
        for (name, id) in &self.by_name {
            while now.next_if(|(n, _)| n < name).is_some() {}
            if let Some((_, new_id)) = now.peek().filter(|(n, _)| n == name) {
                if new_id != id {
                    moved.insert(Arc::clone(name));
                }
            }
        }
        let mut by_id: Vec<(u32, Arc<str>)> =
            by_name.iter().map(|(n, id)| (*id, Arc::clone(n))).collect();
        by_id.sort_unstable_by_key(|(id, _)| *id);
        self.by_id = by_id.into_iter().collect();
        self.by_name = by_name.into_iter().collect();
        self.unassigned = unassigned.into_iter().collect();
        moved
    }
}

/// `value`'s part of a fingerprint that sums it with others (an [`Allocator`]'s names, the
/// shards' shared owner maps): a well-mixed hash with a fixed seed. Fingerprints are only
/// compared within one process, so the seed is any constant.
pub(crate) fn fingerprint_of<T: std::hash::Hash + ?Sized>(value: &T) -> u64 {
    use std::hash::BuildHasher;
    foldhash::quality::FixedState::with_seed(0x5356_464c_4f57_0001).hash_one(value)
}

/// The placement of [`allocate`] (and of [`Allocator`] when it places every name again):
/// each of `names` (sorted, distinct) gets its home id or the next free one after it, in
/// order; `None` once the ids run out.
fn place_sorted<S: AsRef<str>>(names: &[S], max: u32) -> Vec<Option<u32>> {
    let mut taken: std::collections::HashSet<u32> =
        std::collections::HashSet::with_capacity(names.len().min(max as usize));
    names
        .iter()
        .map(|name| {
            if taken.len() as u64 >= u64::from(max) {
                return None;
            }
            // `max` is at least 1 here (else `taken` is full), so the modulo is defined.
            let mut id = (fnv1a(name.as_ref().as_bytes()) % u64::from(max)) as u32 + 1;
            while taken.contains(&id) {
                id = if id == max { 1 } else { id + 1 };
            }
            taken.insert(id);
            Some(id)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn ids_depend_on_the_set_of_names_not_their_order() {
        let a = allocate(["x", "y", "z"], 1000);
        let b = allocate(["z", "x", "y"], 1000);
        assert_eq!(a, b);
        assert!(a.values().all(|&id| (1..=1000).contains(&id)));
    }

    #[test]
    fn collisions_probe_and_adding_a_name_moves_no_other() {
        // With max = 3 every name collides with something; all still get distinct ids.
        let ids = allocate(["a", "b", "c"], 3);
        let distinct: BTreeSet<u32> = ids.values().copied().collect();
        assert_eq!(distinct.len(), 3);
        let before = allocate(["svc-1", "svc-2"], 1 << 20);
        let after = allocate(["svc-1", "svc-2", "svc-3"], 1 << 20);
        assert_eq!(before["svc-1"], after["svc-1"]);
        assert_eq!(before["svc-2"], after["svc-2"]);
    }

    #[test]
    fn more_names_than_ids_leaves_the_rest_unassigned() {
        assert_eq!(allocate(["a", "b", "c"], 2).len(), 2);
        assert!(allocate(["a"], 0).is_empty());
    }

    /// A first load of many names takes the one-pass placement; the names then added and
    /// removed a few at a time take the incremental one; both give `allocate`'s ids, and the
    /// names reported moved are exactly those whose id changed. The range is tight, so
    /// clusters are long.
    #[test]
    fn a_bulk_load_then_small_steps_equal_a_full_allocation() {
        let max = 2_500;
        let name = |i: u32| format!("ns/svc-{i}:80/TCP");
        let mut alloc = Allocator::new(max);
        let first: Vec<String> = (0..2_000).map(name).collect();
        let moved = alloc.update([], first.iter().map(String::as_str));
        assert!(moved.is_empty());
        let mut names: BTreeSet<String> = first.into_iter().collect();
        let ids = |a: &Allocator| -> BTreeMap<String, u32> {
            a.ids().iter().map(|(n, id)| (n.to_string(), *id)).collect()
        };
        assert_eq!(ids(&alloc), allocate(names.iter().map(String::as_str), max));
        for step in 0..50u32 {
            let removed: Vec<String> = (0..3).map(|k| name(step * 37 + k * 11)).collect();
            let added: Vec<String> = (0..3).map(|k| name(2_000 + step * 3 + k)).collect();
            let previous = ids(&alloc);
            let moved = alloc.update(
                removed.iter().map(String::as_str),
                added.iter().map(String::as_str),
            );
            for n in &removed {
                names.remove(n);
            }
            names.extend(added);
            let want = allocate(names.iter().map(String::as_str), max);
            assert_eq!(ids(&alloc), want, "step {step}");
            let want_moved: BTreeSet<String> = previous
                .iter()
                .filter(|(n, id)| want.get(*n).is_some_and(|now| now != *id))
                .map(|(n, _)| n.clone())
                .collect();
            let moved: BTreeSet<String> = moved.iter().map(|n| n.to_string()).collect();
            assert_eq!(moved, want_moved, "step {step}");
        }
    }

    proptest::proptest! {
        /// The incremental allocator gives exactly `allocate`'s ids after every step, and
        /// reports exactly the names whose id changed; small ranges force long probe runs.
        #[test]
        fn the_allocator_always_equals_a_full_allocation(
            max in 1u32..40,
            steps in proptest::collection::vec(
                (proptest::collection::vec(0u8..60, 0..6), proptest::collection::vec(0u8..60, 0..6)),
                1..30,
            ),
        ) {
            let mut alloc = Allocator::new(max);
            let mut names: BTreeSet<String> = BTreeSet::new();
            for (removed, added) in steps {
                let removed: Vec<String> = removed.iter().map(|n| format!("svc-{n}")).collect();
                let added: Vec<String> = added.iter().map(|n| format!("svc-{n}")).collect();
                let previous = alloc.ids().clone();
                let moved = alloc.update(
                    removed.iter().map(String::as_str),
                    added.iter().map(String::as_str),
                );
                for n in &removed {
                    names.remove(n);
                }
                names.extend(added.iter().cloned());
                let want = allocate(names.iter().map(String::as_str), max);
                let got: BTreeMap<String, u32> =
                    alloc.ids().iter().map(|(n, id)| (n.to_string(), *id)).collect();
                proptest::prop_assert_eq!(&got, &want);
                let want_moved: BTreeSet<Arc<str>> = previous
                    .iter()
                    .filter(|(n, id)| want.get(&***n).is_some_and(|now| now != *id))
                    .map(|(n, _)| Arc::clone(n))
                    .collect();
                proptest::prop_assert_eq!(moved, want_moved);
                // The same names placed at once: the same allocator, found by its names.
                let mut fresh = Allocator::new(max);
                fresh.update(std::iter::empty(), names.iter().map(String::as_str));
                proptest::prop_assert!(alloc.same_names(&fresh) && fresh.same_names(&alloc));
                let mut other = Allocator::new(max);
                other.update(std::iter::empty(), names.iter().map(String::as_str).chain(["other"]));
                proptest::prop_assert!(!alloc.same_names(&other));
            }
        }
    }
}
