//! The tool-set part of the job file as written: `toolsets:`, their MCP servers,
//! permission policies and bash limits.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::vocab::bounds::{self, at_most};
use crate::vocab::values::{or_empty, HumanDuration};

/// A tool set: the tools a task's model gets, what they may do, and the bash tool's
/// limits.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Tool set")]
pub struct ToolsetFields {
    /// Built-in tools (`agentbatch tools JOB` lists them).
    #[serde(default, deserialize_with = "or_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub tools: Vec<String>,
    /// MCP servers whose tools join the set, by server name (the `.mcp.json` shape).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(with = "Option<BTreeMap<String, McpServerFields>>")]
    pub mcp: BTreeMap<String, McpServerFields>,
    /// A `.mcp.json` file (relative to the job file) whose `mcpServers` join `mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<String>,
    /// Which calls are allowed: `deny` and `allow` rules and a default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyFields>,
    /// Limits of the `bash` tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bash: Option<BashFields>,
}

/// One MCP server, as `.mcp.json` files describe it: a command run over stdio, or a
/// Streamable HTTP endpoint. `{workspace}` in a command, argument, variable or working
/// folder is the task's workspace (the server then runs per task); `${VAR}` anywhere is
/// read from the runner's environment when the server starts.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "MCP server", transform = mcp_rules)]
pub struct McpServerFields {
    /// `stdio` (default with `command`) or `http` (default with `url`);
    /// `streamable-http` is the same as `http`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "transports")]
    pub kind: Option<String>,
    /// stdio: the program that runs the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// stdio: the program's arguments.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(with = "Option<Vec<String>>")]
    pub args: Vec<String>,
    /// Variables the server gets besides PATH, HOME and LANG (never the runner's keys).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub env: BTreeMap<String, String>,
    /// stdio: the folder the server runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// http: the server's Streamable HTTP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "endpoint")]
    pub url: Option<String>,
    /// http: headers sent with every request (`Authorization: Bearer ${TOKEN}`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub headers: BTreeMap<String, String>,
    /// How long one tool call may take (default 60s); a call past it is cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// How long starting and initializing the server may take (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout: Option<HumanDuration>,
}

/// The transports an MCP server's `type` may name: stdio, and the names of Streamable
/// HTTP (the old HTTP+SSE transport is refused).
pub(super) const TRANSPORTS: [&str; 4] = ["stdio", "http", "streamable-http", "streamableHttp"];

fn transports(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "anyOf": [{ "enum": TRANSPORTS }, { "type": "null" }] })
}

/// An MCP server's `url`: http or https, or a `${VAR}` that gives one.
fn endpoint(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": ["string", "null"], "pattern": r"^(https?://|\$\{)" })
}

/// What toolsets.rs says of a server on its own: `command` (stdio) or `url` (http), not
/// both, and the one its `type` needs.
fn mcp_rules(schema: &mut schemars::Schema) {
    let set = |field: &str| json!({ "required": [field], "properties": { field: { "not": { "type": "null" } } } });
    let kind = |kinds: &[&str]| json!({ "required": ["type"], "properties": { "type": { "enum": kinds } } });
    schema.insert(
        "allOf".into(),
        json!([
            { "anyOf": [set("command"), set("url")] },
            { "not": { "allOf": [set("command"), set("url")] } },
            { "if": kind(&TRANSPORTS[..1]), "then": set("command") },
            { "if": kind(&TRANSPORTS[1..]), "then": set("url") }
        ]),
    );
}

/// Permission rules: `tool` or `tool(pattern)`; deny beats allow.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Permission policy")]
pub struct PolicyFields {
    /// Calls refused: `tool` or `tool(pattern)`, e.g. `bash(git push*)`.
    #[serde(default, deserialize_with = "or_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub deny: Vec<String>,
    /// Calls allowed: `tool` or `tool(pattern)`, e.g. `bash(cargo test*)`.
    #[serde(default, deserialize_with = "or_empty")]
    #[schemars(with = "Option<Vec<String>>")]
    pub allow: Vec<String>,
    /// What happens to a call no rule matches (default: allow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Decision>,
}

/// What a permission policy does with a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call runs.
    Allow,
    /// The call is refused, and the model is told so.
    Deny,
}

/// Limits of the `bash` tool.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Bash limits")]
pub struct BashFields {
    /// Per command (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Bytes of output the model sees (default 30000; head and tail are kept).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::BASH_OUTPUT }>"
    )]
    #[schemars(range(min = 100, max = bounds::BASH_OUTPUT))]
    pub max_output: Option<usize>,
}
