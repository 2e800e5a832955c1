//! The Messages protocol invariants: verbatim history, tool_result pairing and order,
//! thinking signatures, pause_turn continuation, unknown stop reasons.

use serde_json::{json, Value};

use crate::common::{job, num, Case};

/// Request n+1 must start with request n's messages, then the assistant content exactly
/// as the simulator sent it.
fn assert_verbatim_history(ran: &crate::common::Ran, task: &str) {
    let reqs: Vec<_> = ran
        .requests(task)
        .into_iter()
        .filter(|r| r.status == 200)
        .collect();
    assert!(reqs.len() >= 2);
    for pair in reqs.windows(2) {
        let before = pair[0].body["messages"].as_array().unwrap();
        let after = pair[1].body["messages"].as_array().unwrap();
        assert_eq!(&after[..before.len()], &before[..], "history was rewritten");
        let sent = &pair[0].response.as_ref().unwrap()["content"];
        assert_eq!(after[before.len()]["role"], "assistant");
        assert_eq!(
            &after[before.len()]["content"],
            sent,
            "assistant turn not verbatim"
        );
    }
}

#[tokio::test]
async fn thinking_redacted_server_and_unknown_blocks_round_trip_unchanged() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            r#"  - id: t
    prompt: p
    sim:
      turns:
        - content:
            - thinking: "Let me think about the clock."
            - redacted_thinking: "EmwKAhgBEgy3va3pzix/LafPsn4a"
            - raw: { type: server_tool_use, id: srvtoolu_1, name: web_search, input: { query: "time" } }
            - raw: { type: web_search_tool_result, tool_use_id: srvtoolu_1, content: [] }
            - raw: { type: future_block, payload: { nested: [1, 2.5, "x"] }, extra_field: true }
            - text: "Checking."
            - tool_use: { name: get_time, input: {} }
        - content:
            - thinking: ""
            - text: "Done."
"#,
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    assert_verbatim_history(&ran, "t");
    let second = &ran.requests("t")[1].body["messages"][1]["content"];
    assert_eq!(second[0]["type"], "thinking");
    assert!(second[0]["signature"]
        .as_str()
        .unwrap()
        .starts_with("sim-sig-"));
    assert_eq!(second[4]["extra_field"], true);
}

#[tokio::test]
async fn every_tool_use_gets_one_result_in_order_results_first() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            r#"  - id: t
    prompt: p
    sim:
      turns:
        - content:
            - tool_use: { name: get_time, input: { timezone: UTC } }
            - tool_use: { name: launch_rockets, input: { count: 3 } }
            - tool_use: { name: get_time, input: { timezone: 42 } }
            - tool_use: { name: get_time, input: { timezone: "Mars/Olympus" } }
            - tool_use: { name: get_time, input: { tz: UTC } }
        - content: [ { text: "ok" } ]
"#,
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let reqs = ran.requests("t");
    let calls: Vec<String> = reqs[0].response.as_ref().unwrap()["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect();
    let answer = reqs[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(answer["role"], "user");
    let blocks = answer["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 5);
    let ids: Vec<String> = blocks
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, calls);
    let errors: Vec<bool> = blocks
        .iter()
        .map(|b| b.get("is_error") == Some(&json!(true)))
        .collect();
    assert_eq!(errors, vec![false, true, true, true, true]);
    assert!(blocks[1]["content"]
        .as_str()
        .unwrap()
        .contains("unknown tool \"launch_rockets\""));
    assert!(blocks[2]["content"].as_str().unwrap().contains("/timezone"));
    assert!(blocks[3]["content"]
        .as_str()
        .unwrap()
        .contains("unknown timezone"));
    assert!(blocks[4]["content"].as_str().unwrap().contains("schema"));
    let row = ran.row("t");
    assert_eq!((num(&row, "tool_calls"), num(&row, "tool_errors")), (5, 4));
    // the transcript has every call with its permission decision
    let decisions: Vec<Value> = ran
        .events("t", "tool_result")
        .iter()
        .map(|e| e["decision"].clone())
        .collect();
    assert_eq!(
        decisions,
        vec![
            json!("allow"),
            json!("deny"),
            json!("allow"),
            json!("allow"),
            json!("allow")
        ]
    );
}

#[tokio::test]
async fn pause_turn_is_sent_back_unchanged_without_a_new_message() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            r#"  - id: t
    prompt: p
    sim:
      turns:
        - content:
            - raw: { type: server_tool_use, id: srvtoolu_9, name: web_search, input: { query: "q" } }
          stop_reason: pause_turn
        - content: [ { text: "Found it." } ]
"#,
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let reqs = ran.requests("t");
    assert_eq!(reqs.len(), 2);
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 2, "no message may be added after a pause_turn");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        &msgs[1]["content"],
        &reqs[0].response.as_ref().unwrap()["content"]
    );
    assert_eq!(num(&ran.row("t"), "turns"), 2);
}

