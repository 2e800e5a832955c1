//! The OpenAI protocols as the simulator serves them: Responses (`responses.rs`, its
//! server-side compaction in `compaction.rs`) and Chat Completions (`chat.rs`), their
//! streamed events (`stream.rs`), the chaos model's odd stops (`chaos.rs`), OpenAI's
//! Batch and Files APIs (`batch.rs`, `files.rs`), their prompt caching (`cache.rs`), the
//! [`Served`](super::Served) of each (`served.rs`), and here what both share: the
//! stream fields' checks, the error body, and the rate-limit headers.

mod batch;
pub(in crate::sim) mod cache;
mod chaos;
pub(in crate::sim) mod chat;
mod compaction;
pub(in crate::sim) mod files;
pub(in crate::sim) mod responses;
mod served;
mod stream;

use std::time::Duration;

use serde_json::{json, Value};

use super::retry_after_secs;
use super::Headers;

pub(in crate::sim) use compaction::Compacted;
pub(super) use served::{Chat, Responses};

/// How OpenAI names a JSON value's type in its 400 messages.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a decimal",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The request's `stream` and `stream_options`, checked as OpenAI does: `stream` a
/// boolean; `stream_options` an object of booleans (Chat: `include_usage` and
/// `include_obfuscation`, Responses: `include_obfuscation`), only with `stream: true`.
pub(in crate::sim) fn check_stream_fields(chat: bool, body: &Value) -> Result<(), String> {
    let stream = body.get("stream");
    if let Some(v) = stream.filter(|v| !v.is_boolean() && !v.is_null()) {
        return Err(format!(
            "Invalid type for 'stream': expected a boolean, but got {} instead.",
            type_name(v)
        ));
    }
    let options = match body.get("stream_options") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(o)) => o,
        Some(v) => {
            return Err(format!(
                "Invalid type for 'stream_options': expected an object, but got {} instead.",
                type_name(v)
            ))
        }
    };
    if !crate::sim::sse::wanted(body) {
        return Err(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
        );
    }
    let known: &[&str] = match chat {
        true => &["include_usage", "include_obfuscation"],
        false => &["include_obfuscation"],
    };
    for (k, v) in options {
        if !known.contains(&k.as_str()) {
            return Err(match chat {
                true => format!("Unrecognized request argument supplied: stream_options.{k}"),
                false => format!("Unknown parameter: 'stream_options.{k}'."),
            });
        }
        if !v.is_boolean() && !v.is_null() {
            return Err(format!(
                "Invalid type for 'stream_options.{k}': expected a boolean, but got {} instead.",
                type_name(v)
            ));
        }
    }
    Ok(())
}

/// An error body in OpenAI's shape: `{error: {message, type, param, code}}`. The
/// simulator's Anthropic-style types are translated to what OpenAI sends for the
/// status (a scripted type such as `insufficient_quota` is kept).
pub(super) fn openai_error_body(
    status: u16,
    error_type: &str,
    code: Option<&str>,
    message: &str,
) -> Value {
    let anthropic_default = error_type == crate::sim::respond::default_error_type(status)
        || matches!(error_type, "authentication_error" | "rate_limit_error");
    let (ty, default_code) = match status {
        429 => ("requests", Some("rate_limit_exceeded")),
        s if s >= 500 => ("server_error", Some("server_error")),
        401 => ("invalid_request_error", Some("invalid_api_key")),
        _ => ("invalid_request_error", None),
    };
    let ty = if anthropic_default { ty } else { error_type };
    let default_code = if ty == "insufficient_quota" {
        Some("insufficient_quota")
    } else {
        default_code
    };
    json!({"error": {"message": message, "type": ty, "param": null, "code": code.or(default_code)}})
}

/// `retry-after` in seconds, and in milliseconds as OpenAI sends it too.
fn retry_after(wait: Duration) -> Headers {
    vec![
        retry_after_secs(wait),
        (
            "retry-after-ms".to_string(),
            wait.as_millis().max(1).to_string(),
        ),
    ]
}

/// A rate-limit window's headers. OpenAI has one tokens window; the simulator reports
/// its input window there.
fn window_headers(window: &str, per_minute: u32, remaining: u32, until_full: Duration) -> Headers {
    let name = match window {
        "requests" => "requests",
        "input-tokens" => "tokens",
        _ => return Vec::new(),
    };
    vec![
        (format!("x-ratelimit-limit-{name}"), per_minute.to_string()),
        (
            format!("x-ratelimit-remaining-{name}"),
            remaining.to_string(),
        ),
        (format!("x-ratelimit-reset-{name}"), go_duration(until_full)),
    ]
}

/// A used-up requests window, full again after `reset`.
fn requests_used_up(reset: Duration) -> Headers {
    vec![
        (
            "x-ratelimit-remaining-requests".to_string(),
            "0".to_string(),
        ),
        ("x-ratelimit-reset-requests".to_string(), go_duration(reset)),
    ]
}

/// Whether the request forbids tool calls (`tool_choice: "none"`).
fn tools_off(request: &Value) -> bool {
    request.get("tool_choice").and_then(Value::as_str) == Some("none")
}

/// How many assistant messages `entries` hold.
fn assistant_messages(entries: &[Value]) -> usize {
    entries.iter().filter(|m| m["role"] == "assistant").count()
}

/// The kinds of failed attempt the chaos model picks from on OpenAI's APIs.
const CHAOS_FAULT_KINDS: &[u8] = &[0, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9];

/// A made-up OpenAI call id's prefix.
const CHAOS_ID_PREFIX: &str = "call_chaos_";

/// The server error OpenAI sends in a stream that breaks.
fn stream_error_code(fault: &crate::sim::script::Fault) -> &str {
    fault
        .code
        .as_deref()
        .or(fault.error_type.as_deref())
        .unwrap_or("server_error")
}

/// An OpenAI reset: a Go-style duration such as `120ms`, `1.5s` or `6m0s`.
pub(super) fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        return format!("{}s", (secs * 1000.0).round() / 1000.0);
    }
    let whole = d.as_secs();
    format!("{}m{}s", whole / 60, whole % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_round_trip() {
        for ms in [0u64, 12, 999, 1000, 1500, 59_999, 60_000, 360_000] {
            let d = Duration::from_millis(ms);
            let back = crate::model::parse_go_duration(&go_duration(d)).unwrap();
            assert!(
                back.abs_diff(d) <= Duration::from_millis(1),
                "{ms}: {}",
                go_duration(d)
            );
        }
    }
}
