//! A run shared by machines, against a real PostgreSQL: `run --queue` queues it once,
//! worker processes claim its tasks (each runs exactly once, a killed worker's tasks run
//! again after its lease), their team cap holds together, and `collect` writes a run
//! folder that compare and audit read like any other.

use std::collections::HashSet;
use std::process::{Child, Stdio};
use std::str::FromStr;
use std::time::Duration;

use rust_decimal::Decimal;

use crate::common::{bin, read_csv, signal, wait_until, Case};
use crate::postgres::fresh_database;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

/// Loops on get_time until a cap or max_turns stops it.
const LOOP: &str = "{ latency: 10ms, repeat_last: true, turns: [ { content: [ { text: working }, { tool_use: { name: get_time, input: {} } } ], usage: { output_tokens: 200 } } ] }";

fn job(name: &str, tasks: usize, extra: &str) -> String {
    let list: String = (0..tasks)
        .map(|i| format!("  - {{ id: t{i:03}, prompt: go }}\n"))
        .collect();
    format!(
        "name: {name}\nconcurrency: 4\n{extra}defaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 8, min_max_tokens: 128, max_repeats: off }}\n  sim: {LOOP}\ntasks:\n{list}"
    )
}

fn queue(case: &Case, file: &str, url: &str, run: &str) -> std::process::Output {
    case.agentbatch(&["run", file, "--queue", url, "--run-id", run])
}

fn worker(case: &Case, url: &str, run: &str, name: &str, lease: &str) -> Child {
    bin()
        .args([
            "worker", url, "--run-id", run, "--quiet", "--name", name, "--lease", lease,
        ])
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_ok(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn collect(case: &Case, url: &str, run: &str) -> String {
    let out = case.agentbatch(&["collect", url, "--run-id", run]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kills a worker (kill -9) once it has answers behind it and requests in flight: a
/// transcript whose last line is a request or its reservation.
fn kill_with_requests_in_flight(worker: Child, transcripts: &std::path::Path) {
    let read = || -> Vec<String> {
        std::fs::read_dir(transcripts)
            .map(|d| {
                d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .collect()
            })
            .unwrap_or_default()
    };
    wait_until(
        "the worker's requests in flight",
        Duration::from_secs(60),
        || {
            let all = read();
            all.iter().any(|t| t.contains("\"event\":\"response\""))
                && all.iter().any(|t| {
                    let last = t.lines().last().unwrap_or("");
                    last.contains("\"event\":\"request\"") || last.contains("\"event\":\"reserve\"")
                })
        },
    );
    signal(worker.id(), "KILL");
    let _ = worker.wait_with_output();
}

#[test]
fn three_workers_run_every_task_once_and_collect_writes_a_run_folder() {
    let url = fresh_database("three");
    let case = Case::new();
    case.write("job.yaml", &job("three", 24, ""));
    let out = queue(&case, "job.yaml", &url, "r");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("queued run r: 24 tasks") && said.contains("agentbatch worker"),
        "{said}"
    );
    // Queuing again adds nothing; another job under the same id is refused.
    let again = queue(&case, "job.yaml", &url, "r");
    assert!(String::from_utf8_lossy(&again.stdout).contains("already queued"));
    case.write("other.yaml", &job("other", 3, ""));
    let other = queue(&case, "other.yaml", &url, "r");
    assert_eq!(other.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&other.stderr).contains("another job file"));
    let workers: Vec<Child> = ["w1", "w2", "w3"]
        .iter()
        .map(|n| worker(&case, &url, "r", n, "30s"))
        .collect();
    for w in workers {
        wait_ok(w);
    }
    let said = collect(&case, &url, "r");
    assert!(said.contains("24 tasks: 24 done, 0 running"), "{said}");
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows.len(), 24);
    let keys: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!(keys.len(), 24, "every task exactly once");
    // Each worker wrote its own share, and the three shares are the run.
    let shares: usize = ["w1", "w2", "w3"]
        .iter()
        .map(|n| read_csv(&case.path(&format!("reports/workers/{n}/r/results.csv"))).len())
        .sum();
    assert_eq!(shares, 24);
    for r in &rows {
        assert_eq!(r["run_id"], "r");
        assert_eq!(r["stop_reason"], "max_turns", "{r:?}");
        let t = case.path(&format!("reports/r/{}", r["transcript"]));
        let audit = bin().args(["audit", t.to_str().unwrap()]).output().unwrap();
        assert_eq!(
            audit.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&audit.stdout)
        );
    }
    assert!(case.path("reports/r/summary.csv").is_file());
    // The collected folder has its page, with every task's transcript in it.
    assert!(said.contains("report.html"), "{said}");
    let page = std::fs::read_to_string(case.path("reports/r/report.html")).unwrap();
    for r in &rows {
        assert!(
            page.contains(&r["transcript"]),
            "{} is not on the page",
            r["transcript"]
        );
    }
    let run_json = std::fs::read_to_string(case.path("reports/r/run.json")).unwrap();
    assert!(run_json.contains("\"status\": \"finished\""), "{run_json}");
    // compare reads the collected folder like any run's (here against a run made here).
    let local = case.agentbatch(&["run", "job.yaml", "--run-id", "local", "--quiet"]);
    assert_eq!(local.status.code(), Some(0));
    let compare = case.agentbatch(&["compare", "reports/r", "reports/local", "--out", "cmp"]);
    assert_eq!(
        compare.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&compare.stderr)
    );
    // Neither the collected folder nor a worker's share is a run to resume by itself.
    for (dir, said) in [
        ("reports/r", "written by collect"),
        ("reports/workers/w1/r", "one worker's share"),
    ] {
        let out = case.agentbatch(&["run", "job.yaml", "--resume", dir]);
        assert_eq!(out.status.code(), Some(2), "{dir}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(said), "{dir}");
    }
    // A folder collect did not write is left alone.
    std::fs::create_dir_all(case.path("mine/r")).unwrap();
    let refused = case.agentbatch(&["collect", &url, "--run-id", "r", "--out", "mine"]);
    assert_eq!(refused.status.code(), Some(2));
}

