//! Repo-fix tasks: workspaces, coding tools and their confinement, the permission
//! policy, the sandbox, setup and check commands, patches, and untouched sources.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentbatch::tools::workspace::tree_digest;
use serde_json::Value;

use crate::common::{
    bin, calc_fixture as fixture, git_in, make_git_repository, num, read_csv, Case, Ran,
};

/// A job of one repo task with the given script turns (YAML list items, indented 8).
fn job(toolsets: &str, task: &str, turns: &str) -> String {
    format!(
        "name: repo\n{toolsets}defaults:\n  model: claude-sonnet-4-5\n  toolset: coding\n  check: python3 -m unittest -q\n  check_timeout: 1m\ntasks:\n  - id: t\n    repo: calc\n    prompt: fix it\n{task}    sim:\n      turns:\n{turns}        - content: [ {{ text: done }} ]\n"
    )
}

fn tool_results(ran: &Ran, task: &str) -> Vec<Value> {
    ran.events(task, "tool_result")
}

/// The shipped suite through the binary, from another folder and with the default
/// `--out` (a relative `reports/`): three git repositories (bundles, one at a tag) and
/// three plain folders, files created at the root and deep.
#[test]
fn the_example_suite_passes_and_fails_with_patches_and_leaves_sources_untouched() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = root.join("jobs/fixtures");
    let digest = |d: &Path| -> HashMap<String, u64> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .map(|p| {
                let d = if p.is_dir() {
                    tree_digest(&p).unwrap()
                } else {
                    std::fs::read(&p).unwrap().len() as u64
                };
                (p.display().to_string(), d)
            })
            .collect()
    };
    let before = (
        digest(&fixtures.join("repos")),
        digest(&fixtures.join("git")),
    );
    let case = Case::new();
    let out = case.agentbatch(&[
        "run",
        root.join("jobs/repo-fix.yaml").to_str().unwrap(),
        "--run-id",
        "suite",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        (
            digest(&fixtures.join("repos")),
            digest(&fixtures.join("git"))
        ),
        before,
        "a source repository was modified"
    );
    let dir = case.path("reports/suite");
    let rows = read_csv(&dir.join("results.csv"));
    let row = |id: &str| rows.iter().find(|r| r["task_id"] == id).unwrap().clone();
    for id in ["fix-dates", "fix-slugify", "fix-inventory", "fix-csvstats"] {
        let r = row(id);
        assert_eq!(r["outcome"], "pass", "{r:?}");
        assert_eq!(r["check_exit_code"], "0");
        assert!(!r["check_ms"].is_empty());
        assert!(
            r["workspace"].is_empty(),
            "a passing workspace is removed (on_failure)"
        );
        assert!(!dir.join("workspaces").join(id).exists());
        assert_eq!(r["tool_errors"], "0", "{r:?}");
    }
    for id in ["fix-money", "fix-roman"] {
        let r = row(id);
        assert_eq!(r["outcome"], "fail", "{r:?}");
        assert_ne!(r["check_exit_code"], "0");
        assert!(
            Path::new(&r["workspace"]).is_dir(),
            "a failing workspace is kept: {r:?}"
        );
    }
    for r in &rows {
        assert!(!r["sandbox"].is_empty());
        assert_eq!(r["patch"], format!("patches/{}.diff", r["task_id"]));
        assert_eq!(r["denied_calls"], "0");
    }
    let cloned = |id: &str| {
        let text = std::fs::read_to_string(dir.join(format!("transcripts/{id}.jsonl"))).unwrap();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .find(|e| e["event"] == "workspace")
            .unwrap()["cloned"]
            .clone()
    };
    for id in ["fix-dates", "fix-slugify", "fix-inventory"] {
        assert_eq!(cloned(id), true, "{id} works in a clone");
    }
    assert_eq!(cloned("fix-csvstats"), false);
    let patch = |id: &str| std::fs::read_to_string(dir.join(format!("patches/{id}.diff"))).unwrap();
    assert!(
        patch("fix-dates").contains("new file mode"),
        "an added file is in the patch"
    );
    assert!(
        patch("fix-inventory").contains("deleted file mode"),
        "a deleted file is in the patch"
    );
    assert!(patch("fix-slugify").contains("\n-") && patch("fix-slugify").contains("\n+"));
    assert!(
        patch("fix-slugify").contains("+++ b/CHANGELOG.md"),
        "a new file at the root of a git repository"
    );
    assert!(
        patch("fix-csvstats").contains("+++ b/test_blank_cells.py"),
        "a new file at the root of a folder"
    );
    assert_eq!(patch("fix-roman"), "", "no change, empty patch");
    assert!(!patch("fix-dates").contains("__pycache__"));
}

