//! The project's benchmark (`agentbatch bench`): what the governance promises, measured
//! against the simulator. Rate goodput: requests per minute achieved against a server
//! that enforces a limit, and the 429s seen. Cap precision: spend against a binding
//! team cap with hundreds of tasks in flight. Both run the real runner end to end.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::job;
use crate::model::Usage;
use crate::report::ProgressMode;
use crate::run::{self, RunOptions};
use crate::sim::Sim;
use crate::tools::Registry;
use crate::vocab::price;
use crate::vocab::transcript::{self, TranscriptEvent};

mod batch;
mod cache;
mod coordination;
mod environments;
mod instructions;
mod load;
mod workspaces;
pub use batch::{batch_mode, BatchReport};
pub use cache::{cache_savings, CacheReport};
pub use coordination::{capped_against_uncapped, coordination, CoordinationReport};
pub use environments::{
    environments, EnvironmentReport, DEFAULT_IMAGE, IN_FLIGHT as ENV_IN_FLIGHT, TASKS as ENV_TASKS,
};
pub use instructions::{guard, instructions, GuardArgs, InstructionReport};
pub use load::{history_growth, run_load, Load, LoadReport};
pub use workspaces::{workspaces, WorkspaceReport};

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    /// Rate-limit goodput.
    Rate,
    /// Cap precision.
    Caps,
    /// W1: 1,000 tasks x 5 tool rounds, 50 ms latency, 100 in flight.
    Throughput,
    /// W2: 10,000 tasks x 3 tool rounds, 1 s latency, 5,000 in flight.
    Scale,
    /// W3: 50 tasks x 50, 100 and 200 turns with 2 KB tool outputs.
    History,
    /// Prompt caching: dollars per 30-turn repo-fix-shaped task per strategy and protocol, and throughput under an itpm limit.
    Cache,
    /// Batch mode: turns per hour and dollars per task of a 300-task suite, synchronous and through the batch APIs (simulated 20 s batches).
    Batch,
    /// Workspaces: 200 tasks over a generated 20,000-file, 240 MB git repository, each editing three files, per workspace method (overlay, copy).
    Workspaces,
    /// Per-task containers: start and exec overhead per bash call of 100 tasks x 5 calls in containers of --image against the host, and the engine's memory with 50 containers up (needs podman or Docker).
    Environments,
    /// A shared run's cost: database calls and waits per model request, three workers at 100 and 1,000 requests a second (needs --queue URL).
    Coordination,
    /// The runner's instructions and file operations per model turn and per task under valgrind, on three small W1-shaped runs; with --baseline FILE, fails on a rise past its margins.
    Instructions,
    /// Governance (rate, caps) and load (throughput, scale, history).
    All,
}

const RATE_TASKS: usize = 200;
const RATE_TURNS: usize = 10;
const BASE_RPM: u32 = 600;

/// How the runner knows the simulator's limit in the rate benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// The job configures it.
    Configured,
    /// The job configures nothing; the answers' headers state it.
    Learned,
    /// The job configures nothing and the answers state nothing: found from 429s.
    Adaptive,
}

impl Pacing {
    pub const ALL: [Pacing; 3] = [Pacing::Configured, Pacing::Learned, Pacing::Adaptive];

    fn says(self) -> &'static str {
        match self {
            Pacing::Configured => "runner configured at the same limit",
            Pacing::Learned => {
                "runner configured with nothing, the limit stated in the answers' headers"
            }
            Pacing::Adaptive => {
                "runner configured with nothing, the limit stated nowhere (adaptive rate)"
            }
        }
    }
}

/// Rate-limit goodput of one run.
#[derive(Debug, Clone)]
pub struct RateReport {
    pub pacing: Pacing,
    pub requests: usize,
    pub limit_rpm: u32,
    pub scale: u32,
    pub achieved_rpm: f64,
    /// The rate after the first second (which the server's burst allowance inflates).
    pub steady_rpm: f64,
    pub rate_limited: usize,
    pub seconds: f64,
    pub completed: usize,
    pub dir: PathBuf,
}

impl fmt::Display for RateReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "rate goodput: {} requests against a simulator limited to {} rpm ({} rpm x scale {}), {}",
            self.requests, self.limit_rpm, BASE_RPM, self.scale, self.pacing.says()
        )?;
        write!(
            f,
            "  achieved {:.0} rpm = {:.1}% of the limit over {:.1} s (after the first second's burst: {:.0} rpm = {:.1}%); 429s: {}; tasks completed: {}/{}; reports: {}",
            self.achieved_rpm,
            100.0 * self.achieved_rpm / f64::from(self.limit_rpm),
            self.seconds,
            self.steady_rpm,
            100.0 * self.steady_rpm / f64::from(self.limit_rpm),
            self.rate_limited,
            self.completed,
            RATE_TASKS,
            self.dir.display()
        )
    }
}

