//! `agentbatch validate JOB [--out DIR]`: the expanded plan, what this machine gives the
//! sandbox, or every problem of the job file (exit 2), checked as `run --out DIR` would
//! check it before running.

use std::path::Path;

use crate::tools::Registry;

/// Checks the job file for a run whose reports go to `out` and prints the plan or the
/// problems; returns the exit code.
pub fn print(job: &Path, out: &Path) -> u8 {
    match crate::job::load_for_run(job, &Registry::builtin(), out) {
        Ok(plan) => {
            print!("{}", crate::job::describe(&plan));
            if plan.tasks.iter().any(|t| t.repo.is_some()) {
                println!(
                    "sandbox on this machine: {}",
                    crate::tools::sandbox::describe_capabilities()
                );
            }
            println!("ok: {} is valid", job.display());
            0
        }
        Err(e) => {
            eprintln!("{e}");
            eprintln!(
                "agentbatch: {} has {} problem(s); nothing ran",
                job.display(),
                e.diagnostics.len()
            );
            2
        }
    }
}
