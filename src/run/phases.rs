//! A run, phase by phase: the folder and its lock, the ledger and the simulator,
//! run.json, the reporter, feeding the tasks while watching for signals, and the end.
//! [`Run::execute`] calls them in that order; each phase says what must come before it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use rust_decimal::Decimal;
use tokio_util::sync::CancellationToken;

use super::feed::feed_by_team;
use super::folder::{choose_run_id, lock_run_dir, RunLock};
use super::resume::Resumed;
use super::signals::watch_signals;
use super::{RunError, RunOptions, RunOutcome};
use crate::agent::AgentEnv;
use crate::govern::ledger::Ledger;
use crate::govern::rate::Gates;
use crate::govern::store::CapStore;
use crate::job::{Plan, ProviderKind, TaskSpec};
use crate::report::{ReportError, Reporter, ReporterConfig, ResumeRecord, RunJson};
use crate::sim::Sim;
use crate::trace::Tracing;
use crate::vocab::price;

/// One run of a plan, from the checks before its folder exists to its summary.
pub(super) struct Run {
    plan: Plan,
    opts: RunOptions,
    concurrency: usize,
    run_id: String,
    /// The folder that holds the run folder (`--out`).
    out_dir: PathBuf,
    /// The tasks to run (for a resume, the ones still to run).
    tasks: Vec<TaskSpec>,
    /// run.json's `tasks`: every selected task, encoded once.
    tasks_json: Option<Box<serde_json::value::RawValue>>,
    resumed: Option<Resumed>,
    /// Held until the run ends.
    _lock: Option<RunLock>,
    /// Cancels running tasks (a second signal, the end of the grace period, a report
    /// file that cannot be written).
    cancel: CancellationToken,
    /// A worker's uploads to the queue, ended with the reporter.
    uploads: Option<std::thread::JoinHandle<Vec<String>>>,
    /// Starts no new task (the first signal).
    drain: CancellationToken,
    /// The tasks' traces, when they are on.
    traces: Option<Arc<Tracing>>,
    /// The report page's views of the transcripts, built as they are written.
    page_views: Option<Arc<crate::page::LiveViews>>,
    /// The run's rate gates, for what they learned (run.json, the summary).
    gates: Option<Arc<Gates>>,
}

impl Run {
    /// Checks what can be checked before anything is written: the run's id and that its
    /// folder is free (a resume's folder is locked and read by the caller).
    pub(super) fn new(
        plan: Plan,
        opts: RunOptions,
        selected: Vec<TaskSpec>,
        resumed: Option<(Resumed, RunLock)>,
    ) -> Result<Run, RunError> {
        let concurrency = opts.concurrency.unwrap_or(plan.concurrency);
        let tasks_json = serde_json::value::to_raw_value(&selected)
            .map_err(|e| RunError::Invalid(format!("cannot encode the plan: {e}")))?;
        let (tasks, out_dir, run_id, resumed, lock) = match resumed {
            Some((mut r, lock)) => {
                let tasks = std::mem::take(&mut r.tasks);
                (tasks, r.out_dir(), r.run_id.clone(), Some(r), Some(lock))
            }
            None => {
                let out_dir = opts.out_dir.clone();
                let run_id = choose_run_id(&plan, opts.run_id.as_ref(), &out_dir)?;
                if out_dir.join(&run_id).exists() {
                    return Err(RunError::Invalid(format!(
                        "{} already exists: choose another --run-id or --out, or continue it with --resume",
                        out_dir.join(&run_id).display()
                    )));
                }
                (selected, out_dir, run_id, None, None)
            }
        };
        let cancel = CancellationToken::new();
        Ok(Run {
            plan,
            opts,
            concurrency,
            run_id,
            out_dir,
            tasks,
            tasks_json: Some(tasks_json),
            resumed,
            _lock: lock,
            drain: cancel.child_token(),
            cancel,
            uploads: None,
            traces: None,
            page_views: None,
            gates: None,
        })
    }

