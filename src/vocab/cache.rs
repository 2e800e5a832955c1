//! Prompt caching as a task asks for it: on (`auto`) or `off`, and for how long an
//! Anthropic cache entry lives. Shared by the job (which resolves it), the protocol
//! adapters (which mark the request) and the budgets (which price the worst case).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::protocol::Protocol;
use super::usage::Usage;

/// Whether the runner asks the provider to cache a task's prompts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Anthropic: breakpoints placed by the runner; OpenAI: a `prompt_cache_key` per
    /// task (OpenAI caches on its own).
    #[default]
    Auto,
    /// Anthropic: one breakpoint, on the newest message's last block (what
    /// mini-swe-agent and SWE-agent do), to compare strategies; OpenAI: as `auto`.
    LastMessage,
    /// Nothing cache-related is sent (for compatible servers that refuse the fields).
    Off,
}

/// How long an Anthropic cache entry lives after its last use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CacheTtl {
    /// Five minutes, refreshed on every use (the default).
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// Written at 2x the input rate instead of 1.25x; worth it when a task's turns are
    /// more than five minutes apart (long tool runs, rate-limit waits).
    #[serde(rename = "1h")]
    OneHour,
}

/// OpenAI's `prompt_cache_retention`, sent only when a job sets it: without it the API
/// picks (24 hours for organizations without zero data retention on the models that
/// offer it, and always on gpt-5.5 and later, which refuse `in_memory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CacheRetention {
    /// In memory only: minutes, up to an hour.
    #[serde(rename = "in_memory")]
    InMemory,
    /// Up to 24 hours (offloaded to storage between uses).
    #[serde(rename = "24h")]
    Extended,
}

impl CacheRetention {
    pub fn wire(&self) -> &'static str {
        match self {
            CacheRetention::InMemory => "in_memory",
            CacheRetention::Extended => "24h",
        }
    }
}

/// A task's resolved caching.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Caching {
    pub mode: CacheMode,
    pub ttl: CacheTtl,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<CacheRetention>,
}

impl Caching {
    /// Caching off.
    pub const OFF: Caching = Caching {
        mode: CacheMode::Off,
        ttl: CacheTtl::FiveMinutes,
        retention: None,
    };

    pub fn is_on(&self) -> bool {
        self.mode != CacheMode::Off
    }

    /// Whether Anthropic breakpoints also go on the tools, the system prompt and the
    /// previous request's newest message (the runner's strategy), not only on the
    /// newest message.
    pub fn marks_prefix(&self) -> bool {
        self.mode == CacheMode::Auto
    }

    /// How long an entry lives after its last use.
    pub fn ttl(&self) -> std::time::Duration {
        match self.ttl {
            CacheTtl::FiveMinutes => std::time::Duration::from_secs(5 * 60),
            CacheTtl::OneHour => std::time::Duration::from_secs(60 * 60),
        }
    }

    /// Whether requests over `protocol` ask for 1-hour entries, which Anthropic writes
    /// at 2x the input rate (OpenAI has no such entries): worst cases price them, and
    /// an answer that reports them otherwise is read as 5-minute writes.
    pub fn one_hour_writes(&self, protocol: Protocol) -> bool {
        self.is_on() && self.ttl == CacheTtl::OneHour && protocol.facts().one_hour_cache
    }

    /// Anthropic's `cache_control` marker for this setting.
    pub fn marker(&self) -> serde_json::Value {
        match self.ttl {
            CacheTtl::FiveMinutes => serde_json::json!({"type": "ephemeral"}),
            CacheTtl::OneHour => serde_json::json!({"type": "ephemeral", "ttl": "1h"}),
        }
    }
}

/// The shortest prefix, in tokens, an Anthropic model caches: a breakpoint on a shorter
/// one writes nothing. By family, from Anthropic's prompt-caching documentation and, for
/// the newest models, third-party reports (the sources are in docs/simulator.md); the
/// runner and the simulator both use this table. A model it does not know gets 1,024.
pub fn min_cacheable_tokens(model: &str) -> u64 {
    let m = model.strip_prefix("claude-").unwrap_or(model);
    let starts = |p: &[&str]| p.iter().any(|p| m.starts_with(p));
    if starts(&["haiku-3", "3-haiku", "3-5-haiku"]) {
        2048
    } else if starts(&["haiku", "opus-4-5", "opus-4-6"]) {
        4096
    } else if starts(&["opus-4-7"]) {
        2048
    } else if starts(&["opus-5", "fable", "mythos"]) {
        512
    } else {
        1024
    }
}

/// Whether an Anthropic model's input-tokens-per-minute limit counts cache reads: the
/// rate-limit documentation marks the older models that do (Claude 3 and 3.5, except
/// 3.7 Sonnet, with which cache-aware limits began); the runner and the simulator
/// both use this.
pub fn cache_reads_count_toward_itpm(model: &str) -> bool {
    let m = model.strip_prefix("claude-").unwrap_or(model);
    m.starts_with("3-") && !m.starts_with("3-7")
}

/// The prompt tokens of an answered request that a provider's input-tokens-per-minute
/// limit counts: Anthropic counts uncached input and cache writes (and reads for the
/// models above), OpenAI the whole prompt, cached tokens included.
pub fn rate_counted_input(protocol: Protocol, model: &str, usage: &Usage) -> u64 {
    match protocol.facts().itpm_skips_cache_reads && !cache_reads_count_toward_itpm(model) {
        true => usage
            .prompt_tokens()
            .saturating_sub(usage.cache_read_tokens),
        false => usage.prompt_tokens(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_itpm_leaves_out_cache_reads_except_on_the_older_models() {
        let u = Usage {
            input_tokens: 10,
            cache_read_tokens: 1000,
            cache_write_tokens: 100,
            ..Usage::default()
        };
        assert_eq!(
            rate_counted_input(Protocol::Anthropic, "claude-sonnet-4-5", &u),
            110
        );
        assert_eq!(
            rate_counted_input(Protocol::Anthropic, "claude-3-7-sonnet-latest", &u),
            110
        );
        assert_eq!(
            rate_counted_input(Protocol::Anthropic, "claude-3-5-haiku-latest", &u),
            1110
        );
        assert_eq!(rate_counted_input(Protocol::OpenaiChat, "gpt-5", &u), 1110);
        assert_eq!(
            rate_counted_input(Protocol::OpenaiResponses, "gpt-5", &u),
            1110
        );
    }

    #[test]
    fn minimum_lengths_follow_the_model_family() {
        assert_eq!(min_cacheable_tokens("claude-opus-4-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-opus-5-5"), 512);
        assert_eq!(min_cacheable_tokens("claude-opus-4-1"), 1024);
        assert_eq!(min_cacheable_tokens("claude-haiku-4-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-haiku-5-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-3-5-haiku-20241022"), 2048);
        assert_eq!(min_cacheable_tokens("claude-sonnet-4-5"), 1024);
        assert_eq!(min_cacheable_tokens("claude-sonnet-4-5-20250929"), 1024);
        assert_eq!(min_cacheable_tokens("claude-fable-5-1"), 512);
        assert_eq!(min_cacheable_tokens("some-local-model"), 1024);
    }

    #[test]
    fn settings_are_spelled_as_the_job_file_writes_them() {
        let c: CacheTtl = serde_json::from_str("\"1h\"").unwrap();
        assert_eq!(c, CacheTtl::OneHour);
        let m: CacheMode = serde_json::from_str("\"off\"").unwrap();
        assert_eq!(m, CacheMode::Off);
        assert_eq!(
            Caching::default().marker(),
            serde_json::json!({"type": "ephemeral"})
        );
    }
}
