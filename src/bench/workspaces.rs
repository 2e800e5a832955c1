//! `agentbatch bench workspaces`: tasks over a generated repository of real size (by
//! default 20,000 files, 240 MB, one git commit), each editing three files and running
//! a check, once per workspace method this machine has (overlay where the process can
//! mount one, reflink where the `--out` folder's filesystem has reflinks, copy always).
//! The pristine checkout is made first, once, into a pristine cache the runs then
//! read (`--pristine-cache`), so its time and writes are reported apart and each run's
//! figures are the tasks' own. Setup and patch times come from the transcripts (a
//! task's setup is making its workspace from the pristine); bytes written from the
//! process's I/O counters; peak disk use from sampling the file system's used space
//! while the run goes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

use super::{bench_dir, run_job_with};
use crate::sim::Sim;

/// What one method cost.
#[derive(Debug, Clone)]
pub struct WorkspaceReport {
    pub method: &'static str,
    pub tasks: usize,
    pub passed: usize,
    pub wall_s: f64,
    pub setup_median_ms: f64,
    pub setup_p99_ms: f64,
    /// Making the one pristine checkout (once, for every method), and what it wrote.
    pub pristine_ms: f64,
    pub pristine_written_mb: f64,
    pub patch_median_ms: f64,
    pub patch_p99_ms: f64,
    pub written_mb: f64,
    pub peak_disk_mb: f64,
}

impl fmt::Display for WorkspaceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "workspaces, {}: {} tasks ({} passed) in {:.1} s (pristine checkout made once before: {:.1} s, {:.0} MB written); setup per task median {:.1} ms, p99 {:.1} ms; patch median {:.0} ms, p99 {:.0} ms; written by the tasks {:.1} MB ({:.3} MB per task); peak disk use {:.0} MB",
            self.method,
            self.tasks,
            self.passed,
            self.wall_s,
            self.pristine_ms / 1000.0,
            self.pristine_written_mb,
            self.setup_median_ms,
            self.setup_p99_ms,
            self.patch_median_ms,
            self.patch_p99_ms,
            self.written_mb,
            self.written_mb / self.tasks.max(1) as f64,
            self.peak_disk_mb
        )
    }
}

const FILE_BYTES: usize = 12 * 1024;
const FILES_PER_DIR: usize = 100;

/// Makes (or reuses) a git repository of `files` files of 12 KB in folders of 100.
fn generate(dir: &Path, files: usize) -> anyhow::Result<PathBuf> {
    let repo = dir.join(format!("repo-{files}"));
    if repo.join(".git").is_dir() {
        return Ok(repo);
    }
    let _ = std::fs::remove_dir_all(&repo);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..files {
        let folder = repo.join(format!("d{:03}", i / FILES_PER_DIR));
        if i % FILES_PER_DIR == 0 {
            std::fs::create_dir_all(&folder)?;
        }
        let mut text = String::with_capacity(FILE_BYTES);
        while text.len() < FILE_BYTES {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(&format!("line {x:016x} of file {i}\n"));
        }
        text.truncate(FILE_BYTES - 1);
        text.push('\n');
        std::fs::write(folder.join(format!("f{i:05}.txt")), text)?;
    }
    let git = |args: &[&str]| -> anyhow::Result<()> {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
            .args(args)
            .current_dir(&repo)
            .status()
            .context("cannot run git")?
            .success();
        anyhow::ensure!(ok, "git {args:?} failed in {}", repo.display());
        Ok(())
    };
    git(&["init", "--quiet"])?;
    git(&["add", "-A"])?;
    git(&["commit", "--quiet", "-m", "generated"])?;
    Ok(repo)
}

