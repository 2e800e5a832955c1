//! A transcript as the page shows it: sections of events, one before the first turn,
//! one per turn, one from the stop on, each with the tools declared when it began.
//! Lines are read as `TranscriptEvent`s; a line that is not one (an event this version
//! does not know, a line cut off by a kill) is counted and said, never fatal: the page
//! of a killed run must still show what its transcripts hold.

use std::io::BufRead;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use super::notes::{event_note, note, usd, Item};
use super::{answer, clip, clipped, script_safe_into};
use crate::vocab::transcript::{ToolOutcome, TranscriptEvent};

/// A transcript's view being built, event by event: the sections closed so far are
/// already script-safe JSON text, and so is each item of the open one, so a view holds
/// about the bytes it will be and no tree of values.
pub(super) struct Sections {
    /// The closed sections, comma-separated.
    done: Vec<u8>,
    turn: Option<u32>,
    ended: bool,
    /// The tool list in force now.
    declared: Vec<String>,
    /// The tool list the open section shows: the one in force when it began.
    shown: Vec<String>,
    /// The open section's items, comma-separated.
    items: Vec<u8>,
    /// The open section has a response or a tool call.
    answered: bool,
    /// Events read (the transcript's lines).
    pub(super) lines: usize,
}

impl Sections {
    pub(super) fn new() -> Sections {
        Sections {
            done: Vec::new(),
            turn: None,
            ended: false,
            declared: Vec::new(),
            shown: Vec::new(),
            items: Vec::new(),
            answered: false,
            lines: 0,
        }
    }

    fn close(&mut self) {
        if self.items.is_empty() {
            return;
        }
        if !self.done.is_empty() {
            self.done.push(b',');
        }
        let head =
            json!({ "turn": self.turn.unwrap_or(0), "end": self.ended, "declared": self.shown });
        let head = head.to_string();
        // The head without its closing brace, then the items.
        script_safe_into(&mut self.done, &head.as_bytes()[..head.len() - 1]);
        self.done.extend_from_slice(b",\"items\":[");
        self.done.append(&mut self.items);
        self.done.extend_from_slice(b"]}");
        self.answered = false;
    }

    /// Moves to `turn` (0 for events that do not say), and to the last section at the
    /// stop.
    fn at(&mut self, turn: u32, stop: bool) {
        if stop && !self.ended {
            self.close();
            self.ended = true;
            self.shown = self.declared.clone();
        } else if !self.ended && turn > 0 && Some(turn) != self.turn {
            self.close();
            self.turn = Some(turn);
            self.shown = self.declared.clone();
        }
    }

    /// Adds an item to the open section, `ms` after the task started when it says.
    fn push(&mut self, item: Item, ms: Option<u64>) {
        if !self.items.is_empty() {
            self.items.push(b',');
        }
        let text = match item {
            Item::Note { name, cls, text } => serde_json::to_vec(&NoteOut {
                k: "ev",
                name: &name,
                cls,
                text: &clipped(&text),
                ms,
            }),
            Item::Value(mut v) => {
                if matches!(v["k"].as_str(), Some("response" | "call")) {
                    self.answered = true;
                }
                if let Some(ms) = ms {
                    v["ms"] = json!(ms);
                }
                serde_json::to_vec(&v)
            }
        };
        script_safe_into(&mut self.items, &text.unwrap_or_default());
    }

    /// A new tool list: a section that has no call yet shows it as its own.
    fn declare(&mut self, tools: Vec<String>) {
        if !self.answered {
            self.shown = tools.clone();
        }
        self.declared = tools;
    }

    /// The whole view as script-safe JSON: `file` is the transcript's run-relative
    /// path, `skipped` the lines that were not events, `cut` whether the last was cut
    /// off.
    pub(super) fn finish(mut self, file: &str, skipped: usize, cut: bool) -> Vec<u8> {
        self.close();
        let head = json!({ "file": file, "lines": self.lines, "skipped": skipped, "cut": cut });
        let head = head.to_string();
        let mut out = Vec::with_capacity(head.len() + self.done.len() + 16);
        script_safe_into(&mut out, &head.as_bytes()[..head.len() - 1]);
        out.extend_from_slice(b",\"sections\":[");
        out.append(&mut self.done);
        out.extend_from_slice(b"]}");
        out
    }