/// Every bundle of the example suite holds exactly its folder: a change to one without
/// rerunning jobs/fixtures/make-bundles.sh would make the suite test other code.
#[test]
fn the_git_fixtures_match_their_folders() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("jobs/fixtures");
    let case = Case::new();
    let mut seen = 0;
    for e in std::fs::read_dir(root.join("git")).unwrap() {
        let bundle = e.unwrap().path();
        let name = bundle.file_stem().unwrap().to_str().unwrap().to_string();
        let clone = case.path(&name);
        let ok = Command::new("git")
            .args(["clone", "-q", "--branch", "v1"])
            .arg(&bundle)
            .arg(&clone)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(ok.success(), "git clone {}", bundle.display());
        std::fs::remove_dir_all(clone.join(".git")).unwrap();
        assert_eq!(
            tree_digest(&clone).unwrap(),
            tree_digest(&root.join("repos").join(&name)).unwrap(),
            "{} differs from repos/{name}: run jobs/fixtures/make-bundles.sh",
            bundle.display()
        );
        seen += 1;
    }
    assert_eq!(seen, 3);
}

/// A git repository with a relative `--out` (the clone once landed under
/// `<out>/<run>/workspaces/<out>/<run>/...`), and a plain folder the same way.
#[test]
fn git_and_folder_repositories_work_with_relative_output_folders() {
    let case = Case::new();
    let src = fixture(&case, "calc");
    make_git_repository(&src);
    fixture(&case, "plain");
    let turns = "        - content: [ { tool_use: { name: edit_file, input: { path: calc.py, old_string: 'a - b', new_string: 'a + b' } } } ]\n        - content: [ { tool_use: { name: write_file, input: { path: NEWS, content: fixed } } } ]\n";
    let one = job("", "", turns);
    let yaml = format!(
        "{one}  - id: p\n    repo: plain\n    prompt: fix it\n    sim:\n      turns:\n{turns}        - content: [ {{ text: done }} ]\n"
    );
    case.write("job.yaml", &yaml);
    for (n, out) in [None, Some("reports"), Some("./x/../out"), Some("out2/")]
        .into_iter()
        .enumerate()
    {
        let run_id = format!("r{n}");
        let mut args = vec!["run", "job.yaml", "--run-id", &run_id, "--quiet"];
        args.extend(out.iter().flat_map(|o| ["--out", *o]));
        let done = case.agentbatch(&args);
        assert!(
            done.status.success(),
            "{}",
            String::from_utf8_lossy(&done.stderr)
        );
        let dir = case.path(out.unwrap_or("reports")).join(&run_id);
        let rows = read_csv(&dir.join("results.csv"));
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert_eq!(r["outcome"], "pass", "--out {out:?}: {r:?}");
            let patch = std::fs::read_to_string(dir.join(format!("patches/{}.diff", r["task_id"])))
                .unwrap();
            assert!(patch.contains("+++ b/NEWS"), "{patch}");
        }
        assert!(!dir.join("workspaces").exists(), "no stray clone is left");
    }
}

