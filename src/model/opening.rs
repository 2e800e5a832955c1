//! What a conversation opens with and what every request repeats: the tool
//! declarations in the protocol's shape (and their cache breakpoint), the first user
//! message, and the request body around a history.

use serde_json::{json, Value};

use super::conversation::{len_of, Params};
use super::{anthropic, chat, responses, Protocol};

/// The size of tool declarations and, when they carry a breakpoint of their own, their
/// marked copy.
pub(super) fn cacheable_tools(
    protocol: Protocol,
    params: &Params,
    tools: &[Value],
) -> (u64, Option<Vec<Value>>) {
    let bytes = len_of(&tools);
    let marked = (protocol == Protocol::Anthropic
        && params.cache.marks_prefix()
        && bytes >= crate::vocab::cache::min_cacheable_tokens(&params.model))
    .then(|| anthropic::marked_tools(tools, &params.cache.marker()))
    .flatten();
    (bytes, marked)
}

/// The request body of `protocol` for a history (values, or entries already encoded).
/// `system_marker` puts an Anthropic cache breakpoint on the system prompt.
pub(super) fn body<M: serde::Serialize>(
    protocol: Protocol,
    max_tokens_field: &str,
    params: &Params,
    system_marker: Option<&Value>,
    tools: &[Value],
    history: &[M],
    max_tokens: u32,
) -> Vec<u8> {
    match protocol {
        Protocol::Anthropic => {
            let system = anthropic::system(params.system.as_deref(), system_marker);
            anthropic::body(params, system, tools, history, max_tokens)
        }
        Protocol::OpenaiResponses => responses::body(params, tools, history, max_tokens),
        Protocol::OpenaiChat => chat::body(params, tools, history, max_tokens_field, max_tokens),
    }
}

pub(super) fn declarations(protocol: Protocol, neutral: &[Value]) -> Vec<Value> {
    match protocol {
        Protocol::Anthropic => neutral.to_vec(),
        Protocol::OpenaiResponses => responses::declarations(neutral),
        Protocol::OpenaiChat => chat::declarations(neutral),
    }
}

/// The first user message. For Anthropic with caching, in block form when it can carry
/// a breakpoint (its prefix reaches the model's minimum), so that the marker it carries
/// on the first requests never changes its shape: the cached prefix stays the same bytes
/// with or without the marker.
pub(super) fn first_message(
    protocol: Protocol,
    prompt: &str,
    params: &Params,
    tools: &[Value],
) -> Value {
    let cache = params.cache;
    let prefix = len_of(&tools)
        .saturating_add(params.system.as_deref().map_or(0, |s| s.len() as u64))
        .saturating_add(prompt.len() as u64);
    match protocol {
        Protocol::Anthropic
            if cache.is_on()
                && !prompt.is_empty()
                && prefix >= crate::vocab::cache::min_cacheable_tokens(&params.model) =>
        {
            json!({"role": "user", "content": [{"type": "text", "text": prompt}]})
        }
        Protocol::Anthropic | Protocol::OpenaiChat => json!({"role": "user", "content": prompt}),
        Protocol::OpenaiResponses => {
            json!({"type": "message", "role": "user", "content": prompt})
        }
    }
}
