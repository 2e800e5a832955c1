//! A task's batch mode: its own `batch`, else its provider's, else the defaults', field
//! by field, with each field's bounds (the providers' own limits).

use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::{place, Layer};
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
    let layers = [
        (Layer::Task, t.batch),
        (
            Layer::Provider(provider.map_or("", |p| p.name.as_str())),
            provider.and_then(|p| p.batch),
        ),
        (Layer::Defaults, d.batch),
    ];
    let mode = first(&layers, |b| b.mode)
        .map(|(m, _)| m)
        .unwrap_or_default();
    if mode == BatchMode::Off {
        return None;
    }
    let at = |layer: Layer, field: &str| place(i, Some(layer), &["batch", field]);
    let window = match first(&layers, |b| b.window) {
        Some((w, layer)) => {
            if w.0 > MAX_WINDOW {
                cx.err(
                    &at(layer, "window"),
                    "a window of over 1h only delays every task's turns: use seconds to minutes",
                );
            }
            w
        }
        None => HumanDuration(Duration::from_secs(10)),
    };
    let max_wait = match first(&layers, |b| b.max_wait) {
        Some((w, layer)) => {
            if w.0 > MAX_WAIT {
                cx.err(
                    &at(layer, "max_wait"),
                    "the providers end a batch after 24h: at most 24h",
                );
            }
            w
        }
        None => HumanDuration(MAX_WAIT),
    };
    let most = provider
        .map_or(Protocol::DEFAULT, |p| p.protocol)
        .facts()
        .batch_max_requests;
    let max_requests = match first(&layers, |b| b.max_requests) {
        Some((n, layer)) => {
            if n == 0 || n > most {
                cx.err(
                    &at(layer, "max_requests"),
                    format!("{n} requests per batch: from 1 to {most} (the provider's limit)"),
                );
            }
            n
        }
        None => 1000,
    };
    Some(BatchSpec {
        window,
        max_requests,
        max_wait,
    })
}

/// The first layer that gives a field a value: the value and that layer.
fn first<'a, T>(
    layers: &[(Layer<'a>, Option<BatchFields>)],
    f: impl Fn(&BatchFields) -> Option<T>,
) -> Option<(T, Layer<'a>)> {
    layers
        .iter()
        .find_map(|(layer, b)| b.as_ref().and_then(&f).map(|v| (v, *layer)))
}
