//! `agentbatch audit TRANSCRIPT`: the report on stdout, and the exit code a script can
//! branch on (0 clean, 1 a violation, 2 unreadable).

use std::path::Path;

/// Audits one transcript and prints the report; returns the exit code.
pub fn print(path: &Path) -> u8 {
    match crate::audit::audit_file(path) {
        Ok(report) => {
            print!("{report}");
            u8::from(report.violations() > 0)
        }
        Err(e) => {
            eprintln!("agentbatch audit: {e}");
            2
        }
    }
}
