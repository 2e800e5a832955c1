//! The notes of a transcript's view: each event the view does not lay out in its own
//! shape (attempts, budgets, compaction, the workspace, setup, the patch, the check) as a
//! line of text with its kind, for colour, and the turn it names.

use std::borrow::Cow;

use serde_json::{json, Value};

use crate::vocab::transcript::{CheckOutcome, TranscriptEvent};

/// What a section shows of one event: a line of text with its kind (for colour), or
/// an item of its own shape.
pub(super) enum Item {
    Note {
        name: Cow<'static, str>,
        cls: &'static str,
        text: String,
    },
    Value(Value),
}

/// A note item: `class` is its kind, for colour.
pub(super) fn note(name: impl Into<Cow<'static, str>>, class: &'static str, text: String) -> Item {
    Item::Note {
        name: name.into(),
        cls: class,
        text,
    }
}

/// Money as the notes show it, `-` when there is none.
pub(super) fn usd<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".into(), |c| format!("${c}"))
}

/// Every other event as a line of text with its kind (for colour) and its turn, if it
/// names one.
pub(super) fn event_note(event: TranscriptEvent) -> (u32, Item) {
    use TranscriptEvent as E;
    match event {
        E::AttemptFailed { .. }
        | E::RatePause { .. }
        | E::RateLearned { .. }
        | E::CapWait { .. }
        | E::BudgetWait { .. }
        | E::BudgetGranted { .. }
        | E::BudgetStop { .. }
        | E::Reserve { .. }
        | E::Settle { .. }
        | E::WrapUp { .. } => money_note(event),
        E::Compaction { .. }
        | E::RepeatWarning { .. }
        | E::RepeatStop { .. }
        | E::RequestAborted { .. }
        | E::ReservationExceeded { .. }
        | E::UsageClamped { .. }
        | E::LedgerError { .. } => trouble_note(event),
        E::BatchJoined { .. }
        | E::BatchRecovered { .. }
        | E::Workspace { .. }
        | E::Environment { .. }
        | E::Sandbox { .. }
        | E::Setup { .. }
        | E::McpNote { .. }
        | E::McpStderr { .. }
        | E::Patch { .. }
        | E::PatchError { .. }
        | E::Check { .. }
        | E::Verifier(..)
        | E::WorkspaceEnd { .. } => workspace_note(event),
        // Laid out by `transcript::add`; listed so a new event is a compile error here.
        E::TaskStart { .. }
        | E::McpReady { .. }
        | E::ToolsChanged { .. }
        | E::Request { .. }
        | E::Response { .. }
        | E::ToolCall { .. }
        | E::ToolResult { .. }
        | E::Stop { .. }
        | E::TaskEnd { .. } => (0, Item::Value(json!({ "k": "ev" }))),
    }
}

