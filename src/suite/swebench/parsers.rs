//! The Python log parsers of SWE-bench 5.0.2 (`harness/log_parsers/python.py`) and the
//! registry keys that name them, line by line.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::python::{py_decimal, py_split, py_strip, python_regex};
use super::status::{StatusMap, TestStatus};

/// The log parsers of SWE-bench's registry this port has, by their registry key (an
/// instance's `log_parser`).
pub const PARSERS: &[&str] = &[
    "parse_log_pytest",
    "parse_log_pytest_options",
    "parse_log_django",
    "parse_log_pytest_v2",
    "parse_log_seaborn",
    "parse_log_sympy",
    "parse_log_matplotlib",
];

/// Registry keys that SWE-bench binds to one of [`PARSERS`] (the per-repository names),
/// with the parser each is: accepted by [`parse_log`] and by grading too.
pub const PARSER_ALIASES: &[(&str, &str)] = &[
    ("parse_log_astroid", "parse_log_pytest"),
    ("parse_log_flask", "parse_log_pytest"),
    ("parse_log_marshmallow", "parse_log_pytest"),
    ("parse_log_pvlib", "parse_log_pytest"),
    ("parse_log_pyvista", "parse_log_pytest"),
    ("parse_log_sqlfluff", "parse_log_pytest"),
    ("parse_log_xarray", "parse_log_pytest"),
    ("parse_log_pydicom", "parse_log_pytest_options"),
    ("parse_log_requests", "parse_log_pytest_options"),
    ("parse_log_pylint", "parse_log_pytest_options"),
    ("parse_log_astropy", "parse_log_pytest_v2"),
    ("parse_log_scikit", "parse_log_pytest_v2"),
    ("parse_log_sphinx", "parse_log_pytest_v2"),
];

/// Whether `parser` names a log parser this port has (one of [`PARSERS`] or an alias):
/// callers check an instance before running it.
pub fn supports(parser: &str) -> bool {
    parser_fn(parser).is_some()
}

/// Why a log could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("unknown SWE-bench log parser {0:?}: this runner grades with {known} and their per-repository names (parse_log_astropy...); other suites' parsers are not ported", known = PARSERS.join(", "))]
    UnknownParser(String),
    /// The official parser raises on this log; the harness then writes no report for the
    /// instance, which is not resolved.
    #[error("SWE-bench's {parser} raises {exception} on the log line {line:?}, so the official harness writes no report for this run (not resolved)")]
    Raised {
        parser: &'static str,
        exception: &'static str,
        line: String,
    },
}

/// What a parser is: the log in, the dict out, or the official code's exception.
pub(super) type Parser = fn(&str) -> Result<StatusMap, ParseError>;

pub(super) fn parser_fn(name: &str) -> Option<Parser> {
    let name = PARSER_ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name, |(_, parser)| parser);
    Some(match name {
        "parse_log_pytest" => parse_pytest,
        "parse_log_pytest_options" => parse_pytest_options,
        "parse_log_django" => parse_django,
        "parse_log_pytest_v2" => parse_pytest_v2,
        "parse_log_seaborn" => parse_seaborn,
        "parse_log_sympy" => parse_sympy,
        "parse_log_matplotlib" => parse_matplotlib,
        _ => return None,
    })
}

/// Each test's status as the official parser `parser` reads `log` (the text as given: no
/// newline translation). A later line for the same test overwrites the earlier status.
pub fn parse_log(parser: &str, log: &str) -> Result<BTreeMap<String, TestStatus>, ParseError> {
    Ok(parse_log_ordered(parser, log)?.into_iter().collect())
}

/// [`parse_log`] in the order of the Python dict: each test where it was first seen, with
/// its last status. Grading's prefix fallback depends on this order.
pub fn parse_log_ordered(parser: &str, log: &str) -> Result<Vec<(String, TestStatus)>, ParseError> {
    let parse = parser_fn(parser).ok_or_else(|| ParseError::UnknownParser(parser.to_string()))?;
    Ok(parse(log)?.entries)
}

/// TestStatus values in the order of Python's enum, which the parsers test lines against.
const STATUS_WORDS: [&str; 5] = ["FAILED", "PASSED", "SKIPPED", "ERROR", "XFAIL"];

