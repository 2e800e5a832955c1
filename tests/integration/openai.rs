//! The OpenAI protocols over real HTTP against the simulator: Responses (stateless,
//! reasoning items replayed) and Chat Completions (with compatible-server quirks), and
//! one job running all three protocols at once with exact per-task costs.

use serde_json::{json, Value};

use crate::common::{job, num, transcript_money, Case, Ran};

const PROVIDERS: &str = "providers:\n  sim-responses: { protocol: openai-responses, simulator: true }\n  sim-chat: { protocol: openai-chat, simulator: true }\n";

/// A job on a simulated OpenAI provider (`sim-responses` or `sim-chat`).
fn openai_job(provider: &str, model: &str, tasks: &str) -> String {
    job(
        &format!("  provider: {provider}\n  model: {model}\n"),
        tasks,
    )
    .replacen("name: test\n", &format!("name: test\n{PROVIDERS}"), 1)
}

fn ok_requests(ran: &Ran, task: &str) -> Vec<Value> {
    ran.requests(task)
        .into_iter()
        .filter(|r| r.status == 200)
        .map(|r| r.body)
        .collect()
}

const TWO_CALLS: &str = r#"  - id: t
    prompt: What time is it in UTC and in Paris?
    system: You are terse.
    sim:
      turns:
        - content:
            - thinking: "two zones, call both"
            - tool_use: { name: get_time, input: { timezone: UTC } }
            - tool_use: { name: get_time, input: { timezone: "+02:00" } }
        - content:
            - text: "UTC is {{tool_result}}."
"#;

