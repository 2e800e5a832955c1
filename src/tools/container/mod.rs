//! A task's container: one per task, created from its image when the task starts and
//! removed when it ends (kept stopped when `keep_workspaces` keeps the workspace). The
//! task's `setup`, `bash` and `check` commands all run inside it.
//!
//! Commands do not go through the engine one by one (`podman exec` costs 90 to 150 ms
//! here): the container's first process is a small POSIX shell loop (`server.sh`)
//! that reads command numbers from a FIFO in a control folder bind-mounted at
//! `/.agentbatch`, runs each in a session of its own with output to a FIFO the runner
//! reads, and reports its exit status on a third FIFO. The runner is the FIFO's only
//! writer, so when it dies (kill -9 included) the loop reads end-of-file and exits,
//! and with the container's first process gone the kernel ends every other process
//! in it: nothing keeps running after the runner. What is left stopped is removed by
//! the next run or resume (`leftovers.rs`).

mod control;
mod engine;
pub mod image;
mod leftovers;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::sandbox::output::{Capped, CommandOutput, RunLimits};
use control::{chmod, io_err, mkfifo, quote, read_statuses, write_new};

pub use engine::{Engine, EngineChoice, QUICK};
pub use image::{Images, Pull, Ready, Source};
pub use leftovers::{owner_label, remove_leftovers};

/// Why a container or its image could not be had, or a command not started in it.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("no container engine found for engine: {choice} ({tried}); install podman (`apt-get install podman`) or Docker, or run the job without `environment:`")]
    NoEngine { choice: &'static str, tried: String },
    #[error("`{call}` failed: {message}")]
    Engine { call: String, message: String },
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the container {name} {what}")]
    Gone { name: String, what: String },
}

/// Where the control folder is inside the container.
const CONTROL: &str = "/.agentbatch";

/// The loop the container's first process runs.
const SERVER: &str = include_str!("server.sh");

/// How long a new container may take to start its loop.
pub(super) const START: Duration = Duration::from_secs(60);

/// Network access of a task's container.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Only a loopback interface (setup still gets the network: see `Container::start`).
    #[default]
    None,
    /// The engine's default bridge network.
    Bridge,
}

/// A task's environment, resolved: the image and how its containers are made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvironmentConfig {
    pub source: Source,
    pub pull: Pull,
    pub engine: EngineChoice,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// As written (`4g`), for the engine and the reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
    pub network: Network,
    /// Where the workspace is inside the container; None: `/workspace` for a task with
    /// a repository, the image's own `WORKDIR` for one without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(serialize_with = "human")]
    pub build_timeout: Duration,
}

fn human<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// The workdir of a task with a repository, when the environment names none.
pub const DEFAULT_WORKDIR: &str = "/workspace";

impl EnvironmentConfig {
    /// The limits as the `sandbox` column says them: `cpus 2, memory 4g, pids 512, no
    /// network`.
    pub fn limits_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.cpus {
            parts.push(format!("cpus {c}"));
        }
        if let Some(m) = &self.memory {
            parts.push(format!("memory {m}"));
        }
        if let Some(p) = self.pids {
            parts.push(format!("pids {p}"));
        }
        parts.push(match self.network {
            Network::None => "no network".into(),
            Network::Bridge => "bridge network".into(),
        });
        parts.join(", ")
    }
}

/// What a task's container is made with, besides its environment.
pub struct Start<'a> {
    pub engine: &'a Engine,
    pub image: &'a Ready,
    pub config: &'a EnvironmentConfig,
    /// The container's name (unique on the engine).
    pub name: String,
    /// The host folder of the task's workspace, bind-mounted at `workdir`.
    pub workspace: &'a Path,
    pub workdir: String,
    /// The control folder (made empty here), on the host.
    pub control: PathBuf,
    /// Labels (the run, the task, the owner).
    pub labels: Vec<(String, String)>,
    /// Variables of the task, after the environment's own.
    pub task_env: &'a BTreeMap<String, String>,
    /// Host folders the container sees read-only at the same path: the pristine
    /// checkout a workspace's git borrows its objects from (its `alternates`).
    pub read_only: Vec<PathBuf>,
    /// Start on the network even when `network: none` (for setup), to be cut by
    /// [`Container::cut_network`] before the agent.
    pub network_for_setup: bool,
}

/// How a command ended, as the loop reports it.
pub(super) struct Done {
    code: i32,
    oom_kills: Option<u64>,
}