    /// One event into its section, `ms` after the task started.
    pub(super) fn add(&mut self, event: TranscriptEvent, ms: u64) {
        self.lines += 1;
        add(self, event, ms);
    }
}

/// The tool names of a request's declarations, as the provider received them.
fn declared_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.as_str()
                .or_else(|| t["name"].as_str())
                .or_else(|| t.pointer("/function/name").and_then(Value::as_str))
        })
        .map(str::to_string)
        .collect()
}

/// A note as the page reads it, serialized without a tree of values.
#[derive(Serialize)]
struct NoteOut<'a> {
    k: &'static str,
    name: &'a str,
    cls: &'a str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ms: Option<u64>,
}

/// A view that says why there is none.
pub(super) fn unreadable(file: &str, why: &str) -> Vec<u8> {
    let v = json!({ "file": file, "error": why, "sections": [] });
    let mut out = Vec::new();
    script_safe_into(&mut out, v.to_string().as_bytes());
    out
}

/// Reads the transcript at `path` into the page's view of it (script-safe JSON).
pub(super) fn view(path: &Path, rel: &str) -> Vec<u8> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return unreadable(rel, &format!("cannot read {rel}: {e}")),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut s = Sections::new();
    let (mut skipped, mut cut) = (0usize, false);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                s.push(
                    note("unreadable", "error", format!("reading stopped: {e}")),
                    None,
                );
                break;
            }
        }
        let finished = buf.ends_with(b"\n");
        // Bytes that are not UTF-8 (a line cut inside a character by a kill) fail
        // like any other line that is not JSON: that line alone is lost.
        let parsed = std::str::from_utf8(&buf)
            .ok()
            .map(|l| l.trim_end_matches(['\n', '\r']));
        if parsed.is_some_and(|l| l.trim().is_empty()) {
            s.lines += 1;
            continue;
        }
        let Some(Ok(raw)) = parsed.map(serde_json::from_str::<Value>) else {
            s.lines += 1;
            if finished {
                skipped += 1;
            } else {
                cut = true;
            }
            continue;
        };
        let ms = raw["t_ms"].as_u64().unwrap_or_default();
        match TranscriptEvent::from_value(&raw) {
            Some(event) => s.add(event, ms),
            None => {
                s.lines += 1;
                skipped += 1;
                let name = raw["event"].as_str().unwrap_or("(no event)").to_string();
                s.push(
                    note(
                        name,
                        "unknown",
                        "an event this version does not know".into(),
                    ),
                    None,
                );
            }
        }
    }
    s.finish(rel, skipped, cut)
}

/// One event into its section.
fn add(s: &mut Sections, event: TranscriptEvent, ms: u64) {
    use TranscriptEvent as E;
    let item = match event {
        E::TaskStart { .. } | E::McpReady { .. } | E::ToolsChanged { .. } => setup_item(s, event),
        E::Request { .. } | E::Response { .. } | E::ToolCall { .. } | E::ToolResult { .. } => {
            turn_item(s, event)
        }
        E::Stop { .. } | E::TaskEnd { .. } => end_item(s, event),
        other => other_item(s, other),
    };
    s.push(item, Some(ms));
}

/// An event that says what the task has (its start, its MCP servers, its tool list).
fn setup_item(s: &mut Sections, event: TranscriptEvent) -> Item {
    use TranscriptEvent as E;
    match event {
        E::TaskStart {
            task,
            provider,
            model,
            max_tokens,
            tools,
            toolset,
            policy,
            limits,
            ..
        } => {
            s.declare(tools.clone());
            Item::Value(
                json!({ "k": "start", "task": clip(&task), "provider": provider, "model": model,
                    "max_tokens": max_tokens, "tools": tools, "toolset": toolset,
                    "policy": policy, "limits": clip(&limits.to_string()) }),
            )
        }
        E::McpReady { servers, tools } => {
            s.declare(tools);
            let names: Vec<String> = servers.into_iter().map(|x| x.name).collect();
            note(
                "mcp_ready",
                "setup",
                format!("MCP servers: {}", names.join(", ")),
            )
        }
        E::ToolsChanged { tools } => {
            s.declare(tools.clone());
            note(
                "tools_changed",
                "setup",
                format!("tools now: {}", tools.join(", ")),
            )
        }
        other => other_item(s, other),
    }
}

