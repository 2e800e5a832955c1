//! The figures of a comparison: per group (all its rows) and per pair of groups (only
//! the units both sides graded). Money stays Decimal; rates and p-values are f64.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::group::{Group, Unit};
use super::read::Row;
use crate::stats::{mcnemar_exact, median_u64, wilson95};
use crate::vocab::stop::StopReason;

/// One side of the comparison over all its rows (not only the paired ones).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSummary {
    pub label: String,
    /// Every row of the group, one per unit (a superseded row is not counted).
    pub rows: u64,
    /// Rows with a verdict (pass, fail or error); pass rates are over these.
    pub graded: u64,
    pub passes: u64,
    /// The 95% Wilson interval of the pass rate; None without graded rows.
    pub interval: Option<(f64, f64)>,
    /// Cost of the priced rows (all rows).
    pub cost: Decimal,
    /// Rows whose model has no price: their cost is not in `cost`.
    pub unpriced: u64,
    /// Cost of the priced graded rows, and how many graded rows have no price.
    pub graded_cost: Decimal,
    pub graded_unpriced: u64,
    /// Rows per stop reason, in the vocabulary's order (unknown reasons last).
    pub stop_reasons: Vec<(String, u64)>,
    /// The models the group's rows ran.
    pub models: Vec<String>,
    pub median_turns: Option<f64>,
    pub median_wall_ms: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// What prompt caching saved the group's rows: the cost their usage would have had
    /// uncached, less what it cost.
    pub cache_saved: Decimal,
}

impl GroupSummary {
    /// Passes over graded rows.
    pub fn pass_rate(&self) -> Option<f64> {
        rate(self.passes, self.graded)
    }

    /// Mean cost of a row; None when a row is unpriced or there are none.
    pub fn cost_per_task(&self) -> Option<Decimal> {
        if self.unpriced > 0 || self.rows == 0 {
            return None;
        }
        self.cost.checked_div(Decimal::from(self.rows))
    }

    /// Cost of the graded rows per pass; None without passes or with unpriced rows.
    pub fn cost_per_pass(&self) -> Option<Decimal> {
        per_pass(self.graded_cost, self.graded_unpriced, self.passes)
    }
}

/// Which side of a pair passed a flipped unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

impl Side {
    /// `a` or `b`, as compare-flips.csv writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::A => "a",
            Side::B => "b",
        }
    }
}

/// A unit one side passed and the other did not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flip {
    pub task_id: String,
    pub epoch: u32,
    /// The other axes' values, `axis=value` joined by commas (empty without `--by`).
    pub others: String,
    pub passed: Side,
}

impl Flip {
    /// `task@epoch`, with the other axes in brackets when there are any.
    pub fn unit(&self) -> String {
        super::group::describe(&Unit {
            task_id: self.task_id.clone(),
            epoch: self.epoch,
            others: self.others.clone(),
        })
    }
}

/// Groups A and B on the units both graded.
#[derive(Debug, Clone, PartialEq)]
pub struct PairSummary {
    pub a: String,
    pub b: String,
    pub paired: u64,
    /// A passed and B did not.
    pub wins: u64,
    /// B passed and A did not.
    pub losses: u64,
    pub ties: u64,
    pub passes_a: u64,
    pub passes_b: u64,
    /// Exact McNemar test (two-sided) on wins against losses.
    pub p_value: f64,
    /// Cost of each side's paired rows; None when one of them is unpriced.
    pub cost_a: Option<Decimal>,
    pub cost_b: Option<Decimal>,
    /// The units with different verdicts, in unit order.
    pub flips: Vec<Flip>,
}

impl PairSummary {
    /// A's passes over the paired units; None when nothing is paired.
    pub fn pass_rate_a(&self) -> Option<f64> {
        rate(self.passes_a, self.paired)
    }

    /// B's passes over the paired units; None when nothing is paired.
    pub fn pass_rate_b(&self) -> Option<f64> {
        rate(self.passes_b, self.paired)
    }

    /// A's pass rate minus B's, on the paired units.
    pub fn diff(&self) -> Option<f64> {
        if self.paired == 0 {
            return None;
        }
        Some((self.passes_a as f64 - self.passes_b as f64) / self.paired as f64)
    }

    /// What A paid per pass on the paired units; None without a pass or with an
    /// unpriced row, where any figure would mislead.
    pub fn cost_per_pass_a(&self) -> Option<Decimal> {
        self.cost_a.and_then(|c| per_pass(c, 0, self.passes_a))
    }

