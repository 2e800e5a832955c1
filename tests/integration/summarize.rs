//! Summarizing over real HTTP: when the prompt nears the window the model is asked for
//! a summary (a turn of its own, billed like any other), which replaces the older turns
//! in what it is sent; the simulator answers summary requests and keeps checking every
//! replayed turn across the shortened history, so a misplaced turn is a 400.

use agentbatch::audit::audit_file;

use crate::common::{num, transcript_money, Case, Ran};
use crate::context::{folder, job, results_sent};

/// A summary request ends with the runner's instruction.
fn is_summary_request(body: &serde_json::Value) -> bool {
    body.to_string()
        .contains("will be replaced by your summary")
}

fn audit_clean(ran: &Ran, what: &str) {
    let r = audit_file(&ran.dir.join("transcripts/t.jsonl")).expect("transcript reads");
    assert_eq!(r.violations(), 0, "{what}: {:?}", r.problems);
    assert!(
        r.problems
            .iter()
            .all(|p| p.kind != agentbatch::audit::ProblemKind::Compaction),
        "{what}: {:?}",
        r.problems
    );
}

#[tokio::test]
async fn every_protocol_summarizes_under_a_small_window_and_replays_what_it_kept() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let case = Case::new();
        folder(&case);
        let yaml = job(
            protocol,
            model,
            40,
            "{ window: 12000, strategy: summarize, keep: 2 }",
            "      context_window: 12000\n",
        )
        .replace("max_turns: 40,", "max_turns: 80,");
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        let summaries = ran.events("t", "compaction");
        assert!(summaries.len() >= 2, "{protocol}: {row:?}");
        assert!(summaries.iter().all(|e| e["strategy"] == "summarize"
            && e["tokens_after"].as_u64() < e["tokens_before"].as_u64()));
        // Each summary is a turn of its own: 40 scripted turns and one per summary.
        assert_eq!(
            num(&row, "turns") as usize,
            40 + summaries.len(),
            "{protocol}"
        );
        assert_eq!(num(&row, "compactions") as usize, summaries.len());
        let requests = ran.requests("t");
        assert!(
            requests.iter().all(|r| r.status == 200),
            "{protocol}: every request fits and every kept turn replays as it was sent: {:?}",
            requests.iter().find(|r| r.status != 200).map(|r| &r.error)
        );
        let asked: Vec<_> = requests
            .iter()
            .filter(|r| is_summary_request(&r.body))
            .collect();
        assert_eq!(asked.len(), summaries.len(), "{protocol}");
        // After a summary the model is sent the summary and the two newest turns, not
        // the history it summarized.
        let after = requests
            .iter()
            .skip_while(|r| !is_summary_request(&r.body))
            .nth(1)
            .expect("a request after the first summary");
        let text = after.body.to_string();
        assert!(
            text.contains("was replaced by the summary below"),
            "{protocol}"
        );
        assert!(
            text.contains("agentbatch-sim summary: steps="),
            "{protocol}"
        );
        // The two kept turns' results and the pending one, at about 2.3 KB each.
        assert!(text.len() < 3 * 2400 + 4000, "{protocol}: {}", text.len());
        // The transcript keeps every original result, and the summaries are billed.
        let kept = results_sent(&ran);
        assert_eq!(kept.len(), 39, "{protocol}");
        assert!(kept.iter().all(|c| c.contains("def total(xs)")));
        let billed = transcript_money(&ran.transcript("t"));
        assert_eq!(
            row["cost_usd"].parse::<rust_decimal::Decimal>().ok(),
            Some(billed),
            "{protocol}"
        );
        audit_clean(&ran, protocol);
    }
}

