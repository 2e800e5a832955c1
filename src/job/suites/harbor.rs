//! Harbor task folders (`task.toml`, `instruction.md`, `environment/`, `solution/`,
//! `tests/`) and Terminal-Bench 1 task folders (`task.yaml`, `Dockerfile`,
//! `solution.sh`, `run-tests.sh`, `tests/`), as Harbor's task models and its
//! Terminal-Bench mapper read them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{abs, problem, task_id, text, Read, SuiteTask};
use crate::job::schema::{LimitFields, TaskFields};
use crate::job::schema_environment::EnvironmentFields;
use crate::job::schema_suite::{
    HarborVerifierFields, SolutionFields, SuiteFields, VerifierFields, VerifierMode,
};
use crate::tools::container::Network;
use crate::vocab::values::HumanDuration;

fn secs(s: f64) -> Option<HumanDuration> {
    (s.is_finite() && s > 0.0).then(|| HumanDuration(std::time::Duration::from_secs_f64(s)))
}

/// The task folders under `path`: itself when it is one, the folders a dataset.toml
/// names, else its subfolders that have `marker`.
fn task_dirs(path: &Path, marker: &str, read: &mut Read) -> Vec<PathBuf> {
    if path.is_file() {
        return dataset_dirs(path, read);
    }
    if path.join(marker).is_file() {
        return vec![path.to_path_buf()];
    }
    let mut dirs: Vec<PathBuf> = match std::fs::read_dir(path) {
        Ok(d) => d
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.join(marker).is_file())
            .collect(),
        Err(e) => {
            read.problems
                .push(problem(path, None, format!("cannot list: {e}")));
            return Vec::new();
        }
    };
    if dirs.is_empty() {
        read.problems.push(problem(
            path,
            None,
            format!("no task folder here (a folder with {marker}), nor in its subfolders"),
        ));
    }
    dirs.sort();
    dirs
}

/// The task folders a Harbor `dataset.toml` lists (`[[tasks]] name = "org/name"`),
/// found beside it by the name's last part.
fn dataset_dirs(file: &Path, read: &mut Read) -> Vec<PathBuf> {
    let Some(body) = text(file, read) else {
        return Vec::new();
    };
    let table: toml::Table = match body.parse() {
        Ok(t) => t,
        Err(e) => {
            read.problems
                .push(problem(file, None, format!("not TOML: {e}")));
            return Vec::new();
        }
    };
    let dir = file.parent().unwrap_or(Path::new("."));
    let mut dirs = Vec::new();
    let tasks = table.get("tasks").and_then(toml::Value::as_array);
    for t in tasks.into_iter().flatten() {
        let Some(name) = t.get("name").and_then(toml::Value::as_str) else {
            read.problems
                .push(problem(file, None, "a [[tasks]] entry has no `name`"));
            continue;
        };
        let short = name.rsplit('/').next().unwrap_or(name);
        let folder = dir.join(short);
        if folder.join("task.toml").is_file() {
            dirs.push(folder);
        } else {
            read.problems.push(problem(
                file,
                None,
                format!(
                    "task {name}: no task folder {} beside the dataset.toml (download the dataset's tasks there first)",
                    folder.display()
                ),
            ));
        }
    }
    dirs
}

pub(super) fn read(path: &Path, suite: &SuiteFields, read: &mut Read) {
    for dir in task_dirs(path, "task.toml", read) {
        harbor_task(&dir, suite, read);
    }
}

fn table<'a>(t: &'a toml::Table, key: &str) -> Option<&'a toml::Table> {
    t.get(key).and_then(toml::Value::as_table)
}

