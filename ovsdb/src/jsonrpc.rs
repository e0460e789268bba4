//! JSON-RPC 1.0 messages as ovsdb-server speaks them (RFC 7047 §4).
//!
//! No `"jsonrpc"` member is ever sent (ovsdb-server 3.1 rejects `"2.0"`). A request has a
//! non-null `id`; a notification has `"id": null`; a reply carries both `result` and `error`,
//! one of which is null.

use serde_json::{Map, Value, json};

/// A JSON-RPC 1.0 message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request expecting a reply with the same `id`.
    Request {
        method: String,
        params: Value,
        id: Value,
    },
    /// A request with `"id": null` that gets no reply (RFC 7047 §4.1.6 `update`, `locked`, …).
    Notification { method: String, params: Value },
    /// A reply to a request. `error` is `Value::Null` on success.
    Response {
        id: Value,
        result: Value,
        error: Value,
    },
}

/// Why bytes are not a JSON-RPC 1.0 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("invalid JSON: {0}")]
    Json(String),
    #[error("invalid JSON-RPC message: {0}")]
    Shape(&'static str),
}

impl Message {
    /// A request.
    pub fn request(method: &str, params: Value, id: Value) -> Message {
        Message::Request {
            method: method.to_owned(),
            params,
            id,
        }
    }

    /// A successful reply.
    pub fn reply(id: Value, result: Value) -> Message {
        Message::Response {
            id,
            result,
            error: Value::Null,
        }
    }

    /// Parses one framed message.
    pub fn parse(bytes: &[u8]) -> Result<Message, MessageError> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| MessageError::Json(e.to_string()))?;
        Message::from_value(v)
    }

    /// Interprets a JSON value as a message.
    pub fn from_value(v: Value) -> Result<Message, MessageError> {
        let Value::Object(mut obj) = v else {
            return Err(MessageError::Shape("not an object"));
        };
        let id = obj.remove("id").unwrap_or(Value::Null);
        if let Some(method) = obj.remove("method") {
            let Value::String(method) = method else {
                return Err(MessageError::Shape("method is not a string"));
            };
            let params = obj.remove("params").unwrap_or(Value::Array(Vec::new()));
            if !params.is_array() {
                return Err(MessageError::Shape("params is not an array"));
            }
            if id.is_null() {
                Ok(Message::Notification { method, params })
            } else {
                Ok(Message::Request { method, params, id })
            }
        } else if obj.contains_key("result") || obj.contains_key("error") {
            if id.is_null() {
                return Err(MessageError::Shape("reply without id"));
            }
            let result = obj.remove("result").unwrap_or(Value::Null);
            let error = obj.remove("error").unwrap_or(Value::Null);
            Ok(Message::Response { id, result, error })
        } else {
            Err(MessageError::Shape("neither request nor reply"))
        }
    }

    /// The JSON value of this message.
    pub fn to_value(&self) -> Value {
        match self {
            Message::Request { method, params, id } => {
                json!({"method": method, "params": params, "id": id})
            }
            Message::Notification { method, params } => {
                json!({"method": method, "params": params, "id": null})
            }
            Message::Response { id, result, error } => {
                let mut m = Map::new();
                m.insert("id".into(), id.clone());
                m.insert("result".into(), result.clone());
                m.insert("error".into(), error.clone());
                Value::Object(m)
            }
        }
    }

    /// Serialised bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising a `Value` to a Vec cannot fail.
        serde_json::to_vec(&self.to_value()).unwrap_or_default()
    }
}

/// An RPC-level error reply (RFC 7047 §3.1 `<error>` or a bare string such as
/// `"unknown method"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}{}", details.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
pub struct RpcError {
    pub error: String,
    pub details: Option<String>,
}

impl RpcError {
    /// Interprets a non-null `error` member.
    pub fn from_value(v: &Value) -> RpcError {
        match v {
            Value::String(s) => RpcError {
                error: s.clone(),
                details: None,
            },
            Value::Object(o) => RpcError {
                error: o
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_owned(),
                details: o.get("details").and_then(Value::as_str).map(str::to_owned),
            },
            other => RpcError {
                error: other.to_string(),
                details: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_kinds() {
        let r = Message::parse(br#"{"id":"echo","method":"echo","params":[]}"#).unwrap();
        assert_eq!(r, Message::request("echo", json!([]), json!("echo")));
        let n = Message::parse(br#"{"id":null,"method":"update","params":[1,{}]}"#).unwrap();
        assert_eq!(
            n,
            Message::Notification {
                method: "update".into(),
                params: json!([1, {}])
            }
        );
        let s = Message::parse(br#"{"id":3,"result":["Open_vSwitch"],"error":null}"#).unwrap();
        assert_eq!(s, Message::reply(json!(3), json!(["Open_vSwitch"])));
        let e = Message::parse(br#"{"id":4,"result":null,"error":"unknown method"}"#).unwrap();
        let Message::Response { error, .. } = e else {
            panic!()
        };
        assert_eq!(RpcError::from_value(&error).error, "unknown method");
    }

    #[test]
    fn rejects_bad_shapes() {
        for b in [
            &b"{}"[..],
            br#"{"method":1}"#,
            br#"{"method":"x","params":{}}"#,
            br#"{"result":1}"#,
            br#"{"a":"#,
            b"\xff\xfe",
        ] {
            assert!(Message::parse(b).is_err(), "{}", String::from_utf8_lossy(b));
        }
    }

    #[test]
    fn encodes_without_jsonrpc_member() {
        let b = Message::request("list_dbs", json!([]), json!(1)).to_bytes();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v, json!({"method":"list_dbs","params":[],"id":1}));
        let b = Message::reply(json!("echo"), json!([])).to_bytes();
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v, json!({"id":"echo","result":[],"error":null}));
    }

    #[test]
    fn rpc_error_display() {
        let e = RpcError::from_value(&json!({"error":"unknown database","details":"x"}));
        assert_eq!(e.to_string(), "unknown database: x");
    }
}
