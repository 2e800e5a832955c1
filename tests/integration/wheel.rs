//! The Python wheel (issue 33): maturin builds it from pyproject.toml (the dev profile,
//! which reuses the test build), pip installs it into a fresh virtual environment, and
//! the `agentbatch` on that environment's PATH says its version and runs the demo.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::ok;

fn python() -> String {
    std::env::var("AGENTBATCH_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("AGENTBATCH_TEST_PYTHON is not set: the wheel test builds with maturin from tests/python/.venv; run it through ./tests/run.sh (e.g. ./tests/run.sh --test integration wheel)")
    })
}

#[test]
fn pip_installs_the_wheel_and_its_agentbatch_runs_the_demo() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    ok(
        Command::new(python())
            .args(["-m", "maturin", "build", "--profile", "dev", "--out"])
            .arg(&wheels)
            .current_dir(root),
        "maturin build",
    );
    let wheel: PathBuf = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .expect("a wheel");
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!(
            "agentbatch-{}-py3-none-",
            env!("CARGO_PKG_VERSION")
        )),
        "{name}"
    );
    let venv = tmp.path().join("venv");
    ok(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "python3 -m venv",
    );
    ok(
        Command::new(venv.join("bin/pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-index",
            ])
            .arg(&wheel),
        "pip install the wheel",
    );
    // The package's metadata, as pip sees it.
    let shown = ok(
        Command::new(venv.join("bin/pip")).args(["show", "--verbose", "agentbatch"]),
        "pip show",
    );
    for want in [
        "Summary: Run many LLM agent loops in batch under hard budgets",
        "License: Apache-2.0",
        "Classifiers:",
        "Repository, https://",
    ] {
        assert!(shown.contains(want), "{want} in {shown}");
    }
    // On the environment's PATH, as `pip install` users get it.
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let which = ok(
        Command::new("sh")
            .args(["-c", "command -v agentbatch"])
            .env("PATH", &path),
        "command -v agentbatch",
    );
    assert_eq!(Path::new(which.trim()), venv.join("bin/agentbatch"));
    let version = ok(
        Command::new("agentbatch")
            .arg("--version")
            .env("PATH", &path),
        "agentbatch --version",
    );
    assert!(
        version.starts_with(&format!(
            "agentbatch {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{version}"
    );
    // The demo, from a folder of its own with the jobs copied in.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    ok(
        Command::new("cp")
            .arg("-r")
            .arg(root.join("jobs"))
            .arg(&work),
        "cp -r jobs",
    );
    let out = Command::new("agentbatch")
        .args(["run", "jobs/demo.yaml", "--quiet", "--run-id", "demo"])
        .env("PATH", &path)
        .current_dir(&work)
        .output()
        .unwrap();
    // The demo shows failing stop reasons on purpose: its exit is 1 when tasks fail.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = std::fs::read_to_string(work.join("reports/demo/results.csv")).unwrap();
    assert_eq!(
        results.lines().count(),
        9,
        "eight tasks and a header:\n{results}"
    );
    assert!(work.join("reports/demo/report.html").exists());
}
