//! Checking a simulator script against what serde cannot check: turns or chaos, faults
//! with a kind, and every number under its bound (the bounds are in `bounds.rs`, which
//! the script's schema reads too).

use super::bounds::*;
use super::script::{Block, Chaos, Fault, MidStream, Script, ScriptTurn, UsageScript};

impl Script {
    /// Checks what serde cannot: a script needs turns or chaos (not both), faults need a
    /// status, and every number stays under its bound (`bounds.rs`).
    pub fn check(&self) -> Result<(), OutOfBounds> {
        match (&self.chaos, self.turns.is_empty()) {
            (None, true) => {
                return Err(
                    "a simulator script needs at least one entry in `turns`, or `chaos: {seed: N}`"
                        .into(),
                )
            }
            (Some(_), false) => {
                return Err(
                    "a simulator script has either `turns` or `chaos`, not both (the chaos model generates every turn)"
                        .into(),
                )
            }
            (Some(_), true) if self.repeat_last => {
                return Err(
                    "`repeat_last` has no meaning with `chaos`: the chaos model never runs out of turns"
                        .into(),
                )
            }
            _ => {}
        }
        let named = self
            .turns
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("turns[{i}]"), t));
        for (at, t) in named.chain(self.summary.as_deref().map(|t| ("summary".to_string(), t))) {
            for f in &t.faults {
                if (f.status, f.disconnect, f.mid_stream, f.batch_expire)
                    == (None, false, None, false)
                {
                    return Err(format!(
                        "{at}.faults: a fault needs `status: <code>`, `disconnect: true`, `mid_stream: <kind>` or `batch_expire: true`"
                    )
                    .into());
                }
            }
            for b in &t.content {
                if let Block::ToolUse(u) = b {
                    if !u.input.is_object() {
                        return Err(format!(
                            "{at}.content: tool_use `{}` input must be a map",
                            u.name
                        )
                        .into());
                    }
                }
            }
        }
        numbers(self)
    }
}

/// Checks every number of a script against its bound.
fn numbers(script: &Script) -> Result<(), OutOfBounds> {
    delay_at_most("latency", script.latency, MAX_DELAY)?;
    at_most("turns", script.turns.len() as u64, MAX_TURNS as u64)?;
    for (i, t) in script.turns.iter().enumerate() {
        check_turn(&format!("turns[{i}]"), t)?;
    }
    if let Some(t) = &script.summary {
        check_turn("summary", t)?;
    }
    if let Some(c) = &script.chaos {
        check_chaos(c)?;
    }
    Ok(())
}

fn check_turn(at: &str, t: &ScriptTurn) -> Result<(), OutOfBounds> {
    delay_at_most(&format!("{at}.latency"), t.latency, MAX_DELAY)?;
    delay_at_most(&format!("{at}.body_delay"), t.body_delay, MAX_DELAY)?;
    if let Some(u) = &t.usage {
        check_usage(&format!("{at}.usage"), u)?;
    }
    at_most(
        &format!("{at}.faults (how many)"),
        t.faults.len() as u64,
        MAX_FAULTS as u64,
    )?;
    for (j, f) in t.faults.iter().enumerate() {
        check_fault(&format!("{at}.faults[{j}]"), f)?;
    }
    Ok(())
}

fn check_usage(at: &str, u: &UsageScript) -> Result<(), OutOfBounds> {
    for (name, v) in [
        ("input_tokens", u.input_tokens),
        ("output_tokens", u.output_tokens),
        ("cache_read_input_tokens", u.cache_read_input_tokens),
        ("cache_creation_input_tokens", u.cache_creation_input_tokens),
        ("reasoning_tokens", u.reasoning_tokens),
    ] {
        if let Some(v) = v {
            at_most(&format!("{at}.{name}"), v, MAX_TOKENS)?;
        }
    }
    Ok(())
}

fn check_fault(at: &str, f: &Fault) -> Result<(), OutOfBounds> {
    if let Some(s) = f.status {
        if !STATUSES.contains(&s) {
            return Err(format!(
                "{at}.status: {s} is not an error status ({}-{})",
                STATUSES.start(),
                STATUSES.end()
            )
            .into());
        }
    }
    delay_at_most(&format!("{at}.retry_after"), f.retry_after, MAX_HEADER_WAIT)?;
    delay_at_most(&format!("{at}.reset_after"), f.reset_after, MAX_HEADER_WAIT)?;
    if f.batch_expire && (f.status.is_some() || f.disconnect || f.mid_stream.is_some()) {
        return Err(format!(
            "{at}.batch_expire: a fault is one of `status`, `disconnect`, `mid_stream` or `batch_expire`"
        )
        .into());
    }
    check_mid_stream(at, f)
}

