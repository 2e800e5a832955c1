use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::sim::script::Script;
use crate::tools::policy::Policy;
use crate::tools::Registry;

/// The tools of the built-in `coding` set, which the property test gives the model.
const CODING: [&str; 6] = crate::tools::CODING_TOOLS;

/// A request declaring the coding tools in the protocol's own shape (made once: the
/// registry compiles every schema).
fn request(protocol: Protocol) -> Value {
    static MADE: std::sync::OnceLock<Vec<(Protocol, Value)>> = std::sync::OnceLock::new();
    let made = MADE.get_or_init(|| {
        Protocol::ALL
            .iter()
            .map(|p| (*p, make_request(*p)))
            .collect()
    });
    made.iter()
        .find(|(p, _)| *p == protocol)
        .map(|(_, v)| v.clone())
        .expect("every protocol")
}

fn make_request(protocol: Protocol) -> Value {
    let names: Vec<String> = CODING.iter().map(|s| s.to_string()).collect();
    let decls = Registry::builtin()
        .toolset(&names, Arc::new(Policy::default()))
        .declarations();
    let tools: Vec<Value> = decls
        .iter()
        .map(|d| match protocol {
            Protocol::Anthropic => d.clone(),
            Protocol::OpenaiResponses => json!({
                "type": "function", "name": d["name"], "description": d["description"],
                "parameters": d["input_schema"],
            }),
            Protocol::OpenaiChat => json!({
                "type": "function",
                "function": {"name": d["name"], "description": d["description"], "parameters": d["input_schema"]},
            }),
        })
        .collect();
    json!({"model": "m", "max_tokens": 1024, "tools": tools, "messages": []})
}

fn chaos(seed: u64) -> Chaos {
    Chaos {
        outside: Some("/tmp/chaos-outside".into()),
        ..Chaos::with_seed(seed)
    }
}

fn play(c: &Chaos, protocol: Protocol, step: usize) -> ScriptTurn {
    turn(c, protocol, &request(protocol), "task-1", step)
}

fn as_json(t: &ScriptTurn) -> Value {
    serde_json::to_value(t).expect("a turn serializes")
}

