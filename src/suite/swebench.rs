//! SWE-bench 5.0.2's log parsing and grading, ported exactly so that a verdict here is the
//! verdict the official harness gives on the same log: `swebench/harness/grading.py`
//! (get_logs_eval, get_eval_tests_report, get_resolution_status, and get_eval_report's
//! labels from `harness/infra_failure.py`), the Python log parsers of
//! `harness/log_parsers/python.py`, and the eval script's exit-code recording of
//! `harness/utils.py`. Pure: no files, no processes.
//!
//! Exactness lives in the details, each ported rather than approximated: Python's notion
//! of whitespace (`str.split()`, `str.strip()`, `\s`; it includes `\x1c`-`\x1f`) and of a
//! digit or word character in `re` ([`python_chars`]); the insertion order of a Python dict
//! (a later line overwrites a test's status but keeps its place, and the prefix fallback
//! for truncated ids takes the first match in that order); status words that are not one
//! of the five (`ERROR:` from `ERROR: file not found` is kept as it is, and grades as
//! neither pass nor fail); universal newlines when the log file is read; the one parser
//! line that makes the official code raise. tests/integration/swebench_grading.rs checks
//! all of it against the official package.

mod parsers;
mod python;
pub mod python_chars;
mod status;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

pub use parsers::{parse_log, parse_log_ordered, supports, ParseError, PARSERS, PARSER_ALIASES};
use parsers::{parser_fn, Parser};
use python::{py_decimal, py_strip, python_regex};
use status::StatusMap;
pub use status::TestStatus;

/// Written by the harness when no apply command took the model's patch.
pub const APPLY_PATCH_FAIL: &str = ">>>>> Patch Apply Failed";
/// Written by the harness when the model's patch applied.
pub const APPLY_PATCH_PASS: &str = ">>>>> Applied Patch";
/// A log holding this is invalid.
pub const RESET_FAILED: &str = ">>>>> Reset Failed";
/// A log holding this is invalid.
pub const TESTS_ERROR: &str = ">>>>> Tests Errored";
/// Defined by SWE-bench; grading does not look for it.
pub const TESTS_FAILED: &str = ">>>>> Some Tests Failed";
/// Defined by SWE-bench; grading does not look for it.
pub const TESTS_PASSED: &str = ">>>>> All Tests Passed";
/// A log holding this is invalid.
pub const TESTS_TIMEOUT: &str = ">>>>> Tests Timed Out";
/// The eval script echoes this before the test command: the parsed region starts here.
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
/// The eval script echoes this after the test command: the parsed region ends here.
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
/// `>>>>> Test Exit Code: N`, after the end marker: the test command's own exit status.
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";
/// The shell variable the eval script keeps the test command's `$?` in.
pub const TEST_EXIT_CODE_VAR: &str = "SWEBENCH_TEST_EXIT_CODE";
/// The markers that make a log invalid wherever they appear, in the order SWE-bench lists them.
pub const BAD_CODES: &[&str] = &[APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT];

/// The commands `run_instance` tries in turn to apply a model's patch (each followed by the
/// patch file's path), restoring a pristine tree (`git checkout -- . ; git clean -fd`)
/// before every retry; when all fail, `git apply --check --reverse` decides whether the
/// patch is in fact already applied.
pub const GIT_APPLY_CMDS: &[&str] = &[
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
];

/// How an instance's tests are graded. `pass_and_fail`: a test counts as passing only if
/// the log says it passed. `fail_only`: only a test the log says FAILED counts against
/// (for runners that print failures alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalType {
    #[serde(alias = "PASS_AND_FAIL")]
    PassAndFail,
    #[serde(alias = "FAIL_ONLY")]
    FailOnly,
}

impl EvalType {
    /// The value as SWE-bench's `EvalType` holds it.
    pub fn as_str(self) -> &'static str {
        match self {
            EvalType::PassAndFail => "pass_and_fail",
            EvalType::FailOnly => "fail_only",
        }
    }
}

