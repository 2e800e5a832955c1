//! Shared helpers: write a job into a temporary folder, run it against a simulator the
//! test owns (so its request log can be inspected), read the reports back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentbatch::job;
use agentbatch::report::ProgressMode;
use agentbatch::run::{self, RunOptions, RunOutcome};
use agentbatch::sim::{RecordedRequest, Sim};
use agentbatch::tools::Registry;
use serde_json::Value;

pub struct Case {
    pub dir: tempfile::TempDir,
}

pub struct Ran {
    pub outcome: RunOutcome,
    pub sim: Arc<Sim>,
    pub dir: PathBuf,
}

impl Case {
    pub fn new() -> Case {
        Case {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    pub async fn run(&self, job_yaml: &str) -> Ran {
        self.run_with(job_yaml, Registry::builtin()).await
    }

    pub async fn run_with(&self, job_yaml: &str, registry: Registry) -> Ran {
        let path = self.write("job.yaml", job_yaml);
        let plan = job::load(&path, &registry).unwrap_or_else(|e| panic!("job should load:\n{e}"));
        let sim = Arc::new(Sim::start_local().await.expect("sim starts"));
        let mut opts = RunOptions::new(self.path("reports"));
        opts.run_id = Some("r1".into());
        opts.progress = ProgressMode::Quiet;
        opts.registry = Arc::new(registry);
        opts.sim = Some(sim.clone());
        let outcome = run::run(plan, opts).await.expect("run finishes");
        Ran {
            outcome,
            sim,
            dir: self.path("reports/r1"),
        }
    }
}

/// A job with the usual defaults (simulator, Sonnet 4.5 prices, get_time) and the given
/// task list (YAML, indented by two spaces).
/// `extra_defaults` lines (indented by two spaces) replace the usual ones of the same key.
pub fn job(extra_defaults: &str, tasks: &str) -> String {
    let base = [
        "  provider: sim\n",
        "  model: claude-sonnet-4-5\n",
        "  max_tokens: 1024\n",
        "  tools: [get_time]\n",
    ];
    let overridden = |line: &str| {
        let key = line.split(':').next().unwrap_or_default();
        extra_defaults
            .lines()
            .any(|l| l.split(':').next() == Some(key))
    };
    let defaults: String = base.iter().filter(|l| !overridden(l)).copied().collect();
    format!("name: test\nconcurrency: 4\ndefaults:\n{defaults}{extra_defaults}tasks:\n{tasks}")
}

pub fn read_csv(path: &Path) -> Vec<HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).expect("results.csv opens");
    let headers = r.headers().expect("header row").clone();
    r.records()
        .map(|rec| {
            let rec = rec.expect("row parses");
            headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

impl Ran {
    pub fn rows(&self) -> Vec<HashMap<String, String>> {
        read_csv(&self.dir.join("results.csv"))
    }

    pub fn row(&self, task: &str) -> HashMap<String, String> {
        self.rows()
            .into_iter()
            .find(|r| r["task_id"] == task)
            .unwrap_or_else(|| panic!("no row for {task}"))
    }

    pub fn stop(&self, task: &str) -> String {
        self.row(task)["stop_reason"].clone()
    }

    pub fn transcript(&self, task: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.join(format!("transcripts/{task}.jsonl")))
            .expect("transcript");
        text.lines()
            .map(|l| serde_json::from_str(l).expect("transcript line is JSON"))
            .collect()
    }

    pub fn events(&self, task: &str, kind: &str) -> Vec<Value> {
        self.transcript(task)
            .into_iter()
            .filter(|e| e["event"] == kind)
            .collect()
    }

    pub fn requests(&self, task: &str) -> Vec<RecordedRequest> {
        self.sim
            .requests()
            .into_iter()
            .filter(|r| r.key == task)
            .collect()
    }
}

pub fn num(row: &HashMap<String, String>, col: &str) -> u64 {
    row[col]
        .parse()
        .unwrap_or_else(|_| panic!("{col} = {:?} is not a count", row[col]))
}

/// The built binary, without the API keys of whoever runs the tests.
pub fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_agentbatch"));
    c.env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("LOCAL_KEY");
    c
}

/// Sends a signal (`INT`, `TERM`, `KILL`) to a process.
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(ok.success());
}

