use super::*;
use std::time::Duration;

use opentelemetry::trace::SpanKind;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

fn resolve(flag: Option<&str>, vars: &[(&str, &str)]) -> Option<Settings> {
    Settings::resolve(flag, false, env(vars)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn traces_are_off_without_the_flag_or_an_endpoint_variable() {
    assert_eq!(resolve(None, &[]), None);
    assert_eq!(resolve(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]), None);
}

#[test]
fn the_flag_and_the_base_variable_get_the_traces_path_the_signal_variable_is_kept() {
    let on = |flag, vars| resolve(flag, vars).map(|s| s.endpoint);
    assert_eq!(
        on(Some("http://c:4318"), &[]),
        Some("http://c:4318/v1/traces".into())
    );
    assert_eq!(
        on(Some("http://c:4318/v1/traces/"), &[]),
        Some("http://c:4318/v1/traces".into())
    );
    assert_eq!(
        on(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://h/otlp/")]),
        Some("https://h/otlp/v1/traces".into())
    );
    let both = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t/custom"),
    ];
    assert_eq!(on(None, &both), Some("http://t/custom".into()));
    // The flag beats the variables.
    assert_eq!(
        on(Some("http://f"), &both),
        Some("http://f/v1/traces".into())
    );
}

#[test]
fn otel_sdk_disabled_turns_traces_off_even_with_the_flag() {
    assert_eq!(
        resolve(Some("http://c"), &[("OTEL_SDK_DISABLED", "TRUE")]),
        None
    );
    assert!(resolve(Some("http://c"), &[("OTEL_SDK_DISABLED", "false")]).is_some());
}

#[test]
fn every_model_error_maps_to_a_short_error_type() {
    use crate::model::HttpError;
    use crate::model::ModelError;
    use std::time::Duration;
    let cases: Vec<(ModelError, &str)> = vec![
        (
            HttpError::Status {
                status: 529,
                error_type: "overloaded_error".into(),
                message: "Overloaded".into(),
                request_id: None,
            }
            .into(),
            "529",
        ),
        (
            HttpError::Transport("refused".into()).into(),
            "connection_error",
        ),
        (HttpError::Timeout(Duration::from_secs(5)).into(), "timeout"),
        (
            HttpError::Redirect {
                status: 307,
                location: "x".into(),
            }
            .into(),
            "307",
        ),
        (
            HttpError::TooLarge { limit: 9 }.into(),
            "response_too_large",
        ),
        (
            HttpError::InStream {
                error_type: "overloaded_error".into(),
                message: "m".into(),
                request_id: None,
            }
            .into(),
            "overloaded_error",
        ),
        (HttpError::StreamCut("eof".into()).into(), "stream_cut"),
        (
            HttpError::StreamIdle(Duration::from_secs(1)).into(),
            "stream_idle",
        ),
        (HttpError::BadStream("x".into()).into(), "malformed_stream"),
        (
            ModelError::Malformed {
                detail: "d".into(),
                request_id: None,
            },
            "malformed_response",
        ),
        (
            ModelError::Batch {
                batch_id: "b".into(),
                detail: "expired".into(),
            },
            "batch_error",
        ),
        (
            ModelError::Failed {
                code: "server_error".into(),
                message: "m".into(),
                request_id: None,
            },
            "server_error",
        ),
    ];
    for (error, expected) in cases {
        assert_eq!(
            attrs::request_error_type(&error.to_string()),
            expected,
            "{error}"
        );
    }
    assert_eq!(attrs::request_error_type("something new"), "_OTHER");
}

#[test]
fn answers_of_every_protocol_name_their_id_model_and_finish_reasons() {
    let reasons = |body: serde_json::Value| {
        attrs::answer(&body)
            .into_iter()
            .map(|kv| (kv.key.to_string(), kv.value.to_string()))
            .collect::<Vec<_>>()
    };
    let anthropic =
        reasons(serde_json::json!({"id": "msg_1", "model": "claude", "stop_reason": "tool_use"}));
    assert_eq!(anthropic[0], ("gen_ai.response.id".into(), "msg_1".into()));
    assert_eq!(
        anthropic[1],
        ("gen_ai.response.model".into(), "claude".into())
    );
    assert_eq!(anthropic[2].0, "gen_ai.response.finish_reasons");
    assert!(anthropic[2].1.contains("tool_use"));
    let chat = reasons(
        serde_json::json!({"choices": [{"finish_reason": "stop"}, {"finish_reason": "length"}]}),
    );
    assert!(chat[0].1.contains("stop") && chat[0].1.contains("length"));
    let responses = reasons(
        serde_json::json!({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}),
    );
    assert!(responses[0].1.contains("max_output_tokens"));
}

#[test]
fn the_traces_path_goes_on_the_path_and_the_query_is_kept_but_never_shown() {
    let s = resolve(Some("http://h:4318/?token=abc"), &[]).unwrap();
    assert_eq!(s.endpoint, "http://h:4318/v1/traces?token=abc");
    assert_eq!(s.shown_endpoint(), "http://h:4318/v1/traces");
    let base = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://h/otlp?k=v")];
    let s = resolve(None, &base).unwrap();
    assert_eq!(s.endpoint, "https://h/otlp/v1/traces?k=v");
    assert_eq!(s.shown_endpoint(), "https://h:443/otlp/v1/traces");
    let full = [(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "  http://t/custom?x=1 ",
    )];
    assert_eq!(
        resolve(None, &full).unwrap().endpoint,
        "http://t/custom?x=1"
    );
}

#[test]
fn a_url_with_credentials_is_refused_without_echoing_them() {
    for (flag, vars) in [
        (Some("http://user:s3cret-pw@h:4318"), vec![]),
        (
            None,
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://user:s3cret-pw@h")],
        ),
        (
            None,
            vec![(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://s3cret-pw@h/v1/traces",
            )],
        ),
    ] {
        let e = Settings::resolve(flag, false, env(&vars))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OTEL_EXPORTER_OTLP_HEADERS=Authorization=Basic%20"),
            "{e}"
        );
        assert!(!e.contains("s3cret"), "{e}");
    }
    let e = Settings::resolve(Some("ftp://u:s3cret@h?x"), false, env(&[])).unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

#[test]
fn a_protocol_other_than_http_protobuf_is_refused_from_the_variables_and_warned_with_the_flag() {
    let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317");
    for protocol in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
    ] {
        let e = Settings::resolve(None, false, env(&[endpoint, protocol])).unwrap_err();
        assert!(e.to_string().contains("4318"), "{e}");
    }
    let s = resolve(
        Some("http://c:4318"),
        &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")],
    )
    .unwrap();
    assert!(
        s.warnings[0].contains("HTTP/protobuf only"),
        "{:?}",
        s.warnings
    );
    let ok = [endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];
    assert!(resolve(None, &ok).unwrap().warnings.is_empty());
    let gzip = [endpoint, ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")];
    assert!(resolve(None, &gzip).unwrap().warnings[0].contains("uncompressed"));
}

#[test]
fn headers_merge_with_the_signal_winning_and_malformed_entries_are_named_not_shown() {
    let vars = [
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "a=1, B=2,novalue-s3cret,=s3cret,bad key=s3cret",
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=3,c=Basic%20x"),
    ];
    let s = resolve(Some("http://c"), &vars).unwrap();
    let mut headers = s.headers.0.clone();
    headers.sort();
    let expect = [("a", "1"), ("b", "3"), ("c", "Basic x")];
    assert_eq!(
        headers,
        expect.map(|(k, v)| (k.to_string(), v.to_string())).to_vec()
    );
    assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
    for w in &s.warnings {
        assert!(w.starts_with("OTEL_EXPORTER_OTLP_HEADERS: entry "), "{w}");
        assert!(!w.contains("s3cret"), "{w}");
    }
    assert!(!format!("{s:?}").contains("Basic x"));
}

#[test]
fn the_timeout_and_the_value_limit_come_from_the_variables_signal_first() {
    let s = resolve(Some("http://c"), &[]).unwrap();
    assert_eq!(
        (s.timeout, s.value_limit),
        (DEFAULT_TIMEOUT, DEFAULT_VALUE_LIMIT)
    );
    let vars = [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250"),
        ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100"),
        ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "40"),
    ];
    let s = resolve(Some("http://c"), &vars).unwrap();
    assert_eq!((s.timeout, s.value_limit), (Duration::from_millis(250), 40));
    let s = resolve(Some("http://c"), &[("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")]).unwrap();
    assert_eq!(s.timeout, DEFAULT_TIMEOUT);
    assert_eq!(s.warnings.len(), 1);
}

