//! The Anthropic Messages protocol (`POST /v1/messages`). The history is the raw JSON
//! messages: assistant content is appended exactly as it came back (thinking and its
//! signature, redacted thinking, server tool blocks, unknown blocks and fields), and
//! each turn's tool results go back in one user message, results first.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::model::{ModelStop, Params, Parsed, ToolCall, ToolResult, Usage, WireError};
use crate::vocab::usage::{Figures, Reported};

/// The system prompt: a string, or one text block when it carries a cache marker.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum System<'a> {
    Text(&'a str),
    Marked([Value; 1]),
}

#[derive(Serialize)]
struct Body<'a, M> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<System<'a>>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    messages: &'a [M],
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// The request body; `system` is the system prompt as it is sent (see [`system`]).
pub(super) fn body<M: serde::Serialize>(
    params: &Params,
    system: Option<System<'_>>,
    tools: &[Value],
    history: &[M],
    max_tokens: u32,
) -> Vec<u8> {
    let body = Body {
        model: &params.model,
        max_tokens,
        system,
        tools,
        messages: history,
        extra: &params.extra,
    };
    // Serializing JSON values and plain strings cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The system prompt as sent: with a cache marker when `marker` is given.
pub(super) fn system<'a>(text: Option<&'a str>, marker: Option<&Value>) -> Option<System<'a>> {
    let text = text?;
    Some(match marker {
        Some(m) if !text.is_empty() => {
            System::Marked([json!({"type": "text", "text": text, "cache_control": m})])
        }
        _ => System::Text(text),
    })
}

/// Whether a content block may carry `cache_control`: the API refuses it on thinking
/// blocks and on empty text.
fn can_carry(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("thinking" | "redacted_thinking") | None => false,
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty()),
        Some(_) => true,
    }
}

/// A copy of `message` whose last block that can carry one has the cache marker, or
/// None when no block can. Everything else stays byte for byte what the history holds.
pub(super) fn marked(message: &Value, marker: &Value) -> Option<Value> {
    let mut m = message.clone();
    match m.get_mut("content")? {
        Value::Array(blocks) => {
            let block = blocks.iter_mut().rev().find(|b| can_carry(b))?;
            block
                .as_object_mut()?
                .insert("cache_control".into(), marker.clone());
        }
        // A string is one text block; the first message is sent in block form when
        // caching is on, so a marked copy never changes its shape.
        _ => return None,
    }
    Some(m)
}

/// A copy of the tool declarations with the marker on the last one (None when there
/// are none).
pub(super) fn marked_tools(tools: &[Value], marker: &Value) -> Option<Vec<Value>> {
    let mut out = tools.to_vec();
    out.last_mut()?
        .as_object_mut()?
        .insert("cache_control".into(), marker.clone());
    Some(out)
}

/// Adds text at the end of the last user message; the bytes added, or None when the
/// history ends with an assistant turn.
pub(super) fn append_user_text(history: &mut [Value], text: &str) -> Option<u64> {
    let last = history.last_mut().filter(|m| m["role"] == "user")?;
    let block = json!({"type": "text", "text": text});
    let before = serde_json::to_vec(&last["content"]).map_or(0, |b| b.len());
    match &mut last["content"] {
        Value::Array(blocks) => blocks.push(block),
        other => {
            let first = json!({"type": "text", "text": other.take()});
            *other = Value::Array(vec![first, block]);
        }
    }
    let after = serde_json::to_vec(&last["content"]).map_or(0, |b| b.len());
    Some(after.saturating_sub(before) as u64)
}

/// Every result of a turn in one user message, results first and in call order.
pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    let content: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut b = json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content});
            if !r.images.is_empty() {
                let mut parts = vec![json!({"type": "text", "text": r.content})];
                parts.extend(r.images.iter().map(|i| {
                    json!({"type": "image", "source": {"type": "base64", "media_type": i.media_type, "data": i.data}})
                }));
                b["content"] = Value::Array(parts);
            }
            if r.is_error {
                b["is_error"] = json!(true);
            }
            b
        })
        .collect();
    vec![json!({"role": "user", "content": content})]
}

