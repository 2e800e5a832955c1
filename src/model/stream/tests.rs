//! The stream reader over real HTTP: a tiny local server answers each test with canned
//! bytes, written in pieces (split inside a UTF-8 character, or stalling) to show what
//! the reader makes of them.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Client, Url};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// What the server writes: the response head, then each piece after its pause. The
/// connection closes after the last piece unless `hold` keeps it open that long.
struct Canned {
    content_type: &'static str,
    pieces: Vec<(Duration, Vec<u8>)>,
    hold: Duration,
}

/// Serves `canned` once; the URL to post to.
async fn serve(canned: Canned) -> Url {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        sock.set_nodelay(true).unwrap();
        // The request: headers, then a body of content-length bytes.
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = sock.read(&mut buf).await.unwrap();
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if seen.len() >= end + 4 + length {
                    break;
                }
            }
            if n == 0 {
                break;
            }
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: {}\r\nrequest-id: req_1\r\nconnection: close\r\n\r\n",
            canned.content_type
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        for (pause, piece) in canned.pieces {
            tokio::time::sleep(pause).await;
            if sock.write_all(&piece).await.is_err() {
                return;
            }
            let _ = sock.flush().await;
        }
        tokio::time::sleep(canned.hold).await;
    });
    Url::parse(&format!("http://{addr}/v1/messages")).unwrap()
}

/// SSE frames of `(event, data)` pairs; `crlf` ends lines with CRLF.
fn frames(events: &[(&str, Value)], crlf: bool) -> Vec<u8> {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    for (name, data) in events {
        if !name.is_empty() {
            out.push_str(&format!("event: {name}{nl}"));
        }
        out.push_str(&format!("data: {data}{nl}{nl}"));
    }
    out.into_bytes()
}

fn anthropic_events(text: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                "content": [], "model": "m", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

async fn send(
    url: &Url,
    protocol: Protocol,
    idle: Duration,
    max_body: u64,
) -> Result<Reply, Failure> {
    let client = Client::new();
    let headers = HeaderMap::new();
    let p = Post {
        client: &client,
        url,
        headers: &headers,
        timeout: Duration::from_secs(20),
        max_body,
    };
    post(&p, b"{}".to_vec(), protocol, Some(idle)).await
}

/// Splits `bytes` at every place in `at`, with a short pause before each piece.
fn pieces(bytes: &[u8], at: &[usize]) -> Vec<(Duration, Vec<u8>)> {
    let mut out = Vec::new();
    let mut from = 0;
    for &to in at.iter().chain(std::iter::once(&bytes.len())) {
        out.push((Duration::from_millis(15), bytes[from..to].to_vec()));
        from = to;
    }
    out
}

#[tokio::test]
async fn a_stream_split_inside_a_character_assembles_whole() {
    let text = "caf\u{e9} \u{1f600}";
    let bytes = frames(&anthropic_events(text), true);
    // Split inside the é (2 bytes) and inside the emoji (4 bytes).
    let e_acute = bytes.windows(2).position(|w| w == [0xc3, 0xa9]).unwrap();
    let emoji = bytes.windows(2).position(|w| w == [0xf0, 0x9f]).unwrap();
    let url = serve(Canned {
        content_type: "text/event-stream; charset=utf-8",
        pieces: pieces(&bytes, &[e_acute + 1, emoji + 2]),
        hold: Duration::ZERO,
    })
    .await;
    let reply = send(&url, Protocol::Anthropic, Duration::from_secs(5), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["content"], json!([{"type": "text", "text": text}]));
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 5, "output_tokens": 7})
    );
    assert_eq!(reply.request_id.as_deref(), Some("req_1"));
    assert!(reply.ttft_ms.is_some_and(|t| t <= reply.ms), "{reply:?}");
}

#[tokio::test]
async fn an_error_event_in_a_200_fails_retryable_by_its_type() {
    for (kind, retryable) in [("overloaded_error", true), ("invalid_request_error", false)] {
        let mut events = anthropic_events("x");
        events.truncate(2);
        events.push((
            "error",
            json!({"type": "error", "error": {"type": kind, "message": "no"}}),
        ));
        let url = serve(Canned {
            content_type: "text/event-stream",
            pieces: vec![(Duration::ZERO, frames(&events, false))],
            hold: Duration::ZERO,
        })
        .await;
        let f = send(&url, Protocol::Anthropic, Duration::from_secs(5), 1 << 20)
            .await
            .unwrap_err();
        assert!(
            matches!(&f.error, HttpError::InStream { error_type, .. } if error_type == kind),
            "{f:?}"
        );
        assert_eq!((f.retryable, f.maybe_billed), (retryable, true), "{kind}");
    }
}

#[tokio::test]
async fn a_cut_stream_is_retryable_and_may_be_billed() {
    let mut events = anthropic_events("partial");
    events.truncate(4);
    let url = serve(Canned {
        content_type: "text/event-stream",
        pieces: vec![(Duration::ZERO, frames(&events, false))],
        hold: Duration::ZERO,
    })
    .await;
    let f = send(&url, Protocol::Anthropic, Duration::from_secs(5), 1 << 20)
        .await
        .unwrap_err();
    assert!(matches!(f.error, HttpError::StreamCut(_)), "{f:?}");
    assert!(f.retryable && f.maybe_billed);
}