#[tokio::test]
async fn responses_runs_a_tool_loop_statelessly_with_reasoning_replayed() {
    let case = Case::new();
    let ran = case
        .run(&openai_job("sim-responses", "gpt-5.4", TWO_CALLS))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(row["protocol"], "openai-responses");
    assert_eq!((num(&row, "turns"), num(&row, "tool_calls")), (2, 2));
    assert_eq!(num(&row, "tool_errors"), 0);
    let reqs = ok_requests(&ran, "t");
    assert_eq!(reqs.len(), 2);
    let first = &reqs[0];
    assert_eq!(first["store"], false);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(first["instructions"], "You are terse.");
    assert_eq!(first["parallel_tool_calls"], true);
    assert_eq!(first["tools"][0]["name"], "get_time", "flat tool shape");
    assert_eq!(first["tools"][0]["strict"], false);
    assert!(first["max_output_tokens"].as_u64().unwrap() >= 16);
    // The second request replays the whole first input, then the model's items without
    // ids (reasoning first, with its encrypted content), then one output per call_id.
    let before = first["input"].as_array().unwrap();
    let after = reqs[1]["input"].as_array().unwrap();
    assert_eq!(&after[..before.len()], &before[..], "history rewritten");
    let sent = ran.requests("t")[0].response.clone().unwrap();
    let output = sent["output"].as_array().unwrap();
    let replayed = &after[before.len()..before.len() + output.len()];
    for (got, orig) in replayed.iter().zip(output) {
        assert!(got.get("id").is_none(), "an id was replayed: {got}");
        let mut orig = orig.clone();
        orig.as_object_mut().unwrap().remove("id");
        assert_eq!(got, &orig);
    }
    assert_eq!(replayed[0]["type"], "reasoning");
    assert!(replayed[0]["encrypted_content"]
        .as_str()
        .unwrap()
        .starts_with("sim-enc-"));
    let outputs: Vec<&Value> = after[before.len() + output.len()..].iter().collect();
    assert_eq!(outputs.len(), 2);
    for (o, call) in outputs.iter().zip(&output[1..]) {
        assert_eq!(o["type"], "function_call_output");
        assert_eq!(o["call_id"], call["call_id"]);
    }
    let text = ran.events("t", "response").last().unwrap()["body"]["output"][0]["content"][0]
        ["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.starts_with("UTC is 20"), "{text}");
}

#[tokio::test]
async fn chat_runs_a_tool_loop_with_parallel_calls_answered_by_tool_messages() {
    let case = Case::new();
    let ran = case
        .run(&openai_job("sim-chat", "gpt-5.4-mini", TWO_CALLS))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(row["protocol"], "openai-chat");
    assert_eq!(num(&row, "tool_calls"), 2);
    let reqs = ok_requests(&ran, "t");
    let first = &reqs[0];
    assert_eq!(
        first["messages"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(
        first["tools"][0]["function"]["name"], "get_time",
        "nested tool shape"
    );
    assert!(
        first["max_tokens"].is_u64(),
        "compatible servers get max_tokens"
    );
    assert_eq!(first["parallel_tool_calls"], true);
    let msgs = reqs[1]["messages"].as_array().unwrap();
    let n = first["messages"].as_array().unwrap().len();
    assert_eq!(&msgs[..n], first["messages"].as_array().unwrap().as_slice());
    let calls = msgs[n]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    for (k, call) in calls.iter().enumerate() {
        assert_eq!(msgs[n + 1 + k]["role"], "tool");
        assert_eq!(msgs[n + 1 + k]["tool_call_id"], call["id"]);
    }
}

/// (task, script turn fields, expected stop reason, expected detail fragment)
async fn stop_cases(cases: &[(&str, &str, &str, &str)], provider: &str) {
    let tasks: String = cases
        .iter()
        .map(|(id, turn, _, _)| {
            format!("  - id: {id}\n    prompt: p\n    sim:\n      turns:\n        - {turn}\n        - content: [ {{ text: recovered }} ]\n")
        })
        .collect();
    let case = Case::new();
    let ran = case.run(&openai_job(provider, "gpt-5.4", &tasks)).await;
    for (id, _, stop, detail) in cases {
        let row = ran.row(id);
        assert_eq!(row["stop_reason"], *stop, "{provider} {id}: {row:?}");
        assert!(
            row["stop_detail"].contains(detail),
            "{provider} {id}: {}",
            row["stop_detail"]
        );
    }
}

#[tokio::test]
async fn every_responses_status_maps_to_its_stop_reason() {
    stop_cases(
        &[
            ("done", "content: [ { text: hi } ]", "completed", "end_turn"),
            ("truncated", "{ content: [ { text: hi } ], status: incomplete, incomplete_reason: max_output_tokens }", "model_max_tokens", "max_tokens"),
            ("capped", "{ content: [ { text: hi } ], usage: { output_tokens: 99999 } }", "model_max_tokens", "max_tokens"),
            ("filtered", "{ content: [ { text: hi } ], status: incomplete, incomplete_reason: content_filter }", "refusal", "content_filter"),
            ("odd", "{ content: [ { text: hi } ], status: incomplete, incomplete_reason: max_messages }", "provider_error", "max_messages"),
            ("refused", "{ content: [ { text: \"I won't\" } ], stop_reason: refusal }", "refusal", "I won't"),
            ("queued", "{ content: [ { text: hi } ], status: queued }", "provider_error", "status queued"),
            ("broken", "{ content: [], status: failed, error: { code: invalid_prompt, message: nope } }", "provider_error", "invalid_prompt"),
        ],
        "sim-responses",
    )
    .await;
}

#[tokio::test]
async fn every_chat_finish_reason_maps_to_its_stop_reason() {
    stop_cases(
        &[
            (
                "done",
                "{ content: [ { text: hi } ], finish_reason: stop }",
                "completed",
                "end_turn",
            ),
            (
                "length",
                "{ content: [ { text: hi } ], finish_reason: length }",
                "model_max_tokens",
                "max_tokens",
            ),
            (
                "filtered",
                "{ content: [ { text: hi } ], finish_reason: content_filter }",
                "refusal",
                "content_filter",
            ),
            (
                "odd",
                "{ content: [ { text: hi } ], finish_reason: banana }",
                "provider_error",
                "banana",
            ),
            (
                "silent",
                "{ content: [ { text: hi } ], finish_reason: \"null\" }",
                "provider_error",
                "no finish_reason",
            ),
            (
                "empty_calls",
                "{ content: [ { text: hi } ], finish_reason: tool_calls }",
                "provider_error",
                "tool_use",
            ),
        ],
        "sim-chat",
    )
    .await;
}

#[tokio::test]
async fn a_failed_server_error_is_retried_and_tool_calls_under_stop_still_run() {
    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-responses",
            "gpt-5.4",
            "  - id: flaky\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: hi } ]\n          status: failed\n          error: { code: server_error }\n",
        ))
        .await;
    // the simulator plays the same failed turn again: the retry budget runs out
    let flaky = ran.row("flaky");
    assert_eq!(flaky["stop_reason"], "provider_error");
    assert_eq!(num(&flaky, "retries"), 2, "{flaky:?}");
    // Each failed answer carried usage, so each is billed that, not its reservation.
    let price = agentbatch::vocab::price::lookup(&Default::default(), "gpt-5.4").unwrap();
    let billed: rust_decimal::Decimal = ran
        .requests("flaky")
        .iter()
        .map(|r| {
            let u = &r.response.as_ref().unwrap()["usage"];
            price.cost(&agentbatch::model::Usage {
                input_tokens: u["input_tokens"].as_u64().unwrap(),
                output_tokens: u["output_tokens"].as_u64().unwrap(),
                ..Default::default()
            })
        })
        .sum();
    assert_eq!(flaky["cost_usd"], billed.normalize().to_string());
    // Logged once each (as settled), not again as a worst-case charge.
    assert_eq!(transcript_money(&ran.transcript("flaky")), billed);
    assert!(
        flaky["stop_detail"].contains("at the usage it reported")
            && !flaky["stop_detail"].contains("counted as spent"),
        "{}",
        flaky["stop_detail"]
    );

    // A failed answer for the rate limit without usage: its worst case is charged, and
    // the transcript says so (resume adds up what a killed task spent from it).
    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-responses",
            "gpt-5.4",
            "  - id: limited\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: hi } ]\n          status: failed\n          error: { code: rate_limit_exceeded }\n          omit_usage: true\n",
        ))
        .await;
    let limited = ran.row("limited");
    assert_eq!(limited["stop_reason"], "rate_limited", "{limited:?}");
    let cost: rust_decimal::Decimal = limited["cost_usd"].parse().unwrap();
    assert!(cost > rust_decimal::Decimal::ZERO);
    assert_eq!(transcript_money(&ran.transcript("limited")), cost);

    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-chat",
            "gpt-5.4",
            "  - id: quirky\n    prompt: p\n    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n          finish_reason: stop\n        - content: [ { text: done } ]\n",
        ))
        .await;
    let quirky = ran.row("quirky");
    assert_eq!(quirky["stop_reason"], "completed", "{quirky:?}");
    assert_eq!(num(&quirky, "tool_calls"), 1);
}

