//! `agentbatch report DIR`: writes report.html for a run folder that already exists
//! (an older run, a killed one, one copied from elsewhere) and prints its path.

use std::path::Path;

use crate::page::{self, PageOptions};
use crate::text::clip_quotes;

/// Writes the page; the exit code: 0 written, 2 the folder is not a readable run, 1 the
/// page could not be written.
pub fn report(dir: &Path) -> u8 {
    match page::write(dir, &PageOptions::from_env()) {
        Ok(w) => {
            for warning in &w.warnings {
                eprintln!("agentbatch report: warning: {}", clip_quotes(warning));
            }
            println!("{}", w.path.display());
            0
        }
        Err(e) => {
            eprintln!("agentbatch report: {}", clip_quotes(&e.to_string()));
            e.exit_code()
        }
    }
}
