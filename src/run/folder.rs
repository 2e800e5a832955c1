//! The run folder before anything is written to it: which tasks run, the run's id,
//! and the lock that keeps a second process out.

use chrono::Utc;
use globset::{Glob, GlobSetBuilder};

use super::RunError;
use crate::job::{Plan, TaskSpec};
use crate::report::ReportError;

/// The plan's tasks that `--only` picks (all without it).
pub(super) fn select_tasks(plan: &Plan, only: &[String]) -> Result<Vec<TaskSpec>, RunError> {
    if only.is_empty() {
        return Ok(plan.tasks.clone());
    }
    let mut b = GlobSetBuilder::new();
    for g in only {
        b.add(Glob::new(g).map_err(|e| RunError::Invalid(format!("--only {g}: {e}")))?);
    }
    let set = b
        .build()
        .map_err(|e| RunError::Invalid(format!("--only: {e}")))?;
    let picked: Vec<TaskSpec> = plan
        .tasks
        .iter()
        .filter(|t| set.is_match(&t.id) || set.is_match(&t.task))
        .cloned()
        .collect();
    if picked.is_empty() {
        return Err(RunError::Invalid(format!(
            "--only {} matches none of the job's {} task ids",
            only.join(" "),
            plan.tasks.len()
        )));
    }
    Ok(picked)
}

/// The longest run id: it names a folder, next to the timestamp of a default id.
pub(super) const MAX_RUN_ID: usize = 128;

pub(super) fn default_run_id(plan: &Plan) -> String {
    let name: String = plan
        .name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{}-{}", name, Utc::now().format("%Y%m%d-%H%M%S"))
}

/// Holds `<run dir>/.lock` for as long as it lives: two processes in one run folder
/// would replace each other's results and run tasks twice.
pub(super) struct RunLock {
    #[cfg(unix)]
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the run folder's lock, creating the folder if needed; refuses if another
/// process holds it. The one write into a run folder outside `report`: a resume must
/// hold the lock before it reads the files it decides from, before a reporter exists
/// (docs/ARCHITECTURE.md; the layer test allows this file for it).
pub(super) fn lock_run_dir(dir: &std::path::Path) -> Result<RunLock, RunError> {
    let unwritable = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| RunError::Report(ReportError::Io { path, source })
    };
    std::fs::create_dir_all(dir).map_err(unwritable(dir))?;
    let path = dir.join(crate::report::files::LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(unwritable(&path))?;
    #[cfg(unix)]
    {
        use nix::fcntl::{Flock, FlockArg};
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(RunLock { _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(RunError::Invalid(format!(
                "{} is in use by another agentbatch process: wait for it to end (or stop it) before resuming",
                dir.display()
            ))),
            Err((_, e)) => Err(unwritable(&path)(std::io::Error::from(e))),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(RunLock {})
    }
}

/// Whether `id` can name a run folder.
pub(super) fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_RUN_ID
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The run's id: the given one (checked), else the job's name and the time, made
/// unique in `out_dir`.
pub(super) fn choose_run_id(
    plan: &Plan,
    given: Option<&String>,
    out_dir: &std::path::Path,
) -> Result<String, RunError> {
    match given {
        Some(id) if !valid_run_id(id) => Err(RunError::Invalid(format!(
            "--run-id \"{id}\": use at most {MAX_RUN_ID} letters, digits, '.', '_' and '-' (it names a folder)"
        ))),
        Some(id) => Ok(id.clone()),
        None => {
            let base = default_run_id(plan);
            let mut id = base.clone();
            let mut n = 2;
            while out_dir.join(&id).exists() {
                id = format!("{base}-{n}");
                n += 1;
            }
            Ok(id)
        }
    }
}