#[test]
fn a_killed_workers_tasks_run_again_elsewhere_and_its_spend_stays_counted() {
    let url = fresh_database("killed");
    let case = Case::new();
    // Slow tasks, so the first worker is surely mid-task when it is killed.
    let slow = job(
        "killed",
        6,
        "teams:\n  blue: { cap: { usd: 50, period: day } }\n",
    )
    .replace("latency: 10ms", "latency: 400ms")
    .replace("  model:", "  team: blue\n  model:");
    case.write("job.yaml", &slow);
    assert_eq!(queue(&case, "job.yaml", &url, "k").status.code(), Some(0));
    let first = worker(&case, &url, "k", "doomed", "2s");
    let transcripts = case.path("reports/workers/doomed/k/transcripts");
    kill_with_requests_in_flight(first, &transcripts);
    let second = worker(&case, &url, "k", "heir", "2s");
    wait_ok(second);
    collect(&case, &url, "k");
    let rows = read_csv(&case.path("reports/k/results.csv"));
    let keys: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!((rows.len(), keys.len()), (6, 6), "every task exactly once");
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "max_turns"),
        "{rows:?}"
    );
    // What the killed worker had started and not finished, the other ran again.
    let finished_first: HashSet<String> =
        read_csv(&case.path("reports/workers/doomed/k/results.csv"))
            .iter()
            .map(|r| r["task_id"].clone())
            .collect();
    let started_first: HashSet<String> = std::fs::read_dir(&transcripts)
        .unwrap()
        .map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".jsonl")
                .to_string()
        })
        .collect();
    let cut_off: Vec<&String> = started_first.difference(&finished_first).collect();
    assert!(!cut_off.is_empty(), "the worker was killed mid-task");
    let heir: HashSet<String> = read_csv(&case.path("reports/workers/heir/k/results.csv"))
        .iter()
        .map(|r| r["task_id"].clone())
        .collect();
    for key in cut_off {
        assert!(heir.contains(key), "{key} ran again after the lease");
    }
    // The killed worker's reservations stay in the ledger: spent more than the rows say.
    let ledger = case.agentbatch(&["ledger", "--json", "--ledger", &url]);
    let v: serde_json::Value = serde_json::from_slice(&ledger.stdout).unwrap();
    let settled = d(v[0]["totals"]["settled"].as_str().unwrap());
    let reserved = d(v[0]["totals"]["reserved"].as_str().unwrap());
    let reported: Decimal = rows.iter().map(|r| d(&r["cost_usd"])).sum();
    assert!(
        reserved > Decimal::ZERO,
        "the killed worker's requests in flight stay held"
    );
    assert!(
        settled + reserved > reported,
        "{settled} + {reserved} against {reported}"
    );
}

