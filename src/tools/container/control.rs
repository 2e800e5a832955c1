//! The runner's side of a container's control folder: its files, created so that
//! nothing the container plants there (a symbolic link) redirects a write, and the
//! status FIFO's reader.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;
use tokio::net::unix::pipe;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::{ContainerError, Done, START};

/// Single quotes for the shell.
pub(super) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub(super) fn io_err(
    what: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> ContainerError {
    let path = path.to_path_buf();
    move |source| ContainerError::Io { what, path, source }
}

/// Writes a new file of the control folder, which the container can write too: an
/// entry already there (a symbolic link an agent planted to make the runner write a
/// file of this machine) is removed, and the file is created exclusively without
/// following links, so the write lands in the control folder or fails.
pub(super) fn write_new(path: &Path, bytes: &[u8]) -> Result<(), ContainerError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err("create", path))?;
    f.write_all(bytes).map_err(io_err("write", path))?;
    // The mode the container's user needs, whatever the umask; on the open file.
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(io_err("set the mode of", path))
}

pub(super) fn mkfifo(path: &Path) -> Result<(), ContainerError> {
    use nix::sys::stat::Mode;
    nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o666)).map_err(|e| ContainerError::Io {
        what: "make the FIFO",
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    chmod(path, 0o666)
}

/// Modes the task's user inside the container needs whatever the runner's umask.
/// Never through a symbolic link: the container can plant one in the control folder.
pub(super) fn chmod(path: &Path, mode: u32) -> Result<(), ContainerError> {
    use nix::sys::stat::{fchmodat, FchmodatFlags, Mode};
    fchmodat(
        nix::fcntl::AT_FDCWD,
        path,
        Mode::from_bits_truncate(mode),
        FchmodatFlags::NoFollowSymlink,
    )
    .map_err(|e| ContainerError::Io {
        what: "set the mode of",
        path: path.to_path_buf(),
        source: e.into(),
    })
}

/// Reads the loop's status lines (`ready`, `N status oom_kills`) and hands each to the
/// command waiting for it; end-of-file after `ready` means the container stopped.
pub(super) async fn read_statuses(
    statuses: pipe::Receiver,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<Done>>>>,
    gone: CancellationToken,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut lines = tokio::io::BufReader::new(statuses);
    let started = Instant::now();
    let mut line = String::new();
    loop {
        line.clear();
        match lines.read_line(&mut line).await {
            Ok(0) | Err(_) if ready.is_some() => {
                // No writer yet: the loop has not opened the FIFO.
                if started.elapsed() > START {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let l = line.trim();
                if l == "ready" {
                    if let Some(r) = ready.take() {
                        let _ = r.send(());
                    }
                    continue;
                }
                let mut parts = l.split_whitespace();
                let (Some(n), Some(code)) = (
                    parts.next().and_then(|n| n.parse::<u64>().ok()),
                    parts.next().and_then(|c| c.parse::<i32>().ok()),
                ) else {
                    continue;
                };
                let oom_kills = parts.next().and_then(|k| k.parse().ok());
                let tx = waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&n);
                if let Some(tx) = tx {
                    let _ = tx.send(Done { code, oom_kills });
                }
            }
        }
    }
    gone.cancel();
    // Every command still waiting learns it will get no status.
    waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
