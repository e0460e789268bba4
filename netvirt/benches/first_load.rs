//! A node's first load in process: what the daemon's engine does between the model and the
//! socket when every service is new (`Shards::begin_update`, then `continue_update` a
//! [`RENDER_PART`] at a time; each part's steps as OpenFlow messages, each inside a bundle
//! add, encoded into one buffer as the switch session writes them), for S ClusterIP services
//! × E endpoints on one node.
//!
//! The anchor, in the same run: encoding the same messages, built beforehand, into the same
//! kind of buffer: the codec's share alone, which no render can go below.
//!
//! Each figure is the best of [`RUNS`] runs (the first run of each size also pays the page
//! faults of fresh memory, which the e2e bench measures in the daemon).
//!
//! `cargo bench -p netvirt --bench first_load`; `SVCFLOW_LOAD_S` and `SVCFLOW_LOAD_E`
//! (comma-separated) pick the sizes (default 1,000, 10,000 and 30,000 × 2 and 10).

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

use std::time::{Duration, Instant};

use netvirt::config::Config;
use netvirt::engine::RENDER_PART;
use netvirt::shards::{Renders, Shards};
use openflow::msg::{Body, BundleAdd, Message};
use openflow::wire::Writer;

mod common;
use common::{bindings, env_list, model, node};

/// The daemon's allocator (`svcflow/src/main.rs`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs of each measurement; the best is reported.
const RUNS: usize = 5;

/// The buffer's size at which it is emptied, as a session's is once written to the socket.
const FLUSH: usize = 1 << 20;

/// Appends `body` inside a bundle add to `buf`, as `Session::write_bundle_add` does; returns
/// its length.
fn write(buf: &mut Vec<u8>, body: Body) -> usize {
    let add = BundleAdd {
        bundle_id: 1,
        flags: 0,
        message: Box::new(Message::new(7, body)),
        properties: Vec::new(),
    };
    let mut w = Writer::from_vec(std::mem::take(buf));
    let start = w.len();
    Message::new(7, Body::BundleAdd(add))
        .encode_into(&mut w)
        .unwrap();
    let len = w.len() - start;
    *buf = w.into_vec();
    if buf.len() > FLUSH {
        buf.clear();
    }
    len
}

fn main() {
    let sizes = env_list("SVCFLOW_LOAD_S", &[1_000, 10_000, 30_000]);
    let eps = env_list("SVCFLOW_LOAD_E", &[2, 10]);
    let config = Config::default();
    let (n, b) = (node(0), bindings(0));
    println!(
        "| S × E | messages | MB encoded | first load (ms) | per service (µs) | anchor: encoding the same messages (ms) | ratio |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &s in &sizes {
        for &e in &eps {
            let m = model(s as u32, e as u32, 1);
            let mut best = Duration::MAX;
            let mut bodies: Vec<Body> = Vec::new();
            let (mut messages, mut bytes) = (0, 0);
            for run in 0..RUNS {
                let mut buf: Vec<u8> = Vec::new();
                let started = Instant::now();
                let renders = Renders::new();
                let mut shards = Shards::sharing(&renders);
                let (mut update, first) = shards.begin_update(&n, &m, &config, &b);
                let mut part = Some(first);
                (messages, bytes) = (0, 0);
                while let Some(pending) = part.take() {
                    for step in shards.steps(&pending) {
                        let body = netvirt::apply::message(&step);
                        if run == 0 {
                            bodies.push(body.clone());
                        }
                        bytes += write(&mut buf, body);
                        messages += 1;
                    }
                    drop(pending);
                    part = shards.continue_update(&mut update, RENDER_PART);
                }
                drop(update);
                best = best.min(started.elapsed());
                drop(shards);
            }
            let mut anchor = Duration::MAX;
            for _ in 0..RUNS {
                let mut buf: Vec<u8> = Vec::new();
                let copies = bodies.clone();
                let started = Instant::now();
                for body in copies {
                    write(&mut buf, body);
                }
                anchor = anchor.min(started.elapsed());
            }
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            println!(
                "| {s} × {e} | {messages} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                bytes as f64 / 1e6,
                ms(best),
                ms(best) * 1e3 / s as f64,
                ms(anchor),
                ms(best) / ms(anchor),
            );
        }
    }
}
