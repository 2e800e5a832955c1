//! What a killed run can still leave running, and how the next attempt finds it.
//!
//! Wardens end their commands when the runner dies, so normally nothing is left. A
//! warden killed with the runner (`pkill -9 -f agentbatch` reaches the wardens too:
//! they are forks of it, with its command line) takes its command with it (the
//! command's death signal) and, with a PID namespace, everything the command started;
//! without one, the command's children are left to init. Every command and MCP server of a run carries the run's folder in
//! `AGENTBATCH_RUN`, and a resume, which holds the folder's lock (so no runner of it is
//! alive), kills every process that still does.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The variable that names the run folder a process was started for.
pub const RUN_VARIABLE: &str = "AGENTBATCH_RUN";

/// The variable and value that mark the processes of the run in `dir` (its canonical
/// path, so a relative `--out` and the resume's path agree).
pub fn run_marker(dir: &Path) -> (&'static str, String) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    (RUN_VARIABLE, dir.display().to_string())
}

/// Kills (SIGKILL) every process whose environment marks it as started for the run in
/// `dir`, again for what they start meanwhile; the pids killed, in order. Processes
/// whose environment this user cannot read (another user's) are not seen.
pub fn stop_leftovers(dir: &Path) -> Vec<u32> {
    let (name, value) = run_marker(dir);
    let needle = format!("{name}={value}");
    let mut stopped = BTreeSet::new();
    for _ in 0..5 {
        let found = marked(needle.as_bytes());
        if found.is_empty() {
            break;
        }
        for pid in found {
            if let Ok(raw) = i32::try_from(pid) {
                let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
            }
            stopped.insert(pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stopped.into_iter().collect()
}

/// The processes (this one aside) whose environment holds the entry `needle`.
fn marked(needle: &[u8]) -> Vec<u32> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_process_is_stopped_and_an_unmarked_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (name, value) = run_marker(dir.path());
        let start = |marker: &str| {
            std::process::Command::new("sleep")
                .arg("300")
                .env(name, marker)
                .spawn()
                .unwrap()
        };
        let mut ours = start(&value);
        let mut other = start(&format!("{value}-other"));
        let stopped = stop_leftovers(dir.path());
        assert_eq!(stopped, vec![ours.id()]);
        assert!(ours.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(
            other.try_wait().unwrap().is_none(),
            "another run's process lives"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
