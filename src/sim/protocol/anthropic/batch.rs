//! Anthropic's Message Batches: `POST /v1/messages/batches` with `{requests: [{custom_id,
//! params}]}`, polled with `GET .../{id}`, results as JSONL from `GET .../{id}/results`
//! once the batch has ended, `POST .../{id}/cancel`, and the list.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::model::Protocol;
use crate::sim::batch::{
    now_ms, params, query_param, request_cancel, rfc3339, start, Api, Batch, BatchApi,
    BatchSettings, Item, Outcome, Params, Phase, Progress,
};
use crate::sim::{check_headers, check_key, error_response, next_request_id, Refusal, SimState};

/// The custom_id rule of the API (`^[a-zA-Z0-9_-]{1,64}$`).
const CUSTOM_ID_MAX: usize = 64;

fn refuse(state: &SimState, r: &Refusal) -> Response {
    error_response(Protocol::Anthropic, r, &next_request_id(state), &[])
}

pub(super) fn status_word(p: &Progress) -> &'static str {
    match p.phase {
        Phase::Ended | Phase::Failed => "ended",
        Phase::Canceling => "canceling",
        Phase::Validating | Phase::InProgress => "in_progress",
    }
}

/// What Message Batches do their own way.
#[derive(Debug)]
pub(in crate::sim) struct MessageBatches;

impl BatchApi for MessageBatches {
    fn status(&self, p: &Progress) -> &'static str {
        status_word(p)
    }

    fn validate(&self, _: &SimState, _: &Batch, _: &BatchSettings) -> bool {
        // A Message Batch carries its requests: nothing is left to check.
        true
    }

    fn ended(&self, _: &SimState, _: &Batch, _: &mut Progress) {}

    fn server_error(&self, message: &str, request_id: &str) -> Value {
        super::render::error_body("api_error", message, request_id)
    }
}

/// Why a create request's `requests` is refused, in the API's pydantic style.
fn check_requests(body: &Value, max: usize) -> Result<Vec<Item>, String> {
    let Some(obj) = body.as_object() else {
        return Err("Input should be a valid dictionary".into());
    };
    let Some(requests) = obj.get("requests") else {
        return Err("requests: Field required".into());
    };
    let Some(requests) = requests.as_array() else {
        return Err("requests: Input should be a valid list".into());
    };
    if requests.is_empty() {
        return Err("requests: List should have at least 1 item after validation, not 0".into());
    }
    if requests.len() > max {
        return Err(format!(
            "requests: List should have at most {max} items after validation, not {}",
            requests.len()
        ));
    }
    let mut seen = HashSet::new();
    let mut items = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        let at = format!("requests.{i}");
        let Some(r) = r.as_object() else {
            return Err(format!("{at}: Input should be a valid dictionary"));
        };
        let custom_id = match r.get("custom_id") {
            None => return Err(format!("{at}.custom_id: Field required")),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(format!("{at}.custom_id: Input should be a valid string")),
        };
        check_custom_id(&custom_id).map_err(|e| format!("{at}.custom_id: {e}"))?;
        let params = match r.get("params") {
            None => return Err(format!("{at}.params: Field required")),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(format!("{at}.params: Input should be a valid dictionary")),
        };
        if params
            .get("stream")
            .is_some_and(|s| s != &Value::Bool(false))
        {
            return Err(format!("{at}.params.stream: Input should be False"));
        }
        if !seen.insert(custom_id.clone()) {
            return Err(format!(
                "{at}.custom_id: Duplicate custom_id '{custom_id}': each request in a Message Batch needs its own custom_id"
            ));
        }
        items.push(Item {
            custom_id,
            body: params,
            outcome: None,
            done_ms: None,
        });
    }
    Ok(items)
}

fn check_custom_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("String should have at least 1 character".into());
    }
    if id.chars().count() > CUSTOM_ID_MAX {
        return Err(format!(
            "String should have at most {CUSTOM_ID_MAX} characters"
        ));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err("String should match pattern '^[a-zA-Z0-9_-]{1,64}$'".into());
    }
    Ok(())
}

