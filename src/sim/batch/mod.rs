//! The providers' batch APIs (Anthropic's Message Batches; OpenAI's Files and Batch
//! API for `/v1/responses` and `/v1/chat/completions`), so a runner that sends its turns
//! overnight at half price can be tested like one that sends them one by one. Each item
//! is played by the same code as a synchronous request (`super::play`): the same script
//! step, history checks, prompt cache and usage, so a conversation carried on through
//! batches is the one it would have been without them. The wire facts and their sources
//! are in docs/batch-apis.md.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::{Json, Router};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::{lock, next_request_id, play, SimState};
use crate::model::Protocol;

/// How the simulator processes batches. The real APIs take minutes to hours; tests want
/// milliseconds, and sometimes a batch that is seen half done, or one that runs out of
/// time.
#[derive(Debug, Clone)]
pub struct BatchSettings {
    /// From a batch's creation to its first item's result.
    pub delay: Duration,
    /// Between one item's result and the next (item i is done at `delay + i * spread`),
    /// so a poll can see a batch part done.
    pub spread: Duration,
    /// From creation until the items not yet processed expire (the real APIs: 24 hours).
    pub expire_after: Duration,
    /// The most requests in one Message Batch (Anthropic: 100,000).
    pub max_anthropic_requests: usize,
    /// The most requests in one OpenAI batch input file (50,000).
    pub max_openai_requests: usize,
}

impl Default for BatchSettings {
    fn default() -> BatchSettings {
        BatchSettings {
            delay: Duration::from_millis(200),
            spread: Duration::ZERO,
            expire_after: Duration::from_secs(24 * 3600),
            max_anthropic_requests: 100_000,
            max_openai_requests: 50_000,
        }
    }
}

/// The script key an item plays: the part of its custom_id before the last `--`
/// (`task7--3` plays `task7`), or the whole custom_id when it has no `--`. A batch holds
/// the turns of many tasks, and a custom_id is all an item carries.
pub fn item_key(custom_id: &str) -> &str {
    match custom_id.rfind("--") {
        Some(i) => &custom_id[..i],
        None => custom_id,
    }
}

/// Marks the answer to an item that a scripted `batch_expire` fault expired.
#[derive(Debug, Clone, Copy)]
pub(super) struct Expired;

pub(super) fn expired_response() -> Response {
    let mut resp = Response::new(Body::empty());
    resp.extensions_mut().insert(Expired);
    resp
}

/// What became of one item.
#[derive(Debug, Clone)]
pub(in crate::sim) enum Outcome {
    /// The endpoint's answer: its status, its JSON body and request id.
    Answered {
        status: u16,
        body: Value,
        request_id: String,
    },
    Canceled,
    Expired,
}

#[derive(Debug)]
pub(in crate::sim) struct Item {
    pub(in crate::sim) custom_id: String,
    /// The request body the item plays.
    pub(in crate::sim) body: Value,
    pub(in crate::sim) outcome: Option<Outcome>,
    pub(in crate::sim) done_ms: Option<u64>,
}

/// Where a batch is in its life, in the words both APIs share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sim) enum Phase {
    /// OpenAI only: the input file is being checked.
    Validating,
    /// OpenAI only: the input file was refused (`errors` says why).
    Failed,
    InProgress,
    Canceling,
    /// Every item has an outcome.
    Ended,
}

/// Why a batch ended, for OpenAI's final status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sim) enum End {
    Completed,
    Expired,
    Cancelled,
}

/// Which API a batch came through.
#[derive(Debug, Clone)]
pub(in crate::sim) enum Api {
    Anthropic,
    OpenAi {
        /// The endpoint's protocol (Responses or Chat Completions).
        protocol: Protocol,
        endpoint: String,
        input_file_id: String,
        completion_window: String,
        metadata: Value,
    },
}

