//! Where exports go and how they are written: by default under the run folder's
//! `exports/` (a view of the folder, like the page, written on demand after the run),
//! each file whole or not at all (a temporary file beside it, then a rename), so a
//! reader never takes half an export for a whole one.

use std::path::{Path, PathBuf};

use super::ExportError;
use crate::report::files::EXPORTS;

/// The run folder's `exports/` folder.
pub(super) fn exports_dir(run_dir: &Path) -> PathBuf {
    run_dir.join(EXPORTS)
}

/// Writes `bytes` to `path`, making its folder.
pub(super) fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ExportError::Write { path, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err(dir))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(err(path))
}
