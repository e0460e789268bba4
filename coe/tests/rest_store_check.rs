//! The scoped check that `Store::apply` runs for small changes agrees with a full check of
//! the whole store, on many random changes drawn from a small pool of addresses, ports and
//! names so that clashes are frequent.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

use coe::rest::error::RequestError;
use coe::rest::parse;
use coe::rest::store::{Change, Effect, Rules, Store, Touched};
use coe::rest::types::{Item, Kind};
use serde_json::{Value, json};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_item(r: &mut Rng) -> Item {
    let uid = format!("u{}", r.pick(12));
    let kind = Kind::ALL[r.pick(4) as usize];
    item_of(r, kind, &uid, 1)
}

/// An item of `kind` named `uid`, its names, addresses, ports and interfaces drawn from pools
/// `scale` times the small ones (node ports `scale` times rarer).
fn item_of(r: &mut Rng, kind: Kind, uid: &str, scale: u64) -> Item {
    // A service address: one of six, or with a larger scale one of 262,144.
    let ip = |r: &mut Rng| {
        if scale == 1 {
            format!("10.96.0.{}", r.pick(6))
        } else {
            format!("10.{}.{}.{}", 96 + r.pick(4), r.pick(256), r.pick(256))
        }
    };
    let body: Value = match kind {
        Kind::Service => {
            let ports: Vec<Value> = (0..r.pick(3))
                .map(|_| {
                    let protocol = ["TCP", "UDP"][r.pick(2) as usize];
                    let mut p = json!({ "port": 80 + r.pick(3 * scale), "protocol": protocol });
                    if r.pick(2 * scale) == 0 {
                        p["node-port"] = json!(30000 + r.pick(4));
                    }
                    p
                })
                .collect();
            let mut s = json!({ "uid": uid, "name": format!("n{}", r.pick(6 * scale)), "service-ports": ports,
                "cluster-ip-address": ip(r) });
            if r.pick(3) == 0 {
                s["external-ip-address"] = json!([ip(r)]);
            }
            // A health-check node port shares the node ports' pool.
            if r.pick(3 * scale) == 0 {
                s["external-traffic-policy"] = json!("Local");
                s["health-check-node-port"] = json!(30000 + r.pick(4));
            }
            s
        }
        Kind::Endpoints => {
            let ns = ["", "default", "prod"][r.pick(3) as usize];
            json!({ "uid": uid, "name": format!("n{}", r.pick(6 * scale)), "network-NS": ns })
        }
        Kind::Pod => {
            let mut ifaces: Vec<String> = (0..r.pick(3))
                .map(|_| format!("i{}", r.pick(10 * scale)))
                .collect();
            ifaces.dedup();
            let ifaces: Vec<Value> = ifaces.into_iter().map(|i| json!({ "uid": i })).collect();
            json!({ "uid": uid, "interface": ifaces })
        }
        Kind::Node => json!({ "uid": uid, "host-name": format!("h{}", r.pick(6 * scale)) }),
    };
    let wrapped = json!({ kind.list(): [body] });
    parse::item_body(kind, uid, wrapped.to_string().as_bytes()).unwrap()
}

/// How many changes a test saw accepted and refused.
#[derive(Default)]
struct Tally {
    accepted: usize,
    rejected: usize,
}

impl Tally {
    /// The store's verdict on a change (`scoped`) is the full check's; an accepted change
    /// leaves the store equal to `reference` (the change applied unchecked), a refused one as
    /// it was (`before`).
    fn agree(
        &mut self,
        what: &str,
        scoped: Result<(), RequestError>,
        full: Result<(), RequestError>,
        [store, reference, before]: [&Store; 3],
    ) {
        assert_eq!(
            scoped.is_ok(),
            full.is_ok(),
            "{what}\nscoped: {:?}\nfull: {full:?}",
            scoped.as_ref().err()
        );
        if scoped.is_ok() {
            self.accepted += 1;
            assert_eq!(store, reference);
        } else {
            self.rejected += 1;
            assert_eq!(
                store, before,
                "a rejected change leaves the store as it was"
            );
        }
    }

    /// Applies `change`, a write of `item` alone, to `store`, and holds its verdict and
    /// result to [`Tally::agree`] against `item` upserted unchecked.
    fn write(&mut self, what: &str, store: &mut Store, rules: &Rules, item: &Item, change: Change) {
        let mut reference = store.clone();
        reference.apply_effects(&[Effect::Upsert(item.clone())]);
        let full = reference.check(rules, &Touched::default());
        let before = store.clone();
        let scoped = store.apply(change, rules);
        self.agree(what, scoped.map(drop), full, [store, &reference, &before]);
    }

    /// Both verdicts came more than `n` times.
    fn mixed(&self, n: usize) {
        assert!(
            self.accepted > n && self.rejected > n,
            "accepted {}, rejected {}",
            self.accepted,
            self.rejected
        );
    }
}

