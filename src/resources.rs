//! What the process itself used, from the OS, and the file-descriptor limit a run with
//! thousands of loops in flight needs.

use serde::Serialize;

/// CPU time and peak memory of this process (all threads, children excluded).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    pub cpu_user_s: f64,
    pub cpu_sys_s: f64,
    pub max_rss_mb: f64,
}

impl Usage {
    pub fn cpu_s(&self) -> f64 {
        self.cpu_user_s + self.cpu_sys_s
    }
}

/// getrusage(RUSAGE_SELF); zeros where the platform cannot tell.
pub fn own_usage() -> Usage {
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrusage, UsageWho};
        if let Ok(u) = getrusage(UsageWho::RUSAGE_SELF) {
            let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            return Usage {
                cpu_user_s: secs(u.user_time()),
                cpu_sys_s: secs(u.system_time()),
                // Linux reports kilobytes.
                max_rss_mb: u.max_rss() as f64 / 1024.0,
            };
        }
    }
    Usage::default()
}

/// Raises the soft limit on open files to the hard limit: every task in flight holds a
/// connection and a transcript, so the common default of 1,024 caps a run at a few
/// hundred tasks. Returns the limit now in force.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use nix::sys::resource::{getrlimit, setrlimit, Resource};
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
        if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
            return Some(hard);
        }
        return Some(soft);
    }
    #[allow(unreachable_code)]
    None
}

/// Restores the default action of SIGPIPE, which Rust's runtime ignores: a command that
/// only prints then ends quietly when the program reading its output exits
/// (`agentbatch validate job.yaml | head`), instead of panicking on the failed write.
/// Not for a run: its output is a summary, and its reports matter more.
pub fn end_quietly_when_stdout_closes() {
    #[cfg(unix)]
    {
        use nix::sys::signal::{signal, SigHandler, Signal};
        // SAFETY: SIG_DFL installs no handler of ours; nothing runs at the signal.
        let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
    }
}
