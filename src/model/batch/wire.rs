//! The providers' batch APIs on the wire (PROTOCOLS.md G, docs/batch-apis.md): create a
//! batch, poll it, read its results and cancel it, for Anthropic's Message Batches and
//! OpenAI's Batch API (a JSONL file uploaded with purpose `batch`). Protocol-neutral
//! above this file: a batch is an id, a state and results matched by `custom_id`.

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Client, Url};
use serde_json::{json, Value};

use super::Outcome;
use crate::model::backoff::status_is_retryable;
use crate::model::protocol::{wire, BatchKind};
use crate::model::Protocol;

/// Where a provider's batch API is and how to reach it.
#[derive(Debug, Clone)]
pub struct BatchApi {
    pub protocol: Protocol,
    /// Which of the providers' batch APIs it is.
    pub kind: BatchKind,
    pub client: Client,
    /// The provider's headers (key, version), as for its synchronous requests.
    pub headers: HeaderMap,
    /// Anthropic: `.../v1/messages/batches`. OpenAI: the base (`.../v1`) under which
    /// `files` and `batches` are.
    pub root: Url,
    /// OpenAI: the endpoint each line is for (`/v1/responses`, `/v1/chat/completions`).
    pub endpoint: String,
    /// Per HTTP call.
    pub timeout: Duration,
}

/// A batch API call that failed: with the HTTP status when there was one, and whether
/// trying again may help.
#[derive(Debug, Clone, PartialEq)]
pub struct CallError {
    pub status: Option<u16>,
    pub error_type: String,
    pub message: String,
    pub retryable: bool,
}

impl CallError {
    /// The provider refused the call before doing anything (a rate limit, overload, or
    /// a refusal of the request itself): nothing was created.
    pub fn refused(&self) -> bool {
        matches!(self.status, Some(s) if ((400..500).contains(&s) && s != 408) || s == 529)
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(s) => write!(f, "HTTP {s} {}: {}", self.error_type, self.message),
            None => write!(f, "{}: {}", self.error_type, self.message),
        }
    }
}

/// A batch ready to be created.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// The create call's body.
    Body(Value),
}

/// Where a batch stands.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    /// Still being processed (or validated, finalized, cancelled).
    Running,
    /// Done: its results can be read.
    Ended(Ended),
    /// The whole batch failed (OpenAI `failed`: its input was refused).
    Failed(String),
}

/// Where an ended batch's results are.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// Anthropic: the JSONL results URL.
    Results(Url),
    /// OpenAI: the output file and the error file, either may be absent.
    Files {
        output: Option<String>,
        error: Option<String>,
    },
}

impl BatchApi {
    /// The batch API of the provider at `base` (the base URL its synchronous endpoint
    /// is under, as in the job file; for the simulator, the run's root), with the key
    /// and version headers of `endpoint`.
    pub fn new(
        client: Client,
        endpoint: &crate::model::Endpoint,
        base: &str,
    ) -> Result<BatchApi, String> {
        let base = base.trim_end_matches('/');
        let kind = wire(endpoint.protocol).batch();
        let (root, path) = match kind {
            BatchKind::MessageBatches => (format!("{base}/v1/messages/batches"), ""),
            BatchKind::UploadedFile { endpoint } => (base.to_string(), endpoint),
        };
        let root = Url::parse(&root).map_err(|e| format!("invalid base_url \"{base}\": {e}"))?;
        let mut headers = endpoint.headers()?;
        // Each call sets its own body type (JSON, or multipart for an upload), and no
        // batch answer is an event stream.
        headers.remove(reqwest::header::CONTENT_TYPE);
        headers.remove(reqwest::header::ACCEPT);
        Ok(BatchApi {
            protocol: endpoint.protocol,
            kind,
            client,
            headers,
            root,
            endpoint: path.to_string(),
            timeout: endpoint.timeout,
        })
    }

    fn url(&self, path: &str) -> Result<Url, CallError> {
        let base = self.root.as_str().trim_end_matches('/');
        Url::parse(&format!("{base}/{path}")).map_err(|e| CallError {
            status: None,
            error_type: "bad_url".into(),
            message: e.to_string(),
            retryable: false,
        })
    }