fn starts_with_status(line: &str) -> bool {
    STATUS_WORDS.iter().any(|word| line.starts_with(word))
}

/// pytest's `SKIPPED [N] path:line: reason` summary, where `[N]` is a count, not a test.
fn is_skip_summary(status: &str, name: &str) -> bool {
    status == "SKIPPED"
        && name
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .is_some_and(|digits| {
                !digits.is_empty() && digits.chars().all(|c| py_decimal(c).is_some())
            })
}

/// parse_log_pytest and parse_log_matplotlib, after the latter's replacements: the
/// second word of a line that starts with a status word, under the first word.
fn pytest_lines(log: &str, rewrite: fn(&str) -> Cow<'_, str>) -> StatusMap {
    let mut map = StatusMap::default();
    for line in log.split('\n') {
        let line = rewrite(line);
        if !starts_with_status(&line) {
            continue;
        }
        let line = if line.starts_with("FAILED") {
            Cow::Owned(line.replace(" - ", " "))
        } else {
            line
        };
        let words = py_split(&line);
        if words.len() <= 1 || is_skip_summary(words[0], words[1]) {
            continue;
        }
        map.insert(words[1].to_string(), TestStatus::from_word(words[0]));
    }
    map
}

fn parse_pytest(log: &str) -> Result<StatusMap, ParseError> {
    Ok(pytest_lines(log, |line| Cow::Borrowed(line)))
}

fn parse_matplotlib(log: &str) -> Result<StatusMap, ParseError> {
    Ok(pytest_lines(log, |line| {
        Cow::Owned(
            line.replace("MouseButton.LEFT", "1")
                .replace("MouseButton.RIGHT", "3"),
        )
    }))
}

fn parse_pytest_options(log: &str) -> Result<StatusMap, ParseError> {
    static OPTION: LazyLock<Regex> = LazyLock::new(|| python_regex(r"(.*?)\[(.*)\]"));
    let mut map = StatusMap::default();
    for line in log.split('\n') {
        if !starts_with_status(line) {
            continue;
        }
        let line = if line.starts_with("FAILED") {
            Cow::Owned(line.replace(" - ", " "))
        } else {
            Cow::Borrowed(line)
        };
        let words = py_split(&line);
        if words.len() <= 1 || is_skip_summary(words[0], words[1]) {
            continue;
        }
        let name = match OPTION.captures(words[1]) {
            Some(found) => {
                let main = &found[1];
                let option = &found[2];
                if option.starts_with('/') && !option.starts_with("//") && !option.contains('*') {
                    let last = option.rsplit('/').next().unwrap_or_default();
                    format!("{main}[/{last}]")
                } else {
                    format!("{main}[{option}]")
                }
            }
            None => words[1].to_string(),
        };
        map.insert(name, TestStatus::from_word(words[0]));
    }
    Ok(map)
}

fn parse_django(log: &str) -> Result<StatusMap, ParseError> {
    static PATTERNS: LazyLock<[Regex; 3]> = LazyLock::new(|| {
        [
            python_regex(
                r"(?m)^(.*?){S}\.\.\.{S}Testing against Django installed in ((?s:.*?)) silenced\)\.\nok$",
            ),
            python_regex(r"(?m)^(.*?){S}\.\.\.{S}Internal Server Error: /(.*)/\nok$"),
            python_regex(
                r"(?m)^(.*?){S}\.\.\.{S}System check identified no issues \(0 silenced\)\nok$",
            ),
        ]
    });
    let second_word = |line: &str| -> Result<String, ParseError> {
        py_split(line)
            .get(1)
            .map(|word| word.to_string())
            .ok_or_else(|| ParseError::Raised {
                parser: "parse_log_django",
                exception: "IndexError",
                line: crate::text::prefix(line, 200),
            })
    };
    let mut map = StatusMap::default();
    let mut prev_test: Option<String> = None;
    for line in log.split('\n') {
        let mut line = py_strip(line);
        if line.contains("--version is equivalent to version") {
            map.insert(
                "--version is equivalent to version".to_string(),
                TestStatus::Passed,
            );
        }
        if let Some((before, _)) = line.split_once(" ... ") {
            prev_test = Some(before.to_string());
        }
        for suffix in [" ... ok", " ... OK", " ...  OK"] {
            if line.ends_with(suffix) {
                if line.starts_with("Applying sites.0002_alter_domain_unique...test_no_migrations")
                {
                    line = py_strip(line.split_once("...").map_or(line, |(_, after)| after));
                }
                let test = line.rfind(suffix).map_or(line, |at| &line[..at]);
                map.insert(test.to_string(), TestStatus::Passed);
                break;
            }
        }
        if let Some((test, _)) = line.split_once(" ... skipped") {
            map.insert(test.to_string(), TestStatus::Skipped);
        }
        if line.ends_with(" ... FAIL") {
            let test = line.split_once(" ... FAIL").map_or(line, |(test, _)| test);
            map.insert(test.to_string(), TestStatus::Failed);
        }
        if line.starts_with("FAIL:") {
            map.insert(second_word(line)?, TestStatus::Failed);
        }
        if line.ends_with(" ... ERROR") {
            let test = line.split_once(" ... ERROR").map_or(line, |(test, _)| test);
            map.insert(test.to_string(), TestStatus::Error);
        }
        if line.starts_with("ERROR:") {
            map.insert(second_word(line)?, TestStatus::Error);
        }
        if let Some(test) = &prev_test {
            if py_strip(line).starts_with("ok") {
                map.insert(test.clone(), TestStatus::Passed);
            }
        }
    }
    for pattern in PATTERNS.iter() {
        for found in pattern.captures_iter(log) {
            map.insert(found[1].to_string(), TestStatus::Passed);
        }
    }
    Ok(map)
}

