//! SWE-bench grading against the official package: every case is graded by
//! `agentbatch::suite::swebench` and by swebench 5.0.2 itself (tests/python/swebench_grade.py,
//! from the venv tests/run.sh makes), and the two must agree on the parsed statuses (and
//! their order), the validity of the log, the per-test lists and the verdict.
//!
//! The cases are realistic logs of each parser's runner (pytest -rA, Django's verbose
//! unittest, sympy's runner, seaborn, matplotlib) and hostile variants of them: Python-only
//! whitespace (`\x1c`-`\x1f`, `\x85`, no-break spaces), ANSI colours, CRLF and lone CR,
//! truncated parametrized ids, a test listed twice with different statuses, results after
//! the end marker, missing or repeated markers, apply-failure markers, exit codes in
//! other digits or forged by the patch, odd status words, the line that makes Django's
//! parser raise. They come from a seeded generator, so a failure names a case that
//! comes back on every run.

use std::path::PathBuf;

use serde_json::{json, Value};

use agentbatch::suite::swebench::{
    self, eval_script_with_exit_code, grade, parse_log_ordered, python_chars, EvalType, ParseError,
    END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE,
};

use super::common::Case;

/// splitmix64: deterministic, no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Whitespace that Python and Rust disagree on, or that lines are split on.
const SPACES: &[&str] = &[
    " ", " ", " ", "\t", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\u{85}", "\u{a0}",
    "\u{2028}", "\u{3000}", "\u{200b}", "\r",
];
const WORDS: &[&str] = &[
    "parse",
    "roundtrip",
    "empty",
    "unicode",
    "fit",
    "predict",
    "log",
    "migrate",
    "render",
    "click",
    "xfail",
];
const PARAMS: &[&str] = &[
    "[a-b]",
    "[log(photon)]",
    "[1.5-None]",
    "[/usr/lib/x.txt]",
    "[//net/share]",
    "[/a/*/b]",
    "[MouseButton.LEFT]",
    "[MouseButton.RIGHT-2]",
    "[a[1]]",
    "[x - y]",
    "[\u{663}]",
    "[ü-ß]",
];
const STATUSES: &[&str] = &["PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL"];

fn pytest_name(rng: &mut Rng) -> String {
    let mut name = format!(
        "tests/test_{}.py::{}test_{}",
        rng.pick(WORDS),
        if rng.chance(30) { "TestThing::" } else { "" },
        rng.pick(WORDS)
    );
    if rng.chance(45) {
        name.push_str(rng.pick(PARAMS));
    }
    name
}

fn django_name(rng: &mut Rng) -> String {
    format!(
        "test_{}_{} ({}.tests.{}Tests)",
        rng.pick(WORDS),
        rng.below(9),
        rng.pick(&["admin_views", "migrations", "forms_tests", "auth_tests"]),
        rng.pick(&["Admin", "Model", "Form"])
    )
}

/// One test result of a run: its name and the status the runner printed.
struct Event {
    name: String,
    status: &'static str,
}

/// A few tests, some listed twice with another status, as a runner reports them.
fn events(rng: &mut Rng, name: fn(&mut Rng) -> String) -> Vec<Event> {
    let mut out: Vec<Event> = (0..1 + rng.below(8))
        .map(|_| Event {
            name: name(rng),
            status: rng.pick(STATUSES),
        })
        .collect();
    if !out.is_empty() && rng.chance(25) {
        let again = out[rng.below(out.len())].name.clone();
        out.push(Event {
            name: again,
            status: rng.pick(STATUSES),
        });
    }
    out
}

fn failure_message(rng: &mut Rng) -> String {
    rng.pick(&[
        "AssertionError: assert 1 == 2",
        "ValueError: a - b",
        "assert x - y",
        "",
        "TypeError",
    ])
    .to_string()
}

