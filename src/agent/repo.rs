//! The repository around a task's loop: its workspace and sandbox before, its setup
//! command, and after the loop the check command (the verdict), the patch, and the
//! workspace kept or removed.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::stop::{Outcome, Stop, StopReason};
use crate::job::schema::KeepWorkspaces;
use crate::job::{RepoSpec, TaskSpec};
use crate::report::TaskLog;
use crate::tools::workspace::Workspace;
use crate::tools::{RunLimits, Sandbox};

/// Output of setup and check kept in the transcript.
const COMMAND_OUTPUT: usize = 20_000;

/// A task's workspace and sandbox, as far as they got.
#[derive(Default)]
pub struct Prepared {
    pub workspace: Option<Workspace>,
    pub sandbox: Option<Arc<Sandbox>>,
    pub tmp: Option<PathBuf>,
    /// Why the task cannot run (the workspace, sandbox or setup failed).
    pub failed: Option<Stop>,
}

fn setup_error(detail: String) -> Stop {
    Stop::new(StopReason::ToolSetupError, detail)
}

/// Tail of a command's output, for a one-line detail.
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join(" | ").chars().take(300).collect()
}

/// Creates the workspace (a clone or copy of the repository) and the sandbox, then runs
/// the setup command.
pub async fn prepare(
    spec: &TaskSpec,
    repo: &RepoSpec,
    work_dir: &std::path::Path,
    log: &TaskLog,
    cancel: &CancellationToken,
) -> Prepared {
    let mut p = Prepared::default();
    let dest = work_dir.join("workspaces").join(&spec.id);
    let tmp = work_dir.join("tmp").join(&spec.id);
    let (source, git_ref) = (repo.path.clone(), repo.git_ref.clone());
    let created =
        tokio::task::spawn_blocking(move || Workspace::create(&source, git_ref.as_deref(), &dest))
            .await;
    let ws = match created {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => {
            p.failed = Some(setup_error(format!("cannot create the workspace: {e}")));
            return p;
        }
        Err(e) => {
            p.failed = Some(setup_error(format!("cannot create the workspace: {e}")));
            return p;
        }
    };
    log.emit(
        "workspace",
        json!({"source": repo.path.display().to_string(), "ref": repo.git_ref, "cloned": ws.cloned, "base": ws.base, "path": ws.root.display().to_string()}),
    );
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        p.workspace = Some(ws);
        p.failed = Some(setup_error(format!("cannot create {}: {e}", tmp.display())));
        return p;
    }
    p.tmp = Some(tmp.clone());
    let sandbox = match Sandbox::new(&ws.root, &tmp, &spec.env, spec.sandbox) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            p.workspace = Some(ws);
            p.failed = Some(setup_error(e));
            return p;
        }
    };
    log.emit(
        "sandbox",
        json!({"level": sandbox.level, "network_for_bash": spec.sandbox.network}),
    );
    p.workspace = Some(ws);
    p.sandbox = Some(sandbox.clone());
    if let Some(setup) = &repo.setup {
        let limits = RunLimits {
            timeout: repo.setup_timeout,
            max_output: COMMAND_OUTPUT,
        };
        match sandbox.run(setup, limits, cancel, true).await {
            Ok(out) => {
                log.emit(
                    "setup",
                    json!({"command": setup, "exit_code": out.exit_code, "timed_out": out.timed_out, "ms": out.ms, "output": out.output}),
                );
                if !out.success() {
                    p.failed = Some(setup_error(format!(
                        "setup `{setup}` failed ({}): {}",
                        out.status(repo.setup_timeout),
                        tail(&out.output)
                    )));
                }
            }
            Err(e) => p.failed = Some(setup_error(format!("setup `{setup}` could not run: {e}"))),
        }
    }
    p
}

/// What the check command said.
#[derive(Debug, Clone)]
pub struct CheckResult {
    pub passed: bool,
    pub exit_code: Option<i32>,
    pub ms: u64,
}

/// Runs the check in the workspace, whatever the stop reason, unless the task never ran
/// or the run is being cancelled.
pub async fn check(
    repo: &RepoSpec,
    p: &Prepared,
    stop: &Stop,
    log: &TaskLog,
    cancel: &CancellationToken,
) -> Option<CheckResult> {
    let command = repo.check.as_ref()?;
    let sandbox = p.sandbox.as_ref()?;
    if p.failed.is_some() || stop.reason == StopReason::Cancelled || cancel.is_cancelled() {
        return None;
    }
    let limits = RunLimits {
        timeout: repo.check_timeout,
        max_output: COMMAND_OUTPUT,
    };
    match sandbox.run(command, limits, cancel, true).await {
        Ok(out) => {
            log.emit(
                "check",
                json!({"command": command, "exit_code": out.exit_code, "timed_out": out.timed_out, "ms": out.ms, "passed": out.success(), "output": out.output}),
            );
            Some(CheckResult {
                passed: out.success(),
                exit_code: out.exit_code,
                ms: out.ms,
            })
        }
        Err(e) => {
            log.emit("check", json!({"command": command, "error": e}));
            Some(CheckResult {
                passed: false,
                exit_code: None,
                ms: 0,
            })
        }
    }
}

/// The agent's patch (None without a workspace), then the workspace kept or removed as
/// `keep_workspaces` says. Returns (patch, kept workspace path).
pub async fn finish(
    repo: &RepoSpec,
    p: Prepared,
    outcome: Outcome,
    log: &TaskLog,
) -> (Option<String>, Option<String>) {
    let Some(ws) = p.workspace else {
        if let Some(tmp) = p.tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
        return (None, None);
    };
    let keep = match repo.keep_workspaces {
        KeepWorkspaces::Always => true,
        KeepWorkspaces::Never => false,
        KeepWorkspaces::OnFailure => outcome != Outcome::Pass,
    };
    let tmp = p.tmp;
    let done = tokio::task::spawn_blocking(move || {
        let patch = ws.diff();
        let files = ws.changed_files().unwrap_or_default();
        if let Some(tmp) = tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
        let kept = if keep {
            Some(ws.root.display().to_string())
        } else {
            let _ = ws.remove();
            None
        };
        (patch, files, kept)
    })
    .await;
    match done {
        Ok((patch, files, kept)) => {
            let patch = match patch {
                Ok(p) => Some(p),
                Err(e) => {
                    log.emit("patch_error", json!({"error": e}));
                    None
                }
            };
            log.emit("patch", json!({"files": files, "bytes": patch.as_ref().map(String::len), "workspace_kept": kept}));
            (patch, kept)
        }
        Err(e) => {
            log.emit("patch_error", json!({"error": e.to_string()}));
            (None, None)
        }
    }
}
