//! Matrix and epochs, summary.csv, resuming after a kill, and interruption with a grace
//! period: the job runner's side of comparing variants and of overnight runs.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{bin, job, read_csv, signal, wait_until, Case};

fn rows_in(path: &Path) -> usize {
    if path.exists() {
        read_csv(path).len()
    } else {
        0
    }
}

type Unit = (String, String, String);

fn units(rows: &[HashMap<String, String>]) -> BTreeSet<Unit> {
    rows.iter()
        .map(|r| {
            (
                r["task_id"].clone(),
                r["variant"].clone(),
                r["epoch"].clone(),
            )
        })
        .collect()
}

/// One tool round then an answer, `latency` per request.
fn tool_task(id: &str, latency: &str) -> String {
    format!(
        "  - id: {id}\n    prompt: p\n    sim: {{ latency: {latency}, turns: [ {{ content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }}\n"
    )
}

#[tokio::test]
async fn every_task_runs_once_per_variant_and_epoch_interleaved() {
    let case = Case::new();
    let tasks: String = ["a", "b", "c"]
        .iter()
        .map(|t| tool_task(t, "1ms"))
        .collect();
    let yaml = job("", &tasks).replace(
        "tasks:\n",
        "matrix:\n  model: [claude-sonnet-4-5, claude-haiku-4-5]\n  limits.max_turns: [1, 5]\nepochs: 2\ntasks:\n",
    );
    let ran = case.run(&yaml).await;
    let rows = ran.rows();
    assert_eq!(rows.len(), 3 * 4 * 2);
    assert_eq!(units(&rows).len(), 24, "no unit twice");
    // Each variant's own values reached the task.
    for r in &rows {
        assert_eq!(r["model"], r["matrix.model"], "{r:?}");
        let expected_stop = if r["matrix.limits.max_turns"] == "1" {
            "max_turns"
        } else {
            "completed"
        };
        assert_eq!(r["stop_reason"], expected_stop, "{r:?}");
        assert_eq!(
            r["variant"],
            format!(
                "limits.max_turns={},model={}",
                r["matrix.limits.max_turns"], r["matrix.model"]
            )
        );
    }
    // Plan order: epoch by epoch, task by task, the variants of a task side by side.
    let plan_order: Vec<String> = ran
        .outcome
        .summary
        .rows
        .iter()
        .map(|r| r.key.clone())
        .collect();
    assert_eq!(plan_order[0], "a--1-claude-sonnet-4-5--e1");
    assert_eq!(plan_order[3], "a--5-claude-haiku-4-5--e1");
    assert_eq!(plan_order[4], "b--1-claude-sonnet-4-5--e1");
    assert_eq!(plan_order[12], "a--1-claude-sonnet-4-5--e2");
    for key in &plan_order {
        assert!(
            ran.dir.join(format!("transcripts/{key}.jsonl")).exists(),
            "{key}"
        );
    }
    // The simulator saw each instance under its own key: 1 or 2 requests each.
    for r in &ran.outcome.summary.rows {
        let n = ran.requests(&r.key).len();
        assert_eq!(
            n,
            if r.variant.starts_with("limits.max_turns=1") {
                1
            } else {
                2
            },
            "{}",
            r.key
        );
    }
    // summary.csv: one row per variant, in plan order, with hand-checkable figures.
    let summary = read_csv(&ran.dir.join("summary.csv"));
    let names: Vec<&str> = summary.iter().map(|s| s["variant"].as_str()).collect();
    assert_eq!(
        names,
        [
            "limits.max_turns=1,model=claude-sonnet-4-5",
            "limits.max_turns=1,model=claude-haiku-4-5",
            "limits.max_turns=5,model=claude-sonnet-4-5",
            "limits.max_turns=5,model=claude-haiku-4-5",
        ]
    );
    for s in &summary {
        assert_eq!(s["tasks"], "6");
        // No check command: no verdicts, so no pass rate.
        assert_eq!(
            (
                s["graded"].as_str(),
                s["unchecked"].as_str(),
                s["pass_rate"].as_str()
            ),
            ("0", "6", "")
        );
        let budget = if s["matrix.limits.max_turns"] == "1" {
            "6"
        } else {
            "0"
        };
        assert_eq!(s["budget_decided"], budget);
        assert_eq!(s["stop_max_turns"], budget);
        let total: rust_decimal::Decimal = rows
            .iter()
            .filter(|r| r["variant"] == s["variant"])
            .map(|r| r["cost_usd"].parse::<rust_decimal::Decimal>().unwrap())
            .sum();
        assert_eq!(s["cost_usd"], total.normalize().to_string());
        let turns: u64 = rows
            .iter()
            .filter(|r| r["variant"] == s["variant"])
            .map(|r| r["turns"].parse::<u64>().unwrap())
            .sum();
        assert_eq!(s["turns"], turns.to_string());
    }
}

