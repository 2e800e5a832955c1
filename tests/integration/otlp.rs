//! OpenTelemetry traces against a real OTLP/HTTP receiver (tests/otlp/receiver.py,
//! decoding with the official protobuf definitions): the span tree and the GenAI
//! conventions' attributes for all three protocols, content only on request and never a
//! key, the standard variables, and a collector that is down or hangs.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentbatch::job;
use agentbatch::report::ProgressMode;
use agentbatch::run::{self, RunOptions};
use agentbatch::sim::Sim;
use agentbatch::tools::Registry;
use agentbatch::trace::Settings;
use rust_decimal::Decimal;
use serde_json::Value;

use crate::common::{bin, read_csv, Case};

/// The receiver, on a free port, until dropped.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) port: u16,
    dir: tempfile::TempDir,
}

impl Receiver {
    /// Started with `modes` (receiver.py's flags: `--stall`, `--status 401`, ...).
    pub(crate) fn start(modes: &[&str]) -> Receiver {
        let python = std::env::var("AGENTBATCH_TEST_PYTHON").unwrap_or_else(|_| {
            panic!("AGENTBATCH_TEST_PYTHON is not set: run the tests with ./tests/run.sh, which makes the Python environment with the OTLP protobuf definitions")
        });
        let dir = tempfile::tempdir().expect("temp dir");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let mut cmd = Command::new(python);
        cmd.arg(script).arg("--out").arg(dir.path()).args(modes);
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("the receiver starts");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the receiver prints its port");
        let port = line.trim().parse().unwrap_or_else(|_| {
            panic!("the receiver printed {line:?}, not a port (is opentelemetry-proto installed?)")
        });
        Receiver { child, port, dir }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub(crate) fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(name)).unwrap_or_default()
    }

    pub(crate) fn spans(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.file("spans.jsonl"))
            .lines()
            .map(|l| serde_json::from_str(l).expect("a span line is JSON"))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

pub(crate) fn has(span: &Value, key: &str) -> bool {
    span["attributes"].get(key).is_some()
}

/// Spans of one task (by its root's `agentbatch.task_key`), root first.
pub(crate) fn task_spans(spans: &[Value], task: &str) -> (Value, Vec<Value>) {
    let root = spans
        .iter()
        .find(|s| attr(s, "agentbatch.task_key") == task)
        .unwrap_or_else(|| panic!("no root span for {task}"))
        .clone();
    let children = spans
        .iter()
        .filter(|s| s["trace_id"] == root["trace_id"] && s["span_id"] != root["span_id"])
        .cloned()
        .collect();
    (root, children)
}

const OPENAI: &str =
    "providers:\n  sim-responses: { protocol: openai-responses, simulator: true }\n  sim-chat: { protocol: openai-chat, simulator: true }\n";

pub(crate) const TOOL_THEN_TEXT: &str = "    sim:\n      turns:\n        - content: [ { tool_use: { name: get_time, input: { timezone: UTC } } } ]\n        - content: [ { text: done } ]\n";

