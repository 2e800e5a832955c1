//! `agentbatch audit`: reads a task's transcript and walks every turn through the four
//! places an agent loop breaks: the tools declared in the request, the calls received in
//! the response, the runner's decision on each call (run, refused by the policy, or
//! refused as unreadable), and the results sent back in the next request under the
//! calls' ids. It works from the transcript alone, so it can judge any run after the
//! fact, failed and killed ones included.
//!
//! `walk.rs` turns the event lines into turns (what each request declared, the response
//! the runner accepted, the decisions, what the next request carried); `checks.rs`
//! judges them.

mod checks;
mod walk;

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::model::Protocol;
use crate::vocab::transcript::TranscriptEvent;

/// How bad a problem is. The command exits non-zero on violations only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// The conversation broke the protocol: a provider would refuse the next request,
    /// or the model was shown something other than what happened.
    Violation,
    /// Something went wrong that the runner handled (an error result the model can
    /// correct from, a response it refused), or the transcript is incomplete.
    Warning,
}

/// What kind of problem, named after the check that found it, so a report can be
/// grepped and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// Check 1: the model called a tool its request did not declare.
    UndeclaredTool,
    /// Check 2: a call without an id or a name, or with arguments that are not a JSON
    /// object.
    MalformedCall,
    /// Check 2: two calls of one response share an id, so their results cannot be told
    /// apart.
    DuplicateCallId,
    /// Check 3: a call with no recorded decision (neither run nor refused).
    NoDecision,
    /// Check 3: a call decided more than once.
    DuplicateDecision,
    /// Check 3: a decision recorded for an id the response did not call.
    StrayDecision,
    /// Check 4: the next request carries no result for a call.
    MissingResult,
    /// Check 4: the next request carries a result for an id that was not called.
    OrphanResult,
    /// Check 4: the next request carries two results for one call.
    DuplicateResult,
    /// Check 4: a result out of place (Anthropic: not among the leading tool_result
    /// blocks of the next user message; Chat Completions: after a non-tool message).
    MisplacedResult,
    /// The transcript itself: cut off mid-line, or not enough of it to check.
    Transcript,
    /// A compaction that did not help: it cleared nothing, made the prompt estimate
    /// larger, or (a summary) left it over the compaction threshold.
    Compaction,
    /// An answer's usage figures contradicted each other or the request, and the runner
    /// billed a consistent reading of them instead (`usage_clamped`).
    Usage,
}

impl ProblemKind {
    /// The name printed in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemKind::UndeclaredTool => "undeclared_tool",
            ProblemKind::MalformedCall => "malformed_call",
            ProblemKind::DuplicateCallId => "duplicate_call_id",
            ProblemKind::NoDecision => "no_decision",
            ProblemKind::DuplicateDecision => "duplicate_decision",
            ProblemKind::StrayDecision => "stray_decision",
            ProblemKind::MissingResult => "missing_result",
            ProblemKind::OrphanResult => "orphan_result",
            ProblemKind::DuplicateResult => "duplicate_result",
            ProblemKind::Compaction => "compaction",
            ProblemKind::MisplacedResult => "misplaced_result",
            ProblemKind::Transcript => "transcript",
            ProblemKind::Usage => "usage",
        }
    }

    /// Which of the four checks found it (None for the transcript's own problems).
    pub fn check(self) -> Option<&'static str> {
        Some(match self {
            ProblemKind::UndeclaredTool => "tools declared",
            ProblemKind::MalformedCall | ProblemKind::DuplicateCallId => "call received",
            ProblemKind::NoDecision
            | ProblemKind::DuplicateDecision
            | ProblemKind::StrayDecision => "execution allowed or refused",
            ProblemKind::MissingResult
            | ProblemKind::OrphanResult
            | ProblemKind::DuplicateResult
            | ProblemKind::MisplacedResult => "result returned",
            ProblemKind::Transcript | ProblemKind::Compaction | ProblemKind::Usage => return None,
        })
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem found, located by the runner's turn number and the call id where it has
/// them, and by the transcript line that shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub turn: Option<u32>,
    pub call_id: Option<String>,
    pub kind: ProblemKind,
    pub severity: Severity,
    pub message: String,
    /// 1-based line of the transcript.
    pub line: Option<usize>,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let mut place = Vec::new();
        if let Some(t) = self.turn {
            place.push(format!("turn {t}"));
        }
        if let Some(id) = &self.call_id {
            place.push(format!("call {id}"));
        }
        if place.is_empty() {
            place.push("transcript".into());
        }
        write!(f, "{}: {}", place.join(", "), self.kind)?;
        if self.severity == Severity::Warning {
            f.write_str(" (warning)")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(line) = self.line {
            write!(f, " [line {line}]")?;
        }
        Ok(())
    }
}

