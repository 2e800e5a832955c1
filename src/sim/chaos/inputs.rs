//! What the chaos model puts in its calls: values made from the tools' JSON schemas,
//! valid and invalid (a wrong type, a required field missing, an extra field, not an
//! object at all), paths that probe the workspace's confinement, strings from empty to
//! `max_string` bytes, and shell commands from a fixed harmless vocabulary.
//!
//! Nothing generated may do harm on a machine without Landlock, where `bash` really
//! runs: commands only list, read, print, sleep, make folders and links, and write new
//! files; writes outside the workspace go only into `outside` (the folder the test
//! gives) or a few `..` levels up (the run's own folders), never to system paths. Files
//! the file tools aim outside are named `ft_*`, those of `bash` `sh_*`, those a planted
//! git hook or config would make `hook_*`, and the one a planted test file makes when a
//! check imports it `ck_unittest`, so a test can tell which escaped.

use serde_json::{json, Map, Value};

use super::{Chaos, Rng};

/// The most items a generated array has, whatever the schema's `minItems` says.
const MAX_ITEMS: u64 = 16;

const WORDS: [&str; 24] = [
    "the", "model", "reads", "a", "file", "and", "then", "writes", "another", "one", "chaos",
    "agent", "batch", "tool", "call", "result", "fix", "test", "path", "maybe", "retry", "budget",
    "seed", "done",
];

/// A short sentence of plain words.
pub(super) fn sentence(r: &mut Rng) -> String {
    let n = r.between(3, 12);
    let words: Vec<&str> = (0..n).map(|_| *r.pick(&WORDS)).collect();
    format!("{}.", words.join(" "))
}

/// Text between calls: a sentence, odd characters, or the last tool result quoted.
pub(super) fn remark(r: &mut Rng) -> String {
    match r.below(10) {
        0 => "Last result: {{tool_result}}".into(),
        1 => "ünïcödé ✓ 🦀 \u{202e}dlrow\u{202c} \t tab \u{7} bell".into(),
        2 => String::new(),
        _ => sentence(r),
    }
}

/// Opaque data, as a redacted thinking block carries.
pub(super) fn opaque(r: &mut Rng) -> String {
    format!("Q2hhb3M{:016x}{:016x}==", r.next(), r.next())
}

/// A string of `len` bytes (ASCII, so any length is valid UTF-8).
fn filler(len: usize) -> String {
    const LINE: &str = "the quick brown chaos fox jumps over 0123456789\n";
    LINE.repeat(len / LINE.len() + 1)[..len].to_string()
}

/// Mostly short text, sometimes empty, medium or huge (up to `max_string` bytes).
fn sized(r: &mut Rng, c: &Chaos) -> String {
    let max = usize::try_from(c.max_string).unwrap_or(usize::MAX);
    match r.below(100) {
        0..=9 => String::new(),
        10..=14 if max > 0 => {
            let len = r.between((max / 2) as u64, max as u64) as usize;
            filler(len)
        }
        15..=34 => filler((r.between(64, 4096) as usize).min(max)),
        35..=39 => "ünïcödé ✓ 🦀 \u{0}nul \u{1b}[31mred\u{1b}[0m\r\n".into(),
        _ => sentence(r),
    }
}

/// Whether a field holds a path, by its name.
fn is_path_field(field: &str) -> bool {
    let f = field.to_ascii_lowercase();
    matches!(
        f.as_str(),
        "path"
            | "file"
            | "filename"
            | "filepath"
            | "dir"
            | "directory"
            | "folder"
            | "cwd"
            | "target"
            | "source"
            | "dest"
            | "destination"
    ) || f.ends_with("_path")
        || f.ends_with("_file")
        || f.ends_with("_dir")
}

/// Whether a tool writes, by its name (absolute system paths are only read).
fn writes(tool: &str) -> bool {
    let t = tool.to_ascii_lowercase();
    ![
        "read", "list", "grep", "glob", "search", "find", "view", "cat", "get",
    ]
    .iter()
    .any(|w| t.starts_with(w))
}

