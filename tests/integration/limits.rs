//! Every stop reason a limit or the model can cause, and no limit overshot even by one
//! request (checked against what the simulator itself saw and billed).

use std::str::FromStr;
use std::time::Duration;

use agentbatch::model::Usage;
use agentbatch::tools::ToolError;
use agentbatch::tools::{Registry, Tool, ToolContext};
use agentbatch::vocab::price;
use futures::future::BoxFuture;
use rust_decimal::Decimal;
use serde_json::{json, Value};

use crate::common::{job, num, Case};

/// Calls get_time forever. Its result is to the second, so a loop longer than
/// `max_repeats` turns within one second is `stuck`: the tests that need more turns
/// turn the check off.
const TOOL_LOOP: &str = "      repeat_last: true\n      turns:\n        - content: [ { text: \"again\" }, { tool_use: { name: get_time, input: {} } } ]\n";

/// What the simulator reported as usage, per answered request.
pub(crate) fn sim_usage(ran: &crate::common::Ran, task: &str) -> Vec<Usage> {
    ran.requests(task)
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.response.as_ref())
        .map(|m| {
            let u = &m["usage"];
            Usage {
                input_tokens: u["input_tokens"].as_u64().unwrap(),
                output_tokens: u["output_tokens"].as_u64().unwrap(),
                cache_read_tokens: u["cache_read_input_tokens"].as_u64().unwrap(),
                cache_write_tokens: u["cache_creation_input_tokens"].as_u64().unwrap(),
                ..Default::default()
            }
        })
        .collect()
}

#[tokio::test]
async fn completed_with_a_tool_round_trip() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            "  - id: t\n    prompt: What time is it?\n    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, input: { timezone: UTC } } } ]\n        - content: [ { text: \"It is {{tool_result}}.\" } ]\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed");
    assert_eq!(row["outcome"], "unchecked");
    assert_eq!(num(&row, "turns"), 2);
    assert_eq!(num(&row, "tool_calls"), 1);
    assert_eq!(num(&row, "tool_errors"), 0);
    let last = ran.requests("t").pop().unwrap().response.unwrap();
    let text = last["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("It is 20") && text.ends_with("Z."),
        "{text}"
    );
}

#[tokio::test]
async fn max_turns_sends_exactly_that_many_requests() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { max_turns: 3 }\n",
            &format!("  - id: t\n    prompt: loop\n    sim:\n{TOOL_LOOP}"),
        ))
        .await;
    assert_eq!(ran.stop("t"), "max_turns");
    assert_eq!(ran.requests("t").len(), 3);
    assert_eq!(num(&ran.row("t"), "turns"), 3);
    assert_eq!(num(&ran.row("t"), "tool_calls"), 3);
}

#[tokio::test]
async fn output_token_budget_shrinks_requests_and_is_never_exceeded() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { max_output_tokens: 2500, min_max_tokens: 800 }\n",
            "  - id: t\n    prompt: loop\n    sim:\n      repeat_last: true\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n          usage: { output_tokens: 900 }\n  - id: shrunk\n    prompt: loop\n    limits: { min_max_tokens: 100 }\n    sim:\n      repeat_last: true\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n          usage: { output_tokens: 900 }\n",
        ))
        .await;
    // 900 + 900 used, 700 left is below the 800-token minimum request: stop.
    assert_eq!(ran.stop("t"), "token_limit");
    let sent: Vec<u64> = ran
        .requests("t")
        .iter()
        .map(|r| r.body["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(sent, vec![1024, 1024]);
    let used: u64 = sim_usage(&ran, "t").iter().map(|u| u.output_tokens).sum();
    assert!(used <= 2500, "{used}");
    assert_eq!(num(&ran.row("t"), "output_tokens"), used);
    // With a lower floor the third request goes out shrunk to 700 and the model runs
    // into it: all 2500 tokens used, none more.
    let sent: Vec<u64> = ran
        .requests("shrunk")
        .iter()
        .map(|r| r.body["max_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(sent, vec![1024, 1024, 700]);
    assert_eq!(ran.stop("shrunk"), "model_max_tokens");
    assert_eq!(num(&ran.row("shrunk"), "output_tokens"), 2500);
}

#[tokio::test]
async fn input_token_budget_is_checked_before_each_request() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { max_input_tokens: 6000, max_repeats: off }\n",
            &format!("  - id: t\n    prompt: loop\n    sim:\n{TOOL_LOOP}"),
        ))
        .await;
    assert_eq!(ran.stop("t"), "token_limit");
    let prompt: u64 = sim_usage(&ran, "t").iter().map(|u| u.prompt_tokens()).sum();
    assert!(prompt <= 6000, "{prompt}");
    assert!(
        ran.requests("t").len() >= 2,
        "the budget allows a few requests"
    );
}

