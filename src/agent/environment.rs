//! A task's container around its loop: the engine (found once per run, when the run
//! also removes what killed runners left), the image (pulled or built once per run),
//! the workspace an image-only task gets (the image's workdir, copied out once per
//! image), the container, and the fresh container a `check_environment: fresh` check
//! runs in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::OnceCell;

use crate::job::{RepoSpec, TaskSpec};
use crate::tools::container::{
    image::Made, owner_label, remove_leftovers, Container, Engine, EngineChoice, EnvironmentConfig,
    Images, Network, Ready, Start, DEFAULT_WORKDIR, QUICK,
};
use crate::vocab::log::TaskLog;
use crate::vocab::transcript::TranscriptEvent;

/// The label that names a container's run folder.
const RUN_LABEL: &str = "agentbatch.run";
/// The label that names a container's task.
const TASK_LABEL: &str = "agentbatch.task";

type Extracted = Arc<OnceCell<Result<PathBuf, String>>>;

/// The run's engines, images and extracted workdirs.
pub struct Containers {
    /// The run folder.
    dir: PathBuf,
    /// Where build and pull logs and image workdirs go.
    envs: PathBuf,
    images: Images,
    engines: tokio::sync::Mutex<HashMap<EngineChoice, Result<Engine, String>>>,
    extracted: Mutex<HashMap<(String, String), Extracted>>,
    serial: AtomicU64,
}

/// What a task's environment made ready before its workspace: the engine, the image,
/// where the workspace goes in the container, and for an image-only task the
/// repository its workspace is made from (the image's workdir, copied out).
pub struct Got {
    pub engine: Engine,
    pub image: Ready,
    pub workdir: String,
    pub repo: RepoSpec,
    pub ms: u64,
}

impl Containers {
    /// The containers of the run in `dir`; build and pull logs, and the workdirs
    /// copied out of images, go in `envs`.
    pub fn for_run(dir: &Path, envs: PathBuf) -> Containers {
        Containers {
            dir: dir.to_path_buf(),
            images: Images::new(envs.clone()),
            envs,
            engines: tokio::sync::Mutex::new(HashMap::new()),
            extracted: Mutex::new(HashMap::new()),
            serial: AtomicU64::new(1),
        }
    }

    /// The engine `choice` names, found once per run; finding it removes the
    /// containers of runners that are gone (a killed run's, see
    /// `tools::container::remove_leftovers`) before the run starts any.
    pub async fn engine(&self, choice: EngineChoice) -> Result<Engine, String> {
        let mut map = self.engines.lock().await;
        if let Some(found) = map.get(&choice) {
            return found.clone();
        }
        let found = tokio::task::spawn_blocking(move || Engine::find(choice))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        if let Ok(engine) = &found {
            // A failure to list is not this task's: the next run tries again.
            let _ = remove_leftovers(engine).await;
        }
        map.insert(choice, found.clone());
        found
    }

    /// The engine, the image and the workdir of a task's environment; for a task
    /// without a repository, its workspace's source: the image's workdir, copied out
    /// once per image and workdir. The error is the task's `tool_setup_error` detail.
    pub async fn get(&self, config: &EnvironmentConfig, repo: &RepoSpec) -> Result<Got, String> {
        let started = Instant::now();
        let engine = self.engine(config.engine).await?;
        let image = self
            .images
            .get(&engine, &config.source, config.pull, config.build_timeout)
            .await?;
        let workdir = match (&config.workdir, repo.in_image) {
            (Some(w), _) => w.clone(),
            (None, false) => DEFAULT_WORKDIR.to_string(),
            (None, true) if !image.workdir.is_empty() && image.workdir != "/" => {
                image.workdir.clone()
            }
            (None, true) => {
                return Err(format!(
                    "the image {} sets no WORKDIR, and the task has no `repo`: set environment.workdir to the folder in the image the agent works on",
                    image.name
                ))
            }
        };
        let repo = if repo.in_image {
            let path = self.extract(&engine, &image, &workdir).await?;
            RepoSpec {
                path,
                ..repo.clone()
            }
        } else {
            repo.clone()
        };
        Ok(Got {
            engine,
            image,
            workdir,
            repo,
            ms: started.elapsed().as_millis() as u64,
        })
    }

