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
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ContextStrategy {
    /// The cheapest first, escalating: clear old tool results, and summarize only when
    /// clearing cannot bring the prompt under the threshold.
    #[default]
    Auto,
    /// Replace old tool results with a short placeholder (the cheapest: no model call,
    /// and the transcript keeps every original).
    ClearToolResults,
    /// One model call, charged to the task, writes a summary that replaces the oldest
    /// part of the history (the newest `keep` turns stay whole).
    Summarize,
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
    /// Tool results kept whole (clearing), or turns kept whole (summarizing), newest
    /// first.
    pub keep: usize,
    /// Tools whose results are never cleared.
    pub exempt: Vec<String>,
}

impl ContextStrategy {
    /// Whether the strategy clears old tool results in the runner.
    pub fn clears(self) -> bool {
        matches!(
            self,
            ContextStrategy::Auto | ContextStrategy::ClearToolResults
        )
    }

    /// Whether the strategy may ask the model for a summary.
    pub fn summarizes(self) -> bool {
        matches!(self, ContextStrategy::Auto | ContextStrategy::Summarize)
    }
}

/// The request that asks the model for a summary ends with this text, which is also
/// how the simulator recognises it.
pub const SUMMARY_REQUEST: &str = "[agentbatch: this conversation is about to outgrow the model's context window, so its history will be replaced by your summary. Do not call any tool in this answer. Write a summary that lets you go on with the task from it alone: the task, what you found (files, functions, errors, test output that matters, with exact paths, names and values), what you changed, what is left to do, and your next step.]";

/// What opens the summary in the history that replaces the summarized part.
pub const SUMMARY_HEADING: &str = "[agentbatch: the earlier part of this conversation was replaced by the summary below, written by you, to keep the prompt inside the context window. The tool results it mentions are no longer shown; call a tool again if you need one.]";

/// Whether an entry of a protocol's history is the client's (a user, tool, system or
/// developer message, a function call output) rather than the model's. Shared by the
/// runner, which cuts a history at turns, and the simulator, which counts them.
pub fn is_client_entry(e: &serde_json::Value) -> bool {
    e["type"] == "function_call_output"
        || matches!(
            e["role"].as_str(),
            Some("user" | "tool" | "system" | "developer")
        )
}

/// Where each model turn of a history starts: a model entry right after a client one.
pub fn turn_starts(history: &[serde_json::Value]) -> Vec<usize> {
    (1..history.len())
        .filter(|&i| !is_client_entry(&history[i]) && is_client_entry(&history[i - 1]))
        .collect()
}

impl Default for ContextPolicy {
    fn default() -> ContextPolicy {
        ContextPolicy {
            window: None,
            strategy: ContextStrategy::Auto,
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
