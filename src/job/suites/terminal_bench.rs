//! Terminal-Bench 1 task folders (`task.yaml`, `Dockerfile`, `docker-compose.yaml`,
//! `solution.sh`, `run-tests.sh`, `tests/`), as Harbor's Terminal-Bench mapper reads
//! them.

use std::collections::BTreeMap;
use std::path::Path;

use super::task_folder::{duration, inside, task_dirs, var_name};
use super::{abs, problem, task_id, text, Read, SuiteTask};
use crate::job::schema::{LimitFields, TaskFields};
use crate::job::schema_environment::EnvironmentFields;
use crate::job::schema_suite::{HarborVerifierFields, SolutionFields, SuiteFields, VerifierFields};
use crate::tools::container::Network;

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
