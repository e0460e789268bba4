//! Bulk input: one container PUT of S services (and one of their endpoints) through the REST
//! northbound's pure and durable layers, timed step by step, with the cost of merely reading
//! the same bytes into a `serde_json::Value` as the anchor (no parser of this JSON can do less).
//!
//! For each S it prints the body size and the times of:
//! - anchor: `serde_json::from_slice::<Value>` of the body;
//! - parse: `parse::container_body` (JSON → validated items);
//!
//! (these two the best of [`PARSE_RUNS`] runs each, alternating, as both are pure and short
//! enough for a busy machine to double one run);
//! - apply: `DurableStore::apply` of the container replace (validation against the whole
//!   state, the write-ahead log record, its `fdatasync`) on an empty state;
//! - the log's size after both PUTs;
//! - translate: the model of the state after both PUTs, as the publisher builds it;
//! - total of parse + apply for the services body (what the issue's 200 ms target covers);
//!
//! and the live heap after the two PUTs, after the translation, and after one item write
//! (which builds the validation index that a container PUT leaves to the next write).
//!
//! Then the same two bodies in the order and the way the daemon's full load takes them (the
//! e2e bench's order), on a fresh state: the endpoints' PUT (parse + apply) and its
//! publication (the publisher's incremental translation, `Translator::apply_in_parts`), then
//! the services' PUT and its publication, with the time to its first early part
//! (`coe::rest::PUBLISH_PART`), when the switches can start. All of this stands before a
//! full load's first bundle.
//!
//! Run: `cargo bench -p coe --bench bulk`. `SVCFLOW_BULK_S=1000,30000` picks the sizes
//! (default 1000,10000,30000), `SVCFLOW_BULK_E` the endpoints per service (default 2).

#![allow(clippy::unwrap_used)] // a benchmark that cannot run should stop loudly

/// How many times the anchor and the parse run, the best of each taken.
const PARSE_RUNS: usize = 5;

use std::time::{Duration, Instant};

/// The allocator the `svcflow` binary uses.
/// The daemon's allocator, counted: the live heap bytes say what the state holds, RSS what
/// the process pays for it (with what the allocator keeps of freed memory).
#[global_allocator]
static ALLOCATOR: cap::Cap<mimalloc::MiMalloc> = cap::Cap::new(mimalloc::MiMalloc, usize::MAX);

/// Live heap bytes, in MiB.
fn live_mib() -> f64 {
    ALLOCATOR.allocated() as f64 / (1024.0 * 1024.0)
}

use coe::rest::PUBLISH_PART;
use coe::rest::durable::DurableStore;
use coe::rest::parse;
use coe::rest::store::{Change, Rules};
use coe::rest::to_model::Translator;
use coe::rest::types::Kind;

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(name) {
        Ok(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        Err(_) => default.to_vec(),
    }
}