/// A mid-stream fault is a 200 that breaks later: it has no status and no retry advice
/// in its headers, and its own fields mean nothing without it.
fn check_mid_stream(at: &str, f: &Fault) -> Result<(), OutOfBounds> {
    let Some(kind) = f.mid_stream else {
        for (field, set) in [
            ("after_events", f.after_events.is_some()),
            ("stall_for", f.stall_for.is_some()),
            ("cut_inside", f.cut_inside.is_some()),
        ] {
            if set {
                return Err(format!("{at}.{field}: only with `mid_stream`").into());
            }
        }
        return Ok(());
    };
    if f.status.is_some() || f.disconnect {
        return Err(format!(
            "{at}.mid_stream: a fault is one of `status`, `disconnect` or `mid_stream` (a mid-stream fault answers 200)"
        )
        .into());
    }
    for (field, set) in [
        ("retry_after", f.retry_after.is_some()),
        ("reset_after", f.reset_after.is_some()),
        ("should_retry", f.should_retry.is_some()),
    ] {
        if set {
            return Err(format!(
                "{at}.{field}: not with `mid_stream` (its headers are a 200's, sent before the failure)"
            )
            .into());
        }
    }
    if f.stall_for.is_some() && kind != MidStream::Stall {
        return Err(format!("{at}.stall_for: only with `mid_stream: stall`").into());
    }
    if f.cut_inside.is_some() && kind != MidStream::Cut {
        return Err(format!("{at}.cut_inside: only with `mid_stream: cut`").into());
    }
    if let Some(n) = f.after_events {
        at_most(&format!("{at}.after_events"), n, MAX_EVENTS)?;
    }
    delay_at_most(&format!("{at}.stall_for"), f.stall_for, MAX_DELAY)
}