#[tokio::test]
async fn a_task_cannot_set_what_the_matrix_decides() {
    let case = Case::new();
    let yaml = "name: t\nmatrix:\n  model: [claude-sonnet-4-5, nope-model]\ndefaults: { provider: sim, limits: { max_cost_usd: 1 } }\ntasks:\n  - id: a\n    prompt: p\n    model: claude-haiku-4-5\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n";
    let path = case.write("job.yaml", yaml);
    let e = agentbatch::job::load(&path, &agentbatch::tools::Registry::builtin()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(":8:12: tasks[0].model: `model` is a matrix axis"),
        "{text}"
    );
    // A value that does not work is reported once, at its place in the matrix, however
    // many tasks it would reach.
    let yaml = yaml.replace("    model: claude-haiku-4-5\n", "")
        + "  - id: b\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n";
    let path = case.write("job.yaml", &yaml);
    let e = agentbatch::job::load(&path, &agentbatch::tools::Registry::builtin()).unwrap_err();
    let text = e.to_string();
    assert_eq!(e.diagnostics.len(), 1, "{text}");
    assert!(
        text.contains(":3:30: matrix.model[1]: model \"nope-model\" has no price"),
        "{text}"
    );
}

const SLOW_JOB_HEAD: &str = "name: overnight\nconcurrency: 2\nmatrix:\n  model: [claude-sonnet-4-5, claude-haiku-4-5]\ndefaults: { provider: sim, max_tokens: 1024, tools: [get_time], limits: { max_cost_usd: 1 } }\n";

fn overnight_job(latency: &str) -> String {
    let tasks: String = (1..=6)
        .map(|i| tool_task(&format!("t{i}"), latency))
        .collect();
    format!("{SLOW_JOB_HEAD}tasks:\n{tasks}")
}

#[test]
fn resume_after_kill_9_runs_only_what_is_missing() {
    let case = Case::new();
    case.write("job.yaml", &overnight_job("150ms"));
    // The reference: the same job, uninterrupted.
    let full = case.agentbatch(&["run", "job.yaml", "--run-id", "full", "--quiet"]);
    assert_eq!(
        full.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    let expected = units(&read_csv(&case.path("reports/full/results.csv")));
    assert_eq!(expected.len(), 12);

    let mut child = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let csv = case.path("reports/r/results.csv");
    wait_until("4 finished rows", Duration::from_secs(30), || {
        rows_in(&csv) >= 4
    });
    signal(child.id(), "KILL");
    child.wait().unwrap();
    let before = read_csv(&csv);
    assert!(before.len() < 12, "the kill came too late to test anything");
    let finished: HashMap<Unit, String> = before
        .iter()
        .map(|r| {
            (
                (
                    r["task_id"].clone(),
                    r["variant"].clone(),
                    r["epoch"].clone(),
                ),
                r["started_at"].clone(),
            )
        })
        .collect();

    let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = read_csv(&csv);
    assert_eq!(
        units(&after),
        expected,
        "the same rows as an uninterrupted run"
    );
    assert_eq!(after.len(), 12, "no row twice");
    for r in &after {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        let unit = (
            r["task_id"].clone(),
            r["variant"].clone(),
            r["epoch"].clone(),
        );
        if let Some(started) = finished.get(&unit) {
            assert_eq!(
                &r["started_at"], started,
                "a finished task ran again: {r:?}"
            );
        }
    }
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("reports/r/run.json")).unwrap())
            .unwrap();
    assert_eq!(run["status"], "finished");
    assert_eq!(run["resumes"][0]["kept_rows"], before.len());
    assert_eq!(run["resumes"][0]["tasks_to_run"], 12 - before.len());
    // Transcripts of tasks the kill cut off were set aside, not overwritten.
    let transcripts: Vec<String> = std::fs::read_dir(case.path("reports/r/transcripts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        transcripts.iter().filter(|t| !t.contains(".try")).count(),
        12
    );
    let summary = read_csv(&case.path("reports/r/summary.csv"));
    assert_eq!(summary.len(), 2);
    assert!(summary.iter().all(|s| s["tasks"] == "6"), "{summary:?}");

    // Nothing left: a second resume runs nothing and keeps every row.
    let again = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(read_csv(&csv).len(), 12);

    // A changed job is refused, naming the change, unless forced.
    case.write(
        "job.yaml",
        &overnight_job("150ms").replace("concurrency: 2", "concurrency: 3"),
    );
    let changed = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    assert_eq!(changed.status.code(), Some(2));
    let err = String::from_utf8_lossy(&changed.stderr);
    assert!(
        err.contains("concurrency: 2 -> 3") && err.contains("--force"),
        "{err}"
    );
    let forced = case.agentbatch(&[
        "run",
        "job.yaml",
        "--resume",
        "reports/r",
        "--force",
        "--quiet",
    ]);
    assert_eq!(
        forced.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );
}

