//! The pure decisions of the loop: may another request go out, and what does the
//! model's stop signal mean. The stop vocabulary itself is `vocab::stop`.

use std::time::Instant;

use crate::model::ModelStop;
use crate::vocab::limits::Limits;
use crate::vocab::stop::{Stop, StopReason};

/// Turn count and wall clock: may another request be sent?
pub fn check_turn_and_clock(
    limits: &Limits,
    turns_done: u32,
    now: Instant,
    deadline: Instant,
) -> Option<Stop> {
    if turns_done >= limits.max_turns {
        return Some(Stop::new(
            StopReason::MaxTurns,
            format!("made {turns_done} model requests, the limit (max_turns)"),
        ));
    }
    if now >= deadline {
        return Some(Stop::new(
            StopReason::TimeLimit,
            format!(
                "time_limit of {} reached",
                humantime::format_duration(limits.time_limit)
            ),
        ));
    }
    None
}

/// What the loop does after a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    RunTools,
    /// `pause_turn`: send the conversation back unchanged.
    Resend,
    Stop(Stop),
}

/// Maps the model's stop signal to the loop's next step. Anything unexpected is a
/// provider error, never a success.
pub fn after_response(stop: &ModelStop, tool_calls: usize) -> Next {
    match stop {
        ModelStop::EndTurn if tool_calls > 0 => Next::Stop(Stop::new(
            StopReason::Completed,
            format!("end_turn; the answer's {tool_calls} tool call(s) were not run"),
        )),
        ModelStop::EndTurn => Next::Stop(Stop::new(StopReason::Completed, "end_turn")),
        ModelStop::StopSequence(s) => Next::Stop(Stop::new(
            StopReason::Completed,
            format!("stop_sequence {}", s.as_deref().unwrap_or(""))
                .trim_end()
                .to_string(),
        )),
        ModelStop::ToolUse if tool_calls > 0 => Next::RunTools,
        ModelStop::ToolUse => Next::Stop(Stop::new(
            StopReason::ProviderError,
            "the model said it wants tools (stop_reason tool_use, finish_reason tool_calls) but sent no tool call",
        )),
        ModelStop::PauseTurn => Next::Resend,
        ModelStop::MaxTokens => {
            let mut d = "the response hit max_tokens".to_string();
            if tool_calls > 0 {
                d.push_str(&format!(
                    "; {tool_calls} tool call(s) not run since their input may be truncated"
                ));
            }
            Next::Stop(Stop::new(StopReason::ModelMaxTokens, d))
        }
        ModelStop::Refusal(detail) => Next::Stop(Stop::new(
            StopReason::Refusal,
            detail.clone().unwrap_or_else(|| "the model refused".into()),
        )),
        ModelStop::ContextWindow => Next::Stop(Stop::new(
            StopReason::ContextWindow,
            "model_context_window_exceeded",
        )),
        ModelStop::Unknown(s) => Next::Stop(Stop::new(
            StopReason::ProviderError,
            format!("unexpected stop signal from the provider: {s} (not treated as success)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            max_turns: 3,
            time_limit: Duration::from_secs(60),
            max_input_tokens: None,
            max_output_tokens: None,
            max_cost_usd: None,
            min_max_tokens: 1,
            wrap_up: false,
            show_budget: false,
            max_repeats: Some(3),
        }
    }

    #[test]
    fn turn_and_clock() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        assert_eq!(check_turn_and_clock(&limits(), 2, now, later), None);
        assert_eq!(
            check_turn_and_clock(&limits(), 3, now, later)
                .unwrap()
                .reason,
            StopReason::MaxTurns
        );
        assert_eq!(
            check_turn_and_clock(&limits(), 0, later, now)
                .unwrap()
                .reason,
            StopReason::TimeLimit
        );
    }

    #[test]
    fn stop_signals() {
        assert_eq!(after_response(&ModelStop::ToolUse, 2), Next::RunTools);
        assert_eq!(after_response(&ModelStop::PauseTurn, 0), Next::Resend);
        let s = |n: Next| match n {
            Next::Stop(s) => s.reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            s(after_response(&ModelStop::EndTurn, 0)),
            StopReason::Completed
        );
        assert_eq!(
            s(after_response(&ModelStop::ToolUse, 0)),
            StopReason::ProviderError
        );
        assert_eq!(
            s(after_response(&ModelStop::MaxTokens, 1)),
            StopReason::ModelMaxTokens
        );
        assert_eq!(
            s(after_response(&ModelStop::Refusal(None), 0)),
            StopReason::Refusal
        );
        assert_eq!(
            s(after_response(&ModelStop::ContextWindow, 0)),
            StopReason::ContextWindow
        );
        assert_eq!(
            s(after_response(&ModelStop::Unknown("x".into()), 0)),
            StopReason::ProviderError
        );
        assert_eq!(
            s(after_response(
                &ModelStop::StopSequence(Some("END".into())),
                0
            )),
            StopReason::Completed
        );
    }
}
