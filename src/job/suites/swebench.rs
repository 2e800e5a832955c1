//! SWE-bench instances: dataset rows (JSONL, or a JSON array) and SWE-bench 5 task repos
//! (`sweb.yaml`, `tasks/<instance_id>/`), read as `swebench/task/repo.py` reads them.

use std::path::Path;

use serde_json::Value;

use super::{abs, problem, task_id, text, Read, SuiteTask};
use crate::job::schema::{LimitFields, TaskFields};
use crate::job::schema_environment::EnvironmentFields;
use crate::job::schema_suite::{
    SolutionFields, SuiteFields, SwebenchEvalType, SwebenchVerifierFields, VerifierFields,
};

/// Where the instance images have the repository.
const TESTBED: &str = "/testbed";

/// The repositories whose parser records failures only (`FAIL_ONLY_REPOS`).
const FAIL_ONLY_REPOS: [&str; 6] = [
    "chartjs/Chart.js",
    "processing/p5.js",
    "markedjs/marked",
    "bpmn-io/bpmn-js",
    "openlayers/openlayers",
    "eslint/eslint",
];

/// The parser of each Python repository of SWE-bench, for rows that name none
/// (`MAP_REPO_TO_PARSER_PY`).
const PARSER_OF_REPO: [(&str, &str); 18] = [
    ("astropy/astropy", "parse_log_pytest_v2"),
    ("django/django", "parse_log_django"),
    ("marshmallow-code/marshmallow", "parse_log_pytest"),
    ("matplotlib/matplotlib", "parse_log_matplotlib"),
    ("mwaskom/seaborn", "parse_log_seaborn"),
    ("pallets/flask", "parse_log_pytest"),
    ("psf/requests", "parse_log_pytest_options"),
    ("pvlib/pvlib-python", "parse_log_pytest"),
    ("pydata/xarray", "parse_log_pytest"),
    ("pydicom/pydicom", "parse_log_pytest_options"),
    ("pylint-dev/astroid", "parse_log_pytest"),
    ("pylint-dev/pylint", "parse_log_pytest_options"),
    ("pytest-dev/pytest", "parse_log_pytest"),
    ("pyvista/pyvista", "parse_log_pytest"),
    ("scikit-learn/scikit-learn", "parse_log_pytest_v2"),
    ("sqlfluff/sqlfluff", "parse_log_pytest"),
    ("sphinx-doc/sphinx", "parse_log_pytest_v2"),
    ("sympy/sympy", "parse_log_sympy"),
];

/// The image the official harness derives for an instance (`task/checks.py:
/// expected_image`).
pub fn expected_image(instance_id: &str, namespace: &str) -> String {
    let key = format!("sweb.eval.x86_64.{instance_id}:latest").to_lowercase();
    format!("{namespace}/{key}").replace("__", "_1776_")
}

pub(super) fn read(path: &Path, suite: &SuiteFields, read: &mut Read) {
    if path.is_dir() {
        read_task_repo(path, suite, read);
        return;
    }
    let Some(body) = text(path, read) else {
        return;
    };
    // A JSON array (a `datasets` export) or one row per line.
    if body.trim_start().starts_with('[') {
        match serde_json::from_str::<Vec<Value>>(&body) {
            Ok(rows) => {
                for row in rows {
                    row_task(&row, path, None, suite, read);
                }
            }
            Err(e) => read.problems.push(problem(
                path,
                Some(e.line()),
                format!("not a JSON array of SWE-bench rows: {e}"),
            )),
        }
        return;
    }
    for (n, line) in body.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(row) => row_task(&row, path, Some(n + 1), suite, read),
            Err(e) => read.problems.push(problem(
                path,
                Some(n + 1),
                format!("not a JSON object (one SWE-bench row per line): {e}"),
            )),
        }
    }
}

/// A list of test names: a JSON list, or (as the exported rows have them) a string
/// holding one.
fn tests(row: &Value, key: &str) -> Result<Vec<String>, String> {
    match row.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => serde_json::from_str::<Vec<String>>(s)
            .map_err(|e| format!("`{key}` is a string that is not a JSON list of test names: {e}")),
        Some(v) => serde_json::from_value::<Vec<String>>(v.clone())
            .map_err(|_| format!("`{key}` is not a list of test names")),
    }
}

fn string(row: &Value, key: &str) -> Option<String> {
    row.get(key).and_then(Value::as_str).map(str::to_string)
}

