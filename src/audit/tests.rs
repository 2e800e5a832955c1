//! Hand-built transcripts in the runner's event format, one fault at a time.

use serde_json::{json, Value};

use super::*;

fn start(protocol: &str, tools: &[&str]) -> Vec<Value> {
    let decl: Vec<Value> = tools
        .iter()
        .map(|t| match protocol {
            "openai-chat" => json!({"type": "function", "function": {"name": t}}),
            "openai-responses" => json!({"type": "function", "name": t}),
            _ => json!({"name": t, "input_schema": {"type": "object"}}),
        })
        .collect();
    vec![
        json!({"event": "task_start", "tools": tools}),
        json!({"event": "request", "turn": 1, "attempt": 1, "new_messages": [{"role": "user", "content": "hi"}],
               "params": {"protocol": protocol, "tools": decl}}),
    ]
}

fn request(turn: u32, new_messages: Value) -> Value {
    json!({"event": "request", "turn": turn, "attempt": 1, "new_messages": new_messages})
}

/// An Anthropic response with these `(id, name)` tool_use blocks.
fn claude(turn: u32, calls: &[(&str, &str)]) -> Value {
    let content: Vec<Value> = calls
        .iter()
        .map(|(id, name)| json!({"type": "tool_use", "id": id, "name": name, "input": {}}))
        .collect();
    json!({"event": "response", "turn": turn, "body": {"type": "message", "content": content, "stop_reason": "tool_use"}})
}

fn end(turn: u32) -> Value {
    json!({"event": "response", "turn": turn, "body": {"type": "message", "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"}})
}

fn ran(turn: u32, id: &str, name: &str, decision: &str, is_error: bool) -> [Value; 2] {
    [
        json!({"event": "tool_call", "turn": turn, "id": id, "name": name, "input": {}}),
        json!({"event": "tool_result", "turn": turn, "id": id, "name": name, "decision": decision, "is_error": is_error, "content": "x"}),
    ]
}

fn results(ids: &[&str]) -> Value {
    let blocks: Vec<Value> = ids
        .iter()
        .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "x"}))
        .collect();
    json!([{"role": "user", "content": blocks}])
}

fn stop() -> Value {
    json!({"event": "stop", "stop_reason": "completed"})
}

fn audit(events: Vec<Value>) -> AuditReport {
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    audit_lines(&text).expect("transcript reads")
}

/// (kind, severity, turn, call id) of every problem.
fn found(r: &AuditReport) -> Vec<(ProblemKind, Severity, Option<u32>, Option<String>)> {
    r.problems
        .iter()
        .map(|p| (p.kind, p.severity, p.turn, p.call_id.clone()))
        .collect()
}

fn one(
    kind: ProblemKind,
    severity: Severity,
    turn: u32,
    id: &str,
) -> Vec<(ProblemKind, Severity, Option<u32>, Option<String>)> {
    vec![(kind, severity, Some(turn), Some(id.to_string()))]
}

/// Turn 1 calls `calls`, each run and answered; turn 2 ends.
fn clean_claude(calls: &[(&str, &str)]) -> Vec<Value> {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(claude(1, calls));
    for (id, name) in calls {
        ev.extend(ran(1, id, name, "allow", false));
    }
    let ids: Vec<&str> = calls.iter().map(|c| c.0).collect();
    ev.push(request(2, results(&ids)));
    ev.push(end(2));
    ev.push(stop());
    ev
}

#[test]
fn a_clean_transcript_has_no_problems() {
    let r = audit(clean_claude(&[("a", "get_time"), ("b", "get_time")]));
    assert!(r.problems.is_empty(), "{r}");
    assert_eq!((r.turns, r.calls, r.violations()), (2, 2, 0));
    assert_eq!(r.protocol, Some(Protocol::Anthropic));
    assert_eq!(r.render(), "2 turns, 2 tool calls: no problems found\n");
}

#[test]
fn compactions_are_counted_and_one_that_shrinks_nothing_is_a_warning() {
    let compaction = |cleared: u32, before: u64, after: u64| json!({"event": "compaction", "turn": 2, "strategy": "clear_tool_results", "cleared_results": cleared, "cleared_bytes": 100, "tokens_before": before, "tokens_after": after});
    let mut ev = clean_claude(&[("a", "get_time")]);
    ev.insert(ev.len() - 2, compaction(3, 900, 400));
    let r = audit(ev.clone());
    assert!(r.problems.is_empty(), "{r}");
    assert_eq!(r.compactions, 1);
    assert_eq!(
        r.render(),
        "2 turns, 1 tool call, 1 compaction: no problems found\n"
    );
    ev.insert(ev.len() - 2, compaction(0, 900, 950));
    let r = audit(ev);
    assert_eq!(r.compactions, 2);
    assert_eq!(
        found(&r),
        [(ProblemKind::Compaction, Severity::Warning, Some(2), None)]
    );
    assert_eq!(r.violations(), 0, "a warning, not a protocol violation");
}