impl FromStr for EvalType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pass_and_fail" | "PASS_AND_FAIL" => Ok(EvalType::PassAndFail),
            "fail_only" | "FAIL_ONLY" => Ok(EvalType::FailOnly),
            other => Err(format!(
                "unknown SWE-bench eval_type {other:?}: use pass_and_fail or fail_only"
            )),
        }
    }
}

/// SWE-bench's ResolvedStatus: FULL is what counts as resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Resolution {
    #[serde(rename = "RESOLVED_FULL")]
    Full,
    #[serde(rename = "RESOLVED_PARTIAL")]
    Partial,
    #[serde(rename = "RESOLVED_NO")]
    No,
}

/// The verdict on one run's test log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Graded {
    /// RESOLVED_FULL: every FAIL_TO_PASS test now passes and every PASS_TO_PASS test is kept.
    pub resolved: bool,
    /// false: the log is invalid (patch apply failed, markers missing, nothing parsed and
    /// no sign the suite ran, exit-code cross-check failed, the official parser raises,
    /// unknown parser); such a run is never resolved.
    pub valid: bool,
    /// Which rule made the log invalid, in words.
    pub invalid_reason: Option<String>,
    /// Each test's status as parsed (empty when invalid).
    pub statuses: BTreeMap<String, TestStatus>,
    /// The recorded `>>>>> Test Exit Code`, if any (clamped to i32; validity is judged on
    /// the exact value).
    pub exit_code: Option<i32>,
    /// FAIL_TO_PASS tests that now pass. A test that is neither passing nor failing (an
    /// odd status word) is in neither list, as in SWE-bench's report.
    pub f2p_success: Vec<String>,
    /// FAIL_TO_PASS tests still failing: absent, failed, errored or skipped (under
    /// `fail_only`: reported FAILED).
    pub f2p_failure: Vec<String>,
    /// PASS_TO_PASS tests kept: passing, or skipped.
    pub p2p_success: Vec<String>,
    /// PASS_TO_PASS tests broken: absent, failed or errored (under `fail_only`: reported
    /// FAILED).
    pub p2p_failure: Vec<String>,
    /// RESOLVED_FULL, RESOLVED_PARTIAL or RESOLVED_NO (NO when invalid).
    pub resolution: Resolution,
    /// For an invalid log, the sign in it of a broken environment, as get_eval_report
    /// labels it (advisory: the run stays unresolved).
    pub infra_failure: Option<InfraFailure>,
}

/// A signature of an infrastructure failure found in an invalid log
/// (`harness/infra_failure.py`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InfraFailure {
    /// SWE-bench's name for it: `browser_launch_failed`, `out_of_memory`, `no_tests_collected`...
    pub reason: &'static str,
    /// true: the environment broke, whatever the patch (get_eval_report's `infra_failure`);
    /// false: a broken environment or a bad patch could both print this.
    pub environment: bool,
}

/// SWE-bench's INFRA_FAILURE_SIGNATURES, in order (the first hit wins): reason, whether
/// the tier is `environment` (else `ambiguous`), pattern.
const INFRA_FAILURE_SIGNATURES: &[(&str, bool, &str)] = &[
    (
        "browser_launch_failed",
        true,
        r"Failed to launch|Failed to connect to the bus",
    ),
    (
        "display_unavailable",
        true,
        r"cannot open display|Missing X server|unable to open X display",
    ),
    (
        "out_of_memory",
        true,
        r"Cannot allocate memory|OutOfMemoryError|^Killed$",
    ),
    (
        "container_unavailable",
        true,
        r"Error response from daemon|Cannot connect to the Docker daemon",
    ),
    (
        "network_unreachable",
        true,
        r"Could not resolve host|Temporary failure in name resolution",
    ),
    (
        "missing_module",
        false,
        r"Cannot find module|MODULE_NOT_FOUND|ModuleNotFoundError",
    ),
    (
        "no_tests_collected",
        false,
        r"no tests ran|collected 0 items",
    ),
    (
        "tests_timed_out",
        false,
        r"Timeout error: {D}+ seconds exceeded",
    ),
];

