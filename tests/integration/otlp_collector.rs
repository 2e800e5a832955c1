//! OpenTelemetry traces against collectors that refuse, reject, hang or are misaddressed
//! (tests/otlp/receiver.py's modes), and the settings that would lose every span or leak
//! a credential: what arrives, what the end-of-run line and run.json say, and why.

use serde_json::Value;

use crate::common::Case;
use crate::otlp::{
    attr, binary, run_ok, run_traced, sim_job, task_spans, Receiver, TOOL_THEN_TEXT,
};

/// One task answering at once.
const ONE: &str =
    "  - id: a\n    prompt: p\n    sim:\n      turns:\n        - content: [ { text: done } ]\n";

fn telemetry(case: &Case, run: &str) -> Value {
    let text =
        std::fs::read_to_string(case.path(&format!("reports/{run}/run.json"))).expect("run.json");
    serde_json::from_str::<Value>(&text).unwrap()["telemetry"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_huge_answer_is_cut_so_every_other_tasks_trace_still_arrives() {
    // A collector refusing bodies over 400 kB, as real ones do over their own limit.
    let rx = Receiver::start(&["--max-body", "400000"]);
    let case = Case::new();
    let huge = "x".repeat(600_000);
    let mut yaml = format!(
        "name: big\ndefaults: {{ provider: sim, model: claude-sonnet-4-5 }}\ntasks:\n  - id: huge\n    prompt: p\n    sim:\n      turns:\n        - content: [ {{ text: \"{huge}\" }} ]\n"
    );
    for i in 0..3 {
        yaml.push_str(&ONE.replace("id: a", &format!("id: small{i}")));
    }
    run_traced(&case, &yaml, &rx, true, &[]).await;
    let spans = rx.spans();
    for i in 0..3 {
        task_spans(&spans, &format!("small{i}"));
    }
    let (_, children) = task_spans(&spans, "huge");
    let out = attr(&children[0], "gen_ai.output.messages")
        .as_str()
        .expect("output messages");
    assert!(
        out.contains("...[cut by agentbatch at 16384 of "),
        "{}",
        &out[out.len() - 80..]
    );
    assert!(out.chars().count() < 16384 + 80, "{}", out.len());
    // The standard variable sets another limit.
    let rx = Receiver::start(&["--max-body", "400000"]);
    let case = Case::new();
    let vars = [("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100")];
    run_traced(&case, &yaml, &rx, true, &vars).await;
    let (_, children) = task_spans(&rx.spans(), "huge");
    let out = attr(&children[0], "gen_ai.output.messages")
        .as_str()
        .unwrap();
    assert!(out.contains("...[cut by agentbatch at 100 of "), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_are_refused_and_a_query_is_sent_but_never_shown() {
    let rx = Receiver::start(&[]);
    let case = Case::new();
    sim_job(&case, "q", ONE);
    let with_user = format!("http://ab-user:s3cret-pw@127.0.0.1:{}", rx.port);
    let args = [
        "run", "job.yaml", "--run-id", "cred", "--quiet", "--otlp", &with_user,
    ];
    let (out, _) = binary(&case, &args, &[]).await;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("OTEL_EXPORTER_OTLP_HEADERS=Authorization=Basic%20"),
        "{said}"
    );
    assert!(!said.contains("s3cret-pw"), "{said}");
    assert!(!case.path("reports/cred").exists(), "nothing ran");
    // gRPC from the variables would lose every span: refused too.
    let url = rx.url();
    let grpc = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ];
    let args = ["run", "job.yaml", "--run-id", "grpc", "--quiet"];
    let (out, _) = binary(&case, &args, &grpc).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("4318"), "{stderr}");
    // A token in the query goes to the collector with the traces path before it.
    let token = "tok-7f3e-never-show-me";
    let with_query = format!("{url}/?token={token}");
    let args = [
        "run",
        "job.yaml",
        "--run-id",
        "query",
        "--quiet",
        "--otlp",
        &with_query,
    ];
    let (stdout, _) = run_ok(&case, &args, &[]).await;
    let headers = String::from_utf8_lossy(&rx.file("headers.jsonl")).to_string();
    let first: Value = serde_json::from_str(headers.lines().next().expect("a request")).unwrap();
    assert_eq!(first[":path"], format!("/v1/traces?token={token}"));
    assert_eq!(rx.spans().len(), 2);
    let run_json = std::fs::read_to_string(case.path("reports/query/run.json")).unwrap();
    for text in [&stdout, &run_json] {
        assert!(!text.contains(token), "{text}");
    }
    assert!(
        stdout.contains(&format!(
            "to http://127.0.0.1:{}/v1/traces, 2 exported",
            rx.port
        )),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_says_its_status_and_why_and_malformed_headers_are_named_at_start() {
    let rx = Receiver::start(&["--status", "401"]);
    let case = Case::new();
    sim_job(&case, "refused", ONE);
    let url = rx.url();
    let args = [
        "run", "job.yaml", "--run-id", "r", "--quiet", "--otlp", &url,
    ];
    let headers = [("OTEL_EXPORTER_OTLP_HEADERS", "x-ok=1,oops-s3cret,x-bad=")];
    let (out, _) = binary(&case, &args, &headers).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_HEADERS: entry 2"),
        "{stderr}"
    );
    assert!(stderr.contains("entry 3 (key \"x-bad\")"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
    let t = telemetry(&case, "r");
    let why = t["failure"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("HTTP 401: refused by the test receiver"),
        "{t}"
    );
    assert_eq!(t["dropped"], 2, "{t}");
    assert!(
        stdout.contains(why) && !stdout.contains("not slowed"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_a_collector_rejects_in_a_partial_success_are_dropped_not_exported() {
    let rx = Receiver::start(&["--reject", "2"]);
    let case = Case::new();
    sim_job(
        &case,
        "partial",
        &format!("  - id: a\n    prompt: p\n{TOOL_THEN_TEXT}"),
    );
    let url = rx.url();
    let args = [
        "run", "job.yaml", "--run-id", "p", "--quiet", "--otlp", &url,
    ];
    let (stdout, _) = run_ok(&case, &args, &[]).await;
    assert_eq!(rx.spans().len(), 2, "the receiver kept the others");
    let t = telemetry(&case, "p");
    assert_eq!(
        (&t["spans"], &t["exported"], &t["dropped"], &t["rejected"]),
        (&4.into(), &2.into(), &2.into(), &2.into()),
        "{t}"
    );
    assert!(stdout.contains("span quota exceeded"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_otlp_timeout_variable_bounds_each_export_request() {
    let rx = Receiver::start(&["--stall"]);
    let case = Case::new();
    sim_job(&case, "slow", ONE);
    let url = rx.url();
    let args = [
        "run", "job.yaml", "--run-id", "t", "--quiet", "--otlp", &url,
    ];
    run_ok(
        &case,
        &args,
        &[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "300")],
    )
    .await;
    // Cut off at 300 ms, well within the 2 s flush: a failure, not an open question.
    let t = telemetry(&case, "t");
    assert_eq!(
        (&t["dropped"], &t["unconfirmed"]),
        (&2.into(), &0.into()),
        "{t}"
    );
    assert!(
        t["failure"]
            .as_str()
            .unwrap_or_default()
            .contains("timed out"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_name_variable_wins_the_users_version_stays_and_headers_merge() {
    let rx = Receiver::start(&[]);
    let case = Case::new();
    sim_job(&case, "res", ONE);
    let url = rx.url();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", url.as_str()),
        ("OTEL_SERVICE_NAME", "from-service-name"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=from-attributes,service.version=9.9.9,team=evals",
        ),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-a=1,x-b=2"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-b=3"),
    ];
    run_ok(
        &case,
        &["run", "job.yaml", "--run-id", "r", "--quiet"],
        &env,
    )
    .await;
    let spans = rx.spans();
    let resource = &spans[0]["resource"];
    assert_eq!(resource["service.name"], "from-service-name");
    assert_eq!(resource["service.version"], "9.9.9");
    assert_eq!(resource["team"], "evals");
    assert_eq!(spans[0]["scope_version"], env!("CARGO_PKG_VERSION"));
    let headers: Value = serde_json::from_str(
        String::from_utf8_lossy(&rx.file("headers.jsonl"))
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (&headers["x-a"], &headers["x-b"]),
        (&"1".into(), &"3".into())
    );
    // Without the variables, agentbatch's own version.
    let rx = Receiver::start(&[]);
    let url = rx.url();
    let args = [
        "run", "job.yaml", "--run-id", "own", "--quiet", "--otlp", &url,
    ];
    run_ok(&case, &args, &[]).await;
    let resource = &rx.spans()[0]["resource"];
    assert_eq!(resource["service.version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(resource["service.name"], "agentbatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_a_budget_never_lets_start_still_gets_its_trace() {
    let rx = Receiver::start(&[]);
    let case = Case::new();
    let tasks = format!("{ONE}{}", ONE.replace("id: a", "id: b"));
    let yaml = format!(
        "name: broke\nmax_cost_usd: 0.000001\ndefaults: {{ provider: sim, model: claude-sonnet-4-5 }}\ntasks:\n{tasks}"
    );
    let dir = run_traced(&case, &yaml, &rx, false, &[]).await;
    let rows = crate::common::read_csv(&dir.join("results.csv"));
    let spans = rx.spans();
    assert_eq!(spans.len(), 2, "one span per task: {spans:?}");
    for task in ["a", "b"] {
        let row = rows.iter().find(|r| r["task_id"] == task).expect("row");
        assert!(row["stop_detail"].contains("not started"), "{row:?}");
        let (root, children) = task_spans(&spans, task);
        assert!(children.is_empty());
        assert_eq!(root["name"], "invoke_agent broke");
        assert_eq!(
            attr(&root, "agentbatch.stop_reason"),
            row["stop_reason"].as_str()
        );
        assert_eq!(attr(&root, "agentbatch.outcome"), row["outcome"].as_str());
        assert_eq!(attr(&root, "agentbatch.turns"), 0);
        assert_eq!(root["start_ns"], root["end_ns"]);
    }
}
