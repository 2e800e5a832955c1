//! Where a provider is and how to authenticate to it: the URL, the key and the headers
//! every request of a task carries.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::Url;

use super::protocol::{wire, Auth};
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
        let auth = Auth {
            api_key: self.api_key.as_deref(),
            anthropic_version: &self.anthropic_version,
            anthropic_beta: self.anthropic_beta.as_deref(),
        };
        for (name, value) in wire(self.protocol).headers(&auth)? {
            h.insert(name, value);
        }
        Ok(h)
    }
}
