//! A transcript's events as ATIF steps. The first request's system prompt is a system
//! step; each text a request sends (the prompt, a note the runner added) a user (or
//! system) step; each answer the runner accepted an agent step with its text, its
//! reasoning, its tool calls as the runner read them and, as its observation, the
//! runner's result of each call under the call's id; its `settle` gives the step's
//! metrics. An answer followed by a failed attempt of its turn was refused (the request
//! was sent again) and is not a step. Calls the task never ran (it stopped first, or was
//! killed) have no result: the trajectory says nothing it did not record.

use serde_json::{json, Map, Value};

use super::atif_format::{Metrics, Observation, ObservationResult, Source, Step, ToolCall};
use crate::model::protocol::answer_protocol;
use crate::model::{wire, Protocol};
use crate::vocab::transcript::{RequestParams, Stamped, ToolOutcome, TranscriptEvent as E, Usd};
use crate::vocab::usage::Usage;

/// The steps of one transcript, and what the walk found along the way.
#[derive(Debug, Default)]
pub(super) struct Walked {
    pub steps: Vec<Step>,
    /// The model `task_start` names.
    pub model: Option<String>,
    /// Requests sent.
    pub requests: usize,
    /// Why the loop ended, as the `stop` event says (its detail too).
    pub stop: Option<(String, String)>,
    /// Tool calls of accepted answers that have no result.
    pub unanswered: usize,
    /// Answers the wire could not read (each: turn and why).
    pub unreadable: Vec<String>,
    /// Results whose call id no answer made.
    pub stray_results: Vec<String>,
    /// The task's own totals (`task_end`), when it wrote them.
    pub task_end: Option<(Usage, Option<Usd>)>,
}

/// An answer waiting to be accepted (its turn's next event decides).
struct Pending {
    turn: u32,
    step: Step,
}

#[derive(Default)]
struct Walk {
    out: Walked,
    protocol: Option<Protocol>,
    pending: Option<Pending>,
    /// The turn of each agent step, by index in `out.steps`.
    turns: Vec<(usize, u32)>,
}

/// Walks the events of one transcript, in order.
pub(super) fn walk(events: &[Stamped]) -> Walked {
    let mut w = Walk::default();
    for s in events {
        let ts = s.ts.as_str();
        match &s.event {
            E::TaskStart { model, .. } if w.out.model.is_none() && !model.is_empty() => {
                w.out.model = Some(model.clone());
            }
            E::Request {
                new_messages,
                params,
                ..
            } => {
                w.accept();
                w.request(ts, new_messages, params.as_ref());
            }
            E::Response {
                turn,
                body: Some(body),
                ..
            } => {
                w.accept();
                w.response(ts, *turn, body);
            }
            // The answer of this turn was refused: the request goes out again.
            E::AttemptFailed { turn, .. }
                if w.pending.as_ref().is_some_and(|p| p.turn == *turn) =>
            {
                w.pending = None;
            }
            E::Settle {
                turn,
                usage,
                usage_estimated,
                cost_usd,
                ..
            } => w.settle(*turn, metrics(usage, *usage_estimated, *cost_usd)),
            E::ToolCall { .. } => w.accept(),
            E::ToolResult {
                id, name, outcome, ..
            } => {
                w.accept();
                w.result(id, name, outcome);
            }
            E::Stop {
                stop_reason,
                detail,
            } => {
                w.accept();
                let reason = stop_reason.map_or("unknown", |r| r.as_str());
                w.out.stop = Some((reason.to_string(), detail.clone()));
            }
            E::TaskEnd {
                usage, cost_usd, ..
            } => {
                w.accept();
                w.out.task_end = Some((*usage, *cost_usd));
            }
            _ => {}
        }
    }
    // A transcript that ends on an answer (a kill right after it) keeps it.
    w.accept();
    w.out.unanswered = w
        .out
        .steps
        .iter()
        .map(|s| {
            let answered = |id: &str| {
                s.observation
                    .as_ref()
                    .is_some_and(|o| o.results.iter().any(|r| r.source_call_id == id))
            };
            s.tool_calls
                .iter()
                .filter(|c| !answered(&c.tool_call_id))
                .count()
        })
        .sum();
    w.out
}

