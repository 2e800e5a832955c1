//! Symbolic links look the same to a task under every workspace method: its commands,
//! its file tools and its check resolve them alike through an overlay layer, a reflinked
//! copy and a copy, of a git repository and of a plain folder, and a patch never holds a
//! link change the agent did not make. Copies keep a sparse file's holes.

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};

use agentbatch::tools::workspace::tree_digest;
use serde_json::{json, Value};

use crate::common::{make_git_repository, read_csv, Case};
use crate::workspaces::{same, Mode};

/// A repository whose links name it by its absolute path (a file, a folder, a file that
/// is not there), by a relative path, by a path that leaves it and comes back by its
/// own name, and leave it (relative and absolute) for a file beside it.
fn linked_repository(case: &Case, name: &str) -> PathBuf {
    case.write(&format!("{name}/config.txt"), "VERSION=old\n");
    case.write(&format!("{name}/conf/settings.txt"), "S=old\n");
    case.write("outside/note.txt", "outside\n");
    let src = case.path(name).canonicalize().unwrap();
    let outside = case.path("outside").canonicalize().unwrap();
    for (target, link) in [
        (src.join("config.txt"), "current"),
        (src.join("conf"), "confdir"),
        (src.join("missing.txt"), "dangling"),
        (PathBuf::from("config.txt"), "rel"),
        (PathBuf::from("conf"), "reldir"),
        (PathBuf::from(format!("../{name}/config.txt")), "around"),
        (PathBuf::from("../outside/note.txt"), "up"),
        (outside.join("note.txt"), "outabs"),
    ] {
        symlink(target, src.join(link)).unwrap();
    }
    src
}

fn turn(calls: &[(&str, Value)]) -> String {
    let content: Vec<Value> = calls
        .iter()
        .map(|(name, input)| json!({"tool_use": {"name": name, "input": input}}))
        .collect();
    format!("        - content: {}\n", Value::from(content))
}

/// The agent writes through the links and reads through them with its file tools and
/// its commands; the check reads through them again.
fn links_job(method: &str) -> String {
    let read = |p: &str| ("read_file", json!({ "path": p }));
    let write = |p: &str, text: &str| ("write_file", json!({ "path": p, "content": text }));
    let commands = [
        "cat current around rel confdir/settings.txt confdir/added.txt up outabs",
        "readlink current up",
        "test -e dangling || echo dangling-missing",
        "echo made > dangling",
        "cat missing.txt reldir/settings.txt",
        "ln -s \"$PWD/config.txt\" made_link",
        "pwd",
        "ls",
    ];
    let turns = [
        turn(&[
            write("config.txt", "VERSION=new\n"),
            write("confdir/added.txt", "A=1\n"),
        ]),
        turn(&[
            read("current"),
            read("around"),
            read("rel"),
            read("confdir/added.txt"),
            read("up"),
            read("dangling"),
        ]),
        turn(&[("bash", json!({ "command": commands.join("; ") }))]),
        turn(&[read("dangling"), write("around", "VERSION=newer\n")]),
    ]
    .concat();
    let check = "grep -q VERSION=newer current && grep -q VERSION=newer around && grep -q A=1 confdir/added.txt && grep -q outside up && grep -q outside outabs && grep -q made dangling";
    let mut tasks = String::new();
    for src in ["gitsrc", "plainsrc"] {
        tasks.push_str(&format!(
            "  - id: {src}\n    prompt: p\n    repo: {src}\n    sim:\n      turns:\n{turns}        - content: [ {{ text: done }} ]\n"
        ));
    }
    format!("name: links\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash, read_file, write_file]\n  workspaces: {method}\n  check: '{check}'\n  keep_workspaces: never\ntasks:\n{tasks}")
}

