//! Stop reasons and outcomes: one vocabulary for the CSV, the transcript and the
//! summary, shared by the loop that decides them and every reader of the reports.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a task's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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
    /// The model repeated the same calls with the same results (`limits.max_repeats`)
    /// after it was warned: the agent's doing, so its outcome is the check's or
    /// `unchecked`, never `error`.
    Stuck,
    ProviderError,
    RateLimited,
    LedgerError,
    ToolSetupError,
    Cancelled,
    /// A bug in agentbatch (the task's code panicked): never mistaken for a Ctrl-C.
    InternalError,
    /// The suite's verifier could not run (its container, the engine): no verdict.
    VerifierError,
}

impl StopReason {
    pub const ALL: [StopReason; 18] = [
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
        StopReason::Stuck,
        StopReason::ProviderError,
        StopReason::RateLimited,
        StopReason::LedgerError,
        StopReason::ToolSetupError,
        StopReason::Cancelled,
        StopReason::InternalError,
        StopReason::VerifierError,
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
            StopReason::Stuck => "stuck",
            StopReason::ProviderError => "provider_error",
            StopReason::RateLimited => "rate_limited",
            StopReason::LedgerError => "ledger_error",
            StopReason::ToolSetupError => "tool_setup_error",
            StopReason::Cancelled => "cancelled",
            StopReason::InternalError => "internal_error",
            StopReason::VerifierError => "verifier_error",
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
                | StopReason::VerifierError
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_is_snake_case_and_complete() {
        for r in StopReason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            assert_eq!(StopReason::parse(r.as_str()), Some(r));
        }
    }

    #[test]
    fn stuck_is_the_agents_doing_like_max_turns() {
        let s = StopReason::Stuck;
        assert_eq!(s.as_str(), "stuck");
        assert!(!s.is_infra(), "resume must not run it again");
        assert!(!s.is_budget(), "more budget would not have helped");
        assert_eq!(s.unchecked_outcome(), Outcome::Unchecked);
        assert_eq!(
            s.unchecked_outcome(),
            StopReason::MaxTurns.unchecked_outcome()
        );
    }
}