/// A running task container and the runner's end of its FIFOs.
pub struct Container {
    engine: Engine,
    pub name: String,
    /// The container id the engine gave.
    pub id: String,
    pub workdir: String,
    control: PathBuf,
    requests: tokio::sync::Mutex<Option<pipe::Sender>>,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Done>>>>,
    /// Set when the loop's status FIFO reached end-of-file: the container stopped.
    gone: CancellationToken,
    next: AtomicU64,
    /// Commands running now; when none is, nothing but the loop may run in the
    /// container (see [`Container::quiet`]).
    gate: tokio::sync::Mutex<usize>,
    memory: Option<String>,
    /// The container's count of processes the kernel killed for memory, as last seen.
    oom_kills: AtomicU64,
    /// Milliseconds from `run` to the loop's first word.
    pub start_ms: u64,
    network_cut: AtomicBool,
}

/// Whether a `--user` / `USER` value is root (or unset, which is root).
fn is_root(user: &str) -> bool {
    let name = user.split(':').next().unwrap_or("");
    matches!(name, "" | "root" | "0")
}

/// `run -d` and its arguments: the name, labels, limits, mounts and variables of a
/// task's container, and the loop as its first process.
fn run_args(s: &Start<'_>) -> Vec<String> {
    let network = match (s.config.network, s.network_for_setup) {
        (Network::None, false) => "none",
        _ => "bridge",
    };
    let mut args: Vec<String> = vec![
        "run".into(),
        "-d".into(),
        "--name".into(),
        s.name.clone(),
        "--network".into(),
        network.into(),
        "--stop-signal".into(),
        "SIGKILL".into(),
        "--entrypoint".into(),
        "/bin/sh".into(),
        "-v".into(),
        format!("{}:{CONTROL}", s.control.display()),
        "-v".into(),
        format!("{}:{}", s.workspace.display(), s.workdir),
        "-w".into(),
        s.workdir.clone(),
    ];
    for (k, v) in &s.labels {
        args.push("--label".into());
        args.push(format!("{k}={v}"));
    }
    if let Some(c) = s.config.cpus {
        args.push(format!("--cpus={c}"));
    }
    if let Some(m) = &s.config.memory {
        // No swap beyond the memory limit: the limit is what the task gets.
        args.push(format!("--memory={m}"));
        args.push(format!("--memory-swap={m}"));
    }
    if let Some(p) = s.config.pids {
        args.push(format!("--pids-limit={p}"));
    }
    // Podman passes the runner's proxy variables (with their credentials) into
    // containers unless told not to; the task's variables are the job's alone.
    if s.engine.name == "podman" {
        args.push("--http-proxy=false".into());
    }
    for dir in &s.read_only {
        args.push("-v".into());
        args.push(format!("{}:{}:ro", dir.display(), dir.display()));
    }
    if let Some(u) = s.config.user.as_deref().filter(|u| !u.is_empty()) {
        args.push(format!("--user={u}"));
    }
    for (k, v) in s.config.env.iter().chain(s.task_env) {
        args.push("-e".into());
        args.push(format!("{k}={v}"));
    }
    args.push(s.image.name.clone());
    args.push("-c".into());
    args.push(SERVER.into());
    args
}

