//! Correctness under load: hundreds of loops in flight at once against the simulator.
//! Every row and every request is accounted for: no tool round lost, no request
//! doubled. (Speed is the benchmark's business, not a test's.)

use std::collections::HashMap;

use crate::common::{job, num, Case};

const TASKS: usize = 300;
const ROUNDS: u64 = 3;

#[tokio::test]
async fn three_hundred_loops_in_flight_lose_and_double_nothing() {
    let case = Case::new();
    let turns =
        "      - content: [ { text: step }, { tool_use: { name: get_time, input: {} } } ]\n"
            .repeat(ROUNDS as usize);
    let tasks: String = (0..TASKS)
        .map(|i| format!("  - {{ id: t{i:03}, prompt: \"task {i}\" }}\n"))
        .collect();
    let yaml = job(
        &format!("  limits: {{ max_turns: 10 }}\n  sim:\n    latency: 20ms\n    turns:\n{turns}      - content: [ {{ text: done }} ]\n"),
        &tasks,
    )
    .replace("concurrency: 4", &format!("concurrency: {TASKS}"));
    let ran = case.run(&yaml).await;

    let rows = ran.rows();
    assert_eq!(rows.len(), TASKS, "one row per task");
    let mut seen = std::collections::HashSet::new();
    for r in &rows {
        assert!(
            seen.insert(r["task_id"].clone()),
            "row twice: {}",
            r["task_id"]
        );
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        assert_eq!(num(r, "turns"), ROUNDS + 1, "{r:?}");
        assert_eq!(num(r, "tool_calls"), ROUNDS, "{r:?}");
        assert_eq!(num(r, "tool_errors"), 0, "{r:?}");
        assert_eq!(num(r, "retries"), 0, "{r:?}");
    }

    // The simulator's log: per task exactly one request per step, in order, each
    // carrying the task's own prompt and one result per earlier tool round.
    let log = ran.sim.requests();
    assert_eq!(
        log.len(),
        TASKS * (ROUNDS as usize + 1),
        "no request lost or doubled"
    );
    let mut by_task: HashMap<&str, Vec<&agentbatch::sim::RecordedRequest>> = HashMap::new();
    for r in &log {
        assert_eq!(r.status, 200, "{:?}", r.error);
        by_task.entry(r.key.as_str()).or_default().push(r);
    }
    assert_eq!(by_task.len(), TASKS);
    for (key, mut reqs) in by_task {
        reqs.sort_by_key(|r| r.step);
        let steps: Vec<Option<usize>> = reqs.iter().map(|r| r.step).collect();
        assert_eq!(steps, [Some(0), Some(1), Some(2), Some(3)], "{key}");
        for (i, r) in reqs.iter().enumerate() {
            let messages = r.body["messages"].as_array().expect("messages");
            assert_eq!(messages.len(), 1 + 2 * i, "{key} step {i}");
            let prompt = format!(
                "task {}",
                key.trim_start_matches('t').trim_start_matches('0')
            );
            let first = messages[0]["content"].as_str().unwrap_or_default();
            assert!(
                first == prompt || (key == "t000" && first == "task 0"),
                "{key} got another task's conversation: {first}"
            );
            let results = messages
                .iter()
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .filter(|b| b["type"] == "tool_result")
                .count();
            assert_eq!(results, i, "{key} step {i}: one result per earlier round");
        }
    }
    // Transcripts: one per task, each ending with its stop.
    for r in &rows {
        let t = ran.transcript(&r["task_id"]);
        assert_eq!(
            t.last().map(|e| e["event"].clone()),
            Some("task_end".into()),
            "{}",
            r["task_id"]
        );
    }
}

#[test]
fn the_load_benchmarks_run_the_simulator_and_the_runner_as_separate_processes() {
    let case = Case::new();
    let run = |which: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentbatch"))
            .args(["bench", which, "--fraction", "0.02", "--out"])
            .arg(case.path("bench"))
            .output()
            .expect("binary runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let w1 = run("throughput");
    // Against a server that states its limits (as the providers do) and one that
    // states none (the adaptive rate's probe).
    assert_eq!(
        w1.matches("tasks completed 20/20; turns 120 of 120")
            .count(),
        2,
        "{w1}"
    );
    assert!(
        w1.contains("the simulator states 600000 rpm")
            && w1.contains("the simulator states no limits"),
        "{w1}"
    );
    assert!(
        w1.contains("CPU-s per 1,000 turns") && w1.contains("simulator (separate process)"),
        "{w1}"
    );
    let w3 = run("history");
    for turns in [50, 100, 200] {
        assert!(
            w3.contains(&format!("tasks completed 1/1; turns {turns} of {turns}")),
            "{w3}"
        );
    }
    assert!(w3.contains("w3 growth"), "{w3}");
}
