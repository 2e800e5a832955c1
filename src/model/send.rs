//! One request of a conversation: the request event, the answer (replayed, through the
//! batch pool, or over HTTP, whole or streamed), the response event, and the answer
//! read by the protocol's wire and taken into the history.

use serde_json::Value;

use super::conversation::{body_hash, Conversation, FIRST_REQUEST_OVERHEAD};
use super::http::Post;
use super::protocol::AnswerEdits;
use super::{
    clamped, len_of, Bounds, ModelError, Parsed, Reply, Reported, SendError, Turn, Usage, WireError,
};
use crate::vocab::log::TaskLog;
use crate::vocab::transcript::{RequestParams, TranscriptEvent};

/// What a request was, for reading its answer.
struct Sent {
    bytes: u64,
    max_tokens: u32,
    turn: u32,
    replayed: bool,
}

/// An answer that came back but cannot be used: the request reached the model.
fn failed(reply: &Reply, error: ModelError, retryable: bool) -> SendError {
    SendError {
        error,
        retryable,
        server_wait: None,
        // An answer came back, so the request reached the model.
        maybe_billed: true,
        rate_limited: false,
        rate: reply.rate.clone(),
        usage: None,
    }
}

fn malformed(reply: &Reply, detail: String) -> SendError {
    failed(
        reply,
        ModelError::Malformed {
            detail,
            request_id: reply.request_id.clone(),
        },
        false,
    )
}

/// The answer's body as JSON, logged as the response event either way; why it is not.
fn read_body(reply: &Reply, log: &TaskLog, sent: &Sent) -> Result<Value, String> {
    let raw: Value = match serde_json::from_slice(&reply.body) {
        Ok(v) => v,
        Err(e) => {
            let text = String::from_utf8_lossy(&reply.body);
            log.emit(TranscriptEvent::Response {
                turn: sent.turn,
                request_id: reply.request_id.clone(),
                ms: reply.ms,
                body: None,
                raw_body: Some(text.chars().take(4000).collect()),
                ttft_ms: reply.ttft_ms,
                replayed: sent.replayed,
            });
            return Err(format!(
                "the body is not JSON ({e}), {} bytes",
                reply.body.len()
            ));
        }
    };
    log.emit(TranscriptEvent::Response {
        turn: sent.turn,
        request_id: reply.request_id.clone(),
        ms: reply.ms,
        body: Some(raw.clone()),
        raw_body: None,
        ttft_ms: reply.ttft_ms,
        replayed: sent.replayed,
    });
    Ok(raw)
}

/// What a wire's failure to read an answer means to the loop.
fn wire_failure(e: WireError, reply: &Reply, within: impl Fn(Reported) -> Usage) -> SendError {
    match e {
        WireError::Malformed(d) => malformed(reply, d),
        WireError::Failed {
            code,
            message,
            retryable,
            usage,
        } => SendError {
            // A failed response for the rate limit pauses the provider like a 429.
            rate_limited: code == "rate_limit_exceeded",
            usage: usage.map(within),
            ..failed(
                reply,
                ModelError::Failed {
                    code,
                    message,
                    request_id: reply.request_id.clone(),
                },
                retryable,
            )
        },
    }
}

impl Conversation {
    /// Sends the conversation once and, on success, appends the answer to it. The
    /// request and the response go to the transcript.
    pub async fn send(
        &mut self,
        max_tokens: u32,
        log: &TaskLog,
        turn: u32,
        attempt: u32,
    ) -> Result<Turn, SendError> {
        // What the budgets reserved for: no usage figure of the answer may exceed it.
        let bounds = Bounds {
            prompt_tokens: self.estimate_prompt_tokens(),
            output_tokens: u64::from(max_tokens),
            one_hour_writes: self.params.cache.one_hour_writes(self.endpoint.protocol),
        };
        let within = |r: Reported| clamped(r, &bounds, log, turn, attempt);
        let body = self.encoded_body(max_tokens);
        self.cached_tail = self.history.len().checked_sub(1);
        let body_hash = self.log_request(&body, max_tokens, log, (turn, attempt));
        let answer = self
            .replay
            .iter()
            .position(|(h, _)| *h == body_hash)
            .map(|i| self.replay.remove(i).1);
        let sent = Sent {
            bytes: body.len() as u64,
            max_tokens,
            turn,
            replayed: answer.is_some(),
        };
        let reply = self.reply(body, answer, log, (turn, attempt)).await?;
        let raw = read_body(&reply, log, &sent).map_err(|d| malformed(&reply, d))?;
        let mut parsed = self
            .wire
            .parse(&raw, turn)
            .map_err(|e| wire_failure(e, &reply, within))?;
        let usage = self.answer_usage(parsed.usage.take(), &reply, &sent, within);
        if let Some(id) = self.repeated_call_id(&parsed.calls) {
            // Answered and billed, but the next request would be refused: end here.
            return Err(SendError {
                usage: Some(usage.0),
                ..malformed(&reply, format!(
                    "the model gave two tool calls the id \"{}\"; the API refuses a conversation with a tool-call id twice, so the task cannot go on",
                    crate::text::prefix(&id, 100)
                ))
            });
        }
        Ok(self.take_answer(&raw, parsed, usage, reply, &sent))
    }

