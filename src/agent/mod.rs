//! One agent loop: declare the tools, send the conversation, settle what it cost, run
//! the tool calls the model asked for (or refuse them), send every result back under
//! its call id, and repeat until the model ends its turn or a limit stops the task.
//! The model proposes, the harness disposes.

pub mod batching;
pub mod environment;
pub mod fresh;
mod mcp;
mod reference;
mod repeats;
mod repo;
mod request;
mod result;
mod steps;
pub(crate) mod stop;
pub mod verify;
mod window;
mod workspace;
mod wrap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::time::timeout_at;
use tokio_util::sync::CancellationToken;

use crate::govern::budget::Meter;
use crate::govern::ledger::Ledger;
use crate::govern::rate::Gates;
use crate::job::{ProviderKind, TaskSpec};
use crate::model::{Conversation, Endpoint, Params};
use crate::model::{HttpError, ModelError, ToolCall, ToolResult};
use crate::tools::mcp::{McpHub, TaskServers};
use crate::tools::{Registry, ToolContext, Toolset};
use crate::vocab::log::{Measured, TaskLog, TaskResult};
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::{ImageInfo, ToolOutcome, TranscriptEvent, Usd};
pub use result::task_result;
use steps::{after_loop, task_start, tool_context};
use stop::{after_response, check_turn_and_clock, Next};

/// What every loop of a run shares.
#[derive(Clone)]
pub struct AgentEnv {
    pub client: reqwest::Client,
    pub registry: Arc<Registry>,
    /// The API root of the simulator the runner started, for tasks on provider `sim`
    /// without a base_url of their own.
    pub sim_base: Option<String>,
    /// Keeps the simulator's conversation state of this run apart from other runs'.
    pub run_id: String,
    /// The run's folder: task workspaces go in `workspaces/`, private temp folders in
    /// `tmp/`.
    pub work_dir: std::path::PathBuf,
    /// All shared money: the run's and the teams' pools and period caps.
    pub ledger: Arc<Ledger>,
    /// Rate limits of providers and teams.
    pub gates: Arc<Gates>,
    /// Cancelled to end every loop now (second Ctrl-C, or reports can no longer be
    /// written); loops end as `cancelled`.
    pub cancel: CancellationToken,
    /// MCP servers shared by the run's tasks.
    pub mcp: Arc<McpHub>,
    /// The pristine checkouts that overlay workspaces are layers over.
    pub pristines: Arc<crate::tools::pristine::Pristines>,
    /// The providers' batch pools, for tasks in batch mode.
    pub batchers: Arc<batching::Batchers>,
    /// A resume: the answers each task's killed attempt paid for, by request digest,
    /// taken by the task when it starts.
    pub replays: Arc<std::sync::Mutex<Replays>>,
    /// The run's container engines, images and image workdirs.
    pub containers: Arc<environment::Containers>,
}

/// Per task id, the answers its killed attempt paid for, by request digest.
pub type Replays = std::collections::HashMap<String, Vec<(String, serde_json::Value)>>;

/// Where a task's requests go, with the key read from the environment at run time. A
/// simulated provider's requests go to the task's own path on the simulator, under the
/// protocol's usual root (`/v1` for OpenAI).
pub(crate) fn endpoint(
    spec: &TaskSpec,
    sim_base: Option<&str>,
    run_id: &str,
) -> Result<Endpoint, String> {
    let p = &spec.provider;
    let (base, api_key) = match p.kind {
        ProviderKind::Sim => {
            let root = p.base_url.as_deref().or(sim_base).ok_or_else(|| format!(
                "no simulator is running for provider {} (set providers.{}.base_url to an `agentbatch sim` server)",
                p.name, p.name
            ))?;
            let v1 = p.protocol.facts().sim_root;
            (
                format!(
                    "{}/r/{run_id}/t/{}{v1}",
                    root.trim_end_matches('/'),
                    spec.id
                ),
                Some("sim-key".to_string()),
            )
        }
        ProviderKind::Api => {
            let base = p.base_url.clone().unwrap_or_default();
            let key = match &p.api_key_env {
                Some(var) => match std::env::var(var) {
                    Ok(v) if !v.is_empty() => Some(v),
                    _ if p.api_key_optional => None,
                    _ => return Err(format!("the API key variable {var} is not set")),
                },
                None => None,
            };
            (base, key)
        }
    };
    Ok(Endpoint {
        protocol: p.protocol,
        url: p.protocol.url(&base)?,
        api_key,
        anthropic_version: p.anthropic_version.clone(),
        anthropic_beta: (native_context(spec).is_some())
            .then(|| crate::vocab::context::CONTEXT_MANAGEMENT_BETA.to_string()),
        max_tokens_field: p.max_tokens_field.clone(),
        timeout: p.timeout,
        max_response_bytes: p.max_response_bytes,
        stream_idle: spec.stream.then_some(p.stream_idle_timeout),
    })
}

