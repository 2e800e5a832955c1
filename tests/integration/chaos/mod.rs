//! The chaos property test: many seeds of the chaos model (`sim: {chaos: ...}`) over repo
//! tasks (a git repository and a plain folder), all three protocols, the coding tools,
//! no network, a check command, and task, team and run cost caps, through the built
//! binary. After each run it checks the invariants of docs/ARCHITECTURE.md: no panic,
//! exit 0, one row per task, `agentbatch audit` clean on every transcript, no file
//! written outside a workspace, valid writes at the workspace root working, an
//! unexpected stop never a success, the simulator never refusing what the runner sent,
//! each task's cost equal to its settled costs plus its worst-case charges, the run's
//! total equal to its rows, no cap exceeded, and the report page's views built during
//! the run equal to what `agentbatch report` reads back from the transcripts.
//!
//! Default size: `DEFAULT_SEEDS` seeds from 0. A larger sweep, and replaying one seed:
//!
//!     AGENTBATCH_CHAOS_SEEDS=2000 cargo test --test integration chaos -- --nocapture
//!     AGENTBATCH_CHAOS_BASE=137 AGENTBATCH_CHAOS_SEEDS=1 cargo test --test integration chaos -- --nocapture
//!
//! (`AGENTBATCH_CHAOS_ONLY=3,17,240` runs just those seeds, `AGENTBATCH_CHAOS_ALL=1`
//! lists every finding, `AGENTBATCH_CHAOS_KEEP=1` keeps the run folders,
//! `AGENTBATCH_CHAOS_SHARED=N` plays the first N seeds again as shared runs on
//! PostgreSQL with a worker killed in each batch: 48 by default.) A seed
//! replays its own conversation exactly; what it shares with others (team and run
//! pools, the provider pauses of 429s) depends on the batch it runs in.

mod batch;
mod plan;
mod shared;
mod transcript;

use std::collections::{BTreeMap, BTreeSet};

use crate::common::{bin, read_csv, Case};

/// Seeds in a default run: a few hundred, which a debug build on two cores plays in
/// well under two minutes.
const DEFAULT_SEEDS: u64 = 240;
/// Seeds per run of the binary (a sweep is several runs, so a cap binding in one batch
/// does not starve the rest).
const BATCH: u64 = 240;
/// Seeds a default run plays again as shared runs, and seeds per shared run.
const DEFAULT_SHARED: u64 = 48;
const SHARED_BATCH: usize = 48;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// A failed invariant.
#[derive(Debug, Clone)]
pub(super) struct Finding {
    pub seed: u64,
    pub invariant: &'static str,
    pub detail: String,
}

fn report(found: &[Finding]) -> String {
    let mut by_invariant: BTreeMap<&str, Vec<&Finding>> = BTreeMap::new();
    for f in found {
        by_invariant.entry(f.invariant).or_default().push(f);
    }
    let mut s = String::new();
    for (invariant, fs) in &by_invariant {
        let seeds: BTreeSet<u64> = fs.iter().map(|f| f.seed).collect();
        s.push_str(&format!(
            "\n== {invariant}: {} finding(s), seeds {:?}\n",
            fs.len(),
            seeds
        ));
        let all = std::env::var_os("AGENTBATCH_CHAOS_ALL").is_some();
        let mut shown = BTreeSet::new();
        for f in fs {
            if shown.insert(f.seed) && (all || shown.len() <= 12) {
                s.push_str(&format!(
                    "  seed {} (task s{}): {}\n",
                    f.seed, f.seed, f.detail
                ));
            }
        }
    }
    if let Some(f) = found.first() {
        let seeds: BTreeSet<u64> = found.iter().map(|f| f.seed).collect();
        s.push_str(&format!(
            "\n(AGENTBATCH_CHAOS_ALL=1 lists every seed's finding)\nreplay one seed: AGENTBATCH_CHAOS_BASE={} AGENTBATCH_CHAOS_SEEDS=1 AGENTBATCH_CHAOS_KEEP=1 cargo test --test integration chaos -- --nocapture\nreplay the failing seeds together: AGENTBATCH_CHAOS_ONLY={} cargo test --test integration chaos -- --nocapture\n",
            f.seed,
            seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    s
}

/// The seeds of this run: `AGENTBATCH_CHAOS_ONLY`, else `AGENTBATCH_CHAOS_SEEDS` from
/// `AGENTBATCH_CHAOS_BASE`.
fn seeds() -> Vec<u64> {
    match std::env::var("AGENTBATCH_CHAOS_ONLY") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("AGENTBATCH_CHAOS_ONLY: {s:?} is not a seed"))
            })
            .collect(),
        Err(_) => {
            let base = env_u64("AGENTBATCH_CHAOS_BASE", 0);
            (base..base + env_u64("AGENTBATCH_CHAOS_SEEDS", DEFAULT_SEEDS)).collect()
        }
    }
}

