//! A Messages answer streamed as server-sent events.

use serde_json::{json, Value};

use crate::sim::sse::{with, Splitter, Sse};

/// A Messages answer as its events: `message_start` (no content, no stop, the input
/// side of usage), a `ping`, each block's start, deltas and stop (text and thinking in
/// pieces, a signature in one `signature_delta`, tool input as pieces of its JSON, other
/// blocks whole in their start), `message_delta` (the stop and the final usage) and
/// `message_stop`.
pub(super) fn events(msg: &Value, split: &mut Splitter) -> Vec<Sse> {
    let mut out = Vec::new();
    let mut start = msg.clone();
    if let Some(o) = start.as_object_mut() {
        o.insert("content".into(), json!([]));
        o.insert("stop_reason".into(), Value::Null);
        o.insert("stop_sequence".into(), Value::Null);
        o.remove("stop_details");
        if let Some(u) = o.get_mut("usage").and_then(Value::as_object_mut) {
            let output = u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0);
            u.insert("output_tokens".into(), json!(output.min(1)));
        }
    }
    out.push(Sse::named(
        "message_start",
        &json!({"type": "message_start", "message": start}),
    ));
    out.push(Sse::named("ping", &json!({"type": "ping"})));
    let blocks = msg["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for (index, block) in blocks.iter().enumerate() {
        let delta = |delta: Value| {
            Sse::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            )
        };
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let (first, deltas) = match (kind, block) {
            ("text", Value::Object(_)) => {
                let text = block["text"].as_str().unwrap_or("");
                let deltas = split
                    .pieces(text)
                    .into_iter()
                    .map(|p| delta(json!({"type": "text_delta", "text": p})))
                    .collect();
                (with(block, "text", json!("")), deltas)
            }
            ("thinking", Value::Object(_)) => {
                let text = block["thinking"].as_str().unwrap_or("");
                let mut deltas: Vec<Sse> = split
                    .pieces(text)
                    .into_iter()
                    .map(|p| delta(json!({"type": "thinking_delta", "thinking": p})))
                    .collect();
                if let Some(sig) = block.get("signature") {
                    deltas.push(delta(json!({"type": "signature_delta", "signature": sig})));
                }
                let first = with(&with(block, "thinking", json!("")), "signature", json!(""));
                (first, deltas)
            }
            (_, Value::Object(o)) if o.contains_key("input") => {
                let encoded = block["input"].to_string();
                let mut deltas = Vec::new();
                if split.chance(30) {
                    deltas.push(delta(
                        json!({"type": "input_json_delta", "partial_json": ""}),
                    ));
                }
                deltas.extend(
                    split
                        .pieces(&encoded)
                        .into_iter()
                        .map(|p| delta(json!({"type": "input_json_delta", "partial_json": p}))),
                );
                (with(block, "input", json!({})), deltas)
            }
            _ => (block.clone(), Vec::new()),
        };
        out.push(Sse::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": first}),
        ));
        out.extend(deltas);
        out.push(Sse::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
        if split.chance(15) {
            out.push(Sse::named("ping", &json!({"type": "ping"})));
        }
    }
    let mut delta =
        json!({"stop_reason": msg["stop_reason"], "stop_sequence": msg["stop_sequence"]});
    if let Some(d) = msg.get("stop_details") {
        delta["stop_details"] = d.clone();
    }
    let mut event = json!({"type": "message_delta", "delta": delta});
    if let Some(u) = msg.get("usage").and_then(Value::as_object) {
        let cumulative: serde_json::Map<String, Value> = [
            "input_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "output_tokens",
        ]
        .into_iter()
        .filter_map(|k| u.get(k).map(|v| (k.to_string(), v.clone())))
        .collect();
        event["usage"] = Value::Object(cumulative);
    }
    out.push(Sse::named("message_delta", &event));
    out.push(Sse::named("message_stop", &json!({"type": "message_stop"})));
    out
}
