//! report.html in headless Chromium (driven by tests/browser/page.mjs with
//! puppeteer-core): a run against the simulator with a pass, failures, a denied call,
//! a provider error, a turn limit, two teams and hostile text; the page loads with no
//! console error or failed request, filters, sorts and shows transcripts in the four
//! stages, inline and loaded lazily from file://; `agentbatch report DIR` on a good, a
//! damaged and a wrong folder. Without node, Chromium or the driver the tests fail,
//! never skip: ./tests/run.sh installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{bin, calc_fixture, Case};

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// Runs tests/browser/page.mjs on `page` with `args`; what it saw.
pub fn drive(page: &Path, args: &[&str]) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chromium = on_path(&["chromium", "chromium-browser"])
        .expect("chromium is not installed: run ./tests/run.sh, which installs it");
    let node = on_path(&["node"]).expect("node is not installed: run ./tests/run.sh");
    assert!(
        root.join("tests/browser/node_modules/puppeteer-core").is_dir(),
        "puppeteer-core is not installed in tests/browser: run ./tests/run.sh (npm ci in tests/browser)"
    );
    let page = page.canonicalize().expect("the page exists");
    let out = Command::new(node)
        .arg(root.join("tests/browser/page.mjs"))
        .arg("--chromium")
        .arg(chromium)
        .arg("--page")
        .arg(&page)
        .args(args)
        .output()
        .expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let seen: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "the driver printed no JSON ({e}):\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(
        seen["failure"].is_null(),
        "the driver failed: {}",
        seen["failure"]
    );
    seen
}

/// No console error or warning, no uncaught error, no failed request, no dialog.
fn assert_clean(seen: &Value) {
    for key in ["console", "pageErrors", "failedRequests", "dialogs"] {
        assert_eq!(seen[key], serde_json::json!([]), "{key}: {}", seen[key]);
    }
}

const JOB: &str = r#"name: page
concurrency: 4
teams:
  red: { max_cost_usd: 5 }
  blue: { max_cost_usd: 5 }
providers:
  sim: { max_retries: 2 }
toolsets:
  coding:
    tools: [bash, write_file, read_file]
    policy:
      deny: ['bash(git push*)']
defaults:
  provider: sim
  model: claude-sonnet-4-5
  max_tokens: 1024
  team: red
  toolset: coding
  repo: calc
  check: python3 -m unittest -q
  check_timeout: 1m
tasks:
  - id: fixes-it
    prompt: Fix add.
    sim:
      turns:
        - content:
            - thinking: "The sign is wrong."
            - tool_use: { name: write_file, input: { path: calc.py, content: "def add(a, b):\n    return a + b\n" } }
        - content: [ { text: "Fixed." } ]
  - id: gives-up
    team: blue
    prompt: Fix add.
    sim:
      turns:
        - content: [ { text: "I cannot." } ]
  - id: denied-push
    prompt: Fix add.
    sim:
      turns:
        - content: [ { tool_use: { name: bash, input: { command: "git push origin main" } } } ]
        - content: [ { text: "ok" } ]
  - id: provider-down
    team: blue
    prompt: Fix add.
    sim:
      turns:
        - faults: [ { status: 529 }, { status: 401 } ]
          content: [ { text: never } ]
  - id: over-budget
    prompt: Fix add.
    limits: { max_turns: 1 }
    sim:
      turns:
        - content: [ { tool_use: { name: bash, input: { command: "ls" } } } ]
        - content: [ { text: x } ]
  - id: hostile
    prompt: "Fix add. </script><img src=x onerror=alert(1)>"
    sim:
      turns:
        - content:
            - text: "</script><img src=x onerror=alert(1)> \u2028 line"
            - tool_use: { name: bash, input: { command: "echo '</script><img src=x onerror=alert(1)>'" } }
        - content: [ { text: done } ]
"#;

const HOSTILE: &str = "</script><img src=x onerror=alert(1)>";

async fn ran() -> (Case, PathBuf) {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let ran = case.run(JOB).await;
    assert_eq!(
        ran.outcome.page.as_deref(),
        Some(ran.dir.join("report.html").as_path())
    );
    let dir = ran.dir.clone();
    (case, dir)
}

