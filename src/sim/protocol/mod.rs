//! The simulator's side of each wire protocol, behind one trait. What every protocol
//! shares (scripts, the play of a turn, the clock, the prompt cache's store, the rate
//! limits' buckets, the batch store, the chaos model's choices) calls [`Served`] through
//! [`served`] and never matches on the protocol; what differs (the route, the checks,
//! what a request says, the answer's shape whole and streamed, errors, usage, rate-limit
//! headers, the chaos model's protocol-specific misbehaviour) is here, one folder per
//! protocol family: `anthropic/` (Messages) and `openai/` (Responses and Chat
//! Completions).
//!
//! Adding a protocol: a variant of `vocab::protocol::Protocol`, a folder here with a
//! type that implements [`Served`] (the trait has no default methods, so a part left out
//! does not compile), and its arm in [`served`] (an exhaustive match, so a variant
//! without one does not compile). The unit test below plays a request through every
//! protocol's parts, which catches a part that compiles but answers for another
//! protocol.

pub(super) mod anthropic;
pub(super) mod contradict;
pub(super) mod openai;

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Map, Value};

use super::batch::SimRouter;
use super::cache::{CacheUse, PromptCache};
use super::rng::Rng;
use super::script::{Block, Fault, MidStream, ScriptTurn, ToolUseScript};
use super::sse::{Splitter, Sse};
use super::{Refusal, SentTurn};
use crate::model::Protocol;

pub(super) use openai::Compacted;

/// What makes the simulator refuse a request with 400 `invalid_request_error`, worded
/// as the real API words it: a request a real provider would refuse never passes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Violation(pub String);

impl From<String> for Violation {
    fn from(message: String) -> Violation {
        Violation(message)
    }
}

impl From<&str> for Violation {
    fn from(message: &str) -> Violation {
        Violation(message.to_string())
    }
}

/// Looks up what the simulator sent at a step of this conversation.
pub trait History {
    fn sent(&self, step: usize) -> Option<std::sync::Arc<SentTurn>>;
}

/// Earlier answers held in a map, for the replay checks' unit tests (in each protocol's
/// checks).
#[cfg(test)]
#[derive(Default)]
pub(super) struct TestHistory(pub std::collections::HashMap<usize, SentTurn>);

#[cfg(test)]
impl History for TestHistory {
    fn sent(&self, step: usize) -> Option<std::sync::Arc<SentTurn>> {
        self.0.get(&step).cloned().map(std::sync::Arc::new)
    }
}

/// Header names and values, in the order they are sent.
pub(super) type Headers = Vec<(String, String)>;

/// The served side of one wire protocol: everything the simulator does differently for
/// it. No method has a default, so a new protocol states each part.
pub(super) trait Served: Sync {
    /// The protocol this is the served side of.
    fn protocol(&self) -> Protocol;

    // The route and the client's credentials.

    /// The path of the protocol's endpoint under an API root (`v1/messages`).
    fn path(&self) -> &'static str;
    /// The header an answer's request id goes in.
    fn request_id_header(&self) -> &'static str;
    /// The client's credentials (and Anthropic's version header, which is returned):
    /// what every request needs, a body or not.
    fn check_key(&self, headers: &HeaderMap) -> Result<String, Refusal>;

    // What the request says.

