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
use crate::vocab::values::{HumanDuration, MAX_DURATION};

/// Seconds as Harbor writes them, as a duration: a problem naming `field` unless they
/// are a number above 0 and at most a year (a job file's own longest duration).
fn duration(s: f64, field: &str, file: &Path, read: &mut Read) -> Option<HumanDuration> {
    match std::time::Duration::try_from_secs_f64(s) {
        Ok(d) if s > 0.0 && d <= MAX_DURATION => Some(HumanDuration(d)),
        _ => {
            read.problems.push(problem(
                file,
                None,
                format!("{field} = {s}: not a number of seconds above 0 and at most a year"),
            ));
            None
        }
    }
}

/// A name a shell can export.
fn var_name(k: &str) -> bool {
    k.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A section of a task.toml (`[environment]`, `[agent]`, ...), read with its file at
/// hand: a value of the wrong type, or a setting this runner cannot honour, is a
/// problem that names its field, never a setting quietly dropped.
struct Section<'a> {
    name: &'static str,
    table: Option<&'a toml::Table>,
    file: &'a Path,
}

impl<'a> Section<'a> {
    fn of(config: &'a toml::Table, name: &'static str, file: &'a Path) -> Section<'a> {
        Section {
            name,
            table: config.get(name).and_then(toml::Value::as_table),
            file,
        }
    }

    fn field(&self, key: &str) -> String {
        format!("{}.{key}", self.name)
    }

    fn get(&self, key: &str) -> Option<&'a toml::Value> {
        self.table?.get(key)
    }

    fn wrong(&self, key: &str, what: &str, read: &mut Read) {
        read.problems.push(problem(
            self.file,
            None,
            format!("{} must be {what}", self.field(key)),
        ));
    }

    fn number(&self, key: &str, read: &mut Read) -> Option<f64> {
        let v = self.get(key)?;
        let n = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
        if n.is_none() {
            self.wrong(key, "a number", read);
        }
        n
    }

    fn str(&self, key: &str, read: &mut Read) -> Option<&'a str> {
        let v = self.get(key)?;
        if v.as_str().is_none() {
            self.wrong(key, "a string", read);
        }
        v.as_str()
    }

    fn bool(&self, key: &str, read: &mut Read) -> Option<bool> {
        let v = self.get(key)?;
        if v.as_bool().is_none() {
            self.wrong(key, "true or false", read);
        }
        v.as_bool()
    }

    /// `key` in seconds, `default` when absent.
    fn seconds(&self, key: &str, default: Option<f64>, read: &mut Read) -> Option<HumanDuration> {
        let s = match self.get(key) {
            Some(_) => self.number(key, read)?,
            None => default?,
        };
        duration(s, &self.field(key), self.file, read)
    }

    /// A table of variables: names a shell can export, string values, and no `${VAR}`
    /// template (Harbor fills those from the machine's own environment, which would
    /// hand this machine's secrets to the task).
    fn env(&self, key: &str, read: &mut Read) -> Option<BTreeMap<String, String>> {
        let v = self.get(key)?;
        let Some(m) = v.as_table() else {
            self.wrong(key, "a table of NAME = \"value\"", read);
            return None;
        };
        let mut out = BTreeMap::new();
        for (k, v) in m {
            let field = format!("{}.{k}", self.field(key));
            let name_ok = var_name(k);
            let problem_with = |why: String| problem(self.file, None, format!("{field}: {why}"));
            if !name_ok {
                read.problems.push(problem_with(
                    "not a variable name (letters, digits and '_', not starting with a digit)"
                        .into(),
                ));
                continue;
            }
            match v.as_str() {
                Some(s) if s.contains("${") => read.problems.push(problem_with(
                    "`${VAR}` templates take their value from this machine's environment, which agentbatch does not hand to a suite's task: write the value in the task.toml, or exclude this task".into(),
                )),
                Some(s) => {
                    out.insert(k.clone(), s.to_string());
                }
                None => read
                    .problems
                    .push(problem_with("must be a string".into())),
            }
        }
        Some(out)
    }

    /// Refuses `key` when it is set to anything but an empty value: a setting whose
    /// meaning this runner does not give.
    fn refuse(&self, key: &str, why: &str, read: &mut Read) {
        let set = match self.get(key) {
            None => false,
            Some(toml::Value::Array(a)) => !a.is_empty(),
            Some(toml::Value::Table(t)) => !t.is_empty(),
            Some(toml::Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        };
        if set {
            read.problems.push(problem(
                self.file,
                None,
                format!("{}: {why}: exclude this task", self.field(key)),
            ));
        }
    }
}

