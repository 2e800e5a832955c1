//! Provider adapters. Each wire protocol keeps its conversation in its own native JSON
//! (so nothing the model sent is lost or reordered) and shows the agent loop only a
//! neutral view: the tool calls, the text, the stop signal and the usage.

pub mod anthropic;
mod http;

use serde::Serialize;
use serde_json::Value;

pub use http::{client, Failure, HttpError, RateHeaders};

/// Token counts of one response, in the provider's own sense (Anthropic's input_tokens
/// exclude cache reads and writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    /// All cache writes, the 1-hour ones included.
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` written with the 1-hour lifetime.
    pub cache_write_1h_tokens: u64,
}

impl Usage {
    /// Every prompt token the request consumed, cached or not.
    pub fn prompt_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_tokens)
            .saturating_add(self.cache_write_tokens)
    }

    /// Adds another response's usage; saturating, since the figures come from outside.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
        self.cache_write_1h_tokens = self
            .cache_write_1h_tokens
            .saturating_add(other.cache_write_1h_tokens);
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// The answer to one tool call, sent back under the call's id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    pub id: String,
    pub content: String,
    pub is_error: bool,
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
        }
    }
}