/// The MessageBatch object. Its request counts stay at `processing` until the batch
/// ends, as the API documents.
fn object(b: &Batch, p: &Progress, headers: &HeaderMap) -> Value {
    let ended = matches!(p.phase, Phase::Ended | Phase::Failed);
    let mut counts = [0u64; 5];
    for i in &p.items {
        let slot = match (&i.outcome, ended) {
            (_, false) | (None, _) => 0,
            (Some(Outcome::Answered { status: 200, .. }), _) => 1,
            (Some(Outcome::Answered { .. }), _) => 2,
            (Some(Outcome::Canceled), _) => 3,
            (Some(Outcome::Expired), _) => 4,
        };
        counts[slot] += 1;
    }
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("127.0.0.1");
    let prefix = match b.run.as_str() {
        "" => String::new(),
        run => format!("/r/{run}"),
    };
    json!({
        "id": b.id,
        "type": "message_batch",
        "processing_status": status_word(p),
        "request_counts": {
            "processing": counts[0],
            "succeeded": counts[1],
            "errored": counts[2],
            "canceled": counts[3],
            "expired": counts[4],
        },
        "ended_at": p.ended_at.map(rfc3339),
        "created_at": rfc3339(b.created_at),
        "expires_at": rfc3339(b.expires_at()),
        "archived_at": null,
        "cancel_initiated_at": p.cancel_at.map(rfc3339),
        "results_url": ended.then(|| format!("http://{host}{prefix}/v1/messages/batches/{}/results", b.id)),
    })
}

fn not_found(state: &SimState, id: &str) -> Response {
    refuse(
        state,
        &Refusal::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!("No message batch found with id '{id}'"),
        ),
    )
}

pub(super) async fn create(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (run, _) = params(p);
    if let Err(r) = check_headers(Protocol::Anthropic, &headers) {
        return refuse(&state, &r);
    }
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return refuse(
                &state,
                &Refusal::bad_request(format!("The request body is not valid JSON: {e}")),
            )
        }
    };
    let max = state.batches.settings().max_anthropic_requests;
    let items = match check_requests(&parsed, max) {
        Ok(items) => items,
        Err(message) => return refuse(&state, &Refusal::bad_request(message)),
    };
    let batch = Batch {
        id: state.batches.new_id("msgbatch_sim_"),
        run,
        api: Api::Anthropic,
        created_at: Utc::now(),
        created: Instant::now(),
        created_ms: now_ms(&state),
        headers: headers.clone(),
        progress: Mutex::new(Progress::new(items, Phase::InProgress)),
        wake: Notify::new(),
        wire: &MessageBatches,
    };
    let batch = start(&state, batch);
    let p = crate::sim::lock(&batch.progress);
    Json(object(&batch, &p, &headers)).into_response()
}

/// The batch a GET or cancel names, after the credentials are checked.
fn find(state: &SimState, p: Params, headers: &HeaderMap) -> Result<Arc<Batch>, Box<Response>> {
    let (run, id) = params(p);
    check_key(Protocol::Anthropic, headers).map_err(|r| Box::new(refuse(state, &r)))?;
    state
        .batches
        .get(&run, &id)
        .filter(|b| matches!(b.api, Api::Anthropic))
        .ok_or_else(|| Box::new(not_found(state, &id)))
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
    let mut p = crate::sim::lock(&batch.progress);
    p.calls.polls_ms.push(now_ms(&state));
    Json(object(&batch, &p, &headers)).into_response()
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
    if crate::sim::lock(&batch.progress).phase == Phase::Ended {
        return refuse(
            &state,
            &Refusal::bad_request(format!(
                "Message batch '{}' has already ended and cannot be canceled",
                batch.id
            )),
        );
    }
    request_cancel(&batch, now_ms(&state));
    let p = crate::sim::lock(&batch.progress);
    Json(object(&batch, &p, &headers)).into_response()
}

/// The error of an errored item. A result carries no HTTP status, only the error's
/// type, so the type is the one the API gives that status (a scripted fault may pair a
/// status with any type; a 408 read as `invalid_request_error` would be a refusal).
fn errored_body(status: u16, body: &Value) -> Value {
    let kind = match status {
        400 => return body.clone(),
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    let mut body = body.clone();
    if let Some(error) = body.get_mut("error").and_then(Value::as_object_mut) {
        error.insert("type".into(), kind.into());
    }
    body
}

/// One line of the results file.
fn result_line(item: &Item) -> Value {
    let result = match &item.outcome {
        Some(Outcome::Answered {
            status: 200, body, ..
        }) => json!({"type": "succeeded", "message": body}),
        Some(Outcome::Answered { status, body, .. }) => {
            json!({"type": "errored", "error": errored_body(*status, body)})
        }
        Some(Outcome::Canceled) => json!({"type": "canceled"}),
        Some(Outcome::Expired) | None => json!({"type": "expired"}),
    };
    json!({"custom_id": item.custom_id, "result": result})
}

pub(super) async fn results(
    State(state): State<Arc<SimState>>,
    p: Params,
    headers: HeaderMap,
) -> Response {
    let batch = match find(&state, p, &headers) {
        Ok(b) => b,
        Err(resp) => return *resp,
    };
    let mut p = crate::sim::lock(&batch.progress);
    p.calls.results_ms.push(now_ms(&state));
    if p.phase != Phase::Ended {
        let message = format!(
            "Message batch '{}' is still {}: its results are available once it has ended",
            batch.id,
            status_word(&p)
        );
        drop(p);
        return refuse(&state, &Refusal::bad_request(message));
    }
    let mut out = String::new();
    for item in &p.items {
        out.push_str(&result_line(item).to_string());
        out.push('\n');
    }
    let mut resp = out.into_response();
    resp.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/x-jsonl"),
    );
    resp
}

