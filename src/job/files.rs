//! The one place expansion touches the file system: the simulator scripts, `.mcp.json`
//! files, repositories and ledger a job names, all relative to the job file's folder.
//!
//! They are read when a check first needs them rather than in a pass before the
//! checks: which files a task uses depends on its resolved provider, tool set and
//! matrix variant, so a pass ahead would repeat that resolution or read files no task
//! uses, and the diagnostics would no longer come out in the order the checks find
//! them.

use std::path::{Path, PathBuf};

use super::source::{self, SourceError};
use crate::tools::workspace::SourceKind;

/// Why a task's `repo` cannot be used.
#[derive(Debug, thiserror::Error)]
pub(super) enum RepoError {
    #[error("nothing at the path")]
    Missing,
    /// What [`SourceKind::of`] says is wrong with it.
    #[error("{0}")]
    Unusable(String),
}

/// The job file's folder, which every path in a job is relative to.
pub(super) struct Files {
    dir: PathBuf,
}

impl Files {
    /// The files next to a job file in `dir` (empty for one in the current folder).
    pub fn new(dir: PathBuf) -> Files {
        Files { dir }
    }

    /// `path` as written in the job, relative to the job file.
    pub fn join(&self, path: impl AsRef<Path>) -> PathBuf {
        self.dir.join(path)
    }

    /// The text of a simulator script (at a path already joined).
    pub fn script_text(&self, full: &Path) -> Result<String, SourceError> {
        source::read_text(full, source::MAX_JOB_FILE, "the file")
    }

    /// The text of a `.mcp.json` file (at a path already joined).
    pub fn mcp_config_text(&self, full: &Path) -> Result<String, SourceError> {
        source::read_text(full, source::MAX_MCP_CONFIG, "the file")
    }

    /// What kind of source a task's repository is (at a path already joined).
    pub fn repo_kind(&self, full: &Path) -> Result<SourceKind, RepoError> {
        if !full.exists() {
            return Err(RepoError::Missing);
        }
        SourceKind::of(full).map_err(RepoError::Unusable)
    }

    /// Why the ledger path cannot be a ledger file, or None.
    pub fn ledger_problem(&self, full: &Path) -> Option<String> {
        source::not_a_ledger_file(full)
    }
}
