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
mod summary;
mod table;
mod transcript;

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::report::{read_results, read_variants, ResultsError, RunJson};

/// The page's file name in the run folder.
pub const PAGE: &str = "report.html";
/// The folder beside the page that holds a big run's transcripts, one script each.
pub const TRANSCRIPTS: &str = "report-transcripts";
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
    crate::text::prefix(s, CLIP_CHARS)
}

/// JSON that can sit inside a `<script>` element: no `<`, `>` or `&` (so no text can
/// close the element or open a comment), no line separators older engines end a
/// string at. Each is written as its `\u` escape, which JSON reads back the same.
fn script_json(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// A transcript path from results.csv, if it stays inside the run folder.
fn inside(dir: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    let plain = !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| dir.join(p))
}

/// Writes `dir/report.html` (and, for a big run, `dir/report-transcripts/`).
pub fn write(dir: &Path, opts: &PageOptions) -> Result<Written, PageError> {
    let results = dir.join("results.csv");
    if !results.is_file() {
        return Err(PageError::NotARunFolder(dir.to_path_buf()));
    }
    let file = read_results(&results, &["task_id"], &["task_id"])?;
    let mut warnings: Vec<String> = file.cut_off.iter().cloned().collect();
    let run = match RunJson::read(&dir.join("run.json")) {
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
    let variants = match read_variants(dir, &file.axes, &order) {
        Ok(v) => Some(v),
        Err(e) => {
            warnings.push(format!("no per-variant table: {e}"));
            None
        }
    };
    let rows = &file.rows;
    let lazy_dir = dir.join(TRANSCRIPTS);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PageError::Write { path, source }
    };
    // The new transcripts are written beside the old ones and swapped in with the page,
    // so a write that fails leaves the page before it whole.
    let staging = dir.join(format!("{TRANSCRIPTS}.new"));
    remove_any(&staging).map_err(io(&staging))?;
    let views = match transcripts(dir, rows, opts, &staging) {
        Ok(v) => v,
        Err(e) => {
            let _ = remove_any(&staging);
            return Err(e);
        }
    };
    let lazy = views.is_none();
    let page = html::page(&html::Parts {
        dir,
        run: run.as_ref(),
        rows,
        variants: variants.as_deref(),
        transcripts: views.as_deref(),
        warnings: &warnings,
    });
    let path = dir.join(PAGE);
    let tmp = dir.join("report.html.tmp");
    if let Err(source) = std::fs::write(&tmp, page) {
        let _ = remove_any(&staging);
        let _ = std::fs::remove_file(&tmp);
        return Err(PageError::Write { path: tmp, source });
    }
    let old = dir.join(format!("{TRANSCRIPTS}.old"));
    if lazy {
        remove_any(&old).map_err(io(&old))?;
        if lazy_dir.symlink_metadata().is_ok() {
            std::fs::rename(&lazy_dir, &old).map_err(io(&lazy_dir))?;
        }
        std::fs::rename(&staging, &lazy_dir).map_err(io(&lazy_dir))?;
    }
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    // What the page before this one loaded; a leftover is harmless, so only a warning.
    for stale in [&old, &staging] {
        if let Err(e) = remove_any(stale) {
            warnings.push(format!("cannot remove {}: {e}", stale.display()));
        }
    }
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

/// Every task's transcript view as script-safe JSON: in memory for the page when the
/// run is small enough (Some), else written to `lazy_dir` (None).
fn transcripts(
    dir: &Path,
    rows: &[crate::report::ResultRow],
    opts: &PageOptions,
    lazy_dir: &Path,
) -> Result<Option<Vec<String>>, PageError> {
    let view = |i: usize| -> String {
        let row = &rows[i];
        let v = match inside(dir, &row.transcript) {
            Some(p) => transcript::view(&p, &row.transcript),
            None => serde_json::json!({
                "file": row.transcript,
                "error": "results.csv names no transcript inside the run folder for this task",
                "sections": [],
            }),
        };
        script_json(&v)
    };
    if rows.len() <= opts.inline_tasks {
        let mut out = Vec::with_capacity(rows.len());
        let mut bytes = 0usize;
        for i in 0..rows.len() {
            let v = view(i);
            bytes += v.len();
            if bytes > opts.inline_bytes {
                break;
            }
            out.push(v);
        }
        if out.len() == rows.len() {
            return Ok(Some(out));
        }
    }
    std::fs::create_dir_all(lazy_dir).map_err(|source| PageError::Write {
        path: lazy_dir.to_path_buf(),
        source,
    })?;
    // Reading and converting is the work; spread it over the cores.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let failed: Vec<PageError> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|w| {
                let view = &view;
                scope.spawn(move || {
                    for i in (w..rows.len()).step_by(threads) {
                        let path = lazy_dir.join(format!("{i}.js"));
                        let text = format!("abTranscript({i},{});\n", view(i));
                        if let Err(source) = std::fs::write(&path, text) {
                            return Some(PageError::Write { path, source });
                        }
                    }
                    None
                })
            })
            .collect();
        workers
            .into_iter()
            .filter_map(|h| h.join().ok().flatten())
            .collect()
    });
    match failed.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests;