#[test]
fn content_is_cut_on_a_character_boundary_saying_how_long_it_was() {
    assert_eq!(attrs::clip("short".into(), 5), "short");
    let cut = attrs::clip("ééééé".into(), 2);
    assert_eq!(cut, "éé...[cut by agentbatch at 2 of 5 characters]");
}

#[test]
fn the_end_of_run_line_says_why_and_never_that_all_is_well_when_nothing_arrived() {
    use crate::vocab::sink::TelemetryCounts;
    let lost = TelemetryCounts {
        endpoint: "http://c:4318/v1/traces".into(),
        spans: 24,
        dropped: 24,
        failed_exports: 1,
        failure: Some("HTTP 401: unauthorized".into()),
        ..TelemetryCounts::default()
    };
    let line = lost.line();
    assert!(
        line.contains("24 dropped") && line.contains("HTTP 401: unauthorized"),
        "{line}"
    );
    assert!(
        line.contains("no span is known to have reached the collector"),
        "{line}"
    );
    assert!(!line.contains("not slowed"), "{line}");
    let pending = TelemetryCounts {
        spans: 24,
        unconfirmed: 24,
        ..lost.clone()
    };
    assert!(
        pending.line().contains("24 unconfirmed"),
        "{}",
        pending.line()
    );
}

/// Spans as the SDK hands them to an exporter, for a task fed transcript lines.
#[derive(Debug, Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl opentelemetry_sdk::trace::SpanExporter for Captured {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.lock().expect("not poisoned").extend(batch);
        Ok(())
    }
}

