//! The scheduler: runs a plan's tasks with at most `concurrency` in flight, starts the
//! simulator when tasks need it, and handles interruption (the first Ctrl-C or SIGTERM
//! drains: no new task starts, running ones get the grace period; the second signal, or
//! the end of the grace period, cancels them, and they end as `cancelled`). Every task
//! of the plan gets a row, started or not; a task whose code panicked gets
//! `internal_error`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use globset::{Glob, GlobSetBuilder};
use serde_json::json;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::agent::{run_task, smallest_first_request, AgentEnv};
use crate::govern::ledger::Ledger;
use crate::govern::rate::Gates;
use crate::govern::store::{CapStore, SqliteStore, StoreError};
use crate::job::{Plan, ProviderKind, TaskSpec};
use crate::model::Usage;
use crate::report::{ProgressMode, ReportError, Reporter, ReporterConfig, Summary};
use crate::sim::Sim;
use crate::tools::Registry;
use crate::vocab::log::{Event, TaskLog, TaskResult};
use crate::vocab::price;
use crate::vocab::stop::StopReason;

mod resume;
pub use resume::{job_differences, ResumeOptions};

/// How long running tasks may go on after the first Ctrl-C / SIGTERM by default.
pub const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// How to run a plan.
pub struct RunOptions {
    /// Reports go to `<out_dir>/<run_id>/`.
    pub out_dir: PathBuf,
    /// Defaults to `<job name>-<UTC timestamp>`.
    pub run_id: Option<String>,
    /// Overrides the job's concurrency.
    pub concurrency: Option<usize>,
    /// Only tasks whose id matches one of these globs.
    pub only: Vec<String>,
    pub progress: ProgressMode,
    pub registry: Arc<Registry>,
    /// A simulator to use instead of starting one (tests inspect its request log).
    pub sim: Option<Arc<Sim>>,
    /// Install Ctrl-C / SIGTERM handlers (the CLI does; embedders may not want to).
    pub handle_signals: bool,
    /// The persistent ledger of team period caps (default: the job's `ledger:`, else
    /// `<out_dir>/ledger.sqlite`).
    pub ledger: Option<PathBuf>,
    /// Continue this earlier run instead of starting a new one.
    pub resume: Option<ResumeOptions>,
    /// After the first interrupt, how long running tasks may go on before they are
    /// cancelled.
    pub grace: std::time::Duration,
}

impl RunOptions {
    pub fn new(out_dir: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            out_dir: out_dir.into(),
            run_id: None,
            concurrency: None,
            only: Vec::new(),
            progress: ProgressMode::Auto,
            registry: Arc::new(Registry::builtin()),
            sim: None,
            handle_signals: false,
            ledger: None,
            resume: None,
            grace: DEFAULT_GRACE,
        }
    }
}

/// Why a run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad arguments: nothing ran.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("cannot start the simulator: {0}")]
    Sim(std::io::Error),
    #[error("cannot build the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
    #[error("cannot open {0}")]
    Ledger(StoreError),
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    pub summary: Summary,
    /// False when the run was interrupted (some tasks cancelled or never started).
    pub complete: bool,
}

fn select_tasks(plan: &Plan, only: &[String]) -> Result<Vec<TaskSpec>, RunError> {
    if only.is_empty() {
        return Ok(plan.tasks.clone());
    }
    let mut b = GlobSetBuilder::new();
    for g in only {
        b.add(Glob::new(g).map_err(|e| RunError::Invalid(format!("--only {g}: {e}")))?);
    }
    let set = b
        .build()
        .map_err(|e| RunError::Invalid(format!("--only: {e}")))?;
    let picked: Vec<TaskSpec> = plan
        .tasks
        .iter()
        .filter(|t| set.is_match(&t.id) || set.is_match(&t.task))
        .cloned()
        .collect();
    if picked.is_empty() {
        return Err(RunError::Invalid(format!(
            "--only {} matches none of the job's {} task ids",
            only.join(" "),
            plan.tasks.len()
        )));
    }
    Ok(picked)
}