#[tokio::test]
async fn unknown_stop_reason_is_a_provider_error_not_a_success() {
    let case = Case::new();
    let ran = case
        .run(&job("", "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: \"looks done\" } ]\n          stop_reason: compaction_needed\n"))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "provider_error");
    assert_eq!(row["outcome"], "error");
    assert!(row["stop_detail"].contains("compaction_needed"));
}

#[tokio::test]
async fn sampling_parameters_are_sent_only_when_set() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            "  - id: plain\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n  - id: warm\n    prompt: p\n    temperature: 0.3\n    system: Be brief.\n    sim: { turns: [ { content: [ { text: hi } ] } ] }\n",
        ))
        .await;
    let plain = &ran.requests("plain")[0];
    for k in ["temperature", "top_p", "top_k", "thinking", "system"] {
        assert!(plain.body.get(k).is_none(), "{k} sent without being set");
    }
    assert_eq!(plain.body["tools"][0]["name"], "get_time");
    assert!(plain.body["tools"][0]["input_schema"].is_object());
    assert_eq!(plain.headers["anthropic-version"], "2023-06-01");
    let warm = &ran.requests("warm")[0];
    assert_eq!(warm.body["temperature"], 0.3);
    assert_eq!(warm.body["system"], "Be brief.");
}

/// The simulator refuses what the real API refuses; checked with a hand-made client.
#[tokio::test]
async fn simulator_rejects_tampered_thinking_and_unpaired_tool_use() {
    use agentbatch::sim::script::Script;
    let sim = agentbatch::sim::Sim::start_local().await.unwrap();
    let script: Script = serde_yaml::from_str(
        "turns:\n  - content: [ { thinking: hmm }, { tool_use: { name: get_time, input: {} } } ]\n  - content: [ { text: ok } ]\n",
    )
    .unwrap();
    sim.register("k", std::sync::Arc::new(script));
    let client = reqwest::Client::new();
    let url = format!("{}/v1/messages", sim.base_url_for("k"));
    let post = |body: Value| {
        client
            .post(&url)
            .header("x-api-key", "test")
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let first =
        json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
    let reply: Value = post(first).await.unwrap().json().await.unwrap();
    let content = reply["content"].clone();
    let id = content[1]["id"].as_str().unwrap().to_string();

    let mut forged = content.clone();
    forged[0]["thinking"] = json!("hmm, edited");
    let answer = json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "noon"}]});
    let bad = json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": forged}, answer]});
    let resp = post(bad).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert_eq!(err["error"]["type"], "invalid_request_error");
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("signature"));

    let unpaired = json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}, {"role": "user", "content": "what now?"}]});
    let resp = post(unpaired).await.unwrap();
    assert_eq!(resp.status(), 400);
    let err: Value = resp.json().await.unwrap();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tool_result"),
        "{err}"
    );

    let good = json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": content}, answer]});
    assert_eq!(post(good).await.unwrap().status(), 200);

    let no_key = client
        .post(&url)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), 401);
}

#[tokio::test]
async fn a_paused_turn_can_be_followed_by_tool_use_and_more_turns() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            r#"  - id: t
    prompt: p
    sim:
      turns:
        - content: [ { raw: { type: server_tool_use, id: srvtoolu_1, name: web_search, input: {} } } ]
          stop_reason: pause_turn
        - content: [ { text: "now the clock" }, { tool_use: { name: get_time, input: {} } } ]
        - content: [ { text: "done" } ]
"#,
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    assert_eq!(ran.requests("t").len(), 3);
    assert_verbatim_history(&ran, "t");
}

#[tokio::test]
async fn a_raw_message_with_unknown_fields_is_kept_verbatim_for_later_turns() {
    let case = Case::new();
    let raw = r#"{"id":"msg_raw","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi","citations":null,"future":{"a":[1,2]}},{"type":"tool_use","id":"toolu_raw_1","name":"get_time","input":{},"caller":{"type":"direct"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":5,"server_tool_use":null},"container":null}"#;
    let ran = case
        .run(&job(
            "",
            &format!("  - id: t\n    prompt: p\n    sim:\n      turns:\n        - raw_body: '{raw}'\n        - content: [ {{ text: done }} ]\n"),
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let replayed = &ran.requests("t")[1].body["messages"][1]["content"];
    let sent: Value = serde_json::from_str(raw).unwrap();
    assert_eq!(replayed, &sent["content"]);
    assert_verbatim_history(&ran, "t");
}

#[tokio::test]
async fn end_turn_with_tool_calls_completes_but_says_the_calls_were_not_run() {
    let case = Case::new();
    let ran = case
        .run(&job("", "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n          stop_reason: end_turn\n"))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed");
    assert!(
        row["stop_detail"].contains("1 tool call(s) were not run"),
        "{}",
        row["stop_detail"]
    );
    assert_eq!(num(&row, "tool_calls"), 0);
}
