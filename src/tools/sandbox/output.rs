//! What a command did and how much of its output is kept: shared by the host sandbox
//! and the container that runs a task's commands instead.

use std::time::Duration;

/// How long a command has after SIGTERM before SIGKILL, on the host and in a container.
pub const GRACE: Duration = Duration::from_secs(2);

/// How long a command may run and how much of its output is kept.
#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub max_output: usize,
}

/// What a command did.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// None when it was killed (timeout, cancellation) or died of a signal.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// stdout and stderr interleaved, capped.
    pub output: String,
    /// Bytes the command wrote in all.
    pub total_bytes: u64,
    pub ms: u64,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }

    /// One line saying how it ended.
    pub fn status(&self, timeout: Duration) -> String {
        match (self.exit_code, self.timed_out, self.cancelled) {
            (_, true, _) => format!(
                "killed after the {} timeout",
                humantime::format_duration(timeout)
            ),
            (_, _, true) => "killed: the task was stopped".into(),
            (Some(c), _, _) => format!("exit code {c}"),
            (None, _, _) => "killed by a signal".into(),
        }
    }
}

/// Output kept within a limit: the first half and the last half of `max` bytes, and a
/// count of what was cut in between.
pub(crate) struct Capped {
    max: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    pub(crate) total: u64,
}

impl Capped {
    pub(crate) fn new(max: usize) -> Capped {
        Capped {
            max: max.max(2),
            head: Vec::new(),
            tail: Default::default(),
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_room = self.max / 2 - self.head.len().min(self.max / 2);
        let take = head_room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        let tail_max = self.max - self.max / 2;
        if bytes.len() >= tail_max {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - tail_max..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(tail_max);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    pub(crate) fn render(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.total > kept {
            s.push_str(&format!(
                "\n[... {} bytes of output cut ...]\n",
                self.total - kept
            ));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}