/// The transcript of `task` shows the declared tools, a call whose id is in the
/// decisions and the results, and for `denied-push` the denying rule.
fn assert_stages(seen: &Value, task: &str) {
    let t = &seen["transcripts"][task];
    let strings = |k: &str| -> Vec<String> {
        t[k].as_array()
            .unwrap_or_else(|| panic!("{task}: no {k} in {t}"))
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect()
    };
    let declared = strings("declared");
    for tool in ["bash", "write_file", "read_file"] {
        assert!(declared.iter().any(|d| d == tool), "{task}: {declared:?}");
    }
    let calls = strings("callIds");
    assert!(!calls.is_empty(), "{task}: no call");
    for id in &calls {
        assert!(
            strings("resultIds").contains(id),
            "{task}: {id} has no result"
        );
        assert!(
            strings("decisionIds").contains(id),
            "{task}: {id} has no decision"
        );
    }
    if task == "denied-push" {
        let d = &t["decisions"][0];
        assert_eq!(d["cls"], "decision deny", "{d}");
        assert!(
            d["text"].as_str().unwrap().contains("bash(git push*)"),
            "{d}"
        );
    }
}

#[tokio::test]
async fn the_page_filters_sorts_and_shows_each_transcript_in_four_stages() {
    let (_case, dir) = ran().await;
    let page = dir.join("report.html");
    let opened = "denied-push,hostile,fixes-it,provider-down,over-budget";
    let seen = drive(&page, &["--open", opened, "--text", "de"]);
    assert_clean(&seen);
    // Small runs are one file: nothing else is read.
    assert_eq!(
        seen["requests"].as_array().unwrap().len(),
        1,
        "{}",
        seen["requests"]
    );
    assert!(!dir.join("report-transcripts").exists());

    let mut stops: Vec<&str> = seen["charts"]["stop-chart"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    stops.sort();
    assert_eq!(stops, ["completed", "max_turns", "provider_error"]);
    assert_eq!(
        seen["charts"]["team-chart"],
        serde_json::json!(["blue", "red"])
    );
    assert_eq!(seen["charts"]["variant-chart"].as_array().unwrap().len(), 1);

    let f = &seen["filters"];
    assert_eq!(seen["total"], 6);
    assert_eq!(
        (&f["f-outcome"]["pass"], &f["f-outcome"]["fail"]),
        (&1.into(), &5.into())
    );
    assert_eq!(
        (&f["f-team"]["red"], &f["f-team"]["blue"]),
        (&4.into(), &2.into())
    );
    assert_eq!(f["f-stop"]["max_turns"], 1);
    assert_eq!(f["f-stop"]["provider_error"], 1);
    assert_eq!(seen["text"]["count"], 2);
    assert_eq!(
        seen["text"]["ids"],
        serde_json::json!(["denied-push", "provider-down"])
    );

    let costs = |k: &str| -> Vec<f64> {
        seen["sorted"][k]["costs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().parse().unwrap())
            .collect()
    };
    let (down, up) = (costs("first"), costs("second"));
    assert_eq!(down.len(), 6);
    assert!(down.windows(2).all(|w| w[0] >= w[1]), "{down:?}");
    assert!(up.windows(2).all(|w| w[0] <= w[1]), "{up:?}");
    assert_eq!(seen["sorted"]["first"]["order"], "descending");

    assert_stages(&seen, "denied-push");
    assert_stages(&seen, "fixes-it");
    let t = &seen["transcripts"];
    assert_eq!(
        t["fixes-it"]["thinking"],
        serde_json::json!(["The sign is wrong."])
    );
    let events = |task: &str| t[task]["events"].to_string();
    assert!(
        events("provider-down").contains("attempt_failed"),
        "{}",
        events("provider-down")
    );
    assert!(events("provider-down").contains("retried after"));
    assert!(
        events("over-budget").contains("max_turns"),
        "{}",
        events("over-budget")
    );
    assert!(events("denied-push").contains("stopcompleted"));

    // Hostile text is text: no element made of it, no script run, U+2028 kept.
    let h = &t["hostile"];
    assert_eq!(h["images"], 0);
    let text = h["text"].as_str().unwrap();
    assert!(text.matches(HOSTILE).count() >= 3, "{text}");
    assert!(text.contains("\u{2028} line"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains(HOSTILE) && !html.contains('\u{2028}'));
}

#[tokio::test]
async fn a_big_run_loads_transcripts_beside_the_page_and_the_command_reports_bad_folders() {
    let (case, dir) = ran().await;
    // A kill mid-line and an event from a newer version must not stop the page.
    let denied = dir.join("transcripts/denied-push.jsonl");
    let mut text = std::fs::read_to_string(&denied).unwrap();
    text.push_str("{\"ts\":\"x\",\"t_ms\":9,\"event\":\"from_the_future\",\"turn\":2}\n{\"ts\":\"x\",\"t_ms\":9,\"ev");
    std::fs::write(&denied, text).unwrap();

    let out = bin()
        .arg("report")
        .arg(&dir)
        .env("AGENTBATCH_REPORT_INLINE_TASKS", "2")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        printed.trim(),
        dir.join("report.html").display().to_string()
    );
    // The six views in one chunk script, not a file each.
    let lazy = dir.join("report-transcripts");
    assert_eq!(std::fs::read_dir(&lazy).unwrap().count(), 1);
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(!html.contains("id=\"ab-transcripts\"") && html.contains("id=\"ab-lazy\""));

    let seen = drive(&dir.join("report.html"), &["--open", "denied-push,hostile"]);
    assert_clean(&seen);
    let loaded: Vec<&str> = seen["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .filter(|r| r.contains("/report-transcripts/"))
        .collect();
    // Two tasks opened, one chunk loaded once.
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_stages(&seen, "denied-push");
    let t = &seen["transcripts"]["denied-push"];
    assert!(
        t["events"].to_string().contains("from_the_future"),
        "{}",
        t["events"]
    );
    assert!(
        t["warnings"].to_string().contains("cut off"),
        "{}",
        t["warnings"]
    );
    assert_eq!(seen["transcripts"]["hostile"]["images"], 0);
    let layout = drive(
        &dir.join("report.html"),
        &["--mode", "layout", "--widths", "1280,1024"],
    );
    for w in layout["layout"].as_array().unwrap() {
        assert!(w["scrollWidth"].as_u64() <= w["innerWidth"].as_u64(), "{w}");
    }

    // Under the threshold again: inline, and the folder beside the page is gone.
    let out = bin().arg("report").arg(&dir).output().unwrap();
    assert!(out.status.success());
    assert!(!lazy.exists());

    // Not a run folder, and a results.csv damaged before its last line: exit 2, named.
    let out = bin().arg("report").arg(case.path("calc")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("calc is not a run folder: it has no results.csv"),
        "{err}"
    );
    let results = dir.join("results.csv");
    let mut csv = std::fs::read_to_string(&results).unwrap();
    let second_line = csv.find('\n').unwrap() + 1;
    csv.insert_str(second_line, "broken,row\n");
    std::fs::write(&results, csv).unwrap();
    let out = bin().arg("report").arg(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("results.csv:2:"), "{err}");
}

#[tokio::test]
async fn a_resume_writes_the_page_again() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let ran = case.run(JOB).await;
    std::fs::remove_file(ran.dir.join("report.html")).unwrap();
    let outcome = case.resume(&ran.dir, &ran.sim, true, &[]).await;
    assert_eq!(outcome.page, Some(ran.dir.join("report.html")));
    assert!(ran.dir.join("report.html").is_file());
    // The resumed run's page has views of two kinds: the re-run task's, built while the
    // resume went, and the kept rows', read from their transcripts. Both are what the
    // transcripts give.
    assert!(
        outcome
            .summary
            .rows
            .iter()
            .any(|r| r.task_id == "provider-down"),
        "the resume re-ran nothing"
    );
    let from_run = page_views(&ran.dir);
    assert_eq!(from_run.len(), 6, "{:?}", from_run.keys());
    let out = bin().arg("report").arg(&ran.dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(page_views(&ran.dir), from_run);
}

/// jobs/compare.yaml's run (a matrix: a variant column of long labels, 48 rows), from
/// its results.csv alone (no run.json, no transcripts: both said on the page, not
/// fatal): the task table once scrolled sideways at 1024 pixels.
#[test]
fn a_matrix_runs_page_fits_1024_pixels_and_a_folder_of_results_alone_still_has_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/compare/matrix-run");
    std::fs::copy(src.join("results.csv"), dir.path().join("results.csv")).unwrap();
    let out = bin().arg("report").arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let seen = drive(
        &dir.path().join("report.html"),
        &["--mode", "layout", "--widths", "1280,1024"],
    );
    assert_clean(&seen);
    for w in seen["layout"].as_array().unwrap() {
        assert!(w["scrollWidth"].as_u64() <= w["innerWidth"].as_u64(), "{w}");
        assert_eq!(w["scrolledTables"], serde_json::json!([]), "{w}");
    }
}

/// Each transcript view of the page in `dir`, by its transcript's path: from the chunk
/// scripts beside the page, or from the page itself when they are inline.
pub fn page_views(dir: &Path) -> std::collections::BTreeMap<String, Value> {
    if dir.join("report-transcripts").is_dir() {
        return chunk_views(dir);
    }
    let html = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    let open = "<script id=\"ab-transcripts\" type=\"application/json\">";
    let start = html.find(open).expect("inline transcripts") + open.len();
    let end = start + html[start..].find("</script>").expect("end of script");
    let all: Vec<Value> = serde_json::from_str(&html[start..end]).expect("inline JSON");
    all.into_iter()
        .map(|v| (v["file"].as_str().unwrap_or_default().to_string(), v))
        .collect()
}

/// Each view in the chunk scripts beside a page, by id; the chunks hold nothing that
/// could close a script.
fn chunk_views(dir: &Path) -> std::collections::BTreeMap<String, Value> {
    let mut views = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("report-transcripts")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains('<') && !text.contains('\u{2028}'), "{text}");
        for line in text.lines() {
            let rest = line.strip_prefix("abTranscript(").expect(line);
            let rest = &rest[rest.find(',').unwrap() + 1..];
            let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
            let id = values.next().unwrap().unwrap();
            let at = values.byte_offset();
            let view: Value = serde_json::Deserializer::from_str(&rest[at + 1..])
                .into_iter::<Value>()
                .next()
                .unwrap()
                .unwrap();
            assert!(views
                .insert(id.as_str().unwrap().to_string(), view)
                .is_none());
        }
    }
    views
}

