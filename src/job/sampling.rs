//! What a task sends besides its messages: `max_tokens`, sampling parameters
//! (`temperature`, `top_p`, `top_k`), `reasoning`, `thinking` and
//! `parallel_tool_calls`, each checked against the provider's protocol and API version
//! and put into the request under that protocol's name for it.

use serde_json::{json, Map, Value};

use super::context::Ctx;
use super::diagnostics::{key, origin};
use super::limits::limit_origin;
use super::locate::Seg;
use super::schema::{ReasoningFields, TaskFields, ThinkingFields, ThinkingKind};
use super::spec::ProviderSpec;
use crate::model::Protocol;
use crate::vocab::protocol::{Facts, Reasoning};

const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The API version that removed sampling parameters.
const NO_SAMPLING_VERSION: &str = "2026-10-21";

/// The task's `max_tokens`, and where it was set.
pub(super) fn resolve_max_tokens(i: usize, t: &TaskFields, d: &TaskFields) -> (u32, Vec<Seg>) {
    let max_tokens = t.max_tokens.or(d.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS);
    let max_tokens_at = origin(
        i,
        t.max_tokens.is_some(),
        d.max_tokens.is_some(),
        &["max_tokens"],
    );
    (max_tokens, max_tokens_at)
}

/// The request fields a task adds (`extra`) and its thinking budget.
pub(super) struct RequestFields {
    pub extra: Map<String, Value>,
    pub thinking_budget: Option<u32>,
}

/// What the task's request carries besides messages, checked against the protocol of
/// `provider` (Anthropic's rules when the provider is unknown, which is reported
/// elsewhere).
#[allow(clippy::too_many_arguments)]
pub(super) fn resolve_request_fields(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    provider: Option<&ProviderSpec>,
    (max_tokens, max_tokens_at): (u32, &[Seg]),
    min_max_tokens: u32,
    has_tools: bool,
    cx: &mut Ctx,
) -> RequestFields {
    let protocol = provider.map(|p| p.protocol);
    let mut extra = Map::new();
    let facts = protocol.unwrap_or(Protocol::DEFAULT).facts();
    let version = provider
        .filter(|_| facts.takes_anthropic_version)
        .map(|p| p.anthropic_version.clone())
        .unwrap_or_default();
    // The Responses API refuses max_output_tokens below 16.
    if let Some(least) = protocol.and(facts.min_output_tokens) {
        let name = facts.name;
        if max_tokens < least {
            cx.err(max_tokens_at, format!("{name} needs at least {least}"));
        }
        if min_max_tokens < least {
            let at = limit_origin(i, t, d, "min_max_tokens", |l| l.min_max_tokens.is_some());
            cx.err(
                &at,
                format!("{name} needs at least {least} (its smallest max_output_tokens)"),
            );
        }
    }
    sampling_fields(i, (t, d), facts, &version, &mut extra, cx);
    if let Some(r) = t.reasoning.as_ref().or(d.reasoning.as_ref()) {
        let at = origin(
            i,
            t.reasoning.is_some(),
            d.reasoning.is_some(),
            &["reasoning"],
        );
        reasoning_fields(r, protocol, &at, &mut extra, cx);
    }
    if let (Some(parallel), true) = (provider.and_then(|p| p.parallel_tool_calls), has_tools) {
        extra.insert("parallel_tool_calls".into(), json!(parallel));
    }
    let thinking = t.thinking.clone().or_else(|| d.thinking.clone());
    let thinking_budget = match thinking.as_ref().map(|th| check_thinking(th, max_tokens)) {
        Some(Err(e @ ThinkingError::NotBelowMaxTokens { .. })) => {
            cx.err(
                &origin(i, t.thinking.is_some(), d.thinking.is_some(), &["thinking"]),
                e.to_string(),
            );
            None
        }
        // Reported where the setting is written (fields.rs).
        Some(Err(_)) | None => None,
        Some(Ok(budget)) => budget,
    };
    if let Some(th) = thinking
        .as_ref()
        .filter(|th| th.kind != ThinkingKind::Disabled)
    {
        for name in ["temperature", "top_k"] {
            if extra.contains_key(name) {
                cx.err(
                    &origin(i, t.thinking.is_some(), d.thinking.is_some(), &["thinking"]),
                    format!(
                        "thinking ({:?}) cannot be combined with {name}: remove one of them",
                        th.kind
                    )
                    .to_lowercase(),
                );
            }
        }
    }
    if let (Some(_), false) = (&thinking, facts.takes_thinking) {
        cx.err(
            &origin(i, t.thinking.is_some(), d.thinking.is_some(), &["thinking"]),
            "thinking is an Anthropic setting: for OpenAI reasoning models use `reasoning: {effort: ..., summary: ...}`",
        );
    }
    if let Some(th) = &thinking {
        extra.insert(
            "thinking".into(),
            serde_json::to_value(th).unwrap_or(Value::Null),
        );
    }
    RequestFields {
        extra,
        thinking_budget,
    }
}

