//! Provider adapters. Each wire protocol keeps its conversation in its own native JSON
//! (so nothing the model sent is lost or reordered) and shows the agent loop only a
//! neutral view: the tool calls, the text, the stop signal and the usage.
//!
//! `conversation.rs` holds what every protocol shares (the history, sending, the
//! transcript events, prompt-size estimates); `anthropic.rs`, `responses.rs` and
//! `chat.rs` hold what differs (request bodies, parsing answers, returning results).

pub mod anthropic;
pub mod chat;
mod conversation;
mod http;
pub mod responses;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use conversation::{Conversation, Endpoint, Params};
pub use http::{client, parse_go_duration, Failure, HttpError, RateHeaders};

/// The wire protocol a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Anthropic Messages (`POST {base}/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`POST {base}/responses`), stateless.
    OpenaiResponses,
    /// OpenAI Chat Completions (`POST {base}/chat/completions`), also what vLLM,
    /// llama.cpp, Ollama and LiteLLM serve.
    OpenaiChat,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [
        Protocol::Anthropic,
        Protocol::OpenaiResponses,
        Protocol::OpenaiChat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenaiResponses => "openai-responses",
            Protocol::OpenaiChat => "openai-chat",
        }
    }

    /// The API root used when a provider sets no base_url.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Protocol::Anthropic => "https://api.anthropic.com",
            Protocol::OpenaiResponses | Protocol::OpenaiChat => "https://api.openai.com/v1",
        }
    }

    /// The variable the key is read from when a provider names none.
    pub fn default_key_env(self) -> &'static str {
        match self {
            Protocol::Anthropic => "ANTHROPIC_API_KEY",
            Protocol::OpenaiResponses | Protocol::OpenaiChat => "OPENAI_API_KEY",
        }
    }

    /// The endpoint's URL under an API root, following each vendor's convention: an
    /// Anthropic base is the host (`/v1/messages` is added), an OpenAI base ends in
    /// `/v1` (`/responses` or `/chat/completions` is added).
    pub fn url(self, base_url: &str) -> Result<reqwest::Url, String> {
        let base = base_url.trim_end_matches('/');
        let path = match self {
            Protocol::Anthropic => "/v1/messages",
            Protocol::OpenaiResponses => "/responses",
            Protocol::OpenaiChat => "/chat/completions",
        };
        let url = reqwest::Url::parse(&format!("{base}{path}"))
            .map_err(|e| format!("invalid base_url \"{base_url}\": {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "invalid base_url \"{base_url}\": use an http:// or https:// URL"
            ));
        }
        Ok(url)
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Token counts of one response in one shape for every protocol: `input_tokens` are the
/// uncached prompt tokens (Anthropic's own sense; OpenAI's counts are converted, since
/// its input_tokens include cached ones), cache reads and writes apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    /// All cache writes, the 1-hour ones included.
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` written with the 1-hour lifetime.
    pub cache_write_1h_tokens: u64,
    /// The part of `output_tokens` spent on hidden reasoning (OpenAI reports it).
    pub reasoning_tokens: u64,
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
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }
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
    /// The provider answered 200 with a response that says generation failed (OpenAI
    /// Responses `status: failed`).
    #[error("the response failed: {code}: {message}{}", request_id.as_deref().map(|r| format!(" (request-id {r})")).unwrap_or_default())]
    Failed {
        code: String,
        message: String,
        request_id: Option<String>,
    },
}

/// Why a protocol could not read an answer.
#[derive(Debug)]
pub enum WireError {
    /// Not a valid answer of the protocol.
    Malformed(String),
    /// A valid answer that reports a failed generation; `retryable` for server-side
    /// and rate-limit failures, with what it used if it says.
    Failed {
        code: String,
        message: String,
        retryable: bool,
        usage: Option<Usage>,
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
    /// None when the answer carried no usage.
    pub usage: Option<Usage>,
}

/// OpenAI's usage in the neutral shape: its input (prompt) count includes the cached
/// tokens and, presumably, the cache writes, which `Usage` keeps apart.
pub(crate) fn openai_usage(
    input: u64,
    cached: u64,
    written: u64,
    output: u64,
    reasoning: u64,
) -> Usage {
    let cached = cached.min(input);
    let written = written.min(input - cached);
    Usage {
        input_tokens: input - cached - written,
        cache_read_tokens: cached,
        cache_write_tokens: written,
        cache_write_1h_tokens: 0,
        output_tokens: output,
        reasoning_tokens: reasoning.min(output),
    }
}

/// Reads a tool call's arguments written as a JSON string (both OpenAI protocols). An
/// empty string is an empty object; some servers send an object instead of a string.
pub fn parse_arguments(raw: Option<&Value>) -> (Value, Option<String>) {
    match raw {
        None | Some(Value::Null) => (Value::Object(Default::default()), None),
        Some(Value::String(s)) if s.trim().is_empty() => (Value::Object(Default::default()), None),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v) => (v, None),
            Err(e) => {
                let shown: String = s.chars().take(200).collect();
                (
                    Value::String(s.clone()),
                    Some(format!("the arguments are not valid JSON ({e}): {shown}")),
                )
            }
        },
        Some(other) => (other.clone(), None),
    }
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
