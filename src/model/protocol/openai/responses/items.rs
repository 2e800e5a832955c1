//! The OpenAI Responses protocol (`POST {base}/responses`), used statelessly: `store:
//! false`, the whole history sent every turn, with each reasoning item's
//! `encrypted_content` requested and replayed in place. Output items go into the
//! history as they came, minus their `id` (an unstored response's item ids cannot be
//! looked up, and sending them is an error); a tool result is a `function_call_output`
//! item linked by `call_id`.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::model::protocol::openai::parse_arguments;
use crate::model::{
    openai_usage, ModelStop, OpenAiFields, Params, Parsed, Reported, ToolCall, ToolResult,
    WireError,
};

#[derive(Serialize)]
struct Body<'a, M> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a str>,
    input: &'a [M],
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    max_output_tokens: u32,
    store: bool,
    include: [&'static str; 1],
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// The request body.
pub(super) fn body<M: serde::Serialize>(
    params: &Params,
    tools: &[Value],
    history: &[M],
    max_tokens: u32,
) -> Vec<u8> {
    let body = Body {
        model: &params.model,
        instructions: params.system.as_deref(),
        input: history,
        tools,
        max_output_tokens: max_tokens,
        store: false,
        include: ["reasoning.encrypted_content"],
        extra: &params.extra,
    };
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Function tools are flat (`name` at the top). `strict: false`, since strict mode
/// demands schemas that every property be required.
pub(super) fn declarations(neutral: &[Value]) -> Vec<Value> {
    neutral
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t["name"],
                "description": t["description"],
                "parameters": t["input_schema"],
                "strict": false,
            })
        })
        .collect()
}

/// A user message after the last tool output or user message; None when the history
/// ends with the model's output.
pub(super) fn append_user_text(history: &mut Vec<Value>, text: &str) -> Option<u64> {
    let last = history.last()?;
    let open = last["type"] == "function_call_output" || last["role"] == "user";
    if !open {
        return None;
    }
    let item = json!({"type": "message", "role": "user", "content": text});
    let bytes = serde_json::to_vec(&item).map_or(0, |b| b.len() as u64);
    history.push(item);
    Some(bytes)
}

/// One `function_call_output` per call. The protocol has no error flag: error results
/// already start with "Error:".
pub(super) fn results(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(|r| {
            let output = if r.images.is_empty() {
                json!(r.content)
            } else {
                let mut parts = vec![json!({"type": "input_text", "text": r.content})];
                parts.extend(r.images.iter().map(|i| {
                    json!({"type": "input_image", "image_url": format!("data:{};base64,{}", i.media_type, i.data), "detail": "auto"})
                }));
                Value::Array(parts)
            };
            json!({"type": "function_call_output", "call_id": r.id, "output": output})
        })
        .collect()
}

/// Reads a response object. `failed` is an error (retryable for server and rate-limit
/// failures); `incomplete` maps its reason; there is no finish reason: a turn wants
/// tools when it has `function_call` items.
pub(super) fn parse(raw: &Value) -> Result<Parsed, WireError> {
    let obj = raw.as_object().ok_or("the body is not a JSON object")?;
    match obj.get("object").and_then(Value::as_str) {
        Some("response") | None => {}
        Some(other) => return Err(format!("expected object \"response\", got \"{other}\"").into()),
    }
    let status = obj
        .get("status")
        .and_then(Value::as_str)
        .ok_or("`status` is missing")?;
    if status == "failed" {
        let err = obj.get("error").unwrap_or(&Value::Null);
        let code = err["code"].as_str().unwrap_or("unknown").to_string();
        return Err(WireError::Failed {
            usage: obj
                .get("usage")
                .filter(|u| !u.is_null())
                .and_then(|u| parse_usage(u).ok()),
            retryable: matches!(code.as_str(), "server_error" | "rate_limit_exceeded"),
            message: err["message"]
                .as_str()
                .unwrap_or("(no message)")
                .to_string(),
            code,
        });
    }
    let output = obj
        .get("output")
        .and_then(Value::as_array)
        .ok_or("`output` is missing or not a list")?;
    let mut calls = Vec::new();
    let mut text = String::new();
    let mut refusal: Option<String> = None;
    let mut items = Vec::with_capacity(output.len());
    for (i, item) in output.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("output[{i}] has no `type`"))?;
        match kind {
            "message" => {
                for part in item["content"].as_array().into_iter().flatten() {
                    match part["type"].as_str() {
                        Some("output_text") => {
                            text.push_str(part["text"].as_str().unwrap_or_default())
                        }
                        Some("refusal") => {
                            refusal = Some(part["refusal"].as_str().unwrap_or("").to_string())
                        }
                        _ => {}
                    }
                }
            }
            "function_call" => {
                let field = |f: &str| {
                    item.get(f)
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| format!("output[{i}] (function_call) has no string `{f}`"))
                };
                let (input, mut input_error) = parse_arguments(item.get("arguments"));
                // Without a name the call still gets an (error) answer under its id.
                let name = field("name").unwrap_or_default();
                if name.is_empty() {
                    input_error = Some("the tool call names no function".into());
                }
                calls.push(ToolCall {
                    id: field("call_id")?,
                    name,
                    input,
                    input_error,
                });
            }
            _ => {}
        }
        let mut kept = item.clone();
        if let Some(o) = kept.as_object_mut() {
            o.remove("id");
        }
        items.push(kept);
    }
    let stop = match status {
        "completed" if !calls.is_empty() => ModelStop::ToolUse,
        "completed" => match refusal {
            Some(r) => ModelStop::Refusal(Some(r).filter(|r| !r.is_empty())),
            None => ModelStop::EndTurn,
        },
        "incomplete" => match obj
            .get("incomplete_details")
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
        {
            Some("max_output_tokens") => ModelStop::MaxTokens,
            Some("content_filter") => ModelStop::Refusal(Some("content_filter".into())),
            Some(other) => ModelStop::Unknown(format!("incomplete ({other})")),
            None => ModelStop::Unknown("incomplete (no reason given)".into()),
        },
        other => ModelStop::Unknown(format!("status {other}")),
    };
    let usage = match obj.get("usage") {
        None | Some(Value::Null) => None,
        Some(u) => Some(parse_usage(u)?),
    };
    Ok(Parsed {
        items,
        calls,
        text,
        stop,
        usage,
    })
}

