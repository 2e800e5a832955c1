//! Pristine checkouts kept across runs (`--pristine-cache DIR`), keyed by the commit a
//! git repository's ref names (and the ref's spelling, which decides whether the
//! checkout is on a branch or detached): a nightly suite over the same commits clones
//! and snapshots each repository once, not once per run. A plain folder or a bundle has
//! no commit that names its content, so it is made per run as before.
//!
//! An entry is made in a scratch folder of the process and published by renaming it
//! into place with its `done` file written, so a reader never sees half of one; two
//! runs that miss at once both make it and the second rename loses, harmlessly. A
//! scratch folder whose process died (killed while cloning) is deleted by the next run
//! that makes an entry. Entries are never changed after; nothing deletes them but the
//! user (`rm -rf DIR`, or a folder of it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::workspace::{git_in, io, SourceKind, Workspace, WorkspaceError, WorkspaceKind};

/// Where cached pristine checkouts live.
#[derive(Debug, Clone)]
pub struct PristineCache {
    dir: PathBuf,
}

/// The file whose presence says an entry is complete; it holds the runner's starting
/// commit of the checkout.
const DONE: &str = "done";

static SCRATCH: AtomicUsize = AtomicUsize::new(0);

impl PristineCache {
    pub fn new(dir: PathBuf) -> PristineCache {
        PristineCache { dir }
    }

    /// The cached pristine checkout of `source` at `git_ref`, made and published now if
    /// missing; None when the source cannot be cached (not a git repository or a bare
    /// one, or a ref its own refs do not name, which the uncached path then reports).
    /// Blocking.
    pub fn get(
        &self,
        source: &Path,
        git_ref: Option<&str>,
    ) -> Result<Option<Workspace>, WorkspaceError> {
        let source = source.canonicalize().map_err(io("resolve", source))?;
        if !matches!(
            SourceKind::of(&source)?,
            SourceKind::Repository | SourceKind::Bare
        ) {
            return Ok(None);
        }
        let Some(commit) = commit_of(&source, git_ref.unwrap_or("HEAD")) else {
            return Ok(None);
        };
        let entry = self.entry(&commit, git_ref);
        if let Some(ws) = load(&entry)? {
            return Ok(Some(ws));
        }
        std::fs::create_dir_all(&self.dir).map_err(io("create", &self.dir))?;
        let dir = self.dir.canonicalize().map_err(io("resolve", &self.dir))?;
        let host = host();
        clean_scratch(&dir, &host);
        let scratch = dir.join(format!(
            ".scratch-{host}-{}-{}",
            std::process::id(),
            SCRATCH.fetch_add(1, Ordering::SeqCst)
        ));
        let made = Workspace::create(
            &source,
            git_ref,
            &scratch.join("tree"),
            &scratch.join("git"),
        );
        let ws = match made {
            Ok(ws) => ws,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&scratch);
                return Err(e);
            }
        };
        // The source may have moved since it was asked: the entry is what was cloned.
        let cloned = commit_of(&ws.root, "HEAD").unwrap_or(commit);
        let entry = self.entry(&cloned, git_ref);
        let done = scratch.join(DONE);
        // A folder in the entry's place without its `done` file is not an entry (made
        // by hand, or copied in part): it goes aside first.
        if entry.exists() && !entry.join(DONE).is_file() {
            let aside = dir.join(format!(
                ".scratch-{host}-{}-{}",
                std::process::id(),
                SCRATCH.fetch_add(1, Ordering::SeqCst)
            ));
            if std::fs::rename(&entry, &aside).is_ok() {
                let _ = std::fs::remove_dir_all(&aside);
            }
        }
        let published = std::fs::write(&done, format!("{}\n", ws.base))
            .map_err(io("write", &done))
            .and_then(|_| match std::fs::rename(&scratch, &entry) {
                Ok(()) => Ok(()),
                // Another run published it first: theirs is used.
                Err(_) if entry.join(DONE).is_file() => Ok(()),
                Err(e) => Err(io("publish the cached pristine checkout at", &entry)(e)),
            });
        if scratch.exists() {
            let _ = std::fs::remove_dir_all(&scratch);
        }
        published?;
        load(&entry)
    }

    /// `<commit>-default` for the repository's own HEAD (a clone on its branch),
    /// `<commit>-ref-<ref>` for a ref (`HEAD` included: checked out detached).
    fn entry(&self, commit: &str, git_ref: Option<&str>) -> PathBuf {
        let Some(r) = git_ref else {
            return self.dir.join(format!("{commit}-default"));
        };
        let spelled: String = r
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        self.dir.join(format!("{commit}-ref-{spelled}"))
    }
}

