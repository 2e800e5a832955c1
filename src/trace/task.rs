//! One task's trace, built from its transcript events as they are emitted: the
//! `invoke_agent` span from `task_start` to the task's row, a `chat` span per request
//! attempt (from `request` to its answer or failure), an `execute_tool` span per call
//! (from `tool_call` to `tool_result`). Waits, pauses and compactions are events of the
//! task's span.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, Span};

use super::attrs;
use super::export::Counters;
use super::task_events::ms;
use crate::job::TaskSpec;
use crate::vocab::log::EventSink;
use crate::vocab::log::TaskResult;
use crate::vocab::protocol::Protocol;
use crate::vocab::stop::Outcome;
use crate::vocab::transcript::{ToolOutcome, TranscriptEvent, Usd};

/// What every task of the run shares.
pub(super) struct RunInfo {
    /// The job's name: the agent's name in the conventions.
    pub job: String,
    pub run_id: String,
    /// Record contents (`--otlp-content`).
    pub content: bool,
    /// The longest content attribute, in characters.
    pub value_limit: usize,
}

/// A task's trace; the run attaches it to the task's log.
pub(super) struct TaskTrace {
    tracer: SdkTracer,
    run: Arc<RunInfo>,
    counts: Arc<Counters>,
    protocol: Protocol,
    model: String,
    /// The task's key: its conversation's id.
    conversation: String,
    /// On every span of the task.
    common: Vec<KeyValue>,
    /// On the task's span only, from the start.
    task_attrs: Vec<KeyValue>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Holds the task's span once it started.
    root: Option<Context>,
    chat: Option<Chat>,
    /// Tool calls started and not yet ended, by call id.
    tools: Vec<(String, Span)>,
    /// The request URL's host and port, from the first request.
    server: Vec<KeyValue>,
    /// The requests ask for a streamed answer (the first request's parameters say).
    stream: bool,
    /// The tools declared to the model, from the first request: a call the runner
    /// refused as undeclared is an invalid call, not one the policy denied.
    declared: Option<Vec<String>>,
    /// A request sent, its span not started yet: whether it goes out (CLIENT) or its
    /// answer is replayed from a killed attempt (INTERNAL) is known at the next event.
    pending: Option<(SpanBuilder, Context)>,
    /// When the attempt's reservation was made: the wait from there to the send is the
    /// rate gates'.
    reserved_at: Option<SystemTime>,
    /// Waited for team or run budget since the last request.
    budget_wait_ms: u64,
}

/// A model request in flight or answered, until the events of its attempt are over.
struct Chat {
    span: Span,
    answered_at: Option<SystemTime>,
}

impl TaskTrace {
    pub fn new(
        tracer: SdkTracer,
        run: Arc<RunInfo>,
        counts: Arc<Counters>,
        spec: &TaskSpec,
    ) -> TaskTrace {
        let protocol = spec.provider.protocol;
        let common = vec![
            KeyValue::new("gen_ai.provider.name", attrs::provider_name(protocol)),
            KeyValue::new("gen_ai.request.model", spec.model.clone()),
            KeyValue::new("gen_ai.conversation.id", spec.id.clone()),
        ];
        let mut task_attrs = vec![
            KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            KeyValue::new("gen_ai.agent.name", run.job.clone()),
            KeyValue::new("gen_ai.request.max_tokens", i64::from(spec.max_tokens)),
            KeyValue::new("agentbatch.run_id", run.run_id.clone()),
            KeyValue::new("agentbatch.task_id", spec.task.clone()),
            KeyValue::new("agentbatch.task_key", spec.id.clone()),
            KeyValue::new("agentbatch.variant", spec.variant.clone()),
            KeyValue::new("agentbatch.epoch", i64::from(spec.epoch)),
            KeyValue::new("agentbatch.provider", spec.provider.name.clone()),
            KeyValue::new("agentbatch.protocol", protocol.as_str()),
        ];
        if let Some(team) = spec.team_name() {
            task_attrs.push(KeyValue::new("agentbatch.team", team.to_string()));
        }
        TaskTrace {
            tracer,
            run,
            counts,
            protocol,
            model: spec.model.clone(),
            conversation: spec.id.clone(),
            common,
            task_attrs,
            state: Mutex::new(State::default()),
        }
    }

