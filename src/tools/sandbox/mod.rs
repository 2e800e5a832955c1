//! Sandboxed command execution for `bash`, `setup` and `check`: each command runs under
//! a warden (`warden.rs`) in its own process group with stdin closed and a scrubbed
//! environment, is killed with everything it started (SIGTERM, then SIGKILL after a
//! grace period) on timeout or cancellation, when it ends, and when the runner dies, has
//! its output capped (head and tail kept, the middle counted), and, where the kernel
//! allows, may write only inside the workspace and a private temp folder (Landlock) and
//! reach no network (a fresh network namespace). `leftovers.rs` finds what a killed
//! run left running anyway, for the resume.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sched::CloneFlags;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

mod confine;
mod leftovers;
pub(crate) mod output;
mod warden;

use crate::tools::container::Container;
use confine::{capabilities, child_setup, ruleset, Bind, ChildSetup};

pub use confine::{describe_capabilities, protect_runner, PID_NAMESPACE_VARIABLE};
pub use leftovers::{run_marker, stop_leftovers, RUN_VARIABLE};
use output::Capped;
pub use output::{CommandOutput, RunLimits};
pub use warden::{die_with_runner, dies_with_caller, GRACE};

/// Why a sandbox could not be made or a command could not be started in it (a command
/// that ran and failed is a `CommandOutput`, not an error).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox.require is set but this machine does not provide {0}; run elsewhere or drop `require`")]
    Required(String),
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot prepare the Landlock rules: {0}")]
    Landlock(#[source] landlock::RulesetError),
    #[error(transparent)]
    Container(#[from] crate::tools::container::ContainerError),
    #[error("cannot {what}: {source}")]
    Start {
        what: &'static str,
        source: io::Error,
    },
}

/// A failure to start a command, while doing `what`.
fn start(what: &'static str) -> impl FnOnce(io::Error) -> SandboxError {
    move |source| SandboxError::Start { what, source }
}

/// How long past the grace period the runner waits for a warden to end its command
/// before it kills the warden's group itself.
const WARDEN_SLACK: Duration = Duration::from_secs(3);

/// What a task asks of the sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SandboxConfig {
    /// Let `bash` reach the network.
    pub network: bool,
    /// Refuse to run unconfined: fail the task (tool_setup_error) when Landlock, or the
    /// network cut asked for, is not available.
    pub require: bool,
}

/// How much a command may do besides writing its workspace (Landlock applies to every
/// command a sandbox runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// May reach the network (else it gets an empty network namespace, where the
    /// machine allows one).
    pub network: bool,
    /// Runs over files the agent wrote: any git it calls reads no system configuration
    /// and runs no hook and no fsmonitor command from the workspace's `.git/config`.
    pub distrust_git: bool,
}

impl Reach {
    /// Before the agent has written anything (setup): the network, git as configured.
    pub const SETUP: Reach = Reach {
        network: true,
        distrust_git: false,
    };
}

