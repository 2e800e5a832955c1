//! The run folder's format version: run.json says which format the folder is in; a
//! folder of a newer format is refused by every command that reads it (naming the file
//! and saying to use a newer agentbatch), and one of an older format (today's folders
//! before the version, which have none) is read as before.

use std::process::Output;

use serde_json::Value;

use crate::common::{read_csv, Case};

const JOB: &str = "name: fmt\ndefaults:\n  model: claude-sonnet-4-5\n  sim: { turns: [ { content: [ { text: done } ] } ] }\ntasks:\n  - { id: a, prompt: go }\n  - { id: b, prompt: go }\n";

fn ok(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run(case: &Case, id: &str) {
    ok(&case.agentbatch(&["run", "job.yaml", "--run-id", id, "--quiet"]));
}

/// Sets run.json's `format_version` (None: removes it, as in a folder from before it).
fn set_format(case: &Case, run: &str, version: Option<u64>) {
    let path = case.path(&format!("reports/{run}/run.json"));
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    match version {
        Some(n) => v["format_version"] = n.into(),
        None => {
            v.as_object_mut().unwrap().remove("format_version");
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

fn refused(out: &Output, file: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(file)
            && err.contains("run folder format 7")
            && err.contains("use a newer agentbatch"),
        "{err}"
    );
}

#[test]
fn run_json_carries_the_folder_format_first() {
    let case = Case::new();
    case.write("job.yaml", JOB);
    run(&case, "r");
    let text = std::fs::read_to_string(case.path("reports/r/run.json")).unwrap();
    assert!(text.starts_with("{\n  \"format_version\": 1,\n"), "{text}");
    // results.csv's header is what it was: the version is not a column.
    let header = std::fs::read_to_string(case.path("reports/r/results.csv")).unwrap();
    assert!(header.starts_with("run_id,task_id,provider,model,outcome,"));
    assert!(!header.lines().next().unwrap().contains("format"));
}

#[test]
fn a_folder_of_a_newer_format_is_refused_by_report_compare_and_resume() {
    let case = Case::new();
    case.write("job.yaml", JOB);
    run(&case, "r");
    run(&case, "s");
    set_format(&case, "r", Some(7));
    let before = std::fs::read(case.path("reports/r/results.csv")).unwrap();

    refused(&case.agentbatch(&["report", "reports/r"]), "results.csv");
    refused(
        &case.agentbatch(&["compare", "reports/r", "reports/s", "--out", "cmp"]),
        "reports/r/results.csv",
    );
    refused(
        &case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]),
        "reports/r/run.json",
    );
    // Nothing of the folder was changed by the commands that refused it.
    assert_eq!(
        std::fs::read(case.path("reports/r/results.csv")).unwrap(),
        before
    );
    let text = std::fs::read_to_string(case.path("reports/r/run.json")).unwrap();
    assert!(text.contains("\"format_version\": 7"), "{text}");
}

#[test]
fn a_folder_from_before_the_version_is_read_and_a_resume_writes_the_version() {
    let case = Case::new();
    case.write("job.yaml", JOB);
    run(&case, "r");
    run(&case, "s");
    set_format(&case, "r", None);
    assert!(!std::fs::read_to_string(case.path("reports/r/run.json"))
        .unwrap()
        .contains("format_version"));
    ok(&case.agentbatch(&["report", "reports/r"]));
    ok(&case.agentbatch(&["compare", "reports/r", "reports/s", "--out", "cmp"]));
    ok(&case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]));
    assert_eq!(read_csv(&case.path("reports/r/results.csv")).len(), 2);
    let text = std::fs::read_to_string(case.path("reports/r/run.json")).unwrap();
    assert!(text.contains("\"format_version\": 1"), "{text}");
}

#[test]
fn collect_refuses_a_folder_a_newer_collect_wrote() {
    let url = crate::postgres::fresh_database("fmt");
    let case = Case::new();
    case.write("job.yaml", JOB);
    ok(&case.agentbatch(&["run", "job.yaml", "--queue", &url, "--run-id", "q"]));
    ok(&case.agentbatch(&["worker", &url, "--run-id", "q", "--quiet"]));
    ok(&case.agentbatch(&["collect", &url, "--run-id", "q"]));
    set_format(&case, "q", None);
    // An older folder is written again.
    ok(&case.agentbatch(&["collect", &url, "--run-id", "q"]));
    set_format(&case, "q", Some(7));
    let before = std::fs::read(case.path("reports/q/results.csv")).unwrap();
    refused(
        &case.agentbatch(&["collect", &url, "--run-id", "q"]),
        "reports/q/run.json",
    );
    assert_eq!(
        std::fs::read(case.path("reports/q/results.csv")).unwrap(),
        before
    );
}