    /// Starts a span under `parent`, counted when it is sampled (only those are
    /// exported, so only those can be dropped).
    fn start(&self, builder: SpanBuilder, parent: &Context) -> Span {
        let span = builder.start_with_context(&self.tracer, parent);
        if span.span_context().is_sampled() {
            self.counts
                .spans
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        span
    }

    /// The task's span, started at `at` if it has not started yet.
    fn root<'s>(&self, state: &'s mut State, at: SystemTime) -> &'s Context {
        if state.root.is_none() {
            let mut attrs = self.common.clone();
            attrs.extend(self.task_attrs.iter().cloned());
            let span = self.start(
                self.tracer
                    .span_builder(format!("invoke_agent {}", self.run.job))
                    .with_kind(SpanKind::Internal)
                    .with_start_time(at)
                    .with_attributes(attrs),
                &Context::new(),
            );
            state.root = Some(Context::new().with_span(span));
        }
        state.root.get_or_insert_with(Context::new)
    }

    /// Ends the request in flight: an answered one when its answer came, one that got
    /// none (refused as too long, then compacted) as failed.
    fn close_chat(state: &mut State, at: SystemTime) {
        let Some(mut chat) = state.chat.take() else {
            return;
        };
        match chat.answered_at {
            Some(t) => chat.span.end_with_timestamp(t),
            None => {
                chat.span
                    .set_attribute(KeyValue::new("error.type", "_OTHER"));
                chat.span
                    .set_status(Status::error("no answer (see the task's transcript)"));
                chat.span.end_with_timestamp(at);
            }
        }
    }

    /// Starts the pending request's span: as sent, or as a replayed answer that no
    /// request was sent for (INTERNAL, no server, `agentbatch.replayed`).
    fn open_pending(&self, state: &mut State, replayed: bool) {
        let Some((mut builder, parent)) = state.pending.take() else {
            return;
        };
        if replayed {
            builder.span_kind = Some(SpanKind::Internal);
            if let Some(a) = &mut builder.attributes {
                a.retain(|kv| !kv.key.as_str().starts_with("server."));
                a.push(KeyValue::new("agentbatch.replayed", true));
            }
        }
        state.chat = Some(Chat {
            span: self.start(builder, &parent),
            answered_at: None,
        });
    }

    fn on_event(&self, state: &mut State, at: SystemTime, event: &TranscriptEvent) {
        use TranscriptEvent as E;
        self.open_pending(state, matches!(event, E::Response { replayed: true, .. }));
        // Events of the request's own cycle leave it open; any other ends it.
        if !matches!(
            event,
            E::Response { .. }
                | E::Settle { .. }
                | E::AttemptFailed { .. }
                | E::RequestAborted { .. }
                | E::BatchJoined { .. }
                | E::ReservationExceeded { .. }
                | E::LedgerError { .. }
                | E::RatePause { .. }
        ) {
            Self::close_chat(state, at);
        }
        if let Some((name, attributes)) = super::task_events::on_task_span(event) {
            self.task_event(state, at, name, attributes);
            return;
        }
        match event {
            E::Reserve { .. } => state.reserved_at = Some(at),
            E::BudgetGranted { waited_ms } => {
                state.budget_wait_ms += waited_ms;
                self.task_event(
                    state,
                    at,
                    "agentbatch.budget_granted",
                    vec![KeyValue::new("agentbatch.waited_ms", ms(*waited_ms))],
                );
            }
            E::Request { .. } => self.on_request(state, at, event),
            E::BatchJoined { batch_id, .. } => {
                if let Some(chat) = &mut state.chat {
                    chat.span
                        .set_attribute(KeyValue::new("agentbatch.batch_id", batch_id.clone()));
                }
            }
            E::Response { .. } => self.on_response(state, at, event),
            E::Settle { .. } => Self::on_settle(state, event),
            E::AttemptFailed { .. } => Self::on_attempt_failed(state, at, event),
            E::RequestAborted { charged_usd, .. } => Self::on_aborted(state, at, charged_usd),
            E::ToolCall { .. } => self.on_tool_call(state, at, event),
            E::ToolResult { .. } => self.on_tool_result(state, at, event),
            _ => {
                self.root(state, at);
            }
        }
    }

    /// An event on the task's span (a wait, a pause, a compaction), which starts it if it
    /// has not started yet.
    fn task_event(
        &self,
        state: &mut State,
        at: SystemTime,
        name: &'static str,
        attributes: Vec<KeyValue>,
    ) {
        let root = self.root(state, at).span();
        root.add_event_with_timestamp(name, at, attributes);
    }

    /// A content attribute's value, cut to the run's limit.
    fn clip(&self, v: String) -> String {
        attrs::clip(v, self.run.value_limit)
    }

    /// A request sent: its `chat` span is built now and started at the next event, which
    /// says whether it went out or its answer is replayed.
    fn on_request(&self, state: &mut State, at: SystemTime, event: &TranscriptEvent) {
        let TranscriptEvent::Request {
            turn,
            attempt,
            max_tokens,
            new_messages,
            params,
            ..
        } = event
        else {
            return;
        };
        let params = params.as_ref();
        if let Some(p) = params {
            state.server = server(&p.url);
            state.stream = p.extra.get("stream").and_then(|s| s.as_bool()) == Some(true);
            state.declared = Some(attrs::tool_names(&p.tools));
        }
        let mut a = self.common.clone();
        a.extend(state.server.iter().cloned());
        a.extend([
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.request.max_tokens", i64::from(*max_tokens)),
            KeyValue::new("agentbatch.turn", i64::from(*turn)),
            KeyValue::new("agentbatch.attempt", i64::from(*attempt)),
        ]);
        if state.stream {
            a.push(KeyValue::new("gen_ai.request.stream", true));
        }
        if let Some(reserved) = state.reserved_at.take() {
            let waited = at.duration_since(reserved).unwrap_or_default();
            a.push(KeyValue::new(
                "agentbatch.rate_wait_ms",
                ms(waited.as_millis() as u64),
            ));
        }
        if state.budget_wait_ms > 0 {
            a.push(KeyValue::new(
                "agentbatch.budget_wait_ms",
                ms(std::mem::take(&mut state.budget_wait_ms)),
            ));
        }
        if self.run.content {
            a.push(KeyValue::new(
                "gen_ai.input.messages",
                self.clip(new_messages.to_string()),
            ));
            if let Some(system) = params.and_then(|p| p.system.as_ref()) {
                a.push(KeyValue::new(
                    "gen_ai.system_instructions",
                    self.clip(serde_json::json!([{"type": "text", "content": system}]).to_string()),
                ));
            }
            if let Some(p) = params {
                a.push(KeyValue::new(
                    "gen_ai.tool.definitions",
                    self.clip(p.tools.to_string()),
                ));
            }
        }
        let builder = self
            .tracer
            .span_builder(format!("chat {}", self.model))
            .with_kind(SpanKind::Client)
            .with_start_time(at)
            .with_attributes(a);
        let root = self.root(state, at).clone();
        state.pending = Some((builder, root));
    }

    /// An answer to the request in flight: what it says, on its `chat` span.
    fn on_response(&self, state: &mut State, at: SystemTime, event: &TranscriptEvent) {
        let TranscriptEvent::Response {
            request_id,
            body,
            ttft_ms,
            replayed,
            ..
        } = event
        else {
            return;
        };
        let Some(chat) = &mut state.chat else {
            return;
        };
        chat.answered_at = Some(at);
        if let Some(body) = body {
            chat.span.set_attributes(attrs::answer(body));
            if self.run.content {
                chat.span.set_attribute(KeyValue::new(
                    "gen_ai.output.messages",
                    self.clip(attrs::output_messages(self.protocol, body)),
                ));
            }
        }
        if let Some(id) = request_id {
            chat.span
                .set_attribute(KeyValue::new("agentbatch.request_id", id.clone()));
        }
        if let Some(t) = ttft_ms {
            chat.span.set_attribute(KeyValue::new(
                "gen_ai.response.time_to_first_chunk",
                *t as f64 / 1000.0,
            ));
        }
        // Settled at $0 with no tokens now: what the answer used when the
        // killed attempt paid for it.
        let first_use = body
            .as_ref()
            .filter(|_| *replayed)
            .and_then(|b| crate::model::usage_of(self.protocol, b))
            .map(|r| r.usage);
        if let Some(u) = first_use {
            chat.span.set_attributes(attrs::replayed_usage(&u));
        }
    }

    /// What the attempt's answer used and cost, on its `chat` span.
    fn on_settle(state: &mut State, event: &TranscriptEvent) {
        let TranscriptEvent::Settle {
            usage,
            usage_estimated,
            cost_usd,
            ..
        } = event
        else {
            return;
        };
        let Some(chat) = &mut state.chat else {
            return;
        };
        chat.span.set_attributes(attrs::usage(usage));
        if *usage_estimated {
            chat.span
                .set_attribute(KeyValue::new("agentbatch.usage_estimated", true));
        }
        if let Some(c) = cost_usd {
            chat.span
                .set_attribute(attrs::usd("agentbatch.cost_usd", c.0));
        }
    }

    /// A request cut off in flight: its `chat` span ends as cancelled.
    fn on_aborted(state: &mut State, at: SystemTime, charged_usd: &Option<Usd>) {
        let Some(mut chat) = state.chat.take() else {
            return;
        };
        chat.span
            .set_attribute(KeyValue::new("error.type", "cancelled"));
        if let Some(c) = charged_usd {
            chat.span
                .set_attribute(attrs::usd("agentbatch.charged_usd", c.0));
        }
        chat.span.set_status(Status::error(
            "cut off in flight by the task's deadline or the run's cancellation",
        ));
        chat.span.end_with_timestamp(at);
    }

    /// A tool call's result: its `execute_tool` span ends with the outcome.
    fn on_tool_result(&self, state: &mut State, at: SystemTime, event: &TranscriptEvent) {
        let TranscriptEvent::ToolResult {
            id, name, outcome, ..
        } = event
        else {
            return;
        };
        let Some(i) = state.tools.iter().position(|(t, _)| t == id) else {
            return;
        };
        let (_, mut span) = state.tools.remove(i);
        let declared = state.declared.as_ref();
        let undeclared = declared.is_some_and(|d| !d.iter().any(|n| n == name));
        let limit = self.run.content.then_some(self.run.value_limit);
        tool_outcome(&mut span, outcome, limit, undeclared);
        span.end_with_timestamp(at);
    }

    /// A failed attempt: its `chat` span ends as an error, with what the failure meant.
    fn on_attempt_failed(state: &mut State, at: SystemTime, event: &TranscriptEvent) {
        let TranscriptEvent::AttemptFailed {
            error,
            retryable,
            rate_limited,
            charged_usd,
            provider_paused_ms,
            retry_in_ms,
            ..
        } = event
        else {
            return;
        };
        let Some(mut chat) = state.chat.take() else {
            return;
        };
        let s = &mut chat.span;
        s.set_attributes([
            KeyValue::new("error.type", attrs::request_error_type(error)),
            KeyValue::new("agentbatch.retried", *retryable),
        ]);
        if *rate_limited == Some(true) {
            s.set_attribute(KeyValue::new("agentbatch.rate_limited", true));
        }
        if let Some(c) = charged_usd {
            s.set_attribute(attrs::usd("agentbatch.charged_usd", c.0));
        }
        if let Some(Some(p)) = provider_paused_ms {
            s.set_attribute(KeyValue::new("agentbatch.provider_paused_ms", ms(*p)));
        }
        if let Some(Some(r)) = retry_in_ms {
            s.set_attribute(KeyValue::new("agentbatch.retry_in_ms", ms(*r)));
        }
        s.set_status(Status::error(crate::text::prefix(error, 300)));
        s.end_with_timestamp(chat.answered_at.unwrap_or(at));
    }

    /// A tool call: its `execute_tool` span starts, ended by the call's result.
    fn on_tool_call(&self, state: &mut State, at: SystemTime, event: &TranscriptEvent) {
        let TranscriptEvent::ToolCall {
            turn,
            id,
            name,
            input,
        } = event
        else {
            return;
        };
        let mut a = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", name.clone()),
            KeyValue::new("gen_ai.tool.call.id", id.clone()),
            KeyValue::new("gen_ai.tool.type", "function"),
            KeyValue::new("gen_ai.conversation.id", self.conversation.clone()),
            KeyValue::new("agentbatch.turn", i64::from(*turn)),
        ];
        if self.run.content {
            a.push(KeyValue::new(
                "gen_ai.tool.call.arguments",
                self.clip(input.to_string()),
            ));
        }
        let builder = self
            .tracer
            .span_builder(format!("execute_tool {name}"))
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(a);
        let root = self.root(state, at).clone();
        let span = self.start(builder, &root);
        state.tools.push((id.clone(), span));
    }

    /// Ends the task's span with its row's figures.
    fn on_finished(&self, state: &mut State, r: &TaskResult) {
        let end: SystemTime = r.finished_at.into();
        self.open_pending(state, false);
        Self::close_chat(state, end);
        for (_, mut span) in state.tools.drain(..) {
            span.set_attribute(KeyValue::new("error.type", "interrupted"));
            span.set_status(Status::error("the task ended during the call"));
            span.end_with_timestamp(end);
        }
        let root = self.root(state, r.started_at.into()).span();
        let mut a = attrs::usage(&r.measured.usage);
        a.extend([
            KeyValue::new("agentbatch.outcome", r.outcome.as_str()),
            KeyValue::new("agentbatch.stop_reason", r.stop_reason.as_str()),
            KeyValue::new("agentbatch.turns", i64::from(r.measured.turns)),
            KeyValue::new("agentbatch.tool_calls", i64::from(r.measured.tool_calls)),
            KeyValue::new("agentbatch.tool_errors", i64::from(r.measured.tool_errors)),
            KeyValue::new(
                "agentbatch.denied_calls",
                i64::from(r.measured.denied_calls),
            ),
            KeyValue::new("agentbatch.retries", i64::from(r.measured.retries)),
            KeyValue::new("agentbatch.rate_wait_ms", ms(r.measured.rate_wait_ms)),
        ]);
        if let Some(c) = r.measured.cost_usd {
            a.push(attrs::usd("agentbatch.cost_usd", c));
        }
        if let Some(code) = r.measured.check_exit_code {
            a.push(KeyValue::new("agentbatch.check_exit_code", i64::from(code)));
        }
        root.set_attributes(a);
        if r.outcome == Outcome::Error {
            root.set_attribute(KeyValue::new("error.type", r.stop_reason.as_str()));
            root.set_status(Status::error(crate::text::prefix(&r.stop_detail, 300)));
        }
        root.end_with_timestamp(end);
        state.root = None;
    }
}