#[test]
fn workers_share_one_team_cap_and_two_runs_share_it_too() {
    let url = fresh_database("cap");
    let case = Case::new();
    let capped = |name: &str| {
        job(
            name,
            20,
            "teams:\n  platform: { cap: { usd: 0.60, period: day } }\n",
        )
        .replace("max_turns: 8", "max_turns: 200")
        .replace("  model:", "  team: platform\n  model:")
    };
    case.write("a.yaml", &capped("a"));
    case.write("b.yaml", &capped("b"));
    assert_eq!(queue(&case, "a.yaml", &url, "ra").status.code(), Some(0));
    assert_eq!(queue(&case, "b.yaml", &url, "rb").status.code(), Some(0));
    let workers: Vec<Child> = [("ra", "a1"), ("ra", "a2"), ("rb", "b1")]
        .iter()
        .map(|(run, n)| worker(&case, &url, run, n, "30s"))
        .collect();
    for w in workers {
        wait_ok(w);
    }
    let mut spent = Decimal::ZERO;
    for run in ["ra", "rb"] {
        collect(&case, &url, run);
        let rows = read_csv(&case.path(&format!("reports/{run}/results.csv")));
        assert_eq!(rows.len(), 20, "{run}");
        spent += rows.iter().map(|r| d(&r["cost_usd"])).sum::<Decimal>();
    }
    eprintln!("three workers of two runs spent ${spent} of a $0.60 team cap");
    assert!(spent <= d("0.60"), "{spent}");
    assert!(spent >= d("0.582"), "at least 97% of the cap: {spent}");
}

/// The run's own pools (its max_cost_usd, and a team's within it) are kept in the
/// database when the run is shared: its workers spend from the same ones.
#[test]
fn a_runs_own_caps_hold_across_its_workers() {
    let url = fresh_database("runcaps");
    let case = Case::new();
    // (run, the job's extra lines, the team of every task, the cap, its stop reason)
    let runs = [
        ("whole", "max_cost_usd: 0.30\n", None, "0.30", "run_budget"),
        (
            "team",
            "teams:\n  blue: { max_cost_usd: 0.30 }\n",
            Some("blue"),
            "0.30",
            "team_budget",
        ),
    ];
    for (run, extra, team, cap, reason) in runs {
        let mut text = job(run, 30, extra).replace("max_turns: 8", "max_turns: 200");
        if let Some(t) = team {
            text = text.replace("  model:", &format!("  team: {t}\n  model:"));
        }
        let file = format!("{run}.yaml");
        case.write(&file, &text);
        assert_eq!(queue(&case, &file, &url, run).status.code(), Some(0));
        let workers: Vec<Child> = ["w1", "w2", "w3"]
            .iter()
            .map(|n| worker(&case, &url, run, &format!("{run}-{n}"), "30s"))
            .collect();
        for w in workers {
            wait_ok(w);
        }
        collect(&case, &url, run);
        let rows = read_csv(&case.path(&format!("reports/{run}/results.csv")));
        assert_eq!(rows.len(), 30, "{run}");
        let spent: Decimal = rows.iter().map(|r| d(&r["cost_usd"])).sum();
        eprintln!("{run}: three workers spent ${spent} of a ${cap} cap");
        let cap = d(cap);
        assert!(spent <= cap, "{run}: {spent}");
        assert!(
            spent >= cap * d("0.97"),
            "{run}: at least 97% of the cap: {spent}"
        );
        assert!(
            rows.iter().any(|r| r["stop_reason"] == reason),
            "{run}: {rows:?}"
        );
    }
}

