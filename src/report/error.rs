//! What goes wrong writing a run folder: one error type and one way to make it from an
//! I/O failure, for every writer of `report` (the reporter, a resume's rewrites, the
//! writes made outside a reporter), in a file of its own so that none of them imports
//! another for it.

use std::path::{Path, PathBuf};

/// A report file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} already exists: choose another --run-id or --out", .0.display())]
    Exists(PathBuf),
}

/// The error of an I/O failure on `path`.
pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}