#[tokio::test]
async fn a_git_source_is_cloned_at_its_ref_and_left_untouched() {
    let case = Case::new();
    let src = fixture(&case, "calc");
    let git = |args: &[&str]| git_in(&src, args);
    std::fs::write(src.join("VERSION"), "1\n").unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "v1"]);
    git(&["tag", "v1"]);
    std::fs::write(src.join("VERSION"), "2\n").unwrap();
    git(&["commit", "-qam", "v2"]);
    let before = tree_digest(&src).unwrap();
    let ran = case
        .run(&job(
            "",
            "    ref: v1\n",
            "        - content: [ { tool_use: { name: bash, input: { command: 'cat VERSION' } } } ]\n        - content: [ { tool_use: { name: edit_file, input: { path: calc.py, old_string: 'a - b', new_string: 'a + b' } } } ]\n",
        ))
        .await;
    let results = tool_results(&ran, "t");
    assert!(
        results[0]["content"].as_str().unwrap().contains("\n1\n"),
        "{}",
        results[0]
    );
    assert_eq!(ran.row("t")["outcome"], "pass");
    assert_eq!(
        tree_digest(&src).unwrap(),
        before,
        "the source repository changed"
    );
    let ws = ran.events("t", "workspace");
    assert_eq!(ws[0]["cloned"], true);
}

#[tokio::test]
async fn paths_leaving_the_workspace_are_refused() {
    let case = Case::new();
    fixture(&case, "calc");
    std::os::unix::fs::symlink("/etc", case.path("calc/etc_link")).unwrap();
    let ran = case
        .run(&job(
            "",
            "",
            "        - content:\n            - tool_use: { name: read_file, input: { path: ../../outside.txt } }\n            - tool_use: { name: read_file, input: { path: /etc/hostname } }\n            - tool_use: { name: read_file, input: { path: etc_link/hostname } }\n            - tool_use: { name: bash, input: { command: 'ln -s /etc/passwd sneaky' } }\n            - tool_use: { name: read_file, input: { path: sneaky } }\n            - tool_use: { name: write_file, input: { path: etc_link/evil, content: x } }\n            - tool_use: { name: read_file, input: { path: calc.py } }\n",
        ))
        .await;
    let r = tool_results(&ran, "t");
    let errors: Vec<bool> = r.iter().map(|e| e["is_error"] == true).collect();
    assert_eq!(
        errors,
        vec![true, true, true, false, true, true, false],
        "{r:#?}"
    );
    for i in [0, 1, 2, 4, 5] {
        let c = r[i]["content"].as_str().unwrap();
        assert!(c.contains("outside the workspace"), "{c}");
    }
    assert!(!Path::new("/etc/evil").exists());
}

/// Live (not zombie) processes whose command line is `cmdline`.
fn running(cmdline: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = e.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string));
        if cmd.trim() == cmdline && state.is_some_and(|s| s != "Z" && s != "X") {
            found.push(pid);
        }
    }
    found
}

/// Peak resident memory of a process, in kB, from /proc (None once it is gone).
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn a_timed_out_command_loses_its_whole_group_and_huge_output_is_capped() {
    let case = Case::new();
    fixture(&case, "calc");
    case.write(
        "job.yaml",
        &job(
            "toolsets:\n  coding:\n    tools: [bash, edit_file]\n    bash: { timeout: 1s, max_output: 2000 }\n",
            "    keep_workspaces: always\n",
            "        - content: [ { tool_use: { name: bash, input: { command: '(sleep 3137 & setsid sleep 3138 &); sleep 300' } } } ]\n        - content: [ { tool_use: { name: bash, input: { command: 'head -c 100000000 /dev/zero | tr \"\\\\0\" x' } } } ]\n        - content: [ { tool_use: { name: bash, input: { command: 'echo still here' } } } ]\n",
        ),
    );
    let mut child = bin()
        .args(["run", "job.yaml", "--quiet", "--run-id", "r"])
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut peak = 0;
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(peak_rss_kb(child.id()).unwrap_or(0));
        assert!(start.elapsed() < Duration::from_secs(60), "the run hangs");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(peak > 0);
    assert!(
        peak < 90_000,
        "the runner's peak memory was {peak} kB while a command printed 100 MB"
    );
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows[0]["stop_reason"], "completed", "{:?}", rows[0]);
    let lines = std::fs::read_to_string(case.path("reports/r/transcripts/t.jsonl")).unwrap();
    let results: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "tool_result")
        .collect();
    let timed_out = results[0]["content"].as_str().unwrap();
    assert!(
        timed_out.contains("killed after the 1s timeout"),
        "{timed_out}"
    );
    let huge = results[1]["content"].as_str().unwrap();
    assert!(huge.len() < 2300, "{} bytes kept", huge.len());
    assert!(huge.contains("bytes of output cut"), "{huge}");
    assert!(results[2]["content"]
        .as_str()
        .unwrap()
        .contains("still here"));
    // The background grandchild dies with the group; one that left the group with
    // setsid dies with the command's PID namespace, or is killed by its warden, whose
    // child it became (kill_runner.rs runs both without a PID namespace).
    let level = &rows[0]["sandbox"];
    for sleep in ["sleep 3137", "sleep 3138"] {
        assert!(
            running(sleep).is_empty(),
            "`{sleep}` outlived its command under {level}"
        );
    }
}

