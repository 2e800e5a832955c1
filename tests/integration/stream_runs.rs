//! The runner streaming against the simulator streaming, over real HTTP: a streamed
//! run and a whole-answer run of the same script send the same histories and write the
//! same rows apart from timing, for all three protocols; faults inside a stream retry
//! with the right charge.

use std::collections::HashMap;

use serde_json::Value;

use crate::common::{num, Case, Ran};

fn job(protocol: &str, model: &str, stream: &str, turns: &str, provider_extra: &str) -> String {
    format!(
        "name: s\nproviders:\n  p: {{ protocol: {protocol}, simulator: true{provider_extra} }}\ndefaults:\n  provider: p\n  model: {model}\n  max_tokens: 1024\n  stream: {stream}\n  tools: [get_time, read_file]\n  repo: repo\n  keep_workspaces: never\n  limits: {{ max_repeats: off }}\ntasks:\n  - id: t\n    prompt: \"Quelle heure est-il ? 時間\"\n    sim:\n      turns:\n{turns}"
    )
}

/// A case with the plain folder the tasks work in: a file with a non-ASCII name and
/// text, read by the script (get_time would differ between two runs).
fn repo_case() -> Case {
    let case = Case::new();
    case.write("repo/notes/été.txt", "Réunion à 15 h — 会議は15時\n");
    case
}

/// Three turns with text in several scripts, two parallel calls, and (Anthropic)
/// thinking with its signature.
fn turns(protocol: &str) -> String {
    let thinking = if protocol == "anthropic" {
        "            - thinking: \"D'abord l'heure — 先に時間を確認する。\"\n"
    } else {
        ""
    };
    format!(
        "        - content:\n{thinking}            - text: \"Je regarde l'horloge… ⏰ 時計を見ます\"\n            - tool_use: {{ name: read_file, input: {{ path: \"notes/été.txt\", note: \"é\\\"\\\\ü\" }} }}\n            - tool_use: {{ name: read_file, input: {{ path: \"notes/été.txt\" }} }}\n        - content:\n            - text: \"Encore une fois.\"\n            - tool_use: {{ name: read_file, input: {{ path: missing.txt }} }}\n        - content:\n            - text: \"Il est l'heure. 終わり。\"\n"
    )
}

/// Each request body without the fields streaming adds.
fn bodies(ran: &Ran) -> Vec<Value> {
    ran.requests("t")
        .iter()
        .map(|r| {
            let mut b = r.body.clone();
            if let Some(o) = b.as_object_mut() {
                o.remove("stream");
                o.remove("stream_options");
            }
            b
        })
        .collect()
}

/// The row's columns that do not measure time.
fn untimed(row: &HashMap<String, String>) -> Vec<(String, String)> {
    let timed = [
        "wall_ms",
        "model_ms",
        "tool_ms",
        "started_at",
        "finished_at",
        "rate_wait_ms",
        "ttft_ms",
    ];
    let mut v: Vec<(String, String)> = row
        .iter()
        .filter(|(k, _)| !timed.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn streamed_and_whole_answers_leave_the_same_histories_and_rows() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let whole_case = repo_case();
        let whole = whole_case
            .run(&job(protocol, model, "never", &turns(protocol), ""))
            .await;
        let streamed_case = repo_case();
        let streamed = streamed_case
            .run(&job(protocol, model, "always", &turns(protocol), ""))
            .await;
        assert_eq!(
            whole.stop("t"),
            "completed",
            "{protocol}: {:?}",
            whole.row("t")
        );
        assert_eq!(
            streamed.stop("t"),
            "completed",
            "{protocol}: {:?}",
            streamed.row("t")
        );
        let sent = streamed.requests("t");
        assert!(sent.iter().all(|r| r.body["stream"] == true), "{protocol}");
        assert!(
            whole
                .requests("t")
                .iter()
                .all(|r| r.body.get("stream").is_none()),
            "{protocol}"
        );
        // The same history, request by request: what the stream assembled is what the
        // whole answer was, byte for byte once replayed.
        assert_eq!(bodies(&whole), bodies(&streamed), "{protocol}");
        assert_eq!(
            untimed(&whole.row("t")),
            untimed(&streamed.row("t")),
            "{protocol}"
        );
        assert_eq!(whole.row("t")["ttft_ms"], "", "{protocol}");
        assert!(
            streamed.row("t")["ttft_ms"].parse::<u64>().is_ok(),
            "{protocol}"
        );
    }
}

/// The `reserve` and `attempt_failed` events of the task.
fn charges(ran: &Ran) -> (Vec<Value>, Vec<Value>) {
    (
        ran.events("t", "reserve"),
        ran.events("t", "attempt_failed"),
    )
}

