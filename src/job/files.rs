//! The files a job names (simulator scripts, `.mcp.json` files, repositories, the
//! ledger), read in loading steps before the checks that use them, so that the checks
//! themselves never touch the file system. All paths are relative to the job file's
//! folder.
//!
//! The job-wide files (`.mcp.json`, the ledger) are read before anything is resolved;
//! the files tasks name once the matrix's variants are known, since a variant may set
//! `sim` or `repo`. A task's script is read whatever its provider (only a simulated one
//! plays it): reading one more file is cheaper than resolving providers twice, and
//! whether it is used, and so reported, is still decided by the checks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::matrix::Variant;
use super::schema::{JobFile, SimSource};
use super::source::{self, SourceError};
use crate::tools::workspace::SourceKind;

/// Why a task's `repo` cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum RepoError {
    #[error("nothing at the path")]
    Missing,
    /// What [`SourceKind::of`] says is wrong with it.
    #[error("{0}")]
    Unusable(String),
}

/// What was read, by full path.
pub(super) struct Files {
    dir: PathBuf,
    scripts: HashMap<PathBuf, Result<String, SourceError>>,
    mcp_configs: HashMap<PathBuf, Result<String, SourceError>>,
    repos: HashMap<PathBuf, Result<SourceKind, RepoError>>,
    ledger_problem: Option<String>,
}

impl Files {
    /// Reads the files the job as a whole names: its tool sets' `mcp_config` and its
    /// ledger. `dir` is the job file's folder (empty for one in the current folder).
    pub fn read_job_files(dir: PathBuf, job: &JobFile) -> Files {
        let mut files = Files {
            dir,
            scripts: HashMap::new(),
            mcp_configs: HashMap::new(),
            repos: HashMap::new(),
            ledger_problem: None,
        };
        for toolset in job.toolsets.values() {
            if let Some(file) = &toolset.mcp_config {
                let full = files.join(file);
                files.mcp_configs.entry(full).or_insert_with_key(|p| {
                    source::read_text(p, source::MAX_MCP_CONFIG, "the file")
                });
            }
        }
        files.ledger_problem = job.ledger.as_ref().and_then(|l| {
            if crate::vocab::values::is_postgres_url(l) {
                source::not_a_ledger_url(l)
            } else {
                source::not_a_ledger_file(&files.join(l))
            }
        });
        files
    }

    /// Reads the scripts and looks at the repositories the tasks name, in every
    /// variant (whose `defaults` stand in for the job's).
    pub fn read_task_files(&mut self, job: &JobFile, variants: &[Variant]) {
        for v in variants {
            for t in &job.tasks {
                if let Some(SimSource::Path(p)) = t.sim.as_ref().or(v.defaults.sim.as_ref()) {
                    let full = self.join(p);
                    self.scripts.entry(full).or_insert_with_key(|p| {
                        source::read_text(p, source::MAX_JOB_FILE, "the file")
                    });
                }
                if let Some(repo) = t.repo.as_ref().or(v.defaults.repo.as_ref()) {
                    let full = self.join(repo);
                    self.repos.entry(full).or_insert_with_key(|p| repo_kind(p));
                }
            }
        }
    }

    /// `path` as written in the job, relative to the job file.
    pub fn join(&self, path: impl AsRef<Path>) -> PathBuf {
        self.dir.join(path)
    }

    /// The text of a simulator script (at a path already joined), handed over: each
    /// script is parsed once (see `scripts::Cache`), so its text need not stay.
    pub fn take_script_text(&mut self, full: &Path) -> Result<String, SourceError> {
        self.scripts.remove(full).unwrap_or_else(|| Err(not_read()))
    }

    /// The text of a `.mcp.json` file (at a path already joined).
    pub fn mcp_config_text(&self, full: &Path) -> Result<String, SourceError> {
        self.mcp_configs
            .get(full)
            .cloned()
            .unwrap_or_else(|| Err(not_read()))
    }

    /// What kind of source a task's repository is (at a path already joined).
    pub fn repo_kind(&self, full: &Path) -> Result<SourceKind, RepoError> {
        self.repos.get(full).cloned().unwrap_or_else(|| {
            Err(RepoError::Unusable(format!(
                "{} was not looked at before the checks",
                full.display()
            )))
        })
    }

    /// Why the job's ledger path cannot be a ledger file, or None.
    pub fn ledger_problem(&self) -> Option<&str> {
        self.ledger_problem.as_deref()
    }
}

fn repo_kind(full: &Path) -> Result<SourceKind, RepoError> {
    if !full.exists() {
        return Err(RepoError::Missing);
    }
    SourceKind::of(full).map_err(|e| RepoError::Unusable(e.to_string()))
}

/// A file a check asks for that no loading step read: a mistake in this module, never
/// in the job, so it reads as a failed read rather than a panic.
fn not_read() -> SourceError {
    SourceError::Io {
        what: "the file".into(),
        source: Arc::new(std::io::Error::other("it was not read before the checks")),
    }
}
