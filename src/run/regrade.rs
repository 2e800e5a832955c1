//! `agentbatch regrade RUN`: the verifier run again on every recorded patch of a run
//! folder, in fresh environments and without any model request. For a verifier that
//! was wrong, an image that would not start, or a re-scoring with a fixed test patch
//! (`--job` with the fixed suite). The new verdicts go beside the old ones
//! (`report::regrade`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;

use super::RunError;
use crate::agent::fresh::Ground;
use crate::job::{Plan, TaskSpec, Verifier};
use crate::report::regrade::{Regraded, RowRef};
use crate::report::{files, RunJson};
use crate::tools::Registry;
use crate::vocab::log::{Event, TaskLog};
use crate::vocab::stop::{Outcome, StopReason};
use crate::vocab::transcript::TranscriptEvent;

/// What a regrade did.
#[derive(Debug, Default)]
pub struct RegradeReport {
    /// Rows graded again.
    pub regraded: usize,
    /// Of those, rows whose outcome changed.
    pub changed: usize,
    /// Rows left as they were: no verifier, no recorded patch, or not picked.
    pub skipped: usize,
    /// Rows whose verifier could not run this time: they keep their verdict.
    pub errors: usize,
    /// Rows left as they were because their verifier shares the agent's container
    /// (Harbor's default): what the agent changed outside the workspace is gone, so a
    /// fresh container would grade something else. `--shared` grades them anyway.
    pub shared_skipped: usize,
    /// The new outcome of each regraded row: (task id, variant, epoch, before, after).
    pub verdicts: Vec<(String, String, u32, String, String)>,
}

/// The job file of run folder `dir`: `job`, else the one its run.json names.
fn job_file(dir: &Path, job: Option<&Path>) -> Result<PathBuf, RunError> {
    if let Some(j) = job {
        return Ok(j.to_path_buf());
    }
    let run_json = RunJson::read(&dir.join(files::RUN_JSON))
        .map_err(|e| RunError::Invalid(format!("{e}: is {} a run folder?", dir.display())))?;
    let path = PathBuf::from(&run_json.job_file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(RunError::Invalid(format!(
            "the run's job file {} is not here (it is named as the run was started): give it with --job",
            path.display()
        )))
    }
}

