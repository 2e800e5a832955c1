//! `agentbatch bench environments`: what a per-task container costs. Tasks over a
//! small generated git repository, each making 5 cheap `bash` calls, run twice with
//! the same tasks: each in a container of `--image` (`environment: { image }`, default
//! limits) and on the host. Container start comes from the transcripts' `environment`
//! events (`start_ms`: from `podman run -d` to the command loop's first word), a
//! call's time from its `tool_result` (`ms`: the bash tool's own time, in whole
//! milliseconds). A third run holds 50 containers up at once (each call sleeps) and
//! samples /proc for the memory of what the engine keeps running: each `conmon` of
//! the run's containers, and the processes inside each container (its first process,
//! the command loop, and everything below it). Podman runs without a system service
//! here, so nothing else stays up; what conmon starts only for a moment (`runc` at
//! the start, `podman container cleanup` at the end, outside the container) is left
//! out, as the samples are taken with every container's loop up.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{bench_dir, run_job_with, transcript_events};
use crate::sim::Sim;
use crate::tools::container::{Engine, EngineChoice};
use crate::vocab::transcript::{ToolOutcome, TranscriptEvent};

/// The image of the container runs unless `--image` names another.
pub const DEFAULT_IMAGE: &str = "localhost/agentbatch-test-base:1";
/// Tasks of the two timed runs (at `--fraction 1`).
pub const TASKS: usize = 100;
/// Containers up at once in the memory run (at `--fraction 1`).
pub const IN_FLIGHT: usize = 50;
const CALLS: usize = 5;
/// As `bench workspaces`.
const CONCURRENCY: usize = 10;
/// Each call of the memory run sleeps this long, so every task's container is still
/// up when the last one starts.
const SLEEP_S: u32 = 4;
/// Issue 30's goals.
const START_GOAL_MS: f64 = 300.0;
const EXEC_GOAL_MS: f64 = 30.0;

/// A median and a 99th percentile of some milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    pub n: usize,
    /// The mean of the middle two for an even count.
    pub median: f64,
    /// Nearest rank: the smallest value with at least 99% of the values at or below it.
    pub p99: f64,
}

impl Spread {
    /// None for no values.
    pub fn of(values: &[u64]) -> Option<Spread> {
        let mut v = values.to_vec();
        let median = crate::stats::median_u64(&mut v)?;
        let rank = (v.len() * 99).div_ceil(100);
        Some(Spread {
            n: v.len(),
            median,
            p99: v[rank.max(1) - 1] as f64,
        })
    }
}

/// One of the two timed runs.
#[derive(Debug, Clone, Default)]
pub struct RunFigures {
    pub tasks: usize,
    pub completed: usize,
    pub wall_s: f64,
    /// CPU seconds the whole machine was busy during the run (/proc/stat: the engine's
    /// processes, the containers', the runner's and anyone else's).
    pub cpu_s: f64,
    /// Every bash call's time.
    pub calls: Vec<u64>,
    /// Calls whose result was an error.
    pub failed_calls: usize,
    /// Each container's start (the container run only).
    pub starts: Vec<u64>,
    /// The workspace methods the tasks got (`copy`, `overlay`, ...).
    pub workspaces: Vec<String>,
}

/// What the engine kept in memory with the memory run's containers up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    /// The containers the run held up at once (its concurrency).
    pub target: usize,
    /// The most seen up in one sample (a conmon with the container's first process,
    /// the command loop, below it).
    pub up: usize,
    /// Samples that saw `up` containers; the figures are the median one's (by RSS).
    pub samples: usize,
    /// The most RSS (conmons and insides) among those samples.
    pub peak_rss_kb: u64,
    pub conmon_rss_kb: u64,
    pub conmon_pss_kb: u64,
    /// Processes inside those containers: each one's loop and what it runs.
    pub inside: usize,
    pub inside_rss_kb: u64,
    pub inside_pss_kb: u64,
    pub wall_s: f64,
}

/// What `bench environments` measured.
#[derive(Debug, Clone)]
pub struct EnvironmentReport {
    pub image: String,
    pub engine: String,
    pub concurrency: usize,
    pub container: RunFigures,
    pub host: RunFigures,
    pub memory: Memory,
    pub dir: PathBuf,
}

