//! `limits.max_repeats` over real HTTP: a model that repeats the same calls with the
//! same results is warned in a tool result, then stopped with `stuck`; a cycle is
//! caught the same way; `off` lets it run on; a call whose result changes is no repeat.

use serde_json::Value;

use crate::common::{bin, calc_fixture, num, Case, Ran};

const NOTE: &str = "[agentbatch] You have made this exact call (read_file) 3 times in a row";

/// One repo task over the calc fixture with the given limits and script turns (YAML
/// list items, indented 8), repeating its last turn forever.
fn job(limits: &str, turns: &str) -> String {
    format!(
        "name: repeats\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  toolset: coding\n  check: python3 -m unittest -q\n  check_timeout: 1m\n  limits: {{ {limits} }}\ntasks:\n  - id: t\n    repo: calc\n    prompt: fix it\n    sim:\n      repeat_last: true\n      turns:\n{turns}"
    )
}

const READ: &str =
    "        - content: [ { tool_use: { name: read_file, input: { path: calc.py } } } ]\n";

/// The text of every tool result a request sent (Anthropic's shape).
fn sent_results(body: &Value) -> Vec<String> {
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    last["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn event_names(ran: &Ran) -> Vec<String> {
    ran.transcript("t")
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("").to_string())
        .collect()
}

fn audit_is_clean(ran: &Ran) {
    let out = bin()
        .arg("audit")
        .arg(ran.dir.join("transcripts/t.jsonl"))
        .output()
        .expect("audit runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn the_same_call_with_the_same_result_is_warned_then_stopped_as_stuck() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let ran = case.run(&job("max_turns: 10", READ)).await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "stuck", "{row:?}");
    assert_eq!(
        row["stop_detail"],
        "made the same call (read_file) with the same result 4 times in a row, after a warning at 3 (limits.max_repeats)"
    );
    // An agent outcome: the check still decides, as after max_turns.
    assert_eq!(row["outcome"], "fail");
    assert_eq!(row["check_exit_code"], "1");
    assert_eq!(num(&row, "turns"), 4);
    let requests = ran.requests("t");
    assert_eq!(requests.len(), 4, "the warning turn, then no more");
    for (i, r) in requests.iter().enumerate() {
        let warned = sent_results(&r.body).iter().any(|c| c.contains(NOTE));
        assert_eq!(
            warned,
            i == 3,
            "request {}: {:?}",
            i + 1,
            sent_results(&r.body)
        );
    }
    // The note follows the file's text in the same result, under the call's id.
    let results = sent_results(&requests[3].body);
    assert_eq!(results.len(), 1);
    assert!(results[0].contains("return a - b"), "{}", results[0]);
    assert!(
        results[0].contains("the task will be stopped"),
        "{}",
        results[0]
    );
    let names = event_names(&ran);
    let at = |n: &str| names.iter().position(|e| e == n).unwrap_or(usize::MAX);
    let warning = ran.events("t", "repeat_warning");
    assert_eq!(warning.len(), 1);
    assert_eq!(warning[0]["turn"], 3);
    assert_eq!(warning[0]["times"], 3);
    assert_eq!(warning[0]["tools"], serde_json::json!(["read_file"]));
    let stop = ran.events("t", "repeat_stop");
    assert_eq!(
        (stop[0]["turn"].as_u64(), stop[0]["times"].as_u64()),
        (Some(4), Some(4))
    );
    assert!(at("repeat_warning") < at("repeat_stop"));
    assert!(at("repeat_stop") < at("stop") && at("stop") < at("check"));
    assert_eq!(ran.events("t", "stop")[0]["stop_reason"], "stuck");
    audit_is_clean(&ran);
}

#[tokio::test]
async fn a_cycle_of_a_no_op_edit_and_a_read_is_stuck() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let edit = "        - content: [ { tool_use: { name: edit_file, input: { path: calc.py, old_string: 'a - b', new_string: 'a - b' } } } ]\n";
    let read =
        "        - content: [ { tool_use: { name: read_file, input: { path: calc.py } } } ]\n";
    let turns = [edit, read].concat().repeat(3) + edit;
    let ran = case.run(&job("max_turns: 10", &turns)).await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "stuck", "{row:?}");
    assert!(
        row["stop_detail"].contains("2-turn cycle") && row["stop_detail"].contains("for 7 turns"),
        "{}",
        row["stop_detail"]
    );
    let requests = ran.requests("t");
    assert_eq!(requests.len(), 7);
    let warned: Vec<usize> = requests
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            sent_results(&r.body)
                .iter()
                .any(|c| c.contains("the same cycle of 2 turns"))
        })
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(warned, [7], "the warning went out with the 7th request");
    assert_eq!(ran.events("t", "repeat_warning")[0]["period"], 2);
    audit_is_clean(&ran);
}

