use serde_json::{json, Value};

use super::*;
use crate::sim::cache::CacheUse;
use crate::sim::protocol::anthropic::render as respond;
use crate::sim::protocol::openai::{chat, responses};
use crate::sim::protocol::{anthropic, openai};
use crate::sim::script::{Block, Script, ToolUseScript};

const UNICODE: &str = "héllo wörld ✓ 日本語テキスト — ünïcödé 🎉🎉 and some ASCII to split";

fn turn() -> ScriptTurn {
    ScriptTurn {
        content: vec![
            Block::Thinking(format!("thinking about {UNICODE}")),
            Block::RedactedThinking("EmwKAhgBEgy3va3p".into()),
            Block::Text(UNICODE.into()),
            Block::ToolUse(ToolUseScript {
                name: "write_file".into(),
                input: json!({"path": "src/ü.rs", "content": "fn main() {\n    println!(\"hi \\u{1F600} ✓\");\n}\n", "n": [1, 2.5, null]}),
                id: None,
                arguments: None,
            }),
            Block::ToolUse(ToolUseScript {
                name: "list".into(),
                input: json!({}),
                id: Some("toolu_given".into()),
                arguments: None,
            }),
        ],
        ..Default::default()
    }
}

fn parsed(events: &[Sse]) -> Vec<(Option<String>, Value)> {
    events
        .iter()
        .map(|e| {
            let v = if e.data == "[DONE]" {
                json!("[DONE]")
            } else {
                serde_json::from_str(&e.data).expect("event data is JSON")
            };
            (e.event.clone(), v)
        })
        .collect()
}

fn anthropic_request() -> Value {
    json!({"model": "claude-sonnet-4-6", "max_tokens": 100000, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]})
}

/// Rebuilds a Messages answer from its events, as PROTOCOLS.md A11 says a client must.
fn rebuild_anthropic(events: &[(Option<String>, Value)]) -> Value {
    let mut msg = Value::Null;
    let mut json_parts: Vec<String> = Vec::new();
    for (name, e) in events {
        assert_eq!(
            name.as_deref(),
            e["type"].as_str(),
            "event name = data type"
        );
        match e["type"].as_str().unwrap() {
            "message_start" => msg = e["message"].clone(),
            "content_block_start" => {
                let i = e["index"].as_u64().unwrap() as usize;
                let content = msg["content"].as_array_mut().unwrap();
                assert_eq!(content.len(), i, "blocks start in order");
                content.push(e["content_block"].clone());
                json_parts.push(String::new());
            }
            "content_block_delta" => {
                let i = e["index"].as_u64().unwrap() as usize;
                let block = &mut msg["content"][i];
                let d = &e["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        let t = format!(
                            "{}{}",
                            block["text"].as_str().unwrap(),
                            d["text"].as_str().unwrap()
                        );
                        block["text"] = json!(t);
                    }
                    "thinking_delta" => {
                        let t = format!(
                            "{}{}",
                            block["thinking"].as_str().unwrap(),
                            d["thinking"].as_str().unwrap()
                        );
                        block["thinking"] = json!(t);
                    }
                    "signature_delta" => block["signature"] = d["signature"].clone(),
                    "input_json_delta" => {
                        json_parts[i].push_str(d["partial_json"].as_str().unwrap())
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let i = e["index"].as_u64().unwrap() as usize;
                if msg["content"][i].get("input").is_some() && !json_parts[i].is_empty() {
                    msg["content"][i]["input"] = serde_json::from_str(&json_parts[i]).unwrap();
                }
            }
            "message_delta" => {
                for (k, v) in e["delta"].as_object().unwrap() {
                    msg[k] = v.clone();
                }
                if let Some(u) = e.get("usage").and_then(Value::as_object) {
                    for (k, v) in u {
                        msg["usage"][k] = v.clone();
                    }
                }
            }
            "message_stop" | "ping" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    msg
}

#[test]
fn messages_events_rebuild_the_rendered_message() {
    let mut t = turn();
    t.content.push(Block::Raw(json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}})));
    t.content.push(Block::Raw(
        json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}),
    ));
    t.stop_details = Some(json!({"type": "refusal", "category": null}));
    let req = anthropic_request();
    let mut split_text = false;
    let mut split_json = false;
    for step in 0..12 {
        let cache = CacheUse {
            read: 30,
            write_5m: 20,
            write_1h: 10,
        };
        let rendered = respond::render(&t, &req, 4000, "k", step, cache);
        let events = parsed(&events(Protocol::Anthropic, &rendered, &req, "k", step));
        assert_eq!(rebuild_anthropic(&events), rendered, "step {step}");
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
        assert_eq!(names[0], "message_start");
        assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
        let start = &events[0].1["message"];
        assert_eq!(start["content"], json!([]));
        assert_eq!(start["stop_reason"], Value::Null);
        assert_eq!(start["usage"]["cache_read_input_tokens"], 30);
        assert_eq!(
            start["usage"]["input_tokens"],
            rendered["usage"]["input_tokens"]
        );
        let count = |ty: &str, index: usize| {
            events
                .iter()
                .filter(|(_, e)| e["index"] == index && e["delta"]["type"] == ty)
                .count()
        };
        split_text |= count("text_delta", 2) > 1;
        split_json |= count("input_json_delta", 3) > 1;
        // redacted thinking and the search result come whole, without deltas
        assert_eq!(events.iter().filter(|(_, e)| e["index"] == 1).count(), 2);
        assert_eq!(events.iter().filter(|(_, e)| e["index"] == 6).count(), 2);
        let sig = events
            .iter()
            .find(|(_, e)| e["delta"]["type"] == "signature_delta")
            .unwrap();
        assert_eq!(sig.1["index"], 0);
    }
    assert!(split_text && split_json, "deltas come in several pieces");
}

