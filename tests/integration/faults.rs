//! Provider faults: malformed and truncated bodies fail only their own task; retryable
//! errors are retried as the SDKs do; others are not.

use std::str::FromStr;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;

use crate::common::{job, num, Case};

const GOOD: &str = "    sim: { turns: [ { content: [ { tool_use: { name: get_time, input: {} } } ] }, { content: [ { text: fine } ] } ] }\n";

#[tokio::test]
async fn malformed_responses_fail_their_task_while_the_others_complete() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "  limits: { max_cost_usd: 1 }\n",
            &format!(
                r#"  - id: good-1
    prompt: p
{GOOD}  - id: truncated
    prompt: p
    sim: {{ turns: [ {{ content: [ {{ text: "cut short" }} ], truncate_body: true }} ] }}
  - id: html
    prompt: p
    sim: {{ turns: [ {{ raw_body: "<html><body>502 Bad Gateway</body></html>" }} ] }}
  - id: no-stop-reason
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","role":"assistant","content":[],"usage":{{"input_tokens":1,"output_tokens":1}}}}' }} ] }}
  - id: no-usage
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","role":"assistant","content":[{{"type":"text","text":"hi"}}],"stop_reason":"end_turn"}}' }} ] }}
  - id: tool-use-without-id
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","content":[{{"type":"tool_use","name":"get_time","input":{{}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":1,"output_tokens":1}}}}' }} ] }}
  - id: tool-use-empty-id
    prompt: p
    sim: {{ turns: [ {{ raw_body: '{{"type":"message","content":[{{"type":"tool_use","id":"","name":"get_time","input":{{}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":1,"output_tokens":1}}}}' }} ] }}
  - id: good-2
    prompt: p
{GOOD}"#
            ),
        ))
        .await;
    assert_eq!(ran.rows().len(), 8);
    for good in ["good-1", "good-2"] {
        assert_eq!(ran.stop(good), "completed");
    }
    for (task, needle) in [
        ("truncated", "not JSON"),
        ("html", "not JSON"),
        ("no-stop-reason", "stop_reason"),
        ("no-usage", "usage"),
        ("tool-use-without-id", "id"),
        ("tool-use-empty-id", "empty `id`"),
    ] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "provider_error", "{task}");
        assert_eq!(row["outcome"], "error", "{task}");
        assert!(
            row["stop_detail"].contains(needle),
            "{task}: {}",
            row["stop_detail"]
        );
        assert!(
            row["stop_detail"].contains("request-id req_sim_"),
            "{task}: {}",
            row["stop_detail"]
        );
        // it was answered, so it may have been billed: the reservation counts as spent
        assert!(
            Decimal::from_str(&row["cost_usd"]).unwrap() > Decimal::ZERO,
            "{task}"
        );
        assert_eq!(
            num(&row, "retries"),
            0,
            "{task}: malformed bodies are not retried"
        );
    }
}

#[tokio::test]
async fn rate_limits_and_overload_are_retried_honouring_retry_after() {
    let case = Case::new();
    let started = Instant::now();
    let ran = case
        .run(
            &job(
                "",
                r#"  - id: t
    prompt: p
    sim:
      turns:
        - faults: [ { status: 429, retry_after: 1s }, { status: 529 }, { disconnect: true } ]
          content: [ { text: "finally" } ]
"#,
            )
            .replace(
                "tasks:\n",
                "providers:\n  sim: { max_retries: 3 }\ntasks:\n",
            ),
        )
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    assert_eq!(num(&row, "retries"), 3);
    assert_eq!(num(&row, "turns"), 1);
    assert_eq!(ran.requests("t").len(), 4);
    // retry-after 1s, then 0.5 s x jitter, then 1 s x jitter
    assert!(started.elapsed() >= Duration::from_millis(1000 + 375 + 750));
    let failed = ran.events("t", "attempt_failed");
    assert_eq!(failed.len(), 3);
    assert_eq!(failed[0]["provider_paused_ms"], 1000);
    assert_eq!(failed[0]["rate_limited"], true);
    assert!(failed[0]["error"]
        .as_str()
        .unwrap()
        .contains("429 rate_limit_error"));
    assert!(failed[1]["error"]
        .as_str()
        .unwrap()
        .contains("529 overloaded_error"));
}

