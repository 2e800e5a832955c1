//! A task's context policy (`context:`), merged field by field from the task and
//! `defaults`, with the model's window from the built-in table unless the job sets one.

use super::context::Ctx;
use super::diagnostics::origin;
use super::schema::{ContextFields, TaskFields};
use crate::vocab::bounds;
use crate::vocab::context::{
    context_window, ContextPolicy, ContextStrategy, DEFAULT_AT, DEFAULT_KEEP,
};
use crate::vocab::protocol::Protocol;

pub(super) fn resolve_context(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    model: &str,
    protocol: Option<Protocol>,
    cx: &mut Ctx,
) -> ContextPolicy {
    let (tc, dc) = (t.context.as_ref(), d.context.as_ref());
    let pick = |f: fn(&ContextFields) -> bool| tc.is_some_and(f);
    let at_field = |name: &str, set: bool| origin(i, set, !set, &["context", name]);
    // Each field from the task, else the defaults.
    let layers = [tc, dc];
    fn first<T>(
        layers: &[Option<&ContextFields>; 2],
        f: impl Fn(&ContextFields) -> Option<T>,
    ) -> Option<T> {
        layers.iter().flatten().find_map(|c| f(c))
    }
    // Each value on its own is checked where it is written (fields.rs).
    let window = first(&layers, |c| c.window);
    let at = first(&layers, |c| c.at);
    let keep = first(&layers, |c| c.keep);
    let strategy = first(&layers, |c| c.strategy).unwrap_or_default();
    if strategy == ContextStrategy::Native && protocol.is_some_and(|p| !p.facts().native_context) {
        cx.err(
            &at_field("strategy", pick(|c| c.strategy.is_some())),
            "native is the provider's own context management (Anthropic's context editing, the Responses API's compaction), and Chat Completions has none: use auto, clear_tool_results or summarize",
        );
    }
    ContextPolicy {
        window: window.filter(|w| *w > 0).or_else(|| context_window(model)),
        strategy,
        at: at.filter(|a| *a > 0.0 && *a <= 1.0).unwrap_or(DEFAULT_AT),
        keep: keep.unwrap_or(DEFAULT_KEEP).clamp(1, bounds::KEEP),
        exempt: first(&layers, |c| c.exempt.clone()).unwrap_or_default(),
    }
}
