//! Confinement of file tools to the task's workspace. A path is refused when it leaves
//! the workspace lexically (`..`, an absolute path elsewhere) or through a symlink
//! (checked on the longest existing prefix, after the fact of any earlier tool call or
//! command that created the link).

use std::path::{Component, Path, PathBuf};

/// Resolves `p` (relative to the workspace, or absolute inside it) to a path inside
/// `root`, which must be canonical. The result has every existing prefix canonicalized,
/// so a symlink that points elsewhere is caught.
pub fn resolve(root: &Path, p: &str) -> Result<PathBuf, String> {
    let p = p.trim();
    if p.is_empty() {
        return Err("the path is empty".into());
    }
    let given = Path::new(p);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let mut normal = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => normal.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !normal.pop() || !normal.starts_with(root) {
                    return Err(outside(p));
                }
            }
            Component::Normal(s) => normal.push(s),
        }
    }
    if !normal.starts_with(root) {
        return Err(outside(p));
    }
    // Canonicalize the longest existing prefix: symlinks in it must stay inside.
    let mut existing = normal.clone();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return Err(outside(p)),
        }
    }
    let canonical = existing
        .canonicalize()
        .map_err(|e| format!("cannot resolve \"{p}\": {e}"))?;
    if !canonical.starts_with(root) {
        return Err(format!(
            "\"{p}\" resolves outside the workspace (through a symbolic link); only files inside the repository can be used"
        ));
    }
    let mut out = canonical;
    for name in rest.into_iter().rev() {
        out.push(name);
    }
    Ok(out)
}

fn outside(p: &str) -> String {
    format!("\"{p}\" is outside the workspace; use a path relative to the repository root")
}

/// The path relative to the workspace, for messages and policy rules: `.` for the
/// workspace itself, which [`resolve`] reads back (an empty path it refuses).
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
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("host")).unwrap();
        std::fs::create_dir(root.join("in")).unwrap();
        std::os::unix::fs::symlink(root.join("in"), root.join("alias")).unwrap();
        assert!(resolve(&root, "etc/passwd")
            .unwrap_err()
            .contains("symbolic link"));
        assert!(resolve(&root, "host").is_err());
        assert!(resolve(&root, "etc/new-file").is_err());
        assert_eq!(resolve(&root, "alias/f").unwrap(), root.join("in/f"));
        assert_eq!(relative(&root, &root.join("in/f")), "in/f");
        assert_eq!(relative(&root, &root), ".");
        assert_eq!(resolve(&root, &relative(&root, &root)).unwrap(), root);
    }
}
