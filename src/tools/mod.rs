//! Tools the model may call: the [`Tool`] trait, the registry of available tools, tool
//! sets with their permission policy, and the dispatch of one call (unknown tool,
//! permission, schema check, execution with a timeout), which always ends in exactly
//! one result for the call's id.

mod bash;
pub mod container;
pub mod copies;
mod files;
mod get_time;
pub mod layer;
pub mod mcp;
pub(crate) mod paths;
pub(crate) mod policy;
pub mod pristine;
mod pristine_cache;
pub mod sandbox;
mod search;
mod shell;
mod stage;
mod tree_edit;
mod upper;
pub mod workspace;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

pub use bash::Bash;
pub use files::{EditFile, ReadFile, WriteFile};
pub use get_time::GetTime;
pub use mcp::McpServer;
pub use policy::{Policy, Verdict};
pub use sandbox::{Reach, RunLimits, Sandbox, SandboxConfig};
pub use search::{Grep, ListFiles};

use crate::model::{ToolCall, ToolResult};

/// A tool call that failed in a way the model should read and may recover from (a
/// missing file, a refused path, a command that exited non-zero): it goes back to the
/// model as the call's result, marked as an error, never as a harness failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl From<String> for ToolError {
    fn from(message: String) -> ToolError {
        ToolError(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> ToolError {
        ToolError(message.to_string())
    }
}

/// The built-in `coding` tool set.
pub const CODING_TOOLS: [&str; 6] = [
    "read_file",
    "write_file",
    "edit_file",
    "list_files",
    "grep",
    "bash",
];
/// The built-in `readonly` tool set.
pub const READONLY_TOOLS: [&str; 3] = ["read_file", "list_files", "grep"];

/// What a tool call may use: the task's workspace and sandbox, and the limits of its
/// tool set.
#[derive(Clone)]
pub struct ToolContext {
    /// The canonical root of the task's workspace.
    pub workspace: Option<PathBuf>,
    /// Where the task's commands see the workspace, when not where it is (the
    /// repository's own folder): the file tools follow paths and links as they do.
    pub seen_at: Option<PathBuf>,
    pub sandbox: Option<Arc<Sandbox>>,
    /// Limits of `bash`.
    pub bash: RunLimits,
    /// Whether `bash` may reach the network.
    pub network: bool,
    /// Cancelled when the task must stop now (its commands are killed).
    pub cancel: CancellationToken,
}

impl ToolContext {
    /// The workspace as the file tools reach it; None without one.
    pub fn root(&self) -> Option<paths::Root> {
        let path = self.workspace.clone()?;
        Some(paths::Root::new(path, self.seen_at.clone()))
    }
}

impl Default for ToolContext {
    fn default() -> Self {
        ToolContext {
            workspace: None,
            seen_at: None,
            sandbox: None,
            bash: RunLimits {
                timeout: Duration::from_secs(120),
                max_output: 30_000,
            },
            network: true,
            cancel: CancellationToken::new(),
        }
    }
}

/// A tool the harness runs on the model's behalf.
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    /// Shown to the model; says when to use the tool.
    fn description(&self) -> &str;
    /// JSON Schema of the input (an object schema); inputs are checked against it before
    /// the tool runs.
    fn input_schema(&self) -> Value;
    /// How long one call may run.
    fn timeout(&self, _ctx: &ToolContext) -> Duration {
        Duration::from_secs(60)
    }
    /// Whether the tool works on a task's workspace (the task then needs a `repo`).
    fn needs_workspace(&self) -> bool {
        false
    }
    /// Runs the tool. `Err` is a failure the model should see (it becomes an is_error
    /// result), not a harness failure.
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>>;
    /// Runs the tool for a result richer than text (images, structured content, a
    /// failure that must end the task); by default, `call`.
    fn run<'a>(&'a self, input: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match self.call(input, ctx).await {
                Ok(text) => ToolOutput::text(text),
                Err(msg) => ToolOutput::error(format!("Error: {msg}")),
            }
        })
    }
}

