//! Chat Completions chunks (PROTOCOLS.md C4) into the completion a non-streaming call
//! returns: the deltas of each choice merged by choice index (role, text fields
//! concatenated, tool calls by their own index with id, type and name from their first
//! fragment and the arguments concatenated), the last `finish_reason`, the usage of the
//! final chunk (`stream_options.include_usage`), and `data: [DONE]` as the end. A chunk
//! that carries `error` is an error inside the stream.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::model::protocol::events::{error_of, json, Broken, Step};

/// A completion under construction.
#[derive(Default)]
pub struct Completion {
    /// The first chunk's fields besides `choices` and `usage` (id, created, model...).
    head: Option<Map<String, Value>>,
    choices: BTreeMap<u64, Choice>,
    usage: Option<Value>,
}

#[derive(Default)]
struct Choice {
    message: Map<String, Value>,
    /// By (index, generation): a fragment with a new id at an index that already has
    /// one is a new call (some compatible servers send every call as index 0).
    calls: BTreeMap<(u64, u32), Call>,
    generation: BTreeMap<u64, u32>,
    finish_reason: Option<Value>,
}

#[derive(Default)]
struct Call {
    id: Option<String>,
    kind: Option<String>,
    name: String,
    arguments: String,
}

/// The message fields that are the model's output: a non-empty piece is content.
const CONTENT_FIELDS: [&str; 4] = ["content", "reasoning_content", "reasoning", "refusal"];

impl Completion {
    pub(in crate::model) fn feed(&mut self, data: &str) -> Result<Step, Broken> {
        if data.trim() == "[DONE]" {
            return self.finish().map(Step::Done);
        }
        let v = json(data)?;
        match v.get("error") {
            Some(e) if e.is_object() => return Err(error_of(e)),
            // Some servers send the message alone.
            Some(Value::String(m)) => return Err(error_of(&serde_json::json!({ "message": m }))),
            _ => {}
        }
        let chunk = v.as_object().ok_or("a chunk is not a JSON object")?;
        if self.head.is_none() {
            let mut head: Map<String, Value> = chunk
                .iter()
                .filter(|(k, _)| !matches!(k.as_str(), "choices" | "usage"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if head.contains_key("object") {
                head.insert("object".into(), json!("chat.completion"));
            }
            self.head = Some(head);
        }
        let mut step = Step::More;
        for (position, c) in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = c
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let choice = self.choices.entry(index).or_default();
            if let Some(delta) = c.get("delta").and_then(Value::as_object) {
                if choice.merge(delta) {
                    step = Step::Content;
                }
            }
            if let Some(f) = c.get("finish_reason").filter(|f| !f.is_null()) {
                choice.finish_reason = Some(f.clone());
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.clone());
        }
        Ok(step)
    }

    fn finish(&mut self) -> Result<Value, Broken> {
        let mut body = self.head.take().ok_or("[DONE] before any chunk")?;
        let choices: Vec<Value> = std::mem::take(&mut self.choices)
            .into_iter()
            .map(|(i, c)| c.into_value(i))
            .collect();
        body.insert("choices".into(), Value::Array(choices));
        if let Some(u) = self.usage.take() {
            body.insert("usage".into(), u);
        }
        Ok(Value::Object(body))
    }
}

impl Choice {
    /// Merges one delta; whether it carried content.
    fn merge(&mut self, delta: &Map<String, Value>) -> bool {
        let mut content = false;
        for (k, v) in delta {
            match (k.as_str(), v) {
                ("tool_calls", Value::Array(fragments)) => {
                    for (position, f) in fragments.iter().enumerate() {
                        let index = f
                            .get("index")
                            .and_then(Value::as_u64)
                            .unwrap_or(position as u64);
                        let text = |p: &str| f.pointer(p).and_then(Value::as_str);
                        let id = text("/id").filter(|id| !id.is_empty());
                        let g = self.generation.entry(index).or_default();
                        let taken = self.calls.get(&(index, *g)).and_then(|c| c.id.as_deref());
                        if id.is_some() && taken.is_some() && taken != id {
                            *g += 1;
                        }
                        let call = self.calls.entry((index, *g)).or_default();
                        if let Some(id) = id {
                            call.id.get_or_insert_with(|| id.to_string());
                        }
                        if let Some(kind) = text("/type") {
                            call.kind.get_or_insert_with(|| kind.to_string());
                        }
                        if let Some(name) = text("/function/name").filter(|_| call.name.is_empty())
                        {
                            call.name = name.to_string();
                        }
                        let arguments = match f.pointer("/function/arguments") {
                            Some(Value::String(s)) => s.clone(),
                            // Some servers send the arguments as an object, whole.
                            Some(other) if !other.is_null() => other.to_string(),
                            _ => String::new(),
                        };
                        call.arguments.push_str(&arguments);
                        content = true;
                    }
                }
                ("role", _) => {
                    self.message.insert(k.clone(), v.clone());
                }
                (_, Value::String(piece)) => {
                    match self.message.get_mut(k) {
                        Some(Value::String(s)) => s.push_str(piece),
                        _ => {
                            self.message.insert(k.clone(), v.clone());
                        }
                    }
                    content |= !piece.is_empty() && CONTENT_FIELDS.contains(&k.as_str());
                }
                (_, Value::Null) => {
                    self.message.entry(k.clone()).or_insert(Value::Null);
                }
                _ => {
                    self.message.insert(k.clone(), v.clone());
                }
            }
        }
        content
    }

