//! Tool sets: the built-in `coding` and `readonly` and the job's `toolsets:`, with
//! their policies, bash limits and MCP servers (written inline or in a `.mcp.json`);
//! and, per task, the tool set or tool list it uses and what those tools need from it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::context::Ctx;
use super::diagnostics::{key, origin};
use super::locate::Seg;
use super::schema::{Decision, JobFile, McpServerFields, TaskFields, ToolsetFields};
use super::schema_toolsets::TRANSPORTS;
use super::source::SourceError;
use super::spec::ToolsetSpec;
use crate::tools::mcp::{McpServerSpec, Transport};
use crate::tools::{Policy, Registry, RunLimits};

const DEFAULT_BASH_TIMEOUT: Duration = Duration::from_secs(120);
const DEFAULT_BASH_OUTPUT: usize = 30_000;

/// The job's tool sets, with the built-in `coding` and `readonly` unless redefined.
pub(super) fn resolve_toolsets(
    job: &JobFile,
    registry: &Registry,
    cx: &mut Ctx,
) -> BTreeMap<String, Arc<ToolsetSpec>> {
    let mut all: BTreeMap<String, ToolsetFields> = BTreeMap::new();
    for (name, tools) in [
        ("coding", &crate::tools::CODING_TOOLS[..]),
        ("readonly", &crate::tools::READONLY_TOOLS[..]),
    ] {
        all.insert(
            name.into(),
            ToolsetFields {
                tools: tools.iter().map(|t| t.to_string()).collect(),
                ..Default::default()
            },
        );
    }
    all.extend(job.toolsets.clone());
    let mut out = BTreeMap::new();
    for (name, f) in all {
        let here = vec![key("toolsets"), key(&name)];
        let at = |parts: &[Seg]| {
            let mut p = here.clone();
            p.extend_from_slice(parts);
            p
        };
        for (j, tool) in f.tools.iter().enumerate() {
            if !registry.contains(tool) {
                let known: Vec<&str> = registry.names().collect();
                cx.err(
                    &at(&[key("tools"), Seg::Index(j)]),
                    format!(
                        "unknown tool \"{tool}\"; the tools are: {}",
                        known.join(", ")
                    ),
                );
            } else if f.tools[..j].contains(tool) {
                cx.err(
                    &at(&[key("tools"), Seg::Index(j)]),
                    format!("tool \"{tool}\" is listed twice"),
                );
            }
        }
        let mcp = resolve_mcp(&f, &here, cx);
        let p = f.policy.clone().unwrap_or_default();
        let default_allow = p.default.is_none_or(|d| d == Decision::Allow);
        for (kind, rules) in [("deny", &p.deny), ("allow", &p.allow)] {
            for (j, rule) in rules.iter().enumerate() {
                let here = at(&[key("policy"), key(kind), Seg::Index(j)]);
                match Policy::new(std::slice::from_ref(rule), &[], true) {
                    Err(e) => cx.err(&here, e.to_string()),
                    Ok(one) => {
                        for (_, tool) in one.tools() {
                            let from_mcp = mcp.iter().any(|s| tool.starts_with(&s.prefix()));
                            if !f.tools.iter().any(|t| t == tool) && !from_mcp {
                                cx.err(&here, format!("rule \"{rule}\" is about {tool}, which tool set {name} does not have (MCP tools are named mcp__<server>__<tool>)"));
                            }
                        }
                    }
                }
            }
        }
        let policy = Policy::new(&p.deny, &p.allow, default_allow).unwrap_or_default();
        let bash = f.bash.clone().unwrap_or_default();
        if bash.max_output.is_some_and(|m| m < 100) {
            cx.err(
                &at(&[key("bash"), key("max_output")]),
                "must be at least 100 bytes",
            );
        }
        let mut rules: Vec<String> = p.deny.iter().map(|r| format!("deny {r}")).collect();
        rules.extend(p.allow.iter().map(|r| format!("allow {r}")));
        rules.push(format!(
            "default {}",
            if default_allow { "allow" } else { "deny" }
        ));
        out.insert(
            name.clone(),
            Arc::new(ToolsetSpec {
                name: Some(name),
                tools: f.tools.clone(),
                policy: Arc::new(policy),
                rules,
                bash: RunLimits {
                    timeout: bash.timeout.map_or(DEFAULT_BASH_TIMEOUT, |t| t.0),
                    max_output: bash.max_output.unwrap_or(DEFAULT_BASH_OUTPUT),
                },
                mcp,
            }),
        );
    }
    out
}

const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(60);