/// Reads an answer; the assistant message goes into the history as it came.
pub(super) fn parse(raw: &Value) -> Result<Parsed, WireError> {
    let p = parse_message(raw)?;
    Ok(Parsed {
        items: vec![json!({"role": "assistant", "content": p.content})],
        calls: p.calls,
        text: p.text,
        stop: p.stop,
        usage: Some(p.usage),
    })
}

/// What `context_management.applied_edits` says was cleared (None when nothing was).
pub(super) fn applied_edits(raw: &Value) -> Option<crate::vocab::context::ContextEdits> {
    let edits = raw
        .pointer("/context_management/applied_edits")?
        .as_array()?;
    let mut sum = crate::vocab::context::ContextEdits::default();
    for e in edits {
        let n = |k: &str| e.get(k).and_then(Value::as_u64).unwrap_or(0);
        sum.tool_uses = sum.tool_uses.saturating_add(n("cleared_tool_uses"));
        sum.input_tokens = sum.input_tokens.saturating_add(n("cleared_input_tokens"));
    }
    (sum != Default::default()).then_some(sum)
}

struct Message {
    content: Value,
    calls: Vec<ToolCall>,
    text: String,
    stop: ModelStop,
    usage: Reported,
}

/// Reads the neutral view out of a message, refusing anything that is not a complete
/// message (a missing stop_reason or usage is an error, never a guess).
fn parse_message(raw: &Value) -> Result<Message, WireError> {
    let obj = raw.as_object().ok_or("the body is not a JSON object")?;
    match obj.get("type").and_then(Value::as_str) {
        Some("message") | None => {}
        Some(other) => return Err(format!("expected type \"message\", got \"{other}\"").into()),
    }
    let content = obj.get("content").ok_or("`content` is missing")?;
    let blocks = content.as_array().ok_or("`content` is not an array")?;
    let mut calls = Vec::new();
    let mut text = String::new();
    for (i, b) in blocks.iter().enumerate() {
        let kind = b
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("content[{i}] has no `type`"))?;
        match kind {
            "text" => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or_default()),
            "tool_use" => {
                let field = |f: &str| {
                    b.get(f)
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .ok_or_else(|| format!("content[{i}] (tool_use) has no string `{f}`"))
                };
                let id = field("id")?;
                if id.is_empty() {
                    // No result could be matched to it, and the API refuses it back.
                    return Err(format!("content[{i}] (tool_use) has an empty `id`").into());
                }
                calls.push(ToolCall {
                    id,
                    name: field("name")?,
                    input: b.get("input").cloned().unwrap_or_else(|| json!({})),
                    input_error: None,
                });
            }
            _ => {}
        }
    }
    let stop = match obj.get("stop_reason") {
        Some(Value::String(s)) => match s.as_str() {
            "end_turn" => ModelStop::EndTurn,
            "tool_use" => ModelStop::ToolUse,
            "pause_turn" => ModelStop::PauseTurn,
            "max_tokens" => ModelStop::MaxTokens,
            "stop_sequence" => ModelStop::StopSequence(
                obj.get("stop_sequence")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            "refusal" => ModelStop::Refusal(refusal_detail(obj.get("stop_details"))),
            "model_context_window_exceeded" => ModelStop::ContextWindow,
            other => ModelStop::Unknown(format!("stop_reason {other}")),
        },
        Some(Value::Null) | None => return Err("`stop_reason` is missing".into()),
        Some(other) => return Err(format!("`stop_reason` is not a string: {other}").into()),
    };
    let usage = parse_usage(obj.get("usage").ok_or("`usage` is missing")?)?;
    Ok(Message {
        content: content.clone(),
        calls,
        text,
        stop,
        usage,
    })
}

fn refusal_detail(details: Option<&Value>) -> Option<String> {
    let d = details?;
    let parts: Vec<&str> = ["category", "explanation"]
        .iter()
        .filter_map(|k| d.get(*k).and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| parts.join(": "))
}

