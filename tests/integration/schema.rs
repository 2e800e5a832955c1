//! The JSON Schemas of job files and scripts, checked by an independent validator (the
//! Python `jsonschema` package, Draft 2020-12, formats not checked) against the Rust
//! loader: every file the loader accepts passes the schema (a schema stricter than the
//! parser would mark working files as wrong in editors), and broken files fail both.
//! The committed schemas and field tables must be what the binary generates.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use agentbatch::commands::schema::{parses, Kind as SchemaKind};

use super::common::{bin, Case};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The committed outputs of `agentbatch schema` and the arguments that make each.
const GENERATED: [(&str, &[&str]); 4] = [
    ("schemas/job.schema.json", &["schema", "job"]),
    ("schemas/script.schema.json", &["schema", "script"]),
    (
        "docs/guide/job-file-fields.md",
        &["schema", "job", "--markdown"],
    ),
    (
        "docs/guide/script-fields.md",
        &["schema", "script", "--markdown"],
    ),
];

#[test]
fn the_committed_schemas_and_field_tables_are_what_the_binary_generates() {
    let mut stale = Vec::new();
    for (file, args) in GENERATED {
        let out = bin().args(args).output().expect("agentbatch runs");
        assert!(
            out.status.success(),
            "agentbatch {}: {out:?}",
            args.join(" ")
        );
        let committed = std::fs::read(root().join(file)).unwrap_or_default();
        if committed != out.stdout {
            stale.push(format!(
                "{file} differs from what the binary generates: regenerate it with\n    cargo run -q -- {} > {file}",
                args.join(" ")
            ));
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

/// Which schema an instance is checked against.
#[derive(Clone, Copy)]
enum Kind {
    Job,
    Script,
}

fn kind_of(kind: SchemaKind) -> Kind {
    match kind {
        SchemaKind::Job => Kind::Job,
        SchemaKind::Script => Kind::Script,
    }
}

impl Kind {
    fn file(self) -> &'static str {
        match self {
            Kind::Job => "schemas/job.schema.json",
            Kind::Script => "schemas/script.schema.json",
        }
    }
}

/// One thing the schema says is wrong with an instance: the field, as `validate` names
/// fields (`tasks[0].context.at`), and the validator's message.
struct SchemaError {
    path: String,
    message: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Each instance's schema errors (empty: valid), from one run of the Python validator.
fn schema_errors(instances: &[(String, Kind, Value)]) -> Vec<Vec<SchemaError>> {
    let python = std::env::var("AGENTBATCH_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("AGENTBATCH_TEST_PYTHON is not set: the schema tests need the Python jsonschema package from tests/python/.venv; run them through ./tests/run.sh (e.g. ./tests/run.sh --test integration schema)")
    });
    let case = Case::new();
    let cases: Vec<Value> = instances
        .iter()
        .map(|(name, kind, instance)| {
            json!({ "name": name, "schema": root().join(kind.file()), "instance": instance })
        })
        .collect();
    let input = case.write("cases.json", &Value::from(cases).to_string());
    let script = case.write("validate.py", VALIDATE_PY);
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(&input)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python}: {e} (run ./tests/run.sh to make the venv)")
        });
    assert!(
        out.status.success(),
        "the validator failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Vec<(String, String)>> =
        serde_json::from_slice(&out.stdout).expect("the validator prints a JSON list");
    assert_eq!(results.len(), instances.len());
    results
        .into_iter()
        .map(|errors| {
            errors
                .into_iter()
                .map(|(path, message)| SchemaError { path, message })
                .collect()
        })
        .collect()
}

/// Checks each schema against the 2020-12 metaschema, then each instance against its
/// schema; prints every instance's first errors, each as the deepest errors under it
/// (an `anyOf` fails where its closest branch does) with the field named as `validate`
/// names it.
const VALIDATE_PY: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
def leaves(e):
    if not e.context:
        return [e]
    found = [leaf for c in e.context for leaf in leaves(c)]
    deepest = max(len(leaf.absolute_path) for leaf in found)
    return [leaf for leaf in found if len(leaf.absolute_path) == deepest]
def field(path):
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += "[%d]" % seg
        else:
            out += ("." if out else "") + seg
    return out
