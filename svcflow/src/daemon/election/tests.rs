use super::*;

const A: &str = "tcp:10.0.0.1:6653";
const B: &str = "tcp:10.0.0.2:6653";
const C: &str = "tcp:10.0.0.3:6653";
const HOLD: Duration = Duration::from_secs(10);

fn live(targets: &[&str]) -> BTreeSet<String> {
    targets.iter().map(|t| t.to_string()).collect()
}

fn nodes(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node-{i}")).collect()
}

#[test]
fn lock_names_are_ovsdb_ids() {
    let name = lock_name("worker-1.example.com");
    assert!(name.starts_with("svcflow_node_"));
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "{name}"
    );
    assert_ne!(lock_name("a"), lock_name("b"));
}

#[test]
fn thirty_nodes_spread_over_three_replicas_and_only_the_lost_replicas_nodes_move() {
    let all = live(&[A, B, C]);
    let count = |of: &str, set: &BTreeSet<String>| {
        nodes(30)
            .iter()
            .filter(|n| preferred(set, n) == Some(of))
            .count()
    };
    let counts: Vec<usize> = [A, B, C].iter().map(|r| count(r, &all)).collect();
    assert_eq!(counts.iter().sum::<usize>(), 30);
    assert!(
        counts.iter().all(|c| (5..=15).contains(c)),
        "each replica should prefer about 10 of 30 nodes: {counts:?}"
    );
    // Without C, C's nodes go to A and B; A's and B's stay where they were.
    let without_c = live(&[A, B]);
    for node in nodes(30) {
        let before = preferred(&all, &node).unwrap();
        let after = preferred(&without_c, &node).unwrap();
        if before != C {
            assert_eq!(before, after, "{node} moved though its replica stayed");
        }
    }
}

#[test]
fn a_new_node_is_queued_for_and_claimed_once_locked() {
    let t0 = Instant::now();
    let mut e = Election::new(A.into(), HOLD);
    e.controllers("n1", live(&[A, B]), t0);
    assert_eq!(e.poll(t0), vec![Order::Lock("n1".into())]);
    assert_eq!(e.poll(t0), vec![], "queued once");
    e.locked("n1", t0);
    assert_eq!(
        e.poll(t0),
        vec![Order::Claim {
            node: "n1".into(),
            floor: 0
        }]
    );
    assert!(
        e.masters().is_empty(),
        "no master before the epoch is claimed"
    );
    e.claimed("n1", 7);
    assert_eq!(e.masters(), BTreeMap::from([("n1".to_string(), 7)]));
    assert_eq!(e.poll(t0), vec![]);
}

#[test]
fn a_stale_generation_is_claimed_past() {
    let t0 = Instant::now();
    let mut e = Election::new(A.into(), HOLD);
    e.controllers("n1", live(&[A]), t0);
    e.poll(t0);
    e.locked("n1", t0);
    e.poll(t0);
    e.claimed("n1", 3);
    e.stale("n1", Some(41));
    assert!(e.masters().is_empty());
    assert_eq!(
        e.poll(t0),
        vec![Order::Claim {
            node: "n1".into(),
            floor: 42
        }]
    );
}

#[test]
fn the_preferred_replica_steals_only_after_its_switch_connection_lasted_the_hold_down() {
    let t0 = Instant::now();
    let node = nodes(30)
        .into_iter()
        .find(|n| preferred(&live(&[A, B]), n) == Some(A))
        .unwrap();
    let mut e = Election::new(A.into(), HOLD);
    e.controllers(&node, live(&[A, B]), t0);
    e.poll(t0);
    e.switch(&node, true, t0);
    assert_eq!(e.poll(t0 + HOLD / 2), vec![], "too soon");
    assert_eq!(e.next_deadline(t0 + HOLD / 2), Some(t0 + HOLD));
    assert_eq!(e.poll(t0 + HOLD), vec![Order::Steal(node.clone())]);
    e.locked(&node, t0 + HOLD);
    // Stolen back right away (another replica's view): still queued, so nothing to send,
    // and no steal again within the hold-down.
    e.lost(&node);
    let orders = e.poll(t0 + HOLD + Duration::from_secs(1));
    assert_eq!(orders, vec![], "do not steal back at once");
    assert_eq!(e.poll(t0 + HOLD + Duration::from_secs(2)), vec![]);
    assert_eq!(e.poll(t0 + HOLD * 2), vec![Order::Steal(node)]);
}

