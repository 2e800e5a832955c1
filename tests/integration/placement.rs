//! Where `validate` (and `run`, which checks the same way) places each problem: at the
//! line of the value a task really uses. A task's own value, even `null` or empty, is
//! the task's problem, at its own line, once per task; only a value the task inherits
//! is reported where it is written (`defaults`, a provider), once for every task that
//! inherits it.

use crate::common::{bin, Case};

const SCRIPT: &str = "{ turns: [ { content: [ { text: hi } ] } ] }";

/// The whole of what `validate` and `run` print for `yaml`, which both must refuse with
/// exit 2 and the same lines.
fn problems(yaml: &str) -> String {
    let case = Case::new();
    case.write("job.yaml", yaml);
    let mut printed = Vec::new();
    for args in [
        &["validate", "job.yaml"][..],
        &["run", "job.yaml", "--out", "reports", "--quiet"][..],
    ] {
        let out = bin()
            .args(args)
            .current_dir(case.dir.path())
            .output()
            .expect("agentbatch runs");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}:\n{err}");
        printed.push(err);
    }
    assert_eq!(printed[0], printed[1], "validate and run disagree");
    printed.swap_remove(0)
}

#[test]
fn a_tasks_own_missing_or_empty_prompt_is_reported_at_each_task() {
    let yaml = format!(
        "name: prompts
defaults:
  model: claude-sonnet-4-5
  sim: {SCRIPT}
tasks:
  - id: a
    prompt: null
  - id: b
    prompt:
  - id: c
    prompt: \"   \"
  - id: d
  - id: e
    prompt: \"\"
  - id: f
    prompt: fine
"
    );
    let no_prompt =
        "the task has no prompt: write `prompt:` on the task, or in `defaults` for every task";
    let empty = "the prompt is empty: write the task's first user message";
    assert_eq!(
        problems(&yaml),
        format!(
            "job.yaml:7:13: tasks[0].prompt: {no_prompt}
job.yaml:9:12: tasks[1].prompt: {no_prompt}
job.yaml:11:13: tasks[2].prompt: {empty}
job.yaml:12:5: tasks[3].prompt: {no_prompt}
job.yaml:14:13: tasks[4].prompt: {empty}
agentbatch: job.yaml has 5 problem(s); nothing ran
"
        )
    );
}

#[test]
fn an_inherited_prompt_is_reported_once_where_defaults_write_it() {
    let yaml = |prompt: &str| {
        format!(
            "name: inherited
defaults:
  model: claude-sonnet-4-5
  prompt: {prompt}
  sim: {SCRIPT}
tasks:
  - id: a
  - id: b
    prompt: null
  - id: c
    prompt: own
"
        )
    };
    // Tasks a and b both take the empty default (b's null is no prompt of its own): one
    // value to fix, one problem.
    assert_eq!(
        problems(&yaml("\"  \"")),
        "job.yaml:4:11: defaults.prompt: the prompt is empty: write the task's first user message
agentbatch: job.yaml has 1 problem(s); nothing ran
"
    );
    let case = Case::new();
    case.write("job.yaml", &yaml("shared"));
    let out = bin()
        .args(["validate", "job.yaml"])
        .current_dir(case.dir.path())
        .output()
        .expect("agentbatch runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_value_from_a_provider_is_reported_at_the_provider_and_a_missing_model_at_each_task() {
    let yaml = format!(
        "name: layers
providers:
  sim:
    stream: always
    batch: {{ mode: on, window: 2h }}
defaults:
  sim: {SCRIPT}
  prompt: p
tasks:
  - id: a
    model: claude-sonnet-4-5
    batch: {{ max_requests: 10 }}
  - id: b
  - id: c
    model:
"
    );
    assert_eq!(
        problems(&yaml),
        "job.yaml:4:13: providers.sim.stream: batch requests are answered whole, never streamed: set stream to auto or never, or batch mode off
job.yaml:5:32: providers.sim.batch.window: a window of over 1h only delays every task's turns: use seconds to minutes
job.yaml:13:5: tasks[1].model: no model: set `model` on the task or in `defaults`
job.yaml:15:11: tasks[2].model: no model: set `model` on the task or in `defaults`
agentbatch: job.yaml has 4 problem(s); nothing ran
"
    );
}

#[test]
fn every_task_that_names_a_missing_script_is_told_so_at_its_own_line() {
    let text = problems(
        "name: scripts
defaults:
  model: claude-sonnet-4-5
  prompt: p
  sim: missing.yaml
tasks:
  - id: a
  - id: b
    sim: missing.yaml
  - id: c
    sim: missing.yaml
",
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    for (line, at) in lines.iter().zip([
        "job.yaml:5:8: defaults.sim: simulator script missing.yaml: ",
        "job.yaml:9:10: tasks[1].sim: simulator script missing.yaml: ",
        "job.yaml:11:10: tasks[2].sim: simulator script missing.yaml: ",
    ]) {
        assert!(line.starts_with(at), "expected {at:?} in:\n{text}");
    }
    assert_eq!(
        lines[3],
        "agentbatch: job.yaml has 3 problem(s); nothing ran"
    );
}

#[test]
fn a_problem_a_matrix_axis_makes_inside_a_field_is_reported_at_the_axis_value() {
    let yaml = format!(
        "name: axes
matrix:
  reasoning.effort: [low, high]
defaults:
  model: claude-sonnet-4-5
  prompt: p
  sim: {SCRIPT}
tasks:
  - id: a
"
    );
    let openai = "reasoning is an OpenAI setting: for Anthropic models use `thinking: {type: enabled, budget_tokens: N}`";
    assert_eq!(
        problems(&yaml),
        format!(
            "job.yaml:3:22: matrix.reasoning.effort[0]: {openai}
job.yaml:3:27: matrix.reasoning.effort[1]: {openai}
agentbatch: job.yaml has 2 problem(s); nothing ran
"
        )
    );
}
