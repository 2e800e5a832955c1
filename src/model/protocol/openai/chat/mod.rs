//! The OpenAI Chat Completions protocol: its wire. The request body and the answer
//! reader are in `messages.rs`, the streamed answer's assembler in `stream.rs`; this
//! file is what else the protocol does (the history's tool results and summaries, and
//! reading a transcript's bodies back).

pub(in crate::model) mod messages;
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

pub use messages::call_ids;

/// The Chat Completions API's wire.
pub struct Chat;

impl Wire for Chat {
    fn protocol(&self) -> Protocol {
        Protocol::OpenaiChat
    }

    fn declarations(&self, neutral: &[Value]) -> Vec<Value> {
        messages::declarations(neutral)
    }

    fn first_message(&self, prompt: &str, _blocks: bool) -> Value {
        json!({"role": "user", "content": prompt})
    }

    fn body(&self, parts: &BodyParts<'_>, history: Entries<'_>) -> Vec<u8> {
        let (params, tools, max_tokens) = (parts.params, parts.tools, parts.max_tokens);
        let field = parts.max_tokens_field;
        match history {
            Entries::Values(v) => messages::body(params, tools, v, field, max_tokens),
            Entries::Encoded(e) => messages::body(params, tools, e, field, max_tokens),
        }
    }

    fn headers(&self, auth: &Auth<'_>) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        super::headers(auth)
    }

    fn tool_choice_none(&self) -> Value {
        json!("none")
    }

    /// Chat Completions has no context management of its own.
    fn native_context(&self, _c: &ContextPolicy, _threshold: Option<u64>) -> Option<Value> {
        None
    }

    fn mark_message(&self, _message: &Value, _marker: &Value) -> Option<Value> {
        None
    }

    fn mark_tools(&self, _tools: &[Value], _marker: &Value) -> Option<Vec<Value>> {
        None
    }

    fn append_user_text(&self, history: &mut Vec<Value>, text: &str) -> Option<u64> {
        messages::append_user_text(history, text)
    }

    fn results(&self, results: &[ToolResult]) -> Vec<Value> {
        messages::results(results)
    }

    fn place_summary(&self, history: &mut Vec<Value>, text: String) {
        history.push(json!({"role": "user", "content": text}));
    }

    /// An earlier summary is an entry of its own.
    fn summary_inside_first(&self, _first: &Value) -> u64 {
        0
    }

    fn call_names(&self, entry: &Value, add: &mut dyn FnMut(&Value, &Value)) {
        for c in entry["tool_calls"].as_array().into_iter().flatten() {
            add(&c["id"], &c["function"]["name"]);
        }
    }

    fn result_contents(&self, entry: &Value, found: &mut dyn FnMut(Option<usize>, &Value, &Value)) {
        if entry["role"] == "tool" {
            found(None, &entry["tool_call_id"], &entry["content"]);
        }
    }

    fn result_content_mut<'a>(
        &self,
        entry: &'a mut Value,
        _block: Option<usize>,
    ) -> Option<&'a mut Value> {
        entry.get_mut("content")
    }

    fn parse(&self, raw: &Value, turn: u32) -> Result<Parsed, WireError> {
        messages::parse(raw, turn)
    }

    fn answer_edits(&self, _raw: &Value, _answer: &[Value]) -> AnswerEdits {
        AnswerEdits::None
    }

    fn assembler(&self) -> Assembler {
        Assembler::Chat(Default::default())
    }

    fn batch(&self) -> BatchKind {
        BatchKind::UploadedFile {
            endpoint: "/v1/chat/completions",
        }
    }

    fn is_answer(&self, body: &Value) -> bool {
        body.get("choices").is_some()
    }

    fn output_messages(&self, body: &Value) -> Value {
        Value::Array(
            body.get("choices")
                .and_then(|c| c.as_array())
                .map(|cs| {
                    cs.iter()
                        .filter_map(|c| c.get("message").cloned())
                        .collect()
                })
                .unwrap_or_default(),
        )
    }

    fn logged_calls(&self, body: &Value, turn: u32) -> Vec<LoggedCall> {
        let listed: Vec<&Value> = body
            .pointer("/choices/0/message/tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .collect();
        // The adapter names an id-less or repeated call after its turn and position.
        let ids = call_ids(listed.iter().map(|tc| str_of(tc, "id")), turn);
        listed
            .into_iter()
            .zip(ids)
            .map(|(tc, (id, made_up))| {
                let f = tc.get("function").unwrap_or(&Value::Null);
                LoggedCall {
                    id_made_up: made_up,
                    id: Some(id),
                    name: str_of(f, "name").map(str::to_string),
                    args: super::logged_args(f.get("arguments")),
                }
            })
            .collect()
    }

    fn logged_results(&self, messages: &[(usize, Value)]) -> Vec<Returned> {
        let mut out = Vec::new();
        for (mi, (line, m)) in messages.iter().enumerate() {
            if m["role"] == "tool" {
                let after_other = messages[..mi].iter().any(|(_, p)| p["role"] != "tool");
                out.push(Returned {
                    id: str_of(m, "tool_call_id").map(str::to_string),
                    line: *line,
                    misplaced: after_other.then(|| {
                        "after a message that is not a tool message; tool messages must directly follow the assistant message with the calls".to_string()
                    }),
                });
            }
        }
        out
    }

    fn logged_text(&self, entry: &Value) -> Option<LoggedText> {
        let role = str_of(entry, "role")?;
        if role == "tool" {
            return None;
        }
        Some(LoggedText {
            role: role.to_string(),
            text: content_text(entry.get("content")?)?,
        })
    }

    fn logged_reasoning(&self, body: &Value) -> Option<String> {
        let message = body.pointer("/choices/0/message")?;
        joined(
            ["reasoning_content", "reasoning"]
                .iter()
                .filter_map(|k| message.get(*k).and_then(Value::as_str))
                .collect(),
        )
    }
}
