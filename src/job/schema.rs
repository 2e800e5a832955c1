//! The job file as written (schema v1). Every struct refuses unknown fields so that a
//! typo is an error with a line number, not a silently ignored setting.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::model::Protocol;
use crate::sim::script::Script;
use crate::vocab::bounds::{self, at_most};
use crate::vocab::cache::{CacheMode, CacheRetention, CacheTtl};
use crate::vocab::context::ContextStrategy;
use crate::vocab::limits::{MaxRepeats, Period};
use crate::vocab::price::PriceFields;
use crate::vocab::values::{ByteSize, HumanDuration, Money};

/// The top level of a job file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    pub name: String,
    /// Tasks in flight at once.
    #[serde(default, deserialize_with = "at_most::<_, _, { bounds::CONCURRENCY }>")]
    pub concurrency: Option<usize>,
    /// Settings every task inherits unless it sets its own.
    #[serde(default)]
    pub defaults: TaskFields,
    /// Per-provider connection settings, keyed by provider name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderFields>,
    /// USD per million tokens, by model id; overrides the built-in table.
    #[serde(default)]
    pub pricing: BTreeMap<String, PriceFields>,
    /// Spend cap of the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Money>,
    /// Teams: shared spend caps, concurrency and rate limits for their tasks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub teams: BTreeMap<String, TeamFields>,
    /// The persistent ledger of team period caps: a SQLite file, relative to the job
    /// file (default `<out>/ledger.sqlite`), or a PostgreSQL database shared by runs on
    /// several machines (`postgres://USER@HOST:PORT/DATABASE`, no password: PGPASSWORD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<String>,
    /// Named tool sets (tools, permission policy, bash limits) that tasks choose with
    /// `toolset:`; `coding` and `readonly` exist unless redefined here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub toolsets: BTreeMap<String, ToolsetFields>,
    /// Axes to compare: each key is a task field (or a dotted path into one, such as
    /// `limits.max_turns`) and each value a list; every task runs once per combination.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matrix: BTreeMap<String, Vec<serde_yaml::Value>>,
    /// How many times each task runs per variant (default 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::EPOCHS }>"
    )]
    pub epochs: Option<u32>,
    pub tasks: Vec<TaskFields>,
}

/// A tool set.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsetFields {
    /// Built-in tools.
    #[serde(default)]
    pub tools: Vec<String>,
    /// MCP servers whose tools join the set, by server name (the `.mcp.json` shape).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp: BTreeMap<String, McpServerFields>,
    /// A `.mcp.json` file (relative to the job file) whose `mcpServers` join `mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyFields>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bash: Option<BashFields>,
}

/// One MCP server, as `.mcp.json` files describe it: a command run over stdio, or a
/// Streamable HTTP endpoint. `{workspace}` in a command, argument, variable or working
/// folder is the task's workspace (the server then runs per task); `${VAR}` anywhere is
/// read from the runner's environment when the server starts.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerFields {
    /// `stdio` (default with `command`) or `http` (default with `url`);
    /// `streamable-http` is the same as `http`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables the server gets besides PATH, HOME and LANG (never the runner's keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// How long one tool call may take (default 60s); a call past it is cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// How long starting and initializing the server may take (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout: Option<HumanDuration>,
}

/// Permission rules: `tool` or `tool(pattern)`; deny beats allow.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFields {
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    /// What happens to a call no rule matches (default: allow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Decision>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
}

/// Limits of the `bash` tool.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BashFields {
    /// Per command (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Bytes of output the model sees (default 30000; head and tail are kept).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::BASH_OUTPUT }>"
    )]
    pub max_output: Option<usize>,
}

/// When a task's workspace is kept after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeepWorkspaces {
    Always,
    OnFailure,
    Never,
}

/// How a task's workspace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMethod {
    #[default]
    Auto,
    Overlay,
    Reflink,
    Copy,
}

/// How a task's commands are confined.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxFields {
    /// Let `bash` reach the network (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Fail the task instead of running with less confinement than asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<bool>,
}

/// A team: its tasks share these caps and limits.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TeamFields {
    /// What the team may spend in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Money>,
    /// What the team may spend per day, week or month, across runs and processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cap: Option<PeriodCapFields>,
    /// Tasks of this team in flight at once.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::CONCURRENCY }>"
    )]
    pub concurrency: Option<usize>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RPM }>"
    )]
    pub rpm: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    pub itpm: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    pub otpm: Option<u32>,
    /// How much of the rate may be used at once (default 1s worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<HumanDuration>,
}