/// The longest run id: it names a folder, next to the timestamp of a default id.
const MAX_RUN_ID: usize = 128;

fn default_run_id(plan: &Plan) -> String {
    let name: String = plan
        .name
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{}-{}", name, Utc::now().format("%Y%m%d-%H%M%S"))
}

/// Holds `<run dir>/.lock` for as long as it lives: two processes in one run folder
/// would replace each other's results and run tasks twice.
pub struct RunLock {
    #[cfg(unix)]
    _lock: nix::fcntl::Flock<std::fs::File>,
}

/// Takes the run folder's lock, creating the folder if needed; refuses if another
/// process holds it.
fn lock_run_dir(dir: &std::path::Path) -> Result<RunLock, RunError> {
    let unwritable = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| RunError::Report(ReportError::Io { path, source })
    };
    std::fs::create_dir_all(dir).map_err(unwritable(dir))?;
    let path = dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(unwritable(&path))?;
    #[cfg(unix)]
    {
        use nix::fcntl::{Flock, FlockArg};
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(RunLock { _lock: lock }),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(RunError::Invalid(format!(
                "{} is in use by another agentbatch process: wait for it to end (or stop it) before resuming",
                dir.display()
            ))),
            Err((_, e)) => Err(RunError::Invalid(format!("cannot lock {}: {e}", path.display()))),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(RunLock {})
    }
}

fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_RUN_ID
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Runs the plan and writes its reports.
pub async fn run(plan: Plan, opts: RunOptions) -> Result<RunOutcome, RunError> {
    let selected = select_tasks(&plan, &opts.only)?;
    let concurrency = opts.concurrency.unwrap_or(plan.concurrency);
    if concurrency == 0 {
        return Err(RunError::Invalid("--concurrency must be at least 1".into()));
    }
    if concurrency as u64 > crate::vocab::bounds::CONCURRENCY {
        return Err(RunError::Invalid(format!(
            "--concurrency {concurrency} is too large: at most {}",
            crate::vocab::bounds::CONCURRENCY
        )));
    }
    match &opts.resume {
        Some(r) => {
            if opts.run_id.is_some() {
                return Err(RunError::Invalid(
                    "--run-id cannot be combined with --resume: the run keeps its id".into(),
                ));
            }
            if !r.dir.join("run.json").is_file() {
                return Err(RunError::Invalid(format!(
                    "--resume {}: not a run folder (it has no run.json); give the folder of a run: <out>/<run-id>",
                    r.dir.display()
                )));
            }
            let _lock = lock_run_dir(&r.dir)?;
            let all = selected.clone();
            let resumed = resume::prepare(r, &plan, selected, &resume::header_for(&plan))?;
            run_in(plan, opts, all, Some(resumed)).await
        }
        None => run_in(plan, opts, selected, None).await,
    }
}

