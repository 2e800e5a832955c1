//! `agentbatch export`: real runs against the simulator, exported through the binary,
//! then read by the official code of the tools the formats are for: SWE-bench
//! predictions by the evaluation harness's own reader and filter
//! (tests/python/validate_predictions.py), ATIF trajectories by Harbor's own Pydantic
//! models (tests/python/validate_atif.py). Hostile cases: a matrix with epochs, task
//! ids with dots, tasks without a patch, a tool call cut off by the time limit and one
//! never run, a task that made no model request, and a run killed with SIGKILL.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use crate::common::{bin, calc_fixture, read_csv, signal, wait_until, Case};

/// The tests' Python, with pydantic, harbor and swebench (tests/run.sh makes it).
fn python() -> String {
    std::env::var("AGENTBATCH_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("AGENTBATCH_TEST_PYTHON is not set: the export tests validate with the official harbor and swebench packages from tests/python/.venv; run them through ./tests/run.sh (e.g. ./tests/run.sh --test integration exports)")
    })
}

/// Runs one of tests/python's drivers; its stdout lines as JSON, or the test fails
/// with what it said.
fn validate(script: &str, args: &[String]) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = std::process::Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .expect("the tests' Python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} refused the export:\n{stderr}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{script} printed {l}: {e}")))
        .collect()
}

