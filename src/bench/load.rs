//! The load benchmarks: W1 throughput, W2 scale, W3 long conversations. The simulator
//! runs as a separate `agentbatch sim` process and the runner as an `agentbatch run`
//! process, so that each one's CPU and memory come from the OS for that process alone.

use crate::vocab::context::ContextStrategy;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::bench_dir;

/// W1's stated limit: five times the ~2,000 requests a second it sends, so it paces
/// nothing, as a provider tier far above the run's needs does not.
pub const W1_STATED_RPM: u32 = 600_000;
/// W2's: five times its ~5,000 a second.
pub const W2_STATED_RPM: u32 = 1_500_000;

/// One load workload.
#[derive(Debug, Clone)]
pub struct Load {
    pub name: &'static str,
    pub tasks: usize,
    /// Tool rounds per task; each task makes this many requests plus one.
    pub rounds: u32,
    pub latency: Duration,
    pub concurrency: usize,
    /// Bytes of the file each tool call reads back (0: the small get_time tool).
    pub tool_output: usize,
    /// A context window the simulator enforces and the runner knows, in tokens, and
    /// how the runner keeps inside it (`off`: it stops at it).
    pub window: Option<(u64, ContextStrategy)>,
    /// The request limit the simulator states in its answers' headers, as Anthropic's
    /// and OpenAI's do (and enforces); None: it states none, as a vLLM server would,
    /// and the runner's adaptive rate probes it.
    pub stated_rpm: Option<u32>,
}

impl Load {
    /// W1: 1,000 tasks x 5 tool rounds, 50 ms, 100 in flight.
    pub fn w1(fraction: f64) -> Load {
        Load {
            name: "w1-throughput",
            tasks: (1000.0 * fraction).round().max(1.0) as usize,
            rounds: 5,
            latency: Duration::from_millis(50),
            concurrency: 100,
            tool_output: 0,
            window: None,
            stated_rpm: Some(W1_STATED_RPM),
        }
    }

    /// W1 against a server that states no limits: what the adaptive rate's probe costs.
    pub fn w1_unstated(fraction: f64) -> Load {
        Load {
            name: "w1-throughput-unstated",
            stated_rpm: None,
            ..Load::w1(fraction)
        }
    }

    /// W2: 10,000 tasks x 3 tool rounds, 1 s, 5,000 in flight.
    pub fn w2(fraction: f64) -> Load {
        Load {
            name: "w2-scale",
            tasks: (10_000.0 * fraction).round().max(1.0) as usize,
            rounds: 3,
            latency: Duration::from_secs(1),
            concurrency: (5000.0 * fraction).round().max(1.0) as usize,
            tool_output: 0,
            window: None,
            stated_rpm: Some(W2_STATED_RPM),
        }
    }

    /// W3: 50 tasks x `turns` turns, each tool call adding 2 KB to the history.
    pub fn w3(turns: u32, fraction: f64) -> Load {
        Load {
            name: "w3-history",
            tasks: (50.0 * fraction).round().max(1.0) as usize,
            rounds: turns.saturating_sub(1),
            latency: Duration::from_millis(10),
            concurrency: (50.0 * fraction).round().max(1.0) as usize,
            tool_output: 2048,
            window: None,
            stated_rpm: Some(W1_STATED_RPM),
        }
    }

    /// W3 at `turns` turns under a 60k-token window, kept inside it by `strategy`
    /// (`off`: stopping at it).
    pub fn w3_window(turns: u32, fraction: f64, strategy: ContextStrategy) -> Load {
        Load {
            name: match strategy {
                ContextStrategy::Auto => "w3-window-auto",
                ContextStrategy::ClearToolResults => "w3-window-clear",
                ContextStrategy::Summarize => "w3-window-summarize",
                ContextStrategy::Native => "w3-window-native",
                ContextStrategy::Off => "w3-window-off",
            },
            window: Some((WINDOW, strategy)),
            ..Load::w3(turns, fraction)
        }
    }