impl Walk {
    /// The pending answer was accepted: it becomes a step.
    fn accept(&mut self) {
        if let Some(p) = self.pending.take() {
            self.turns.push((self.out.steps.len(), p.turn));
            self.out.steps.push(p.step);
        }
    }

    fn request(&mut self, ts: &str, new_messages: &Value, params: Option<&RequestParams>) {
        self.out.requests += 1;
        if let Some(params) = params {
            if self.protocol.is_none() {
                self.protocol = protocol_of(params);
            }
            if self.out.requests == 1 {
                if let Some(system) = params.system.as_ref().filter(|s| !s.is_empty()) {
                    self.out
                        .steps
                        .push(Step::message(Source::System, ts, system.clone()));
                }
            }
        }
        let Some(p) = self.protocol else { return };
        for entry in new_messages.as_array().into_iter().flatten() {
            let Some(t) = wire(p).logged_text(entry) else {
                continue;
            };
            let source = match t.role.as_str() {
                "system" | "developer" => Source::System,
                // The model's own entries are its answers' steps.
                "assistant" => continue,
                _ => Source::User,
            };
            self.out.steps.push(Step::message(source, ts, t.text));
        }
    }

    fn response(&mut self, ts: &str, turn: u32, body: &Value) {
        if self.protocol.is_none() {
            self.protocol = answer_protocol(body);
        }
        let Some(p) = self.protocol else {
            self.out
                .unreadable
                .push(format!("turn {turn}: no protocol reads its answer"));
            return;
        };
        let parsed = match wire(p).parse(body, turn) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.out.unreadable.push(format!("turn {turn}: {e}"));
                return;
            }
        };
        let mut step = Step::message(Source::Agent, ts, parsed.text);
        step.reasoning_content = wire(p).logged_reasoning(body);
        step.tool_calls = parsed
            .calls
            .into_iter()
            .map(|c| {
                let mut extra = Map::new();
                let arguments = match c.input {
                    Value::Object(_) if c.input_error.is_none() => c.input,
                    other => {
                        // ATIF takes an object: what the model sent is kept beside it.
                        extra.insert("arguments_as_sent".into(), other);
                        if let Some(e) = c.input_error {
                            extra.insert("arguments_error".into(), e.into());
                        }
                        json!({})
                    }
                };
                ToolCall {
                    tool_call_id: c.id,
                    function_name: c.name,
                    arguments,
                    extra,
                }
            })
            .collect();
        self.pending = Some(Pending { turn, step });
    }

    /// An answer's usage and cost: the pending answer's, else the last accepted step of
    /// that turn's.
    fn settle(&mut self, turn: u32, m: Metrics) {
        if let Some(p) = self.pending.as_mut().filter(|p| p.turn == turn) {
            p.step.metrics = Some(m);
        } else if let Some(&(i, _)) = self.turns.iter().rev().find(|(_, t)| *t == turn) {
            if self.out.steps[i].metrics.is_none() {
                self.out.steps[i].metrics = Some(m);
            }
        }
    }

    /// The runner's result of call `id`, on the step whose answer made the call.
    fn result(&mut self, id: &str, name: &str, outcome: &ToolOutcome) {
        let step = self.turns.iter().rev().map(|(i, _)| *i).find(|i| {
            self.out.steps[*i]
                .tool_calls
                .iter()
                .any(|c| c.tool_call_id == id)
        });
        let Some(i) = step else {
            self.out.stray_results.push(format!("{name} {id}"));
            return;
        };
        let mut extra = Map::new();
        let content = match outcome {
            ToolOutcome::Interrupted { interrupted } => {
                extra.insert("interrupted".into(), interrupted.clone().into());
                None
            }
            ToolOutcome::Ran {
                decision,
                rule,
                is_error,
                content,
                structured_content,
                images,
                ..
            } => {
                if *is_error {
                    extra.insert("is_error".into(), true.into());
                }
                if decision != "allow" && !decision.is_empty() {
                    extra.insert("decision".into(), decision.clone().into());
                    extra.insert("rule".into(), rule.clone().into());
                }
                if let Some(s) = structured_content {
                    extra.insert("structured_content".into(), s.clone());
                }
                if let Some(images) = images.as_ref().filter(|i| !i.is_empty()) {
                    extra.insert("images".into(), json!(images));
                }
                Some(content.clone())
            }
        };
        let observation = self.out.steps[i]
            .observation
            .get_or_insert_with(|| Observation {
                results: Vec::new(),
            });
        observation.results.push(ObservationResult {
            source_call_id: id.to_string(),
            content,
            extra,
        });
    }
}