#[test]
fn what_a_shared_run_cannot_keep_is_refused() {
    let url = fresh_database("refused");
    let case = Case::new();
    // A worker with another job file than the queued one is refused.
    case.write("ok.yaml", &job("ok", 2, ""));
    assert_eq!(queue(&case, "ok.yaml", &url, "ok").status.code(), Some(0));
    case.write("ok.yaml", &job("ok", 3, ""));
    let w = case.agentbatch(&["worker", &url, "--run-id", "ok"]);
    assert_eq!(w.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("not the job file"),
        "{}",
        String::from_utf8_lossy(&w.stderr)
    );
    let missing = case.agentbatch(&["worker", &url, "--run-id", "nope"]);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no run nope"));
}

/// Three workers, each allowed the provider's whole rate, against one server that
/// enforces it: paced together through the database, none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_pace_together_on_one_shared_rate_limit() {
    use agentbatch::sim::Sim;
    use std::sync::Arc;
    let url = fresh_database("rate");
    let case = Case::new();
    let sim = Arc::new(Sim::start_local().await.unwrap());
    let mut turns = String::new();
    for _ in 0..3 {
        turns.push_str("  - content: [ { tool_use: { name: get_time, input: {} } } ]\n");
    }
    turns.push_str("  - content: [ { text: done } ]\n");
    sim.register(
        "",
        Arc::new(serde_yaml::from_str(&format!("turns:\n{turns}")).unwrap()),
    );
    let limit = agentbatch::vocab::limits::RateLimits {
        rpm: Some(1200),
        itpm: None,
        otpm: None,
        burst: Duration::from_secs(1),
    };
    sim.set_limits(Some(&limit));
    let list: String = (0..30)
        .map(|i| format!("  - {{ id: t{i:03}, prompt: go }}\n"))
        .collect();
    case.write(
        "job.yaml",
        &format!(
            "name: rate\nconcurrency: 10\nproviders:\n  p: {{ protocol: anthropic, base_url: \"{}\", api_key_env: AB_TEST_KEY, rpm: 1200 }}\ndefaults:\n  provider: p\n  model: claude-haiku-4-5\n  tools: [get_time]\ntasks:\n{list}",
            sim.base_url()
        ),
    );
    // The machine that queues needs no provider key; a worker does, and one without
    // it is refused before it claims anything.
    let queued = bin()
        .args(["run", "job.yaml", "--queue", &url, "--run-id", "rate"])
        .env_remove("AB_TEST_KEY")
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(
        queued.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&queued.stderr)
    );
    let keyless = bin()
        .args([
            "worker", &url, "--run-id", "rate", "--quiet", "--name", "keyless",
        ])
        .env_remove("AB_TEST_KEY")
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(keyless.status.code(), Some(2));
    let said = String::from_utf8_lossy(&keyless.stderr);
    assert!(said.contains("AB_TEST_KEY is not set"), "{said}");
    let dir = case.dir.path().to_path_buf();
    let url2 = url.clone();
    tokio::task::spawn_blocking(move || {
        let workers: Vec<Child> = ["w1", "w2", "w3"]
            .iter()
            .map(|n| {
                bin()
                    .args(["worker", &url2, "--run-id", "rate", "--quiet", "--name", n])
                    .env("AB_TEST_KEY", "test")
                    .current_dir(&dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for w in workers {
            wait_ok(w);
        }
    })
    .await
    .unwrap();
    let log = sim.requests();
    assert_eq!(
        log.len(),
        120,
        "30 tasks of 4 requests, none refused and sent again"
    );
    assert_eq!(log.iter().filter(|r| r.status == 429).count(), 0, "no 429");
    // 120 requests at 1200 rpm, about 18 at once: over 5 seconds for all three.
    let span =
        log.iter().map(|r| r.at_ms).max().unwrap() - log.iter().map(|r| r.at_ms).min().unwrap();
    assert!(span >= 5000, "{span} ms: the three workers paced together");
    collect(&case, &url, "rate");
    let rows = read_csv(&case.path("reports/rate/results.csv"));
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "completed"),
        "{rows:?}"
    );
}

