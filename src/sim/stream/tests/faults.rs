//! Streamed bodies: the pieces they arrive in, raw and truncated bodies, and what each
//! mid-stream fault lets through and how the body then ends.

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;

use super::*;
use crate::vocab::values::HumanDuration;

fn fault(kind: MidStream, after: Option<u64>) -> Fault {
    Fault {
        mid_stream: Some(kind),
        after_events: after,
        ..Fault::default()
    }
}

#[test]
fn mid_stream_faults_stop_before_the_final_event() {
    let a_req = anthropic_request();
    let r_req = responses_request();
    let c_req = chat_request(true);
    let rendered = [
        (
            Protocol::Anthropic,
            respond::render(&turn(), &a_req, 400, "k", 0, CacheUse::default()),
            &a_req,
        ),
        (
            Protocol::OpenaiResponses,
            responses::render(&turn(), &r_req, 400, "k", 0, CacheUse::default()),
            &r_req,
        ),
        (
            Protocol::OpenaiChat,
            chat::render(&turn(), &c_req, 400, "k", 0, CacheUse::default()),
            &c_req,
        ),
    ];
    for (protocol, rendered, req) in &rendered {
        let all = events(*protocol, rendered, req, "k", 0);
        let n = all.len();
        for kind in [MidStream::Cut, MidStream::Stall] {
            let (sent, clean) = broken_events(*protocol, &fault(kind, Some(3)), kind, all.clone());
            assert_eq!((sent.as_slice(), clean), (&all[..3], false));
            let (sent, _) = broken_events(*protocol, &fault(kind, Some(10_000)), kind, all.clone());
            assert_eq!(sent.as_slice(), &all[..n - 1], "never the final event");
            let (sent, _) = broken_events(*protocol, &fault(kind, None), kind, all.clone());
            assert_eq!(sent.len(), n / 2);
        }
        let (sent, clean) = broken_events(
            *protocol,
            &fault(MidStream::Error, Some(2)),
            MidStream::Error,
            all.clone(),
        );
        assert!(clean);
        assert_eq!(sent[..2], all[..2]);
        let tail = parsed(&sent[2..]);
        match protocol {
            Protocol::Anthropic => {
                assert_eq!(tail.len(), 1);
                assert_eq!(tail[0].0.as_deref(), Some("error"));
                assert_eq!(
                    tail[0].1,
                    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
                );
            }
            Protocol::OpenaiResponses => {
                assert_eq!(tail[0].1["type"], "error");
                assert_eq!(tail[0].1["code"], "server_error");
                assert_eq!(tail[0].1["sequence_number"], 2);
            }
            Protocol::OpenaiChat => {
                assert_eq!(tail.len(), 2);
                assert_eq!(tail[0].1["error"]["type"], "server_error");
                assert_eq!(tail[1].1, "[DONE]");
            }
        }
    }
    let (protocol, rendered, req) = &rendered[1];
    let all = events(*protocol, rendered, req, "k", 0);
    let mut f = fault(MidStream::Failed, Some(5));
    f.code = Some("rate_limit_exceeded".into());
    let (sent, _) = broken_events(*protocol, &f, MidStream::Failed, all);
    let last = parsed(&sent[5..]);
    assert_eq!(last[0].1["type"], "response.failed");
    assert_eq!(last[0].1["sequence_number"], 5);
    assert_eq!(last[0].1["response"]["status"], "failed");
    assert_eq!(
        last[0].1["response"]["error"]["code"],
        "rate_limit_exceeded"
    );
    assert_eq!(last[0].1["response"]["id"], rendered["id"]);
}

async fn collect(body: Body) -> (Vec<Bytes>, Option<String>) {
    let mut stream = body.into_data_stream();
    let mut pieces = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(b) => pieces.push(b),
            Err(e) => return (pieces, Some(e.to_string())),
        }
    }
    (pieces, None)
}

#[tokio::test]
async fn the_body_arrives_in_pieces_that_join_into_whole_events() {
    let req = anthropic_request();
    let t = turn();
    let mut mid_event = false;
    for step in 0..6 {
        let rendered = respond::render(&t, &req, 400, "k", step, CacheUse::default());
        let (pieces, error) =
            collect(body(Protocol::Anthropic, &t, &rendered, &req, "k", step)).await;
        assert_eq!(error, None);
        assert!(pieces.len() >= 3, "several body pieces: {}", pieces.len());
        mid_event |= pieces.iter().any(|p| !p.ends_with(b"\n\n"));
        let joined: Vec<u8> = pieces.concat();
        let expected = wire(&events(Protocol::Anthropic, &rendered, &req, "k", step)).0;
        assert_eq!(joined, expected);
    }
    assert!(mid_event, "some pieces end inside an event");
}