    /// The image's `workdir`, copied out to the run folder once per image and workdir
    /// (the source every task of that image makes its workspace from).
    async fn extract(
        &self,
        engine: &Engine,
        image: &Ready,
        workdir: &str,
    ) -> Result<PathBuf, String> {
        let cell = {
            let mut map = self.extracted.lock().unwrap_or_else(|e| e.into_inner());
            map.entry((image.id.clone(), workdir.to_string()))
                .or_default()
                .clone()
        };
        let dir = self
            .envs
            .join(format!("{}{}", image.short_id(), workdir.replace('/', "_")));
        cell.get_or_init(|| async {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            let name = format!(
                "agentbatch-extract-{}-{:012x}",
                self.serial.fetch_add(1, Ordering::SeqCst),
                rand::random::<u64>() >> 16
            );
            let (owner, who) = owner_label();
            let label = format!("{owner}={who}");
            let fail = |e: crate::tools::container::ContainerError| {
                format!("cannot copy {workdir} out of the image {}: {e}", image.name)
            };
            engine
                .run(
                    &[
                        "create",
                        "--name",
                        &name,
                        "--label",
                        &label,
                        &image.name,
                        "sh",
                    ],
                    QUICK,
                )
                .await
                .map_err(fail)?;
            let from = format!("{name}:{}/.", workdir.trim_end_matches('/'));
            let copied = engine
                .run(&["cp", &from, &dir.display().to_string()], QUICK * 10)
                .await;
            let _ = engine.run(&["rm", "-f", &name], QUICK).await;
            copied.map_err(fail)?;
            Ok(dir.clone())
        })
        .await
        .clone()
    }

    /// Starts a container of `got`'s image for `spec` over `workspace`, with its
    /// control folder in `tmp`, and tells the transcript; `purpose` names a fresh
    /// check's container.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        &self,
        spec: &TaskSpec,
        config: &EnvironmentConfig,
        got: &Got,
        workspace: &Path,
        tmp: &Path,
        network_for_setup: bool,
        purpose: Option<&str>,
        log: &TaskLog,
    ) -> Result<Container, String> {
        let serial = self.serial.fetch_add(1, Ordering::SeqCst);
        let id: String = spec.id.chars().take(80).collect();
        // A pid is reused, and a killed run's stopped containers keep their names until
        // the next run removes them: the random part keeps names apart.
        let name = format!(
            "agentbatch-{id}-{serial}-{:012x}",
            rand::random::<u64>() >> 16
        );
        let run = self.dir.canonicalize().unwrap_or_else(|_| self.dir.clone());
        let labels = vec![
            owner_label(),
            (RUN_LABEL.to_string(), run.display().to_string()),
            (TASK_LABEL.to_string(), spec.id.clone()),
        ];
        let control = tmp.join(if purpose.is_some() {
            "control-fresh"
        } else {
            "control"
        });
        let container = Container::start(Start {
            engine: &got.engine,
            image: &got.image,
            config,
            name,
            workspace,
            workdir: got.workdir.clone(),
            control,
            labels,
            task_env: &spec.env,
            read_only: alternates(workspace),
            network_for_setup,
        })
        .await
        .map_err(|e| {
            format!(
                "cannot start the container of image {}: {e}",
                got.image.name
            )
        })?;
        let (build_ms, pull_ms) = match got.image.made {
            Made::Built => (got.image.ms, 0),
            Made::Pulled => (0, got.image.ms),
            Made::Present => (0, 0),
        };
        log.emit(TranscriptEvent::Environment {
            engine: got.engine.version.clone(),
            image: got.image.name.clone(),
            image_id: got.image.id.clone(),
            made: match got.image.made {
                Made::Built => "built",
                Made::Pulled => "pulled",
                Made::Present => "present",
            }
            .into(),
            build_ms,
            pull_ms,
            start_ms: container.start_ms,
            container: container.name.clone(),
            workdir: got.workdir.clone(),
            limits: config.limits_text(),
            log: got.image.log.as_ref().map(|p| p.display().to_string()),
            purpose: purpose.map(str::to_string),
        });
        Ok(container)
    }
}

/// The object folders a workspace's git borrows (`.git/objects/info/alternates`: a
/// clone's pristine checkout, by its path on this machine), which the container must
/// see at the same paths for git to work inside it.
fn alternates(workspace: &Path) -> Vec<PathBuf> {
    let file = workspace.join(".git/objects/info/alternates");
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('/') && !l.contains(':'))
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect()
}

/// What the `sandbox` column says of a task's container: `container podman
/// sha256:0123456789ab, cpus 2, memory 4g, pids 512, no network`.
pub fn level(got: &Got, config: &EnvironmentConfig) -> String {
    format!(
        "container {} sha256:{}, {}",
        got.engine.name,
        got.image.short_id(),
        config.limits_text()
    )
}

/// What the `environment` column says: the image's name and id.
pub fn column(got: &Got) -> String {
    format!("{}@{}", got.image.name, got.image.id)
}

/// Whether setup needs the network the agent will not have.
pub fn network_for_setup(config: &EnvironmentConfig, repo: &RepoSpec) -> bool {
    config.network == Network::None && repo.setup.is_some()
}