fn params(spec: &TaskSpec, toolset: &Toolset) -> Params {
    let mut extra = spec.extra.clone();
    if spec.cache.is_on() && !spec.provider.protocol.facts().marks_cache {
        extra
            .entry("prompt_cache_key")
            .or_insert_with(|| prompt_cache_key(spec).into());
        if let Some(r) = spec.cache.retention {
            extra
                .entry("prompt_cache_retention")
                .or_insert_with(|| r.wire().into());
        }
    }
    if spec.stream {
        extra.insert("stream".into(), true.into());
        if spec.provider.protocol.facts().takes_stream_options && spec.provider.stream_usage {
            extra.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
    }
    if let Some(edits) = native_context(spec) {
        extra.insert("context_management".into(), edits);
    }
    Params {
        model: spec.model.clone(),
        system: spec.system.clone(),
        tools: toolset.declarations(),
        extra,
        cache: spec.cache,
    }
}

/// `context_management` when the task leaves compaction to the provider (Anthropic's
/// context editing, or the Responses API's server-side compaction), past the task's
/// threshold; None when it does not, or the provider has none.
fn native_context(spec: &TaskSpec) -> Option<serde_json::Value> {
    let c = &spec.context;
    if c.strategy != crate::vocab::context::ContextStrategy::Native {
        return None;
    }
    crate::model::wire(spec.provider.protocol).native_context(c, c.threshold(spec.max_tokens))
}

/// OpenAI's `prompt_cache_key`: one per task and variant, the same in every epoch and
/// every run (they share the task's prompt and tools), so its requests land on the
/// machines that hold its prefix. A digest, so no task name leaves the machine.
fn prompt_cache_key(spec: &TaskSpec) -> String {
    let named = [spec.task.as_bytes(), &[0], spec.variant.as_bytes()].concat();
    format!("agentbatch-{:016x}", crate::job::fnv1a(&named))
}

/// The worst-case cost of a task's smallest first request (its whole first prompt and
/// the least output worth asking for), or None for a model without a price. Used to
/// tell whether a task can start at all when money is short.
pub fn smallest_first_request(
    spec: &TaskSpec,
    registry: &Registry,
) -> Option<rust_decimal::Decimal> {
    let price = spec.price.as_ref()?;
    let toolset = registry.toolset(&spec.tools, spec.toolset.policy.clone());
    let prompt = Conversation::first_prompt_bound(
        spec.provider.protocol,
        &spec.provider.max_tokens_field,
        &params(spec, &toolset),
        &spec.prompt,
    );
    let floor = crate::govern::budget::floor(&spec.limits, spec.max_tokens, spec.thinking_budget);
    Some(price.worst_case(prompt, u64::from(floor)))
}

/// Counters the loop keeps besides the meter.
#[derive(Default)]
struct Tally {
    retries: u32,
    denied_calls: u32,
    /// Answers without usage, counted at an upper bound.
    usage_estimated_turns: u32,
    compactions: u32,
    /// Turns answered through the provider's batch API.
    batched_turns: u32,
    /// What batch pricing saved on the settled batched turns.
    batch_saved: rust_decimal::Decimal,
    /// Turns whose answer a killed attempt had paid for (a resume reuses them).
    replayed_turns: u32,
    rate_wait: Duration,
    budget_wait: Duration,
    /// Waiting for a team's period cap (`on_cap: wait`), part of `budget_wait`.
    cap_wait: Duration,
    longest_request: Duration,
    tool_calls: u32,
    tool_errors: u32,
    model: Duration,
    tools: Duration,
    /// Time to first token of each streamed answer, in ms.
    ttfts: Vec<u64>,
}

enum Interrupt {
    Deadline,
    Cancelled,
}

/// Runs `fut` unless the task's deadline passes or the run is cancelled first.
async fn guarded<F: std::future::Future>(
    fut: F,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<F::Output, Interrupt> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Interrupt::Cancelled),
        r = timeout_at(deadline.into(), fut) => r.map_err(|_| Interrupt::Deadline),
    }
}

