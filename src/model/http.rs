//! The HTTP exchange shared by every provider adapter: one POST with a JSON body, and
//! what its failure means (retryable? the server's wait? possibly billed?). Retries are
//! the agent loop's decision, since each attempt must be paid for again.
//! Protocol-neutral: the adapter builds headers and reads the body.

use std::time::{Duration, Instant};

use reqwest::header::HeaderMap;
use reqwest::{Client, Url};
use serde_json::Value;

use super::rate_headers::RateHeaders;
use crate::model::backoff::{parse_retry_after, status_is_retryable};

/// Builds the HTTP client a run shares (one connection pool for all its tasks). It
/// follows no redirect: reqwest strips `Authorization` on a redirect to another origin
/// but not `x-api-key`, and no provider API redirects its endpoints, so a redirect is
/// reported (with its Location) instead of carrying a key elsewhere. Without `tls` (no
/// endpoint of the run is `https`) the system's root certificates are not read: reading
/// and parsing them is most of a short run's start (hundreds of files).
pub fn client(tls: bool) -> reqwest::Result<Client> {
    let builder = Client::builder()
        .user_agent(concat!("agentbatch/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none());
    match tls {
        true => builder.build(),
        false => builder
            .tls_certs_only(Vec::<reqwest::Certificate>::new())
            .build(),
    }
}

/// Whether `url` may need TLS: anything but a plain `http://` URL.
pub fn needs_tls(url: &str) -> bool {
    Url::parse(url).map_or(true, |u| u.scheme() != "http")
}

/// The most of an error (non-2xx) body read: enough for any provider's error message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A successful (2xx) reply.
#[derive(Debug)]
pub struct Reply {
    pub body: Vec<u8>,
    pub request_id: Option<String>,
    pub ms: u64,
    pub rate: RateHeaders,
    /// Streamed answers: milliseconds from the start of the attempt to the first
    /// content delta (None when not streamed, or when no content came).
    pub ttft_ms: Option<u64>,
}

/// Why a request failed, after any retries.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("HTTP {status} {error_type}: {message}{}", rid(request_id))]
    Status {
        status: u16,
        error_type: String,
        message: String,
        request_id: Option<String>,
    },
    #[error("connection error: {0}")]
    Transport(String),
    #[error("no answer within the provider timeout of {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("HTTP {status}: the provider redirects to {location}; redirects are not followed (the API key would go with them)")]
    Redirect { status: u16, location: String },
    #[error("the response body passed {limit} bytes (max_response_bytes) and was abandoned")]
    TooLarge { limit: u64 },
    /// An error event inside a 200 event stream: the partial answer is lost.
    #[error(
        "error event in the response stream: {error_type}: {message}{}",
        rid(request_id)
    )]
    InStream {
        error_type: String,
        message: String,
        request_id: Option<String>,
    },
    /// The event stream ended, or broke, before its final event.
    #[error("the response stream was cut off before its final event ({0})")]
    StreamCut(String),
    /// No byte of the event stream for `stream_idle_timeout`.
    #[error("the response stream stalled: nothing for {} (stream_idle_timeout)", humantime::format_duration(*.0))]
    StreamIdle(Duration),
    /// The events do not make an answer of the protocol.
    #[error("malformed response stream: {0}")]
    BadStream(String),
}

fn rid(request_id: &Option<String>) -> String {
    request_id
        .as_deref()
        .map(|r| format!(" (request-id {r})"))
        .unwrap_or_default()
}

/// A failed attempt, with what the caller needs to decide about a retry and about money.
#[derive(Debug)]
pub struct Failure {
    pub error: HttpError,
    pub retryable: bool,
    /// The wait the server asked for (retry-after-ms / retry-after).
    pub server_wait: Option<Duration>,
    /// The request may have reached the model and been billed although no usable answer
    /// came back (a cut-off body, a timeout): its reservation must be counted as spent.
    pub maybe_billed: bool,
    pub rate: RateHeaders,
}

