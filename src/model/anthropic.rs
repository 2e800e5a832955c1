//! The Anthropic Messages protocol (`POST /v1/messages`). The conversation is kept as
//! the raw JSON messages: assistant content is appended exactly as it came back
//! (thinking and its signature, redacted thinking, server tool blocks, unknown blocks
//! and fields), and each turn's tool results go back in one user message, results first.

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use reqwest::{Client, Url};
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::http::post_once;
use super::{ModelError, ModelStop, SendError, ToolCall, ToolResult, Turn, Usage};
use crate::report::TaskLog;

/// Tokens the API adds to a request for its tool-use instructions and message framing;
/// added to the first request's estimate so that it stays an upper bound.
const FIRST_REQUEST_OVERHEAD: u64 = 1024;
/// Framing tokens allowed per later request on top of the bytes appended.
const TURN_OVERHEAD: u64 = 64;

/// Where and how to reach a Messages endpoint.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The full URL of the messages endpoint.
    pub url: Url,
    /// Sent as `x-api-key`; marked sensitive so it never shows in debug output.
    pub api_key: Option<String>,
    pub version: String,
    /// Per attempt, body included.
    pub timeout: std::time::Duration,
}

impl Endpoint {
    /// `base_url` is the API root (e.g. https://api.anthropic.com); `/v1/messages` is
    /// appended.
    pub fn messages_url(base_url: &str) -> Result<Url, String> {
        let base = base_url.trim_end_matches('/');
        Url::parse(&format!("{base}/v1/messages"))
            .map_err(|e| format!("invalid base_url \"{base_url}\": {e}"))
    }

    fn headers(&self) -> Result<HeaderMap, String> {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let version = HeaderValue::from_str(&self.version)
            .map_err(|_| format!("invalid anthropic_version \"{}\"", self.version))?;
        h.insert(HeaderName::from_static("anthropic-version"), version);
        if let Some(key) = &self.api_key {
            let mut v = HeaderValue::from_str(key).map_err(|_| {
                "the API key contains characters not allowed in a header".to_string()
            })?;
            v.set_sensitive(true);
            h.insert(HeaderName::from_static("x-api-key"), v);
        }
        Ok(h)
    }
}

/// Request fields besides the conversation, fixed for the whole task.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pub model: String,
    pub system: Option<String>,
    /// Tool declarations: `{name, description, input_schema}`.
    pub tools: Vec<Value>,
    /// Optional fields sent only when a job sets them (temperature, top_p, top_k,
    /// thinking).
    pub extra: Map<String, Value>,
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<&'a str>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    messages: &'a [Value],
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

/// One task's conversation over the Messages protocol.
pub struct Conversation {
    client: Client,
    endpoint: Endpoint,
    headers: HeaderMap,
    params: Params,
    messages: Vec<Value>,
    /// Messages already written to the transcript in an earlier request event.
    logged: usize,
    /// Prompt tokens of the last answered request, the base of the next estimate.
    last_prompt_tokens: Option<u64>,
    /// Bytes of messages appended since the last answered request.
    bytes_since: u64,
}

impl Conversation {
    pub fn new(
        client: Client,
        endpoint: Endpoint,
        params: Params,
        prompt: &str,
    ) -> Result<Self, String> {
        let headers = endpoint.headers()?;
        Ok(Conversation {
            client,
            endpoint,
            headers,
            params,
            messages: vec![json!({"role": "user", "content": prompt})],
            logged: 0,
            last_prompt_tokens: None,
            bytes_since: 0,
        })
    }

    /// The history as it will be sent.
    pub fn messages(&self) -> &[Value] {
        &self.messages
    }

