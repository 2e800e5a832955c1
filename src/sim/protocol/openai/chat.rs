//! The simulator's OpenAI Chat Completions side: checking a request as OpenAI does
//! (every tool call answered by a tool message, tool messages only after calls), and
//! rendering a played script turn as a chat completion, including the quirks of
//! compatible servers a script asks for (no call ids, no usage, any finish_reason).
//! Thinking blocks are dropped: Chat Completions has no reasoning items.

use serde_json::{json, Value};

use crate::sim::protocol::{History, Violation};
use crate::sim::respond::{play, stable_id, Ask, Played};
use crate::sim::script::ScriptTurn;
use crate::sim::SentTurn;

fn messages(request: &Value) -> &[Value] {
    request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

/// The first tool message after the last assistant message, for `{{tool_result}}`.
fn last_tool_result(msgs: &[Value]) -> String {
    let after = msgs
        .iter()
        .rposition(|m| role(m) == "assistant")
        .map_or(0, |i| i + 1);
    msgs[after..]
        .iter()
        .find(|m| role(m) == "tool")
        .map(|m| text_of(&m["content"]))
        .unwrap_or_default()
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// What a chat request says about the answer.
pub fn ask<'a>(request: &Value, request_bytes: usize, key: &'a str, step: usize) -> Ask<'a> {
    Ask {
        tools_off: request.get("tool_choice").and_then(Value::as_str) == Some("none"),
        max_tokens: request
            .get("max_completion_tokens")
            .or_else(|| request.get("max_tokens"))
            .and_then(Value::as_u64),
        tool_result: last_tool_result(messages(request)),
        request_bytes,
        model: request.get("model").cloned().unwrap_or(Value::Null),
        key,
        step,
        cache: Default::default(),
    }
}

/// An assistant message as the comparison of replays sees it: its text (null and ""
/// alike) and its calls' ids, names and arguments (as JSON when they parse, since a
/// client must send back as a string what a server sent as an object).
fn normalized(m: &Value) -> Value {
    let calls: Vec<Value> = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let args = match c.pointer("/function/arguments") {
                Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(json!(s)),
                Some(other) => other.clone(),
                None => Value::Null,
            };
            json!([c["id"], c.pointer("/function/name"), args])
        })
        .collect();
    json!({"content": text_of(&m["content"]), "calls": calls})
}

/// The request fields of the published CreateChatCompletionRequest schema; anything
/// else (`max_output_tokens`, `input`, `thinking`, `top_k`: other protocols' fields) is
/// refused as OpenAI does.
const FIELDS: [&str; 37] = [
    "audio",
    "frequency_penalty",
    "function_call",
    "functions",
    "logit_bias",
    "logprobs",
    "max_completion_tokens",
    "max_tokens",
    "messages",
    "metadata",
    "modalities",
    "model",
    "moderation",
    "n",
    "parallel_tool_calls",
    "prediction",
    "presence_penalty",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "response_format",
    "safety_identifier",
    "seed",
    "service_tier",
    "stop",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "user",
    "verbosity",
    "web_search_options",
];

