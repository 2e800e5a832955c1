//! The limits every layer speaks of: a task's own limits, per-minute rate limits, and
//! the calendar periods of team caps.

use std::time::Duration;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// The limits of one task, resolved from the job file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limits {
    pub max_turns: u32,
    #[serde(with = "humantime_serde_compat")]
    pub time_limit: Duration,
    /// Prompt tokens (input, cache reads and cache writes) summed over the task.
    pub max_input_tokens: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub max_cost_usd: Option<Decimal>,
    /// Below this max_tokens a shrunk request is not worth sending.
    pub min_max_tokens: u32,
    /// Send the last request the budgets allow with tools off and a note to finish.
    pub wrap_up: bool,
    /// Tell the model its remaining budget before every request.
    pub show_budget: bool,
}

mod humantime_serde_compat {
    use serde::Serializer;
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// Calendar periods of team caps, in UTC; weeks start on Monday.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Week,
    Month,
}

/// Per-minute rate limits (requests, input tokens, output tokens) and how much of them
/// may be used at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RateLimits {
    pub rpm: Option<u32>,
    pub itpm: Option<u32>,
    pub otpm: Option<u32>,
    /// The burst allowance, as a span of the rate (1s: one second's worth).
    #[serde(serialize_with = "humantime_serde_compat::serialize")]
    pub burst: Duration,
}

impl RateLimits {
    pub fn is_empty(&self) -> bool {
        self.rpm.is_none() && self.itpm.is_none() && self.otpm.is_none()
    }
}
