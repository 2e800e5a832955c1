//! What every protocol's stream assembler speaks: what one event did to the answer
//! being built, and why the events make no answer. `model::stream` reads the events off
//! the wire; each protocol's `stream.rs` assembles them.

use serde_json::Value;

/// What one event did to the answer being assembled.
#[derive(Debug, PartialEq)]
pub(in crate::model) enum Step {
    /// Nothing the caller needs to know (a start, a ping, an unknown event).
    More,
    /// The first or a later piece of content (text, thinking, tool arguments): the
    /// first one marks the time to first token.
    Content,
    /// The final event: the assembled body.
    Done(Value),
}

/// Why the events make no answer.
#[derive(Debug, PartialEq)]
pub(in crate::model) enum Broken {
    /// The server reported an error inside the stream.
    Error { error_type: String, message: String },
    /// The events are not what the protocol sends.
    Malformed(String),
}

impl From<String> for Broken {
    fn from(s: String) -> Self {
        Broken::Malformed(s)
    }
}

impl From<&str> for Broken {
    fn from(s: &str) -> Self {
        Broken::Malformed(s.to_string())
    }
}

/// Parses an event's data as JSON.
pub(in crate::model) fn json(data: &str) -> Result<Value, Broken> {
    serde_json::from_str(data).map_err(|e| {
        Broken::Malformed(format!(
            "an event's data is not JSON ({e}): {}",
            crate::text::prefix(data, 200)
        ))
    })
}

/// The type and message of an error object, `{type|code, message}`.
pub(in crate::model) fn error_of(e: &Value) -> Broken {
    let error_type = e["type"]
        .as_str()
        .filter(|t| *t != "error")
        .or_else(|| e["code"].as_str())
        .unwrap_or("unknown_error")
        .to_string();
    let message = e["message"].as_str().map_or_else(
        || "(no message)".to_string(),
        |m| crate::text::prefix(m, 1_000),
    );
    Broken::Error {
        error_type,
        message,
    }
}
