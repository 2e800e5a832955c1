//! Per-task workspaces: a local clone at the requested ref for a git repository (a work
//! tree, a bare repository or a bundle file), a copy (made into a fresh git repository)
//! for a plain folder, never the source itself; and the patch of what the agent
//! changed, as `git diff` against the starting commit (new and deleted files included,
//! .gitignore honoured).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the agent changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    /// `git diff --binary` against the starting point; empty when nothing changed.
    /// Bytes, as git wrote them: a file's content or name need not be UTF-8.
    pub diff: Vec<u8>,
    /// `git diff --name-status` lines.
    pub files: Vec<String>,
    /// How the change was found, for the transcript: `index` (a full clone or copy:
    /// `git add -A`), `layer` (the paths a layer's upper folder holds), or `whole tree`
    /// (a layer whose change could uncover files nobody wrote, staged like a copy).
    pub staged: &'static str,
}

/// What a staging left to diff against the starting commit.
pub(super) enum Staged {
    /// The runner's index (a full clone or copy).
    Index,
    /// A layer's change, edited into the starting tree: the new tree, None if the same.
    Edited(Option<String>),
    /// A layer staged whole, as a copy is: its tree.
    Whole(String),
}

/// How a task's workspace was made (from its pristine checkout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkspaceKind {
    /// An overlayfs layer over it.
    Overlay,
    /// A copy whose files share the pristine's blocks.
    Reflink,
    /// A copy of its bytes.
    Copy,
}

impl WorkspaceKind {
    /// For the reports (`sandbox` column, transcript, validate).
    pub fn name(self) -> &'static str {
        match self {
            WorkspaceKind::Overlay => "overlay",
            WorkspaceKind::Reflink => "reflink",
            WorkspaceKind::Copy => "copy",
        }
    }
}

/// A task's copy of its repository.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The canonical root.
    pub root: PathBuf,
    /// The runner's own git directory for this workspace, outside it: patches are taken
    /// with it, so nothing the agent writes in the workspace (its `.git/config`,
    /// `.git/info/exclude`, hooks) is read by the runner's git.
    pub(super) shadow: PathBuf,
    /// The commit (in the shadow) the agent started from: after setup.
    pub base: String,
    /// Whether the source was a git repository (else a copied folder).
    pub cloned: bool,
    /// A layer, a reflinked copy or a copy.
    pub kind: WorkspaceKind,
    /// The copy-on-write layer the workspace is, over a pristine checkout (None: a
    /// full clone or copy of its own).
    pub layer: Option<super::layer::Layer>,
    /// A layer's pristine checkout's git folder, whose index a full staging starts from.
    pub(super) pristine_git: Option<PathBuf>,
}

const SAFE_CONFIG: [&str; 12] = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "commit.gpgsign=false",
    "-c",
    "core.autocrlf=false",
    "-c",
    "safe.directory=*",
    "-c",
    "core.quotePath=false",
];

/// Who the runner's commits are by (no user configuration is read).
const IDENTITY: &[&str] = &[
    "-c",
    "user.name=agentbatch",
    "-c",
    "user.email=agentbatch@localhost",
];

/// The message of the commits that mark a starting point.
const START: &str = "agentbatch: starting point";

/// Why a workspace could not be made or read. Each names the path or the git command,
/// so the task's `tool_setup_error` detail says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot run git ({0}); install git to use repo tasks")]
    NoGit(#[source] std::io::Error),
    #[error("git {args} failed: {stderr}")]
    Git { args: String, stderr: String },
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot copy {} to {}: {source}", from.display(), to.display())]
    Copy {
        from: PathBuf,
        to: PathBuf,
        source: std::io::Error,
    },
    #[error("{} already exists", .0.display())]
    Exists(PathBuf),
    #[error("the workspace {} would be inside the repository {} it copies: put the reports elsewhere (--out)", workspace.display(), repo.display())]
    InsideRepository { workspace: PathBuf, repo: PathBuf },
    #[error("ref \"{git_ref}\" is not a branch, tag or commit of {}", repo.display())]
    UnknownRef { git_ref: String, repo: PathBuf },
    #[error("ref is set but {} is not a git repository", .0.display())]
    RefOnFolder(PathBuf),
    #[error("{} is a file but not a git bundle: repo must be a folder, a git repository or a bundle made with `git bundle create`", .0.display())]
    NotABundle(PathBuf),
    #[error("{} is neither a folder nor a git bundle", .0.display())]
    NotAFolder(PathBuf),
}

