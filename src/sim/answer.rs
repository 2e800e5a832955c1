//! Answering one request that passed the checks: the script's step, its faults, the
//! window, the cache and the rate limits, rendered for the request's protocol, whole
//! or streamed.

use std::borrow::Cow;

use super::protocol::{Compacted, Headers, Served};
use super::*;

/// A request that passed the checks, as the provider reads it.
struct Read {
    request: Value,
    /// Its bytes as counted (without the stream fields, after context editing and
    /// compaction).
    body_len: usize,
    step: usize,
    max_tokens: u64,
    /// What Anthropic's context editing cleared: the answer's `context_management`.
    applied: Option<Value>,
    /// What the Responses API compacted server-side.
    compacted: Option<Compacted>,
}

impl Read {
    /// What context editing cleared or compaction made goes with the answer, streamed
    /// or broken too.
    fn with_edits(&self, mut r: Value) -> Value {
        if let Some(a) = &self.applied {
            r["context_management"] = a.clone();
        }
        if let Some(out) = self.compacted.as_ref().zip(r["output"].as_array_mut()) {
            out.1.insert(0, out.0.item.clone());
        }
        r
    }
}

/// Checks and answers one request; `rec` names the run, script key and protocol and
/// receives what happened. A scripted latency counts from `arrived`, when the request
/// was read, as a provider's would: the simulator's own work is inside it.
pub(super) async fn answer(
    state: &SimState,
    headers: &HeaderMap,
    parsed: Result<Value, serde_json::Error>,
    body_len: usize,
    request_id: &str,
    rec: &mut RecordedRequest,
    arrived: std::time::Instant,
) -> Result<Response, Refusal> {
    let served = served(rec.protocol);
    let key = rec.key.clone();
    let key = key.as_str();
    // Conversation state is kept per run and script key.
    let conv = format!("{}/{}", rec.run, rec.key);
    let conv = conv.as_str();
    let (read, script) = read(state, served, headers, parsed, body_len, key, conv)?;
    // Batches have their own quota: their items do not count against per-minute limits.
    let limits = match rec.batch {
        Some(_) => None,
        None => lock(&state.limits).clone(),
    };
    let stated = state
        .limit_headers
        .load(std::sync::atomic::Ordering::Relaxed);
    let mut rate_headers = match charge(state, served, limits.as_deref(), &read, rec) {
        Ok(h) if stated => h,
        Ok(_) => Vec::new(),
        Err(refused) => {
            // retry-after stays: a server that states no limits still says when to
            // come back.
            let headers: Headers = if stated {
                refused.1
            } else {
                refused
                    .1
                    .into_iter()
                    .filter(|(k, _)| !k.contains("ratelimit"))
                    .collect()
            };
            return Ok(error_response(
                served.protocol(),
                &refused.0,
                request_id,
                &headers,
            ));
        }
    };
    rec.step = Some(read.step);
    let step = read.step;
    // A summary request is answered with a summary, not a script step: its attempts
    // are its own, and nothing is kept for replay checks.
    let summarizing = summary::wanted(served.protocol(), &read.request);
    let played = turn_of(&script, served, &read, key, summarizing)?;
    let turn: &script::ScriptTurn = &played;
    let attempt = next_attempt(state, conv, step, summarizing);
    if let Some(latency) = turn.latency.or(script.latency) {
        clock::sleep_until(arrived + latency.0).await;
    }
    let answered = Answered {
        state,
        served,
        read: &read,
        turn,
        key,
        request_id,
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
        let resp = answered.fault(fault, &rate_headers);
        rec.status = resp.status().as_u16();
        return Ok(resp);
    }
    let (sent, bytes, streamed, used) = answered.render();
    if !summarizing {
        let replayable = sent
            .as_ref()
            .and_then(|m| served.replayable(m, &read.request));
        let mut map = lock(&state.sent);
        match replayable {
            Some(t) => map.insert((conv.to_string(), step), Arc::new(t)),
            None => map.remove(&(conv.to_string(), step)),
        };
    }
    if let Some(l) = &limits {
        let used = used.unwrap_or_else(|| (bytes.len() as u64).div_ceil(4));
        let headers = l.correct_output(served.protocol(), read.max_tokens, used);
        if stated {
            rate_headers.extend(headers);
        }
    }
    rec.response = sent;
    Ok(answered.send(bytes, streamed, &rate_headers))
}