    /// Readies the requests (`custom_id`, request body) for one batch: Anthropic's are
    /// sent in the create call itself; OpenAI's are uploaded as a JSONL file first
    /// (an upload can be repeated safely: an unused file costs nothing).
    pub async fn prepare(&self, items: &[(String, Value)]) -> Result<Prepared, CallError> {
        match self.kind {
            BatchKind::MessageBatches => {
                let requests: Vec<Value> = items
                    .iter()
                    .map(|(id, body)| json!({"custom_id": id, "params": body}))
                    .collect();
                Ok(Prepared::Body(json!({ "requests": requests })))
            }
            BatchKind::UploadedFile { .. } => {
                let mut jsonl = Vec::new();
                for (id, body) in items {
                    let line = json!({"custom_id": id, "method": "POST", "url": self.endpoint, "body": body});
                    jsonl.extend_from_slice(line.to_string().as_bytes());
                    jsonl.push(b'\n');
                }
                let part = reqwest::multipart::Part::bytes(jsonl)
                    .file_name("agentbatch.jsonl")
                    .mime_str("application/jsonl")
                    .map_err(|e| local(e.to_string()))?;
                let form = reqwest::multipart::Form::new()
                    .text("purpose", "batch")
                    .part("file", part);
                let file = self
                    .send(self.client.post(self.url("files")?).multipart(form))
                    .await?;
                Ok(Prepared::Body(json!({
                    "input_file_id": text(&file, "id")?,
                    "endpoint": self.endpoint,
                    "completion_window": "24h",
                })))
            }
        }
    }

    /// Creates the batch; returns its id. Not safe to repeat after a failure that may
    /// have reached the provider: a second batch would be billed too.
    pub async fn create(&self, prepared: &Prepared) -> Result<String, CallError> {
        let Prepared::Body(body) = prepared;
        let url = match self.kind {
            BatchKind::MessageBatches => self.root.clone(),
            BatchKind::UploadedFile { .. } => self.url("batches")?,
        };
        let batch = self.send(self.client.post(url).json(body)).await?;
        text(&batch, "id")
    }

    /// Where the batch stands.
    pub async fn poll(&self, id: &str) -> Result<State, CallError> {
        match self.kind {
            BatchKind::MessageBatches => {
                let b = self.send(self.client.get(self.url(id)?)).await?;
                if b.get("processing_status").and_then(Value::as_str) != Some("ended") {
                    return Ok(State::Running);
                }
                let results = match b.get("results_url").and_then(Value::as_str) {
                    Some(u) => Url::parse(u).or_else(|_| self.url(&format!("{id}/results"))),
                    None => self.url(&format!("{id}/results")),
                }?;
                Ok(State::Ended(Ended::Results(results)))
            }
            BatchKind::UploadedFile { .. } => {
                let b = self
                    .send(self.client.get(self.url(&format!("batches/{id}"))?))
                    .await?;
                let file = |k: &str| b.get(k).and_then(Value::as_str).map(str::to_string);
                match b.get("status").and_then(Value::as_str).unwrap_or("") {
                    "completed" | "expired" | "cancelled" => Ok(State::Ended(Ended::Files {
                        output: file("output_file_id"),
                        error: file("error_file_id"),
                    })),
                    "failed" => {
                        let why = b
                            .pointer("/errors/data")
                            .and_then(Value::as_array)
                            .map(|errs| {
                                errs.iter()
                                    .filter_map(|e| e.get("message").and_then(Value::as_str))
                                    .collect::<Vec<_>>()
                                    .join("; ")
                            })
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "the provider gave no reason".into());
                        Ok(State::Failed(why))
                    }
                    _ => Ok(State::Running),
                }
            }
        }
    }

    /// The ended batch's results, by `custom_id`.
    pub async fn results(&self, ended: &Ended) -> Result<Vec<(String, Outcome)>, CallError> {
        let mut out = Vec::new();
        match ended {
            // A line that cannot be read leaves its request without a result (failed,
            // maybe billed); the others are still delivered.
            Ended::Results(url) => {
                let body = self.fetch(self.client.get(url.clone())).await?;
                out.extend(lines(&body).filter_map(|l| anthropic_result(&l.ok()?).ok()));
            }
            Ended::Files { output, error } => {
                for file in [output, error].into_iter().flatten() {
                    let url = self.url(&format!("files/{file}/content"))?;
                    let body = self.fetch(self.client.get(url)).await?;
                    out.extend(lines(&body).filter_map(|l| openai_result(&l.ok()?).ok()));
                }
            }
        }
        Ok(out)
    }

    /// What became of the requests of batch `id`, sent by a process that was killed:
    /// the batch is cancelled (what it has not processed is then not billed), then
    /// followed until it ends, for up to `wait` (failures that may pass are tried again
    /// meanwhile). None: it has not ended by then.
    pub async fn recover(
        &self,
        id: &str,
        wait: Duration,
    ) -> Result<Option<Vec<(String, Outcome)>>, CallError> {
        let until = std::time::Instant::now() + wait;
        let patient = |e: CallError| async move {
            if e.retryable && std::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok(())
            } else {
                Err(e)
            }
        };
        // An ended batch refuses the cancel: that is fine, its results are there.
        let _ = self.cancel(id).await;
        let ended = loop {
            match self.poll(id).await {
                Ok(State::Ended(e)) => break e,
                Ok(State::Failed(why)) => return Err(local(format!("the batch failed: {why}"))),
                Ok(State::Running) if std::time::Instant::now() >= until => return Ok(None),
                Ok(State::Running) => tokio::time::sleep(Duration::from_millis(500)).await,
                Err(e) => patient(e).await?,
            }
        };
        loop {
            match self.results(&ended).await {
                Ok(r) => return Ok(Some(r)),
                Err(e) => patient(e).await?,
            }
        }
    }

    /// Asks the provider to stop the batch: what it has not processed is not billed.
    pub async fn cancel(&self, id: &str) -> Result<(), CallError> {
        let url = match self.kind {
            BatchKind::MessageBatches => self.url(&format!("{id}/cancel"))?,
            BatchKind::UploadedFile { .. } => self.url(&format!("batches/{id}/cancel"))?,
        };
        match self.send(self.client.post(url)).await {
            Ok(_) => Ok(()),
            // "Cannot cancel a batch with status 'completed'": it ended by itself.
            Err(e) if matches!(e.status, Some(400 | 409)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Value, CallError> {
        let body = self.fetch(req).await?;
        serde_json::from_slice(&body).map_err(|e| CallError {
            status: None,
            error_type: "malformed".into(),
            message: format!("the batch API's answer is not JSON: {e}"),
            retryable: false,
        })
    }

    async fn fetch(&self, req: reqwest::RequestBuilder) -> Result<Vec<u8>, CallError> {
        let resp = req
            .headers(self.headers.clone())
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| CallError {
                status: None,
                error_type: "connection".into(),
                message: e.to_string(),
                retryable: true,
            })?;
        let status = resp.status().as_u16();
        let body = resp.bytes().await.map_err(|e| CallError {
            status: Some(status),
            error_type: "connection".into(),
            message: format!("the answer was cut off: {e}"),
            retryable: true,
        })?;
        if !(200..300).contains(&status) {
            let (error_type, message) = crate::model::http::error_body(&body);
            return Err(CallError {
                status: Some(status),
                error_type,
                message,
                retryable: status_is_retryable(status, None),
            });
        }
        Ok(body.to_vec())
    }
}

fn local(message: String) -> CallError {
    CallError {
        status: None,
        error_type: "local".into(),
        message,
        retryable: false,
    }
}

fn text(v: &Value, key: &str) -> Result<String, CallError> {
    v.get(key)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| CallError {
            status: None,
            error_type: "malformed".into(),
            message: format!("the batch API's answer has no \"{key}\""),
            retryable: false,
        })
}

