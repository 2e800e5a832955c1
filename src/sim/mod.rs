//! The built-in simulated provider: a real HTTP server on 127.0.0.1 speaking the
//! Anthropic Messages, OpenAI Responses and OpenAI Chat Completions protocols (chosen by
//! the request path), playing one script per task, injecting latency and faults, and
//! checking what the client sends the way the real APIs do. Every test and the offline
//! demo go through it, so they exercise reqwest, the adapters and the retry code for
//! real.
//!
//! Routes, for each endpoint E of `v1/messages`, `v1/responses` and
//! `v1/chat/completions`: `POST /t/{key}/E` plays the script registered under `key`
//! (the runner registers each task under its id); `POST /r/{run}/t/{key}/E` does the
//! same with conversation state (faults played, answers sent) kept apart per run, which
//! is what the runner uses, so a standalone simulator serves many runs alike; `POST /E`
//! plays the script registered under the empty key; `GET /_sim/requests` returns the
//! request log. The providers' batch APIs (`/v1/messages/batches`, `/v1/files`,
//! `/v1/batches`, at the root and under `/r/{run}`) play each item like a synchronous
//! request (see `batch`); `GET /_sim/batches` shows their progress and the calls made.

mod answer;
mod batch;
mod bounds;
mod cache;
pub(crate) mod chaos;
mod clock;
mod fault;
mod limits;
mod marker;
mod protocol;
mod respond;
mod rng;
pub mod script;
mod script_check;
mod sse;
mod stream;
mod summary;
mod window;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::model::Protocol;
pub use batch::{item_key, BatchCalls, BatchRecord, BatchSettings, ItemRecord};
use fault::{play_fault, slow_body};
use protocol::{served, History};
use script::Script;

/// What the simulator answered at one step of a conversation, for checking replays.
#[derive(Debug, Clone, PartialEq)]
pub struct SentTurn {
    pub content: Value,
    pub stop_reason: String,
    /// What else later requests must repeat (Responses: the instructions).
    pub context: Value,
}

/// One request as the simulator saw it.
#[derive(Debug, Clone, Serialize)]
pub struct RecordedRequest {
    /// Milliseconds from the simulator's start to the request's arrival.
    pub at_ms: u64,
    /// The run id from the path (empty for the routes without one).
    pub run: String,
    pub key: String,
    /// The protocol the request's path chose.
    pub protocol: Protocol,
    /// The script turn the request asked for (assistant messages in its history).
    pub step: Option<usize>,
    /// Header values; credentials are replaced by `<redacted>`.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON, or as a string when it was not JSON.
    pub body: Value,
    pub status: u16,
    /// The error message when the simulator refused the request or played a fault.
    pub error: Option<String>,
    /// The message the simulator rendered for a 200 answer (before any scripted body
    /// damage), so tests can check replays and usage against it.
    pub response: Option<Value>,
    /// The batch the request came in as an item of (absent for a synchronous request),
    /// so tests can tell what a provider bills at batch prices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
}

type Key = (String, usize);

struct SimState {
    started: std::time::Instant,
    limits: Mutex<Option<Arc<limits::ServerLimits>>>,
    /// Whether answers carry the rate-limit headers (a server such as vLLM states
    /// none: its limits are found by their 429s alone).
    limit_headers: std::sync::atomic::AtomicBool,
    scripts: Mutex<HashMap<String, Arc<Script>>>,
    /// Shared, so checking a long history's replays copies no answers.
    sent: Mutex<HashMap<Key, Arc<SentTurn>>>,
    attempts: Mutex<HashMap<Key, usize>>,
    log: Mutex<Vec<RecordedRequest>>,
    /// Keep each request's body in the log (tests read them; a long benchmark would
    /// hold every body it was sent).
    keep_bodies: std::sync::atomic::AtomicBool,
    request_ids: AtomicU64,
    cache: cache::PromptCache,
    batches: batch::Store,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the simulator sent in one conversation, from the step its history's first
/// model turn was (past 0 after a summary).
struct ConversationHistory<'a> {
    state: &'a SimState,
    conv: &'a str,
    base: usize,
}

impl History for ConversationHistory<'_> {
    fn sent(&self, step: usize) -> Option<Arc<SentTurn>> {
        lock(&self.state.sent)
            .get(&(self.conv.to_string(), step + self.base))
            .cloned()
    }
}

