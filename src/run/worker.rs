//! A worker of a shared run (`agentbatch worker URL --run-id ID`): a run of the queued
//! job whose tasks come from the queue, one claim at a time as slots free up, with a
//! heartbeat that keeps its claims' leases alive; each task's row, transcript and patch
//! go back to the queue as soon as the reporter has written them. It ends when the
//! queue has nothing left to run, waiting meanwhile for tasks another worker holds
//! (should that worker die, they come back when its lease runs out).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::feed::{cannot_start, crashed};
use super::queue::{Claimed, Ended, Queue};
use crate::agent::{run_task, AgentEnv};
use crate::job::TaskSpec;
use crate::report::Finished;
use crate::vocab::log::Event;
use crate::vocab::stop::StopReason;

/// How often a worker with nothing to claim looks again.
const POLL: Duration = Duration::from_millis(500);

/// What makes a run a worker of a shared one.
pub struct QueueWork {
    pub queue: Arc<Queue>,
    /// The queue's database, which is also the team ledger unless another PostgreSQL
    /// ledger is given (may hold a password: never shown).
    pub url: String,
    /// This worker's name in the queue (host and process).
    pub worker: String,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
    /// The attempt each claimed task is on, for its upload.
    attempts: Mutex<HashMap<String, i32>>,
}

impl QueueWork {
    pub fn new(queue: Arc<Queue>, url: String, worker: String, lease: Duration) -> QueueWork {
        QueueWork {
            queue,
            url,
            worker,
            lease,
            attempts: Mutex::new(HashMap::new()),
        }
    }

    /// `host-pid`: unique among the run's live workers.
    pub fn default_name() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "host".into());
        format!("{host}-{}", std::process::id())
    }

    /// The tasks this worker runs now.
    fn running(&self) -> Vec<String> {
        self.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&QueueWork) -> T + Send + 'static,
    ) -> Option<T> {
        let me = self.clone();
        tokio::task::spawn_blocking(move || f(&me)).await.ok()
    }
}