#[test]
fn splits_vary_by_step_and_stay_on_char_boundaries() {
    let mut seen = std::collections::BTreeSet::new();
    for step in 0..20 {
        let pieces = Splitter::new("k", step).pieces(UNICODE);
        assert_eq!(pieces.concat(), UNICODE);
        assert!(pieces.iter().all(|p| !p.is_empty()));
        seen.insert(pieces.len());
        assert_eq!(
            pieces,
            Splitter::new("k", step).pieces(UNICODE),
            "deterministic"
        );
    }
    assert!(seen.len() > 3, "piece counts vary: {seen:?}");
    assert!(Splitter::new("k", 0).pieces("").is_empty());
}

#[test]
fn omitted_usage_stays_out_of_the_stream() {
    let mut t = turn();
    t.omit_usage = true;
    let req = anthropic_request();
    let rendered = respond::render(&t, &req, 400, "k", 0, CacheUse::default());
    let events = parsed(&events(Protocol::Anthropic, &rendered, &req, "k", 0));
    assert!(events[0].1["message"].get("usage").is_none());
    assert!(events.iter().all(|(_, e)| e.get("usage").is_none()));
    assert_eq!(rebuild_anthropic(&events), rendered);
}

fn responses_request() -> Value {
    json!({"model": "gpt-5", "store": false, "stream": true, "input": "hi",
        "include": ["reasoning.encrypted_content"]})
}

