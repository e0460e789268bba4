//! The Lease book decides alone from what it is told and the time it is given.

use super::*;

const ME: &str = "tcp:10.0.0.1:6653";
const OTHER: &str = "tcp:10.0.0.2:6653";
const D: Duration = Duration::from_secs(15);

fn lease(holder: Option<&str>, epoch: u64, version: u64) -> NodeLease {
    NodeLease {
        node: "n1".into(),
        holder: holder.map(str::to_string),
        rest: holder.map(|_| "http://10.0.0.2:8181".to_string()),
        epoch,
        duration: D,
        version: version.to_string(),
    }
}

fn take(read: Option<NodeLease>, epoch: u64) -> Op {
    Op::Take {
        node: "n1".into(),
        read,
        epoch,
    }
}

fn wanting(t0: Instant) -> Book {
    let mut book = Book::new(ME.into(), D);
    let (ops, out) = book.order(Order::Lock("n1".into()), t0);
    assert!(ops.is_empty() && out.is_empty());
    book
}

#[test]
fn a_node_without_a_lease_is_taken_at_epoch_one_once_the_watch_has_listed() {
    let t0 = Instant::now();
    let mut book = wanting(t0);
    // Before the list, a missing Lease may only be unseen.
    assert_eq!(book.poll(t0), (vec![], vec![]));
    assert!(book.listed(vec![], t0).is_empty());
    assert_eq!(book.poll(t0).0, vec![take(None, 1)]);
    let mine = lease(Some(ME), 1, 5);
    assert_eq!(
        book.written(mine.clone(), t0),
        vec![Outcome::Taken("n1".into(), 1)]
    );
    assert_eq!(book.holders()["n1"].0, ME);
    // Renewed every third of the duration, not before.
    assert_eq!(book.poll(t0 + D / 3 - Duration::from_millis(1)).0, vec![]);
    assert_eq!(book.next_deadline(t0), Some(t0 + D / 3));
    assert_eq!(book.poll(t0 + D / 3).0, vec![Op::Renew(mine)]);
}

#[test]
fn a_lease_held_elsewhere_is_taken_a_duration_after_it_last_changed_here() {
    let t0 = Instant::now();
    let mut book = wanting(t0);
    book.listed(vec![lease(Some(OTHER), 4, 10)], t0);
    assert_eq!(book.poll(t0 + D / 2).0, vec![]);
    // A renewal seen resets the count; the holder's own timestamps play no part.
    let t1 = t0 + D / 2;
    assert!(book.seen(lease(Some(OTHER), 4, 11), t1).is_empty());
    assert_eq!(book.poll(t0 + D).0, vec![]);
    assert_eq!(book.next_deadline(t0 + D), Some(t1 + D));
    assert_eq!(
        book.poll(t1 + D).0,
        vec![take(Some(lease(Some(OTHER), 4, 11)), 5)]
    );
    // An older version arriving late changes nothing.
    assert!(book.seen(lease(Some(OTHER), 4, 9), t1 + D).is_empty());
    // Losing the race: another wrote first, so read again and wait for that version.
    assert_eq!(
        book.failed("n1", &LeaseError::Conflict, t1 + D),
        vec![Op::Read("n1".into())]
    );
    let t2 = t1 + D + Duration::from_millis(5);
    assert!(
        book.seen(lease(Some("tcp:10.0.0.3:6653"), 5, 12), t2)
            .is_empty()
    );
    assert_eq!(book.poll(t2 + D / 2).0, vec![]);
}

#[test]
fn a_released_lease_or_one_in_our_own_name_is_free_at_once() {
    let t0 = Instant::now();
    let mut book = wanting(t0);
    book.listed(vec![lease(None, 7, 3)], t0);
    assert_eq!(book.poll(t0).0, vec![take(Some(lease(None, 7, 3)), 8)]);
    let mut book = wanting(t0);
    // A former run of this replica (same target) held it.
    book.listed(vec![lease(Some(ME), 2, 3)], t0);
    assert_eq!(book.poll(t0).0, vec![take(Some(lease(Some(ME), 2, 3)), 3)]);
}

