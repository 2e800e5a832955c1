//! What else may watch a task's events besides the reporter: a [`EventSink`] that
//! [`super::log::TaskLog`] hands every typed event to, before it is serialized, and the
//! task's final record. The loop does not know whether one is attached; the run attaches
//! one (the OpenTelemetry traces of `trace/`) when it is asked for.

use std::time::SystemTime;

use serde::Serialize;

use crate::vocab::log::TaskResult;
use crate::vocab::transcript::TranscriptEvent;

/// Receives a task's events as they happen. Called on the loop's own task, so an
/// implementation must return at once: it may record and queue, never wait.
pub trait EventSink: Send + Sync {
    /// One transcript event, `at` the moment it was emitted.
    fn event(&self, at: SystemTime, event: &TranscriptEvent);
    /// The task's row of results.csv: its last event.
    fn finished(&self, result: &TaskResult);
}

/// What became of a run's telemetry: printed at the end and kept in run.json, so spans
/// lost to a collector that was down or slow are counted, not silently missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TelemetryCounts {
    /// Where the spans went (`.../v1/traces`).
    pub endpoint: String,
    /// Spans the tasks made (sampled ones: all unless OTEL_TRACES_SAMPLER says otherwise).
    pub spans: u64,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans never accepted: the queue was full, an export failed, or they were still
    /// waiting when the flush at the end ran out of time.
    pub dropped: u64,
    /// Export requests that failed (refused, unreachable, timed out).
    pub failed_exports: u64,
}

impl TelemetryCounts {
    /// The summary line a run prints.
    pub fn line(&self) -> String {
        let mut line = format!(
            "traces: {} spans to {}, {} exported",
            self.spans, self.endpoint, self.exported
        );
        if self.dropped > 0 {
            line.push_str(&format!(
                ", {} dropped ({} failed exports; the run itself was not slowed)",
                self.dropped, self.failed_exports
            ));
        }
        line
    }
}
