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
            if !environments(&plan) {
                eprintln!(
                    "agentbatch: {}: an image its tasks need cannot be had (above); nothing ran",
                    job.display()
                );
                return 2;
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

/// The container engines and images the tasks need, as this machine has them; false
/// when an image cannot be had (missing under `pull: never`, an unreadable context).
fn environments(plan: &crate::job::Plan) -> bool {
    use crate::tools::container::{image, Engine};
    let mut seen = std::collections::BTreeMap::new();
    for t in &plan.tasks {
        if let Some(e) = &t.environment {
            *seen
                .entry((e.engine, e.source.clone(), e.pull))
                .or_insert(0usize) += 1;
        }
    }
    if seen.is_empty() {
        return true;
    }
    println!("environments:");
    let mut ok = true;
    let mut engines = std::collections::BTreeMap::new();
    for ((choice, source, pull), n) in seen {
        let engine = engines
            .entry(choice.name())
            .or_insert_with(|| Engine::find(choice).map_err(|e| e.to_string()));
        match engine {
            Ok(engine) => {
                let (line, bad) = image::state(engine, &source, pull);
                ok &= !bad;
                println!("  {line}; {n} task(s), engine {}", engine.version);
            }
            // The job's check already named the field; say it once more here.
            Err(e) => {
                ok = false;
                println!("  {e}");
            }
        }
    }
    ok
}
