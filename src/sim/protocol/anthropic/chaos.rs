//! The chaos model's odd stops for the Messages API.

use serde_json::json;

use crate::sim::protocol::drop_calls;
use crate::sim::rng::Rng;
use crate::sim::script::ScriptTurn;

/// A stop Messages documents (or an unknown one), sometimes at odds with the content:
/// `end_turn` with calls, `tool_use` without.
pub(super) fn odd_stop(r: &mut Rng, t: &mut ScriptTurn) {
    match r.below(9) {
        0 => t.stop_reason = Some("end_turn".into()),
        1 => {
            drop_calls(t);
            t.stop_reason = Some("tool_use".into());
        }
        2 => t.stop_reason = Some("max_tokens".into()),
        3 => {
            t.stop_reason = Some("stop_sequence".into());
            t.stop_sequence = Some("\n\nHuman:".into());
        }
        4 | 5 => {
            // a paused turn is sent back as it is: it carries no client calls
            drop_calls(t);
            t.stop_reason = Some("pause_turn".into());
        }
        6 => {
            t.stop_reason = Some("refusal".into());
            t.stop_details =
                Some(json!({"type": "refusal", "category": "cyber", "explanation": "chaos"}));
        }
        7 => t.stop_reason = Some("model_context_window_exceeded".into()),
        _ => t.stop_reason = Some((*r.pick(&["compaction_needed", "", "END_TURN"])).into()),
    }
}
