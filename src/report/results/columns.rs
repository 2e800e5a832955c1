//! The columns of results.csv, each declared once: its name (the order is the file's),
//! its kind (how its value is written and read back, and what a bad value is called),
//! and how the reporter fills it from a finished task's [`TaskResult`]. The
//! declaration makes [`COLUMNS`], the row type [`ResultRow`] with its defaults, the
//! writer's fields and the reader's parsing, so a new column is one line here plus the
//! code that measures it (and, if summary.csv sums it, its figure in `variants.rs`).

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use rust_decimal::Decimal;

use crate::vocab::log::TaskResult;
use crate::vocab::stop::Outcome;

/// How a kind of column holds its value: what a row without the column (an older or a
/// hand-made file) reads as, how the value is written, and how it is read back.
pub(crate) trait Kind {
    type Value;
    /// What a value that fails to read is not, after its column and the value.
    const BAD: &'static str;
    fn absent() -> Self::Value;
    fn write(value: &Self::Value, out: &mut String);
    /// None when `text` is not a value of this kind.
    fn read(text: &str) -> Option<Self::Value>;
}

/// Text, kept as written (a newer agentbatch's stop reason included).
pub(crate) struct Text;
/// A whole number from 0; empty when not measured.
pub(crate) struct Count;
/// A whole number that may be negative (an exit code); empty when there is none.
pub(crate) struct Code;
/// Dollars, written normalized (`0.5`, never `0.50`); empty without a price.
pub(crate) struct Money;
/// The task's verdict: pass, fail, error or unchecked.
pub(crate) struct Verdict;
/// A whole number from 1; 1 in files from before the column.
pub(crate) struct FromOne;
/// A finite number (a reward); empty when there is none.
pub(crate) struct Real;

impl Kind for Real {
    type Value = Option<f64>;
    const BAD: &'static str = "is not a number";
    fn absent() -> Option<f64> {
        None
    }
    fn write(value: &Option<f64>, out: &mut String) {
        write_optional(value, out);
    }
    fn read(text: &str) -> Option<Option<f64>> {
        read_optional::<f64>(text).filter(|v| v.is_none_or(f64::is_finite))
    }
}

impl Kind for Text {
    type Value = String;
    const BAD: &'static str = "is not text";
    fn absent() -> String {
        String::new()
    }
    fn write(value: &String, out: &mut String) {
        out.push_str(value);
    }
    fn read(text: &str) -> Option<String> {
        Some(text.to_string())
    }
}

fn read_optional<T: FromStr>(text: &str) -> Option<Option<T>> {
    if text.is_empty() {
        return Some(None);
    }
    text.parse().ok().map(Some)
}

fn write_optional<T: std::fmt::Display>(value: &Option<T>, out: &mut String) {
    use std::fmt::Write as _;
    if let Some(v) = value {
        let _ = write!(out, "{v}");
    }
}

impl Kind for Count {
    type Value = Option<u64>;
    const BAD: &'static str = "is not a whole number";
    fn absent() -> Option<u64> {
        None
    }
    fn write(value: &Option<u64>, out: &mut String) {
        write_optional(value, out);
    }
    fn read(text: &str) -> Option<Option<u64>> {
        read_optional(text)
    }
}

impl Kind for Code {
    type Value = Option<i32>;
    const BAD: &'static str = "is not a whole number";
    fn absent() -> Option<i32> {
        None
    }
    fn write(value: &Option<i32>, out: &mut String) {
        write_optional(value, out);
    }
    fn read(text: &str) -> Option<Option<i32>> {
        read_optional(text)
    }
}

impl Kind for Money {
    type Value = Option<Decimal>;
    const BAD: &'static str = "is not a decimal number";
    fn absent() -> Option<Decimal> {
        None
    }
    fn write(value: &Option<Decimal>, out: &mut String) {
        write_optional(&value.map(|v| v.normalize()), out);
    }
    fn read(text: &str) -> Option<Option<Decimal>> {
        read_optional(text)
    }
}

