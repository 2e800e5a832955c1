//! The OpenAI Chat Completions protocol (`POST {base}/chat/completions`), as OpenAI and
//! the compatible servers (vLLM, llama.cpp, Ollama, LiteLLM) speak it. The assistant
//! message goes into the history with its `tool_calls`; each result is a `tool` message
//! under the call's id. Compatible servers' quirks are absorbed here: tool calls under
//! `finish_reason: stop`, calls without an id (one is made up and written into the
//! history, so the results can refer to it), and answers without usage.

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::model::protocol::openai::parse_arguments;
use crate::model::{
    openai_usage, ModelStop, OpenAiFields, Params, Parsed, Reported, ToolCall, ToolResult,
    WireError,
};

/// The system prompt, then the history.
struct Messages<'a, M> {
    system: Option<&'a str>,
    history: &'a [M],
}

impl<M: Serialize> Serialize for Messages<'_, M> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.history.len() + 1))?;
        if let Some(system) = self.system {
            seq.serialize_element(&json!({"role": "system", "content": system}))?;
        }
        for m in self.history {
            seq.serialize_element(m)?;
        }
        seq.end()
    }
}

#[derive(Serialize)]
struct Body<'a, M: Serialize> {
    model: &'a str,
    messages: Messages<'a, M>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    /// The output limit under the endpoint's field name.
    #[serde(flatten)]
    limit: Map<String, Value>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// The request body; `max_tokens_field` is `max_tokens` or `max_completion_tokens`.
pub(super) fn body<M: Serialize>(
    params: &Params,
    tools: &[Value],
    history: &[M],
    max_tokens_field: &str,
    max_tokens: u32,
) -> Vec<u8> {
    let mut limit = Map::new();
    limit.insert(max_tokens_field.to_string(), json!(max_tokens));
    let body = Body {
        model: &params.model,
        messages: Messages {
            system: params.system.as_deref(),
            history,
        },
        tools,
        limit,
        extra: &params.extra,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Function tools nest under `function`; `strict` is left out (compatible servers may
/// refuse it, and OpenAI's default is non-strict).
pub(super) fn declarations(neutral: &[Value]) -> Vec<Value> {
    neutral
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
            })
        })
        .collect()
}

/// A user message after the last tool or user message; None when the history ends with
/// the assistant.
pub(super) fn append_user_text(history: &mut Vec<Value>, text: &str) -> Option<u64> {
    let last = history.last()?;
    if !(last["role"] == "tool" || last["role"] == "user") {
        return None;
    }
    let msg = json!({"role": "user", "content": text});
    let bytes = serde_json::to_vec(&msg).map_or(0, |b| b.len() as u64);
    history.push(msg);
    Some(bytes)
}

/// One `tool` message per call. There is no error flag: error results already start
/// with "Error:".
pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            // Tool messages take text only.
            let mut content = r.content.clone();
            if !r.images.is_empty() {
                content.push_str(&format!(
                    "\n[{} image(s) not shown: Chat Completions tool messages take text only]",
                    r.images.len()
                ));
            }
            json!({"role": "tool", "tool_call_id": r.id, "content": content})
        })
        .collect()
}

/// The id each call of an answer goes by, and whether the runner made it up: a call
/// without an id, or with the id of an earlier call of the same answer (their results
/// could not be told apart), is named `call_agentbatch_<turn>_<position>`. The audit
/// names calls by the same rule.
pub fn call_ids<'a>(own: impl Iterator<Item = Option<&'a str>>, turn: u32) -> Vec<(String, bool)> {
    let mut seen = std::collections::HashSet::new();
    own.enumerate()
        .map(|(i, id)| match id {
            Some(id) if !id.is_empty() && seen.insert(id) => (id.to_string(), false),
            _ => (format!("call_agentbatch_{turn}_{i}"), true),
        })
        .collect()
}

