//! The simulator's script format: what a simulated model answers, turn by turn, for one
//! task. Turn n of the script answers the request whose history holds n assistant
//! messages, so retries and `pause_turn` continuations land on the right turn without
//! any session state. Instead of turns, a script may ask for the chaos model
//! (`chaos: {seed: N}`), which generates each turn from the request.

use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bounds;
use crate::vocab::values::{items_or_empty, or_empty, HumanDuration};

/// One task's script.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Simulator script", transform = bounds::script_schema_rules)]
pub struct Script {
    /// Latency of every turn that does not set its own (at most 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<HumanDuration>,
    /// Once the turns run out, keep answering with the last one (for loops that only a
    /// limit stops). Without it a request past the end is answered with a 400 error.
    #[serde(default)]
    pub repeat_last: bool,
    /// The scripted turns: turn n answers the request whose history holds n assistant
    /// messages. A script has `turns` or `chaos`, not both.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "items_or_empty"
    )]
    #[schemars(
        with = "Option<Vec<Option<ScriptTurn>>>",
        length(max = bounds::MAX_TURNS)
    )]
    pub turns: Vec<ScriptTurn>,
    /// Generate every turn from a seed instead (an erratic model, for property tests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<Chaos>,
    /// The context window the simulator enforces, in its tokens (a quarter of the
    /// request's bytes); default: the model's from the built-in table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The answer to a summary request (default: the simulator's own summary). Its
    /// last text block gets the simulator's step marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Box<ScriptTurn>>,
}

/// One simulated model response, optionally preceded by faults.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Script turn")]
pub struct ScriptTurn {
    /// The answer's content blocks, each a one-key map: `text`, `thinking`,
    /// `redacted_thinking`, `tool_use` or `raw`.
    #[serde(default, deserialize_with = "or_empty")]
    #[schemars(with = "Option<Vec<Block>>")]
    pub content: Vec<Block>,
    /// Defaults to `tool_use` when the content has a tool_use block, else `end_turn`.
    /// Any string is played as given, so unknown future values can be tested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The `stop_sequence` to report (with `stop_reason: stop_sequence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    /// Any JSON sent as the answer's `stop_details`, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_details: Option<Value>,
    /// Usage figures to report instead of the simulator's estimates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageScript>,
    /// Delay before the response headers (at most 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<HumanDuration>,
    /// Played one per attempt before the real answer: the first attempt at this turn
    /// gets `faults[0]`, the second `faults[1]`, and so on.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "or_empty"
    )]
    #[schemars(with = "Option<Vec<Fault>>", length(max = bounds::MAX_FAULTS))]
    pub faults: Vec<Fault>,
    /// Send this text as the 200 response body instead of the rendered message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_body: Option<String>,
    /// Cut the rendered body in half (a connection that died mid-body).
    #[serde(default)]
    pub truncate_body: bool,
    /// Send the headers, then wait this long before the body (a slow body; at most
    /// 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_delay: Option<HumanDuration>,
    /// Leave `usage` out of the answer (some OpenAI-compatible servers do).
    #[serde(default)]
    pub omit_usage: bool,
    /// Write the answer's usage figures so that they contradict each other or the
    /// request (a 1-hour part past its total, cached tokens past the prompt, an output
    /// count of 1e30, negative and fractional counts), each of which reads back, clamped
    /// to a consistent figure, as the simulator's own: the bill is the same.
    #[serde(default)]
    pub contradict_usage: bool,
    /// openai-responses: the `status` to send (completed, incomplete, failed, ...);
    /// by default it follows `stop_reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// openai-responses: `incomplete_details.reason` (max_output_tokens,
    /// content_filter, or anything else to test unknown reasons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete_reason: Option<String>,
    /// openai-responses: the `error` of a `failed` response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ResponseErrorScript>,
    /// openai-chat: the `finish_reason` to send, as given (`"null"` sends JSON null);
    /// by default it follows `stop_reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// openai-chat: send tool calls without an `id` (as some Ollama models do).
    #[serde(default)]
    pub omit_call_ids: bool,
}

