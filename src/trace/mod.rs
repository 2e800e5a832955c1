//! OpenTelemetry traces of a run, off unless asked for: one trace per task, following the
//! GenAI semantic conventions (`invoke_agent` for the task, `chat` per model request,
//! `execute_tool` per tool call), exported as OTLP over HTTP.
//!
//! It sits beside `agent` and `report` and uses neither: each task's
//! [`crate::vocab::log::TaskLog`] hands its typed events to a [`task::TaskTrace`]
//! (a [`crate::vocab::sink::EventSink`]) that `run` attaches, so the loop is the same
//! with and without traces, and spans start and end when the events were emitted.
//! Spans go through a bounded queue to an export thread: a collector that is down or
//! slow costs dropped spans (counted and reported), never a slower loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::job::TaskSpec;
use crate::vocab::sink::{EventSink, TelemetryCounts};

mod attrs;
mod export;
mod task;

/// How long the end of a run waits for the last spans to be exported: a dead or stalled
/// collector delays the exit by at most this.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Where traces go and what they hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The OTLP/HTTP traces URL (`.../v1/traces`).
    pub endpoint: String,
    /// Record message contents, tool arguments and results (`--otlp-content`): off by
    /// default, as the conventions ask, since they may be sensitive and large.
    pub content: bool,
}

impl Settings {
    /// The settings from `--otlp URL` and the standard variables (read through `var`),
    /// or None when traces are off: neither the flag nor an endpoint variable is set, or
    /// `OTEL_SDK_DISABLED=true`. The flag's URL, like `OTEL_EXPORTER_OTLP_ENDPOINT`, is the
    /// collector's base (`/v1/traces` is added unless it is there);
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as written.
    pub fn resolve(
        flag: Option<&str>,
        content: bool,
        var: impl Fn(&str) -> Option<String>,
    ) -> Option<Settings> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        let endpoint = match (flag, set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(base), _) => traces_url(base),
            (None, Some(full)) => full,
            (None, None) => traces_url(&set("OTEL_EXPORTER_OTLP_ENDPOINT")?),
        };
        Some(Settings { endpoint, content })
    }
}

/// A collector's base URL with the traces path.
fn traces_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    match base.ends_with("/v1/traces") {
        true => base.to_string(),
        false => format!("{base}/v1/traces"),
    }
}

/// Why traces cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("--otlp / OTEL_EXPORTER_OTLP_*ENDPOINT: {0:?} is not an http:// or https:// URL")]
    Endpoint(String),
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
        match reqwest::Url::parse(&settings.endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => return Err(TraceError::Endpoint(settings.endpoint.clone())),
        }
        let counts = Arc::new(export::Counters::default());
        let provider = export::provider(&settings.endpoint, resource(), counts.clone())?;
        let tracer = provider.tracer("agentbatch");
        Ok(Tracing {
            provider,
            tracer,
            counts,
            run: Arc::new(task::RunInfo {
                job: job.to_string(),
                run_id: run_id.to_string(),
                content: settings.content,
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
        let c = &self.counts;
        let spans = export::Counters::get(&c.spans);
        let exported = export::Counters::get(&c.exported);
        TelemetryCounts {
            endpoint: self.settings.endpoint.clone(),
            spans,
            exported,
            dropped: spans.saturating_sub(exported),
            failed_exports: c.failed_exports.load(Ordering::Relaxed),
        }
    }
}

/// The process's resource: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as the SDK
/// reads them, with `agentbatch` as the service's name unless they name one.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    let mut builder =
        Resource::builder().with_attribute(KeyValue::new("service.version", crate::VERSION));
    if !named {
        builder = builder.with_service_name("agentbatch");
    }
    builder.build()
}

#[cfg(test)]
mod tests;
