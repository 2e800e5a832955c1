//! Stop reasons and outcomes (one vocabulary for the CSV, the transcript and the
//! summary) and the pure decisions of the loop: may another request go out, and what
//! does the model's stop signal mean.

use std::fmt;
use std::time::Instant;

use serde::Serialize;

use crate::govern::budget::Limits;
use crate::model::ModelStop;

/// Why a task's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Completed,
    MaxTurns,
    TimeLimit,
    TokenLimit,
    CostLimit,
    TeamBudget,
    RunBudget,
    ModelMaxTokens,
    Refusal,
    ContextWindow,
    ProviderError,
    RateLimited,
    LedgerError,
    ToolSetupError,
    Cancelled,
    /// A bug in agentbatch (the task's code panicked): never mistaken for a Ctrl-C.
    InternalError,
}

impl StopReason {
    pub const ALL: [StopReason; 16] = [
        StopReason::Completed,
        StopReason::MaxTurns,
        StopReason::TimeLimit,
        StopReason::TokenLimit,
        StopReason::CostLimit,
        StopReason::TeamBudget,
        StopReason::RunBudget,
        StopReason::ModelMaxTokens,
        StopReason::Refusal,
        StopReason::ContextWindow,
        StopReason::ProviderError,
        StopReason::RateLimited,
        StopReason::LedgerError,
        StopReason::ToolSetupError,
        StopReason::Cancelled,
        StopReason::InternalError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::MaxTurns => "max_turns",
            StopReason::TimeLimit => "time_limit",
            StopReason::TokenLimit => "token_limit",
            StopReason::CostLimit => "cost_limit",
            StopReason::TeamBudget => "team_budget",
            StopReason::RunBudget => "run_budget",
            StopReason::ModelMaxTokens => "model_max_tokens",
            StopReason::Refusal => "refusal",
            StopReason::ContextWindow => "context_window",
            StopReason::ProviderError => "provider_error",
            StopReason::RateLimited => "rate_limited",
            StopReason::LedgerError => "ledger_error",
            StopReason::ToolSetupError => "tool_setup_error",
            StopReason::Cancelled => "cancelled",
            StopReason::InternalError => "internal_error",
        }
    }

    /// The stop reason written as `s` in a report, if it is one.
    pub fn parse(s: &str) -> Option<StopReason> {
        StopReason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Whether the run, not the agent or the model's answer, failed the task: the
    /// outcome is `error`, and `run --resume` runs it again.
    pub fn is_infra(self) -> bool {
        matches!(
            self,
            StopReason::ProviderError
                | StopReason::RateLimited
                | StopReason::LedgerError
                | StopReason::ToolSetupError
                | StopReason::Cancelled
                | StopReason::InternalError
        )
    }

    /// Whether a budget or limit ended the loop, rather than the agent, the model or the
    /// infrastructure (summary.csv's `budget_decided`).
    pub fn is_budget(self) -> bool {
        matches!(
            self,
            StopReason::MaxTurns
                | StopReason::TimeLimit
                | StopReason::TokenLimit
                | StopReason::CostLimit
                | StopReason::TeamBudget
                | StopReason::RunBudget
        )
    }

    /// The outcome of a task that stopped this way and has no check command: the run
    /// itself failed for the infrastructure stops, else there is no verdict.
    pub fn unchecked_outcome(self) -> Outcome {
        if self.is_infra() {
            Outcome::Error
        } else {
            Outcome::Unchecked
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict on a task, separate from why its loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    Error,
    Unchecked,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Error => "error",
            Outcome::Unchecked => "unchecked",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A decision to stop, with the detail that goes into `stop_detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    pub reason: StopReason,
    pub detail: String,
}

impl Stop {
    pub fn new(reason: StopReason, detail: impl Into<String>) -> Stop {
        Stop {
            reason,
            detail: detail.into(),
        }
    }
}

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

    #[test]
    fn vocabulary_is_snake_case_and_complete() {
        for r in StopReason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }
}
