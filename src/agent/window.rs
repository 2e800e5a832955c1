//! Keeping the next request inside the model's context window: compact before it would
//! pass the task's threshold (the cheapest way first: clear old tool results, then ask
//! the model for a summary), and stop `context_window` (before sending anything) only
//! when compaction cannot make it fit.

use super::stop::check_turn_and_clock;
use super::Loop;
use crate::model::Conversation;
use crate::vocab::context::{ContextEdits, ContextStrategy};
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::TranscriptEvent;

/// The least a summary request asks for, however little room the window leaves.
const MIN_SUMMARY_TOKENS: u32 = 512;

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
    pub(super) async fn keep_inside_window(
        &mut self,
        conv: &mut Conversation,
        forced: bool,
    ) -> Result<(), Stop> {
        // Before any answer there are no tool results to clear, and the size is only an
        // upper bound (about four times the real count): send, and let the provider say
        // if it is too long.
        if !conv.calibrated() && !forced {
            return Ok(());
        }
        let policy = &self.spec.context;
        let (strategy, threshold) = (policy.strategy, policy.threshold(self.spec.max_tokens));
        let over = |c: &Conversation| threshold.is_some_and(|t| c.context_estimate() > t);
        if !(over(conv) || forced) {
            return Ok(());
        }
        let mut compacted = strategy.clears() && self.clear_results(conv, self.meter.turns + 1);
        // A summary is worth a turn only if a turn is left after it.
        let turn_left = self.meter.turns.saturating_add(2) <= self.spec.limits.max_turns;
        if strategy.summarizes() && turn_left && (over(conv) || (forced && !compacted)) {
            compacted |= self.summarize(conv, forced).await?;
            if let Some(s) = check_turn_and_clock(
                &self.spec.limits,
                self.meter.turns,
                std::time::Instant::now(),
                self.deadline,
            ) {
                return Err(s);
            }
        }
        self.check_fits(conv, forced, compacted)
    }

    /// The provider refused a prompt as too long: clears old tool results if the
    /// strategy does (true: send again). A strategy that summarizes leaves the rest to
    /// the loop, which asks for a summary as a turn of its own.
    pub(super) fn refit(&mut self, conv: &mut Conversation, turn: u32) -> Result<bool, Stop> {
        let strategy = self.spec.context.strategy;
        if strategy.clears() && self.clear_results(conv, turn) {
            return Ok(true);
        }
        if strategy.summarizes() {
            self.refused_too_long = true;
            return Ok(false);
        }
        self.check_fits(conv, true, false).map(|()| false)
    }

    /// Clears old tool results; true when any was cleared.
    fn clear_results(&mut self, conv: &mut Conversation, turn: u32) -> bool {
        let policy = &self.spec.context;
        let Some(c) = conv.clear_tool_results(policy.keep, &policy.exempt) else {
            return false;
        };
        self.tally.compactions += 1;
        self.log.emit(TranscriptEvent::Compaction {
            turn,
            strategy: "clear_tool_results".into(),
            cleared_results: u32::try_from(c.results).unwrap_or(u32::MAX),
            cleared_bytes: c.bytes,
            tokens_before: c.tokens_before,
            tokens_after: c.tokens_after,
        });
        true
    }

    /// Asks the model for a summary (a turn of its own, charged to the task and its
    /// budgets like any other) and replaces the older turns with it: the newest `keep`
    /// turns stay whole unless the prompt is still over the threshold with them.
    /// Ok(false) when there was nothing to summarize. `forced`: the provider refused
    /// the prompt as too long, so the summary request (which is longer) is sent with its
    /// old tool results cleared.
    async fn summarize(&mut self, conv: &mut Conversation, forced: bool) -> Result<bool, Stop> {
        let Some(mut ask) = conv.summary_request() else {
            return Ok(false);
        };
        if forced {
            let policy = &self.spec.context;
            ask.clear_tool_results(policy.keep, &policy.exempt);
        }
        let max_tokens = self.summary_max_tokens(&ask);
        let mut answered = self.request(&mut ask, max_tokens).await;
        // A summary request refused as too long (the history jumped past the window in
        // one turn) goes once more with its old tool results cleared; it is never
        // summarized itself.
        if std::mem::take(&mut self.refused_too_long) && !forced {
            let policy = &self.spec.context;
            if ask
                .clear_tool_results(policy.keep, &policy.exempt)
                .is_some()
            {
                let max_tokens = self.summary_max_tokens(&ask);
                answered = self.request(&mut ask, max_tokens).await;
            }
        }
        self.refused_too_long = false;
        let turn = answered.map_err(|mut s| {
            s.detail = format!(
                "while asking the model for a summary of the history: {}",
                s.detail
            );
            s
        })?;
        if turn.text.trim().is_empty() {
            return Err(Stop::new(
                StopReason::ContextWindow,
                format!(
                    "the model was asked for a summary of the history to stay inside the context window, and answered without text (stop: {:?}); use context.strategy: clear_tool_results, or a larger max_tokens",
                    turn.stop
                ),
            ));
        }
        let policy = &self.spec.context;
        let threshold = policy.threshold(self.spec.max_tokens);
        let Some(mut done) = conv.replace_with_summary(&turn.text, policy.keep, &ask) else {
            return Ok(false);
        };
        if threshold.is_some_and(|t| done.tokens_after > t) {
            // The kept turns alone are too large: the summary goes on without them.
            if let Some(more) = conv.replace_with_summary(&turn.text, 0, &ask) {
                done.turns += more.turns;
                done.results += more.results;
                done.bytes = done.bytes.saturating_add(more.bytes);
                done.tokens_after = more.tokens_after;
            }
        }
        self.tally.compactions += 1;
        self.log.emit(TranscriptEvent::Compaction {
            turn: self.meter.turns,
            strategy: "summarize".into(),
            cleared_results: u32::try_from(done.results).unwrap_or(u32::MAX),
            cleared_bytes: done.bytes,
            tokens_before: done.tokens_before,
            tokens_after: done.tokens_after,
        });
        Ok(true)
    }

    /// The output limit of a summary request: the task's, or less when that would not
    /// fit the window beside the prompt (a summary needs less room than a turn may;
    /// with thinking on, the limit must stay above its budget).
    fn summary_max_tokens(&self, ask: &Conversation) -> u32 {
        let task = self.spec.max_tokens;
        let Some(window) = self.spec.context.window else {
            return task;
        };
        if self.spec.thinking_budget.is_some() {
            return task;
        }
        // The estimate is not a bound: leave an eighth of it spare.
        let prompt = ask.context_estimate();
        let room = window.saturating_sub(prompt.saturating_add(prompt / 8));
        let room = u32::try_from(room).unwrap_or(u32::MAX);
        task.min(room.max(MIN_SUMMARY_TOKENS))
    }

    /// Err(context_window) when the next request cannot fit the window. With the
    /// provider's own context management only its refusal says so: it compacts what
    /// the runner sends.
    fn check_fits(&self, conv: &Conversation, forced: bool, compacted: bool) -> Result<(), Stop> {
        let policy = &self.spec.context;
        if policy.strategy == ContextStrategy::Native && !forced {
            return Ok(());
        }
        let max_tokens = self.spec.max_tokens;
        let after = conv.context_estimate();
        let too_long = forced || policy.fits(max_tokens).is_some_and(|fits| after > fits);
        if !too_long || compacted {
            return Ok(());
        }
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
            ContextStrategy::Auto | ContextStrategy::Summarize => {
                "neither clearing old tool results nor a summary left anything more to compact"
                    .to_string()
            }
        };
        Err(Stop::new(
            StopReason::ContextWindow,
            format!(
                "the next request (a prompt of about {after} tokens and max_tokens {max_tokens}) does not fit {window} context window of {}, and {how}",
                self.spec.model
            ),
        ))
    }
}
