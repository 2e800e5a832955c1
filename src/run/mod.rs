//! The scheduler: runs a plan's tasks with at most `concurrency` in flight, starts the
//! simulator when tasks need it, and handles interruption (the first Ctrl-C or SIGTERM
//! drains: no new task starts, running ones get the grace period; the second signal, or
//! the end of the grace period, cancels them, and they end as `cancelled`). Every task
//! of the plan gets a row, started or not; a task whose code panicked gets
//! `internal_error`.
//!
//! By phase: `folder` picks the tasks and the run's id and locks the folder, `resume`
//! reads an earlier run and decides what runs again, `phases` is the run itself
//! (`Run`: ledger, simulator, run.json, reporter, feeding, the end), `feed`
//! starts the tasks (one feeder per team), `signals` watches Ctrl-C and SIGTERM. Every
//! file of the run folder except its lock is written by the report module.

use std::path::PathBuf;
use std::sync::Arc;

use crate::govern::store::StoreError;
use crate::report::{ProgressMode, ReportError, Summary, VariantsError};
use crate::sim::Sim;
use crate::tools::Registry;

mod batch_recovery;
mod feed;
mod folder;
mod phases;
pub mod queue;
pub mod regrade;
mod resume;
pub mod shared;
mod signals;
pub mod worker;
pub use resume::ResumeOptions;

/// How long running tasks may go on after the first Ctrl-C / SIGTERM by default.
pub(crate) const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// How to run a plan.
pub struct RunOptions {
    /// Reports go to `<out_dir>/<run_id>/`.
    pub out_dir: PathBuf,
    /// Defaults to `<job name>-<UTC timestamp>`.
    pub run_id: Option<String>,
    /// Overrides the job's concurrency.
    pub concurrency: Option<usize>,
    /// Only tasks whose id matches one of these globs.
    pub only: Vec<String>,
    pub progress: ProgressMode,
    pub registry: Arc<Registry>,
    /// A simulator to use instead of starting one (tests inspect its request log).
    pub sim: Option<Arc<Sim>>,
    /// Install Ctrl-C / SIGTERM handlers (the CLI does; embedders may not want to).
    pub handle_signals: bool,
    /// The persistent ledger of team period caps (default: the job's `ledger:`, else
    /// `<out_dir>/ledger.sqlite`).
    pub ledger: Option<PathBuf>,
    /// Continue this earlier run instead of starting a new one.
    pub resume: Option<ResumeOptions>,
    /// After the first interrupt, how long running tasks may go on before they are
    /// cancelled.
    pub grace: std::time::Duration,
    /// Keep the pristine checkouts of git repositories here, across runs, keyed by
    /// commit (default: each run makes its own and deletes it).
    pub pristine_cache: Option<PathBuf>,
    /// Be a worker of a shared run: its tasks come from this queue.
    pub queue: Option<Arc<worker::QueueWork>>,
    /// Export each task's trace over OTLP (None: no traces).
    pub trace: Option<crate::trace::Settings>,
    /// No task waits for a team's period cap (`on_cap: wait`) past this (`--until`).
    pub until: Option<chrono::DateTime<chrono::Utc>>,
}

impl RunOptions {
    pub fn new(out_dir: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            out_dir: out_dir.into(),
            run_id: None,
            concurrency: None,
            only: Vec::new(),
            progress: ProgressMode::Auto,
            registry: Arc::new(Registry::builtin()),
            sim: None,
            handle_signals: false,
            ledger: None,
            resume: None,
            grace: DEFAULT_GRACE,
            pristine_cache: None,
            queue: None,
            trace: None,
            until: None,
        }
    }
}

/// Why a run could not start or finish. [`RunError::Invalid`] alone means nothing ran
/// and nothing was changed; every other kind may come after the run folder, the ledger
/// or a resumed run's files were changed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad arguments, or a job, run folder or earlier run that cannot be used, found
    /// before anything was written: nothing ran.
    #[error("{0}")]
    Invalid(String),
    /// A file of the run folder could not be written (or, for a resume, rewritten): the
    /// folder may be partly updated; every step of a resume can be repeated.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// summary.csv could not be made from the rows written.
    #[error(transparent)]
    Summary(#[from] VariantsError),
    #[error("cannot start the simulator: {0}")]
    Sim(std::io::Error),
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("cannot open {0}")]
    Ledger(StoreError),
}

impl RunError {
    /// The process's exit code (see src/main.rs): 2 when nothing ran and nothing was
    /// changed, so a script may fix its input and try again as if never run; 1 for a
    /// run that broke, after which the run folder may hold part of the run (and
    /// `--resume` continues it).
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Invalid(_) => 2,
            _ => 1,
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    pub summary: Summary,
    /// False when the run was interrupted (some tasks cancelled or never started).
    pub complete: bool,
    /// report.html, unless it could not be written (said on stderr).
    pub page: Option<std::path::PathBuf>,
    /// What became of the traces, when they were on.
    pub telemetry: Option<crate::vocab::sink::TelemetryCounts>,
}

