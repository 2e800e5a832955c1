//! The chaos property test: many seeds of the chaos model (`sim: {chaos: ...}`) over repo
//! tasks (a git repository and a plain folder), all three protocols, the coding tools,
//! no network, a check command, and task, team and run cost caps, through the built
//! binary. After each run it checks the invariants of docs/ARCHITECTURE.md: no panic,
//! exit 0, one row per task, `agentbatch audit` clean on every transcript, no file
//! written outside a workspace, valid writes at the workspace root working, an
//! unexpected stop never a success, the simulator never refusing what the runner sent,
//! each task's cost equal to its settled costs plus its worst-case charges, the run's
//! total equal to its rows, and no cap exceeded.
//!
//! Default size: `DEFAULT_SEEDS` seeds from 0. A larger sweep, and replaying one seed:
//!
//!     AGENTBATCH_CHAOS_SEEDS=2000 cargo test --test integration chaos -- --nocapture
//!     AGENTBATCH_CHAOS_BASE=137 AGENTBATCH_CHAOS_SEEDS=1 cargo test --test integration chaos -- --nocapture
//!
//! (`AGENTBATCH_CHAOS_ONLY=3,17,240` runs just those seeds, `AGENTBATCH_CHAOS_ALL=1`
//! lists every finding, `AGENTBATCH_CHAOS_KEEP=1` keeps the run folders.) A seed
//! replays its own conversation exactly; what it shares with others (team and run
//! pools, the provider pauses of 429s) depends on the batch it runs in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Instant;

use agentbatch::tools::workspace::tree_digest;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::common::{bin, read_csv, Case};

/// Seeds in a default run: a few hundred, which a debug build on two cores plays in
/// well under two minutes.
const DEFAULT_SEEDS: u64 = 240;
/// Seeds per run of the binary (a sweep is several runs, so a cap binding in one batch
/// does not starve the rest).
const BATCH: u64 = 240;
const SENTINEL: &str = "sentinel.txt";
const SENTINEL_TEXT: &str = "the outside world; nothing may change me\n";
const PROVIDERS: [&str; 3] = ["sim", "sim-responses", "sim-chat"];
const REPOS: [&str; 2] = ["gitrepo", "plain"];
const TEAMS: [Option<&str>; 3] = [Some("red"), Some("blue"), None];
/// A task's own cap, by seed.
const TASK_CAPS: [&str; 3] = ["0.05", "0.20", "1.00"];
/// Longest generated string, by seed.
const MAX_STRINGS: [u64; 3] = [4096, 65_536, 1_048_576];
/// How often the model misbehaves and the server fails, and how long it talks, by seed.
const MISBEHAVE: [u32; 3] = [5, 15, 30];
const FAULTS: [u32; 2] = [5, 15];
const TURNS: [u32; 3] = [4, 8, 16];

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
struct Finding {
    seed: u64,
    invariant: &'static str,
    detail: String,
}

/// What a seed's task is made of: its protocol, repository, team, cap.
struct Task {
    seed: u64,
    provider: &'static str,
    repo: &'static str,
    team: Option<&'static str>,
    cap: Decimal,
    max_string: u64,
    misbehave: u32,
    faults: u32,
    turns: u32,
    /// wrap_up and show_budget: the last affordable request goes with tools off.
    wrap_up: bool,
}

/// An index in 0..k for one attribute of a seed's task, independent of the others
/// (a SplitMix64 step over the seed and the attribute's number).
fn choose(seed: u64, attribute: u64, k: usize) -> usize {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(attribute.wrapping_mul(0xbf58_476d_1ce4_e5b9));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % k as u64) as usize
}