#[tokio::test]
async fn a_refused_output_limit_field_says_which_setting_to_change() {
    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-chat",
            "gpt-5.4",
            "  - id: t\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ], faults: [ { status: 400, message: \"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.\" } ] } ] }\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "provider_error");
    assert!(
        row["stop_detail"].contains("providers.sim-chat.max_tokens_field: max_completion_tokens"),
        "{row:?}"
    );
}

#[tokio::test]
async fn broken_arguments_get_an_error_result_and_the_loop_goes_on() {
    for provider in ["sim-responses", "sim-chat"] {
        let case = Case::new();
        let ran = case
            .run(&openai_job(
                provider,
                "gpt-5.4",
                "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, arguments: '{\"timezone\": ', id: call_broken } } ]\n        - content: [ { text: 'sorry: {{tool_result}}' } ]\n",
            ))
            .await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{provider}: {row:?}");
        assert_eq!(num(&row, "tool_errors"), 1, "{provider}");
        let result = &ran.events("t", "tool_result")[0];
        assert_eq!(result["is_error"], true);
        assert_eq!(result["decision"], "invalid");
        assert!(result["content"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"));
        let last = ok_requests(&ran, "t").pop().unwrap();
        let answered = last.to_string();
        assert!(
            answered.contains("call_broken") && answered.contains("not valid JSON"),
            "{provider}: the error went back under the call's id"
        );
    }
}

#[tokio::test]
async fn missing_usage_and_missing_call_ids_are_absorbed_and_counted_at_an_upper_bound() {
    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-chat",
            "gpt-5.4",
            "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } }, { tool_use: { name: get_time, input: { timezone: UTC } } } ]\n          omit_usage: true\n          omit_call_ids: true\n        - content: [ { text: done } ]\n          omit_usage: true\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(num(&row, "usage_estimated_turns"), 2);
    assert_eq!(num(&row, "tool_calls"), 2);
    // Estimated at one token per byte sent: never below what was sent.
    let sent: u64 = ok_requests(&ran, "t")
        .iter()
        .map(|b| serde_json::to_vec(b).unwrap().len() as u64)
        .sum();
    assert!(
        num(&row, "input_tokens") >= sent * 9 / 10,
        "{row:?} vs {sent}"
    );
    let ids: Vec<String> = ran
        .events("t", "tool_call")
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "made-up ids are distinct");

    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-responses",
            "gpt-5.4",
            "  - id: r\n    prompt: p\n    sim: { turns: [ { content: [ { text: hi } ], omit_usage: true } ] }\n",
        ))
        .await;
    let row = ran.row("r");
    assert_eq!(row["stop_reason"], "completed");
    assert_eq!(num(&row, "usage_estimated_turns"), 1);

    // An answer without usage after answers with it is never counted above what the
    // budgets reserved for its request (it once broke a task's cost cap).
    let case = Case::new();
    let ran = case
        .run(&openai_job(
            "sim-chat",
            "gpt-5.4",
            "  - id: mixed\n    prompt: p\n    limits: { max_cost_usd: 1 }\n    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n          omit_usage: true\n        - content: [ { text: done } ]\n",
        ))
        .await;
    assert_eq!(num(&ran.row("mixed"), "usage_estimated_turns"), 1);
    let reserves = ran.events("mixed", "reserve");
    let settles = ran.events("mixed", "settle");
    assert_eq!((reserves.len(), settles.len()), (3, 3));
    for (r, s) in reserves.iter().zip(&settles) {
        let bound = r["prompt_tokens_upper_bound"].as_u64().unwrap();
        assert!(
            s["usage"]["input_tokens"].as_u64().unwrap() <= bound,
            "counted above the reservation's bound: {s} vs {r}"
        );
        let reserved: rust_decimal::Decimal = r["reserved_usd"].as_str().unwrap().parse().unwrap();
        let cost: rust_decimal::Decimal = s["cost_usd"].as_str().unwrap().parse().unwrap();
        assert!(cost <= reserved, "{cost} > {reserved}");
    }
    assert!(ran.events("mixed", "reservation_exceeded").is_empty());
}

