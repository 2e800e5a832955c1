//! Context windows over real HTTP: a long task whose history outgrows the window keeps
//! going by clearing old tool results in what the model is sent (the transcript keeps
//! every original), the simulator refuses a prompt longer than the window as the APIs
//! do, and a task that cannot be made to fit stops `context_window`.

use serde_json::Value;

use crate::common::{num, Case, Ran};

/// A 2 KB file at the root of a plain folder, read on every turn.
pub(crate) fn folder(case: &Case) {
    let line = "def total(xs):\n    return sum(x for x in xs if x is not None)  # blank cells\n";
    let text = line.repeat(2048 / line.len() + 1);
    case.write("repo/module.py", &text[..2048]);
}

/// `turns` turns reading the file, then an answer; `protocol` on the simulator.
pub(crate) fn job(
    protocol: &str,
    model: &str,
    turns: usize,
    context: &str,
    sim_window: &str,
) -> String {
    let mut script = String::new();
    for _ in 0..turns - 1 {
        script.push_str(
            "        - content: [ { tool_use: { name: read_file, input: { path: module.py } } } ]\n",
        );
    }
    script.push_str("        - content: [ { text: done } ]\n");
    format!(
        "name: ctx\nproviders:\n  p: {{ protocol: {protocol}, simulator: true }}\ndefaults:\n  provider: p\n  model: {model}\n  max_tokens: 1024\n  toolset: coding\n  repo: repo\n  keep_workspaces: never\n  context: {context}\n  limits: {{ max_turns: {turns}, max_repeats: off, time_limit: 10m }}\ntasks:\n  - id: t\n    prompt: fix it\n    sim:\n{sim_window}      turns:\n{script}"
    )
}

