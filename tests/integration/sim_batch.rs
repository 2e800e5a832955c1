//! The simulator's batch APIs over real HTTP: Anthropic's Message Batches and OpenAI's
//! Files + Batch API (Responses and Chat Completions). Items of different tasks play
//! their own scripts, a conversation carried on through a second batch is checked like a
//! synchronous one, and per-item errors, expiry, cancellation, partial progress and the
//! endpoints' validation behave as the real APIs document.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbatch::sim::script::Script;
use agentbatch::sim::{BatchSettings, Sim};
use serde_json::{json, Value};

const TOOLS_ANTHROPIC: &str = r#"[{"name": "get_time", "description": "now", "input_schema": {"type": "object", "properties": {}}}]"#;

fn script(yaml: &str) -> Arc<Script> {
    Arc::new(serde_yaml::from_str(yaml).expect("script parses"))
}

/// A simulator with `alpha` (a tool call, then text), `beta` (one text turn), `flaky`
/// (a 5xx fault, then text) and `doomed` (a scripted expiry, then text) registered.
async fn sim_with(settings: BatchSettings) -> Sim {
    let sim = Sim::start_local().await.expect("sim starts");
    sim.register(
        "alpha",
        script(
            "turns:\n  - content: [{tool_use: {name: get_time, input: {}}}]\n  - content: [{text: alpha done}]\n",
        ),
    );
    sim.register(
        "beta",
        script("turns:\n  - content: [{text: beta says hi}]\n"),
    );
    sim.register(
        "flaky",
        script("turns:\n  - content: [{text: steady now}]\n    faults: [{status: 500}]\n"),
    );
    sim.register(
        "doomed",
        script("turns:\n  - content: [{text: too late}]\n    faults: [{batch_expire: true}]\n"),
    );
    sim.set_batch_settings(settings);
    sim
}

fn fast() -> BatchSettings {
    BatchSettings {
        delay: Duration::from_millis(20),
        ..BatchSettings::default()
    }
}

async fn send(req: reqwest::RequestBuilder) -> (u16, Value, String) {
    let resp = req
        .header("x-api-key", "test")
        .header("authorization", "Bearer test")
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .expect("the simulator answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a body");
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    (status, json, text)
}

async fn post(sim: &Sim, path: &str, body: &Value) -> (u16, Value) {
    let req = reqwest::Client::new()
        .post(format!("{}{path}", sim.base_url()))
        .header("content-type", "application/json")
        .body(body.to_string());
    let (s, v, _) = send(req).await;
    (s, v)
}

async fn get(sim: &Sim, path: &str) -> (u16, Value, String) {
    send(reqwest::Client::new().get(format!("{}{path}", sim.base_url()))).await
}

fn jsonl(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Polls `path` until `done` says the batch is over (at most 10 s).
async fn poll(sim: &Sim, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let (status, v, _) = get(sim, path).await;
        assert_eq!(status, 200, "{v}");
        if done(&v) {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never ended: {v}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn messages_params(messages: Vec<Value>) -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "tools": serde_json::from_str::<Value>(TOOLS_ANTHROPIC).unwrap(),
        "messages": messages,
    })
}

/// Creates a Message Batch under `prefix`, waits for it to end and returns its final
/// object and results by custom_id.
async fn anthropic_batch(
    sim: &Sim,
    prefix: &str,
    requests: Vec<(&str, Value)>,
) -> (Value, std::collections::HashMap<String, Value>) {
    let requests: Vec<Value> = requests
        .into_iter()
        .map(|(id, params)| json!({"custom_id": id, "params": params}))
        .collect();
    let (status, created) = post(
        sim,
        &format!("{prefix}/v1/messages/batches"),
        &json!({ "requests": requests }),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["type"], "message_batch");
    assert_eq!(created["processing_status"], "in_progress");
    assert!(created["id"].as_str().unwrap().starts_with("msgbatch_"));
    assert_eq!(created["results_url"], Value::Null);
    let id = created["id"].as_str().unwrap().to_string();
    let ended = poll(sim, &format!("{prefix}/v1/messages/batches/{id}"), |v| {
        v["processing_status"] == "ended"
    })
    .await;
    let url = ended["results_url"]
        .as_str()
        .expect("a results_url once ended");
    assert!(
        url.ends_with(&format!("{prefix}/v1/messages/batches/{id}/results")),
        "{url}"
    );
    let path = url.trim_start_matches(&sim.base_url()).to_string();
    let (status, _, text) = get(sim, &path).await;
    assert_eq!(status, 200, "{text}");
    let results = jsonl(&text)
        .into_iter()
        .map(|l| {
            (
                l["custom_id"].as_str().unwrap().to_string(),
                l["result"].clone(),
            )
        })
        .collect();
    (ended, results)
}

