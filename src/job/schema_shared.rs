//! The settings of a job file that a provider and a task (or `defaults`) both take:
//! prompt caching, batch mode and streaming. Each field falls back from the task to
//! the provider, then to the defaults. They sit apart from `schema.rs` so that the
//! provider types (`schema_providers.rs`) and the task types can both use them without
//! the two files using each other.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::vocab::cache::{CacheMode, CacheRetention, CacheTtl};
use crate::vocab::values::HumanDuration;

/// `cache: {mode: auto|last_message|off, ttl: 5m|1h, retention: in_memory|24h}`; each
/// field falls back to the provider's, then the defaults'. `ttl` is Anthropic's,
/// `retention` OpenAI's.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Prompt caching")]
pub struct CacheFields {
    /// Whether and how the runner asks for caching (default `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CacheMode>,
    /// Anthropic: how long a cache entry lives after its last use (default `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<CacheTtl>,
    /// OpenAI: `prompt_cache_retention`, sent only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<CacheRetention>,
}

/// `batch: {mode: off|on, window, max_requests, max_wait}`; each field falls back to the
/// provider's, then the defaults'.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Batch mode")]
pub struct BatchFields {
    /// `on` sends the requests through the provider's batch API (default `off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<BatchMode>,
    /// How long the first request of a batch waits for others (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<HumanDuration>,
    /// The most requests in one batch (default 1000; at most 100000 for Anthropic,
    /// 50000 for OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// How long a batch may take before it is cancelled (default and most: 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<HumanDuration>,
}

/// Whether a task's requests go through the provider's batch API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchMode {
    /// Requests go to the synchronous API (the default).
    #[default]
    Off,
    /// Requests go through the batch API: half price, answers within hours.
    On,
}

/// When a task's answers are streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// When a whole answer could take longer than the API allows (large max_tokens,
    /// thinking); the default.
    #[default]
    Auto,
    /// Every answer.
    Always,
    /// No answer.
    Never,
}
