//! summary.csv: per variant, what the run's results say. Read back from results.csv at
//! the end of every run, so a resumed run's summary covers every attempt.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rust_decimal::Decimal;

use super::attempts::{AttemptsError, EarlierAttempts};
use super::files;
use super::results::{axis_column, read_results, ResultsError};
use crate::stats::{median, median_u64, wilson95};
use crate::vocab::stop::{Outcome, StopReason};

/// One variant's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VariantSummary {
    pub variant: String,
    pub axes: Vec<String>,
    pub tasks: u64,
    pub pass: u64,
    pub fail: u64,
    pub error: u64,
    pub unchecked: u64,
    pub by_stop: BTreeMap<String, u64>,
    pub cost: Decimal,
    pub costs: Vec<Decimal>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub turns: Vec<u64>,
    pub wall_ms: Vec<u64>,
    pub budget_decided: u64,
    /// What earlier attempts replaced by a resume spent (their rows are in
    /// superseded.csv).
    pub superseded_cost: Decimal,
    /// What attempts cut off by a kill spent (no row anywhere; run.json's resumes).
    pub killed_cost: Decimal,
    /// What prompt caching saved on the variant's rows (results.csv's `cache_saved_usd`).
    pub cache_saved: Decimal,
    /// What batch pricing saved on the variant's rows (results.csv's `batch_saved_usd`).
    pub batch_saved: Decimal,
    /// Turns answered through a batch API.
    pub batched_turns: u64,
}

impl VariantSummary {
    /// Tasks with a verdict (pass, fail or error); unchecked tasks have no pass rate.
    pub fn graded(&self) -> u64 {
        self.pass + self.fail + self.error
    }

    pub fn pass_rate(&self) -> Option<f64> {
        (self.graded() > 0).then(|| self.pass as f64 / self.graded() as f64)
    }

    /// Everything the variant's tasks were charged, over every attempt: what the
    /// ledger counted against the caps.
    pub fn total_cost(&self) -> Decimal {
        self.cost + self.superseded_cost + self.killed_cost
    }
}

/// The columns of summary.csv.
pub(crate) fn summary_columns(axes: &[String]) -> Vec<String> {
    let mut c = vec!["variant".to_string()];
    c.extend(axes.iter().map(|a| axis_column(a)));
    for s in [
        "tasks",
        "graded",
        "pass",
        "fail",
        "error",
        "unchecked",
        "pass_rate",
        "pass_rate_low95",
        "pass_rate_high95",
    ] {
        c.push(s.into());
    }
    c.extend(StopReason::ALL.iter().map(|s| format!("stop_{s}")));
    for s in [
        "budget_decided",
        "cost_usd",
        "superseded_cost_usd",
        "killed_cost_usd",
        "total_cost_usd",
        "median_cost_usd",
        "input_tokens",
        "output_tokens",
        "turns",
        "median_turns",
        "wall_s",
        "median_wall_s",
        "cache_saved_usd",
        "batched_turns",
        "batch_saved_usd",
    ] {
        c.push(s.into());
    }
    c
}

fn rate(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v:.4}"))
}