pub(crate) fn bench_dir(out: &Path, kind: &str) -> PathBuf {
    out.join(format!(
        "bench-{kind}-{}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S%.3f")
    ))
}

async fn run_job(dir: &Path, yaml: &str, sim: Arc<Sim>) -> anyhow::Result<run::RunOutcome> {
    run_job_with(dir, yaml, sim, None).await
}

/// The events of the task `key`'s transcript in the run folder `run_dir`, the lines
/// this version cannot read left out.
fn transcript_events(run_dir: &Path, key: &str) -> anyhow::Result<Vec<TranscriptEvent>> {
    let path = crate::report::files::transcript_path(run_dir, key);
    let text =
        transcript::read_file(&path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(text.lines().filter_map(TranscriptEvent::read).collect())
}

/// [`run_job`], its pristine checkouts kept in `pristine_cache`.
async fn run_job_with(
    dir: &Path,
    yaml: &str,
    sim: Arc<Sim>,
    pristine_cache: Option<PathBuf>,
) -> anyhow::Result<run::RunOutcome> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).with_context(|| format!("cannot write {}", path.display()))?;
    let plan = job::load(&path, &Registry::builtin()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut opts = RunOptions::new(dir);
    opts.run_id = Some("run".into());
    opts.progress = ProgressMode::Quiet;
    opts.sim = Some(sim);
    opts.pristine_cache = pristine_cache;
    Ok(run::run(plan, opts).await?)
}

/// 2,000 requests (200 tasks of 10 turns) against a simulator limited to 600 x `scale`
/// rpm, with the runner knowing the limit as `pacing` says.
pub async fn rate_goodput(scale: u32, pacing: Pacing, out: &Path) -> anyhow::Result<RateReport> {
    let limit = BASE_RPM * scale.max(1);
    let (runner, headers) = match pacing {
        Pacing::Configured => (format!("    rpm: {limit}\n"), ""),
        Pacing::Learned => (String::new(), ""),
        Pacing::Adaptive => (String::new(), ", headers: false"),
    };
    let mut turns = String::new();
    for _ in 0..RATE_TURNS - 1 {
        turns.push_str("        - content: [ { tool_use: { name: get_time, input: {} } } ]\n");
    }
    turns.push_str("        - content: [ { text: done } ]\n");
    let tasks: String = (0..RATE_TASKS)
        .map(|i| format!("  - {{ id: t{i:04}, prompt: go }}\n"))
        .collect();
    let yaml = format!(
        "name: bench-rate\nconcurrency: {RATE_TASKS}\nproviders:\n  sim:\n{runner}    max_rate_limit_retries: 20\n    server_limits: {{ rpm: {limit}{headers} }}\ndefaults:\n  model: claude-haiku-4-5\n  max_tokens: 256\n  tools: [get_time]\n  limits: {{ max_turns: {RATE_TURNS}, time_limit: 30m, max_repeats: off }}\n  sim:\n      turns:\n{turns}tasks:\n{tasks}"
    );
    let dir = bench_dir(out, "rate");
    let sim = Arc::new(Sim::start_local().await?);
    let outcome = run_job(&dir, &yaml, sim.clone()).await?;
    let log = sim.requests();
    let ok: Vec<u64> = log
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| r.at_ms)
        .collect();
    let rate_limited = log.iter().filter(|r| r.status == 429).count();
    let (first, last) = (
        ok.iter().min().copied().unwrap_or(0),
        ok.iter().max().copied().unwrap_or(0),
    );
    let span_ms = (last - first).max(1) as f64;
    let achieved_rpm = (ok.len().saturating_sub(1)) as f64 / span_ms * 60_000.0;
    let steady: Vec<u64> = ok.iter().copied().filter(|t| *t >= first + 1000).collect();
    let steady_span = steady
        .iter()
        .max()
        .map_or(1, |l| l.saturating_sub(first + 1000).max(1)) as f64;
    let steady_rpm = steady.len() as f64 / steady_span * 60_000.0;
    let completed = outcome
        .summary
        .rows
        .iter()
        .filter(|r| r.stop_reason.as_str() == "completed")
        .count();
    Ok(RateReport {
        pacing,
        requests: ok.len(),
        limit_rpm: limit,
        scale,
        achieved_rpm,
        steady_rpm,
        rate_limited,
        seconds: span_ms / 1000.0,
        completed,
        dir: outcome.summary.dir,
    })
}

