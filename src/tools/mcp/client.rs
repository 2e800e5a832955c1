//! One connection to an MCP server through the official SDK (rmcp): starting it (a child
//! process in its own process group, or a Streamable HTTP session), the handshake on
//! protocol 2025-11-25, listing its tools (all pages, again after `list_changed`),
//! calling them with a timeout (dropping a timed-out call sends
//! `notifications/cancelled`), and shutting it down (close stdin, SIGTERM, SIGKILL, the
//! whole group; a stdio server runs under a warden, which also ends it and its children
//! when the runner dies). A stdio server's stderr is drained line by line to a log.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{ConfigureCommandExt, StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceError, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::config::{McpServerSpec, Transport};
use crate::tools::sandbox::{die_with_runner, run_marker, GRACE};
use crate::vocab::transcript::TranscriptEvent;

/// Where a server's stderr lines and lifecycle notes go (a task's transcript).
pub type Log = Arc<dyn Fn(TranscriptEvent) + Send + Sync>;

/// Lines of stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// Lines of stderr written to the log per server; the rest are counted.
const STDERR_LOGGED: usize = 500;

/// The client side of the session: who we are, and nothing more (no roots, sampling or
/// elicitation). rmcp itself clears its tool-list cache on `tools/list_changed`.
#[derive(Clone)]
struct Handler;

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // No capabilities: a tool-calling client. (Declaring roots would make some
        // servers, server-filesystem among them, use our roots instead of their own
        // configured folders.)
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("agentbatch", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// A tool as the server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

/// How a call ended.
#[derive(Debug)]
pub enum CallOutcome {
    /// The server's `CallToolResult`, as JSON.
    Answered(Value),
    /// No answer within the call timeout; the call was cancelled.
    TimedOut(Duration),
    /// A JSON-RPC error (the call is refused, the server lives on).
    Refused(String),
    /// The connection is gone: the server exited or its session cannot be reached.
    Lost(String),
}

/// A running server connection.
pub struct McpServer {
    pub spec: Arc<McpServerSpec>,
    peer: Peer<RoleClient>,
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    /// The process group of a stdio server.
    pgid: Option<i32>,
    tools: tokio::sync::Mutex<Arc<Vec<ServerTool>>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The protocol version the server agreed to.
    pub protocol_version: String,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl McpServer {
    /// Starts (or connects to) the server and completes the handshake and the first
    /// tool listing within the startup timeout. `workspace` fills `{workspace}` and is
    /// a stdio server's working folder unless it sets `cwd`. A stdio server runs under
    /// a warden (it and its children die with the runner) and, started for the run in
    /// `run_dir`, carries that run's marker in its environment.
    pub async fn start(
        spec: Arc<McpServerSpec>,
        workspace: Option<&Path>,
        run_dir: Option<&Path>,
        log: Log,
    ) -> Result<Arc<McpServer>, String> {
        let transport = spec.expanded(workspace).map_err(|e| e.to_string())?;
        let handler = Handler;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let timeout = spec.startup_timeout;
        let (service, pgid) = match transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let cmd = server_command(&command, &args, &env, cwd.as_deref(), workspace, run_dir);
                let (child, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                let pgid = child.id().and_then(|p| i32::try_from(p).ok());
                if let Some(err) = stderr {
                    drain(err, spec.name.clone(), log.clone(), stderr_tail.clone());
                }
                let served = tokio::time::timeout(timeout, handler.serve(child)).await;
                let service = match served {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        kill_group(pgid).await;
                        return Err(format!(
                            "`{command}` did not complete the MCP handshake: {e}{}",
                            tail_note(&stderr_tail)
                        ));
                    }
                    Err(_) => {
                        kill_group(pgid).await;
                        return Err(format!(
                            "`{command}` did not complete the MCP handshake within {}{}",
                            humantime::format_duration(timeout),
                            tail_note(&stderr_tail)
                        ));
                    }
                };
                (service, pgid)
            }
            Transport::Http { url, headers } => (serve_http(&url, &headers, timeout).await?, None),
        };
        let protocol_version = service
            .peer_info()
            .map(|i| i.protocol_version.to_string())
            .unwrap_or_default();
        let server = Arc::new(McpServer {
            peer: service.peer().clone(),
            service: tokio::sync::Mutex::new(Some(service)),
            pgid,
            tools: tokio::sync::Mutex::new(Arc::new(Vec::new())),
            stderr_tail,
            protocol_version,
            spec,
        });
        match tokio::time::timeout(timeout, server.relist()).await {
            Ok(Ok(_)) => Ok(server),
            Ok(Err(e)) => {
                server.shutdown().await;
                Err(e)
            }
            Err(_) => {
                server.shutdown().await;
                Err(format!(
                    "it did not list its tools within {}",
                    humantime::format_duration(timeout)
                ))
            }
        }
    }

    /// The tools as last listed.
    pub async fn tools(&self) -> Arc<Vec<ServerTool>> {
        self.tools.lock().await.clone()
    }

    /// Lists the tools again (every page) and keeps the list.
    pub async fn relist(&self) -> Result<Arc<Vec<ServerTool>>, String> {
        let listed = self
            .peer
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}{}", self.tail_note()))?;
        let tools: Vec<ServerTool> = listed
            .into_iter()
            .map(|t| ServerTool {
                name: t.name.to_string(),
                description: t
                    .description
                    .map(|d| d.to_string())
                    .or(t.title)
                    .unwrap_or_default(),
                input_schema: Value::Object((*t.input_schema).clone()),
            })
            .collect();
        let tools = Arc::new(tools);
        *self.tools.lock().await = tools.clone();
        Ok(tools)
    }

    /// Calls a tool. A call past the timeout is dropped, which makes rmcp send
    /// `notifications/cancelled` for it.
    pub async fn call(&self, name: &str, arguments: Map<String, Value>) -> CallOutcome {
        // `arguments` is always sent, `{}` when empty: some servers refuse a missing key.
        let params = CallToolRequestParams::new(name.to_string()).with_arguments(arguments);
        let timeout = self.spec.call_timeout;
        match tokio::time::timeout(timeout, self.peer.call_tool(params)).await {
            Err(_) => CallOutcome::TimedOut(timeout),
            Ok(Ok(result)) => match serde_json::to_value(&result) {
                Ok(v) => CallOutcome::Answered(v),
                Err(e) => CallOutcome::Refused(format!("unreadable result: {e}")),
            },
            Ok(Err(ServiceError::McpError(e))) => {
                CallOutcome::Refused(format!("MCP error {}: {}", e.code.0, e.message))
            }
            Ok(Err(e)) if self.peer.is_transport_closed() => {
                CallOutcome::Lost(format!("{e}{}", self.tail_note()))
            }
            Ok(Err(e)) => CallOutcome::Refused(e.to_string()),
        }
    }

    /// Whether the connection is gone.
    pub fn lost(&self) -> bool {
        self.peer.is_transport_closed()
    }

    fn tail_note(&self) -> String {
        tail_note(&self.stderr_tail)
    }

    /// Ends the connection: rmcp closes stdin (waits), SIGTERMs and SIGKILLs the child;
    /// then whatever is left of its process group gets the same. An HTTP session is
    /// ended with DELETE.
    pub async fn shutdown(&self) {
        let service = self.service.lock().await.take();
        if let Some(s) = service {
            // Give a just-abandoned call's cancellation a moment to go out.
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = tokio::time::timeout(Duration::from_secs(10), s.cancel()).await;
        }
        kill_group(self.pgid).await;
    }
}

