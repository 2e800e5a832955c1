//! The three commands of a run shared by machines: `run --queue` puts the plan in the
//! queue, `worker` runs tasks from it, `collect` writes the usual run folder from what
//! the workers sent back (results.csv, summary.csv, run.json, transcripts, patches), so
//! that compare, resume and audit read it as any other.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::HashMap;

use chrono::{SecondsFormat, Utc};
use rust_decimal::Decimal;

use super::queue::{Progress, Queue, QueuedRun};
use super::worker::QueueWork;
use super::{folder, RunError, RunOptions, RunOutcome};
use crate::govern::store::TaskCharge;
use crate::job::Plan;
use crate::report::{files, read_results, RunJson, WorkersKilled};
use crate::vocab::price;

/// The digest that tells workers they run the job that was queued.
fn digest(bytes: &[u8]) -> String {
    format!("fnv1a64:{:016x}:{}", crate::job::fnv1a(bytes), bytes.len())
}

fn queue_err(e: super::queue::QueueError) -> RunError {
    RunError::Invalid(e.to_string())
}

/// What `run --queue` did.
#[derive(Debug)]
pub struct Enqueued {
    pub run_id: String,
    /// False when the run was already queued (nothing was added).
    pub new: bool,
    pub tasks: usize,
    pub progress: Progress,
}

/// Puts the plan's tasks (those `only` selects) in the queue at `url` as run `run_id`,
/// once. Blocking.
pub fn enqueue(
    plan: &Plan,
    job_file: &Path,
    url: &str,
    run_id: Option<&String>,
    only: &[String],
) -> Result<Enqueued, RunError> {
    let selected = folder::select_tasks(plan, only)?;
    let bytes = std::fs::read(job_file)
        .map_err(|e| RunError::Invalid(format!("cannot read {}: {e}", job_file.display())))?;
    let run_id = folder::choose_run_id(plan, run_id, Path::new("/nonexistent"))?;
    let run_json = RunJson {
        agentbatch_version: crate::VERSION.to_string(),
        agentbatch_commit: crate::COMMIT.to_string(),
        run_id: run_id.clone(),
        job_file: job_file.display().to_string(),
        job_name: plan.name.clone(),
        started_at: Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        concurrency: plan.concurrency,
        only: only.to_vec(),
        pricing_as_of: price::builtin_as_of().to_string(),
        job: serde_json::to_value(&plan.job).unwrap_or_default(),
        tasks: serde_json::value::to_raw_value(&selected).ok(),
        ..RunJson::default()
    };
    let queued = QueuedRun {
        job_file: job_file.display().to_string(),
        job_sha: digest(&bytes),
        header: crate::report::header_for(&plan.axes),
        run_json: serde_json::to_value(&run_json).unwrap_or_default(),
    };
    let queue = Queue::open(url, &run_id).map_err(queue_err)?;
    let tasks: Vec<(String, String)> = selected
        .iter()
        .map(|t| (t.id.clone(), t.variant.clone()))
        .collect();
    let n = tasks.len();
    let new = queue.create(&queued, tasks).map_err(queue_err)?;
    Ok(Enqueued {
        run_id,
        new,
        tasks: n,
        progress: queue.progress().map_err(queue_err)?,
    })
}

/// How a worker is started.
pub struct WorkerOptions {
    pub url: String,
    pub run_id: String,
    /// The job file; default: the path `run --queue` was given.
    pub job: Option<PathBuf>,
    /// Where this worker's own run folder goes: `<out>/workers/<worker>/<run-id>`.
    pub out: PathBuf,
    pub worker: Option<String>,
    pub lease: std::time::Duration,
}

/// Loads the queued job (checking it is the same file and the same agentbatch) and
/// returns its plan and the run options that make a run of it a worker. Blocking.
pub fn worker(
    w: &WorkerOptions,
    registry: &crate::tools::Registry,
) -> Result<(Plan, RunOptions), RunError> {
    let queue = Queue::open(&w.url, &w.run_id).map_err(queue_err)?;
    let queued = queue.queued_run().map_err(queue_err)?;
    let version = queued.run_json["agentbatch_version"].as_str().unwrap_or("");
    if version != crate::VERSION {
        return Err(RunError::Invalid(format!(
            "run {} was queued by agentbatch {version} and this is {}: run the same version on every worker",
            w.run_id,
            crate::VERSION
        )));
    }
    let job = w
        .job
        .clone()
        .unwrap_or_else(|| PathBuf::from(&queued.job_file));
    let bytes = std::fs::read(&job).map_err(|e| {
        RunError::Invalid(format!(
            "cannot read the job file {} ({e}): a worker needs the job file run --queue was given (and what it names, at the same relative places); pass it with --job",
            job.display()
        ))
    })?;
    if digest(&bytes) != queued.job_sha {
        return Err(RunError::Invalid(format!(
            "{} is not the job file run {} was queued with: give that file with --job",
            job.display(),
            w.run_id
        )));
    }
    let plan = crate::job::load_for_run(&job, registry, &w.out)
        .map_err(|e| RunError::Invalid(e.to_string()))?;
    let name = w.worker.clone().unwrap_or_else(QueueWork::default_name);
    // A name used before (a worker started again) gets a folder of its own.
    let mut folder = w.out.join("workers").join(&name);
    let mut n = 2;
    while folder.join(&w.run_id).exists() {
        folder = w.out.join("workers").join(format!("{name}.{n}"));
        n += 1;
    }
    let mut opts = RunOptions::new(folder);
    opts.run_id = Some(w.run_id.clone());
    opts.queue = Some(Arc::new(QueueWork::new(
        Arc::new(queue),
        w.url.clone(),
        name,
        w.lease,
    )));
    Ok((plan, opts))
}

