//! Budget-aware wrap-up (`limits.wrap_up`) and the budget shown to the model
//! (`limits.show_budget`): notes the harness adds to the last user message before a
//! new turn.

use std::time::Instant;

use rust_decimal::Decimal;

use super::Loop;
use crate::model::Conversation;
use crate::vocab::transcript::TranscriptEvent;

/// Appended to the last request the budgets allow, which goes out with tools off.
pub const WRAP_UP_NOTE: &str = "[agentbatch] This is your last turn: the budget allows no more requests after this one, and tools are disabled. Finish now: give your final answer, and summarize what you did and what is left undone.";

impl Loop<'_> {
    /// Before a new turn: tells the model its budget, and turns the last request the
    /// budgets allow into a wrap-up.
    pub(super) fn prepare_turn(&mut self, conv: &mut Conversation) {
        let limits = &self.spec.limits;
        if limits.show_budget {
            let note = self.budget_note();
            conv.append_user_text(&note);
        }
        if limits.wrap_up {
            if let Some(why) = self.last_request(conv) {
                conv.tools_off();
                let noted = conv.append_user_text(WRAP_UP_NOTE);
                self.log.emit(TranscriptEvent::WrapUp {
                    why: why.to_string(),
                    note_added: noted,
                    tool_choice: "none".to_string(),
                });
            }
        }
    }

    /// Which budget makes the next request the last one, if any.
    fn last_request(&self, conv: &Conversation) -> Option<&'static str> {
        let l = &self.spec.limits;
        if self.meter.turns + 1 >= l.max_turns {
            return Some("max_turns");
        }
        // Time: less than twice the slowest request so far remains.
        let left = self.deadline.saturating_duration_since(Instant::now());
        if !self.tally.longest_request.is_zero() && left < self.tally.longest_request * 2 {
            return Some("time_limit");
        }
        // Money: after this request at worst case, not even the smallest next one fits.
        if let (Some(cap), Some(price)) = (l.max_cost_usd, self.spec.price.as_ref()) {
            let prompt = conv.estimate_prompt_tokens();
            let this = price.worst_case(prompt, u64::from(self.spec.max_tokens));
            // The prompt bound rests on the provider's usage figures: saturate.
            let next_prompt = prompt
                .saturating_add(u64::from(self.spec.max_tokens))
                .saturating_add(64);
            let floor = l.min_max_tokens.min(self.spec.max_tokens);
            let next = price.worst_case(next_prompt, u64::from(floor));
            if cap - self.meter.cost - this < next {
                return Some("max_cost_usd");
            }
        }
        None
    }

    fn budget_note(&self) -> String {
        let l = &self.spec.limits;
        let mut parts = vec![format!(
            "{} model request(s) left including this one",
            l.max_turns.saturating_sub(self.meter.turns)
        )];
        let left = self.deadline.saturating_duration_since(Instant::now());
        parts.push(format!(
            "{} of time left",
            humantime::format_duration(std::time::Duration::from_secs(left.as_secs()))
        ));
        if let Some(cap) = l.max_cost_usd {
            parts.push(format!(
                "${:.4} of ${} left",
                (cap - self.meter.cost).max(Decimal::ZERO),
                cap.normalize()
            ));
        }
        format!("[agentbatch] Budget: {}.", parts.join("; "))
    }
}
