//! `agentbatch export`: a run folder in the formats other tools read. SWE-bench
//! predictions (`predictions.rs`): one JSONL line per task run with its patch, for the
//! official evaluation harness. ATIF trajectories (`atif.rs`, the format's types in
//! `atif_format.rs`): one Agent Trajectory Interchange Format file per task run, from
//! its transcript (its steps walked in `atif_steps.rs`), for Harbor and the tools that
//! read it. Both read the folder only
//! through `report`'s readers and the transcript's typed events (`run.rs`), so a
//! finished, interrupted or killed run reads alike, and write their files through
//! `write.rs`, by default under the folder's `exports/`.

mod atif;
mod atif_format;
mod atif_steps;
mod predictions;
mod run;
mod write;

use std::path::PathBuf;

pub use atif::{atif, AtifOptions};
pub use predictions::{predictions, PredictionsOptions};

use crate::report::{PatchError, ResultsError, RunJsonError};

/// What an export wrote and what the user should know about it.
#[derive(Debug, Default)]
pub struct Exported {
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// One line per file or group of files, for stdout.
    pub summary: Vec<String>,
    /// What was left out and why, and what was odd in the folder, for stderr.
    pub notes: Vec<String>,
}

/// An export could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error(transparent)]
    RunJson(#[from] RunJsonError),
    #[error(transparent)]
    Patch(#[from] PatchError),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The arguments ask for something the run does not have.
    #[error("{0}")]
    Usage(String),
}

impl ExportError {
    /// 1 when a file could not be written (the folder may hold part of the export), 2
    /// when the run could not be read or the arguments do not fit it (nothing written).
    pub fn exit_code(&self) -> u8 {
        match self {
            ExportError::Write { .. } => 1,
            _ => 2,
        }
    }
}

/// At most this many names in a note; the rest are counted.
const NAMED: usize = 10;

/// `1 task run`, `2 task runs`.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `a, b, c and 4 more`.
fn some_of(names: &[String]) -> String {
    let shown = names[..names.len().min(NAMED)].join(", ");
    match names.len().saturating_sub(NAMED) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}