    /// What B paid per pass on the paired units (see `cost_per_pass_a`).
    pub fn cost_per_pass_b(&self) -> Option<Decimal> {
        self.cost_b.and_then(|c| per_pass(c, 0, self.passes_b))
    }
}

fn rate(passes: u64, n: u64) -> Option<f64> {
    (n > 0).then(|| passes as f64 / n as f64)
}

fn per_pass(cost: Decimal, unpriced: u64, passes: u64) -> Option<Decimal> {
    if unpriced > 0 || passes == 0 {
        return None;
    }
    cost.checked_div(Decimal::from(passes))
}

pub(crate) fn summarize(group: &Group) -> GroupSummary {
    let mut s = GroupSummary {
        label: group.label.clone(),
        rows: 0,
        graded: 0,
        passes: 0,
        interval: None,
        cost: Decimal::ZERO,
        unpriced: 0,
        graded_cost: Decimal::ZERO,
        graded_unpriced: 0,
        stop_reasons: Vec::new(),
        models: Vec::new(),
        median_turns: None,
        median_wall_ms: None,
        input_tokens: 0,
        output_tokens: 0,
        cache_saved: Decimal::ZERO,
    };
    let mut reasons: BTreeMap<&str, u64> = BTreeMap::new();
    let mut turns = Vec::new();
    let mut walls = Vec::new();
    for row in group.units.values() {
        s.rows += 1;
        match row.cost {
            Some(c) => s.cost += c,
            None => s.unpriced += 1,
        }
        if row.graded() {
            s.graded += 1;
            s.passes += u64::from(row.passed());
            match row.cost {
                Some(c) => s.graded_cost += c,
                None => s.graded_unpriced += 1,
            }
        }
        *reasons.entry(&row.stop_reason).or_default() += 1;
        if !row.model.is_empty() && !s.models.contains(&row.model) {
            s.models.push(row.model.clone());
        }
        turns.extend(row.turns);
        walls.extend(row.wall_ms);
        s.input_tokens += row.input_tokens.unwrap_or(0);
        s.output_tokens += row.output_tokens.unwrap_or(0);
        s.cache_saved += row.cache_saved.unwrap_or_default();
    }
    s.models.sort();
    s.interval = wilson95(s.passes, s.graded);
    s.median_turns = median_u64(&mut turns);
    s.median_wall_ms = median_u64(&mut walls);
    s.stop_reasons = ordered_reasons(reasons);
    s
}

/// Known stop reasons in the vocabulary's order, then any others by name.
fn ordered_reasons(mut counts: BTreeMap<&str, u64>) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for reason in StopReason::ALL {
        if let Some(n) = counts.remove(reason.as_str()) {
            out.push((reason.as_str().to_string(), n));
        }
    }
    out.extend(counts.into_iter().map(|(r, n)| (r.to_string(), n)));
    out
}

pub(crate) fn pair(a: &Group, b: &Group) -> PairSummary {
    let mut p = PairSummary {
        a: a.label.clone(),
        b: b.label.clone(),
        paired: 0,
        wins: 0,
        losses: 0,
        ties: 0,
        passes_a: 0,
        passes_b: 0,
        p_value: 1.0,
        cost_a: Some(Decimal::ZERO),
        cost_b: Some(Decimal::ZERO),
        flips: Vec::new(),
    };
    for (unit, ra) in &a.units {
        let Some(rb) = b.units.get(unit) else {
            continue;
        };
        if !ra.graded() || !rb.graded() {
            continue;
        }
        p.paired += 1;
        p.passes_a += u64::from(ra.passed());
        p.passes_b += u64::from(rb.passed());
        p.cost_a = add_cost(p.cost_a, ra);
        p.cost_b = add_cost(p.cost_b, rb);
        let passed = match (ra.passed(), rb.passed()) {
            (true, false) => {
                p.wins += 1;
                Side::A
            }
            (false, true) => {
                p.losses += 1;
                Side::B
            }
            _ => {
                p.ties += 1;
                continue;
            }
        };
        p.flips.push(Flip {
            task_id: unit.task_id.clone(),
            epoch: unit.epoch,
            others: unit.others.clone(),
            passed,
        });
    }
    p.p_value = mcnemar_exact(p.wins, p.losses);
    p
}

