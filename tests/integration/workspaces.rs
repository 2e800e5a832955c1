//! Copy-on-write workspaces through the binary (which gives itself a mount namespace of
//! its own before any thread starts; the test process cannot, so in-process runs copy):
//! the same patches and outcomes as full copies on the shipped suite, confinement on the
//! merged view, no mount ever visible outside the runner, and a run killed with mounted
//! workspaces resumed cleanly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{bin, calc_fixture, read_csv, signal, wait_until, Case};

fn overlay_mounts(pid: &str) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - overlay ") && l.contains("agentbatch-ws-test"))
        .count()
}

/// The shipped repo-fix suite (three git repositories, one at a tag, three plain
/// folders; real failing tests) with every method: the same outcomes, check exit codes
/// and patch bytes as full copies.
#[test]
fn every_workspace_method_gives_the_suite_the_same_patches_and_outcomes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let case = Case::new();
    // The suite's relative paths (fixtures, sim scripts) resolve from the job's folder,
    // copied where an unprivileged user can read it.
    copy_dir(&root.join("jobs"), &case.path("jobs"));
    let job = std::fs::read_to_string(root.join("jobs/repo-fix.yaml")).unwrap();
    let modes = Mode::every_method();
    for m in &modes {
        case.write(
            &format!("jobs/{}.yaml", m.name),
            &job.replace(
                "  keep_workspaces: on_failure\n",
                &format!(
                    "  keep_workspaces: on_failure\n  workspaces: {}\n",
                    m.workspaces
                ),
            ),
        );
        m.run_job(&case, &format!("jobs/{}.yaml", m.name));
    }
    let rows = |m: &Mode| read_csv(&m.run_dir(&case).join("results.csv"));
    let copy = rows(&modes[0]);
    assert_eq!(copy.len(), 6);
    assert_eq!(copy.iter().filter(|r| r["outcome"] == "pass").count(), 4);
    for m in &modes[1..] {
        let got = rows(m);
        assert_eq!(got.len(), 6, "{}", m.name);
        for r in &got {
            let c = copy.iter().find(|c| c["task_id"] == r["task_id"]).unwrap();
            let id = &r["task_id"];
            assert_eq!(r["outcome"], c["outcome"], "{} {id}", m.name);
            assert_eq!(
                r["check_exit_code"], c["check_exit_code"],
                "{} {id}",
                m.name
            );
            assert!(
                r["sandbox"].ends_with(&format!("; {} workspace", m.made)),
                "{r:?}"
            );
            let patch =
                |dir: PathBuf| std::fs::read(dir.join(format!("patches/{id}.diff"))).unwrap();
            same(
                &patch(m.run_dir(&case)),
                &patch(modes[0].run_dir(&case)),
                &format!("{} {id}", m.name),
            );
            if r["outcome"] == "fail" && m.made == "overlay" {
                // A kept layer is what the task wrote, not a copy of the repository.
                let upper = Path::new(&r["workspace"]);
                assert!(upper.ends_with("upper") && upper.is_dir(), "{r:?}");
            }
        }
    }
    // One pristine checkout per repository, not one copy per task; kept for the failed
    // tasks' workspaces.
    let pristine = std::fs::read_dir(case.path("reports/overlay/pristine"))
        .unwrap()
        .count();
    assert_eq!(pristine, 6);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
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
    assert_eq!(
        plan.tasks[0].repo.as_ref().unwrap().workspaces,
        agentbatch::job::WorkspaceMethod::Auto,
        "no overlay here: a reflinked or full copy, decided when the run starts"
    );
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
pub(crate) fn same(got: &[u8], want: &[u8], what: &str) {
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
            (".gitignore", "__pycache__/\n*.log\nbuild/\nfoo\n"),
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
            ("win.dat", "w1\r\nw2\r\n"),
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
        "mkdir -p 'new dir/a b' && echo n > 'new dir/a b/f.txt' && echo q > '\"quoted.txt' && echo b > 'back\\slash.txt' && echo t > 'trail '",
        // Pathspec magic in a name: git add takes these names as they are.
        "echo x > ':foo' && echo y > ':!bang.txt'",
        // What setup made, replaced by a link: nothing below a link is the repository's.
        "rm -rf nm/lib && ln -s ../pkg nm/lib",
        // An ordinary attribute named like an overlay mark (refused where it is one).
        "python3 -c 'import os; os.setxattr(\"docs\", \"user.overlay.opaque\", b\"y\")' || true",
        "printf 'x\\r\\n' >> win.dat",
        "rm built.txt && rm -rf setupdir && echo kept > made-by-setup.txt",
    ];
    let whole = [
        // A file setup made, ignored from now on: still tracked.
        "printf '__pycache__/\\nbuilt.txt\\n' > .gitignore",
        // Newly normalised: a file stored with CRLF stays so.
        "printf '* text=auto\\n' >> .gitattributes && printf 'c\\r\\n' >> win.dat",
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
    let modes = Mode::every_method();
    for m in &modes {
        case.write(
            &format!("{}.yaml", m.name),
            &format!("name: {}\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  workspaces: {}\n  setup: 'echo b > built.txt && echo s > made-by-setup.txt && mkdir -p setupdir nm/lib && echo q > setupdir/q.txt && echo made by setup for nm > nm/lib/index.js'\n  check: 'test -f calc.py'\n  keep_workspaces: never\n  limits: {{ max_turns: 30 }}\ntasks:\n{tasks}", m.name, m.workspaces),
        );
        m.run(&case);
    }
    let read = |mode: &str, task: &str| {
        let m = modes.iter().find(|m| m.name == mode).unwrap();
        let dir = m.run_dir(&case);
        let t = std::fs::read_to_string(dir.join(format!("transcripts/{task}.jsonl"))).unwrap();
        assert_eq!(
            t.matches("\"is_error\":true").count(),
            0,
            "{mode} {task}: {t}"
        );
        let staged = t
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["event"] == "patch")
            .map(|e| e["staged"].as_str().unwrap_or_default().to_string())
            .unwrap_or_else(|| panic!("{mode} {task}: no patch event: {t}"));
        let row = read_csv(&dir.join("results.csv"))
            .into_iter()
            .find(|r| r["task_id"] == task)
            .unwrap();
        if m.unprivileged && nix::unistd::geteuid().is_root() {
            use std::os::unix::fs::MetadataExt;
            let owner = std::fs::metadata(dir.join("results.csv")).unwrap().uid();
            assert_eq!(owner, 65534, "{mode}: the run was nobody's");
        }
        let made = format!("; {} workspace", m.made);
        assert!(row["sandbox"].ends_with(&made), "{mode}: {row:?}");
        assert_eq!(row["outcome"], "pass", "{mode}: {row:?}");
        let patch = std::fs::read(dir.join(format!("patches/{task}.diff"))).unwrap_or_default();
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
            "new dir/a b/f.txt",
            "quoted.txt",
            "slash.txt",
            "trail ",
            "b/:foo",
            ":!bang.txt",
            "nm/lib/index.js",
            "new file mode 120000",
            "win.dat",
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
        for (mode, staged) in [
            ("overlay", "layer"),
            ("unprivileged", "layer"),
            ("reflink", "index"),
            ("auto", "index"),
        ] {
            let (patch, how) = read(mode, &format!("{src}-edits"));
            assert_eq!(
                how, staged,
                "{mode} {src}: found from the upper folder alone"
            );
            same(&patch, &copy_bytes, &format!("{mode} {src}"));
        }

        let (copy_bytes, how) = read("copy", &format!("{src}-whole"));
        let copy = String::from_utf8_lossy(&copy_bytes);
        assert_eq!(how, "index");
        assert!(copy.contains("Subproject commit"), "{src}: {copy}");
        // Setup's file stays tracked though now ignored; a CRLF file stays CRLF.
        assert!(
            !copy.contains("diff --git a/built.txt") && copy.contains("+c\r\n"),
            "{src}: {copy}"
        );
        // Only the plain folder's copy holds the ignored file nobody wrote.
        assert_eq!(copy.contains("old.log"), src == "plainsrc", "{copy}");
        for (mode, staged) in [
            ("overlay", "whole tree"),
            ("unprivileged", "whole tree"),
            ("reflink", "index"),
            ("auto", "index"),
        ] {
            let (patch, how) = read(mode, &format!("{src}-whole"));
            assert_eq!(how, staged, "{mode} {src}");
            same(&patch, &copy_bytes, &format!("{mode} {src}"));
        }
    }
}

