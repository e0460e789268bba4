//! The parts of a database schema (RFC 7047 §3.2) a client needs: tables, column types.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why a schema could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid schema: {0}")]
pub struct SchemaError(pub String);

/// A database schema (RFC 7047 §3.2 `<database-schema>`), reduced to names and types.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DatabaseSchema {
    pub name: String,
    pub version: String,
    pub tables: BTreeMap<String, TableSchema>,
}

/// A table schema (RFC 7047 §3.2 `<table-schema>`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableSchema {
    pub columns: BTreeMap<String, ColumnType>,
}

/// A column type (RFC 7047 §3.2 `<type>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnType {
    /// Atomic type of the key (`integer`, `string`, `uuid`, …).
    pub key: String,
    /// Atomic type of the value, for maps.
    pub value: Option<String>,
    pub min: u64,
    /// `None` means `"unlimited"`.
    pub max: Option<u64>,
}

impl ColumnType {
    /// Whether this is a map column.
    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }
    /// Whether `update2` sends a diff for this column rather than the new value: maps and sets
    /// that may hold more than one element (ovsdb-server(7) `<row-update2>`).
    pub fn uses_diff(&self) -> bool {
        self.is_map() || self.max != Some(1)
    }

    fn parse(v: &Value) -> Result<ColumnType, SchemaError> {
        fn base(v: &Value) -> Result<String, SchemaError> {
            match v {
                Value::String(s) => Ok(s.clone()),
                Value::Object(o) => o
                    .get("type")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| SchemaError("base type without type".into())),
                _ => Err(SchemaError("bad base type".into())),
            }
        }
        match v {
            Value::String(s) => Ok(ColumnType {
                key: s.clone(),
                value: None,
                min: 1,
                max: Some(1),
            }),
            Value::Object(o) => {
                let key = base(
                    o.get("key")
                        .ok_or_else(|| SchemaError("type without key".into()))?,
                )?;
                let value = o.get("value").map(base).transpose()?;
                let min = match o.get("min") {
                    None => 1,
                    Some(m) => m.as_u64().ok_or_else(|| SchemaError("bad min".into()))?,
                };
                let max = match o.get("max") {
                    None => Some(1),
                    Some(Value::String(s)) if s == "unlimited" => None,
                    Some(m) => Some(m.as_u64().ok_or_else(|| SchemaError("bad max".into()))?),
                };
                Ok(ColumnType {
                    key,
                    value,
                    min,
                    max,
                })
            }
            _ => Err(SchemaError("bad column type".into())),
        }
    }
}

impl DatabaseSchema {
    /// Parses a `get_schema` result.
    pub fn from_json(v: &Value) -> Result<DatabaseSchema, SchemaError> {
        let o = v
            .as_object()
            .ok_or_else(|| SchemaError("not an object".into()))?;
        let name = o
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let version = o
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut tables = BTreeMap::new();
        let ts = o
            .get("tables")
            .and_then(Value::as_object)
            .ok_or_else(|| SchemaError("no tables".into()))?;
        for (tname, t) in ts {
            let cols = t
                .get("columns")
                .and_then(Value::as_object)
                .ok_or_else(|| SchemaError(format!("table {tname} has no columns")))?;
            let mut columns = BTreeMap::new();
            for (cname, c) in cols {
                let ty = c
                    .get("type")
                    .ok_or_else(|| SchemaError(format!("column {tname}.{cname} has no type")))?;
                columns.insert(cname.clone(), ColumnType::parse(ty)?);
            }
            tables.insert(tname.clone(), TableSchema { columns });
        }
        Ok(DatabaseSchema {
            name,
            version,
            tables,
        })
    }

    /// The type of `table.column`.
    pub fn column(&self, table: &str, column: &str) -> Option<&ColumnType> {
        self.tables.get(table)?.columns.get(column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_types() {
        let s = DatabaseSchema::from_json(&json!({
            "name": "Open_vSwitch", "version": "8.3.1",
            "tables": {"Interface": {"columns": {
                "name": {"type": "string"},
                "ofport": {"type": {"key": "integer", "min": 0, "max": 1}},
                "options": {"type": {"key": "string", "value": "string", "min": 0, "max": "unlimited"}},
                "ports": {"type": {"key": {"type": "uuid", "refTable": "Port"}, "min": 0, "max": "unlimited"}}
            }}}
        }))
        .unwrap();
        assert!(!s.column("Interface", "name").unwrap().uses_diff());
        assert!(!s.column("Interface", "ofport").unwrap().uses_diff());
        assert!(s.column("Interface", "options").unwrap().uses_diff());
        assert!(s.column("Interface", "ports").unwrap().uses_diff());
        assert_eq!(s.column("Interface", "ports").unwrap().key, "uuid");
        assert!(DatabaseSchema::from_json(&json!({"tables": 1})).is_err());
    }

    #[test]
    fn parses_installed_vswitch_schema() {
        let text = std::fs::read_to_string("/usr/share/openvswitch/vswitch.ovsschema")
            .expect("OVS schema missing: install openvswitch-switch 3.1");
        let v: Value = serde_json::from_str(&text).unwrap();
        let s = DatabaseSchema::from_json(&v).unwrap();
        assert_eq!(s.name, "Open_vSwitch");
        assert!(s.column("Bridge", "ports").unwrap().uses_diff());
    }
}
