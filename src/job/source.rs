//! Reading the files a job names (the job file, simulator scripts, `.mcp.json`): only
//! regular files, and only up to a size limit. A device (`/dev/zero`) or a named pipe
//! would otherwise grow memory without end or hang `validate` forever.

use std::io::Read;
use std::path::Path;

/// The largest job file or simulator script read.
pub const MAX_JOB_FILE: u64 = 16 * 1024 * 1024;
/// The largest `.mcp.json` read.
pub const MAX_MCP_CONFIG: u64 = 1024 * 1024;

/// The text of `path` if it is a regular file of at most `limit` bytes; `what` names it
/// in the error ("the job file", "simulator script").
pub fn read_text(path: &Path, limit: u64, what: &str) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {what}: {e}"))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a folder"
        } else {
            "not a regular file (a device, pipe or socket)"
        };
        return Err(format!("{what} is {kind}: give the path of a YAML file"));
    }
    if meta.len() > limit {
        return Err(format!(
            "{what} is {} bytes: at most {limit} are read",
            meta.len()
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {what}: {e}"))?;
    // A file that grows while it is read stops at the limit too.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {what}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(format!("{what} grew past {limit} bytes while it was read"));
    }
    String::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8 text"))
}

/// Why `path` cannot be a ledger file (it exists and is a folder, a device or a pipe),
/// or None. Checked by validate, and again when the ledger opens (`--ledger` is not in
/// the job), before anything is created.
pub fn not_a_ledger_file(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_file() {
        return None;
    }
    let kind = if meta.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    };
    Some(format!(
        "the ledger {} is {kind}: give the path of a SQLite file (it is created if missing), e.g. {}",
        path.display(),
        path.join("ledger.sqlite").display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_under_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("job.yaml");
        std::fs::write(&f, "name: x\n").unwrap();
        assert_eq!(read_text(&f, 100, "the job file").unwrap(), "name: x\n");
        assert!(read_text(&f, 3, "the job file")
            .unwrap_err()
            .contains("at most 3"));
        assert!(read_text(dir.path(), 100, "x")
            .unwrap_err()
            .contains("a folder"));
        for dev in ["/dev/zero", "/dev/null", "/dev/urandom"] {
            assert!(
                read_text(Path::new(dev), 100, "x")
                    .unwrap_err()
                    .contains("not a regular file"),
                "{dev}"
            );
        }
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_text(&fifo, 100, "x")
            .unwrap_err()
            .contains("not a regular file"));
        assert!(read_text(&dir.path().join("missing"), 100, "x")
            .unwrap_err()
            .contains("cannot read"));
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text(&f, 100, "x").unwrap_err().contains("UTF-8"));
    }
}
