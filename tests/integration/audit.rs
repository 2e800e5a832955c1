//! `agentbatch audit`: hand-made transcripts with one injected violation each (built from
//! a real simulator transcript), and real transcripts of every protocol, which must
//! audit clean.

use std::path::PathBuf;

use agentbatch::audit::{audit_file, ProblemKind, Severity};

use crate::common::Case;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/audit/{name}.jsonl"))
}

#[test]
fn the_clean_fixture_has_no_problems() {
    let r = audit_file(&fixture("clean")).expect("fixture reads");
    assert!(r.problems.is_empty(), "{r}");
    assert_eq!((r.turns, r.calls, r.violations()), (2, 2, 0));
    assert!(r.finished);
}

/// A problem's kind and call id.
type Expected = (ProblemKind, Option<&'static str>);

#[test]
fn each_injected_violation_is_found_with_its_turn_and_call_id() {
    // (fixture, kind, call id) of each expected violation; all are in turn 1's calls
    let cases: &[(&str, &[Expected])] = &[
        (
            "undeclared-tool",
            &[(
                ProblemKind::UndeclaredTool,
                Some("toolu_sim_71bdf3d8d7ee4657"),
            )],
        ),
        ("missing-id", &[(ProblemKind::MalformedCall, None)]),
        (
            "duplicate-id",
            &[(
                ProblemKind::DuplicateCallId,
                Some("call_sim_820bffe8fec28bd2"),
            )],
        ),
        (
            "no-decision",
            &[(ProblemKind::NoDecision, Some("call_sim_5b83d9b1028dc10d"))],
        ),
        (
            "missing-result",
            &[(
                ProblemKind::MissingResult,
                Some("toolu_sim_71bdf3d8d7ee4657"),
            )],
        ),
        (
            "orphan-result",
            &[(ProblemKind::OrphanResult, Some("call_sim_000000000000dead"))],
        ),
        (
            "wrong-id",
            &[
                (
                    ProblemKind::MissingResult,
                    Some("call_sim_bf3c9b2e75e9a820"),
                ),
                (ProblemKind::OrphanResult, Some("call_sim_0000000000000bad")),
            ],
        ),
        (
            "misplaced-result",
            &[
                (
                    ProblemKind::MisplacedResult,
                    Some("toolu_sim_f746d9f8ef15583a"),
                ),
                (
                    ProblemKind::MisplacedResult,
                    Some("toolu_sim_71bdf3d8d7ee4657"),
                ),
            ],
        ),
    ];
    for (name, expected) in cases {
        let r = audit_file(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<(ProblemKind, Option<&str>)> = r
            .problems
            .iter()
            .map(|p| (p.kind, p.call_id.as_deref()))
            .collect();
        assert_eq!(&got, expected, "{name}:\n{r}");
        for p in &r.problems {
            assert_eq!(p.severity, Severity::Violation, "{name}: {p}");
            assert_eq!(p.turn, Some(1), "{name}: {p}");
        }
        assert_eq!(r.violations(), expected.len(), "{name}");
        let text = r.render();
        let first = text.lines().next().unwrap_or_default();
        let kind = expected[0].0.as_str();
        let place = match expected[0].1 {
            Some(id) => format!("turn 1, call {id}: {kind}: "),
            None => format!("turn 1: {kind}: "),
        };
        assert!(first.starts_with(&place), "{name}: {first}");
    }
}

#[test]
fn a_killed_run_warns_and_an_unreadable_file_is_an_error() {
    let case = Case::new();
    let clean = std::fs::read_to_string(fixture("clean")).expect("fixture reads");
    // killed while writing the response of turn 2
    let cut = clean
        .find("\"event\":\"response\",\"turn\":2")
        .expect("turn 2")
        + 30;
    let killed = case.write("killed.jsonl", &clean[..cut]);
    let r = audit_file(&killed).expect("a cut-off last line is not an error");
    assert_eq!(r.violations(), 0, "{r}");
    assert!(r
        .render()
        .contains("transcript ends mid-line (the run was killed?)"));

    let broken = case.write("broken.jsonl", &clean.replacen('\n', "\nnot json\n", 1));
    let e = audit_file(&broken).unwrap_err().to_string();
    assert!(e.contains("broken.jsonl:2: not JSON"), "{e}");
    let e = audit_file(&case.path("absent.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("absent.jsonl"), "{e}");
}

const PROVIDERS: &str = "providers:\n  sim-responses: { protocol: openai-responses, simulator: true }\n  sim-chat: { protocol: openai-chat, simulator: true }\n";

/// The same script on each protocol: `anthropic`, `responses`, `chat`.
fn three_protocols(defaults: &str, script: &str) -> String {
    format!(
        "name: audit\nconcurrency: 3\n{PROVIDERS}defaults:\n  prompt: p\n  max_tokens: 1024\n  tools: [get_time]\n{defaults}  sim:\n{script}tasks:\n  - {{ id: anthropic, provider: sim, model: claude-sonnet-4-5 }}\n  - {{ id: responses, provider: sim-responses, model: gpt-5.4 }}\n  - {{ id: chat, provider: sim-chat, model: gpt-5.4-mini }}\n"
    )
}

#[tokio::test]
async fn real_transcripts_of_every_protocol_audit_clean() {
    let case = Case::new();
    let ran = case
        .run(&three_protocols(
            "",
            "    turns:\n      - content:\n          - thinking: \"two clocks\"\n          - tool_use: { name: get_time, input: { timezone: UTC } }\n          - tool_use: { name: get_time, input: { timezone: \"+02:00\" } }\n      - content: [ { tool_use: { name: get_time, input: {} } } ]\n      - content: [ { text: done } ]\n",
        ))
        .await;
    for task in ["anthropic", "responses", "chat"] {
        assert_eq!(ran.stop(task), "completed", "{task}");
        let r = audit_file(&ran.dir.join(format!("transcripts/{task}.jsonl")))
            .unwrap_or_else(|e| panic!("{task}: {e}"));
        assert!(r.problems.is_empty(), "{task}:\n{r}");
        assert_eq!((r.turns, r.calls), (3, 3), "{task}");
        assert_eq!(
            r.protocol.map(|p| p.as_str()),
            Some(match task {
                "anthropic" => "anthropic",
                "responses" => "openai-responses",
                _ => "openai-chat",
            })
        );
    }
}

#[tokio::test]
async fn faults_the_runner_handles_are_warnings_not_violations() {
    // An unknown tool, broken arguments (OpenAI), calls without ids (Chat), budget notes
    // after the results and a wrap-up turn: the runner answers every call, so nothing
    // is a violation.
    let case = Case::new();
    let ran = case
        .run(&three_protocols(
            "  limits: { max_turns: 3, show_budget: true, wrap_up: true }\n",
            "    turns:\n      - omit_call_ids: true\n        content:\n          - tool_use: { name: get_time, input: { timezone: UTC } }\n          - tool_use: { name: launch_rockets, input: { count: 3 } }\n          - tool_use: { name: get_time, input: {}, arguments: \"{\\\"timezone\\\":\" }\n      - content: [ { tool_use: { name: get_time, input: { timezone: 42 } } } ]\n      - content: [ { text: done } ]\n",
        ))
        .await;
    for (task, warnings) in [
        ("anthropic", vec![ProblemKind::UndeclaredTool]),
        (
            "responses",
            vec![ProblemKind::UndeclaredTool, ProblemKind::MalformedCall],
        ),
        (
            "chat",
            vec![
                ProblemKind::MalformedCall,
                ProblemKind::UndeclaredTool,
                ProblemKind::MalformedCall,
                ProblemKind::MalformedCall,
                ProblemKind::MalformedCall,
            ],
        ),
    ] {
        assert_eq!(ran.stop(task), "completed", "{task}");
        assert_eq!(ran.events(task, "wrap_up").len(), 1, "{task}");
        let r = audit_file(&ran.dir.join(format!("transcripts/{task}.jsonl")))
            .unwrap_or_else(|e| panic!("{task}: {e}"));
        assert_eq!(r.violations(), 0, "{task}:\n{r}");
        let kinds: Vec<ProblemKind> = r.problems.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, warnings, "{task}:\n{r}");
        assert!(r.problems.iter().all(|p| p.turn == Some(1)), "{task}:\n{r}");
    }
}

#[test]
fn the_command_exits_0_clean_1_on_a_violation_2_when_unreadable() {
    let run = |path: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_agentbatch"))
            .arg("audit")
            .arg(path)
            .output()
            .expect("binary runs")
    };
    let clean = run(&fixture("clean"));
    assert_eq!(clean.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&clean.stdout).contains("no problems found"));
    let bad = run(&fixture("wrong-id"));
    assert_eq!(bad.status.code(), Some(1));
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(
        out.contains("turn 1, call ") && out.contains("missing_result"),
        "{out}"
    );
    let missing = run(&fixture("no-such-transcript"));
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no-such-transcript.jsonl"));
}
