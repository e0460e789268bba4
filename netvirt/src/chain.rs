//! Big services: splitting a service port's endpoints over chained select groups.
//!
//! One OpenFlow message is at most 65,535 bytes, and one bucket of ours (two register loads and
//! a resubmit) takes 80, so a group_mod holds at most 818 buckets. A service port with more
//! endpoints gets several select groups ("parts"), and its table-40 flow picks a part first:
//! `multipath` hashes the connection into a slot in `0..W`, where `W` is the total weight, and
//! table 42 maps slot ranges to parts, each part taking as many slots as its weight. A part then
//! picks its endpoint by weight as usual, so every endpoint's share stays `weight / W`.
//!
//! Nesting select groups would be simpler, but in the userspace datapath both levels hash the
//! same `dp_hash`, and a nested group then reaches only some of its buckets (measured: 4 of 8).
//! `multipath` hashes the 5-tuple with its own basis, independent of the group's hash.
//!
//! Endpoints are assigned to parts by a hash of their address and port, so one endpoint's
//! change rewrites only its own part (plus the few slot-range flows); the number of parts is a
//! power of two that only changes when the service doubles or halves in size.

use std::net::IpAddr;

use crate::ids::fnv1a;
use crate::resolve::Backend;

/// At most this many buckets in one group: a group_mod of 818 buckets of 80 bytes is the
/// OpenFlow limit. `Config::group_buckets_max` may set a lower limit.
pub const GROUP_BUCKETS_MAX: usize = 800;

/// The largest number of `multipath` slots (`n_links` is at most 65,536).
pub const SLOTS_MAX: u64 = 1 << 16;

/// The `multipath` hash basis: any constant, but not the group's own hash.
pub const MULTIPATH_BASIS: u16 = 0x5356;

/// At most this many buckets in one group of IPv6 endpoints: an IPv6 bucket loads four
/// registers where an IPv4 one loads one (`desired::services::select_group`), so it is about
/// twice as long. `netvirt/tests/group_limits.rs` checks both limits with the real encoder.
pub const GROUP_BUCKETS_MAX_V6: usize = 400;

/// The bucket limit for endpoints of `ip`'s family.
pub fn buckets_max(ip: &IpAddr) -> usize {
    match ip {
        IpAddr::V4(_) => GROUP_BUCKETS_MAX,
        IpAddr::V6(_) => GROUP_BUCKETS_MAX_V6,
    }
}

/// Splits `backends` into parts of at most `max` buckets, or returns `None` when they fit in
/// one group. Parts keep the input order and are never empty. The number of parts is a power
/// of two aiming at two thirds of `max` per part, so that a part that hashes above average
/// still fits.
pub fn partition(backends: &[Backend], max: usize) -> Option<Vec<Vec<Backend>>> {
    let limit = backends
        .first()
        .map_or(GROUP_BUCKETS_MAX, |b| buckets_max(&b.ip));
    let max = max.clamp(1, limit);
    if backends.len() <= max {
        return None;
    }
    let target = (max * 2 / 3).max(1);
    let mut count = backends.len().div_ceil(target).next_power_of_two();
    loop {
        let mut parts: Vec<Vec<Backend>> = vec![Vec::new(); count];
        for b in backends {
            parts[part_of(b, count)].push(*b);
        }
        let fits = parts.iter().all(|p| p.len() <= max);
        if fits || count >= backends.len() {
            parts.retain(|p| !p.is_empty());
            return Some(parts);
        }
        count *= 2;
    }
}

/// Which of `count` parts an endpoint belongs to: a hash of its address and port.
fn part_of(backend: &Backend, count: usize) -> usize {
    // Address then port, big-endian: 6 bytes for IPv4 (as before IPv6 existed, so IPv4 parts
    // keep their endpoints), 18 for IPv6.
    let mut key = [0u8; 18];
    let len = match backend.ip {
        IpAddr::V4(ip) => {
            key[..4].copy_from_slice(&ip.octets());
            4
        }
        IpAddr::V6(ip) => {
            key[..16].copy_from_slice(&ip.octets());
            16
        }
    };
    key[len..len + 2].copy_from_slice(&backend.port.to_be_bytes());
    (fnv1a(&key[..len + 2]) % count as u64) as usize
}

