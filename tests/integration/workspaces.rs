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

/// Fails with the first line where two patches differ.
fn same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let (got, want) = (String::from_utf8_lossy(got), String::from_utf8_lossy(want));
    let (g, w): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    let at = g
        .iter()
        .zip(&w)
        .position(|(a, b)| a != b)
        .unwrap_or(g.len().min(w.len()));
    panic!(
        "{what}: the patches differ at line {}: {:?} against {:?} (the copy's)\n{want}",
        at + 1,
        g.get(at),
        w.get(at)
    );
}

/// What a hostile agent does to a git repository and to a plain folder, in a layer and
/// in a copy: the same patch bytes, and the layer's found from its upper folder alone,
/// except where only the whole tree can say (a changed .gitignore uncovering a file
/// nobody wrote, a repository made inside the workspace).
#[test]
fn hostile_changes_patch_the_same_in_a_layer_as_in_a_copy() {
    let case = Case::new();
    for src in ["gitsrc", "plainsrc"] {
        calc_fixture(&case, src);
        for (path, text) in [
            (".gitignore", "__pycache__/\n*.log\nbuild/\n"),
            (".gitattributes", "*.txt text=auto\n"),
            ("keep.log", "tracked though ignored\n"),
            ("old.log", "ignored, never written by the task\n"),
            ("pkg/a.py", "a = 1\n"),
            ("pkg/sub/b.py", "b = 2\n"),
            ("gone/c.py", "c = 3\n"),
            ("redo/d.py", "d = 4\n"),
            ("redo/e.py", "e = 5\n"),
            ("run.sh", "echo run\n"),
            ("dirfile/x.py", "x = 1\n"),
            ("docs/deep/er/note.md", "note\n"),
            ("file2dir.py", "f = 1\n"),
        ] {
            case.write(&format!("{src}/{path}"), text);
        }
    }
    let git = case.path("gitsrc");
    std::fs::remove_file(git.join("old.log")).unwrap();
    crate::common::git_in(&git, &["init", "-q", "-b", "main"]);
    crate::common::git_in(&git, &["add", "-A"]);
    crate::common::git_in(&git, &["add", "-f", "keep.log"]);
    crate::common::git_in(&git, &["commit", "-qm", "v1"]);
    let edits = [
        "echo more >> keep.log",
        "mkdir -p build && echo o > build/out.o",
        "printf 'a\\r\\nb\\r\\n' > crlf.txt",
        "echo s > 'sp ace.txt' && echo c > 'co:lon.txt' && echo st > 'st*r.txt' && echo d > ./-dash.txt",
        "touch empty.txt calc.py && cp calc.py \"$TMPDIR/c\" && cat \"$TMPDIR/c\" > calc.py",
        "rm -rf dirfile && echo nowfile > dirfile",
        "ln -s pkg linkdir && ln -s nowhere dangling && ln test_calc.py hard.py",
        "mkdir -p q/r && echo 1 > q/r/s && rm -rf q",
        "rm pkg/sub/b.py",
        "rm -rf gone && rm -rf redo && mkdir redo && echo new > redo/d.py",
        "chmod +x run.sh",
        "echo z > docs/deep/er/new.md && rm docs/deep/er/note.md",
        "printf '\\000\\001bin' > bin.dat",
        "mv pkg/a.py pkg/a2.py",
        "rm file2dir.py && mkdir file2dir.py && echo inner > file2dir.py/x",
        "echo tmp > scratch.txt && rm scratch.txt",
        "printf 'weird' > \"$(printf 'na\\351me.txt')\"",
        "rm built.txt && rm -rf setupdir && echo kept > made-by-setup.txt",
    ];
    let whole = [
        "printf '__pycache__/\\n' > .gitignore",
        "mkdir inner && cd inner && git init -q && echo i > i.txt && git add . && GIT_AUTHOR_DATE=2020-01-01T00:00:00Z GIT_COMMITTER_DATE=2020-01-01T00:00:00Z git -c user.name=a -c user.email=a@a commit -qm i",
    ];
    let script = |cmds: &[&str]| -> String {
        let turns: String = cmds
            .iter()
            .map(|c| format!("        - content: [ {{ tool_use: {{ name: bash, input: {{ command: {} }} }} }} ]\n", serde_json::to_string(c).unwrap()))
            .collect();
        format!("    sim:\n      turns:\n{turns}        - content: [ {{ text: done }} ]\n")
    };
    let mut tasks = String::new();
    for src in ["gitsrc", "plainsrc"] {
        for (name, cmds) in [("edits", &edits[..]), ("whole", &whole[..])] {
            tasks.push_str(&format!(
                "  - id: {src}-{name}\n    prompt: p\n    repo: {src}\n{}",
                script(cmds)
            ));
        }
    }
    for method in ["overlay", "copy"] {
        case.write(
            &format!("{method}.yaml"),
            &format!("name: {method}\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  workspaces: {method}\n  setup: 'echo b > built.txt && echo s > made-by-setup.txt && mkdir -p setupdir && echo q > setupdir/q.txt'\n  check: 'test -f calc.py'\n  keep_workspaces: never\n  limits: {{ max_turns: 30 }}\ntasks:\n{tasks}"),
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
    }
    let read = |run: &str, task: &str| {
        let t =
            std::fs::read_to_string(case.path(&format!("reports/{run}/transcripts/{task}.jsonl")))
                .unwrap();
        assert_eq!(
            t.matches("\"is_error\":true").count(),
            0,
            "{run} {task}: {t}"
        );
        let staged = t
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["event"] == "patch")
            .map(|e| e["staged"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("{run} {task}: no patch event: {t}"));
        let patch = std::fs::read(case.path(&format!("reports/{run}/patches/{task}.diff")))
            .unwrap_or_default();
        (patch, staged)
    };
    for src in ["gitsrc", "plainsrc"] {
        let (copy_bytes, how) = read("copy", &format!("{src}-edits"));
        let copy = String::from_utf8_lossy(&copy_bytes);
        assert_eq!(how, "index");
        let at = copy.find("me.txt").unwrap_or(0);
        assert!(
            copy_bytes.windows(6).any(|w| w == b"na\xe9me."),
            "{:?}",
            &copy_bytes[at.saturating_sub(8)..at + 6]
        );
        for expected in [
            "crlf.txt",
            "b/sp ace.txt",
            "co:lon.txt",
            "st*r.txt",
            "-dash.txt",
            "empty.txt",
            "dirfile/x.py",
            "b/dirfile",
            "linkdir",
            "dangling",
            "hard.py",
            "pkg/sub/b.py",
            "gone/c.py",
            "redo/e.py",
            "new mode 100755",
            "docs/deep/er/new.md",
            "docs/deep/er/note.md",
            "GIT binary patch",
            "rename from pkg/a.py",
            "made-by-setup.txt",
            "built.txt",
            "setupdir/q.txt",
            "file2dir.py/x",
            "me.txt",
        ] {
            assert!(copy.contains(expected), "{src}: {expected} in {copy}");
        }
        for absent in [
            "build/out.o",
            "q/r/s",
            "a/calc.py",
            "old.log",
            "a\r\n",
            "scratch.txt",
        ] {
            assert!(!copy.contains(absent), "{src}: {absent} in {copy}");
        }
        // A file git tracks though .gitignore matches it stays in the patch.
        assert_eq!(copy.contains("keep.log"), src == "gitsrc", "{copy}");
        let (layer, how) = read("overlay", &format!("{src}-edits"));
        assert_eq!(how, "layer", "{src}: found from the upper folder alone");
        same(&layer, &copy_bytes, src);

        let (copy_bytes, how) = read("copy", &format!("{src}-whole"));
        let copy = String::from_utf8_lossy(&copy_bytes);
        assert_eq!(how, "index");
        assert!(copy.contains("Subproject commit"), "{src}: {copy}");
        // Only the plain folder's copy holds the ignored file nobody wrote.
        assert_eq!(copy.contains("old.log"), src == "plainsrc", "{copy}");
        let (layer, how) = read("overlay", &format!("{src}-whole"));
        assert_eq!(how, "whole tree");
        same(&layer, &copy_bytes, src);
    }
}
