//! Provider adapters. Each wire protocol keeps its conversation in its own native JSON
//! (so nothing the model sent is lost or reordered) and shows the agent loop only a
//! neutral view: the tool calls, the text, the stop signal and the usage.
//!
//! `conversation.rs` holds what every protocol shares (the history, its encoded
//! entries, the cache breakpoints, prompt-size estimates), `send.rs` one request with
//! its transcript events; `protocol/` holds what differs, one
//! folder per protocol family behind the `protocol::Wire` trait (request bodies,
//! reading answers whole and streamed, returning results, caching markers, batch
//! shapes, compaction); `stream.rs` reads a streamed answer off the wire for the
//! protocol's assembler.

pub(crate) mod backoff;
pub mod batch;
mod compact;
mod conversation;
mod endpoint;
mod http;
mod opening;
mod params;
pub mod protocol;
mod rate_headers;
mod send;
mod stream;
mod summary;

use serde::Serialize;
use serde_json::Value;

pub use crate::vocab::protocol::Protocol;
pub(crate) use crate::vocab::usage::{openai_usage, OpenAiFields};
pub use crate::vocab::usage::{Bounds, Clamp, Reported, Usage};
pub use compact::{Cleared, MAX_BYTES_PER_TOKEN};
pub use conversation::Conversation;
pub use endpoint::Endpoint;
pub use http::{client, needs_tls, Failure, HttpError, Reply};
pub use params::Params;
pub use protocol::{wire, Wire};
pub use rate_headers::{parse_go_duration, RateHeaders};
pub use summary::Summarized;

/// The usage an answer of `protocol` reports (None when it is not an answer, or has no
/// usage): what a batch result found again on resume was billed for, before the
/// request's bounds (`Reported::within`).
pub fn usage_of(protocol: Protocol, body: &Value) -> Option<Reported> {
    wire(protocol).parse(body, 0).ok()?.usage
}

/// The encoded size of a value in bytes.
pub(crate) fn len_of(v: &impl serde::Serialize) -> u64 {
    serde_json::to_vec(v).map_or(0, |b| b.len() as u64)
}

/// An answer's usage within its request's bounds (`Reported::within`); what was read
/// differently from what the provider sent goes to the transcript (`usage_clamped`).
fn clamped(
    r: Reported,
    bounds: &Bounds,
    log: &crate::vocab::log::TaskLog,
    turn: u32,
    attempt: u32,
) -> Usage {
    let Reported { usage, clamps } = r.within(bounds);
    if !clamps.is_empty() {
        log.emit(crate::vocab::transcript::TranscriptEvent::UsageClamped {
            turn,
            attempt,
            clamps,
        });
    }
    usage
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
    /// Why the arguments could not be read (OpenAI sends them as a JSON string the
    /// model wrote, which may be broken); such a call gets an error result, not a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_error: Option<String>,
}

/// The answer to one tool call, sent back under the call's id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    pub id: String,
    pub content: String,
    pub is_error: bool,
    /// Images (from MCP tools), for providers that take them in tool results.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
}

/// A base64 image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Image {
    pub media_type: String,
    pub data: String,
}

/// Why the model stopped generating, in protocol-neutral terms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ModelStop {
    EndTurn,
    ToolUse,
    /// The server paused a long turn; send the conversation back unchanged.
    PauseTurn,
    MaxTokens,
    StopSequence(Option<String>),
    Refusal(Option<String>),
    ContextWindow,
    /// A value this version does not know; never treated as success.
    Unknown(String),
}

