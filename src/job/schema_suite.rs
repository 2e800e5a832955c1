//! The fields a suite brings: `suites:` (task sources in the formats people already
//! have), and the task fields a suite's tasks are written with, which a job file may
//! also write by hand: `agent` (a model, or a reference agent), `solution` (what the
//! oracle applies) and `verifier` (the suite's own grading instead of `check`).
//! Read in `suites/`, resolved in `verifiers.rs`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::vocab::values::HumanDuration;

/// A suite of tasks in a format of its own, read from `path`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Suite")]
pub struct SuiteFields {
    /// `swebench` (a JSONL dataset file or a SWE-bench 5 task repo), `harbor` (task
    /// folders or a dataset.toml) or `terminal-bench` (legacy task.yaml folders).
    pub format: SuiteFormat,
    /// The dataset file or folder, relative to the job file.
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub path: String,
    /// Only the tasks whose ids match one of these globs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<Vec<String>>,
    /// Leave out the tasks whose ids match one of these globs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
    /// At most this many tasks (the first in id order, after `only` and `exclude`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<usize>,
    /// SWE-bench: the namespace of the instance images when a row names none
    /// (`{namespace}/sweb.eval.x86_64.{id}:latest`; default `swebench`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_namespace: Option<String>,
    /// Harbor and Terminal-Bench: the reward at which a task passes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// The formats a suite can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SuiteFormat {
    /// SWE-bench instances: a JSONL (or JSON array) file of dataset rows, or a
    /// SWE-bench 5 task repo (`sweb.yaml`, `tasks/<id>/`).
    Swebench,
    /// Harbor tasks: a folder of task folders (`task.toml`, `instruction.md`), one task
    /// folder, or a `dataset.toml`.
    Harbor,
    /// Terminal-Bench 1 task folders (`task.yaml`, `run-tests.sh`, `tests/`).
    TerminalBench,
}

impl SuiteFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            SuiteFormat::Swebench => "swebench",
            SuiteFormat::Harbor => "harbor",
            SuiteFormat::TerminalBench => "terminal-bench",
        }
    }
}

/// Who works on the task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// The model, through the loop (the default).
    #[default]
    Model,
    /// The reference agent that applies the task's `solution`: checks that the
    /// environment and the verifier work, before any model is paid for.
    Oracle,
    /// The reference agent that changes nothing: a verifier that passes it is broken.
    Nop,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Model => "model",
            AgentKind::Oracle => "oracle",
            AgentKind::Nop => "nop",
        }
    }
}

/// What the oracle does: apply a patch to the workspace, or run a solution script.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Solution")]
pub struct SolutionFields {
    /// A patch (git diff) applied to the workspace: SWE-bench's gold patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// A folder, relative to the job file, copied into the container at `/solution`;
    /// its `solve.sh` runs in the workdir (Harbor's `solution/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// A suite's own grading, instead of `check`. Runs in the task's environment.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
#[schemars(title = "Verifier")]
pub enum VerifierFields {
    /// SWE-bench's: in a fresh container of the task's image, the agent's patch, then
    /// the evaluation script (which applies the test patch), its log parsed with the
    /// instance's parser and graded as the official harness grades it.
    Swebench(SwebenchVerifierFields),
    /// Harbor's: `tests/` copied in after the agent, `test.sh` run, the reward read
    /// from `/logs/verifier/reward.txt` or `reward.json`.
    Harbor(HarborVerifierFields),
}

/// The grading fields of a SWE-bench instance.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "SWE-bench verifier")]
pub struct SwebenchVerifierFields {
    /// The instance's `eval_script` (eval.sh): prints the markers around the test run.
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub eval_script: String,
    /// Tests the fix must make pass.
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: Vec<String>,
    /// Tests that must still pass.
    #[serde(rename = "PASS_TO_PASS", default)]
    pub pass_to_pass: Vec<String>,
    /// A key of SWE-bench's parser registry (`parse_log_pytest`, ...).
    pub log_parser: String,
    /// `pass_and_fail` (default) or `fail_only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_type: Option<SwebenchEvalType>,
    /// How long the evaluation script may run (default 30m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
}

/// SWE-bench's evaluation types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SwebenchEvalType {
    /// Every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes.
    #[serde(alias = "PASS_AND_FAIL")]
    PassAndFail,
    /// No listed test fails (for runners that report failures only).
    #[serde(alias = "FAIL_ONLY")]
    FailOnly,
}

/// A Harbor (or Terminal-Bench) verifier.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Harbor verifier")]
pub struct HarborVerifierFields {
    /// The tests folder, relative to the job file: copied to `/tests` after the agent
    /// (none: only the script is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub tests: Option<String>,
    /// The script that runs them (default: `test.sh` in the tests folder), copied into
    /// `/tests` when it is not in that folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// How long the tests may run (default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
    /// Variables of the test run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z_][A-Za-z0-9_]*$" }))]
    pub env: Option<BTreeMap<String, String>>,
    /// The reward at which the task passes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    /// `shared` (default: in the agent's container, as Harbor does) or `separate` (a
    /// new container with only the agent's patch to the workdir).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_mode: Option<VerifierMode>,
    /// Terminal-Bench 1: the test script reports by exit status and pytest's
    /// summary, not a reward file: exit 0 is reward 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_from_exit_code: Option<bool>,
}

/// Where a Harbor verifier runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerifierMode {
    #[default]
    Shared,
    Separate,
}
