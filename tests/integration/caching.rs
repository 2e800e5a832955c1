//! The simulator's prompt cache over real HTTP: hand-made requests with breakpoints (and
//! OpenAI's automatic caching) read what earlier requests wrote, with usage figures
//! that add up to the prompt, and what the real APIs refuse is refused.

use std::sync::Arc;
use std::time::Duration;

use agentbatch::sim::script::Script;
use agentbatch::sim::Sim;
use serde_json::{json, Value};

async fn sim() -> Sim {
    let sim = Sim::start_local().await.unwrap();
    let script: Script =
        serde_yaml::from_str("turns:\n  - content: [ { text: ok } ]\nrepeat_last: true\n").unwrap();
    sim.register("k", Arc::new(script));
    sim
}

/// Posts `body` to `path` under the script key; returns the status, the answer and the
/// prompt's size in the simulator's tokens (a quarter of the bytes sent).
async fn post(sim: &Sim, path: &str, body: &Value) -> (u16, Value, u64) {
    let tokens = (body.to_string().len() as u64).div_ceil(4);
    let resp = crate::common::post_to_sim(sim, path, body).await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap(), tokens)
}

fn messages_request(question: &str) -> Value {
    json!({"model": "claude-sonnet-4-6", "max_tokens": 100,
        "system": [
            {"type": "text", "text": "You review code."},
            {"type": "text", "text": "Reference manual. ".repeat(500), "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": question}]})
}

fn figures(usage: &Value) -> (u64, u64, u64) {
    let n = |f: &str| usage[f].as_u64().unwrap();
    (
        n("input_tokens"),
        n("cache_creation_input_tokens"),
        n("cache_read_input_tokens"),
    )
}

#[tokio::test]
async fn the_second_request_reads_what_the_first_wrote() {
    let sim = sim().await;
    let (status, first, prompt) =
        post(&sim, "v1/messages", &messages_request("Is this safe?")).await;
    assert_eq!(status, 200, "{first}");
    let (input, written, read) = figures(&first["usage"]);
    assert!(written >= 1024, "the manual is written: {first}");
    assert_eq!(read, 0);
    assert_eq!(
        input + written + read,
        prompt,
        "usage adds up to the prompt"
    );
    assert_eq!(
        first["usage"]["cache_creation"]["ephemeral_5m_input_tokens"],
        written
    );
    assert_eq!(
        first["usage"]["cache_creation"]["ephemeral_1h_input_tokens"],
        0
    );

    let (_, second, prompt) = post(
        &sim,
        "v1/messages",
        &messages_request("And what about the tests?"),
    )
    .await;
    let (input, written_again, read) = figures(&second["usage"]);
    assert_eq!(read, written, "the second request reads the whole prefix");
    assert_eq!(written_again, 0);
    assert_eq!(input + written_again + read, prompt);
    assert!(input > 0 && input < 100, "only the question is uncached");

    // Six minutes on, the 5-minute entry is gone and is written again.
    sim.advance_clock(Duration::from_secs(6 * 60));
    let (_, third, _) = post(&sim, "v1/messages", &messages_request("Again?")).await;
    let (_, written_third, read) = figures(&third["usage"]);
    assert_eq!((written_third, read), (written, 0));
}

/// A breakpoint on a replayed assistant block is accepted (the turn is not "changed"),
/// and the conversation's growing prefix is read through the lookback.
#[tokio::test]
async fn a_marked_assistant_turn_replays_and_reads_the_history() {
    let sim = sim().await;
    let long = "Log line. ".repeat(800);
    let first = json!({"model": "claude-sonnet-4-6", "max_tokens": 100,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": long, "cache_control": {"type": "ephemeral"}}]}]});
    let (status, answer, _) = post(&sim, "v1/messages", &first).await;
    assert_eq!(status, 200, "{answer}");
    let (_, written, _) = figures(&answer["usage"]);
    assert!(written >= 1024);
    let mut replayed = answer["content"].clone();
    replayed[0]["cache_control"] = json!({"type": "ephemeral"});
    let second = json!({"model": "claude-sonnet-4-6", "max_tokens": 100,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": long}]},
            {"role": "assistant", "content": replayed},
            {"role": "user", "content": "go on"}]});
    let (status, next, prompt) = post(&sim, "v1/messages", &second).await;
    assert_eq!(status, 200, "{next}");
    let (input, written_now, read) = figures(&next["usage"]);
    assert_eq!(read, written);
    assert!(written_now > 0 && written_now < 20, "{next}");
    assert_eq!(input + written_now + read, prompt);
}

#[tokio::test]
async fn breakpoints_the_api_refuses_are_refused() {
    let sim = sim().await;
    let five: Vec<Value> = (0..5)
        .map(|i| json!({"type": "text", "text": format!("part {i}"), "cache_control": {"type": "ephemeral"}}))
        .collect();
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 100,
        "messages": [{"role": "user", "content": five}]});
    let (status, err, _) = post(&sim, "v1/messages", &body).await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert_eq!(
        err["error"]["message"],
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    );
    let empty = json!({"model": "claude-sonnet-4-6", "max_tokens": 100,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "hi"}]}]});
    let (status, err, _) = post(&sim, "v1/messages", &empty).await;
    assert_eq!(status, 400);
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("empty text blocks"));
}

fn chat_request(turns: &[&str], retention: Option<&str>) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "Style guide. ".repeat(600)})];
    messages.extend(turns.iter().map(|t| json!({"role": "user", "content": t})));
    let mut r = json!({"model": "gpt-5.4", "messages": messages, "prompt_cache_key": "task-1"});
    if let Some(v) = retention {
        r["prompt_cache_retention"] = json!(v);
    }
    r
}

#[tokio::test]
async fn openai_caches_long_prefixes_by_itself() {
    let sim = sim().await;
    let (status, first, _) = post(
        &sim,
        "v1/chat/completions",
        &chat_request(&["q"], Some("24h")),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let (_, second, prompt) = post(
        &sim,
        "v1/chat/completions",
        &chat_request(&["q", "more"], None),
    )
    .await;
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 1024 && cached % 128 == 0, "{second}");
    assert_eq!(second["usage"]["prompt_tokens"], prompt, "cached included");
    assert!(cached < prompt);

    let responses = |input: &[&str]| {
        let items: Vec<Value> = input
            .iter()
            .map(|t| json!({"role": "user", "content": t}))
            .collect();
        json!({"model": "gpt-5.4", "instructions": "Style guide. ".repeat(600), "input": items})
    };
    post(&sim, "v1/responses", &responses(&["q"])).await;
    let (status, again, prompt) = post(&sim, "v1/responses", &responses(&["q", "r"])).await;
    assert_eq!(status, 200, "{again}");
    let cached = again["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 1024 && cached % 128 == 0, "{again}");
    assert_eq!(again["usage"]["input_tokens"], prompt);

    let (status, err, _) = post(
        &sim,
        "v1/chat/completions",
        &chat_request(&["q"], Some("1h")),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        err["error"]["message"],
        "Invalid value: '1h'. Supported values are: 'in_memory' and '24h'."
    );
}
