//! Suites in the formats people bring (SWE-bench rows and task repos, Harbor and
//! Terminal-Bench task folders), made here with real repositories, real failing tests
//! and images built locally FROM the test image with pytest: the reference agents, a
//! scripted agent, hostile patches and agents, regrading and kill -9 during
//! verification.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{git_in, read_csv, signal, wait_until, Case};

/// The image with python3, git, pytest and patch that tests/run.sh builds.
fn py_image() -> String {
    crate::common::test_image("AGENTBATCH_TEST_PY_IMAGE", "localhost/agentbatch-test-py:1")
}

fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

const CALC: &str = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n";
const BASE_TESTS: &str = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n";

/// One SWE-bench instance of the calc repository.
struct Instance {
    id: String,
    gold: String,
    test_patch: String,
    f2p: Vec<String>,
    p2p: Vec<String>,
}

/// The calc repository at its base commit in `dir` (a git work tree), and its
/// instances: each with a gold patch (the fix) and a test patch (the test that fails
/// before it), taken from real diffs.
fn calc_repo(case: &Case, dir: &str, first: u32) -> (PathBuf, String, Vec<Instance>) {
    let root = case.path(dir);
    case.write(&format!("{dir}/calc.py"), CALC);
    case.write(&format!("{dir}/tests/test_calc.py"), BASE_TESTS);
    case.write(&format!("{dir}/.gitignore"), "__pycache__/\n");
    git_in(&root, &["init", "-q", "-b", "main"]);
    git_in(&root, &["add", "-A"]);
    git_in(&root, &["commit", "-qm", "base"]);
    let base = git_out(&root, &["rev-parse", "HEAD"]).trim().to_string();
    let diff_of = |file: &str, from: &str, to: &str| {
        let path = root.join(file);
        let old = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, old.replace(from, to)).unwrap();
        let d = git_out(&root, &["diff"]);
        git_in(&root, &["checkout", "--", file]);
        d
    };
    let test = |name: &str, body: &str| {
        diff_of(
            "tests/test_calc.py",
            "from calc import sub\n",
            &format!("from calc import sub, {name}\n\n\ndef test_{name}():\n    {body}\n"),
        )
    };
    let instances = vec![
        Instance {
            id: format!("calc__calc-{first}"),
            gold: diff_of(
                "calc.py",
                "def add(a, b):\n    return a - b",
                "def add(a, b):\n    return a + b",
            ),
            test_patch: test("add", "assert add(2, 3) == 5"),
            f2p: vec!["tests/test_calc.py::test_add".into()],
            p2p: vec!["tests/test_calc.py::test_sub".into()],
        },
        Instance {
            id: format!("calc__calc-{}", first + 1),
            gold: diff_of(
                "calc.py",
                "def mul(a, b):\n    return a + b",
                "def mul(a, b):\n    return a * b",
            ),
            test_patch: test("mul", "assert mul(2, 3) == 6"),
            f2p: vec!["tests/test_calc.py::test_mul".into()],
            p2p: vec!["tests/test_calc.py::test_sub".into()],
        },
    ];
    (root, base, instances)
}

/// SWE-bench's evaluation script for an instance: the test file reset, the test patch
/// applied, pytest between the markers, the test file reset again.
fn eval_script(base: &str, test_patch: &str) -> String {
    format!(
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\ngit checkout {base} -- tests/test_calc.py\ngit apply -v - <<'EOF_114329324912'\n{test_patch}\nEOF_114329324912\n: '>>>>> Start Test Output'\npython3 -m pytest -p no:cacheprovider -rA tests/test_calc.py\n: '>>>>> End Test Output'\ngit checkout {base} -- tests/test_calc.py\n"
    )
}

/// A Dockerfile context with the repository (its .git included) at /testbed.
fn testbed_dockerfile(ctx: &Path, repo: &Path) {
    copy_dir(repo, &ctx.join("testbed"));
    std::fs::write(
        ctx.join("Dockerfile"),
        format!(
            "FROM {}\nCOPY testbed /testbed\nWORKDIR /testbed\n",
            py_image()
        ),
    )
    .unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let ok = Command::new("cp")
        .args(["-a", &format!("{}/.", from.display())])
        .arg(to)
        .status()
        .unwrap();
    assert!(ok.success());
}

/// An image namespace of the test's own: tests run at once, and each builds its
/// instances' images from a repository of its own (its commits differ).
fn namespace(case: &Case) -> String {
    let name = case
        .dir
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .to_lowercase();
    let name: String = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    format!("localhost/t{name}")
}