    /// The answer's usage within the request's bounds, or when it has none, an upper
    /// bound worked out from sizes (and true).
    fn answer_usage(
        &self,
        usage: Option<Reported>,
        reply: &Reply,
        sent: &Sent,
        within: impl Fn(Reported) -> Usage,
    ) -> (Usage, bool) {
        let estimated = usage.is_none();
        // Without usage, count a token per byte of what went over the wire (the whole
        // answer, reasoning fields a server adds included) plus the framing a chat
        // template adds: never fewer than the real figures.
        // ... and never above the prompt bound the budgets reserved for this request
        // (the history has not changed since it was planned).
        let usage = usage.map(within).unwrap_or_else(|| Usage {
            input_tokens: sent
                .bytes
                .saturating_add(FIRST_REQUEST_OVERHEAD)
                .min(self.estimate_prompt_tokens()),
            output_tokens: (reply.body.len() as u64).min(u64::from(sent.max_tokens)),
            ..Usage::default()
        });
        (usage, estimated)
    }

    /// Logs the request event (the first carries the request's fixed fields); the
    /// body's digest.
    fn log_request(
        &mut self,
        body: &[u8],
        max_tokens: u32,
        log: &TaskLog,
        (turn, attempt): (u32, u32),
    ) -> String {
        let params = (self.logged == 0).then(|| RequestParams {
            url: self.endpoint.url.as_str().to_string(),
            protocol: Some(self.endpoint.protocol),
            model: self.params.model.clone(),
            system: self.params.system.clone(),
            tools: Value::Array(self.tools.clone()),
            extra: Value::Object(self.params.extra.clone()),
            anthropic_version: (self.endpoint.protocol.facts().takes_anthropic_version)
                .then(|| self.endpoint.anthropic_version.clone()),
        });
        let body_hash = body_hash(body);
        log.emit(TranscriptEvent::Request {
            turn,
            attempt,
            max_tokens,
            bytes: body.len(),
            message_count: self.history.len(),
            new_messages: Value::Array(self.history[self.logged..].to_vec()),
            params,
            body_hash: Some(body_hash.clone()),
        });
        self.logged = self.history.len();
        body_hash
    }

    /// The answer: one a killed attempt paid for, or through the batch pool, or over
    /// HTTP.
    async fn reply(
        &self,
        body: Vec<u8>,
        answer: Option<Value>,
        log: &TaskLog,
        (turn, attempt): (u32, u32),
    ) -> Result<Reply, SendError> {
        let post = Post {
            client: &self.client,
            url: &self.endpoint.url,
            headers: &self.headers,
            timeout: self.endpoint.timeout,
            max_body: self.endpoint.max_response_bytes,
        };
        let (protocol, idle) = (self.endpoint.protocol, self.endpoint.stream_idle);
        Ok(match (&self.batch, answer) {
            (_, Some(answer)) => Reply {
                body: answer.to_string().into_bytes(),
                request_id: None,
                ms: 0,
                rate: Default::default(),
                ttft_ms: None,
            },
            (Some((batcher, tag)), None) => {
                super::batch::send(batcher, tag, body, log, (turn, attempt)).await?
            }
            (None, None) => super::stream::post(&post, body, protocol, idle)
                .await
                .map_err(SendError::from)?,
        })
    }

    /// Takes a read answer into the history and the estimates; the turn it makes.
    fn take_answer(
        &mut self,
        raw: &Value,
        parsed: Parsed,
        (usage, usage_estimated): (Usage, bool),
        reply: Reply,
        sent: &Sent,
    ) -> Turn {
        let Parsed {
            items,
            calls,
            text,
            stop,
            ..
        } = parsed;
        let answer_bytes = len_of(&items);
        self.call_ids.extend(calls.iter().map(|c| c.id.clone()));
        // A replayed turn can count for more tokens than its bytes (hidden reasoning is
        // billed in full); its output count bounds that.
        self.bytes_since = answer_bytes.max(usage.output_tokens);
        self.last_prompt_tokens = Some(usage.prompt_tokens());
        (self.last_body_bytes, self.compacted_tokens) = (sent.bytes, 0);
        self.cached_prefix = usage
            .cache_read_tokens
            .saturating_add(usage.cache_write_tokens);
        self.answered_at = Some(std::time::Instant::now());
        let from = self.history.len();
        let edits = self.wire.answer_edits(raw, &items);
        self.history.extend(items);
        let context_edits = match edits {
            AnswerEdits::None => None,
            AnswerEdits::Cleared(edits) => Some(edits),
            AnswerEdits::CompactedAt(at) => self.after_server_compaction(from + at),
        };
        // The answer is in the response event; the next request event lists only what
        // comes after it.
        self.logged = self.history.len();
        Turn {
            calls,
            text,
            stop,
            usage,
            rate: reply.rate,
            usage_estimated,
            ttft_ms: reply.ttft_ms,
            context_edits,
            replayed: sent.replayed,
        }
    }
}