async fn run_in(
    plan: Plan,
    opts: RunOptions,
    selected: Vec<TaskSpec>,
    mut resumed: Option<resume::Resumed>,
) -> Result<RunOutcome, RunError> {
    let concurrency = opts.concurrency.unwrap_or(plan.concurrency);
    let tasks_json = serde_json::value::to_raw_value(&selected)
        .map_err(|e| RunError::Invalid(format!("cannot encode the plan: {e}")))?;
    let (tasks, out_dir) = match &mut resumed {
        Some(r) => (std::mem::take(&mut r.tasks), r.out_dir()),
        None => (selected, opts.out_dir.clone()),
    };
    let run_id = match (&resumed, &opts.run_id) {
        (Some(r), _) => r.run_id.clone(),
        (None, id) => match id {
            Some(id) if !valid_run_id(id) => {
                return Err(RunError::Invalid(format!(
                    "--run-id \"{id}\": use at most {MAX_RUN_ID} letters, digits, '.', '_' and '-' (it names a folder)"
                )))
            }
            Some(id) => id.clone(),
            None => {
                let base = default_run_id(&plan);
                let mut id = base.clone();
                let mut n = 2;
                while out_dir.join(&id).exists() {
                    id = format!("{base}-{n}");
                    n += 1;
                }
                id
            }
        },
    };

    if resumed.is_none() && out_dir.join(&run_id).exists() {
        return Err(RunError::Invalid(format!(
            "{} already exists: choose another --run-id or --out, or continue it with --resume",
            out_dir.join(&run_id).display()
        )));
    }
    // Opened before the run folder is made: a ledger that cannot be opened leaves
    // nothing behind.
    let store: Option<Arc<dyn CapStore>> = if plan.teams.values().any(|t| t.cap.is_some()) {
        let path = opts
            .ledger
            .clone()
            .or_else(|| plan.ledger_path.clone())
            .unwrap_or_else(|| out_dir.join("ledger.sqlite"));
        Some(Arc::new(
            SqliteStore::open(&path).map_err(RunError::Ledger)?,
        ))
    } else {
        None
    };
    // A resumed run's folder is locked by the caller, before it is changed.
    let _lock = match resumed {
        None => Some(lock_run_dir(&out_dir.join(&run_id))?),
        Some(_) => None,
    };
    // The lock proves the earlier process of this run is dead: its open period-cap
    // reservations can never settle. They stay spent, and nobody waits for them.
    let abandoned = match (&resumed, &store) {
        (Some(_), Some(store)) => store
            .abandon_run(&run_id, Utc::now())
            .map_err(RunError::Ledger)?,
        _ => rust_decimal::Decimal::ZERO,
    };

    if tasks.iter().any(|t| t.repo.is_some()) {
        crate::tools::sandbox::protect_runner();
    }

    let needs_sim = tasks
        .iter()
        .any(|t| t.provider.kind == ProviderKind::Sim && t.provider.base_url.is_none());
    let sim = match (&opts.sim, needs_sim) {
        (Some(s), _) => Some(s.clone()),
        (None, true) => Some(Arc::new(Sim::start_local().await.map_err(RunError::Sim)?)),
        (None, false) => None,
    };
    if let Some(sim) = &sim {
        for t in &tasks {
            if let (ProviderKind::Sim, Some(script)) = (t.provider.kind, &t.sim) {
                sim.register(&t.id, script.clone());
            }
        }
        let server_limits = tasks
            .iter()
            .find(|t| t.provider.kind == ProviderKind::Sim)
            .and_then(|t| t.provider.server_limits.as_ref());
        if server_limits.is_some() {
            sim.set_limits(server_limits);
        }
    }

    let ledger = Arc::new(Ledger::new(&plan, &run_id, store));
    if let Some(r) = &resumed {
        ledger.carry_over(r.spent_run, &r.spent_teams);
    }
    let gates = Arc::new(Gates::new(&plan));

    let cancel = CancellationToken::new();
    let drain = cancel.child_token();
    let started_at = Utc::now();
    let now = started_at.to_rfc3339_opts(SecondsFormat::Millis, true);
    let run_json = match &resumed {
        None => json!({
            "agentbatch_version": crate::VERSION,
            "run_id": run_id,
            "job_file": plan.file.display().to_string(),
            "job_name": plan.name,
            "started_at": now,
            "concurrency": concurrency,
            "only": opts.only,
            "pricing_as_of": price::builtin_as_of(),
            "job": plan.job,
        }),
        Some(r) => {
            let mut v = r.run_json.clone();
            let mut resumes = v["resumes"].as_array().cloned().unwrap_or_default();
            resumes.push(json!({
                "at": now,
                "agentbatch_version": crate::VERSION,
                "kept_rows": r.kept(),
                "superseded_rows": r.superseded,
                "tasks_to_run": tasks.len(),
                "spent_before_usd": r.spent_run.normalize().to_string(),
                "killed_spent_usd": r.killed_spent.normalize().to_string(),
                "abandoned_reservations_usd": abandoned.normalize().to_string(),
                "killed_spent_by_team": r.killed_teams.iter()
                    .map(|(k, v)| (k.clone(), json!(v.normalize().to_string())))
                    .collect::<serde_json::Map<String, serde_json::Value>>(),
                "killed_spent_by_variant": r.killed_variants.iter()
                    .map(|(k, v)| (k.clone(), json!(v.normalize().to_string())))
                    .collect::<serde_json::Map<String, serde_json::Value>>(),
                "retry_errors": opts.resume.as_ref().is_some_and(|o| o.retry_errors),
            }));
            v["resumes"] = json!(resumes);
            v["job"] = json!(plan.job);
            if let Some(m) = v.as_object_mut() {
                m.remove("tasks");
            }
            v["totals_scope"] = json!("the last attempt only; summary.csv covers the whole run");
            v
        }
    };
    // Absolute: workspaces, temp folders and git run in other folders than this one.
    let task_dir = out_dir.join(&run_id);
    let task_dir = std::path::absolute(&task_dir).map_err(|source| {
        RunError::Report(ReportError::Io {
            path: task_dir.clone(),
            source,
        })
    })?;
    let already_done = resumed.as_ref().map_or(0, |r| r.kept());
    if let Some(r) = &resumed {
        let mut head = run_json.clone();
        head["status"] = json!("running");
        r.apply(&tasks, &head, &tasks_json)?;
    }
    let reporter = Reporter::start(ReporterConfig {
        run_id: run_id.clone(),
        dir: out_dir.join(&run_id),
        run_json,
        total_tasks: tasks.len() + already_done,
        progress: opts.progress,
        on_fatal: cancel.clone(),
        axes: plan.axes.clone(),
        tasks_json,
        resume: resumed.is_some(),
        already_done,
    })?;
    let tx = reporter.sender();
    let env = AgentEnv {
        client: crate::model::client()?,
        registry: opts.registry.clone(),
        sim_base: sim.as_ref().map(|s| s.base_url()),
        run_id: run_id.clone(),
        work_dir: task_dir,
        ledger: ledger.clone(),
        gates,
        cancel: cancel.clone(),
        mcp: Arc::new(crate::tools::mcp::McpHub::default()),
    };
    let mcp = env.mcp.clone();
    let signals = opts.handle_signals.then(|| {
        tokio::spawn(watch_signals(
            drain.clone(),
            cancel.clone(),
            opts.grace,
            tx.clone(),
        ))
    });

    // One feeder per team starts that team's tasks in plan order, so a team at its
    // own concurrency limit never holds up the others; they share the run's slots.
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
            tx: tx.clone(),
            drain: drain.clone(),
            global: global.clone(),
            team_slot: slot,
        };
        feeders.spawn(feeder.feed(group));
    }
    while feeders.join_next().await.is_some() {}
    if let Some(s) = signals {
        s.abort();
    }
    drop(tx);
    drop(env);
    mcp.shutdown().await;
    // Private temp folders are removed task by task; drop the empty parents.
    let work_dir = out_dir.join(&run_id);
    let _ = std::fs::remove_dir(work_dir.join("tmp"));
    let _ = std::fs::remove_dir(work_dir.join("git"));
    let _ = std::fs::remove_dir(work_dir.join("workspaces"));
    let complete = !drain.is_cancelled();
    let mut summary = reporter
        .finish(if complete { "finished" } else { "interrupted" })
        .await?;
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
    summary.variants = crate::report::write_summary_csv(&work_dir, &plan.axes, &variant_order)
        .map_err(|e| ReportError::Io {
            path: work_dir.join("summary.csv"),
            source: std::io::Error::other(e),
        })?;
    Ok(RunOutcome { summary, complete })
}

