//! A task's image, made ready once per run and shared by every task that names it: a
//! name pulled as `pull` says, or a Dockerfile built once per content digest (the tag
//! derives from the Dockerfile's and the context's bytes, so an edit rebuilds and
//! nothing else does, across runs too). Pulls and builds are limited to a few at once;
//! the tasks that need an image wait for it, outside their time limit.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::{OnceCell, Semaphore};

use super::engine::{Engine, QUICK};
use super::ContainerError;

/// When an image named by `image:` is pulled.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Deserialize,
    Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Pull {
    /// Only when the engine does not have it.
    #[default]
    Missing,
    /// Before the first task that needs it, every run.
    Always,
    /// Never: a missing image stops its tasks.
    Never,
}

impl Pull {
    pub fn name(self) -> &'static str {
        match self {
            Pull::Missing => "missing",
            Pull::Always => "always",
            Pull::Never => "never",
        }
    }
}

/// Where a task's image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// An image name (`localhost/py39:1`, `python:3.12-slim`).
    Image(String),
    /// A Dockerfile and its build context, both absolute.
    Dockerfile {
        dockerfile: PathBuf,
        context: PathBuf,
    },
}

/// How an image was made ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// The engine had it.
    Present,
    Pulled,
    Built,
}

/// An image ready to start containers from.
#[derive(Debug, Clone)]
pub struct Ready {
    /// The name containers are created from (a Dockerfile's derived tag).
    pub name: String,
    /// The image id (`sha256:...`), which names it whatever tag moves.
    pub id: String,
    /// The image's own working directory (`WORKDIR`), "" when it sets none.
    pub workdir: String,
    /// The image's own `USER`, "" when it sets none (root).
    pub user: String,
    pub made: Made,
    /// Milliseconds spent pulling or building (0 when present).
    pub ms: u64,
    /// The build's or pull's log, when there was one.
    pub log: Option<PathBuf>,
}

impl Ready {
    /// The id's first 12 hex digits, as engines print it.
    pub fn short_id(&self) -> &str {
        let hex = self.id.strip_prefix("sha256:").unwrap_or(&self.id);
        &hex[..hex.len().min(12)]
    }
}

/// The tag a Dockerfile's image gets: its content digest's first 16 hex digits.
pub fn build_tag(digest: &str) -> String {
    format!(
        "localhost/agentbatch-env:{}",
        &digest[..16.min(digest.len())]
    )
}

/// The content digest of a build: the Dockerfile's bytes and every file of the context
/// (its path, executable bit and bytes; a symbolic link's target), in path order, so
/// the same bytes give the same digest on any machine. Blocking.
pub fn context_digest(dockerfile: &Path, context: &Path) -> Result<String, ContainerError> {
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| ContainerError::Io { what, path, source }
    };
    let mut h = Sha256::new();
    h.update(b"agentbatch build context 1\0");
    let bytes = std::fs::read(dockerfile).map_err(io("read the Dockerfile", dockerfile))?;
    h.update((bytes.len() as u64).to_le_bytes());
    h.update(&bytes);
    let mut files = Vec::new();
    walk(context, context, &mut files).map_err(io("read the build context", context))?;
    files.sort();
    let mut buf = vec![0u8; 64 * 1024];
    for rel in files {
        let path = context.join(&rel);
        let meta = std::fs::symlink_metadata(&path).map_err(io("read", &path))?;
        h.update(rel.as_os_str().as_encoded_bytes());
        h.update(b"\0");
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(io("read", &path))?;
            h.update(b"l");
            h.update(target.as_os_str().as_encoded_bytes());
        } else {
            use std::os::unix::fs::PermissionsExt;
            h.update(if meta.permissions().mode() & 0o111 != 0 {
                b"x"
            } else {
                b"f"
            });
            h.update(meta.len().to_le_bytes());
            let mut f = std::fs::File::open(&path).map_err(io("read", &path))?;
            loop {
                let n = f.read(&mut buf).map_err(io("read", &path))?;
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
            }
        }
        h.update(b"\0");
    }
    Ok(format!("{:x}", h.finalize()))
}

/// Every file and symbolic link under `dir`, relative to `root` (folders are implied).
fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = entry.path();
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if !(kind.is_file() || kind.is_symlink()) {
            // A FIFO, socket or device would block or mean nothing: not content.
            continue;
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_path_buf());
        }
    }
    Ok(())
}

/// What `image inspect` says of an image.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    #[serde(default)]
    config: Option<InspectedConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    user: Option<String>,
}

/// What the engine says of an image: its id, `WORKDIR` and `USER`.
pub struct Inspect {
    pub id: String,
    pub workdir: String,
    pub user: String,
}