fn ms(x: Option<f64>) -> String {
    x.map_or("n/a".into(), |v| format!("{v:.0} ms"))
}

fn goal(value: Option<f64>, under: f64) -> &'static str {
    match value {
        Some(v) if v < under => "met",
        Some(_) => "NOT met",
        None => "not measured",
    }
}

fn mb(kb: u64) -> String {
    format!("{:.1} MB", kb as f64 / 1024.0)
}

impl fmt::Display for EnvironmentReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, h) = (&self.container, &self.host);
        let start = Spread::of(&c.starts);
        let (in_c, on_h) = (Spread::of(&c.calls), Spread::of(&h.calls));
        let host_median = on_h.map(|s| s.median);
        let over = |x: Option<f64>| x.zip(host_median).map(|(x, m)| x - m);
        let (over_median, over_p99) = (over(in_c.map(|s| s.median)), over(in_c.map(|s| s.p99)));
        let calls = |s: Option<Spread>, failed: usize| {
            let failed = if failed > 0 {
                format!(", {failed} failed")
            } else {
                String::new()
            };
            format!(
                "median {}, p99 {} ({} calls{failed})",
                ms(s.map(|s| s.median)),
                ms(s.map(|s| s.p99)),
                s.map_or(0, |s| s.n)
            )
        };
        writeln!(
            f,
            "environments: {} tasks x {CALLS} bash calls, {} in flight, image {} on {}",
            c.tasks, self.concurrency, self.image, self.engine
        )?;
        writeln!(
            f,
            "  container start (`run -d` to the command loop's first word), {} containers: median {}, p99 {}; goal under {START_GOAL_MS:.0} ms median: {}",
            start.map_or(0, |s| s.n),
            ms(start.map(|s| s.median)),
            ms(start.map(|s| s.p99)),
            goal(start.map(|s| s.median), START_GOAL_MS)
        )?;
        writeln!(
            f,
            "  bash call (its tool_result's ms): in a container {}; on the host {}",
            calls(in_c, c.failed_calls),
            calls(on_h, h.failed_calls)
        )?;
        writeln!(
            f,
            "  exec overhead per call = a container call's time minus the host's median call: median {:+.0} ms, p99 {:+.0} ms; goal under {EXEC_GOAL_MS:.0} ms median: {}",
            over_median.unwrap_or(f64::NAN),
            over_p99.unwrap_or(f64::NAN),
            goal(over_median, EXEC_GOAL_MS)
        )?;
        writeln!(
            f,
            "  wall: in containers {:.1} s ({}/{} completed, workspaces {}, machine CPU busy {:.1} s), on the host {:.1} s ({}/{} completed, workspaces {}, machine CPU busy {:.1} s)",
            c.wall_s,
            c.completed,
            c.tasks,
            c.workspaces.join("+"),
            c.cpu_s,
            h.wall_s,
            h.completed,
            h.tasks,
            h.workspaces.join("+"),
            h.cpu_s
        )?;
        let m = &self.memory;
        if m.up == 0 {
            writeln!(
                f,
                "  memory at {} containers in flight: no conmon of the run seen in /proc (Docker's containerd-shim is not counted)",
                m.target
            )?;
        } else {
            writeln!(
                f,
                "  memory at {} containers in flight (from /proc, the median of {} samples with {} up, peak {}; run {:.1} s): {} conmon {} RSS (PSS {}) + {} processes inside {} RSS (PSS {}) = {} RSS, {} per container (PSS {})",
                m.target,
                m.samples,
                m.up,
                mb(m.peak_rss_kb),
                m.wall_s,
                m.up,
                mb(m.conmon_rss_kb),
                mb(m.conmon_pss_kb),
                m.inside,
                mb(m.inside_rss_kb),
                mb(m.inside_pss_kb),
                mb(m.conmon_rss_kb + m.inside_rss_kb),
                mb((m.conmon_rss_kb + m.inside_rss_kb) / m.up as u64),
                mb((m.conmon_pss_kb + m.inside_pss_kb) / m.up as u64)
            )?;
        }
        write!(f, "  reports: {}", self.dir.display())
    }
}