/// A spend cap per calendar period (UTC).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodCapFields {
    pub usd: Money,
    pub period: Period,
}

/// Limits a simulator server enforces on its clients (`providers.sim.server_limits`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerLimitFields {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RPM }>"
    )]
    pub rpm: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    pub itpm: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    pub otpm: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<HumanDuration>,
}

/// Everything a task may set; `defaults` uses the same fields (except `id`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The team whose caps and limits apply (a key of `teams`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Per request; the cost and token budgets may shrink it further.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// A named tool set instead of `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolset: Option<String>,
    /// A local git repository or folder (relative to the job file) copied into the
    /// task's own workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Branch, tag or commit of a git `repo`.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// A command run in the workspace before the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_timeout: Option<HumanDuration>,
    /// A command run in the workspace after the loop: exit 0 is a pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_timeout: Option<HumanDuration>,
    /// Run `check` under the task's confinement (default true): the same network rule
    /// as `bash`, and git that runs no hook or fsmonitor from what the agent wrote.
    /// `false` runs it like `setup`, with the network: only for checks that need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_sandbox: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_workspaces: Option<KeepWorkspaces>,
    /// How each task's workspace is made from the run's one pristine checkout of its
    /// repository: `auto` (default: an overlay layer where the process can mount one,
    /// else a reflinked copy where the run folder's filesystem has reflinks, else a
    /// copy), `overlay` or `reflink` (each refused where it cannot work) or `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspaces: Option<WorkspaceMethod>,
    /// Variables added to the scrubbed environment of the task's commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxFields>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitFields>,
    /// Prompt caching (default: on, 5-minute entries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFields>,
    /// Keeping the prompt inside the context window (default: at 85% of the model's
    /// window clear old tool results, then summarize if that is not enough).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextFields>,
    /// Whether answers are streamed (SSE): `auto` (default) streams when a whole
    /// answer could outlast the API's 10 minutes (large max_tokens, thinking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamMode>,
    /// The providers' batch APIs (half price, answers within hours): `batch: {mode: on}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchFields>,
    /// The simulator script: a path relative to the job file, or the script inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimSource>,
    /// Sampling parameters are sent only when set (newer Anthropic API versions and
    /// models reject them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    pub top_k: Option<u32>,
    /// Extended thinking, sent as given (`{type: enabled, budget_tokens: N}` or
    /// `{type: adaptive}`); Anthropic only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingFields>,
    /// Reasoning effort and summaries; OpenAI protocols only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningFields>,
}

/// Limits of one task; each field set on a task overrides the same field of `defaults`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitFields {
    /// Model requests per task.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TURNS }>"
    )]
    pub max_turns: Option<u32>,
    /// Wall clock for the whole task, tool runs included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<HumanDuration>,
    /// Summed over the task's requests.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKEN_BUDGET }>"
    )]
    pub max_input_tokens: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKEN_BUDGET }>"
    )]
    pub max_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Money>,
    /// The smallest max_tokens worth sending when a budget shrinks a request; below it
    /// the task stops instead.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    pub min_max_tokens: Option<u32>,
    /// Send the last request the turn, time or cost budget allows with tools off and a
    /// note asking the model to finish and summarize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrap_up: Option<bool>,
    /// Tell the model what is left of its budgets before every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub show_budget: Option<bool>,
    /// Identical steps in a row (same calls, same results, or the same short cycle of
    /// them) before the model is warned and then stopped with `stuck`; `off` turns the
    /// check off (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repeats: Option<MaxRepeats>,
}

