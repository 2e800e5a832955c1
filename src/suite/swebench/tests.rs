use super::python::{py_decimal, py_isspace, py_split, py_strip};
use super::*;

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

fn parsed(parser: &str, log: &str) -> Vec<(String, String)> {
    parse_log_ordered(parser, log)
        .expect("the parser reads the log")
        .into_iter()
        .map(|(name, status)| (name, status.as_str().to_string()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(name, status)| (name.to_string(), status.to_string()))
        .collect()
}

/// A test output as the eval script prints it, around `body`.
fn log(body: &str, exit_code: Option<i32>) -> String {
    let mut out = format!("+ git checkout abc\n{START_TEST_OUTPUT}\n{body}\n{END_TEST_OUTPUT}\n");
    if let Some(code) = exit_code {
        out.push_str(&format!("{TEST_EXIT_CODE}: {code}\n"));
    }
    out.push_str("+ git checkout abc tests/test_x.py\n");
    out
}

fn grade_pytest(body: &str, exit_code: Option<i32>, f2p: &[&str], p2p: &[&str]) -> Graded {
    grade(
        &log(body, exit_code),
        "parse_log_pytest",
        &strings(f2p),
        &strings(p2p),
        EvalType::PassAndFail,
    )
}

// MARK: Python's strings

#[test]
fn python_whitespace_includes_the_separators_rust_leaves_out() {
    for c in [
        '\x1c', '\x1d', '\x1e', '\x1f', '\x0b', '\x0c', '\u{85}', '\u{a0}', '\u{3000}',
    ] {
        assert!(py_isspace(c), "{c:?}");
    }
    for c in ['\0', '\u{200b}', '\u{180e}', 'a', '\u{7f}'] {
        assert!(!py_isspace(c), "{c:?}");
    }
    assert_eq!(py_split("\x1ca\x1fb\u{85}c\u{a0} "), ["a", "b", "c"]);
    assert_eq!(py_strip("\x1e x \x1d"), "x");
}

#[test]
fn python_digits_are_unicode_decimals() {
    assert_eq!(py_decimal('7'), Some(7));
    assert_eq!(py_decimal('\u{663}'), Some(3)); // ARABIC-INDIC DIGIT THREE
    assert_eq!(py_decimal('\u{ff10}'), Some(0)); // FULLWIDTH DIGIT ZERO
    assert_eq!(py_decimal('\u{1d7d9}'), Some(1)); // MATHEMATICAL DOUBLE-STRUCK DIGIT ONE
    assert_eq!(py_decimal('\u{b2}'), None); // SUPERSCRIPT TWO: a digit, not a decimal
    assert_eq!(py_decimal('x'), None);
}

// MARK: parsers

#[test]
fn pytest_reads_the_short_summary_and_keeps_first_seen_order() {
    let body = "tests/test_a.py::test_one PASSED [ 50%]\n\
                PASSED tests/test_a.py::test_one\n\
                PASSED tests/test_a.py::test_two\n\
                FAILED tests/test_a.py::test_three - AssertionError: 1 - 2\n\
                SKIPPED [2] tests/test_a.py:40: needs network\n\
                XFAIL tests/test_a.py::test_four - reason\n\
                ERROR tests/test_a.py::test_five - fixture\n\
                ERROR: file or directory not found: tests/missing.py\n\
                FAILED tests/test_a.py::test_one";
    assert_eq!(
        parsed("parse_log_pytest", body),
        pairs(&[
            ("tests/test_a.py::test_one", "FAILED"),
            ("tests/test_a.py::test_two", "PASSED"),
            ("tests/test_a.py::test_three", "FAILED"),
            ("tests/test_a.py::test_four", "XFAIL"),
            ("tests/test_a.py::test_five", "ERROR"),
            ("file", "ERROR:"),
        ])
    );
}

#[test]
fn pytest_drops_the_dash_of_a_failed_line_only() {
    assert_eq!(
        parsed("parse_log_pytest", "FAILED - x\nPASSED - y"),
        pairs(&[("x", "FAILED"), ("-", "PASSED")])
    );
}

#[test]
fn pytest_keeps_a_bracketed_progress_count_that_is_not_skipped() {
    assert_eq!(
        parsed(
            "parse_log_pytest",
            "PASSED [100%]\nSKIPPED [1] a.py:3: r\nSKIPPED [x] a.py"
        ),
        pairs(&[("[100%]", "PASSED"), ("[x]", "SKIPPED")])
    );
}

#[test]
fn pytest_splits_on_python_whitespace() {
    assert_eq!(
        parsed(
            "parse_log_pytest",
            "PASSED\x1ftest_a\x1c\nPASSED\u{85}test_b\r"
        ),
        pairs(&[("test_a", "PASSED"), ("test_b", "PASSED")])
    );
}

#[test]
fn pytest_options_shortens_path_options() {
    let body = "PASSED tests/test_x.py::test_a[/usr/lib/data.txt]\n\
                PASSED tests/test_x.py::test_b[//net/share]\n\
                PASSED tests/test_x.py::test_c[/a/*/b]\n\
                FAILED tests/test_x.py::test_d[x-[1]-y]tail - boom\n\
                PASSED tests/test_x.py::test_e";
    assert_eq!(
        parsed("parse_log_pytest_options", body),
        pairs(&[
            ("tests/test_x.py::test_a[/data.txt]", "PASSED"),
            ("tests/test_x.py::test_b[//net/share]", "PASSED"),
            ("tests/test_x.py::test_c[/a/*/b]", "PASSED"),
            ("tests/test_x.py::test_d[x-[1]-y]", "FAILED"),
            ("tests/test_x.py::test_e", "PASSED"),
        ])
    );
}

#[test]
fn matplotlib_names_mouse_buttons_by_number() {
    assert_eq!(
        parsed(
            "parse_log_matplotlib",
            "PASSED lib/t.py::test_click[MouseButton.LEFT]\nFAILED lib/t.py::test_click[MouseButton.RIGHT] - e"
        ),
        pairs(&[
            ("lib/t.py::test_click[1]", "PASSED"),
            ("lib/t.py::test_click[3]", "FAILED"),
        ])
    );
}

#[test]
fn pytest_v2_strips_colours_and_control_characters() {
    let body = "\x1b[32mPASSED\x1b[0m astropy/io/tests/test_a.py::test_one\n\
                \x1b[31mFAILED\x1b[0m astropy/io/tests/test_a.py::test_two - assert 1 - 2\n\
                astropy/io/tests/test_a.py::test_three PASSED\n\
                PASSED astropy/io/tests/test_a.py::test_four[a b]\n\
                SKIPPED [1] astropy/x.py:2: no\n\
                x\x1f\x1cy ERROR";
    assert_eq!(
        parsed("parse_log_pytest_v2", body),
        pairs(&[
            ("astropy/io/tests/test_a.py::test_one", "PASSED"),
            ("astropy/io/tests/test_a.py::test_two", "FAILED"),
            ("astropy/io/tests/test_a.py::test_three", "PASSED"),
            ("astropy/io/tests/test_a.py::test_four[a b]", "PASSED"),
            ("xy", "ERROR"),
        ])
    );
}

#[test]
fn pytest_v2_takes_the_last_word_of_a_line_ending_in_a_status() {
    assert_eq!(
        parsed("parse_log_pytest_v2", "test_x barPASSED\nPASSED"),
        pairs(&[("test_x", "barPASSED")])
    );
}

#[test]
fn django_reads_verbose_unittest_output() {
    let body = "test_a (app.tests.ATests) ... ok\n\
                test_b (app.tests.ATests) ... skipped 'no db'\n\
                test_c (app.tests.ATests) ... FAIL\n\
                test_d (app.tests.ATests) ... ERROR\n\
                test_e (app.tests.ATests) ... \n\
                some output\n\
                ok\n\
                test_f (app.tests.ATests)\nDocstring ...  OK\n\
                FAIL: test_g (app.tests.ATests)\n\
                ERROR: test_h (app.tests.ATests)\n\
                Applying sites.0002_alter_domain_unique...test_no_migrations (m.T) ... ok\n\
                --version is equivalent to version";
    assert_eq!(
        parsed("parse_log_django", body),
        pairs(&[
            ("test_a (app.tests.ATests)", "PASSED"),
            ("test_b (app.tests.ATests)", "SKIPPED"),
            ("test_c (app.tests.ATests)", "FAILED"),
            // "test_e ... " is stripped before " ... " is looked for, so the "ok" two
            // lines down goes to the test before it, as in the official parser
            ("test_d (app.tests.ATests)", "PASSED"),
            ("Docstring", "PASSED"),
            ("test_g", "FAILED"),
            ("test_h", "ERROR"),
            ("test_no_migrations (m.T)", "PASSED"),
            ("--version is equivalent to version", "PASSED"),
        ])
    );
}

#[test]
fn django_reads_results_split_by_a_multiline_print() {
    let body = "test_x (a.T) ... Testing against Django installed in '/x'\nwith up to 4 processes\nSystem check (0 silenced).\nok\n\
                test_y (a.T) ... Internal Server Error: /view/\nok\n\
                test_z (a.T) ... System check identified no issues (0 silenced)\nok";
    let got = parsed("parse_log_django", body);
    for test in ["test_x (a.T)", "test_y (a.T)", "test_z (a.T)"] {
        assert!(
            got.contains(&(test.to_string(), "PASSED".to_string())),
            "{test}: {got:?}"
        );
    }
}

#[test]
fn django_raises_where_the_official_parser_does() {
    for line in ["FAIL:", "  ERROR:x  ", "FAIL:\x1c"] {
        let err = parse_log("parse_log_django", &format!("test_a (t) ... ok\n{line}\n"))
            .expect_err("the official parser raises IndexError");
        assert!(
            matches!(
                &err,
                ParseError::Raised {
                    exception: "IndexError",
                    ..
                }
            ),
            "{err}"
        );
    }
    let graded = grade(
        &log("FAIL:", Some(1)),
        "parse_log_django",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert!(!graded.valid && !graded.resolved, "{graded:?}");
    assert!(graded
        .invalid_reason
        .unwrap_or_default()
        .contains("IndexError"));
}

#[test]
fn seaborn_reads_both_line_shapes() {
    let body = "tests/test_core.py::test_a PASSED\n\
                PASSED tests/test_core.py::test_b\n\
                FAILED tests/test_core.py::test_c - boom\n\
                tests/test_core.py::test_d PASSED [ 10%]\n\
                x y PASSED z\n\
                PASSED";
    assert_eq!(
        parsed("parse_log_seaborn", body),
        pairs(&[
            ("tests/test_core.py::test_b", "PASSED"),
            ("tests/test_core.py::test_c", "FAILED"),
            ("tests/test_core.py::test_d", "PASSED"),
        ])
    );
}

#[test]
fn sympy_reads_failure_headers_then_result_lines() {
    let body = "test_a ok\n\
                test_b F\n\
                test_c E\n\
                ________________ sympy/core/tests/test_basic.py:test_d ________________\n\
                \x20 test_e ok  \n\
                test_a F";
    assert_eq!(
        parsed("parse_log_sympy", body),
        pairs(&[
            ("sympy/core/tests/test_basic.py:test_d", "FAILED"),
            ("test_a", "FAILED"),
            ("test_b", "FAILED"),
            ("test_c", "ERROR"),
            ("test_e", "PASSED"),
        ])
    );
}

#[test]
fn aliases_use_their_parser_and_unknown_names_are_refused() {
    assert_eq!(
        parsed("parse_log_astropy", "a::b PASSED"),
        pairs(&[("a::b", "PASSED")])
    );
    assert!(supports("parse_log_flask") && supports("parse_log_sympy"));
    assert!(!supports("parse_log_jest"));
    assert_eq!(
        parse_log("parse_log_jest", "PASSED x"),
        Err(ParseError::UnknownParser("parse_log_jest".into()))
    );
    let graded = grade("", "parse_log_jest", &[], &[], EvalType::PassAndFail);
    assert!(!graded.valid);
}

// MARK: grading

#[test]
fn a_clean_run_resolves() {
    let graded = grade_pytest(
        "PASSED t.py::a\nPASSED t.py::b\nFAILED t.py::c",
        Some(1),
        &["t.py::a"],
        &["t.py::b"],
    );
    assert!(graded.valid && graded.resolved, "{graded:?}");
    assert_eq!(graded.exit_code, Some(1));
    assert_eq!(graded.f2p_success, ["t.py::a"]);
    assert_eq!(graded.p2p_success, ["t.py::b"]);
}

#[test]
fn a_patch_printing_its_own_passes_under_a_failing_exit_code_is_invalid() {
    let graded = grade_pytest("PASSED t.py::a\nPASSED t.py::b", Some(1), &["t.py::a"], &[]);
    assert!(!graded.valid && !graded.resolved, "{graded:?}");
    assert!(graded
        .invalid_reason
        .as_deref()
        .is_some_and(|r| r.contains("exited with 1")));
    // the same log with exit code 0, or none recorded, is fine
    assert!(grade_pytest("PASSED t.py::a", Some(0), &["t.py::a"], &[]).resolved);
    assert!(grade_pytest("PASSED t.py::a", None, &["t.py::a"], &[]).resolved);
    // an unusual status word is not a failure
    assert!(!grade_pytest("PASSED t.py::a\nERROR: x", Some(2), &["t.py::a"], &[]).valid);
}

#[test]
fn the_first_recorded_exit_code_counts_in_any_digits() {
    let body = "PASSED t.py::a";
    let content = format!(
        "{START_TEST_OUTPUT}\n{body}\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}:\x1c\u{663}\n{TEST_EXIT_CODE}: 0\n"
    );
    let graded = grade(
        &content,
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert!(!graded.valid, "{graded:?}");
    assert_eq!(graded.exit_code, Some(3));
    let zero = content.replace('\u{663}', "-00");
    assert!(grade(&zero, "parse_log_pytest", &[], &[], EvalType::PassAndFail).valid);
    let huge = content.replace('\u{663}', "99999999999999999999");
    let graded = grade(&huge, "parse_log_pytest", &[], &[], EvalType::PassAndFail);
    assert_eq!((graded.valid, graded.exit_code), (false, Some(i32::MAX)));
}

#[test]
fn a_skipped_fail_to_pass_test_is_not_resolved() {
    let graded = grade_pytest(
        "SKIPPED t.py::a\nPASSED t.py::b",
        None,
        &["t.py::a"],
        &["t.py::b"],
    );
    assert!(graded.valid && !graded.resolved, "{graded:?}");
    assert_eq!(graded.f2p_failure, ["t.py::a"]);
}

#[test]
fn a_skipped_pass_to_pass_test_is_maintained() {
    let graded = grade_pytest(
        "PASSED t.py::a\nSKIPPED t.py::b",
        None,
        &["t.py::a"],
        &["t.py::b"],
    );
    assert!(graded.resolved, "{graded:?}");
    assert_eq!(graded.p2p_success, ["t.py::b"]);
}

#[test]
fn a_missing_test_fails_and_an_odd_status_counts_neither_way() {
    let graded = grade_pytest("PASSED t.py::a", None, &["t.py::a", "t.py::gone"], &[]);
    assert_eq!(graded.f2p_failure, ["t.py::gone"]);
    assert_eq!(graded.resolution, Resolution::Partial);
    // "ERROR:" is neither passing nor failing, so "x" lands in no list: RESOLVED_FULL
    let graded = grade_pytest("ERROR: x y", None, &["x"], &[]);
    assert!(graded.resolved, "{graded:?}");
    assert!(graded.f2p_success.is_empty() && graded.f2p_failure.is_empty());
    assert_eq!(graded.statuses["x"], TestStatus::Other("ERROR:".into()));
}

#[test]
fn a_truncated_parametrized_id_matches_by_prefix_when_the_matches_agree() {
    let agree = "PASSED t.py::test_g[log(photon)]\nXFAIL t.py::test_g[log(photon2)]";
    assert!(grade_pytest(agree, None, &["t.py::test_g[log(photon"], &[]).resolved);
    let disagree = "PASSED t.py::test_g[log(photon)]\nFAILED t.py::test_g[log(photon2)]";
    let graded = grade_pytest(disagree, None, &["t.py::test_g[log(photon"], &[]);
    assert_eq!(graded.f2p_failure, ["t.py::test_g[log(photon"]);
    // balanced brackets: exact match only
    let graded = grade_pytest("PASSED t.py::test_g[a]b", None, &["t.py::test_g[a]"], &[]);
    assert_eq!(graded.f2p_failure, ["t.py::test_g[a]"]);
    // among non-passing matches the first seen decides: SKIPPED first is maintained
    let skipped_first = "SKIPPED t.py::test_g[a1]\nFAILED t.py::test_g[a2]\nPASSED t.py::x";
    let graded = grade_pytest(skipped_first, None, &["t.py::x"], &["t.py::test_g[a"]);
    assert!(graded.resolved, "{graded:?}");
    let failed_first = "FAILED t.py::test_g[a2]\nSKIPPED t.py::test_g[a1]\nPASSED t.py::x";
    let graded = grade_pytest(failed_first, None, &["t.py::x"], &["t.py::test_g[a"]);
    assert!(!graded.resolved, "{graded:?}");
}

#[test]
fn a_later_line_overwrites_a_status_in_place() {
    let graded = grade_pytest("PASSED t.py::a\nFAILED t.py::a", None, &["t.py::a"], &[]);
    assert!(!graded.resolved);
    assert_eq!(graded.statuses["t.py::a"], TestStatus::Failed);
}

#[test]
fn fail_only_counts_only_failed_tests_against() {
    let content = log("FAILED t.py::b\nERROR t.py::c\nSKIPPED t.py::d", Some(1));
    let graded = grade(
        &content,
        "parse_log_pytest",
        &strings(&["t.py::a", "t.py::c", "t.py::d"]),
        &strings(&["t.py::e"]),
        EvalType::FailOnly,
    );
    assert!(graded.resolved, "{graded:?}");
    assert_eq!(graded.f2p_success, ["t.py::a", "t.py::c", "t.py::d"]);
    let graded = grade(
        &content,
        "parse_log_pytest",
        &strings(&["t.py::a"]),
        &strings(&["t.py::b"]),
        EvalType::FailOnly,
    );
    assert!(!graded.resolved);
    assert_eq!(graded.p2p_failure, ["t.py::b"]);
    // FAIL_ONLY matches exactly: no prefix fallback
    let graded = grade(
        &log("FAILED t.py::g[ab]", None),
        "parse_log_pytest",
        &strings(&["t.py::g[a"]),
        &[],
        EvalType::FailOnly,
    );
    assert!(graded.resolved);
}

#[test]
fn bad_markers_and_missing_markers_make_a_log_invalid() {
    for bad in BAD_CODES {
        let graded = grade_pytest(&format!("PASSED t.py::a\n{bad}"), None, &["t.py::a"], &[]);
        assert!(!graded.valid, "{bad}");
        assert!(graded.statuses.is_empty());
    }
    let graded = grade(
        "PASSED t.py::a\n",
        "parse_log_pytest",
        &strings(&["t.py::a"]),
        &[],
        EvalType::PassAndFail,
    );
    assert!(!graded.valid && !graded.resolved);
}

#[test]
fn results_outside_the_markers_are_read_when_none_are_inside() {
    let content = format!("PASSED t.py::a\n{START_TEST_OUTPUT}\nnothing\n{END_TEST_OUTPUT}\n");
    let graded = grade(
        &content,
        "parse_log_pytest",
        &strings(&["t.py::a"]),
        &[],
        EvalType::PassAndFail,
    );
    assert!(graded.resolved, "{graded:?}");
    // results inside win: the outside line is not read
    let content = format!(
        "FAILED t.py::a\n{START_TEST_OUTPUT}\nPASSED t.py::b\n{END_TEST_OUTPUT}\nPASSED t.py::c\n"
    );
    let graded = grade(
        &content,
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert_eq!(graded.statuses.keys().collect::<Vec<_>>(), ["t.py::b"]);
}

#[test]
fn an_empty_run_is_invalid_unless_the_suite_shows_it_ran() {
    let graded = grade(
        &log("collected 0 items", None),
        "parse_log_pytest",
        &strings(&["a"]),
        &[],
        EvalType::FailOnly,
    );
    assert!(!graded.valid && !graded.resolved);
    let graded = grade(
        &log("Tests:\x1c 3 passed", None),
        "parse_log_pytest",
        &strings(&["a"]),
        &[],
        EvalType::FailOnly,
    );
    assert!(graded.valid && graded.resolved, "{graded:?}");
    let graded = grade(
        &log("Executed 0 of 0", None),
        "parse_log_pytest",
        &strings(&["a"]),
        &[],
        EvalType::FailOnly,
    );
    assert!(!graded.valid);
    let graded = grade(
        &log("Test Suites: 1 failed, 2 total", None),
        "parse_log_pytest",
        &strings(&["a"]),
        &[],
        EvalType::PassAndFail,
    );
    assert!(graded.valid && !graded.resolved, "{graded:?}");
    // the line anchors hold on every line (re.M), in the last branches too
    for line in ["# tests 4", "'render': ok"] {
        let graded = grade(
            &log(line, None),
            "parse_log_pytest",
            &[],
            &[],
            EvalType::PassAndFail,
        );
        assert!(graded.valid, "{line}: {graded:?}");
    }
    let graded = grade(
        &log("x # tests 4", None),
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert!(!graded.valid);
    // a combining mark is not a word character in Python's re
    let graded = grade(
        &log("Test Suites: 1 fa\u{301}iled, 2 total", None),
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert!(!graded.valid);
}

#[test]
fn the_parsed_region_ends_at_the_first_end_marker_before_a_second_start() {
    let content = format!(
        "{START_TEST_OUTPUT}\nPASSED a\n{START_TEST_OUTPUT}\nPASSED b\n{END_TEST_OUTPUT}\n"
    );
    let graded = grade(
        &content,
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert_eq!(graded.statuses.keys().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn the_log_file_is_read_with_universal_newlines() {
    // "\r" alone ends a line when the harness reads the file: "PASSED b" is a line of its own
    let content = log("PASSED a\rPASSED b\r\nPASSED c", None);
    let graded = grade(
        &content,
        "parse_log_pytest",
        &strings(&["b"]),
        &[],
        EvalType::PassAndFail,
    );
    assert!(graded.resolved, "{graded:?}");
    assert_eq!(graded.statuses.len(), 3);
    // while the parser on the text as given sees one line
    assert_eq!(
        parsed("parse_log_pytest", "PASSED a\rPASSED b"),
        pairs(&[("a", "PASSED")])
    );
}

#[test]
fn no_tests_to_check_counts_as_resolved() {
    assert!(grade_pytest("PASSED t.py::a", None, &[], &[]).resolved);
}

// MARK: eval script

#[test]
fn the_eval_script_records_the_test_exit_code_after_the_end_marker() {
    let script = "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA tests\n: '>>>>> End Test Output'\ngit checkout abc tests\n\n";
    assert_eq!(
        eval_script_with_exit_code(script),
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA tests\nSWEBENCH_TEST_EXIT_CODE=$?\n: '>>>>> End Test Output'\necho \">>>>> Test Exit Code: $SWEBENCH_TEST_EXIT_CODE\"\ngit checkout abc tests\n"
    );
    // no end marker: untouched but for the header
    assert_eq!(
        eval_script_with_exit_code("\x1cecho hi\u{85}"),
        "#!/bin/bash\nset -uxo pipefail\necho hi\n"
    );
    assert_eq!(
        eval_script_with_exit_code(""),
        "#!/bin/bash\nset -uxo pipefail\n\n"
    );
}

#[test]
fn eval_type_reads_both_spellings() {
    for (text, want) in [
        ("\"pass_and_fail\"", EvalType::PassAndFail),
        ("\"PASS_AND_FAIL\"", EvalType::PassAndFail),
        ("\"fail_only\"", EvalType::FailOnly),
        ("\"FAIL_ONLY\"", EvalType::FailOnly),
    ] {
        assert_eq!(serde_json::from_str::<EvalType>(text).ok(), Some(want));
        assert_eq!(text.trim_matches('"').parse::<EvalType>(), Ok(want));
    }
    assert_eq!(
        serde_json::to_string(&EvalType::FailOnly).ok().as_deref(),
        Some("\"fail_only\"")
    );
    assert_eq!(
        serde_json::to_string(&TestStatus::Xfail).ok().as_deref(),
        Some("\"XFAIL\"")
    );
    assert_eq!(
        serde_json::from_str::<TestStatus>("\"ERROR:\"").ok(),
        Some(TestStatus::Other("ERROR:".into()))
    );
}

#[test]
fn an_invalid_log_is_labelled_with_the_first_infrastructure_signature() {
    let content = "Killed\nModuleNotFoundError: No module named 'x'\n";
    let graded = grade(content, "parse_log_pytest", &[], &[], EvalType::PassAndFail);
    assert!(!graded.valid);
    assert_eq!(
        graded.infra_failure,
        Some(InfraFailure {
            reason: "out_of_memory",
            environment: true
        })
    );
    // "Killed" must be a whole line; the next signature is ambiguous
    let graded = grade(
        &content.replace("Killed", "Killed by"),
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert_eq!(
        graded.infra_failure,
        Some(InfraFailure {
            reason: "missing_module",
            environment: false
        })
    );
    // a valid log is not labelled
    let graded = grade(
        &log("PASSED a\nKilled", None),
        "parse_log_pytest",
        &[],
        &[],
        EvalType::PassAndFail,
    );
    assert!(graded.valid && graded.infra_failure.is_none());
}