impl Container {
    /// Creates and starts the task's container and waits for its loop. Fails with
    /// what the engine said, or the container's own output when the loop never
    /// answered.
    pub async fn start(s: Start<'_>) -> Result<Container, ContainerError> {
        let started = Instant::now();
        // Absolute: the engine runs in the machine's mount namespace, from its root.
        let control = std::path::absolute(&s.control).map_err(io_err("resolve", &s.control))?;
        let workspace = std::path::absolute(s.workspace).map_err(io_err("resolve", s.workspace))?;
        let s = Start {
            control,
            workspace: &workspace,
            ..s
        };
        let _ = std::fs::remove_dir_all(&s.control);
        std::fs::create_dir_all(&s.control).map_err(io_err("create", &s.control))?;
        chmod(&s.control, 0o777)?;
        let (req, done) = (s.control.join("req"), s.control.join("done"));
        mkfifo(&req)?;
        mkfifo(&done)?;
        // Opened before the container: the loop's opens then never wait.
        let statuses = pipe::OpenOptions::new()
            .open_receiver(&done)
            .map_err(io_err("open", &done))?;
        let requests = pipe::OpenOptions::new()
            .read_write(true)
            .open_sender(&req)
            .map_err(io_err("open", &req))?;
        let args = run_args(&s);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = s.engine.run(&argv, QUICK).await?;
        let id = out.text();
        let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Done>>>> = Arc::default();
        let gone = CancellationToken::new();
        let (ready_tx, ready_rx) = oneshot::channel();
        tokio::spawn(read_statuses(
            statuses,
            waiting.clone(),
            gone.clone(),
            ready_tx,
        ));
        let container = Container {
            engine: s.engine.clone(),
            name: s.name.clone(),
            id,
            workdir: s.workdir.clone(),
            control: s.control.clone(),
            requests: tokio::sync::Mutex::new(Some(requests)),
            waiting,
            gone,
            next: AtomicU64::new(1),
            gate: tokio::sync::Mutex::new(0),
            memory: s.config.memory.clone(),
            oom_kills: AtomicU64::new(0),
            start_ms: 0,
            network_cut: AtomicBool::new(
                !s.network_for_setup || s.config.network == Network::Bridge,
            ),
        };
        match tokio::time::timeout(START, ready_rx).await {
            Ok(Ok(())) => {
                let user = s
                    .config
                    .user
                    .as_deref()
                    .filter(|u| !u.is_empty())
                    .unwrap_or(&s.image.user);
                if !is_root(user) {
                    if let Err(e) = container.give_workdir().await {
                        container.remove().await;
                        return Err(e);
                    }
                }
                Ok(Container {
                    start_ms: started.elapsed().as_millis() as u64,
                    ..container
                })
            }
            _ => {
                let said = container.logs().await;
                container.remove().await;
                Err(ContainerError::Gone {
                    name: s.name,
                    what: format!(
                        "did not start its command loop within {}s (is /bin/sh in the image?): {said}",
                        START.as_secs()
                    ),
                })
            }
        }
    }

    /// The last lines the container's first process printed.
    async fn logs(&self) -> String {
        match self.engine.run(&["logs", &self.name], QUICK).await {
            Ok(out) => {
                let text = out.text();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            }
            Err(e) => e.to_string(),
        }
    }

