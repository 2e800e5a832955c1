//! The upper bound of every number a simulator script may hold. A script is test input,
//! and a typo in it (`latency: 2000h`, `output_tokens: 1e19`) should be an error naming
//! the field, not a run that hangs for months or a sum that overflows in the renderer.
//! Each bound sits far above any value a real provider or test needs.

use std::time::Duration;

use serde_json::json;

use crate::vocab::values::HumanDuration;

/// A number in a simulator script past its bound, named by its place in the script.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OutOfBounds(pub String);

impl From<String> for OutOfBounds {
    fn from(message: String) -> OutOfBounds {
        OutOfBounds(message)
    }
}

impl From<&str> for OutOfBounds {
    fn from(message: &str) -> OutOfBounds {
        OutOfBounds(message.to_string())
    }
}

/// Latency and `body_delay`, which the simulator really sleeps: longer than any client
/// timeout worth testing.
pub const MAX_DELAY: Duration = Duration::from_secs(600);
/// `retry_after` and `reset_after`, which only go into headers (a server may ask for
/// hours, and a client must cope): a week.
pub const MAX_HEADER_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Any usage figure: above every model's context and output, and small enough that the
/// renderers' sums (prompt + output) never overflow.
pub const MAX_TOKENS: u64 = 1_000_000_000;
/// Turns of a script.
pub const MAX_TURNS: usize = 100_000;
/// Faults before one turn's answer (each is one attempt; no client retries more).
pub const MAX_FAULTS: usize = 100;
/// Error statuses a fault may play.
pub const STATUSES: std::ops::RangeInclusive<u16> = 400..=599;
/// `faults[].after_events`: far more events than any streamed answer holds.
pub const MAX_EVENTS: u64 = 1_000_000;
/// Chaos: turns before the final answer.
pub const MAX_CHAOS_TURNS: u32 = 1_000;
/// Chaos: tool calls in one turn.
pub const MAX_CHAOS_CALLS: u32 = 64;
/// Chaos: every `*_percent` knob.
pub const MAX_PERCENT: u32 = 100;
/// Chaos: the longest generated string, in bytes (8 MiB): a history resent every turn
/// must still fit in memory many times over.
pub const MAX_STRING: u64 = 8 * 1024 * 1024;
/// Chaos: the longest generated latency, slow body or retry-after.
pub const MAX_CHAOS_DELAY: Duration = Duration::from_secs(10);
/// Chaos: the length of `outside` (PATH_MAX).
pub const MAX_PATH: usize = 4096;

/// The JSON Schema's twin of [`Script::check`]'s rules for a script as a whole: turns or
/// chaos, not both, and `repeat_last` only with turns.
pub(super) fn script_schema_rules(schema: &mut schemars::Schema) {
    let turns = json!({ "required": ["turns"], "properties": { "turns": { "type": "array", "minItems": 1 } } });
    let chaos = json!({ "required": ["chaos"], "properties": { "chaos": { "type": "object" } } });
    let repeat =
        json!({ "required": ["repeat_last"], "properties": { "repeat_last": { "const": true } } });
    schema.insert(
        "allOf".into(),
        json!([
            { "anyOf": [turns, chaos] },
            { "not": { "allOf": [turns, chaos] } },
            { "not": { "allOf": [chaos, repeat] } }
        ]),
    );
}

/// The JSON Schema's twin of the rules a fault is checked by ([`Script::check`],
/// `check_fault`, `check_mid_stream`): one kind of failure (`status` or `disconnect`,
/// `mid_stream`, or `batch_expire`), and the fields that go with each.
pub(super) fn fault_schema_rules(schema: &mut schemars::Schema) {
    // A field set to a value (serde reads `null` as not set).
    let set = |field: &str| json!({ "required": [field], "properties": { field: { "not": { "type": "null" } } } });
    let on =
        |field: &str| json!({ "required": [field], "properties": { field: { "const": true } } });
    let (status, disconnect, mid_stream, expire) = (
        set("status"),
        on("disconnect"),
        set("mid_stream"),
        on("batch_expire"),
    );
    let not_stall = json!({ "required": ["mid_stream"], "properties": { "mid_stream": { "enum": ["error", "failed", "cut"] } } });
    schema.insert(
        "allOf".into(),
        json!([
            { "anyOf": [status, disconnect, mid_stream, expire] },
            { "not": { "allOf": [expire, { "anyOf": [status, disconnect, mid_stream] }] } },
            { "not": { "allOf": [mid_stream, { "anyOf": [status, disconnect] }] } },
            { "not": { "allOf": [{ "not": mid_stream }, { "anyOf": [set("after_events"), set("stall_for")] }] } },
            { "not": { "allOf": [mid_stream, { "anyOf": [set("retry_after"), set("reset_after"), set("should_retry")] }] } },
            { "not": { "allOf": [set("stall_for"), not_stall] } }
        ]),
    );
}

/// `field: value is over the upper bound of bound`, or Ok.
pub fn at_most(field: &str, value: u64, bound: u64) -> Result<(), OutOfBounds> {
    if value > bound {
        return Err(format!("{field}: {value} is over the upper bound of {bound}").into());
    }
    Ok(())
}

pub(super) fn delay_at_most(
    field: &str,
    d: Option<HumanDuration>,
    bound: Duration,
) -> Result<(), OutOfBounds> {
    match d {
        Some(HumanDuration(d)) if d > bound => Err(format!(
            "{field}: {} is over the upper bound of {}",
            humantime::format_duration(d),
            humantime::format_duration(bound)
        )
        .into()),
        _ => Ok(()),
    }
}
