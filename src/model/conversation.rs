//! What every wire protocol shares: the native history and its encoded entries, the
//! cache breakpoints a request carries, and the upper bound on the next prompt's size
//! that the budgets rely on. Sending one request is `send.rs`; the protocol's
//! `protocol::Wire` supplies bodies and parsers.

use reqwest::header::HeaderMap;
use reqwest::Client;
use serde_json::value::RawValue;
use serde_json::Value;

use super::endpoint::Endpoint;
use super::opening::{body, cacheable_tools, first_message};
use super::protocol::{wire, Entries, Wire};
use super::{len_of, Params, Protocol, ToolResult, Usage};
use crate::vocab::cache::{cache_reads_count_toward_itpm, rate_counted_input};
use crate::vocab::limits::TokenCount;

/// Tokens the API adds to a request for its tool-use instructions and message framing;
/// added to the first request's estimate so that it stays an upper bound.
pub(super) const FIRST_REQUEST_OVERHEAD: u64 = 1024;
/// Framing tokens allowed per later request on top of the bytes appended.
const TURN_OVERHEAD: u64 = 64;

/// One task's conversation with a provider, in that provider's wire protocol. A
/// clone asks for a summary without touching the history it summarizes.
#[derive(Clone)]
pub struct Conversation {
    pub(super) client: Client,
    pub(super) endpoint: Endpoint,
    /// What the endpoint's protocol does.
    pub(super) wire: &'static dyn Wire,
    pub(super) headers: HeaderMap,
    pub(super) params: Params,
    /// The tool declarations in the protocol's shape.
    pub(super) tools: Vec<Value>,
    /// The native history: messages (Anthropic, Chat) or input items (Responses).
    pub(super) history: Vec<Value>,
    /// The same entries already encoded, up to the first one not encoded yet: each
    /// request copies them instead of serializing the whole history again.
    pub(super) encoded: Vec<Box<RawValue>>,
    /// History entries already written to the transcript in an earlier event.
    pub(super) logged: usize,
    /// Prompt tokens of the last answered request, the base of the next estimate.
    pub(super) last_prompt_tokens: Option<u64>,
    /// Bytes of history appended since the last answered request.
    pub(super) bytes_since: u64,
    /// The body size of the last answered request (its tokens per byte scale the
    /// estimates compaction works with), and the tokens compaction removed since.
    pub(super) last_body_bytes: u64,
    pub(super) compacted_tokens: u64,
    /// The tokens the last answered request read from or wrote to the cache (the
    /// prefix the next one reads, Anthropic), and when it was answered.
    pub(super) cached_prefix: u64,
    pub(super) answered_at: Option<std::time::Instant>,
    /// Every tool-call id of the history (Anthropic and Responses refuse a conversation
    /// that has one twice).
    pub(super) call_ids: std::collections::HashSet<String>,
    /// The newest message of the last request sent, which carried a cache breakpoint:
    /// the next request marks it again, to read what that one wrote.
    pub(super) cached_tail: Option<usize>,
    /// The encoded size of `tools`, and (Anthropic with caching, when that size reaches
    /// the model's minimum) the declarations with a breakpoint on the last one: both
    /// change only with the tools, so no request computes them again.
    tools_bytes: u64,
    marked_tools: Option<Vec<Value>>,
    /// Batch mode: the provider's pool and this task's tag in its custom_ids.
    pub(super) batch: Option<(super::batch::Batcher, String)>,
    /// Answers a killed attempt of this task paid for, by the digest of the body they
    /// answered: a request with the same body takes its answer from here.
    pub(super) replay: Vec<(String, Value)>,
}

/// The cache breakpoints of one request of a protocol whose facts say the runner
/// places them (`marks_cache`; see [`Conversation::cache_marks`]);
/// the tools' breakpoint is `Conversation::marked_tools`.
#[derive(Default)]
struct CacheMarks {
    system: Option<Value>,
    /// Marked copies of history entries, by index.
    messages: Vec<(usize, Value)>,
}

/// The digest of a request body a resume matches answers by (128-bit XXH3 and the
/// length). Computed for every request, so a fast one: a long history's body is
/// megabytes.
pub fn body_hash(body: &[u8]) -> String {
    format!("{:032x}-{}", xxhash_rust::xxh3::xxh3_128(body), body.len())
}