/// Writes the run folder's report.html. The page is a view of files already written,
/// so failing to write it loses nothing and changes no exit code: it is a warning,
/// and `agentbatch report DIR` writes it again.
pub(crate) fn write_page(
    dir: &std::path::Path,
    from_run: Option<crate::page::FromRun>,
) -> Option<std::path::PathBuf> {
    match crate::page::write_with(dir, &crate::page::PageOptions::from_env(), from_run) {
        Ok(w) => Some(w.path),
        Err(e) => {
            eprintln!(
                "agentbatch: warning: no report page: {} (the results are written; `agentbatch report {}` tries again)",
                crate::text::clip_quotes(&e.to_string()),
                dir.display()
            );
            None
        }
    }
}

/// Where tasks' events go: the reporter, and each task's trace when traces are on.
#[derive(Clone)]
struct Logs {
    tx: tokio::sync::mpsc::UnboundedSender<crate::vocab::log::Event>,
    traces: Option<Arc<crate::trace::Tracing>>,
}

impl Logs {
    /// A task's log, with its trace attached when traces are on.
    fn task(&self, spec: &crate::job::TaskSpec) -> crate::vocab::log::TaskLog {
        crate::vocab::log::TaskLog::new(&spec.id, self.tx.clone())
            .with_sink(self.traces.as_ref().map(|t| t.for_task(spec)))
    }

    /// The row of a task that never started (a budget could not pay for it, or the run
    /// was interrupted first), with its trace when traces are on: every task of the
    /// results has one, here a task span alone, starting and ending when it was
    /// skipped, with its stop reason and outcome.
    fn not_started(&self, spec: &crate::job::TaskSpec, row: crate::vocab::log::TaskResult) {
        if let Some(t) = &self.traces {
            t.for_task(spec).finished(&row);
        }
        let _ = self
            .tx
            .send(crate::vocab::log::Event::TaskFinished(Box::new(row)));
    }
}

/// Runs the plan and writes its reports.
pub async fn run(plan: crate::job::Plan, opts: RunOptions) -> Result<RunOutcome, RunError> {
    let selected = folder::select_tasks(&plan, &opts.only)?;
    let concurrency = opts.concurrency.unwrap_or(plan.concurrency);
    if concurrency == 0 {
        return Err(RunError::Invalid("--concurrency must be at least 1".into()));
    }
    if concurrency as u64 > crate::vocab::bounds::CONCURRENCY {
        return Err(RunError::Invalid(format!(
            "--concurrency {concurrency} is too large: at most {}",
            crate::vocab::bounds::CONCURRENCY
        )));
    }
    let resumed = match &opts.resume {
        Some(r) => {
            if opts.run_id.is_some() {
                return Err(RunError::Invalid(
                    "--run-id cannot be combined with --resume: the run keeps its id".into(),
                ));
            }
            for (marker, what) in [
                (
                    crate::report::files::COLLECTED_MARKER,
                    "was written by collect from a shared run",
                ),
                (
                    crate::report::files::WORKER_MARKER,
                    "is one worker's share of a shared run",
                ),
            ] {
                if r.dir.join(marker).exists() {
                    return Err(RunError::Invalid(format!(
                        "--resume {}: the folder {what}, whose tasks are in the queue: start workers to finish it (agentbatch worker URL --run-id ID), then collect it again",
                        r.dir.display()
                    )));
                }
            }
            if !r.dir.join(crate::report::files::RUN_JSON).is_file() {
                return Err(RunError::Invalid(format!(
                    "--resume {}: not a run folder (it has no run.json); give the folder of a run: <out>/<run-id>",
                    r.dir.display()
                )));
            }
            // A newer agentbatch's folder is left as it is: batch recovery would
            // write to it before the resume reads it.
            if let Some(found) = crate::report::files::newer_format(&r.dir) {
                return Err(RunError::Invalid(format!(
                    "--resume {}",
                    crate::report::files::newer_format_message(
                        &r.dir.join(crate::report::files::RUN_JSON),
                        found
                    )
                )));
            }
            // Locked before the folder is read, and held until the run ends.
            let lock = folder::lock_run_dir(&r.dir)?;
            let run_id = r
                .dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            for note in batch_recovery::recover(&r.dir, &plan, &run_id).await {
                eprintln!("resume: {note}");
            }
            let resumed = resume::prepare(r, &plan, selected.clone(), &resume::header_for(&plan))?;
            Some((resumed, lock))
        }
        None => None,
    };
    phases::Run::new(plan, opts, selected, resumed)?
        .execute()
        .await
}

