//! Providers: the built-in ones and the job's `providers:`, each with its protocol,
//! endpoint, API key variable and rate limits checked against that protocol; and, per
//! task, the provider it names and whether its key is set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::{key, origin};
use super::environment::Environment;
use super::locate::Seg;
use super::schema::{
    JobFile, MaxTokensField, ParallelToolCalls, ProviderFields, StreamOptions, TaskFields,
};
use super::schema_providers::{ServerLimitFields, BUILTIN_PROVIDERS};
use super::spec::{ProviderKind, ProviderSpec};
use crate::model::Protocol;
use crate::vocab::bounds;
use crate::vocab::limits::RateLimits;
use crate::vocab::values::HumanDuration;

const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
const DEFAULT_RATE_LIMIT_RETRIES: u32 = 8;
/// The default `max_response_bytes`: far above any real answer (a 128k-token answer with
/// its JSON framing is well under 2 MB), far below what would hurt the runner.
const DEFAULT_RESPONSE_BYTES: u64 = 64 << 20;
/// The default `stream_idle_timeout`: Anthropic pings an idle stream every few seconds,
/// so two minutes without a byte is a dead connection, not a slow model.
const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(120);

/// Every provider a task may name, by name.
pub(super) fn resolve_providers(
    job: &JobFile,
    cx: &mut Ctx,
) -> BTreeMap<String, Arc<ProviderSpec>> {
    let mut names: Vec<&str> = BUILTIN_PROVIDERS.iter().map(|(n, _, _)| *n).collect();
    names.extend(job.providers.keys().map(String::as_str));
    names.dedup();
    let mut out = BTreeMap::new();
    let mut limited_sims = Vec::new();
    for name in names {
        if out.contains_key(name) {
            continue;
        }
        let f = job.providers.get(name).cloned().unwrap_or_default();
        let spec = resolve_provider(name, f, &mut limited_sims, cx);
        out.insert(name.to_string(), Arc::new(spec));
    }
    out
}

/// The protocol and the kind of a provider (a built-in one has both, a job's provider
/// names its protocol and may say it is a simulator).
fn protocol_and_kind(name: &str, f: &ProviderFields, cx: &mut Ctx) -> (Protocol, ProviderKind) {
    let at = |field: &str| vec![key("providers"), key(name), key(field)];
    let builtin = BUILTIN_PROVIDERS.iter().find(|(n, _, _)| *n == name);
    let protocol = match (f.protocol, builtin) {
        (Some(p), _) => p,
        (None, Some((_, p, _))) => *p,
        (None, None) => {
            cx.err(
                &[key("providers"), key(name)],
                format!(
                    "provider \"{name}\" needs a `protocol`: {}",
                    Protocol::ALL.map(Protocol::as_str).join(", ")
                ),
            );
            Protocol::DEFAULT
        }
    };
    let simulated = match (f.simulator, builtin) {
        (Some(false), Some((_, _, true))) => {
            cx.err(
                &at("simulator"),
                "the built-in provider sim is always the simulator: define another provider for a real server",
            );
            true
        }
        (Some(s), _) => s,
        (None, Some((_, _, s))) => *s,
        (None, None) => false,
    };
    let kind = if simulated {
        ProviderKind::Sim
    } else {
        ProviderKind::Api
    };
    if kind == ProviderKind::Sim && f.api_key_env.is_some() {
        cx.err(&at("api_key_env"), "the simulator needs no API key");
    }
    (protocol, kind)
}

/// Refuses the provider fields its protocol does not take.
fn fields_that_apply(name: &str, protocol: Protocol, f: &ProviderFields, cx: &mut Ctx) {
    let at = |field: &str| vec![key("providers"), key(name), key(field)];
    let anthropic_only: [(&str, bool); 1] = [("anthropic_version", f.anthropic_version.is_some())];
    let openai_only = [
        ("max_tokens_field", f.max_tokens_field.is_some()),
        ("parallel_tool_calls", f.parallel_tool_calls.is_some()),
        ("stream_options", f.stream_options.is_some()),
    ];
    for (field, set) in anthropic_only {
        if set && !protocol.facts().takes_anthropic_version {
            cx.err(
                &at(field),
                format!("applies to the anthropic protocol only, not {protocol}"),
            );
        }
    }
    for (field, set) in openai_only {
        let facts = protocol.facts();
        let applies = match field {
            "max_tokens_field" => facts.takes_max_tokens_field,
            "stream_options" => facts.takes_stream_options,
            _ => facts.takes_parallel_tool_calls,
        };
        if set && !applies {
            cx.err(
                &at(field),
                format!("does not apply to the {protocol} protocol"),
            );
        }
    }
}

