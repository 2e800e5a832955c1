//! `agent`, `solution` and `verifier` of a task, resolved: each taken whole from the
//! task, else from `defaults`.

use std::sync::Arc;
use std::time::Duration;

use super::context::Ctx;
use super::diagnostics::origin;
use super::schema::TaskFields;
use super::schema_suite::{AgentKind, SwebenchEvalType, VerifierFields, VerifierMode};
use super::spec::{HarborVerifier, Solution, SwebenchVerifier, Verifier};

/// How long an evaluation script may run when the suite says nothing.
const SWEBENCH_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Harbor's own default for `[verifier] timeout_sec`.
const HARBOR_TIMEOUT: Duration = Duration::from_secs(600);

pub(super) fn resolve_agent(t: &TaskFields, d: &TaskFields) -> AgentKind {
    t.agent.or(d.agent).unwrap_or_default()
}

/// The oracle's solution; the oracle without one is an error at `agent`.
pub(super) fn resolve_solution(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    agent: AgentKind,
    cx: &mut Ctx,
) -> Option<Arc<Solution>> {
    let on_task = t.solution.is_some();
    let at = origin(i, on_task, !on_task, &["solution"]);
    let written = t.solution.as_ref().or(d.solution.as_ref());
    let solution = match written {
        None => None,
        Some(s) => match (&s.patch, &s.dir) {
            (Some(p), None) => Some(Solution::Patch(p.clone())),
            (None, Some(dir)) => {
                let full = cx.files.join(dir);
                if !full.join("solve.sh").is_file() && !full.join("solution.sh").is_file() {
                    cx.err(
                        &at,
                        format!(
                            "{} has no solve.sh (nor solution.sh): the oracle runs the solution folder's script",
                            full.display()
                        ),
                    );
                }
                Some(Solution::Dir(full))
            }
            _ => {
                cx.err(&at, "give either `patch` or `dir`");
                None
            }
        },
    };
    if agent == AgentKind::Oracle && written.is_none() {
        let own = t.agent.is_some();
        cx.err(
            &origin(i, own, !own, &["agent"]),
            "agent: oracle needs the task's `solution` (a patch or a folder with solve.sh)",
        );
    }
    solution.map(Arc::new)
}

/// The task's verifier, checked against what it needs: an environment, no `check`,
/// a parser this build has, a tests folder that exists.
pub(super) fn resolve_verifier(
    i: usize,
    t: &TaskFields,
    d: &TaskFields,
    cx: &mut Ctx,
) -> Option<Arc<Verifier>> {
    let on_task = t.verifier.is_some();
    let written = t.verifier.as_ref().or(d.verifier.as_ref())?;
    let at = |field: &[&str]| {
        let mut f = vec!["verifier"];
        f.extend_from_slice(field);
        origin(i, on_task, !on_task, &f)
    };
    if t.check.is_some() || d.check.is_some() {
        cx.err(
            &at(&[]),
            "a task has either a `verifier` or a `check`, not both: remove `check`",
        );
    }
    if t.environment.is_none() && d.environment.is_none() {
        cx.err(
            &at(&[]),
            "a verifier runs in the task's container: give the task an `environment`",
        );
    }
    let verifier = match written {
        VerifierFields::Swebench(s) => {
            if !crate::suite::swebench::PARSERS.contains(&s.log_parser.as_str()) {
                cx.err(
                    &at(&["swebench", "log_parser"]),
                    format!(
                        "log parser \"{}\" is not one agentbatch has (it has {}): leave this task out with the suite's `exclude`",
                        s.log_parser,
                        crate::suite::swebench::PARSERS.join(", ")
                    ),
                );
            }
            if s.fail_to_pass.is_empty() && s.pass_to_pass.is_empty() {
                cx.err(
                    &at(&["swebench", "FAIL_TO_PASS"]),
                    "no tests to grade by: FAIL_TO_PASS and PASS_TO_PASS are both empty",
                );
            }
            Verifier::Swebench(SwebenchVerifier {
                eval_script: s.eval_script.clone(),
                fail_to_pass: s.fail_to_pass.clone(),
                pass_to_pass: s.pass_to_pass.clone(),
                log_parser: s.log_parser.clone(),
                eval_type: s.eval_type.unwrap_or(SwebenchEvalType::PassAndFail),
                timeout: s.timeout.map_or(SWEBENCH_TIMEOUT, |h| h.0),
            })
        }
        VerifierFields::Harbor(h) => {
            let tests = h.tests.as_ref().map(|t| cx.files.join(t));
            if let Some(t) = tests.as_ref().filter(|t| !t.is_dir()) {
                cx.err(
                    &at(&["harbor", "tests"]),
                    format!("the tests folder {} does not exist", t.display()),
                );
            }
            let script = match (&h.script, &tests) {
                (Some(s), _) => Some(cx.files.join(s)),
                (None, Some(t)) => Some(t.join("test.sh")),
                (None, None) => {
                    cx.err(
                        &at(&["harbor"]),
                        "give `tests` (the tests folder) or `script` (the test script), or both",
                    );
                    None
                }
            };
            if let Some(s) = script.as_ref().filter(|s| !s.is_file()) {
                if tests.as_ref().is_none_or(|t| t.is_dir()) {
                    cx.err(
                        &at(&["harbor", "script"]),
                        format!("the test script {} does not exist", s.display()),
                    );
                }
            }
            let threshold = h.threshold.unwrap_or(1.0);
            if !threshold.is_finite() {
                cx.err(&at(&["harbor", "threshold"]), "must be a number");
            }
            Verifier::Harbor(HarborVerifier {
                tests,
                script: script.unwrap_or_default(),
                timeout: h.timeout.map_or(HARBOR_TIMEOUT, |h| h.0),
                env: h.env.clone().unwrap_or_default(),
                threshold,
                separate: h.environment_mode == Some(VerifierMode::Separate),
                reward_from_exit_code: h.reward_from_exit_code.unwrap_or(false),
            })
        }
    };
    Some(Arc::new(verifier))
}
