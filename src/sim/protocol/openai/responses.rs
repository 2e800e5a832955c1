//! The simulator's OpenAI Responses side: checking a request the way the real API does
//! for a stateless client (`store: false`), and rendering a played script turn as a
//! response object. Thinking blocks become reasoning items whose `encrypted_content`
//! (sent only when requested) must come back unchanged, in place.

use serde_json::{json, Value};

use crate::sim::protocol::{History, Violation};
use crate::sim::respond::{play, signature, stable_id, Ask, Played};
use crate::sim::script::ScriptTurn;
use crate::sim::SentTurn;

/// Items the model produced (as opposed to the client's inputs).
fn is_model_item(item: &Value) -> bool {
    match item.get("type").and_then(Value::as_str) {
        Some("reasoning" | "function_call" | "compaction") => true,
        Some("message") | None => item.get("role").and_then(Value::as_str) == Some("assistant"),
        _ => false,
    }
}

fn input_items(request: &Value) -> &[Value] {
    request
        .get("input")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The model turns in the input: maximal runs of model items, as (first index, items).
fn model_runs(items: &[Value]) -> Vec<(usize, &[Value])> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < items.len() {
        if is_model_item(&items[i]) {
            let start = i;
            while i < items.len() && is_model_item(&items[i]) {
                i += 1;
            }
            runs.push((start, &items[start..i]));
        } else {
            i += 1;
        }
    }
    runs
}

/// The model turns among `items`.
pub(super) fn runs_in(items: &[Value]) -> usize {
    model_runs(items).len()
}