fn add_cost(total: Option<Decimal>, row: &Row) -> Option<Decimal> {
    Some(total? + row.cost?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::vocab::stop::Outcome;

    fn row(task: &str, outcome: Outcome, cost: Option<&str>, stop: &str) -> Row {
        Row {
            run_id: "r".into(),
            task_id: task.into(),
            epoch: 1,
            variant: String::new(),
            axes: BTreeMap::new(),
            model: "m".into(),
            outcome,
            stop_reason: stop.into(),
            cost: cost.map(|c| c.parse().unwrap()),
            turns: Some(3),
            wall_ms: Some(100),
            input_tokens: Some(10),
            cache_saved: None,
            output_tokens: Some(2),
            file: 0,
            line: 2,
        }
    }

    fn group<'a>(label: &str, rows: &'a [Row]) -> Group<'a> {
        Group {
            label: label.into(),
            units: rows
                .iter()
                .map(|r| {
                    (
                        Unit {
                            task_id: r.task_id.clone(),
                            epoch: r.epoch,
                            others: String::new(),
                        },
                        r,
                    )
                })
                .collect(),
        }
    }

    use Outcome::{Error, Fail, Pass, Unchecked};

    #[test]
    fn pairs_count_wins_losses_ties_on_units_both_sides_graded() {
        let a = [
            row("t1", Pass, Some("0.1"), "completed"),
            row("t2", Pass, Some("0.1"), "completed"),
            row("t3", Fail, Some("0.1"), "max_turns"),
            row("t4", Pass, Some("0.1"), "completed"),
            row("t5", Pass, Some("0.1"), "completed"),
            row("only-a", Pass, Some("0.1"), "completed"),
        ];
        let b = [
            row("t1", Pass, Some("0.3"), "completed"),
            row("t2", Error, Some("0.3"), "provider_error"),
            row("t3", Pass, Some("0.3"), "completed"),
            row("t4", Unchecked, Some("0.3"), "completed"),
            row("t5", Fail, Some("0.3"), "completed"),
        ];
        let p = pair(&group("A", &a), &group("B", &b));
        assert_eq!((p.paired, p.wins, p.losses, p.ties), (4, 2, 1, 1));
        assert_eq!((p.passes_a, p.passes_b), (3, 2));
        assert_eq!(p.diff(), Some(0.25));
        assert_eq!(p.p_value, 1.0);
        assert_eq!(
            p.cost_per_pass_a(),
            Some("0.4".parse::<Decimal>().unwrap() / Decimal::from(3))
        );
        assert_eq!(p.cost_per_pass_b(), Some("0.6".parse().unwrap()));
        let flips: Vec<(String, Side)> = p.flips.iter().map(|f| (f.unit(), f.passed)).collect();
        assert_eq!(
            flips,
            [
                ("t2@1".to_string(), Side::A),
                ("t3@1".to_string(), Side::B),
                ("t5@1".to_string(), Side::A)
            ]
        );
    }

    #[test]
    fn unpriced_rows_and_no_passes_leave_cost_per_pass_undefined() {
        let a = [row("t1", Pass, None, "completed")];
        let b = [row("t1", Fail, Some("0.2"), "completed")];
        let p = pair(&group("A", &a), &group("B", &b));
        assert_eq!(p.cost_per_pass_a(), None);
        assert_eq!(p.cost_per_pass_b(), None);
        assert_eq!(p.cost_b, Some("0.2".parse().unwrap()));
    }

    #[test]
    fn group_summary_leaves_unchecked_rows_out_of_pass_rates_only() {
        let rows = [
            row("t1", Pass, Some("0.1"), "completed"),
            row("t2", Fail, Some("0.2"), "max_turns"),
            row("t3", Unchecked, Some("0.3"), "completed"),
            row("t4", Error, Some("0.2"), "weird_new_reason"),
        ];
        let s = summarize(&group("A", &rows));
        assert_eq!((s.rows, s.graded, s.passes), (4, 3, 1));
        assert_eq!(s.pass_rate(), Some(1.0 / 3.0));
        assert_eq!(s.interval, wilson95(1, 3));
        assert_eq!(s.cost, "0.8".parse::<Decimal>().unwrap());
        assert_eq!(s.cost_per_task(), Some("0.2".parse().unwrap()));
        assert_eq!(s.cost_per_pass(), Some("0.5".parse().unwrap()));
        assert_eq!(
            s.stop_reasons,
            [
                ("completed".to_string(), 2),
                ("max_turns".to_string(), 1),
                ("weird_new_reason".to_string(), 1)
            ]
        );
        assert_eq!(s.median_turns, Some(3.0));
        assert_eq!((s.input_tokens, s.output_tokens), (40, 8));
    }
}
