//! Where a provider is and how to authenticate to it: the URL, the key and the headers
//! every request of a task carries.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Url;

use super::Protocol;

/// Where and how to reach a provider's endpoint.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub protocol: Protocol,
    /// The full URL of the endpoint (messages, responses or chat/completions).
    pub url: Url,
    /// Sent as `x-api-key` (Anthropic) or a bearer token (OpenAI); marked sensitive so it
    /// never shows in debug output. None for servers that take no key.
    pub api_key: Option<String>,
    /// The `anthropic-version` header (Anthropic only).
    pub anthropic_version: String,
    /// The `anthropic-beta` header, when a feature in beta is used (Anthropic only).
    pub anthropic_beta: Option<String>,
    /// Chat Completions: the field that carries the output limit (`max_tokens` for most
    /// compatible servers, `max_completion_tokens` for OpenAI's reasoning models).
    pub max_tokens_field: String,
    /// Per attempt, body included.
    pub timeout: Duration,
    /// The largest response body read (`max_response_bytes`).
    pub max_response_bytes: u64,
    /// Answers are streamed (the body asks for it): how long the stream may go without
    /// a byte before it counts as cut. None: answers come whole.
    pub stream_idle: Option<Duration>,
}

impl Endpoint {
    pub(super) fn headers(&self) -> Result<HeaderMap, String> {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.stream_idle.is_some() {
            h.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        }
        let secret = |v: String| {
            HeaderValue::from_str(&v)
                .map(|mut v| {
                    v.set_sensitive(true);
                    v
                })
                .map_err(|_| "the API key contains characters not allowed in a header".to_string())
        };
        match self.protocol {
            Protocol::Anthropic => {
                let version = HeaderValue::from_str(&self.anthropic_version).map_err(|_| {
                    format!("invalid anthropic_version \"{}\"", self.anthropic_version)
                })?;
                h.insert(HeaderName::from_static("anthropic-version"), version);
                if let Some(beta) = &self.anthropic_beta {
                    let beta = HeaderValue::from_str(beta)
                        .map_err(|_| format!("invalid anthropic-beta \"{beta}\""))?;
                    h.insert(HeaderName::from_static("anthropic-beta"), beta);
                }
                if let Some(key) = &self.api_key {
                    h.insert(HeaderName::from_static("x-api-key"), secret(key.clone())?);
                }
            }
            Protocol::OpenaiResponses | Protocol::OpenaiChat => {
                if let Some(key) = &self.api_key {
                    h.insert(AUTHORIZATION, secret(format!("Bearer {key}"))?);
                }
            }
        }
        Ok(h)
    }
}
