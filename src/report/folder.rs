//! The run folder's writes made outside the reporter task, kept in this module so that
//! `report` stays the one writer of the folder: the marker files that say what wrote
//! a folder, the lines batch recovery adds to a killed run's transcripts, and the
//! folder `collect` writes from what a shared run's workers sent back.

use std::io::Write as _;
use std::path::Path;

use super::error::{io_err as io, ReportError};
use super::files::{self, COLLECTED_MARKER, PATCHES, TRANSCRIPTS, WORKER_MARKER};
use super::results::{replace_results_lines, with_field};
use crate::vocab::transcript::{TranscriptEvent, TranscriptLine};

/// Marks run folder `dir` as one worker's share of a shared run (a resume refuses it).
pub(crate) fn mark_worker(dir: &Path) -> Result<(), ReportError> {
    let marker = dir.join(WORKER_MARKER);
    std::fs::write(&marker, b"").map_err(io(&marker))
}

/// Appends `events` to the transcript at `path`, stamped now at `t_ms` 0, and syncs it:
/// batch recovery records there what a killed run's batched request came to. A last
/// line cut off by the kill is ended first, so the new lines read on their own.
pub(crate) fn append_transcript_events<'a>(
    path: &Path,
    events: impl IntoIterator<Item = &'a TranscriptEvent>,
) -> std::io::Result<()> {
    for event in events {
        let ts = chrono::Utc::now()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let line = serde_json::to_string(&TranscriptLine {
            ts: &ts,
            t_ms: 0,
            event,
        })
        .map_err(std::io::Error::other)?;
        let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
        let text = std::fs::read(path)?;
        if text.last().is_some_and(|b| *b != b'\n') {
            f.write_all(b"\n")?;
        }
        writeln!(f, "{line}")?;
        f.sync_all()?;
    }
    Ok(())
}

/// One ended task, or one attempt that lost its task, as a worker sent it back.
#[derive(Debug, Clone)]
pub struct Ended {
    pub key: String,
    pub attempt: i32,
    pub worker: String,
    /// The results.csv line, as the worker wrote it.
    pub record: Vec<u8>,
    pub transcript: Option<Vec<u8>>,
    pub patch: Option<Vec<u8>>,
}

/// Whether `dir` may be written by `collect`: it does not exist yet, or `collect`
/// wrote it.
pub(crate) fn collectable(dir: &Path) -> bool {
    !dir.exists() || dir.join(COLLECTED_MARKER).exists()
}

/// Writes the rows of a collected run into `dir` (marked as collected): results.csv
/// from `done` in their order with their transcripts and patches, and superseded.csv
/// from the attempts kept `apart` (each naming its own transcript, beside the
/// winner's), or no superseded.csv when there are none. run.json and summary.csv are
/// written after, by their own writers.
pub(crate) fn write_collected(
    dir: &Path,
    header: &[String],
    done: &[Ended],
    apart: &[Ended],
) -> Result<(), ReportError> {
    for sub in [TRANSCRIPTS, PATCHES] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(io(&d))?;
    }
    let marker = dir.join(COLLECTED_MARKER);
    std::fs::write(&marker, b"").map_err(io(&marker))?;
    replace_results_lines(
        &dir.join(files::RESULTS_CSV),
        header,
        done.iter().map(|e| &e.record[..]),
    )
    .map_err(io(dir))?;
    for e in done {
        write_files(dir, &e.key, e.transcript.as_deref(), e.patch.as_deref(), "")
            .map_err(io(dir))?;
    }
    let superseded = dir.join(files::SUPERSEDED_CSV);
    if apart.is_empty() {
        let _ = std::fs::remove_file(&superseded);
        return Ok(());
    }
    let column = header.iter().position(|h| h == "transcript");
    let mut renamed = Vec::with_capacity(apart.len());
    for e in apart {
        let tag = format!(".try{}-{}", e.attempt, e.worker);
        write_files(dir, &e.key, e.transcript.as_deref(), None, &tag).map_err(io(dir))?;
        let mut e = e.clone();
        if let (Some(c), true) = (column, e.transcript.is_some()) {
            e.record = with_field(
                &e.record,
                c,
                &files::transcript_rel(&format!("{}{tag}", e.key)),
            )
            .map_err(io(&superseded))?;
        }
        renamed.push(e);
    }
    replace_results_lines(&superseded, header, renamed.iter().map(|e| &e.record[..]))
        .map_err(io(&superseded))
}

fn write_files(
    dir: &Path,
    key: &str,
    transcript: Option<&[u8]>,
    patch: Option<&[u8]>,
    tag: &str,
) -> std::io::Result<()> {
    if let Some(t) = transcript {
        std::fs::write(files::transcript_path(dir, &format!("{key}{tag}")), t)?;
    }
    if let Some(p) = patch {
        std::fs::write(files::patch_path(dir, &format!("{key}{tag}")), p)?;
    }
    Ok(())
}