#[tokio::test]
async fn rate_limit_resets_are_read_in_both_formats_and_quota_429s_are_not_retried() {
    let case = Case::new();
    let fault = |extra: &str| {
        format!("    sim:\n      turns:\n        - content: [ {{ text: hi }} ]\n          faults: [ {{ status: 429{extra} }} ]\n")
    };
    let yaml = format!(
        "name: test\n{PROVIDERS}defaults:\n  model: gpt-5.4\n  prompt: p\n  max_tokens: 512\ntasks:\n  - id: anthropic_reset\n    provider: sim\n    model: claude-sonnet-4-5\n{}  - id: openai_reset\n    provider: sim-responses\n{}  - id: openai_retry_after_ms\n    provider: sim-chat\n{}  - id: quota\n    provider: sim-chat\n{}",
        fault(", reset_after: 700ms"),
        fault(", reset_after: 700ms"),
        fault(", retry_after: 300ms"),
        fault(", error_type: insufficient_quota, code: insufficient_quota, message: You exceeded your current quota"),
    );
    let ran = case.run(&yaml).await;
    for task in ["anthropic_reset", "openai_reset", "openai_retry_after_ms"] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "completed", "{task}: {row:?}");
        assert_eq!(num(&row, "retries"), 1, "{task}");
        let failed = &ran.events(task, "attempt_failed")[0];
        let paused = failed["provider_paused_ms"].as_u64().unwrap();
        let expected = if task.ends_with("ms") { 300 } else { 700 };
        assert!(
            paused <= expected && paused + 250 >= expected,
            "{task}: paused {paused} ms, the server said {expected}"
        );
    }
    let quota = ran.row("quota");
    assert_eq!(quota["stop_reason"], "rate_limited", "{quota:?}");
    assert!(quota["stop_detail"].contains("quota"), "{quota:?}");
    assert_eq!(ran.requests("quota").len(), 1, "a quota 429 is not retried");
}

