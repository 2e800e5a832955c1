//! report.html: one page per run folder that shows the run's summary, charts, a task
//! table to sort and filter, and each task's transcript turn by turn. It is written at
//! the end of every run and by `agentbatch report DIR`, from the folder alone (results
//! through `report`'s readers, transcripts through `vocab::transcript`), so any run
//! folder, a killed one included, gets a page.
//!
//! One self-contained file: inline CSS and script, no network (a Content-Security-Policy
//! forbids it). A small run's transcripts are inlined; a bigger run's are written beside
//! the page as one small script per task in `report-transcripts/`, loaded with a
//! `<script src>` when a task is opened, which browsers allow from `file://` where they
//! refuse `fetch()`. Everything from the run reaches the page as JSON data in scripts
//! (escaped so no text can close the script) and is put into the page as text, never
//! as markup.

mod answer;
mod charts;
mod html;
mod live;
mod notes;
mod summary;
mod table;
mod transcript;

use std::path::{Component, Path, PathBuf};

use live::Chunks;
pub use live::LiveViews;

use crate::report::{read_results, read_variants, ResultsError, RunJson, VariantSummary};

/// The page's file name in the run folder.
pub const PAGE: &str = crate::report::files::REPORT_HTML;
/// The folder beside the page that holds a big run's transcripts, one script each.
pub const TRANSCRIPTS: &str = crate::report::files::REPORT_TRANSCRIPTS;
/// The environment variable that sets [`PageOptions::inline_tasks`] (tests use it to
/// take the lazy path with a few tasks).
pub const INLINE_TASKS_VAR: &str = "AGENTBATCH_REPORT_INLINE_TASKS";

/// Characters of one text (a tool result, an answer, arguments) the page keeps; the
/// transcript file has the whole of it, and the page says how long it was.
const CLIP_CHARS: usize = 8_000;

/// When transcripts go inside the page.
#[derive(Debug, Clone, Copy)]
pub struct PageOptions {
    /// Runs with at most this many tasks inline their transcripts.
    pub inline_tasks: usize,
    /// ... as long as they come to at most this many bytes; past it, a page would take
    /// long to open for what is mostly never looked at.
    pub inline_bytes: usize,
}

impl Default for PageOptions {
    fn default() -> PageOptions {
        PageOptions {
            inline_tasks: 200,
            inline_bytes: 8 << 20,
        }
    }
}

impl PageOptions {
    /// The defaults, with `AGENTBATCH_REPORT_INLINE_TASKS` when it is a number.
    pub fn from_env() -> PageOptions {
        let mut o = PageOptions::default();
        if let Some(n) = std::env::var(INLINE_TASKS_VAR)
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            o.inline_tasks = n;
        }
        o
    }
}

/// Why the page could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("{} is not a run folder: it has no results.csv (give the folder of a run: <out>/<run-id>)", .0.display())]
    NotARunFolder(PathBuf),
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl PageError {
    /// Invalid input (2) when the folder is not a readable run, 1 when writing failed.
    pub fn exit_code(&self) -> u8 {
        match self {
            PageError::Write { .. } => 1,
            _ => 2,
        }
    }
}

/// What was written.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub tasks: usize,
    /// The transcripts are in [`TRANSCRIPTS`], loaded when a task is opened.
    pub lazy: bool,
    /// What the page could not show whole (a cut-off last row, an unreadable run.json).
    pub warnings: Vec<String>,
}

/// The start of a text, as the page keeps it.
fn clip(s: &str) -> String {
    clipped(s).into_owned()
}

/// [`clip`] without a copy when the text is short enough already.
fn clipped(s: &str) -> std::borrow::Cow<'_, str> {
    // A char is at least a byte: a text of at most CLIP_CHARS bytes is whole.
    if s.len() <= CLIP_CHARS {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(crate::text::prefix(s, CLIP_CHARS))
}

/// JSON that can sit inside a `<script>` element: no `<`, `>` or `&` (so no text can
/// close the element or open a comment), no line separators older engines end a
/// string at. Each is written as its `\u` escape, which JSON reads back the same.
fn script_json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    let mut out = Vec::new();
    script_safe_into(&mut out, &serde_json::to_vec(v).unwrap_or_default());
    String::from_utf8(out).unwrap_or_default()
}

