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

mod batch;
mod bounds;
mod cache;
pub(crate) mod chaos;
mod chat;
mod check;
mod compaction;
mod fault;
mod limits;
mod respond;
mod responses;
pub mod script;
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
use check::History;
use fault::{play_fault, slow_body};
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
        let app = batch::routes(app, "");
        let app = batch::routes(app, "/r/{run}");
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
    match protocol {
        Protocol::Anthropic => "v1/messages",
        Protocol::OpenaiResponses => "v1/responses",
        Protocol::OpenaiChat => "v1/chat/completions",
    }
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
    let body = match protocol {
        Protocol::Anthropic => respond::error_body(&r.error_type, &r.message, request_id),
        _ => respond::openai_error_body(
            r.status.as_u16(),
            &r.error_type,
            r.code.as_deref(),
            &r.message,
        ),
    };
    let mut resp = (r.status, Json(body)).into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(request_id) {
        let name = if protocol == Protocol::Anthropic {
            "request-id"
        } else {
            "x-request-id"
        };
        h.insert(name, v);
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
    let outcome = answer(state, headers, parsed, body.len(), &request_id, &mut rec).await;
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
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    match protocol {
        Protocol::Anthropic => {
            if header("x-api-key").is_empty() && header("authorization").is_empty() {
                return Err(Refusal::new(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "x-api-key header is required",
                ));
            }
            let version = header("anthropic-version").to_string();
            if version.is_empty() {
                return Err(Refusal::bad_request(
                    "anthropic-version: header is required",
                ));
            }
            Ok(version)
        }
        Protocol::OpenaiResponses | Protocol::OpenaiChat => {
            if !header("authorization").starts_with("Bearer ") {
                let mut r = Refusal::new(
                    StatusCode::UNAUTHORIZED,
                    "authentication_error",
                    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                );
                r.code = Some("invalid_api_key".into());
                return Err(r);
            }
            Ok(String::new())
        }
    }
}

/// A fresh request id, as every answer carries one.
fn next_request_id(state: &SimState) -> String {
    format!(
        "req_sim_{:06}",
        state.request_ids.fetch_add(1, Ordering::Relaxed) + 1
    )
}

