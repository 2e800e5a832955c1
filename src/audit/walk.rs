//! Turns transcript events into turns. A `request` event carries the request's new
//! messages (and, on the first, the declared tools); a `response` event the provider's
//! body, which the runner accepted unless an `attempt_failed` of the same turn follows;
//! `tool_call`/`tool_result` events the runner's handling of each call; `tools_changed`
//! a new tool list. Each accepted response starts a segment that collects the decisions
//! after it and the messages of the requests that follow, until the next accepted
//! response. Lines are read as `TranscriptEvent`s: one the runner never writes (an
//! unknown event, values of the wrong type) is passed over, like any event the audit
//! has no use for.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::model::protocol::{answer_protocol, str_of, wire};
use crate::model::Protocol;
use crate::vocab::transcript::{RequestParams, ToolOutcome, TranscriptEvent};

/// Why a call's arguments cannot be used as a tool input; one tool call of a
/// response and a result found in a request, as each protocol's wire reads them.
pub(super) use crate::model::protocol::{Args, LoggedCall as Call, Returned};

/// The tool names a request declared.
#[derive(Debug, Clone)]
pub(super) struct Declared {
    pub names: BTreeSet<String>,
}

/// One `tool_result` event: the runner's decision on a call and its outcome.
#[derive(Debug, Clone)]
pub(super) struct Decision {
    pub id: Option<String>,
    pub line: usize,
    /// `allow`, `deny` or `invalid`; None on an interrupted call or a malformed event.
    pub decision: Option<String>,
    pub is_error: bool,
    /// The call was cut off by the deadline or a cancellation.
    pub interrupted: bool,
}

/// What the requests after a response sent: their new messages in order.
#[derive(Debug, Clone)]
pub(super) struct Followup {
    pub turn: u32,
    pub line: usize,
    pub messages: Vec<(usize, Value)>,
}

/// A response the runner accepted, and what followed it.
#[derive(Debug, Clone)]
pub(super) struct Segment {
    pub turn: u32,
    pub line: usize,
    pub calls: Vec<Call>,
    /// None when the transcript does not say.
    pub declared: Option<Declared>,
    /// `tool_call` events: the ids the runner started on, with their lines.
    pub started: Vec<(String, usize)>,
    pub decisions: Vec<Decision>,
    /// None when no request followed (the task stopped after this response).
    pub next: Option<Followup>,
}

/// A response the runner refused (an `attempt_failed` of its turn followed it).
#[derive(Debug, Clone)]
pub(super) struct Rejected {
    pub turn: u32,
    pub line: usize,
    pub calls: Vec<Call>,
    pub declared: Option<Declared>,
    pub why: String,
}

/// The transcript as turns.
#[derive(Debug, Default)]
pub(super) struct Walked {
    pub protocol: Option<Protocol>,
    pub turns: u32,
    pub finished: bool,
    pub segments: Vec<Segment>,
    pub rejected: Vec<Rejected>,
    /// Requests before any accepted response (their results answer nothing).
    pub before_first: Option<Followup>,
    /// Decisions recorded before any accepted response.
    pub loose_decisions: Vec<Decision>,
    /// A response came but the protocol could not be told.
    pub unknown_protocol: Option<usize>,
    /// Calls came but no event said which tools were declared.
    pub undeclared_unknown: bool,
    /// Turns that asked the model for a summary of the history (a `compaction` event
    /// with `strategy: summarize`): the runner runs none of their calls.
    pub summary_turns: BTreeSet<u32>,
    /// Usage figures the runner did not take as the provider sent them: (line, turn,
    /// what each was and what was used).
    pub usage_clamped: Vec<(usize, u32, String)>,
}

struct Pending {
    turn: u32,
    line: usize,
    calls: Vec<Call>,
    declared: Option<Declared>,
    rejected: Option<String>,
}

