//! The reference agents, which send no request: `oracle` applies the task's solution
//! (SWE-bench's gold patch, Harbor's solve.sh) and `nop` changes nothing. They go
//! through the same workspace, environment and verifier as a model, so a suite's
//! environments and verifiers are checked before any model is paid for.

use super::repo::Prepared;
use crate::job::{AgentKind, Solution, TaskSpec};
use crate::tools::sandbox::Reach;
use crate::tools::RunLimits;
use crate::vocab::log::TaskLog;
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::TranscriptEvent;

/// The solve script's output kept in the transcript.
const OUTPUT: usize = 20_000;

/// Does what the task's reference agent does, and says how it ended.
pub(super) async fn act(
    spec: &TaskSpec,
    env: &super::AgentEnv,
    prepared: &Prepared,
    log: &TaskLog,
) -> Stop {
    match spec.agent {
        AgentKind::Model | AgentKind::Nop => {
            Stop::new(StopReason::Completed, "the nop agent changed nothing")
        }
        AgentKind::Oracle => match spec.solution.as_deref() {
            None => Stop::new(StopReason::ToolSetupError, "the oracle has no solution"),
            Some(Solution::Patch(patch)) => apply_patch(patch, prepared).await,
            Some(Solution::Dir(dir)) => solve(spec, env, dir, prepared, log).await,
        },
    }
}

async fn apply_patch(patch: &str, prepared: &Prepared) -> Stop {
    let (Some(ws), Some(tmp)) = (prepared.workspace.as_ref(), prepared.tmp.as_ref()) else {
        return Stop::new(
            StopReason::ToolSetupError,
            "the oracle's patch needs a workspace: give the task a `repo` or an `environment`",
        );
    };
    match super::fresh::apply(&ws.root, tmp, patch.as_bytes()).await {
        Ok(()) => Stop::new(StopReason::Completed, "the oracle applied the gold patch"),
        Err(e) => Stop::new(StopReason::ToolSetupError, format!("the oracle's {e}")),
    }
}

/// Harbor's oracle: the solution folder copied to `/solution`, its script run in the
/// workdir under the task's time limit.
async fn solve(
    spec: &TaskSpec,
    env: &super::AgentEnv,
    dir: &std::path::Path,
    prepared: &Prepared,
    log: &TaskLog,
) -> Stop {
    let (Some(container), Some(sandbox)) = (prepared.container.as_ref(), prepared.sandbox.as_ref())
    else {
        return Stop::new(
            StopReason::ToolSetupError,
            "the oracle's solution folder is copied into the task's container: give the task an `environment`",
        );
    };
    if let Err(e) = container.copy_in(dir, "/solution").await {
        return Stop::new(
            StopReason::ToolSetupError,
            format!("cannot copy the solution into the container: {e}"),
        );
    }
    let script = if dir.join("solve.sh").is_file() {
        "solve.sh"
    } else {
        "solution.sh"
    };
    let command = format!("bash /solution/{script}");
    let reach = Reach {
        network: spec.sandbox.network,
        distrust_git: false,
    };
    let limits = RunLimits {
        timeout: spec.limits.time_limit,
        max_output: OUTPUT,
    };
    match sandbox.run(&command, limits, &env.cancel, reach).await {
        Ok(out) if out.cancelled => {
            Stop::new(StopReason::Cancelled, "run cancelled while the oracle ran")
        }
        Ok(out) => {
            log.emit(TranscriptEvent::Setup {
                command: format!("oracle: {command}"),
                exit_code: out.exit_code,
                timed_out: out.timed_out,
                ms: out.ms,
                output: out.output.clone(),
            });
            if out.timed_out {
                Stop::new(
                    StopReason::TimeLimit,
                    format!("the oracle's {script} ran out of the time limit"),
                )
            } else {
                Stop::new(
                    StopReason::Completed,
                    format!("the oracle ran {script} ({})", out.status(limits.timeout)),
                )
            }
        }
        Err(e) => Stop::new(
            StopReason::ToolSetupError,
            format!("the oracle's {script} could not run: {e}"),
        ),
    }
}