/// The image the harness would name for `id` under the test's namespace, built here.
fn build_instance_image(case: &Case, repo: &Path, id: &str) -> String {
    let key = format!("sweb.eval.x86_64.{id}:latest").to_lowercase();
    let image = format!("{}/{key}", namespace(case)).replace("__", "_1776_");
    let ctx = case.path(&format!("images/{id}"));
    std::fs::create_dir_all(&ctx).unwrap();
    testbed_dockerfile(&ctx, repo);
    let out = Command::new("podman")
        .args(["build", "-q", "-t", &image])
        .arg(&ctx)
        .output()
        .expect("podman runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    image
}

/// A SWE-bench 5 dataset file of the calc instances (`name`), their images built.
fn swebench_jsonl(case: &Case, name: &str) -> (PathBuf, String, Vec<Instance>) {
    let (repo, base, instances) = calc_repo(case, &format!("{name}-repo"), 1);
    let mut lines = String::new();
    for i in &instances {
        build_instance_image(case, &repo, &i.id);
        let row = serde_json::json!({
            "instance_id": i.id,
            "repo": "calc/calc",
            "base_commit": base,
            "patch": i.gold,
            "test_patch": i.test_patch,
            "problem_statement": format!("{} is wrong: fix it so that its test passes.", i.id),
            "hints_text": "",
            "created_at": "2026-01-01T00:00:00Z",
            "version": "1.0",
            "environment_setup_commit": base,
            // As the exported rows have them: JSON-encoded strings.
            "FAIL_TO_PASS": serde_json::to_string(&i.f2p).unwrap(),
            "PASS_TO_PASS": serde_json::to_string(&i.p2p).unwrap(),
            "eval_script": eval_script(&base, &i.test_patch),
            "log_parser": "parse_log_pytest",
            "eval_type": "pass_and_fail",
        });
        lines.push_str(&row.to_string());
        lines.push('\n');
    }
    let path = case.write(&format!("{name}.jsonl"), &lines);
    (path, base, instances)
}

/// A SWE-bench 5 task repo of the calc instances, one more in an unpublished split.
fn swebench_task_repo(case: &Case, name: &str) -> PathBuf {
    let (repo, base, instances) = calc_repo(case, &format!("{name}-repo"), 11);
    case.write(
        &format!("{name}/sweb.yaml"),
        "datasets: [calc-verified]\nsplits: [test]\n",
    );
    for i in &instances {
        let dir = case.path(&format!("{name}/tasks/{}", i.id));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("task.yaml"),
            format!("instance_id: {}\nrepo: calc/calc\nversion: '1.0'\nbase_commit: {base}\nsplit: test\nlog_parser: parse_log_pytest\neval_type: PASS_AND_FAIL\ndatasets: [calc-verified]\n", i.id),
        )
        .unwrap();
        std::fs::write(
            dir.join("tests.json"),
            serde_json::json!({"FAIL_TO_PASS": i.f2p, "PASS_TO_PASS": i.p2p}).to_string(),
        )
        .unwrap();
        std::fs::write(dir.join("problem_statement.md"), format!("Fix {}.\n", i.id)).unwrap();
        std::fs::write(dir.join("gold.patch"), &i.gold).unwrap();
        std::fs::write(dir.join("test.patch"), &i.test_patch).unwrap();
        std::fs::write(dir.join("eval.sh"), eval_script(&base, &i.test_patch)).unwrap();
        testbed_dockerfile(&dir, &repo);
    }
    // Deprecated: in the tree, not published.
    let old = case.path(&format!("{name}/tasks/calc__calc-0"));
    copy_dir(&case.path(&format!("{name}/tasks/calc__calc-11")), &old);
    std::fs::write(
        old.join("task.yaml"),
        format!("instance_id: calc__calc-0\nrepo: calc/calc\nversion: '1.0'\nbase_commit: {base}\nsplit: deprecated\nlog_parser: parse_log_pytest\neval_type: PASS_AND_FAIL\ndatasets: [calc-verified]\n"),
    )
    .unwrap();
    case.path(name)
}

