//! The steps of [`super::run_task`] around its loop: the transcript's first event, the
//! tools' context, and what a task with a repository leaves once the loop stopped.

use super::{repo, AgentEnv};
use crate::job::TaskSpec;
use crate::tools::{ToolContext, Toolset};
use crate::vocab::log::TaskLog;
use crate::vocab::stop::{Outcome, Stop};
use crate::vocab::transcript::TranscriptEvent;

/// The transcript's first event: what the task is and what it may use.
pub(super) fn task_start(spec: &TaskSpec, base_tools: &Toolset) -> TranscriptEvent {
    TranscriptEvent::TaskStart {
        task: spec.id.clone(),
        provider: spec.provider.name.clone(),
        model: spec.model.clone(),
        max_tokens: spec.max_tokens,
        tools: base_tools.names(),
        toolset: spec.toolset.name.clone(),
        policy: spec.toolset.rules.clone(),
        limits: serde_json::to_value(&spec.limits).unwrap_or_default(),
        repo: serde_json::to_value(&spec.repo).unwrap_or_default(),
    }
}

/// Where and how the task's tools run: its workspace and sandbox, if any.
pub(super) fn tool_context(
    spec: &TaskSpec,
    env: &AgentEnv,
    prepared: &repo::Prepared,
    workspace: Option<std::path::PathBuf>,
) -> ToolContext {
    ToolContext {
        workspace,
        seen_at: prepared
            .sandbox
            .as_ref()
            .and_then(|s| s.seen_at().map(std::path::Path::to_path_buf)),
        sandbox: prepared.sandbox.clone(),
        bash: spec.toolset.bash,
        network: spec.sandbox.network,
        cancel: env.cancel.clone(),
    }
}

/// What a task with a repository leaves once its loop stopped: its patch, its check,
/// the workspace it keeps, and the confinement its commands had.
pub(super) async fn after_loop(
    spec: &TaskSpec,
    env: &AgentEnv,
    repo: &crate::job::RepoSpec,
    prepared: repo::Prepared,
    stop: &Stop,
    log: &TaskLog,
) -> (
    Option<repo::CheckResult>,
    Option<Vec<u8>>,
    Option<String>,
    String,
) {
    let patch = repo::patch(&prepared, log).await;
    let check = match (&spec.environment, spec.check_environment) {
        _ if spec.verifier.is_some() => match spec.verifier.as_deref() {
            Some(v) => {
                super::verify::verify(
                    spec,
                    &env.ground(),
                    v,
                    &prepared,
                    patch.as_deref(),
                    stop,
                    log,
                    0,
                )
                .await
            }
            None => None,
        },
        (Some(config), crate::job::CheckEnvironment::Fresh) => {
            super::fresh::fresh_check(spec, env, config, &prepared, patch.as_deref(), stop, log)
                .await
        }
        _ => repo::check(spec, repo, &prepared, stop, log, &env.cancel).await,
    };
    let level = prepared
        .sandbox
        .as_ref()
        .map(|s| s.level.clone())
        .unwrap_or_default();
    let level = match prepared.workspace.as_ref() {
        Some(w) => format!("{level}; {} workspace", w.kind.name()),
        None => level,
    };
    let outcome = outcome_of(stop, check.as_ref());
    let kept = repo::cleanup(repo, prepared, outcome, log, &env.pristines).await;
    (check, patch, kept, level)
}

/// The task's stop and outcome once its check or verifier has run: a verifier that
/// could not run leaves no verdict, and the run failed the task (`verifier_error`).
pub(super) fn verdict(stop: Stop, check: Option<&repo::CheckResult>) -> (Stop, Outcome) {
    let stop = match check.and_then(|c| c.infra.as_ref()) {
        Some(e) => Stop::new(
            crate::vocab::stop::StopReason::VerifierError,
            format!("the verifier could not run: {e}"),
        ),
        None => stop,
    };
    let outcome = outcome_of(&stop, check);
    (stop, outcome)
}

/// The figures of results.csv that the check or verifier gives (the rest at their
/// defaults, for the caller to fill).
pub(super) fn verdict_columns(check: Option<&repo::CheckResult>) -> crate::vocab::log::Measured {
    crate::vocab::log::Measured {
        check_exit_code: check.and_then(|c| c.exit_code),
        check_ms: check.map(|c| c.ms),
        tests_passed: check.and_then(|c| c.tests_passed),
        tests_failed: check.and_then(|c| c.tests_failed),
        reward: check.and_then(|c| c.reward),
        ..Default::default()
    }
}

/// The verdict: the check's when one ran, else what the stop reason implies.
pub(super) fn outcome_of(stop: &Stop, check: Option<&repo::CheckResult>) -> Outcome {
    match check {
        Some(c) if c.infra.is_some() => Outcome::Error,
        Some(c) if c.passed => Outcome::Pass,
        Some(_) => Outcome::Fail,
        None => stop.reason.unchecked_outcome(),
    }
}
