//! `compare` on two hand-made runs with known flips (tests/fixtures/compare): run-a is
//! a matrix job (model x toolset, epochs 1-2, five graded tasks and one unchecked);
//! run-b reruns its haiku/coding cell, was resumed (a superseded row) and killed (a cut
//! last line). The page is loaded in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentbatch::compare::{compare, CompareOptions, CompareReport, PairSummary, Side};
use rust_decimal::Decimal;

use crate::common::read_csv;

/// Copies the fixture runs into a temporary folder, so reports never land in the tree.
fn fixtures() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compare");
    for run in ["run-a", "run-b"] {
        std::fs::create_dir_all(dir.path().join(run)).unwrap();
        std::fs::copy(
            src.join(run).join("results.csv"),
            dir.path().join(run).join("results.csv"),
        )
        .unwrap();
    }
    let (a, b) = (dir.path().join("run-a"), dir.path().join("run-b"));
    (dir, a, b)
}

fn run(runs: &[&Path], by: Option<&str>, out: &Path) -> CompareReport {
    compare(&CompareOptions {
        runs: runs.iter().map(|p| p.to_path_buf()).collect(),
        by: by.map(str::to_string),
        out_dir: out.to_path_buf(),
    })
    .unwrap_or_else(|e| panic!("compare failed: {e}"))
}

fn dec(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn counts(p: &PairSummary) -> (u64, u64, u64, u64) {
    (p.paired, p.wins, p.losses, p.ties)
}

fn flipped(p: &PairSummary, side: Side) -> Vec<String> {
    p.flips
        .iter()
        .filter(|f| f.passed == side)
        .map(|f| f.unit())
        .collect()
}

#[test]
fn compare_by_toolset_gives_nine_wins_one_loss_and_the_exact_mcnemar_p() {
    let (dir, a, _) = fixtures();
    let out = dir.path().join("out");
    let r = run(&[&a], Some("toolset"), &out);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    let labels: Vec<&str> = r.groups.iter().map(|g| g.label.as_str()).collect();
    assert_eq!(labels, ["toolset=coding", "toolset=minimal"]);
    let coding = &r.groups[0];
    // 5 graded tasks + 1 unchecked, 2 epochs, 2 models.
    assert_eq!((coding.rows, coding.graded, coding.passes), (24, 20, 15));
    assert_eq!(coding.pass_rate(), Some(0.75));
    assert_eq!(coding.interval, agentbatch::stats::wilson95(15, 20));
    assert_eq!(coding.cost, dec("0.576"));
    assert_eq!(coding.cost_per_pass(), Some(dec("0.032")));
    assert_eq!(r.groups[1].passes, 7);

    assert_eq!(r.pairs.len(), 1);
    let p = &r.pairs[0];
    assert_eq!(counts(p), (20, 9, 1, 10));
    // Reference: scipy.stats.binomtest(1, 10, 0.5).pvalue = 0.021484375 (= 22 / 1024).
    assert!((p.p_value - 0.021_484_375).abs() < 1e-15, "{}", p.p_value);
    assert_eq!(
        (p.pass_rate_a(), p.pass_rate_b(), p.diff()),
        (Some(0.75), Some(0.35), Some(0.4))
    );
    assert_eq!(p.cost_per_pass_a(), Some(dec("0.032")));
    assert_eq!(p.cost_per_pass_b(), Some(dec("0.32") / dec("7")));
    assert_eq!(
        flipped(p, Side::A),
        [
            "t01@2[model=claude-haiku-4-5]",
            "t02@1[model=claude-haiku-4-5]",
            "t02@1[model=claude-sonnet-4-5]",
            "t02@2[model=claude-haiku-4-5]",
            "t03@1[model=claude-sonnet-4-5]",
            "t03@2[model=claude-sonnet-4-5]",
            "t04@1[model=claude-sonnet-4-5]",
            "t05@1[model=claude-haiku-4-5]",
            "t05@1[model=claude-sonnet-4-5]",
        ]
    );
    assert_eq!(flipped(p, Side::B), ["t05@2[model=claude-haiku-4-5]"]);

    // The files.
    let rows = read_csv(&r.csv);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["a"], "toolset=coding");
    assert_eq!(rows[0]["p_value"], "0.021484375");
    assert_eq!(rows[0]["diff"], "0.4");
    assert_eq!(rows[0]["cost_per_pass_a"], "0.032");
    assert_eq!(rows[0]["cost_per_pass_b"], "0.045714");
    assert!(
        rows[0]["flipped"].ends_with("b:t05@2[model=claude-haiku-4-5]"),
        "{}",
        rows[0]["flipped"]
    );
    assert_eq!(rows[0]["flipped"].split(' ').count(), 10);
    let flips = read_csv(&r.flips_csv);
    assert_eq!(flips.len(), 10);
    assert_eq!(flips[9]["task_id"], "t05");
    assert_eq!(flips[9]["epoch"], "2");
    assert_eq!(flips[9]["others"], "model=claude-haiku-4-5");
    assert_eq!(flips[9]["passed"], "b");
    for f in r.files() {
        assert!(f.starts_with(&out) && f.exists(), "{}", f.display());
    }
    let md = std::fs::read_to_string(&r.markdown).unwrap();
    assert!(md.contains("| toolset=coding | toolset=minimal | 20 | 9 | 1 | 10 | 75.0% | 35.0% | +40.0 pp | 0.0215 | $0.032 | $0.045714 |"), "{md}");
    let table = r.table();
    assert!(
        table.contains("only toolset=minimal passed (1): t05@2[model=claude-haiku-4-5]"),
        "{table}"
    );
}

