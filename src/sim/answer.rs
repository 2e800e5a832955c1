//! Answering one request that passed the checks: the script's step, its faults, the
//! window, the cache and the rate limits, rendered for the request's protocol, whole
//! or streamed.

use super::*;

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
        Some(std::borrow::Cow::Owned(
            script.summary_for(protocol, &request, key, step),
        ))
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
        clock::sleep_until(arrived + latency.0).await;
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
    let mut rendered = with_edits(render(state.cache.apply(protocol, &request)));
    let used = limits::output_tokens(protocol, &rendered);
    if turn.contradict_usage {
        super::contradict::usage(protocol, &mut rendered, max_tokens);
    }
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
