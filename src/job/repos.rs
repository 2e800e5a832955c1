//! A task's repository: the local git repository, bundle or folder it works on, and
//! the commands around its loop (`setup`, `check`) that only make sense with one.

use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::origin;
use super::files::RepoError;
use super::schema::{KeepWorkspaces, TaskFields, WorkspaceMethod};
use super::spec::RepoSpec;
use crate::vocab::values::HumanDuration;

const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(600);

/// The repository of a task with an environment and no `repo`: the image's workdir
/// (setup and check filled in by the caller).
fn image_repo(
    t: &TaskFields,
    d: &TaskFields,
    keep_workspaces: KeepWorkspaces,
    workspaces: WorkspaceMethod,
) -> RepoSpec {
    let dur = |f: fn(&TaskFields) -> Option<HumanDuration>| {
        f(t).or_else(|| f(d))
            .map_or(DEFAULT_COMMAND_TIMEOUT, |h| h.0)
    };
    RepoSpec {
        path: std::path::PathBuf::new(),
        in_image: true,
        git_ref: None,
        setup: None,
        setup_timeout: dur(|x| x.setup_timeout),
        check: None,
        check_timeout: dur(|x| x.check_timeout),
        check_sandbox: t.check_sandbox.or(d.check_sandbox).unwrap_or(true),
        keep_workspaces,
        workspaces,
    }
}

/// The task's repository and the commands around its loop.
pub(super) fn resolve_repo(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    in_container: bool,
    cx: &mut Ctx,
) -> Option<RepoSpec> {
    let pick = |f: fn(&TaskFields) -> Option<String>| {
        f(t).map(|v| (v, true)).or_else(|| f(d).map(|v| (v, false)))
    };
    let repo = pick(|x| x.repo.clone());
    let git_ref = pick(|x| x.git_ref.clone());
    let setup = pick(|x| x.setup.clone());
    let check = pick(|x| x.check.clone());
    let check_sandbox = pick(|x| x.check_sandbox.map(|b| b.to_string()));
    let method = t.workspaces.or(d.workspaces).unwrap_or_default();
    if in_container && method == WorkspaceMethod::Overlay {
        cx.err(
            &origin(i, t.workspaces.is_some(), d.workspaces.is_some(), &["workspaces"]),
            "overlay workspaces live in the runner's own mount namespace, where no container engine sees them: with an `environment:` use auto (a reflinked or full copy) or copy",
        );
    }
    let dur = |f: fn(&TaskFields) -> Option<HumanDuration>| {
        f(t).or_else(|| f(d))
            .map_or(DEFAULT_COMMAND_TIMEOUT, |h| h.0)
    };
    let keep_workspaces = t
        .keep_workspaces
        .or(d.keep_workspaces)
        .unwrap_or(KeepWorkspaces::OnFailure);
    let Some((repo, repo_on_task)) = repo else {
        if in_container {
            if let Some((_, on_task)) = &git_ref {
                cx.err(
                    &origin(i, *on_task, !*on_task, &["ref"]),
                    "`ref` picks a commit of the task's `repo`; without one the workspace is the image's workdir as built",
                );
            }
            return Some(RepoSpec {
                setup: setup.map(|(s, _)| s),
                check: check.map(|(c, _)| c),
                ..image_repo(t, d, keep_workspaces, method)
            });
        }
        for (field, v) in [
            ("check", &check),
            ("setup", &setup),
            ("ref", &git_ref),
            ("check_sandbox", &check_sandbox),
        ] {
            if let Some((_, on_task)) = v {
                cx.err(
                    &origin(i, *on_task, !*on_task, &[field]),
                    format!("`{field}` works on the task's repository: give the task a `repo`"),
                );
            }
        }
        return None;
    };
    let path = cx.files.join(&repo);
    let kind = match cx.files.repo_kind(&path) {
        Ok(k) => k,
        Err(RepoError::Missing) => {
            cx.err(&origin(i, repo_on_task, !repo_on_task, &["repo"]), format!("nothing at {}: repo must be a local git repository, git bundle or folder, relative to the job file", path.display()));
            return None;
        }
        Err(RepoError::Unusable(e)) => {
            cx.err(&origin(i, repo_on_task, !repo_on_task, &["repo"]), e);
            return None;
        }
    };
    if let Some((r, on_task)) = &git_ref {
        if !kind.is_git() {
            cx.err(
                &origin(i, *on_task, !*on_task, &["ref"]),
                format!(
                    "ref \"{r}\" needs a git repository, and {} is a plain folder",
                    path.display()
                ),
            );
        }
    }
    let workspaces = match method {
        WorkspaceMethod::Overlay if !crate::tools::layer::available() => {
            cx.err(
                &origin(i, t.workspaces.is_some(), d.workspaces.is_some(), &["workspaces"]),
                "overlay workspaces need Linux overlayfs and the agentbatch binary's own mount namespace (as root, or in a user namespace where the kernel allows unprivileged ones), and this process has not got them: use auto (falls back to a reflinked or full copy) or copy",
            );
            method
        }
        WorkspaceMethod::Reflink => {
            let why = cx.env.run_folder.as_ref().and_then(|f| f.no_reflinks());
            if let Some(why) = why.map(str::to_string) {
                cx.err(
                    &origin(i, t.workspaces.is_some(), d.workspaces.is_some(), &["workspaces"]),
                    format!("reflink workspaces need the run folder on a filesystem with reflinks (btrfs, XFS made with reflink=1, bcachefs), and {why}: give --out a folder on one, or use auto (reflinks where the run folder has them, else a copy) or copy"),
                );
            }
            method
        }
        m => m,
    };
    Some(RepoSpec {
        path,
        in_image: false,
        git_ref: git_ref.map(|(r, _)| r),
        setup: setup.map(|(s, _)| s),
        setup_timeout: dur(|x| x.setup_timeout),
        check: check.map(|(c, _)| c),
        check_timeout: dur(|x| x.check_timeout),
        check_sandbox: t.check_sandbox.or(d.check_sandbox).unwrap_or(true),
        keep_workspaces,
        workspaces,
    })
}
