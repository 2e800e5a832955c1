//! Harbor task folders (`task.toml`, `instruction.md`, `environment/`, `solution/`,
//! `tests/`), as Harbor's task models read them.

use std::collections::BTreeMap;
use std::path::Path;

use super::task_folder::{duration, inside, task_dirs, var_name};
use super::{abs, problem, task_id, text, Read, SuiteTask};
use crate::job::schema::{LimitFields, TaskFields};
use crate::job::schema_environment::EnvironmentFields;
use crate::job::schema_suite::{
    HarborVerifierFields, SolutionFields, SuiteFields, VerifierFields, VerifierMode,
};
use crate::tools::container::Network;
use crate::vocab::values::HumanDuration;

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

pub(super) fn read(path: &Path, suite: &SuiteFields, read: &mut Read) {
    for dir in task_dirs(path, "task.toml", read) {
        harbor_task(&dir, suite, read);
    }
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