/// Polls `f` until it holds, failing the test after `limit`.
pub fn wait_until(what: &str, limit: std::time::Duration, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Case {
    /// Runs the binary in the case's folder and waits for it.
    pub fn agentbatch(&self, args: &[&str]) -> std::process::Output {
        bin()
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .expect("binary runs")
    }

    /// Resumes the run in `dir` in-process, with the test's simulator.
    pub async fn resume(
        &self,
        dir: &Path,
        sim: &Arc<Sim>,
        retry_errors: bool,
        only: &[&str],
    ) -> RunOutcome {
        let plan = job::load(&self.path("job.yaml"), &Registry::builtin())
            .unwrap_or_else(|e| panic!("job should load:\n{e}"));
        let mut opts = RunOptions::new(self.path("reports"));
        opts.progress = ProgressMode::Quiet;
        opts.sim = Some(sim.clone());
        opts.only = only.iter().map(|s| s.to_string()).collect();
        opts.resume = Some(run::ResumeOptions {
            dir: dir.to_path_buf(),
            retry_errors,
            retry_budget_stops: false,
            force: false,
        });
        run::run(plan, opts).await.expect("resume finishes")
    }
}

impl Case {
    /// Starts `agentbatch run job.yaml --run-id r --quiet ARGS` in the case's folder,
    /// stderr captured.
    pub fn start_run(&self, extra: &[&str]) -> std::process::Child {
        bin()
            .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
            .args(extra)
            .current_dir(self.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("binary starts")
    }

    /// Waits until task `key` of run `r` has sent its first request.
    pub fn wait_for_request(&self, key: &str) {
        let t = self.path(&format!("reports/r/transcripts/{key}.jsonl"));
        wait_until(
            &format!("{key}'s first request"),
            std::time::Duration::from_secs(20),
            || {
                std::fs::read_to_string(&t)
                    .unwrap_or_default()
                    .contains("\"request\"")
            },
        );
    }
}

/// Runs git in `dir` with a throwaway identity, failing the test if git fails.
pub fn git_in(dir: &Path, args: &[&str]) {
    let ok = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("git runs");
    assert!(ok.success(), "git {args:?} in {}", dir.display());
}

/// Makes the folder `dir` a git repository with everything in one commit on `main`.
pub fn make_git_repository(dir: &Path) {
    git_in(dir, &["init", "-q", "-b", "main"]);
    git_in(dir, &["add", "-A"]);
    git_in(dir, &["commit", "-qm", "v1"]);
}

/// What a transcript's events say the task spent, counted independently of the
/// runner's own tally: every settled cost plus every worst case charged for an attempt
/// that brought no usable answer.
pub fn transcript_money(events: &[Value]) -> rust_decimal::Decimal {
    let usd = |v: &Value| {
        v.as_str()
            .and_then(|s| s.parse::<rust_decimal::Decimal>().ok())
            .unwrap_or_default()
    };
    events
        .iter()
        .map(|e| match e["event"].as_str() {
            Some("settle") => usd(&e["cost_usd"]),
            Some(_) => usd(&e["charged_usd"]),
            None => rust_decimal::Decimal::ZERO,
        })
        .sum()
}

/// A small plain-folder repository with a failing test (`calc.py`, `test_calc.py`, a
/// `.gitignore`) in `name` under the case's folder.
pub fn calc_fixture(case: &Case, name: &str) -> PathBuf {
    case.write(
        &format!("{name}/calc.py"),
        "def add(a, b):\n    return a - b\n",
    );
    case.write(
        &format!("{name}/test_calc.py"),
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    );
    case.write(&format!("{name}/.gitignore"), "__pycache__/\n");
    case.path(name)
}

/// POSTs `body` to `path` under the simulator's script key `k`, with the headers every
/// protocol needs (both vendors' keys, the Anthropic version).
pub async fn post_to_sim(sim: &Sim, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/{path}", sim.base_url_for("k")))
        .header("x-api-key", "test")
        .header("authorization", "Bearer test")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the simulator answers")
}

/// The container image in variable `var` (else `default`), which tests/run.sh builds;
/// the test fails, saying so, when podman or the image is missing.
pub fn test_image(var: &str, default: &str) -> String {
    let image = std::env::var(var).unwrap_or_else(|_| default.into());
    let ok = std::process::Command::new("podman")
        .args(["image", "exists", &image])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "podman and the image {image} are needed: tests/run.sh installs podman and builds it (or set {var})"
    );
    image
}

/// Runs `cmd`, which must succeed (`what` names it in the failure); its standard output.
pub fn ok(cmd: &mut std::process::Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts `agentbatch sim` as a process of its own for the case's job file `job` (its
/// tasks' scripts), with `extra` arguments; the process and the URL it serves.
pub fn standalone_sim(case: &Case, job: &str, extra: &[&str]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut sim = bin()
        .args(["sim", "--port", "0", "--job", job])
        .args(extra)
        .current_dir(case.dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(sim.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    // Keep reading: a closed pipe would stop the simulator.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while out.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("the simulator said {first}"))
        .to_string();
    (sim, url)
}
