//! The run's pristine checkouts: one read-only workspace per repository and ref, made
//! by the first task that needs it, under which every task's copy-on-write layer is
//! mounted (see [`super::layer`]), and making a task's workspace a layer over one.

use std::collections::HashMap;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OnceCell;

use super::copies;
use super::layer::Layer;
use super::pristine_cache::PristineCache;
use super::workspace::{absolute, io, Workspace, WorkspaceError, WorkspaceKind};

type Key = (PathBuf, Option<String>);

/// A pristine checkout, once made (or why it could not be).
type Made = Arc<OnceCell<Result<Arc<Workspace>, String>>>;

/// Pristine checkouts by source and ref; the first task makes one, the others wait for
/// it. A failure is kept too, so every task of that repository says the same.
#[derive(Debug)]
pub struct Pristines {
    dir: PathBuf,
    /// A workspace made from one of them was kept: they stay after the run.
    kept: std::sync::atomic::AtomicBool,
    /// The folders this run made (a resumed run leaves an earlier attempt's alone).
    dirs: Arc<Mutex<Vec<PathBuf>>>,
    /// Each with its folder's number.
    made: Mutex<HashMap<Key, (usize, Made)>>,
    /// Whether the run folder's filesystem has reflinks (probed once).
    reflinks: std::sync::OnceLock<bool>,
    /// Pristine checkouts kept across runs, where the user asked for them.
    cache: Option<PristineCache>,
}

impl Pristines {
    /// Pristine checkouts go in `dir` (the run's folder, `pristine/`), or, for git
    /// repositories, in `cache` (kept across runs) when given.
    pub fn new(dir: PathBuf, cache: Option<PathBuf>) -> Pristines {
        Pristines {
            dir,
            kept: Default::default(),
            dirs: Default::default(),
            made: Mutex::new(HashMap::new()),
            reflinks: std::sync::OnceLock::new(),
            cache: cache.map(PristineCache::new),
        }
    }

    /// Whether copies in the run folder (where the pristine checkouts and the
    /// workspaces go) can share blocks: reflinks. Probed once, when a task first asks.
    pub fn reflinks(&self) -> bool {
        *self.reflinks.get_or_init(|| {
            let run = self.dir.parent().unwrap_or(&self.dir);
            std::fs::create_dir_all(run).is_ok() && super::copies::reflinks_in(run)
        })
    }

    /// A workspace made from one of them is kept: they stay (a layer is reassembled
    /// over one; a copy's repository borrows its objects).
    pub fn keep(&self) {
        self.kept.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Deletes the pristine checkouts at the end of the run, unless a kept workspace
    /// needs them. Blocking.
    pub fn finish(&self) {
        if self.kept.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        for d in self
            .dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = std::fs::remove_dir_all(d);
        }
        // Empty unless an earlier attempt left some.
        let _ = std::fs::remove_dir(&self.dir);
    }

    /// The pristine checkout of `source` at `git_ref`, made now if no task made it.
    pub async fn get(
        &self,
        source: &Path,
        git_ref: Option<&str>,
    ) -> Result<Arc<Workspace>, String> {
        let key = (source.to_path_buf(), git_ref.map(str::to_string));
        let (cell, n) = {
            let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
            let n = made.len();
            let (n, cell) = made.entry(key).or_insert_with(|| (n, Arc::default()));
            (cell.clone(), *n)
        };
        let (dir, dirs, cache) = (self.dir.clone(), self.dirs.clone(), self.cache.clone());
        let (source, git_ref) = (source.to_path_buf(), git_ref.map(str::to_string));
        cell.get_or_init(|| async move {
            tokio::task::spawn_blocking(move || {
                if let Some(cache) = cache {
                    match cache.get(&source, git_ref.as_deref()) {
                        Ok(Some(ws)) => return Ok(Arc::new(ws)),
                        Ok(None) => {}
                        Err(e) => return Err(format!("in the pristine cache: {e}")),
                    }
                }
                // A folder of an earlier attempt of this run (resumed) may hold layers
                // kept over it: a new one goes beside it.
                let at = (0..)
                    .map(|k| match k {
                        0 => dir.join(n.to_string()),
                        k => dir.join(format!("{n}-{k}")),
                    })
                    .find(|d| !d.exists())
                    .unwrap_or_else(|| dir.join(n.to_string()));
                dirs.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(at.clone());
                let (dest, shadow) = (at.join("tree"), at.join("git"));
                Workspace::create(&source, git_ref.as_deref(), &dest, &shadow)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())?
        })
        .await
        .clone()
    }
}

impl Workspace {
    /// A task's workspace as an overlay layer over `pristine` (a workspace made once per
    /// repository and ref, never written to), mounted at `dir/merged`. Its patch base is
    /// the pristine's: the runner's repository of it shares the pristine's objects and
    /// has no index of its own (writing one would cost the repository's file count per
    /// task), so a snapshot hashes only what changed. On failure nothing is left behind.
    /// Blocking.
    pub fn layered(
        pristine: &Workspace,
        dir: &Path,
        shadow: &Path,
    ) -> Result<Workspace, WorkspaceError> {
        let (dir, shadow) = (absolute(dir)?, absolute(shadow)?);
        if dir.exists() || shadow.exists() {
            return Err(WorkspaceError::Exists(dir));
        }
        let layer = Layer::mount(&pristine.root, &dir).map_err(io("mount an overlay at", &dir))?;
        let made = layer
            .merged
            .canonicalize()
            .map_err(io("resolve", &layer.merged))
            .and_then(|root| Self::share(pristine, root, Some(layer.clone()), &shadow, None));
        if made.is_err() {
            let _ = layer.remove();
            let _ = std::fs::remove_dir_all(&shadow);
        }
        made
    }

