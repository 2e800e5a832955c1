//! Rendering a script turn into a Messages API response, and the error bodies of faults.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{json, Value};

use super::script::{Block, ScriptTurn};

fn digest(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    "agentbatch-sim".hash(&mut h);
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The signature the simulator gives a thinking block; a changed text or signature no
/// longer matches, which is how the real API catches edited thinking.
pub fn signature(thinking: &str) -> String {
    format!(
        "sim-sig-{:016x}{:016x}",
        digest(&[thinking]),
        digest(&[thinking, "2"])
    )
}

/// The text of the first tool result in the request's last message, for `{{tool_result}}`.
fn last_tool_result(request: &Value) -> String {
    let last = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last());
    let Some(blocks) = last.and_then(|m| m["content"].as_array()) else {
        return String::new();
    };
    for b in blocks {
        if b.get("type").and_then(Value::as_str) == Some("tool_result") {
            return match &b["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => String::new(),
            };
        }
    }
    String::new()
}

/// A response message for `turn`, given the request (for `{{tool_result}}`, max_tokens
/// and the input token count) and a conversation key and step (for stable ids).
pub fn render(
    turn: &ScriptTurn,
    request: &Value,
    request_bytes: usize,
    key: &str,
    step: usize,
) -> Value {
    let step_s = step.to_string();
    let mut content = Vec::with_capacity(turn.content.len());
    let mut has_tool_use = false;
    // With tool_choice none the model cannot call tools: scripted calls are dropped.
    let tools_off = request.pointer("/tool_choice/type").and_then(Value::as_str) == Some("none");
    for (j, b) in turn.content.iter().enumerate() {
        if tools_off && matches!(b, Block::ToolUse(_)) {
            continue;
        }
        content.push(match b {
            Block::Text(t) => {
                let text = if t.contains("{{tool_result}}") {
                    t.replace("{{tool_result}}", &last_tool_result(request))
                } else {
                    t.clone()
                };
                json!({"type": "text", "text": text})
            }
            Block::Thinking(t) => {
                json!({"type": "thinking", "thinking": t, "signature": signature(t)})
            }
            Block::RedactedThinking(d) => json!({"type": "redacted_thinking", "data": d}),
            Block::ToolUse(u) => {
                has_tool_use = true;
                let id = u.id.clone().unwrap_or_else(|| {
                    format!("toolu_sim_{:016x}", digest(&[key, &step_s, &j.to_string()]))
                });
                json!({"type": "tool_use", "id": id, "name": u.name, "input": u.input})
            }
            Block::Raw(v) => v.clone(),
        });
    }
    let content = Value::Array(content);
    let scripted = turn
        .stop_reason
        .clone()
        .filter(|s| !(tools_off && s == "tool_use"));
    let mut stop_reason = scripted.unwrap_or_else(|| {
        if has_tool_use {
            "tool_use".into()
        } else {
            "end_turn".into()
        }
    });
    let usage = turn.usage.clone().unwrap_or_default();
    let prompt = usage
        .input_tokens
        .unwrap_or_else(|| (request_bytes as u64).div_ceil(4));
    let cache_read = usage.cache_read_input_tokens.unwrap_or(0).min(prompt);
    let cache_write = usage
        .cache_creation_input_tokens
        .unwrap_or(0)
        .min(prompt - cache_read);
    let estimated_output = (serde_json::to_vec(&content).map_or(0, |b| b.len()) as u64)
        .div_ceil(4)
        .max(1);
    let mut output = usage.output_tokens.unwrap_or(estimated_output);
    let max_tokens = request
        .get("max_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(u64::MAX);
    if output > max_tokens {
        output = max_tokens;
        stop_reason = "max_tokens".into();
    }
    let mut msg = json!({
        "id": format!("msg_sim_{:016x}", digest(&[key, &step_s])),
        "type": "message",
        "role": "assistant",
        "model": request.get("model").cloned().unwrap_or(Value::Null),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": turn.stop_sequence,
        "usage": {
            "input_tokens": prompt - cache_read - cache_write,
            "cache_creation_input_tokens": cache_write,
            "cache_read_input_tokens": cache_read,
            "cache_creation": {"ephemeral_5m_input_tokens": cache_write, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output,
            "service_tier": "standard"
        }
    });
    if let Some(d) = &turn.stop_details {
        msg["stop_details"] = d.clone();
    }
    msg
}

/// The error type the real API uses for an HTTP status.
pub fn default_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// An error body in the provider's shape.
pub fn error_body(error_type: &str, message: &str, request_id: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::script::{ToolUseScript, UsageScript};

    fn turn(content: Vec<Block>) -> ScriptTurn {
        ScriptTurn {
            content,
            ..Default::default()
        }
    }

    #[test]
    fn renders_stable_ids_and_default_stop() {
        let t = turn(vec![
            Block::Text("hi".into()),
            Block::ToolUse(ToolUseScript {
                name: "get_time".into(),
                input: json!({}),
                id: None,
            }),
        ]);
        let req = json!({"model": "m", "max_tokens": 100, "messages": []});
        let a = render(&t, &req, 400, "k", 0);
        let b = render(&t, &req, 400, "k", 0);
        assert_eq!(a, b);
        assert_eq!(a["stop_reason"], "tool_use");
        assert_eq!(a["usage"]["input_tokens"], 100);
        assert_ne!(
            render(&t, &req, 400, "k", 1)["content"][1]["id"],
            a["content"][1]["id"]
        );
    }

    #[test]
    fn output_is_capped_at_max_tokens() {
        let mut t = turn(vec![Block::Text("long".into())]);
        t.usage = Some(UsageScript {
            output_tokens: Some(5000),
            ..Default::default()
        });
        let req = json!({"model": "m", "max_tokens": 1000, "messages": []});
        let r = render(&t, &req, 40, "k", 0);
        assert_eq!(r["stop_reason"], "max_tokens");
        assert_eq!(r["usage"]["output_tokens"], 1000);
    }

    #[test]
    fn substitutes_the_tool_result() {
        let t = turn(vec![Block::Text("It is {{tool_result}}.".into())]);
        let req = json!({"model": "m", "max_tokens": 100, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "noon"}]}]});
        assert_eq!(
            render(&t, &req, 100, "k", 1)["content"][0]["text"],
            "It is noon."
        );
    }
}
