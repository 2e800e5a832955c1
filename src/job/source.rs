//! Reading the files a job names (the job file, simulator scripts, `.mcp.json`): only
//! regular files, and only up to a size limit. A device (`/dev/zero`) or a named pipe
//! would otherwise grow memory without end or hang `validate` forever.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

/// The largest job file or simulator script read.
pub const MAX_JOB_FILE: u64 = 16 * 1024 * 1024;
/// The largest `.mcp.json` read.
pub const MAX_MCP_CONFIG: u64 = 1024 * 1024;

/// Why a file a job names could not be read; `what` names the file as the message
/// shows it ("the job file", "the file"). Cloneable, so a file read once can answer
/// every task that names it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {what}: {source}")]
    Io {
        what: String,
        source: Arc<std::io::Error>,
    },
    #[error("{what} is {kind}: give the path of a YAML file")]
    NotAFile { what: String, kind: &'static str },
    #[error("{what} is {len} bytes: at most {limit} are read")]
    TooLarge { what: String, len: u64, limit: u64 },
    #[error("{what} grew past {limit} bytes while it was read")]
    Grew { what: String, limit: u64 },
    #[error("{what} is not UTF-8 text")]
    NotUtf8 { what: String },
}

/// The text of `path` if it is a regular file of at most `limit` bytes; `what` names it
/// in the error ("the job file", "simulator script").
pub fn read_text(path: &Path, limit: u64, what: &str) -> Result<String, SourceError> {
    let io = |source| SourceError::Io {
        what: what.to_string(),
        source: Arc::new(source),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a folder"
        } else {
            "not a regular file (a device, pipe or socket)"
        };
        return Err(SourceError::NotAFile {
            what: what.to_string(),
            kind,
        });
    }
    if meta.len() > limit {
        return Err(SourceError::TooLarge {
            what: what.to_string(),
            len: meta.len(),
            limit,
        });
    }
    let file = std::fs::File::open(path).map_err(io)?;
    // A file that grows while it is read stops at the limit too.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(SourceError::Grew {
            what: what.to_string(),
            limit,
        });
    }
    String::from_utf8(bytes).map_err(|_| SourceError::NotUtf8 {
        what: what.to_string(),
    })
}

/// Why a ledger URL in a job file cannot be used: a password in it would be copied into
/// every run's `run.json`.
pub fn not_a_ledger_url(url: &str) -> Option<String> {
    crate::vocab::values::postgres_url_has_password(url).then(|| {
        "holds a password, which every run would copy into its run.json: leave it out and set PGPASSWORD, or give the whole URL in AGENTBATCH_LEDGER_URL (or --ledger) instead".to_string()
    })
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
            .to_string()
            .contains("at most 3"));
        assert!(read_text(dir.path(), 100, "x")
            .unwrap_err()
            .to_string()
            .contains("a folder"));
        for dev in ["/dev/zero", "/dev/null", "/dev/urandom"] {
            assert!(
                read_text(Path::new(dev), 100, "x")
                    .unwrap_err()
                    .to_string()
                    .contains("not a regular file"),
                "{dev}"
            );
        }
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read_text(&fifo, 100, "x")
            .unwrap_err()
            .to_string()
            .contains("not a regular file"));
        assert!(read_text(&dir.path().join("missing"), 100, "x")
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert!(read_text(&f, 100, "x")
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
    }
}
