//! What the earlier attempts of a resumed run spent, which no row of results.csv shows:
//! rows a resume replaced (superseded.csv, except a row still in results.csv, left by a
//! resume cut off between the two files) and attempts a kill cut off (run.json's
//! `resumes`, per variant and per team). With the rows of results.csv they make what
//! the ledger charged.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use rust_decimal::Decimal;

use super::files;
use super::results::{read_results, ResultRow, ResultsError, ResultsFile};
use super::run_json::{RunJson, RunJsonError};

/// Money by variant and by team.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Spend {
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
pub(crate) struct EarlierAttempts {
    pub superseded: Spend,
    pub killed: Spend,
}

/// What the earlier attempts of a run folder could not be read from.
#[derive(Debug, thiserror::Error)]
pub enum AttemptsError {
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error(transparent)]
    RunJson(#[from] RunJsonError),
}

/// Sums a results-format file's `cost_usd` by variant and team, leaving out rows in
/// `except`. A file without those columns spent nothing anyone can tell.
fn spend_of(file: &ResultsFile, except: &HashSet<Vec<String>>) -> Spend {
    let mut spend = Spend::default();
    let has = |name: &str| file.header.iter().any(|h| h == name);
    if !(has("variant") && has("team") && has("cost_usd")) {
        return spend;
    }
    for row in file.rows.iter().filter(|r| !except.contains(&r.verbatim())) {
        if let Some(c) = row.cost_usd {
            *spend.by_variant.entry(row.variant.clone()).or_default() += c;
            if !row.team.is_empty() {
                *spend.by_team.entry(row.team.clone()).or_default() += c;
            }
        }
    }
    spend
}

impl EarlierAttempts {
    /// Reads the run folder `dir`.
    pub fn read(dir: &Path) -> Result<EarlierAttempts, AttemptsError> {
        let mut out = EarlierAttempts::default();
        let superseded = dir.join(files::SUPERSEDED_CSV);
        if superseded.exists() {
            let results = read_results(&dir.join(files::RESULTS_CSV), &[], &[])?;
            let standing: HashSet<Vec<String>> =
                results.rows.iter().map(ResultRow::verbatim).collect();
            out.superseded = spend_of(&read_results(&superseded, &[], &[])?, &standing);
        }
        let run_json = dir.join(files::RUN_JSON);
        if run_json.exists() {
            let r = RunJson::read(&run_json)?;
            let killed = r
                .resumes
                .into_iter()
                .map(|r| (r.killed_spent_by_variant, r.killed_spent_by_team))
                .chain(
                    r.killed_with_workers
                        .map(|w| (w.killed_spent_by_variant, w.killed_spent_by_team)),
                );
            for (by_variant, by_team) in killed {
                for (from, into) in [
                    (by_variant, &mut out.killed.by_variant),
                    (by_team, &mut out.killed.by_team),
                ] {
                    for (name, c) in from {
                        *into.entry(name).or_default() += c;
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
pub fn whole_run_cost(dir: &Path) -> Result<Option<String>, AttemptsError> {
    let earlier = EarlierAttempts::read(dir)?;
    let (superseded, killed) = (earlier.superseded.total(), earlier.killed.total());
    if superseded + killed <= Decimal::ZERO {
        return Ok(None);
    }
    let rows = spend_of(
        &read_results(&dir.join(files::RESULTS_CSV), &[], &[])?,
        &HashSet::new(),
    );
    let mut s = format!(
        "whole run, every attempt: ${:.4} charged = ${:.4} in results.csv + ${:.4} in attempts a resume replaced (superseded.csv) + ${:.4} in attempts cut off by a kill (of the runner or a worker)",
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
