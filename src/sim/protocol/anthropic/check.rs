//! The simulator's checks of a client request, as the real Messages API makes them (and
//! a little stricter where a harness bug would otherwise pass unnoticed). A broken rule
//! is answered with 400 `invalid_request_error` and a message naming the field.

use serde_json::Value;

use crate::sim::protocol::{History, Violation};
use crate::sim::respond::signature;
use crate::sim::SentTurn;

/// Checks the body of a Messages request. `version` is the anthropic-version header.
pub fn check_request(body: &Value, version: &str, history: &dyn History) -> Result<(), Violation> {
    let obj = body
        .as_object()
        .ok_or("the request body must be a JSON object")?;
    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        _ => return Err("model: Field required".into()),
    }
    check_stream_field(body)?;
    let max_tokens = match obj.get("max_tokens").and_then(Value::as_u64) {
        Some(n) if n >= 1 => n,
        _ => return Err("max_tokens: Field required (an integer of at least 1)".into()),
    };
    if version == "2026-10-21" {
        for p in ["temperature", "top_p", "top_k"] {
            if obj.contains_key(p) {
                return Err(format!("{p}: Extra inputs are not permitted").into());
            }
        }
    }
    if let Some(th) = obj.get("thinking") {
        if th.get("type").and_then(Value::as_str) == Some("enabled") {
            let b = th.get("budget_tokens").and_then(Value::as_u64).unwrap_or(0);
            if b < 1024 {
                return Err(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                        .into(),
                );
            }
            if b >= max_tokens {
                return Err("`max_tokens` must be greater than `thinking.budget_tokens`".into());
            }
        }
    }
    check_tools(obj.get("tools"))?;
    super::cache::anthropic_prefix(body)?;
    let messages = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("messages: Field required")?;
    if messages.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    check_messages(messages, history)
}

fn check_tools(tools: Option<&Value>) -> Result<(), Violation> {
    let Some(tools) = tools else { return Ok(()) };
    let list = tools
        .as_array()
        .ok_or("tools: Input should be a valid list")?;
    let mut names = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("tools.{i}.name: Field required"))?;
        let valid = !name.is_empty()
            && name.len() <= 128
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(format!(
                "tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )
            .into());
        }
        let is_server_tool = t
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|ty| ty != "custom");
        if !is_server_tool
            && t.pointer("/input_schema/type").and_then(Value::as_str) != Some("object")
        {
            return Err(format!("tools.{i}.input_schema.type: Input should be 'object'").into());
        }
        if names.contains(&name) {
            return Err(format!("tools: Tool names must be unique (\"{name}\")").into());
        }
        names.push(name);
    }
    Ok(())
}

fn blocks(content: &Value) -> &[Value] {
    content.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// Every `tool_use` id of the conversation is unique and well formed, as the API
/// requires (it answers `messages.N.content.M: tool_use ids must be unique`).
fn check_tool_use_ids(messages: &[Value]) -> Result<(), Violation> {
    let mut seen = std::collections::HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        if m.get("role").and_then(Value::as_str) != Some("assistant") {
            continue;
        }
        for (j, b) in blocks(&m["content"]).iter().enumerate() {
            if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                continue;
            }
            let id = b.get("id").and_then(Value::as_str).unwrap_or("");
            let valid = !id.is_empty()
                && id
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
            if !valid {
                return Err(format!(
                    "messages.{i}.content.{j}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
                ).into());
            }
            if !seen.insert(id) {
                return Err(
                    format!("messages.{i}.content.{j}: `tool_use` ids must be unique").into(),
                );
            }
        }
    }
    Ok(())
}

fn check_messages(messages: &[Value], history: &dyn History) -> Result<(), Violation> {
    check_tool_use_ids(messages)?;
    let mut step = 0usize;
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let content = m
            .get("content")
            .ok_or_else(|| format!("messages.{i}.content: Field required"))?;
        if !content.is_string() && !content.is_array() {
            return Err(
                format!("messages.{i}.content: Input should be a valid string or list").into(),
            );
        }
        match role {
            "user" => {}
            "assistant" if i == 0 => {
                return Err("messages.0.role: the first message must use the \"user\" role".into())
            }
            "assistant" => {
                check_assistant(i, step, content, history)?;
                check_answer(
                    i,
                    content,
                    messages.get(i + 1),
                    history.sent(step).as_deref(),
                )?;
                step += 1;
            }
            other => {
                return Err(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant', got \"{other}\""
                )
                .into())
            }
        }
        if role == "user" {
            let prev_calls = if i > 0 {
                tool_use_ids(&messages[i - 1])
            } else {
                Vec::new()
            };
            for (j, b) in blocks(content).iter().enumerate() {
                if b.get("type").and_then(Value::as_str) == Some("tool_result") {
                    let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                    if !prev_calls.iter().any(|c| c == id) {
                        return Err(format!(
                            "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ).into());
                    }
                }
            }
        }
    }
    Ok(())
}

