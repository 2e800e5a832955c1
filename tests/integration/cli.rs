//! The command line, through the built binary: exit codes, error messages with
//! file:line:column, the demo, rows written as tasks finish, interruption, secrets.

use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbatch::sim::Sim;

use crate::common::{bin, read_csv, signal, Case};

fn run(args: &[&str], cwd: &Path) -> Output {
    bin()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const SCRIPT: &str = "{ turns: [ { content: [ { text: hi } ] } ] }";

fn assert_invalid(case: &Case, yaml: &str, expected: &[&str]) {
    case.write("job.yaml", yaml);
    for cmd in ["validate", "run"] {
        let out = run(
            &[cmd, "job.yaml", "--out", "reports"][..if cmd == "run" { 4 } else { 2 }],
            case.dir.path(),
        );
        assert_eq!(out.status.code(), Some(2), "{cmd}: {}", stderr(&out));
        let err = stderr(&out);
        for e in expected {
            assert!(err.contains(e), "{cmd}: expected {e:?} in:\n{err}");
        }
    }
    assert!(
        !case.path("reports").exists(),
        "nothing may run for an invalid job"
    );
}

#[test]
fn broken_job_files_exit_2_naming_file_line_column_and_field() {
    let case = Case::new();
    assert_invalid(&case, "name: x\ntasks: [\n  - id: a\n", &["job.yaml:"]);
    let out = run(&["validate", "job.yaml"], case.dir.path());
    assert!(regex_like_position(&stderr(&out)), "{}", stderr(&out));

    assert_invalid(
        &case,
        &format!("name: x\ndefaults: {{ model: m, sim: {SCRIPT} }}\ntasks:\n  - id: a\n    promt: hello\n"),
        &["job.yaml:5:5: tasks[0]: unknown field `promt`"],
    );
    assert_invalid(
        &case,
        &format!("name: x\ndefaults: {{ model: m, sim: {SCRIPT} }}\ntasks:\n  - {{ id: a, prompt: p }}\n  - {{ id: a, prompt: q }}\n"),
        &["job.yaml:5:11: tasks[1].id: duplicate task id \"a\" (first at line 4)"],
    );
    assert_invalid(
        &case,
        &format!("name: x\ndefaults:\n  model: m\n  sim: {SCRIPT}\n  limits:\n    time_limit: ten minutes\ntasks:\n  - {{ id: a, prompt: p }}\n"),
        &["job.yaml:6:17: defaults.limits.time_limit: invalid duration \"ten minutes\""],
    );
    assert_invalid(
        &case,
        "name: x\ndefaults: { model: m }\ntasks:\n  - id: a\n    prompt: p\n    sim: scripts/missing.yaml\n",
        &["job.yaml:6:10: tasks[0].sim: simulator script", "missing.yaml", "cannot read"],
    );
    case.write(
        "scripts/bad.yaml",
        "turns:\n  - content:\n      - txt: hi\n",
    );
    assert_invalid(
        &case,
        "name: x\ndefaults: { model: m }\ntasks:\n  - id: a\n    prompt: p\n    sim: scripts/bad.yaml\n",
        &["bad.yaml:3:9: turns[0].content[0]: unknown variant `txt`"],
    );
}

fn regex_like_position(s: &str) -> bool {
    // file:line:column: somewhere in the message
    s.split("job.yaml:").nth(1).is_some_and(|rest| {
        let mut parts = rest.splitn(3, ':');
        let l = parts.next().unwrap_or("");
        let c = parts.next().unwrap_or("");
        !l.is_empty()
            && l.chars().all(|ch| ch.is_ascii_digit())
            && !c.is_empty()
            && c.chars().all(|ch| ch.is_ascii_digit())
    })
}

#[test]
fn validate_prints_the_plan_and_checks_api_keys() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run(&["validate", "jobs/demo.yaml"], root);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("job demo"), "{text}");
    assert!(
        text.contains("big-spender: sim claude-sonnet-4-5"),
        "{text}"
    );
    assert!(text.contains("max_cost_usd 0.05"), "{text}");
    assert!(
        !text.contains("sandbox on this machine"),
        "no repos, no sandbox line"
    );

    let out = run(&["validate", "jobs/repo-fix.yaml"], root);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("sandbox on this machine: ") && text.contains("namespaces"),
        "{text}"
    );

    let out = run(&["validate", "jobs/anthropic-example.yaml"], root);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("ANTHROPIC_API_KEY is not set"),
        "{}",
        stderr(&out)
    );
    let out = bin()
        .args(["validate", "jobs/anthropic-example.yaml"])
        .current_dir(root)
        .env("ANTHROPIC_API_KEY", "sk-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("key from $ANTHROPIC_API_KEY"));
}

