//! Confinement of file tools to the task's workspace. A path is refused when it leaves
//! the workspace lexically (`..`, an absolute path elsewhere) or through a symlink
//! (checked after the fact of any earlier tool call or command that created the link).
//! Links are followed as the task's commands follow them: where the sandbox shows them
//! the workspace at the repository's own path, a link that names that path (or leaves
//! the repository by `..` and comes back by its name) reaches the workspace's file, for
//! the file tools as for the commands.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Links followed in one path before it is refused, as the kernel's `ELOOP` limit.
const MAX_LINKS: usize = 40;

/// A task's workspace as its file tools reach it.
#[derive(Debug, Clone)]
pub struct Root {
    /// The workspace's canonical folder, where its files are.
    pub path: PathBuf,
    /// The canonical path the task's commands see the workspace at, when not at `path`
    /// (see `Sandbox::new`).
    pub seen_at: Option<PathBuf>,
}

/// One step still to take while following a path.
enum Step {
    Up,
    Name(OsString),
}

impl Root {
    pub fn new(path: PathBuf, seen_at: Option<PathBuf>) -> Root {
        Root { path, seen_at }
    }

    /// Resolves `p` (relative to the workspace, or absolute inside it: under its own
    /// folder or the path commands see it at) to a path under the workspace's folder,
    /// with every link followed as the commands would follow it (what does not exist
    /// yet is kept as written), so a symlink that points elsewhere is caught.
    pub fn resolve(&self, p: &str) -> Result<PathBuf, String> {
        let p = p.trim();
        if p.is_empty() {
            return Err("the path is empty".into());
        }
        let given = Path::new(p);
        let joined = if given.is_absolute() {
            given.to_path_buf()
        } else {
            self.view().join(given)
        };
        // Lexically first, for the message: a path that leaves by `..` or names
        // another folder is refused whatever its links say.
        let mut normal = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::Prefix(_) | Component::RootDir => normal.push(c.as_os_str()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !normal.pop() || !self.inside(&normal) {
                        return Err(outside(p));
                    }
                }
                Component::Normal(s) => normal.push(s),
            }
        }
        if !self.inside(&normal) {
            return Err(outside(p));
        }
        let reached = self
            .follow(&joined)
            .map_err(|e| format!("cannot resolve \"{p}\": {e}"))?;
        self.real(&reached).ok_or_else(|| {
            format!(
                "\"{p}\" resolves outside the workspace (through a symbolic link); only files inside the repository can be used"
            )
        })
    }

    /// The folder relative paths start from: where the commands see the workspace.
    fn view(&self) -> &Path {
        self.seen_at.as_deref().unwrap_or(&self.path)
    }

    /// Whether a path (as the commands see it) is in the workspace.
    fn inside(&self, path: &Path) -> bool {
        self.real(path).is_some()
    }

    /// Where a path the commands see is on the runner's disk, if in the workspace.
    fn real(&self, path: &Path) -> Option<PathBuf> {
        if let Some(rest) = self
            .seen_at
            .as_ref()
            .and_then(|at| path.strip_prefix(at).ok())
        {
            return Some(self.path.join(rest));
        }
        path.starts_with(&self.path).then(|| path.to_path_buf())
    }

    /// Walks the absolute path `path` one name at a time from `/`, as the kernel does
    /// for the task's commands: a link's target replaces it (from `/` if absolute),
    /// `..` goes to the parent of the folder reached, and what does not exist is kept
    /// as written. Returns the path reached, as the commands see it.
    fn follow(&self, path: &Path) -> Result<PathBuf, String> {
        let mut todo: Vec<Step> = Vec::new();
        let push = |todo: &mut Vec<Step>, path: &Path| {
            for c in path.components().rev() {
                match c {
                    Component::ParentDir => todo.push(Step::Up),
                    Component::Normal(s) => todo.push(Step::Name(s.to_os_string())),
                    _ => {}
                }
            }
        };
        push(&mut todo, path);
        let mut at = PathBuf::from("/");
        let (mut links, mut missing) = (0, false);
        while let Some(step) = todo.pop() {
            let name = match step {
                Step::Up => {
                    at.pop();
                    continue;
                }
                Step::Name(name) => name,
            };
            let next = at.join(&name);
            if !missing {
                let disk = self.real(&next).unwrap_or_else(|| next.clone());
                match std::fs::symlink_metadata(&disk) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        links += 1;
                        if links > MAX_LINKS {
                            return Err("too many levels of symbolic links".into());
                        }
                        let target = std::fs::read_link(&disk).map_err(|e| e.to_string())?;
                        if target.is_absolute() {
                            at = PathBuf::from("/");
                        }
                        push(&mut todo, &target);
                        continue;
                    }
                    Ok(_) => {}
                    Err(_) => missing = true,
                }
            }
            at = next;
        }
        Ok(at)
    }
}

