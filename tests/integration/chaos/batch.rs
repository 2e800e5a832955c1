//! One batch of the chaos property test: the test bed (a git repository, a plain folder,
//! a folder outside every workspace with a sentinel in it), one run of the binary over
//! every seed of the batch with a relative `--out`, and the checks across the run: one
//! row per task, `agentbatch audit` on every transcript, the money of the run and its
//! teams, and nothing written outside a workspace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use agentbatch::tools::workspace::tree_digest;
use rust_decimal::Decimal;
use serde_json::Value;

use super::plan::{job, write_repo, Caps, Task, REPOS, SENTINEL, SENTINEL_TEXT};
use super::transcript::{check_transcript, decimal, read_events};
use super::Finding;
use crate::common::{bin, make_git_repository, read_csv, Case};

pub(super) type Row = BTreeMap<String, String>;

/// The folder a batch runs in, and what must not change in it.
pub(super) struct Bed {
    pub case: Case,
    repos: Vec<PathBuf>,
    digests: Vec<u64>,
    outside: PathBuf,
    pub tasks: Vec<Task>,
    pub caps: Caps,
    pub found: Vec<Finding>,
    /// The batch runs as a shared run (workers of a queue, then `collect`): their
    /// folders sit beside the collected one.
    pub shared: bool,
}

impl Bed {
    pub fn new(seeds: &[u64]) -> Bed {
        Bed::with_caps(seeds, Caps::for_batch(seeds.len() as u64))
    }

    pub fn with_caps(seeds: &[u64], caps: Caps) -> Bed {
        let case = Case::new();
        let repos: Vec<PathBuf> = REPOS.iter().map(|r| write_repo(&case, r)).collect();
        make_git_repository(&repos[0]);
        let outside = case.path("outside");
        case.write(&format!("outside/{SENTINEL}"), SENTINEL_TEXT);
        let digests = repos
            .iter()
            .map(|r| tree_digest(r).expect("digest"))
            .collect();
        let tasks: Vec<Task> = seeds.iter().copied().map(Task::new).collect();
        case.write("job.yaml", &job(&tasks, &outside, &caps));
        Bed {
            case,
            repos,
            digests,
            outside,
            tasks,
            caps,
            found: Vec::new(),
            shared: false,
        }
    }

    /// The run folder: `--out out` is relative to the bed, like the default `reports/`.
    pub fn dir(&self) -> PathBuf {
        self.case.path("out/r")
    }

    pub fn add(&mut self, seed: u64, invariant: &'static str, detail: String) {
        self.found.push(Finding {
            seed,
            invariant,
            detail,
        });
    }

    /// A finding that concerns the whole batch, reported for each of its seeds.
    pub fn add_all(&mut self, invariant: &'static str, detail: String) {
        let seeds: Vec<u64> = self.tasks.iter().map(|t| t.seed).collect();
        for seed in seeds {
            self.add(seed, invariant, detail.clone());
        }
    }

    /// Runs the job through the binary; checks the exit code and stderr.
    fn run(&mut self) -> std::time::Duration {
        let started = Instant::now();
        let ran = bin()
            .args([
                "run", "job.yaml", "--run-id", "r", "--quiet", "--out", "out",
            ])
            .current_dir(self.case.dir.path())
            .output()
            .expect("the binary runs");
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
        if ran.status.code() != Some(0) {
            let detail = format!(
                "exit {:?}: {}",
                ran.status.code(),
                stderr.chars().take(2000).collect::<String>()
            );
            self.add_all("exit 0", detail);
        }
        if stderr.contains("panicked") {
            self.add_all("no panic", stderr.chars().take(2000).collect());
        }
        took
    }

    pub fn rows(&self) -> Vec<Row> {
        let csv = self.dir().join("results.csv");
        if !csv.exists() {
            return Vec::new();
        }
        read_csv(&csv)
            .into_iter()
            .map(|r| r.into_iter().collect())
            .collect()
    }

