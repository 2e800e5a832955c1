//! What a layer's task changed, for the patch: the upper folder of an overlay holds
//! every file written, added or deleted (a whiteout) since the mount, so only those
//! paths are looked at, and the new tree is the starting commit's with those paths
//! edited, written one changed folder at a time ([`super::tree_edit`]): no walk of the
//! whole tree, and no index of the whole repository (a copy per task would cost writes
//! in proportion to the repository's file count). The tree is the one `git add -A`
//! would make; where that is not certain (a changed `.gitignore`, a repository inside
//! the workspace, a submodule), the whole tree is staged as in a full copy.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use super::tree_edit::{self, Base, Entry, Listing, Node, RepoPath, TreeWriter};
use super::workspace::{io, Staged, Workspace, WorkspaceError};

/// Paths (relative, raw bytes) under an overlay's upper folder: the non-folders
/// (files, links, whiteouts), and the folders that replaced a lower one (opaque) or
/// were removed (whiteouts), whose tracked files must be looked up.
#[derive(Debug, Default)]
pub struct Written {
    pub files: BTreeSet<Vec<u8>>,
    /// Whiteouts and opaque folders: everything the index has under them may be gone.
    pub cleared: BTreeSet<Vec<u8>>,
}

/// Whether an upper folder hides the lower one of its name: marked opaque, in the
/// `trusted.` attributes of a privileged mount or the `user.` ones of a mount made in a
/// user namespace (`userxattr`).
fn opaque(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    [c"trusted.overlay.opaque", c"user.overlay.opaque"]
        .iter()
        .any(|name| {
            let mut v = [0u8; 1];
            // SAFETY: both strings are NUL-terminated and the buffer's length is passed.
            let n = unsafe {
                nix::libc::lgetxattr(c.as_ptr(), name.as_ptr(), v.as_mut_ptr().cast(), v.len())
            };
            n == 1 && v[0] == b'y'
        })
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

/// What is at a path of the workspace now, as git would store it.
enum Now {
    File {
        executable: bool,
    },
    Link(Vec<u8>),
    /// Nothing git tracks (missing, or a pipe, socket or device).
    Nothing,
}

fn now_at(root: &Path, path: &[u8]) -> std::io::Result<Option<Now>> {
    let at = root.join(OsStr::from_bytes(path));
    let meta = match std::fs::symlink_metadata(&at) {
        Ok(m) => m,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(nix::libc::ENOTDIR) =>
        {
            return Ok(Some(Now::Nothing))
        }
        Err(e) => return Err(e),
    };
    let kind = meta.file_type();
    Ok(Some(if kind.is_dir() {
        return Ok(None);
    } else if kind.is_symlink() {
        Now::Link(std::fs::read_link(&at)?.as_os_str().as_bytes().to_vec())
    } else if kind.is_file() {
        Now::File {
            executable: meta.permissions().mode() & 0o100 != 0,
        }
    } else {
        Now::Nothing
    }))
}

/// Each path looked at, with what is there now; folders are replaced by their files.
fn look(root: &Path, cand: &BTreeSet<RepoPath>) -> Result<BTreeMap<RepoPath, Now>, WorkspaceError> {
    let mut out = BTreeMap::new();
    for p in cand {
        let at = root.join(OsStr::from_bytes(p));
        match now_at(root, p).map_err(io("read", &at))? {
            Some(now) => {
                out.insert(p.clone(), now);
            }
            None => {
                // Now a folder (a file became one): its files.
                for f in written(&at).map_err(io("read", &at))?.files {
                    let full = tree_edit::join(p, &f);
                    let at = root.join(OsStr::from_bytes(&full));
                    if let Some(now) = now_at(root, &full).map_err(io("read", &at))? {
                        out.insert(full, now);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `git mktree --batch`, one tree at a time: it answers each tree's id before the next
/// is sent, so a parent can name its new children.
struct Mktree {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

impl Mktree {
    fn start(ws: &Workspace) -> Result<Mktree, WorkspaceError> {
        let mut child = ws
            .shadow_command(&["mktree", "-z", "--missing", "--batch"])
            .spawn()
            .map_err(WorkspaceError::NoGit)?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(WorkspaceError::NoGit(std::io::Error::other(
                "git mktree started without its pipes",
            )));
        };
        Ok(Mktree {
            child,
            input,
            output: std::io::BufReader::new(output),
        })
    }

    fn failed(&mut self, why: std::io::Error) -> WorkspaceError {
        let _ = self.child.kill();
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
        }
        let _ = self.child.wait();
        WorkspaceError::Git {
            args: "mktree -z --missing --batch".into(),
            stderr: format!("{why}; {}", stderr.trim()),
        }
    }

    fn finish(mut self) {
        drop(self.input);
        let _ = self.child.wait();
    }
}

impl TreeWriter for Mktree {
    type Error = WorkspaceError;
    fn write(&mut self, listing: &Listing) -> Result<String, WorkspaceError> {
        let mut text = tree_edit::mktree_input(listing);
        // An empty entry ends the tree.
        text.push(0);
        if let Err(e) = self.input.write_all(&text).and_then(|_| self.input.flush()) {
            return Err(self.failed(e));
        }
        let mut line = String::new();
        match self.output.read_line(&mut line) {
            Ok(n) if n > 0 && line.trim().len() >= 40 => Ok(line.trim().to_string()),
            Ok(_) => Err(self.failed(std::io::Error::other("no tree id"))),
            Err(e) => Err(self.failed(e)),
        }
    }
}

/// The listings of `folders` in the tree of `commit`, by `git cat-file --batch`: None
/// where the commit has no folder there. The root is the empty path.
fn listings(
    ws: &Workspace,
    commit: &str,
    folders: &[RepoPath],
) -> Result<(Base, Entry), WorkspaceError> {
    let mut input = Vec::new();
    for f in folders {
        if f.is_empty() {
            input.extend_from_slice(format!("{commit}^{{tree}}").as_bytes());
        } else {
            input.extend_from_slice(format!("{commit}:").as_bytes());
            input.extend_from_slice(f);
        }
        input.push(b'\n');
    }
    let args = ["cat-file", "--batch"];
    let out = ws.shadow_raw(&args, &input)?;
    let bad = |why: &str| WorkspaceError::Git {
        args: args.join(" "),
        stderr: format!("{why}; {}", String::from_utf8_lossy(&out.stderr).trim()),
    };
    if !out.status.success() {
        return Err(bad("failed"));
    }
    let mut rest = out.stdout.as_slice();
    let mut base = Base::new();
    let mut root = None;
    for f in folders {
        let nl = rest
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| bad("short answer"))?;
        let header = String::from_utf8_lossy(&rest[..nl]).into_owned();
        rest = &rest[nl + 1..];
        // `<name> missing` (or ambiguous) names what was asked, spaces and all.
        let parts: Vec<&str> = if header.ends_with(" missing") || header.ends_with(" ambiguous") {
            Vec::new()
        } else {
            header.split(' ').collect()
        };
        let listing = match parts.as_slice() {
            [oid, kind, size] if oid.bytes().all(|b| b.is_ascii_hexdigit()) => {
                let size: usize = size.parse().map_err(|_| bad("bad size"))?;
                if rest.len() < size + 1 {
                    return Err(bad("short object"));
                }
                let body = &rest[..size];
                rest = &rest[size + 1..];
                if f.is_empty() {
                    root = Some(Entry {
                        mode: "40000".into(),
                        oid: oid.to_string(),
                    });
                }
                match *kind {
                    "tree" => Some(
                        tree_edit::parse_tree(body, oid.len() / 2)
                            .ok_or_else(|| bad("unreadable tree"))?,
                    ),
                    _ => None,
                }
            }
            [] => None,
            _ => return Err(bad(&format!("unexpected answer {header:?}"))),
        };
        base.insert(f.clone(), listing);
    }
    let root = root.ok_or_else(|| bad("no root tree"))?;
    Ok((base, root))
}

/// A path as `hash-object --stdin-paths` reads it: a line starting with `"` is taken
/// as C-quoted, so such a path is quoted.
fn line_for_hash_object(path: &[u8], out: &mut Vec<u8>) {
    if path.first() != Some(&b'"') {
        out.extend_from_slice(path);
    } else {
        out.push(b'"');
        for b in path {
            match b {
                b'"' | b'\\' => out.extend_from_slice(&[b'\\', *b]),
                0x20..=0x7e => out.push(*b),
                _ => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            }
        }
        out.push(b'"');
    }
    out.push(b'\n');
}

/// The entry of `path`'s parent listing for it.
fn entry_of<'a>(base: &'a Base, path: &[u8]) -> Option<&'a Entry> {
    let (dir, name) = match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    };
    base.get(dir)?.as_ref()?.get(name)
}

impl Workspace {
    /// Brings what the patch is taken against up to date with the workspace. A full
    /// clone or copy: `git add -A` in the runner's index. A layer: the tree `git add -A`
    /// would make, from what its upper folder holds now or held at an earlier staging
    /// (what the task can have changed), or the whole tree staged where the edit alone
    /// cannot be trusted to match.
    pub(super) fn stage(&self) -> Result<Staged, WorkspaceError> {
        let Some(layer) = &self.layer else {
            self.shadow_git(&["add", "-A"])?;
            return Ok(Staged::Index);
        };
        let w = written(&layer.upper).map_err(io("read", &layer.upper))?;
        let saved = self.shadow.join("agentbatch-written");
        let mut cand = w.files.clone();
        if let Ok(old) = std::fs::read(&saved) {
            cand.extend(nul_split(&old));
        }
        std::fs::write(&saved, nul_joined(&cand)).map_err(io("write", &saved))?;
        if cand.is_empty() && w.cleared.is_empty() {
            return Ok(Staged::Edited(None));
        }
        match self.edit(&w, &cand)? {
            Some(staged) => Ok(staged),
            None => self.stage_all(),
        }
    }

    /// The whole tree staged, as in a full copy, from the pristine's index (the layer's
    /// files the task did not touch keep its size and time, so they are not read).
    fn stage_all(&self) -> Result<Staged, WorkspaceError> {
        let index = self.shadow.join("index");
        if let (false, Some(pristine)) = (index.exists(), &self.pristine_git) {
            std::fs::copy(pristine.join("index"), &index).map_err(io("copy", &index))?;
        }
        self.shadow_git(&["add", "-A"])?;
        Ok(Staged::Whole(
            self.shadow_git(&["write-tree"])?.trim().to_string(),
        ))
    }

    /// The starting tree with the layer's changes, or None where staging the whole
    /// tree is the only way to be sure of `git add -A`'s answer.
    fn edit(
        &self,
        w: &Written,
        cand: &BTreeSet<RepoPath>,
    ) -> Result<Option<Staged>, WorkspaceError> {
        // A changed .gitignore can uncover files nobody wrote; git's line-based inputs
        // cannot carry a line break (and drop a carriage return at a line's end).
        let breaks = |p: &RepoPath| p.contains(&b'\n') || p.contains(&b'\r');
        if cand.iter().any(|p| is_ignore_file(p) || breaks(p)) {
            return Ok(None);
        }
        let now = look(&self.root, cand)?;
        if now.keys().any(breaks) {
            return Ok(None);
        }
        // The folders whose starting listings are needed.
        let folders: Vec<RepoPath> = tree_edit::folders_of(now.keys().chain(w.cleared.iter()))
            .into_iter()
            .collect();
        // A repository inside the workspace (its files are another's): as git does.
        if folders.iter().any(|d| {
            !d.is_empty()
                && self
                    .root
                    .join(OsStr::from_bytes(d))
                    .join(".git")
                    .symlink_metadata()
                    .is_ok()
        }) {
            return Ok(None);
        }
        let (base, root) = listings(self, &self.base, &folders)?;
        let gitlink = |p: &[u8]| entry_of(&base, p).is_some_and(Entry::is_gitlink);
        if folders
            .iter()
            .chain(now.keys())
            .any(|p| !p.is_empty() && gitlink(p))
        {
            return Ok(None);
        }
        // Files git does not track yet are left out where ignored.
        let tracked = |p: &[u8]| entry_of(&base, p).is_some_and(|e| !e.is_tree());
        let untracked: BTreeSet<&RepoPath> = now
            .iter()
            .filter(|(p, n)| !matches!(n, Now::Nothing) && !tracked(p))
            .map(|(p, _)| p)
            .collect();
        let ignored = self.ignored(untracked)?;
        let mut files = Vec::new();
        let mut links = Vec::new();
        for (p, n) in &now {
            match n {
                _ if ignored.contains(p) => {}
                Now::File { executable } => files.push((p, *executable)),
                Now::Link(target) => links.push((p, target)),
                Now::Nothing => {}
            }
        }
        let file_ids = self.hash_files(files.iter().map(|(p, _)| *p))?;
        let link_ids = self.hash_links(links.iter().map(|(_, t)| *t))?;
        let mut edits = Node::default();
        for ((p, executable), oid) in files.iter().zip(file_ids) {
            let mode = if *executable { "100755" } else { "100644" };
            edits.put(
                p,
                Entry {
                    mode: mode.into(),
                    oid,
                },
            );
        }
        for ((p, _), oid) in links.iter().zip(link_ids) {
            edits.put(
                p,
                Entry {
                    mode: "120000".into(),
                    oid,
                },
            );
        }
        for (p, n) in &now {
            if matches!(n, Now::Nothing) || ignored.contains(p) {
                edits.remove(p);
            }
        }
        for d in &w.cleared {
            edits.clear(d);
        }
        let mut mktree = Mktree::start(self)?;
        let new_root = tree_edit::build_root(&edits, &root, &base, &mut mktree)?;
        mktree.finish();
        Ok(Some(Staged::Edited(
            (new_root != root).then_some(new_root.oid),
        )))
    }

    /// Which of `paths` git ignores (`check-ignore`, over the workspace's .gitignore
    /// files; these paths are untracked, so no index is asked).
    fn ignored(&self, paths: BTreeSet<&RepoPath>) -> Result<BTreeSet<RepoPath>, WorkspaceError> {
        if paths.is_empty() {
            return Ok(BTreeSet::new());
        }
        let args = ["check-ignore", "--no-index", "-z", "--stdin"];
        let out = self.shadow_raw(&args, &nul_joined(paths))?;
        // 0: some ignored, 1: none.
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(nul_split(&out.stdout))
    }

    /// Blob ids of the files at `paths` (relative to the workspace, so that its
    /// .gitattributes apply as in `git add`), written to the runner's objects.
    fn hash_files<'a>(
        &self,
        paths: impl Iterator<Item = &'a RepoPath>,
    ) -> Result<Vec<String>, WorkspaceError> {
        let mut input = Vec::new();
        for p in paths {
            line_for_hash_object(p, &mut input);
        }
        self.hash(&["hash-object", "-w", "--stdin-paths"], input)
    }

    /// Blob ids of links' targets (what git stores for a link), written to the runner's
    /// objects, through files in its git folder (hash-object reads paths, and would
    /// follow a link).
    fn hash_links<'a>(
        &self,
        targets: impl Iterator<Item = &'a Vec<u8>>,
    ) -> Result<Vec<String>, WorkspaceError> {
        let dir = self.shadow.join("agentbatch-links");
        let mut input = Vec::new();
        for (i, t) in targets.enumerate() {
            if i == 0 {
                std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
            }
            let f = dir.join(i.to_string());
            std::fs::write(&f, t).map_err(io("write", &f))?;
            input.extend_from_slice(f.as_os_str().as_bytes());
            input.push(b'\n');
        }
        let ids = self.hash(
            &["hash-object", "-w", "--no-filters", "--stdin-paths"],
            input,
        );
        let _ = std::fs::remove_dir_all(&dir);
        ids
    }

    fn hash(&self, args: &[&str], input: Vec<u8>) -> Result<Vec<String>, WorkspaceError> {
        if input.is_empty() {
            return Ok(Vec::new());
        }
        let want = input.iter().filter(|b| **b == b'\n').count();
        let out = self.shadow_raw(args, &input)?;
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        if !out.status.success() || ids.len() != want {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(ids)
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

    #[test]
    fn a_path_hash_object_would_unquote_is_quoted() {
        let mut out = Vec::new();
        line_for_hash_object(b"plain \"mid\"", &mut out);
        line_for_hash_object(b"\"q\\\xe9", &mut out);
        assert_eq!(out, b"plain \"mid\"\n\"\\\"q\\\\\\351\"\n".to_vec());
    }
}