impl Failure {
    /// A 429: the provider's rate limit, not this request, is the problem.
    pub fn is_rate_limit(&self) -> bool {
        matches!(self.error, HttpError::Status { status: 429, .. })
    }
}

/// One POST: where, with what, and how much time and answer it may take.
pub struct Post<'a> {
    pub client: &'a Client,
    pub url: &'a Url,
    pub headers: &'a HeaderMap,
    /// Per attempt, body included.
    pub timeout: Duration,
    /// The largest answer body read; a longer one is abandoned (an endless body would
    /// otherwise grow memory until the whole run dies).
    pub max_body: u64,
}

/// POSTs `body` once.
pub async fn post_once(post: &Post<'_>, body: Vec<u8>) -> Result<Reply, Failure> {
    let opened = open(post, body).await?;
    read_whole(post, opened).await
}

/// A 2xx answer whose status and headers are read, its body not yet: a whole JSON body
/// or an event stream is read from here.
pub(super) struct Opened {
    pub resp: reqwest::Response,
    pub request_id: Option<String>,
    pub rate: RateHeaders,
    /// When the attempt began: `ms` and the time to first token count from here.
    pub started: Instant,
}

/// A failure of the connection or of reading the body. Only a refused connection
/// proves the request never reached the server.
pub(super) fn transport_failure(e: &reqwest::Error, timeout: Duration) -> Failure {
    let error = if e.is_timeout() {
        HttpError::Timeout(timeout)
    } else {
        HttpError::Transport(error_chain(e))
    };
    Failure {
        error,
        retryable: true,
        server_wait: None,
        maybe_billed: !e.is_connect(),
        rate: RateHeaders::default(),
    }
}

/// An answer larger than `limit` bytes: it may still have been generated, and billed.
pub(super) fn too_large(limit: u64, rate: &RateHeaders) -> Failure {
    Failure {
        error: HttpError::TooLarge { limit },
        retryable: false,
        server_wait: None,
        maybe_billed: true,
        rate: rate.clone(),
    }
}

/// Sends the request and reads the status and headers; a redirect or an error status
/// (its body read and quoted) is a failure.
pub(super) async fn open(post: &Post<'_>, body: Vec<u8>) -> Result<Opened, Failure> {
    let started = Instant::now();
    let timeout = post.timeout;
    let mut resp = post
        .client
        .post(post.url.clone())
        .headers(post.headers.clone())
        .timeout(timeout)
        .body(body)
        .send()
        .await
        .map_err(|e| transport_failure(&e, timeout))?;
    let status = resp.status().as_u16();
    let h = resp.headers();
    let header = |name: &str| {
        h.get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let request_id = header("request-id").or_else(|| header("x-request-id"));
    let should_retry = header("x-should-retry").and_then(|v| match v.as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    });
    let server_wait = parse_retry_after(
        header("retry-after-ms").as_deref(),
        header("retry-after").as_deref(),
    );
    let rate = RateHeaders::read(h);
    if (300..400).contains(&status) {
        let location = header("location").unwrap_or_else(|| "(no Location header)".into());
        return Err(Failure {
            error: HttpError::Redirect {
                status,
                location: crate::text::prefix(&location, 200),
            },
            retryable: false,
            server_wait: None,
            maybe_billed: false,
            rate,
        });
    }
    if (200..300).contains(&status) {
        if resp.content_length().is_some_and(|n| n > post.max_body) {
            return Err(too_large(post.max_body, &rate));
        }
        return Ok(Opened {
            resp,
            request_id,
            rate,
            started,
        });
    }
    // An error body is only quoted: its start is enough.
    let limit = MAX_ERROR_BODY;
    let mut bytes: Vec<u8> = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| transport_failure(&e, timeout))?
    {
        let room = limit.saturating_sub(bytes.len());
        bytes.extend_from_slice(&chunk[..room.min(chunk.len())]);
        if bytes.len() >= limit {
            break;
        }
    }
    let (error_type, message) = error_body(&bytes);
    // OpenAI's quota 429 (no credit, a spend limit) never recovers by waiting.
    let out_of_quota = status == 429 && error_type == "insufficient_quota";
    Err(Failure {
        error: HttpError::Status {
            status,
            error_type,
            message,
            request_id,
        },
        retryable: !out_of_quota && status_is_retryable(status, should_retry),
        server_wait,
        maybe_billed: false,
        rate,
    })
}

