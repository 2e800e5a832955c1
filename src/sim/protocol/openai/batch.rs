//! OpenAI's Batch API for `/v1/responses` and `/v1/chat/completions`: `POST /v1/batches`
//! naming an uploaded JSONL file of `{custom_id, method, url, body}` lines, polled with
//! `GET /v1/batches/{id}`, results in an output file (answered 200) and an error file
//! (every other answer, and the requests that expired or were cancelled).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::files;
use crate::model::Protocol;
use crate::sim::batch::{
    now_ms, openai_error, params, query_param, request_cancel, start, Api, Batch, BatchApi,
    BatchSettings, End, Item, Outcome, Params, Phase, Progress,
};
use crate::sim::{check_headers, check_key, lock, SimState};

/// The endpoints the simulator's batches play (the real API has more).
const ENDPOINTS: &[(&str, Protocol)] = &[
    ("/v1/chat/completions", Protocol::OpenaiChat),
    ("/v1/responses", Protocol::OpenaiResponses),
];

/// What OpenAI's Batch API does its own way.
#[derive(Debug)]
pub(in crate::sim) struct OpenaiBatches;

impl BatchApi for OpenaiBatches {
    fn status(&self, p: &Progress) -> &'static str {
        status_word(p)
    }

    fn validate(&self, state: &SimState, batch: &Batch, settings: &BatchSettings) -> bool {
        validate(state, batch, settings)
    }

    fn ended(&self, state: &SimState, batch: &Batch, p: &mut Progress) {
        write_files(state, batch, p);
    }

    fn server_error(&self, message: &str, _: &str) -> Value {
        super::openai_error_body(500, "api_error", None, message)
    }
}

fn invalid_value(state: &SimState, param: &str, value: &str, allowed: &[&str]) -> Response {
    let listed: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
    let listed = match listed.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => listed.join(""),
    };
    openai_error(
        state,
        StatusCode::BAD_REQUEST,
        "invalid_value",
        Some(param),
        &format!("Invalid value: '{value}'. Supported values are: {listed}."),
    )
}

pub(super) fn status_word(p: &Progress) -> &'static str {
    match (p.phase, p.end) {
        (Phase::Validating, _) => "validating",
        (Phase::Failed, _) => "failed",
        (Phase::InProgress, _) => "in_progress",
        (Phase::Canceling, _) => "cancelling",
        (Phase::Ended, Some(End::Expired)) => "expired",
        (Phase::Ended, Some(End::Cancelled)) => "cancelled",
        (Phase::Ended, _) => "completed",
    }
}

fn unix(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(|t| t.timestamp())
}

/// The Batch object.
fn object(b: &Batch, p: &Progress) -> Value {
    let Api::OpenAi {
        endpoint,
        input_file_id,
        completion_window,
        metadata,
        ..
    } = &b.api
    else {
        return Value::Null;
    };
    let completed = p
        .items
        .iter()
        .filter(|i| matches!(i.outcome, Some(Outcome::Answered { status: 200, .. })))
        .count();
    let failed = p
        .items
        .iter()
        .filter(|i| matches!(i.outcome, Some(Outcome::Answered { status, .. }) if status != 200))
        .count();
    let ended_as = |end| (p.end == Some(end)).then_some(()).and(unix(p.ended_at));
    let failed_at = (p.phase == Phase::Failed)
        .then_some(())
        .and(unix(p.ended_at));
    json!({
        "id": b.id,
        "object": "batch",
        "endpoint": endpoint,
        "errors": (!p.errors.is_empty()).then(|| json!({"object": "list", "data": p.errors})),
        "input_file_id": input_file_id,
        "completion_window": completion_window,
        "status": status_word(p),
        "output_file_id": p.output_file_id,
        "error_file_id": p.error_file_id,
        "created_at": b.created_at.timestamp(),
        "in_progress_at": unix(p.in_progress_at),
        "expires_at": b.expires_at().timestamp(),
        "finalizing_at": unix(p.finalizing_at),
        "completed_at": ended_as(End::Completed),
        "failed_at": failed_at,
        "expired_at": ended_as(End::Expired),
        "cancelling_at": unix(p.cancel_at),
        "cancelled_at": ended_as(End::Cancelled),
        "request_counts": {"total": p.items.len(), "completed": completed, "failed": failed},
        "metadata": metadata,
    })
}