/// The last stderr lines, for an error message.
fn tail_note(tail: &Mutex<VecDeque<String>>) -> String {
    let t = lock(tail);
    if t.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = t.iter().map(String::as_str).collect();
        format!("; its stderr ends with: {}", lines.join(" | "))
    }
}

fn drain(
    err: tokio::process::ChildStderr,
    server: String,
    log: Log,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(err).lines();
        let mut n = 0usize;
        while let Ok(Some(line)) = lines.next_line().await {
            n += 1;
            if n <= STDERR_LOGGED {
                log(TranscriptEvent::McpStderr {
                    server: server.clone(),
                    line: Some(line.clone()),
                    lines_not_logged: None,
                });
            }
            let mut t = lock(&tail);
            if t.len() == STDERR_TAIL {
                t.pop_front();
            }
            t.push_back(line.chars().take(300).collect());
        }
        if n > STDERR_LOGGED {
            log(TranscriptEvent::McpStderr {
                server,
                line: None,
                lines_not_logged: Some(n - STDERR_LOGGED),
            });
        }
    });
}

/// SIGTERM to whatever is left of a server's process group (its warden among it, which
/// ends everything within the grace period), then SIGKILL a second after.
async fn kill_group(pgid: Option<i32>) {
    let Some(pgid) = pgid else { return };
    let group = Pid::from_raw(pgid);
    if killpg(group, None).is_err() {
        return;
    }
    let _ = killpg(group, Signal::SIGTERM);
    for _ in 0..(GRACE.as_millis() / 100 + 10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if killpg(group, None).is_err() {
            return;
        }
    }
    let _ = killpg(group, Signal::SIGKILL);
}

/// The command that starts a stdio server: only the environment a server needs (never
/// the runner's keys), the run's marker, in `cwd` or the workspace, its own process
/// group led by the warden.
fn server_command(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
    workspace: Option<&Path>,
    run_dir: Option<&Path>,
) -> tokio::process::Command {
    tokio::process::Command::new(command).configure(|c| {
        c.args(args);
        // Only what a server needs: never the runner's keys.
        c.env_clear();
        for k in ["PATH", "HOME", "LANG", "TMPDIR", "USER"] {
            if let Some(v) = std::env::var_os(k) {
                c.env(k, v);
            }
        }
        c.envs(env);
        if let Some((name, value)) = run_dir.map(run_marker) {
            c.env(name, value);
        }
        if let Some(dir) = cwd.map(Path::new).or(workspace) {
            c.current_dir(dir);
        }
        // Its own process group, led by the warden: `pgid` below.
        die_with_runner(c.as_std_mut());
    })
}

/// Opens an MCP session over Streamable HTTP at `url`, the headers marked sensitive.
async fn serve_http(
    url: &str,
    headers: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<RunningService<RoleClient, Handler>, String> {
    let mut map = HashMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("header name \"{k}\" is not valid"))?;
        let mut value = HeaderValue::from_str(v)
            .map_err(|_| format!("the value of header \"{k}\" is not valid"))?;
        value.set_sensitive(true);
        map.insert(name, value);
    }
    let cfg = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .custom_headers(map)
        .reinit_on_expired_session(true);
    // No redirects: the custom headers may carry credentials, and reqwest
    // forwards them to whatever origin a redirect names.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let transport = StreamableHttpClientTransport::with_client(client, cfg);
    let served = tokio::time::timeout(timeout, Handler.serve(transport)).await;
    match served {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("cannot initialize an MCP session at {url}: {e}")),
        Err(_) => Err(format!(
            "no MCP session at {url} within {}",
            humantime::format_duration(timeout)
        )),
    }
}
