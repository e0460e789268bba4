//! Where one controller's memory goes: S services × E endpoints rendered for N nodes by
//! `netvirt::shards::Shards` (one per node, as the daemon keeps one per switch), counted by a
//! counting global allocator, so the figures are live heap bytes, not RSS. The anchor is the
//! same state for one node, in the same run: a central controller should pay much less than N
//! times it.
//!
//! "Services rendered / taken" counts the services the nodes planned and rendered, and those a
//! node took as another rendered them (`Renders::counts`): one render per service whatever N,
//! when nothing in the service can depend on the node.
//!
//! The last column is what one node's update holds while its steps are sent, when every
//! service renders again (a changed port binding: here the gateway's port number) and
//! renders the same flows.
//!
//! The nodes render their first update in turns, [`TURN`] parts of it each per turn, as the
//! daemon's node tasks take turns between bundles. "Group ids placed / taken / joined" counts
//! how often a node placed its group names itself, took another node's change of its
//! allocator, and found its allocator equal to another's at the end of an update and shared
//! it (`netvirt::shards::Renders`).
//!
//! `cargo bench -p netvirt --bench memory`; `SVCFLOW_MEM_S`, `SVCFLOW_MEM_E` and
//! `SVCFLOW_MEM_N` (comma-separated) pick the sizes, `SVCFLOW_MEM_TURN` the parts per turn
//! (0: each node's whole update before the next node's).

use std::time::Instant;

use netvirt::config::Config;
use netvirt::desired::NodeBindings;
use netvirt::engine::RENDER_PART;
use netvirt::model::Node;
use netvirt::shards::{Renders, Shards};

mod common;
use common::{bindings, env_list, model, node};

/// The daemon's allocator (`svcflow/src/main.rs`), counted, so that the render's times are
/// the daemon's.
#[global_allocator]
static ALLOC: cap::Cap<mimalloc::MiMalloc> = cap::Cap::new(mimalloc::MiMalloc, usize::MAX);

/// Live heap bytes.
fn live() -> usize {
    ALLOC.allocated()
}

/// How many parts of an update ([`RENDER_PART`] services each) a node renders per turn, by
/// default: about one bundle's worth (5,000 messages), after which a node's task in the
/// daemon lets the others run while its switch takes the bundle.
const TURN: usize = 5;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let sizes = env_list("SVCFLOW_MEM_S", &[1_000, 10_000, 30_000]);
    let eps = env_list("SVCFLOW_MEM_E", &[2, 10]);
    let node_counts = env_list("SVCFLOW_MEM_N", &[1, 3, 10]);
    // 0: each node's whole update before the next node's.
    let turn = match env_list("SVCFLOW_MEM_TURN", &[TURN]).first() {
        Some(0) => usize::MAX,
        Some(&t) => t,
        None => TURN,
    };
    let config = Config::default();
    println!(
        "| S × E | N | flows per node | model | desired state, all nodes | per node | per node per flow | render, all nodes | services rendered / taken from another node | group ids placed / taken / joined | a re-render's pending update |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &s in &sizes {
        for &e in &eps {
            for &n in &node_counts {
                let base = live();
                let m = model(s as u32, e as u32, n);
                let model_bytes = live() - base;
                let before = live();
                let started = Instant::now();
                let renders = Renders::new();
                let nodes: Vec<Node> = (0..n).map(node).collect();
                let binds: Vec<NodeBindings> = (0..n).map(bindings).collect();
                let mut all: Vec<Shards> = (0..n).map(|_| Shards::sharing(&renders)).collect();
                // Every node's first update, taken in turns of `TURN` parts per node, as the
                // daemon's node tasks take turns between their bundles.
                let mut updates: Vec<_> = all
                    .iter_mut()
                    .enumerate()
                    .map(|(i, shards)| shards.begin_update(&nodes[i], &m, &config, &binds[i]).0)
                    .collect();
                let mut going = true;
                while going {
                    going = false;
                    for (shards, update) in all.iter_mut().zip(updates.iter_mut()) {
                        for _ in 0..turn {
                            if shards.continue_update(update, RENDER_PART).is_none() {
                                break;
                            }
                            going = true;
                        }
                    }
                }
                drop(updates);
                let took = started.elapsed();
                let state = live() - before;
                let counts = renders.counts();
                let flows = all[0].len().0;
                // Every service of node 0 again, its context changed.
                let mut moved = bindings(0);
                if let Some(gateway) = moved.gateway.as_mut() {
                    gateway.ofport = 3;
                }
                let held = live();
                let pending = all[0].update_pending(&node(0), &m, &config, &moved);
                let pending_bytes = live().saturating_sub(held);
                drop(pending);
                println!(
                    "| {s} × {e} | {n} | {flows} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.0} B | {:.0} ms | {} / {} | {} / {} / {} | {:.1} MiB |",
                    mib(model_bytes),
                    mib(state),
                    mib(state / n),
                    state as f64 / (n * flows) as f64,
                    took.as_secs_f64() * 1e3,
                    counts.rendered,
                    counts.reused,
                    counts.ids_placed,
                    counts.ids_taken,
                    counts.ids_joined,
                    mib(pending_bytes),
                );
                drop(all);
                drop(renders);
                drop(m);
            }
        }
    }
}
