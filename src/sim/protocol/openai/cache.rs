//! What OpenAI's automatic prompt caching reads in a request: the prompt's prefix,
//! scoped by API, model and `prompt_cache_key`, and how long `prompt_cache_retention`
//! keeps it; its fields refused in OpenAI's words when malformed.

use std::time::Duration;

use serde_json::Value;

use crate::sim::cache::{Boundary, CacheUse, Prefix, PromptCache};

/// OpenAI's in-memory retention: "cleared within 5 to 10 minutes of inactivity".
const IN_MEMORY: Duration = Duration::from_secs(10 * 60);
const EXTENDED: Duration = Duration::from_secs(24 * 60 * 60);

/// What the prompt's prefix (see [`openai_prefix`]) of `scope` reads and writes, kept
/// as long as `prompt_cache_retention` says.
pub(super) fn cache_use<'a>(
    cache: &PromptCache,
    scope: &str,
    request: &Value,
    conversation: impl IntoIterator<Item = &'a Value>,
    commit: bool,
) -> CacheUse {
    let ttl = if request.get("prompt_cache_retention") == Some(&Value::from("24h")) {
        EXTENDED
    } else {
        IN_MEMORY
    };
    cache.openai(&openai_prefix(scope, request, conversation), ttl, commit)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "an integer",
        Value::Number(_) => "a decimal",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Refuses malformed OpenAI prompt-cache fields in OpenAI's words.
pub(in crate::sim) fn check_openai_fields(request: &Value) -> Result<(), String> {
    match request.get("prompt_cache_key") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k.chars().count() > 64 => {
            return Err(format!(
                "Invalid 'prompt_cache_key': string too long. Expected a string with maximum length 64, but got a string with length {} instead.",
                k.chars().count()
            ))
        }
        Some(Value::String(_)) => {}
        Some(v) => {
            return Err(format!(
                "Invalid type for 'prompt_cache_key': expected a string, but got {} instead.",
                kind(v)
            ))
        }
    }
    match request.get("prompt_cache_retention") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v == "in_memory" || v == "24h" => Ok(()),
        Some(Value::String(s)) => Err(format!(
            "Invalid value: '{s}'. Supported values are: 'in_memory' and '24h'."
        )),
        Some(v) => Err(format!(
            "Invalid type for 'prompt_cache_retention': expected one of 'in_memory' or '24h', but got {} instead.",
            kind(v)
        )),
    }
}

/// The boundaries of an OpenAI prompt (tools, then the conversation: instructions and
/// input items, or messages), scoped by the API (`scope`), model and `prompt_cache_key`.
pub(in crate::sim) fn openai_prefix<'a>(
    scope: &str,
    request: &Value,
    conversation: impl IntoIterator<Item = &'a Value>,
) -> Vec<Boundary> {
    let text = |f: &str| request.get(f).and_then(Value::as_str).unwrap_or("");
    let mut prefix = Prefix::new(&[scope, text("model"), text("prompt_cache_key")]);
    let tools = request.get("tools").and_then(Value::as_array);
    for t in tools.into_iter().flatten() {
        prefix.push(t, None);
    }
    for v in conversation {
        prefix.push(v, None);
    }
    prefix.out
}