pub(super) async fn create(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (run, _) = params(p);
    if let Err(r) = check_headers(Protocol::OpenaiResponses, &headers) {
        let code = r.code.as_deref().unwrap_or("");
        return openai_error(&state, r.status, code, None, &r.message);
    }
    let req: Value =
        match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return openai_error(
                &state,
                StatusCode::BAD_REQUEST,
                "",
                None,
                "We could not parse the JSON body of your request. The API expects a JSON object.",
            ),
        };
    let text = |name: &str| req.get(name).and_then(Value::as_str);
    let Some(input_file_id) = text("input_file_id") else {
        return missing(&state, "input_file_id");
    };
    let Some(endpoint) = text("endpoint") else {
        return missing(&state, "endpoint");
    };
    let Some(&(_, protocol)) = ENDPOINTS.iter().find(|(e, _)| *e == endpoint) else {
        let allowed: Vec<&str> = ENDPOINTS.iter().map(|(e, _)| *e).collect();
        return invalid_value(&state, "endpoint", endpoint, &allowed);
    };
    let Some(window) = text("completion_window") else {
        return missing(&state, "completion_window");
    };
    if window != "24h" {
        return invalid_value(&state, "completion_window", window, &["24h"]);
    }
    let metadata = match req.get("metadata") {
        None | Some(Value::Null) => Value::Null,
        Some(m @ Value::Object(_)) => m.clone(),
        Some(other) => {
            let kind = match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                _ => "a boolean",
            };
            return openai_error(
                &state,
                StatusCode::BAD_REQUEST,
                "invalid_type",
                Some("metadata"),
                &format!(
                    "Invalid type for 'metadata': expected an object, but got {kind} instead."
                ),
            );
        }
    };
    let batch = Batch {
        id: state.batches.new_id("batch_sim"),
        run,
        api: Api::OpenAi {
            protocol,
            endpoint: endpoint.to_string(),
            input_file_id: input_file_id.to_string(),
            completion_window: window.to_string(),
            metadata,
        },
        created_at: Utc::now(),
        created: Instant::now(),
        created_ms: now_ms(&state),
        headers: headers.clone(),
        progress: Mutex::new(Progress::new(Vec::new(), Phase::Validating)),
        wake: Notify::new(),
        wire: &OpenaiBatches,
    };
    // The answer shows the batch as created, before validation has had a chance to run.
    let shown = object(&batch, &lock(&batch.progress));
    start(&state, batch);
    Json(shown).into_response()
}

fn missing(state: &SimState, name: &str) -> Response {
    openai_error(
        state,
        StatusCode::BAD_REQUEST,
        "missing_required_parameter",
        Some(name),
        &format!("Missing required parameter: '{name}'."),
    )
}

fn line_error(code: &str, line: Option<usize>, param: Option<&str>, message: &str) -> Value {
    json!({"code": code, "line": line, "message": message, "param": param})
}

