//! The transcript's events, one type for the writer and every reader: a renamed or
//! misspelled event is a compile error instead of a line no reader recognises.
//!
//! On disk each line is `{"ts", "t_ms", "event": "<name>", ...fields}`, the fields in
//! the order declared here. Readers take what they can, as they did when they read
//! untyped JSON: a missing key or a value of the wrong type reads as its default (a
//! hand-written or older line still reads); a line whose event is unknown is skipped
//! (`TranscriptEvent::read`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::vocab::limits::StatedLimits;
use crate::vocab::stop::{Outcome, StopReason};
use crate::vocab::usage::{Clamp, Usage};

use super::transcript_parts::{known, lenient, present};
pub use super::transcript_parts::{
    CheckOutcome, ImageInfo, McpServerInfo, RequestParams, ToolOutcome, Usd, VerifierRecord,
};

/// One line of a task's transcript, without its timestamps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TranscriptEvent {
    /// The task as it starts: its model, tools, policy and limits.
    TaskStart {
        #[serde(default, deserialize_with = "lenient")]
        task: String,
        #[serde(default, deserialize_with = "lenient")]
        provider: String,
        #[serde(default, deserialize_with = "lenient")]
        model: String,
        #[serde(default, deserialize_with = "lenient")]
        max_tokens: u32,
        #[serde(default, deserialize_with = "lenient")]
        tools: Vec<String>,
        #[serde(default, deserialize_with = "lenient")]
        toolset: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        policy: Vec<String>,
        #[serde(default)]
        limits: Value,
        #[serde(default)]
        repo: Value,
    },
    /// The task's workspace was created.
    Workspace {
        #[serde(default, deserialize_with = "lenient")]
        source: String,
        #[serde(default, rename = "ref", deserialize_with = "lenient")]
        git_ref: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        cloned: bool,
        #[serde(default, deserialize_with = "lenient")]
        path: String,
        /// `overlay`, `reflink` or `copy`; absent in transcripts of older runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        /// The pristine checkout the workspace was made from (a layer's lower folder).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pristine: Option<String>,
        /// Time spent waiting for the pristine checkout (the first task of a
        /// repository makes it), and making this task's workspace from it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pristine_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<u64>,
        /// Under `workspaces: auto`, the better methods that failed first, and why.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        fallbacks: Vec<String>,
    },
    /// The task's container is ready: its engine, its image and what making each
    /// cost (build, pull and start apart), before the loop's time limit starts.
    Environment {
        #[serde(default, deserialize_with = "lenient")]
        engine: String,
        /// The image as the job names it (a Dockerfile's derived tag).
        #[serde(default, deserialize_with = "lenient")]
        image: String,
        /// The image id (`sha256:...`).
        #[serde(default, deserialize_with = "lenient")]
        image_id: String,
        /// `present`, `pulled` or `built`.
        #[serde(default, deserialize_with = "lenient")]
        made: String,
        #[serde(default, deserialize_with = "lenient")]
        build_ms: u64,
        #[serde(default, deserialize_with = "lenient")]
        pull_ms: u64,
        #[serde(default, deserialize_with = "lenient")]
        start_ms: u64,
        /// The container's name on the engine.
        #[serde(default, deserialize_with = "lenient")]
        container: String,
        /// Where the workspace is inside it.
        #[serde(default, deserialize_with = "lenient")]
        workdir: String,
        /// cpus, memory, pids, network.
        #[serde(default, deserialize_with = "lenient")]
        limits: String,
        /// The build's or pull's log, when there was one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log: Option<String>,
        /// What a fresh check's container was made for, when this is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        purpose: Option<String>,
    },
    /// The confinement obtained for the task's commands.
    Sandbox {
        #[serde(default, deserialize_with = "lenient")]
        level: String,
        #[serde(default, deserialize_with = "lenient")]
        network_for_bash: bool,
        /// The path the task's commands see its workspace at and start in (the
        /// repository's own folder); absent where they see it where it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seen_at: Option<String>,
    },
    /// The repo's setup command ran.
    Setup {
        #[serde(default, deserialize_with = "lenient")]
        command: String,
        #[serde(default, deserialize_with = "lenient")]
        exit_code: Option<i32>,
        #[serde(default, deserialize_with = "lenient")]
        timed_out: bool,
        #[serde(default, deserialize_with = "lenient")]
        ms: u64,
        #[serde(default, deserialize_with = "lenient")]
        output: String,
    },
    /// The task's MCP servers are connected; `tools` is the whole tool set.
    McpReady {
        #[serde(default, deserialize_with = "lenient")]
        servers: Vec<McpServerInfo>,
        #[serde(default, deserialize_with = "lenient")]
        tools: Vec<String>,
    },
    /// A server's tool was left out or renamed.
    McpNote {
        #[serde(default, deserialize_with = "lenient")]
        note: String,
    },
    /// A line a stdio server wrote to stderr, or how many lines were not logged.
    McpStderr {
        #[serde(default, deserialize_with = "lenient")]
        server: String,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        line: Option<String>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        lines_not_logged: Option<usize>,
    },
    /// A server's tool list changed; `tools` is the new tool set.
    ToolsChanged {
        #[serde(default, deserialize_with = "lenient")]
        tools: Vec<String>,
    },
    /// A shared pool cannot pay for the smallest request.
    BudgetStop {
        #[serde(default, deserialize_with = "lenient")]
        pool: String,
        #[serde(default, deserialize_with = "lenient")]
        cap_usd: Usd,
        /// The pool's spend, not the task's.
        #[serde(default, deserialize_with = "lenient")]
        spent_usd: Usd,
        #[serde(default, deserialize_with = "lenient")]
        left_usd: Usd,
        #[serde(default, deserialize_with = "lenient")]
        reserved_by_others_usd: Usd,
        #[serde(default, deserialize_with = "lenient")]
        smallest_request_usd: Usd,
    },
    /// The request waits for money held by requests in flight.
    BudgetWait {
        #[serde(default, deserialize_with = "lenient")]
        reason: String,
    },
    /// The wait is over.
    BudgetGranted {
        #[serde(default, deserialize_with = "lenient")]
        waited_ms: u64,
    },
    /// A request's worst case is reserved; written out before the request is sent.
    Reserve {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient")]
        max_tokens: u32,
        #[serde(default, deserialize_with = "lenient")]
        prompt_tokens_upper_bound: u64,
        /// The input tokens the rate gates take for it: at most what the provider's
        /// input-tokens-per-minute limit counts (for Anthropic with caching, the part
        /// not expected from the cache). Absent in transcripts from before it existed.
        #[serde(
            default,
            deserialize_with = "lenient",
            skip_serializing_if = "Option::is_none"
        )]
        paced_input_tokens: Option<u64>,
        /// None without a price.
        #[serde(default, deserialize_with = "lenient")]
        reserved_usd: Option<Usd>,
        /// The task's running total before this request.
        #[serde(default, deserialize_with = "lenient")]
        spent_usd: Usd,
    },
    /// A request as sent: its new messages, and on the first its parameters.
    Request {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient")]
        max_tokens: u32,
        #[serde(default, deserialize_with = "lenient")]
        bytes: usize,
        #[serde(default, deserialize_with = "lenient")]
        message_count: usize,
        #[serde(default)]
        new_messages: Value,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        params: Option<RequestParams>,
        /// A digest of the whole body sent: a resume reuses the answer a killed attempt
        /// paid for when the same body is to be sent again. Absent in transcripts from
        /// before it.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        body_hash: Option<String>,
    },
    /// The provider's answer: its body, or the start of a body that is not JSON.
    Response {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        request_id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<Value>,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        raw_body: Option<String>,
        /// A streamed answer: milliseconds from the start of the attempt to its first
        /// content delta. Absent for whole answers and in transcripts from before
        /// streaming.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        ttft_ms: Option<u64>,
        /// The answer a killed attempt of this task paid for, reused by a resume for the
        /// same request instead of buying it again.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        replayed: bool,
    },
    /// An attempt failed; a 429 carries `rate_limited` and `provider_paused_ms`, any
    /// other failure `retry_in_ms` (null when it is not retried).
    AttemptFailed {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient")]
        error: String,
        #[serde(default, deserialize_with = "lenient")]
        retryable: bool,
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "lenient"
        )]
        rate_limited: Option<bool>,
        /// A worst case counted as spent (it may have been billed).
        #[serde(default, deserialize_with = "lenient")]
        charged_usd: Option<Usd>,
        /// Absent on other failures; null when the task gives up.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "present"
        )]
        provider_paused_ms: Option<Option<u64>>,
        /// Absent on a 429; null when the task gives up.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            deserialize_with = "present"
        )]
        retry_in_ms: Option<Option<u64>>,
    },
    /// A request joined a batch of the provider's batch API: written before its answer
    /// is waited for, so a resume knows which batch holds it.
    BatchJoined {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient")]
        batch_id: String,
        #[serde(default, deserialize_with = "lenient")]
        custom_id: String,
    },
    /// A resume found a request a kill left in a batch: cancelled or ended, what it was
    /// billed (`cost_usd`, zero unless it was answered) replaces its reservation.
    BatchRecovered {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient")]
        batch_id: String,
        #[serde(default, deserialize_with = "lenient")]
        custom_id: String,
        /// succeeded, errored, canceled or expired.
        #[serde(default, deserialize_with = "lenient")]
        result: String,
        #[serde(default, deserialize_with = "lenient")]
        cost_usd: Usd,
        /// The task's spend with it.
        #[serde(default, deserialize_with = "lenient")]
        spent_usd: Usd,
        /// The answer's body, when it was answered: the re-run uses it for the same
        /// request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<Value>,
    },
    /// A request cut off in flight; its reservation counts as spent.
    RequestAborted {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        charged_usd: Option<Usd>,
    },
    /// The provider billed more than the reservation's upper bound.
    ReservationExceeded {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        prompt_tokens: u64,
        #[serde(default, deserialize_with = "lenient")]
        prompt_tokens_upper_bound: u64,
        #[serde(default, deserialize_with = "lenient")]
        cost_usd: Option<Usd>,
        #[serde(default, deserialize_with = "lenient")]
        reserved_usd: Option<Usd>,
    },
    /// Usage figures of an answer that were not taken as sent (see `usage::Clamp`):
    /// what the provider reported, what was used, and why. The settle that follows
    /// carries the figures used.
    UsageClamped {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        attempt: u32,
        #[serde(default, deserialize_with = "lenient")]
        clamps: Vec<Clamp>,
    },
    /// The shared ledger could not record a settlement or a release.
    LedgerError {
        #[serde(default, deserialize_with = "lenient")]
        error: String,
    },
    /// An answer's real cost replaces its reservation.
    Settle {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        usage: Usage,
        #[serde(default, deserialize_with = "lenient")]
        usage_estimated: bool,
        #[serde(default, deserialize_with = "lenient")]
        cost_usd: Option<Usd>,
        #[serde(default, deserialize_with = "lenient")]
        released_usd: Option<Usd>,
        /// The task's running total after this answer.
        #[serde(default, deserialize_with = "lenient")]
        spent_usd: Usd,
    },
    /// Rate-limit headers said a window is used up: the provider pauses.
    RatePause {
        #[serde(default, deserialize_with = "lenient")]
        ms: u64,
        #[serde(default, deserialize_with = "lenient")]
        reason: String,
    },
    /// A wait for a team's period cap (`on_cap: wait`) ended: the request was granted
    /// (the next period, a raised cap) or the run's `--until` came.
    CapWait {
        #[serde(default, deserialize_with = "lenient")]
        waited_ms: u64,
        /// `granted` or `until`.
        #[serde(default, deserialize_with = "lenient")]
        ended: String,
    },
    /// The provider's answer stated rate limits the job does not configure: its gate
    /// now paces to them (at the same 99% share as configured ones).
    RateLearned {
        #[serde(default, deserialize_with = "lenient")]
        provider: String,
        /// What the provider's gate paced to before (configured and learned).
        #[serde(default, deserialize_with = "lenient")]
        before: StatedLimits,
        /// What it paces to now.
        #[serde(default, deserialize_with = "lenient")]
        now: StatedLimits,
    },
    /// The last request the budgets allow goes out with tools off.
    WrapUp {
        #[serde(default, deserialize_with = "lenient")]
        why: String,
        #[serde(default, deserialize_with = "lenient")]
        note_added: bool,
        #[serde(default, deserialize_with = "lenient")]
        tool_choice: String,
    },
    /// The model made the same calls with the same results `max_repeats` times in a row,
    /// or went round the same short cycle of turns that often: the note was appended to
    /// the turn's last tool result (call `id`), so the model reads it with the results.
    RepeatWarning {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        /// The tools called in the repeated turns, in order.
        #[serde(default, deserialize_with = "lenient")]
        tools: Vec<String>,
        /// Turns in the cycle: 1 when the same turn came again.
        #[serde(default, deserialize_with = "lenient")]
        period: u32,
        /// Times in a row the turn (or cycle) was made.
        #[serde(default, deserialize_with = "lenient")]
        times: u32,
        #[serde(default, deserialize_with = "lenient")]
        id: String,
        #[serde(default, deserialize_with = "lenient")]
        note: String,
    },
    /// The model went on repeating after the warning: the task stops with `stuck`.
    RepeatStop {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        tools: Vec<String>,
        #[serde(default, deserialize_with = "lenient")]
        period: u32,
        #[serde(default, deserialize_with = "lenient")]
        times: u32,
    },
    /// The prompt was made smaller to stay inside the context window, in what the model
    /// is sent only: this transcript keeps every original tool result. Token figures
    /// are the runner's estimates of the next prompt.
    Compaction {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        strategy: String,
        #[serde(default, deserialize_with = "lenient")]
        cleared_results: u32,
        #[serde(default, deserialize_with = "lenient")]
        cleared_bytes: u64,
        #[serde(default, deserialize_with = "lenient")]
        tokens_before: u64,
        #[serde(default, deserialize_with = "lenient")]
        tokens_after: u64,
        /// The prompt estimate above which the runner compacts (`context.at` of the
        /// window, less max_tokens): a summary that leaves the prompt over it did not
        /// help. Absent for the provider's own compaction and in older transcripts.
        #[serde(
            default,
            deserialize_with = "lenient",
            skip_serializing_if = "Option::is_none"
        )]
        threshold: Option<u64>,
    },
    /// The runner starts on a tool call.
    ToolCall {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        id: String,
        #[serde(default, deserialize_with = "lenient")]
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// The runner's decision on a tool call and its result.
    ToolResult {
        #[serde(default, deserialize_with = "lenient")]
        turn: u32,
        #[serde(default, deserialize_with = "lenient")]
        id: String,
        #[serde(default, deserialize_with = "lenient")]
        name: String,
        #[serde(flatten)]
        outcome: ToolOutcome,
    },
    /// Why the loop ended.
    Stop {
        /// None when read from a line whose reason this version does not know.
        #[serde(default, deserialize_with = "known")]
        stop_reason: Option<StopReason>,
        #[serde(default, deserialize_with = "lenient")]
        detail: String,
    },
    /// The agent's change was taken.
    Patch {
        #[serde(default, deserialize_with = "lenient")]
        files: Vec<String>,
        #[serde(default, deserialize_with = "lenient")]
        bytes: usize,
        /// How the change was found: `index`, `layer` or `whole tree` (see
        /// `tools::workspace::Patch`); absent in transcripts of older runs.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        staged: Option<String>,
    },
    PatchError {
        #[serde(default, deserialize_with = "lenient")]
        error: String,
    },
    /// A suite verifier's verdict (SWE-bench's grading, Harbor's reward), in place of
    /// a check; a regrade adds another with its number.
    Verifier(Box<VerifierRecord>),
    /// The check command's verdict.
    Check {
        #[serde(default, deserialize_with = "lenient")]
        command: String,
        #[serde(flatten)]
        outcome: CheckOutcome,
    },
    /// The workspace was kept (its path) or removed (null).
    WorkspaceEnd {
        #[serde(default, deserialize_with = "lenient")]
        kept: Option<String>,
        /// For a kept layer: the command that mounts it whole again over its pristine
        /// checkout (as root, from the run folder's parent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reassemble: Option<String>,
    },
    /// The task's final figures.
    TaskEnd {
        /// None when read from a line whose outcome this version does not know.
        #[serde(default, deserialize_with = "known")]
        outcome: Option<Outcome>,
        #[serde(default, deserialize_with = "lenient")]
        turns: u32,
        #[serde(default, deserialize_with = "lenient")]
        usage: Usage,
        #[serde(default, deserialize_with = "lenient")]
        cost_usd: Option<Usd>,
        #[serde(default, deserialize_with = "lenient")]
        tool_calls: u32,
        #[serde(default, deserialize_with = "lenient")]
        tool_errors: u32,
        #[serde(default, deserialize_with = "lenient")]
        denied_calls: u32,
        #[serde(default, deserialize_with = "lenient")]
        retries: u32,
        #[serde(default, deserialize_with = "lenient")]
        check_exit_code: Option<i32>,
    },
}

