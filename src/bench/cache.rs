//! `agentbatch bench cache`: what prompt caching saves on repo-fix-shaped tasks. Each
//! task has a 3 KB system prompt, the coding tool set and 30 turns whose tool results
//! are 2 KB each; the same tasks run with caching off and on (the runner's breakpoints
//! on Anthropic, `prompt_cache_key` on OpenAI), per protocol, on the simulator, which
//! caches like the APIs. Dollars are priced from the usage the simulator reported.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use rust_decimal::Decimal;

use super::{bench_dir, run_job};
use crate::sim::Sim;
use crate::vocab::usage::Usage;

const TASKS: usize = 10;
const TURNS: usize = 30;

/// One protocol's figures, caching off and on.
#[derive(Debug, Clone)]
pub struct CacheRow {
    pub protocol: &'static str,
    pub model: &'static str,
    /// Dollars per task: all of it, and its prompt part alone.
    pub off_usd: Decimal,
    pub on_usd: Decimal,
    pub off_input_usd: Decimal,
    pub on_input_usd: Decimal,
    /// The prompt part with no caching at all (every prompt token at the input rate):
    /// OpenAI caches by itself, so its `off` is not this.
    pub uncached_input_usd: Decimal,
    /// Share of prompt tokens read from the cache, caching on.
    pub read_share: f64,
    pub completed: usize,
}

/// What `agentbatch bench cache` measured.
#[derive(Debug, Clone)]
pub struct CacheReport {
    pub rows: Vec<CacheRow>,
    pub dir: PathBuf,
}

impl fmt::Display for CacheReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "prompt caching: {TASKS} tasks x {TURNS} turns per protocol (3 KB system prompt, coding tools, 2 KB tool results), on the simulator"
        )?;
        for r in &self.rows {
            let ratio = |a: Decimal, b: Decimal| {
                if b.is_zero() {
                    "-".to_string()
                } else {
                    format!("{:.1}x", a / b)
                }
            };
            writeln!(
                f,
                "  {} ({}): per task ${:.4} with cache off, ${:.4} on; prompt part: ${:.4} uncached, ${:.4} off, ${:.4} on ({} below uncached); {:.0}% of prompt tokens read from cache; {}/{} tasks completed",
                r.protocol,
                r.model,
                r.off_usd,
                r.on_usd,
                r.uncached_input_usd,
                r.off_input_usd,
                r.on_input_usd,
                ratio(r.uncached_input_usd, r.on_input_usd),
                100.0 * r.read_share,
                r.completed,
                2 * TASKS
            )?;
        }
        write!(f, "  reports: {}", self.dir.display())
    }
}

fn job(protocol: &str, model: &str, cache: &str, repo: &Path) -> String {
    let system = "You fix failing tests in a Python project. Read the code before you edit it, keep changes small, and run the tests after each edit. ".repeat(24);
    let mut turns = String::new();
    for _ in 0..TURNS - 1 {
        turns.push_str("        - content: [ { tool_use: { name: read_file, input: { path: module.py } } } ]\n");
    }
    turns.push_str("        - content: [ { text: done } ]\n");
    let tasks: String = (0..TASKS)
        .map(|i| format!("  - {{ id: t{i:02}, prompt: \"fix the failing test number {i}\" }}\n"))
        .collect();
    format!(
        "name: bench-cache\nconcurrency: {TASKS}\nproviders:\n  bench: {{ protocol: {protocol}, simulator: true }}\ndefaults:\n  provider: bench\n  model: {model}\n  max_tokens: 512\n  toolset: coding\n  repo: {repo}\n  keep_workspaces: never\n  cache: {{ mode: {cache} }}\n  system: \"{system}\"\n  limits: {{ max_turns: {TURNS}, time_limit: 10m, max_repeats: off }}\n  sim:\n    turns:\n{turns}tasks:\n{tasks}",
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

/// Runs the cache benchmark: every protocol, caching off then on.
pub async fn cache_savings(out: &Path) -> anyhow::Result<CacheReport> {
    let dir = bench_dir(out, "cache");
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).with_context(|| format!("cannot create {}", repo.display()))?;
    let line = "def total(xs):\n    return sum(x for x in xs if x is not None)  # blank cells\n";
    let module = line.repeat(2048 / line.len() + 1);
    std::fs::write(repo.join("module.py"), &module[..2048])
        .with_context(|| format!("cannot write {}", repo.display()))?;
    let mut rows = Vec::new();
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let price = crate::vocab::price::lookup(&Default::default(), model)
            .with_context(|| format!("no price for {model}"))?;
        let mut figures = Vec::new();
        for cache in ["off", "auto"] {
            let sim = Arc::new(Sim::start_local().await?);
            let run_dir = dir.join(format!("{protocol}-{cache}"));
            let ran = run_job(&run_dir, &job(protocol, model, cache, &repo), sim).await?;
            let rows = &ran.summary.rows;
            let n = Decimal::from(rows.len().max(1) as u64);
            let mut usage = Usage::default();
            let mut cost = Decimal::ZERO;
            for r in rows {
                usage.add(&r.usage);
                cost += r.cost_usd.unwrap_or_default();
            }
            let completed = rows
                .iter()
                .filter(|r| {
                    r.stop_reason == crate::vocab::stop::StopReason::MaxTurns
                        || r.stop_reason == crate::vocab::stop::StopReason::Completed
                })
                .count();
            let read = usage.cache_read_tokens as f64 / usage.prompt_tokens().max(1) as f64;
            let uncached = prompt_cost(&price, &usage.uncached()) / n;
            figures.push((
                cost / n,
                prompt_cost(&price, &usage) / n,
                read,
                completed,
                uncached,
            ));
        }
        rows.push(CacheRow {
            protocol,
            model,
            off_usd: figures[0].0,
            on_usd: figures[1].0,
            off_input_usd: figures[0].1,
            on_input_usd: figures[1].1,
            uncached_input_usd: figures[0].4,
            read_share: figures[1].2,
            completed: figures[0].3 + figures[1].3,
        });
    }
    Ok(CacheReport { rows, dir })
}
