//! Streamed answers (SSE). The events are assembled into the exact JSON body the
//! non-streaming API would have returned, so the protocol parsers and the history see
//! no difference; what can go wrong on the way (an error event inside the 200, a stream
//! cut before its final event, a stall) is a [`Failure`] like any other, so retries and
//! charging stay the agent loop's. Each protocol's assembler is in its folder of `protocol/`.

use std::time::Duration;

use eventsource_stream::{EventStreamError, Eventsource};
use futures::StreamExt;
use reqwest::header::CONTENT_TYPE;

use super::http::{open, post_once, read_whole, too_large, transport_failure, Opened, Post};
use super::protocol::events::{Broken, Step};
use super::protocol::wire;
use super::{Failure, HttpError, Protocol, RateHeaders, Reply};

/// Error types and codes, in either vendor's words, that a later attempt may not meet:
/// the same as the retryable status codes (overloaded, server error, rate limit,
/// timeout).
fn retryable_error(error_type: &str) -> bool {
    matches!(
        error_type,
        "overloaded_error"
            | "api_error"
            | "timeout_error"
            | "rate_limit_error"
            | "server_error"
            | "rate_limit_exceeded"
            | "internal_error"
            | "service_unavailable"
    )
}

/// What stops reading the body before the final event.
enum BodyError {
    Transport(reqwest::Error),
    Idle,
    TooLarge,
}

/// POSTs once and reads the answer: as an event stream when `idle` is set (the
/// stream's idle timeout) and the server answers with one, else whole. A server that
/// ignores `stream` and sends JSON is read as JSON.
pub(super) async fn post(
    post: &Post<'_>,
    body: Vec<u8>,
    protocol: Protocol,
    idle: Option<Duration>,
) -> Result<Reply, Failure> {
    let Some(idle) = idle else {
        return post_once(post, body).await;
    };
    let opened = open(post, body).await?;
    let sse = opened
        .resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    if !sse {
        return read_whole(post, opened).await;
    }
    read_events(post, opened, protocol, idle).await
}

/// Reads events until the final one, within the body limit and the idle timeout.
async fn read_events(
    post: &Post<'_>,
    opened: Opened,
    protocol: Protocol,
    idle: Duration,
) -> Result<Reply, Failure> {
    let Opened {
        resp,
        request_id,
        rate,
        started,
    } = opened;
    let limit = post.max_body;
    // Set once the body has ended: an event completed only by its end may have been
    // cut anywhere inside (its data line, a character), so it cannot fail as malformed.
    let body_ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let chunks = chunks(resp, limit, idle, body_ended.clone());
    let mut events = Box::pin(chunks.eventsource());
    let mut assembler = wire(protocol).assembler();
    let mut ttft_ms = None;
    let lost = |error: HttpError, retryable: bool| lost(&rate, error, retryable);
    let ended = || body_ended.load(std::sync::atomic::Ordering::SeqCst);
    loop {
        let event = match events.next().await {
            None => {
                return Err(lost(
                    HttpError::StreamCut("the body ended".to_string()),
                    true,
                ))
            }
            Some(Err(e)) => {
                return Err(read_failure(e, ended(), (post.timeout, limit, idle), &rate))
            }
            Some(Ok(event)) => event,
        };
        match assembler.feed(&event.event, &event.data) {
            Ok(Step::More) => {}
            Ok(Step::Content) => {
                ttft_ms.get_or_insert_with(|| started.elapsed().as_millis() as u64);
            }
            Ok(Step::Done(body)) => {
                return Ok(Reply {
                    // Encoding a JSON value cannot fail.
                    body: serde_json::to_vec(&body).unwrap_or_default(),
                    request_id,
                    ms: started.elapsed().as_millis() as u64,
                    rate,
                    ttft_ms,
                });
            }
            Err(Broken::Error {
                error_type,
                message,
            }) => {
                return Err(lost(
                    HttpError::InStream {
                        error_type: error_type.clone(),
                        message,
                        request_id: request_id.clone(),
                    },
                    retryable_error(&error_type),
                ))
            }
            Err(Broken::Malformed(detail)) if ended() => return Err(cut_inside(&rate, detail)),
            Err(Broken::Malformed(detail)) => {
                return Err(lost(HttpError::BadStream(detail), false))
            }
        }
    }
}

/// The body's chunks, each within `idle` of the last and all within `limit`; sets
/// `ended_flag` when the body has ended.
fn chunks(
    resp: reqwest::Response,
    limit: u64,
    idle: Duration,
    ended_flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> impl futures::Stream<Item = Result<impl AsRef<[u8]>, BodyError>> {
    futures::stream::unfold((resp, 0u64, false), move |(mut resp, read, over)| {
        let ended_flag = ended_flag.clone();
        async move {
            if over {
                return None;
            }
            let mut ended = false;
            let next = match tokio::time::timeout(idle, resp.chunk()).await {
                Err(_) => Err(BodyError::Idle),
                Ok(Err(e)) => Err(BodyError::Transport(e)),
                // The end of the body closes what the parser holds as an event (the
                // final one may come without its blank line), but that event may be
                // cut: `body_ended` says so to whatever reads it.
                Ok(Ok(None)) => {
                    ended = true;
                    ended_flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    Ok(Into::into(&b"\n\n"[..]))
                }
                Ok(Ok(Some(c))) if read + c.len() as u64 > limit => Err(BodyError::TooLarge),
                Ok(Ok(Some(c))) => Ok(c),
            };
            let read = read + next.as_ref().map_or(0, |c| c.len() as u64);
            let over = next.is_err() || ended;
            Some((next, (resp, read, over)))
        }
    })
}

/// A failure after the 200: the request reached the model and may be billed.
fn lost(rate: &RateHeaders, error: HttpError, retryable: bool) -> Failure {
    Failure {
        error,
        retryable,
        server_wait: None,
        maybe_billed: true,
        rate: rate.clone(),
    }
}

/// A failure to read the event the body's end completed: the body was cut inside it, a
/// cut like any other (retried, and charged as maybe billed).
fn cut_inside(rate: &RateHeaders, detail: String) -> Failure {
    lost(
        rate,
        HttpError::StreamCut(format!("the body ended inside an event: {detail}")),
        true,
    )
}

/// What a failure to read the next event means: `ended`, the body has ended (so an
/// event it completed may have been cut anywhere inside); the request's timeout, body
/// limit and idle timeout.
fn read_failure(
    e: EventStreamError<BodyError>,
    ended: bool,
    (timeout, limit, idle): (Duration, u64, Duration),
    rate: &RateHeaders,
) -> Failure {
    let lost = |error: HttpError, retryable: bool| lost(rate, error, retryable);
    let cut_inside = |detail: String| cut_inside(rate, detail);
    match e {
        EventStreamError::Transport(BodyError::Idle) => lost(HttpError::StreamIdle(idle), true),
        EventStreamError::Transport(BodyError::TooLarge) => too_large(limit, rate),
        EventStreamError::Transport(BodyError::Transport(e)) => {
            let f = transport_failure(&e, timeout);
            let error = match f.error {
                HttpError::Transport(detail) => HttpError::StreamCut(detail),
                other => other,
            };
            lost(error, true)
        }
        EventStreamError::Utf8(e) if ended => cut_inside(format!("not UTF-8: {e}")),
        EventStreamError::Utf8(e) => lost(HttpError::BadStream(format!("not UTF-8: {e}")), false),
        EventStreamError::Parser(e) if ended => cut_inside(e.to_string()),
        EventStreamError::Parser(e) => lost(HttpError::BadStream(e.to_string()), false),
    }
}

#[cfg(test)]
mod tests;