/// One instance (a dataset row, or a task folder read into one) as task fields.
fn row_task(row: &Value, file: &Path, line: Option<usize>, suite: &SuiteFields, read: &mut Read) {
    let before = read.problems.len();
    let mut missing = |key: &str, why: &str| {
        read.problems
            .push(problem(file, line, format!("{}no `{key}`{why}", who(row))));
    };
    let id = string(row, "instance_id");
    let statement = string(row, "problem_statement");
    let script = string(row, "eval_script");
    if id.is_none() {
        missing("instance_id", "");
    }
    if statement.is_none() {
        missing("problem_statement", ": the task's prompt");
    }
    if script.is_none() {
        missing(
            "eval_script",
            ": rows from SWE-bench before 5.0 do not carry their evaluation script; use the dataset's 5.0 release (or a task repo), which does",
        );
    }
    let repo = string(row, "repo").unwrap_or_default();
    let parser = string(row, "log_parser").or_else(|| {
        PARSER_OF_REPO
            .iter()
            .find(|(r, _)| *r == repo)
            .map(|(_, p)| p.to_string())
    });
    if parser.is_none() {
        missing(
            "log_parser",
            " and the repository is not one SWE-bench's Python parsers are known for",
        );
    }
    let (f2p, p2p) = match (tests(row, "FAIL_TO_PASS"), tests(row, "PASS_TO_PASS")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            read.problems
                .push(problem(file, line, format!("{}{e}", who(row))));
            (Vec::new(), Vec::new())
        }
    };
    let eval_type = match string(row, "eval_type").as_deref() {
        None => {
            if FAIL_ONLY_REPOS.contains(&repo.as_str()) {
                SwebenchEvalType::FailOnly
            } else {
                SwebenchEvalType::PassAndFail
            }
        }
        Some(t) if t.eq_ignore_ascii_case("pass_and_fail") => SwebenchEvalType::PassAndFail,
        Some(t) if t.eq_ignore_ascii_case("fail_only") => SwebenchEvalType::FailOnly,
        Some(t) => {
            read.problems.push(problem(
                file,
                line,
                format!(
                    "{}`eval_type` \"{t}\" is neither PASS_AND_FAIL nor FAIL_ONLY",
                    who(row)
                ),
            ));
            SwebenchEvalType::PassAndFail
        }
    };
    if read.problems.len() > before {
        return;
    }
    let (Some(id), Some(statement), Some(script), Some(parser)) = (id, statement, script, parser)
    else {
        return;
    };
    let Some(id) = task_id(&id, file, line, read) else {
        return;
    };
    let namespace = suite.image_namespace.as_deref().unwrap_or("swebench");
    let environment = match string(row, "dockerfile_path") {
        // A task repo's folder: its Dockerfile, with the folder as the context.
        Some(dockerfile) => EnvironmentFields {
            dockerfile: Some(dockerfile.clone()),
            context: Path::new(&dockerfile).parent().map(abs),
            workdir: Some(TESTBED.into()),
            ..Default::default()
        },
        None => EnvironmentFields {
            image: Some(string(row, "image").unwrap_or_else(|| expected_image(&id, namespace))),
            workdir: Some(TESTBED.into()),
            ..Default::default()
        },
    };
    let fields = TaskFields {
        id: Some(id),
        prompt: Some(statement),
        environment: Some(environment),
        verifier: Some(VerifierFields::Swebench(SwebenchVerifierFields {
            eval_script: script,
            fail_to_pass: f2p,
            pass_to_pass: p2p,
            log_parser: parser,
            eval_type: Some(eval_type),
            timeout: None,
        })),
        solution: string(row, "patch").map(|p| SolutionFields {
            patch: Some(p),
            dir: None,
        }),
        limits: None::<LimitFields>,
        ..Default::default()
    };
    read.tasks.push(SuiteTask {
        fields,
        file: file.to_path_buf(),
        line,
    });
}

/// "instance X: " when the row has an id, for messages about it.
fn who(row: &Value) -> String {
    string(row, "instance_id")
        .map(|id| format!("instance {id}: "))
        .unwrap_or_default()
}

