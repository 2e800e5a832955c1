//! The worker image (issue 33): the repository's Dockerfile built with Podman from the
//! tests' local base image (no registry is reachable here) and the host's Rust toolchain,
//! then a shared run whose two workers are containers of that image, started with the
//! command line, environment, working folder and mounts of docs/launch's Kubernetes
//! manifest, against the test PostgreSQL and the simulator (a process on the host; the
//! containers share the host's network).

use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;

use rust_decimal::Decimal;

use crate::common::{ok, read_csv, test_image, Case};
use crate::postgres::fresh_database;

/// The host's Rust toolchain (its sysroot) and Cargo's home (its crate cache).
fn toolchain() -> (PathBuf, PathBuf) {
    let sysroot = ok(
        Command::new("rustc").args(["--print", "sysroot"]),
        "rustc --print sysroot",
    );
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME is set");
    let sysroot = PathBuf::from(sysroot.trim());
    // Mounted over the build container's own folders, /usr would hide its whole system.
    assert!(
        !["/", "/usr", "/usr/local"]
            .iter()
            .any(|system| sysroot == Path::new(system)),
        "the worker image's test mounts the host's Rust toolchain into the build, and this one is installed in {} (a distribution's package): install Rust with rustup (https://rustup.rs), as the README says",
        sysroot.display()
    );
    (sysroot, cargo_home)
}

/// The build stage's base image, in place of `rust:1-bookworm`: the tests' Debian image
/// with a C linker, the host's toolchain on PATH (mounted at the same path while the
/// image builds) and Cargo offline, its crates from the host's cache (mounted too).
fn build_base(base: &str, sysroot: &Path) -> String {
    let containerfile = format!(
        "FROM {base}\n\
         RUN apt-get update -qq \\\n \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev \\\n \
         && rm -rf /var/lib/apt/lists/*\n\
         ENV PATH={}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
         CARGO_HOME=/cargo-home CARGO_NET_OFFLINE=true\n",
        sysroot.display()
    );
    // Made again when its text or the base image changes.
    let base_id = ok(
        Command::new("podman").args(["image", "inspect", "--format", "{{.Id}}", base]),
        "podman image inspect (the tests' base image)",
    );
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&containerfile, base_id.trim()).hash(&mut h);
    let tag = format!("localhost/agentbatch-test-rust:{:016x}", h.finish());
    let exists = Command::new("podman")
        .args(["image", "exists", &tag])
        .status()
        .is_ok_and(|s| s.success());
    if exists {
        return tag;
    }
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(ctx.path().join("Containerfile"), containerfile).unwrap();
    ok(
        Command::new("podman")
            .args(["build", "-q", "-t", &tag])
            .arg(ctx.path()),
        "podman build (the build stage's base)",
    );
    tag
}

/// Builds the repository's Dockerfile as a user would, with the base images, the
/// profile and the commit as build arguments; the image's tag.
fn build_worker_image(commit: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let base = test_image("AGENTBATCH_TEST_IMAGE", "localhost/agentbatch-test-base:1");
    let (sysroot, cargo_home) = toolchain();
    let build = build_base(&base, &sysroot);
    // The build's target folder persists between runs of the tests (in target/), so an
    // unchanged crate is not compiled again.
    let cache = root.join("target/worker-image");
    std::fs::create_dir_all(&cache).unwrap();
    // A tag of this checkout's own: two checkouts testing at once build two images.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    root.hash(&mut h);
    let tag = format!("localhost/agentbatch-worker-test:{:016x}", h.finish());
    let mount =
        |from: &Path, to: &Path, opts: &str| format!("{}:{}{opts}", from.display(), to.display());
    ok(
        Command::new("podman")
            .args(["build", "-q", "-t", &tag, "-f"])
            .arg(root.join("Dockerfile"))
            .args(["--build-arg", &format!("BUILD_IMAGE={build}")])
            .args(["--build-arg", &format!("RUNTIME_IMAGE={base}")])
            .args(["--build-arg", "PROFILE=dev"])
            .args(["--build-arg", &format!("AGENTBATCH_COMMIT={commit}")])
            .args(["-v", &mount(&sysroot, &sysroot, ":ro")])
            .args([
                "-v",
                &mount(
                    &cargo_home.join("registry"),
                    Path::new("/cargo-home/registry"),
                    "",
                ),
            ])
            .args(["-v", &mount(&cache, Path::new("/src/target"), "")])
            .arg(root),
        "podman build (the worker image, from the Dockerfile)",
    );
    tag
}

