//! The OpenAI Responses protocol: its wire. The request body and the answer reader are
//! in `items.rs`, the streamed answer's assembler in `stream.rs`; this file is what
//! else the protocol does (its server-side compaction, the history's tool results and
//! summaries, and reading a transcript's bodies back).

pub(in crate::model) mod items;
pub(in crate::model) mod stream;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};

use crate::model::protocol::{
    content_text, joined, str_of, AnswerEdits, Assembler, Auth, BatchKind, BodyParts, Entries,
    LoggedCall, LoggedText, Returned, Wire,
};
use crate::model::{Parsed, ToolResult, WireError};
use crate::vocab::context::ContextPolicy;
use crate::vocab::protocol::Protocol;

/// The Responses API's wire.
pub struct Responses;

impl Wire for Responses {
    fn protocol(&self) -> Protocol {
        Protocol::OpenaiResponses
    }

    fn declarations(&self, neutral: &[Value]) -> Vec<Value> {
        items::declarations(neutral)
    }

    fn first_message(&self, prompt: &str, _blocks: bool) -> Value {
        json!({"type": "message", "role": "user", "content": prompt})
    }

    fn body(&self, parts: &BodyParts<'_>, history: Entries<'_>) -> Vec<u8> {
        let (params, tools, max_tokens) = (parts.params, parts.tools, parts.max_tokens);
        match history {
            Entries::Values(v) => items::body(params, tools, v, max_tokens),
            Entries::Encoded(e) => items::body(params, tools, e, max_tokens),
        }
    }

    fn headers(&self, auth: &Auth<'_>) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        super::headers(auth)
    }

    fn tool_choice_none(&self) -> Value {
        json!("none")
    }

    /// Compact the whole context into one opaque item.
    fn native_context(&self, _c: &ContextPolicy, threshold: Option<u64>) -> Option<Value> {
        let mut entry = json!({"type": "compaction"});
        if let Some(t) = threshold {
            entry["compact_threshold"] = t.max(1).into();
        }
        Some(json!([entry]))
    }

    fn mark_message(&self, _message: &Value, _marker: &Value) -> Option<Value> {
        None
    }

    fn mark_tools(&self, _tools: &[Value], _marker: &Value) -> Option<Vec<Value>> {
        None
    }

    fn append_user_text(&self, history: &mut Vec<Value>, text: &str) -> Option<u64> {
        items::append_user_text(history, text)
    }

    fn results(&self, results: &[ToolResult]) -> Vec<Value> {
        items::results(results)
    }

    fn place_summary(&self, history: &mut Vec<Value>, text: String) {
        history.push(json!({"type": "message", "role": "user", "content": text}));
    }

    /// An earlier summary is an entry of its own.
    fn summary_inside_first(&self, _first: &Value) -> u64 {
        0
    }

    fn call_names(&self, entry: &Value, add: &mut dyn FnMut(&Value, &Value)) {
        if entry["type"] == "function_call" {
            add(&entry["call_id"], &entry["name"]);
        }
    }

    fn result_contents(&self, entry: &Value, found: &mut dyn FnMut(Option<usize>, &Value, &Value)) {
        if entry["type"] == "function_call_output" {
            found(None, &entry["call_id"], &entry["output"]);
        }
    }

    fn result_content_mut<'a>(
        &self,
        entry: &'a mut Value,
        _block: Option<usize>,
    ) -> Option<&'a mut Value> {
        entry.get_mut("output")
    }

    fn parse(&self, raw: &Value, _turn: u32) -> Result<Parsed, WireError> {
        items::parse(raw)
    }

    /// Only the answer is searched: this runs on every turn.
    fn answer_edits(&self, _raw: &Value, answer: &[Value]) -> AnswerEdits {
        match answer.iter().rposition(|e| e["type"] == "compaction") {
            Some(at) => AnswerEdits::CompactedAt(at),
            None => AnswerEdits::None,
        }
    }

    fn assembler(&self) -> Assembler {
        Assembler::Responses(Default::default())
    }

    fn batch(&self) -> BatchKind {
        BatchKind::UploadedFile {
            endpoint: "/v1/responses",
        }
    }

    fn is_answer(&self, body: &Value) -> bool {
        body.get("output").is_some() || body["object"] == "response"
    }

    fn output_messages(&self, body: &Value) -> Value {
        body.get("output").cloned().unwrap_or_default()
    }

    fn logged_calls(&self, body: &Value, _turn: u32) -> Vec<LoggedCall> {
        body["output"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["type"] == "function_call")
            .map(|i| LoggedCall {
                id: str_of(i, "call_id").map(str::to_string),
                id_made_up: false,
                name: str_of(i, "name").map(str::to_string),
                args: super::logged_args(i.get("arguments")),
            })
            .collect()
    }

    fn logged_results(&self, messages: &[(usize, Value)]) -> Vec<Returned> {
        messages
            .iter()
            .filter(|(_, m)| m["type"] == "function_call_output")
            .map(|(line, m)| Returned {
                id: str_of(m, "call_id").map(str::to_string),
                line: *line,
                misplaced: None,
            })
            .collect()
    }

    fn logged_text(&self, entry: &Value) -> Option<LoggedText> {
        // A message item (`type` may be left out of an input message); function calls,
        // their outputs, reasoning and compaction items are not text.
        if entry.get("type").is_some_and(|t| t != "message") {
            return None;
        }
        Some(LoggedText {
            role: str_of(entry, "role")?.to_string(),
            text: content_text(entry.get("content")?)?,
        })
    }

    fn logged_reasoning(&self, body: &Value) -> Option<String> {
        let mut parts = Vec::new();
        for item in body["output"].as_array().into_iter().flatten() {
            if item["type"] == "reasoning" {
                for key in ["summary", "content"] {
                    for part in item[key].as_array().into_iter().flatten() {
                        parts.extend(part["text"].as_str());
                    }
                }
            }
        }
        joined(parts)
    }
}
