//! Keeping the next request inside the model's context window: compact before it would
//! pass the task's threshold, and stop `context_window` (before sending anything) only
//! when compaction cannot make it fit.

use super::Loop;
use crate::model::Conversation;
use crate::vocab::context::{ContextEdits, ContextStrategy};
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::TranscriptEvent;

impl Loop<'_> {
    /// Records what the provider's own context editing cleared for this answer.
    pub(super) fn note_context_edits(&mut self, edits: Option<ContextEdits>, prompt_tokens: u64) {
        let Some(e) = edits else {
            return;
        };
        self.tally.compactions += 1;
        self.log.emit(TranscriptEvent::Compaction {
            turn: self.meter.turns,
            strategy: "native".into(),
            cleared_results: u32::try_from(e.tool_uses).unwrap_or(u32::MAX),
            cleared_bytes: 0,
            tokens_before: prompt_tokens.saturating_add(e.input_tokens),
            tokens_after: prompt_tokens,
        });
    }

    /// Compacts the prompt if the next request would pass the threshold; Err when it
    /// cannot fit the window even so. `forced`: the provider refused the prompt as too
    /// long, so compact whatever the estimate says.
    /// `turn` is the request's turn number (the compaction event's).
    pub(super) fn keep_inside_window(
        &mut self,
        conv: &mut Conversation,
        turn: u32,
        forced: bool,
    ) -> Result<bool, Stop> {
        // Before any answer there are no tool results to clear, and the size is only an
        // upper bound (about four times the real count): send, and let the provider say
        // if it is too long.
        if !conv.calibrated() && !forced {
            return Ok(false);
        }
        let policy = &self.spec.context;
        let max_tokens = self.spec.max_tokens;
        let before = conv.context_estimate();
        let over = policy.threshold(max_tokens).is_some_and(|t| before > t);
        if !(over || forced) {
            return Ok(false);
        }
        let mut compacted = false;
        if policy.strategy == ContextStrategy::ClearToolResults {
            if let Some(c) = conv.clear_tool_results(policy.keep, &policy.exempt) {
                compacted = true;
                self.tally.compactions += 1;
                self.log.emit(TranscriptEvent::Compaction {
                    turn,
                    strategy: "clear_tool_results".into(),
                    cleared_results: u32::try_from(c.results).unwrap_or(u32::MAX),
                    cleared_bytes: c.bytes,
                    tokens_before: c.tokens_before,
                    tokens_after: c.tokens_after,
                });
            }
        }
        let after = if compacted {
            conv.context_estimate()
        } else {
            before
        };
        let too_long = match policy.fits(max_tokens) {
            Some(fits) => after > fits,
            None => forced,
        };
        if too_long && !compacted {
            let window = policy
                .window
                .map_or("the model's".to_string(), |w| format!("the {w}-token"));
            let how = match policy.strategy {
                ContextStrategy::Off => "compaction is off (context.strategy: off)".to_string(),
                ContextStrategy::Native => {
                    "the provider's context editing (context.strategy: native) did not clear enough"
                        .to_string()
                }
                ContextStrategy::ClearToolResults => format!(
                    "clearing old tool results left nothing more to clear (context.keep: {})",
                    policy.keep
                ),
            };
            return Err(Stop::new(
                StopReason::ContextWindow,
                format!(
                    "the next request (a prompt of about {after} tokens and max_tokens {max_tokens}) does not fit {window} context window of {}, and {how}",
                    self.spec.model
                ),
            ));
        }
        Ok(compacted)
    }
}
