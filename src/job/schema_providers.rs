//! The provider part of the job file as written: `providers:` and the settings only a
//! provider has (its protocol's quirks, the simulator's own rate limits).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema_shared::{BatchFields, CacheFields, StreamMode};
use crate::model::Protocol;
use crate::vocab::bounds::{self, at_most};
use crate::vocab::json_schema;
use crate::vocab::protocol::BASE_URL_PATTERN;
use crate::vocab::values::{ByteSize, HumanDuration};

/// The built-in providers: (name, protocol, simulated). Here, beside the provider
/// types, because both the resolver (`providers.rs`) and the schema's rules
/// (`schema_rules.rs`) read it.
pub(super) const BUILTIN_PROVIDERS: [(&str, Protocol, bool); 3] = [
    ("sim", Protocol::Anthropic, true),
    ("anthropic", Protocol::Anthropic, false),
    ("openai", Protocol::OpenaiResponses, false),
];

/// Connection settings of one provider.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Provider")]
pub struct ProviderFields {
    /// The wire protocol; required for providers other than the built-in `sim`,
    /// `anthropic` and `openai`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Play the tasks' simulator scripts instead of calling a real server (the
    /// built-in `sim` provider always does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulator: Option<bool>,
    /// The API root, http or https (default: the protocol's,
    /// `https://api.anthropic.com` or `https://api.openai.com/v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "api_root")]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the key; keys never go in job files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Run without a key when the variable is unset (local servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_optional: Option<bool>,
    /// openai-chat: the output-limit field, `max_tokens` (most compatible servers) or
    /// `max_completion_tokens` (OpenAI, and required by its reasoning models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<MaxTokensField>,
    /// Prompt caching for the provider's tasks; `mode: off` also for compatible
    /// servers that refuse `prompt_cache_key` or `cache_control`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFields>,
    /// OpenAI protocols: the `parallel_tool_calls` sent with tools: true (default;
    /// llama.cpp only makes parallel calls when asked), false, or `omit` for servers
    /// that refuse the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<ParallelToolCalls>,
    /// Anthropic: the `anthropic-version` header (default `2023-06-01`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "header_value")]
    pub anthropic_version: Option<String>,
    /// Streaming for the provider's tasks (a task's own `stream` wins, then this, then
    /// the defaults').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamMode>,
    /// Batch mode for the provider's tasks (field by field, a task's own `batch` wins,
    /// then this, then the defaults').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchFields>,
    /// How long a streamed answer may go without a byte before it counts as cut
    /// (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_idle_timeout: Option<HumanDuration>,
    /// openai-chat: `omit` leaves `stream_options` (which asks for the usage at the end
    /// of a stream) out, for compatible servers that refuse the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Per HTTP request (default 10m; the task's time_limit still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// The largest response body read (default 64MiB); a longer one is abandoned, counted
    /// at its worst case, and ends the task with `provider_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<ResponseBytes>")]
    pub max_response_bytes: Option<ByteSize>,
    /// Retries of a retryable failure (5xx, 529, connection errors) per request
    /// (default 2).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RETRIES }>"
    )]
    #[schemars(range(max = bounds::RETRIES))]
    pub max_retries: Option<u32>,
    /// Retries of a 429 per request (default 8; the whole provider pauses on one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RETRIES }>"
    )]
    #[schemars(range(max = bounds::RETRIES))]
    pub max_rate_limit_retries: Option<u32>,
    /// Requests per minute for all tasks on this provider together.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::RPM))]
    pub rpm: Option<u32>,
    /// Input tokens per minute for all tasks on this provider together.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::TPM))]
    pub itpm: Option<u32>,
    /// Output tokens per minute for all tasks on this provider together (a request
    /// counts its max_tokens until it is answered).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::TPM))]
    pub otpm: Option<u32>,
    /// How much of the rate may be used at once (default 1s worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<HumanDuration>,
    /// Only for `sim`: the limits the simulator itself enforces (429 + retry-after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_limits: Option<ServerLimitFields>,
}

/// The schema of `max_response_bytes`: a size of at most [`bounds::RESPONSE_BYTES`].
struct ResponseBytes;

impl JsonSchema for ResponseBytes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ResponseBytes".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        json_schema::size_at_most(bounds::RESPONSE_BYTES)
    }
}

/// A `base_url`: an http or https URL (a number is never one).
fn api_root(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": ["string", "null"], "pattern": BASE_URL_PATTERN })
}

/// The `anthropic-version` header: printable ASCII without spaces.
fn header_value(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    json_schema::text_matching("^[!-~]+$", None)
}

/// Limits a simulator server enforces on its clients (`providers.sim.server_limits`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Simulator server limits")]
pub struct ServerLimitFields {
    /// Requests per minute the simulator answers; more get a 429 with retry-after.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::RPM))]
    pub rpm: Option<u32>,
    /// Input tokens per minute the simulator accepts.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::TPM))]
    pub itpm: Option<u32>,
    /// Output tokens (max_tokens) per minute the simulator accepts.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::TPM))]
    pub otpm: Option<u32>,
    /// How much of the rate may be used at once (default 1s worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<HumanDuration>,
    /// Whether answers state the limits in rate-limit headers, as Anthropic and OpenAI
    /// do (default true); false plays a server that states none (vLLM, a proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<bool>,
}

/// `stream_options` on Chat Completions: ask for the usage (default), or leave it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StreamOptions {
    /// Send `stream_options: {include_usage: true}` (the default).
    IncludeUsage,
    /// Leave `stream_options` out.
    Omit,
}

/// `parallel_tool_calls`: a value to send, or `omit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ParallelToolCalls {
    /// Sent as given.
    Send(bool),
    /// Not sent.
    Omit(Omit),
}

/// The word `omit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Omit {
    Omit,
}

/// Chat Completions' two names for the output limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// What most compatible servers read.
    MaxTokens,
    /// What OpenAI reads, and its reasoning models require.
    MaxCompletionTokens,
}