    fn body(&self, max_tokens: u32) -> Vec<u8> {
        let body = Body {
            model: &self.params.model,
            max_tokens,
            system: self.params.system.as_deref(),
            tools: &self.params.tools,
            messages: &self.messages,
            extra: &self.params.extra,
        };
        // Serializing JSON values and plain strings cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The upper bound on a first request's prompt tokens, without a conversation (to
    /// decide whether a task can start at all).
    pub fn first_prompt_bound(params: &Params, prompt: &str) -> u64 {
        let messages = [json!({"role": "user", "content": prompt})];
        let body = Body {
            model: &params.model,
            max_tokens: u32::MAX,
            system: params.system.as_deref(),
            tools: &params.tools,
            messages: &messages,
            extra: &params.extra,
        };
        let bytes = serde_json::to_vec(&body).map_or(0, |b| b.len() as u64);
        bytes.saturating_add(FIRST_REQUEST_OVERHEAD)
    }

    /// An upper bound on the prompt tokens of the next request: the previous request's
    /// real count plus one token per byte appended since (no token is shorter than a
    /// byte), or for the first request its whole size in bytes.
    pub fn estimate_prompt_tokens(&self) -> u64 {
        match self.last_prompt_tokens {
            Some(p) => p
                .saturating_add(self.bytes_since)
                .saturating_add(TURN_OVERHEAD),
            None => (self.body(u32::MAX).len() as u64).saturating_add(FIRST_REQUEST_OVERHEAD),
        }
    }

    /// Sends the conversation once and, on success, appends the answer to it. The
    /// request and the response go to the transcript.
    pub async fn send(
        &mut self,
        max_tokens: u32,
        log: &TaskLog,
        turn: u32,
        attempt: u32,
    ) -> Result<Turn, SendError> {
        let body = self.body(max_tokens);
        let mut ev = json!({
            "turn": turn,
            "attempt": attempt,
            "max_tokens": max_tokens,
            "bytes": body.len(),
            "message_count": self.messages.len(),
            "new_messages": &self.messages[self.logged..],
        });
        if self.logged == 0 {
            ev["params"] = json!({
                "url": self.endpoint.url.as_str(),
                "anthropic_version": self.endpoint.version,
                "model": self.params.model,
                "system": self.params.system,
                "tools": self.params.tools,
                "extra": self.params.extra,
            });
        }
        log.emit("request", ev);
        self.logged = self.messages.len();
        let reply = post_once(
            &self.client,
            &self.endpoint.url,
            &self.headers,
            body,
            self.endpoint.timeout,
        )
        .await
        .map_err(SendError::from)?;
        let malformed = |detail: String, request_id: Option<String>| SendError {
            error: ModelError::Malformed { detail, request_id },
            retryable: false,
            server_wait: None,
            maybe_billed: true,
            rate_limited: false,
            rate: reply.rate.clone(),
        };
        let raw: Value = match serde_json::from_slice(&reply.body) {
            Ok(v) => v,
            Err(e) => {
                let text = String::from_utf8_lossy(&reply.body);
                log.emit(
                    "response",
                    json!({"turn": turn, "request_id": reply.request_id, "ms": reply.ms, "raw_body": text.chars().take(4000).collect::<String>()}),
                );
                return Err(malformed(
                    format!("the body is not JSON ({e}), {} bytes", reply.body.len()),
                    reply.request_id,
                ));
            }
        };
        log.emit(
            "response",
            json!({"turn": turn, "request_id": reply.request_id, "ms": reply.ms, "body": raw}),
        );
        let parsed =
            parse_message(&raw).map_err(|detail| malformed(detail, reply.request_id.clone()))?;
        let assistant = json!({"role": "assistant", "content": parsed.content});
        // A replayed turn can count for more tokens than its bytes: thinking shown
        // summarised or omitted is billed in full. Its output count bounds that.
        let bytes = serde_json::to_vec(&assistant).map_or(0, |b| b.len() as u64);
        self.bytes_since = bytes.max(parsed.turn.usage.output_tokens);
        self.last_prompt_tokens = Some(parsed.turn.usage.prompt_tokens());
        self.messages.push(assistant);
        // The new assistant message is in the response event; the next request event
        // lists only what comes after it.
        self.logged = self.messages.len();
        let mut turn = parsed.turn;
        turn.rate = reply.rate;
        Ok(turn)
    }

    /// Adds a note from the harness at the end of the last user message (after any tool
    /// results, where text is allowed). Returns false when the conversation ends with
    /// an assistant turn (a paused turn is sent back as it is).
    pub fn append_user_text(&mut self, text: &str) -> bool {
        let Some(last) = self.messages.last_mut().filter(|m| m["role"] == "user") else {
            return false;
        };
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
        self.bytes_since = self
            .bytes_since
            .saturating_add(after.saturating_sub(before) as u64);
        true
    }

    /// From now on the model may not call tools (`tool_choice: none`); the tools stay
    /// declared, since the history refers to them.
    pub fn tools_off(&mut self) {
        if !self.params.tools.is_empty() {
            self.params
                .extra
                .insert("tool_choice".into(), json!({"type": "none"}));
        }
    }

    /// Answers every tool call of the last turn in one user message, results first and
    /// in call order.
    pub fn push_results(&mut self, results: &[ToolResult]) {
        let content: Vec<Value> = results
            .iter()
            .map(|r| {
                let mut b =
                    json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content});
                if r.is_error {
                    b["is_error"] = json!(true);
                }
                b
            })
            .collect();
        let msg = json!({"role": "user", "content": content});
        let bytes = serde_json::to_vec(&msg).map_or(0, |b| b.len() as u64);
        self.bytes_since = self.bytes_since.saturating_add(bytes);
        self.messages.push(msg);
    }
}