/// Calls a client made about one batch, so tests can check a runner's polling.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BatchCalls {
    /// Milliseconds from the simulator's start of each status request.
    pub polls_ms: Vec<u64>,
    /// ... of each results download (OpenAI: of the batch's output or error file).
    pub results_ms: Vec<u64>,
    /// ... of each cancel request.
    pub cancels_ms: Vec<u64>,
}

#[derive(Debug)]
pub(in crate::sim) struct Progress {
    pub(in crate::sim) items: Vec<Item>,
    pub(in crate::sim) phase: Phase,
    pub(in crate::sim) end: Option<End>,
    pub(in crate::sim) in_progress_at: Option<DateTime<Utc>>,
    pub(in crate::sim) cancel_at: Option<DateTime<Utc>>,
    pub(in crate::sim) finalizing_at: Option<DateTime<Utc>>,
    pub(in crate::sim) ended_at: Option<DateTime<Utc>>,
    /// OpenAI: why validation refused the input file.
    pub(in crate::sim) errors: Vec<Value>,
    pub(in crate::sim) output_file_id: Option<String>,
    pub(in crate::sim) error_file_id: Option<String>,
    pub(in crate::sim) calls: BatchCalls,
}

impl Progress {
    /// A batch just created: Anthropic's in progress with its items, OpenAI's still to
    /// validate its input file.
    pub(in crate::sim) fn new(items: Vec<Item>, phase: Phase) -> Progress {
        Progress {
            in_progress_at: (phase == Phase::InProgress).then(Utc::now),
            items,
            phase,
            end: None,
            cancel_at: None,
            finalizing_at: None,
            ended_at: None,
            errors: Vec::new(),
            output_file_id: None,
            error_file_id: None,
            calls: BatchCalls::default(),
        }
    }
}

/// One batch, shared by its processing task and the handlers.
#[derive(Debug)]
pub(in crate::sim) struct Batch {
    pub(in crate::sim) id: String,
    pub(in crate::sim) run: String,
    pub(in crate::sim) api: Api,
    pub(in crate::sim) created_at: DateTime<Utc>,
    pub(in crate::sim) created: Instant,
    pub(in crate::sim) created_ms: u64,
    /// The create request's headers (credentials, version, betas), which every item is
    /// sent with.
    pub(in crate::sim) headers: HeaderMap,
    pub(in crate::sim) progress: Mutex<Progress>,
    /// Wakes the processing task when the batch is cancelled.
    pub(in crate::sim) wake: Notify,
    /// What differs for the batch API it came through.
    pub(in crate::sim) wire: &'static dyn BatchApi,
}

/// What a batch API does its own way; each protocol's batch API implements it (in
/// `sim::protocol`), and a batch keeps the one it came through.
pub(in crate::sim) trait BatchApi: Sync + std::fmt::Debug {
    /// The status the API reports for a batch's progress.
    fn status(&self, p: &Progress) -> &'static str;
    /// Checks a new batch before its items play (false: the batch failed and ended).
    fn validate(&self, state: &SimState, batch: &Batch, settings: &BatchSettings) -> bool;
    /// What the API does when a batch has ended (OpenAI: writes its files).
    fn ended(&self, state: &SimState, batch: &Batch, p: &mut Progress);
    /// The body of an item the simulated server failed to answer.
    fn server_error(&self, message: &str, request_id: &str) -> Value;
}

/// An uploaded file, or a batch's output or error file (OpenAI's Files API, in
/// `sim::protocol::openai::files`).
#[derive(Debug)]
pub(in crate::sim) struct File {
    pub(in crate::sim) id: String,
    pub(in crate::sim) run: String,
    pub(in crate::sim) filename: String,
    pub(in crate::sim) purpose: String,
    pub(in crate::sim) created_at: i64,
    pub(in crate::sim) content: Vec<u8>,
}

impl Batch {
    pub(in crate::sim) fn expires_at(&self) -> DateTime<Utc> {
        self.created_at + chrono::Duration::hours(24)
    }

