//! The chaos batch as a run shared by machines: the same seeds queued in PostgreSQL,
//! two workers, one killed with -9 while its requests are in flight (after a number of
//! answers drawn from the batch's first seed), the other finishing the run, then
//! `collect`. Besides the invariants of every task (its transcript, the audit, nothing
//! written outside a workspace), a shared run must keep its own: every task exactly
//! once, no task waiting out its time limit for money the dead worker held, and the
//! collected figures equal to what the ledger charged the run, each team and each cap.

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use serde_json::Value;

use super::batch::Bed;
use super::plan::Caps;
use super::transcript::decimal;
use super::Finding;
use crate::common::{bin, read_csv, signal};
use crate::postgres::fresh_database;

fn worker(bed: &Bed, url: &str, name: &str) -> Child {
    bin()
        .args([
            "worker", url, "--run-id", "r", "--quiet", "--out", "out", "--name", name, "--lease",
            "3s",
        ])
        .current_dir(bed.case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("a worker starts")
}

/// Waits until `doomed` has `answers` answers behind it and a request in flight (or has
/// ended, or a minute went by), then kills it with -9. Whether it was killed mid-flight.
fn kill_in_flight(bed: &Bed, mut doomed: Child, answers: usize) -> bool {
    let transcripts = bed.case.path("out/workers/doomed/r/transcripts");
    let started = Instant::now();
    let mut in_flight = false;
    while started.elapsed() < Duration::from_secs(60) {
        if doomed.try_wait().ok().flatten().is_some() {
            break;
        }
        let texts: Vec<String> = std::fs::read_dir(&transcripts)
            .map(|d| {
                d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default();
        let answered: usize = texts
            .iter()
            .map(|t| t.matches("\"event\":\"response\"").count())
            .sum();
        in_flight = texts.iter().any(|t| {
            let last = t.lines().last().unwrap_or("");
            last.contains("\"event\":\"request\"") || last.contains("\"event\":\"reserve\"")
        });
        if answered >= answers && in_flight {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(doomed.id(), "KILL");
    let _ = doomed.wait();
    in_flight
}

/// What the ledger charged run `r` per (team, period): settled plus open.
fn ledger_charges(bed: &Bed, url: &str) -> BTreeMap<(String, String), Decimal> {
    let out = bin()
        .args(["ledger", "--json", "--ledger", url])
        .current_dir(bed.case.dir.path())
        .output()
        .expect("ledger runs");
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    rows.as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let t = &r["totals"];
            let charged = decimal(&t["settled"]).unwrap_or_default()
                + decimal(&t["reserved"]).unwrap_or_default();
            let key = (
                r["team"].as_str().unwrap_or("").to_string(),
                r["period"].as_str().unwrap_or("").to_string(),
            );
            (key, charged)
        })
        .collect()
}

/// Runs one batch of seeds as a shared run and checks every invariant.
pub(super) fn run_shared_batch(seeds: &[u64]) -> Vec<Finding> {
    // The run's pool binds well before the seeds are done, so that live tasks need
    // money while the dead worker's requests still hold theirs.
    let mut caps = Caps::for_batch(seeds.len() as u64);
    caps.run = Decimal::new(seeds.len() as i64 * 25, 3);
    let mut bed = Bed::with_caps(seeds, caps);
    bed.shared = true;
    let url = fresh_database("chaos");
    let started = Instant::now();
    let queued = bin()
        .args(["run", "job.yaml", "--queue", &url, "--run-id", "r"])
        .current_dir(bed.case.dir.path())
        .output()
        .expect("run --queue runs");
    if queued.status.code() != Some(0) {
        let detail = String::from_utf8_lossy(&queued.stderr).into_owned();
        bed.add_all("a shared run is queued", detail);
        return bed.found;
    }
    let doomed = worker(&bed, &url, "doomed");
    let heir = worker(&bed, &url, "heir");
    let answers = 1 + (seeds.first().copied().unwrap_or(0) % 7) as usize;
    let mid_flight = kill_in_flight(&bed, doomed, answers);
    let heir = heir.wait_with_output().expect("the worker ends");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&heir.stderr).into_owned();
    if heir.status.code() != Some(0) || stderr.contains("panicked") {
        let detail = format!(
            "exit {:?}: {}",
            heir.status.code(),
            stderr.chars().take(2000).collect::<String>()
        );
        bed.add_all("a worker ends well", detail);
    }
    let collected = bin()
        .args(["collect", &url, "--run-id", "r", "--out", "out"])
        .current_dir(bed.case.dir.path())
        .output()
        .expect("collect runs");
    if collected.status.code() != Some(0) {
        let detail = String::from_utf8_lossy(&collected.stderr).into_owned();
        bed.add_all("collect writes the run folder", detail);
        return bed.found;
    }
    let rows = bed.rows();
    let mut stats = BTreeMap::new();
    let costs = bed.check_tasks(&rows, &mut stats);
    for r in &rows {
        if r["stop_reason"] == "time_limit" && r["stop_detail"].contains("budget") {
            let seed = r["task_id"]
                .trim_start_matches('s')
                .parse()
                .unwrap_or(u64::MAX);
            let detail = format!("{}: {}", r["task_id"], r["stop_detail"]);
            bed.add(seed, "nobody waits for a dead worker's money", detail);
        }
    }
    // The collected figures against the ledger: the run's pool, each team's pool in
    // the run, and blue's day cap (this database holds this run alone).
    let charges = ledger_charges(&bed, &url);
    let summary = read_csv(&bed.dir().join("summary.csv"));
    let total: Decimal = summary
        .iter()
        .map(|r| Decimal::from_str(&r["total_cost_usd"]).unwrap_or_default())
        .sum();
    let run_pool = charges
        .get(&("(run)".to_string(), "run:r".to_string()))
        .copied()
        .unwrap_or_default();
    if total != run_pool {
        let detail = format!(
            "summary.csv's total_cost_usd is ${total}, the ledger charged the run ${run_pool}"
        );
        bed.add_all("the collected total is what the ledger charged", detail);
    }
    if run_pool > bed.caps.run {
        let detail = format!("${run_pool} > ${}", bed.caps.run);
        bed.add_all("the run stays under its cap", detail);
    }
    let run_json: Value = std::fs::read_to_string(bed.dir().join("run.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let mut by_team: BTreeMap<String, Decimal> = BTreeMap::new();
    for (i, cost) in &costs {
        if let Some(team) = bed.tasks[*i].team {
            *by_team.entry(team.to_string()).or_default() += *cost;
        }
    }
    if let Some(killed) = run_json["killed_with_workers"]["killed_spent_by_team"].as_object() {
        for (team, c) in killed {
            *by_team.entry(team.clone()).or_default() += decimal(c).unwrap_or_default();
        }
    }
    let blue_day: Decimal = charges
        .iter()
        .filter(|((team, period), _)| team == "blue" && period.starts_with("day:"))
        .map(|(_, c)| *c)
        .sum();
    let red_pool = charges
        .get(&("red".to_string(), "run:r".to_string()))
        .copied()
        .unwrap_or_default();
    for (team, ledger, cap) in [
        ("red", red_pool, bed.caps.red),
        ("blue", blue_day, bed.caps.blue),
    ] {
        let reported = by_team.get(team).copied().unwrap_or_default();
        if reported != ledger {
            let detail = format!("team {team}: the collected rows and killed spend say ${reported}, the ledger charged ${ledger}");
            bed.add_all("the collected total is what the ledger charged", detail);
        }
        if ledger > cap {
            let detail = format!("team {team} was charged ${ledger}, its cap is ${cap}");
            bed.add_all("no team over its cap", detail);
        }
    }
    bed.check_outside(rows.iter().any(|r| r["sandbox"].contains("landlock")));
    let killed = decimal(&run_json["killed_with_workers"]["killed_spent_usd"]).unwrap_or_default();
    eprintln!(
        "chaos (shared run): {} seeds from {} ran in {:.1}s, a worker killed {} after {answers} answers; charged ${run_pool} of ${} (${killed} by the dead worker)",
        seeds.len(),
        seeds.first().copied().unwrap_or_default(),
        took.as_secs_f64(),
        if mid_flight { "mid-flight" } else { "(nothing in flight)" },
        bed.caps.run
    );
    if std::env::var_os("AGENTBATCH_CHAOS_KEEP").is_some() {
        let kept = bed.case.dir.keep();
        eprintln!("chaos: kept {}", kept.display());
    }
    bed.found
}
