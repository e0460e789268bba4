//! Clustered databases (ovsdb-server(7) "Clustered Database Service Model"), as OVS's
//! `ovsdb-idl` follows them: a client that is given every member of a Raft cluster talks to
//! the leader only, and moves when the leader changes.
//!
//! Pure: [`probe_request`] and [`member_status`] (the `_Server` query and its answer) and
//! [`ServerWatch`] (reading `_Server` monitor updates). I/O: [`probe`], which asks one
//! freshly connected member before the client's session takes the connection over.
//! [`crate::Client::connect_cluster`] drives them.

use std::io;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use std::collections::HashMap;

use crate::datum::{Row, Uuid, row_from_json};
use crate::framer::{Framer, FramerLimits};
use crate::jsonrpc::Message;
use crate::monitor::{RowUpdate, TableUpdates};
use crate::session::UpdateKind;

/// The monitor key under which a cluster client watches `_Server`.
pub const SERVER_MONITOR: &str = "_server";

/// What `_Server`'s `Database` table says about one database on one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// `standalone`, `clustered` or `relay`.
    pub model: String,
    /// Whether the member is connected to its cluster (always true when standalone).
    pub connected: bool,
    /// Whether the member is its cluster's leader (always true when standalone).
    pub leader: bool,
}

impl MemberStatus {
    /// Whether a leader-only client may use this member: a standalone server, or the
    /// connected leader of a cluster.
    pub fn usable(&self) -> bool {
        self.model != "clustered" || (self.connected && self.leader)
    }
}

/// The `transact` that asks a member about `db` (request id 0).
pub fn probe_request(db: &str) -> Message {
    Message::request(
        "transact",
        json!([
            "_Server",
            {
                "op": "select",
                "table": "Database",
                "where": [["name", "==", db]],
                "columns": ["model", "connected", "leader"]
            }
        ]),
        json!(0),
    )
}

/// Reads the answer to [`probe_request`]: `Ok(None)` when the member does not serve `db`.
pub fn member_status(reply: &Message) -> Result<Option<MemberStatus>, String> {
    let Message::Response { result, error, .. } = reply else {
        return Err("the member sent a request, not a reply".into());
    };
    if !error.is_null() {
        return Err(format!("_Server query failed: {error}"));
    }
    let rows = result
        .get(0)
        .and_then(|r| r.get("rows"))
        .and_then(Value::as_array)
        .ok_or_else(|| format!("_Server query answered {result}"))?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let row = row_from_json(row).map_err(|e| e.to_string())?;
    Ok(Some(status_of(&row)))
}

fn status_of(row: &Row) -> MemberStatus {
    let flag = |c: &str| row.get(c).and_then(|d| d.as_bool()).unwrap_or(false);
    MemberStatus {
        model: row
            .get("model")
            .and_then(|d| d.as_str())
            .unwrap_or_default()
            .to_string(),
        connected: flag("connected"),
        leader: flag("leader"),
    }
}

/// Follows `_Server`'s `Database` rows through monitor updates, to tell when the member a
/// client uses stops leading the cluster of its database (or loses the cluster).
#[derive(Debug, Clone, Default)]
pub struct ServerWatch {
    db: String,
    rows: HashMap<Uuid, Row>,
}

impl ServerWatch {
    /// Watches `db`'s row.
    pub fn new(db: &str) -> Self {
        ServerWatch {
            db: db.to_string(),
            rows: HashMap::new(),
        }
    }

    /// Applies one update of the `_Server` monitor; true when the member is no longer usable
    /// for the database (see [`MemberStatus::usable`]).
    pub fn apply(&mut self, kind: UpdateKind, updates: &TableUpdates) -> bool {
        if kind == (UpdateKind::Initial { replace: true }) {
            self.rows.clear();
        }
        if let Some(table) = updates.get("Database") {
            for (uuid, update) in table {
                match update {
                    RowUpdate::Insert(r) | RowUpdate::Replace(r) | RowUpdate::Modify(r) => {
                        // The monitored columns are scalars: a `modify` carries new values.
                        let row = self.rows.entry(*uuid).or_default();
                        for (c, v) in r {
                            row.insert(c.clone(), v.clone());
                        }
                    }
                    RowUpdate::Delete => {
                        self.rows.remove(uuid);
                    }
                }
            }
        }
        self.status().is_some_and(|s| !s.usable())
    }