    pub(in crate::sim) fn protocol(&self) -> Protocol {
        match &self.api {
            Api::Anthropic => Protocol::Anthropic,
            Api::OpenAi { protocol, .. } => *protocol,
        }
    }
}

/// The simulator's batches and uploaded files.
#[derive(Default)]
pub(in crate::sim) struct Store {
    pub(in crate::sim) settings: Mutex<BatchSettings>,
    pub(in crate::sim) batches: Mutex<Vec<Arc<Batch>>>,
    pub(in crate::sim) files: Mutex<HashMap<String, Arc<File>>>,
    pub(in crate::sim) ids: AtomicU64,
}

impl Store {
    pub(super) fn set_settings(&self, s: BatchSettings) {
        *lock(&self.settings) = s;
    }

    pub(in crate::sim) fn settings(&self) -> BatchSettings {
        lock(&self.settings).clone()
    }

    /// A fresh id with the API's prefix, e.g. `msgbatch_sim_000001`.
    pub(in crate::sim) fn new_id(&self, prefix: &str) -> String {
        format!(
            "{prefix}{:06}",
            self.ids.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    /// The batch `id` of `run` (another run's batches are not visible, like its
    /// conversations).
    pub(in crate::sim) fn get(&self, run: &str, id: &str) -> Option<Arc<Batch>> {
        lock(&self.batches)
            .iter()
            .find(|b| b.id == id && b.run == run)
            .cloned()
    }

    /// The batches of `run` through `api`, most recent first.
    pub(in crate::sim) fn list(&self, run: &str, anthropic: bool) -> Vec<Arc<Batch>> {
        lock(&self.batches)
            .iter()
            .rev()
            .filter(|b| b.run == run && matches!(b.api, Api::Anthropic) == anthropic)
            .cloned()
            .collect()
    }

    /// The batch whose output or error file `file_id` is.
    pub(in crate::sim) fn batch_of_file(&self, file_id: &str) -> Option<Arc<Batch>> {
        lock(&self.batches)
            .iter()
            .find(|b| {
                let p = lock(&b.progress);
                p.output_file_id.as_deref() == Some(file_id)
                    || p.error_file_id.as_deref() == Some(file_id)
            })
            .cloned()
    }
}

/// One item of a batch as `GET /_sim/batches` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ItemRecord {
    pub custom_id: String,
    /// The script key the item plays.
    pub key: String,
    /// processing, succeeded, errored, canceled or expired.
    pub state: &'static str,
    /// The answer's HTTP status, when the endpoint answered.
    pub status: Option<u16>,
    pub done_ms: Option<u64>,
}

/// A batch as `GET /_sim/batches` shows it: what the simulator knows, including the
/// progress the Anthropic API does not show until a batch ends.
#[derive(Debug, Clone, Serialize)]
pub struct BatchRecord {
    pub id: String,
    pub run: String,
    /// The protocol its items play.
    pub protocol: Protocol,
    pub created_ms: u64,
    /// The status the API reports now (Anthropic `processing_status`, OpenAI `status`).
    pub status: String,
    pub items: Vec<ItemRecord>,
    pub calls: BatchCalls,
}

fn state_word(o: &Option<Outcome>) -> &'static str {
    match o {
        None => "processing",
        Some(Outcome::Answered { status: 200, .. }) => "succeeded",
        Some(Outcome::Answered { .. }) => "errored",
        Some(Outcome::Canceled) => "canceled",
        Some(Outcome::Expired) => "expired",
    }
}

impl Store {
    pub(super) fn records(&self) -> Vec<BatchRecord> {
        lock(&self.batches)
            .iter()
            .map(|b| {
                let p = lock(&b.progress);
                BatchRecord {
                    id: b.id.clone(),
                    run: b.run.clone(),
                    protocol: b.protocol(),
                    created_ms: b.created_ms,
                    status: b.wire.status(&p).to_string(),
                    items: p
                        .items
                        .iter()
                        .map(|i| ItemRecord {
                            custom_id: i.custom_id.clone(),
                            key: item_key(&i.custom_id).to_string(),
                            state: state_word(&i.outcome),
                            status: match &i.outcome {
                                Some(Outcome::Answered { status, .. }) => Some(*status),
                                _ => None,
                            },
                            done_ms: i.done_ms,
                        })
                        .collect(),
                    calls: p.calls.clone(),
                }
            })
            .collect()
    }
}

