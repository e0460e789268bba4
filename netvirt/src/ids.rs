//! Stable identifiers derived from object identity, so that the same model always gives the
//! same group ids and cookies, and a change to one object does not renumber the others.

use std::collections::{BTreeMap, BTreeSet};

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
    let sorted: BTreeSet<&str> = names.into_iter().collect();
    let mut taken = BTreeSet::new();
    let mut ids = BTreeMap::new();
    if max == 0 {
        return ids;
    }
    for name in sorted {
        // `max` is at least 1, so the modulo is defined; ids run 1..=max.
        if taken.len() as u64 >= u64::from(max) {
            break;
        }
        let mut id = (fnv1a(name.as_bytes()) % u64::from(max)) as u32 + 1;
        while taken.contains(&id) {
            id = if id == max { 1 } else { id + 1 };
        }
        taken.insert(id);
        ids.insert(name.to_string(), id);
    }
    ids
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
}