/// Claims and runs tasks, at most `concurrency` at once, until the queue is finished or
/// `drain` stops new claims.
pub(super) async fn feed_from_queue(
    work: &Arc<QueueWork>,
    plan: &crate::job::Plan,
    tasks: Vec<TaskSpec>,
    concurrency: usize,
    env: &AgentEnv,
    logs: &super::Logs,
    drain: &CancellationToken,
) {
    let tx = &logs.tx;
    let by_key: HashMap<String, TaskSpec> = tasks.into_iter().map(|t| (t.id.clone(), t)).collect();
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let team_slots = team_slots(plan);
    let heartbeat = heartbeat(work, env);
    let mut set = JoinSet::new();
    let mut running: HashMap<tokio::task::Id, TaskSpec> = HashMap::new();
    let send = |row| {
        let _ = tx.send(Event::TaskFinished(Box::new(row)));
    };
    loop {
        let permit = tokio::select! {
            biased;
            _ = drain.cancelled() => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let claimed = work
            .blocking(|w| {
                let running = w.running();
                w.queue.claim(&w.worker, w.lease, running)
            })
            .await
            .unwrap_or(Ok(None));
        let claimed = match claimed {
            Ok(c) => c,
            Err(e) => {
                eprintln!("agentbatch worker: cannot claim a task: {e}");
                drop(permit);
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        let Some(claimed) = claimed else {
            drop(permit);
            let progress = work.blocking(|w| w.queue.progress()).await;
            if let Some(Ok(p)) = progress {
                if p.finished() && set.is_empty() {
                    break;
                }
            }
            // Something runs here or elsewhere: wait for a slot's task to end, or poll.
            tokio::select! {
                _ = drain.cancelled() => break,
                Some(joined) = set.join_next_with_id(), if !set.is_empty() => {
                    if let Err(e) = joined {
                        if let Some(spec) = running.remove(&e.id()) {
                            send(crashed(&spec, e));
                        }
                    }
                }
                _ = tokio::time::sleep(POLL) => {}
            }
            continue;
        };
        // Interrupted while the claim was on its way: the task goes back untouched.
        if drain.is_cancelled() {
            give_back(work, &claimed).await;
            break;
        }
        work.attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(claimed.key.clone(), claimed.attempt);
        let Some(spec) = by_key.get(&claimed.key).cloned() else {
            // The job file and the version were checked to be the queued ones, so the
            // plans should agree: give the task back and stop rather than guess.
            eprintln!(
                "agentbatch worker: task {} is queued but not in this worker's plan; it goes back to the queue and this worker stops",
                claimed.key
            );
            give_back(work, &claimed).await;
            break;
        };
        if let Some(row) = cannot_start(env, &spec).await {
            logs.not_started(&spec, row);
            continue;
        }
        let team_permit = match spec.team_name().and_then(|t| team_slots.get(t)) {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        };
        let (env, log) = (env.clone(), logs.task(&spec));
        let task_spec = spec.clone();
        let handle = set.spawn(async move {
            run_task(&task_spec, &env, log).await;
            drop(team_permit);
            drop(permit);
        });
        running.insert(handle.id(), spec);
    }
    while let Some(joined) = set.join_next_with_id().await {
        if let Err(e) = joined {
            if let Some(spec) = running.get(&e.id()) {
                send(crashed(spec, e));
            }
        }
    }
    heartbeat.abort();
}

/// The leases of the tasks this worker runs, and its reservations in the ledger: both
/// run out a lease after the last heartbeat of a worker that died.
fn heartbeat(work: &Arc<QueueWork>, env: &AgentEnv) -> tokio::task::JoinHandle<()> {
    let (work, ledger) = (work.clone(), env.ledger.clone());
    tokio::spawn(async move {
        let every = (work.lease / 3).max(Duration::from_millis(200));
        loop {
            tokio::time::sleep(every).await;
            if let Some(Err(e)) = work
                .blocking(|w| w.queue.heartbeat(&w.worker, w.running(), w.lease))
                .await
            {
                eprintln!("agentbatch worker: cannot extend the leases: {e}");
            }
            if let Err(e) = ledger.renew().await {
                eprintln!("agentbatch worker: cannot renew this worker's reservations in the ledger (other workers stop waiting for them a lease from now): {e}");
            }
        }
    })
}

/// The concurrency of each team that has one: it holds within this worker (each worker
/// keeps its own).
fn team_slots(plan: &crate::job::Plan) -> HashMap<String, Arc<Semaphore>> {
    plan.teams
        .values()
        .filter_map(|t| {
            t.concurrency
                .map(|c| (t.name.clone(), Arc::new(Semaphore::new(c))))
        })
        .collect()
}

/// Gives a claimed task back to the queue, untouched.
async fn give_back(work: &Arc<QueueWork>, claimed: &Claimed) {
    let (key, attempt) = (claimed.key.clone(), claimed.attempt);
    let _ = work
        .blocking(move |w| w.queue.unclaim(&key, &w.worker, attempt))
        .await;
}

/// Sends each written row, with its transcript and patch, to the queue: the task is
/// done, or (cancelled here) back in the queue for another worker. On its own thread:
/// the calls block. Returns the uploads that failed.
pub(super) fn uploader(
    work: Arc<QueueWork>,
    rx: std::sync::mpsc::Receiver<Finished>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut failed = Vec::new();
        for f in rx {
            // Kept among the running tasks (so its lease is extended) until it is in.
            let attempt = work
                .attempts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&f.key)
                .copied()
                .unwrap_or(0);
            let read =
                |p: &Option<std::path::PathBuf>| p.as_ref().and_then(|p| std::fs::read(p).ok());
            let ended = Ended {
                key: f.key.clone(),
                attempt,
                worker: work.worker.clone(),
                record: f.record,
                transcript: read(&f.transcript),
                patch: read(&f.patch),
            };
            let requeue = f.stop_reason == StopReason::Cancelled;
            // A dropped connection is made again on the next call: try a few times,
            // the lease held meanwhile, before the task is left to run again elsewhere.
            let mut last = None;
            for delay in [0u64, 200, 1000, 3000, 10_000] {
                std::thread::sleep(Duration::from_millis(delay));
                match work.queue.finish(ended.clone(), requeue) {
                    Ok(_) => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
            }
            work.attempts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&f.key);
            if let Some(e) = last {
                eprintln!("agentbatch worker: the result of {} did not reach the queue (it runs again elsewhere): {e}", f.key);
                failed.push(format!("{}: {e}", f.key));
            }
        }
        failed
    })
}