/// The launchers in docs/launch run command lines agentbatch accepts (the files are not
/// applied here: no cluster, no container engine).
#[test]
fn the_launchers_command_lines_are_ones_agentbatch_accepts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let k8s: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("docs/launch/kubernetes-workers.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(k8s["spec"]["completionMode"], "Indexed");
    let args: Vec<String> = k8s["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    // Parsed for real: only the database is missing (nothing listens on port 1).
    let out = bin()
        .args(&args)
        .env("AGENTBATCH_QUEUE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PostgreSQL at postgres://nobody@127.0.0.1:1/none"),
        "{err}"
    );
    let gha = std::fs::read_to_string(root.join("docs/launch/github-actions.yml")).unwrap();
    let _: serde_yaml::Value = serde_yaml::from_str(&gha).unwrap();
    for cmd in [
        "run jobs/repo-fix.yaml --queue",
        "worker \"$AGENTBATCH_QUEUE_URL\" --run-id",
        "collect \"$AGENTBATCH_QUEUE_URL\" --run-id",
    ] {
        assert!(gha.contains(cmd), "{cmd}");
    }
    let line = gha
        .lines()
        .find(|l| l.contains("agentbatch worker"))
        .unwrap()
        .trim()
        .trim_start_matches("- run: agentbatch ")
        .replace(
            "\"$AGENTBATCH_QUEUE_URL\"",
            "postgres://nobody@127.0.0.1:1/none",
        )
        .replace("\"$RUN_ID\"", "x")
        .replace("\"ci-${{ matrix.worker }}\"", "ci-1");
    let out = bin().args(line.split_whitespace()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PostgreSQL at"), "{line}: {err}");
    for path in ["Cargo.toml", "Cargo.lock", "src"] {
        assert!(root.join(path).exists(), "the Dockerfile copies {path}");
    }
}

/// The database drops every connection of the workers mid-run (a restart, a failover):
/// the next calls connect again and every task still ends exactly once. (Which call
/// meets a dead connection first is chance here; the uploader's retry of a result is
/// not singled out by this test.)
#[test]
fn a_dropped_connection_loses_no_result_and_runs_nothing_twice() {
    let url = fresh_database("dropped");
    let case = Case::new();
    let slow = job("dropped", 8, "").replace("latency: 10ms", "latency: 300ms");
    case.write("job.yaml", &slow);
    assert_eq!(queue(&case, "job.yaml", &url, "d").status.code(), Some(0));
    let w = worker(&case, &url, "d", "w", "3s");
    let transcripts = case.path("reports/workers/w/d/transcripts");
    wait_until("the worker's tasks", Duration::from_secs(60), || {
        std::fs::read_dir(&transcripts).is_ok_and(|d| d.count() >= 3)
    });
    let (u, db) = (url.clone(), url.rsplit('/').next().unwrap().to_string());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&u, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let n = client
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                     WHERE application_name = 'agentbatch' AND datname = $1",
                    &[&db],
                )
                .await
                .unwrap()
                .len();
            assert!(n > 0, "the worker's connections were cut");
        });
    })
    .join()
    .unwrap();
    wait_ok(w);
    collect(&case, &url, "d");
    let rows = read_csv(&case.path("reports/d/results.csv"));
    let keys: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!((rows.len(), keys.len()), (8, 8), "every task exactly once");
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "max_turns"),
        "{rows:?}"
    );
    assert!(
        !case.path("reports/d/superseded.csv").exists(),
        "no attempt lost its task"
    );
}