impl Kind for Verdict {
    type Value = Option<Outcome>;
    const BAD: &'static str = "is not one of pass, fail, error, unchecked";
    /// None only when the file has no outcome column.
    fn absent() -> Option<Outcome> {
        None
    }
    fn write(value: &Option<Outcome>, out: &mut String) {
        out.push_str(value.map_or("", Outcome::as_str));
    }
    fn read(text: &str) -> Option<Option<Outcome>> {
        [
            Outcome::Pass,
            Outcome::Fail,
            Outcome::Error,
            Outcome::Unchecked,
        ]
        .into_iter()
        .find(|o| o.as_str() == text)
        .map(Some)
    }
}

impl Kind for FromOne {
    type Value = u32;
    const BAD: &'static str = "is not a whole number from 1";
    fn absent() -> u32 {
        1
    }
    fn write(value: &u32, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(out, "{value}");
    }
    fn read(text: &str) -> Option<u32> {
        if text.is_empty() {
            return Some(1);
        }
        text.parse().ok().filter(|e| *e >= 1)
    }
}

/// What the reporter knows of a finished task's row beyond its [`TaskResult`].
pub(crate) struct Filled<'a> {
    pub run_id: &'a str,
    /// The transcript's path in the run folder (empty: none was written).
    pub transcript: &'a str,
    /// The patch's path in the run folder (empty: none).
    pub patch: &'a str,
}

