//! Monitor requests and table updates (RFC 7047 §4.1.5–§4.1.7; `monitor_cond` and
//! `monitor_cond_since` from ovsdb-server(7)).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::datum::{DatumError, Row, Uuid, row_from_json};
use crate::ops::Condition;

/// Which monitor method to use, newest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MonitorMethod {
    /// RFC 7047 §4.1.5 `monitor`, notifications `update`.
    Monitor,
    /// `monitor_cond`, notifications `update2` (diffs).
    MonitorCond,
    /// `monitor_cond_since`, notifications `update3` (diffs + transaction id).
    MonitorCondSince,
}

impl MonitorMethod {
    pub fn method_name(self) -> &'static str {
        match self {
            MonitorMethod::Monitor => "monitor",
            MonitorMethod::MonitorCond => "monitor_cond",
            MonitorMethod::MonitorCondSince => "monitor_cond_since",
        }
    }
    /// The next older method to fall back to.
    pub fn fallback(self) -> Option<MonitorMethod> {
        match self {
            MonitorMethod::MonitorCondSince => Some(MonitorMethod::MonitorCond),
            MonitorMethod::MonitorCond => Some(MonitorMethod::Monitor),
            MonitorMethod::Monitor => None,
        }
    }
}

/// What to monitor in one table (RFC 7047 §4.1.5 `<monitor-request>`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MonitorRequest {
    /// Columns to monitor; `None` means all.
    pub columns: Option<Vec<String>>,
    /// `monitor_cond` conditions; ignored by plain `monitor`.
    pub conditions: Option<Vec<Condition>>,
}

impl MonitorRequest {
    /// Monitor all columns of all rows.
    pub fn all() -> Self {
        MonitorRequest::default()
    }
    /// Monitor only these columns.
    pub fn columns(cols: &[&str]) -> Self {
        MonitorRequest {
            columns: Some(cols.iter().map(|c| (*c).to_owned()).collect()),
            conditions: None,
        }
    }

    fn to_json(&self, method: MonitorMethod) -> Value {
        let mut m = Map::new();
        if let Some(c) = &self.columns {
            m.insert("columns".into(), json!(c));
        }
        if method != MonitorMethod::Monitor {
            if let Some(cs) = &self.conditions {
                let w: Vec<Value> = cs
                    .iter()
                    .map(|c| json!([c.column, c.function.as_str(), c.value.to_json()]))
                    .collect();
                m.insert("where".into(), Value::Array(w));
            }
        }
        Value::Object(m)
    }
}

/// The all-zero transaction id that asks `monitor_cond_since` for everything.
pub const ZERO_TXN_ID: &str = "00000000-0000-0000-0000-000000000000";

/// `params` for a monitor request of the given method.
pub fn monitor_params(
    method: MonitorMethod,
    db: &str,
    monitor_id: &Value,
    requests: &BTreeMap<String, MonitorRequest>,
    last_txn_id: Option<&str>,
) -> Value {
    let reqs: Map<String, Value> = requests
        .iter()
        .map(|(t, r)| (t.clone(), Value::Array(vec![r.to_json(method)])))
        .collect();
    let mut p = vec![json!(db), monitor_id.clone(), Value::Object(reqs)];
    if method == MonitorMethod::MonitorCondSince {
        p.push(json!(last_txn_id.unwrap_or(ZERO_TXN_ID)));
    }
    Value::Array(p)
}

/// A change to one row.
#[derive(Debug, Clone, PartialEq)]
pub enum RowUpdate {
    /// A new row (or an existing one in an initial dump).
    Insert(Row),
    /// `update` format: new values of the monitored columns.
    Replace(Row),
    /// `update2`/`update3` `modify`: per-column diffs for set/map columns, new values otherwise.
    Modify(Row),
    /// The row was deleted.
    Delete,
}

/// Updates keyed by table, then row uuid.
pub type TableUpdates = BTreeMap<String, BTreeMap<Uuid, RowUpdate>>;