fn check_chaos(c: &Chaos) -> Result<(), OutOfBounds> {
    at_most(
        "chaos.max_turns",
        u64::from(c.max_turns),
        u64::from(MAX_CHAOS_TURNS),
    )?;
    if c.max_turns == 0 {
        return Err(
            "chaos.max_turns: 0 is under the lower bound of 1 (the final answer is a turn)".into(),
        );
    }
    at_most(
        "chaos.max_calls",
        u64::from(c.max_calls),
        u64::from(MAX_CHAOS_CALLS),
    )?;
    for (name, v) in [
        ("fault_percent", c.fault_percent),
        ("misbehave_percent", c.misbehave_percent),
        ("invalid_percent", c.invalid_percent),
    ] {
        at_most(
            &format!("chaos.{name}"),
            u64::from(v),
            u64::from(MAX_PERCENT),
        )?;
    }
    at_most("chaos.max_string", c.max_string, MAX_STRING)?;
    delay_at_most("chaos.max_delay", Some(c.max_delay), MAX_CHAOS_DELAY)?;
    if let Some(o) = &c.outside {
        at_most("chaos.outside (length)", o.len() as u64, MAX_PATH as u64)?;
        if !o.starts_with('/') {
            return Err(format!(
                "chaos.outside: \"{o}\" is not an absolute path (the model writes there by absolute path)"
            ).into());
        }
        if o.chars().any(|ch| "'\"$`\\\0\n".contains(ch)) {
            return Err(format!(
                "chaos.outside: \"{}\" holds a quote, `$`, a backquote, a backslash, NUL or newline (it goes into shell commands)",
                o.escape_debug()
            ).into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Script {
        serde_yaml::from_str(yaml).expect("script parses")
    }

    #[test]
    fn every_number_over_its_bound_is_refused_by_field_value_and_bound() {
        let cases = [
            (
                "latency: 11m\nturns: [ {} ]\n",
                "latency: 11m is over the upper bound of 10m",
            ),
            (
                "turns: [ { usage: { output_tokens: 1000000001 } } ]\n",
                "turns[0].usage.output_tokens: 1000000001 is over the upper bound of 1000000000",
            ),
            (
                "turns: [ {}, { usage: { input_tokens: 18446744073709551615 } } ]\n",
                "turns[1].usage.input_tokens: 18446744073709551615 is over",
            ),
            (
                "turns: [ { faults: [ { status: 429, retry_after: 8days } ] } ]\n",
                "turns[0].faults[0].retry_after: 8days is over the upper bound of 7days",
            ),
            (
                "turns: [ { faults: [ { status: 429, reset_after: 169h } ] } ]\n",
                "turns[0].faults[0].reset_after",
            ),
            (
                "turns: [ { body_delay: 601s } ]\n",
                "turns[0].body_delay: 10m 1s is over",
            ),
            (
                "turns: [ { faults: [ { status: 600 } ] } ]\n",
                "turns[0].faults[0].status: 600 is not an error status (400-599)",
            ),
            (
                "chaos: { seed: 1, max_turns: 1001 }\n",
                "chaos.max_turns: 1001 is over the upper bound of 1000",
            ),
            (
                "chaos: { seed: 1, max_calls: 65 }\n",
                "chaos.max_calls: 65 is over the upper bound of 64",
            ),
            (
                "chaos: { seed: 1, fault_percent: 101 }\n",
                "chaos.fault_percent: 101 is over the upper bound of 100",
            ),
            (
                "chaos: { seed: 1, misbehave_percent: 500 }\n",
                "chaos.misbehave_percent: 500",
            ),
            (
                "chaos: { seed: 1, invalid_percent: 101 }\n",
                "chaos.invalid_percent: 101",
            ),
            (
                "chaos: { seed: 1, max_string: 8388609 }\n",
                "chaos.max_string: 8388609 is over the upper bound of 8388608",
            ),
            (
                "chaos: { seed: 1, max_delay: 11s }\n",
                "chaos.max_delay: 11s is over the upper bound of 10s",
            ),
            (
                "chaos: { seed: 1, outside: rel/dir }\n",
                "not an absolute path",
            ),
            ("chaos: { seed: 1, max_turns: 0 }\n", "lower bound of 1"),
            (
                "turns: [ { faults: [ { mid_stream: cut, after_events: 1000001 } ] } ]\n",
                "turns[0].faults[0].after_events: 1000001 is over the upper bound of 1000000",
            ),
            (
                "turns: [ { faults: [ { mid_stream: stall, stall_for: 11m } ] } ]\n",
                "turns[0].faults[0].stall_for: 11m is over the upper bound of 10m",
            ),
            (
                "turns: [ { faults: [ { mid_stream: cut, stall_for: 1s } ] } ]\n",
                "turns[0].faults[0].stall_for: only with `mid_stream: stall`",
            ),
            (
                "turns: [ { faults: [ { mid_stream: error, cut_inside: mid_data } ] } ]\n",
                "turns[0].faults[0].cut_inside: only with `mid_stream: cut`",
            ),
            (
                "turns: [ { faults: [ { status: 500, after_events: 3 } ] } ]\n",
                "turns[0].faults[0].after_events: only with `mid_stream`",
            ),
            (
                "turns: [ { faults: [ { status: 529, mid_stream: error } ] } ]\n",
                "turns[0].faults[0].mid_stream: a fault is one of",
            ),
            (
                "turns: [ { faults: [ { mid_stream: error, retry_after: 1s } ] } ]\n",
                "turns[0].faults[0].retry_after: not with `mid_stream`",
            ),
            (
                "chaos: { seed: 1, outside: '/tmp/a$b' }\n",
                "holds a quote, `$`",
            ),
        ];
        for (yaml, expected) in cases {
            let e = parse(yaml).check().expect_err(yaml);
            assert!(
                e.0.contains(expected),
                "{yaml}: expected {expected:?} in {e:?}"
            );
        }
        let many = format!(
            "turns: [ {{ faults: [{}] }} ]\n",
            vec!["{status: 500}"; 101].join(", ")
        );
        let e = parse(&many).check().unwrap_err();
        assert!(
            e.0.contains("turns[0].faults (how many): 101 is over the upper bound of 100"),
            "{e}"
        );
    }

    #[test]
    fn values_at_their_bounds_pass() {
        let s = parse(
            "latency: 10m\nturns: [ { usage: { output_tokens: 1000000000 }, faults: [ { status: 599, retry_after: 7days, reset_after: 2h } ] } ]\n",
        );
        assert_eq!(s.check(), Ok(()));
        let s = parse(
            "turns: [ { faults: [ { mid_stream: stall, after_events: 1000000, stall_for: 10m }, { mid_stream: error, error_type: api_error, message: x, code: c }, { mid_stream: cut }, { mid_stream: failed, after_events: 0 } ] } ]\n",
        );
        assert_eq!(s.check(), Ok(()));
        let e = serde_yaml::from_str::<Script>("turns: [ { faults: [ { mid_stream: hang } ] } ]\n")
            .expect_err("unknown kind");
        assert!(
            e.to_string().contains("mid_stream") && e.to_string().contains("hang"),
            "{e}"
        );
        let s = parse("chaos: { seed: 18446744073709551615, max_turns: 1000, max_calls: 64, fault_percent: 100, misbehave_percent: 100, invalid_percent: 100, max_string: 8388608, max_delay: 10s, outside: /tmp/x }\n");
        assert_eq!(s.check(), Ok(()));
    }
}