/// The `error` object of a failed Responses answer.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Responses error")]
pub struct ResponseErrorScript {
    /// server_error and rate_limit_exceeded are retried; others are not.
    pub code: String,
    /// The error's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A content block of a simulated response, written as a one-key map
/// (`- text: "..."`, `- tool_use: {name: get_time, input: {}}`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// `{{tool_result}}` in the text is replaced by the text of the first tool result
    /// the client sent in this request.
    Text(String),
    /// A thinking block; the simulator signs it and checks the signature when the block
    /// comes back.
    Thinking(String),
    RedactedThinking(String),
    ToolUse(ToolUseScript),
    /// Any JSON block, sent verbatim (server tool blocks, future block types).
    Raw(Value),
}

const BLOCKS: &[&str] = &["text", "thinking", "redacted_thinking", "tool_use", "raw"];

// YAML enums in serde_yaml are tags (`!text hi`); scripts read better as one-key maps.
impl<'de> Deserialize<'de> for Block {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Block;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a one-key map such as `text: \"...\"` or `tool_use: {name: ..., input: {...}}`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Block, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::invalid_length(0, &self));
                };
                let block = match kind.as_str() {
                    "text" => Block::Text(map.next_value()?),
                    "thinking" => Block::Thinking(map.next_value()?),
                    "redacted_thinking" => Block::RedactedThinking(map.next_value()?),
                    "tool_use" => Block::ToolUse(map.next_value()?),
                    "raw" => Block::Raw(map.next_value()?),
                    other => return Err(de::Error::unknown_variant(other, BLOCKS)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a content block has exactly one key; found `{kind}` and `{extra}` (write them as two list items)"
                    )));
                }
                Ok(block)
            }
        }
        d.deserialize_map(V)
    }
}

/// A tool call of a simulated answer.
impl JsonSchema for Block {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ContentBlock".into()
    }

    /// One object per block kind, each with its one key, as the hand-written reader
    /// above takes them.
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let text = generator.subschema_for::<String>();
        let kinds = [
            ("text", "A text block; `{{tool_result}}` becomes the text of the first tool result of the request.", text.clone()),
            ("thinking", "A thinking block; the simulator signs it and checks the signature when it comes back.", text.clone()),
            ("redacted_thinking", "A redacted thinking block's data.", text),
            ("tool_use", "A tool call.", generator.subschema_for::<ToolUseScript>()),
            ("raw", "Any JSON block, sent verbatim (server tool blocks, future block types).", schemars::json_schema!(true)),
        ];
        let one_of: Vec<Value> = kinds
            .into_iter()
            .map(|(key, description, value)| {
                serde_json::json!({
                    "type": "object",
                    "description": description,
                    "properties": { key: value },
                    "required": [key],
                    "additionalProperties": false
                })
            })
            .collect();
        schemars::json_schema!({
            "title": "Content block",
            "description": "A content block of a simulated answer: a map with exactly one key.",
            "oneOf": one_of
        })
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Tool call")]
pub struct ToolUseScript {
    /// The tool called.
    pub name: String,
    /// The call's arguments: a map.
    #[serde(default = "empty_object")]
    #[schemars(with = "serde_json::Map<String, Value>")]
    pub input: Value,
    /// Defaults to a deterministic `toolu_...` (Anthropic) or `call_...` (OpenAI) id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// OpenAI protocols: the arguments string to send instead of `input` as JSON
    /// (to play a model that writes broken JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Usage figures to report instead of the simulator's estimates. Input tokens default to
/// a quarter of the request's size in bytes (real tokenizers never count more tokens than
/// bytes, which is what the runner's upper bounds rely on); cache figures are carved out
/// of them.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Usage figures")]
pub struct UsageScript {
    /// Prompt tokens (cache reads and writes included) to report instead of the
    /// estimate: plays a provider that bills more than the runner's upper bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = bounds::MAX_TOKENS))]
    pub input_tokens: Option<u64>,
    /// Capped at the request's max_tokens; a larger figure turns the answer into a
    /// `max_tokens` stop, as the real API does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = bounds::MAX_TOKENS))]
    pub output_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = bounds::MAX_TOKENS))]
    pub cache_read_input_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = bounds::MAX_TOKENS))]
    pub cache_creation_input_tokens: Option<u64>,
    /// OpenAI protocols: the part of the output spent on reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = bounds::MAX_TOKENS))]
    pub reasoning_tokens: Option<u64>,
}

