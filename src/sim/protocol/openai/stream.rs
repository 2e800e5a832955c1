//! The OpenAI protocols' streaming shapes: Responses events, each with its
//! `sequence_number`, ending with the whole response object; Chat Completions chunks
//! ending with a `finish_reason`, the usage chunk `stream_options.include_usage` asks
//! for, and `[DONE]`. Delta events carry OpenAI's `obfuscation` filler unless
//! `stream_options.include_obfuscation` is false, as the real API does.

use serde_json::{json, Map, Value};

use crate::sim::sse::{with, Splitter, Sse};

/// OpenAI's words for a server error.
pub(super) const SERVER_ERROR: &str =
    "The server had an error while processing your request. Sorry about that!";

fn obfuscated(request: &Value) -> bool {
    request
        .pointer("/stream_options/include_obfuscation")
        .and_then(Value::as_bool)
        != Some(false)
}

/// Responses events under construction: each gets its type first and the next
/// sequence number last.
struct Events<'a> {
    out: Vec<Sse>,
    split: &'a mut Splitter,
    obfuscate: bool,
}

impl Events<'_> {
    fn push(&mut self, name: &str, fields: Value) {
        let mut event = Map::new();
        event.insert("type".into(), json!(name));
        if let Value::Object(fields) = fields {
            event.extend(fields);
        }
        event.insert("sequence_number".into(), json!(self.out.len()));
        self.out.push(Sse::named(name, &Value::Object(event)));
    }

    /// A delta event per piece of `text`; `fields` go in each, `delta` after them.
    fn deltas(&mut self, name: &str, fields: &Value, text: &str) {
        for piece in self.split.pieces(text) {
            let mut f = with(fields, "delta", json!(piece));
            if self.obfuscate {
                f = with(&f, "obfuscation", json!(self.split.filler()));
            }
            self.push(name, f);
        }
    }
}