/// Starts one team's tasks in order as slots free up.
struct Feeder {
    env: AgentEnv,
    tx: UnboundedSender<Event>,
    drain: CancellationToken,
    global: Arc<Semaphore>,
    team_slot: Option<Arc<Semaphore>>,
}

type Slots = (Option<OwnedSemaphorePermit>, OwnedSemaphorePermit);

impl Feeder {
    fn send(&self, row: TaskResult) {
        let _ = self.tx.send(Event::TaskFinished(Box::new(row)));
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
                    self.send(skipped(
                        &spec,
                        StopReason::Cancelled,
                        "not started: the run was interrupted".into(),
                    ));
                }
                break;
            };
            // A task whose smallest first request cannot be paid for is not started.
            let smallest = self
                .env
                .ledger
                .governs(spec.team.as_deref())
                .then(|| smallest_first_request(&spec, &self.env.registry))
                .flatten();
            if let Some(smallest) = smallest {
                if let Some(stop) = self
                    .env
                    .ledger
                    .can_start(spec.team.as_deref(), smallest)
                    .await
                {
                    self.send(skipped(&spec, stop.reason, stop.detail));
                    continue;
                }
            }
            let (env, log) = (self.env.clone(), TaskLog::new(&spec.id, self.tx.clone()));
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

