//! Expansion as a whole: a job file in, a plan or its diagnostics out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use super::context::Ctx;
use super::diagnostics::Diagnostics;
use super::environment::Environment;
use super::expand::{expand, DEFAULT_CONCURRENCY};
use super::files::Files;
use super::providers::resolve_providers;
use super::sampling::check_thinking;
use super::schema::{JobFile, SimSource, ThinkingFields, ThinkingKind};
use super::schema_rules::{valid_id, ID_PATTERN, MAX_ID};
use super::{JobError, Plan, ProviderKind, ProviderSpec};
use crate::model::Protocol;
use crate::tools::Registry;

fn load(text: &str) -> Result<Plan, JobError> {
    load_with_env(text, &Environment::from_process())
}

/// Expands `text` as a job file against the made-up environment `env`.
fn load_with_env(text: &str, env: &Environment) -> Result<Plan, JobError> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("job.yaml");
    std::fs::write(&p, text).unwrap();
    let job: JobFile = super::parse_yaml("job.yaml", text)?;
    expand(job, text, &p, &Registry::builtin(), env, Vec::new())
}

const INLINE: &str = "{ turns: [ { content: [ { text: hi } ] } ] }";

#[test]
fn defaults_merge_field_by_field() {
    let plan = load(&format!(
        "name: t\ndefaults:\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 5, max_cost_usd: 0.5 }}\n  sim: {INLINE}\ntasks:\n  - id: a\n    prompt: p\n    limits: {{ max_turns: 2 }}\n  - id: b\n    prompt: q\n    model: claude-haiku-4-5\n"
    ))
    .unwrap();
    assert_eq!(plan.tasks.len(), 2);
    let a = &plan.tasks[0];
    assert_eq!(a.limits.max_turns, 2);
    assert_eq!(a.limits.max_cost_usd.unwrap().to_string(), "0.5");
    assert_eq!(a.tools, vec!["get_time"]);
    assert_eq!(a.provider.kind, ProviderKind::Sim);
    assert_eq!(plan.tasks[1].model, "claude-haiku-4-5");
    assert_eq!(plan.tasks[1].limits.max_turns, 5);
    assert_eq!(plan.concurrency, DEFAULT_CONCURRENCY);
}

#[test]
fn errors_point_at_the_field() {
    let e = load(&format!(
        "name: t\ndefaults:\n  model: m\n  sim: {INLINE}\ntasks:\n  - id: a\n    prompt: p\n  - id: a\n    prompt: p\n    tools: [nope]\n"
    ))
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("job.yaml:8:9: tasks[1].id: duplicate task id \"a\" (first at line 6)"),
        "{text}"
    );
    assert!(
        text.contains(":10:13: tasks[1].tools[0]: unknown tool \"nope\""),
        "{text}"
    );
}

#[test]
fn cost_limit_needs_a_price() {
    let e = load(&format!(
        "name: t\ndefaults:\n  model: my-model\n  sim: {INLINE}\n  limits: {{ max_cost_usd: 1 }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("3:10: defaults.model: model \"my-model\" has no price"),
        "{e}"
    );
    let ok = load(&format!(
        "name: t\npricing:\n  my-model: {{ input: 1, output: 2 }}\ndefaults:\n  model: my-model\n  sim: {INLINE}\n  limits: {{ max_cost_usd: 1 }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
    ));
    assert!(ok.is_ok());
}

