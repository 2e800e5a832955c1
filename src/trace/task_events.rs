//! The transcript events that are one event on a task's span each, with their
//! attributes (a wait, a pause, a compaction, a repeat): which, and what they carry.

use opentelemetry::KeyValue;

use crate::vocab::transcript::TranscriptEvent;

/// The name and attributes of `event` as an event on its task's span; None for the
/// events the trace handles otherwise (requests, tools, settles, the end).
pub(super) fn on_task_span(event: &TranscriptEvent) -> Option<(&'static str, Vec<KeyValue>)> {
    use TranscriptEvent as E;
    Some(match event {
        E::BudgetWait { reason } => (
            "agentbatch.budget_wait",
            vec![KeyValue::new("agentbatch.reason", reason.clone())],
        ),
        E::CapWait { waited_ms, ended } => (
            "agentbatch.cap_wait",
            vec![
                KeyValue::new("agentbatch.waited_ms", ms(*waited_ms)),
                KeyValue::new("agentbatch.ended", ended.clone()),
            ],
        ),
        E::RateLearned { provider, now, .. } => (
            "agentbatch.rate_learned",
            vec![
                KeyValue::new("agentbatch.provider", provider.clone()),
                KeyValue::new("agentbatch.limits", now.describe()),
            ],
        ),
        E::RatePause { ms: pause, reason } => (
            "agentbatch.rate_pause",
            vec![
                KeyValue::new("agentbatch.pause_ms", ms(*pause)),
                KeyValue::new("agentbatch.reason", reason.clone()),
            ],
        ),
        E::Compaction {
            strategy,
            tokens_before,
            tokens_after,
            ..
        } => (
            "agentbatch.compaction",
            vec![
                KeyValue::new("agentbatch.strategy", strategy.clone()),
                KeyValue::new("agentbatch.tokens_before", ms(*tokens_before)),
                KeyValue::new("agentbatch.tokens_after", ms(*tokens_after)),
            ],
        ),
        E::WrapUp { why, .. } => (
            "agentbatch.wrap_up",
            vec![KeyValue::new("agentbatch.reason", why.clone())],
        ),
        E::RepeatWarning { times, .. } => (
            "agentbatch.repeat_warning",
            vec![KeyValue::new("agentbatch.times", i64::from(*times))],
        ),
        E::RepeatStop { times, .. } => (
            "agentbatch.repeat_stop",
            vec![KeyValue::new("agentbatch.times", i64::from(*times))],
        ),
        _ => return None,
    })
}

/// A count of milliseconds (or tokens) as an attribute.
pub(super) fn ms(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