/// `agentbatch export ARGS...` in the case's folder: exit code, stdout, stderr.
fn export(case: &Case, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["export"];
    all.extend_from_slice(args);
    let out = case.agentbatch(&all);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

const EDIT: &str = "{ content: [ { tool_use: { name: edit_file, input: { path: calc.py, old_string: 'a - b', new_string: 'a + b' } } } ] }";

#[tokio::test]
async fn predictions_of_a_matrix_with_epochs_are_what_the_swebench_harness_reads() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let task = |id: &str, repo: bool, turns: &str| {
        let repo = if repo {
            "    repo: calc\n    toolset: c\n    check: python3 -m unittest -q\n"
        } else {
            "    tools: [get_time]\n"
        };
        format!("  - id: {id}\n    prompt: p\n{repo}    sim: {{ turns: [ {turns} ] }}\n")
    };
    let yaml = format!(
        "name: preds\nconcurrency: 4\ntoolsets:\n  c: {{ tools: [edit_file] }}\nmatrix:\n  model: [claude-sonnet-4-5, claude-haiku-4-5]\nepochs: 2\ndefaults:\n  max_tokens: 1024\ntasks:\n{}{}{}",
        task("calc.fix-1.2", true, &format!("{EDIT}, {{ content: [ {{ text: done }} ] }}")),
        task("calc.untouched", true, "{ content: [ { text: nothing to do } ] }"),
        task("no-repo", false, "{ content: [ { text: hi } ] }"),
    );
    let ran = case.run(&yaml).await;
    let rows = ran.rows();
    assert_eq!(rows.len(), 3 * 2 * 2, "{rows:#?}");
    let dir = ran.dir.to_str().unwrap().to_string();

    // Default: one file per variant beside exports/predictions.jsonl, epoch 1.
    let (code, stdout, stderr) = export(&case, &["swebench-predictions", &dir]);
    assert_eq!(code, Some(0), "{stderr}");
    let exports = ran.dir.join("exports");
    let files: Vec<PathBuf> = ["claude-haiku-4-5", "claude-sonnet-4-5"]
        .iter()
        .map(|slug| exports.join(format!("predictions.{slug}.jsonl")))
        .collect();
    for f in &files {
        assert!(
            stdout.contains(&format!("{}: 2 predictions", f.display())),
            "{stdout}"
        );
    }
    assert!(!exports.join("predictions.jsonl").exists());
    assert!(
        stderr.contains("left out 2 task runs without a patch")
            && stderr.contains("no-repo (model=claude-haiku-4-5)"),
        "{stderr}"
    );
    let row_of = |task: &str, model: &str, epoch: &str| -> HashMap<String, String> {
        rows.iter()
            .find(|r| r["task_id"] == task && r["matrix.model"] == model && r["epoch"] == epoch)
            .unwrap_or_else(|| panic!("no row {task} {model} {epoch}"))
            .clone()
    };
    let patch_of = |row: &HashMap<String, String>| {
        std::fs::read_to_string(ran.dir.join(&row["patch"])).expect("the row's patch")
    };
    for (file, model) in files.iter().zip(["claude-haiku-4-5", "claude-sonnet-4-5"]) {
        let lines = json_lines(file);
        let ids: Vec<&str> = lines
            .iter()
            .map(|l| l["instance_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["calc.fix-1.2", "calc.untouched"],
            "as written, sorted"
        );
        for line in &lines {
            let keys: Vec<&String> = line.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["instance_id", "model_name_or_path", "model_patch"]);
            assert_eq!(line["model_name_or_path"], format!("{model}+model={model}"));
            let row = row_of(line["instance_id"].as_str().unwrap(), model, "1");
            assert_eq!(line["model_patch"], patch_of(&row), "epoch 1's patch");
        }
        assert!(lines[0]["model_patch"]
            .as_str()
            .unwrap()
            .contains("+    return a + b"));
        assert_eq!(lines[1]["model_patch"], "", "no change: an empty patch");
    }
    let instances = "--instances=calc.fix-1.2,calc.untouched".to_string();
    let mut args = vec![instances.clone()];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let read = validate("validate_predictions.py", &args);
    assert_eq!(read.len(), 2);
    for r in &read {
        assert_eq!(
            r["predictions"],
            serde_json::json!(["calc.fix-1.2", "calc.untouched"])
        );
        assert_eq!(
            r["evaluated"],
            serde_json::json!(["calc.fix-1.2"]),
            "the harness skips an empty patch"
        );
    }

    // One variant, epoch 2, a name of the user's, a file of the user's.
    let out = case.path("elsewhere/mine.jsonl");
    let (code, stdout, stderr) = export(
        &case,
        &[
            "swebench-predictions",
            &dir,
            "--epoch",
            "2",
            "--variant",
            "model=claude-haiku-4-5",
            "--model-name",
            "my-agent",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("2 predictions (variant model=claude-haiku-4-5), epoch 2"),
        "{stdout}"
    );
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["model_name_or_path"], "my-agent");
    let e2 = row_of("calc.fix-1.2", "claude-haiku-4-5", "2");
    assert!(e2["patch"].ends_with("--e2.diff"), "{e2:?}");
    assert_eq!(lines[0]["model_patch"], patch_of(&e2));
    validate(
        "validate_predictions.py",
        &[instances, out.display().to_string()],
    );

    // What the run does not have is refused, naming what it has; nothing is written.
    let (code, _, stderr) = export(&case, &["swebench-predictions", &dir, "--epoch", "3"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("no task run of epoch 3") && stderr.contains("its epochs are 1, 2"),
        "{stderr}"
    );
    let (code, _, stderr) = export(&case, &["swebench-predictions", &dir, "--variant", "nope"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("model=claude-sonnet-4-5"), "{stderr}");
    let (code, _, stderr) = export(&case, &["swebench-predictions", &dir, "--out", "p.json"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("*.jsonl"), "{stderr}");
    let (code, _, stderr) = export(&case, &["swebench-predictions", "no/such/run"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("results.csv"), "{stderr}");
}

/// The agent steps of a trajectory.
fn agent_steps(t: &Value) -> Vec<&Value> {
    t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "agent")
        .collect()
}

#[tokio::test]
async fn atif_trajectories_of_every_protocol_validate_with_harbors_models() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let yaml = "name: atif\nconcurrency: 9\nproviders:\n  sim-chat: { protocol: openai-chat, simulator: true }\n  sim-responses: { protocol: openai-responses, simulator: true }\ntoolsets:\n  c: { tools: [bash, get_time], bash: { timeout: 10m } }\nmatrix:\n  provider: [sim, sim-chat, sim-responses]\ndefaults:\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  system: Be brief.\ntasks:\n  - id: two.calls.v1\n    prompt: what time is it?\n    tools: [get_time]\n    sim: { turns: [ { content: [ { text: checking }, { tool_use: { name: get_time, input: { timezone: UTC } } }, { tool_use: { name: get_time, input: { timezone: '+02:00' } } } ] }, { content: [ { text: done } ] } ] }\n  - id: cut\n    prompt: run it\n    repo: calc\n    toolset: c\n    limits: { time_limit: 3s }\n    sim: { turns: [ { content: [ { tool_use: { name: bash, input: { command: sleep 30 } } }, { tool_use: { name: get_time, input: {} } } ] }, { content: [ { text: never } ] } ] }\n  - id: no-turns\n    prompt: never sent\n    repo: calc\n    toolset: c\n    setup: exit 3\n    sim: { turns: [ { content: [ { text: never } ] } ] }\n";
    let ran = case.run(yaml).await;
    let rows = ran.rows();
    assert_eq!(rows.len(), 9, "{rows:#?}");
    let (code, stdout, stderr) = export(&case, &["atif", ran.dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let out = ran.dir.join("exports/atif");
    assert!(
        stdout.contains(&format!("{}: 9 ATIF trajectories", out.display())),
        "{stdout}"
    );
    let files: Vec<String> = rows
        .iter()
        .map(|r| {
            let key = r["transcript"]
                .strip_prefix("transcripts/")
                .and_then(|k| k.strip_suffix(".jsonl"))
                .unwrap();
            out.join(format!("{key}.json")).display().to_string()
        })
        .collect();
    let read = validate("validate_atif.py", &files);
    assert_eq!(read.len(), 9);

    for (row, file) in rows.iter().zip(&files) {
        let t = json_file(Path::new(file));
        let key = file.rsplit('/').next().unwrap().trim_end_matches(".json");
        let protocol = row["protocol"].as_str();
        assert_eq!(t["schema_version"], "ATIF-v1.7");
        assert_eq!(t["session_id"], format!("r1/{key}"));
        assert_eq!(t["agent"]["name"], "agentbatch");
        assert_eq!(t["agent"]["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(t["agent"]["model_name"], "claude-sonnet-4-5");
        assert_eq!(t["extra"]["task_id"], row["task_id"]);
        assert_eq!(t["extra"]["variant"], row["variant"]);
        assert_eq!(t["extra"]["stop_reason"], row["stop_reason"]);
        let steps = t["steps"].as_array().unwrap();
        assert_eq!(t["final_metrics"]["total_steps"], steps.len());
        let sources: Vec<&str> = steps
            .iter()
            .map(|s| s["source"].as_str().unwrap())
            .collect();
        let events = ran.events(key, "tool_result");
        match row["task_id"].as_str() {
            "two.calls.v1" => {
                assert_eq!(sources, ["system", "user", "agent", "agent"], "{protocol}");
                assert_eq!(steps[0]["message"], "Be brief.");
                assert_eq!(steps[1]["message"], "what time is it?");
                let turn = agent_steps(&t)[0];
                assert_eq!(turn["message"], "checking", "{protocol}");
                let calls = turn["tool_calls"].as_array().unwrap();
                let results = turn["observation"]["results"].as_array().unwrap();
                assert_eq!((calls.len(), results.len(), events.len()), (2, 2, 2));
                for ((call, result), event) in calls.iter().zip(results).zip(&events) {
                    assert_eq!(call["tool_call_id"], event["id"], "{protocol}");
                    assert_eq!(call["function_name"], "get_time");
                    assert_eq!(result["source_call_id"], event["id"]);
                    assert_eq!(result["content"], event["content"]);
                }
                assert_eq!(
                    calls[1]["arguments"],
                    serde_json::json!({"timezone": "+02:00"})
                );
                // Per-answer figures add up to the row's totals.
                let settled: f64 = agent_steps(&t)
                    .iter()
                    .map(|s| s["metrics"]["cost_usd"].as_f64().unwrap())
                    .sum();
                let cost: f64 = row["cost_usd"].parse().unwrap();
                assert!((settled - cost).abs() < 1e-9, "{settled} vs {cost}");
                assert!(
                    (t["final_metrics"]["total_cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12
                );
                let prompt: u64 = agent_steps(&t)
                    .iter()
                    .map(|s| s["metrics"]["prompt_tokens"].as_u64().unwrap())
                    .sum();
                let whole: u64 = ["input_tokens", "cache_read_tokens", "cache_write_tokens"]
                    .iter()
                    .map(|c| row[*c].parse::<u64>().unwrap())
                    .sum();
                assert_eq!(
                    (prompt, t["final_metrics"]["total_prompt_tokens"].as_u64()),
                    (whole, Some(whole))
                );
                assert!(steps.iter().all(|s| s["timestamp"].is_string()));
                assert!(t.get("notes").is_none(), "{t}");
            }
            "cut" => {
                assert_eq!(row["stop_reason"], "time_limit", "{row:?}");
                assert_eq!(sources, ["system", "user", "agent"], "{protocol}");
                let turn = agent_steps(&t)[0];
                let calls = turn["tool_calls"].as_array().unwrap();
                assert_eq!(calls.len(), 2, "both calls of the answer, run or not");
                let results = turn["observation"]["results"].as_array().unwrap();
                assert_eq!(results.len(), 1, "only the call that started has a result");
                assert_eq!(results[0]["source_call_id"], calls[0]["tool_call_id"]);
                assert!(results[0].get("content").is_none(), "cut off: no content");
                assert!(
                    results[0]["extra"]["interrupted"]
                        .as_str()
                        .unwrap()
                        .contains("time_limit of 3s"),
                    "{results:?}"
                );
                let notes = t["notes"].as_str().unwrap();
                assert!(
                    notes.contains("1 tool call has no result") && notes.contains("time_limit"),
                    "{notes}"
                );
            }
            "no-turns" => {
                assert_eq!(row["stop_reason"], "tool_setup_error");
                assert_eq!(sources, ["system", "user"], "the plan's prompt");
                assert_eq!(steps[1]["message"], "never sent");
                assert!(
                    steps.iter().all(|s| s.get("timestamp").is_none()),
                    "never sent: no time"
                );
                assert!(t["notes"].as_str().unwrap().contains("no model request"));
            }
            other => panic!("task {other}"),
        }
    }
}

#[test]
fn a_killed_run_exports_what_it_wrote() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    case.write(
        "job.yaml",
        &format!("name: kill\nconcurrency: 2\ntoolsets:\n  c: {{ tools: [bash, edit_file], bash: {{ timeout: 10m }} }}\ndefaults:\n  model: claude-sonnet-4-5\n  toolset: c\n  repo: calc\n  check: python3 -m unittest -q\ntasks:\n  - id: quick.1\n    prompt: fix it\n    sim: {{ turns: [ {EDIT}, {{ content: [ {{ text: done }} ] }} ] }}\n  - id: slow\n    prompt: wait\n    sim: {{ turns: [ {{ content: [ {{ text: waiting }}, {{ tool_use: {{ name: bash, input: {{ command: sleep 120 }} }} }} ] }}, {{ content: [ {{ text: never }} ] }} ] }}\n"),
    );
    let mut child = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let dir = case.path("reports/r");
    let (results, slow) = (dir.join("results.csv"), dir.join("transcripts/slow.jsonl"));
    wait_until(
        "quick.1's row and slow's call",
        Duration::from_secs(60),
        || {
            std::fs::read_to_string(&results).is_ok_and(|t| t.contains("quick.1"))
                && std::fs::read_to_string(&slow).is_ok_and(|t| t.contains("\"tool_call\""))
        },
    );
    signal(child.id(), "KILL");
    child.wait().unwrap();
    assert_eq!(read_csv(&results).len(), 1, "slow was cut off with the run");
    let dir_s = dir.to_str().unwrap();

    let (code, stdout, stderr) = export(&case, &["swebench-predictions", dir_s]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains(": 1 prediction, epoch 1"), "{stdout}");
    assert!(stderr.contains("no prediction for slow"), "{stderr}");
    let file = dir.join("exports/predictions.jsonl");
    let lines = json_lines(&file);
    assert_eq!(lines[0]["instance_id"], "quick.1");
    assert_eq!(lines[0]["model_name_or_path"], "claude-sonnet-4-5");
    validate(
        "validate_predictions.py",
        &[
            "--instances=quick.1,slow".into(),
            file.display().to_string(),
        ],
    );

    let out = case.path("atif-out");
    let (code, _, stderr) = export(&case, &["atif", dir_s, "--out", out.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("1 task run has no row") && stderr.contains("slow"),
        "{stderr}"
    );
    let files = [out.join("quick.1.json"), out.join("slow.json")];
    validate(
        "validate_atif.py",
        &files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>(),
    );
    let t = json_file(&files[1]);
    let turn = agent_steps(&t)[0];
    assert_eq!(turn["message"], "waiting");
    assert_eq!(turn["tool_calls"][0]["arguments"]["command"], "sleep 120");
    assert!(
        turn.get("observation").is_none(),
        "killed while the call ran: no result"
    );
    assert!(t["notes"].as_str().unwrap().contains("killed"), "{t}");
    assert_eq!(
        t["final_metrics"],
        serde_json::json!({"total_steps": 2}),
        "no totals were recorded"
    );
    assert!(t["extra"].get("outcome").is_none());
    assert_eq!(json_file(&files[0])["extra"]["outcome"], "pass");
}
