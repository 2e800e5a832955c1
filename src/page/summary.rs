//! The page's summary: what the printed summary and summary.csv say (tasks, outcomes,
//! cost, tokens, turns, savings), summed from results.csv with exact decimals, and the
//! per-variant table from summary.csv's own figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rust_decimal::Decimal;

use crate::report::{ResultRow, VariantSummary};
use crate::stats::{median, median_u64, wilson95};
use crate::text::html;
use crate::vocab::stop::Outcome;

/// Sums over the rows.
#[derive(Default)]
pub(super) struct Figures {
    pub tasks: usize,
    pub outcomes: BTreeMap<&'static str, u64>,
    /// In order of first appearance.
    pub stops: Vec<(String, u64)>,
    pub cost: Decimal,
    pub unpriced: u64,
    pub costs: Vec<Decimal>,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
    pub turns: Vec<u64>,
    pub calls: u64,
    pub denied: u64,
    pub tool_errors: u64,
    pub retries: u64,
    pub rate_wait_ms: u64,
    pub wall_ms: Vec<u64>,
    pub cache_saved: Decimal,
    pub batched_turns: u64,
    pub batch_saved: Decimal,
    /// Cost and tasks per team (empty name: no team).
    pub teams: BTreeMap<String, (u64, Decimal)>,
    /// Cost and tasks per variant, in order of first appearance.
    pub variants: Vec<(String, u64, Decimal)>,
}

impl Figures {
    pub fn of(rows: &[ResultRow]) -> Figures {
        let mut f = Figures {
            tasks: rows.len(),
            ..Figures::default()
        };
        for r in rows {
            *f.outcomes
                .entry(r.outcome.map_or("(none)", Outcome::as_str))
                .or_default() += 1;
            match f.stops.iter_mut().find(|(s, _)| *s == r.stop_reason) {
                Some((_, n)) => *n += 1,
                None => f.stops.push((r.stop_reason.clone(), 1)),
            }
            let cost = r.cost_usd.unwrap_or_default();
            match r.cost_usd {
                Some(c) => f.costs.push(c),
                None => f.unpriced += 1,
            }
            f.cost += cost;
            f.input += r.input_tokens.unwrap_or(0);
            f.output += r.output_tokens.unwrap_or(0);
            f.cache_read += r.cache_read_tokens.unwrap_or(0);
            f.cache_write += r.cache_write_tokens.unwrap_or(0);
            f.reasoning += r.reasoning_tokens.unwrap_or(0);
            f.turns.push(r.turns.unwrap_or(0));
            f.calls += r.tool_calls.unwrap_or(0);
            f.denied += r.denied_calls.unwrap_or(0);
            f.tool_errors += r.tool_errors.unwrap_or(0);
            f.retries += r.retries.unwrap_or(0);
            f.rate_wait_ms += r.rate_wait_ms.unwrap_or(0);
            f.wall_ms.push(r.wall_ms.unwrap_or(0));
            f.cache_saved += r.cache_saved_usd.unwrap_or_default();
            f.batched_turns += r.batched_turns.unwrap_or(0);
            f.batch_saved += r.batch_saved_usd.unwrap_or_default();
            let team = f.teams.entry(r.team.clone()).or_default();
            team.0 += 1;
            team.1 += cost;
            match f.variants.iter_mut().find(|(v, _, _)| *v == r.variant) {
                Some((_, n, c)) => {
                    *n += 1;
                    *c += cost;
                }
                None => f.variants.push((r.variant.clone(), 1, cost)),
            }
        }
        f
    }

    fn count(&self, o: Outcome) -> u64 {
        self.outcomes.get(o.as_str()).copied().unwrap_or(0)
    }
}