#[test]
fn the_openai_examples_validate_and_the_protocols_demo_runs_offline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run(&["validate", "jobs/openai-example.yaml"], root);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("OPENAI_API_KEY is not set"),
        "{}",
        stderr(&out)
    );
    let out = bin()
        .args(["validate", "jobs/openai-example.yaml"])
        .current_dir(root)
        .env("OPENAI_API_KEY", "sk-test")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("openai-responses https://api.openai.com/v1/responses"),
        "{text}"
    );
    // A local server needs no key.
    let out = run(&["validate", "jobs/local-openai-compatible.yaml"], root);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("(optional)"));

    let case = Case::new();
    let out_dir = case.path("out");
    let out = bin()
        .args([
            "run",
            "jobs/protocols.yaml",
            "--quiet",
            "--run-id",
            "p",
            "--out",
        ])
        .arg(&out_dir)
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = read_csv(&out_dir.join("p/results.csv"));
    let mut got: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r["protocol"].clone(), r["stop_reason"].clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("anthropic".to_string(), "completed".to_string()),
            ("openai-chat".into(), "completed".into()),
            ("openai-responses".into(), "completed".into()),
        ]
    );
    assert!(rows.iter().all(|r| r["tool_calls"] == "2"), "{rows:?}");
}

#[test]
fn the_demo_runs_offline_and_shows_its_stop_reasons() {
    let case = Case::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = case.path("out");
    let out = bin()
        .args([
            "run",
            "jobs/demo.yaml",
            "--quiet",
            "--run-id",
            "demo",
            "--out",
        ])
        .arg(&out_dir)
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("reports: "), "{stdout}");
    let rows = read_csv(&out_dir.join("demo/results.csv"));
    assert_eq!(rows.len(), 8);
    let mut reasons: Vec<&str> = rows.iter().map(|r| r["stop_reason"].as_str()).collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "completed",
            "cost_limit",
            "max_turns",
            "model_max_tokens",
            "provider_error",
            "refusal",
            "stuck",
            "time_limit"
        ]
    );
}