#[tokio::test]
async fn cost_cap_is_never_exceeded_by_what_the_provider_billed() {
    let case = Case::new();
    // A pricey model: every request costs cents, so the cap is reached in a few turns.
    let ran = case
        .run(&job(
            "  model: pricey\n  limits: { max_cost_usd: 0.25, max_repeats: off }\n",
            &[("t", "1024"), ("shrinking", "64")]
                .iter()
                .map(|(id, floor)| format!("  - id: {id}\n    prompt: loop\n    limits: {{ min_max_tokens: {floor} }}\n    sim:\n      repeat_last: true\n      turns:\n        - content: [ {{ text: \"spending\" }}, {{ tool_use: {{ name: get_time, input: {{}} }} }} ]\n          usage: {{ output_tokens: 800 }}\n"))
                .collect::<String>(),
        )
        .replace("tasks:\n", "pricing:\n  pricey: { input: 30, output: 60 }\ntasks:\n"))
        .await;
    // "t" wants whole requests: it stops when one no longer fits. "shrinking" accepts
    // small ones, until the model runs into a shrunk max_tokens or nothing fits.
    assert_eq!(ran.stop("t"), "cost_limit");
    assert!(["cost_limit", "model_max_tokens"].contains(&ran.stop("shrinking").as_str()));
    let price = price::lookup(
        &[(
            "pricey".to_string(),
            serde_yaml::from_str("{input: 30, output: 60}").unwrap(),
        )]
        .into_iter()
        .collect(),
        "pricey",
    )
    .unwrap();
    let cap = Decimal::from_str("0.25").unwrap();
    for task in ["t", "shrinking"] {
        let billed: Decimal = sim_usage(&ran, task).iter().map(|u| price.cost(u)).sum();
        assert!(billed <= cap, "{task}: billed {billed} > cap {cap}");
        assert_eq!(
            Decimal::from_str(&ran.row(task)["cost_usd"]).unwrap(),
            billed
        );
        assert!(ran.requests(task).len() >= 3);
        // every request's worst case fitted in what was left
        for e in ran.events(task, "reserve") {
            let reserved = Decimal::from_str(e["reserved_usd"].as_str().unwrap()).unwrap();
            let spent = Decimal::from_str(e["spent_usd"].as_str().unwrap()).unwrap();
            assert!(spent + reserved <= cap, "{e}");
        }
    }
}

#[tokio::test]
async fn model_max_tokens_never_runs_a_truncated_call() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: long }, { tool_use: { name: get_time, input: {} } } ]\n          usage: { output_tokens: 5000 }\n",
        ))
        .await;
    assert_eq!(ran.stop("t"), "model_max_tokens");
    assert_eq!(num(&ran.row("t"), "tool_calls"), 0);
    assert!(ran.events("t", "tool_call").is_empty());
    assert_eq!(num(&ran.row("t"), "output_tokens"), 1024);
}

#[tokio::test]
async fn refusal_and_context_window_stop_with_their_own_reasons() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "",
            "  - id: refuses\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: no } ]\n          stop_reason: refusal\n          stop_details: { type: refusal, category: cyber, explanation: nope }\n  - id: full\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: \"...\" } ]\n          stop_reason: model_context_window_exceeded\n  - id: stopseq\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: \"done\" } ]\n          stop_reason: stop_sequence\n          stop_sequence: END\n",
        ))
        .await;
    assert_eq!(ran.stop("refuses"), "refusal");
    assert_eq!(ran.row("refuses")["stop_detail"], "cyber: nope");
    assert_eq!(ran.stop("full"), "context_window");
    assert_eq!(ran.stop("stopseq"), "completed");
}

#[tokio::test]
async fn time_limit_aborts_the_request_in_flight_and_charges_its_reservation() {
    let case = Case::new();
    let started = std::time::Instant::now();
    let ran = case
        .run(&job(
            "  limits: { time_limit: 500ms, max_cost_usd: 1 }\n",
            "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: late } ]\n          latency: 10s\n",
        ))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the request was not aborted"
    );
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "time_limit");
    assert!(
        row["stop_detail"].contains("during a model request"),
        "{}",
        row["stop_detail"]
    );
    let reserved = ran.events("t", "reserve")[0]["reserved_usd"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(row["cost_usd"], reserved);
}

#[tokio::test]
async fn slow_bodies_count_against_the_time_limit_too() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { time_limit: 500ms }\n",
            "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: late } ]\n          body_delay: 10s\n",
        ))
        .await;
    assert_eq!(ran.stop("t"), "time_limit");
}

struct Sleepy;
impl Tool for Sleepy {
    fn name(&self) -> &str {
        "sleepy"
    }
    fn description(&self) -> &str {
        "Sleeps for a long time."
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn call<'a>(
        &'a self,
        _: Value,
        _: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok("woke".into())
        })
    }
}

