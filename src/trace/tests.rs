use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn traces_are_off_without_the_flag_or_an_endpoint_variable() {
    assert_eq!(Settings::resolve(None, true, env(&[])), None);
    assert_eq!(
        Settings::resolve(None, false, env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
        None
    );
}

#[test]
fn the_flag_and_the_base_variable_get_the_traces_path_the_signal_variable_is_kept() {
    let on = |flag, vars| Settings::resolve(flag, false, env(vars)).map(|s| s.endpoint);
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
    let vars = [("OTEL_SDK_DISABLED", "TRUE")];
    assert_eq!(Settings::resolve(Some("http://c"), false, env(&vars)), None);
    let vars = [("OTEL_SDK_DISABLED", "false")];
    assert!(Settings::resolve(Some("http://c"), false, env(&vars)).is_some());
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
