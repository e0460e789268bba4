//! Flow install speed: our OpenFlow session versus `ovs-ofctl --bundle add-flows`, against a
//! real `ovs-vswitchd` in an `ovs_tests::Sandbox`.
//!
//! For each N it installs N distinct flows (`table=0,priority=100,ip,nw_dst=10.x.y.z
//! actions=output:1`) three ways, each timed until the switch confirmed them, and checks the
//! count afterwards:
//! - ours, in bundles: `FlowMod`s encoded by the codec, sent through the session as bundles of
//!   1,000, 5,000, 20,000 and N messages (all bundles of a run pipelined), then one barrier;
//!   the fastest size is reported;
//! - ours, plain: the same flow_mods pipelined outside any bundle, then one barrier;
//! - `ovs-ofctl -O OpenFlow13 --bundle add-flows` from a text file written beforehand.
//!
//! Run: `cargo bench -p ovs-tests --bench session_install`. Environment:
//! `SVCFLOW_BENCH_N=10000,50000` picks the sizes (default 10000,50000,200000),
//! `SVCFLOW_BENCH_REPS` the repetitions per measurement (default 3; the median is printed),
//! `SVCFLOW_BENCH_BUNDLE=5000` a single bundle size instead of trying several.
//! Flow construction and the ovs-ofctl input file are prepared outside the timed part; our
//! encoding is inside it, as ovs-ofctl's text parsing is inside its.

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

use std::time::{Duration, Instant};

use openflow::Field;
use openflow::action::Action;
use openflow::driver::{self, DriverConfig, FlowFilter, SwitchHandle};
use openflow::instruction::Instruction;
use openflow::msg::{Body, FlowMod};
use openflow::oxm::Match;
use ovs_tests::Sandbox;

const BR: &str = "br-int";
const COOKIE: u64 = 0x5e55;

fn flow(n: u32) -> Body {
    let match_ = Match::new()
        .with(Field::EthType, 0x0800u16)
        .with(Field::Ipv4Dst, 0x0a00_0000 | (n & 0x00ff_ffff));
    Body::FlowMod(FlowMod {
        priority: 100,
        cookie: COOKIE,
        match_,
        instructions: vec![Instruction::ApplyActions(vec![Action::output(1)])].into(),
        ..FlowMod::default()
    })
}

fn flow_line(n: u32) -> String {
    let n = n & 0x00ff_ffff;
    format!(
        "cookie={COOKIE:#x},table=0,priority=100,ip,nw_dst=10.{}.{}.{},actions=output:1",
        n >> 16,
        (n >> 8) & 0xff,
        n & 0xff
    )
}

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

struct Bench {
    sb: Sandbox,
    sw: SwitchHandle,
}

impl Bench {
    async fn count(&self) -> usize {
        let all = FlowFilter {
            table_id: Some(0),
            cookie: COOKIE,
            cookie_mask: u64::MAX,
        };
        self.sw.dump_flows(all).await.unwrap().len()
    }

    async fn clear(&self) {
        tokio::task::block_in_place(|| self.sb.ofctl("del-flows", BR, &[])).unwrap();
        self.sw.barrier().await.unwrap();
        assert_eq!(self.count().await, 0);
    }

