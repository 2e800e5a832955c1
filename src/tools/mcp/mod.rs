//! MCP servers as tool sources: their settings (`config.rs`), and the tools they give
//! a task.

pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod hub;
pub(crate) mod tool;

pub use client::{CallOutcome, McpServer, ServerTool};
pub use config::{alias, sanitize, McpServerSpec, Transport};
pub use hub::{McpHub, TaskServers};
pub use tool::McpTool;
