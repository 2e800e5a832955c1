//! Governance: hard caps for runs, teams and periods (also across processes and a
//! kill -9), pacing to rate limits, 429 handling, retries, wrap-up.

use std::collections::HashMap;
use std::process::Stdio;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbatch::model::Usage;
use agentbatch::sim::Sim;
use agentbatch::vocab::price;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::common::{bin, num, read_csv, wait_until, Case, Ran};

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

/// Loops on get_time until a cap stops it; the clock's seconds repeat within a second,
/// so the jobs that run it long turn `max_repeats` off.
const LOOP: &str = "{ latency: 10ms, repeat_last: true, turns: [ { content: [ { text: working }, { tool_use: { name: get_time, input: {} } } ], usage: { output_tokens: 200 } } ] }";

fn tasks(n: usize) -> String {
    (0..n)
        .map(|i| format!("  - {{ id: t{i:03}, prompt: go }}\n"))
        .collect()
}

/// Runs `job.yaml` of `case` as run `r` through the binary and kills it (SIGKILL) once
/// the simulator has received `requests` requests.
async fn run_and_kill_9_after(case: &Case, sim: &Sim, requests: u64) {
    let mut child = case.start_run(&[]);
    let start = Instant::now();
    while sim.received() < requests {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "only {} requests arrived",
            sim.received()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

fn cost(row: &HashMap<String, String>) -> Decimal {
    d(&row["cost_usd"])
}

/// Prices what the simulator itself reported as usage for one answered request.
fn billed(ran: &Ran, model: &str) -> Decimal {
    billed_by(&ran.sim, model)
}

/// What `sim` billed: every answer it gave, priced at `model`'s built-in rates.
fn billed_by(sim: &Sim, model: &str) -> Decimal {
    let price = price::lookup(&Default::default(), model).unwrap();
    sim.requests()
        .iter()
        .filter_map(|r| r.response.as_ref())
        .map(|m| {
            let u = &m["usage"];
            price.cost(&Usage {
                input_tokens: u["input_tokens"].as_u64().unwrap(),
                output_tokens: u["output_tokens"].as_u64().unwrap(),
                cache_read_tokens: u["cache_read_input_tokens"].as_u64().unwrap(),
                cache_write_tokens: u["cache_creation_input_tokens"].as_u64().unwrap(),
                ..Default::default()
            })
        })
        .sum()
}

fn budget_stops(ran: &Ran) -> Vec<Value> {
    ran.rows()
        .iter()
        .filter(|r| r["turns"] != "0")
        .flat_map(|r| ran.events(&r["task_id"], "budget_stop"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_cap_binds_exactly_with_200_tasks_in_flight() {
    let case = Case::new();
    let ran = case
        .run(&format!(
            "name: caps\nconcurrency: 200\nteams:\n  platform: {{ max_cost_usd: 2 }}\ndefaults:\n  team: platform\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 40, min_max_tokens: 128, max_repeats: off }}\n  sim: {LOOP}\ntasks:\n{}",
            tasks(200)
        ))
        .await;
    let rows = ran.rows();
    assert_eq!(rows.len(), 200);
    let cap = d("2");
    let spent: Decimal = rows.iter().map(cost).sum();
    assert!(spent <= cap, "spent {spent} > cap {cap}");
    assert_eq!(
        billed(&ran, "claude-sonnet-4-5"),
        spent,
        "the report is what the provider billed"
    );
    let stops = budget_stops(&ran);
    assert!(!stops.is_empty(), "the cap should have bound");
    let mut cheapest = Decimal::MAX;
    for s in &stops {
        let left = d(s["left_usd"].as_str().unwrap());
        let smallest = d(s["smallest_request_usd"].as_str().unwrap());
        // no stop while unreserved money remained for the request
        assert!(
            left < smallest,
            "stopped with ${left} left for a ${smallest} request: {s}"
        );
        cheapest = cheapest.min(smallest);
    }
    // the cap is used to within one request
    assert!(
        cap - spent < cheapest,
        "left {} of the cap, a request needs {cheapest}",
        cap - spent
    );
    for r in rows
        .iter()
        .filter(|r| r["stop_reason"] == "team_budget" && r["turns"] == "0")
    {
        assert_eq!(cost(r), Decimal::ZERO);
    }
    assert_eq!(rows.iter().filter(|r| r["team"] == "platform").count(), 200);
}

#[tokio::test]
async fn an_exhausted_run_pool_starts_no_new_task() {
    let case = Case::new();
    let ran = case
        .run(&format!(
            "name: caps\nconcurrency: 4\nmax_cost_usd: 0.05\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 40, min_max_tokens: 128, max_repeats: off }}\n  sim: {LOOP}\ntasks:\n{}",
            tasks(30)
        ))
        .await;
    let rows = ran.rows();
    assert_eq!(rows.len(), 30);
    let spent: Decimal = rows.iter().map(cost).sum();
    assert!(spent <= d("0.05"), "{spent}");
    let not_started: Vec<_> = rows
        .iter()
        .filter(|r| r["stop_detail"].contains("not started"))
        .collect();
    assert!(!not_started.is_empty());
    for r in not_started {
        assert_eq!(r["stop_reason"], "run_budget", "{r:?}");
        assert_eq!(r["turns"], "0");
        assert_eq!(cost(r), Decimal::ZERO);
        assert!(r["transcript"].is_empty(), "{r:?}");
        assert!(!case
            .path(&format!("reports/r1/transcripts/{}.jsonl", r["task_id"]))
            .exists());
    }
    // a task that started but could not afford its next request says why, in numbers
    for r in rows
        .iter()
        .filter(|r| r["stop_reason"] == "run_budget" && !r["stop_detail"].contains("not started"))
    {
        assert!(
            r["stop_detail"].contains("cannot pay for the smallest request"),
            "{r:?}"
        );
    }
}

#[test]
fn two_runner_processes_share_one_persistent_team_cap() {
    let case = Case::new();
    case.write(
        "job.yaml",
        &format!(
            "name: shared\nconcurrency: 15\nledger: ledger.sqlite\nteams:\n  platform: {{ cap: {{ usd: 0.40, period: day }} }}\ndefaults:\n  team: platform\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 40, min_max_tokens: 128, max_repeats: off }}\n  sim: {LOOP}\ntasks:\n{}",
            tasks(30)
        ),
    );
    let spawn = |id: &str| {
        bin()
            .args(["run", "job.yaml", "--quiet", "--run-id", id])
            .current_dir(case.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let spent: Decimal = ["a", "b"]
        .iter()
        .flat_map(|id| read_csv(&case.path(&format!("reports/{id}/results.csv"))))
        .map(|r| cost(&r))
        .sum();
    assert!(spent <= d("0.40"), "both runs together spent {spent}");
    assert!(spent > d("0.35"), "the cap should be nearly used: {spent}");
    let out = bin()
        .args(["ledger", "--json", "--ledger", "ledger.sqlite"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows[0]["team"], "platform");
    assert_eq!(d(rows[0]["totals"]["settled"].as_str().unwrap()), spent);
    assert_eq!(
        d(rows[0]["totals"]["reserved"].as_str().unwrap()),
        Decimal::ZERO
    );
    let table = bin()
        .args(["ledger", "--ledger", "ledger.sqlite"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("platform") && table.contains("day:"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runner_leaves_every_settled_and_in_flight_reservation_in_the_ledger() {
    let case = Case::new();
    let sim = Arc::new(Sim::start_local().await.unwrap());
    let script: agentbatch::sim::script::Script = serde_yaml::from_str(
        "turns:\n  - content: [ { tool_use: { name: get_time, input: {} } } ]\n  - latency: 30s\n    content: [ { text: never } ]\n",
    )
    .unwrap();
    let script = Arc::new(script);
    for i in 0..8 {
        sim.register(&format!("t{i:03}"), script.clone());
    }
    case.write(
        "job.yaml",
        &format!(
            "name: killed\nconcurrency: 8\nledger: ledger.sqlite\nproviders:\n  sim: {{ base_url: \"{}\" }}\nteams:\n  platform: {{ cap: {{ usd: 10, period: month }} }}\ndefaults:\n  team: platform\n  model: claude-sonnet-4-5\n  tools: [get_time]\ntasks:\n{}",
            sim.base_url(),
            tasks(8)
        ),
    );
    run_and_kill_9_after(&case, &sim, 16).await;
    let store = agentbatch::govern::store::SqliteStore::open(&case.path("ledger.sqlite")).unwrap();
    use agentbatch::govern::store::CapStore;
    let rows = store.report(Some("platform"), chrono::Utc::now()).unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    // every request that reached the provider has its entry: 8 settled, 8 in flight
    assert_eq!(row.entries, 16);
    let price = price::lookup(&Default::default(), "claude-sonnet-4-5").unwrap();
    let answered: Decimal = sim
        .requests()
        .iter()
        .filter_map(|r| r.response.as_ref())
        .map(|m| {
            let u = &m["usage"];
            price.cost(&Usage {
                input_tokens: u["input_tokens"].as_u64().unwrap(),
                output_tokens: u["output_tokens"].as_u64().unwrap(),
                ..Default::default()
            })
        })
        .sum();
    assert_eq!(
        row.totals.settled, answered,
        "settled spend is exactly what was billed"
    );
    assert!(
        row.totals.reserved > Decimal::ZERO,
        "the in-flight reservations are kept as spent"
    );
    let out = bin()
        .args(["ledger", "--ledger", "ledger.sqlite"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("month:"));
}

fn rate_job(server_rpm: u32, runner: &str, n: usize, turns: usize) -> String {
    let mut script = String::new();
    for _ in 0..turns - 1 {
        script.push_str("        - content: [ { tool_use: { name: get_time, input: {} } } ]\n");
    }
    script.push_str("        - content: [ { text: done } ]\n");
    format!(
        "name: rate\nconcurrency: {n}\nproviders:\n  sim:\n    server_limits: {{ rpm: {server_rpm} }}\n{runner}defaults:\n  model: claude-haiku-4-5\n  tools: [get_time]\n  sim:\n      turns:\n{script}tasks:\n{}",
        tasks(n)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pacing_at_the_server_limit_sees_no_429() {
    let case = Case::new();
    let ran = case.run(&rate_job(1200, "    rpm: 1200\n", 24, 3)).await;
    let log = ran.sim.requests();
    assert_eq!(
        log.iter().filter(|r| r.status == 429).count(),
        0,
        "paced requests must not be refused"
    );
    assert_eq!(log.len(), 72);
    let rows = ran.rows();
    assert!(rows.iter().all(|r| r["stop_reason"] == "completed"));
    assert!(
        rows.iter().map(|r| num(r, "rate_wait_ms")).sum::<u64>() > 0,
        "pacing waits are reported"
    );
    // 72 requests at 1200 rpm with a burst of about 20 take over 2.5 s
    let span =
        log.iter().map(|r| r.at_ms).max().unwrap() - log.iter().map(|r| r.at_ms).min().unwrap();
    assert!(span >= 2500, "{span} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_429s_pause_the_whole_provider_and_every_task_completes() {
    let case = Case::new();
    let ran = case.run(&rate_job(600, "    rpm: 60000\n", 30, 2)).await;
    let log = ran.sim.requests();
    let limited: Vec<_> = log.iter().filter(|r| r.status == 429).collect();
    assert!(
        !limited.is_empty(),
        "the runner was configured above the server's limit"
    );
    let rows = ran.rows();
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "completed"),
        "{rows:?}"
    );
    assert!(rows.iter().map(|r| num(r, "retries")).sum::<u64>() >= limited.len() as u64);
    // After the first 429 (retry-after: 1 s) nobody sends anything until the pause ends,
    // apart from requests already on their way.
    let first = limited.iter().map(|r| r.at_ms).min().unwrap();
    let during_pause = log
        .iter()
        .filter(|r| r.at_ms > first + 300 && r.at_ms < first + 900)
        .count();
    assert_eq!(
        during_pause, 0,
        "requests arrived while the provider was paused"
    );
    let paused = rows
        .iter()
        .flat_map(|r| ran.events(&r["task_id"], "attempt_failed"))
        .filter(|e| e["rate_limited"] == true)
        .count();
    assert_eq!(paused, limited.len());
}

#[tokio::test]
async fn retry_rules_follow_the_sdks() {
    let case = Case::new();
    let one = |id: &str, fault: &str| {
        format!("  - id: {id}\n    prompt: p\n    sim: {{ turns: [ {{ faults: [ {fault} ], content: [ {{ text: ok }} ] }} ] }}\n")
    };
    let tasks = [
        one("forbidden", "{ status: 403 }"),
        one("not-found", "{ status: 404 }"),
        one("should-not", "{ status: 500, should_retry: false }"),
        one("should", "{ status: 400, should_retry: true }"),
        one("conflict", "{ status: 409 }"),
        one(
            "throttled",
            "{ status: 429, retry_after: 100ms }, { status: 429, retry_after: 100ms }",
        ),
        one(
            "no-wait-429",
            "{ status: 429 }, { status: 429 }, { status: 429 }",
        ),
        one("quota", "{ status: 429, should_retry: false }"),
        one("long-wait", "{ status: 429, retry_after: 2h }"),
    ]
    .concat();
    let started = Instant::now();
    let ran = case
        .run(&format!(
            "name: retries\nproviders:\n  sim: {{ max_rate_limit_retries: 1 }}\ndefaults:\n  model: claude-sonnet-4-5\ntasks:\n{tasks}"
        ))
        .await;
    for (task, stop, retries) in [
        ("forbidden", "provider_error", 0),
        ("not-found", "provider_error", 0),
        ("should-not", "provider_error", 0),
        ("should", "completed", 1),
        ("conflict", "completed", 1),
        // a 429 with a wait retries on max_rate_limit_retries (1 here)
        ("throttled", "rate_limited", 1),
        // one without a wait (a spend cap, most likely) on max_retries (2)
        ("no-wait-429", "rate_limited", 2),
        ("quota", "rate_limited", 0),
        // a wait over 60 s is not honoured: backoff instead (the SDKs' rule)
        ("long-wait", "completed", 1),
    ] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], stop, "{task}: {row:?}");
        assert_eq!(num(&row, "retries"), retries, "{task}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "nothing waited for the 2h retry-after"
    );
    assert_eq!(ran.row("throttled")["outcome"], "error");
    let quota = ran.row("quota");
    assert!(
        quota["stop_detail"].contains("x-should-retry: false"),
        "{quota:?}"
    );
    assert!(ran.row("not-found")["stop_detail"].contains("check the model id"));
}

#[tokio::test]
async fn wrap_up_sends_the_last_allowed_request_with_tools_off() {
    let case = Case::new();
    let ran = case
        .run(&format!(
            "name: wrap\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 3, wrap_up: true, show_budget: true }}\n  sim: {LOOP}\ntasks:\n  - {{ id: t, prompt: go }}\n"
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let reqs = ran.requests("t");
    assert_eq!(reqs.len(), 3);
    assert!(reqs[1].body.get("tool_choice").is_none());
    assert_eq!(reqs[2].body["tool_choice"]["type"], "none");
    let last_user = reqs[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let texts: Vec<&str> = last_user["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert!(texts.iter().any(|t| t.contains("last turn")), "{texts:?}");
    assert!(
        texts.iter().any(|t| t.contains("1 model request(s) left")),
        "{texts:?}"
    );
    let first = reqs[0].body["messages"][0]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(first[0]["text"], "go");
    assert!(first[1]["text"]
        .as_str()
        .unwrap()
        .contains("3 model request(s) left"));
    assert_eq!(ran.events("t", "wrap_up")[0]["why"], "max_turns");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_concurrency_limits_only_that_team() {
    let case = Case::new();
    let slow = "{ latency: 300ms, turns: [ { content: [ { text: ok } ] } ] }";
    let mut tasks = String::new();
    for i in 0..6 {
        tasks.push_str(&format!("  - {{ id: a{i}, prompt: p, team: a }}\n"));
    }
    for i in 0..2 {
        tasks.push_str(&format!("  - {{ id: b{i}, prompt: p, team: b }}\n"));
    }
    let ran = case
        .run(&format!(
            "name: teams\nconcurrency: 8\nteams:\n  a: {{ concurrency: 2 }}\n  b: {{}}\ndefaults:\n  model: claude-sonnet-4-5\n  sim: {slow}\ntasks:\n{tasks}"
        ))
        .await;
    let rows = ran.rows();
    let span = |r: &HashMap<String, String>| {
        let t = |k: &str| {
            chrono::DateTime::parse_from_rfc3339(&r[k])
                .unwrap()
                .timestamp_millis()
        };
        (t("started_at"), t("finished_at"))
    };
    let a: Vec<(i64, i64)> = rows.iter().filter(|r| r["team"] == "a").map(span).collect();
    for (s, _) in &a {
        let overlapping = a.iter().filter(|(s2, e2)| s2 <= s && s < e2).count();
        assert!(
            overlapping <= 2,
            "{overlapping} tasks of team a in flight at once"
        );
    }
    let first_a = a.iter().map(|x| x.0).min().unwrap();
    for r in rows.iter().filter(|r| r["team"] == "b") {
        assert!(span(r).0 - first_a < 200, "team b waited for team a");
    }
}

#[test]
fn validate_shows_each_cap_against_the_worst_case() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: v\nmax_cost_usd: 3\nteams:\n  platform: { max_cost_usd: 1, concurrency: 2, rpm: 50, itpm: 200000, cap: { usd: 100, period: week } }\ndefaults:\n  team: platform\n  model: claude-sonnet-4-5\n  limits: { max_cost_usd: 0.75 }\n  sim: { turns: [ { content: [ { text: hi } ] } ] }\ntasks:\n  - { id: a, prompt: p }\n  - { id: b, prompt: p }\n",
    );
    let out = bin()
        .args(["validate", "job.yaml"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("run: max_cost_usd $3; worst case of its 2 task(s): $1.5"),
        "{text}"
    );
    assert!(text.contains("team platform: max_cost_usd $1 per run, $100 per week (persistent ledger), concurrency 2, rpm 50, itpm 200000"), "{text}");
    assert!(
        text.contains(
            "warning: team platform: the cap $1 is below the worst case of its 2 task(s), $1.5"
        ),
        "{text}"
    );
    assert!(!text.contains("warning: the run"), "{text}");

    case.write("bad.yaml", "name: v\ndefaults: { team: nope, model: m, sim: { turns: [ { content: [ { text: hi } ] } ] } }\ntasks:\n  - { id: a, prompt: p }\n");
    let out = bin()
        .args(["validate", "bad.yaml"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("bad.yaml:2:19: defaults.team: unknown team \"nope\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giving_up_while_waiting_for_money_leaves_nothing_reserved() {
    use agentbatch::govern::store::{CapStore, SqliteStore};
    use agentbatch::report::ProgressMode;
    use agentbatch::run::{self, RunOptions};
    let case = Case::new();
    let ledger = case.path("ledger.sqlite");
    // $0.03 a day: one worst-case first request (about $0.02) at a time
    let job = |tasks: &str| {
        format!(
            "name: waits\nconcurrency: 3\nteams:\n  t: {{ cap: {{ usd: 0.03, period: day }} }}\ndefaults:\n  team: t\n  model: claude-sonnet-4-5\ntasks:\n{tasks}"
        )
    };
    let holder = job("  - { id: holder, prompt: p, sim: { latency: 2s, turns: [ { content: [ { text: done } ] } ] } }\n");
    let waiters = job(
        "  - { id: impatient, prompt: p, limits: { time_limit: 400ms }, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n  - { id: patient, prompt: p, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    );
    let sim = Arc::new(Sim::start_local().await.unwrap());
    let start = |yaml: String, id: &'static str| {
        let path = case.write(&format!("{id}.yaml"), &yaml);
        let plan = agentbatch::job::load(&path, &agentbatch::tools::Registry::builtin()).unwrap();
        let mut opts = RunOptions::new(case.path("reports"));
        opts.run_id = Some(id.into());
        opts.progress = ProgressMode::Quiet;
        opts.sim = Some(sim.clone());
        opts.ledger = Some(ledger.clone());
        tokio::spawn(run::run(plan, opts))
    };
    let first = start(holder, "first");
    while sim.received() < 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = start(waiters, "second");
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let rows = read_csv(&case.path("reports/second/results.csv"));
    let row = |id: &str| rows.iter().find(|r| r["task_id"] == id).unwrap().clone();
    let impatient = row("impatient");
    assert_eq!(impatient["stop_reason"], "time_limit", "{impatient:?}");
    assert!(
        impatient["stop_detail"].contains("waiting for the team or run budget"),
        "{impatient:?}"
    );
    assert_eq!(cost(&impatient), Decimal::ZERO);
    assert_eq!(row("patient")["stop_reason"], "completed");
    let totals = SqliteStore::open(&ledger)
        .unwrap()
        .report(Some("t"), chrono::Utc::now())
        .unwrap();
    assert_eq!(
        totals[0].totals.reserved,
        Decimal::ZERO,
        "a reservation was left behind"
    );
    let spent: Decimal = ["first", "second"]
        .iter()
        .flat_map(|id| read_csv(&case.path(&format!("reports/{id}/results.csv"))))
        .map(|r| cost(&r))
        .sum();
    assert_eq!(totals[0].totals.settled, spent);
}

/// After kill -9, a resume once waited for the dead process's period-cap reservations
/// (which can never settle) until its tasks hit `time_limit`, and summary.csv and the
/// printed totals left out what the killed attempts spent. Now the reservations count as
/// spent at once (nobody waits for them), and every report shows the killed spend, so
/// the totals a user reads are what the ledger charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_never_waits_for_a_dead_runs_reservations_and_reports_what_they_cost() {
    let case = Case::new();
    let sim = Arc::new(Sim::start_local().await.unwrap());
    let script: agentbatch::sim::script::Script = serde_yaml::from_str(
        "turns:\n  - content: [ { tool_use: { name: get_time, input: {} } } ]\n  - latency: 60s\n    content: [ { text: never } ]\n",
    )
    .unwrap();
    let script = Arc::new(script);
    for i in 0..4 {
        sim.register(&format!("t{i:03}"), script.clone());
    }
    let job = |cap: Decimal| {
        format!(
            "name: killed\nconcurrency: 4\nledger: ledger.sqlite\nproviders:\n  sim: {{ base_url: \"{}\" }}\nteams:\n  platform: {{ cap: {{ usd: {cap}, period: month }} }}\ndefaults:\n  team: platform\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ time_limit: 20s }}\ntasks:\n{}",
            sim.base_url(),
            tasks(4)
        )
    };
    case.write("job.yaml", &job(d("10")));
    run_and_kill_9_after(&case, &sim, 8).await;
    use agentbatch::govern::store::CapStore;
    let ledger = || {
        let store =
            agentbatch::govern::store::SqliteStore::open(&case.path("ledger.sqlite")).unwrap();
        store.report(Some("platform"), chrono::Utc::now()).unwrap()[0]
            .totals
            .clone()
    };
    let dead = ledger();
    assert!(
        dead.reserved > Decimal::ZERO && dead.stale.is_zero(),
        "{dead:?}"
    );
    // Room for less than one more request: the dead reservations hold the rest.
    case.write("job.yaml", &job(dead.settled + dead.reserved + d("0.001")));
    let started = Instant::now();
    let out = tokio::task::spawn_blocking({
        let dir = case.dir.path().to_path_buf();
        move || {
            bin()
                .args([
                    "run",
                    "job.yaml",
                    "--resume",
                    "reports/r",
                    "--force",
                    "--quiet",
                ])
                .current_dir(dir)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(took < Duration::from_secs(15), "the resume waited {took:?}");
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert_eq!(
            r["stop_reason"], "team_budget",
            "no waiting, no time_limit: {r:?}"
        );
    }
    let after = ledger();
    assert_eq!(
        after.stale, dead.reserved,
        "the dead reservations are stale, still spent"
    );
    assert_eq!(
        (after.settled, after.reserved),
        (dead.settled, dead.reserved)
    );
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("reports/r/run.json")).unwrap())
            .unwrap();
    let resume = &run["resumes"][0];
    assert_eq!(
        resume["abandoned_reservations_usd"],
        dead.reserved.normalize().to_string()
    );
    let killed = d(resume["killed_spent_usd"].as_str().unwrap());
    assert_eq!(
        killed,
        dead.settled + dead.reserved,
        "the killed attempts spent what the ledger holds"
    );
    let summary = read_csv(&case.path("reports/r/summary.csv"));
    assert_eq!(summary.len(), 1);
    let s = &summary[0];
    assert_eq!(d(&s["killed_cost_usd"]), killed);
    assert_eq!(d(&s["cost_usd"]), Decimal::ZERO);
    assert_eq!(
        d(&s["total_cost_usd"]),
        dead.settled + dead.reserved,
        "{s:?}"
    );
    assert!(
        stdout.contains(&format!("${:.4} charged", killed)) && stdout.contains("cut off by a kill"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("by team, every attempt: platform ${killed:.4}")),
        "the team's figure is what its cap counted: {stdout}"
    );
}

/// A run killed with -9 mid-task and resumed: the answers the killed attempt paid for
/// are reused for the same requests (the get_time calls fail the same way each time,
/// so the conversation repeats byte for byte), and only the rest is bought.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_reuses_the_answers_a_killed_attempt_paid_for() {
    let case = Case::new();
    let sim = Sim::start_local().await.unwrap();
    let mut turns = String::new();
    for _ in 0..6 {
        turns.push_str("  - content: [ { tool_use: { name: get_time, input: { timezone: Mars/Olympus } } } ]\n    latency: 300ms\n");
    }
    turns.push_str("  - content: [ { text: done } ]\n");
    sim.register(
        "t",
        std::sync::Arc::new(serde_yaml::from_str(&format!("turns:\n{turns}")).unwrap()),
    );
    case.write(
        "job.yaml",
        &format!(
            "name: replay\nproviders:\n  p: {{ protocol: anthropic, simulator: true, base_url: \"{}\" }}\ndefaults:\n  provider: p\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 20, max_repeats: off }}\ntasks:\n  - {{ id: t, prompt: go }}\n",
            sim.base_url()
        ),
    );
    run_and_kill_9_after(&case, &sim, 4).await;
    let before = sim.received();
    let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = crate::common::read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows[0]["stop_reason"], "completed", "{rows:?}");
    assert_eq!(rows[0]["turns"], "7");
    let text = std::fs::read_to_string(case.path("reports/r/transcripts/t.jsonl")).unwrap();
    let replayed = text
        .lines()
        .filter(|l| l.contains("\"event\":\"response\"") && l.contains("\"replayed\":true"))
        .count() as u64;
    // The killed attempt had at least three answers (the fourth request was sent).
    assert!(replayed >= 3, "{replayed} answers reused");
    let bought = sim.received() - before;
    assert_eq!(bought + replayed, 7, "{bought} requests sent by the re-run");
    // All told, the provider answered each of the 7 turns once, plus at most the one
    // request in flight at the kill.
    assert!(sim.received() <= 8, "{}", sim.received());
}

/// Tasks a team's cap stopped stay stopped on a plain resume; with
/// `--retry-budget-stops` (the cap raised) they run again, what they spent before still
/// counted, their old rows in superseded.csv.
#[test]
fn a_resume_runs_budget_stopped_tasks_again_only_when_asked() {
    let case = Case::new();
    let job = |cap: &str| {
        format!(
            "name: capped\nconcurrency: 1\nteams:\n  t: {{ max_cost_usd: {cap} }}\ndefaults:\n  team: t\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  tools: [get_time]\n  limits: {{ min_max_tokens: 128, max_repeats: off }}\n  sim:\n    turns:\n      - content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n        usage: {{ output_tokens: 500 }}\n      - content: [ {{ text: done }} ]\n        usage: {{ output_tokens: 500 }}\ntasks:\n  - {{ id: a, prompt: go }}\n  - {{ id: b, prompt: go }}\n  - {{ id: c, prompt: go }}\n  - {{ id: d, prompt: go }}\n"
        )
    };
    case.write("job.yaml", &job("0.05"));
    let run = |extra: &[&str]| {
        let id: &[&str] = if extra.is_empty() {
            &["--run-id", "r"]
        } else {
            &[]
        };
        let out = bin()
            .args(["run", "job.yaml", "--quiet"])
            .args(id)
            .args(extra)
            .current_dir(case.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.code().is_some_and(|c| c <= 1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[]);
    let rows = read_csv(&case.path("reports/r/results.csv"));
    let stopped: Vec<String> = rows
        .iter()
        .filter(|r| r["stop_reason"] == "team_budget")
        .map(|r| r["task_id"].clone())
        .collect();
    assert!(!stopped.is_empty(), "the cap binds: {rows:?}");
    let spent_first: f64 = rows
        .iter()
        .map(|r| r["cost_usd"].parse::<f64>().unwrap_or(0.0))
        .sum();

    // A plain resume, the cap raised: nothing to run, the stops stand.
    case.write("job.yaml", &job("1.00"));
    let resume = ["--resume", "reports/r", "--force"];
    run(&resume);
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(
        rows.iter()
            .filter(|r| r["stop_reason"] == "team_budget")
            .count(),
        stopped.len()
    );

    // Asked to, it runs them again: every task completes, the old rows kept apart.
    run(&[&resume[..], &["--retry-budget-stops"]].concat());
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "completed"),
        "{rows:?}"
    );
    let old = read_csv(&case.path("reports/r/superseded.csv"));
    let mut old_ids: Vec<&str> = old.iter().map(|r| r["task_id"].as_str()).collect();
    old_ids.sort();
    let mut want: Vec<&str> = stopped.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(old_ids, want);
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("reports/r/run.json")).unwrap())
            .unwrap();
    assert_eq!(run_json["resumes"][1]["retry_budget_stops"], true);
    let spent_before = run_json["resumes"][1]["spent_before_usd"]
        .as_str()
        .unwrap()
        .parse::<f64>()
        .unwrap();
    assert!(
        (spent_before - spent_first).abs() < 1e-9,
        "what the stopped attempts spent still counts: {spent_before} vs {spent_first}"
    );
}

/// A team's daily cap with `on_cap: wait`: the tasks it cannot pay for wait, holding
/// nothing, and `agentbatch ledger set-cap` (from another process) lifts them within a
/// second; they carry on with the same conversation and every task completes, the cap
/// held at every moment. With `--until`, a wait ends there with `team_budget`.
#[test]
fn tasks_wait_for_a_capped_period_and_a_raised_cap_lifts_them() {
    let case = Case::new();
    let job = |tasks: usize| {
        let ids: String = (0..tasks)
            .map(|i| format!("  - {{ id: t{i}, prompt: go }}\n"))
            .collect();
        format!(
            "name: waits\nconcurrency: {tasks}\nledger: ledger.sqlite\nteams:\n  t: {{ cap: {{ usd: 0.05, period: day, on_cap: wait }} }}\ndefaults:\n  team: t\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  tools: [get_time]\n  limits: {{ min_max_tokens: 1024, max_repeats: off, time_limit: 2m }}\n  sim:\n    turns:\n      - content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n        usage: {{ output_tokens: 400 }}\n      - content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n        usage: {{ output_tokens: 400 }}\n      - content: [ {{ text: done }} ]\n        usage: {{ output_tokens: 400 }}\ntasks:\n{ids}"
        )
    };
    case.write("job.yaml", &job(6));
    let ledger = || -> Value {
        let out = bin()
            .args(["ledger", "--json", "--ledger", "ledger.sqlite"])
            .current_dir(case.dir.path())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    let spent = |v: &Value| -> f64 {
        v.as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        r["totals"]["settled"]
                            .as_str()
                            .unwrap_or("0")
                            .parse::<f64>()
                            .unwrap()
                            + r["totals"]["reserved"]
                                .as_str()
                                .unwrap_or("0")
                                .parse::<f64>()
                                .unwrap()
                    })
                    .sum()
            })
            .unwrap_or(0.0)
    };
    let mut child = case.start_run(&[]);
    let dir = case.path("reports/r");
    let waiting = |dir: &std::path::Path| {
        (0..6)
            .filter(|i| {
                std::fs::read_to_string(dir.join(format!("transcripts/t{i}.jsonl")))
                    .unwrap_or_default()
                    .contains("on_cap: wait")
            })
            .count()
    };
    wait_until(
        "some task to wait for the cap",
        Duration::from_secs(60),
        || waiting(&dir) > 0,
    );
    // The cap holds while they wait.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(spent(&ledger()) <= 0.05 + 1e-9, "{}", ledger());
    assert!(!dir.join("results.csv").exists() || read_csv(&dir.join("results.csv")).len() < 6);
    let out = bin()
        .args([
            "ledger",
            "set-cap",
            "t",
            "5.00",
            "--ledger",
            "ledger.sqlite",
        ])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lifted = Instant::now();
    let status = child.wait().unwrap();
    assert!(status.success(), "the run ends well");
    let rows = read_csv(&dir.join("results.csv"));
    assert_eq!(rows.len(), 6);
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "completed"),
        "{rows:?}"
    );
    assert!(lifted.elapsed() < Duration::from_secs(30));
    let waited: Vec<&HashMap<String, String>> =
        rows.iter().filter(|r| num(r, "cap_wait_ms") > 0).collect();
    assert!(!waited.is_empty(), "cap_wait_ms counts the wait: {rows:?}");
    for r in &waited {
        let t = std::fs::read_to_string(dir.join(&r["transcript"])).unwrap();
        assert!(t.contains("\"cap_wait\""), "{t}");
        assert!(t.contains("\"granted\""), "{t}");
    }
    assert!(spent(&ledger()) <= 5.0);

    // A new run, the cap at what is spent already: every task waits, and --until ends
    // the waits with team_budget.
    let spent_now = spent(&ledger());
    let out = bin()
        .args([
            "ledger",
            "set-cap",
            "t",
            &format!("{spent_now:.6}"),
            "--ledger",
            "ledger.sqlite",
        ])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    case.write("job.yaml", &job(2));
    let until = (chrono::Utc::now() + chrono::Duration::seconds(3))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let started = Instant::now();
    let out = bin()
        .args([
            "run", "job.yaml", "--run-id", "r2", "--quiet", "--until", &until,
        ])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    let rows = read_csv(&case.path("reports/r2/results.csv"));
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["stop_reason"], "team_budget", "{r:?}");
        assert!(r["stop_detail"].contains("--until"), "{r:?}");
        assert!(num(r, "cap_wait_ms") >= 1000, "{r:?}");
    }
}

/// Three turns (two get_time calls, then done), 400 output tokens each. The calls ask
/// for a timezone that does not exist, so their results, and with them every request
/// body, are the same each time (a resume's replay can take the killed attempt's answers).
fn three_turns() -> Arc<agentbatch::sim::script::Script> {
    let call = "  - content: [ { tool_use: { name: get_time, input: { timezone: Mars/Olympus } } } ]\n    usage: { output_tokens: 400 }\n";
    let script = format!("turns:\n{call}{call}  - content: [ {{ text: done }} ]\n    usage: {{ output_tokens: 400 }}\n");
    Arc::new(serde_yaml::from_str(&script).unwrap())
}

/// A job of `n` three-turn tasks on the test's simulator, team `t` with a day cap of
/// `cap` that waits. The provider's configured rate keeps the adaptive rate (for a
/// server that states no limits) from pacing the first requests to a few a second.
fn waiting_job(sim: &Sim, n: usize, cap: &str) -> String {
    format!(
        "name: waits\nconcurrency: {n}\nledger: ledger.sqlite\nproviders:\n  sim: {{ base_url: \"{}\", rpm: 60000 }}\nteams:\n  t: {{ cap: {{ usd: {cap}, period: day, on_cap: wait }} }}\ndefaults:\n  team: t\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  tools: [get_time]\n  limits: {{ min_max_tokens: 1024, max_repeats: off, time_limit: 2m }}\ntasks:\n{}",
        sim.base_url(),
        tasks(n)
    )
}

/// `agentbatch ledger --json` of the case's ledger.sqlite.
fn ledger_rows(case: &Case) -> Vec<Value> {
    let out = case.agentbatch(&["ledger", "--json", "--ledger", "ledger.sqlite"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array().cloned().unwrap_or_default()
}

fn total(row: &Value, field: &str) -> Decimal {
    d(row["totals"][field].as_str().unwrap_or("0"))
}

/// The waits a run's rows show: each waited task's transcript has its `cap_wait` events
/// and the last one was granted. Returns how many rows waited.
fn check_granted_waits(dir: &std::path::Path, rows: &[HashMap<String, String>]) -> usize {
    let waited: Vec<&HashMap<String, String>> =
        rows.iter().filter(|r| num(r, "cap_wait_ms") > 0).collect();
    for r in &waited {
        let text = std::fs::read_to_string(dir.join(&r["transcript"])).unwrap();
        let waits: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"] == "cap_wait")
            .collect();
        assert!(!waits.is_empty(), "{text}");
        assert!(waits.iter().all(|e| e["ended"] == "granted"), "{waits:?}");
        let waited_ms: u64 = waits.iter().map(|e| e["waited_ms"].as_u64().unwrap()).sum();
        assert!(
            waited_ms.abs_diff(num(r, "cap_wait_ms")) < 500,
            "cap_wait_ms {} against the transcript's {waited_ms}",
            r["cap_wait_ms"]
        );
    }
    waited.len()
}

/// A day cap with `on_cap: wait` across a UTC midnight, played with the period clock
/// (`AGENTBATCH_PERIOD_CLOCK`) four seconds before one: the first tasks use the day's
/// cap up, the rest wait holding nothing, and at the rollover they carry on in the next
/// day with the same conversation. Each day's spend stays under the cap, the ledger's
/// spend is exactly what the simulator billed (nothing paid twice), every task completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_cap_that_waits_carries_tasks_over_midnight_within_each_days_cap() {
    let case = Case::new();
    let sim = Sim::start_local().await.unwrap();
    let n = 5;
    for i in 0..n {
        sim.register(&format!("t{i:03}"), three_turns());
    }
    // About $0.02 a task, $0.10 in all: a day's $0.08 pays for most of it, the rest
    // waits for the next day (whose cap pays for all that is left).
    case.write("job.yaml", &waiting_job(&sim, n, "0.08"));
    let child = bin()
        .args(["run", "job.yaml", "--run-id", "r"])
        .env(
            agentbatch::govern::clock::PERIOD_CLOCK_VAR,
            "2031-03-04T23:59:56Z",
        )
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("waiting for a team's period cap"),
        "the progress lines say that tasks wait: {stderr}"
    );
    let dir = case.path("reports/r");
    let rows = read_csv(&dir.join("results.csv"));
    assert_eq!(rows.len(), n);
    for r in &rows {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        assert_eq!(num(r, "turns"), 3, "{r:?}");
        // The same conversation: three requests in all, none sent again.
        let sent = sim
            .requests()
            .iter()
            .filter(|q| q.key == r["task_id"])
            .count();
        assert_eq!(sent, 3, "{r:?}");
    }
    assert!(
        check_granted_waits(&dir, &rows) > 0,
        "some tasks waited for the next day: {rows:?}"
    );
    let ledger = ledger_rows(&case);
    let periods: Vec<&str> = ledger
        .iter()
        .map(|r| r["period"].as_str().unwrap())
        .collect();
    assert_eq!(
        periods,
        ["day:2031-03-04", "day:2031-03-05"],
        "the period clock decides the day: {ledger:?}"
    );
    for r in &ledger {
        assert!(total(r, "settled") <= d("0.08"), "{r}");
        assert!(total(r, "settled") > Decimal::ZERO, "{r}");
        assert_eq!(total(r, "reserved"), Decimal::ZERO, "{r}");
    }
    assert!(
        total(&ledger[0], "settled") > d("0.05"),
        "the first day's cap was used up before the tasks waited: {ledger:?}"
    );
    let settled: Decimal = ledger.iter().map(|r| total(r, "settled")).sum();
    assert_eq!(
        settled,
        billed_by(&sim, "claude-sonnet-4-5"),
        "the ledger holds exactly what the provider billed"
    );
    let rows_cost: Decimal = rows.iter().map(cost).sum();
    assert_eq!(rows_cost, settled);
}

/// kill -9 while tasks wait for a used-up day cap (`on_cap: wait`), the cap raised with
/// `ledger set-cap`, then a resume: every task completes with one row, the answers the
/// killed attempt bought are replayed rather than bought again, and the ledger holds
/// exactly what the simulator billed, within the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_tasks_wait_for_the_cap_resumes_and_completes() {
    let case = Case::new();
    let sim = Sim::start_local().await.unwrap();
    let n = 4;
    for i in 0..n {
        sim.register(&format!("t{i:03}"), three_turns());
    }
    // $0.03 pays for a task and a half: no task can wait for long before all do.
    case.write("job.yaml", &waiting_job(&sim, n, "0.03"));
    let mut child = case.start_run(&[]);
    let dir = case.path("reports/r");
    // A task waits while its transcript has more waits started than ended; one that
    // finished has its `stop` line. Once every task is one or the other, nothing is in
    // flight, and nothing changes until the cap does.
    let settled_state = || {
        (0..n).all(|i| {
            let t = std::fs::read_to_string(dir.join(format!("transcripts/t{i:03}.jsonl")))
                .unwrap_or_default();
            let started = t.matches("on_cap: wait").count();
            let ended = t.matches("\"event\":\"cap_wait\"").count();
            started > ended || t.contains("\"event\":\"stop\"")
        })
    };
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the tasks never all waited"
        );
        if settled_state() {
            // Twice, a transcript flush apart, to be sure.
            tokio::time::sleep(Duration::from_millis(600)).await;
            if settled_state() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = ledger_rows(&case);
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(total(&before[0], "settled") <= d("0.03"), "{before:?}");
    assert_eq!(
        total(&before[0], "reserved"),
        Decimal::ZERO,
        "waiting tasks hold nothing: {before:?}"
    );
    let finished_before = read_csv(&dir.join("results.csv")).len();
    assert!(finished_before < n, "some tasks were waiting at the kill");
    let bought_before = sim.received();

    let out = case.agentbatch(&[
        "ledger",
        "set-cap",
        "t",
        "1.00",
        "--ledger",
        "ledger.sqlite",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tokio::task::spawn_blocking({
        let dir = case.dir.path().to_path_buf();
        move || {
            bin()
                .args(["run", "job.yaml", "--resume", "reports/r", "--quiet"])
                .current_dir(dir)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = read_csv(&dir.join("results.csv"));
    let mut ids: Vec<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    ids.sort();
    let want: Vec<String> = (0..n).map(|i| format!("t{i:03}")).collect();
    assert_eq!(ids, want, "one row per task");
    for r in &rows {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        assert_eq!(num(r, "turns"), 3, "{r:?}");
    }
    // Each of the 3 answers of each task was bought once: the killed attempts' answers
    // were replayed.
    assert_eq!(
        sim.received(),
        3 * n as u64,
        "{bought_before} bought before the kill"
    );
    let after = ledger_rows(&case);
    assert_eq!(after.len(), 1, "{after:?}");
    let settled = total(&after[0], "settled");
    assert!(settled <= d("1.00"), "{after:?}");
    assert_eq!(total(&after[0], "reserved"), Decimal::ZERO, "{after:?}");
    assert_eq!(
        settled,
        billed_by(&sim, "claude-sonnet-4-5"),
        "the ledger holds exactly what the provider billed"
    );
}