/// The manifest's worker container: its args, the names of its environment, its
/// working folder and where it mounts the suite and the reports.
struct Manifest {
    args: Vec<String>,
    env: Vec<String>,
    working_dir: String,
    suite: String,
    reports: String,
    run_id: String,
    job: String,
    /// What the worker gets between SIGTERM and SIGKILL, and the worker's own grace.
    termination_grace: std::time::Duration,
    grace: std::time::Duration,
}

fn manifest() -> Manifest {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let k8s: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root.join("docs/launch/kubernetes-workers.yaml")).unwrap(),
    )
    .unwrap();
    let c = &k8s["spec"]["template"]["spec"]["containers"][0];
    let strings = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let args = strings(&c["args"]);
    let after = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .unwrap_or_else(|| panic!("the manifest's args have {flag}"))
            .clone()
    };
    let mounts = c["volumeMounts"].as_sequence().unwrap();
    let mount_of = |name: &str| {
        mounts
            .iter()
            .find(|m| m["name"] == name)
            .and_then(|m| m["mountPath"].as_str())
            .unwrap_or_else(|| panic!("the manifest mounts {name}"))
            .to_string()
    };
    let seconds = k8s["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("the manifest sets terminationGracePeriodSeconds");
    Manifest {
        termination_grace: std::time::Duration::from_secs(seconds),
        grace: humantime::parse_duration(&after("--grace")).expect("--grace is a duration"),
        run_id: after("--run-id"),
        job: after("--job"),
        env: c["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect(),
        working_dir: c["workingDir"].as_str().unwrap().to_string(),
        suite: mount_of("suite"),
        reports: mount_of("reports"),
        args,
    }
}

/// Loops on get_time (200 output tokens a turn) until the team cap stops it.
const LOOP: &str = "{ latency: 100ms, repeat_last: true, turns: [ { content: [ { text: working }, { tool_use: { name: get_time, input: {} } } ], usage: { output_tokens: 200 } } ] }";
const TASKS: usize = 16;
const CAP: &str = "0.60";

fn job_text(url: &str) -> String {
    let tasks: String = (0..TASKS)
        .map(|i| format!("  - {{ id: t{i:03}, prompt: go }}\n"))
        .collect();
    format!(
        "name: image\nproviders:\n  sim: {{ protocol: anthropic, simulator: true, base_url: \"{url}\" }}\nteams:\n  platform: {{ cap: {{ usd: {CAP}, period: day }} }}\ndefaults:\n  provider: sim\n  team: platform\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  limits: {{ max_turns: 200, min_max_tokens: 128, max_repeats: off }}\n  sim: {LOOP}\ntasks:\n{tasks}"
    )
}

/// The image, built once for the tests of this file, and the commit it names.
fn worker_image() -> &'static (String, String) {
    static IMAGE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    IMAGE.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let commit = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map_or_else(
                || "no-git-checkout".to_string(),
                |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
            );
        let image = build_worker_image(&commit);
        let version = ok(
            Command::new("podman").args(["run", "--rm", &image, "--version"]),
            "the image's agentbatch --version",
        );
        assert!(version.contains(&format!("(commit {commit})")), "{version}");
        (image, commit)
    })
}

/// A run queued from the host on a fresh database, its job at the manifest's path
/// pointing at a simulator on the host: the case, the database, the simulator.
fn queued_run(m: &Manifest, name: &str, job: &dyn Fn(&str) -> String) -> (Case, String, Child) {
    let url = fresh_database(name);
    let case = Case::new();
    case.write(&m.job, &job("http://127.0.0.1:1"));
    let (sim, sim_url) = crate::common::standalone_sim(&case, &m.job, &[]);
    case.write(&m.job, &job(&sim_url));
    let queued = case.agentbatch(&["run", &m.job, "--queue", &url, "--run-id", &m.run_id]);
    assert_eq!(
        queued.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&queued.stderr)
    );
    // The reports' mount point, as Kubernetes makes it in the suite's volume.
    std::fs::create_dir_all(case.path("reports")).unwrap();
    (case, url, sim)
}

