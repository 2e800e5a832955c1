//! The warden: a small process between the runner and every command it starts (bash,
//! setup and check, stdio MCP servers, git), so that nothing a command starts outlives
//! the command or the runner, however the runner ends.
//!
//! The runner's child is a fork of the runner that never execs. It leads a process
//! group of its own, becomes a child subreaper (orphans of the command, `setsid` and
//! double-forked ones included, become its children), forks the command (which keeps
//! the group and gets SIGKILL as its parent-death signal), and waits. When the command
//! ends, or the runner is gone, or the grace period after a SIGTERM is over, it kills
//! every process of its group and every child it has, until none is left, and exits
//! with the command's status (128 plus the signal for one killed by a signal).
//!
//! The runner's death is seen on a pipe, not through a parent-death signal: the kernel
//! sends that signal when the *thread* that forked exits, and a tokio thread may end
//! while its command runs. The runner holds the pipe's only write end (close-on-exec,
//! closed by each warden at once), so the read end reports a hang-up exactly when the
//! runner process is gone, whichever thread started the command, and at once if it
//! died before the warden started watching.
//!
//! Between fork and exec only system calls run (no allocation, no lock): everything is
//! raw `libc` on memory of the stack.

use std::io;
use std::os::fd::RawFd;
use std::sync::OnceLock;

use nix::libc;

/// Time between SIGTERM and SIGKILL, for the runner's timeouts and for the warden.
pub use super::output::GRACE;

/// How long a warden keeps killing what it cannot see end (a process stuck in the
/// kernel) before it leaves it to init.
const GIVE_UP_MS: i64 = 5_000;

/// The pipe whose write end the runner alone holds: its hang-up is the runner's death.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lifeline {
    read: RawFd,
    write: RawFd,
}

/// The runner's lifeline, made once per process and never closed.
pub(super) fn lifeline() -> io::Result<Lifeline> {
    static LINE: OnceLock<Result<Lifeline, i32>> = OnceLock::new();
    let made = LINE.get_or_init(|| {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(last_errno());
        }
        Ok(Lifeline {
            read: fds[0],
            write: fds[1],
        })
    });
    (*made).map_err(io::Error::from_raw_os_error)
}

/// Makes `cmd` run under a warden: it and everything it starts die when it ends, when
/// the runner dies (kill -9 included), or [`GRACE`] after a SIGTERM to the warden.
/// The warden leads a process group that holds the command, so `killpg` on the child's
/// id reaches both; the child's exit status is the command's.
pub fn die_with_runner(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let line = lifeline();
    let errno = line.as_ref().err().and_then(io::Error::raw_os_error);
    let line = line.ok();
    // SAFETY: `stand` makes only system calls (see the module's note).
    unsafe {
        cmd.pre_exec(move || match line {
            Some(line) => stand(line),
            None => Err(io::Error::from_raw_os_error(errno.unwrap_or(libc::EMFILE))),
        });
    }
}