/// The issue's case: a worker killed while its requests hold money in the run's, a
/// team's and a team's day cap. The live worker's tasks and the re-leased ones must not
/// wait for money nobody will ever settle (before: every one waited its whole
/// time_limit in budget_wait and ended `time_limit` with 0 turns), and collect counts
/// the dead worker's spend (settled, and held in flight) as killed spend, so the run's
/// total is what the ledger charged it.
#[test]
fn a_dead_workers_reservations_hold_nobody_up_and_collect_counts_them() {
    let url = fresh_database("deadhold");
    let case = Case::new();
    let three_turns = "{ latency: 1s, turns: [ { content: [ { tool_use: { name: get_time, input: {} } } ], usage: { output_tokens: 120 } }, { content: [ { tool_use: { name: get_time, input: {} } } ], usage: { output_tokens: 120 } }, { content: [ { text: done } ], usage: { output_tokens: 40 } } ] }";
    let tasks: String = (0..12)
        .map(|i| {
            let team = if i % 2 == 0 { "red" } else { "blue" };
            format!("  - {{ id: t{i:03}, prompt: go, team: {team} }}\n")
        })
        .collect();
    case.write(
        "job.yaml",
        &format!(
            "name: deadhold\nconcurrency: 4\nmax_cost_usd: 0.12\nteams:\n  red: {{ max_cost_usd: 0.05 }}\n  blue: {{ cap: {{ usd: 0.05, period: day }} }}\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 6, max_cost_usd: 0.03, time_limit: 60s, min_max_tokens: 128, max_repeats: off }}\n  sim: {three_turns}\ntasks:\n{tasks}"
        ),
    );
    assert_eq!(queue(&case, "job.yaml", &url, "d").status.code(), Some(0));
    let started = std::time::Instant::now();
    let doomed = worker(&case, &url, "d", "doomed", "3s");
    let live = worker(&case, &url, "d", "live", "3s");
    kill_with_requests_in_flight(doomed, &case.path("reports/workers/doomed/d/transcripts"));
    wait_ok(live);
    let took = started.elapsed();
    let said = collect(&case, &url, "d");
    let rows = read_csv(&case.path("reports/d/results.csv"));
    let keys: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!(
        (rows.len(), keys.len()),
        (12, 12),
        "every task exactly once"
    );
    for r in &rows {
        assert!(
            ["completed", "run_budget", "team_budget", "cost_limit"]
                .contains(&r["stop_reason"].as_str()),
            "no task waits out its time limit for money a dead worker holds: {r:?}"
        );
    }
    assert!(
        took < Duration::from_secs(55),
        "the run took {took:?}: something waited out a 60 s time limit"
    );
    // The run's pool in the ledger: everything the run was charged, settled or held by
    // the dead worker's requests in flight.
    let ledger = case.agentbatch(&["ledger", "--json", "--ledger", &url]);
    let v: serde_json::Value = serde_json::from_slice(&ledger.stdout).unwrap();
    let run_pool = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["team"] == "(run)" && r["period"] == "run:d")
        .unwrap_or_else(|| panic!("the run's pool in {v}"));
    let charged = d(run_pool["totals"]["settled"].as_str().unwrap())
        + d(run_pool["totals"]["reserved"].as_str().unwrap());
    let summary = read_csv(&case.path("reports/d/summary.csv"));
    let total: Decimal = summary.iter().map(|r| d(&r["total_cost_usd"])).sum();
    let killed: Decimal = summary.iter().map(|r| d(&r["killed_cost_usd"])).sum();
    eprintln!(
        "a worker killed mid-run: the run took {took:?}; summary total ${total} (killed ${killed}); the ledger charged ${charged}"
    );
    assert!(
        killed > Decimal::ZERO,
        "the dead worker's spend: {summary:?}"
    );
    assert_eq!(
        total.normalize(),
        charged.normalize(),
        "the run's total is what the ledger charged it (killed {killed})"
    );
    assert!(charged <= d("0.12"), "the run's cap holds: {charged}");
    assert!(
        said.contains(&format!(
            "whole run, every attempt: ${:.4} charged",
            charged
        )) && said.contains("in attempts cut off by a kill"),
        "{said}"
    );
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("reports/d/run.json")).unwrap())
            .unwrap();
    let held = d(run_json["killed_with_workers"]["in_flight_usd"]
        .as_str()
        .unwrap());
    assert!(
        held > Decimal::ZERO && held <= killed,
        "the dead worker's requests in flight: {run_json}"
    );
}

