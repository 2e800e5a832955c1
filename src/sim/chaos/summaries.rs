//! The chaos model's answers to summary requests: mostly the simulator's own summary,
//! but on some turns one as long as the history it replaces (a summary that makes no
//! room, answered whole or cut off at max_tokens), one that ends with an odd stop
//! (refused, paused, unknown, ...), or one with a tool call beside its text.

use serde_json::{json, Value};

use super::{call, declared, inputs, misbehave, Chaos, Rng};
use crate::model::Protocol;
use crate::sim::protocol::served;
use crate::sim::script::{Block, ScriptTurn};

/// The bytes of the request's history after its first entry: what a summary replaces.
fn replaced_bytes(protocol: Protocol, request: &Value) -> usize {
    served(protocol)
        .history(request)
        .iter()
        .skip(1)
        .map(|e| e.to_string().len())
        .sum()
}

/// `own` (the simulator's summary, whose last text block carries its step marker),
/// made erratic on `misbehave_percent` of the summary requests.
pub(super) fn erratic(
    c: &Chaos,
    protocol: Protocol,
    request: &Value,
    key: &str,
    step: usize,
    mut own: ScriptTurn,
) -> ScriptTurn {
    let mut r = Rng::new(c.seed, key, step, "summary");
    if !r.percent(c.misbehave_percent) {
        return own;
    }
    match r.below(4) {
        0 => {
            // As long as what it replaces, or (half the time) as long as max_tokens
            // lets an answer be whole: the simulator counts a quarter of its bytes.
            let mut len = replaced_bytes(protocol, request);
            if r.percent(50) {
                let whole = served(protocol).max_tokens(request).saturating_mul(3) as usize;
                len = len.min(whole);
            }
            let mut text = String::with_capacity(len + 200);
            while text.len() < len {
                text.push_str(&inputs::sentence(&mut r));
                text.push(' ');
            }
            // Before the marker's block, which must stay the last text.
            own.content.insert(0, Block::Text(text));
        }
        1 | 2 => misbehave::odd_stop(&mut r, protocol, &mut own),
        _ => {
            if let Some(tool) = declared(protocol, request).first() {
                own.content.push(call(&tool.name, json!({})));
            }
        }
    }
    own
}