/// pytest -rA: progress lines, then the short summary.
fn pytest_body(rng: &mut Rng, events: &[Event], colour: bool) -> Vec<String> {
    let paint = |rng: &mut Rng, status: &str| -> String {
        if colour && rng.chance(60) {
            // U+1E4F3: a digit since Unicode 15, not in Python 3.11's
            let code = rng.pick(&["32", "31", "1;33", "\u{663}", "0", "\u{1e4f3}"]);
            format!("\x1b[{code}m{status}\x1b[0m")
        } else {
            status.to_string()
        }
    };
    let mut lines = vec![
        "============================= test session starts =============================="
            .to_string(),
        format!("collected {} items", events.len()),
        String::new(),
    ];
    for (n, e) in events.iter().enumerate() {
        let status = paint(rng, e.status);
        lines.push(format!(
            "{} {status} [{:>3}%]",
            e.name,
            (n + 1) * 100 / events.len()
        ));
    }
    lines.push(
        "=========================== short test summary info ============================"
            .to_string(),
    );
    for e in events {
        let status = paint(rng, e.status);
        let line = match e.status {
            "FAILED" | "ERROR" | "XFAIL" if rng.chance(70) => {
                format!("{status} {} - {}", e.name, failure_message(rng))
            }
            "SKIPPED" if rng.chance(50) => {
                format!(
                    "{status} [{}] {}:{}: needs network",
                    1 + rng.below(3),
                    e.name,
                    rng.below(90)
                )
            }
            _ => format!("{status} {}", e.name),
        };
        lines.push(line);
    }
    lines.push(format!(
        "======================== {} passed in 0.12s =========================",
        events.len()
    ));
    lines
}

fn django_body(rng: &mut Rng, events: &[Event]) -> Vec<String> {
    let mut lines = vec!["Testing against Django installed in '/testbed/django'".to_string()];
    let mut failures = Vec::new();
    for e in events {
        match e.status {
            "PASSED" => match rng.below(6) {
                0 => lines.push(format!("{} ... \nsome output\nok", e.name)),
                1 => lines.push(format!(
                    "{} ... Testing against Django installed in '/testbed/django'\nSystem check identified no issues (0 silenced).\nok",
                    e.name
                )),
                2 => lines.push(format!("{} ... Internal Server Error: /admin/x/\nok", e.name)),
                3 => lines.push(format!(
                    "{} ... System check identified no issues (0 silenced)\nok",
                    e.name
                )),
                4 => lines.push(format!("{}\nDocstring of the test ...  OK", e.name)),
                _ => lines.push(format!("{} ... ok", e.name)),
            },
            "FAILED" => {
                lines.push(format!("{} ... FAIL", e.name));
                failures.push(format!("FAIL: {}", e.name));
            }
            "ERROR" => {
                lines.push(format!("{} ... ERROR", e.name));
                failures.push(format!("ERROR: {}", e.name));
            }
            "SKIPPED" => lines.push(format!("{} ... skipped 'Database lacks support'", e.name)),
            _ => lines.push(format!("{} ... expected failure", e.name)),
        }
    }
    for failure in failures {
        lines.push("=".repeat(70));
        lines.push(failure);
        lines.push("-".repeat(70));
        lines.push(
            "Traceback (most recent call last):\n  File \"x.py\", line 3\nAssertionError"
                .to_string(),
        );
    }
    lines.push(format!("Ran {} tests in 0.050s", events.len()));
    if rng.chance(30) {
        lines.push("--version is equivalent to version".to_string());
    }
    lines.push(
        rng.pick(&["OK", "FAILED (failures=1)", "OK (skipped=1)"])
            .to_string(),
    );
    lines
}

fn sympy_body(rng: &mut Rng, events: &[Event]) -> Vec<String> {
    let mut lines = vec![
        "============================= test process starts =============================="
            .to_string(),
        "sympy/core/tests/test_basic.py[4] ".to_string(),
    ];
    let mut headers = Vec::new();
    for e in events {
        let mark = match e.status {
            "PASSED" => "ok",
            "FAILED" => "F",
            "ERROR" => "E",
            "SKIPPED" => "s",
            _ => "f",
        };
        lines.push(format!("{} {mark}", e.name));
        if matches!(e.status, "FAILED" | "ERROR") {
            headers.push(format!(
                "{} sympy/core/tests/test_{}.py:{} {}",
                "_".repeat(1 + rng.below(20)),
                rng.pick(WORDS),
                e.name,
                "_".repeat(rng.below(20))
            ));
        }
    }
    lines.push(String::new());
    lines.extend(headers);
    lines.push("Traceback (most recent call last):\nAssertionError".to_string());
    lines.push(format!(
        "============ tests finished: {} passed, in 0.10 seconds ============",
        events.len()
    ));
    lines
}

/// seaborn's runner: `name PASSED [ n%]` and the summary.
fn seaborn_body(rng: &mut Rng, events: &[Event]) -> Vec<String> {
    let mut lines = Vec::new();
    for e in events {
        lines.push(format!("{} {} [ {}%]", e.name, e.status, rng.below(100)));
    }
    lines.extend(pytest_body(rng, events, false));
    lines
}