/// Appends JSON text to `out` made safe for a `<script>` element (see [`script_json`]).
/// Works on bytes: the characters it escapes are ASCII or the three-byte sequences of
/// U+2028 and U+2029, and the rest is copied in runs.
fn script_safe_into(out: &mut Vec<u8>, json: &[u8]) {
    out.reserve(json.len());
    let mut from = 0;
    let mut i = 0;
    while i < json.len() {
        let escape: Option<&[u8]> = match json[i] {
            b'<' => Some(b"\\u003c"),
            b'>' => Some(b"\\u003e"),
            b'&' => Some(b"\\u0026"),
            0xE2 if json.get(i + 1) == Some(&0x80) => match json.get(i + 2) {
                Some(0xA8) => Some(b"\\u2028"),
                Some(0xA9) => Some(b"\\u2029"),
                _ => None,
            },
            _ => None,
        };
        match escape {
            Some(e) => {
                out.extend_from_slice(&json[from..i]);
                out.extend_from_slice(e);
                i += if json[i] == 0xE2 { 3 } else { 1 };
                from = i;
            }
            None => i += 1,
        }
    }
    out.extend_from_slice(&json[from..]);
}

/// A transcript path from results.csv, if it stays inside the run folder.
fn inside(dir: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    let plain = !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| dir.join(p))
}

/// Writes `dir/report.html` (and, for a big run, `dir/report-transcripts/`), reading
/// every transcript.
pub fn write(dir: &Path, opts: &PageOptions) -> Result<Written, PageError> {
    write_with(dir, opts, None)
}

/// What a run that just ended already has for its page, so nothing is computed twice.
pub struct FromRun<'a> {
    /// The transcripts' views, built while the run went.
    pub views: &'a LiveViews,
    /// The per-variant figures summary.csv was written from.
    pub variants: &'a [VariantSummary],
}

/// Writes the page with what the run built (`from_run`): only the rows it has no view
/// of (a resumed run's earlier rows, rows without a transcript) are read from their
/// transcripts.
pub fn write_with(
    dir: &Path,
    opts: &PageOptions,
    from_run: Option<FromRun>,
) -> Result<Written, PageError> {
    let results = dir.join(crate::report::files::RESULTS_CSV);
    if !results.is_file() {
        return Err(PageError::NotARunFolder(dir.to_path_buf()));
    }
    let file = read_results(&results, &["task_id"], &["task_id"])?;
    let mut warnings: Vec<String> = file.cut_off.iter().cloned().collect();
    let run = match RunJson::read(&dir.join(crate::report::files::RUN_JSON)) {
        Ok(r) => Some(r),
        Err(e) => {
            warnings.push(e.to_string());
            None
        }
    };
    let mut order: Vec<String> = Vec::new();
    for r in &file.rows {
        if !order.contains(&r.variant) {
            order.push(r.variant.clone());
        }
    }
    let variants = match &from_run {
        Some(r) => Some(r.variants.to_vec()),
        None => match read_variants(dir, &file.axes, &order) {
            Ok(v) => Some(v),
            Err(e) => {
                warnings.push(format!("no per-variant table: {e}"));
                None
            }
        },
    };
    let built = match from_run.map(|r| r.views.take()) {
        Some(Ok(b)) => Some(b),
        Some(Err(why)) => {
            warnings.push(format!(
                "the transcripts' views were read back from their files: {why}"
            ));
            None
        }
        None => None,
    };
    let rows = &file.rows;
    let lazy_dir = dir.join(TRANSCRIPTS);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PageError::Write { path, source }
    };
    // The new transcripts are written beside the old ones and swapped in with the page,
    // so a write that fails leaves the page before it whole.
    let new = dir.join(format!("{TRANSCRIPTS}.new"));
    let live_staging = live::staging(dir);
    let views = match transcripts(dir, rows, opts, built) {
        Ok(v) => v,
        Err(e) => {
            let _ = remove_any(&new);
            let _ = remove_any(&live_staging);
            return Err(e);
        }
    };
    let (inline, lazy_index, staging) = match &views {
        Views::Inline(v) => (Some(v.as_slice()), None, None),
        Views::Lazy { staging, index } => (None, Some(index.as_slice()), Some(staging.clone())),
    };
    let page = html::page(&html::Parts {
        dir,
        run: run.as_ref(),
        rows,
        variants: variants.as_deref(),
        transcripts: inline,
        lazy: lazy_index,
        warnings: &warnings,
    });
    let path = dir.join(PAGE);
    let tmp = dir.join("report.html.tmp");
    if let Err(source) = std::fs::write(&tmp, page) {
        if let Some(s) = &staging {
            let _ = remove_any(s);
        }
        let _ = std::fs::remove_file(&tmp);
        return Err(PageError::Write { path: tmp, source });
    }
    let old = dir.join(format!("{TRANSCRIPTS}.old"));
    if let Some(staging) = &staging {
        remove_any(&old).map_err(io(&old))?;
        if lazy_dir.symlink_metadata().is_ok() {
            std::fs::rename(&lazy_dir, &old).map_err(io(&lazy_dir))?;
        }
        std::fs::rename(staging, &lazy_dir).map_err(io(&lazy_dir))?;
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    // What the page before this one loaded; a leftover is harmless, so only a warning.
    for stale in [&old, &new, &live_staging] {
        if let Err(e) = remove_any(stale) {
            warnings.push(format!("cannot remove {}: {e}", stale.display()));
        }
    }
    let lazy = staging.is_some();
    if !lazy {
        if let Err(e) = remove_any(&lazy_dir) {
            warnings.push(format!("cannot remove {}: {e}", lazy_dir.display()));
        }
    }
    Ok(Written {
        path,
        tasks: rows.len(),
        lazy,
        warnings,
    })
}