#[test]
fn a_summary_that_leaves_the_prompt_over_the_threshold_is_a_warning() {
    let summary = |before: u64, after: u64, threshold: Option<u64>| {
        let mut e = json!({"event": "compaction", "turn": 2, "strategy": "summarize", "cleared_results": 1, "cleared_bytes": 2341, "tokens_before": before, "tokens_after": after});
        if let Some(t) = threshold {
            e["threshold"] = t.into();
        }
        e
    };
    let with = |c: Value| {
        let mut ev = clean_claude(&[("a", "get_time")]);
        ev.insert(ev.len() - 2, c);
        audit(ev)
    };
    // Under the threshold: it helped, however little it removed.
    assert!(with(summary(4100, 3900, Some(4076))).problems.is_empty());
    let r = with(summary(5601, 5272, Some(4076)));
    assert_eq!(
        found(&r),
        [(ProblemKind::Compaction, Severity::Warning, Some(2), None)]
    );
    assert!(
        r.problems[0]
            .message
            .contains("over the compaction threshold of 4076"),
        "{r}"
    );
    // A transcript without the threshold: a summary that removed under a tenth.
    let r = with(summary(5601, 5272, None));
    assert!(r.problems[0].message.contains("almost no room"), "{r}");
    assert!(with(summary(5601, 3000, None)).problems.is_empty());
    // The provider's own compaction has no threshold of the runner's.
    let native = json!({"event": "compaction", "turn": 2, "strategy": "native", "cleared_results": 3, "cleared_bytes": 0, "tokens_before": 5601, "tokens_after": 5400});
    assert!(with(native).problems.is_empty());
}

#[test]
fn an_undeclared_tool_is_a_warning_when_refused_and_a_violation_when_run() {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(claude(1, &[("a", "launch_rockets")]));
    ev.extend(ran(1, "a", "launch_rockets", "deny", true));
    ev.extend([request(2, results(&["a"])), end(2), stop()]);
    let r = audit(ev.clone());
    assert_eq!(
        found(&r),
        one(ProblemKind::UndeclaredTool, Severity::Warning, 1, "a")
    );
    assert!(r.problems[0].message.contains("launch_rockets"));
    assert_eq!(r.violations(), 0);

    ev[4]["is_error"] = json!(false);
    ev[4]["decision"] = json!("allow");
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(ProblemKind::UndeclaredTool, Severity::Violation, 1, "a")
    );
}

#[test]
fn declared_tools_follow_tools_changed() {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(claude(1, &[("a", "get_time")]));
    ev.extend(ran(1, "a", "get_time", "allow", false));
    ev.push(json!({"event": "tools_changed", "tools": ["get_time", "mcp__s__echo"]}));
    ev.push(request(2, results(&["a"])));
    ev.push(claude(2, &[("b", "mcp__s__echo")]));
    ev.extend(ran(2, "b", "mcp__s__echo", "allow", false));
    ev.push(json!({"event": "tools_changed", "tools": ["get_time"]}));
    ev.push(request(3, results(&["b"])));
    ev.push(claude(3, &[("c", "mcp__s__echo")]));
    ev.extend(ran(3, "c", "mcp__s__echo", "allow", false));
    ev.extend([request(4, results(&["c"])), end(4), stop()]);
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(ProblemKind::UndeclaredTool, Severity::Violation, 3, "c")
    );
}

