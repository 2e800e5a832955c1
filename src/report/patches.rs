//! A task's patch read back: the diff the reporter wrote (`patches/<key>.diff`, its
//! bytes as the workspace gave them), found through the `patch` column of its
//! results.csv row, so readers take the path the row names and nothing else.

use std::path::{Path, PathBuf};

use super::files::{patch_key, patch_path};

/// A patch could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The row names a path that is not `patches/<key>.diff` (a results.csv edited by
    /// hand): it is not read, wherever it points.
    #[error("results.csv names the patch \"{0}\", which is not patches/<key>.diff")]
    NotAPatch(String),
    /// The row names a patch but the file is gone or unreadable.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The patch of a row whose `patch` column is `rel`, in run folder `dir`: None when the
/// row names none (the task never got as far as taking one, or has no repository).
pub(crate) fn read_patch(dir: &Path, rel: &str) -> Result<Option<Vec<u8>>, PatchError> {
    if rel.is_empty() {
        return Ok(None);
    }
    let key = patch_key(rel).ok_or_else(|| PatchError::NotAPatch(rel.to_string()))?;
    let path = patch_path(dir, key);
    std::fs::read(&path)
        .map(Some)
        .map_err(|source| PatchError::Read { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_read_by_the_path_its_row_names_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("patches")).unwrap();
        std::fs::write(dir.path().join("patches/t.1.diff"), b"diff --git\n").unwrap();
        assert_eq!(
            read_patch(dir.path(), "patches/t.1.diff")
                .unwrap()
                .as_deref(),
            Some(&b"diff --git\n"[..])
        );
        assert_eq!(read_patch(dir.path(), "").unwrap(), None, "no patch named");
        let outside = read_patch(dir.path(), "patches/../run.json").unwrap_err();
        assert!(matches!(outside, PatchError::NotAPatch(_)), "{outside}");
        let gone = read_patch(dir.path(), "patches/gone.diff").unwrap_err();
        assert!(
            gone.to_string().starts_with("cannot read ") && gone.to_string().contains("gone.diff"),
            "{gone}"
        );
    }
}
