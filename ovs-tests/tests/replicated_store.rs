//! The REST northbound on a replicated store (`--store ovsdb:`), against a real 3-member
//! Raft-clustered `ovsdb-server` on loopback: two northbound replicas (the real `coe` code,
//! in this process, each on its own HTTP port) share one state.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coe::rest::operational::Unavailable;
use coe::rest::{Northbound, RestConfig, StoreKind};
use ovs_tests::http::{Http, Reply};
use ovs_tests::raft::RaftCluster;

const SCHEMA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/svcflow.ovsschema");
const SERVICES: &str = "/restconf/config/service:service-information";

/// One svcflow northbound replica on the cluster.
struct Replica {
    addr: SocketAddr,
    revision: tokio::sync::watch::Receiver<Arc<coe::rest::Published>>,
    _rt: tokio::runtime::Runtime,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A directory removed on drop.
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn replica(cluster: &RaftCluster, n: usize) -> Replica {
    replica_with(cluster, n, 30000..=32767)
}

/// [`replica`] with its own node-port range.
fn replica_with(
    cluster: &RaftCluster,
    n: usize,
    node_ports: std::ops::RangeInclusive<u16>,
) -> Replica {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("svcflow-replica-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut config = RestConfig::new(&dir);
    config.store = StoreKind::Ovsdb(cluster.remotes());
    config.node_port_range = node_ports;
    let (addr, revision) = rt.block_on(async {
        let nb = Northbound::open(&config, Arc::new(Unavailable)).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let models = nb.subscribe();
        tokio::spawn(nb.serve_on(listener, std::future::pending()));
        (addr, models)
    });
    Replica {
        addr,
        revision,
        _rt: rt,
        _dir: tempdir::Dir(dir),
    }
}

fn http(r: &Replica) -> Http {
    Http::new("", &r.addr.to_string()).with_read_timeout(Duration::from_secs(30))
}

fn service(uid: &str, ip: &str) -> String {
    ovs_tests::svcflow::fixture::service_body(uid, ip)
}

fn put_service(h: &mut Http, uid: &str, ip: &str) -> Reply {
    h.request(
        "PUT",
        &format!("{SERVICES}/services/{uid}"),
        service(uid, ip).as_bytes(),
    )
    .unwrap()
}

/// Service `uid` on `ip`, its port on node port 30080 (the default range's, outside
/// 31000–31999).
fn put_node_port_service(h: &mut Http, uid: &str, ip: &str) -> Reply {
    let body = service(uid, ip).replace(
        r#""service:target-port":"8080""#,
        r#""service:target-port":"8080","service:node-port":30080"#,
    );
    h.request(
        "PUT",
        &format!("{SERVICES}/services/{uid}"),
        body.as_bytes(),
    )
    .unwrap()
}

/// Node n1 (192.168.50.10, pod CIDR 10.244.0.0/24), through `h`.
fn put_node(h: &mut Http) {
    let node = r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"node-1","k8s-node:host-name":"n1",
        "k8s-node:internal-ip-address":"192.168.50.10","k8s-node:pod-cidr":"10.244.0.0/24"}]}"#;
    let r = h
        .request(
            "PUT",
            "/restconf/config/k8s-node:k8s-nodes-info/k8s-nodes/node-1",
            node.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

fn has_service(h: &mut Http, uid: &str) -> bool {
    let r = h
        .request("GET", &format!("{SERVICES}/services/{uid}"), b"")
        .unwrap();
    match r.status {
        200 => true,
        404 => false,
        s => panic!("GET {uid}: {s} {}", String::from_utf8_lossy(&r.body)),
    }
}

/// The `_uuid` of the row of `table` whose uid is `uid`, read from the leader with
/// `ovsdb-client`.
fn row_uuid(cluster: &RaftCluster, table: &str, uid: &str) -> Option<String> {
    let leader = cluster.wait_leader(Duration::from_secs(10)).unwrap();
    let query = serde_json::json!([
        cluster.db(),
        {"op": "select", "table": table, "where": [["uid", "==", uid]], "columns": ["_uuid"]}
    ]);
    let out = std::process::Command::new("ovsdb-client")
        .arg("transact")
        .arg(format!("unix:{}", cluster.socket(leader).display()))
        .arg(query.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = reply[0]["rows"].as_array().unwrap();
    assert!(rows.len() <= 1, "two rows of {table} {uid}: {reply}");
    rows.first()
        .map(|r| r["_uuid"][1].as_str().unwrap().to_string())
}

/// Waits until the replica answers reads from a mirrored state (no `Warning: 110`).
fn wait_ready(r: &Replica) {
    let mut h = http(r);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(reply) = h.request("GET", SERVICES, b"")
            && reply.status == 200
            && reply.warning.is_none()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica on {} did not mirror the cluster within 30 s",
            r.addr
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 10 s) until replica `r` has every item of `uids`.
fn assert_all_present(r: &Replica, uids: &[String]) {
    let mut h = http(r);
    let deadline = Instant::now() + Duration::from_secs(10);
    for uid in uids {
        while !has_service(&mut h, uid) {
            assert!(
                Instant::now() < deadline,
                "acknowledged {uid} is missing on replica {}",
                r.addr
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Two replicas on `cluster`, once both mirror it.
fn two_replicas(cluster: &RaftCluster) -> (Replica, Replica) {
    let (a, b) = (replica(cluster, 1), replica(cluster, 2));
    wait_ready(&a);
    wait_ready(&b);
    (a, b)
}

fn cluster() -> RaftCluster {
    let cluster = RaftCluster::start(Path::new(SCHEMA), 3)
        .unwrap_or_else(|e| panic!("cannot start the 3-member ovsdb-server cluster: {e}"));
    cluster.wait_leader(Duration::from_secs(30)).unwrap();
    cluster
}

#[test]
fn a_write_to_one_replica_is_seen_by_the_other_and_conflicts_are_refused() {
    let cluster = cluster();
    let (a, b) = two_replicas(&cluster);
    let (mut ha, mut hb) = (http(&a), http(&b));
    let r = put_service(&mut ha, "web", "10.96.0.10");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Acknowledged means committed by the cluster: the other replica sees it once its
    // mirror catches up (a monitor update away).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !has_service(&mut hb, "web") {
        assert!(Instant::now() < deadline, "replica 2 never saw the write");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its model too (what drives its switches).
    let mut models = b.revision.clone();
    b._rt
        .block_on(async {
            tokio::time::timeout(
                Duration::from_secs(5),
                models.wait_for(|p| p.model.services.len() == 1),
            )
            .await
        })
        .unwrap()
        .unwrap();
    // Validation runs against the shared state: the other replica refuses a second service
    // on the same address and port.
    let r = put_service(&mut hb, "copy", "10.96.0.10");
    assert!(
        (400..500).contains(&r.status),
        "a clash through the other replica: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    assert!(!has_service(&mut ha, "copy"));
    // Concurrent writes of clashing services through both replicas: exactly one wins.
    let ta = std::thread::spawn(move || put_service(&mut ha, "left", "10.96.0.20").status);
    let tb = std::thread::spawn(move || put_service(&mut hb, "right", "10.96.0.20").status);
    let (sa, sb) = (ta.join().unwrap(), tb.join().unwrap());
    assert_eq!(
        [sa, sb].iter().filter(|s| **s == 200).count(),
        1,
        "one of two clashing writes must win: {sa} {sb}"
    );
    let mut h = http(&a);
    assert_eq!(
        has_service(&mut h, "left") as u8 + has_service(&mut h, "right") as u8,
        1
    );

    // A PUT of the whole datastore through one replica is one transaction: the other sees
    // all of it, and a refused one changes nothing anywhere.
    let mut hb = http(&b);
    let get = |h: &mut Http| -> serde_json::Value {
        let r = h.request("GET", "/restconf/config", b"").unwrap();
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).unwrap()
    };
    let mut doc = get(&mut h);
    let web_row = row_uuid(&cluster, "Service", "web");
    assert!(web_row.is_some());
    let web: serde_json::Value = serde_json::from_str(&service("web", "10.96.0.10")).unwrap();
    let other: serde_json::Value = serde_json::from_str(&service("db", "10.96.0.30")).unwrap();
    doc["service:service-information"] = serde_json::json!({
        "services": [web["service:services"][0], other["service:services"][0]]
    });
    let r = hb
        .request("PUT", "/restconf/config", doc.to_string().as_bytes())
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !has_service(&mut h, "db") {
        assert!(
            Instant::now() < deadline,
            "replica 1 never saw the datastore write"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let now = get(&mut h);
    assert_eq!(now, get(&mut hb));
    let uids: Vec<&str> = now["service:service-information"]["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["uid"].as_str().unwrap())
        .collect();
    assert_eq!(uids, ["db", "web"], "left or right is gone with the write");
    // Only what changed was written: `web`, kept as it was, is still in its row.
    assert_eq!(
        row_uuid(&cluster, "Service", "web"),
        web_row,
        "the unchanged service's row was rewritten"
    );
    let mut clash = now.clone();
    clash["service:service-information"]["services"][0]["cluster-ip-address"] = "10.96.0.10".into();
    clash["service:endpoints-info"] = serde_json::json!({ "endpoints": [] });
    let r = hb
        .request("PUT", "/restconf/config", clash.to_string().as_bytes())
        .unwrap();
    assert!(
        (400..500).contains(&r.status),
        "a clash in a datastore write: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(get(&mut h), now);
    assert_eq!(get(&mut hb), now);
}

#[test]
fn acknowledged_writes_survive_the_leader_dying_and_refused_ones_are_absent() {
    let mut cluster = cluster();
    let (a, b) = two_replicas(&cluster);
    let mut clients = [http(&a), http(&b)];
    let mut acked = Vec::new();
    let mut refused = Vec::new();
    let mut killed = None;
    let started = Instant::now();
    for i in 0..120u32 {
        if i == 30 {
            let leader = cluster.leader().unwrap();
            cluster.kill(leader).unwrap();
            killed = Some((leader, Instant::now()));
        }
        if i == 80
            && let Some((k, _)) = killed
        {
            cluster.restart(k).unwrap();
        }
        let uid = format!("svc-{i}");
        let ip = format!("10.96.{}.{}", 1 + i / 200, 1 + i % 200);
        let r = put_service(&mut clients[i as usize % 2], &uid, &ip);
        match r.status {
            200 => acked.push(uid),
            503 => refused.push(uid),
            s => panic!("{uid}: {s} {}", String::from_utf8_lossy(&r.body)),
        }
    }
    println!(
        "{} writes acknowledged, {} refused (503) in {:.1} s; leader killed at write 30, \
         restarted at write 80",
        acked.len(),
        refused.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        acked.len() >= 100,
        "too few writes went through: {}",
        acked.len()
    );
    cluster.wait_leader(Duration::from_secs(30)).unwrap();
    for r in [&a, &b] {
        assert_all_present(r, &acked);
        let mut h = http(r);
        for uid in &refused {
            assert!(!has_service(&mut h, uid), "refused {uid} is present");
        }
    }
}

#[test]
fn without_quorum_writes_get_503_and_reads_answer_marked_stale() {
    let mut cluster = cluster();
    let a = replica(&cluster, 1);
    wait_ready(&a);
    let mut h = http(&a);
    assert_eq!(put_service(&mut h, "before", "10.96.0.30").status, 200);
    let leader = cluster.leader().unwrap();
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    cluster.kill(leader).unwrap();
    cluster.kill(others[0]).unwrap();
    let t = Instant::now();
    let r = put_service(&mut h, "during", "10.96.0.31");
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(
        body["errors"]["error"][0]["error-tag"].is_string(),
        "a RESTCONF error body: {body}"
    );
    println!("503 after {:.1} s", t.elapsed().as_secs_f64());
    let read = h
        .request("GET", &format!("{SERVICES}/services/before"), b"")
        .unwrap();
    assert_eq!(read.status, 200, "reads answer from the last state");
    assert!(
        read.warning
            .as_deref()
            .is_some_and(|w| w.starts_with("110")),
        "a read without a leader says it may be stale: {:?}",
        read.warning
    );
    cluster.restart(leader).unwrap();
    cluster.restart(others[0]).unwrap();
    cluster.wait_leader(Duration::from_secs(30)).unwrap();
    wait_ready(&a);
    assert!(
        !has_service(&mut h, "during"),
        "the refused write is absent"
    );
    assert_eq!(put_service(&mut h, "after", "10.96.0.32").status, 200);
}

/// The leader keeps running but loses both followers: a write reaches it and hangs (OVS
/// appends it to the leader's log, which commits it only if a quorum comes back with it). The
/// write is answered 504 (outcome unknown) or 503 (not committed, nothing changed), never 200,
/// and a 503 write is absent afterwards.
#[test]
fn a_leader_without_followers_answers_unknown_or_unavailable_never_ok() {
    let mut cluster = cluster();
    let a = replica(&cluster, 1);
    wait_ready(&a);
    let mut h = http(&a);
    assert_eq!(put_service(&mut h, "before", "10.96.0.40").status, 200);
    let leader = cluster.leader().unwrap();
    for i in (0..3).filter(|i| *i != leader) {
        cluster.kill(i).unwrap();
    }
    let t = Instant::now();
    let r = put_service(&mut h, "during", "10.96.0.41");
    println!(
        "write to a leader without followers: {} after {:.1} s: {}",
        r.status,
        t.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&r.body)
    );
    assert!(
        r.status == 503 || r.status == 504,
        "{} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    for i in (0..3).filter(|i| *i != leader) {
        cluster.restart(i).unwrap();
    }
    cluster.wait_leader(Duration::from_secs(30)).unwrap();
    wait_ready(&a);
    if r.status == 503 {
        assert!(!has_service(&mut h, "during"), "a 503 write must be absent");
    }
    assert_eq!(put_service(&mut h, "after", "10.96.0.42").status, 200);
    assert!(has_service(&mut h, "before"));
}

/// Each member in turn is killed and restarted while writes go on: nothing acknowledged is
/// lost, and the replicas follow every leader change.
#[test]
fn members_restarted_one_by_one_lose_nothing() {
    let mut cluster = cluster();
    let (a, b) = two_replicas(&cluster);
    let mut clients = [http(&a), http(&b)];
    let mut acked = Vec::new();
    let mut n = 0u32;
    for member in 0..3 {
        cluster.kill(member).unwrap();
        for _ in 0..15 {
            let uid = format!("roll-{n}");
            let r = put_service(
                &mut clients[n as usize % 2],
                &uid,
                &format!("10.96.5.{}", n + 1),
            );
            assert!(
                r.status == 200,
                "{uid} with member {member} down: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
            acked.push(uid);
            n += 1;
        }
        cluster.restart(member).unwrap();
        cluster.wait_connected(3, Duration::from_secs(30)).unwrap();
    }
    for r in [&a, &b] {
        assert_all_present(r, &acked);
    }
}

/// `svcflow store export` and `import` move the state from a local store into the cluster
/// and back, unchanged.
#[test]
fn the_state_moves_from_a_local_store_to_the_cluster_and_back() {
    let cluster = cluster();
    let bin = ovs_tests::svcflow::svcflow_binary().unwrap();
    let dir =
        tempdir::Dir(std::env::temp_dir().join(format!("svcflow-move-{}", std::process::id())));
    let (local, back) = (dir.0.join("local"), dir.0.join("back"));
    std::fs::create_dir_all(&local).unwrap();
    // A local store with a node, a service in a namespace and its endpoints.
    {
        use coe::rest::durable::DurableStore;
        use coe::rest::parse;
        use coe::rest::store::{Change, Rules};
        use coe::rest::types::Kind;
        let mut d = DurableStore::open(&local, Rules::default()).unwrap();
        let node = r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"n1","k8s-node:host-name":"n1",
            "k8s-node:internal-ip-address":"192.0.2.1"}]}"#;
        let eps = r#"{"service:endpoints":[{"service:uid":"e1","service:name":"web",
            "service:network-NS":"prod","service:endpoint-addresses":[{"service:ip-address":
            "10.244.1.5"}],"service:endpoint-ports":[{"service:name":"http","service:port":8080}]}]}"#;
        for (kind, body) in [
            (Kind::Node, node.to_string()),
            (
                Kind::Service,
                service("web", "10.96.0.50").replace("default", "prod"),
            ),
            (Kind::Endpoints, eps.to_string()),
        ] {
            let items = parse::container_body(kind, body.as_bytes()).unwrap();
            d.apply(Change::Replace(kind, items)).unwrap();
        }
    }
    let store = format!("ovsdb:{}", cluster.remote_list());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&bin)
            .arg("store")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "svcflow store {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let file = |name: &str| dir.0.join(name).to_string_lossy().to_string();
    let local_dir = local.to_string_lossy().to_string();
    let back_dir = back.to_string_lossy().to_string();
    run(&["export", &file("1.json"), "--state-dir", &local_dir]);
    run(&["import", &file("1.json"), "--store", &store]);
    run(&["export", &file("2.json"), "--store", &store]);
    run(&["import", &file("2.json"), "--state-dir", &back_dir]);
    run(&["export", &file("3.json"), "--state-dir", &back_dir]);
    let read = |name: &str| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(file(name)).unwrap()).unwrap();
        v.as_object_mut().unwrap().remove("revision");
        v
    };
    let first = read("1.json");
    assert_eq!(
        first["service:service-information"]["services"][0]["uid"],
        "web"
    );
    assert_eq!(
        first,
        read("2.json"),
        "the cluster holds the local store's state"
    );
    assert_eq!(first, read("3.json"), "and gives it back");
}

/// A cluster, an in-process replica on it, and `svcflow run --store ovsdb:` (with `args`)
/// on a sandbox node; dropped in that order, the daemon first. Bind every field: one left
/// to `..` is dropped at once (the cluster would stop under the test).
struct DaemonBeside {
    daemon: ovs_tests::svcflow::Daemon,
    sb: ovs_tests::Sandbox,
    a: Replica,
    _cluster: RaftCluster,
}

fn daemon_beside(args: &[&str]) -> DaemonBeside {
    let cluster = cluster();
    let a = replica(&cluster, 1);
    wait_ready(&a);
    let sb = ovs_tests::Sandbox::start().unwrap();
    let store = format!("ovsdb:{}", cluster.unix_remote_list());
    let mut all = vec!["--store", store.as_str()];
    all.extend_from_slice(args);
    let daemon = ovs_tests::svcflow::Daemon::start_with(&sb, 1, "info", &all).unwrap();
    DaemonBeside {
        daemon,
        sb,
        a,
        _cluster: cluster,
    }
}

/// A write to one replica reaches the switch another replica drives: `svcflow run --store
/// ovsdb:` on a sandbox node (over the members' Unix sockets, from the node's namespace)
/// installs the service that the in-process replica accepted.
#[test]
fn a_write_to_one_replica_reaches_the_switch_of_another() {
    let DaemonBeside {
        daemon,
        sb,
        a,
        _cluster,
    } = daemon_beside(&[]);
    let mut h = http(&a);
    put_node(&mut h);
    assert_eq!(put_service(&mut h, "web", "10.96.0.60").status, 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let flows = sb.dump_flows("br-int").unwrap_or_default();
        if flows.contains("nw_dst=10.96.0.60") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the service never reached the other replica's switch\nflows:\n{flows}\ndaemon log:\n{}",
            daemon.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        daemon.log().contains("REST state loaded from ovsdb:"),
        "{}",
        daemon.log()
    );
}

/// After the leader dies the replica's monitor resumes on the new leader with
/// `monitor_cond_since` from the last transaction it saw: the database is not read again.
#[test]
fn a_leader_change_resumes_the_monitor_without_reading_everything_again() {
    use coe::rest::replicated::Replicated;
    use coe::rest::store::{Change, Rules};
    let mut cluster = cluster();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let r = Replicated::start(&cluster.remotes(), Rules::default(), || {}).unwrap();
        r.wait_ready(Duration::from_secs(30)).await.unwrap();
        let item = |uid: &str, ip: &str| {
            coe::rest::parse::item_body(
                coe::rest::types::Kind::Service,
                uid,
                service(uid, ip).as_bytes(),
            )
            .unwrap()
        };
        r.write(Change::Upsert(item("one", "10.96.7.1")))
            .await
            .unwrap();
        let reads = r.mirror().lock().unwrap().full_reads;
        assert_eq!(reads, 1, "the first dump");
        let leader = cluster.leader().unwrap();
        cluster.kill(leader).unwrap();
        r.write(Change::Upsert(item("two", "10.96.7.2")))
            .await
            .unwrap();
        let m = r.mirror().lock().unwrap();
        assert!(m.store.contains(coe::rest::types::Kind::Service, "one"));
        assert!(m.store.contains(coe::rest::types::Kind::Service, "two"));
        assert_eq!(
            m.full_reads, 1,
            "the monitor resumed on the new leader instead of reading the database again"
        );
    });
}

