//! The repository around a task's loop: its workspace and sandbox before, its setup
//! command, and after the loop the patch, the check command (the verdict), and the
//! workspace kept or removed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::job::schema::KeepWorkspaces;
use crate::job::{RepoSpec, TaskSpec};
use crate::tools::container::Container;
use crate::tools::workspace::{Workspace, WorkspaceError};
use crate::tools::{Reach, RunLimits, Sandbox};

use super::environment::{Containers, Got};
use crate::vocab::log::TaskLog;
use crate::vocab::stop::{Outcome, Stop, StopReason};
use crate::vocab::transcript::{CheckOutcome, TranscriptEvent};

/// Output of setup and check kept in the transcript.
const COMMAND_OUTPUT: usize = 20_000;

/// A task's workspace and sandbox, as far as they got.
#[derive(Default)]
pub struct Prepared {
    pub workspace: Option<Workspace>,
    pub sandbox: Option<Arc<Sandbox>>,
    /// The task's container, when it has an environment.
    pub container: Option<Arc<Container>>,
    /// What its environment made ready (for a fresh check and the reports).
    pub env: Option<Got>,
    pub tmp: Option<PathBuf>,
    /// Why the task cannot run (the workspace, sandbox or setup failed, or the run was
    /// cancelled meanwhile).
    pub failed: Option<Stop>,
}

impl Prepared {
    /// The `environment` and `environment_ms` columns: the image, and the time its
    /// image and container took.
    pub fn environment_columns(&self) -> (String, Option<u64>) {
        match (&self.env, &self.container) {
            (Some(got), c) => (
                super::environment::column(got),
                Some(got.ms + c.as_ref().map_or(0, |c| c.start_ms)),
            ),
            _ => (String::new(), None),
        }
    }
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

/// Runs blocking workspace work off the async workers; the error is what the task's
/// stop detail says.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorkspaceError> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Creates the workspace (a clone or copy of the repository) and the sandbox (the
/// task's container, with an environment), runs the setup command, and takes the
/// starting point of the patch after it.
pub async fn prepare(
    spec: &TaskSpec,
    repo: &RepoSpec,
    work_dir: &Path,
    log: &TaskLog,
    cancel: &CancellationToken,
    pristines: &crate::tools::pristine::Pristines,
    containers: &Containers,
) -> Prepared {
    let mut p = Prepared::default();
    if let Some(config) = &spec.environment {
        match containers.get(config, repo).await {
            Ok(got) => p.env = Some(got),
            Err(e) => {
                p.failed = Some(setup_error(e));
                return p;
            }
        }
    }
    let source = p.env.as_ref().map_or(repo, |g| &g.repo);
    let dest = work_dir.join("workspaces").join(&spec.id);
    let shadow = work_dir.join("git").join(&spec.id);
    let tmp = work_dir.join("tmp").join(&spec.id);
    let in_container = p.env.is_some();
    let made = match super::workspace::make(source, pristines, work_dir, dest, shadow, in_container)
        .await
    {
        Ok(made) => made,
        Err(e) => {
            p.failed = Some(setup_error(e));
            return p;
        }
    };
    let mut ws = made.workspace;
    log.emit(TranscriptEvent::Workspace {
        source: match &p.env {
            Some(g) if repo.in_image => format!("{}:{}", g.image.name, g.workdir),
            _ => repo.path.display().to_string(),
        },
        git_ref: repo.git_ref.clone(),
        cloned: ws.cloned,
        path: ws.root.display().to_string(),
        method: Some(ws.kind.name().to_string()),
        pristine: Some(made.pristine.display().to_string()),
        pristine_ms: Some(made.pristine_ms),
        ms: Some(made.ms),
        fallbacks: made.fallbacks,
    });
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        p.workspace = Some(ws);
        p.failed = Some(setup_error(format!("cannot create {}: {e}", tmp.display())));
        return p;
    }
    p.tmp = Some(tmp.clone());
    let sandbox = make_sandbox(
        spec, repo, &mut p, &ws.root, &tmp, work_dir, containers, log,
    )
    .await;
    let sandbox = match sandbox {
        Ok(s) => Arc::new(s),
        Err(e) => {
            p.workspace = Some(ws);
            p.failed = Some(setup_error(e));
            return p;
        }
    };
    log.emit(TranscriptEvent::Sandbox {
        level: sandbox.level.clone(),
        network_for_bash: match &spec.environment {
            Some(c) => c.network == crate::tools::container::Network::Bridge,
            None => spec.sandbox.network,
        },
        seen_at: sandbox.seen_at().map(|p| p.display().to_string()),
    });
    p.sandbox = Some(sandbox.clone());
    if let Some(setup) = &repo.setup {
        if let Some(stop) = run_setup(setup, repo, &sandbox, cancel, log).await {
            p.failed = Some(stop);
        }
        if p.failed.is_none() {
            // What setup built is not the agent's change.
            ws = match blocking(move || ws.snapshot().map(|_| ws)).await {
                Ok(ws) => ws,
                Err(e) => {
                    p.failed = Some(setup_error(format!(
                        "cannot record the workspace after setup: {e}"
                    )));
                    return p;
                }
            };
        }
    }
    if let (Some(c), None) = (&p.container, &p.failed) {
        if let Err(e) = c.cut_network().await {
            p.failed = Some(setup_error(format!(
                "cannot take the container off the network after setup: {e}"
            )));
        }
    }
    p.workspace = Some(ws);
    p
}

