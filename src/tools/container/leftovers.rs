//! Containers a killed runner left behind. A task's container stops by itself when its
//! runner dies (its loop reads end-of-file), but it stays on the engine, stopped, with
//! its writable layer. Every container carries the label `agentbatch.owner`: the
//! machine's name and boot, and the runner's pid and start time. Each run and resume
//! removes every container whose owner, on this machine, is no longer running, except
//! the ones `keep_workspaces` kept (renamed with [`KEPT_SUFFIX`]).

use super::engine::{Engine, QUICK};
use super::ContainerError;

/// The label that names the process that made a container.
pub const OWNER: &str = "agentbatch.owner";

/// What a kept container's name ends with.
pub const KEPT_SUFFIX: &str = "-kept";

/// This machine's name and boot id.
fn machine() -> (String, String) {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .trim()
        .to_string();
    (host, boot)
}

/// A process's start time (clock ticks since boot), which tells a pid reused from
/// the process that had it.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields count after it.
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// The owner label's value for this process: `host boot pid start`.
pub fn owner_label() -> (String, String) {
    let (host, boot) = machine();
    let pid = std::process::id();
    let start = start_time(pid).unwrap_or(0);
    (OWNER.to_string(), format!("{host} {boot} {pid} {start}"))
}

/// Whether the owner a label names is gone: on this machine (same host name), either
/// booted since or no process with that pid and start time. An owner on another
/// machine is never judged.
fn owner_gone(label: &str) -> bool {
    let mut parts = label.split(' ');
    let (Some(host), Some(boot), Some(pid), Some(start)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let (my_host, my_boot) = machine();
    if host != my_host {
        return false;
    }
    if boot != my_boot {
        return true;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    start_time(pid) != Some(start)
}

/// Removes the containers of runners that are gone (see the module), kept ones
/// aside; returns their names.
pub async fn remove_leftovers(engine: &Engine) -> Result<Vec<String>, ContainerError> {
    let ids = engine
        .run(
            &[
                "ps",
                "-a",
                "-q",
                "--no-trunc",
                "--filter",
                &format!("label={OWNER}"),
            ],
            QUICK,
        )
        .await?
        .text();
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let fmt = format!("{{{{.Id}}}}\t{{{{.Name}}}}\t{{{{index .Config.Labels \"{OWNER}\"}}}}");
    let mut args = vec!["inspect", "--format", &fmt];
    args.extend(ids.iter().copied());
    // A container removed meanwhile (another run's, ending) makes inspect fail for
    // all: then each is inspected alone, and the ones gone are skipped. (Giving up
    // left a killed run's containers behind whenever another run was ending.)
    let listed = match engine.run(&args, QUICK).await {
        Ok(out) => out.text(),
        Err(_) => {
            let mut text = String::new();
            for id in &ids {
                if let Ok(out) = engine.run(&["inspect", "--format", &fmt, id], QUICK).await {
                    text.push_str(&out.text());
                    text.push('\n');
                }
            }
            text
        }
    };
    let mut gone = Vec::new();
    for line in listed.lines() {
        let mut f = line.split('\t');
        let (Some(id), Some(name), Some(owner)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let name = name.trim_start_matches('/');
        if name.ends_with(KEPT_SUFFIX) || !owner_gone(owner) {
            continue;
        }
        if engine.run(&["rm", "-f", id], QUICK).await.is_ok() {
            gone.push(name.to_string());
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_its_own_live_owner_and_a_dead_pid_is_gone() {
        let (_, mine) = owner_label();
        assert!(!owner_gone(&mine), "{mine}");
        let (host, boot) = machine();
        // A pid that cannot be running with that start time.
        assert!(owner_gone(&format!(
            "{host} {boot} {} 1",
            std::process::id()
        )));
        assert!(owner_gone(&format!("{host} another-boot 1 1")));
        assert!(
            !owner_gone(&format!("{host}-elsewhere {boot} 1 1")),
            "another machine's"
        );
        assert!(!owner_gone("garbage"));
    }
}
