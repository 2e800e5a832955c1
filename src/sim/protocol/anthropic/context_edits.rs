//! Anthropic's context editing, applied to the prompt before anything counts it.

use serde_json::{json, Value};

use crate::sim::protocol::Edited;
use crate::vocab::context::CONTEXT_MANAGEMENT_BETA;

/// Anthropic's context editing (`clear_tool_uses_20250919`): once the prompt passes
/// the trigger (default 100,000 input tokens; or, with `type: tool_uses`, that many
/// tool results), the oldest tool results but the newest
/// `keep` (default 3) and those of `exclude_tools` are replaced with a placeholder
/// before the model reads the prompt. Err: a request the API would refuse.
pub fn context_edits(
    beta: &str,
    request: &Value,
    body_len: usize,
) -> Result<Option<Edited>, String> {
    let Some(cm) = request.get("context_management") else {
        return Ok(None);
    };
    if !beta.split(',').any(|b| b.trim() == CONTEXT_MANAGEMENT_BETA) {
        return Err(format!(
            "context_management: Extra inputs are not permitted (it needs the anthropic-beta header {CONTEXT_MANAGEMENT_BETA})"
        ));
    }
    let edits = cm
        .get("edits")
        .and_then(Value::as_array)
        .ok_or("context_management.edits: Input should be a valid list")?;
    let mut edited: Option<Value> = None;
    let mut applied = Vec::new();
    let mut len = body_len;
    for (i, e) in edits.iter().enumerate() {
        match e.get("type").and_then(Value::as_str) {
            Some("clear_tool_uses_20250919") => {}
            Some("clear_thinking_20251015") => continue,
            other => {
                return Err(format!(
                    "context_management.edits.{i}.type: Input tag {} found using 'type' does not match any of the expected tags: 'clear_tool_uses_20250919', 'clear_thinking_20251015'",
                    other.map_or("null".to_string(), |t| format!("'{t}'"))
                ))
            }
        }
        let value = |k: &str, default: u64| {
            e.get(k)
                .and_then(|v| v.get("value"))
                .and_then(Value::as_u64)
                .unwrap_or(default)
        };
        let keep = value("keep", 3) as usize;
        let trigger = value("trigger", 100_000);
        let current = edited.as_ref().unwrap_or(request);
        let reached = match e.pointer("/trigger/type").and_then(Value::as_str) {
            Some("tool_uses") => tool_results(current) as u64 > trigger,
            _ => (len as u64).div_ceil(4) > trigger,
        };
        if !reached {
            continue;
        }
        let exclude: Vec<&str> = e
            .get("exclude_tools")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let target = edited.get_or_insert_with(|| request.clone());
        let (uses, removed) = clear_results(target, keep, &exclude);
        if uses > 0 {
            // The client's byte count less what was cleared, so every other count (the
            // stream fields left out) stays as it was.
            len = len.saturating_sub(removed);
            let tokens = (removed as u64).div_ceil(4);
            applied.push(json!({
                "type": "clear_tool_uses_20250919",
                "cleared_tool_uses": uses,
                "cleared_input_tokens": tokens
            }));
        }
    }
    let Some(edited) = edited.filter(|_| !applied.is_empty()) else {
        return Ok(None);
    };
    Ok(Some(Edited {
        request: edited,
        body_len: len,
        applied: json!({ "applied_edits": applied }),
    }))
}

const PLACEHOLDER: &str = "[tool result cleared by context editing]";

/// The tool results of a Messages request.
fn tool_results(request: &Value) -> usize {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .count()
}

/// Clears the tool results of a Messages request but the newest `keep`; returns the
/// results cleared and the bytes that removed from the body.
fn clear_results(request: &mut Value, keep: usize, exclude: &[&str]) -> (u64, usize) {
    let messages = match request.get_mut("messages").and_then(Value::as_array_mut) {
        Some(m) => m,
        None => return (0, 0),
    };
    let mut names = std::collections::HashMap::new();
    for m in messages.iter() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                names.insert(
                    b["id"].as_str().unwrap_or("").to_string(),
                    b["name"].as_str().unwrap_or("").to_string(),
                );
            }
        }
    }
    let mut places = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            let tool = names
                .get(b["tool_use_id"].as_str().unwrap_or(""))
                .map(String::as_str);
            if b["type"] == "tool_result"
                && b["content"] != PLACEHOLDER
                && !tool.is_some_and(|t| exclude.contains(&t))
            {
                places.push((i, j));
            }
        }
    }
    let cut = places.len().saturating_sub(keep);
    let (mut uses, mut bytes) = (0u64, 0usize);
    for (i, j) in places.into_iter().take(cut) {
        if let Some(b) = messages[i]["content"].get_mut(j) {
            let old = b["content"].to_string().len();
            b["content"] = json!(PLACEHOLDER);
            uses += 1;
            bytes += old.saturating_sub(PLACEHOLDER.len() + 2);
        }
    }
    (uses, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(results: usize) -> Value {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        for i in 0..results {
            messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": if i == 0 { "keep_me" } else { "read" }, "input": {}}]}));
            messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "x".repeat(4000)}]}));
        }
        json!({"model": "claude-sonnet-4-5", "messages": messages, "context_management": {"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 2000}, "keep": {"type": "tool_uses", "value": 2}, "exclude_tools": ["keep_me"]}]}})
    }

    #[test]
    fn context_editing_needs_its_beta_and_clears_all_but_the_kept_and_excluded() {
        let r = request(6);
        let len = serde_json::to_vec(&r).unwrap().len();
        let e = context_edits("", &r, len).unwrap_err();
        assert!(e.contains("context-management-2025-06-27"), "{e}");
        let edited = context_edits("other, context-management-2025-06-27", &r, len)
            .unwrap()
            .unwrap();
        // 6 results: the first is excluded, the last 2 kept, 3 cleared.
        assert_eq!(edited.applied["applied_edits"][0]["cleared_tool_uses"], 3);
        assert!(edited.body_len < len - 3 * 3900);
        let m = &edited.request["messages"];
        assert_eq!(m[2]["content"][0]["content"].as_str().unwrap().len(), 4000);
        assert_eq!(m[4]["content"][0]["content"], PLACEHOLDER);
        assert_eq!(m[12]["content"][0]["content"].as_str().unwrap().len(), 4000);
        // Below the trigger nothing is cleared.
        let small = request(1);
        let len = serde_json::to_vec(&small).unwrap().len();
        assert!(context_edits(CONTEXT_MANAGEMENT_BETA, &small, len)
            .unwrap()
            .is_none());
    }
}