/// Parses `<table-updates>` (v1, RFC 7047 §4.1.6) or `<table-updates2>` (v2).
pub fn parse_table_updates(v: &Value, v2: bool) -> Result<TableUpdates, DatumError> {
    let bad = |m: &str| DatumError(format!("table updates: {m}"));
    let tables = v.as_object().ok_or_else(|| bad("not an object"))?;
    let mut out = TableUpdates::new();
    for (table, rows) in tables {
        let rows = rows.as_object().ok_or_else(|| bad("rows not an object"))?;
        let mut t = BTreeMap::new();
        for (uuid, ru) in rows {
            let uuid = Uuid::parse_str(uuid).map_err(|_| bad("bad row uuid"))?;
            let ru = ru
                .as_object()
                .ok_or_else(|| bad("row update not an object"))?;
            let u = if v2 {
                if let Some(r) = ru.get("initial").or_else(|| ru.get("insert")) {
                    RowUpdate::Insert(row_from_json(r)?)
                } else if let Some(r) = ru.get("modify") {
                    RowUpdate::Modify(row_from_json(r)?)
                } else if ru.contains_key("delete") {
                    RowUpdate::Delete
                } else {
                    return Err(bad("empty row-update2"));
                }
            } else {
                match (ru.get("old"), ru.get("new")) {
                    (None, Some(n)) => RowUpdate::Insert(row_from_json(n)?),
                    (Some(_), Some(n)) => RowUpdate::Replace(row_from_json(n)?),
                    (Some(_), None) => RowUpdate::Delete,
                    (None, None) => return Err(bad("empty row-update")),
                }
            };
            t.insert(uuid, u);
        }
        out.insert(table.clone(), t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datum::Datum;

    const U: &str = "36c1d4a9-8ef1-4b49-9d3f-4f4f4f4f4f4f";

    #[test]
    fn params_per_method() {
        let mut reqs = BTreeMap::new();
        reqs.insert(
            "Bridge".to_owned(),
            MonitorRequest {
                columns: Some(vec!["name".into()]),
                conditions: Some(vec![Condition::eq("name", Datum::string("br0"))]),
            },
        );
        let id = json!("m1");
        assert_eq!(
            monitor_params(MonitorMethod::Monitor, "db", &id, &reqs, None),
            json!(["db", "m1", {"Bridge": [{"columns": ["name"]}]}])
        );
        assert_eq!(
            monitor_params(MonitorMethod::MonitorCondSince, "db", &id, &reqs, None),
            json!(["db", "m1", {"Bridge": [{"columns": ["name"], "where": [["name", "==", "br0"]]}]}, ZERO_TXN_ID])
        );
    }

    #[test]
    fn parses_updates() {
        let v1 = json!({"Bridge": {U: {"new": {"name": "br0"}}}});
        let u = parse_table_updates(&v1, false).unwrap();
        let uuid = Uuid::parse_str(U).unwrap();
        assert!(
            matches!(&u["Bridge"][&uuid], RowUpdate::Insert(r) if r["name"].as_str() == Some("br0"))
        );
        let v1 = json!({"Bridge": {U: {"old": {"name": "br0"}}}});
        assert_eq!(
            parse_table_updates(&v1, false).unwrap()["Bridge"][&uuid],
            RowUpdate::Delete
        );
        let v2 = json!({"Bridge": {U: {"modify": {"name": "br1"}}}});
        assert!(matches!(
            parse_table_updates(&v2, true).unwrap()["Bridge"][&uuid],
            RowUpdate::Modify(_)
        ));
        let v2 = json!({"Bridge": {U: {"delete": null}}});
        assert_eq!(
            parse_table_updates(&v2, true).unwrap()["Bridge"][&uuid],
            RowUpdate::Delete
        );
        for bad in [
            json!([]),
            json!({"T": {"x": {}}}),
            json!({"T": {U: {}}}),
            json!({"T": 1}),
        ] {
            assert!(parse_table_updates(&bad, true).is_err());
        }
    }
}
