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
    /// Identical steps in a row (same calls, same results) after which the model is
    /// warned, and stopped with `stuck` if it goes on; None when the check is off.
    #[serde(serialize_with = "max_repeats_compat::serialize")]
    pub max_repeats: Option<u32>,
}

mod max_repeats_compat {
    use serde::Serializer;
    pub fn serialize<S: Serializer>(n: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
        match n {
            Some(n) => s.serialize_u32(*n),
            None => s.serialize_str(OFF),
        }
    }
    pub const OFF: &str = "off";
}

/// `limits.max_repeats` as a job file writes it: a count from 2, or the word `off`.
/// Zero is refused rather than read as off, so that `0` never silently means "no
/// check" to one reader and "stop at once" to another; 1 is refused since one turn is
/// no repeat (it would warn after every call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxRepeats {
    Off,
    Times(u32),
}

impl MaxRepeats {
    /// The count the loop checks against, None when off.
    pub fn times(self) -> Option<u32> {
        match self {
            MaxRepeats::Off => None,
            MaxRepeats::Times(n) => Some(n),
        }
    }
}

impl Serialize for MaxRepeats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        max_repeats_compat::serialize(&self.times(), s)
    }
}

impl<'de> Deserialize<'de> for MaxRepeats {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MaxRepeats, D::Error> {
        d.deserialize_any(RepeatsVisitor)
    }
}

struct RepeatsVisitor;

impl serde::de::Visitor<'_> for RepeatsVisitor {
    type Value = MaxRepeats;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "a whole number from 2 to {}, or `off`",
            crate::vocab::bounds::REPEATS
        )
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<MaxRepeats, E> {
        let max = crate::vocab::bounds::REPEATS;
        if n == 0 {
            return Err(E::custom(
                "0 is not a number of repeats: write `off` to turn the check off, or at least 2",
            ));
        }
        if n == 1 {
            return Err(E::custom(
                "1 would warn after every call (one turn is no repeat): use at least 2, or `off`",
            ));
        }
        if n > max {
            return Err(E::custom(format!("{n} is too large: at most {max}")));
        }
        u32::try_from(n)
            .map(MaxRepeats::Times)
            .map_err(|_| E::custom(format!("{n} is too large for this machine")))
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<MaxRepeats, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!(
                "{n} is negative: use 2 to {} or `off`",
                crate::vocab::bounds::REPEATS
            ))),
        }
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MaxRepeats, E> {
        if s == max_repeats_compat::OFF {
            Ok(MaxRepeats::Off)
        } else {
            Err(E::custom(format!(
                "\"{}\" is not a number of repeats: use 2 to {} or `off`",
                crate::text::prefix(s, crate::text::QUOTE_CHARS),
                crate::vocab::bounds::REPEATS
            )))
        }
    }
    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<MaxRepeats, E> {
        Err(E::custom(format!(
            "{b} is not a number of repeats: use 2 to {} or `off`",
            crate::vocab::bounds::REPEATS
        )))
    }
}

mod humantime_serde_compat {
    use serde::Serializer;
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// What a task does when a team's period cap cannot pay for its next request.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnCap {
    /// Stop with `team_budget` (a resume runs it again with `--retry-budget-stops`).
    #[default]
    Stop,
    /// Wait, holding no reservation, until the period rolls over or the cap is raised
    /// (`agentbatch ledger set-cap`), within the task's time limit and the run's
    /// `--until`; then carry on with the same conversation.
    Wait,
}

/// Calendar periods of team caps, in UTC; weeks start on Monday.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema)]
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

/// The per-minute limits a provider states on its answers (`*-limit` headers), which
/// the runner paces to where the job configures none. `tpm` is a limit on input and
/// output tokens together (OpenAI's `x-ratelimit-limit-tokens`, or Anthropic's combined
/// `tokens` window when it states no separate ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatedLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itpm: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otpm: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u32>,
}

impl StatedLimits {
    pub fn is_empty(&self) -> bool {
        *self == StatedLimits::default()
    }

    /// What of these limits an answer that `accepted` this many tokens can have meant:
    /// a token limit below what it just took is a contradiction (paced to, it would hold
    /// every later request of that size for minutes), so that window states nothing.
    pub fn consistent_with(&self, accepted: TokenCount) -> StatedLimits {
        let fits = |limit: Option<u32>, n: u64| limit.filter(|l| u64::from(*l) >= n);
        StatedLimits {
            rpm: self.rpm,
            itpm: fits(self.itpm, accepted.input),
            otpm: fits(self.otpm, accepted.output),
            tpm: fits(self.tpm, accepted.input + accepted.output),
        }
    }

    /// "4000 rpm, 400000 itpm": the limits stated, for people.
    pub fn describe(&self) -> String {
        [
            ("rpm", self.rpm),
            ("itpm", self.itpm),
            ("otpm", self.otpm),
            ("tpm", self.tpm),
        ]
        .iter()
        .filter_map(|(name, v)| v.map(|v| format!("{v} {name}")))
        .collect::<Vec<_>>()
        .join(", ")
    }
}

/// Tokens as a provider's per-minute limits count them: what one request takes from the
/// gates, and what the provider counted once it answered (the gates correct the one to
/// the other).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCount {
    pub input: u64,
    pub output: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_limit_below_what_the_answer_just_took_states_nothing() {
        let stated = StatedLimits {
            rpm: Some(50),
            itpm: Some(1),
            otpm: Some(8000),
            tpm: Some(3000),
        };
        let took = TokenCount {
            input: 2500,
            output: 600,
        };
        assert_eq!(
            stated.consistent_with(took),
            StatedLimits {
                rpm: Some(50),
                itpm: None,
                otpm: Some(8000),
                tpm: None,
            }
        );
        let small = TokenCount {
            input: 1,
            output: 10,
        };
        assert_eq!(stated.consistent_with(small), stated);
    }
}
