//! What the kernel lets a command be confined by, probed once per process, and the
//! setup a child runs between fork and exec: its warden (see `warden.rs`), its own PID
//! namespace where the kernel gives one, Landlock rules that allow writes only in the
//! workspace and a private temp folder, and a fresh network namespace when the network
//! is cut.

use std::ffi::CString;
use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use landlock::{
    path_beneath_rules, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    RulesetStatus, Scope, ABI,
};
use nix::sched::CloneFlags;

use super::warden::{lifeline, stand, Lifeline};

/// The Landlock ABI the rules are written for; older kernels get the best they support.
const LANDLOCK_ABI: ABI = ABI::V5;

/// What this machine can confine, found once per process.
#[derive(Debug, Clone)]
pub(super) struct Capabilities {
    /// e.g. "landlock ABI 7", or None when Landlock does not enforce here.
    pub(super) landlock: Option<String>,
    /// The unshare flags that give a command its own empty network namespace.
    pub(super) netns: Option<CloneFlags>,
    /// Commands can get their own PID namespace and /proc (as root).
    pub(super) pidns: bool,
}

/// Set to `off` to run commands without a PID namespace where the kernel would give
/// one: their wardens alone then keep them from outliving the runner (what a machine
/// without namespaces gets; the tests use it to run that path here).
pub const PID_NAMESPACE_VARIABLE: &str = "AGENTBATCH_PID_NAMESPACE";

/// Whether `AGENTBATCH_PID_NAMESPACE=off` is set.
fn pid_namespace_turned_off() -> bool {
    std::env::var(PID_NAMESPACE_VARIABLE).is_ok_and(|v| v == "off")
}

pub(super) fn capabilities() -> &'static Capabilities {
    static CAPS: OnceLock<Capabilities> = OnceLock::new();
    CAPS.get_or_init(|| Capabilities {
        landlock: probe_landlock(),
        netns: probe_netns(),
        pidns: !pid_namespace_turned_off() && probe(true, None),
    })
}

/// Restricts a throwaway thread (Landlock applies to the calling thread only), to learn
/// whether rules are enforced here and at which ABI.
pub(super) fn probe_landlock() -> Option<String> {
    let dir = std::env::temp_dir();
    std::thread::spawn(move || {
        let status = ruleset(&dir, &dir).ok()?.restrict_self().ok()?;
        let enforced = !matches!(status.ruleset, RulesetStatus::NotEnforced);
        let abi = match status.landlock {
            landlock::LandlockStatus::Available { effective_abi, .. } => {
                format!("{effective_abi:?}")
            }
            other => format!("{other:?}"),
        };
        enforced.then(|| format!("landlock {}", abi.to_lowercase().replace('v', "ABI ")))
    })
    .join()
    .ok()
    .flatten()
}

/// Tries a child in a new network namespace, as root or through a user namespace.
pub(super) fn probe_netns() -> Option<CloneFlags> {
    [
        CloneFlags::CLONE_NEWNET,
        CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET,
    ]
    .into_iter()
    .find(|flags| probe(false, Some(*flags)))
}

/// Whether `true` runs in a PID namespace of its own (`pidns`) and with the network
/// cut by these unshare flags.
fn probe(pidns: bool, netns: Option<CloneFlags>) -> bool {
    let Ok(line) = lifeline() else {
        return false;
    };
    let setup = ChildSetup {
        pidns,
        netns,
        bind: None,
        rules: Mutex::new(None),
        line,
    };
    let mut cmd = std::process::Command::new("true");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: see `child_setup`.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || child_setup(&setup));
    }
    cmd.status().is_ok_and(|s| s.success())
}

/// What a command's process does between fork and exec.
pub(super) struct ChildSetup {
    /// Its own PID and mount namespaces with a fresh /proc: it sees none of the runner's
    /// processes (nor their environment), and everything it starts dies with it, even
    /// what left its process group.
    pub(super) pidns: bool,
    /// Unshare flags for an empty network namespace (loopback only).
    pub(super) netns: Option<CloneFlags>,
    /// With `pidns`: the workspace mounted at the repository's own path in the new
    /// mount namespace, and the command started there.
    pub(super) bind: Option<Bind>,
    /// Landlock rules, built before the fork.
    pub(super) rules: Mutex<Option<RulesetCreated>>,
    /// The runner's lifeline, for the command's warden.
    pub(super) line: Lifeline,
}

