//! The chaos model's odd stops for the OpenAI protocols.

use crate::sim::protocol::drop_calls;
use crate::sim::rng::Rng;
use crate::sim::script::{ResponseErrorScript, ScriptTurn};

/// A status or stop the Responses API documents (or an unknown one).
pub(super) fn responses_odd_stop(r: &mut Rng, t: &mut ScriptTurn) {
    match r.below(10) {
        0 => drop_calls(t),
        1 => t.stop_reason = Some("max_tokens".into()),
        2 => {
            t.status = Some("incomplete".into());
            t.incomplete_reason = Some("content_filter".into());
        }
        3 => {
            t.status = Some("incomplete".into());
            t.incomplete_reason = Some("chaos_reason".into());
        }
        4 => {
            drop_calls(t);
            t.stop_reason = Some("refusal".into());
        }
        5..=7 => {
            t.status = Some("failed".into());
            let code = match r.below(3) {
                0 => "server_error",
                1 => "rate_limit_exceeded",
                _ => "invalid_prompt",
            };
            t.error = Some(ResponseErrorScript {
                code: code.into(),
                message: Some(format!("chaos: {code}")),
            });
            t.omit_usage = r.percent(50);
        }
        8 => t.status = Some((*r.pick(&["queued", "in_progress", "cancelled"])).into()),
        _ => t.stop_reason = Some("stop_sequence".into()),
    }
}

/// A `finish_reason` Chat Completions documents (or an unknown one), sometimes at
/// odds with the content.
pub(super) fn chat_odd_stop(r: &mut Rng, t: &mut ScriptTurn) {
    match r.below(8) {
        0 => t.finish_reason = Some("stop".into()),
        1 => t.finish_reason = Some("length".into()),
        2 => {
            drop_calls(t);
            t.finish_reason = Some("tool_calls".into());
        }
        3 => t.finish_reason = Some("content_filter".into()),
        4 => t.finish_reason = Some("null".into()),
        5 => t.finish_reason = Some("function_call".into()),
        6 => t.stop_reason = Some("max_tokens".into()),
        _ => t.finish_reason = Some((*r.pick(&["eos", "", "STOP"])).into()),
    }
}