/// A tool call's decision and result on its span; the result cut to `content`'s limit
/// when contents are recorded. A refusal is `denied` only when the policy refused the call (what results.csv's
/// `denied_calls` counts); a call of an `undeclared` tool is refused as `invalid_call`.
fn tool_outcome(span: &mut Span, outcome: &ToolOutcome, content: Option<usize>, undeclared: bool) {
    match outcome {
        ToolOutcome::Interrupted { interrupted } => {
            span.set_attribute(KeyValue::new("error.type", "interrupted"));
            span.set_status(Status::error(crate::text::prefix(interrupted, 300)));
        }
        ToolOutcome::Ran {
            decision,
            rule,
            is_error,
            content: result,
            ms: took,
            ..
        } => {
            span.set_attributes([
                KeyValue::new("agentbatch.policy.decision", decision.clone()),
                KeyValue::new("agentbatch.policy.rule", rule.clone()),
                KeyValue::new("agentbatch.tool.ms", ms(*took)),
            ]);
            if let Some(limit) = content {
                span.set_attribute(KeyValue::new(
                    "gen_ai.tool.call.result",
                    attrs::clip(result.clone(), limit),
                ));
            }
            let error = match (decision.as_str(), is_error) {
                ("allow", false) => None,
                ("allow", true) => Some("tool_error"),
                ("deny", _) if undeclared => Some("invalid_call"),
                ("deny", _) => Some("denied"),
                _ => Some("invalid_call"),
            };
            if let Some(e) = error {
                span.set_attribute(KeyValue::new("error.type", e));
                span.set_status(Status::error(match e {
                    "denied" => "the permission policy refused the call",
                    "invalid_call" => "the call was refused as invalid",
                    _ => "the tool returned an error",
                }));
            }
        }
    }
}

