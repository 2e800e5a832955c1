//! What the compiler cannot check of a protocol's wire: that the registry gives each
//! protocol its own, and that the parts of one wire agree with each other (a tool call
//! read from the answer its protocol sends is found again in the history, in the
//! transcript reader and by compaction; the results it writes are found again).

use serde_json::{json, Value};

use super::*;
use crate::model::ToolResult;

/// An answer of `p` calling tool `t` with id `c1`, as the provider sends it. A new
/// protocol must add its own here (the match is exhaustive).
fn answer_calling_t(p: Protocol) -> Value {
    match p {
        Protocol::Anthropic => json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "tool_use", "id": "c1", "name": "t", "input": {"x": 1}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}
        }),
        Protocol::OpenaiResponses => json!({
            "id": "resp_1", "object": "response", "status": "completed",
            "output": [{"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "t", "arguments": "{\"x\":1}"}],
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
        }),
        Protocol::OpenaiChat => json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{\"x\":1}"}}]
            }}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        }),
    }
}

#[test]
fn the_registry_gives_each_protocol_its_own_wire() {
    for p in Protocol::ALL {
        assert_eq!(wire(p).protocol(), p);
        assert_eq!(
            RECOGNITION.iter().filter(|q| **q == p).count(),
            1,
            "{p} is recognised once among logged answers"
        );
    }
}

#[test]
fn every_wire_reads_back_the_tool_call_its_answer_carries() {
    for p in Protocol::ALL {
        let w = wire(p);
        let params = Params {
            model: "m".into(),
            tools: vec![
                json!({"name": "t", "description": "d", "input_schema": {"type": "object"}}),
            ],
            ..Params::default()
        };
        // The request declares the tool and carries the first message.
        let tools = w.declarations(&params.tools);
        assert_eq!(tools.len(), 1, "{p}");
        let first = w.first_message("go", false);
        let history = vec![Cow::Borrowed(&first)];
        let parts = BodyParts {
            params: &params,
            max_tokens_field: "max_tokens",
            system_marker: None,
            tools: &tools,
            max_tokens: 100,
        };
        let body: Value = serde_json::from_slice(&w.body(&parts, Entries::Values(&history)))
            .expect("the body is JSON");
        assert!(body.to_string().contains("\"t\""), "{p}: {body}");
        assert!(body.to_string().contains("\"go\""), "{p}: {body}");
        // The answer: read, recognised, logged, and its call named in the history.
        let answer = answer_calling_t(p);
        let parsed = w.parse(&answer, 1).expect("the answer reads");
        assert_eq!(parsed.calls.len(), 1, "{p}");
        assert_eq!(
            (parsed.calls[0].id.as_str(), parsed.calls[0].name.as_str()),
            ("c1", "t")
        );
        assert_eq!(parsed.calls[0].input, json!({"x": 1}), "{p}");
        assert!(parsed.usage.is_some(), "{p}");
        assert_eq!(answer_protocol(&answer), Some(p));
        let logged = w.logged_calls(&answer, 1);
        assert_eq!(logged.len(), 1, "{p}");
        assert_eq!(logged[0].id.as_deref(), Some("c1"));
        assert_eq!(logged[0].args, Args::Object, "{p}");
        assert!(w
            .output_messages(&answer)
            .as_array()
            .is_some_and(|a| !a.is_empty()));
        let mut names = Vec::new();
        for item in &parsed.items {
            w.call_names(item, &mut |id, name| names.push((id.clone(), name.clone())));
        }
        assert_eq!(names, vec![(json!("c1"), json!("t"))], "{p}");
        // The results: found by compaction and by the transcript reader, editable.
        let mut entries = w.results(&[ToolResult {
            id: "c1".into(),
            content: "out".into(),
            is_error: false,
            images: Vec::new(),
        }]);
        let mut found = Vec::new();
        for e in &entries {
            w.result_contents(e, &mut |block, id, content| {
                found.push((block, id.clone(), content.clone()))
            });
        }
        assert_eq!(found.len(), 1, "{p}");
        assert_eq!((&found[0].1, &found[0].2), (&json!("c1"), &json!("out")));
        let slot = w.result_content_mut(&mut entries[0], found[0].0);
        assert_eq!(slot.map(|v| v.take()), Some(json!("out")), "{p}");
        let lines: Vec<(usize, Value)> = w
            .results(&[ToolResult {
                id: "c1".into(),
                content: "out".into(),
                is_error: false,
                images: Vec::new(),
            }])
            .into_iter()
            .map(|e| (7, e))
            .collect();
        let returned = w.logged_results(&lines);
        assert_eq!(returned.len(), 1, "{p}");
        assert_eq!(
            (returned[0].id.as_deref(), returned[0].line),
            (Some("c1"), 7)
        );
        assert!(returned[0].misplaced.is_none(), "{p}");
        // A note goes after the results; a summary goes after the first message.
        let mut history = vec![first.clone()];
        history.extend(parsed.items);
        assert!(
            w.append_user_text(&mut history, "note").is_none(),
            "{p}: after the answer"
        );
        history.extend(lines.into_iter().map(|(_, e)| e));
        assert!(w.append_user_text(&mut history, "note").is_some(), "{p}");
        let mut summarized = vec![first.clone()];
        w.place_summary(&mut summarized, "summary".into());
        assert!(json!(summarized).to_string().contains("summary"), "{p}");
    }
}

