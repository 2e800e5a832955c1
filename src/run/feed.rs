//! Feeding tasks: one feeder per team starts that team's tasks in plan order as slots
//! free up, so a team at its own concurrency limit never holds up the others; they
//! share the run's slots. Every task gets a row, started or not.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::agent::{run_task, smallest_first_request, task_result, AgentEnv};
use crate::job::{Plan, TaskSpec};
use crate::vocab::log::{Event, TaskResult};
use crate::vocab::stop::StopReason;

/// Runs `tasks` with at most `concurrency` in flight, each team's in plan order, until
/// all have ended or `drain` stops new ones from starting.
pub(super) async fn feed_by_team(
    plan: &Plan,
    tasks: Vec<TaskSpec>,
    concurrency: usize,
    env: &AgentEnv,
    logs: &super::Logs,
    drain: &CancellationToken,
) {
    let global = Arc::new(Semaphore::new(concurrency));
    let mut groups: Vec<(Option<String>, Vec<TaskSpec>)> = Vec::new();
    for spec in tasks {
        let team = spec.team_name().map(str::to_string);
        match groups.iter_mut().find(|(t, _)| *t == team) {
            Some((_, g)) => g.push(spec),
            None => groups.push((team, vec![spec])),
        }
    }
    let mut feeders = JoinSet::new();
    for (team, group) in groups {
        let slot = team
            .as_deref()
            .and_then(|t| plan.teams.get(t))
            .and_then(|t| t.concurrency)
            .map(|c| Arc::new(Semaphore::new(c)));
        let feeder = Feeder {
            env: env.clone(),
            logs: logs.clone(),
            drain: drain.clone(),
            global: global.clone(),
            team_slot: slot,
        };
        feeders.spawn(feeder.feed(group));
    }
    while feeders.join_next().await.is_some() {}
}

/// Starts one team's tasks in order as slots free up.
struct Feeder {
    env: AgentEnv,
    logs: super::Logs,
    drain: CancellationToken,
    global: Arc<Semaphore>,
    team_slot: Option<Arc<Semaphore>>,
}

type Slots = (Option<OwnedSemaphorePermit>, OwnedSemaphorePermit);

impl Feeder {
    fn send(&self, row: TaskResult) {
        let _ = self.logs.tx.send(Event::TaskFinished(Box::new(row)));
    }

    /// A slot of the team first, then one of the run.
    async fn slots(&self) -> Option<Slots> {
        let team = match &self.team_slot {
            Some(s) => Some(s.clone().acquire_owned().await.ok()?),
            None => None,
        };
        Some((team, self.global.clone().acquire_owned().await.ok()?))
    }

    async fn feed(self, group: Vec<TaskSpec>) {
        let mut set = JoinSet::new();
        let mut running: HashMap<tokio::task::Id, TaskSpec> = HashMap::new();
        let mut pending = group.into_iter();
        while let Some(spec) = pending.next() {
            let slots = tokio::select! {
                biased;
                _ = self.drain.cancelled() => None,
                s = self.slots() => s,
            };
            let Some(slots) = slots else {
                for spec in std::iter::once(spec).chain(pending.by_ref()) {
                    self.logs.not_started(
                        &spec,
                        skipped(
                            &spec,
                            StopReason::Cancelled,
                            "not started: the run was interrupted".into(),
                        ),
                    );
                }
                break;
            };
            if let Some(row) = cannot_start(&self.env, &spec).await {
                self.logs.not_started(&spec, row);
                continue;
            }
            let (env, log) = (self.env.clone(), self.logs.task(&spec));
            let task_spec = spec.clone();
            let handle = set.spawn(async move {
                run_task(&task_spec, &env, log).await;
                drop(slots);
            });
            running.insert(handle.id(), spec);
        }
        while let Some(joined) = set.join_next_with_id().await {
            if let Err(e) = joined {
                if let Some(spec) = running.get(&e.id()) {
                    self.send(crashed(spec, e));
                }
            }
        }
    }
}

/// The row of a task that must not start because its smallest first request cannot be
/// paid for, or None.
pub(super) async fn cannot_start(env: &AgentEnv, spec: &TaskSpec) -> Option<TaskResult> {
    let smallest = env
        .ledger
        .governs(spec.team.as_deref())
        .then(|| smallest_first_request(spec, &env.registry))
        .flatten()?;
    let stop = env
        .ledger
        .can_start(spec.team.as_deref(), &spec.variant, smallest)
        .await?;
    Some(skipped(spec, stop.reason, stop.detail))
}

/// The row of a task whose code panicked (a bug), with the panic's message. What it
/// spent is in its transcript; its shared reservations were charged in full.
pub(super) fn crashed(spec: &TaskSpec, e: tokio::task::JoinError) -> TaskResult {
    let why = if e.is_panic() {
        let payload = e.into_panic();
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        format!("panicked: {}", crate::text::prefix(&message, 500))
    } else {
        format!("ended: {e}")
    };
    let detail = format!(
        "internal error (a bug in agentbatch, please report it): the task {why}; its cost is what its transcript records"
    );
    let mut result = task_result(spec, StopReason::InternalError, detail, Utc::now());
    // The reporter fills in what the transcript says it spent.
    result.measured.cost_usd = spec.price.as_ref().map(|_| Default::default());
    result
}

/// The row of a task that was never started: nothing spent.
fn skipped(spec: &TaskSpec, reason: StopReason, detail: String) -> TaskResult {
    let mut result = task_result(spec, reason, detail, Utc::now());
    result.measured.cost_usd = spec.price.as_ref().map(|_| Default::default());
    result
}