/// A tool set's MCP servers: its `mcp` entries and those of its `mcp_config` file.
fn resolve_mcp(f: &ToolsetFields, here: &[Seg], cx: &mut Ctx) -> Vec<Arc<McpServerSpec>> {
    let mut entries: Vec<(String, McpServerFields, Vec<Seg>)> = f
        .mcp
        .iter()
        .map(|(n, s)| {
            let mut at = here.to_vec();
            at.extend([key("mcp"), key(n)]);
            (n.clone(), s.clone(), at)
        })
        .collect();
    if let Some(file) = &f.mcp_config {
        let mut at = here.to_vec();
        at.push(key("mcp_config"));
        let full = cx.files.join(file);
        match read_mcp_config(&full, cx.files.mcp_config_text(&full)) {
            Ok(servers) => {
                for (n, s) in servers {
                    if f.mcp.contains_key(&n) {
                        cx.err(
                            &at,
                            format!("MCP server \"{n}\" is in {file} and in `mcp`: rename one"),
                        );
                    } else {
                        entries.push((n, s, at.clone()));
                    }
                }
            }
            Err(e) => cx.err(&at, e.to_string()),
        }
    }
    let mut out: Vec<Arc<McpServerSpec>> = Vec::new();
    for (name, s, at) in entries {
        let field = |k: &str| {
            let mut p = at.clone();
            p.push(key(k));
            p
        };
        let kind = s
            .kind
            .clone()
            .unwrap_or_else(|| if s.url.is_some() { "http" } else { "stdio" }.into());
        let http = TRANSPORTS[1..].contains(&kind.as_str());
        let transport = match (kind.as_str(), &s.command, &s.url) {
            ("sse", _, _) => {
                cx.err(&field("type"), "the old HTTP+SSE transport is not supported: use the server's Streamable HTTP endpoint (`type: http`)");
                continue;
            }
            ("stdio", Some(command), None) => Transport::Stdio {
                command: command.clone(),
                args: s.args.clone(),
                env: s.env.clone(),
                cwd: s.cwd.clone(),
            },
            (_, None, Some(url)) if http => {
                let scheme_ok = ["http://", "https://", "${"]
                    .iter()
                    .any(|p| url.starts_with(p));
                if !scheme_ok {
                    cx.err(&field("url"), "use an http:// or https:// URL");
                }
                Transport::Http {
                    url: url.clone(),
                    headers: s.headers.clone(),
                }
            }
            (_, Some(_), Some(_)) => {
                cx.err(
                    &at,
                    "give either `command` (stdio) or `url` (http), not both",
                );
                continue;
            }
            ("stdio", None, _) => {
                cx.err(&at, "a stdio server needs a `command`");
                continue;
            }
            _ if http => {
                cx.err(&at, "an http server needs a `url`");
                continue;
            }
            (other, _, _) => {
                cx.err(
                    &field("type"),
                    format!("unknown MCP transport \"{other}\": use stdio or http"),
                );
                continue;
            }
        };
        let spec = McpServerSpec {
            name: name.clone(),
            transport,
            call_timeout: s.timeout.map_or(DEFAULT_MCP_TIMEOUT, |t| t.0),
            startup_timeout: s.startup_timeout.map_or(DEFAULT_MCP_TIMEOUT, |t| t.0),
        };
        if out.iter().any(|o| o.prefix() == spec.prefix()) {
            cx.err(
                &at,
                format!(
                    "MCP server \"{name}\" gets the same tool prefix {} as another server: rename it",
                    spec.prefix()
                ),
            );
            continue;
        }
        out.push(Arc::new(spec));
    }
    out
}

/// Why a `.mcp.json` file gives no servers.
#[derive(Debug, thiserror::Error)]
enum McpConfigError {
    #[error("{shown}: {source}")]
    Read { shown: String, source: SourceError },
    #[error(
        "{shown}{line}: {path}: a key written twice (first at line {first}); remove or rename one"
    )]
    DuplicateKey {
        shown: String,
        line: String,
        path: String,
        first: String,
    },
    #[error("{shown} is not valid JSON: {source}")]
    Json {
        shown: String,
        source: serde_json::Error,
    },
    #[error("{shown} has no `mcpServers` object")]
    NoServers { shown: String },
    #[error("{shown}: server \"{name}\": {source}")]
    Server {
        shown: String,
        name: String,
        source: serde_json::Error,
    },
}

