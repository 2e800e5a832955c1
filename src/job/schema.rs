//! The job file as written (schema v1). Every struct refuses unknown fields so that a
//! typo is an error with a line number, not a silently ignored setting.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

pub use super::schema_providers::{
    MaxTokensField, ParallelToolCalls, ProviderFields, StreamOptions,
};
pub use super::schema_shared::{BatchFields, BatchMode, CacheFields, StreamMode};
pub use super::schema_toolsets::{Decision, McpServerFields, ToolsetFields};
use crate::sim::script::Script;
use crate::vocab::bounds::{self, at_most};
use crate::vocab::context::ContextStrategy;
use crate::vocab::limits::{MaxRepeats, Period};
use crate::vocab::price::PriceFields;
use crate::vocab::values::{or_empty, values_or_empty, HumanDuration, Money};

/// The top level of a job file.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Job file", transform = super::schema_rules::tasks_or_suites)]
pub struct JobFile {
    /// The job's name: the start of each run's folder name (`<name>-<UTC time>`).
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub name: String,
    /// Tasks in flight at once.
    #[serde(default, deserialize_with = "at_most::<_, _, { bounds::CONCURRENCY }>")]
    #[schemars(range(min = 1, max = bounds::CONCURRENCY))]
    pub concurrency: Option<usize>,
    /// Settings every task inherits unless it sets its own.
    #[serde(default, deserialize_with = "or_empty")]
    #[schemars(
        with = "Option<TaskFields>",
        extend("properties" = { "id": { "type": "null" } })
    )]
    pub defaults: TaskFields,
    /// Per-provider connection settings, keyed by provider name.
    #[serde(default, deserialize_with = "values_or_empty")]
    #[schemars(
        with = "Option<BTreeMap<String, Option<ProviderFields>>>",
        transform = super::schema_rules::provider_rules
    )]
    pub providers: BTreeMap<String, ProviderFields>,
    /// USD per million tokens, by model id; overrides the built-in table.
    #[serde(default, deserialize_with = "or_empty")]
    #[schemars(with = "Option<BTreeMap<String, PriceFields>>")]
    pub pricing: BTreeMap<String, PriceFields>,
    /// Spend cap of the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Money>,
    /// Teams: shared spend caps, concurrency and rate limits for their tasks.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "values_or_empty"
    )]
    #[schemars(
        with = "Option<BTreeMap<String, Option<TeamFields>>>",
        extend("propertyNames" = { "pattern": "^[A-Za-z0-9._-]+$" })
    )]
    pub teams: BTreeMap<String, TeamFields>,
    /// The persistent ledger of team period caps: a SQLite file, relative to the job
    /// file (default `<out>/ledger.sqlite`), or a PostgreSQL database shared by runs on
    /// several machines (`postgres://USER@HOST:PORT/DATABASE`, no password: PGPASSWORD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::schema_rules::no_password)]
    pub ledger: Option<String>,
    /// Named tool sets (tools, permission policy, bash limits) that tasks choose with
    /// `toolset:`; `coding` and `readonly` exist unless redefined here.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "values_or_empty"
    )]
    #[schemars(with = "Option<BTreeMap<String, Option<ToolsetFields>>>")]
    pub toolsets: BTreeMap<String, ToolsetFields>,
    /// Axes to compare: each key is a task field (or a dotted path into one, such as
    /// `limits.max_turns`) and each value a list; every task runs once per combination.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(schema_with = "super::schema_matrix::axes")]
    pub matrix: BTreeMap<String, Vec<serde_yaml::Value>>,
    /// How many times each task runs per variant (default 1).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::EPOCHS }>"
    )]
    #[schemars(range(min = 1, max = bounds::EPOCHS))]
    pub epochs: Option<u32>,
    /// The tasks, each with an `id` and a `prompt`; fields it leaves out come from
    /// `defaults`. A job needs tasks, suites or both.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema_rules::tasks_need_ids)]
    pub tasks: Vec<TaskFields>,
    /// Tasks from suites in the formats people already have (SWE-bench, Harbor,
    /// Terminal-Bench): each suite task gets `defaults`, with the suite's own prompt,
    /// environment, time limit and verifier on top.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(with = "Option<Vec<super::schema_suite::SuiteFields>>")]
    pub suites: Vec<super::schema_suite::SuiteFields>,
}

/// When a task's workspace is kept after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeepWorkspaces {
    /// Keep every task's workspace.
    Always,
    /// Keep the workspaces of tasks that did not pass (the default).
    OnFailure,
    /// Delete every workspace once its patch is written.
    Never,
}

