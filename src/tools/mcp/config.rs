//! MCP server settings as a tool set holds them: the transport with its templates
//! (`{workspace}`, `${VAR}`), the timeouts, and the names its tools get before the
//! model (`mcp__<server>__<tool>`, sanitized to what every provider accepts).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

/// How to reach a server; strings may hold `{workspace}` and `${VAR}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<String>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerSpec {
    /// The name the tool set gives it.
    pub name: String,
    pub transport: Transport,
    #[serde(skip)]
    pub call_timeout: Duration,
    #[serde(skip)]
    pub startup_timeout: Duration,
}

const WORKSPACE: &str = "{workspace}";

impl McpServerSpec {
    /// What the model sees before each of the server's tool names.
    pub fn prefix(&self) -> String {
        format!("mcp__{}__", sanitize(&self.name))
    }

    fn strings(&self) -> Vec<&str> {
        match &self.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .chain(env.values().map(String::as_str))
                .chain(cwd.as_deref())
                .collect(),
            Transport::Http { url, headers } => std::iter::once(url.as_str())
                .chain(headers.values().map(String::as_str))
                .collect(),
        }
    }

    /// A server whose settings name the workspace runs once per task; others are
    /// shared by the run.
    pub fn per_task(&self) -> bool {
        self.strings().iter().any(|s| s.contains(WORKSPACE))
    }

    /// The environment variables its settings read (without a default).
    pub fn variables(&self) -> Vec<String> {
        let mut vars: Vec<String> = self
            .strings()
            .iter()
            .flat_map(|s| references(s))
            .filter(|(_, default)| default.is_none())
            .map(|(name, _)| name)
            .collect();
        vars.sort();
        vars.dedup();
        vars
    }

    /// The transport with `{workspace}` and `${VAR}` filled in. Values read from the
    /// environment stay in memory: nothing expanded is written to a report.
    pub fn expanded(&self, workspace: Option<&Path>) -> Result<Transport, ExpandError> {
        let fill = |s: &str| expand(s, workspace, &|v| std::env::var(v).ok());
        Ok(match &self.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => Transport::Stdio {
                command: fill(command)?,
                args: args.iter().map(|a| fill(a)).collect::<Result<_, _>>()?,
                env: env
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), fill(v)?)))
                    .collect::<Result<_, ExpandError>>()?,
                cwd: cwd.as_deref().map(fill).transpose()?,
            },
            Transport::Http { url, headers } => Transport::Http {
                url: fill(url)?,
                headers: headers
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), fill(v)?)))
                    .collect::<Result<_, ExpandError>>()?,
            },
        })
    }
}

/// A server setting that cannot be filled in for a task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("{{workspace}} is used but the task has no workspace (give it a `repo`)")]
    NoWorkspace,
    #[error("unclosed `${{` in \"{0}\"")]
    Unclosed(String),
    #[error("the environment variable {0} is not set (the MCP server settings use ${{{0}}})")]
    Unset(String),
}

/// `${NAME}` and `${NAME:-default}` references in a string: (name, default).
fn references(s: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d.to_string())),
            None => (inner, None),
        };
        out.push((name.to_string(), default));
        rest = &after[end + 1..];
    }
    out
}

/// Fills in `{workspace}` and `${NAME}` / `${NAME:-default}`.
fn expand(
    s: &str,
    workspace: Option<&Path>,
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ExpandError> {
    let mut s = s.to_string();
    if s.contains(WORKSPACE) {
        let ws = workspace.ok_or(ExpandError::NoWorkspace)?;
        s = s.replace(WORKSPACE, &ws.to_string_lossy());
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(ExpandError::Unclosed(s.clone()));
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        match (var(name).filter(|v| !v.is_empty()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => return Err(ExpandError::Unset(name.to_string())),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A name as providers accept it: `[a-zA-Z0-9_-]`, anything else becomes `_`.
pub fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The name the model sees for `tool` of a server with `prefix`: sanitized, and if
/// longer than 64 characters cut with a short hash of the full name, so distinct tools
/// keep distinct names.
pub fn alias(prefix: &str, tool: &str) -> String {
    let full = format!("{prefix}{}", sanitize(tool));
    if full.len() <= 64 {
        return full;
    }
    let hash = full.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{}_{:08x}", &full[..55], hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(args: &[&str]) -> McpServerSpec {
        McpServerSpec {
            name: "my.files".into(),
            transport: Transport::Stdio {
                command: "npx".into(),
                args: args.iter().map(|s| s.to_string()).collect(),
                env: BTreeMap::from([("TOKEN".into(), "${AB_TEST_MCP_TOKEN}".into())]),
                cwd: None,
            },
            call_timeout: Duration::from_secs(60),
            startup_timeout: Duration::from_secs(60),
        }
    }

    #[test]
    fn names_are_sanitized_and_bounded() {
        let s = stdio(&[]);
        assert_eq!(s.prefix(), "mcp__my_files__");
        assert_eq!(alias(&s.prefix(), "read.file"), "mcp__my_files__read_file");
        let long = alias("mcp__server__", &"x".repeat(80));
        assert_eq!(long.len(), 64);
        assert_ne!(
            long,
            alias("mcp__server__", &format!("{}y", "x".repeat(80)))
        );
    }

    #[test]
    fn templates_expand_and_name_what_is_missing() {
        let s = stdio(&["-y", "server", "{workspace}"]);
        assert!(s.per_task());
        assert!(!stdio(&["/srv"]).per_task());
        assert_eq!(s.variables(), ["AB_TEST_MCP_TOKEN"]);
        let e = s.expanded(None).unwrap_err();
        assert!(e.to_string().contains("no workspace"), "{e}");
        let e = s.expanded(Some(Path::new("/ws"))).unwrap_err();
        assert!(
            e.to_string().contains("AB_TEST_MCP_TOKEN is not set"),
            "{e}"
        );
        let vars = |v: &str| (v == "SET").then(|| "yes".to_string());
        assert_eq!(
            expand(
                "a ${SET} ${UNSET:-dflt} {workspace}",
                Some(Path::new("/w")),
                &vars
            )
            .unwrap(),
            "a yes dflt /w"
        );
        assert!(expand("${OPEN", None, &vars).is_err());
        assert_eq!(
            references("${A} ${B:-x}"),
            [
                ("A".to_string(), None),
                ("B".to_string(), Some("x".to_string()))
            ]
        );
    }
}