#[test]
fn providers_have_a_protocol_and_settings_that_fit_it() {
    let ok = load(&format!(
        "name: t\nproviders:\n  fake-oai: {{ protocol: openai-responses, simulator: true }}\n  local: {{ protocol: openai-chat, base_url: \"http://127.0.0.1:9/v1\", api_key_env: AGENTBATCH_TEST_UNSET_KEY, api_key_optional: true }}\ndefaults: {{ model: gpt-5.4, sim: {INLINE}, tools: [get_time] }}\ntasks:\n  - {{ id: a, prompt: p, provider: fake-oai, reasoning: {{ effort: low, summary: auto }} }}\n  - {{ id: b, prompt: p, provider: local, temperature: 1.5, reasoning: {{ effort: high }} }}\n"
    ))
    .unwrap();
    let a = &ok.tasks[0];
    assert_eq!(
        (a.provider.kind, a.provider.protocol),
        (ProviderKind::Sim, Protocol::OpenaiResponses)
    );
    assert_eq!(
        a.extra["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(a.extra["parallel_tool_calls"], json!(true));
    let b = &ok.tasks[1];
    assert_eq!(b.provider.max_tokens_field, "max_tokens");
    let omitted = load(&format!(
        "name: t\nproviders:\n  l: {{ protocol: openai-chat, simulator: true, parallel_tool_calls: omit }}\ndefaults: {{ model: m, sim: {INLINE}, tools: [get_time], provider: l }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
    ))
    .unwrap();
    assert!(!omitted.tasks[0].extra.contains_key("parallel_tool_calls"));
    assert_eq!(b.extra["reasoning_effort"], json!("high"));
    assert!(b.provider.api_key_optional);
    let openai = load(&format!(
        "name: t\nproviders:\n  openai: {{ protocol: openai-chat }}\ndefaults: {{ model: gpt-5.4, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
    ))
    .unwrap();
    let p = &openai.job.providers;
    assert!(p.contains_key("openai"));
    let all = resolve_for_test(&openai.job);
    assert_eq!(all["openai"].max_tokens_field, "max_completion_tokens");
    assert_eq!(
        all["openai"].base_url.as_deref(),
        Some("https://api.openai.com/v1")
    );
    assert_eq!(all["openai"].api_key_env.as_deref(), Some("OPENAI_API_KEY"));

    for (yaml, needle) in [
        (
            "providers:\n  mine: { base_url: \"http://x/v1\" }\n",
            "needs a `protocol`",
        ),
        (
            "providers:\n  mine: { protocol: grpc }\n",
            "unknown variant",
        ),
        (
            "providers:\n  openai: { anthropic_version: \"2023-06-01\" }\n",
            "anthropic protocol only",
        ),
        (
            "providers:\n  anthropic: { max_tokens_field: max_tokens }\n",
            "does not apply",
        ),
        (
            "providers:\n  sim: { simulator: false }\n",
            "always the simulator",
        ),
        (
            "providers:\n  mine: { protocol: openai-chat, base_url: \"ftp://x\" }\n",
            "http",
        ),
    ] {
        let e = load(&format!(
            "name: t\n{yaml}defaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(needle), "{yaml}: {e}");
    }
    let sim_oai = "providers:\n  so: { protocol: openai-responses, simulator: true }\n  sc: { protocol: openai-chat, simulator: true }\n";
    for (task, needle) in [
        (
            "{ id: a, prompt: p, provider: so, thinking: { type: adaptive } }",
            "thinking is an Anthropic setting",
        ),
        (
            "{ id: a, prompt: p, reasoning: { effort: low } }",
            "reasoning is an OpenAI setting",
        ),
        ("{ id: a, prompt: p, provider: sc, top_k: 5 }", "no top_k"),
        (
            "{ id: a, prompt: p, provider: so, max_tokens: 8 }",
            "at least 16",
        ),
        (
            "{ id: a, prompt: p, provider: so, limits: { min_max_tokens: 8 } }",
            "at least 16",
        ),
        (
            "{ id: a, prompt: p, provider: sc, reasoning: { summary: auto } }",
            "no reasoning summaries",
        ),
        (
            "{ id: a, prompt: p, provider: so, reasoning: { effort: extreme } }",
            "not an effort",
        ),
        (
            "{ id: a, prompt: p, provider: sc, temperature: 2.5 }",
            "between 0 and 2",
        ),
        (
            "{ id: a, prompt: p, provider: nope }",
            "the providers are anthropic, openai, sc, sim, so",
        ),
    ] {
        let e = load(&format!(
            "name: t\n{sim_oai}defaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {task}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(needle), "{task}: {e}");
    }
}

#[test]
fn mcp_servers_are_checked_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("servers.json"),
        r#"{"mcpServers": {"fs": {"command": "srv", "args": ["{workspace}"], "autoApprove": []}, "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer ${AB_TEST_UNSET_TOKEN}"}}}}"#,
    )
    .unwrap();
    let load_in = |text: &str| {
        let p = dir.path().join("job.yaml");
        std::fs::write(&p, text).unwrap();
        super::load(&p, &Registry::builtin())
    };
    let base = |toolset: &str, task: &str| {
        format!("name: t\ntoolsets:\n  m:\n{toolset}defaults: {{ model: m, toolset: m, sim: {INLINE} }}\ntasks:\n  - {task}\n")
    };
    let ok = load_in(&base("    mcp: { one: { command: srv, args: [x] } }\n    policy: { deny: [\"mcp__one__write(**/.git/**)\"] }\n", "{ id: a, prompt: p }")).unwrap();
    let spec = &ok.tasks[0].toolset.mcp[0];
    assert_eq!((spec.name.as_str(), spec.per_task()), ("one", false));
    let e = load_in(&base(
        "    mcp_config: servers.json\n",
        "{ id: a, prompt: p }",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("uses {workspace}, so the task needs a `repo`"),
        "{e}"
    );
    assert!(
        e.contains("reads ${AB_TEST_UNSET_TOKEN}, which is not set"),
        "{e}"
    );
    for (toolset, needle) in [
        (
            "    mcp: { s: { type: sse, url: \"http://x/sse\" } }\n",
            "HTTP+SSE transport is not supported",
        ),
        (
            "    mcp: { s: { command: a, url: \"http://x\" } }\n",
            "not both",
        ),
        ("    mcp: { s: { type: http } }\n", "needs a `url`"),
        ("    mcp: { s: { args: [x] } }\n", "needs a `command`"),
        (
            "    mcp: { s: { type: grpc, command: a } }\n",
            "unknown MCP transport",
        ),
        (
            "    mcp: { s: { command: a, colour: red } }\n",
            "unknown field `colour`",
        ),
        ("    mcp_config: missing.json\n", "cannot read"),
        (
            "    mcp: { s: { command: a } }\n    policy: { deny: [\"mcp__other__x\"] }\n",
            "which tool set m does not have",
        ),
        (
            "    mcp: { \"a.b\": { command: a }, \"a_b\": { command: b } }\n",
            "same tool prefix",
        ),
    ] {
        let e = load_in(&base(toolset, "{ id: a, prompt: p }"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{toolset}: {e}");
    }
}

fn resolve_for_test(job: &JobFile) -> BTreeMap<String, Arc<ProviderSpec>> {
    let env = Environment::default();
    let mut cx = Ctx {
        diags: Diagnostics::new("job.yaml".into(), ""),
        env: &env,
        files: Files::read_job_files(PathBuf::from("."), job),
        scripts: super::context::ScriptCache::new(),
    };
    let out = resolve_providers(job, &mut cx);
    assert!(cx.diags.is_empty(), "{:?}", cx.diags.into_vec());
    out
}

#[test]
fn sim_needs_a_script_and_sampling_needs_an_old_version() {
    let e =
        load("name: t\ndefaults: { model: m }\ntasks:\n  - { id: a, prompt: p }\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("provider sim is the simulator and needs a script"),
        "{e}"
    );
    let e = load(&format!(
        "name: t\nproviders:\n  sim: {{ anthropic_version: \"2026-10-21\" }}\ndefaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p, temperature: 0.2 }}\n"
    ))
    .unwrap_err();
    assert!(e.to_string().contains("refuses temperature"), "{e}");
}

#[test]
fn thinking_checks() {
    assert!(check_thinking(
        &ThinkingFields {
            kind: ThinkingKind::Enabled,
            budget_tokens: None,
            display: None
        },
        4096
    )
    .is_err());
    assert_eq!(
        check_thinking(
            &ThinkingFields {
                kind: ThinkingKind::Enabled,
                budget_tokens: Some(2048),
                display: None
            },
            4096
        ),
        Ok(Some(2048))
    );
    assert!(check_thinking(
        &ThinkingFields {
            kind: ThinkingKind::Enabled,
            budget_tokens: Some(4096),
            display: None
        },
        4096
    )
    .is_err());
    assert_eq!(
        check_thinking(
            &ThinkingFields {
                kind: ThinkingKind::Adaptive,
                budget_tokens: None,
                display: None
            },
            4096
        ),
        Ok(None)
    );
}

#[test]
fn ids_name_files_safely() {
    assert!(valid_id("fix-parse_dates.2"));
    for bad in ["", "../x", "a/b", ".hidden", "a b"] {
        assert!(!valid_id(bad), "{bad}");
    }
    // The JSON Schema's pattern and length say the same.
    let pattern = regex::Regex::new(ID_PATTERN).expect("the pattern compiles");
    let schema = |id: &str| pattern.is_match(id) && id.chars().count() <= MAX_ID;
    let mut ids = vec![String::new()];
    let mut last = vec![String::new()];
    for _ in 0..4 {
        last = last
            .iter()
            .flat_map(|t| {
                ["a", "Z", "0", ".", "_", "-", "/", " ", "é", "\n"].map(|c| format!("{t}{c}"))
            })
            .collect();
        ids.extend(last.iter().cloned());
    }
    ids.extend(["a".repeat(MAX_ID), "a".repeat(MAX_ID + 1), "a\n".into()]);
    for id in &ids {
        assert_eq!(schema(id), valid_id(id), "{id:?}");
    }
}

#[test]
fn api_keys_are_checked_against_the_environment_given() {
    let job = "name: t\ndefaults: { model: claude-sonnet-4-5, provider: anthropic }\ntasks:\n  - { id: a, prompt: p }\n";
    let e = load_with_env(job, &Environment::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(
            "job.yaml:2:49: defaults.provider: the API key variable ANTHROPIC_API_KEY is not set"
        ),
        "{e}"
    );
    let plan = load_with_env(job, &Environment::with_set(["ANTHROPIC_API_KEY"])).unwrap();
    assert_eq!(plan.tasks[0].provider.kind, ProviderKind::Api);
    let mcp = format!(
        "name: t\ntoolsets:\n  m:\n    mcp: {{ web: {{ url: \"http://127.0.0.1:9/mcp\", headers: {{ Authorization: \"Bearer ${{AB_MADE_UP_TOKEN}}\" }} }} }}\ndefaults: {{ model: m, toolset: m, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
    );
    let e = load_with_env(&mcp, &Environment::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("reads ${AB_MADE_UP_TOKEN}, which is not set"),
        "{e}"
    );
    assert!(load_with_env(&mcp, &Environment::with_set(["AB_MADE_UP_TOKEN"])).is_ok());
}

#[test]
fn a_script_read_ahead_is_reported_only_when_a_simulated_provider_plays_it() {
    let job = |provider: &str| {
        format!("name: t\ndefaults: {{ model: claude-sonnet-4-5, provider: {provider}, sim: missing.yaml }}\ntasks:\n  - {{ id: a, prompt: p }}\n")
    };
    let env = Environment::with_set(["ANTHROPIC_API_KEY"]);
    assert!(load_with_env(&job("anthropic"), &env).is_ok());
    let e = load_with_env(&job("sim"), &env).unwrap_err().to_string();
    assert!(e.contains("missing.yaml: cannot read the file"), "{e}");
}

#[test]
fn max_repeats_is_on_by_default_off_by_word_and_bounded_where_written() {
    let plan = load(&format!(
        "name: t\ndefaults:\n  model: m\n  limits: {{ max_repeats: 5 }}\n  sim: {INLINE}\ntasks:\n  - {{ id: a, prompt: p }}\n  - {{ id: b, prompt: p, limits: {{ max_repeats: off }} }}\n  - {{ id: c, prompt: p, limits: {{ max_repeats: 2, max_turns: 4 }} }}\n"
    ))
    .unwrap();
    let got: Vec<Option<u32>> = plan.tasks.iter().map(|t| t.limits.max_repeats).collect();
    assert_eq!(got, [Some(5), None, Some(2)]);
    let plain = load(&format!(
        "name: t\ndefaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - {{ id: a, prompt: p }}\n"
    ))
    .unwrap();
    assert_eq!(plain.tasks[0].limits.max_repeats, Some(3));
    assert_eq!(
        serde_json::to_value(&plan.tasks[1].limits).unwrap()["max_repeats"],
        "off"
    );
    for (bad, says) in [
        ("0", "write `off`"),
        ("1", "at least 2"),
        ("1000001", "at most 1000000"),
        ("-2", "negative"),
        ("never", "use 2 to 1000000 or `off`"),
        ("false", "use 2 to 1000000 or `off`"),
    ] {
        let e = load(&format!(
            "name: t\ndefaults: {{ model: m, sim: {INLINE} }}\ntasks:\n  - id: a\n    prompt: p\n    limits: {{ max_repeats: {bad} }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("job.yaml:6:"), "{bad}: {e}");
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn streaming_is_resolved_task_then_provider_then_defaults_and_auto_follows_the_sdk_rule() {
    let env = Environment::with_set(["ANTHROPIC_API_KEY", "OPENAI_API_KEY"]);
    let job = |providers: &str, defaults: &str, tasks: &str| {
        format!("name: t\nproviders:\n{providers}\ndefaults: {{ model: claude-sonnet-4-5, {defaults} }}\ntasks:\n{tasks}")
    };
    let plan = load_with_env(
        &job(
            "  anthropic: { stream_idle_timeout: 30s }\n  openai: { stream: always }\n  local: { protocol: openai-chat, base_url: \"http://127.0.0.1:9/v1\", api_key_optional: true, stream_options: omit }",
            "provider: anthropic",
            "  - { id: small, prompt: p }\n  - { id: large, prompt: p, max_tokens: 32000 }\n  - { id: think, prompt: p, max_tokens: 4096, thinking: { type: enabled, budget_tokens: 2048 } }\n  - { id: off, prompt: p, thinking: { type: enabled, budget_tokens: 2048 }, stream: never }\n  - { id: oai, prompt: p, provider: openai }\n  - { id: own, prompt: p, provider: openai, stream: never }\n  - { id: chat, prompt: p, provider: local, max_tokens: 30000 }\n",
        ),
        &env,
    )
    .unwrap();
    let streams: Vec<(&str, bool)> = plan
        .tasks
        .iter()
        .map(|t| (t.id.as_str(), t.stream))
        .collect();
    assert_eq!(
        streams,
        [
            ("small", false),
            ("large", true),
            ("think", true),
            ("off", false),
            ("oai", true),
            ("own", false),
            ("chat", true),
        ]
    );
    assert_eq!(
        plan.tasks[0].provider.stream_idle_timeout,
        std::time::Duration::from_secs(30)
    );
    assert_eq!(
        plan.tasks[4].provider.stream_idle_timeout,
        std::time::Duration::from_secs(120)
    );
    assert!(!plan.tasks[6].provider.stream_usage);
    assert!(plan.tasks[4].provider.stream_usage);
    let text = super::describe(&plan);
    assert!(
        text.contains("      stream: yes (SSE), cut when idle for 30s\n"),
        "{text}"
    );
    assert!(
        text.contains("      stream: no (whole answers)\n"),
        "{text}"
    );

    // Whole answers above the SDKs' limit are refused on the real Anthropic API, at the
    // field that made them whole.
    let e = load_with_env(
        &job(
            "  anthropic: { stream: never }",
            "provider: anthropic",
            "  - { id: a, prompt: p, max_tokens: 32000 }\n  - { id: b, prompt: p, max_tokens: 32000, stream: never }\n",
        ),
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("tasks[0].max_tokens: 32000 is too large for a non-streaming request"),
        "{e}"
    );
    assert!(e.contains("tasks[1].stream: 32000 is too large"), "{e}");
    let e = load_with_env(
        &job(
            "  anthropic: { stream_options: omit }",
            "provider: anthropic",
            "  - { id: a, prompt: p }\n",
        ),
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("providers.anthropic.stream_options: does not apply to the anthropic protocol"),
        "{e}"
    );
}

#[test]
fn batch_mode_resolves_field_by_field_and_refuses_what_the_apis_refuse() {
    let plan = load(&format!(
        "name: t\nproviders:\n  sim: {{ batch: {{ window: 30s, max_requests: 5000 }} }}\ndefaults:\n  model: claude-sonnet-4-5\n  batch: {{ mode: on, max_wait: 12h }}\n  sim: {INLINE}\ntasks:\n  - {{ id: a, prompt: p }}\n  - {{ id: b, prompt: p, batch: {{ mode: off }} }}\n  - {{ id: c, prompt: p, batch: {{ window: 1s }}, max_tokens: 64000 }}\n"
    ))
    .unwrap();
    let a = plan.tasks[0].batch.unwrap();
    assert_eq!(
        (a.window.0.as_secs(), a.max_requests, a.max_wait.0.as_secs()),
        (30, 5000, 12 * 3600)
    );
    assert!(plan.tasks[1].batch.is_none());
    assert_eq!(plan.tasks[2].batch.unwrap().window.0.as_secs(), 1);
    // A batched answer is never streamed, whatever max_tokens.
    assert!(!plan.tasks[2].stream);
    let price = plan.tasks[0].price.as_ref().unwrap();
    assert!(price.batched);
    assert_eq!(
        price.input,
        plan.tasks[1].price.as_ref().unwrap().input / rust_decimal::Decimal::TWO
    );
    for (fields, says) in [
        ("{ mode: on }, stream: always", "never streamed"),
        ("{ mode: on, max_requests: 0 }", "from 1 to 100000"),
        ("{ mode: on, max_requests: 200000 }", "from 1 to 100000"),
        ("{ mode: on, window: 2h }", "over 1h"),
        ("{ mode: on, max_wait: 48h }", "at most 24h"),
        ("{ mode: sometimes }", "unknown variant"),
        ("{ mode: on, windw: 1s }", "unknown field"),
    ] {
        let e = load(&format!(
            "name: t\ndefaults:\n  model: claude-sonnet-4-5\n  sim: {INLINE}\ntasks:\n  - {{ id: a, prompt: p, batch: {fields} }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains(says), "{fields}: {e}");
        assert!(e.contains("tasks[0]"), "{fields}: {e}");
    }
}

#[test]
fn a_number_or_boolean_as_a_script_is_a_path_as_for_any_text() {
    let job: JobFile = super::parse_yaml(
        "job.yaml",
        "name: t\ntasks:\n  - { id: a, sim: 5 }\n  - { id: b, sim: true }\n",
    )
    .unwrap();
    let paths: Vec<_> = job
        .tasks
        .iter()
        .map(|t| match &t.sim {
            Some(SimSource::Path(p)) => p.clone(),
            _ => String::new(),
        })
        .collect();
    assert_eq!(paths, ["5", "true"]);
}

#[test]
fn tasks_without_a_valid_id_are_each_told_so_once() {
    let e = load(&format!(
        "name: t\ndefaults: {{ model: m, prompt: p, sim: {INLINE} }}\nmatrix:\n  max_tokens: [100, 200]\ntasks:\n  - {{ id: \"a/b\" }}\n  - {{ id: \"c/d\" }}\n  - {{}}\n"
    ))
    .unwrap_err();
    let lines: Vec<String> = e.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[0].contains("tasks[0].id: invalid task id \"a/b\""),
        "{lines:#?}"
    );
    assert!(
        lines[1].contains("tasks[1].id: invalid task id \"c/d\""),
        "{lines:#?}"
    );
    assert!(
        lines[2].contains("tasks[2]: the task has no `id`"),
        "{lines:#?}"
    );
}
