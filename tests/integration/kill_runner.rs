//! What a runner killed with SIGKILL leaves running: nothing. Commands started by
//! `bash` (in the foreground, in the background, under `setsid`, double forked, left
//! behind by a call that returned) and a stdio MCP server with its children die with
//! it, with the sandbox's PID namespace and with it turned off; and where even a
//! command's warden was killed with the runner, the resume finds and stops what is left.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bin, calc_fixture, read_csv, signal, wait_until, Case};

/// Digits unique to this test process and moment: a `sleep` of `3NN.<token>` seconds
/// carries it in its command line.
fn token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{}{nanos:09}", std::process::id() % 100_000)
}

/// Every process on the machine whose command line holds `needle`: pid and command line.
fn processes_with(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if text.contains(needle) {
            found.push((pid, text.trim_end().to_string()));
        }
    }
    found
}

/// The `sleep` seconds of the job's processes that run until the runner is killed,
/// all suffixed `.<token>` (319 is left behind by a call that returned: it must be gone
/// with its call, and is not waited for).
const SLEEPS: [u32; 13] = [
    301, 302, 310, 311, 312, 313, 314, 315, 316, 317, 318, 320, 321,
];

/// Six tasks, each blocked in a bash call that started long sleeps every way a command
/// can: in the foreground, `&`, `nohup`, `setsid`, a subshell's background job,
/// `setsid` inside a background subshell, and one a call left behind when it returned.
/// One task has a stdio MCP server that starts a `setsid` sleep and a background one.
/// With `<go>` present, the calls return at once (for the resume).
fn kill_job(token: &str, go: &Path) -> String {
    let paged = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/paged_server.py");
    let go = go.display();
    let s = |n: u32| format!("sleep {n}.{token}");
    let call = |cmd: String| {
        format!(
            "        - content: [ {{ tool_use: {{ name: bash, input: {{ command: {} }} }} }} ]\n",
            serde_json::to_string(&format!("test -e {go} || {{ {cmd}; }}")).unwrap()
        )
    };
    let task = |id: &str, extra: &str, calls: Vec<String>| {
        format!(
            "  - id: {id}\n{extra}    sim:\n      turns:\n{}        - content: [ {{ text: done }} ]\n",
            calls.concat()
        )
    };
    let tasks = [
        task("fg", "", vec![call(s(310))]),
        task(
            "bg",
            "",
            vec![call(format!(
                "{} & nohup {} >/dev/null 2>&1 & {}",
                s(311),
                s(312),
                s(313)
            ))],
        ),
        task(
            "setsid",
            "",
            vec![call(format!(
                "setsid {} & setsid bash -c '{}; true' & wait",
                s(314),
                s(315)
            ))],
        ),
        task(
            "double",
            "",
            vec![call(format!(
                "bash -c '({} &)'; (setsid bash -c '{} & true' &); {}",
                s(316),
                s(317),
                s(318)
            ))],
        ),
        task(
            "left",
            "",
            vec![
                call(format!("setsid {} >/dev/null 2>&1 < /dev/null &", s(319))),
                call(s(320)),
            ],
        ),
        task("mcp", "    toolset: m\n", vec![call(s(321))]),
    ];
    format!(
        "name: kill\nconcurrency: 8\nproviders:\n  s: {{ protocol: anthropic, simulator: true }}\ntoolsets:\n  c: {{ tools: [bash], bash: {{ timeout: 10m }} }}\n  m:\n    tools: [bash]\n    bash: {{ timeout: 10m }}\n    mcp:\n      keeper: {{ command: sh, args: [\"-c\", \"setsid {} >/dev/null 2>&1 & {} >/dev/null 2>&1 & exec python3 {}\"] }}\ndefaults:\n  provider: s\n  model: claude-sonnet-4-5\n  toolset: c\n  repo: calc\n  prompt: p\ntasks:\n{}",
        s(301),
        s(302),
        paged.display(),
        tasks.concat()
    )
}

/// The binary with PID namespaces on (where the machine gives them) or off.
fn agentbatch(pid_namespace: bool) -> std::process::Command {
    let mut c = bin();
    c.env(
        "AGENTBATCH_PID_NAMESPACE",
        if pid_namespace { "on" } else { "off" },
    );
    c
}

