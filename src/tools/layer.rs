//! Copy-on-write workspaces: an overlayfs layer over a read-only pristine checkout, so a
//! task's workspace costs a mount and what the agent writes, not a copy of the
//! repository. Mounts are made only inside the runner's own mount namespace
//! ([`private_mounts`]), so nothing else on the machine sees them and they vanish with
//! the process, even after kill -9: a later run finds only folders to delete.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Which mount namespace of its own the process has: none yet, one made as root, or
/// one inside a user namespace of its own (unprivileged).
static PRIVATE: AtomicU8 = AtomicU8::new(NONE);
const NONE: u8 = 0;
const AS_ROOT: u8 = 1;
const IN_USER_NS: u8 = 2;

/// Set to `off` to keep the process in the machine's namespaces (no overlay
/// workspaces then; `auto` copies).
pub const NAMESPACE_VARIABLE: &str = "AGENTBATCH_MOUNT_NAMESPACE";

/// Gives the process a mount namespace of its own, with nothing propagated back to the
/// machine's: as root, or, where the process may not (no CAP_SYS_ADMIN), inside a user
/// namespace of its own that maps only its own user and group, so it keeps its
/// identity and its children run as before, without privileges (a set-user-ID program
/// such as `sudo` does not work in it). The user namespace is tried in a child process
/// first, overlay mount included, and entered only when it all works, so the runner is
/// never left in a half-made one nor in one that buys nothing. Must run before any
/// thread starts (the kernel refuses both to a threaded process), so the binary calls
/// it first thing; false when it cannot (a threaded caller, a kernel or policy without
/// unprivileged user namespaces, `AGENTBATCH_MOUNT_NAMESPACE=off`): workspaces are
/// then copied.
pub fn private_mounts() -> bool {
    #[cfg(target_os = "linux")]
    {
        use nix::sched::{unshare, CloneFlags};
        if std::env::var(NAMESPACE_VARIABLE).is_ok_and(|v| v == "off") {
            return false;
        }
        if let Ok(f) = std::fs::File::open("/proc/self/ns/mnt") {
            let _ = MACHINE_NAMESPACE.set(std::os::fd::OwnedFd::from(f));
        }
        let made = if unshare(CloneFlags::CLONE_NEWNS).is_ok() {
            mounts_private().then_some(AS_ROOT)
        } else {
            (user_namespace_works() && enter_user_namespace()).then_some(IN_USER_NS)
        };
        PRIVATE.store(made.unwrap_or(NONE), Ordering::SeqCst);
        made.is_some()
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// The machine's mount namespace, kept open before the process leaves it: container
/// engines must run there (see [`in_machine_namespace`]).
static MACHINE_NAMESPACE: OnceLock<std::os::fd::OwnedFd> = OnceLock::new();

/// Makes `cmd` run in the machine's mount namespace when the process has one of its
/// own. A container engine (podman) mounts the container's root filesystem and network
/// namespace where it runs: run from the runner's private namespace, those mounts would
/// be invisible to every later `podman` call from elsewhere (the next run, the user's
/// shell), which then fail on the container. Where the process cannot return (inside
/// an unprivileged user namespace) the command runs where it is.
pub fn in_machine_namespace(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    if let Some(fd) = MACHINE_NAMESPACE.get() {
        use std::os::fd::AsRawFd;
        let raw = fd.as_raw_fd();
        // SAFETY: setns is a single system call, allowed between fork and exec; the
        // descriptor outlives the child's exec (it is a static).
        unsafe {
            cmd.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(raw);
                let _ = nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNS);
                Ok(())
            });
        }
    }
}

/// Makes every mount of the process's (new) namespace private.
#[cfg(target_os = "linux")]
fn mounts_private() -> bool {
    use nix::mount::{mount, MsFlags};
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .is_ok()
}

/// Unshares a user and a mount namespace, mapping the effective user and group to
/// themselves (the kernel lets an unprivileged process map only those).
#[cfg(target_os = "linux")]
fn enter_user_namespace() -> bool {
    use nix::sched::{unshare, CloneFlags};
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).is_ok()
        && [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("{uid} {uid} 1")),
            ("/proc/self/gid_map", format!("{gid} {gid} 1")),
        ]
        .iter()
        .all(|(path, text)| std::fs::write(path, text).is_ok())
        && mounts_private()
}

/// Whether a child (a fork of this single-threaded process) can enter a user namespace
/// and mount an overlay there.
#[cfg(target_os = "linux")]
fn user_namespace_works() -> bool {
    use nix::sys::wait::{waitpid, WaitStatus};
    use nix::unistd::{fork, ForkResult};
    // SAFETY: called before any thread starts, so the child may do anything; it ends
    // with _exit, running no destructor of the parent's.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let ok = enter_user_namespace() && {
                PRIVATE.store(IN_USER_NS, Ordering::SeqCst);
                probe().is_ok()
            };
            // SAFETY: ends the child at once.
            unsafe { nix::libc::_exit(if ok { 0 } else { 1 }) }
        }
        Ok(ForkResult::Parent { child }) => {
            matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0)))
        }
        Err(_) => false,
    }
}

