//! The command lines of a run shared by machines: `run JOB --queue URL` (queue it),
//! `worker URL --run-id ID` (run tasks from it), `collect URL --run-id ID` (write its
//! run folder). Each prints what a user needs next; URLs are shown without passwords.

use std::path::Path;

use crate::govern::pg::redact;
use crate::job::Plan;
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
