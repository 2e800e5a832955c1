//! Provider faults: malformed and truncated bodies fail only their own task; retryable
//! errors are retried as the SDKs do; others are not.

use std::str::FromStr;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;

use crate::common::{job, num, Case};

const GOOD: &str = "    sim: { turns: [ { content: [ { tool_use: { name: get_time, input: {} } } ] }, { content: [ { text: fine } ] } ] }\n";

#[tokio::test]
async fn malformed_responses_fail_their_task_while_the_others_complete() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { max_cost_usd: 1 }\n",
            &format!(
                r#"  - id: good-1
    prompt: p
{GOOD}  - id: truncated
    prompt: p
    sim: {{ turns: [ {{ content: [ {{ text: "cut short" }} ], truncate_body: true }} ] }}
  - id: html
    prompt: p
    sim: {{ turns: [ {{ raw_body: "<html><body>502 Bad Gateway</body></html>" }} ] }}
  - id: no-stop-reason
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","role":"assistant","content":[],"usage":{{"input_tokens":1,"output_tokens":1}}}}' }} ] }}
  - id: no-usage
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","role":"assistant","content":[{{"type":"text","text":"hi"}}],"stop_reason":"end_turn"}}' }} ] }}
  - id: tool-use-without-id
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","content":[{{"type":"tool_use","name":"get_time","input":{{}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":1,"output_tokens":1}}}}' }} ] }}
  - id: good-2
    prompt: p
{GOOD}"#
            ),
        ))
        .await;
    assert_eq!(ran.rows().len(), 7);
    for good in ["good-1", "good-2"] {
        assert_eq!(ran.stop(good), "completed");
    }
    for (task, needle) in [
        ("truncated", "not JSON"),
        ("html", "not JSON"),
        ("no-stop-reason", "stop_reason"),
        ("no-usage", "usage"),
        ("tool-use-without-id", "id"),
    ] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "provider_error", "{task}");
        assert_eq!(row["outcome"], "error", "{task}");
        assert!(
            row["stop_detail"].contains(needle),
            "{task}: {}",
            row["stop_detail"]
        );
        assert!(
            row["stop_detail"].contains("request-id req_sim_"),
            "{task}: {}",
            row["stop_detail"]
        );
        // it was answered, so it may have been billed: the reservation counts as spent
        assert!(
            Decimal::from_str(&row["cost_usd"]).unwrap() > Decimal::ZERO,
            "{task}"
        );
        assert_eq!(
            num(&row, "retries"),
            0,
            "{task}: malformed bodies are not retried"
        );
    }
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried_honouring_retry_after() {
    let case = Case::new();
    let started = Instant::now();
    let ran = case
        .run(
            &job(
                "",
                r#"  - id: t
    prompt: p
    sim:
      turns:
        - faults: [ { status: 429, retry_after: 1s }, { status: 529 }, { disconnect: true } ]
          content: [ { text: "finally" } ]
"#,
            )
            .replace(
                "tasks:\n",
                "providers:\n  sim: { max_retries: 3 }\ntasks:\n",
            ),
        )
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(num(&row, "retries"), 3);
    assert_eq!(num(&row, "turns"), 1);
    assert_eq!(ran.requests("t").len(), 4);
    // retry-after 1s, then 0.5 s x jitter, then 1 s x jitter
    assert!(started.elapsed() >= Duration::from_millis(1000 + 375 + 750));
    let failed = ran.events("t", "attempt_failed");
    assert_eq!(failed.len(), 3);
    assert_eq!(failed[0]["provider_paused_ms"], 1000);
    assert_eq!(failed[0]["rate_limited"], true);
    assert!(failed[0]["error"]
        .as_str()
        .unwrap()
        .contains("429 rate_limit_error"));
    assert!(failed[1]["error"]
        .as_str()
        .unwrap()
        .contains("529 overloaded_error"));
}

#[tokio::test]
async fn retries_stop_at_max_retries_and_client_errors_are_not_retried() {
    let case = Case::new();
    let ran = case
        .run(
            &job(
                "",
                r#"  - id: overloaded
    prompt: p
    sim:
      turns:
        - faults: [ { status: 529 }, { status: 529 }, { status: 529 }, { status: 529 } ]
          content: [ { text: never } ]
  - id: bad-request
    prompt: p
    sim:
      turns:
        - faults: [ { status: 400, message: "messages: roles must alternate" } ]
          content: [ { text: never } ]
  - id: not-retry
    prompt: p
    sim:
      turns:
        - faults: [ { status: 401 } ]
          content: [ { text: never } ]
"#,
            )
            .replace(
                "tasks:\n",
                "providers:\n  sim: { max_retries: 2 }\ntasks:\n",
            ),
        )
        .await;
    let row = ran.row("overloaded");
    assert_eq!(row["stop_reason"], "provider_error");
    assert_eq!(num(&row, "retries"), 2);
    assert!(
        row["stop_detail"].contains("after 2 retries"),
        "{}",
        row["stop_detail"]
    );
    assert_eq!(ran.requests("overloaded").len(), 3);
    let row = ran.row("bad-request");
    assert_eq!(row["stop_reason"], "provider_error");
    assert_eq!(num(&row, "retries"), 0);
    assert!(row["stop_detail"].contains("roles must alternate"));
    assert_eq!(ran.requests("not-retry").len(), 1);
    assert!(ran.row("not-retry")["stop_detail"].contains("authentication_error"));
}

#[tokio::test]
async fn script_running_out_is_a_provider_error_naming_the_script() {
    let case = Case::new();
    let ran = case
        .run(&job("", "  - id: t\n    prompt: p\n    sim: { turns: [ { content: [ { tool_use: { name: get_time, input: {} } } ] } ] }\n"))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "provider_error");
    assert!(
        row["stop_detail"].contains("has 1 turn(s)"),
        "{}",
        row["stop_detail"]
    );
}