#[test]
fn a_steal_takes_the_lease_at_once_and_the_robbed_holder_learns_from_its_watch() {
    let t0 = Instant::now();
    let mut thief = Book::new(ME.into(), D);
    thief.listed(vec![lease(Some(OTHER), 4, 10)], t0);
    thief.order(Order::Lock("n1".into()), t0);
    assert_eq!(thief.poll(t0).0, vec![]);
    thief.order(Order::Steal("n1".into()), t0);
    assert_eq!(
        thief.poll(t0).0,
        vec![take(Some(lease(Some(OTHER), 4, 10)), 5)]
    );

    let mut robbed = Book::new(OTHER.into(), D);
    robbed.listed(vec![], t0);
    robbed.order(Order::Lock("n1".into()), t0);
    robbed.written(lease(Some(OTHER), 4, 10), t0);
    assert_eq!(
        robbed.seen(lease(Some(ME), 5, 11), t0),
        vec![Outcome::Lost("n1".into())]
    );
    // It stays queued: it renews nothing, and takes the Lease only once the thief stops.
    assert_eq!(robbed.poll(t0 + D / 2).0, vec![]);
    assert_eq!(
        robbed.poll(t0 + D).0,
        vec![Op::Take {
            node: "n1".into(),
            read: Some(lease(Some(ME), 5, 11)),
            epoch: 6
        }]
    );
}

#[test]
fn a_holder_that_cannot_renew_drops_the_lease_before_anyone_may_take_it() {
    let t0 = Instant::now();
    let mut book = wanting(t0);
    book.listed(vec![], t0);
    book.written(lease(Some(ME), 1, 5), t0);
    let mut now = t0 + D / 3;
    let mut lost_at = None;
    while now < t0 + D {
        let (ops, out) = book.poll(now);
        if out.contains(&Outcome::Lost("n1".into())) {
            lost_at = Some(now);
            break;
        }
        for op in ops {
            assert!(matches!(op, Op::Renew(_)), "{op:?}");
            let err = LeaseError::Api("connection refused".into());
            assert!(book.failed("n1", &err, now).is_empty());
        }
        now += Duration::from_millis(250);
    }
    let lost_at = lost_at.expect("the lease was never dropped");
    assert!(lost_at >= t0 + D * 2 / 3 && lost_at < t0 + D, "{lost_at:?}");
    assert!(
        book.holders().contains_key("n1"),
        "the others still see it held"
    );
}

#[test]
fn giving_a_lease_up_releases_it_and_leaves_it_to_the_others_for_a_duration() {
    let t0 = Instant::now();
    let mut book = wanting(t0);
    book.listed(vec![], t0);
    let mine = lease(Some(ME), 3, 5);
    book.written(mine.clone(), t0);
    let (ops, out) = book.order(Order::Unlock("n1".into()), t0);
    assert_eq!(ops, vec![Op::Release(mine)]);
    assert_eq!(out, vec![Outcome::Lost("n1".into())]);
    // The election queues again at once (its release is Unlock then Lock).
    book.order(Order::Lock("n1".into()), t0);
    book.seen(lease(None, 3, 6), t0);
    assert_eq!(book.poll(t0 + D / 2).0, vec![]);
    assert_eq!(book.poll(t0 + D).0, vec![take(Some(lease(None, 3, 6)), 4)]);
}

#[test]
fn a_claim_past_what_the_switch_accepted_bumps_the_lease_and_a_lost_one_says_so() {
    let t0 = Instant::now();
    let mut book = wanting(t0);
    book.listed(vec![], t0);
    let mine = lease(Some(ME), 3, 5);
    book.written(mine.clone(), t0);
    let claim = |floor| Order::Claim {
        node: "n1".into(),
        floor,
    };
    assert_eq!(
        book.order(claim(2), t0),
        (vec![], vec![Outcome::Taken("n1".into(), 3)])
    );
    assert_eq!(book.order(claim(9), t0).0, vec![take(Some(mine), 9)]);
    assert_eq!(
        book.written(lease(Some(ME), 9, 6), t0),
        vec![Outcome::Taken("n1".into(), 9)]
    );
    // The Lease deleted under us: no longer ours, and a claim says so.
    assert_eq!(book.deleted("n1"), vec![Outcome::Lost("n1".into())]);
    assert_eq!(
        book.order(claim(1), t0),
        (vec![], vec![Outcome::Lost("n1".into())])
    );
    // A relist without it re-creates it past the floor.
    book.listed(vec![], t0);
    assert_eq!(book.poll(t0).0, vec![take(None, 9)]);
}
