//! REST writes on each store: the local write-ahead log (`--store local`, fsync per write)
//! against a real 3-member Raft-clustered `ovsdb-server` on loopback (`--store ovsdb:`), in
//! the same run. The northbound is the real `coe` code in this process, driven over HTTP by an
//! in-process client, one write at a time, each timed from the request to its answer (which
//! for the cluster comes after the leader committed it and the replica's mirror shows it).
//!
//! ```sh
//! cargo bench -p ovs-tests --bench store
//! ```
//!
//! `SVCFLOW_STORE_WRITES` (default 500) single-service item PUTs, then one container PUT of
//! `SVCFLOW_STORE_S` services (default 10,000), then the same container again with one
//! service changed (a resync that finds one difference).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coe::rest::operational::Unavailable;
use coe::rest::{Northbound, RestConfig, StoreKind};
use ovs_tests::bench::{command_output, env_list, ms, percentiles};
use ovs_tests::http::Http;
use ovs_tests::raft::RaftCluster;

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/svcflow.ovsschema");
const SERVICES: &str = "/restconf/config/service:service-information";

fn service(uid: &str, i: usize) -> String {
    format!(
        r#"{{"service:uid":"{uid}","service:name":"{uid}","service:network-NS":"default",
        "service:cluster-ip-address":"10.{}.{}.{}","service:service-ports":[{{"service:name":
        "http","service:port":80,"service:target-port":"8080"}}]}}"#,
        96 + i / 65_536,
        (i / 256) % 256,
        i % 256
    )
}

struct Row {
    store: &'static str,
    single: (Duration, Duration),
    container: Duration,
    again: Duration,
}

fn run(store: StoreKind, label: &'static str, writes: usize, services: usize) -> Row {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = std::env::temp_dir().join(format!(
        "svcflow-store-bench-{}-{label}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a state directory");
    let mut config = RestConfig::new(&dir);
    config.store = store;
    let addr = rt.block_on(async {
        let nb = Northbound::open(&config, Arc::new(Unavailable)).expect("the northbound");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(nb.serve_on(listener, std::future::pending()));
        addr
    });
    let mut h = Http::new("", &addr.to_string()).with_read_timeout(Duration::from_secs(60));
    // Ready: reads answer without a staleness warning.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h
        .request("GET", SERVICES, b"")
        .is_ok_and(|r| r.status == 200 && r.warning.is_none())
    {
        assert!(
            Instant::now() < deadline,
            "{label}: the store never became ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut single = Vec::with_capacity(writes);
    for i in 0..writes {
        let uid = format!("one-{i}");
        let body = format!(r#"{{"service:services":[{}]}}"#, service(&uid, i));
        let t = Instant::now();
        let r = h
            .request(
                "PUT",
                &format!("{SERVICES}/services/{uid}"),
                body.as_bytes(),
            )
            .expect("a reply");
        single.push(t.elapsed());
        assert_eq!(
            r.status,
            200,
            "{label}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    // One container PUT of `items`, timed from the request to its answer.
    let mut put_container = |items: &[String]| -> Duration {
        let body = format!(
            r#"{{"service:service-information":{{"service:services":[{}]}}}}"#,
            items.join(",")
        );
        let t = Instant::now();
        let r = h
            .request("PUT", SERVICES, body.as_bytes())
            .expect("a reply");
        let took = t.elapsed();
        assert_eq!(
            r.status,
            200,
            "{label}: {}",
            String::from_utf8_lossy(&r.body)
        );
        took
    };
    let mut items: Vec<String> = (0..services)
        .map(|i| service(&format!("bulk-{i}"), i))
        .collect();
    let container = put_container(&items);
    items[0] = service("bulk-0", services);
    let again = put_container(&items);
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
    Row {
        store: label,
        single: percentiles(&mut single),
        container,
        again,
    }
}

fn main() {
    let writes = env_list("SVCFLOW_STORE_WRITES", &[500])[0].max(1);
    let services = env_list("SVCFLOW_STORE_S", &[10_000])[0].max(1);
    let date = command_output(&["date", "-u", "+%Y-%m-%d %H:%M:%S UTC"]);
    let nproc = command_output(&["nproc"]);
    let local = run(StoreKind::Local, "local", writes, services);
    let cluster = RaftCluster::start(Path::new(SCHEMA), 3)
        .unwrap_or_else(|e| panic!("cannot start the 3-member ovsdb-server cluster: {e}"));
    cluster
        .wait_leader(Duration::from_secs(30))
        .expect("a leader");
    let replicated = run(
        StoreKind::Ovsdb(cluster.remotes()),
        "ovsdb, 3-member cluster",
        writes,
        services,
    );
    println!();
    println!(
        "svcflow store, {date}, nproc {nproc}, {writes} item PUTs one at a time, then one \
         container PUT of {services} services"
    );
    println!();
    println!(
        "| store | item PUT p50 / p99 (ms) | container PUT of {services} services (s) | \
         the same again, one changed (s) |"
    );
    println!("|---|---:|---:|---:|");
    for r in [&local, &replicated] {
        println!(
            "| {} | {:.2} / {:.2} | {:.3} | {:.3} |",
            r.store,
            ms(r.single.0),
            ms(r.single.1),
            r.container.as_secs_f64(),
            r.again.as_secs_f64()
        );
    }
}