/// Removes a file or a folder at `path`, if there is one.
fn remove_any(path: &Path) -> std::io::Result<()> {
    match path.symlink_metadata() {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// The transcripts' views, as the page gets them.
enum Views {
    /// Script-safe JSON, one per row, inside the page.
    Inline(Vec<String>),
    /// In chunks written to `staging`; per row, its view's id and chunk.
    Lazy {
        staging: PathBuf,
        index: Vec<(String, u32)>,
    },
}

/// A row's view id: its transcript's path, or its place when it names none inside the
/// run folder.
fn view_id(dir: &Path, row: &crate::report::ResultRow, i: usize) -> String {
    match inside(dir, &row.transcript) {
        Some(_) => row.transcript.clone(),
        None => format!("#{i}"),
    }
}

/// A row's view, read from its transcript.
fn read_view(dir: &Path, row: &crate::report::ResultRow) -> Vec<u8> {
    match inside(dir, &row.transcript) {
        Some(p) => transcript::view(&p, &row.transcript),
        None => transcript::unreadable(
            &row.transcript,
            "results.csv names no transcript inside the run folder for this task",
        ),
    }
}

/// Every task's transcript view: in memory for the page when the run is small enough,
/// else in chunk scripts. Views a run built (`built`) are used as they are.
fn transcripts(
    dir: &Path,
    rows: &[crate::report::ResultRow],
    opts: &PageOptions,
    built: Option<live::Built>,
) -> Result<Views, PageError> {
    let (mut kept, chunks) = match built {
        Some(b) => (b.kept, b.chunks),
        None => (Default::default(), None),
    };
    let ids: Vec<String> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| view_id(dir, r, i))
        .collect();
    if rows.len() <= opts.inline_tasks && chunks.is_none() {
        let mut out = Vec::with_capacity(rows.len());
        let mut bytes = 0usize;
        for (i, row) in rows.iter().enumerate() {
            let v = kept.remove(&ids[i]).unwrap_or_else(|| read_view(dir, row));
            bytes += v.len();
            out.push(String::from_utf8(v).unwrap_or_default());
            if bytes > opts.inline_bytes {
                break;
            }
        }
        if bytes <= opts.inline_bytes {
            return Ok(Views::Inline(out));
        }
        // Too big after all: what was read goes to the chunks like the rest.
        for (i, v) in out.into_iter().enumerate() {
            kept.insert(ids[i].clone(), v.into_bytes());
        }
    }
    let mut chunks = chunks.unwrap_or_else(|| Chunks::new(dir.join(format!("{TRANSCRIPTS}.new"))));
    let staging = chunks.dir().to_path_buf();
    let io = |source| PageError::Write {
        path: staging.clone(),
        source,
    };
    for id in &ids {
        if let Some(v) = kept.remove(id) {
            chunks.add(id, &v).map_err(io)?;
        }
    }
    let missing: Vec<usize> = (0..rows.len())
        .filter(|&i| chunks.chunk_of(&ids[i]).is_none())
        .collect();
    // Reading and converting is the work; spread it over the cores, a slice at a time
    // so that few views wait in memory to be written.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for slice in missing.chunks(64 * threads) {
        let mut views: Vec<(usize, Vec<u8>)> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|w| {
                    scope.spawn(move || {
                        (w..slice.len())
                            .step_by(threads)
                            .map(|k| (slice[k], read_view(dir, &rows[slice[k]])))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        views.sort_by_key(|(i, _)| *i);
        for (i, v) in views {
            chunks.add(&ids[i], &v).map_err(io)?;
        }
    }
    chunks.flush().map_err(io)?;
    if chunks.is_empty() {
        // No row at all: an empty folder still stands for the page's chunks.
        remove_any(&staging).map_err(io)?;
        std::fs::create_dir_all(&staging).map_err(io)?;
    }
    let index = ids
        .into_iter()
        .map(|id| {
            let n = chunks.chunk_of(&id).unwrap_or(0);
            (id, n)
        })
        .collect();
    Ok(Views::Lazy { staging, index })
}

#[cfg(test)]
mod tests;
