//! `agentbatch bench cache`: what prompt caching saves on repo-fix-shaped tasks. Each
//! task has a 3 KB system prompt, the coding tool set and 30 turns whose tool results
//! are 2 KB each; the same tasks run with caching off, with one breakpoint on the newest
//! message only (Anthropic; what mini-swe-agent and SWE-agent do) and with the runner's
//! strategy, per protocol, on the simulator, which caches like the APIs. Dollars are
//! priced from the usage the simulator reported. A second part runs a few of the tasks
//! under an input-tokens-per-minute limit that runner and simulator share, and reports
//! the prompt tokens processed per minute with caching off and on.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use rust_decimal::Decimal;

use super::{bench_dir, run_job};
use crate::sim::Sim;
use crate::vocab::usage::Usage;

const TASKS: usize = 10;
const TURNS: usize = 30;
/// The throughput part: tasks and the limit (input tokens per minute).
const PACED_TASKS: usize = 4;
const PACED_ITPM: u32 = 2_000_000;

/// One protocol and caching strategy.
#[derive(Debug, Clone)]
pub struct CacheRow {
    pub protocol: &'static str,
    pub model: &'static str,
    /// `off`, `last_message` or `auto`.
    pub mode: &'static str,
    /// Dollars per task: all of it, and its prompt part alone.
    pub usd: Decimal,
    pub input_usd: Decimal,
    /// The prompt part with no caching at all (every prompt token at the input rate):
    /// OpenAI caches by itself, so its `off` is not this.
    pub uncached_input_usd: Decimal,
    /// Share of prompt tokens read from the cache.
    pub read_share: f64,
    pub completed: usize,
}

/// One protocol's run under the shared input-tokens-per-minute limit.
#[derive(Debug, Clone)]
pub struct PacedRow {
    pub protocol: &'static str,
    pub mode: &'static str,
    pub seconds: f64,
    /// Every prompt token processed (cached or not), per minute of the run.
    pub prompt_tokens_per_minute: f64,
    pub refused: usize,
    pub completed: usize,
}

/// What `agentbatch bench cache` measured.
#[derive(Debug, Clone)]
pub struct CacheReport {
    pub rows: Vec<CacheRow>,
    pub paced: Vec<PacedRow>,
    pub dir: PathBuf,
}

impl fmt::Display for CacheReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "prompt caching: {TASKS} tasks x {TURNS} turns per protocol (3 KB system prompt, coding tools, 2 KB tool results), on the simulator"
        )?;
        for r in &self.rows {
            let below = if r.input_usd.is_zero() {
                "-".to_string()
            } else {
                format!("{:.1}x", r.uncached_input_usd / r.input_usd)
            };
            writeln!(
                f,
                "  {} ({}) cache {}: ${:.4} per task, prompt part ${:.4} ({below} below ${:.4} uncached), {:.0}% of prompt tokens read from cache, {}/{TASKS} completed",
                r.protocol,
                r.model,
                r.mode,
                r.usd,
                r.input_usd,
                r.uncached_input_usd,
                100.0 * r.read_share,
                r.completed,
            )?;
        }
        writeln!(
            f,
            "under itpm {PACED_ITPM} (runner and simulator), {PACED_TASKS} tasks x {TURNS} turns:"
        )?;
        for r in &self.paced {
            writeln!(
                f,
                "  {} cache {}: {:.1} s, {:.0} prompt tokens per minute, {} refused (429), {}/{PACED_TASKS} completed",
                r.protocol, r.mode, r.seconds, r.prompt_tokens_per_minute, r.refused, r.completed
            )?;
        }
        write!(f, "  reports: {}", self.dir.display())
    }
}

fn job(
    protocol: &str,
    model: &str,
    cache: &str,
    repo: &Path,
    tasks: usize,
    itpm: Option<u32>,
) -> String {
    let system = "You fix failing tests in a Python project. Read the code before you edit it, keep changes small, and run the tests after each edit. ".repeat(24);
    let mut turns = String::new();
    for _ in 0..TURNS - 1 {
        turns.push_str("        - content: [ { tool_use: { name: read_file, input: { path: module.py } } } ]\n");
    }
    turns.push_str("        - content: [ { text: done } ]\n");
    let limits = itpm.map_or(String::new(), |n| {
        format!(", itpm: {n}, max_rate_limit_retries: 50, server_limits: {{ itpm: {n} }}")
    });
    let ids: String = (0..tasks)
        .map(|i| format!("  - {{ id: t{i:02}, prompt: \"fix the failing test number {i}\" }}\n"))
        .collect();
    format!(
        "name: bench-cache\nconcurrency: {tasks}\nproviders:\n  bench: {{ protocol: {protocol}, simulator: true{limits} }}\ndefaults:\n  provider: bench\n  model: {model}\n  max_tokens: 512\n  toolset: coding\n  repo: {repo}\n  keep_workspaces: never\n  cache: {{ mode: {cache} }}\n  system: \"{system}\"\n  limits: {{ max_turns: {TURNS}, time_limit: 10m, max_repeats: off }}\n  sim:\n    turns:\n{turns}tasks:\n{ids}",
        repo = repo.display(),
    )
}

