//! The simulator's context window: a request whose prompt and `max_tokens` pass the
//! model's window is refused with the API's own error, so compaction is tested against
//! a server that enforces the limit. What a provider edits before anything counts the
//! prompt (Anthropic's context editing) is the protocol's (`protocol::Edited`).

use serde_json::Value;

use super::protocol::served;
use crate::model::Protocol;
use crate::vocab::context::context_window;

/// Why a prompt is too long, as each API says it; None when it fits (or the model's
/// window is unknown and the script sets none).
pub fn refusal(
    protocol: Protocol,
    request: &Value,
    body_len: usize,
    max_tokens: u64,
    scripted: Option<u64>,
) -> Option<(String, Option<&'static str>)> {
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    let window = scripted.or_else(|| context_window(model))?;
    let prompt = (body_len as u64).div_ceil(4);
    if prompt.saturating_add(max_tokens) <= window {
        return None;
    }
    Some(served(protocol).too_long(prompt, window, max_tokens))
}