/// Lines that look like results but are not, or that the parsers read oddly.
fn noise(rng: &mut Rng, parser: &str) -> String {
    let common = [
        "ERROR: file or directory not found: tests/test_missing.py",
        "PASSEDfoo bar",
        "FAILED",
        "PASSED [100%]",
        "SKIPPED [3] tests/test_x.py:12: unconditional skip",
        "test_thing barPASSED",
        "x PASSED y",
        "FAILED - tests/test_x.py::test_dash",
        "ok",
        "test_lonely E",
    ];
    let django = [
        "FAIL:",
        "ERROR:\x1c",
        "FAIL:test_glued",
        "Applying sites.0002_alter_domain_unique...test_no_migrations (migrations.T) ... ok",
        "test_a (x.T) ... okay",
    ];
    if parser == "parse_log_django" && rng.chance(30) {
        rng.pick(&django).to_string()
    } else {
        rng.pick(&common).to_string()
    }
}

/// A line of evidence that a suite ran (or evidence that SUITE_RAN must refuse).
fn suite_ran_line(rng: &mut Rng) -> &'static str {
    rng.pick(&[
        "Executed 3 of 3 SUCCESS",
        "Executed 0 of 0",
        "TOTAL: 2 SUCCESS",
        "5 passing (20ms)",
        "0 passing",
        "Tests:\x1c 4 passed",
        "Test Suites: 1 failed, 2 passed, 3 total",
        "Test Suites: 1 fa\u{301}iled, 2 total",
        "# tests 7",
        "  # tests 7",
        "1 spec, 0 failures",
        "'render-case': ok",
        "Tests: \u{663}",
    ])
}

/// Sprinkles Python-only whitespace, colours and carriage returns through a line.
fn roughen(rng: &mut Rng, line: &str) -> String {
    let mut out = String::new();
    for c in line.chars() {
        if c == ' ' && rng.chance(15) {
            out.push_str(rng.pick(SPACES));
        } else {
            out.push(c);
        }
        if rng.chance(1) {
            out.push_str(rng.pick(&["\x1b[0m", "\x1b[1m", "\x1f", "\u{a0}", "\r"]));
        }
    }
    if rng.chance(8) {
        out.push_str(rng.pick(SPACES));
    }
    if rng.chance(5) {
        out.insert_str(0, rng.pick(SPACES));
    }
    out
}

/// The expected test lists: some tests of the log, some absent, some cut mid-parameter.
fn expected(rng: &mut Rng, events: &[Event]) -> (Vec<String>, Vec<String>) {
    let mut lists = (Vec::new(), Vec::new());
    for e in events {
        let mut name = e.name.clone();
        if let Some(open) = name.find('[') {
            if rng.chance(35) {
                let end = open + 1 + rng.below(name.len() - open - 1);
                let end = (end..=name.len())
                    .find(|&i| name.is_char_boundary(i))
                    .unwrap_or(name.len());
                name.truncate(end);
            }
        }
        match rng.below(3) {
            0 => lists.0.push(name),
            1 => lists.1.push(name),
            _ => {}
        }
    }
    if rng.chance(20) {
        lists
            .0
            .push("tests/test_absent.py::test_absent".to_string());
    }
    if rng.chance(10) {
        lists.1.push("test_absent (x.T)".to_string());
    }
    lists
}

