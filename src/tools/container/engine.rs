//! The container engine, through its command line: `podman` or `docker`, which take the
//! same arguments for everything used here, so one code path drives both (Debian's
//! `podman-docker`, or Docker's CLI pointed at `podman system service`, are the same
//! again). Every call runs in the machine's mount namespace (see
//! `layer::in_machine_namespace`), is bounded in time, and its error says what the
//! engine printed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ContainerError;

/// Which engine a task asks for.
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
pub enum EngineChoice {
    /// Podman if it works here, else Docker.
    #[default]
    Auto,
    Docker,
    Podman,
}

impl EngineChoice {
    pub fn name(self) -> &'static str {
        match self {
            EngineChoice::Auto => "auto",
            EngineChoice::Docker => "docker",
            EngineChoice::Podman => "podman",
        }
    }

    /// The programs to try, best first.
    fn programs(self) -> &'static [&'static str] {
        match self {
            EngineChoice::Auto => &["podman", "docker"],
            EngineChoice::Docker => &["docker"],
            EngineChoice::Podman => &["podman"],
        }
    }
}

/// An engine found working: its program and what it says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    /// `podman` or `docker`, as the task chose or `auto` found.
    pub name: &'static str,
    pub program: PathBuf,
    /// e.g. `podman 4.3.1`, or `docker 28.2.2 (server: Podman Engine 4.3.1)`.
    pub version: String,
}

/// How long a quick engine call (inspect, create, remove) may take.
pub const QUICK: Duration = Duration::from_secs(120);

/// What an engine call printed.
pub struct Output {
    pub stdout: Vec<u8>,
}

impl Output {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

/// The program `name` on PATH.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What `version --format json` says: a client, and the server it reached (null for a
/// Docker CLI without a daemon; absent for a local podman, which needs none).
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct VersionJson {
    client: Option<Component>,
    #[serde(default)]
    server: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Component {
    version: Option<String>,
}

/// The engine's version line from `version --format json`, or why it does not answer.
fn describe(name: &str, json: &[u8]) -> Result<String, String> {
    let v: VersionJson = serde_json::from_slice(json)
        .map_err(|e| format!("cannot read `version --format json`: {e}"))?;
    let client = v
        .client
        .and_then(|c| c.version)
        .unwrap_or_else(|| "?".into());
    let line = format!("{name} {client}");
    match v.server {
        None => Ok(line),
        Some(serde_json::Value::Null) => {
            Err("its daemon does not answer (is it running? is DOCKER_HOST right?)".into())
        }
        Some(server) => {
            let first = server["Components"].as_array().and_then(|c| {
                let c = c.first()?;
                Some(format!(
                    "{} {}",
                    c["Name"].as_str()?,
                    c["Version"].as_str()?
                ))
            });
            Ok(match first {
                Some(f) => format!("{line} (server: {f})"),
                None => line,
            })
        }
    }
}

impl Engine {
    /// Finds the engine `choice` names, working: on PATH and, for a client that needs a
    /// server, able to reach it. The error says what was tried and what to do.
    /// Blocking (a few engine calls); the run asks once, `validate` once per choice.
    pub fn find(choice: EngineChoice) -> Result<Engine, ContainerError> {
        let mut tried = Vec::new();
        for name in choice.programs() {
            let Some(program) = on_path(name) else {
                tried.push(format!("{name}: not on PATH"));
                continue;
            };
            let out = std::process::Command::new(&program)
                .args(["version", "--format", "json"])
                .stdin(Stdio::null())
                .output();
            let said = match out {
                Ok(o) if o.status.success() => describe(name, &o.stdout),
                Ok(o) => Err(String::from_utf8_lossy(&o.stderr)
                    .trim()
                    .lines()
                    .last()
                    .unwrap_or("it failed")
                    .to_string()),
                Err(e) => Err(e.to_string()),
            };
            match said {
                Ok(version) => {
                    return Ok(Engine {
                        name,
                        program,
                        version,
                    })
                }
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(ContainerError::NoEngine {
            choice: choice.name(),
            tried: tried.join("; "),
        })
    }

    /// Runs the engine with `args`, stdin closed, in the machine's mount namespace;
    /// fails on a non-zero exit with what it printed on stderr, or after `timeout`
    /// (the engine process is killed).
    pub async fn run(&self, args: &[&str], timeout: Duration) -> Result<Output, ContainerError> {
        self.run_logged(args, timeout, None).await
    }

    /// As [`Engine::run`], with stdout and stderr appended to `log` when given (builds
    /// and pulls, whose log goes beside the run's transcripts).
    pub async fn run_logged(
        &self,
        args: &[&str],
        timeout: Duration,
        log: Option<&Path>,
    ) -> Result<Output, ContainerError> {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .env("LANG", "C.UTF-8");
        match log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| ContainerError::Io {
                        what: "open the log",
                        path: path.to_path_buf(),
                        source: e,
                    })?;
                let err = file.try_clone().map_err(|e| ContainerError::Io {
                    what: "open the log",
                    path: path.to_path_buf(),
                    source: e,
                })?;
                cmd.stdout(Stdio::from(file)).stderr(Stdio::from(err));
            }
            None => {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
        }
        crate::tools::layer::in_machine_namespace(&mut cmd);
        let what = args.first().copied().unwrap_or("").to_string();
        let child = cmd.spawn().map_err(|e| ContainerError::Engine {
            call: format!("{} {what}", self.name),
            message: format!("cannot start {}: {e}", self.program.display()),
        })?;
        let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return Err(ContainerError::Engine {
                    call: format!("{} {what}", self.name),
                    message: e.to_string(),
                })
            }
            Err(_) => {
                return Err(ContainerError::Engine {
                    call: format!("{} {what}", self.name),
                    message: format!(
                        "gave no answer within {}",
                        humantime::format_duration(timeout)
                    ),
                })
            }
        };
        if !out.status.success() {
            // With a log, what it printed is there.
            let logged = log.and_then(|l| std::fs::read(l).ok()).unwrap_or_default();
            let stderr = if out.stderr.is_empty() {
                String::from_utf8_lossy(&logged)
            } else {
                String::from_utf8_lossy(&out.stderr)
            };
            let tail: Vec<&str> = stderr.trim().lines().rev().take(3).collect();
            let mut message: Vec<&str> = tail.into_iter().rev().collect();
            if message.is_empty() {
                message.push("(nothing on stderr)");
            }
            return Err(ContainerError::Engine {
                call: format!("{} {what}", self.name),
                message: format!("{}: {}", out.status, message.join(" | ")),
            });
        }
        Ok(Output { stdout: out.stdout })
    }
}