/// The slots of each part: `(n_links, ranges)`, where `n_links` is the total number of slots
/// and `ranges[k]` the `(value, mask)` register matches that cover part `k`'s slots. A part
/// gets as many slots as its weight; when the total weight exceeds [`SLOTS_MAX`], the weights
/// are scaled down (each part keeps at least one slot) and `exact` is false.
pub fn slots(weights: &[u64]) -> Slots {
    let total: u64 = weights.iter().sum();
    let (scaled, exact) = if total <= SLOTS_MAX {
        (weights.to_vec(), true)
    } else {
        let budget = SLOTS_MAX - weights.len() as u64;
        let scaled = weights
            .iter()
            .map(|w| (w * budget / total).max(1))
            .collect();
        (scaled, false)
    };
    let mut ranges = Vec::with_capacity(scaled.len());
    let mut lo = 0u64;
    for w in &scaled {
        ranges.push(prefixes(lo, lo + w));
        lo += w;
    }
    Slots {
        n_links: lo,
        ranges,
        exact,
    }
}

/// See [`slots`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slots {
    /// Total slots, the `multipath` `n_links`.
    pub n_links: u64,
    /// Per part, `(value, mask)` matches on the slot register.
    pub ranges: Vec<Vec<(u32, u32)>>,
    /// Whether each part's share equals its weight's share exactly.
    pub exact: bool,
}

/// The fewest `(value, mask)` pairs whose matches together are exactly `lo..hi`.
pub fn prefixes(mut lo: u64, hi: u64) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    while lo < hi {
        // The largest aligned power-of-two block that starts at `lo` and fits.
        let mut size = if lo == 0 {
            SLOTS_MAX
        } else {
            1 << lo.trailing_zeros()
        };
        while lo + size > hi {
            size /= 2;
        }
        out.push((lo as u32, !((size - 1) as u32)));
        lo += size;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::IpAddr;

    fn backends(n: usize) -> Vec<Backend> {
        (0..n)
            .map(|i| Backend {
                ip: IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i as u32)),
                port: 8080,
                weight: 1,
            })
            .collect()
    }

    #[test]
    fn small_services_stay_in_one_group() {
        assert_eq!(partition(&backends(1), GROUP_BUCKETS_MAX), None);
        assert_eq!(
            partition(&backends(GROUP_BUCKETS_MAX), GROUP_BUCKETS_MAX),
            None
        );
    }

    #[test]
    fn big_services_split_into_bounded_parts_that_keep_every_endpoint() {
        for n in [GROUP_BUCKETS_MAX + 1, 5_000, 20_000] {
            let all = backends(n);
            let parts = partition(&all, GROUP_BUCKETS_MAX).unwrap();
            assert!(parts.len() >= 2, "{n}");
            assert!(
                parts
                    .iter()
                    .all(|p| !p.is_empty() && p.len() <= GROUP_BUCKETS_MAX)
            );
            let mut seen: Vec<Backend> = parts.concat();
            seen.sort();
            assert_eq!(seen, all, "{n}: every endpoint in exactly one part");
        }
    }

    #[test]
    fn a_low_limit_splits_small_services_too() {
        let parts = partition(&backends(8), 3).unwrap();
        assert!(parts.len() >= 3);
        assert!(parts.iter().all(|p| (1..=3).contains(&p.len())));
    }

    #[test]
    fn one_endpoint_change_touches_one_part() {
        let mut all = backends(5_000);
        let before = partition(&all, GROUP_BUCKETS_MAX).unwrap();
        all.remove(1234);
        let after = partition(&all, GROUP_BUCKETS_MAX).unwrap();
        assert_eq!(before.len(), after.len());
        let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        assert_eq!(changed, 1);
    }

    #[test]
    fn slot_ranges_follow_the_weights() {
        let s = slots(&[3, 5]);
        assert_eq!(s.n_links, 8);
        assert!(s.exact);
        assert_eq!(s.ranges[0], vec![(0, !1), (2, !0)]);
        assert_eq!(s.ranges[1], vec![(3, !0), (4, !3)]);
    }

    #[test]
    fn oversized_weights_are_scaled_and_say_so() {
        let s = slots(&[60_000, 60_000, 1]);
        assert!(!s.exact);
        assert!(s.n_links <= SLOTS_MAX);
        assert!(s.ranges.iter().all(|r| !r.is_empty()));
    }

    proptest! {
        #[test]
        fn prefixes_cover_exactly_the_range(lo in 0u64..SLOTS_MAX, len in 0u64..SLOTS_MAX) {
            let hi = (lo + len).min(SLOTS_MAX);
            let ps = prefixes(lo, hi);
            prop_assert!(ps.len() <= 32);
            let covered = |x: u64| ps.iter().any(|&(v, m)| (x as u32) & m == v);
            // Check the edges and a sample inside and outside.
            for x in [lo, hi.saturating_sub(1), lo.saturating_sub(1), hi, (lo + hi) / 2] {
                if x < SLOTS_MAX {
                    prop_assert_eq!(covered(x), (lo..hi).contains(&x), "x={}", x);
                }
            }
            let total: u64 = ps.iter().map(|&(_, m)| u64::from(!m) + 1).sum();
            prop_assert_eq!(total, hi - lo);
        }
    }
}