/// Harbor task folders: `greet` (reward.txt), `score` (reward.json), `tamper` (whose
/// agent will try to fake its reward).
fn harbor_tasks(case: &Case, name: &str) -> PathBuf {
    let task = |id: &str, instruction: &str, solve: &str, test: &str| {
        let d = format!("{name}/{id}");
        case.write(&format!("{d}/instruction.md"), instruction);
        case.write(
            &format!("{d}/task.toml"),
            "schema_version = \"1.4\"\n[task]\nname = \"t/x\"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\n[environment]\nnetwork_mode = \"no-network\"\ncpus = 1\nmemory_mb = 512\n",
        );
        case.write(
            &format!("{d}/environment/Dockerfile"),
            &format!(
                "FROM {}\nWORKDIR /app\nRUN echo start > /app/readme.txt\n",
                py_image()
            ),
        );
        case.write(&format!("{d}/solution/solve.sh"), solve);
        case.write(&format!("{d}/tests/test.sh"), test);
    };
    task(
        "greet",
        "Write the word hello into /app/greeting.txt.\n",
        "#!/bin/bash\necho hello > /app/greeting.txt\n",
        "#!/bin/bash\nif [ \"$(cat /app/greeting.txt 2>/dev/null)\" = hello ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    task(
        "score",
        "Write the number 42 into /app/answer.txt.\n",
        "#!/bin/bash\necho 42 > /app/answer.txt\n",
        "#!/bin/bash\nv=$(cat /app/answer.txt 2>/dev/null)\nif [ \"$v\" = 42 ]; then r=1; else r=0; fi\necho \"{\\\"reward\\\": $r, \\\"style\\\": 0.5}\" > /logs/verifier/reward.json\n",
    );
    task(
        "tamper",
        "Make /app/secret.txt hold the word open.\n",
        "#!/bin/bash\necho open > /app/secret.txt\n",
        "#!/bin/bash\nif [ \"$(cat /app/secret.txt 2>/dev/null)\" = open ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    case.path(name)
}

/// A Terminal-Bench 1 task folder.
fn terminal_bench_tasks(case: &Case, name: &str) -> PathBuf {
    let d = format!("{name}/count");
    case.write(
        &format!("{d}/task.yaml"),
        "instruction: |\n  Write the number of lines of /app/readme.txt into /app/count.txt.\nauthor_name: t\ndifficulty: easy\nmax_agent_timeout_sec: 120\nmax_test_timeout_sec: 60\n",
    );
    case.write(
        &format!("{d}/Dockerfile"),
        &format!(
            "FROM {}\nWORKDIR /app\nRUN printf 'a\\nb\\nc\\n' > /app/readme.txt\n",
            py_image()
        ),
    );
    case.write(&format!("{d}/docker-compose.yaml"), "services: {}\n");
    case.write(
        &format!("{d}/solution.sh"),
        "#!/bin/bash\nwc -l < /app/readme.txt > /app/count.txt\n",
    );
    case.write(
        &format!("{d}/run-tests.sh"),
        "#!/bin/bash\ncd /app\npython3 -m pytest -p no:cacheprovider -rA $TEST_DIR/test_outputs.py\n",
    );
    case.write(
        &format!("{d}/tests/test_outputs.py"),
        "def test_count():\n    assert open('/app/count.txt').read().strip() == '3'\n",
    );
    case.path(name)
}

/// A job over `suites` (YAML list items, `NS` standing for the test's image
/// namespace) with `defaults` lines.
fn suite_job(case: &Case, defaults: &str, suites: &str) -> String {
    let suites = suites.replace(
        "image_namespace: NS",
        &format!("image_namespace: {}", namespace(case)),
    );
    format!(
        "name: s\nconcurrency: 4\ntoolsets:\n  coding:\n    tools: [read_file, write_file, edit_file, bash]\n    bash: {{ timeout: 20s }}\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  toolset: coding\n  max_tokens: 1024\n{defaults}suites:\n{suites}"
    )
}

/// [`Case::run`] under run id `id`, so that one case can run several jobs.
async fn run_named(case: &Case, yaml: &str, id: &str) -> crate::common::Ran {
    use agentbatch::report::ProgressMode;
    use agentbatch::run::{self, RunOptions};
    use std::sync::Arc;
    let path = case.write(&format!("{id}.yaml"), yaml);
    let registry = agentbatch::tools::Registry::builtin();
    let plan =
        agentbatch::job::load(&path, &registry).unwrap_or_else(|e| panic!("job should load:\n{e}"));
    let sim = Arc::new(
        agentbatch::sim::Sim::start_local()
            .await
            .expect("sim starts"),
    );
    let mut opts = RunOptions::new(case.path("reports"));
    opts.run_id = Some(id.into());
    opts.progress = ProgressMode::Quiet;
    opts.sim = Some(sim.clone());
    let outcome = run::run(plan, opts).await.expect("run finishes");
    crate::common::Ran {
        outcome,
        sim,
        dir: case.path(&format!("reports/{id}")),
    }
}

fn by_id(rows: &[HashMap<String, String>]) -> HashMap<String, HashMap<String, String>> {
    rows.iter()
        .map(|r| (r["task_id"].clone(), r.clone()))
        .collect()
}

/// Every suite format: the oracle resolves every task, nop none, `validate` lists the
/// tasks and leaves out the unpublished one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_oracle_resolves_every_task_of_every_format_and_nop_none() {
    let case = Case::new();
    swebench_jsonl(&case, "verified");
    swebench_task_repo(&case, "taskrepo");
    harbor_tasks(&case, "harbor");
    terminal_bench_tasks(&case, "tb");
    let suites = "  - { format: swebench, path: verified.jsonl, image_namespace: NS }\n  - { format: swebench, path: taskrepo, only: ['*-12'] }\n  - { format: harbor, path: harbor, exclude: [tamper] }\n  - { format: terminal-bench, path: tb }\n";
    let job = case.write("job.yaml", &suite_job(&case, "  agent: oracle\n", suites));
    let out = case.agentbatch(&["validate", job.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("swebench verified.jsonl: 2 task(s)"),
        "{text}"
    );
    assert!(text.contains("swebench taskrepo: 1 task(s)"), "{text}");
    assert!(text.contains("harbor harbor: 2 task(s)"), "{text}");
    assert!(text.contains("terminal-bench tb: 1 task(s)"), "{text}");
    assert!(
        text.contains("agent: oracle (applies the gold patch"),
        "{text}"
    );
    assert!(
        !text.contains("calc__calc-0"),
        "the deprecated split is left out: {text}"
    );

    let ran = case
        .run(&suite_job(&case, "  agent: oracle\n", suites))
        .await;
    let rows = ran.rows();
    let ids: Vec<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!(rows.len(), 6, "{ids:?}");
    let seen: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}",
                r["task_id"], r["outcome"], r["stop_reason"], r["stop_detail"]
            )
        })
        .collect();
    for r in &rows {
        let _ = &seen;
        assert_eq!(r["outcome"], "pass", "{seen:#?}");
        assert_eq!(r["cost_usd"], "", "{r:?}");
        assert_eq!(r["turns"], "0", "{r:?}");
    }
    let rows = by_id(&rows);
    assert_eq!(rows["calc__calc-1"]["tests_passed"], "2");
    assert_eq!(rows["calc__calc-1"]["tests_failed"], "0");
    assert_eq!(rows["greet"]["reward"], "1");
    assert_eq!(rows["score"]["reward"], "1");
    assert_eq!(rows["count"]["reward"], "1");
    for id in rows.keys() {
        assert!(ran.requests(id).is_empty(), "{id}: no model request");
    }
    let verifier = ran.events("calc__calc-1", "verifier");
    assert_eq!(verifier.len(), 1);
    assert_eq!(
        verifier[0]["tests"]["tests/test_calc.py::test_add"],
        "PASSED"
    );

    let ran = run_named(&case, &suite_job(&case, "  agent: nop\n", suites), "nop").await;
    for r in ran.rows() {
        assert_eq!(r["outcome"], "fail", "{r:?}");
    }
}