    /// Ours: bundles of `size`, all pipelined, then a barrier.
    async fn ours_bundled(&self, n: usize, size: usize) -> Duration {
        let mut all = (0..n as u32).map(flow);
        let chunks: Vec<Vec<Body>> = std::iter::from_fn(|| {
            let chunk: Vec<Body> = all.by_ref().take(size).collect();
            (!chunk.is_empty()).then_some(chunk)
        })
        .collect();
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for chunk in chunks {
            let sw = self.sw.clone();
            set.spawn(async move { sw.bundle(chunk).await });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
        self.sw.barrier().await.unwrap();
        start.elapsed()
    }

    /// Ours: plain flow_mods, pipelined, then a barrier.
    async fn ours_plain(&self, n: usize) -> Duration {
        let bodies: Vec<Body> = (0..n as u32).map(flow).collect();
        let start = Instant::now();
        self.sw.send_batch(bodies).await.unwrap();
        self.sw.barrier().await.unwrap();
        start.elapsed()
    }

    /// `ovs-ofctl --bundle add-flows FILE`, file written beforehand.
    fn ofctl(&self, file: &str) -> Duration {
        let start = Instant::now();
        self.sb.ofctl("add-flows", BR, &["--bundle", file]).unwrap();
        start.elapsed()
    }
}

async fn measure(
    b: &Bench,
    n: usize,
    reps: usize,
    run: impl AsyncFn(&Bench) -> Duration,
) -> Duration {
    let mut times = Vec::new();
    for _ in 0..reps {
        b.clear().await;
        times.push(run(b).await);
        assert_eq!(b.count().await, n, "every flow was installed");
    }
    median(times)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let sizes = env_list("SVCFLOW_BENCH_N", &[10_000, 50_000, 200_000]);
    let reps = env_list("SVCFLOW_BENCH_REPS", &[3])
        .first()
        .copied()
        .unwrap_or(3)
        .max(1);
    let forced = env_list("SVCFLOW_BENCH_BUNDLE", &[]);

    let sb = Sandbox::start().unwrap();
    sb.add_bridge(BR).unwrap();
    let sw = driver::connect(&sb.mgmt_target(BR), DriverConfig::default())
        .await
        .unwrap();
    let b = Bench { sb, sw };

    let version = b.sb.appctl(&["version"]).unwrap();
    println!("{}", version.lines().next().unwrap_or(""));
    println!(
        "median of {reps} runs; each timed until the switch confirmed (commit or barrier reply)\n"
    );
    let mut rows = Vec::new();
    for &n in &sizes {
        let file = b.sb.dir().join(format!("flows-{n}.txt"));
        let text: Vec<String> = (0..n as u32).map(flow_line).collect();
        std::fs::write(&file, text.join("\n") + "\n").unwrap();
        let file = file.to_string_lossy().into_owned();

        let candidates: Vec<usize> = if forced.is_empty() {
            let mut c: Vec<usize> = [1_000, 5_000, 20_000, n]
                .into_iter()
                .filter(|&s| s <= n)
                .collect();
            c.dedup();
            c
        } else {
            forced.clone()
        };
        let mut best: Option<(usize, Duration)> = None;
        for &size in &candidates {
            let t = measure(&b, n, reps, async |b| b.ours_bundled(n, size).await).await;
            println!(
                "  N={n:>7}  session, bundles of {size:>7}: {:>9.0} flows/s",
                rate(n, t)
            );
            if best.is_none_or(|(_, bt)| t < bt) {
                best = Some((size, t));
            }
        }
        let (size, ours) = best.unwrap();
        let plain = measure(&b, n, reps, async |b| b.ours_plain(n).await).await;
        println!(
            "  N={n:>7}  session, plain flow_mods:  {:>9.0} flows/s",
            rate(n, plain)
        );
        let ofctl = measure(&b, n, reps, async |b| {
            tokio::task::block_in_place(|| b.ofctl(&file))
        })
        .await;
        println!(
            "  N={n:>7}  ovs-ofctl --bundle:         {:>9.0} flows/s",
            rate(n, ofctl)
        );
        rows.push((n, size, ours, plain, ofctl));
    }
    b.clear().await;

    println!();
    println!(
        "| flows | session, bundles (best size) | session, plain flow_mods | ovs-ofctl --bundle | ratio (bundles / ofctl) |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for (n, size, ours, plain, ofctl) in rows {
        println!(
            "| {n} | {:.0}/s ({size}) | {:.0}/s | {:.0}/s | {:.2}× |",
            rate(n, ours),
            rate(n, plain),
            rate(n, ofctl),
            ofctl.as_secs_f64() / ours.as_secs_f64()
        );
    }
}