/// The task folders under `path`: itself when it is one, the folders a dataset.toml
/// names, else its subfolders that have `marker`.
fn task_dirs(path: &Path, marker: &str, read: &mut Read) -> Vec<PathBuf> {
    if path.is_file() {
        if path.file_name().is_some_and(|n| n == marker) {
            return vec![path.parent().unwrap_or(Path::new(".")).to_path_buf()];
        }
        if marker == "task.toml" {
            return dataset_dirs(path, read);
        }
        read.problems.push(problem(
            path,
            None,
            format!("not a {marker}: give a task folder (with {marker}), or a folder of them"),
        ));
        return Vec::new();
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
    if tasks.is_none_or(|t| t.is_empty()) {
        read.problems.push(problem(
            file,
            None,
            "names no tasks: a Harbor dataset.toml lists them as [[tasks]] entries with a `name`",
        ));
    }
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

/// Whether `path` (a file or folder of task folder `dir`) stays inside it: a symbolic
/// link out of it (to `~/.ssh`, say) is refused, so that a downloaded task cannot make
/// the runner send a file of this machine to the model or copy it into a container.
fn inside(dir: &Path, path: &Path, file: &Path, read: &mut Read) -> bool {
    let linked = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if !linked {
        return true;
    }
    let (Ok(root), Ok(target)) = (std::fs::canonicalize(dir), std::fs::canonicalize(path)) else {
        read.problems.push(problem(
            file,
            None,
            format!("{} is a symbolic link that leads nowhere", path.display()),
        ));
        return false;
    };
    if target.starts_with(&root) {
        return true;
    }
    read.problems.push(problem(
        file,
        None,
        format!(
            "{} is a symbolic link out of the task folder (to {}): refused, so that a task cannot have files of this machine read or copied",
            path.display(),
            target.display()
        ),
    ));
    false
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
    let prompt = if !inside(dir, &instruction, &file, read) {
        None
    } else if instruction.is_file() {
        text(&instruction, read)
    } else {
        read.problems.push(problem(
            &instruction,
            None,
            "the task folder has no instruction.md (the prompt)",
        ));
        None
    };
    let agent = Section::of(&config, "agent", &file);
    let verifier = Section::of(&config, "verifier", &file);
    let env = Section::of(&config, "environment", &file);
    let environment = environment_of(dir, &env, read);
    if let Some(net) = environment.as_ref().and_then(|e| e.network) {
        for phase in [&agent, &verifier] {
            phase_network(phase, net, read);
        }
    }
    unsupported(&config, &env, &agent, &verifier, read);
    let tests = dir.join("tests");
    if inside(dir, &tests, &file, read) && !tests.join("test.sh").is_file() {
        read.problems.push(problem(
            &tests.join("test.sh"),
            None,
            "the task folder has no tests/test.sh (the verifier)",
        ));
    }
    let solution = dir.join("solution");
    let solution_ok = inside(dir, &solution, &file, read);
    let mode = verifier_mode(&verifier, read);
    let time_limit = agent.seconds("timeout_sec", None, read);
    let timeout = verifier.seconds("timeout_sec", Some(600.0), read);
    let verifier_env = verifier.env("env", read);
    if read.problems.len() > before {
        return;
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let Some(id) = task_id(&name, &file, None, read) else {
        return;
    };
    let fields = TaskFields {
        id: Some(id),
        prompt,
        environment,
        limits: time_limit.map(|t| LimitFields {
            time_limit: Some(t),
            ..Default::default()
        }),
        solution: (solution_ok && solution.join("solve.sh").is_file()).then(|| SolutionFields {
            patch: None,
            dir: Some(abs(&solution)),
        }),
        verifier: Some(VerifierFields::Harbor(HarborVerifierFields {
            tests: Some(abs(&tests)),
            script: None,
            timeout,
            env: verifier_env,
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

/// The settings of task.toml this runner does not give (each would change what the
/// task means), refused by name; `storage_mb` alone is accepted unenforced, as
/// Harbor's own Docker environment leaves it (docs/guide/suites.md says so).
fn unsupported(
    config: &toml::Table,
    env: &Section<'_>,
    agent: &Section<'_>,
    verifier: &Section<'_>,
    read: &mut Read,
) {
    if let Some(os) = env.str("os", read) {
        if !os.eq_ignore_ascii_case("linux") {
            env.refuse("os", "only Linux containers run here", read);
        }
    }
    if env.number("gpus", read).is_some_and(|g| g > 0.0) {
        env.refuse("gpus", "task containers get no GPUs here", read);
    }
    env.refuse("gpu_types", "task containers get no GPUs here", read);
    env.refuse("tpu", "task containers get no TPUs here", read);
    env.refuse(
        "mcp_servers",
        "a task's own MCP servers are not started yet (a job's `mcp:` servers are)",
        read,
    );
    env.refuse("healthcheck", "health checks are not run yet", read);
    env.refuse("skills_dir", "skills are not supported yet", read);
    for s in [env, agent, verifier] {
        s.refuse(
            "allowed_hosts",
            "a host allowlist cannot be kept by an engine network (the task gets the network or none)",
            read,
        );
    }
    for s in [agent, verifier] {
        s.refuse(
            "user",
            "the agent and the tests run as the image's USER here; another user is not supported yet",
            read,
        );
    }
    verifier.refuse(
        "environment",
        "a verifier image of its own is not supported yet",
        read,
    );
    verifier.refuse("collect", "collect commands are not supported yet", read);
    Section::of(config, "solution", env.file).refuse(
        "env",
        "variables for solution/solve.sh are not supported yet",
        read,
    );
}

/// `[agent]` or `[verifier]` `network_mode`: the same as the environment's, or refused
/// (one container keeps one network for both phases).
fn phase_network(phase: &Section<'_>, env: Network, read: &mut Read) {
    let Some(mode) = phase.str("network_mode", read) else {
        return;
    };
    match network_mode(mode) {
        Some(n) if n == env => {}
        Some(_) => phase.refuse(
            "network_mode",
            "a network per phase is not supported yet (the agent and the tests get [environment]'s)",
            read,
        ),
        None => phase.refuse(
            "network_mode",
            &format!("\"{mode}\" is not supported (public or no-network)"),
            read,
        ),
    }
}

fn network_mode(mode: &str) -> Option<Network> {
    match mode {
        "public" => Some(Network::Bridge),
        "no-network" => Some(Network::None),
        _ => None,
    }
}

/// `[environment]`: the image, or environment/Dockerfile with the folder as context,
/// and the limits; None (with the problem recorded) when there is neither.
fn environment_of(dir: &Path, env: &Section<'_>, read: &mut Read) -> Option<EnvironmentFields> {
    let file = env.file;
    let image = env.str("docker_image", read).map(str::to_string);
    let context = dir.join("environment");
    let dockerfile = context.join("Dockerfile");
    if image.is_none() && !dockerfile.is_file() {
        let compose = context.join("docker-compose.yaml");
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
    if image.is_none() && !inside(dir, &context, file, read) {
        return None;
    }
    let network = network_of(env, read);
    let cpus = env.number("cpus", read);
    if cpus.is_some_and(|c| !(c > 0.0 && c.is_finite())) {
        env.wrong("cpus", "a number above 0", read);
    }
    Some(EnvironmentFields {
        dockerfile: image.is_none().then(|| abs(&dockerfile)),
        context: image.is_none().then(|| abs(&context)),
        image,
        cpus,
        memory: memory_of(env, read),
        network,
        workdir: env.str("workdir", read).map(str::to_string),
        env: env.env("env", read),
        build_timeout: env.seconds("build_timeout_sec", Some(600.0), read),
        ..Default::default()
    })
}

/// `memory_mb`, or the older `memory = "4G"` as Harbor reads it (G, M or K; the two
/// must agree when both are given), as the engine's `--memory`.
fn memory_of(env: &Section<'_>, read: &mut Read) -> Option<String> {
    let mb = match env.get("memory_mb") {
        Some(v) => match v.as_integer() {
            Some(m) if m > 0 => Some(m as u64),
            _ => {
                env.wrong("memory_mb", "a whole number of MB above 0", read);
                return None;
            }
        },
        None => None,
    };
    let legacy = match env.str("memory", read) {
        Some(m) => {
            let m = m.trim().to_ascii_uppercase();
            let parsed = m
                .strip_suffix('G')
                .map(|n| (n, 1024.0))
                .or_else(|| m.strip_suffix('M').map(|n| (n, 1.0)))
                .or_else(|| m.strip_suffix('K').map(|n| (n, 1.0 / 1024.0)))
                .and_then(|(n, scale)| n.trim().parse::<f64>().ok().map(|n| n * scale))
                .filter(|mb| mb.is_finite() && *mb >= 1.0 && *mb < 1e12);
            match parsed {
                Some(v) => Some(v as u64),
                None => {
                    env.wrong("memory", "a size such as \"4G\" or \"512M\"", read);
                    return None;
                }
            }
        }
        None => None,
    };
    match (mb, legacy) {
        (Some(a), Some(b)) if a != b => {
            env.wrong(
                "memory",
                &format!("the same as memory_mb ({a} MB) when both are given, not {b} MB"),
                read,
            );
            None
        }
        (Some(m), _) | (None, Some(m)) => Some(format!("{m}m")),
        (None, None) => None,
    }
}

/// `[verifier] environment_mode`: shared (Harbor's default) or separate.
fn verifier_mode(verifier: &Section<'_>, read: &mut Read) -> VerifierMode {
    match verifier.str("environment_mode", read) {
        None | Some("shared") => VerifierMode::Shared,
        Some("separate") => VerifierMode::Separate,
        Some(other) => {
            verifier.wrong(
                "environment_mode",
                &format!("shared or separate, not \"{other}\""),
                read,
            );
            VerifierMode::Shared
        }
    }
}

/// Harbor's network modes: `public` (the default) is the bridge, `no-network` is
/// none; an allowlist cannot be kept by one engine network, so it is refused.
fn network_of(env: &Section<'_>, read: &mut Read) -> Option<Network> {
    let allow = env.bool("allow_internet", read);
    match env.str("network_mode", read) {
        Some(mode) => match network_mode(mode) {
            Some(n) => Some(n),
            None => {
                env.refuse(
                    "network_mode",
                    &format!("\"{mode}\" is not supported (public or no-network)"),
                    read,
                );
                None
            }
        },
        None if allow == Some(false) => Some(Network::None),
        None => Some(Network::Bridge),
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
    let compose = compose_of(dir, read);
    let script = dir.join("run-tests.sh");
    if !script.is_file() {
        read.problems.push(problem(
            &script,
            None,
            "the task folder has no run-tests.sh",
        ));
    }
    let solution = dir.join("solution.sh");
    let tests = dir.join("tests");
    // Every link is named, not only the first.
    let linked_out = [&dockerfile, &script, &solution, &tests]
        .into_iter()
        .filter(|p| !inside(dir, p, &file, read))
        .count();
    let time_limit = duration(
        task.max_agent_timeout_sec,
        "max_agent_timeout_sec",
        &file,
        read,
    );
    let timeout = duration(
        task.max_test_timeout_sec,
        "max_test_timeout_sec",
        &file,
        read,
    );
    if read.problems.len() > before || linked_out > 0 {
        return;
    }
    let name = dir.file_name().unwrap_or_default().to_string_lossy();
    let Some(id) = task_id(&name, &file, None, read) else {
        return;
    };
    let fields = TaskFields {
        id: Some(id),
        prompt,
        environment: Some(EnvironmentFields {
            dockerfile: Some(abs(&dockerfile)),
            context: Some(abs(dir)),
            network: Some(Network::Bridge),
            workdir: compose.workdir,
            env: (!compose.env.is_empty()).then_some(compose.env),
            ..Default::default()
        }),
        limits: time_limit.map(|t| LimitFields {
            time_limit: Some(t),
            ..Default::default()
        }),
        solution: solution.is_file().then(|| SolutionFields {
            patch: None,
            dir: Some(abs(dir)),
        }),
        verifier: Some(VerifierFields::Harbor(HarborVerifierFields {
            // Without tests/, only the script goes in (not the whole task folder,
            // with its solution).
            tests: tests.is_dir().then(|| abs(&tests)),
            script: Some(abs(&script)),
            timeout,
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

/// What a Terminal-Bench docker-compose.yaml adds to its one container.
#[derive(Default)]
struct Compose {
    workdir: Option<String>,
    env: BTreeMap<String, String>,
}

/// The task's docker-compose.yaml, when it has one, read as Harbor's mapper collapses
/// it into the Dockerfile: one service, Terminal-Bench's own volumes, its `environment`
/// and `working_dir` kept; anything else (a second service, ports, other volumes) is
/// refused by name, since one container per task cannot give it.
fn compose_of(dir: &Path, read: &mut Read) -> Compose {
    let file = dir.join("docker-compose.yaml");
    let mut out = Compose::default();
    if !file.is_file() || !inside(dir, &file, &file, read) {
        return out;
    }
    let Some(body) = text(&file, read) else {
        return out;
    };
    let mut refuse = |why: String| {
        read.problems
            .push(problem(&file, None, format!("{why}: exclude this task")))
    };
    let doc: serde_yaml::Value = match serde_yaml::from_str(&body) {
        Ok(v) => v,
        Err(e) => {
            refuse(format!("not YAML: {e}"));
            return out;
        }
    };
    let Some(top) = doc.as_mapping() else {
        refuse("not a compose file (a mapping with `services`)".into());
        return out;
    };
    for key in top.keys() {
        let key = key.as_str().unwrap_or("?");
        if !matches!(key, "services" | "version") {
            refuse(format!("`{key}`: only one container per task runs here"));
        }
    }
    let services = top.get("services").and_then(serde_yaml::Value::as_mapping);
    let service = match services.map(|s| s.len()) {
        // No service: nothing to add to the Dockerfile's container.
        Some(0) => None,
        Some(1) => services.and_then(|s| s.values().next()),
        Some(n) => {
            refuse(format!(
                "services: {n} services, but one container per task runs here"
            ));
            None
        }
        None => {
            refuse("no `services`".into());
            None
        }
    };
    let Some(service) = service.and_then(serde_yaml::Value::as_mapping) else {
        return out;
    };
    const TB_VOLUMES: [&str; 2] = [
        "${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
        "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}",
    ];
    for (key, value) in service {
        let key = key.as_str().unwrap_or("?");
        match key {
            // Terminal-Bench's harness names the image and keeps the container up;
            // here the Dockerfile beside task.yaml is built and the runner keeps it up.
            "build" | "image" | "container_name" | "command" | "expose" | "entrypoint"
            | "platform" => {}
            "volumes" => {
                let ok = value.as_sequence().is_some_and(|v| {
                    v.iter()
                        .all(|m| m.as_str().is_some_and(|m| TB_VOLUMES.contains(&m)))
                });
                if !ok {
                    refuse("volumes: only Terminal-Bench's log volumes are supported".into());
                }
            }
            "working_dir" => match value.as_str() {
                Some(w) if !w.contains("${") => out.workdir = Some(w.to_string()),
                _ => refuse("working_dir: not a plain path".into()),
            },
            "environment" => {
                let pairs: Vec<(String, String)> = match value {
                    serde_yaml::Value::Sequence(items) => items
                        .iter()
                        .map(|i| {
                            let i = i.as_str().unwrap_or_default();
                            let (k, v) = i.split_once('=').unwrap_or((i, ""));
                            (k.to_string(), v.to_string())
                        })
                        .collect(),
                    serde_yaml::Value::Mapping(m) => m
                        .iter()
                        .map(|(k, v)| {
                            let v = match v {
                                serde_yaml::Value::String(s) => s.clone(),
                                serde_yaml::Value::Number(n) => n.to_string(),
                                serde_yaml::Value::Bool(b) => b.to_string(),
                                _ => String::new(),
                            };
                            (k.as_str().unwrap_or_default().to_string(), v)
                        })
                        .collect(),
                    _ => {
                        refuse("environment: neither a list nor a mapping".into());
                        Vec::new()
                    }
                };
                for (k, v) in pairs {
                    if k == "TEST_DIR" && v == "${T_BENCH_TEST_DIR}" {
                        continue;
                    }
                    if !var_name(&k) || v.contains("${") {
                        refuse(format!(
                            "environment: {k}: only plain NAME=value variables are supported (no `${{VAR}}` from this machine's environment)"
                        ));
                        continue;
                    }
                    out.env.insert(k, v);
                }
            }
            other => refuse(format!(
                "services: `{other}` is not supported (one container per task, no ports, no dependencies)"
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite() -> SuiteFields {
        serde_yaml::from_str("{format: harbor, path: x}").unwrap()
    }

    /// A Harbor task folder with `toml` as its task.toml.
    fn task(root: &Path, name: &str, toml: &str) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("tests")).unwrap();
        std::fs::create_dir_all(dir.join("environment")).unwrap();
        std::fs::write(dir.join("task.toml"), toml).unwrap();
        std::fs::write(dir.join("instruction.md"), "do it").unwrap();
        std::fs::write(
            dir.join("tests/test.sh"),
            "echo 1 > /logs/verifier/reward.txt",
        )
        .unwrap();
        std::fs::write(dir.join("environment/Dockerfile"), "FROM x").unwrap();
        dir
    }

    fn read_one(dir: &Path) -> Read {
        let mut r = Read::default();
        read(dir, &suite(), &mut r);
        r
    }

    fn messages(r: &Read) -> String {
        r.problems
            .iter()
            .map(|p| format!("{}: {}", p.file, p.message))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn huge_or_wrong_timeouts_are_problems_not_panics() {
        let root = tempfile::tempdir().unwrap();
        for (name, toml) in [
            ("huge", "[agent]\ntimeout_sec = 1e20\n"),
            ("nan", "[verifier]\ntimeout_sec = nan\n"),
            ("neg", "[agent]\ntimeout_sec = -5\n"),
            ("text", "[verifier]\ntimeout_sec = \"600\"\n"),
            ("build", "[environment]\nbuild_timeout_sec = inf\n"),
        ] {
            let dir = task(root.path(), name, toml);
            let r = read_one(&dir);
            assert!(r.tasks.is_empty(), "{name}");
            let m = messages(&r);
            assert!(m.contains("task.toml: "), "{name}: {m}");
            assert!(m.contains("timeout_sec"), "{name}: {m}");
        }
        let dir = task(root.path(), "ok", "[agent]\ntimeout_sec = 90.5\n");
        let r = read_one(&dir);
        assert!(r.problems.is_empty(), "{}", messages(&r));
        let limits = r.tasks[0].fields.limits.as_ref().unwrap();
        assert_eq!(
            limits.time_limit.as_ref().unwrap().0,
            std::time::Duration::from_millis(90_500)
        );
    }

    #[test]
    fn settings_that_cannot_be_honoured_are_refused_by_field() {
        let root = tempfile::tempdir().unwrap();
        for (toml, field) in [
            ("[agent]\nuser = \"agent\"\n", "agent.user"),
            ("[verifier]\nuser = 1000\n", "verifier.user"),
            (
                "[verifier.environment]\ndocker_image = \"x\"\n",
                "verifier.environment",
            ),
            (
                "[agent]\nnetwork_mode = \"no-network\"\n",
                "agent.network_mode",
            ),
            (
                "[environment]\nallowed_hosts = [\"pypi.org\"]\n",
                "environment.allowed_hosts",
            ),
            ("[environment]\ngpus = 1\n", "environment.gpus"),
            ("[environment]\nos = \"windows\"\n", "environment.os"),
            (
                "[environment.healthcheck]\ncommand = \"true\"\n",
                "environment.healthcheck",
            ),
            (
                "[[environment.mcp_servers]]\nname = \"m\"\n",
                "environment.mcp_servers",
            ),
            ("[solution.env]\nA = \"1\"\n", "solution.env"),
            (
                "[verifier.env]\nKEY = \"${OPENAI_API_KEY}\"\n",
                "verifier.env.KEY",
            ),
            (
                "[environment.env]\n\"A-B\" = \"1\"\n",
                "environment.env.A-B",
            ),
            ("[verifier.env]\nN = 3\n", "verifier.env.N"),
            ("[environment]\nmemory = \"lots\"\n", "environment.memory"),
            (
                "[environment]\nmemory = \"4G\"\nmemory_mb = 1024\n",
                "environment.memory",
            ),
            (
                "[environment]\nnetwork_mode = \"allowlist\"\n",
                "environment.network_mode",
            ),
        ] {
            let dir = task(root.path(), "t", toml);
            let r = read_one(&dir);
            assert!(r.tasks.is_empty(), "{toml}");
            let m = messages(&r);
            assert!(m.contains(field), "{toml}: {m}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn settings_it_can_honour_are_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = task(
            root.path(),
            "t",
            "[agent]\nnetwork_mode = \"public\"\n[environment]\nmemory = \"4G\"\ncpus = 2\nstorage_mb = 10240\n[environment.env]\nA = \"1\"\n[verifier.env]\nB = \"2\"\n",
        );
        let r = read_one(&dir);
        assert!(r.problems.is_empty(), "{}", messages(&r));
        let f = &r.tasks[0].fields;
        let env = f.environment.as_ref().unwrap();
        assert_eq!(env.memory.as_deref(), Some("4096m"));
        assert_eq!(env.cpus, Some(2.0));
        assert_eq!(env.env.as_ref().unwrap()["A"], "1");
        let Some(VerifierFields::Harbor(v)) = &f.verifier else {
            panic!("no verifier")
        };
        assert_eq!(v.env.as_ref().unwrap()["B"], "2");
    }

    #[test]
    fn a_task_toml_path_is_its_folder_and_an_empty_dataset_is_a_problem() {
        let root = tempfile::tempdir().unwrap();
        let dir = task(root.path(), "one", "");
        let r = read_one(&dir.join("task.toml"));
        assert_eq!(r.tasks.len(), 1, "{}", messages(&r));
        std::fs::write(root.path().join("dataset.toml"), "name = \"d\"\n").unwrap();
        let r = read_one(&root.path().join("dataset.toml"));
        assert!(r.tasks.is_empty());
        assert!(messages(&r).contains("names no tasks"), "{}", messages(&r));
    }

    #[test]
    fn links_out_of_the_task_folder_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let secret = root.path().join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("id_rsa"), "KEY").unwrap();
        let dir = task(root.path(), "t", "");
        std::fs::remove_file(dir.join("instruction.md")).unwrap();
        std::os::unix::fs::symlink(secret.join("id_rsa"), dir.join("instruction.md")).unwrap();
        let r = read_one(&dir);
        assert!(r.tasks.is_empty());
        assert!(messages(&r).contains("symbolic link out of the task folder"));
        // A link that stays inside is fine.
        std::fs::remove_file(dir.join("instruction.md")).unwrap();
        std::fs::write(dir.join("prompt.md"), "do it").unwrap();
        std::os::unix::fs::symlink("prompt.md", dir.join("instruction.md")).unwrap();
        std::fs::remove_dir_all(dir.join("tests")).unwrap();
        std::fs::create_dir_all(&secret).unwrap();
        std::os::unix::fs::symlink(&secret, dir.join("tests")).unwrap();
        let r = read_one(&dir);
        assert!(r.tasks.is_empty());
        let m = messages(&r);
        assert!(m.contains("/tests is a symbolic link out"), "{m}");
        assert!(!m.contains("instruction.md"), "{m}");
    }

    fn tb_task(root: &Path, name: &str, compose: Option<&str>, tests: bool) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("task.yaml"), "instruction: do it\n").unwrap();
        std::fs::write(dir.join("Dockerfile"), "FROM x").unwrap();
        std::fs::write(dir.join("run-tests.sh"), "true").unwrap();
        if let Some(c) = compose {
            std::fs::write(dir.join("docker-compose.yaml"), c).unwrap();
        }
        if tests {
            std::fs::create_dir_all(dir.join("tests")).unwrap();
        }
        dir
    }

    fn read_tb(dir: &Path) -> Read {
        let mut r = Read::default();
        read_terminal_bench(dir, &suite(), &mut r);
        r
    }

    #[test]
    fn terminal_bench_compose_files_are_collapsed_or_refused_as_harbor_does() {
        let root = tempfile::tempdir().unwrap();
        let usual = "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}\n    command: [\"sh\", \"-c\", \"sleep infinity\"]\n    environment:\n      - TEST_DIR=${T_BENCH_TEST_DIR}\n      - MODE=fast\n    working_dir: /app\n    volumes:\n      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}\n      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}\n";
        let r = read_tb(&tb_task(root.path(), "usual", Some(usual), false));
        assert!(r.problems.is_empty(), "{}", messages(&r));
        let f = &r.tasks[0].fields;
        let env = f.environment.as_ref().unwrap();
        assert_eq!(env.workdir.as_deref(), Some("/app"));
        assert_eq!(env.env.as_ref().unwrap().len(), 1);
        assert_eq!(env.env.as_ref().unwrap()["MODE"], "fast");
        let Some(VerifierFields::Harbor(v)) = &f.verifier else {
            panic!("no verifier")
        };
        // No tests/: only run-tests.sh goes in, not the folder with the solution.
        assert_eq!(v.tests, None);
        assert!(v.script.as_deref().unwrap().ends_with("usual/run-tests.sh"));
        for (name, compose, says) in [
            (
                "two",
                "services:\n  client:\n    build: .\n  db:\n    image: postgres\n",
                "2 services",
            ),
            (
                "ports",
                "services:\n  client:\n    build: .\n    ports: [\"80:80\"]\n",
                "`ports`",
            ),
            (
                "vol",
                "services:\n  client:\n    build: .\n    volumes: [\"/:/host\"]\n",
                "volumes",
            ),
            (
                "secret",
                "services:\n  client:\n    build: .\n    environment:\n      KEY: ${OPENAI_API_KEY}\n",
                "environment: KEY",
            ),
            (
                "net",
                "services:\n  client:\n    build: .\nnetworks:\n  n: {}\n",
                "`networks`",
            ),
        ] {
            let r = read_tb(&tb_task(root.path(), name, Some(compose), true));
            assert!(r.tasks.is_empty(), "{name}");
            let m = messages(&r);
            assert!(
                m.contains("docker-compose.yaml: ") && m.contains(says),
                "{name}: {m}"
            );
        }
    }

    #[test]
    fn terminal_bench_timeouts_out_of_range_are_problems() {
        let root = tempfile::tempdir().unwrap();
        let dir = tb_task(root.path(), "t", None, true);
        std::fs::write(
            dir.join("task.yaml"),
            "instruction: x\nmax_agent_timeout_sec: 1.0e300\n",
        )
        .unwrap();
        let r = read_tb(&dir);
        assert!(r.tasks.is_empty());
        assert!(messages(&r).contains("max_agent_timeout_sec"));
    }
}
