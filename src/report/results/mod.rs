//! results.csv (and superseded.csv, which has its columns): one row per task, appended
//! and flushed to disk as each task ends. The row type, the writer and the one reader
//! every part of agentbatch uses live here, so the format is described once.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::str::FromStr;

use chrono::SecondsFormat;
use rust_decimal::Decimal;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::vocab::log::TaskResult;
use crate::vocab::stop::Outcome;

mod read;
mod verbatim;
pub use read::ResultsError;
pub(crate) use read::{parse_results, read_results, ResultsFile};
pub(crate) use verbatim::{append_results, replace_results, replace_results_lines, with_field};

/// The columns of results.csv, in order. Scripts read them by name; new columns are
/// only ever added at the end. [`ResultRow`]'s fields are these, in this order.
pub const COLUMNS: [&str; 40] = [
    "run_id",
    "task_id",
    "provider",
    "model",
    "outcome",
    "stop_reason",
    "stop_detail",
    "turns",
    "tool_calls",
    "tool_errors",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "wall_ms",
    "model_ms",
    "tool_ms",
    "retries",
    "started_at",
    "finished_at",
    "transcript",
    "team",
    "rate_wait_ms",
    "check_exit_code",
    "check_ms",
    "denied_calls",
    "sandbox",
    "patch",
    "workspace",
    "protocol",
    "reasoning_tokens",
    "usage_estimated_turns",
    "variant",
    "epoch",
    "cache_saved_usd",
    "compactions",
    "ttft_ms",
    "batched_turns",
    "batch_saved_usd",
];

/// The prefix of the columns that hold one matrix axis each (`matrix.model`).
pub(crate) const AXIS_PREFIX: &str = "matrix.";

/// The column of a matrix axis (after the fixed columns, in axis order).
pub(crate) fn axis_column(axis: &str) -> String {
    format!("{AXIS_PREFIX}{axis}")
}

/// The matrix axes a results.csv header names, in order.
pub(crate) fn axes_in(header: &[String]) -> Vec<String> {
    header
        .iter()
        .filter_map(|c| c.strip_prefix(AXIS_PREFIX).map(str::to_string))
        .collect()
}

/// One row of results.csv, as written and as read back. Written rows fill every field;
/// a row read from an older or hand-made file leaves a column it lacks at its default
/// (empty, none, epoch 1), so every reader takes old runs alike.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct ResultRow {
    pub run_id: String,
    pub task_id: String,
    pub provider: String,
    pub model: String,
    /// None only when the file has no outcome column.
    #[serde(serialize_with = "ser_outcome", deserialize_with = "de_outcome")]
    pub outcome: Option<Outcome>,
    /// Kept as text: a newer agentbatch may write a reason this one does not know.
    pub stop_reason: String,
    pub stop_detail: String,
    #[serde(deserialize_with = "de_whole")]
    pub turns: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub tool_calls: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub tool_errors: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub input_tokens: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub output_tokens: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub cache_read_tokens: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub cache_write_tokens: Option<u64>,
    /// None when the model has no price.
    #[serde(serialize_with = "ser_decimal", deserialize_with = "de_decimal")]
    pub cost_usd: Option<Decimal>,
    #[serde(deserialize_with = "de_whole")]
    pub wall_ms: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub model_ms: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub tool_ms: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub retries: Option<u64>,
    /// RFC 3339, to the millisecond, UTC.
    pub started_at: String,
    pub finished_at: String,
    pub transcript: String,
    /// Empty without a team.
    pub team: String,
    #[serde(deserialize_with = "de_whole")]
    pub rate_wait_ms: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub check_exit_code: Option<i32>,
    #[serde(deserialize_with = "de_whole")]
    pub check_ms: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub denied_calls: Option<u64>,
    pub sandbox: String,
    pub patch: String,
    pub workspace: String,
    pub protocol: String,
    #[serde(deserialize_with = "de_whole")]
    pub reasoning_tokens: Option<u64>,
    #[serde(deserialize_with = "de_whole")]
    pub usage_estimated_turns: Option<u64>,
    /// `axis=value,...`; empty without a matrix.
    pub variant: String,
    /// 1 in runs older than epochs.
    #[serde(deserialize_with = "de_epoch")]
    pub epoch: u32,
    /// What prompt caching saved: the cost the same usage would have had uncached,
    /// minus its cost (negative when writes were not read back). None without a price.
    #[serde(serialize_with = "ser_decimal", deserialize_with = "de_decimal")]
    pub cache_saved_usd: Option<Decimal>,
    /// Times the prompt was compacted (empty in runs from before the column).
    #[serde(default, deserialize_with = "de_whole")]
    pub compactions: Option<u64>,
    /// The median time to first token over the task's streamed answers, in ms; empty
    /// when none was streamed (and in runs from before streaming).
    #[serde(deserialize_with = "de_whole")]
    pub ttft_ms: Option<u64>,
    /// Turns answered through the provider's batch API (empty in runs from before it).
    #[serde(default, deserialize_with = "de_whole")]
    pub batched_turns: Option<u64>,
    /// What batch pricing saved: the standard price of the batched turns' usage minus
    /// what they cost. None without a price or batch mode.
    #[serde(
        default,
        serialize_with = "ser_decimal",
        deserialize_with = "de_decimal"
    )]
    pub batch_saved_usd: Option<Decimal>,
    /// The matrix axis values by axis name (empty values left out): the `matrix.*`
    /// columns, which follow the fixed ones.
    #[serde(skip)]
    pub axes: BTreeMap<String, String>,
    /// The row's fields exactly as read, so a row can be moved or compared verbatim.
    #[serde(skip)]
    pub fields: csv::StringRecord,
    /// The row's line in its file (1 is the header).
    #[serde(skip)]
    pub line: u64,
}