#[cfg(test)]
mod tests {
    use super::feed::crashed;
    use super::*;
    use crate::job::TaskSpec;
    use crate::report::{Reporter, ReporterConfig, RunJson};
    use crate::vocab::log::{Event, TaskLog};
    use crate::vocab::stop::StopReason;
    use tokio_util::sync::CancellationToken;

    fn spec_of(model: &str) -> TaskSpec {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.yaml");
        std::fs::write(
            &path,
            format!("name: x\ntasks:\n  - {{ id: a, prompt: p, model: {model}, sim: {{ turns: [ {{ content: [ {{ text: hi }} ] }} ] }} }}\n"),
        )
        .unwrap();
        crate::job::load(&path, &Registry::builtin()).unwrap().tasks[0].clone()
    }

    fn spec() -> TaskSpec {
        spec_of("m")
    }

    /// The row of a task that panicked costs what its transcript recorded: its settled
    /// requests and the reservation it held (which the ledger charged in full).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicked_tasks_row_costs_what_its_transcript_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_of("claude-sonnet-4-5");
        let reporter = Reporter::start(ReporterConfig {
            run_id: "r".into(),
            dir: dir.path().join("r"),
            run_json: RunJson {
                tasks: Some(serde_json::value::to_raw_value(&[&spec]).unwrap()),
                ..RunJson::default()
            },
            total_tasks: 1,
            progress: ProgressMode::Quiet,
            on_fatal: CancellationToken::new(),
            axes: Vec::new(),
            resume: false,
            already_done: 0,
            finished: None,
            follower: None,
        })
        .unwrap();
        let log = TaskLog::new(&spec.id, reporter.sender());
        log.started();
        log.emit(crate::vocab::transcript::TranscriptEvent::Reserve {
            turn: 1,
            attempt: 1,
            max_tokens: 1024,
            prompt_tokens_upper_bound: 10,
            paced_input_tokens: None,
            reserved_usd: Some(rust_decimal::Decimal::new(5, 2).into()),
            spent_usd: rust_decimal::Decimal::ZERO.into(),
        });
        log.emit(crate::vocab::transcript::TranscriptEvent::Settle {
            turn: 1,
            usage: Default::default(),
            usage_estimated: false,
            cost_usd: Some(rust_decimal::Decimal::new(1, 2).into()),
            released_usd: Some(rust_decimal::Decimal::new(4, 2).into()),
            spent_usd: rust_decimal::Decimal::new(1, 2).into(),
        });
        log.emit(crate::vocab::transcript::TranscriptEvent::Reserve {
            turn: 2,
            attempt: 1,
            max_tokens: 1024,
            prompt_tokens_upper_bound: 10,
            paced_input_tokens: None,
            reserved_usd: Some(rust_decimal::Decimal::new(4, 2).into()),
            spent_usd: rust_decimal::Decimal::new(1, 2).into(),
        });
        let e = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
        let _ = reporter
            .sender()
            .send(Event::TaskFinished(Box::new(crashed(&spec, e))));
        drop(log);
        let summary = reporter.finish("finished").await.unwrap();
        assert_eq!(summary.rows[0].stop_reason, StopReason::InternalError);
        let csv = std::fs::read_to_string(dir.path().join("r/results.csv")).unwrap();
        assert!(csv.contains(",0.05,"), "0.01 settled + 0.04 held: {csv}");
        // Without a price there is no cost to tell.
        let unpriced = spec_of("m");
        let e = tokio::spawn(async { panic!("x") }).await.unwrap_err();
        assert_eq!(crashed(&unpriced, e).measured.cost_usd, None);
    }

    #[tokio::test]
    async fn a_task_that_panics_is_an_internal_error_with_its_message_not_a_cancel() {
        let spec = spec();
        let e = tokio::spawn(async { panic!("index out of bounds: the len is 3") })
            .await
            .unwrap_err();
        let row = crashed(&spec, e);
        assert_eq!(row.stop_reason, StopReason::InternalError);
        assert_eq!(row.outcome, crate::vocab::stop::Outcome::Error);
        assert!(
            row.stop_detail
                .contains("panicked: index out of bounds: the len is 3"),
            "{}",
            row.stop_detail
        );
        let owned = tokio::spawn(async { std::panic::panic_any(format!("owned {}", 7)) })
            .await
            .unwrap_err();
        assert!(crashed(&spec, owned)
            .stop_detail
            .contains("panicked: owned 7"));
        assert!(StopReason::InternalError.is_infra(), "resume runs it again");
        assert!(StopReason::LedgerError.is_infra(), "and ledger errors too");
        assert_eq!(
            StopReason::parse("internal_error"),
            Some(StopReason::InternalError)
        );
    }
}
