//! The page's transcript views, built while the run goes, and the chunk scripts a big
//! run's views are kept in beside the page.
//!
//! The reporter hands every event to [`LiveViews`] right after writing its line, on
//! its own thread, so a view is built from the typed event without reading the
//! transcript back, and is done when its task is. A small run's views stay in memory
//! for the page to inline; past the page's inline limits they go to chunk scripts of
//! many tasks each (`<n>.js`, each view one `abTranscript(n, id, view)` call), written
//! as they fill. The page at the end of the run then only reads results.csv and
//! writes itself; rows the run has no view of (a resumed run's earlier rows) are read
//! from their transcripts then.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::transcript::Sections;
use super::{remove_any, script_safe_into, PageOptions, TRANSCRIPTS};
use crate::vocab::sink::TranscriptFollower;
use crate::vocab::transcript::TranscriptEvent;

/// A chunk is written once it holds this many tasks...
const CHUNK_TASKS: usize = 256;
/// ... or this many bytes.
const CHUNK_BYTES: usize = 1 << 20;

/// The chunk scripts being written into a staging folder, and which chunk holds each
/// view (by its id: the transcript's path in the run folder).
pub(super) struct Chunks {
    dir: PathBuf,
    created: bool,
    buf: Vec<u8>,
    tasks: usize,
    next: u32,
    index: HashMap<String, u32>,
}

impl Chunks {
    /// Chunks to be written in `dir` (created, emptied first, with the first chunk).
    pub(super) fn new(dir: PathBuf) -> Chunks {
        Chunks {
            dir,
            created: false,
            buf: Vec::new(),
            tasks: 0,
            next: 0,
            index: HashMap::new(),
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds one view; writes the chunk when it is full.
    pub(super) fn add(&mut self, id: &str, view: &[u8]) -> std::io::Result<()> {
        let n = self.next;
        self.buf
            .extend_from_slice(format!("abTranscript({n},").as_bytes());
        let id_json = serde_json::Value::from(id).to_string();
        script_safe_into(&mut self.buf, id_json.as_bytes());
        self.buf.push(b',');
        self.buf.extend_from_slice(view);
        self.buf.extend_from_slice(b");\n");
        self.index.insert(id.to_string(), n);
        self.tasks += 1;
        if self.tasks >= CHUNK_TASKS || self.buf.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the chunk being filled, if it holds any view.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        if self.tasks == 0 {
            return Ok(());
        }
        if !self.created {
            remove_any(&self.dir)?;
            std::fs::create_dir_all(&self.dir)?;
            self.created = true;
        }
        std::fs::write(self.dir.join(format!("{}.js", self.next)), &self.buf)?;
        self.buf.clear();
        self.tasks = 0;
        self.next += 1;
        Ok(())
    }

    /// The chunk that holds the view `id`.
    pub(super) fn chunk_of(&self, id: &str) -> Option<u32> {
        self.index.get(id).copied()
    }

    /// Whether any chunk has been written or begun.
    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// What a run built: the views kept in memory, or the chunks they went to.
pub(super) struct Built {
    /// Views in memory by id, while the run was small enough to inline them.
    pub kept: HashMap<String, Vec<u8>>,
    /// The chunks, once the run outgrew the inline limits.
    pub chunks: Option<Chunks>,
}

/// The views of a run's transcripts, built as the reporter writes them.
pub struct LiveViews {
    inner: Mutex<Live>,
}

struct Live {
    run_dir: PathBuf,
    opts: PageOptions,
    /// The views of tasks still running, by task key.
    open: HashMap<String, Sections>,
    kept: HashMap<String, Vec<u8>>,
    kept_bytes: usize,
    chunks: Option<Chunks>,
    /// Why the views are incomplete (a chunk could not be written): the page is then
    /// built from the transcripts.
    failed: Option<String>,
}

impl LiveViews {
    /// Views for the run folder `run_dir`, inlined or not by `opts` as the page would.
    pub fn new(run_dir: &Path, opts: PageOptions) -> LiveViews {
        LiveViews {
            inner: Mutex::new(Live {
                run_dir: run_dir.to_path_buf(),
                opts,
                open: HashMap::new(),
                kept: HashMap::new(),
                kept_bytes: 0,
                chunks: None,
                failed: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes what was built: None when something failed (said in the warning).
    pub(super) fn take(&self) -> Result<Built, String> {
        let mut live = self.lock();
        if let Some(why) = live.failed.take() {
            return Err(why);
        }
        let mut chunks = live.chunks.take();
        if let Some(c) = chunks.as_mut() {
            if let Err(e) = c.flush() {
                return Err(format!("cannot write {}: {e}", c.dir().display()));
            }
        }
        Ok(Built {
            kept: std::mem::take(&mut live.kept),
            chunks,
        })
    }
}

/// Where a run's chunks are written while it goes; the page swaps them in at the end.
pub(super) fn staging(run_dir: &Path) -> PathBuf {
    run_dir.join(format!("{TRANSCRIPTS}.live"))
}

impl Live {
    fn store(&mut self, id: &str, view: Vec<u8>) {
        let fits = self.kept.len() < self.opts.inline_tasks
            && self.kept_bytes + view.len() <= self.opts.inline_bytes;
        if self.chunks.is_none() && fits {
            self.kept_bytes += view.len();
            self.kept.insert(id.to_string(), view);
            return;
        }
        let chunks = self
            .chunks
            .get_or_insert_with(|| Chunks::new(staging(&self.run_dir)));
        let mut result = Ok(());
        for (kept_id, kept_view) in self.kept.drain() {
            result = result.and_then(|()| chunks.add(&kept_id, &kept_view));
        }
        self.kept_bytes = 0;
        if let Err(e) = result.and_then(|()| chunks.add(id, &view)) {
            self.failed = Some(format!("cannot write {}: {e}", chunks.dir().display()));
            self.open.clear();
        }
    }
}

impl TranscriptFollower for LiveViews {
    fn event(&self, task: &str, t_ms: u64, event: TranscriptEvent) {
        let mut live = self.lock();
        if live.failed.is_some() {
            return;
        }
        match live.open.get_mut(task) {
            Some(s) => s.add(event, t_ms),
            None => {
                let mut s = Sections::new();
                s.add(event, t_ms);
                live.open.insert(task.to_string(), s);
            }
        }
    }

    fn finished(&self, task: &str, transcript: &str) {
        let mut live = self.lock();
        if live.failed.is_some() {
            return;
        }
        let s = live.open.remove(task).unwrap_or_else(Sections::new);
        let view = s.finish(transcript, 0, false);
        live.store(transcript, view);
    }
}
