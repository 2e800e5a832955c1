//! The Agent Trajectory Interchange Format (ATIF) as the exports write it: the parts of
//! Harbor's trajectory models (`harbor.models.trajectories`, the format's authority)
//! that an agentbatch transcript records. Optional fields are left out when the
//! transcript does not say, never written as null; `extra` maps hold what the format
//! has no field for.

use serde::Serialize;
use serde_json::{Map, Value};

/// The format version written: the first with `extra` on tool calls and observation
/// results (v1.7), the newest field these files use.
pub(super) const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// One task run's trajectory.
#[derive(Debug, Serialize)]
pub(super) struct Trajectory {
    pub schema_version: &'static str,
    /// `<run id>/<key>`: the task run, unique in the run folder.
    pub session_id: String,
    pub agent: Agent,
    pub steps: Vec<Step>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub final_metrics: Option<FinalMetrics>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// The agent: agentbatch itself, in the version that ran the task.
#[derive(Debug, Serialize)]
pub(super) struct Agent {
    pub name: &'static str,
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
}

/// Who a step is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Source {
    System,
    User,
    Agent,
}

/// One step: a system or user message, or one model answer with its tool calls and
/// their results.
#[derive(Debug, Serialize)]
pub(super) struct Step {
    pub step_id: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub source: Source,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
}

impl Step {
    /// A step with only a message (its id is set when the trajectory is complete).
    pub fn message(source: Source, timestamp: &str, message: String) -> Step {
        Step {
            step_id: 0,
            timestamp: (!timestamp.is_empty()).then(|| timestamp.to_string()),
            source,
            message,
            reasoning_content: None,
            tool_calls: Vec::new(),
            observation: None,
            metrics: None,
        }
    }
}

/// A tool call of a model answer.
#[derive(Debug, Serialize)]
pub(super) struct ToolCall {
    pub tool_call_id: String,
    pub function_name: String,
    /// Always an object (ATIF requires one).
    pub arguments: Value,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// The results of a step's tool calls.
#[derive(Debug, Serialize)]
pub(super) struct Observation {
    pub results: Vec<ObservationResult>,
}

/// One call's result, under its call id.
#[derive(Debug, Serialize)]
pub(super) struct ObservationResult {
    pub source_call_id: String,
    /// None when the call was cut off before it returned anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// What one answer used and cost. `prompt_tokens` counts the whole prompt (cached and
/// written to the cache included), `cached_tokens` the part read from the cache.
#[derive(Debug, Serialize)]
pub(super) struct Metrics {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// The task run's totals, as results.csv records them.
#[derive(Debug, Serialize)]
pub(super) struct FinalMetrics {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cached_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    pub total_steps: usize,
}
