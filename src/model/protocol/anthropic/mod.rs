//! The Anthropic Messages protocol: its wire. The request body and the answer reader are
//! in `messages.rs`, the streamed answer's assembler in `stream.rs`; this file is what
//! else the protocol does (headers, caching markers, the history's tool results and
//! summaries, context editing, and reading a transcript's bodies back).

pub(in crate::model) mod messages;
pub(in crate::model) mod stream;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{json, Value};

use super::{
    content_text, joined, kind_of, secret, str_of, AnswerEdits, Args, Assembler, Auth, BatchKind,
    BodyParts, Entries, LoggedCall, LoggedText, Returned, Wire,
};
use crate::model::{Parsed, ToolResult, WireError};
use crate::vocab::context::{ContextPolicy, SUMMARY_HEADING};
use crate::vocab::protocol::Protocol;

/// The Messages API's wire.
pub struct Anthropic;

/// Whether a content block is a summary the runner placed.
fn is_summary(block: &Value) -> bool {
    block["text"]
        .as_str()
        .is_some_and(|t| t.starts_with(SUMMARY_HEADING))
}

impl Wire for Anthropic {
    fn protocol(&self) -> Protocol {
        Protocol::Anthropic
    }

    fn declarations(&self, neutral: &[Value]) -> Vec<Value> {
        neutral.to_vec()
    }

    fn first_message(&self, prompt: &str, blocks: bool) -> Value {
        match blocks {
            true => json!({"role": "user", "content": [{"type": "text", "text": prompt}]}),
            false => json!({"role": "user", "content": prompt}),
        }
    }

    fn body(&self, parts: &BodyParts<'_>, history: Entries<'_>) -> Vec<u8> {
        let system = messages::system(parts.params.system.as_deref(), parts.system_marker);
        let (params, tools, max_tokens) = (parts.params, parts.tools, parts.max_tokens);
        match history {
            Entries::Values(v) => messages::body(params, system, tools, v, max_tokens),
            Entries::Encoded(e) => messages::body(params, system, tools, e, max_tokens),
        }
    }

    fn headers(&self, auth: &Auth<'_>) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
        let mut h = Vec::with_capacity(3);
        let version = HeaderValue::from_str(auth.anthropic_version)
            .map_err(|_| format!("invalid anthropic_version \"{}\"", auth.anthropic_version))?;
        h.push((HeaderName::from_static("anthropic-version"), version));
        if let Some(beta) = auth.anthropic_beta {
            let beta = HeaderValue::from_str(beta)
                .map_err(|_| format!("invalid anthropic-beta \"{beta}\""))?;
            h.push((HeaderName::from_static("anthropic-beta"), beta));
        }
        if let Some(key) = auth.api_key {
            h.push((
                HeaderName::from_static("x-api-key"),
                secret(key.to_string())?,
            ));
        }
        Ok(h)
    }

    fn tool_choice_none(&self) -> Value {
        json!({"type": "none"})
    }

    /// Clear old tool results, keeping the newest `keep` and the exempt tools' results.
    fn native_context(&self, c: &ContextPolicy, threshold: Option<u64>) -> Option<Value> {
        let mut edit = json!({
            "type": "clear_tool_uses_20250919",
            "keep": {"type": "tool_uses", "value": c.keep},
        });
        if let Some(t) = threshold {
            edit["trigger"] = json!({"type": "input_tokens", "value": t.max(1)});
        }
        if !c.exempt.is_empty() {
            edit["exclude_tools"] = json!(c.exempt);
        }
        Some(json!({ "edits": [edit] }))
    }

    fn mark_message(&self, message: &Value, marker: &Value) -> Option<Value> {
        messages::marked(message, marker)
    }

    fn mark_tools(&self, tools: &[Value], marker: &Value) -> Option<Vec<Value>> {
        messages::marked_tools(tools, marker)
    }

    fn append_user_text(&self, history: &mut Vec<Value>, text: &str) -> Option<u64> {
        messages::append_user_text(history, text)
    }

    fn results(&self, results: &[ToolResult]) -> Vec<Value> {
        messages::results(results)
    }

