//! Anthropic Messages events into the message a non-streaming call returns
//! (PROTOCOLS.md A11): `message_start` gives the message and the input side of the
//! usage, each content block is built from its start and deltas in place (so its fields
//! keep the order the API gives them), tool input JSON is parsed once at the block's
//! stop, `message_delta` sets the stop fields and the cumulative usage, and
//! `message_stop` ends it. Pings and unknown events are ignored.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::model::protocol::events::{error_of, json, Broken, Step};

/// A message under construction.
#[derive(Default)]
pub struct Message {
    message: Option<Map<String, Value>>,
    blocks: BTreeMap<u64, Block>,
}

/// One content block, by its index.
struct Block {
    value: Map<String, Value>,
    /// The `partial_json` pieces of a tool input, joined.
    input_json: Option<String>,
    stopped: bool,
}

/// Appends `piece` to the string field `field` of `block` (made empty when missing).
fn append(block: &mut Map<String, Value>, field: &str, piece: &str) {
    match block.get_mut(field) {
        Some(Value::String(s)) => s.push_str(piece),
        _ => {
            block.insert(field.to_string(), Value::String(piece.to_string()));
        }
    }
}

impl Message {
    pub(in crate::model) fn feed(&mut self, name: &str, data: &str) -> Result<Step, Broken> {
        let v = json(data)?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(name);
        let index = || {
            v.get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| Broken::from(format!("{kind} has no `index`")))
        };
        match kind {
            "message_start" => {
                let m = v
                    .get("message")
                    .and_then(Value::as_object)
                    .ok_or("message_start has no `message` object")?;
                self.message = Some(m.clone());
                Ok(Step::More)
            }
            "content_block_start" => {
                let block = v
                    .get("content_block")
                    .and_then(Value::as_object)
                    .ok_or("content_block_start has no `content_block` object")?;
                let i = index()?;
                if self.blocks.contains_key(&i) {
                    return Err(format!("content block {i} started twice").into());
                }
                self.blocks.insert(
                    i,
                    Block {
                        value: block.clone(),
                        input_json: None,
                        stopped: false,
                    },
                );
                Ok(Step::More)
            }
            "content_block_delta" => self.block_delta(index()?, &v),
            "content_block_stop" => self.block_stop(index()?),
            "message_delta" => self.message_delta(&v),
            "message_stop" => self.message_stop(),
            "error" => Err(error_of(v.get("error").unwrap_or(&v))),
            // ping, and events this version does not know.
            _ => Ok(Step::More),
        }
    }
    /// A piece of a block: text, thinking, a signature, tool input JSON, a citation.
    fn block_delta(&mut self, i: u64, v: &Value) -> Result<Step, Broken> {
        let block = self
            .blocks
            .get_mut(&i)
            .ok_or_else(|| format!("a delta for content block {i}, which never started"))?;
        if block.stopped {
            return Err(format!("a delta for content block {i} after it stopped").into());
        }
        let delta = v.get("delta").unwrap_or(&Value::Null);
        let text = |f: &str| delta.get(f).and_then(Value::as_str).unwrap_or_default();
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => append(&mut block.value, "text", text("text")),
            Some("thinking_delta") => append(&mut block.value, "thinking", text("thinking")),
            Some("signature_delta") => append(&mut block.value, "signature", text("signature")),
            Some("input_json_delta") => block
                .input_json
                .get_or_insert_with(String::new)
                .push_str(text("partial_json")),
            Some("citations_delta") => {
                let citation = delta.get("citation").cloned().unwrap_or(Value::Null);
                match block.value.get_mut("citations") {
                    Some(Value::Array(list)) => list.push(citation),
                    _ => {
                        block
                            .value
                            .insert("citations".into(), Value::Array(vec![citation]));
                    }
                }
            }
            // A delta type this version does not know: forward compatibility.
            _ => {}
        }
        Ok(Step::Content)
    }

    /// A block is complete: its tool input JSON is parsed once, here.
    fn block_stop(&mut self, i: u64) -> Result<Step, Broken> {
        let block = self
            .blocks
            .get_mut(&i)
            .ok_or_else(|| format!("content block {i} stopped without starting"))?;
        if let Some(raw) = block.input_json.take() {
            let input = if raw.trim().is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(&raw).map_err(|e| {
                    format!(
                        "content block {i}'s input is not JSON ({e}): {}",
                        crate::text::prefix(&raw, 200)
                    )
                })?
            };
            block.value.insert("input".into(), input);
        }
        block.stopped = true;
        Ok(Step::More)
    }

    /// The stop fields and the cumulative usage.
    fn message_delta(&mut self, v: &Value) -> Result<Step, Broken> {
        let m = self
            .message
            .as_mut()
            .ok_or("message_delta before message_start")?;
        if let Some(delta) = v.get("delta").and_then(Value::as_object) {
            for (k, val) in delta {
                m.insert(k.clone(), val.clone());
            }
        }
        // Cumulative counts: the last value of each wins; absent or null ones
        // keep what message_start said.
        if let Some(usage) = v.get("usage").and_then(Value::as_object) {
            let merged = m
                .entry("usage")
                .or_insert_with(|| Value::Object(Map::new()));
            if !merged.is_object() {
                *merged = Value::Object(Map::new());
            }
            if let Some(merged) = merged.as_object_mut() {
                for (k, val) in usage.iter().filter(|(_, val)| !val.is_null()) {
                    merged.insert(k.clone(), val.clone());
                }
            }
        }
        Ok(Step::More)
    }

    /// The end: the message with its blocks in index order.
    fn message_stop(&mut self) -> Result<Step, Broken> {
        let mut m = self
            .message
            .take()
            .ok_or("message_stop without message_start")?;
        let mut content = Vec::with_capacity(self.blocks.len());
        for (i, b) in std::mem::take(&mut self.blocks) {
            if !b.stopped {
                return Err(format!("content block {i} never stopped").into());
            }
            content.push(Value::Object(b.value));
        }
        m.insert("content".into(), Value::Array(content));
        Ok(Step::Done(Value::Object(m)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Feeds `(event, data)` pairs; the last step.
    fn run(events: &[(&str, Value)]) -> Result<Step, Broken> {
        let mut m = Message::default();
        let mut last = Step::More;
        for (name, data) in events {
            last = m.feed(name, &data.to_string())?;
        }
        Ok(last)
    }

    fn start() -> (&'static str, Value) {
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [], "model": "claude-x", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 812, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048, "output_tokens": 1}}}),
        )
    }

    fn delta(i: u64, d: Value) -> (&'static str, Value) {
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": i, "delta": d}),
        )
    }

    fn block_start(i: u64, b: Value) -> (&'static str, Value) {
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": b}),
        )
    }

    fn stop(i: u64) -> (&'static str, Value) {
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        )
    }

    fn end(reason: &str) -> [(&'static str, Value); 2] {
        [
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                       "usage": {"output_tokens": 95, "input_tokens": null}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]
    }

    #[test]
    fn thinking_text_and_tool_use_assemble_into_the_non_streaming_message() {
        let mut events = vec![
            start(),
            ("ping", json!({"type": "ping"})),
            block_start(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            ),
            delta(0, json!({"type": "thinking_delta", "thinking": "Let me "})),
            delta(0, json!({"type": "thinking_delta", "thinking": "think."})),
            delta(0, json!({"type": "signature_delta", "signature": "EqQB"})),
            stop(0),
            block_start(1, json!({"type": "redacted_thinking", "data": "opaque"})),
            stop(1),
            block_start(2, json!({"type": "text", "text": ""})),
            // "I'll read é…" with the é and the ellipsis in deltas of their own.
            delta(2, json!({"type": "text_delta", "text": "I'll read "})),
            delta(2, json!({"type": "text_delta", "text": "\u{e9}"})),
            delta(2, json!({"type": "text_delta", "text": "\u{2026}"})),
            stop(2),
            ("future_event", json!({"type": "future_event", "x": 1})),
            block_start(
                3,
                json!({"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {}}),
            ),
            delta(3, json!({"type": "input_json_delta", "partial_json": ""})),
            delta(
                3,
                json!({"type": "input_json_delta", "partial_json": "{\"path\": \"src/l"}),
            ),
            delta(
                3,
                json!({"type": "input_json_delta", "partial_json": "ib.rs\"}"}),
            ),
            stop(3),
            block_start(
                4,
                json!({"type": "tool_use", "id": "toolu_01B", "name": "list_files", "input": {}}),
            ),
            stop(4),
        ];
        events.extend(end("tool_use"));
        let Step::Done(body) = run(&events).unwrap() else {
            panic!("no message")
        };
        let expected = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": "EqQB"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "I'll read \u{e9}\u{2026}"},
                {"type": "tool_use", "id": "toolu_01A", "name": "read_file", "input": {"path": "src/lib.rs"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "list_files", "input": {}}],
            "model": "claude-x", "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 812, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2048, "output_tokens": 95}});
        // Byte for byte: the blocks' fields in the API's order.
        assert_eq!(body.to_string(), expected.to_string());
        let parsed = super::super::messages::parse(&body).unwrap();
        assert_eq!(parsed.calls.len(), 2);
        assert_eq!(parsed.usage.unwrap().usage.output_tokens, 95);
    }

    #[test]
    fn citations_append_and_unknown_deltas_are_ignored() {
        let mut events = vec![
            start(),
            block_start(0, json!({"type": "text", "text": ""})),
            delta(
                0,
                json!({"type": "citations_delta", "citation": {"cited_text": "a"}}),
            ),
            delta(0, json!({"type": "text_delta", "text": "hi"})),
            delta(0, json!({"type": "sparkle_delta", "sparkle": "*"})),
            stop(0),
        ];
        events.extend(end("end_turn"));
        let Step::Done(body) = run(&events).unwrap() else {
            panic!()
        };
        assert_eq!(
            body["content"][0],
            json!({"type": "text", "text": "hi", "citations": [{"cited_text": "a"}]})
        );
    }

    #[test]
    fn a_block_started_twice_or_changed_after_its_stop_is_refused() {
        let twice = [
            start(),
            block_start(0, json!({"type": "text", "text": ""})),
            block_start(0, json!({"type": "text", "text": ""})),
        ];
        assert!(matches!(run(&twice), Err(Broken::Malformed(_))));
        let late = [
            start(),
            block_start(
                0,
                json!({"type": "tool_use", "id": "t", "name": "n", "input": {}}),
            ),
            stop(0),
            delta(0, json!({"type": "input_json_delta", "partial_json": "{}"})),
        ];
        assert!(matches!(run(&late), Err(Broken::Malformed(_))));
    }

    #[test]
    fn an_error_event_and_broken_streams() {
        let e = run(&[
            start(),
            (
                "error",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        ])
        .unwrap_err();
        assert_eq!(
            e,
            Broken::Error {
                error_type: "overloaded_error".into(),
                message: "Overloaded".into()
            }
        );
        let bad_json = run(&[
            start(),
            block_start(
                0,
                json!({"type": "tool_use", "id": "t", "name": "n", "input": {}}),
            ),
            delta(
                0,
                json!({"type": "input_json_delta", "partial_json": "{\"a\":"}),
            ),
            stop(0),
        ]);
        assert!(matches!(bad_json, Err(Broken::Malformed(m)) if m.contains("not JSON")));
        let unstopped = run(&[
            start(),
            block_start(0, json!({"type": "text", "text": ""})),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        assert!(matches!(unstopped, Err(Broken::Malformed(m)) if m.contains("never stopped")));
        assert!(run(&[delta(0, json!({"type": "text_delta", "text": "x"}))]).is_err());
        let mut m = Message::default();
        assert!(matches!(
            m.feed("ping", "not json"),
            Err(Broken::Malformed(_))
        ));
    }
}
