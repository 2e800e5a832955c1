//! What the Messages API's prompt caching reads in a request: its breakpoints
//! (`cache_control` markers and the automatic one), refused in the API's words when
//! malformed, as the prefix boundaries the simulator's cache store plays.

use std::time::Duration;

use serde_json::Value;

use crate::sim::cache::{Boundary, CacheUse, Prefix, PromptCache, FIVE_MINUTES, ONE_HOUR};

/// At most this many Anthropic breakpoints per request.
const MAX_BREAKPOINTS: usize = 4;

/// What the breakpoints of `request` read and write (nothing for markers the API would
/// refuse).
pub(super) fn cache_use(cache: &PromptCache, request: &Value, commit: bool) -> CacheUse {
    match anthropic_prefix(request) {
        Ok(b) => {
            let model = request.get("model").and_then(Value::as_str).unwrap_or("");
            cache.anthropic(&b, anthropic_minimum(model), commit)
        }
        Err(_) => CacheUse::default(),
    }
}

/// Content blocks as they would be without their `cache_control` markers; borrowed
/// when there are none (a replay check compares every assistant turn of every request).
pub(in crate::sim) fn without_markers(content: &Value) -> std::borrow::Cow<'_, Value> {
    let marked = content
        .as_array()
        .is_some_and(|bs| bs.iter().any(|b| b.get("cache_control").is_some()));
    if !marked {
        return std::borrow::Cow::Borrowed(content);
    }
    let mut content = content.clone();
    if let Some(blocks) = content.as_array_mut() {
        for b in blocks.iter_mut().filter_map(Value::as_object_mut) {
            b.remove("cache_control");
        }
    }
    std::borrow::Cow::Owned(content)
}

/// The smallest prompt an Anthropic model caches: the runner's table, one for both.
pub(in crate::sim) fn anthropic_minimum(model: &str) -> u64 {
    crate::vocab::cache::min_cacheable_tokens(model)
}

/// The TTL a `cache_control` value asks for, refused in the API's words when malformed.
fn marker_ttl(path: &str, cc: &Value) -> Result<Duration, String> {
    let Some(o) = cc.as_object() else {
        return Err(format!(
            "{path}.cache_control: Input should be a valid dictionary"
        ));
    };
    if o.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return Err(format!(
            "{path}.cache_control.type: Input should be 'ephemeral'"
        ));
    }
    if let Some(k) = o.keys().find(|k| !matches!(k.as_str(), "type" | "ttl")) {
        return Err(format!(
            "{path}.cache_control.ephemeral.{k}: Extra inputs are not permitted"
        ));
    }
    match o.get("ttl") {
        None | Some(Value::Null) => Ok(FIVE_MINUTES),
        Some(v) if v == "5m" => Ok(FIVE_MINUTES),
        Some(v) if v == "1h" => Ok(ONE_HOUR),
        Some(_) => Err(format!(
            "{path}.cache_control.ephemeral.ttl: Input should be '5m' or '1h'"
        )),
    }
}

/// Whether the API lets a breakpoint sit on this block (and the automatic one land on it).
fn cacheable(block: &Value) -> bool {
    match block.get("type").and_then(Value::as_str) {
        Some("thinking" | "redacted_thinking") => false,
        Some("text") => block.get("text").and_then(Value::as_str) != Some(""),
        _ => true,
    }
}

/// The boundaries of a Messages request in prefix order (tools, system, messages), or
/// the 400 the real API gives for its breakpoints: more than four, one on a thinking
/// block or an empty text block, a 1h one after a 5m one, a malformed marker.
pub(in crate::sim) fn anthropic_prefix(request: &Value) -> Result<Vec<Boundary>, String> {
    let model = request.get("model").and_then(Value::as_str).unwrap_or("");
    let mut blocks: Vec<(String, &Value)> = Vec::new();
    for (i, t) in request
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        blocks.push((format!("tools.{i}"), t));
    }
    match request.get("system") {
        Some(Value::Array(sys)) => {
            for (i, b) in sys.iter().enumerate() {
                blocks.push((format!("system.{i}"), b));
            }
        }
        Some(s @ Value::String(_)) => blocks.push(("system".into(), s)),
        _ => {}
    }
    let first_message = blocks.len();
    let mut roles = Vec::new();
    for (m, msg) in request
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        match msg.get("content") {
            Some(Value::Array(content)) => {
                for (j, b) in content.iter().enumerate() {
                    roles.push((blocks.len(), j == 0, msg.get("role")));
                    blocks.push((format!("messages.{m}.content.{j}"), b));
                }
            }
            Some(c) => {
                roles.push((blocks.len(), true, msg.get("role")));
                blocks.push((format!("messages.{m}.content"), c));
            }
            None => {}
        }
    }
    let mut marks: Vec<(usize, Duration)> = Vec::new();
    for (i, (path, b)) in blocks.iter().enumerate() {
        let Some(cc) = b.get("cache_control").filter(|v| !v.is_null()) else {
            continue;
        };
        match b.get("type").and_then(Value::as_str) {
            Some(t @ ("thinking" | "redacted_thinking")) => {
                return Err(format!(
                    "{path}.{t}.cache_control: Extra inputs are not permitted"
                ))
            }
            Some("text") if !cacheable(b) => {
                return Err(format!(
                    "{path}.text: cache_control cannot be set for empty text blocks"
                ))
            }
            _ => {}
        }
        marks.push((i, marker_ttl(path, cc)?));
    }
    if let Some(cc) = request.get("cache_control").filter(|v| !v.is_null()) {
        let ttl = marker_ttl("", cc).map_err(|e| e.trim_start_matches('.').to_string())?;
        let last = blocks.iter().rposition(|(_, b)| cacheable(b));
        if let Some(last) = last.filter(|l| !marks.iter().any(|(i, _)| i == l)) {
            marks.push((last, ttl));
            marks.sort_by_key(|(i, _)| *i);
        }
    }
    if marks.len() > MAX_BREAKPOINTS {
        return Err(format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
            marks.len()
        ));
    }
    if let Some(w) = marks.windows(2).find(|w| w[0].1 < w[1].1) {
        let path = &blocks[w[1].0].0;
        return Err(format!(
            "{path}.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."
        ));
    }
    let mut prefix = Prefix::new(&["anthropic", model]);
    let mut roles = roles.into_iter().peekable();
    for (i, (_, b)) in blocks.iter().enumerate() {
        if i == first_message {
            // The docs: tool_choice and thinking changes invalidate the messages cache.
            prefix.context(request.get("tool_choice").unwrap_or(&Value::Null));
            prefix.context(request.get("thinking").unwrap_or(&Value::Null));
        }
        if let Some((_, starts, role)) = roles.next_if(|(at, _, _)| *at == i) {
            if starts {
                prefix.context(role.unwrap_or(&Value::Null));
            }
        }
        let mark = marks.iter().find(|(at, _)| *at == i).map(|(_, t)| *t);
        prefix.push(b, mark);
    }
    Ok(prefix.out)
}
