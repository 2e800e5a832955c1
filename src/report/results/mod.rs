//! results.csv (and superseded.csv, which has its columns): one row per task, appended
//! and flushed to disk as each task ends. The row type, the writer and the one reader
//! every part of agentbatch uses live here, so the format is described once.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use crate::vocab::log::TaskResult;

mod columns;
mod read;
mod verbatim;
pub use columns::COLUMNS;
pub(crate) use columns::{Column, ResultRow};
use columns::{Filled, TABLE};
pub use read::ResultsError;
pub(crate) use read::{parse_results, read_results, ResultsFile};
pub(crate) use verbatim::{append_results, replace_results, replace_results_lines, with_field};

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

impl ResultRow {
    /// The row's fields exactly as read, as a key: two rows are the same attempt when
    /// every field is the same.
    pub(crate) fn verbatim(&self) -> Vec<String> {
        self.fields.iter().map(str::to_string).collect()
    }

    /// The row's fields in file order: the fixed columns, then one per axis in `axes`.
    fn encode(&self, axes: &[String]) -> std::io::Result<Vec<u8>> {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::with_capacity(512));
        let mut field = String::with_capacity(64);
        for c in &TABLE {
            field.clear();
            (c.write)(self, &mut field);
            w.write_field(&field)?;
        }
        for a in axes {
            w.write_field(self.axes.get(a).map_or("", String::as_str))?;
        }
        w.write_record(std::iter::empty::<&[u8]>())?;
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
        let filled = Filled {
            run_id,
            transcript,
            patch,
        };
        let row = ResultRow::of(r, &filled).encode(&self.axes)?;
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
    use rust_decimal::Decimal;
    use std::collections::BTreeMap;

    use crate::vocab::stop::Outcome;

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

    /// The header scripts read: the declaration's order is the file's, and columns are
    /// only ever added at the end.
    #[test]
    fn the_row_type_has_the_columns_in_order() {
        let header = "run_id,task_id,provider,model,outcome,stop_reason,stop_detail,turns,tool_calls,tool_errors,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,cost_usd,wall_ms,model_ms,tool_ms,retries,started_at,finished_at,transcript,team,rate_wait_ms,check_exit_code,check_ms,denied_calls,sandbox,patch,workspace,protocol,reasoning_tokens,usage_estimated_turns,variant,epoch,cache_saved_usd,compactions,ttft_ms,batched_turns,batch_saved_usd,environment,environment_ms,tests_passed,tests_failed,reward,cap_wait_ms";
        assert_eq!(COLUMNS.join(","), header);
        assert_eq!(header_for(&[]).join(","), header);
        let names: Vec<&str> = TABLE.iter().map(|c| c.name).collect();
        assert_eq!(names, COLUMNS);
        let empty = String::from_utf8(ResultRow::default().encode(&[]).unwrap()).unwrap();
        assert_eq!(
            empty, ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,1,,,,,,,,,,,\n",
            "a row without values: every column empty, epoch 1"
        );
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