pub(crate) fn results_sent(ran: &Ran) -> Vec<String> {
    // every tool result the transcript holds, as the tool returned it
    ran.events("t", "tool_result")
        .iter()
        .map(|e| e["content"].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_turns_of_2kb_results_complete_under_a_200k_window() {
    let case = Case::new();
    folder(&case);
    let ran = case
        .run(&job(
            "anthropic",
            "claude-sonnet-4-5",
            300,
            "{ window: 200000 }",
            "",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(num(&row, "turns"), 300);
    assert!(num(&row, "compactions") >= 1, "{row:?}");
    let requests = ran.requests("t");
    assert!(requests.iter().all(|r| r.status == 200));
    // The transcript keeps every original result; the requests carried placeholders.
    let kept = results_sent(&ran);
    assert_eq!(kept.len(), 299);
    assert!(kept.iter().all(|c| c.contains("def total(xs)")));
    let last = &requests.last().unwrap().body;
    let cleared = last
        .to_string()
        .matches("[agentbatch: this tool result was cleared")
        .count();
    assert!(cleared > 100, "{cleared}");
    for e in ran.events("t", "compaction") {
        assert!(
            e["tokens_after"].as_u64() < e["tokens_before"].as_u64(),
            "{e}"
        );
        assert_eq!(e["strategy"], "clear_tool_results");
    }
}

#[tokio::test]
async fn every_protocol_compacts_under_a_small_window_and_stops_when_it_cannot() {
    for (protocol, model) in [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ] {
        let case = Case::new();
        folder(&case);
        let sim_window = "      context_window: 12000\n";
        let ran = case
            .run(&job(
                protocol,
                model,
                40,
                "{ window: 12000, keep: 2 }",
                sim_window,
            ))
            .await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{protocol}: {row:?}");
        assert!(num(&row, "compactions") >= 3, "{protocol}: {row:?}");
        let requests = ran.requests("t");
        let refused: Vec<&Value> = requests
            .iter()
            .filter(|r| r.status != 200)
            .map(|r| &r.body)
            .collect();
        assert!(
            refused.is_empty(),
            "{protocol}: the runner compacts before the server refuses"
        );

        // Compaction off: the runner stops before sending what cannot fit.
        let case = Case::new();
        folder(&case);
        let off = case
            .run(&job(
                protocol,
                model,
                40,
                "{ window: 12000, strategy: off }",
                sim_window,
            ))
            .await;
        let row = off.row("t");
        assert_eq!(row["stop_reason"], "context_window", "{protocol}: {row:?}");
        assert!(
            row["stop_detail"].contains("12000-token context window")
                && row["stop_detail"].contains("context.strategy: off"),
            "{protocol}: {row:?}"
        );
        assert!(
            off.requests("t").iter().all(|r| r.status == 200),
            "{protocol}"
        );
    }
}

#[tokio::test]
async fn a_server_that_refuses_a_long_prompt_gets_a_compacted_one() {
    // The job does not know the window (the model's is 200k); the server's is smaller.
    let case = Case::new();
    folder(&case);
    let ran = case
        .run(&job(
            "anthropic",
            "claude-sonnet-4-5",
            30,
            "{ keep: 2 }",
            "      context_window: 12000\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let requests = ran.requests("t");
    let refused: Vec<_> = requests.iter().filter(|r| r.status == 400).collect();
    assert!(!refused.is_empty());
    assert!(refused[0]
        .error
        .as_deref()
        .unwrap_or("")
        .contains("prompt is too long"));
    assert_eq!(num(&row, "compactions") as usize, refused.len());
    // Refused requests are not billed, and not retries of a provider error; each
    // attempt of a turn has its own number.
    assert_eq!(row["retries"], "0");
    let mut attempts: Vec<(u64, u64)> = ran
        .events("t", "reserve")
        .iter()
        .map(|e| (e["turn"].as_u64().unwrap(), e["attempt"].as_u64().unwrap()))
        .collect();
    let n = attempts.len();
    attempts.dedup();
    assert_eq!(attempts.len(), n, "{attempts:?}");
    assert!(attempts.iter().any(|(_, a)| *a == 2), "{attempts:?}");
}

#[test]
fn validate_shows_the_context_policy_and_names_bad_fields() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: v\ndefaults:\n  model: claude-sonnet-4-5\n  context: { keep: 5, exempt: [read_file] }\ntasks:\n  - { id: a, prompt: p, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n  - { id: b, prompt: p, model: local-model, context: { strategy: off }, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    );
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("context: 200000-token window; at 85% clear old tool results, keeping the newest 5, never read_file"),
        "{text}"
    );
    assert!(
        text.contains("context: window unknown (the provider decides); compaction off"),
        "{text}"
    );
    case.write(
        "bad.yaml",
        "name: v\ndefaults:\n  model: claude-sonnet-4-5\n  context: { at: 1.5 }\ntasks:\n  - { id: a, prompt: p, context: { window: 0, strategy: summarise }, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    );
    let bad = case.agentbatch(&["validate", "bad.yaml"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(err.contains("summarise"), "{err}");
    case.write(
        "bad2.yaml",
        "name: v\ndefaults:\n  model: claude-sonnet-4-5\n  context: { at: 1.5 }\ntasks:\n  - { id: a, prompt: p, context: { window: 0 }, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    );
    let bad = case.agentbatch(&["validate", "bad2.yaml"]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("defaults.context.at") && err.contains("1.5 is not a share"),
        "{err}"
    );
    assert!(
        err.contains("tasks[0].context.window") && err.contains("at least 1"),
        "{err}"
    );
}

#[tokio::test]
async fn streamed_answers_compact_the_same_way() {
    for protocol in ["anthropic", "openai-chat"] {
        let model = if protocol == "anthropic" {
            "claude-sonnet-4-5"
        } else {
            "gpt-5.4"
        };
        let yaml = |stream: &str| {
            job(
                protocol,
                model,
                40,
                "{ window: 12000, keep: 2 }",
                "      context_window: 12000\n",
            )
            .replace(
                "  keep_workspaces: never\n",
                &format!("  keep_workspaces: never\n  stream: {stream}\n"),
            )
        };
        let (a, b) = (Case::new(), Case::new());
        folder(&a);
        folder(&b);
        let streamed = a.run(&yaml("always")).await;
        let whole = b.run(&yaml("never")).await;
        for ran in [&streamed, &whole] {
            assert_eq!(ran.stop("t"), "completed", "{protocol}: {:?}", ran.row("t"));
        }
        assert_eq!(
            streamed.row("t")["compactions"],
            whole.row("t")["compactions"],
            "{protocol}"
        );
        assert_eq!(
            streamed.row("t")["input_tokens"],
            whole.row("t")["input_tokens"],
            "{protocol}"
        );
    }
}

#[tokio::test]
async fn a_first_prompt_is_judged_by_the_provider_not_by_its_upper_bound() {
    let one_turn = |system_bytes: usize| {
        let system = "x".repeat(system_bytes);
        format!(
            "name: first\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 500\n  system: \"{system}\"\n  context: {{ window: 3000 }}\ntasks:\n  - id: t\n    prompt: p\n    sim:\n      context_window: 3000\n      turns:\n        - content: [ {{ text: done }} ]\n"
        )
    };
    // 6 KB: its bound (a token per byte) is over the window, its real size is not.
    let case = Case::new();
    let fits = case.run(&one_turn(6_000)).await;
    assert_eq!(fits.stop("t"), "completed", "{:?}", fits.row("t"));
    // 20 KB: too long for the server, which refuses it; nothing is billed.
    let case = Case::new();
    let long = case.run(&one_turn(20_000)).await;
    let row = long.row("t");
    assert_eq!(row["stop_reason"], "context_window", "{row:?}");
    assert!(row["stop_detail"].contains("prompt is too long"), "{row:?}");
    assert_eq!(row["cost_usd"], "0", "{row:?}");
    assert_eq!(long.requests("t").len(), 1);
}

#[test]
fn keeping_no_result_whole_is_refused() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: v\ndefaults:\n  model: claude-sonnet-4-5\ntasks:\n  - { id: a, prompt: p, context: { keep: 0 }, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    );
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tasks[0].context.keep") && err.contains("not read yet"),
        "{err}"
    );
}

#[tokio::test]
async fn anthropic_context_editing_clears_on_the_server_and_the_history_stays_whole() {
    let case = Case::new();
    folder(&case);
    let ran = case
        .run(&job(
            "anthropic",
            "claude-sonnet-4-5",
            40,
            "{ window: 12000, strategy: native, keep: 2 }",
            "      context_window: 12000\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let requests = ran.requests("t");
    assert!(
        requests.iter().all(|r| r.status == 200),
        "the server cleared in time"
    );
    for r in &requests {
        assert_eq!(
            r.headers.get("anthropic-beta").map(String::as_str),
            Some("context-management-2025-06-27")
        );
        let edit = &r.body["context_management"]["edits"][0];
        assert_eq!(edit["type"], "clear_tool_uses_20250919");
        assert_eq!(
            edit["keep"],
            serde_json::json!({"type": "tool_uses", "value": 2})
        );
        assert!(!r
            .body
            .to_string()
            .contains("[agentbatch: this tool result was cleared"));
    }
    let applied = requests
        .iter()
        .filter(|r| {
            r.response.as_ref().is_some_and(|m| {
                m["context_management"]["applied_edits"][0]["cleared_tool_uses"].as_u64() > Some(0)
            })
        })
        .count();
    assert!(applied > 5, "{applied}");
    assert_eq!(num(&row, "compactions") as usize, applied);
    let events = ran.events("t", "compaction");
    assert!(events
        .iter()
        .all(|e| e["strategy"] == "native"
            && e["tokens_after"].as_u64() < e["tokens_before"].as_u64()));
}

#[tokio::test]
async fn responses_compaction_on_the_server_replaces_the_history_with_its_item() {
    for stream in ["never", "always"] {
        let case = Case::new();
        folder(&case);
        let yaml = job(
            "openai-responses",
            "gpt-5.4",
            40,
            "{ window: 12000, strategy: native }",
            "      context_window: 12000\n",
        )
        .replace(
            "  keep_workspaces: never\n",
            &format!("  keep_workspaces: never\n  stream: {stream}\n"),
        );
        let ran = case.run(&yaml).await;
        let row = ran.row("t");
        assert_eq!(row["stop_reason"], "completed", "{stream}: {row:?}");
        assert_eq!(num(&row, "turns"), 40, "{stream}");
        let requests = ran.requests("t");
        assert!(
            requests.iter().all(|r| r.status == 200),
            "{stream}: the server compacted in time and every turn replayed: {:?}",
            requests.iter().find(|r| r.status != 200).map(|r| &r.error)
        );
        for r in &requests {
            let cm = &r.body["context_management"][0];
            assert_eq!(cm["type"], "compaction");
            assert!(cm["compact_threshold"].as_u64() < Some(12000));
        }
        // Each compaction opens its answer with the item; the next request starts
        // from it, without the items it stands for (the transcript keeps them).
        let compacted = requests
            .iter()
            .filter(|r| {
                r.response
                    .as_ref()
                    .is_some_and(|m| m["output"][0]["type"] == "compaction")
            })
            .count();
        assert!(compacted >= 2, "{stream}: {compacted}");
        assert_eq!(num(&row, "compactions") as usize, compacted, "{stream}");
        let last = &requests.last().unwrap().body["input"];
        assert_eq!(last[0]["type"], "compaction", "{stream}");
        assert!(last[0].get("id").is_none(), "{stream}");
        assert!(last.as_array().unwrap().len() < 40, "{stream}");
        assert_eq!(results_sent(&ran).len(), 39, "{stream}");
        assert!(ran
            .events("t", "compaction")
            .iter()
            .all(|e| e["strategy"] == "native" && e["cleared_results"].as_u64() > Some(0)));
    }
}

#[test]
fn native_context_management_is_refused_on_chat_completions() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: v\nproviders:\n  o: { protocol: openai-chat, simulator: true }\ndefaults:\n  model: gpt-5.4\n  provider: o\ntasks:\n  - { id: a, prompt: p, context: { strategy: native }, sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    );
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tasks[0].context.strategy") && err.contains("Anthropic's context editing"),
        "{err}"
    );
}

/// A 16.6 KB prompt: with the tools, about 4,900 tokens as the simulator counts them.
pub(crate) fn long_prompt() -> String {
    "Fix the total function so that blank cells are skipped. "
        .repeat(300)
        .chars()
        .take(16_600)
        .collect()
}

/// The prompt tokens of a recorded request as the simulator counts them (a quarter of
/// its bytes) and the output it asked for.
pub(crate) fn sim_tokens(body: &Value) -> (u64, u64) {
    let bytes = serde_json::to_vec(body).map_or(0, |b| b.len() as u64);
    let asked = ["max_tokens", "max_output_tokens", "max_completion_tokens"]
        .iter()
        .find_map(|f| body[*f].as_u64())
        .unwrap_or(0);
    (bytes.div_ceil(4), asked)
}

#[tokio::test]
async fn a_request_that_cannot_fit_the_window_is_never_sent() {
    // The simulator's window is the model's (200k): whatever the runner sends is
    // answered, so only the runner's own decision keeps a request inside the job's.
    let cases = [(6000, 1024), (400, 100), (100, 1024), (1, 1024)];
    let protocols = [
        ("anthropic", "claude-sonnet-4-5"),
        ("openai-responses", "gpt-5.4"),
        ("openai-chat", "gpt-5.4"),
    ];
    for ((window, max_tokens), (protocol, model)) in cases
        .into_iter()
        .flat_map(|c| protocols.into_iter().map(move |p| (c, p)))
    {
        for strategy in ["auto", "summarize", "clear_tool_results", "off"] {
            let case = Case::new();
            folder(&case);
            let yaml = job(
                protocol,
                model,
                40,
                &format!("{{ strategy: {strategy}, window: {window} }}"),
                "",
            )
            .replace("prompt: fix it", &format!("prompt: {}", long_prompt()))
            .replace("max_tokens: 1024", &format!("max_tokens: {max_tokens}"));
            let ran = case.run(&yaml).await;
            let row = ran.row("t");
            let what = format!("{protocol} {strategy}, window {window}, max_tokens {max_tokens}");
            assert_eq!(row["stop_reason"], "context_window", "{what}: {row:?}");
            assert!(
                row["stop_detail"].contains(&format!("the {window}-token context window")),
                "{what}: {row:?}"
            );
            let requests = ran.requests("t");
            // Before the first answer the prompt's size is known only between bounds: a
            // first request is sent unless even its lower bound cannot fit.
            for r in requests.iter().skip(1) {
                let (prompt, asked) = sim_tokens(&r.body);
                assert!(
                    prompt + asked <= window,
                    "{what}: sent a prompt of {prompt} tokens with max_tokens {asked}: {row:?}"
                );
            }
            if window <= 400 {
                // Even a token per 32 bytes and max_tokens do not fit: nothing is sent.
                assert!(requests.is_empty(), "{what}: {} sent", requests.len());
                assert_eq!(row["cost_usd"], "0", "{what}");
                assert!(
                    row["stop_detail"].contains("first request"),
                    "{what}: {row:?}"
                );
            } else {
                // What a summary cannot replace (the first message and the tools) is
                // over the threshold alone: none is asked for, and the task stops
                // before the request that cannot fit.
                assert_eq!(requests.len(), 1, "{what}: {row:?}");
                assert_eq!(num(&row, "compactions"), 0, "{what}");
            }
        }
    }
}