/// Makes a git repository of a few files in `dir`.
fn generate(dir: &Path) -> anyhow::Result<PathBuf> {
    let repo = dir.join("repo");
    let files = [
        (
            "README.md",
            "# bench\n\nA small repository for `bench environments`.\n",
        ),
        ("src/app.py", "from util import add\n\nprint(add(1, 2))\n"),
        ("src/util.py", "def add(a, b):\n    return a + b\n"),
        (
            "tests/test_util.py",
            "from util import add\n\nassert add(2, 2) == 4\n",
        ),
    ];
    for (path, text) in files {
        let path = repo.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    for args in [
        &["init", "--quiet"][..],
        &["add", "-A"],
        &["commit", "--quiet", "-m", "generated"],
    ] {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .args(args)
            .current_dir(&repo)
            .status()
            .context("cannot run git")?
            .success();
        anyhow::ensure!(ok, "git {args:?} failed in {}", repo.display());
    }
    Ok(repo)
}

/// A job of `tasks` tasks, `concurrency` at once, each making [`CALLS`] bash calls of
/// `command(task, call)` over `repo`, in a container of `image` when one is given.
fn job(
    name: &str,
    repo: &Path,
    tasks: usize,
    concurrency: usize,
    image: Option<&str>,
    command: impl Fn(usize, usize) -> String,
) -> String {
    let quoted = |s: &str| serde_json::Value::from(s).to_string();
    let environment = image.map_or(String::new(), |i| {
        format!("  environment: {{ image: {} }}\n", quoted(i))
    });
    let list: String = (0..tasks)
        .map(|i| {
            let turns: String = (0..CALLS)
                .map(|k| {
                    format!(
                        "{{ content: [ {{ tool_use: {{ name: bash, input: {{ command: {} }} }} }} ] }}, ",
                        quoted(&command(i, k))
                    )
                })
                .collect();
            // The runner's pid in the id names its containers (see `conmon_is_ours`).
            format!("  - {{ id: t{}-{i:03}, sim: {{ turns: [ {turns}{{ content: [ {{ text: done }} ] }} ] }} }}\n", std::process::id())
        })
        .collect();
    format!(
        "name: {name}\nconcurrency: {concurrency}\ndefaults:\n  provider: sim\n  prompt: look around\n  model: claude-haiku-4-5\n  max_tokens: 256\n  tools: [bash]\n  repo: {}\n  keep_workspaces: never\n{environment}  limits: {{ max_turns: {}, time_limit: 10m, max_repeats: off }}\ntasks:\n{list}",
        quoted(&repo.display().to_string()),
        CALLS + 2
    )
}

/// Runs `yaml` in `dir` and reads its transcripts.
async fn timed(dir: &Path, yaml: &str, tasks: usize) -> anyhow::Result<RunFigures> {
    let sim = Arc::new(Sim::start_local().await?);
    let (started, busy) = (Instant::now(), busy_s());
    let outcome = run_job_with(dir, yaml, sim, None).await?;
    let mut figures = RunFigures {
        tasks,
        wall_s: started.elapsed().as_secs_f64(),
        cpu_s: busy_s() - busy,
        ..RunFigures::default()
    };
    for row in &outcome.summary.rows {
        if row.stop_reason.as_str() == "completed" {
            figures.completed += 1;
        }
        for event in transcript_events(&outcome.summary.dir, &row.key)? {
            match event {
                TranscriptEvent::Environment { start_ms, .. } => figures.starts.push(start_ms),
                TranscriptEvent::Workspace {
                    method: Some(m), ..
                } if !figures.workspaces.contains(&m) => figures.workspaces.push(m),
                TranscriptEvent::ToolResult {
                    name,
                    outcome: ToolOutcome::Ran { ms, is_error, .. },
                    ..
                } if name == "bash" => {
                    figures.calls.push(ms);
                    figures.failed_calls += usize::from(is_error);
                }
                _ => {}
            }
        }
    }
    if figures.calls.is_empty() {
        let why = outcome
            .summary
            .rows
            .first()
            .map_or("no task ran".to_string(), |r| r.stop_detail.clone());
        anyhow::bail!("no bash call ran in {}: {why}", dir.display());
    }
    Ok(figures)
}

/// Runs the bench: `tasks` tasks in containers of `image` and on the host, then
/// `in_flight` containers at once for their memory.
pub async fn environments(
    out: &Path,
    image: &str,
    tasks: usize,
    in_flight: usize,
) -> anyhow::Result<EnvironmentReport> {
    let engine = tokio::task::spawn_blocking(|| Engine::find(EngineChoice::Auto))
        .await?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let base = bench_dir(out, "environments");
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    let base = base.canonicalize()?;
    let repo = generate(&base)?;
    let cheap = |i: usize, k: usize| format!("echo t{i:03} call {k}; ls");
    let yaml = job(
        "bench-env-container",
        &repo,
        tasks,
        CONCURRENCY,
        Some(image),
        cheap,
    );
    let container = timed(&base.join("container"), &yaml, tasks).await?;
    if container.starts.is_empty() {
        anyhow::bail!(
            "no container started in {}: see its results.csv",
            base.join("container").display()
        );
    }
    let yaml = job("bench-env-host", &repo, tasks, CONCURRENCY, None, cheap);
    let host = timed(&base.join("host"), &yaml, tasks).await?;
    let sleepy = |i: usize, k: usize| format!("sleep {SLEEP_S}; echo t{i:03} call {k}");
    let yaml = job(
        "bench-env-memory",
        &repo,
        in_flight,
        in_flight,
        Some(image),
        sleepy,
    );
    let memory = memory_run(&base.join("memory"), &yaml, in_flight).await?;
    Ok(EnvironmentReport {
        image: image.to_string(),
        engine: engine.version,
        concurrency: CONCURRENCY,
        container,
        host,
        memory,
        dir: base,
    })
}

/// Runs the memory run's job while a thread samples /proc every 250 ms.
async fn memory_run(dir: &Path, yaml: &str, in_flight: usize) -> anyhow::Result<Memory> {
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (stop, seen) = (stop.clone(), seen.clone());
        let runner = std::process::id();
        tokio::task::spawn_blocking(move || {
            while !stop.load(Ordering::SeqCst) {
                let one = sample(runner);
                if one.up > 0 {
                    seen.lock().unwrap_or_else(|e| e.into_inner()).push(one);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let sim = Arc::new(Sim::start_local().await?);
    let started = Instant::now();
    let ran = run_job_with(dir, yaml, sim, None).await;
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.await;
    ran?;
    let samples = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Memory {
        wall_s: started.elapsed().as_secs_f64(),
        ..settle(samples, in_flight)
    })
}

/// Of the samples that saw the most containers up, the median one by RSS (the lower
/// middle for an even count), with how many there were and their peak.
fn settle(mut samples: Vec<Memory>, target: usize) -> Memory {
    let total = |m: &Memory| m.conmon_rss_kb + m.inside_rss_kb;
    let up = samples.iter().map(|m| m.up).max().unwrap_or(0);
    samples.retain(|m| m.up == up && up > 0);
    samples.sort_by_key(total);
    let n = samples.len();
    let peak_rss_kb = samples.last().map_or(0, total);
    let median = if n == 0 {
        Memory::default()
    } else {
        samples.swap_remove((n - 1) / 2)
    };
    Memory {
        target,
        samples: n,
        peak_rss_kb,
        ..median
    }
}

/// The ticks all CPUs were busy since boot, from /proc/stat's `cpu` line: user, nice,
/// system, irq and softirq (not idle, iowait, or steal, which another guest took).
fn busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    Some(
        [0, 1, 2, 5, 6]
            .iter()
            .map(|&i| f.get(i).copied().unwrap_or(0))
            .sum(),
    )
}

/// [`busy_ticks`] now, in seconds (0 where /proc/stat cannot be read).
fn busy_s() -> f64 {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| busy_ticks(&t))
        .unwrap_or(0) as f64
        / hz
}

/// A process as /proc/PID/stat says it.
#[derive(Debug, Clone, PartialEq)]
struct Proc {
    pid: u32,
    ppid: u32,
    comm: String,
}

/// Reads `/proc/PID/stat`: the command name is in parentheses and may hold spaces and
/// parentheses itself, so the fields after it start after the last `)`.
fn parse_stat(text: &str) -> Option<Proc> {
    let (pid, rest) = text.split_once(" (")?;
    let (comm, fields) = rest.rsplit_once(") ")?;
    let ppid = fields.split_whitespace().nth(1)?.parse().ok()?;
    Some(Proc {
        pid: pid.trim().parse().ok()?,
        ppid,
        comm: comm.to_string(),
    })
}

/// Whether a conmon's command line (`\0`-separated) runs a container of the runner
/// `runner`: its `-n` names `agentbatch-t<runner>-<task>-...` (the bench's task ids
/// carry the runner's pid).
fn conmon_is_ours(cmdline: &[u8], runner: u32) -> bool {
    let mut args = cmdline.split(|b| *b == 0);
    let mark = format!("agentbatch-t{runner}-");
    while let Some(arg) = args.next() {
        if arg == b"-n" || arg == b"--name" {
            let name = String::from_utf8_lossy(args.next().unwrap_or_default());
            return name.starts_with(&mark);
        }
    }
    false
}

/// The process's pid in its innermost PID namespace, from /proc/PID/status's `NSpid`
/// line: 1 for a container's first process.
fn inner_pid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))?
        .split_whitespace()
        .last()?
        .parse()
        .ok()
}

