//! What tasks tell the reporter. Tasks never touch report files themselves: they send
//! events, and the reporter alone writes.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use rust_decimal::Decimal;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use crate::vocab::stop::{Outcome, StopReason};
use crate::vocab::transcript::{TranscriptEvent, TranscriptLine};
use crate::vocab::usage::Usage;

/// The final record of one task: one row of results.csv. Who the task is and how it
/// stopped are set by `agent::task_result`, the one constructor; what the task
/// measured is [`Measured`], where a new results.csv column's figure goes.
#[derive(Debug, Clone)]
pub struct TaskResult {
    /// The task's id as written in the job file.
    pub task_id: String,
    /// The run's unique name for this task, variant and epoch (names its files).
    pub key: String,
    /// `axis=value,...`; empty without a matrix.
    pub variant: String,
    /// The value of each matrix axis.
    pub axes: Vec<(String, String)>,
    pub epoch: u32,
    pub provider: String,
    /// The provider's wire protocol.
    pub protocol: String,
    pub model: String,
    pub team: Option<String>,
    pub outcome: Outcome,
    pub stop_reason: StopReason,
    pub stop_detail: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// What the task measured: zero or none for a task that never ran.
    pub measured: Measured,
}

/// What a task measured, zero or none by default (a task that never ran, or crashed).
/// A figure added here is a field, its measurement in the loop (`agent::run_task`,
/// where the compiler asks for it), and its column in `report/results/columns.rs`.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub turns: u32,
    pub tool_calls: u32,
    pub tool_errors: u32,
    pub usage: Usage,
    /// Turns whose answer carried no usage, counted at an upper bound instead.
    pub usage_estimated_turns: u32,
    /// Times the prompt was compacted to stay inside the context window.
    pub compactions: u32,
    /// The median time to first token of the task's streamed answers (None: none).
    pub ttft_ms: Option<u64>,
    /// None when the model has no price.
    pub cost_usd: Option<Decimal>,
    /// What prompt caching saved (see results.csv's `cache_saved_usd`).
    pub cache_saved_usd: Option<Decimal>,
    /// Turns answered through the provider's batch API.
    pub batched_turns: u32,
    /// What batch pricing saved (see results.csv's `batch_saved_usd`).
    pub batch_saved_usd: Option<Decimal>,
    pub wall_ms: u64,
    pub model_ms: u64,
    pub tool_ms: u64,
    pub retries: u32,
    /// Time spent waiting for rate limits (and provider pauses after 429s).
    pub rate_wait_ms: u64,
    /// Time spent waiting for a team's period cap (`on_cap: wait`).
    pub cap_wait_ms: u64,
    /// The check command's exit code (None: no check, or it was killed).
    pub check_exit_code: Option<i32>,
    pub check_ms: Option<u64>,
    /// Tool calls the permission policy refused.
    pub denied_calls: u32,
    /// The confinement obtained for the task's commands (empty without a repo).
    pub sandbox: String,
    /// The kept workspace, if any.
    pub workspace: Option<String>,
    /// The task's container image: its name and id (`localhost/x:1@sha256:...`);
    /// empty without an environment.
    pub environment: String,
    /// Building or pulling its image and starting its container, in ms (outside the
    /// time limit); None without an environment.
    pub environment_ms: Option<u64>,
    /// A SWE-bench verifier's counts of listed tests that passed and that did not.
    pub tests_passed: Option<u32>,
    pub tests_failed: Option<u32>,
    /// A Harbor verifier's reward.
    pub reward: Option<f64>,
}

/// The name, in each of the run folder's work folders (`workspaces/`, `git/`, `tmp/`),
/// of a task's second workspace (a fresh check's or a verifier's): `<key>@fresh`.
pub fn fresh_key(key: &str) -> String {
    format!("{key}@fresh")
}

/// A message to the reporter.
#[derive(Debug)]
pub enum Event {
    TaskStarted {
        task: Arc<str>,
    },
    /// One event of the task's transcript: the reporter serializes it into its line.
    Transcript {
        task: Arc<str>,
        line: Box<Stamped>,
        /// Answered once the line has reached the operating system (not the disk), so
        /// a kill -9 after the answer cannot lose it.
        written: Option<oneshot::Sender<()>>,
    },
    TaskFinished(Box<TaskResult>),
    /// The run is stopping (shown on the progress display).
    Stopping(String),
    /// The task started (`true`) or stopped (`false`) waiting for a team's period cap
    /// (`on_cap: wait`): counted on the progress display. Sent only when a wait starts
    /// and ends, so a run where nobody waits never sends one.
    CapWaiting {
        task: Arc<str>,
        waiting: bool,
    },
    /// The task's patch (written to patches/<task>.diff).
    Patch {
        task: Arc<str>,
        /// Bytes: a file's content need not be UTF-8.
        diff: Vec<u8>,
    },
}

/// A transcript event with the moments it happened: wall clock, and milliseconds since
/// its task started.
#[derive(Debug)]
pub struct Stamped {
    pub at: SystemTime,
    pub t_ms: u64,
    pub event: TranscriptEvent,
}