#[tokio::test]
async fn the_default_clears_first_and_summarizes_when_clearing_is_not_enough() {
    let case = Case::new();
    folder(&case);
    // Clearing alone keeps the prompt small: no summary is asked for.
    let ran = case
        .run(&job(
            "anthropic",
            "claude-sonnet-4-5",
            40,
            "{ window: 12000, keep: 2 }",
            "      context_window: 12000\n",
        ))
        .await;
    let strategies: Vec<String> = ran
        .events("t", "compaction")
        .iter()
        .map(|e| e["strategy"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(ran.stop("t"), "completed");
    assert!(
        !strategies.is_empty() && strategies.iter().all(|s| s == "clear_tool_results"),
        "{strategies:?}"
    );
    // Results of an exempt tool cannot be cleared: the loop escalates to a summary.
    let case = Case::new();
    folder(&case);
    let yaml = job(
        "openai-responses",
        "gpt-5.4",
        40,
        "{ window: 12000, keep: 2, exempt: [read_file] }",
        "      context_window: 12000\n",
    )
    .replace("max_turns: 40,", "max_turns: 80,");
    let ran = case.run(&yaml).await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let strategies: Vec<String> = ran
        .events("t", "compaction")
        .iter()
        .map(|e| e["strategy"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        strategies.iter().any(|s| s == "summarize"),
        "{strategies:?}"
    );
    assert!(ran.requests("t").iter().all(|r| r.status == 200));
    audit_clean(&ran, "auto");
}

#[tokio::test]
async fn a_server_that_refuses_a_long_prompt_gets_a_summarized_one() {
    // The job does not know the window (the model's is 200k); the server's is smaller,
    // so the first sign is a refusal, and the summary request is sent cleared.
    let case = Case::new();
    folder(&case);
    let yaml = job(
        "anthropic",
        "claude-sonnet-4-5",
        30,
        "{ strategy: summarize, keep: 2 }",
        "      context_window: 12000\n",
    )
    .replace("max_turns: 30,", "max_turns: 80,");
    let ran = case.run(&yaml).await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let requests = ran.requests("t");
    let refused = requests.iter().filter(|r| r.status == 400).count();
    assert!(refused >= 1);
    // Each refusal clears old tool results (in the history, so that the turns the
    // summary keeps go out as the summary request sent them) and asks for a summary.
    let compactions = ran.events("t", "compaction");
    let summaries: Vec<_> = compactions
        .iter()
        .filter(|e| e["strategy"] == "summarize")
        .collect();
    assert!(compactions
        .iter()
        .all(|e| e["strategy"] == "summarize" || e["strategy"] == "clear_tool_results"));
    assert_eq!(summaries.len(), refused, "one summary per refusal");
    assert!(requests
        .iter()
        .filter(|r| is_summary_request(&r.body))
        .all(|r| r.status == 200));
    audit_clean(&ran, "refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_turns_complete_under_a_200k_window_summarized_or_edited_on_the_server() {
    for strategy in ["summarize", "native"] {
        let case = Case::new();
        folder(&case);
        let yaml = job(
            "anthropic",
            "claude-sonnet-4-5",
            300,
            &format!("{{ window: 200000, strategy: {strategy} }}"),
            "      context_window: 200000\n",
        )
        .replace("max_turns: 300,", "max_turns: 320,");
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{strategy}: {row:?}");
        let compactions = ran.events("t", "compaction");
        assert!(!compactions.is_empty(), "{strategy}: {row:?}");
        assert!(compactions.iter().all(|e| e["strategy"] == strategy));
        let summaries = if strategy == "summarize" {
            compactions.len()
        } else {
            0
        };
        assert_eq!(num(&row, "turns") as usize, 300 + summaries, "{strategy}");
        assert!(
            ran.requests("t").iter().all(|r| r.status == 200),
            "{strategy}"
        );
        let kept = results_sent(&ran);
        assert_eq!(kept.len(), 299, "{strategy}");
        assert!(kept.iter().all(|c| c.contains("def total(xs)")));
        audit_clean(&ran, strategy);
    }
}

#[tokio::test]
async fn a_cost_cap_holds_across_summaries_which_it_pays_for() {
    let case = Case::new();
    folder(&case);
    let yaml = job(
        "anthropic",
        "claude-sonnet-4-5",
        40,
        "{ window: 12000, strategy: summarize, keep: 2 }",
        "      context_window: 12000\n",
    )
    .replace("max_turns: 40,", "max_turns: 80, max_cost_usd: 0.12,");
    let ran = case.run(&yaml).await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "cost_limit", "{row:?}");
    assert!(!ran.events("t", "compaction").is_empty(), "{row:?}");
    let price = agentbatch::vocab::price::lookup(&Default::default(), "claude-sonnet-4-5")
        .expect("a built-in price");
    let billed: rust_decimal::Decimal = crate::limits::sim_usage(&ran, "t")
        .iter()
        .map(|u| price.cost(u))
        .sum();
    let cap = rust_decimal::Decimal::new(12, 2);
    assert!(billed <= cap, "billed {billed} > cap {cap}");
    assert_eq!(
        row["cost_usd"].parse::<rust_decimal::Decimal>().ok(),
        Some(billed)
    );
    // The summary requests were reserved like any other.
    let summaries = ran
        .requests("t")
        .iter()
        .filter(|r| is_summary_request(&r.body))
        .count();
    assert!(summaries >= 1);
    assert_eq!(ran.events("t", "reserve").len(), ran.requests("t").len());
}

#[tokio::test]
async fn streamed_and_whole_summaries_leave_the_same_histories() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let mut histories = Vec::new();
        for stream in ["never", "always"] {
            let case = Case::new();
            folder(&case);
            let yaml = job(
                protocol,
                model,
                30,
                "{ window: 12000, strategy: summarize, keep: 2 }",
                "      context_window: 12000\n",
            )
            .replace("max_turns: 30,", "max_turns: 60,")
            .replace(
                "  keep_workspaces: never\n",
                &format!("  keep_workspaces: never\n  stream: {stream}\n"),
            );
            let ran = case.run(&yaml).await;
            assert_eq!(ran.stop("t"), "completed", "{protocol} {stream}");
            let field = if protocol == "openai-responses" {
                "input"
            } else {
                "messages"
            };
            let sent: Vec<serde_json::Value> = ran
                .requests("t")
                .iter()
                .map(|r| r.body[field].clone())
                .collect();
            assert!(sent
                .iter()
                .any(|h| h.to_string().contains("agentbatch-sim summary")));
            histories.push(sent);
        }
        assert_eq!(histories[0], histories[1], "{protocol}");
    }
}

/// The summarize job with the simulator's answer to summary requests scripted.
fn scripted_summary(summary: &str) -> String {
    job(
        "anthropic",
        "claude-sonnet-4-5",
        40,
        "{ window: 12000, strategy: summarize, keep: 2 }",
        &format!("      context_window: 12000\n      summary: {summary}\n"),
    )
    .replace("max_turns: 40,", "max_turns: 80,")
}

#[tokio::test]
async fn an_erratic_summarizer_is_retried_ignored_or_stops_the_task() {
    // A summary request that fails once is retried and billed like any request.
    let case = Case::new();
    folder(&case);
    let ran = case
        .run(&scripted_summary(
            "{ content: [ { text: \"what I did\" } ], faults: [ { status: 529 } ] }",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert!(num(&row, "retries") >= 1, "{row:?}");
    assert!(ran
        .requests("t")
        .iter()
        .any(|r| r.status == 529 && is_summary_request(&r.body)));
    audit_clean(&ran, "retried");

    // Calls beside the summary are not run; the summary is used.
    let case = Case::new();
    folder(&case);
    let ran = case
        .run(&scripted_summary(
            "{ content: [ { text: \"what I did\" }, { tool_use: { name: read_file, input: { path: module.py } } } ] }",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(
        results_sent(&ran).len(),
        39,
        "no result for the summary's call"
    );
    let after = ran
        .requests("t")
        .iter()
        .skip_while(|r| !is_summary_request(&r.body))
        .nth(1)
        .map(|r| r.body.to_string())
        .unwrap_or_default();
    assert!(after.contains("what I did"));
    let r = audit_file(&ran.dir.join("transcripts/t.jsonl")).expect("transcript reads");
    assert_eq!(r.violations(), 0, "{:?}", r.problems);
    assert!(
        r.problems
            .iter()
            .all(|p| p.message.contains("answer to a summary request")),
        "{:?}",
        r.problems
    );
    assert!(!r.problems.is_empty());

    // A summary without text cannot replace anything: the task stops, saying why.
    let case = Case::new();
    folder(&case);
    let ran = case
        .run(&scripted_summary(
            "{ content: [ { tool_use: { name: read_file, input: { path: module.py } } } ] }",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "context_window", "{row:?}");
    assert!(row["stop_detail"].contains("without text"), "{row:?}");
}

#[tokio::test]
async fn a_summary_that_leaves_the_prompt_over_the_threshold_is_not_asked_for_again() {
    // A prompt of about 5,500 tokens with the tools, under the threshold of 5,776
    // (85% of 8,000, less max_tokens); each turn adds about 600. The model's summaries
    // are long (about 700 tokens, whole): first message and summary are over the
    // threshold together, though they fit the window.
    for strategy in ["summarize", "auto"] {
        let case = Case::new();
        folder(&case);
        let summary = "I read module.py again and again. ".repeat(82);
        let yaml = job(
            "anthropic",
            "claude-sonnet-4-5",
            40,
            &format!("{{ window: 8000, strategy: {strategy}, keep: 2 }}"),
            &format!("      summary: {{ content: [ {{ text: \"{summary}\" }} ] }}\n"),
        )
        .replace("max_turns: 40,", "max_turns: 80,")
        .replace(
            "prompt: fix it",
            &format!(
                "prompt: {}",
                "Fix the total function so that blank cells are skipped. ".repeat(340)
            ),
        );
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "context_window", "{strategy}: {row:?}");
        let asked = ran
            .requests("t")
            .iter()
            .filter(|r| is_summary_request(&r.body))
            .count();
        assert_eq!(asked, 1, "{strategy}: {row:?}");
        assert!(
            row["stop_detail"].contains("8000-token context window")
                && row["stop_detail"].contains("over the compaction threshold of 5776"),
            "{strategy}: {row:?}"
        );
        for r in ran.requests("t").iter().skip(1) {
            let (prompt, max) = crate::context::sim_tokens(&r.body);
            assert!(prompt + max <= 8000, "{strategy}: {prompt} + {max}");
        }
        // The audit says the summary did not help.
        let r = audit_file(&ran.dir.join("transcripts/t.jsonl")).expect("transcript reads");
        assert_eq!(r.violations(), 0, "{strategy}: {:?}", r.problems);
        assert!(
            r.problems
                .iter()
                .any(|p| p.kind == agentbatch::audit::ProblemKind::Compaction
                    && p.message.contains("over the compaction threshold")),
            "{strategy}: {:?}",
            r.problems
        );
    }
}

#[tokio::test]
async fn a_summary_answer_is_judged_by_its_stop_reason_like_any_answer() {
    // (protocol, model, how the summary answer ends, the stop it gives)
    let cases = [
        (
            "anthropic",
            "claude-sonnet-4-5",
            "stop_reason: refusal",
            "refusal",
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            "stop_reason: banana",
            "provider_error",
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            "stop_reason: max_tokens",
            "model_max_tokens",
        ),
        (
            "anthropic",
            "claude-sonnet-4-5",
            "stop_reason: pause_turn",
            "context_window",
        ),
        (
            "openai-responses",
            "gpt-5.4",
            "status: incomplete, incomplete_reason: max_output_tokens",
            "model_max_tokens",
        ),
        (
            "openai-responses",
            "gpt-5.4",
            "status: incomplete, incomplete_reason: banana",
            "provider_error",
        ),
        (
            "openai-responses",
            "gpt-5.4",
            "status: incomplete, incomplete_reason: content_filter",
            "refusal",
        ),
        (
            "openai-responses",
            "gpt-5.4",
            "status: weird",
            "provider_error",
        ),
        (
            "openai-responses",
            "gpt-5.4",
            "stop_reason: refusal",
            "refusal",
        ),
        (
            "openai-chat",
            "gpt-5.4",
            "finish_reason: length",
            "model_max_tokens",
        ),
        (
            "openai-chat",
            "gpt-5.4",
            "finish_reason: content_filter",
            "refusal",
        ),
        (
            "openai-chat",
            "gpt-5.4",
            "finish_reason: banana",
            "provider_error",
        ),
        (
            "openai-chat",
            "gpt-5.4",
            "finish_reason: \"null\"",
            "provider_error",
        ),
    ];
    for (protocol, model, ending, expected) in cases {
        let case = Case::new();
        folder(&case);
        let yaml = job(
            protocol,
            model,
            40,
            "{ window: 12000, strategy: summarize, keep: 2 }",
            &format!(
                "      context_window: 12000\n      summary: {{ content: [ {{ text: \"what I did\" }} ], {ending} }}\n"
            ),
        )
        .replace("max_turns: 40,", "max_turns: 80,");
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        let what = format!("{protocol} {ending}");
        assert_eq!(row["stop_reason"], expected, "{what}: {row:?}");
        assert!(row["stop_detail"].contains("summary"), "{what}: {row:?}");
        // The answer never replaced the history: no summary was recorded, and no
        // request after it carries its text.
        assert!(
            ran.events("t", "compaction")
                .iter()
                .all(|e| e["strategy"] != "summarize"),
            "{what}"
        );
        let requests = ran.requests("t");
        let asked = requests
            .iter()
            .position(|r| is_summary_request(&r.body))
            .expect("a summary request");
        assert_eq!(
            asked + 1,
            requests.len(),
            "{what}: nothing is sent after it"
        );
    }
}

/// A summary request too large to send whole goes with its old tool results cleared,
/// and the history is cleared alike first (which may be enough: then no summary is
/// asked for): the prompt after a summary is bounded by the summary request's. Before,
/// only the request was cleared, and the turns it kept went out with the results it had
/// cleared (a 24 KB one here, the oldest of a turn's three), far above the runner's
/// bound and past the window (found by the chaos sweep, seed 1354).
#[tokio::test]
async fn the_turns_a_cleared_summary_request_keeps_go_out_as_it_sent_them() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let case = Case::new();
        folder(&case);
        case.write("repo/big.py", &"# padding, padding, padding\n".repeat(880));
        let read = |path: &str| {
            format!("{{ tool_use: {{ name: read_file, input: {{ path: {path} }} }} }}")
        };
        let one = format!("        - content: [ {} ]\n", read("module.py"));
        let script = format!(
            "{one}{one}        - content: [ {}, {}, {} ]\n{one}{one}        - content: [ {{ text: done }} ]\n",
            read("big.py"),
            read("module.py"),
            read("module.py")
        );
        let yaml = format!(
            "name: ctx\nproviders:\n  p: {{ protocol: {protocol}, simulator: true }}\ndefaults:\n  provider: p\n  model: {model}\n  max_tokens: 1024\n  toolset: coding\n  repo: repo\n  keep_workspaces: never\n  context: {{ window: 8000, strategy: summarize, keep: 2 }}\n  limits: {{ max_turns: 12, max_repeats: off, time_limit: 10m }}\ntasks:\n  - id: t\n    prompt: fix it\n    sim:\n      context_window: 16000\n      turns:\n{script}"
        );
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        assert!(num(&row, "compactions") >= 1, "{protocol}: {row:?}");
        for r in ran.requests("t").iter().skip(1) {
            let (prompt, max) = crate::context::sim_tokens(&r.body);
            assert!(
                prompt + max <= 8000,
                "{protocol}: a request of {prompt} + {max} tokens went out for an 8000-token window: {row:?}"
            );
        }
        assert!(
            ran.events("t", "usage_clamped").is_empty(),
            "{protocol}: the simulator counted more than the runner's bound: {:?}",
            ran.events("t", "usage_clamped")
        );
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        audit_clean(&ran, protocol);
    }
}