/// A folder on a filesystem with reflinks, for the runs that need one.
pub(crate) fn reflink_dir() -> PathBuf {
    let dir = std::env::var_os("AGENTBATCH_TEST_REFLINK_DIR").map(PathBuf::from).expect(
        "AGENTBATCH_TEST_REFLINK_DIR is not set: run the tests through tests/run.sh, which mounts a small XFS image with reflinks for them, or point it at a folder on btrfs or XFS (reflink=1)",
    );
    let dir = dir.join(
        format!("t{}-{:?}", std::process::id(), std::thread::current().id())
            .replace(['(', ')'], ""),
    );
    std::fs::create_dir_all(&dir).unwrap();
    assert!(
        agentbatch::tools::copies::reflinks_in(&dir),
        "{} has no reflinks: AGENTBATCH_TEST_REFLINK_DIR must be on btrfs or XFS (reflink=1)",
        dir.display()
    );
    dir
}

/// One way of running a job in these tests.
pub(crate) struct Mode {
    pub name: &'static str,
    pub workspaces: &'static str,
    /// What the `sandbox` column says the workspaces were.
    pub made: &'static str,
    /// Run as an unprivileged user (nobody, when the tests run as root).
    pub unprivileged: bool,
    /// Run with AGENTBATCH_MOUNT_NAMESPACE=off.
    pub no_namespace: bool,
    /// `--out`, else the case's reports/.
    pub out: Option<PathBuf>,
}

