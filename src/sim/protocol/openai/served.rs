//! The served side of Responses and Chat Completions: each part of
//! [`Served`](crate::sim::protocol::Served), mostly handed to the protocol's own module.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{json, Map, Value};

use super::{batch, cache, chaos, chat, compaction, files, responses, stream};
use super::{Compacted, CHAOS_FAULT_KINDS, CHAOS_ID_PREFIX};
use crate::model::Protocol;
use crate::sim::batch::{big_post, SimRouter};
use crate::sim::cache::{CacheUse, PromptCache};
use crate::sim::protocol::contradict::{self, OpenaiUsage};
use crate::sim::protocol::{Edited, Headers, History, Served, Violation};
use crate::sim::rng::Rng;
use crate::sim::script::{Fault, MidStream, ScriptTurn, ToolUseScript};
use crate::sim::sse::{with, Splitter, Sse};
use crate::sim::{Refusal, SentTurn};

/// The OpenAI Responses API.
pub(in crate::sim) struct Responses;

/// The OpenAI Chat Completions API.
pub(in crate::sim) struct Chat;

/// The bearer key both OpenAI APIs require (they have no version header).
fn check_key(headers: &HeaderMap) -> Result<String, Refusal> {
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !header("authorization").starts_with("Bearer ") {
        let mut r = Refusal::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        );
        r.code = Some("invalid_api_key".into());
        return Err(r);
    }
    Ok(String::new())
}

/// How OpenAI refuses a prompt past the context window.
fn too_long(prompt: u64, window: u64, max_tokens: u64) -> (String, Option<&'static str>) {
    (
        format!("Your input exceeds the context window of this model ({window} tokens, {prompt} in the prompt and {max_tokens} asked for). Please adjust your input and try again."),
        Some("context_length_exceeded"),
    )
}

/// The raw call `u` at `i` without its id, as Responses writes a function call.
fn call_without_id(i: usize, u: &ToolUseScript) -> Value {
    json!({
        "type": "function_call", "id": format!("fc_chaos_{i}"), "name": u.name,
        "arguments": u.input.to_string(), "status": "completed",
    })
}

impl Served for Responses {
    fn protocol(&self) -> Protocol {
        Protocol::OpenaiResponses
    }