fn tool_use_ids(m: &Value) -> Vec<String> {
    if m.get("role").and_then(Value::as_str) != Some("assistant") {
        return Vec::new();
    }
    blocks(&m["content"])
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .filter_map(|b| b.get("id").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// A replayed assistant message must be what was sent, thinking signatures intact.
fn check_assistant(
    i: usize,
    step: usize,
    content: &Value,
    history: &dyn History,
) -> Result<(), Violation> {
    for (j, b) in blocks(content).iter().enumerate() {
        if b.get("type").and_then(Value::as_str) == Some("thinking") {
            let text = b.get("thinking").and_then(Value::as_str).unwrap_or("");
            let sig = b.get("signature").and_then(Value::as_str).unwrap_or("");
            if sig != signature(text) {
                return Err(format!(
                    "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
                .into());
            }
        }
    }
    if let Some(sent) = history.sent(step) {
        // A breakpoint on a replayed block is the client's, not a change to the turn.
        if sent.content != *super::cache::without_markers(content) {
            return Err(format!(
                "messages.{i}.content: the assistant turn differs from the response the model sent (blocks must be returned unchanged, in order)"
            ).into());
        }
    }
    Ok(())
}

/// What follows an assistant turn: after tool_use, one tool_result per call, first, in
/// call order; after pause_turn, no user message (the paused turn is sent back as the
/// last message, and its continuation follows it as another assistant message).
fn check_answer(
    i: usize,
    content: &Value,
    next: Option<&Value>,
    sent: Option<&SentTurn>,
) -> Result<(), Violation> {
    let Some(next) = next else { return Ok(()) };
    let next_is_user = next.get("role").and_then(Value::as_str) == Some("user");
    if next_is_user && sent.is_some_and(|s| s.stop_reason == "pause_turn") {
        return Err(format!(
            "messages.{}: a pause_turn response must be continued by sending the conversation back with it as the last message, without adding a message",
            i + 1
        ).into());
    }
    let calls: Vec<&str> = blocks(content)
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .filter_map(|b| b.get("id").and_then(Value::as_str))
        .collect();
    if calls.is_empty() {
        return Ok(());
    }
    let next_blocks = blocks(&next["content"]);
    let results: Vec<&str> = next_blocks
        .iter()
        .take_while(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
        .collect();
    if next.get("role").and_then(Value::as_str) != Some("user") || results.len() < calls.len() {
        let missing: Vec<&str> = calls
            .iter()
            .copied()
            .filter(|c| !results.contains(c))
            .collect();
        return Err(format!(
            "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message, before any other content.",
            i + 1,
            if missing.is_empty() { calls.join(", ") } else { missing.join(", ") }
        ).into());
    }
    if results.len() > calls.len() {
        return Err(format!(
            "messages.{}: more `tool_result` blocks than `tool_use` blocks",
            i + 1
        )
        .into());
    }
    if results != calls {
        return Err(format!(
            "messages.{}: `tool_result` blocks must follow the order of the `tool_use` blocks ({})",
            i + 1,
            calls.join(", ")
        )
        .into());
    }
    Ok(())
}

/// The request's `stream`, checked as Messages does: a boolean.
pub(in crate::sim) fn check_stream_field(body: &Value) -> Result<(), String> {
    match body.get("stream") {
        Some(v) if !v.is_boolean() => Err("stream: Input should be a valid boolean".into()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::sim::protocol::TestHistory as Map;

    fn req(messages: Value) -> Value {
        json!({"model": "m", "max_tokens": 100, "messages": messages})
    }

    fn tool_turn() -> Value {
        json!([{"type": "tool_use", "id": "a", "name": "t", "input": {}}, {"type": "tool_use", "id": "b", "name": "t", "input": {}}])
    }

    #[test]
    fn tool_use_ids_are_unique_across_the_conversation_and_well_formed() {
        let call = |id: &str| json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "t", "input": {}}]});
        let result = |id: &str| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "x"}]});
        let user = json!({"role": "user", "content": "hi"});
        let ok = [user.clone(), call("a"), result("a"), call("b"), result("b")];
        assert_eq!(check_tool_use_ids(&ok), Ok(()));
        let again = [user.clone(), call("a"), result("a"), call("a"), result("a")];
        assert!(check_tool_use_ids(&again)
            .unwrap_err()
            .0
            .contains("messages.3.content.0: `tool_use` ids must be unique"));
        let odd = [user, call("a b")];
        assert!(check_tool_use_ids(&odd)
            .unwrap_err()
            .0
            .contains("should match pattern"));
    }

    #[test]
    fn tool_results_must_pair_in_order_and_come_first() {
        let h = Map::default();
        let ok = req(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": tool_turn()},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                {"type": "text", "text": "after"}]}
        ]));
        assert_eq!(check_request(&ok, "2023-06-01", &h), Ok(()));
        let missing = req(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": tool_turn()},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "1"}]}
        ]));
        assert!(check_request(&missing, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("without `tool_result`"));
        let text_first = req(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": tool_turn()},
            {"role": "user", "content": [{"type": "text", "text": "x"},
                {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                {"type": "tool_result", "tool_use_id": "b", "content": "2"}]}
        ]));
        assert!(check_request(&text_first, "2023-06-01", &h).is_err());
        let swapped = req(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": tool_turn()},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "b", "content": "2"},
                {"type": "tool_result", "tool_use_id": "a", "content": "1"}]}
        ]));
        assert!(check_request(&swapped, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("order"));
    }

    #[test]
    fn replayed_turns_must_match_and_keep_signatures() {
        let content = json!([{"type": "thinking", "thinking": "hm", "signature": signature("hm")}, {"type": "text", "text": "x"}]);
        let mut h = Map::default();
        h.0.insert(
            0,
            SentTurn {
                content: content.clone(),
                stop_reason: "end_turn".into(),
                context: Value::Null,
            },
        );
        let good = req(
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}, {"role": "user", "content": "more"}]),
        );
        assert_eq!(check_request(&good, "2023-06-01", &h), Ok(()));
        let forged = json!([{"type": "thinking", "thinking": "hm!", "signature": signature("hm")}, {"type": "text", "text": "x"}]);
        let bad = req(
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": forged}, {"role": "user", "content": "more"}]),
        );
        assert!(check_request(&bad, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("signature"));
        let edited = json!([{"type": "thinking", "thinking": "hm", "signature": signature("hm")}, {"type": "text", "text": "x "}]);
        let bad = req(
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": edited}, {"role": "user", "content": "more"}]),
        );
        assert!(check_request(&bad, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("differs"));
    }

    #[test]
    fn pause_turn_must_be_sent_back_last() {
        let mut h = Map::default();
        let content = json!([{"type": "text", "text": "working"}]);
        h.0.insert(
            0,
            SentTurn {
                content: content.clone(),
                stop_reason: "pause_turn".into(),
                context: Value::Null,
            },
        );
        let cont = req(
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}]),
        );
        assert_eq!(check_request(&cont, "2023-06-01", &h), Ok(()));
        let nudged = req(
            json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}, {"role": "user", "content": "continue"}]),
        );
        assert!(check_request(&nudged, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("pause_turn"));
    }

    #[test]
    fn request_fields() {
        let h = Map::default();
        let mut r = req(json!([{"role": "user", "content": "hi"}]));
        r["temperature"] = json!(0.5);
        assert_eq!(check_request(&r, "2023-06-01", &h), Ok(()));
        assert!(check_request(&r, "2026-10-21", &h)
            .unwrap_err()
            .0
            .contains("Extra inputs"));
        let mut r = req(json!([{"role": "user", "content": "hi"}]));
        r["tools"] = json!([{"name": "bad name", "input_schema": {"type": "object"}}]);
        assert!(check_request(&r, "2023-06-01", &h).is_err());
        let r = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert!(check_request(&r, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("max_tokens"));
        let r = req(
            json!([{"role": "user", "content": "hi"}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "zz", "content": "?"}]}]),
        );
        assert!(check_request(&r, "2023-06-01", &h)
            .unwrap_err()
            .0
            .contains("unexpected `tool_use_id`"));
    }
}