#[tokio::test]
async fn infrastructure_failures_run_again_on_resume_unless_told_not_to() {
    let case = Case::new();
    // t1 always fails at the provider; t2 completes.
    let yaml = job(
        "",
        "  - id: t1\n    prompt: p\n    sim: { turns: [ { faults: [ { status: 400, message: bad } ], content: [ { text: hi } ] } ] }\n  - id: t2\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n",
    );
    let ran = case.run(&yaml).await;
    assert_eq!(ran.stop("t1"), "provider_error");
    let before = ran.sim.requests().len();
    case.resume(&ran.dir, &ran.sim, false, &[]).await;
    assert_eq!(
        ran.sim.requests().len(),
        before,
        "--no-retry-errors runs nothing here"
    );
    // With --only t2, t1's row is not this resume's to replace.
    {
        case.resume(&ran.dir, &ran.sim, true, &["t2"]).await;
        assert_eq!(ran.sim.requests().len(), before);
        assert_eq!(read_csv(&ran.dir.join("results.csv")).len(), 2);
        assert!(!ran.dir.join("superseded.csv").exists());
    }
    let out = case.resume(&ran.dir, &ran.sim, true, &[]).await;
    assert_eq!(out.summary.rows.len(), 1);
    assert_eq!(out.summary.rows[0].task_id, "t1");
    assert_eq!(ran.sim.requests().len(), before + 1, "only t1 ran again");
    let rows = read_csv(&ran.dir.join("results.csv"));
    assert_eq!(rows.len(), 2, "the old t1 row is replaced, not duplicated");
    let superseded = read_csv(&ran.dir.join("superseded.csv"));
    assert_eq!(superseded.len(), 1);
    assert_eq!(superseded[0]["task_id"], "t1");
    assert!(ran.dir.join("transcripts/t1.try1.jsonl").exists());
}

#[test]
fn sigterm_drains_and_the_grace_period_ends_in_cancellation() {
    let case = Case::new();
    let slow = "    sim: { latency: 30s, turns: [ { content: [ { text: hi } ] } ] }\n";
    let fast = "    sim: { latency: 1500ms, turns: [ { content: [ { text: hi } ] } ] }\n";
    case.write(
        "job.yaml",
        &format!("name: x\nconcurrency: 2\ndefaults: {{ model: claude-sonnet-4-5 }}\ntasks:\n  - id: quick\n    prompt: p\n{fast}  - id: stuck\n    prompt: p\n{slow}  - id: waiting\n    prompt: p\n{slow}"),
    );
    let child = case.start_run(&["--grace", "3s"]);
    case.wait_for_request("stuck");
    let sent = Instant::now();
    signal(child.id(), "TERM");
    let out = child.wait_with_output().unwrap();
    let took = sent.elapsed();
    assert_eq!(out.status.code(), Some(130));
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(15),
        "{took:?}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("terminated: starting no new tasks") && err.contains("3s grace"),
        "{err}"
    );
    assert!(err.contains("grace period of 3s over"), "{err}");
    let rows = read_csv(&case.path("reports/r/results.csv"));
    let stop = |id: &str| rows.iter().find(|r| r["task_id"] == id).unwrap()["stop_reason"].clone();
    assert_eq!(
        stop("quick"),
        "completed",
        "a running task finishes within the grace period"
    );
    assert_eq!(stop("stuck"), "cancelled");
    assert_eq!(stop("waiting"), "cancelled");
    // The request cut off in flight may be billed: it is charged.
    let stuck = rows.iter().find(|r| r["task_id"] == "stuck").unwrap();
    assert!(stuck["cost_usd"].parse::<f64>().unwrap() > 0.0, "{stuck:?}");
    assert!(case.path("reports/r/summary.csv").exists());
}