    /// Requests the workload makes when nothing fails.
    pub fn requests(&self) -> u64 {
        self.tasks as u64 * u64::from(self.rounds + 1)
    }

    /// Wall time if only the server's latency counted: tasks x requests x latency / in
    /// flight.
    pub fn ideal(&self) -> Duration {
        let waves = self.tasks.div_ceil(self.concurrency) as u32;
        self.latency * (self.rounds + 1) * waves
    }

    fn job(&self, base_url: &str, repo: Option<&Path>) -> String {
        let latency = format!("{}ms", self.latency.as_millis());
        let (context, sim_window) = match self.window {
            Some((w, strategy)) => {
                let name = serde_json::to_value(strategy)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                (
                    format!("  context: {{ window: {w}, strategy: {name} }}\n"),
                    format!("    context_window: {w}\n"),
                )
            }
            None => (String::new(), String::new()),
        };
        let (tools, call, extra) = match repo {
            Some(r) => (
                "[read_file]",
                "{ tool_use: { name: read_file, input: { path: data.txt } } }".to_string(),
                format!("  repo: {}\n  keep_workspaces: never\n", r.display()),
            ),
            None => (
                "[get_time]",
                "{ tool_use: { name: get_time, input: {} } }".to_string(),
                String::new(),
            ),
        };
        let mut turns = String::new();
        for _ in 0..self.rounds {
            turns.push_str(&format!("      - content: [ {call} ]\n"));
        }
        turns.push_str("      - content: [ { text: done } ]\n");
        let tasks: String = (0..self.tasks)
            .map(|i| format!("  - {{ id: t{i:05}, prompt: go }}\n"))
            .collect();
        format!(
            "name: bench-{name}\nconcurrency: {conc}\nproviders:\n  bench: {{ protocol: anthropic, simulator: true, base_url: \"{base_url}\", timeout: 10m }}\ndefaults:\n  provider: bench\n  model: claude-haiku-4-5\n  max_tokens: 256\n  tools: {tools}\n{extra}{context}  limits: {{ max_turns: {max_turns}, time_limit: 2h, max_repeats: off }}\n  sim:\n{sim_window}    latency: {latency}\n    turns:\n{turns}tasks:\n{tasks}",
            name = self.name,
            conc = self.concurrency,
            max_turns = self.rounds + 1,
        )
    }
}

/// What one load run measured.
#[derive(Debug, Clone)]
pub struct LoadReport {
    pub load: Load,
    pub wall: Duration,
    /// Model turns answered (from results.csv).
    pub turns: u64,
    pub completed: usize,
    /// User and system CPU of the runner's process, start to exit.
    pub runner_cpu_s: f64,
    /// From run.json's completion after the last task to the process's exit: the
    /// summary, the report page, the exit.
    pub after_tasks_ms: u64,
    pub runner_rss_mb: f64,
    pub sim_cpu_s: f64,
    /// The longest and the 99th-percentile task wall time: a starved task shows here.
    pub max_task_s: f64,
    pub p99_task_s: f64,
    /// Mean request body size, from the transcripts' request events.
    pub mean_request_kb: f64,
    /// How tasks that did not end as planned ended: (stop reason, detail, count).
    pub other_stops: Vec<(String, String, usize)>,
    /// Dollars per task (the simulator's usage at list prices) and compactions in all.
    pub usd_per_task: rust_decimal::Decimal,
    pub compactions: u64,
    pub dir: PathBuf,
}

