//! The resolved plan: what runs, with every default applied and every reference
//! checked. The runner only ever sees these types, never the job file as written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::{Map, Value};

use super::schema::{JobFile, KeepWorkspaces};
pub use super::schema_suite::AgentKind;
use crate::model::Protocol;
use crate::sim::script::Script;
use crate::tools::mcp::McpServerSpec;
use crate::tools::{Policy, RunLimits, SandboxConfig};
use crate::vocab::cache::Caching;
use crate::vocab::context::ContextPolicy;
use crate::vocab::limits::{Limits, Period, RateLimits};
use crate::vocab::price::Price;

fn human<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// Whether a provider is a real API or the simulator playing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// The built-in simulator (started by the run, or an `agentbatch sim` server),
    /// speaking the provider's protocol and playing the tasks' scripts.
    Sim,
    /// A real server: the vendor's API or a compatible one.
    Api,
}

/// A provider with every setting resolved.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderSpec {
    pub name: String,
    pub kind: ProviderKind,
    pub protocol: Protocol,
    /// None for the simulator the runner starts itself.
    pub base_url: Option<String>,
    /// The variable holding the key (never the key itself).
    pub api_key_env: Option<String>,
    /// A server that takes no key (a local one): run without it when the variable is
    /// unset.
    pub api_key_optional: bool,
    pub anthropic_version: String,
    /// Chat Completions: the name of the output-limit field.
    pub max_tokens_field: String,
    /// The provider's own `cache:` settings, which a task's own override.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::job::schema::CacheFields>,
    /// The provider's own `batch:` settings, which a task's own override field by field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<crate::job::schema::BatchFields>,
    /// OpenAI protocols: sent as `parallel_tool_calls` when tools are declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(serialize_with = "human")]
    pub timeout: Duration,
    /// The provider's own `stream:`, which a task's overrides.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<crate::job::schema::StreamMode>,
    /// How long a streamed answer may go without a byte.
    #[serde(serialize_with = "human")]
    pub stream_idle_timeout: Duration,
    /// openai-chat streams ask for their usage (`stream_options.include_usage`).
    pub stream_usage: bool,
    /// The largest response body read; a longer one ends the task (`provider_error`).
    pub max_response_bytes: u64,
    /// Retries of 408/409/5xx/529 and connection errors per request.
    pub max_retries: u32,
    /// Retries of 429s per request.
    pub max_rate_limit_retries: u32,
    /// The runner's pacing for all tasks on this provider.
    pub rate: RateLimits,
    /// Limits the simulator enforces (provider sim only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_limits: Option<RateLimits>,
    /// Whether the simulator states its limits in headers (provider sim only).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub server_limits_unstated: bool,
}

/// A spend cap per calendar period, kept in the persistent ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeriodCap {
    pub usd: Decimal,
    pub period: Period,
    pub on_cap: crate::vocab::limits::OnCap,
}

/// A team: shared caps, concurrency and rate limits of its tasks.
#[derive(Debug, Clone, Serialize)]
pub struct TeamSpec {
    pub name: String,
    /// What the team may spend in this run.
    pub max_cost_usd: Option<Decimal>,
    /// What the team may spend per period, across runs.
    pub cap: Option<PeriodCap>,
    pub concurrency: Option<usize>,
    pub rate: RateLimits,
}

/// A task's repository and the commands around its loop.
#[derive(Debug, Clone, Serialize)]
pub struct RepoSpec {
    /// The source: a git repository (cloned) or a folder (copied); empty when the
    /// repository is the image's own workdir (`in_image`).
    pub path: PathBuf,
    /// The task has an environment and no `repo`: its workspace is what the image has
    /// at its workdir.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_image: bool,
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    #[serde(serialize_with = "human")]
    pub setup_timeout: Duration,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(serialize_with = "human")]
    pub check_timeout: Duration,
    /// The check runs confined like the agent's bash (else like setup, networked).
    pub check_sandbox: bool,
    pub keep_workspaces: KeepWorkspaces,
    /// How the task's workspace is made from the run's pristine checkout of the
    /// repository, as the job asks (`auto` is decided per task: see
    /// `agent::workspace`).
    pub workspaces: super::schema::WorkspaceMethod,
}

/// The tools of a task with their permission policy and limits.
#[derive(Debug, Clone, Serialize)]
pub struct ToolsetSpec {
    /// The named tool set, if the task chose one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub tools: Vec<String>,
    #[serde(skip)]
    pub policy: Arc<Policy>,
    /// The rules as written, for run.json.
    pub rules: Vec<String>,
    #[serde(skip)]
    pub bash: RunLimits,
    /// MCP servers whose tools join the set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<Arc<McpServerSpec>>,
}