#[tokio::test]
async fn faults_inside_a_stream_retry_and_a_cut_one_is_charged_at_its_worst_case() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let faulted = |fault: &str| {
            format!("        - faults: [ {fault} ]\n          content: [ {{ text: \"ok\" }} ]\n")
        };
        // An error event: retried; the partial answer may be billed, so it is charged
        // at its worst case.
        let case = repo_case();
        let ran = case
            .run(&job(
                protocol,
                model,
                "always",
                &faulted("{ mid_stream: error, after_events: 2 }"),
                "",
            ))
            .await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        assert_eq!(num(&row, "retries"), 1, "{protocol}");
        let (reserves, failed) = charges(&ran);
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0]["error"].as_str().unwrap().contains("error event"),
            "{protocol}: {}",
            failed[0]
        );
        assert_eq!(
            failed[0]["charged_usd"], reserves[0]["reserved_usd"],
            "{protocol}"
        );

        // A cut: retried, and its reservation counts as spent.
        let case = repo_case();
        let cut = case
            .run(&job(
                protocol,
                model,
                "always",
                &faulted("{ mid_stream: cut }"),
                "",
            ))
            .await;
        let row = cut.row("t");
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        let (reserves, failed) = charges(&cut);
        assert_eq!(failed.len(), 1, "{protocol}");
        assert_eq!(
            failed[0]["charged_usd"], reserves[0]["reserved_usd"],
            "{protocol}: a cut stream is charged its worst case"
        );
        let cost: rust_decimal::Decimal = row["cost_usd"].parse().unwrap();
        let charged: rust_decimal::Decimal =
            failed[0]["charged_usd"].as_str().unwrap().parse().unwrap();
        assert!(
            cost > charged,
            "{protocol}: {cost} holds the charge {charged} and the answer"
        );

        // A stall past stream_idle_timeout: cut by the runner, retried, charged.
        let case = repo_case();
        let stalled = case
            .run(&job(
                protocol,
                model,
                "always",
                &faulted("{ mid_stream: stall, after_events: 2, stall_for: 30s }"),
                ", stream_idle_timeout: 300ms",
            ))
            .await;
        let row = stalled.row("t");
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        let (reserves, failed) = charges(&stalled);
        assert!(
            failed[0]["error"].as_str().unwrap().contains("idle"),
            "{protocol}: {}",
            failed[0]
        );
        assert_eq!(
            failed[0]["charged_usd"], reserves[0]["reserved_usd"],
            "{protocol}"
        );
        assert!(
            num(&row, "wall_ms") < 10_000,
            "{protocol}: the stall was cut, not waited out"
        );
    }
}

/// A body that ends inside an event (in the middle of its `data:` line, inside a
/// multi-byte character, right after `data:`) was taken as ending at an event boundary:
/// the cut event failed as "not JSON" or "not UTF-8" and the task ended with 0 retries.
/// It is a cut like any other: retried, and charged at its worst case.
#[tokio::test]
async fn a_body_cut_inside_an_event_is_retried_and_charged_like_any_cut() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        for (place, after) in [("mid_data", 2), ("mid_character", 1), ("after_data", 3)] {
            let case = repo_case();
            let fault =
                format!("{{ mid_stream: cut, after_events: {after}, cut_inside: {place} }}");
            let ran = case
                .run(&job(
                    protocol,
                    model,
                    "always",
                    &format!("        - faults: [ {fault} ]\n          content: [ {{ text: \"réponse — 答え\" }} ]\n"),
                    "",
                ))
                .await;
            let row = ran.row("t");
            let at = format!("{protocol}, {place}");
            assert_eq!(row["stop_reason"], "completed", "{at}: {row:?}");
            assert_eq!(num(&row, "retries"), 1, "{at}");
            let (reserves, failed) = charges(&ran);
            assert_eq!(failed.len(), 1, "{at}");
            let error = failed[0]["error"].as_str().unwrap();
            assert!(error.contains("cut"), "{at}: {error}");
            assert_eq!(failed[0]["retryable"], true, "{at}");
            assert_eq!(
                failed[0]["charged_usd"], reserves[0]["reserved_usd"],
                "{at}: the cut attempt may be billed"
            );
        }
    }
}

/// `truncate_body` ends every attempt's body halfway, cleanly: every protocol retries
/// it `max_retries` times (Chat Completions, whose half fell inside a `data:` line,
/// once gave up at once).
#[tokio::test]
async fn a_truncated_stream_is_retried_on_every_protocol() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let case = repo_case();
        let ran = case
            .run(&job(
                protocol,
                model,
                "always",
                "        - truncate_body: true\n          content: [ { text: \"réponse — 答え\" } ]\n",
                ", max_retries: 2",
            ))
            .await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "provider_error", "{protocol}: {row:?}");
        assert_eq!(num(&row, "retries"), 2, "{protocol}: {row:?}");
        let (reserves, failed) = charges(&ran);
        assert_eq!(failed.len(), 3, "{protocol}");
        for (f, r) in failed.iter().zip(&reserves) {
            assert_eq!(f["charged_usd"], r["reserved_usd"], "{protocol}");
        }
    }
}
