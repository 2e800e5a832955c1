//! The request fields a task fixes for its whole conversation.

use serde_json::{Map, Value};

use crate::vocab::cache::Caching;

/// Request fields besides the conversation, fixed for the whole task.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pub model: String,
    pub system: Option<String>,
    /// Tool declarations in neutral form: `{name, description, input_schema}`.
    pub tools: Vec<Value>,
    /// Optional fields sent only when a job sets them, under their wire names
    /// (temperature, top_p, thinking, reasoning, parallel_tool_calls, ...).
    pub extra: Map<String, Value>,
    /// Prompt caching. Anthropic: the runner places the breakpoints (see
    /// `Conversation::cache_marks`); OpenAI caches on its own and the agent sends a
    /// `prompt_cache_key` in `extra`.
    pub cache: Caching,
}