#[tokio::test]
async fn max_repeats_off_runs_into_max_turns() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let ran = case
        .run(&job("max_turns: 10, max_repeats: off", READ))
        .await;
    assert_eq!(ran.stop("t"), "max_turns");
    assert_eq!(ran.requests("t").len(), 10);
    assert!(ran.events("t", "repeat_warning").is_empty());
    assert_eq!(ran.transcript("t")[0]["limits"]["max_repeats"], "off");
}

#[tokio::test]
async fn the_same_call_with_a_changing_result_is_not_stuck() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let count = "        - content: [ { tool_use: { name: bash, input: { command: 'echo x >> seen.txt; wc -l < seen.txt' } } } ]\n";
    let ran = case.run(&job("max_turns: 6, max_repeats: 2", count)).await;
    assert_eq!(ran.stop("t"), "max_turns", "{:?}", ran.row("t"));
    assert_eq!(ran.requests("t").len(), 6);
    assert!(ran.events("t", "repeat_warning").is_empty());
}

#[tokio::test]
async fn parallel_calls_repeated_together_are_one_step_and_the_note_goes_on_the_last_result() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let both = "        - content:\n            - tool_use: { name: read_file, input: { path: calc.py } }\n            - tool_use: { name: read_file, input: { path: test_calc.py } }\n";
    let ran = case.run(&job("max_turns: 10", both)).await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "stuck", "{row:?}");
    assert!(
        row["stop_detail"]
            .contains("same calls (read_file + read_file) with the same results 4 times"),
        "{}",
        row["stop_detail"]
    );
    assert_eq!(num(&row, "tool_calls"), 8, "two calls a turn, four turns");
    let requests = ran.requests("t");
    assert_eq!(requests.len(), 4);
    let results = sent_results(&requests[3].body);
    assert_eq!(results.len(), 2, "every call still answered under its id");
    assert!(!results[0].contains("[agentbatch]"), "{}", results[0]);
    assert!(
        results[1].contains("from calc import add")
            && results[1]
                .contains("You have made these exact calls (read_file + read_file) 3 times"),
        "{}",
        results[1]
    );
    audit_is_clean(&ran);
}

/// The tool results an OpenAI request sent: Responses `function_call_output` items,
/// Chat Completions `tool` messages.
fn openai_results(body: &Value) -> Vec<String> {
    let items = body["input"]
        .as_array()
        .or_else(|| body["messages"].as_array())
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|i| match (i["type"].as_str(), i["role"].as_str()) {
            (Some("function_call_output"), _) => Some(i["output"].clone()),
            (_, Some("tool")) => Some(i["content"].clone()),
            _ => None,
        })
        .map(|v| match v {
            Value::String(s) => s,
            other => other.to_string(),
        })
        .collect()
}

#[tokio::test]
async fn openai_protocols_are_warned_and_stopped_as_stuck_too() {
    for protocol in ["openai-responses", "openai-chat"] {
        let case = Case::new();
        calc_fixture(&case, "calc");
        let yaml = job("max_turns: 10", READ)
            .replace(
                "defaults:\n  provider: sim\n  model: claude-sonnet-4-5\n",
                &format!(
                    "providers:\n  o: {{ protocol: {protocol}, simulator: true }}\ndefaults:\n  provider: o\n  model: gpt-5.4\n"
                ),
            );
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "stuck", "{protocol}: {row:?}");
        assert_eq!(row["protocol"], protocol);
        let requests = ran.requests("t");
        assert_eq!(requests.len(), 4, "{protocol}");
        let last = openai_results(&requests[3].body);
        assert!(
            last.last().is_some_and(|r| r.contains(NOTE)),
            "{protocol}: the warning rides on the newest result: {last:?}"
        );
        assert!(
            !openai_results(&requests[2].body)
                .iter()
                .any(|r| r.contains(NOTE)),
            "{protocol}: no warning before the third repeat"
        );
        audit_is_clean(&ran);
    }
}