/// One whole case: a test output as the eval script prints it, around the runner's lines.
fn generated(rng: &mut Rng, n: usize) -> Value {
    let parsers = [
        "parse_log_pytest",
        "parse_log_pytest_options",
        "parse_log_django",
        "parse_log_pytest_v2",
        "parse_log_seaborn",
        "parse_log_sympy",
        "parse_log_matplotlib",
        "parse_log_astropy",
        "parse_log_requests",
        "parse_log_flask",
    ];
    let parser = parsers[n % parsers.len()];
    let (events, mut lines) = match parser {
        "parse_log_django" => {
            let events = events(rng, django_name);
            let lines = django_body(rng, &events);
            (events, lines)
        }
        "parse_log_sympy" => {
            let events = events(rng, |rng| {
                format!("test_{}_{}", rng.pick(WORDS), rng.below(9))
            });
            let lines = sympy_body(rng, &events);
            (events, lines)
        }
        "parse_log_seaborn" => {
            let events = events(rng, pytest_name);
            let lines = seaborn_body(rng, &events);
            (events, lines)
        }
        _ => {
            let events = events(rng, pytest_name);
            let colour = matches!(parser, "parse_log_pytest_v2" | "parse_log_astropy");
            let lines = pytest_body(rng, &events, colour);
            (events, lines)
        }
    };
    for _ in 0..rng.below(3) {
        let at = rng.below(lines.len() + 1);
        lines.insert(at, noise(rng, parser));
    }
    if rng.chance(12) {
        // nothing parsed: only SUITE_RAN can keep the log valid
        lines = vec!["no tests ran".to_string(), suite_ran_line(rng).to_string()];
    } else if rng.chance(5) {
        lines.push(suite_ran_line(rng).to_string());
    }
    let roughen_lines = rng.chance(40);
    let body: Vec<String> = lines
        .iter()
        .map(|line| {
            if roughen_lines {
                roughen(rng, line)
            } else {
                line.clone()
            }
        })
        .collect();

    let exit_code = match rng.below(12) {
        0..=3 => None,
        4..=6 => Some("0".to_string()),
        7 | 8 => Some("1".to_string()),
        9 => Some(
            rng.pick(&[
                "-0",
                "\u{663}",
                "\u{660}",
                "\u{1e4f3}",
                "99999999999999999999",
                "-1",
                "00",
            ])
            .to_string(),
        ),
        10 => Some("\x1c 2".to_string()),
        _ => Some(" 137".to_string()),
    };
    let mut log =
        String::from("+ source /opt/miniconda3/bin/activate\n+ git checkout abc123 tests/\n");
    let start = rng.chance(94);
    let end = rng.chance(94);
    if rng.chance(10) {
        // results printed before the start marker (stdout and stderr interleaved)
        log.push_str(&body.join("\n"));
        log.push('\n');
        log.push_str(&format!(
            "{START_TEST_OUTPUT}\n+ pytest -rA\n{END_TEST_OUTPUT}\n"
        ));
    } else {
        if start {
            log.push_str(&format!("+ : '{START_TEST_OUTPUT}'\n{START_TEST_OUTPUT}\n"));
        }
        if rng.chance(5) {
            // the patch prints a marker, or a forged exit code, of its own
            log.push_str(rng.pick(&[
                START_TEST_OUTPUT,
                END_TEST_OUTPUT,
                ">>>>> Test Exit Code: 0",
            ]));
            log.push('\n');
        }
        log.push_str(&body.join("\n"));
        log.push('\n');
        if end {
            log.push_str(&format!("+ : '{END_TEST_OUTPUT}'\n{END_TEST_OUTPUT}\n"));
        }
    }
    if let Some(code) = &exit_code {
        log.push_str(&format!("{TEST_EXIT_CODE}:{code}\n"));
    }
    if rng.chance(10) {
        // results after the end marker
        log.push_str(&format!("PASSED {}\ntest_after ok\n", pytest_name(rng)));
    }
    if rng.chance(6) {
        log.push_str(rng.pick(&[
            ">>>>> Patch Apply Failed",
            ">>>>> Reset Failed",
            ">>>>> Tests Errored",
            ">>>>> Tests Timed Out",
            ">>>>> Applied Patch",
            ">>>>> Some Tests Failed",
        ]));
        log.push('\n');
    }
    if rng.chance(15) {
        // a sign of a broken environment, which an invalid log's report labels
        log.push_str(rng.pick(&[
            "Killed",
            " Killed",
            "Killed\r",
            "ModuleNotFoundError: No module named 'numpy'",
            "Timeout error: 1800 seconds exceeded.",
            "Timeout error: \u{663}\u{1e4f3} seconds exceeded.",
            "curl: (6) Could not resolve host: github.com",
            "Error: Failed to launch the browser process!",
            "collected 0 items",
        ]));
        log.push('\n');
    }
    log.push_str("+ git checkout abc123 tests/\nUpdated 1 path from 5f3e2a1\n");
    if rng.chance(15) {
        log = log.replace('\n', "\r\n");
    }
    let (f2p, p2p) = expected(rng, &events);
    json!({
        "kind": "grade",
        "log": log,
        "parser": parser,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "eval_type": if rng.chance(25) { "fail_only" } else { "pass_and_fail" },
    })
}

