//! A provider's usage figures are hostile input: a price table that makes a cache read
//! dearer than input, a 1-hour breakdown past its total, cached tokens above the prompt,
//! negative, fractional and absurd counts, on all three protocols. Each is read as a
//! consistent figure within what the request could have used, recorded as a
//! `usage_clamped` event (which `agentbatch audit` reports), and billed within the
//! request's reservation, so no cap is ever exceeded.

use rust_decimal::Decimal;
use serde_json::{json, Value};

use crate::common::{Case, Ran};

fn dec(v: &Value) -> Decimal {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an amount: {v}"))
}

/// A system prompt of about 12 KB: long enough to cache, and for the simulator to
/// report 3,000 prompt tokens.
fn long_system() -> String {
    "You fix bugs in small Python projects. Read before you write. ".repeat(200)
}

#[tokio::test]
async fn a_cache_read_priced_above_input_is_warned_about_and_no_cap_is_exceeded() {
    let case = Case::new();
    let yaml = format!(
        "name: typo\npricing:\n  claude-sonnet-4-5: {{ input: 1, output: 1, cache_read: 1000 }}\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  system: \"{}\"\n  limits: {{ max_cost_usd: 0.05 }}\ntasks:\n  - id: t\n    prompt: go\n    sim:\n      turns:\n        - content: [ {{ text: done }} ]\n          usage: {{ cache_read_input_tokens: 2510 }}\n",
        long_system()
    );
    case.write("job.yaml", &yaml);
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("worst case prices the prompt at $1000/Mtok"),
        "the worst case covers the cache read's rate: {text}"
    );
    assert!(
        text.contains("warning: pricing of claude-sonnet-4-5: cache_read $1000/Mtok is above its input rate $1/Mtok"),
        "{text}"
    );
    let ran = case.run(&yaml).await;
    let row = ran.row("t");
    let spent: Decimal = row["cost_usd"].parse().unwrap();
    assert!(spent <= Decimal::new(5, 2), "spent ${spent}: {row:?}");
    assert_eq!(row["stop_reason"], "cost_limit", "{row:?}");
    assert!(ran.events("t", "reservation_exceeded").is_empty());
}

/// A one-turn task on `protocol` whose answer is `body` as written.
fn raw_job(protocol: &str, model: &str, extra: &str, body: &Value) -> String {
    let raw = serde_json::to_string(&body.to_string()).unwrap();
    format!(
        "name: raw\nteams:\n  platform: {{ cap: {{ usd: 1, period: day }} }}\nproviders:\n  p: {{ protocol: {protocol}, simulator: true }}\ndefaults:\n  provider: p\n  model: {model}\n  team: platform\n  max_tokens: 1000\n  stream: never\n{extra}  limits: {{ max_cost_usd: 0.5 }}\ntasks:\n  - id: t\n    prompt: go\n    sim:\n      turns:\n        - raw_body: {raw}\n"
    )
}

/// The task's settle against its reservation, and its clamps by field.
fn settled(ran: &Ran) -> (Value, Value, Vec<(String, Value, u64)>) {
    let settle = ran.events("t", "settle").pop().expect("a settle");
    let reserve = ran.events("t", "reserve").pop().expect("a reserve");
    let clamps = ran
        .events("t", "usage_clamped")
        .iter()
        .flat_map(|e| e["clamps"].as_array().cloned().unwrap_or_default())
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["reported"].clone(),
                c["used"].as_u64().unwrap(),
            )
        })
        .collect();
    (settle, reserve, clamps)
}

fn anthropic_message(usage: Value) -> Value {
    json!({"id": "msg_raw", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
           "stop_sequence": null, "usage": usage})
}

#[tokio::test]
async fn a_one_hour_breakdown_past_its_total_is_clamped_recorded_and_billed_within_the_reservation()
{
    for ttl in ["5m", "1h"] {
        let case = Case::new();
        let body = anthropic_message(json!({
            "input_tokens": 5, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 10,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 900000000},
            "output_tokens": 5
        }));
        let ran = case
            .run(&raw_job(
                "anthropic",
                "claude-sonnet-4-5",
                &format!("  cache: {{ ttl: {ttl} }}\n"),
                &body,
            ))
            .await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{ttl}: {row:?}");
        let (settle, reserve, clamps) = settled(&ran);
        assert!(
            dec(&settle["cost_usd"]) <= dec(&reserve["reserved_usd"]),
            "{ttl}: {settle} above {reserve}"
        );
        // 5 input at $3, 10 written at $3.75 (5m) or $6 (1h), 5 output at $15.
        let want = if ttl == "5m" {
            "0.0001275"
        } else {
            "0.0001500"
        };
        assert_eq!(
            row["cost_usd"].parse::<Decimal>().unwrap(),
            want.parse::<Decimal>().unwrap(),
            "{ttl}: {row:?}"
        );
        assert!(
            row["cache_saved_usd"].parse::<Decimal>().unwrap() > Decimal::new(-1, 3),
            "{ttl}: {row:?}"
        );
        let one_hour = "usage.cache_creation.ephemeral_1h_input_tokens";
        assert!(
            clamps
                .iter()
                .any(|(f, r, used)| f == one_hour && *r == json!(900000000) && *used == 10),
            "{ttl}: {clamps:?}"
        );
        assert_eq!(
            clamps
                .iter()
                .any(|(f, _, used)| f == "cache_write_1h_tokens" && *used == 0),
            ttl == "5m",
            "{ttl}: a request that asked for no 1-hour entries wrote none: {clamps:?}"
        );
        let audit = case.agentbatch(&[
            "audit",
            ran.dir.join("transcripts/t.jsonl").to_str().unwrap(),
        ]);
        let said = String::from_utf8_lossy(&audit.stdout);
        assert_eq!(audit.status.code(), Some(0), "{said}");
        assert!(
            said.contains("usage (warning)") && said.contains(one_hour),
            "{said}"
        );
    }
}