    /// Checks a request body as the real API does; `version` is what `check_key` returned.
    fn check_request(
        &self,
        request: &Value,
        version: &str,
        history: &dyn History,
    ) -> Result<(), Violation>;
    /// The request's history: messages, or input items.
    fn history<'a>(&self, request: &'a Value) -> &'a [Value];
    /// Script steps among `entries` of a history, counted the way the protocol counts
    /// model turns.
    fn steps_in(&self, entries: &[Value]) -> usize;
    /// The output limit the request asks for (0: none).
    fn max_tokens(&self, request: &Value) -> u64;
    /// Whether the request forbids tool calls (`tool_choice` none).
    fn tools_off(&self, request: &Value) -> bool;
    /// The name and JSON Schema of one entry of the request's `tools`.
    fn declared_tool<'a>(&self, tool: &'a Value) -> (Option<&'a Value>, Option<&'a Value>);
    /// What the prompt cache reads and writes for the request (`commit`: and keeps it).
    fn cache_use(&self, cache: &PromptCache, request: &Value, commit: bool) -> CacheUse;
    /// Whether the input-token rate limit leaves out what the cache reads (on `model`).
    fn itpm_skips_cache_reads(&self, model: &str) -> bool;
    /// The prompt as the provider edits it before anything counts it (Anthropic's
    /// context editing); Err: a request the API refuses.
    fn context_edits(
        &self,
        beta: &str,
        request: &Value,
        body_len: usize,
    ) -> Result<Option<Edited>, String>;
    /// The context the provider compacts server-side (Responses); Err: a request the API
    /// refuses.
    fn compaction(
        &self,
        request: &Value,
        body_len: usize,
        step: usize,
    ) -> Result<Option<Compacted>, String>;
    /// Why a prompt of `prompt` tokens asking for `max_tokens` passes a `window`, as the
    /// API says it, with its error code.
    fn too_long(&self, prompt: u64, window: u64, max_tokens: u64)
        -> (String, Option<&'static str>);

    // The answer.

    /// The answer body for `turn` played against the request.
    fn render(
        &self,
        turn: &ScriptTurn,
        request: &Value,
        body_len: usize,
        key: &str,
        step: usize,
        cache: CacheUse,
    ) -> Value;
    /// The output tokens an answer reports (None when it reports no usage).
    fn output_tokens(&self, rendered: &Value) -> Option<u64>;
    /// What a client must send back of an answer, for the replay checks.
    fn replayable(&self, sent: &Value, request: &Value) -> Option<SentTurn>;
    /// Rewrites an answer's usage figures at odds with each other (see `sim::contradict`).
    fn contradict_usage(&self, usage: &mut Map<String, Value>, max_tokens: u64);
    /// The events of a rendered answer in the protocol's streaming shape, ending with its
    /// final event.
    fn events(&self, rendered: &Value, request: &Value, split: &mut Splitter) -> Vec<Sse>;
    /// The error event(s) a mid-stream `error` or `failed` fault sends after `sent`.
    fn stream_error(&self, fault: &Fault, kind: MidStream, sent: &mut Vec<Sse>);

    // Errors and headers.

    /// An error body in the protocol's shape.
    fn error_body(
        &self,
        status: u16,
        error_type: &str,
        code: Option<&str>,
        message: &str,
        request_id: &str,
    ) -> Value;
    /// The status of a mid-stream error without a type, played to a client that does
    /// not stream.
    fn untyped_error_status(&self) -> u16;
    /// How long to wait, as the vendor says it on a 429.
    fn retry_after(&self, wait: Duration) -> Headers;
    /// The headers of a rate-limit window (`requests`, `input-tokens`, `output-tokens`).
    fn window_headers(
        &self,
        window: &str,
        per_minute: u32,
        remaining: u32,
        until_full: Duration,
    ) -> Headers;
    /// The headers of a used-up requests window that is full again after `reset`.
    fn requests_used_up(&self, reset: Duration) -> Headers;

    // The chaos model's protocol-specific misbehaviour (each draws from `r` exactly as
    // the chaos model always has, so a seed plays the same).

    /// The kinds of failed attempt the chaos model picks from, weighted by repetition.
    fn chaos_fault_kinds(&self) -> &'static [u8];
    /// The mid-stream faults the protocol has.
    fn chaos_mid_stream_kinds(&self) -> &'static [MidStream];
    /// The prefix of a made-up call id in the protocol's style.
    fn chaos_id_prefix(&self) -> &'static str;
    /// Whether a turn with a missing call id leaves out every id (the protocol's own
    /// way of missing one).
    fn chaos_omits_call_ids(&self, r: &mut Rng) -> bool;
    /// The raw block of call `u`, at `i` in the content, without its id.
    fn chaos_call_without_id(&self, i: usize, u: &ToolUseScript) -> Value;
    /// The input a call with `broken` arguments carries, where the protocol sends the
    /// input as JSON (None: the arguments string is all).
    fn chaos_broken_input(&self, broken: &str) -> Option<Value>;
    /// Whether the protocol has server tool blocks beside client calls.
    fn chaos_server_tools(&self) -> bool;
    /// A stop the protocol documents (or an unknown one), sometimes at odds with the
    /// content.
    fn chaos_odd_stop(&self, r: &mut Rng, t: &mut ScriptTurn);
    /// A 200 body in the protocol's shape with a part missing.
    fn chaos_shaped_body(&self) -> &'static str;

    // The provider's batch API (its store and processing are shared, in `sim::batch`;
    // what differs per batch API is a `batch::BatchApi` its create handler gives each
    // batch).

    /// Adds the routes of the protocol's batch API under `prefix` (a batch API that
    /// serves several protocols is added by one of them).
    fn batch_routes(&self, app: SimRouter, prefix: &str) -> SimRouter;
}

/// What the simulator cleared for a request with Anthropic's context editing.
#[derive(Debug)]
pub struct Edited {
    pub request: Value,
    pub body_len: usize,
    /// The `context_management` of the answer: `{applied_edits: [...]}`.
    pub applied: Value,
}

/// `retry-after` in whole seconds (at least 1), as every vendor sends it on a 429.
pub(super) fn retry_after_secs(wait: Duration) -> (String, String) {
    let secs = wait.as_secs_f64().ceil().max(1.0).to_string();
    ("retry-after".to_string(), secs)
}

/// The turn without its calls (a text in their place when nothing is left).
pub(in crate::sim) fn drop_calls(t: &mut ScriptTurn) {
    t.content.retain(|b| !matches!(b, Block::ToolUse(_)));
    if t.content.is_empty() {
        t.content.push(Block::Text("Hmm.".into()));
    }
}

/// The one registry of served protocols.
pub(super) fn served(protocol: Protocol) -> &'static dyn Served {
    match protocol {
        Protocol::Anthropic => &anthropic::Messages,
        Protocol::OpenaiResponses => &openai::Responses,
        Protocol::OpenaiChat => &openai::Chat,
    }
}

#[cfg(test)]
mod tests;