/// classify_text: the first signature the log matches (re.MULTILINE).
fn classify_infra_failure(content: &str) -> Option<InfraFailure> {
    static COMPILED: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        INFRA_FAILURE_SIGNATURES
            .iter()
            .map(|(_, _, pattern)| python_regex(&format!("(?m){pattern}")))
            .collect()
    });
    INFRA_FAILURE_SIGNATURES
        .iter()
        .zip(COMPILED.iter())
        .find(|(_, pattern)| pattern.is_match(content))
        .map(|((reason, environment, _), _)| InfraFailure {
            reason,
            environment: *environment,
        })
}

// MARK: grading

/// Evidence that a test runner ran, for a log that parses to nothing (SWE-bench's
/// SUITE_RAN, every count non-zero).
static SUITE_RAN: LazyLock<Regex> = LazyLock::new(|| {
    python_regex(concat!(
        r"(?m)Executed [1-9]{D}* of {D}+",
        r"|TOTAL: [1-9]{D}* (?:SUCCESS|FAILED)",
        r"|[1-9]{D}* passing",
        r"|Tests:{S}+[1-9]{D}*",
        r"|Test Suites:{S}+(?:{D}+ {W}+, )*[1-9]{D}* total",
        r"|^# tests [1-9]{D}*",
        r"|[1-9]{D}* specs?, {D}+ failures?",
        r"|': ok$",
    ))
});

