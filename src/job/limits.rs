//! A task's limits (turns, time, tokens, cost), merged field by field from the task
//! and `defaults`, and the price its cost caps need.

use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::origin;
use super::locate::Seg;
use super::schema::{JobFile, LimitFields, TaskFields};
use super::spec::TeamSpec;
use crate::model::Protocol;
use crate::vocab::limits::{Limits, MaxRepeats};
use crate::vocab::price::{self, Price};

const DEFAULT_MAX_TURNS: u32 = 20;
const DEFAULT_TIME_LIMIT: Duration = Duration::from_secs(30 * 60);
const DEFAULT_MIN_MAX_TOKENS: u32 = 256;
/// On by default: a loop that goes nowhere pays for every turn up to max_turns.
const DEFAULT_MAX_REPEATS: u32 = 3;

/// The task's limits as written, field by field from the task, else `defaults` (each
/// value on its own is checked where it is written, in fields.rs).
pub(super) fn merge_task_limits(t: &TaskFields, d: &TaskFields) -> LimitFields {
    merge_limits(t.limits.as_ref(), d.limits.as_ref())
}

/// The limits a task runs under: what was written, defaults for the rest.
pub(super) fn resolve_limits(l: &LimitFields) -> Limits {
    Limits {
        max_turns: l.max_turns.unwrap_or(DEFAULT_MAX_TURNS),
        time_limit: l.time_limit.map_or(DEFAULT_TIME_LIMIT, |d| d.0),
        max_input_tokens: l.max_input_tokens,
        max_output_tokens: l.max_output_tokens,
        max_cost_usd: l.max_cost_usd.map(|m| m.0),
        min_max_tokens: l.min_max_tokens.unwrap_or(DEFAULT_MIN_MAX_TOKENS),
        wrap_up: l.wrap_up.unwrap_or(false),
        show_budget: l.show_budget.unwrap_or(false),
        max_repeats: l
            .max_repeats
            .map_or(Some(DEFAULT_MAX_REPEATS), MaxRepeats::times),
    }
}

/// The model's price, which any cost cap over the task (its own, its team's, the
/// run's) needs to be enforced.
pub(super) fn resolve_price(
    job: &JobFile,
    model: &str,
    model_at: &[Seg],
    protocol: Option<Protocol>,
    l: &LimitFields,
    team: Option<&TeamSpec>,
    cx: &mut Ctx,
) -> Option<Price> {
    let price = price::lookup_for(&job.pricing, model, protocol.unwrap_or(Protocol::DEFAULT));
    let cost_cap = if l.max_cost_usd.is_some() {
        Some("limits.max_cost_usd")
    } else if team.is_some_and(|t| t.max_cost_usd.is_some() || t.cap.is_some()) {
        Some("its team's spend cap")
    } else if job.max_cost_usd.is_some() {
        Some("the run's max_cost_usd")
    } else {
        None
    };
    if let (Some(cap), None, false) = (cost_cap, &price, model.is_empty()) {
        cx.err(
            model_at,
            format!(
                "model \"{model}\" has no price, so {cap} cannot be enforced: add it under `pricing:` (USD per million tokens), e.g. pricing: {{ {model}: {{ input: 3, output: 15 }} }}"
            ),
        );
    }
    price
}

fn merge_limits(task: Option<&LimitFields>, defaults: Option<&LimitFields>) -> LimitFields {
    let t = task.cloned().unwrap_or_default();
    let d = defaults.cloned().unwrap_or_default();
    LimitFields {
        max_turns: t.max_turns.or(d.max_turns),
        time_limit: t.time_limit.or(d.time_limit),
        max_input_tokens: t.max_input_tokens.or(d.max_input_tokens),
        max_output_tokens: t.max_output_tokens.or(d.max_output_tokens),
        max_cost_usd: t.max_cost_usd.or(d.max_cost_usd),
        min_max_tokens: t.min_max_tokens.or(d.min_max_tokens),
        wrap_up: t.wrap_up.or(d.wrap_up),
        show_budget: t.show_budget.or(d.show_budget),
        max_repeats: t.max_repeats.or(d.max_repeats),
    }
}

/// Where a limit came from: the task's `limits` or those of `defaults`.
pub(super) fn limit_origin(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    field: &str,
    pick: impl Fn(&LimitFields) -> bool,
) -> Vec<Seg> {
    origin(
        i,
        t.limits.as_ref().is_some_and(&pick),
        d.limits.as_ref().is_some_and(&pick),
        &["limits", field],
    )
}
