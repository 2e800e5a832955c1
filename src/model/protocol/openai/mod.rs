//! The two OpenAI protocols, Responses (`responses/`) and Chat Completions (`chat/`),
//! and what they share: function tools, arguments written as a JSON string, Bearer
//! keys, and OpenAI's Batch API.

pub(crate) mod chat;
pub(crate) mod responses;

use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use serde_json::Value;

use super::{kind_of, secret, Args, Auth};

/// Reads a tool call's arguments written as a JSON string (both OpenAI protocols). An
/// empty string is an empty object; some servers send an object instead of a string.
pub fn parse_arguments(raw: Option<&Value>) -> (Value, Option<String>) {
    match raw {
        None | Some(Value::Null) => (Value::Object(Default::default()), None),
        Some(Value::String(s)) if s.trim().is_empty() => (Value::Object(Default::default()), None),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v) => (v, None),
            Err(e) => {
                let shown: String = s.chars().take(200).collect();
                (
                    Value::String(s.clone()),
                    Some(format!("the arguments are not valid JSON ({e}): {shown}")),
                )
            }
        },
        Some(other) => (other.clone(), None),
    }
}

/// The Bearer key, OpenAI's only header of its own.
fn headers(auth: &Auth<'_>) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    match auth.api_key {
        Some(key) => Ok(vec![(AUTHORIZATION, secret(format!("Bearer {key}"))?)]),
        None => Ok(Vec::new()),
    }
}

/// Logged arguments, read the way the runner reads them: a JSON string (empty meaning
/// `{}`), or an object some servers send as it is.
fn logged_args(raw: Option<&Value>) -> Args {
    match raw {
        None | Some(Value::Null) | Some(Value::Object(_)) => Args::Object,
        Some(Value::String(s)) if s.trim().is_empty() => Args::Object,
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(_)) => Args::Object,
            Ok(other) => Args::Bad(format!(
                "the arguments are {}, not a JSON object",
                kind_of(&other)
            )),
            Err(e) => Args::Bad(format!("the arguments are not valid JSON ({e})")),
        },
        Some(other) => Args::Bad(format!(
            "the arguments are {}, not a JSON string",
            kind_of(other)
        )),
    }
}