fn money(d: Decimal) -> String {
    format!("${:.4}", d)
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// The summary table (label, value) as HTML.
pub(super) fn table(f: &Figures, variants: Option<&[VariantSummary]>) -> String {
    let graded = f.count(Outcome::Pass) + f.count(Outcome::Fail) + f.count(Outcome::Error);
    let mut lines: Vec<(&str, String)> = Vec::new();
    let outcomes: Vec<String> = f.outcomes.iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.push(("tasks", format!("{} ({})", f.tasks, outcomes.join(", "))));
    if graded > 0 {
        let rate = f.count(Outcome::Pass) as f64 / graded as f64;
        let ci = wilson95(f.count(Outcome::Pass), graded).map_or(String::new(), |(l, h)| {
            format!(" (95% interval {}-{})", pct(l), pct(h))
        });
        lines.push(("pass rate", format!("{} of {graded} graded{ci}", pct(rate))));
    }
    let stops: Vec<String> = f.stops.iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.push(("stop reasons", stops.join(", ")));
    let mut cost = money(f.cost);
    if f.unpriced > 0 {
        let _ = write!(cost, " (+{} task(s) without a price)", f.unpriced);
    }
    if let Some(v) = variants {
        let earlier: Decimal = v.iter().map(|v| v.superseded_cost + v.killed_cost).sum();
        if earlier > Decimal::ZERO {
            let _ = write!(
                cost,
                "; earlier attempts {}; all attempts {}",
                money(earlier),
                money(f.cost + earlier)
            );
        }
    }
    if let Some(m) = median(&mut f.costs.clone()) {
        let _ = write!(cost, "; median per task {}", money(m));
    }
    lines.push(("cost", cost));
    lines.push((
        "tokens",
        format!(
            "in {} out {} (cache read {}, write {}; reasoning {})",
            f.input, f.output, f.cache_read, f.cache_write, f.reasoning
        ),
    ));
    lines.push((
        "turns",
        format!(
            "{} (median {})",
            f.turns.iter().sum::<u64>(),
            median_u64(&mut f.turns.clone()).map_or("-".into(), |m| m.to_string())
        ),
    ));
    lines.push((
        "tool calls",
        format!(
            "{} ({} denied, {} errors)",
            f.calls, f.denied, f.tool_errors
        ),
    ));
    lines.push((
        "retries and waits",
        format!(
            "{} retries; waited for rate limits {:.1} s",
            f.retries,
            f.rate_wait_ms as f64 / 1000.0
        ),
    ));
    lines.push((
        "savings",
        format!(
            "caching saved {}; {} turn(s) batched, batch pricing saved {}",
            money(f.cache_saved),
            f.batched_turns,
            money(f.batch_saved)
        ),
    ));
    lines.push((
        "wall time",
        format!(
            "median {:.1} s per task",
            median_u64(&mut f.wall_ms.clone()).unwrap_or(0.0) / 1000.0
        ),
    ));
    let mut s = String::from("<table class=\"summary\"><tbody>\n");
    for (k, v) in lines {
        let _ = writeln!(
            s,
            "<tr><th scope=\"row\">{}</th><td>{}</td></tr>",
            html(k),
            html(&v)
        );
    }
    s.push_str("</tbody></table>\n");
    s
}

/// The per-variant table (summary.csv's main columns), when there are variants.
pub(super) fn variants_table(variants: &[VariantSummary]) -> String {
    if variants.len() < 2 && variants.iter().all(|v| v.variant.is_empty()) {
        return String::new();
    }
    let mut s = String::from(
        "<h2>Variants</h2>\n<table class=\"variants\"><thead><tr><th>variant</th><th class=\"num\">tasks</th>\
         <th class=\"num\">pass</th><th class=\"num\">95% interval</th><th class=\"num\">cost</th>\
         <th class=\"num\">median turns</th><th class=\"num\">budget stops</th></tr></thead><tbody>\n",
    );
    for v in variants {
        let name = if v.variant.is_empty() {
            "(none)"
        } else {
            &v.variant
        };
        let pass = v.pass_rate().map_or("-".into(), pct);
        let ci = wilson95(v.pass, v.graded())
            .map_or("-".into(), |(l, h)| format!("{}-{}", pct(l), pct(h)));
        let turns = median_u64(&mut v.turns.clone()).map_or("-".into(), |m| m.to_string());
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{pass}</td><td class=\"num\">{ci}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{turns}</td><td class=\"num\">{}</td></tr>",
            html(name),
            v.tasks,
            money(v.total_cost()),
            v.budget_decided
        );
    }
    s.push_str("</tbody></table>\n");
    s
}