#[tokio::test]
async fn raw_and_truncated_bodies_stream_as_written() {
    let req = anthropic_request();
    let mut t = turn();
    t.raw_body = Some("event: ping\ndata: {\"type\":\"ping\"}\n\ndata: not json\n\n".into());
    let rendered = respond::render(&t, &req, 400, "k", 0, CacheUse::default());
    let (pieces, _) = collect(body(Protocol::Anthropic, &t, &rendered, &req, "k", 0)).await;
    assert_eq!(pieces.concat(), t.raw_body.clone().unwrap().into_bytes());
    t.raw_body = None;
    t.truncate_body = true;
    let (pieces, error) = collect(body(Protocol::Anthropic, &t, &rendered, &req, "k", 0)).await;
    let full = wire(&events(Protocol::Anthropic, &rendered, &req, "k", 0)).0;
    assert_eq!(
        (pieces.concat(), error),
        (full[..full.len() / 2].to_vec(), None)
    );
}

#[tokio::test]
async fn cuts_break_the_connection_and_stalls_hold_it() {
    let req = chat_request(true);
    let rendered = chat::render(&turn(), &req, 400, "k", 0, CacheUse::default());
    let all = events(Protocol::OpenaiChat, &rendered, &req, "k", 0);
    let cut = fault(MidStream::Cut, Some(4));
    let (pieces, error) = collect(broken(
        Protocol::OpenaiChat,
        &cut,
        MidStream::Cut,
        &rendered,
        &req,
        "k",
        0,
    ))
    .await;
    assert_eq!(pieces.concat(), wire(&all[..4]).0);
    assert!(error.is_some(), "the connection breaks");

    let mut stall = fault(MidStream::Stall, Some(2));
    stall.stall_for = Some(HumanDuration(Duration::from_millis(150)));
    let started = std::time::Instant::now();
    let (pieces, error) = collect(broken(
        Protocol::OpenaiChat,
        &stall,
        MidStream::Stall,
        &rendered,
        &req,
        "k",
        0,
    ))
    .await;
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(pieces.concat(), wire(&all[..2]).0);
    assert!(error.is_some());

    stall.stall_for = None;
    let body = broken(
        Protocol::OpenaiChat,
        &stall,
        MidStream::Stall,
        &rendered,
        &req,
        "k",
        0,
    );
    let mut stream = body.into_data_stream();
    let mut got = Vec::new();
    let forever = tokio::time::timeout(Duration::from_millis(200), async {
        while let Some(Ok(b)) = stream.next().await {
            got.extend_from_slice(&b);
        }
    })
    .await;
    assert!(forever.is_err(), "a stall without stall_for never ends");
    assert_eq!(got, wire(&all[..2]).0);

    let error = fault(MidStream::Error, Some(1));
    let (pieces, e) = collect(broken(
        Protocol::OpenaiChat,
        &error,
        MidStream::Error,
        &rendered,
        &req,
        "k",
        0,
    ))
    .await;
    assert_eq!(e, None, "an error event ends the body properly");
    assert!(pieces.concat().ends_with(b"data: [DONE]\n\n"));
}

#[test]
fn unstreamed_mid_stream_faults_play_their_nearest_kind() {
    let r = unstreamed(
        Protocol::Anthropic,
        &fault(MidStream::Error, None),
        MidStream::Error,
        "req_1",
    );
    assert_eq!(r.status(), 529);
    let r = unstreamed(
        Protocol::OpenaiChat,
        &fault(MidStream::Failed, None),
        MidStream::Failed,
        "req_1",
    );
    assert_eq!(r.status(), 500);
    let mut f = fault(MidStream::Error, None);
    f.error_type = Some("rate_limit_error".into());
    assert_eq!(
        unstreamed(Protocol::Anthropic, &f, MidStream::Error, "r").status(),
        429
    );
    for kind in [MidStream::Cut, MidStream::Stall] {
        assert_eq!(
            unstreamed(Protocol::Anthropic, &fault(kind, None), kind, "r").status(),
            200
        );
    }
}