fn lines(body: &[u8]) -> impl Iterator<Item = Result<Value, serde_json::Error>> + '_ {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(serde_json::from_slice)
}

fn custom_id(line: &Value) -> Result<String, CallError> {
    text(line, "custom_id")
}

/// One line of Anthropic's results file.
fn anthropic_result(line: &Value) -> Result<(String, Outcome), CallError> {
    let id = custom_id(line)?;
    let r = line.get("result").unwrap_or(&Value::Null);
    let outcome = match r.get("type").and_then(Value::as_str) {
        Some("succeeded") => Outcome::Succeeded {
            body: r
                .get("message")
                .map(|m| m.to_string().into_bytes())
                .unwrap_or_default(),
            request_id: None,
        },
        Some("errored") => {
            let e = r.get("error").unwrap_or(&Value::Null);
            // The error is an error response: {type: "error", error: {type, message}}.
            let inner = e.get("error").unwrap_or(e);
            let error_type = inner
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("api_error")
                .to_string();
            Outcome::Errored {
                status: status_of_anthropic_error(&error_type),
                message: inner
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                error_type,
            }
        }
        Some("canceled") => Outcome::Canceled,
        Some("expired") => Outcome::Expired,
        other => {
            return Err(CallError {
                status: None,
                error_type: "malformed".into(),
                message: format!("result of {id} has the unknown type {other:?}"),
                retryable: false,
            })
        }
    };
    Ok((id, outcome))
}