impl Mode {
    /// Every workspace method this machine has, each run writing its reports where it
    /// must: a reflinked copy needs the run folder on btrfs or XFS (tests/run.sh mounts
    /// one); with no overlay in this process, auto takes the reflinks the run folder has.
    pub fn every_method() -> [Mode; 5] {
        let xfs = reflink_dir();
        [
            Mode::new("copy", "copy"),
            Mode::new("overlay", "overlay"),
            Mode {
                unprivileged: true,
                ..Mode::new("unprivileged", "overlay")
            },
            Mode {
                out: Some(xfs.join("reflink")),
                ..Mode::new("reflink", "reflink")
            },
            Mode {
                out: Some(xfs.join("auto")),
                no_namespace: true,
                ..Mode::new("auto", "auto")
            },
        ]
    }

    pub fn new(name: &'static str, workspaces: &'static str) -> Mode {
        Mode {
            name,
            workspaces,
            made: match workspaces {
                "auto" => "reflink",
                w => w,
            },
            unprivileged: false,
            no_namespace: false,
            out: None,
        }
    }

    pub fn run_dir(&self, case: &Case) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| case.path("reports"))
            .join(self.name)
    }

    pub fn run(&self, case: &Case) {
        self.run_job(case, &format!("{}.yaml", self.name));
    }

    /// Runs `job` (relative to the case's folder) as this mode says.
    pub fn run_job(&self, case: &Case, job: &str) {
        let mut cmd = if self.unprivileged && nix::unistd::geteuid().is_root() {
            // The case's folder must be nobody's to write in, as a user's own is.
            for dir in walk_dirs(case.dir.path()) {
                std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                    .unwrap();
            }
            // The binary, where nobody can reach it (a checkout under /root is not).
            let exe = case.path("agentbatch");
            if !exe.exists() {
                let built = env!("CARGO_BIN_EXE_agentbatch");
                std::fs::hard_link(built, &exe)
                    .or_else(|_| std::fs::copy(built, &exe).map(|_| ()))
                    .unwrap();
            }
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(&exe);
            c
        } else {
            crate::common::bin()
        };
        cmd.args(["run", job, "--run-id", self.name, "--quiet"])
            .current_dir(case.dir.path());
        if let Some(out) = &self.out {
            cmd.arg("--out").arg(out);
        }
        if self.no_namespace {
            cmd.env("AGENTBATCH_MOUNT_NAMESPACE", "off");
        }
        let out = cmd.output().expect("binary runs");
        assert!(
            out.status.success(),
            "{}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

#[test]
fn reflink_is_refused_by_validate_where_the_run_folder_has_none_and_auto_copies() {
    let case = Case::new();
    assert!(
        !agentbatch::tools::copies::reflinks_in(case.dir.path()),
        "this test needs the temp folder on a filesystem without reflinks (ext4, tmpfs)"
    );
    calc_fixture(&case, "calc");
    case.write(
        "job.yaml",
        "name: r\nproviders:\n  s: { protocol: anthropic, simulator: true }\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [write_file]\n  repo: calc\n  check: python3 -m unittest -q\n  sim: { turns: [ { content: [ { tool_use: { name: write_file, input: { path: calc.py, content: \"def add(a, b):\\n    return a + b\\n\" } } } ] }, { content: [ { text: done } ] } ] }\ntasks:\n  - { id: asked, prompt: p, workspaces: reflink }\n  - { id: auto, prompt: p }\n",
    );
    let run = |args: &[&str]| {
        bin()
            .args(args)
            .env("AGENTBATCH_MOUNT_NAMESPACE", "off")
            .current_dir(case.dir.path())
            .output()
            .unwrap()
    };
    // validate probes the folder the run would go to (--out, as `run` takes it) and
    // names the field; `run` refuses the same way before anything runs.
    let v = run(&["validate", "job.yaml"]);
    let err = String::from_utf8_lossy(&v.stderr);
    assert_eq!(v.status.code(), Some(2), "{err}");
    assert!(
        err.contains("tasks[0].workspaces")
            && err.contains("reflink")
            && err.contains("btrfs")
            && err.contains("--out")
            && err.contains("auto"),
        "{err}"
    );
    assert!(!err.contains("tasks[1]"), "auto copies: {err}");
    let xfs = reflink_dir();
    let on_xfs = run(&["validate", "job.yaml", "--out", xfs.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&on_xfs.stdout);
    assert!(
        on_xfs.status.success()
            && text.contains("workspaces reflink (")
            && text.contains("else copy (no overlay"),
        "{text}{}",
        String::from_utf8_lossy(&on_xfs.stderr)
    );
    let out = run(&["run", "job.yaml", "--run-id", "r", "--quiet"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tasks[0].workspaces"),
        "{out:?}"
    );
    assert!(!case.path("reports/r").exists(), "nothing ran");
    case.write(
        "auto.yaml",
        &std::fs::read_to_string(case.path("job.yaml"))
            .unwrap()
            .replace("  - { id: asked, prompt: p, workspaces: reflink }\n", ""),
    );
    let out = run(&["run", "auto.yaml", "--run-id", "r", "--quiet"]);
    assert!(out.status.success(), "{out:?}");
    let rows = read_csv(&case.path("reports/r/results.csv"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "pass", "{rows:?}");
    assert!(rows[0]["sandbox"].ends_with("; copy workspace"), "{rows:?}");
}

/// A copy's repository borrows the pristine's objects, so a kept copy keeps its
/// pristine; with --pristine-cache a second run makes no pristine at all, and a layer
/// goes over the cached one.
#[test]
fn kept_copies_keep_their_pristine_and_a_cache_serves_the_next_run() {
    let case = Case::new();
    let repo = calc_fixture(&case, "calc");
    crate::common::make_git_repository(&repo);
    let job = |method: &str| {
        format!("name: c\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  repo: calc\n  workspaces: {method}\n  keep_workspaces: always\ntasks:\n  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ {{ tool_use: {{ name: bash, input: {{ command: 'git cat-file -p HEAD:calc.py && echo more >> calc.py && git -c user.name=a -c user.email=a@a commit -qam more && git log --oneline | wc -l' }} }} }} ]\n        - content: [ {{ text: done }} ]\n")
    };
    case.write("copy.yaml", &job("copy"));
    case.write("overlay.yaml", &job("overlay"));
    let run = |job: &str, id: &str, cache: bool| {
        let mut args = vec!["run", job, "--run-id", id, "--quiet"];
        if cache {
            args.extend(["--pristine-cache", "cache"]);
        }
        let out = case.agentbatch(&args);
        assert!(
            out.status.success(),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = std::fs::read_to_string(case.path(&format!("reports/{id}/transcripts/t.jsonl")))
            .unwrap();
        assert!(
            t.contains("return a - b") && t.contains("\\n2\\n"),
            "{id}: the agent's git reads and writes its repository: {t}"
        );
        let ws = t
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["event"] == "workspace")
            .unwrap();
        let row = read_csv(&case.path(&format!("reports/{id}/results.csv")))[0].clone();
        (ws, row)
    };
    let git_log = |dir: &Path| {
        let out = std::process::Command::new("git")
            .args(["log", "--oneline"])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).lines().count()
    };
    // Uncached: the kept copy's repository still reads after the run.
    let (_, row) = run("copy.yaml", "plain", false);
    assert!(case.path("reports/plain/pristine").is_dir(), "kept: needed");
    assert_eq!(git_log(Path::new(&row["workspace"])), 2);
    // Cached: the first run makes the entry, the second finds it.
    let (first, _) = run("copy.yaml", "first", true);
    let entries: Vec<_> = std::fs::read_dir(case.path("cache")).unwrap().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let cached = case.path("cache").canonicalize().unwrap();
    assert!(first["pristine"]
        .as_str()
        .unwrap()
        .starts_with(cached.to_str().unwrap()));
    let (second, row) = run("overlay.yaml", "second", true);
    assert_eq!(second["pristine"], first["pristine"]);
    assert_eq!(second["method"], "overlay");
    assert!(
        !case.path("reports/second/pristine").exists(),
        "no pristine made"
    );
    assert!(
        !case.path("reports/first/pristine").exists(),
        "no pristine made"
    );
    assert_eq!(std::fs::read_dir(case.path("cache")).unwrap().count(), 1);
    assert!(row["sandbox"].ends_with("; overlay workspace"), "{row:?}");
    // The cached checkout is as it was: the tasks wrote only their own copies.
    let pristine = Path::new(first["pristine"].as_str().unwrap());
    assert_eq!(git_log(pristine), 1);
    assert_eq!(
        std::fs::read_to_string(pristine.join("calc.py")).unwrap(),
        "def add(a, b):\n    return a - b\n"
    );
}

/// A folder the agent made unreadable (as an unprivileged runner): a layer is then
/// staged whole, as git's own walk does it, and gives the copy's patch.
#[test]
fn an_unreadable_folder_is_staged_as_git_stages_it() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let modes = [
        Mode {
            unprivileged: true,
            ..Mode::new("copy", "copy")
        },
        Mode {
            unprivileged: true,
            ..Mode::new("overlay", "overlay")
        },
    ];
    for m in &modes {
        case.write(
            &format!("{}.yaml", m.name),
            &format!("name: u\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  repo: calc\n  workspaces: {}\n  keep_workspaces: never\ntasks:\n  - id: t\n    prompt: p\n    sim:\n      turns:\n        - content: [ {{ tool_use: {{ name: bash, input: {{ command: 'mkdir locked && echo x > locked/f && chmod 000 locked && echo y > seen.txt' }} }} }} ]\n        - content: [ {{ text: done }} ]\n", m.workspaces),
        );
        m.run(&case);
    }
    let patch = |m: &Mode| std::fs::read(m.run_dir(&case).join("patches/t.diff")).unwrap();
    let (copy, layer) = (patch(&modes[0]), patch(&modes[1]));
    assert!(String::from_utf8_lossy(&copy).contains("seen.txt"));
    same(&layer, &copy, "overlay");
    let t = std::fs::read_to_string(modes[1].run_dir(&case).join("transcripts/t.jsonl")).unwrap();
    let want = if nix::unistd::geteuid().is_root() {
        "\"staged\":\"whole tree\""
    } else {
        "\"staged\":\""
    };
    assert!(t.contains(want), "{t}");
}
