//! `agentbatch bench coordination --queue URL`: what sharing a run through PostgreSQL
//! costs per model request. Three workers (in this process, each with its own
//! connections, as separate machines would have) run one queued run against the
//! in-process simulator, paced through the shared rate buckets at 100 and then 1,000
//! requests a second, every request reserved and settled in the team's ledger: the
//! database calls made per model request, the time the callers waited for them, and
//! the rate reached.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use super::bench_dir;
use crate::govern::pg::counters;
use crate::run::shared::{self, WorkerOptions};
use crate::sim::Sim;
use crate::tools::Registry;

/// One rate's figures.
#[derive(Debug, Clone)]
pub struct CoordinationReport {
    pub target_rps: u32,
    /// Every request reserved and settled in a team's period cap.
    pub capped: bool,
    pub workers: usize,
    pub requests: usize,
    pub wall_s: f64,
    pub db_calls: u64,
    pub db_wait_ms: f64,
}

impl CoordinationReport {
    fn achieved(&self) -> f64 {
        self.requests as f64 / self.wall_s.max(1e-9)
    }
}

impl fmt::Display for CoordinationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let per = |x: f64| x / self.requests.max(1) as f64;
        write!(
            f,
            "coordination at {} requests/s ({} workers, {}): {} model requests in {:.1} s = {:.0}/s; {} database calls = {:.2} per request; waited {:.3} ms per request for the database (summed over the workers' calls)",
            self.target_rps,
            self.workers,
            if self.capped {
                "a shared team cap and rate limit"
            } else {
                "a shared rate limit, no cap"
            },
            self.requests,
            self.wall_s,
            self.achieved(),
            self.db_calls,
            per(self.db_calls as f64),
            per(self.db_wait_ms),
        )
    }
}

/// What a capped shared run reached against an uncapped one at the same target rate
/// (issue 32 asks for at least 90%), when both ran.
pub fn capped_against_uncapped(reports: &[CoordinationReport]) -> Option<String> {
    let capped = reports.iter().rev().find(|r| r.capped)?;
    let open = reports
        .iter()
        .find(|r| !r.capped && r.target_rps == capped.target_rps)?;
    Some(format!(
        "at {} requests/s, the capped run reached {:.0}/s and the uncapped {:.0}/s: {:.0}% (cap slices; at least 90% is the goal)",
        capped.target_rps,
        capped.achieved(),
        open.achieved(),
        100.0 * capped.achieved() / open.achieved().max(1e-9)
    ))
}

/// Runs the benchmark at each rate against the database at `url`.
pub async fn coordination(out: &Path, url: &str) -> anyhow::Result<Vec<CoordinationReport>> {
    let mut reports = Vec::new();
    // (requests a second, tasks, turns each, a team cap): about ten seconds of load
    // each; the team cap's ledger is measured apart, since every request locks it.
    for (rps, tasks, turns, capped) in [
        (100u32, 50usize, 20usize, true),
        (1000, 200, 50, true),
        (1000, 200, 50, false),
    ] {
        reports.push(one(out, url, rps, tasks, turns, capped).await?);
    }
    Ok(reports)
}

async fn one(
    out: &Path,
    url: &str,
    rps: u32,
    tasks: usize,
    turns: usize,
    capped: bool,
) -> anyhow::Result<CoordinationReport> {
    let dir = bench_dir(
        out,
        &format!("coordination-{rps}{}", if capped { "-capped" } else { "" }),
    );
    std::fs::create_dir_all(&dir)?;
    let mut script = String::new();
    for _ in 0..turns - 1 {
        script.push_str("        - content: [ { tool_use: { name: get_time, input: {} } } ]\n");
    }
    script.push_str("        - content: [ { text: done } ]\n");
    let list: String = (0..tasks)
        .map(|i| format!("  - {{ id: t{i:04}, prompt: go }}\n"))
        .collect();
    let rpm = rps * 60;
    // The sim's run id is the bench folder's: a unique run each time.
    let run_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().replace(['.', ':'], "-"))
        .unwrap_or_else(|| format!("coordination-{rps}"));
    let team = if capped {
        "teams:\n  bench: { cap: { usd: 100000, period: day } }\ndefaults:\n  team: bench\n"
    } else {
        "defaults:\n"
    };
    let yaml = format!(
        "name: bench-coordination\nconcurrency: 100\nproviders:\n  sim: {{ rpm: {rpm}, burst: 100ms }}\n{team}  model: claude-haiku-4-5\n  max_tokens: 256\n  tools: [get_time]\n  limits: {{ max_turns: {turns}, time_limit: 30m, max_repeats: off }}\n  sim:\n      turns:\n{script}tasks:\n{list}"
    );
    let job = dir.join("job.yaml");
    std::fs::write(&job, &yaml)?;
    let registry = Registry::builtin();
    let plan = crate::job::load(&job, &registry).map_err(|e| anyhow::anyhow!("{e}"))?;
    let queued = {
        let (plan, job, url, run_id) = (plan.clone(), job.clone(), url.to_string(), run_id.clone());
        tokio::task::spawn_blocking(move || shared::enqueue(&plan, &job, &url, Some(&run_id), &[]))
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?
    };
    anyhow::ensure!(queued.new, "run {run_id} was queued already");
    let sim = Arc::new(Sim::start_local().await?);
    let (calls_before, waited_before) = counters();
    let started = Instant::now();
    let mut workers = Vec::new();
    for name in ["w1", "w2", "w3"] {
        // Its own connections, as a worker on another machine has (the process would
        // otherwise share one set per database).
        let sep = if url.contains('?') { '&' } else { '?' };
        let w = WorkerOptions {
            url: format!("{url}{sep}application_name=agentbatch-bench-{name}"),
            run_id: run_id.clone(),
            job: Some(job.clone()),
            out: dir.clone(),
            worker: Some(name.into()),
            lease: std::time::Duration::from_secs(60),
        };
        let (plan, mut opts) =
            tokio::task::spawn_blocking(move || shared::worker(&w, &Registry::builtin()))
                .await?
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        opts.sim = Some(sim.clone());
        opts.progress = crate::report::ProgressMode::Quiet;
        workers.push(tokio::spawn(shared::work(plan, opts)));
    }
    for w in workers {
        w.await?.map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let wall = started.elapsed();
    let (calls, waited) = counters();
    let requests = sim.requests().len();
    let expected = tasks * turns;
    anyhow::ensure!(
        requests == expected,
        "{requests} model requests, {expected} expected"
    );
    let rows = std::fs::read_dir(dir.join("workers"))
        .context("the workers wrote no folder")?
        .count();
    anyhow::ensure!(rows == 3, "{rows} workers wrote a folder, 3 expected");
    Ok(CoordinationReport {
        target_rps: rps,
        capped,
        workers: 3,
        requests,
        wall_s: wall.as_secs_f64(),
        db_calls: calls - calls_before,
        db_wait_ms: (waited - waited_before) as f64 / 1e6,
    })
}