impl Task {
    fn new(seed: u64) -> Task {
        Task {
            seed,
            // every protocol in turn, so any three consecutive seeds cover them all
            provider: PROVIDERS[(seed % 3) as usize],
            repo: REPOS[choose(seed, 1, 2)],
            team: TEAMS[choose(seed, 2, 3)],
            cap: Decimal::from_str(TASK_CAPS[choose(seed, 3, 3)]).expect("a price"),
            max_string: MAX_STRINGS[choose(seed, 4, 3)],
            misbehave: MISBEHAVE[choose(seed, 5, 3)],
            faults: FAULTS[choose(seed, 6, 2)],
            turns: TURNS[choose(seed, 7, 3)],
            wrap_up: choose(seed, 8, 2) == 0,
        }
    }

    fn id(&self) -> String {
        format!("s{}", self.seed)
    }
}

/// The fixture repository: a failing test, a .gitignore and a subfolder.
fn write_repo(case: &Case, name: &str) -> PathBuf {
    case.write(
        &format!("{name}/calc.py"),
        "def add(a, b):\n    return a - b\n",
    );
    case.write(
        &format!("{name}/test_calc.py"),
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    );
    case.write(&format!("{name}/.gitignore"), "__pycache__/\n");
    case.write(&format!("{name}/sub/mod.py"), "X = 1\n");
    case.path(name)
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("git runs");
    assert!(ok.success(), "git {args:?}");
}

/// Team and run caps for a batch: red binds, blue rarely, the run near the end.
struct Caps {
    red: Decimal,
    blue: Decimal,
    run: Decimal,
}

impl Caps {
    fn for_batch(n: u64) -> Caps {
        // in tenths of a cent per task of the batch
        let per = |mills: u64| Decimal::new((n * mills) as i64, 3);
        Caps {
            red: per(15),
            blue: per(200),
            run: per(52),
        }
    }
}

fn job(tasks: &[Task], outside: &Path, caps: &Caps) -> String {
    let mut y = format!(
        "name: chaos\nconcurrency: 8\nmax_cost_usd: {}\nteams:\n  red: {{ max_cost_usd: {} }}\n  blue: {{ max_cost_usd: {} }}\n",
        caps.run, caps.red, caps.blue
    );
    y.push_str(
        "providers:\n  sim: { max_retries: 2, max_rate_limit_retries: 3, timeout: 30s }\n  sim-responses: { protocol: openai-responses, simulator: true, max_retries: 2, max_rate_limit_retries: 3, timeout: 30s }\n  sim-chat: { protocol: openai-chat, simulator: true, max_retries: 2, max_rate_limit_retries: 3, timeout: 30s }\n",
    );
    y.push_str(
        "defaults:\n  model: claude-sonnet-4-5\n  max_tokens: 2048\n  toolset: coding\n  check: 'python3 -m unittest -q'\n  check_timeout: 30s\n  sandbox: { network: false }\n  keep_workspaces: never\n  limits: { max_turns: 12, time_limit: 90s }\ntasks:\n",
    );
    for t in tasks {
        y.push_str(&format!(
            "  - id: {}\n    prompt: Fix the failing test.\n    provider: {}\n    repo: {}\n    limits: {{ max_cost_usd: {}, wrap_up: {}, show_budget: {} }}\n    sim: {{ chaos: {{ seed: {}, outside: '{}', max_string: {}, misbehave_percent: {}, fault_percent: {}, max_turns: {} }} }}\n",
            t.id(),
            t.provider,
            t.repo,
            t.cap,
            t.wrap_up,
            t.wrap_up,
            t.seed,
            outside.display(),
            t.max_string,
            t.misbehave,
            t.faults,
            t.turns
        ));
        if let Some(team) = t.team {
            y.push_str(&format!("    team: {team}\n"));
        }
    }
    y
}

fn decimal(v: &Value) -> Option<Decimal> {
    v.as_str().and_then(|s| Decimal::from_str(s).ok())
}

fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Every file under `dir`, relative, symlinks not followed.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if is_dir {
                stack.push(p.clone());
            }
            if let Ok(rel) = p.strip_prefix(dir) {
                out.insert(rel.display().to_string());
            }
        }
    }
    out
}

