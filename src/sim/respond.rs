//! Rendering a script turn into a Messages API response, and the error bodies of faults.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{json, Value};

use super::cache::CacheUse;
use super::script::{Block, ScriptTurn};

pub(super) fn digest(parts: &[&str]) -> u64 {
    let mut h = DefaultHasher::new();
    "agentbatch-sim".hash(&mut h);
    for p in parts {
        p.hash(&mut h);
    }
    h.finish()
}

/// The signature the simulator gives a thinking block; a changed text or signature no
/// longer matches, which is how the real API catches edited thinking.
pub fn signature(thinking: &str) -> String {
    format!(
        "sim-sig-{:016x}{:016x}",
        digest(&[thinking]),
        digest(&[thinking, "2"])
    )
}

/// What the client's request says that a scripted answer depends on, read by the
/// protocol's own module.
pub struct Ask<'a> {
    /// tool_choice none: the model cannot call tools, scripted calls are dropped.
    pub tools_off: bool,
    /// The request's output limit (None: unbounded).
    pub max_tokens: Option<u64>,
    /// The text of the latest tool result, for `{{tool_result}}`.
    pub tool_result: String,
    pub request_bytes: usize,
    pub model: Value,
    /// The conversation key and step, for stable ids.
    pub key: &'a str,
    pub step: usize,
    /// What the simulator's prompt cache read and wrote for the request.
    pub cache: CacheUse,
}

/// One block of a played turn, protocol-neutral.
#[derive(Debug, Clone)]
pub enum Played {
    Text(String),
    Thinking(String),
    RedactedThinking(String),
    ToolUse {
        /// The scripted id, if any (each protocol makes its own default).
        id: Option<String>,
        name: String,
        input: Value,
        /// The raw arguments string, for OpenAI protocols.
        arguments: Option<String>,
    },
    Raw(Value),
}

/// Token counts of a played turn: the prompt (cache reads and writes included) and the
/// output, as the protocols report them in their own shapes.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub prompt: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// The part of `cache_write` written with a 1-hour TTL.
    pub cache_write_1h: u64,
    pub output: u64,
    pub reasoning: u64,
}

/// A script turn played against a request: its blocks, its stop reason (in the
/// Anthropic vocabulary, which each protocol maps), and its token counts.
pub struct Turn {
    pub blocks: Vec<Played>,
    pub stop_reason: String,
    pub counts: Counts,
}

/// A stable id for block `j` of a conversation step.
pub fn stable_id(prefix: &str, ask: &Ask, j: usize) -> String {
    format!(
        "{prefix}{:016x}",
        digest(&[ask.key, &ask.step.to_string(), &j.to_string()])
    )
}

/// Plays a script turn: substitutes `{{tool_result}}`, drops calls when tools are off,
/// works out the stop reason and the usage (output capped at max_tokens, which turns
/// the stop into `max_tokens` as the real APIs do).
pub fn play(turn: &ScriptTurn, ask: &Ask) -> Turn {
    let blocks: Vec<Played> = turn
        .content
        .iter()
        .filter(|b| !(ask.tools_off && matches!(b, Block::ToolUse(_))))
        .map(|b| match b {
            Block::Text(t) if t.contains("{{tool_result}}") => {
                Played::Text(t.replace("{{tool_result}}", &ask.tool_result))
            }
            Block::Text(t) => Played::Text(t.clone()),
            Block::Thinking(t) => Played::Thinking(t.clone()),
            Block::RedactedThinking(d) => Played::RedactedThinking(d.clone()),
            Block::ToolUse(u) => Played::ToolUse {
                id: u.id.clone(),
                name: u.name.clone(),
                input: u.input.clone(),
                arguments: u.arguments.clone(),
            },
            Block::Raw(v) => Played::Raw(v.clone()),
        })
        .collect();
    let has_tool_use = blocks.iter().any(|b| matches!(b, Played::ToolUse { .. }));
    let scripted = turn
        .stop_reason
        .clone()
        .filter(|s| !(ask.tools_off && s == "tool_use"));
    let mut stop_reason = scripted.unwrap_or_else(|| {
        if has_tool_use {
            "tool_use".into()
        } else {
            "end_turn".into()
        }
    });
    let usage = turn.usage.clone().unwrap_or_default();
    let prompt = usage
        .input_tokens
        .unwrap_or_else(|| (ask.request_bytes as u64).div_ceil(4));
    // Scripted cache figures win over the cache's (a scripted write counts as 5m).
    let cache_read = usage
        .cache_read_input_tokens
        .unwrap_or(ask.cache.read)
        .min(prompt);
    let (write, write_1h) = match usage.cache_creation_input_tokens {
        Some(w) => (w, 0),
        None => (ask.cache.write_5m + ask.cache.write_1h, ask.cache.write_1h),
    };
    let cache_write = write.min(prompt - cache_read);
    let estimated_output = (serde_json::to_vec(&anthropic_content(&blocks, ask))
        .map_or(0, |b| b.len()) as u64)
        .div_ceil(4)
        .max(1);
    let mut output = usage.output_tokens.unwrap_or(estimated_output);
    if let Some(max) = ask.max_tokens.filter(|m| output > *m) {
        output = max;
        stop_reason = "max_tokens".into();
    }
    Turn {
        blocks,
        stop_reason,
        counts: Counts {
            prompt,
            cache_read,
            cache_write,
            cache_write_1h: write_1h.min(cache_write),
            output,
            reasoning: usage.reasoning_tokens.unwrap_or(0).min(output),
        },
    }
}

/// The blocks in the Messages shape: Anthropic's content, and the measure of every
/// protocol's output estimate.
pub(super) fn anthropic_content(blocks: &[Played], ask: &Ask) -> Value {
    blocks
        .iter()
        .enumerate()
        .map(|(j, b)| match b {
            Played::Text(t) => json!({"type": "text", "text": t}),
            Played::Thinking(t) => {
                json!({"type": "thinking", "thinking": t, "signature": signature(t)})
            }
            Played::RedactedThinking(d) => json!({"type": "redacted_thinking", "data": d}),
            Played::ToolUse {
                id, name, input, ..
            } => {
                let id = id
                    .clone()
                    .unwrap_or_else(|| stable_id("toolu_sim_", ask, j));
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            Played::Raw(v) => v.clone(),
        })
        .collect()
}

/// The error type the real API uses for an HTTP status.
pub fn default_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}
