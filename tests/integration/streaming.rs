//! The simulator's streamed answers over real HTTP, read by hand (no client code): the
//! body comes in several pieces, its events rebuild the answer the simulator recorded,
//! and scripted mid-stream faults break streams the way servers do.

use std::sync::Arc;
use std::time::Duration;

use agentbatch::sim::script::Script;
use agentbatch::sim::Sim;
use futures::StreamExt;
use serde_json::{json, Value};

const SCRIPT: &str = r#"
turns:
  - content:
      - thinking: "Plan: read the file ✓"
      - text: "Reading «lib.rs» — 日本語 🎉"
      - tool_use: { name: read_file, input: { path: "src/lib.rs", note: "quote \" and ü" } }
  - content: [ { text: "done" } ]
    faults:
      - { mid_stream: cut, after_events: 3 }
      - { mid_stream: error, after_events: 2 }
      - { mid_stream: stall, after_events: 1, stall_for: 300ms }
"#;

async fn sim() -> Sim {
    let sim = Sim::start_local().await.unwrap();
    let script: Script = serde_yaml::from_str(SCRIPT).unwrap();
    script.check().unwrap();
    sim.register("k", Arc::new(script));
    sim
}

/// What a streamed POST got: status, content type, body pieces, and whether the body
/// ended with an error.
struct Got {
    status: u16,
    content_type: String,
    pieces: Vec<Vec<u8>>,
    broken: bool,
}

impl Got {
    /// The events as (event name, data).
    fn events(&self) -> Vec<(Option<String>, String)> {
        let text = String::from_utf8(self.pieces.concat()).expect("UTF-8 once joined");
        text.split_terminator("\n\n")
            .filter(|frame| !frame.is_empty())
            .map(|frame| {
                let mut name = None;
                let mut data = String::new();
                for line in frame.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = Some(n.to_string());
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    }
                }
                (name, data)
            })
            .collect()
    }

    fn json(&self) -> Vec<Value> {
        self.events()
            .iter()
            .filter(|(_, d)| d != "[DONE]")
            .map(|(_, d)| serde_json::from_str(d).expect("data is JSON"))
            .collect()
    }
}

async fn post(sim: &Sim, path: &str, body: &Value) -> Got {
    let resp = crate::common::post_to_sim(sim, path, body).await;
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut stream = resp.bytes_stream();
    let mut pieces = Vec::new();
    let mut broken = false;
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => pieces.push(b.to_vec()),
            Err(_) => {
                broken = true;
                break;
            }
        }
    }
    Got {
        status,
        content_type,
        pieces,
        broken,
    }
}

fn last_response(sim: &Sim) -> Value {
    sim.requests().last().unwrap().response.clone().unwrap()
}

#[tokio::test]
async fn messages_stream_rebuilds_the_recorded_message() {
    let sim = sim().await;
    let body = json!({"model": "claude-sonnet-4-6", "max_tokens": 4000, "stream": true,
        "messages": [{"role": "user", "content": "read it"}]});
    let got = post(&sim, "v1/messages", &body).await;
    assert_eq!(got.status, 200);
    assert!(
        got.content_type.starts_with("text/event-stream"),
        "{}",
        got.content_type
    );
    assert!(!got.broken);
    assert!(
        got.pieces.len() >= 3,
        "the body comes in pieces: {}",
        got.pieces.len()
    );
    let recorded = last_response(&sim);
    let events = got.events();
    assert_eq!(events[0].0.as_deref(), Some("message_start"));
    assert_eq!(events.last().unwrap().0.as_deref(), Some("message_stop"));
    let mut text = String::new();
    let mut json_in = String::new();
    for e in got.json() {
        match e["delta"]["type"].as_str() {
            Some("text_delta") => text.push_str(e["delta"]["text"].as_str().unwrap()),
            Some("input_json_delta") => {
                json_in.push_str(e["delta"]["partial_json"].as_str().unwrap())
            }
            _ => {}
        }
        if e["type"] == "message_delta" {
            assert_eq!(e["delta"]["stop_reason"], "tool_use");
            assert_eq!(
                e["usage"]["output_tokens"],
                recorded["usage"]["output_tokens"]
            );
        }
    }
    assert_eq!(json!(text), recorded["content"][1]["text"]);
    let input: Value = serde_json::from_str(&json_in).unwrap();
    assert_eq!(input, recorded["content"][2]["input"]);
}

#[tokio::test]
async fn responses_stream_completes_with_the_recorded_response() {
    let sim = sim().await;
    let body = json!({"model": "gpt-5", "store": false, "stream": true, "input": "read it",
        "include": ["reasoning.encrypted_content"]});
    let got = post(&sim, "v1/responses", &body).await;
    assert_eq!(got.status, 200);
    let events = got.json();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i);
    }
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"], last_response(&sim));
}

#[tokio::test]
async fn chat_stream_sends_usage_then_done() {
    let sim = sim().await;
    let body = json!({"model": "qwen3", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "read it"}]});
    let got = post(&sim, "v1/chat/completions", &body).await;
    assert_eq!(got.status, 200);
    let events = got.events();
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks = got.json();
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], last_response(&sim)["usage"]);
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");

    let mut bad = body.clone();
    bad["stream"] = json!(false);
    let got = post(&sim, "v1/chat/completions", &bad).await;
    assert_eq!(got.status, 400);
    let text = String::from_utf8(got.pieces.concat()).unwrap();
    assert!(
        text.contains("only allowed when 'stream' is enabled"),
        "{text}"
    );
}

#[tokio::test]
async fn scripted_faults_break_streams_then_the_answer_comes() {
    let sim = sim().await;
    let history = json!([
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "x", "type": "function",
            "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "fn main() {}"}]);
    let body = json!({"model": "qwen3", "stream": true, "messages": history});
    // The first turn was never sent in this conversation, so the replay is not compared.
    let cut = post(&sim, "v1/chat/completions", &body).await;
    assert_eq!(cut.status, 200);
    assert!(cut.broken, "the connection breaks");
    assert_eq!(cut.events().len(), 3);

    let error = post(&sim, "v1/chat/completions", &body).await;
    assert!(!error.broken);
    let events = error.events();
    assert_eq!(events.len(), 4, "two chunks, the error, [DONE]: {events:?}");
    assert!(events[2].1.contains("\"error\""));

    let started = std::time::Instant::now();
    let stall = tokio::time::timeout(
        Duration::from_secs(5),
        post(&sim, "v1/chat/completions", &body),
    )
    .await
    .expect("the stall ends");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(stall.broken);
    assert_eq!(stall.events().len(), 1);

    let answer = post(&sim, "v1/chat/completions", &body).await;
    assert!(!answer.broken);
    let chunks = answer.json();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "done");
    assert_eq!(answer.events().last().unwrap().1, "[DONE]");
}