/// Every call of a turn: (tool name, input).
fn calls_of(t: &ScriptTurn) -> Vec<(String, Value)> {
    t.content
        .iter()
        .filter_map(|b| match b {
            Block::ToolUse(u) => Some((u.name.clone(), u.input.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn the_same_seed_key_and_step_play_the_same_turn() {
    for protocol in Protocol::ALL {
        for seed in 0..50 {
            let c = chaos(seed);
            for step in 0..4 {
                assert_eq!(
                    as_json(&play(&c, protocol, step)),
                    as_json(&play(&c, protocol, step)),
                    "seed {seed} step {step} {protocol:?}"
                );
            }
        }
    }
}

#[test]
fn steps_seeds_and_keys_differ() {
    let c = chaos(7);
    let p = Protocol::Anthropic;
    let turns: BTreeSet<String> = (0..7)
        .map(|s| as_json(&play(&c, p, s)).to_string())
        .collect();
    assert_eq!(
        turns.len(),
        7,
        "every step of a conversation is its own turn"
    );
    let other = as_json(&play(&chaos(8), p, 0));
    assert_ne!(as_json(&play(&c, p, 0)), other);
    let elsewhere = as_json(&turn(&c, p, &request(p), "task-2", 0));
    assert_ne!(as_json(&play(&c, p, 0)), elsewhere);
}

#[test]
fn the_last_turn_ends_the_conversation_with_text() {
    for seed in 0..200 {
        let c = Chaos {
            misbehave_percent: 0,
            ..chaos(seed)
        };
        let t = play(&c, Protocol::Anthropic, c.max_turns as usize - 1);
        assert!(calls_of(&t).is_empty(), "seed {seed}: {t:?}");
        assert!(t.stop_reason.is_none(), "the default stop: end_turn");
        let later = play(&c, Protocol::Anthropic, c.max_turns as usize + 5);
        assert!(calls_of(&later).is_empty());
    }
}

#[test]
fn only_declared_tools_are_called_unless_misbehaving_and_none_when_tools_are_off() {
    for seed in 0..200 {
        let c = Chaos {
            misbehave_percent: 0,
            ..chaos(seed)
        };
        for step in 0..3 {
            for (name, _) in calls_of(&play(&c, Protocol::OpenaiChat, step)) {
                assert!(CODING.contains(&name.as_str()), "{name}");
            }
        }
        let mut off = request(Protocol::Anthropic);
        off["tool_choice"] = json!({"type": "none"});
        let t = turn(&c, Protocol::Anthropic, &off, "k", 0);
        assert!(calls_of(&t).is_empty());
    }
}

/// Every generated call over many seeds, as (tool, input).
fn many_calls(c: impl Fn(u64) -> Chaos) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for seed in 0..400 {
        for step in 0..4 {
            out.extend(calls_of(&play(&c(seed), Protocol::Anthropic, step)));
        }
    }
    out
}

#[test]
fn inputs_cover_every_category() {
    let all = many_calls(chaos);
    let paths: Vec<&str> = all
        .iter()
        .filter_map(|(_, i)| i.get("path").and_then(Value::as_str))
        .collect();
    let has = |what: &str, f: &dyn Fn(&str) -> bool| {
        assert!(
            paths.iter().any(|p| f(p)),
            "no {what} path among {}",
            paths.len()
        );
    };
    has("root file", &|p| p == "newfile.py" || p == ".gitignore");
    has("deep new", &|p| {
        p.matches('/').count() >= 3 && p.contains("deep_")
    });
    has("..", &|p| p.starts_with("../") || p.contains("/../"));
    has("absolute into outside", &|p| {
        p.starts_with("/tmp/chaos-outside/")
    });
    has("absolute system (read)", &|p| p == "/etc/hostname");
    has("through a link", &|p| p.starts_with("chaos_link_"));
    has("empty", &|p| p.is_empty());
    has("huge", &|p| p.len() > 255);
    has("planted git config", &|p| p == ".git/config");
    let contents: Vec<&str> = all
        .iter()
        .filter_map(|(_, i)| i.get("content").and_then(Value::as_str))
        .collect();
    assert!(contents.iter().any(|s| s.is_empty()), "an empty string");
    assert!(
        contents.iter().any(|s| s.len() > 32_768),
        "a huge string (up to max_string)"
    );
    assert!(contents
        .iter()
        .all(|s| s.len() as u64 <= chaos(0).max_string));
    assert!(contents.iter().any(|s| s.contains("hook_fsmonitor")));
    assert!(contents.iter().any(|s| s.contains("ck_unittest")));
    // writes never aim at system paths
    for (tool, input) in &all {
        if let (true, Some(p)) = (
            tool == "write_file" || tool == "edit_file",
            input.get("path").and_then(Value::as_str),
        ) {
            assert!(
                !p.starts_with('/') || p.starts_with("/tmp/chaos-outside"),
                "{tool} aims at {p}"
            );
        }
    }
    // a link made by bash, then written through in the same turn
    let commands: Vec<&str> = all
        .iter()
        .filter_map(|(_, i)| i.get("command").and_then(Value::as_str))
        .collect();
    assert!(commands
        .iter()
        .any(|c| c.starts_with("ln -sfn '/tmp/chaos-outside' chaos_link_")));
    assert!(commands
        .iter()
        .any(|c| c.contains("> '/tmp/chaos-outside/sh_abs_")));
    assert!(commands.iter().any(|c| c.contains("head -c 200000")));
    assert!(commands
        .iter()
        .any(|c| c.contains("ck_unittest') ") || c.contains("ck_unittest').write_text")));
    assert!(commands.iter().any(|c| c.is_empty()));
    // the vocabulary is harmless
    for c in &commands {
        for bad in [
            "rm ",
            "mv ",
            "dd ",
            "chown",
            "kill",
            "curl",
            "wget",
            "> /etc",
            "git push",
            "git reset",
        ] {
            assert!(!c.contains(bad), "{c}");
        }
    }
}

#[test]
fn invalid_inputs_break_the_schema_in_every_way() {
    let all = many_calls(|s| Chaos {
        invalid_percent: 100,
        ..chaos(s)
    });
    fn read<'a>(all: &'a [(String, Value)], name: &'a str) -> impl Iterator<Item = &'a Value> {
        all.iter().filter(move |(t, _)| t == name).map(|(_, i)| i)
    }
    assert!(
        read(&all, "read_file").any(|i| i.is_object() && i.get("path").is_none()),
        "missing required"
    );
    assert!(
        all.iter().any(|(_, i)| i.get("chaos_extra").is_some()),
        "extra field"
    );
    assert!(all.iter().any(|(_, i)| !i.is_object()), "not an object");
    assert!(
        read(&all, "read_file").any(|i| i.get("path").is_some_and(|p| !p.is_string())),
        "wrong type"
    );
    let valid = many_calls(|s| Chaos {
        invalid_percent: 0,
        misbehave_percent: 0,
        ..chaos(s)
    });
    assert!(valid
        .iter()
        .all(|(_, i)| i.is_object() && i.get("chaos_extra").is_none()));
}

#[test]
fn calls_repeat_and_text_mixes_with_them() {
    let mut repeated = false;
    let mut mixed = false;
    let mut thinking = false;
    for seed in 0..300 {
        let c = chaos(seed);
        let t = play(&c, Protocol::Anthropic, 1);
        let calls = calls_of(&t);
        repeated |= (1..calls.len()).any(|i| calls[..i].contains(&calls[i]));
        let first_call = t
            .content
            .iter()
            .position(|b| matches!(b, Block::ToolUse(_)));
        let last_text = t.content.iter().rposition(|b| matches!(b, Block::Text(_)));
        mixed |= matches!((first_call, last_text), (Some(c), Some(x)) if x > c);
        thinking |= t.content.iter().any(|b| matches!(b, Block::Thinking(_)));
    }
    assert!(repeated && mixed && thinking);
}

/// The stop a turn plays, as the protocol sends it.
fn stop_label(t: &ScriptTurn, protocol: Protocol) -> String {
    match protocol {
        Protocol::Anthropic => t.stop_reason.clone().unwrap_or_else(|| "default".into()),
        Protocol::OpenaiResponses => match (&t.status, &t.incomplete_reason, &t.error) {
            (Some(s), _, Some(e)) => format!("{s}:{}", e.code),
            (Some(s), Some(r), _) => format!("{s}:{r}"),
            (Some(s), None, _) => s.clone(),
            _ => t.stop_reason.clone().unwrap_or_else(|| "default".into()),
        },
        Protocol::OpenaiChat => t
            .finish_reason
            .clone()
            .or_else(|| t.stop_reason.clone())
            .unwrap_or_else(|| "default".into()),
    }
}

#[test]
fn every_documented_stop_occurs_over_a_range_of_seeds() {
    let expected: [(Protocol, &[&str]); 3] = [
        (
            Protocol::Anthropic,
            &[
                "default",
                "end_turn",
                "tool_use",
                "max_tokens",
                "stop_sequence",
                "pause_turn",
                "refusal",
                "model_context_window_exceeded",
                "compaction_needed",
                "",
            ],
        ),
        (
            Protocol::OpenaiResponses,
            &[
                "default",
                "max_tokens",
                "incomplete:content_filter",
                "incomplete:chaos_reason",
                "refusal",
                "failed:server_error",
                "failed:rate_limit_exceeded",
                "failed:invalid_prompt",
                "queued",
                "in_progress",
                "cancelled",
                "stop_sequence",
            ],
        ),
        (
            Protocol::OpenaiChat,
            &[
                "default",
                "stop",
                "length",
                "tool_calls",
                "content_filter",
                "null",
                "function_call",
                "max_tokens",
                "eos",
            ],
        ),
    ];
    for (protocol, stops) in expected {
        let mut seen = BTreeSet::new();
        for seed in 0..1500 {
            seen.insert(stop_label(&play(&chaos(seed), protocol, 0), protocol));
        }
        for s in stops {
            assert!(seen.contains(*s), "{protocol:?}: no {s:?} in {seen:?}");
        }
    }
}

#[test]
fn misbehaviours_and_faults_all_occur() {
    let (mut dup, mut missing, mut empty, mut broken, mut undeclared) = (0, 0, 0, 0, 0);
    let (mut no_usage, mut raw, mut cut, mut slow, mut omit_ids) = (0, 0, 0, 0, 0);
    let mut statuses = BTreeSet::new();
    let mut disconnects = 0;
    for seed in 0..1500 {
        for protocol in Protocol::ALL {
            let t = play(&chaos(seed), protocol, 0);
            let ids: Vec<&str> = t
                .content
                .iter()
                .filter_map(|b| match b {
                    Block::ToolUse(u) => u.id.as_deref(),
                    _ => None,
                })
                .collect();
            dup += usize::from((1..ids.len()).any(|i| ids[..i].contains(&ids[i])));
            empty += usize::from(ids.contains(&""));
            missing += usize::from(t.content.iter().any(|b| {
                matches!(b, Block::Raw(v) if v.get("id").is_none() && v.get("call_id").is_none() && v.get("type") != Some(&json!("chaos_future_block")))
            }));
            broken += usize::from(
                t.content
                    .iter()
                    .any(|b| matches!(b, Block::ToolUse(u) if u.arguments.is_some())),
            );
            undeclared += usize::from(
                calls_of(&t)
                    .iter()
                    .any(|(n, _)| !CODING.contains(&n.as_str())),
            );
            no_usage += usize::from(t.omit_usage);
            raw += usize::from(t.raw_body.is_some());
            cut += usize::from(t.truncate_body);
            slow += usize::from(t.body_delay.is_some());
            omit_ids += usize::from(t.omit_call_ids);
            for f in &t.faults {
                statuses.extend(f.status);
                disconnects += usize::from(f.disconnect);
                for d in [f.retry_after, f.reset_after].into_iter().flatten() {
                    assert!(d.0 <= chaos(seed).max_delay.0, "{d:?}");
                }
            }
        }
    }
    for (what, n) in [
        ("duplicate ids", dup),
        ("missing ids", missing),
        ("empty ids", empty),
        ("broken arguments", broken),
        ("undeclared tools", undeclared),
        ("missing usage", no_usage),
        ("raw bodies", raw),
        ("truncated bodies", cut),
        ("slow bodies", slow),
        ("chat calls without ids", omit_ids),
        ("disconnects", disconnects),
    ] {
        assert!(n > 0, "no {what}");
    }
    for s in [429, 500, 529, 400, 408] {
        assert!(statuses.contains(&s), "no {s} in {statuses:?}");
    }
}

#[test]
fn knobs_at_zero_make_a_well_behaved_model() {
    for seed in 0..200 {
        let c = Chaos {
            fault_percent: 0,
            misbehave_percent: 0,
            ..chaos(seed)
        };
        for protocol in Protocol::ALL {
            let t = play(&c, protocol, 0);
            assert!(t.faults.is_empty() && t.raw_body.is_none() && !t.omit_usage);
            assert!(t.stop_reason.is_none() && t.finish_reason.is_none() && t.status.is_none());
            assert!(
                !calls_of(&t).is_empty(),
                "a turn before the last calls tools"
            );
        }
    }
}

#[test]
fn a_script_holds_turns_or_chaos_and_chaos_parses_inline() {
    let s: Script = serde_yaml::from_str("chaos: { seed: 7, max_turns: 3, outside: /tmp/x }\n")
        .expect("parses");
    assert_eq!(s.check(), Ok(()));
    let c = s.chaos.as_ref().expect("chaos");
    assert_eq!((c.seed, c.max_turns, c.max_calls), (7, 3, 4));
    let p = Protocol::OpenaiResponses;
    let played = s.turn_for(0, p, &request(p), "k");
    assert!(played.is_some_and(|t| !t.content.is_empty()));
    let both: Script =
        serde_yaml::from_str("chaos: { seed: 1 }\nturns: [ { content: [ { text: x } ] } ]\n")
            .expect("parses");
    assert!(both.check().unwrap_err().0.contains("not both"));
    let neither: Script = serde_yaml::from_str("latency: 1s\n").expect("parses");
    assert!(neither.check().unwrap_err().0.contains("chaos"));
    let unknown = serde_yaml::from_str::<Script>("chaos: { seed: 1, sead: 2 }\n");
    assert!(unknown.is_err());
}

/// Tool schemas are outside data (an MCP server's, any client's of `agentbatch sim`):
/// extreme bounds neither panic nor fill memory.
#[test]
fn hostile_schemas_neither_panic_nor_grow_without_bound() {
    let schema = json!({"type": "object", "properties": {
        "xs": {"type": "array", "minItems": u64::MAX, "maxItems": u64::MAX, "items": {"type": "string"}},
        "n": {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX},
        "m": {"type": "number", "minimum": i64::MAX, "maximum": i64::MIN},
        "deep": {"type": "array", "minItems": 100000000u64, "items": {"type": "array", "minItems": 100000000u64}},
    }, "required": ["xs", "n", "m", "deep"]});
    let req = json!({"model": "m", "max_tokens": 1024, "messages": [],
        "tools": [{"name": "odd", "description": "d", "input_schema": schema}]});
    for seed in 0..200 {
        let c = Chaos {
            misbehave_percent: 0,
            fault_percent: 0,
            invalid_percent: 0,
            max_string: 1024,
            ..chaos(seed)
        };
        for step in 0..3 {
            let t = turn(&c, Protocol::Anthropic, &req, "k", step);
            // At most 4 calls of 16 + 16 x 16 values of 1 KiB each.
            assert!(
                as_json(&t).to_string().len() < 4 << 20,
                "seed {seed} step {step}"
            );
        }
    }
}

#[test]
fn some_summaries_are_long_odd_or_call_a_tool_and_every_one_keeps_its_marker() {
    let mut req = request(Protocol::Anthropic);
    let result = "r".repeat(3000);
    req["messages"] = json!([
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "read_file", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": result},
            {"type": "text", "text": crate::vocab::context::SUMMARY_REQUEST}]},
    ]);
    let script = Script {
        latency: None,
        repeat_last: false,
        turns: Vec::new(),
        chaos: Some(Chaos {
            misbehave_percent: 60,
            ..chaos(5)
        }),
        context_window: None,
        summary: None,
    };
    let (mut long, mut odd, mut calls) = (0, 0, 0);
    for n in 0..200 {
        let key = format!("task-{n}");
        let t = script.summary_for(Protocol::Anthropic, &req, &key, 1);
        assert_eq!(
            format!("{t:?}"),
            format!(
                "{:?}",
                script.summary_for(Protocol::Anthropic, &req, &key, 1)
            ),
            "a retry gets the same answer"
        );
        let texts: Vec<&String> = t
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Text(s) => Some(s),
                _ => None,
            })
            .collect();
        assert!(
            texts
                .last()
                .is_some_and(|s| s.contains("agentbatch-sim summary: steps=1")),
            "{t:?}"
        );
        long += usize::from(texts.iter().map(|s| s.len()).sum::<usize>() > 2000);
        odd += usize::from(t.stop_reason.is_some());
        calls += usize::from(t.content.iter().any(|b| matches!(b, Block::ToolUse(_))));
    }
    assert!(long > 20 && odd > 20 && calls > 20, "{long} {odd} {calls}");
}