/// Pieces the parsers' rules turn on, for logs of token soup: what no realistic log
/// combines (regex backtracking in sympy's and Django's patterns, markers inside words).
const TOKENS: &[&str] = &[
    "PASSED",
    "FAILED",
    "SKIPPED",
    "ERROR",
    "XFAIL",
    " - ",
    "[",
    "]",
    "[1]",
    "/",
    "*",
    "//",
    " ",
    " ",
    " ",
    "\n",
    "\n",
    "\n",
    "\r",
    "\r\n",
    "\x1c",
    "\x1f",
    "\u{85}",
    "\u{a0}",
    "\x0b",
    "\x1b[0m",
    "\x1b[32m",
    "m",
    "\u{663}",
    "0",
    "7",
    "_",
    "__",
    "test_",
    "test_a",
    ".py:",
    ".py",
    "::",
    "ok",
    " ok",
    "OK",
    " E",
    " F",
    "E",
    "F",
    "...",
    " ... ",
    " ... ok",
    " ...  OK",
    " ... FAIL",
    " ... ERROR",
    " ... skipped",
    "FAIL:",
    "ERROR:",
    "Testing against Django installed in ",
    " silenced).",
    "(0 silenced)",
    "Internal Server Error: /",
    "System check identified no issues ",
    "MouseButton.LEFT",
    ">>>>> Start Test Output",
    ">>>>> End Test Output",
    ">>>>> Test Exit Code",
    ": ",
    "-",
    "Tests: ",
    "Executed 1 of 2",
    "': ok",
    "--version is equivalent to version",
    "Applying sites.0002_alter_domain_unique...test_no_migrations",
];

/// A log of token soup, between markers most of the time.
fn soup(rng: &mut Rng, n: usize) -> Value {
    let parser = swebench::PARSERS[n % swebench::PARSERS.len()];
    let mut body = String::new();
    for _ in 0..rng.below(120) {
        body.push_str(rng.pick(TOKENS));
    }
    let log = match rng.below(4) {
        0 => body,
        _ => format!("{START_TEST_OUTPUT}\n{body}\n{END_TEST_OUTPUT}\n"),
    };
    let mut names: Vec<String> = Vec::new();
    if let Ok(parsed) = parse_log_ordered(parser, &log) {
        for (name, _) in parsed {
            let cut = rng.below(name.len() + 1);
            let cut = (cut..=name.len())
                .find(|&i| name.is_char_boundary(i))
                .unwrap_or(name.len());
            names.push(if rng.chance(30) {
                name[..cut].to_string()
            } else {
                name
            });
        }
    }
    let (f2p, p2p): (Vec<_>, Vec<_>) = names.into_iter().partition(|_| rng.chance(50));
    json!({
        "kind": "grade",
        "log": log,
        "parser": parser,
        "FAIL_TO_PASS": f2p,
        "PASS_TO_PASS": p2p,
        "eval_type": if rng.chance(25) { "fail_only" } else { "pass_and_fail" },
    })
}

