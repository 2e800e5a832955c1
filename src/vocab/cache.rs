//! Prompt caching as a task asks for it: on (`auto`) or `off`, and for how long an
//! Anthropic cache entry lives. Shared by the job (which resolves it), the protocol
//! adapters (which mark the request) and the budgets (which price the worst case).

use serde::{Deserialize, Serialize};

/// Whether the runner asks the provider to cache a task's prompts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Anthropic: breakpoints placed by the runner; OpenAI: a `prompt_cache_key` per
    /// task (OpenAI caches on its own).
    #[default]
    Auto,
    /// Nothing cache-related is sent (for compatible servers that refuse the fields).
    Off,
}

/// How long an Anthropic cache entry lives after its last use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheTtl {
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// Written at 2x the input rate instead of 1.25x; worth it when a task's turns are
    /// more than five minutes apart (long tool runs, rate-limit waits).
    #[serde(rename = "1h")]
    OneHour,
}

/// A task's resolved caching.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Caching {
    pub mode: CacheMode,
    pub ttl: CacheTtl,
}

impl Caching {
    /// Caching off.
    pub const OFF: Caching = Caching {
        mode: CacheMode::Off,
        ttl: CacheTtl::FiveMinutes,
    };

    pub fn is_on(&self) -> bool {
        self.mode == CacheMode::Auto
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

#[cfg(test)]
mod tests {
    use super::*;

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
