//! A run shared by machines (`run --queue URL`, `worker URL`, `collect URL`): its tasks
//! in a PostgreSQL table, claimed by workers with `FOR UPDATE SKIP LOCKED` under a lease
//! that their heartbeats extend. A task whose worker died (lease expired) is claimed
//! again; a task ends exactly once (the first attempt that still holds it when it ends
//! is its result; an attempt that lost it is kept apart, its spend counted).

use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;

use crate::govern::pg::{Pg, PgError};

/// Why the queue could not be used.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error(transparent)]
    Pg(#[from] PgError),
    #[error("{0}")]
    Invalid(String),
}

/// One run's queue.
pub struct Queue {
    pg: std::sync::Arc<Pg>,
    run_id: String,
}

/// A task a worker took.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub key: String,
    /// 1 for the first attempt.
    pub attempt: i32,
}

/// How far a shared run is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub queued: i64,
    pub running: i64,
    /// Running, but their worker's lease has run out: it is gone, and they will be
    /// claimed again.
    pub expired: i64,
    pub done: i64,
    /// Workers holding tasks now.
    pub workers: Vec<String>,
}

impl Progress {
    pub fn total(&self) -> i64 {
        self.queued + self.running + self.done
    }

    /// Nothing left to run.
    pub fn finished(&self) -> bool {
        self.queued == 0 && self.running == 0
    }
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} tasks: {} done, {} running{}, {} queued",
            self.total(),
            self.done,
            self.running,
            if self.expired > 0 {
                format!(" ({} of a worker that stopped answering)", self.expired)
            } else {
                String::new()
            },
            self.queued
        )?;
        if !self.workers.is_empty() {
            write!(f, "; workers: {}", self.workers.join(", "))?;
        }
        Ok(())
    }
}

/// What `run --queue` stored: the job's identity and the run folder's fixed parts.
#[derive(Debug, Clone)]
pub struct QueuedRun {
    /// The job file as given to `run --queue` (workers look there by default).
    pub job_file: String,
    /// A digest of the job file's bytes (FNV-1a and length: it tells files apart, it is
    /// no defence against a forged one): workers refuse another file.
    pub job_sha: String,
    /// results.csv's header.
    pub header: Vec<String>,
    /// run.json as the run started.
    pub run_json: Value,
}

/// One ended task, or one attempt that lost its task, for `collect` (the report
/// module writes it into the collected folder).
pub use crate::report::Ended;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64().max(1.0)
}

