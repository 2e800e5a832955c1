//! What the earlier attempts of a resumed run spent, which no row of results.csv shows:
//! rows a resume replaced (superseded.csv, except a row still in results.csv, left by a
//! resume cut off between the two files) and attempts a kill cut off (run.json's
//! `resumes`, per variant and per team). With the rows of results.csv they make what
//! the ledger charged.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use rust_decimal::Decimal;

/// Money by variant and by team.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spend {
    pub by_variant: BTreeMap<String, Decimal>,
    pub by_team: BTreeMap<String, Decimal>,
}

impl Spend {
    pub fn total(&self) -> Decimal {
        self.by_variant.values().sum()
    }
}

/// The earlier attempts of a run folder.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EarlierAttempts {
    pub superseded: Spend,
    pub killed: Spend,
}

/// A results-format file's header and rows (rows with another number of fields, a row
/// cut off by a kill, left out).
fn read_records(path: &Path) -> Result<(csv::StringRecord, Vec<csv::StringRecord>), String> {
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let header = r
        .headers()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .clone();
    let rows = r
        .records()
        .filter_map(Result::ok)
        .filter(|rec| rec.len() == header.len())
        .collect();
    Ok((header, rows))
}

/// Sums a results-format file's `cost_usd` by variant and team, leaving out rows in
/// `except`.
fn spend_of(path: &Path, except: &HashSet<Vec<String>>) -> Result<Spend, String> {
    let mut spend = Spend::default();
    let (header, rows) = read_records(path)?;
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(variant), Some(team), Some(cost)) = (col("variant"), col("team"), col("cost_usd"))
    else {
        return Ok(spend);
    };
    for rec in rows.iter().filter(|r| !except.contains(&fields(r))) {
        if let Ok(c) = rec[cost].parse::<Decimal>() {
            *spend
                .by_variant
                .entry(rec[variant].to_string())
                .or_default() += c;
            if !rec[team].is_empty() {
                *spend.by_team.entry(rec[team].to_string()).or_default() += c;
            }
        }
    }
    Ok(spend)
}

fn fields(r: &csv::StringRecord) -> Vec<String> {
    r.iter().map(str::to_string).collect()
}

impl EarlierAttempts {
    /// Reads the run folder `dir`.
    pub fn read(dir: &Path) -> Result<EarlierAttempts, String> {
        let mut out = EarlierAttempts::default();
        let superseded = dir.join("superseded.csv");
        if superseded.exists() {
            let standing: HashSet<Vec<String>> = read_records(&dir.join("results.csv"))?
                .1
                .iter()
                .map(fields)
                .collect();
            out.superseded = spend_of(&superseded, &standing)?;
        }
        let run_json = dir.join("run.json");
        if let Ok(text) = std::fs::read_to_string(&run_json) {
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", run_json.display()))?;
            for r in v["resumes"].as_array().into_iter().flatten() {
                for (field, into) in [
                    ("killed_spent_by_variant", &mut out.killed.by_variant),
                    ("killed_spent_by_team", &mut out.killed.by_team),
                ] {
                    for (name, usd) in r[field].as_object().into_iter().flatten() {
                        if let Some(c) = usd.as_str().and_then(|s| s.parse::<Decimal>().ok()) {
                            *into.entry(name.clone()).or_default() += c;
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// The lines printed after a resumed run whose earlier attempts spent money that no row
/// of results.csv shows: the whole run's charge, and each team's. None when there is
/// none.
pub fn whole_run_cost(dir: &Path) -> Result<Option<String>, String> {
    let earlier = EarlierAttempts::read(dir)?;
    let (superseded, killed) = (earlier.superseded.total(), earlier.killed.total());
    if superseded + killed <= Decimal::ZERO {
        return Ok(None);
    }
    let rows = spend_of(&dir.join("results.csv"), &HashSet::new())?;
    let mut s = format!(
        "whole run, every attempt: ${:.4} charged = ${:.4} in results.csv + ${:.4} in attempts a resume replaced (superseded.csv) + ${:.4} in attempts cut off by a kill",
        rows.total() + superseded + killed,
        rows.total(),
        superseded,
        killed
    );
    let mut teams = rows.by_team;
    for spend in [&earlier.superseded, &earlier.killed] {
        for (team, c) in &spend.by_team {
            *teams.entry(team.clone()).or_default() += *c;
        }
    }
    if !teams.is_empty() {
        let each: Vec<String> = teams.iter().map(|(t, c)| format!("{t} ${c:.4}")).collect();
        s.push_str(&format!("\nby team, every attempt: {}", each.join(", ")));
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn earlier_attempts_add_up_by_variant_and_team_without_counting_a_row_twice() {
        let dir = tempfile::tempdir().unwrap();
        let head = "task_id,variant,team,cost_usd\n";
        std::fs::write(
            dir.path().join("results.csv"),
            format!("{head}a,v1,t,0.10\nb,v2,,0.20\n"),
        )
        .unwrap();
        // b's old row is also still in results.csv (a resume cut off between the files).
        std::fs::write(
            dir.path().join("superseded.csv"),
            format!("{head}a,v1,t,0.05\nb,v2,,0.20\nc,v1,t,0.01\ncut,v1,t\n"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("run.json"),
            r#"{"resumes": [{"killed_spent_by_variant": {"v2": "0.30"}, "killed_spent_by_team": {"t": "0.30"}},
                           {"killed_spent_by_variant": {"v1": "0.02"}, "killed_spent_by_team": {"u": "0.02"}}]}"#,
        )
        .unwrap();
        let e = EarlierAttempts::read(dir.path()).unwrap();
        assert_eq!(
            e.superseded.by_variant,
            BTreeMap::from([("v1".to_string(), d("0.06"))])
        );
        assert_eq!(
            e.superseded.by_team,
            BTreeMap::from([("t".to_string(), d("0.06"))])
        );
        assert_eq!(e.killed.total(), d("0.32"));
        let lines = whole_run_cost(dir.path()).unwrap().unwrap();
        assert!(
            lines.contains("$0.6800 charged = $0.3000 in results.csv + $0.0600"),
            "{lines}"
        );
        assert!(
            lines.contains("by team, every attempt: t $0.4600, u $0.0200"),
            "{lines}"
        );
        std::fs::remove_file(dir.path().join("superseded.csv")).unwrap();
        std::fs::write(dir.path().join("run.json"), "{}").unwrap();
        assert_eq!(
            whole_run_cost(dir.path()).unwrap(),
            None,
            "a run without earlier attempts"
        );
    }
}