#[test]
fn one_run_compares_its_variants_on_task_and_epoch() {
    let (dir, a, _) = fixtures();
    let r = run(&[&a], None, &dir.path().join("out"));
    let labels: Vec<&str> = r.groups.iter().map(|g| g.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "model=claude-haiku-4-5,toolset=coding",
            "model=claude-haiku-4-5,toolset=minimal",
            "model=claude-sonnet-4-5,toolset=coding",
            "model=claude-sonnet-4-5,toolset=minimal",
        ]
    );
    assert_eq!(r.pairs.len(), 6);
    let p = &r.pairs[0];
    assert_eq!(counts(p), (10, 4, 1, 5));
    // binomtest(1, 5) = 0.375
    assert!((p.p_value - 0.375).abs() < 1e-12);
    assert_eq!(flipped(p, Side::A), ["t01@2", "t02@1", "t02@2", "t05@1"]);
    assert_eq!(flipped(p, Side::B), ["t05@2"]);
    let passes: Vec<u64> = r.groups.iter().map(|g| g.passes).collect();
    assert_eq!(passes, [6, 3, 9, 4]);
    // Stop reasons count every row, unchecked ones included.
    let reasons = &r.groups[1].stop_reasons;
    assert_eq!(
        reasons,
        &[
            ("completed".to_string(), 7),
            ("max_turns".to_string(), 4),
            ("time_limit".to_string(), 1)
        ]
    );

    // --by model pairs on task, epoch and toolset: 1 win, 5 losses.
    let r = run(&[&a], Some("model"), &dir.path().join("by-model"));
    assert_eq!(counts(&r.pairs[0]), (20, 1, 5, 14));
    // binomtest(1, 6) = 0.21875
    assert!((r.pairs[0].p_value - 0.218_75).abs() < 1e-12);
    assert_eq!(flipped(&r.pairs[0], Side::A), ["t03@1[toolset=minimal]"]);
}