/// The workspace and the path a command sees it at, as C strings made before the fork
/// (nothing is allocated after it).
pub(super) struct Bind {
    pub(super) workspace: CString,
    pub(super) seen_at: CString,
}

impl Bind {
    pub(super) fn new(workspace: &Path, seen_at: &Path) -> io::Result<Bind> {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
        };
        Ok(Bind {
            workspace: c(workspace)?,
            seen_at: c(seen_at)?,
        })
    }
}

/// Runs in the forked child before exec. Only system calls: unshare, mount, chdir, the
/// warden's fork (its side never returns: it watches the command and exits as it did),
/// prctl, ioctl, and landlock_restrict_self on a ruleset built before the first fork
/// (its mutex is used by this process alone, so it is never held at fork time).
pub(super) fn child_setup(s: &ChildSetup) -> io::Result<()> {
    use nix::mount::{mount, MsFlags};
    if s.pidns {
        nix::sched::unshare(CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS)?;
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )?;
    }
    // With a PID namespace the command is its first process: when it ends (or its
    // warden is killed, its death signal), the kernel kills the whole namespace.
    stand(s.line)?;
    if s.pidns {
        mount(
            Some("proc"),
            "/proc",
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )?;
        if let Some(b) = &s.bind {
            // The repository's own folder is the task's workspace, for this command
            // alone; the working folder (entered before this) becomes that path.
            mount(
                Some(b.workspace.as_c_str()),
                b.seen_at.as_c_str(),
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            nix::unistd::chdir(b.seen_at.as_c_str())?;
        }
    }
    if let Some(flags) = s.netns {
        nix::sched::unshare(flags)?;
        loopback_up();
    }
    let rules = s.rules.lock().map(|mut r| r.take()).unwrap_or(None);
    if let Some(r) = rules {
        r.restrict_self()
            .map_err(|_| io::Error::from_raw_os_error(nix::errno::Errno::EPERM as i32))?;
    }
    Ok(())
}

/// Brings up the loopback interface of a fresh network namespace, so programs that talk
/// to themselves over 127.0.0.1 still work.
pub(super) fn loopback_up() {
    use nix::libc;
    // SAFETY: plain system calls on a zeroed ifreq and a socket closed right after.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            return;
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags =
            (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
        libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr);
        libc::close(fd);
    }
}

/// Read and execute everywhere; write, create and delete only under `workspace` and
/// `tmp` (plus the usual device files).
pub(super) fn ruleset(
    workspace: &Path,
    tmp: &Path,
) -> Result<RulesetCreated, landlock::RulesetError> {
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let devices = [
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
    ];
    Ruleset::default()
        .handle_access(all)?
        // no signals to processes outside (the runner, other tasks)
        .scope(Scope::Signal)?
        .create()?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(LANDLOCK_ABI)))?
        .add_rules(path_beneath_rules(
            devices.iter().filter(|d| Path::new(d).exists()),
            AccessFs::from_read(LANDLOCK_ABI) | AccessFs::WriteFile,
        ))?
        .add_rules(path_beneath_rules(
            [workspace, tmp, Path::new("/dev/shm")]
                .into_iter()
                .filter(|p| p.exists()),
            all,
        ))
}

/// Makes this process non-dumpable so that commands run as the same user cannot read
/// its `/proc/<pid>/environ` or memory (where API keys live) even when neither a PID
/// namespace nor Landlock is available to hide it. Children get the normal setting
/// back when they exec, so tools are unaffected.
pub fn protect_runner() {
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("agentbatch: warning: could not mark this process non-dumpable ({e}); commands run by tasks may be able to read its environment");
    }
}

/// What this machine provides, for tests and `agentbatch validate`.
pub fn describe_capabilities() -> String {
    let c = capabilities();
    format!(
        "{}; {}; {}; the runner has {}",
        c.landlock
            .clone()
            .unwrap_or_else(|| "Landlock not available (commands may write anywhere)".into()),
        if c.pidns {
            "PID and mount namespaces available (commands see their workspace at the repository's own path)"
        } else if pid_namespace_turned_off() {
            "PID and mount namespaces turned off (AGENTBATCH_PID_NAMESPACE=off: commands see their workspace where it is, so a link naming the repository by its absolute path reaches the repository itself)"
        } else {
            "PID and mount namespaces not available (commands see their workspace where it is, so a link naming the repository by its absolute path reaches the repository itself)"
        },
        if c.netns.is_some() {
            "network namespaces available"
        } else {
            "network namespaces not available"
        },
        crate::tools::layer::namespace()
    )
}