/// A path a model might give a file tool: a root file, a deep new one, a `..` escape, an
/// absolute path, one through a link it made, empty, huge or odd.
fn path(r: &mut Rng, c: &Chaos, writer: bool) -> String {
    let n = r.below(1000);
    let outside = c.outside.as_deref();
    match r.below(100) {
        0..=19 => (*r.pick(&[
            "newfile.py",
            ".gitignore",
            "calc.py",
            "README.md",
            "notes.txt",
            ".env",
        ]))
        .to_string(),
        20..=34 => {
            let depth = r.between(2, 6);
            let dirs: Vec<String> = (0..depth).map(|d| format!("d{d}")).collect();
            format!("{}/deep_{n}.txt", dirs.join("/"))
        }
        35..=44 => escape(r, "ft", n),
        45..=54 => match (outside, writer) {
            (Some(o), _) if r.percent(70) => (*r.pick(&[
                format!("{o}/ft_abs_{n}.txt"),
                format!("{o}/sentinel.txt"),
                format!("{o}/ft_dir_{n}/x.txt"),
                o.to_string(),
            ]))
            .clone(),
            (_, false) => (*r.pick(&["/etc/hostname", "/proc/self/environ", "/", "/etc"])).into(),
            (_, true) => escape(r, "ft", n),
        },
        55..=64 => {
            let k = r.below(3);
            if writer {
                (*r.pick(&[
                    format!("chaos_link_{k}/ft_link_{n}.txt"),
                    format!("chaos_link_{k}/sentinel.txt"),
                    format!("chaos_link_{k}"),
                ]))
                .clone()
            } else {
                (*r.pick(&[
                    "ro_link/hostname".to_string(),
                    format!("chaos_link_{k}/sentinel.txt"),
                    format!("chaos_link_{k}"),
                ]))
                .clone()
            }
        }
        65..=69 => String::new(),
        70..=72 => {
            let max = usize::try_from(c.max_string).unwrap_or(usize::MAX);
            "p".repeat((r.between(256, 100_000) as usize).min(max))
        }
        73..=84 => (*r.pick(&[
            ".",
            "./",
            "d1/",
            ".git/config",
            ".git/hooks/pre-commit",
            "-rf",
            "~/ft_home.txt",
            "a\u{0}b",
            " spaced name.txt",
            "ünïcode/файл.txt",
            "calc.py/child.txt",
            "d1/../d1/./x.txt",
        ]))
        .to_string(),
        _ => (*r.pick(&["calc.py", "test_calc.py", "test_chaos.py", "README.md"])).to_string(),
    }
}

/// A relative path that leaves the workspace by `..` (one to three levels: the run's own
/// folders, never a system path).
fn escape(r: &mut Rng, tag: &str, n: usize) -> String {
    match r.below(5) {
        0 => format!("../{tag}_escape_{n}.txt"),
        1 => format!("../../{tag}_escape_{n}.txt"),
        2 => format!("d1/../../{tag}_escape_{n}.txt"),
        3 => format!("./../{tag}_escape_{n}.txt"),
        _ => format!("../../../{tag}_escape_{n}.txt"),
    }
}

/// Single-quoted for the shell (generated paths never hold a quote; `outside` is
/// checked for one).
fn q(s: &str) -> String {
    format!("'{s}'")
}

/// Where a shell command may write: inside the workspace, into `outside`, a few levels
/// up, or through a link the model made.
fn shell_target(r: &mut Rng, c: &Chaos) -> String {
    let n = r.below(1000);
    match (r.below(4), c.outside.as_deref()) {
        (0, _) => format!("sh_new_{n}.txt"),
        (1, Some(o)) => format!("{o}/sh_abs_{n}.txt"),
        (2, _) => escape(r, "sh", n),
        _ => format!("chaos_link_{}/sh_link_{n}.txt", r.below(3)),
    }
}

/// `ln -sfn <somewhere outside> chaos_link_<k>`: the link's name and the command (`-fn`
/// replaces a link the model made before, so the write that follows goes through it).
pub(super) fn make_link(r: &mut Rng, c: &Chaos) -> (String, String) {
    let k = r.below(3);
    let target = match c.outside.as_deref() {
        Some(o) if r.percent(75) => o.to_string(),
        _ => "..".to_string(),
    };
    let link = format!("chaos_link_{k}");
    (link.clone(), format!("ln -sfn {} {link}", q(&target)))
}