/// The spans of one task of the simulator's Anthropic protocol fed these transcript
/// lines (then dropped without a row: its task span ends as an error).
fn spans_of(lines: &[serde_json::Value]) -> Vec<opentelemetry_sdk::trace::SpanData> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.yaml");
    std::fs::write(
        &path,
        "name: x\ntasks:\n  - { id: a, prompt: p, model: m, tools: [get_time], sim: { turns: [ { content: [ { text: hi } ] } ] } }\n",
    )
    .unwrap();
    let registry = crate::tools::Registry::builtin();
    let spec = crate::job::load(&path, &registry).unwrap().tasks[0].clone();
    let captured = Captured::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(captured.clone())
        .build();
    let run = Arc::new(task::RunInfo {
        job: "x".into(),
        run_id: "r".into(),
        content: false,
        value_limit: DEFAULT_VALUE_LIMIT,
    });
    let trace = task::TaskTrace::new(
        provider.tracer("t"),
        run,
        Arc::new(export::Counters::default()),
        &spec,
    );
    for line in lines {
        let event = crate::vocab::transcript::TranscriptEvent::read(&line.to_string())
            .unwrap_or_else(|| panic!("{line}"));
        trace.event(std::time::SystemTime::now(), &event);
    }
    drop(trace);
    let spans = captured.0.lock().unwrap().clone();
    spans
}

fn attribute(span: &opentelemetry_sdk::trace::SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

fn request(turn: u32, first: bool) -> serde_json::Value {
    let mut r = serde_json::json!({"event": "request", "turn": turn, "attempt": 1, "max_tokens": 100, "new_messages": []});
    if first {
        r["params"] = serde_json::json!({"url": "http://127.0.0.1:9/v1/messages", "protocol": "anthropic", "model": "m", "system": null, "tools": [{"name": "get_time"}], "extra": {"stream": true}});
    }
    r
}

#[test]
fn a_replayed_answer_is_an_internal_span_with_its_first_usage_and_every_request_says_it_streams() {
    let answer = serde_json::json!({"id": "msg_1", "model": "m", "role": "assistant", "stop_reason": "end_turn", "content": [], "usage": {"input_tokens": 120, "output_tokens": 7}});
    let spans = spans_of(&[
        request(1, true),
        serde_json::json!({"event": "response", "turn": 1, "body": answer, "replayed": true}),
        serde_json::json!({"event": "settle", "turn": 1, "usage": {}, "cost_usd": "0"}),
        request(2, false),
        serde_json::json!({"event": "response", "turn": 2, "body": answer}),
    ]);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| attribute(s, "gen_ai.operation.name").as_deref() == Some("chat"))
        .collect();
    assert_eq!(chats.len(), 2);
    let (replayed, sent) = match attribute(chats[0], "agentbatch.turn").as_deref() {
        Some("1") => (chats[0], chats[1]),
        _ => (chats[1], chats[0]),
    };
    assert_eq!(replayed.span_kind, SpanKind::Internal);
    assert_eq!(
        attribute(replayed, "agentbatch.replayed").as_deref(),
        Some("true")
    );
    assert_eq!(attribute(replayed, "server.address"), None);
    assert_eq!(
        attribute(replayed, "gen_ai.usage.input_tokens").as_deref(),
        Some("0")
    );
    assert_eq!(
        attribute(replayed, "agentbatch.replayed_input_tokens").as_deref(),
        Some("120")
    );
    assert_eq!(
        attribute(replayed, "agentbatch.replayed_output_tokens").as_deref(),
        Some("7")
    );
    assert_eq!(sent.span_kind, SpanKind::Client);
    assert_eq!(
        attribute(sent, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(attribute(sent, "agentbatch.replayed"), None);
    for chat in [replayed, sent] {
        // Asked for in the request; no first chunk came (a replay, a whole answer).
        assert_eq!(
            attribute(chat, "gen_ai.request.stream").as_deref(),
            Some("true")
        );
    }
}

#[test]
fn an_undeclared_tool_is_an_invalid_call_and_only_a_policy_refusal_is_denied() {
    let result = |id: &str, name: &str, rule: &str| serde_json::json!({"event": "tool_result", "turn": 1, "id": id, "name": name, "decision": "deny", "rule": rule, "is_error": true, "content": "no"});
    let spans = spans_of(&[
        request(1, true),
        serde_json::json!({"event": "response", "turn": 1, "body": {"content": []}}),
        serde_json::json!({"event": "tool_call", "turn": 1, "id": "c1", "name": "launch", "input": {}}),
        result("c1", "launch", "not declared for this task"),
        serde_json::json!({"event": "tool_call", "turn": 1, "id": "c2", "name": "get_time", "input": {}}),
        result("c2", "get_time", "get_time"),
    ]);
    let tool = |name: &str| {
        spans
            .iter()
            .find(|s| attribute(s, "gen_ai.tool.name").as_deref() == Some(name))
            .and_then(|s| attribute(s, "error.type"))
    };
    assert_eq!(tool("launch").as_deref(), Some("invalid_call"));
    assert_eq!(tool("get_time").as_deref(), Some("denied"));
}
