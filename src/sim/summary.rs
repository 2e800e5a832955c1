//! The simulated model's side of summarizing: it recognises the runner's summary
//! request, answers it with a summary (not a script step), and keeps counting script
//! steps across the shortened history that follows. Its summary ends with a marker of
//! how many steps it covers and the call ids of the last one, as a real model's summary
//! carries the state of its task: a later request's kept turns are placed by those ids.

use serde_json::Value;

use super::marker::{marker, marker_text};
use super::protocol::served;
use super::script::{Block, ScriptTurn};
use crate::model::Protocol;
use crate::vocab::context::{is_client_entry, turn_starts, SUMMARY_REQUEST};

/// The request's history: messages, or input items.
fn entries(protocol: Protocol, request: &Value) -> &[Value] {
    served(protocol).history(request)
}

/// The texts of an entry: its content string, or its text parts.
fn texts(e: &Value) -> Vec<&str> {
    match &e["content"] {
        Value::String(s) => vec![s.as_str()],
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => Vec::new(),
    }
}

/// The calls (id, tool name) of the model entries in `turn`, in every protocol's shape.
fn calls(turn: &[Value]) -> Vec<(&str, &str)> {
    fn add<'a>(out: &mut Vec<(&'a str, &'a str)>, id: &'a Value, name: &'a Value) {
        if let (Some(i), Some(n)) = (id.as_str(), name.as_str()) {
            out.push((i, n));
        }
    }
    let mut out = Vec::new();
    for e in turn.iter().take_while(|e| !is_client_entry(e)) {
        if e["type"] == "function_call" {
            add(&mut out, &e["call_id"], &e["name"]);
        }
        for c in e["tool_calls"].as_array().into_iter().flatten() {
            add(&mut out, &c["id"], &c["function"]["name"]);
        }
        for b in e["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                add(&mut out, &b["id"], &b["name"]);
            }
        }
    }
    out
}

/// The call ids of the model entries in `turn`.
fn call_ids(turn: &[Value]) -> Vec<&str> {
    calls(turn).into_iter().map(|(id, _)| id).collect()
}

/// Script steps among `entries`, counted the way the protocol counts them.
fn steps_in(protocol: Protocol, entries: &[Value]) -> usize {
    served(protocol).steps_in(entries)
}

/// The script step a request asks for: its model turns, from `base`.
pub fn step(protocol: Protocol, request: &Value, base: usize) -> usize {
    base + steps_in(protocol, entries(protocol, request))
}

/// Whether the request asks for a summary: its last client entry ends with the
/// runner's instruction.
pub fn wanted(protocol: Protocol, request: &Value) -> bool {
    entries(protocol, request)
        .last()
        .filter(|e| is_client_entry(e))
        .is_some_and(|e| texts(e).last() == Some(&SUMMARY_REQUEST))
}

/// The step of the first model turn in the request's history: 0, or after a summary
/// the step its kept turns began at, or after a compaction item the step it opened.
pub fn base(protocol: Protocol, request: &Value) -> usize {
    let h = entries(protocol, request);
    if let Some(c) = h.iter().rposition(|e| e["type"] == "compaction") {
        let steps = h[c]["encrypted_content"]
            .as_str()
            .and_then(marker)
            .map_or(0, |(s, _)| s);
        return steps.saturating_sub(steps_in(protocol, &h[..c]));
    }
    // The head: the client entries before the first model turn.
    let head = h.iter().take_while(|e| is_client_entry(e));
    let Some((steps, last)) = head.flat_map(texts).find_map(marker) else {
        return 0;
    };
    if last.is_empty() {
        return steps;
    }
    // The kept turn that was the last one summarized is step `steps - 1`.
    turn_starts(h)
        .iter()
        .find(|&&s| call_ids(&h[s..]) == last)
        .and_then(|&s| steps.checked_sub(1 + steps_in(protocol, &h[..s])))
        .unwrap_or(steps)
}

/// The answer to a summary request at `step` (the steps played so far): which tools
/// the visible history called, how often, the latest result's start, and the marker.
pub fn turn(
    protocol: Protocol,
    request: &Value,
    step: usize,
    scripted: Option<&ScriptTurn>,
) -> ScriptTurn {
    let h = entries(protocol, request);
    let starts = turn_starts(h);
    let mut names: Vec<(&str, usize)> = Vec::new();
    for &s in &starts {
        for (_, n) in calls(&h[s..]) {
            match names.iter_mut().find(|(m, _)| *m == n) {
                Some((_, c)) => *c += 1,
                None => names.push((n, 1)),
            }
        }
    }
    let tools: Vec<String> = names.iter().map(|(n, c)| format!("{n} x{c}")).collect();
    let last = last_calls(h, &starts);
    let text = format!(
        "Summary of the first {step} steps (simulated model). Tools called in the history I was shown: {}. {}",
        if tools.is_empty() {
            "none".to_string()
        } else {
            tools.join(", ")
        },
        marker_text(step, &last)
    );
    let Some(scripted) = scripted else {
        return ScriptTurn {
            content: vec![Block::Text(text)],
            ..ScriptTurn::default()
        };
    };
    let mut t = scripted.clone();
    if let Some(Block::Text(last)) = t
        .content
        .iter_mut()
        .rev()
        .find(|b| matches!(b, Block::Text(_)))
    {
        last.push(' ');
        last.push_str(&marker_text(step, &last_calls(h, &starts)));
    }
    t
}

/// The call ids of the request's last model turn.
fn last_calls<'a>(h: &'a [Value], starts: &[usize]) -> Vec<&'a str> {
    starts.last().map_or(Vec::new(), |&s| call_ids(&h[s..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn markers_round_trip_and_place_the_kept_turns() {
        assert_eq!(
            marker("x [agentbatch-sim summary: steps=7 calls=a,b] y"),
            Some((7, vec!["a", "b"]))
        );
        assert_eq!(
            marker("[agentbatch-sim summary: steps=3 calls=]"),
            Some((3, vec![]))
        );
        assert_eq!(marker("[agentbatch-sim summary: steps=x calls=]"), None);
        let summary = "s [agentbatch-sim summary: steps=5 calls=c4]";
        let call = |id: &str| json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "t", "input": {}}]});
        let result = |id: &str| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "r"}]});
        // Kept turns: steps 3 and 4, then step 5 answered.
        let req = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "task"}, {"type": "text", "text": summary}]},
            call("c3"), result("c3"), call("c4"), result("c4"), call("c5"), result("c5")
        ]});
        assert_eq!(base(Protocol::Anthropic, &req), 3);
        // No kept turn: the next step is the sixth.
        let req = json!({"messages": [{"role": "user", "content": summary}]});
        assert_eq!(base(Protocol::Anthropic, &req), 5);
        assert_eq!(
            base(
                Protocol::Anthropic,
                &json!({"messages": [{"role": "user", "content": "task"}]})
            ),
            0
        );
    }

    #[test]
    fn summary_requests_end_with_the_instruction() {
        let ask = json!({"messages": [{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": "r"},
            {"type": "text", "text": SUMMARY_REQUEST}]}]});
        assert!(wanted(Protocol::Anthropic, &ask));
        let chat = json!({"messages": [{"role": "user", "content": SUMMARY_REQUEST}, {"role": "assistant", "content": "no"}]});
        assert!(!wanted(Protocol::OpenaiChat, &chat));
        let resp =
            json!({"input": [{"type": "message", "role": "user", "content": SUMMARY_REQUEST}]});
        assert!(wanted(Protocol::OpenaiResponses, &resp));
    }
}
