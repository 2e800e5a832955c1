//! The command lines of a run shared by machines: `run JOB --queue URL` (queue it),
//! `worker URL --run-id ID` (run tasks from it), `collect URL --run-id ID` (write its
//! run folder). Each prints what a user needs next; URLs are shown without passwords.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::govern::pg::redact;
use crate::job::Plan;
use crate::report::ProgressMode;
use crate::run::shared::{self, WorkerOptions};
use crate::run::RunOptions;
use crate::text::clip_quotes;
use crate::tools::Registry;

/// Queues the plan; prints how to start workers and collect. The exit code.
pub fn enqueue(plan: &Plan, job: &Path, url: &str, run_id: Option<&String>, only: &[String]) -> u8 {
    match shared::enqueue(plan, job, url, run_id, only) {
        Ok(q) => {
            let shown = redact(url);
            println!(
                "{} run {}: {} tasks ({})",
                if q.new { "queued" } else { "already queued:" },
                q.run_id,
                q.tasks,
                q.progress
            );
            println!(
                "start workers (any number, on any machine with the job file and the keys):\n  agentbatch worker {shown} --run-id {} [--concurrency N]",
                q.run_id
            );
            println!(
                "see progress and write the run folder (again at any time):\n  agentbatch collect {shown} --run-id {} [--out DIR]",
                q.run_id
            );
            0
        }
        Err(e) => {
            eprintln!("agentbatch: {}", clip_quotes(&e.to_string()));
            e.exit_code()
        }
    }
}

/// The plan and options of a worker, its traces' settings in them, or the exit code of
/// why it cannot be one. The trace settings are checked first: a refused one (a
/// credential in the URL, a gRPC protocol) stops the worker before it joins the run.
pub fn worker(
    w: &WorkerOptions,
    registry: &Registry,
    trace: &super::trace::TraceArgs,
) -> Result<(Plan, RunOptions), u8> {
    let trace = trace.settings()?;
    let (plan, mut opts) = shared::worker(w, registry).map_err(|e| {
        eprintln!("agentbatch worker: {}", clip_quotes(&e.to_string()));
        e.exit_code()
    })?;
    opts.trace = trace;
    Ok((plan, opts))
}

/// Writes the run folder from the queue; prints how far the run is and, when attempts
/// died with their worker, the whole run's charge. The exit code.
pub fn collect(url: &str, run_id: &str, out: &Path, ledger: Option<&Path>) -> u8 {
    match shared::collect(url, run_id, out, ledger) {
        Ok(c) => {
            println!("run {run_id}: {}", c.progress);
            println!(
                "{}: {} rows{}",
                c.dir.join(crate::report::files::RESULTS_CSV).display(),
                c.rows,
                if c.progress.finished() {
                    ""
                } else {
                    " so far (collect again when the workers are done)"
                }
            );
            match crate::report::whole_run_cost(&c.dir) {
                Ok(Some(lines)) => println!("{lines}"),
                Ok(None) => {}
                Err(e) => eprintln!("agentbatch collect: warning: {e}"),
            }
            if let Some(page) = &c.page {
                println!("page: {}", page.display());
            }
            0
        }
        Err(e) => {
            eprintln!("agentbatch collect: {}", clip_quotes(&e.to_string()));
            e.exit_code()
        }
    }
}

/// The arguments of `agentbatch worker`.
#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The queue's PostgreSQL database.
    #[arg(value_name = "URL", env = "AGENTBATCH_QUEUE_URL")]
    url: String,
    #[arg(long, value_name = "ID")]
    run_id: String,
    /// The job file (default: the path `run --queue` was given); it must be the same.
    #[arg(long, value_name = "JOB")]
    job: Option<PathBuf>,
    /// Tasks in flight at once (default: the job's concurrency).
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    #[arg(long, default_value = "reports", value_name = "DIR")]
    out: PathBuf,
    /// This worker's name in the queue (default: host-pid).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// How long a claimed task stays this worker's without a heartbeat: a killed
    /// worker's tasks run again elsewhere after it.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    lease: Duration,
    #[arg(long)]
    quiet: bool,
    /// The team ledger (default: the queue's database).
    #[arg(long, value_name = "URL", env = "AGENTBATCH_LEDGER_URL")]
    ledger: Option<PathBuf>,
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    grace: Duration,
    #[command(flatten)]
    trace: super::trace::TraceArgs,
}

/// Runs tasks of a queued run until none is left; the exit code.
pub async fn work(args: WorkerArgs) -> ExitCode {
    let w = WorkerOptions {
        url: args.url,
        run_id: args.run_id,
        job: args.job,
        out: args.out,
        worker: args.name,
        lease: args.lease,
    };
    let registry = Arc::new(Registry::builtin());
    match worker(&w, &registry, &args.trace) {
        Ok((plan, mut opts)) => {
            opts.concurrency = args.concurrency;
            opts.progress = if args.quiet {
                ProgressMode::Quiet
            } else {
                ProgressMode::Auto
            };
            opts.registry = registry;
            opts.handle_signals = true;
            opts.ledger = args.ledger;
            opts.grace = args.grace;
            ExitCode::from(super::outcome::report(shared::work(plan, opts).await))
        }
        Err(code) => ExitCode::from(code),
    }
}