/// One provider, `f` as written (empty for a built-in one the job does not mention).
/// `limited_sims` collects the simulated providers with `server_limits`, of which
/// there may be one.
fn resolve_provider(
    name: &str,
    f: ProviderFields,
    limited_sims: &mut Vec<String>,
    cx: &mut Ctx,
) -> ProviderSpec {
    let at = |field: &str| vec![key("providers"), key(name), key(field)];
    let (protocol, kind) = protocol_and_kind(name, &f, cx);
    let base_url = match (&f.base_url, kind) {
        (Some(u), _) => Some(u.clone()),
        (None, ProviderKind::Api) => Some(protocol.default_base_url().to_string()),
        (None, ProviderKind::Sim) => None,
    };
    if let Some(u) = &base_url {
        if let Err(e) = protocol.url(u) {
            cx.err(&at("base_url"), e);
        }
    }
    fields_that_apply(name, protocol, &f, cx);
    let ProviderFields {
        anthropic_version,
        timeout,
        max_response_bytes,
        max_retries,
        max_rate_limit_retries,
        api_key_env,
        api_key_optional,
        max_tokens_field,
        parallel_tool_calls,
        cache,
        batch,
        stream,
        stream_idle_timeout,
        stream_options,
        rpm,
        itpm,
        otpm,
        burst,
        server_limits,
        ..
    } = f;
    if api_key_optional.is_some() && kind == ProviderKind::Sim {
        cx.err(&at("api_key_optional"), "the simulator needs no API key");
    }
    let base = vec![key("providers"), key(name)];
    let rate = rate_limits(cx, &base, rpm, itpm, otpm, burst);
    let server_limits_unstated = server_limits
        .as_ref()
        .is_some_and(|s| s.headers == Some(false));
    let server_limits = resolve_server_limits(
        name,
        (kind, base_url.is_some()),
        server_limits,
        limited_sims,
        cx,
    );
    if let Some(v) = anthropic_version.as_deref() {
        let header_safe = !v.trim().is_empty() && v.bytes().all(|b| b.is_ascii_graphic());
        if !header_safe {
            cx.err(
                &at("anthropic_version"),
                "must be a version such as \"2023-06-01\" (no spaces or special characters)",
            );
        }
    }
    // OpenAI's own endpoint wants max_completion_tokens (its reasoning models refuse
    // max_tokens); compatible servers mostly know only max_tokens.
    let on_openai = base_url
        .as_deref()
        .is_some_and(|u| u.contains("api.openai.com"));
    let max_tokens_field = match max_tokens_field {
        Some(MaxTokensField::MaxTokens) => "max_tokens",
        Some(MaxTokensField::MaxCompletionTokens) => "max_completion_tokens",
        None if on_openai => "max_completion_tokens",
        None => "max_tokens",
    };
    if let Some(b) = max_response_bytes.filter(|b| b.0 > bounds::RESPONSE_BYTES) {
        cx.err(
            &at("max_response_bytes"),
            format!(
                "{} bytes is too large: at most {}",
                b.0,
                bounds::RESPONSE_BYTES
            ),
        );
    }
    let default_key_env = (kind == ProviderKind::Api).then(|| protocol.default_key_env());
    ProviderSpec {
        name: name.to_string(),
        kind,
        protocol,
        base_url,
        api_key_env: api_key_env.or_else(|| default_key_env.map(str::to_string)),
        api_key_optional: api_key_optional.unwrap_or(false),
        anthropic_version: anthropic_version.unwrap_or_else(|| DEFAULT_ANTHROPIC_VERSION.into()),
        max_tokens_field: max_tokens_field.to_string(),
        cache,
        batch,
        parallel_tool_calls: match parallel_tool_calls {
            _ if !protocol.facts().takes_parallel_tool_calls => None,
            Some(ParallelToolCalls::Send(v)) => Some(v),
            Some(ParallelToolCalls::Omit(_)) => None,
            None => Some(true),
        },
        timeout: timeout.map_or(Duration::from_secs(600), |d| d.0),
        stream,
        stream_idle_timeout: stream_idle_timeout.map_or(DEFAULT_STREAM_IDLE, |d| d.0),
        stream_usage: stream_options != Some(StreamOptions::Omit),
        max_response_bytes: max_response_bytes.map_or(DEFAULT_RESPONSE_BYTES, |b| b.0),
        max_retries: max_retries.unwrap_or(2),
        max_rate_limit_retries: max_rate_limit_retries.unwrap_or(DEFAULT_RATE_LIMIT_RETRIES),
        rate,
        server_limits,
        server_limits_unstated,
    }
}

