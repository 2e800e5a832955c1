use serde_json::{json, Value};

use super::*;
use crate::model::Protocol;
use crate::sim::protocol::anthropic::cache::{anthropic_minimum, anthropic_prefix};
use crate::sim::protocol::openai::cache::{check_openai_fields, openai_prefix};
use crate::sim::protocol::served;

/// A Messages request whose system block is `n` bytes of text, with a breakpoint on it
/// (ttl given or absent), then one user message.
fn request(model: &str, n: usize, ttl: Option<&str>, question: &str) -> Value {
    let mut cc = json!({"type": "ephemeral"});
    if let Some(t) = ttl {
        cc["ttl"] = json!(t);
    }
    json!({"model": model, "max_tokens": 100,
        "system": [{"type": "text", "text": "s".repeat(n), "cache_control": cc}],
        "messages": [{"role": "user", "content": question}]})
}

fn apply(cache: &PromptCache, r: &Value) -> CacheUse {
    served(Protocol::Anthropic).cache_use(cache, r, true)
}

fn system_tokens(r: &Value) -> u64 {
    anthropic_prefix(r).unwrap()[0].tokens
}

#[test]
fn a_prefix_written_once_is_read_the_second_time() {
    let cache = PromptCache::default();
    let r = request("claude-sonnet-4-6", 8000, None, "why?");
    let t = system_tokens(&r);
    assert!(t >= 1024);
    assert_eq!(
        apply(&cache, &r),
        CacheUse {
            read: 0,
            write_5m: t,
            write_1h: 0
        }
    );
    let again = request("claude-sonnet-4-6", 8000, None, "and then?");
    assert_eq!(
        apply(&cache, &again),
        CacheUse {
            read: t,
            write_5m: 0,
            write_1h: 0
        }
    );
}

#[test]
fn one_changed_byte_before_the_breakpoint_misses() {
    let cache = PromptCache::default();
    apply(&cache, &request("claude-sonnet-4-6", 8000, None, "q"));
    let mut changed = request("claude-sonnet-4-6", 8000, None, "q");
    changed["system"][0]["text"] = json!(format!("t{}", "s".repeat(7999)));
    let u = apply(&cache, &changed);
    assert_eq!(u.read, 0);
    assert_eq!(u.write_5m, system_tokens(&changed));
}

