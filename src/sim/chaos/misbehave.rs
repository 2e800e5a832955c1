//! The chaos model's misbehaviours: the server failing first (faults), and answers
//! that are odd for the protocol (stops of every kind, duplicate, missing or empty call
//! ids, broken arguments, undeclared tools, missing usage, usage figures that
//! contradict each other, damaged bodies, streams cut inside an event).

use serde_json::json;

use super::{call, delay, Chaos, Declared, Rng};
use crate::model::Protocol;
use crate::sim::protocol::served;
use crate::sim::script::{
    Block, CutInside, Fault, MidStream, ScriptTurn, ToolUseScript, UsageScript,
};

/// One failed attempt of the kinds the simulator plays, with short waits.
pub(super) fn fault(r: &mut Rng, c: &Chaos, protocol: Protocol) -> Fault {
    let mut f = Fault::default();
    match r.pick(served(protocol).chaos_fault_kinds()) {
        0 => {
            f.status = Some(429);
            f.retry_after = Some(delay(r, c));
        }
        1 => {
            f.status = Some(429);
            f.reset_after = Some(delay(r, c));
        }
        2 => {
            f.status = Some(*r.pick(&[500, 502, 503]));
            // without a retry-after the runner backs off half a second: keep it rare
            if r.percent(70) {
                f.retry_after = Some(delay(r, c));
            }
        }
        3 => {
            f.status = Some(529);
            f.retry_after = Some(delay(r, c));
        }
        4 => f.disconnect = true,
        5 => {
            f.status = Some(500);
            f.should_retry = Some(false);
        }
        6 => {
            f.status = Some(*r.pick(&[400, 401, 403, 404, 413]));
            f.message = Some("chaos: a request the server refuses".into());
        }
        7 => {
            f.status = Some(408);
            f.retry_after = Some(delay(r, c));
        }
        8 => {
            f.status = Some(429);
        }
        _ => {
            f.status = Some(429);
            f.error_type = Some("insufficient_quota".into());
            f.code = Some("insufficient_quota".into());
        }
    }
    f
}

/// A streamed answer that breaks after a few events: an error event (Responses: or
/// `response.failed`), a cut, or a short stall before the cut (never forever, so a
/// property test ends).
pub(super) fn mid_stream(r: &mut Rng, c: &Chaos, protocol: Protocol) -> Fault {
    let kind = *r.pick(served(protocol).chaos_mid_stream_kinds());
    Fault {
        mid_stream: Some(kind),
        after_events: r.percent(80).then(|| r.between(0, 40)),
        stall_for: (kind == MidStream::Stall).then(|| delay(r, c)),
        cut_inside: (kind == MidStream::Cut).then(|| cut_place(r)).flatten(),
        ..Fault::default()
    }
}

/// Where a cut falls: between two events (the connection breaks), or inside one (its
/// `data:` line, a character, right after `data:`) before a clean end of the body.
fn cut_place(r: &mut Rng) -> Option<CutInside> {
    *r.pick(&[
        None,
        Some(CutInside::MidData),
        Some(CutInside::MidCharacter),
        Some(CutInside::AfterData),
    ])
}

/// Usage figures that contradict each other or the request (see `sim::contradict`) on
/// half as many turns as misbehave, drawn from a stream of numbers of their own so
/// that the other draws of a seed stay as they were.
pub(super) fn contradict_usage(r: &mut Rng, c: &Chaos, t: &mut ScriptTurn) {
    if r.percent(c.misbehave_percent / 2) {
        t.contradict_usage = true;
    }
}

/// The misbehaviours, weighted: odd stops are the most common.
#[derive(Debug, Clone, Copy)]
enum Mis {
    Stop,
    DuplicateIds,
    MissingId,
    EmptyId,
    BrokenArguments,
    UndeclaredTool,
    OmitUsage,
    RawBody,
    TruncateBody,
    SlowBody,
    Usage,
    OddBlocks,
}

const MISBEHAVIOURS: [Mis; 15] = [
    Mis::Stop,
    Mis::Stop,
    Mis::Stop,
    Mis::Stop,
    Mis::DuplicateIds,
    Mis::MissingId,
    Mis::EmptyId,
    Mis::BrokenArguments,
    Mis::UndeclaredTool,
    Mis::OmitUsage,
    Mis::RawBody,
    Mis::TruncateBody,
    Mis::SlowBody,
    Mis::Usage,
    Mis::OddBlocks,
];

fn tool_uses(t: &mut ScriptTurn) -> Vec<&mut ToolUseScript> {
    t.content
        .iter_mut()
        .filter_map(|b| match b {
            Block::ToolUse(u) => Some(u),
            _ => None,
        })
        .collect()
}