#[test]
fn responses_events_carry_the_rendered_response() {
    let req = responses_request();
    for step in 0..8 {
        let rendered = responses::render(&turn(), &req, 400, "k", step, CacheUse::default());
        let events = parsed(&events(
            Protocol::OpenaiResponses,
            &rendered,
            &req,
            "k",
            step,
        ));
        for (i, (name, e)) in events.iter().enumerate() {
            assert_eq!(e["sequence_number"], i, "{e}");
            assert_eq!(name.as_deref(), e["type"].as_str());
        }
        let types: Vec<&str> = events
            .iter()
            .map(|(_, e)| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(types[..2], ["response.created", "response.in_progress"]);
        assert_eq!(events[0].1["response"]["status"], "in_progress");
        assert_eq!(events[0].1["response"]["output"], json!([]));
        let (_, last) = events.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(
            last["response"], rendered,
            "the same object as the non-streaming answer"
        );
        let done: Vec<Value> = events
            .iter()
            .filter(|(_, e)| e["type"] == "response.output_item.done")
            .map(|(_, e)| e["item"].clone())
            .collect();
        assert_eq!(Value::Array(done), rendered["output"]);
        let mut text = String::new();
        let mut args = std::collections::BTreeMap::<u64, String>::new();
        let mut summary = String::new();
        for (_, e) in &events {
            match e["type"].as_str().unwrap() {
                "response.output_text.delta" => {
                    assert!(e["obfuscation"].is_string());
                    text.push_str(e["delta"].as_str().unwrap())
                }
                "response.function_call_arguments.delta" => args
                    .entry(e["output_index"].as_u64().unwrap())
                    .or_default()
                    .push_str(e["delta"].as_str().unwrap()),
                "response.reasoning_summary_text.delta" => {
                    summary.push_str(e["delta"].as_str().unwrap())
                }
                "response.output_item.added" => {
                    let item = &e["item"];
                    if item["type"] == "function_call" {
                        assert_eq!(item["arguments"], "");
                        assert_eq!(item["status"], "in_progress");
                    }
                }
                _ => {}
            }
        }
        assert_eq!(text, UNICODE);
        assert_eq!(summary, format!("thinking about {UNICODE}"));
        let output = rendered["output"].as_array().unwrap();
        for (i, a) in args {
            assert_eq!(output[i as usize]["arguments"], json!(a));
        }
    }
}

#[test]
fn responses_status_picks_the_final_event_and_obfuscation_can_be_off() {
    let mut req = responses_request();
    req["stream_options"] = json!({"include_obfuscation": false});
    for (status, last) in [
        ("incomplete", "response.incomplete"),
        ("failed", "response.failed"),
        ("queued", "response.completed"),
    ] {
        let mut t = turn();
        t.status = Some(status.into());
        let rendered = responses::render(&t, &req, 400, "k", 0, CacheUse::default());
        let events = parsed(&events(Protocol::OpenaiResponses, &rendered, &req, "k", 0));
        let (_, e) = events.last().unwrap();
        assert_eq!(e["type"], last);
        assert_eq!(e["response"], rendered);
        assert!(events.iter().all(|(_, e)| e.get("obfuscation").is_none()));
    }
}

fn chat_request(include_usage: bool) -> Value {
    json!({"model": "qwen3", "stream": true, "stream_options": {"include_usage": include_usage},
        "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn chat_chunks_rebuild_the_completion_and_end_with_done() {
    let mut t = turn();
    t.content.push(Block::Raw(
        json!({"type": "function", "function": {"name": "raw", "arguments": {"a": 1}}}),
    ));
    for (step, include_usage) in [(0, true), (1, false), (2, true), (3, true)] {
        let req = chat_request(include_usage);
        let rendered = chat::render(&t, &req, 400, "k", step, CacheUse::default());
        let events = parsed(&events(Protocol::OpenaiChat, &rendered, &req, "k", step));
        assert!(
            events.iter().all(|(name, _)| name.is_none()),
            "chat sends data lines only"
        );
        assert_eq!(events.last().unwrap().1, "[DONE]");
        let chunks: Vec<&Value> = events[..events.len() - 1].iter().map(|(_, e)| e).collect();
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["id"] == rendered["id"]));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let (body, usage) = if include_usage {
            let u = chunks.last().unwrap();
            assert_eq!(u["choices"], json!([]));
            assert_eq!(u["usage"], rendered["usage"]);
            assert!(chunks[..chunks.len() - 1]
                .iter()
                .all(|c| c["usage"].is_null() && c.get("usage").is_some()));
            (&chunks[..chunks.len() - 1], true)
        } else {
            assert!(chunks.iter().all(|c| c.get("usage").is_none()));
            (&chunks[..], false)
        };
        assert!(usage == include_usage);
        let finish = body.last().unwrap();
        assert_eq!(
            finish["choices"][0]["finish_reason"],
            rendered["choices"][0]["finish_reason"]
        );
        assert!(body[..body.len() - 1]
            .iter()
            .all(|c| c["choices"][0]["finish_reason"].is_null()));
        let mut content = String::new();
        let mut calls: Vec<Value> = Vec::new();
        for c in body {
            let d = &c["choices"][0]["delta"];
            if let Some(t) = d["content"].as_str() {
                content.push_str(t);
            }
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let i = tc["index"].as_u64().unwrap() as usize;
                if i == calls.len() {
                    let mut first = tc.clone();
                    first.as_object_mut().unwrap().remove("index");
                    calls.push(first);
                } else {
                    assert!(tc.get("id").is_none() && tc["function"].get("name").is_none());
                    let a = format!(
                        "{}{}",
                        calls[i]["function"]["arguments"].as_str().unwrap(),
                        tc["function"]["arguments"].as_str().unwrap()
                    );
                    calls[i]["function"]["arguments"] = json!(a);
                }
            }
        }
        let message = &rendered["choices"][0]["message"];
        assert_eq!(json!(content), message["content"]);
        assert_eq!(Value::Array(calls), message["tool_calls"]);
    }
}