/// What one model request produced.
#[derive(Debug, Clone)]
pub struct Turn {
    pub calls: Vec<ToolCall>,
    pub text: String,
    pub stop: ModelStop,
    pub usage: Usage,
    /// The provider's rate-limit windows as of this answer.
    pub rate: RateHeaders,
    /// The answer carried no usage (some OpenAI-compatible servers): `usage` is an
    /// upper bound worked out from the sizes of the request and the answer.
    pub usage_estimated: bool,
    /// A streamed answer: milliseconds to its first content.
    pub ttft_ms: Option<u64>,
    /// What Anthropic's context editing cleared before the model read the prompt.
    pub context_edits: Option<crate::vocab::context::ContextEdits>,
    /// The answer a killed attempt paid for, reused: nothing was sent or billed.
    pub replayed: bool,
}

/// Why a request produced no usable turn.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The provider answered 200 with something that is not a valid message.
    #[error("malformed response{}: {detail}", request_id.as_deref().map(|r| format!(" (request-id {r})")).unwrap_or_default())]
    Malformed {
        detail: String,
        request_id: Option<String>,
    },
    /// A request sent through the batch API came back without an answer (expired,
    /// cancelled, or its batch could not be followed).
    #[error("batch {batch_id}: {detail}")]
    Batch { batch_id: String, detail: String },
    /// The provider answered 200 with a response that says generation failed (OpenAI
    /// Responses `status: failed`).
    #[error("the response failed: {code}: {message}{}", request_id.as_deref().map(|r| format!(" (request-id {r})")).unwrap_or_default())]
    Failed {
        code: String,
        message: String,
        request_id: Option<String>,
    },
}

impl ModelError {
    /// The provider refused the prompt as longer than the model's context window
    /// (Anthropic: 400 "prompt is too long"; OpenAI: `context_length_exceeded`).
    pub fn is_context_overflow(&self) -> bool {
        match self {
            ModelError::Http(HttpError::Status {
                status: 400,
                error_type,
                message,
                ..
            }) => {
                error_type == "context_length_exceeded" || message.starts_with("prompt is too long")
            }
            ModelError::Failed { code, .. } => code == "context_length_exceeded",
            _ => false,
        }
    }
}

/// Why a protocol could not read an answer.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// Not a valid answer of the protocol.
    #[error("{0}")]
    Malformed(String),
    /// A valid answer that reports a failed generation; `retryable` for server-side
    /// and rate-limit failures, with what it used if it says.
    #[error("{code}: {message}")]
    Failed {
        code: String,
        message: String,
        retryable: bool,
        usage: Option<Reported>,
    },
}

impl From<String> for WireError {
    fn from(s: String) -> Self {
        WireError::Malformed(s)
    }
}

impl From<&str> for WireError {
    fn from(s: &str) -> Self {
        WireError::Malformed(s.to_string())
    }
}

/// What a protocol read out of one answer.
#[derive(Debug)]
pub struct Parsed {
    /// What goes into the history, in the protocol's own shape.
    pub items: Vec<Value>,
    pub calls: Vec<ToolCall>,
    pub text: String,
    pub stop: ModelStop,
    /// None when the answer carried no usage; with the figures read differently from
    /// what the provider sent.
    pub usage: Option<Reported>,
}

/// A request that produced no turn, with what the loop needs to decide next.
#[derive(Debug)]
pub struct SendError {
    pub error: ModelError,
    pub retryable: bool,
    /// The wait the server asked for before a retry.
    pub server_wait: Option<std::time::Duration>,
    /// The provider may have billed the request: count its reservation as spent.
    pub maybe_billed: bool,
    /// A 429: pause the provider, retry on the rate-limit budget.
    pub rate_limited: bool,
    pub rate: RateHeaders,
    /// What the provider says the failed request used (a failed OpenAI response can
    /// carry usage): billed instead of the worst case.
    pub usage: Option<Usage>,
}

impl From<Failure> for SendError {
    fn from(f: Failure) -> Self {
        SendError {
            rate_limited: f.is_rate_limit(),
            error: ModelError::Http(f.error),
            retryable: f.retryable,
            server_wait: f.server_wait,
            maybe_billed: f.maybe_billed,
            rate: f.rate,
            usage: None,
        }
    }
}