#[test]
fn every_wire_has_its_own_headers_and_stream() {
    for p in Protocol::ALL {
        let w = wire(p);
        let auth = Auth {
            api_key: Some("k"),
            anthropic_version: "2023-06-01",
            anthropic_beta: None,
        };
        let headers = w.headers(&auth).expect("headers");
        assert!(
            headers.iter().any(|(_, v)| v.is_sensitive()),
            "{p}: the key is sent, and marked sensitive"
        );
        let own = matches!(
            (p, w.assembler()),
            (Protocol::Anthropic, Assembler::Messages(_))
                | (Protocol::OpenaiResponses, Assembler::Responses(_))
                | (Protocol::OpenaiChat, Assembler::Chat(_))
        );
        assert!(own, "{p}: its own stream assembler");
        assert_eq!(
            w.native_context(&Default::default(), None).is_some(),
            p.facts().native_context,
            "{p}: native context management as its facts say"
        );
    }
}

/// The exports read a transcript's history back: each wire finds the prompt in the first
/// message it builds (plain or in blocks), and no text in the tool results it writes.
#[test]
fn every_wire_reads_back_the_text_of_its_first_message_and_none_of_its_results() {
    for p in Protocol::ALL {
        let w = wire(p);
        for blocks in [false, true] {
            let first = w.first_message("fix it", blocks);
            let read = w.logged_text(&first);
            assert_eq!(
                read,
                Some(LoggedText {
                    role: "user".into(),
                    text: "fix it".into()
                }),
                "{p}, blocks {blocks}: {first}"
            );
        }
        let results = w.results(&[ToolResult {
            id: "c1".into(),
            content: "the result".into(),
            is_error: false,
            images: Vec::new(),
        }]);
        assert!(!results.is_empty(), "{p}");
        for r in &results {
            assert_eq!(w.logged_text(r), None, "{p}: a result is not text: {r}");
        }
        assert_eq!(
            w.logged_reasoning(&answer_calling_t(p)),
            None,
            "{p}: no reasoning shown"
        );
    }
}

/// Each protocol's reasoning as its answers show it.
#[test]
fn every_wire_reads_the_reasoning_its_answers_show() {
    let shown = |p: Protocol| match p {
        Protocol::Anthropic => json!({"content": [
            {"type": "thinking", "thinking": "first", "signature": "s"},
            {"type": "redacted_thinking", "data": "x"},
            {"type": "thinking", "thinking": "second", "signature": "s"},
            {"type": "text", "text": "answer"}
        ]}),
        Protocol::OpenaiResponses => json!({"output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "first"}]},
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "second"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "answer"}]}
        ]}),
        Protocol::OpenaiChat => json!({"choices": [{"message": {
            "role": "assistant", "content": "answer", "reasoning_content": "first", "reasoning": "second"
        }}]}),
    };
    for p in Protocol::ALL {
        assert_eq!(
            wire(p).logged_reasoning(&shown(p)).as_deref(),
            Some("first\n\nsecond"),
            "{p}"
        );
    }
}