/// A failed attempt: one of `status`, `disconnect`, `mid_stream` or `batch_expire`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Fault", transform = bounds::fault_schema_rules)]
pub struct Fault {
    /// HTTP error status (429, 500, 529, 400, ...). Absent with `disconnect`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = *bounds::STATUSES.start(), max = *bounds::STATUSES.end()))]
    pub status: Option<u16>,
    /// Sent as `retry-after` (whole seconds, rounded up) and `retry-after-ms` (at most
    /// 7 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<HumanDuration>,
    /// The `error.type` of the body; defaults to the one the real API uses for the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// The error body's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Answer 200, then break the connection in the middle of the body.
    #[serde(default)]
    pub disconnect: bool,
    /// Sent as the `x-should-retry` header, which overrides the client's own rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_retry: Option<bool>,
    /// OpenAI protocols: the error's `code` (default rate_limit_exceeded for 429,
    /// server_error for 5xx); `insufficient_quota` plays an exhausted quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Report the requests window as used up until this long from now, in the
    /// protocol's rate-limit headers (an RFC 3339 time for Anthropic, a duration such
    /// as `1.5s` for OpenAI), without `retry-after`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_after: Option<HumanDuration>,
    /// Answer 200 and start streaming the turn's answer, then fail this way (real
    /// servers fail after the headers too, and a client must not keep half a message).
    /// A request that does not stream gets the nearest non-streaming failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mid_stream: Option<MidStream>,
    /// With `mid_stream`: how many events go out before the failure (default: half
    /// the stream); capped below the stream's length, so the final event never does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = bounds::MAX_EVENTS))]
    pub after_events: Option<u64>,
    /// With `mid_stream: stall`: how long nothing comes before the connection closes
    /// (default: forever, the connection held open), to test idle timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_for: Option<HumanDuration>,
    /// With `mid_stream: cut`: the body stops inside the next event rather than between
    /// two, and ends cleanly (as a proxy that closes the connection does), so only the
    /// event's missing end says it was cut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_inside: Option<CutInside>,
    /// In a batch, the item expires instead of being played (as if the batch's 24 hours
    /// ran out first), so a runner's handling of expired items can be tested; a
    /// synchronous request, which cannot expire, gets a 500 instead.
    #[serde(default)]
    pub batch_expire: bool,
}

/// How a streamed answer fails after its first events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MidStream {
    /// An error event in the protocol's shape (Messages `event: error` with
    /// `overloaded_error`, Responses `error`, Chat a `data: {"error": ...}` chunk).
    Error,
    /// Responses: a `response.failed` event; the other protocols play it as `error`.
    Failed,
    /// The connection breaks: no final event.
    Cut,
    /// Nothing more for `stall_for` (or forever), then the connection breaks.
    Stall,
}

/// Where in an event `cut_inside` stops the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CutInside {
    /// Right after the event's `data:`.
    AfterData,
    /// Halfway through the event's `data:` line (at a character boundary).
    MidData,
    /// Inside the first multi-byte character from the event's data on (halfway through
    /// its `data:` line when the rest of the stream has none).
    MidCharacter,
}

