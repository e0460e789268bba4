use super::*;
use crate::monitor::{RowUpdate, TableUpdates};
use crate::schema::DatabaseSchema;
use crate::session::UpdateKind;

fn schema() -> DatabaseSchema {
    let text = std::fs::read_to_string("/usr/share/openvswitch/vswitch.ovsschema")
        .expect("OVS schema missing: install openvswitch-switch");
    DatabaseSchema::from_json(&serde_json::from_str(&text).unwrap()).unwrap()
}

/// Applies inserts from `ops` to a replica as the server would (named uuids resolved to fresh
/// uuids, mutations of `insert` applied), good enough to check idempotence.
fn apply_ops(r: &mut Replica, ops: &[Operation]) {
    let mut names: BTreeMap<String, Uuid> = BTreeMap::new();
    let mut next = 1000u128 + r.generation() as u128 * 100;
    let resolve = |d: &Datum, names: &BTreeMap<String, Uuid>| -> Datum {
        match d {
            Datum::Set(s) => Datum::Set(
                s.iter()
                    .map(|a| match a {
                        crate::datum::Atom::NamedUuid(n) => crate::datum::Atom::Uuid(names[n]),
                        a => a.clone(),
                    })
                    .collect(),
            ),
            d => d.clone(),
        }
    };
    let find = |r: &Replica, table: &str, conds: &[Condition]| -> Vec<Uuid> {
        r.table(table)
            .filter(|(u, _)| {
                conds
                    .iter()
                    .all(|c| c.column == "_uuid" && c.value.as_uuid() == Some(**u))
            })
            .map(|(u, _)| *u)
            .collect()
    };
    for op in ops {
        let mut upd = TableUpdates::new();
        match op {
            Operation::Insert {
                table,
                row,
                uuid_name,
            } => {
                next += 1;
                let u = Uuid::from_u128(next);
                if let Some(n) = uuid_name {
                    names.insert(n.clone(), u);
                }
                let row: Row = row
                    .iter()
                    .map(|(k, v)| (k.clone(), resolve(v, &names)))
                    .collect();
                upd.entry(table.clone())
                    .or_default()
                    .insert(u, RowUpdate::Insert(row));
            }
            Operation::Update {
                table,
                conditions,
                row,
            } => {
                for u in find(r, table, conditions) {
                    let row: Row = row
                        .iter()
                        .map(|(k, v)| (k.clone(), resolve(v, &names)))
                        .collect();
                    upd.entry(table.clone())
                        .or_default()
                        .insert(u, RowUpdate::Replace(row));
                }
            }
            Operation::Mutate {
                table,
                conditions,
                mutations,
            } => {
                for u in find(r, table, conditions) {
                    let mut row = r.row(table, &u).cloned().unwrap_or_default();
                    for m in mutations {
                        let cur = row.entry(m.column.clone()).or_default();
                        let v = resolve(&m.value, &names);
                        match (m.mutator, cur, v) {
                            (Mutator::Insert, Datum::Set(s), Datum::Set(v)) => s.extend(v),
                            (Mutator::Insert, Datum::Map(s), Datum::Map(v)) => {
                                for (k, x) in v {
                                    s.entry(k).or_insert(x);
                                }
                            }
                            (Mutator::Insert, c @ Datum::Set(_), Datum::Map(v)) => {
                                *c = Datum::Map(v)
                            }
                            (Mutator::Delete, Datum::Set(s), Datum::Set(v)) => {
                                s.retain(|a| !v.contains(a))
                            }
                            (Mutator::Delete, Datum::Map(s), Datum::Set(v)) => {
                                s.retain(|k, _| !v.contains(k))
                            }
                            other => panic!("unsupported in fake: {other:?}"),
                        }
                    }
                    upd.entry(table.clone())
                        .or_default()
                        .insert(u, RowUpdate::Insert(row));
                }
            }
            _ => {}
        }
        r.apply(UpdateKind::Change, &upd);
    }
}
use crate::ops::Mutator;