/// The calc fix of `add` as a scripted agent: right for calc__calc-1 only.
const FIX_ADD: &str = "  sim:\n    turns:\n      - content:\n          - tool_use: { name: edit_file, input: { path: calc.py, old_string: \"return a - b\\n\\n\\ndef mul\", new_string: \"return a + b\\n\\n\\ndef mul\" } }\n      - content: [ { text: done } ]\n";

/// A scripted agent that fixes one task resolves exactly that one; a patch that prints
/// its own PASSED lines (and exits non-zero) is not resolved, as the official grading
/// says of the same log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scripted_fix_resolves_exactly_its_task_and_a_patch_printing_passed_lines_does_not() {
    let case = Case::new();
    swebench_jsonl(&case, "verified");
    harbor_tasks(&case, "harbor");
    let suites = "  - { format: swebench, path: verified.jsonl, image_namespace: NS }\n  - { format: harbor, path: harbor, only: [greet] }\n";
    let ran = case.run(&suite_job(&case, FIX_ADD, suites)).await;
    let rows = by_id(&ran.rows());
    assert_eq!(rows.len(), 3);
    assert_eq!(
        rows["calc__calc-1"]["outcome"], "pass",
        "{:?}",
        rows["calc__calc-1"]
    );
    assert_eq!(rows["calc__calc-2"]["outcome"], "fail");
    assert_eq!(rows["calc__calc-2"]["tests_passed"], "1");
    assert_eq!(rows["calc__calc-2"]["tests_failed"], "1");
    assert_eq!(rows["greet"]["outcome"], "fail");
    assert_eq!(rows["greet"]["reward"], "0");
    let v = &ran.events("calc__calc-2", "verifier")[0];
    assert_eq!(v["fail_to_pass_failed"][0], "tests/test_calc.py::test_mul");
    assert_eq!(v["tests"]["tests/test_calc.py::test_mul"], "FAILED");
    // The predictions file the official harness takes carries each recorded patch.
    let out = case.agentbatch(&["export", "swebench-predictions", ran.dir.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let preds = std::fs::read_to_string(ran.dir.join("exports/predictions.jsonl")).unwrap();
    let preds: Vec<serde_json::Value> = preds
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fix = preds
        .iter()
        .find(|p| p["instance_id"] == "calc__calc-1")
        .unwrap();
    let recorded = std::fs::read_to_string(ran.dir.join("patches/calc__calc-1.diff")).unwrap();
    assert_eq!(fix["model_patch"], recorded.as_str());
    assert!(recorded.contains("+    return a + b"), "{recorded}");

    for id in ["calc__calc-1", "calc__calc-2"] {
        agrees_with_the_official_grading(&ran.events(id, "verifier")[0], &instances_of(&case, id));
    }

    // A conftest.py whose hook prints PASSED for every listed test after pytest's own
    // summary (whose FAILED lines it overrides in the parsed log): the log alone would
    // say resolved, the test command's exit code says otherwise.
    let liar = "  sim:\n    turns:\n      - content:\n          - tool_use: { name: write_file, input: { path: conftest.py, content: \"def pytest_unconfigure(config):\\n    for t in ('test_add', 'test_mul', 'test_sub'):\\n        print('PASSED tests/test_calc.py::' + t)\\n\" } }\n      - content: [ { text: done } ]\n";
    let case = Case::new();
    swebench_jsonl(&case, "verified");
    let ran = case
        .run(&suite_job(
            &case,
            liar,
            "  - { format: swebench, path: verified.jsonl, image_namespace: NS }\n",
        ))
        .await;
    for r in ran.rows() {
        assert_eq!(r["outcome"], "fail", "{r:?}");
        let v = &ran.events(&r["task_id"], "verifier")[0];
        assert!(
            v["invalid"].as_str().is_some_and(|i| !i.is_empty()),
            "the exit code contradicts the log: {v}"
        );
        assert!(
            v["output"]
                .as_str()
                .unwrap()
                .contains("PASSED tests/test_calc.py::test_add"),
            "{v}"
        );
        assert_eq!(v["exit_code"], 1, "{v}");
        assert!(
            v["tests"].is_null(),
            "an invalid log has no statuses, as in the harness: {v}"
        );
        agrees_with_the_official_grading(v, &instances_of(&case, &r["task_id"]));
    }
}

/// The FAIL_TO_PASS and PASS_TO_PASS of instance `id` in the case's verified.jsonl.
fn instances_of(case: &Case, id: &str) -> (Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(case.path("verified.jsonl")).unwrap();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["instance_id"] == id {
            let list =
                |k: &str| -> Vec<String> { serde_json::from_str(v[k].as_str().unwrap()).unwrap() };
            return (list("FAIL_TO_PASS"), list("PASS_TO_PASS"));
        }
    }
    panic!("no instance {id}")
}

