//! The runner's batch transport (`model::batch`) over real HTTP against the simulator's
//! batch APIs: requests of several loops made within a window go out as one batch,
//! each answer comes back to its own loop as the synchronous endpoint's body, the pool
//! splits at max_requests, per-item errors and expiry are told apart, and a batch no
//! loop waits for any more is cancelled.

use std::sync::Arc;
use std::time::Duration;

use agentbatch::model::batch::{BatchApi, Batcher, Outcome, Settings};
use agentbatch::model::{Endpoint, Protocol};
use agentbatch::sim::script::Script;
use agentbatch::sim::{BatchSettings, Sim};
use serde_json::{json, Value};

fn script(yaml: &str) -> Arc<Script> {
    Arc::new(serde_yaml::from_str(yaml).expect("script parses"))
}

async fn sim() -> Sim {
    let sim = Sim::start_local().await.expect("sim starts");
    for (key, text) in [
        ("t1", "one"),
        ("t2", "two"),
        ("t3", "three"),
        ("t4", "four"),
        ("t5", "five"),
    ] {
        sim.register(
            key,
            script(&format!("turns:\n  - content: [{{text: {text}}}]\n")),
        );
    }
    sim.register(
        "flaky",
        script("turns:\n  - content: [{text: later}]\n    faults: [{status: 529}]\n"),
    );
    sim.register(
        "doomed",
        script("turns:\n  - content: [{text: too late}]\n    faults: [{batch_expire: true}]\n"),
    );
    sim.set_batch_settings(BatchSettings {
        delay: Duration::from_millis(50),
        ..BatchSettings::default()
    });
    sim
}

fn api(sim: &Sim, protocol: Protocol) -> BatchApi {
    let base = match protocol {
        Protocol::Anthropic => sim.base_url(),
        _ => format!("{}/v1", sim.base_url()),
    };
    let endpoint = Endpoint {
        protocol,
        url: protocol.url(&base).unwrap(),
        api_key: Some("sim-key".into()),
        anthropic_version: "2023-06-01".into(),
        anthropic_beta: None,
        max_tokens_field: "max_tokens".into(),
        timeout: Duration::from_secs(10),
        max_response_bytes: 1 << 20,
        stream_idle: None,
    };
    BatchApi::new(agentbatch::model::client(true).unwrap(), &endpoint, &base).unwrap()
}

fn settings() -> Settings {
    Settings {
        window: Duration::from_millis(200),
        max_requests: 1000,
        max_wait: Duration::from_secs(60),
        poll_first: Duration::from_millis(50),
        poll_max: Duration::from_millis(200),
    }
}

fn body(protocol: Protocol) -> Value {
    match protocol {
        Protocol::Anthropic => json!({
            "model": "claude-sonnet-4-5", "max_tokens": 256,
            "messages": [{"role": "user", "content": "go"}]
        }),
        Protocol::OpenaiResponses => json!({
            "model": "gpt-5.4-mini", "max_output_tokens": 256, "store": false,
            "input": [{"role": "user", "content": "go"}]
        }),
        Protocol::OpenaiChat => json!({
            "model": "gpt-5.4-mini", "max_tokens": 256,
            "messages": [{"role": "user", "content": "go"}]
        }),
    }
}

/// The text of a synchronous-shaped answer body.
fn text_of(protocol: Protocol, body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).expect("the answer is JSON");
    let t = match protocol {
        Protocol::Anthropic => v.pointer("/content/0/text"),
        Protocol::OpenaiResponses => v.pointer("/output/0/content/0/text"),
        Protocol::OpenaiChat => v.pointer("/choices/0/message/content"),
    };
    t.and_then(Value::as_str).unwrap_or_default().to_string()
}