/// `server.address` and `server.port` of a request URL.
fn server(url: &str) -> Vec<KeyValue> {
    let Ok(u) = reqwest::Url::parse(url) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(host) = u.host_str() {
        out.push(KeyValue::new("server.address", host.to_string()));
    }
    if let Some(port) = u.port_or_known_default() {
        out.push(KeyValue::new("server.port", i64::from(port)));
    }
    out
}

impl EventSink for TaskTrace {
    fn event(&self, at: SystemTime, event: &TranscriptEvent) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.on_event(&mut state, at, event);
    }

    fn finished(&self, result: &TaskResult) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.on_finished(&mut state, result);
    }
}

impl Drop for TaskTrace {
    /// A task that never reported its row (its code panicked): its spans end now, as
    /// errors, rather than vanish.
    fn drop(&mut self) {
        let mut state =
            std::mem::take(self.state.get_mut().unwrap_or_else(PoisonError::into_inner));
        let state = &mut state;
        let now = SystemTime::now();
        self.open_pending(state, false);
        Self::close_chat(state, now);
        for (_, mut span) in state.tools.drain(..) {
            span.end_with_timestamp(now);
        }
        if let Some(root) = state.root.take() {
            let span = root.span();
            span.set_attribute(KeyValue::new("error.type", "internal_error"));
            span.set_status(Status::error("the task ended without a result"));
            span.end_with_timestamp(now);
        }
    }
}