/// Turns count from 1; 0 is what a line that does not say reads as.
fn turn_of(turn: u32) -> Option<u32> {
    (turn > 0).then_some(turn)
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn declared_of(tools: Vec<String>) -> Declared {
    Declared {
        names: tools.into_iter().collect(),
    }
}

fn names(list: &Value) -> Option<Declared> {
    let items = list.as_array()?;
    let names = items
        .iter()
        .filter_map(|t| {
            t.as_str()
                .or_else(|| str_of(t, "name"))
                .or_else(|| t.get("function").and_then(|f| str_of(f, "name")))
        })
        .map(str::to_string)
        .collect();
    Some(Declared { names })
}

fn protocol_of_params(params: &RequestParams) -> Option<Protocol> {
    if let Some(p) = params.protocol {
        return Some(p);
    }
    let url = params.url.as_str();
    if url.is_empty() {
        return None;
    }
    let path = url.split('?').next().unwrap_or(url);
    Protocol::ALL
        .into_iter()
        .find(|p| path.ends_with(p.facts().logged_path_suffix))
}

/// The tool calls of a response body.
fn calls_of(protocol: Protocol, body: &Value, turn: u32) -> Vec<Call> {
    wire(protocol).logged_calls(body, turn)
}

/// The tool results a followup carries, with where each sits.
pub(super) fn results_of(protocol: Protocol, messages: &[(usize, Value)]) -> Vec<Returned> {
    wire(protocol).logged_results(messages)
}

fn decision_of(line: usize, id: &str, outcome: &ToolOutcome) -> Decision {
    let (decision, is_error, interrupted) = match outcome {
        ToolOutcome::Interrupted { .. } => (None, false, true),
        ToolOutcome::Ran {
            decision, is_error, ..
        } => (non_empty(decision), *is_error, false),
    };
    Decision {
        id: non_empty(id),
        line,
        decision,
        is_error,
        interrupted,
    }
}

impl Walked {
    fn settle(&mut self, pending: &mut Option<Pending>) {
        let Some(p) = pending.take() else { return };
        match p.rejected {
            Some(why) => self.rejected.push(Rejected {
                turn: p.turn,
                line: p.line,
                calls: p.calls,
                declared: p.declared,
                why,
            }),
            None => self.segments.push(Segment {
                turn: p.turn,
                line: p.line,
                calls: p.calls,
                declared: p.declared,
                started: Vec::new(),
                decisions: Vec::new(),
                next: None,
            }),
        }
    }
}

/// Reads the events into turns.
impl Walked {
    /// The messages the requests after the last response sent (or before any).
    fn followup(&mut self, turn: u32, line: usize) -> &mut Followup {
        let target = match self.segments.last_mut() {
            Some(seg) => &mut seg.next,
            None => &mut self.before_first,
        };
        target.get_or_insert_with(|| Followup {
            turn,
            line,
            messages: Vec::new(),
        })
    }

    /// The tool calls of a response body, in the protocol the transcript is in (read
    /// from the first body when no request said).
    fn calls_of(&mut self, body: &Value, turn: u32, line: usize) -> Vec<Call> {
        if self.protocol.is_none() && body.is_object() {
            self.protocol = answer_protocol(body);
        }
        match self.protocol {
            Some(p) => calls_of(p, body, turn),
            None => {
                if body.is_object() {
                    self.unknown_protocol.get_or_insert(line);
                }
                Vec::new()
            }
        }
    }
}

pub(super) fn walk(events: &[(usize, Value)]) -> Walked {
    let mut w = Walked::default();
    let mut declared: Option<Declared> = None;
    let mut at_request: Option<Declared> = None;
    let mut turns = BTreeSet::new();
    let mut last_turn = 0u32;
    let mut pending: Option<Pending> = None;
    for (line, v) in events {
        let line = *line;
        let Some(ev) = TranscriptEvent::from_value(v) else {
            continue;
        };
        match ev {
            TranscriptEvent::TaskStart { tools, .. } if declared.is_none() => {
                declared = Some(declared_of(tools));
            }
            TranscriptEvent::McpReady { tools, .. } | TranscriptEvent::ToolsChanged { tools } => {
                declared = Some(declared_of(tools));
            }
            TranscriptEvent::Compaction { turn, strategy, .. } if strategy == "summarize" => {
                w.summary_turns.insert(turn);
            }
            TranscriptEvent::Request {
                turn,
                new_messages,
                params,
                ..
            } => {
                w.settle(&mut pending);
                let turn = turn_of(turn).unwrap_or(last_turn + 1);
                last_turn = turn;
                turns.insert(turn);
                if let Some(params) = params {
                    if w.protocol.is_none() {
                        w.protocol = protocol_of_params(&params);
                    }
                    if let Some(d) = names(&params.tools) {
                        declared = Some(d);
                    }
                }
                at_request = declared.clone();
                let f = w.followup(turn, line);
                if let Value::Array(messages) = new_messages {
                    f.messages.extend(messages.into_iter().map(|m| (line, m)));
                }
            }
            TranscriptEvent::Response { turn, body, .. } => {
                w.settle(&mut pending);
                let turn = turn_of(turn).unwrap_or(last_turn);
                let calls = w.calls_of(&body.unwrap_or(Value::Null), turn, line);
                if !calls.is_empty() && at_request.is_none() {
                    w.undeclared_unknown = true;
                }
                pending = Some(Pending {
                    turn,
                    line,
                    calls,
                    declared: at_request.clone(),
                    rejected: None,
                });
            }
            TranscriptEvent::AttemptFailed { turn, error, .. } => {
                if let Some(p) = pending.as_mut() {
                    if turn_of(turn).is_none_or(|t| t == p.turn) {
                        p.rejected = Some(
                            non_empty(&error).unwrap_or_else(|| "the attempt failed".to_string()),
                        );
                    }
                }
                w.settle(&mut pending);
            }
            TranscriptEvent::ToolCall { id, .. } => {
                w.settle(&mut pending);
                if let (Some(seg), Some(id)) = (w.segments.last_mut(), non_empty(&id)) {
                    seg.started.push((id, line));
                }
            }
            TranscriptEvent::ToolResult { id, outcome, .. } => {
                w.settle(&mut pending);
                let decision = decision_of(line, &id, &outcome);
                match w.segments.last_mut() {
                    Some(seg) => seg.decisions.push(decision),
                    None => w.loose_decisions.push(decision),
                }
            }
            TranscriptEvent::UsageClamped { turn, clamps, .. } => {
                let said: Vec<String> = clamps
                    .iter()
                    .map(|c| format!("{} {} read as {} ({})", c.field, c.reported, c.used, c.why))
                    .collect();
                w.usage_clamped.push((line, turn, said.join("; ")));
            }
            TranscriptEvent::Stop { .. } | TranscriptEvent::TaskEnd { .. } => {
                w.settle(&mut pending);
                w.finished = true;
            }
            _ => {}
        }
    }
    w.settle(&mut pending);
    w.turns = turns.len() as u32;
    w
}