#[test]
fn scoped_checks_agree_with_full_checks() {
    let rules = Rules {
        node_port_range: 30000..=30002,
    };
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut store = Store::default();
    let mut tally = Tally::default();
    for _ in 0..5000 {
        let item = random_item(&mut rng);
        let change = if rng.pick(2) == 0 || store.contains(item.kind(), item.uid()) {
            Change::Upsert(item.clone())
        } else {
            Change::Create(item.kind(), vec![item.clone()])
        };
        tally.write(&format!("{item:?}"), &mut store, &rules, &item, change);
        if rng.pick(10) == 0 {
            let kind = Kind::ALL[rng.pick(4) as usize];
            let uid = format!("u{}", rng.pick(12));
            if store.contains(kind, &uid) {
                store.apply(Change::Delete(kind, uid), &rules).unwrap();
            }
        }
    }
    tally.mixed(500);
}

/// A container PUT (it checks every item of the kind it writes, which are all items it
/// wrote, and no other kind) agrees with a full check of the whole store, whether it writes
/// more items than the scoped check of small writes takes or a few.
#[test]
fn container_checks_agree_with_full_checks() {
    let rules = Rules {
        node_port_range: 30000..=30002,
    };
    let mut rng = Rng(0x0dd_ba11_5eed_f00d);
    let mut store = Store::default();
    let mut tally = Tally::default();
    for round in 0..400 {
        // Some small writes of every kind, as the other test makes them, each checked
        // against a full check too: their scoped check reads the index a container PUT left
        // unbuilt, built either by the write itself or beforehand as the publisher does.
        for _ in 0..5 {
            if rng.pick(2) == 0 {
                store.build_index();
            }
            let item = random_item(&mut rng);
            let change = Change::Upsert(item.clone());
            tally.write(
                &format!("round {round}, {item:?}"),
                &mut store,
                &rules,
                &item,
                change,
            );
        }
        let kind = Kind::ALL[rng.pick(4) as usize];
        // Larger than the scoped check takes, or a few items: a list replaced whole is
        // checked within its kind either way.
        let n = if rng.pick(3) == 0 {
            1 + rng.pick(8)
        } else {
            65 + rng.pick(20)
        };
        let items: Vec<Item> = (0..n)
            .map(|i| item_of(&mut rng, kind, &format!("r{round}-{i}"), 1_000))
            .collect();
        let mut reference = store.clone();
        let mut effects = vec![Effect::Clear(kind)];
        effects.extend(items.iter().cloned().map(Effect::Upsert));
        reference.apply_effects(&effects);
        let full = reference.check(&rules, &Touched::default());
        let before = store.clone();
        let scoped = store.apply(Change::Replace(kind, items), &rules);
        tally.agree(
            &format!("round {round}, {kind:?}"),
            scoped.map(drop),
            full,
            [&store, &reference, &before],
        );
    }
    tally.mixed(50);
}

/// Services `s0000`, `s0001`, … each with a name and a VIP of its own, except that service
/// `name_clash` takes service 10's name and `vip_clash` service 50's VIP and port.
fn services(n: usize, name_clash: usize, vip_clash: usize) -> Vec<Item> {
    (0..n)
        .map(|i| {
            let uid = format!("s{i:04}");
            let name = format!("n{}", if i == name_clash { 10 } else { i });
            let v = if i == vip_clash { 50 } else { i };
            let body = json!({ "services": [{ "uid": uid, "name": name,
                "cluster-ip-address": format!("10.96.{}.{}", v / 256, v % 256),
                "service-ports": [{ "port": 80, "protocol": "TCP" }] }] });
            parse::item_body(Kind::Service, &uid, body.to_string().as_bytes()).unwrap()
        })
        .collect()
}

/// A container PUT's names and addresses are checked apart (on two threads from 2,048
/// services); the error it gives is still the one a single loop over the services in order
/// meets first: the first failing service's, its name's before its addresses'. Both sizes, so
/// that the threaded check and the plain one are held to the same answer.
#[test]
fn a_container_check_reports_the_first_failing_service() {
    let rules = Rules::default();
    for n in [300, 3_000] {
        for (name_clash, vip_clash, expected) in [
            (200, 100, ("s0100", "VIP")),
            (100, 200, ("s0100", ".name")),
            (100, 100, ("s0100", ".name")),
        ] {
            let mut store = Store::default();
            let error = store
                .apply(
                    Change::Replace(Kind::Service, services(n, name_clash, vip_clash)),
                    &rules,
                )
                .unwrap_err();
            let text = format!("{error:?}");
            assert!(
                text.contains(expected.0) && text.contains(expected.1),
                "{n} services, name clash at {name_clash}, VIP clash at {vip_clash}: {text}"
            );
            assert_eq!(store, Store::default(), "a refused PUT changes nothing");
        }
        let mut store = Store::default();
        let all = services(n, usize::MAX, usize::MAX);
        store
            .apply(Change::Replace(Kind::Service, all), &rules)
            .unwrap();
        assert_eq!(store.services.len(), n);
    }
}