fn base() -> Replica {
    let mut r = Replica::new(schema());
    let mut upd = TableUpdates::new();
    upd.entry("Open_vSwitch".into())
        .or_default()
        .insert(Uuid::from_u128(1), RowUpdate::Insert(Row::new()));
    r.apply(UpdateKind::Initial { replace: true }, &upd);
    r
}

#[test]
fn ensure_bridge_is_idempotent() {
    let mut r = base();
    let mut spec = BridgeSpec::new("br-int");
    spec.datapath_type = Some("netdev".into());
    spec.fail_mode = Some(FailMode::Secure);
    spec.protocols = vec!["OpenFlow13".into()];
    spec.datapath_id = Some("0000000000000001".into());
    spec.external_ids.insert("owner".into(), "svcflow".into());
    let ops = ensure_bridge_ops(&r, &spec);
    assert_eq!(ops.len(), 4);
    assert_eq!(
        ops[2].to_json()["row"]["other_config"],
        serde_json::json!(["map", [["datapath-id", "0000000000000001"]]])
    );
    apply_ops(&mut r, &ops);
    let b = r.bridge("br-int").unwrap();
    assert_eq!(b.fail_mode.as_deref(), Some("secure"));
    assert_eq!(r.bridge_ports("br-int")[0].name, "br-int");
    assert_eq!(r.open_vswitch().unwrap().bridges, vec![b.uuid]);
    assert!(
        ensure_bridge_ops(&r, &spec).is_empty(),
        "second call is a no-op"
    );

    spec.fail_mode = Some(FailMode::Standalone);
    spec.other_config.insert("datapath-id".into(), "x".into()); // overridden by datapath_id
    spec.external_ids.insert("owner".into(), "other".into());
    let ops = ensure_bridge_ops(&r, &spec);
    assert_eq!(ops.len(), 2);
    assert_eq!(
        ops[1].to_json()["mutations"],
        serde_json::json!([
            ["external_ids", "delete", "owner"],
            ["external_ids", "insert", ["map", [["owner", "other"]]]]
        ])
    );
    apply_ops(&mut r, &ops);
    assert!(ensure_bridge_ops(&r, &spec).is_empty());
}

#[test]
fn ports_are_idempotent() {
    let mut r = base();
    let ops = ensure_bridge_ops(&r, &BridgeSpec::new("br0"));
    apply_ops(&mut r, &ops);
    let mut spec = PortSpec::new(
        "vx0",
        InterfaceType::Vxlan {
            remote_ip: "192.0.2.1".into(),
            key: Some("flow".into()),
        },
    );
    spec.port_external_ids.insert("k".into(), "v".into());
    spec.ofport_request = Some(10);
    let ops = add_port_ops(&r, "br0", &spec).unwrap();
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[0].to_json()["row"]["type"], "vxlan");
    apply_ops(&mut r, &ops);
    assert_eq!(r.bridge_ports("br0").len(), 2);
    assert!(add_port_ops(&r, "br0", &spec).unwrap().is_empty());
    assert_eq!(
        r.interface("vx0").unwrap().options["remote_ip"],
        "192.0.2.1"
    );

    spec.kind = InterfaceType::Geneve {
        remote_ip: "192.0.2.2".into(),
        key: None,
    };
    let ops = add_port_ops(&r, "br0", &spec).unwrap();
    assert_eq!(ops.len(), 1);
    apply_ops(&mut r, &ops);
    assert!(add_port_ops(&r, "br0", &spec).unwrap().is_empty());

    let ops = ensure_bridge_ops(&r, &BridgeSpec::new("br1"));
    apply_ops(&mut r, &ops);
    assert!(matches!(
        add_port_ops(&r, "br1", &spec),
        Err(HelperError::PortOnOtherBridge { .. })
    ));
    assert!(matches!(
        add_port_ops(&r, "nope", &spec),
        Err(HelperError::NoSuchBridge(_))
    ));

    let ops = del_port_ops(&r, "br0", "vx0").unwrap();
    assert_eq!(ops.len(), 1);
    apply_ops(&mut r, &ops);
    assert_eq!(r.bridge_ports("br0").len(), 1);
    assert!(del_port_ops(&r, "br0", "vx0").unwrap().is_empty() || r.port("vx0").is_some());
}