/// Cases written out by hand: each rule of grading once, as the unit tests state them.
fn fixed() -> Vec<Value> {
    let wrap = |body: &str, code: Option<&str>| {
        let mut log = format!("{START_TEST_OUTPUT}\n{body}\n{END_TEST_OUTPUT}\n");
        if let Some(code) = code {
            log.push_str(&format!("{TEST_EXIT_CODE}: {code}\n"));
        }
        log
    };
    let case = |log: String, parser: &str, f2p: &[&str], p2p: &[&str], eval_type: &str| json!({"kind": "grade", "log": log, "parser": parser, "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p, "eval_type": eval_type});
    let pytest = "parse_log_pytest";
    vec![
        case(
            wrap("PASSED t.py::a\nPASSED t.py::b", Some("1")),
            pytest,
            &["t.py::a"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::a\nPASSED t.py::b", Some("0")),
            pytest,
            &["t.py::a"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("SKIPPED t.py::a\nPASSED t.py::b", None),
            pytest,
            &["t.py::a"],
            &["t.py::b"],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::a\nSKIPPED t.py::b", None),
            pytest,
            &["t.py::a"],
            &["t.py::b"],
            "pass_and_fail",
        ),
        case(
            wrap("FAILED t.py::b\nERROR t.py::c\nSKIPPED t.py::d", Some("1")),
            pytest,
            &["t.py::a", "t.py::c", "t.py::d"],
            &["t.py::e"],
            "fail_only",
        ),
        case(
            wrap("FAILED t.py::b", Some("1")),
            pytest,
            &["t.py::a"],
            &["t.py::b"],
            "fail_only",
        ),
        case(
            wrap("FAILED t.py::g[ab]", None),
            pytest,
            &["t.py::g[a"],
            &[],
            "fail_only",
        ),
        case(
            wrap("ERROR: x y", None),
            pytest,
            &["x"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::a\nERROR: x", Some("2")),
            pytest,
            &["t.py::a"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap(
                "SKIPPED t.py::test_g[a1]\nFAILED t.py::test_g[a2]\nPASSED t.py::x",
                None,
            ),
            pytest,
            &["t.py::x"],
            &["t.py::test_g[a"],
            "pass_and_fail",
        ),
        case(
            wrap(
                "FAILED t.py::test_g[a2]\nSKIPPED t.py::test_g[a1]\nPASSED t.py::x",
                None,
            ),
            pytest,
            &["t.py::x"],
            &["t.py::test_g[a"],
            "pass_and_fail",
        ),
        case(
            wrap(
                "PASSED t.py::test_g[log(photon)]\nXFAIL t.py::test_g[log(photon2)]",
                None,
            ),
            pytest,
            &["t.py::test_g[log(photon"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::test_g[a]b", None),
            pytest,
            &["t.py::test_g[a]"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED a\rPASSED b\r\nPASSED c", None),
            pytest,
            &["b"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::a", Some("\u{663}")),
            pytest,
            &[],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::a", Some("99999999999999999999")),
            pytest,
            &[],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("collected 0 items", None),
            pytest,
            &["a"],
            &[],
            "fail_only",
        ),
        case(
            wrap("Tests:\x1c 3 passed", None),
            pytest,
            &["a"],
            &[],
            "fail_only",
        ),
        case(
            wrap("Test Suites: 1 fa\u{301}iled, 2 total", None),
            pytest,
            &[],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("Test Suites: 1 f\u{2160}iled, 2 total", None),
            pytest,
            &[],
            &[],
            "pass_and_fail",
        ),
        case(
            format!("PASSED t.py::a\n{START_TEST_OUTPUT}\nnothing\n{END_TEST_OUTPUT}\n"),
            pytest,
            &["t.py::a"],
            &[],
            "pass_and_fail",
        ),
        case(
            format!(
                "{START_TEST_OUTPUT}\nPASSED a\n{START_TEST_OUTPUT}\nPASSED b\n{END_TEST_OUTPUT}\n"
            ),
            pytest,
            &["a"],
            &["b"],
            "pass_and_fail",
        ),
        case(
            format!("{END_TEST_OUTPUT}\n{START_TEST_OUTPUT}\nPASSED a\n"),
            pytest,
            &["a"],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("FAIL:", Some("1")),
            "parse_log_django",
            &[],
            &[],
            "pass_and_fail",
        ),
        case(
            format!("{START_TEST_OUTPUT}\ntest_a (x.T) ... ok\n{END_TEST_OUTPUT}\nFAIL:\n"),
            "parse_log_django",
            &["test_a (x.T)"],
            &[],
            "pass_and_fail",
        ),
        case(
            format!("{START_TEST_OUTPUT}\nnothing\n{END_TEST_OUTPUT}\nFAIL:\n"),
            "parse_log_django",
            &[],
            &[],
            "pass_and_fail",
        ),
        case(
            wrap("PASSED t.py::a", None),
            pytest,
            &[],
            &[],
            "pass_and_fail",
        ),
        case(String::new(), pytest, &[], &[], "pass_and_fail"),
    ]
}

/// Eval scripts, for make_test_spec's recording of the exit code.
fn eval_scripts(rng: &mut Rng) -> Vec<Value> {
    let mut scripts = vec![
        String::new(),
        "\x1c\n".to_string(),
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA tests\n: '>>>>> End Test Output'\ngit checkout abc tests\n".to_string(),
        "echo no markers\n".to_string(),
    ];
    for _ in 0..40 {
        let mut lines = Vec::new();
        for _ in 0..rng.below(8) {
            lines.push(
                rng.pick(&[
                    "#!/bin/bash",
                    "set -uxo pipefail",
                    " set -uxo pipefail",
                    "set -uxo pipefail\r",
                    "cd /testbed",
                    ": '>>>>> Start Test Output'",
                    ": '>>>>> End Test Output'",
                    "echo '>>>>> End Test Output' # again",
                    "pytest -rA tests/test_x.py",
                    "",
                    "\x1f",
                    "git checkout abc tests/",
                ])
                .to_string(),
            );
        }
        let mut script = lines.join(rng.pick(&["\n", "\n", "\r\n"]));
        if rng.chance(50) {
            script.push_str(rng.pick(SPACES));
        }
        scripts.push(script);
    }
    scripts
        .into_iter()
        .map(|script| json!({"kind": "eval_script", "eval_script": script}))
        .collect()
}

/// The official package's answers, one per case.
fn official(cases: &[Value]) -> Vec<Value> {
    let python = std::env::var("AGENTBATCH_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("AGENTBATCH_TEST_PYTHON is not set: the SWE-bench grading test needs the official swebench package from tests/python/.venv; run it through ./tests/run.sh (e.g. ./tests/run.sh --test integration swebench_grading)")
    });
    let dir = Case::new();
    let input = dir.write("cases.json", &Value::from(cases.to_vec()).to_string());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/swebench_grade.py");
    let out = std::process::Command::new(&python)
        .arg(&script)
        .arg(&input)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {python}: {e} (run ./tests/run.sh to make the venv)")
        });
    assert!(
        out.status.success(),
        "the official grading failed (is swebench 5.0.2 installed in the venv? ./tests/run.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> =
        serde_json::from_slice(&out.stdout).expect("swebench_grade.py prints a JSON list");
    assert_eq!(results.len(), cases.len());
    results
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|item| item.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A Python list of [name, status] pairs.
fn pairs(value: &Value) -> Vec<(String, String)> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|pair| {
                    (
                        pair[0].as_str().unwrap_or_default().to_string(),
                        pair[1].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How this port's answer on a grading case differs from the official one (empty: agrees).
fn differences(case: &Value, official: &Value, tally: &mut Tally) -> Vec<String> {
    let mut found = Vec::new();
    let log = case["log"].as_str().unwrap_or_default();
    let parser = case["parser"].as_str().unwrap_or_default();

    let parsed = parse_log_ordered(parser, log);
    match (&parsed, official["parse"].get("raised")) {
        (Err(ParseError::Raised { .. }), Some(_)) => {}
        (Ok(ours), None) => {
            let ours: Vec<(String, String)> = ours
                .iter()
                .map(|(name, status)| (name.clone(), status.as_str().to_string()))
                .collect();
            let theirs = pairs(&official["parse"]);
            if ours != theirs {
                found.push(format!("parse_log: ours {ours:?}\n  official {theirs:?}"));
            }
        }
        (ours, theirs) => found.push(format!(
            "parse_log: ours {ours:?}, official raised {theirs:?}"
        )),
    }

    let eval_type: EvalType = case["eval_type"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .expect("eval type");
    let graded = grade(
        log,
        parser,
        &strings(&case["FAIL_TO_PASS"]),
        &strings(&case["PASS_TO_PASS"]),
        eval_type,
    );
    let theirs = &official["grade"];
    if theirs.get("raised").is_some() {
        tally.raised += 1;
        if graded.valid
            || !graded
                .invalid_reason
                .as_deref()
                .is_some_and(|r| r.contains("raises"))
        {
            found.push(format!(
                "grade: the official code raised {theirs}, ours {graded:?}"
            ));
        }
        return found;
    }
    let valid = theirs["valid"].as_bool().unwrap_or_default();
    let resolved = theirs["resolved"].as_bool().unwrap_or_default();
    if valid {
        tally.valid += 1;
    } else {
        tally.invalid += 1;
    }
    if resolved {
        tally.resolved += 1;
    }
    if graded
        .statuses
        .values()
        .any(|s| matches!(s, swebench::TestStatus::Other(_)))
    {
        tally.odd_status += 1;
    }
    if graded.valid != valid || graded.resolved != resolved {
        found.push(format!(
            "grade: ours valid {} resolved {} ({:?}), official valid {valid} resolved {resolved}",
            graded.valid, graded.resolved, graded.invalid_reason
        ));
    }
    let ours: Vec<(String, String)> = graded
        .statuses
        .iter()
        .map(|(name, status)| (name.clone(), status.as_str().to_string()))
        .collect();
    let mut official_statuses = pairs(&theirs["statuses"]);
    official_statuses.sort();
    if ours != official_statuses {
        found.push(format!(
            "grade statuses: ours {ours:?}\n  official {official_statuses:?}"
        ));
    }
    let infra = (
        graded.infra_failure.as_ref().is_some_and(|f| f.environment),
        graded.infra_failure.as_ref().map(|f| f.reason),
    );
    let official_infra = (
        theirs["infra_failure"].as_bool().unwrap_or_default(),
        theirs["infra_failure_reason"].as_str(),
    );
    if infra != official_infra {
        found.push(format!(
            "infra_failure: ours {infra:?}, official {official_infra:?}"
        ));
    }
    if infra.1.is_some() {
        tally.infra += 1;
    }
    if valid {
        for (field, ours) in [
            ("f2p_success", &graded.f2p_success),
            ("f2p_failure", &graded.f2p_failure),
            ("p2p_success", &graded.p2p_success),
            ("p2p_failure", &graded.p2p_failure),
        ] {
            if *ours != strings(&theirs[field]) {
                found.push(format!(
                    "{field}: ours {ours:?}, official {}",
                    theirs[field]
                ));
            }
        }
        let resolution = serde_json::to_value(graded.resolution).unwrap_or_default();
        if resolution != theirs["resolution"] {
            found.push(format!(
                "resolution: ours {resolution}, official {}",
                theirs["resolution"]
            ));
        }
        if resolution == "RESOLVED_PARTIAL" {
            tally.partial += 1;
        }
    }
    found
}

/// What the cases covered, so that a generator that stopped producing a kind of case fails.
#[derive(Debug, Default)]
struct Tally {
    valid: usize,
    invalid: usize,
    resolved: usize,
    partial: usize,
    raised: usize,
    odd_status: usize,
    infra: usize,
}

#[test]
fn grading_agrees_with_the_official_swebench_package() {
    let mut rng = Rng(0x5eb_e4c4_2024);
    let mut cases = fixed();
    for n in 0..600 {
        cases.push(generated(&mut rng, n));
    }
    for n in 0..300 {
        cases.push(soup(&mut rng, n));
    }
    cases.extend(eval_scripts(&mut rng));
    let answers = official(&cases);

    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for (n, (case, official)) in cases.iter().zip(&answers).enumerate() {
        let found = match case["kind"].as_str() {
            Some("grade") => differences(case, official, &mut tally),
            _ => {
                let script = case["eval_script"].as_str().unwrap_or_default();
                let ours = eval_script_with_exit_code(script);
                if official["eval_script"].as_str() == Some(ours.as_str()) {
                    Vec::new()
                } else {
                    vec![format!(
                        "eval_script: ours {ours:?}, official {}",
                        official["eval_script"]
                    )]
                }
            }
        };
        if !found.is_empty() {
            failures.push(format!("case {n}: {case}\n  {}", found.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from the official grading; the first:\n{}",
        failures.len(),
        cases.len(),
        failures
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    eprintln!("swebench grading: {} cases agree: {tally:?}", cases.len());
    assert!(
        tally.valid >= 200
            && tally.invalid >= 50
            && tally.resolved >= 30
            && tally.partial >= 5
            && tally.raised >= 3
            && tally.odd_status >= 20
            && tally.infra >= 10,
        "the cases no longer cover every outcome: {tally:?}"
    );
}

#[test]
fn the_python_character_tables_are_the_oracles() {
    let answers = official(&[json!({"kind": "tables"})]);
    let tables = &answers[0];
    for (name, ours) in [
        ("space", python_chars::SPACE),
        ("decimal", python_chars::DECIMAL),
        ("word", python_chars::WORD),
    ] {
        let theirs: Vec<u32> = tables[name]
            .as_array()
            .expect("ranges")
            .iter()
            .flat_map(|pair| {
                [
                    pair[0].as_u64().unwrap_or(u64::MAX) as u32,
                    pair[1].as_u64().unwrap_or(u64::MAX) as u32,
                ]
            })
            .collect();
        assert_eq!(
            ours,
            theirs.as_slice(),
            "python_chars::{} differs from this Python's re",
            name.to_uppercase()
        );
    }
    // each \d range starts at a zero, as the digit values assume
    let zeros: Vec<u32> = tables["decimal_zero"]
        .as_array()
        .expect("zeros")
        .iter()
        .map(|c| c.as_u64().unwrap_or_default() as u32)
        .collect();
    for pair in python_chars::DECIMAL.chunks_exact(2) {
        for zero in (pair[0]..=pair[1]).step_by(10) {
            assert!(zeros.contains(&zero), "{zero:#x} is not a zero digit");
        }
    }
}
