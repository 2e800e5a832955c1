//! Getting spans out of the process without slowing it: the SDK's batch processor (a
//! bounded queue that drops when full, exported from a thread of its own), the OTLP/HTTP
//! exporter with protobuf bodies, an HTTP client that runs our reqwest on the run's tokio
//! runtime, and counts of what reached the collector.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;

use super::{Settings, TraceError};
use crate::vocab::sink::TelemetryCounts;

/// What became of the spans, counted where they pass.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Sampled spans started (each ends, explicitly or when dropped): on the loop's
    /// path, so a lock-free count.
    pub spans: AtomicU64,
    /// The export side's figures: one export at a time (the batch processor's thread),
    /// so a lock taken a few times per export.
    tally: Mutex<Tally>,
}

#[derive(Debug, Default)]
struct Tally {
    exported: u64,
    /// Spans a collector answered for with `partial_success.rejected_spans`.
    rejected: u64,
    failed_exports: u64,
    /// The latest reason an export did not fully succeed: an HTTP status with the start
    /// of the collector's answer, a connection error, a partial success's message.
    failure: Option<String>,
    /// The export under way.
    current: Option<Current>,
}

#[derive(Debug, Default)]
struct Current {
    spans: u64,
    /// A request of it is sent and not answered yet: the collector may have its spans.
    on_wire: bool,
    /// Spans the collector's answer said it rejected.
    rejected: u64,
}

impl Counters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failed(&self, why: String) {
        self.lock().failure = Some(why);
    }

    /// The figures once the flush ended: spans of an export whose request was still
    /// unanswered are unconfirmed (the collector may have them), the rest not exported
    /// are dropped.
    pub fn tally(&self, endpoint: String) -> TelemetryCounts {
        let spans = self.spans.load(std::sync::atomic::Ordering::Relaxed);
        let t = self.lock();
        let unconfirmed = t
            .current
            .as_ref()
            .filter(|c| c.on_wire)
            .map_or(0, |c| c.spans);
        TelemetryCounts {
            endpoint,
            spans,
            exported: t.exported,
            dropped: spans.saturating_sub(t.exported + unconfirmed),
            unconfirmed,
            rejected: t.rejected,
            failed_exports: t.failed_exports,
            failure: t.failure.clone(),
        }
    }
}

/// Our reqwest client for the exporter. The SDK's batch processor exports from a plain
/// thread (`futures_executor::block_on`), where reqwest's async client has no reactor:
/// each request is spawned on the run's tokio runtime and awaited from there. This
/// keeps one HTTP and TLS stack in the binary (reqwest 0.13 with rustls) instead of
/// the exporter's blocking client, which would start a runtime of its own. It sees each
/// request's fate, which the exporter reduces to "failed": the reason and a partial
/// success's rejected spans are noted in the counts.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
    counts: Arc<Counters>,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        if let Some(c) = &mut self.counts.lock().current {
            c.on_wire = true;
        }
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await.map_err(|e| describe(&*e)) })
            .await;
        let result = match sent {
            Ok(Ok(response)) => {
                self.note(&response);
                Ok(response)
            }
            Ok(Err(e)) => {
                self.counts.failed(e.clone());
                Err(e.into())
            }
            // The runtime is shutting down: the process is ending.
            Err(e) => Err(e.to_string().into()),
        };
        if let Some(c) = &mut self.counts.lock().current {
            c.on_wire = false;
        }
        result
    }
}

impl OnRuntime {
    /// A collector's answer: a refusal's status and the start of its body, or the spans
    /// a partial success rejected.
    fn note(&self, response: &Response<Bytes>) {
        let status = response.status();
        if !status.is_success() {
            let body = String::from_utf8_lossy(response.body());
            let body: String = body
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            let body = crate::text::prefix(body.trim(), 200);
            self.counts.failed(match body.is_empty() {
                true => format!("HTTP {}", status.as_u16()),
                false => format!("HTTP {}: {body}", status.as_u16()),
            });
            return;
        }
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
        use prost::Message as _;
        let Ok(answer) = ExportTraceServiceResponse::decode(response.body().as_ref()) else {
            return;
        };
        let Some(partial) = answer.partial_success else {
            return;
        };
        let rejected = u64::try_from(partial.rejected_spans).unwrap_or(0);
        if rejected == 0 && partial.error_message.is_empty() {
            return;
        }
        let mut t = self.counts.lock();
        if let Some(c) = &mut t.current {
            c.rejected = rejected.min(c.spans);
        }
        t.failure = Some(format!(
            "the collector rejected {rejected} span(s): {}",
            crate::text::prefix(&partial.error_message, 200)
        ));
    }
}

/// A request error without its URL (whose query may hold a token), with its causes:
/// reqwest's own message alone says only "error sending request".
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let text = match err.downcast_ref::<reqwest::Error>() {
            Some(r) if r.is_timeout() => "timed out".to_string(),
            Some(r) => {
                let mut s = r.to_string();
                if let Some(url) = r.url() {
                    s = s.replace(&format!(" for url ({url})"), "");
                    s = s.replace(url.as_str(), "the endpoint");
                }
                s
            }
            None => err.to_string(),
        };
        if !parts.iter().any(|p: &String| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    crate::text::prefix(&parts.join(": "), 300)
}

/// The OTLP exporter, counting the spans the collector accepted and the exports that
/// failed (the batch processor itself only logs them).
#[derive(Debug)]
struct Counting {
    inner: opentelemetry_otlp::SpanExporter,
    counts: Arc<Counters>,
}

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        self.counts.lock().current = Some(Current {
            spans: n,
            ..Current::default()
        });
        let result = self.inner.export(batch).await;
        let mut t = self.counts.lock();
        let current = t.current.take().unwrap_or_default();
        match &result {
            Ok(()) => {
                t.exported += n - current.rejected;
                t.rejected += current.rejected;
            }
            Err(e) => {
                t.failed_exports += 1;
                // A failure before any request was sent (the body could not be made).
                if t.failure.is_none() {
                    t.failure = Some(crate::text::prefix(&e.to_string(), 300));
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The tracer provider exporting to the settings' endpoint, with their timeout for
/// each request (and for the export's retries together) and their headers; the batch
/// settings come from the `OTEL_BSP_*` variables.
pub(super) fn provider(
    settings: &Settings,
    resource: Resource,
    counts: Arc<Counters>,
) -> Result<SdkTracerProvider, TraceError> {
    let client = reqwest::Client::builder()
        .timeout(settings.timeout)
        // A collector that redirects would get the auth headers elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| TraceError::Exporter(format!("no async runtime: {e}")))?;
    let inner = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OnRuntime {
            client,
            runtime,
            counts: counts.clone(),
        })
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.as_str())
        .with_timeout(settings.timeout)
        .with_headers(settings.headers.0.iter().cloned().collect())
        .build()
        // Its message may quote the endpoint, query and all.
        .map_err(|_| {
            TraceError::Exporter(format!(
                "the exporter refused the endpoint {}",
                settings.shown_endpoint()
            ))
        })?;
    let processor = BatchSpanProcessor::new(
        Counting { inner, counts },
        BatchConfigBuilder::default().build(),
    );
    Ok(SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(processor)
        .build())
}