/// A container of the runner: its conmon, and the processes inside it (its first
/// process and every process below that) when the first process is up.
#[derive(Debug, PartialEq)]
struct Found {
    conmon: u32,
    inside: Vec<u32>,
}

/// The conmons `ours` accepts, each with the processes inside its container: below
/// the child of conmon that `first` says is the container's first process (conmon's
/// other children, `runc` or `podman container cleanup`, run outside the container).
fn containers(
    table: &[Proc],
    ours: impl Fn(u32) -> bool,
    first: impl Fn(u32) -> bool,
) -> Vec<Found> {
    let children = |parent: u32| table.iter().filter(move |p| p.ppid == parent);
    let mut found = Vec::new();
    for conmon in table.iter().filter(|p| p.comm == "conmon" && ours(p.pid)) {
        let mut inside = Vec::new();
        let mut next: Vec<u32> = children(conmon.pid)
            .filter(|p| first(p.pid))
            .map(|p| p.pid)
            .collect();
        while let Some(pid) = next.pop() {
            inside.push(pid);
            next.extend(children(pid).map(|p| p.pid));
        }
        found.push(Found {
            conmon: conmon.pid,
            inside,
        });
    }
    found
}

/// A `Name:   123 kB` line's number in a /proc file.
fn kb_field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn proc_file(pid: u32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default()
}

