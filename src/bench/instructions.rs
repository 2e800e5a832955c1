//! `agentbatch bench instructions`: the runner's user-space instructions per model turn
//! and per task, counted by valgrind (cachegrind without its cache simulation) on three
//! small W1-shaped runs. Wall and CPU time vary by tens of percent on a shared machine;
//! an instruction count varies by a fraction of a percent, so a committed baseline can
//! catch a regression in the test suite (tests/integration/instructions.rs).
//!
//! What the kernel does is not in that count: a file more per task costs the runner a
//! few thousand instructions of its own, lost in the noise. So valgrind also lists the
//! runner's system calls, and the calls that open, make, rename or remove a file of the
//! run's folder are counted per turn and per task; those counts are exact from run to
//! run.
//!
//! The simulator runs natively as a process of its own, as in the load benchmarks
//! (`load.rs` starts both); only the runner process runs under valgrind.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::process::Command;

use super::load::{run_load_with, Load};

mod baseline;
pub use baseline::{guard, GuardArgs};

/// The three runs: (name, tasks, tool rounds per task). The first two differ only in
/// turns per task (6 against 2), which gives the instructions of a turn; the last two
/// only in tasks (60 against 20), which gives those of a task; what is left is the run's
/// fixed cost (start, loading the job, the report page). 20 tasks keep that fixed cost
/// from drowning the rest, 6 requests are a W1 task, and 10 in flight are W1's ratio
/// of tasks to concurrency.
const RUNS: [(&str, usize, u32); 3] = [
    ("instructions-20x6", 20, 5),
    ("instructions-20x2", 20, 1),
    ("instructions-60x2", 60, 1),
];
const CONCURRENCY: usize = 10;

/// The runner's tokio worker threads under valgrind: fixed, so that the count does not
/// follow the machine's cores (valgrind runs one thread at a time anyway).
const WORKER_THREADS: &str = "2";

/// The margins a new baseline file gets; the committed file says its own and why.
const DEFAULT_MARGIN_PERCENT: f64 = 3.0;
const DEFAULT_FILE_OPS_MARGIN: f64 = 0.5;

/// The system calls counted as file operations: those that open, make, rename or remove
/// a name. (Reads and writes are not: their number follows buffering and timing.)
const FILE_OPS: [&str; 16] = [
    "open",
    "openat",
    "openat2",
    "creat",
    "mkdir",
    "mkdirat",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
];

/// The build profile of this binary (and so of the runner it starts): counts differ
/// several-fold between debug and release, so each has a baseline of its own.
pub fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Instructions of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub tasks: usize,
    pub requests: u32,
    pub instructions: u64,
    /// System calls among [`FILE_OPS`] on paths in the run's folder.
    pub file_ops: u64,
    /// The run's folder: job, reports, valgrind's log and count.
    pub dir: PathBuf,
}

/// What the three runs give, solved from their differences.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Instructions of one model turn: a request, its answer and its tool call, with
    /// their events.
    pub per_turn: u64,
    /// Instructions of one task beyond its turns: starting and ending it, its row, its
    /// transcript.
    pub per_task: u64,
    /// Instructions of the run's own: start, job, report page.
    pub fixed: i64,
    /// File operations ([`FILE_OPS`] on the run's files) of a turn and of a task beyond its turns.
    pub file_ops_per_turn: f64,
    pub file_ops_per_task: f64,
}

impl Figures {
    /// From the three runs of [`RUNS`], in that order.
    pub fn solve(runs: &[Counted; 3]) -> Figures {
        let (per_turn, per_task, fixed) = shape(runs, |c| c.instructions as f64);
        let (file_ops_per_turn, file_ops_per_task, _) = shape(runs, |c| c.file_ops as f64);
        Figures {
            per_turn: per_turn.max(0.0).round() as u64,
            per_task: per_task.max(0.0).round() as u64,
            fixed: fixed.round() as i64,
            file_ops_per_turn,
            file_ops_per_task,
        }
    }
}

/// A figure's cost per turn, per task beyond its turns, and per run, from runs that
/// differ first in turns per task, then in tasks.
fn shape(runs: &[Counted; 3], value: impl Fn(&Counted) -> f64) -> (f64, f64, f64) {
    let [long, short, many] = runs;
    let turns = |c: &Counted| (c.tasks * c.requests as usize) as f64;
    let per_turn = (value(long) - value(short)) / (turns(long) - turns(short)).max(1.0);
    // A short task, turns included, then without them.
    let short_task =
        (value(many) - value(short)) / (many.tasks as f64 - short.tasks as f64).max(1.0);
    let per_task = short_task - per_turn * f64::from(short.requests);
    let fixed = value(short) - short_task * short.tasks as f64;
    (per_turn, per_task, fixed)
}