    /// The page's transcript views, built while the run went from the events the
    /// reporter wrote, are the ones `agentbatch report` reads back from the transcripts.
    pub fn check_page(&mut self) {
        let dir = self.dir();
        if !dir.join("report.html").is_file() {
            self.add_all("a page", "the run wrote no report.html".into());
            return;
        }
        let live = crate::report_page::page_views(&dir);
        let out = bin().arg("report").arg(&dir).output().expect("binary runs");
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            self.add_all("agentbatch report succeeds", err);
            return;
        }
        let read = crate::report_page::page_views(&dir);
        let ids: BTreeSet<&String> = live.keys().chain(read.keys()).collect();
        let mut differ = Vec::new();
        for id in ids {
            if live.get(id) != read.get(id) {
                differ.push(id.clone());
            }
        }
        for id in differ {
            let seed = self
                .tasks
                .iter()
                .find(|t| id == format!("transcripts/{}.jsonl", t.id()))
                .map(|t| t.seed);
            let none = Value::Null;
            let (a, b) = (
                live.get(&id).unwrap_or(&none),
                read.get(&id).unwrap_or(&none),
            );
            let detail = format!("{id}: {}", first_difference("", a, b));
            match seed {
                Some(seed) => self.add(seed, "the page's views are the transcripts'", detail),
                None => self.add_all("the page's views are the transcripts'", detail),
            }
        }
    }

    /// One row per task, each transcript's invariants, and `agentbatch audit` clean.
    /// Returns each task's cost.
    pub fn check_tasks(
        &mut self,
        rows: &[Row],
        stats: &mut BTreeMap<&'static str, usize>,
    ) -> Vec<(usize, Decimal)> {
        let mut by_id: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
        for r in rows {
            by_id.entry(r["task_id"].clone()).or_default().push(r);
        }
        let mut costs = Vec::new();
        for i in 0..self.tasks.len() {
            let (seed, id) = (self.tasks[i].seed, self.tasks[i].id());
            let rows_of = by_id.remove(&id).unwrap_or_default();
            let [row] = rows_of.as_slice() else {
                let detail = format!("{} rows", rows_of.len());
                self.add(seed, "one results.csv row per task", detail);
                continue;
            };
            let cost = Decimal::from_str(&row["cost_usd"]).unwrap_or_default();
            costs.push((i, cost));
            if row["transcript"].is_empty() {
                // Never started (a pool could not pay for its first request).
                if cost != Decimal::ZERO {
                    let detail = format!("${cost} spent by a task that never started");
                    self.add(
                        seed,
                        "spend equals settled usage plus worst-case charges",
                        detail,
                    );
                }
                continue;
            }
            let transcript = self.dir().join(&row["transcript"]);
            let events = read_events(&transcript);
            check_transcript(&self.tasks[i], row, &events, &mut self.found, stats);
            self.check_links(seed, row, &events);
            self.audit(seed, &transcript, row);
        }
        for (id, extra) in by_id {
            let detail = format!("{} rows for {id}, which the job does not have", extra.len());
            self.add(u64::MAX, "one results.csv row per task", detail);
        }
        costs
    }

    /// Every link the patch adds, changes or deletes is one the agent named in a call
    /// (the fixtures' own links never are: the chaos model has not got their names).
    fn check_links(&mut self, seed: u64, row: &Row, events: &[Value]) {
        let Ok(patch) = std::fs::read(self.dir().join(&row["patch"])) else {
            return;
        };
        let calls: String = events
            .iter()
            .filter(|e| e["event"] == "tool_call")
            .map(|e| e["input"].to_string())
            .collect();
        let patch = String::from_utf8_lossy(&patch);
        for file in patch.split("\ndiff --git ").filter_map(|d| {
            let header = d.split("\n@@").next().unwrap_or_default();
            let name = header.lines().next()?.split(" b/").last()?;
            header.contains("120000").then_some(name)
        }) {
            let base = file.rsplit('/').next().unwrap_or(file);
            if !calls.contains(base) {
                let detail = format!("the patch changes the link {file}, which no call named");
                self.add(
                    seed,
                    "a patch holds no link change the agent did not make",
                    detail,
                );
            }
        }
    }

    fn audit(&mut self, seed: u64, transcript: &Path, row: &Row) {
        let audit = bin()
            .arg("audit")
            .arg(transcript)
            .output()
            .expect("audit runs");
        if audit.status.code() == Some(0) {
            return;
        }
        let report = String::from_utf8_lossy(&audit.stdout);
        let problems: Vec<&str> = report
            .lines()
            .filter(|l| !l.contains("(warning)"))
            .take(6)
            .collect();
        let detail = format!(
            "exit {:?} [{} via {}]: {}",
            audit.status.code(),
            row["stop_reason"],
            self.tasks
                .iter()
                .find(|t| t.seed == seed)
                .map_or("?", |t| t.provider),
            problems.join(" | ")
        );
        self.add(seed, "agentbatch audit is clean", detail);
    }

    /// The run's total is its rows' sum, and no team or the run went over its cap.
    fn check_money(&mut self, costs: &[(usize, Decimal)]) -> (Decimal, BTreeMap<String, Decimal>) {
        let total: Decimal = costs.iter().map(|(_, c)| *c).sum();
        let mut teams: BTreeMap<String, Decimal> = BTreeMap::new();
        for (i, cost) in costs {
            if let Some(team) = self.tasks[*i].team {
                *teams.entry(team.to_string()).or_default() += *cost;
            }
        }
        let run_json: Value = std::fs::read_to_string(self.dir().join("run.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null);
        let reported = decimal(&run_json["totals"]["cost_usd"]).unwrap_or_default();
        if reported != total {
            let detail = format!("run.json says ${reported}, the rows add up to ${total}");
            self.add_all("the run's total is the sum of its rows", detail);
        }
        if total > self.caps.run {
            let detail = format!("${total} > ${}", self.caps.run);
            self.add_all("the run stays under its cap", detail);
        }
        for (team, spent) in &teams {
            let cap = if team == "red" {
                self.caps.red
            } else {
                self.caps.blue
            };
            if *spent > cap {
                let detail = format!("team {team} spent ${spent}, its cap is ${cap}");
                self.add_all("no team over its cap", detail);
            }
        }
        (total, teams)
    }

    /// Nothing appeared outside the workspaces: in the outside folder, the fixtures,
    /// beside the run, in the output folder, in the run folder. Without Landlock no
    /// command is confined, so what `bash` writes (`sh_*`, `hook_*` from a planted git
    /// hook it ran) and what the check writes when it imports a planted test file
    /// (`ck_*`) may land where they aimed; the file tools' `ft_*` never may.
    pub fn check_outside(&mut self, landlock: bool) {
        const INVARIANT: &str = "nothing written outside a workspace";
        let tolerated =
            |name: &str| !landlock && ["sh_", "hook_", "ck_"].iter().any(|p| name.starts_with(p));
        let mut appeared = Vec::new();
        for f in &files_under(&self.outside) {
            let top = Path::new(f)
                .iter()
                .next()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if f != SENTINEL && !tolerated(&top) {
                appeared.push(format!("{} appeared", self.outside.join(f).display()));
            }
        }
        if std::fs::read_to_string(self.outside.join(SENTINEL))
            .ok()
            .as_deref()
            != Some(SENTINEL_TEXT)
        {
            appeared.push(format!("{SENTINEL} changed"));
        }
        for (r, d) in self.repos.iter().zip(&self.digests) {
            if tree_digest(r).ok() != Some(*d) {
                appeared.push(format!("the fixture {} changed", r.display()));
            }
        }
        let names = |dir: &Path| -> Vec<String> {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !tolerated(n))
                .collect()
        };
        let beside = ["job.yaml", "gitrepo", "plain", "outside", "out"];
        for n in names(self.case.dir.path()) {
            if !beside.contains(&n.as_str()) {
                appeared.push(format!("{n} appeared beside the run"));
            }
        }
        for n in names(&self.case.path("out")) {
            if n != "r" && !n.starts_with("ledger.sqlite") && !(self.shared && n == "workers") {
                appeared.push(format!("out/{n} appeared"));
            }
        }
        const RUN_FILES: [&str; 11] = [
            "results.csv",
            "summary.csv",
            "run.json",
            "report.html",
            "report-transcripts",
            "transcripts",
            "patches",
            "workspaces",
            "git",
            "tmp",
            ".lock",
        ];
        const COLLECTED: [&str; 2] = ["superseded.csv", ".collected"];
        for n in names(&self.dir()) {
            let expected =
                RUN_FILES.contains(&n.as_str()) || (self.shared && COLLECTED.contains(&n.as_str()));
            if !expected {
                appeared.push(format!("out/r/{n} appeared"));
            }
        }
        for n in names(&self.dir().join("workspaces")) {
            if !self.tasks.iter().any(|t| t.id() == n) {
                appeared.push(format!("out/r/workspaces/{n} appeared"));
            }
        }
        for detail in appeared {
            self.add_all(INVARIANT, detail);
        }
    }
}

