//! Batch mode end to end through the binary, against the simulator's batch APIs: the
//! same rows as synchronous mode at half the cost (the shipped repo-fix suite, and a
//! tool loop on all three protocols), expired and errored items retried without being
//! billed, caps held, a task's time limit covering its wait in a batch, and max_wait
//! cancelling a batch when it passes.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde_json::Value;

use crate::common::{read_csv, Case};

fn dec(row: &HashMap<String, String>, col: &str) -> Decimal {
    Decimal::from_str(&row[col]).unwrap_or_else(|_| panic!("{col} = {:?}", row[col]))
}

fn run(case: &Case, job: &str, id: &str) -> (Vec<HashMap<String, String>>, String) {
    let out = case.agentbatch(&["run", job, "--run-id", id, "--quiet"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        read_csv(&case.path(&format!("reports/{id}/results.csv"))),
        said,
    )
}

fn by_task(rows: Vec<HashMap<String, String>>) -> HashMap<String, HashMap<String, String>> {
    rows.into_iter()
        .map(|r| (r["task_id"].clone(), r))
        .collect()
}

fn transcript(case: &Case, run: &str, task: &str) -> Vec<Value> {
    let text =
        std::fs::read_to_string(case.path(&format!("reports/{run}/transcripts/{task}.jsonl")))
            .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The columns a run in batch mode must give exactly as synchronous mode does.
const SAME: &[&str] = &[
    "outcome",
    "stop_reason",
    "turns",
    "tool_calls",
    "tool_errors",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "check_exit_code",
    "denied_calls",
];

fn same_rows_at_half_price(
    sync: &HashMap<String, HashMap<String, String>>,
    batch: &HashMap<String, HashMap<String, String>>,
) {
    assert_eq!(sync.len(), batch.len());
    for (task, s) in sync {
        let b = &batch[task];
        for col in SAME {
            assert_eq!(s[*col], b[*col], "{task}: {col}");
        }
        assert_eq!(
            dec(b, "cost_usd") * Decimal::TWO,
            dec(s, "cost_usd"),
            "{task}"
        );
        assert_eq!(b["batched_turns"], b["turns"], "{task}");
        assert_eq!(s["batched_turns"], "0", "{task}");
        assert_eq!(dec(b, "batch_saved_usd"), dec(b, "cost_usd"), "{task}");
        assert_eq!(s["batch_saved_usd"], "", "{task}");
    }
}

#[test]
fn the_repo_fix_suite_in_batch_mode_gives_the_synchronous_rows_at_half_the_cost() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs");
    let text = std::fs::read_to_string(root.join("repo-fix.yaml"))
        .unwrap()
        .replace(
            "    repo: fixtures/",
            &format!("    repo: {}/fixtures/", root.display()),
        )
        .replace(
            "    sim: sim/",
            &format!("    sim: {}/sim/", root.display()),
        );
    assert!(text.contains("defaults:\n"));
    let case = Case::new();
    case.write("sync.yaml", &text);
    case.write(
        "batch.yaml",
        &text.replace(
            "defaults:\n",
            "defaults:\n  batch: { mode: on, window: 300ms }\n",
        ),
    );
    let (sync, _) = run(&case, "sync.yaml", "run-s");
    let (batch, said) = run(&case, "batch.yaml", "run-b");
    assert!(said.contains("batch pricing saved $"), "{said}");
    let (sync, batch) = (by_task(sync), by_task(batch));
    // Tool output quotes workspace paths, which hold the run id: the two ids are as
    // long, so the token counts can be compared.
    same_rows_at_half_price(&sync, &batch);
    assert!(batch.values().any(|r| r["outcome"] == "pass"));
    // The agents made the same changes.
    for task in sync.keys() {
        let patch = |run: &str| {
            std::fs::read_to_string(case.path(&format!("reports/{run}/patches/{task}.diff")))
                .unwrap_or_default()
        };
        assert_eq!(patch("run-s"), patch("run-b"), "{task}");
    }
    // Every request went through a batch, its id written before its answer.
    for task in batch.keys() {
        let events = transcript(&case, "run-b", task);
        let joined: Vec<&Value> = events
            .iter()
            .filter(|e| e["event"] == "batch_joined")
            .collect();
        let answered = events.iter().filter(|e| e["event"] == "response").count();
        assert_eq!(joined.len(), answered, "{task}");
        let first_join = events.iter().position(|e| e["event"] == "batch_joined");
        let first_answer = events.iter().position(|e| e["event"] == "response");
        assert!(first_join < first_answer, "{task}");
        assert!(joined
            .iter()
            .all(|e| e["batch_id"].as_str().unwrap().starts_with("msgbatch_")));
    }
}

/// Three turns of get_time on each protocol, task ids that are and are not custom_ids.
fn loop_job(batch: &str, faults: &str) -> String {
    format!(
        "name: loop\nconcurrency: 8\nproviders:\n  sim-responses: {{ protocol: openai-responses, simulator: true }}\n  sim-chat: {{ protocol: openai-chat, simulator: true }}\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n{batch}  sim:\n    turns:\n      - content: [ {{ text: looking }}, {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n{faults}      - content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n      - content: [ {{ text: done }} ]\ntasks:\n  - {{ id: plain, prompt: go }}\n  - {{ id: with.dots_and-dashes.v2, prompt: go }}\n  - {{ id: resp, prompt: go, provider: sim-responses, model: gpt-5.4-mini }}\n  - {{ id: chat, prompt: go, provider: sim-chat, model: gpt-5.4-mini }}\n"
    )
}

const BATCH: &str = "  batch: { mode: on, window: 200ms }\n";

#[test]
fn all_three_protocols_give_the_same_rows_at_half_price_in_batch_mode() {
    let case = Case::new();
    case.write("sync.yaml", &loop_job("", ""));
    case.write("batch.yaml", &loop_job(BATCH, ""));
    let (sync, _) = run(&case, "sync.yaml", "run-s");
    let (batch, _) = run(&case, "batch.yaml", "run-b");
    let (sync, batch) = (by_task(sync), by_task(batch));
    same_rows_at_half_price(&sync, &batch);
    for r in batch.values() {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        assert_eq!(r["turns"], "3");
    }
    // summary.csv carries the batch figures too.
    let summary = read_csv(&case.path("reports/run-b/summary.csv"));
    assert_eq!(summary[0]["batched_turns"], "12");
    assert_eq!(
        Decimal::from_str(&summary[0]["batch_saved_usd"]).unwrap(),
        batch.values().map(|r| dec(r, "cost_usd")).sum::<Decimal>()
    );
}

#[test]
fn expired_and_errored_items_are_retried_and_never_billed() {
    let case = Case::new();
    // The second answer: first expired in its batch, then refused with a 529, then given.
    let faults = "        faults: [ { batch_expire: true }, { status: 529 } ]\n";
    let with_faults = loop_job(BATCH, "").replacen(
        "      - content: [ { tool_use: { name: get_time, input: {} } } ]\n",
        &format!(
            "      - content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n{faults}"
        ),
        1,
    );
    assert!(with_faults.contains("batch_expire"));
    case.write("faults.yaml", &with_faults);
    case.write("clean.yaml", &loop_job(BATCH, ""));
    let (clean, _) = run(&case, "clean.yaml", "clean");
    let (faulty, _) = run(&case, "faults.yaml", "faulty");
    let (clean, faulty) = (by_task(clean), by_task(faulty));
    for (task, f) in &faulty {
        let c = &clean[task];
        assert_eq!(f["stop_reason"], "completed", "{task}: {f:?}");
        assert_eq!(f["retries"], "2", "{task}");
        // What was billed is what the clean run paid: neither failed item cost anything.
        assert_eq!(f["cost_usd"], c["cost_usd"], "{task}");
        assert_eq!(f["input_tokens"], c["input_tokens"], "{task}");
        let events = transcript(&case, "faulty", task);
        let failed: Vec<String> = events
            .iter()
            .filter(|e| e["event"] == "attempt_failed")
            .map(|e| e["error"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(failed.len(), 2, "{task}: {failed:?}");
        assert!(failed[0].contains("expired"), "{task}: {failed:?}");
        assert!(failed[1].contains("529"), "{task}: {failed:?}");
        assert!(
            events
                .iter()
                .filter(|e| e["event"] == "attempt_failed")
                .all(|e| e["charged_usd"].is_null()),
            "{task}: a failed batch item is not charged"
        );
    }
}

#[test]
fn a_cost_cap_holds_in_batch_mode_at_batch_prices() {
    let case = Case::new();
    let looping = |batch: &str| {
        let tasks: String = (0..6)
            .map(|i| format!("  - {{ id: t{i}, prompt: go }}\n"))
            .collect();
        format!("name: capped\nconcurrency: 6\nteams:\n  t: {{ max_cost_usd: 0.30 }}\ndefaults:\n  team: t\n  model: claude-sonnet-4-5\n  tools: [get_time]\n{batch}  limits: {{ max_turns: 400, min_max_tokens: 128, max_repeats: off }}\n  sim: {{ repeat_last: true, turns: [ {{ content: [ {{ text: working }}, {{ tool_use: {{ name: get_time, input: {{}} }} }} ], usage: {{ output_tokens: 100 }} }} ] }}\ntasks:\n{tasks}")
    };
    case.write("sync.yaml", &looping(""));
    case.write(
        "batch.yaml",
        &looping("  batch: { mode: on, window: 100ms }\n"),
    );
    let turns = |rows: &[HashMap<String, String>]| -> u64 {
        rows.iter()
            .map(|r| r["turns"].parse::<u64>().unwrap())
            .sum()
    };
    let (sync, _) = run(&case, "sync.yaml", "run-s");
    let (rows, _) = run(&case, "batch.yaml", "run-b");
    let cap = Decimal::from_str("0.30").unwrap();
    for (name, rows) in [("sync", &sync), ("batch", &rows)] {
        let spent: Decimal = rows.iter().map(|r| dec(r, "cost_usd")).sum();
        assert!(spent <= cap, "{name}: {spent}");
        assert!(
            spent >= cap * Decimal::from_str("0.9").unwrap(),
            "{name}: {spent}: the cap was used"
        );
        assert!(
            rows.iter().all(|r| r["stop_reason"] == "team_budget"),
            "{name}: {rows:?}"
        );
    }
    // Half price: about twice the turns under the same cap.
    let (s, b) = (turns(&sync), turns(&rows));
    assert!(b * 10 >= s * 18, "{b} turns in batch mode against {s}");
}

#[test]
fn a_time_limit_covers_the_wait_in_a_batch_and_the_abandoned_batch_is_cancelled() {
    let case = Case::new();
    // A simulator of its own whose batches take a minute.
    let (mut sim, url) = on_standalone_sim(
        &case,
        "name: slow\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  batch: { mode: on, window: 100ms }\n  limits: { time_limit: 2s }\n  sim: { turns: [ { content: [ { text: done } ] } ] }\ntasks:\n  - { id: waits, prompt: go }\n",
        "60s",
    );
    let started = std::time::Instant::now();
    let (rows, _) = run(&case, "job.yaml", "slow");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert_eq!(rows[0]["stop_reason"], "time_limit", "{:?}", rows[0]);
    // The batch no task waits for is cancelled (shortly after the run ended: the pool
    // checks at its next poll).
    let seen = sim_batches(&url);
    let _ = sim.kill();
    let _ = sim.wait();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let cancels = seen[0]["calls"]["cancels_ms"].as_array().unwrap();
    assert_eq!(
        cancels.len(),
        1,
        "the abandoned batch was cancelled: {seen:?}"
    );
    assert_eq!(seen[0]["items"][0]["state"], "canceled", "{seen:?}");
}

/// `max_wait` cancels a batch when it passes, not at the next poll after it (polls
/// back off, 1.5 times longer each, to once a minute: a 2.5 s max_wait was cancelled at
/// the poll at 4 s, a 30 s one could wait out a step of almost 20 s). Measured on the
/// simulator's clock, from the batch's creation to its cancel request.
#[test]
fn max_wait_cancels_the_batch_when_it_passes() {
    let case = Case::new();
    let (mut sim, url) = on_standalone_sim(
        &case,
        "name: slow\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  batch: { mode: on, window: 100ms, max_wait: 2500ms }\n  sim: { turns: [ { content: [ { text: done } ] } ] }\ntasks:\n  - { id: waits, prompt: go }\n",
        "60s",
    );
    let (rows, _) = run(&case, "job.yaml", "slow");
    let seen = sim_batches(&url);
    let _ = sim.kill();
    let _ = sim.wait();
    assert_eq!(rows[0]["stop_reason"], "provider_error", "{:?}", rows[0]);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let created = seen[0]["created_ms"].as_u64().unwrap();
    let cancelled = seen[0]["calls"]["cancels_ms"][0].as_u64().unwrap();
    let after = cancelled - created;
    // 2.5 s, and a margin for a loaded machine well below the poll at 4 s.
    assert!(
        (2500..3400).contains(&after),
        "cancelled {after} ms after its creation, max_wait is 2.5 s: {seen:?}"
    );
    assert_eq!(seen[0]["items"][0]["state"], "canceled", "{seen:?}");
    // The task learns of it at once: its failure comes within a poll of the cancel.
    let events = transcript(&case, "slow", "waits");
    let at = |name: &str| {
        events
            .iter()
            .find(|e| e["event"] == name)
            .and_then(|e| e["t_ms"].as_u64())
            .unwrap_or_else(|| panic!("no {name} in {events:?}"))
    };
    let waited = at("attempt_failed") - at("batch_joined");
    assert!(
        waited < 3600,
        "the task heard of the cancel {waited} ms after joining"
    );
}

/// The simulator's batches, as `/_sim/batches` lists them.
fn sim_batches(url: &str) -> Vec<Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let text = reqwest::get(format!("{url}/_sim/batches"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

/// Writes `job` (whose tasks use the defaults' provider) as the case's job.yaml, starts
/// `agentbatch sim` for it with batches taking `delay`, and points the job at it.
/// Returns the simulator and its URL.
fn on_standalone_sim(case: &Case, job: &str, delay: &str) -> (std::process::Child, String) {
    case.write("job.yaml", job);
    let (sim, url) = crate::common::standalone_sim(case, "job.yaml", &["--batch-delay", delay]);
    case.write(
        "job.yaml",
        &job.replace(
            "defaults:\n",
            &format!("providers:\n  slow: {{ protocol: anthropic, simulator: true, base_url: \"{url}\" }}\ndefaults:\n  provider: slow\n"),
        ),
    );
    (sim, url)
}

/// Starts the run of job.yaml and kills it with -9 once every one of `tasks` has a
/// request waiting in a batch.
fn kill_while_in_a_batch(case: &Case, tasks: &[&str]) {
    let mut run = case.start_run(&[]);
    crate::common::wait_until(
        "both requests to join a batch",
        std::time::Duration::from_secs(20),
        || {
            tasks.iter().all(|t| {
                std::fs::read_to_string(case.path(&format!("reports/r/transcripts/{t}.jsonl")))
                    .unwrap_or_default()
                    .contains("batch_joined")
            })
        },
    );
    crate::common::signal(run.id(), "KILL");
    let _ = run.wait();
}

/// A run killed with -9 while its task waits in a batch; the resume finds the batch
/// from the transcript, cancels it or reads its result, and counts what it was billed,
/// not its reservation.
#[test]
fn a_batch_left_by_a_killed_run_is_found_on_resume_and_not_paid_twice() {
    // Two tasks in the killed run's one batch (one id a custom_id cannot carry): the
    // resume looks the batch up once for both.
    let tasks = ["waits", "also.v2"];
    for (delay, wait_before_resume, result) in [
        ("4s", 0, "cancelled before it was processed"),
        ("1500ms", 2500, "answered"),
    ] {
        let case = Case::new();
        let job = "name: killed\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  batch: { mode: on, window: 300ms }\n  limits: { max_cost_usd: 1.00 }\n  sim: { turns: [ { content: [ { text: done } ], usage: { output_tokens: 50 } } ] }\ntasks:\n  - { id: waits, prompt: go }\n  - { id: also.v2, prompt: go }\n";
        let (mut sim, url) = on_standalone_sim(&case, job, delay);
        kill_while_in_a_batch(&case, &tasks);
        std::thread::sleep(std::time::Duration::from_millis(wait_before_resume));
        let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{said}");
        assert_eq!(
            said.matches(&format!("was {result}")).count(),
            2,
            "{delay}: {said}"
        );
        let run_json: Value = serde_json::from_str(
            &std::fs::read_to_string(case.path("reports/r/run.json")).unwrap(),
        )
        .unwrap();
        let killed = Decimal::from_str(
            run_json["resumes"][0]["killed_spent_usd"]
                .as_str()
                .unwrap_or("x"),
        )
        .unwrap_or_else(|_| panic!("{}", run_json["resumes"]));
        let rows = read_csv(&case.path("reports/r/results.csv"));
        assert!(
            rows.iter().all(|r| r["stop_reason"] == "completed"),
            "{rows:?}"
        );
        let rerun: Decimal = rows.iter().map(|r| dec(r, "cost_usd")).sum();
        let replayed: usize = tasks
            .iter()
            .map(|t| {
                transcript(&case, "r", t)
                    .iter()
                    .filter(|e| e["event"] == "response" && e["replayed"] == true)
                    .count()
            })
            .sum();
        if result == "answered" {
            // Billed once, for the killed attempt, at its real (batch) price; the
            // re-run's identical requests take those answers and buy nothing.
            assert!(killed > Decimal::ZERO, "{delay}");
            assert!(rerun.is_zero(), "{delay}: {rerun}");
            assert_eq!(replayed, 2, "{delay}");
        } else {
            assert!(killed.is_zero(), "{delay}: {killed}");
            assert!(rerun > Decimal::ZERO, "{delay}");
            assert_eq!(replayed, 0, "{delay}");
            // The killed run's batch held both requests, and was cancelled once.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let seen: Vec<Value> = rt.block_on(async {
                let text = reqwest::get(format!("{url}/_sim/batches"))
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                serde_json::from_str(&text).unwrap()
            });
            let first = &seen[0];
            assert_eq!(first["items"].as_array().unwrap().len(), 2, "{seen:?}");
            assert_eq!(
                first["calls"]["cancels_ms"].as_array().unwrap().len(),
                1,
                "{seen:?}"
            );
        }
        let _ = sim.kill();
        let _ = sim.wait();
    }
}

/// A run killed while its requests wait in a batch, resumed with `--force` after the
/// job turned batch mode off: the old batch is still found and read, and its answers
/// are counted at the batch price they were billed at. (Recovery once looked only at
/// tasks the new job sends in batches, so those answers stayed counted at their
/// worst-case reservations.)
#[test]
fn a_resume_after_batch_mode_was_turned_off_still_settles_the_killed_batch() {
    let tasks = ["waits", "also.v2"];
    let case = Case::new();
    let job = "name: killed\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  batch: { mode: on, window: 300ms }\n  limits: { max_cost_usd: 1.00 }\n  sim: { turns: [ { content: [ { text: done } ], usage: { output_tokens: 50 } } ] }\ntasks:\n  - { id: waits, prompt: go }\n  - { id: also.v2, prompt: go }\n";
    let (mut sim, _url) = on_standalone_sim(&case, job, "1500ms");
    kill_while_in_a_batch(&case, &tasks);
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let now = std::fs::read_to_string(case.path("job.yaml")).unwrap();
    case.write("job.yaml", &now.replace("mode: on", "mode: off"));
    let out = case.agentbatch(&[
        "run",
        "job.yaml",
        "--resume",
        "reports/r",
        "--force",
        "--quiet",
    ]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert_eq!(said.matches("was answered").count(), 2, "{said}");
    // Each recovered answer costs half its synchronous price at the model's rates.
    for t in tasks {
        // The killed attempt's transcript, which the resume set aside.
        let events: Vec<Value> =
            std::fs::read_to_string(case.path(&format!("reports/r/transcripts/{t}.try1.jsonl")))
                .unwrap()
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect();
        let recovered = events
            .iter()
            .find(|e| e["event"] == "batch_recovered")
            .unwrap_or_else(|| panic!("{t}: no batch_recovered event"));
        let usage = &recovered["answer"]["usage"];
        let sync = Decimal::from(usage["input_tokens"].as_u64().unwrap()) * Decimal::from(3)
            + Decimal::from(usage["output_tokens"].as_u64().unwrap()) * Decimal::from(15);
        let expected = sync / Decimal::from(2_000_000);
        let cost = Decimal::from_str(recovered["cost_usd"].as_str().unwrap()).unwrap();
        assert_eq!(cost, expected, "{t}: {recovered}");
    }
    let _ = sim.kill();
    let _ = sim.wait();
}

/// A batch item refused with a 429 is the batch API's own limit: the batched task
/// waits before its next batch, and the provider's synchronous gate, which batched
/// requests skip, is not paused. (It was paused, so a task of the same provider that
/// does not batch waited for a limit it never hit.)
#[test]
fn a_429_inside_a_batch_does_not_pause_the_tasks_that_do_not_batch() {
    let case = Case::new();
    let job = "name: mixed\nconcurrency: 2\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  batch: { mode: on, window: 200ms }\n  limits: { max_turns: 10, max_repeats: off }\ntasks:\n  - id: batched\n    prompt: go\n    sim: { turns: [ { content: [ { text: done } ], faults: [ { status: 429 }, { status: 429 } ] } ] }\n  - id: direct\n    prompt: go\n    batch: { mode: off }\n    sim: { turns: [ { latency: 600ms, content: [ { tool_use: { name: get_time, input: {} } } ] }, { latency: 600ms, content: [ { tool_use: { name: get_time, input: {} } } ] }, { latency: 600ms, content: [ { tool_use: { name: get_time, input: {} } } ] }, { content: [ { text: done } ] } ] }\n";
    case.write("job.yaml", job);
    let (rows, _) = run(&case, "job.yaml", "r");
    let rows = by_task(rows);
    for r in rows.values() {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
    }
    assert_eq!(rows["batched"]["retries"], "2");
    let waited: u64 = rows["direct"]["rate_wait_ms"].parse().unwrap();
    assert!(
        waited < 100,
        "the direct task waited {waited} ms for a batch's 429"
    );
    let failed: Vec<Value> = transcript(&case, "r", "batched")
        .into_iter()
        .filter(|e| e["event"] == "attempt_failed")
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    for f in &failed {
        assert!(f["provider_paused_ms"].is_null(), "{f}");
        assert!(f["retry_in_ms"].as_u64().is_some(), "{f}");
    }
}