impl Conversation {
    pub fn new(
        client: Client,
        endpoint: Endpoint,
        params: Params,
        prompt: &str,
    ) -> Result<Self, String> {
        let headers = endpoint.headers()?;
        let wire = wire(endpoint.protocol);
        let tools = wire.declarations(&params.tools);
        let (tools_bytes, marked_tools) = cacheable_tools(wire, &params, &tools);
        Ok(Conversation {
            history: vec![first_message(wire, prompt, &params, &tools)],
            wire,
            encoded: Vec::new(),
            client,
            headers,
            params,
            tools,
            endpoint,
            logged: 0,
            last_prompt_tokens: None,
            bytes_since: 0,
            last_body_bytes: 0,
            compacted_tokens: 0,
            cached_prefix: 0,
            answered_at: None,
            call_ids: Default::default(),
            cached_tail: None,
            tools_bytes,
            marked_tools,
            batch: None,
            replay: Vec::new(),
        })
    }

    /// Answers already paid for, by request-body digest (see [`body_hash`]), to reuse
    /// instead of sending the same request again.
    pub fn replay(&mut self, answers: Vec<(String, Value)>) {
        self.replay = answers;
    }

    /// Sends this conversation's requests through `batcher`, under `tag` in their
    /// custom_ids (`[A-Za-z0-9_-]`, unique in the run).
    pub fn use_batches(&mut self, batcher: super::batch::Batcher, tag: String) {
        self.batch = Some((batcher, tag));
    }

    /// The history as it will be sent.
    pub fn history(&self) -> &[Value] {
        &self.history
    }

    pub(super) fn body(&self, max_tokens: u32) -> Vec<u8> {
        let marks = self.cache_marks();
        let marked: Vec<std::borrow::Cow<Value>> = self
            .history
            .iter()
            .enumerate()
            .map(
                |(i, m)| match marks.messages.iter().find(|(j, _)| *j == i) {
                    Some((_, v)) => std::borrow::Cow::Owned(v.clone()),
                    None => std::borrow::Cow::Borrowed(m),
                },
            )
            .collect();
        body(
            self.wire,
            &self.endpoint.max_tokens_field,
            &self.params,
            marks.system.as_ref(),
            self.marked_tools.as_deref().unwrap_or(&self.tools),
            Entries::Values(&marked),
            max_tokens,
        )
    }

    /// Where the next Anthropic request carries cache breakpoints (at most 4, the
    /// API's limit): the last tool declaration, the system prompt, the last block that
    /// can carry one in the newest message (what the next request will read), and the
    /// same place in the message that was newest in the previous request (so this one
    /// reads what that one wrote however many blocks came in between: the API looks back
    /// only about 20 blocks from a breakpoint). A breakpoint whose whole prefix is
    /// shorter in bytes than the model's minimum cacheable length in tokens is left out:
    /// it could write nothing (a token is never shorter than a byte). Markers live only
    /// in the request: the history holds none, so replay is verbatim apart from them.
    fn cache_marks(&self) -> CacheMarks {
        let mut marks = CacheMarks::default();
        if !self.endpoint.protocol.facts().marks_cache || !self.params.cache.is_on() {
            return marks;
        }
        let marker = self.params.cache.marker();
        let min = crate::vocab::cache::min_cacheable_tokens(&self.params.model);
        let mut prefix = self.tools_bytes;
        if let Some(system) = self.params.system.as_deref() {
            prefix = prefix.saturating_add(system.len() as u64);
            if prefix >= min && !system.is_empty() && self.params.cache.marks_prefix() {
                marks.system = Some(marker.clone());
            }
        }
        let last = self.history.len().saturating_sub(1);
        let mut at = Vec::with_capacity(2);
        let lookback = self.params.cache.marks_prefix();
        if let Some(prev) = self.cached_tail.filter(|p| *p < last && lookback) {
            at.push(prev);
        }
        at.push(last);
        let mut upto = 0;
        for i in at {
            while upto <= i {
                let size = match self.encoded.get(upto) {
                    Some(raw) => raw.get().len() as u64,
                    None => self.history.get(upto).map_or(0, len_of),
                };
                prefix = prefix.saturating_add(size);
                upto += 1;
            }
            if prefix < min {
                continue;
            }
            if let Some(m) = self
                .history
                .get(i)
                .and_then(|m| self.wire.mark_message(m, &marker))
            {
                marks.messages.push((i, m));
            }
        }
        marks
    }

