//! ATIF trajectories: one file per task run, `<out>/<key>.json` (default
//! `<run>/exports/atif/`), from its transcript (`atif_steps.rs`) and its results.csv
//! row. The agent is agentbatch in the version that made the run; `final_metrics` are
//! the row's totals; `extra` names the run, task, variant, epoch and how it ended. A
//! task run that made no model request still gets a trajectory when run.json holds its
//! prompt (the steps are the plan's, never sent, without timestamps). A transcript no
//! row names (its task was running when the run was killed) gets one too, without
//! totals. A task run that never started has no transcript and no trajectory.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::atif_format::{Agent, FinalMetrics, Source, Step, Trajectory, SCHEMA_VERSION};
use super::atif_steps::{dollars, walk, Walked};
use super::run::Run;
use super::write::{exports_dir, write_whole};
use super::{counted, some_of, ExportError, Exported};
use crate::report::files::{transcript_key, transcript_path};
use crate::report::{PlannedTask, ResultRow};
use crate::vocab::transcript::{read_file, Stamped};

/// What `agentbatch export atif` was asked.
#[derive(Debug, Clone)]
pub struct AtifOptions {
    /// The run folder (or its results.csv).
    pub run: PathBuf,
    /// The folder the files go to; default `<run>/exports/atif`.
    pub out: Option<PathBuf>,
}

/// One task run to export: its key, and its row or (for a run killed while it ran) its
/// plan entry.
struct TaskRun<'a> {
    key: String,
    row: Option<&'a ResultRow>,
    plan: Option<&'a PlannedTask>,
}

/// Writes one trajectory per task run with a transcript; what was written and left out.
pub fn atif(opts: &AtifOptions) -> Result<Exported, ExportError> {
    let run = Run::read(&opts.run)?;
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| exports_dir(&run.dir).join("atif"));
    let planned = run.planned();
    let plan_of = |key: &str| planned.iter().find(|p| p.id == key);
    let mut done = Exported {
        notes: run.notes.clone(),
        ..Exported::default()
    };
    let mut tasks = Vec::new();
    let mut never_started = Vec::new();
    for row in &run.rows {
        match transcript_key(&row.transcript) {
            Some(key) => tasks.push(TaskRun {
                key: key.to_string(),
                row: Some(row),
                plan: plan_of(key),
            }),
            None => never_started.push(row.task_id.clone()),
        }
    }
    let unnamed = run.unnamed_transcripts()?;
    for key in &unnamed {
        tasks.push(TaskRun {
            key: key.clone(),
            row: None,
            plan: plan_of(key),
        });
    }
    let (run_id, version) = (run.run_id(), run.version());
    let mut no_steps = Vec::new();
    for task in &tasks {
        let path = transcript_path(&run.dir, &task.key);
        let text = read_file(&path).map_err(|source| ExportError::Read {
            path: path.clone(),
            source,
        })?;
        let events: Vec<Stamped> = text.lines().filter_map(Stamped::read).collect();
        let skipped = text.lines().filter(|l| !l.trim().is_empty()).count() - events.len();
        let walked = walk(&events);
        let Some(t) = trajectory(task, walked, skipped, &run_id, &version) else {
            no_steps.push(task.key.clone());
            continue;
        };
        let file = out.join(format!("{}.json", task.key));
        let mut bytes = serde_json::to_vec_pretty(&t).map_err(|e| ExportError::Write {
            path: file.clone(),
            source: std::io::Error::other(e),
        })?;
        bytes.push(b'\n');
        write_whole(&file, &bytes)?;
        done.files.push(file);
    }
    done.summary.push(format!(
        "{}: {}",
        out.display(),
        counted(done.files.len(), "ATIF trajectory", "ATIF trajectories")
    ));
    if !never_started.is_empty() {
        done.notes.push(format!(
            "no trajectory for {} that never started (no transcript): {}",
            counted(never_started.len(), "task run", "task runs"),
            some_of(&never_started)
        ));
    }
    if !no_steps.is_empty() {
        done.notes.push(format!(
            "no trajectory for {} that made no model request and whose prompt run.json does not hold (ATIF needs a step): {}",
            counted(no_steps.len(), "task run", "task runs"),
            some_of(&no_steps)
        ));
    }
    if !unnamed.is_empty() {
        done.notes.push(format!(
            "{} no row in results.csv (running when the run was killed): the trajectory ends where the transcript does, without totals: {}",
            counted(unnamed.len(), "task run has", "task runs have"),
            some_of(&unnamed)
        ));
    }
    Ok(done)
}

