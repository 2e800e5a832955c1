//! `agentbatch bench batch`: what batch mode buys on an overnight suite. The same tasks
//! (a 6-turn tool loop) run synchronously, as many at once as a connection-bound run
//! keeps in flight, each request taking the simulator's model latency; and in batch
//! mode, every task in flight at once (a request waiting in a batch holds no
//! connection), each turn waiting for its batch (the simulator's batch delay). Turns per
//! hour and dollars per task come from the runs' own reports; the batch API calls from
//! the simulator's record.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;

use super::{bench_dir, run_job};
use crate::sim::{BatchSettings, Sim};

const TASKS: usize = 300;
const TURNS: usize = 6;
/// Synchronous mode: tasks in flight, and the model's time per request.
const SYNC_CONCURRENCY: usize = 30;
const LATENCY: Duration = Duration::from_secs(2);
/// Batch mode: the simulated time a batch takes, and the pooling window.
const BATCH_DELAY: Duration = Duration::from_secs(20);
const WINDOW: Duration = Duration::from_secs(2);

/// One mode's run.
#[derive(Debug, Clone)]
pub struct BatchRow {
    pub mode: &'static str,
    pub in_flight: usize,
    pub seconds: f64,
    pub turns: u64,
    pub turns_per_hour: f64,
    pub usd_per_task: Decimal,
    pub saved_usd: Decimal,
    pub completed: usize,
    /// Batch mode: batches created, status polls and the most requests in one batch.
    pub batches: usize,
    pub polls: usize,
    pub largest_batch: usize,
    pub dir: PathBuf,
}

/// What `agentbatch bench batch` measured.
#[derive(Debug, Clone)]
pub struct BatchReport {
    pub rows: Vec<BatchRow>,
}

impl fmt::Display for BatchReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "batch mode: {TASKS} tasks x {TURNS} turns (Sonnet 4.5 prices), synchronous at {}s per request, batches taking {}s (window {}s), on the simulator",
            LATENCY.as_secs(),
            BATCH_DELAY.as_secs(),
            WINDOW.as_secs()
        )?;
        for r in &self.rows {
            write!(
                f,
                "  {}: {} in flight, {} turns in {:.1} s = {:.0} turns per hour, ${:.5} per task (batch pricing saved ${:.4}), {}/{TASKS} completed",
                r.mode, r.in_flight, r.turns, r.seconds, r.turns_per_hour, r.usd_per_task, r.saved_usd, r.completed
            )?;
            if r.batches > 0 {
                write!(
                    f,
                    "; {} batches (up to {} requests each), {} status polls",
                    r.batches, r.largest_batch, r.polls
                )?;
            }
            writeln!(f, "; reports: {}", r.dir.display())?;
        }
        Ok(())
    }
}

fn job(batch: bool) -> String {
    let latency = if batch {
        String::new()
    } else {
        format!("    latency: {}ms\n", LATENCY.as_millis())
    };
    let mut turns = String::new();
    for _ in 0..TURNS - 1 {
        turns.push_str("      - content: [ { text: checking }, { tool_use: { name: get_time, input: {} } } ]\n        usage: { output_tokens: 120 }\n");
    }
    turns.push_str("      - content: [ { text: done } ]\n");
    let tasks: String = (0..TASKS)
        .map(|i| format!("  - {{ id: t{i:04}, prompt: fix the failing test }}\n"))
        .collect();
    let (concurrency, mode) = if batch {
        (
            TASKS,
            format!("  batch: {{ mode: on, window: {}s }}\n", WINDOW.as_secs()),
        )
    } else {
        (SYNC_CONCURRENCY, String::new())
    };
    format!(
        "name: bench-batch\nconcurrency: {concurrency}\ndefaults:\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  tools: [get_time]\n{mode}  limits: {{ max_turns: {TURNS}, time_limit: 2h, max_repeats: off }}\n  sim:\n{latency}    turns:\n{turns}tasks:\n{tasks}"
    )
}

/// Runs the suite in both modes.
pub async fn batch_mode(out: &Path) -> anyhow::Result<BatchReport> {
    let mut rows = Vec::new();
    for batch in [false, true] {
        let sim = Arc::new(Sim::start_local().await?);
        sim.set_batch_settings(BatchSettings {
            delay: BATCH_DELAY,
            ..BatchSettings::default()
        });
        let dir = bench_dir(out, if batch { "batch-on" } else { "batch-off" });
        let started = Instant::now();
        let outcome = run_job(&dir, &job(batch), sim.clone()).await?;
        let seconds = started.elapsed().as_secs_f64();
        let t = &outcome.summary.totals;
        let records = sim.batches();
        rows.push(BatchRow {
            mode: if batch { "batch" } else { "synchronous" },
            in_flight: if batch { TASKS } else { SYNC_CONCURRENCY },
            seconds,
            turns: t.turns,
            turns_per_hour: t.turns as f64 * 3600.0 / seconds.max(0.001),
            usd_per_task: t.cost_usd / Decimal::from(TASKS as u64),
            saved_usd: t.batch_saved_usd,
            completed: outcome
                .summary
                .rows
                .iter()
                .filter(|r| r.stop_reason == crate::vocab::stop::StopReason::Completed)
                .count(),
            batches: records.len(),
            polls: records.iter().map(|b| b.calls.polls_ms.len()).sum(),
            largest_batch: records.iter().map(|b| b.items.len()).max().unwrap_or(0),
            dir: outcome.summary.dir.clone(),
        });
    }
    Ok(BatchReport { rows })
}