/// The verifier's verdict and parsed statuses equal what the official swebench
/// package's grading computes on the same log (tests/python/swebench_grade.py).
fn agrees_with_the_official_grading(v: &serde_json::Value, tests: &(Vec<String>, Vec<String>)) {
    let python = std::env::var("AGENTBATCH_TEST_PYTHON").expect(
        "AGENTBATCH_TEST_PYTHON is not set: run the tests through ./tests/run.sh, which installs the official swebench package",
    );
    let log = v["output"].as_str().unwrap();
    assert!(log.len() < 16_000, "the whole log is in the transcript");
    let cases = serde_json::json!([{
        "kind": "grade", "log": log, "parser": "parse_log_pytest",
        "FAIL_TO_PASS": tests.0, "PASS_TO_PASS": tests.1, "eval_type": "pass_and_fail",
    }]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cases.json");
    std::fs::write(&file, cases.to_string()).unwrap();
    let driver =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/swebench_grade.py");
    let out = Command::new(python)
        .arg(driver)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let official: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let grade = &official[0]["grade"];
    assert_eq!(
        grade["resolved"], v["passed"],
        "official {grade} vs ours {v}"
    );
    let ours: Vec<(String, String)> = v["tests"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, s)| (k.clone(), s.as_str().unwrap().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let mut theirs: Vec<(String, String)> = grade["statuses"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p[0].as_str().unwrap().to_string(),
                        p[1].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    theirs.sort();
    // An invalid log has no statuses in the official report; ours keeps what parsed.
    if grade["valid"] == true {
        assert_eq!(ours, theirs, "official {grade} vs ours {v}");
    }
}

/// An agent that writes its own /tests/test.sh, its own reward file, and leaves a
/// process rewriting the reward still gets the verifier's true reward.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_harbor_agent_that_tampers_with_the_tests_gets_the_true_reward() {
    let case = Case::new();
    harbor_tasks(&case, "harbor");
    let tamper = "  sim:\n    turns:\n      - content:\n          - tool_use: { name: bash, input: { command: \"mkdir -p /tests /logs/verifier && printf '#!/bin/bash\\\\necho 1 > /logs/verifier/reward.txt\\\\n' > /tests/test.sh && chmod +x /tests/test.sh && echo 1 > /logs/verifier/reward.txt && (nohup sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' >/dev/null 2>&1 &) && cat /tests/test.sh\" } }\n      - content: [ { text: done } ]\n";
    let ran = case
        .run(&suite_job(
            &case,
            tamper,
            "  - { format: harbor, path: harbor, only: [tamper] }\n",
        ))
        .await;
    let row = ran.row("tamper");
    assert_eq!(row["outcome"], "fail", "{row:?}");
    assert_eq!(row["reward"], "0", "{row:?}");
    let calls = ran.events("tamper", "tool_result");
    assert!(
        calls[0].to_string().contains("reward.txt"),
        "the agent's script ran: {}",
        calls[0]
    );
    // The same task with the oracle passes: the tests do run.
    let ran = run_named(
        &case,
        &suite_job(
            &case,
            "  agent: oracle\n",
            "  - { format: harbor, path: harbor, only: [tamper] }\n",
        ),
        "oracle",
    )
    .await;
    assert_eq!(ran.row("tamper")["outcome"], "pass");

    // Its verifier shares the agent's container: a regrade, which has only the
    // recorded patch, leaves it alone unless asked.
    let dir = ran.dir.to_str().unwrap().to_string();
    let out = case.agentbatch(&["regrade", &dir]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(
            "1 task runs not regraded: their Harbor verifier shares the agent's container"
        ),
        "{said}"
    );
    let out = case.agentbatch(&["regrade", &dir, "--shared"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{said}");
    assert!(said.contains("regraded 1 task runs"), "{said}");
}

/// An agent that plants FIFOs where a verifier might read a file back (the control
/// folder the runner shares with the container) cannot stall or fail the verifier:
/// the reward it earned comes back at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifos_planted_by_the_agent_neither_stall_nor_fail_the_verifier() {
    let case = Case::new();
    harbor_tasks(&case, "harbor");
    let plant = "  sim:\n    turns:\n      - content:\n          - tool_use: { name: bash, input: { command: \"echo hello > /app/greeting.txt && for f in reward.txt reward.json test-stdout.txt eval.log; do rm -f /.agentbatch/$f; mkfifo /.agentbatch/$f; done && ls -l /.agentbatch\" } }\n      - content: [ { text: done } ]\n";
    let started = std::time::Instant::now();
    let ran = case
        .run(&suite_job(
            &case,
            plant,
            "  - { format: harbor, path: harbor, only: [greet] }\n",
        ))
        .await;
    let row = ran.row("greet");
    assert_eq!(row["outcome"], "pass", "{row:?}");
    assert_eq!(row["reward"], "1", "{row:?}");
    let calls = ran.events("greet", "tool_result");
    assert!(
        calls[0].to_string().contains("prw"),
        "FIFOs planted: {}",
        calls[0]
    );
    assert!(
        started.elapsed() < Duration::from_secs(100),
        "no read back waited for a writer ({:?})",
        started.elapsed()
    );
}

/// A Harbor task whose image runs as a user other than root: the verifier still
/// prepares /tests and /logs/verifier (as root, as Harbor does), and the tests run as
/// the image's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_harbor_image_with_a_non_root_user_is_verified() {
    let case = Case::new();
    harbor_tasks(&case, "harbor");
    case.write(
        "harbor/greet/environment/Dockerfile",
        &format!(
            "FROM {}\nRUN useradd -m runner && mkdir /app && chown runner /app\nUSER runner\nWORKDIR /app\n",
            py_image()
        ),
    );
    case.write(
        "harbor/greet/tests/test.sh",
        "#!/bin/bash\nif [ \"$(cat /app/greeting.txt 2>/dev/null)\" = hello ] && [ \"$(id -un)\" = runner ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    );
    let suites = "  - { format: harbor, path: harbor, only: [greet] }\n";
    let ran = run_named(
        &case,
        &suite_job(&case, "  agent: oracle\n", suites),
        "oracle",
    )
    .await;
    let row = ran.row("greet");
    assert_eq!(row["outcome"], "pass", "{row:?}");
    assert_eq!(row["reward"], "1", "{row:?}");
    let ran = run_named(&case, &suite_job(&case, "  agent: nop\n", suites), "nop").await;
    assert_eq!(ran.row("greet")["outcome"], "fail");
}

/// `regrade` with a changed test patch changes exactly the verdicts it should, keeps
/// the old ones readable, and sends no model request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn regrade_after_a_changed_test_patch_changes_exactly_the_expected_verdicts() {
    let case = Case::new();
    let (jsonl, base, instances) = swebench_jsonl(&case, "verified");
    let suites = "  - { format: swebench, path: verified.jsonl, image_namespace: NS }\n";
    let ran = case
        .run(&suite_job(&case, "  agent: oracle\n", suites))
        .await;
    assert!(ran.rows().iter().all(|r| r["outcome"] == "pass"));
    let dir = ran.dir.clone();

    // The same verifiers: nothing changes.
    let out = case.agentbatch(&["regrade", dir.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("regraded 2 task runs: 0 changed"), "{said}");

    // A fixed test patch for calc__calc-1 that the gold patch does not satisfy.
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let changed = instances[0]
        .test_patch
        .replace("add(2, 3) == 5", "add(2, 3) == 6");
    lines[0]["test_patch"] = changed.clone().into();
    lines[0]["eval_script"] = eval_script(&base, &changed).into();
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    case.write("fixed.jsonl", &body);
    let job2 = case.write(
        "job2.yaml",
        &suite_job(
            &case,
            "  agent: oracle\n",
            "  - { format: swebench, path: fixed.jsonl, image_namespace: NS }\n",
        ),
    );
    let out = case.agentbatch(&[
        "regrade",
        dir.to_str().unwrap(),
        "--job",
        job2.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("calc__calc-1: pass -> fail  (changed)"),
        "{said}"
    );
    assert!(said.contains("calc__calc-2: pass -> pass"), "{said}");
    let rows = by_id(&read_csv(&dir.join("results.csv")));
    assert_eq!(rows["calc__calc-1"]["outcome"], "fail");
    assert_eq!(rows["calc__calc-1"]["tests_failed"], "1");
    assert_eq!(rows["calc__calc-2"]["outcome"], "pass");
    // The old verdicts stay readable: the rows as they were, and every verifier event.
    let old = read_csv(&dir.join("regraded.csv"));
    assert_eq!(old.len(), 4, "two regrades of two rows: {old:?}");
    assert!(old.iter().all(|r| r["outcome"] == "pass"));
    let events = ran.events("calc__calc-1", "verifier");
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["regrade"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(numbers, [0, 1, 2]);
    assert_eq!(events[2]["passed"], false);
    let summary = read_csv(&dir.join("summary.csv"));
    assert_eq!(summary[0]["pass"], "1", "{summary:?}");
    assert!(std::fs::read_to_string(dir.join("report.html"))
        .unwrap()
        .contains("calc__calc-1"));
    assert!(
        ran.sim.requests().is_empty(),
        "a regrade sends no model request"
    );

    // A regrade whose verifier cannot run (its images are not there) keeps every
    // verdict: nothing turns into an error that a resume would pay the model for.
    let gone = case.write(
        "gone.yaml",
        &suite_job(
            &case,
            "  agent: oracle\n",
            "  - { format: swebench, path: fixed.jsonl, image_namespace: localhost/nowhere }\n",
        ),
    );
    let before = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let out = case.agentbatch(&[
        "regrade",
        dir.to_str().unwrap(),
        "--job",
        gone.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("2 could not be verified"), "{said}");
    assert!(
        said.contains("calc__calc-1: fail -> fail (kept: "),
        "{said}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("results.csv")).unwrap(),
        before,
        "results.csv is as it was"
    );
    assert_eq!(read_csv(&dir.join("regraded.csv")).len(), 4);
}

/// kill -9 while the verifiers run (a fresh SWE-bench container, a Harbor test
/// script), then resume: every task has exactly one verdict, and no container is left.
#[test]
fn kill_9_during_verification_then_resume_gives_every_task_one_verdict() {
    let case = Case::new();
    swebench_jsonl(&case, "verified");
    harbor_tasks(&case, "harbor");
    // Slow verifiers, so that the kill lands while they run.
    let text = std::fs::read_to_string(case.path("verified.jsonl")).unwrap();
    let slow: String = text
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s = v["eval_script"]
                .as_str()
                .unwrap()
                .replace("cd /testbed\n", "cd /testbed\nsleep 6\n");
            v["eval_script"] = s.into();
            format!("{v}\n")
        })
        .collect();
    case.write("verified.jsonl", &slow);
    let t = case.path("harbor/greet/tests/test.sh");
    let body = std::fs::read_to_string(&t).unwrap();
    std::fs::write(&t, body.replace("#!/bin/bash\n", "#!/bin/bash\nsleep 6\n")).unwrap();
    case.write(
        "job.yaml",
        &suite_job(&case,
            "  agent: oracle\n",
            "  - { format: swebench, path: verified.jsonl, image_namespace: NS }\n  - { format: harbor, path: harbor, only: [greet] }\n",
        ),
    );
    let mut child = case.start_run(&[]);
    let dir = case.path("reports/r");
    wait_until(
        "every loop to end and its verifier to start",
        Duration::from_secs(90),
        || {
            ["calc__calc-1", "calc__calc-2", "greet"].iter().all(|id| {
                std::fs::read_to_string(dir.join(format!("transcripts/{id}.jsonl")))
                    .unwrap_or_default()
                    .contains("\"stop\"")
            })
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        !dir.join("results.csv").exists() || read_csv(&dir.join("results.csv")).len() < 3,
        "the kill must land before every verdict"
    );
    signal(child.id(), "KILL");
    let _ = child.wait();
    let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = read_csv(&dir.join("results.csv"));
    let mut ids: Vec<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        ["calc__calc-1", "calc__calc-2", "greet"],
        "one row each: {rows:?}"
    );
    assert!(rows.iter().all(|r| r["outcome"] == "pass"), "{rows:?}");
    let left = Command::new("podman")
        .args(["ps", "-a", "--format", "{{.Names}}", "--filter"])
        .arg(format!(
            "label=agentbatch.run={}",
            dir.canonicalize().unwrap().display()
        ))
        .output()
        .unwrap();
    let left = String::from_utf8_lossy(&left.stdout);
    assert!(
        left.lines().all(|n| n.ends_with("-kept")),
        "only kept containers stay: {left}"
    );
}

/// What a suite cannot give is named by its file (and line) and field, before
/// anything runs; `suite show` prints what `validate` would list.
#[test]
fn bad_suites_are_named_by_file_and_field_and_suite_show_round_trips() {
    let case = Case::new();
    harbor_tasks(&case, "harbor");
    std::fs::remove_file(case.path("harbor/score/tests/test.sh")).unwrap();
    case.write(
        "rows.jsonl",
        concat!(
            "{\"instance_id\": \"a__b-1\", \"problem_statement\": \"p\", \"repo\": \"psf/requests\", \"FAIL_TO_PASS\": \"[]\"}\n",
            "{not json\n",
            "{\"instance_id\": \"go__x-1\", \"problem_statement\": \"p\", \"eval_script\": \"x\", \"log_parser\": \"parse_log_gotest\", \"FAIL_TO_PASS\": [\"T\"]}\n",
            "{\"instance_id\": \"bad id!\", \"problem_statement\": \"p\", \"eval_script\": \"x\", \"log_parser\": \"parse_log_pytest\", \"FAIL_TO_PASS\": [\"T\"]}\n",
        ),
    );
    case.write(
        "job.yaml",
        &suite_job(&case,
            "",
            "  - { format: swebench, path: rows.jsonl }\n  - { format: harbor, path: harbor }\n  - { format: terminal-bench, path: nowhere }\n",
        ),
    );
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("rows.jsonl:1: instance a__b-1: no `eval_script`"),
        "{err}"
    );
    assert!(err.contains("rows.jsonl:2: not a JSON object"), "{err}");
    assert!(
        err.contains("rows.jsonl:4: the task id \"bad id!\""),
        "{err}"
    );
    assert!(
        err.contains("harbor/score/tests/test.sh: the task folder has no tests/test.sh"),
        "{err}"
    );
    assert!(
        err.contains("nowhere: the terminal-bench suite's path does not exist"),
        "{err}"
    );
    // An unknown parser is refused by name once the rows read.
    case.write(
        "rows.jsonl",
        "{\"instance_id\": \"go__x-1\", \"problem_statement\": \"p\", \"eval_script\": \"x\", \"log_parser\": \"parse_log_gotest\", \"FAIL_TO_PASS\": [\"T\"]}\n",
    );
    case.write(
        "job.yaml",
        &suite_job(
            &case,
            "  agent: nop\n",
            "  - { format: swebench, path: rows.jsonl }\n",
        ),
    );
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("rows.jsonl:1: task \"go__x-1\" of suites[0]: verifier.swebench.log_parser: log parser \"parse_log_gotest\" is not one agentbatch has"),
        "{err}"
    );

    // suite show: the Harbor suite (score mended) as job YAML, which validates as the
    // suite does.
    case.write(
        "harbor/score/tests/test.sh",
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    );
    let out = case.agentbatch(&["suite", "show", "harbor"]);
    let yaml = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        yaml.contains("id: greet") && yaml.contains("id: tamper"),
        "{yaml}"
    );
    let head = suite_job(&case, "  agent: oracle\n", "");
    let head = head.strip_suffix("suites:\n").unwrap();
    let shown = format!("{head}{}", &yaml[yaml.find("tasks:").unwrap()..]);
    case.write("shown.yaml", &shown);
    case.write(
        "suite.yaml",
        &suite_job(
            &case,
            "  agent: oracle\n",
            "  - { format: harbor, path: harbor }\n",
        ),
    );
    let a = case.agentbatch(&["validate", "shown.yaml"]);
    let b = case.agentbatch(&["validate", "suite.yaml"]);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let tasks = |o: &std::process::Output| {
        let t = String::from_utf8_lossy(&o.stdout).to_string();
        t[t.find("tasks:").unwrap()..t.find("ok: ").unwrap()].to_string()
    };
    assert_eq!(tasks(&a), tasks(&b));
}

/// The reference agents as a matrix axis: one run gives both, and `compare` reads them
/// like any two variants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oracle_and_nop_as_a_matrix_axis_compare_like_variants() {
    let case = Case::new();
    harbor_tasks(&case, "harbor");
    let job = suite_job(
        &case,
        "",
        "  - { format: harbor, path: harbor, exclude: [tamper] }\n",
    )
    .replace("suites:\n", "matrix:\n  agent: [oracle, nop]\nsuites:\n");
    let ran = case.run(&job).await;
    let rows = ran.rows();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in &rows {
        let want = if r["variant"] == "agent=oracle" {
            "pass"
        } else {
            "fail"
        };
        assert_eq!(r["outcome"], want, "{r:?}");
        assert_eq!(r["matrix.agent"], &r["variant"]["agent=".len()..]);
    }
    let out = case.agentbatch(&["compare", ran.dir.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("agent=oracle") && said.contains("agent=nop"),
        "{said}"
    );
}
