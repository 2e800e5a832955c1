//! A task's record, [`TaskResult`], built in one place: the loop's at the end of a task,
//! and the runner's for a task that never ran or whose code crashed, start from it.

use chrono::{DateTime, Utc};

use crate::job::TaskSpec;
use crate::vocab::log::TaskResult;
use crate::vocab::stop::StopReason;
use crate::vocab::usage::Usage;

/// The one constructor of a task's record: who the task is (from its spec), how it
/// stopped and when it started; the outcome its stop implies, and every measure zero
/// or none, which the code that measured sets (`TaskResult { turns, ..task_result(..) }`).
pub fn task_result(
    spec: &TaskSpec,
    stop_reason: StopReason,
    stop_detail: String,
    started_at: DateTime<Utc>,
) -> TaskResult {
    TaskResult {
        task_id: spec.task.clone(),
        key: spec.id.clone(),
        variant: spec.variant.clone(),
        axes: spec.axes.clone(),
        epoch: spec.epoch,
        provider: spec.provider.name.clone(),
        protocol: spec.provider.protocol.to_string(),
        model: spec.model.clone(),
        team: spec.team_name().map(str::to_string),
        outcome: stop_reason.unchecked_outcome(),
        stop_reason,
        stop_detail,
        turns: 0,
        tool_calls: 0,
        tool_errors: 0,
        usage: Usage::default(),
        usage_estimated_turns: 0,
        compactions: 0,
        ttft_ms: None,
        cost_usd: None,
        cache_saved_usd: None,
        batched_turns: 0,
        batch_saved_usd: None,
        wall_ms: 0,
        model_ms: 0,
        tool_ms: 0,
        retries: 0,
        rate_wait_ms: 0,
        check_exit_code: None,
        check_ms: None,
        denied_calls: 0,
        sandbox: String::new(),
        workspace: None,
        started_at,
        finished_at: started_at,
    }
}
