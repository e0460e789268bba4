//! `cargo bench -p ovsdb`: transact throughput (10,000 ports with external_ids) against
//! `ovs-vsctl` in the same run, and change→monitor-update latency. Prints a table.
//! Takes about 4 minutes, mostly `ovs-vsctl`. `OVSDB_BENCH_QUICK=1` runs 200 ports;
//! `OVSDB_BENCH_PORTS=N` sets the port count.
#![allow(clippy::unwrap_used)] // benchmark harness, not an input path

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::OvsdbServer;
use ovsdb::client::{Client, ClientConfig, ClientEvent};
use ovsdb::monitor::MonitorRequest;
use ovsdb::vswitch::{self, BridgeSpec, VSwitch};
use ovsdb::{Atom, Condition, Datum, Mutation, Operation, Row};

const PORTS: usize = 10_000;

fn port_ops(bridge: uuid::Uuid, names: &[String]) -> Vec<Operation> {
    let mut ops = Vec::with_capacity(names.len() * 2 + 1);
    let mut refs = Vec::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        let row = |pairs: Vec<(&str, Datum)>| -> Row {
            pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
        };
        ops.push(Operation::insert_named(
            "Interface",
            row(vec![
                ("name", Datum::string(n)),
                ("type", Datum::string("internal")),
            ]),
            &format!("i{i}"),
        ));
        ops.push(Operation::insert_named(
            "Port",
            row(vec![
                ("name", Datum::string(n)),
                ("interfaces", Datum::named_uuid(format!("i{i}"))),
                (
                    "external_ids",
                    Datum::map([("svcflow/pod", n.as_str()), ("svcflow/ns", "bench")]),
                ),
            ]),
            &format!("p{i}"),
        ));
        refs.push(Atom::NamedUuid(format!("p{i}")));
    }
    ops.push(Operation::mutate(
        "Bridge",
        vec![Condition::uuid(bridge)],
        vec![Mutation::insert("ports", Datum::set(refs))],
    ));
    ops
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx.min(v.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo test --benches` runs this with --test-ish args; do a tiny run then.
    let quick =
        std::env::args().any(|a| a == "--quick") || std::env::var_os("OVSDB_BENCH_QUICK").is_some();
    let n = if quick {
        200
    } else {
        std::env::var("OVSDB_BENCH_PORTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(PORTS)
    };
    let srv = OvsdbServer::start();
    let (vs, _ev) = VSwitch::connect(&srv.unix_remote(), ClientConfig::default())
        .await
        .unwrap();
    let mut rows: Vec<(String, String, f64)> = vec![];

    // 1. ours: 100 ports per transaction, sequential.
    vs.ensure_bridge(&BridgeSpec::new("br-a")).await.unwrap();
    let (client, _e) = Client::connect(&srv.unix_remote(), ClientConfig::default())
        .await
        .unwrap();
    let br_a = vs
        .replica
        .read()
        .table("Bridge")
        .map(|(u, _)| *u)
        .next()
        .unwrap();
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let names: Vec<String> = chunk.iter().map(|i| format!("a{i}")).collect();
        client
            .transact(vswitch::DB, port_ops(br_a, &names))
            .await
            .unwrap();
    }
    let d = t.elapsed();
    rows.push((
        "svcflow ovsdb, 100 ports/txn".into(),
        format!("{n} ports in {:.2?}", d),
        n as f64 / d.as_secs_f64(),
    ));

    // 2. ours: 1 port per transaction, 64 in flight.
    vs.ensure_bridge(&BridgeSpec::new("br-b")).await.unwrap();
    let br_b = vs
        .replica
        .wait_for(Duration::from_secs(10), |r| {
            ovsdb::vswitch::VSwitchQuery::bridge(r, "br-b")
        })
        .await
        .unwrap()
        .uuid;
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        if set.len() >= 64 {
            set.join_next().await.unwrap().unwrap();
        }
        let c = client.clone();
        set.spawn(async move {
            c.transact(vswitch::DB, port_ops(br_b, &[format!("b{i}")]))
                .await
                .unwrap()
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    let d = t.elapsed();
    rows.push((
        "svcflow ovsdb, 1 port/txn, 64 in flight".into(),
        format!("{n} ports in {:.2?}", d),
        n as f64 / d.as_secs_f64(),
    ));

    // 3. ovs-vsctl, 100 ports per invocation, on its own fresh server (it reads the whole
    // database per invocation, so sharing one would penalise it).
    let vsrv = OvsdbServer::start();
    vsrv.vsctl(&["add-br", "br-c"]);
    let t = Instant::now();
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut args: Vec<String> =
            vec![format!("--db={}", vsrv.unix_remote()), "--no-wait".into()];
        for i in chunk {
            let p = format!("c{i}");
            args.extend(
                [
                    "--",
                    "add-port",
                    "br-c",
                    &p,
                    "--",
                    "set",
                    "Interface",
                    &p,
                    "type=internal",
                    "--",
                    "set",
                    "Port",
                    &p,
                ]
                .iter()
                .map(|s| s.to_string()),
            );
            args.push(format!("external_ids:svcflow/pod={p}"));
            args.push("external_ids:svcflow/ns=bench".into());
        }
        let out = Command::new("ovs-vsctl").args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let d = t.elapsed();
    rows.push((
        "ovs-vsctl, 100 ports/invocation".into(),
        format!("{n} ports in {:.2?}", d),
        n as f64 / d.as_secs_f64(),
    ));

    // 4. ovs-vsctl, 1 port per invocation (sampled: 20 invocations on the now-large database).
    vsrv.vsctl(&["add-br", "br-d"]);
    let sample = 20.min(n);
    let t = Instant::now();
    for i in 0..sample {
        let p = format!("d{i}");
        vsrv.vsctl(&[
            "add-port",
            "br-d",
            &p,
            "--",
            "set",
            "Port",
            &p,
            &format!("external_ids:svcflow/pod={p}"),
        ]);
    }
    let d = t.elapsed();
    rows.push((
        "ovs-vsctl, 1 port/invocation (sampled)".into(),
        format!("{sample} ports in {:.2?}", d),
        sample as f64 / d.as_secs_f64(),
    ));

    let count = |s: &OvsdbServer| {
        s.vsctl(&["--columns=_uuid", "list", "Port"])
            .lines()
            .filter(|l| l.starts_with("_uuid"))
            .count()
    };
    assert_eq!(count(&srv), 2 * n + 2, "every port landed");
    assert_eq!(count(&vsrv), n + sample + 2, "every port landed");
    drop(vsrv);

    // 5. change -> monitor update latency: client A transacts, client B's monitor sees it.
    let (watcher, mut wev) = Client::connect(&srv.unix_remote(), ClientConfig::default())
        .await
        .unwrap();
    let reqs: BTreeMap<String, MonitorRequest> = [(
        "Bridge".to_owned(),
        MonitorRequest::columns(&["name", "external_ids"]),
    )]
    .into();
    watcher.monitor(vswitch::DB, "lat", reqs).await.unwrap();
    let samples = if quick { 50 } else { 1000 };
    let mut lat = Vec::with_capacity(samples);
    let mut lat_vsctl = Vec::new();
    // Wait for the initial dump, then drain anything queued.
    loop {
        if let Some(ClientEvent::Update {
            kind: ovsdb::UpdateKind::Initial { .. },
            ..
        }) = wev.recv().await
        {
            break;
        }
    }
    for i in 0..samples {
        while wev.try_recv().is_ok() {}
        let t = Instant::now();
        let mut m: BTreeMap<String, String> = BTreeMap::new();
        m.insert("seq".into(), i.to_string());
        let ops = vec![Operation::update(
            "Bridge",
            vec![Condition::uuid(br_a)],
            [(
                "external_ids".to_owned(),
                Datum::map(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            )]
            .into_iter()
            .collect(),
        )];
        let tx = client.transact(vswitch::DB, ops);
        let wait = async {
            loop {
                if let Some(ClientEvent::Update {
                    kind: ovsdb::UpdateKind::Change,
                    ..
                }) = wev.recv().await
                {
                    return t.elapsed();
                }
            }
        };
        let (r, l) = tokio::join!(tx, wait);
        r.unwrap();
        lat.push(l);
        if i < 50 {
            while wev.try_recv().is_ok() {}
            let t = Instant::now();
            srv.vsctl(&["set", "Bridge", "br-a", &format!("external_ids:v={i}")]);
            loop {
                if let Some(ClientEvent::Update {
                    kind: ovsdb::UpdateKind::Change,
                    ..
                }) = wev.recv().await
                {
                    break;
                }
            }
            lat_vsctl.push(t.elapsed());
        }
    }
    println!();
    println!(
        "ovsdb benchmark ({} ports per run; ovsdb-server 3.1, unix socket, 2 cores)",
        n
    );
    println!(
        "{:<44} {:>28} {:>12}",
        "transact throughput", "result", "ports/s"
    );
    for (a, b, c) in &rows {
        println!("{a:<44} {b:>28} {c:>12.0}");
    }
    println!();
    println!(
        "{:<44} {:>10} {:>10} {:>8}",
        "change -> monitor update latency", "p50", "p99", "samples"
    );
    let (p50, p99) = (pct(&mut lat, 0.5), pct(&mut lat, 0.99));
    println!(
        "{:<44} {:>10.2?} {:>10.2?} {:>8}",
        "svcflow transact -> other client's update",
        p50,
        p99,
        lat.len()
    );
    let (p50, p99) = (pct(&mut lat_vsctl, 0.5), pct(&mut lat_vsctl, 0.99));
    println!(
        "{:<44} {:>10.2?} {:>10.2?} {:>8}",
        "ovs-vsctl process -> update (incl. spawn)",
        p50,
        p99,
        lat_vsctl.len()
    );
}