#[tokio::test]
async fn sim_batch_anthropic_items_play_their_tasks_scripts_and_carry_conversations_on() {
    let sim = sim_with(fast()).await;
    let first = vec![user("What time is it?")];
    let (ended, results) = anthropic_batch(
        &sim,
        "/r/run1",
        vec![
            ("alpha--0", messages_params(first.clone())),
            ("beta--0", messages_params(vec![user("Hello")])),
            ("ghost--0", messages_params(vec![user("Anyone?")])),
        ],
    )
    .await;
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 2, "errored": 1, "canceled": 0, "expired": 0})
    );
    assert!(ended["ended_at"].is_string());
    let alpha = &results["alpha--0"];
    assert_eq!(alpha["type"], "succeeded");
    assert_eq!(alpha["message"]["content"][0]["type"], "tool_use");
    assert_eq!(
        results["beta--0"]["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .split(" [")
            .next(),
        Some("beta says hi")
    );
    let ghost = &results["ghost--0"];
    assert_eq!(ghost["type"], "errored");
    assert_eq!(ghost["error"]["type"], "error");
    assert_eq!(ghost["error"]["error"]["type"], "not_found_error");

    // The conversation goes on in a second batch, checked like a synchronous one.
    let sent = alpha["message"]["content"].clone();
    let call_id = sent[0]["id"].as_str().unwrap().to_string();
    let mut history = first.clone();
    history.push(json!({"role": "assistant", "content": sent}));
    history.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call_id, "content": "12:00 UTC"}
    ]}));
    let mut wrong = history.clone();
    wrong[1]["content"][0]["input"] = json!({"timezone": "changed"});
    let (_, results) = anthropic_batch(
        &sim,
        "/r/run1",
        vec![
            ("alpha--1", messages_params(history)),
            ("alpha--1-wrong", messages_params(wrong)),
        ],
    )
    .await;
    assert_eq!(results["alpha--1"]["type"], "succeeded", "{results:?}");
    assert!(results["alpha--1"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("alpha done"));
    let wrong = &results["alpha--1-wrong"];
    assert_eq!(wrong["type"], "errored");
    assert_eq!(wrong["error"]["error"]["type"], "invalid_request_error");

    // The request log marks every item with its batch; the batch record counts calls.
    let log = sim.requests();
    let batched: Vec<_> = log.iter().filter(|r| r.batch.is_some()).collect();
    assert_eq!(batched.len(), 5);
    assert!(batched.iter().all(|r| r.run == "run1"));
    let alpha_items: Vec<_> = batched.iter().filter(|r| r.key == "alpha").collect();
    assert_eq!(alpha_items.len(), 3);
    let batches = sim.batches();
    assert_eq!(batches.len(), 2);
    assert!(!batches[0].calls.polls_ms.is_empty());
    assert_eq!(batches[0].calls.results_ms.len(), 1);
    assert_eq!(batches[0].items[2].key, "ghost");
    assert_eq!(batches[0].items[2].state, "errored");
    // Another run does not see run1's batches.
    let id = &batches[0].id;
    let (status, v, _) = get(&sim, &format!("/v1/messages/batches/{id}")).await;
    assert_eq!(
        (status, &v["error"]["type"]),
        (404, &json!("not_found_error"))
    );
    let (status, list, _) = get(&sim, "/r/run1/v1/messages/batches?limit=1").await;
    assert_eq!(status, 200);
    assert_eq!(list["data"][0]["id"], batches[1].id);
    assert_eq!(list["has_more"], true);
}