/// A command line from the harmless vocabulary.
fn command(r: &mut Rng, c: &Chaos) -> String {
    let one = |r: &mut Rng| -> String {
        let word = *r.pick(&WORDS);
        match r.below(24) {
            0 => "ls".into(),
            1 => "ls -la".into(),
            2 => {
                let p = path(r, c, false);
                format!("ls -la {} 2>&1 | head -50", q(&p))
            }
            3 => {
                let p = path(r, c, false);
                format!("cat {} | head -c 2000", q(&p))
            }
            4 => {
                let t = shell_target(r, c);
                format!("echo {word} > {}", q(&t))
            }
            5 => {
                let t = shell_target(r, c);
                format!("echo {word} >> {}", q(&t))
            }
            6 => {
                let t = shell_target(r, c);
                format!("mkdir -p {}", q(&t))
            }
            7 => make_link(r, c).1,
            8 => "ln -sfn /etc ro_link".into(),
            9 => "sleep 0.1".into(),
            10 => "head -c 200000 /dev/zero | tr '\\0' a".into(),
            11 => "git status".into(),
            12 => "git status --short && git log --oneline -3".into(),
            13 => "pwd".into(),
            14 => "true".into(),
            15 => "false".into(),
            16 => "exit 3".into(),
            17 => "echo $HOME $TMPDIR".into(),
            18 => "cat /etc/hostname".into(),
            19 => match c.outside.as_deref() {
                Some(o) => format!("ls -la {}", q(o)),
                None => "ls -la ..".into(),
            },
            20 => "wc -c calc.py".into(),
            21 => match c.outside.as_deref() {
                // a test file the check imports (see `planted`), written where write_file
                // might not reach
                Some(o) => format!(
                    "printf '%s\\n' 'import pathlib' \"pathlib.Path('{o}/ck_unittest').write_text('x')\" > test_chaos.py"
                ),
                None => "chmod +x .git/hooks/pre-commit 2>&1; true".into(),
            },
            22 => "seq 1 20000".into(),
            _ => {
                let t = shell_target(r, c);
                format!("touch {}", q(&t))
            }
        }
    };
    let first = one(r);
    match r.below(10) {
        0 => format!("{first} && {}", one(r)),
        1 => format!("{first}; {}", one(r)),
        _ => first,
    }
}

/// Content for a planted git config or hook that, if anything ever ran it outside the
/// sandbox, would leave `hook_*` in `outside`; or a planted test file that leaves
/// `ck_unittest` there when a check command imports it unconfined.
fn planted(path: &str, outside: &str) -> Option<String> {
    let marker = |name: &str| q(&format!("{outside}/hook_{name}"));
    match path {
        ".git/config" => Some(format!(
            "[core]\n\tfsmonitor = \"touch {}\"\n\thooksPath = .git/hooks\n[diff]\n\texternal = \"touch {}\"\n",
            marker("fsmonitor"),
            marker("diff")
        )),
        ".git/hooks/pre-commit" => Some(format!("#!/bin/sh\ntouch {}\n", marker("pre_commit"))),
        // a test file that a check command such as `python3 -m unittest` would import
        "test_calc.py" | "test_chaos.py" => Some(format!(
            "import pathlib\npathlib.Path({:?}).write_text('the check ran this unconfined')\n",
            format!("{outside}/ck_unittest")
        )),
        _ => None,
    }
}

/// The value of one field, by its name and schema.
fn value(r: &mut Rng, c: &Chaos, tool: &str, field: &str, schema: &Value, depth: u32) -> Value {
    if let Some(v) = schema.get("const") {
        return v.clone();
    }
    if let Some(options) = schema
        .get("enum")
        .and_then(Value::as_array)
        .filter(|o| !o.is_empty())
    {
        return r.pick(options).clone();
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(alts) = schema
            .get(key)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
        {
            let alt = r.pick(alts).clone();
            return value(r, c, tool, field, &alt, depth);
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) if !ts.is_empty() => {
            r.pick(ts).as_str().unwrap_or("string").to_string()
        }
        _ if schema.get("properties").is_some() => "object".into(),
        _ => "string".into(),
    };
    match ty.as_str() {
        "integer" | "number" => number(r, schema, ty == "integer"),
        "boolean" => json!(r.percent(50)),
        "null" => Value::Null,
        "array" if depth < 4 => {
            let items = schema.get("items").cloned().unwrap_or(json!({}));
            // The schema is outside data (an MCP server's, a client's): a huge minItems
            // must neither overflow nor fill memory.
            let lo = schema
                .get("minItems")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(MAX_ITEMS);
            let hi = schema
                .get("maxItems")
                .and_then(Value::as_u64)
                .unwrap_or(lo + 3)
                .min(lo + 3);
            let n = r.between(lo, hi);
            Value::Array(
                (0..n)
                    .map(|_| value(r, c, tool, field, &items, depth + 1))
                    .collect(),
            )
        }
        "object" if depth < 4 => object(r, c, tool, schema, depth + 1),
        "array" => json!([]),
        "object" => json!({}),
        _ => json!(string(r, c, tool, field)),
    }
}

