//! What a conversation opens with and what every request repeats: the tool
//! declarations in the protocol's shape (and their cache breakpoint), the first user
//! message, and the request body around a history. What differs per protocol is its
//! wire's; what is decided here (when a breakpoint can write anything) is the same for
//! every protocol whose facts say the runner places breakpoints.

use serde_json::Value;

use super::protocol::{BodyParts, Entries, Wire};
use super::{len_of, Params};

/// The size of tool declarations and, when they carry a breakpoint of their own, their
/// marked copy.
pub(super) fn cacheable_tools(
    wire: &dyn Wire,
    params: &Params,
    tools: &[Value],
) -> (u64, Option<Vec<Value>>) {
    let bytes = len_of(&tools);
    let marked = (wire.protocol().facts().marks_cache
        && params.cache.marks_prefix()
        && bytes >= crate::vocab::cache::min_cacheable_tokens(&params.model))
    .then(|| wire.mark_tools(tools, &params.cache.marker()))
    .flatten();
    (bytes, marked)
}

/// The request body for a history (values, or entries already encoded).
/// `system_marker` puts a cache breakpoint on the system prompt.
pub(super) fn body(
    wire: &dyn Wire,
    max_tokens_field: &str,
    params: &Params,
    system_marker: Option<&Value>,
    tools: &[Value],
    history: Entries<'_>,
    max_tokens: u32,
) -> Vec<u8> {
    let parts = BodyParts {
        params,
        max_tokens_field,
        system_marker,
        tools,
        max_tokens,
    };
    wire.body(&parts, history)
}

/// The first user message. Where the runner places breakpoints, in block form when it
/// can carry one (its prefix reaches the model's minimum), so that the marker it carries
/// on the first requests never changes its shape: the cached prefix stays the same bytes
/// with or without the marker.
pub(super) fn first_message(
    wire: &dyn Wire,
    prompt: &str,
    params: &Params,
    tools: &[Value],
) -> Value {
    let cache = params.cache;
    let prefix = len_of(&tools)
        .saturating_add(params.system.as_deref().map_or(0, |s| s.len() as u64))
        .saturating_add(prompt.len() as u64);
    let blocks = wire.protocol().facts().marks_cache
        && cache.is_on()
        && !prompt.is_empty()
        && prefix >= crate::vocab::cache::min_cacheable_tokens(&params.model);
    wire.first_message(prompt, blocks)
}
