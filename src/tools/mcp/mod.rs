//! MCP servers as tool sources: their settings (`config.rs`), and the tools they give
//! a task.

pub mod config;

pub use config::{alias, sanitize, McpServerSpec, Transport};
