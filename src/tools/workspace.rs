//! Per-task workspaces: a local clone at the requested ref for a git repository, a copy
//! (made into a fresh git repository) for a plain folder, never the source itself; and
//! the patch of what the agent changed, as `git diff` against the starting commit (new
//! and deleted files included, .gitignore honoured).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A task's copy of its repository.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The canonical root.
    pub root: PathBuf,
    /// The commit the agent started from.
    pub base: String,
    /// Whether the source was a git repository (else a copied folder).
    pub cloned: bool,
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.autocrlf=false",
        ])
        .args(args)
        .current_dir(dir)
        // Neither the user's nor the system's git configuration changes the result.
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LANG", "C")
        .output()
        .map_err(|e| format!("cannot run git ({e}); install git to use repo tasks"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("git {} failed: {}", args.join(" "), err.trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else {
            std::fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

impl Workspace {
    /// Creates the workspace at `dest` (which must not exist) from `source`, checked out
    /// at `git_ref` for a git repository. Blocking.
    pub fn create(source: &Path, git_ref: Option<&str>, dest: &Path) -> Result<Workspace, String> {
        if dest.exists() {
            return Err(format!("{} already exists", dest.display()));
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        let cloned = source.join(".git").exists();
        let dest_s = dest.to_string_lossy().into_owned();
        if cloned {
            let src = source.to_string_lossy().into_owned();
            git(
                dest.parent().unwrap_or(Path::new(".")),
                &["clone", "--quiet", "--no-hardlinks", &src, &dest_s],
            )?;
            if let Some(r) = git_ref {
                let commit = [r.to_string(), format!("origin/{r}")]
                    .iter()
                    .find_map(|c| {
                        git(
                            dest,
                            &[
                                "rev-parse",
                                "--verify",
                                "--quiet",
                                &format!("{c}^{{commit}}"),
                            ],
                        )
                        .ok()
                    })
                    .ok_or_else(|| {
                        format!(
                            "ref \"{r}\" is not a branch, tag or commit of {}",
                            source.display()
                        )
                    })?;
                git(dest, &["checkout", "--quiet", "--detach", commit.trim()])?;
            }
        } else {
            if git_ref.is_some() {
                return Err(format!(
                    "ref is set but {} is not a git repository",
                    source.display()
                ));
            }
            copy_tree(source, dest).map_err(|e| {
                format!(
                    "cannot copy {} to {}: {e}",
                    source.display(),
                    dest.display()
                )
            })?;
            git(dest, &["init", "--quiet"])?;
            git(dest, &["add", "-A"])?;
            git(
                dest,
                &[
                    "-c",
                    "user.name=agentbatch",
                    "-c",
                    "user.email=agentbatch@localhost",
                    "commit",
                    "--quiet",
                    "--allow-empty",
                    "-m",
                    "agentbatch: starting point",
                ],
            )?;
        }
        let base = git(dest, &["rev-parse", "HEAD"])?.trim().to_string();
        let root = dest
            .canonicalize()
            .map_err(|e| format!("cannot resolve {}: {e}", dest.display()))?;
        Ok(Workspace { root, base, cloned })
    }

    /// The agent's change against the starting commit, as a git patch (empty when
    /// nothing changed). Blocking.
    pub fn diff(&self) -> Result<String, String> {
        git(&self.root, &["add", "-A"])?;
        git(
            &self.root,
            &[
                "diff",
                "--cached",
                "--binary",
                "--no-color",
                "--no-ext-diff",
                &self.base,
            ],
        )
    }

    /// Files the patch touches, for the transcript.
    pub fn changed_files(&self) -> Result<Vec<String>, String> {
        let out = git(
            &self.root,
            &["diff", "--cached", "--name-status", &self.base],
        )?;
        Ok(out.lines().map(str::to_string).collect())
    }

    /// Deletes the workspace. Blocking.
    pub fn remove(&self) -> std::io::Result<()> {
        std::fs::remove_dir_all(&self.root)
    }
}

/// A stable digest of every file under `dir` (paths, modes, contents), to show a
/// source was left untouched.
pub fn tree_digest(dir: &Path) -> std::io::Result<u64> {
    use std::hash::{Hash, Hasher};
    use std::os::unix::fs::PermissionsExt;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut files: Vec<PathBuf> = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    files.sort();
    for f in files {
        f.strip_prefix(dir).unwrap_or(&f).hash(&mut h);
        let meta = std::fs::symlink_metadata(&f)?;
        meta.permissions().mode().hash(&mut h);
        if meta.file_type().is_symlink() {
            std::fs::read_link(&f)?.hash(&mut h);
        } else {
            std::fs::read(&f)?.hash(&mut h);
        }
    }
    Ok(h.finish())
}

#[cfg(test)]
mod tests {
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
        let ws = Workspace::create(&src, None, &dir.path().join("ws/t1")).unwrap();
        assert!(!ws.cloned);
        assert_eq!(ws.diff().unwrap(), "");
        std::fs::write(ws.root.join("pkg/a.py"), "x = 2\n").unwrap();
        std::fs::write(ws.root.join("new.txt"), "hello\n").unwrap();
        std::fs::remove_file(ws.root.join("gone.txt")).unwrap();
        std::fs::create_dir_all(ws.root.join("pkg/__pycache__")).unwrap();
        std::fs::write(ws.root.join("pkg/__pycache__/a.pyc"), "junk").unwrap();
        let patch = ws.diff().unwrap();
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
        assert_eq!(ws.changed_files().unwrap().len(), 3);
        assert_eq!(tree_digest(&src).unwrap(), before);
        ws.remove().unwrap();
        assert!(!dir.path().join("ws/t1").exists());
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
        let at_tag = Workspace::create(&src, Some("v1"), &dir.path().join("a")).unwrap();
        assert!(at_tag.cloned);
        assert_eq!(
            std::fs::read_to_string(at_tag.root.join("f.txt")).unwrap(),
            "one\n"
        );
        let at_main = Workspace::create(&src, Some("main"), &dir.path().join("b")).unwrap();
        assert_eq!(
            std::fs::read_to_string(at_main.root.join("f.txt")).unwrap(),
            "two\n"
        );
        let head = Workspace::create(&src, None, &dir.path().join("c")).unwrap();
        assert_eq!(
            std::fs::read_to_string(head.root.join("f.txt")).unwrap(),
            "two\n"
        );
        let e = Workspace::create(&src, Some("nope"), &dir.path().join("d")).unwrap_err();
        assert!(e.contains("not a branch, tag or commit"), "{e}");
        assert_eq!(
            std::fs::read_to_string(src.join("f.txt")).unwrap(),
            "uncommitted\n"
        );
    }
}