/// Why summary.csv could not be made.
#[derive(Debug, thiserror::Error)]
pub enum VariantsError {
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("{} has no {column} column", path.display())]
    MissingAxis { path: PathBuf, column: String },
    #[error(transparent)]
    Attempts(#[from] AttemptsError),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Columns the summary sums, each filled in every row.
const SUMMED: [&str; 8] = [
    "variant",
    "outcome",
    "stop_reason",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "turns",
    "wall_ms",
];

/// Reads results.csv and sums it per variant (in the order variants first appear).
pub(crate) fn summarize(
    results: &Path,
    axes: &[String],
) -> Result<Vec<VariantSummary>, VariantsError> {
    let file = read_results(results, &SUMMED, &SUMMED[4..])?;
    for a in axes {
        if !file.header.iter().any(|h| h == axis_column(a)) {
            return Err(VariantsError::MissingAxis {
                path: results.to_path_buf(),
                column: axis_column(a),
            });
        }
    }
    let mut out: Vec<VariantSummary> = Vec::new();
    for row in &file.rows {
        let i = match out.iter().position(|v| v.variant == row.variant) {
            Some(i) => i,
            None => {
                out.push(VariantSummary {
                    variant: row.variant.clone(),
                    axes: axes
                        .iter()
                        .map(|a| row.axes.get(a).cloned().unwrap_or_default())
                        .collect(),
                    ..Default::default()
                });
                out.len() - 1
            }
        };
        let v = &mut out[i];
        v.tasks += 1;
        match row.outcome {
            Some(Outcome::Pass) => v.pass += 1,
            Some(Outcome::Fail) => v.fail += 1,
            Some(Outcome::Error) => v.error += 1,
            _ => v.unchecked += 1,
        }
        *v.by_stop.entry(row.stop_reason.clone()).or_default() += 1;
        if StopReason::ALL
            .iter()
            .any(|s| s.is_budget() && s.as_str() == row.stop_reason)
        {
            v.budget_decided += 1;
        }
        if let Some(c) = row.cost_usd {
            v.cost += c;
            v.costs.push(c);
        }
        v.cache_saved += row.cache_saved_usd.unwrap_or_default();
        v.batch_saved += row.batch_saved_usd.unwrap_or_default();
        v.batched_turns += row.batched_turns.unwrap_or(0);
        v.input_tokens += row.input_tokens.unwrap_or(0);
        v.output_tokens += row.output_tokens.unwrap_or(0);
        v.turns.push(row.turns.unwrap_or(0));
        v.wall_ms.push(row.wall_ms.unwrap_or(0));
    }
    Ok(out)
}

/// Adds what earlier attempts of a resumed run spent, per variant.
fn add_earlier_attempts(
    dir: &Path,
    variants: &mut Vec<VariantSummary>,
) -> Result<(), AttemptsError> {
    fn entry<'a>(variants: &'a mut Vec<VariantSummary>, variant: &str) -> &'a mut VariantSummary {
        let i = match variants.iter().position(|v| v.variant == variant) {
            Some(i) => i,
            None => {
                variants.push(VariantSummary {
                    variant: variant.to_string(),
                    ..Default::default()
                });
                variants.len() - 1
            }
        };
        &mut variants[i]
    }
    let earlier = EarlierAttempts::read(dir)?;
    for (variant, c) in &earlier.superseded.by_variant {
        entry(variants, variant).superseded_cost += *c;
    }
    for (variant, c) in &earlier.killed.by_variant {
        entry(variants, variant).killed_cost += *c;
    }
    Ok(())
}

/// The figures of summary.csv without writing it: per variant, earlier attempts
/// included, variants in `order` (the plan's), any others after them. The report page
/// shows these, so its table and summary.csv never disagree.
pub(crate) fn read_variants(
    dir: &Path,
    axes: &[String],
    order: &[String],
) -> Result<Vec<VariantSummary>, VariantsError> {
    let mut variants = summarize(&dir.join(files::RESULTS_CSV), axes)?;
    add_earlier_attempts(dir, &mut variants)?;
    variants.sort_by_key(|v| {
        order
            .iter()
            .position(|o| *o == v.variant)
            .unwrap_or(usize::MAX)
    });
    Ok(variants)
}

/// Writes summary.csv beside results.csv, variants in `order` (the plan's), any others
/// after them.
pub(crate) fn write_summary_csv(
    dir: &Path,
    axes: &[String],
    order: &[String],
) -> Result<Vec<VariantSummary>, VariantsError> {
    let variants = read_variants(dir, axes, order)?;
    let path = dir.join(files::SUMMARY_CSV);
    let tmp = dir.join("summary.csv.tmp");
    let e = |e: &dyn std::fmt::Display| VariantsError::Write {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    };
    let mut w = csv::Writer::from_path(&tmp).map_err(|x| e(&x))?;
    w.write_record(summary_columns(axes)).map_err(|x| e(&x))?;
    for v in &variants {
        let mut row = vec![v.variant.clone()];
        row.extend(v.axes.iter().cloned());
        let ci = wilson95(v.pass, v.graded());
        row.extend([
            v.tasks.to_string(),
            v.graded().to_string(),
            v.pass.to_string(),
            v.fail.to_string(),
            v.error.to_string(),
            v.unchecked.to_string(),
            rate(v.pass_rate()),
            rate(ci.map(|c| c.0)),
            rate(ci.map(|c| c.1)),
        ]);
        row.extend(
            StopReason::ALL
                .iter()
                .map(|s| v.by_stop.get(s.as_str()).copied().unwrap_or(0).to_string()),
        );
        let wall_total: u64 = v.wall_ms.iter().sum();
        row.extend([
            v.budget_decided.to_string(),
            v.cost.normalize().to_string(),
            v.superseded_cost.normalize().to_string(),
            v.killed_cost.normalize().to_string(),
            v.total_cost().normalize().to_string(),
            median(&mut v.costs.clone()).map_or(String::new(), |m| m.normalize().to_string()),
            v.input_tokens.to_string(),
            v.output_tokens.to_string(),
            v.turns.iter().sum::<u64>().to_string(),
            median_u64(&mut v.turns.clone()).map_or(String::new(), |m| m.to_string()),
            format!("{:.3}", wall_total as f64 / 1000.0),
            median_u64(&mut v.wall_ms.clone())
                .map_or(String::new(), |m| format!("{:.3}", m / 1000.0)),
            v.cache_saved.normalize().to_string(),
            v.batched_turns.to_string(),
            v.batch_saved.normalize().to_string(),
        ]);
        w.write_record(&row).map_err(|x| e(&x))?;
    }
    w.flush().map_err(|x| e(&x))?;
    drop(w);
    std::fs::rename(&tmp, &path).map_err(|x| e(&x))?;
    Ok(variants)
}