/// What `bench instructions` measured.
#[derive(Debug, Clone)]
pub struct InstructionReport {
    pub profile: &'static str,
    pub runs: Vec<Counted>,
    pub figures: Figures,
    pub seconds: f64,
}

impl fmt::Display for InstructionReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "instructions: the runner's user-space instructions under valgrind (cachegrind), {} build; the simulator a native process of its own; {CONCURRENCY} tasks in flight",
            self.profile
        )?;
        for r in &self.runs {
            writeln!(
                f,
                "  {} tasks x {} requests: {} instructions, {} file operations ({})",
                r.tasks,
                r.requests,
                grouped(r.instructions.into()),
                r.file_ops,
                r.dir.display()
            )?;
        }
        let g = &self.figures;
        writeln!(
            f,
            "  per model turn {}; per task beyond its turns {}; a W1 task (6 turns) {}; fixed per run {}",
            grouped(g.per_turn.into()),
            grouped(g.per_task.into()),
            grouped(i128::from(g.per_task) + 6 * i128::from(g.per_turn)),
            grouped(g.fixed.into())
        )?;
        writeln!(
            f,
            "  file operations on the run folder (open, make, rename, remove): per model turn {:.2}, per task beyond its turns {:.2}",
            g.file_ops_per_turn, g.file_ops_per_task
        )?;
        write!(f, "  {:.0} s in all", self.seconds)
    }
}

/// A number with thousands separators.
fn grouped(n: i128) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        out.insert(0, '-');
    }
    out
}

/// valgrind's version, or what to install.
async fn valgrind_version() -> anyhow::Result<String> {
    match Command::new("valgrind").arg("--version").output().await {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => bail!(
            "`valgrind --version` failed ({}): {}; bench instructions needs a working valgrind",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "bench instructions counts the runner's instructions with valgrind, which is not installed (not found on PATH): install it (Debian and Ubuntu: apt-get install valgrind; Fedora: dnf install valgrind); tests/run.sh installs it"
        ),
        Err(e) => bail!("cannot start valgrind: {e}"),
    }
}