/// Attempts, rate pauses and budgets: what a request waited for, reserved and spent.
fn money_note(event: TranscriptEvent) -> (u32, Item) {
    use TranscriptEvent as E;
    match event {
        E::AttemptFailed {
            turn,
            attempt,
            error,
            rate_limited,
            retry_in_ms,
            provider_paused_ms,
            ..
        } => {
            let rate = rate_limited.unwrap_or(false);
            let next = match (retry_in_ms.or(provider_paused_ms), rate) {
                (Some(Some(ms)), _) => format!("; retried after {ms} ms"),
                (Some(None), _) => "; not retried".into(),
                _ => String::new(),
            };
            let cls = if rate { "rate" } else { "error" };
            let text = format!("attempt {attempt} failed: {error}{next}");
            (turn, note("attempt_failed", cls, text))
        }
        E::RatePause { ms, reason } => (
            0,
            note("rate_pause", "rate", format!("paused {ms} ms: {reason}")),
        ),
        E::CapWait { waited_ms, ended } => (
            0,
            note(
                "cap_wait",
                "budget",
                format!("waited {waited_ms} ms for the team's period cap ({ended})"),
            ),
        ),
        E::RateLearned { provider, now, .. } => (
            0,
            note(
                "rate_learned",
                "rate",
                format!("{provider} states its limits: pacing to {}", now.describe()),
            ),
        ),
        E::BudgetWait { reason } => (0, note("budget_wait", "budget", reason)),
        E::BudgetGranted { waited_ms } => (
            0,
            note("budget_granted", "budget", format!("waited {waited_ms} ms")),
        ),
        E::BudgetStop {
            pool,
            cap_usd,
            spent_usd,
            left_usd,
            ..
        } => (
            0,
            note(
                "budget_stop",
                "budget",
                format!(
                    "pool {pool}: cap ${} spent ${} left ${}",
                    cap_usd, spent_usd, left_usd
                ),
            ),
        ),
        E::Reserve {
            turn,
            attempt,
            reserved_usd,
            spent_usd,
            ..
        } => (
            turn,
            note(
                "reserve",
                "budget",
                format!(
                    "attempt {attempt}: reserved {} (spent so far ${})",
                    usd(&reserved_usd),
                    spent_usd
                ),
            ),
        ),
        E::Settle {
            turn,
            usage,
            cost_usd,
            spent_usd,
            ..
        } => (
            turn,
            note(
                "settle",
                "budget",
                format!(
                    "tokens in {} out {} (cache read {}); cost {}; spent ${}",
                    usage.input_tokens,
                    usage.output_tokens,
                    usage.cache_read_tokens,
                    usd(&cost_usd),
                    spent_usd
                ),
            ),
        ),
        E::WrapUp { why, .. } => (
            0,
            note(
                "wrap_up",
                "budget",
                format!("last request, tools off: {why}"),
            ),
        ),
        _ => (0, Item::Value(json!({ "k": "ev" }))),
    }
}

