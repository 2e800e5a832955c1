//! Context windows and what to do near them: each priced model's window, and a task's
//! compaction policy (`context:` in job files). Shared by the job (which resolves it),
//! the loop (which decides when to compact) and the simulator (which refuses a prompt
//! longer than the window, as the APIs do).

use serde::{Deserialize, Serialize};

/// The tokens a model's prompt and answer may hold together. Anthropic's context
/// windows page: 1M for Fable and Mythos 5 and 5.1, Opus 5, Opus 4.6 to 4.8, Sonnet 5
/// and Sonnet 4.6 (and, per third-party reports, Haiku 5.5); 200k for the other
/// Claude models. OpenAI's model pages as relayed by gateways: gpt-5.4 1,050,000,
/// gpt-5.4-mini and -nano 400,000, gpt-5.5 1M. None for a model not in the table:
/// the server then decides, and its refusal is what the loop acts on.
pub fn context_window(model: &str) -> Option<u64> {
    if let Some(m) = model.strip_prefix("claude-") {
        let starts = |p: &[&str]| p.iter().any(|p| m.starts_with(p));
        let big = starts(&[
            "fable-5",
            "mythos-5",
            "opus-5",
            "opus-4-8",
            "opus-4-7",
            "opus-4-6",
            "sonnet-5",
            "sonnet-4-6",
            "haiku-5-5",
        ]);
        return Some(if big { 1_000_000 } else { 200_000 });
    }
    let m = model;
    if m.starts_with("gpt-5.4-mini") || m.starts_with("gpt-5.4-nano") {
        Some(400_000)
    } else if m.starts_with("gpt-5.4") {
        Some(1_050_000)
    } else if m.starts_with("gpt-5.5") {
        Some(1_000_000)
    } else {
        None
    }
}

/// How a task keeps its prompt inside the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextStrategy {
    /// Replace old tool results with a short placeholder (the cheapest: no model call,
    /// and the transcript keeps every original).
    #[default]
    ClearToolResults,
    /// Anthropic's context editing: the API clears old tool results itself
    /// (`clear_tool_uses_20250919`, beta `context-management-2025-06-27`) once the
    /// prompt passes the threshold; the history the runner keeps is unchanged.
    Native,
    /// Never compact: a task whose prompt outgrows the window stops `context_window`.
    Off,
}

/// The beta that Anthropic's context editing needs.
pub const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";

/// What the provider's own context editing cleared for one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextEdits {
    pub tool_uses: u64,
    pub input_tokens: u64,
}

/// A task's resolved context policy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextPolicy {
    /// The window in tokens (the job's, else the model's); None: unknown.
    pub window: Option<u64>,
    pub strategy: ContextStrategy,
    /// Compact when the next request's prompt and answer would pass this share of the
    /// window.
    pub at: f64,
    /// Tool results kept whole, newest first.
    pub keep: usize,
    /// Tools whose results are never cleared.
    pub exempt: Vec<String>,
}

impl Default for ContextPolicy {
    fn default() -> ContextPolicy {
        ContextPolicy {
            window: None,
            strategy: ContextStrategy::ClearToolResults,
            at: DEFAULT_AT,
            keep: DEFAULT_KEEP,
            exempt: Vec::new(),
        }
    }
}

pub const DEFAULT_AT: f64 = 0.85;
pub const DEFAULT_KEEP: usize = 3;

impl ContextPolicy {
    /// The prompt size, in tokens, above which a request with `max_tokens` of answer
    /// would pass the compaction threshold.
    pub fn threshold(&self, max_tokens: u32) -> Option<u64> {
        let w = self.window?;
        Some(((w as f64 * self.at) as u64).saturating_sub(u64::from(max_tokens)))
    }

    /// The largest prompt that still fits the window with `max_tokens` of answer.
    pub fn fits(&self, max_tokens: u32) -> Option<u64> {
        Some(self.window?.saturating_sub(u64::from(max_tokens)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_by_family_and_none_for_unknown_models() {
        assert_eq!(context_window("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(context_window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(context_window("claude-opus-4-6"), Some(1_000_000));
        assert_eq!(context_window("claude-haiku-4-5"), Some(200_000));
        assert_eq!(context_window("gpt-5.4"), Some(1_050_000));
        assert_eq!(context_window("gpt-5.4-mini"), Some(400_000));
        assert_eq!(context_window("llama-3.1-8b"), None);
    }

    #[test]
    fn thresholds_leave_room_for_the_answer() {
        let p = ContextPolicy {
            window: Some(100_000),
            ..ContextPolicy::default()
        };
        assert_eq!(p.threshold(5_000), Some(80_000));
        assert_eq!(p.fits(5_000), Some(95_000));
        assert_eq!(ContextPolicy::default().threshold(1), None);
    }
}