/// Checks temperature, top_p and top_k against the protocol (and its API version) and
/// puts them into the request.
fn sampling_fields(
    i: usize,
    (t, d): (&TaskFields, &TaskFields),
    facts: &Facts,
    version: &str,
    extra: &mut Map<String, Value>,
    cx: &mut Ctx,
) {
    let sampling: [(&str, Option<Value>, bool); 3] = [
        (
            "temperature",
            t.temperature.or(d.temperature).map(|v| json!(v)),
            t.temperature.is_some(),
        ),
        (
            "top_p",
            t.top_p.or(d.top_p).map(|v| json!(v)),
            t.top_p.is_some(),
        ),
        (
            "top_k",
            t.top_k.or(d.top_k).map(|v| json!(v)),
            t.top_k.is_some(),
        ),
    ];
    for (name, value, on_task) in sampling {
        let Some(value) = value else { continue };
        let at = origin(i, on_task, !on_task, &[name]);
        // API versions are dates, so a later version compares greater as a string.
        if facts.takes_anthropic_version && version >= NO_SAMPLING_VERSION {
            cx.err(
                &at,
                format!("anthropic-version {NO_SAMPLING_VERSION} refuses {name}: remove it, or set the provider's anthropic_version to 2023-06-01"),
            );
        }
        if !facts.takes_top_k && name == "top_k" {
            cx.err(&at, "OpenAI protocols have no top_k: remove it");
        }
        // OpenAI's temperature goes up to 2 (checked where it is written), Anthropic's
        // to 1.
        let most = facts.max_temperature;
        if name == "temperature" && value.as_f64().is_some_and(|v| v > most && v <= 2.0) {
            let protocol = facts.name;
            cx.err(
                &at,
                format!("must be between 0 and {most} with the {protocol} protocol"),
            );
        }
        extra.insert(name.to_string(), value);
    }
}

/// Checks `reasoning` against the protocol and puts it into the request under the
/// protocol's name for it (each value on its own is checked where it is written, in
/// fields.rs).
fn reasoning_fields(
    r: &ReasoningFields,
    protocol: Option<Protocol>,
    at: &[Seg],
    extra: &mut Map<String, Value>,
    cx: &mut Ctx,
) {
    let mut sub = |field: &str, msg: String| {
        let mut p = at.to_vec();
        p.push(key(field));
        cx.err(&p, msg);
    };
    match protocol.map(|p| p.facts().reasoning) {
        Some(Reasoning::Object) => {
            extra.insert(
                "reasoning".into(),
                serde_json::to_value(r).unwrap_or(Value::Null),
            );
        }
        Some(Reasoning::EffortOnly) => {
            if r.summary.is_some() {
                sub(
                    "summary",
                    "Chat Completions has no reasoning summaries (use protocol openai-responses)".into(),
                );
            }
            if let Some(e) = &r.effort {
                extra.insert("reasoning_effort".into(), json!(e));
            }
        }
        Some(Reasoning::Refused) => cx.err(
            at,
            "reasoning is an OpenAI setting: for Anthropic models use `thinking: {type: enabled, budget_tokens: N}`",
        ),
        None => {}
    }
}

/// What is wrong with a `thinking` setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum ThinkingError {
    #[error("type enabled needs budget_tokens (at least 1024)")]
    NoBudget,
    #[error("budget_tokens {0} is below the minimum of 1024")]
    BelowMinimum(u32),
    #[error("budget_tokens {budget} must be less than max_tokens {max_tokens}")]
    NotBelowMaxTokens { budget: u32, max_tokens: u32 },
    #[error("budget_tokens applies only to type enabled")]
    BudgetWithoutEnabled,
}

/// The thinking budget of a valid setting (Some for `enabled`), or what is wrong.
pub(super) fn check_thinking(
    th: &ThinkingFields,
    max_tokens: u32,
) -> Result<Option<u32>, ThinkingError> {
    match thinking_shape(th)? {
        Some(b) if b >= max_tokens => Err(ThinkingError::NotBelowMaxTokens {
            budget: b,
            max_tokens,
        }),
        budget => Ok(budget),
    }
}

/// What a `thinking` setting is wrong in on its own (whatever the task's max_tokens),
/// or its budget (Some for `enabled`).
pub(super) fn thinking_shape(th: &ThinkingFields) -> Result<Option<u32>, ThinkingError> {
    match (th.kind, th.budget_tokens) {
        (ThinkingKind::Enabled, None) => Err(ThinkingError::NoBudget),
        (ThinkingKind::Enabled, Some(b)) if b < 1024 => Err(ThinkingError::BelowMinimum(b)),
        (ThinkingKind::Enabled, Some(b)) => Ok(Some(b)),
        (_, Some(_)) => Err(ThinkingError::BudgetWithoutEnabled),
        (_, None) => Ok(None),
    }
}