#[test]
fn commands_never_see_api_keys_or_the_runners_variables() {
    let case = Case::new();
    fixture(&case, "calc");
    case.write(
        "calc/peek.sh",
        "cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'\ntrue\n",
    );
    case.write(
        "job.yaml",
        &job(
            "providers:\n  anthropic: { api_key_env: MY_PROVIDER_KEY }\n",
            "    env: { TASK_SETTING: visible }\n",
            "        - content: [ { tool_use: { name: bash, input: { command: env } } } ]\n        - content: [ { tool_use: { name: bash, input: { command: 'bash peek.sh' } } } ]\n",
        ),
    );
    let out = bin()
        .args(["run", "job.yaml", "--quiet", "--run-id", "r"])
        .env("ANTHROPIC_API_KEY", "sk-ant-should-never-show")
        .env("MY_PROVIDER_KEY", "sk-mine-should-never-show")
        .env("RUNNER_ONLY_VARIABLE", "runner")
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = std::fs::read_to_string(case.path("reports/r/transcripts/t.jsonl")).unwrap();
    let results: Vec<&str> = t
        .lines()
        .filter(|l| l.contains("\"event\":\"tool_result\""))
        .collect();
    assert_eq!(results.len(), 2);
    // neither in the command's environment nor readable from another process's
    for line in &results {
        for secret in [
            "ANTHROPIC_API_KEY",
            "MY_PROVIDER_KEY",
            "should-never-show",
            "RUNNER_ONLY_VARIABLE",
        ] {
            assert!(
                !line.contains(secret),
                "{secret} reached the command: {line}"
            );
        }
    }
    assert!(
        results[0].contains("TASK_SETTING=visible") && results[0].contains("HOME="),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("HOME=/"),
        "HOME is an absolute path: {}",
        results[0]
    );
}

#[tokio::test]
async fn the_policy_decides_every_call_and_refusals_are_counted() {
    let case = Case::new();
    fixture(&case, "calc");
    let toolsets = "toolsets:\n  coding:\n    tools: [bash, write_file]\n    policy:\n      deny: ['bash(git push*)', 'write_file(.github/**)']\n      allow: ['bash(echo *)', 'bash(ls*)', 'bash(git *)']\n      default: deny\n";
    let ran = case
        .run(&job(
            toolsets,
            "    check: 'true'\n",
            "        - content:\n            - tool_use: { name: bash, input: { command: 'echo ok && ls' } }\n            - tool_use: { name: bash, input: { command: 'echo hi && git push origin main' } }\n            - tool_use: { name: bash, input: { command: 'echo a; rm -rf calc.py' } }\n            - tool_use: { name: write_file, input: { path: .github/workflows/ci.yml, content: x } }\n            - tool_use: { name: write_file, input: { path: notes/ok.txt, content: fine } }\n",
        ))
        .await;
    let r = tool_results(&ran, "t");
    let decisions: Vec<&str> = r.iter().map(|e| e["decision"].as_str().unwrap()).collect();
    assert_eq!(decisions, ["allow", "deny", "deny", "deny", "allow"]);
    assert!(
        r[1]["rule"].as_str().unwrap().contains("bash(git push*)"),
        "deny beats allow: {}",
        r[1]
    );
    assert!(
        r[2]["rule"].as_str().unwrap().contains("rm -rf calc.py")
            && r[2]["rule"].as_str().unwrap().contains("default: deny")
    );
    assert!(r[3]["content"]
        .as_str()
        .unwrap()
        .contains("write_file(.github/**)"));
    assert_eq!(num(&ran.row("t"), "denied_calls"), 3);
    let patch = std::fs::read_to_string(ran.dir.join("patches/t.diff")).unwrap();
    assert!(
        patch.contains("notes/ok.txt") && !patch.contains(".github"),
        "{patch}"
    );
    assert!(
        patch.is_empty() || !patch.contains("deleted file mode"),
        "calc.py was not removed"
    );
}