/// Git with neither the user's nor the system's configuration, in `dir`, its three
/// streams piped, dying with the thread that starts it (run it with [`run`], which
/// waits for it on that thread).
pub(super) fn git_command(dir: &Path, pre: &[&str], args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.args(SAFE_CONFIG)
        .args(pre)
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LANG", "C")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // A clone or a diff of a big tree must not go on writing into the run folder after
    // a kill. `run` waits for it on the thread that starts it, so the kernel's
    // parent-death signal is enough (a warden doubled the time of a patch).
    crate::tools::sandbox::dies_with_caller(&mut cmd);
    cmd
}

/// Runs git with neither the user's nor the system's configuration, `input` on its
/// standard input; the raw output, whatever the exit status.
fn git_raw(
    dir: &Path,
    pre: &[&str],
    args: &[&str],
    input: &[u8],
) -> Result<std::process::Output, WorkspaceError> {
    run(git_command(dir, pre, args), input)
}

/// Runs a command made by [`git_command`] with `input` on its standard input.
pub(super) fn run(mut cmd: Command, input: &[u8]) -> Result<std::process::Output, WorkspaceError> {
    use std::io::Write;
    let mut child = cmd.spawn().map_err(WorkspaceError::NoGit)?;
    let stdin = child.stdin.take();
    std::thread::scope(|s| {
        // Fed from a thread of its own: git may answer before it has read everything,
        // and a full output pipe must not wait on a full input pipe.
        if let Some(mut stdin) = stdin {
            s.spawn(move || {
                // A git that exits early closes the pipe; its status says why.
                let _ = stdin.write_all(input);
            });
        }
        child.wait_with_output().map_err(WorkspaceError::NoGit)
    })
}