/// The protocol of a transcript, from its first request: as it says, or from its URL
/// (transcripts from before the protocol was written).
fn protocol_of(params: &RequestParams) -> Option<Protocol> {
    if params.protocol.is_some() {
        return params.protocol;
    }
    let path = params.url.split('?').next().unwrap_or_default();
    if path.is_empty() {
        return None;
    }
    Protocol::ALL
        .into_iter()
        .find(|p| path.ends_with(p.facts().logged_path_suffix))
}

/// A step's metrics from its `settle`.
fn metrics(usage: &Usage, estimated: bool, cost: Option<Usd>) -> Metrics {
    let mut extra = Map::new();
    if usage.cache_write_tokens > 0 {
        extra.insert("cache_write_tokens".into(), usage.cache_write_tokens.into());
    }
    if usage.reasoning_tokens > 0 {
        extra.insert("reasoning_tokens".into(), usage.reasoning_tokens.into());
    }
    if estimated {
        // The answer carried no usage: the figures are the runner's upper bound.
        extra.insert("usage_estimated".into(), true.into());
    }
    Metrics {
        prompt_tokens: usage.prompt_tokens(),
        completion_tokens: usage.output_tokens,
        cached_tokens: usage.cache_read_tokens,
        cost_usd: cost.and_then(|c| dollars(c.0)),
        extra,
    }
}