/// A big run's page uses the views built while the run went, written in chunk scripts
/// of many tasks (one file here for six tasks, where each task used to have its own),
/// and they are the views `agentbatch report` reads back from the transcripts. The
/// page loads them from file:// and shows every stage.
#[test]
fn a_runs_own_views_are_the_ones_its_transcripts_give() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    case.write("job.yaml", JOB);
    let out = bin()
        .args([
            "run", "job.yaml", "--quiet", "--run-id", "r", "--out", "reports",
        ])
        .current_dir(case.path(""))
        .env("AGENTBATCH_REPORT_INLINE_TASKS", "2")
        .output()
        .unwrap();
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = case.path("reports/r");
    let lazy = dir.join("report-transcripts");
    assert_eq!(std::fs::read_dir(&lazy).unwrap().count(), 1);
    assert!(!dir.join("report-transcripts.live").exists());
    let live = chunk_views(&dir);
    assert_eq!(live.len(), 6, "{:?}", live.keys());
    assert!(
        live["transcripts/hostile.jsonl"]
            .to_string()
            .contains(HOSTILE),
        "{}",
        live["transcripts/hostile.jsonl"]
    );

    let seen = drive(
        &dir.join("report.html"),
        &["--open", "denied-push,hostile,fixes-it"],
    );
    assert_clean(&seen);
    assert_stages(&seen, "denied-push");
    assert_stages(&seen, "fixes-it");

    let out = bin()
        .arg("report")
        .arg(&dir)
        .env("AGENTBATCH_REPORT_INLINE_TASKS", "2")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(chunk_views(&dir), live);
}
