//! Pacing with no limits configured: to the limits the simulator's answers state in
//! each API's headers (hidden from the job), and, against a simulator that states
//! none, to an adaptive rate found from its 429s.

use crate::common::Case;

/// `tasks` tasks of `turns` requests each on provider `provider` (a simulator with the
/// hidden `server_limits`), nothing configured for the runner.
fn job(provider: &str, server_limits: &str, tasks: usize, turns: usize) -> String {
    let mut script = String::new();
    for _ in 0..turns - 1 {
        script.push_str("        - content: [ { tool_use: { name: get_time, input: {} } } ]\n");
    }
    script.push_str("        - content: [ { text: done } ]\n");
    let ids: String = (0..tasks)
        .map(|i| format!("  - {{ id: t{i}, prompt: go }}\n"))
        .collect();
    format!(
        "name: learned\nconcurrency: {tasks}\nproviders:\n  {provider}\n    server_limits: {server_limits}\n    max_rate_limit_retries: 50\ndefaults:\n  provider: hidden\n  model: claude-haiku-4-5\n  tools: [get_time]\n  limits: {{ max_repeats: off, time_limit: 10m, max_turns: 100 }}\n  sim:\n      turns:\n{script}tasks:\n{ids}"
    )
}

/// Requests a second between the first request and the last.
fn rate(log: &[agentbatch::sim::RecordedRequest]) -> f64 {
    let first = log.iter().map(|r| r.at_ms).min().unwrap();
    let last = log.iter().map(|r| r.at_ms).max().unwrap();
    (log.len() - 1) as f64 * 1000.0 / (last - first).max(1) as f64
}

/// 300 requests over a minute against Anthropic's headers from a hidden 300 rpm: no
/// 429, and at least 95% of the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_limit_headers_pace_a_job_that_configures_none() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "hidden:\n    protocol: anthropic\n    simulator: true",
            "{ rpm: 300 }",
            10,
            30,
        ))
        .await;
    let log = ran.sim.requests();
    assert_eq!(log.len(), 300);
    let refused = log.iter().filter(|r| r.status == 429).count();
    assert_eq!(refused, 0, "paced to the stated limit, nothing is refused");
    let r = rate(&log);
    assert!(r >= 0.95 * 5.0, "{r:.2} requests a second, below 95% of 5");
    assert!(ran.rows().iter().all(|r| r["stop_reason"] == "completed"));
    // What was learned: in a transcript, in run.json, in the summary.
    let any = (0..10).any(|i| !ran.events(&format!("t{i}"), "rate_learned").is_empty());
    assert!(any, "some task's transcript has the change");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ran.dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(
        run["learned_limits"]["hidden"][0]["rpm"], 300,
        "{}",
        run["learned_limits"]
    );
    assert!(ran
        .outcome
        .summary
        .table()
        .contains("rate limits learned from hidden's answers: 300 rpm"));
}

/// OpenAI's headers (`x-ratelimit-limit-requests`, `x-ratelimit-limit-tokens`) from a
/// hidden 600 rpm: no 429, and at least 95% of the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_limit_headers_pace_a_job_that_configures_none() {
    let case = Case::new();
    let ran = case
        .run(
            &job(
                "hidden:\n    protocol: openai-chat\n    simulator: true",
                "{ rpm: 600, itpm: 10000000 }",
                8,
                20,
            )
            .replace("claude-haiku-4-5", "gpt-5.4-mini"),
        )
        .await;
    let log = ran.sim.requests();
    assert_eq!(log.len(), 160);
    assert_eq!(log.iter().filter(|r| r.status == 429).count(), 0);
    let r = rate(&log);
    assert!(
        r >= 0.95 * 10.0,
        "{r:.2} requests a second, below 95% of 10"
    );
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ran.dir.join("run.json")).unwrap()).unwrap();
    let learned = &run["learned_limits"]["hidden"][0];
    assert_eq!(learned["rpm"], 600, "{learned}");
    assert_eq!(learned["tpm"], 10000000, "{learned}");
}

/// A server with a hidden 300 rpm that states no limits (its 429s still say
/// retry-after): at most 2% of 300 requests are refused, and the run reaches at least
/// 80% of the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_states_no_limits_is_paced_by_an_adaptive_rate() {
    let case = Case::new();
    let ran = case
        .run(&job(
            "hidden:\n    protocol: anthropic\n    simulator: true",
            "{ rpm: 300, headers: false }",
            10,
            30,
        ))
        .await;
    let log = ran.sim.requests();
    let refused = log.iter().filter(|r| r.status == 429).count();
    let answered = log.len() - refused;
    assert_eq!(answered, 300);
    let first = log.iter().map(|r| r.at_ms).min().unwrap();
    let when: Vec<u64> = log
        .iter()
        .filter(|r| r.status == 429)
        .map(|r| r.at_ms - first)
        .collect();
    assert!(
        refused * 100 <= 2 * log.len(),
        "{refused} of {} requests refused, at {when:?} ms",
        log.len()
    );
    let r = answered as f64 * 1000.0
        / (log.iter().map(|r| r.at_ms).max().unwrap() - log.iter().map(|r| r.at_ms).min().unwrap())
            as f64;
    assert!(r >= 0.8 * 5.0, "{r:.2} answers a second, below 80% of 5");
    assert!(
        log.iter().all(|r| !r.headers.is_empty()),
        "the requests were recorded"
    );
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ran.dir.join("run.json")).unwrap()).unwrap();
    assert!(
        run["learned_limits"].is_null(),
        "nothing stated, nothing learned: {run}"
    );
    // Near the hidden limit: below it after a cut, a little above while it probes.
    let adaptive = run["adaptive_rpm"]["hidden"].as_u64().unwrap_or(0);
    assert!((200..=400).contains(&adaptive), "{}", run["adaptive_rpm"]);
}