#[test]
fn stream_fields_are_checked_as_the_apis_do() {
    let ok = |p, v: Value| match p {
        Protocol::Anthropic => anthropic::check::check_stream_field(&v),
        Protocol::OpenaiResponses => openai::check_stream_fields(false, &v),
        Protocol::OpenaiChat => openai::check_stream_fields(true, &v),
    };
    assert_eq!(ok(Protocol::Anthropic, json!({"stream": true})), Ok(()));
    assert_eq!(
        ok(Protocol::Anthropic, json!({"stream": "yes"})),
        Err("stream: Input should be a valid boolean".into())
    );
    assert_eq!(
        ok(Protocol::OpenaiChat, json!({"stream": 1})),
        Err("Invalid type for 'stream': expected a boolean, but got an integer instead.".into())
    );
    assert_eq!(
        ok(
            Protocol::OpenaiChat,
            json!({"stream": true, "stream_options": {"include_usage": true}})
        ),
        Ok(())
    );
    assert_eq!(
        ok(
            Protocol::OpenaiChat,
            json!({"stream": null, "stream_options": null})
        ),
        Ok(())
    );
    assert_eq!(
        ok(Protocol::OpenaiChat, json!({"stream": true, "stream_options": {"include_usage": "true"}})),
        Err("Invalid type for 'stream_options.include_usage': expected a boolean, but got a string instead.".into())
    );
    assert_eq!(
        ok(
            Protocol::OpenaiChat,
            json!({"stream_options": {"include_usage": true}})
        ),
        Err("The 'stream_options' parameter is only allowed when 'stream' is enabled.".into())
    );
    assert_eq!(
        ok(
            Protocol::OpenaiResponses,
            json!({"stream": true, "stream_options": []})
        ),
        Err(
            "Invalid type for 'stream_options': expected an object, but got an array instead."
                .into()
        )
    );
    assert_eq!(
        ok(
            Protocol::OpenaiResponses,
            json!({"stream": true, "stream_options": {"include_usage": true}})
        ),
        Err("Unknown parameter: 'stream_options.include_usage'.".into())
    );
    assert_eq!(
        ok(
            Protocol::OpenaiResponses,
            json!({"stream": true, "stream_options": {"include_obfuscation": false}})
        ),
        Ok(())
    );
}

#[test]
fn chaos_breaks_only_streams() {
    let script: Script = serde_yaml::from_str("chaos: { seed: 3, fault_percent: 100 }\n").unwrap();
    let plain =
        json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
    let mut streamed = plain.clone();
    streamed["stream"] = json!(true);
    let mut kinds = std::collections::BTreeSet::new();
    for step in 0..30 {
        let a = script
            .turn_for(step, Protocol::Anthropic, &plain, "k")
            .unwrap();
        assert!(a.faults.iter().all(|f| f.mid_stream.is_none()));
        let b = script
            .turn_for(step, Protocol::Anthropic, &streamed, "k")
            .unwrap();
        assert_eq!(
            b.faults.len(),
            a.faults.len() + 1,
            "one mid-stream fault more"
        );
        for f in b.faults.iter().filter_map(|f| f.mid_stream) {
            kinds.insert(format!("{f:?}"));
        }
        let bounded = Script {
            latency: None,
            repeat_last: false,
            turns: vec![b.into_owned()],
            chaos: None,
            context_window: None,
            summary: None,
        };
        assert_eq!(bounded.check(), Ok(()));
    }
    assert_eq!(kinds.len(), 3, "{kinds:?}");
}

mod faults;
