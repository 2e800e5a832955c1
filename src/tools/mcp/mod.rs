//! MCP servers as tool sources: their settings (`config.rs`), and the tools they give
//! a task.

pub mod client;
pub mod config;
pub mod hub;
pub mod tool;

pub use client::{CallOutcome, McpServer, ServerTool};
pub use config::{alias, sanitize, McpServerSpec, Transport};
pub use hub::{McpHub, TaskServers};
pub use tool::McpTool;