/// Reads a chat completion. Whether tools are wanted is decided by the presence of
/// `tool_calls`, not by `finish_reason` (compatible servers often say `stop`).
/// `turn` makes up ids for calls that came without one, or with a repeated one.
pub(super) fn parse(raw: &Value, turn: u32) -> Result<Parsed, WireError> {
    let obj = raw.as_object().ok_or("the body is not a JSON object")?;
    let choice = obj
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or("`choices` is missing or empty")?;
    let message = choice
        .get("message")
        .and_then(Value::as_object)
        .ok_or("`choices[0].message` is missing")?;
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    let mut calls = Vec::new();
    let mut kept_calls = Vec::new();
    let listed: Vec<&Value> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let ids = call_ids(
        listed.iter().map(|tc| tc.get("id").and_then(Value::as_str)),
        turn,
    );
    for (tc, (id, _)) in listed.into_iter().zip(ids) {
        // A call without a function name still gets an answer (an error result the
        // model can correct), rather than failing the whole turn.
        let f = tc.get("function").unwrap_or(&Value::Null);
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        let (input, mut input_error) = parse_arguments(f.get("arguments"));
        if name.is_empty() {
            input_error = Some("the tool call names no function".into());
        }
        let mut kept = tc.clone();
        kept["id"] = json!(id);
        kept["type"] = json!("function");
        kept["function"]["name"] = json!(name);
        if !kept["function"]["arguments"].is_string() {
            // Some servers send an object; the protocol's history wants a string.
            kept["function"]["arguments"] = json!(match &input_error {
                Some(_) => f["arguments"].as_str().unwrap_or("{}").to_string(),
                None => input.to_string(),
            });
        }
        kept_calls.push(kept);
        calls.push(ToolCall {
            id,
            name: name.to_string(),
            input,
            input_error,
        });
    }
    let refusal = message
        .get("refusal")
        .and_then(Value::as_str)
        .map(str::to_string);
    let finish = choice.get("finish_reason").and_then(Value::as_str);
    let stop = match (finish, calls.is_empty()) {
        (Some("length"), _) => ModelStop::MaxTokens,
        (Some("content_filter"), _) => ModelStop::Refusal(Some("content_filter".into())),
        (_, false) => ModelStop::ToolUse,
        (Some("stop"), true) => match refusal {
            Some(r) => ModelStop::Refusal(Some(r)),
            None => ModelStop::EndTurn,
        },
        (Some("tool_calls" | "function_call"), true) => ModelStop::ToolUse,
        (Some(other), true) => ModelStop::Unknown(format!("finish_reason {other}")),
        (None, true) => ModelStop::Unknown("no finish_reason".into()),
    };
    // The history keeps what a request message may carry: content ("" rather than
    // null, which some servers refuse) and the tool calls.
    let mut kept = json!({"role": "assistant", "content": text});
    if !kept_calls.is_empty() {
        kept["tool_calls"] = Value::Array(kept_calls);
    }
    Ok(Parsed {
        items: vec![kept],
        calls,
        text,
        stop,
        usage: parse_usage(obj.get("usage")),
    })
}

/// Usage, or None when a server left it out (or left out its counts).
fn parse_usage(u: Option<&Value>) -> Option<Reported> {
    openai_usage(
        u?,
        &OpenAiFields {
            input: "/prompt_tokens",
            cached: "/prompt_tokens_details/cached_tokens",
            written: None,
            output: "/completion_tokens",
            reasoning: "/completion_tokens_details/reasoning_tokens",
        },
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(message: Value, finish: Value) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": null}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940,
                      "prompt_tokens_details": {"cached_tokens": 512}}
        })
    }

    #[test]
    fn tool_calls_decide_whatever_the_finish_reason() {
        let msg = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            {"type": "function", "function": {"name": "get_time", "arguments": "{\"timezone\": "}}]});
        for finish in [json!("tool_calls"), json!("stop"), Value::Null] {
            let p = parse(&completion(msg.clone(), finish), 3).unwrap();
            assert_eq!(p.stop, ModelStop::ToolUse);
            assert_eq!(p.calls[1].id, "call_agentbatch_3_1");
            assert_eq!(p.items[0]["tool_calls"][1]["id"], "call_agentbatch_3_1");
            assert_eq!(p.items[0]["content"], "");
            assert!(p.calls[1].input_error.is_some());
        }
        let u = parse(&completion(msg, json!("tool_calls")), 1)
            .unwrap()
            .usage
            .unwrap()
            .usage;
        let nameless = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function"}]});
        let p = parse(&completion(nameless, json!("tool_calls")), 1).unwrap();
        assert_eq!(
            p.calls[0].input_error.as_deref(),
            Some("the tool call names no function")
        );
        assert_eq!(p.items[0]["tool_calls"][0]["function"]["arguments"], "{}");
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens),
            (388, 512, 40)
        );
    }

    #[test]
    fn images_are_named_in_text_since_tool_messages_take_none() {
        let r = ToolResult {
            id: "c1".into(),
            content: "look".into(),
            is_error: false,
            images: vec![crate::model::Image {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            }],
        };
        let msg = &results(&[r])[0];
        assert_eq!(msg["role"], "tool");
        assert!(msg["content"]
            .as_str()
            .unwrap()
            .contains("1 image(s) not shown"));
    }

    #[test]
    fn maps_finish_reasons_and_missing_usage() {
        let msg = json!({"role": "assistant", "content": "hi"});
        let stop = |f: Value| parse(&completion(msg.clone(), f), 1).unwrap().stop;
        assert_eq!(stop(json!("stop")), ModelStop::EndTurn);
        assert_eq!(stop(json!("length")), ModelStop::MaxTokens);
        assert!(matches!(
            stop(json!("content_filter")),
            ModelStop::Refusal(_)
        ));
        assert!(matches!(stop(json!("banana")), ModelStop::Unknown(_)));
        assert!(matches!(stop(Value::Null), ModelStop::Unknown(_)));
        let mut bare = completion(msg, json!("stop"));
        bare.as_object_mut().unwrap().remove("usage");
        assert!(parse(&bare, 1).unwrap().usage.is_none());
        assert!(matches!(
            parse(&json!({"choices": []}), 1),
            Err(WireError::Malformed(_))
        ));
    }
}