/// The per-variant table printed at the end of a run with a matrix or epochs.
pub fn variants_table(variants: &[VariantSummary]) -> String {
    let w = variants
        .iter()
        .map(|v| v.variant.len())
        .max()
        .unwrap_or(7)
        .clamp(7, 60);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<w$}  {:>5}  {:>6}  {:>15}  {:>10}  {:>6}",
        "variant", "tasks", "pass", "95% interval", "cost_usd", "budget"
    );
    for v in variants {
        let ci = wilson95(v.pass, v.graded()).map_or("-".to_string(), |(l, h)| {
            format!("{:.0}%-{:.0}%", l * 100.0, h * 100.0)
        });
        let pass = v
            .pass_rate()
            .map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
        let name = if v.variant.is_empty() {
            "(all)"
        } else {
            &v.variant
        };
        let _ = writeln!(
            s,
            "{:<w$}  {:>5}  {:>6}  {:>15}  {:>10.4}  {:>6}",
            name, v.tasks, pass, ci, v.cost, v.budget_decided
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_match_a_hand_count() {
        let d = tempfile::tempdir().unwrap();
        let csv = "variant,epoch,matrix.model,outcome,stop_reason,cost_usd,input_tokens,output_tokens,turns,wall_ms\n\
            model=a,1,a,pass,completed,0.10,100,10,2,1000\n\
            model=b,1,b,fail,max_turns,0.30,300,30,5,3000\n\
            model=a,1,a,fail,cost_limit,0.20,200,20,4,2000\n\
            model=b,1,b,pass,completed,0.05,50,5,1,500\n\
            model=a,2,a,pass,completed,0.40,400,40,3,4000\n\
            model=a,2,a,error,provider_error,,0,0,0,10\n";
        std::fs::write(d.path().join("results.csv"), csv).unwrap();
        let order = ["model=a".to_string(), "model=b".to_string()];
        let v = write_summary_csv(d.path(), &["model".to_string()], &order).unwrap();
        assert_eq!(v.len(), 2);
        let a = &v[0];
        assert_eq!(
            (a.tasks, a.pass, a.fail, a.error, a.graded()),
            (4, 2, 1, 1, 4)
        );
        assert_eq!(a.cost, "0.70".parse::<Decimal>().unwrap());
        assert_eq!(a.budget_decided, 1);
        let text = std::fs::read_to_string(d.path().join("summary.csv")).unwrap();
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let h = r.headers().unwrap().clone();
        let row = r.records().next().unwrap().unwrap();
        let get = |n: &str| row[h.iter().position(|x| x == n).unwrap()].to_string();
        assert_eq!(get("variant"), "model=a");
        assert_eq!(get("matrix.model"), "a");
        assert_eq!(get("pass_rate"), "0.5000");
        // Wilson 95% for 2/4: 0.1500 .. 0.8500.
        assert_eq!(get("pass_rate_low95"), "0.1500");
        assert_eq!(get("pass_rate_high95"), "0.8500");
        assert_eq!(get("stop_completed"), "2");
        assert_eq!(get("stop_provider_error"), "1");
        assert_eq!(get("cost_usd"), "0.7");
        // Priced rows only: 0.10, 0.20, 0.40.
        assert_eq!(get("median_cost_usd"), "0.2");
        assert_eq!(get("turns"), "9");
        assert_eq!(get("median_turns"), "2.5");
        assert_eq!(get("wall_s"), "7.010");
        assert_eq!(get("median_wall_s"), "1.500");
        assert_eq!(get("budget_decided"), "1");
        assert!(variants_table(&v).contains("model=b"));
    }
}
