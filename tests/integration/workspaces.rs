//! Copy-on-write workspaces through the binary (which gives itself a mount namespace of
//! its own before any thread starts; the test process cannot, so in-process runs copy):
//! the same patches and outcomes as full copies on the shipped suite, confinement on the
//! merged view, no mount ever visible outside the runner, and a run killed with mounted
//! workspaces resumed cleanly.

use std::path::Path;
use std::time::Duration;

use crate::common::{bin, calc_fixture, read_csv, signal, wait_until, Case};

fn overlay_mounts(pid: &str) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - overlay ") && l.contains("agentbatch-ws-test"))
        .count()
}

#[test]
fn overlay_and_copied_workspaces_give_the_same_patches_and_outcomes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let job = std::fs::read_to_string(root.join("jobs/repo-fix.yaml")).unwrap();
    let case = Case::new();
    // The suite's relative paths (fixtures, sim scripts) resolve from the job's folder.
    let copy_job = root.join(format!("jobs/.repo-fix-copy-{}.yaml", std::process::id()));
    std::fs::write(
        &copy_job,
        job.replace(
            "  keep_workspaces: on_failure\n",
            "  keep_workspaces: on_failure\n  workspaces: copy\n",
        ),
    )
    .unwrap();
    let over_job = root.join(format!(
        "jobs/.repo-fix-overlay-{}.yaml",
        std::process::id()
    ));
    std::fs::write(
        &over_job,
        job.replace(
            "  keep_workspaces: on_failure\n",
            "  keep_workspaces: on_failure\n  workspaces: overlay\n",
        ),
    )
    .unwrap();
    let run = |job: &Path, id: &str| {
        case.agentbatch(&["run", job.to_str().unwrap(), "--run-id", id, "--quiet"])
    };
    let (a, b) = (run(&over_job, "overlay"), run(&copy_job, "copy"));
    let _ = std::fs::remove_file(&copy_job);
    let _ = std::fs::remove_file(&over_job);
    assert!(
        a.status.success(),
        "overlay workspaces need root and overlayfs (the test command runs as root): {}",
        String::from_utf8_lossy(&a.stderr)
    );
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let rows = |id: &str| read_csv(&case.path(&format!("reports/{id}/results.csv")));
    let (over, copy) = (rows("overlay"), rows("copy"));
    assert_eq!(over.len(), 6);
    for r in &over {
        let c = copy.iter().find(|c| c["task_id"] == r["task_id"]).unwrap();
        let id = &r["task_id"];
        assert_eq!(r["outcome"], c["outcome"], "{id}");
        assert_eq!(r["check_exit_code"], c["check_exit_code"], "{id}");
        assert!(r["sandbox"].ends_with("; overlay workspace"), "{r:?}");
        assert!(!c["sandbox"].contains("overlay"), "{c:?}");
        let patch = |run: &str| {
            std::fs::read(case.path(&format!("reports/{run}/patches/{id}.diff"))).unwrap()
        };
        assert_eq!(patch("overlay"), patch("copy"), "{id}: the patches differ");
        if r["outcome"] == "fail" {
            // A kept layer is what the task wrote, not a copy of the repository.
            let upper = Path::new(&r["workspace"]);
            assert!(upper.ends_with("upper") && upper.is_dir(), "{r:?}");
        }
    }
    // One pristine checkout per repository, not one copy per task.
    let pristine = std::fs::read_dir(case.path("reports/overlay/pristine"))
        .unwrap()
        .count();
    assert_eq!(pristine, 6);
}

#[test]
fn a_run_killed_with_mounted_workspaces_leaves_no_mount_and_resumes() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    // The folder name marks this test's mounts in mountinfo.
    let out = "agentbatch-ws-test-reports";
    case.write(
        "job.yaml",
        "name: k\nproviders:\n  s: { protocol: anthropic, simulator: true }\ntoolsets:\n  c: { tools: [bash, write_file], bash: { timeout: 5s } }\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  toolset: c\n  repo: calc\n  workspaces: overlay\n  check: python3 -m unittest -q\n  keep_workspaces: never\ntasks:\n  - id: slow\n    prompt: p\n    sim:\n      turns:\n        - content: [ { tool_use: { name: write_file, input: { path: calc.py, content: \"def add(a, b):\\n    return a + b\\n\" } } } ]\n        - content: [ { tool_use: { name: bash, input: { command: 'echo x > ../../../../escape.txt; sleep 30' } } } ]\n        - content: [ { text: done } ]\n",
    );
    let mut child = bin()
        .args(["run", "job.yaml", "--run-id", "r", "--quiet", "--out", out])
        .current_dir(case.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("binary runs");
    let pid = child.id().to_string();
    let transcript = case.path(&format!("{out}/r/transcripts/slow.jsonl"));
    wait_until("the slow command", Duration::from_secs(60), || {
        std::fs::read_to_string(&transcript).is_ok_and(|t| t.contains("sleep 30"))
    });
    assert_eq!(overlay_mounts(&pid), 1, "the runner sees its workspace");
    assert_eq!(overlay_mounts("self"), 0, "no one else sees it");
    signal(child.id(), "KILL");
    let _ = child.wait();
    assert_eq!(overlay_mounts("self"), 0);
    assert!(
        !case.path("escape.txt").exists(),
        "the merged view is confined"
    );
    // Only folders are left; the resume removes them and runs the task again.
    assert!(case.path(&format!("{out}/r/workspaces/slow")).is_dir());
    assert!(case.path(&format!("{out}/r/pristine/0/tree")).is_dir());
    let again = case.agentbatch(&[
        "run",
        "job.yaml",
        "--resume",
        &format!("{out}/r"),
        "--quiet",
    ]);
    assert!(again.status.code().is_some(), "{again:?}");
    let rows = read_csv(&case.path(&format!("{out}/r/results.csv")));
    let row = rows.iter().find(|r| r["task_id"] == "slow").unwrap();
    assert_eq!(row["outcome"], "pass", "{row:?}");
    assert!(!case.path(&format!("{out}/r/workspaces/slow")).exists());
    // The killed attempt's pristine checkout went with the resume, and the resumed
    // run's at its end.
    assert!(!case.path(&format!("{out}/r/pristine")).exists());
    let patch = std::fs::read_to_string(case.path(&format!("{out}/r/patches/slow.diff"))).unwrap();
    assert!(patch.contains("+    return a + b"), "{patch}");
    assert_eq!(overlay_mounts("self"), 0);
}

