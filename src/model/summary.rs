//! Keeping the prompt inside the context window with one model call: the request that
//! asks the model for a summary (the conversation as it stands plus one instruction, so
//! it reads the cached prefix), and the history that replaces everything but the first
//! message and the newest turns with that summary. The transcript keeps every original.

use super::conversation::{Conversation, FIRST_REQUEST_OVERHEAD};
use super::len_of;
use super::protocol::results_in;
use crate::vocab::context::{turn_starts, SUMMARY_HEADING, SUMMARY_REQUEST};

/// What one summary replaced, with the prompt estimates around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summarized {
    /// Model turns replaced by the summary, and the tool results among them.
    pub turns: usize,
    pub results: usize,
    /// Bytes of history removed, less the summary that took their place.
    pub bytes: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

impl Conversation {
    /// A copy of this conversation whose next request asks the model for a summary;
    /// None when there is nothing to summarize yet, or the history ends with the
    /// model's own turn.
    pub fn summary_request(&self) -> Option<Conversation> {
        if turn_starts(&self.history).is_empty() {
            return None;
        }
        let mut ask = self.clone();
        ask.append_user_text(SUMMARY_REQUEST).then_some(ask)
    }

    /// What no summary can replace, as a prompt estimate: the tool declarations, the
    /// system prompt and the first message (less an earlier summary). A summary leaves
    /// at least this and itself, so when this alone is over the compaction threshold
    /// none can bring the prompt under it.
    pub fn summary_floor(&self) -> u64 {
        let whole = self.body(u32::MAX).len() as u64;
        // Each entry after the first, and the comma before it.
        let rest: u64 = self.history.iter().skip(1).map(|e| len_of(e) + 1).sum();
        // Where an earlier summary is an entry of its own, it is counted in `rest`.
        let earlier = self
            .history
            .first()
            .map_or(0, |f| self.wire.summary_inside_first(f));
        let bytes = whole.saturating_sub(rest).saturating_sub(earlier);
        (bytes as f64 * self.tokens_per_byte()) as u64
    }

    /// Replaces every turn but the newest `keep` (and any earlier summary) with
    /// `summary`, placed after the first message. `asked` is the summary request as it
    /// was answered: its counts bound the new prompt. None when no turn would go.
    pub fn replace_with_summary(
        &mut self,
        summary: &str,
        keep: usize,
        asked: &Conversation,
    ) -> Option<Summarized> {
        let starts = turn_starts(&self.history);
        let kept = keep.min(starts.len().saturating_sub(1));
        let cut = match kept {
            0 => self.history.len(),
            k => starts[starts.len() - k],
        };
        if starts.is_empty() || cut <= 1 {
            return None;
        }
        let before = self.context_estimate();
        let old_bytes: u64 = self.history.iter().map(len_of).sum();
        let turns = starts.len() - kept;
        let results = self.history[1..cut]
            .iter()
            .map(|e| results_in(self.wire, e))
            .sum();
        let text = format!("{SUMMARY_HEADING}\n\n{summary}");
        let tail = self.history.split_off(cut);
        self.history.truncate(1);
        let text_bytes = text.len() as u64;
        self.wire.place_summary(&mut self.history, text);
        self.history.extend(tail);
        let new_bytes: u64 = self.history.iter().map(len_of).sum();
        self.rebase_after_summary(asked, text_bytes.saturating_add(64));
        Some(Summarized {
            turns,
            results,
            bytes: old_bytes.saturating_sub(new_bytes),
            tokens_before: before,
            tokens_after: self.context_estimate(),
        })
    }

    /// The counts after a summary. The bound the budgets use must stay an upper bound:
    /// the summary request's prompt (which held everything kept) plus the summary, or
    /// the new body at one token per byte, whichever is smaller. The estimate
    /// compaction works with scales the new body at the summary request's tokens per
    /// byte.
    fn rebase_after_summary(&mut self, asked: &Conversation, added: u64) {
        let body = (self.body(u32::MAX).len() as u64).saturating_add(FIRST_REQUEST_OVERHEAD);
        let asked_prompt = asked.last_prompt_tokens.unwrap_or(u64::MAX);
        let bound = asked_prompt.saturating_add(added).min(body);
        let per_byte = match (asked.last_prompt_tokens, asked.last_body_bytes) {
            (Some(t), b) if b > 0 => (t as f64 / b as f64).min(1.0),
            _ => 1.0,
        };
        self.last_prompt_tokens = Some(bound);
        self.bytes_since = 0;
        self.last_body_bytes = ((bound as f64 / per_byte) as u64).max(1);
        let estimate = (body as f64 * per_byte) as u64;
        self.compacted_tokens = bound.saturating_sub(estimate);
        // Every entry from the first one on changed: encode them again; nothing the
        // cache holds is a prefix of the new prompt but the tools and system prompt.
        self.encoded.clear();
        self.cached_prefix = 0;
        self.cached_tail = None;
        // The kept turns and the summary are in the transcript already.
        self.logged = self.history.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Protocol;
    use serde_json::json;

    #[test]
    fn turns_start_after_client_entries() {
        let h = vec![
            json!({"role": "user", "content": "task"}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "a"}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a"}]}),
            json!({"role": "assistant", "content": "paused"}),
            json!({"role": "assistant", "content": "more"}),
            json!({"role": "user", "content": "go on"}),
        ];
        assert_eq!(turn_starts(&h), vec![1, 3]);
        let wire = crate::model::wire;
        assert_eq!(results_in(wire(Protocol::Anthropic), &h[2]), 1);
        let r = vec![
            json!({"type": "message", "role": "user", "content": "task"}),
            json!({"type": "reasoning", "encrypted_content": "x"}),
            json!({"type": "function_call", "call_id": "c"}),
            json!({"type": "function_call_output", "call_id": "c"}),
            json!({"type": "function_call", "call_id": "d"}),
        ];
        assert_eq!(turn_starts(&r), vec![1, 4]);
        assert_eq!(results_in(wire(Protocol::OpenaiResponses), &r[3]), 1);
    }
}