#[tokio::test]
async fn time_limit_covers_tool_runs() {
    let case = Case::new();
    let mut registry = Registry::builtin();
    registry.register(std::sync::Arc::new(Sleepy)).unwrap();
    let started = std::time::Instant::now();
    let ran = case
        .run_with(
            &job(
                "  tools: [sleepy]\n  limits: { time_limit: 700ms }\n",
                "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ { tool_use: { name: sleepy, input: {} } } ]\n        - content: [ { text: never } ]\n",
            ),
            registry,
        )
        .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "time_limit");
    assert!(
        row["stop_detail"].contains("while tool \"sleepy\" was running"),
        "{}",
        row["stop_detail"]
    );
    assert!(num(&row, "tool_ms") >= 500, "{row:?}");
    assert_eq!(ran.requests("t").len(), 1);
}

#[tokio::test]
async fn a_possibly_billed_failure_uses_up_its_token_bound_before_the_retry() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  max_tokens: 1000\n  limits: { max_output_tokens: 1500, min_max_tokens: 100 }\n",
            "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - faults: [ { disconnect: true } ]\n          content: [ { text: ok } ]\n",
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let sent: Vec<u64> = ran
        .requests("t")
        .iter()
        .map(|r| r.body["max_tokens"].as_u64().unwrap())
        .collect();
    // the cut-off attempt may have produced up to 1000 tokens: the retry gets the rest
    assert_eq!(sent, vec![1000, 500]);
    assert_eq!(num(&ran.row("t"), "retries"), 1);
}

/// A provider that reports more prompt tokens than the request had bytes (which no
/// tokenizer counts) is billed at the request's bound, not at its figure: trusting it
/// would charge the task, its team's day and the run for tokens that were never sent.
/// The figure it sent is recorded beside the one used.
#[tokio::test]
async fn a_provider_reporting_more_than_the_bound_is_billed_at_the_bound_and_recorded() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { max_cost_usd: 0.10, max_repeats: off, max_turns: 8 }\n",
            "  - id: t\n    prompt: p\n    sim:\n      repeat_last: true\n      turns:\n        - content: [ { tool_use: { name: get_time, input: {} } } ]\n          usage: { input_tokens: 40000 }\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "max_turns", "{row:?}");
    assert!(ran.events("t", "reservation_exceeded").is_empty());
    let reserves = ran.events("t", "reserve");
    let clamped = ran.events("t", "usage_clamped");
    assert_eq!(clamped.len(), 8, "one record per answer");
    for (r, c) in reserves.iter().zip(&clamped) {
        let bound = r["prompt_tokens_upper_bound"].as_u64().unwrap();
        assert_eq!(c["clamps"][0]["field"], "input_tokens", "{c}");
        assert_eq!(c["clamps"][0]["reported"], 40000, "{c}");
        assert_eq!(c["clamps"][0]["used"], bound, "{c}");
    }
    // Eight answers at 40,000 tokens ($0.12 each) would be $0.96; at their bounds
    // they stay under the cap.
    let spent: rust_decimal::Decimal = row["cost_usd"].parse().unwrap();
    assert!(spent <= rust_decimal::Decimal::new(10, 2), "{spent}");
}

#[tokio::test]
async fn runs_sharing_a_simulator_each_get_their_own_conversation_state() {
    use agentbatch::job;
    use agentbatch::report::ProgressMode;
    use agentbatch::run::{self, RunOptions};
    let case = Case::new();
    let path = case.write(
        "job.yaml",
        &job("", "  - id: t\n    prompt: p\n    sim:\n      turns:\n        - faults: [ { status: 529 } ]\n          content: [ { text: ok } ]\n"),
    );
    let sim = std::sync::Arc::new(agentbatch::sim::Sim::start_local().await.unwrap());
    for id in ["first", "second"] {
        let plan = job::load(&path, &Registry::builtin()).unwrap();
        let mut opts = RunOptions::new(case.path("reports"));
        opts.run_id = Some(id.into());
        opts.progress = ProgressMode::Quiet;
        opts.sim = Some(sim.clone());
        run::run(plan, opts).await.unwrap();
        let rows = crate::common::read_csv(&case.path(&format!("reports/{id}/results.csv")));
        assert_eq!(
            rows[0]["retries"], "1",
            "{id}: the fault is played in every run"
        );
    }
    assert!(sim
        .requests()
        .iter()
        .all(|r| r.run == "first" || r.run == "second"));
}

