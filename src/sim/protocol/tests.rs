//! What the compiler cannot catch about a protocol's parts: that the registry hands out
//! the protocol asked for, and that its parts agree with each other (a request built for
//! it passes its checks and is read as it was written, the answer it renders is
//! streamed, reported and replayed in the same protocol's shape) and not with another
//! protocol's (a request built for one is refused by every other's checks).

use axum::http::{HeaderMap, HeaderValue};
use serde_json::{json, Value};

use super::{served, Served, TestHistory};
use crate::model::Protocol;
use crate::sim::cache::CacheUse;
use crate::sim::rng::Rng;
use crate::sim::script::{Block, MidStream, ScriptTurn, ToolUseScript};
use crate::sim::sse::Splitter;

const MAX_TOKENS: u64 = 100;

/// A first request as a client of `p` writes it: one user message, one tool.
fn first_request(p: Protocol) -> Value {
    let schema = json!({"type": "object", "properties": {}});
    match p {
        Protocol::Anthropic => json!({
            "model": "claude-sonnet-4-5", "max_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": "What time is it?"}],
            "tools": [{"name": "get_time", "description": "The time.", "input_schema": schema}],
        }),
        Protocol::OpenaiResponses => json!({
            "model": "gpt-5", "max_output_tokens": MAX_TOKENS,
            "input": [{"role": "user", "content": "What time is it?"}],
            "tools": [{"type": "function", "name": "get_time", "parameters": schema}],
        }),
        Protocol::OpenaiChat => json!({
            "model": "gpt-5", "max_completion_tokens": MAX_TOKENS,
            "messages": [{"role": "user", "content": "What time is it?"}],
            "tools": [{"type": "function", "function": {"name": "get_time", "parameters": schema}}],
        }),
    }
}

/// The next request as a client of `p` writes it: the answer sent back, then the call's
/// result.
fn next_request(p: Protocol, first: &Value, answer: &Value) -> Value {
    let mut next = first.clone();
    match p {
        Protocol::Anthropic => {
            let call = answer["content"][1]["id"].clone();
            let messages = next["messages"].as_array_mut().expect("messages");
            messages.push(json!({"role": "assistant", "content": answer["content"]}));
            messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call, "content": "12:00"}]}));
        }
        Protocol::OpenaiResponses => {
            let output = answer["output"].as_array().expect("output");
            let call = output.last().expect("a call")["call_id"].clone();
            let input = next["input"].as_array_mut().expect("input");
            // Sent back without their ids, as the runner does (no store).
            input.extend(output.iter().cloned().map(|mut item| {
                item.as_object_mut().map(|o| o.remove("id"));
                item
            }));
            input.push(json!({"type": "function_call_output", "call_id": call, "output": "12:00"}));
        }
        Protocol::OpenaiChat => {
            let message = answer["choices"][0]["message"].clone();
            let call = message["tool_calls"][0]["id"].clone();
            let messages = next["messages"].as_array_mut().expect("messages");
            messages.push(message);
            messages.push(json!({"role": "tool", "tool_call_id": call, "content": "12:00"}));
        }
    }
    next
}

/// The credentials a client of `p` sends.
fn headers(p: Protocol) -> HeaderMap {
    let mut h = HeaderMap::new();
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    match p {
        Protocol::Anthropic => {
            set(&mut h, "x-api-key", "sk-test");
            set(&mut h, "anthropic-version", "2023-06-01");
        }
        Protocol::OpenaiResponses | Protocol::OpenaiChat => {
            set(&mut h, "authorization", "Bearer sk-test");
        }
    }
    h
}

fn turn() -> ScriptTurn {
    ScriptTurn {
        content: vec![
            Block::Text("Let me look.".into()),
            Block::ToolUse(ToolUseScript {
                name: "get_time".into(),
                input: json!({}),
                id: None,
                arguments: None,
            }),
        ],
        ..ScriptTurn::default()
    }
}

#[test]
fn the_registry_serves_each_protocol_on_its_own_path() {
    let mut paths = std::collections::HashSet::new();
    for p in Protocol::ALL {
        let s = served(p);
        assert_eq!(s.protocol(), p, "served({p:?}) serves another protocol");
        assert!(paths.insert(s.path()), "{p:?} shares its path {}", s.path());
        assert!(!s.request_id_header().is_empty());
    }
}

