//! An in-memory table cache fed by monitor updates. Queries never do I/O.

use std::collections::{BTreeMap, HashMap};

use crate::datum::{Row, Uuid};
use crate::monitor::{RowUpdate, TableUpdates};
use crate::schema::DatabaseSchema;
use crate::session::UpdateKind;

/// The rows of the monitored tables, as of the last applied update.
#[derive(Debug, Clone, Default)]
pub struct Replica {
    schema: DatabaseSchema,
    tables: BTreeMap<String, BTreeMap<Uuid, Row>>,
    /// table → `name` column value → rows with that name (for O(1) lookups by name).
    names: HashMap<String, HashMap<String, Vec<Uuid>>>,
    generation: u64,
}

fn name_of(row: &Row) -> Option<&str> {
    row.get("name").and_then(|d| d.as_str())
}

impl Replica {
    /// An empty replica. The schema tells which columns `update2` diffs apply to.
    pub fn new(schema: DatabaseSchema) -> Replica {
        Replica {
            schema,
            tables: BTreeMap::new(),
            names: HashMap::new(),
            generation: 0,
        }
    }

    /// The schema.
    pub fn schema(&self) -> &DatabaseSchema {
        &self.schema
    }

    /// Incremented by every applied update.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Applies a monitor update (RFC 7047 §4.1.6; `update2` diffs per ovsdb-server(7)).
    pub fn apply(&mut self, kind: UpdateKind, updates: &TableUpdates) {
        if kind == (UpdateKind::Initial { replace: true }) {
            self.tables.clear();
            self.names.clear();
        }
        for (table, rows) in updates {
            let t = self.tables.entry(table.clone()).or_default();
            let names = self.names.entry(table.clone()).or_default();
            for (uuid, u) in rows {
                if let Some(old) = t.get(uuid).and_then(name_of) {
                    if let Some(v) = names.get_mut(old) {
                        v.retain(|x| x != uuid);
                        if v.is_empty() {
                            names.remove(old);
                        }
                    }
                }
                match u {
                    RowUpdate::Insert(r) => {
                        t.insert(*uuid, r.clone());
                    }
                    RowUpdate::Replace(r) => {
                        let row = t.entry(*uuid).or_default();
                        for (c, v) in r {
                            row.insert(c.clone(), v.clone());
                        }
                    }
                    RowUpdate::Modify(diff) => {
                        let row = t.entry(*uuid).or_default();
                        for (c, d) in diff {
                            let uses_diff =
                                self.schema.column(table, c).is_none_or(|ty| ty.uses_diff());
                            match row.get_mut(c) {
                                Some(cur) if uses_diff => cur.apply_diff(d),
                                _ => {
                                    row.insert(c.clone(), d.clone());
                                }
                            }
                        }
                    }
                    RowUpdate::Delete => {
                        t.remove(uuid);
                    }
                }
                if let Some(new) = t.get(uuid).and_then(name_of) {
                    names.entry(new.to_owned()).or_default().push(*uuid);
                }
            }
        }
        self.generation += 1;
    }

    /// All rows of a table.
    pub fn table(&self, table: &str) -> impl Iterator<Item = (&Uuid, &Row)> {
        self.tables.get(table).into_iter().flatten()
    }

    /// One row.
    pub fn row(&self, table: &str, uuid: &Uuid) -> Option<&Row> {
        self.tables.get(table)?.get(uuid)
    }

    /// The row whose `name` column equals `name` (the lowest uuid if several do).
    pub fn row_by_name(&self, table: &str, name: &str) -> Option<(Uuid, &Row)> {
        let uuids = self.names.get(table)?.get(name)?;
        let u = uuids.iter().min()?;
        self.row(table, u).map(|r| (*u, r))
    }

    /// Number of rows in a table.
    pub fn len(&self, table: &str) -> usize {
        self.tables.get(table).map_or(0, BTreeMap::len)
    }