/// Runs one task to its end and returns its record. Never fails: every way a loop can
/// end is a stop reason.
pub async fn run_task(spec: &TaskSpec, env: &AgentEnv, log: TaskLog) -> TaskResult {
    let started_at = Utc::now();
    let t0 = Instant::now();
    log.started();
    let base_tools = env
        .registry
        .toolset(&spec.tools, spec.toolset.policy.clone());
    log.emit(task_start(spec, &base_tools));
    let prepared = match &spec.repo {
        Some(repo) => {
            repo::prepare(
                spec,
                repo,
                &env.work_dir,
                &log,
                &env.cancel,
                &env.pristines,
                &env.containers,
            )
            .await
        }
        None => repo::Prepared::default(),
    };
    let workspace = prepared.workspace.as_ref().map(|w| w.root.clone());
    let (toolset, mut servers, mcp_failed) =
        if spec.toolset.mcp.is_empty() || prepared.failed.is_some() {
            (base_tools.clone(), TaskServers::default(), None)
        } else {
            match mcp::attach(spec, env, &base_tools, workspace.as_deref(), &log).await {
                Ok((t, s)) => (t, s, None),
                Err(stop) => (base_tools.clone(), TaskServers::default(), Some(stop)),
            }
        };
    let ctx = tool_context(spec, env, &prepared, workspace);
    // The time limit covers the loop; setup and check have their own timeouts.
    let deadline = deadline_from_now(spec);
    let mut lp = Loop {
        spec,
        env,
        log: &log,
        base_tools: &base_tools,
        toolset,
        servers: &servers,
        ctx: &ctx,
        deadline,
        meter: Meter::default(),
        tally: Tally::default(),
        repeats: repeats::Repeats::new(spec.limits.max_repeats),
        refused_too_long: false,
        admitted_at: None,
        summaries: window::Summaries::default(),
    };
    let stop = match prepared.failed.clone().or(mcp_failed) {
        Some(failed) => failed,
        None if spec.agent != crate::job::AgentKind::Model => {
            reference::act(spec, env, &prepared, &log).await
        }
        None => converse(&mut lp).await,
    };
    let Loop { meter, tally, .. } = lp;
    // The task's own MCP servers stop before the check runs.
    servers.shutdown().await;
    log.emit(TranscriptEvent::Stop {
        stop_reason: Some(stop.reason),
        detail: stop.detail.clone(),
    });
    let (environment, environment_ms) = prepared.environment_columns();
    let (check, patch, kept, sandbox_level) = match &spec.repo {
        Some(repo) => after_loop(spec, env, repo, prepared, &stop, &log).await,
        None => (None, None, None, String::new()),
    };
    if let Some(p) = patch {
        log.patch(p);
    }
    let (stop, outcome) = steps::verdict(stop, check.as_ref());
    let cost = spec.price.as_ref().map(|_| meter.cost);
    log.emit(TranscriptEvent::TaskEnd {
        outcome: Some(outcome),
        turns: meter.turns,
        usage: meter.usage,
        cost_usd: cost.map(Usd),
        tool_calls: tally.tool_calls,
        tool_errors: tally.tool_errors,
        denied_calls: tally.denied_calls,
        retries: tally.retries,
        check_exit_code: check.as_ref().and_then(|c| c.exit_code),
    });
    let result = TaskResult {
        outcome,
        finished_at: Utc::now(),
        measured: Measured {
            turns: meter.turns,
            usage: meter.usage,
            cost_usd: cost,
            cache_saved_usd: spec.price.as_ref().map(|_| meter.saved),
            batch_saved_usd: (spec.price.is_some() && spec.batch.is_some())
                .then_some(tally.batch_saved),
            wall_ms: t0.elapsed().as_millis() as u64,
            sandbox: sandbox_level,
            workspace: kept,
            environment,
            environment_ms,
            ..tally.measured(steps::verdict_columns(check.as_ref()))
        },
        ..task_result(spec, stop.reason, stop.detail, started_at)
    };
    log.finished(result.clone());
    result
}

impl Tally {
    /// The columns the tally counts, over `base`.
    fn measured(&self, base: Measured) -> Measured {
        let ms = |d: Duration| d.as_millis() as u64;
        Measured {
            tool_calls: self.tool_calls,
            tool_errors: self.tool_errors,
            usage_estimated_turns: self.usage_estimated_turns,
            compactions: self.compactions,
            ttft_ms: crate::stats::median_u64(&mut self.ttfts.clone()).map(|m| m.round() as u64),
            batched_turns: self.batched_turns,
            model_ms: ms(self.model),
            tool_ms: ms(self.tools),
            retries: self.retries,
            rate_wait_ms: ms(self.rate_wait),
            cap_wait_ms: ms(self.cap_wait),
            denied_calls: self.denied_calls,
            ..base
        }
    }
}

