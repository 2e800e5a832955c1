//! A task's batch mode: its own `batch`, else its provider's, else the defaults', field
//! by field, with each field's bounds (the providers' own limits).

use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::origin;
use super::schema::{BatchFields, BatchMode, TaskFields};
use super::spec::{BatchSpec, ProviderSpec};
use crate::model::Protocol;
use crate::vocab::values::HumanDuration;

/// The providers end a batch after 24 hours.
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// A window longer than this only delays the first turn of every task.
const MAX_WINDOW: Duration = Duration::from_secs(3600);

/// The task's batch mode, or None when its requests go one by one.
pub(super) fn resolve_batch(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    provider: Option<&ProviderSpec>,
    cx: &mut Ctx,
) -> Option<BatchSpec> {
    let layers: [Option<BatchFields>; 3] = [t.batch, provider.and_then(|p| p.batch), d.batch];
    let mode = first(&layers, |b| b.mode).unwrap_or_default();
    if mode == BatchMode::Off {
        return None;
    }
    let at = |field: &str| origin(i, t.batch.is_some(), &["batch", field]);
    let window = first(&layers, |b| b.window).unwrap_or(HumanDuration(Duration::from_secs(10)));
    if window.0 > MAX_WINDOW {
        cx.err(
            &at("window"),
            "a window of over 1h only delays every task's turns: use seconds to minutes",
        );
    }
    let max_wait = first(&layers, |b| b.max_wait).unwrap_or(HumanDuration(MAX_WAIT));
    if max_wait.0 > MAX_WAIT {
        cx.err(
            &at("max_wait"),
            "the providers end a batch after 24h: at most 24h",
        );
    }
    let most = match provider.map(|p| p.protocol) {
        Some(Protocol::Anthropic) | None => 100_000,
        Some(Protocol::OpenaiResponses | Protocol::OpenaiChat) => 50_000,
    };
    let max_requests = first(&layers, |b| b.max_requests).unwrap_or(1000);
    if max_requests == 0 || max_requests > most {
        cx.err(
            &at("max_requests"),
            format!("{max_requests} requests per batch: from 1 to {most} (the provider's limit)"),
        );
    }
    Some(BatchSpec {
        window,
        max_requests,
        max_wait,
    })
}

/// The first layer's value of a field.
fn first<T>(layers: &[Option<BatchFields>], f: impl Fn(&BatchFields) -> Option<T>) -> Option<T> {
    layers.iter().flatten().find_map(f)
}
