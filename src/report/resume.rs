//! The changes a resume makes to a run folder, written here so that the reporter's
//! module stays the only writer of the folder: run.json with the resume's record, the
//! replaced rows appended to superseded.csv, results.csv rewritten with the rows that
//! stand, and the earlier files of the tasks that run again moved aside.

use std::path::Path;

use super::error::{io_err as io, ReportError};
use super::files;
use super::results::{append_results, replace_results};
use super::run_json::RunJson;

/// What a resume decided, before any of it is written.
#[derive(Debug, Clone)]
pub(crate) struct ResumeChanges {
    /// results.csv's header (superseded.csv gets the same).
    pub header: csv::StringRecord,
    /// Rows that stand, for results.csv.
    pub kept: Vec<csv::StringRecord>,
    /// Rows replaced by this resume and not yet in superseded.csv.
    pub superseded: Vec<csv::StringRecord>,
}

impl ResumeChanges {
    /// Sets the folder `dir` up for the tasks that run again (`rerun`, by key), once
    /// everything that could fail before the run has been done: run.json first (with
    /// this resume's record, so what killed tasks spent is never forgotten), then
    /// superseded.csv, results.csv (replaced whole), and the earlier transcripts,
    /// patches and workspaces of the tasks that run again. Each step can be repeated
    /// after a crash.
    pub(crate) fn apply(
        &self,
        dir: &Path,
        run_json: &RunJson,
        rerun: &[&str],
    ) -> Result<(), ReportError> {
        run_json.write(&dir.join(files::RUN_JSON))?;
        if !self.superseded.is_empty() {
            let path = dir.join(files::SUPERSEDED_CSV);
            append_results(&path, &self.header, &self.superseded).map_err(io(&path))?;
        }
        let csv_path = dir.join(files::RESULTS_CSV);
        replace_results(&csv_path, &self.header, &self.kept).map_err(io(&csv_path))?;
        for key in rerun {
            let transcript = files::transcript_path(dir, key);
            set_aside(&transcript).map_err(io(&transcript))?;
            let patch = files::patch_path(dir, key);
            set_aside(&patch).map_err(io(&patch))?;
            for sub in files::WORK_FOLDERS {
                for name in [key.to_string(), files::fresh_key(key)] {
                    let p = dir.join(sub).join(name);
                    if p.exists() {
                        std::fs::remove_dir_all(&p).map_err(io(&p))?;
                    }
                }
            }
        }
        // Pristine checkouts an earlier attempt left (killed before it could delete
        // them) go, unless a standing row kept a workspace that needs one (a layer
        // over it, or a copy whose repository borrows its objects); this run makes its
        // own.
        let column = self.header.iter().position(|h| h == "workspace");
        let needed = self
            .kept
            .iter()
            .any(|r| column.and_then(|c| r.get(c)).is_some_and(|w| !w.is_empty()));
        let pristine = dir.join(files::PRISTINE);
        if !needed && pristine.exists() {
            std::fs::remove_dir_all(&pristine).map_err(io(&pristine))?;
        }
        Ok(())
    }
}

/// Moves a file aside as `<stem>.tryN.<ext>` (the lowest free N) so nothing an earlier
/// attempt wrote is lost.
fn set_aside(path: &Path) -> std::io::Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let (Some(dir), Some(stem), Some(ext)) = (path.parent(), path.file_stem(), path.extension())
    else {
        return Ok(());
    };
    let (stem, ext) = (stem.to_string_lossy(), ext.to_string_lossy());
    let mut n = 1;
    loop {
        let to = dir.join(format!("{stem}.try{n}.{ext}"));
        if !to.exists() {
            return std::fs::rename(path, to);
        }
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_aside_never_overwrites() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        for _ in 0..2 {
            std::fs::write(&p, "x").unwrap();
            set_aside(&p).unwrap();
        }
        assert!(d.path().join("t.try1.jsonl").exists());
        assert!(d.path().join("t.try2.jsonl").exists());
        assert!(!p.exists());
    }
}
