//! The invariants one task's transcript must keep: its money adds up, the file tools
//! stayed in the workspace, valid writes at the root worked, the simulator refused
//! nothing the runner sent, no request passed the window, a summary replaced the
//! history only after an answer that may stand as one (and none was asked for after
//! one that did not help), `completed` follows a documented end, and `stuck` a warning
//! the model was sent.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;

use rust_decimal::Decimal;
use serde_json::Value;

use super::plan::Task;
use super::Finding;
use crate::common::transcript_money;

pub(super) fn decimal(v: &Value) -> Option<Decimal> {
    v.as_str().and_then(|s| Decimal::from_str(s).ok())
}

pub(super) fn read_events(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Whether a relative path leaves its root lexically (`..` below the top).
fn escapes(path: &str) -> bool {
    let mut depth = 0i32;
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// A documented end of a conversation in the last response the runner accepted.
fn ended_properly(events: &[Value]) -> Result<(), String> {
    let Some(body) = events
        .iter()
        .rev()
        .find(|e| e["event"] == "response")
        .map(|e| &e["body"])
    else {
        return Err("completed without any response".into());
    };
    let fine = body["stop_reason"] == "end_turn"
        || body["stop_reason"] == "stop_sequence"
        || (body["object"] == "response" && body["status"] == "completed")
        || body.pointer("/choices/0/finish_reason") == Some(&Value::from("stop"));
    if fine {
        Ok(())
    } else {
        Err(format!(
            "completed after a response that ends with stop_reason {} / status {} / finish_reason {}",
            body["stop_reason"],
            body["status"],
            body.pointer("/choices/0/finish_reason").unwrap_or(&Value::Null)
        ))
    }
}

/// A `stuck` stop: a `repeat_warning` whose note reached the model in a later request,
/// then a `repeat_stop` on the very next turn, then the stop.
fn warned_before_stuck(events: &[Value]) -> Result<(), String> {
    let at = |kind: &str| events.iter().rposition(|e| e["event"] == kind);
    let (Some(warn), Some(stop)) = (at("repeat_warning"), at("repeat_stop")) else {
        return Err("stuck without a repeat_warning and a repeat_stop".into());
    };
    let turn = |i: usize| events[i]["turn"].as_u64().unwrap_or_default();
    if warn > stop || turn(stop) != turn(warn) + 1 {
        return Err(format!(
            "warned on turn {}, stopped on turn {}",
            turn(warn),
            turn(stop)
        ));
    }
    let note = events[warn]["note"].as_str().unwrap_or_default();
    // As the note is written inside the request's JSON text.
    let escaped = Value::from(note).to_string();
    let escaped = escaped.trim_matches('"');
    let sent = events[warn..stop]
        .iter()
        .any(|e| e["event"] == "request" && e["new_messages"].to_string().contains(escaped));
    if note.is_empty() || !sent {
        return Err(format!("the warning of turn {} was never sent", turn(warn)));
    }
    Ok(())
}

/// Whether an answer to a summary request may stand as a summary: it ended as a turn
/// ends (or called tools, which are not run), and was not refused, cut off at
/// max_tokens, paused, or ended in a way the runner does not know.
fn usable_summary(body: &Value) -> bool {
    let any = |v: &Value, f: &dyn Fn(&Value) -> bool| v.as_array().is_some_and(|a| a.iter().any(f));
    if body["type"] == "message" {
        let calls = any(&body["content"], &|b| b["type"] == "tool_use");
        return matches!(
            body["stop_reason"].as_str(),
            Some("end_turn" | "stop_sequence")
        ) || (body["stop_reason"] == "tool_use" && calls);
    }
    if body["object"] == "response" {
        let calls = any(&body["output"], &|o| o["type"] == "function_call");
        let refused = any(&body["output"], &|o| {
            any(&o["content"], &|c| c["type"] == "refusal")
        });
        return body["status"] == "completed" && (calls || !refused);
    }
    let choice = &body["choices"][0];
    let calls = any(&choice["message"]["tool_calls"], &|_| true);
    match (choice["finish_reason"].as_str(), calls) {
        (Some("length" | "content_filter"), _) => false,
        (_, true) => true,
        (Some("stop"), false) => choice["message"]["refusal"].is_null(),
        _ => false,
    }
}

/// Summaries: one replaces the history only after an answer that may stand as one,
/// and after one that left the prompt over the compaction threshold none is asked for.
fn summaries_kept_their_rules(events: &[Value]) -> Result<(), String> {
    let mut last_answer: Option<&Value> = None;
    let mut fell_short: Option<u64> = None;
    for e in events {
        match e["event"].as_str() {
            Some("response") => last_answer = Some(&e["body"]),
            Some("request")
                if e["new_messages"]
                    .to_string()
                    .contains("will be replaced by your summary") =>
            {
                if let Some(turn) = fell_short {
                    return Err(format!(
                        "turn {}: a summary was asked for after the summary of turn {turn} left the prompt over the threshold",
                        e["turn"]
                    ));
                }
            }
            Some("compaction") if e["strategy"] == "summarize" => {
                let body = last_answer.unwrap_or(&Value::Null);
                if !usable_summary(body) {
                    return Err(format!(
                        "turn {}: an answer that ends with stop_reason {} / status {} / finish_reason {} replaced the history",
                        e["turn"],
                        body["stop_reason"],
                        body["status"],
                        body.pointer("/choices/0/finish_reason").unwrap_or(&Value::Null)
                    ));
                }
                let over = e["threshold"]
                    .as_u64()
                    .is_some_and(|t| e["tokens_after"].as_u64() > Some(t));
                if over {
                    fell_short = e["turn"].as_u64();
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// No request left whose prompt (a quarter of its bytes, as the simulator counts) and
/// max_tokens pass the job's window, apart from a first request (before any answer the
/// runner knows its size only between bounds, and the provider judges it). The runner
/// decides on an estimate from the last answer's count, which the simulator's counting
/// keeps within a few tokens: an eighth of the window is the margin.
fn requests_fit(t: &Task, events: &[Value]) -> Result<(), String> {
    if t.window == 0 || t.strategy == "native" {
        return Ok(());
    }
    for e in events.iter().filter(|e| e["event"] == "request") {
        let turn = e["turn"].as_u64().unwrap_or_default();
        let prompt = e["bytes"].as_u64().unwrap_or_default().div_ceil(4);
        let max = e["max_tokens"].as_u64().unwrap_or_default();
        if turn > 1 && prompt + max > t.window + t.window / 8 {
            return Err(format!(
                "turn {turn}: a prompt of about {prompt} tokens and max_tokens {max} went out for a {}-token window",
                t.window
            ));
        }
    }
    Ok(())
}

/// The invariants of one task's transcript: money, confinement of the file tools, the
/// simulator's refusals, the window, summaries, the stop.
pub(super) fn check_transcript(
    t: &Task,
    row: &BTreeMap<String, String>,
    events: &[Value],
    found: &mut Vec<Finding>,
    stats: &mut BTreeMap<&'static str, usize>,
) {
    let mut add = |invariant: &'static str, detail: String| {
        found.push(Finding {
            seed: t.seed,
            invariant,
            detail,
        })
    };
    let cost = Decimal::from_str(&row["cost_usd"]).unwrap_or_default();
    let money = transcript_money(events);
    if cost != money {
        add(
            "spend equals settled usage plus worst-case charges",
            format!("results.csv says ${cost}, the transcript's settle and charge events add up to ${money}"),
        );
    }
    if cost > t.cap {
        add(
            "no task over its own cap",
            format!("spent ${cost}, its cap is ${}", t.cap),
        );
    }
    for e in events {
        let error = e["error"].as_str().unwrap_or("");
        let refused = e["event"] == "attempt_failed"
            && ["HTTP 400 ", "HTTP 401 ", "HTTP 404 "]
                .iter()
                .any(|s| error.contains(s))
            && !error.contains("chaos:");
        if refused {
            add(
                "the simulator never refuses what the runner sends",
                format!("turn {}: {error}", e["turn"]),
            );
        }
        // The chaos model sends no event whose data is broken: one that reads so was
        // cut by the body's end, which is a cut (retried), never a malformed answer.
        if error.contains("malformed response stream") {
            add(
                "a body cut inside an event is a cut",
                format!("turn {}: {error}", e["turn"]),
            );
        }
        if error.contains("inside an event") {
            *stats.entry("streams cut inside an event").or_default() += 1;
        }
        if e["event"] == "usage_clamped" {
            *stats
                .entry("answers with usage figures clamped")
                .or_default() += 1;
            // The simulator's prompt counts are its own (its contradictions garble the
            // parts, never the total): one above the runner's bound means the runner
            // sent more than it reserved for.
            for c in e["clamps"].as_array().into_iter().flatten() {
                let why = c["why"].as_str().unwrap_or("");
                if why.contains("above the request's bound") {
                    add(
                        "the runner's prompt bound holds what it sent",
                        format!("turn {}: {why}", e["turn"]),
                    );
                }
            }
        }
    }
    // A file tool's call at an absolute path, up out of the workspace, or through the
    // model's own link to /etc (once `ln -sfn /etc ro_link` worked) must fail.
    let mut ro_link = false;
    for pair in events.windows(2) {
        let (call, result) = (&pair[0], &pair[1]);
        if call["event"] != "tool_call" || result["event"] != "tool_result" {
            continue;
        }
        let command = call["input"]["command"].as_str().unwrap_or("");
        if command.contains("ln -sfn /etc ro_link") && result["is_error"] == false {
            ro_link = true;
        }
        let Some(path) = call["input"]["path"].as_str() else {
            continue;
        };
        let file_tool = ["read_file", "write_file", "edit_file", "list_files", "grep"]
            .contains(&call["name"].as_str().unwrap_or(""));
        let outside =
            path.starts_with('/') || escapes(path) || (ro_link && path.starts_with("ro_link"));
        *stats.entry("tool calls with a path").or_default() += 1;
        if file_tool && outside && result["is_error"] == true {
            *stats.entry("file-tool escapes refused").or_default() += 1;
        }
        if path.starts_with("chaos_link_") && result["is_error"] == true {
            *stats.entry("writes through links refused").or_default() += 1;
        }
        // A valid write to a plain file at the root must work (the generator never
        // makes these names folders or links).
        const ROOT_FILES: [&str; 8] = [
            "newfile.py",
            ".gitignore",
            "calc.py",
            "README.md",
            "notes.txt",
            ".env",
            "test_calc.py",
            "test_chaos.py",
        ];
        let valid_write = call["name"] == "write_file"
            && call["input"]["content"].is_string()
            && call["input"].as_object().is_some_and(|o| o.len() == 2);
        if valid_write && ROOT_FILES.contains(&path) && result["is_error"] == true {
            add(
                "a valid write to a file at the workspace root succeeds",
                format!(
                    "turn {}: write_file {path:?}: {}",
                    call["turn"],
                    result["content"].as_str().unwrap_or("")
                ),
            );
        }
        if file_tool && outside && result["is_error"] == false {
            add(
                "file tools stay in the workspace",
                format!(
                    "turn {}: {} {path:?} succeeded: {}",
                    call["turn"],
                    call["name"],
                    result["content"]
                        .as_str()
                        .unwrap_or("")
                        .chars()
                        .take(200)
                        .collect::<String>()
                ),
            );
        }
    }
    if let Err(e) = requests_fit(t, events) {
        add("no request is sent that cannot fit the window", e);
    }
    if let Err(e) = summaries_kept_their_rules(events) {
        add(
            "a summary replaces the history only when it may, and is not asked for again when it did not help",
            e,
        );
    }
    *stats.entry("summaries").or_default() += events
        .iter()
        .filter(|e| e["event"] == "compaction" && e["strategy"] == "summarize")
        .count();
    if row["stop_reason"] == "completed" {
        if let Err(e) = ended_properly(events) {
            add("an unexpected stop is never success", e);
        }
    }
    if row["stop_reason"] == "stuck" {
        if let Err(e) = warned_before_stuck(events) {
            add("`stuck` only after the model was warned", e);
        }
    }
    if row["stop_reason"] == "cancelled" || row["stop_reason"] == "internal_error" {
        add(
            "no task is cancelled in a run nobody interrupts, nor ends in a bug",
            row["stop_detail"].clone(),
        );
    }
}