/// Built-in long-context tiers, with no `pricing:` in the job: a request whose prompt
/// crosses the model's threshold is reserved at the tier's worst case and settled at
/// its rates, one below it at the base rates, over real HTTP for GPT-5.4 (above 272k
/// prompt tokens, Responses API) and Claude Haiku 5.5 (above 100k, Messages API). The
/// expected figures are worked out here from the published rates in prices.yaml:
/// GPT-5.4 $2.50 in / $15 out, above 272k $5 / $22.50 (cached input and cache writes
/// at most the input rate); Haiku 5.5 $0.10 in / $0.50 out (cache writes $0.125), above
/// 100k $0.50 / $2.50 (cache writes $0.625).
#[tokio::test]
async fn a_prompt_past_a_built_in_threshold_is_reserved_and_settled_at_the_long_context_rates() {
    let case = Case::new();
    // Prompts of about 290,000 and 120,000 bytes: their token bounds (bytes) are past
    // the thresholds, and the simulator reports counts past them too (within the bounds).
    let long = |bytes: usize| "lorem ".repeat(bytes / 6);
    let task = |id: &str, provider: &str, model: &str, prompt: &str, input: u64| {
        format!(
            "  - id: {id}\n    provider: {provider}\n    model: {model}\n    prompt: \"{prompt}\"\n    sim:\n      turns:\n        - content: [ {{ text: done }} ]\n          usage: {{ input_tokens: {input}, output_tokens: 100 }}\n"
        )
    };
    let yaml = format!(
        "name: tiers\nconcurrency: 4\nproviders:\n  oai: {{ protocol: openai-responses, simulator: true }}\nteams:\n  lc: {{ max_cost_usd: 10 }}\ndefaults:\n  team: lc\n  max_tokens: 1000\n  cache: {{ mode: off }}\n  stream: never\ntasks:\n{}{}{}{}",
        task("gpt_long", "oai", "gpt-5.4", &long(290_000), 280_000),
        task("gpt_short", "oai", "gpt-5.4", "go", 50),
        task("haiku_long", "sim", "claude-haiku-5-5", &long(120_000), 110_000),
        task("haiku_short", "sim", "claude-haiku-5-5", "go", 50),
    );
    assert!(!yaml.contains("pricing"));
    let ran = case.run(&yaml).await;
    let usd = |v: &Value| Decimal::from_str(v.as_str().unwrap()).unwrap();
    let per_million = |tokens: u64, rate: &str| {
        Decimal::from(tokens) * Decimal::from_str(rate).unwrap() / Decimal::from(1_000_000)
    };
    // (task, threshold, whether its prompt is past it, [worst input and output rates,
    // billed input and output rates])
    let cases = [
        (
            "gpt_long",
            272_000,
            true,
            ["5.00", "22.50", "5.00", "22.50"],
        ),
        (
            "gpt_short",
            272_000,
            false,
            ["2.50", "15.00", "2.50", "15.00"],
        ),
        (
            "haiku_long",
            100_000,
            true,
            ["0.625", "2.50", "0.50", "2.50"],
        ),
        (
            "haiku_short",
            100_000,
            false,
            ["0.125", "0.50", "0.10", "0.50"],
        ),
    ];
    for (id, threshold, past, [worst_in, worst_out, rate_in, rate_out]) in cases {
        let row = ran.row(id);
        assert_eq!(row["stop_reason"], "completed", "{row:?}");
        let reserve = ran.events(id, "reserve").pop().expect("a reserve");
        let bound = reserve["prompt_tokens_upper_bound"].as_u64().unwrap();
        let max_tokens = reserve["max_tokens"].as_u64().unwrap();
        assert_eq!(bound > threshold, past, "{id}: {reserve}");
        assert_eq!(
            usd(&reserve["reserved_usd"]),
            per_million(bound, worst_in) + per_million(max_tokens, worst_out),
            "{id}: the worst case at the tier's rates: {reserve}"
        );
        // What the simulator reported, as it reported it.
        let sent = ran.requests(id);
        assert_eq!(sent.len(), 1, "{id}");
        let usage = &sent[0].response.as_ref().expect("an answer")["usage"];
        let input = usage["input_tokens"].as_u64().unwrap();
        let output = usage["output_tokens"].as_u64().unwrap();
        assert_eq!((input > threshold, output), (past, 100), "{id}: {usage}");
        let want = per_million(input, rate_in) + per_million(output, rate_out);
        assert_eq!(
            row["cost_usd"].parse::<Decimal>().unwrap(),
            want,
            "{id}: {row:?}"
        );
        let settle = ran.events(id, "settle").pop().expect("a settle");
        assert_eq!(usd(&settle["cost_usd"]), want, "{id}: {settle}");
        assert!(
            ran.events(id, "reservation_exceeded").is_empty()
                && ran.events(id, "usage_clamped").is_empty(),
            "{id}: the figures were within the bounds"
        );
    }
    // By hand: 280,000 x $5 + 100 x $22.50 per million, not $0.7015 at the base rates.
    assert_eq!(ran.row("gpt_long")["cost_usd"], "1.40225");
}
