//! Byte mutations for fuzzing decoders with proptest: real inputs, bits flipped, bytes set,
//! inserted and removed, cut short, or spliced with another input. Shared by the decoders'
//! fuzz tests (`openflow/tests/fuzz.rs` includes this file by path; `tests/fuzz_inputs.rs`
//! uses it as `ovs_tests::fuzz`). Depends on nothing but `proptest`.

use proptest::prelude::*;

/// One change to an input.
#[derive(Debug, Clone)]
pub enum Mutation {
    /// Flip bit `.1` of the byte at `.0` (modulo the length).
    Flip(usize, u8),
    /// Set the byte at `.0` to `.1`.
    Set(usize, u8),
    /// Insert bytes at `.0`.
    Insert(usize, Vec<u8>),
    /// Remove up to `.1` bytes at `.0`.
    Remove(usize, usize),
    /// Cut at `.0`.
    Truncate(usize),
    /// Append the tail of corpus input `.0` from `.1`.
    Splice(usize, usize),
}

/// Any mutation.
pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Mutation::Flip(p, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(p, v)| Mutation::Set(p, v)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(p, b)| Mutation::Insert(p, b)),
        (any::<usize>(), 1usize..16).prop_map(|(p, n)| Mutation::Remove(p, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>()).prop_map(|(o, p)| Mutation::Splice(o, p)),
    ]
}

/// `seed` changed by `ms`, splicing from `corpus`.
pub fn mutate(seed: &[u8], ms: &[Mutation], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut b = seed.to_vec();
    let at = |p: usize, len: usize| if len == 0 { 0 } else { p % len };
    for m in ms {
        match m {
            Mutation::Flip(p, bit) if !b.is_empty() => {
                let i = at(*p, b.len());
                b[i] ^= 1 << bit;
            }
            Mutation::Set(p, v) if !b.is_empty() => {
                let i = at(*p, b.len());
                b[i] = *v;
            }
            Mutation::Insert(p, bytes) => {
                let i = at(*p, b.len() + 1);
                b.splice(i..i, bytes.iter().copied());
            }
            Mutation::Remove(p, n) if !b.is_empty() => {
                let i = at(*p, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Truncate(p) => {
                let len = at(*p, b.len() + 1);
                b.truncate(len);
            }
            Mutation::Splice(other, p) if !corpus.is_empty() => {
                let o = &corpus[other % corpus.len()];
                let from = at(*p, o.len());
                b.extend_from_slice(&o[from..]);
            }
            _ => {}
        }
    }
    b
}

/// How many cases a fuzz test runs: `default`, or `PROPTEST_CASES` for a longer run.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