/// Reads a request as the provider does: the credentials, the JSON, the script it
/// plays, the protocol's checks, the step it asks for, the edits and compaction the
/// provider makes, and the context window.
fn read(
    state: &SimState,
    served: &dyn Served,
    headers: &HeaderMap,
    parsed: Result<Value, serde_json::Error>,
    body_len: usize,
    key: &str,
    conv: &str,
) -> Result<(Read, Arc<Script>), Refusal> {
    let protocol = served.protocol();
    let version = check_headers(protocol, headers)?;
    let request = parsed
        .map_err(|e| Refusal::bad_request(format!("The request body is not valid JSON: {e}")))?;
    let script = lock(&state.scripts).get(key).cloned().ok_or_else(|| {
        Refusal::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            if key.is_empty() {
                format!("no simulator script is registered for POST /{} (start `agentbatch sim` with --script or --job)", served.path())
            } else {
                format!("no simulator script is registered for task \"{key}\"")
            },
        )
    })?;
    let base = summary::base(protocol, &request);
    let history = ConversationHistory { state, conv, base };
    served
        .check_request(&request, &version, &history)
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
    let edited = served
        .context_edits(beta, &request, body_len)
        .map_err(Refusal::bad_request)?;
    let (request, body_len, applied) = match edited {
        Some(e) => (e.request, e.body_len, Some(e.applied)),
        None => (request, body_len, None),
    };
    // OpenAI's server-side compaction: the answer is counted on the reduced context.
    let compacted = served
        .compaction(&request, body_len, step)
        .map_err(Refusal::bad_request)?;
    let body_len = compacted.as_ref().map_or(body_len, |c| c.body_len);
    let max_tokens = served.max_tokens(&request);
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
    let read = Read {
        request,
        body_len,
        step,
        max_tokens,
        applied,
        compacted,
    };
    Ok((read, script))
}

/// Charges a request to the rate limits (none: nothing to charge): Ok(the headers of
/// the windows), or Err(the 429 and its headers), which `rec` records.
fn charge(
    state: &SimState,
    served: &dyn Served,
    limits: Option<&limits::ServerLimits>,
    read: &Read,
    rec: &mut RecordedRequest,
) -> Result<Headers, (Refusal, Headers)> {
    let Some(l) = limits else {
        return Ok(Vec::new());
    };
    let protocol = served.protocol();
    let counted = limits::counted_input(&state.cache, protocol, &read.request, read.body_len);
    let (wait, mut h) = match l.charge(protocol, counted, read.max_tokens) {
        Ok(h) => return Ok(h),
        Err(refused) => refused,
    };
    h.extend(served.retry_after(wait));
    rec.status = 429;
    rec.error = Some(format!("rate limited: retry in {} ms", wait.as_millis()));
    let mut r = Refusal::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "This request would exceed the simulator's rate limit. Please wait and retry.",
    );
    r.code = Some("rate_limit_exceeded".into());
    Err((r, h))
}

/// The turn that answers the request: the script's (or the chaos model's) step, or a
/// summary when the request asks for one.
fn turn_of<'s>(
    script: &'s Script,
    served: &dyn Served,
    read: &Read,
    key: &str,
    summarizing: bool,
) -> Result<Cow<'s, script::ScriptTurn>, Refusal> {
    let (protocol, step) = (served.protocol(), read.step);
    let played = if summarizing {
        Some(Cow::Owned(script.summary_for(
            protocol,
            &read.request,
            key,
            step,
        )))
    } else {
        script.turn_for(step, protocol, &read.request, key)
    };
    played.ok_or_else(|| {
            Refusal::bad_request(format!(
                "simulator script for \"{key}\" has {} turn(s) and no repeat_last; this request asks for turn {}",
                script.turns.len(),
                step + 1
            ))
        })
}