#[test]
fn moving_a_marker_keeps_the_prefix() {
    let cache = PromptCache::default();
    let first = request("claude-sonnet-4-6", 8000, None, "q");
    apply(&cache, &first);
    let mut moved = first.clone();
    moved["system"][0]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    moved["messages"] = json!([{"role": "user", "content": [
        {"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]}]);
    let u = apply(&cache, &moved);
    assert_eq!(u.read, system_tokens(&first));
    assert!(u.write_5m > 0 && u.write_5m < 10);
}

#[test]
fn below_the_minimum_nothing_is_written_or_read() {
    let cache = PromptCache::default();
    // About 1000 tokens: under Sonnet's 1024, and Haiku 4.5 needs 4096.
    let short = request("claude-sonnet-4-6", 3990, None, "q");
    assert!(system_tokens(&short) < 1024);
    assert_eq!(apply(&cache, &short), CacheUse::default());
    assert_eq!(apply(&cache, &short), CacheUse::default());
    let haiku = request("claude-haiku-4-5", 8000, None, "q");
    assert_eq!(apply(&cache, &haiku), CacheUse::default());
    assert_eq!(apply(&cache, &haiku), CacheUse::default());
    assert_eq!(anthropic_minimum("claude-opus-4-6"), 4096);
    assert_eq!(anthropic_minimum("claude-opus-5-5"), 512);
    assert_eq!(anthropic_minimum("claude-haiku-3-5-20241022"), 2048);
    assert_eq!(anthropic_minimum("claude-sonnet-5-5"), 1024);
    assert_eq!(anthropic_minimum("some-local-model"), 1024);
}

#[test]
fn entries_expire_after_their_ttl_and_a_read_refreshes_them() {
    let cache = PromptCache::default();
    let r = request("claude-sonnet-4-6", 8000, None, "q");
    apply(&cache, &r);
    cache.advance(Duration::from_secs(4 * 60));
    assert!(apply(&cache, &r).read > 0, "read at 4 minutes");
    // The read refreshed it: 4 more minutes is 8 after the write, 4 after the read.
    cache.advance(Duration::from_secs(4 * 60));
    assert!(apply(&cache, &r).read > 0, "read 4 minutes after a read");
    cache.advance(Duration::from_secs(5 * 60 + 1));
    let u = apply(&cache, &r);
    assert_eq!(u.read, 0, "expired after 5 minutes unused");
    assert_eq!(u.write_5m, system_tokens(&r));

    let long = request("claude-sonnet-4-6", 8001, Some("1h"), "q1h");
    let w = apply(&cache, &long);
    assert_eq!((w.write_1h, w.write_5m), (system_tokens(&long), 0));
    cache.advance(Duration::from_secs(59 * 60));
    assert!(apply(&cache, &long).read > 0, "a 1h entry lives 59 minutes");
    cache.advance(Duration::from_secs(60 * 60 + 1));
    assert_eq!(apply(&cache, &long).read, 0);
}

#[test]
fn mixed_ttls_bill_1h_then_5m() {
    let cache = PromptCache::default();
    let r = json!({"model": "claude-sonnet-4-6", "max_tokens": 10,
        "system": [
            {"type": "text", "text": "a".repeat(6000), "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            {"type": "text", "text": "b".repeat(6000), "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "q"}]});
    let b = anthropic_prefix(&r).unwrap();
    let u = apply(&cache, &r);
    assert_eq!(u.write_1h, b[0].tokens);
    assert_eq!(u.write_5m, b[1].tokens - b[0].tokens);
}

fn marked(n: usize) -> Value {
    let blocks: Vec<Value> = (0..n)
        .map(|i| json!({"type": "text", "text": format!("part {i}"), "cache_control": {"type": "ephemeral"}}))
        .collect();
    json!({"model": "claude-sonnet-4-6", "max_tokens": 10,
        "messages": [{"role": "user", "content": blocks}]})
}

#[test]
fn refuses_what_the_api_refuses() {
    assert!(anthropic_prefix(&marked(4)).is_ok());
    assert_eq!(
        anthropic_prefix(&marked(5)).unwrap_err(),
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
    let mut auto = marked(4);
    auto["messages"][0]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text": "tail"}));
    auto["cache_control"] = json!({"type": "ephemeral"});
    assert!(anthropic_prefix(&auto).unwrap_err().contains("Found 5"));

    let thinking = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "a"}]},
        {"role": "user", "content": "more"}]});
    assert_eq!(
        anthropic_prefix(&thinking).unwrap_err(),
        "messages.1.content.0.thinking.cache_control: Extra inputs are not permitted"
    );
    let empty = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}]}]});
    assert_eq!(
        anthropic_prefix(&empty).unwrap_err(),
        "messages.0.content.0.text: cache_control cannot be set for empty text blocks"
    );
    let order = json!({"model": "m", "max_tokens": 10,
        "system": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]});
    assert!(anthropic_prefix(&order)
        .unwrap_err()
        .starts_with("messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m'"));
    let bad_ttl = request("m", 10, Some("10m"), "q");
    assert_eq!(
        anthropic_prefix(&bad_ttl).unwrap_err(),
        "system.0.cache_control.ephemeral.ttl: Input should be '5m' or '1h'"
    );
}

#[test]
fn the_automatic_breakpoint_lands_on_the_last_cacheable_block() {
    let cache = PromptCache::default();
    let r = json!({"model": "claude-sonnet-4-6", "max_tokens": 10, "cache_control": {"type": "ephemeral"},
        "system": "x".repeat(8000),
        "messages": [{"role": "user", "content": "q"}]});
    let b = anthropic_prefix(&r).unwrap();
    assert_eq!(b.last().unwrap().mark, Some(FIVE_MINUTES));
    assert_eq!(apply(&cache, &r).write_5m, b.last().unwrap().tokens);
    let mut next = r.clone();
    next["messages"] = json!([{"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"}, {"role": "user", "content": "r"}]);
    let u = apply(&cache, &next);
    assert_eq!(u.read, b.last().unwrap().tokens);
    assert!(u.write_5m > 0);
}

