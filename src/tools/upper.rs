//! What an overlay's upper folder holds: every file the task wrote, added or deleted
//! since the mount (a deletion is a whiteout, a 0/0 character device), and the folders
//! that replaced a lower one (marked opaque). The patch of a layer looks at these paths
//! only.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Where the overlay keeps its marks: `trusted.` attributes (a mount made as root) or
/// `user.` ones (a mount made in a user namespace, `userxattr`). Only the mount's own
/// namespace is read: the other is an ordinary attribute anyone may set through the
/// merged view, which overlayfs refuses for its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marks {
    Trusted,
    User,
}

/// Paths (relative, raw bytes) under an overlay's upper folder: the non-folders
/// (files, links, whiteouts), and the folders that replaced a lower one (opaque) or
/// were removed (whiteouts), whose tracked files must be looked up.
#[derive(Debug, Default)]
pub struct Written {
    pub files: BTreeSet<Vec<u8>>,
    /// Whiteouts and opaque folders: everything the index has under them may be gone.
    pub cleared: BTreeSet<Vec<u8>>,
}

/// Whether an upper folder hides the lower one of its name.
fn opaque(path: &Path, marks: Marks) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let name = match marks {
        Marks::Trusted => c"trusted.overlay.opaque",
        Marks::User => c"user.overlay.opaque",
    };
    let mut v = [0u8; 1];
    // SAFETY: both strings are NUL-terminated and the buffer's length is passed.
    let n =
        unsafe { nix::libc::lgetxattr(c.as_ptr(), name.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
    n == 1 && v[0] == b'y'
}

/// Walks an upper folder (`marks`: how its mount marks opaque folders; None: a plain
/// folder, nothing is a mark), leaving out `.git` folders (the runner's repository
/// never holds them).
pub fn written(upper: &Path, marks: Option<Marks>) -> std::io::Result<Written> {
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
                if marks.is_some_and(|m| opaque(&path, m)) {
                    out.cleared.insert(rel);
                }
                stack.push(path);
            } else {
                // A whiteout is a 0/0 device; a device the task made is not one.
                if marks.is_some() && kind.is_char_device() && entry.metadata()?.rdev() == 0 {
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

/// Whether a change to this path can change what `git add -A` makes of files nobody
/// wrote (a `.gitignore` can uncover an ignored file; a `.gitattributes` changes how a
/// file is cleaned, and git's rule for a file already stored with CRLF reads the whole
/// index): the caller then stages the whole tree.
pub fn changes_the_rules(path: &[u8]) -> bool {
    matches!(
        path.rsplit(|b| *b == b'/').next(),
        Some(b".gitignore" | b".gitattributes")
    )
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
        // A user attribute is no mark of a root mount's, whoever set it.
        let _ = xattr_set(&up.join("a"), "user.overlay.opaque");
        let w = written(up, Some(Marks::Trusted)).unwrap();
        let files: Vec<&[u8]> = w.files.iter().map(Vec::as_slice).collect();
        assert_eq!(files, vec![b"a/b/c.txt".as_slice(), b"top".as_slice()]);
        assert!(w.cleared.is_empty());
        assert_eq!(nul_split(&nul_joined(&w.files)), w.files);
        assert!(changes_the_rules(b"sub/.gitignore") && changes_the_rules(b".gitattributes"));
        assert!(!changes_the_rules(b"x.gitignore"));
    }

    fn xattr_set(path: &Path, name: &str) -> i32 {
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        // SAFETY: NUL-terminated strings and a one-byte value of that length.
        unsafe { nix::libc::lsetxattr(p.as_ptr(), n.as_ptr(), b"y".as_ptr().cast(), 1, 0) }
    }
}