/// What every transcript under `dir` (any depth) says was settled: what the
/// simulators answered and billed, as far as the processes lived to write it down.
fn settled_in_transcripts(dir: &std::path::Path) -> Decimal {
    let mut sum = Decimal::ZERO;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return sum;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sum += settled_in_transcripts(&p);
        } else if p.extension().is_some_and(|x| x == "jsonl") {
            for line in std::fs::read_to_string(&p).unwrap_or_default().lines() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                if v["event"] == "settle" {
                    if let Some(c) = v["cost_usd"].as_str() {
                        sum += d(c);
                    }
                }
            }
        }
    }
    sum
}

/// Issue 32's cap slices: three workers of a shared run and a runner of another run
/// on one team day cap in PostgreSQL, one worker killed with -9 midway. The workers
/// spend from slices of the cap; the runner reserves each request. The cap holds,
/// nearly all of it is spent, and every task of the shared run is in its results once.
#[test]
fn cap_slices_hold_a_shared_cap_exactly_through_a_killed_worker() {
    let url = fresh_database("slices");
    let case = Case::new();
    let cap = d("3.00");
    let capped = |name: &str, tasks: usize| {
        job(
            name,
            tasks,
            "teams:\n  platform: { cap: { usd: 3.00, period: day } }\n",
        )
        .replace("max_turns: 8", "max_turns: 400")
        // A request's worst case is then about $0.004: what the killed worker's
        // requests in flight keep is a small part of the cap.
        .replace(
            "  tools: [get_time]\n",
            "  tools: [get_time]\n  max_tokens: 256\n",
        )
        .replace("  model:", "  team: platform\n  model:")
    };
    case.write("shared.yaml", &capped("shared", 24));
    case.write("alone.yaml", &capped("alone", 8));
    assert_eq!(
        queue(&case, "shared.yaml", &url, "s").status.code(),
        Some(0)
    );
    let doomed = worker(&case, &url, "s", "doomed", "2s");
    let workers: Vec<Child> = ["w1", "w2"]
        .iter()
        .map(|n| worker(&case, &url, "s", n, "2s"))
        .collect();
    let runner = bin()
        .args(["run", "alone.yaml", "--quiet", "--run-id", "alone"])
        .env("AGENTBATCH_LEDGER_URL", &url)
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kill_with_requests_in_flight(doomed, &case.path("reports/workers/doomed/s/transcripts"));
    let heir = worker(&case, &url, "s", "heir", "2s");
    for w in workers {
        wait_ok(w);
    }
    wait_ok(heir);
    wait_ok(runner);
    collect(&case, &url, "s");
    let rows = read_csv(&case.path("reports/s/results.csv"));
    let keys: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!(
        (rows.len(), keys.len()),
        (24, 24),
        "every task exactly once"
    );
    // Near the end a request is shrunk to what the cap can pay (down to 128 tokens),
    // so a 200-token answer may hit its max_tokens.
    let alone = read_csv(&case.path("reports/alone/results.csv"));
    let odd: Vec<_> = rows
        .iter()
        .chain(alone.iter())
        .filter(|r| {
            !["team_budget", "completed", "max_turns", "model_max_tokens"]
                .contains(&r["stop_reason"].as_str())
        })
        .map(|r| (&r["task_id"], &r["stop_reason"], &r["stop_detail"]))
        .collect();
    assert!(odd.is_empty(), "{odd:?}");
    let ledger = case.agentbatch(&["ledger", "--json", "--ledger", &url]);
    let v: serde_json::Value = serde_json::from_slice(&ledger.stdout).unwrap();
    let day = v
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["team"] == "platform")
        .unwrap_or_else(|| panic!("the team's day in {v}"));
    let settled = d(day["totals"]["settled"].as_str().unwrap());
    let reserved = d(day["totals"]["reserved"].as_str().unwrap());
    let stale = d(day["totals"]["stale"].as_str().unwrap());
    // Everything any process lived to record as billed, the killed worker included.
    // (Each process's own transcripts: the collected run folder holds copies.)
    let billed = settled_in_transcripts(&case.path("reports/workers"))
        + settled_in_transcripts(&case.path("reports/alone"));
    eprintln!(
        "cap slices: ${settled} settled, ${stale} kept by the killed worker (${reserved} reserved), ${billed} billed as the transcripts say, of a ${cap} cap"
    );
    assert_eq!(
        reserved, stale,
        "nothing is held but what the dead worker kept"
    );
    assert!(settled + stale <= cap, "overshoot: {settled} + {stale}");
    assert!(billed <= cap, "billed past the cap: {billed}");
    assert!(
        billed <= settled + stale,
        "the ledger counts all that was billed: {billed} against {settled} + {stale}"
    );
    assert!(
        billed >= settled,
        "the ledger settled {settled}, more than billed {billed}"
    );
    assert!(
        settled >= cap * d("0.95"),
        "at least 95% of the cap spent: {settled} (the dead worker kept {stale})"
    );
    // The dead worker's slice is charged to the run, and to the team.
    let summary = read_csv(&case.path("reports/s/summary.csv"));
    let killed: Decimal = summary.iter().map(|r| d(&r["killed_cost_usd"])).sum();
    assert!(
        killed >= stale,
        "collect counts what the killed worker kept: {killed} against {stale}"
    );
}