/// The task's sandbox over `root`: its container (kept in `p` too) when it has an
/// environment, else this machine's confinement.
#[allow(clippy::too_many_arguments)]
async fn make_sandbox(
    spec: &TaskSpec,
    repo: &RepoSpec,
    p: &mut Prepared,
    root: &Path,
    tmp: &Path,
    work_dir: &Path,
    containers: &Containers,
    log: &TaskLog,
) -> Result<Sandbox, String> {
    let (Some(config), Some(got)) = (&spec.environment, &p.env) else {
        return Sandbox::new(
            root,
            crate::tools::workspace::seen_at(&repo.path).as_deref(),
            tmp,
            &spec.env,
            spec.sandbox,
            work_dir,
        )
        .map_err(|e| e.to_string());
    };
    let network = super::environment::network_for_setup(config, repo);
    let c = containers
        .start(spec, config, got, root, tmp, network, None, log)
        .await?;
    let c = Arc::new(c);
    p.container = Some(c.clone());
    Ok(Sandbox::in_container(
        c,
        root,
        config.network == crate::tools::container::Network::None,
        super::environment::level(got, config),
    ))
}

/// Runs `setup` in the sandbox and tells the transcript; the stop it causes, if any.
pub(super) async fn run_setup(
    setup: &str,
    repo: &RepoSpec,
    sandbox: &Sandbox,
    cancel: &CancellationToken,
    log: &TaskLog,
) -> Option<Stop> {
    let limits = RunLimits {
        timeout: repo.setup_timeout,
        max_output: COMMAND_OUTPUT,
    };
    match sandbox.run(setup, limits, cancel, Reach::SETUP).await {
        Ok(out) => {
            log.emit(TranscriptEvent::Setup {
                command: setup.to_string(),
                exit_code: out.exit_code,
                timed_out: out.timed_out,
                ms: out.ms,
                output: out.output.clone(),
            });
            if out.cancelled {
                Some(Stop::new(
                    StopReason::Cancelled,
                    "run cancelled during setup",
                ))
            } else if !out.success() {
                Some(setup_error(format!(
                    "setup `{setup}` failed ({}): {}",
                    out.status(repo.setup_timeout),
                    tail(&out.output)
                )))
            } else {
                None
            }
        }
        Err(e) => Some(setup_error(format!("setup `{setup}` could not run: {e}"))),
    }
}

/// The agent's change, taken before the check runs (so nothing the check writes is in
/// it). None without a workspace.
pub async fn patch(p: &Prepared, log: &TaskLog) -> Option<Vec<u8>> {
    let ws = p.workspace.clone()?;
    match blocking(move || ws.patch()).await {
        Ok(patch) => {
            log.emit(TranscriptEvent::Patch {
                files: patch.files,
                bytes: patch.diff.len(),
                staged: Some(patch.staged.to_string()),
            });
            Some(patch.diff)
        }
        Err(e) => {
            log.emit(TranscriptEvent::PatchError { error: e });
            None
        }
    }
}

