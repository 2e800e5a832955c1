//! Rendering a played turn as a Messages API answer, and Anthropic's error body.

use serde_json::{json, Value};

use crate::sim::cache::CacheUse;
use crate::sim::respond::{anthropic_content, digest, play, Ask};
use crate::sim::script::ScriptTurn;

/// The text of the first tool result in the request's last message, for `{{tool_result}}`.
pub fn last_tool_result(request: &Value) -> String {
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

/// What a Messages request says about the answer.
pub fn ask<'a>(request: &Value, request_bytes: usize, key: &'a str, step: usize) -> Ask<'a> {
    Ask {
        tools_off: request.pointer("/tool_choice/type").and_then(Value::as_str) == Some("none"),
        max_tokens: request.get("max_tokens").and_then(Value::as_u64),
        tool_result: last_tool_result(request),
        request_bytes,
        model: request.get("model").cloned().unwrap_or(Value::Null),
        key,
        step,
        cache: CacheUse::default(),
    }
}

/// A Messages API response for `turn` played against a request.
pub fn render(
    turn: &ScriptTurn,
    request: &Value,
    request_bytes: usize,
    key: &str,
    step: usize,
    cache: CacheUse,
) -> Value {
    let mut ask = ask(request, request_bytes, key, step);
    ask.cache = cache;
    let played = play(turn, &ask);
    let c = played.counts;
    let mut msg = json!({
        "id": format!("msg_sim_{:016x}", digest(&[key, &step.to_string()])),
        "type": "message",
        "role": "assistant",
        "model": ask.model,
        "content": anthropic_content(&played.blocks, &ask),
        "stop_reason": played.stop_reason,
        "stop_sequence": turn.stop_sequence,
    });
    if !turn.omit_usage {
        msg["usage"] = json!({
            "input_tokens": c.prompt - c.cache_read - c.cache_write,
            "cache_creation_input_tokens": c.cache_write,
            "cache_read_input_tokens": c.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": c.cache_write - c.cache_write_1h,
                "ephemeral_1h_input_tokens": c.cache_write_1h
            },
            "output_tokens": c.output,
            "service_tier": "standard"
        });
    }
    if let Some(d) = &turn.stop_details {
        msg["stop_details"] = d.clone();
    }
    msg
}

/// An error body in Anthropic's shape.
pub fn error_body(error_type: &str, message: &str, request_id: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::script::{Block, ToolUseScript, UsageScript};

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
                arguments: None,
            }),
        ]);
        let req = json!({"model": "m", "max_tokens": 100, "messages": []});
        let a = render(&t, &req, 400, "k", 0, CacheUse::default());
        let b = render(&t, &req, 400, "k", 0, CacheUse::default());
        assert_eq!(a, b);
        assert_eq!(a["stop_reason"], "tool_use");
        assert_eq!(a["usage"]["input_tokens"], 100);
        assert_ne!(
            render(&t, &req, 400, "k", 1, CacheUse::default())["content"][1]["id"],
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
        let r = render(&t, &req, 40, "k", 0, CacheUse::default());
        assert_eq!(r["stop_reason"], "max_tokens");
        assert_eq!(r["usage"]["output_tokens"], 1000);
    }

    #[test]
    fn cache_figures_come_from_the_cache_unless_scripted() {
        let mut t = turn(vec![Block::Text("ok".into())]);
        let req = json!({"model": "m", "max_tokens": 100, "messages": []});
        let cache = CacheUse {
            read: 300,
            write_5m: 200,
            write_1h: 100,
        };
        let u = &render(&t, &req, 4000, "k", 0, cache)["usage"];
        assert_eq!(u["cache_read_input_tokens"], 300);
        assert_eq!(u["cache_creation_input_tokens"], 300);
        assert_eq!(u["cache_creation"]["ephemeral_1h_input_tokens"], 100);
        assert_eq!(u["cache_creation"]["ephemeral_5m_input_tokens"], 200);
        assert_eq!(u["input_tokens"], 400);
        t.usage = Some(UsageScript {
            cache_read_input_tokens: Some(7),
            cache_creation_input_tokens: Some(0),
            ..Default::default()
        });
        let u = &render(&t, &req, 4000, "k", 0, cache)["usage"];
        assert_eq!(u["cache_read_input_tokens"], 7);
        assert_eq!(u["cache_creation_input_tokens"], 0);
        assert_eq!(u["cache_creation"]["ephemeral_1h_input_tokens"], 0);
        assert_eq!(u["input_tokens"], 993);
    }

    #[test]
    fn substitutes_the_tool_result() {
        let t = turn(vec![Block::Text("It is {{tool_result}}.".into())]);
        let req = json!({"model": "m", "max_tokens": 100, "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "noon"}]}]});
        assert_eq!(
            render(&t, &req, 100, "k", 1, CacheUse::default())["content"][0]["text"],
            "It is noon."
        );
    }
}