/// Checks a Chat Completions request.
pub fn check_request(body: &Value, history: &dyn History) -> Result<(), Violation> {
    let obj = body
        .as_object()
        .ok_or("the request body must be a JSON object")?;
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("Unrecognized request argument supplied: {k}").into());
    }
    if obj.contains_key("parallel_tool_calls") && obj.get("tools").is_none() {
        return Err(
            "Invalid value for 'parallel_tool_calls': only allowed when 'tools' are specified."
                .into(),
        );
    }
    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        _ => return Err("you must provide a model parameter".into()),
    }
    for field in ["max_tokens", "max_completion_tokens"] {
        if let Some(v) = obj.get(field).filter(|v| !v.is_null()) {
            if v.as_u64().is_none_or(|n| n < 1) {
                return Err(format!(
                    "Invalid '{field}': integer below minimum value. Expected a value >= 1, but got {v} instead."
                ).into());
            }
        }
    }
    super::cache::check_openai_fields(body)?;
    super::check_stream_fields(true, body)?;
    check_tools(obj.get("tools"))?;
    let msgs = obj
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("Missing required parameter: 'messages'.")?;
    if msgs.is_empty() {
        return Err("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.".into());
    }
    let mut step = 0;
    for (i, m) in msgs.iter().enumerate() {
        match role(m) {
            "system" | "developer" | "user" => {}
            "assistant" => {
                check_answered(i, m, &msgs[i + 1..])?;
                if let Some(sent) = history.sent(step) {
                    let mut replay = normalized(m);
                    // A call the simulator sent without an id (or with an empty one,
                    // which clients treat alike), or with the id of an earlier call, got
                    // its id from the client.
                    let sent_calls = sent.content["calls"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    for (j, (c, s)) in replay["calls"]
                        .as_array_mut()
                        .into_iter()
                        .flatten()
                        .zip(&sent_calls)
                        .enumerate()
                    {
                        if s[0].is_null()
                            || s[0] == ""
                            || sent_calls[..j].iter().any(|e| e[0] == s[0])
                        {
                            c[0] = s[0].clone();
                        }
                    }
                    if replay["content"] != sent.content["content"]
                        || replay["calls"] != sent.content["calls"]
                    {
                        return Err(format!(
                            "messages[{i}]: the assistant message differs from the one the model sent (its content and tool calls must be returned unchanged)"
                        ).into());
                    }
                }
                step += 1;
            }
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                let prev = msgs[..i].iter().rev().find(|p| role(p) != "tool");
                let called = prev.filter(|p| role(p) == "assistant").is_some_and(|p| {
                    p["tool_calls"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["id"] == id)
                });
                if !called {
                    return Err(format!(
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[{i}].tool_call_id {id})."
                    ).into());
                }
            }
            other => {
                return Err(format!(
                    "Invalid value: '{other}'. Supported values are: 'system', 'assistant', 'user', 'tool', 'function', and 'developer'. (messages[{i}].role)"
                ).into())
            }
        }
    }
    Ok(())
}

/// An assistant message with tool calls must be followed by a tool message for each.
fn check_answered(i: usize, m: &Value, rest: &[Value]) -> Result<(), Violation> {
    let calls: Vec<&str> = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| c["id"].as_str().unwrap_or(""))
        .collect();
    if calls.iter().any(|c| c.is_empty()) {
        return Err(format!("Missing required parameter: 'messages[{i}].tool_calls[].id'.").into());
    }
    let answered: Vec<&str> = rest
        .iter()
        .take_while(|r| role(r) == "tool")
        .filter_map(|r| r["tool_call_id"].as_str())
        .collect();
    let missing: Vec<&str> = calls
        .iter()
        .copied()
        .filter(|c| !answered.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {} (messages[{i}])",
            missing.join(", ")
        ).into());
    }
    Ok(())
}

fn check_tools(tools: Option<&Value>) -> Result<(), Violation> {
    let Some(tools) = tools else { return Ok(()) };
    let list = tools
        .as_array()
        .ok_or("Invalid type for 'tools': expected an array.")?;
    let mut names = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let name = t
            .pointer("/function/name")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!("Missing required parameter: 'tools[{i}].function'. (Chat Completions nests name and parameters under `function`.)")
            })?;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(format!(
                "Invalid 'tools[{i}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
            ).into());
        }
        if t.pointer("/function/parameters/type")
            .and_then(Value::as_str)
            != Some("object")
        {
            return Err(format!(
                "Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"'."
            ).into());
        }
        if names.contains(&name) {
            return Err(format!("Duplicate tool name: '{name}'.").into());
        }
        names.push(name);
    }
    Ok(())
}

/// A chat completion for `turn` played against a request.
pub fn render(
    turn: &ScriptTurn,
    request: &Value,
    request_bytes: usize,
    key: &str,
    step: usize,
    cache: crate::sim::cache::CacheUse,
) -> Value {
    let mut ask = ask(request, request_bytes, key, step);
    ask.cache = cache;
    let played = play(turn, &ask);
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in played.blocks.iter().enumerate() {
        match b {
            Played::Text(t) => text.push_str(t),
            Played::ToolUse {
                id,
                name,
                input,
                arguments,
            } => {
                // In the API's order: id, type, function.
                let mut call = serde_json::Map::new();
                if !turn.omit_call_ids {
                    let id = id
                        .clone()
                        .unwrap_or_else(|| stable_id("call_sim_", &ask, j));
                    call.insert("id".into(), json!(id));
                }
                call.insert("type".into(), json!("function"));
                call.insert(
                    "function".into(),
                    json!({"name": name, "arguments": arguments.clone().unwrap_or_else(|| input.to_string())}),
                );
                calls.push(Value::Object(call));
            }
            Played::Raw(v) => calls.push(v.clone()),
            Played::Thinking(_) | Played::RedactedThinking(_) => {}
        }
    }
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { json!(text) },
        "refusal": null,
        "annotations": [],
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let finish = match turn.finish_reason.as_deref() {
        Some("null") => Value::Null,
        Some(f) => json!(f),
        None => json!(match played.stop_reason.as_str() {
            "end_turn" | "stop_sequence" => "stop",
            "tool_use" => "tool_calls",
            "max_tokens" => "length",
            "refusal" => "content_filter",
            other => other,
        }),
    };
    let c = played.counts;
    let mut resp = json!({
        "id": stable_id("chatcmpl-sim-", &ask, usize::MAX),
        "object": "chat.completion",
        "created": chrono::Utc::now().timestamp(),
        "model": ask.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
        "system_fingerprint": "fp_sim",
    });
    if !turn.omit_usage {
        resp["usage"] = json!({
            "prompt_tokens": c.prompt,
            "completion_tokens": c.output,
            "total_tokens": c.prompt + c.output,
            "prompt_tokens_details": {"cached_tokens": c.cache_read},
            "completion_tokens_details": {"reasoning_tokens": c.reasoning},
        });
    }
    resp
}

