//! The run folder's layout: the name of every file and folder `report` writes there,
//! shared by the writers (all in this module's parent) and every reader (resume,
//! compare, the page, audit, collect, the benchmarks), so a name is spelled once; and
//! the folder's format version, which run.json carries and readers check.
//!
//! ```text
//! <out>/<run-id>/
//!   run.json            RUN_JSON        what the run was and how it ended; format_version
//!   results.csv         RESULTS_CSV     one row per task (report::results)
//!   superseded.csv      SUPERSEDED_CSV  rows a resume replaced (same columns)
//!   regraded.csv        REGRADED_CSV    rows as they were before a regrade
//!   summary.csv         SUMMARY_CSV     per variant
//!   report.html         REPORT_HTML     the page (written by `page`, a view of the rest)
//!   report-transcripts/ REPORT_TRANSCRIPTS  the page's transcript chunks
//!   transcripts/<key>.jsonl              transcript_rel / transcript_path
//!   patches/<key>.diff                   patch_rel / patch_path
//!   environments/       ENVIRONMENTS    image build and pull logs, image workdirs copied out
//!   exports/            EXPORTS         other tools' formats (`agentbatch export`)
//!   .lock               LOCK            held by the run (run/folder.rs)
//!   .collected, .worker COLLECTED_MARKER, WORKER_MARKER  what wrote the folder
//! ```

use std::path::{Path, PathBuf};

/// One row per task: `report::results`.
pub const RESULTS_CSV: &str = "results.csv";
/// The rows a resume replaced, and a shared run's attempts that lost their task.
pub const SUPERSEDED_CSV: &str = "superseded.csv";
/// The rows a regrade changed, as they were before it (same columns).
pub const REGRADED_CSV: &str = "regraded.csv";
/// What the run was: `report::run_json`.
pub const RUN_JSON: &str = "run.json";
/// Per variant figures: `report::variants`.
pub const SUMMARY_CSV: &str = "summary.csv";
/// The page of the run (`page`).
pub const REPORT_HTML: &str = "report.html";
/// The folder beside the page that holds a big run's transcripts, one script per chunk.
pub const REPORT_TRANSCRIPTS: &str = "report-transcripts";
/// One JSONL file per task run, named by its key.
pub const TRANSCRIPTS: &str = "transcripts";
/// One diff per task run with a repository.
pub const PATCHES: &str = "patches";
/// The lock a run holds on its folder.
pub const LOCK: &str = ".lock";
/// Marks a folder `collect` wrote from a shared run's queue.
pub const COLLECTED_MARKER: &str = ".collected";
/// Marks one worker's share of a shared run.
pub const WORKER_MARKER: &str = ".worker";
/// The folders a task's work lives in (workspaces, shadow git folders, private temp
/// folders), one sub-folder per key; the repository code writes them, a resume clears
/// a re-run task's, the reporter drops the empty ones at the end.
pub const WORK_FOLDERS: [&str; 3] = ["workspaces", "git", "tmp"];
pub use crate::vocab::log::fresh_key;
/// The pristine checkouts tasks' workspaces are made from.
pub const PRISTINE: &str = "pristine";
/// Container images' build and pull logs, and the workdirs copied out of images for
/// tasks without a repository (the container code writes them).
pub const ENVIRONMENTS: &str = "environments";

/// What `agentbatch export` writes by default: the run in other tools' formats
/// (SWE-bench predictions, ATIF trajectories), a view of the folder like the page.
pub const EXPORTS: &str = "exports";

/// The run folder's `environments/` folder.
pub fn environments_dir(dir: &Path) -> PathBuf {
    dir.join(ENVIRONMENTS)
}

/// The run folder's format: run.json's `format_version`, covering every file of the
/// folder (results.csv's columns, run.json's keys, the transcripts' layout). Raised
/// when a file changes in a way an older agentbatch would misread; a folder of a newer
/// format is refused by its readers, an older one (a run.json without the key is 0) is
/// read. Adding a results.csv column at the end, or a run.json key, is not such a
/// change: readers take columns and keys by name and skip those they do not know.
pub const FORMAT_VERSION: u32 = 1;

/// A task's transcript, relative to the run folder (as results.csv names it).
pub fn transcript_rel(key: &str) -> String {
    format!("{TRANSCRIPTS}/{key}.jsonl")
}

/// A task's transcript in run folder `dir`.
pub fn transcript_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(transcript_rel(key))
}

/// The key a transcript's path names, relative to the run folder as results.csv holds
/// it (`transcripts/<key>.jsonl`); None for any other path (an earlier attempt's
/// `.jsonl.tryN`, a path edited to point elsewhere).
pub fn transcript_key(rel: &str) -> Option<&str> {
    key_in(rel, TRANSCRIPTS, ".jsonl")
}

/// The key a patch's path names (`patches/<key>.diff`); None for any other path.
pub fn patch_key(rel: &str) -> Option<&str> {
    key_in(rel, PATCHES, ".diff")
}

/// `<folder>/<key><ext>` with a key that is one plain file name.
fn key_in<'a>(rel: &'a str, folder: &str, ext: &str) -> Option<&'a str> {
    let key = rel
        .strip_prefix(folder)?
        .strip_prefix('/')?
        .strip_suffix(ext)?;
    let plain = !key.is_empty() && key != "." && key != ".." && !key.contains(['/', '\\', '\0']);
    plain.then_some(key)
}

/// The keys of the transcripts in run folder `dir` (`transcripts/<key>.jsonl`, earlier
/// attempts' `.tryN` files left out), sorted; none when the folder has no transcripts.
pub fn transcript_keys(dir: &Path) -> std::io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir.join(TRANSCRIPTS)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut keys = Vec::new();
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(key) = transcript_key(&format!("{TRANSCRIPTS}/{name}")) {
            keys.push(key.to_string());
        }
    }
    keys.sort();
    Ok(keys)
}

