//! What the conventions' attributes are made of: a protocol's provider name, what an
//! answer's body says about itself, the class of a failed request, money as text.

use opentelemetry::{KeyValue, StringValue, Value};
use rust_decimal::Decimal;

use crate::vocab::protocol::Protocol;
use crate::vocab::usage::Usage;

/// `gen_ai.provider.name`: the well-known value of the API a protocol speaks (the
/// conventions' flavour discriminator; `server.address` says who actually answered).
pub(super) fn provider_name(protocol: Protocol) -> &'static str {
    protocol.facts().telemetry_name
}

/// An amount of money as an attribute: a decimal string, never a float.
pub(super) fn usd(key: &'static str, amount: Decimal) -> KeyValue {
    KeyValue::new(key, amount.normalize().to_string())
}

/// The `gen_ai.usage.*` attributes of a usage: input tokens include the cached ones, as
/// the conventions ask.
pub(super) fn usage(u: &Usage) -> Vec<KeyValue> {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    vec![
        KeyValue::new("gen_ai.usage.input_tokens", n(u.prompt_tokens())),
        KeyValue::new("gen_ai.usage.output_tokens", n(u.output_tokens)),
        KeyValue::new(
            "gen_ai.usage.cache_read.input_tokens",
            n(u.cache_read_tokens),
        ),
        KeyValue::new(
            "gen_ai.usage.cache_creation.input_tokens",
            n(u.cache_write_tokens),
        ),
        KeyValue::new(
            "gen_ai.usage.reasoning.output_tokens",
            n(u.reasoning_tokens),
        ),
    ]
}

/// A list of strings as an attribute.
pub(super) fn strings(key: &'static str, items: Vec<String>) -> KeyValue {
    KeyValue::new(
        key,
        Value::Array(
            items
                .into_iter()
                .map(StringValue::from)
                .collect::<Vec<_>>()
                .into(),
        ),
    )
}

/// What an answer's body says about itself, in any of the three protocols: its id, the
/// model that answered, and why it stopped (Messages' `stop_reason`, each Chat choice's
/// `finish_reason`, a Response's status or the reason it is incomplete).
pub(super) fn answer(body: &serde_json::Value) -> Vec<KeyValue> {
    let mut out = Vec::new();
    let text = |k: &str| body.get(k).and_then(|v| v.as_str()).map(str::to_string);
    if let Some(id) = text("id") {
        out.push(KeyValue::new("gen_ai.response.id", id));
    }
    if let Some(model) = text("model") {
        out.push(KeyValue::new("gen_ai.response.model", model));
    }
    let reasons: Vec<String> = if let Some(r) = text("stop_reason") {
        vec![r]
    } else if let Some(choices) = body.get("choices").and_then(|c| c.as_array()) {
        choices
            .iter()
            .filter_map(|c| c.get("finish_reason").and_then(|r| r.as_str()))
            .map(str::to_string)
            .collect()
    } else {
        body.pointer("/incomplete_details/reason")
            .and_then(|r| r.as_str())
            .map(str::to_string)
            .or_else(|| text("status"))
            .into_iter()
            .collect()
    };
    if !reasons.is_empty() {
        out.push(strings("gen_ai.response.finish_reasons", reasons));
    }
    out
}

/// The model's output in an answer's body, as the provider wrote it (Messages: the
/// assistant message; Responses: `output`; Chat: each choice's message).
pub(super) fn output_messages(protocol: Protocol, body: &serde_json::Value) -> String {
    crate::model::wire(protocol)
        .output_messages(body)
        .to_string()
}

/// `error.type` of a failed model request: the HTTP status, the provider's error code,
/// or a short name of what went wrong, read from the failure's message as the transcript
/// records it (`model::ModelError`'s wording; a unit test keeps the two in step).
pub(super) fn request_error_type(message: &str) -> String {
    let after = |prefix: &str| message.strip_prefix(prefix);
    let code = |rest: &str| {
        rest.split(':')
            .next()
            .map(str::trim)
            .filter(|c| !c.is_empty() && !c.contains(' '))
            .map(str::to_string)
    };
    if let Some(rest) = after("HTTP ") {
        let status: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if !status.is_empty() {
            return status;
        }
    }
    if let Some(c) = after("the response failed: ").and_then(code) {
        return c;
    }
    if let Some(c) = after("error event in the response stream: ").and_then(code) {
        return c;
    }
    let known = [
        ("connection error", "connection_error"),
        ("no answer within", "timeout"),
        ("malformed response stream", "malformed_stream"),
        ("malformed response", "malformed_response"),
        ("the response stream was cut off", "stream_cut"),
        ("the response stream stalled", "stream_idle"),
        ("the response body passed", "response_too_large"),
        ("batch ", "batch_error"),
    ];
    known
        .iter()
        .find(|(start, _)| message.starts_with(start))
        .map(|(_, name)| name.to_string())
        .unwrap_or_else(|| "_OTHER".to_string())
}

/// A content attribute cut to `limit` characters on a character boundary, with a marker
/// saying how long it was: a collector refuses a request past its size, losing every
/// span in it, and the conventions' JSON is then no longer whole, which the marker says.
pub(super) fn clip(value: String, limit: usize) -> String {
    match value.char_indices().nth(limit) {
        None => value,
        Some((cut, _)) => format!(
            "{}...[cut by agentbatch at {limit} of {} characters]",
            &value[..cut],
            value.chars().count()
        ),
    }
}

/// A replayed answer's first usage as `agentbatch.replayed_*` (input_tokens, ...): the
/// `gen_ai.usage.*` of its span are the run's own, which paid nothing for it.
pub(super) fn replayed_usage(u: &Usage) -> Vec<KeyValue> {
    usage(u)
        .into_iter()
        .map(|kv| {
            let name = kv.key.as_str().trim_start_matches("gen_ai.usage.");
            KeyValue::new(
                format!("agentbatch.replayed_{}", name.replace('.', "_")),
                kv.value,
            )
        })
        .collect()
}

/// The names in tool declarations as a provider receives them (Messages and Responses:
/// `name`; Chat Completions: `function.name`).
pub(super) fn tool_names(declarations: &serde_json::Value) -> Vec<String> {
    declarations
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t.get("name").or_else(|| t.pointer("/function/name")))
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
