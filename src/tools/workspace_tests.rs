//! Unit tests of workspace.rs: a copied folder, clones at refs, bare repositories and
//! bundles, and what the agent writes into its own `.git`.

use super::*;

#[test]
fn copies_a_folder_and_diffs_adds_edits_and_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("pkg")).unwrap();
    std::fs::write(src.join("pkg/a.py"), "x = 1\n").unwrap();
    std::fs::write(src.join("gone.txt"), "bye\n").unwrap();
    std::fs::write(src.join(".gitignore"), "__pycache__/\n").unwrap();
    let before = tree_digest(&src).unwrap();
    let ws = Workspace::create(
        &src,
        None,
        &dir.path().join("ws/t1"),
        &dir.path().join("git/t1"),
    )
    .unwrap();
    assert!(!ws.cloned);
    assert!(ws.patch().unwrap().diff.is_empty());
    std::fs::write(ws.root.join("pkg/a.py"), "x = 2\n").unwrap();
    std::fs::write(ws.root.join("new.txt"), "hello\n").unwrap();
    std::fs::remove_file(ws.root.join("gone.txt")).unwrap();
    std::fs::create_dir_all(ws.root.join("pkg/__pycache__")).unwrap();
    std::fs::write(ws.root.join("pkg/__pycache__/a.pyc"), "junk").unwrap();
    let patch = String::from_utf8(ws.patch().unwrap().diff).unwrap();
    assert!(patch.contains("-x = 1\n+x = 2"), "{patch}");
    assert!(
        patch.contains("new file mode") && patch.contains("+hello"),
        "{patch}"
    );
    assert!(
        patch.contains("deleted file mode") && patch.contains("-bye"),
        "{patch}"
    );
    assert!(!patch.contains("pyc"), "{patch}");
    assert_eq!(ws.patch().unwrap().files.len(), 3);
    assert_eq!(tree_digest(&src).unwrap(), before);
    // what the agent writes into its own .git is never read by the runner's git
    std::fs::write(
        ws.root.join(".git/config"),
        "[core]\n\tfsmonitor = touch INJECTED\n",
    )
    .unwrap();
    std::fs::write(ws.root.join(".git/info/exclude"), "new.txt\n").unwrap();
    let again = String::from_utf8(ws.patch().unwrap().diff).unwrap();
    assert!(
        !ws.root.join("INJECTED").exists() && again.contains("+hello"),
        "{again}"
    );
    ws.remove().unwrap();
    assert!(!dir.path().join("ws/t1").exists() && !dir.path().join("git/t1").exists());
}

#[test]
fn clones_a_repository_at_a_ref() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("repo");
    std::fs::create_dir_all(&src).unwrap();
    let id = ["-c", "user.name=t", "-c", "user.email=t@t"];
    std::fs::write(src.join("f.txt"), "one\n").unwrap();
    git(&src, &["init", "--quiet", "-b", "main"]).unwrap();
    git(&src, &["add", "-A"]).unwrap();
    git(
        &src,
        &[id[0], id[1], id[2], id[3], "commit", "--quiet", "-m", "one"],
    )
    .unwrap();
    git(&src, &["tag", "v1"]).unwrap();
    std::fs::write(src.join("f.txt"), "two\n").unwrap();
    git(
        &src,
        &[
            id[0], id[1], id[2], id[3], "commit", "--quiet", "-am", "two",
        ],
    )
    .unwrap();
    std::fs::write(src.join("f.txt"), "uncommitted\n").unwrap();
    let at_tag = Workspace::create(
        &src,
        Some("v1"),
        &dir.path().join("a"),
        &dir.path().join("ga"),
    )
    .unwrap();
    assert!(at_tag.cloned);
    assert_eq!(
        std::fs::read_to_string(at_tag.root.join("f.txt")).unwrap(),
        "one\n"
    );
    let at_main = Workspace::create(
        &src,
        Some("main"),
        &dir.path().join("b"),
        &dir.path().join("gb"),
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(at_main.root.join("f.txt")).unwrap(),
        "two\n"
    );
    let head =
        Workspace::create(&src, None, &dir.path().join("c"), &dir.path().join("gc")).unwrap();
    assert_eq!(
        std::fs::read_to_string(head.root.join("f.txt")).unwrap(),
        "two\n"
    );
    let e = Workspace::create(
        &src,
        Some("nope"),
        &dir.path().join("d"),
        &dir.path().join("gd"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not a branch, tag or commit"), "{e}");
    assert!(
        !dir.path().join("d").exists() && !dir.path().join("gd").exists(),
        "a failed workspace is removed"
    );
    // A bare repository and a bundle are cloned like the work tree, refs included.
    let bare = dir.path().join("bare.git");
    git(
        dir.path(),
        &[
            "clone",
            "--quiet",
            "--bare",
            src.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    )
    .unwrap();
    let bundle = dir.path().join("repo.bundle");
    git(
        &src,
        &["bundle", "create", bundle.to_str().unwrap(), "--all"],
    )
    .unwrap();
    assert_eq!(SourceKind::of(&src).unwrap(), SourceKind::Repository);
    assert_eq!(SourceKind::of(&bare).unwrap(), SourceKind::Bare);
    assert_eq!(SourceKind::of(&bundle).unwrap(), SourceKind::Bundle);
    assert!(
        SourceKind::of(&src.join("f.txt")).is_err(),
        "a plain file is no source"
    );
    for (n, from) in [bare, bundle].iter().enumerate() {
        for (r, want) in [(None, "two\n"), (Some("v1"), "one\n")] {
            let ws = Workspace::create(
                from,
                r,
                &dir.path().join(format!("k{n}{r:?}")),
                &dir.path().join(format!("gk{n}{r:?}")),
            )
            .unwrap();
            assert!(ws.cloned);
            assert_eq!(
                std::fs::read_to_string(ws.root.join("f.txt")).unwrap(),
                want
            );
            std::fs::write(ws.root.join("new.txt"), "x\n").unwrap();
            assert!(String::from_utf8_lossy(&ws.patch().unwrap().diff).contains("+x"));
        }
    }
    let inside = Workspace::create(&src, None, &src.join("reports/ws"), &dir.path().join("ge"))
        .unwrap_err()
        .to_string();
    assert!(inside.contains("inside the repository"), "{inside}");
    assert_eq!(
        std::fs::read_to_string(src.join("f.txt")).unwrap(),
        "uncommitted\n"
    );
}