/// The row of a task whose code panicked (a bug), with the panic's message. What it
/// spent is in its transcript; its shared reservations were charged in full.
fn crashed(spec: &TaskSpec, e: tokio::task::JoinError) -> TaskResult {
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
    let mut row = unrun(
        spec,
        &format!(
            "internal error (a bug in agentbatch, please report it): the task {why}; its cost is what its transcript records"
        ),
    );
    row.stop_reason = StopReason::InternalError;
    row.outcome = StopReason::InternalError.unchecked_outcome();
    // The reporter fills in what the transcript says it spent.
    row.cost_usd = spec.price.as_ref().map(|_| Default::default());
    row
}

/// The row of a task that was never started: nothing spent.
fn skipped(spec: &TaskSpec, reason: StopReason, detail: String) -> TaskResult {
    let mut row = unrun(spec, &detail);
    row.stop_reason = reason;
    row.outcome = reason.unchecked_outcome();
    row.cost_usd = spec.price.as_ref().map(|_| Default::default());
    row
}

/// The row of a task that did not run to its own end (its cost unknown unless set).
fn unrun(spec: &TaskSpec, detail: &str) -> TaskResult {
    let now = Utc::now();
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
        outcome: StopReason::Cancelled.unchecked_outcome(),
        stop_reason: StopReason::Cancelled,
        stop_detail: detail.to_string(),
        turns: 0,
        tool_calls: 0,
        tool_errors: 0,
        usage: Usage::default(),
        usage_estimated_turns: 0,
        cost_usd: None,
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
        started_at: now,
        finished_at: now,
    }
}

