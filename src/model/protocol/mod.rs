//! The protocol seam: what a wire protocol does, as one trait ([`Wire`]) that each
//! protocol implements once in its own folder (`anthropic/`, `openai/responses/`,
//! `openai/chat/`), and the one registry that picks the implementation ([`wire`]).
//! What needs no behaviour (URLs, key variables, prices, limits, which options apply)
//! is data: `crate::vocab::protocol::Facts`.
//!
//! Adding a protocol: a variant of `vocab::protocol::Protocol` and its `Facts`, a
//! folder here with a `Wire` implementation (its request body, its answer reader, its
//! stream assembler and a variant of [`Assembler`]), an arm in [`wire`] and in
//! [`Assembler::feed`]. The compiler points at each match; the tests below check what
//! it cannot (each wire says it is its own protocol, and reads back a tool call from
//! the answer its request asks for).

pub(crate) mod anthropic;
pub(in crate::model) mod events;
pub(crate) mod openai;

use std::borrow::Cow;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Params, Parsed, ToolResult, WireError};
use crate::vocab::context::{ContextEdits, ContextPolicy};
pub use crate::vocab::protocol::Protocol;
use events::{Broken, Step};

/// What a wire protocol does. Every part is required (no default methods): a protocol
/// that misses one does not compile.
pub trait Wire: Sync {
    /// The protocol this is the wire of.
    fn protocol(&self) -> Protocol;

    // The request.

    /// The tool declarations in the protocol's shape, from `{name, description,
    /// input_schema}`.
    fn declarations(&self, neutral: &[Value]) -> Vec<Value>;
    /// The first user message; `blocks`: in block form (so that a cache marker never
    /// changes its shape).
    fn first_message(&self, prompt: &str, blocks: bool) -> Value;
    /// The request body around a history.
    fn body(&self, parts: &BodyParts<'_>, history: Entries<'_>) -> Vec<u8>;
    /// The request headers that say who asks and in which version of the API.
    fn headers(&self, auth: &Auth<'_>) -> Result<Vec<(HeaderName, HeaderValue)>, String>;
    /// `tool_choice` that forbids tool calls.
    fn tool_choice_none(&self) -> Value;
    /// `context_management` for the provider's own compaction (`context: native`), past
    /// `threshold` prompt tokens; None when the provider has none.
    fn native_context(&self, policy: &ContextPolicy, threshold: Option<u64>) -> Option<Value>;

    // Caching markers (for protocols whose facts say the runner places them).

    /// A copy of a history entry with a cache breakpoint on its last block that can
    /// carry one; None when none can.
    fn mark_message(&self, message: &Value, marker: &Value) -> Option<Value>;
    /// The tool declarations with a breakpoint on the last one; None when there are none.
    fn mark_tools(&self, tools: &[Value], marker: &Value) -> Option<Vec<Value>>;

    // The history.

    /// Adds a note after the last user input; the bytes added, or None when the
    /// history ends with the model's own turn.
    fn append_user_text(&self, history: &mut Vec<Value>, text: &str) -> Option<u64>;
    /// The entries that answer every tool call of the last turn, in call order.
    fn results(&self, results: &[ToolResult]) -> Vec<Value>;
    /// Puts a summary after the first message (in place of an earlier one).
    fn place_summary(&self, history: &mut Vec<Value>, text: String);
    /// The bytes of an earlier summary held inside the first message (and the comma
    /// before each), which a new summary replaces.
    fn summary_inside_first(&self, first: &Value) -> u64;
    /// Calls `add(id, name)` for each tool call of a history entry.
    fn call_names(&self, entry: &Value, add: &mut dyn FnMut(&Value, &Value));
    /// Calls `found(block, call id, content)` for each tool result of a history entry
    /// (`block`: its index within the entry, where an entry holds several).
    fn result_contents(&self, entry: &Value, found: &mut dyn FnMut(Option<usize>, &Value, &Value));
    /// The value that holds a tool result's text.
    fn result_content_mut<'a>(
        &self,
        entry: &'a mut Value,
        block: Option<usize>,
    ) -> Option<&'a mut Value>;

    // The answer.

    /// Reads an answer (turn: to name calls a server left without an id).
    fn parse(&self, raw: &Value, turn: u32) -> Result<Parsed, WireError>;
    /// What the provider did to the context before the model read it.
    fn answer_edits(&self, raw: &Value, answer: &[Value]) -> AnswerEdits;
    /// A streamed answer's assembler.
    fn assembler(&self) -> Assembler;
    /// The provider's batch API.
    fn batch(&self) -> BatchKind;

    // A transcript read back (audit, traces).

    /// Whether a logged answer body looks like one of this protocol.
    fn is_answer(&self, body: &Value) -> bool;
    /// The model's output in an answer's body, as the provider wrote it.
    fn output_messages(&self, body: &Value) -> Value;
    /// The tool calls of a logged answer, as the runner reads them.
    fn logged_calls(&self, body: &Value, turn: u32) -> Vec<LoggedCall>;
    /// The tool results among a request's new messages (with their transcript lines).
    fn logged_results(&self, messages: &[(usize, Value)]) -> Vec<Returned>;
    /// The text a logged history entry gives the model to read (the prompt, a note, a
    /// system message), with its role; None for tool calls, tool results and entries
    /// without text.
    fn logged_text(&self, entry: &Value) -> Option<LoggedText>;
    /// The reasoning a logged answer shows (thinking, reasoning summaries), its parts
    /// joined by blank lines; None when it shows none (or only redacted or encrypted).
    fn logged_reasoning(&self, body: &Value) -> Option<String>;
}