/// Runs git with neither the user's nor the system's configuration.
pub(super) fn git_in(dir: &Path, pre: &[&str], args: &[&str]) -> Result<String, WorkspaceError> {
    let out = git_raw(dir, pre, args, &[])?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(WorkspaceError::Git {
            args: args.join(" "),
            stderr: err.trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn git(dir: &Path, args: &[&str]) -> Result<String, WorkspaceError> {
    git_in(dir, &[], args)
}

/// What a task's `repo:` points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    /// A git work tree (`.git` a folder, or a file as in linked work trees).
    Repository,
    /// A bare git repository (`HEAD`, `objects/` and `refs/` at its top).
    Bare,
    /// A git bundle file (`git bundle create`), which `git clone` reads like a remote.
    Bundle,
    /// Any other folder: copied.
    Folder,
}

impl SourceKind {
    /// Looks at `source` (which must exist) to decide how to make a workspace of it.
    pub fn of(source: &Path) -> Result<SourceKind, WorkspaceError> {
        let meta = std::fs::metadata(source).map_err(io("read", source))?;
        if meta.is_file() {
            return if is_bundle(source) {
                Ok(SourceKind::Bundle)
            } else {
                Err(WorkspaceError::NotABundle(source.to_path_buf()))
            };
        }
        if !meta.is_dir() {
            return Err(WorkspaceError::NotAFolder(source.to_path_buf()));
        }
        if source.join(".git").exists() {
            Ok(SourceKind::Repository)
        } else if source.join("HEAD").is_file()
            && source.join("objects").is_dir()
            && source.join("refs").is_dir()
        {
            Ok(SourceKind::Bare)
        } else {
            Ok(SourceKind::Folder)
        }
    }

    /// Whether a workspace of it is a `git clone` (else a copy).
    pub fn is_git(self) -> bool {
        self != SourceKind::Folder
    }
}

/// The folder a task's commands see its workspace at: the repository's own (canonical)
/// path, for a work tree or a plain folder. Links in such a repository may name it by
/// its absolute path, or leave it by `..` and come back by its name; they reach the
/// task's own files, and the same ones under every workspace method, only where the
/// workspace stands in the repository's place. A bundle or a bare repository holds no
/// files of its own: its workspace is seen where it is.
pub fn seen_at(source: &Path) -> Option<PathBuf> {
    let source = source.canonicalize().ok()?;
    match SourceKind::of(&source).ok()? {
        SourceKind::Repository | SourceKind::Folder => Some(source),
        SourceKind::Bare | SourceKind::Bundle => None,
    }
}

/// A bundle starts with `# v2 git bundle` or `# v3 git bundle`.
fn is_bundle(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok()
        && (head.starts_with(b"# v2 git bundle") || head.starts_with(b"# v3 git bundle"))
}

/// `path` made absolute against the current folder, without resolving symlinks: git
/// runs in other folders, so a relative path would point elsewhere.
pub(super) fn absolute(path: &Path) -> Result<PathBuf, WorkspaceError> {
    std::path::absolute(path).map_err(io("resolve", path))
}

/// An I/O failure on `path` while doing `what`.
pub(super) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError {
    let path = path.to_path_buf();
    move |source| WorkspaceError::Io { what, path, source }
}

impl Workspace {
    /// Creates the workspace at `dest` (which must not exist) from `source`, checked out
    /// at `git_ref` for a git repository, with the runner's git directory at `shadow`.
    /// Relative paths are taken from the current folder. On failure nothing is left
    /// behind. Blocking.
    pub fn create(
        source: &Path,
        git_ref: Option<&str>,
        dest: &Path,
        shadow: &Path,
    ) -> Result<Workspace, WorkspaceError> {
        let (dest, shadow) = (absolute(dest)?, absolute(shadow)?);
        if dest.exists() || shadow.exists() {
            return Err(WorkspaceError::Exists(dest));
        }
        let source = source.canonicalize().map_err(io("resolve", source))?;
        let kind = SourceKind::of(&source)?;
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
            let parent = parent.canonicalize().map_err(io("resolve", parent))?;
            if parent.starts_with(&source) {
                return Err(WorkspaceError::InsideRepository {
                    workspace: dest,
                    repo: source,
                });
            }
        }
        let made = Self::make(&source, kind, git_ref, &dest, &shadow);
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dest);
            let _ = std::fs::remove_dir_all(&shadow);
        }
        made
    }

    fn make(
        source: &Path,
        kind: SourceKind,
        git_ref: Option<&str>,
        dest: &Path,
        shadow: &Path,
    ) -> Result<Workspace, WorkspaceError> {
        let cloned = kind.is_git();
        let dest_s = dest.to_string_lossy().into_owned();
        if cloned {
            let src = source.to_string_lossy().into_owned();
            git(
                dest.parent().unwrap_or(Path::new("/")),
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
                    .ok_or_else(|| WorkspaceError::UnknownRef {
                        git_ref: r.to_string(),
                        repo: source.to_path_buf(),
                    })?;
                git(dest, &["checkout", "--quiet", "--detach", commit.trim()])?;
            }
        } else {
            if git_ref.is_some() {
                return Err(WorkspaceError::RefOnFolder(source.to_path_buf()));
            }
            super::copies::copy_tree(source, dest, false, &[]).map_err(|e| {
                WorkspaceError::Copy {
                    from: source.to_path_buf(),
                    to: dest.to_path_buf(),
                    source: e,
                }
            })?;
            // A repository of its own, for the agent's `git diff` and `git status`.
            git(dest, &["init", "--quiet"])?;
            git(dest, &["add", "-A"])?;
            git(
                dest,
                &[
                    IDENTITY,
                    &["commit", "--quiet", "--allow-empty", "-m", START],
                ]
                .concat(),
            )?;
        }
        let root = dest.canonicalize().map_err(io("resolve", dest))?;
        if let Some(parent) = shadow.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        git(
            &root,
            &["init", "--quiet", "--bare", &shadow.to_string_lossy()],
        )?;
        let mut ws = Workspace {
            root,
            shadow: shadow.to_path_buf(),
            base: String::new(),
            cloned,
            kind: WorkspaceKind::Copy,
            layer: None,
            pristine_git: None,
        };
        if cloned {
            ws.track_as_the_repository_does()?;
        }
        ws.snapshot()?;
        Ok(ws)
    }

    /// Files the repository tracks though its .gitignore matches them (added with
    /// `git add -f`) are tracked by the runner too, or a change to one would be left
    /// out of the patch.
    fn track_as_the_repository_does(&self) -> Result<(), WorkspaceError> {
        let args = [
            "ls-files",
            "-z",
            "--cached",
            "--ignored",
            "--exclude-standard",
        ];
        let out = git_raw(&self.root, &[], &args, &[])?;
        if !out.status.success() {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        if out.stdout.is_empty() {
            return Ok(());
        }
        let args = ["add", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"];
        // Names, not patterns: a `*` in one matches only itself.
        let mut specs = Vec::new();
        for p in out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()) {
            specs.extend_from_slice(b":(literal)");
            specs.extend_from_slice(p);
            specs.push(0);
        }
        let added = self.shadow_raw(&args, &specs)?;
        if !added.status.success() {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&added.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// Git in the runner's own repository of this workspace. A file is re-read when
    /// its size or whole-second mtime changed (what an overlay keeps of a lower file;
    /// its inode and device are the overlay's), or when it was written in the second the
    /// index was (git's racy-entry rule).
    pub(super) fn shadow_git(&self, args: &[&str]) -> Result<String, WorkspaceError> {
        self.shadow_bytes(args)
            .map(|out| String::from_utf8_lossy(&out).into_owned())
    }

    /// [`Self::shadow_git`]'s output as git wrote it.
    fn shadow_bytes(&self, args: &[&str]) -> Result<Vec<u8>, WorkspaceError> {
        let out = self.shadow_raw(args, &[])?;
        if !out.status.success() {
            return Err(WorkspaceError::Git {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(out.stdout)
    }

    /// The runner's git with `input` on its standard input, whatever its exit status.
    pub(super) fn shadow_raw(
        &self,
        args: &[&str],
        input: &[u8],
    ) -> Result<std::process::Output, WorkspaceError> {
        run(self.shadow_command(args), input)
    }

    /// The runner's git, to be started by the caller and waited for on the same thread
    /// (it dies with that thread: see [`git_command`]).
    pub(super) fn shadow_command(&self, args: &[&str]) -> Command {
        let gd = format!("--git-dir={}", self.shadow.display());
        let wt = format!("--work-tree={}", self.root.display());
        let pre = [
            &gd,
            &wt,
            "-c",
            "core.checkStat=minimal",
            "-c",
            "core.trustctime=false",
        ];
        git_command(&self.root, &pre, args)
    }

    /// Records the workspace as it is now as the starting point of the patch (after
    /// setup, so that what setup built is not the agent's change). Blocking.
    pub fn snapshot(&mut self) -> Result<(), WorkspaceError> {
        match self.stage()? {
            Staged::Edited(None) => {}
            Staged::Index => {
                let commit = [
                    "commit",
                    "--quiet",
                    "--allow-empty",
                    "--no-verify",
                    "-m",
                    START,
                ];
                self.shadow_git(&[IDENTITY, &commit].concat())?;
                self.base = self.shadow_git(&["rev-parse", "HEAD"])?.trim().to_string();
            }
            Staged::Edited(Some(tree)) | Staged::Whole(tree) => {
                let commit = ["commit-tree", &tree, "-p", &self.base, "-m", START];
                self.base = self
                    .shadow_git(&[IDENTITY, &commit].concat())?
                    .trim()
                    .to_string();
            }
        }
        Ok(())
    }

    /// The agent's change against the starting point, as a git patch (empty when
    /// nothing changed), and the files it touches (`git diff --name-status` lines, for
    /// the transcript). Blocking.
    pub fn patch(&self) -> Result<Patch, WorkspaceError> {
        let (from, to, staged) = match self.stage()? {
            Staged::Edited(None) => {
                return Ok(Patch {
                    staged: "layer",
                    ..Patch::default()
                })
            }
            Staged::Index => (vec!["--cached", &self.base], None, "index"),
            Staged::Edited(Some(tree)) => (vec![self.base.as_str()], Some(tree), "layer"),
            Staged::Whole(tree) => (vec![self.base.as_str()], Some(tree), "whole tree"),
        };
        let with = |opts: &[&str]| {
            let mut args = vec!["diff"];
            args.extend_from_slice(opts);
            args.extend_from_slice(&from);
            args.extend(to.as_deref());
            self.shadow_bytes(&args)
        };
        let diff = with(&["--binary", "--no-color", "--no-ext-diff", "--no-textconv"])?;
        let files = with(&["--name-status", "--no-color"])?;
        Ok(Patch {
            diff,
            files: String::from_utf8_lossy(&files)
                .lines()
                .map(str::to_string)
                .collect(),
            staged,
        })
    }

    /// Deletes the workspace and the runner's repository of it (a layer is unmounted
    /// first; its pristine checkout stays). Blocking.
    pub fn remove(&self) -> std::io::Result<()> {
        let _ = std::fs::remove_dir_all(&self.shadow);
        match &self.layer {
            Some(l) => l.remove(),
            None => std::fs::remove_dir_all(&self.root),
        }
    }

    /// Deletes only the runner's repository (the workspace is kept). Blocking.
    pub fn forget(&self) {
        let _ = std::fs::remove_dir_all(&self.shadow);
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
#[path = "workspace_tests.rs"]
mod tests;
