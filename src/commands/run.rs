//! `agentbatch run`: its arguments, loading the job, and the run here or queued for
//! workers (`--queue`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::job::{self, JobError, Plan};
use crate::report::ProgressMode;
use crate::run::{self, RunOptions};
use crate::tools::Registry;

/// The arguments of `agentbatch run` besides the job file.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Folder for reports.
    #[arg(long, default_value = "reports", value_name = "DIR")]
    out: PathBuf,
    /// Name of this run's report folder (default: <job name>-<UTC time>).
    #[arg(long, value_name = "ID")]
    run_id: Option<String>,
    /// Tasks in flight at once (overrides the job's concurrency).
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Only run tasks whose id matches this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    only: Vec<String>,
    /// No progress output; the summary is still printed.
    #[arg(long)]
    quiet: bool,
    /// The persistent ledger of team period caps: a SQLite file or a postgres:// URL
    /// (default: the job's `ledger:`, else DIR/ledger.sqlite).
    #[arg(long, value_name = "PATH|URL", env = "AGENTBATCH_LEDGER_URL")]
    ledger: Option<PathBuf>,
    /// Continue an earlier run (its folder, DIR/<run-id>): run only what results.csv
    /// does not hold yet, and again what ended on an infrastructure failure.
    #[arg(long, value_name = "RUN_DIR")]
    resume: Option<PathBuf>,
    /// With --resume: keep rows that ended in provider_error, rate_limited,
    /// ledger_error, tool_setup_error, cancelled, internal_error or verifier_error
    /// instead of running those tasks again.
    #[arg(long, requires = "resume")]
    no_retry_errors: bool,
    /// With --resume: run again the tasks a team's cap stopped (team_budget), for
    /// when the cap allows them now (a new period, a raised cap; a cap that still
    /// binds stops them again before any request). What they spent still counts.
    #[arg(long, requires = "resume")]
    retry_budget_stops: bool,
    /// With --resume: go on even though the job file changed since the run started.
    #[arg(long, requires = "resume")]
    force: bool,
    /// No task waits for a team's period cap (`on_cap: wait`) past this time: an RFC 3339
    /// time ("2026-12-05T06:00:00Z") or "HH:MM" (the next such time, UTC).
    #[arg(long, value_name = "TIME", value_parser = crate::vocab::values::parse_until)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// After the first Ctrl-C or SIGTERM, how long running tasks may finish before they
    /// are cancelled ("90s", "5m").
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Keep the pristine checkouts of git repositories in this folder across runs, one
    /// per commit and ref, instead of making them per run.
    #[arg(long, value_name = "DIR", env = "AGENTBATCH_PRISTINE_CACHE")]
    pristine_cache: Option<PathBuf>,
    /// Queue the run in this PostgreSQL database for workers on any number of machines
    /// (`agentbatch worker`) instead of running it here.
    #[arg(long, value_name = "URL", env = "AGENTBATCH_QUEUE_URL")]
    queue: Option<String>,
    #[command(flatten)]
    trace: super::trace::TraceArgs,
}

/// Loads a job file, for a run whose reports go to `out` where there is one; its
/// problems printed, exit code 2, when it has any.
pub fn load(path: &Path, registry: &Registry, out: Option<&Path>) -> Result<Plan, ExitCode> {
    match out {
        Some(out) => job::load_for_run(path, registry, out),
        None => job::load(path, registry),
    }
    .map_err(|e: JobError| {
        eprintln!("{e}");
        eprintln!(
            "agentbatch: {} has {} problem(s); nothing ran",
            path.display(),
            e.diagnostics.len()
        );
        ExitCode::from(2)
    })
}

/// Runs the job here (or queues it with `--queue`); the exit code.
pub async fn run(job: PathBuf, args: RunArgs) -> ExitCode {
    let registry = Arc::new(Registry::builtin());
    let loaded = if args.queue.is_some() {
        job::load_for_queue(&job, &registry).map_err(|e| {
            eprintln!("{e}");
            eprintln!(
                "agentbatch: {} has {} problem(s); nothing was queued",
                job.display(),
                e.diagnostics.len()
            );
            ExitCode::from(2)
        })
    } else {
        load(
            &job,
            &registry,
            Some(args.resume.as_deref().unwrap_or(&args.out)),
        )
    };
    let loaded = loaded.and_then(|p| Ok((p, args.trace.settings().map_err(ExitCode::from)?)));
    let (plan, trace) = match loaded {
        Ok(p) => p,
        Err(code) => return code,
    };
    if let Some(url) = &args.queue {
        return ExitCode::from(super::shared::enqueue(
            &plan,
            &job,
            url,
            args.run_id.as_ref(),
            &args.only,
        ));
    }
    let mut opts = RunOptions::new(args.out);
    opts.run_id = args.run_id;
    opts.concurrency = args.concurrency;
    opts.only = args.only;
    opts.progress = if args.quiet {
        ProgressMode::Quiet
    } else {
        ProgressMode::Auto
    };
    opts.registry = registry;
    opts.handle_signals = true;
    opts.ledger = args.ledger;
    opts.grace = args.grace;
    opts.until = args.until;
    opts.pristine_cache = args.pristine_cache;
    opts.trace = trace;
    opts.resume = args.resume.map(|dir| run::ResumeOptions {
        dir,
        retry_errors: !args.no_retry_errors,
        retry_budget_stops: args.retry_budget_stops,
        force: args.force,
    });
    ExitCode::from(super::outcome::report(run::run(plan, opts).await))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use crate::vocab::stop::StopReason;

    /// The help of --no-retry-errors names every stop reason a resume runs again.
    #[test]
    fn no_retry_errors_names_every_infra_reason() {
        let cli = super::super::cli::Cli::command();
        let run = cli.find_subcommand("run").expect("a run command");
        let arg = run
            .get_arguments()
            .find(|a| a.get_id() == "no_retry_errors")
            .expect("--no-retry-errors");
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        for r in StopReason::ALL.into_iter().filter(|r| r.is_infra()) {
            assert!(
                help.contains(r.as_str()),
                "{} is not in: {help}",
                r.as_str()
            );
        }
    }
}
