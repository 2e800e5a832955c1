//! Prompt caching as the real APIs do it, so a client's caching can be tested over HTTP:
//! the figures in a simulated answer's usage come from what was really sent and what
//! earlier requests left in this simulator's cache, never from the script (which may
//! still override them). The rules and their sources are in docs/simulator.md.
//!
//! A cache entry is the identity of an exact prompt prefix (a hash of the canonical JSON
//! of its blocks, `cache_control` markers removed, so moving a marker does not change
//! what a prefix is) with its expiry on the simulator's clock, which tests can advance.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::lock;

/// Most entries one simulator keeps; past it, those closest to expiry go first.
const MAX_ENTRIES: usize = 20_000;
/// Anthropic looks for a cached prefix this many blocks back from each breakpoint.
const LOOKBACK: usize = 20;
/// At most this many Anthropic breakpoints per request.
const MAX_BREAKPOINTS: usize = 4;
/// OpenAI caches prompts of at least this many tokens, in steps of `OPENAI_STEP`.
const OPENAI_MIN: u64 = 1024;
const OPENAI_STEP: u64 = 128;
const FIVE_MINUTES: Duration = Duration::from_secs(5 * 60);
const ONE_HOUR: Duration = Duration::from_secs(60 * 60);
/// OpenAI's in-memory retention: "cleared within 5 to 10 minutes of inactivity".
const IN_MEMORY: Duration = Duration::from_secs(10 * 60);
const EXTENDED: Duration = Duration::from_secs(24 * 60 * 60);

/// What the cache did for one request, in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheUse {
    pub read: u64,
    pub write_5m: u64,
    pub write_1h: u64,
}

/// One block boundary of a prompt: the identity of the prefix ending there, its size
/// in tokens, and the TTL of a breakpoint placed on the block (if any).
#[derive(Debug, Clone)]
pub struct Boundary {
    key: u64,
    tokens: u64,
    mark: Option<Duration>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    expires: Duration,
    ttl: Duration,
}

#[derive(Default)]
struct Store {
    entries: HashMap<u64, Entry>,
    /// How far tests have moved the clock forward.
    skew: Duration,
}

/// One simulator's prompt cache.
pub struct PromptCache {
    started: Instant,
    store: Mutex<Store>,
}

impl Default for PromptCache {
    fn default() -> PromptCache {
        PromptCache {
            started: Instant::now(),
            store: Mutex::default(),
        }
    }
}

/// Tokens as the simulator counts them everywhere: a quarter of the bytes, rounded up.
fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// Builds the boundaries of a prompt block by block, hashing each prefix as it grows.
struct Prefix {
    hasher: DefaultHasher,
    bytes: usize,
    out: Vec<Boundary>,
}

impl Prefix {
    fn new(scope: &[&str]) -> Prefix {
        let mut hasher = DefaultHasher::new();
        scope.hash(&mut hasher);
        Prefix {
            hasher,
            bytes: 0,
            out: Vec::new(),
        }
    }

    /// Mixes in what shapes the prompt without being a block (a role, a setting).
    fn context(&mut self, v: &Value) {
        v.to_string().hash(&mut self.hasher);
    }

    fn push(&mut self, block: &Value, mark: Option<Duration>) {
        // Copied only to drop a marker: most blocks have none.
        let text = match block.get("cache_control") {
            None => block.to_string(),
            Some(_) => {
                let mut plain = block.clone();
                if let Some(o) = plain.as_object_mut() {
                    o.remove("cache_control");
                }
                plain.to_string()
            }
        };
        text.hash(&mut self.hasher);
        self.bytes += text.len();
        self.out.push(Boundary {
            key: self.hasher.clone().finish(),
            tokens: tokens(self.bytes),
            mark,
        });
    }
}

/// Content blocks as they would be without their `cache_control` markers; borrowed
/// when there are none (a replay check compares every assistant turn of every request).
pub fn without_markers(content: &Value) -> std::borrow::Cow<'_, Value> {
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
pub fn anthropic_minimum(model: &str) -> u64 {
    crate::vocab::cache::min_cacheable_tokens(model)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "an integer",
        Value::Number(_) => "a decimal",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
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
pub fn anthropic_prefix(request: &Value) -> Result<Vec<Boundary>, String> {
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

/// Refuses malformed OpenAI prompt-cache fields in OpenAI's words.
pub fn check_openai_fields(request: &Value) -> Result<(), String> {
    match request.get("prompt_cache_key") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k.chars().count() > 64 => {
            return Err(format!(
                "Invalid 'prompt_cache_key': string too long. Expected a string with maximum length 64, but got a string with length {} instead.",
                k.chars().count()
            ))
        }
        Some(Value::String(_)) => {}
        Some(v) => {
            return Err(format!(
                "Invalid type for 'prompt_cache_key': expected a string, but got {} instead.",
                kind(v)
            ))
        }
    }
    match request.get("prompt_cache_retention") {
        None | Some(Value::Null) => Ok(()),
        Some(v) if v == "in_memory" || v == "24h" => Ok(()),
        Some(Value::String(s)) => Err(format!(
            "Invalid value: '{s}'. Supported values are: 'in_memory' and '24h'."
        )),
        Some(v) => Err(format!(
            "Invalid type for 'prompt_cache_retention': expected one of 'in_memory' or '24h', but got {} instead.",
            kind(v)
        )),
    }
}

/// The boundaries of an OpenAI prompt (tools, then the conversation: instructions and
/// input items, or messages), scoped by the API (`scope`), model and `prompt_cache_key`.
pub fn openai_prefix<'a>(
    scope: &str,
    request: &Value,
    conversation: impl IntoIterator<Item = &'a Value>,
) -> Vec<Boundary> {
    let text = |f: &str| request.get(f).and_then(Value::as_str).unwrap_or("");
    let mut prefix = Prefix::new(&[scope, text("model"), text("prompt_cache_key")]);
    let tools = request.get("tools").and_then(Value::as_array);
    for t in tools.into_iter().flatten() {
        prefix.push(t, None);
    }
    for v in conversation {
        prefix.push(v, None);
    }
    prefix.out
}