/// Runs `yaml` in-process against a simulator of the test's, with traces to `rx`.
pub(crate) async fn run_traced(
    case: &Case,
    yaml: &str,
    rx: &Receiver,
    content: bool,
    vars: &[(&str, &str)],
) -> PathBuf {
    let path = case.write("job.yaml", yaml);
    let plan = job::load(&path, &Registry::builtin()).unwrap_or_else(|e| panic!("{e}"));
    let mut opts = RunOptions::new(case.path("reports"));
    opts.run_id = Some("r1".into());
    opts.progress = ProgressMode::Quiet;
    opts.sim = Some(Arc::new(Sim::start_local().await.expect("sim")));
    opts.trace = Settings::resolve(Some(&rx.url()), content, |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    })
    .expect("valid trace settings");
    let outcome = run::run(plan, opts).await.expect("run finishes");
    let t = outcome.telemetry.expect("telemetry counts");
    assert_eq!(t.dropped, 0, "{t:?}");
    assert_eq!(t.exported, t.spans);
    case.path("reports/r1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protocol_gets_one_trace_per_task_with_the_genai_spans_and_attributes() {
    let rx = Receiver::start(&[]);
    let case = Case::new();
    let yaml = format!(
        "name: traced\n{OPENAI}toolsets:\n  guarded: {{ tools: [get_time], policy: {{ deny: [get_time] }} }}\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  tools: [get_time]\ntasks:\n  - id: anthropic\n    prompt: p\n{TOOL_THEN_TEXT}  - id: responses\n    provider: sim-responses\n    model: gpt-5.4\n    prompt: p\n{TOOL_THEN_TEXT}  - id: chat\n    provider: sim-chat\n    model: gpt-5.4\n    prompt: p\n{TOOL_THEN_TEXT}  - id: denied\n    toolset: guarded\n    prompt: p\n{TOOL_THEN_TEXT}  - id: flaky\n    prompt: p\n    sim:\n      turns:\n        - faults: [ {{ status: 500, error_type: api_error, message: boom }} ]\n          content: [ {{ text: fine }} ]\n"
    );
    let dir = run_traced(&case, &yaml, &rx, false, &[]).await;
    let spans = rx.spans();
    let rows = read_csv(&dir.join("results.csv"));
    let mut traces = std::collections::HashSet::new();
    for (task, provider, model) in [
        ("anthropic", "anthropic", "claude-sonnet-4-5"),
        ("responses", "openai", "gpt-5.4"),
        ("chat", "openai", "gpt-5.4"),
    ] {
        let (root, children) = task_spans(&spans, task);
        assert!(
            traces.insert(root["trace_id"].clone()),
            "one trace per task"
        );
        assert_eq!(root["name"], "invoke_agent traced");
        assert_eq!(root["kind"], "SPAN_KIND_INTERNAL");
        assert_eq!(root["parent_span_id"], "");
        assert_eq!(root["scope"], "agentbatch");
        assert_eq!(root["resource"]["service.name"], "agentbatch");
        for (k, v) in [
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.provider.name", provider),
            ("gen_ai.request.model", model),
            ("gen_ai.agent.name", "traced"),
            ("agentbatch.run_id", "r1"),
            ("agentbatch.task_id", task),
            ("agentbatch.outcome", "unchecked"),
            ("agentbatch.stop_reason", "completed"),
        ] {
            assert_eq!(attr(&root, k), v, "{task}: {k} in {root}");
        }
        let row = rows.iter().find(|r| r["task_id"] == task).expect("row");
        // The task's figures are its row's.
        let tokens =
            |cols: &[&str]| -> u64 { cols.iter().map(|c| row[*c].parse::<u64>().unwrap()).sum() };
        assert_eq!(
            attr(&root, "gen_ai.usage.input_tokens").as_u64(),
            Some(tokens(&[
                "input_tokens",
                "cache_read_tokens",
                "cache_write_tokens"
            ]))
        );
        assert_eq!(
            attr(&root, "gen_ai.usage.output_tokens").as_u64(),
            Some(tokens(&["output_tokens"]))
        );
        let cost = Decimal::from_str(
            attr(&root, "agentbatch.cost_usd")
                .as_str()
                .expect("cost is a string"),
        )
        .unwrap();
        assert_eq!(cost, Decimal::from_str(&row["cost_usd"]).unwrap(), "{task}");
        // Children: two requests, one tool call, all under the task's span and inside it.
        let chats: Vec<&Value> = children
            .iter()
            .filter(|s| attr(s, "gen_ai.operation.name") == "chat")
            .collect();
        let tools: Vec<&Value> = children
            .iter()
            .filter(|s| attr(s, "gen_ai.operation.name") == "execute_tool")
            .collect();
        assert_eq!(
            (chats.len(), tools.len(), children.len()),
            (2, 1, 3),
            "{task}: {children:?}"
        );
        for c in &children {
            assert_eq!(c["parent_span_id"], root["span_id"]);
            assert!(c["start_ns"].as_u64() >= root["start_ns"].as_u64());
            assert!(c["end_ns"].as_u64() <= root["end_ns"].as_u64());
            assert!(c["start_ns"].as_u64() <= c["end_ns"].as_u64());
        }
        let mut chat_input = 0;
        let mut chat_cost = Decimal::ZERO;
        for c in &chats {
            assert_eq!(c["name"], format!("chat {model}"));
            assert_eq!(c["kind"], "SPAN_KIND_CLIENT");
            assert_eq!(attr(c, "gen_ai.provider.name"), provider);
            assert_eq!(attr(c, "gen_ai.request.max_tokens"), 1024);
            assert_eq!(attr(c, "server.address"), "127.0.0.1");
            assert!(attr(c, "server.port").as_u64().is_some());
            assert!(
                attr(c, "gen_ai.response.id")
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{c}"
            );
            assert!(attr(c, "gen_ai.response.model").as_str().is_some(), "{c}");
            assert!(
                attr(c, "gen_ai.response.finish_reasons")
                    .as_array()
                    .is_some_and(|a| a.len() == 1),
                "{c}"
            );
            assert!(has(c, "gen_ai.usage.cache_read.input_tokens"));
            assert!(has(c, "gen_ai.usage.cache_creation.input_tokens"));
            assert_eq!(c["status"]["code"], 0);
            chat_input += attr(c, "gen_ai.usage.input_tokens").as_u64().unwrap();
            chat_cost +=
                Decimal::from_str(attr(c, "agentbatch.cost_usd").as_str().unwrap()).unwrap();
        }
        assert_eq!(
            Some(chat_input),
            attr(&root, "gen_ai.usage.input_tokens").as_u64()
        );
        assert_eq!(chat_cost, cost);
        // The tool call runs between the two requests.
        let (first, second) = if chats[0]["start_ns"].as_u64() < chats[1]["start_ns"].as_u64() {
            (chats[0], chats[1])
        } else {
            (chats[1], chats[0])
        };
        let tool = tools[0];
        assert!(first["end_ns"].as_u64() <= tool["start_ns"].as_u64());
        assert!(tool["end_ns"].as_u64() <= second["start_ns"].as_u64());
        assert_eq!(tool["name"], "execute_tool get_time");
        assert_eq!(tool["kind"], "SPAN_KIND_INTERNAL");
        assert_eq!(attr(tool, "gen_ai.tool.name"), "get_time");
        assert_eq!(attr(tool, "gen_ai.tool.type"), "function");
        assert_eq!(attr(tool, "agentbatch.policy.decision"), "allow");
        let transcript =
            std::fs::read_to_string(dir.join(format!("transcripts/{task}.jsonl"))).unwrap();
        let call_id = attr(tool, "gen_ai.tool.call.id").as_str().unwrap();
        assert!(!call_id.is_empty() && transcript.contains(call_id));
        // Content is off by default.
        for s in std::iter::once(&root).chain(children.iter()) {
            for key in [
                "gen_ai.input.messages",
                "gen_ai.output.messages",
                "gen_ai.tool.call.arguments",
                "gen_ai.tool.call.result",
            ] {
                assert!(!has(s, key), "{key} without --otlp-content: {s}");
            }
        }
    }
    // A denied call: the policy's decision and rule, an error.
    let (_, children) = task_spans(&spans, "denied");
    let tool = children
        .iter()
        .find(|s| attr(s, "gen_ai.operation.name") == "execute_tool")
        .expect("tool span");
    assert_eq!(attr(tool, "agentbatch.policy.decision"), "deny");
    assert!(
        attr(tool, "agentbatch.policy.rule")
            .as_str()
            .is_some_and(|r| r.contains("get_time")),
        "{tool}"
    );
    assert_eq!(attr(tool, "error.type"), "denied");
    assert_eq!(tool["status"]["code"], 2, "STATUS_CODE_ERROR");
    // A failed request: its own span with the status as error.type, then the retry.
    let (root, children) = task_spans(&spans, "flaky");
    let mut chats: Vec<&Value> = children.iter().collect();
    chats.sort_by_key(|s| s["start_ns"].as_u64());
    assert_eq!(chats.len(), 2);
    assert_eq!(attr(chats[0], "error.type"), "500");
    assert_eq!(chats[0]["status"]["code"], 2);
    assert!(chats[0]["status"]["message"]
        .as_str()
        .unwrap()
        .contains("boom"));
    assert_eq!(attr(chats[0], "agentbatch.attempt"), 1);
    assert_eq!(attr(chats[1], "agentbatch.attempt"), 2);
    assert!(!has(chats[1], "error.type"));
    assert_eq!(attr(&root, "agentbatch.retries"), 1);
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["telemetry"]["dropped"], 0);
    assert_eq!(
        run_json["telemetry"]["exported"].as_u64(),
        Some(spans.len() as u64)
    );
}