/// What a client must send back of a completion, normalized for comparison.
pub fn replayable(sent: &Value) -> Option<SentTurn> {
    let choice = sent.get("choices")?.as_array()?.first()?;
    let message = choice.get("message")?;
    let content = normalized(message);
    Some(SentTurn {
        content,
        stop_reason: choice["finish_reason"].as_str().unwrap_or("").to_string(),
        context: Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sim::protocol::TestHistory as Map;

    fn req(messages: Value) -> Value {
        json!({"model": "m", "messages": messages})
    }

    #[test]
    fn tool_calls_need_tool_messages() {
        let h = Map::default();
        let asst = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}}]});
        let user = json!({"role": "user", "content": "hi"});
        let ta = json!({"role": "tool", "tool_call_id": "a", "content": "1"});
        let tb = json!({"role": "tool", "tool_call_id": "b", "content": "2"});
        assert_eq!(check_request(&req(json!([user, asst, tb, ta])), &h), Ok(()));
        let e = check_request(&req(json!([user, asst, ta, user])), &h).unwrap_err();
        assert!(e.0.contains("did not have response messages: b"), "{e}");
        let e = check_request(&req(json!([user, ta])), &h).unwrap_err();
        assert!(e.0.contains("role 'tool'"), "{e}");
        let next = req(json!([user, asst, ta, tb]));
        let served = crate::sim::protocol::served(crate::model::Protocol::OpenaiChat);
        assert_eq!(served.steps_in(served.history(&next)), 1);
    }

    #[test]
    fn replays_compare_content_and_calls_but_not_made_up_ids() {
        let mut h = Map::default();
        let sent = json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "t", "arguments": "{}"}}]}, "finish_reason": "stop"}]});
        h.0.insert(0, replayable(&sent).unwrap());
        let user = json!({"role": "user", "content": "hi"});
        let back = json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "t", "arguments": "{}"}}]});
        let tool = json!({"role": "tool", "tool_call_id": "call_x", "content": "1"});
        assert_eq!(check_request(&req(json!([user, back, tool])), &h), Ok(()));
        // An empty id is no id: the client gives the call its own.
        let mut h_empty = Map::default();
        let mut sent_empty = sent.clone();
        sent_empty["choices"][0]["message"]["tool_calls"][0]["id"] = json!("");
        h_empty.0.insert(0, replayable(&sent_empty).unwrap());
        assert_eq!(
            check_request(&req(json!([user, back, tool])), &h_empty),
            Ok(())
        );
        let mut edited = back.clone();
        edited["tool_calls"][0]["function"]["arguments"] = json!("{\"a\":1}");
        assert!(check_request(&req(json!([user, edited, tool])), &h).is_err());
        // Arguments a server sent as an object come back as a string.
        let sent = json!({"choices": [{"message": {"role": "assistant", "content": "x", "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "t", "arguments": {"a": 1}}}]}, "finish_reason": "tool_calls"}]});
        h.0.insert(0, replayable(&sent).unwrap());
        let back = json!({"role": "assistant", "content": "x", "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "t", "arguments": "{\"a\":1}"}}]});
        let tool = json!({"role": "tool", "tool_call_id": "c9", "content": "1"});
        assert_eq!(
            check_request(&req(json!([user, back.clone(), tool.clone()])), &h),
            Ok(())
        );
        let mut renamed = back;
        renamed["tool_calls"][0]["id"] = json!("c10");
        let tool = json!({"role": "tool", "tool_call_id": "c10", "content": "1"});
        assert!(
            check_request(&req(json!([user, renamed, tool])), &h).is_err(),
            "ids the server sent must come back"
        );
    }
}
