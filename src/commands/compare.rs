//! `agentbatch compare RUN_DIR...`: compares variants (or runs) on the tasks both sides
//! ran, prints the table and writes the report files beside the first run.

use std::path::{Path, PathBuf};

use crate::compare::{compare as compare_runs, CompareOptions};

/// Compares and prints; the exit code: 0 written, 2 the runs could not be compared.
pub fn compare(runs: Vec<PathBuf>, by: Option<String>, out: Option<PathBuf>) -> u8 {
    let Some(first) = runs.first() else {
        eprintln!("agentbatch compare: give at least one run folder");
        return 2;
    };
    let out_dir = out.unwrap_or_else(|| {
        if first.is_file() {
            first.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            first.clone()
        }
    });
    let opts = CompareOptions { runs, by, out_dir };
    match compare_runs(&opts) {
        Ok(report) => {
            for w in &report.warnings {
                eprintln!("agentbatch compare: warning: {w}");
            }
            print!("{}", report.table());
            let files: Vec<String> = report
                .files()
                .iter()
                .map(|f| f.display().to_string())
                .collect();
            println!("\nwritten: {}", files.join(", "));
            0
        }
        Err(e) => {
            eprintln!("agentbatch compare: {e}");
            2
        }
    }
}
