//! Transact operations and their results (RFC 7047 §4.1.3 and §5.2).

use serde_json::{Map, Value, json};

use crate::datum::{Datum, DatumError, Row, Uuid, row_from_json, row_to_json};

/// A condition function (RFC 7047 §5.1 `<function>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
    Includes,
    Excludes,
}

impl Function {
    pub fn as_str(self) -> &'static str {
        match self {
            Function::Lt => "<",
            Function::Le => "<=",
            Function::Eq => "==",
            Function::Ne => "!=",
            Function::Ge => ">=",
            Function::Gt => ">",
            Function::Includes => "includes",
            Function::Excludes => "excludes",
        }
    }
}

/// A `<condition>`: `[column, function, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub column: String,
    pub function: Function,
    pub value: Datum,
}

impl Condition {
    pub fn new(column: &str, function: Function, value: Datum) -> Self {
        Condition {
            column: column.to_owned(),
            function,
            value,
        }
    }
    /// `column == value`.
    pub fn eq(column: &str, value: Datum) -> Self {
        Condition::new(column, Function::Eq, value)
    }
    /// `_uuid == uuid`.
    pub fn uuid(uuid: Uuid) -> Self {
        Condition::eq("_uuid", Datum::uuid(uuid))
    }
    fn to_json(&self) -> Value {
        json!([self.column, self.function.as_str(), self.value.to_json()])
    }
}

/// A mutator (RFC 7047 §5.1 `<mutator>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutator {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Insert,
    Delete,
}

impl Mutator {
    pub fn as_str(self) -> &'static str {
        match self {
            Mutator::Add => "+=",
            Mutator::Sub => "-=",
            Mutator::Mul => "*=",
            Mutator::Div => "/=",
            Mutator::Mod => "%=",
            Mutator::Insert => "insert",
            Mutator::Delete => "delete",
        }
    }
}

/// A `<mutation>`: `[column, mutator, value]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    pub column: String,
    pub mutator: Mutator,
    pub value: Datum,
}

impl Mutation {
    pub fn new(column: &str, mutator: Mutator, value: Datum) -> Self {
        Mutation {
            column: column.to_owned(),
            mutator,
            value,
        }
    }
    /// Inserts elements into a set or map column.
    pub fn insert(column: &str, value: Datum) -> Self {
        Mutation::new(column, Mutator::Insert, value)
    }
    /// Deletes elements (or, for maps, keys given as a set) from a column.
    pub fn delete(column: &str, value: Datum) -> Self {
        Mutation::new(column, Mutator::Delete, value)
    }
    fn to_json(&self) -> Value {
        json!([self.column, self.mutator.as_str(), self.value.to_json()])
    }
}

/// `wait` comparison (RFC 7047 §5.2.6 `until`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    Equal,
    NotEqual,
}

/// One database operation (RFC 7047 §5.2).
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// §5.2.1
    Insert {
        table: String,
        row: Row,
        uuid_name: Option<String>,
    },
    /// §5.2.2
    Select {
        table: String,
        conditions: Vec<Condition>,
        columns: Option<Vec<String>>,
    },
    /// §5.2.3
    Update {
        table: String,
        conditions: Vec<Condition>,
        row: Row,
    },
    /// §5.2.4
    Mutate {
        table: String,
        conditions: Vec<Condition>,
        mutations: Vec<Mutation>,
    },
    /// §5.2.5
    Delete {
        table: String,
        conditions: Vec<Condition>,
    },
    /// §5.2.6
    Wait {
        table: String,
        conditions: Vec<Condition>,
        columns: Vec<String>,
        until: Until,
        rows: Vec<Row>,
        timeout_ms: Option<u64>,
    },
    /// §5.2.7
    Commit { durable: bool },
    /// §5.2.8
    Abort,
    /// §5.2.9
    Comment(String),
    /// §5.2.10
    Assert { lock: String },
}

