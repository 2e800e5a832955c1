//! Looking at MCP servers from the command line: what tools a tool set gives the model
//! (`agentbatch tools`, which starts the set's servers), and a check of one server that
//! lists its tools and calls each with sample arguments (`agentbatch mcp-check`, which
//! the MCP conformance suite drives).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::job::ToolsetSpec;
use crate::tools::mcp::client::{CallOutcome, Log, McpServer};
use crate::tools::mcp::config::{McpServerSpec, Transport};
use crate::tools::mcp::hub::McpHub;
use crate::tools::Registry;

/// One tool as the model sees it, and where it comes from.
#[derive(Debug, Clone)]
pub struct ListedTool {
    pub name: String,
    pub description: String,
    /// `built-in`, or `mcp server <name> (tool <real name>)`.
    pub source: String,
    pub schema: Value,
}

fn quiet() -> Log {
    Arc::new(|_| {})
}

/// The tools a tool set gives the model, its MCP servers started for real (with
/// `workspace` for `{workspace}`) and stopped again.
pub async fn list_toolset(
    set: &ToolsetSpec,
    registry: &Registry,
    workspace: Option<&Path>,
) -> Result<Vec<ListedTool>, String> {
    let mut out: Vec<ListedTool> = registry
        .toolset(&set.tools, set.policy.clone())
        .declarations()
        .into_iter()
        .map(|d| ListedTool {
            name: d["name"].as_str().unwrap_or_default().to_string(),
            description: d["description"].as_str().unwrap_or_default().to_string(),
            source: "built-in".into(),
            schema: d["input_schema"].clone(),
        })
        .collect();
    let hub = McpHub::default();
    let mut servers = hub.attach(&set.mcp, workspace, quiet()).await?;
    for t in servers.mcp_tools().await {
        out.push(ListedTool {
            name: t.alias.clone(),
            description: t.tool.description.clone(),
            source: format!("mcp server {} (tool {})", t.server.spec.name, t.tool.name),
            schema: t.tool.input_schema.clone(),
        });
    }
    servers.shutdown().await;
    hub.shutdown().await;
    Ok(out)
}

/// Sample arguments for a tool from its input schema: its required properties with a
/// value of their type (the first of an enum, the default if any).
pub fn sample_arguments(schema: &Value) -> Map<String, Value> {
    let mut args = Map::new();
    let props = schema["properties"].as_object();
    for name in schema["required"].as_array().into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        let p = props.and_then(|p| p.get(name)).cloned().unwrap_or_default();
        let value = if let Some(d) = p.get("default") {
            d.clone()
        } else if let Some(first) = p["enum"].as_array().and_then(|e| e.first()) {
            first.clone()
        } else {
            match p["type"].as_str() {
                Some("number") | Some("integer") => json!(1),
                Some("boolean") => json!(false),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("test"),
            }
        };
        args.insert(name.to_string(), value);
    }
    args
}

/// Connects to one server (an http(s) URL, or a command line for stdio), lists its
/// tools and calls each with sample arguments; prints what happened. Ok if every call
/// got an answer (an `isError` result is an answer).
pub async fn check_server(target: &str, call_timeout: Duration) -> Result<(), String> {
    let transport = if target.starts_with("http://") || target.starts_with("https://") {
        Transport::Http {
            url: target.to_string(),
            headers: Default::default(),
        }
    } else {
        let mut words = target.split_whitespace().map(str::to_string);
        let command = words.next().ok_or("give a URL or a command")?;
        Transport::Stdio {
            command,
            args: words.collect(),
            env: Default::default(),
            cwd: None,
        }
    };
    let spec = Arc::new(McpServerSpec {
        name: "check".into(),
        transport,
        call_timeout,
        startup_timeout: Duration::from_secs(30),
    });
    let server = McpServer::start(spec, None, None, quiet()).await?;
    println!(
        "connected: protocol {}, {} tool(s)",
        server.protocol_version,
        server.tools().await.len()
    );
    let mut failures = 0;
    for tool in server.tools().await.iter() {
        let args = sample_arguments(&tool.input_schema);
        let shown = Value::Object(args.clone());
        match server.call(&tool.name, args).await {
            CallOutcome::Answered(r) => {
                let error = r["isError"].as_bool().unwrap_or(false);
                println!(
                    "{} {shown}: answered{}",
                    tool.name,
                    if error { " (isError)" } else { "" }
                );
            }
            other => {
                failures += 1;
                println!("{} {shown}: {other:?}", tool.name);
            }
        }
    }
    server.shutdown().await;
    if failures > 0 {
        return Err(format!("{failures} call(s) got no answer"));
    }
    Ok(())
}

/// `agentbatch mcp-check`: [`check_server`], its failure on stderr; the exit code.
pub async fn mcp_check(target: &str, timeout: Duration) -> ExitCode {
    match check_server(target, timeout).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agentbatch mcp-check: {e}");
            ExitCode::from(1)
        }
    }
}

/// `agentbatch tools`: lists every tool set's tools (the ones the job's tasks use, or
/// the one named), with MCP servers started for real; a `{workspace}` is an empty
/// temporary folder. The exit code.
pub async fn tools(job: &Path, only: Option<&str>, schemas: bool) -> ExitCode {
    let registry = Registry::builtin();
    let plan = match super::run::load(job, &registry, None) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let mut sets: Vec<&ToolsetSpec> = Vec::new();
    for t in &plan.tasks {
        if !sets.iter().any(|s| std::ptr::eq(*s, &*t.toolset)) {
            sets.push(&t.toolset);
        }
    }
    if let Some(name) = only {
        sets.retain(|s| s.name.as_deref() == Some(name));
        if sets.is_empty() {
            eprintln!(
                "agentbatch tools: no task of {} uses a tool set named {name}",
                job.display()
            );
            return ExitCode::from(2);
        }
    }
    let scratch = match tempfile_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("agentbatch tools: cannot make a temporary folder: {e}");
            return ExitCode::from(1);
        }
    };
    let mut failed = false;
    for set in sets {
        let name = set.name.as_deref().unwrap_or("(the tasks' tools list)");
        println!("tool set {name}:");
        match list_toolset(set, &registry, Some(&scratch)).await {
            Ok(tools) => {
                for t in tools {
                    let first_line = t.description.lines().next().unwrap_or_default();
                    println!("  {}  [{}]  {first_line}", t.name, t.source);
                    if schemas {
                        println!("      schema: {}", t.schema);
                    }
                }
            }
            Err(e) => {
                failed = true;
                println!("  error: {e}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// A fresh empty folder under the system's temp folder.
fn tempfile_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "agentbatch-tools-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_arguments_fill_required_properties() {
        let schema = json!({"type": "object", "required": ["a", "b", "mode", "n"], "properties": {
            "a": {"type": "number"}, "b": {"type": "string"}, "mode": {"enum": ["x", "y"]},
            "n": {"type": "integer", "default": 7}, "optional": {"type": "string"}}});
        assert_eq!(
            Value::Object(sample_arguments(&schema)),
            json!({"a": 1, "b": "test", "mode": "x", "n": 7})
        );
    }
}
