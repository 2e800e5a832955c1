//! Prompt caching over real HTTP against the simulator: where the runner puts Anthropic
//! breakpoints and how they move, that replay stays verbatim apart from the markers,
//! that nothing the API refuses is sent, and OpenAI's per-task cache key.

use serde_json::Value;

use crate::common::{job, Case};

/// A system prompt long enough in bytes (2,480) for the runner to place breakpoints for
/// claude-sonnet-4-5, whose minimum is 1,024 tokens.
fn long_system() -> String {
    "You fix bugs in small Python projects. Read before you write. ".repeat(40)
}

/// Every block (tools, system, message content) that carries a `cache_control`, as
/// `place: type`.
fn markers(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if t.get("cache_control").is_some() {
            out.push(format!("tools.{i}"));
        }
    }
    for (i, b) in body["system"].as_array().into_iter().flatten().enumerate() {
        if b.get("cache_control").is_some() {
            out.push(format!("system.{i}"));
        }
    }
    for (i, m) in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            if b.get("cache_control").is_some() {
                let kind = b["type"].as_str().unwrap_or_default();
                out.push(format!("messages.{i}.{j}: {kind}"));
            }
        }
    }
    out
}

/// The messages without their `cache_control` markers.
fn unmarked(body: &Value) -> Vec<Value> {
    let mut messages = body["messages"].as_array().cloned().unwrap_or_default();
    for m in &mut messages {
        if let Some(blocks) = m["content"].as_array_mut() {
            for b in blocks {
                if let Some(o) = b.as_object_mut() {
                    o.remove("cache_control");
                }
            }
        }
    }
    messages
}

fn three_turns(system: &str) -> String {
    job(
        &format!("  system: \"{system}\"\n"),
        r#"  - id: t
    prompt: fix it
    sim:
      turns:
        - content:
            - thinking: "First the clock."
            - text: ""
            - tool_use: { name: get_time, input: {} }
        - content:
            - text: "Once more."
            - tool_use: { name: get_time, input: {} }
            - tool_use: { name: get_time, input: {} }
        - content:
            - text: "Done."
"#,
    )
}

#[tokio::test]
async fn anthropic_breakpoints_sit_at_the_prefix_ends_and_move_with_the_history() {
    let case = Case::new();
    let ran = case.run(&three_turns(&long_system())).await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let reqs = ran.requests("t");
    assert_eq!(reqs.len(), 3);
    let marks: Vec<Vec<String>> = reqs.iter().map(|r| markers(&r.body)).collect();
    // The first request: the system prompt and the prompt. The one tool's declaration
    // alone is shorter than the model's minimum, so it gets no breakpoint of its own.
    assert_eq!(marks[0], ["system.0", "messages.0.0: text"]);
    // Then the message that was newest in the previous request, and the newest one
    // (its last block: the results of the turn).
    assert_eq!(
        marks[1],
        [
            "system.0",
            "messages.0.0: text",
            "messages.2.0: tool_result"
        ]
    );
    assert_eq!(
        marks[2],
        [
            "system.0",
            "messages.2.0: tool_result",
            "messages.4.1: tool_result"
        ]
    );
    for (r, m) in reqs.iter().zip(&marks) {
        assert!(m.len() <= 4, "at most 4 breakpoints: {m:?}");
        assert!(
            !m.iter().any(|p| p.ends_with("thinking")),
            "never on a thinking block: {m:?}"
        );
        assert_eq!(r.status, 200, "{:?}", r.error);
    }
    // Replay is verbatim apart from the markers: each request starts with the previous
    // one's messages and the answer it got.
    for pair in reqs.windows(2) {
        let (before, after) = (unmarked(&pair[0].body), unmarked(&pair[1].body));
        assert_eq!(&after[..before.len()], &before[..], "history was rewritten");
        assert_eq!(
            &after[before.len()]["content"],
            &pair[0].response.as_ref().unwrap()["content"],
            "assistant turn not verbatim"
        );
    }
}