/// A worker as the manifest starts it: its args (the Indexed Job's index in the name),
/// its environment by name, its working folder, the suite read-only at its mount and
/// an empty folder of the worker's own for the reports; `args` changes the args. The
/// container and that folder.
fn start_worker(
    case: &Case,
    m: &Manifest,
    url: &str,
    index: usize,
    container: &str,
    args: &dyn Fn(Vec<String>) -> Vec<String>,
) -> (Child, PathBuf) {
    let (image, _) = worker_image();
    let reports = case.path(&format!("reports-of-worker-{index}"));
    std::fs::create_dir_all(&reports).unwrap();
    let mut c = Command::new("podman");
    c.args([
        "run",
        "--rm",
        "--replace",
        "--name",
        container,
        "--network",
        "host",
    ]);
    c.args(["-w", &m.working_dir]);
    c.args([
        "-v",
        &format!("{}:{}:ro", case.dir.path().display(), m.suite),
    ]);
    c.args(["-v", &format!("{}:{}", reports.display(), m.reports)]);
    for name in &m.env {
        let value = if name == "AGENTBATCH_QUEUE_URL" {
            url.to_string()
        } else {
            "unused-here".to_string()
        };
        c.args(["-e", &format!("{name}={value}")]);
    }
    c.arg(image);
    c.args(args(
        m.args
            .iter()
            .map(|a| a.replace("$(JOB_COMPLETION_INDEX)", &index.to_string()))
            .collect(),
    ));
    let child = c
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("podman runs");
    (child, reports)
}

/// A container name of this test process's own.
fn container(what: &str) -> String {
    format!("agentbatch-test-{what}-{}", std::process::id())
}

/// What a test started, ended however the test ends (a failed assertion included):
/// the simulator killed, the containers removed.
struct Cleanup {
    sim: Child,
    containers: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.sim.kill();
        let _ = self.sim.wait();
        if !self.containers.is_empty() {
            let _ = Command::new("podman")
                .args(["rm", "--force", "--ignore"])
                .args(&self.containers)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[test]
fn two_workers_in_containers_of_the_built_image_run_a_shared_run_as_the_manifest_starts_them() {
    let (_, commit) = worker_image();
    let m = manifest();
    let (case, url, sim) = queued_run(&m, "image", &job_text);
    let names: Vec<String> = (0..2).map(|i| container(&format!("w{i}"))).collect();
    let _cleanup = Cleanup {
        sim,
        containers: names.clone(),
    };
    let workers: Vec<(Child, PathBuf)> = names
        .iter()
        .enumerate()
        .map(|(index, name)| start_worker(&case, &m, &url, index, name, &|a| a))
        .collect();
    let mut shares = Vec::new();
    for (index, (child, reports)) in workers.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "worker-{index}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        shares.push((index, reports));
    }

    let collected = case.agentbatch(&["collect", &url, "--run-id", &m.run_id]);
    let said = String::from_utf8_lossy(&collected.stdout);
    assert_eq!(
        collected.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&collected.stderr)
    );
    assert!(
        said.contains(&format!("{TASKS} tasks: {TASKS} done, 0 running")),
        "{said}"
    );
    let rows = read_csv(&case.path(&format!("reports/{}/results.csv", m.run_id)));
    assert_eq!(rows.len(), TASKS);
    let ids: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!(ids.len(), TASKS, "every task exactly once");
    // Each container did a share of the run, written where the manifest mounts the
    // reports, by the image's binary (its run.json names the commit it was built from).
    let mut in_shares = 0;
    for (index, reports) in &shares {
        let share = reports.join(format!("workers/worker-{index}/{}", m.run_id));
        let n = read_csv(&share.join("results.csv")).len();
        assert!(n > 0, "worker-{index} ran no task");
        in_shares += n;
        let run_json = std::fs::read_to_string(share.join("run.json")).unwrap();
        assert!(
            run_json.contains(commit.as_str()),
            "worker-{index}: {run_json}"
        );
    }
    assert_eq!(in_shares, TASKS);
    // The team cap held across the two containers, and was used.
    let spent: Decimal = rows
        .iter()
        .map(|r| Decimal::from_str(&r["cost_usd"]).unwrap())
        .sum();
    let cap = Decimal::from_str(CAP).unwrap();
    eprintln!("two worker containers spent ${spent} of a ${cap} team cap");
    assert!(spent <= cap, "{spent}");
    assert!(
        spent >= cap * Decimal::from_str("0.95").unwrap(),
        "at least 95% of the cap: {spent}"
    );
    assert!(
        rows.iter().any(|r| r["stop_reason"] == "team_budget"),
        "{rows:?}"
    );
}

