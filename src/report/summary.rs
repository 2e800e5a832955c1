//! Totals over a run's finished tasks: the end-of-run table and run.json's totals.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rust_decimal::Decimal;
use serde::Serialize;

use crate::model::Usage;
use crate::vocab::log::TaskResult;
use crate::vocab::stop::{Outcome, StopReason};

/// Sums over finished tasks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunTotals {
    pub tasks: usize,
    pub by_outcome: BTreeMap<Outcome, usize>,
    pub by_stop_reason: BTreeMap<StopReason, usize>,
    pub turns: u64,
    pub tool_calls: u64,
    pub tool_errors: u64,
    pub usage: Usage,
    pub cost_usd: Decimal,
    /// What prompt caching saved over the priced tasks (uncached cost minus cost).
    pub cache_saved_usd: Decimal,
    /// What batch pricing saved (the batched turns at standard prices, minus their cost).
    pub batch_saved_usd: Decimal,
    /// Turns answered through a provider's batch API.
    pub batched_turns: u64,
    /// Tasks whose model has no price (their cost is not in cost_usd).
    pub unpriced_tasks: usize,
    pub retries: u64,
    pub rate_wait_ms: u64,
    /// Spend per team.
    pub by_team: BTreeMap<String, Decimal>,
}

impl RunTotals {
    pub fn add(&mut self, r: &TaskResult) {
        self.tasks += 1;
        *self.by_outcome.entry(r.outcome).or_default() += 1;
        *self.by_stop_reason.entry(r.stop_reason).or_default() += 1;
        self.turns += u64::from(r.measured.turns);
        self.tool_calls += u64::from(r.measured.tool_calls);
        self.tool_errors += u64::from(r.measured.tool_errors);
        self.usage.add(&r.measured.usage);
        if let Some(saved) = r.measured.cache_saved_usd {
            self.cache_saved_usd = self.cache_saved_usd.saturating_add(saved);
        }
        if let Some(saved) = r.measured.batch_saved_usd {
            self.batch_saved_usd = self.batch_saved_usd.saturating_add(saved);
        }
        self.batched_turns += u64::from(r.measured.batched_turns);
        match r.measured.cost_usd {
            Some(c) => self.cost_usd += c,
            None => self.unpriced_tasks += 1,
        }
        self.retries += u64::from(r.measured.retries);
        self.rate_wait_ms += r.measured.rate_wait_ms;
        if let Some(t) = &r.team {
            *self.by_team.entry(t.clone()).or_default() += r.measured.cost_usd.unwrap_or_default();
        }
    }

    pub fn count(&self, o: Outcome) -> usize {
        self.by_outcome.get(&o).copied().unwrap_or(0)
    }
}

/// What a finished run reports back to the caller.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub run_id: String,
    pub dir: std::path::PathBuf,
    pub totals: RunTotals,
    /// Rows in task order: (task id, outcome, stop reason, turns, cost).
    #[serde(skip)]
    pub rows: Vec<TaskResult>,
    /// Per variant, over every row of results.csv (a resumed run's earlier ones too).
    #[serde(skip)]
    pub variants: Vec<super::VariantSummary>,
    /// Per provider, the rate limits its answers' headers stated, which it was paced to
    /// (where the job configures none) by the end.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub learned_limits: std::collections::BTreeMap<String, crate::vocab::limits::StatedLimits>,
    /// Per provider that states no limits and refused requests: its adaptive rate at
    /// the end, a minute.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub adaptive_rpm: std::collections::BTreeMap<String, u32>,
}

impl Summary {
    /// The short table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let w = self
            .rows
            .iter()
            .map(|r| r.key.len())
            .max()
            .unwrap_or(4)
            .clamp(4, 40);
        let _ = writeln!(
            s,
            "{:<w$}  {:<9}  {:<16}  {:>5}  {:>10}  {:>8}",
            "task", "outcome", "stop_reason", "turns", "cost_usd", "wall_s"
        );
        for r in &self.rows {
            let cost = r
                .measured
                .cost_usd
                .map_or("-".to_string(), |c| format!("{:.4}", c));
            let _ = writeln!(
                s,
                "{:<w$}  {:<9}  {:<16}  {:>5}  {:>10}  {:>8.1}",
                truncate(&r.key, w),
                r.outcome.as_str(),
                r.stop_reason.as_str(),
                r.measured.turns,
                cost,
                r.measured.wall_ms as f64 / 1000.0
            );
        }
        let t = &self.totals;
        let reasons: Vec<String> = t
            .by_stop_reason
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let outcomes: Vec<String> = t
            .by_outcome
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "{} tasks: {}; stop reasons: {}",
            t.tasks,
            outcomes.join(", "),
            reasons.join(", ")
        );
        let _ = write!(
            s,
            "tokens in {} out {} (cache read {}, write {}); cost ${:.4}{}{}{}",
            t.usage.input_tokens,
            t.usage.output_tokens,
            t.usage.cache_read_tokens,
            t.usage.cache_write_tokens,
            t.cost_usd,
            if t.unpriced_tasks > 0 {
                format!(" (+{} task(s) without a price)", t.unpriced_tasks)
            } else {
                String::new()
            },
            if t.usage.cache_read_tokens > 0 || t.usage.cache_write_tokens > 0 {
                format!("; caching saved ${:.4}", t.cache_saved_usd)
            } else {
                String::new()
            },
            if t.batched_turns > 0 {
                format!(
                    "; {} turn(s) batched, batch pricing saved ${:.4}",
                    t.batched_turns, t.batch_saved_usd
                )
            } else {
                String::new()
            }
        );
        if !t.by_team.is_empty() {
            let teams: Vec<String> = t
                .by_team
                .iter()
                .map(|(k, v)| format!("{k} ${v:.4}"))
                .collect();
            let _ = write!(s, "\nby team: {}", teams.join(", "));
        }
        for (provider, limits) in &self.learned_limits {
            let _ = write!(
                s,
                "\nrate limits learned from {provider}'s answers: {} (paced at 99%)",
                limits.describe()
            );
        }
        for (provider, rpm) in &self.adaptive_rpm {
            let _ = write!(
                s,
                "\n{provider} states no rate limits and refused requests: paced adaptively, at {rpm} rpm by the end"
            );
        }
        if t.retries > 0 || t.rate_wait_ms > 0 {
            let _ = write!(
                s,
                "\nretries {}; waited for rate limits {:.1}s in all",
                t.retries,
                t.rate_wait_ms as f64 / 1000.0
            );
        }
        s
    }
}

fn truncate(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('~');
        t
    }
}