#[test]
fn broken_arguments_are_a_warning_only_when_answered_with_an_error() {
    let body = json!({"object": "response", "status": "completed", "output": [
        {"type": "function_call", "call_id": "c1", "name": "get_time", "arguments": "{\"timezone\":"},
        {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "[1]"}]});
    let mut ev = start("openai-responses", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": body}));
    ev.extend(ran(1, "c1", "get_time", "invalid", true));
    ev.extend(ran(1, "c2", "get_time", "allow", false));
    ev.push(request(
        2,
        json!([{"type": "function_call_output", "call_id": "c1", "output": "Error"},
               {"type": "function_call_output", "call_id": "c2", "output": "ok"}]),
    ));
    ev.push(stop());
    let r = audit(ev);
    assert_eq!(
        found(&r),
        vec![
            (
                ProblemKind::MalformedCall,
                Severity::Warning,
                Some(1),
                Some("c1".into())
            ),
            (
                ProblemKind::MalformedCall,
                Severity::Violation,
                Some(1),
                Some("c2".into())
            ),
        ]
    );
    assert!(r.problems[0].message.contains("not valid JSON"));
    assert!(r.problems[1]
        .message
        .contains("an array, not a JSON object"));
}

#[test]
fn a_call_without_an_id_or_with_a_repeated_one_is_a_violation() {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": {"type": "message", "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "name": "get_time", "input": {}}]}}));
    ev.extend([request(2, results(&[])), end(2), stop()]);
    let r = audit(ev);
    assert_eq!(
        found(&r),
        vec![(
            ProblemKind::MalformedCall,
            Severity::Violation,
            Some(1),
            None
        )]
    );

    let r = audit(clean_claude(&[("a", "get_time"), ("a", "get_time")]));
    assert_eq!(
        found(&r),
        one(ProblemKind::DuplicateCallId, Severity::Violation, 1, "a")
    );
}

/// An empty id or name is no id or name: the runner's parsers refuse both, so the
/// audit must flag them as it flags missing ones.
#[test]
fn an_empty_id_or_tool_name_is_flagged_like_a_missing_one() {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": {"type": "message", "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "id": "", "name": "get_time", "input": {}}]}}));
    ev.extend([request(2, results(&[])), end(2), stop()]);
    assert_eq!(
        found(&audit(ev)),
        vec![(
            ProblemKind::MalformedCall,
            Severity::Violation,
            Some(1),
            None
        )],
        "an empty id"
    );
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": {"type": "message", "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "id": "a", "name": "", "input": {}}]}}));
    ev.extend([request(2, results(&[])), end(2), stop()]);
    let kinds: Vec<ProblemKind> = found(&audit(ev)).into_iter().map(|f| f.0).collect();
    assert!(
        kinds.contains(&ProblemKind::MalformedCall),
        "an empty name: {kinds:?}"
    );
}