#[test]
fn bad_arguments_exit_2_and_unwritable_reports_exit_1() {
    let case = Case::new();
    case.write("job.yaml", &format!("name: x\ndefaults: {{ model: m, sim: {SCRIPT} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"));
    let out = run(&["run", "job.yaml", "--only", "zzz*"], case.dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("matches none"));
    assert_eq!(
        run(&["run", "job.yaml", "--concurrency", "0"], case.dir.path())
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["run", "job.yaml", "--frobnicate"], case.dir.path())
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(
            &["run", "job.yaml", "--run-id", "../escape"],
            case.dir.path()
        )
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        run(&["run", "nope.yaml"], case.dir.path()).status.code(),
        Some(2)
    );
    case.write("a-file", "not a folder");
    let out = run(&["run", "job.yaml", "--out", "a-file"], case.dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot write"), "{}", stderr(&out));
    // --only picks tasks; the run folder name is --run-id
    let out = run(
        &[
            "run", "job.yaml", "--only", "a", "--run-id", "picked", "--quiet",
        ],
        case.dir.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(read_csv(&case.path("reports/picked/results.csv")).len(), 1);
}

fn wait_for_rows(
    path: &Path,
    n: usize,
    limit: Duration,
) -> Vec<std::collections::HashMap<String, String>> {
    let start = Instant::now();
    loop {
        if path.exists() {
            let rows = read_csv(path);
            if rows.len() >= n {
                return rows;
            }
        }
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {n} row(s) in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_finished_task_is_in_the_csv_before_the_run_ends() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: x\ndefaults: { model: m }\ntasks:\n  - id: fast\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n  - id: slow\n    prompt: p\n    sim: { latency: 4s, turns: [ { content: [ { text: hi } ] } ] }\n",
    );
    let mut child = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rows = wait_for_rows(
        &case.path("reports/r/results.csv"),
        1,
        Duration::from_secs(20),
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run should still be going"
    );
    assert_eq!(rows[0]["task_id"], "fast");
    assert_eq!(rows[0]["stop_reason"], "completed");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(read_csv(&case.path("reports/r/results.csv")).len(), 2);
}

#[test]
fn ctrl_c_drains_then_cancels_and_every_task_gets_a_row() {
    let case = Case::new();
    let slow = "    sim: { latency: 30s, turns: [ { content: [ { text: hi } ] } ] }\n";
    case.write(
        "job.yaml",
        &format!("name: x\nconcurrency: 1\ndefaults: {{ model: claude-sonnet-4-5 }}\ntasks:\n  - id: first\n    prompt: p\n{slow}  - id: second\n    prompt: p\n{slow}  - id: third\n    prompt: p\n{slow}"),
    );
    let mut child = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let transcript = case.path("reports/r/transcripts/first.jsonl");
    let start = Instant::now();
    while !std::fs::read_to_string(&transcript)
        .unwrap_or_default()
        .contains("\"request\"")
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the first task never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(child.id(), "INT");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first Ctrl-C only drains"
    );
    signal(child.id(), "INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(start.elapsed() < Duration::from_secs(20));
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows.len(), 3);
    for r in &rows {
        assert_eq!(r["stop_reason"], "cancelled", "{r:?}");
        assert_eq!(r["outcome"], "error");
    }
    let first = rows.iter().find(|r| r["task_id"] == "first").unwrap();
    assert!(
        first["stop_detail"].contains("during a model request"),
        "{first:?}"
    );
    assert!(rows
        .iter()
        .any(|r| r["stop_detail"].contains("not started")));
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("reports/r/run.json")).unwrap())
            .unwrap();
    assert_eq!(run["status"], "interrupted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_providers_send_the_key_but_no_report_contains_it() {
    // Each protocol's real-provider path (URL under the base, key header), pointed at
    // the simulator's plain routes, which refuse a request without the right header.
    for (provider, base, model, header) in [
        ("anthropic", "", "claude-sonnet-4-5", "x-api-key"),
        ("openai", "/v1", "gpt-5.4", "authorization"),
        ("local", "/v1", "qwen", "authorization"),
    ] {
        sends_the_key_but_no_report_contains_it(provider, base, model, header).await;
    }
}

async fn sends_the_key_but_no_report_contains_it(
    provider: &str,
    base: &str,
    model: &str,
    header: &str,
) {
    let case = Case::new();
    let sim = Arc::new(Sim::start_local().await.unwrap());
    let script = serde_yaml::from_str(
        "turns:\n  - content: [ { tool_use: { name: get_time, input: {} } } ]\n  - content: [ { text: done } ]\n",
    )
    .unwrap();
    sim.register("", Arc::new(script));
    case.write(
        "job.yaml",
        &format!(
            "name: x\nproviders:\n  {provider}: {{ base_url: \"{}{base}\", api_key_env: AB_TEST_KEY{} }}\ndefaults: {{ provider: {provider}, model: {model}, tools: [get_time] }}\ntasks:\n  - {{ id: a, prompt: p }}\n",
            sim.base_url(),
            if provider == "local" { ", protocol: openai-chat" } else { "" },
        ),
    );
    let secret = "sk-ant-test-7f3e9c1d-never-log-me";
    let dir = case.dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        bin()
            .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
            .env("AB_TEST_KEY", secret)
            .current_dir(dir)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows[0]["stop_reason"], "completed", "{provider}: {rows:?}");
    assert_eq!(rows[0]["provider"], provider);
    let reqs = sim.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].headers[header], "<redacted>");
    for entry in walk(&case.path("reports")) {
        let text = std::fs::read_to_string(&entry).unwrap();
        assert!(
            !text.contains(secret),
            "the key leaked into {}",
            entry.display()
        );
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    assert!(!stderr(&out).contains(secret));
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_existing_run_folder_or_a_too_large_request_is_refused_before_anything_runs() {
    let case = Case::new();
    case.write("job.yaml", &format!("name: x\ndefaults: {{ model: m, sim: {SCRIPT} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"));
    assert_eq!(
        run(
            &["run", "job.yaml", "--run-id", "same", "--quiet"],
            case.dir.path()
        )
        .status
        .code(),
        Some(0)
    );
    let again = run(
        &["run", "job.yaml", "--run-id", "same", "--quiet"],
        case.dir.path(),
    );
    assert_eq!(again.status.code(), Some(2));
    assert!(
        stderr(&again).contains("already exists"),
        "{}",
        stderr(&again)
    );

    case.write(
        "big.yaml",
        "name: x\ndefaults: { provider: anthropic, model: claude-sonnet-4-5, max_tokens: 64000 }\ntasks:\n  - { id: a, prompt: p }\n",
    );
    // Streamed (auto), so allowed; whole answers that large are refused.
    let streamed = bin()
        .args(["validate", "big.yaml"])
        .env("ANTHROPIC_API_KEY", "k")
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(streamed.status.code(), Some(0), "{}", stderr(&streamed));
    assert!(String::from_utf8_lossy(&streamed.stdout).contains("stream: yes (SSE)"));
    case.write(
        "big.yaml",
        "name: x\ndefaults: { provider: anthropic, model: claude-sonnet-4-5, max_tokens: 64000, stream: never }\ntasks:\n  - { id: a, prompt: p }\n",
    );
    let out = bin()
        .args(["validate", "big.yaml"])
        .env("ANTHROPIC_API_KEY", "k")
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(
            "big.yaml:2:72: defaults.max_tokens: 64000 is too large for a non-streaming request"
        ),
        "{}",
        stderr(&out)
    );
}