impl PromptCache {
    fn now(&self, store: &Store) -> Duration {
        self.started.elapsed() + store.skew
    }

    /// Moves this cache's clock forward, so tests can expire entries.
    pub fn advance(&self, by: Duration) {
        lock(&self.store).skew += by;
    }

    /// Anthropic: what the breakpoints of `request` read and write (nothing for markers
    /// the API would refuse).
    pub(super) fn anthropic_request(&self, request: &Value, commit: bool) -> CacheUse {
        match anthropic_prefix(request) {
            Ok(b) => {
                let model = request.get("model").and_then(Value::as_str).unwrap_or("");
                self.anthropic(&b, anthropic_minimum(model), commit)
            }
            Err(_) => CacheUse::default(),
        }
    }

    /// OpenAI: what the prompt's prefix (see [`openai_prefix`]) reads and writes, kept
    /// as long as `prompt_cache_retention` says.
    pub(super) fn openai_request(
        &self,
        request: &Value,
        bounds: &[Boundary],
        commit: bool,
    ) -> CacheUse {
        let ttl = if request.get("prompt_cache_retention") == Some(&Value::from("24h")) {
            EXTENDED
        } else {
            IN_MEMORY
        };
        self.openai(bounds, ttl, commit)
    }

    /// Anthropic: the longest live prefix found at or up to 20 blocks before a
    /// breakpoint is read; the breakpoints past it are written, 1h first (billed
    /// 1h up to the last 1h breakpoint, 5m from there to the last breakpoint).
    /// Without `commit`, nothing is written or refreshed.
    pub fn anthropic(&self, bounds: &[Boundary], minimum: u64, commit: bool) -> CacheUse {
        let mut store = lock(&self.store);
        let now = self.now(&store);
        let live = |s: &Store, b: &Boundary| {
            b.tokens >= minimum && s.entries.get(&b.key).is_some_and(|e| e.expires > now)
        };
        let mut hit: Option<&Boundary> = None;
        for (at, _) in bounds.iter().enumerate().filter(|(_, b)| b.mark.is_some()) {
            let found = bounds[at.saturating_sub(LOOKBACK)..=at]
                .iter()
                .rev()
                .find(|b| live(&store, b));
            if let Some(f) = found.filter(|f| hit.is_none_or(|h| f.tokens > h.tokens)) {
                hit = Some(f);
            }
        }
        let read = hit.map_or(0, |h| h.tokens);
        if let Some(e) = hit
            .filter(|_| commit)
            .and_then(|h| store.entries.get_mut(&h.key))
        {
            e.expires = now + e.ttl;
        }
        let marked: Vec<&Boundary> = bounds
            .iter()
            .filter(|b| b.mark.is_some() && b.tokens >= minimum)
            .collect();
        let last = marked.last().map_or(read, |b| b.tokens.max(read));
        let last_1h = marked
            .iter()
            .filter(|b| b.mark == Some(ONE_HOUR) && b.tokens > read)
            .map(|b| b.tokens)
            .max()
            .unwrap_or(read);
        for b in marked.iter().filter(|_| commit) {
            let ttl = b.mark.unwrap_or(FIVE_MINUTES);
            upsert(&mut store, b.key, now, ttl);
        }
        CacheUse {
            read,
            write_1h: last_1h - read,
            write_5m: last - last_1h,
        }
    }

    /// OpenAI: the longest live prefix of at least 1024 tokens is read, rounded down
    /// to a multiple of 128 tokens; every prefix of at least 1024 tokens is kept.
    /// Without `commit`, nothing is written or refreshed.
    pub fn openai(&self, bounds: &[Boundary], ttl: Duration, commit: bool) -> CacheUse {
        let mut store = lock(&self.store);
        let now = self.now(&store);
        let hit = bounds.iter().rev().find(|b| {
            b.tokens >= OPENAI_MIN && store.entries.get(&b.key).is_some_and(|e| e.expires > now)
        });
        let read = hit.map_or(0, |h| h.tokens / OPENAI_STEP * OPENAI_STEP);
        for b in bounds.iter().filter(|b| commit && b.tokens >= OPENAI_MIN) {
            upsert(&mut store, b.key, now, ttl);
        }
        CacheUse {
            read,
            ..CacheUse::default()
        }
    }
}

/// Writes or refreshes an entry (a longer TTL already there is kept), then bounds the
/// store.
fn upsert(store: &mut Store, key: u64, now: Duration, ttl: Duration) {
    let e = store
        .entries
        .entry(key)
        .or_insert(Entry { expires: now, ttl });
    e.ttl = e.ttl.max(ttl);
    e.expires = e.expires.max(now + e.ttl);
    if store.entries.len() > MAX_ENTRIES {
        store.entries.retain(|_, e| e.expires > now);
        if store.entries.len() > MAX_ENTRIES {
            let mut by_expiry: Vec<(Duration, u64)> =
                store.entries.iter().map(|(k, e)| (e.expires, *k)).collect();
            by_expiry.sort_unstable();
            for (_, k) in by_expiry.iter().take(MAX_ENTRIES / 4) {
                store.entries.remove(k);
            }
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