/// What one tool run produced.
#[derive(Debug, Clone, Default)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// Images for providers that take them in tool results.
    pub images: Vec<crate::model::Image>,
    /// Structured content an MCP tool returned, kept for the transcript.
    pub structured: Option<Value>,
    /// The tool's source is gone (an MCP server died): the task cannot go on.
    pub fatal: Option<String>,
}

impl ToolOutput {
    pub fn text(text: String) -> ToolOutput {
        ToolOutput {
            text,
            ..Default::default()
        }
    }

    pub fn error(text: String) -> ToolOutput {
        ToolOutput {
            text,
            is_error: true,
            ..Default::default()
        }
    }
}

/// A tool with its compiled input schema.
#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    schema: Value,
    validator: Arc<jsonschema::Validator>,
}

/// Why a tool cannot be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tool name \"{0}\" is invalid: use 1-64 characters of a-z, A-Z, 0-9, _ and -")]
    BadName(String),
    #[error("tool \"{0}\" is registered twice")]
    Duplicate(String),
    #[error("tool \"{name}\" has an invalid input schema: {detail}")]
    BadSchema { name: String, detail: String },
}

/// Every tool a job may name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Entry>,
}

impl Registry {
    /// The built-in tools.
    pub fn builtin() -> Registry {
        let mut r = Registry::default();
        let tools: [Arc<dyn Tool>; 7] = [
            Arc::new(GetTime),
            Arc::new(ReadFile),
            Arc::new(WriteFile),
            Arc::new(EditFile),
            Arc::new(ListFiles),
            Arc::new(Grep),
            Arc::new(Bash),
        ];
        for t in tools {
            r.register(t)
                .unwrap_or_else(|e| panic!("built-in tool is invalid (a build defect): {e}"));
        }
        r
    }

    /// Adds a tool (embedders may add their own).
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_string();
        let valid = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(RegistryError::BadName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let schema = tool.input_schema();
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(RegistryError::BadSchema {
                name,
                detail: "the schema's type must be \"object\"".into(),
            });
        }
        let validator =
            jsonschema::validator_for(&schema).map_err(|e| RegistryError::BadSchema {
                name: name.clone(),
                detail: e.to_string(),
            })?;
        self.tools.insert(
            name,
            Entry {
                tool,
                schema,
                validator: Arc::new(validator),
            },
        );
        Ok(())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    /// Whether the named tool works on a workspace.
    pub fn needs_workspace(&self, name: &str) -> bool {
        self.tools
            .get(name)
            .is_some_and(|e| e.tool.needs_workspace())
    }

    /// The tools a task declares, under a permission policy. Unknown names are skipped
    /// here; the job check refuses them before anything runs.
    pub fn toolset(&self, names: &[String], policy: Arc<Policy>) -> Toolset {
        Toolset {
            tools: names
                .iter()
                .filter_map(|n| self.tools.get(n).cloned())
                .collect(),
            policy,
        }
    }
}

/// The tools of one task.
#[derive(Clone)]
pub struct Toolset {
    tools: Vec<Entry>,
    policy: Arc<Policy>,
}

/// How one call went, for the transcript and the counters.
#[derive(Debug, Clone)]
pub struct Dispatched {
    pub result: ToolResult,
    /// `allow` or `deny`, and the rule that decided.
    pub decision: &'static str,
    pub rule: String,
    /// Refused by the permission policy (counted as denied_calls).
    pub denied: bool,
    pub ms: u64,
    /// Structured content an MCP tool returned.
    pub structured: Option<Value>,
    /// Why the task cannot go on (an MCP server died during the call).
    pub fatal: Option<String>,
}

/// The call as the policy judges it: a file tool's path resolved inside the workspace
/// (symlinks followed, absolute paths made relative), so that no spelling of a path
/// slips past a rule.
fn policy_view(call: &ToolCall, ctx: &ToolContext) -> Value {
    let Some(root) = ctx.root() else {
        return call.input.clone();
    };
    let relative = |p: &str| {
        root.resolve(p)
            .ok()
            .map(|resolved| Value::String(paths::relative(&root.path, &resolved)))
    };
    let mut view = call.input.clone();
    for key in ["path", "source", "destination"] {
        if let Some(rel) = view.get(key).and_then(Value::as_str).and_then(relative) {
            view[key] = rel;
        }
    }
    if let Some(list) = view.get_mut("paths").and_then(Value::as_array_mut) {
        for item in list.iter_mut() {
            if let Some(rel) = item.as_str().and_then(relative) {
                *item = rel;
            }
        }
    }
    view
}

