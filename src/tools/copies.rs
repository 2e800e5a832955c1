//! Full copies of a pristine checkout, for tasks whose workspace cannot be an overlay
//! layer: file by file, as reflinks where the filesystem has them (btrfs, XFS made
//! with `reflink=1`, bcachefs: the copy shares the original's blocks until one of them
//! is written, so it costs metadata, not the repository's bytes) or as bytes. Each
//! file keeps its mode and modification time, so the runner's copy of the pristine's
//! index still matches every file the task leaves alone and staging reads none of them.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Makes `to` share `from`'s blocks (`FICLONE`); fails where the filesystem cannot (or
/// the two are on different filesystems).
pub fn reflink_file(from: &Path, to: &Path) -> io::Result<()> {
    let src = File::open(from)?;
    let mode = src.metadata()?.permissions().mode() & 0o7777;
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode | 0o200)
        .open(to)?;
    #[cfg(target_os = "linux")]
    {
        // SAFETY: both descriptors are open for the call; FICLONE takes the source's.
        let r = unsafe { nix::libc::ioctl(dst.as_raw_fd(), nix::libc::FICLONE, src.as_raw_fd()) };
        if r != 0 {
            let e = io::Error::last_os_error();
            drop(dst);
            let _ = std::fs::remove_file(to);
            return Err(e);
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (&src, &dst);
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "reflinks need Linux",
        ));
    }
    // The create mode went through the umask, and had the owner's write bit.
    dst.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Whether files in `dir` (which must exist) can be reflinked: tried on two scratch
/// files.
pub fn reflinks_in(dir: &Path) -> bool {
    let stem = format!(".agentbatch-reflink-probe-{}", std::process::id());
    let (a, b) = (dir.join(format!("{stem}-a")), dir.join(format!("{stem}-b")));
    let ok = std::fs::write(&a, b"probe").is_ok() && reflink_file(&a, &b).is_ok();
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    ok
}

/// Copies one file, as a reflink or as bytes, keeping its mode.
pub fn copy_file(from: &Path, to: &Path, reflink: bool) -> io::Result<()> {
    if reflink {
        reflink_file(from, to)
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

/// Copies the tree at `from` to `to` (which must not exist): files (reflinked or
/// copied, with their mode and times), folders and symlinks (an absolute link into
/// `from` points into `to`); other kinds are skipped, and so is what lies under the
/// folders `skip` names (relative to `from`; they are made, empty). Blocking.
pub fn copy_tree(from: &Path, to: &Path, reflink: bool, skip: &[&Path]) -> io::Result<()> {
    let roots = Roots {
        from,
        to,
        reflink,
        skip,
    };
    roots.copy_under(from, to)
}

struct Roots<'a> {
    from: &'a Path,
    to: &'a Path,
    reflink: bool,
    skip: &'a [&'a Path],
}

impl Roots<'_> {
    fn copy_under(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::create_dir(to)?;
        if self
            .skip
            .iter()
            .any(|s| from.strip_prefix(self.from).is_ok_and(|r| r == *s))
        {
            return Ok(());
        }
        for entry in std::fs::read_dir(from)? {
            self.copy_entry(&entry?, to)?;
        }
        Ok(())
    }

    fn copy_entry(&self, entry: &std::fs::DirEntry, to: &Path) -> io::Result<()> {
        let (from_root, to_root) = (self.from, self.to);
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            let target = match target.strip_prefix(from_root) {
                Ok(inside) if target.is_absolute() => to_root.join(inside),
                _ => target,
            };
            std::os::unix::fs::symlink(target, &dest)?;
        } else if kind.is_dir() {
            self.copy_under(&entry.path(), &dest)?;
        } else if kind.is_file() {
            copy_file(&entry.path(), &dest, self.reflink)?;
            keep_times(&dest, &entry.metadata()?)?;
        }
        Ok(())
    }
}

/// Gives `path` the access and modification times in `meta` (by path: a read-only
/// file cannot be opened for writing by its owner).
fn keep_times(path: &Path, meta: &std::fs::Metadata) -> io::Result<()> {
    use nix::sys::stat::{utimensat, UtimensatFlags};
    use nix::sys::time::TimeSpec;
    use std::os::unix::fs::MetadataExt;
    utimensat(
        nix::fcntl::AT_FDCWD,
        path,
        &TimeSpec::new(meta.atime(), meta.atime_nsec()),
        &TimeSpec::new(meta.mtime(), meta.mtime_nsec()),
        UtimensatFlags::NoFollowSymlink,
    )
    .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_copy_keeps_modes_times_and_links_and_points_inner_links_at_itself() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("a/b/f.txt"), "data").unwrap();
        std::fs::write(src.join("run.sh"), "echo").unwrap();
        std::fs::set_permissions(src.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(src.join("ro"), "read only").unwrap();
        std::fs::set_permissions(src.join("ro"), PermissionsExt::from_mode(0o444)).unwrap();
        std::os::unix::fs::symlink("a/b/f.txt", src.join("rel")).unwrap();
        std::os::unix::fs::symlink(src.join("a"), src.join("abs")).unwrap();
        let old = TimeSpecs::of(&src.join("a/b/f.txt"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        let to = dir.path().join("copy");
        copy_tree(&src, &to, false, &[Path::new("a/b")]).unwrap();
        assert!(to.join("a/b").is_dir() && !to.join("a/b/f.txt").exists());
        let whole = dir.path().join("whole");
        copy_tree(&src, &whole, false, &[]).unwrap();
        assert_eq!(
            std::fs::read_to_string(whole.join("a/b/f.txt")).unwrap(),
            "data"
        );
        assert_eq!(TimeSpecs::of(&whole.join("a/b/f.txt")), old);
        std::fs::remove_dir_all(&whole).unwrap();
        let mode = |p: &str| std::fs::metadata(to.join(p)).unwrap().mode() & 0o777;
        assert_eq!((mode("run.sh"), mode("ro")), (0o755, 0o444));
        assert_eq!(
            std::fs::read_link(to.join("rel")).unwrap(),
            Path::new("a/b/f.txt")
        );
        assert_eq!(std::fs::read_link(to.join("abs")).unwrap(), to.join("a"));
        assert!(
            copy_tree(&src, &to, false, &[]).is_err(),
            "the target must not exist"
        );
        // ext4 and tmpfs have no reflinks: the probe says so rather than failing later.
        if !reflinks_in(dir.path()) {
            assert!(copy_tree(&src, &dir.path().join("r"), true, &[]).is_err());
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n.to_string_lossy().contains("probe"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[derive(Debug, PartialEq)]
    struct TimeSpecs(i64, i64);
    impl TimeSpecs {
        fn of(p: &Path) -> TimeSpecs {
            let m = std::fs::metadata(p).unwrap();
            TimeSpecs(m.mtime(), m.mtime_nsec())
        }
    }
}