/// Checks and answers one request; `rec` names the run, script key and protocol and
/// receives what happened.
async fn answer(
    state: &SimState,
    headers: &HeaderMap,
    parsed: Result<Value, serde_json::Error>,
    body_len: usize,
    request_id: &str,
    rec: &mut RecordedRequest,
) -> Result<Response, Refusal> {
    let protocol = rec.protocol;
    let key = rec.key.clone();
    let key = key.as_str();
    // Conversation state is kept per run and script key.
    let conv = format!("{}/{}", rec.run, rec.key);
    let conv = conv.as_str();
    let version = check_headers(protocol, headers)?;
    let request = parsed
        .map_err(|e| Refusal::bad_request(format!("The request body is not valid JSON: {e}")))?;
    let script = lock(&state.scripts).get(key).cloned().ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            if key.is_empty() {
                format!("no simulator script is registered for POST /{} (start `agentbatch sim` with --script or --job)", endpoint_path(protocol))
            } else {
                format!("no simulator script is registered for task \"{key}\"")
            },
        )
    })?;
    let base = summary::base(protocol, &request);
    let history = ConversationHistory { state, conv, base };
    match protocol {
        Protocol::Anthropic => check::check_request(&request, &version, &history),
        Protocol::OpenaiResponses => responses::check_request(&request, &history),
        Protocol::OpenaiChat => chat::check_request(&request, &history),
    }
    .map_err(|v| Refusal::bad_request(v.0))?;
    let step = summary::step(protocol, &request, base);
    // Tokens are counted on the body without the fields that only ask for a stream:
    // an API counts the prompt, not how the answer is delivered.
    let body_len = body_len.saturating_sub(stream::request_field_bytes(&request));
    // Anthropic's context editing rewrites the prompt before anything counts it.
    let beta = headers
        .get("anthropic-beta")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let edited =
        window::context_edits(protocol, beta, &request, body_len).map_err(Refusal::bad_request)?;
    let (request, body_len, applied) = match edited {
        Some(e) => (e.request, e.body_len, Some(e.applied)),
        None => (request, body_len, None),
    };
    // OpenAI's server-side compaction: the answer is counted on the reduced context.
    let compacted = match protocol {
        Protocol::OpenaiResponses => {
            compaction::apply(&request, body_len, step).map_err(Refusal::bad_request)?
        }
        _ => None,
    };
    let body_len = compacted.as_ref().map_or(body_len, |c| c.body_len);
    let max_tokens = limits::requested_max_tokens(protocol, &request);
    if let Some((message, code)) = window::refusal(
        protocol,
        &request,
        body_len,
        max_tokens,
        script.context_window,
    ) {
        let mut r = Refusal::bad_request(message);
        r.code = code.map(str::to_string);
        return Err(r);
    }
    // Batches have their own quota: their items do not count against per-minute limits.
    let limits = match rec.batch {
        Some(_) => None,
        None => lock(&state.limits).clone(),
    };
    let mut rate_headers = match &limits {
        None => Vec::new(),
        Some(l) => {
            let counted = limits::counted_input(&state.cache, protocol, &request, body_len);
            match l.charge(protocol, counted, max_tokens) {
                Ok(h) => h,
                Err((wait, mut h)) => {
                    h.extend(limits::retry_after(protocol, wait));
                    rec.status = 429;
                    rec.error = Some(format!("rate limited: retry in {} ms", wait.as_millis()));
                    let mut r = Refusal::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "rate_limit_error",
                        "This request would exceed the simulator's rate limit. Please wait and retry.",
                    );
                    r.code = Some("rate_limit_exceeded".into());
                    return Ok(error_response(protocol, &r, request_id, &h));
                }
            }
        }
    };
    rec.step = Some(step);
    // A summary request is answered with a summary, not a script step: its attempts
    // are its own, and nothing is kept for replay checks.
    let summarizing = summary::wanted(protocol, &request);
    let played = if summarizing {
        Some(std::borrow::Cow::Owned(summary::turn(
            protocol,
            &request,
            step,
            script.summary.as_deref(),
        )))
    } else {
        script.turn_for(step, protocol, &request, key)
    }
    .ok_or_else(|| {
            Refusal::bad_request(format!(
                "simulator script for \"{key}\" has {} turn(s) and no repeat_last; this request asks for turn {}",
                script.turns.len(),
                step + 1
            ))
        })?;
    let turn: &script::ScriptTurn = &played;
    let attempt = {
        // A summary request's attempts are counted apart from the step's.
        let counter = match summarizing {
            true => format!("{conv}#summary"),
            false => conv.to_string(),
        };
        let mut a = lock(&state.attempts);
        let n = a.entry((counter, step)).or_insert(0);
        *n += 1;
        *n - 1
    };
    if let Some(latency) = turn.latency.or(script.latency) {
        tokio::time::sleep(latency.0).await;
    }
    let streaming = stream::wanted(&request);
    let render = |c| match protocol {
        Protocol::Anthropic => respond::render(turn, &request, body_len, key, step, c),
        Protocol::OpenaiResponses => responses::render(turn, &request, body_len, key, step, c),
        Protocol::OpenaiChat => chat::render(turn, &request, body_len, key, step, c),
    };
    // What context editing cleared goes with the answer, streamed or broken too.
    let with_edits = |mut r: Value| {
        if let Some(a) = &applied {
            r["context_management"] = a.clone();
        }
        if let Some(out) = compacted.as_ref().zip(r["output"].as_array_mut()) {
            out.1.insert(0, out.0.item.clone());
        }
        r
    };
    if let Some(fault) = turn.faults.get(attempt) {
        rec.error = Some(format!(
            "scripted fault {} of {}",
            attempt + 1,
            turn.faults.len()
        ));
        if fault.batch_expire && rec.batch.is_some() {
            return Ok(batch::expired_response());
        }
        let resp = match fault.mid_stream {
            None => play_fault(protocol, fault, request_id),
            Some(kind) if streaming => {
                // The answer the stream starts to send, without touching the cache.
                let rendered = with_edits(render(state.cache.peek(protocol, &request)));
                let body = stream::broken(protocol, fault, kind, &rendered, &request, key, step);
                ok_response(
                    body,
                    protocol,
                    request_id,
                    stream::CONTENT_TYPE,
                    &rate_headers,
                )
            }
            Some(kind) => stream::unstreamed(protocol, fault, kind, request_id),
        };
        rec.status = resp.status().as_u16();
        return Ok(resp);
    }
    let rendered = with_edits(render(state.cache.apply(protocol, &request)));
    let used = limits::output_tokens(protocol, &rendered);
    let streamed = streaming.then(|| stream::body(protocol, turn, &rendered, &request, key, step));
    // What the client receives: the rendered answer, or a scripted raw body (which is
    // only an answer if it parses as one).
    let (sent, mut bytes) = match &turn.raw_body {
        Some(raw) => (
            serde_json::from_str::<Value>(raw).ok(),
            raw.clone().into_bytes(),
        ),
        None => {
            let bytes = serde_json::to_vec(&rendered).unwrap_or_default();
            (Some(rendered), bytes)
        }
    };
    let replayable = sent.as_ref().and_then(|m| match protocol {
        Protocol::Anthropic => m["content"].is_array().then(|| SentTurn {
            content: m["content"].clone(),
            stop_reason: m["stop_reason"].as_str().unwrap_or("").to_string(),
            context: Value::Null,
        }),
        Protocol::OpenaiResponses => responses::replayable(m, &request),
        Protocol::OpenaiChat => chat::replayable(m),
    });
    if !summarizing {
        let mut map = lock(&state.sent);
        match replayable {
            Some(t) => map.insert((conv.to_string(), step), Arc::new(t)),
            None => map.remove(&(conv.to_string(), step)),
        };
    }
    if let Some(l) = &limits {
        let used = used.unwrap_or_else(|| (bytes.len() as u64).div_ceil(4));
        rate_headers.extend(l.correct_output(protocol, max_tokens, used));
    }
    rec.response = sent;
    if let Some(body) = streamed {
        return Ok(ok_response(
            body,
            protocol,
            request_id,
            stream::CONTENT_TYPE,
            &rate_headers,
        ));
    }
    if turn.truncate_body {
        bytes.truncate(bytes.len() / 2);
    }
    let body = match turn.body_delay {
        Some(d) => slow_body(bytes, d.0),
        None => Body::from(bytes),
    };
    Ok(ok_response(
        body,
        protocol,
        request_id,
        "application/json",
        &rate_headers,
    ))
}

/// A 200 answer with its request id and rate-limit headers.
fn ok_response(
    body: Body,
    protocol: Protocol,
    request_id: &str,
    content_type: &'static str,
    rate_headers: &[(String, String)],
) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static(content_type));
    if content_type == stream::CONTENT_TYPE {
        h.insert("cache-control", HeaderValue::from_static("no-cache"));
    }
    if let Ok(v) = HeaderValue::from_str(request_id) {
        h.insert(
            if protocol == Protocol::Anthropic {
                "request-id"
            } else {
                "x-request-id"
            },
            v,
        );
    }
    add_headers(h, rate_headers);
    resp
}