/// Starts the run; returns the runner and the folder that marks its own processes (and
/// its wardens') in their command lines.
fn start(case: &Case, pid_namespace: bool) -> (Child, String) {
    let out = case.path("out");
    let child = agentbatch(pid_namespace)
        .args(["run", "job.yaml", "--run-id", "r", "--quiet", "--out"])
        .arg(&out)
        .current_dir(case.dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    (child, out.display().to_string())
}

/// Waits until every sleep of the job runs (they are seen in /proc).
fn wait_for_sleeps(token: &str) {
    wait_until("every sleep of the job", Duration::from_secs(90), || {
        SLEEPS
            .iter()
            .all(|n| !processes_with(&format!("{n}.{token}")).is_empty())
    });
}

/// Fails unless nothing with `needle` in its command line is left within `limit`,
/// naming what is.
fn none_left(needle: &str, what: &str, limit: Duration) {
    let start = Instant::now();
    loop {
        let left = processes_with(needle);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: {} processes still run {:?} after {limit:?}: {left:#?}",
            left.len(),
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn resume(case: &Case, out: &str, pid_namespace: bool) -> std::process::Output {
    agentbatch(pid_namespace)
        .args([
            "run",
            "job.yaml",
            "--quiet",
            "--resume",
            &format!("{out}/r"),
        ])
        .current_dir(case.dir.path())
        .output()
        .expect("binary runs")
}

#[test]
fn every_command_dies_with_a_killed_runner_with_and_without_a_pid_namespace() {
    for pid_namespace in [true, false] {
        let case = Case::new();
        calc_fixture(&case, "calc");
        let token = token();
        let go = case.path("go");
        case.write("job.yaml", &kill_job(&token, &go));
        let (mut runner, out) = start(&case, pid_namespace);
        wait_for_sleeps(&token);
        let mode = if pid_namespace {
            "with PID namespaces"
        } else {
            "without PID namespaces"
        };
        signal(runner.id(), "KILL");
        let _ = runner.wait();
        none_left(
            &format!(".{token}"),
            &format!("{mode}, the killed run's commands"),
            Duration::from_secs(5),
        );
        none_left(
            &out,
            &format!("{mode}, the killed runner's own processes"),
            Duration::from_secs(5),
        );
        // The resume runs every task again; its calls return at once, and its MCP
        // server's sleeps end with the server.
        std::fs::write(&go, "").unwrap();
        let again = resume(&case, &out, pid_namespace);
        assert!(again.status.code().is_some(), "{again:?}");
        let rows = read_csv(&case.path("out/r/results.csv"));
        assert_eq!(rows.len(), 6, "{mode}: {rows:?}");
        if !pid_namespace {
            assert!(
                rows[0]["sandbox"].contains("shared PID namespace"),
                "{rows:?}"
            );
        }
        none_left(
            &format!(".{token}"),
            &format!("{mode}, after the resume"),
            Duration::from_secs(5),
        );
    }
}

/// The runner's children that are forks of it (its commands' wardens): the same
/// command line.
fn wardens_of(runner: u32) -> Vec<u32> {
    let cmdline = |pid: u32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let own = cmdline(runner);
    processes_with("")
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            ppid == Some(runner) && cmdline(pid) == own
        })
        .collect()
}

/// Runs the kill job, stops the wardens, kills the runner with -9, then the wardens:
/// the case, its token, its "go" file, the run's --out, and the processes left.
fn killed_with_wardens() -> (Case, String, std::path::PathBuf, String, Vec<(u32, String)>) {
    let case = Case::new();
    calc_fixture(&case, "calc");
    let token = token();
    let go = case.path("go");
    case.write("job.yaml", &kill_job(&token, &go));
    let (mut runner, out) = start(&case, false);
    wait_for_sleeps(&token);
    // Stopped first, so none of them acts on the runner's death before it is killed.
    let wardens = wardens_of(runner.id());
    assert!(wardens.len() >= 6, "one warden per command: {wardens:?}");
    for &w in &wardens {
        let name = std::fs::read_to_string(format!("/proc/{w}/comm")).unwrap_or_default();
        assert_eq!(name.trim(), "ab-warden", "warden {w}");
    }
    // A warden may be gone meanwhile (a git call's): its signal may fail.
    let send = |pid: u32, sig: &str| {
        let _ = std::process::Command::new("kill")
            .args([format!("-{sig}"), pid.to_string()])
            .status();
    };
    for &w in &wardens {
        send(w, "STOP");
    }
    signal(runner.id(), "KILL");
    let _ = runner.wait();
    for &w in &wardens {
        send(w, "KILL");
    }
    let left = processes_with(&format!(".{token}"));
    if left.is_empty() {
        // Nothing to resume: what the run's tasks started is gone with it.
        none_left(
            &format!(".{token}"),
            "after a run killed with its wardens",
            Duration::from_secs(5),
        );
    }
    (case, token, go, out, left)
}

/// `pkill -9 -f agentbatch` kills the wardens with the runner. Without a PID namespace
/// a command's children then outlive it: the resume stops them and says so.
#[test]
fn a_resume_stops_what_a_run_killed_with_its_wardens_left() {
    // What survives a kill of the runner and its wardens is up to the OS's timing: on a
    // loaded machine nothing may (CI saw it once in many runs). A run where nothing did
    // cannot test the resume, so the run is made again, a few times at most.
    let mut attempt = 0;
    let (case, token, go, out, left) = loop {
        attempt += 1;
        let (case, token, go, out, left) = killed_with_wardens();
        if !left.is_empty() || attempt == 3 {
            break (case, token, go, out, left);
        }
    };
    assert!(
        !left.is_empty(),
        "nothing survived its warden in {attempt} runs: the test no longer tests the resume"
    );
    std::fs::write(&go, "").unwrap();
    let again = resume(&case, &out, false);
    let stderr = String::from_utf8_lossy(&again.stderr);
    none_left(
        &format!(".{token}"),
        "after the resume of a run killed with its wardens",
        Duration::from_secs(5),
    );
    assert!(
        stderr.contains("left running") && stderr.contains(&left[0].0.to_string()),
        "the resume says what it stopped ({} processes): {stderr}",
        left.len()
    );
}