#[tokio::test]
async fn the_sandbox_confines_writes_and_can_cut_the_network() {
    let case = Case::new();
    fixture(&case, "calc");
    case.write(
        "calc/probe.py",
        "import os, socket\nsocket.create_connection(('127.0.0.1', int(os.environ['SIM_PORT'])), 1)\nprint('reached')\n",
    );
    case.write(
        "calc/local.py",
        "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\nc = socket.create_connection(s.getsockname(), 1)\nprint('loopback ok')\n",
    );
    let marker = format!("/tmp/agentbatch-escape-{}", std::process::id());
    let sim = std::sync::Arc::new(agentbatch::sim::Sim::start_local().await.unwrap());
    let port = sim.addr().port();
    let yaml = job(
        "",
        &format!("    sandbox: {{ network: false }}\n    env: {{ SIM_PORT: '{port}' }}\n    check: 'true'\n    keep_workspaces: always\n"),
        &format!(
            "        - content:\n            - tool_use: {{ name: bash, input: {{ command: 'touch {marker}; echo inside > inside.txt; echo home > $HOME/h.txt' }} }}\n            - tool_use: {{ name: bash, input: {{ command: 'python3 probe.py' }} }}\n            - tool_use: {{ name: bash, input: {{ command: 'python3 local.py && echo x > /dev/shm/ab-$$ && rm /dev/shm/ab-$$' }} }}\n"
        ),
    );
    let path = case.write("job.yaml", &yaml);
    let plan = agentbatch::job::load(&path, &agentbatch::tools::Registry::builtin()).unwrap();
    let mut opts = agentbatch::run::RunOptions::new(case.path("reports"));
    opts.run_id = Some("r".into());
    opts.progress = agentbatch::report::ProgressMode::Quiet;
    opts.sim = Some(sim);
    agentbatch::run::run(plan, opts).await.unwrap();
    let rows = read_csv(&case.path("reports/r/results.csv"));
    let level = rows[0]["sandbox"].clone();
    eprintln!("sandbox level observed on this machine: {level}");
    let ws = PathBuf::from(&rows[0]["workspace"]);
    assert!(
        ws.join("inside.txt").exists(),
        "writing inside the workspace works"
    );
    let t = std::fs::read_to_string(case.path("reports/r/transcripts/t.jsonl")).unwrap();
    let results: Vec<Value> = t
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "tool_result")
        .collect();
    if level.contains("landlock") {
        assert!(
            !Path::new(&marker).exists(),
            "a write outside the workspace succeeded under {level}"
        );
        assert!(
            results[0]["content"]
                .as_str()
                .unwrap()
                .contains("Permission denied"),
            "{}",
            results[0]
        );
    } else {
        assert!(level.contains("no write confinement"), "{level}");
        let _ = std::fs::remove_file(&marker);
    }
    assert!(
        results[2]["content"]
            .as_str()
            .is_some_and(|c| c.contains("loopback ok")),
        "{}",
        results[2]
    );
    assert_eq!(
        results[2]["is_error"], false,
        "a local server on loopback and /dev/shm work in the sandbox: {}",
        results[2]
    );
    if level.contains("no network") {
        assert_eq!(
            results[1]["is_error"], true,
            "the simulator was reachable without network: {}",
            results[1]
        );
    } else {
        assert!(level.contains("could not cut it"), "{level}");
    }
}

