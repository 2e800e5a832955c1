//! The chaos model: a simulated model that acts like an erratic real one, reproducibly
//! from a seed. Scripts only play what their authors thought of; a property test over
//! many seeds plays what nobody did.
//!
//! Each turn is a pure function of (seed, conversation key, step, the tools the request
//! declares): it is generated as an ordinary [`ScriptTurn`] and rendered by the usual
//! per-protocol renderers, so a retried request gets the same answer (its faults play
//! one per attempt, as scripted faults do) and the simulator's replay checks keep
//! working. The model calls the declared tools with inputs made from their JSON schemas
//! (`chaos/inputs.rs`: valid and invalid, hostile paths, harmless shell commands), mixes
//! text, thinking and calls, repeats calls, and on some turns misbehaves (duplicate or
//! missing call ids, every stop reason of the protocol, broken arguments, missing usage,
//! damaged bodies) or has the server fail first (429, 500, 529, disconnects).

mod inputs;
mod misbehave;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::script::{Block, ScriptTurn, ToolUseScript, UsageScript};
use crate::job::values::HumanDuration;
use crate::model::Protocol;

/// `sim: {chaos: {...}}`: the seed and the knobs of the chaos model. Bounds are in
/// `bounds.rs` and docs/simulator.md.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Chaos {
    /// Every turn of every conversation follows from it (and the task's key).
    pub seed: u64,
    /// Turns before the final answer (default 8).
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Tool calls in one turn at most (default 4).
    #[serde(default = "default_max_calls")]
    pub max_calls: u32,
    /// Percent of turns whose first attempts fail on the server side (default 10).
    #[serde(default = "default_fault_percent")]
    pub fault_percent: u32,
    /// Percent of turns with a misbehaviour: an odd stop, bad ids, a damaged body...
    /// (default 20).
    #[serde(default = "default_misbehave_percent")]
    pub misbehave_percent: u32,
    /// Percent of tool inputs that break their schema (default 20).
    #[serde(default = "default_invalid_percent")]
    pub invalid_percent: u32,
    /// The longest generated string, in bytes (default 65536).
    #[serde(default = "default_max_string")]
    pub max_string: u64,
    /// The longest latency, slow body, retry-after or rate-limit reset (default 20ms).
    #[serde(default = "default_max_delay")]
    pub max_delay: HumanDuration,
    /// An absolute folder outside every workspace that the model tries to write into
    /// (absolute paths, symlinks it makes); without it only `..` escapes are tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<String>,
}

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

    fn max_delay_ms(&self) -> u64 {
        self.max_delay.0.as_millis().max(1) as u64
    }
}

/// A small deterministic generator: SplitMix64 seeded by an FNV-1a hash of what the turn
/// depends on. Written out rather than taken from `rand`, whose generators promise no
/// stable output across versions: a failing seed must replay the same next year.
struct Rng(u64);

impl Rng {
    /// One stream per (seed, key, step, purpose), so that e.g. the number of calls a
    /// turn makes does not shift its faults.
    fn new(seed: u64, key: &str, step: usize, stream: &str) -> Rng {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for part in [
            &seed.to_le_bytes()[..],
            key.as_bytes(),
            &(step as u64).to_le_bytes(),
            stream.as_bytes(),
        ] {
            for b in part {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
            h ^= 0xff;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        Rng(h)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in 0..n (0 when n is 0).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.next() % n as u64) as usize
    }

    /// A number in lo..=hi.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.next() % span,
            // The whole range of u64.
            None => self.next(),
        }
    }

    fn percent(&mut self, p: u32) -> bool {
        self.next() % 100 < u64::from(p)
    }

    /// One of `items`, which callers keep non-empty (constant lists, checked vectors).
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// A tool the request declares, read in the protocol's own shape.
#[derive(Debug, Clone)]
struct Declared {
    name: String,
    schema: Value,
}

/// The function tools a request declares: Anthropic `tools[].input_schema`, Responses
/// `tools[].parameters`, Chat `tools[].function.parameters`.
fn declared(protocol: Protocol, request: &Value) -> Vec<Declared> {
    let tools = request
        .get("tools")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    tools
        .iter()
        .filter_map(|t| {
            let (name, schema) = match protocol {
                Protocol::Anthropic => (t.get("name"), t.get("input_schema")),
                Protocol::OpenaiResponses => (t.get("name"), t.get("parameters")),
                Protocol::OpenaiChat => (
                    t.pointer("/function/name"),
                    t.pointer("/function/parameters"),
                ),
            };
            Some(Declared {
                name: name?.as_str()?.to_string(),
                schema: schema?.clone(),
            })
        })
        .collect()
}