/// When the task's time limit ends, counted from now (the loop's start).
fn deadline_from_now(spec: &TaskSpec) -> Instant {
    let now = Instant::now();
    now.checked_add(spec.limits.time_limit)
        .unwrap_or_else(|| now + crate::vocab::values::MAX_DURATION)
}

/// Opens the task's conversation with its provider and drives the loop to its stop.
async fn converse(lp: &mut Loop<'_>) -> Stop {
    let (spec, env) = (lp.spec, lp.env);
    match endpoint(spec, env.sim_base.as_deref(), &env.run_id) {
        Err(e) => Stop::new(StopReason::ProviderError, e),
        Ok(ep) => {
            let pool = env.batchers.for_task(
                spec,
                &ep,
                &env.client,
                (env.sim_base.as_deref(), &env.run_id),
            );
            match Conversation::new(
                env.client.clone(),
                ep,
                params(spec, &lp.toolset),
                &spec.prompt,
            ) {
                Err(e) => Stop::new(StopReason::ProviderError, e),
                Ok(mut conv) => match pool {
                    Err(e) => Stop::new(StopReason::ProviderError, e),
                    Ok(pool) => {
                        let paid = env
                            .replays
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .remove(&spec.id);
                        if let Some(paid) = paid {
                            conv.replay(paid);
                        }
                        if let Some(pool) = pool {
                            conv.use_batches(pool, crate::model::batch::tag_for(&spec.id));
                        }
                        lp.drive(&mut conv).await
                    }
                },
            }
        }
    }
}

/// One task's loop state, so the steps below share it without long argument lists.
struct Loop<'a> {
    spec: &'a TaskSpec,
    env: &'a AgentEnv,
    log: &'a TaskLog,
    /// The built-in tools, to which the MCP servers' current tools are added.
    base_tools: &'a Toolset,
    toolset: Toolset,
    servers: &'a TaskServers,
    ctx: &'a ToolContext,
    deadline: Instant,
    meter: Meter,
    tally: Tally,
    repeats: repeats::Repeats,
    /// The last request was refused as too long and only a summary can shorten it.
    refused_too_long: bool,
    /// When the last request passed the rate gates (a 429 for a request sent before
    /// the adaptive rate was last cut is not counted again).
    admitted_at: Option<Instant>,
    summaries: window::Summaries,
}