/// Connection settings of one provider.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderFields {
    /// The wire protocol; required for providers other than the built-in `sim`,
    /// `anthropic` and `openai`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Play the tasks' simulator scripts instead of calling a real server (the
    /// built-in `sim` provider always does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulator: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the key; keys never go in job files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Run without a key when the variable is unset (local servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_optional: Option<bool>,
    /// openai-chat: the output-limit field, `max_tokens` (most compatible servers) or
    /// `max_completion_tokens` (OpenAI, and required by its reasoning models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<MaxTokensField>,
    /// Prompt caching for the provider's tasks; `mode: off` also for compatible
    /// servers that refuse `prompt_cache_key` or `cache_control`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheFields>,
    /// OpenAI protocols: the `parallel_tool_calls` sent with tools: true (default;
    /// llama.cpp only makes parallel calls when asked), false, or `omit` for servers
    /// that refuse the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<ParallelToolCalls>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic_version: Option<String>,
    /// Streaming for the provider's tasks (a task's own `stream` wins, then this, then
    /// the defaults').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamMode>,
    /// Batch mode for the provider's tasks (field by field, a task's own `batch` wins,
    /// then this, then the defaults').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchFields>,
    /// How long a streamed answer may go without a byte before it counts as cut
    /// (default 2m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_idle_timeout: Option<HumanDuration>,
    /// openai-chat: `omit` leaves `stream_options` (which asks for the usage at the end
    /// of a stream) out, for compatible servers that refuse the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Per HTTP request (the task's time_limit still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// The largest response body read (default 64MiB); a longer one is abandoned, counted
    /// at its worst case, and ends the task with `provider_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<ByteSize>,
    /// Retries of a retryable failure (5xx, 529, connection errors) per request.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RETRIES }>"
    )]
    pub max_retries: Option<u32>,
    /// Retries of a 429 per request (the whole provider pauses on one).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RETRIES }>"
    )]
    pub max_rate_limit_retries: Option<u32>,
    /// Requests, input tokens and output tokens per minute for all tasks on this
    /// provider together.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RPM }>"
    )]
    pub rpm: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    pub itpm: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    pub otpm: Option<u32>,
    /// How much of the rate may be used at once (default 1s worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<HumanDuration>,
    /// Only for `sim`: the limits the simulator itself enforces (429 + retry-after).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_limits: Option<ServerLimitFields>,
}

/// `cache: {mode: auto|last_message|off, ttl: 5m|1h, retention: in_memory|24h}`; each
/// field falls back to the provider's, then the defaults'. `ttl` is Anthropic's,
/// `retention` OpenAI's.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CacheFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CacheMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<CacheTtl>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<CacheRetention>,
}

/// `batch: {mode: off|on, window, max_requests, max_wait}`; each field falls back to the
/// provider's, then the defaults'.
#[derive(Debug, Clone, Copy, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<BatchMode>,
    /// How long the first request of a batch waits for others (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<HumanDuration>,
    /// The most requests in one batch (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u32>,
    /// How long a batch may take before it is cancelled (default and most: 24h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wait: Option<HumanDuration>,
}

/// Whether a task's requests go through the provider's batch API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchMode {
    #[default]
    Off,
    On,
}

/// `context: {window, strategy: auto|clear_tool_results|summarize|native|off, at, keep,
/// exempt}`; each field
/// falls back to the defaults'.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ContextFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ContextStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt: Option<Vec<String>>,
}

/// When a task's answers are streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamMode {
    /// When a whole answer could take longer than the API allows (see the README).
    #[default]
    Auto,
    Always,
    Never,
}

/// `stream_options` on Chat Completions: ask for the usage (default), or leave it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamOptions {
    IncludeUsage,
    Omit,
}

/// `parallel_tool_calls`: a value to send, or `omit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ParallelToolCalls {
    Send(bool),
    Omit(Omit),
}

/// The word `omit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Omit {
    Omit,
}

/// Chat Completions' two names for the output limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    MaxTokens,
    MaxCompletionTokens,
}

/// Reasoning settings of OpenAI reasoning models (`reasoning` in Responses,
/// `reasoning_effort` in Chat Completions).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningFields {
    /// none, minimal, low, medium, high, xhigh or max (models take different subsets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// auto, concise or detailed (Responses only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// The `thinking` request parameter.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ThinkingFields {
    #[serde(rename = "type")]
    pub kind: ThinkingKind,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    pub budget_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingKind {
    Enabled,
    Adaptive,
    Disabled,
}

/// Where a task's simulator script comes from.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum SimSource {
    /// A YAML file, relative to the job file.
    Path(String),
    Inline(Script),
}

// Hand-written rather than `#[serde(untagged)]` so that errors inside an inline script
// keep their line and column.
impl<'de> Deserialize<'de> for SimSource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SimSource;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path to a simulator script, or a script (a map with `turns`)")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<SimSource, E> {
                Ok(SimSource::Path(s.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SimSource, A::Error> {
                Script::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(SimSource::Inline)
            }
        }
        d.deserialize_any(V)
    }
}