/// The commit `rev` names in the repository at `repo`.
fn commit_of(repo: &Path, rev: &str) -> Option<String> {
    let out = git_in(
        repo,
        &[],
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .ok()?;
    let commit = out.trim().to_string();
    (!commit.is_empty() && commit.bytes().all(|b| b.is_ascii_hexdigit())).then_some(commit)
}

/// A complete entry as a workspace, None if there is none.
fn load(entry: &Path) -> Result<Option<Workspace>, WorkspaceError> {
    let Ok(base) = std::fs::read_to_string(entry.join(DONE)) else {
        return Ok(None);
    };
    let tree = entry.join("tree");
    Ok(Some(Workspace {
        root: tree.canonicalize().map_err(io("resolve", &tree))?,
        shadow: entry.join("git"),
        base: base.trim().to_string(),
        cloned: true,
        kind: WorkspaceKind::Copy,
        layer: None,
        pristine_git: None,
    }))
}

/// This machine's name, so that runs on machines sharing a cache folder leave each
/// other's scratch folders alone.
fn host() -> String {
    nix::unistd::gethostname()
        .ok()
        .map(|h| {
            h.to_string_lossy()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        })
        .unwrap_or_else(|| "host".into())
}

/// Deletes the scratch folders of this machine's processes that are gone.
fn clean_scratch(dir: &Path, host: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&format!(".scratch-{host}-"))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(dir: &Path) -> PathBuf {
        let src = dir.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("f.txt"), "one\n").unwrap();
        for args in [
            &["init", "--quiet", "-b", "main"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "-m",
                "one",
            ],
        ] {
            git_in(&src, &[], args).unwrap();
        }
        src
    }

    #[test]
    fn an_entry_is_made_once_per_commit_and_ref_and_found_again() {
        let dir = tempfile::tempdir().unwrap();
        let src = repo(dir.path());
        let cache = PristineCache::new(dir.path().join("cache"));
        // A dead process's scratch folder goes when an entry is made; another machine's
        // stays; a folder in an entry's place without `done` is replaced.
        let stale = dir
            .path()
            .join(format!("cache/.scratch-{}-999999999-0", host()));
        let other = dir.path().join("cache/.scratch-elsewhere-999999999-0");
        for d in [&stale, &other] {
            std::fs::create_dir_all(d.join("tree")).unwrap();
        }
        let head = commit_of(&src, "HEAD").unwrap();
        let half = dir.path().join(format!("cache/{head}-default"));
        std::fs::create_dir_all(half.join("tree")).unwrap();
        let a = cache.get(&src, None).unwrap().unwrap();
        assert!(!stale.exists() && other.exists());
        std::fs::remove_dir_all(&other).unwrap();
        assert!(a
            .root
            .starts_with(dir.path().join("cache").canonicalize().unwrap()));
        assert_eq!(
            std::fs::read_to_string(a.root.join("f.txt")).unwrap(),
            "one\n"
        );
        let again = cache.get(&src, None).unwrap().unwrap();
        assert_eq!(
            (again.root.clone(), again.base.clone()),
            (a.root.clone(), a.base.clone())
        );
        // Another spelling of the same commit is another checkout (on a branch, or not).
        let by_branch = cache.get(&src, Some("main")).unwrap().unwrap();
        assert_ne!(by_branch.root, a.root);
        let detached = cache.get(&src, Some("HEAD")).unwrap().unwrap();
        assert_ne!(detached.root, a.root);
        // A new commit is a new entry; the old one stays as it was.
        std::fs::write(src.join("f.txt"), "two\n").unwrap();
        git_in(
            &src,
            &[],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "--quiet",
                "-am",
                "two",
            ],
        )
        .unwrap();
        let b = cache.get(&src, None).unwrap().unwrap();
        assert_ne!(b.root, a.root);
        assert_eq!(
            std::fs::read_to_string(b.root.join("f.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(
            std::fs::read_to_string(a.root.join("f.txt")).unwrap(),
            "one\n"
        );
        // No scratch folder is left, and a plain folder is not cached.
        let names: Vec<String> = std::fs::read_dir(dir.path().join("cache"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
        assert_eq!(names.len(), 4);
        std::fs::create_dir_all(dir.path().join("plain")).unwrap();
        assert!(cache
            .get(&dir.path().join("plain"), None)
            .unwrap()
            .is_none());
        assert!(cache.get(&src, Some("no-such-ref")).unwrap().is_none());
    }
}
