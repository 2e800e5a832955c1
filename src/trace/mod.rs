//! OpenTelemetry traces of a run, off unless asked for: one trace per task, following the
//! GenAI semantic conventions (`invoke_agent` for the task, `chat` per model request,
//! `execute_tool` per tool call), exported as OTLP over HTTP.
//!
//! It sits beside `agent` and `report` and uses neither: each task's
//! [`crate::vocab::log::TaskLog`] hands its typed events to a [`task::TaskTrace`]
//! (a [`crate::vocab::log::EventSink`]) that `run` attaches, so the loop is the same
//! with and without traces, and spans start and end when the events were emitted.
//! Spans go through a bounded queue to an export thread: a collector that is down or
//! slow costs dropped spans (counted and reported), never a slower loop.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::job::TaskSpec;
use crate::vocab::log::EventSink;
use crate::vocab::sink::TelemetryCounts;

mod attrs;
mod config;
mod export;
mod task;
mod task_events;

pub use config::{Headers, Settings, DEFAULT_TIMEOUT, DEFAULT_VALUE_LIMIT};

/// How long the end of a run waits for the last spans to be exported: a dead or stalled
/// collector delays the exit by at most this.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Why traces cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("--otlp / OTEL_EXPORTER_OTLP_*ENDPOINT: {0} is not an http:// or https:// URL")]
    Endpoint(String),
    #[error("--otlp / OTEL_EXPORTER_OTLP_*ENDPOINT: {0} has a user name or password in it, which would be printed and recorded, and not sent: give the URL without them and the credentials as a header, e.g. OTEL_EXPORTER_OTLP_HEADERS=Authorization=Basic%20<base64 of user:password>")]
    Credentials(String),
    #[error("{0}")]
    Protocol(String),
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(String),
}

/// The run's traces: the provider with its export thread, and the counts.
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    counts: Arc<export::Counters>,
    settings: Settings,
    /// Run-wide attributes of every task's root span.
    run: Arc<task::RunInfo>,
}

impl Tracing {
    /// Starts the exporter (inside a tokio runtime). `job` names the agent of every
    /// task's span; `run_id` is on every root span.
    pub fn start(settings: Settings, job: &str, run_id: &str) -> Result<Tracing, TraceError> {
        let counts = Arc::new(export::Counters::default());
        let provider = export::provider(&settings, resource(), counts.clone())?;
        let scope = opentelemetry::InstrumentationScope::builder("agentbatch")
            .with_version(crate::VERSION)
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Ok(Tracing {
            provider,
            tracer,
            counts,
            run: Arc::new(task::RunInfo {
                job: job.to_string(),
                run_id: run_id.to_string(),
                content: settings.content,
                value_limit: settings.value_limit,
            }),
            settings,
        })
    }

    /// The sink that turns one task's events into its trace.
    pub fn for_task(&self, spec: &TaskSpec) -> Arc<dyn EventSink> {
        Arc::new(task::TaskTrace::new(
            self.tracer.clone(),
            self.run.clone(),
            self.counts.clone(),
            spec,
        ))
    }

    /// Exports what is left, waiting at most [`FLUSH_TIMEOUT`], and says what became of
    /// the spans. Every task must have ended.
    pub async fn finish(&self) -> TelemetryCounts {
        let provider = self.provider.clone();
        // On a blocking thread: the export it waits for runs on this runtime.
        let _ = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
            .await;
        self.counts.tally(self.settings.shown_endpoint())
    }
}

/// The process's resource as the spec orders it: `OTEL_SERVICE_NAME` wins over a
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (the SDK's detectors apply them the other
/// way round), `agentbatch` when neither names one; agentbatch's version is the
/// `service.version` only when the variables set none.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let service = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| {
            detected
                .get(&opentelemetry::Key::new("service.name"))
                .map(|v| v.as_str().into_owned())
                .filter(|v| !v.starts_with("unknown_service"))
        })
        .unwrap_or_else(|| "agentbatch".to_string());
    let mut builder = Resource::builder().with_service_name(service);
    if detected
        .get(&opentelemetry::Key::new("service.version"))
        .is_none()
    {
        builder = builder.with_attribute(KeyValue::new("service.version", crate::VERSION));
    }
    builder.build()
}

#[cfg(test)]
mod tests;