    /// Whether no table has rows.
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(BTreeMap::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datum::Datum;
    use crate::schema::{ColumnType, TableSchema};

    fn schema() -> DatabaseSchema {
        let mut cols = BTreeMap::new();
        cols.insert(
            "name".into(),
            ColumnType {
                key: "string".into(),
                value: None,
                min: 1,
                max: Some(1),
            },
        );
        cols.insert(
            "ofport".into(),
            ColumnType {
                key: "integer".into(),
                value: None,
                min: 0,
                max: Some(1),
            },
        );
        cols.insert(
            "external_ids".into(),
            ColumnType {
                key: "string".into(),
                value: Some("string".into()),
                min: 0,
                max: None,
            },
        );
        let mut s = DatabaseSchema::default();
        s.tables
            .insert("Interface".into(), TableSchema { columns: cols });
        s
    }

    fn row(pairs: &[(&str, Datum)]) -> Row {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn applies_inserts_diffs_and_deletes() {
        let u = Uuid::from_u128(1);
        let mut r = Replica::new(schema());
        let mut upd = TableUpdates::new();
        upd.entry("Interface".into()).or_default().insert(
            u,
            RowUpdate::Insert(row(&[
                ("name", Datum::string("p1")),
                ("ofport", Datum::empty()),
                ("external_ids", Datum::map([("a", "1")])),
            ])),
        );
        r.apply(UpdateKind::Initial { replace: true }, &upd);
        assert_eq!(r.row_by_name("Interface", "p1").map(|(x, _)| x), Some(u));

        let mut upd = TableUpdates::new();
        upd.entry("Interface".into()).or_default().insert(
            u,
            RowUpdate::Modify(row(&[
                ("ofport", Datum::integer(3)),
                ("external_ids", Datum::map([("a", "1"), ("b", "2")])),
            ])),
        );
        r.apply(UpdateKind::Change, &upd);
        let ro = r.row("Interface", &u).unwrap();
        assert_eq!(ro["ofport"].as_integer(), Some(3));
        assert_eq!(ro["external_ids"], Datum::map([("b", "2")]));
        // scalar replaced, not diffed
        let mut upd = TableUpdates::new();
        upd.entry("Interface".into())
            .or_default()
            .insert(u, RowUpdate::Modify(row(&[("ofport", Datum::integer(4))])));
        r.apply(UpdateKind::Change, &upd);
        assert_eq!(
            r.row("Interface", &u).unwrap()["ofport"].as_integer(),
            Some(4)
        );

        let mut upd = TableUpdates::new();
        upd.entry("Interface".into())
            .or_default()
            .insert(u, RowUpdate::Delete);
        r.apply(UpdateKind::Change, &upd);
        assert_eq!(r.len("Interface"), 0);
        assert!(r.row_by_name("Interface", "p1").is_none());
        assert_eq!(r.generation(), 4);
        // A replacing dump clears old rows.
        let mut upd = TableUpdates::new();
        upd.entry("Interface".into())
            .or_default()
            .insert(Uuid::from_u128(2), RowUpdate::Insert(Row::new()));
        r.apply(UpdateKind::Initial { replace: true }, &upd);
        r.apply(UpdateKind::Initial { replace: true }, &TableUpdates::new());
        assert!(r.is_empty());
    }
}

#[cfg(test)]
mod name_index_tests {
    use super::*;
    use crate::datum::Datum;

    fn named(n: &str) -> Row {
        [("name".to_owned(), Datum::string(n))]
            .into_iter()
            .collect()
    }

    #[test]
    fn renames_and_duplicates() {
        let mut r = Replica::new(DatabaseSchema::default());
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let mut upd = TableUpdates::new();
        upd.entry("T".into())
            .or_default()
            .insert(a, RowUpdate::Insert(named("x")));
        upd.entry("T".into())
            .or_default()
            .insert(b, RowUpdate::Insert(named("x")));
        r.apply(UpdateKind::Change, &upd);
        assert_eq!(r.row_by_name("T", "x").map(|(u, _)| u), Some(a));
        let mut upd = TableUpdates::new();
        upd.entry("T".into())
            .or_default()
            .insert(a, RowUpdate::Replace(named("y")));
        r.apply(UpdateKind::Change, &upd);
        assert_eq!(r.row_by_name("T", "x").map(|(u, _)| u), Some(b));
        assert_eq!(r.row_by_name("T", "y").map(|(u, _)| u), Some(a));
        let mut upd = TableUpdates::new();
        upd.entry("T".into())
            .or_default()
            .insert(b, RowUpdate::Replace(named("z")));
        r.apply(UpdateKind::Change, &upd);
        assert!(r.row_by_name("T", "x").is_none());
        assert!(r.row_by_name("U", "x").is_none());
    }
}
