//! Report files: one CSV row per task with the documented columns, run.json, and
//! transcripts that explain a task without anything else.

use agentbatch::report::COLUMNS;
use serde_json::Value;

use crate::common::{job, Case};

#[tokio::test]
async fn results_csv_has_every_column_and_one_row_per_task() {
    let case = Case::new();
    let tasks: String = (0..12)
        .map(|i| format!("  - id: task-{i}\n    prompt: \"say, \\\"hi\\\"\"\n    sim: {{ turns: [ {{ content: [ {{ text: \"hi, \\\"there\\\"\\nsecond line\" }} ] }} ] }}\n"))
        .collect();
    let ran = case.run(&job("", &tasks)).await;
    let mut r = csv::Reader::from_path(ran.dir.join("results.csv")).unwrap();
    let headers: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    assert_eq!(headers, COLUMNS.to_vec());
    let rows = ran.rows();
    assert_eq!(rows.len(), 12);
    let mut ids: Vec<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 12);
    for row in &rows {
        assert_eq!(row["run_id"], "r1");
        assert_eq!(row["provider"], "sim");
        assert_eq!(row["model"], "claude-sonnet-4-5");
        assert_eq!(row["stop_reason"], "completed");
        assert!(row["cost_usd"].parse::<f64>().unwrap() > 0.0);
        assert!(chrono::DateTime::parse_from_rfc3339(&row["started_at"]).is_ok());
        assert!(ran.dir.join(&row["transcript"]).exists());
    }
    assert_eq!(ran.outcome.summary.totals.tasks, 12);
}

#[tokio::test]
async fn run_json_holds_the_resolved_job_and_totals() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            "  - id: a\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n",
        ))
        .await;
    let run: Value =
        serde_json::from_str(&std::fs::read_to_string(ran.dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run["status"], "finished");
    assert_eq!(run["run_id"], "r1");
    assert_eq!(run["agentbatch_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(run["job"]["name"], "test");
    assert_eq!(run["tasks"][0]["id"], "a");
    assert_eq!(run["tasks"][0]["limits"]["max_turns"], 20);
    assert_eq!(run["totals"]["tasks"], 1);
    assert!(run["finished_at"].is_string());
}

#[tokio::test]
async fn transcript_records_requests_responses_tools_and_the_stop() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            "  - id: a\n    prompt: p\n    sim: { turns: [ { content: [ { tool_use: { name: get_time, input: {} } } ] }, { content: [ { text: done } ] } ] }\n",
        ))
        .await;
    let kinds: Vec<String> = ran
        .transcript("a")
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kinds,
        [
            "task_start",
            "reserve",
            "request",
            "response",
            "settle",
            "tool_call",
            "tool_result",
            "reserve",
            "request",
            "response",
            "settle",
            "stop",
            "task_end"
        ]
    );
    let t = ran.transcript("a");
    assert_eq!(t[2]["params"]["tools"][0]["name"], "get_time");
    let call_id = &t[5]["id"];
    assert_eq!(&t[6]["id"], call_id);
    assert_eq!(
        &t[8]["new_messages"][0]["content"][0]["tool_use_id"],
        call_id
    );
    assert_eq!(t[11]["stop_reason"], "completed");
}