#[test]
fn the_lookback_reaches_20_blocks_back() {
    let cache = PromptCache::default();
    let mut content = vec![json!({"type": "text", "text": "d".repeat(8000)})];
    let base = |content: &[Value]| {
        let mut c = content.to_vec();
        if let Some(last) = c.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        json!({"model": "claude-sonnet-4-6", "max_tokens": 10,
            "messages": [{"role": "user", "content": c}]})
    };
    apply(&cache, &base(&content));
    for i in 0..20 {
        content.push(json!({"type": "text", "text": format!("n{i}")}));
    }
    assert!(apply(&cache, &base(&content)).read > 0, "20 blocks on");
    let fresh = PromptCache::default();
    let mut content = vec![json!({"type": "text", "text": "d".repeat(8000)})];
    apply(&fresh, &base(&content));
    for i in 0..21 {
        content.push(json!({"type": "text", "text": format!("n{i}")}));
    }
    assert_eq!(apply(&fresh, &base(&content)).read, 0, "21 blocks on");
}

fn chat(n: usize, extra: &[&str], key: Option<&str>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "c".repeat(n)})];
    for e in extra {
        messages.push(json!({"role": "user", "content": e}));
    }
    let mut r = json!({"model": "gpt-5.4", "messages": messages});
    if let Some(k) = key {
        r["prompt_cache_key"] = json!(k);
    }
    r
}

#[test]
fn openai_caches_from_1024_tokens_in_steps_of_128() {
    let cache = PromptCache::default();
    let apply = |r: &Value| served(Protocol::OpenaiChat).cache_use(&cache, r, true);
    let short = chat(3900, &["q"], None);
    apply(&short);
    assert_eq!(apply(&short).read, 0, "under 1024 tokens");
    let long = chat(5000, &["q"], None);
    assert_eq!(apply(&long).read, 0, "first time");
    let prefix = openai_prefix(
        "openai-chat",
        &long,
        long["messages"].as_array().into_iter().flatten(),
    );
    let whole = prefix.last().unwrap().tokens;
    let u = apply(&chat(5000, &["q", "another question"], None));
    assert_eq!(u.read, whole / 128 * 128);
    assert_eq!(u.read % 128, 0);
    assert!(u.read >= 1024 && u.read <= whole);
    assert_eq!(u.write_5m + u.write_1h, 0);
    assert_eq!(
        apply(&chat(5000, &["q"], Some("k1"))).read,
        0,
        "another key"
    );
}

#[test]
fn openai_fields_are_checked() {
    assert!(check_openai_fields(
        &json!({"prompt_cache_key": "k", "prompt_cache_retention": "24h"})
    )
    .is_ok());
    assert!(check_openai_fields(&json!({"prompt_cache_retention": "in_memory"})).is_ok());
    assert_eq!(
        check_openai_fields(&json!({"prompt_cache_retention": "1h"})).unwrap_err(),
        "Invalid value: '1h'. Supported values are: 'in_memory' and '24h'."
    );
    assert!(check_openai_fields(&json!({"prompt_cache_key": 3}))
        .unwrap_err()
        .contains("expected a string, but got an integer"));
    assert!(
        check_openai_fields(&json!({"prompt_cache_key": "k".repeat(65)}))
            .unwrap_err()
            .contains("maximum length 64")
    );
}

#[test]
fn the_store_stays_bounded() {
    let cache = PromptCache::default();
    let mut store = lock(&cache.store);
    for k in 0..(MAX_ENTRIES as u64 + 10) {
        upsert(&mut store, k, Duration::ZERO, FIVE_MINUTES);
    }
    assert!(store.entries.len() <= MAX_ENTRIES);
}