    /// The request body from the encoded history, encoding the entries added since
    /// the last request (once each).
    pub(super) fn encoded_body(&mut self, max_tokens: u32) -> Vec<u8> {
        for entry in &self.history[self.encoded.len()..] {
            // Encoding a JSON value cannot fail.
            if let Ok(raw) = serde_json::value::to_raw_value(entry) {
                self.encoded.push(raw);
            }
        }
        if self.encoded.len() != self.history.len() {
            self.encoded.clear();
            return self.body(max_tokens);
        }
        let marks = self.cache_marks();
        let mut marked: Vec<(usize, Box<RawValue>)> = Vec::with_capacity(marks.messages.len());
        for (i, m) in &marks.messages {
            if let Ok(raw) = serde_json::value::to_raw_value(m) {
                marked.push((*i, raw));
            }
        }
        let entries: Vec<&RawValue> = self
            .encoded
            .iter()
            .enumerate()
            .map(|(i, e)| match marked.iter().find(|(j, _)| *j == i) {
                Some((_, m)) => m.as_ref(),
                None => e.as_ref(),
            })
            .collect();
        body(
            self.wire,
            &self.endpoint.max_tokens_field,
            &self.params,
            marks.system.as_ref(),
            self.marked_tools.as_deref().unwrap_or(&self.tools),
            Entries::Encoded(&entries),
            max_tokens,
        )
    }