/// One task, fully resolved: one run of a task as written, in one matrix variant and
/// one epoch.
#[derive(Debug, Clone, Serialize)]
pub struct TaskSpec {
    /// Unique in the run; names the transcript, patch and workspace. The task's own id
    /// when the job has no matrix and one epoch, else `<task>--<variant>[--e<epoch>]`.
    pub id: String,
    /// The task's id as written in the job file.
    pub task: String,
    /// `axis=value` pairs sorted by axis and joined by commas; empty without a matrix.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub variant: String,
    /// The value of each matrix axis, as in `variant`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub axes: Vec<(String, String)>,
    /// 1-based.
    pub epoch: u32,
    pub prompt: String,
    pub provider: Arc<ProviderSpec>,
    #[serde(serialize_with = "team_name")]
    pub team: Option<Arc<TeamSpec>>,
    pub model: String,
    pub max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub tools: Vec<String>,
    pub toolset: Arc<ToolsetSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<RepoSpec>,
    /// Added to the scrubbed environment of the task's commands.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub sandbox: SandboxConfig,
    /// The container the task's commands run in; None: on this machine, sandboxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Arc<crate::tools::container::EnvironmentConfig>>,
    /// Where the check runs when there is an environment.
    pub check_environment: super::schema_environment::CheckEnvironment,
    pub limits: Limits,
    /// Optional request fields (sampling, thinking), exactly as they will be sent.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
    /// budget_tokens of enabled thinking, which max_tokens must stay above.
    #[serde(skip)]
    pub thinking_budget: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Prompt caching, resolved from the task, its provider and the defaults.
    pub cache: Caching,
    /// How the prompt is kept inside the context window.
    pub context: ContextPolicy,
    /// Answers are streamed (resolved from `stream` on the task, its provider and the
    /// defaults, and for `auto` from max_tokens and thinking).
    pub stream: bool,
    /// Requests go through the provider's batch API (None: one by one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchSpec>,
    #[serde(skip)]
    pub sim: Option<Arc<Script>>,
    /// Who works on the task: the model, or a reference agent.
    #[serde(skip_serializing_if = "is_model")]
    pub agent: AgentKind,
    /// What the oracle applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solution: Option<Arc<Solution>>,
    /// The suite's own grading, instead of `check`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier: Option<Arc<Verifier>>,
}

fn is_model(a: &AgentKind) -> bool {
    *a == AgentKind::Model
}

/// What the oracle does.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Solution {
    /// A patch applied to the workspace (SWE-bench's gold patch).
    Patch(String),
    /// A folder copied to `/solution` in the container, whose `solve.sh` runs.
    Dir(PathBuf),
}

/// A suite's grading, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verifier {
    Swebench(SwebenchVerifier),
    Harbor(HarborVerifier),
}

impl Verifier {
    /// Whether it grades in the agent's own container (Harbor's `shared` mode), so that
    /// what the agent changed outside the workspace counts: a regrade, which has only
    /// the recorded patch, cannot grade it the same.
    pub fn shares_container(&self) -> bool {
        match self {
            Verifier::Swebench(_) => false,
            Verifier::Harbor(h) => !h.separate,
        }
    }
}

/// SWE-bench's grading of one instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwebenchVerifier {
    pub eval_script: String,
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: Vec<String>,
    pub log_parser: String,
    pub eval_type: super::schema_suite::SwebenchEvalType,
    #[serde(serialize_with = "human")]
    pub timeout: Duration,
}

/// A Harbor (or Terminal-Bench) verifier, resolved.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HarborVerifier {
    /// The tests folder on this machine, copied to `/tests` (none: only the script).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<PathBuf>,
    /// The test script on this machine (in `tests` or beside it), run from `/tests`.
    pub script: PathBuf,
    #[serde(serialize_with = "human")]
    pub timeout: Duration,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The reward at which the task passes.
    pub threshold: f64,
    /// In a new container with only the agent's patch (else the agent's own).
    pub separate: bool,
    /// The script's exit status is the reward (Terminal-Bench 1).
    pub reward_from_exit_code: bool,
}

/// A task's batch mode, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BatchSpec {
    pub window: crate::vocab::values::HumanDuration,
    pub max_requests: u32,
    pub max_wait: crate::vocab::values::HumanDuration,
}

fn team_name<S: serde::Serializer>(t: &Option<Arc<TeamSpec>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&t.name),
        None => s.serialize_none(),
    }
}

impl TaskSpec {
    pub fn team_name(&self) -> Option<&str> {
        self.team.as_ref().map(|t| t.name.as_str())
    }
}

/// A checked job, ready to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub file: PathBuf,
    pub concurrency: usize,
    pub tasks: Vec<TaskSpec>,
    /// Spend cap of the whole run.
    pub max_cost_usd: Option<Decimal>,
    pub teams: BTreeMap<String, Arc<TeamSpec>>,
    /// The persistent ledger the job names (else the runner's default).
    pub ledger_path: Option<PathBuf>,
    /// The job as written, kept for run.json.
    pub job: JobFile,
    /// The matrix axes (results.csv gets a `matrix.<axis>` column for each).
    pub axes: Vec<String>,
    /// How many tasks each of `suites` gave, in its order.
    pub suite_tasks: Vec<usize>,
}