impl Operation {
    pub fn insert(table: &str, row: Row) -> Self {
        Operation::Insert {
            table: table.to_owned(),
            row,
            uuid_name: None,
        }
    }
    pub fn insert_named(table: &str, row: Row, uuid_name: &str) -> Self {
        Operation::Insert {
            table: table.to_owned(),
            row,
            uuid_name: Some(uuid_name.to_owned()),
        }
    }
    pub fn select(table: &str, conditions: Vec<Condition>) -> Self {
        Operation::Select {
            table: table.to_owned(),
            conditions,
            columns: None,
        }
    }
    pub fn update(table: &str, conditions: Vec<Condition>, row: Row) -> Self {
        Operation::Update {
            table: table.to_owned(),
            conditions,
            row,
        }
    }
    pub fn mutate(table: &str, conditions: Vec<Condition>, mutations: Vec<Mutation>) -> Self {
        Operation::Mutate {
            table: table.to_owned(),
            conditions,
            mutations,
        }
    }
    pub fn delete(table: &str, conditions: Vec<Condition>) -> Self {
        Operation::Delete {
            table: table.to_owned(),
            conditions,
        }
    }
    /// `wait` with `timeout` 0: fails at once unless the selected `columns` of the rows
    /// matching `conditions` compare as `until` to `rows`.
    pub fn wait(
        table: &str,
        conditions: Vec<Condition>,
        columns: &[&str],
        until: Until,
        rows: Vec<Row>,
    ) -> Self {
        Operation::Wait {
            table: table.to_owned(),
            conditions,
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            until,
            rows,
            timeout_ms: Some(0),
        }
    }

    /// The `op` name.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Insert { .. } => "insert",
            Operation::Select { .. } => "select",
            Operation::Update { .. } => "update",
            Operation::Mutate { .. } => "mutate",
            Operation::Delete { .. } => "delete",
            Operation::Wait { .. } => "wait",
            Operation::Commit { .. } => "commit",
            Operation::Abort => "abort",
            Operation::Comment(_) => "comment",
            Operation::Assert { .. } => "assert",
        }
    }

    /// The JSON encoding.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("op".into(), json!(self.name()));
        let conds = |c: &[Condition]| Value::Array(c.iter().map(Condition::to_json).collect());
        match self {
            Operation::Insert {
                table,
                row,
                uuid_name,
            } => {
                m.insert("table".into(), json!(table));
                m.insert("row".into(), row_to_json(row));
                if let Some(n) = uuid_name {
                    m.insert("uuid-name".into(), json!(n));
                }
            }
            Operation::Select {
                table,
                conditions,
                columns,
            } => {
                m.insert("table".into(), json!(table));
                m.insert("where".into(), conds(conditions));
                if let Some(c) = columns {
                    m.insert("columns".into(), json!(c));
                }
            }
            Operation::Update {
                table,
                conditions,
                row,
            } => {
                m.insert("table".into(), json!(table));
                m.insert("where".into(), conds(conditions));
                m.insert("row".into(), row_to_json(row));
            }
            Operation::Mutate {
                table,
                conditions,
                mutations,
            } => {
                m.insert("table".into(), json!(table));
                m.insert("where".into(), conds(conditions));
                m.insert(
                    "mutations".into(),
                    Value::Array(mutations.iter().map(Mutation::to_json).collect()),
                );
            }
            Operation::Delete { table, conditions } => {
                m.insert("table".into(), json!(table));
                m.insert("where".into(), conds(conditions));
            }
            Operation::Wait {
                table,
                conditions,
                columns,
                until,
                rows,
                timeout_ms,
            } => {
                m.insert("table".into(), json!(table));
                m.insert("where".into(), conds(conditions));
                m.insert("columns".into(), json!(columns));
                let u = match until {
                    Until::Equal => "==",
                    Until::NotEqual => "!=",
                };
                m.insert("until".into(), json!(u));
                m.insert(
                    "rows".into(),
                    Value::Array(rows.iter().map(row_to_json).collect()),
                );
                if let Some(t) = timeout_ms {
                    m.insert("timeout".into(), json!(t));
                }
            }
            Operation::Commit { durable } => {
                m.insert("durable".into(), json!(durable));
            }
            Operation::Abort => {}
            Operation::Comment(c) => {
                m.insert("comment".into(), json!(c));
            }
            Operation::Assert { lock } => {
                m.insert("lock".into(), json!(lock));
            }
        }
        Value::Object(m)
    }
}