impl Toolset {
    /// Adds tools found at run time (an MCP server's). A schema the validator cannot
    /// compile is checked only as an object; the returned notes say which.
    pub fn with_tools(mut self, tools: Vec<Arc<dyn Tool>>) -> (Toolset, Vec<String>) {
        let mut notes = Vec::new();
        for tool in tools {
            let mut schema = tool.input_schema();
            if !schema.is_object() || schema.get("type").is_none() {
                // MCP says an input schema is an object schema; some servers omit `type`.
                let mut fixed = schema.as_object().cloned().unwrap_or_default();
                fixed.insert("type".into(), json!("object"));
                schema = Value::Object(fixed);
            }
            let validator = match jsonschema::validator_for(&schema) {
                Ok(v) => v,
                Err(e) => {
                    notes.push(format!(
                        "{}: its input schema does not compile ({e}); inputs are only checked to be objects",
                        tool.name()
                    ));
                    match jsonschema::validator_for(&json!({"type": "object"})) {
                        Ok(v) => v,
                        Err(_) => continue,
                    }
                }
            };
            self.tools.push(Entry {
                tool,
                schema,
                validator: Arc::new(validator),
            });
        }
        (self, notes)
    }

    /// Declarations for the request: name, description, input_schema.
    pub fn declarations(&self) -> Vec<Value> {
        self.tools
            .iter()
            .map(|e| json!({"name": e.tool.name(), "description": e.tool.description(), "input_schema": e.schema}))
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.tools
            .iter()
            .map(|e| e.tool.name().to_string())
            .collect()
    }

