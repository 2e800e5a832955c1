//! results.csv: one row per task, appended and flushed to disk as each task ends.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use chrono::SecondsFormat;

use crate::vocab::log::TaskResult;

/// The columns of results.csv, in order. Scripts read them by name; new columns are
/// only ever added at the end.
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

/// The column of a matrix axis (after the fixed columns, in axis order).
pub fn axis_column(axis: &str) -> String {
    format!("matrix.{axis}")
}

/// The open results file. Each row is encoded in memory and written with a single
/// write, so a killed process never leaves half a row behind; [`ResultsCsv::sync`]
/// makes the rows durable.
pub struct ResultsCsv {
    file: File,
    axes: Vec<String>,
    /// Rows written since the last sync.
    unsynced: bool,
}

fn encode_row<I, T>(fields: I) -> std::io::Result<Vec<u8>>
where
    I: IntoIterator<Item = T>,
    T: AsRef<[u8]>,
{
    let mut w = csv::Writer::from_writer(Vec::with_capacity(512));
    w.write_record(fields)?;
    w.into_inner()
        .map_err(|e| std::io::Error::other(e.to_string()))
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
        let header: Vec<String> = COLUMNS
            .iter()
            .map(|c| c.to_string())
            .chain(axes.iter().map(|a| axis_column(a)))
            .collect();
        r.file.write_all(&encode_row(&header)?)?;
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
        let u = &r.usage;
        let ts = |t: &chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        let epoch = r.epoch.to_string();
        let fixed = [
            run_id,
            &r.task_id,
            &r.provider,
            &r.model,
            r.outcome.as_str(),
            r.stop_reason.as_str(),
            &r.stop_detail,
            &r.turns.to_string(),
            &r.tool_calls.to_string(),
            &r.tool_errors.to_string(),
            &u.input_tokens.to_string(),
            &u.output_tokens.to_string(),
            &u.cache_read_tokens.to_string(),
            &u.cache_write_tokens.to_string(),
            &r.cost_usd
                .map(|c| c.normalize().to_string())
                .unwrap_or_default(),
            &r.wall_ms.to_string(),
            &r.model_ms.to_string(),
            &r.tool_ms.to_string(),
            &r.retries.to_string(),
            &ts(&r.started_at),
            &ts(&r.finished_at),
            transcript,
            r.team.as_deref().unwrap_or(""),
            &r.rate_wait_ms.to_string(),
            &r.check_exit_code.map(|c| c.to_string()).unwrap_or_default(),
            &r.check_ms.map(|c| c.to_string()).unwrap_or_default(),
            &r.denied_calls.to_string(),
            &r.sandbox,
            patch,
            r.workspace.as_deref().unwrap_or(""),
            &r.protocol,
            &u.reasoning_tokens.to_string(),
            &r.usage_estimated_turns.to_string(),
            &r.variant,
            &epoch,
        ];
        let axes = self.axes.iter().map(|a| {
            r.axes
                .iter()
                .find(|(k, _)| k == a)
                .map_or("", |(_, v)| v.as_str())
        });
        let row = encode_row(fixed.iter().copied().chain(axes))?;
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