/// Regrades the rows of run folder `dir` whose task has a verifier (those whose id or
/// key matches `only`, when given) with the verifiers of `job` (default: the run's
/// own job file, read again); Harbor tasks whose verifier shares the agent's container
/// only with `shared`.
pub async fn regrade(
    dir: &Path,
    only: Option<&str>,
    job: Option<&Path>,
    shared: bool,
    registry: &Registry,
) -> Result<RegradeReport, RunError> {
    let dir = std::path::absolute(dir).map_err(|e| RunError::Invalid(e.to_string()))?;
    if !dir.join(files::RESULTS_CSV).is_file() {
        return Err(RunError::Invalid(format!(
            "{} has no results.csv: give a run folder (DIR/<run-id>)",
            dir.display()
        )));
    }
    let _lock = super::folder::lock_run_dir(&dir)?;
    let job = job_file(&dir, job)?;
    let plan: Plan =
        crate::job::load_for_queue(&job, registry).map_err(|e| RunError::Invalid(e.to_string()))?;
    let only = match only {
        Some(g) => Some(
            globset::Glob::new(g)
                .map_err(|e| RunError::Invalid(format!("--only \"{g}\" is not a glob: {e}")))?
                .compile_matcher(),
        ),
        None => None,
    };
    let rows = crate::report::regrade::rows(&dir).map_err(|e| RunError::Invalid(e.to_string()))?;
    let specs: HashMap<(&str, &str, u32), &TaskSpec> = plan
        .tasks
        .iter()
        .map(|t| ((t.task.as_str(), t.variant.as_str(), t.epoch), t))
        .collect();
    let mut report = RegradeReport::default();
    let mut picked: Vec<(&RowRef, &TaskSpec)> = Vec::new();
    for row in &rows {
        let spec = specs.get(&(row.task_id.as_str(), row.variant.as_str(), row.epoch));
        let chosen = only
            .as_ref()
            .is_none_or(|g| g.is_match(&row.task_id) || spec.is_some_and(|s| g.is_match(&s.id)));
        match spec {
            Some(s) if chosen && s.verifier.is_some() && !row.patch.is_empty() => {
                if !shared
                    && s.verifier
                        .as_deref()
                        .is_some_and(Verifier::shares_container)
                {
                    report.shared_skipped += 1;
                } else {
                    picked.push((row, s))
                }
            }
            _ => report.skipped += 1,
        }
    }
    let containers = Arc::new(crate::agent::environment::Containers::for_run(
        &dir,
        files::environments_dir(&dir),
    ));
    let pristines = Arc::new(crate::tools::pristine::Pristines::new(
        dir.join(files::PRISTINE),
        None,
    ));
    let cancel = tokio_util::sync::CancellationToken::new();
    let ground = Ground {
        work_dir: &dir,
        pristines: &pristines,
        containers: &containers,
        cancel: &cancel,
    };
    let graded: Vec<Regraded> = futures::stream::iter(picked)
        .map(|(row, spec)| regrade_one(&dir, row, spec, &ground))
        .buffer_unordered(plan.concurrency.max(1))
        .collect()
        .await;
    report.regraded = graded.len();
    report.errors = graded
        .iter()
        .filter(|g| g.outcome == Outcome::Error)
        .count();
    let before: HashMap<(&str, &str, u32), String> = rows
        .iter()
        .map(|r| {
            (
                (r.task_id.as_str(), r.variant.as_str(), r.epoch),
                r.outcome.map_or(String::new(), |o| o.as_str().to_string()),
            )
        })
        .collect();
    for g in &graded {
        let was = before
            .get(&(g.task_id.as_str(), g.variant.as_str(), g.epoch))
            .cloned()
            .unwrap_or_default();
        let now = if g.outcome == Outcome::Error {
            format!("{was} (kept: {})", g.stop_detail)
        } else {
            g.outcome.as_str().to_string()
        };
        report
            .verdicts
            .push((g.task_id.clone(), g.variant.clone(), g.epoch, was, now));
    }
    let mut order: Vec<String> = Vec::new();
    for t in &plan.tasks {
        if !order.contains(&t.variant) {
            order.push(t.variant.clone());
        }
    }
    report.changed = crate::report::regrade::record(&dir, &graded, &plan.axes, &order)?;
    crate::report::remove_empty_work_folders(&dir);
    Ok(report)
}

/// The loop's own stop (reason and detail) from a transcript, and the number of the
/// last regrade recorded there.
fn from_transcript(path: &Path) -> (Option<(StopReason, String)>, u32) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut stop = None;
    let mut last = 0;
    for line in text.lines() {
        match TranscriptEvent::read(line) {
            Some(TranscriptEvent::Stop {
                stop_reason: Some(r),
                detail,
            }) => stop = Some((r, detail)),
            Some(TranscriptEvent::Verifier(v)) => last = last.max(v.regrade),
            _ => {}
        }
    }
    (stop, last)
}

async fn regrade_one(dir: &Path, row: &RowRef, spec: &TaskSpec, ground: &Ground<'_>) -> Regraded {
    let patch = std::fs::read(dir.join(&row.patch)).ok();
    let transcript = dir.join(&row.transcript);
    let (stop, last) = from_transcript(&transcript);
    let n = last + 1;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let log = TaskLog::new(&spec.id, tx);
    let result = crate::agent::verify::regrade(spec, ground, patch.as_deref(), &log, n).await;
    drop(log);
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let Event::Transcript { line, .. } = e {
            events.push(line.event);
        }
    }
    let result = result.unwrap_or_default();
    let (outcome, stop_reason, stop_detail) = match &result.infra {
        Some(e) => (
            Outcome::Error,
            StopReason::VerifierError,
            format!("regrade {n}: the verifier could not run: {e}"),
        ),
        None => {
            let (reason, detail) = stop.unwrap_or((StopReason::Completed, String::new()));
            let outcome = if result.passed {
                Outcome::Pass
            } else {
                Outcome::Fail
            };
            (outcome, reason, detail)
        }
    };
    Regraded {
        task_id: row.task_id.clone(),
        variant: row.variant.clone(),
        epoch: row.epoch,
        outcome,
        stop_reason: stop_reason.as_str().to_string(),
        stop_detail,
        check_exit_code: result.exit_code,
        check_ms: result.ms,
        tests_passed: result.tests_passed,
        tests_failed: result.tests_failed,
        reward: result.reward,
        events,
    }
}