/// A resume that fails while rewriting the run folder once exited 2 ("invalid input,
/// nothing ran") although it may already have changed the folder. It is a broken run
/// (exit 1) whose message names the file, and the rows already produced stay.
#[test]
fn a_resume_that_fails_on_disk_exits_1_naming_the_file_and_keeps_the_rows() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: r\nproviders:\n  s: { protocol: anthropic, simulator: true }\ndefaults: { provider: s, model: claude-sonnet-4-5 }\ntasks:\n  - id: t1\n    prompt: p\n    sim: { turns: [ { faults: [ { status: 400, message: bad } ], content: [ { text: hi } ] } ] }\n  - id: t2\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n",
    );
    let first = case.agentbatch(&["run", "job.yaml", "--run-id", "r", "--quiet"]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    // t1 failed at the provider, so the resume runs it again: it records itself in
    // run.json, sets t1's old row aside, then rewrites results.csv through a temp file,
    // which cannot be made.
    std::fs::create_dir(case.path("reports/r/results.csv.tmp")).unwrap();
    let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("results.csv"), "{err}");
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert!(rows.iter().any(|r| r["task_id"] == "t2"), "{rows:?}");
}

/// `agentbatch validate job.yaml | head -1`: the command ends when its reader does,
/// without a panic's backtrace (Rust ignores SIGPIPE, so a write to a closed pipe
/// panicked).
#[test]
fn a_printing_command_ends_quietly_when_its_reader_goes() {
    use std::os::unix::process::ExitStatusExt;
    let job = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs/compare.yaml");
    let mut child = bin()
        .args(["validate", job.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Either it wrote everything before the pipe closed, or SIGPIPE ended it.
    assert!(
        out.status.success() || out.status.signal() == Some(13),
        "{:?}: {stderr}",
        out.status
    );
}

/// `--version` names the commit the binary was built from, and run.json records it:
/// git's HEAD of this checkout (the test builds from it), or `unknown` without git.
#[test]
fn the_version_names_its_commit_and_run_json_records_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success() && root.join(".git").exists())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let want = std::env::var("AGENTBATCH_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or(head)
        .unwrap_or_else(|| "unknown".into());
    let case = Case::new();
    let out = case.agentbatch(&["--version"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        format!("agentbatch {} (commit {want})", env!("CARGO_PKG_VERSION"))
    );
    case.write(
        "job.yaml",
        "name: v\ndefaults:\n  model: claude-haiku-4-5\n  sim: { turns: [ { content: [ { text: done } ] } ] }\ntasks:\n  - { id: a, prompt: go }\n",
    );
    let ran = case.agentbatch(&["run", "job.yaml", "--quiet", "--run-id", "v"]);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let run_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("reports/v/run.json")).unwrap())
            .unwrap();
    assert_eq!(run_json["agentbatch_commit"], want.as_str());
    assert_eq!(run_json["agentbatch_version"], env!("CARGO_PKG_VERSION"));
}