/// How a task's workspace is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMethod {
    /// An overlay layer where the process can mount one, else a reflinked copy where
    /// the filesystem has reflinks, else a copy (the default).
    #[default]
    Auto,
    /// An overlay layer on the pristine checkout; refused where none can be mounted.
    Overlay,
    /// A reflinked copy; refused where the filesystem has no reflinks.
    Reflink,
    /// A full copy.
    Copy,
}

/// How a task's commands are confined.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Sandbox")]
pub struct SandboxFields {
    /// Let `bash` reach the network (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<bool>,
    /// Fail the task instead of running with less confinement than asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require: Option<bool>,
}

/// A team: its tasks share these caps and limits.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Team")]
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
    #[schemars(range(min = 1, max = bounds::CONCURRENCY))]
    pub concurrency: Option<usize>,
    /// Requests per minute for the team's tasks together.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::RPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::RPM))]
    pub rpm: Option<u32>,
    /// Input tokens per minute for the team's tasks together.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::TPM))]
    pub itpm: Option<u32>,
    /// Output tokens per minute for the team's tasks together (a request counts its
    /// max_tokens until it is answered).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TPM }>"
    )]
    #[schemars(range(min = 1, max = bounds::TPM))]
    pub otpm: Option<u32>,
    /// How much of the rate may be used at once (default 1s worth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<HumanDuration>,
}

/// A spend cap per calendar period (UTC).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Team period cap")]
pub struct PeriodCapFields {
    /// What the team may spend per period, in every run together.
    pub usd: Money,
    /// The calendar period (UTC; weeks start on Monday).
    pub period: Period,
    /// When the cap cannot pay for a task's next request: `stop` (default: the task
    /// ends with `team_budget`) or `wait` (until the period rolls over or the cap is
    /// raised with `agentbatch ledger set-cap`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_cap: Option<crate::vocab::limits::OnCap>,
}

/// Everything a task may set; `defaults` uses the same fields (except `id`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Task", transform = super::schema_rules::tools_or_toolset)]
pub struct TaskFields {
    /// Required on a task, unique: letters, digits, `.`, `_`, `-`, not starting with `.`,
    /// at most 200 characters (it names the task's report files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::task_id")]
    pub id: Option<String>,
    /// Required: the first user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub prompt: Option<String>,
    /// `sim` (default), `anthropic`, `openai`, or a key of `providers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The team whose caps and limits apply (a key of `teams`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// Required: the model id sent to the provider and used for pricing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub model: Option<String>,
    /// Output tokens per request (default 4096); the cost and token budgets may shrink
    /// it further.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    #[schemars(range(min = 1, max = bounds::TOKENS_PER_REQUEST))]
    pub max_tokens: Option<u32>,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Built-in tools to declare, all allowed (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// A named tool set instead of `tools`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolset: Option<String>,
    /// A local git repository (a work tree, a bare repository or a bundle) or a plain
    /// folder, relative to the job file: the task works in its own copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Branch, tag or commit of a git `repo`.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// A command run in the workspace before the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub setup: Option<String>,
    /// How long `setup` may run (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_timeout: Option<HumanDuration>,
    /// A command run in the workspace after the loop: exit 0 is a pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub check: Option<String>,
    /// How long `check` may run (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_timeout: Option<HumanDuration>,
    /// Run `check` under the task's confinement (default true): the same network rule
    /// as `bash`, and git that runs no hook or fsmonitor from what the agent wrote.
    /// `false` runs it like `setup`, with the network: only for checks that need it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_sandbox: Option<bool>,
    /// Which workspaces are kept after the run (default `on_failure`).
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
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z_][A-Za-z0-9_]*$" }))]
    pub env: Option<BTreeMap<String, String>>,
    /// How the task's commands are confined: network or not, and whether less
    /// confinement than asked for fails the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxFields>,
    /// A container of the task's own that its `setup`, `bash` and `check` run in, from
    /// an image or a Dockerfile, with CPU, memory, process and network limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<super::schema_environment::EnvironmentFields>,
    /// Where `check` runs with an `environment`: `same` (default) or `fresh`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_environment: Option<super::schema_environment::CheckEnvironment>,
    /// The task's own budgets; merged field by field with those of `defaults`.
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
    /// Sampling temperature from 0 to 2 (Anthropic's to 1), sent only when set (newer
    /// Anthropic API versions and models refuse sampling parameters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling from 0 to 1, sent only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1))]
    pub top_p: Option<f64>,
    /// Top-k sampling, sent only when set; Anthropic only.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    #[schemars(range(max = bounds::TOKENS_PER_REQUEST))]
    pub top_k: Option<u32>,
    /// Extended thinking, sent as given (`{type: enabled, budget_tokens: N}` or
    /// `{type: adaptive}`); Anthropic only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingFields>,
    /// Reasoning effort and summaries; OpenAI protocols only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningFields>,
    /// `model` (default), or a reference agent that sends no request: `oracle` applies
    /// the task's `solution`, `nop` changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<super::schema_suite::AgentKind>,
    /// What the oracle applies: a `patch`, or a `dir` whose solve.sh it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub solution: Option<super::schema_suite::SolutionFields>,
    /// A suite's own grading instead of `check` (`swebench:` or `harbor:`); needs an
    /// `environment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<super::schema_suite::VerifierFields>,
}

