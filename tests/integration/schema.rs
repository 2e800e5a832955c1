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

/// Each instance's schema errors (empty: valid), from one run of the Python validator.
fn schema_errors(instances: &[(String, Kind, Value)]) -> Vec<Vec<String>> {
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
    let results: Vec<Vec<String>> =
        serde_json::from_slice(&out.stdout).expect("the validator prints a JSON list");
    assert_eq!(results.len(), instances.len());
    results
}

/// Checks each schema against the 2020-12 metaschema, then each instance against its
/// schema; prints every instance's first errors.
const VALIDATE_PY: &str = r#"
import json, sys
from jsonschema import Draft202012Validator
cases = json.load(open(sys.argv[1]))
validators = {}
out = []
for case in cases:
    path = case["schema"]
    if path not in validators:
        schema = json.load(open(path))
        Draft202012Validator.check_schema(schema)
        validators[path] = Draft202012Validator(schema)
    errors = validators[path].iter_errors(case["instance"])
    out.append(["/".join(map(str, e.absolute_path)) + ": " + e.message for e in errors][:5])
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
        // The shipped examples must load whole; anything else need only parse.
        if name.starts_with("jobs/") {
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
        }
    }
    assert!(
        refused_examples.is_empty(),
        "shipped examples the loader refuses: {refused_examples:?}"
    );
    let files_parsed = instances.len();
    // Job files written inside the tests, many of them broken on purpose: every one
    // that parses must pass the schema too.
    let mut inline = 0;
    for (name, yaml) in jobs_in_test_sources() {
        if parses(SchemaKind::Job, &yaml).is_ok() {
            inline += 1;
            instances.push((name, Kind::Job, yaml_to_json(&yaml, "a test's job")));
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
    let refused: Vec<String> = instances
        .iter()
        .zip(schema_errors(&instances))
        .filter(|(_, errors)| !errors.is_empty())
        .map(|((name, _, _), errors)| format!("{name}:\n    {}", errors.join("\n    ")))
        .collect();
    assert!(
        refused.is_empty(),
        "the parser accepts these but the schema refuses them (the schema must never be stricter than the parser):\n{}",
        refused.join("\n")
    );
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

const SCRIPT: &str = "turns:\n  - content: [ { text: done } ]\n";

#[test]
fn broken_files_fail_both_the_schema_and_validate() {
    let cases: Vec<(&str, String, &str)> = vec![
        ("a misspelled field", job("concurrncy: 4\n", ""), SCRIPT),
        ("a wrong type", job("epochs: many\n", ""), SCRIPT),
        (
            "a bad duration",
            job("", "    limits: { time_limit: 90 parsecs }\n"),
            SCRIPT,
        ),
        (
            "a bare number as a duration",
            job("", "    setup_timeout: 90\n"),
            SCRIPT,
        ),
        (
            "a number over its bound",
            job("concurrency: 100001\n", ""),
            SCRIPT,
        ),
        ("a negative count", job("", "    max_tokens: -1\n"), SCRIPT),
        (
            "an unknown enum value",
            job("", "    cache: { mode: sometimes }\n"),
            SCRIPT,
        ),
        (
            "max_repeats of 1",
            job("", "    limits: { max_repeats: 1 }\n"),
            SCRIPT,
        ),
        ("a negative amount", job("max_cost_usd: -5\n", ""), SCRIPT),
        ("money as words", job("max_cost_usd: lots\n", ""), SCRIPT),
        (
            "a bad size",
            job(
                "providers:\n  sim: { max_response_bytes: 12 parsecs }\n",
                "",
            ),
            SCRIPT,
        ),
        (
            "a field misspelled in a map of objects",
            job("teams:\n  t: { max_cost: 1 }\n", ""),
            SCRIPT,
        ),
        (
            "an inline script with a wrong field",
            job("", "    sim: { turns: [ { contents: [] } ] }\n"),
            SCRIPT,
        ),
        (
            "a script file with a wrong field",
            job("", ""),
            "turns:\n  - contnet: [ { text: done } ]\n",
        ),
        (
            "a script with an unknown block",
            job("", ""),
            "turns:\n  - content: [ { txt: done } ]\n",
        ),
        (
            "a fault status that is no error",
            job("", ""),
            "turns:\n  - faults: [ { status: 200 } ]\n    content: [ { text: done } ]\n",
        ),
        (
            "a chaos knob over its bound",
            job("", ""),
            "chaos: { seed: 1, fault_percent: 101 }\n",
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
        if *script_text != SCRIPT {
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