/// Two `svcflow run` daemons (each on its own sandbox node, n1 and n2) share the cluster: a write loop
/// through both daemons' REST servers while the Raft leader is killed and restarted; every
/// acknowledged write is present on both afterwards, and each daemon's switch has the last
/// service.
#[test]
fn two_daemons_take_a_write_loop_through_a_leader_change() {
    use ovs_tests::Sandbox;
    use ovs_tests::svcflow::{Daemon, REST};
    let mut cluster = cluster();
    let store = format!("ovsdb:{}", cluster.unix_remote_list());
    let sandboxes = [Sandbox::start().unwrap(), Sandbox::start().unwrap()];
    // Node n1 on the first sandbox, n2 on the second: each daemon dials its own node, and
    // the election gives it that node (a node has one master among the replicas).
    let daemons: Vec<Daemon> = sandboxes
        .iter()
        .enumerate()
        .map(|(i, sb)| {
            Daemon::start_as(sb, 1, &format!("n{}", i + 1), &["--store", &store]).unwrap()
        })
        .collect();
    let mut clients: Vec<Http> = sandboxes
        .iter()
        .map(|sb| Http::new(sb.node_netns(), REST).with_read_timeout(Duration::from_secs(30)))
        .collect();
    // Both mirror the cluster: reads answer without a staleness warning.
    for (h, d) in clients.iter_mut().zip(&daemons) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !h
            .request("GET", SERVICES, b"")
            .is_ok_and(|r| r.status == 200 && r.warning.is_none())
        {
            assert!(Instant::now() < deadline, "never ready:\n{}", d.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    put_node(&mut clients[0]);
    let n2 = r#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"node-2","k8s-node:host-name":"n2",
        "k8s-node:internal-ip-address":"192.168.50.11","k8s-node:pod-cidr":"10.244.1.0/24"}]}"#;
    let r = clients[1]
        .request(
            "PUT",
            "/restconf/config/k8s-node:k8s-nodes-info/k8s-nodes/node-2",
            n2.as_bytes(),
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (mut acked, mut refused) = (Vec::new(), Vec::new());
    for i in 0..60u32 {
        if i == 20 {
            let leader = cluster.leader().unwrap();
            cluster.kill(leader).unwrap();
        }
        if i == 40 {
            let down = (0..3).find(|m| !cluster.is_running(*m)).unwrap();
            cluster.restart(down).unwrap();
        }
        let uid = format!("d-{i}");
        let r = put_service(
            &mut clients[i as usize % 2],
            &uid,
            &format!("10.96.9.{}", i + 1),
        );
        match r.status {
            200 => acked.push(uid),
            503 | 504 => refused.push((uid, r.status)),
            s => panic!("{uid}: {s} {}", String::from_utf8_lossy(&r.body)),
        }
    }
    println!("{} acknowledged, refused: {refused:?}", acked.len());
    assert!(acked.len() >= 55, "{} acknowledged", acked.len());
    cluster.wait_leader(Duration::from_secs(30)).unwrap();
    for h in clients.iter_mut() {
        let deadline = Instant::now() + Duration::from_secs(10);
        for uid in &acked {
            while !has_service(h, uid) {
                assert!(Instant::now() < deadline, "{uid} missing");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for (uid, status) in &refused {
            if *status == 503 {
                assert!(!has_service(h, uid), "refused {uid} is present");
            }
        }
    }
    // Each daemon's switch has the last acknowledged service.
    let last = acked
        .last()
        .unwrap()
        .trim_start_matches("d-")
        .parse::<u32>()
        .unwrap();
    let vip = format!("nw_dst=10.96.9.{}", last + 1);
    for (sb, d) in sandboxes.iter().zip(&daemons) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !sb.dump_flows("br-int").unwrap_or_default().contains(&vip) {
            assert!(
                Instant::now() < deadline,
                "{vip} never reached the switch:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The published model of `r` once `done` holds of it (up to 10 s).
fn wait_published(
    r: &Replica,
    what: &str,
    done: impl Fn(&coe::rest::Published) -> bool,
) -> Arc<coe::rest::Published> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = r.revision.borrow().clone();
        if done(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: replica {} published revision {} with services {:?}",
            r.addr,
            now.revision,
            now.model.services.keys().collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A replica never programs what its own rules refuse. Another replica, with the default
/// node-port range, writes a service on node port 30080; a replica limited to 31000–31999
/// keeps publishing the last state it accepted (its switches stay as they were) while it
/// still takes writes, each checked against its rules. One of them, removing that service,
/// mends the state, and the replica publishes everything written meanwhile.
#[test]
fn a_replica_does_not_publish_a_state_its_rules_refuse() {
    let key = |name: &str| netvirt::model::ServiceKey::new("default", name);
    let cluster = cluster();
    let wide = replica(&cluster, 1);
    let narrow = replica_with(&cluster, 2, 31000..=31999);
    wait_ready(&wide);
    wait_ready(&narrow);
    let mut w = http(&wide);
    let mut n = http(&narrow);
    put_node(&mut w);
    assert_eq!(put_service(&mut w, "web", "10.96.0.60").status, 200);
    let accepted = wait_published(&narrow, "web on the narrow replica", |p| {
        p.model.services.contains_key(&key("web"))
    });

    let r = put_node_port_service(&mut w, "np", "10.96.0.61");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // The narrow replica's own write of the same is refused, as ever.
    let r = put_node_port_service(&mut n, "np2", "10.96.0.63");
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("30080"));
    wait_published(&wide, "np on the wide replica", |p| {
        p.model.services.contains_key(&key("np"))
    });
    // It mirrors the cluster (reads show np) but publishes none of it, nor what follows.
    assert!(has_service(&mut n, "np"));
    assert_eq!(put_service(&mut n, "api", "10.96.0.62").status, 200);
    assert!(has_service(&mut w, "api"));
    std::thread::sleep(Duration::from_secs(1));
    let held = narrow.revision.borrow().clone();
    assert_eq!(
        held.revision, accepted.revision,
        "the narrow replica published a refused state"
    );
    assert!(!held.model.services.contains_key(&key("np")));
    assert!(!held.model.services.contains_key(&key("api")));
    // A replica started with the same rules on that state publishes nothing of it.
    let late = replica_with(&cluster, 3, 31000..=31999);
    wait_ready(&late);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        late.revision.borrow().revision,
        0,
        "a replica started on a state its rules refuse published it"
    );

    // Removing np through the narrow replica mends the state: it publishes all of it.
    let r = n
        .request("DELETE", &format!("{SERVICES}/services/np"), b"")
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mended = wait_published(&narrow, "api once np is gone", |p| {
        p.model.services.contains_key(&key("api"))
    });
    assert!(!mended.model.services.contains_key(&key("np")));
    assert!(mended.model.services.contains_key(&key("web")));
    let late = wait_published(&late, "the mended state on the late replica", |p| {
        p.model.services.contains_key(&key("api"))
    });
    assert_eq!(late.revision, mended.revision);
}

/// The same through a daemon on a real switch: while the cluster's state breaks its rules,
/// `svcflow_store_refused` is 1, its log names the item, and its switch gets none of the
/// state (not the refused service, nor one written after it); once the item is removed, the
/// metric is 0 again and the switch gets what was written meanwhile.
#[test]
fn a_daemon_on_a_state_its_rules_refuse_says_so_and_keeps_its_switch() {
    let DaemonBeside {
        daemon,
        sb,
        a,
        _cluster,
    } = daemon_beside(&["--node-port-range", "31000-31999"]);
    let refused = || {
        let scrape = sb
            .node(&["curl", "-sS", "-f", "http://127.0.0.1:10249/metrics"])
            .unwrap_or_default();
        scrape.lines().find_map(|l| {
            l.strip_prefix("svcflow_store_refused ")?
                .trim()
                .parse::<u8>()
                .ok()
        })
    };
    let wait = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ok() {
            assert!(
                Instant::now() < deadline,
                "{what}\nflows:\n{}\ndaemon log:\n{}",
                sb.dump_flows("br-int").unwrap_or_default(),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // A flow to the address itself (not to 10.96.0.600 and the like).
    let on_switch = |ip: &str| {
        let flows = sb.dump_flows("br-int").unwrap_or_default();
        let at = format!("nw_dst={ip}");
        flows.match_indices(&at).any(|(i, _)| {
            !flows[i + at.len()..].starts_with(|c: char| c.is_ascii_digit() || c == '.')
        })
    };
    let mut h = http(&a);
    put_node(&mut h);
    assert_eq!(put_service(&mut h, "web", "10.96.0.60").status, 200);
    wait("web on the switch", &|| on_switch("10.96.0.60"));
    assert_eq!(refused(), Some(0));

    let r = put_node_port_service(&mut h, "np", "10.96.0.61");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(put_service(&mut h, "api", "10.96.0.62").status, 200);
    wait("svcflow_store_refused 1", &|| refused() == Some(1));
    assert!(
        daemon
            .log()
            .contains("breaks this replica's rules: services[np]"),
        "{}",
        daemon.log()
    );
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !on_switch("10.96.0.61"),
        "the refused service reached the switch"
    );
    assert!(
        !on_switch("10.96.0.62"),
        "a state the daemon refuses reached the switch"
    );
    assert!(
        on_switch("10.96.0.60"),
        "the switch lost the last accepted state"
    );

    let r = h
        .request("DELETE", &format!("{SERVICES}/services/np"), b"")
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    wait("api on the switch once np is gone", &|| {
        on_switch("10.96.0.62")
    });
    assert_eq!(refused(), Some(0));
    assert!(!on_switch("10.96.0.61"));
    assert!(
        daemon.log().contains("meets this replica's rules again"),
        "{}",
        daemon.log()
    );
}
