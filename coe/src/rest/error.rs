//! Request errors, rendered as RESTCONF error bodies.

use serde_json::json;

/// Why a request was refused. Each variant maps to one HTTP status and RESTCONF error tag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The body is not JSON, or not shaped like the container it is sent to (400).
    #[error("malformed message: {message}")]
    Malformed {
        /// What was wrong.
        message: String,
    },
    /// A field holds a bad value (400). `path` names the field.
    #[error("{path}: {message}")]
    Invalid {
        /// The field, e.g. `services[uid-1].service-ports[0].port`.
        path: String,
        /// What was wrong with it.
        message: String,
    },
    /// The item does not exist (404).
    #[error("{path}: no such item")]
    NotFound {
        /// The item, e.g. `services[uid-1]`.
        path: String,
    },
    /// The body's content type is not JSON (415).
    #[error("unsupported content type `{content_type}`")]
    MediaType {
        /// The type given.
        content_type: String,
    },
    /// POST of an item that already exists (409).
    #[error("{path}: already exists")]
    Exists {
        /// The item.
        path: String,
    },
}

impl RequestError {
    /// A bad value in `path`.
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A body that cannot be read.
    pub fn malformed(message: impl Into<String>) -> Self {
        Self::Malformed {
            message: message.into(),
        }
    }

    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Self::Malformed { .. } | Self::Invalid { .. } => 400,
            Self::NotFound { .. } => 404,
            Self::MediaType { .. } => 415,
            Self::Exists { .. } => 409,
        }
    }

    /// The RESTCONF `error-tag`.
    pub fn tag(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "malformed-message",
            Self::Invalid { .. } => "invalid-value",
            Self::NotFound { .. } => "data-missing",
            Self::MediaType { .. } => "operation-not-supported",
            Self::Exists { .. } => "data-exists",
        }
    }

    /// The RESTCONF error body.
    pub fn body(&self) -> serde_json::Value {
        let (path, message) = match self {
            Self::Malformed { message } => (None, message.clone()),
            Self::Invalid { path, message } => (Some(path.as_str()), message.clone()),
            Self::NotFound { path } => (Some(path.as_str()), "no such item".to_string()),
            Self::Exists { path } => (Some(path.as_str()), "item already exists".to_string()),
            Self::MediaType { .. } => (None, self.to_string()),
        };
        error_body(self.tag(), path, &message)
    }
}

/// A RESTCONF error body with one error.
pub fn error_body(tag: &str, path: Option<&str>, message: &str) -> serde_json::Value {
    let mut error = json!({
        "error-type": if tag == "malformed-message" { "protocol" } else { "application" },
        "error-tag": tag,
        "error-message": message,
    });
    if let (Some(path), Some(obj)) = (path, error.as_object_mut()) {
        obj.insert("error-path".into(), json!(path));
    }
    json!({ "errors": { "error": [error] } })
}

/// How much of an offending value an error message quotes.
pub const EXCERPT_CHARS: usize = 64;

/// `value` as an error message quotes it: whole when short, else its first
/// [`EXCERPT_CHARS`] characters and how long it was, so that an answer never echoes a huge
/// input back.
pub fn excerpt(value: &str) -> String {
    match value.char_indices().nth(EXCERPT_CHARS) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}… ({} bytes)", &value[..cut], value.len()),
    }
}