    /// Takes the container off every network before the agent runs (after a setup that
    /// needed one under `network: none`), leaving only loopback. A container still on
    /// a network afterwards is an error: the task must not run with more reach than
    /// it asked for.
    pub async fn cut_network(&self) -> Result<(), ContainerError> {
        if self.network_cut.load(Ordering::SeqCst) {
            return Ok(());
        }
        let fmt = "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}\n{{end}}";
        let nets = self
            .engine
            .run(&["inspect", "--format", fmt, &self.name], QUICK)
            .await?
            .text();
        for net in nets.lines().map(str::trim).filter(|n| !n.is_empty()) {
            self.engine
                .run(&["network", "disconnect", net, &self.name], QUICK)
                .await?;
        }
        let left = self
            .engine
            .run(&["inspect", "--format", fmt, &self.name], QUICK)
            .await?
            .text();
        if !left.trim().is_empty() {
            return Err(ContainerError::Gone {
                name: self.name.clone(),
                what: format!(
                    "is still on the network {} after the disconnect",
                    left.trim()
                ),
            });
        }
        self.network_cut.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Runs `command` with bash (sh where the image has no bash) in the workdir, in a
    /// session of its own, with `extra_env` on top of the container's variables; kills
    /// its session when it ends, times out or `cancel` fires.
    pub async fn run(
        &self,
        command: &str,
        limits: RunLimits,
        cancel: &CancellationToken,
        extra_env: &[(&str, &str)],
    ) -> Result<CommandOutput, ContainerError> {
        let started = Instant::now();
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        let file = |ext: &str| self.control.join(format!("{n}.{ext}"));
        write_new(&file("cmd"), command.as_bytes())?;
        let wrapper = self.wrapper(n, extra_env);
        write_new(&file("sh"), wrapper.as_bytes())?;
        let _ = std::fs::remove_file(file("out"));
        mkfifo(&file("out"))?;
        // Read and write: the FIFO never reports end-of-file, so a command that has
        // not opened it yet does not look finished; the status FIFO says when it is.
        let mut out = pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(file("out"))
            .map_err(io_err("open", &file("out")))?;
        let (tx, mut rx) = oneshot::channel();
        self.lock_waiting().insert(n, tx);
        let sent = {
            let mut running = self.gate.lock().await;
            if *running == 0 {
                self.quiet().await;
            }
            let sent = self.send(&format!("{n}\n")).await;
            if sent.is_ok() {
                *running += 1;
            }
            sent
        };
        if let Err(e) = sent {
            self.lock_waiting().remove(&n);
            self.forget(n);
            return Err(e);
        }
        let mut output = Capped::new(limits.max_output);
        let mut buf = vec![0u8; 64 * 1024];
        let deadline = tokio::time::sleep(limits.timeout);
        tokio::pin!(deadline);
        let (mut timed_out, mut cancelled) = (false, false);
        let mut done = None;
        while done.is_none() {
            tokio::select! {
                r = out.read(&mut buf) => if let Ok(k) = r { output.push(&buf[..k]) },
                d = &mut rx => { done = Some(d.ok()); }
                _ = &mut deadline => { timed_out = true; break; }
                _ = cancel.cancelled() => { cancelled = true; break; }
            }
        }
        if done.is_none() {
            // SIGTERM to its session, SIGKILL after the grace period.
            let _ = self.send(&format!("t{n}\n")).await;
            let grace = tokio::time::sleep(crate::tools::sandbox::output::GRACE);
            tokio::pin!(grace);
            loop {
                tokio::select! {
                    r = out.read(&mut buf) => if let Ok(k) = r { output.push(&buf[..k]) },
                    d = &mut rx => { done = Some(d.ok()); break; }
                    _ = &mut grace => break,
                }
            }
        }
        // Whatever the command left in its session ends with it.
        let _ = self.send(&format!("k{n}\n")).await;
        if done.is_none() {
            done = tokio::time::timeout(Duration::from_secs(5), rx)
                .await
                .ok()
                .map(Result::ok);
        }
        // What the command wrote before it ended is in the FIFO already (its status
        // was written after it exited): read until the FIFO is empty, without waiting.
        while let Ok(k) = out.try_read(&mut buf) {
            if k == 0 {
                break;
            }
            output.push(&buf[..k]);
        }
        self.forget(n);
        {
            let mut running = self.gate.lock().await;
            *running = running.saturating_sub(1);
            if *running == 0 {
                self.quiet().await;
            }
        }
        let done = done.flatten();
        if done.is_none() && !timed_out && !cancelled {
            return Err(ContainerError::Gone {
                name: self.name.clone(),
                what: "stopped while the command ran".into(),
            });
        }
        let mut rendered = output.render();
        let seen = done.as_ref().and_then(|d| d.oom_kills);
        let before = seen.map_or(0, |k| self.oom_kills.fetch_max(k, Ordering::SeqCst));
        if let (Some(d), Some(m)) = (&done, &self.memory) {
            if seen.is_some_and(|k| k > before) && d.code > 128 {
                rendered.push_str(&format!(
                    "\n[agentbatch: the kernel killed a process of this command: the container reached its memory limit ({m})]\n"
                ));
            }
        }
        Ok(CommandOutput {
            exit_code: if timed_out || cancelled {
                None
            } else {
                done.map(|d| d.code)
            },
            timed_out,
            cancelled,
            total_bytes: output.total,
            output: rendered,
            ms: started.elapsed().as_millis() as u64,
        })
    }

    /// The script that starts command `n`: its pid for the kill requests, the workdir,
    /// `extra_env`, then bash (sh without it) in a session of its own, output to the
    /// command's FIFO.
    fn wrapper(&self, n: u64, extra_env: &[(&str, &str)]) -> String {
        let inside = |ext: &str| format!("{CONTROL}/{n}.{ext}");
        let mut wrapper = format!(
            "echo $$ >{pid}\ncd {wd} || exit 126\n",
            pid = inside("pid"),
            wd = quote(&self.workdir)
        );
        for (k, v) in extra_env {
            wrapper.push_str(&format!("export {k}={}\n", quote(v)));
        }
        wrapper.push_str(&format!(
            "S=\ncommand -v setsid >/dev/null 2>&1 && S=setsid\nB=sh\ncommand -v bash >/dev/null 2>&1 && B=bash\nexec $S $B {cmd} >{out} 2>&1 </dev/null\n",
            cmd = inside("cmd"),
            out = inside("out"),
        ));
        wrapper
    }

    /// Kills every process of the container but its loop, when no command runs: what a
    /// command left in the background (a `setsid` daemon, a process that would write
    /// the status FIFO, race the file tools or change the workspace after the task
    /// stopped) ends before the next command, tool call or check, as on the host.
    async fn quiet(&self) {
        let (tx, rx) = oneshot::channel();
        self.lock_waiting().insert(0, tx);
        if self.send("Q\n").await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(5), rx).await;
        }
        self.lock_waiting().remove(&0);
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Done>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Removes a command's files from the control folder.
    fn forget(&self, n: u64) {
        for ext in ["cmd", "sh", "out", "pid"] {
            let _ = std::fs::remove_file(self.control.join(format!("{n}.{ext}")));
        }
    }