/// Whether a relative path leaves its root lexically (`..` below the top).
fn escapes(path: &str) -> bool {
    let mut depth = 0i32;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// The money of one transcript: settled costs plus worst-case charges.
fn transcript_money(events: &[Value]) -> Decimal {
    events
        .iter()
        .map(|e| match e["event"].as_str() {
            Some("settle") => decimal(&e["cost_usd"]).unwrap_or_default(),
            Some(_) => decimal(&e["charged_usd"]).unwrap_or_default(),
            None => Decimal::ZERO,
        })
        .sum()
}

/// A documented end of a conversation in the last response the runner accepted.
fn ended_properly(events: &[Value]) -> Result<(), String> {
    let Some(body) = events
        .iter()
        .rev()
        .find(|e| e["event"] == "response")
        .map(|e| &e["body"])
    else {
        return Err("completed without any response".into());
    };
    let fine = body["stop_reason"] == "end_turn"
        || body["stop_reason"] == "stop_sequence"
        || (body["object"] == "response" && body["status"] == "completed")
        || body.pointer("/choices/0/finish_reason") == Some(&Value::from("stop"));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "completed after a response that ends with stop_reason {} / status {} / finish_reason {}",
            body["stop_reason"],
            body["status"],
            body.pointer("/choices/0/finish_reason").unwrap_or(&Value::Null)
        ))
    }
}

/// The invariants of one task's transcript: money, confinement of the file tools, the
/// simulator's refusals, the stop.
fn check_transcript(
    t: &Task,
    row: &BTreeMap<String, String>,
    events: &[Value],
    found: &mut Vec<Finding>,
    stats: &mut BTreeMap<&'static str, usize>,
) {
    let mut add = |invariant: &'static str, detail: String| {
        found.push(Finding {
            seed: t.seed,
            invariant,
            detail,
        })
    };
    let cost = Decimal::from_str(&row["cost_usd"]).unwrap_or_default();
    let money = transcript_money(events);
    if cost != money {
        add(
            "spend equals settled usage plus worst-case charges",
            format!("results.csv says ${cost}, the transcript's settle and charge events add up to ${money}"),
        );
    }
    if cost > t.cap {
        add(
            "no task over its own cap",
            format!("spent ${cost}, its cap is ${}", t.cap),
        );
    }
    for e in events {
        let error = e["error"].as_str().unwrap_or("");
        let refused = e["event"] == "attempt_failed"
            && ["HTTP 400 ", "HTTP 401 ", "HTTP 404 "]
                .iter()
                .any(|s| error.contains(s))
            && !error.contains("chaos:");
        if refused {
            add(
                "the simulator never refuses what the runner sends",
                format!("turn {}: {error}", e["turn"]),
            );
        }
    }
    // A file tool's call at an absolute path, up out of the workspace, or through the
    // model's own link to /etc (once `ln -sfn /etc ro_link` worked) must fail.
    let mut ro_link = false;
    for pair in events.windows(2) {
        let (call, result) = (&pair[0], &pair[1]);
        if call["event"] != "tool_call" || result["event"] != "tool_result" {
            continue;
        }
        let command = call["input"]["command"].as_str().unwrap_or("");
        if command.contains("ln -sfn /etc ro_link") && result["is_error"] == false {
            ro_link = true;
        }
        let Some(path) = call["input"]["path"].as_str() else {
            continue;
        };
        let file_tool = ["read_file", "write_file", "edit_file", "list_files", "grep"]
            .contains(&call["name"].as_str().unwrap_or(""));
        let outside =
            path.starts_with('/') || escapes(path) || (ro_link && path.starts_with("ro_link"));
        *stats.entry("tool calls with a path").or_default() += 1;
        if file_tool && outside && result["is_error"] == true {
            *stats.entry("file-tool escapes refused").or_default() += 1;
        }
        if path.starts_with("chaos_link_") && result["is_error"] == true {
            *stats.entry("writes through links refused").or_default() += 1;
        }
        // A valid write to a plain file at the root must work (the generator never
        // makes these names folders or links).
        const ROOT_FILES: [&str; 8] = [
            "newfile.py",
            ".gitignore",
            "calc.py",
            "README.md",
            "notes.txt",
            ".env",
            "test_calc.py",
            "test_chaos.py",
        ];
        let valid_write = call["name"] == "write_file"
            && call["input"]["content"].is_string()
            && call["input"].as_object().is_some_and(|o| o.len() == 2);
        if valid_write && ROOT_FILES.contains(&path) && result["is_error"] == true {
            add(
                "a valid write to a file at the workspace root succeeds",
                format!(
                    "turn {}: write_file {path:?}: {}",
                    call["turn"],
                    result["content"].as_str().unwrap_or("")
                ),
            );
        }
        if file_tool && outside && result["is_error"] == false {
            add(
                "file tools stay in the workspace",
                format!(
                    "turn {}: {} {path:?} succeeded: {}",
                    call["turn"],
                    call["name"],
                    result["content"]
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            );
        }
    }
    if row["stop_reason"] == "completed" {
        if let Err(e) = ended_properly(events) {
            add("an unexpected stop is never success", e);
        }
    }
    if row["stop_reason"] == "cancelled" {
        add(
            "no task is cancelled in a run nobody interrupts (a panic shows as cancelled)",
            row["stop_detail"].clone(),
        );
    }
}