    /// The choice as a non-streaming completion has it.
    fn into_value(self, index: u64) -> Value {
        let mut message = Map::new();
        let role = self
            .message
            .get("role")
            .cloned()
            .unwrap_or_else(|| json!("assistant"));
        message.insert("role".into(), role);
        message.insert("content".into(), Value::Null);
        for (k, v) in self.message.into_iter().filter(|(k, _)| k != "role") {
            message.insert(k, v);
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .into_values()
                .map(|c| {
                    let mut call = Map::new();
                    if let Some(id) = c.id {
                        call.insert("id".into(), json!(id));
                    }
                    call.insert(
                        "type".into(),
                        json!(c.kind.unwrap_or_else(|| "function".into())),
                    );
                    call.insert(
                        "function".into(),
                        json!({"name": c.name, "arguments": c.arguments}),
                    );
                    Value::Object(call)
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        json!({
            "index": index,
            "message": message,
            "finish_reason": self.finish_reason.unwrap_or(Value::Null),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(delta: Value, finish: Value) -> String {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
        .to_string()
    }

    fn run(chunks: &[String]) -> Result<Step, Broken> {
        let mut c = Completion::default();
        let mut last = Step::More;
        for data in chunks {
            last = c.feed(data)?;
        }
        Ok(last)
    }

    #[test]
    fn tool_calls_merge_by_index_and_usage_comes_last() {
        let chunks = [
            chunk(json!({"role": "assistant", "content": null}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\": \"a\u{e9}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"}"}}]}),
                Value::Null,
            ),
            chunk(json!({}), json!("tool_calls")),
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
                   "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}})
            .to_string(),
            "[DONE]".to_string(),
        ];
        let Step::Done(body) = run(&chunks).unwrap() else {
            panic!()
        };
        let expected = json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"a\u{e9}\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}});
        assert_eq!(body.to_string(), expected.to_string());
        let parsed = crate::model::protocol::openai::chat::messages::parse(&body, 1).unwrap();
        assert_eq!(parsed.calls[0].input, json!({"path": "a\u{e9}"}));
        assert_eq!(parsed.usage.unwrap().usage.output_tokens, 40);
    }

    #[test]
    fn text_concatenates_and_a_missing_usage_stays_missing() {
        let first = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
        let mut c = Completion::default();
        assert_eq!(c.feed(&first).unwrap(), Step::More, "no content yet");
        assert_eq!(
            c.feed(&chunk(json!({"content": "Hel"}), Value::Null))
                .unwrap(),
            Step::Content
        );
        c.feed(&chunk(json!({"content": "lo \u{1f600}"}), json!("stop")))
            .unwrap();
        let Step::Done(body) = c.feed("[DONE]").unwrap() else {
            panic!()
        };
        assert_eq!(body["choices"][0]["message"]["content"], "Hello \u{1f600}");
        assert_eq!(body["choices"][0]["finish_reason"], "stop");
        assert!(body.get("usage").is_none());
        let parsed = crate::model::protocol::openai::chat::messages::parse(&body, 1).unwrap();
        assert!(parsed.usage.is_none());
        assert_eq!(parsed.stop, crate::model::ModelStop::EndTurn);
    }

    #[test]
    fn errors_and_an_early_done() {
        let e = run(&[json!({"error": {"message": "boom", "type": "server_error"}}).to_string()])
            .unwrap_err();
        assert_eq!(
            e,
            Broken::Error {
                error_type: "server_error".into(),
                message: "boom".into()
            }
        );
        assert!(matches!(
            run(&["[DONE]".to_string()]),
            Err(Broken::Malformed(_))
        ));
        // A bare message string is an error too, not a chunk to pass over.
        let e = run(&[json!({"error": "upstream died"}).to_string()]).unwrap_err();
        assert!(matches!(e, Broken::Error { ref message, .. } if message == "upstream died"));
    }

    #[test]
    fn a_new_id_at_an_index_already_taken_is_a_new_call() {
        // Some compatible servers number every call 0.
        let call = |id: &str, args: &str| {
            chunk(
                json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": "read_file", "arguments": args}}]}),
                Value::Null,
            )
        };
        let chunks = [
            chunk(json!({"role": "assistant", "content": null}), Value::Null),
            call("call_a", "{\"path\":"),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a\"}"}}]}),
                Value::Null,
            ),
            call("call_b", "{\"path\":\"b\"}"),
            chunk(json!({}), json!("tool_calls")),
            "[DONE]".to_string(),
        ];
        let Step::Done(body) = run(&chunks).unwrap() else {
            panic!()
        };
        let parsed = crate::model::protocol::openai::chat::messages::parse(&body, 1).unwrap();
        let got: Vec<(String, Value)> = parsed
            .calls
            .iter()
            .map(|c| (c.id.clone(), c.input.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("call_a".to_string(), json!({"path": "a"})),
                ("call_b".to_string(), json!({"path": "b"}))
            ]
        );
    }
}