impl Loop<'_> {
    async fn drive(&mut self, conv: &mut Conversation) -> Stop {
        loop {
            if let Some(s) = check_turn_and_clock(
                &self.spec.limits,
                self.meter.turns,
                Instant::now(),
                self.deadline,
            ) {
                return s;
            }
            if let Err(s) = self.refresh_tools(conv).await {
                return s;
            }
            self.prepare_turn(conv);
            if let Err(s) = self.keep_inside_window(conv, false).await {
                return s;
            }
            let turn = match self.request(conv, self.spec.max_tokens).await {
                Ok(t) => t,
                // Refused as too long with nothing left to clear: summarize, then send
                // again as a new turn.
                Err(s) if std::mem::take(&mut self.refused_too_long) => {
                    match self.keep_inside_window(conv, true).await {
                        Ok(()) => continue,
                        Err(mut stop) => {
                            stop.detail = format!("{} ({})", s.detail, stop.detail);
                            return stop;
                        }
                    }
                }
                Err(s) => return s,
            };
            self.note_context_edits(turn.context_edits, turn.usage.prompt_tokens());
            match after_response(&turn.stop, turn.calls.len()) {
                Next::Stop(s) => return s,
                Next::Resend => continue,
                Next::RunTools => {}
            }
            match self.run_tools(&turn.calls).await {
                Ok(mut results) => {
                    if let Some(s) = self.watch_repeats(&turn.calls, &mut results) {
                        return s;
                    }
                    conv.push_results(&results);
                }
                Err(s) => return s,
            }
        }
    }

    /// Runs the turn's tool calls in order; every call gets exactly one result.
    async fn run_tools(&mut self, calls: &[ToolCall]) -> Result<Vec<ToolResult>, Stop> {
        let turn_no = self.meter.turns;
        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            self.log.emit(TranscriptEvent::ToolCall {
                turn: turn_no,
                id: call.id.clone(),
                name: call.name.clone(),
                input: call.input.clone(),
            });
            let ran_at = Instant::now();
            let done = guarded(
                self.toolset.dispatch(call, self.ctx),
                self.deadline,
                &self.env.cancel,
            )
            .await;
            self.tally.tools += ran_at.elapsed();
            let d = match done {
                Ok(d) => d,
                Err(interrupt) => {
                    let stop = interrupted(
                        interrupt,
                        &format!("while tool \"{}\" was running", call.name),
                        &self.spec.limits,
                    );
                    self.log.emit(TranscriptEvent::ToolResult {
                        turn: turn_no,
                        id: call.id.clone(),
                        name: call.name.clone(),
                        outcome: ToolOutcome::Interrupted {
                            interrupted: stop.detail.clone(),
                        },
                    });
                    return Err(stop);
                }
            };
            self.tally.tool_calls += 1;
            if d.result.is_error {
                self.tally.tool_errors += 1;
            }
            if d.denied {
                self.tally.denied_calls += 1;
            }
            let images = (!d.result.images.is_empty()).then(|| {
                d.result
                    .images
                    .iter()
                    .map(|i| ImageInfo {
                        media_type: i.media_type.clone(),
                        bytes: i.data.len() * 3 / 4,
                    })
                    .collect()
            });
            self.log.emit(TranscriptEvent::ToolResult {
                turn: turn_no,
                id: call.id.clone(),
                name: call.name.clone(),
                outcome: ToolOutcome::Ran {
                    decision: d.decision.to_string(),
                    rule: d.rule.clone(),
                    is_error: d.result.is_error,
                    content: d.result.content.clone(),
                    ms: d.ms,
                    structured_content: d.structured.clone(),
                    images,
                },
            });
            if let Some(why) = d.fatal {
                return Err(Stop::new(StopReason::ToolSetupError, why));
            }
            results.push(d.result);
        }
        Ok(results)
    }
}

/// What a user can do about a request that failed for good.
fn hint(e: &ModelError, spec: &TaskSpec) -> Option<String> {
    let ModelError::Http(http) = e else {
        return None;
    };
    let key = spec
        .provider
        .api_key_env
        .as_deref()
        .map_or("the API key".to_string(), |v| format!("the key in ${v}"));
    let base = spec.provider.base_url.as_deref().unwrap_or("the simulator");
    Some(match http {
        HttpError::Status { status: 401, .. } => format!("check {key}"),
        HttpError::Status { status: 402, .. } => "check the account's billing and credit".into(),
        HttpError::Status { status: 403, .. } => {
            format!("{key} may lack access to model {}", spec.model)
        }
        HttpError::Status { status: 404, .. } => {
            format!(
                "check the model id \"{}\" and the base_url {base}",
                spec.model
            )
        }
        HttpError::Status { status: 413, .. } => {
            "the conversation is too large for one request".into()
        }
        HttpError::Status {
            status: 400,
            message,
            ..
        } if spec.provider.protocol.facts().takes_max_tokens_field
            && message.contains(&spec.provider.max_tokens_field) =>
        {
            let other = if spec.provider.max_tokens_field == "max_tokens" {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            format!(
                "the server refuses `{}`: set providers.{}.max_tokens_field: {other}",
                spec.provider.max_tokens_field, spec.provider.name
            )
        }
        HttpError::Timeout(_) => format!(
            "raise providers.{}.timeout or lower max_tokens",
            spec.provider.name
        ),
        HttpError::Redirect { .. } => format!(
            "set providers.{}.base_url to the address the provider redirects to, if you trust it",
            spec.provider.name
        ),
        HttpError::TooLarge { .. } => format!(
            "an endless or oversized answer from the provider or a proxy; raise providers.{}.max_response_bytes if answers this large are expected",
            spec.provider.name
        ),
        _ => return None,
    })
}

fn interrupted(interrupt: Interrupt, when: &str, limits: &crate::vocab::limits::Limits) -> Stop {
    match interrupt {
        Interrupt::Deadline => Stop::new(
            StopReason::TimeLimit,
            format!(
                "time_limit of {} reached {when}",
                humantime::format_duration(limits.time_limit)
            ),
        ),
        Interrupt::Cancelled => Stop::new(StopReason::Cancelled, format!("run cancelled {when}")),
    }
}