/// Runs a worker until the queue is finished or it is interrupted.
pub async fn work(plan: Plan, opts: RunOptions) -> Result<RunOutcome, RunError> {
    super::run(plan, opts).await
}

/// What `collect` wrote.
#[derive(Debug)]
pub struct Collected {
    pub dir: PathBuf,
    /// report.html, unless it could not be written (a warning was printed).
    pub page: Option<PathBuf>,
    pub progress: Progress,
    pub rows: usize,
}

/// Writes the run folder `<out>/<run-id>` from the queue: every task that ended so far
/// (results.csv in plan order, transcripts, patches), the attempts that lost their task
/// (superseded.csv, their spend counted), what attempts that died with their worker
/// were charged (from the ledger: `ledger`, else the job's `ledger:` database, else the
/// queue's), summary.csv and run.json (status `finished` once nothing is left to run,
/// else `running`). Written again by each call; a folder that is not a collected one
/// is refused. Blocking.
pub fn collect(
    url: &str,
    run_id: &str,
    out: &Path,
    ledger: Option<&Path>,
) -> Result<Collected, RunError> {
    let queue = Queue::open(url, run_id).map_err(queue_err)?;
    let queued = queue.queued_run().map_err(queue_err)?;
    let progress = queue.progress().map_err(queue_err)?;
    let (done, apart) = queue.ended().map_err(queue_err)?;
    let dir = out.join(run_id);
    if !crate::report::collectable(&dir) {
        return Err(RunError::Invalid(format!(
            "{} exists and was not written by collect: give another --out",
            dir.display()
        )));
    }
    if let Some(found) = files::newer_format(&dir) {
        return Err(RunError::Invalid(files::newer_format_message(
            &dir.join(files::RUN_JSON),
            found,
        )));
    }
    let mut run_json: RunJson = serde_json::from_value(queued.run_json.clone()).map_err(|e| {
        RunError::Invalid(format!(
            "the queued run.json of {run_id} cannot be read: {e}"
        ))
    })?;
    if run_json.format_version > files::FORMAT_VERSION {
        return Err(RunError::Invalid(files::newer_format_message(
            Path::new(&format!("the queued run.json of {run_id}")),
            run_json.format_version,
        )));
    }
    crate::report::write_collected(&dir, &queued.header, &done, &apart)?;
    run_json.status = Some(
        if progress.finished() {
            "finished"
        } else {
            "running"
        }
        .into(),
    );
    if progress.finished() {
        run_json.finished_at = Some(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true));
    }
    let ledger = ledger_of(ledger, &run_json.job, url);
    run_json.killed_with_workers = match killed_with_workers(&ledger, run_id, &dir) {
        Ok(k) => k,
        Err(e) => {
            eprintln!(
                "agentbatch collect: warning: what attempts that died with their worker spent is not counted: {} (collect again once the ledger can be read)",
                crate::text::clip_quotes(&e)
            );
            None
        }
    };
    run_json.write(&dir.join(files::RUN_JSON))?;
    let axes = crate::report::axes_in(&queued.header);
    let order: Vec<String> = run_json
        .tasks
        .as_ref()
        .and_then(|t| serde_json::from_str::<Vec<serde_json::Value>>(t.get()).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t["variant"].as_str().map(str::to_string))
        .fold(Vec::new(), |mut v, x| {
            if !v.contains(&x) {
                v.push(x);
            }
            v
        });
    crate::report::write_summary_csv(&dir, &axes, &order)?;
    let page = super::write_page(&dir, None);
    Ok(Collected {
        dir,
        page,
        progress,
        rows: done.len(),
    })
}