struct Parsed {
    content: Value,
    turn: Turn,
}

/// Reads the neutral view out of a message, refusing anything that is not a complete
/// message (a missing stop_reason or usage is an error, never a guess).
fn parse_message(raw: &Value) -> Result<Parsed, String> {
    let obj = raw.as_object().ok_or("the body is not a JSON object")?;
    match obj.get("type").and_then(Value::as_str) {
        Some("message") | None => {}
        Some(other) => return Err(format!("expected type \"message\", got \"{other}\"")),
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
                calls.push(ToolCall {
                    id: field("id")?,
                    name: field("name")?,
                    input: b.get("input").cloned().unwrap_or_else(|| json!({})),
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
            other => ModelStop::Unknown(other.to_string()),
        },
        Some(Value::Null) | None => return Err("`stop_reason` is missing".into()),
        Some(other) => return Err(format!("`stop_reason` is not a string: {other}")),
    };
    let usage = parse_usage(obj.get("usage").ok_or("`usage` is missing")?)?;
    Ok(Parsed {
        content: content.clone(),
        turn: Turn {
            calls,
            text,
            stop,
            usage,
            rate: Default::default(),
        },
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

fn parse_usage(u: &Value) -> Result<Usage, String> {
    let req = |k: &str| {
        u.get(k)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("`usage.{k}` is missing or not a count"))
    };
    let opt = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    Ok(Usage {
        input_tokens: req("input_tokens")?,
        output_tokens: req("output_tokens")?,
        cache_read_tokens: opt(u.get("cache_read_input_tokens")),
        cache_write_tokens: opt(u.get("cache_creation_input_tokens")),
        cache_write_1h_tokens: opt(u.pointer("/cache_creation/ephemeral_1h_input_tokens")),
    })
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
        assert_eq!(p.turn.calls.len(), 1);
        assert_eq!(p.turn.calls[0].id, "toolu_1");
        assert_eq!(p.turn.text, "Let me look.");
        assert_eq!(p.turn.stop, ModelStop::ToolUse);
        assert_eq!(p.turn.usage.prompt_tokens(), 17);
        assert_eq!(p.turn.usage.cache_write_1h_tokens, 1);
        assert_eq!(p.content, raw["content"]);
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
            let e = parse_message(&v).err().unwrap();
            assert!(e.contains(needle), "{e}");
        }
        let mut v = base.clone();
        v["content"] = json!([{"type": "tool_use", "name": "x", "input": {}}]);
        assert!(parse_message(&v).err().unwrap().contains("id"));
        let mut v = base;
        v["stop_reason"] = json!("banana");
        assert_eq!(
            parse_message(&v).unwrap().turn.stop,
            ModelStop::Unknown("banana".into())
        );
    }

    #[test]
    fn refusal_details_are_kept() {
        let d = json!({"type": "refusal", "category": "cyber", "explanation": "no"});
        assert_eq!(refusal_detail(Some(&d)).as_deref(), Some("cyber: no"));
    }
}