fn outside(p: &str) -> String {
    format!("\"{p}\" is outside the workspace; use a path relative to the repository root")
}

/// The path relative to the workspace, for messages and policy rules: `.` for the
/// workspace itself, which [`Root::resolve`] reads back (an empty path it refuses).
pub fn relative(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(r) if r.as_os_str().is_empty() => ".".into(),
        Ok(r) => r.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn resolve(root: &Path, p: &str) -> Result<PathBuf, String> {
        Root::new(root.to_path_buf(), None).resolve(p)
    }

    #[test]
    fn confines_to_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.py"), "x").unwrap();
        assert_eq!(resolve(&root, "src/a.py").unwrap(), root.join("src/a.py"));
        assert_eq!(
            resolve(&root, "./src/../src/a.py").unwrap(),
            root.join("src/a.py")
        );
        assert_eq!(
            resolve(&root, "new/dir/file.txt").unwrap(),
            root.join("new/dir/file.txt")
        );
        assert_eq!(
            resolve(&root, root.join("src").to_str().unwrap()).unwrap(),
            root.join("src")
        );
        for bad in ["../x", "src/../../x", "/etc/passwd", "", "/"] {
            assert!(resolve(&root, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn symlinks_out_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink("/etc/hostname", root.join("host")).unwrap();
        std::fs::create_dir(root.join("in")).unwrap();
        symlink(root.join("in"), root.join("alias")).unwrap();
        assert!(resolve(&root, "etc/passwd")
            .unwrap_err()
            .contains("symbolic link"));
        assert!(resolve(&root, "host").is_err());
        assert!(resolve(&root, "etc/new-file").is_err());
        // `..` after a link goes up from where the link led, as in a shell.
        assert!(resolve(&root, "etc/../in").is_err());
        assert_eq!(resolve(&root, "alias/f").unwrap(), root.join("in/f"));
        assert_eq!(relative(&root, &root.join("in/f")), "in/f");
        assert_eq!(relative(&root, &root), ".");
        assert_eq!(resolve(&root, &relative(&root, &root)).unwrap(), root);
        symlink("loop2", root.join("loop1")).unwrap();
        symlink("loop1", root.join("loop2")).unwrap();
        assert!(resolve(&root, "loop1")
            .unwrap_err()
            .contains("too many levels"));
    }

    /// The workspace seen at the repository's path: links that name the repository, or
    /// leave it and come back by its name, reach the workspace's files; the repository
    /// itself is never reached.
    #[test]
    fn links_to_the_repository_reach_the_workspace_where_commands_see_it_there() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (repo, ws) = (base.join("repo"), base.join("run/ws"));
        for d in [&repo, &ws.join("conf")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(base.join("note.txt"), "outside").unwrap();
        for (target, link) in [
            (repo.join("config.txt"), "current"),
            (repo.join("conf"), "confdir"),
            (repo.join("missing.txt"), "dangling"),
            (PathBuf::from("../repo/config.txt"), "around"),
            (PathBuf::from("../note.txt"), "up"),
            (PathBuf::from("confdir/../config.txt"), "through"),
        ] {
            symlink(target, ws.join(link)).unwrap();
        }
        let root = Root::new(ws.clone(), Some(repo.clone()));
        for (p, want) in [
            ("current", ws.join("config.txt")),
            ("confdir/new.txt", ws.join("conf/new.txt")),
            ("dangling", ws.join("missing.txt")),
            ("around", ws.join("config.txt")),
            ("through", ws.join("config.txt")),
            (repo.join("conf").to_str().unwrap(), ws.join("conf")),
            (ws.join("conf").to_str().unwrap(), ws.join("conf")),
        ] {
            assert_eq!(root.resolve(p).unwrap(), want, "{p}");
        }
        for bad in ["up", "../note.txt", "../repo/config.txt"] {
            assert!(root.resolve(bad).is_err(), "{bad}");
        }
        // Seen where it is, the same links lead out of it (to the repository itself).
        let plain = Root::new(ws.clone(), None);
        for p in ["current", "confdir/new.txt", "around"] {
            assert!(plain.resolve(p).is_err(), "{p}");
        }
    }
}