#[tokio::test]
async fn a_resumed_run_counts_what_it_spent_before_against_its_cap() {
    let case = Case::new();
    // t2 fails at the provider first (costs nothing); t1 then spends $0.00675 of the
    // run's $0.01. On resume t2 runs again, and the $0.00325 left is less than its
    // smallest request (256 output tokens at $15/Mtok): it must not start.
    let yaml = "name: carry\nconcurrency: 1\nmax_cost_usd: 0.01\ndefaults: { provider: sim, model: claude-sonnet-4-5, max_tokens: 1024 }\ntasks:\n  - id: t2\n    prompt: p\n    sim: { turns: [ { faults: [ { status: 400, message: bad } ], content: [ { text: hi } ] } ] }\n  - id: t1\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ], usage: { input_tokens: 1000, output_tokens: 250 } } ] }\n";
    let ran = case.run(yaml).await;
    assert_eq!(ran.stop("t2"), "provider_error");
    assert_eq!(ran.row("t1")["cost_usd"], "0.00675");
    let before = ran.sim.requests().len();
    let out = case.resume(&ran.dir, &ran.sim, true, &[]).await;
    assert_eq!(
        out.summary.rows[0].stop_reason.as_str(),
        "run_budget",
        "{:?}",
        out.summary.rows[0]
    );
    assert_eq!(
        ran.sim.requests().len(),
        before,
        "no request: the cap was already spent"
    );
}

#[test]
fn the_matrix_reads_defaults_as_written_and_refuses_fields_that_would_override_it() {
    let case = Case::new();
    let registry = agentbatch::tools::Registry::builtin();
    // An inline script in `defaults` survives the matrix.
    let ok = "name: t\nmatrix:\n  model: [claude-sonnet-4-5, claude-haiku-4-5]\ndefaults:\n  provider: sim\n  sim: { turns: [ { content: [ { text: hi } ] } ] }\ntasks:\n  - { id: a, prompt: p }\n";
    let plan = agentbatch::job::load(&case.write("ok.yaml", ok), &registry)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.tasks.len(), 2);
    // A task's `tools` would decide the `toolset` axis; its whole `reasoning` would
    // decide `reasoning.effort`.
    let bad = "name: t\nmatrix:\n  toolset: [coding, readonly]\n  reasoning.effort: [low, high]\nproviders:\n  o: { protocol: openai-responses, simulator: true }\ndefaults: { provider: o, model: gpt-5.4, sim: { turns: [ { content: [ { text: hi } ] } ] } }\ntasks:\n  - id: a\n    prompt: p\n    tools: [get_time]\n    reasoning: { summary: auto }\n";
    let e = agentbatch::job::load(&case.write("bad.yaml", bad), &registry).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("tasks[0].tools: `toolset` is a matrix axis"),
        "{text}"
    );
    assert!(
        text.contains("tasks[0].reasoning: `reasoning.effort` is a matrix axis"),
        "{text}"
    );
}

#[test]
fn a_run_folder_in_use_cannot_be_resumed() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: x\ndefaults: { model: claude-sonnet-4-5 }\ntasks:\n  - id: slow\n    prompt: p\n    sim: { latency: 30s, turns: [ { content: [ { text: hi } ] } ] }\n",
    );
    let mut child = case.start_run(&[]);
    case.wait_for_request("slow");
    let t = case.path("reports/r/transcripts/slow.jsonl");
    let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    signal(child.id(), "KILL");
    child.wait().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another agentbatch process"));
    assert!(t.exists(), "the running task's transcript was left alone");
}
