//! The part of the process environment a job is checked against, read once when the
//! job is loaded: expansion never calls `std::env`, so it gives the same answer for the
//! same snapshot and can be tested with a made-up one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::tools::container::{Engine, EngineChoice};

/// Which environment variables are set (to something non-empty). Only names are kept:
/// the checks ask whether an API key or an MCP server's `${VAR}` is there, never what
/// it is, so no key is copied into a second place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Environment {
    set: BTreeSet<String>,
    /// The job is only queued here (`run --queue`): the workers that run it need the
    /// provider keys, the machine that queues it does not.
    pub keys_on_workers: bool,
    /// Where the run's reports and workspaces will go, when the command knows it
    /// (`run`, `validate --out`, a worker): `workspaces: reflink` is checked there.
    pub run_folder: Option<RunFolder>,
    /// The container engines tasks' `environment:` asks for, probed once per choice.
    pub engines: Engines,
}

/// Container engines as found here, probed on the first task that asks for each.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Engines {
    probed: [OnceLock<Result<Engine, String>>; 3],
}

impl Engines {
    /// The engine `choice` names, or why there is none.
    pub fn get(&self, choice: EngineChoice) -> Result<&Engine, &str> {
        let slot = match choice {
            EngineChoice::Auto => 0,
            EngineChoice::Docker => 1,
            EngineChoice::Podman => 2,
        };
        self.probed[slot]
            .get_or_init(|| Engine::find(choice).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(String::as_str)
    }
}

/// The folder a run will write its workspaces in, and whether files can be reflinked
/// there: probed once, on the first task that asks for reflinks, in the nearest folder
/// of its path that exists (a folder made later is on its parent's filesystem).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RunFolder {
    path: PathBuf,
    reflinks: OnceLock<Result<(), String>>,
}

impl RunFolder {
    pub fn new(path: &Path) -> RunFolder {
        RunFolder {
            path: path.to_path_buf(),
            reflinks: OnceLock::new(),
        }
    }

    /// Why files there cannot be reflinked; None where they can.
    pub fn no_reflinks(&self) -> Option<&str> {
        self.reflinks
            .get_or_init(|| {
                let full = std::path::absolute(&self.path).unwrap_or_else(|_| self.path.clone());
                let Some(dir) = full.ancestors().find(|d| d.is_dir()) else {
                    return Err(format!("{} cannot be made", full.display()));
                };
                match crate::tools::copies::probe_reflinks(dir) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(format!(
                        "{} is on a filesystem without them (ext4, tmpfs, overlayfs, ...)",
                        dir.display()
                    )),
                    Err(e) => Err(format!(
                        "no scratch file can be written in {} to try ({e})",
                        dir.display()
                    )),
                }
            })
            .as_ref()
            .err()
            .map(String::as_str)
    }
}

impl Environment {
    /// The variables of this process, now.
    pub fn from_process() -> Environment {
        Environment {
            set: std::env::vars_os()
                .filter(|(_, v)| !v.is_empty())
                .filter_map(|(k, _)| k.into_string().ok())
                .collect(),
            keys_on_workers: false,
            run_folder: None,
            engines: Engines::default(),
        }
    }

    /// An environment in which exactly `names` are set, whatever the process has.
    #[cfg(test)]
    pub fn with_set<I, S>(names: I) -> Environment
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Environment {
            set: names.into_iter().map(Into::into).collect(),
            keys_on_workers: false,
            run_folder: None,
            engines: Engines::default(),
        }
    }

    /// Whether `name` is set to a non-empty value (an empty key is no key).
    pub fn is_set(&self, name: &str) -> bool {
        self.set.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_up_environment_answers_for_itself() {
        let env = Environment::with_set(["ANTHROPIC_API_KEY"]);
        assert!(env.is_set("ANTHROPIC_API_KEY"));
        assert!(!env.is_set("OPENAI_API_KEY"));
        assert!(!Environment::default().is_set("ANTHROPIC_API_KEY"));
    }
}