/// A simulated provider's `server_limits`, of which a run has one set.
fn resolve_server_limits(
    name: &str,
    (kind, has_base_url): (ProviderKind, bool),
    server_limits: Option<ServerLimitFields>,
    limited_sims: &mut Vec<String>,
    cx: &mut Ctx,
) -> Option<RateLimits> {
    let at = |field: &str| vec![key("providers"), key(name), key(field)];
    let base = vec![key("providers"), key(name)];
    let limits = server_limits.map(|s| {
        if kind != ProviderKind::Sim {
            cx.err(
                &at("server_limits"),
                "only a simulated provider (providers.sim, or one with `simulator: true`) has server limits",
            );
        } else if has_base_url {
            cx.err(
                &at("server_limits"),
                "apply only to the simulator a run starts; start a standalone one with `agentbatch sim --rpm N --itpm N --otpm N`",
            );
        }
        limited_sims.push(name.to_string());
        let mut at = base.clone();
        at.push(key("server_limits"));
        rate_limits(cx, &at, s.rpm, s.itpm, s.otpm, s.burst)
    });
    if limited_sims.len() > 1 {
        cx.err(
            &at("server_limits"),
            format!(
                "the run's simulator has one set of limits, already given by providers.{}",
                limited_sims[0]
            ),
        );
    }
    limits
}

/// Checks and resolves per-minute limits set at `at`.
pub(super) fn rate_limits(
    cx: &mut Ctx,
    at: &[Seg],
    rpm: Option<u32>,
    itpm: Option<u32>,
    otpm: Option<u32>,
    burst: Option<HumanDuration>,
) -> RateLimits {
    for (name, v) in [("rpm", rpm), ("itpm", itpm), ("otpm", otpm)] {
        if v == Some(0) {
            let mut p = at.to_vec();
            p.push(key(name));
            cx.err(&p, "must be at least 1 (leave it out for no limit)");
        }
    }
    RateLimits {
        rpm: rpm.filter(|v| *v > 0),
        itpm: itpm.filter(|v| *v > 0),
        otpm: otpm.filter(|v| *v > 0),
        burst: burst.map_or(Duration::from_secs(1), |b| b.0),
    }
}

/// The provider a task names (`sim` unless it or `defaults` names another), with the
/// place it was named, for the errors about it.
pub(super) fn resolve_task_provider(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    providers: &BTreeMap<String, Arc<ProviderSpec>>,
    cx: &mut Ctx,
) -> (Option<Arc<ProviderSpec>>, Vec<Seg>) {
    let provider_name = t
        .provider
        .clone()
        .or_else(|| d.provider.clone())
        .unwrap_or_else(|| "sim".into());
    let provider_at = origin(i, t.provider.is_some(), d.provider.is_some(), &["provider"]);
    let provider = providers.get(&provider_name).cloned();
    if provider.is_none() {
        cx.err(
            &provider_at,
            format!(
                "unknown provider \"{provider_name}\": the providers are {}",
                providers
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    (provider, provider_at)
}

/// The message for a real provider whose API key variable `env` does not have, or None.
pub(super) fn missing_api_key(p: &ProviderSpec, env: &Environment) -> Option<String> {
    if p.kind != ProviderKind::Api || p.api_key_optional || env.keys_on_workers {
        return None;
    }
    let var = p.api_key_env.as_ref()?;
    (!env.is_set(var)).then(|| {
        format!("the API key variable {var} is not set: export {var}=<your key>, name another variable in providers.{}.api_key_env, or set providers.{}.api_key_optional: true for a server that takes no key", p.name, p.name)
    })
}