/// The first Ctrl-C or SIGTERM drains (no new task starts) and gives running tasks
/// `grace` to finish; the second signal, or the end of the grace period, cancels them.
async fn watch_signals(
    drain: CancellationToken,
    cancel: CancellationToken,
    grace: std::time::Duration,
    tx: UnboundedSender<Event>,
) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        #[cfg(unix)]
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let terminated = std::future::pending::<()>();
        let grace_over = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        let what = tokio::select! {
            r = tokio::signal::ctrl_c() => {
                if r.is_err() {
                    return;
                }
                "interrupted"
            }
            _ = terminated => "terminated",
            _ = grace_over => {
                let _ = tx.send(Event::Stopping(format!(
                    "grace period of {} over: cancelling running tasks",
                    humantime::format_duration(grace)
                )));
                cancel.cancel();
                return;
            }
        };
        if drain.is_cancelled() {
            let _ = tx.send(Event::Stopping(format!(
                "{what} again: cancelling running tasks"
            )));
            cancel.cancel();
            return;
        }
        let until = chrono::Local::now() + grace;
        let _ = tx.send(Event::Stopping(format!(
            "{what}: starting no new tasks; running ones have until {} ({} grace), then are cancelled (Ctrl-C again to cancel now)",
            until.format("%H:%M:%S"),
            humantime::format_duration(grace)
        )));
        drain.cancel();
        deadline = Some(tokio::time::Instant::now() + grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_of(model: &str) -> TaskSpec {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.yaml");
        std::fs::write(
            &path,
            format!("name: x\ntasks:\n  - {{ id: a, prompt: p, model: {model}, sim: {{ turns: [ {{ content: [ {{ text: hi }} ] }} ] }} }}\n"),
        )
        .unwrap();
        crate::job::load(&path, &Registry::builtin()).unwrap().tasks[0].clone()
    }

    fn spec() -> TaskSpec {
        spec_of("m")
    }

    /// The row of a task that panicked costs what its transcript recorded: its settled
    /// requests and the reservation it held (which the ledger charged in full).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicked_tasks_row_costs_what_its_transcript_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec_of("claude-sonnet-4-5");
        let reporter = Reporter::start(ReporterConfig {
            run_id: "r".into(),
            dir: dir.path().join("r"),
            run_json: json!({}),
            tasks_json: serde_json::value::to_raw_value(&[&spec]).unwrap(),
            total_tasks: 1,
            progress: ProgressMode::Quiet,
            on_fatal: CancellationToken::new(),
            axes: Vec::new(),
            resume: false,
            already_done: 0,
        })
        .unwrap();
        let log = TaskLog::new(&spec.id, reporter.sender());
        log.started();
        log.emit(crate::vocab::transcript::TranscriptEvent::Reserve {
            turn: 1,
            attempt: 1,
            max_tokens: 1024,
            prompt_tokens_upper_bound: 10,
            reserved_usd: Some(rust_decimal::Decimal::new(5, 2).into()),
            spent_usd: rust_decimal::Decimal::ZERO.into(),
        });
        log.emit(crate::vocab::transcript::TranscriptEvent::Settle {
            turn: 1,
            usage: Default::default(),
            usage_estimated: false,
            cost_usd: Some(rust_decimal::Decimal::new(1, 2).into()),
            released_usd: Some(rust_decimal::Decimal::new(4, 2).into()),
            spent_usd: rust_decimal::Decimal::new(1, 2).into(),
        });
        log.emit(crate::vocab::transcript::TranscriptEvent::Reserve {
            turn: 2,
            attempt: 1,
            max_tokens: 1024,
            prompt_tokens_upper_bound: 10,
            reserved_usd: Some(rust_decimal::Decimal::new(4, 2).into()),
            spent_usd: rust_decimal::Decimal::new(1, 2).into(),
        });
        let e = tokio::spawn(async { panic!("boom") }).await.unwrap_err();
        let _ = reporter
            .sender()
            .send(Event::TaskFinished(Box::new(crashed(&spec, e))));
        drop(log);
        let summary = reporter.finish("finished").await.unwrap();
        assert_eq!(summary.rows[0].stop_reason, StopReason::InternalError);
        let csv = std::fs::read_to_string(dir.path().join("r/results.csv")).unwrap();
        assert!(csv.contains(",0.05,"), "0.01 settled + 0.04 held: {csv}");
        // Without a price there is no cost to tell.
        let unpriced = spec_of("m");
        let e = tokio::spawn(async { panic!("x") }).await.unwrap_err();
        assert_eq!(crashed(&unpriced, e).cost_usd, None);
    }

    #[tokio::test]
    async fn a_task_that_panics_is_an_internal_error_with_its_message_not_a_cancel() {
        let spec = spec();
        let e = tokio::spawn(async { panic!("index out of bounds: the len is 3") })
            .await
            .unwrap_err();
        let row = crashed(&spec, e);
        assert_eq!(row.stop_reason, StopReason::InternalError);
        assert_eq!(row.outcome, crate::vocab::stop::Outcome::Error);
        assert!(
            row.stop_detail
                .contains("panicked: index out of bounds: the len is 3"),
            "{}",
            row.stop_detail
        );
        let owned = tokio::spawn(async { std::panic::panic_any(format!("owned {}", 7)) })
            .await
            .unwrap_err();
        assert!(crashed(&spec, owned)
            .stop_detail
            .contains("panicked: owned 7"));
        assert!(StopReason::InternalError.is_infra(), "resume runs it again");
        assert!(StopReason::LedgerError.is_infra(), "and ledger errors too");
        assert_eq!(
            StopReason::parse("internal_error"),
            Some(StopReason::InternalError)
        );
    }
}