/// The services container body, as a COE watcher sends it (module-prefixed members).
fn services_body(s: usize) -> String {
    let mut out = String::from(r#"{"service:service-information":{"service:services":["#);
    for i in 0..s {
        if i > 0 {
            out.push(',');
        }
        let ip = format!("10.{}.{}.{}", 96 + i / 65536, (i / 256) % 256, i % 256);
        out.push_str(&format!(
            r#"{{"service:uid":"svc-{i:05}","service:name":"svc-{i:05}","service:network-NS":"bench","service:cluster-id":"cluster-1","service:cluster-ip-address":"{ip}","service:service-ports":[{{"service:name":"http","service:protocol":"TCP","service:port":80,"service:target-port":"8080"}}]}}"#
        ));
    }
    out.push_str("]}}");
    out
}

fn endpoints_body(s: usize, e: usize) -> String {
    let mut out = String::from(r#"{"service:endpoints-info":{"service:endpoints":["#);
    for i in 0..s {
        if i > 0 {
            out.push(',');
        }
        let addresses: Vec<String> = (0..e)
            .map(|k| {
                let n = i * e + k;
                format!(
                    r#"{{"service:ip-address":"10.{}.{}.{}","service:node-name":"n1"}}"#,
                    128 + n / 65536,
                    (n / 256) % 256,
                    n % 256
                )
            })
            .collect();
        out.push_str(&format!(
            r#"{{"service:uid":"ep-{i:05}","service:name":"svc-{i:05}","service:network-NS":"bench","service:endpoint-addresses":[{}],"service:endpoint-ports":[{{"service:name":"http","service:port":8080,"service:protocol":"TCP"}}]}}"#,
            addresses.join(",")
        ));
    }
    out.push_str("]}}");
    out
}

/// This process's resident set now, in MiB (`VmRSS`).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let sizes = env_list("SVCFLOW_BULK_S", &[1000, 10000, 30000]);
    let e = env_list("SVCFLOW_BULK_E", &[2])[0];
    println!(
        "| S | body MB | anchor: JSON → Value (ms) | parse (ms) | apply + log + fsync (ms) | parse + apply (ms) | endpoints parse + apply (ms) | log after both (MB) | translate (ms) | RSS: store (MiB) | RSS: + model (MiB) | live heap: store (MiB) | live heap: + model (MiB) | live heap: + index (MiB) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut in_order = Vec::new();
    for s in sizes {
        let body = services_body(s);
        let ep_body = endpoints_body(s, e);
        let body_mb = body.len() as f64 / 1e6;
        let dir = tempfile::tempdir().unwrap();
        let mut durable = DurableStore::open(dir.path(), Rules::default()).unwrap();

        let (mut anchor, mut parsed) = (Duration::MAX, Duration::MAX);
        let mut items = Vec::new();
        for _ in 0..PARSE_RUNS {
            let t = Instant::now();
            let value: serde_json::Value = serde_json::from_slice(body.as_bytes()).unwrap();
            anchor = anchor.min(t.elapsed());
            drop(value);
            drop(std::mem::take(&mut items));
            let t = Instant::now();
            items = parse::container_body(Kind::Service, body.as_bytes()).unwrap();
            parsed = parsed.min(t.elapsed());
        }
        let t = Instant::now();
        durable
            .apply(Change::Replace(Kind::Service, items))
            .unwrap();
        let applied = t.elapsed();

        let t = Instant::now();
        let items = parse::container_body(Kind::Endpoints, ep_body.as_bytes()).unwrap();
        durable
            .apply(Change::Replace(Kind::Endpoints, items))
            .unwrap();
        let endpoints = t.elapsed();
        let log_mb = durable.wal().len() as f64 / 1e6;

        drop((body, ep_body));
        let store_rss = rss_mib();
        let store_live = live_mib();
        let t = Instant::now();
        let translator = Translator::new(durable.store());
        let translated = t.elapsed();
        let model_rss = rss_mib();
        let model_live = live_mib();
        assert_eq!(translator.model().services.len(), s);

        // The first item write after a container PUT builds the validation index.
        let one = parse::item_body(
            Kind::Endpoints,
            "ep-00000",
            br#"{"service:endpoints":[{"service:uid":"ep-00000","service:name":"svc-00000","service:network-NS":"bench"}]}"#,
        )
        .unwrap();
        durable.apply(Change::Upsert(one)).unwrap();
        let index_live = live_mib();

        println!(
            "| {s} | {:.1} | {} | {} | {} | {} | {} | {log_mb:.1} | {} | {store_rss:.0} | {model_rss:.0} | \
             {store_live:.0} | {model_live:.0} | {index_live:.0} |",
            body_mb,
            ms(anchor),
            ms(parsed),
            ms(applied),
            ms(parsed + applied),
            ms(endpoints),
            ms(translated),
        );
        drop((translator, durable));
        in_order.push((s, daemon_order(s, e), one_put(s, e)));
    }
    println!();
    println!(
        "| S | endpoints: parse + apply (ms) | endpoints: publish (ms) | services: parse + apply (ms) | services: to the first part (ms) | services: publish (ms) |"
    );
    println!("|---|---|---|---|---|---|");
    for (s, [a, b, c, d, e], _) in &in_order {
        println!(
            "| {s} | {} | {} | {} | {} | {} |",
            ms(*a),
            ms(*b),
            ms(*c),
            ms(*d),
            ms(*e)
        );
    }
    println!();
    println!(
        "| S | one PUT of the datastore: parse (ms) | apply + log + fsync (ms) | to the first part (ms) | publish (ms) |"
    );
    println!("|---|---|---|---|---|");
    for (s, _, [a, b, c, d]) in &in_order {
        println!(
            "| {s} | {} | {} | {} | {} |",
            ms(*a),
            ms(*b),
            ms(*c),
            ms(*d)
        );
    }
}

/// The two PUTs in the daemon's order, each followed by its publication as the publisher
/// makes it: the endpoints' parse + apply, their publication, the services' parse + apply,
/// the time to the services' first early part, their whole publication.
fn daemon_order(s: usize, e: usize) -> [Duration; 5] {
    let dir = tempfile::tempdir().unwrap();
    let mut durable = DurableStore::open(dir.path(), Rules::default()).unwrap();
    let mut translator = Translator::new(durable.store());
    drop(durable.take_changed());
    // One container PUT and its publication: (parse + apply, to the first early part if
    // there is one, the whole publication).
    let mut put = |kind: Kind, body: String| {
        let t = Instant::now();
        let items = parse::container_body(kind, body.as_bytes()).unwrap();
        durable.apply(Change::Replace(kind, items)).unwrap();
        let put = t.elapsed();
        let (first, publish) = publish(&mut durable, &mut translator);
        (put, first, publish)
    };
    let (ep_put, _, ep_publish) = put(Kind::Endpoints, endpoints_body(s, e));
    let (svc_put, svc_first, svc_publish) = put(Kind::Service, services_body(s));
    assert_eq!(translator.model().services.len(), s);
    [ep_put, ep_publish, svc_put, svc_first, svc_publish]
}

/// The same state as one PUT of the whole datastore and its publication: (parse, apply +
/// log + fsync, to the first early part, the whole publication).
fn one_put(s: usize, e: usize) -> [Duration; 4] {
    let dir = tempfile::tempdir().unwrap();
    let mut durable = DurableStore::open(dir.path(), Rules::default()).unwrap();
    let mut translator = Translator::new(durable.store());
    drop(durable.take_changed());
    let (ep, svc) = (endpoints_body(s, e), services_body(s));
    let body = format!(
        r#"{{"k8s-node:k8s-nodes-info":{{"k8s-nodes":[]}},"pod:coe":{{"pods":[]}},{},{}}}"#,
        &ep[1..ep.len() - 1],
        &svc[1..svc.len() - 1]
    );
    drop((ep, svc));
    let mut parsed = Duration::MAX;
    let mut lists = Vec::new();
    for _ in 0..PARSE_RUNS {
        drop(std::mem::take(&mut lists));
        let t = Instant::now();
        lists = parse::datastore_body(body.as_bytes()).unwrap();
        parsed = parsed.min(t.elapsed());
    }
    let t = Instant::now();
    durable.apply(Change::Datastore(lists)).unwrap();
    let applied = t.elapsed();
    let (first, publish) = publish(&mut durable, &mut translator);
    assert_eq!(translator.model().services.len(), s);
    [parsed, applied, first, publish]
}

/// The publication of what `durable` took since the last: (to the first early part if there
/// is one, the whole publication).
fn publish(durable: &mut DurableStore, translator: &mut Translator) -> (Duration, Duration) {
    let t = Instant::now();
    let changed = durable.take_changed();
    let mut first = None;
    translator.apply_in_parts(durable.store(), &changed, PUBLISH_PART, |_| {
        first.get_or_insert_with(|| t.elapsed());
    });
    let publish = t.elapsed();
    (first.unwrap_or(publish), publish)
}