/// Usage, each figure that is not a whole count, and a 1-hour part above the writes it
/// is a part of (or a 5-minute part that does not add up with it), clamped and noted.
fn parse_usage(u: &Value) -> Result<Reported, WireError> {
    let mut f = Figures::new(u);
    let req = |f: &mut Figures, k: &str| {
        f.count(&format!("/{k}"))
            .ok_or_else(|| format!("`usage.{k}` is missing or not a count"))
    };
    let input_tokens = req(&mut f, "input_tokens")?;
    let output_tokens = req(&mut f, "output_tokens")?;
    let cache_read_tokens = f.count("/cache_read_input_tokens").unwrap_or(0);
    let written = f.count("/cache_creation_input_tokens").unwrap_or(0);
    let one_hour = "/cache_creation/ephemeral_1h_input_tokens";
    let reported_1h = f.count(one_hour).unwrap_or(0);
    let written_1h = f.at_most(
        one_hour,
        reported_1h,
        written,
        "above cache_creation_input_tokens, the writes it is a part of",
    );
    let five_minutes = f.count("/cache_creation/ephemeral_5m_input_tokens");
    f.agrees(
        "/cache_creation/ephemeral_5m_input_tokens",
        five_minutes,
        written - written_1h,
        "with the 1-hour part, not cache_creation_input_tokens",
    );
    Ok(f.done(Usage {
        input_tokens,
        output_tokens,
        cache_read_tokens,
        cache_write_tokens: written,
        cache_write_1h_tokens: written_1h,
        reasoning_tokens: 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_message() {
        let raw = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"timezone": "UTC"}},
                {"type": "future_block", "x": 1}
            ],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3,
                      "cache_creation_input_tokens": 4, "cache_creation": {"ephemeral_1h_input_tokens": 1}}
        });
        let p = parse_message(&raw).unwrap();
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].id, "toolu_1");
        assert_eq!(p.text, "Let me look.");
        assert_eq!(p.stop, ModelStop::ToolUse);
        assert_eq!(p.usage.usage.prompt_tokens(), 17);
        assert_eq!(p.usage.usage.cache_write_1h_tokens, 1);
        assert!(p.usage.clamps.is_empty());
        assert_eq!(p.content, raw["content"]);
    }

    #[test]
    fn a_cache_breakdown_past_its_total_is_clamped_to_it_and_noted() {
        let usage = json!({"input_tokens": 5, "output_tokens": 5, "cache_creation_input_tokens": 10,
            "cache_creation": {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 900000000}});
        let r = parse_usage(&usage).unwrap();
        assert_eq!(
            (r.usage.cache_write_tokens, r.usage.cache_write_1h_tokens),
            (10, 10)
        );
        let noted: Vec<(&str, u64)> = r
            .clamps
            .iter()
            .map(|c| (c.field.as_str(), c.used))
            .collect();
        assert_eq!(
            noted,
            [
                ("usage.cache_creation.ephemeral_1h_input_tokens", 10),
                ("usage.cache_creation.ephemeral_5m_input_tokens", 0)
            ]
        );
        assert_eq!(r.clamps[0].reported, json!(900000000));
    }

    #[test]
    fn refuses_incomplete_messages() {
        let base = json!({"content": [], "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}});
        assert!(parse_message(&base).is_ok());
        for (k, needle) in [
            ("stop_reason", "stop_reason"),
            ("usage", "usage"),
            ("content", "content"),
        ] {
            let mut v = base.clone();
            v.as_object_mut().unwrap().remove(k);
            let e = parse_message(&v).err().unwrap().to_string();
            assert!(e.contains(needle), "{e}");
        }
        let mut v = base.clone();
        v["content"] = json!([{"type": "tool_use", "name": "x", "input": {}}]);
        assert!(parse_message(&v).err().unwrap().to_string().contains("id"));
        let mut v = base;
        v["stop_reason"] = json!("banana");
        assert_eq!(
            parse_message(&v).unwrap().stop,
            ModelStop::Unknown("stop_reason banana".into())
        );
    }

    #[test]
    fn refusal_details_are_kept() {
        let d = json!({"type": "refusal", "category": "cyber", "explanation": "no"});
        assert_eq!(refusal_detail(Some(&d)).as_deref(), Some("cyber: no"));
    }
}