/// Anthropic's timestamps: RFC 3339 with microseconds, as the API reference shows them.
pub(in crate::sim) fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

pub(in crate::sim) fn now_ms(state: &SimState) -> u64 {
    state.started.elapsed().as_millis() as u64
}

/// The headers every item of a batch is played with: the create request's, as a JSON
/// request to the endpoint would carry them.
fn item_headers(headers: &HeaderMap) -> HeaderMap {
    let mut h = headers.clone();
    for name in [
        "content-length",
        "content-type",
        "transfer-encoding",
        "host",
    ] {
        h.remove(name);
    }
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h
}

/// Registers a new batch and starts processing it.
pub(in crate::sim) fn start(state: &Arc<SimState>, batch: Batch) -> Arc<Batch> {
    let batch = Arc::new(batch);
    lock(&state.batches.batches).push(batch.clone());
    tokio::spawn(process(state.clone(), batch.clone()));
    batch
}

/// Processes a batch: OpenAI's validation first, then each item when it is due, until
/// all are done, the batch is cancelled or its time runs out.
async fn process(state: Arc<SimState>, batch: Arc<Batch>) {
    let settings = state.batches.settings();
    if !batch.wire.validate(&state, &batch, &settings) {
        return;
    }
    let deadline = batch.created + settings.expire_after;
    let count = lock(&batch.progress).items.len();
    let protocol = batch.protocol();
    let headers = item_headers(&batch.headers);
    let mut end = End::Completed;
    let mut next = 0;
    while next < count {
        let due = batch.created + settings.delay + settings.spread * next as u32;
        let now = Instant::now();
        if lock(&batch.progress).phase == Phase::Canceling {
            end = End::Cancelled;
            break;
        }
        if now >= deadline {
            end = End::Expired;
            break;
        }
        if now < due {
            tokio::select! {
                _ = tokio::time::sleep_until(due.min(deadline).into()) => {}
                _ = batch.wake.notified() => {}
            }
            continue;
        }
        let (custom_id, body) = {
            let p = lock(&batch.progress);
            (p.items[next].custom_id.clone(), p.items[next].body.clone())
        };
        let played = play_item(&state, &batch, protocol, &headers, &custom_id, &body);
        let outcome = match tokio::time::timeout(deadline - now, played).await {
            Ok(o) => o,
            Err(_) => Outcome::Expired,
        };
        let mut p = lock(&batch.progress);
        p.items[next].outcome = Some(outcome);
        p.items[next].done_ms = Some(now_ms(&state));
        next += 1;
    }
    finish(&state, &batch, end);
}