/// The `params` of a `transact` request: `[db, op...]`.
pub fn transact_params(db: &str, ops: &[Operation]) -> Value {
    let mut v = Vec::with_capacity(ops.len() + 1);
    v.push(json!(db));
    v.extend(ops.iter().map(Operation::to_json));
    Value::Array(v)
}

/// The result of one successful operation (RFC 7047 §5.2).
#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    /// `insert`: the new row's uuid.
    Inserted(Uuid),
    /// `select`: the rows.
    Rows(Vec<Row>),
    /// `update`, `mutate`, `delete`: rows matched.
    Count(u64),
    /// Operations with an empty result object.
    Empty,
}

impl OpResult {
    pub fn uuid(&self) -> Option<Uuid> {
        match self {
            OpResult::Inserted(u) => Some(*u),
            _ => None,
        }
    }
    pub fn rows(&self) -> &[Row] {
        match self {
            OpResult::Rows(r) => r,
            _ => &[],
        }
    }
    pub fn count(&self) -> Option<u64> {
        match self {
            OpResult::Count(c) => Some(*c),
            _ => None,
        }
    }
}

/// An OVSDB error tag (RFC 7047 §3.1, §4.1.3, §5.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    ReferentialIntegrityViolation,
    ConstraintViolation,
    ResourcesExhausted,
    IoError,
    DuplicateUuidName,
    DomainError,
    RangeError,
    TimedOut,
    NotSupported,
    Aborted,
    NotOwner,
    SyntaxError,
    UnknownDatabase,
    /// Any other tag, kept verbatim.
    Other(String),
}

impl ErrorKind {
    pub fn parse(s: &str) -> ErrorKind {
        match s {
            "referential integrity violation" => ErrorKind::ReferentialIntegrityViolation,
            "constraint violation" => ErrorKind::ConstraintViolation,
            "resources exhausted" => ErrorKind::ResourcesExhausted,
            "I/O error" => ErrorKind::IoError,
            "duplicate uuid-name" => ErrorKind::DuplicateUuidName,
            "domain error" => ErrorKind::DomainError,
            "range error" => ErrorKind::RangeError,
            "timed out" => ErrorKind::TimedOut,
            "not supported" => ErrorKind::NotSupported,
            "aborted" => ErrorKind::Aborted,
            "not owner" => ErrorKind::NotOwner,
            "syntax error" => ErrorKind::SyntaxError,
            "unknown database" => ErrorKind::UnknownDatabase,
            other => ErrorKind::Other(other.to_owned()),
        }
    }
}

/// An error object returned for an operation (RFC 7047 §3.1 `<error>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{tag}{}", details.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
pub struct OpError {
    pub kind: ErrorKind,
    /// The error tag as sent.
    pub tag: String,
    pub details: Option<String>,
}

impl OpError {
    fn from_object(o: &Map<String, Value>) -> Option<OpError> {
        let tag = o.get("error")?.as_str()?.to_owned();
        Some(OpError {
            kind: ErrorKind::parse(&tag),
            tag,
            details: o.get("details").and_then(Value::as_str).map(str::to_owned),
        })
    }
}