/// Reads a whole 2xx body, at most `max_body` bytes.
pub(super) async fn read_whole(post: &Post<'_>, opened: Opened) -> Result<Reply, Failure> {
    let Opened {
        mut resp,
        request_id,
        rate,
        started,
    } = opened;
    let mut bytes: Vec<u8> = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| Failure {
        rate: rate.clone(),
        ..transport_failure(&e, post.timeout)
    })? {
        if (bytes.len() + chunk.len()) as u64 > post.max_body {
            return Err(too_large(post.max_body, &rate));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Reply {
        body: bytes,
        request_id,
        ms: started.elapsed().as_millis() as u64,
        rate,
        ttft_ms: None,
    })
}

/// Reads `{"error": {"type", "message"}}` (Anthropic and OpenAI shapes), or quotes the
/// start of whatever else came back. OpenAI's quota errors are named by `code` or
/// `type`; either makes the type `insufficient_quota`, whatever else the body holds.
pub(super) fn error_body(bytes: &[u8]) -> (String, String) {
    let quoted = || {
        let text = String::from_utf8_lossy(bytes);
        let short: String = text.chars().take(300).collect();
        if short.is_empty() {
            "(empty body)".to_string()
        } else {
            short
        }
    };
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        let e = &v["error"];
        let quota = [&e["type"], &e["code"]]
            .iter()
            .any(|f| f.as_str() == Some("insufficient_quota"));
        let t = if quota {
            "insufficient_quota"
        } else if e["code"].as_str() == Some("context_length_exceeded") {
            // OpenAI's type is invalid_request_error; the code says what is wrong.
            "context_length_exceeded"
        } else {
            e["type"]
                .as_str()
                .or_else(|| e["code"].as_str())
                .unwrap_or("unknown_error")
        };
        match e["message"].as_str() {
            Some(m) => return (t.to_string(), crate::text::prefix(m, 1_000)),
            None if quota => return (t.to_string(), quoted()),
            None => {}
        }
    }
    ("unknown_error".into(), quoted())
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a plain `http://` endpoint goes without the system's root certificates;
    /// anything else, an unreadable URL included, keeps them.
    #[test]
    fn only_plain_http_endpoints_skip_tls() {
        for plain in [
            "http://127.0.0.1:8787",
            "HTTP://localhost/v1",
            "http://[::1]:80/",
        ] {
            assert!(!needs_tls(plain), "{plain}");
        }
        for tls in [
            "https://api.anthropic.com",
            "HTTPS://x",
            "not a url",
            "",
            "ws://x",
        ] {
            assert!(needs_tls(tls), "{tls}");
        }
        assert!(client(false).is_ok() && client(true).is_ok());
    }

    #[test]
    fn reads_provider_error_bodies() {
        let b = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            error_body(b),
            ("overloaded_error".into(), "Overloaded".into())
        );
        assert_eq!(
            error_body(b"<html>bad gateway</html>").1,
            "<html>bad gateway</html>"
        );
        assert_eq!(error_body(b"").1, "(empty body)");
        let quota = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        assert_eq!(error_body(quota).0, "insufficient_quota");
        let bare = br#"{"error":{"code":"insufficient_quota"}}"#;
        assert_eq!(error_body(bare).0, "insufficient_quota");
        let limited = br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
        assert_eq!(error_body(limited).0, "requests");
    }
}