/// RSS and PSS of one process, in kB (0 for one that ended).
fn rss_pss(pid: u32) -> (u64, u64) {
    (
        kb_field(&proc_file(pid, "status"), "VmRSS:"),
        kb_field(&proc_file(pid, "smaps_rollup"), "Pss:"),
    )
}

/// One look at /proc: the runner's containers up (a conmon with the container's first
/// process below it) and their memory.
fn sample(runner: u32) -> Memory {
    let table: Vec<Proc> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
                .filter_map(|t| parse_stat(&t))
                .collect()
        })
        .unwrap_or_default();
    let ours = |pid: u32| {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| conmon_is_ours(&c, runner))
    };
    let first = |pid: u32| inner_pid(&proc_file(pid, "status")) == Some(1);
    let mut m = Memory::default();
    for found in containers(&table, ours, first) {
        if found.inside.is_empty() {
            continue;
        }
        m.up += 1;
        let (rss, pss) = rss_pss(found.conmon);
        m.conmon_rss_kb += rss;
        m.conmon_pss_kb += pss;
        for pid in found.inside {
            let (rss, pss) = rss_pss(pid);
            m.inside += 1;
            m.inside_rss_kb += rss;
            m.inside_pss_kb += pss;
        }
    }
    m
}

#[cfg(test)]
#[path = "environments_tests.rs"]
mod tests;
