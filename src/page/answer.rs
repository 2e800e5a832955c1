//! What a provider's answer and a request's new messages say, for reading: the text,
//! the thinking and why the answer ended, from any of the three wire protocols. The
//! page shows these beside the runner's own events; it never judges them (that is
//! `agentbatch audit`), so an unknown shape shows as what could be read of it.

use serde_json::{json, Value};

use super::clip;

/// The readable parts of one answer body.
pub(super) fn answer(body: &Value) -> Value {
    let mut text = Vec::new();
    let mut thinking = Vec::new();
    let mut stop = None;
    if let Some(blocks) = body.get("content").and_then(Value::as_array) {
        // Messages: content blocks.
        for b in blocks {
            match b["type"].as_str() {
                Some("text") => push_str(&mut text, &b["text"]),
                Some("thinking") => push_str(&mut thinking, &b["thinking"]),
                Some("redacted_thinking") => thinking.push("(redacted thinking)".to_string()),
                _ => {}
            }
        }
        stop = body["stop_reason"].as_str();
    } else if let Some(items) = body.get("output").and_then(Value::as_array) {
        // Responses: output items.
        for item in items {
            match item["type"].as_str() {
                Some("message") => {
                    for part in item["content"].as_array().into_iter().flatten() {
                        push_str(&mut text, &part["text"]);
                    }
                }
                Some("reasoning") => {
                    for part in item["summary"].as_array().into_iter().flatten() {
                        push_str(&mut thinking, &part["text"]);
                    }
                    for part in item["content"].as_array().into_iter().flatten() {
                        push_str(&mut thinking, &part["text"]);
                    }
                }
                _ => {}
            }
        }
        stop = body["status"].as_str();
    } else if let Some(choice) = body.pointer("/choices/0") {
        // Chat Completions: the first choice's message.
        let m = &choice["message"];
        push_str(&mut text, &m["content"]);
        push_str(&mut thinking, &m["reasoning_content"]);
        push_str(&mut thinking, &m["reasoning"]);
        stop = choice["finish_reason"].as_str();
    }
    json!({
        "text": clip(&text.join("\n\n")),
        "thinking": thinking.iter().map(|t| clip(t)).collect::<Vec<_>>(),
        "stop": stop.unwrap_or_default(),
    })
}

fn push_str(out: &mut Vec<String>, v: &Value) {
    if let Some(s) = v.as_str().filter(|s| !s.is_empty()) {
        out.push(s.to_string());
    }
}

/// A request's new messages as role and text; tool results are left out (the page
/// shows each under its call id from the runner's own `tool_result` events).
pub(super) fn messages(new_messages: &Value) -> Value {
    let mut out = Vec::new();
    for m in new_messages.as_array().into_iter().flatten() {
        let role = m["role"]
            .as_str()
            .or_else(|| m["type"].as_str())
            .unwrap_or("message");
        if role == "tool" || role == "function_call_output" {
            continue;
        }
        let mut parts = Vec::new();
        match &m["content"] {
            Value::String(s) => parts.push(s.clone()),
            Value::Array(blocks) => {
                for b in blocks {
                    if let Some(t) = b["text"].as_str() {
                        parts.push(t.to_string());
                    }
                }
            }
            _ => {}
        }
        if !parts.is_empty() {
            out.push(json!({ "role": role, "text": clip(&parts.join("\n")) }));
        }
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_protocol_gives_its_text_thinking_and_stop() {
        let messages = json!({"content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "hello"},
            {"type": "tool_use", "id": "t1", "name": "x", "input": {}}
        ], "stop_reason": "tool_use"});
        assert_eq!(
            answer(&messages),
            json!({"text": "hello", "thinking": ["hmm"], "stop": "tool_use"})
        );
        let responses = json!({"status": "completed", "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}]},
            {"type": "message", "content": [{"type": "output_text", "text": "hi"}]}
        ]});
        assert_eq!(
            answer(&responses),
            json!({"text": "hi", "thinking": ["why"], "stop": "completed"})
        );
        let chat = json!({"choices": [{"finish_reason": "stop",
            "message": {"content": "yo", "reasoning_content": "so"}}]});
        assert_eq!(
            answer(&chat),
            json!({"text": "yo", "thinking": ["so"], "stop": "stop"})
        );
        assert_eq!(
            answer(&json!({"weird": 1})),
            json!({"text": "", "thinking": [], "stop": ""})
        );
    }

    #[test]
    fn new_messages_keep_text_and_leave_tool_results_out() {
        let m = json!([
            {"role": "user", "content": "fix it"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "r"}]},
            {"role": "tool", "content": "r"}
        ]);
        assert_eq!(messages(&m), json!([{"role": "user", "text": "fix it"}]));
    }
}