#[tokio::test]
async fn retries_stop_at_max_retries_and_client_errors_are_not_retried() {
    let case = Case::new();
    let ran = case
        .run(
            &job(
                "",
                r#"  - id: overloaded
    prompt: p
    sim:
      turns:
        - faults: [ { status: 529 }, { status: 529 }, { status: 529 }, { status: 529 } ]
          content: [ { text: never } ]
  - id: bad-request
    prompt: p
    sim:
      turns:
        - faults: [ { status: 400, message: "messages: roles must alternate" } ]
          content: [ { text: never } ]
  - id: not-retry
    prompt: p
    sim:
      turns:
        - faults: [ { status: 401 } ]
          content: [ { text: never } ]
"#,
            )
            .replace(
                "tasks:\n",
                "providers:\n  sim: { max_retries: 2 }\ntasks:\n",
            ),
        )
        .await;
    let row = ran.row("overloaded");
    assert_eq!(row["stop_reason"], "provider_error");
    assert_eq!(num(&row, "retries"), 2);
    assert!(
        row["stop_detail"].contains("after 2 retries"),
        "{}",
        row["stop_detail"]
    );
    assert_eq!(ran.requests("overloaded").len(), 3);
    let row = ran.row("bad-request");
    assert_eq!(row["stop_reason"], "provider_error");
    assert_eq!(num(&row, "retries"), 0);
    assert!(row["stop_detail"].contains("roles must alternate"));
    assert_eq!(ran.requests("not-retry").len(), 1);
    assert!(ran.row("not-retry")["stop_detail"].contains("authentication_error"));
}

#[tokio::test]
async fn script_running_out_is_a_provider_error_naming_the_script() {
    let case = Case::new();
    let ran = case
        .run(&job("", "  - id: t\n    prompt: p\n    sim: { turns: [ { content: [ { tool_use: { name: get_time, input: {} } } ] } ] }\n"))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "provider_error");
    assert!(
        row["stop_detail"].contains("has 1 turn(s)"),
        "{}",
        row["stop_detail"]
    );
}

/// A bare HTTP/1.1 server on 127.0.0.1 (one request per connection: an answer that
/// ends one says `connection: close`, or the client may send its next request on a
/// connection this server is closing, and retry): each connection's request head (up to the blank
/// line) is recorded, then `respond` writes whatever it likes.
fn raw_server(
    respond: impl Fn(&mut std::net::TcpStream) + Send + Sync + 'static,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (log, respond) = (seen.clone(), std::sync::Arc::new(respond));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let (log, respond) = (log.clone(), respond.clone());
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                // Read the body too: closing with unread bytes would reset the connection.
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                let _ = stream.read_exact(&mut body);
                log.lock().unwrap().push(head);
                respond(&mut stream);
            });
        }
    });
    (port, seen)
}

