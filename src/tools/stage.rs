//! What a layer's task changed, for the patch: the upper folder of an overlay holds
//! every file written, added or deleted since the mount ([`super::upper`]), so only
//! those paths are looked at. They are staged in a small index of their own, seeded
//! with what the starting commit has at each of them, so git's own rules for adding a
//! file (modes, links, .gitattributes, a file already stored with CRLF) decide their
//! entries; the new tree is then the starting commit's with those entries edited in,
//! written one changed folder at a time ([`super::tree_edit`]). Nothing walks the whole
//! tree, and no index of the whole repository is written (a copy per task would cost
//! writes in proportion to the repository's file count). The tree is the one `git add
//! -A` would make; where that cannot be derived from the written paths alone (a changed
//! `.gitignore` or `.gitattributes`, a repository inside the workspace, a submodule),
//! the whole tree is staged as in a full copy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::tree_edit::{self, Base, Entry, Listing, Node, RepoPath, TreeWriter};
use super::upper::{changes_the_rules, nul_joined, nul_split, written, Marks};
use super::workspace::{io, run, Staged, Workspace, WorkspaceError};

/// Whether a path holds something git would add now (a file or a link, not below a
/// link or a file): else it is gone, for the patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Now {
    Present,
    Gone,
}

/// What is at each path of the workspace now. Folders are replaced by their files; a
/// path below a link or a file is gone (git does not look through links: a folder
/// replaced by a link to another holds nothing of the repository's).
fn look(root: &Path, cand: &BTreeSet<RepoPath>) -> Result<BTreeMap<RepoPath, Now>, WorkspaceError> {
    let mut folders: HashMap<RepoPath, bool> = HashMap::new();
    let mut real_folder = |dir: &[u8]| -> bool {
        if let Some(known) = folders.get(dir) {
            return *known;
        }
        let is =
            std::fs::symlink_metadata(root.join(OsStr::from_bytes(dir))).is_ok_and(|m| m.is_dir());
        folders.insert(dir.to_vec(), is);
        is
    };
    let mut out = BTreeMap::new();
    let mut stack: Vec<RepoPath> = cand.iter().cloned().collect();
    while let Some(p) = stack.pop() {
        let ancestors_real = p
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'/')
            .all(|(i, _)| real_folder(&p[..i]));
        if !ancestors_real {
            out.insert(p, Now::Gone);
            continue;
        }
        let at = root.join(OsStr::from_bytes(&p));
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.insert(p, Now::Gone);
                continue;
            }
            Err(e) => return Err(io("read", &at)(e)),
        };
        let kind = meta.file_type();
        if kind.is_dir() {
            // Now a folder (a file became one): its files.
            for f in written(&at, None).map_err(io("read", &at))?.files {
                stack.push(tree_edit::join(&p, &f));
            }
        } else if kind.is_file() || kind.is_symlink() {
            out.insert(p, Now::Present);
        } else {
            // A pipe, socket or device: git adds none.
            out.insert(p, Now::Gone);
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
        let marks = if layer.userxattr {
            Marks::User
        } else {
            Marks::Trusted
        };
        // A folder the task made unreadable: git's own walk warns and goes on.
        let Ok(w) = written(&layer.upper, Some(marks)) else {
            return self.stage_all();
        };
        let saved = self.shadow.join("agentbatch-written");
        let mut cand = w.files.clone();
        if let Ok(old) = std::fs::read(&saved) {
            cand.extend(nul_split(&old));
        }
        std::fs::write(&saved, nul_joined(&cand)).map_err(io("write", &saved))?;
        if cand.is_empty() && w.cleared.is_empty() {
            return Ok(Staged::Edited(None));
        }
        match self.edit(&w, &cand) {
            Ok(Some(staged)) => Ok(staged),
            // Where git's answer cannot be derived from the paths, or a path cannot be
            // read or staged on its own (a folder the task made unreadable, which the
            // runner's capabilities in its user namespace still read but git cannot):
            // git's own walk decides, warnings and all; its error is the one reported.
            Ok(None) | Err(_) => self.stage_all(),
        }
    }

    /// The whole tree staged, as in a full copy, from the pristine's index (the layer's
    /// files the task did not touch keep its size and time, so they are not read),
    /// moved first to this workspace's starting commit (setup may have changed it).
    fn stage_all(&self) -> Result<Staged, WorkspaceError> {
        let index = self.shadow.join("index");
        if let (false, Some(pristine)) = (index.exists(), &self.pristine_git) {
            std::fs::copy(pristine.join("index"), &index).map_err(io("copy", &index))?;
            // HEAD still names the pristine's commit, which its index matches.
            let head = self.shadow_git(&["rev-parse", "HEAD"])?;
            let head = head.trim();
            if head != self.base {
                self.shadow_git(&["read-tree", "-m", head, &self.base])?;
            }
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
        w: &super::upper::Written,
        cand: &BTreeSet<RepoPath>,
    ) -> Result<Option<Staged>, WorkspaceError> {
        // git's line-based inputs cannot carry a line break (and drop a carriage return
        // at a line's end).
        let breaks = |p: &RepoPath| p.contains(&b'\n') || p.contains(&b'\r');
        if cand.iter().any(|p| changes_the_rules(p) || breaks(p)) {
            return Ok(None);
        }
        let now = look(&self.root, cand)?;
        if now.keys().any(|p| changes_the_rules(p) || breaks(p)) {
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
        let untracked: Vec<&RepoPath> = now
            .iter()
            .filter(|(p, n)| **n == Now::Present && !tracked(p))
            .map(|(p, _)| p)
            .collect();
        let ignored = self.ignored(&untracked)?;
        let added: Vec<&RepoPath> = now
            .iter()
            .filter(|(p, n)| **n == Now::Present && !ignored.contains(*p))
            .map(|(p, _)| p)
            .collect();
        let entries = self.index_entries(&added, &base)?;
        let mut edits = Node::default();
        for p in &added {
            let e = entries.get(*p).ok_or_else(|| WorkspaceError::Git {
                args: "update-index --add".into(),
                stderr: format!("{} was not staged", String::from_utf8_lossy(p)),
            })?;
            edits.put(p, e.clone());
        }
        for (p, n) in &now {
            if *n == Now::Gone || ignored.contains(p) {
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
    /// files; these paths are untracked, so no index is asked). A name starting with
    /// `:` goes as `./:name`, or git would read it as pathspec magic.
    fn ignored(&self, paths: &[&RepoPath]) -> Result<BTreeSet<RepoPath>, WorkspaceError> {
        if paths.is_empty() {
            return Ok(BTreeSet::new());
        }
        let mut input = Vec::new();
        for p in paths {
            if p.first() == Some(&b':') {
                input.extend_from_slice(b"./");
            }
            input.extend_from_slice(p);
            input.push(0);
        }
        let args = ["check-ignore", "--no-index", "-z", "--stdin"];
        let out = self.shadow_raw(&args, &input)?;
        // 0: some ignored, 1: none.
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(nul_split(&out.stdout)
            .into_iter()
            .map(|p| match p.strip_prefix(b"./") {
                Some(rest) if rest.first() == Some(&b':') => rest.to_vec(),
                _ => p,
            })
            .collect())
    }

    /// The entries `git add` makes of `paths` (files and links, none ignored), from an
    /// index of their own holding what the starting commit has at each: `update-index`
    /// then applies git's rules as `git add` does (the mode, a link's target, the
    /// workspace's .gitattributes, a file already stored with CRLF kept so), and writes
    /// the blobs to the runner's objects.
    fn index_entries(
        &self,
        paths: &[&RepoPath],
        base: &Base,
    ) -> Result<BTreeMap<RepoPath, Entry>, WorkspaceError> {
        if paths.is_empty() {
            return Ok(BTreeMap::new());
        }
        let index = self.shadow.join("agentbatch-index");
        let _ = std::fs::remove_file(&index);
        let mut seed = Vec::new();
        for p in paths {
            if let Some(e) = entry_of(base, p).filter(|e| !e.is_tree()) {
                seed.extend_from_slice(format!("{} {}\t", e.mode, e.oid).as_bytes());
                seed.extend_from_slice(p);
                seed.push(0);
            }
        }
        let git = |args: &[&str], input: &[u8]| -> Result<Vec<u8>, WorkspaceError> {
            let mut cmd = self.shadow_command(args);
            cmd.env("GIT_INDEX_FILE", OsString::from(index.as_os_str()));
            let out = run(cmd, input)?;
            if !out.status.success() {
                return Err(WorkspaceError::Git {
                    args: args.join(" "),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                });
            }
            Ok(out.stdout)
        };
        if !seed.is_empty() {
            git(&["update-index", "-z", "--index-info"], &seed)?;
        }
        let list = nul_joined(paths.iter().copied());
        git(
            &["update-index", "--add", "--replace", "-z", "--stdin"],
            &list,
        )?;
        let staged = git(&["ls-files", "-s", "-z"], &[])?;
        let _ = std::fs::remove_file(&index);
        let mut out = BTreeMap::new();
        for line in staged.split(|b| *b == 0).filter(|l| !l.is_empty()) {
            // <mode> <oid> <stage>\t<path>
            let tab = line.iter().position(|b| *b == b'\t');
            let fields = tab.map(|t| (String::from_utf8_lossy(&line[..t]), &line[t + 1..]));
            let Some((head, path)) = fields else {
                continue;
            };
            let parts: Vec<&str> = head.split(' ').collect();
            if let [mode, oid, _] = parts.as_slice() {
                out.insert(
                    path.to_vec(),
                    Entry {
                        mode: mode.trim_start_matches('0').to_string(),
                        oid: oid.to_string(),
                    },
                );
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_below_a_link_or_a_file_are_gone_and_folders_give_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        std::fs::write(root.join("real/sub/f"), "x").unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        let cand: BTreeSet<RepoPath> = [
            b"link/sub/f".to_vec(),
            b"file/inside".to_vec(),
            b"real".to_vec(),
            b"missing".to_vec(),
            b"link".to_vec(),
        ]
        .into_iter()
        .collect();
        let now = look(root, &cand).unwrap();
        let got: Vec<(String, Now)> = now
            .into_iter()
            .map(|(p, n)| (String::from_utf8(p).unwrap(), n))
            .collect();
        assert_eq!(
            got,
            vec![
                ("file/inside".into(), Now::Gone),
                ("link".into(), Now::Present),
                ("link/sub/f".into(), Now::Gone),
                ("missing".into(), Now::Gone),
                ("real/sub/f".into(), Now::Present),
            ]
        );
    }
}
