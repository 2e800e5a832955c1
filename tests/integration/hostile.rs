//! Job files and arguments a hostile user would write: numbers past every bound, files
//! that are devices or pipes, keys written twice, names too long for the filesystem,
//! huge values in error messages. Each is refused by `validate` with its position, or
//! runs, never crashes the run.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bin, read_csv, Case};

const SCRIPT: &str = "{ turns: [ { content: [ { text: hi } ] } ] }";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs the binary in `dir`, killing it after `limit` (a hang is a failure, not a wait).
fn run_within(dir: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = bin()
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary starts");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("agentbatch {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// `validate` and `run` both exit 2 with every expected piece in the message, within a
/// few seconds, and create nothing.
fn refused(case: &Case, yaml: &str, expected: &[&str]) -> String {
    case.write("job.yaml", yaml);
    let mut last = String::new();
    for args in [
        &["validate", "job.yaml"][..],
        &["run", "job.yaml", "--out", "reports", "--quiet"][..],
    ] {
        let out = run_within(case.dir.path(), args, Duration::from_secs(20));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}:\n{err}");
        for e in expected {
            assert!(err.contains(e), "{args:?}: expected {e:?} in:\n{err}");
        }
        assert!(err.len() < 2_000, "a {}-byte error message", err.len());
        last = err;
    }
    assert!(!case.path("reports").exists(), "nothing may be created");
    last
}

fn task(extra: &str) -> String {
    format!("  - {{ id: a, prompt: p, model: m, sim: {SCRIPT}{extra} }}\n")
}

#[test]
fn numbers_past_their_bounds_are_refused_where_they_are_written() {
    let case = Case::new();
    let t = task("");
    refused(
        &case,
        &format!("name: x\nconcurrency: 18446744073709551615\ntasks:\n{t}"),
        &["job.yaml:2:14: concurrency:", "at most 100000"],
    );
    refused(
        &case,
        &format!(
            "name: x\nteams:\n  t:\n    concurrency: 18446744073709551615\ntasks:\n{}",
            task(", team: t")
        ),
        &["job.yaml:4:18: teams.t.concurrency:", "at most 100000"],
    );
    refused(
        &case,
        &format!("name: x\nepochs: 100000000\ntasks:\n{t}"),
        &["job.yaml:2:9: epochs:", "at most 10000"],
    );
    // Each bound alone is fine, but not the plan they make together.
    let many: String = (0..200)
        .map(|i| format!("  - {{ id: t{i}, prompt: p, model: m, sim: {SCRIPT} }}\n"))
        .collect();
    refused(
        &case,
        &format!("name: x\nepochs: 10000\ntasks:\n{many}"),
        &["epochs:", "2000000 task runs", "at most 1000000"],
    );
    // Money written as a whole number has its bound too.
    refused(
        &case,
        &format!("name: x\nmax_cost_usd: 18446744073709551615\npricing:\n  m: {{ input: 18446744073709551615, output: 1 }}\ntasks:\n{t}"),
        &["job.yaml:2:15: max_cost_usd:", "at most 1000000000 dollars"],
    );
    // ... nor the text every run of the plan copies (it once aborted validate).
    let prompt = "p".repeat(1_000_000);
    refused(
        &case,
        &format!("name: x\nepochs: 10000\ntasks:\n  - {{ id: a, prompt: {prompt}, model: m, sim: {SCRIPT} }}\n"),
        &["job.yaml:2:9: epochs: the task runs would hold 10000000000 bytes"],
    );
    let values: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    let axis = values.join(", ");
    refused(
        &case,
        &format!("name: x\nmatrix:\n  limits.max_turns: [{axis}]\n  max_tokens: [{axis}]\n  top_k: [{axis}]\ntasks:\n{t}"),
        &["matrix.limits.max_turns:", "100 x 100 x 100 combinations"],
    );
    for (field, yaml) in [
        ("max_tokens", "  max_tokens: 4294967295\n"),
        ("limits.max_turns", "  limits: { max_turns: 99999999999 }\n"),
        (
            "limits.max_input_tokens",
            "  limits: { max_input_tokens: 18446744073709551615 }\n",
        ),
        ("top_k", "  top_k: 99999999\n"),
    ] {
        refused(
            &case,
            &format!("name: x\ndefaults:\n{yaml}tasks:\n{t}"),
            &[&format!("defaults.{field}:"), "too large: at most"],
        );
    }
    refused(
        &case,
        &format!(
            "name: x\nproviders:\n  sim: {{ max_retries: 100000, rpm: 4294967295 }}\ntasks:\n{t}"
        ),
        &["providers.sim.max_retries:", "at most 1000"],
    );
    // Numbers in a simulator script too, placed at their line in the script file.
    case.write("slow.yaml", "turns:\n  - content: []\n  - latency: 2h\n");
    refused(
        &case,
        "name: x\ntasks:\n  - { id: a, prompt: p, model: m, sim: slow.yaml }\n",
        &["slow.yaml:3:14: turns[1].latency: 2h is over the upper bound of 10m"],
    );
    case.write("job.yaml", &format!("name: x\ntasks:\n{t}"));
    let out = run_within(
        case.dir.path(),
        &[
            "run",
            "job.yaml",
            "--concurrency",
            "18446744073709551615",
            "--quiet",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("at most 100000"), "{}", stderr(&out));
    assert!(
        !case.path("reports").exists(),
        "no run folder, no .lock left"
    );
}

#[test]
fn referenced_files_must_be_regular_files_of_bounded_size() {
    let case = Case::new();
    let fifo = case.path("pipe.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for path in ["/dev/zero", "/dev/urandom", "pipe.yaml"] {
        refused(
            &case,
            &format!("name: x\ntasks:\n  - {{ id: a, prompt: p, model: m, sim: {path} }}\n"),
            &["tasks[0].sim: simulator script", "not a regular file"],
        );
    }
    refused(
        &case,
        &format!(
            "name: x\ntoolsets:\n  c: {{ tools: [get_time], mcp_config: /dev/zero }}\ntasks:\n{}",
            task(", toolset: c")
        ),
        &["not a regular file"],
    );
    let big = case.path("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(17 * 1024 * 1024).unwrap();
    refused(
        &case,
        "name: x\ntasks:\n  - { id: a, prompt: p, model: m, sim: big.yaml }\n",
        &["17825792 bytes: at most 16777216"],
    );
    for job in ["/dev/zero", "pipe.yaml"] {
        let out = run_within(case.dir.path(), &["validate", job], Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(2), "{job}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("not a regular file"),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn keys_written_twice_are_refused_with_both_lines() {
    let case = Case::new();
    let t = task("");
    refused(
        &case,
        &format!("name: x\nteams:\n  platform: {{ max_cost_usd: 1 }}\n  other: {{}}\n  platform: {{ max_cost_usd: 100 }}\ntasks:\n{}", task(", team: platform")),
        &["job.yaml:5:", "teams.platform: duplicate key \"platform\" (first at line 3)"],
    );
    refused(
        &case,
        &format!("name: x\npricing:\n  m: {{ input: 1, output: 1 }}\n  m: {{ input: 0, output: 0 }}\ntasks:\n{t}"),
        &["job.yaml:4:", "pricing.m: duplicate key", "(first at line 3)"],
    );
    refused(
        &case,
        &format!("name: x\nproviders:\n  sim: {{ rpm: 10 }}\n  sim: {{ rpm: 1000 }}\ntasks:\n{t}"),
        &["providers.sim: duplicate key", "(first at line 3)"],
    );
    refused(
        &case,
        &format!("name: x\ntoolsets:\n  c: {{ tools: [get_time] }}\n  c: {{ tools: [bash] }}\ntasks:\n{t}"),
        &["toolsets.c: duplicate key", "(first at line 3)"],
    );
    refused(
        &case,
        &format!("name: x\ntasks:\n  - id: a\n    prompt: p\n    model: m\n    sim: {SCRIPT}\n    env:\n      A: one\n      A: two\n"),
        &["job.yaml:9:", "tasks[0].env.A: duplicate key \"A\" (first at line 8)"],
    );
    // In a script file too.
    case.write(
        "s.yaml",
        "turns:\n  - content: [ { text: a } ]\nturns:\n  - content: [ { text: b } ]\n",
    );
    refused(
        &case,
        "name: x\ntasks:\n  - { id: a, prompt: p, model: m, sim: s.yaml }\n",
        &[
            "s.yaml:3:",
            "turns: duplicate key \"turns\" (first at line 1)",
        ],
    );
}

#[test]
fn error_messages_quote_only_a_short_prefix_of_long_values() {
    let case = Case::new();
    let huge = "x".repeat(15 * 1024 * 1024);
    let err = refused(
        &case,
        &format!(
            "name: x\ndefaults:\n  limits: {{ time_limit: \"{huge}\" }}\ntasks:\n{}",
            task("")
        ),
        &["defaults.limits.time_limit: invalid duration"],
    );
    assert!(err.contains("bytes in all"), "{err}");
    let err = refused(
        &case,
        "name: x\ntasks:\n  - { id: a, prompt: p, model: m, sim: /etc/passwd }\n",
        &["/etc/passwd"],
    );
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let last_line = passwd.lines().last().unwrap();
    assert!(
        passwd.len() < 200 || !err.contains(last_line),
        "the file is not printed: {err}"
    );
    let long_id = "i".repeat(201);
    refused(
        &case,
        &format!("name: x\ntasks:\n  - {{ id: {long_id}, prompt: p, model: m, sim: {SCRIPT} }}\n"),
        &["tasks[0].id: the task id is 201 characters long: at most 200"],
    );
}

#[test]
fn a_ledger_that_is_a_folder_is_refused_before_anything_is_created() {
    let case = Case::new();
    let yaml = format!(
        "name: x\nledger: {}\nteams:\n  t: {{ cap: {{ usd: 1, period: day }} }}\ndefaults: {{ model: claude-sonnet-4-5, team: t }}\ntasks:\n  - {{ id: a, prompt: p, sim: {SCRIPT} }}\n",
        case.dir.path().display()
    );
    refused(
        &case,
        &yaml,
        &["job.yaml:2:9: ledger: the ledger", "is a folder"],
    );
    case.write(
        "job.yaml",
        &format!("name: x\nteams:\n  t: {{ cap: {{ usd: 1, period: day }} }}\ndefaults: {{ model: claude-sonnet-4-5, team: t }}\ntasks:\n  - {{ id: a, prompt: p, sim: {SCRIPT} }}\n"),
    );
    let out = run_within(
        case.dir.path(),
        &[
            "run", "job.yaml", "--ledger", "/tmp", "--run-id", "r", "--quiet",
        ],
        Duration::from_secs(20),
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("is a folder"), "{}", stderr(&out));
    assert!(
        !case.path("reports/r").exists(),
        "no folder with only a .lock"
    );
}

/// A 200-character id with long matrix values and epochs once passed validate and then
/// failed the whole run with "File name too long".
#[test]
fn the_longest_ids_with_a_matrix_and_epochs_run_and_fit_the_filesystem() {
    let case = Case::new();
    let id = "i".repeat(200);
    let long = "v".repeat(150);
    case.write(
        "job.yaml",
        &format!("name: {}\nepochs: 2\nmatrix:\n  system: [\"{long}a\", \"{long}b\"]\ndefaults: {{ model: m, sim: {SCRIPT} }}\ntasks:\n  - {{ id: {id}, prompt: p }}\n  - {{ id: short, prompt: p }}\n", "n".repeat(300)),
    );
    let out = run_within(
        case.dir.path(),
        &["validate", "job.yaml"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run_within(
        case.dir.path(),
        &["run", "job.yaml", "--quiet"],
        Duration::from_secs(60),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let runs: Vec<_> = std::fs::read_dir(case.path("reports"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1);
    let rows = read_csv(&runs[0].join("results.csv"));
    assert_eq!(rows.len(), 8);
    let mut transcripts: Vec<String> = rows.iter().map(|r| r["transcript"].clone()).collect();
    transcripts.sort();
    transcripts.dedup();
    assert_eq!(transcripts.len(), 8, "every run has its own transcript");
    for r in &rows {
        assert_eq!(r["stop_reason"], "completed", "{r:?}");
        let name = Path::new(&r["transcript"]).file_name().unwrap().len();
        assert!(name <= 255, "{name}");
        assert!(runs[0].join(&r["transcript"]).is_file());
    }
}