/// A redirect to another origin once took the Anthropic `x-api-key` with it (reqwest
/// strips only `Authorization`); no provider request follows a redirect now.
#[test]
fn a_provider_redirect_is_an_error_and_the_key_never_reaches_the_other_origin() {
    use std::io::Write;
    let (elsewhere, reached) = raw_server(|s| {
        let _ = s.write_all(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    });
    let target = format!("http://127.0.0.1:{elsewhere}/v1/messages");
    let location = target.clone();
    let (redirecting, asked) = raw_server(move |s| {
        let _ = write!(
            s,
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
    });
    let case = Case::new();
    case.write(
        "job.yaml",
        &format!(
            "name: r\nproviders:\n  anthropic: {{ base_url: \"http://127.0.0.1:{redirecting}\", api_key_env: AB_TEST_KEY }}\n  openai: {{ base_url: \"http://127.0.0.1:{redirecting}/v1\", api_key_env: AB_TEST_KEY }}\ntasks:\n  - {{ id: a, prompt: p, provider: anthropic, model: claude-sonnet-4-5 }}\n  - {{ id: o, prompt: p, provider: openai, model: gpt-5.4 }}\n"
        ),
    );
    let out = crate::common::bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet"])
        .env("AB_TEST_KEY", "sk-ant-secret-never-elsewhere")
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = crate::common::read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert_eq!(r["stop_reason"], "provider_error", "{r:?}");
        assert!(
            r["stop_detail"].contains(&format!("redirects to {target}")),
            "the error names the Location: {}",
            r["stop_detail"]
        );
        assert_eq!(num(r, "retries"), 0, "a redirect is not retried");
    }
    assert_eq!(asked.lock().unwrap().len(), 2, "each task asked once");
    assert!(
        reached.lock().unwrap().is_empty(),
        "a request followed the redirect: {:?}",
        reached.lock().unwrap()
    );
}

/// An endless 200 body once took the runner to 1.57 GB. It is abandoned at
/// `max_response_bytes`, counted at its worst case, and ends only its own task.
#[tokio::test]
async fn an_endless_or_oversized_body_is_abandoned_at_the_limit_and_charged_whole() {
    use std::io::Write;
    let (endless, _) = raw_server(|s| {
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
        );
        let chunk = [b'a'; 65536];
        let _ = s.write_all(b"1\r\n{\r\n");
        // Until the client hangs up.
        while write!(s, "10000\r\n").is_ok()
            && s.write_all(&chunk).is_ok()
            && s.write_all(b"\r\n").is_ok()
        {}
    });
    let (announced, _) = raw_server(|s| {
        let _ = s.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 10000000000\r\n\r\n{",
        );
        std::thread::sleep(Duration::from_secs(5));
    });
    // An endless error body: only its start is read and quoted; the 500 is retried.
    let (failing, asked) = raw_server(|s| {
        let _ = s
            .write_all(b"HTTP/1.1 500 Internal Server Error\r\ntransfer-encoding: chunked\r\n\r\n");
        let chunk = [b'e'; 65536];
        while write!(s, "10000\r\n").is_ok()
            && s.write_all(&chunk).is_ok()
            && s.write_all(b"\r\n").is_ok()
        {}
    });
    let case = Case::new();
    let providers = format!(
        "providers:\n  endless: {{ protocol: anthropic, base_url: \"http://127.0.0.1:{endless}\", api_key_env: AB_UNSET_KEY, api_key_optional: true, max_response_bytes: 1MiB }}\n  announced: {{ protocol: openai-chat, base_url: \"http://127.0.0.1:{announced}/v1\", api_key_env: AB_UNSET_KEY, api_key_optional: true }}\n  failing: {{ protocol: anthropic, base_url: \"http://127.0.0.1:{failing}\", api_key_env: AB_UNSET_KEY, api_key_optional: true, max_retries: 1 }}\n"
    );
    let yaml = job(
        "  limits: { max_cost_usd: 1 }\n",
        &format!("  - {{ id: endless, prompt: p, provider: endless }}\n  - {{ id: announced, prompt: p, provider: announced, model: gpt-5.4 }}\n  - {{ id: failing, prompt: p, provider: failing }}\n  - id: fine\n    prompt: p\n{GOOD}"),
    )
    .replacen("defaults:", &format!("{providers}defaults:"), 1);
    let started = Instant::now();
    let ran = case.run(&yaml).await;
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(ran.stop("fine"), "completed");
    let failing = ran.row("failing");
    assert_eq!(failing["stop_reason"], "provider_error", "{failing:?}");
    assert!(
        failing["stop_detail"].contains("HTTP 500") && failing["stop_detail"].contains("eeee"),
        "{}",
        failing["stop_detail"]
    );
    assert!(
        failing["stop_detail"].len() < 2_000,
        "only the start is quoted"
    );
    assert_eq!(asked.lock().unwrap().len(), 2, "retried once, as a 500 is");
    for (task, limit) in [("endless", "1048576"), ("announced", "67108864")] {
        let row = ran.row(task);
        assert_eq!(row["stop_reason"], "provider_error", "{row:?}");
        assert!(
            row["stop_detail"].contains(&format!("passed {limit} bytes (max_response_bytes)")),
            "{}",
            row["stop_detail"]
        );
        assert_eq!(num(&row, "retries"), 0);
        let reserved = ran.events(task, "reserve")[0]["reserved_usd"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            row["cost_usd"], reserved,
            "{task}: an abandoned answer may be billed: its worst case counts"
        );
    }
}
