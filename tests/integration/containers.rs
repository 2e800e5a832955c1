//! Per-task containers on a real engine (podman, from tests/run.sh, with a base image it
//! builds locally): every command inside, limits that hold, images built once, a fresh
//! verifier, failures before any model request, and nothing left after kill -9.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{calc_fixture, make_git_repository, read_csv, signal, wait_until, Case};

/// The base image tests/run.sh builds (Debian minbase with python3 and git).
fn base_image() -> String {
    crate::common::test_image("AGENTBATCH_TEST_IMAGE", "localhost/agentbatch-test-base:1")
}

/// The containers on podman whose labels say they belong to the run folder `dir`.
fn containers_of(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let out = Command::new("podman")
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            &format!("label=agentbatch.run={}", dir.display()),
        ])
        .output()
        .expect("podman runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

const TOOLSET: &str = "toolsets:\n  coding:\n    tools: [read_file, write_file, edit_file, list_files, bash]\n    bash: { timeout: 20s, max_output: 20000 }\n";

/// A job named `name` with `defaults` lines and `tasks`.
fn yaml(defaults: &str, tasks: &str) -> String {
    format!("name: c\nconcurrency: 4\n{TOOLSET}defaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  toolset: coding\n  max_tokens: 1024\n{defaults}tasks:\n{tasks}")
}

/// The agent's change, written the same way on every workspace: the fix, a new file,
/// a file written by bash inside, and a look at the image's marker file.
const FIX: &str = "      turns:\n        - content:\n            - tool_use: { name: edit_file, input: { path: calc.py, old_string: 'a - b', new_string: 'a + b' } }\n            - tool_use: { name: write_file, input: { path: docs/new.txt, content: \"new\\n\" } }\n            - tool_use: { name: bash, input: { command: 'printf \"\\x00\\x01bin\" > blob.bin; cat /opt/marker 2>&1; pwd' } }\n        - content: [ { text: done } ]\n";

/// A Dockerfile context: the base image, a marker only the image has, and (for an
/// image-only task) the calc repository committed at /testbed.
fn image_context(case: &Case, name: &str, extra: &str) -> PathBuf {
    let ctx = case.path(name);
    calc_fixture(case, &format!("{name}/testbed"));
    case.write(
        &format!("{name}/Dockerfile"),
        &format!(
            "FROM {}\nRUN echo only-in-the-image > /opt/marker\nCOPY testbed /testbed\nRUN cd /testbed && git init -q -b main && git -c user.name=t -c user.email=t@t add -A && git -c user.name=t -c user.email=t@t commit -qm v1\nWORKDIR /testbed\n{extra}",
            base_image()
        ),
    );
    ctx
}

/// A random token, so an image a test builds is its own (builds are cached across runs
/// by content).
fn token() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repo_task_and_an_image_only_task_run_every_command_inside_with_host_identical_patches() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let git = calc_fixture(&case, "calc-git");
    make_git_repository(&git);
    image_context(&case, "img", &format!("ENV TOKEN={}\n", token()));
    let check = "check: 'cat /opt/marker && python3 -m unittest -q'";
    let tasks = format!(
        "  - id: in-repo\n    repo: calc\n    prompt: fix\n    environment: {{ dockerfile: img/Dockerfile }}\n    {check}\n    sim:\n{FIX}  - id: in-image\n    prompt: fix\n    environment: {{ dockerfile: img/Dockerfile }}\n    {check}\n    sim:\n{FIX}  - id: host-plain\n    repo: calc\n    prompt: fix\n    check: 'python3 -m unittest -q'\n    sim:\n{FIX}  - id: host-git\n    repo: calc-git\n    prompt: fix\n    check: 'python3 -m unittest -q'\n    sim:\n{FIX}"
    );
    let ran = case.run(&yaml("", &tasks)).await;
    for id in ["in-repo", "in-image", "host-plain", "host-git"] {
        let row = ran.row(id);
        assert_eq!(row["outcome"], "pass", "{id}: {row:?}");
    }
    for id in ["in-repo", "in-image"] {
        let row = ran.row(id);
        assert!(
            row["sandbox"].starts_with("container podman sha256:"),
            "{row:?}"
        );
        assert!(
            row["environment"].starts_with("localhost/agentbatch-env:"),
            "{row:?}"
        );
        assert!(row["environment"].contains("@sha256:"), "{row:?}");
        assert!(!row["environment_ms"].is_empty(), "{row:?}");
        // The bash call saw the image's file and ran in the workdir.
        let results = ran.events(id, "tool_result");
        let bash = results
            .iter()
            .map(|e| e.to_string())
            .find(|e| e.contains("only-in-the-image"))
            .unwrap_or_else(|| panic!("{id}: {results:?}"));
        let workdir = if id == "in-repo" {
            "/workspace"
        } else {
            "/testbed"
        };
        assert!(bash.contains(workdir), "{bash}");
        // The check too: the host has no /opt/marker.
        let check = ran.events(id, "check");
        assert!(
            check[0].to_string().contains("only-in-the-image"),
            "{check:?}"
        );
        let env = ran.events(id, "environment");
        assert_eq!(env.len(), 1, "{env:?}");
    }
    assert!(
        !Path::new("/opt/marker").exists(),
        "the host must not have the image's marker"
    );
    let patch = |id: &str| std::fs::read(ran.dir.join(format!("patches/{id}.diff"))).unwrap();
    assert!(!patch("host-plain").is_empty());
    assert_eq!(
        patch("in-repo"),
        patch("host-plain"),
        "a bind-mounted workspace's patch is the host's"
    );
    assert_eq!(
        patch("in-image"),
        patch("host-git"),
        "an image's workdir gives git's own patch"
    );
    assert!(String::from_utf8_lossy(&patch("in-image")).contains("GIT binary patch"));
    assert!(
        containers_of(&ran.dir).is_empty(),
        "{:?}",
        containers_of(&ran.dir)
    );
    // The page's task table carries the image and the container's time.
    let page = std::fs::read_to_string(ran.dir.join("report.html")).unwrap();
    assert!(
        page.contains("\"image\":[") && page.contains("localhost/agentbatch-env:"),
        "the page names the image"
    );
    assert!(page.contains("\"env\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_process_and_network_limits_hold_and_the_run_goes_on() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let image = base_image();
    // A server on the host, on every address: reachable from a bridged container
    // through its gateway, not from one without a network.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut s = s;
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 7\r\n\r\nreached");
            });
        }
    });
    case.write(
        "calc/fetch.py",
        &format!("import struct, socket, sys, urllib.request\nroutes = [l.split() for l in open('/proc/net/route').read().splitlines()[1:]]\ngw = [r[2] for r in routes if r[1] == '00000000']\nif not gw:\n    print('no route to the host'); sys.exit(3)\nip = socket.inet_ntoa(struct.pack('<L', int(gw[0], 16)))\n# A bridge that another container's disconnect is reconfiguring can drop a first\n# connection: three tries, 3 s each.\nfor i in range(3):\n    try:\n        print(urllib.request.urlopen(f'http://{{ip}}:{port}/', timeout=3).read().decode()); sys.exit(0)\n    except OSError as e:\n        err = e\nprint('unreachable:', err); sys.exit(1)\n"),
    );
    let bash = |cmd: &str| {
        format!("      turns:\n        - content: [ {{ tool_use: {{ name: bash, input: {{ command: '{cmd}' }} }} }} ]\n        - content: [ {{ text: done }} ]\n")
    };
    let tasks = format!(
        "  - id: oom\n    prompt: p\n    environment: {{ image: {image}, memory: 256m }}\n    check: 'python3 -c \"b = bytearray(1 << 30); print(len(b))\"'\n    sim:\n{}  - id: forkbomb\n    prompt: p\n    environment: {{ image: {image}, pids: 64, cpus: 0.5 }}\n    check: 'echo survived'\n    sim:\n{}  - id: offline\n    prompt: p\n    environment: {{ image: {image} }}\n    setup: 'python3 fetch.py > setup-saw.txt'\n    check: 'grep -q reached setup-saw.txt && ! python3 fetch.py'\n    sim:\n{}",
        bash("echo fine"),
        bash("timeout 3 bash -c \"f() { f | f & }; f\"; echo after"),
        bash("python3 fetch.py"),
    );
    let ran = case
        .run(&yaml("  repo: calc\n  keep_workspaces: never\n", &tasks))
        .await;
    let oom = ran.row("oom");
    assert_eq!(oom["outcome"], "fail", "{oom:?}");
    let check = ran.events("oom", "check")[0].to_string();
    assert!(check.contains("memory limit (256m)"), "{check}");
    let bomb = ran.row("forkbomb");
    assert_eq!(
        bomb["outcome"], "pass",
        "the check ran after the bomb: {bomb:?}"
    );
    let bomb_out = ran.events("forkbomb", "tool_result")[0].to_string();
    assert!(
        bomb_out.contains("Resource temporarily unavailable") || bomb_out.contains("retry: "),
        "{bomb_out}"
    );
    assert_eq!(
        ran.row("offline")["outcome"],
        "pass",
        "{:?}",
        ran.events("offline", "check")
    );
    let offline_bash = ran.events("offline", "tool_result")[0].to_string();
    assert!(
        offline_bash.contains("no route to the host"),
        "{offline_bash}"
    );
    assert!(ran.row("offline")["sandbox"].contains("no network"));
    // The bridge, alone: in CI a first connection from a bridged container to the host
    // timed out while another container of the run was being disconnected (CNI), so
    // the positive control runs in a run of its own (docs/guide/containers.md, Not yet).
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    let ran = case
        .run(&yaml(
            "  repo: calc\n  keep_workspaces: never\n",
            &format!("  - id: bridged\n    prompt: p\n    environment: {{ image: {image}, network: bridge }}\n    check: 'python3 fetch.py'\n    sim:\n{}", bash("python3 fetch.py")),
        ))
        .await;
    assert_eq!(
        ran.row("bridged")["outcome"],
        "pass",
        "{:?}",
        ran.events("bridged", "check")
    );
    assert!(ran.events("bridged", "tool_result")[0]
        .to_string()
        .contains("reached"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_share_one_build_and_an_edit_rebuilds_once() {
    let case = Case::new();
    let t = token();
    case.write(
        "env/Dockerfile",
        &format!(
            "FROM {}\nRUN mkdir /work && echo {t} > /opt/built\nWORKDIR /work\n",
            base_image()
        ),
    );
    case.write("env/data.txt", "1\n");
    let tasks: String = (0..20)
        .map(|i| format!("  - {{ id: t{i}, prompt: p, sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: bash, input: {{ command: cat /opt/built }} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }} }}\n"))
        .collect();
    let job = yaml(
        "  environment: { dockerfile: env/Dockerfile }\n  check: 'test -f /opt/built'\n",
        &tasks,
    );
    let built = |ran: &crate::common::Ran| {
        (0..20)
            .flat_map(|i| ran.events(&format!("t{i}"), "environment"))
            .filter(|e| e["made"] == "built")
            .count()
    };
    let first = case.run(&job).await;
    assert_eq!(built(&first), 1, "{:?}", first.rows());
    let first_image = first.row("t0")["environment"].clone();
    assert!(
        first.rows().iter().all(|r| r["outcome"] == "pass"),
        "{:?}",
        first.rows()
    );
    let logs: Vec<_> = std::fs::read_dir(first.dir.join("environments"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .collect();
    assert_eq!(logs.len(), 1, "one build log");
    // Same bytes again: nothing to build.
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    let again = case.run(&job).await;
    assert_eq!(built(&again), 0);
    // A byte of the context changes: one build.
    case.write("env/data.txt", "2\n");
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    let edited = case.run(&job).await;
    assert_eq!(built(&edited), 1);
    assert_ne!(first_image, edited.row("t0")["environment"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_image_or_a_failed_build_stops_its_tasks_before_any_request() {
    let case = Case::new();
    case.write(
        "bad/Dockerfile",
        &format!("FROM {}\nRUN echo breaking && false\n", base_image()),
    );
    case.write("bad/token", &token());
    let tasks = format!(
        "  - {{ id: missing, prompt: p, environment: {{ image: localhost/agentbatch-no-such-image:{}, pull: never }} }}\n  - {{ id: broken, prompt: p, environment: {{ dockerfile: bad/Dockerfile }} }}\n  - {{ id: fine, prompt: p }}\n",
        token()
    );
    let job = format!("name: c\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  tools: [get_time]\n  sim: {{ turns: [ {{ content: [ {{ text: done }} ] }} ] }}\ntasks:\n{tasks}");
    let ran = case.run(&job).await;
    let missing = ran.row("missing");
    assert_eq!(missing["stop_reason"], "tool_setup_error", "{missing:?}");
    assert!(
        missing["stop_detail"].contains("localhost/agentbatch-no-such-image")
            && missing["stop_detail"].contains("pull: never"),
        "{missing:?}"
    );
    let broken = ran.row("broken");
    assert_eq!(broken["stop_reason"], "tool_setup_error", "{broken:?}");
    assert!(
        broken["stop_detail"].contains("Dockerfile") && broken["stop_detail"].contains(".log"),
        "{broken:?}"
    );
    let log = broken["stop_detail"]
        .split_whitespace()
        .find(|w| w.contains("environments/build-"))
        .unwrap()
        .trim_end_matches(')');
    assert!(
        std::fs::read_to_string(log).unwrap().contains("breaking"),
        "{log}"
    );
    for id in ["missing", "broken"] {
        assert!(ran.requests(id).is_empty(), "{id} paid for a request");
        assert_eq!(ran.row(id)["cost_usd"], "0", "{:?}", ran.row(id));
    }
    assert_eq!(ran.row("fine")["stop_reason"], "completed");
}

#[test]
fn validate_names_the_engine_field_when_no_engine_is_found() {
    let case = Case::new();
    case.write(
        "job.yaml",
        "name: v\ndefaults:\n  model: m\n  sim: { turns: [ { content: [ { text: x } ] } ] }\ntasks:\n  - { id: a, prompt: p, environment: { image: 'x:1', engine: podman } }\n",
    );
    let empty = case.path("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out = crate::common::bin()
        .args(["validate", "job.yaml"])
        .env("PATH", &empty)
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("environment.engine") && err.contains("podman: not on PATH"),
        "{err}"
    );
    // With the engine there, validate shows it and the image's state.
    let out = crate::common::bin()
        .args(["validate", "job.yaml"])
        .current_dir(case.dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("podman 4") && said.contains("x:1"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_verifier_is_not_fooled_by_an_agent_that_rewrites_the_tests() {
    let case = Case::new();
    // The tests live in the image, outside the workspace, as a suite's verifier does.
    case.write(
        "img/Dockerfile",
        &format!("FROM {}\nRUN mkdir -p /opt/tests && printf 'import calc\\nassert calc.add(2, 3) == 5, \"add is wrong\"\\n' > /opt/tests/test_calc.py\n", base_image()),
    );
    calc_fixture(&case, "calc");
    let cheat = "      turns:\n        - content: [ { tool_use: { name: bash, input: { command: 'echo pass > /opt/tests/test_calc.py; sleep 300 & echo started' } } } ]\n        - content: [ { text: done } ]\n";
    let tasks = format!(
        "  - id: same\n    prompt: p\n    check_environment: same\n    sim:\n{cheat}  - id: fresh\n    prompt: p\n    check_environment: fresh\n    sim:\n{cheat}"
    );
    let ran = case
        .run(&yaml(
            "  repo: calc\n  environment: { dockerfile: img/Dockerfile }\n  check: 'PYTHONPATH=. python3 /opt/tests/test_calc.py'\n",
            &tasks,
        ))
        .await;
    assert_eq!(
        ran.row("same")["outcome"],
        "pass",
        "the cheat works in the agent's container"
    );
    let fresh = ran.row("fresh");
    assert_eq!(fresh["outcome"], "fail", "{fresh:?}");
    let envs = ran.events("fresh", "environment");
    assert_eq!(envs.len(), 2, "{envs:?}");
    assert_eq!(envs[1]["purpose"], "fresh check");
    assert!(ran.events("fresh", "check")[0]
        .to_string()
        .contains("add is wrong"));
    let left = containers_of(&ran.dir);
    assert_eq!(
        left.len(),
        1,
        "the failed task's container is kept: {left:?}"
    );
    assert!(left[0].ends_with("-kept"), "{left:?}");
    assert_eq!(
        ran.row("fresh")["workspace"].rsplit("container ").next(),
        Some(left[0].as_str())
    );
    Command::new("podman")
        .args(["rm", "-f", &left[0]])
        .output()
        .unwrap();
}

#[test]
fn kill_9_of_the_runner_leaves_no_container_running_and_resume_completes() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let image = base_image();
    let tasks: String = (0..4)
        .map(|i| format!("  - {{ id: t{i}, prompt: p, sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: bash, input: {{ command: 'sleep 4; echo slept' }} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }} }}\n"))
        .collect();
    case.write(
        "job.yaml",
        &yaml(&format!("  repo: calc\n  environment: {{ image: {image} }}\n  check: 'true'\n  keep_workspaces: never\n"), &tasks),
    );
    let mut child = case.start_run(&[]);
    let dir = case.path("reports/r");
    wait_until("four tool calls in flight", Duration::from_secs(60), || {
        (0..4).all(|i| {
            std::fs::read_to_string(dir.join(format!("transcripts/t{i}.jsonl")))
                .unwrap_or_default()
                .contains("\"tool_call\"")
        })
    });
    assert_eq!(containers_of(&dir).len(), 4);
    signal(child.id(), "KILL");
    let _ = child.wait();
    // The containers stop by themselves: their loop reads end-of-file.
    wait_until(
        "the killed run's containers to stop",
        Duration::from_secs(20),
        || {
            let out = Command::new("podman")
                .args([
                    "ps",
                    "--format",
                    "{{.Names}}",
                    "--filter",
                    &format!(
                        "label=agentbatch.run={}",
                        dir.canonicalize().unwrap().display()
                    ),
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().is_empty()
        },
    );
    let out = case.agentbatch(&["run", "job.yaml", "--resume", "reports/r", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = read_csv(&dir.join("results.csv"));
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["outcome"] == "pass"), "{rows:?}");
    assert!(containers_of(&dir).is_empty(), "{:?}", containers_of(&dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_command_line_drives_the_same_containers() {
    let image = base_image();
    let which = Command::new("sh")
        .args(["-c", "command -v docker"])
        .output()
        .unwrap();
    assert!(
        which.status.success(),
        "tests/run.sh puts a docker command on PATH"
    );
    let case = Case::new();
    calc_fixture(&case, "calc");
    let tasks = format!("  - id: d\n    prompt: p\n    sim:\n{FIX}");
    let ran = case
        .run(&yaml(
            &format!("  repo: calc\n  environment: {{ image: {image}, engine: docker, cpus: 1, memory: 512m, pids: 128 }}\n  check: 'python3 -m unittest -q'\n"),
            &tasks,
        ))
        .await;
    let row = ran.row("d");
    assert_eq!(row["outcome"], "pass", "{row:?}");
    assert!(
        row["sandbox"].starts_with("container docker sha256:"),
        "{row:?}"
    );
    assert!(ran.events("d", "environment")[0]["engine"]
        .as_str()
        .unwrap()
        .starts_with("docker "));
}

/// The registry server tests/run.sh starts on loopback.
fn registry() -> String {
    std::env::var("AGENTBATCH_TEST_REGISTRY")
        .expect("AGENTBATCH_TEST_REGISTRY names the test registry: run through tests/run.sh")
}

fn podman(args: &[&str]) -> String {
    let out = Command::new("podman")
        .args(args)
        .output()
        .expect("podman runs");
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_are_pulled_as_the_pull_setting_says_from_a_real_registry() {
    let t = token();
    let case = Case::new();
    case.write(
        "img/Dockerfile",
        &format!("FROM {}\nRUN echo {t} > /opt/pulled\n", base_image()),
    );
    let name = format!("{}/agentbatch-test/pulled:{t}", registry());
    podman(&[
        "build",
        "-q",
        "-t",
        &name,
        &case.path("img").display().to_string(),
    ]);
    podman(&["push", "-q", &name]);
    podman(&["rmi", "-f", &name]);
    let job = |pull: &str, image: &str| {
        format!("name: p\ndefaults:\n  provider: sim\n  model: claude-sonnet-4-5\n  tools: [bash]\n  keep_workspaces: never\ntasks:\n  - id: t\n    prompt: p\n    environment: {{ image: '{image}', pull: {pull}, workdir: /opt }}\n    sim: {{ turns: [ {{ content: [ {{ tool_use: {{ name: bash, input: {{ command: cat /opt/pulled }} }} }} ] }}, {{ content: [ {{ text: done }} ] }} ] }}\n")
    };
    let made = |ran: &crate::common::Ran| {
        let env = ran.events("t", "environment");
        assert!(!env.is_empty(), "{:?}", ran.row("t"));
        env[0]["made"].as_str().unwrap().to_string()
    };
    // Not here under pull: never: stopped before any request.
    let never = case.run(&job("never", &name)).await;
    assert_eq!(
        never.row("t")["stop_reason"],
        "tool_setup_error",
        "{:?}",
        never.row("t")
    );
    assert!(never.requests("t").is_empty());
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    // missing: pulled once, and the task sees the image's file.
    let missing = case.run(&job("missing", &name)).await;
    assert_eq!(made(&missing), "pulled", "{:?}", missing.row("t"));
    assert!(missing.events("t", "tool_result")[0]
        .to_string()
        .contains(&t));
    assert!(missing.events("t", "environment")[0]["pull_ms"]
        .as_u64()
        .is_some());
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    // missing again: present now, nothing pulled; always: pulled again.
    assert_eq!(made(&case.run(&job("missing", &name)).await), "present");
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    assert_eq!(made(&case.run(&job("always", &name)).await), "pulled");
    std::fs::remove_dir_all(case.path("reports")).unwrap();
    // A registry that is not there: the pull fails, the task stops, the log says why.
    let gone = case
        .run(&job(
            "missing",
            &format!("127.0.0.1:9/agentbatch-test/none:{t}"),
        ))
        .await;
    let row = gone.row("t");
    assert_eq!(row["stop_reason"], "tool_setup_error", "{row:?}");
    assert!(
        row["stop_detail"].contains("cannot pull image 127.0.0.1:9/")
            && row["stop_detail"].contains("pull-"),
        "{row:?}"
    );
    assert!(gone.requests("t").is_empty());
    podman(&["rmi", "-f", &name]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_outputs_keep_their_head_and_their_last_line() {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let image = base_image();
    let calls: String = (0..3)
        .map(|i| format!("            - tool_use: {{ name: bash, input: {{ command: 'seq 1 {}; echo LAST-LINE-{i}' }} }}\n", 200_000 * (i + 1)))
        .collect();
    let tasks = format!("  - id: big\n    prompt: p\n    sim:\n      turns:\n        - content:\n{calls}        - content: [ {{ text: done }} ]\n");
    let ran = case
        .run(&yaml(
            &format!(
                "  repo: calc\n  environment: {{ image: {image} }}\n  keep_workspaces: never\n"
            ),
            &tasks,
        ))
        .await;
    let results = ran.events("big", "tool_result");
    assert_eq!(results.len(), 3);
    for (i, r) in results.iter().enumerate() {
        let text = r["content"].as_str().unwrap();
        assert!(text.contains("\n1\n2\n3\n"), "{}", &text[..200]);
        assert!(text.contains("bytes of output cut"), "capped");
        assert!(
            text.trim_end().ends_with(&format!("LAST-LINE-{i}")),
            "{}",
            &text[text.len() - 200..]
        );
    }
}

/// What a hostile agent tried (found by review): a symbolic link planted in the control
/// folder to make the runner write a file of this machine, a `setsid` process left to
/// forge the check's status, and git inside the container on a cloned workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_agent_cannot_write_the_host_nor_forge_the_check() {
    let case = Case::new();
    let git = calc_fixture(&case, "calc-git");
    make_git_repository(&git);
    let image = base_image();
    let target = case.write("host-file", "original\n");
    let bash = |cmd: &str| {
        format!(
            "        - content: [ {{ tool_use: {{ name: bash, input: {{ command: {} }} }} }} ]\n",
            serde_json::Value::from(cmd)
        )
    };
    let plant = format!(
        "ln -s {} /.agentbatch/2.cmd; ln -s {} /.agentbatch/2.sh; echo planted",
        target.display(),
        target.display()
    );
    let forge = "(setsid sh -c 'while :; do echo \"2 0 0\" > /.agentbatch/done; sleep 0.01; done' >/dev/null 2>&1 </dev/null &); (setsid sleep 300 >/dev/null 2>&1 </dev/null &); echo started";
    let tasks = format!(
        "  - id: plant\n    prompt: p\n    check: 'true'\n    sim:\n      turns:\n{}{}        - content: [ {{ text: done }} ]\n  - id: forge\n    prompt: p\n    check: 'sleep 1; echo the tests fail; exit 1'\n    sim:\n      turns:\n{}{}        - content: [ {{ text: done }} ]\n",
        bash(&plant),
        bash("echo second call"),
        bash(forge),
        bash("for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 300' || true"),
    );
    let ran = case
        .run(&yaml(
            &format!(
                "  repo: calc-git\n  environment: {{ image: {image} }}\n  keep_workspaces: never\n"
            ),
            &tasks,
        ))
        .await;
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "original\n",
        "the host file was written"
    );
    let forged = ran.row("forge");
    assert_eq!(forged["outcome"], "fail", "{forged:?}");
    assert!(ran.events("forge", "check")[0]
        .to_string()
        .contains("the tests fail"));
    // The background sleep did not outlive the call that started it: the next call
    // sees only its own grep.
    let next = ran.events("forge", "tool_result")[1].to_string();
    assert!(next.contains("\\n0\\n"), "{next}");
    // git works inside on a clone that borrows the pristine checkout's objects.
    let git_case = Case::new();
    let g = calc_fixture(&git_case, "calc-git");
    make_git_repository(&g);
    let ran = git_case
        .run(&yaml(
            &format!("  repo: calc-git\n  environment: {{ image: {image} }}\n  keep_workspaces: never\n"),
            "  - { id: g, prompt: p, check: 'git log --oneline && git status --short', sim: { turns: [ { content: [ { text: done } ] } ] } }\n",
        ))
        .await;
    assert_eq!(
        ran.row("g")["outcome"],
        "pass",
        "{:?}",
        ran.events("g", "check")
    );
}