#[test]
fn overlay_is_refused_where_the_process_cannot_mount_one() {
    // This test process has no mount namespace of its own: `overlay` is an error that
    // says why, `auto` falls back to a full copy.
    let case = Case::new();
    calc_fixture(&case, "calc");
    let yaml = "name: v\ndefaults:\n  model: claude-sonnet-4-5\n  repo: calc\n  sim: { turns: [ { content: [ { text: hi } ] } ] }\ntasks:\n  - { id: a, prompt: p, workspaces: overlay }\n";
    let path = case.write("job.yaml", yaml);
    let err = agentbatch::job::load(&path, &agentbatch::tools::Registry::builtin())
        .map(|_| ())
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("tasks[0].workspaces") && err.contains("root"),
        "{err}"
    );
    let auto = case.write("auto.yaml", &yaml.replace(", workspaces: overlay", ""));
    let plan = agentbatch::job::load(&auto, &agentbatch::tools::Registry::builtin()).unwrap();
    assert!(!plan.tasks[0].repo.as_ref().unwrap().overlay);
    // The binary can, and validate says which method each task gets.
    let out = case.agentbatch(&["validate", "job.yaml"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("workspaces overlay"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every kind of change an agent can make, through bash, in both kinds of workspace:
/// the patches must be the same bytes.
#[test]
fn every_kind_of_change_patches_the_same_in_a_layer_as_in_a_copy() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    case.write("calc/pkg/a.py", "a = 1\n");
    case.write("calc/pkg/sub/b.py", "b = 2\n");
    case.write("calc/gone/c.py", "c = 3\n");
    case.write("calc/redo/d.py", "d = 4\n");
    case.write("calc/redo/e.py", "e = 5\n");
    case.write("calc/run.sh", "echo run\n");
    let commands = [
        "rm -rf gone",
        "rm -rf redo && mkdir redo && echo new > redo/d.py",
        "echo tmp > scratch.txt && rm scratch.txt",
        "mkdir -p __pycache__ && echo x > __pycache__/ignored.pyc",
        "chmod +x run.sh",
        "ln -s calc.py link.py",
        "echo moved > pkg/sub/b2.py && rm pkg/sub/b.py",
        "printf 'weird' > \"$(printf 'na\\\\351me.txt')\"",
        "rm built.txt && echo kept > made-by-setup.txt",
        "mkdir -p deep/er/est && echo z > deep/er/est/z.txt",
        "rm pkg/a.py && mkdir pkg/a.py && echo inner > pkg/a.py/x",
    ];
    let turns: String = commands
        .iter()
        .map(|c| format!("        - content: [ {{ tool_use: {{ name: bash, input: {{ command: {} }} }} }} ]\n", serde_json::to_string(c).unwrap()))
        .collect();
    for method in ["overlay", "copy"] {
        case.write(
            &format!("{method}.yaml"),
            &format!("name: {method}\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  repo: calc\n  workspaces: {method}\n  setup: 'echo b > built.txt && echo s > made-by-setup.txt'\n  keep_workspaces: never\n  limits: {{ max_turns: 20 }}\ntasks:\n  - id: t\n    prompt: p\n    sim:\n      turns:\n{turns}        - content: [ {{ text: done }} ]\n"),
        );
        let out = case.agentbatch(&[
            "run",
            &format!("{method}.yaml"),
            "--run-id",
            method,
            "--quiet",
        ]);
        assert!(
            out.status.success(),
            "{method}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t =
            std::fs::read_to_string(case.path(&format!("reports/{method}/transcripts/t.jsonl")))
                .unwrap();
        assert_eq!(t.matches("\"is_error\":true").count(), 0, "{method}: {t}");
    }
    let patch = |m: &str| {
        std::fs::read(case.path(&format!("reports/{m}/patches/t.diff"))).unwrap_or_else(|e| {
            let t = std::fs::read_to_string(case.path(&format!("reports/{m}/transcripts/t.jsonl")))
                .unwrap_or_default();
            let why: Vec<&str> = t.lines().filter(|l| l.contains("patch_error")).collect();
            panic!("{m}: {e}: {why:?}")
        })
    };
    let (over, copy) = (patch("overlay"), patch("copy"));
    let text = String::from_utf8_lossy(&copy);
    for expected in [
        "deleted file mode",
        "gone/c.py",
        "redo/e.py",
        "new mode 100755",
        "link.py",
        "b2.py",
        "deep/er/est/z.txt",
        "made-by-setup.txt",
        "built.txt",
        "pkg/a.py/x",
    ] {
        assert!(text.contains(expected), "{expected} in {text}");
    }
    assert!(
        !text.contains("scratch.txt") && !text.contains("ignored.pyc"),
        "{text}"
    );
    assert_eq!(
        String::from_utf8_lossy(&over),
        text,
        "the layer's patch differs from the copy's"
    );
}