/// The worker image's build stage copies everything the crate is built from: what
/// Cargo.toml's `include` lists (a file missing there, build.rs once, breaks the image
/// build, which the suite does not run yet).
#[test]
fn the_dockerfile_copies_what_the_crate_includes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml_like::Included =
        toml_like::included(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap());
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let copied: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .flat_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            parts[..parts.len() - 1].to_vec()
        })
        .collect();
    assert!(!manifest.0.is_empty());
    for path in manifest.0 {
        let top = path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap()
            .to_string();
        assert!(
            copied.contains(&top.as_str()),
            "the Dockerfile's build stage does not copy {top} (Cargo.toml includes {path}): {copied:?}"
        );
    }
    for arg in [
        "ARG BUILD_IMAGE=",
        "ARG RUNTIME_IMAGE=",
        "FROM ${BUILD_IMAGE} AS build",
        "FROM ${RUNTIME_IMAGE}",
        "ARG AGENTBATCH_COMMIT",
    ] {
        assert!(dockerfile.contains(arg), "{arg}");
    }
}

/// Cargo.toml's `include` list, read without a TOML parser (one line of strings).
mod toml_like {
    pub struct Included(pub Vec<String>);

    pub fn included(manifest: &str) -> Included {
        let line = manifest
            .lines()
            .find(|l| l.starts_with("include = ["))
            .expect("Cargo.toml has an include list");
        Included(
            line.split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect(),
        )
    }
}