impl Default for ResultRow {
    fn default() -> ResultRow {
        ResultRow {
            run_id: String::new(),
            task_id: String::new(),
            provider: String::new(),
            model: String::new(),
            outcome: None,
            stop_reason: String::new(),
            stop_detail: String::new(),
            turns: None,
            tool_calls: None,
            tool_errors: None,
            input_tokens: None,
            output_tokens: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
            cost_usd: None,
            cache_saved_usd: None,
            compactions: None,
            ttft_ms: None,
            batched_turns: None,
            batch_saved_usd: None,
            wall_ms: None,
            model_ms: None,
            tool_ms: None,
            retries: None,
            started_at: String::new(),
            finished_at: String::new(),
            transcript: String::new(),
            team: String::new(),
            rate_wait_ms: None,
            check_exit_code: None,
            check_ms: None,
            denied_calls: None,
            sandbox: String::new(),
            patch: String::new(),
            workspace: String::new(),
            protocol: String::new(),
            reasoning_tokens: None,
            usage_estimated_turns: None,
            variant: String::new(),
            epoch: 1,
            axes: BTreeMap::new(),
            fields: csv::StringRecord::new(),
            line: 0,
        }
    }
}

fn ser_outcome<S: Serializer>(o: &Option<Outcome>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(o.map_or("", Outcome::as_str))
}

fn ser_decimal<S: Serializer>(c: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
    match c {
        Some(c) => s.serialize_str(&c.normalize().to_string()),
        None => s.serialize_str(""),
    }
}

/// What a typed column's value failed to be. A message says the value and this; the
/// reader puts the column's name in front (serde does not tell a field's deserializer
/// its name).
#[derive(Clone, Copy)]
enum BadValue {
    Outcome,
    Whole,
    Decimal,
    Epoch,
}

impl BadValue {
    const ALL: [BadValue; 4] = [
        BadValue::Outcome,
        BadValue::Whole,
        BadValue::Decimal,
        BadValue::Epoch,
    ];

    fn what(self) -> &'static str {
        match self {
            BadValue::Outcome => "is not one of pass, fail, error, unchecked",
            BadValue::Whole => "is not a whole number",
            BadValue::Decimal => "is not a decimal number",
            BadValue::Epoch => "is not a whole number from 1",
        }
    }

    fn message(self, value: &str) -> String {
        format!("\"{value}\" {}", self.what())
    }

    /// The columns that hold this kind of value.
    fn columns(self) -> &'static [&'static str] {
        match self {
            BadValue::Outcome => &["outcome"],
            BadValue::Decimal => &["cost_usd"],
            BadValue::Epoch => &["epoch"],
            BadValue::Whole => &[
                "turns",
                "tool_calls",
                "tool_errors",
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "wall_ms",
                "model_ms",
                "tool_ms",
                "retries",
                "rate_wait_ms",
                "check_exit_code",
                "check_ms",
                "denied_calls",
                "reasoning_tokens",
                "usage_estimated_turns",
                "compactions",
                "ttft_ms",
                "batched_turns",
            ],
        }
    }

    /// `name "value" what` for the column that failed: fields are read in header order
    /// and the first bad one stops the row, so it is the first column of the kind that
    /// holds the value.
    fn name_column(
        message: &str,
        header: &csv::StringRecord,
        record: &csv::StringRecord,
    ) -> Option<String> {
        BadValue::ALL.into_iter().find_map(|kind| {
            header
                .iter()
                .zip(record.iter())
                .find(|(name, value)| {
                    kind.columns().contains(name) && message == kind.message(value)
                })
                .map(|(name, _)| format!("{name} {message}"))
        })
    }
}