/// Makes `cmd` die (SIGKILL) with the thread that starts it, for a command that thread
/// waits for to the end: the runner's own git calls, which run on a blocking thread
/// from spawn to exit. The kernel's parent-death signal fires when that thread ends,
/// which for such a call is only when the runner dies. A warden costs two forks of
/// the runner per call where this costs one (the overlay workspace benchmark's patches
/// took twice as long under wardens); git starts nothing that outlives it.
pub fn dies_with_caller(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let runner = std::process::id() as libc::pid_t;
    // SAFETY: only system calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The runner died before the signal was set.
            if libc::getppid() != runner {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Runs in the runner's forked child: becomes the warden and forks the command. Returns
/// only in the command's process (which goes on to exec); the warden itself never
/// returns from here.
pub(super) fn stand(line: Lifeline) -> io::Result<()> {
    // SAFETY: plain system calls on values of this frame; the process is a
    // single-threaded child of fork.
    unsafe {
        // The runner's end: a warden holding it would never see the runner go.
        libc::close(line.write);
        if libc::getpgrp() != libc::getpid() && libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // Every signal waits in the mask; SIGTERM and SIGCHLD are read from a
        // descriptor. The command gets the mask the runner's thread had.
        let mut old: libc::sigset_t = std::mem::zeroed();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        if libc::sigprocmask(libc::SIG_SETMASK, &all, &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut watched: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut watched);
        libc::sigaddset(&mut watched, libc::SIGTERM);
        libc::sigaddset(&mut watched, libc::SIGCHLD);
        let signals = libc::signalfd(-1, &watched, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if signals < 0 {
            return Err(io::Error::last_os_error());
        }
        // Orphans of the command are reparented here rather than to init. (Linux 3.4;
        // without it only the group is reached.)
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // Opened before the command mounts a /proc of its own PID namespace over it.
        let procfs = libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        // The command checks on this pipe that the warden still lives once its own
        // death signal is set (getppid says nothing across a PID namespace).
        let mut held = [0; 2];
        if libc::pipe2(held.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                for fd in [held[1], signals, procfs, line.read] {
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                let mut end = libc::pollfd {
                    fd: held[0],
                    events: libc::POLLIN,
                    revents: 0,
                };
                if libc::poll(&mut end, 1, 0) != 0 {
                    // The warden died before the death signal was set.
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
                libc::close(held[0]);
                if libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            }
            child => {
                libc::close(held[0]);
                // Told apart from the runner in `ps -o comm` and `top`, and out of reach
                // of `killall agentbatch`, which would leave the command orphaned.
                libc::prctl(libc::PR_SET_NAME, c"ab-warden".as_ptr(), 0, 0, 0);
                watch(Warden {
                    child,
                    me: libc::getpid(),
                    line: line.read,
                    signals,
                    held: held[1],
                    procfs,
                })
            }
        }
    }
}

/// What the warden watches and holds.
struct Warden {
    /// The command.
    child: libc::pid_t,
    /// The warden's pid, which is also its group's id.
    me: libc::pid_t,
    /// The lifeline's read end.
    line: RawFd,
    /// SIGTERM and SIGCHLD.
    signals: RawFd,
    /// Kept open while the warden lives (see `stand`).
    held: RawFd,
    /// /proc, to find the group's processes and the warden's children; -1 without.
    procfs: RawFd,
}

/// Waits for the command's end, the runner's death or the end of the grace period;
/// then ends everything and exits.
fn watch(w: Warden) -> ! {
    close_all_but(&[w.line, w.signals, w.held, w.procfs]);
    let mut status = None;
    let mut deadline: Option<i64> = None;
    loop {
        reap(&mut status, w.child);
        if status.is_some() {
            break;
        }
        let timeout = deadline.map_or(-1, |d| (d - now_ms()).clamp(0, i32::MAX as i64) as i32);
        let mut fds = [
            libc::pollfd {
                fd: w.line,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: w.signals,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: poll on an array of this frame.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n < 0 && last_errno() != libc::EINTR {
            break;
        }
        if fds[0].revents != 0 {
            // The runner is gone.
            break;
        }
        if fds[1].revents != 0 && read_signals(w.signals) && deadline.is_none() {
            deadline = Some(now_ms() + GRACE.as_millis() as i64);
            // To the whole group (the warden included, which then reads it again): the
            // runner and rmcp signal the warden alone.
            // SAFETY: kill with pid 0 signals the caller's own group.
            unsafe { libc::kill(0, libc::SIGTERM) };
        }
        if deadline.is_some_and(|d| now_ms() >= d) {
            break;
        }
    }
    end_all(&w, &mut status);
    let code = match status {
        Some(s) if libc::WIFEXITED(s) => libc::WEXITSTATUS(s),
        Some(s) if libc::WIFSIGNALED(s) => 128 + libc::WTERMSIG(s),
        _ => 128 + libc::SIGKILL,
    };
    // SAFETY: _exit ends the process without running anything of the runner's.
    unsafe { libc::_exit(code) }
}

/// Kills the command (unless it has ended), every other process of the group and
/// every child of the warden (orphans included), again as orphans of the killed ones
/// arrive, until the warden has no child left.
fn end_all(w: &Warden, status: &mut Option<i32>) {
    let start = now_ms();
    loop {
        if status.is_none() {
            // SAFETY: the command is not reaped yet, so its pid is still ours.
            unsafe { libc::kill(w.child, libc::SIGKILL) };
        }
        reap(status, w.child);
        if no_children() || w.procfs < 0 || now_ms() - start > GIVE_UP_MS {
            return;
        }
        kill_group_and_children(w.procfs, w.me);
        // Wake on the next child's end, or soon anyway.
        let mut fd = libc::pollfd {
            fd: w.signals,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on a value of this frame.
        if unsafe { libc::poll(&mut fd, 1, 10) } > 0 {
            read_signals(w.signals);
        }
    }
}

/// Reaps every child that has ended; the command's status is kept.
fn reap(status: &mut Option<i32>, child: libc::pid_t) {
    loop {
        let mut s = 0;
        // SAFETY: waitpid writes the status into a value of this frame.
        let pid = unsafe { libc::waitpid(-1, &mut s, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if pid == child {
            *status = Some(s);
        }
    }
}

/// Whether the warden has no child at all, running or ended.
fn no_children() -> bool {
    // SAFETY: waitid writes into a zeroed siginfo of this frame; WNOWAIT reaps nothing.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ) != 0
            && last_errno() == libc::ECHILD
    }
}

/// Reads every pending signal; whether a SIGTERM was among them.
fn read_signals(fd: RawFd) -> bool {
    let mut term = false;
    loop {
        // SAFETY: reads whole signalfd records into a zeroed value of this frame.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        let n = unsafe { libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        if n != size as isize {
            return term;
        }
        term |= info.ssi_signo == libc::SIGTERM as u32;
    }
}

/// Milliseconds of the monotonic clock.
fn now_ms() -> i64 {
    // SAFETY: clock_gettime writes into a value of this frame.
    unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t);
        t.tv_sec * 1000 + t.tv_nsec / 1_000_000
    }
}

/// Closes every descriptor but `keep` (negative entries ignored), stdio included: the
/// warden holds no pipe of the runner's or the command's open.
fn close_all_but(keep: &[RawFd]) {
    let mut sorted = [-1; 4];
    for (slot, fd) in sorted.iter_mut().zip(keep) {
        *slot = *fd;
    }
    sorted.sort_unstable();
    let mut from = 0;
    for &fd in sorted.iter().filter(|fd| **fd >= 0) {
        close_range(from, fd - 1);
        from = fd + 1;
    }
    close_range(from, i32::MAX);
}

/// Closes descriptors `from..=to`.
fn close_range(from: RawFd, to: RawFd) {
    if from > to {
        return;
    }
    // SAFETY: close_range and close are plain system calls.
    unsafe {
        if libc::syscall(libc::SYS_close_range, from as u32, to as u32, 0u32) != 0 {
            for fd in from..to.min(4095) + 1 {
                libc::close(fd);
            }
        }
    }
}

/// SIGKILL to every process of the group `me` leads and to every child of `me`, found
/// in /proc (zombies are left to their parents).
fn kill_group_and_children(procfs: RawFd, me: libc::pid_t) {
    let mut buf = [0u8; 4096];
    // SAFETY: the directory is read from its start into a buffer of this frame.
    unsafe { libc::lseek(procfs, 0, libc::SEEK_SET) };
    loop {
        // SAFETY: getdents64 fills at most `buf.len()` bytes.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                procfs,
                buf.as_mut_ptr(),
                buf.len() as libc::c_uint,
            )
        };
        if n <= 0 {
            return;
        }
        let mut at = 0usize;
        while at + 19 < n as usize {
            let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
            if reclen == 0 {
                return;
            }
            let name = &buf[at + 19..(at + reclen).min(n as usize)];
            let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
            if let Some(pid) = parse_pid(name) {
                if pid != me && belongs(procfs, name, me) {
                    // SAFETY: a plain system call.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            at += reclen;
        }
    }
}

/// A /proc entry's name as a pid.
fn parse_pid(name: &[u8]) -> Option<libc::pid_t> {
    if name.is_empty() || name.len() > 10 || !name.iter().all(u8::is_ascii_digit) {
        return None;
    }
    name.iter().try_fold(0 as libc::pid_t, |n, d| {
        n.checked_mul(10)?.checked_add((d - b'0') as libc::pid_t)
    })
}

/// Whether the process named `name` in /proc is alive and a child of `me` or in its
/// group, from its `stat` line: `pid (comm) state ppid pgrp ...`.
fn belongs(procfs: RawFd, name: &[u8], me: libc::pid_t) -> bool {
    let mut path = [0u8; 24];
    path[..name.len()].copy_from_slice(name);
    path[name.len()..name.len() + 5].copy_from_slice(b"/stat");
    let mut line = [0u8; 512];
    // SAFETY: a NUL-terminated path and a buffer of this frame; the file is closed.
    let n = unsafe {
        let fd = libc::openat(
            procfs,
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let n = libc::read(fd, line.as_mut_ptr().cast(), line.len());
        libc::close(fd);
        n
    };
    if n <= 0 {
        return false;
    }
    let line = &line[..n as usize];
    // The command name may hold anything, ')' included: the fields start after the last.
    let Some(close) = line.iter().rposition(|b| *b == b')') else {
        return false;
    };
    let mut fields = line[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty());
    let state = fields.next();
    let ppid = fields.next().and_then(parse_pid);
    let pgrp = fields.next().and_then(parse_pid);
    state != Some(b"Z") && (ppid == Some(me) || pgrp == Some(me))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The runner's git calls die with the thread that starts (and waits for) them:
    /// when the runner dies, that thread is gone too.
    #[test]
    fn a_command_dies_with_the_thread_that_started_it() {
        let pid = std::thread::spawn(|| {
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("300");
            dies_with_caller(&mut cmd);
            cmd.spawn().expect("sleep starts").id()
        })
        .join()
        .expect("the thread ends");
        let stat = format!("/proc/{pid}/stat");
        let dead = |s: &str| {
            s.is_empty()
                || s.rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z'))
        };
        let started = std::time::Instant::now();
        while !dead(&std::fs::read_to_string(&stat).unwrap_or_default()) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "sleep {pid} outlived the thread that started it"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Reaped here, as the thread that dropped its handle did not.
        // SAFETY: waitpid on our own child.
        unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), 0) };
    }

    #[test]
    fn pids_and_stat_lines_are_read_from_bytes() {
        assert_eq!(parse_pid(b"4242"), Some(4242));
        assert_eq!(parse_pid(b"self"), None);
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"99999999999"), None);
    }
}