/// A transcript line as written: the timestamps, then the event.
#[derive(Serialize)]
pub struct TranscriptLine<'a> {
    /// Wall clock, RFC 3339 with milliseconds.
    pub ts: &'a str,
    /// Milliseconds since the task started.
    pub t_ms: u64,
    #[serde(flatten)]
    pub event: &'a TranscriptEvent,
}

/// Reads a transcript file as text. A kill during the write of a long line stops it at
/// a page boundary, which may fall inside a character: invalid bytes become
/// U+FFFD (that line then fails to parse, as any cut line does) instead of the whole
/// file being refused, which would lose every event before the cut.
pub fn read_file(path: &std::path::Path) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// A transcript line read back with its timestamps, for readers that place events in
/// time (the exports).
#[derive(Debug, Clone, PartialEq)]
pub struct Stamped {
    /// Wall clock as written (RFC 3339 with milliseconds); empty when the line has none.
    pub ts: String,
    /// Milliseconds since the task started (0 when the line does not say).
    pub t_ms: u64,
    pub event: TranscriptEvent,
}

impl Stamped {
    /// Reads one transcript line, as [`TranscriptEvent::read`] does (None for a line it
    /// skips); timestamps of the wrong type read as empty.
    pub fn read(line: &str) -> Option<Stamped> {
        let v: Value = serde_json::from_str(line).ok()?;
        let event = TranscriptEvent::from_value(&v)?;
        Some(Stamped {
            ts: v["ts"].as_str().unwrap_or_default().to_string(),
            t_ms: v["t_ms"].as_u64().unwrap_or_default(),
            event,
        })
    }
}

impl TranscriptEvent {
    /// Reads one transcript line; None for a line that is not JSON, an event this
    /// version does not know, or values of the wrong type (readers skip those).
    pub fn read(line: &str) -> Option<TranscriptEvent> {
        serde_json::from_str(line).ok()
    }

    /// Like `read`, from a line already parsed.
    pub fn from_value(v: &Value) -> Option<TranscriptEvent> {
        TranscriptEvent::deserialize(v).ok()
    }
}

#[cfg(test)]
#[path = "transcript_tests.rs"]
mod tests;
