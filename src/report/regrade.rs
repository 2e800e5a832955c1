//! What `agentbatch regrade` writes into a run folder: each regraded task's row of
//! results.csv as it was appended to regraded.csv (the old verdicts stay readable
//! there and in the transcripts), results.csv rewritten with the new verdicts, the
//! verifier's events appended to each transcript, and summary.csv written again. The
//! page (written after, by `page`) shows the new verdicts.

use std::collections::HashMap;
use std::path::Path;

use super::error::{io_err as io, ReportError};
use super::files;
use super::folder::append_transcript_events;
use super::results::{append_results, read_results, replace_results};
use crate::vocab::stop::Outcome;
use crate::vocab::transcript::TranscriptEvent;

/// One task's new verdict.
#[derive(Debug, Clone)]
pub struct Regraded {
    /// results.csv's `task_id`, `variant` and `epoch` of the row.
    pub task_id: String,
    pub variant: String,
    pub epoch: u32,
    pub outcome: Outcome,
    pub stop_reason: String,
    pub stop_detail: String,
    pub check_exit_code: Option<i32>,
    pub check_ms: u64,
    pub tests_passed: Option<u32>,
    pub tests_failed: Option<u32>,
    pub reward: Option<f64>,
    /// Appended to the task's transcript (its `transcript` column's file).
    pub events: Vec<TranscriptEvent>,
}

/// A run folder's rows as regrade reads them: the task, variant, epoch, outcome, patch
/// and transcript of each.
#[derive(Debug, Clone)]
pub struct RowRef {
    pub task_id: String,
    pub variant: String,
    pub epoch: u32,
    pub outcome: Option<Outcome>,
    pub stop_reason: String,
    /// Relative to the run folder; empty when the task left none.
    pub patch: String,
    pub transcript: String,
}

/// The rows of the run folder `dir`'s results.csv.
pub fn rows(dir: &Path) -> Result<Vec<RowRef>, super::ResultsError> {
    let file = read_results(&dir.join(files::RESULTS_CSV), &["task_id"], &[])?;
    Ok(file
        .rows
        .into_iter()
        .map(|r| RowRef {
            task_id: r.task_id,
            variant: r.variant,
            epoch: r.epoch,
            outcome: r.outcome,
            stop_reason: r.stop_reason,
            patch: r.patch,
            transcript: r.transcript,
        })
        .collect())
}

/// Writes the new verdicts of `regraded` into run folder `dir` (see the module's
/// description); `axes` and `order` are the plan's, for summary.csv. Returns how many
/// rows changed their outcome.
pub fn record(
    dir: &Path,
    regraded: &[Regraded],
    axes: &[String],
    order: &[String],
) -> Result<usize, ReportError> {
    let csv_path = dir.join(files::RESULTS_CSV);
    let file = read_results(&csv_path, &["task_id"], &[]).map_err(|e| ReportError::Io {
        path: csv_path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let at = |name: &str| file.header.iter().position(|h| h == name);
    let by_unit: HashMap<(&str, &str, u32), &Regraded> = regraded
        .iter()
        .map(|r| ((r.task_id.as_str(), r.variant.as_str(), r.epoch), r))
        .collect();
    let mut rows = Vec::with_capacity(file.rows.len());
    let mut old = Vec::new();
    let mut changed = 0;
    for row in &file.rows {
        let Some(new) = by_unit.get(&(row.task_id.as_str(), row.variant.as_str(), row.epoch))
        else {
            rows.push(row.fields.clone());
            continue;
        };
        if !row.transcript.is_empty() && !new.events.is_empty() {
            let t = dir.join(&row.transcript);
            append_transcript_events(&t, &new.events).map_err(io(&t))?;
        }
        // A verifier that could not run this time says nothing of the patch: the
        // row keeps its verdict (a resume would otherwise pay the model again).
        if new.outcome == Outcome::Error {
            rows.push(row.fields.clone());
            continue;
        }
        old.push(row.fields.clone());
        if row.outcome != Some(new.outcome) {
            changed += 1;
        }
        let mut fields: Vec<String> = row.fields.iter().map(str::to_string).collect();
        let mut set = |name: &str, value: String| {
            if let Some(i) = at(name) {
                if let Some(f) = fields.get_mut(i) {
                    *f = value;
                }
            }
        };
        let opt = |v: Option<String>| v.unwrap_or_default();
        set("outcome", new.outcome.as_str().to_string());
        set("stop_reason", new.stop_reason.clone());
        set("stop_detail", new.stop_detail.clone());
        set(
            "check_exit_code",
            opt(new.check_exit_code.map(|c| c.to_string())),
        );
        set("check_ms", new.check_ms.to_string());
        set("tests_passed", opt(new.tests_passed.map(|c| c.to_string())));
        set("tests_failed", opt(new.tests_failed.map(|c| c.to_string())));
        set("reward", opt(new.reward.map(|c| c.to_string())));
        rows.push(csv::StringRecord::from(fields));
    }
    if !old.is_empty() {
        let path = dir.join(files::REGRADED_CSV);
        append_results(&path, &file.header, &old).map_err(io(&path))?;
    }
    replace_results(&csv_path, &file.header, &rows).map_err(io(&csv_path))?;
    super::write_summary_csv(dir, axes, order).map_err(|e| ReportError::Io {
        path: dir.join(files::SUMMARY_CSV),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(changed)
}
