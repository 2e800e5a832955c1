//! The Anthropic Messages API as the simulator serves it: `check.rs` (the request
//! checks), `cache.rs` (its prompt-caching breakpoints), `context_edits.rs` (context editing), `render.rs` (the answer and the error body), `stream.rs` (the answer's
//! events), `chaos.rs` (the chaos model's odd stops), `batch.rs` (Message Batches), and
//! here the rest of [`Served`].

mod batch;
pub(in crate::sim) mod cache;
mod chaos;
pub(in crate::sim) mod check;
mod context_edits;
pub(in crate::sim) mod render;
mod stream;

use std::time::Duration;

use chrono::{SecondsFormat, Utc};

use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use serde_json::{json, Map, Value};

use super::contradict;
use super::{retry_after_secs, Compacted, Edited, Headers, History, Served, Violation};
use crate::model::Protocol;
use crate::sim::batch::{big_post, SimRouter};
use crate::sim::cache::{CacheUse, PromptCache};
use crate::sim::rng::Rng;
use crate::sim::script::{Fault, MidStream, ScriptTurn, ToolUseScript};
use crate::sim::sse::{Splitter, Sse};
use crate::sim::{Refusal, SentTurn};
use crate::vocab::cache::cache_reads_count_toward_itpm;

/// The Messages API.
pub(in crate::sim) struct Messages;

impl Served for Messages {
    fn protocol(&self) -> Protocol {
        Protocol::Anthropic
    }