fn number(t: Option<&toml::Table>, key: &str) -> Option<f64> {
    let v = t?.get(key)?;
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

fn strings(t: Option<&toml::Table>, key: &str) -> Option<BTreeMap<String, String>> {
    let m = t?.get(key)?.as_table()?;
    Some(
        m.iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect(),
    )
}

fn harbor_task(dir: &Path, suite: &SuiteFields, read: &mut Read) {
    let file = dir.join("task.toml");
    let Some(body) = text(&file, read) else {
        return;
    };
    let config: toml::Table = match body.parse() {
        Ok(t) => t,
        Err(e) => {
            read.problems
                .push(problem(&file, None, format!("not TOML: {e}")));
            return;
        }
    };
    let before = read.problems.len();
    if config.contains_key("steps") {
        read.problems.push(problem(
            &file,
            None,
            "multi-step tasks (`steps`) are not supported yet: exclude this task",
        ));
    }
    let instruction = dir.join("instruction.md");
    let prompt = if instruction.is_file() {
        text(&instruction, read)
    } else {
        read.problems.push(problem(
            &instruction,
            None,
            "the task folder has no instruction.md (the prompt)",
        ));
        None
    };
    let (agent, verifier, env) = (
        table(&config, "agent"),
        table(&config, "verifier"),
        table(&config, "environment"),
    );
    let environment = environment_of(dir, env, &file, read);
    let tests = dir.join("tests");
    if !tests.join("test.sh").is_file() {
        read.problems.push(problem(
            &tests.join("test.sh"),
            None,
            "the task folder has no tests/test.sh (the verifier)",
        ));
    }
    let mode = verifier_mode(verifier, &file, read);
    if read.problems.len() > before {
        return;
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let Some(id) = task_id(&name, &file, None, read) else {
        return;
    };
    let solution = dir.join("solution");
    let fields = TaskFields {
        id: Some(id),
        prompt,
        environment,
        limits: number(agent, "timeout_sec")
            .and_then(secs)
            .map(|t| LimitFields {
                time_limit: Some(t),
                ..Default::default()
            }),
        solution: solution.join("solve.sh").is_file().then(|| SolutionFields {
            patch: None,
            dir: Some(abs(&solution)),
        }),
        verifier: Some(VerifierFields::Harbor(HarborVerifierFields {
            tests: abs(&tests),
            script: None,
            timeout: secs(number(verifier, "timeout_sec").unwrap_or(600.0)),
            env: strings(verifier, "env"),
            threshold: suite.threshold,
            environment_mode: (mode == VerifierMode::Separate).then_some(mode),
            reward_from_exit_code: None,
        })),
        ..Default::default()
    };
    read.tasks.push(SuiteTask {
        fields,
        file,
        line: None,
    });
}

/// `[environment]`: the image, or environment/Dockerfile with the folder as context,
/// and the limits; None (with the problem recorded) when there is neither.
fn environment_of(
    dir: &Path,
    env: Option<&toml::Table>,
    file: &Path,
    read: &mut Read,
) -> Option<EnvironmentFields> {
    let image = env
        .and_then(|e| e.get("docker_image"))
        .and_then(toml::Value::as_str)
        .map(str::to_string);
    let dockerfile = dir.join("environment").join("Dockerfile");
    if image.is_none() && !dockerfile.is_file() {
        let compose = dir.join("environment").join("docker-compose.yaml");
        read.problems.push(problem(
            file,
            None,
            if compose.is_file() {
                "environment: docker-compose tasks are not supported yet (one container per task): exclude this task"
            } else {
                "environment: neither `docker_image` nor environment/Dockerfile"
            },
        ));
        return None;
    }
    let network = network_of(env, file, read);
    Some(EnvironmentFields {
        dockerfile: image.is_none().then(|| abs(&dockerfile)),
        context: image.is_none().then(|| abs(&dir.join("environment"))),
        image,
        cpus: number(env, "cpus"),
        memory: number(env, "memory_mb").map(|m| format!("{}m", m as u64)),
        network,
        workdir: env
            .and_then(|e| e.get("workdir"))
            .and_then(toml::Value::as_str)
            .map(str::to_string),
        env: strings(env, "env"),
        build_timeout: secs(number(env, "build_timeout_sec").unwrap_or(600.0)),
        ..Default::default()
    })
}

/// `[verifier] environment_mode`: shared (Harbor's default) or separate.
fn verifier_mode(verifier: Option<&toml::Table>, file: &Path, read: &mut Read) -> VerifierMode {
    match verifier
        .and_then(|v| v.get("environment_mode"))
        .and_then(toml::Value::as_str)
    {
        None | Some("shared") => VerifierMode::Shared,
        Some("separate") => VerifierMode::Separate,
        Some(other) => {
            read.problems.push(problem(
                file,
                None,
                format!("verifier.environment_mode \"{other}\" is neither shared nor separate"),
            ));
            VerifierMode::Shared
        }
    }
}

/// Harbor's network modes: `public` (the default) is the bridge, `no-network` is
/// none; an allowlist cannot be kept by one engine network, so it is refused.
fn network_of(env: Option<&toml::Table>, file: &Path, read: &mut Read) -> Option<Network> {
    let allow = env
        .and_then(|e| e.get("allow_internet"))
        .and_then(toml::Value::as_bool);
    match env
        .and_then(|e| e.get("network_mode"))
        .and_then(toml::Value::as_str)
    {
        Some("no-network") => Some(Network::None),
        Some("public") => Some(Network::Bridge),
        None if allow == Some(false) => Some(Network::None),
        None => Some(Network::Bridge),
        Some(other) => {
            read.problems.push(problem(
                file,
                None,
                format!("environment.network_mode \"{other}\" is not supported (public or no-network): exclude this task"),
            ));
            None
        }
    }
}

/// Terminal-Bench 1 task folders, mapped as Harbor's `mappers/terminal_bench.py` maps
/// them: the Dockerfile beside task.yaml, `run-tests.sh` with `TEST_DIR=/tests` as the
/// verifier (exit 0 is reward 1), `solution.sh` as the oracle's.
pub(super) fn read_terminal_bench(path: &Path, suite: &SuiteFields, read: &mut Read) {
    for dir in task_dirs(path, "task.yaml", read) {
        terminal_bench_task(&dir, suite, read);
    }
}

#[derive(serde::Deserialize)]
struct TbTask {
    instruction: Option<String>,
    descriptions: Option<Vec<TbDescription>>,
    #[serde(default = "tb_agent_timeout")]
    max_agent_timeout_sec: f64,
    #[serde(default = "tb_test_timeout")]
    max_test_timeout_sec: f64,
}

#[derive(serde::Deserialize)]
struct TbDescription {
    key: Option<String>,
    description: String,
}

fn tb_agent_timeout() -> f64 {
    360.0
}
fn tb_test_timeout() -> f64 {
    60.0
}

fn terminal_bench_task(dir: &Path, suite: &SuiteFields, read: &mut Read) {
    let file = dir.join("task.yaml");
    let Some(body) = text(&file, read) else {
        return;
    };
    let task: TbTask = match serde_yaml::from_str(&body) {
        Ok(t) => t,
        Err(e) => {
            read.problems.push(problem(
                &file,
                None,
                format!("not a Terminal-Bench task.yaml: {e}"),
            ));
            return;
        }
    };
    let prompt = task.instruction.or_else(|| {
        let d = task.descriptions?;
        d.iter()
            .find(|d| d.key.as_deref() == Some("base"))
            .or(d.first())
            .map(|d| d.description.clone())
    });
    let before = read.problems.len();
    if prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
        read.problems
            .push(problem(&file, None, "no `instruction`: the task's prompt"));
    }
    let dockerfile = dir.join("Dockerfile");
    if !dockerfile.is_file() {
        read.problems.push(problem(
            &file,
            None,
            "no Dockerfile beside task.yaml (tasks built from docker-compose services alone are not supported yet)",
        ));
    }
    let script = dir.join("run-tests.sh");
    if !script.is_file() {
        read.problems.push(problem(
            &script,
            None,
            "the task folder has no run-tests.sh",
        ));
    }
    if read.problems.len() > before {
        return;
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let Some(id) = task_id(&name, &file, None, read) else {
        return;
    };
    let solution = dir.join("solution.sh");
    let tests = dir.join("tests");
    let fields = TaskFields {
        id: Some(id),
        prompt,
        environment: Some(EnvironmentFields {
            dockerfile: Some(abs(&dockerfile)),
            context: Some(abs(dir)),
            network: Some(Network::Bridge),
            ..Default::default()
        }),
        limits: secs(task.max_agent_timeout_sec).map(|t| LimitFields {
            time_limit: Some(t),
            ..Default::default()
        }),
        solution: solution.is_file().then(|| SolutionFields {
            patch: None,
            dir: Some(abs(dir)),
        }),
        verifier: Some(VerifierFields::Harbor(HarborVerifierFields {
            tests: abs(if tests.is_dir() { &tests } else { dir }),
            script: Some(abs(&script)),
            timeout: secs(task.max_test_timeout_sec),
            env: Some(BTreeMap::from([(
                "TEST_DIR".to_string(),
                "/tests".to_string(),
            )])),
            threshold: suite.threshold,
            environment_mode: None,
            reward_from_exit_code: Some(true),
        })),
        ..Default::default()
    };
    read.tasks.push(SuiteTask {
        fields,
        file,
        line: None,
    });
}