impl LoadReport {
    pub fn cpu_per_1000_turns(&self) -> f64 {
        self.runner_cpu_s / (self.turns.max(1) as f64) * 1000.0
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let l = &self.load;
        let ideal = l.ideal().as_secs_f64();
        writeln!(
            f,
            "{}: {} tasks x {} requests, {} ms latency, {} in flight{}; {}",
            l.name,
            l.tasks,
            l.rounds + 1,
            l.latency.as_millis(),
            l.concurrency,
            if l.tool_output > 0 {
                format!(", {} B tool output per call", l.tool_output)
            } else {
                String::new()
            },
            match l.stated_rpm {
                Some(rpm) => format!("the simulator states {rpm} rpm"),
                None => "the simulator states no limits (adaptive rate)".to_string(),
            }
        )?;
        writeln!(
            f,
            "  wall {:.2} s vs ideal {:.2} s ({:+.1}%); tasks completed {}/{}; turns {} of {}; after the last task (summary, report page, exit) {} ms",
            self.wall.as_secs_f64(),
            ideal,
            (self.wall.as_secs_f64() / ideal - 1.0) * 100.0,
            self.completed,
            l.tasks,
            self.turns,
            l.requests(),
            self.after_tasks_ms
        )?;
        writeln!(
            f,
            "  runner: {:.2} CPU-s = {:.3} CPU-s per 1,000 turns, peak RSS {:.0} MB; simulator (separate process): {:.2} CPU-s",
            self.runner_cpu_s,
            self.cpu_per_1000_turns(),
            self.runner_rss_mb,
            self.sim_cpu_s
        )?;
        if let Some((w, strategy)) = l.window {
            writeln!(
                f,
                "  {w}-token window, {}: {} compactions, ${:.4} per task, {:.1} turns per task",
                match strategy {
                    ContextStrategy::Off => "compaction off".to_string(),
                    s => format!("{s:?}"),
                },
                self.compactions,
                self.usd_per_task,
                self.turns as f64 / l.tasks.max(1) as f64
            )?;
        }
        for (stop, detail, n) in &self.other_stops {
            let detail = crate::text::prefix(detail, 160);
            writeln!(f, "  NOT AS PLANNED: {n} task(s) {stop}: {detail}")?;
        }
        write!(
            f,
            "  task wall: max {:.2} s, p99 {:.2} s; mean request {:.1} KB; reports: {}",
            self.max_task_s,
            self.p99_task_s,
            self.mean_request_kb,
            self.dir.display()
        )
    }
}

/// CPU seconds a live process has used (utime + stime from /proc).
/// User and system CPU seconds of this process's children that have been waited for.
fn children_cpu_s() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
        t(u.user_time()) + t(u.system_time())
    })
}

fn proc_cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 12th and
    // 13th of those.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// Runs one workload: simulator and runner as separate processes.
pub async fn run_load(load: &Load, out: &Path) -> anyhow::Result<LoadReport> {
    run_load_with(load, out, &|exe: &Path, _: &Path| Command::new(exe)).await
}

