//! Which workspace a repo task gets, and making it: the pristine checkout first (made
//! by the first task of its repository, or found in the cache), then the task's layer or
//! copy of it. `workspaces: auto` tries an overlay layer where the process can mount
//! one, then a reflinked copy where the run folder has reflinks, then a copy, and takes
//! the first that works (an overlay the run folder's filesystem refuses, a reflink
//! across filesystems); a method asked for by name is that method or an error.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::job::schema::WorkspaceMethod;
use crate::job::RepoSpec;
use crate::tools::pristine::Pristines;
use crate::tools::workspace::{Workspace, WorkspaceKind};

/// A task's workspace, with what the transcript says of its making.
pub struct Made {
    pub workspace: Workspace,
    /// The pristine checkout it was made from.
    pub pristine: PathBuf,
    pub pristine_ms: u64,
    pub ms: u64,
    /// Methods tried before this one, and why each failed (`auto` only).
    pub fallbacks: Vec<String>,
}

/// Whether two existing paths are on one filesystem (where reflinks can join them).
fn same_filesystem(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev(),
        _ => false,
    }
}

/// The methods to try, best first.
fn candidates(method: WorkspaceMethod, reflinks: bool) -> Vec<WorkspaceKind> {
    match method {
        WorkspaceMethod::Overlay => vec![WorkspaceKind::Overlay],
        WorkspaceMethod::Reflink => vec![WorkspaceKind::Reflink],
        WorkspaceMethod::Copy => vec![WorkspaceKind::Copy],
        WorkspaceMethod::Auto => {
            let mut v = Vec::new();
            if crate::tools::layer::available() {
                v.push(WorkspaceKind::Overlay);
            }
            if reflinks {
                v.push(WorkspaceKind::Reflink);
            }
            v.push(WorkspaceKind::Copy);
            v
        }
    }
}

/// Makes the task's workspace at `dest` (its runner's git folder at `shadow`) in the
/// run folder `work_dir`. The error is the task's `tool_setup_error` detail.
pub async fn make(
    repo: &RepoSpec,
    pristines: &Pristines,
    work_dir: &Path,
    dest: PathBuf,
    shadow: PathBuf,
    in_container: bool,
) -> Result<Made, String> {
    let reflinks = pristines.reflinks();
    if repo.workspaces == WorkspaceMethod::Reflink && !reflinks {
        return Err(format!(
            "workspaces: reflink, but the run folder {} is on a filesystem without reflinks (ext4, tmpfs, overlayfs): put --out on btrfs or on XFS made with reflink=1, or use workspaces: auto or copy",
            work_dir.display()
        ));
    }
    let started = Instant::now();
    let pristine = pristines
        .get(&repo.path, repo.git_ref.as_deref())
        .await
        .map_err(|e| {
            format!("cannot create the workspace: cannot make the pristine checkout: {e}")
        })?;
    let pristine_ms = started.elapsed().as_millis() as u64;
    let mut kinds = candidates(repo.workspaces, reflinks);
    // A container engine does not see the runner's own mounts: no layer for it.
    if in_container {
        kinds.retain(|k| *k != WorkspaceKind::Overlay);
    }
    // Reflinks cannot cross filesystems: a cached pristine elsewhere is copied.
    if !same_filesystem(&pristine.root, work_dir) {
        if repo.workspaces == WorkspaceMethod::Reflink {
            return Err(format!(
                "workspaces: reflink, but the pristine checkout {} is on another filesystem than the run folder {}: put the pristine cache (--pristine-cache) on the run folder's filesystem, or use workspaces: auto or copy",
                pristine.root.display(),
                work_dir.display()
            ));
        }
        kinds.retain(|k| *k != WorkspaceKind::Reflink);
    }
    let mut fallbacks = Vec::new();
    let last = kinds.len() - 1;
    for (i, kind) in kinds.into_iter().enumerate() {
        let started = Instant::now();
        let (p, d, s) = (pristine.clone(), dest.clone(), shadow.clone());
        let made = tokio::task::spawn_blocking(move || match kind {
            WorkspaceKind::Overlay => Workspace::layered(&p, &d, &s),
            k => Workspace::copied(&p, &d, &s, k == WorkspaceKind::Reflink),
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        match made {
            Ok(workspace) => {
                return Ok(Made {
                    workspace,
                    pristine: pristine.root.clone(),
                    pristine_ms,
                    ms: started.elapsed().as_millis() as u64,
                    fallbacks,
                })
            }
            Err(e) if i < last => fallbacks.push(format!("{}: {e}", kind.name())),
            Err(e) => {
                fallbacks.push(format!("{}: {e}", kind.name()));
                return Err(format!(
                    "cannot create the workspace: {}",
                    fallbacks.join("; ")
                ));
            }
        }
    }
    Err("cannot create the workspace: no method to try".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_tries_the_best_first_and_a_named_method_alone() {
        let copy_last = candidates(WorkspaceMethod::Auto, true);
        assert_eq!(copy_last.last(), Some(&WorkspaceKind::Copy));
        assert!(copy_last.contains(&WorkspaceKind::Reflink));
        assert!(!candidates(WorkspaceMethod::Auto, false).contains(&WorkspaceKind::Reflink));
        for (m, k) in [
            (WorkspaceMethod::Overlay, WorkspaceKind::Overlay),
            (WorkspaceMethod::Reflink, WorkspaceKind::Reflink),
            (WorkspaceMethod::Copy, WorkspaceKind::Copy),
        ] {
            assert_eq!(candidates(m, true), vec![k]);
        }
    }
}
