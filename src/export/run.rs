//! The run folder as the exports see it, read through `report`'s readers only:
//! results.csv's rows (a row cut off by a kill left out and said), run.json's version
//! and plan, and the transcripts no row names (tasks in flight when the run was killed).

use std::path::{Path, PathBuf};

use super::ExportError;
use crate::report::files::{self, transcript_key, transcript_keys};
use crate::report::{read_results, PlannedTask, ResultRow, RunJson, RunJsonError};

/// A run folder read back.
pub(super) struct Run {
    pub dir: PathBuf,
    /// results.csv's rows, in file order.
    pub rows: Vec<ResultRow>,
    /// None when run.json is missing or unreadable (said in `notes`).
    pub run_json: Option<RunJson>,
    /// What was odd in the folder, for the user.
    pub notes: Vec<String>,
}

impl Run {
    /// Reads the run folder `given` (or the folder of a results.csv given instead).
    pub fn read(given: &Path) -> Result<Run, ExportError> {
        let dir = if given.is_file() {
            given.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            given.to_path_buf()
        };
        let mut notes = Vec::new();
        // A newer folder is refused here, by its run.json, as by the results reader.
        let run_json = match RunJson::read(&dir.join(files::RUN_JSON)) {
            Ok(r) => Some(r),
            Err(e @ RunJsonError::Newer { .. }) => return Err(e.into()),
            Err(e) => {
                notes.push(format!(
                    "{e}: the agent version is this agentbatch's and prompts of tasks that made no request are unknown"
                ));
                None
            }
        };
        let results = read_results(&dir.join(files::RESULTS_CSV), &["task_id"], &["task_id"])?;
        notes.extend(results.cut_off);
        Ok(Run {
            dir,
            rows: results.rows,
            run_json,
            notes,
        })
    }

    /// The agentbatch that made the run (run.json says), else this one.
    pub fn version(&self) -> String {
        self.run_json
            .as_ref()
            .map(|r| r.agentbatch_version.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| crate::VERSION.to_string())
    }

    /// The run's id: its rows', else run.json's, else the folder's name.
    pub fn run_id(&self) -> String {
        let from_rows = self
            .rows
            .iter()
            .map(|r| r.run_id.clone())
            .find(|r| !r.is_empty());
        let from_json = self
            .run_json
            .as_ref()
            .map(|r| r.run_id.clone())
            .filter(|r| !r.is_empty());
        from_rows.or(from_json).unwrap_or_else(|| {
            self.dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
    }

    /// The task runs of run.json's plan (none without it).
    pub fn planned(&self) -> Vec<PlannedTask> {
        self.run_json
            .as_ref()
            .map(RunJson::planned)
            .unwrap_or_default()
    }

    /// The keys of transcripts no row names: tasks that were running when the run was
    /// killed (a resume would give them rows).
    pub fn unnamed_transcripts(&self) -> Result<Vec<String>, ExportError> {
        let named: std::collections::HashSet<&str> = self
            .rows
            .iter()
            .filter_map(|r| transcript_key(&r.transcript))
            .collect();
        let all = transcript_keys(&self.dir).map_err(|source| ExportError::Read {
            path: self.dir.join(files::TRANSCRIPTS),
            source,
        })?;
        Ok(all
            .into_iter()
            .filter(|k| !named.contains(k.as_str()))
            .collect())
    }
}
