//! What else follows a run's events besides the reporter: the transcripts as the
//! reporter writes them (the report page's views), and what became of a run's telemetry.
//! The [`EventSink`](crate::vocab::log::EventSink) a task's log hands its events to is in
//! `log.rs` beside that log, which calls it.

use serde::Serialize;

use crate::vocab::transcript::TranscriptEvent;

/// Follows the transcripts as the reporter writes them: each event once its line is in
/// the file, in the file's order, on the reporter's own thread, then each finished
/// task. The report page builds its views of the transcripts this way while the run
/// goes, so the end of a run has nothing to read back.
pub trait TranscriptFollower: Send + Sync {
    /// The event of `task`'s transcript just written, `t_ms` after the task started.
    fn event(&self, task: &str, t_ms: u64, event: TranscriptEvent);
    /// `task` has its row; its transcript is complete at `transcript` (run-relative).
    fn finished(&self, task: &str, transcript: &str);
}

/// What became of a run's telemetry: printed at the end and kept in run.json, so spans
/// lost to a collector that was down or slow are counted, not silently missing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TelemetryCounts {
    /// Where the spans went (`scheme://host:port/.../v1/traces`, never the URL's query,
    /// which may hold a token).
    pub endpoint: String,
    /// Spans the tasks made (sampled ones: all unless OTEL_TRACES_SAMPLER says otherwise).
    pub spans: u64,
    /// Spans the collector accepted.
    pub exported: u64,
    /// Spans never accepted: the queue was full, an export failed, the collector
    /// rejected them (see `rejected`), or they were still queued when the flush at the
    /// end ran out of time.
    pub dropped: u64,
    /// Spans of the export that was sent and still unanswered when the flush at the end
    /// ran out of time: the collector may or may not have them.
    pub unconfirmed: u64,
    /// Of the dropped, spans a collector answered for as rejected (a partial success).
    pub rejected: u64,
    /// Export requests that failed (refused, unreachable, timed out), retries included
    /// in one.
    pub failed_exports: u64,
    /// Why, the last time an export failed or was partly rejected: the HTTP status and
    /// the start of the collector's answer, or the connection's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl TelemetryCounts {
    /// The summary line a run prints: what reached the collector, what did not and why.
    pub fn line(&self) -> String {
        let mut line = format!(
            "traces: {} spans to {}, {} exported",
            self.spans, self.endpoint, self.exported
        );
        if self.dropped > 0 {
            line.push_str(&format!(", {} dropped", self.dropped));
            if self.rejected > 0 {
                line.push_str(&format!(" ({} rejected by the collector)", self.rejected));
            }
        }
        if self.unconfirmed > 0 {
            line.push_str(&format!(
                ", {} unconfirmed (sent, no answer before the end)",
                self.unconfirmed
            ));
        }
        if self.failed_exports > 0 {
            line.push_str(&format!("; {} failed exports", self.failed_exports));
        }
        if let Some(why) = &self.failure {
            line.push_str(&format!("; last failure: {why}"));
        }
        if self.spans > 0 && self.exported == 0 {
            line.push_str("; no span is known to have reached the collector");
        }
        line
    }
}