#[test]
fn a_replica_that_is_not_preferred_never_steals() {
    let t0 = Instant::now();
    let node = nodes(30)
        .into_iter()
        .find(|n| preferred(&live(&[A, B]), n) == Some(B))
        .unwrap();
    let mut e = Election::new(A.into(), HOLD);
    e.controllers(&node, live(&[A, B]), t0);
    e.poll(t0);
    e.switch(&node, true, t0);
    assert_eq!(e.poll(t0 + HOLD * 10), vec![]);
}

#[test]
fn a_master_cut_off_from_the_switch_gives_the_node_to_a_replica_that_reaches_it() {
    let t0 = Instant::now();
    let mut e = Election::new(A.into(), HOLD);
    e.controllers("n1", live(&[A, B]), t0);
    e.switch("n1", true, t0);
    e.poll(t0);
    e.locked("n1", t0);
    e.poll(t0);
    e.claimed("n1", 1);
    let t1 = t0 + HOLD;
    e.switch("n1", false, t1);
    e.controllers("n1", live(&[B]), t1);
    assert_eq!(e.poll(t1), vec![], "within the grace period");
    let t2 = t1 + SWITCH_GRACE;
    assert_eq!(
        e.poll(t2),
        vec![Order::Unlock("n1".into()), Order::Lock("n1".into())]
    );
    assert!(e.masters().is_empty());
    // Alone with the switch, a cut-off master keeps the node: nobody else could serve it.
    let mut alone = Election::new(A.into(), HOLD);
    alone.controllers("n1", live(&[]), t0);
    alone.poll(t0);
    alone.locked("n1", t0);
    alone.poll(t0);
    alone.claimed("n1", 1);
    assert_eq!(alone.poll(t0 + HOLD * 3), vec![]);
}

#[test]
fn a_lost_connection_drops_every_mastership_until_the_server_grants_again() {
    let t0 = Instant::now();
    let mut e = Election::new(A.into(), HOLD);
    for n in ["n1", "n2"] {
        e.controllers(n, live(&[A]), t0);
    }
    e.poll(t0);
    for n in ["n1", "n2"] {
        e.locked(n, t0);
    }
    e.poll(t0);
    e.claimed("n1", 1);
    e.claimed("n2", 1);
    assert_eq!(e.masters().len(), 2);
    e.disconnected();
    assert!(e.masters().is_empty());
    assert_eq!(e.poll(t0), vec![], "the client re-queues by itself");
    e.locked("n2", t0);
    assert_eq!(
        e.poll(t0),
        vec![Order::Claim {
            node: "n2".into(),
            floor: 1
        }]
    );
}

#[test]
fn deposed_and_gone_nodes_give_their_lock_up() {
    let t0 = Instant::now();
    let mut e = Election::new(A.into(), HOLD);
    e.controllers("n1", live(&[A]), t0);
    e.poll(t0);
    e.locked("n1", t0);
    assert_eq!(
        e.deposed("n1", t0),
        vec![Order::Unlock("n1".into()), Order::Lock("n1".into())]
    );
    assert_eq!(e.deposed("n1", t0), vec![], "not the owner any more");
    assert_eq!(e.gone("n1"), vec![Order::Unlock("n1".into())]);
    assert_eq!(e.gone("n1"), vec![]);
}

#[test]
fn the_epoch_transactions_assert_the_lock() {
    let read = read_ops("L", "n1");
    assert_eq!(
        read[0].to_json(),
        serde_json::json!({"op":"assert","lock":"L"})
    );
    let me = Me {
        target: A.into(),
        rest: "http://10.0.0.1:8181".into(),
    };
    let write = write_ops("L", "n1", &me, Some(4), 5);
    assert_eq!(
        write[0].to_json(),
        serde_json::json!({"op":"assert","lock":"L"})
    );
    assert_eq!(write[1].to_json()["op"], "wait");
    assert_eq!(write[2].to_json()["row"]["epoch"], 5);
    assert_eq!(write[2].to_json()["row"]["rest"], "http://10.0.0.1:8181");
    let first = write_ops("L", "n1", &me, None, 1);
    assert_eq!(first[1].to_json()["op"], "insert");
    assert_eq!(first[1].to_json()["row"]["node"], "n1");
}