/// The first `>>>>> Test Exit Code: N` anywhere in the log: whether N is non-zero, and N
/// clamped to i32.
fn recorded_exit_code(content: &str) -> Option<(bool, i32)> {
    static EXIT_CODE: LazyLock<Regex> = LazyLock::new(|| {
        python_regex(&format!(
            r"{}:{{S}}*(-?{{D}}+)",
            regex::escape(TEST_EXIT_CODE)
        ))
    });
    let found = EXIT_CODE.captures(content)?;
    let text = &found[1];
    let (negative, digits) = match text.strip_prefix('-') {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    let mut value: i64 = 0;
    let mut non_zero = false;
    for digit in digits.chars().filter_map(py_decimal) {
        non_zero |= digit != 0;
        value = (value * 10 + i64::from(digit)).min(i64::from(i32::MAX) + 1);
    }
    let value = if negative { -value } else { value };
    let clamped = value.clamp(i64::from(i32::MIN), i64::from(i32::MAX));
    Some((non_zero, i32::try_from(clamped).unwrap_or_default()))
}

/// The log file's text as Python's `open()` reads it (universal newlines): `\r\n` and a
/// lone `\r` become `\n`.
fn universal_newlines(log: &str) -> Cow<'_, str> {
    if log.contains('\r') {
        Cow::Owned(log.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        Cow::Borrowed(log)
    }
}

/// Why get_logs_eval gives no status map.
enum Invalid {
    /// It returns `({}, False)`, saying why in words.
    Log(String),
    /// It raises (the parser did).
    Raised(ParseError),
}

/// get_logs_eval on the file's text: the status map, or why the log is invalid.
fn logs_eval(content: &str, parse: Parser) -> Result<StatusMap, Invalid> {
    let bad: Vec<&str> = BAD_CODES
        .iter()
        .copied()
        .filter(|code| content.contains(code))
        .collect();
    if !bad.is_empty() {
        return Err(Invalid::Log(format!(
            "the log holds {}, which makes a run invalid",
            bad.iter()
                .map(|code| format!("{code:?}"))
                .collect::<Vec<_>>()
                .join(" and ")
        )));
    }
    let (Some(start), true) = (
        content.find(START_TEST_OUTPUT),
        content.contains(END_TEST_OUTPUT),
    ) else {
        return Err(Invalid::Log(format!(
            "the log lacks {START_TEST_OUTPUT:?} or {END_TEST_OUTPUT:?}, the markers around the test output (did the eval script run?)"
        )));
    };
    // content.split(START)[1].split(END)[0]
    let after = &content[start + START_TEST_OUTPUT.len()..];
    let segment = after
        .find(START_TEST_OUTPUT)
        .map_or(after, |at| &after[..at]);
    let sliced = segment
        .find(END_TEST_OUTPUT)
        .map_or(segment, |at| &segment[..at]);
    let mut map = parse(sliced).map_err(Invalid::Raised)?;
    if map.is_empty() {
        // results printed outside the markers
        map = parse(content).map_err(Invalid::Raised)?;
    }
    if map.is_empty() && !SUITE_RAN.is_match(content) {
        return Err(Invalid::Log(
            "no test results could be parsed from the log, and nothing in it shows that the test suite ran".to_string(),
        ));
    }
    if let Some((true, code)) = recorded_exit_code(content) {
        let failure = map
            .entries
            .iter()
            .any(|(_, status)| matches!(status, TestStatus::Failed | TestStatus::Error));
        if !map.is_empty() && !failure {
            return Err(Invalid::Log(format!(
                "the test command exited with {code} but the log reports no failed or errored test, so the log does not describe the run (a patch printing its own results?)"
            )));
        }
    }
    Ok(map)
}

/// The status-map entry for `case`, tolerating pytest ids truncated mid-parameter: with
/// more `[` than `]`, the first test (in dict order) that starts with `case`, provided all
/// such tests agree on passing or not (`_resolve_case`).
fn resolve_case<'a>(case: &str, map: &'a StatusMap) -> Option<&'a TestStatus> {
    if let Some(status) = map.get(case) {
        return Some(status);
    }
    if case.matches('[').count() <= case.matches(']').count() {
        return None;
    }
    let mut first = None;
    let (mut passing, mut not_passing) = (false, false);
    for (name, status) in &map.entries {
        if name.starts_with(case) {
            first.get_or_insert(status);
            if status.passing() {
                passing = true;
            } else {
                not_passing = true;
            }
        }
    }
    if passing && not_passing {
        None
    } else {
        first
    }
}

fn test_passed(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_some_and(TestStatus::passing)
}

/// PASS_TO_PASS: a skipped test is not a regression.
fn test_maintained(case: &str, map: &StatusMap) -> bool {
    test_passed(case, map) || resolve_case(case, map) == Some(&TestStatus::Skipped)
}

/// Absent, failed, errored or skipped. A test with another status is neither this nor passed.
fn test_failed(case: &str, map: &StatusMap) -> bool {
    resolve_case(case, map).is_none_or(|status| {
        matches!(
            status,
            TestStatus::Failed | TestStatus::Error | TestStatus::Skipped
        )
    })
}

/// A share as SWE-bench computes it: 1 when there is nothing to count.
fn share(success: usize, failure: usize) -> f64 {
    let total = success + failure;
    if total == 0 {
        1.0
    } else {
        success as f64 / total as f64
    }
}