/// What the audit found in one transcript.
#[derive(Debug, Clone, Default)]
pub struct AuditReport {
    /// In the order found: turn by turn, call by call.
    pub problems: Vec<Problem>,
    /// Model requests made (distinct turn numbers; retries not counted).
    pub turns: u32,
    /// Tool calls in the responses the runner accepted.
    pub calls: u32,
    /// None when the transcript never says (no request was logged).
    pub protocol: Option<Protocol>,
    /// The transcript has its `stop` event: the loop ended on its own terms rather
    /// than being killed.
    pub finished: bool,
    /// Times the prompt was compacted (`compaction` events). Compaction rewrites old
    /// tool results, or replaces whole turns with a summary, in what is sent next; the
    /// requests' new messages, which the checks read, are untouched, so the checks
    /// hold across it. Each event is checked to have removed something.
    pub compactions: u32,
}

impl AuditReport {
    /// Protocol violations found: the command exits 1 when there is any.
    pub fn violations(&self) -> usize {
        self.count(Severity::Violation)
    }

    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    fn count(&self, s: Severity) -> usize {
        self.problems.iter().filter(|p| p.severity == s).count()
    }

    /// One line per problem, then a summary line.
    pub fn render(&self) -> String {
        self.to_string()
    }

    /// The last line of the report: the counts, or "no problems found".
    pub fn summary(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut head = format!(
            "{}, {}",
            plural(self.turns as usize, "turn", "turns"),
            plural(self.calls as usize, "tool call", "tool calls")
        );
        if self.compactions > 0 {
            head.push_str(&format!(
                ", {}",
                plural(self.compactions as usize, "compaction", "compactions")
            ));
        }
        if self.problems.is_empty() {
            return format!("{head}: no problems found");
        }
        let mut counts = plural(
            self.violations(),
            "protocol violation",
            "protocol violations",
        );
        if self.warnings() > 0 {
            counts.push_str(&format!(
                ", {}",
                plural(self.warnings(), "warning", "warnings")
            ));
        }
        format!("{head}: {counts}")
    }

    fn push(&mut self, p: Problem) {
        self.problems.push(p);
    }
}

impl fmt::Display for AuditReport {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for p in &self.problems {
            writeln!(f, "{p}")?;
        }
        writeln!(f, "{}", self.summary())
    }
}

/// A line of a transcript that cannot be read as a transcript event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {detail}")]
pub struct LineError {
    /// 1-based.
    pub line: usize,
    pub detail: String,
}

/// Why a transcript could not be audited at all (the command exits 2).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{}: {}", path.display(), line.line, line.detail)]
    Line { path: PathBuf, line: LineError },
}

/// Audits the transcript at `path`.
pub fn audit_file(path: &Path) -> Result<AuditReport, AuditError> {
    let read = |source| AuditError::Read {
        path: path.to_path_buf(),
        source,
    };
    // A device or a pipe would be read forever.
    if !std::fs::metadata(path).map_err(read)?.is_file() {
        return Err(read(std::io::Error::other(
            "not a regular file: give the path of a transcript (<run>/transcripts/<task>.jsonl)",
        )));
    }
    let bytes = std::fs::read(path).map_err(read)?;
    audit_bytes(&bytes).map_err(|line| AuditError::Line {
        path: path.to_path_buf(),
        line,
    })
}

