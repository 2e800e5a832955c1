//! One loop's request through its provider's batch pool: the batch id written to the
//! transcript once the batch exists, then the answer read as the synchronous endpoint's.

use std::time::Instant;

use super::{custom_id, Batcher, Outcome};
use crate::model::backoff::status_is_retryable;
use crate::model::http::{HttpError, Reply};
use crate::model::RateHeaders;
use crate::model::{ModelError, SendError};
use crate::vocab::log::TaskLog;
use crate::vocab::transcript::TranscriptEvent;

/// Sends `body` (a request of the synchronous endpoint, not streamed) as turn `turn`,
/// attempt `attempt` of the task tagged `tag`, and waits for its batch's answer.
pub async fn send(
    batcher: &Batcher,
    tag: &str,
    body: Vec<u8>,
    log: &TaskLog,
    (turn, attempt): (u32, u32),
) -> Result<Reply, SendError> {
    let started = Instant::now();
    let value = serde_json::from_slice(&body).map_err(|e| SendError {
        error: ModelError::Malformed {
            detail: format!("the request body is not JSON: {e}"),
            request_id: None,
        },
        retryable: false,
        server_wait: None,
        maybe_billed: false,
        rate_limited: false,
        rate: RateHeaders::default(),
        usage: None,
    })?;
    let id = custom_id(tag, turn, attempt);
    let ticket = batcher.submit(id.clone(), value, body.len());
    if let Ok(batch_id) = ticket.joined.await {
        log.emit_written(TranscriptEvent::BatchJoined {
            turn,
            attempt,
            batch_id,
            custom_id: id,
        })
        .await;
    }
    let (batch_id, outcome) = ticket.outcome.await.unwrap_or_else(|_| {
        (
            String::new(),
            Outcome::Failed {
                message: "the batch pool stopped".into(),
                maybe_sent: true,
                retryable: true,
            },
        )
    });
    let not_answered = |detail: String, retryable: bool, maybe_billed: bool| SendError {
        error: ModelError::Batch {
            batch_id: batch_id.clone(),
            detail,
        },
        retryable,
        server_wait: None,
        maybe_billed,
        rate_limited: false,
        rate: RateHeaders::default(),
        usage: None,
    };
    match outcome {
        Outcome::Succeeded { body, request_id } => Ok(Reply {
            body,
            request_id,
            ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            rate: RateHeaders::default(),
            ttft_ms: None,
        }),
        // An errored item is not billed; it is retried (in a later batch) as the same
        // status would be.
        Outcome::Errored {
            status,
            error_type,
            message,
        } => Err(SendError {
            error: ModelError::Http(HttpError::Status {
                status,
                error_type,
                message,
                request_id: None,
            }),
            retryable: status_is_retryable(status, None),
            server_wait: None,
            maybe_billed: false,
            rate_limited: status == 429,
            rate: RateHeaders::default(),
            usage: None,
        }),
        Outcome::Expired => Err(not_answered(
            "the request expired before the provider processed it (not billed)".into(),
            true,
            false,
        )),
        Outcome::Canceled => Err(not_answered(
            "the batch was cancelled (batch.max_wait) before the request was processed (not billed)"
                .into(),
            false,
            false,
        )),
        Outcome::Failed {
            message,
            maybe_sent,
            retryable,
        } => Err(not_answered(message, retryable, maybe_sent)),
    }
}
