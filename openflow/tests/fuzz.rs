//! Mutation fuzzing of the decoders, for a bounded number of cases in every test run: real
//! messages (what `ovs-ofctl` sends for the corpus's flows, groups and commands, and the
//! vectors it cannot send) are mutated (bits flipped, bytes set, inserted and removed, cut
//! short, spliced with another message) and decoded. Whatever happens must be a typed error
//! or a message that prints, re-encodes and decodes back to itself, quickly, never a panic.
//! The session gets the same bytes as a stream, after its handshake.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use openflow::Message;
use openflow::session::{Config, Session};
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let all: Vec<Vec<u8>> = common::all_messages().into_iter().map(|(_, m)| m).collect();
        assert!(all.len() > 100, "{} messages in the corpus", all.len());
        all
    })
}

#[path = "../../ovs-tests/src/fuzz.rs"]
mod mutations;

use mutations::{Mutation, mutation};

/// A corpus message mutated by `ms`; with `fix`, the header's length says the result's
/// length, so the mutations reach the body rather than stopping at the header check.
fn mutate(seed: &[u8], ms: &[Mutation], fix: bool) -> Vec<u8> {
    let mut b = mutations::mutate(seed, ms, corpus());
    if fix && b.len() >= 8 && b.len() <= usize::from(u16::MAX) {
        let len = (b.len() as u16).to_be_bytes();
        b[2] = len[0];
        b[3] = len[1];
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: mutations::cases(3000), ..ProptestConfig::default() })]

    #[test]
    fn mutated_messages_decode_cleanly_or_fail_with_a_typed_error(
        seed in any::<usize>(),
        ms in proptest::collection::vec(mutation(), 1..5),
        fix in any::<bool>(),
    ) {
        let bytes = mutate(&corpus()[seed % corpus().len()], &ms, fix);
        let started = Instant::now();
        if let Ok(msg) = Message::decode(&bytes) {
            let _ = msg.to_string();
            if let Ok(again) = msg.encode() {
                let back = Message::decode(&again);
                prop_assert!(back.is_ok(), "{:?} re-encodes to bytes that do not decode: {:?}", msg, back);
                prop_assert_eq!(back.unwrap(), msg);
            }
        }
        prop_assert!(started.elapsed() < Duration::from_millis(250), "{:?}", started.elapsed());
    }

    #[test]
    fn a_session_fed_mutated_messages_never_panics(
        seeds in proptest::collection::vec((any::<usize>(), proptest::collection::vec(mutation(), 0..3), any::<bool>()), 1..8),
    ) {
        let t0 = std::time::Instant::now();
        let mut s = Session::new(Config::default(), t0);
        let _ = s.poll_transmit();
        // HELLO and FEATURES_REPLY first, as a switch would send them.
        let hello = Message::new(1, openflow::Body::Hello(openflow::msg::Hello {
            version: 4,
            bitmap: Some(vec![0b1_0000]),
            other: Vec::new(),
        }));
        s.handle_bytes(&hello.encode().unwrap(), t0);
        let xid = s
            .poll_transmit()
            .and_then(|b| Message::decode(&b).ok())
            .map_or(0, |m| m.xid);
        let features = Message::new(xid, openflow::Body::FeaturesReply(openflow::msg::Features {
            datapath_id: 1,
            n_buffers: 0,
            n_tables: 254,
            auxiliary_id: 0,
            capabilities: 0,
            reserved: 0,
        }));
        s.handle_bytes(&features.encode().unwrap(), t0);
        let mut stream = Vec::new();
        for (seed, ms, fix) in &seeds {
            stream.extend(mutate(&corpus()[seed % corpus().len()], ms, *fix));
        }
        // In pieces, as a socket delivers them.
        for piece in stream.chunks(97) {
            s.handle_bytes(piece, t0);
            while s.poll_event().is_some() {}
            let _ = s.poll_transmit();
        }
        s.handle_timeout(t0 + Duration::from_secs(60));
        while s.poll_event().is_some() {}
    }
}