    fn place_summary(&self, history: &mut Vec<Value>, text: String) {
        let Some(first) = history.first_mut() else {
            return;
        };
        let first = &mut first["content"];
        let mut blocks = match first.take() {
            Value::Array(b) => b,
            other => vec![json!({"type": "text", "text": other})],
        };
        // An earlier summary gives way to this one.
        blocks.retain(|b| !is_summary(b));
        blocks.push(json!({"type": "text", "text": text}));
        *first = Value::Array(blocks);
    }

    fn summary_inside_first(&self, first: &Value) -> u64 {
        first["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| is_summary(b))
            .map(|b| crate::model::len_of(b) + 1)
            .sum()
    }

    fn call_names(&self, entry: &Value, add: &mut dyn FnMut(&Value, &Value)) {
        for b in entry["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                add(&b["id"], &b["name"]);
            }
        }
    }

    fn result_contents(&self, entry: &Value, found: &mut dyn FnMut(Option<usize>, &Value, &Value)) {
        for (block, b) in entry["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if b["type"] == "tool_result" {
                found(Some(block), &b["tool_use_id"], &b["content"]);
            }
        }
    }

    fn result_content_mut<'a>(
        &self,
        entry: &'a mut Value,
        block: Option<usize>,
    ) -> Option<&'a mut Value> {
        entry
            .get_mut("content")?
            .as_array_mut()?
            .get_mut(block?)?
            .get_mut("content")
    }

    fn parse(&self, raw: &Value, _turn: u32) -> Result<Parsed, WireError> {
        messages::parse(raw)
    }

    fn answer_edits(&self, raw: &Value, _answer: &[Value]) -> AnswerEdits {
        messages::applied_edits(raw).map_or(AnswerEdits::None, AnswerEdits::Cleared)
    }

    fn assembler(&self) -> Assembler {
        Assembler::Messages(Default::default())
    }

    fn batch(&self) -> BatchKind {
        BatchKind::MessageBatches
    }

    fn is_answer(&self, body: &Value) -> bool {
        body.get("content").is_some() || body["type"] == "message"
    }

    fn output_messages(&self, body: &Value) -> Value {
        json!([{
            "role": body.get("role").cloned().unwrap_or("assistant".into()),
            "content": body.get("content").cloned().unwrap_or_default(),
        }])
    }

    fn logged_calls(&self, body: &Value, _turn: u32) -> Vec<LoggedCall> {
        body["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == "tool_use")
            .map(|b| LoggedCall {
                id: str_of(b, "id").map(str::to_string),
                id_made_up: false,
                name: str_of(b, "name").map(str::to_string),
                args: match b.get("input") {
                    None | Some(Value::Object(_)) => Args::Object,
                    Some(other) => Args::Bad(format!(
                        "the input is {}, not a JSON object",
                        kind_of(other)
                    )),
                },
            })
            .collect()
    }

    fn logged_text(&self, entry: &Value) -> Option<LoggedText> {
        Some(LoggedText {
            role: str_of(entry, "role")?.to_string(),
            text: content_text(entry.get("content")?)?,
        })
    }

    fn logged_reasoning(&self, body: &Value) -> Option<String> {
        joined(
            body["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|b| b["type"] == "thinking")
                .filter_map(|b| b["thinking"].as_str())
                .collect(),
        )
    }

    fn logged_results(&self, messages: &[(usize, Value)]) -> Vec<Returned> {
        let mut out = Vec::new();
        for (mi, (line, m)) in messages.iter().enumerate() {
            let mut leading = true;
            for b in m["content"].as_array().into_iter().flatten() {
                if b["type"] != "tool_result" {
                    leading = false;
                    continue;
                }
                let misplaced = if m["role"] != "user" {
                    Some(format!(
                        "in a message of role {}, not the user's",
                        m["role"]
                    ))
                } else if mi > 0 {
                    Some(format!(
                        "in message {} of the request's new messages; every result belongs in the first user message after the tool use",
                        mi + 1
                    ))
                } else if !leading {
                    Some("after a block that is not a tool_result; the user message must begin with the results".to_string())
                } else {
                    None
                };
                out.push(Returned {
                    id: str_of(b, "tool_use_id").map(str::to_string),
                    line: *line,
                    misplaced,
                });
            }
        }
        out
    }
}
