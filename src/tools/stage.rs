//! What a layer's task can have changed, for the patch: the upper folder of an overlay
//! holds every file written, added or deleted (a whiteout) since the mount, so the
//! runner's index is brought up to date for those paths only, never by walking and
//! statting the whole tree. The result is the index `git add -A` would make.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use super::workspace::{io, Workspace, WorkspaceError};

/// Paths (relative, raw bytes) under an overlay's upper folder: the non-folders
/// (files, links, whiteouts), and the folders that replaced a lower one (opaque) or
/// were removed (whiteouts), whose tracked files must be looked up.
#[derive(Debug, Default)]
pub struct Written {
    pub files: BTreeSet<Vec<u8>>,
    /// Whiteouts and opaque folders: everything the index has under them may be gone.
    pub cleared: BTreeSet<Vec<u8>>,
}

fn opaque(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let name = c"trusted.overlay.opaque";
    let mut v = [0u8; 1];
    // SAFETY: both strings are NUL-terminated and the buffer's length is passed.
    let n =
        unsafe { nix::libc::lgetxattr(c.as_ptr(), name.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
    n == 1 && v[0] == b'y'
}

/// Walks `upper`, leaving out `.git` folders (the runner's index never holds them).
pub fn written(upper: &Path) -> std::io::Result<Written> {
    let mut out = Written::default();
    let mut stack = vec![upper.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            if entry.file_name() == OsStr::new(".git") {
                continue;
            }
            let path = entry.path();
            let rel = path
                .strip_prefix(upper)
                .map(|p| p.as_os_str().as_bytes().to_vec())
                .unwrap_or_default();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if opaque(&path) {
                    out.cleared.insert(rel);
                }
                stack.push(path);
            } else {
                if kind.is_char_device() {
                    out.cleared.insert(rel.clone());
                }
                out.files.insert(rel);
            }
        }
    }
    Ok(out)
}

/// NUL-joins paths for git's `-z` input.
pub fn nul_joined<'a>(paths: impl IntoIterator<Item = &'a Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        out.extend_from_slice(p);
        out.push(0);
    }
    out
}

/// Splits git's `-z` output.
pub fn nul_split(bytes: &[u8]) -> BTreeSet<Vec<u8>> {
    bytes
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Whether a path names a `.gitignore` (a change to one can make `git add -A` pick up
/// files that were never written: the caller then stages the whole tree).
pub fn is_ignore_file(path: &[u8]) -> bool {
    path.rsplit(|b| *b == b'/').next() == Some(b".gitignore".as_slice())
}

impl Workspace {
    /// `git add -A` in the runner's index. For a layer, only the paths its upper folder
    /// holds now or held at an earlier staging (what the task can have changed) are
    /// brought up to date, with `update-index`; the index is the one `git add -A`
    /// would make (a changed `.gitignore` stages the whole tree, as it can uncover
    /// files nobody wrote).
    pub(super) fn stage(&self) -> Result<(), WorkspaceError> {
        let Some(layer) = &self.layer else {
            self.shadow_git(&["add", "-A"])?;
            return Ok(());
        };
        let w = written(&layer.upper).map_err(io("read", &layer.upper))?;
        let saved = self.shadow.join("agentbatch-written");
        let mut cand = w.files.clone();
        if let Ok(old) = std::fs::read(&saved) {
            cand.extend(nul_split(&old));
        }
        std::fs::write(&saved, nul_joined(&cand)).map_err(io("write", &saved))?;
        if cand.iter().any(|p| is_ignore_file(p)) {
            self.shadow_git(&["add", "-A"])?;
            return Ok(());
        }
        if !w.cleared.is_empty() {
            // Tracked files under a removed or replaced folder.
            let all = self.shadow_raw(&["ls-files", "-z"], &[])?;
            for p in nul_split(&all.stdout) {
                let under =
                    |d: &Vec<u8>| p.len() > d.len() && p.starts_with(d) && p[d.len()] == b'/';
                if w.cleared.iter().any(under) {
                    cand.insert(p);
                }
            }
        }
        let mut paths = BTreeSet::new();
        for p in cand {
            let at = self.root.join(OsStr::from_bytes(&p));
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {
                    // Now a folder: its files (the index holds no folders).
                    let sub = written(&at).map_err(io("read", &at))?;
                    for f in sub.files {
                        let mut full = p.clone();
                        full.push(b'/');
                        full.extend_from_slice(&f);
                        paths.insert(full);
                    }
                }
                _ => {
                    paths.insert(p);
                }
            }
        }
        if paths.is_empty() {
            return Ok(());
        }
        // Untracked ignored files stay out, as `git add -A` leaves them.
        let ignored = self.shadow_raw(&["check-ignore", "-z", "--stdin"], &nul_joined(&paths))?;
        for p in nul_split(&ignored.stdout) {
            paths.remove(&p);
        }
        let args = [
            "update-index",
            "--add",
            "--remove",
            "--replace",
            "-z",
            "--stdin",
        ];
        let out = self.shadow_raw(&args, &nul_joined(&paths))?;
        if !out.status.success() {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upper_folder_lists_what_was_written_but_not_git() {
        let dir = tempfile::tempdir().unwrap();
        let up = dir.path();
        std::fs::create_dir_all(up.join("a/b")).unwrap();
        std::fs::create_dir_all(up.join(".git/objects")).unwrap();
        std::fs::write(up.join("a/b/c.txt"), "x").unwrap();
        std::fs::write(up.join("top"), "y").unwrap();
        std::fs::write(up.join(".git/index"), "z").unwrap();
        let w = written(up).unwrap();
        let files: Vec<&[u8]> = w.files.iter().map(Vec::as_slice).collect();
        assert_eq!(files, vec![b"a/b/c.txt".as_slice(), b"top".as_slice()]);
        assert!(w.cleared.is_empty());
        assert_eq!(nul_split(&nul_joined(&w.files)), w.files);
        assert!(is_ignore_file(b"sub/.gitignore") && is_ignore_file(b".gitignore"));
        assert!(!is_ignore_file(b"x.gitignore"));
    }
}