/// A task's patch, relative to the run folder (as results.csv names it).
pub fn patch_rel(key: &str) -> String {
    format!("{PATCHES}/{key}.diff")
}

/// A task's patch in run folder `dir`.
pub fn patch_path(dir: &Path, key: &str) -> PathBuf {
    dir.join(patch_rel(key))
}

/// A format version as written: a whole number past u32 (or past u64, which JSON
/// readers take as a float) is newer than any this agentbatch reads, not a broken
/// run.json. Shared by `RunJson` and the head check here, so both say the same.
pub(super) fn saturating_format<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    use serde::de::Error as _;
    let n = <serde_json::Number as serde::Deserialize>::deserialize(d)?;
    match (n.as_u64(), n.as_f64()) {
        (Some(v), _) => Ok(u32::try_from(v).unwrap_or(u32::MAX)),
        (None, Some(f)) if f >= u64::MAX as f64 && f.fract() == 0.0 => Ok(u32::MAX),
        _ => Err(D::Error::custom(format!(
            "format_version {n} is not a whole number from 0"
        ))),
    }
}

/// The folder format of run folder `dir` when its run.json names one newer than this
/// agentbatch reads (None otherwise, a missing or unreadable run.json included: its
/// own reader says what is wrong with it).
pub fn newer_format(dir: &Path) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default, deserialize_with = "saturating_format")]
        format_version: u32,
    }
    use std::io::Read as _;
    let path = dir.join(RUN_JSON);
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(&path)
        .and_then(|f| f.take(64).read_to_end(&mut head))
        .ok()?;
    let found = match written_first(&head) {
        Some(v) => v,
        // A run.json from before versions (or edited by hand): the whole of it is read.
        None => {
            let bytes = std::fs::read(&path).ok()?;
            serde_json::from_slice::<Head>(&bytes).ok()?.format_version
        }
    };
    (found > FORMAT_VERSION).then_some(found)
}

/// The version as `RunJson` writes it, its first key: found without parsing the rest
/// (the resolved plan makes a big run's run.json megabytes long).
fn written_first(bytes: &[u8]) -> Option<u32> {
    let rest = bytes.strip_prefix(b"{\n  \"format_version\": ")?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    if end == 0 {
        return None;
    }
    if rest.get(end) != Some(&b',') && rest.get(end) != Some(&b'\n') {
        return None;
    }
    // All digits: a number past u32 is newer than any version this reads, not none.
    Some(
        std::str::from_utf8(&rest[..end])
            .ok()?
            .parse()
            .unwrap_or(u32::MAX),
    )
}

/// What a reader says of a file in a folder of a newer format.
pub fn newer_format_message(file: &Path, found: u32) -> String {
    format!(
        "{}: written by a newer agentbatch (run folder format {found}; agentbatch {} reads formats up to {FORMAT_VERSION}): use a newer agentbatch to read this run",
        file.display(),
        crate::VERSION
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_read_back_from_the_paths_results_csv_holds_and_nothing_else() {
        assert_eq!(transcript_key(&transcript_rel("a.b--c")), Some("a.b--c"));
        assert_eq!(patch_key(&patch_rel("t.1")), Some("t.1"));
        for bad in [
            "transcripts/a.jsonl.try1",
            "transcripts/../x.jsonl",
            "transcripts/a/b.jsonl",
            "transcripts/.jsonl",
            "patches/a.jsonl",
            "/transcripts/a.jsonl",
            "",
        ] {
            assert_eq!(transcript_key(bad), None, "{bad}");
        }
        assert_eq!(patch_key("patches/../../etc/passwd.diff"), None);
        let dir = tempfile::tempdir().unwrap();
        assert!(transcript_keys(dir.path()).unwrap().is_empty(), "no folder");
        let t = dir.path().join(TRANSCRIPTS);
        std::fs::create_dir(&t).unwrap();
        for name in ["b.jsonl", "a.jsonl", "a.jsonl.try1", "notes.txt"] {
            std::fs::write(t.join(name), "").unwrap();
        }
        assert_eq!(transcript_keys(dir.path()).unwrap(), ["a", "b"]);
    }

    #[test]
    fn the_version_is_read_from_the_head_or_from_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join(RUN_JSON), text).unwrap();
        assert_eq!(newer_format(dir.path()), None, "no run.json");
        write("{\n  \"format_version\": 1,\n  \"run_id\": \"r\"\n}\n");
        assert_eq!(newer_format(dir.path()), None);
        write("{\n  \"format_version\": 12,\n  \"run_id\": \"r\"\n}\n");
        assert_eq!(newer_format(dir.path()), Some(12));
        write("{\"run_id\": \"r\", \"format_version\": 9}");
        assert_eq!(newer_format(dir.path()), Some(9), "a key elsewhere");
        write("{\"run_id\": \"r\"}");
        assert_eq!(
            newer_format(dir.path()),
            None,
            "a folder from before versions"
        );
        write("{\n  \"format_version\": 99999999999999999999999,\n  \"run_id\": \"r\"\n}\n");
        assert_eq!(
            newer_format(dir.path()),
            Some(u32::MAX),
            "past u32 is newer"
        );
        write("{\"run_id\": \"r\", \"format_version\": 4294967296}");
        assert_eq!(
            newer_format(dir.path()),
            Some(u32::MAX),
            "past u32, elsewhere"
        );
        write("{\n  \"format_version\": ,\n}");
        assert_eq!(newer_format(dir.path()), None, "no digits: not a version");
        write("{");
        assert_eq!(
            newer_format(dir.path()),
            None,
            "its own reader says what is wrong"
        );
    }
}
