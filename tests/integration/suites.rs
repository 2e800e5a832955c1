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
    let image = std::env::var("AGENTBATCH_TEST_PY_IMAGE")
        .unwrap_or_else(|_| "localhost/agentbatch-test-py:1".into());
    let ok = Command::new("podman")
        .args(["image", "exists", &image])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "podman and the image {image} are needed: tests/run.sh builds it (or set AGENTBATCH_TEST_PY_IMAGE)"
    );
    image
}

fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
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
            gold: diff_of("calc.py", "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"),
            test_patch: test("add", "assert add(2, 3) == 5"),
            f2p: vec!["tests/test_calc.py::test_add".into()],
            p2p: vec!["tests/test_calc.py::test_sub".into()],
        },
        Instance {
            id: format!("calc__calc-{}", first + 1),
            gold: diff_of("calc.py", "def mul(a, b):\n    return a + b", "def mul(a, b):\n    return a * b"),
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
        format!("FROM {}\nCOPY testbed /testbed\nWORKDIR /testbed\n", py_image()),
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

/// The image the harness would name for `id` under namespace `localhost`, built here.
fn build_instance_image(case: &Case, repo: &Path, id: &str) -> String {
    let key = format!("sweb.eval.x86_64.{id}:latest").to_lowercase();
    let image = format!("localhost/{key}").replace("__", "_1776_");
    let ctx = case.path(&format!("images/{id}"));
    std::fs::create_dir_all(&ctx).unwrap();
    testbed_dockerfile(&ctx, repo);
    let out = Command::new("podman")
        .args(["build", "-q", "-t", &image])
        .arg(&ctx)
        .output()
        .expect("podman runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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
    case.write(&format!("{name}/sweb.yaml"), "datasets: [calc-verified]\nsplits: [test]\n");
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
            &format!("FROM {}\nWORKDIR /app\nRUN echo start > /app/readme.txt\n", py_image()),
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
        &format!("FROM {}\nWORKDIR /app\nRUN printf 'a\\nb\\nc\\n' > /app/readme.txt\n", py_image()),
    );
    case.write(&format!("{d}/docker-compose.yaml"), "services: {}\n");
    case.write(&format!("{d}/solution.sh"), "#!/bin/bash\nwc -l < /app/readme.txt > /app/count.txt\n");
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

/// A job over `suites` (YAML list items) with `defaults` lines.
fn suite_job(defaults: &str, suites: &str) -> String {
    format!(
        "name: s\nconcurrency: 4\ntoolsets:\n  coding:\n    tools: [read_file, write_file, edit_file, bash]\n    bash: {{ timeout: 20s }}\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  toolset: coding\n  max_tokens: 1024\n{defaults}suites:\n{suites}"
    )
}

fn by_id(rows: &[HashMap<String, String>]) -> HashMap<String, HashMap<String, String>> {
    rows.iter().map(|r| (r["task_id"].clone(), r.clone())).collect()
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
    let suites = "  - { format: swebench, path: verified.jsonl, image_namespace: localhost }\n  - { format: swebench, path: taskrepo, only: ['*-12'] }\n  - { format: harbor, path: harbor, exclude: [tamper] }\n  - { format: terminal-bench, path: tb }\n";
    let job = case.write("job.yaml", &suite_job("  agent: oracle\n", suites));
    let out = case.agentbatch(&["validate", job.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("swebench verified.jsonl: 2 task(s)"), "{text}");
    assert!(text.contains("swebench taskrepo: 1 task(s)"), "{text}");
    assert!(text.contains("harbor harbor: 2 task(s)"), "{text}");
    assert!(text.contains("terminal-bench tb: 1 task(s)"), "{text}");
    assert!(text.contains("agent: oracle (applies the gold patch"), "{text}");
    assert!(!text.contains("calc__calc-0"), "the deprecated split is left out: {text}");

    let ran = case.run(&suite_job("  agent: oracle\n", suites)).await;
    let rows = ran.rows();
    let ids: Vec<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!(rows.len(), 6, "{ids:?}");
    let seen: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {} {} {}", r["task_id"], r["outcome"], r["stop_reason"], r["stop_detail"]))
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
    assert_eq!(verifier[0]["tests"]["tests/test_calc.py::test_add"], "PASSED");

    let ran = case.run(&suite_job("  agent: nop\n", suites)).await;
    for r in ran.rows() {
        assert_eq!(r["outcome"], "fail", "{r:?}");
    }
}
