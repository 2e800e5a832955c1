//! The checks of one value on its own, made where it is written: a task's own fields,
//! and those of `defaults` (in every variant of the matrix, so a value an axis sets is
//! checked at that axis), whether or not a task ends up using them. These are the
//! checks the JSON Schema says too (schema.rs), so a job file the schema refuses for a
//! value is one `validate` refuses at that value. What depends on other fields (the
//! protocol, `max_tokens`, the repository) is checked by the resolvers, on the merged
//! task.

use super::context::Ctx;
use super::diagnostics::key;
use super::locate::Seg;
use super::sampling::thinking_shape;
use super::schema::{ContextFields, TaskFields};
use super::schema_rules::{EFFORTS, SUMMARIES};
use super::scripts::check_inline;
use crate::vocab::bounds;

/// Checks the values `f` writes at `at` (`tasks[i]` or `defaults`).
pub(super) fn check_fields(at: &[Seg], f: &TaskFields, cx: &mut Ctx) {
    let here = |path: &[&str]| {
        let mut p = at.to_vec();
        p.extend(path.iter().map(|k| key(k)));
        p
    };
    let blank = |v: &Option<String>| v.as_ref().is_some_and(|s| s.trim().is_empty());
    if blank(&f.prompt) {
        cx.err(
            &here(&["prompt"]),
            "the prompt is empty: write the task's first user message",
        );
    }
    if blank(&f.model) {
        cx.err(
            &here(&["model"]),
            "the model is empty: name one, such as claude-sonnet-4-5",
        );
    }
    for field in ["setup", "check"] {
        let value = if field == "setup" { &f.setup } else { &f.check };
        if blank(value) {
            cx.err(&here(&[field]), "is empty");
        }
    }
    if f.max_tokens == Some(0) {
        cx.err(&here(&["max_tokens"]), "must be at least 1");
    }
    if let Some(l) = &f.limits {
        for (name, value) in [
            ("max_turns", l.max_turns),
            ("min_max_tokens", l.min_max_tokens),
        ] {
            if value == Some(0) {
                cx.err(&here(&["limits", name]), "must be at least 1");
            }
        }
    }
    if let Some(c) = &f.context {
        check_context(&here(&["context"]), c, cx);
    }
    // OpenAI's temperature goes up to 2; Anthropic's own limit of 1 depends on the
    // protocol, and is checked with it.
    for (name, value, top, range) in [
        (
            "temperature",
            f.temperature,
            2.0,
            "between 0 and 2 (and at most 1 with the anthropic protocol)",
        ),
        ("top_p", f.top_p, 1.0, "between 0 and 1"),
    ] {
        if value.is_some_and(|v| !(0.0..=top).contains(&v)) {
            cx.err(&here(&[name]), format!("must be {range}"));
        }
    }
    if let Some(r) = &f.reasoning {
        if let Some(e) = r.effort.as_deref().filter(|e| !EFFORTS.contains(e)) {
            cx.err(
                &here(&["reasoning", "effort"]),
                format!("\"{e}\" is not an effort: {}", EFFORTS.join(", ")),
            );
        }
        if let Some(s) = r.summary.as_deref().filter(|s| !SUMMARIES.contains(s)) {
            cx.err(
                &here(&["reasoning", "summary"]),
                format!("\"{s}\" is not a summary setting: {}", SUMMARIES.join(", ")),
            );
        }
    }
    if let Some(e) = f
        .thinking
        .as_ref()
        .map(thinking_shape)
        .and_then(Result::err)
    {
        cx.err(&here(&["thinking"]), e.to_string());
    }
    for name in f.env.iter().flat_map(|e| e.keys()) {
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            cx.err(
                &here(&["env", name]),
                format!("\"{name}\" is not a valid variable name"),
            );
        }
    }
    if let Some(sim) = &f.sim {
        check_inline(sim, &here(&["sim"]), cx);
    }
}

/// A `context:` policy's own values.
fn check_context(at: &[Seg], c: &ContextFields, cx: &mut Ctx) {
    let here = |name: &str| {
        let mut p = at.to_vec();
        p.push(key(name));
        p
    };
    if c.window == Some(0) {
        cx.err(&here("window"), "must be at least 1 (tokens)");
    }
    if let Some(a) = c.at.filter(|a| !(*a > 0.0 && *a <= 1.0)) {
        cx.err(
            &here("at"),
            format!("{a} is not a share of the window: write a number above 0 and at most 1, such as 0.85"),
        );
    }
    match c.keep {
        Some(0) => cx.err(
            &here("keep"),
            "must be at least 1: with 0 a compaction would clear the results the model has not read yet",
        ),
        Some(k) if k > bounds::KEEP => cx.err(
            &here("keep"),
            format!("at most {} tool results can be kept whole", bounds::KEEP),
        ),
        _ => {}
    }
}