    fn path(&self) -> &'static str {
        "v1/responses"
    }

    fn request_id_header(&self) -> &'static str {
        "x-request-id"
    }

    fn check_key(&self, headers: &HeaderMap) -> Result<String, Refusal> {
        check_key(headers)
    }

    fn check_request(&self, request: &Value, _: &str, h: &dyn History) -> Result<(), Violation> {
        responses::check_request(request, h)
    }

    fn history<'a>(&self, request: &'a Value) -> &'a [Value] {
        request
            .get("input")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    fn steps_in(&self, entries: &[Value]) -> usize {
        responses::runs_in(entries)
    }

    fn max_tokens(&self, request: &Value) -> u64 {
        let field = |f: &str| request.get(f).and_then(Value::as_u64);
        field("max_output_tokens").unwrap_or(0)
    }

    fn tools_off(&self, request: &Value) -> bool {
        super::tools_off(request)
    }

    fn declared_tool<'a>(&self, tool: &'a Value) -> (Option<&'a Value>, Option<&'a Value>) {
        (tool.get("name"), tool.get("parameters"))
    }

    fn cache_use(&self, cache: &PromptCache, request: &Value, commit: bool) -> CacheUse {
        let mut conversation = Vec::new();
        if let Some(i) = request.get("instructions").filter(|v| !v.is_null()) {
            conversation.push(i);
        }
        match request.get("input") {
            Some(Value::Array(input)) => conversation.extend(input),
            Some(other) => conversation.push(other),
            None => {}
        }
        cache::cache_use(cache, "openai-responses", request, conversation, commit)
    }

    fn itpm_skips_cache_reads(&self, _: &str) -> bool {
        false
    }

    fn context_edits(&self, _: &str, _: &Value, _: usize) -> Result<Option<Edited>, String> {
        Ok(None)
    }

    fn compaction(
        &self,
        request: &Value,
        body_len: usize,
        step: usize,
    ) -> Result<Option<Compacted>, String> {
        compaction::apply(request, body_len, step)
    }

    fn too_long(&self, prompt: u64, window: u64, max: u64) -> (String, Option<&'static str>) {
        too_long(prompt, window, max)
    }

    fn render(
        &self,
        turn: &ScriptTurn,
        request: &Value,
        body_len: usize,
        key: &str,
        step: usize,
        cache: CacheUse,
    ) -> Value {
        responses::render(turn, request, body_len, key, step, cache)
    }

    fn output_tokens(&self, rendered: &Value) -> Option<u64> {
        rendered["usage"]["output_tokens"].as_u64()
    }

    fn replayable(&self, sent: &Value, request: &Value) -> Option<SentTurn> {
        responses::replayable(sent, request)
    }

    fn contradict_usage(&self, usage: &mut Map<String, Value>, max_tokens: u64) {
        let names = OpenaiUsage {
            output: "output_tokens",
            reasoning: "output_tokens_details",
            prompt: "input_tokens",
            cached: "input_tokens_details",
        };
        contradict::openai(usage, &names, max_tokens);
    }

    fn events(&self, rendered: &Value, request: &Value, split: &mut Splitter) -> Vec<Sse> {
        stream::responses(rendered, request, split)
    }

    fn stream_error(&self, fault: &Fault, kind: MidStream, sent: &mut Vec<Sse>) {
        let n = sent.len();
        let message = fault.message.as_deref().unwrap_or(stream::SERVER_ERROR);
        if kind != MidStream::Failed {
            let event = json!({
                "type": "error",
                "code": super::stream_error_code(fault),
                "message": message,
                "param": null,
                "sequence_number": n,
            });
            sent.push(Sse::named("error", &event));
            return;
        }
        let last = sent.iter().rev().find_map(|e| {
            let v: Value = serde_json::from_str(&e.data).ok()?;
            v.get("response").cloned()
        });
        let response = last.unwrap_or_else(|| json!({"object": "response"}));
        let error = json!({"code": super::stream_error_code(fault), "message": message});
        let response = with(
            &with(
                &with(&response, "status", json!("failed")),
                "output",
                json!([]),
            ),
            "error",
            error,
        );
        let event = json!({"type": "response.failed", "response": response, "sequence_number": n});
        sent.push(Sse::named("response.failed", &event));
    }

    fn error_body(
        &self,
        status: u16,
        error_type: &str,
        code: Option<&str>,
        message: &str,
        _: &str,
    ) -> Value {
        super::openai_error_body(status, error_type, code, message)
    }

    fn untyped_error_status(&self) -> u16 {
        500
    }

    fn retry_after(&self, wait: Duration) -> Headers {
        super::retry_after(wait)
    }

    fn window_headers(&self, window: &str, per_minute: u32, left: u32, full: Duration) -> Headers {
        super::window_headers(window, per_minute, left, full)
    }

    fn requests_used_up(&self, reset: Duration) -> Headers {
        super::requests_used_up(reset)
    }

    fn chaos_fault_kinds(&self) -> &'static [u8] {
        CHAOS_FAULT_KINDS
    }

    fn chaos_mid_stream_kinds(&self) -> &'static [MidStream] {
        &[
            MidStream::Error,
            MidStream::Failed,
            MidStream::Cut,
            MidStream::Stall,
        ]
    }

    fn chaos_id_prefix(&self) -> &'static str {
        CHAOS_ID_PREFIX
    }

    fn chaos_omits_call_ids(&self, _: &mut Rng) -> bool {
        false
    }

    fn chaos_call_without_id(&self, i: usize, u: &ToolUseScript) -> Value {
        call_without_id(i, u)
    }

    fn chaos_broken_input(&self, _: &str) -> Option<Value> {
        None
    }

    fn chaos_server_tools(&self) -> bool {
        false
    }

    fn chaos_odd_stop(&self, r: &mut Rng, t: &mut ScriptTurn) {
        chaos::responses_odd_stop(r, t);
    }

    fn chaos_shaped_body(&self) -> &'static str {
        r#"{"object":"response","status":"completed","output":"oops"}"#
    }

    fn batch_routes(&self, app: SimRouter, prefix: &str) -> SimRouter {
        // OpenAI's Files and Batch APIs serve Chat Completions too; they are added once.
        let at = |path: &str| format!("{prefix}{path}");
        app.route(&at("/v1/files"), big_post(post(files::upload)))
            .route(&at("/v1/files/{id}"), get(files::retrieve))
            .route(&at("/v1/files/{id}/content"), get(files::content))
            .route(&at("/v1/batches"), post(batch::create).get(batch::list))
            .route(&at("/v1/batches/{id}"), get(batch::retrieve))
            .route(&at("/v1/batches/{id}/cancel"), post(batch::cancel))
    }
}

impl Served for Chat {
    fn protocol(&self) -> Protocol {
        Protocol::OpenaiChat
    }