/// What went wrong or was cut short: compaction, repeats, aborts, figures at odds.
fn trouble_note(event: TranscriptEvent) -> (u32, Item) {
    use TranscriptEvent as E;
    match event {
        E::Compaction {
            turn,
            strategy,
            cleared_results,
            tokens_before,
            tokens_after,
            ..
        } => (
            turn,
            note(
                "compaction",
                "compaction",
                format!("{strategy}: cleared {cleared_results} result(s); prompt ~{tokens_before} -> ~{tokens_after} tokens"),
            ),
        ),
        E::RepeatWarning { turn, tools, times, .. } => (
            turn,
            note("repeat_warning", "error", format!("{} repeated {times} times: warned", tools.join(", "))),
        ),
        E::RepeatStop { turn, tools, times, .. } => (
            turn,
            note("repeat_stop", "error", format!("{} repeated {times} times after the warning", tools.join(", "))),
        ),
        E::RequestAborted { turn, charged_usd } => (
            turn,
            note("request_aborted", "error", format!("cut off in flight; charged {}", usd(&charged_usd))),
        ),
        E::ReservationExceeded { turn, cost_usd, reserved_usd, .. } => (
            turn,
            note(
                "reservation_exceeded",
                "error",
                format!("billed {} over the reservation {}", usd(&cost_usd), usd(&reserved_usd)),
            ),
        ),
        E::UsageClamped { turn, clamps, .. } => (
            turn,
            note(
                "usage_clamped",
                "error",
                clamps
                    .iter()
                    .map(|c| format!("{} reported {}, {} used: {}", c.field, c.reported, c.used, c.why))
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
        ),
        E::LedgerError { error } => (0, note("ledger_error", "error", error)),
        _ => (0, Item::Value(json!({ "k": "ev" }))),
    }
}

/// Batches, the workspace, the sandbox, setup, MCP servers' notes, the patch and the
/// check.
fn workspace_note(event: TranscriptEvent) -> (u32, Item) {
    use TranscriptEvent as E;
    match event {
        E::BatchJoined { turn, batch_id, .. } => (
            turn,
            note("batch_joined", "setup", format!("batch {batch_id}")),
        ),
        E::BatchRecovered {
            turn,
            batch_id,
            result,
            cost_usd,
            ..
        } => (
            turn,
            note(
                "batch_recovered",
                "setup",
                format!("batch {batch_id}: {result}, billed ${}", cost_usd),
            ),
        ),
        E::Workspace { source, method, .. } => (
            0,
            note(
                "workspace",
                "setup",
                format!("{source} ({})", method.unwrap_or_default()),
            ),
        ),
        E::Environment {
            engine,
            image,
            image_id,
            made,
            build_ms,
            pull_ms,
            start_ms,
            container,
            purpose,
            ..
        } => (
            0,
            note(
                "environment",
                "setup",
                format!(
                    "{}container {container} on {engine} from {image} ({image_id}, {made}): build {build_ms} ms, pull {pull_ms} ms, start {start_ms} ms",
                    purpose.map(|p| format!("{p}: ")).unwrap_or_default()
                ),
            ),
        ),
        E::Sandbox {
            level,
            network_for_bash,
            seen_at,
        } => (
            0,
            note(
                "sandbox",
                "setup",
                format!(
                    "{level}; network for bash: {network_for_bash}{}",
                    seen_at
                        .map(|at| format!("; commands see the workspace at {at}"))
                        .unwrap_or_default()
                ),
            ),
        ),
        E::Setup {
            command,
            exit_code,
            output,
            ..
        } => (
            0,
            note(
                "setup",
                "setup",
                format!("{command} -> exit {exit_code:?}\n{output}"),
            ),
        ),
        E::McpNote { note: n } => (0, note("mcp_note", "setup", n)),
        E::McpStderr { server, line, .. } => (
            0,
            note(
                "mcp_stderr",
                "setup",
                format!("{server}: {}", line.unwrap_or_default()),
            ),
        ),
        E::Patch { files, bytes, .. } => (
            0,
            note(
                "patch",
                "end",
                format!(
                    "{} file(s), {bytes} bytes: {}",
                    files.len(),
                    files.join(", ")
                ),
            ),
        ),
        E::PatchError { error } => (0, note("patch_error", "error", error)),
        E::Check { command, outcome } => (0, note("check", "end", check_text(&command, outcome))),
        E::Verifier(v) => (0, note("verifier", "end", verifier_text(&v))),
        E::WorkspaceEnd { kept, .. } => (
            0,
            note(
                "workspace_end",
                "end",
                kept.map_or("removed".into(), |k| format!("kept at {k}")),
            ),
        ),
        _ => (0, Item::Value(json!({ "k": "ev" }))),
    }
}

/// What a check command did.
fn check_text(command: &str, outcome: CheckOutcome) -> String {
    match outcome {
        CheckOutcome::Cancelled { .. } => format!("{command}: cancelled"),
        CheckOutcome::Failed { error } => format!("{command}: could not start: {error}"),
        CheckOutcome::Ran {
            exit_code,
            passed,
            timed_out,
            output,
            ..
        } => format!(
            "{command} -> exit {} ({}{})\n{output}",
            exit_code.map_or("-".into(), |c| c.to_string()),
            if passed { "passed" } else { "failed" },
            if timed_out { ", timed out" } else { "" }
        ),
    }
}

/// A verifier's verdict in one line: what decided it, and the failing tests.
fn verifier_text(v: &crate::vocab::transcript::VerifierRecord) -> String {
    let regrade = if v.regrade > 0 {
        format!("regrade {}: ", v.regrade)
    } else {
        String::new()
    };
    if let Some(e) = &v.error {
        return format!("{regrade}{} verifier could not run: {e}", v.kind);
    }
    let verdict = if v.passed { "passed" } else { "failed" };
    let mut parts = vec![format!("{regrade}{} verifier {verdict}", v.kind)];
    if let Some(r) = v.reward {
        parts.push(format!("reward {r}"));
    }
    if let (Some(p), Some(f)) = (v.tests_passed, v.tests_failed) {
        parts.push(format!("{p} tests passed, {f} failed"));
    }
    if let Some(i) = &v.invalid {
        parts.push(format!("invalid: {i}"));
    }
    for (what, list) in [
        ("FAIL_TO_PASS not passing", &v.fail_to_pass_failed),
        ("PASS_TO_PASS broken", &v.pass_to_pass_failed),
    ] {
        if !list.is_empty() {
            parts.push(format!("{what}: {}", list.join(", ")));
        }
    }
    parts.push(format!("{} ms", v.ms));
    parts.join("; ")
}