const CAP_TASKS: usize = 500;

/// Spend against a binding team cap.
#[derive(Debug, Clone)]
pub struct CapReport {
    pub tasks: usize,
    pub cap: Decimal,
    pub spent: Decimal,
    /// The same, priced from the simulator's own usage figures.
    pub billed: Decimal,
    pub stopped_by_cap: usize,
    pub not_started: usize,
    /// The least of the "smallest request" figures tasks stopped for: what was left is
    /// below it, so no task stopped while money for it remained.
    pub smallest_request: Decimal,
    pub dir: PathBuf,
}

impl fmt::Display for CapReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let overshoot = (self.spent.max(self.billed) - self.cap).max(Decimal::ZERO);
        writeln!(
            f,
            "cap precision: {} tasks in flight at once against a team cap of ${}",
            self.tasks,
            self.cap.normalize()
        )?;
        write!(
            f,
            "  spent ${:.6} (provider billed ${:.6}) = {:.2}% of the cap; overshoot ${}; left ${:.6} (the cheapest request a task stopped for needed ${:.6}); {} task(s) stopped with team_budget, {} of them before starting; reports: {}",
            self.spent,
            self.billed,
            (self.spent / self.cap * Decimal::ONE_HUNDRED),
            overshoot.normalize(),
            (self.cap - self.spent).max(Decimal::ZERO),
            self.smallest_request,
            self.stopped_by_cap,
            self.not_started,
            self.dir.display()
        )
    }
}

/// 500 tasks, all in flight, each able to spend far more than its share of a $5 team
/// cap.
pub async fn cap_precision(out: &Path) -> anyhow::Result<CapReport> {
    let cap = Decimal::from(5);
    let tasks: String = (0..CAP_TASKS)
        .map(|i| format!("  - {{ id: t{i:04}, prompt: go }}\n"))
        .collect();
    let yaml = format!(
        "name: bench-caps\nconcurrency: {CAP_TASKS}\nteams:\n  bench: {{ max_cost_usd: {cap} }}\ndefaults:\n  team: bench\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  tools: [get_time]\n  limits: {{ max_turns: 30, min_max_tokens: 128, time_limit: 10m, max_repeats: off }}\n  sim:\n    latency: 20ms\n    repeat_last: true\n    turns:\n      - content: [ {{ text: working }}, {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n        usage: {{ output_tokens: 300 }}\ntasks:\n{tasks}"
    );
    let dir = bench_dir(out, "caps");
    let sim = Arc::new(Sim::start_local().await?);
    let outcome = run_job(&dir, &yaml, sim.clone()).await?;
    let rows = &outcome.summary.rows;
    let spent: Decimal = rows.iter().filter_map(|r| r.measured.cost_usd).sum();
    // What the provider billed, priced from its own usage figures, independently of the
    // runner's accounting.
    let price = price::lookup(&Default::default(), "claude-sonnet-4-5")
        .context("no built-in price for claude-sonnet-4-5")?;
    let billed: Decimal = sim
        .requests()
        .iter()
        .filter_map(|r| r.response.as_ref())
        .map(|m| {
            let u = &m["usage"];
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            price.cost(&Usage {
                input_tokens: n("input_tokens"),
                output_tokens: n("output_tokens"),
                cache_read_tokens: n("cache_read_input_tokens"),
                cache_write_tokens: n("cache_creation_input_tokens"),
                ..Usage::default()
            })
        })
        .sum();
    let stopped: Vec<_> = rows
        .iter()
        .filter(|r| r.stop_reason.as_str() == "team_budget")
        .collect();
    let not_started = stopped.iter().filter(|r| r.measured.turns == 0).count();
    let mut smallest_request: Option<Decimal> = None;
    for r in &stopped {
        let path = crate::report::files::transcript_path(&outcome.summary.dir, &r.key);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v["event"] == "budget_stop" {
                if let Some(s) = v["smallest_request_usd"]
                    .as_str()
                    .and_then(|s| Decimal::from_str(s).ok())
                {
                    smallest_request = Some(smallest_request.map_or(s, |m| m.min(s)));
                }
            }
        }
    }
    Ok(CapReport {
        tasks: CAP_TASKS,
        cap,
        spent,
        billed,
        stopped_by_cap: stopped.len(),
        not_started,
        smallest_request: smallest_request.unwrap_or_default(),
        dir: outcome.summary.dir.clone(),
    })
}