/// A running simulator. Dropping it stops the server.
pub struct Sim {
    addr: SocketAddr,
    state: Arc<SimState>,
    server: JoinHandle<()>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Sim {
    /// Starts a simulator on `addr` (use port 0 for any free port).
    pub async fn start(addr: SocketAddr) -> std::io::Result<Sim> {
        let state = Arc::new(SimState {
            started: std::time::Instant::now(),
            limits: Mutex::default(),
            limit_headers: std::sync::atomic::AtomicBool::new(true),
            scripts: Mutex::default(),
            sent: Mutex::default(),
            attempts: Mutex::default(),
            log: Mutex::default(),
            keep_bodies: std::sync::atomic::AtomicBool::new(true),
            request_ids: AtomicU64::default(),
            cache: cache::PromptCache::default(),
            batches: batch::Store::default(),
        });
        let mut app = Router::new();
        for protocol in Protocol::ALL {
            let path = endpoint_path(protocol);
            app = app
                .route(
                    &format!("/{path}"),
                    post(move |State(s), headers, body| {
                        messages(s, protocol, String::new(), String::new(), headers, body)
                    }),
                )
                .route(
                    &format!("/t/{{key}}/{path}"),
                    post(move |State(s), Path(key), headers, body| {
                        messages(s, protocol, String::new(), key, headers, body)
                    }),
                )
                .route(
                    &format!("/r/{{run}}/t/{{key}}/{path}"),
                    post(move |State(s), Path((run, key)), headers, body| {
                        messages(s, protocol, run, key, headers, body)
                    }),
                );
        }
        // Each protocol's batch API, at the root and under a run.
        for prefix in ["", "/r/{run}"] {
            for protocol in Protocol::ALL {
                app = served(protocol).batch_routes(app, prefix);
            }
        }
        let app = app
            .route("/_sim/requests", get(requests))
            .route("/_sim/batches", get(batches))
            .fallback(not_found)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            // The server only ends with an I/O error on the listener; the runner notices
            // through failed requests.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Sim {
            addr,
            state,
            server,
        })
    }

    /// Starts a simulator on a free port of 127.0.0.1.
    pub async fn start_local() -> std::io::Result<Sim> {
        Sim::start(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The API root for the script registered under the empty key.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The API root for the script registered under `key`.
    pub fn base_url_for(&self, key: &str) -> String {
        format!("http://{}/t/{key}", self.addr)
    }

    /// Plays `script` for requests under `key` (the empty key: `POST /v1/messages`).
    pub fn register(&self, key: &str, script: Arc<Script>) {
        lock(&self.state.scripts).insert(key.to_string(), script);
    }

    /// Enforces per-minute limits on every client from now on (None: no limits).
    pub fn set_limits(&self, limits: Option<&crate::vocab::limits::RateLimits>) {
        *lock(&self.state.limits) = limits
            .filter(|l| !l.is_empty())
            .map(|l| Arc::new(limits::ServerLimits::new(l)));
    }

    /// Whether answers state the limits (`*-ratelimit-*` headers; on by default). Off,
    /// the simulator plays a server that enforces limits it does not state: a 429
    /// still says `retry-after`.
    pub fn send_limit_headers(&self, send: bool) {
        self.state.limit_headers.store(send, Ordering::Relaxed);
    }

    /// Whether the request log keeps bodies (and rendered answers); on by default.
    pub fn keep_request_bodies(&self, keep: bool) {
        self.state.keep_bodies.store(keep, Ordering::Relaxed);
    }

    /// Moves the prompt cache's clock forward, so tests can see entries expire.
    pub fn advance_clock(&self, by: Duration) {
        self.state.cache.advance(by);
    }

    /// Requests received so far, answered or still being answered.
    pub fn received(&self) -> u64 {
        self.state.request_ids.load(Ordering::Relaxed)
    }

    /// Every request answered so far, in the order the answers were finished.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.log).clone()
    }

    /// How batches are processed from now on (delay, spread, expiry, size limits).
    pub fn set_batch_settings(&self, settings: BatchSettings) {
        self.state.batches.set_settings(settings);
    }

    /// Every batch created so far, with its items' progress and the calls made about it.
    pub fn batches(&self) -> Vec<BatchRecord> {
        self.state.batches.records()
    }
}

/// The path of a protocol's endpoint under an API root.
fn endpoint_path(protocol: Protocol) -> &'static str {
    served(protocol).path()
}