/// Audits a transcript's text (one JSON event per line).
pub fn audit_lines(text: &str) -> Result<AuditReport, LineError> {
    audit_bytes(text.as_bytes())
}

/// Reads the lines, then audits them. A last line that is cut off is what a killed run
/// leaves: a warning, not an error; a broken line anywhere else means the file is not a
/// transcript.
fn audit_bytes(bytes: &[u8]) -> Result<AuditReport, LineError> {
    let mut events = Vec::new();
    let mut cut_off = None;
    let pieces: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    let last = pieces.len().saturating_sub(1);
    for (i, piece) in pieces.iter().enumerate() {
        let line = i + 1;
        if piece.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(piece) {
            Ok(v) if v.get("event").and_then(Value::as_str).is_some() => events.push((line, v)),
            Ok(_) => {
                return Err(LineError {
                    line,
                    detail: "not a transcript event (a JSON object with an \"event\" field)".into(),
                })
            }
            // The file does not end with a newline, so its last line was never finished.
            Err(_) if i == last => cut_off = Some(line),
            Err(e) => {
                return Err(LineError {
                    line,
                    detail: format!("not JSON: {e}"),
                })
            }
        }
    }
    Ok(audit(&events, cut_off))
}

/// Audits events already read, each with its 1-based line number.
pub fn audit_events(events: &[(usize, Value)]) -> AuditReport {
    audit(events, None)
}

/// Counts the compactions and warns about one that did not help: it shrank nothing,
/// or it was a summary that left the prompt over the compaction threshold (which a
/// runner before this check asked for again and again, a turn or two apart). A
/// transcript from before the threshold was recorded gets the warning for a summary
/// that removed less than a tenth of the estimate.
fn check_compactions(events: &[(usize, Value)], report: &mut AuditReport) {
    for (line, v) in events {
        let Some(TranscriptEvent::Compaction {
            turn,
            strategy,
            cleared_results,
            tokens_before,
            tokens_after,
            threshold,
            ..
        }) = TranscriptEvent::from_value(v)
        else {
            continue;
        };
        report.compactions += 1;
        let summary = strategy == "summarize";
        let message = match threshold {
            Some(t) if summary && tokens_after > t => format!(
                "a summary took the prompt estimate from {tokens_before} to {tokens_after} tokens, still over the compaction threshold of {t}: it did not make room"
            ),
            _ if cleared_results == 0 || tokens_after > tokens_before => format!(
                "a compaction cleared {cleared_results} results and took the prompt estimate from {tokens_before} to {tokens_after} tokens"
            ),
            None if summary && tokens_after.saturating_mul(10) > tokens_before.saturating_mul(9) => {
                format!(
                    "a summary took the prompt estimate only from {tokens_before} to {tokens_after} tokens: it made almost no room"
                )
            }
            _ => continue,
        };
        report.push(Problem {
            turn: Some(turn),
            call_id: None,
            kind: ProblemKind::Compaction,
            severity: Severity::Warning,
            message,
            line: Some(*line),
        });
    }
}

fn audit(events: &[(usize, Value)], cut_off: Option<usize>) -> AuditReport {
    let walked = walk::walk(events);
    let mut report = AuditReport {
        turns: walked.turns,
        calls: walked.segments.iter().map(|s| s.calls.len() as u32).sum(),
        protocol: walked.protocol,
        finished: walked.finished,
        problems: Vec::new(),
        compactions: 0,
    };
    checks::check(&walked, &mut report);
    check_compactions(events, &mut report);
    let ended = match cut_off {
        Some(line) => Some(("transcript ends mid-line (the run was killed?)", Some(line))),
        None if !walked.finished => Some((
            "transcript has no stop event (the run was killed, or is still running)",
            events.last().map(|(line, _)| *line),
        )),
        None => None,
    };
    if let Some((message, line)) = ended {
        report.push(Problem {
            turn: None,
            call_id: None,
            kind: ProblemKind::Transcript,
            severity: Severity::Warning,
            message: message.into(),
            line,
        });
    }
    report
}

#[cfg(test)]
mod tests;