/// Counts an attempt at `step` of conversation `conv` and returns how many came before
/// (a summary request's attempts are counted apart from the step's).
fn next_attempt(state: &SimState, conv: &str, step: usize, summarizing: bool) -> usize {
    let counter = match summarizing {
        true => format!("{conv}#summary"),
        false => conv.to_string(),
    };
    let mut a = lock(&state.attempts);
    let n = a.entry((counter, step)).or_insert(0);
    *n += 1;
    *n - 1
}

/// A played turn on its way to the client.
struct Answered<'a> {
    state: &'a SimState,
    served: &'a dyn Served,
    read: &'a Read,
    turn: &'a script::ScriptTurn,
    key: &'a str,
    request_id: &'a str,
}

impl Answered<'_> {
    /// The answer rendered against the cache's use (and the edits made).
    fn rendered(&self, cache: cache::CacheUse) -> Value {
        let r = self.read;
        self.read.with_edits(
            self.served
                .render(self.turn, &r.request, r.body_len, self.key, r.step, cache),
        )
    }

    /// The answer to an attempt a scripted fault fails.
    fn fault(&self, fault: &script::Fault, rate_headers: &[(String, String)]) -> Response {
        let (protocol, r) = (self.served.protocol(), self.read);
        match fault.mid_stream {
            None => play_fault(protocol, fault, self.request_id),
            Some(kind) if stream::wanted(&r.request) => {
                // The answer the stream starts to send, without touching the cache.
                let rendered =
                    self.rendered(self.served.cache_use(&self.state.cache, &r.request, false));
                let body = stream::broken(
                    protocol, fault, kind, &rendered, &r.request, self.key, r.step,
                );
                ok_response(
                    body,
                    self.served,
                    self.request_id,
                    stream::CONTENT_TYPE,
                    rate_headers,
                )
            }
            Some(kind) => stream::unstreamed(protocol, fault, kind, self.request_id),
        }
    }

    /// The answer as the client receives it: the rendered message (its usage perhaps
    /// contradicted), or a scripted raw body (which is only an answer if it parses as
    /// one); its bytes; its streamed body when the request streams; and the output
    /// tokens the rendered answer reports (before any contradiction).
    fn render(&self) -> (Option<Value>, Vec<u8>, Option<Body>, Option<u64>) {
        let (protocol, r, turn) = (self.served.protocol(), self.read, self.turn);
        let mut rendered =
            self.rendered(self.served.cache_use(&self.state.cache, &r.request, true));
        let used = self.served.output_tokens(&rendered);
        if turn.contradict_usage {
            super::protocol::contradict::usage(protocol, &mut rendered, r.max_tokens);
        }
        let streamed = stream::wanted(&r.request)
            .then(|| stream::body(protocol, turn, &rendered, &r.request, self.key, r.step));
        match &turn.raw_body {
            Some(raw) => (
                serde_json::from_str::<Value>(raw).ok(),
                raw.clone().into_bytes(),
                streamed,
                used,
            ),
            None => {
                let bytes = serde_json::to_vec(&rendered).unwrap_or_default();
                (Some(rendered), bytes, streamed, used)
            }
        }
    }

    /// The 200: streamed, or the bytes (cut in half by `truncate_body`, after
    /// `body_delay`).
    fn send(
        &self,
        mut bytes: Vec<u8>,
        streamed: Option<Body>,
        rate_headers: &[(String, String)],
    ) -> Response {
        let (served, request_id) = (self.served, self.request_id);
        if let Some(body) = streamed {
            return ok_response(body, served, request_id, stream::CONTENT_TYPE, rate_headers);
        }
        if self.turn.truncate_body {
            bytes.truncate(bytes.len() / 2);
        }
        let body = match self.turn.body_delay {
            Some(d) => slow_body(bytes, d.0),
            None => Body::from(bytes),
        };
        ok_response(body, served, request_id, "application/json", rate_headers)
    }
}

/// A 200 answer with its request id and rate-limit headers.
fn ok_response(
    body: Body,
    served: &dyn Served,
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
        h.insert(served.request_id_header(), v);
    }
    add_headers(h, rate_headers);
    resp
}