pub(super) async fn list(
    State(state): State<Arc<SimState>>,
    p: Params,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let (run, _) = params(p);
    if let Err(r) = check_key(Protocol::Anthropic, &headers) {
        return refuse(&state, &r);
    }
    let q = query.as_deref();
    let limit = match query_param(q, "limit").map(str::parse::<usize>) {
        None => 20,
        Some(Ok(n)) if (1..=1000).contains(&n) => n,
        Some(_) => {
            return refuse(
                &state,
                &Refusal::bad_request("limit: Input should be an integer from 1 to 1000"),
            )
        }
    };
    let all = state.batches.list(&run, true);
    let position = |id: &str| all.iter().position(|b| b.id == id);
    let (from, to) = match (query_param(q, "after_id"), query_param(q, "before_id")) {
        (Some(after), _) => {
            let from = position(after).map_or(all.len(), |i| i + 1);
            (from, (from + limit).min(all.len()))
        }
        (None, Some(before)) => {
            let to = position(before).unwrap_or(0);
            (to.saturating_sub(limit), to)
        }
        (None, None) => (0, limit.min(all.len())),
    };
    let page = &all[from..to];
    let data: Vec<Value> = page
        .iter()
        .map(|b| object(b, &crate::sim::lock(&b.progress), &headers))
        .collect();
    Json(json!({
        "data": data,
        "has_more": to < all.len(),
        "first_id": page.first().map(|b| b.id.clone()),
        "last_id": page.last().map(|b| b.id.clone()),
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_errored_items_type_is_the_one_its_status_has() {
        let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "simulated 408"}});
        assert_eq!(errored_body(408, &body)["error"]["type"], "timeout_error");
        assert_eq!(
            errored_body(529, &body)["error"]["type"],
            "overloaded_error"
        );
        assert_eq!(errored_body(503, &body)["error"]["type"], "api_error");
        assert_eq!(errored_body(400, &body), body);
        assert_eq!(
            errored_body(408, &body)["error"]["message"],
            "simulated 408"
        );
    }

    fn request(id: &str) -> Value {
        json!({"custom_id": id, "params": {"model": "m", "max_tokens": 10, "messages": []}})
    }

    #[test]
    fn custom_ids_follow_the_api_pattern() {
        assert!(check_custom_id("task-7--3_a").is_ok());
        assert!(check_custom_id(&"a".repeat(64)).is_ok());
        assert!(check_custom_id(&"a".repeat(65))
            .unwrap_err()
            .contains("at most 64 characters"));
        assert!(check_custom_id("").is_err());
        assert!(check_custom_id("t.1").unwrap_err().contains("pattern"));
        assert!(check_custom_id("t/1").is_err());
    }

    #[test]
    fn create_requests_are_refused_in_the_apis_words() {
        let err = |body: Value, max| check_requests(&body, max).err().unwrap_or_default();
        assert_eq!(err(json!({}), 10), "requests: Field required");
        assert!(err(json!({"requests": []}), 10).contains("at least 1 item"));
        assert!(err(json!({"requests": [request("a"), request("b")]}), 1)
            .contains("at most 1 items after validation, not 2"));
        assert!(err(json!({"requests": [request("a"), request("a")]}), 10)
            .starts_with("requests.1.custom_id: Duplicate"));
        let mut streamed = request("s");
        streamed["params"]["stream"] = json!(true);
        assert_eq!(
            err(json!({"requests": [request("a"), streamed]}), 10),
            "requests.1.params.stream: Input should be False"
        );
        let mut not_streamed = request("s");
        not_streamed["params"]["stream"] = json!(false);
        assert!(check_requests(&json!({"requests": [not_streamed]}), 10).is_ok());
        assert_eq!(
            err(json!({"requests": [{"custom_id": "a"}]}), 10),
            "requests.0.params: Field required"
        );
    }
}