/// The ledger the workers kept their reservations in: the one given, else the job's
/// `ledger:` when it is a database, else the queue's.
fn ledger_of(given: Option<&Path>, job: &serde_json::Value, queue: &str) -> PathBuf {
    given.map(Path::to_path_buf).unwrap_or_else(|| {
        PathBuf::from(
            job["ledger"]
                .as_str()
                .filter(|l| crate::vocab::values::is_postgres_url(l))
                .unwrap_or(queue),
        )
    })
}

/// What the ledger charged run `run_id` for each ended task of `dir` beyond what its
/// row and its attempts kept apart report: attempts cut off with their worker (their
/// settled requests and, at worst case, those in flight). None when nothing was.
fn killed_with_workers(
    ledger: &Path,
    run_id: &str,
    dir: &Path,
) -> Result<Option<WorkersKilled>, String> {
    let store = crate::govern::open_store(ledger).map_err(|e| e.to_string())?;
    let charges = store.run_charges(run_id).map_err(|e| e.to_string())?;
    if charges.is_empty() {
        return Ok(None);
    }
    let rows = read_results(&dir.join(files::RESULTS_CSV), &[], &[]).map_err(|e| e.to_string())?;
    let superseded = dir.join(files::SUPERSEDED_CSV);
    let apart = if superseded.exists() {
        read_results(&superseded, &[], &[])
            .map_err(|e| e.to_string())?
            .rows
    } else {
        Vec::new()
    };
    let mut reported: HashMap<&str, Decimal> = HashMap::new();
    for r in rows.rows.iter().chain(&apart) {
        *reported.entry(&r.task_id).or_default() += r.cost_usd.unwrap_or_default();
    }
    let charged = charged_per_task(&charges);
    let mut killed = WorkersKilled::default();
    for row in &rows.rows {
        let Some(&(total, open)) = charged.get(row.task_id.as_str()) else {
            continue;
        };
        let lost = total
            - reported
                .get(row.task_id.as_str())
                .copied()
                .unwrap_or_default();
        if lost <= Decimal::ZERO {
            continue;
        }
        killed.killed_spent_usd += lost;
        killed.in_flight_usd += open.min(lost);
        *killed
            .killed_spent_by_variant
            .entry(row.variant.clone())
            .or_default() += lost;
        if !row.team.is_empty() {
            *killed
                .killed_spent_by_team
                .entry(row.team.clone())
                .or_default() += lost;
        }
    }
    // What dead workers' slices of the caps kept: their requests in flight and their
    // spend not yet written, charged to no task but to its slice's team and variant.
    for ((team, variant), kept) in slices_kept(&charges) {
        killed.killed_spent_usd += kept;
        killed.in_flight_usd += kept;
        *killed
            .killed_spent_by_variant
            .entry(variant.to_string())
            .or_default() += kept;
        if !team.is_empty() {
            *killed
                .killed_spent_by_team
                .entry(team.to_string())
                .or_default() += kept;
        }
    }
    Ok((killed.killed_spent_usd > Decimal::ZERO).then_some(killed))
}

/// Per team and variant, what the slices dead workers left hold as possibly spent.
/// A slice of each cap over the same tasks holds their spend: the largest is taken,
/// as for a task's entries.
fn slices_kept(charges: &[TaskCharge]) -> HashMap<(&str, &str), Decimal> {
    let mut families: HashMap<((&str, &str), &str, bool), Decimal> = HashMap::new();
    for c in charges {
        if let Some(group) = crate::govern::store::slice_of(&c.task_id) {
            *families
                .entry((group, c.team.as_str(), c.period.starts_with("run:")))
                .or_default() += c.open;
        }
    }
    let mut out: HashMap<(&str, &str), Decimal> = HashMap::new();
    for ((group, _, _), kept) in families {
        let best = out.entry(group).or_default();
        *best = (*best).max(kept);
    }
    out.retain(|_, k| *k > Decimal::ZERO);
    out
}

/// Per task, what the ledger charged it (settled and open) and the open part. Each
/// request is one entry in every cap over its task (the run's pool, its team's, its
/// team's period cap), all of the same amount: each such family of entries holds the
/// task's whole charge, so the largest is taken (a period cap's family spans the days
/// its requests fell in).
fn charged_per_task(charges: &[TaskCharge]) -> HashMap<&str, (Decimal, Decimal)> {
    let mut families: HashMap<(&str, &str, bool), (Decimal, Decimal)> = HashMap::new();
    for c in charges {
        let family = (
            c.task_id.as_str(),
            c.team.as_str(),
            c.period.starts_with("run:"),
        );
        let f = families.entry(family).or_default();
        f.0 += c.settled + c.open;
        f.1 += c.open;
    }
    let mut out: HashMap<&str, (Decimal, Decimal)> = HashMap::new();
    for ((task, _, _), charged) in families {
        let best = out.entry(task).or_default();
        if charged.0 > best.0 {
            *best = charged;
        }
    }
    out
}