#[tokio::test]
async fn a_prompt_below_the_minimum_and_caching_off_send_no_marker() {
    let case = Case::new();
    let small = case.run(&three_turns("Be brief.")).await;
    assert_eq!(small.stop("t"), "completed");
    let reqs = small.requests("t");
    assert_eq!(markers(&reqs[0].body), Vec::<String>::new());
    for r in &reqs {
        // The prompt keeps its plain form: its prefix can never reach the minimum.
        assert_eq!(r.body["messages"][0]["content"], "fix it");
        assert!(r.body["system"].is_string());
    }
    // The history passes the minimum on the last request: the newest message is marked.
    assert_eq!(markers(&reqs[2].body), ["messages.4.1: tool_result"]);
    let case = Case::new();
    let off = case
        .run(&three_turns(&long_system()).replace(
            "  provider: sim\n",
            "  provider: sim\n  cache: { mode: off }\n",
        ))
        .await;
    assert_eq!(off.stop("t"), "completed");
    for r in off.requests("t") {
        assert_eq!(markers(&r.body), Vec::<String>::new());
        assert!(r.body["system"].is_string());
    }
}

#[tokio::test]
async fn the_last_message_strategy_marks_only_the_newest_message_and_still_reads() {
    // Long enough for the simulator's count (a token per 4 bytes) to pass the minimum.
    let system = "You fix bugs in small Python projects. Read before you write. ".repeat(100);
    let case = Case::new();
    let ran = case
        .run(&three_turns(&system).replace(
            "  provider: sim\n",
            "  provider: sim\n  cache: { mode: last_message }\n",
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed");
    let reqs = ran.requests("t");
    let marks: Vec<Vec<String>> = reqs.iter().map(|r| markers(&r.body)).collect();
    assert_eq!(marks[0], ["messages.0.0: text"]);
    assert_eq!(marks[1], ["messages.2.0: tool_result"]);
    assert_eq!(marks[2], ["messages.4.1: tool_result"]);
    // The lookback finds the previous request's breakpoint a few blocks back.
    for r in &reqs[1..] {
        let read = r.response.as_ref().unwrap()["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap();
        assert!(read > 1000, "{read}");
    }
}

#[tokio::test]
async fn one_hour_entries_are_asked_for_and_priced_at_the_one_hour_rate() {
    let case = Case::new();
    let ran = case
        .run(&three_turns(&long_system()).replace(
            "  provider: sim\n",
            "  provider: sim\n  cache: { ttl: 1h }\n",
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed");
    let first = &ran.requests("t")[0].body;
    assert_eq!(first["system"][0]["cache_control"]["ttl"], "1h");
    assert_eq!(
        first["messages"][0]["content"][0]["cache_control"]["ttl"],
        "1h"
    );
}

#[tokio::test]
async fn openai_requests_carry_one_cache_key_per_task_and_none_when_off() {
    for protocol in ["openai-responses", "openai-chat"] {
        let case = Case::new();
        let yaml = |cache: &str| {
            format!(
                "name: k\nproviders:\n  o: {{ protocol: {protocol}, simulator: true{cache} }}\ndefaults:\n  provider: o\n  model: gpt-5.4\n  tools: [get_time]\ntasks:\n  - id: a\n    prompt: p\n    sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: get_time, input: {{}} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }}\n  - id: b\n    prompt: p\n    sim: {{ turns: [ {{ content: [ {{ text: done }} ] }} ] }}\n"
            )
        };
        let ran = case.run(&yaml("")).await;
        let key = |t: &str| -> Vec<Value> {
            ran.requests(t)
                .iter()
                .map(|r| r.body["prompt_cache_key"].clone())
                .collect()
        };
        let (a, b) = (key("a"), key("b"));
        assert_eq!(a.len(), 2, "{protocol}");
        assert!(a[0].is_string() && a[0] == a[1], "{protocol}: {a:?}");
        assert!(b[0].is_string() && b[0] != a[0], "{protocol}: {b:?}");
        // The API picks the retention unless the job does.
        assert!(ran.requests("a")[0]
            .body
            .get("prompt_cache_retention")
            .is_none());
        let case = Case::new();
        let extended = case.run(&yaml(", cache: { retention: 24h }")).await;
        assert_eq!(extended.stop("a"), "completed");
        for r in extended.requests("a") {
            assert_eq!(r.body["prompt_cache_retention"], "24h", "{protocol}");
        }
        let case = Case::new();
        let off = case.run(&yaml(", cache: { mode: off }")).await;
        for r in off.requests("a") {
            assert!(r.body.get("prompt_cache_key").is_none(), "{protocol}");
        }
    }
}

/// Each request after the first reads what the previous one wrote (the simulator
/// caches like the API: exact prefixes at breakpoints, the model's minimum), and the
/// task costs less than the same task with caching off.
#[tokio::test]
async fn every_request_after_the_first_reads_the_previous_ones_prefix() {
    let system = "You fix bugs in small Python projects. Read before you write. ".repeat(100);
    let script = r#"  - id: t
    prompt: fix it
    sim:
      turns:
        - content: [ { tool_use: { name: get_time, input: {} } } ]
        - content: [ { text: "Again." }, { tool_use: { name: get_time, input: {} } } ]
        - content: [ { tool_use: { name: get_time, input: {} } } ]
        - content: [ { text: "Done." } ]
"#;
    let on = Case::new();
    let ran = on
        .run(&job(&format!("  system: \"{system}\"\n"), script))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let usage: Vec<Value> = ran
        .requests("t")
        .iter()
        .map(|r| r.response.as_ref().unwrap()["usage"].clone())
        .collect();
    let n = |u: &Value, k: &str| u[k].as_u64().unwrap_or(0);
    assert_eq!(n(&usage[0], "cache_read_input_tokens"), 0);
    assert!(
        n(&usage[0], "cache_creation_input_tokens") > 1024,
        "{:?}",
        usage[0]
    );
    for pair in usage.windows(2) {
        let cached_before =
            n(&pair[0], "cache_read_input_tokens") + n(&pair[0], "cache_creation_input_tokens");
        assert!(
            n(&pair[1], "cache_read_input_tokens") >= cached_before,
            "a request reads all the previous one cached: {pair:?}"
        );
    }
    let row = ran.row("t");
    assert!(
        row["cache_read_tokens"].parse::<u64>().unwrap() > 3000,
        "{row:?}"
    );

    let off = Case::new();
    let plain = off
        .run(&job(
            &format!("  system: \"{system}\"\n  cache: {{ mode: off }}\n"),
            script,
        ))
        .await;
    let cost = |r: &std::collections::HashMap<String, String>| {
        r["cost_usd"].parse::<rust_decimal::Decimal>().unwrap()
    };
    assert_eq!(plain.row("t")["cache_read_tokens"], "0");
    // What caching saved is the difference, as results.csv says.
    let saved = row["cache_saved_usd"]
        .parse::<rust_decimal::Decimal>()
        .unwrap();
    assert!(saved > rust_decimal::Decimal::ZERO, "{row:?}");
    let summary = crate::common::read_csv(&ran.dir.join("summary.csv"));
    assert_eq!(summary[0]["cache_saved_usd"], row["cache_saved_usd"]);
    assert_eq!(plain.row("t")["cache_saved_usd"], "0");
    assert!(
        cost(&row) < cost(&plain.row("t")),
        "cached {} vs uncached {}",
        row["cost_usd"],
        plain.row("t")["cost_usd"]
    );
    // compare shows it per group (the second run renamed: both cases call theirs r1).
    let out = tempfile::tempdir().unwrap();
    let renamed = out.path().join("off");
    std::fs::create_dir_all(&renamed).unwrap();
    let rows = std::fs::read_to_string(plain.dir.join("results.csv")).unwrap();
    let rows: Vec<String> = rows
        .lines()
        .map(|l| match l.strip_prefix("r1,") {
            Some(rest) => format!("r-off,{rest}"),
            None => l.to_string(),
        })
        .collect();
    std::fs::write(renamed.join("results.csv"), rows.join("\n") + "\n").unwrap();
    let report = agentbatch::compare::compare(&agentbatch::compare::CompareOptions {
        runs: vec![ran.dir.clone(), renamed],
        by: None,
        out_dir: out.path().to_path_buf(),
    })
    .unwrap();
    let saved_by_group: Vec<rust_decimal::Decimal> =
        report.groups.iter().map(|g| g.cache_saved).collect();
    assert_eq!(saved_by_group, [saved, rust_decimal::Decimal::ZERO]);
    let md = std::fs::read_to_string(out.path().join("compare.md")).unwrap();
    assert!(md.contains("cache saved"), "{md}");
}

/// `validate` says how each task caches and what its worst case prices a prompt token at.
#[test]
fn validate_shows_caching_and_the_worst_case_rate() {
    let case = Case::new();
    let yaml = three_turns("Be brief.").replace(
        "  provider: sim\n",
        "  provider: sim\n  cache: { ttl: 1h }\n",
    );
    case.write("job.yaml", &yaml);
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("cache: on, breakpoints placed by the runner, 1-hour entries; worst case prices the prompt at $6/Mtok"),
        "{text}"
    );
    case.write("job.yaml", &yaml.replace("ttl: 1h", "mode: off"));
    let out = case.agentbatch(&["validate", "job.yaml"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("      cache: off\n"));
}

/// Odd shapes: no tools, an empty system prompt, a long prompt. The marker goes on the
/// prompt (in block form), none on the empty system prompt, and the simulator (which
/// refuses what the API refuses) accepts every request.
#[tokio::test]
async fn no_tools_an_empty_system_prompt_and_a_long_prompt_are_marked_where_they_can_be() {
    let case = Case::new();
    let prompt = "Fix the failing test in the module you are given. ".repeat(60);
    let ran = case
        .run(&job(
            "  system: \"\"\n  tools: []\n",
            &format!(
                "  - id: t\n    prompt: \"{prompt}\"\n    sim: {{ turns: [ {{ content: [ {{ text: \"\" }}, {{ text: looked }} ] }} ] }}\n"
            ),
        ))
        .await;
    assert_eq!(ran.stop("t"), "completed", "{:?}", ran.row("t"));
    let body = &ran.requests("t")[0].body;
    assert_eq!(markers(body), ["messages.0.0: text"]);
    assert_eq!(body["messages"][0]["content"][0]["text"], prompt.as_str());
    assert!(!body["system"].is_array(), "{}", body["system"]);
}

/// `tasks` tasks of `turns` turns each (a tool call every turn but the last) on a
/// provider whose runner limits equal the simulator's: input and output tokens per
/// minute with a two-second burst.
fn paced_job(cache: &str, tasks: usize, turns: usize, itpm: u32, otpm: u32) -> String {
    let system = "You fix bugs in small Python projects. Read before you write. ".repeat(75);
    let mut script = String::new();
    for _ in 0..turns - 1 {
        script.push_str("        - content: [ { tool_use: { name: get_time, input: {} } } ]\n");
    }
    script.push_str("        - content: [ { text: done } ]\n");
    let limits = format!("itpm: {itpm}, otpm: {otpm}, burst: 2s");
    let ids: String = (0..tasks)
        .map(|i| format!("  - {{ id: t{i}, prompt: \"fix bug {i}\" }}\n"))
        .collect();
    format!(
        "name: paced\nconcurrency: {tasks}\nproviders:\n  sim:\n    itpm: {itpm}\n    otpm: {otpm}\n    burst: 2s\n    server_limits: {{ {limits} }}\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  cache: {{ mode: {cache} }}\n  system: \"{system}\"\n  tools: [get_time]\n  limits: {{ max_repeats: off }}\n  sim:\n    turns:\n{script}tasks:\n{ids}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_prompts_are_paced_on_the_tokens_the_limit_counts_and_see_no_429() {
    // 8 tasks x 10 turns. The server counts about 1,200 input tokens for a first
    // request and about 100 for a later one (cache reads do not count for this model):
    // some 16,000 in all, twice its burst, so a runner that did not pace would be
    // refused. Output is pre-charged at max_tokens (80 x 1024, far over the output
    // limit's minute) and corrected to the few tokens each answer used.
    let case = Case::new();
    let ran = case.run(&paced_job("auto", 8, 10, 240_000, 60_000)).await;
    let log = ran.sim.requests();
    assert_eq!(
        log.iter().filter(|r| r.status == 429).count(),
        0,
        "paced at the server's own limits: {:?}",
        log.iter().find(|r| r.status == 429).map(|r| &r.error)
    );
    assert_eq!(log.len(), 80);
    let rows = ran.rows();
    assert!(
        rows.iter().all(|r| r["stop_reason"] == "completed"),
        "{rows:?}"
    );
    let (mut paced, mut bound, mut counted) = (0u64, 0u64, 0u64);
    for r in &rows {
        let id = &r["task_id"];
        let reserves = ran.events(id, "reserve");
        let settles = ran.events(id, "settle");
        assert_eq!(reserves.len(), 10);
        for (turn, (res, set)) in reserves.iter().zip(&settles).enumerate().skip(1) {
            let p = res["paced_input_tokens"].as_u64().unwrap();
            let u = &set["usage"];
            let server =
                u["input_tokens"].as_u64().unwrap() + u["cache_write_tokens"].as_u64().unwrap();
            assert!(
                u["cache_read_tokens"].as_u64().unwrap() > 1000,
                "{id} turn {}: {u}",
                turn + 1
            );
            // An upper bound on what the server counted, not the whole prompt.
            assert!(
                p >= server,
                "{id} turn {}: paced {p} < counted {server}",
                turn + 1
            );
            paced += p;
            bound += res["prompt_tokens_upper_bound"].as_u64().unwrap();
            counted += server;
        }
    }
    assert!(
        paced * 4 < bound,
        "later requests are paced on their new part: {paced} of {bound}"
    );
    assert!(counted <= paced, "{counted} > {paced}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_caching_the_whole_prompt_is_paced_and_still_sees_no_429() {
    let case = Case::new();
    let ran = case.run(&paced_job("off", 3, 4, 240_000, 60_000)).await;
    let log = ran.sim.requests();
    assert_eq!(log.iter().filter(|r| r.status == 429).count(), 0);
    for r in ran.rows() {
        assert_eq!(r["stop_reason"], "completed");
        for res in ran.events(&r["task_id"], "reserve") {
            assert_eq!(
                res["paced_input_tokens"], res["prompt_tokens_upper_bound"],
                "nothing is expected from a cache"
            );
        }
    }
}

/// What the simulator billed for every answer it gave, priced from its own usage with
/// 5-minute and 1-hour writes at their rates.
fn billed(
    ran: &crate::common::Ran,
    price: &agentbatch::vocab::price::Price,
) -> rust_decimal::Decimal {
    ran.sim
        .requests()
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.response.as_ref())
        .map(|m| {
            let u = &m["usage"];
            let n = |v: &Value| v.as_u64().unwrap_or(0);
            price.cost(&agentbatch::model::Usage {
                input_tokens: n(&u["input_tokens"]),
                output_tokens: n(&u["output_tokens"]),
                cache_read_tokens: n(&u["cache_read_input_tokens"]),
                cache_write_tokens: n(&u["cache_creation_input_tokens"]),
                cache_write_1h_tokens: n(&u["cache_creation"]["ephemeral_1h_input_tokens"]),
                ..Default::default()
            })
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_hold_with_caching_on_and_the_report_is_what_was_billed() {
    // 40 looping tasks under a team cap, half of them writing 1-hour entries (2x the
    // input rate): every worst case must price a write at its dearest rate.
    let system = "You fix bugs in small Python projects. Read before you write. ".repeat(75);
    let tasks: String = (0..40)
        .map(|i| {
            let ttl = if i % 2 == 0 { "5m" } else { "1h" };
            format!("  - {{ id: t{i:02}, prompt: \"go {i}\", cache: {{ ttl: {ttl} }} }}\n")
        })
        .collect();
    let yaml = format!(
        "name: caps\nconcurrency: 40\nteams:\n  platform: {{ max_cost_usd: 0.5 }}\ndefaults:\n  team: platform\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  system: \"{system}\"\n  tools: [get_time]\n  limits: {{ max_turns: 60, min_max_tokens: 128, max_repeats: off }}\n  sim: {{ latency: 5ms, repeat_last: true, turns: [ {{ content: [ {{ text: working }}, {{ tool_use: {{ name: get_time, input: {{}} }} }} ], usage: {{ output_tokens: 100 }} }} ] }}\ntasks:\n{tasks}"
    );
    let case = Case::new();
    let ran = case.run(&yaml).await;
    let rows = ran.rows();
    let dec = |s: &str| s.parse::<rust_decimal::Decimal>().unwrap();
    let spent: rust_decimal::Decimal = rows.iter().map(|r| dec(&r["cost_usd"])).sum();
    assert!(spent <= dec("0.5"), "spent {spent} over the $0.5 cap");
    assert!(
        rows.iter().any(|r| r["stop_reason"] == "team_budget"),
        "the cap should bind"
    );
    let price = agentbatch::vocab::price::lookup(&Default::default(), "claude-sonnet-4-5").unwrap();
    assert_eq!(billed(&ran, &price), spent, "the report is what was billed");
    let mut read = 0u64;
    for r in &rows {
        read += r["cache_read_tokens"].parse::<u64>().unwrap_or(0);
        let over = ran.events(&r["task_id"], "reservation_exceeded");
        assert!(
            over.is_empty(),
            "{}: a worst case was too small: {over:?}",
            r["task_id"]
        );
    }
    assert!(read > 0, "caching was at work");
}
