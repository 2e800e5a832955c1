//! Reading a shell line the way the permission policy must: the simple commands it
//! runs, in canonical spelling, seeing through quotes, escapes, wrappers, compound
//! statements and command substitution. A line too deep or too long to be sure of is
//! refused rather than guessed.

/// One simple command of a shell line, in two spellings: as written (blanks collapsed)
/// and canonical (quotes and escapes removed, leading assignments, reserved words and
/// wrappers such as `env` or `time` dropped, the command's path reduced to its name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleCommand {
    pub written: String,
    pub canonical: String,
}

/// A shell line the policy cannot be sure of, refused rather than guessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error(
        "the command line is longer than {MAX_LINE} bytes, too long to check against the policy"
    )]
    TooLong,
    #[error("the command line nests $( ) too deeply to check against the policy")]
    TooDeep,
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
pub fn split_commands(line: &str) -> Result<Vec<SimpleCommand>, Unreadable> {
    if line.len() > MAX_LINE {
        return Err(Unreadable::TooLong);
    }
    // A backslash before a newline joins the lines.
    let joined = line.replace("\\\n", "");
    let mut out = Vec::new();
    split_into(&joined, 0, &mut out)?;
    Ok(out)
}

fn split_into(line: &str, depth: usize, out: &mut Vec<SimpleCommand>) -> Result<(), Unreadable> {
    if depth > MAX_DEPTH {
        return Err(Unreadable::TooDeep);
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
pub(super) fn hides_commands(canonical: &str) -> Option<&'static str> {
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
}