/// Limits of one task; each field set on a task overrides the same field of `defaults`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Task limits")]
pub struct LimitFields {
    /// Model requests per task (default 20).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TURNS }>"
    )]
    #[schemars(range(min = 1, max = bounds::TURNS))]
    pub max_turns: Option<u32>,
    /// Wall clock for the whole task, tool runs included (default 30m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<HumanDuration>,
    /// Prompt tokens summed over the task's requests.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKEN_BUDGET }>"
    )]
    #[schemars(range(max = bounds::TOKEN_BUDGET))]
    pub max_input_tokens: Option<u64>,
    /// Output tokens summed over the task's requests.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKEN_BUDGET }>"
    )]
    #[schemars(range(max = bounds::TOKEN_BUDGET))]
    pub max_output_tokens: Option<u64>,
    /// What the task may spend; a request that could pass it is shrunk or not sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Money>,
    /// The smallest max_tokens worth sending when a budget shrinks a request; below it
    /// the task stops instead (default 256).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    #[schemars(range(min = 1, max = bounds::TOKENS_PER_REQUEST))]
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

/// `context: {window, strategy: auto|clear_tool_results|summarize|native|off, at, keep,
/// exempt}`; each field falls back to the defaults'.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Context window policy")]
pub struct ContextFields {
    /// The model's context window in tokens, at least 1 (default: the model's from
    /// the built-in table).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub window: Option<u64>,
    /// How the prompt is kept inside the window (default `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ContextStrategy>,
    /// Compact when the next request's prompt and answer would pass this share of the
    /// window: above 0, at most 1 (default 0.85).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 1))]
    pub at: Option<f64>,
    /// Tool results kept whole when clearing, or turns kept whole when summarizing,
    /// newest first: 1 to 10000 (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = bounds::KEEP))]
    pub keep: Option<usize>,
    /// Tools whose results are never cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exempt: Option<Vec<String>>,
}

/// Reasoning settings of OpenAI reasoning models (`reasoning` in Responses,
/// `reasoning_effort` in Chat Completions).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Reasoning (OpenAI)")]
pub struct ReasoningFields {
    /// none, minimal, low, medium, high, xhigh or max (models take different subsets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::efforts")]
    pub effort: Option<String>,
    /// auto, concise or detailed (Responses only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::summaries")]
    pub summary: Option<String>,
}

/// The `thinking` request parameter of Anthropic's Messages API, sent as given.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Extended thinking (Anthropic)", transform = super::schema_rules::thinking_rules)]
pub struct ThinkingFields {
    /// `enabled` (with `budget_tokens`), `adaptive` or `disabled`.
    #[serde(rename = "type")]
    pub kind: ThinkingKind,
    /// Tokens the model may think with: at least 1024, below `max_tokens`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "at_most::<_, _, { bounds::TOKENS_PER_REQUEST }>"
    )]
    #[schemars(range(min = 1024, max = bounds::TOKENS_PER_REQUEST))]
    pub budget_tokens: Option<u32>,
    /// The API's `display` setting of thinking, sent as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<String>,
}

/// The `type` of a `thinking` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingKind {
    /// Thinking with a fixed `budget_tokens`.
    Enabled,
    /// The model decides how much to think.
    Adaptive,
    /// No thinking.
    Disabled,
}

/// Where a task's simulator script comes from.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum SimSource {
    /// A YAML file, relative to the job file.
    Path(String),
    /// The script itself.
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
            // A number or boolean is a path as written, as for every text field (the
            // schema cannot tell them apart).
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<SimSource, E> {
                Ok(SimSource::Path(n.to_string()))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<SimSource, E> {
                Ok(SimSource::Path(n.to_string()))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<SimSource, E> {
                Ok(SimSource::Path(n.to_string()))
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<SimSource, E> {
                Ok(SimSource::Path(b.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<SimSource, A::Error> {
                Script::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(SimSource::Inline)
            }
        }
        d.deserialize_any(V)
    }
}