/// Runs one batch of seeds and checks every invariant; returns what failed.
fn run_batch(seeds: &[u64]) -> Vec<Finding> {
    let case = Case::new();
    let repos: Vec<PathBuf> = REPOS.iter().map(|r| write_repo(&case, r)).collect();
    git(&repos[0], &["init", "-q", "-b", "main"]);
    git(&repos[0], &["add", "-A"]);
    git(&repos[0], &["commit", "-qm", "v1"]);
    let outside = case.path("outside");
    case.write(&format!("outside/{SENTINEL}"), SENTINEL_TEXT);
    let digests: Vec<u64> = repos
        .iter()
        .map(|r| tree_digest(r).expect("digest"))
        .collect();
    let tasks: Vec<Task> = seeds.iter().copied().map(Task::new).collect();
    let caps = Caps::for_batch(tasks.len() as u64);
    case.write("job.yaml", &job(&tasks, &outside, &caps));
    let out = case.path("out");
    let started = Instant::now();
    let ran = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet", "--out"])
        .arg(&out)
        .current_dir(case.dir.path())
        .output()
        .expect("the binary runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
    let mut found = Vec::new();
    let mut add_all = |invariant: &'static str, detail: String| {
        for t in &tasks {
            found.push(Finding {
                seed: t.seed,
                invariant,
                detail: detail.clone(),
            });
        }
    };
    if ran.status.code() != Some(0) {
        add_all(
            "exit 0",
            format!(
                "exit {:?}: {}",
                ran.status.code(),
                stderr.chars().take(2000).collect::<String>()
            ),
        );
    }
    if stderr.contains("panicked") {
        add_all("no panic", stderr.chars().take(2000).collect());
    }
    let dir = out.join("r");
    let rows: Vec<BTreeMap<String, String>> = if dir.join("results.csv").exists() {
        read_csv(&dir.join("results.csv"))
            .into_iter()
            .map(|r| r.into_iter().collect())
            .collect()
    } else {
        Vec::new()
    };
    let sandbox = rows
        .iter()
        .map(|r| r["sandbox"].clone())
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let landlock = sandbox.contains("landlock");
    let mut by_id: BTreeMap<String, Vec<&BTreeMap<String, String>>> = BTreeMap::new();
    for r in &rows {
        by_id.entry(r["task_id"].clone()).or_default().push(r);
    }
    let mut team_spend: BTreeMap<String, Decimal> = BTreeMap::new();
    let mut total = Decimal::ZERO;
    let mut stops: BTreeMap<String, usize> = BTreeMap::new();
    let mut stats: BTreeMap<&'static str, usize> = BTreeMap::new();
    for t in &tasks {
        let rows_of = by_id.remove(&t.id()).unwrap_or_default();
        let [row] = rows_of.as_slice() else {
            found.push(Finding {
                seed: t.seed,
                invariant: "one results.csv row per task",
                detail: format!("{} rows", rows_of.len()),
            });
            continue;
        };
        *stops.entry(row["stop_reason"].clone()).or_default() += 1;
        let cost = Decimal::from_str(&row["cost_usd"]).unwrap_or_default();
        total += cost;
        if let Some(team) = t.team {
            *team_spend.entry(team.to_string()).or_default() += cost;
        }
        if row["transcript"].is_empty() {
            // never started (a pool could not pay for its first request): no transcript
            if cost != Decimal::ZERO {
                found.push(Finding {
                    seed: t.seed,
                    invariant: "spend equals settled usage plus worst-case charges",
                    detail: format!("${cost} spent by a task that never started"),
                });
            }
            continue;
        }
        let transcript = dir.join(&row["transcript"]);
        let events = read_events(&transcript);
        check_transcript(t, row, &events, &mut found, &mut stats);
        let audit = bin()
            .arg("audit")
            .arg(&transcript)
            .output()
            .expect("audit runs");
        if audit.status.code() != Some(0) {
            let report = String::from_utf8_lossy(&audit.stdout);
            let problems: Vec<&str> = report
                .lines()
                .filter(|l| !l.contains("(warning)"))
                .take(6)
                .collect();
            found.push(Finding {
                seed: t.seed,
                invariant: "agentbatch audit is clean",
                detail: format!(
                    "exit {:?} [{} via {}]: {}",
                    audit.status.code(),
                    row["stop_reason"],
                    t.provider,
                    problems.join(" | ")
                ),
            });
        }
    }
    for (id, extra) in by_id {
        found.push(Finding {
            seed: u64::MAX,
            invariant: "one results.csv row per task",
            detail: format!("{} rows for {id}, which the job does not have", extra.len()),
        });
    }
    // Money across tasks.
    let mut add_all = |invariant: &'static str, detail: String| {
        for t in &tasks {
            found.push(Finding {
                seed: t.seed,
                invariant,
                detail: detail.clone(),
            });
        }
    };
    let run_json: Value = std::fs::read_to_string(dir.join("run.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    let reported = decimal(&run_json["totals"]["cost_usd"]).unwrap_or_default();
    if reported != total {
        add_all(
            "the run's total is the sum of its rows",
            format!("run.json says ${reported}, the rows add up to ${total}"),
        );
    }
    if total > caps.run {
        add_all(
            "the run stays under its cap",
            format!("${total} > ${}", caps.run),
        );
    }
    for (team, spent) in &team_spend {
        let cap = if team == "red" { caps.red } else { caps.blue };
        if *spent > cap {
            add_all(
                "no team over its cap",
                format!("team {team} spent ${spent}, its cap is ${cap}"),
            );
        }
    }
    // Nothing written outside a workspace. Without Landlock no command is confined, so
    // what `bash` writes (`sh_*`, `hook_*` from a planted git hook it ran) and what the
    // check writes when it imports a planted test file (`ck_*`) may land where they
    // aimed; the file tools' `ft_*` never may.
    let tolerated =
        |name: &str| !landlock && ["sh_", "hook_", "ck_"].iter().any(|p| name.starts_with(p));
    for f in &files_under(&outside) {
        let name = Path::new(f)
            .iter()
            .next()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if f != SENTINEL && !tolerated(&name) {
            add_all(
                "nothing written outside a workspace",
                format!("{} appeared", outside.join(f).display()),
            );
        }
    }
    if std::fs::read_to_string(outside.join(SENTINEL))
        .ok()
        .as_deref()
        != Some(SENTINEL_TEXT)
    {
        add_all(
            "nothing written outside a workspace",
            format!("{SENTINEL} changed"),
        );
    }
    for (r, d) in repos.iter().zip(&digests) {
        if tree_digest(r).ok() != Some(*d) {
            add_all(
                "nothing written outside a workspace",
                format!("the fixture {} changed", r.display()),
            );
        }
    }
    let top: BTreeSet<String> = std::fs::read_dir(case.dir.path())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = ["job.yaml", "gitrepo", "plain", "outside", "out"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for extra in top.difference(&expected).filter(|n| !tolerated(n)) {
        add_all(
            "nothing written outside a workspace",
            format!("{extra} appeared beside the run"),
        );
    }
    for e in std::fs::read_dir(&out).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name != "r" && !name.starts_with("ledger.sqlite") && !tolerated(&name) {
            add_all(
                "nothing written outside a workspace",
                format!("out/{name} appeared"),
            );
        }
    }
    const RUN_FILES: [&str; 9] = [
        "results.csv",
        "summary.csv",
        "run.json",
        "transcripts",
        "patches",
        "workspaces",
        "git",
        "tmp",
        ".lock",
    ];
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !RUN_FILES.contains(&name.as_str()) && !tolerated(&name) {
            add_all(
                "nothing written outside a workspace",
                format!("out/r/{name} appeared"),
            );
        }
    }
    for e in std::fs::read_dir(dir.join("workspaces"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !tasks.iter().any(|t| t.id() == name) && !tolerated(&name) {
            add_all(
                "nothing written outside a workspace",
                format!("out/r/workspaces/{name} appeared"),
            );
        }
    }
    eprintln!(
        "chaos: {} seeds from {} ran in {:.1}s (sandbox: {sandbox}); spent ${total} of ${} (teams {team_spend:?}); stops: {stops:?}; {stats:?}",
        seeds.len(),
        seeds.first().copied().unwrap_or_default(),
        took.as_secs_f64(),
        caps.run
    );
    if std::env::var_os("AGENTBATCH_CHAOS_KEEP").is_some() {
        let kept = case.dir.keep();
        eprintln!("chaos: kept {}", kept.display());
    }
    found
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

#[test]
fn chaos_seeds_keep_every_invariant() {
    let seeds: Vec<u64> = match std::env::var("AGENTBATCH_CHAOS_ONLY") {
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
    };
    let mut found = Vec::new();
    for batch in seeds.chunks(BATCH as usize) {
        found.extend(run_batch(batch));
    }
    assert!(
        found.is_empty(),
        "chaos found {} problem(s):{}",
        found.len(),
        report(&found)
    );
}

#[test]
fn chaos_scripts_load_from_files_and_every_bound_is_enforced_before_anything_runs() {
    let case = Case::new();
    write_repo(&case, "plain");
    case.write(
        "sim/chaos.yaml",
        "chaos: { seed: 3, max_turns: 2, fault_percent: 0, misbehave_percent: 0 }\n",
    );
    case.write(
        "job.yaml",
        "name: files\ndefaults: { model: claude-sonnet-4-5, toolset: coding, repo: plain }\ntasks:\n  - { id: from-file, prompt: p, sim: sim/chaos.yaml }\n  - { id: inline, prompt: p, sim: { chaos: { seed: 4, max_turns: 2, fault_percent: 0, misbehave_percent: 0 } } }\n",
    );
    let out = case.path("out");
    let ran = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet", "--out"])
        .arg(&out)
        .current_dir(case.dir.path())
        .output()
        .expect("the binary runs");
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let rows = read_csv(&out.join("r/results.csv"));
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