    /// Runs one call; every path ends in one result carrying the call's id.
    pub async fn dispatch(&self, call: &ToolCall, ctx: &ToolContext) -> Dispatched {
        let started = Instant::now();
        let done =
            |content: String, is_error: bool, decision: &'static str, rule: String| Dispatched {
                result: ToolResult {
                    id: call.id.clone(),
                    content,
                    is_error,
                    images: Vec::new(),
                },
                decision,
                denied: false,
                rule,
                ms: started.elapsed().as_millis() as u64,
                structured: None,
                fatal: None,
            };
        if let Some(why) = &call.input_error {
            return done(
                format!("Error: {why}. Call the tool again, by name, with arguments that are a JSON object matching its input schema."),
                true,
                "invalid",
                "call not readable".into(),
            );
        }
        let Some(entry) = self.tools.iter().find(|e| e.tool.name() == call.name) else {
            let names = self.names().join(", ");
            return done(
                format!(
                    "Error: unknown tool \"{}\". Available tools: {}.",
                    call.name,
                    if names.is_empty() { "none" } else { &names }
                ),
                true,
                "deny",
                "not declared for this task".into(),
            );
        };
        let rule = match self.policy.decide(&call.name, &policy_view(call, ctx)) {
            Verdict::Deny(why) => {
                let mut d = done(
                    format!("Error: this call is not allowed: {why}. Try another way that the policy allows."),
                    true,
                    "deny",
                    why,
                );
                d.denied = true;
                return d;
            }
            Verdict::Allow(why) => why,
        };
        let problems: Vec<String> = entry
            .validator
            .iter_errors(&call.input)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!(
                    "{}: {}",
                    if at.is_empty() {
                        "input".to_string()
                    } else {
                        at
                    },
                    e
                )
            })
            .collect();
        if !problems.is_empty() {
            return done(
                format!(
                    "Error: the input does not match the input schema of \"{}\": {}",
                    call.name,
                    problems.join("; ")
                ),
                true,
                "allow",
                rule,
            );
        }
        let timeout = entry.tool.timeout(ctx);
        match tokio::time::timeout(timeout, entry.tool.run(call.input.clone(), ctx)).await {
            Ok(out) => {
                let mut d = done(out.text, out.is_error, "allow", rule);
                d.result.images = out.images;
                d.structured = out.structured;
                d.fatal = out.fatal;
                d
            }
            Err(_) => done(
                format!(
                    "Error: tool \"{}\" did not finish within {}",
                    call.name,
                    humantime::format_duration(timeout)
                ),
                true,
                "allow",
                rule,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, input: Value) -> ToolCall {
        ToolCall {
            id: "toolu_1".into(),
            name: name.into(),
            input,
            input_error: None,
        }
    }

    #[tokio::test]
    async fn dispatch_answers_every_path_with_the_call_id() {
        let set =
            Registry::builtin().toolset(&["get_time".to_string()], Arc::new(Policy::default()));
        let ok = set
            .dispatch(
                &call("get_time", json!({"timezone": "UTC"})),
                &ToolContext::default(),
            )
            .await;
        assert!(!ok.result.is_error, "{}", ok.result.content);
        assert_eq!(ok.result.id, "toolu_1");

        let unknown = set
            .dispatch(&call("rm_rf", json!({})), &ToolContext::default())
            .await;
        assert!(unknown.result.is_error);
        assert_eq!(unknown.decision, "deny");
        assert!(unknown.result.content.contains("get_time"));

        let bad = set
            .dispatch(
                &call("get_time", json!({"timezone": 5})),
                &ToolContext::default(),
            )
            .await;
        assert!(bad.result.is_error);
        assert!(
            bad.result.content.contains("/timezone"),
            "{}",
            bad.result.content
        );

        let failed = set
            .dispatch(
                &call("get_time", json!({"timezone": "Mars/Olympus"})),
                &ToolContext::default(),
            )
            .await;
        assert!(failed.result.is_error);
        assert_eq!(failed.decision, "allow");

        let mut broken = call("get_time", json!("{\"timezone\": "));
        broken.input_error = Some("the arguments are not valid JSON (EOF)".into());
        let broken = set.dispatch(&broken, &ToolContext::default()).await;
        assert!(broken.result.is_error && !broken.denied);
        assert_eq!(
            (broken.decision, broken.result.id.as_str()),
            ("invalid", "toolu_1")
        );
        assert!(broken.result.content.contains("not valid JSON"));
    }

    #[tokio::test]
    async fn file_rules_see_through_absolute_paths_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("secrets")).unwrap();
        std::fs::write(root.join("secrets/key"), "hunter2").unwrap();
        std::os::unix::fs::symlink("secrets", root.join("alias")).unwrap();
        let policy = Policy::new(&["read_file(secrets/**)".to_string()], &[], true).unwrap();
        let set = Registry::builtin().toolset(&["read_file".to_string()], Arc::new(policy));
        let ctx = ToolContext {
            workspace: Some(root.clone()),
            ..Default::default()
        };
        let absolute = root.join("secrets/key").display().to_string();
        for spelling in [
            "secrets/key",
            "./alias/key",
            "alias/../secrets/key",
            absolute.as_str(),
        ] {
            let d = set
                .dispatch(&call("read_file", json!({ "path": spelling })), &ctx)
                .await;
            assert_eq!(d.decision, "deny", "{spelling}: {}", d.result.content);
            assert!(!d.result.content.contains("hunter2"), "{spelling}");
        }
    }

    struct Slow;
    impl Tool for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn description(&self) -> &str {
            "sleeps"
        }
        fn input_schema(&self) -> Value {
            json!({"type": "object"})
        }
        fn timeout(&self, _: &ToolContext) -> Duration {
            Duration::from_millis(20)
        }
        fn call<'a>(
            &'a self,
            _: Value,
            _: &'a ToolContext,
        ) -> BoxFuture<'a, Result<String, ToolError>> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok("late".into())
            })
        }
    }

    #[tokio::test]
    async fn tool_timeout_is_an_error_result() {
        let mut r = Registry::builtin();
        r.register(Arc::new(Slow)).unwrap();
        assert!(matches!(
            r.register(Arc::new(Slow)),
            Err(RegistryError::Duplicate(_))
        ));
        let d = r
            .toolset(&["slow".into()], Arc::new(Policy::default()))
            .dispatch(&call("slow", json!({})), &ToolContext::default())
            .await;
        assert!(d.result.is_error);
        assert!(d.result.content.contains("did not finish"));
    }
}