#[test]
fn a_chat_call_without_an_id_is_named_by_the_runner() {
    let body = json!({"object": "chat.completion", "choices": [{"message": {"role": "assistant", "content": null,
        "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}, "finish_reason": "tool_calls"}]});
    let mut ev = start("openai-chat", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": body}));
    ev.extend(ran(1, "call_agentbatch_1_0", "get_time", "allow", false));
    ev.push(request(
        2,
        json!([{"role": "tool", "tool_call_id": "call_agentbatch_1_0", "content": "x"}]),
    ));
    ev.push(stop());
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(
            ProblemKind::MalformedCall,
            Severity::Warning,
            1,
            "call_agentbatch_1_0"
        )
    );
}

#[test]
fn every_call_needs_exactly_one_decision() {
    let mut ev = clean_claude(&[("a", "get_time"), ("b", "get_time")]);
    // drop b's tool_call and tool_result: its result was sent undecided
    ev.remove(6);
    ev.remove(5);
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(ProblemKind::NoDecision, Severity::Violation, 1, "b")
    );

    let mut ev = clean_claude(&[("a", "get_time")]);
    let again = ev[4].clone();
    ev.insert(5, again);
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(ProblemKind::DuplicateDecision, Severity::Violation, 1, "a")
    );

    let mut ev = clean_claude(&[("a", "get_time")]);
    ev.insert(5, ran(1, "zz", "get_time", "allow", false)[1].clone());
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(ProblemKind::StrayDecision, Severity::Violation, 1, "zz")
    );

    let mut ev = clean_claude(&[("a", "get_time")]);
    if let Some(o) = ev[4].as_object_mut() {
        o.remove("decision");
    }
    let r = audit(ev);
    assert_eq!(
        found(&r),
        one(ProblemKind::NoDecision, Severity::Violation, 1, "a")
    );
}

#[test]
fn calls_not_run_because_the_task_stopped_are_fine() {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(claude(1, &[("a", "get_time")]));
    ev.push(json!({"event": "stop", "stop_reason": "model_max_tokens"}));
    let r = audit(ev);
    assert!(r.problems.is_empty(), "{r}");

    // started but never decided: the runner always records an outcome, even when a
    // deadline cuts the call off
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(claude(1, &[("a", "get_time")]));
    ev.push(ran(1, "a", "get_time", "allow", false)[0].clone());
    ev.push(stop());
    assert_eq!(
        found(&audit(ev.clone())),
        one(ProblemKind::NoDecision, Severity::Violation, 1, "a")
    );
    // ... unless the run was killed
    ev.pop();
    let r = audit(ev);
    assert_eq!(r.violations(), 0, "{r}");
    assert_eq!(r.warnings(), 2);

    // a call cut off by the deadline is decided as interrupted
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(claude(1, &[("a", "get_time")]));
    ev.push(ran(1, "a", "get_time", "allow", false)[0].clone());
    ev.push(json!({"event": "tool_result", "turn": 1, "id": "a", "name": "get_time", "interrupted": "time_limit reached"}));
    ev.push(stop());
    assert!(audit(ev).problems.is_empty());
}

#[test]
fn results_must_answer_each_call_once_under_its_id() {
    let mut ev = clean_claude(&[("a", "get_time"), ("b", "get_time")]);
    ev[7] = request(2, results(&["a"]));
    assert_eq!(
        found(&audit(ev.clone())),
        one(ProblemKind::MissingResult, Severity::Violation, 1, "b")
    );

    ev[7] = request(2, results(&["a", "b", "b"]));
    assert_eq!(
        found(&audit(ev.clone())),
        one(ProblemKind::DuplicateResult, Severity::Violation, 1, "b")
    );

    ev[7] = request(2, results(&["a", "b", "c"]));
    assert_eq!(
        found(&audit(ev.clone())),
        one(ProblemKind::OrphanResult, Severity::Violation, 1, "c")
    );

    // the wrong id: b unanswered, and a result for an id never called
    ev[7] = request(2, results(&["a", "B"]));
    assert_eq!(
        found(&audit(ev)),
        vec![
            (
                ProblemKind::MissingResult,
                Severity::Violation,
                Some(1),
                Some("b".into())
            ),
            (
                ProblemKind::OrphanResult,
                Severity::Violation,
                Some(1),
                Some("B".into())
            ),
        ]
    );
}

#[test]
fn a_result_before_any_call_is_an_orphan() {
    let mut ev = start("anthropic", &["get_time"]);
    ev[1]["new_messages"] = results(&["x"]);
    ev.extend([end(1), stop()]);
    assert_eq!(
        found(&audit(ev)),
        one(ProblemKind::OrphanResult, Severity::Violation, 1, "x")
    );
}

#[test]
fn anthropic_results_come_first_in_one_user_message() {
    let mut ev = clean_claude(&[("a", "get_time"), ("b", "get_time")]);
    ev[7] = request(
        2,
        json!([{"role": "user", "content": [
            {"type": "text", "text": "note"},
            {"type": "tool_result", "tool_use_id": "a", "content": "x"}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b", "content": "x"}]}]),
    );
    let r = audit(ev);
    assert_eq!(
        found(&r),
        vec![
            (
                ProblemKind::MisplacedResult,
                Severity::Violation,
                Some(1),
                Some("a".into())
            ),
            (
                ProblemKind::MisplacedResult,
                Severity::Violation,
                Some(1),
                Some("b".into())
            ),
        ]
    );
    assert!(r.problems[0]
        .message
        .contains("must begin with the results"));
    assert!(r.problems[1].message.contains("message 2"));

    // text after the results is fine
    let mut ev = clean_claude(&[("a", "get_time")]);
    if let Some(blocks) = ev[5]["new_messages"][0]["content"].as_array_mut() {
        blocks.push(json!({"type": "text", "text": "[agentbatch] Budget"}));
    }
    assert!(audit(ev).problems.is_empty());
}

#[test]
fn chat_tool_messages_follow_the_assistant_directly() {
    let body = json!({"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "k", "type": "function", "function": {"name": "get_time", "arguments": ""}}]}, "finish_reason": "tool_calls"}]});
    let mut ev = start("openai-chat", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": body}));
    ev.extend(ran(1, "k", "get_time", "allow", false));
    ev.push(request(
        2,
        json!([{"role": "user", "content": "hurry"}, {"role": "tool", "tool_call_id": "k", "content": "x"}]),
    ));
    ev.push(stop());
    assert_eq!(
        found(&audit(ev)),
        one(ProblemKind::MisplacedResult, Severity::Violation, 1, "k")
    );
}

#[test]
fn a_refused_response_only_warns_and_its_retry_is_checked() {
    let mut ev = start("anthropic", &["get_time"]);
    ev.push(json!({"event": "response", "turn": 1, "body": {"type": "message", "stop_reason": "tool_use",
        "content": [{"type": "tool_use", "name": "get_time", "input": {}}]}}));
    ev.push(json!({"event": "settle", "turn": 1}));
    ev.push(json!({"event": "attempt_failed", "turn": 1, "error": "malformed response: content[0] (tool_use) has no string `id`"}));
    ev.push(json!({"event": "request", "turn": 1, "attempt": 2, "new_messages": []}));
    ev.push(claude(1, &[("a", "get_time")]));
    ev.extend(ran(1, "a", "get_time", "allow", false));
    ev.extend([request(2, results(&["a"])), end(2), stop()]);
    let r = audit(ev);
    assert_eq!(
        found(&r),
        vec![(ProblemKind::MalformedCall, Severity::Warning, Some(1), None)]
    );
    assert!(r.problems[0].message.contains("refused the response"));
    assert_eq!((r.turns, r.calls), (2, 1));
}

#[test]
fn the_protocol_is_told_from_the_url_or_the_body() {
    for (url, body) in [
        (
            json!("http://h/v1/chat/completions"),
            json!({"choices": [{"message": {"tool_calls": [{"id": "k", "function": {"name": "get_time", "arguments": "{}"}}]}}]}),
        ),
        (
            Value::Null,
            json!({"output": [{"type": "function_call", "call_id": "k", "name": "get_time", "arguments": "{}"}]}),
        ),
    ] {
        let ev = vec![
            json!({"event": "request", "turn": 1, "new_messages": [], "params": {"url": url, "tools": [{"name": "get_time"}]}}),
            json!({"event": "response", "turn": 1, "body": body}),
            stop(),
        ];
        let r = audit(ev);
        assert!(r.protocol.is_some());
        assert_eq!(r.calls, 1);
        assert!(r.problems.is_empty(), "{r}");
    }
}

#[test]
fn a_cut_off_last_line_warns_and_a_broken_line_elsewhere_fails() {
    let text: String = clean_claude(&[("a", "get_time")])
        .iter()
        .map(|e| format!("{e}\n"))
        .collect();
    let cut = &text[..text.len() - 20];
    let r = audit_lines(cut).expect("a cut-off last line is not an error");
    assert_eq!(r.violations(), 0);
    let last = r.problems.last().expect("a warning");
    assert_eq!(last.kind, ProblemKind::Transcript);
    assert!(last.message.contains("ends mid-line"));
    assert_eq!(last.line, Some(8));

    let broken = text.replacen("\n", "\n{oops\n", 1);
    let e = audit_lines(&broken).unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.detail.contains("not JSON"), "{e}");

    let e = audit_lines("{\"ts\": 1}\n").unwrap_err();
    assert!(e.detail.contains("not a transcript event"), "{e}");
}

#[test]
fn the_report_prints_one_line_per_problem_and_a_summary() {
    let mut ev = clean_claude(&[("a", "get_time"), ("b", "nope")]);
    ev[6]["is_error"] = json!(true);
    ev[7] = request(2, results(&["b"]));
    let r = audit(ev);
    let text = r.render();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].starts_with("turn 1, call a: missing_result: turn 2's request carries no result"),
        "{text}"
    );
    assert!(lines[0].ends_with("[line 8]"), "{text}");
    assert!(
        lines[1]
            .starts_with("turn 1, call b: undeclared_tool (warning): the model called \"nope\""),
        "{text}"
    );
    assert_eq!(
        lines[2],
        "2 turns, 2 tool calls: 1 protocol violation, 1 warning"
    );
}

#[test]
fn every_kind_names_its_check() {
    for k in [
        ProblemKind::UndeclaredTool,
        ProblemKind::MalformedCall,
        ProblemKind::NoDecision,
        ProblemKind::MissingResult,
    ] {
        assert!(k.check().is_some());
    }
    assert_eq!(ProblemKind::Transcript.check(), None);
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let e = audit_file(Path::new("/nonexistent/t.jsonl")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/t.jsonl"), "{e}");
}

#[test]
fn events_it_does_not_know_and_odd_values_change_nothing() {
    let plain = audit(clean_claude(&[("a", "get_time")]));
    let mut ev = clean_claude(&[("a", "get_time")]);
    let last = ev.len() - 1;
    // A newer agentbatch's event, a known one with values of the wrong type, and a stop
    // whose reason this version does not know.
    ev.insert(2, json!({"event": "teleport", "turn": 1}));
    ev.insert(3, json!({"event": "budget_wait", "reason": 7}));
    ev[last + 2] = json!({"event": "stop", "stop_reason": "from_the_future"});
    let r = audit(ev);
    assert!(r.problems.is_empty(), "{r}");
    assert!(r.finished);
    assert_eq!((r.turns, r.calls), (plain.turns, plain.calls));
}