fn parse_usage(u: &Value) -> Result<Reported, WireError> {
    Ok(openai_usage(
        u,
        &OpenAiFields {
            input: "/input_tokens",
            cached: "/input_tokens_details/cached_tokens",
            written: Some("/input_tokens_details/cache_write_tokens"),
            output: "/output_tokens",
            reasoning: "/output_tokens_details/reasoning_tokens",
        },
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: &str, output: Value) -> Value {
        json!({
            "id": "resp_1", "object": "response", "status": status, "output": output,
            "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 0},
                      "output_tokens": 300, "output_tokens_details": {"reasoning_tokens": 180}, "total_tokens": 1500}
        })
    }

    #[test]
    fn reads_calls_reasoning_and_usage_and_strips_ids() {
        let raw = response(
            "completed",
            json!([
                {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc"},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file", "arguments": "{\"path\":\"a\"}", "status": "completed"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "read_file", "arguments": "{\"path\":"}
            ]),
        );
        let p = parse(&raw).unwrap();
        assert_eq!(p.stop, ModelStop::ToolUse);
        assert_eq!(p.calls.len(), 2);
        assert_eq!(p.calls[0].input, json!({"path": "a"}));
        assert!(p.calls[1]
            .input_error
            .as_deref()
            .unwrap()
            .contains("not valid JSON"));
        assert!(p.items.iter().all(|i| i.get("id").is_none()));
        assert_eq!(p.items[0]["encrypted_content"], "enc");
        let u = p.usage.unwrap().usage;
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.prompt_tokens()),
            (200, 1000, 1200)
        );
        assert_eq!((u.output_tokens, u.reasoning_tokens), (300, 180));
    }

    #[test]
    fn images_go_back_as_input_images() {
        let r = ToolResult {
            id: "c1".into(),
            content: "[image image/png]".into(),
            is_error: false,
            images: vec![crate::model::Image {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            }],
        };
        let out = &results(&[r])[0]["output"];
        assert_eq!(out[0]["type"], "input_text");
        assert_eq!(out[1]["image_url"], "data:image/png;base64,AAAA");
    }

    #[test]
    fn maps_every_status() {
        let text = json!([{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]);
        assert_eq!(
            parse(&response("completed", text.clone())).unwrap().stop,
            ModelStop::EndTurn
        );
        let mut inc = response("incomplete", text.clone());
        inc["incomplete_details"] = json!({"reason": "max_output_tokens"});
        assert_eq!(parse(&inc).unwrap().stop, ModelStop::MaxTokens);
        inc["incomplete_details"] = json!({"reason": "content_filter"});
        assert!(matches!(parse(&inc).unwrap().stop, ModelStop::Refusal(_)));
        inc["incomplete_details"] = json!({"reason": "max_messages"});
        assert!(
            matches!(parse(&inc).unwrap().stop, ModelStop::Unknown(s) if s.contains("max_messages"))
        );
        let refused = json!([{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]);
        assert_eq!(
            parse(&response("completed", refused)).unwrap().stop,
            ModelStop::Refusal(Some("no".into()))
        );
        assert!(matches!(
            parse(&response("in_progress", text)).unwrap().stop,
            ModelStop::Unknown(_)
        ));
        let mut failed = response("failed", json!([]));
        failed["error"] = json!({"code": "server_error", "message": "boom"});
        assert!(matches!(
            parse(&failed),
            Err(WireError::Failed {
                retryable: true,
                ..
            })
        ));
        failed["error"] = json!({"code": "invalid_prompt", "message": "no"});
        assert!(matches!(
            parse(&failed),
            Err(WireError::Failed {
                retryable: false,
                ..
            })
        ));
        let mut no_usage = response("completed", json!([]));
        no_usage.as_object_mut().unwrap().remove("usage");
        assert!(parse(&no_usage).unwrap().usage.is_none());
        assert!(matches!(
            parse(&json!({"status": "completed"})),
            Err(WireError::Malformed(_))
        ));
    }
}