    /// The run folder, `<out>/<run-id>`.
    fn dir(&self) -> PathBuf {
        self.out_dir.join(&self.run_id)
    }

    /// Runs every phase in order.
    pub(super) async fn execute(mut self) -> Result<RunOutcome, RunError> {
        // Before anything is written: a bad endpoint changes nothing.
        if let Some(settings) = self.opts.trace.clone() {
            let traces = Tracing::start(settings, &self.plan.name, &self.run_id)
                .map_err(|e| RunError::Invalid(e.to_string()))?;
            self.traces = Some(Arc::new(traces));
        }
        // Opened before the run folder is made: a ledger that cannot be opened leaves
        // nothing behind.
        let store = self.open_ledger_store()?;
        self.lock_folder()?;
        self.stop_leftovers();
        if self.opts.queue.is_some() {
            // A worker's share is not a run to resume by itself (run::run refuses it).
            crate::report::mark_worker(&self.dir())?;
        }
        let abandoned = self.abandon_reservations(store.as_ref())?;
        if self.tasks.iter().any(|t| t.repo.is_some()) {
            crate::tools::sandbox::protect_runner();
        }
        let sim = self.start_sim().await?;
        let ledger = Ledger::new(&self.plan, &self.run_id, store).wait_until(self.opts.until);
        let ledger = Arc::new(match &self.opts.queue {
            Some(work) => ledger.share_run_pools(&work.worker, work.lease),
            None => ledger,
        });
        if let Some(r) = &self.resumed {
            ledger.carry_over(r.spent_run, &r.spent_teams);
        }
        let run_json = self.run_json(abandoned);
        let finished = self.opts.queue.clone().map(|work| {
            let (tx, rx) = std::sync::mpsc::channel();
            self.uploads = Some(super::worker::uploader(work, rx));
            tx
        });
        self.page_views = Some(Arc::new(crate::page::LiveViews::new(
            &self.dir(),
            crate::page::PageOptions::from_env(),
        )));
        let reporter = self.start_reporter(run_json, finished)?;
        let env = self.agent_env(&ledger, sim.as_ref())?;
        let pristines = env.pristines.clone();
        self.feed(&reporter, env).await;
        if let Err(e) = ledger.close().await {
            eprintln!("agentbatch: cannot give this worker's unused cap slices back to the ledger: {e} (they come back when their lease runs out; what they may have spent stays counted)");
        }
        // The pristine checkouts go, unless a kept layer is over one.
        tokio::task::spawn_blocking(move || pristines.finish())
            .await
            .ok();
        self.finish(reporter).await
    }

    /// The store of team period caps, when a team has one. A worker of a shared run
    /// keeps them in PostgreSQL (the queue's database unless another is given): a file
    /// would hold each machine's spend apart.
    fn open_ledger_store(&self) -> Result<Option<Arc<dyn CapStore>>, RunError> {
        // A shared run keeps its own pools there too.
        if let Some(work) = &self.opts.queue {
            let given = self
                .opts
                .ledger
                .clone()
                .or_else(|| self.plan.ledger_path.clone());
            let path = match given {
                Some(p) if p.to_str().is_some_and(crate::vocab::values::is_postgres_url) => p,
                Some(p) => {
                    return Err(RunError::Invalid(format!(
                        "the ledger {} is a file, which the other machines of a shared run cannot see: give a postgres:// URL, or none (the queue's database then keeps the team caps)",
                        p.display()
                    )))
                }
                None => PathBuf::from(&work.url),
            };
            return crate::govern::open_store(&path)
                .map(Some)
                .map_err(RunError::Ledger);
        }
        if !self.plan.teams.values().any(|t| t.cap.is_some()) {
            return Ok(None);
        }
        let path = self
            .opts
            .ledger
            .clone()
            .or_else(|| self.plan.ledger_path.clone())
            .unwrap_or_else(|| self.out_dir.join("ledger.sqlite"));
        crate::govern::open_store(&path)
            .map(Some)
            .map_err(RunError::Ledger)
    }

