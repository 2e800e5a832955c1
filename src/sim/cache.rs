//! Prompt caching as the real APIs do it, so a client's caching can be tested over HTTP:
//! the figures in a simulated answer's usage come from what was really sent and what
//! earlier requests left in this simulator's cache, never from the script (which may
//! still override them). The rules and their sources are in docs/simulator.md.
//!
//! A cache entry is the identity of an exact prompt prefix (a hash of the canonical JSON
//! of its blocks, `cache_control` markers removed, so moving a marker does not change
//! what a prefix is) with its expiry on the simulator's clock, which tests can advance.
//! What a request of each protocol asks the cache for (Anthropic's breakpoints, OpenAI's
//! prefix and retention) is read in `protocol/*/cache.rs`; the store here plays it.

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
/// OpenAI caches prompts of at least this many tokens, in steps of `OPENAI_STEP`.
const OPENAI_MIN: u64 = 1024;
const OPENAI_STEP: u64 = 128;
/// Anthropic's two marker lifetimes.
pub(in crate::sim) const FIVE_MINUTES: Duration = Duration::from_secs(5 * 60);
pub(in crate::sim) const ONE_HOUR: Duration = Duration::from_secs(60 * 60);

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
pub(in crate::sim) struct Prefix {
    hasher: DefaultHasher,
    bytes: usize,
    pub(in crate::sim) out: Vec<Boundary>,
}

impl Prefix {
    pub(in crate::sim) fn new(scope: &[&str]) -> Prefix {
        let mut hasher = DefaultHasher::new();
        scope.hash(&mut hasher);
        Prefix {
            hasher,
            bytes: 0,
            out: Vec::new(),
        }
    }

    /// Mixes in what shapes the prompt without being a block (a role, a setting).
    pub(in crate::sim) fn context(&mut self, v: &Value) {
        v.to_string().hash(&mut self.hasher);
    }

    pub(in crate::sim) fn push(&mut self, block: &Value, mark: Option<Duration>) {
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

impl PromptCache {
    fn now(&self, store: &Store) -> Duration {
        self.started.elapsed() + store.skew
    }

    /// Moves this cache's clock forward, so tests can expire entries.
    pub fn advance(&self, by: Duration) {
        lock(&self.store).skew += by;
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
