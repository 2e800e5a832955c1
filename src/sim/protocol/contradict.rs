//! Usage figures that contradict each other or the request, as an inconsistent provider
//! writes them (`contradict_usage`): a breakdown far past its total, cached tokens
//! above the prompt, an output count past any bound, negative, fractional or textual
//! counts. Each is chosen so that a client that reads every figure as the nearest
//! consistent one within its request's bounds reads back the simulator's own figures:
//! what is billed does not change, only how it is written.

use serde_json::{json, Map, Value};

use super::served;
use crate::model::Protocol;

/// Far past any total: a 1-hour part, a cached part, a reasoning part.
const PAST: u64 = 900_000_000;

/// Rewrites the usage of a rendered answer (nothing when it has none).
pub fn usage(protocol: Protocol, rendered: &mut Value, max_tokens: u64) {
    if let Some(u) = rendered.get_mut("usage").and_then(Value::as_object_mut) {
        served(protocol).contradict_usage(u, max_tokens);
    }
}

/// The names of an OpenAI usage's figures: output, its details (reasoning), prompt, its
/// details (cached).
pub(super) struct OpenaiUsage {
    pub output: &'static str,
    pub reasoning: &'static str,
    pub prompt: &'static str,
    pub cached: &'static str,
}

/// OpenAI: cached tokens past the prompt (when all of it is cached) or as text, a
/// negative cache write, reasoning past the output, and an absurd output.
pub(super) fn openai(u: &mut Map<String, Value>, names: &OpenaiUsage, max_tokens: u64) {
    let OpenaiUsage {
        output,
        reasoning,
        prompt,
        cached,
    } = *names;
    let count = |u: &Map<String, Value>, k: &str| u.get(k).and_then(Value::as_u64);
    let (total, out) = (count(u, prompt), count(u, output));
    if let Some(details) = u.get_mut(cached).and_then(Value::as_object_mut) {
        match (count(details, "cached_tokens"), total) {
            // All of the prompt cached: a figure past it reads as the whole prompt.
            (Some(c), Some(t)) if c == t => details.insert("cached_tokens".into(), json!(c + PAST)),
            (Some(0), _) => details.insert("cached_tokens".into(), json!("none")),
            _ => None,
        };
        if count(details, "cache_write_tokens") == Some(0) {
            details.insert("cache_write_tokens".into(), json!(-3));
        }
    }
    if let Some(details) = u.get_mut(reasoning).and_then(Value::as_object_mut) {
        let r = count(details, "reasoning_tokens");
        if r.is_some() && r == out {
            details.insert("reasoning_tokens".into(), json!(r.unwrap_or(0) + PAST));
        }
    }
    absurd_output(u, output, max_tokens);
}

/// Messages: a 1-hour part past the writes (when all of them, or none, are 1-hour), a
/// 5-minute part that does not add up, and the reads as a fraction or a negative.
pub(super) fn anthropic(u: &mut Map<String, Value>, max_tokens: u64) {
    anthropic_cache(u);
    absurd_output(u, "output_tokens", max_tokens);
}

fn anthropic_cache(u: &mut Map<String, Value>) {
    let total = u
        .get("cache_creation_input_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    if let Some(cc) = u.get_mut("cache_creation").and_then(Value::as_object_mut) {
        let one_hour = cc
            .get("ephemeral_1h_input_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        if one_hour == 0 || one_hour == total {
            cc.insert("ephemeral_1h_input_tokens".into(), json!(one_hour + PAST));
            cc.insert("ephemeral_5m_input_tokens".into(), json!(total + 7));
        }
    }
    if let Some(read) = u.get("cache_read_input_tokens").and_then(Value::as_u64) {
        // Rounded up, n - 0.5 reads as n; a negative count as 0.
        let odd = if read == 0 {
            json!(-1)
        } else {
            json!(read as f64 - 0.5)
        };
        u.insert("cache_read_input_tokens".into(), odd);
    }
}

/// An output count at `max_tokens` written as 1e30: past every count, read as the
/// request's bound.
fn absurd_output(u: &mut Map<String, Value>, key: &str, max_tokens: u64) {
    if max_tokens > 0 && u.get(key).and_then(Value::as_u64) == Some(max_tokens) {
        u.insert(key.into(), json!(1e30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_figure_is_written_past_its_bound_or_in_an_odd_form() {
        let mut m = json!({"usage": {"input_tokens": 5, "cache_creation_input_tokens": 10,
            "cache_read_input_tokens": 4, "output_tokens": 100,
            "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 0}}});
        usage(Protocol::Anthropic, &mut m, 100);
        let u = &m["usage"];
        assert_eq!(
            u["cache_creation"]["ephemeral_1h_input_tokens"],
            json!(PAST)
        );
        assert_eq!(u["cache_creation"]["ephemeral_5m_input_tokens"], json!(17));
        assert_eq!(u["cache_read_input_tokens"], json!(3.5));
        assert_eq!(u["output_tokens"], json!(1e30));
        let mut c = json!({"usage": {"prompt_tokens": 50, "completion_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": 50},
            "completion_tokens_details": {"reasoning_tokens": 7}}});
        usage(Protocol::OpenaiChat, &mut c, 100);
        let u = &c["usage"];
        assert_eq!(
            u["prompt_tokens_details"]["cached_tokens"],
            json!(50 + PAST)
        );
        assert_eq!(
            u["completion_tokens_details"]["reasoning_tokens"],
            json!(7 + PAST)
        );
        assert_eq!(
            u["completion_tokens"],
            json!(7),
            "below max_tokens: as it was"
        );
        let mut none = json!({"id": "x"});
        usage(Protocol::OpenaiResponses, &mut none, 1);
        assert_eq!(none, json!({"id": "x"}));
    }
}