/// An event of a turn: the request, its answer, a tool call and its result.
fn turn_item(s: &mut Sections, event: TranscriptEvent) -> Item {
    use TranscriptEvent as E;
    match event {
        E::Request {
            turn,
            attempt,
            bytes,
            message_count,
            new_messages,
            params,
            ..
        } => {
            s.at(turn, false);
            if let Some(p) = &params {
                let names = declared_names(&p.tools);
                if !names.is_empty() || p.tools.is_array() {
                    s.declare(names);
                }
            }
            Item::Value(
                json!({ "k": "request", "turn": turn, "attempt": attempt, "bytes": bytes,
                    "count": message_count, "messages": answer::messages(&new_messages) }),
            )
        }
        E::Response {
            turn,
            ms: took,
            body,
            raw_body,
            replayed,
            ..
        } => {
            s.at(turn, false);
            // A body of JSON null reads back from the file as no body: shown alike.
            let mut a = body
                .as_ref()
                .filter(|b| !b.is_null())
                .map(answer::answer)
                .unwrap_or_else(|| json!({}));
            a["k"] = json!("response");
            a["took"] = json!(took);
            a["replayed"] = json!(replayed);
            if let Some(raw) = raw_body {
                a["raw"] = json!(clip(&raw));
            }
            Item::Value(a)
        }
        E::ToolCall {
            turn,
            id,
            name,
            input,
        } => {
            s.at(turn, false);
            let args = serde_json::to_string_pretty(&input).unwrap_or_default();
            Item::Value(
                json!({ "k": "call", "id": clip(&id), "name": clip(&name), "input": clip(&args) }),
            )
        }
        E::ToolResult {
            turn,
            id,
            name,
            outcome,
        } => {
            s.at(turn, false);
            match outcome {
                ToolOutcome::Interrupted { interrupted } => {
                    Item::Value(json!({ "k": "result", "id": clip(&id),
                    "name": clip(&name), "decision": "interrupted", "rule": "", "error": true,
                    "content": clip(&interrupted) }))
                }
                ToolOutcome::Ran {
                    decision,
                    rule,
                    is_error,
                    content,
                    ms: took,
                    ..
                } => Item::Value(
                    json!({ "k": "result", "id": clip(&id), "name": clip(&name), "decision": decision,
                    "rule": rule, "error": is_error, "content": clip(&content), "took": took }),
                ),
            }
        }
        other => other_item(s, other),
    }
}

/// The task's stop and its end.
fn end_item(s: &mut Sections, event: TranscriptEvent) -> Item {
    use TranscriptEvent as E;
    match event {
        E::Stop {
            stop_reason,
            detail,
        } => {
            s.at(0, true);
            let reason = stop_reason.map_or("(unknown)", |r| r.as_str());
            Item::Value(json!({ "k": "stop", "reason": reason, "detail": clip(&detail) }))
        }
        E::TaskEnd {
            outcome,
            turns,
            usage,
            cost_usd,
            ..
        } => {
            s.at(0, true);
            let outcome = outcome.map_or("(unknown)", |o| o.as_str());
            note(
                "task_end",
                "end",
                format!(
                    "outcome {outcome}; {turns} turn(s); tokens in {} out {}; cost {}",
                    usage.input_tokens,
                    usage.output_tokens,
                    usd(&cost_usd)
                ),
            )
        }
        other => other_item(s, other),
    }
}

/// Any other event: a note, in the section of the turn it names.
fn other_item(s: &mut Sections, event: TranscriptEvent) -> Item {
    let (turn, item) = event_note(event);
    s.at(turn, false);
    item
}