impl Queue {
    /// Connects to the database (making or upgrading the schema). Blocking.
    pub fn open(url: &str, run_id: &str) -> Result<Queue, QueueError> {
        Ok(Queue {
            pg: Pg::shared(url)?,
            run_id: run_id.to_string(),
        })
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Puts a run and its tasks (key and variant, in plan order) in the queue, once: a
    /// second call with the same job adds nothing; another job under the same run id
    /// is refused. Returns whether the run was new. Blocking.
    pub fn create(
        &self,
        run: &QueuedRun,
        tasks: Vec<(String, String)>,
    ) -> Result<bool, QueueError> {
        let run_id = self.run_id.clone();
        let wanted = run.job_sha.clone();
        let run = run.clone();
        let header = Value::from(run.header.clone());
        let (new, sha) = self.pg.run(move |c| {
            async move {
                let tx = c.transaction().await?;
                let inserted = tx
                    .execute(
                        "INSERT INTO queue_runs (run_id, job_file, job_sha, header, run_json, created_at)
                         VALUES ($1, $2, $3, $4, $5, now()) ON CONFLICT (run_id) DO NOTHING",
                        &[&run_id, &run.job_file, &run.job_sha, &header, &run.run_json],
                    )
                    .await?;
                let sha: String = tx
                    .query_one("SELECT job_sha FROM queue_runs WHERE run_id = $1", &[&run_id])
                    .await?
                    .get(0);
                if sha == run.job_sha {
                    for (seq, (key, variant)) in tasks.iter().enumerate() {
                        let seq = i32::try_from(seq).unwrap_or(i32::MAX);
                        tx.execute(
                            "INSERT INTO queue_tasks (run_id, seq, key, variant, state)
                             VALUES ($1, $2, $3, $4, 'queued') ON CONFLICT (run_id, key) DO NOTHING",
                            &[&run_id, &seq, key, variant],
                        )
                        .await?;
                    }
                }
                tx.commit().await?;
                Ok((inserted == 1, sha))
            }
            .boxed()
        })?;
        if sha != wanted {
            return Err(QueueError::Invalid(format!(
                "run {} is already queued with another job file: choose another --run-id",
                self.run_id
            )));
        }
        Ok(new)
    }

    /// The run as `run --queue` stored it; an error naming the run id when there is
    /// none. Blocking.
    pub fn queued_run(&self) -> Result<QueuedRun, QueueError> {
        let run_id = self.run_id.clone();
        let row = self.pg.run(move |c| {
            async move {
                c.query_opt(
                    "SELECT job_file, job_sha, header, run_json FROM queue_runs WHERE run_id = $1",
                    &[&run_id],
                )
                .await
            }
            .boxed()
        })?;
        let row = row.ok_or_else(|| {
            QueueError::Invalid(format!(
                "no run {} in the queue at {}: queue it first with `agentbatch run JOB --queue URL --run-id {}`",
                self.run_id,
                self.pg.url(),
                self.run_id
            ))
        })?;
        let header: Value = row.get(2);
        Ok(QueuedRun {
            job_file: row.get(0),
            job_sha: row.get(1),
            header: header
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            run_json: row.get(3),
        })
    }

    /// Takes the next task nobody holds (queued, or held by a worker whose lease ran
    /// out), in plan order, for `lease`; never one of `running`, the tasks this worker
    /// runs now (its own lease may have run out while it runs them). Blocking.
    pub fn claim(
        &self,
        worker: &str,
        lease: Duration,
        running: Vec<String>,
    ) -> Result<Option<Claimed>, QueueError> {
        let (run_id, worker, lease) = (self.run_id.clone(), worker.to_string(), secs(lease));
        let row = self.pg.run(move |c| {
            async move {
                // Materialized: a subquery joined in place may be scanned again, and
                // with SKIP LOCKED each scan finds another row (claiming several).
                c.query_opt(
                    "WITH next AS MATERIALIZED (
                         SELECT key FROM queue_tasks
                         WHERE run_id = $1
                           AND (state = 'queued' OR (state = 'running' AND lease_until < now()))
                           AND NOT (key = ANY($4))
                         ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
                     UPDATE queue_tasks t
                     SET state = 'running', worker = $2, attempts = t.attempts + 1,
                         lease_until = now() + make_interval(secs => $3), started_at = now()
                     FROM next
                     WHERE t.run_id = $1 AND t.key = next.key
                     RETURNING t.key, t.attempts",
                    &[&run_id, &worker, &lease, &running],
                )
                .await
            }
            .boxed()
        })?;
        Ok(row.map(|r| Claimed {
            key: r.get(0),
            attempt: r.get(1),
        }))
    }

    /// Extends the lease of the tasks `worker` holds among `keys` (the ones it knows it
    /// runs: a claim it never heard back of runs out and goes to another worker); how
    /// many it holds. Blocking.
    pub fn heartbeat(
        &self,
        worker: &str,
        keys: Vec<String>,
        lease: Duration,
    ) -> Result<u64, QueueError> {
        let (run_id, worker, lease) = (self.run_id.clone(), worker.to_string(), secs(lease));
        Ok(self.pg.run(move |c| {
            async move {
                c.execute(
                    "UPDATE queue_tasks SET lease_until = now() + make_interval(secs => $3)
                     WHERE run_id = $1 AND worker = $2 AND state = 'running' AND key = ANY($4)",
                    &[&run_id, &worker, &lease, &keys],
                )
                .await
            }
            .boxed()
        })?)
    }

    /// Records how a claimed task ended. If this attempt still holds the task, it is
    /// done with this result (`requeue`: put back in the queue instead, for another
    /// worker, the attempt kept apart); else the attempt is kept apart and false is
    /// returned. Blocking.
    pub fn finish(&self, ended: Ended, requeue: bool) -> Result<bool, QueueError> {
        let run_id = self.run_id.clone();
        Ok(self.pg.run(move |c| {
            async move {
                let tx = c.transaction().await?;
                let record = &ended.record;
                let held = tx
                    .query_opt(
                        "SELECT 1 FROM queue_tasks
                         WHERE run_id = $1 AND key = $2 AND state = 'running'
                           AND worker = $3 AND attempts = $4
                         FOR UPDATE",
                        &[&run_id, &ended.key, &ended.worker, &ended.attempt],
                    )
                    .await?
                    .is_some();
                if held && !requeue {
                    tx.execute(
                        "UPDATE queue_tasks SET state = 'done', finished_at = now(),
                             record = $3, transcript = $4, patch = $5, lease_until = NULL
                         WHERE run_id = $1 AND key = $2",
                        &[&run_id, &ended.key, record, &ended.transcript, &ended.patch],
                    )
                    .await?;
                } else {
                    tx.execute(
                        "INSERT INTO queue_superseded
                           (run_id, key, attempt, worker, record, transcript, finished_at)
                         VALUES ($1, $2, $3, $4, $5, $6, now())",
                        &[&run_id, &ended.key, &ended.attempt, &ended.worker, record, &ended.transcript],
                    )
                    .await?;
                    if held {
                        tx.execute(
                            "UPDATE queue_tasks SET state = 'queued', worker = NULL, lease_until = NULL
                             WHERE run_id = $1 AND key = $2",
                            &[&run_id, &ended.key],
                        )
                        .await?;
                    }
                }
                tx.commit().await?;
                Ok(held && !requeue)
            }
            .boxed()
        })?)
    }

    /// Gives back a task `worker` holds (at `attempt`), untouched, for another worker.
    /// Blocking.
    pub fn unclaim(&self, key: &str, worker: &str, attempt: i32) -> Result<(), QueueError> {
        let (run_id, key, worker) = (self.run_id.clone(), key.to_string(), worker.to_string());
        self.pg.run(move |c| {
            async move {
                c.execute(
                    "UPDATE queue_tasks SET state = 'queued', worker = NULL, lease_until = NULL
                     WHERE run_id = $1 AND key = $2 AND worker = $3 AND state = 'running'
                       AND attempts = $4",
                    &[&run_id, &key, &worker, &attempt],
                )
                .await
            }
            .boxed()
        })?;
        Ok(())
    }

    /// How far the run is. Blocking.
    pub fn progress(&self) -> Result<Progress, QueueError> {
        let run_id = self.run_id.clone();
        Ok(self.pg.run(move |c| {
            async move {
                let rows = c
                    .query(
                        "SELECT state, (state = 'running' AND lease_until < now()) AS expired,
                                COUNT(*), array_remove(array_agg(DISTINCT worker), NULL)
                         FROM queue_tasks WHERE run_id = $1 GROUP BY 1, 2",
                        &[&run_id],
                    )
                    .await?;
                let mut p = Progress::default();
                for r in rows {
                    let (state, expired, n): (String, bool, i64) = (r.get(0), r.get(1), r.get(2));
                    match state.as_str() {
                        "queued" => p.queued += n,
                        "running" => {
                            p.running += n;
                            if expired {
                                p.expired += n;
                            } else {
                                let workers: Vec<String> = r.get(3);
                                p.workers.extend(workers);
                            }
                        }
                        _ => p.done += n,
                    }
                }
                p.workers.sort();
                p.workers.dedup();
                Ok(p)
            }
            .boxed()
        })?)
    }

    /// The tasks that ended, in plan order, and the attempts kept apart. Blocking.
    pub fn ended(&self) -> Result<(Vec<Ended>, Vec<Ended>), QueueError> {
        let run_id = self.run_id.clone();
        Ok(self.pg.run(move |c| {
            async move {
                let done = c
                    .query(
                        "SELECT key, attempts, worker, record, transcript, patch FROM queue_tasks
                         WHERE run_id = $1 AND state = 'done' ORDER BY seq",
                        &[&run_id],
                    )
                    .await?
                    .into_iter()
                    .map(|r| Ended {
                        key: r.get(0),
                        attempt: r.get(1),
                        worker: r.get::<_, Option<String>>(2).unwrap_or_default(),
                        record: r.get::<_, Option<Vec<u8>>>(3).unwrap_or_default(),
                        transcript: r.get(4),
                        patch: r.get(5),
                    })
                    .collect();
                let apart = c
                    .query(
                        "SELECT key, attempt, worker, record, transcript FROM queue_superseded
                         WHERE run_id = $1 ORDER BY finished_at",
                        &[&run_id],
                    )
                    .await?
                    .into_iter()
                    .map(|r| Ended {
                        key: r.get(0),
                        attempt: r.get(1),
                        worker: r.get(2),
                        record: r.get::<_, Option<Vec<u8>>>(3).unwrap_or_default(),
                        transcript: r.get(4),
                        patch: None,
                    })
                    .collect();
                Ok((done, apart))
            }
            .boxed()
        })?)
    }
}