/// Long tasks (60 turns of 100 ms each) and no cap.
fn long_job(url: &str) -> String {
    job_text(url)
        .replace("max_turns: 200", "max_turns: 60")
        .replace("  team: platform\n", "")
        .replace(
            &format!("teams:\n  platform: {{ cap: {{ usd: {CAP}, period: day }} }}\n"),
            "",
        )
}

/// Kubernetes stops a pod with SIGTERM to its first process, and kills it when the
/// manifest's termination grace is over. The worker, PID 1 in its container, drains on
/// SIGTERM: after its own (shorter) grace it cancels what still runs, hands those tasks
/// back to the queue and exits by itself; another container runs them.
#[test]
fn a_worker_container_stopped_by_its_engine_hands_its_tasks_back_and_exits_by_itself() {
    let m = manifest();
    assert!(
        m.grace + std::time::Duration::from_secs(10) <= m.termination_grace,
        "the manifest's terminationGracePeriodSeconds ({:?}) leaves the worker's --grace ({:?}) too little room: Kubernetes would kill it mid-request",
        m.termination_grace,
        m.grace
    );
    let (case, url, sim) = queued_run(&m, "imagestop", &long_job);
    let (name, heir) = (container("stopped"), container("heir"));
    let _cleanup = Cleanup {
        sim,
        containers: vec![name.clone(), heir.clone()],
    };
    assert!(!std::fs::read_to_string(case.path(&m.job))
        .unwrap()
        .contains("cap:"));
    // The manifest's args with a short grace, so that the stop cuts tasks off.
    let short = |mut a: Vec<String>| {
        let i = a.iter().position(|x| x == "--grace").unwrap();
        a[i + 1] = "2s".to_string();
        a
    };
    let (first, reports) = start_worker(&case, &m, &url, 0, &name, &short);
    let transcripts = reports.join(format!("workers/worker-0/{}/transcripts", m.run_id));
    crate::common::wait_until(
        "the first container's answers",
        std::time::Duration::from_secs(120),
        || {
            std::fs::read_dir(&transcripts).is_ok_and(|d| {
                d.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
                    .any(|t| t.contains("\"event\":\"response\""))
            })
        },
    );
    let stopping = std::time::Instant::now();
    ok(
        Command::new("podman")
            .args(["stop", "--time"])
            .arg(m.termination_grace.as_secs().to_string())
            .arg(&name),
        "podman stop",
    );
    let took = stopping.elapsed();
    let out = first.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "the stopped container exited {:?}, {took:?} after SIGTERM",
        out.status.code()
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "interrupted is 130; 137 would be the engine's SIGKILL: {said}"
    );
    assert!(
        took < m.termination_grace / 2,
        "{took:?} from SIGTERM to exit: {said}"
    );
    // Another container runs what the first handed back, without waiting out the
    // first one's leases (60 s: the manifest sets no --lease).
    let started = std::time::Instant::now();
    let (second, heir_reports) = start_worker(&case, &m, &url, 1, &heir, &|a| a);
    let out = second.wait_with_output().unwrap();
    let heir_took = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let heir_rows =
        read_csv(&heir_reports.join(format!("workers/worker-1/{}/results.csv", m.run_id)));
    eprintln!("the heir ran {} tasks in {heir_took:?}", heir_rows.len());
    assert_eq!(
        heir_rows.len(),
        TASKS,
        "the stopped worker finished none of its tasks"
    );
    assert!(
        heir_took < std::time::Duration::from_secs(50),
        "{heir_took:?}: the heir waited for leases"
    );
    let collected = case.agentbatch(&["collect", &url, "--run-id", &m.run_id]);
    let said = String::from_utf8_lossy(&collected.stdout);
    assert!(
        said.contains(&format!("{TASKS} tasks: {TASKS} done, 0 running")),
        "{said}"
    );
    let rows = read_csv(&case.path(&format!("reports/{}/results.csv", m.run_id)));
    let ids: HashSet<&str> = rows.iter().map(|r| r["task_id"].as_str()).collect();
    assert_eq!((rows.len(), ids.len()), (TASKS, TASKS), "every task once");
    for r in &rows {
        assert_eq!(r["stop_reason"], "max_turns", "{r:?}");
    }
}