/// A number in the schema's range, or at its edges.
fn number(r: &mut Rng, schema: &Value, integer: bool) -> Value {
    let lo = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
    let hi = schema
        .get("maximum")
        .and_then(Value::as_i64)
        .unwrap_or(lo.saturating_add(1000));
    let n = match r.below(10) {
        0 => lo,
        1 => hi,
        _ => lo.saturating_add(r.between(0, hi.saturating_sub(lo).max(0) as u64) as i64),
    };
    if integer || r.percent(50) {
        json!(n)
    } else {
        json!(n as f64 + 0.5)
    }
}

/// A string for a field, by its name: a path, a command, a pattern, or text.
fn string(r: &mut Rng, c: &Chaos, tool: &str, field: &str) -> String {
    let f = field.to_ascii_lowercase();
    if is_path_field(&f) {
        return path(r, c, writes(tool));
    }
    match f.as_str() {
        "command" | "cmd" | "script" => match r.below(40) {
            0 => String::new(),
            1 => format!("echo {}", filler(c.max_string.min(100_000) as usize)),
            _ => command(r, c),
        },
        "pattern" | "glob" | "regex" | "query" => (*r.pick(&[
            "def \\w+", "**/*.py", "*", "(", "", "[", "return", "**/../**", "/etc/*", "(a+)+$",
        ]))
        .to_string(),
        "old_string" | "old" | "search" => match r.below(5) {
            0 => "a - b".into(),
            1 => "return".into(),
            2 => "__pycache__/".into(),
            _ => sized(r, c),
        },
        _ => sized(r, c),
    }
}

/// A valid object for an object schema: every required property, some optional ones.
fn object(r: &mut Rng, c: &Chaos, tool: &str, schema: &Value, depth: u32) -> Value {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut out = Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            if required.contains(&name.as_str()) || r.percent(40) {
                out.insert(name.clone(), value(r, c, tool, name, sub, depth));
            }
        }
    }
    Value::Object(out)
}

/// Values of the wrong type, for invalid inputs.
fn wrong_value(r: &mut Rng) -> Value {
    match r.below(10) {
        0 => json!(42),
        1 => json!("forty-two"),
        2 => json!(true),
        3 => Value::Null,
        4 => json!([1, "two", null]),
        5 => json!({"nested": {"deeper": []}}),
        6 => json!(1e300),
        7 => json!(-1),
        8 => json!(u64::MAX),
        _ => json!(i64::MIN),
    }
}

/// The input of one call to `tool`: valid for its schema, or (`invalid_percent` of the
/// time) broken in one way.
pub(super) fn input(r: &mut Rng, c: &Chaos, tool: &str, schema: &Value) -> Value {
    let mut v = object(r, c, tool, schema, 0);
    if let (Some(o), Some(path)) = (c.outside.as_deref(), v.get("path").and_then(Value::as_str)) {
        if let (Some(content), true) = (planted(path, o), v.get("content").is_some()) {
            v["content"] = json!(content);
        }
    }
    if !r.percent(c.invalid_percent) {
        return v;
    }
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    let required: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    match r.below(6) {
        0 if !obj.is_empty() => {
            let keys: Vec<String> = obj.keys().cloned().collect();
            let k = r.pick(&keys).clone();
            obj.insert(k, wrong_value(r));
        }
        1 if !required.is_empty() => {
            let k = r.pick(&required).clone();
            obj.remove(&k);
        }
        2 => {
            obj.insert("chaos_extra".into(), wrong_value(r));
        }
        3 => obj.clear(),
        4 => {
            // not an object at all
            return match r.below(3) {
                0 => json!([v]),
                1 => json!("a string"),
                _ => Value::Null,
            };
        }
        _ => {
            obj.insert("chaos_extra".into(), json!(sentence(r)));
        }
    }
    v
}