    /// Creates and locks a new run's folder (a resumed run's is locked already).
    fn lock_folder(&mut self) -> Result<(), RunError> {
        if self._lock.is_none() {
            self._lock = Some(lock_run_dir(&self.dir())?);
        }
        Ok(())
    }

    /// The lock proves the earlier process of a resumed run is dead. A process started
    /// for it that still runs lost its warden with it (`pkill -9 -f agentbatch` reaches
    /// the wardens too, and without a PID namespace a command's children then live
    /// on): it is killed before its workspace is deleted, and the user is told.
    fn stop_leftovers(&self) {
        if self.resumed.is_none() {
            return;
        }
        let pids = crate::tools::sandbox::stop_leftovers(&self.dir());
        if !pids.is_empty() {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            eprintln!(
                "agentbatch: stopped {} processes that the killed run of {} left running (pids {}): their wardens were killed with the runner",
                pids.len(),
                self.dir().display(),
                list.join(", ")
            );
        }
    }

    /// The lock proves the earlier process of a resumed run is dead: its open
    /// period-cap reservations can never settle. They stay spent, and nobody waits for
    /// them. What they held.
    fn abandon_reservations(&self, store: Option<&Arc<dyn CapStore>>) -> Result<Decimal, RunError> {
        match (&self.resumed, store) {
            (Some(_), Some(store)) => store
                .abandon_run(&self.run_id, Utc::now())
                .map_err(RunError::Ledger),
            _ => Ok(Decimal::ZERO),
        }
    }

    /// The simulator the tasks need (given, started here, or none), with their scripts.
    async fn start_sim(&self) -> Result<Option<Arc<Sim>>, RunError> {
        let tasks = &self.tasks;
        let needs_sim = tasks
            .iter()
            .any(|t| t.provider.kind == ProviderKind::Sim && t.provider.base_url.is_none());
        let sim = match (&self.opts.sim, needs_sim) {
            (Some(s), _) => Some(s.clone()),
            (None, true) => Some(Arc::new(Sim::start_local().await.map_err(RunError::Sim)?)),
            (None, false) => None,
        };
        if let Some(sim) = &sim {
            for t in tasks {
                if let (ProviderKind::Sim, Some(script)) = (t.provider.kind, &t.sim) {
                    sim.register(&t.id, script.clone());
                    // A batch item names its task by the tag in its custom_id.
                    let tag = crate::model::batch::tag_for(&t.id);
                    if t.batch.is_some() && tag != t.id {
                        sim.register(&tag, script.clone());
                    }
                }
            }
            let limited = tasks.iter().find(|t| {
                t.provider.kind == ProviderKind::Sim && t.provider.server_limits.is_some()
            });
            if let Some(t) = limited {
                sim.set_limits(t.provider.server_limits.as_ref());
                sim.send_limit_headers(!t.provider.server_limits_unstated);
            }
        }
        Ok(sim)
    }