#[tokio::test]
async fn a_failing_setup_stops_the_task_before_any_request() {
    let case = Case::new();
    fixture(&case, "calc");
    let ran = case
        .run(&job(
            "",
            "    setup: 'echo installing; exit 3'\n",
            "        - content: [ { text: never } ]\n",
        ))
        .await;
    let row = ran.row("t");
    assert_eq!(row["stop_reason"], "tool_setup_error");
    assert_eq!(row["outcome"], "error");
    assert!(
        row["stop_detail"].contains("exit code 3") && row["stop_detail"].contains("installing"),
        "{row:?}"
    );
    assert!(
        row["check_exit_code"].is_empty(),
        "no check after a failed setup"
    );
    assert!(ran.requests("t").is_empty());
}

#[tokio::test]
async fn the_check_decides_whatever_the_stop_reason_and_workspaces_follow_keep() {
    let case = Case::new();
    fixture(&case, "calc");
    let edit = "        - content: [ { tool_use: { name: edit_file, input: { path: calc.py, old_string: 'a - b', new_string: 'a + b' } } } ]\n";
    let ran = case
        .run(&format!(
            "name: keep\ndefaults:\n  model: claude-sonnet-4-5\n  toolset: coding\n  repo: calc\n  setup: 'echo built > setup-artifact.txt'\n  check: 'python3 -m unittest -q && echo ran > check-artifact.txt'\ntasks:\n  - id: limited\n    prompt: p\n    limits: {{ max_turns: 1 }}\n    keep_workspaces: never\n    sim: {{ repeat_last: true, turns: [ {{ content: [ {{ tool_use: {{ name: edit_file, input: {{ path: calc.py, old_string: 'a - b', new_string: 'a + b' }} }} }} ] }} ] }}\n  - id: kept\n    prompt: p\n    keep_workspaces: always\n    sim:\n      turns:\n{edit}        - content: [ {{ text: done }} ]\n  - id: untouched\n    prompt: p\n    keep_workspaces: never\n    sim: {{ turns: [ {{ content: [ {{ text: no idea }} ] }} ] }}\n"
        ))
        .await;
    let limited = ran.row("limited");
    assert_eq!(
        (limited["stop_reason"].as_str(), limited["outcome"].as_str()),
        ("max_turns", "pass"),
        "{limited:?}"
    );
    assert!(limited["workspace"].is_empty());
    let kept = ran.row("kept");
    assert_eq!(kept["outcome"], "pass");
    assert!(Path::new(&kept["workspace"]).join("calc.py").exists());
    let patch = std::fs::read_to_string(ran.dir.join(&kept["patch"])).unwrap();
    assert!(patch.contains("+    return a + b"), "{patch}");
    assert!(
        !patch.contains("setup-artifact") && !patch.contains("check-artifact"),
        "the patch is the agent's change only: {patch}"
    );
    let untouched = ran.row("untouched");
    assert_eq!(untouched["outcome"], "fail");
    assert!(
        untouched["workspace"].is_empty(),
        "keep_workspaces: never removes even a failure"
    );
    assert!(
        !ran.dir.join("tmp").exists(),
        "private temp folders are removed"
    );
}

#[test]
fn repo_settings_are_checked_before_anything_runs() {
    let case = Case::new();
    fixture(&case, "calc");
    let cases = [
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, toolset: coding }\n", "works on a repository"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc, toolset: nope }\n", "unknown tool set \"nope\""),
        ("name: v\ntoolsets:\n  c: { tools: [bash], policy: { deny: ['write_file(x)'] } }\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc, toolset: c }\n", "which tool set c does not have"),
        ("name: v\ntoolsets:\n  c: { tools: [bash], policy: { deny: ['bash(git push*'] } }\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc, toolset: c }\n", "toolsets.c.policy.deny[0]"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc, env: { ANTHROPIC_API_KEY: x } }\n", "API key variable"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc, ref: main }\n", "needs a git repository"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: missing }\n", "nothing at"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc/calc.py }\n", "not a git bundle"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, check: 'true' }\n", "give the task a `repo`"),
        ("name: v\ndefaults: { model: m, sim: { turns: [ { content: [ { text: x } ] } ] } }\ntasks:\n  - { id: a, prompt: p, repo: calc, tools: [bash], toolset: coding }\n", "either `tools` or `toolset`"),
    ];
    for (yaml, expected) in cases {
        case.write("job.yaml", yaml);
        let out = bin()
            .args(["validate", "job.yaml"])
            .current_dir(case.dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{yaml}\n{err}");
        assert!(err.contains(expected), "expected {expected:?} in:\n{err}");
        assert!(err.contains("job.yaml:"), "{err}");
    }
}

