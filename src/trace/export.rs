//! Getting spans out of the process without slowing it: the SDK's batch processor (a
//! bounded queue that drops when full, exported from a thread of its own), the OTLP/HTTP
//! exporter with protobuf bodies, an HTTP client that runs our reqwest on the run's tokio
//! runtime, and counts of what reached the collector.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;

use super::TraceError;

/// One export request's limit, connecting included: a collector that accepts and never
/// answers costs the export thread this much, never a loop.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What became of the spans, counted where they pass.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// Sampled spans started (each ends, explicitly or when dropped).
    pub spans: AtomicU64,
    pub exported: AtomicU64,
    pub failed_exports: AtomicU64,
}

impl Counters {
    pub fn get(n: &AtomicU64) -> u64 {
        n.load(Ordering::Relaxed)
    }
}

/// Our reqwest client for the exporter. The SDK's batch processor exports from a plain
/// thread (`futures_executor::block_on`), where reqwest's async client has no reactor:
/// each request is spawned on the run's tokio runtime and awaited from there. This
/// keeps one HTTP and TLS stack in the binary (reqwest 0.13 with rustls) instead of
/// the exporter's blocking client, which would start a runtime of its own.
#[derive(Debug)]
struct OnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await.map_err(|e| e.to_string()) })
            .await;
        match sent {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(e.into()),
            // The runtime is shutting down: the process is ending.
            Err(e) => Err(e.to_string().into()),
        }
    }
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
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.counts.exported.fetch_add(n, Ordering::Relaxed),
            Err(_) => self.counts.failed_exports.fetch_add(1, Ordering::Relaxed),
        };
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

/// The tracer provider exporting to `endpoint` (a full `.../v1/traces` URL). Headers
/// come from `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (the
/// exporter reads them), the batch settings from the `OTEL_BSP_*` variables.
pub(super) fn provider(
    endpoint: &str,
    resource: Resource,
    counts: Arc<Counters>,
) -> Result<SdkTracerProvider, TraceError> {
    let client = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        // A collector that redirects would get the auth headers elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let runtime = tokio::runtime::Handle::try_current()
        .map_err(|e| TraceError::Exporter(format!("no async runtime: {e}")))?;
    let inner = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(OnRuntime { client, runtime })
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TraceError::Exporter(e.to_string()))?;
    let processor = BatchSpanProcessor::new(
        Counting { inner, counts },
        BatchConfigBuilder::default().build(),
    );
    Ok(SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(processor)
        .build())
}