/// An error answer in OpenAI's shape, `{error: {message, type, param, code}}` (an empty
/// code is sent as null).
pub(in crate::sim) fn openai_error(
    state: &SimState,
    status: StatusCode,
    code: &str,
    param: Option<&str>,
    message: &str,
) -> Response {
    let ty = if status.is_server_error() {
        "server_error"
    } else {
        "invalid_request_error"
    };
    let code = (!code.is_empty()).then_some(code);
    let body = json!({"error": {"message": message, "type": ty, "param": param, "code": code}});
    let mut resp = (status, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&next_request_id(state)) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// Plays one item through the synchronous path and keeps what it answered.
async fn play_item(
    state: &SimState,
    batch: &Batch,
    protocol: Protocol,
    headers: &HeaderMap,
    custom_id: &str,
    body: &Value,
) -> Outcome {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let key = item_key(custom_id).to_string();
    let (resp, request_id) = play(
        state,
        protocol,
        batch.run.clone(),
        key,
        headers,
        &bytes,
        Some(&batch.id),
    )
    .await;
    if resp.extensions().get::<Expired>().is_some() {
        return Outcome::Expired;
    }
    let status = resp.status().as_u16();
    let read = axum::body::to_bytes(resp.into_body(), usize::MAX).await;
    match read.ok().and_then(|b| serde_json::from_slice(&b).ok()) {
        Some(body) => Outcome::Answered {
            status,
            body,
            request_id,
        },
        // A broken answer (a scripted disconnect or damaged body) reaches the client of a
        // batch as a server error.
        None => {
            let message = "The simulated server failed while answering this request.";
            let body = batch.wire.server_error(message, &request_id);
            Outcome::Answered {
                status: 500,
                body,
                request_id,
            }
        }
    }
}

/// Ends a batch: the items left become canceled or expired, and OpenAI's output and
/// error files are written.
fn finish(state: &SimState, batch: &Batch, end: End) {
    let now = Utc::now();
    let mut p = lock(&batch.progress);
    let left = match end {
        End::Cancelled => Outcome::Canceled,
        _ => Outcome::Expired,
    };
    let at = now_ms(state);
    for item in p.items.iter_mut().filter(|i| i.outcome.is_none()) {
        item.outcome = Some(left.clone());
        item.done_ms = Some(at);
    }
    p.phase = Phase::Ended;
    p.end = Some(end);
    p.finalizing_at = Some(now);
    p.ended_at = Some(now);
    batch.wire.ended(state, batch, &mut p);
}

/// Cancels a batch still in progress; the processing task ends it.
pub(in crate::sim) fn request_cancel(batch: &Batch, at_ms: u64) {
    let mut p = lock(&batch.progress);
    p.calls.cancels_ms.push(at_ms);
    if matches!(p.phase, Phase::InProgress | Phase::Validating) {
        p.phase = Phase::Canceling;
        p.cancel_at = Some(Utc::now());
        batch.wake.notify_one();
    }
}

/// The value of `name` in a query string (ids and numbers only: no decoding needed).
pub(in crate::sim) fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A request too big to read: the Anthropic batch body (256 MB) and an uploaded file
/// (512 MB) are far over axum's default limit.
const MAX_BODY: usize = 512 * 1024 * 1024;

/// The path's parameters: the run (empty on the routes without one) and the id.
pub(in crate::sim) type Params = Option<axum::extract::Path<HashMap<String, String>>>;

pub(in crate::sim) fn params(p: Params) -> (String, String) {
    let mut m = p.map(|p| p.0).unwrap_or_default();
    (
        m.remove("run").unwrap_or_default(),
        m.remove("id").unwrap_or_default(),
    )
}

/// The simulator's router, which each protocol adds its batch routes to.
pub(in crate::sim) type SimRouter = Router<Arc<SimState>>;

/// A POST route that reads bodies up to [`MAX_BODY`].
pub(in crate::sim) fn big_post(r: MethodRouter<Arc<SimState>>) -> MethodRouter<Arc<SimState>> {
    r.layer(DefaultBodyLimit::max(MAX_BODY))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_plays_the_key_before_the_last_double_dash() {
        assert_eq!(item_key("task7--3"), "task7");
        assert_eq!(item_key("a--b--12"), "a--b");
        assert_eq!(item_key("plain"), "plain");
        assert_eq!(item_key("--1"), "");
        assert_eq!(item_key("t-1"), "t-1");
    }

    #[test]
    fn query_params_are_found_by_name() {
        let q = Some("limit=5&after_id=msgbatch_sim_000002");
        assert_eq!(query_param(q, "limit"), Some("5"));
        assert_eq!(query_param(q, "after_id"), Some("msgbatch_sim_000002"));
        assert_eq!(query_param(q, "before_id"), None);
        assert_eq!(query_param(None, "limit"), None);
    }
}