/// `sim: {chaos: {...}}`: the seed and the knobs of the chaos model. Bounds are in
/// `bounds.rs` and docs/simulator.md.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Chaos model")]
pub struct Chaos {
    /// Every turn of every conversation follows from it (and the task's key).
    pub seed: u64,
    /// Turns before the final answer (default 8).
    #[serde(default = "default_max_turns")]
    #[schemars(range(min = 1, max = bounds::MAX_CHAOS_TURNS))]
    pub max_turns: u32,
    /// Tool calls in one turn at most (default 4).
    #[serde(default = "default_max_calls")]
    #[schemars(range(max = bounds::MAX_CHAOS_CALLS))]
    pub max_calls: u32,
    /// Percent of turns whose first attempts fail on the server side (default 10).
    #[serde(default = "default_fault_percent")]
    #[schemars(range(max = bounds::MAX_PERCENT))]
    pub fault_percent: u32,
    /// Percent of turns with a misbehaviour: an odd stop, bad ids, a damaged body...
    /// (default 20).
    #[serde(default = "default_misbehave_percent")]
    #[schemars(range(max = bounds::MAX_PERCENT))]
    pub misbehave_percent: u32,
    /// Percent of tool inputs that break their schema (default 20).
    #[serde(default = "default_invalid_percent")]
    #[schemars(range(max = bounds::MAX_PERCENT))]
    pub invalid_percent: u32,
    /// The longest generated string, in bytes (default 65536).
    #[serde(default = "default_max_string")]
    #[schemars(range(max = bounds::MAX_STRING))]
    pub max_string: u64,
    /// The longest latency, slow body, retry-after or rate-limit reset (default 20ms,
    /// at most 10s).
    #[serde(default = "default_max_delay")]
    pub max_delay: HumanDuration,
    /// An absolute folder outside every workspace that the model tries to write into
    /// (absolute paths, symlinks it makes); without it only `..` escapes are tried. No
    /// quotes, `$`, backquotes, backslashes or newlines (it goes into shell commands).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::MAX_PATH), pattern(OUTSIDE_PATTERN))]
    pub outside: Option<String>,
}

/// What `chaos.outside` may be: an absolute path without the characters that would
/// break the shell commands it goes into.
const OUTSIDE_PATTERN: &str = r#"^/[^'"$`\\\n\x00]*$"#;

fn default_max_turns() -> u32 {
    8
}
fn default_max_calls() -> u32 {
    4
}
fn default_fault_percent() -> u32 {
    10
}
fn default_misbehave_percent() -> u32 {
    20
}
fn default_invalid_percent() -> u32 {
    20
}
fn default_max_string() -> u64 {
    65_536
}
fn default_max_delay() -> HumanDuration {
    HumanDuration(std::time::Duration::from_millis(20))
}

impl Chaos {
    /// The knobs' defaults with this seed.
    pub fn with_seed(seed: u64) -> Chaos {
        Chaos {
            seed,
            max_turns: default_max_turns(),
            max_calls: default_max_calls(),
            fault_percent: default_fault_percent(),
            misbehave_percent: default_misbehave_percent(),
            invalid_percent: default_invalid_percent(),
            max_string: default_max_string(),
            max_delay: default_max_delay(),
            outside: None,
        }
    }

    pub(super) fn max_delay_ms(&self) -> u64 {
        self.max_delay.0.as_millis().max(1) as u64
    }
}

impl Script {
    /// The scripted turn that answers a request with `step` assistant messages in its
    /// history.
    pub fn turn(&self, step: usize) -> Option<&ScriptTurn> {
        match self.turns.get(step) {
            Some(t) => Some(t),
            None if self.repeat_last => self.turns.last(),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_one_key_maps() {
        let s: Script = serde_yaml::from_str(
            r#"
turns:
  - content:
      - thinking: "hmm"
      - text: "I'll check."
      - tool_use: { name: get_time, input: { timezone: UTC } }
  - content: [{ text: "done" }]
    faults: [{ status: 429, retry_after: 1s }]
"#,
        )
        .unwrap();
        assert_eq!(s.turns.len(), 2);
        assert!(matches!(&s.turns[0].content[2], Block::ToolUse(u) if u.name == "get_time"));
        assert!(s.check().is_ok());
        assert!(s.turn(2).is_none());
    }

    #[test]
    fn unknown_block_type_is_an_error_with_location() {
        let e = serde_yaml::from_str::<Script>("turns:\n  - content:\n      - txt: hi\n")
            .err()
            .unwrap();
        assert!(e.location().is_some());
        assert!(e.to_string().contains("txt"), "{e}");
    }
}