fn de_outcome<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Outcome>, D::Error> {
    let text = String::deserialize(d)?;
    [
        Outcome::Pass,
        Outcome::Fail,
        Outcome::Error,
        Outcome::Unchecked,
    ]
    .into_iter()
    .find(|o| o.as_str() == text)
    .map(Some)
    .ok_or_else(|| D::Error::custom(BadValue::Outcome.message(&text)))
}

fn de_whole<'de, D: Deserializer<'de>, T: FromStr>(d: D) -> Result<Option<T>, D::Error> {
    let text = String::deserialize(d)?;
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| D::Error::custom(BadValue::Whole.message(&text)))
}

fn de_decimal<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Decimal>, D::Error> {
    let text = String::deserialize(d)?;
    if text.is_empty() {
        return Ok(None);
    }
    Decimal::from_str(&text)
        .map(Some)
        .map_err(|_| D::Error::custom(BadValue::Decimal.message(&text)))
}

fn de_epoch<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let text = String::deserialize(d)?;
    if text.is_empty() {
        return Ok(1);
    }
    match text.parse::<u32>() {
        Ok(e) if e >= 1 => Ok(e),
        _ => Err(D::Error::custom(BadValue::Epoch.message(&text))),
    }
}

impl ResultRow {
    /// The row the reporter writes for a finished task.
    pub(crate) fn of(run_id: &str, r: &TaskResult, transcript: &str, patch: &str) -> ResultRow {
        let u = &r.usage;
        let ts = |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        ResultRow {
            run_id: run_id.to_string(),
            task_id: r.task_id.clone(),
            provider: r.provider.clone(),
            model: r.model.clone(),
            outcome: Some(r.outcome),
            stop_reason: r.stop_reason.as_str().to_string(),
            stop_detail: r.stop_detail.clone(),
            turns: Some(r.turns.into()),
            tool_calls: Some(r.tool_calls.into()),
            tool_errors: Some(r.tool_errors.into()),
            input_tokens: Some(u.input_tokens),
            output_tokens: Some(u.output_tokens),
            cache_read_tokens: Some(u.cache_read_tokens),
            cache_write_tokens: Some(u.cache_write_tokens),
            cost_usd: r.cost_usd,
            wall_ms: Some(r.wall_ms),
            model_ms: Some(r.model_ms),
            tool_ms: Some(r.tool_ms),
            retries: Some(r.retries.into()),
            started_at: ts(&r.started_at),
            finished_at: ts(&r.finished_at),
            transcript: transcript.to_string(),
            team: r.team.clone().unwrap_or_default(),
            rate_wait_ms: Some(r.rate_wait_ms),
            check_exit_code: r.check_exit_code,
            check_ms: r.check_ms,
            denied_calls: Some(r.denied_calls.into()),
            sandbox: r.sandbox.clone(),
            patch: patch.to_string(),
            workspace: r.workspace.clone().unwrap_or_default(),
            protocol: r.protocol.clone(),
            reasoning_tokens: Some(u.reasoning_tokens),
            usage_estimated_turns: Some(r.usage_estimated_turns.into()),
            variant: r.variant.clone(),
            epoch: r.epoch,
            cache_saved_usd: r.cache_saved_usd,
            compactions: Some(r.compactions.into()),
            ttft_ms: r.ttft_ms,
            batched_turns: Some(r.batched_turns.into()),
            batch_saved_usd: r.batch_saved_usd,
            axes: r
                .axes
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .cloned()
                .collect(),
            fields: csv::StringRecord::new(),
            line: 0,
        }
    }

    /// The row's fields exactly as read, as a key: two rows are the same attempt when
    /// every field is the same.
    pub(crate) fn verbatim(&self) -> Vec<String> {
        self.fields.iter().map(str::to_string).collect()
    }

    /// The row's fields in file order: the fixed columns, then one per axis in `axes`.
    fn encode(&self, axes: &[String]) -> std::io::Result<Vec<u8>> {
        let values: Vec<&str> = axes
            .iter()
            .map(|a| self.axes.get(a).map_or("", String::as_str))
            .collect();
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::with_capacity(512));
        w.serialize((self, values))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        w.into_inner()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }
}

/// The open results file. Each row is encoded in memory and written with a single
/// write, so a killed process never leaves half a row behind; [`ResultsCsv::sync`]
/// makes the rows durable.
pub(crate) struct ResultsCsv {
    file: File,
    axes: Vec<String>,
    /// Rows written since the last sync.
    unsynced: bool,
}

/// The header for a run with these matrix axes.
pub(crate) fn header_for(axes: &[String]) -> Vec<String> {
    COLUMNS
        .iter()
        .map(|c| c.to_string())
        .chain(axes.iter().map(|a| axis_column(a)))
        .collect()
}

