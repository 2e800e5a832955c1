//! OpenAI Responses' server-side compaction, as the simulator plays it: a request whose
//! `context_management` asks for `compaction` and whose input passes `compact_threshold`
//! tokens is answered against a reduced context, and its output starts with a
//! `compaction` item that stands for everything before it. The item's
//! `encrypted_content` is opaque to the client; the simulator's carries the marker its
//! summaries use, so later requests keep their script steps.

use serde_json::{json, Value};

use crate::sim::marker::marker_text;

/// A request the simulator compacted: the body size its answer is counted on, and the
/// item that opens the answer's output.
#[derive(Debug)]
pub struct Compacted {
    pub body_len: usize,
    pub item: Value,
}

fn len_of(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

/// The compaction threshold a Responses request asks for: Ok(None) without
/// `context_management`; Some(None) for compaction without a threshold (whose default
/// the API does not document: the simulator then never compacts). Err: a request the
/// API refuses.
fn threshold(request: &Value) -> Result<Option<Option<u64>>, String> {
    let Some(cm) = request.get("context_management").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let entries = cm
        .as_array()
        .ok_or("Invalid type for 'context_management': expected an array.")?;
    let mut found = None;
    for (i, e) in entries.iter().enumerate() {
        if e.get("type").and_then(Value::as_str) != Some("compaction") {
            return Err(format!(
                "Invalid value for 'context_management[{i}].type': only 'compaction' is supported."
            ));
        }
        let t = match e.get("compact_threshold") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().filter(|t| *t > 0).ok_or_else(|| {
                format!("Invalid 'context_management[{i}].compact_threshold': expected a positive integer.")
            })?),
        };
        found = Some(t);
    }
    Ok(found)
}

/// Compacts a Responses request at `step` whose input passes its threshold. The
/// reduced context is the request without its input, plus the compaction item and the
/// client items after the last model turn (what the answer responds to).
pub fn apply(request: &Value, body_len: usize, step: usize) -> Result<Option<Compacted>, String> {
    let Some(limit) = threshold(request)? else {
        return Ok(None);
    };
    let due = limit.is_some_and(|t| (body_len as u64).div_ceil(4) > t);
    let input = request.get("input").and_then(Value::as_array);
    let Some(items) = input.filter(|i| due && !i.is_empty()) else {
        return Ok(None);
    };
    let pending = items
        .iter()
        .rposition(|i| !crate::vocab::context::is_client_entry(i))
        .map_or(0, |p| p + 1);
    let item = json!({
        "type": "compaction",
        "id": format!("cmp_sim_{step}"),
        "encrypted_content": format!("sim-compaction:{}", marker_text(step, &[])),
    });
    let kept: usize = items[pending..].iter().map(len_of).sum();
    let reduced = body_len
        .saturating_sub(len_of(&Value::Array(items.clone())))
        .saturating_add(len_of(&item) + kept + 2);
    Ok(Some(Compacted {
        body_len: reduced,
        item,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(threshold: Value) -> Value {
        let mut input = vec![json!({"type": "message", "role": "user", "content": "go"})];
        for i in 0..5 {
            input.push(json!({"type": "function_call", "call_id": format!("c{i}"), "name": "t", "arguments": "{}"}));
            input.push(json!({"type": "function_call_output", "call_id": format!("c{i}"), "output": "x".repeat(4000)}));
        }
        json!({"model": "gpt-5.4", "input": input, "context_management": [{"type": "compaction", "compact_threshold": threshold}]})
    }

    #[test]
    fn compacts_past_the_threshold_onto_the_pending_results() {
        let r = request(json!(2000));
        let len = serde_json::to_vec(&r).unwrap().len();
        let c = apply(&r, len, 5).unwrap().unwrap();
        assert!(c.body_len < 4000 + 500, "{}", c.body_len);
        assert!(c.item["encrypted_content"]
            .as_str()
            .unwrap()
            .contains("steps=5"));
        assert!(apply(&request(json!(100_000)), len, 5).unwrap().is_none());
        assert!(apply(&request(Value::Null), len, 5).unwrap().is_none());
        let bad = json!({"input": [], "context_management": [{"type": "clear"}]});
        assert!(apply(&bad, 10, 0)
            .unwrap_err()
            .contains("only 'compaction'"));
    }
}