impl Stamped {
    /// Appends the transcript line `{ts, t_ms, event, ...fields}` (no newline) to
    /// `out`, serialized straight from the typed event.
    pub fn append_line(&self, out: &mut Vec<u8>) {
        let start = out.len();
        let ts = DateTime::<Utc>::from(self.at).to_rfc3339_opts(SecondsFormat::Millis, true);
        let line = TranscriptLine {
            ts: &ts,
            t_ms: self.t_ms,
            event: &self.event,
        };
        if let Err(e) = serde_json::to_writer(&mut *out, &line) {
            // Only a map with non-string keys fails, and no event holds one; should it
            // happen, the line still says when and why rather than vanish.
            out.truncate(start);
            let text = serde_json::json!({"ts": ts, "t_ms": self.t_ms, "event": "unwritable", "error": e.to_string()});
            out.extend_from_slice(text.to_string().as_bytes());
        }
    }

    /// The line as text.
    pub fn line(&self) -> String {
        let mut out = Vec::new();
        self.append_line(&mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// What else may watch a task's events besides the reporter: each typed event before it
/// is serialized, and the task's final record. The loop does not know whether one is
/// attached; the run attaches one (the OpenTelemetry traces of `trace/`) when it is asked
/// for. Called on the loop's own task, so an implementation must return at once: it may
/// record and queue, never wait.
pub trait EventSink: Send + Sync {
    /// One transcript event, `at` the moment it was emitted.
    fn event(&self, at: SystemTime, event: &TranscriptEvent);
    /// The task's row of results.csv: its last event.
    fn finished(&self, result: &TaskResult);
}

/// A task's handle for writing its transcript. The channel is unbounded so that logging
/// never blocks a loop; the reporter only appends buffered lines, far faster than any
/// model answers. A sink, when attached, sees every typed event first (traces).
#[derive(Clone)]
pub struct TaskLog {
    task: Arc<str>,
    tx: UnboundedSender<Event>,
    started: Instant,
    sink: Option<Arc<dyn EventSink>>,
}

impl TaskLog {
    pub fn new(task: &str, tx: UnboundedSender<Event>) -> TaskLog {
        TaskLog {
            task: Arc::from(task),
            tx,
            started: Instant::now(),
            sink: None,
        }
    }

    /// The same log with `sink` watching its events (the run attaches the task's trace
    /// here; the loop never knows).
    pub fn with_sink(mut self, sink: Option<Arc<dyn EventSink>>) -> TaskLog {
        self.sink = sink;
        self
    }

    pub fn task(&self) -> &str {
        &self.task
    }

    /// Appends `{ts, t_ms, event, ...fields}` to the transcript. The event goes to the
    /// reporter as it is, which serializes it straight into the file on its own thread
    /// (no JSON tree, and no work on the loop's path beyond the send).
    pub fn emit(&self, event: TranscriptEvent) {
        self.send_line(event, None);
    }

    /// Like `emit`, and waits until the line has been written out of the process. A
    /// reservation is logged this way before its request is sent: the transcript is
    /// what a resume counts a killed task's spend from, so a request that may be
    /// billed must never be missing from it.
    pub async fn emit_written(&self, event: TranscriptEvent) {
        let (tx, rx) = oneshot::channel();
        self.send_line(event, Some(tx));
        // A dropped sender means the reporter has stopped; the run is ending anyway.
        let _ = rx.await;
    }

    fn send_line(&self, event: TranscriptEvent, written: Option<oneshot::Sender<()>>) {
        let at = SystemTime::now();
        if let Some(sink) = &self.sink {
            sink.event(at, &event);
        }
        let t_ms = self.started.elapsed().as_millis() as u64;
        // A closed channel means the run is shutting down; the line has nowhere to go.
        let _ = self.tx.send(Event::Transcript {
            task: self.task.clone(),
            line: Box::new(Stamped { at, t_ms, event }),
            written,
        });
    }

    /// Tells the reporter the task has started.
    pub fn started(&self) {
        let _ = self.tx.send(Event::TaskStarted {
            task: self.task.clone(),
        });
    }

    /// Tells the reporter the task started (`true`) or stopped (`false`) waiting for a
    /// team's period cap, for the progress display.
    pub fn cap_waiting(&self, waiting: bool) {
        let _ = self.tx.send(Event::CapWaiting {
            task: self.task.clone(),
            waiting,
        });
    }

    /// Hands the task's patch to the reporter.
    pub fn patch(&self, diff: Vec<u8>) {
        let _ = self.tx.send(Event::Patch {
            task: self.task.clone(),
            diff,
        });
    }

    /// Hands the task's final record to the reporter.
    pub fn finished(&self, result: TaskResult) {
        if let Some(sink) = &self.sink {
            sink.finished(&result);
        }
        let _ = self.tx.send(Event::TaskFinished(Box::new(result)));
    }
}
