//! A task's record, [`TaskResult`], built in one place: the loop's at the end of a task,
//! and the runner's for a task that never ran or whose code crashed, start from it.

use chrono::{DateTime, Utc};

use crate::job::TaskSpec;
use crate::vocab::log::{Measured, TaskResult};
use crate::vocab::stop::StopReason;

/// The one constructor of a task's record: who the task is (from its spec), how it
/// stopped and when it started; the outcome its stop implies, and every measure zero
/// or none, which the code that measured replaces
/// (`TaskResult { measured, ..task_result(..) }`).
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
        started_at,
        finished_at: started_at,
        measured: Measured::default(),
    }
}