    /// The upper bound on a first request's prompt tokens, without a conversation (to
    /// decide whether a task can start at all).
    pub fn first_prompt_bound(
        protocol: Protocol,
        max_tokens_field: &str,
        params: &Params,
        prompt: &str,
    ) -> u64 {
        let wire = wire(protocol);
        let tools = wire.declarations(&params.tools);
        let history = [std::borrow::Cow::Owned(first_message(
            wire, prompt, params, &tools,
        ))];
        // Markers add bytes, never tokens; the bound counts them anyway.
        let marker = params.cache.marker();
        let marks = protocol.facts().marks_cache && params.cache.is_on();
        let tools = match marks {
            true => wire.mark_tools(&tools, &marker).unwrap_or(tools),
            false => tools,
        };
        let bytes = body(
            wire,
            max_tokens_field,
            params,
            marks.then_some(&marker),
            &tools,
            Entries::Values(&history),
            u32::MAX,
        )
        .len() as u64;
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

    /// An upper bound on what the provider's input-tokens-per-minute limit counts for
    /// the next request: the prompt bound, less (Anthropic with caching, on a model
    /// whose limit leaves out cache reads) the prefix the last request left in the
    /// cache, unless its entry may have expired since. A cache that drops an entry
    /// early makes the count higher; the gates then owe the difference.
    /// `whole` is [`Conversation::estimate_prompt_tokens`], which the caller has already
    /// worked out for the budgets (on a first request it encodes the whole body).
    pub fn estimate_rate_tokens(&self, whole: u64) -> u64 {
        let cache = &self.params.cache;
        let reads_free = self.endpoint.protocol.facts().itpm_skips_cache_reads
            && cache.is_on()
            && !cache_reads_count_toward_itpm(&self.params.model);
        match self.answered_at {
            Some(at) if reads_free && at.elapsed() < cache.ttl() => {
                whole.saturating_sub(self.cached_prefix)
            }
            _ => whole,
        }
    }

    /// What a provider's token limits counted for an answered request: the input its
    /// protocol and model count (see [`rate_counted_input`]) and every output token.
    pub fn rate_counted(&self, usage: &Usage) -> TokenCount {
        TokenCount {
            input: rate_counted_input(self.endpoint.protocol, &self.params.model, usage),
            output: usage.output_tokens,
        }
    }

    /// A tool-call id of `calls` that the answer or the history already has. Chat
    /// Completions is exempt (`Facts::unique_call_ids`): its adapter renames a repeat
    /// within an answer, and compatible servers that number calls per turn (`call_0`
    /// every time) accept their own ids again in later turns.
    pub(super) fn repeated_call_id(&self, calls: &[super::ToolCall]) -> Option<String> {
        if !self.endpoint.protocol.facts().unique_call_ids {
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        calls
            .iter()
            .find(|c| self.call_ids.contains(&c.id) || !seen.insert(c.id.as_str()))
            .map(|c| c.id.clone())
    }

    /// Adds a note from the harness after the last user input (after any tool results,
    /// where text is allowed). Returns false when the history ends with the model's own
    /// turn (a paused turn is sent back as it is).
    pub fn append_user_text(&mut self, text: &str) -> bool {
        let added = self.wire.append_user_text(&mut self.history, text);
        // The last entry may have changed in place: encode it again.
        self.encoded
            .truncate(self.history.len().saturating_sub(1).min(self.encoded.len()));
        match added {
            Some(bytes) => {
                self.bytes_since = self.bytes_since.saturating_add(bytes);
                true
            }
            None => false,
        }
    }

    /// Declares a new set of tools (an MCP server's list changed).
    pub fn set_tools(&mut self, neutral: Vec<Value>) {
        let tools = self.wire.declarations(&neutral);
        let (bytes, marked) = cacheable_tools(self.wire, &self.params, &tools);
        // The next prompt is larger by the new declarations, at most.
        self.bytes_since = self.bytes_since.saturating_add(bytes);
        (self.tools_bytes, self.marked_tools) = (bytes, marked);
        self.tools = tools;
        self.params.tools = neutral;
    }

    /// From now on the model may not call tools; the tools stay declared, since the
    /// history refers to them.
    pub fn tools_off(&mut self) {
        if self.tools.is_empty() {
            return;
        }
        let none = self.wire.tool_choice_none();
        self.params.extra.insert("tool_choice".into(), none);
    }

    /// Answers every tool call of the last turn, in call order, the way the protocol
    /// wants it (one user message of tool_result blocks, function_call_output items, or
    /// tool messages).
    pub fn push_results(&mut self, results: &[ToolResult]) {
        let items = self.wire.results(results);
        self.bytes_since = self.bytes_since.saturating_add(len_of(&items));
        self.history.extend(items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::Url;
    use serde_json::json;
    use std::time::Duration;

    fn conversation(protocol: Protocol) -> Conversation {
        let endpoint = Endpoint {
            protocol,
            url: Url::parse("http://127.0.0.1:9/v1/messages").unwrap(),
            api_key: None,
            anthropic_version: "2023-06-01".into(),
            anthropic_beta: None,
            max_tokens_field: "max_tokens".into(),
            timeout: Duration::from_secs(1),
            max_response_bytes: 1 << 20,
            stream_idle: None,
        };
        let params = Params {
            model: "m".into(),
            tools: vec![
                json!({"name": "t", "description": "d", "input_schema": {"type": "object"}}),
            ],
            ..Params::default()
        };
        Conversation::new(Client::new(), endpoint, params, "go \"quoted\" é").unwrap()
    }

    #[test]
    fn the_encoded_history_sends_exactly_what_the_values_would() {
        for protocol in Protocol::ALL {
            let mut c = conversation(protocol);
            assert_eq!(c.encoded_body(100), c.body(100), "{protocol}");
            let result = |id: &str| ToolResult {
                id: id.into(),
                content: "line\n\t\"x\"".into(),
                is_error: false,
                images: Vec::new(),
            };
            c.push_results(&[result("a"), result("b")]);
            assert_eq!(c.encoded_body(100), c.body(100), "{protocol}");
            // A note changes the last entry in place (Anthropic) or adds one: the
            // encoded copy follows.
            c.append_user_text("wrap up now");
            assert_eq!(c.encoded_body(100), c.body(100), "{protocol}");
            c.append_user_text("and again");
            assert_eq!(c.encoded_body(100), c.body(100), "{protocol}");
            assert_eq!(c.encoded.len(), c.history.len());
        }
    }
}