/// [`run_load`], the runner started by `runner`: given the agentbatch binary and the
/// benchmark's folder, it returns the command that the runner's own arguments (`run
/// JOB --out DIR --run-id run --quiet`) are added to, so that another program (valgrind)
/// may run it.
pub(super) async fn run_load_with(
    load: &Load,
    out: &Path,
    runner: &dyn Fn(&Path, &Path) -> Command,
) -> anyhow::Result<LoadReport> {
    let (dir, job, repo) = prepare(load, out)?;
    let exe = std::env::current_exe().context("cannot find the agentbatch binary")?;
    let (mut sim, url) = start_sim(&exe, &job, load.stated_rpm).await?;
    std::fs::write(&job, load.job(&url, repo.as_deref()))?;

    let children_before = children_cpu_s();
    let started = Instant::now();
    let status = runner(&exe, &dir)
        .arg("run")
        .arg(&job)
        .arg("--out")
        .arg(&dir)
        .args(["--run-id", "run", "--quiet"])
        .stdout(Stdio::null())
        .status()
        .await
        .context("cannot start the runner process")?;
    let wall = started.elapsed();
    let exited = chrono::Utc::now();
    // The runner's whole process, the report page included: run.json's own figure is
    // taken before the page is written.
    let runner_cpu_s = children_cpu_s() - children_before;
    let sim_cpu_s = sim.id().map_or(0.0, proc_cpu_s);
    let _ = sim.kill().await;
    if !status.success() {
        bail!("the runner failed ({status}); see {}", dir.display());
    }

    let run_dir = dir.join("run");
    let run_json = crate::report::RunJson::read(&run_dir.join(crate::report::files::RUN_JSON))?;
    let after_tasks_ms = run_json
        .finished_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(0, |t| {
            (exited - t.with_timezone(&chrono::Utc))
                .num_milliseconds()
                .max(0) as u64
        });
    let res = run_json.resources.unwrap_or(Value::Null);
    let f = |k: &str| res[k].as_f64().unwrap_or(0.0);
    let tally = Tally::of(&run_dir, repo.is_some())?;
    let walls = &tally.walls;
    let p99 = walls
        .get((walls.len() * 99 / 100).min(walls.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0);
    let mean_request_kb = mean_request_kb(&run_dir, tally.sample);
    Ok(LoadReport {
        load: load.clone(),
        wall,
        turns: tally.turns,
        completed: tally.completed,
        runner_cpu_s,
        after_tasks_ms,
        runner_rss_mb: f("max_rss_mb"),
        sim_cpu_s,
        max_task_s: walls.last().copied().unwrap_or(0) as f64 / 1000.0,
        p99_task_s: p99 as f64 / 1000.0,
        mean_request_kb,
        other_stops: tally.other_stops,
        usd_per_task: tally.usd / rust_decimal::Decimal::from(tally.rows.max(1) as u64),
        compactions: tally.compactions,
        dir: run_dir,
    })
}

/// The workload's folder under `out`, its job file (pointing nowhere yet: the simulator's
/// port is not known) and, for tool output of a size, the repository its tool reads.
fn prepare(load: &Load, out: &Path) -> anyhow::Result<(PathBuf, PathBuf, Option<PathBuf>)> {
    let dir = bench_dir(out, load.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let repo = if load.tool_output > 0 {
        let r = dir.join("repo");
        std::fs::create_dir_all(&r)?;
        let line =
            "0123456789abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ quick brown fox\n";
        let text: String = line.repeat(load.tool_output / line.len() + 1);
        std::fs::write(r.join("data.txt"), &text[..load.tool_output])?;
        Some(r)
    } else {
        None
    };
    let job = dir.join("job.yaml");
    std::fs::write(&job, load.job("http://127.0.0.1:1", repo.as_deref()))?;
    Ok((dir, job, repo))
}

/// Starts the simulator as a process of its own with the job's scripts; it and the URL
/// it serves.
async fn start_sim(
    exe: &Path,
    job: &Path,
    stated_rpm: Option<u32>,
) -> anyhow::Result<(tokio::process::Child, String)> {
    let mut sim = Command::new(exe)
        .args(["sim", "--port", "0", "--no-request-bodies", "--job"])
        .arg(job)
        .args(stated_rpm.map(|r| format!("--rpm={r}")))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the simulator process")?;
    let stdout = sim.stdout.take().context("no simulator output")?;
    let mut lines = BufReader::new(stdout);
    let mut first = String::new();
    tokio::time::timeout(Duration::from_secs(120), lines.read_line(&mut first))
        .await
        .context("the simulator did not start within 2 minutes")??;
    // Keep reading what it prints: a closed pipe would end the simulator mid-run.
    tokio::spawn(async move {
        let mut sink = String::new();
        while matches!(lines.read_line(&mut sink).await, Ok(n) if n > 0) {
            sink.clear();
        }
    });
    let Some(url) = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .map(str::to_string)
    else {
        bail!("unexpected simulator output: {first}");
    };
    Ok((sim, url))
}

/// What the run's rows add up to.
struct Tally {
    rows: usize,
    turns: u64,
    /// Tasks that stopped as the workload expects.
    completed: usize,
    /// Each task's wall time, sorted.
    walls: Vec<u64>,
    usd: rust_decimal::Decimal,
    compactions: u64,
    /// The first task's transcript.
    sample: Option<String>,
    /// Any other stop: reason, detail, how many tasks.
    other_stops: Vec<(String, String, usize)>,
}

impl Tally {
    /// Reads the run's results.csv; a workload with a repository expects its tasks to
    /// stop at max_turns.
    fn of(run_dir: &Path, with_repo: bool) -> anyhow::Result<Tally> {
        let results = crate::report::read_results(
            &run_dir.join(crate::report::files::RESULTS_CSV),
            &[
                "turns",
                "stop_reason",
                "wall_ms",
                "transcript",
                "stop_detail",
            ],
            &[],
        )?;
        let mut other_stops: Vec<(String, String, usize)> = Vec::new();
        let expected_stop = if with_repo { "max_turns" } else { "completed" };
        let (mut turns, mut completed, mut walls) = (0u64, 0usize, Vec::new());
        let (mut usd, mut compactions) = (rust_decimal::Decimal::ZERO, 0u64);
        let mut sample = None;
        for rec in &results.rows {
            turns += rec.turns.unwrap_or(0);
            usd += rec.cost_usd.unwrap_or_default();
            compactions += rec.compactions.unwrap_or(0);
            if rec.stop_reason == expected_stop || rec.stop_reason == "completed" {
                completed += 1;
            } else {
                let (stop, detail) = (rec.stop_reason.clone(), rec.stop_detail.clone());
                match other_stops
                    .iter_mut()
                    .find(|(s, d, _)| *s == stop && *d == detail)
                {
                    Some(o) => o.2 += 1,
                    None => other_stops.push((stop, detail, 1)),
                }
            }
            walls.push(rec.wall_ms.unwrap_or(0));
            sample.get_or_insert_with(|| rec.transcript.clone());
        }
        walls.sort_unstable();
        Ok(Tally {
            rows: results.rows.len(),
            turns,
            completed,
            walls,
            usd,
            compactions,
            sample,
            other_stops,
        })
    }
}

/// The mean size of the requests of the `sample` transcript, in KB.
fn mean_request_kb(run_dir: &Path, sample: Option<String>) -> f64 {
    sample
        .and_then(|t| std::fs::read_to_string(run_dir.join(t)).ok())
        .map(|text| {
            let sizes: Vec<f64> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v["event"] == "request")
                .filter_map(|v| v["bytes"].as_f64())
                .collect();
            sizes.iter().sum::<f64>() / sizes.len().max(1) as f64 / 1024.0
        })
        .unwrap_or(0.0)
}

/// The window the W3 compaction runs work under: 200 turns of 2 KB results are about
/// 120k of the simulator's tokens, so both runs pass it well before their end.
const WINDOW: u64 = 60_000;

/// How the runner's CPU per turn grows with the conversation's length (W3 at several
/// lengths): linear growth per turn is the one serialization each request needs.
pub fn history_growth(runs: &[LoadReport]) -> String {
    let Some(base) = runs.first() else {
        return String::new();
    };
    let per_turn = |r: &LoadReport| r.runner_cpu_s / r.turns.max(1) as f64 * 1000.0;
    let mut s = String::from(
        "w3 growth: turns per task -> runner CPU-ms per turn, mean request KB (x vs the first)\n",
    );
    for r in runs {
        s.push_str(&format!(
            "  {:>4} turns: {:.3} CPU-ms/turn (x{:.2}), {:.0} KB/request (x{:.2})\n",
            r.load.rounds + 1,
            per_turn(r),
            per_turn(r) / per_turn(base).max(1e-9),
            r.mean_request_kb,
            r.mean_request_kb / base.mean_request_kb.max(1e-9)
        ));
    }
    s.pop();
    s
}