#[test]
fn controllers_and_external_ids() {
    let mut r = base();
    let ops = ensure_bridge_ops(&r, &BridgeSpec::new("br0"));
    apply_ops(&mut r, &ops);
    let want = vec![ControllerSpec {
        target: "tcp:127.0.0.1:6653".into(),
        connection_mode: Some("out-of-band".into()),
        ..ControllerSpec::default()
    }];
    let ops = set_controllers_ops(&r, "br0", &want).unwrap();
    assert_eq!(ops.len(), 2);
    apply_ops(&mut r, &ops);
    assert_eq!(
        r.controllers()[0].connection_mode.as_deref(),
        Some("out-of-band")
    );
    assert!(set_controllers_ops(&r, "br0", &want).unwrap().is_empty());
    let want2 = vec![ControllerSpec {
        target: "tcp:127.0.0.1:6653".into(),
        connection_mode: None,
        ..ControllerSpec::default()
    }];
    let ops = set_controllers_ops(&r, "br0", &want2).unwrap();
    assert_eq!(ops.len(), 1, "only the mode changes: {ops:?}");
    // Packet-in limits are set in place too, and kept once set.
    let limited = vec![ControllerSpec {
        target: "tcp:127.0.0.1:6653".into(),
        connection_mode: Some("out-of-band".into()),
        rate_limit: Some(1000),
        burst_limit: Some(250),
        max_backoff: Some(1000),
        ..ControllerSpec::default()
    }];
    let ops = set_controllers_ops(&r, "br0", &limited).unwrap();
    assert_eq!(ops.len(), 1, "{ops:?}");
    apply_ops(&mut r, &ops);
    assert_eq!(
        (
            r.controllers()[0].rate_limit,
            r.controllers()[0].burst_limit,
            r.controllers()[0].max_backoff
        ),
        (Some(1000), Some(250), Some(1000))
    );
    assert!(set_controllers_ops(&r, "br0", &limited).unwrap().is_empty());

    let set: BTreeMap<String, String> = [("a".to_owned(), "1".to_owned())].into();
    let ops = set_external_ids_ops(&r, NamedTable::Bridge, "br0", &set, &[]).unwrap();
    apply_ops(&mut r, &ops);
    assert_eq!(external_ids(&r, NamedTable::Bridge, "br0").unwrap(), set);
    assert!(
        set_external_ids_ops(&r, NamedTable::Bridge, "br0", &set, &["zz"])
            .unwrap()
            .is_empty()
    );
    let ops =
        set_external_ids_ops(&r, NamedTable::Bridge, "br0", &BTreeMap::new(), &["a"]).unwrap();
    apply_ops(&mut r, &ops);
    assert!(
        external_ids(&r, NamedTable::Bridge, "br0")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn departed_controllers_go_but_never_the_last_one() {
    let mut r = base();
    let ops = ensure_bridge_ops(&r, &BridgeSpec::new("br0"));
    apply_ops(&mut r, &ops);
    let spec = |t: &str| ControllerSpec {
        target: t.into(),
        ..ControllerSpec::default()
    };
    let ops = set_controllers_ops(
        &r,
        "br0",
        &[spec("tcp:10.0.0.1:6653"), spec("tcp:10.0.0.2:6653")],
    )
    .unwrap();
    apply_ops(&mut r, &ops);
    assert_eq!(r.controllers().len(), 2);
    let gone = |c: &Controller| c.target == "tcp:10.0.0.2:6653";
    let ops = remove_controllers_ops(&r, "br0", gone).unwrap();
    assert_eq!(ops.len(), 1);
    let json = ops[0].to_json();
    assert_eq!(json["op"], "mutate");
    assert_eq!(json["mutations"][0][0], "controller");
    assert_eq!(json["mutations"][0][1], "delete");
    assert!(
        remove_controllers_ops(&r, "br0", |_| false)
            .unwrap()
            .is_empty()
    );
    assert!(
        remove_controllers_ops(&r, "br0", |_| true)
            .unwrap()
            .is_empty(),
        "taking every controller would flush the flow table"
    );
}