/// The HTTP status a synchronous request would have had for an Anthropic error type
/// (the batch result carries the type only).
fn status_of_anthropic_error(t: &str) -> u16 {
    match t {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "billing_error" => 402,
        "rate_limit_error" => 429,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// One line of an OpenAI output or error file.
fn openai_result(line: &Value) -> Result<(String, Outcome), CallError> {
    let id = custom_id(line)?;
    if let Some(code) = line.pointer("/error/code").and_then(Value::as_str) {
        let message = line
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let outcome = match code {
            "batch_expired" => Outcome::Expired,
            "batch_cancelled" => Outcome::Canceled,
            _ => Outcome::Errored {
                status: 400,
                error_type: code.to_string(),
                message,
            },
        };
        return Ok((id, outcome));
    }
    let resp = line.get("response").unwrap_or(&Value::Null);
    let status = resp
        .get("status_code")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(0);
    let body = resp.get("body").unwrap_or(&Value::Null);
    let request_id = resp
        .get("request_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    let outcome = if status == 200 {
        Outcome::Succeeded {
            body: body.to_string().into_bytes(),
            request_id,
        }
    } else {
        let (error_type, message) = crate::model::http::error_body(body.to_string().as_bytes());
        Outcome::Errored {
            status,
            error_type,
            message,
        }
    };
    Ok((id, outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_result_lines_are_read_by_their_type() {
        let ok = json!({"custom_id": "t1--1-1", "result": {"type": "succeeded", "message": {"id": "msg_1"}}});
        let (id, o) = anthropic_result(&ok).unwrap();
        assert_eq!(id, "t1--1-1");
        assert!(matches!(o, Outcome::Succeeded { ref body, .. } if body == br#"{"id":"msg_1"}"#));
        let err = json!({"custom_id": "a", "result": {"type": "errored", "error": {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}}});
        assert_eq!(
            anthropic_result(&err).unwrap().1,
            Outcome::Errored {
                status: 529,
                error_type: "overloaded_error".into(),
                message: "busy".into()
            }
        );
        for (t, o) in [
            ("canceled", Outcome::Canceled),
            ("expired", Outcome::Expired),
        ] {
            let l = json!({"custom_id": "a", "result": {"type": t}});
            assert_eq!(anthropic_result(&l).unwrap().1, o);
        }
        let bad = json!({"custom_id": "a", "result": {"type": "pending"}});
        assert!(anthropic_result(&bad).is_err());
        assert!(anthropic_result(&json!({"result": {"type": "expired"}})).is_err());
    }

    #[test]
    fn openai_lines_tell_success_request_errors_and_batch_ends_apart() {
        let ok = json!({"id": "r1", "custom_id": "a", "response": {"status_code": 200, "request_id": "req_9", "body": {"id": "resp_1"}}, "error": null});
        assert_eq!(
            openai_result(&ok).unwrap().1,
            Outcome::Succeeded {
                body: br#"{"id":"resp_1"}"#.to_vec(),
                request_id: Some("req_9".into())
            }
        );
        let refused = json!({"custom_id": "b", "response": {"status_code": 400, "body": {"error": {"type": "invalid_request_error", "message": "bad"}}}, "error": null});
        assert_eq!(
            openai_result(&refused).unwrap().1,
            Outcome::Errored {
                status: 400,
                error_type: "invalid_request_error".into(),
                message: "bad".into()
            }
        );
        let expired = json!({"custom_id": "c", "response": null, "error": {"code": "batch_expired", "message": "x"}});
        assert_eq!(openai_result(&expired).unwrap().1, Outcome::Expired);
        let cancelled = json!({"custom_id": "d", "response": null, "error": {"code": "batch_cancelled", "message": "x"}});
        assert_eq!(openai_result(&cancelled).unwrap().1, Outcome::Canceled);
    }

    #[test]
    fn a_context_overflow_in_a_batch_reads_as_the_synchronous_one_does() {
        let line = json!({"custom_id": "t--3-1", "response": {"status_code": 400, "body": {"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": "Your input exceeds the context window of this model."}}}, "error": null});
        let Outcome::Errored {
            status,
            error_type,
            message,
        } = openai_result(&line).unwrap().1
        else {
            panic!("not an error");
        };
        let e = crate::model::ModelError::Http(crate::model::HttpError::Status {
            status,
            error_type,
            message,
            request_id: None,
        });
        assert!(e.is_context_overflow(), "{e}");
    }

    #[test]
    fn results_files_skip_blank_lines_and_refuse_broken_ones() {
        assert_eq!(lines(b"{\"a\":1}\n\n  \n{\"b\":2}\n").count(), 2);
        let read: Vec<bool> = lines(b"{\"a\":1}\n{oops\n{\"b\":2}")
            .map(|l| l.is_ok())
            .collect();
        assert_eq!(read, vec![true, false, true]);
    }
}
