//! `agentbatch suite show PATH` and `agentbatch regrade RUN`.

use std::path::Path;
use std::process::ExitCode;

use crate::job::SuiteFormat;
use crate::text::clip_quotes;

/// Prints the suite at `path` as job YAML; the exit code: 0 shown, 2 the suite cannot
/// be read (each problem named by file and field).
pub fn show(path: &Path, format: Option<SuiteFormat>) -> u8 {
    match crate::job::suites::show(path, format) {
        Ok(yaml) => {
            print!("{yaml}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            2
        }
    }
}

/// Regrades a run folder and writes its page again; prints what changed. Exit code 0
/// when every picked row was graded, 1 when a verifier could not run for some, 2 when
/// nothing could be regraded (not a run folder, no job file).
pub async fn regrade(run: &Path, only: Option<&str>, job: Option<&Path>, shared: bool) -> ExitCode {
    let registry = crate::tools::Registry::builtin();
    match crate::run::regrade::regrade(run, only, job, shared, &registry).await {
        Ok(r) => {
            for (task, variant, epoch, before, after) in &r.verdicts {
                let variant = if variant.is_empty() {
                    String::new()
                } else {
                    format!(" [{variant}]")
                };
                let epoch = if *epoch > 1 {
                    format!(" epoch {epoch}")
                } else {
                    String::new()
                };
                let mark = if before == after || after.starts_with(before.as_str()) {
                    ""
                } else {
                    "  (changed)"
                };
                println!("{task}{variant}{epoch}: {before} -> {after}{mark}");
            }
            println!(
                "regraded {} task runs: {} changed their outcome, {} could not be verified (they keep their verdict; run regrade again); {} left as they were (no verifier, no recorded patch, or not picked)",
                r.regraded, r.changed, r.errors, r.skipped
            );
            if r.shared_skipped > 0 {
                println!(
                    "{} task runs not regraded: their Harbor verifier shares the agent's container, whose changes outside the workspace are gone, so a fresh container would grade something else; --shared grades them from the recorded patch anyway",
                    r.shared_skipped
                );
            }
            if let Err(e) = crate::page::write(run, &crate::page::PageOptions::from_env()) {
                eprintln!(
                    "agentbatch regrade: the page was not written again: {}",
                    clip_quotes(&e.to_string())
                );
            }
            ExitCode::from(u8::from(r.errors > 0))
        }
        Err(e) => {
            eprintln!("agentbatch regrade: {}", clip_quotes(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
    }
}
