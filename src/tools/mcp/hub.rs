//! Which server connection a task uses: a server whose settings name `{workspace}`
//! is started for the task and stopped with it; any other is started once, by the first
//! task that needs it, and shared by the run until the run ends. A shared server that
//! fails to start fails every task that needs it, with the same message.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::{Mutex, OnceCell};

use super::alias;
use super::client::{Log, McpServer};
use super::config::McpServerSpec;
use super::tool::McpTool;
use crate::tools::Tool;

type Slot = Arc<OnceCell<Result<Arc<McpServer>, String>>>;

/// The run's shared servers.
#[derive(Default)]
pub struct McpHub {
    shared: Mutex<HashMap<usize, Slot>>,
    /// The run folder whose marker the servers carry (none outside a run).
    run_dir: Option<PathBuf>,
}

/// The servers one task uses.
#[derive(Default)]
pub struct TaskServers {
    pub servers: Vec<Arc<McpServer>>,
    /// Started for this task: stopped when it ends.
    own: Vec<Arc<McpServer>>,
}

impl McpHub {
    /// The hub of the run in `dir`: its servers carry the run's marker, so a resume
    /// finds what a killed run left of them.
    pub fn for_run(dir: &Path) -> McpHub {
        McpHub {
            run_dir: Some(dir.to_path_buf()),
            ..McpHub::default()
        }
    }

    /// Connects a task to its tool set's servers, starting what is not running. The
    /// error names the server and says why it could not be used.
    pub async fn attach(
        &self,
        specs: &[Arc<McpServerSpec>],
        workspace: Option<&Path>,
        log: Log,
    ) -> Result<TaskServers, String> {
        let mut out = TaskServers::default();
        for spec in specs {
            let started = if spec.per_task() {
                McpServer::start(
                    spec.clone(),
                    workspace,
                    self.run_dir.as_deref(),
                    log.clone(),
                )
                .await
                .inspect(|s| out.own.push(s.clone()))
            } else {
                let slot = {
                    let mut shared = self.shared.lock().await;
                    shared
                        .entry(Arc::as_ptr(spec) as usize)
                        .or_default()
                        .clone()
                };
                let run_dir = self.run_dir.as_deref();
                slot.get_or_init(|| McpServer::start(spec.clone(), None, run_dir, log.clone()))
                    .await
                    .clone()
            };
            match started {
                Ok(server) if server.lost() => {
                    out.shutdown().await;
                    return Err(format!("MCP server \"{}\" is gone", spec.name));
                }
                Ok(server) => out.servers.push(server),
                Err(e) => {
                    out.shutdown().await;
                    return Err(format!(
                        "MCP server \"{}\" could not be used: {e}",
                        spec.name
                    ));
                }
            }
        }
        Ok(out)
    }

    /// Stops every shared server (at the end of the run).
    pub async fn shutdown(&self) {
        let slots: Vec<Slot> = self.shared.lock().await.drain().map(|(_, s)| s).collect();
        for slot in slots {
            if let Some(Ok(server)) = slot.get() {
                server.shutdown().await;
            }
        }
    }
}

impl TaskServers {
    /// The servers' tools under their aliases, as tools of a tool set.
    pub async fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.mcp_tools()
            .await
            .into_iter()
            .map(|t| t as Arc<dyn Tool>)
            .collect()
    }

    /// The servers' tools under their aliases; a second tool with the same alias gets
    /// a numbered one.
    pub async fn mcp_tools(&self) -> Vec<Arc<McpTool>> {
        let mut out: Vec<Arc<McpTool>> = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        for server in &self.servers {
            let prefix = server.spec.prefix();
            for tool in server.tools().await.iter() {
                let mut name = alias(&prefix, &tool.name);
                let mut n = 2;
                while taken.contains(&name) {
                    name = alias(&prefix, &format!("{}_{n}", tool.name));
                    n += 1;
                }
                taken.push(name.clone());
                out.push(Arc::new(McpTool {
                    alias: name,
                    server: server.clone(),
                    tool: tool.clone(),
                }));
            }
        }
        out
    }

    /// Lists the tools again; true if any server's list changed. rmcp answers from its
    /// cache, which a server's `tools/list_changed` clears in order with the call
    /// results, so this asks the server only after it said something changed.
    pub async fn refresh(&self) -> Result<bool, String> {
        let mut changed = false;
        for server in &self.servers {
            let before = server.tools().await;
            let after = server
                .relist()
                .await
                .map_err(|e| format!("MCP server \"{}\": {e}", server.spec.name))?;
            changed |= before != after;
        }
        Ok(changed)
    }

    /// Stops the servers started for this task.
    pub async fn shutdown(&mut self) {
        for server in self.own.drain(..) {
            server.shutdown().await;
        }
    }
}