/// The servers of a `.mcp.json` file (`mcpServers`, or VS Code's `servers`), from the
/// outcome of reading it. Keys other tools put there (`disabled`, `autoApprove`, ...)
/// are ignored, since the file is shared with them.
fn read_mcp_config(
    path: &Path,
    text: Result<String, SourceError>,
) -> Result<Vec<(String, McpServerFields)>, McpConfigError> {
    let shown = path.display().to_string();
    let text = text.map_err(|source| McpConfigError::Read {
        shown: shown.clone(),
        source,
    })?;
    // JSON objects may repeat a key too (the last would win): JSON is YAML, so the same
    // walk finds it.
    if let Some(d) = super::locate::duplicate_key(&text) {
        return Err(McpConfigError::DuplicateKey {
            shown,
            line: d.at.map(|(l, _)| format!(":{l}")).unwrap_or_default(),
            path: super::locate::path_string(&d.path),
            first: d.first_line.map_or("?".to_string(), |l| l.to_string()),
        });
    }
    let doc: Value = serde_json::from_str(&text).map_err(|source| McpConfigError::Json {
        shown: shown.clone(),
        source,
    })?;
    let servers = doc
        .get("mcpServers")
        .or_else(|| doc.get("servers"))
        .and_then(Value::as_object)
        .ok_or_else(|| McpConfigError::NoServers {
            shown: shown.clone(),
        })?;
    const KNOWN: [&str; 9] = [
        "type",
        "command",
        "args",
        "env",
        "cwd",
        "url",
        "headers",
        "timeout",
        "startup_timeout",
    ];
    servers
        .iter()
        .map(|(name, v)| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| KNOWN.contains(&k.as_str()));
            }
            serde_json::from_value::<McpServerFields>(v)
                .map(|s| (name.clone(), s))
                .map_err(|source| McpConfigError::Server {
                    shown: shown.clone(),
                    name: name.clone(),
                    source,
                })
        })
        .collect()
}

/// A task's tools: a named tool set, or a plain list (everything allowed).
pub(super) fn resolve_task_toolset(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    toolsets: &BTreeMap<String, Arc<ToolsetSpec>>,
    registry: &Registry,
    cx: &mut Ctx,
) -> Option<Arc<ToolsetSpec>> {
    for (fields, on_task) in [(t, true), (d, false)] {
        if fields.tools.is_some() && fields.toolset.is_some() {
            cx.err(
                &origin(i, on_task, !on_task, &["toolset"]),
                "set either `tools` or `toolset`, not both",
            );
            return None;
        }
    }
    let (name, list, on_task) = if t.toolset.is_some() || t.tools.is_some() {
        (t.toolset.clone(), t.tools.clone(), true)
    } else {
        (d.toolset.clone(), d.tools.clone(), false)
    };
    if let Some(name) = name {
        let found = toolsets.get(&name).cloned();
        if found.is_none() {
            let known: Vec<&str> = toolsets.keys().map(String::as_str).collect();
            cx.err(
                &origin(i, on_task, !on_task, &["toolset"]),
                format!(
                    "unknown tool set \"{name}\"; the tool sets are: {}",
                    known.join(", ")
                ),
            );
        }
        return found;
    }
    let tools = list.unwrap_or_default();
    let mut ok = true;
    for (j, tool) in tools.iter().enumerate() {
        let mut at = origin(i, on_task, !on_task, &["tools"]);
        at.push(Seg::Index(j));
        if !registry.contains(tool) {
            let known: Vec<&str> = registry.names().collect();
            cx.err(
                &at,
                format!(
                    "unknown tool \"{tool}\"; the tools are: {}",
                    known.join(", ")
                ),
            );
            ok = false;
        } else if tools[..j].contains(tool) {
            cx.err(&at, format!("tool \"{tool}\" is listed twice"));
            ok = false;
        }
    }
    ok.then(|| {
        Arc::new(ToolsetSpec {
            name: None,
            tools,
            policy: Arc::new(Policy::default()),
            rules: vec!["default allow".into()],
            bash: RunLimits {
                timeout: DEFAULT_BASH_TIMEOUT,
                max_output: DEFAULT_BASH_OUTPUT,
            },
            mcp: Vec::new(),
        })
    })
}

/// What the task's tools need from the task: a repository for workspace tools and for
/// MCP servers started in the workspace, and the variables MCP servers read.
pub(super) fn check_toolset_needs(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    toolset: Option<&ToolsetSpec>,
    has_repo: bool,
    registry: &Registry,
    cx: &mut Ctx,
) {
    let tools = toolset.map(|ts| &ts.tools[..]).unwrap_or_default();
    if !has_repo {
        if let Some(needs) = tools.iter().find(|n| registry.needs_workspace(n)) {
            let on_task = t.toolset.is_some() || t.tools.is_some();
            let field = if t.toolset.is_some() || (!on_task && d.toolset.is_some()) {
                "toolset"
            } else {
                "tools"
            };
            cx.err(
                &origin(i, on_task, !on_task, &[field]),
                format!("tool \"{needs}\" works on a repository: give the task a `repo` (a local git repository or folder)"),
            );
        }
    }
    if let Some(ts) = toolset {
        let at = origin(i, t.toolset.is_some(), d.toolset.is_some(), &["toolset"]);
        let set = ts.name.as_deref().unwrap_or("(tools)");
        for s in &ts.mcp {
            if s.per_task() && !has_repo {
                cx.err(
                    &at,
                    format!("tool set {set}'s MCP server \"{}\" uses {{workspace}}, so the task needs a `repo`", s.name),
                );
            }
            for v in s.variables() {
                if !cx.env.is_set(&v) {
                    cx.err(
                        &at,
                        format!("tool set {set}'s MCP server \"{}\" reads ${{{v}}}, which is not set: export {v}=... (or write ${{{v}:-default}})", s.name),
                    );
                }
            }
        }
    }
}