/// Grades one run's test log (the test_output.txt text, as the eval script printed it)
/// as SWE-bench 5.0.2 does: get_logs_eval, get_eval_tests_report, and RESOLVED_FULL from
/// get_resolution_status.
pub fn grade(
    log: &str,
    parser: &str,
    fail_to_pass: &[String],
    pass_to_pass: &[String],
    eval_type: EvalType,
) -> Graded {
    let content = universal_newlines(log);
    let exit_code = recorded_exit_code(&content).map(|(_, code)| code);
    let mut graded = Graded {
        resolved: false,
        valid: false,
        invalid_reason: None,
        statuses: BTreeMap::new(),
        exit_code,
        f2p_success: Vec::new(),
        f2p_failure: Vec::new(),
        p2p_success: Vec::new(),
        p2p_failure: Vec::new(),
        resolution: Resolution::No,
        infra_failure: None,
    };
    let Some(parse) = parser_fn(parser) else {
        graded.invalid_reason = Some(ParseError::UnknownParser(parser.to_string()).to_string());
        return graded;
    };
    let map = match logs_eval(&content, parse) {
        Ok(map) => map,
        Err(Invalid::Log(reason)) => {
            graded.invalid_reason = Some(reason);
            graded.infra_failure = classify_infra_failure(&content);
            return graded;
        }
        Err(Invalid::Raised(error)) => {
            graded.invalid_reason = Some(error.to_string());
            return graded;
        }
    };
    graded.valid = true;
    for case in fail_to_pass {
        let case = case.clone();
        match eval_type {
            EvalType::PassAndFail if test_passed(&case, &map) => graded.f2p_success.push(case),
            EvalType::PassAndFail if test_failed(&case, &map) => graded.f2p_failure.push(case),
            EvalType::PassAndFail => {}
            EvalType::FailOnly if map.get(&case) == Some(&TestStatus::Failed) => {
                graded.f2p_failure.push(case)
            }
            EvalType::FailOnly => graded.f2p_success.push(case),
        }
    }
    for case in pass_to_pass {
        let case = case.clone();
        match eval_type {
            EvalType::PassAndFail if test_maintained(&case, &map) => graded.p2p_success.push(case),
            EvalType::PassAndFail if test_failed(&case, &map) => graded.p2p_failure.push(case),
            EvalType::PassAndFail => {}
            EvalType::FailOnly if map.get(&case) == Some(&TestStatus::Failed) => {
                graded.p2p_failure.push(case)
            }
            EvalType::FailOnly => graded.p2p_success.push(case),
        }
    }
    let f2p = share(graded.f2p_success.len(), graded.f2p_failure.len());
    let p2p = share(graded.p2p_success.len(), graded.p2p_failure.len());
    graded.resolution = if f2p == 1.0 && p2p == 1.0 {
        Resolution::Full
    } else if f2p < 1.0 && f2p > 0.0 && p2p == 1.0 {
        Resolution::Partial
    } else {
        Resolution::No
    };
    graded.resolved = graded.resolution == Resolution::Full;
    graded.statuses = map.entries.into_iter().collect();
    graded
}

// MARK: the eval script

/// SWE-bench's parse_eval_script: the script's lines, shebang and `set` line dropped.
pub fn parse_eval_script(eval_script: &str) -> Vec<&str> {
    py_strip(eval_script)
        .split('\n')
        .filter(|line| !matches!(*line, "#!/bin/bash" | "set -uxo pipefail"))
        .collect()
}

/// SWE-bench's record_test_exit_code: keep the test command's `$?` and echo it after the
/// end marker, so that grading can cross-check the log (a script without the marker is
/// left as it is).
pub fn record_test_exit_code(lines: Vec<&str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 2);
    let mut recorded = false;
    for line in lines {
        if !recorded && line.contains(END_TEST_OUTPUT) {
            recorded = true;
            out.push(format!("{TEST_EXIT_CODE_VAR}=$?"));
            out.push(line.to_string());
            out.push(format!("echo \"{TEST_EXIT_CODE}: ${TEST_EXIT_CODE_VAR}\""));
        } else {
            out.push(line.to_string());
        }
    }
    out
}

/// The eval script the harness runs for an instance's `eval_script` (TestSpec.eval_script
/// of make_test_spec): its commands, the exit-code recording, under
/// `#!/bin/bash` and `set -uxo pipefail`.
pub fn eval_script_with_exit_code(eval_script: &str) -> String {
    let mut lines = vec!["#!/bin/bash".to_string(), "set -uxo pipefail".to_string()];
    lines.extend(record_test_exit_code(parse_eval_script(eval_script)));
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests;