    async fn send(&self, line: &str) -> Result<(), ContainerError> {
        if self.gone.is_cancelled() {
            return Err(ContainerError::Gone {
                name: self.name.clone(),
                what: "has stopped".into(),
            });
        }
        let mut guard = self.requests.lock().await;
        let Some(w) = guard.as_mut() else {
            return Err(ContainerError::Gone {
                name: self.name.clone(),
                what: "was closed".into(),
            });
        };
        w.write_all(line.as_bytes())
            .await
            .map_err(|e| ContainerError::Gone {
                name: self.name.clone(),
                what: format!("does not take commands: {e}"),
            })
    }

    /// Ends the loop (the container stops, and every process in it).
    async fn close(&self) {
        self.requests.lock().await.take();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.gone.cancelled()).await;
    }

    /// Stops and removes the container.
    pub async fn remove(&self) {
        self.close().await;
        let _ = self.engine.run(&["rm", "-f", &self.name], QUICK).await;
        let _ = std::fs::remove_dir_all(&self.control);
    }

    /// Stops the container and keeps it under a name that says so (the next run's
    /// clean-up leaves it alone); returns that name.
    pub async fn keep(&self) -> String {
        self.close().await;
        let kept = format!("{}{}", self.name, leftovers::KEPT_SUFFIX);
        let _ = self.engine.run(&["stop", &self.name], QUICK).await;
        let _ = std::fs::remove_dir_all(&self.control);
        match self.engine.run(&["rename", &self.name, &kept], QUICK).await {
            Ok(_) => kept,
            Err(_) => self.name.clone(),
        }
    }

    /// The engine the container runs on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Writes a new file into the control folder (a patch, a script for the container
    /// to run) and returns its path inside the container.
    pub fn put(&self, name: &str, bytes: &[u8]) -> Result<String, ContainerError> {
        let path = self.control.join(name);
        let _ = std::fs::remove_file(&path);
        control::write_new(&path, bytes)?;
        Ok(format!("{CONTROL}/{name}"))
    }

    /// Gives the workspace (bind-mounted at the workdir, made by this machine's user) to
    /// the container's user, when that is not root: an image with `USER runner` can
    /// then write its own workdir, as it could in the image.
    async fn give_workdir(&self) -> Result<(), ContainerError> {
        let ids = self
            .engine
            .run(
                &[
                    "exec",
                    &self.name,
                    "/bin/sh",
                    "-c",
                    "echo \"$(id -u):$(id -g)\"",
                ],
                QUICK,
            )
            .await?
            .text();
        let owner = ids.trim();
        if owner.is_empty() || !owner.chars().all(|c| c.is_ascii_digit() || c == ':') {
            return Err(ContainerError::Gone {
                name: self.name.clone(),
                what: format!("does not say its user's ids (`id -u` gave \"{owner}\")"),
            });
        }
        self.exec_as_root(
            &format!("chown -R {owner} {}", quote(&self.workdir)),
            QUICK * 10,
        )
        .await
    }

    /// Runs a short shell script as root through the engine, beside the command loop:
    /// a verifier's own preparation, which must work whatever USER the image runs its
    /// commands as (Harbor prepares `/tests` and `/logs/verifier` as root too).
    pub async fn exec_as_root(
        &self,
        script: &str,
        timeout: Duration,
    ) -> Result<(), ContainerError> {
        self.engine
            .run(
                &["exec", "--user", "0", &self.name, "/bin/sh", "-c", script],
                timeout,
            )
            .await
            .map(|_| ())
    }

    /// Copies a folder (or file) of this machine into the container at `to` (its
    /// contents, for a folder), whatever the agent left there.
    pub async fn copy_in(&self, from: &Path, to: &str) -> Result<(), ContainerError> {
        let src = if from.is_dir() {
            format!("{}/.", from.display())
        } else {
            from.display().to_string()
        };
        self.engine
            .run(&["cp", &src, &format!("{}:{to}", self.name)], QUICK)
            .await
            .map(|_| ())
    }
}