impl ResultsCsv {
    /// Creates the file and writes the header (durably, so an empty run still has it).
    pub fn create(path: &Path, axes: &[String]) -> std::io::Result<ResultsCsv> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)?;
        let mut r = ResultsCsv {
            file,
            axes: axes.to_vec(),
            unsynced: false,
        };
        let mut w = csv::Writer::from_writer(Vec::with_capacity(512));
        w.write_record(header_for(axes))
            .map_err(std::io::Error::other)?;
        let header = w
            .into_inner()
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        r.file.write_all(&header)?;
        r.file.sync_data()?;
        Ok(r)
    }

    /// Opens an existing file to append rows (a resumed run); its header is kept.
    pub fn append_to(path: &Path, axes: &[String]) -> std::io::Result<ResultsCsv> {
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(ResultsCsv {
            file,
            axes: axes.to_vec(),
            unsynced: false,
        })
    }

    /// Appends a row, and returns it as written; [`ResultsCsv::sync`] pushes it to disk
    /// (the reporter does so for every batch of rows before it waits for more).
    pub fn append(
        &mut self,
        run_id: &str,
        r: &TaskResult,
        transcript: &str,
        patch: &str,
    ) -> std::io::Result<Vec<u8>> {
        let row = ResultRow::of(run_id, r, transcript, patch).encode(&self.axes)?;
        self.file.write_all(&row)?;
        self.unsynced = true;
        Ok(row)
    }

    /// Rows were appended since the last [`ResultsCsv::unsynced`].
    pub fn has_unsynced(&self) -> bool {
        self.unsynced
    }

    /// A handle to sync when rows were appended since the last call (None when there
    /// are none): the reporter hands it to its syncer, which makes them durable.
    pub fn unsynced(&mut self) -> Option<std::io::Result<File>> {
        if !self.unsynced {
            return None;
        }
        self.unsynced = false;
        Some(self.file.try_clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "r/results.csv";

    fn parse(text: &str) -> Result<ResultsFile, ResultsError> {
        let need = ["task_id", "outcome"];
        parse_results(Path::new(P), text.as_bytes(), &need, &need)
    }

    fn row() -> ResultRow {
        ResultRow {
            run_id: "r1".into(),
            task_id: "t,1".into(),
            provider: "sim".into(),
            model: "m".into(),
            outcome: Some(Outcome::Pass),
            stop_reason: "completed".into(),
            stop_detail: "said \"done\"\nand stopped".into(),
            turns: Some(3),
            cost_usd: Some(Decimal::new(50, 2)),
            check_exit_code: Some(-1),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            variant: "model=a".into(),
            epoch: 2,
            ttft_ms: Some(250),
            axes: BTreeMap::from([("model".to_string(), "a".to_string())]),
            ..ResultRow::default()
        }
    }

    #[test]
    fn the_row_type_has_the_columns_in_order() {
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(ResultRow::default()).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next().unwrap(), COLUMNS.join(","));
    }

    #[test]
    fn a_written_row_reads_back_the_same() {
        let axes = vec!["model".to_string()];
        let mut text = header_for(&axes).join(",") + "\n";
        text.push_str(&String::from_utf8(row().encode(&axes).unwrap()).unwrap());
        assert!(
            text.contains(",0.5,"),
            "costs are written normalized: {text}"
        );
        let file = parse(&text).unwrap();
        assert_eq!(file.axes, ["model"]);
        assert!(file.cut_off.is_none());
        let mut back = file.rows[0].clone();
        assert_eq!((back.line, back.fields.len()), (2, COLUMNS.len() + 1));
        back.fields = csv::StringRecord::new();
        back.line = 0;
        assert_eq!(
            back,
            ResultRow {
                cost_usd: Some(Decimal::new(5, 1)),
                ..row()
            }
        );
    }

    #[test]
    fn rows_move_between_files_verbatim() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("superseded.csv");
        let header: csv::StringRecord = ["task_id", "outcome"].into_iter().collect();
        let rows: Vec<csv::StringRecord> = vec![
            ["a,b", "pass"].into_iter().collect(),
            ["c", "fail"].into_iter().collect(),
        ];
        append_results(&path, &header, &rows[..1]).unwrap();
        append_results(&path, &header, &rows[1..]).unwrap();
        let file = read_results(&path, &[], &[]).unwrap();
        let fields: Vec<_> = file.rows.iter().map(|r| r.fields.clone()).collect();
        assert_eq!(fields, rows);
        replace_results(&path, &header, &rows[1..]).unwrap();
        assert_eq!(read_results(&path, &[], &[]).unwrap().rows.len(), 1);
        assert!(!dir.path().join("superseded.csv.tmp").exists());
    }
}