#[tokio::test]
async fn three_protocols_in_one_job_each_cost_from_their_own_usage_shape() {
    let case = Case::new();
    let usage = "usage: { input_tokens: 10000, cache_read_input_tokens: 8000, output_tokens: 1000, reasoning_tokens: 400 }";
    let script = format!(
        "    sim:\n      turns:\n        - content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n          {usage}\n        - content: [ {{ text: done }} ]\n          {usage}\n"
    );
    // A 12 KB prompt: the scripted 10,000 prompt tokens are within what the request
    // could have used (a token per byte), so they are billed as reported; caching off,
    // so the simulator writes nothing beside the scripted reads.
    let prompt = "word ".repeat(2400);
    let yaml = format!(
        "name: test\nconcurrency: 3\n{PROVIDERS}defaults:\n  prompt: \"{prompt}\"\n  cache: {{ mode: off }}\n  max_tokens: 2048\n  tools: [get_time]\ntasks:\n  - id: claude\n    provider: sim\n    model: claude-sonnet-4-5\n{script}  - id: responses\n    provider: sim-responses\n    model: gpt-5.4\n{script}  - id: chat\n    provider: sim-chat\n    model: gpt-5.4-mini\n{script}"
    );
    let ran = case.run(&yaml).await;
    // Per turn: 2,000 uncached + 8,000 cached input, 1,000 output; two turns each.
    // Anthropic (Sonnet 4.5: 3 / 0.30 cached / 15): 0.0234 per turn.
    // Responses (gpt-5.4: 2.50 / 0.25 / 15), cached inside input_tokens: 0.022.
    // Chat (gpt-5.4-mini: 0.75 / 0.075 / 4.50): 0.0066.
    for (task, protocol, cost, reasoning) in [
        ("claude", "anthropic", "0.0468", 0),
        ("responses", "openai-responses", "0.044", 800),
        ("chat", "openai-chat", "0.0132", 800),
    ] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "completed", "{task}: {row:?}");
        assert_eq!(row["protocol"], protocol);
        assert_eq!(row["cost_usd"], cost, "{task}");
        assert_eq!(num(&row, "input_tokens"), 4000, "{task}: uncached input");
        assert_eq!(num(&row, "cache_read_tokens"), 16000, "{task}");
        assert_eq!(num(&row, "output_tokens"), 2000, "{task}");
        assert_eq!(num(&row, "reasoning_tokens"), reasoning, "{task}");
        assert_eq!(num(&row, "usage_estimated_turns"), 0, "{task}");
        assert!(ran.events(task, "usage_clamped").is_empty(), "{task}");
    }
}

