//! Moving the REST state between stores (`svcflow store export` / `import`): one JSON
//! document holding each container as `GET /restconf/config/<container>` returns it, so the
//! file can also be read, edited, or PUT back container by container with curl.
//!
//! Pure: [`export`] and [`changes`]. The commands that open the stores are in the binary.

use serde_json::{Value, json};

use super::error::RequestError;
use super::parse;
use super::store::{Change, Store};
use super::types::Kind;

/// The document's format marker and version.
pub const FORMAT: &str = "svcflow-store";
/// The format version this code writes and reads.
pub const VERSION: u64 = 1;

/// The order containers are imported in: what an item refers to comes before it.
pub const ORDER: [Kind; 4] = [Kind::Node, Kind::Pod, Kind::Service, Kind::Endpoints];

/// The whole state as one document; `revision` is the store's, for the reader.
pub fn export(store: &Store, revision: u64) -> Value {
    let mut doc = store.datastore_json();
    doc.insert(FORMAT.into(), json!(VERSION));
    doc.insert("revision".into(), json!(revision));
    doc.insert(
        "elans".into(),
        Value::Object(
            store
                .elans
                .iter()
                .map(|(ns, id)| (ns.clone(), json!(id)))
                .collect(),
        ),
    );
    Value::Object(doc)
}

/// Why a document cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not JSON, or not this format.
    #[error("{0}")]
    Format(String),
    /// A container does not parse.
    #[error("{container}: {error}")]
    Container {
        /// Which.
        container: String,
        /// Why.
        error: RequestError,
    },
}

/// The change that makes a store hold exactly the document's state: every container
/// replaced at once ([`Change::Datastore`], so a refused import leaves the store as it was).
/// A container the document lacks is emptied.
pub fn change(doc: &[u8]) -> Result<Change, ImportError> {
    let value: Value =
        serde_json::from_slice(doc).map_err(|e| ImportError::Format(format!("not JSON: {e}")))?;
    match value.get(FORMAT).and_then(Value::as_u64) {
        Some(VERSION) => {}
        Some(v) => {
            return Err(ImportError::Format(format!(
                "format version {v}; this svcflow reads version {VERSION}"
            )));
        }
        None => {
            return Err(ImportError::Format(format!(
                "not an export: no \"{FORMAT}\" member"
            )));
        }
    }
    let mut out = Vec::new();
    for kind in ORDER {
        let container = kind.qualified_container();
        let items = match value.get(&container) {
            Some(body) => {
                let bytes = serde_json::to_vec(&json!({ container.clone(): body }))
                    .map_err(|e| ImportError::Format(e.to_string()))?;
                parse::container_body(kind, &bytes).map_err(|error| ImportError::Container {
                    container: container.clone(),
                    error,
                })?
            }
            None => Vec::new(),
        };
        out.push((kind, items));
    }
    Ok(Change::Datastore(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::store::Rules;

    #[test]
    fn an_export_imports_back_to_the_same_state() {
        let mut store = Store::default();
        let rules = Rules::default();
        let node = br#"{"k8s-node:k8s-nodes":[{"k8s-node:uid":"n1","k8s-node:host-name":"n1",
            "k8s-node:internal-ip-address":"192.0.2.1"}]}"#;
        let svc = br#"{"service:services":[{"service:uid":"s1","service:name":"web",
            "service:network-NS":"prod","service:cluster-ip-address":"10.96.0.10",
            "service:service-ports":[{"service:port":80}]}]}"#;
        for (kind, body) in [(Kind::Node, &node[..]), (Kind::Service, &svc[..])] {
            let items = parse::container_body(kind, body).unwrap();
            store.apply(Change::Replace(kind, items), &rules).unwrap();
        }
        let doc = export(&store, 7);
        assert_eq!(doc["revision"], 7);
        assert_eq!(doc["elans"]["prod"], 1);
        let mut copy = Store::default();
        copy.apply(change(doc.to_string().as_bytes()).unwrap(), &rules)
            .unwrap();
        assert_eq!(copy, store);
        assert!(change(b"{}").is_err());
        assert!(change(br#"{"svcflow-store": 2}"#).is_err());
    }
}