cases = json.load(open(sys.argv[1]))
validators = {}
out = []
for case in cases:
    path = case["schema"]
    if path not in validators:
        schema = json.load(open(path))
        Draft202012Validator.check_schema(schema)
        validators[path] = Draft202012Validator(schema)
    errors = list(validators[path].iter_errors(case["instance"]))[:5]
    out.append([[field(l.absolute_path), l.message] for e in errors for l in leaves(e)][:5])
print(json.dumps(out))
"#;

fn yaml_to_json(text: &str, name: &str) -> Value {
    serde_yaml::from_str(text).unwrap_or_else(|e| panic!("{name} is not YAML: {e}"))
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable folder") {
        let path = entry.expect("folder entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().to_string());
        let skipped = name.is_some_and(|n| n.starts_with('.') || n == "node_modules");
        if path.is_dir() {
            if !skipped {
                yaml_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Job files written inside the tests' Rust sources: string literals that hold a whole
/// job (`name:` and `tasks:`), with format strings' `{{ }}` made single. Literals with a
/// `{placeholder}` are skipped: their text is only known when the test runs.
fn jobs_in_test_sources() -> Vec<(String, String)> {
    let literal = regex::Regex::new(r#""((?:[^"\\]|\\.)*)""#).expect("regex");
    let placeholder = regex::Regex::new(r"(^|[^{])\{[A-Za-z_][A-Za-z0-9_:.]*\}").expect("regex");
    let mut sources = Vec::new();
    for dir in ["tests/integration", "src"] {
        rust_files(&root().join(dir), &mut sources);
    }
    let mut found = Vec::new();
    for file in sources {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for (i, m) in literal.captures_iter(&text).enumerate() {
            let raw = &m[1];
            if !raw.starts_with("name:") || !raw.contains("\\ntasks:") || placeholder.is_match(raw)
            {
                continue;
            }
            let yaml = unescape(raw).replace("{{", "{").replace("}}", "}");
            let shown = file.strip_prefix(root()).unwrap_or(&file).display();
            found.push((format!("{shown} (literal {i})"), yaml));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable folder") {
        let path = entry.expect("folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A Rust string literal's text: `\n`, `\t`, `\"`, `\\` and line continuations.
fn unescape(raw: &str) -> String {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\n') => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

#[test]
fn every_file_the_parser_accepts_passes_the_schema() {
    let mut files = Vec::new();
    yaml_files(&root().join("jobs"), &mut files);
    yaml_files(&root().join("tests"), &mut files);
    let mut instances = Vec::new();
    let mut refused_examples = Vec::new();
    // Where each job instance can be validated: its folder and file name.
    let mut places: Vec<Option<(PathBuf, String)>> = Vec::new();
    let literals = Case::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable file");
        let name = path
            .strip_prefix(root())
            .unwrap_or(path)
            .display()
            .to_string();
        let value = yaml_to_json(&text, &name);
        let kind = if value.get("tasks").is_some() {
            SchemaKind::Job
        } else {
            SchemaKind::Script
        };
        // The shipped examples and the schema's own fixtures must load whole; anything
        // else need only parse.
        if name.starts_with("jobs/") || name.starts_with("tests/fixtures/schema/") {
            let loads = match kind {
                SchemaKind::Job => validate_accepts(path),
                SchemaKind::Script => agentbatch::job::load_script_file(path).is_ok(),
            };
            if !loads {
                refused_examples.push(name.clone());
            }
        }
        if parses(kind, &text).is_ok() {
            instances.push((name, kind_of(kind), value));
            places.push(
                path.parent()
                    .zip(path.file_name())
                    .map(|(dir, file)| (dir.to_path_buf(), file.to_string_lossy().into_owned())),
            );
        }
    }
    assert!(
        refused_examples.is_empty(),
        "shipped examples and schema fixtures the loader refuses: {refused_examples:?}"
    );
    let files_parsed = instances.len();
    // Job files written inside the tests, many of them broken on purpose: every one
    // that parses must pass the schema too.
    let mut inline = 0;
    for (name, yaml) in jobs_in_test_sources() {
        if parses(SchemaKind::Job, &yaml).is_ok() {
            inline += 1;
            instances.push((name, Kind::Job, yaml_to_json(&yaml, "a test's job")));
            let file = format!("literal-{inline}.yaml");
            literals.write(&file, &yaml);
            places.push(Some((literals.dir.path().to_path_buf(), file)));
        }
    }
    assert!(
        files_parsed >= 21,
        "only {files_parsed} job files and scripts parse under jobs/ and tests/"
    );
    assert!(
        inline >= 40,
        "only {inline} job files found in the tests' sources: is the literal reader broken?"
    );
    // The schema may refuse a job the parser reads only where `validate` refuses it
    // too, at the same field or inside it (`context: {at: 1.5}` is a value validate
    // refuses after parsing); a script the parser reads has no further checks.
    let refused: Vec<String> = instances
        .iter()
        .zip(&places)
        .zip(schema_errors(&instances))
        .filter(|(_, errors)| !errors.is_empty())
        .filter_map(|(((name, kind, _), place), errors)| {
            let validated = match (kind, place) {
                (Kind::Job, Some((dir, file))) => validate_refuses_at(dir, file),
                _ => Vec::new(),
            };
            let unexplained: Vec<String> = errors
                .iter()
                .filter(|e| !validated.iter().any(|v| inside(v, &e.path)))
                .map(ToString::to_string)
                .collect();
            (!unexplained.is_empty())
                .then(|| format!("{name}:\n    {}", unexplained.join("\n    ")))
        })
        .collect();
    assert!(
        refused.is_empty(),
        "the parser accepts these, and validate does not refuse them where the schema does (the schema must never be stricter than validate):\n{}",
        refused.join("\n")
    );
}

/// The fields `agentbatch validate` refuses in the job file `file` of `dir`, as its
/// messages name them (`tasks[0].context.at`).
fn validate_refuses_at(dir: &Path, file: &str) -> Vec<String> {
    let out = bin()
        .arg("validate")
        .arg(file)
        .current_dir(dir)
        .env("ANTHROPIC_API_KEY", "placeholder")
        .env("OPENAI_API_KEY", "placeholder")
        .output()
        .expect("agentbatch runs");
    let placed = regex::Regex::new(r"^[^:]*:\d+:\d+: ([A-Za-z0-9_.\[\]-]+): ").expect("regex");
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| placed.captures(l).map(|c| c[1].to_string()))
        .collect()
}

/// Whether the field `field` is `within` or inside it.
fn inside(field: &str, within: &str) -> bool {
    field
        .strip_prefix(within)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
}

/// Whether `agentbatch validate` accepts a job file, with placeholder API keys for the
/// examples that call real providers.
fn validate_accepts(path: &Path) -> bool {
    let out = bin()
        .arg("validate")
        .arg(path)
        .env("ANTHROPIC_API_KEY", "placeholder")
        .env("OPENAI_API_KEY", "placeholder")
        .output()
        .expect("agentbatch runs");
    if !out.status.success() {
        eprintln!(
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

/// A job around one task's extra fields, and a top level's extra fields.
fn job(top: &str, task: &str) -> String {
    format!("name: broken\n{top}defaults:\n  model: claude-sonnet-4-5\n  sim: script.yaml\ntasks:\n  - id: a\n    prompt: p\n{task}")
}

/// A job whose one task has the id `id` (YAML as written).
fn job_with_id(id: &str) -> String {
    format!("name: broken\ndefaults:\n  model: claude-sonnet-4-5\n  sim: script.yaml\ntasks:\n  - id: {id}\n    prompt: p\n")
}

const SCRIPT: &str = "turns:\n  - content: [ { text: done } ]\n";

/// A script whose one turn has the one fault `fault` (YAML flow map).
fn fault(fault: &str) -> String {
    format!("turns:\n  - faults: [ {fault} ]\n    content: [ {{ text: done }} ]\n")
}

#[test]
fn broken_files_fail_both_the_schema_and_validate() {
    let cases: Vec<(&str, String, String)> = vec![
        ("a misspelled field", job("concurrncy: 4\n", ""), SCRIPT.into()),
        ("a wrong type", job("epochs: many\n", ""), SCRIPT.into()),
        (
            "a bad duration",
            job("", "    limits: { time_limit: 90 parsecs }\n"),
            SCRIPT.into(),
        ),
        (
            "a bare number as a duration",
            job("", "    setup_timeout: 90\n"),
            SCRIPT.into(),
        ),
        (
            "a number over its bound",
            job("concurrency: 100001\n", ""),
            SCRIPT.into(),
        ),
        ("a negative count", job("", "    max_tokens: -1\n"), SCRIPT.into()),
        (
            "an unknown enum value",
            job("", "    cache: { mode: sometimes }\n"),
            SCRIPT.into(),
        ),
        (
            "max_repeats of 1",
            job("", "    limits: { max_repeats: 1 }\n"),
            SCRIPT.into(),
        ),
        ("a negative amount", job("max_cost_usd: -5\n", ""), SCRIPT.into()),
        ("money as words", job("max_cost_usd: lots\n", ""), SCRIPT.into()),
        (
            "a bad size",
            job(
                "providers:\n  sim: { max_response_bytes: 12 parsecs }\n",
                "",
            ),
            SCRIPT.into(),
        ),
        (
            "a field misspelled in a map of objects",
            job("teams:\n  t: { max_cost: 1 }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an inline script with a wrong field",
            job("", "    sim: { turns: [ { contents: [] } ] }\n"),
            SCRIPT.into(),
        ),
        (
            "a script file with a wrong field",
            job("", ""),
            "turns:\n  - contnet: [ { text: done } ]\n".into(),
        ),
        (
            "a script with an unknown block",
            job("", ""),
            "turns:\n  - content: [ { txt: done } ]\n".into(),
        ),
        (
            "a fault status that is no error",
            job("", ""),
            "turns:\n  - faults: [ { status: 200 } ]\n    content: [ { text: done } ]\n".into(),
        ),
        (
            "a chaos knob over its bound",
            job("", ""),
            "chaos: { seed: 1, fault_percent: 101 }\n".into(),
        ),
        (
            "context.at above 1",
            job("", "    context: { at: 1.5 }\n"),
            SCRIPT.into(),
        ),
        ("context.at of 0", job("", "    context: { at: 0 }\n"), SCRIPT.into()),
        (
            "context.keep above 10000",
            job("", "    context: { keep: 10001 }\n"),
            SCRIPT.into(),
        ),
        (
            "context.keep of 0",
            job("", "    context: { keep: 0 }\n"),
            SCRIPT.into(),
        ),
        (
            "context.window of 0",
            job("", "    context: { window: 0 }\n"),
            SCRIPT.into(),
        ),
        (
            "a negative amount written as text",
            job("max_cost_usd: \"-5\"\n", ""),
            SCRIPT.into(),
        ),
        (
            "a negative price written as text",
            job("pricing:\n  m: { input: \"$-1.5\", output: 1 }\n", ""),
            SCRIPT.into(),
        ),
        (
            "a duration of zero",
            job("", "    limits: { time_limit: 0s }\n"),
            SCRIPT.into(),
        ),
        (
            "a duration of zero in two parts",
            job("", "    setup_timeout: 0h 0.0s\n"),
            SCRIPT.into(),
        ),
        ("a task id with a slash", job_with_id("a/b"), SCRIPT.into()),
        ("a task id that hides its files", job_with_id(".a"), SCRIPT.into()),
        ("a task id with a space", job_with_id("\"a b\""), SCRIPT.into()),
        ("an empty task id", job_with_id("\"\""), SCRIPT.into()),
        (
            "a task id over 200 characters",
            job_with_id(&"a".repeat(201)),
            SCRIPT.into(),
        ),
        ("a task without an id", job_with_id("null"), SCRIPT.into()),
        (
            "a fault of no kind",
            job("", ""),
            fault("{ message: boom }"),
        ),
        (
            "a fault that disconnects false",
            job("", ""),
            fault("{ disconnect: false }"),
        ),
        (
            "a status with a mid-stream fault",
            job("", ""),
            fault("{ status: 529, mid_stream: error }"),
        ),
        (
            "a disconnect with a mid-stream fault",
            job("", ""),
            fault("{ disconnect: true, mid_stream: cut }"),
        ),
        (
            "an expiry with a status",
            job("", ""),
            fault("{ batch_expire: true, status: 500 }"),
        ),
        (
            "an expiry with a mid-stream fault",
            job("", ""),
            fault("{ batch_expire: true, mid_stream: cut }"),
        ),
        (
            "after_events without mid_stream",
            job("", ""),
            fault("{ status: 500, after_events: 3 }"),
        ),
        (
            "stall_for without mid_stream",
            job("", ""),
            fault("{ status: 500, stall_for: 1s }"),
        ),
        (
            "stall_for with a cut",
            job("", ""),
            fault("{ mid_stream: cut, stall_for: 1s }"),
        ),
        (
            "retry_after with a mid-stream fault",
            job("", ""),
            fault("{ mid_stream: error, retry_after: 1s }"),
        ),
        (
            "reset_after with a mid-stream fault",
            job("", ""),
            fault("{ mid_stream: failed, reset_after: 1s }"),
        ),
        (
            "should_retry with a mid-stream fault",
            job("", ""),
            fault("{ mid_stream: stall, should_retry: true }"),
        ),
        (
            "both tools and a tool set",
            job("", "    tools: [get_time]\n    toolset: coding\n"),
            SCRIPT.into(),
        ),
        (
            "a blank name",
            job("", "").replace("name: broken", "name: \"  \""),
            SCRIPT.into(),
        ),
        (
            "no tasks",
            "name: broken\ntasks: []\n".into(),
            SCRIPT.into(),
        ),
        (
            "an id in defaults",
            job("", "").replace("defaults:\n", "defaults:\n  id: x\n"),
            SCRIPT.into(),
        ),
        (
            "an empty prompt",
            job("", "").replace("prompt: p", "prompt: \"\""),
            SCRIPT.into(),
        ),
        ("a blank model", job("", "    model: \" \"\n"), SCRIPT.into()),
        ("a blank check", job("", "    check: \"\"\n"), SCRIPT.into()),
        (
            "a default every task overrides, out of its range",
            job("", "    max_tokens: 100\n").replace("defaults:\n", "defaults:\n  max_tokens: 0\n"),
            SCRIPT.into(),
        ),
        ("a temperature above 2", job("", "    temperature: 2.5\n"), SCRIPT.into()),
        ("a negative top_p", job("", "    top_p: -0.1\n"), SCRIPT.into()),
        (
            "an unknown reasoning effort",
            job("", "    reasoning: { effort: extreme }\n"),
            SCRIPT.into(),
        ),
        (
            "thinking without its budget",
            job("", "    thinking: { type: enabled }\n"),
            SCRIPT.into(),
        ),
        (
            "a budget for adaptive thinking",
            job("", "    thinking: { type: adaptive, budget_tokens: 2048 }\n"),
            SCRIPT.into(),
        ),
        (
            "a variable name with a dash",
            job("", "    env: { A-B: x }\n"),
            SCRIPT.into(),
        ),
        (
            "a team name with a space",
            job("teams:\n  \"a b\": {}\n", ""),
            SCRIPT.into(),
        ),
        (
            "a provider of the job's own without a protocol",
            job("providers:\n  mine: { base_url: \"http://127.0.0.1:9\" }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an empty provider of the job's own",
            job("providers:\n  mine:\n", ""),
            SCRIPT.into(),
        ),
        (
            "sim that is no simulator",
            job("providers:\n  sim: { simulator: false }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an API key variable for the simulator",
            job("providers:\n  sim: { api_key_env: KEY }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an anthropic_version with a space",
            job("providers:\n  anthropic: { anthropic_version: \"2023 06 01\" }\n", ""),
            SCRIPT.into(),
        ),
        (
            "a response size over 4 GiB",
            job("providers:\n  sim: { max_response_bytes: 5000000000 }\n", ""),
            SCRIPT.into(),
        ),
        (
            "a response size of zero",
            job("providers:\n  sim: { max_response_bytes: 0KB }\n", ""),
            SCRIPT.into(),
        ),
        (
            "a base_url that is no http URL",
            job("providers:\n  mine: { protocol: openai-chat, base_url: \"localhost:8000\" }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an MCP server with a command and a url",
            job("toolsets:\n  t: { mcp: { s: { command: x, url: \"http://h\" } } }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an MCP server of the old SSE transport",
            job("toolsets:\n  t: { mcp: { s: { type: sse, url: \"http://h\" } } }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an http MCP server without a url",
            job("toolsets:\n  t: { mcp: { s: { type: http, command: x } } }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an MCP server with neither command nor url",
            job("toolsets:\n  t: { mcp: { s: { args: [x] } } }\n", ""),
            SCRIPT.into(),
        ),
        (
            "an MCP url without its scheme",
            job("toolsets:\n  t: { mcp: { s: { url: \"h:8000/mcp\" } } }\n", ""),
            SCRIPT.into(),
        ),
        (
            "a ledger URL with a password",
            job("ledger: \"postgres://u:secret@h/db\"\n", ""),
            SCRIPT.into(),
        ),
        (
            "an unknown matrix axis",
            job("matrix:\n  limits.max_turnz: [1, 2]\n", ""),
            SCRIPT.into(),
        ),
        (
            "an id axis",
            "name: broken\nmatrix:\n  id: [a, b]\ndefaults:\n  model: claude-sonnet-4-5\n  sim: script.yaml\n  prompt: p\ntasks:\n  - {}\n".into(),
            SCRIPT.into(),
        ),
        (
            "an axis without values",
            job("matrix:\n  model: []\n", ""),
            SCRIPT.into(),
        ),
        (
            "an axis value of the wrong type",
            job("matrix:\n  limits.max_turns: [5, many]\n", ""),
            SCRIPT.into(),
        ),
        (
            "an axis value out of its range",
            job("matrix:\n  context.at: [0.5, 5]\n", ""),
            SCRIPT.into(),
        ),
        (
            "a batch rate of 2 written as text",
            job("pricing:\n  m: { input: 1, output: 1, batch_rate: \"2\" }\n", ""),
            SCRIPT.into(),
        ),
        (
            "a tool call whose input is no map",
            job("", ""),
            "turns:\n  - content: [ { tool_use: { name: get_time, input: 5 } } ]\n".into(),
        ),
        (
            "a script with turns and chaos",
            job("", ""),
            "chaos: { seed: 1 }\nturns:\n  - content: [ { text: done } ]\n".into(),
        ),
        (
            "a script with neither turns nor chaos",
            job("", ""),
            "repeat_last: true\n".into(),
        ),
        (
            "repeat_last with chaos",
            job("", ""),
            "chaos: { seed: 1 }\nrepeat_last: true\n".into(),
        ),
    ];
    let mut instances = Vec::new();
    let mut not_refused_by_validate = Vec::new();
    for (what, job_text, script_text) in &cases {
        let case = Case::new();
        let path = case.write("job.yaml", job_text);
        case.write("script.yaml", script_text);
        let out = bin()
            .arg("validate")
            .arg(&path)
            .output()
            .expect("agentbatch runs");
        if out.status.code() != Some(2) {
            not_refused_by_validate.push(format!("{what}: exit {:?}", out.status.code()));
        }
        instances.push((
            format!("{what} (job)"),
            Kind::Job,
            yaml_to_json(job_text, what),
        ));
        if script_text != SCRIPT {
            instances.push((
                format!("{what} (script)"),
                Kind::Script,
                yaml_to_json(script_text, what),
            ));
        }
    }
    assert!(
        not_refused_by_validate.is_empty(),
        "validate accepted broken files:\n{}",
        not_refused_by_validate.join("\n")
    );
    // A broken script file fails its own schema; the job that names it is fine by the
    // job schema, which cannot read the file it names.
    let accepted: Vec<String> = instances
        .iter()
        .zip(schema_errors(&instances))
        .filter(|((name, kind, _), errors)| {
            let names_a_file = matches!(kind, Kind::Job)
                && cases
                    .iter()
                    .any(|(w, _, s)| *s != SCRIPT && name == &format!("{w} (job)"));
            errors.is_empty() && !names_a_file
        })
        .map(|((name, _, _), _)| name.clone())
        .collect();
    assert!(
        accepted.is_empty(),
        "the schema accepts broken files: {accepted:?}"
    );
}

/// The guide's list of where the schema stays looser than `validate`
/// (editor-completion.md): each example there is refused by `validate` and passes the
/// schema, so a place the schema learns to check must leave the list, and the list
/// names each place these tests know of.
#[test]
fn every_place_the_guide_lists_as_looser_than_validate_is_so() {
    let guide = std::fs::read_to_string(root().join("docs/guide/editor-completion.md"))
        .expect("the guide is readable");
    let section = guide
        .split("## What the schema cannot check")
        .nth(1)
        .expect("the guide has its section on what the schema cannot check");
    let section = section.split_whitespace().collect::<Vec<_>>().join(" ");
    let script = |s: &str| s.to_string();
    let cases: Vec<(&str, String, String)> = vec![
        ("(`366d`)", job("", "    limits: { time_limit: 366d }\n"), script(SCRIPT)),
        (
            "10m for latencies",
            job("", ""),
            script("latency: 11m\nturns:\n  - content: [ { text: done } ]\n"),
        ),
        (
            "7 days for `retry_after`",
            job("", ""),
            fault("{ status: 429, retry_after: 8days }"),
        ),
        (
            "10s for `chaos.max_delay`",
            job("", ""),
            script("chaos: { seed: 1, max_delay: 11s }\n"),
        ),
        ("`0.001h`", job("", "    setup_timeout: 0.001h\n"), script(SCRIPT)),
        ("(`\"2e9\"`)", job("max_cost_usd: \"2e9\"\n", ""), script(SCRIPT)),
        (
            "digits past the 28th",
            job(
                "pricing:\n  m: { input: 1, output: 1, batch_rate: \"0.00000000000000000000000000000001\" }\n",
                "",
            ),
            script(SCRIPT),
        ),
        (
            "(`max_response_bytes: 5GiB`)",
            job("providers:\n  sim: { max_response_bytes: 5GiB }\n", ""),
            script(SCRIPT),
        ),
        ("`id: +1`", job_with_id("+1"), script(SCRIPT)),
        ("`id: .5`", job_with_id(".5"), script(SCRIPT)),
        ("`.nan`", job("", "    temperature: .nan\n"), script(SCRIPT)),
        ("`1e3`", job("", "    max_tokens: 1e3\n"), script(SCRIPT)),
        (
            "`name:` left empty",
            job("", "").replace("name: broken", "name:"),
            script(SCRIPT),
        ),
        ("tool names", job("", "    tools: [get_tiem]\n"), script(SCRIPT)),
        (
            "listed once",
            job("", "    tools: [get_time, get_time]\n"),
            script(SCRIPT),
        ),
        (
            "permission rules",
            job(
                "toolsets:\n  t: { tools: [get_time], policy: { deny: [\"get_time(x)\"] } }\n",
                "",
            ),
            script(SCRIPT),
        ),
        (
            "past its `http:`",
            job(
                "providers:\n  mine: { protocol: openai-chat, base_url: \"http://exa mple\" }\n",
                "",
            ),
            script(SCRIPT),
        ),
        (
            "(`sim.turns`)",
            job("matrix:\n  sim.turns: [5]\n", ""),
            script(SCRIPT),
        ),
        (
            "(`[1, \"1\"]`)",
            job("matrix:\n  model: [1, \"1\"]\n", ""),
            script(SCRIPT),
        ),
    ];
    let mut instances = Vec::new();
    let mut problems = Vec::new();
    for (words, job_text, script_text) in &cases {
        if !section.contains(words) {
            problems.push(format!("the guide's list does not name {words}"));
        }
        let case = Case::new();
        let path = case.write("job.yaml", job_text);
        case.write("script.yaml", script_text);
        let out = bin()
            .arg("validate")
            .arg(&path)
            .output()
            .expect("agentbatch runs");
        if out.status.code() != Some(2) {
            problems.push(format!("validate accepts {words}"));
        }
        instances.push((words.to_string(), Kind::Job, yaml_to_json(job_text, words)));
        instances.push((
            words.to_string(),
            Kind::Script,
            yaml_to_json(script_text, words),
        ));
    }
    for ((words, _, _), errors) in instances.iter().zip(schema_errors(&instances)) {
        if let Some(e) = errors.first() {
            problems.push(format!(
                "the schema refuses {words} ({e}): take it off the guide's list"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
