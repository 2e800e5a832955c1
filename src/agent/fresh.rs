//! `check_environment: fresh`, and the verifiers that grade in a new container: the
//! check in a new container of the task's image, over a new workspace with only the
//! agent's patch, so nothing else the agent did reaches the verdict.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::environment::{level, network_for_setup};
use crate::job::TaskSpec;
use crate::tools::container::{Container, EnvironmentConfig, Network};
use crate::tools::workspace::Workspace;
use crate::tools::Sandbox;
use crate::vocab::log::TaskLog;
use crate::vocab::transcript::TranscriptEvent;

/// What making fresh containers and workspaces needs of the run: a run's tasks take it
/// from their [`super::AgentEnv`], a regrade makes its own.
pub struct Ground<'a> {
    pub work_dir: &'a Path,
    pub pristines: &'a Arc<crate::tools::pristine::Pristines>,
    pub containers: &'a super::environment::Containers,
    pub cancel: &'a tokio_util::sync::CancellationToken,
}

impl super::AgentEnv {
    pub(super) fn ground(&self) -> Ground<'_> {
        Ground {
            work_dir: &self.work_dir,
            pristines: &self.pristines,
            containers: &self.containers,
            cancel: &self.cancel,
        }
    }
}

/// A new container of the task's image over a new workspace from the same source,
/// with the task's setup run again and the agent's patch applied.
pub(super) struct Fresh {
    pub container: Arc<Container>,
    pub sandbox: Arc<Sandbox>,
    ws: Workspace,
    tmp: PathBuf,
}

impl Fresh {
    /// Makes it; `purpose` names the container in the transcript, `network` says
    /// whether it stays on the network after setup. Err: what could not be made or
    /// applied, for the transcript.
    #[allow(clippy::too_many_arguments)]
    pub async fn make(
        spec: &TaskSpec,
        env: &Ground<'_>,
        config: &EnvironmentConfig,
        prepared: &super::repo::Prepared,
        patch: Option<&[u8]>,
        purpose: &str,
        network: bool,
        log: &TaskLog,
    ) -> Result<Fresh, String> {
        let got = prepared.env.as_ref().ok_or("no environment")?;
        let repo = spec.repo.as_ref().ok_or("no repository")?;
        let key = crate::vocab::log::fresh_key(&spec.id);
        // What a killed attempt (or a regrade's) left under the same name goes first.
        let stale: Vec<PathBuf> = ["workspaces", "git", "tmp"]
            .iter()
            .map(|sub| env.work_dir.join(sub).join(&key))
            .collect();
        let _ = tokio::task::spawn_blocking(move || {
            for p in stale.iter().filter(|p| p.exists()) {
                let _ = std::fs::remove_dir_all(p);
            }
        })
        .await;
        let made = super::workspace::make(
            &got.repo,
            env.pristines,
            env.work_dir,
            env.work_dir.join("workspaces").join(&key),
            env.work_dir.join("git").join(&key),
            true,
        )
        .await
        .map_err(|e| e.to_string())?;
        let ws = made.workspace;
        let tmp = env.work_dir.join("tmp").join(&key);
        let started = async {
            std::fs::create_dir_all(&tmp)
                .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
            let container = env
                .containers
                .start(
                    spec,
                    config,
                    got,
                    &ws.root,
                    &tmp,
                    network || network_for_setup(config, repo),
                    Some(purpose),
                    log,
                )
                .await?;
            Ok::<_, String>(Arc::new(container))
        }
        .await;
        let container = match started {
            Ok(c) => c,
            Err(e) => {
                remove(ws, tmp).await;
                return Err(e);
            }
        };
        let sandbox = Arc::new(Sandbox::in_container(
            container.clone(),
            &ws.root,
            config.network == Network::None,
            level(got, config),
        ));
        let fresh = Fresh {
            container,
            sandbox,
            ws,
            tmp,
        };
        match fresh.ready(spec, env, patch, network, log).await {
            Ok(()) => Ok(fresh),
            Err(e) => {
                fresh.remove().await;
                Err(e)
            }
        }
    }