async fn requests(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedRequest>> {
    Json(lock(&state.log).clone())
}

async fn batches(State(state): State<Arc<SimState>>) -> Json<Vec<BatchRecord>> {
    Json(state.batches.records())
}

async fn not_found() -> Response {
    let refusal = Refusal::new(
        StatusCode::NOT_FOUND,
        "not_found_error",
        "Not found: the simulator serves POST [/r/{run}][/t/{key}]/v1/messages, .../v1/responses and .../v1/chat/completions",
    );
    error_response(Protocol::Anthropic, &refusal, "req_sim_404", &[])
}

/// An error answer: its status, its type (Anthropic's vocabulary, translated for
/// OpenAI), an OpenAI `code`, and the message.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    error_type: String,
    code: Option<String>,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, error_type: &str, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            error_type: error_type.to_string(),
            code: None,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }
}

fn error_response(
    protocol: Protocol,
    r: &Refusal,
    request_id: &str,
    extra: &[(String, String)],
) -> Response {
    let served = served(protocol);
    let body = served.error_body(
        r.status.as_u16(),
        &r.error_type,
        r.code.as_deref(),
        &r.message,
        request_id,
    );
    let mut resp = (r.status, Json(body)).into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(served.request_id_header(), v);
    }
    add_headers(h, extra);
    resp
}

fn add_headers(h: &mut HeaderMap, extra: &[(String, String)]) {
    for (k, v) in extra {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.insert(k, v);
        }
    }
}

fn recorded_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| {
            let name = k.as_str().to_string();
            let value = if matches!(name.as_str(), "x-api-key" | "authorization") {
                "<redacted>".to_string()
            } else {
                v.to_str().unwrap_or("<binary>").to_string()
            };
            (name, value)
        })
        .collect()
}

async fn messages(
    state: Arc<SimState>,
    protocol: Protocol,
    run: String,
    key: String,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    play(&state, protocol, run, key, &headers, &body, None)
        .await
        .0
}

/// Plays one request to a model endpoint and logs it: the synchronous routes and every
/// item of a batch go through here, so a batched turn is checked, cached, counted and
/// answered exactly like the same turn sent alone. Returns the answer and its request
/// id. An item that a scripted `batch_expire` fault expires is not logged: the provider
/// never ran it.
async fn play(
    state: &SimState,
    protocol: Protocol,
    run: String,
    key: String,
    headers: &HeaderMap,
    body: &[u8],
    batch: Option<&str>,
) -> (Response, String) {
    let arrived = std::time::Instant::now();
    let request_id = next_request_id(state);
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let mut rec = RecordedRequest {
        at_ms: state.started.elapsed().as_millis() as u64,
        run,
        key,
        protocol,
        step: None,
        headers: recorded_headers(headers),
        body: match &parsed {
            _ if !state.keep_bodies.load(Ordering::Relaxed) => Value::Null,
            Ok(v) => v.clone(),
            Err(_) => Value::String(String::from_utf8_lossy(body).into_owned()),
        },
        status: 200,
        error: None,
        response: None,
        batch: batch.map(str::to_string),
    };
    let outcome = answer::answer(
        state,
        headers,
        parsed,
        body.len(),
        &request_id,
        &mut rec,
        arrived,
    )
    .await;
    let resp = match outcome {
        Ok(resp) => resp,
        Err(refusal) => {
            rec.status = refusal.status.as_u16();
            rec.error = Some(refusal.message.clone());
            error_response(protocol, &refusal, &request_id, &[])
        }
    };
    if !state.keep_bodies.load(Ordering::Relaxed) {
        rec.response = None;
    }
    if resp.extensions().get::<batch::Expired>().is_none() {
        lock(&state.log).push(rec);
    }
    (resp, request_id)
}

/// The client's credentials and headers, as each protocol requires them.
fn check_headers(protocol: Protocol, headers: &HeaderMap) -> Result<String, Refusal> {
    let version = check_key(protocol, headers)?;
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/json") {
        return Err(Refusal::bad_request(
            "content-type must be application/json",
        ));
    }
    Ok(version)
}

/// The client's credentials (and Anthropic's version header, which it returns): what
/// every request needs, a body or not.
fn check_key(protocol: Protocol, headers: &HeaderMap) -> Result<String, Refusal> {
    served(protocol).check_key(headers)
}

/// A fresh request id, as every answer carries one.
fn next_request_id(state: &SimState) -> String {
    format!(
        "req_sim_{:06}",
        state.request_ids.fetch_add(1, Ordering::Relaxed) + 1
    )
}