/// Why a transaction failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransactError {
    /// Operation `index` (0-based, into the operations passed) failed; nothing was committed.
    #[error("operation {index} ({op}) failed: {error}")]
    Operation {
        index: usize,
        op: &'static str,
        error: OpError,
    },
    /// The commit failed after all operations succeeded (e.g. referential integrity).
    #[error("commit failed: {0}")]
    Commit(OpError),
    /// The reply did not have the RFC 7047 §4.1.3 shape.
    #[error("malformed transact reply: {0}")]
    Malformed(String),
}

impl TransactError {
    /// The error tag, whichever operation failed.
    pub fn kind(&self) -> Option<&ErrorKind> {
        match self {
            TransactError::Operation { error, .. } | TransactError::Commit(error) => {
                Some(&error.kind)
            }
            TransactError::Malformed(_) => None,
        }
    }
}

impl From<DatumError> for TransactError {
    fn from(e: DatumError) -> Self {
        TransactError::Malformed(e.to_string())
    }
}

/// Interprets a `transact` reply's `result` array for `ops` (RFC 7047 §4.1.3).
pub fn parse_transact_result(
    ops: &[Operation],
    result: &Value,
) -> Result<Vec<OpResult>, TransactError> {
    let Some(items) = result.as_array() else {
        return Err(TransactError::Malformed("result is not an array".into()));
    };
    let mut out = Vec::with_capacity(ops.len());
    for (index, item) in items.iter().enumerate() {
        let Some(obj) = item.as_object() else {
            if item.is_null() {
                // Only after a failed operation, which returns before reaching here.
                return Err(TransactError::Malformed(format!(
                    "null result for operation {index}"
                )));
            }
            return Err(TransactError::Malformed(format!(
                "result {index} is not an object"
            )));
        };
        if let Some(error) = OpError::from_object(obj) {
            return Err(match ops.get(index) {
                Some(op) => TransactError::Operation {
                    index,
                    op: op.name(),
                    error,
                },
                None => TransactError::Commit(error),
            });
        }
        if index >= ops.len() {
            return Err(TransactError::Malformed(
                "more results than operations".into(),
            ));
        }
        let r = if let Some(u) = obj.get("uuid") {
            let d = Datum::from_json(u)?;
            OpResult::Inserted(
                d.as_uuid()
                    .ok_or_else(|| TransactError::Malformed("insert uuid is not a uuid".into()))?,
            )
        } else if let Some(rows) = obj.get("rows") {
            let rows = rows
                .as_array()
                .ok_or_else(|| TransactError::Malformed("rows is not an array".into()))?;
            OpResult::Rows(rows.iter().map(row_from_json).collect::<Result<_, _>>()?)
        } else if let Some(c) = obj.get("count") {
            OpResult::Count(
                c.as_u64()
                    .ok_or_else(|| TransactError::Malformed("bad count".into()))?,
            )
        } else {
            OpResult::Empty
        };
        out.push(r);
    }
    if out.len() != ops.len() {
        return Err(TransactError::Malformed(format!(
            "{} results for {} operations",
            out.len(),
            ops.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "36c1d4a9-8ef1-4b49-9d3f-4f4f4f4f4f4f";

    fn row(pairs: &[(&str, Datum)]) -> Row {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    #[test]
    fn encodes_every_operation() {
        let u = Uuid::parse_str(U).unwrap();
        let cases: Vec<(Operation, Value)> = vec![
            (
                Operation::insert_named("Bridge", row(&[("name", Datum::string("br0"))]), "br"),
                json!({"op":"insert","table":"Bridge","row":{"name":"br0"},"uuid-name":"br"}),
            ),
            (
                Operation::select("Bridge", vec![Condition::eq("name", Datum::string("br0"))]),
                json!({"op":"select","table":"Bridge","where":[["name","==","br0"]]}),
            ),
            (
                Operation::update(
                    "Bridge",
                    vec![Condition::uuid(u)],
                    row(&[("fail_mode", Datum::string("secure"))]),
                ),
                json!({"op":"update","table":"Bridge","where":[["_uuid","==",["uuid",U]]],"row":{"fail_mode":"secure"}}),
            ),
            (
                Operation::mutate(
                    "Open_vSwitch",
                    vec![],
                    vec![Mutation::insert("bridges", Datum::named_uuid("br"))],
                ),
                json!({"op":"mutate","table":"Open_vSwitch","where":[],"mutations":[["bridges","insert",["named-uuid","br"]]]}),
            ),
            (
                Operation::delete(
                    "Port",
                    vec![Condition::new("name", Function::Ne, Datum::string("x"))],
                ),
                json!({"op":"delete","table":"Port","where":[["name","!=","x"]]}),
            ),
            (
                Operation::wait(
                    "Bridge",
                    vec![Condition::eq("name", Datum::string("br0"))],
                    &["name"],
                    Until::Equal,
                    vec![],
                ),
                json!({"op":"wait","table":"Bridge","where":[["name","==","br0"]],"columns":["name"],"until":"==","rows":[],"timeout":0}),
            ),
            (
                Operation::Commit { durable: false },
                json!({"op":"commit","durable":false}),
            ),
            (Operation::Abort, json!({"op":"abort"})),
            (
                Operation::Comment("hi".into()),
                json!({"op":"comment","comment":"hi"}),
            ),
            (
                Operation::Assert { lock: "l".into() },
                json!({"op":"assert","lock":"l"}),
            ),
        ];
        for (op, j) in cases {
            assert_eq!(op.to_json(), j);
        }
        assert_eq!(
            transact_params("db", &[Operation::Abort]),
            json!(["db", {"op":"abort"}])
        );
    }

    #[test]
    fn parses_results() {
        let ops = vec![
            Operation::insert("Bridge", Row::new()),
            Operation::select("Bridge", vec![]),
            Operation::delete("Bridge", vec![]),
            Operation::Comment("c".into()),
        ];
        let r = json!([{"uuid":["uuid",U]},{"rows":[{"name":"br0"}]},{"count":2},{}]);
        let got = parse_transact_result(&ops, &r).unwrap();
        assert_eq!(got[0].uuid(), Some(Uuid::parse_str(U).unwrap()));
        assert_eq!(got[1].rows()[0]["name"].as_str(), Some("br0"));
        assert_eq!(got[2].count(), Some(2));
        assert_eq!(got[3], OpResult::Empty);
    }

    #[test]
    fn typed_errors() {
        let ops = vec![
            Operation::Comment("c".into()),
            Operation::wait("T", vec![], &[], Until::Equal, vec![]),
        ];
        let r = json!([{}, {"error":"timed out","details":"wait"}]);
        let e = parse_transact_result(&ops, &r).unwrap_err();
        assert_eq!(e.kind(), Some(&ErrorKind::TimedOut));
        assert!(matches!(
            e,
            TransactError::Operation {
                index: 1,
                op: "wait",
                ..
            }
        ));

        let ops = vec![Operation::insert("Port", Row::new())];
        let r =
            json!([{"uuid":["uuid",U]}, {"error":"referential integrity violation","details":"x"}]);
        let e = parse_transact_result(&ops, &r).unwrap_err();
        assert!(matches!(
            e,
            TransactError::Commit(OpError {
                kind: ErrorKind::ReferentialIntegrityViolation,
                ..
            })
        ));

        let r = json!([{"error":"constraint violation"}, null]);
        let ops = vec![Operation::insert("Port", Row::new()), Operation::Abort];
        assert_eq!(
            parse_transact_result(&ops, &r).unwrap_err().kind(),
            Some(&ErrorKind::ConstraintViolation)
        );

        for bad in [json!({}), json!([1]), json!([{"uuid":"x"}]), json!([])] {
            let ops = vec![Operation::insert("Port", Row::new())];
            assert!(
                matches!(
                    parse_transact_result(&ops, &bad),
                    Err(TransactError::Malformed(_))
                ),
                "{bad}"
            );
        }
    }
}