#[tokio::test]
async fn contradictory_negative_and_absurd_figures_on_every_protocol_stay_within_the_reservation() {
    let cases = [
        (
            "anthropic",
            "claude-sonnet-4-5",
            anthropic_message(json!({
                "input_tokens": 900000000, "cache_read_input_tokens": -40,
                "cache_creation_input_tokens": 12.5, "output_tokens": 1e30
            })),
            vec![
                "usage.cache_read_input_tokens",
                "usage.cache_creation_input_tokens",
                "usage.output_tokens",
                "output_tokens",
                "input_tokens",
            ],
        ),
        (
            "openai-responses",
            "gpt-5.4",
            json!({"id": "resp_raw", "object": "response", "status": "completed", "model": "gpt-5.4",
                   "output": [{"type": "message", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": "done", "annotations": []}]}],
                   "usage": {"input_tokens": 100,
                             "input_tokens_details": {"cached_tokens": 900000000, "cache_write_tokens": 7},
                             "output_tokens": 50, "output_tokens_details": {"reasoning_tokens": 80}}}),
            vec![
                "usage.input_tokens_details.cached_tokens",
                "usage.input_tokens_details.cache_write_tokens",
                "usage.output_tokens_details.reasoning_tokens",
            ],
        ),
        (
            "openai-chat",
            "gpt-5.4",
            json!({"id": "chatcmpl-raw", "object": "chat.completion", "created": 1, "model": "gpt-5.4",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 18446744073709551615u64, "completion_tokens": 40,
                             "prompt_tokens_details": {"cached_tokens": "lots"}}}),
            vec!["usage.prompt_tokens_details.cached_tokens", "input_tokens"],
        ),
    ];
    for (protocol, model, body, fields) in cases {
        let case = Case::new();
        let ran = case.run(&raw_job(protocol, model, "", &body)).await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        let (settle, reserve, clamps) = settled(&ran);
        assert!(
            dec(&settle["cost_usd"]) <= dec(&reserve["reserved_usd"]),
            "{protocol}: {settle} above {reserve}"
        );
        let usage = &settle["usage"];
        let prompt: u64 = ["input_tokens", "cache_read_tokens", "cache_write_tokens"]
            .iter()
            .map(|k| usage[k].as_u64().unwrap())
            .sum();
        assert!(
            prompt <= reserve["prompt_tokens_upper_bound"].as_u64().unwrap(),
            "{protocol}: {usage}"
        );
        assert!(
            usage["output_tokens"].as_u64().unwrap() <= 1000,
            "{protocol}: {usage}"
        );
        for f in fields {
            assert!(
                clamps.iter().any(|(field, _, _)| field == f),
                "{protocol}: {f} not recorded in {clamps:?}"
            );
        }
        assert!(
            ran.events("t", "reservation_exceeded").is_empty(),
            "{protocol}"
        );
    }
}

/// The chaos model's `contradict_usage` writes every answer's figures at odds with
/// each other and the request; each reads back, clamped, as the simulator's own, so a
/// run with it gives the rows of a run without (streamed or not, caching on, 5-minute
/// and 1-hour entries), with every clamp recorded.
#[tokio::test]
async fn contradictory_figures_read_back_as_the_simulators_own_on_every_protocol() {
    let configs = [
        ("anthropic", "claude-sonnet-4-5", "5m"),
        ("anthropic", "claude-sonnet-4-5", "1h"),
        ("openai-responses", "gpt-5.4", "5m"),
        ("openai-chat", "gpt-5.4", "5m"),
    ];
    for (protocol, model, ttl) in configs {
        for stream in ["never", "always"] {
            let run = |contradict: bool| {
                let flag = if contradict {
                    ", contradict_usage: true"
                } else {
                    ""
                };
                format!(
                    "name: c\nproviders:\n  p: {{ protocol: {protocol}, simulator: true }}\ndefaults:\n  provider: p\n  model: {model}\n  max_tokens: 1024\n  stream: {stream}\n  cache: {{ ttl: {ttl} }}\n  system: \"{}\"\n  tools: [get_time]\n  limits: {{ max_cost_usd: 1 }}\ntasks:\n  - id: t\n    prompt: go\n    sim:\n      turns:\n        - {{ content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ]{flag} }}\n        - {{ content: [ {{ text: done }} ], usage: {{ output_tokens: 100000, reasoning_tokens: 100000 }}{flag} }}\n",
                    long_system()
                )
            };
            let at = format!("{protocol} {ttl} stream {stream}");
            let (c1, c2) = (Case::new(), Case::new());
            let plain = c1.run(&run(false)).await;
            let odd = c2.run(&run(true)).await;
            let (a, b) = (plain.row("t"), odd.row("t"));
            for col in [
                "stop_reason",
                "turns",
                "cost_usd",
                "cache_saved_usd",
                "input_tokens",
                "output_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "reasoning_tokens",
                "retries",
            ] {
                assert_eq!(a[col], b[col], "{at}: {col}");
            }
            assert!(plain.events("t", "usage_clamped").is_empty(), "{at}");
            assert_eq!(odd.events("t", "usage_clamped").len(), 2, "{at}");
            assert!(odd.events("t", "reservation_exceeded").is_empty(), "{at}");
        }
    }
}
