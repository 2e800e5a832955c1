//! What a finished run (or a worker's share of one) prints, and the exit code it
//! gives: 0 finished, 1 broken or a task hit a bug, 2 invalid input, 130 interrupted.

use std::process::ExitCode;

use crate::run::{RunError, RunOutcome};
use crate::text::clip_quotes;

/// Prints the run's tables and where its reports are; the exit code.
pub fn report(result: Result<RunOutcome, RunError>) -> u8 {
    match result {
        Ok(outcome) => {
            let s = &outcome.summary;
            println!("{}", s.table());
            if s.variants.len() > 1 || s.variants.iter().any(|v| !v.variant.is_empty()) {
                println!();
                print!("{}", crate::report::variants_table(&s.variants));
            }
            match crate::report::whole_run_cost(&s.dir) {
                Ok(Some(lines)) => println!("{lines}"),
                Ok(None) => {}
                Err(e) => eprintln!("agentbatch: cannot add up the earlier attempts: {e}"),
            }
            println!(
                "reports: {} (per variant: summary.csv)",
                s.dir.join(crate::report::files::RESULTS_CSV).display()
            );
            if let Some(page) = &outcome.page {
                println!("page: {}", page.display());
            }
            if let Some(t) = &outcome.telemetry {
                println!("{}", t.line());
            }
            if !outcome.complete {
                eprintln!("agentbatch: the run was interrupted; unfinished tasks are recorded as cancelled");
                return 130;
            }
            let crashed = s
                .rows
                .iter()
                .filter(|r| r.stop_reason == crate::vocab::stop::StopReason::InternalError)
                .count();
            if crashed > 0 {
                // A bug must not look like a clean run to a script or a CI job.
                eprintln!("agentbatch: {crashed} task(s) ended with internal_error, a bug in agentbatch (see stop_detail; please report it); the reports are complete, and --resume runs them again");
                return 1;
            }
            0
        }
        Err(e) => {
            let msg = clip_quotes(&e.to_string());
            match e {
                RunError::Invalid(_) => eprintln!("agentbatch: {msg}"),
                _ => eprintln!("agentbatch: the run failed: {msg}"),
            }
            e.exit_code()
        }
    }
}

/// The exit code of a command that ends in an error or not (`sim`, `bench`): 1 with the
/// error on stderr, after `agentbatch <cmd>: `.
pub fn exit_code(cmd: &str, r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentbatch {cmd}: {}", clip_quotes(&format!("{e:#}")));
            ExitCode::from(1)
        }
    }
}
