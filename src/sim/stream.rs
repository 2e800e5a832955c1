//! Streamed answers. With `"stream": true` the simulator sends the message it would
//! have rendered as the protocol's server-sent events (Messages here, Responses and
//! Chat Completions in `stream/openai.rs`), so a client's stream assembler can be
//! checked against the non-streaming answer. Deltas are cut at points that vary with
//! the conversation key and step (inside UTF-8 text, inside JSON strings), and the body
//! arrives in several pieces, some ending inside an event, as TCP may deliver it.
//! Mid-stream faults (an error event, a cut, a stall) break a stream after a scripted
//! number of events.
//!
//! The framing is written out rather than taken from `axum::response::sse`, which sends
//! each event as one body frame: the simulator wants to split frames mid-event.

mod cut;

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::protocol::served;
use super::script::{Fault, MidStream, ScriptTurn};
use super::sse::Splitter;
pub use super::sse::{wanted, Sse};
use crate::model::Protocol;

/// The content type of every streamed answer.
pub const CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";

/// The pause between two pieces of a streamed body, so that they reach the client as
/// separate reads.
const GAP: Duration = Duration::from_millis(1);

/// The events of a rendered answer in the protocol's streaming shape, ending with the
/// protocol's final event (`message_stop`, `response.completed` or its kin, `[DONE]`).
pub fn events(
    protocol: Protocol,
    rendered: &Value,
    request: &Value,
    key: &str,
    step: usize,
) -> Vec<Sse> {
    served(protocol).events(rendered, request, &mut Splitter::new(key, step))
}

/// How a streamed body ends.
enum End {
    /// The last piece, then a proper end of the body.
    Clean,
    /// The connection breaks.
    Break,
    /// Nothing for this long (None: forever), then the connection breaks.
    Stall(Option<Duration>),
}

fn wire(events: &[Sse]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(events.len());
    for e in events {
        bytes.extend_from_slice(e.wire().as_bytes());
        ends.push(bytes.len());
    }
    (bytes, ends)
}

fn send(pieces: Vec<Bytes>, first_delay: Option<Duration>, end: End) -> Body {
    use futures::StreamExt;
    let head =
        futures::stream::iter(pieces.into_iter().enumerate()).then(move |(i, p)| async move {
            let wait = if i == 0 { first_delay } else { Some(GAP) };
            if let Some(d) = wait {
                tokio::time::sleep(d).await;
            }
            Ok::<_, std::io::Error>(p)
        });
    let tail = futures::stream::once(async move {
        match end {
            End::Clean => return None,
            // A pause first, so the server writes out the last piece before it drops the
            // connection.
            End::Break => tokio::time::sleep(GAP * 5).await,
            End::Stall(Some(d)) => tokio::time::sleep(d).await,
            End::Stall(None) => futures::future::pending::<()>().await,
        }
        Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "simulated mid-stream disconnect",
        )))
    })
    .filter_map(|item| async move { item });
    Body::from_stream(head.chain(tail))
}

/// The body of a streamed 200: the events of the rendered answer, or a scripted
/// `raw_body` sent as written (so a script can write its own events); `truncate_body`
/// ends the body cleanly halfway through its bytes, and `body_delay` comes before the
/// first event.
pub fn body(
    protocol: Protocol,
    turn: &ScriptTurn,
    rendered: &Value,
    request: &Value,
    key: &str,
    step: usize,
) -> Body {
    let (mut bytes, mut ends) = match &turn.raw_body {
        Some(raw) => {
            let ends = raw
                .match_indices("\n\n")
                .map(|(i, _)| i + 2)
                .chain([raw.len()])
                .collect();
            (raw.clone().into_bytes(), ends)
        }
        None => wire(&events(protocol, rendered, request, key, step)),
    };
    if turn.truncate_body {
        bytes.truncate(bytes.len() / 2);
        ends.retain(|e| *e < bytes.len());
        ends.push(bytes.len());
    }
    let pieces = Splitter::new(key, step).body_pieces(bytes, &ends);
    send(pieces, turn.body_delay.map(|d| d.0), End::Clean)
}