/// A job on a real-provider path to the test's simulator, with the key in AB_TEST_KEY.
fn keyed_job(case: &Case, sim: &Sim) {
    case.write(
        "job.yaml",
        &format!(
            "name: keyed\nproviders:\n  anthropic: {{ base_url: \"{}\", api_key_env: AB_TEST_KEY }}\ndefaults: {{ provider: anthropic, model: claude-sonnet-4-5, tools: [get_time] }}\ntasks:\n  - {{ id: a, prompt: p }}\n",
            sim.base_url()
        ),
    );
}

pub(crate) async fn binary(
    case: &Case,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, Duration) {
    let dir = case.dir.path().to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut cmd = bin();
        // The test's environment must not leak into the binary's trace settings.
        for (v, _) in std::env::vars() {
            if v.starts_with("OTEL_") {
                cmd.env_remove(v);
            }
        }
        let out = cmd
            .args(&args)
            .envs(env)
            .current_dir(dir)
            .output()
            .expect("binary runs");
        (out, started.elapsed())
    })
    .await
    .unwrap()
}

/// Runs the binary, which must exit 0; its stdout and how long it took.
pub(crate) async fn run_ok(case: &Case, args: &[&str], env: &[(&str, &str)]) -> (String, Duration) {
    let (out, took) = binary(case, args, env).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), took)
}

