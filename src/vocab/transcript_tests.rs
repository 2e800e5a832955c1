use rust_decimal::Decimal;
use serde_json::{json, Value};
use tokio::sync::mpsc::unbounded_channel;

use super::*;
use crate::vocab::log::{Event, TaskLog};

/// Lines written by agentbatch before the events were typed (from the demo, repo-fix,
/// teams, protocols, mcp-example and compare jobs, plus hand-laid ones for the shapes
/// those jobs never produce).
const WRITTEN_BEFORE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/transcript/written-before-typed-events.jsonl"
));

/// Every event name on disk. Renaming one breaks every transcript already written and
/// every reader of them (resume, audit, scripts): change this list only on purpose.
const NAMES: [&str; 37] = [
    "task_start",
    "workspace",
    "environment",
    "sandbox",
    "setup",
    "mcp_ready",
    "mcp_note",
    "mcp_stderr",
    "tools_changed",
    "budget_stop",
    "budget_wait",
    "budget_granted",
    "reserve",
    "request",
    "response",
    "attempt_failed",
    "request_aborted",
    "batch_joined",
    "batch_recovered",
    "reservation_exceeded",
    "usage_clamped",
    "ledger_error",
    "settle",
    "rate_pause",
    "wrap_up",
    "repeat_warning",
    "repeat_stop",
    "compaction",
    "tool_call",
    "tool_result",
    "stop",
    "patch",
    "patch_error",
    "check",
    "verifier",
    "workspace_end",
    "task_end",
];

/// The name each variant must carry; exhaustive, so a new variant needs a name here.
fn name_of(e: &TranscriptEvent) -> &'static str {
    use TranscriptEvent as E;
    match e {
        E::TaskStart { .. } => "task_start",
        E::Workspace { .. } => "workspace",
        E::Environment { .. } => "environment",
        E::Sandbox { .. } => "sandbox",
        E::Setup { .. } => "setup",
        E::McpReady { .. } => "mcp_ready",
        E::McpNote { .. } => "mcp_note",
        E::McpStderr { .. } => "mcp_stderr",
        E::ToolsChanged { .. } => "tools_changed",
        E::BudgetStop { .. } => "budget_stop",
        E::BudgetWait { .. } => "budget_wait",
        E::BudgetGranted { .. } => "budget_granted",
        E::Reserve { .. } => "reserve",
        E::Request { .. } => "request",
        E::Response { .. } => "response",
        E::AttemptFailed { .. } => "attempt_failed",
        E::RequestAborted { .. } => "request_aborted",
        E::BatchJoined { .. } => "batch_joined",
        E::BatchRecovered { .. } => "batch_recovered",
        E::ReservationExceeded { .. } => "reservation_exceeded",
        E::UsageClamped { .. } => "usage_clamped",
        E::LedgerError { .. } => "ledger_error",
        E::Settle { .. } => "settle",
        E::RatePause { .. } => "rate_pause",
        E::RateLearned { .. } => "rate_learned",
        E::CapWait { .. } => "cap_wait",
        E::WrapUp { .. } => "wrap_up",
        E::RepeatWarning { .. } => "repeat_warning",
        E::RepeatStop { .. } => "repeat_stop",
        E::Compaction { .. } => "compaction",
        E::ToolCall { .. } => "tool_call",
        E::ToolResult { .. } => "tool_result",
        E::Stop { .. } => "stop",
        E::Patch { .. } => "patch",
        E::PatchError { .. } => "patch_error",
        E::Check { .. } => "check",
        E::Verifier(..) => "verifier",
        E::WorkspaceEnd { .. } => "workspace_end",
        E::TaskEnd { .. } => "task_end",
    }
}

fn written_before() -> impl Iterator<Item = &'static str> {
    WRITTEN_BEFORE.lines().filter(|l| !l.trim().is_empty())
}

#[test]
fn every_line_written_before_reads_and_is_written_again_byte_for_byte() {
    let mut seen = std::collections::BTreeSet::new();
    for line in written_before() {
        let event = TranscriptEvent::read(line).unwrap_or_else(|| panic!("unread: {line}"));
        let v: Value = serde_json::from_str(line).unwrap();
        let again = serde_json::to_string(&TranscriptLine {
            ts: v["ts"].as_str().unwrap(),
            t_ms: v["t_ms"].as_u64().unwrap(),
            event: &event,
        })
        .unwrap();
        assert_eq!(again, line, "keys, order, nulls and money must not change");
        assert_eq!(v["event"], name_of(&event));
        seen.insert(name_of(&event));
    }
    let all: std::collections::BTreeSet<&str> = NAMES.into_iter().collect();
    assert_eq!(seen, all, "the sample holds every event");
}