/// Every file under `dir`, relative, symlinks not followed.
fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            if let Ok(rel) = p.strip_prefix(dir) {
                out.insert(rel.display().to_string());
            }
        }
    }
    out
}

/// Runs one batch of seeds and checks every invariant; returns what failed.
pub(super) fn run_batch(seeds: &[u64]) -> Vec<Finding> {
    let mut bed = Bed::new(seeds);
    let took = bed.run();
    let rows = bed.rows();
    let sandbox = rows
        .iter()
        .map(|r| r["sandbox"].clone())
        .find(|s| !s.is_empty())
        .unwrap_or_default();
    let mut stats = BTreeMap::new();
    let costs = bed.check_tasks(&rows, &mut stats);
    let (total, teams) = bed.check_money(&costs);
    bed.check_outside(sandbox.contains("landlock"));
    bed.check_page();
    let mut stops: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        *stops.entry(r["stop_reason"].as_str()).or_default() += 1;
    }
    eprintln!(
        "chaos: {} seeds from {} ran in {:.1}s (sandbox: {sandbox}); spent ${total} of ${} (teams {teams:?}); stops: {stops:?}; {stats:?}",
        seeds.len(),
        seeds.first().copied().unwrap_or_default(),
        took.as_secs_f64(),
        bed.caps.run
    );
    if std::env::var_os("AGENTBATCH_CHAOS_KEEP").is_some() {
        let kept = bed.case.dir.keep();
        eprintln!("chaos: kept {}", kept.display());
    }
    bed.found
}

/// Where two JSON values first differ, and the two values there.
fn first_difference(at: &str, a: &Value, b: &Value) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let (p, q) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                if p != q {
                    return first_difference(&format!("{at}/{k}"), p, q);
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if p != q {
                    return first_difference(&format!("{at}/{i}"), p, q);
                }
            }
        }
        _ => {}
    }
    let clip = |v: &Value| v.to_string().chars().take(600).collect::<String>();
    format!(
        "at {at}: built during the run {}, read back {}",
        clip(a),
        clip(b)
    )
}
