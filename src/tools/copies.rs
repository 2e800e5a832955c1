//! Full copies of a pristine checkout, for tasks whose workspace cannot be an overlay
//! layer: file by file, as reflinks where the filesystem has them (btrfs, XFS made
//! with `reflink=1`, bcachefs: the copy shares the original's blocks until one of them
//! is written, so it costs metadata, not the repository's bytes) or as bytes, holes
//! kept. Each file keeps its mode and modification time, so the runner's copy of the
//! pristine's index still matches every file the task leaves alone and staging reads
//! none of them. Symbolic links are copied as they are: see [`copy_tree`].

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
    probe_reflinks(dir).unwrap_or(false)
}

/// Whether files in `dir` (which must exist) can be reflinked, or why that could not be
/// tried (no scratch file can be written there).
pub fn probe_reflinks(dir: &Path) -> io::Result<bool> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let stem = format!(
        ".agentbatch-reflink-probe-{}-{}",
        std::process::id(),
        PROBES.fetch_add(1, Ordering::Relaxed)
    );
    let (a, b) = (dir.join(format!("{stem}-a")), dir.join(format!("{stem}-b")));
    let made = std::fs::write(&a, b"probe");
    let ok = made.is_ok() && reflink_file(&a, &b).is_ok();
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    made.map(|_| ok)
}

/// Copies one file to `to` (which must not exist), as a reflink or as bytes, keeping its
/// mode.
pub fn copy_file(from: &Path, to: &Path, reflink: bool) -> io::Result<()> {
    if reflink {
        reflink_file(from, to)
    } else {
        copy_sparse(from, to)
    }
}

/// Copies a file's bytes and keeps its holes: only the ranges that hold data
/// (`SEEK_DATA`, `SEEK_HOLE`) are written, into a file given the whole length first.
/// `std::fs::copy` goes through `copy_file_range`, which ext4 (and any filesystem
/// without reflinks) answers by writing every hole out as zeros: a 300 MB sparse file
/// took 300 MB in the pristine and again in each copy. A filesystem that cannot tell
/// where the data is gets the whole file.
fn copy_sparse(from: &Path, to: &Path) -> io::Result<()> {
    let src = File::open(from)?;
    let meta = src.metadata()?;
    let mode = meta.permissions().mode() & 0o7777;
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode | 0o200)
        .open(to)?;
    let copied = copy_data(&src, &dst, meta.len())
        // The create mode went through the umask, and had the owner's write bit.
        .and_then(|_| dst.set_permissions(std::fs::Permissions::from_mode(mode)));
    if copied.is_err() {
        drop(dst);
        let _ = std::fs::remove_file(to);
    }
    copied
}

/// Writes the data ranges of `src`'s first `len` bytes at the same offsets of `dst`,
/// which is made `len` long, holes and all.
fn copy_data(src: &File, dst: &File, len: u64) -> io::Result<()> {
    use nix::unistd::{lseek, Whence};
    dst.set_len(len)?;
    let offset =
        |at: u64| i64::try_from(at).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let mut at = 0u64;
    while at < len {
        let start = match lseek(src, offset(at)?, Whence::SeekData) {
            Ok(start) => start as u64,
            // Nothing but a hole from here to the end.
            Err(nix::errno::Errno::ENXIO) => break,
            // No way to tell data from holes here: all of it.
            Err(nix::errno::Errno::EINVAL | nix::errno::Errno::EOPNOTSUPP) if at == 0 => {
                return copy_range(src, dst, 0, len)
            }
            Err(e) => return Err(e.into()),
        };
        if start >= len {
            break;
        }
        let end = (lseek(src, offset(start)?, Whence::SeekHole)? as u64).min(len);
        copy_range(src, dst, start, end - start)?;
        at = end;
    }
    Ok(())
}

/// Copies `n` bytes at `start` of `src` to the same place in `dst` (through
/// `copy_file_range` where the kernel has it).
fn copy_range(mut src: &File, mut dst: &File, start: u64, n: u64) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    src.seek(SeekFrom::Start(start))?;
    dst.seek(SeekFrom::Start(start))?;
    let copied = io::copy(&mut src.take(n), &mut dst)?;
    if copied < n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the file got shorter while it was copied",
        ));
    }
    Ok(())
}

/// Copies the tree at `from` to `to` (which must not exist): files (reflinked or
/// copied, with their mode and times), folders and symbolic links, each link with the
/// target it has (one that names `from` by its absolute path still does: the task's
/// commands see their workspace at the repository's own path, so such a link reaches
/// the task's copy there, under every method; rewriting it would put a change nobody
/// made in the patch). Other kinds are skipped, and so is what lies under the folders
/// `skip` names (relative to `from`; they are made, empty). Blocking.
pub fn copy_tree(from: &Path, to: &Path, reflink: bool, skip: &[&Path]) -> io::Result<()> {
    let roots = Roots {
        from,
        reflink,
        skip,
    };
    roots.copy_under(from, to)
}

struct Roots<'a> {
    from: &'a Path,
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
        let kind = entry.file_type()?;
        let dest = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &dest)?;
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
    fn a_copy_keeps_modes_times_and_links_as_they_are() {
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
        assert_eq!(std::fs::read_link(to.join("abs")).unwrap(), src.join("a"));
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

    #[test]
    fn a_copy_keeps_holes_and_every_byte() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        let sparse = |name: &str, len: u64, data: &[(u64, &[u8])]| {
            let f = File::create(src.join(name)).unwrap();
            f.set_len(len).unwrap();
            for (at, bytes) in data {
                f.write_all_at(bytes, *at).unwrap();
            }
        };
        let mib = 1u64 << 20;
        // Data at the start, in the middle and at the very end; all hole; empty; dense.
        sparse(
            "holes.img",
            64 * mib,
            &[(0, b"head"), (32 * mib, b"middle"), (64 * mib - 4, b"tail")],
        );
        sparse("hole.img", 8 * mib, &[]);
        sparse("empty", 0, &[]);
        std::fs::write(src.join("dense"), vec![7u8; 300_000]).unwrap();
        let to = dir.path().join("copy");
        copy_tree(&src, &to, false, &[]).unwrap();
        for name in ["holes.img", "hole.img", "empty", "dense"] {
            let (a, b) = (src.join(name), to.join(name));
            assert_eq!(
                std::fs::read(&a).unwrap(),
                std::fs::read(&b).unwrap(),
                "{name}"
            );
            let blocks = |p: &Path| std::fs::metadata(p).unwrap().blocks();
            assert!(
                blocks(&b) <= blocks(&a) + 64,
                "{name}: {} blocks copied for {}",
                blocks(&b),
                blocks(&a)
            );
        }
        assert!(std::fs::metadata(to.join("holes.img")).unwrap().blocks() * 512 < mib);
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
