//! The scoped check that `Store::apply` runs for small changes agrees with a full check of
//! the whole store, on many random changes drawn from a small pool of addresses, ports and
//! names so that clashes are frequent.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

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
    let body: Value = match kind {
        Kind::Service => {
            let ports: Vec<Value> = (0..r.pick(3))
                .map(|_| {
                    let protocol = ["TCP", "UDP"][r.pick(2) as usize];
                    let mut p = json!({ "port": 80 + r.pick(3), "protocol": protocol });
                    if r.pick(2) == 0 {
                        p["node-port"] = json!(30000 + r.pick(4));
                    }
                    p
                })
                .collect();
            let mut s = json!({ "uid": uid, "name": format!("n{}", r.pick(6)), "service-ports": ports,
                "cluster-ip-address": format!("10.96.0.{}", r.pick(6)) });
            if r.pick(3) == 0 {
                s["external-ip-address"] = json!([format!("10.96.0.{}", r.pick(6))]);
            }
            s
        }
        Kind::Endpoints => {
            let ns = ["", "default", "prod"][r.pick(3) as usize];
            json!({ "uid": uid, "name": format!("n{}", r.pick(6)), "network-NS": ns })
        }
        Kind::Pod => {
            let mut ifaces: Vec<String> =
                (0..r.pick(3)).map(|_| format!("i{}", r.pick(10))).collect();
            ifaces.dedup();
            let ifaces: Vec<Value> = ifaces.into_iter().map(|i| json!({ "uid": i })).collect();
            json!({ "uid": uid, "interface": ifaces })
        }
        Kind::Node => json!({ "uid": uid, "host-name": format!("h{}", r.pick(6)) }),
    };
    let wrapped = json!({ kind.list(): [body] });
    parse::item_body(kind, &uid, wrapped.to_string().as_bytes()).unwrap()
}

#[test]
fn scoped_checks_agree_with_full_checks() {
    let rules = Rules {
        node_port_range: 30000..=30002,
    };
    let mut rng = Rng(0x5eed_cafe_f00d_d00d);
    let mut store = Store::default();
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..5000 {
        let item = random_item(&mut rng);
        let mut reference = store.clone();
        reference.apply_effects(&[Effect::Upsert(item.clone())]);
        let full = reference.check(&rules, &Touched::default());
        let before = store.clone();
        let scoped = if rng.pick(2) == 0 || store.contains(item.kind(), item.uid()) {
            store.apply(Change::Upsert(item.clone()), &rules)
        } else {
            store.apply(Change::Create(item.kind(), vec![item.clone()]), &rules)
        };
        assert_eq!(
            scoped.is_ok(),
            full.is_ok(),
            "{item:?}\nscoped: {:?}\nfull: {full:?}",
            scoped.as_ref().err()
        );
        if scoped.is_ok() {
            accepted += 1;
            assert_eq!(store, reference);
        } else {
            rejected += 1;
            assert_eq!(
                store, before,
                "a rejected change leaves the store as it was"
            );
        }
        if rng.pick(10) == 0 {
            let kind = Kind::ALL[rng.pick(4) as usize];
            let uid = format!("u{}", rng.pick(12));
            if store.contains(kind, &uid) {
                store.apply(Change::Delete(kind, uid), &rules).unwrap();
            }
        }
    }
    assert!(
        accepted > 500 && rejected > 500,
        "accepted {accepted}, rejected {rejected}"
    );
}