impl Inspect {
    fn ready(self, name: &str, made: Made, ms: u64, log: Option<PathBuf>) -> Ready {
        Ready {
            name: name.to_string(),
            id: self.id,
            workdir: self.workdir,
            user: self.user,
            made,
            ms,
            log,
        }
    }
}

/// The image `name` as the engine has it; None when it has not.
pub async fn inspect(engine: &Engine, name: &str) -> Result<Option<Inspect>, ContainerError> {
    match engine.run(&["image", "inspect", name], QUICK).await {
        Ok(out) => {
            let v: Vec<Inspected> =
                serde_json::from_slice(&out.stdout).map_err(|e| ContainerError::Engine {
                    call: format!("{} image inspect", engine.name),
                    message: format!("cannot read its answer: {e}"),
                })?;
            Ok(v.into_iter().next().map(|i| {
                let (workdir, user) = i
                    .config
                    .map(|c| (c.working_dir, c.user))
                    .unwrap_or_default();
                // Docker says `sha256:<hex>`, podman the bare hex: one form.
                let id = if i.id.contains(':') {
                    i.id
                } else {
                    format!("sha256:{}", i.id)
                };
                Inspect {
                    id,
                    workdir: workdir.unwrap_or_default(),
                    user: user.unwrap_or_default(),
                }
            }))
        }
        // "no such image" and its variants: the engine has not got it.
        Err(ContainerError::Engine { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// One image made ready once, or why it could not be.
type Once = Arc<OnceCell<Result<Ready, String>>>;

/// The run's images: each made ready once, whichever task asks first; the others wait
/// for the same answer (a failure too: it is not retried within the run).
pub struct Images {
    logs: PathBuf,
    ready: Mutex<HashMap<(String, Source, Pull), Once>>,
    slots: Semaphore,
}

/// Pulls and builds at once, per run.
pub const SLOTS: usize = 2;

impl Images {
    /// Images whose build and pull logs go in `logs` (made when first needed).
    pub fn new(logs: PathBuf) -> Images {
        Images {
            logs,
            ready: Mutex::new(HashMap::new()),
            slots: Semaphore::new(SLOTS),
        }
    }

    /// The image of `source` on `engine`, pulled or built as needed, once per run. The
    /// error names the image and the log file, for the task's `tool_setup_error`.
    pub async fn get(
        &self,
        engine: &Engine,
        source: &Source,
        pull: Pull,
        build_timeout: Duration,
    ) -> Result<Ready, String> {
        let cell = {
            let mut map = self.ready.lock().unwrap_or_else(|e| e.into_inner());
            map.entry((engine.name.to_string(), source.clone(), pull))
                .or_default()
                .clone()
        };
        let mut made_here = false;
        let ready = cell
            .get_or_init(|| async {
                made_here = true;
                let _slot = self.slots.acquire().await;
                self.make(engine, source, pull, build_timeout).await
            })
            .await
            .clone();
        // Only the task that pulled or built says so; the others found it made.
        ready.map(|r| {
            if made_here {
                r
            } else {
                Ready {
                    made: Made::Present,
                    ms: 0,
                    ..r
                }
            }
        })
    }

    async fn make(
        &self,
        engine: &Engine,
        source: &Source,
        pull: Pull,
        build_timeout: Duration,
    ) -> Result<Ready, String> {
        match source {
            Source::Image(name) => self.pulled(engine, name, pull, build_timeout).await,
            Source::Dockerfile {
                dockerfile,
                context,
            } => self.built(engine, dockerfile, context, build_timeout).await,
        }
    }

    async fn pulled(
        &self,
        engine: &Engine,
        name: &str,
        pull: Pull,
        timeout: Duration,
    ) -> Result<Ready, String> {
        let have = inspect(engine, name).await.map_err(|e| e.to_string())?;
        let ready = |found: Inspect, made, ms, log| found.ready(name, made, ms, log);
        match (have, pull) {
            (Some(found), Pull::Missing | Pull::Never) => {
                return Ok(ready(found, Made::Present, 0, None))
            }
            (None, Pull::Never) => {
                return Err(format!(
                    "image {name} is not on this machine ({}) and the task's environment has pull: never: build or load it first (`{} pull {name}`), or set pull: missing",
                    engine.version, engine.name
                ))
            }
            _ => {}
        }
        let log = self.log_file(&format!("pull-{}", slug(name)))?;
        let started = Instant::now();
        engine
            .run_logged(&["pull", name], timeout, Some(&log))
            .await
            .map_err(|e| {
                format!(
                    "cannot pull image {name}: {e} (the engine's output is in {})",
                    log.display()
                )
            })?;
        let ms = started.elapsed().as_millis() as u64;
        let found = inspect(engine, name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("image {name} was pulled but the engine does not show it"))?;
        Ok(ready(found, Made::Pulled, ms, Some(log)))
    }

    async fn built(
        &self,
        engine: &Engine,
        dockerfile: &Path,
        context: &Path,
        timeout: Duration,
    ) -> Result<Ready, String> {
        let (d, c) = (dockerfile.to_path_buf(), context.to_path_buf());
        let digest = tokio::task::spawn_blocking(move || context_digest(&d, &c))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let tag = build_tag(&digest);
        if let Some(found) = inspect(engine, &tag).await.map_err(|e| e.to_string())? {
            return Ok(found.ready(&tag, Made::Present, 0, None));
        }
        let log = self.log_file(&format!("build-{}", &digest[..16]))?;
        let started = Instant::now();
        let label = format!("agentbatch.digest={digest}");
        let (df, ctx) = (
            dockerfile.display().to_string(),
            context.display().to_string(),
        );
        engine
            .run_logged(
                &["build", "-f", &df, "-t", &tag, "--label", &label, &ctx],
                timeout,
                Some(&log),
            )
            .await
            .map_err(|e| {
                format!(
                    "cannot build the image of {df}: {e} (the build log is {})",
                    log.display()
                )
            })?;
        let ms = started.elapsed().as_millis() as u64;
        let found = inspect(engine, &tag)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!("the image of {df} was built as {tag} but the engine does not show it")
            })?;
        Ok(found.ready(&tag, Made::Built, ms, Some(log)))
    }

    fn log_file(&self, stem: &str) -> Result<PathBuf, String> {
        std::fs::create_dir_all(&self.logs)
            .map_err(|e| format!("cannot create {}: {e}", self.logs.display()))?;
        Ok(self.logs.join(format!("{stem}.log")))
    }
}

/// An image name as a file name.
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect()
}

/// What `validate` says of an image before a run: present (with its id), to pull or to
/// build (with the tag its content digest gives), or missing under `pull: never` (an
/// error, the second value true). Blocking.
pub fn state(engine: &Engine, source: &Source, pull: Pull) -> (String, bool) {
    let inspect_now = |name: &str| {
        let out = std::process::Command::new(&engine.program)
            .args(["image", "inspect", "--format", "{{.Id}}", name])
            .stdin(std::process::Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {
                let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
                Some(if id.contains(':') {
                    id
                } else {
                    format!("sha256:{id}")
                })
            }
            _ => None,
        }
    };
    match source {
        Source::Image(name) => match (inspect_now(name), pull) {
            (Some(id), Pull::Always) => (format!("image {name}: present ({id}), pulled again (pull: always)"), false),
            (Some(id), _) => (format!("image {name}: present ({id})"), false),
            (None, Pull::Never) => (
                format!("image {name}: not on this machine, and pull: never: build or load it, or set pull: missing"),
                true,
            ),
            (None, _) => (format!("image {name}: to pull"), false),
        },
        Source::Dockerfile { dockerfile, context } => match context_digest(dockerfile, context) {
            Ok(digest) => {
                let tag = build_tag(&digest);
                match inspect_now(&tag) {
                    Some(id) => (format!("dockerfile {}: built as {tag} ({id})", dockerfile.display()), false),
                    None => (
                        format!("dockerfile {}: to build as {tag} (content digest sha256:{digest})", dockerfile.display()),
                        false,
                    ),
                }
            }
            Err(e) => (format!("dockerfile {}: {e}", dockerfile.display()), true),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_changes_with_any_byte_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = dir.path().join("ctx");
        std::fs::create_dir_all(ctx.join("sub")).unwrap();
        std::fs::write(ctx.join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(ctx.join("sub/a"), "a").unwrap();
        let df = ctx.join("Dockerfile");
        let first = context_digest(&df, &ctx).unwrap();
        assert_eq!(
            first,
            context_digest(&df, &ctx).unwrap(),
            "same bytes, same digest"
        );
        // A touch changes nothing.
        std::fs::write(ctx.join("sub/a"), "a").unwrap();
        assert_eq!(first, context_digest(&df, &ctx).unwrap());
        std::fs::write(ctx.join("sub/a"), "b").unwrap();
        let second = context_digest(&df, &ctx).unwrap();
        assert_ne!(first, second, "a context file's bytes count");
        std::fs::write(ctx.join("Dockerfile"), "FROM y\n").unwrap();
        assert_ne!(
            second,
            context_digest(&df, &ctx).unwrap(),
            "the Dockerfile counts"
        );
        // A file moved between names is another context.
        std::fs::write(ctx.join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(ctx.join("sub/a"), "a").unwrap();
        std::fs::rename(ctx.join("sub/a"), ctx.join("sub/b")).unwrap();
        assert_ne!(first, context_digest(&df, &ctx).unwrap());
        assert!(build_tag(&first).starts_with("localhost/agentbatch-env:"));
    }
}
