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
/// one writes nothing. From Anthropic's prompt-caching documentation: 4,096 for Opus 4.5
/// and later and Haiku 4.5 and later, 2,048 for the Haiku 3 models, 1,024 for the
/// others (Sonnet, older Opus); a model this table does not know gets 1,024, the
/// smallest, so that a breakpoint is never left out where it could have cached.
pub fn min_cacheable_tokens(model: &str) -> u64 {
    let m = model.strip_prefix("claude-").unwrap_or(model);
    let version = |family: &str| -> Option<(u32, u32)> {
        let rest = m.strip_prefix(family)?.strip_prefix('-')?;
        let mut parts = rest.split('-');
        let major = parts.next()?.parse().ok()?;
        let minor = parts
            .next()
            .and_then(|p| p.parse().ok())
            .filter(|n| *n < 100)
            .unwrap_or(0);
        Some((major, minor))
    };
    if let Some(v) = version("opus").or_else(|| version("haiku")) {
        if v >= (4, 5) {
            return 4096;
        }
        if m.starts_with("haiku") {
            return 2048;
        }
    }
    if m.starts_with("3-haiku") || m.starts_with("3-5-haiku") {
        return 2048;
    }
    1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_lengths_follow_the_model_family() {
        assert_eq!(min_cacheable_tokens("claude-opus-4-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-opus-5-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-opus-4-1"), 1024);
        assert_eq!(min_cacheable_tokens("claude-haiku-4-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-haiku-5-5"), 4096);
        assert_eq!(min_cacheable_tokens("claude-3-5-haiku-20241022"), 2048);
        assert_eq!(min_cacheable_tokens("claude-sonnet-4-5"), 1024);
        assert_eq!(min_cacheable_tokens("claude-sonnet-4-5-20250929"), 1024);
        assert_eq!(min_cacheable_tokens("claude-fable-5-1"), 1024);
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
