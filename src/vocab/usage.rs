//! Token usage in one shape for every protocol.

use serde::{Deserialize, Serialize};

/// Token counts of one response in one shape for every protocol: `input_tokens` are the
/// uncached prompt tokens (Anthropic's own sense; OpenAI's counts are converted, since
/// its input_tokens include cached ones), cache reads and writes apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
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

    /// The same prompt with nothing read from or written to a cache: every prompt token
    /// plain input (what caching is measured against).
    pub fn uncached(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens(),
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cache_write_1h_tokens: 0,
            ..*self
        }
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