fn parse_pytest_v2(log: &str) -> Result<StatusMap, ParseError> {
    static COLOR: LazyLock<Regex> = LazyLock::new(|| python_regex(r"\[({D}+)m"));
    let mut map = StatusMap::default();
    for line in log.split('\n') {
        let line: String = COLOR
            .replace_all(line, "")
            .chars()
            .filter(|c| !('\u{1}'..='\u{1f}').contains(c))
            .collect();
        if starts_with_status(&line) {
            let line = if line.starts_with("FAILED") {
                line.split_once(" - ")
                    .map_or(line.as_str(), |(head, _)| head)
            } else {
                &line
            };
            let words = py_split(line);
            if words.len() >= 2 && !is_skip_summary(words[0], words[1]) {
                map.insert(words[1..].join(" "), TestStatus::from_word(words[0]));
            }
        } else if STATUS_WORDS.iter().any(|word| line.ends_with(word)) {
            let words = py_split(&line);
            if let [name @ .., status] = words.as_slice() {
                if !name.is_empty() {
                    map.insert(name.join(" "), TestStatus::from_word(status));
                }
            }
        }
    }
    Ok(map)
}

fn parse_seaborn(log: &str) -> Result<StatusMap, ParseError> {
    let mut map = StatusMap::default();
    for line in log.split('\n') {
        let parts = py_split(line);
        if parts.len() < 2 {
            continue;
        }
        if line.starts_with("FAILED") {
            map.insert(parts[1].to_string(), TestStatus::Failed);
        } else if line.contains(" PASSED ") {
            if parts[1] == "PASSED" {
                map.insert(parts[0].to_string(), TestStatus::Passed);
            }
        } else if line.starts_with("PASSED") {
            map.insert(parts[1].to_string(), TestStatus::Passed);
        }
    }
    Ok(map)
}

fn parse_sympy(log: &str) -> Result<StatusMap, ParseError> {
    static FAILURE: LazyLock<Regex> = LazyLock::new(|| python_regex(r"(_*) (.*)\.py:(.*) (_*)"));
    let mut map = StatusMap::default();
    for found in FAILURE.captures_iter(log) {
        map.insert(
            format!("{}.py:{}", &found[2], &found[3]),
            TestStatus::Failed,
        );
    }
    for line in log.split('\n') {
        let line = py_strip(line);
        if !line.starts_with("test_") {
            continue;
        }
        // `line` starts with "test_", so it has a first word.
        let test = py_split(line)[0].to_string();
        if line.ends_with(" E") {
            map.insert(test.clone(), TestStatus::Error);
        }
        if line.ends_with(" F") {
            map.insert(test.clone(), TestStatus::Failed);
        }
        if line.ends_with(" ok") {
            map.insert(test, TestStatus::Passed);
        }
    }
    Ok(map)
}
