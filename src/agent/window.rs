//! Keeping the next request inside the model's context window: compact before it would
//! pass the task's threshold (the cheapest way first: clear old tool results, then ask
//! the model for a summary while a summary can still bring the prompt under the
//! threshold), and stop `context_window` before sending any request that cannot fit.

use super::stop::{after_response, check_turn_and_clock, Next};
use super::Loop;
use crate::model::{Conversation, MAX_BYTES_PER_TOKEN};
use crate::vocab::context::{ContextEdits, ContextStrategy};
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::TranscriptEvent;

/// The least a summary request asks for, however little room the window leaves.
const MIN_SUMMARY_TOKENS: u32 = 512;

/// What the loop has learnt about summaries in this task.
#[derive(Debug, Default)]
pub(super) struct Summaries {
    /// Why no summary can help any more, once that is known: none is asked for after,
    /// and the stop that follows says this.
    futile: Option<String>,
    /// The turn of the last summary.
    last_turn: Option<u32>,
}

/// A request's size as the window decision sees it: its prompt (the estimate; before
/// any answer, a lower bound), the output it asks for, and the window.
#[derive(Debug)]
pub(super) struct RequestSize {
    prompt: u64,
    /// The prompt is a lower bound: no answer has said how large this conversation is.
    at_least: bool,
    max_tokens: u32,
    /// None: the job does not know the window (the provider's refusal decides).
    window: Option<u64>,
}

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
            threshold: None,
        });
    }

    /// Compacts the prompt if the next request would pass the threshold. `forced`: the
    /// provider refused the prompt as too long, so compact whatever the estimate says
    /// (Err when nothing could be compacted). Whether the request then fits is
    /// [`Loop::check_fits`]'s decision, made before every request.
    pub(super) async fn keep_inside_window(
        &mut self,
        conv: &mut Conversation,
        forced: bool,
    ) -> Result<(), Stop> {
        // Before any answer there are no tool results to clear, and the size is only
        // known between bounds: send, and let the provider say if it is too long.
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
        if strategy.summarizes()
            && self.summary_turn_left()
            && (over(conv) || (forced && !compacted))
            && self.summary_may_help(conv, forced)
        {
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
        if forced && !compacted {
            return Err(self.no_room(&self.measure(conv, self.spec.max_tokens)));
        }
        Ok(())
    }

    /// A summary is worth a turn only if a turn is left after it.
    fn summary_turn_left(&self) -> bool {
        self.meter.turns.saturating_add(2) <= self.spec.limits.max_turns
    }

    /// Whether a summary may still bring the prompt under the threshold. When it cannot
    /// (what a summary cannot replace is over the threshold alone, an earlier summary
    /// left the prompt over it, or the provider refused the prompt right after one),
    /// the reason is kept for the stop and no summary is asked for again.
    fn summary_may_help(&mut self, conv: &Conversation, forced: bool) -> bool {
        if self.summaries.futile.is_some() {
            return false;
        }
        let threshold = self.spec.context.threshold(self.spec.max_tokens);
        let futile = match (self.summaries.last_turn, threshold) {
            (Some(turn), _) if forced && turn + 1 == self.meter.turns => Some(format!(
                "the provider refused the prompt as too long right after the summary of turn {turn}, so no other is asked for"
            )),
            // Before any answer there is nothing to summarize, and no estimate.
            (_, Some(t)) if conv.calibrated() => {
                let floor = conv.summary_floor();
                (floor > t).then(|| format!(
                    "no summary can bring the prompt under the compaction threshold of {t} tokens: what a summary cannot replace (the tool declarations, the system prompt and the first message) is about {floor} tokens alone; shorten the prompt, or raise context.window or context.at"
                ))
            }
            _ => None,
        };
        self.summaries.futile = futile;
        self.summaries.futile.is_none()
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
        Err(self.no_room(&self.measure(conv, self.spec.max_tokens)))
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
            threshold: policy.threshold(self.spec.max_tokens),
        });
        true
    }

    /// Asks the model for a summary (a turn of its own, charged to the task and its
    /// budgets like any other) and replaces the older turns with it: the newest `keep`
    /// turns stay whole unless the prompt is still over the threshold with them.
    /// Ok(false) when there was nothing to summarize, or the summary request itself
    /// cannot fit. `forced`: the provider refused the prompt as too long, so the summary
    /// request (which is longer) is sent with its old tool results cleared, as it is
    /// when it would not fit whole.
    async fn summarize(&mut self, conv: &mut Conversation, forced: bool) -> Result<bool, Stop> {
        let Some(mut ask) = conv.summary_request() else {
            return Ok(false);
        };
        let mut max_tokens = self.summary_max_tokens(&ask);
        let mut compacted = false;
        // A summary request that cannot go whole goes with old tool results cleared, and
        // they are cleared in the history first: the prompt after a summary is bounded by
        // the summary request's, so the turns a summary keeps must go out as that request
        // sent them (before, the request alone was cleared, and the kept turns went out
        // whole, far above the bound and past the window: found by the chaos sweep).
        // Clearing may be enough on its own, and then no summary is asked for.
        if (forced || self.check_fits(&ask, max_tokens).is_err())
            && self.clear_results(conv, self.meter.turns + 1)
        {
            compacted = true;
            let threshold = self.spec.context.threshold(self.spec.max_tokens);
            if !forced && threshold.is_none_or(|t| conv.context_estimate() <= t) {
                return Ok(true);
            }
            match conv.summary_request() {
                Some(again) => ask = again,
                None => return Ok(true),
            }
            max_tokens = self.summary_max_tokens(&ask);
        }
        if let Err(o) = self.check_fits(&ask, max_tokens) {
            self.summaries.futile = Some(format!(
                "the summary request (a prompt of about {} tokens with old tool results cleared, and max_tokens {}) does not fit the window itself, so no summary can be asked for; lower context.at so that summaries come before the history is this large, or raise context.window",
                o.prompt, o.max_tokens
            ));
            return Ok(compacted);
        }
        let mut answered = self.request(&mut ask, max_tokens).await;
        // A summary request refused as too long (the history jumped past the window in
        // one turn) goes once more with its old tool results cleared (in the history
        // too, as above); it is never summarized itself.
        if std::mem::take(&mut self.refused_too_long) && !forced {
            let cleared = self.clear_results(conv, self.meter.turns + 1);
            compacted |= cleared;
            if let Some(again) = cleared.then(|| conv.summary_request()).flatten() {
                ask = again;
                max_tokens = self.summary_max_tokens(&ask);
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
        // The answer's stop means what it means on any turn: a summary refused, cut off
        // at max_tokens, or ended in a way this version does not know is not used.
        match after_response(&turn.stop, turn.calls.len()) {
            // Calls beside the summary are not run; its text is the summary.
            Next::RunTools => {}
            Next::Stop(s) if s.reason == StopReason::Completed => {}
            Next::Stop(mut s) => {
                let hint = match s.reason {
                    StopReason::ModelMaxTokens => format!(
                        " (its max_tokens was {max_tokens}: raise max_tokens or context.window, or use context.strategy: clear_tool_results)"
                    ),
                    _ => String::new(),
                };
                s.detail = format!(
                    "the model's answer to a summary request is not used as a summary: {}{hint}",
                    s.detail
                );
                return Err(s);
            }
            Next::Resend => {
                return Err(Stop::new(
                    StopReason::ContextWindow,
                    "the model paused its answer to a summary request (pause_turn): an unfinished summary is not used",
                ))
            }
        }
        if turn.text.trim().is_empty() {
            return Err(Stop::new(
                StopReason::ContextWindow,
                "the model was asked for a summary of the history to stay inside the context window, and answered without text; use context.strategy: clear_tool_results, or a larger max_tokens",
            ));
        }
        let policy = &self.spec.context;
        let threshold = policy.threshold(self.spec.max_tokens);
        let Some(mut done) = conv.replace_with_summary(&turn.text, policy.keep, &ask) else {
            return Ok(compacted);
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
        let turn_no = self.meter.turns;
        self.summaries.last_turn = Some(turn_no);
        if let Some(t) = threshold.filter(|t| done.tokens_after > *t) {
            self.summaries.futile = Some(format!(
                "the summary of turn {turn_no} left the prompt at about {} tokens, over the compaction threshold of {t} (what it cannot replace and the summary are that large together), so no other is asked for",
                done.tokens_after
            ));
        }
        self.tally.compactions += 1;
        self.log.emit(TranscriptEvent::Compaction {
            turn: turn_no,
            strategy: "summarize".into(),
            cleared_results: u32::try_from(done.results).unwrap_or(u32::MAX),
            cleared_bytes: done.bytes,
            tokens_before: done.tokens_before,
            tokens_after: done.tokens_after,
            threshold,
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

    /// Err when a request with `max_tokens` of answer cannot fit the window: its prompt
    /// (see [`Loop::measure`]) and max_tokens pass it.
    pub(super) fn check_fits(
        &self,
        conv: &Conversation,
        max_tokens: u32,
    ) -> Result<(), RequestSize> {
        let o = self.measure(conv, max_tokens);
        match o.window {
            Some(w) if o.prompt.saturating_add(u64::from(max_tokens)) > w => Err(o),
            _ => Ok(()),
        }
    }

    /// The next request's size as the window decision sees it. The prompt is the
    /// estimate compaction works with (not a bound: one it puts just inside may still
    /// be refused, and the refusal compacts and sends again), or before any answer a
    /// lower bound, so that only a first request that cannot fit at any tokenization
    /// is kept back. With the provider's own context management the prompt is what
    /// the provider makes of it: only a max_tokens that leaves no room for any prompt
    /// cannot fit.
    fn measure(&self, conv: &Conversation, max_tokens: u32) -> RequestSize {
        let policy = &self.spec.context;
        let (prompt, at_least) = match (policy.strategy, conv.calibrated()) {
            (ContextStrategy::Native, _) => (1, true),
            (_, true) => (conv.context_estimate(), false),
            (_, false) => (conv.prompt_floor(), true),
        };
        RequestSize {
            prompt,
            at_least,
            max_tokens,
            window: policy.window,
        }
    }

    /// The stop for a request that cannot fit, naming the window and saying why
    /// nothing more can be compacted.
    pub(super) fn no_room(&self, o: &RequestSize) -> Stop {
        let model = &self.spec.model;
        let (prompt, max_tokens) = (o.prompt, o.max_tokens);
        let window = o
            .window
            .map_or("the model's".to_string(), |w| format!("the {w}-token"));
        let detail = if o.window.is_some_and(|w| u64::from(max_tokens) >= w) {
            format!(
                "max_tokens {max_tokens} leaves no room for any prompt in {window} context window of {model}, so not even the first request was sent: lower max_tokens or raise context.window"
            )
        } else if o.at_least {
            format!(
                "the first request (a prompt of at least {prompt} tokens, counting {MAX_BYTES_PER_TOKEN} bytes a token, and max_tokens {max_tokens}) does not fit {window} context window of {model}, and nothing can be compacted before the first answer: shorten the prompt or the system prompt, or use a larger window"
            )
        } else {
            format!(
                "the next request (a prompt of about {prompt} tokens and max_tokens {max_tokens}) does not fit {window} context window of {model}, and {}",
                self.why_not_compacted()
            )
        };
        Stop::new(StopReason::ContextWindow, detail)
    }

    /// Why the strategy can make the prompt no smaller.
    fn why_not_compacted(&self) -> String {
        let policy = &self.spec.context;
        match policy.strategy {
            ContextStrategy::Off => "compaction is off (context.strategy: off)".to_string(),
            ContextStrategy::Native => {
                "the provider's context editing (context.strategy: native) did not clear enough"
                    .to_string()
            }
            ContextStrategy::ClearToolResults => format!(
                "clearing old tool results left nothing more to clear (context.keep: {})",
                policy.keep
            ),
            ContextStrategy::Auto | ContextStrategy::Summarize => match &self.summaries.futile {
                Some(why) => why.clone(),
                None if !self.summary_turn_left() => {
                    "no turn is left for a summary (limits.max_turns)".to_string()
                }
                None => {
                    "neither clearing old tool results nor a summary left anything more to compact"
                        .to_string()
                }
            },
        }
    }
}