    fn path(&self) -> &'static str {
        "v1/chat/completions"
    }

    fn request_id_header(&self) -> &'static str {
        "x-request-id"
    }

    fn check_key(&self, headers: &HeaderMap) -> Result<String, Refusal> {
        check_key(headers)
    }

    fn check_request(&self, request: &Value, _: &str, h: &dyn History) -> Result<(), Violation> {
        chat::check_request(request, h)
    }

    fn history<'a>(&self, request: &'a Value) -> &'a [Value] {
        request
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    fn steps_in(&self, entries: &[Value]) -> usize {
        super::assistant_messages(entries)
    }

    fn max_tokens(&self, request: &Value) -> u64 {
        let field = |f: &str| request.get(f).and_then(Value::as_u64);
        field("max_completion_tokens")
            .or_else(|| field("max_tokens"))
            .unwrap_or(0)
    }

    fn tools_off(&self, request: &Value) -> bool {
        super::tools_off(request)
    }

    fn declared_tool<'a>(&self, tool: &'a Value) -> (Option<&'a Value>, Option<&'a Value>) {
        (
            tool.pointer("/function/name"),
            tool.pointer("/function/parameters"),
        )
    }

    fn cache_use(&self, cache: &PromptCache, request: &Value, commit: bool) -> CacheUse {
        let messages = request.get("messages").and_then(Value::as_array);
        cache::cache_use(
            cache,
            "openai-chat",
            request,
            messages.into_iter().flatten(),
            commit,
        )
    }

    fn itpm_skips_cache_reads(&self, _: &str) -> bool {
        false
    }

    fn context_edits(&self, _: &str, _: &Value, _: usize) -> Result<Option<Edited>, String> {
        Ok(None)
    }

    fn compaction(&self, _: &Value, _: usize, _: usize) -> Result<Option<Compacted>, String> {
        Ok(None)
    }

    fn too_long(&self, prompt: u64, window: u64, max: u64) -> (String, Option<&'static str>) {
        too_long(prompt, window, max)
    }

    fn render(
        &self,
        turn: &ScriptTurn,
        request: &Value,
        body_len: usize,
        key: &str,
        step: usize,
        cache: CacheUse,
    ) -> Value {
        chat::render(turn, request, body_len, key, step, cache)
    }

    fn output_tokens(&self, rendered: &Value) -> Option<u64> {
        rendered["usage"]["completion_tokens"].as_u64()
    }

    fn replayable(&self, sent: &Value, _: &Value) -> Option<SentTurn> {
        chat::replayable(sent)
    }

    fn contradict_usage(&self, usage: &mut Map<String, Value>, max_tokens: u64) {
        let names = OpenaiUsage {
            output: "completion_tokens",
            reasoning: "completion_tokens_details",
            prompt: "prompt_tokens",
            cached: "prompt_tokens_details",
        };
        contradict::openai(usage, &names, max_tokens);
    }

    fn events(&self, rendered: &Value, request: &Value, split: &mut Splitter) -> Vec<Sse> {
        stream::chat(rendered, request, split)
    }

    fn stream_error(&self, fault: &Fault, _: MidStream, sent: &mut Vec<Sse>) {
        // As vLLM does: the error chunk, then `[DONE]` all the same.
        let error = json!({"error": {
            "message": fault.message.as_deref().unwrap_or(stream::SERVER_ERROR),
            "type": fault.error_type.as_deref().unwrap_or("server_error"),
            "param": null,
            "code": fault.code.as_deref().unwrap_or("server_error"),
        }});
        sent.push(Sse::data(&error));
        sent.push(Sse::done());
    }

    fn error_body(
        &self,
        status: u16,
        error_type: &str,
        code: Option<&str>,
        message: &str,
        _: &str,
    ) -> Value {
        super::openai_error_body(status, error_type, code, message)
    }

    fn untyped_error_status(&self) -> u16 {
        500
    }

    fn retry_after(&self, wait: Duration) -> Headers {
        super::retry_after(wait)
    }

    fn window_headers(&self, window: &str, per_minute: u32, left: u32, full: Duration) -> Headers {
        super::window_headers(window, per_minute, left, full)
    }

    fn requests_used_up(&self, reset: Duration) -> Headers {
        super::requests_used_up(reset)
    }

    fn chaos_fault_kinds(&self) -> &'static [u8] {
        CHAOS_FAULT_KINDS
    }

    fn chaos_mid_stream_kinds(&self) -> &'static [MidStream] {
        &[MidStream::Error, MidStream::Cut, MidStream::Stall]
    }

    fn chaos_id_prefix(&self) -> &'static str {
        CHAOS_ID_PREFIX
    }

    fn chaos_omits_call_ids(&self, r: &mut Rng) -> bool {
        r.percent(50)
    }

    fn chaos_call_without_id(&self, _: usize, u: &ToolUseScript) -> Value {
        json!({
            "type": "function",
            "function": {"name": u.name, "arguments": u.input.to_string()},
        })
    }

    fn chaos_broken_input(&self, _: &str) -> Option<Value> {
        None
    }

    fn chaos_server_tools(&self) -> bool {
        false
    }

    fn chaos_odd_stop(&self, r: &mut Rng, t: &mut ScriptTurn) {
        chaos::chat_odd_stop(r, t);
    }

    fn chaos_shaped_body(&self) -> &'static str {
        r#"{"object":"chat.completion","choices":[]}"#
    }

    fn batch_routes(&self, app: SimRouter, _: &str) -> SimRouter {
        // Its batches go through OpenAI's Batch API, which Responses adds.
        app
    }
}
