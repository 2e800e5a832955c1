//! The Harbor and Terminal-Bench readers on task folders made here, hostile ones too.

use std::path::{Path, PathBuf};

use super::harbor::read;
use super::terminal_bench::read_terminal_bench;
use super::Read;
use crate::job::schema_suite::{SuiteFields, VerifierFields};

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