/// What each tool call of a task returned, in order.
fn tool_results(dir: &Path, task: &str) -> Vec<(bool, String)> {
    std::fs::read_to_string(dir.join(format!("transcripts/{task}.jsonl")))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "tool_result")
        .map(|e| {
            (
                e["is_error"].as_bool().unwrap_or_default(),
                e["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn links_into_and_out_of_the_repository_look_the_same_under_every_method() {
    let case = Case::new();
    let git = linked_repository(&case, "gitsrc");
    make_git_repository(&git);
    let plain = linked_repository(&case, "plainsrc");
    let digests = [&git, &plain].map(|r| tree_digest(r).unwrap());
    let modes = Mode::every_method();
    for m in &modes {
        case.write(&format!("{}.yaml", m.name), &links_job(m.workspaces));
        m.run(&case);
    }
    for task in ["gitsrc", "plainsrc"] {
        let copy_dir = modes[0].run_dir(&case);
        let copy_patch = std::fs::read(copy_dir.join(format!("patches/{task}.diff"))).unwrap();
        let text = String::from_utf8_lossy(&copy_patch);
        let source = case.path(task).canonicalize().unwrap();
        for expected in [
            "config.txt",
            "conf/added.txt",
            "missing.txt",
            "VERSION=newer",
        ] {
            assert!(text.contains(expected), "{task}: {expected} in {text}");
        }
        // The one link in the patch is the one the agent made, naming the repository
        // by the path its commands saw it at.
        assert_eq!(text.matches("120000").count(), 1, "{task}: {text}");
        assert!(
            text.contains("diff --git a/made_link b/made_link\nnew file mode 120000")
                && text.contains(&format!("+{}/config.txt", source.display())),
            "{task}: a link change nobody made: {text}"
        );
        let results = tool_results(&copy_dir, task);
        let content = |i: usize| results[i].1.clone();
        assert_eq!(content(2), "VERSION=new\n", "{task}: {results:?}");
        assert_eq!(content(3), "VERSION=new\n", "{task}: {results:?}");
        assert!(
            results[6].0 && content(6).contains("outside"),
            "{results:?}"
        );
        assert!(results[7].0, "{task}: nothing there yet: {results:?}");
        let bash = content(8);
        for line in [
            "VERSION=new\nVERSION=new\nVERSION=new\nS=old\nA=1\noutside\noutside\n",
            &format!("{}/config.txt\n../outside/note.txt\n", source.display()),
            "dangling-missing\nmade\nS=old\n",
            &format!("{}\n", source.display()),
        ] {
            assert!(bash.contains(line), "{task}: {line:?} in {bash}");
        }
        assert_eq!(content(9), "made\n", "{task}: {results:?}");
        for m in &modes {
            let dir = m.run_dir(&case);
            let row = read_csv(&dir.join("results.csv"))
                .into_iter()
                .find(|r| r["task_id"] == task)
                .unwrap();
            assert_eq!(row["outcome"], "pass", "{} {task}: {row:?}", m.name);
            assert!(
                row["sandbox"].ends_with(&format!("; {} workspace", m.made)),
                "{} {task}: {row:?}",
                m.name
            );
            assert_eq!(
                tool_results(&dir, task),
                results,
                "{} {task}: the agent saw something else than in a copy",
                m.name
            );
            let patch = std::fs::read(dir.join(format!("patches/{task}.diff"))).unwrap();
            same(&patch, &copy_patch, &format!("{} {task}", m.name));
        }
    }
    assert_eq!(
        [&git, &plain].map(|r| tree_digest(r).unwrap()),
        digests,
        "the sources are as they were"
    );
    assert_eq!(
        std::fs::read_to_string(case.path("outside/note.txt")).unwrap(),
        "outside\n"
    );
}

/// A sparse file of a plain folder stays sparse in the pristine checkout and in a copy:
/// its holes are not written out as zeros.
#[test]
fn copies_keep_a_sparse_files_holes() {
    let case = Case::new();
    crate::common::calc_fixture(&case, "sparse");
    let big = std::fs::File::create(case.path("sparse/big.img")).unwrap();
    big.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&big, b"data in the middle", 32 << 20).unwrap();
    drop(big);
    case.write(
        "copy.yaml",
        "name: s\nproviders:\n  s: { protocol: anthropic, simulator: true }\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  tools: [bash]\n  repo: sparse\n  workspaces: copy\n  keep_workspaces: always\ntasks:\n  - id: t\n    prompt: p\n    sim: { turns: [ { content: [ { tool_use: { name: bash, input: { command: 'wc -c big.img' } } } ] }, { content: [ { text: done } ] } ] }\n",
    );
    let mode = Mode::new("copy", "copy");
    mode.run(&case);
    let dir = mode.run_dir(&case);
    let row = read_csv(&dir.join("results.csv")).remove(0);
    assert_eq!(row["stop_reason"], "completed", "{row:?}");
    let kept = Path::new(&row["workspace"]).join("big.img");
    let pristine = dir.join("pristine/0/tree/big.img");
    for file in [&pristine, &kept] {
        let meta = std::fs::metadata(file).unwrap();
        assert_eq!(meta.len(), 64 << 20, "{}", file.display());
        let allocated = meta.blocks() * 512;
        assert!(
            allocated < 1 << 20,
            "{}: {allocated} bytes allocated for 18 bytes of data",
            file.display()
        );
        let bytes = std::fs::read(file).unwrap();
        assert_eq!(&bytes[32 << 20..(32 << 20) + 18], b"data in the middle");
        assert!(bytes[..32 << 20].iter().all(|b| *b == 0));
    }
}