/// What the check command (or the suite's verifier) said.
#[derive(Debug, Clone, Default)]
pub struct CheckResult {
    pub passed: bool,
    pub exit_code: Option<i32>,
    pub ms: u64,
    /// A SWE-bench verifier's counts of listed tests that passed and did not.
    pub tests_passed: Option<u32>,
    pub tests_failed: Option<u32>,
    /// A Harbor verifier's reward.
    pub reward: Option<f64>,
    /// The verifier could not run: no verdict (outcome `error`, stop reason
    /// `verifier_error`).
    pub infra: Option<String>,
}

/// Runs the check in the workspace, whatever the stop reason, unless the task never ran
/// or the run is being cancelled (then there is no verdict).
pub async fn check(
    spec: &TaskSpec,
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
    // The check runs over what the agent wrote: by default with no more power than
    // the agent had.
    let reach = if repo.check_sandbox {
        Reach {
            network: spec.sandbox.network,
            distrust_git: true,
        }
    } else {
        Reach::SETUP
    };
    let ran = sandbox.run(command, limits, cancel, reach).await;
    match ran.map_err(|e| e.to_string()) {
        Ok(out) if out.cancelled => {
            log.emit(TranscriptEvent::Check {
                command: command.clone(),
                outcome: CheckOutcome::Cancelled {
                    cancelled: true,
                    ms: out.ms,
                },
            });
            None
        }
        Ok(out) => {
            log.emit(TranscriptEvent::Check {
                command: command.clone(),
                outcome: CheckOutcome::Ran {
                    exit_code: out.exit_code,
                    timed_out: out.timed_out,
                    ms: out.ms,
                    passed: out.success(),
                    sandboxed: repo.check_sandbox,
                    network: reach.network || !sandbox.can_cut_network(),
                    output: out.output.clone(),
                },
            });
            Some(CheckResult {
                passed: out.success(),
                exit_code: out.exit_code,
                ms: out.ms,
                ..Default::default()
            })
        }
        Err(e) => {
            log.emit(TranscriptEvent::Check {
                command: command.clone(),
                outcome: CheckOutcome::Failed { error: e },
            });
            Some(CheckResult::default())
        }
    }
}

/// Keeps or removes the workspace as `keep_workspaces` says, and removes the private
/// temp folder. Returns the kept workspace's path.
pub async fn cleanup(
    repo: &RepoSpec,
    p: Prepared,
    outcome: Outcome,
    log: &TaskLog,
    pristines: &std::sync::Arc<crate::tools::pristine::Pristines>,
) -> Option<String> {
    let keep = match repo.keep_workspaces {
        KeepWorkspaces::Always => true,
        KeepWorkspaces::Never => false,
        KeepWorkspaces::OnFailure => outcome != Outcome::Pass,
    };
    let container = match p.container.as_ref() {
        Some(c) if keep => Some(c.keep().await),
        Some(c) => {
            c.remove().await;
            None
        }
        None => None,
    };
    let (ws, tmp) = (p.workspace, p.tmp);
    let pristines = pristines.clone();
    let kept = blocking(move || {
        if let Some(tmp) = tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
        let Some(ws) = ws else { return Ok(None) };
        if keep {
            ws.forget();
            // A kept workspace needs its pristine checkout: a copy's repository
            // borrows its objects, and a layer is kept as what the task wrote, its
            // upper folder, over it (docs/guide/repo-fix.md: reassembling a kept overlay workspace).
            pristines.keep();
            if let Some(layer) = &ws.layer {
                let _ = layer.unmount();
                return Ok(Some((
                    layer.upper.display().to_string(),
                    Some(layer.reassemble()),
                )));
            }
            Ok(Some((ws.root.display().to_string(), None)))
        } else {
            let _ = ws.remove();
            Ok(None)
        }
    })
    .await
    .unwrap_or(None);
    let (kept, reassemble) = kept.unzip();
    let kept = match (kept, container) {
        (Some(k), Some(c)) => Some(format!("{k}; container {c}")),
        (k, _) => k,
    };
    log.emit(TranscriptEvent::WorkspaceEnd {
        kept: kept.clone(),
        reassemble: reassemble.flatten(),
    });
    kept
}