/// A body whose end falls inside an event (its data line, a character, right after
/// `data:`) is a cut, not a malformed event: retried, and maybe billed. A final event
/// that only lacks its blank line still ends the answer.
#[tokio::test]
async fn a_body_ending_inside_an_event_is_a_cut() {
    let whole = frames(&anthropic_events("café au lait"), false);
    let delta = whole
        .windows(19)
        .position(|w| w == b"content_block_delta")
        .unwrap();
    let data = delta
        + whole[delta..]
            .windows(5)
            .position(|w| w == b"data:")
            .unwrap()
        + 5;
    let e_acute = whole.windows(2).position(|w| w == [0xc3, 0xa9]).unwrap();
    for (what, at) in [
        ("after data:", data),
        ("mid data line", data + 20),
        ("mid character", e_acute + 1),
    ] {
        let url = serve(Canned {
            content_type: "text/event-stream",
            pieces: pieces(&whole[..at], &[at / 2]),
            hold: Duration::ZERO,
        })
        .await;
        let f = send(&url, Protocol::Anthropic, Duration::from_secs(5), 1 << 20)
            .await
            .unwrap_err();
        assert!(
            matches!(&f.error, HttpError::StreamCut(d) if d.contains("inside an event")),
            "{what}: {f:?}"
        );
        assert!(f.retryable && f.maybe_billed, "{what}");
    }
    let unterminated = &whole[..whole.len() - 1];
    let url = serve(Canned {
        content_type: "text/event-stream",
        pieces: pieces(unterminated, &[40]),
        hold: Duration::ZERO,
    })
    .await;
    let reply = send(&url, Protocol::Anthropic, Duration::from_secs(5), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["content"][0]["text"], "café au lait");
}

#[tokio::test]
async fn a_stalled_stream_fails_at_the_idle_timeout() {
    let mut events = anthropic_events("slow");
    events.truncate(2);
    let url = serve(Canned {
        content_type: "text/event-stream",
        pieces: vec![(Duration::ZERO, frames(&events, false))],
        hold: Duration::from_secs(10),
    })
    .await;
    let started = std::time::Instant::now();
    let f = send(
        &url,
        Protocol::Anthropic,
        Duration::from_millis(300),
        1 << 20,
    )
    .await
    .unwrap_err();
    assert!(matches!(f.error, HttpError::StreamIdle(_)), "{f:?}");
    assert!(f.retryable && f.maybe_billed);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn an_endless_stream_is_abandoned_at_the_body_limit() {
    let ping = frames(&[("ping", json!({"type": "ping"}))], false);
    let url = serve(Canned {
        content_type: "text/event-stream",
        pieces: (0..200).map(|_| (Duration::ZERO, ping.clone())).collect(),
        hold: Duration::ZERO,
    })
    .await;
    let f = send(&url, Protocol::Anthropic, Duration::from_secs(5), 1000)
        .await
        .unwrap_err();
    assert!(matches!(f.error, HttpError::TooLarge { .. }), "{f:?}");
    assert!(f.maybe_billed && !f.retryable);
}

#[tokio::test]
async fn chat_chunks_end_at_done_and_a_json_answer_is_read_whole() {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut bytes = frames(
        &[
            (
                "",
                chunk(json!({"role": "assistant", "content": "he"}), Value::Null),
            ),
            ("", chunk(json!({"content": "llo"}), json!("stop"))),
        ],
        false,
    );
    bytes.extend_from_slice(b": keep-alive comment\n\ndata: [DONE]\n\n");
    let url = serve(Canned {
        content_type: "text/event-stream",
        pieces: pieces(&bytes, &[10, 50]),
        hold: Duration::ZERO,
    })
    .await;
    let reply = send(&url, Protocol::OpenaiChat, Duration::from_secs(5), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "hello");
    assert_eq!(body["object"], "chat.completion");

    // A body that ends right after `data: [DONE]`, without the blank line, still ends
    // at [DONE] rather than as a cut.
    let unterminated = &bytes[..bytes.len() - 1];
    let url = serve(Canned {
        content_type: "text/event-stream",
        pieces: pieces(unterminated, &[10, 50]),
        hold: Duration::ZERO,
    })
    .await;
    let reply = send(&url, Protocol::OpenaiChat, Duration::from_secs(5), 1 << 20)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "hello");

    let whole = json!({"id": "c1", "choices": []}).to_string().into_bytes();
    let url = serve(Canned {
        content_type: "application/json",
        pieces: vec![(Duration::ZERO, whole.clone())],
        hold: Duration::ZERO,
    })
    .await;
    let reply = send(&url, Protocol::OpenaiChat, Duration::from_secs(5), 1 << 20)
        .await
        .unwrap();
    assert_eq!(reply.body, whole);
    assert_eq!(reply.ttft_ms, None);
}