#[test]
fn representative_events_serialize_to_the_keys_they_always_had() {
    let cases = [
        (
            TranscriptEvent::Reserve {
                turn: 2,
                attempt: 1,
                max_tokens: 1024,
                prompt_tokens_upper_bound: 600,
                paced_input_tokens: None,
                reserved_usd: None,
                spent_usd: Usd("0.0100".parse().unwrap()),
            },
            r#"{"event":"reserve","turn":2,"attempt":1,"max_tokens":1024,"prompt_tokens_upper_bound":600,"reserved_usd":null,"spent_usd":"0.01"}"#,
        ),
        (
            TranscriptEvent::AttemptFailed {
                turn: 1,
                attempt: 2,
                error: "HTTP 500".into(),
                retryable: false,
                rate_limited: None,
                charged_usd: Some(Usd("0.05".parse().unwrap())),
                provider_paused_ms: None,
                retry_in_ms: Some(None),
            },
            r#"{"event":"attempt_failed","turn":1,"attempt":2,"error":"HTTP 500","retryable":false,"charged_usd":"0.05","retry_in_ms":null}"#,
        ),
        (
            TranscriptEvent::Response {
                turn: 1,
                request_id: None,
                ms: 3,
                body: Some(json!({"z": 1, "a": 2})),
                raw_body: None,
                ttft_ms: None,
                replayed: false,
            },
            r#"{"event":"response","turn":1,"request_id":null,"ms":3,"body":{"z":1,"a":2}}"#,
        ),
        (
            TranscriptEvent::Response {
                turn: 2,
                request_id: None,
                ms: 9,
                body: Some(json!({})),
                raw_body: None,
                ttft_ms: Some(4),
                replayed: false,
            },
            r#"{"event":"response","turn":2,"request_id":null,"ms":9,"body":{},"ttft_ms":4}"#,
        ),
        (
            TranscriptEvent::ToolResult {
                turn: 1,
                id: "a".into(),
                name: "get_time".into(),
                outcome: ToolOutcome::Interrupted {
                    interrupted: "cancelled".into(),
                },
            },
            r#"{"event":"tool_result","turn":1,"id":"a","name":"get_time","interrupted":"cancelled"}"#,
        ),
        (
            TranscriptEvent::Stop {
                stop_reason: Some(StopReason::CostLimit),
                detail: "d".into(),
            },
            r#"{"event":"stop","stop_reason":"cost_limit","detail":"d"}"#,
        ),
    ];
    for (event, want) in cases {
        assert_eq!(serde_json::to_string(&event).unwrap(), want);
        assert_eq!(TranscriptEvent::read(want), Some(event));
    }
}

#[tokio::test]
async fn a_task_log_line_has_its_timestamps_first_and_reads_back() {
    let (tx, mut rx) = unbounded_channel();
    let log = TaskLog::new("t", tx);
    let event = TranscriptEvent::BudgetGranted { waited_ms: 7 };
    log.emit(event.clone());
    let Some(Event::Transcript { task, line, .. }) = rx.recv().await else {
        panic!("no transcript line");
    };
    let line = line.line();
    assert_eq!(&*task, "t");
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&line)
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys, ["ts", "t_ms", "event", "waited_ms"]);
    assert_eq!(TranscriptEvent::read(&line), Some(event));
}

#[test]
fn readers_take_partial_lines_and_pass_over_unknown_ones() {
    // Hand-written lines lack most keys; what is missing reads as its default.
    assert_eq!(
        TranscriptEvent::read(r#"{"event":"reserve","reserved_usd":"0.05","spent_usd":"0"}"#),
        Some(TranscriptEvent::Reserve {
            turn: 0,
            attempt: 0,
            max_tokens: 0,
            prompt_tokens_upper_bound: 0,
            paced_input_tokens: None,
            reserved_usd: Some(Usd("0.05".parse().unwrap())),
            spent_usd: Usd(Decimal::ZERO),
        })
    );
    // Values of the wrong type read as defaults, as the untyped readers took them.
    let Some(TranscriptEvent::Request { turn, params, .. }) = TranscriptEvent::read(
        r#"{"event":"request","turn":"one","params":{"url":null,"protocol":"carrier-pigeon"}}"#,
    ) else {
        panic!("a request with odd values still reads");
    };
    assert_eq!(turn, 0);
    assert_eq!(params, Some(RequestParams::default()));
    assert_eq!(
        TranscriptEvent::read(r#"{"event":"stop","stop_reason":"from_the_future"}"#),
        Some(TranscriptEvent::Stop {
            stop_reason: None,
            detail: String::new()
        })
    );
    let Some(TranscriptEvent::ToolResult { outcome, .. }) =
        TranscriptEvent::read(r#"{"event":"tool_result","id":"a","decision":"deny"}"#)
    else {
        panic!("a tool result without most keys still reads");
    };
    assert!(matches!(outcome, ToolOutcome::Ran { decision, .. } if decision == "deny"));
    // An event this version does not know, or no event at all, is skipped.
    assert_eq!(TranscriptEvent::read(r#"{"event":"teleport","x":1}"#), None);
    assert_eq!(TranscriptEvent::read(r#"{"ts":"x"}"#), None);
    assert_eq!(TranscriptEvent::read(r#"{"event":"settle","#), None);
    assert_eq!(
        TranscriptEvent::from_value(&json!({"event": "reserve"})).map(|e| name_of(&e)),
        Some("reserve")
    );
}

#[test]
fn a_stamped_line_keeps_its_timestamps_and_skips_what_read_skips() {
    let line = r#"{"ts": "2026-01-02T03:04:05.678Z", "t_ms": 12, "event": "stop", "stop_reason": "completed", "detail": "end_turn"}"#;
    let s = Stamped::read(line).unwrap();
    assert_eq!((s.ts.as_str(), s.t_ms), ("2026-01-02T03:04:05.678Z", 12));
    assert_eq!(Some(s.event), TranscriptEvent::read(line));
    let untimed = Stamped::read(r#"{"ts": 5, "event": "wrap_up"}"#).unwrap();
    assert_eq!((untimed.ts.as_str(), untimed.t_ms), ("", 0));
    assert_eq!(
        Stamped::read(r#"{"ts": "x", "event": "no_such_event"}"#),
        None
    );
    assert_eq!(
        Stamped::read(r#"{"ts": "x", "event": "stop""#),
        None,
        "cut off"
    );
}