async fn outcome(b: &Batcher, custom_id: String, protocol: Protocol) -> (String, Outcome) {
    let ticket = b.submit(custom_id, body(protocol), 100);
    let joined = ticket.joined.await.ok();
    let (id, o) = ticket.outcome.await.expect("an outcome");
    if let Some(joined) = joined {
        assert_eq!(joined, id);
    }
    (id, o)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_windows_requests_go_as_one_batch_and_each_answer_finds_its_loop() {
    for protocol in [
        Protocol::Anthropic,
        Protocol::OpenaiResponses,
        Protocol::OpenaiChat,
    ] {
        let sim = sim().await;
        let b = Batcher::start(api(&sim, protocol), settings());
        let answers = futures::future::join_all(
            ["t1", "t2", "t3", "flaky", "doomed"]
                .map(|k| outcome(&b, format!("{k}--1-1"), protocol)),
        )
        .await;
        let batches = sim.batches();
        assert_eq!(
            batches.len(),
            1,
            "{protocol}: one batch for one window: {batches:?}"
        );
        assert_eq!(batches[0].items.len(), 5);
        for ((id, o), want) in answers.iter().zip(["one", "two", "three"]) {
            assert_eq!(id, &batches[0].id);
            match o {
                Outcome::Succeeded { body, .. } => assert_eq!(text_of(protocol, body), want),
                other => panic!("{protocol}: {want}: {other:?}"),
            }
        }
        match &answers[3].1 {
            Outcome::Errored { status, .. } => assert_eq!(*status, 529, "{protocol}"),
            other => panic!("{protocol}: flaky: {other:?}"),
        }
        assert_eq!(answers[4].1, Outcome::Expired, "{protocol}");
        let calls = &b.calls;
        assert_eq!(calls.batches.load(std::sync::atomic::Ordering::Relaxed), 1);
        let polls = calls.polls.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1..=10).contains(&polls), "{protocol}: {polls} polls");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_splits_at_max_requests_and_answers_across_batches() {
    let sim = sim().await;
    let b = Batcher::start(
        api(&sim, Protocol::Anthropic),
        Settings {
            max_requests: 2,
            ..settings()
        },
    );
    let keys = ["t1", "t2", "t3", "t4", "t5"];
    let answers = futures::future::join_all(
        keys.map(|k| outcome(&b, format!("{k}--1-1"), Protocol::Anthropic)),
    )
    .await;
    let sizes: Vec<usize> = sim.batches().iter().map(|r| r.items.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 5);
    assert!(sizes.iter().all(|n| *n <= 2), "{sizes:?}");
    for ((_, o), want) in answers.iter().zip(["one", "two", "three", "four", "five"]) {
        assert!(
            matches!(o, Outcome::Succeeded { body, .. } if text_of(Protocol::Anthropic, body) == want),
            "{want}: {o:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_no_loop_waits_for_is_cancelled_and_max_wait_cancels_too() {
    for protocol in [Protocol::Anthropic, Protocol::OpenaiResponses] {
        let sim = sim().await;
        sim.set_batch_settings(BatchSettings {
            delay: Duration::from_secs(30),
            ..BatchSettings::default()
        });
        let b = Batcher::start(api(&sim, protocol), settings());
        // The loop gives up (its deadline) once its request has joined a batch.
        let ticket = b.submit("t1--1-1".into(), body(protocol), 100);
        let id = ticket.joined.await.unwrap();
        drop(ticket.outcome);
        let mut cancelled = false;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let r = sim.batches().into_iter().find(|r| r.id == id).unwrap();
            if !r.calls.cancels_ms.is_empty() {
                cancelled = true;
                break;
            }
        }
        assert!(
            cancelled,
            "{protocol}: the abandoned batch was not cancelled"
        );
        // A batch past max_wait is cancelled and its request comes back not billed.
        let b = Batcher::start(
            api(&sim, protocol),
            Settings {
                max_wait: Duration::from_millis(300),
                ..settings()
            },
        );
        let (_, o) = outcome(&b, "t2--1-1".into(), protocol).await;
        assert_eq!(o, Outcome::Canceled, "{protocol}");
    }
}

/// A provider that answers every batch create with `status` after `delay`, counting
/// the creates.
async fn stub_provider(
    status: u16,
    delay: Duration,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::routing::post;
    let creates = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = creates.clone();
    let app = axum::Router::new().route(
        "/v1/messages/batches",
        post(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                (
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    r#"{"type":"error","error":{"type":"invalid_request_error","message":"no"}}"#,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, creates)
}

fn stub_api(url: &str, timeout: Duration) -> BatchApi {
    let endpoint = Endpoint {
        protocol: Protocol::Anthropic,
        url: Protocol::Anthropic.url(url).unwrap(),
        api_key: Some("k".into()),
        anthropic_version: "2023-06-01".into(),
        anthropic_beta: None,
        max_tokens_field: "max_tokens".into(),
        timeout,
        max_response_bytes: 1 << 20,
        stream_idle: None,
    };
    BatchApi::new(agentbatch::model::client(true).unwrap(), &endpoint, url).unwrap()
}

/// A create that timed out may have made a batch: it is not sent again (a second
/// batch would be billed too), and its requests count as maybe billed. A refused one
/// made nothing: not billed, and not worth another batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_may_have_reached_the_provider_is_never_repeated() {
    let (url, creates) = stub_provider(200, Duration::from_secs(3)).await;
    let b = Batcher::start(stub_api(&url, Duration::from_millis(300)), settings());
    let (_, o) = outcome(&b, "t1--1-1".into(), Protocol::Anthropic).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(
        matches!(
            o,
            Outcome::Failed {
                maybe_sent: true,
                ..
            }
        ),
        "{o:?}"
    );
    let (url, creates) = stub_provider(400, Duration::ZERO).await;
    let b = Batcher::start(stub_api(&url, Duration::from_secs(5)), settings());
    let (_, o) = outcome(&b, "t1--1-1".into(), Protocol::Anthropic).await;
    assert_eq!(creates.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(
        matches!(
            o,
            Outcome::Failed {
                maybe_sent: false,
                retryable: false,
                ..
            }
        ),
        "{o:?}"
    );
}