/// The trajectory of one task run; None when it has no step to show.
fn trajectory(
    task: &TaskRun,
    mut walked: Walked,
    skipped: usize,
    run_id: &str,
    version: &str,
) -> Option<Trajectory> {
    let mut notes = Vec::new();
    if walked.requests == 0 {
        let plan = task.plan?;
        if let Some(system) = plan.system.as_ref().filter(|s| !s.is_empty()) {
            walked
                .steps
                .push(Step::message(Source::System, "", system.clone()));
        }
        walked
            .steps
            .push(Step::message(Source::User, "", plan.prompt.clone()));
        notes.push(
            "The task made no model request: its system prompt and prompt are the plan's (run.json), never sent."
                .to_string(),
        );
    }
    if walked.steps.is_empty() {
        return None;
    }
    for (i, step) in walked.steps.iter_mut().enumerate() {
        step.step_id = i + 1;
    }
    let stop = stop_of(task.row, &walked);
    if task.row.is_none() {
        notes.push(
            "results.csv has no row for this task run: the run was killed while it ran, so the trajectory ends where its transcript does and its totals were never recorded."
                .to_string(),
        );
    }
    if walked.unanswered > 0 {
        let why = stop
            .as_ref()
            .map_or(String::new(), |(reason, _)| format!(" ({reason})"));
        notes.push(format!(
            "{} no result: the task stopped{why} before it ran or while it ran.",
            counted(walked.unanswered, "tool call has", "tool calls have")
        ));
    }
    if !walked.unreadable.is_empty() {
        notes.push(format!(
            "Answers left out, unreadable: {}.",
            walked.unreadable.join("; ")
        ));
    }
    if !walked.stray_results.is_empty() {
        notes.push(format!(
            "Tool results left out, their call in no answer: {}.",
            walked.stray_results.join(", ")
        ));
    }
    if skipped > 0 {
        notes.push(format!(
            "{} left out, unreadable (a line cut off by a kill, or an event of a newer agentbatch).",
            counted(skipped, "transcript line", "transcript lines")
        ));
    }
    let model = task
        .row
        .map(|r| r.model.clone())
        .or_else(|| walked.model.clone())
        .or_else(|| task.plan.map(|p| p.model.clone()))
        .filter(|m| !m.is_empty());
    Some(Trajectory {
        schema_version: SCHEMA_VERSION,
        session_id: format!("{run_id}/{}", task.key),
        agent: Agent {
            name: "agentbatch",
            version: version.to_string(),
            model_name: model,
        },
        final_metrics: Some(final_metrics(task.row, &walked)),
        extra: extra(task, run_id, stop),
        steps: walked.steps,
        notes: (!notes.is_empty()).then(|| notes.join(" ")),
    })
}

/// How the task run ended: its row's stop reason and detail, else its `stop` event's.
fn stop_of(row: Option<&ResultRow>, walked: &Walked) -> Option<(String, String)> {
    row.filter(|r| !r.stop_reason.is_empty())
        .map(|r| (r.stop_reason.clone(), r.stop_detail.clone()))
        .or_else(|| walked.stop.clone())
}

/// The task run's totals: its row's (the transcript's `task_end` without one).
fn final_metrics(row: Option<&ResultRow>, walked: &Walked) -> FinalMetrics {
    let total_steps = walked.steps.len();
    if let Some(r) = row {
        let prompt = match (r.input_tokens, r.cache_read_tokens, r.cache_write_tokens) {
            (Some(i), Some(cr), Some(cw)) => Some(i.saturating_add(cr).saturating_add(cw)),
            _ => None,
        };
        return FinalMetrics {
            total_prompt_tokens: prompt,
            total_completion_tokens: r.output_tokens,
            total_cached_tokens: r.cache_read_tokens,
            total_cost_usd: r.cost_usd.and_then(dollars),
            total_steps,
        };
    }
    match &walked.task_end {
        Some((usage, cost)) => FinalMetrics {
            total_prompt_tokens: Some(usage.prompt_tokens()),
            total_completion_tokens: Some(usage.output_tokens),
            total_cached_tokens: Some(usage.cache_read_tokens),
            total_cost_usd: cost.and_then(|c| dollars(c.0)),
            total_steps,
        },
        None => FinalMetrics {
            total_prompt_tokens: None,
            total_completion_tokens: None,
            total_cached_tokens: None,
            total_cost_usd: None,
            total_steps,
        },
    }
}

/// Who the task run was and how it ended, as recorded.
fn extra(task: &TaskRun, run_id: &str, stop: Option<(String, String)>) -> Map<String, Value> {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    put("run_id", run_id.into());
    let (task_id, variant, epoch) = match (task.row, task.plan) {
        (Some(r), _) => (r.task_id.clone(), r.variant.clone(), r.epoch),
        (None, Some(p)) => (p.task.clone(), p.variant.clone(), p.epoch),
        (None, None) => (String::new(), String::new(), 0),
    };
    if !task_id.is_empty() {
        put("task_id", task_id.into());
    }
    if !variant.is_empty() {
        put("variant", variant.into());
    }
    if epoch > 0 {
        put("epoch", epoch.into());
    }
    if let Some(outcome) = task.row.and_then(|r| r.outcome) {
        put("outcome", outcome.as_str().into());
    }
    if let Some((reason, detail)) = stop {
        put("stop_reason", reason.into());
        if !detail.is_empty() {
            put("stop_detail", detail.into());
        }
    }
    m
}