/// Checks an input file's lines against the batch: every line a JSON object with
/// `custom_id`, `method: POST`, the batch's `url` and a `body` that does not stream, each
/// custom_id once. Returns the items, or every error found.
fn check_lines(
    content: &[u8],
    endpoint: &str,
    protocol: Protocol,
    max: usize,
) -> Result<Vec<Item>, Vec<Value>> {
    let mut errors = Vec::new();
    let mut items = Vec::new();
    let mut seen = HashSet::new();
    let api_name = match protocol {
        Protocol::OpenaiChat => "Chat Completions",
        _ => "Responses",
    };
    for (n, raw) in content.split(|b| *b == b'\n').enumerate() {
        let line = Some(n + 1);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(raw) else {
            errors.push(line_error(
                "invalid_json_line",
                line,
                None,
                "This line is not parseable as valid JSON.",
            ));
            continue;
        };
        let absent = ["custom_id", "method", "url", "body"]
            .into_iter()
            .find(|f| obj.get(*f).is_none_or(Value::is_null));
        if let Some(field) = absent {
            errors.push(line_error(
                "missing_required_parameter",
                line,
                Some(field),
                &format!("Missing required parameter: '{field}'."),
            ));
            continue;
        }
        let custom_id = match &obj["custom_id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let method = obj["method"].as_str().unwrap_or_default();
        if method != "POST" {
            errors.push(line_error(
                "invalid_value",
                line,
                Some("method"),
                &format!("Invalid value: '{method}'. Supported values are: 'POST'."),
            ));
            continue;
        }
        if obj["url"].as_str() != Some(endpoint) {
            errors.push(line_error(
                "invalid_url",
                line,
                Some("url"),
                "The URL provided for this request does not match the batch endpoint.",
            ));
            continue;
        }
        let body = &obj["body"];
        if !body.is_object() {
            errors.push(line_error(
                "invalid_type",
                line,
                Some("body"),
                "Invalid type for 'body': expected an object.",
            ));
            continue;
        }
        if body.get("stream").is_some_and(|s| s != &Value::Bool(false)) {
            errors.push(line_error(
                "streaming_unsupported",
                line,
                Some("body.stream"),
                &format!("{api_name}: Streaming is not supported in the Batch API."),
            ));
            continue;
        }
        if !seen.insert(custom_id.clone()) {
            errors.push(line_error(
                "duplicate_custom_id",
                line,
                Some("custom_id"),
                "The custom_id for this request is a duplicate of another request. The custom_id parameter must be unique for each request in a batch.",
            ));
            continue;
        }
        items.push(Item {
            custom_id,
            body: body.clone(),
            outcome: None,
            done_ms: None,
        });
    }
    if items.len() + errors.len() > max {
        errors.push(line_error(
            "invalid_request",
            None,
            None,
            &format!(
                "The input file has {} requests; a batch can hold at most {max}.",
                items.len() + errors.len()
            ),
        ));
    }
    match errors.is_empty() {
        true => Ok(items),
        false => Err(errors),
    }
}

/// Validates a batch's input file; on success the batch holds its items and is in
/// progress (or still cancelling), on failure it has failed. Returns whether to go on.
pub(super) fn validate(state: &SimState, batch: &Batch, settings: &BatchSettings) -> bool {
    let Api::OpenAi {
        protocol,
        endpoint,
        input_file_id,
        ..
    } = &batch.api
    else {
        return true;
    };
    let checked = match files::get(state, &batch.run, input_file_id) {
        None => Err(vec![line_error(
            "invalid_request",
            None,
            Some("file_id"),
            &format!(
                "Cannot find file {input_file_id}, or organization does not have access to it."
            ),
        )]),
        Some(f) if f.purpose != "batch" => Err(vec![line_error(
            "invalid_request",
            None,
            Some("input_file_id"),
            &format!(
                "File {input_file_id} has purpose '{}'; a batch's input file must be uploaded with purpose 'batch'.",
                f.purpose
            ),
        )]),
        Some(f) => check_lines(
            &f.content,
            endpoint,
            *protocol,
            settings.max_openai_requests,
        ),
    };
    let mut p = lock(&batch.progress);
    let now = Utc::now();
    match checked {
        Ok(items) => {
            p.items = items;
            if p.phase == Phase::Validating {
                p.phase = Phase::InProgress;
            }
            p.in_progress_at = Some(now);
            true
        }
        Err(errors) => {
            p.errors = errors;
            p.phase = Phase::Failed;
            p.ended_at = Some(now);
            false
        }
    }
}

/// Writes the output file (answers with status 200) and the error file (everything
/// else) of an ended batch.
pub(super) fn write_files(state: &SimState, batch: &Batch, p: &mut Progress) {
    let mut output = String::new();
    let mut errors = String::new();
    for item in &p.items {
        let id = state.batches.new_id("batch_req_sim");
        let (response, error) = match &item.outcome {
            Some(Outcome::Answered {
                status,
                body,
                request_id,
            }) => (
                json!({"status_code": status, "request_id": request_id, "body": body}),
                Value::Null,
            ),
            Some(Outcome::Canceled) => (
                Value::Null,
                json!({"code": "batch_cancelled", "message": "This request was cancelled before it could be executed."}),
            ),
            Some(Outcome::Expired) | None => (
                Value::Null,
                json!({"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}),
            ),
        };
        let ok = response["status_code"] == 200;
        let line =
            json!({"id": id, "custom_id": item.custom_id, "response": response, "error": error});
        let file = if ok { &mut output } else { &mut errors };
        file.push_str(&line.to_string());
        file.push('\n');
    }
    for (text, suffix, slot) in [
        (output, "output", &mut p.output_file_id),
        (errors, "error", &mut p.error_file_id),
    ] {
        if !text.is_empty() {
            let name = format!("{}_{suffix}.jsonl", batch.id);
            let f = files::store(state, &batch.run, name, "batch_output", text.into_bytes());
            *slot = Some(f.id.clone());
        }
    }
}

/// The batch a GET or cancel names, after the credentials are checked.
fn find(state: &SimState, p: Params, headers: &HeaderMap) -> Result<Arc<Batch>, Box<Response>> {
    let (run, id) = params(p);
    if let Err(r) = check_key(Protocol::OpenaiResponses, headers) {
        let code = r.code.as_deref().unwrap_or("");
        return Err(Box::new(openai_error(
            state, r.status, code, None, &r.message,
        )));
    }
    state
        .batches
        .get(&run, &id)
        .filter(|b| matches!(b.api, Api::OpenAi { .. }))
        .ok_or_else(|| {
            Box::new(openai_error(
                state,
                StatusCode::NOT_FOUND,
                "",
                None,
                &format!("No batch found with id '{id}'."),
            ))
        })
}

pub(super) async fn retrieve(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
) -> Response {
    let batch = match find(&state, p, &headers) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let mut p = lock(&batch.progress);
    p.calls.polls_ms.push(now_ms(&state));
    Json(object(&batch, &p)).into_response()
}

pub(super) async fn cancel(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
) -> Response {
    let batch = match find(&state, p, &headers) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let refused = {
        let p = lock(&batch.progress);
        let ended = matches!(p.phase, Phase::Failed | Phase::Ended);
        (ended && p.end != Some(End::Cancelled)).then(|| status_word(&p))
    };
    if let Some(status) = refused {
        return openai_error(
            &state,
            StatusCode::CONFLICT,
            "",
            None,
            &format!("Cannot cancel a batch with status '{status}'."),
        );
    }
    request_cancel(&batch, now_ms(&state));
    let p = lock(&batch.progress);
    Json(object(&batch, &p)).into_response()
}

pub(super) async fn list(
    State(state): State<Arc<SimState>>,
    p: Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (run, _) = params(p);
    if let Err(r) = check_key(Protocol::OpenaiResponses, &headers) {
        let code = r.code.as_deref().unwrap_or("");
        return openai_error(&state, r.status, code, None, &r.message);
    }
    let q = query.as_deref();
    let limit = match query_param(q, "limit").map(str::parse::<usize>) {
        None => 20,
        Some(Ok(n)) if (1..=100).contains(&n) => n,
        Some(_) => {
            return openai_error(
                &state,
                StatusCode::BAD_REQUEST,
                "invalid_value",
                Some("limit"),
                "Invalid 'limit': must be an integer from 1 to 100.",
            )
        }
    };
    let all = state.batches.list(&run, false);
    let from = query_param(q, "after")
        .map(|after| {
            all.iter()
                .position(|b| b.id == after)
                .map_or(all.len(), |i| i + 1)
        })
        .unwrap_or(0);
    let to = (from + limit).min(all.len());
    let page = &all[from..to];
    let data: Vec<Value> = page.iter().map(|b| object(b, &lock(&b.progress))).collect();
    Json(json!({
        "object": "list",
        "data": data,
        "first_id": page.first().map(|b| b.id.clone()),
        "last_id": page.last().map(|b| b.id.clone()),
        "has_more": to < all.len(),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: &str, url: &str, body: Value) -> String {
        json!({"custom_id": id, "method": "POST", "url": url, "body": body}).to_string()
    }

    fn codes(r: Result<Vec<Item>, Vec<Value>>) -> Vec<(String, Value)> {
        r.err()
            .unwrap_or_default()
            .iter()
            .map(|e| {
                (
                    e["code"].as_str().unwrap_or("").to_string(),
                    e["line"].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn lines_must_fit_the_batch() {
        let chat = "/v1/chat/completions";
        let good = line("a--0", chat, json!({"model": "m"}));
        let file = [
            good.clone(),
            "{broken".into(),
            line("b--0", "/v1/responses", json!({})),
            line("c--0", chat, json!({"stream": true})),
            good.clone(),
            json!({"custom_id": "d", "url": chat, "body": {}}).to_string(),
            String::new(),
        ]
        .join("\n");
        let found = codes(check_lines(
            file.as_bytes(),
            chat,
            Protocol::OpenaiChat,
            100,
        ));
        assert_eq!(
            found,
            vec![
                ("invalid_json_line".into(), json!(2)),
                ("invalid_url".into(), json!(3)),
                ("streaming_unsupported".into(), json!(4)),
                ("duplicate_custom_id".into(), json!(5)),
                ("missing_required_parameter".into(), json!(6)),
            ]
        );
        let ok = check_lines(good.as_bytes(), chat, Protocol::OpenaiChat, 1);
        assert_eq!(ok.map(|i| i.len()).ok(), Some(1));
        let two = format!("{good}\n{}", line("b--0", chat, json!({})));
        let too_many = codes(check_lines(two.as_bytes(), chat, Protocol::OpenaiChat, 1));
        assert_eq!(too_many, vec![("invalid_request".into(), Value::Null)]);
    }
}