#[test]
fn a_request_is_checked_read_answered_streamed_and_replayed_in_its_own_protocol() {
    for p in Protocol::ALL {
        let s: &dyn Served = served(p);
        let version = s
            .check_key(&headers(p))
            .expect("the client's credentials pass");
        let refused = s
            .check_key(&HeaderMap::new())
            .err()
            .map(|r| r.status.as_u16());
        assert_eq!(refused, Some(401), "{p:?}");
        let first = first_request(p);
        let empty = TestHistory::default();
        assert_eq!(s.check_request(&first, &version, &empty), Ok(()), "{p:?}");
        // What the request says, read back.
        assert_eq!(s.history(&first).len(), 1, "{p:?}");
        assert_eq!(s.steps_in(s.history(&first)), 0, "{p:?}");
        assert_eq!(s.max_tokens(&first), MAX_TOKENS, "{p:?}");
        assert!(!s.tools_off(&first), "{p:?}");
        let tools = first["tools"].as_array().expect("tools");
        let (name, schema) = s.declared_tool(&tools[0]);
        assert_eq!(name, Some(&json!("get_time")), "{p:?}");
        assert!(schema.is_some_and(Value::is_object), "{p:?}");
        // The answer, whole and streamed.
        let answer = s.render(&turn(), &first, 400, "k", 0, CacheUse::default());
        let output = s.output_tokens(&answer).expect("usage");
        assert!((1..=MAX_TOKENS).contains(&output), "{p:?}: {output}");
        let events = s.events(&answer, &first, &mut Splitter::new("k", 0));
        let data: String = events.iter().map(|e| e.data.as_str()).collect();
        // The text comes in pieces; a call's name whole.
        assert!(data.contains("\"get_time\""), "{p:?}");
        for e in events.iter().filter(|e| e.data != "[DONE]") {
            let parsed: Result<Value, _> = serde_json::from_str(&e.data);
            assert!(parsed.is_ok(), "{p:?}: {}", e.data);
        }
        // Sent back, it replays what was sent and asks for the next step.
        let sent = s.replayable(&answer, &first).expect("a replayable answer");
        let history = TestHistory([(0, sent)].into());
        let next = next_request(p, &first, &answer);
        assert_eq!(s.check_request(&next, &version, &history), Ok(()), "{p:?}");
        assert_eq!(s.steps_in(s.history(&next)), 1, "{p:?}");
        // An answer that differs from the one sent is refused as a changed replay.
        let mut other = turn();
        other.content[0] = Block::Text("Something else.".into());
        let changed = s.render(&other, &first, 400, "k", 0, CacheUse::default());
        let changed = next_request(p, &first, &changed);
        assert!(
            s.check_request(&changed, &version, &history).is_err(),
            "{p:?}"
        );
    }
}

#[test]
fn a_request_built_for_one_protocol_is_refused_by_the_others() {
    for p in Protocol::ALL {
        for q in Protocol::ALL.into_iter().filter(|q| *q != p) {
            let checked =
                served(q).check_request(&first_request(p), "2023-06-01", &TestHistory::default());
            assert!(checked.is_err(), "{q:?} accepts a request built for {p:?}");
        }
    }
}

#[test]
fn errors_headers_and_chaos_parts_are_in_the_protocols_shape() {
    for p in Protocol::ALL {
        let s = served(p);
        let body = s.error_body(429, "rate_limit_error", None, "slow down", "req_1");
        assert!(body.to_string().contains("slow down"), "{p:?}: {body}");
        let wait = std::time::Duration::from_millis(1500);
        assert!(s
            .retry_after(wait)
            .iter()
            .any(|(k, v)| k == "retry-after" && v == "2"));
        assert!(
            !s.window_headers("requests", 60, 1, wait).is_empty(),
            "{p:?}"
        );
        assert!(!s.requests_used_up(wait).is_empty(), "{p:?}");
        assert!((400..600).contains(&s.untyped_error_status()), "{p:?}");
        let kinds = s.chaos_mid_stream_kinds();
        for k in [MidStream::Error, MidStream::Cut, MidStream::Stall] {
            assert!(kinds.contains(&k), "{p:?} lacks {k:?}");
        }
        assert!(!s.chaos_fault_kinds().is_empty(), "{p:?}");
        let shaped: Value = serde_json::from_str(s.chaos_shaped_body()).expect("JSON");
        assert!(shaped.is_object(), "{p:?}");
        let mut t = turn();
        s.chaos_odd_stop(&mut Rng::new(1, "k", 0, "turn"), &mut t);
        assert!(!t.content.is_empty(), "{p:?}");
    }
}