/// The prompt part of a usage's cost (output priced at zero).
fn prompt_cost(price: &crate::vocab::price::Price, u: &Usage) -> Decimal {
    price.cost(&Usage {
        output_tokens: 0,
        reasoning_tokens: 0,
        ..*u
    })
}

/// What one run of the benchmark's job used and took.
struct Ran {
    usage: Usage,
    usd: Decimal,
    tasks: usize,
    completed: usize,
    seconds: f64,
    refused: usize,
}

async fn run_once(dir: &Path, yaml: &str) -> anyhow::Result<Ran> {
    let sim = Arc::new(Sim::start_local().await?);
    let started = Instant::now();
    let ran = run_job(dir, yaml, sim.clone()).await?;
    let seconds = started.elapsed().as_secs_f64();
    let rows = &ran.summary.rows;
    let mut usage = Usage::default();
    let mut usd = Decimal::ZERO;
    for r in rows {
        usage.add(&r.measured.usage);
        usd += r.measured.cost_usd.unwrap_or_default();
    }
    let completed = rows
        .iter()
        .filter(|r| {
            r.stop_reason == crate::vocab::stop::StopReason::MaxTurns
                || r.stop_reason == crate::vocab::stop::StopReason::Completed
        })
        .count();
    Ok(Ran {
        usage,
        usd,
        tasks: rows.len(),
        completed,
        seconds,
        refused: sim.requests().iter().filter(|r| r.status == 429).count(),
    })
}

/// Runs the cache benchmark: every protocol and strategy, then the paced runs.
pub async fn cache_savings(out: &Path) -> anyhow::Result<CacheReport> {
    let dir = bench_dir(out, "cache");
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).with_context(|| format!("cannot create {}", repo.display()))?;
    let line = "def total(xs):\n    return sum(x for x in xs if x is not None)  # blank cells\n";
    let module = line.repeat(2048 / line.len() + 1);
    std::fs::write(repo.join("module.py"), &module[..2048])
        .with_context(|| format!("cannot write {}", repo.display()))?;
    let protocols: [(&str, &str, &[&str]); 3] = [
        (
            "anthropic",
            "claude-sonnet-4-5",
            &["off", "last_message", "auto"],
        ),
        ("openai-responses", "gpt-5.4", &["off", "auto"]),
        ("openai-chat", "gpt-5.4", &["off", "auto"]),
    ];
    let mut rows = Vec::new();
    for (protocol, model, modes) in protocols {
        let price = crate::vocab::price::lookup(&Default::default(), model)
            .with_context(|| format!("no price for {model}"))?;
        let mut uncached = None;
        for &mode in modes {
            let run_dir = dir.join(format!("{protocol}-{mode}"));
            let ran = run_once(&run_dir, &job(protocol, model, mode, &repo, TASKS, None)).await?;
            let n = Decimal::from(ran.tasks.max(1) as u64);
            let u = &ran.usage;
            let uncached = *uncached.get_or_insert_with(|| prompt_cost(&price, &u.uncached()) / n);
            rows.push(CacheRow {
                protocol,
                model,
                mode,
                usd: ran.usd / n,
                input_usd: prompt_cost(&price, u) / n,
                uncached_input_usd: uncached,
                read_share: u.cache_read_tokens as f64 / u.prompt_tokens().max(1) as f64,
                completed: ran.completed,
            });
        }
    }
    let mut paced = Vec::new();
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
    ] {
        for mode in ["off", "auto"] {
            let run_dir = dir.join(format!("{protocol}-{mode}-itpm"));
            let yaml = job(protocol, model, mode, &repo, PACED_TASKS, Some(PACED_ITPM));
            let ran = run_once(&run_dir, &yaml).await?;
            paced.push(PacedRow {
                protocol,
                mode,
                seconds: ran.seconds,
                prompt_tokens_per_minute: ran.usage.prompt_tokens() as f64 * 60.0
                    / ran.seconds.max(0.001),
                refused: ran.refused,
                completed: ran.completed,
            });
        }
    }
    Ok(CacheReport { rows, paced, dir })
}