/// Dollars as the float ATIF takes.
pub(super) fn dollars(d: rust_decimal::Decimal) -> Option<f64> {
    use rust_decimal::prelude::ToPrimitive;
    d.to_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[Value]) -> Vec<Stamped> {
        lines
            .iter()
            .map(|l| Stamped::read(&l.to_string()).expect("an event"))
            .collect()
    }

    fn chat_answer(id: &str, arguments: &str) -> Value {
        json!({"id": "c", "object": "chat.completion", "model": "m", "choices": [{"index": 0,
            "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "let me see",
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "t", "arguments": arguments}}]}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}})
    }

    #[test]
    fn a_refused_answer_is_no_step_and_the_retry_answer_keeps_its_calls_and_results() {
        let usage = json!({"input_tokens": 4, "output_tokens": 2, "cache_read_tokens": 6, "cache_write_tokens": 1, "cache_write_1h_tokens": 0, "reasoning_tokens": 0});
        let w = walk(&events(&[
            json!({"ts": "2026-01-01T00:00:00.000Z", "event": "task_start", "model": "m"}),
            json!({"ts": "2026-01-01T00:00:00.001Z", "event": "request", "turn": 1, "attempt": 1,
                "new_messages": [{"role": "user", "content": "fix it"}],
                "params": {"protocol": "openai-chat", "system": "be brief", "url": "u"}}),
            json!({"ts": "2026-01-01T00:00:00.002Z", "event": "response", "turn": 1, "body": chat_answer("refused", "{}")}),
            json!({"ts": "2026-01-01T00:00:00.003Z", "event": "attempt_failed", "turn": 1, "attempt": 1, "error": "malformed"}),
            json!({"ts": "2026-01-01T00:00:00.004Z", "event": "request", "turn": 1, "attempt": 2, "new_messages": []}),
            json!({"ts": "2026-01-01T00:00:00.005Z", "event": "response", "turn": 1, "body": chat_answer("c1", "{\"x\": ")}),
            json!({"ts": "2026-01-01T00:00:00.006Z", "event": "settle", "turn": 1, "usage": usage, "cost_usd": "0.25", "spent_usd": "0.25"}),
            json!({"ts": "2026-01-01T00:00:00.007Z", "event": "tool_result", "turn": 1, "id": "c1", "name": "t",
                "decision": "invalid", "rule": "", "is_error": true, "content": "bad arguments", "ms": 0}),
            json!({"ts": "2026-01-01T00:00:00.008Z", "event": "tool_result", "turn": 1, "id": "elsewhere", "name": "t",
                "decision": "allow", "rule": "", "is_error": false, "content": "x", "ms": 0}),
            json!({"ts": "2026-01-01T00:00:00.009Z", "event": "stop", "stop_reason": "max_turns", "detail": "1"}),
        ]));
        let sources: Vec<Source> = w.steps.iter().map(|s| s.source).collect();
        assert_eq!(sources, [Source::System, Source::User, Source::Agent]);
        assert_eq!((w.requests, w.model.as_deref()), (2, Some("m")));
        let agent = &w.steps[2];
        assert_eq!(agent.timestamp.as_deref(), Some("2026-01-01T00:00:00.005Z"));
        assert_eq!(agent.message, "let me see");
        assert_eq!(
            agent.tool_calls.len(),
            1,
            "the refused answer's call is gone"
        );
        let call = &agent.tool_calls[0];
        assert_eq!(
            (call.tool_call_id.as_str(), &call.arguments),
            ("c1", &json!({}))
        );
        assert_eq!(call.extra["arguments_as_sent"], "{\"x\": ");
        assert!(call.extra["arguments_error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"));
        let results = &agent.observation.as_ref().unwrap().results;
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].content.as_deref(), Some("bad arguments"));
        assert_eq!(results[0].extra["decision"], "invalid");
        assert_eq!(results[0].extra["is_error"], true);
        assert_eq!(w.stray_results, ["t elsewhere"]);
        let m = agent.metrics.as_ref().unwrap();
        assert_eq!(
            (m.prompt_tokens, m.cached_tokens, m.completion_tokens),
            (11, 6, 2)
        );
        assert_eq!(
            (m.cost_usd, &m.extra["cache_write_tokens"]),
            (Some(0.25), &json!(1))
        );
        assert_eq!(w.unanswered, 0);
        assert_eq!(w.stop, Some(("max_turns".into(), "1".into())));
    }

    #[test]
    fn a_transcript_cut_after_an_answer_keeps_it_with_its_calls_unanswered() {
        let w = walk(&events(&[
            json!({"ts": "t", "event": "request", "turn": 1, "attempt": 1,
                "new_messages": [{"role": "user", "content": [{"type": "text", "text": "go"}]}],
                "params": {"url": "http://h/v1/messages"}}),
            json!({"ts": "t", "event": "response", "turn": 1, "body": {"type": "message", "role": "assistant",
                "content": [{"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "sleep 9"}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1}}}),
            json!({"ts": "t", "event": "tool_call", "turn": 1, "id": "a", "name": "bash", "input": {}}),
        ]));
        assert_eq!(w.steps.len(), 2, "the protocol told from the URL: {w:?}");
        assert_eq!(w.steps[1].tool_calls[0].arguments["command"], "sleep 9");
        assert!(w.steps[1].observation.is_none() && w.steps[1].metrics.is_none());
        assert_eq!((w.unanswered, w.stop.is_none()), (1, true));
    }
}