/// The wire of `protocol`: the one place a protocol is registered.
pub fn wire(protocol: Protocol) -> &'static dyn Wire {
    match protocol {
        Protocol::Anthropic => &anthropic::Anthropic,
        Protocol::OpenaiResponses => &openai::responses::Responses,
        Protocol::OpenaiChat => &openai::chat::Chat,
    }
}

/// The order logged answers are recognised in, most specific first (a Chat answer
/// has `choices`, a Responses answer `output`, a Messages answer `content`).
const RECOGNITION: [Protocol; 3] = [
    Protocol::OpenaiChat,
    Protocol::OpenaiResponses,
    Protocol::Anthropic,
];

/// The protocol a logged answer body is of, for transcripts that do not say.
pub fn answer_protocol(body: &Value) -> Option<Protocol> {
    RECOGNITION.into_iter().find(|p| wire(*p).is_answer(body))
}

/// One protocol's streamed answer under construction. An enum, not a trait object:
/// `feed` runs for every event.
pub enum Assembler {
    Messages(anthropic::stream::Message),
    Responses(openai::responses::stream::Response),
    Chat(openai::chat::stream::Completion),
}

impl Assembler {
    /// Takes one event: its SSE name (empty when it has none) and its data.
    pub(in crate::model) fn feed(&mut self, name: &str, data: &str) -> Result<Step, Broken> {
        match self {
            Assembler::Messages(m) => m.feed(name, data),
            Assembler::Responses(r) => r.feed(name, data),
            Assembler::Chat(c) => c.feed(data),
        }
    }
}

/// A provider's batch API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// Anthropic's Message Batches: the requests in the create call, under
    /// `{base}/v1/messages/batches`.
    MessageBatches,
    /// OpenAI's Batch API: a JSONL file uploaded under `{base}`, each line for
    /// `endpoint`.
    UploadedFile { endpoint: &'static str },
}

/// What the provider did to the context, as an answer says.
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerEdits {
    None,
    /// It cleared parts of the prompt before the model read it (Anthropic's context
    /// editing).
    Cleared(ContextEdits),
    /// The answer's entry at this index (of the answer) is a compaction item that
    /// stands for everything before it (the Responses API's compaction).
    CompactedAt(usize),
}

/// What a request body is made of besides the history.
pub struct BodyParts<'a> {
    pub params: &'a Params,
    /// `max_tokens` or `max_completion_tokens` (Chat Completions).
    pub max_tokens_field: &'a str,
    /// A cache breakpoint on the system prompt.
    pub system_marker: Option<&'a Value>,
    pub tools: &'a [Value],
    pub max_tokens: u32,
}

/// The history as a request sends it: values (some of them marked copies), or
/// entries already encoded.
#[derive(Clone, Copy)]
pub enum Entries<'a> {
    Values(&'a [Cow<'a, Value>]),
    Encoded(&'a [&'a RawValue]),
}

/// Who asks, for [`Wire::headers`].
pub struct Auth<'a> {
    pub api_key: Option<&'a str>,
    pub anthropic_version: &'a str,
    pub anthropic_beta: Option<&'a str>,
}

/// A key as a header value, kept out of debug output.
pub(in crate::model) fn secret(v: String) -> Result<HeaderValue, String> {
    HeaderValue::from_str(&v)
        .map(|mut v| {
            v.set_sensitive(true);
            v
        })
        .map_err(|_| "the API key contains characters not allowed in a header".to_string())
}

/// A tool call's arguments in a logged answer: an object, or why they cannot be used
/// as a tool input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    Object,
    Bad(String),
}

/// One tool call of a logged answer, as the runner would read it.
#[derive(Debug, Clone)]
pub struct LoggedCall {
    /// The id results must carry: the call's own, or for a Chat Completions call
    /// without one, the id the runner makes up.
    pub id: Option<String>,
    pub id_made_up: bool,
    pub name: Option<String>,
    pub args: Args,
}

/// The text of one logged history entry, as [`Wire::logged_text`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedText {
    /// `user`, `system`, `developer` or `assistant`, as the entry says.
    pub role: String,
    pub text: String,
}

/// The text of a message's `content`: the string itself, or the `text` of each part
/// that has one (text blocks and parts; tool results carry `content`, not `text`),
/// joined by newlines. None when there is no text.
pub(in crate::model) fn content_text(content: &Value) -> Option<String> {
    let text = match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// Reasoning parts joined by blank lines; None when there are none.
pub(in crate::model) fn joined(parts: Vec<&str>) -> Option<String> {
    let parts: Vec<&str> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// A result found in a request's new messages.
#[derive(Debug, Clone)]
pub struct Returned {
    pub id: Option<String>,
    pub line: usize,
    /// Why it is out of place, if it is.
    pub misplaced: Option<String>,
}

/// The tool results a history entry is (or, in an Anthropic user message, holds).
pub(in crate::model) fn results_in(wire: &dyn Wire, entry: &Value) -> usize {
    let mut n = 0;
    wire.result_contents(entry, &mut |_, _, _| n += 1);
    n
}

/// A string field of a JSON object; an empty string is none (the runner's parsers
/// refuse an empty id or tool name, so the transcript readers must see it as missing).
pub(crate) fn str_of<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// What kind of JSON value `v` is, in words.
pub(in crate::model) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