    /// A task's workspace as a full copy of `pristine` at `dest`, its files reflinked
    /// (`reflink`) or copied with their times, so the runner's copy of the pristine's
    /// index (reflinked too) still matches them: nothing is cloned or hashed per task.
    /// The workspace's own repository (`.git`) borrows the pristine's objects
    /// (alternates) rather than copying them: git never writes to an alternate, so the
    /// agent can only add to its own. On failure nothing is left behind. Blocking.
    pub fn copied(
        pristine: &Workspace,
        dest: &Path,
        shadow: &Path,
        reflink: bool,
    ) -> Result<Workspace, WorkspaceError> {
        let (dest, shadow) = (absolute(dest)?, absolute(shadow)?);
        if dest.exists() || shadow.exists() {
            return Err(WorkspaceError::Exists(dest));
        }
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        let objects = Path::new(".git/objects");
        let borrowed = pristine.root.join(objects).is_dir();
        let skip = if borrowed { vec![objects] } else { vec![] };
        let made = copies::copy_tree(&pristine.root, &dest, reflink, &skip)
            .and_then(|_| {
                if !borrowed {
                    return Ok(());
                }
                let info = dest.join(objects).join("info");
                std::fs::create_dir_all(&info)?;
                std::fs::create_dir_all(dest.join(objects).join("pack"))?;
                let mut line = pristine.root.join(objects).into_os_string().into_vec();
                line.push(b'\n');
                std::fs::write(info.join("alternates"), line)
            })
            .map_err(|source| WorkspaceError::Copy {
                from: pristine.root.clone(),
                to: dest.clone(),
                source,
            })
            .and_then(|_| dest.canonicalize().map_err(io("resolve", &dest)))
            .and_then(|root| Self::share(pristine, root, None, &shadow, Some(reflink)));
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dest);
            let _ = std::fs::remove_dir_all(&shadow);
        }
        made
    }

    /// The task's workspace at `root` with the runner's repository of it at `shadow`,
    /// sharing the pristine's: a bare repository written by hand (no git process: this
    /// is on every task's path), the pristine's objects as alternates, HEAD at its base
    /// commit, and a copy of its index for a full copy (`index`: reflinked or not).
    fn share(
        pristine: &Workspace,
        root: PathBuf,
        layer: Option<Layer>,
        shadow: &Path,
        index: Option<bool>,
    ) -> Result<Workspace, WorkspaceError> {
        let info = shadow.join("objects/info");
        std::fs::create_dir_all(&info).map_err(io("create", &info))?;
        std::fs::create_dir_all(shadow.join("refs")).map_err(io("create", shadow))?;
        for (name, text) in [
            (
                "objects/info/alternates",
                format!("{}\n", pristine.shadow.join("objects").display()),
            ),
            ("HEAD", format!("{}\n", pristine.base)),
            (
                "config",
                "[core]\n\trepositoryformatversion = 0\n\tbare = true\n".to_string(),
            ),
        ] {
            let path = shadow.join(name);
            std::fs::write(&path, text).map_err(io("write", &path))?;
        }
        if let Some(reflink) = index {
            let to = shadow.join("index");
            copies::copy_file(&pristine.shadow.join("index"), &to, reflink)
                .map_err(io("copy", &to))?;
        }
        let layered = layer.is_some();
        let kind = match (layered, index) {
            (true, _) => WorkspaceKind::Overlay,
            (false, Some(true)) => WorkspaceKind::Reflink,
            (false, _) => WorkspaceKind::Copy,
        };
        Ok(Workspace {
            kind,
            root,
            shadow: shadow.to_path_buf(),
            base: pristine.base.clone(),
            cloned: pristine.cloned,
            layer,
            // A layer's full staging starts from the pristine's index.
            pristine_git: layered.then(|| pristine.shadow.clone()),
        })
    }
}