    /// The member's status for the database, once known.
    pub fn status(&self) -> Option<MemberStatus> {
        self.rows
            .values()
            .find(|r| r.get("name").and_then(|d| d.as_str()) == Some(self.db.as_str()))
            .map(status_of)
    }
}

/// Asks a freshly connected member about `db`, within `timeout`.
pub async fn probe<S>(stream: &mut S, db: &str, timeout: Duration) -> io::Result<MemberStatus>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let exchange = async {
        stream.write_all(&probe_request(db).to_bytes()).await?;
        // A TLS stream may keep the request's last record until flushed.
        stream.flush().await?;
        let mut framer = Framer::new(FramerLimits::default());
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the member closed the connection",
                ));
            }
            framer
                .push(&buf[..n])
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            while let Some(bytes) = framer.next_message() {
                let message = Message::parse(&bytes)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                // An echo or notification before the reply is not the answer.
                if !matches!(&message, Message::Response { id, .. } if *id == json!(0)) {
                    continue;
                }
                return match member_status(&message) {
                    Ok(Some(status)) => Ok(status),
                    Ok(None) => Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("the member does not serve database {db}"),
                    )),
                    Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                };
            }
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the member did not answer"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(rows: Value) -> Message {
        Message::reply(json!(0), json!([{ "rows": rows }]))
    }

    #[test]
    fn a_leader_or_a_standalone_server_is_usable_and_a_follower_is_not() {
        let leader = reply(json!([{"model": "clustered", "connected": true, "leader": true}]));
        let follower = reply(json!([{"model": "clustered", "connected": true, "leader": false}]));
        let cut_off = reply(json!([{"model": "clustered", "connected": false, "leader": true}]));
        let alone = reply(json!([{"model": "standalone", "connected": true, "leader": true}]));
        let usable = |m: &Message| member_status(m).unwrap().unwrap().usable();
        assert!(usable(&leader));
        assert!(!usable(&follower));
        assert!(!usable(&cut_off));
        assert!(usable(&alone));
        assert_eq!(member_status(&reply(json!([]))).unwrap(), None);
        let failed = Message::Response {
            id: json!(0),
            result: Value::Null,
            error: json!("unknown database"),
        };
        assert!(member_status(&failed).is_err());
    }

    #[test]
    fn the_watch_says_when_the_member_stops_leading() {
        let mut w = ServerWatch::new("Svcflow");
        let row = |json: Value| crate::datum::row_from_json(&json).unwrap();
        let uuid = Uuid::parse_str("5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e11").unwrap();
        let other = Uuid::parse_str("5f0a2b94-3c1e-4c52-9d62-0d3c1c5a0e12").unwrap();
        let initial: TableUpdates = [(
            "Database".to_string(),
            [
                (uuid, RowUpdate::Insert(row(json!({"name": "Svcflow", "model": "clustered", "connected": true, "leader": true})))),
                (other, RowUpdate::Insert(row(json!({"name": "_Server", "model": "standalone", "connected": true, "leader": true})))),
            ]
            .into_iter()
            .collect(),
        )]
        .into_iter()
        .collect();
        assert!(!w.apply(UpdateKind::Initial { replace: true }, &initial));
        let lost: TableUpdates = [(
            "Database".to_string(),
            [(uuid, RowUpdate::Modify(row(json!({"leader": false}))))]
                .into_iter()
                .collect(),
        )]
        .into_iter()
        .collect();
        assert!(w.apply(UpdateKind::Change, &lost));
        assert_eq!(w.status().map(|s| s.leader), Some(false));
    }

    #[test]
    fn the_probe_selects_the_database_row_from_server() {
        let Message::Request { method, params, .. } = probe_request("Svcflow") else {
            panic!("not a request");
        };
        assert_eq!(method, "transact");
        assert_eq!(params[0], "_Server");
        assert_eq!(params[1]["where"], json!([["name", "==", "Svcflow"]]));
    }
}