/// Git settings in the environment, which take precedence over every configuration
/// file: what an agent writes into `.git/config` (`core.fsmonitor = "curl ..."`, a
/// hooks path) must not run when the check calls `git status`.
const DISTRUSTED_GIT: [(&str, &str); 7] = [
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_COUNT", "2"),
    ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
    ("GIT_CONFIG_VALUE_0", "false"),
    ("GIT_CONFIG_KEY_1", "core.hooksPath"),
    ("GIT_CONFIG_VALUE_1", "/dev/null"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Where commands of one task run, and how confined.
pub struct Sandbox {
    workspace: PathBuf,
    /// The path commands see the workspace at and start in (the repository's own),
    /// where they get a mount namespace of their own; else they see it where it is.
    seen_at: Option<PathBuf>,
    tmp: PathBuf,
    env: Vec<(String, String)>,
    landlock: bool,
    netns: Option<CloneFlags>,
    pidns: bool,
    /// The task's container, where its commands run instead of here.
    container: Option<Arc<Container>>,
    /// What was obtained, for the report: e.g. "landlock ABI 7, own PID namespace, no
    /// network".
    pub level: String,
}

impl Sandbox {
    /// Sets up the sandbox of a task of the run in `run_dir`. `seen_at` is the folder of
    /// the repository the workspace was made from (none for a bundle or a bare
    /// repository): where commands get a mount namespace of their own, the workspace is
    /// mounted there for them and they start in it, so every path that names the
    /// repository, whether a symbolic link's absolute target or a relative one that
    /// leaves it, resolves as it does in the repository itself, to the task's own files,
    /// whatever the workspace method. `tmp` becomes its private temp folder (and holds
    /// HOME); `task_env` is added to the scrubbed environment, and the run's marker
    /// (`AGENTBATCH_RUN`) after it. Fails when `config.require` asks for confinement
    /// this machine cannot give.
    pub fn new(
        workspace: &Path,
        seen_at: Option<&Path>,
        tmp: &Path,
        task_env: &BTreeMap<String, String>,
        config: SandboxConfig,
        run_dir: &Path,
    ) -> Result<Sandbox, SandboxError> {
        let caps = capabilities();
        let netns = if config.network { None } else { caps.netns };
        let mut missing = Vec::new();
        if caps.landlock.is_none() {
            missing.push("Landlock (write confinement)");
        }
        if !config.network && netns.is_none() {
            missing.push("a network namespace (network: false)");
        }
        if config.require && !missing.is_empty() {
            return Err(SandboxError::Required(missing.join(" nor ")));
        }
        let seen_at = seen_at.filter(|_| caps.pidns);
        if let Some(at) = seen_at {
            if !at.is_dir() {
                return Err(SandboxError::Io {
                    what:
                        "find the repository's folder, where the task's commands see its workspace,",
                    path: at.to_path_buf(),
                    source: io::Error::from(io::ErrorKind::NotFound),
                });
            }
        }
        let tmp = &tmp.canonicalize().map_err(|e| SandboxError::Io {
            what: "resolve",
            path: tmp.to_path_buf(),
            source: e,
        })?;
        let home = tmp.join("home");
        std::fs::create_dir_all(&home).map_err(|e| SandboxError::Io {
            what: "create",
            path: home.clone(),
            source: e,
        })?;
        let mut env: BTreeMap<String, String> = BTreeMap::new();
        env.insert(
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        );
        env.insert("HOME".into(), home.display().to_string());
        env.insert("TMPDIR".into(), tmp.display().to_string());
        env.insert("LANG".into(), "C.UTF-8".into());
        env.insert("TERM".into(), "dumb".into());
        env.extend(task_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let (marker, run) = run_marker(run_dir);
        env.insert(marker.into(), run);
        let mut level = Vec::new();
        level.push(
            caps.landlock
                .clone()
                .unwrap_or_else(|| "no write confinement".into()),
        );
        level.push(if caps.pidns {
            "own PID namespace".into()
        } else {
            "shared PID namespace".to_string()
        });
        level.push(if netns.is_some() {
            "no network".into()
        } else if config.network {
            "network".into()
        } else {
            "network (could not cut it)".to_string()
        });
        Ok(Sandbox {
            workspace: workspace.to_path_buf(),
            seen_at: seen_at.map(Path::to_path_buf),
            tmp: tmp.to_path_buf(),
            env: env.into_iter().collect(),
            landlock: caps.landlock.is_some(),
            netns,
            pidns: caps.pidns,
            container: None,
            level: level.join(", "),
        })
    }

    /// The sandbox of a task whose commands run in `container`, which sees the
    /// workspace at its workdir; `level` is what the `sandbox` column says of it.
    pub fn in_container(
        container: Arc<Container>,
        workspace: &Path,
        no_network: bool,
        level: String,
    ) -> Sandbox {
        Sandbox {
            workspace: workspace.to_path_buf(),
            seen_at: Some(PathBuf::from(&container.workdir)),
            tmp: PathBuf::new(),
            env: Vec::new(),
            landlock: false,
            netns: no_network.then_some(CloneFlags::CLONE_NEWNET),
            pidns: false,
            container: Some(container),
            level,
        }
    }

    /// The task's container, when its commands run in one.
    pub fn container(&self) -> Option<&Arc<Container>> {
        self.container.as_ref()
    }

    /// Whether a command asked to stay off the network gets an empty network namespace
    /// here (else it keeps the network: the kernel cannot cut it).
    pub fn can_cut_network(&self) -> bool {
        self.netns.is_some()
    }

    /// Where commands see the workspace, when not where it is: the file tools then
    /// resolve paths and links as they would there.
    pub fn seen_at(&self) -> Option<&Path> {
        self.seen_at.as_deref()
    }

    /// The environment commands get (for tests and the transcript).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Runs `command` with `bash -c` in the workspace, as far as `reach` lets it (the
    /// agent's bash, setup and check differ).
    pub async fn run(
        &self,
        command: &str,
        limits: RunLimits,
        cancel: &CancellationToken,
        reach: Reach,
    ) -> Result<CommandOutput, SandboxError> {
        if let Some(c) = &self.container {
            let env: Vec<(&str, &str)> = DISTRUSTED_GIT
                .iter()
                .filter(|_| reach.distrust_git)
                .copied()
                .collect();
            return Ok(c.run(command, limits, cancel, &env).await?);
        }
        let network = reach.network;
        let started = Instant::now();
        let (reader, writer) = io::pipe().map_err(start("create a pipe"))?;
        let shell = if Path::new("/bin/bash").exists() {
            "/bin/bash"
        } else {
            "/bin/sh"
        };
        let mut cmd = tokio::process::Command::new(shell);
        cmd.arg("-c")
            .arg(command)
            .current_dir(&self.workspace)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(
                DISTRUSTED_GIT
                    .iter()
                    .filter(|_| reach.distrust_git)
                    .copied(),
            )
            .stdin(Stdio::null())
            .stdout(writer.try_clone().map_err(start("set up output"))?)
            .stderr(writer);
        let rules = if self.landlock {
            Some(ruleset(&self.workspace, &self.tmp).map_err(SandboxError::Landlock)?)
        } else {
            None
        };
        let bind = match &self.seen_at {
            Some(at) => Some(
                Bind::new(&self.workspace, at).map_err(start("name the repository's folder"))?,
            ),
            None => None,
        };
        let setup = ChildSetup {
            pidns: self.pidns,
            netns: if network { None } else { self.netns },
            bind,
            rules: Mutex::new(rules),
            line: warden::lifeline().map_err(start("make the runner's lifeline"))?,
        };
        // SAFETY: see `child_setup`: only system calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || child_setup(&setup));
        }
        let mut child = cmd.spawn().map_err(start("start the command"))?;
        drop(cmd);
        // The warden, which leads the command's process group.
        let pgid = child.id().map(|id| Pid::from_raw(id as i32));
        let mut guard = GroupGuard { pgid, ended: false };
        let mut output = Capped::new(limits.max_output);
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
            .map_err(start("read the command's output"))?;
        let mut buf = vec![0u8; 64 * 1024];
        let deadline = tokio::time::sleep(limits.timeout);
        tokio::pin!(deadline);
        let mut exit = None;
        let (mut timed_out, mut cancelled, mut open) = (false, false, true);
        // Read while waiting, so a chatty command never blocks on a full pipe.
        while exit.is_none() {
            tokio::select! {
                n = pipe.read(&mut buf), if open => match n {
                    Ok(0) | Err(_) => open = false,
                    Ok(n) => output.push(&buf[..n]),
                },
                s = child.wait() => exit = Some(s.ok()),
                _ = &mut deadline => { timed_out = true; break; }
                _ = cancel.cancelled() => { cancelled = true; break; }
            }
        }
        if exit.is_none() {
            exit = Some(terminate(&mut child, pgid).await);
        }
        // The warden killed what the command left before it exited; this only matters
        // if the warden itself was killed.
        guard.ended();
        // Drain what is left; a process that got the pipe out of the command's tree
        // (through a socket) may hold it open, so the drain is bounded.
        let drain_until = tokio::time::Instant::now() + Duration::from_millis(500);
        while open {
            match tokio::time::timeout_at(drain_until, pipe.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => output.push(&buf[..n]),
                _ => open = false,
            }
        }
        let status = exit.flatten();
        Ok(CommandOutput {
            exit_code: if timed_out || cancelled {
                None
            } else {
                status.and_then(|s| s.code())
            },
            timed_out,
            cancelled,
            total_bytes: output.total,
            output: output.render(),
            ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// SIGTERM to the warden, which passes it to its group and kills what is left after the
/// grace period; SIGKILL to the group should the warden not end in time. Returns the
/// exit status.
async fn terminate(
    child: &mut tokio::process::Child,
    pgid: Option<Pid>,
) -> Option<std::process::ExitStatus> {
    if let Some(warden) = pgid {
        // Not reaped yet: the pid is still the warden's.
        let _ = kill(warden, Signal::SIGTERM);
    }
    match tokio::time::timeout(GRACE + WARDEN_SLACK, child.wait()).await {
        Ok(s) => s.ok(),
        Err(_) => {
            if let Some(g) = pgid {
                let _ = killpg(g, Signal::SIGKILL);
            }
            child.wait().await.ok()
        }
    }
}

/// The command's process group, led by its warden. Dropped before the command ended (a
/// call abandoned by the harness, a dropped task), the warden gets SIGTERM and ends
/// everything within the grace period (at once, should the runner exit meanwhile).
struct GroupGuard {
    pgid: Option<Pid>,
    ended: bool,
}

impl GroupGuard {
    /// The warden has exited: SIGKILL to whatever is left of its group.
    fn ended(&mut self) {
        self.ended = true;
        if let Some(g) = self.pgid {
            let _ = killpg(g, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let (Some(warden), false) = (self.pgid, self.ended) {
            let _ = kill(warden, Signal::SIGTERM);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_output_keeps_head_and_tail() {
        let mut c = Capped::new(10);
        c.push(b"0123456789abcdefghij");
        assert_eq!(c.render(), "01234\n[... 10 bytes of output cut ...]\nfghij");
        let mut c = Capped::new(10);
        c.push(b"abc");
        c.push(b"def");
        assert_eq!(c.render(), "abcdef");
        let mut c = Capped::new(10);
        for _ in 0..1000 {
            c.push(b"xy");
        }
        assert_eq!(c.total, 2000);
        assert!(c.render().contains("1990 bytes"));
    }

    /// Where commands get a mount namespace, they see the workspace at the
    /// repository's path and start there; the repository is out of their sight.
    #[tokio::test]
    async fn commands_see_the_workspace_at_the_repositorys_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (ws, repo, tmp) = (base.join("ws"), base.join("repo"), base.join("tmp"));
        for d in [&ws, &repo, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ws.join("f"), "the task's\n").unwrap();
        std::fs::write(repo.join("f"), "the user's\n").unwrap();
        std::os::unix::fs::symlink(repo.join("f"), ws.join("link")).unwrap();
        let config = SandboxConfig {
            network: true,
            require: false,
        };
        let sb = Sandbox::new(&ws, Some(&repo), &tmp, &BTreeMap::new(), config, &base).unwrap();
        if !capabilities().pidns {
            assert_eq!(sb.seen_at(), None, "no mount namespace: seen where it is");
            return;
        }
        assert_eq!(sb.seen_at(), Some(repo.as_path()));
        let limits = RunLimits {
            timeout: Duration::from_secs(10),
            max_output: 1000,
        };
        let command = "pwd; cat f link; echo new > made; cat \"$PWD/made\"";
        let out = sb
            .run(command, limits, &CancellationToken::new(), Reach::SETUP)
            .await
            .unwrap();
        let want = format!("{}\nthe task's\nthe task's\nnew\n", repo.display());
        assert_eq!(out.output, want);
        assert_eq!(std::fs::read_to_string(ws.join("made")).unwrap(), "new\n");
        assert!(
            !repo.join("made").exists(),
            "the repository is never written"
        );
        let gone = Sandbox::new(
            &ws,
            Some(&base.join("gone")),
            &tmp,
            &BTreeMap::new(),
            config,
            &base,
        );
        assert!(gone.is_err_and(|e| e.to_string().contains("gone")));
    }

    /// A sandbox with the network, `EXTRA=1` in its environment, in a new folder.
    fn sandbox() -> (Sandbox, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        let env: BTreeMap<String, String> = [("EXTRA".to_string(), "1".to_string())].into();
        let config = SandboxConfig {
            network: true,
            require: false,
        };
        let sb = Sandbox::new(&ws, None, &tmp, &env, config, dir.path()).unwrap();
        (sb, dir)
    }

    const LIMITS: RunLimits = RunLimits {
        timeout: Duration::from_secs(10),
        max_output: 1000,
    };

    /// The command lines (NULs as spaces) of the processes that hold `needle` in theirs.
    fn running(needle: &str) -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(needle))
            .collect()
    }

    #[tokio::test]
    async fn nothing_a_command_started_outlives_it_with_or_without_a_pid_namespace() {
        let (mut sb, _dir) = sandbox();
        let none = CancellationToken::new();
        for pidns in [sb.pidns, false] {
            sb.pidns = pidns;
            let mark = format!("sleep 30{}.{}", u8::from(pidns), std::process::id());
            let line = format!("setsid {mark} >/dev/null 2>&1 & (setsid {mark} &); ({mark} &); nohup {mark} >/dev/null 2>&1 & echo started");
            let out = sb.run(&line, LIMITS, &none, Reach::SETUP).await.unwrap();
            assert!(out.success() && out.output.contains("started"), "{out:?}");
            // The warden exits after its last process: nothing to wait for.
            let left = running(&mark);
            assert!(
                left.is_empty(),
                "pidns {pidns}: {left:?} outlived their command"
            );
        }
    }

    /// A parent-death signal fires when the thread that forked ends, and tokio's threads
    /// end (blocking threads when idle): the command must not die with one.
    #[test]
    fn a_command_outlives_the_thread_that_started_it() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (sb, _dir) = sandbox();
        let sb = std::sync::Arc::new(sb);
        let handle = rt.handle().clone();
        let starter = std::thread::spawn(move || {
            let mut run = Box::pin(async move {
                let none = CancellationToken::new();
                let line = "sleep 1; echo survived";
                sb.run(line, LIMITS, &none, Reach::SETUP).await
            });
            // Polled until the command runs, then handed over as this thread ends.
            handle.block_on(async {
                let started = tokio::time::timeout(Duration::from_millis(300), &mut run).await;
                assert!(started.is_err(), "the command ended too soon");
            });
            run
        });
        let run = starter.join().unwrap();
        let out = rt.block_on(run).unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        assert!(out.output.contains("survived"), "{out:?}");
    }

    #[tokio::test]
    async fn runs_confined_and_killable() {
        let (sb, _dir) = sandbox();
        let limits = LIMITS;
        let none = CancellationToken::new();
        let out = sb
            .run("echo hi; echo err >&2; exit 3", limits, &none, Reach::SETUP)
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(3));
        assert!(
            out.output.contains("hi") && out.output.contains("err"),
            "{}",
            out.output
        );
        let env_out = sb
            .run("env", limits, &none, Reach::SETUP)
            .await
            .unwrap()
            .output;
        assert!(
            env_out.contains("EXTRA=1") && env_out.contains("LANG=C.UTF-8"),
            "{env_out}"
        );
        assert!(
            !env_out.contains("CARGO"),
            "the runner's variables leaked: {env_out}"
        );
        let short = RunLimits {
            timeout: Duration::from_millis(300),
            max_output: 1000,
        };
        let started = Instant::now();
        let out = sb
            .run("sleep 30 & sleep 30", short, &none, Reach::SETUP)
            .await
            .unwrap();
        assert!(out.timed_out && out.exit_code.is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