/// The text of the latest function_call_output, for `{{tool_result}}`.
fn last_tool_result(items: &[Value]) -> String {
    let Some(out) = items
        .iter()
        .rev()
        .find(|i| i.get("type").and_then(Value::as_str) == Some("function_call_output"))
    else {
        return String::new();
    };
    match &out["output"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// What a Responses request says about the answer.
pub fn ask<'a>(request: &Value, request_bytes: usize, key: &'a str, step: usize) -> Ask<'a> {
    Ask {
        tools_off: request.get("tool_choice").and_then(Value::as_str) == Some("none"),
        max_tokens: request.get("max_output_tokens").and_then(Value::as_u64),
        tool_result: last_tool_result(input_items(request)),
        request_bytes,
        model: request.get("model").cloned().unwrap_or(Value::Null),
        key,
        step,
        cache: Default::default(),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The request fields of the published CreateResponse schema; anything else is refused
/// as the real API does (`max_tokens`, `messages` or `thinking` here are another
/// protocol's fields).
const FIELDS: [&str; 31] = [
    "background",
    "context_management",
    "conversation",
    "include",
    "input",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "metadata",
    "model",
    "moderation",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "stream",
    "stream_options",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
];

/// Checks a Responses request. With `store: false` nothing is kept server-side, so the
/// history must carry everything: no item ids, reasoning items with their encrypted
/// content, every function call answered by an output with its call_id, each model
/// turn returned as it was sent, and the instructions of the first turn resent (they
/// are never carried over).
pub fn check_request(body: &Value, history: &dyn History) -> Result<(), Violation> {
    let obj = body
        .as_object()
        .ok_or("the request body must be a JSON object")?;
    if let Some(k) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("Unknown parameter: '{k}'.").into());
    }
    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {}
        _ => return Err("Missing required parameter: 'model'.".into()),
    }
    if let Some(n) = obj.get("max_output_tokens").filter(|v| !v.is_null()) {
        if n.as_u64().is_none_or(|n| n < 16) {
            return Err(format!(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {n} instead."
            ).into());
        }
    }
    super::cache::check_openai_fields(body)?;
    super::check_stream_fields(false, body)?;
    check_tools(obj.get("tools"))?;
    let input = match obj.get("input") {
        Some(Value::Array(items)) => items.as_slice(),
        Some(Value::String(_)) => return Ok(()),
        _ => return Err("Missing required parameter: 'input'.".into()),
    };
    let stateless = obj.get("store").and_then(Value::as_bool) == Some(false);
    for (i, item) in input.iter().enumerate() {
        if let (true, Some(id)) = (stateless, item.get("id").and_then(Value::as_str)) {
            return Err(format!(
                "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input. (input[{i}])"
            ).into());
        }
        if stateless
            && item.get("type").and_then(Value::as_str) == Some("reasoning")
            && !item.get("encrypted_content").is_some_and(Value::is_string)
        {
            return Err(format!(
                "input[{i}]: a reasoning item without `encrypted_content` cannot be used when `store` is false: request include [\"reasoning.encrypted_content\"] and send the item back as it came"
            ).into());
        }
    }
    check_calls_answered(input)?;
    let runs = model_runs(input);
    if let Some(first) = history.sent(0).filter(|_| !runs.is_empty()) {
        if first.context["instructions"] != *obj.get("instructions").unwrap_or(&Value::Null) {
            return Err("`instructions` differ from the first turn's: they are not carried over between requests and must be sent, unchanged, with every request".into());
        }
    }
    for (step, (start, run)) in runs.into_iter().enumerate() {
        if let Some(sent) = history.sent(step) {
            if sent.content.as_array().map(Vec::as_slice) != Some(run) {
                return Err(format!(
                    "input[{start}..{}]: the model's turn {} differs from the output the model sent (items must be returned unchanged and in order, reasoning items directly before the item that followed them, ids removed)",
                    start + run.len(),
                    step + 1
                ).into());
            }
        }
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
        if t.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        if t.get("function").is_some() {
            return Err(format!(
                "Missing required parameter: 'tools[{i}].name'. (Responses function tools are flat; `function` nesting is the Chat Completions shape.)"
            ).into());
        }
        let name = t.get("name").and_then(Value::as_str).unwrap_or("");
        if !valid_name(name) {
            return Err(format!(
                "Invalid 'tools[{i}].name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
            ).into());
        }
        if t.pointer("/parameters/type").and_then(Value::as_str) != Some("object") {
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

/// Every function_call_output answers an earlier call; every call has an output
/// before the next model turn.
fn check_calls_answered(input: &[Value]) -> Result<(), Violation> {
    let kind = |i: &Value| i.get("type").and_then(Value::as_str).map(str::to_string);
    let call_id = |i: &Value| i.get("call_id").and_then(Value::as_str).map(str::to_string);
    let mut calls: Vec<String> = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut in_model_turn = false;
    for (i, item) in input.iter().enumerate() {
        let model = is_model_item(item);
        if model && !in_model_turn {
            if let Some(id) = open.first() {
                return Err(format!("No tool output found for function call {id}.").into());
            }
        }
        in_model_turn = model;
        match kind(item).as_deref() {
            Some("function_call") => {
                let id = call_id(item)
                    .ok_or_else(|| format!("Missing required parameter: 'input[{i}].call_id'."))?;
                calls.push(id.clone());
                open.push(id);
            }
            Some("function_call_output") => {
                let id = call_id(item).unwrap_or_default();
                if !calls.contains(&id) {
                    return Err(format!(
                        "No tool call found for function call output with call_id {id}."
                    )
                    .into());
                }
                open.retain(|c| *c != id);
            }
            _ => {}
        }
    }
    match open.first() {
        Some(id) => Err(format!("No tool output found for function call {id}.").into()),
        None => Ok(()),
    }
}

/// The `encrypted_content` the simulator gives a reasoning item.
fn encrypted(text: &str) -> String {
    format!("sim-enc-{}", signature(text))
}

/// A Responses API response object for `turn` played against a request.
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
    let with_encrypted = request
        .get("include")
        .and_then(Value::as_array)
        .is_some_and(|inc| inc.iter().any(|v| v == "reasoning.encrypted_content"));
    let reasoning = |j: usize, summary: Value, secret: &str| {
        let mut item =
            json!({"type": "reasoning", "id": stable_id("rs_sim_", &ask, j), "summary": summary});
        if with_encrypted {
            item["encrypted_content"] = json!(encrypted(secret));
        }
        item
    };
    // A refusal is a completed response whose message is a refusal part.
    let refusal = played.stop_reason == "refusal";
    let output: Vec<Value> = played
        .blocks
        .iter()
        .enumerate()
        .map(|(j, b)| match b {
            Played::Thinking(t) => {
                reasoning(j, json!([{"type": "summary_text", "text": t}]), t)
            }
            Played::RedactedThinking(d) => reasoning(j, json!([]), d),
            Played::Text(t) if refusal => json!({
                "type": "message", "id": stable_id("msg_sim_", &ask, j), "status": "completed",
                "role": "assistant", "content": [{"type": "refusal", "refusal": t}],
            }),
            Played::Text(t) => json!({
                "type": "message", "id": stable_id("msg_sim_", &ask, j), "status": "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": [], "logprobs": []}],
            }),
            Played::ToolUse {
                id,
                name,
                input,
                arguments,
            } => json!({
                "type": "function_call", "id": stable_id("fc_sim_", &ask, j),
                "call_id": id.clone().unwrap_or_else(|| stable_id("call_sim_", &ask, j)),
                "name": name,
                "arguments": arguments.clone().unwrap_or_else(|| input.to_string()),
                "status": "completed",
            }),
            Played::Raw(v) => v.clone(),
        })
        .collect();
    let (default_status, default_reason) = match played.stop_reason.as_str() {
        "end_turn" | "tool_use" | "stop_sequence" => ("completed", None),
        "max_tokens" => ("incomplete", Some("max_output_tokens")),
        "refusal" => ("completed", None),
        other => ("incomplete", Some(other)),
    };
    let status = turn.status.as_deref().unwrap_or(default_status);
    let reason = turn.incomplete_reason.as_deref().or(default_reason);
    let c = played.counts;
    let mut resp = json!({
        "id": stable_id("resp_sim_", &ask, usize::MAX),
        "object": "response",
        "created_at": chrono::Utc::now().timestamp(),
        "status": status,
        "model": ask.model,
        "output": if status == "failed" { json!([]) } else { Value::Array(output) },
        "error": null,
        "incomplete_details": null,
        "instructions": request.get("instructions").cloned().unwrap_or(Value::Null),
        "max_output_tokens": request.get("max_output_tokens").cloned().unwrap_or(Value::Null),
        "parallel_tool_calls": request.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
        "tool_choice": request.get("tool_choice").cloned().unwrap_or(json!("auto")),
        "tools": request.get("tools").cloned().unwrap_or(json!([])),
        "store": request.get("store").cloned().unwrap_or(json!(true)),
        "temperature": request.get("temperature").cloned().unwrap_or(json!(1.0)),
        "top_p": request.get("top_p").cloned().unwrap_or(json!(1.0)),
        "truncation": "disabled",
        "metadata": {},
    });
    if status == "incomplete" {
        resp["incomplete_details"] = json!({"reason": reason.unwrap_or("max_output_tokens")});
    }
    if status == "failed" {
        let (code, message) = turn
            .error
            .as_ref()
            .map_or(("server_error".to_string(), None), |e| {
                (e.code.clone(), e.message.clone())
            });
        resp["error"] = json!({
            "code": code,
            "message": message.unwrap_or_else(|| "The simulated model failed to generate a response.".into()),
        });
    }
    if !turn.omit_usage {
        resp["usage"] = json!({
            "input_tokens": c.prompt,
            "input_tokens_details": {"cached_tokens": c.cache_read, "cache_write_tokens": c.cache_write},
            "output_tokens": c.output,
            "output_tokens_details": {"reasoning_tokens": c.reasoning},
            "total_tokens": c.prompt + c.output,
        });
    }
    resp
}