/// A job on the run's own simulator with `tasks` (YAML list items).
pub(crate) fn sim_job(case: &Case, name: &str, tasks: &str) {
    case.write(
        "job.yaml",
        &format!("name: {name}\ndefaults: {{ provider: sim, model: claude-sonnet-4-5, tools: [get_time] }}\ntasks:\n{tasks}"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_only_with_the_flag_and_never_a_key_or_a_header_value() {
    let rx = Receiver::start(&[]);
    let case = Case::new();
    let sim = Sim::start_local().await.unwrap();
    let script = serde_yaml::from_str(
        "turns:\n  - content: [ { tool_use: { name: get_time, input: { timezone: UTC } } } ]\n  - content: [ { text: all done } ]\n",
    )
    .unwrap();
    sim.register("", Arc::new(script));
    keyed_job(&case, &sim);
    let key = "sk-ant-otlp-test-5b1e-never-export-me";
    let token = "collector-token-9f2c-never-export-me";
    let url = rx.url();
    let header = format!("authorization=Bearer {token}");
    let args = [
        "run",
        "job.yaml",
        "--run-id",
        "r",
        "--quiet",
        "--otlp",
        &url,
        "--otlp-content",
    ];
    let env = [
        ("AB_TEST_KEY", key),
        ("OTEL_EXPORTER_OTLP_HEADERS", header.as_str()),
    ];
    let (stdout, _) = run_ok(&case, &args, &env).await;
    let bodies = rx.file("bodies.bin");
    assert!(!bodies.is_empty());
    for secret in [key, token] {
        assert!(
            !bodies.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} was exported"
        );
    }
    // The collector got its header, and the contents came with the flag.
    let headers = String::from_utf8_lossy(&rx.file("headers.jsonl")).to_string();
    assert!(headers.contains(&format!("Bearer {token}")), "{headers}");
    let spans = rx.spans();
    let chat = spans
        .iter()
        .find(|s| attr(s, "gen_ai.operation.name") == "chat" && attr(s, "agentbatch.turn") == 1)
        .expect("chat");
    let input: Value =
        serde_json::from_str(attr(chat, "gen_ai.input.messages").as_str().unwrap()).unwrap();
    assert_eq!(input[0]["role"], "user");
    assert!(attr(chat, "gen_ai.output.messages")
        .as_str()
        .unwrap()
        .contains("get_time"));
    let tool = spans
        .iter()
        .find(|s| attr(s, "gen_ai.operation.name") == "execute_tool")
        .expect("tool");
    assert!(attr(tool, "gen_ai.tool.call.arguments")
        .as_str()
        .unwrap()
        .contains("UTC"));
    assert!(has(tool, "gen_ai.tool.call.result"));
    assert!(stdout.contains("traces: 4 spans"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_variable_alone_turns_traces_on_and_without_it_nothing_is_sent() {
    let rx = Receiver::start(&[]);
    let case = Case::new();
    sim_job(
        &case,
        "env",
        &format!("  - id: a\n    prompt: p\n{TOOL_THEN_TEXT}"),
    );
    let (stdout, _) = run_ok(
        &case,
        &["run", "job.yaml", "--run-id", "off", "--quiet"],
        &[],
    )
    .await;
    assert!(!stdout.contains("traces:"), "{stdout}");
    let url = rx.url();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
        ("OTEL_SERVICE_NAME", "nightly-evals"),
    ];
    run_ok(
        &case,
        &["run", "job.yaml", "--run-id", "on", "--quiet"],
        &env,
    )
    .await;
    let spans = rx.spans();
    assert_eq!(spans.len(), 4, "only the second run sent spans: {spans:?}");
    let roots: Vec<&Value> = spans.iter().filter(|s| s["parent_span_id"] == "").collect();
    assert_eq!(roots.len(), 1);
    assert_eq!(attr(roots[0], "agentbatch.run_id"), "on");
    assert_eq!(spans[0]["resource"]["service.name"], "nightly-evals");
    let args = [
        "run", "job.yaml", "--run-id", "disabled", "--quiet", "--otlp", &url,
    ];
    run_ok(&case, &args, &[("OTEL_SDK_DISABLED", "true")]).await;
    assert_eq!(rx.spans().len(), 4, "OTEL_SDK_DISABLED=true sends nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_or_hangs_costs_dropped_spans_not_time_or_the_exit_code() {
    let case = Case::new();
    let tasks: String = (0..6)
        .map(|i| format!("  - id: t{i}\n    prompt: p\n{TOOL_THEN_TEXT}"))
        .collect();
    sim_job(&case, "down", &tasks);
    let (_, baseline) = run_ok(
        &case,
        &["run", "job.yaml", "--run-id", "plain", "--quiet"],
        &[],
    )
    .await;
    // A closed port: bound, then let go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let stalled = Receiver::start(&["--stall"]);
    for (id, url) in [
        ("down", format!("http://127.0.0.1:{closed}")),
        ("stalled", stalled.url()),
    ] {
        let args = ["run", "job.yaml", "--run-id", id, "--quiet", "--otlp", &url];
        let (stdout, took) = run_ok(&case, &args, &[]).await;
        assert!(
            took < baseline + traces_flush_bound(),
            "{id}: {took:?} against {baseline:?} without traces"
        );
        assert!(stdout.contains("traces: 24 spans"), "{id}: {stdout}");
        assert!(
            stdout.contains("no span is known to have reached the collector")
                && !stdout.contains("not slowed"),
            "{id}: {stdout}"
        );
        let run_json: Value = serde_json::from_str(
            &std::fs::read_to_string(case.path(&format!("reports/{id}/run.json"))).unwrap(),
        )
        .unwrap();
        let t = &run_json["telemetry"];
        let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"));
        assert_eq!((n("spans"), n("exported")), (24, 0), "{id}: {t}");
        assert_eq!(n("dropped") + n("unconfirmed"), 24, "{id}: {t}");
        if id == "down" {
            // Refused at once: nothing is in doubt, and the reason is the connection's.
            assert_eq!(n("dropped"), 24, "{t}");
            let why = t["failure"].as_str().unwrap_or_default();
            assert!(why.contains("connect"), "{t}");
            assert!(
                stdout.contains("24 dropped") && stdout.contains(why),
                "{stdout}"
            );
        } else {
            // Sent and never answered: the collector may have them.
            assert!(n("unconfirmed") > 0, "{t}");
            assert!(stdout.contains("unconfirmed"), "{stdout}");
        }
        let rows = read_csv(&case.path(&format!("reports/{id}/results.csv")));
        assert!(
            rows.iter().all(|r| r["stop_reason"] == "completed"),
            "{rows:?}"
        );
    }
}

/// What a dead collector may add to a run: the bounded flush at the end, and slack for
/// a loaded machine.
fn traces_flush_bound() -> Duration {
    agentbatch::trace::FLUSH_TIMEOUT + Duration::from_secs(3)
}