#[test]
fn two_runs_compare_as_runs_with_their_variants() {
    let (dir, a, b) = fixtures();
    let r = run(&[&a, &b], None, &dir.path().join("out"));
    let labels: Vec<&str> = r.groups.iter().map(|g| g.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "run=run-a,model=claude-haiku-4-5,toolset=coding",
            "run=run-a,model=claude-haiku-4-5,toolset=minimal",
            "run=run-a,model=claude-sonnet-4-5,toolset=coding",
            "run=run-a,model=claude-sonnet-4-5,toolset=minimal",
            "run=run-b,model=claude-haiku-4-5,toolset=coding",
        ]
    );
    assert_eq!(r.pairs.len(), 10);
    let p = r
        .pairs
        .iter()
        .find(|p| p.a == labels[0] && p.b == labels[4])
        .unwrap();
    // run-b's resumed t04@1 passed (its cancelled first row is superseded).
    assert_eq!(counts(p), (10, 0, 3, 7));
    assert!((p.p_value - 0.25).abs() < 1e-12);
    assert_eq!(flipped(p, Side::B), ["t04@1", "t04@2", "t05@2"]);
    assert_eq!(p.cost_per_pass_b(), Some(dec("0.11") / dec("9")));

    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("results.csv:14: skipped the last line")),
        "{:?}",
        r.warnings
    );
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("t04@1 has several rows; using the last")),
        "{:?}",
        r.warnings
    );
    let run_b = &r.groups[4];
    assert_eq!((run_b.rows, run_b.graded, run_b.passes), (11, 10, 9));

    // --by run: the same pairs, now keyed by the matrix axes too.
    let r = run(&[&a, &b], Some("run"), &dir.path().join("by-run"));
    let labels: Vec<&str> = r.groups.iter().map(|g| g.label.as_str()).collect();
    assert_eq!(labels, ["run=run-a", "run=run-b"]);
    assert_eq!(counts(&r.pairs[0]), (10, 0, 3, 7));
    assert_eq!(
        flipped(&r.pairs[0], Side::B)[0],
        "t04@1[model=claude-haiku-4-5,toolset=coding]"
    );
}

#[test]
fn unknown_axes_and_single_groups_say_what_to_do() {
    let (dir, a, b) = fixtures();
    let opts = |runs: Vec<PathBuf>, by: &str| CompareOptions {
        runs,
        by: Some(by.to_string()),
        out_dir: dir.path().join("out"),
    };
    let e = compare(&opts(vec![a.clone()], "temperature"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "unknown --by axis \"temperature\": these runs have run, model, toolset"
    );
    let e = compare(&opts(vec![b], "toolset")).unwrap_err().to_string();
    assert!(
        e.starts_with("fewer than two groups to compare (found toolset=coding)"),
        "{e}"
    );
    let e = compare(&opts(vec![a], "run")).unwrap_err().to_string();
    assert!(e.contains("--by run needs two or more run folders"), "{e}");
}

/// Chromium from PATH; the test fails (never skips) without it.
fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    panic!(
        "chromium is not installed: run ./tests/run.sh, which installs it (Debian package chromium)"
    );
}

/// Loads a page from the file system in headless Chromium; returns the DOM after
/// scripts ran and the browser's log.
fn load(page: &Path, scratch: &Path) -> (String, String) {
    let dom_path = scratch.join("dom.html");
    let log_path = scratch.join("chromium.log");
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=1",
            "--virtual-time-budget=2000",
        ])
        .arg(format!(
            "--user-data-dir={}",
            scratch.join("profile").display()
        ))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dom_path).unwrap())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(status.success(), "chromium failed ({status}):\n{log}");
    (std::fs::read_to_string(&dom_path).unwrap(), log)
}

/// Console messages in Chromium's log: `INFO:CONSOLE:1] "Uncaught Error: ..."` (older
/// versions write `CONSOLE(1)`).
fn console_messages(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("CONSOLE")).collect()
}