/// A made-up call id in the protocol's style.
fn made_id(r: &mut Rng, protocol: Protocol) -> String {
    let prefix = served(protocol).chaos_id_prefix();
    format!("{prefix}{:012x}", r.next() & 0xffff_ffff_ffff)
}

pub(super) fn misbehave(
    r: &mut Rng,
    c: &Chaos,
    protocol: Protocol,
    tools: &[Declared],
    t: &mut ScriptTurn,
) {
    match *r.pick(&MISBEHAVIOURS) {
        Mis::Stop => odd_stop(r, protocol, t),
        Mis::DuplicateIds => {
            let id = made_id(r, protocol);
            let single = match tool_uses(t).as_slice() {
                [only] => Some((*only).clone()),
                _ => None,
            };
            if let Some(twin) = single {
                t.content.push(Block::ToolUse(twin));
            }
            for u in tool_uses(t).into_iter().take(2) {
                u.id = Some(id.clone());
            }
        }
        Mis::MissingId => {
            if served(protocol).chaos_omits_call_ids(r) {
                t.omit_call_ids = true;
                return;
            }
            let Some(i) = t
                .content
                .iter()
                .position(|b| matches!(b, Block::ToolUse(_)))
            else {
                return;
            };
            if let Block::ToolUse(u) = &t.content[i] {
                let raw = served(protocol).chaos_call_without_id(i, u);
                t.content[i] = Block::Raw(raw);
            }
        }
        Mis::EmptyId => {
            if let Some(u) = tool_uses(t).into_iter().next() {
                u.id = Some(String::new());
            }
        }
        Mis::BrokenArguments => {
            let broken = *r.pick(&[
                "{\"path\": ",
                "",
                "not json",
                "[1, 2]",
                "null",
                "\"a string\"",
                "{\"a\": 1}}",
                "{'single': 'quotes'}",
            ]);
            if let Some(u) = tool_uses(t).into_iter().next() {
                u.arguments = Some(broken.to_string());
                if let Some(input) = served(protocol).chaos_broken_input(broken) {
                    u.input = input;
                }
            }
        }
        Mis::UndeclaredTool => {
            if t.stop_reason.as_deref() == Some("pause_turn") {
                return;
            }
            let name = *r.pick(&["chaos_undeclared", "Bash", "read-file", "", "bash "]);
            t.content.push(call(name, json!({"x": 1})));
        }
        Mis::OmitUsage => t.omit_usage = true,
        Mis::RawBody => t.raw_body = Some(raw_body(r, protocol)),
        Mis::TruncateBody => t.truncate_body = true,
        Mis::SlowBody => t.body_delay = Some(delay(r, c)),
        Mis::Usage => {
            let huge_output = r.percent(40);
            t.usage = Some(UsageScript {
                input_tokens: None,
                output_tokens: huge_output.then_some(r.between(100_000, 10_000_000)),
                cache_read_input_tokens: Some(r.between(0, 4000)),
                cache_creation_input_tokens: Some(r.between(0, 4000)),
                reasoning_tokens: Some(r.between(0, 100)),
            });
        }
        Mis::OddBlocks => {
            if tools.is_empty() || !served(protocol).chaos_server_tools() {
                t.content.push(Block::Text(String::new()));
                return;
            }
            let id = format!("srvtoolu_chaos_{}", r.below(1000));
            t.content.push(Block::Raw(json!({
                "type": "server_tool_use", "id": id, "name": "web_search", "input": {"query": "chaos"},
            })));
            t.content.push(Block::Raw(json!({
                "type": "web_search_tool_result", "tool_use_id": id, "content": [],
            })));
            if r.percent(50) {
                t.content.push(Block::Raw(
                    json!({"type": "chaos_future_block", "data": {"n": 1}}),
                ));
            }
        }
    }
}

/// A stop the protocol documents (or an unknown one), sometimes at odds with the
/// content: `end_turn` with calls, `tool_use` without.
pub(super) fn odd_stop(r: &mut Rng, protocol: Protocol, t: &mut ScriptTurn) {
    served(protocol).chaos_odd_stop(r, t);
}

/// A 200 body that is not the answer: not JSON, the wrong JSON, or the protocol's shape
/// with a part missing.
fn raw_body(r: &mut Rng, protocol: Protocol) -> String {
    let shaped = served(protocol).chaos_shaped_body();
    (*r.pick(&[
        "not json at all",
        "",
        "[]",
        "null",
        r#"{"not": "a message"}"#,
        "{\"truncated\": ",
        shaped,
        shaped,
    ]))
    .to_string()
}