#[test]
fn chaos_seeds_keep_every_invariant() {
    let mut found = Vec::new();
    for batch in seeds().chunks(BATCH as usize) {
        found.extend(batch::run_batch(batch));
    }
    assert!(
        found.is_empty(),
        "chaos found {} problem(s):{}",
        found.len(),
        report(&found)
    );
}

/// The first `AGENTBATCH_CHAOS_SHARED` seeds (default `DEFAULT_SHARED`) again as shared
/// runs, `SHARED_BATCH` at a time, a worker killed in each.
#[test]
fn chaos_seeds_keep_every_invariant_in_a_shared_run_with_a_worker_killed() {
    let n = env_u64("AGENTBATCH_CHAOS_SHARED", DEFAULT_SHARED) as usize;
    let seeds: Vec<u64> = seeds().into_iter().take(n).collect();
    let mut found = Vec::new();
    for batch in seeds.chunks(SHARED_BATCH) {
        found.extend(shared::run_shared_batch(batch));
    }
    assert!(
        found.is_empty(),
        "chaos (shared runs) found {} problem(s):{}",
        found.len(),
        report(&found)
    );
}

#[test]
fn chaos_scripts_load_from_files_and_every_bound_is_enforced_before_anything_runs() {
    let case = Case::new();
    plan::write_repo(&case, "plain");
    case.write(
        "sim/chaos.yaml",
        "chaos: { seed: 3, max_turns: 2, fault_percent: 0, misbehave_percent: 0 }\n",
    );
    case.write(
        "job.yaml",
        "name: files\ndefaults: { model: claude-sonnet-4-5, toolset: coding, repo: plain }\ntasks:\n  - { id: from-file, prompt: p, sim: sim/chaos.yaml }\n  - { id: inline, prompt: p, sim: { chaos: { seed: 4, max_turns: 2, fault_percent: 0, misbehave_percent: 0 } } }\n",
    );
    let ran = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
        .current_dir(case.dir.path())
        .output()
        .expect("the binary runs");
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let rows = read_csv(&case.path("reports/r/results.csv"));
    for r in &rows {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        assert_eq!(
            r["turns"], "2",
            "one turn of calls, then the final answer: {r:?}"
        );
    }
    let cases = [
        (
            "sim: { chaos: { seed: 1, max_calls: 65 } }",
            "chaos.max_calls: 65 is over the upper bound of 64",
        ),
        (
            "sim: { chaos: { seed: 1, max_string: 9000000 } }",
            "chaos.max_string: 9000000 is over the upper bound of 8388608",
        ),
        (
            "sim: { chaos: { seed: 1, outside: relative } }",
            "chaos.outside",
        ),
        ("sim: { chaos: { seed: 1 }, turns: [ {} ] }", "not both"),
        (
            "sim: { turns: [ { latency: 2h } ] }",
            "turns[0].latency: 2h is over the upper bound of 10m",
        ),
        (
            "sim: { turns: [ { usage: { output_tokens: 1000000001 } } ] }",
            "turns[0].usage.output_tokens: 1000000001 is over the upper bound of 1000000000",
        ),
    ];
    for (sim, expected) in cases {
        case.write(
            "bad.yaml",
            &format!("name: bad\ndefaults: {{ model: claude-sonnet-4-5 }}\ntasks:\n  - {{ id: a, prompt: p, {sim} }}\n"),
        );
        let out = bin()
            .args(["validate", "bad.yaml"])
            .current_dir(case.dir.path())
            .output()
            .expect("the binary runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sim}: {err}");
        assert!(
            err.contains(expected),
            "{sim}: expected {expected:?} in {err}"
        );
    }
}
