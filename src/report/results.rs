//! results.csv (and superseded.csv, which has its columns): one row per task, appended
//! and flushed to disk as each task ends. The row type, the writer and the one reader
//! every part of agentbatch uses live here, so the format is described once.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::SecondsFormat;
use rust_decimal::Decimal;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::vocab::log::TaskResult;
use crate::vocab::stop::Outcome;

/// The columns of results.csv, in order. Scripts read them by name; new columns are
/// only ever added at the end. [`ResultRow`]'s fields are these, in this order.
pub const COLUMNS: [&str; 35] = [
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
];

/// The prefix of the columns that hold one matrix axis each (`matrix.model`).
pub(crate) const AXIS_PREFIX: &str = "matrix.";

/// The column of a matrix axis (after the fixed columns, in axis order).
pub(crate) fn axis_column(axis: &str) -> String {
    format!("{AXIS_PREFIX}{axis}")
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

/// A results-format file could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not even a header: a run that never started writing.
    #[error("{} is empty (not even a header)", .0.display())]
    Empty(PathBuf),
    #[error("{} has no {column} column", path.display())]
    MissingColumn { path: PathBuf, column: &'static str },
    /// A row before the last is unreadable: the file was changed by hand, or damaged.
    #[error("{}:{line}: {detail}", path.display())]
    BadRow {
        path: PathBuf,
        line: u64,
        detail: String,
    },
}

/// A results-format file read back: its header, its rows, and what was left out.
#[derive(Debug, Clone)]
pub(crate) struct ResultsFile {
    pub header: csv::StringRecord,
    /// The matrix axes the header names, in column order.
    pub axes: Vec<String>,
    pub rows: Vec<ResultRow>,
    /// Why the last line was left out, when it was: a run killed while writing it
    /// leaves it cut short. Readers show it as a warning, or ignore it.
    pub cut_off: Option<String>,
}

/// Reads a results-format file (results.csv or superseded.csv) by column name: columns
/// it does not know are ignored, and a column it lacks reads as empty, except the
/// `required` ones, which must be there, and a `filled` one must hold a value in every
/// row. A malformed last
/// line (a run killed while writing it) is left out and said in
/// [`ResultsFile::cut_off`]; so is a last line without its newline, since a row cut at
/// a field boundary would otherwise read as complete. Any other bad row is an error
/// naming the file and line.
pub(crate) fn read_results(
    path: &Path,
    required: &[&'static str],
    filled: &[&'static str],
) -> Result<ResultsFile, ResultsError> {
    let bytes = std::fs::read(path).map_err(|source| ResultsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_results(path, &bytes, required, filled)
}

/// [`read_results`] on bytes already read; `path` names them in messages.
pub(crate) fn parse_results(
    path: &Path,
    bytes: &[u8],
    required: &[&'static str],
    filled: &[&'static str],
) -> Result<ResultsFile, ResultsError> {
    let bad_row = |line: u64, detail: String| ResultsError::BadRow {
        path: path.to_path_buf(),
        line,
        detail,
    };
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .has_headers(false)
        .from_reader(bytes);
    let mut records = reader.records();
    let header = match records.next() {
        Some(Ok(h)) => h,
        Some(Err(e)) => return Err(bad_row(1, format!("unreadable header: {e}"))),
        None => return Err(ResultsError::Empty(path.to_path_buf())),
    };
    let header: csv::StringRecord = header.iter().map(str::trim).collect();
    for &column in required {
        if !header.iter().any(|h| h == column) {
            return Err(ResultsError::MissingColumn {
                path: path.to_path_buf(),
                column,
            });
        }
    }
    let mut axes = Vec::new();
    for name in header.iter() {
        if let Some(axis) = name.strip_prefix(AXIS_PREFIX) {
            if !axis.is_empty() && !axes.iter().any(|a| a == axis) {
                axes.push(axis.to_string());
            }
        }
    }

    let records: Vec<_> = records.collect();
    let cut_short = !bytes.ends_with(b"\n");
    let last = records.len().saturating_sub(1);
    let mut rows = Vec::with_capacity(records.len());
    let mut cut_off = None;
    for (i, record) in records.into_iter().enumerate() {
        let (line, parsed) = match record {
            Ok(r) => {
                let line = r.position().map_or(0, |p| p.line());
                (line, parse_row(&header, &axes, filled, r, line))
            }
            Err(e) => (e.position().map_or(0, |p| p.line()), Err(e.to_string())),
        };
        match parsed {
            Ok(_) if i == last && cut_short => {
                cut_off = Some(format!(
                    "{}:{line}: skipped the last line: it has no line end, so it may be cut short (a run killed while writing it)",
                    path.display()
                ))
            }
            Ok(row) => rows.push(row),
            Err(detail) if i == last => {
                cut_off = Some(format!(
                    "{}:{line}: skipped the last line, which is incomplete (a run killed while writing it?): {detail}",
                    path.display()
                ))
            }
            Err(detail) => return Err(bad_row(line, detail)),
        }
    }
    Ok(ResultsFile {
        header,
        axes,
        rows,
        cut_off,
    })
}

/// One record as a row, or what is wrong with it.
fn parse_row(
    header: &csv::StringRecord,
    axes: &[String],
    filled: &[&'static str],
    record: csv::StringRecord,
    line: u64,
) -> Result<ResultRow, String> {
    if record.len() != header.len() {
        return Err(format!(
            "{} fields where the header has {}",
            record.len(),
            header.len()
        ));
    }
    for &name in filled {
        if let Some(i) = header.iter().position(|h| h == name) {
            if record[i].is_empty() {
                return Err(format!("{name} is empty"));
            }
        }
    }
    let mut row: ResultRow = record
        .deserialize(Some(header))
        .map_err(|e| match e.kind() {
            csv::ErrorKind::Deserialize { err, .. } => match err.kind() {
                csv::DeserializeErrorKind::Message(m) => {
                    BadValue::name_column(m, header, &record).unwrap_or_else(|| m.clone())
                }
                _ => err.to_string(),
            },
            _ => e.to_string(),
        })?;
    for axis in axes {
        if let Some(i) = header.iter().position(|h| h == axis_column(axis)) {
            if !record[i].is_empty() {
                row.axes.insert(axis.clone(), record[i].to_string());
            }
        }
    }
    row.fields = record;
    row.line = line;
    Ok(row)
}

/// Writes a results-format file whole (the header, then `rows`' fields verbatim)
/// beside `path`, syncs it, and renames it over `path`: a crash leaves either the old
/// file or the new one.
pub(crate) fn replace_results(
    path: &Path,
    header: &csv::StringRecord,
    rows: &[csv::StringRecord],
) -> std::io::Result<()> {
    let tmp = path.with_extension("csv.tmp");
    {
        let mut w = csv::Writer::from_path(&tmp).map_err(std::io::Error::other)?;
        w.write_record(header).map_err(std::io::Error::other)?;
        for r in rows {
            w.write_record(r).map_err(std::io::Error::other)?;
        }
        w.flush()?;
        w.get_ref().sync_data()?;
    }
    std::fs::rename(&tmp, path)
}

/// Appends `rows`' fields verbatim to a results-format file, with `header` first when
/// the file is new, and syncs it.
pub(crate) fn append_results(
    path: &Path,
    header: &csv::StringRecord,
    rows: &[csv::StringRecord],
) -> std::io::Result<()> {
    let fresh = !path.exists();
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut w = csv::Writer::from_writer(file);
    if fresh {
        w.write_record(header).map_err(std::io::Error::other)?;
    }
    for r in rows {
        w.write_record(r).map_err(std::io::Error::other)?;
    }
    w.flush()?;
    w.get_ref().sync_data()
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
        r.unsynced = true;
        r.sync()?;
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

    /// Appends a row; [`ResultsCsv::sync`] pushes it to disk (the reporter does so for
    /// every batch of rows before it waits for more).
    pub fn append(
        &mut self,
        run_id: &str,
        r: &TaskResult,
        transcript: &str,
        patch: &str,
    ) -> std::io::Result<()> {
        let row = ResultRow::of(run_id, r, transcript, patch).encode(&self.axes)?;
        self.file.write_all(&row)?;
        self.unsynced = true;
        Ok(())
    }

    /// Makes the rows appended so far durable (nothing to do if there are none).
    pub fn sync(&mut self) -> std::io::Result<()> {
        if self.unsynced {
            self.file.sync_data()?;
            self.unsynced = false;
        }
        Ok(())
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
        assert_eq!((back.line, back.fields.len()), (2, 36));
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
    fn a_cut_off_last_row_is_left_out_and_said() {
        let head = "task_id,outcome,turns\n";
        let file = parse(&format!("{head}a,pass,1\nb,pa")).unwrap();
        assert_eq!(file.rows.len(), 1);
        let why = file.cut_off.unwrap();
        assert!(
            why.starts_with("r/results.csv:3: skipped the last line"),
            "{why}"
        );
        // Complete fields but no line end: may be cut at a field boundary.
        let file = parse(&format!("{head}a,pass,1\nb,pass,12")).unwrap();
        assert_eq!((file.rows.len(), file.cut_off.is_some()), (1, true));
        // The same damage before the last row is an error naming the line.
        let e = parse(&format!("{head}a,pass\nb,pass,1\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "r/results.csv:2: 2 fields where the header has 3"
        );
    }

    #[test]
    fn an_empty_file_and_a_header_alone() {
        let e = parse("").unwrap_err();
        assert!(matches!(e, ResultsError::Empty(_)), "{e}");
        let file = parse("task_id,outcome\n").unwrap();
        assert!(file.rows.is_empty() && file.cut_off.is_none());
    }

    #[test]
    fn a_missing_column_is_named_unless_the_reader_can_do_without() {
        let e = parse("task_id,turns\n").unwrap_err();
        assert_eq!(e.to_string(), "r/results.csv has no outcome column");
        // Columns nobody requires read as empty; an old run's epoch is 1.
        let file = parse("task_id,outcome\na,fail\n").unwrap();
        let r = &file.rows[0];
        assert_eq!((r.epoch, r.turns, r.cost_usd), (1, None, None));
        assert_eq!(r.outcome, Some(Outcome::Fail));
    }

    #[test]
    fn bad_values_name_their_column() {
        let e = parse("task_id,outcome,cost_usd\na,passed,1\nb,pass,1\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "r/results.csv:2: outcome \"passed\" is not one of pass, fail, error, unchecked"
        );
        let e = parse("task_id,outcome,cost_usd\na,pass,abc\nb,pass,1\n").unwrap_err();
        assert!(e
            .to_string()
            .contains("cost_usd \"abc\" is not a decimal number"));
        let e = parse("task_id,outcome\n,pass\nb,pass\n").unwrap_err();
        assert!(e.to_string().ends_with(":2: task_id is empty"), "{e}");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.csv");
        let e = read_results(&path, &[], &[]).unwrap_err();
        assert!(e
            .to_string()
            .starts_with(&format!("cannot read {}", path.display())));
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