/// A Responses answer as its events: `response.created` and `response.in_progress`
/// (the response without output or usage), then per output item
/// `response.output_item.added` (in progress, empty), its parts' or arguments' deltas
/// and done events, `response.output_item.done` (the whole item), and last
/// `response.completed` (`.incomplete`, `.failed` by the status; any other status also
/// ends with `.completed`) carrying the response object exactly as rendered.
pub(super) fn responses(resp: &Value, request: &Value, split: &mut Splitter) -> Vec<Sse> {
    let mut ev = Events {
        out: Vec::new(),
        split,
        obfuscate: obfuscated(request),
    };
    let mut base = resp.clone();
    for (k, v) in [
        ("status", json!("in_progress")),
        ("output", json!([])),
        ("error", Value::Null),
        ("incomplete_details", Value::Null),
        ("usage", Value::Null),
    ] {
        base = with(&base, k, v);
    }
    ev.push("response.created", json!({"response": base}));
    ev.push("response.in_progress", json!({"response": base}));
    let output = resp["output"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for (i, item) in output.iter().enumerate() {
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        let at = json!({"item_id": id, "output_index": i});
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let added = with(
                    &with(item, "status", json!("in_progress")),
                    "content",
                    json!([]),
                );
                ev.push(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
                let parts = item["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                for (k, part) in parts.iter().enumerate() {
                    message_part(&mut ev, &with(&at, "content_index", json!(k)), part);
                }
            }
            Some("function_call") => {
                let added = with(
                    &with(item, "arguments", json!("")),
                    "status",
                    json!("in_progress"),
                );
                ev.push(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
                let arguments = match &item["arguments"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                ev.deltas("response.function_call_arguments.delta", &at, &arguments);
                ev.push(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "name": item["name"], "output_index": i, "arguments": item["arguments"]}),
                );
            }
            Some("reasoning") => {
                let added = with(item, "summary", json!([]));
                ev.push(
                    "response.output_item.added",
                    json!({"output_index": i, "item": added}),
                );
                let parts = item["summary"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                for (s, part) in parts.iter().enumerate() {
                    let at = with(&at, "summary_index", json!(s));
                    let text = part["text"].as_str().unwrap_or("");
                    ev.push(
                        "response.reasoning_summary_part.added",
                        with(&at, "part", with(part, "text", json!(""))),
                    );
                    ev.deltas("response.reasoning_summary_text.delta", &at, text);
                    ev.push(
                        "response.reasoning_summary_text.done",
                        with(&at, "text", json!(text)),
                    );
                    ev.push(
                        "response.reasoning_summary_part.done",
                        with(&at, "part", part.clone()),
                    );
                }
            }
            _ => ev.push(
                "response.output_item.added",
                json!({"output_index": i, "item": item}),
            ),
        }
        ev.push(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
    }
    let last = match resp["status"].as_str() {
        Some("incomplete") => "response.incomplete",
        Some("failed") => "response.failed",
        _ => "response.completed",
    };
    ev.push(last, json!({"response": resp}));
    ev.out
}

/// The events of one content part of a message item: added (empty), deltas, the text
/// done, the part done. Parts other than text and refusal come whole.
fn message_part(ev: &mut Events, at: &Value, part: &Value) {
    let (field, delta, done) = match part.get("type").and_then(Value::as_str) {
        Some("output_text") => (
            "text",
            "response.output_text.delta",
            "response.output_text.done",
        ),
        Some("refusal") => ("refusal", "response.refusal.delta", "response.refusal.done"),
        _ => {
            ev.push(
                "response.content_part.added",
                with(at, "part", part.clone()),
            );
            ev.push("response.content_part.done", with(at, "part", part.clone()));
            return;
        }
    };
    let text = part[field].as_str().unwrap_or("");
    ev.push(
        "response.content_part.added",
        with(at, "part", with(part, field, json!(""))),
    );
    let logprobs = |v: Value| {
        if field == "text" {
            with(&v, "logprobs", json!([]))
        } else {
            v
        }
    };
    ev.deltas(delta, &logprobs(at.clone()), text);
    ev.push(done, logprobs(with(at, field, json!(text))));
    ev.push("response.content_part.done", with(at, "part", part.clone()));
}

/// A chat completion as its chunks: the role, the content in pieces, each tool call
/// (index, id, type and name in its first chunk, `arguments` in pieces after), a chunk
/// with the `finish_reason`, with `include_usage` a chunk with empty `choices` and the
/// usage (and `usage: null` on every other chunk), then `[DONE]`.
pub(super) fn chat(c: &Value, request: &Value, split: &mut Splitter) -> Vec<Sse> {
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let obfuscate = obfuscated(request);
    let head = |choices: Value| {
        json!({
            "id": c["id"], "object": "chat.completion.chunk", "created": c["created"],
            "model": c["model"], "system_fingerprint": c["system_fingerprint"], "choices": choices,
        })
    };
    let mut out = Vec::new();
    let mut chunk = |split: &mut Splitter, delta: Value, finish: &Value| {
        let mut v =
            head(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]));
        if include_usage {
            v = with(&v, "usage", Value::Null);
        }
        if obfuscate {
            v = with(&v, "obfuscation", json!(split.filler()));
        }
        out.push(Sse::data(&v));
    };
    let null = Value::Null;
    let choice = c.pointer("/choices/0").unwrap_or(&null);
    let message = choice.get("message").unwrap_or(&null);
    let content = message.get("content").unwrap_or(&null);
    let first = if content.is_string() {
        json!("")
    } else {
        Value::Null
    };
    chunk(
        split,
        json!({"role": "assistant", "content": first, "refusal": null}),
        &null,
    );
    for p in split.pieces(content.as_str().unwrap_or("")) {
        chunk(split, json!({"content": p}), &null);
    }
    let calls = message["tool_calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (i, call) in calls.iter().enumerate() {
        let mut indexed = Map::new();
        indexed.insert("index".into(), json!(i));
        let arguments = call.pointer("/function/arguments").and_then(Value::as_str);
        let (Value::Object(fields), Some(arguments)) = (call, arguments) else {
            // Not the usual shape (a raw call): in one chunk, as written.
            if let Value::Object(fields) = call {
                indexed.extend(fields.clone());
            }
            let piece = if indexed.len() > 1 {
                Value::Object(indexed)
            } else {
                call.clone()
            };
            chunk(split, json!({"tool_calls": [piece]}), &null);
            continue;
        };
        for (k, v) in fields {
            let v = if k == "function" {
                with(v, "arguments", json!(""))
            } else {
                v.clone()
            };
            indexed.insert(k.clone(), v);
        }
        chunk(split, json!({"tool_calls": [indexed]}), &null);
        for p in split.pieces(arguments) {
            chunk(
                split,
                json!({"tool_calls": [{"index": i, "function": {"arguments": p}}]}),
                &null,
            );
        }
    }
    chunk(
        split,
        json!({}),
        choice.get("finish_reason").unwrap_or(&null),
    );
    if let (true, Some(usage)) = (include_usage, c.get("usage")) {
        out.push(Sse::data(&with(&head(json!([])), "usage", usage.clone())));
    }
    out.push(Sse::done());
    out
}