/// How the process got its mount namespace, for `validate` and the reports.
pub fn namespace() -> &'static str {
    match PRIVATE.load(Ordering::SeqCst) {
        AS_ROOT => "its own mount namespace",
        IN_USER_NS => "its own user and mount namespace (unprivileged overlay workspaces)",
        _ => "no mount namespace of its own (no overlay workspaces)",
    }
}

/// Whether tasks' workspaces can be overlay layers here: a private mount namespace and
/// an overlay mount that works (probed once, in a temporary folder).
pub fn available() -> bool {
    static PROBED: OnceLock<bool> = OnceLock::new();
    *PROBED.get_or_init(|| PRIVATE.load(Ordering::SeqCst) != NONE && probe().is_ok())
}

fn probe() -> std::io::Result<()> {
    let dir = std::env::temp_dir().join(format!("agentbatch-overlay-probe-{}", std::process::id()));
    let lower = dir.join("lower");
    std::fs::create_dir_all(&lower)?;
    let result = Layer::mount(&lower, &dir.join("layer")).and_then(|l| l.unmount());
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// One task's layer: `merged` is the workspace, `upper` holds what the task wrote.
#[derive(Debug, Clone)]
pub struct Layer {
    pub lower: PathBuf,
    pub upper: PathBuf,
    work: PathBuf,
    pub merged: PathBuf,
    /// Mounted in a user namespace: its whiteouts and opaque marks are `user.`
    /// attributes.
    pub userxattr: bool,
}

impl Layer {
    /// Mounts an overlay of `lower` (read-only) at `dir/merged`, writing to
    /// `dir/upper`. Blocking.
    pub fn mount(lower: &Path, dir: &Path) -> std::io::Result<Layer> {
        let layer = Layer {
            lower: lower.to_path_buf(),
            upper: dir.join("upper"),
            work: dir.join("work"),
            merged: dir.join("merged"),
            userxattr: PRIVATE.load(Ordering::SeqCst) == IN_USER_NS,
        };
        for d in [&layer.upper, &layer.work, &layer.merged] {
            std::fs::create_dir_all(d)?;
        }
        #[cfg(target_os = "linux")]
        {
            use nix::mount::{mount, MsFlags};
            // Commas and colons separate overlay options: refuse paths holding them.
            for p in [&layer.lower, &layer.upper, &layer.work] {
                let s = p.to_string_lossy();
                if s.contains(',') || s.contains(':') {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("{s}: an overlay path cannot hold ',' or ':'"),
                    ));
                }
            }
            let options = layer.options();
            mount(
                Some("overlay"),
                &layer.merged,
                Some("overlay"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(options.as_str()),
            )
            .map_err(std::io::Error::from)?;
            Ok(layer)
        }
        #[cfg(not(target_os = "linux"))]
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "overlay workspaces need Linux",
        ))
    }

    /// The overlay's mount options. Inside a user namespace, overlayfs keeps whiteouts
    /// and opaque marks in `user.` attributes (`trusted.` ones need root).
    /// `redirect_dir` and `metacopy` are off whatever the kernel's defaults (`userxattr`
    /// implies both and refuses them spelled out): a folder renamed under a redirect,
    /// or a file copied up as metadata only, would leave the upper folder without the
    /// files the patch reads.
    fn options(&self) -> String {
        let extra = if self.userxattr {
            "userxattr"
        } else {
            "redirect_dir=off,metacopy=off"
        };
        format!(
            "lowerdir={},upperdir={},workdir={},{extra}",
            self.lower.display(),
            self.upper.display(),
            self.work.display()
        )
    }

    /// The command that mounts a kept layer whole again (as root; unprivileged, inside
    /// `unshare -rm`), at its `merged` folder.
    pub fn reassemble(&self) -> String {
        format!(
            "mount -t overlay overlay -o {} {}",
            self.options(),
            self.merged.display()
        )
    }

    /// Unmounts the layer (lazily, so a process still inside it does not keep it).
    pub fn unmount(&self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            nix::mount::umount2(&self.merged, nix::mount::MntFlags::MNT_DETACH)
                .map_err(std::io::Error::from)
        }
        #[cfg(not(target_os = "linux"))]
        Ok(())
    }

    /// Unmounts and deletes the layer's folders (the upper layer too). A layer that
    /// cannot be unmounted is left as it is.
    pub fn remove(&self) -> std::io::Result<()> {
        self.unmount()?;
        match self.merged.parent() {
            Some(dir) => std::fs::remove_dir_all(dir),
            None => Ok(()),
        }
    }
}