/// RFC 3339, to the millisecond, UTC.
fn stamp(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// One column: its name and kind, and its field of [`ResultRow`] written and read.
pub(crate) struct Column {
    pub name: &'static str,
    /// What a bad value of the column is not ([`Kind::BAD`]).
    pub bad: &'static str,
    pub write: fn(&ResultRow, &mut String),
    /// Err: the value is not of the column's kind.
    pub read: fn(&mut ResultRow, &str) -> Result<(), ()>,
}

macro_rules! columns {
    (
        fill($r:ident, $c:ident);
        $( $(#[doc = $doc:literal])* $name:ident: $kind:ident = $fill:expr; )*
    ) => {
        /// The columns of results.csv, in order. Scripts read them by name; new columns
        /// are only ever added at the end. [`ResultRow`]'s fields are these, in order.
        pub const COLUMNS: [&str; [$(stringify!($name)),*].len()] = [$(stringify!($name)),*];

        /// Every column, in order, with how its field is written and read.
        pub(crate) const TABLE: [Column; COLUMNS.len()] = [$(
            Column {
                name: stringify!($name),
                bad: <$kind as Kind>::BAD,
                write: |row, out| <$kind as Kind>::write(&row.$name, out),
                read: |row, text| {
                    row.$name = <$kind as Kind>::read(text).ok_or(())?;
                    Ok(())
                },
            }
        ),*];

        /// One row of results.csv, as written and as read back. Written rows fill every
        /// field; a row read from an older or hand-made file leaves a column it lacks at
        /// its kind's default (empty, none, epoch 1), so every reader takes old runs
        /// alike.
        #[derive(Debug, Clone, PartialEq)]
        pub(crate) struct ResultRow {
            $( $(#[doc = $doc])* pub $name: <$kind as Kind>::Value, )*
            /// The matrix axis values by axis name (empty values left out): the
            /// `matrix.*` columns, which follow the fixed ones.
            pub axes: BTreeMap<String, String>,
            /// The row's fields exactly as read, so a row can be moved or compared
            /// verbatim.
            pub fields: csv::StringRecord,
            /// The row's line in its file (1 is the header).
            pub line: u64,
        }

        impl Default for ResultRow {
            fn default() -> ResultRow {
                ResultRow {
                    $( $name: <$kind as Kind>::absent(), )*
                    axes: BTreeMap::new(),
                    fields: csv::StringRecord::new(),
                    line: 0,
                }
            }
        }

        impl ResultRow {
            /// The row the reporter writes for a finished task.
            pub(crate) fn of($r: &TaskResult, $c: &Filled<'_>) -> ResultRow {
                ResultRow {
                    $( $name: $fill, )*
                    axes: $r
                        .axes
                        .iter()
                        .filter(|(_, v)| !v.is_empty())
                        .cloned()
                        .collect(),
                    fields: csv::StringRecord::new(),
                    line: 0,
                }
            }
        }
    };
}

columns! {
    fill(r, c);
    run_id: Text = c.run_id.to_string();
    task_id: Text = r.task_id.clone();
    provider: Text = r.provider.clone();
    model: Text = r.model.clone();
    /// None only when the file has no outcome column.
    outcome: Verdict = Some(r.outcome);
    /// Kept as text: a newer agentbatch may write a reason this one does not know.
    stop_reason: Text = r.stop_reason.as_str().to_string();
    stop_detail: Text = r.stop_detail.clone();
    turns: Count = Some(r.measured.turns.into());
    tool_calls: Count = Some(r.measured.tool_calls.into());
    tool_errors: Count = Some(r.measured.tool_errors.into());
    input_tokens: Count = Some(r.measured.usage.input_tokens);
    output_tokens: Count = Some(r.measured.usage.output_tokens);
    cache_read_tokens: Count = Some(r.measured.usage.cache_read_tokens);
    cache_write_tokens: Count = Some(r.measured.usage.cache_write_tokens);
    /// None when the model has no price.
    cost_usd: Money = r.measured.cost_usd;
    wall_ms: Count = Some(r.measured.wall_ms);
    model_ms: Count = Some(r.measured.model_ms);
    tool_ms: Count = Some(r.measured.tool_ms);
    retries: Count = Some(r.measured.retries.into());
    /// RFC 3339, to the millisecond, UTC.
    started_at: Text = stamp(&r.started_at);
    finished_at: Text = stamp(&r.finished_at);
    transcript: Text = c.transcript.to_string();
    /// Empty without a team.
    team: Text = r.team.clone().unwrap_or_default();
    rate_wait_ms: Count = Some(r.measured.rate_wait_ms);
    check_exit_code: Code = r.measured.check_exit_code;
    check_ms: Count = r.measured.check_ms;
    denied_calls: Count = Some(r.measured.denied_calls.into());
    sandbox: Text = r.measured.sandbox.clone();
    patch: Text = c.patch.to_string();
    workspace: Text = r.measured.workspace.clone().unwrap_or_default();
    protocol: Text = r.protocol.clone();
    reasoning_tokens: Count = Some(r.measured.usage.reasoning_tokens);
    usage_estimated_turns: Count = Some(r.measured.usage_estimated_turns.into());
    /// `axis=value,...`; empty without a matrix.
    variant: Text = r.variant.clone();
    /// 1 in runs older than epochs.
    epoch: FromOne = r.epoch;
    /// What prompt caching saved: the cost the same usage would have had uncached,
    /// minus its cost (negative when writes were not read back). None without a price.
    cache_saved_usd: Money = r.measured.cache_saved_usd;
    /// Times the prompt was compacted (empty in runs from before the column).
    compactions: Count = Some(r.measured.compactions.into());
    /// The median time to first token over the task's streamed answers, in ms; empty
    /// when none was streamed (and in runs from before streaming).
    ttft_ms: Count = r.measured.ttft_ms;
    /// Turns answered through the provider's batch API (empty in runs from before it).
    batched_turns: Count = Some(r.measured.batched_turns.into());
    /// What batch pricing saved: the standard price of the batched turns' usage minus
    /// what they cost. None without a price or batch mode.
    batch_saved_usd: Money = r.measured.batch_saved_usd;
    /// The container image, `name@id`; empty without an `environment:` (and in runs
    /// from before it).
    environment: Text = r.measured.environment.clone();
    /// Building or pulling the image and starting the container, in ms, outside the
    /// time limit; empty without an environment.
    environment_ms: Count = r.measured.environment_ms;
    /// SWE-bench verifier: the FAIL_TO_PASS and PASS_TO_PASS tests that passed and
    /// that did not; empty without one.
    tests_passed: Count = r.measured.tests_passed.map(u64::from);
    tests_failed: Count = r.measured.tests_failed.map(u64::from);
    /// Harbor verifier: the reward that decided the verdict; empty without one.
    reward: Real = r.measured.reward;
    /// Time spent waiting for a team's period cap (`on_cap: wait`), in ms (empty in
    /// runs from before the column).
    cap_wait_ms: Count = Some(r.measured.cap_wait_ms);
}
