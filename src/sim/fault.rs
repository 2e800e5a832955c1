//! Scripted faults played instead of an answer: an error status in the protocol's
//! shape and headers (`retry-after`, used-up rate-limit windows, `x-should-retry`), or a
//! 200 whose body breaks; and the slow body of `body_delay`.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;

use super::protocol::served;
use super::script::Fault;
use super::{error_response, respond, Refusal};
use crate::model::Protocol;

pub(super) fn slow_body(bytes: Vec<u8>, delay: Duration) -> Body {
    let stream = futures::stream::once(async move {
        tokio::time::sleep(delay).await;
        Ok::<_, std::io::Error>(Bytes::from(bytes))
    });
    Body::from_stream(stream)
}

/// The answer to an attempt that a scripted fault fails before any event: an error
/// status with the protocol's headers, or a 200 whose body breaks.
pub(super) fn play_fault(protocol: Protocol, fault: &Fault, request_id: &str) -> Response {
    if fault.disconnect {
        let half = Bytes::from_static(b"{\"id\":\"sim\",\"content\":[{\"type\":\"te");
        let stream = futures::stream::iter(vec![
            Ok(half),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "simulated disconnect",
            )),
        ]);
        let mut resp = Response::new(Body::from_stream(stream));
        resp.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        return resp;
    }
    let status = fault.status.unwrap_or(500);
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let error_type = fault
        .error_type
        .clone()
        .unwrap_or_else(|| respond::default_error_type(status).to_string());
    let message = fault
        .message
        .clone()
        .unwrap_or_else(|| format!("simulated {status} {error_type}"));
    let mut extra = Vec::new();
    if let Some(wait) = fault.retry_after {
        extra.push((
            "retry-after".to_string(),
            wait.0.as_secs_f64().ceil().to_string(),
        ));
        extra.push(("retry-after-ms".to_string(), wait.0.as_millis().to_string()));
    }
    if let Some(reset) = fault.reset_after {
        extra.extend(served(protocol).requests_used_up(reset.0));
    }
    if let Some(v) = fault.should_retry {
        extra.push(("x-should-retry".to_string(), v.to_string()));
    }
    let refusal = Refusal {
        status: code,
        error_type,
        code: fault.code.clone(),
        message,
    };
    error_response(protocol, &refusal, request_id, &extra)
}