    async fn ready(
        &self,
        spec: &TaskSpec,
        env: &Ground<'_>,
        patch: Option<&[u8]>,
        network: bool,
        log: &TaskLog,
    ) -> Result<(), String> {
        let repo = spec.repo.as_ref().ok_or("no repository")?;
        if let Some(setup) = &repo.setup {
            if let Some(stop) =
                super::repo::run_setup(setup, repo, &self.sandbox, env.cancel, log).await
            {
                return Err(format!(
                    "setup failed in the fresh container: {}",
                    stop.detail
                ));
            }
        }
        if !network {
            self.container
                .cut_network()
                .await
                .map_err(|e| e.to_string())?;
        }
        if let Some(patch) = patch.filter(|p| !p.is_empty()) {
            apply(&self.ws.root, &self.tmp, patch).await?;
        }
        Ok(())
    }

    /// Removes the container, the workspace and the temp folder.
    pub async fn remove(self) {
        self.container.remove().await;
        remove(self.ws, self.tmp).await;
    }
}

async fn remove(ws: Workspace, tmp: PathBuf) {
    let _ = tokio::task::spawn_blocking(move || {
        let _ = ws.remove();
        let _ = std::fs::remove_dir_all(tmp);
    })
    .await;
}

/// The check in a new container from the task's image, over a new workspace from the
/// same source with the task's setup run again and only the agent's `patch` applied:
/// nothing else the agent did (tests rewritten, processes left behind, files outside
/// the patch) reaches the verdict. None where the check would not run at all (see
/// `repo::check`); a fresh container or workspace that cannot be made, or a patch
/// that does not apply, is a failed check with the reason in the transcript.
pub async fn fresh_check(
    spec: &TaskSpec,
    env: &super::AgentEnv,
    config: &EnvironmentConfig,
    prepared: &super::repo::Prepared,
    patch: Option<&[u8]>,
    stop: &crate::vocab::stop::Stop,
    log: &TaskLog,
) -> Option<super::repo::CheckResult> {
    let repo = spec.repo.as_ref()?;
    let command = repo.check.as_ref()?;
    prepared.env.as_ref()?;
    if prepared.failed.is_some()
        || stop.reason == crate::vocab::stop::StopReason::Cancelled
        || env.cancel.is_cancelled()
    {
        return None;
    }
    // The check's network: as the agent's, unless `check_sandbox: false` asks for it.
    let network = !repo.check_sandbox;
    match Fresh::make(
        spec,
        &env.ground(),
        config,
        prepared,
        patch,
        "fresh check",
        network,
        log,
    )
    .await
    {
        Ok(fresh) => {
            let view = super::repo::Prepared {
                sandbox: Some(fresh.sandbox.clone()),
                ..Default::default()
            };
            let r = super::repo::check(spec, repo, &view, stop, log, &env.cancel).await;
            fresh.remove().await;
            r
        }
        Err(error) => {
            log.emit(TranscriptEvent::Check {
                command: command.clone(),
                outcome: crate::vocab::transcript::CheckOutcome::Failed {
                    error: format!("fresh check: {error}"),
                },
            });
            Some(super::repo::CheckResult {
                passed: false,
                exit_code: None,
                ms: 0,
                ..Default::default()
            })
        }
    }
}

/// Applies a patch to a workspace with git, byte for byte (binary hunks and new files
/// included), as the check will see it.
pub(super) async fn apply(root: &Path, tmp: &Path, patch: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let file = tmp.join("agent.patch");
    std::fs::write(&file, patch).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let out = tokio::process::Command::new("git")
        .args(["apply", "--binary", "--whitespace=nowarn"])
        .arg(&file)
        .current_dir(root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("cannot run git apply: {e}"))?;
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        return Err(format!(
            "the patch does not apply to a fresh workspace: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}