#[test]
fn compare_html_shows_its_charts_in_headless_chromium_without_console_errors() {
    let (dir, a, _) = fixtures();
    let scratch = dir.path().join("chromium");
    std::fs::create_dir_all(&scratch).unwrap();

    // The detection works: a page that throws and logs is caught.
    let bad = scratch.join("throws.html");
    std::fs::write(
        &bad,
        "<!DOCTYPE html><html><body><p>x</p><script>console.error(\"boom\"); throw new Error(\"x\")</script></body></html>",
    )
    .unwrap();
    let (_, log) = load(&bad, &scratch);
    let messages = console_messages(&log);
    assert!(
        messages.iter().any(|m| m.contains("Uncaught Error: x"))
            && messages.iter().any(|m| m.contains("boom")),
        "a throwing page should show console messages in the log; got {messages:?}"
    );

    let r = run(&[&a], None, &dir.path().join("out"));
    let page = r.html.canonicalize().unwrap();
    let (dom, log) = load(&page, &scratch);
    assert_eq!(console_messages(&log), Vec::<&str>::new());
    // Nothing but the page itself is read from the file system.
    let page_url = format!("file://{}", page.display());
    for line in log.lines().filter(|l| l.contains("FileURLLoader::Start:")) {
        assert!(
            line.trim_end().ends_with(&page_url),
            "the page loaded another file: {line}"
        );
    }

    let chart = |id: &str| -> String {
        let start = dom
            .find(&format!("<svg id=\"{id}\""))
            .unwrap_or_else(|| panic!("no svg#{id} in the DOM:\n{dom}"));
        let end = dom[start..].find("</svg>").unwrap() + start;
        dom[start..end].to_string()
    };
    let points = chart("pass-rate-chart");
    assert_eq!(points.matches("class=\"point\"").count(), 4, "{points}");
    assert_eq!(points.matches("<circle").count(), 4);
    assert!(points.contains("model=claude-sonnet-4-5,toolset=coding"));
    let bars = chart("stop-reasons-chart");
    assert_eq!(bars.matches("class=\"bar\"").count(), 4, "{bars}");
    // Segments: haiku/coding completed, max_turns, provider_error; haiku/minimal
    // completed, max_turns, time_limit; sonnet/coding completed, max_turns; sonnet/minimal
    // completed, max_turns, cost_limit.
    assert_eq!(bars.matches("class=\"seg\"").count(), 11, "{bars}");
    assert_eq!(bars.matches("class=\"legend-item\"").count(), 5);
    assert!(dom.contains("<table class=\"pairs\">"));
}

#[test]
fn the_command_prints_the_tables_writes_into_the_run_and_exits_2_on_bad_input() {
    let (_dir, a, _) = fixtures();
    let bin = env!("CARGO_BIN_EXE_agentbatch");
    let ok = Command::new(bin)
        .args(["compare", "--by", "toolset"])
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let out = String::from_utf8_lossy(&ok.stdout);
    assert!(
        out.contains("Pairs") && out.contains("Flipped verdicts"),
        "{out}"
    );
    for f in [
        "compare.csv",
        "compare-flips.csv",
        "compare.md",
        "compare.html",
    ] {
        assert!(a.join(f).exists(), "{f} written into the run folder");
    }
    let bad = Command::new(bin)
        .args(["compare", "--by", "temperature"])
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("temperature"));
}

/// The fixture's small run, and jobs/compare.yaml's (two axes, long group labels,
/// two models a group: its groups table was once wider than 1024 pixels).
#[test]
fn compare_html_fits_the_page_width_at_1280_and_1024_pixels() {
    let (dir, a, _) = fixtures();
    let matrix = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compare/matrix-run");
    let small = run(&[&a], None, &dir.path().join("out"));
    let by_toolset = run(&[&matrix], Some("toolset"), &dir.path().join("out-toolset"));
    let variants = run(&[&matrix], None, &dir.path().join("out-variants"));
    for r in [small, by_toolset, variants] {
        fits(&r.html);
    }
}

fn fits(page: &Path) {
    let seen = crate::report_page::drive(page, &["--mode", "layout", "--widths", "1280,1024"]);
    assert_eq!(seen["console"], serde_json::json!([]), "{seen}");
    let widths = seen["layout"].as_array().unwrap();
    assert_eq!(widths.len(), 2);
    for w in widths {
        assert!(
            w["scrollWidth"].as_u64() <= w["innerWidth"].as_u64(),
            "the page scrolls sideways: {w}"
        );
        // The tables fit by wrapping, without their own scroll box.
        assert_eq!(w["scrolledTables"], serde_json::json!([]), "{w}");
    }
}