/// A SWE-bench 5 task repo: the tasks it publishes (its `sweb.yaml` datasets and
/// splits; every task folder when it has no sweb.yaml).
fn read_task_repo(root: &Path, suite: &SuiteFields, read: &mut Read) {
    let tasks = root.join("tasks");
    if !tasks.is_dir() {
        read.problems.push(problem(
            root,
            None,
            "a SWE-bench task repo has a tasks/ folder (tasks/<instance_id>/task.yaml); for a dataset give the .jsonl file",
        ));
        return;
    }
    let published = published(root, read);
    let mut dirs: Vec<_> = match std::fs::read_dir(&tasks) {
        Ok(d) => d
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join("task.yaml").is_file())
            .collect(),
        Err(e) => {
            read.problems
                .push(problem(&tasks, None, format!("cannot list: {e}")));
            return;
        }
    };
    dirs.sort();
    for dir in dirs {
        let file = dir.join("task.yaml");
        let Some(body) = text(&file, read) else {
            continue;
        };
        let meta: Value = match serde_yaml::from_str::<serde_yaml::Value>(&body)
            .map_err(|e| e.to_string())
            .and_then(|v| serde_json::to_value(v).map_err(|e| e.to_string()))
        {
            Ok(v) if v.is_object() => v,
            Ok(_) => {
                read.problems
                    .push(problem(&file, None, "not a map of task fields"));
                continue;
            }
            Err(e) => {
                read.problems
                    .push(problem(&file, None, format!("not YAML: {e}")));
                continue;
            }
        };
        if let Some((splits, datasets)) = &published {
            let split = string(&meta, "split").unwrap_or_default();
            let in_sets = meta
                .get("datasets")
                .and_then(Value::as_array)
                .is_some_and(|a| {
                    a.iter()
                        .any(|d| d.as_str().is_some_and(|d| datasets.iter().any(|x| x == d)))
                });
            if !splits.contains(&split) || !in_sets {
                continue;
            }
        }
        let mut row = meta;
        let Some(obj) = row.as_object_mut() else {
            continue;
        };
        let read_file = |name: &str, read: &mut Read| -> Option<String> {
            let p = dir.join(name);
            if p.is_file() {
                text(&p, read)
            } else {
                None
            }
        };
        for (column, name) in [
            ("patch", "gold.patch"),
            ("test_patch", "test.patch"),
            ("eval_script", "eval.sh"),
            ("problem_statement", "problem_statement.md"),
        ] {
            match read_file(name, read) {
                Some(t) => {
                    obj.insert(column.into(), Value::String(t));
                }
                None if column == "test_patch" || column == "patch" => {}
                None => read.problems.push(problem(
                    &dir.join(name),
                    None,
                    format!("the task folder has no {name}"),
                )),
            }
        }
        match read_file("tests.json", read).map(|t| serde_json::from_str::<Value>(&t)) {
            Some(Ok(Value::Object(t))) => {
                for (k, v) in t {
                    obj.insert(k, v);
                }
            }
            Some(_) => read.problems.push(problem(
                &dir.join("tests.json"),
                None,
                "not a JSON object with FAIL_TO_PASS and PASS_TO_PASS",
            )),
            None => read.problems.push(problem(
                &dir.join("tests.json"),
                None,
                "the task folder has no tests.json",
            )),
        }
        obj.entry("instance_id").or_insert_with(|| {
            Value::String(dir.file_name().unwrap_or_default().to_string_lossy().into())
        });
        if dir.join("Dockerfile").is_file() {
            obj.insert(
                "dockerfile_path".into(),
                Value::String(abs(&dir.join("Dockerfile"))),
            );
        }
        row_task(&row, &file, None, suite, read);
    }
}

/// The splits and datasets a task repo's sweb.yaml publishes, or None without one.
fn published(root: &Path, read: &mut Read) -> Option<(Vec<String>, Vec<String>)> {
    let file = root.join("sweb.yaml");
    let body = std::fs::read_to_string(&file).ok()?;
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(default)]
        datasets: Vec<String>,
        #[serde(default)]
        splits: Vec<String>,
    }
    match serde_yaml::from_str::<Config>(&body) {
        Ok(c) if !c.datasets.is_empty() => {
            let splits = if c.splits.is_empty() {
                vec!["test".to_string()]
            } else {
                c.splits
            };
            Some((splits, c.datasets))
        }
        Ok(_) => {
            read.problems
                .push(problem(&file, None, "does not name any datasets"));
            None
        }
        Err(e) => {
            read.problems
                .push(problem(&file, None, format!("not a sweb.yaml: {e}")));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_are_the_harness_own() {
        assert_eq!(
            expected_image("django__django-11099", "swebench"),
            "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
        );
        assert_eq!(
            expected_image("Org__Repo-1", "localhost/x"),
            "localhost/x/sweb.eval.x86_64.org_1776_repo-1:latest"
        );
    }

    #[test]
    fn a_row_before_5_0_is_refused_by_name() {
        let row = serde_json::json!({"instance_id": "a__b-1", "problem_statement": "p",
            "repo": "psf/requests", "FAIL_TO_PASS": "[\"t\"]", "PASS_TO_PASS": "[]"});
        let suite: SuiteFields = serde_yaml::from_str("{format: swebench, path: x.jsonl}").unwrap();
        let mut read = Read::default();
        row_task(&row, Path::new("x.jsonl"), Some(3), &suite, &mut read);
        assert!(read.tasks.is_empty());
        assert_eq!(read.problems.len(), 1);
        assert_eq!(read.problems[0].line, Some(3));
        assert!(read.problems[0]
            .message
            .contains("instance a__b-1: no `eval_script`"));
    }

    #[test]
    fn string_encoded_test_lists_are_read() {
        let row = serde_json::json!({"instance_id": "a__b-1", "problem_statement": "p",
            "repo": "psf/requests", "eval_script": "x", "patch": "diff",
            "FAIL_TO_PASS": "[\"t1\", \"t2\"]", "PASS_TO_PASS": ["t3"]});
        let suite: SuiteFields =
            serde_yaml::from_str("{format: swebench, path: x.jsonl, image_namespace: ns}").unwrap();
        let mut read = Read::default();
        row_task(&row, Path::new("x.jsonl"), Some(1), &suite, &mut read);
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        let t = &read.tasks[0].fields;
        let Some(VerifierFields::Swebench(v)) = &t.verifier else {
            panic!("no verifier")
        };
        assert_eq!(v.fail_to_pass, ["t1", "t2"]);
        assert_eq!(v.pass_to_pass, ["t3"]);
        assert_eq!(v.log_parser, "parse_log_pytest_options");
        assert_eq!(
            t.environment.as_ref().and_then(|e| e.image.as_deref()),
            Some("ns/sweb.eval.x86_64.a_1776_b-1:latest")
        );
    }
}
