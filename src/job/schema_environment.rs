//! The `environment:` setting: the container a task's commands run in, and
//! `check_environment`. Resolved in `environments.rs`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::tools::container::{EngineChoice, Network, Pull};
use crate::vocab::values::HumanDuration;

/// A task's container: from an image or a Dockerfile, with its limits. Merged field by
/// field with `defaults`; `image` and `dockerfile` (with `context`) are one choice,
/// taken whole from the nearest layer that makes it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Environment")]
pub struct EnvironmentFields {
    /// An image name (`localhost/py39-django:1`, `python:3.12-slim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub image: Option<String>,
    /// A Dockerfile, relative to the job file: built once per content digest of the
    /// Dockerfile and its context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema_rules::not_blank")]
    pub dockerfile: Option<String>,
    /// The build context, relative to the job file (default: the Dockerfile's folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// When an `image` is pulled: `missing` (default), `always`, `never`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<Pull>,
    /// `auto` (default: podman, else docker), `docker` or `podman`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineChoice>,
    /// CPUs the container may use (`2`, `0.5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.01, max = 1024))]
    pub cpus: Option<f64>,
    /// Memory limit, swap included: a number with `b`, `k`, `m` or `g` (`4g`, `256m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+[bkmgBKMG]?$"))]
    pub memory: Option<String>,
    /// Processes the container may have at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 8))]
    pub pids: Option<u32>,
    /// `none` (default: loopback only) or `bridge`. `setup` gets the network either
    /// way; it is cut before the agent starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Where the workspace is inside the container (default `/workspace` for a task
    /// with a `repo`, the image's own `WORKDIR` for one without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^/"))]
    pub workdir: Option<String>,
    /// The user commands run as (default: the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Variables set in the container, under the task's `env`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("propertyNames" = { "pattern": "^[A-Za-z_][A-Za-z0-9_]*$" }))]
    pub env: Option<BTreeMap<String, String>>,
    /// How long building the Dockerfile (or pulling the image) may take (default 30m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_timeout: Option<HumanDuration>,
}

/// Where a task with an environment runs its check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CheckEnvironment {
    /// In the agent's container, after the agent.
    #[default]
    Same,
    /// In a new container from the same image, over a new workspace with only the
    /// agent's patch applied: nothing else the agent did can change the verdict.
    Fresh,
}