/// What a client must send back of a response: its output items, ids removed (and the
/// request's instructions, which must be sent again).
pub fn replayable(sent: &Value, request: &Value) -> Option<SentTurn> {
    let output = sent.get("output")?.as_array()?;
    let items: Vec<Value> = output
        .iter()
        .map(|i| {
            let mut i = i.clone();
            if let Some(o) = i.as_object_mut() {
                o.remove("id");
            }
            i
        })
        .collect();
    Some(SentTurn {
        content: Value::Array(items),
        stop_reason: sent.get("status")?.as_str()?.to_string(),
        context: json!({"instructions": request.get("instructions").cloned().unwrap_or(Value::Null)}),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sim::protocol::TestHistory as Map;

    fn req(input: Value) -> Value {
        json!({"model": "m", "store": false, "input": input, "max_output_tokens": 100})
    }

    #[test]
    fn every_call_needs_its_output_and_ids_must_go() {
        let h = Map::default();
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"});
        let out = json!({"type": "function_call_output", "call_id": "c1", "output": "x"});
        let user = json!({"role": "user", "content": "hi"});
        assert_eq!(check_request(&req(json!([user, call, out])), &h), Ok(()));
        let e = check_request(&req(json!([user, call])), &h).unwrap_err();
        assert!(
            e.0.contains("No tool output found for function call c1"),
            "{e}"
        );
        let stray = json!({"type": "function_call_output", "call_id": "zz", "output": "x"});
        assert!(check_request(&req(json!([user, stray])), &h)
            .unwrap_err()
            .0
            .contains("No tool call found"));
        let mut with_id = call.clone();
        with_id["id"] = json!("fc_1");
        assert!(check_request(&req(json!([user, with_id, out])), &h)
            .unwrap_err()
            .0
            .contains("not persisted"));
        let bare = json!({"type": "reasoning", "summary": []});
        assert!(check_request(&req(json!([user, bare, call, out])), &h)
            .unwrap_err()
            .0
            .contains("encrypted_content"));
        assert_eq!(
            runs_in(input_items(&req(json!([user, call, out, call, out])))),
            2
        );
    }

    #[test]
    fn replayed_turns_must_match() {
        let mut h = Map::default();
        let reasoning =
            json!({"type": "reasoning", "summary": [], "encrypted_content": "sim-enc-1"});
        let call =
            json!({"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"});
        let out = json!({"type": "function_call_output", "call_id": "c1", "output": "x"});
        let user = json!({"role": "user", "content": "hi"});
        h.0.insert(
            0,
            SentTurn {
                content: json!([reasoning, call]),
                stop_reason: "completed".into(),
                context: Value::Null,
            },
        );
        assert_eq!(
            check_request(&req(json!([user, reasoning, call, out])), &h),
            Ok(())
        );
        let e = check_request(&req(json!([user, call, out])), &h).unwrap_err();
        assert!(e.0.contains("differs"), "{e}");
        let mut forged = reasoning.clone();
        forged["encrypted_content"] = json!("sim-enc-2");
        assert!(check_request(&req(json!([user, forged, call, out])), &h).is_err());
    }
}