/// Whether the request forbids tool calls (`tool_choice` none).
fn tools_off(protocol: Protocol, request: &Value) -> bool {
    match protocol {
        Protocol::Anthropic => {
            request.pointer("/tool_choice/type").and_then(Value::as_str) == Some("none")
        }
        _ => request.get("tool_choice").and_then(Value::as_str) == Some("none"),
    }
}

/// The turn the chaos model plays for `request` at `step` of conversation `key`.
pub fn turn(c: &Chaos, protocol: Protocol, request: &Value, key: &str, step: usize) -> ScriptTurn {
    let tools = if tools_off(protocol, request) {
        Vec::new()
    } else {
        declared(protocol, request)
    };
    let last = step + 1 >= c.max_turns as usize;
    let mut r = Rng::new(c.seed, key, step, "turn");
    let mut t = ScriptTurn::default();
    if r.percent(20) {
        t.content.push(Block::Thinking(inputs::sentence(&mut r)));
    }
    if r.percent(4) {
        t.content
            .push(Block::RedactedThinking(inputs::opaque(&mut r)));
    }
    if last || tools.is_empty() || c.max_calls == 0 {
        t.content
            .push(Block::Text(format!("Done. {}", inputs::sentence(&mut r))));
    } else {
        if r.percent(50) {
            t.content.push(Block::Text(inputs::remark(&mut r)));
        }
        for (i, call) in calls(c, &tools, key, step).into_iter().enumerate() {
            if i > 0 && r.percent(15) {
                t.content.push(Block::Text(inputs::remark(&mut r)));
            }
            let again = r.percent(8).then(|| call.clone());
            t.content.push(call);
            // the same call twice in a row, as models stuck in a loop do
            t.content.extend(again);
        }
        if step > 0 && r.percent(8) {
            // the previous turn's calls once more, inputs unchanged
            t.content.extend(calls(c, &tools, key, step - 1));
        }
        if r.percent(30) {
            t.content.push(Block::Text(inputs::remark(&mut r)));
        }
    }
    let size = serde_json::to_vec(&t.content).map_or(0, |b| b.len());
    if size > 4096 {
        // A huge input would be cut at max_tokens by the output estimate (a quarter of
        // its size) and never reach a tool; report a small figure so that it does.
        t.usage = Some(UsageScript {
            output_tokens: Some(r.between(1, 256)),
            ..Default::default()
        });
    }
    if r.percent(30) {
        t.latency = Some(delay(&mut r, c));
    }
    let mut f = Rng::new(c.seed, key, step, "faults");
    if f.percent(c.fault_percent) {
        let n = f.between(1, 3);
        t.faults = (0..n)
            .map(|_| misbehave::fault(&mut f, c, protocol))
            .collect();
    }
    let mut m = Rng::new(c.seed, key, step, "misbehave");
    if m.percent(c.misbehave_percent) {
        for _ in 0..m.between(1, 2) {
            misbehave::misbehave(&mut m, c, protocol, &tools, &mut t);
        }
    }
    t
}

/// The calls a turn makes (before repeats): a pure function of the step, so a later
/// turn can repeat them.
fn calls(c: &Chaos, tools: &[Declared], key: &str, step: usize) -> Vec<Block> {
    let mut r = Rng::new(c.seed, key, step, "calls");
    let n = r.between(1, u64::from(c.max_calls.max(1)));
    let bash = tools.iter().find(|t| t.name == "bash");
    let writer = tools.iter().find(|t| t.name == "write_file");
    let mut out = Vec::new();
    for _ in 0..n {
        if let (Some(bash), Some(writer), true) = (bash, writer, r.percent(8)) {
            // make a link to somewhere outside, then write through it
            let (link, command) = inputs::make_link(&mut r, c);
            out.push(call(&bash.name, json!({ "command": command })));
            let path = format!("{link}/ft_link_{}.txt", r.below(1000));
            let content = inputs::sentence(&mut r);
            out.push(call(
                &writer.name,
                json!({"path": path, "content": content}),
            ));
            continue;
        }
        let tool = r.pick(tools);
        let input = inputs::input(&mut r, c, &tool.name, &tool.schema);
        out.push(call(&tool.name, input));
    }
    out
}

fn call(name: &str, input: Value) -> Block {
    Block::ToolUse(ToolUseScript {
        name: name.to_string(),
        input,
        id: None,
        arguments: None,
    })
}

fn delay(r: &mut Rng, c: &Chaos) -> HumanDuration {
    HumanDuration(std::time::Duration::from_millis(
        r.between(1, c.max_delay_ms()),
    ))
}

#[cfg(test)]
mod tests;