/// The events a mid-stream fault lets through, and how the body then ends: at most all
/// but the final event, then the error event(s) of `error` and `failed`.
pub fn broken_events(
    protocol: Protocol,
    fault: &Fault,
    kind: MidStream,
    all: Vec<Sse>,
) -> (Vec<Sse>, bool) {
    let most = all.len().saturating_sub(1);
    let n = fault
        .after_events
        .map_or(all.len() / 2, |n| usize::try_from(n).unwrap_or(usize::MAX))
        .min(most);
    let mut sent: Vec<Sse> = all.into_iter().take(n).collect();
    if let MidStream::Cut | MidStream::Stall = kind {
        return (sent, false);
    }
    served(protocol).stream_error(fault, kind, &mut sent);
    (sent, true)
}

/// A streamed 200 that a mid-stream fault breaks: the first events of the answer, then
/// an error event (the body ends), a broken connection, a stall before one, or (with
/// `cut_inside`) part of the next event and the body's end.
pub fn broken(
    protocol: Protocol,
    fault: &Fault,
    kind: MidStream,
    rendered: &Value,
    request: &Value,
    key: &str,
    step: usize,
) -> Body {
    let all = events(protocol, rendered, request, key, step);
    let inside = fault.cut_inside.filter(|_| kind == MidStream::Cut);
    let (sent, clean) = broken_events(protocol, fault, kind, all.clone());
    let (bytes, ends) = match inside {
        Some(place) => {
            let bytes = cut::cut_inside(&all, sent.len(), place);
            let mut ends = wire(&sent).1;
            ends.push(bytes.len());
            (bytes, ends)
        }
        None => wire(&sent),
    };
    let pieces = Splitter::new(key, step).body_pieces(bytes, &ends);
    let end = match kind {
        _ if clean || inside.is_some() => End::Clean,
        MidStream::Stall => End::Stall(fault.stall_for.map(|d| d.0)),
        _ => End::Break,
    };
    send(pieces, None, end)
}

/// The HTTP status of an error type, for a mid-stream error played to a client that
/// does not stream (without a type: Messages 529 overloaded, OpenAI 500).
fn status_of(protocol: Protocol, error_type: Option<&str>) -> u16 {
    match error_type {
        None => served(protocol).untyped_error_status(),
        Some(t) => match t {
            "overloaded_error" => 529,
            "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => 429,
            "timeout_error" => 504,
            "invalid_request_error" => 400,
            "authentication_error" => 401,
            "billing_error" => 402,
            "permission_error" => 403,
            "not_found_error" => 404,
            "request_too_large" => 413,
            _ => 500,
        },
    }
}

/// A mid-stream fault played to a request that does not stream, as the nearest failure
/// it can see: `error` and `failed` as the error status of their type, `cut` as a
/// disconnect mid-body, `stall` as headers and then nothing (for `stall_for`, or
/// forever) before the connection breaks.
pub fn unstreamed(
    protocol: Protocol,
    fault: &Fault,
    kind: MidStream,
    request_id: &str,
) -> Response {
    let plain = match kind {
        MidStream::Error | MidStream::Failed => Fault {
            status: Some(status_of(protocol, fault.error_type.as_deref())),
            error_type: fault.error_type.clone(),
            message: fault.message.clone(),
            code: fault.code.clone(),
            ..Fault::default()
        },
        MidStream::Cut => Fault {
            disconnect: true,
            ..Fault::default()
        },
        MidStream::Stall => {
            let body = send(Vec::new(), None, End::Stall(fault.stall_for.map(|d| d.0)));
            let mut resp = Response::new(body);
            *resp.status_mut() = StatusCode::OK;
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            return resp;
        }
    };
    super::fault::play_fault(protocol, &plain, request_id)
}

/// The bytes `"stream":...` and `"stream_options":...` take in a compact request body
/// (with their separating commas): what a streamed request has and a whole one lacks.
pub(super) fn request_field_bytes(request: &Value) -> usize {
    ["stream", "stream_options"]
        .iter()
        .filter_map(|k| request.get(*k).map(|v| (k, v)))
        .map(|(k, v)| k.len() + 2 + 1 + v.to_string().len() + 1)
        .sum()
}

#[cfg(test)]
mod tests;
