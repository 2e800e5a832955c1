//! compare.csv (one row per pair) and compare-flips.csv (one row per flipped unit), for
//! scripts: raw fractions and p-values, amounts in dollars, empty where undefined.

use std::path::Path;

use super::figures::PairSummary;
use super::format;

/// The columns of compare.csv.
pub const PAIR_COLUMNS: [&str; 13] = [
    "a",
    "b",
    "paired",
    "wins",
    "losses",
    "ties",
    "pass_rate_a",
    "pass_rate_b",
    "diff",
    "p_value",
    "cost_per_pass_a",
    "cost_per_pass_b",
    "flipped",
];

/// The columns of compare-flips.csv.
pub const FLIP_COLUMNS: [&str; 6] = ["a", "b", "task_id", "epoch", "others", "passed"];

pub(crate) fn write_pairs(path: &Path, pairs: &[PairSummary]) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record(PAIR_COLUMNS)?;
    let num = |v: Option<f64>| v.map(|f| f.to_string()).unwrap_or_default();
    let money = |v: Option<rust_decimal::Decimal>| v.map(format::exact).unwrap_or_default();
    for p in pairs {
        let flipped: Vec<String> = p
            .flips
            .iter()
            .map(|f| format!("{}:{}", f.passed.as_str(), f.unit()))
            .collect();
        w.write_record([
            p.a.clone(),
            p.b.clone(),
            p.paired.to_string(),
            p.wins.to_string(),
            p.losses.to_string(),
            p.ties.to_string(),
            num(p.pass_rate_a()),
            num(p.pass_rate_b()),
            num(p.diff()),
            p_value(p.p_value),
            money(p.cost_per_pass_a()),
            money(p.cost_per_pass_b()),
            flipped.join(" "),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// A p-value to twelve significant digits: the test sums in log space, so its last bits
/// are noise (0.021484375000000003 for 22/1024).
fn p_value(p: f64) -> String {
    format!("{p:.11e}").parse::<f64>().unwrap_or(p).to_string()
}

pub(crate) fn write_flips(path: &Path, pairs: &[PairSummary]) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_path(path)?;
    w.write_record(FLIP_COLUMNS)?;
    for p in pairs {
        for f in &p.flips {
            w.write_record([
                p.a.as_str(),
                p.b.as_str(),
                f.task_id.as_str(),
                &f.epoch.to_string(),
                f.others.as_str(),
                f.passed.as_str(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_values_drop_the_noise_of_log_space_sums() {
        assert_eq!(p_value(0.021_484_375_000_000_003), "0.021484375");
        assert_eq!(p_value(1.0), "1");
        assert_eq!(p_value(2.728_464_156e-10), "0.0000000002728464156");
    }
}
