//! The task's MCP servers around the loop: connecting before the first request (a
//! failure is `tool_setup_error` before any spend), adding their tools to the tool set,
//! and re-declaring the tools when a server says its list changed.

use std::sync::Arc;

use super::{AgentEnv, Loop};
use crate::job::TaskSpec;
use crate::model::Conversation;
use crate::tools::mcp::client::Log;
use crate::tools::mcp::TaskServers;
use crate::tools::Toolset;
use crate::vocab::log::TaskLog;
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::{McpServerInfo, TranscriptEvent};

/// Connects the task to its tool set's MCP servers and returns the tool set with their
/// tools, or why the task cannot run.
pub(super) async fn attach(
    spec: &TaskSpec,
    env: &AgentEnv,
    base: &Toolset,
    workspace: Option<&std::path::Path>,
    log: &TaskLog,
) -> Result<(Toolset, TaskServers), Stop> {
    let sink = log.clone();
    let sink: Log = Arc::new(move |event| sink.emit(event));
    let attached = tokio::select! {
        _ = env.cancel.cancelled() => {
            return Err(Stop::new(StopReason::Cancelled, "run cancelled while MCP servers were starting"))
        }
        r = env.mcp.attach(&spec.toolset.mcp, workspace, sink) => r,
    };
    let servers = attached.map_err(|e| Stop::new(StopReason::ToolSetupError, e))?;
    let toolset = with_server_tools(base, &servers, log).await;
    log.emit(TranscriptEvent::McpReady {
        servers: servers
            .servers
            .iter()
            .map(|s| McpServerInfo {
                name: s.spec.name.clone(),
                transport: serde_json::to_value(&s.spec.transport).unwrap_or_default(),
                protocol_version: s.protocol_version.clone(),
            })
            .collect(),
        tools: toolset.names(),
    });
    Ok((toolset, servers))
}

async fn with_server_tools(base: &Toolset, servers: &TaskServers, log: &TaskLog) -> Toolset {
    let (toolset, notes) = base.clone().with_tools(servers.tools().await);
    for note in notes {
        log.emit(TranscriptEvent::McpNote { note });
    }
    toolset
}

impl Loop<'_> {
    /// Before a request: if a server's tool list changed, list again and declare the new
    /// tools; a server that cannot be listed ends the task.
    pub(super) async fn refresh_tools(&mut self, conv: &mut Conversation) -> Result<(), Stop> {
        let changed = self
            .servers
            .refresh()
            .await
            .map_err(|e| Stop::new(StopReason::ToolSetupError, e))?;
        if changed {
            self.toolset = with_server_tools(self.base_tools, self.servers, self.log).await;
            conv.set_tools(self.toolset.declarations());
            self.log.emit(TranscriptEvent::ToolsChanged {
                tools: self.toolset.names(),
            });
        }
        Ok(())
    }
}