#[tokio::test]
async fn sim_batch_anthropic_errors_expiry_cancel_and_progress() {
    // Per-item errors and scripted expiry.
    let sim = sim_with(fast()).await;
    let (ended, results) = anthropic_batch(
        &sim,
        "",
        vec![
            ("flaky--0", messages_params(vec![user("hi")])),
            ("doomed--0", messages_params(vec![user("hi")])),
        ],
    )
    .await;
    assert_eq!(ended["request_counts"]["errored"], 1);
    assert_eq!(ended["request_counts"]["expired"], 1);
    assert_eq!(results["flaky--0"]["type"], "errored");
    assert_eq!(results["flaky--0"]["error"]["error"]["type"], "api_error");
    assert_eq!(results["doomed--0"], json!({"type": "expired"}));
    // The retry in a later batch gets the turn, as a retried request would.
    let (_, results) = anthropic_batch(
        &sim,
        "",
        vec![
            ("flaky--0", messages_params(vec![user("hi")])),
            ("doomed--0", messages_params(vec![user("hi")])),
        ],
    )
    .await;
    assert_eq!(results["flaky--0"]["type"], "succeeded");
    assert_eq!(results["doomed--0"]["type"], "succeeded");
    let expired_logged = sim.requests().iter().filter(|r| r.key == "doomed").count();
    assert_eq!(expired_logged, 1, "an expired item is not billed");

    // Partial progress, then expiry of what the time left did not reach.
    let sim = sim_with(BatchSettings {
        delay: Duration::ZERO,
        spread: Duration::from_millis(300),
        expire_after: Duration::from_millis(450),
        ..BatchSettings::default()
    })
    .await;
    let reqs: Vec<Value> = ["beta--0", "beta--1", "beta--2"]
        .iter()
        .map(|id| json!({"custom_id": id, "params": messages_params(vec![user("hi")])}))
        .collect();
    let (_, created) = post(&sim, "/v1/messages/batches", &json!({"requests": reqs})).await;
    let id = created["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (_, mid, _) = get(&sim, &format!("/v1/messages/batches/{id}")).await;
    assert_eq!(mid["processing_status"], "in_progress");
    assert_eq!(mid["request_counts"]["processing"], 3, "{mid}");
    let states: Vec<&str> = sim.batches()[0].items.iter().map(|i| i.state).collect();
    assert_eq!(states, ["succeeded", "processing", "processing"]);
    let (status, v, _) = get(&sim, &format!("/v1/messages/batches/{id}/results")).await;
    assert_eq!(status, 400, "no results before the end: {v}");
    let ended = poll(&sim, &format!("/v1/messages/batches/{id}"), |v| {
        v["processing_status"] == "ended"
    })
    .await;
    assert_eq!(
        ended["request_counts"],
        json!({"processing": 0, "succeeded": 2, "errored": 0, "canceled": 0, "expired": 1})
    );

    // Cancel: what was not processed is canceled.
    let sim = sim_with(BatchSettings {
        delay: Duration::ZERO,
        spread: Duration::from_millis(400),
        ..BatchSettings::default()
    })
    .await;
    let reqs: Vec<Value> = ["beta--a", "beta--b", "beta--c"]
        .iter()
        .map(|id| json!({"custom_id": id, "params": messages_params(vec![user("hi")])}))
        .collect();
    let (_, created) = post(&sim, "/v1/messages/batches", &json!({"requests": reqs})).await;
    let id = created["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, canceling) = post(
        &sim,
        &format!("/v1/messages/batches/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(status, 200, "{canceling}");
    assert_eq!(canceling["processing_status"], "canceling");
    assert!(canceling["cancel_initiated_at"].is_string());
    let ended = poll(&sim, &format!("/v1/messages/batches/{id}"), |v| {
        v["processing_status"] == "ended"
    })
    .await;
    assert_eq!(ended["request_counts"]["succeeded"], 1);
    assert_eq!(ended["request_counts"]["canceled"], 2);
    assert_eq!(sim.batches()[0].calls.cancels_ms.len(), 1);
}

#[tokio::test]
async fn sim_batch_anthropic_refuses_what_the_api_refuses() {
    let sim = sim_with(BatchSettings {
        max_anthropic_requests: 2,
        ..fast()
    })
    .await;
    let item = |id: &str| json!({"custom_id": id, "params": messages_params(vec![user("hi")])});
    let refused = |v: &Value| {
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        v["error"]["message"].as_str().unwrap_or("").to_string()
    };
    let cases = [
        (
            json!({"requests": [item("a"), item("a")]}),
            "Duplicate custom_id",
        ),
        (json!({"requests": [item("a.b")]}), "should match pattern"),
        (
            json!({"requests": [item(&"x".repeat(65))]}),
            "requests.0.custom_id: String should have at most 64 characters",
        ),
        (
            json!({"requests": [item("a"), item("b"), item("c")]}),
            "at most 2 items",
        ),
        (json!({"requests": []}), "at least 1 item"),
        (json!({"nothing": 1}), "requests: Field required"),
    ];
    for (body, expected) in cases {
        let (status, v) = post(&sim, "/v1/messages/batches", &body).await;
        assert_eq!(status, 400, "{body}");
        assert!(refused(&v).contains(expected), "{v} lacks {expected}");
    }
    let mut streamed = item("s");
    streamed["params"]["stream"] = json!(true);
    let (status, v) = post(
        &sim,
        "/v1/messages/batches",
        &json!({"requests": [streamed]}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        refused(&v),
        "requests.0.params.stream: Input should be False"
    );
    let req = reqwest::Client::new()
        .post(format!("{}/v1/messages/batches", sim.base_url()))
        .header("content-type", "application/json")
        .body("{not json");
    let (status, v, _) = send(req).await;
    assert_eq!(status, 400);
    refused(&v);
    let (status, v, _) = get(&sim, "/v1/messages/batches/msgbatch_nope").await;
    assert_eq!(
        (status, &v["error"]["type"]),
        (404, &json!("not_found_error"))
    );
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/messages/batches", sim.base_url()))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 401);
    assert!(sim.batches().is_empty());
}

/// A multipart upload of `content` as a batch input file; returns the status and body.
async fn upload(sim: &Sim, prefix: &str, purpose: &str, content: &str) -> (u16, Value) {
    let boundary = "simbatchboundary7";
    let body = format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\n{purpose}\r\n--{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"input.jsonl\"\r\ncontent-type: application/jsonl\r\n\r\n{content}\r\n--{boundary}--\r\n"
    );
    let req = reqwest::Client::new()
        .post(format!("{}{prefix}/v1/files", sim.base_url()))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body);
    let (s, v, _) = send(req).await;
    (s, v)
}

fn line(custom_id: &str, url: &str, body: Value) -> String {
    json!({"custom_id": custom_id, "method": "POST", "url": url, "body": body}).to_string()
}

/// Uploads `lines`, creates a batch for `endpoint` and returns the created object.
async fn openai_create(sim: &Sim, endpoint: &str, lines: &[String]) -> Value {
    let (status, file) = upload(sim, "", "batch", &lines.join("\n")).await;
    assert_eq!(status, 200, "{file}");
    assert_eq!(file["object"], "file");
    assert_eq!(file["purpose"], "batch");
    let (status, created) = post(
        sim,
        "/v1/batches",
        &json!({"input_file_id": file["id"], "endpoint": endpoint, "completion_window": "24h"}),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["object"], "batch");
    assert_eq!(created["status"], "validating");
    created
}

async fn openai_wait(sim: &Sim, id: &str) -> Value {
    poll(sim, &format!("/v1/batches/{id}"), |v| {
        ["completed", "failed", "expired", "cancelled"]
            .contains(&v["status"].as_str().unwrap_or(""))
    })
    .await
}

/// The lines of a batch's output or error file, by custom_id.
async fn file_lines(sim: &Sim, id: &Value) -> std::collections::HashMap<String, Value> {
    let Some(id) = id.as_str() else {
        return Default::default();
    };
    let (status, _, text) = get(sim, &format!("/v1/files/{id}/content")).await;
    assert_eq!(status, 200, "{text}");
    jsonl(&text)
        .into_iter()
        .map(|l| (l["custom_id"].as_str().unwrap().to_string(), l))
        .collect()
}

#[tokio::test]
async fn sim_batch_openai_chat_and_responses_batches_play_and_continue() {
    let sim = sim_with(fast()).await;
    let chat = "/v1/chat/completions";
    let tools = json!([{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]);
    let first = json!([{"role": "user", "content": "What time is it?"}]);
    let body = |messages: &Value| json!({"model": "gpt-5", "tools": tools, "messages": messages});
    let created = openai_create(
        &sim,
        chat,
        &[
            line("alpha--0", chat, body(&first)),
            line("flaky--0", chat, body(&first)),
            line("ghost--0", chat, body(&first)),
        ],
    )
    .await;
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("batch_"));
    let done = openai_wait(&sim, id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["request_counts"],
        json!({"total": 3, "completed": 1, "failed": 2})
    );
    assert!(done["completed_at"].is_i64());
    let out = file_lines(&sim, &done["output_file_id"]).await;
    let errs = file_lines(&sim, &done["error_file_id"]).await;
    let alpha = &out["alpha--0"];
    assert_eq!(alpha["error"], Value::Null);
    assert_eq!(alpha["response"]["status_code"], 200);
    assert!(alpha["id"].as_str().unwrap().starts_with("batch_req_"));
    let message = alpha["response"]["body"]["choices"][0]["message"].clone();
    assert_eq!(message["tool_calls"][0]["function"]["name"], "get_time");
    assert_eq!(errs["flaky--0"]["response"]["status_code"], 500);
    assert_eq!(
        errs["flaky--0"]["response"]["body"]["error"]["type"],
        "server_error"
    );
    assert_eq!(errs["ghost--0"]["response"]["status_code"], 404);

    // The conversation goes on in a second batch; a wrong replay is an error line.
    let call_id = message["tool_calls"][0]["id"].clone();
    let mut history = first.as_array().unwrap().clone();
    history.push(message.clone());
    history.push(json!({"role": "tool", "tool_call_id": call_id, "content": "12:00"}));
    let mut wrong = history.clone();
    wrong[1]["tool_calls"][0]["function"]["arguments"] = json!("{\"tz\": 1}");
    let created = openai_create(
        &sim,
        chat,
        &[
            line("alpha--1", chat, body(&json!(history))),
            line("alpha--1w", chat, body(&json!(wrong))),
        ],
    )
    .await;
    let done = openai_wait(&sim, created["id"].as_str().unwrap()).await;
    let out = file_lines(&sim, &done["output_file_id"]).await;
    let errs = file_lines(&sim, &done["error_file_id"]).await;
    let text = out["alpha--1"]["response"]["body"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(text.starts_with("alpha done"), "{out:?}");
    assert_eq!(errs["alpha--1w"]["response"]["status_code"], 400);

    // The Responses endpoint.
    let responses = "/v1/responses";
    let created = openai_create(
        &sim,
        responses,
        &[line(
            "beta--0",
            responses,
            json!({"model": "gpt-5", "input": "Hello"}),
        )],
    )
    .await;
    let done = openai_wait(&sim, created["id"].as_str().unwrap()).await;
    assert_eq!(done["error_file_id"], Value::Null);
    let out = file_lines(&sim, &done["output_file_id"]).await;
    let body = &out["beta--0"]["response"]["body"];
    assert_eq!(body["object"], "response");
    assert_eq!(body["output"][0]["type"], "message");
    let batched = sim
        .requests()
        .into_iter()
        .filter(|r| r.batch.as_deref() == Some(done["id"].as_str().unwrap()))
        .count();
    assert_eq!(batched, 1);
    let rec = sim
        .batches()
        .into_iter()
        .find(|b| b.id == done["id"])
        .unwrap();
    assert_eq!(rec.calls.results_ms.len(), 1, "one file downloaded");
}

#[tokio::test]
async fn sim_batch_openai_progress_expiry_and_cancel() {
    let chat = "/v1/chat/completions";
    let body = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]});
    let lines: Vec<String> = (0..3)
        .map(|i| line(&format!("beta--{i}"), chat, body.clone()))
        .collect();
    let sim = sim_with(BatchSettings {
        delay: Duration::ZERO,
        spread: Duration::from_millis(300),
        expire_after: Duration::from_millis(450),
        ..BatchSettings::default()
    })
    .await;
    let created = openai_create(&sim, chat, &lines).await;
    let id = created["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (_, mid, _) = get(&sim, &format!("/v1/batches/{id}")).await;
    assert_eq!(mid["status"], "in_progress");
    assert_eq!(
        mid["request_counts"],
        json!({"total": 3, "completed": 1, "failed": 0})
    );
    let done = openai_wait(&sim, &id).await;
    assert_eq!(done["status"], "expired");
    assert!(done["expired_at"].is_i64());
    let errs = file_lines(&sim, &done["error_file_id"]).await;
    assert_eq!(errs["beta--2"]["error"]["code"], "batch_expired");
    assert_eq!(errs["beta--2"]["response"], Value::Null);
    assert_eq!(file_lines(&sim, &done["output_file_id"]).await.len(), 2);

    let sim = sim_with(BatchSettings {
        delay: Duration::ZERO,
        spread: Duration::from_millis(400),
        ..BatchSettings::default()
    })
    .await;
    let created = openai_create(&sim, chat, &lines).await;
    let id = created["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, cancelling) = post(&sim, &format!("/v1/batches/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 200, "{cancelling}");
    assert_eq!(cancelling["status"], "cancelling");
    assert!(cancelling["cancelling_at"].is_i64());
    let done = openai_wait(&sim, &id).await;
    assert_eq!(done["status"], "cancelled");
    let errs = file_lines(&sim, &done["error_file_id"]).await;
    assert_eq!(errs.len(), 2);
    assert!(errs
        .values()
        .all(|l| l["error"]["code"] == "batch_cancelled"));
    assert_eq!(file_lines(&sim, &done["output_file_id"]).await.len(), 1);

    // A finished batch cannot be cancelled.
    let sim = sim_with(fast()).await;
    let created = openai_create(&sim, chat, &lines[..1]).await;
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(openai_wait(&sim, &id).await["status"], "completed");
    let (status, v) = post(&sim, &format!("/v1/batches/{id}/cancel"), &json!({})).await;
    assert_eq!(status, 409);
    assert_eq!(
        v["error"]["message"],
        "Cannot cancel a batch with status 'completed'."
    );
}

#[tokio::test]
async fn sim_batch_openai_refuses_what_the_api_refuses() {
    let sim = sim_with(BatchSettings {
        max_openai_requests: 2,
        ..fast()
    })
    .await;
    let chat = "/v1/chat/completions";
    let body = json!({"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]});
    let (_, file) = upload(&sim, "", "batch", &line("beta--0", chat, body.clone())).await;
    let create = |window: &str, endpoint: &str, file: &Value| json!({"input_file_id": file, "endpoint": endpoint, "completion_window": window});
    let (status, v) = post(&sim, "/v1/batches", &create("1h", chat, &file["id"])).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["param"], "completion_window");
    assert_eq!(v["error"]["code"], "invalid_value");
    let (status, v) = post(
        &sim,
        "/v1/batches",
        &create("24h", "/v1/embeddings", &file["id"]),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["param"], "endpoint");
    let (status, v) = post(
        &sim,
        "/v1/batches",
        &json!({"endpoint": chat, "completion_window": "24h"}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["code"], "missing_required_parameter");

    // An unknown file: the batch is created, then fails.
    let (status, created) = post(
        &sim,
        "/v1/batches",
        &create("24h", chat, &json!("file-nope")),
    )
    .await;
    assert_eq!(status, 200);
    let failed = openai_wait(&sim, created["id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed");
    assert!(failed["failed_at"].is_i64());
    assert_eq!(failed["errors"]["data"][0]["code"], "invalid_request");

    // Lines that do not fit the batch fail it, with one error per line.
    let failing = [
        (
            vec![line("a--0", "/v1/responses", body.clone())],
            "invalid_url",
        ),
        (
            vec![
                line("a--0", chat, body.clone()),
                line("a--0", chat, body.clone()),
            ],
            "duplicate_custom_id",
        ),
        (
            vec![line(
                "a--0",
                chat,
                json!({"model": "gpt-5", "stream": true, "messages": []}),
            )],
            "streaming_unsupported",
        ),
        (
            vec![line("a--0", chat, body.clone()), "{oops".to_string()],
            "invalid_json_line",
        ),
        (
            (0..3)
                .map(|i| line(&format!("a--{i}"), chat, body.clone()))
                .collect(),
            "invalid_request",
        ),
    ];
    for (lines, code) in failing {
        let created = openai_create(&sim, chat, &lines).await;
        let failed = openai_wait(&sim, created["id"].as_str().unwrap()).await;
        assert_eq!(failed["status"], "failed", "{code}: {failed}");
        let found: Vec<&str> = failed["errors"]["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["code"].as_str())
            .collect();
        assert!(found.contains(&code), "{code}: {failed}");
    }

    // Uploads: not multipart, a bad purpose, a file that is not JSONL, a missing file.
    let req = reqwest::Client::new()
        .post(format!("{}/v1/files", sim.base_url()))
        .header("content-type", "application/json")
        .body("{}");
    let (status, v, _) = send(req).await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let (status, v) = upload(&sim, "", "homework", "{}").await;
    assert_eq!((status, &v["error"]["param"]), (400, &json!("purpose")));
    let (status, v) = upload(&sim, "", "batch", "not json at all").await;
    assert_eq!(status, 400, "{v}");
    let (status, v, _) = get(&sim, "/v1/files/file-nope/content").await;
    assert_eq!(status, 404, "{v}");
    let (status, v, _) = get(&sim, "/v1/batches/batch_nope").await;
    assert_eq!(status, 404, "{v}");
}