/// Bytes this process and the children it waited for (git, cp, the commands) wrote to
/// files: `write_bytes` of /proc/self/io, counted when a page is dirtied, so a file
/// deleted before it reached the disk counts too.
fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("write_bytes: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn used_bytes(path: &Path) -> u64 {
    nix::sys::statvfs::statvfs(path)
        .map_or(0, |s| (s.blocks() - s.blocks_free()) * s.fragment_size())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs `tasks` tasks with each method available (overlay only where the process has
/// it), over a repository of `files` files.
pub async fn workspaces(
    out: &Path,
    files: usize,
    tasks: usize,
) -> anyhow::Result<Vec<WorkspaceReport>> {
    let base = bench_dir(out, "workspaces");
    std::fs::create_dir_all(&base)?;
    let base = base.canonicalize()?;
    let cache = out.join("bench-workspaces-repos");
    std::fs::create_dir_all(&cache)?;
    let repo = tokio::task::spawn_blocking({
        let cache = cache.clone();
        move || generate(&cache, files)
    })
    .await??
    .canonicalize()?;
    // The pristine, made once into the cache every run then reads.
    let cache = base.join("pristine-cache");
    let written_before = bytes_written();
    let started = Instant::now();
    crate::tools::pristine::Pristines::new(base.join("warm-up"), Some(cache.clone()))
        .get(&repo, None)
        .await
        .map_err(|e| anyhow::anyhow!("cannot make the pristine checkout: {e}"))?;
    let pristine = (
        started.elapsed().as_secs_f64() * 1000.0,
        bytes_written().saturating_sub(written_before) as f64 / 1e6,
    );
    let mut methods = Vec::new();
    if crate::tools::layer::available() {
        methods.push(("overlay", tasks));
    }
    if crate::tools::copies::reflinks_in(&base) {
        methods.push(("reflink", tasks));
    }
    // A full copy per task writes the whole repository each time: fewer tasks.
    methods.push(("copy", tasks.min(20)));
    let mut reports = Vec::new();
    for (method, n) in methods {
        let mut r = one(&base.join(method), &repo, &cache, method, n, files).await?;
        (r.pristine_ms, r.pristine_written_mb) = pristine;
        reports.push(r);
    }
    Ok(reports)
}

async fn one(
    dir: &Path,
    repo: &Path,
    cache: &Path,
    method: &'static str,
    tasks: usize,
    files: usize,
) -> anyhow::Result<WorkspaceReport> {
    let dirs = files.div_ceil(FILES_PER_DIR).max(1);
    let task_list: String = (0..tasks)
        .map(|i| {
            let d = i % dirs;
            format!("  - {{ id: t{i:04}, sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: write_file, input: {{ path: d{d:03}/edited-a.txt, content: 'changed {i}' }} }} }}, {{ tool_use: {{ name: write_file, input: {{ path: d{d:03}/f{:05}.txt, content: 'changed {i}' }} }} }}, {{ tool_use: {{ name: bash, input: {{ command: 'rm -f d{d:03}/f{:05}.txt' }} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }} }}\n", d * FILES_PER_DIR, d * FILES_PER_DIR + 1)
        })
        .collect();
    let yaml = format!(
        "name: bench-workspaces-{method}\nconcurrency: 10\ndefaults:\n  prompt: edit three files\n  model: claude-haiku-4-5\n  max_tokens: 256\n  tools: [write_file, bash]\n  repo: {}\n  workspaces: {method}\n  keep_workspaces: never\n  check: \"test -d d000\"\n  limits: {{ max_turns: 4, time_limit: 10m, max_repeats: off }}\ntasks:\n{task_list}",
        repo.display()
    );
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let sim = Arc::new(Sim::start_local().await?);
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let used_before = used_bytes(dir);
    let sampler = {
        let (stop, peak, dir) = (stop.clone(), peak.clone(), dir.to_path_buf());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                peak.fetch_max(
                    used_bytes(&dir).saturating_sub(used_before),
                    Ordering::SeqCst,
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let written_before = bytes_written();
    let started = Instant::now();
    run_job_with(dir, &yaml, sim, Some(cache.to_path_buf())).await?;
    let wall = started.elapsed();
    let written = bytes_written().saturating_sub(written_before);
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.await;
    let run_dir = dir.join("run");
    let (mut setups, mut patches) = (Vec::new(), Vec::new());
    let mut passed = 0;
    for i in 0..tasks {
        let path = crate::report::files::transcript_path(&run_dir, &format!("t{i:04}"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let mut stop_ms = None;
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let t = e["t_ms"].as_f64().unwrap_or(0.0);
            match e["event"].as_str() {
                Some("workspace") => setups.push(e["ms"].as_f64().unwrap_or(t)),
                Some("stop") => stop_ms = Some(t),
                Some("patch") => patches.push(t - stop_ms.unwrap_or(t)),
                Some("check") if e["passed"] == true => passed += 1,
                _ => {}
            }
        }
    }
    setups.sort_by(f64::total_cmp);
    patches.sort_by(f64::total_cmp);
    Ok(WorkspaceReport {
        method,
        tasks,
        passed,
        wall_s: wall.as_secs_f64(),
        setup_median_ms: percentile(&setups, 0.5),
        setup_p99_ms: percentile(&setups, 0.99),
        pristine_ms: 0.0,
        pristine_written_mb: 0.0,
        patch_median_ms: percentile(&patches, 0.5),
        patch_p99_ms: percentile(&patches, 0.99),
        written_mb: written as f64 / 1e6,
        peak_disk_mb: peak.load(Ordering::SeqCst) as f64 / 1e6,
    })
}
