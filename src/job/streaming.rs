//! Whether a task's answers are streamed: its own `stream`, else its provider's, else
//! the defaults', and for `auto` the Anthropic SDKs' rule, applied to every protocol;
//! never in batch mode.

use super::context::Ctx;
use super::diagnostics::{place, Layer};
use super::locate::Seg;
use super::schema::{StreamMode, TaskFields, ThinkingKind};
use super::spec::{ProviderKind, ProviderSpec};

/// The largest max_tokens the Anthropic SDKs send without streaming (PROTOCOLS.md A12):
/// they expect `3600 s * max_tokens / 128000` of generation, and refuse a whole-answer
/// call expected past 10 minutes, the API's limit for one.
pub(super) const MAX_NON_STREAMING_TOKENS: u32 = 21_333;

/// Whether the task streams. `auto` streams when max_tokens is above
/// [`MAX_NON_STREAMING_TOKENS`] (OpenAI's SDKs have no such guard, but their clients
/// give up at the same 10 minutes) or thinking is on (it can run long before the first
/// word). A task that will not stream may not ask the real Anthropic API for more.
pub(super) fn resolve_stream(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    provider: Option<&ProviderSpec>,
    (max_tokens, max_tokens_at): (u32, &[Seg]),
    batch: bool,
    cx: &mut Ctx,
) -> bool {
    let layers = [
        (Layer::Task, t.stream),
        (
            Layer::Provider(provider.map_or("", |p| p.name.as_str())),
            provider.and_then(|p| p.stream),
        ),
        (Layer::Defaults, d.stream),
    ];
    let (mode, layer) = layers
        .into_iter()
        .find_map(|(layer, mode)| mode.map(|m| (m, layer)))
        .map_or((StreamMode::default(), None), |(m, layer)| (m, Some(layer)));
    // A batch answers whole, and has no 10-minute limit per request.
    if batch {
        if mode == StreamMode::Always {
            cx.err(
                &place(i, layer, &["stream"]),
                "batch requests are answered whole, never streamed: set stream to auto or never, or batch mode off",
            );
        }
        return false;
    }
    let thinking = t
        .thinking
        .as_ref()
        .or(d.thinking.as_ref())
        .is_some_and(|th| th.kind != ThinkingKind::Disabled);
    let stream = match mode {
        StreamMode::Always => true,
        StreamMode::Never => false,
        StreamMode::Auto => max_tokens > MAX_NON_STREAMING_TOKENS || thinking,
    };
    let real_anthropic = provider
        .is_some_and(|p| p.kind == ProviderKind::Api && p.protocol.facts().long_requests_stream);
    if !stream && real_anthropic && max_tokens > MAX_NON_STREAMING_TOKENS {
        let set_at = if t.stream.is_some() {
            place(i, Some(Layer::Task), &["stream"])
        } else {
            max_tokens_at.to_vec()
        };
        cx.err(
            &set_at,
            format!(
                "{max_tokens} is too large for a non-streaming request (the API drops requests expected to run over 10 minutes, above about {MAX_NON_STREAMING_TOKENS} tokens): leave `stream` at auto or set it to always, or use at most {MAX_NON_STREAMING_TOKENS}"
            ),
        );
    }
    stream
}
