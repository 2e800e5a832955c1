//! Copy-on-write workspaces: an overlayfs layer over a read-only pristine checkout, so a
//! task's workspace costs a mount and what the agent writes, not a copy of the
//! repository. Mounts are made only inside the runner's own mount namespace
//! ([`private_mounts`]), so nothing else on the machine sees them and they vanish with
//! the process, even after kill -9: a later run finds only folders to delete.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// Set once the process has a mount namespace of its own.
static PRIVATE: AtomicBool = AtomicBool::new(false);

/// Gives the process a mount namespace of its own, with nothing propagated back to the
/// machine's. Must run before any thread starts (the kernel refuses to unshare a
/// filesystem context that threads share), so the binary calls it first thing; false
/// when it cannot (not root, no CAP_SYS_ADMIN, a threaded caller): workspaces are then
/// copied.
pub fn private_mounts() -> bool {
    #[cfg(target_os = "linux")]
    {
        use nix::mount::{mount, MsFlags};
        use nix::sched::{unshare, CloneFlags};
        let made = unshare(CloneFlags::CLONE_NEWNS).is_ok()
            && mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .is_ok();
        PRIVATE.store(made, Ordering::SeqCst);
        made
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// Whether tasks' workspaces can be overlay layers here: a private mount namespace and
/// an overlay mount that works (probed once, in a temporary folder).
pub fn available() -> bool {
    static PROBED: OnceLock<bool> = OnceLock::new();
    *PROBED.get_or_init(|| PRIVATE.load(Ordering::SeqCst) && probe().is_ok())
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
            let options = format!(
                "lowerdir={},upperdir={},workdir={}",
                layer.lower.display(),
                layer.upper.display(),
                layer.work.display()
            );
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