/// The agent wrote `.git/config` with an fsmonitor command, and the check's `git
/// status` once ran it with the network on (the check was not confined like bash). By
/// default the check now has the agent's network rule and git runs no fsmonitor or
/// hook; `check_sandbox: false` brings back the old behaviour, risk included.
#[test]
fn the_check_cannot_escape_the_sandbox_through_what_the_agent_wrote() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let case = Case::new();
    let src = fixture(&case, "calc");
    make_git_repository(&src);
    // One listener per task: whatever connects to it ran inside that task's check.
    let listen = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let reached = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = reached.clone();
        std::thread::spawn(move || {
            for c in listener.incoming() {
                if c.is_ok() {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        (port, reached)
    };
    let script = |port: u16| {
        let hook = format!(
            "python3 -c \\\"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\\\"; touch fsmonitor-ran; false"
        );
        let config = format!(
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tfsmonitor = \"{hook}\"\n"
        );
        format!(
            "      turns:\n        - content: [ {{ tool_use: {{ name: write_file, input: {{ path: .git/config, content: {} }} }} }} ]\n        - content: [ {{ text: done }} ]\n",
            serde_json::to_string(&config).unwrap()
        )
    };
    let (confined_port, confined_reached) = listen();
    let (open_port, open_reached) = listen();
    let tasks = format!(
        "  - id: confined\n    repo: calc\n    prompt: p\n    sandbox: {{ network: false }}\n    keep_workspaces: always\n    sim:\n{}  - id: unconfined\n    repo: calc\n    prompt: p\n    sandbox: {{ network: false }}\n    keep_workspaces: always\n    check_sandbox: false\n    sim:\n{}",
        script(confined_port),
        script(open_port)
    );
    case.write(
        "job.yaml",
        &format!("name: repo\ndefaults:\n  model: claude-sonnet-4-5\n  toolset: coding\n  check: 'git status --porcelain'\ntasks:\n{tasks}"),
    );
    let out = case.agentbatch(&["run", "job.yaml", "--run-id", "r", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = read_csv(&case.path("reports/r/results.csv"));
    let row = |id: &str| rows.iter().find(|r| r["task_id"] == id).unwrap().clone();
    let confined = row("confined");
    assert!(confined["sandbox"].contains("no network"), "{confined:?}");
    assert_eq!(confined["outcome"], "pass", "{confined:?}");
    assert!(
        !Path::new(&confined["workspace"])
            .join("fsmonitor-ran")
            .exists(),
        "the agent's fsmonitor command ran in the check"
    );
    assert_eq!(
        confined_reached.load(Ordering::SeqCst),
        0,
        "the confined check reached the network"
    );
    let unconfined = row("unconfined");
    assert!(
        Path::new(&unconfined["workspace"])
            .join("fsmonitor-ran")
            .exists(),
        "with check_sandbox: false the check runs git as configured (the documented risk)"
    );
    assert!(
        open_reached.load(Ordering::SeqCst) > 0,
        "and with the network"
    );
    let checks: Vec<Value> =
        std::fs::read_to_string(case.path("reports/r/transcripts/confined.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["event"] == "check")
            .collect();
    assert_eq!(
        (checks[0]["sandboxed"].clone(), checks[0]["network"].clone()),
        (Value::Bool(true), Value::Bool(false))
    );
}