    fn path(&self) -> &'static str {
        "v1/messages"
    }

    fn request_id_header(&self) -> &'static str {
        "request-id"
    }

    fn check_key(&self, headers: &HeaderMap) -> Result<String, Refusal> {
        let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
        if header("x-api-key").is_empty() && header("authorization").is_empty() {
            return Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "x-api-key header is required",
            ));
        }
        let version = header("anthropic-version").to_string();
        if version.is_empty() {
            return Err(Refusal::bad_request(
                "anthropic-version: header is required",
            ));
        }
        Ok(version)
    }

    fn check_request(
        &self,
        request: &Value,
        version: &str,
        history: &dyn History,
    ) -> Result<(), Violation> {
        check::check_request(request, version, history)
    }

    fn history<'a>(&self, request: &'a Value) -> &'a [Value] {
        request
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    fn steps_in(&self, entries: &[Value]) -> usize {
        entries.iter().filter(|m| m["role"] == "assistant").count()
    }

    fn max_tokens(&self, request: &Value) -> u64 {
        request
            .get("max_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    fn tools_off(&self, request: &Value) -> bool {
        request.pointer("/tool_choice/type").and_then(Value::as_str) == Some("none")
    }

    fn declared_tool<'a>(&self, tool: &'a Value) -> (Option<&'a Value>, Option<&'a Value>) {
        (tool.get("name"), tool.get("input_schema"))
    }

    fn cache_use(&self, cache: &PromptCache, request: &Value, commit: bool) -> CacheUse {
        cache::cache_use(cache, request, commit)
    }

    fn itpm_skips_cache_reads(&self, model: &str) -> bool {
        !cache_reads_count_toward_itpm(model)
    }

    fn context_edits(
        &self,
        beta: &str,
        request: &Value,
        body_len: usize,
    ) -> Result<Option<Edited>, String> {
        context_edits::context_edits(beta, request, body_len)
    }

    fn compaction(&self, _: &Value, _: usize, _: usize) -> Result<Option<Compacted>, String> {
        Ok(None)
    }

    fn too_long(
        &self,
        prompt: u64,
        window: u64,
        max_tokens: u64,
    ) -> (String, Option<&'static str>) {
        (
            format!(
                "prompt is too long: {prompt} tokens > {} maximum",
                window.saturating_sub(max_tokens)
            ),
            None,
        )
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
        render::render(turn, request, body_len, key, step, cache)
    }

    fn output_tokens(&self, rendered: &Value) -> Option<u64> {
        rendered["usage"]["output_tokens"].as_u64()
    }

    fn replayable(&self, m: &Value, _: &Value) -> Option<SentTurn> {
        m["content"].is_array().then(|| SentTurn {
            content: m["content"].clone(),
            stop_reason: m["stop_reason"].as_str().unwrap_or("").to_string(),
            context: Value::Null,
        })
    }

    fn contradict_usage(&self, usage: &mut Map<String, Value>, max_tokens: u64) {
        contradict::anthropic(usage, max_tokens);
    }

    fn events(&self, rendered: &Value, _: &Value, split: &mut Splitter) -> Vec<Sse> {
        stream::events(rendered, split)
    }

    fn stream_error(&self, fault: &Fault, _: MidStream, sent: &mut Vec<Sse>) {
        let ty = fault.error_type.as_deref().unwrap_or("overloaded_error");
        let message = match (&fault.message, &fault.error_type) {
            (Some(m), _) => m.clone(),
            (None, None) => "Overloaded".to_string(),
            (None, Some(t)) => format!("simulated mid-stream {t}"),
        };
        let event = json!({"type": "error", "error": {"type": ty, "message": message}});
        sent.push(Sse::named("error", &event));
    }

    fn error_body(
        &self,
        _: u16,
        error_type: &str,
        _: Option<&str>,
        message: &str,
        request_id: &str,
    ) -> Value {
        render::error_body(error_type, message, request_id)
    }

    fn untyped_error_status(&self) -> u16 {
        529
    }

    fn retry_after(&self, wait: Duration) -> Headers {
        vec![retry_after_secs(wait)]
    }

    fn window_headers(
        &self,
        window: &str,
        per_minute: u32,
        remaining: u32,
        until_full: Duration,
    ) -> Headers {
        let p = format!("anthropic-ratelimit-{window}");
        vec![
            (format!("{p}-limit"), per_minute.to_string()),
            (format!("{p}-remaining"), remaining.to_string()),
            (format!("{p}-reset"), reset_time(until_full)),
        ]
    }

    fn requests_used_up(&self, reset: Duration) -> Headers {
        vec![
            (
                "anthropic-ratelimit-requests-remaining".to_string(),
                "0".to_string(),
            ),
            (
                "anthropic-ratelimit-requests-reset".to_string(),
                reset_time(reset),
            ),
        ]
    }

    fn chaos_fault_kinds(&self) -> &'static [u8] {
        &[0, 0, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8]
    }

    fn chaos_mid_stream_kinds(&self) -> &'static [MidStream] {
        &[MidStream::Error, MidStream::Cut, MidStream::Stall]
    }

    fn chaos_id_prefix(&self) -> &'static str {
        "toolu_chaos_"
    }

    fn chaos_omits_call_ids(&self, _: &mut Rng) -> bool {
        false
    }

    fn chaos_call_without_id(&self, _: usize, u: &ToolUseScript) -> Value {
        json!({"type": "tool_use", "name": u.name, "input": u.input})
    }

    fn chaos_broken_input(&self, broken: &str) -> Option<Value> {
        // Anthropic sends input as JSON: a non-object one is its broken kind
        Some(json!([broken]))
    }

    fn chaos_server_tools(&self) -> bool {
        true
    }

    fn chaos_odd_stop(&self, r: &mut Rng, t: &mut ScriptTurn) {
        chaos::odd_stop(r, t);
    }

    fn chaos_shaped_body(&self) -> &'static str {
        r#"{"type":"message","role":"assistant","content":[{"type":"text","text":"no usage"}],"stop_reason":"end_turn"}"#
    }

    fn batch_routes(&self, app: SimRouter, prefix: &str) -> SimRouter {
        let at = |path: &str| format!("{prefix}{path}");
        app.route(
            &at("/v1/messages/batches"),
            big_post(post(batch::create)).get(batch::list),
        )
        .route(&at("/v1/messages/batches/{id}"), get(batch::retrieve))
        .route(
            &at("/v1/messages/batches/{id}/results"),
            get(batch::results),
        )
        .route(&at("/v1/messages/batches/{id}/cancel"), post(batch::cancel))
    }
}

/// An Anthropic reset: the RFC 3339 time the window is full again.
fn reset_time(until_full: Duration) -> String {
    let reset = Utc::now() + chrono::Duration::from_std(until_full).unwrap_or_default();
    reset.to_rfc3339_opts(SecondsFormat::Millis, true)
}
