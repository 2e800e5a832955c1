//! Keeping the prompt inside the context window without a model call: old tool results
//! are replaced with a short placeholder in what the model is sent (the transcript keeps
//! every original). One compaction clears all but the newest results in one step, so
//! the cached prefix breaks once, not on every turn.

use serde_json::Value;

use super::conversation::Conversation;
use super::len_of;
use super::protocol::{results_in, Wire};
use crate::vocab::context::ContextEdits;

/// What replaces a cleared result; also how a cleared one is recognised.
const CLEARED: &str =
    "[agentbatch: this tool result was cleared to keep the prompt inside the context window";

/// The most bytes a token is taken to cover, for a lower bound on a prompt: far above
/// the three to five bytes a token that tokenizers average on text, code and JSON.
pub const MAX_BYTES_PER_TOKEN: u64 = 32;

/// What one compaction did, with the prompt estimates around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleared {
    pub results: usize,
    pub bytes: u64,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// Where one tool result sits in the native history, and the tool that made it.
struct Slot {
    entry: usize,
    /// The block within an Anthropic user message.
    block: Option<usize>,
    tool: String,
    bytes: u64,
}

impl Conversation {
    /// The prompt size the next request is expected to have: the last answer's count,
    /// the bytes appended since at the last request's tokens per byte, less what
    /// compaction removed. An estimate for deciding when to compact, not the bound the
    /// budgets use.
    pub fn context_estimate(&self) -> u64 {
        let Some(last) = self.last_prompt_tokens else {
            return self.estimate_prompt_tokens();
        };
        let added = (self.bytes_since as f64 * self.tokens_per_byte()) as u64;
        last.saturating_add(added)
            .saturating_sub(self.compacted_tokens)
    }

    /// A lower bound on the next prompt's tokens before any answer has said how many
    /// a prompt of this conversation is: its body at [`MAX_BYTES_PER_TOKEN`], and at
    /// least one token. Only a prompt that cannot fit even at this size is stopped
    /// before the provider sees it (a refusal of a first request is not billed).
    pub fn prompt_floor(&self) -> u64 {
        (self.body(u32::MAX).len() as u64)
            .div_ceil(MAX_BYTES_PER_TOKEN)
            .max(1)
    }

    /// The last answer's prompt tokens per byte of its body (at most one), which
    /// scales bytes to the estimates compaction works with.
    pub(super) fn tokens_per_byte(&self) -> f64 {
        match (self.last_prompt_tokens, self.last_body_bytes) {
            (Some(t), b) if b > 0 => (t as f64 / b as f64).min(1.0),
            _ => 1.0,
        }
    }

    /// Whether an answer has said how many tokens a prompt of this conversation is: the
    /// first request's size is only known as an upper bound.
    pub fn calibrated(&self) -> bool {
        self.last_prompt_tokens.is_some()
    }

    /// Clears every tool result but the newest `keep` and those of `exempt` tools.
    /// None when nothing was left to clear.
    pub fn clear_tool_results(&mut self, keep: usize, exempt: &[String]) -> Option<Cleared> {
        let wire = self.wire;
        let names = tool_names(wire, &self.history);
        let mut slots = result_slots(wire, &self.history, &names);
        let keep_from = slots.len().saturating_sub(keep);
        slots.truncate(keep_from);
        slots.retain(|s| !exempt.contains(&s.tool));
        let per_byte = self.tokens_per_byte();
        let before = self.context_estimate();
        let (mut results, mut bytes, mut first) = (0, 0u64, usize::MAX);
        for s in &slots {
            let note = format!(
                "{CLEARED}; it was {} bytes. Call the tool again if you need it.]",
                s.bytes
            );
            if s.bytes <= note.len() as u64 {
                continue;
            }
            let target = self.history.get_mut(s.entry);
            let Some(target) = target.and_then(|e| wire.result_content_mut(e, s.block)) else {
                continue;
            };
            *target = Value::String(note.clone());
            results += 1;
            bytes += s.bytes - note.len() as u64;
            first = first.min(s.entry);
        }
        if results == 0 {
            return None;
        }
        // Entries from the first changed one must be encoded again, and the cached
        // prefix now ends before it: the next request cannot read the old one whole.
        self.encoded.truncate(first);
        self.cached_prefix = 0;
        self.compacted_tokens = self
            .compacted_tokens
            .saturating_add((bytes as f64 * per_byte) as u64);
        Some(Cleared {
            results,
            bytes,
            tokens_before: before,
            tokens_after: self.context_estimate(),
        })
    }

    /// After an answer with a `compaction` item at `c` in the history (the Responses
    /// API's server-side compaction), the items before it are not sent again: the
    /// item stands for them (the API's guide allows dropping them). What went, for the
    /// compaction event; None when nothing was before it.
    pub(super) fn after_server_compaction(&mut self, c: usize) -> Option<ContextEdits> {
        if c == 0 {
            return None;
        }
        let per_byte = self.tokens_per_byte();
        let gone: Vec<Value> = self.history.drain(..c).collect();
        let results: usize = gone.iter().map(|e| results_in(self.wire, e)).sum();
        let bytes: u64 = gone.iter().map(len_of).sum();
        self.encoded.drain(..c.min(self.encoded.len()));
        self.cached_tail = None;
        // The answer's count may or may not include what was compacted: the estimate
        // leaves it out, the budgets' bound keeps it.
        let tokens = (bytes as f64 * per_byte) as u64;
        self.compacted_tokens = self.compacted_tokens.saturating_add(tokens);
        Some(ContextEdits {
            tool_uses: results as u64,
            input_tokens: tokens,
        })
    }
}

/// Tool names by call id, from the assistant turns.
fn tool_names(wire: &dyn Wire, history: &[Value]) -> std::collections::HashMap<String, String> {
    let mut names = std::collections::HashMap::new();
    let mut add = |id: &Value, name: &Value| {
        if let (Some(i), Some(n)) = (id.as_str(), name.as_str()) {
            names.insert(i.to_string(), n.to_string());
        }
    };
    for e in history {
        wire.call_names(e, &mut add);
    }
    names
}

/// Every tool result not cleared yet, oldest first.
fn result_slots(
    wire: &dyn Wire,
    history: &[Value],
    names: &std::collections::HashMap<String, String>,
) -> Vec<Slot> {
    let mut out = Vec::new();
    let cleared = |v: &Value| v.as_str().is_some_and(|s| s.starts_with(CLEARED));
    let name = |id: &Value| {
        id.as_str()
            .and_then(|i| names.get(i))
            .cloned()
            .unwrap_or_default()
    };
    for (entry, e) in history.iter().enumerate() {
        wire.result_contents(e, &mut |block, id, content| {
            if !cleared(content) {
                out.push(Slot {
                    entry,
                    block,
                    tool: name(id),
                    bytes: len_of(content),
                });
            }
        });
    }
    out
}