/// The total of cachegrind's output file: its `summary:` line (only Ir is counted).
fn read_total(file: &Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("valgrind wrote no count to {}", file.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no `summary:` count in {}", file.display()))
}

/// File operations on paths in `dir` (the benchmark's folder, which holds the job and
/// the run folder) in valgrind's log of system calls (`--trace-syscalls=yes`), whose
/// lines read `SYSCALL[pid,tid](nr) sys_NAME ( 0x4a3b(/a/path), ... ) --> result`; a
/// blocking call's completion is a line of its own, without the name. Paths elsewhere
/// are left out: the dynamic loader's search depends on the machine, and glibc reads
/// /proc when it happens to shrink a heap.
fn count_file_ops(log: &Path, dir: &Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(log)
        .with_context(|| format!("cannot read valgrind's log {}", log.display()))?;
    let (inside, itself) = (
        format!("({}/", dir.display()),
        format!("({})", dir.display()),
    );
    let mut calls = 0;
    let mut ops = 0;
    for line in text.lines().filter(|l| l.starts_with("SYSCALL[")) {
        let Some(name) = line
            .split_once(") sys_")
            .and_then(|(_, rest)| rest.split_whitespace().next())
        else {
            continue;
        };
        calls += 1;
        let here = line.contains(&inside) || line.contains(&itself);
        ops += u64::from(here && FILE_OPS.contains(&name));
    }
    if calls == 0 {
        bail!("valgrind's log {} lists no system calls", log.display());
    }
    Ok(ops)
}

/// Runs the three workloads, the runner under valgrind, and solves for the figures.
pub async fn instructions(out: &Path) -> anyhow::Result<InstructionReport> {
    valgrind_version().await?;
    let started = std::time::Instant::now();
    let mut runs = Vec::new();
    for (name, tasks, rounds) in RUNS {
        let load = Load {
            name,
            tasks,
            rounds,
            latency: Duration::from_millis(1),
            concurrency: CONCURRENCY,
            tool_output: 0,
            window: None,
            // As the baseline was measured: the adaptive rate's bookkeeping counts too.
            stated_rpm: None,
        };
        let runner = |exe: &Path, dir: &Path| {
            let mut c = Command::new("valgrind");
            c.args([
                "--tool=cachegrind",
                "--cache-sim=no",
                "--trace-syscalls=yes",
            ])
            .arg(format!(
                "--cachegrind-out-file={}",
                dir.join("cachegrind.out").display()
            ))
            .arg(format!("--log-file={}", dir.join("valgrind.log").display()))
            .arg(exe);
            // Only what the runner and valgrind need, so that no variable of the
            // caller's (OTEL_*, RUST_LOG) changes what is counted.
            c.env_clear();
            for keep in ["PATH", "HOME", "TMPDIR", "VALGRIND_LIB"] {
                if let Some(v) = std::env::var_os(keep) {
                    c.env(keep, v);
                }
            }
            c.env("TOKIO_WORKER_THREADS", WORKER_THREADS);
            c
        };
        let report = run_load_with(&load, out, &runner)
            .await
            .with_context(|| format!("the {name} run under valgrind"))?;
        let requests = load.rounds + 1;
        if report.completed != tasks || report.turns != load.requests() {
            bail!(
                "the {name} run did not go as planned ({} of {tasks} tasks completed, {} of {} turns), so its count means nothing: see {}",
                report.completed,
                report.turns,
                load.requests(),
                report.dir.display()
            );
        }
        let dir = report.dir.parent().unwrap_or(&report.dir).to_path_buf();
        runs.push(Counted {
            tasks,
            requests,
            instructions: read_total(&dir.join("cachegrind.out"))?,
            file_ops: count_file_ops(&dir.join("valgrind.log"), &dir)?,
            dir,
        });
    }
    let three: &[Counted; 3] = runs
        .as_slice()
        .try_into()
        .context("not three runs to solve from")?;
    Ok(InstructionReport {
        profile: profile(),
        figures: Figures::solve(three),
        runs,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(tasks: usize, requests: u32, turn: u64, task: u64, fixed: u64) -> Counted {
        let n = tasks as u64;
        Counted {
            tasks,
            requests,
            instructions: fixed + n * task + n * u64::from(requests) * turn,
            file_ops: 180 + 2 * n,
            dir: PathBuf::new(),
        }
    }

    #[test]
    fn the_three_runs_solve_to_the_turn_task_and_fixed_costs_they_were_made_of() {
        let runs = [
            counted(20, 6, 5_000_000, 4_000_000, 240_000_000),
            counted(20, 2, 5_000_000, 4_000_000, 240_000_000),
            counted(60, 2, 5_000_000, 4_000_000, 240_000_000),
        ];
        assert_eq!(
            Figures::solve(&runs),
            Figures {
                per_turn: 5_000_000,
                per_task: 4_000_000,
                fixed: 240_000_000,
                file_ops_per_turn: 0.0,
                file_ops_per_task: 2.0,
            }
        );
        let none = [0, 1, 2].map(|_| counted(0, 0, 0, 0, 0));
        assert_eq!(Figures::solve(&none).per_turn, 0, "no division by zero");
    }

    #[test]
    fn the_counts_are_read_from_cachegrinds_summary_and_valgrinds_system_calls() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cg.out");
        std::fs::write(
            &file,
            "desc: I1 cache: none\ncmd: x\nevents: Ir\nfl=a\n1 2\nsummary: 951401488\n",
        )
        .unwrap();
        assert_eq!(read_total(&file).unwrap(), 951_401_488);
        std::fs::write(&file, "events: Ir\n").unwrap();
        assert!(read_total(&file).is_err());
        let log = dir.path().join("valgrind.log");
        std::fs::write(
            &log,
            "==1== Cachegrind\n\
             SYSCALL[1,1](257) sys_openat ( 4294967196, 0x1(/b/run/t.jsonl), 524288 ) --> [async] ... \n\
             SYSCALL[1,1](257) ... [async] --> Success(0x4) \n\
             SYSCALL[1,1](257) sys_openat ( 4294967196, 0x1(/proc/sys/vm/overcommit_memory), 524288 ) --> Success(0x4) \n\
             SYSCALL[1,1](257) sys_openat ( 4294967196, 0x1(/bc/x), 524288 ) --> Success(0x4) \n\
             SYSCALL[1,1](0) sys_read ( 4, 0x1, 832 ) --> [async] ... \n\
             SYSCALL[1,2](83) sys_mkdir ( 0x1(/b), 511 ) --> Success(0x0) \n\
             SYSCALL[1,2](82) sys_rename ( 0x1(/b/c.tmp), 0x2(/b/c) ) --> Success(0x0) \n",
        )
        .unwrap();
        assert_eq!(count_file_ops(&log, Path::new("/b")).unwrap(), 3);
        std::fs::write(&log, "==1== Cachegrind\n").unwrap();
        assert!(
            count_file_ops(&log, Path::new("/b")).is_err(),
            "no calls listed at all"
        );
        assert_eq!(grouped(-1_234_567), "-1,234,567");
        assert_eq!(grouped(999), "999");
    }
}