    /// run.json as the run starts: a new run's head, or the earlier one with this
    /// resume's record added.
    fn run_json(&mut self, abandoned: Decimal) -> RunJson {
        let plan = &self.plan;
        let now = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
        let job = serde_json::to_value(&plan.job).unwrap_or(serde_json::Value::Null);
        let normal = |m: &HashMap<String, Decimal>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.normalize()))
                .collect::<BTreeMap<_, _>>()
        };
        let mut run_json = match &self.resumed {
            None => RunJson {
                agentbatch_version: crate::VERSION.to_string(),
                agentbatch_commit: crate::COMMIT.to_string(),
                run_id: self.run_id.clone(),
                job_file: plan.file.display().to_string(),
                job_name: plan.name.clone(),
                started_at: now,
                concurrency: self.concurrency,
                only: self.opts.only.clone(),
                pricing_as_of: price::builtin_as_of().to_string(),
                job,
                ..RunJson::default()
            },
            Some(r) => {
                let mut v = r.run_json.clone();
                v.resumes.push(ResumeRecord {
                    at: now,
                    agentbatch_version: crate::VERSION.to_string(),
                    agentbatch_commit: crate::COMMIT.to_string(),
                    kept_rows: r.kept(),
                    superseded_rows: r.superseded,
                    tasks_to_run: self.tasks.len(),
                    spent_before_usd: r.spent_run.normalize(),
                    killed_spent_usd: r.killed_spent.normalize(),
                    abandoned_reservations_usd: abandoned.normalize(),
                    killed_spent_by_team: normal(&r.killed_teams),
                    killed_spent_by_variant: normal(&r.killed_variants),
                    retry_errors: self.opts.resume.as_ref().is_some_and(|o| o.retry_errors),
                    retry_budget_stops: self
                        .opts
                        .resume
                        .as_ref()
                        .is_some_and(|o| o.retry_budget_stops),
                });
                v.job = job;
                v.totals_scope =
                    Some("the last attempt only; summary.csv covers the whole run".into());
                v
            }
        };
        run_json.tasks = self.tasks_json.take();
        run_json
    }

    /// Has the report module set a resumed folder up, then starts the reporter, which
    /// writes run.json and results.csv's header.
    fn start_reporter(
        &self,
        mut run_json: RunJson,
        finished: Option<std::sync::mpsc::Sender<crate::report::Finished>>,
    ) -> Result<Reporter, RunError> {
        let already_done = self.resumed.as_ref().map_or(0, |r| r.kept());
        if let Some(r) = &self.resumed {
            run_json.status = Some("running".into());
            r.apply(&self.tasks, &run_json)?;
        }
        Ok(Reporter::start(ReporterConfig {
            run_id: self.run_id.clone(),
            dir: self.dir(),
            run_json,
            total_tasks: self.tasks.len() + already_done,
            progress: self.opts.progress,
            on_fatal: self.cancel.clone(),
            axes: self.plan.axes.clone(),
            resume: self.resumed.is_some(),
            already_done,
            finished,
            follower: self
                .page_views
                .clone()
                .map(|v| v as Arc<dyn crate::vocab::sink::TranscriptFollower>),
        })?)
    }

    /// What every task's loop shares.
    fn agent_env(
        &mut self,
        ledger: &Arc<Ledger>,
        sim: Option<&Arc<Sim>>,
    ) -> Result<AgentEnv, RunError> {
        // Absolute: workspaces, temp folders and git run in other folders than this one.
        let task_dir = self.dir();
        let task_dir = std::path::absolute(&task_dir).map_err(|source| {
            RunError::Report(ReportError::Io {
                path: task_dir.clone(),
                source,
            })
        })?;
        let gates = Arc::new(match &self.opts.queue {
            Some(work) => Gates::shared(
                &self.plan,
                Arc::new(
                    crate::govern::pg_rate::SharedRates::open(&work.url)
                        .map_err(|e| RunError::Invalid(e.to_string()))?,
                ),
            ),
            None => Gates::new(&self.plan),
        });
        self.gates = Some(gates.clone());
        Ok(AgentEnv {
            // The runner's own simulator is plain HTTP; any other endpoint may be TLS.
            client: crate::model::client(self.tasks.iter().any(|t| {
                t.provider
                    .base_url
                    .as_deref()
                    .is_some_and(crate::model::needs_tls)
            }))?,
            registry: self.opts.registry.clone(),
            sim_base: sim.map(|s| s.base_url()),
            run_id: self.run_id.clone(),
            ledger: ledger.clone(),
            gates,
            cancel: self.cancel.clone(),
            mcp: Arc::new(crate::tools::mcp::McpHub::for_run(&self.dir())),
            batchers: Arc::default(),
            replays: Arc::new(std::sync::Mutex::new(
                self.resumed
                    .as_ref()
                    .map(|r| r.replays.clone())
                    .unwrap_or_default(),
            )),
            containers: Arc::new(crate::agent::environment::Containers::for_run(
                &task_dir,
                crate::report::files::environments_dir(&task_dir),
            )),
            pristines: Arc::new(crate::tools::pristine::Pristines::new(
                task_dir.join(crate::report::files::PRISTINE),
                self.opts.pristine_cache.clone(),
            )),
            work_dir: task_dir,
        })
    }

    /// Feeds the tasks, one feeder per team, while watching for signals; returns when
    /// every task has ended, and the MCP servers are stopped.
    async fn feed(&mut self, reporter: &Reporter, env: AgentEnv) {
        let tx = reporter.sender();
        let logs = super::Logs {
            tx: tx.clone(),
            traces: self.traces.clone(),
        };
        let signals = self.opts.handle_signals.then(|| {
            tokio::spawn(watch_signals(
                self.drain.clone(),
                self.cancel.clone(),
                self.opts.grace,
                tx.clone(),
            ))
        });
        let tasks = std::mem::take(&mut self.tasks);
        match &self.opts.queue {
            Some(work) => {
                super::worker::feed_from_queue(
                    work,
                    &self.plan,
                    tasks,
                    self.concurrency,
                    &env,
                    &logs,
                    &self.drain,
                )
                .await
            }
            None => {
                feed_by_team(
                    &self.plan,
                    tasks,
                    self.concurrency,
                    &env,
                    &logs,
                    &self.drain,
                )
                .await
            }
        }
        if let Some(s) = signals {
            s.abort();
        }
        let mcp = env.mcp.clone();
        let batchers = env.batchers.clone();
        drop(tx);
        drop(logs);
        drop(env);
        mcp.shutdown().await;
        batchers.close().await;
    }

    /// Completes run.json, sorts the rows into plan order and writes summary.csv.
    async fn finish(mut self, reporter: Reporter) -> Result<RunOutcome, RunError> {
        let dir = self.dir();
        crate::report::remove_empty_work_folders(&dir);
        let complete = !self.drain.is_cancelled();
        // Every task has ended: the last spans go out (for a bounded time) before
        // run.json is completed with what became of them.
        let telemetry = match self.traces.take() {
            Some(t) => Some(t.finish().await),
            None => None,
        };
        let mut reporter = reporter;
        if let Some(g) = self.gates.take() {
            reporter.note_learned_limits(
                g.learned()
                    .into_iter()
                    .map(|(provider, changes)| {
                        let changes = changes
                            .into_iter()
                            .map(|(at, limits)| crate::report::LearnedLimits {
                                at: at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                                limits,
                            })
                            .collect();
                        (provider, changes)
                    })
                    .collect(),
                g.adaptive_rpm(),
            );
        }
        if let Some(t) = &telemetry {
            reporter.note_telemetry(serde_json::to_value(t).unwrap_or_default());
        }
        let mut summary = reporter
            .finish(if complete { "finished" } else { "interrupted" })
            .await?;
        // The reporter is done, so every row is with the uploader, which ends now.
        if let Some(uploads) = self.uploads.take() {
            let failed = tokio::task::spawn_blocking(move || uploads.join().unwrap_or_default())
                .await
                .unwrap_or_default();
            for f in &failed {
                eprintln!("agentbatch worker: a result did not reach the queue (the task runs again elsewhere): {f}");
            }
        }
        let plan = &self.plan;
        let order: HashMap<String, usize> = plan
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.id.clone(), i))
            .collect();
        summary
            .rows
            .sort_by_key(|r| order.get(&r.key).copied().unwrap_or(usize::MAX));
        let mut variant_order: Vec<String> = Vec::new();
        for t in &plan.tasks {
            if !variant_order.contains(&t.variant) {
                variant_order.push(t.variant.clone());
            }
        }
        summary.variants = crate::report::write_summary_csv(&dir, &plan.axes, &variant_order)?;
        let page = super::write_page(
            &dir,
            self.page_views
                .as_deref()
                .map(|views| crate::page::FromRun {
                    views,
                    variants: &summary.variants,
                }),
        );
        Ok(RunOutcome {
            summary,
            complete,
            page,
            telemetry,
        })
    }
}
