//! `check_environment: fresh`: the check in a new container of the task's image, over a
//! new workspace with only the agent's patch, so nothing else the agent did reaches the
//! verdict.

use std::path::Path;
use std::sync::Arc;

use super::environment::{level, network_for_setup};
use crate::job::{RepoSpec, TaskSpec};
use crate::tools::container::{EnvironmentConfig, Network};
use crate::vocab::log::TaskLog;
use crate::vocab::transcript::TranscriptEvent;

/// The check in a new container from the task's image, over a new workspace from the
/// same source with the task's setup run again and only the agent's `patch` applied:
/// nothing else the agent did (tests rewritten, processes left behind, files outside
/// the patch) reaches the verdict. None where the check would not run at all (see
/// `repo::check`); a fresh container or workspace that cannot be made, or a patch
/// that does not apply, is a failed check with the reason in the transcript.
#[allow(clippy::too_many_arguments)]
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
    let got = prepared.env.as_ref()?;
    if prepared.failed.is_some()
        || stop.reason == crate::vocab::stop::StopReason::Cancelled
        || env.cancel.is_cancelled()
    {
        return None;
    }
    let failed = |error: String| {
        log.emit(TranscriptEvent::Check {
            command: command.clone(),
            outcome: crate::vocab::transcript::CheckOutcome::Failed { error },
        });
        Some(super::repo::CheckResult {
            passed: false,
            exit_code: None,
            ms: 0,
        })
    };
    let key = format!("{}@fresh", spec.id);
    let made = match super::workspace::make(
        &got.repo,
        &env.pristines,
        &env.work_dir,
        env.work_dir.join("workspaces").join(&key),
        env.work_dir.join("git").join(&key),
        true,
    )
    .await
    {
        Ok(m) => m,
        Err(e) => return failed(format!("fresh check: {e}")),
    };
    let ws = made.workspace;
    let tmp = env.work_dir.join("tmp").join(&key);
    let result = fresh_in(
        spec, env, config, prepared, repo, &ws.root, &tmp, patch, stop, log,
    )
    .await;
    let _ = tokio::task::spawn_blocking(move || {
        let _ = ws.remove();
        let _ = std::fs::remove_dir_all(tmp);
    })
    .await;
    match result {
        Ok(r) => r,
        Err(e) => failed(format!("fresh check: {e}")),
    }
}

#[allow(clippy::too_many_arguments)]
async fn fresh_in(
    spec: &TaskSpec,
    env: &super::AgentEnv,
    config: &EnvironmentConfig,
    prepared: &super::repo::Prepared,
    repo: &RepoSpec,
    root: &Path,
    tmp: &Path,
    patch: Option<&[u8]>,
    stop: &crate::vocab::stop::Stop,
    log: &TaskLog,
) -> Result<Option<super::repo::CheckResult>, String> {
    let got = prepared.env.as_ref().ok_or("no environment")?;
    std::fs::create_dir_all(tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    // The check's network: as the agent's, unless `check_sandbox: false` asks for it.
    let network = network_for_setup(config, repo) || !repo.check_sandbox;
    let container = env
        .containers
        .start(
            spec,
            config,
            got,
            root,
            tmp,
            network,
            Some("fresh check"),
            log,
        )
        .await?;
    let container = Arc::new(container);
    let sandbox = Arc::new(crate::tools::Sandbox::in_container(
        container.clone(),
        root,
        config.network == Network::None,
        level(got, config),
    ));
    let outcome = async {
        if let Some(setup) = &repo.setup {
            if let Some(stop) =
                super::repo::run_setup(setup, repo, &sandbox, &env.cancel, log).await
            {
                return Err(format!(
                    "setup failed in the fresh container: {}",
                    stop.detail
                ));
            }
        }
        if repo.check_sandbox {
            container.cut_network().await.map_err(|e| e.to_string())?;
        }
        if let Some(patch) = patch.filter(|p| !p.is_empty()) {
            apply(root, tmp, patch).await?;
        }
        let fresh = super::repo::Prepared {
            sandbox: Some(sandbox.clone()),
            ..Default::default()
        };
        Ok(super::repo::check(spec, repo, &fresh, stop, log, &env.cancel).await)
    }
    .await;
    container.remove().await;
    outcome
}

/// Applies the agent's patch to a fresh workspace with git, byte for byte (binary
/// hunks and new files included), as the check will see it.
async fn apply(root: &Path, tmp: &Path, patch: &[u8]) -> Result<(), String> {
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
    if !out.status.success() {
        return Err(format!(
            "the agent's patch does not apply to a fresh workspace: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}