/// Duplicate tool-call ids from the model were once answered twice under one id and the
/// task completed, although the API would refuse the next request. Anthropic and
/// Responses end the task with a provider error (billed at its usage, nothing run);
/// Chat Completions renames the repeat, as it names id-less calls, and goes on.
#[tokio::test]
async fn duplicate_tool_call_ids_never_reach_the_next_request() {
    let twice = |id: &str| {
        format!("[ {{ tool_use: {{ name: get_time, input: {{}}, id: {id} }} }}, {{ tool_use: {{ name: get_time, input: {{ timezone: UTC }}, id: {id} }} }} ]")
    };
    let mut tasks = String::new();
    for (provider, model) in [
        ("sim", "claude-sonnet-4-5"),
        ("sim-responses", "gpt-5.4"),
        ("sim-chat", "gpt-5.4"),
    ] {
        tasks.push_str(&format!(
            "  - id: same-{provider}\n    prompt: p\n    provider: {provider}\n    model: {model}\n    sim: {{ turns: [ {{ content: {} }}, {{ content: [ {{ text: done }} ] }} ] }}\n",
            twice("dup_1")
        ));
        // An id the history already has, from an earlier turn.
        tasks.push_str(&format!(
            "  - id: again-{provider}\n    prompt: p\n    provider: {provider}\n    model: {model}\n    sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: get_time, input: {{}}, id: dup_2 }} }} ] }}, {{ content: [ {{ tool_use: {{ name: get_time, input: {{}}, id: dup_2 }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }}\n"
        ));
    }
    let case = Case::new();
    let ran = case
        .run(&job("", &tasks).replacen("name: test\n", &format!("name: test\n{PROVIDERS}"), 1))
        .await;
    for provider in ["sim", "sim-responses"] {
        for (task, turns, ran_calls) in [
            (format!("same-{provider}"), 1, 0),
            (format!("again-{provider}"), 2, 1),
        ] {
            let row = ran.row(&task);
            assert_eq!(row["stop_reason"], "provider_error", "{task}: {row:?}");
            assert!(
                row["stop_detail"].contains("two tool calls the id \"dup_"),
                "{task}: {}",
                row["stop_detail"]
            );
            assert_eq!(num(&row, "turns"), turns, "{task}");
            assert_eq!(
                num(&row, "tool_calls"),
                ran_calls,
                "{task}: nothing of the broken answer runs"
            );
            assert_eq!(
                ran.requests(&task).len(),
                turns as usize,
                "{task}: no request after it"
            );
            assert_eq!(
                ran.events(&task, "settle").len(),
                turns as usize,
                "{task}: billed at its usage"
            );
        }
    }
    for task in ["same-sim-chat", "again-sim-chat"] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "completed", "{task}: {row:?}");
        for body in ok_requests(&ran, task).iter().skip(1) {
            let msgs = body["messages"].as_array().unwrap();
            for (i, m) in msgs.iter().enumerate() {
                let Some(calls) = m["tool_calls"].as_array() else {
                    continue;
                };
                let ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
                let mut unique = ids.clone();
                unique.dedup();
                assert_eq!(
                    unique.len(),
                    ids.len(),
                    "{task}: ids in one message: {ids:?}"
                );
                let answered: Vec<&str> = msgs[i + 1..i + 1 + ids.len()]
                    .iter()
                    .map(|t| t["tool_call_id"].as_str().unwrap())
                    .collect();
                assert_eq!(answered, ids, "{task}: one tool message per call, in order");
            }
        }
    }
    assert_eq!(num(&ran.row("same-sim-chat"), "tool_calls"), 2);
    for row in ran.rows() {
        let text = std::fs::read_to_string(ran.dir.join(&row["transcript"])).unwrap();
        let report = agentbatch::audit::audit_lines(&text).unwrap();
        assert_eq!(
            report.violations(),
            0,
            "{}: {}",
            row["task_id"],
            report.render()
        );
    }
}
