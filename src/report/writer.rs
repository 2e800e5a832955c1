//! The reporter task: the only code that writes into a run's folder.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use serde_json::Value;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio_util::sync::CancellationToken;

use super::error::{io_err, ReportError};
use super::files::{self, patch_rel, transcript_rel};
use super::progress::Progress;
pub use super::progress::ProgressMode;
use super::results::ResultsCsv;
use super::run_json::RunJson;
use super::summary::{RunTotals, Summary};
use super::writer_threads::{Follow, Following, Syncer};
use crate::vocab::log::{Event, TaskResult};
use crate::vocab::sink::TranscriptFollower;
use crate::vocab::stop::StopReason;

/// What the reporter needs to know up front.
pub(crate) struct ReporterConfig {
    pub run_id: String,
    /// The run's folder, `<out>/<run-id>`; created here and must not exist yet.
    pub dir: PathBuf,
    /// run.json's fixed part (job, version, start time, tasks); the status and totals
    /// are set here.
    pub run_json: RunJson,
    pub total_tasks: usize,
    pub progress: ProgressMode,
    /// Cancelled when a report file cannot be written, so no more money is spent on
    /// results that would be lost.
    pub on_fatal: CancellationToken,
    /// The matrix axes: a results.csv column each.
    pub axes: Vec<String>,
    /// Continue an existing run folder: results.csv is appended to (the caller has
    /// already removed the rows being re-run).
    pub resume: bool,
    /// Tasks already finished (a resumed run), for the progress display.
    pub already_done: usize,
    /// Told of each row once it is written (a worker of a shared run sends it on).
    pub finished: Option<std::sync::mpsc::Sender<Finished>>,
    /// Follows every transcript as it is written (the report page's views).
    pub follower: Option<Arc<dyn TranscriptFollower>>,
}

/// A task's row as written, and where its files are.
#[derive(Debug)]
pub(crate) struct Finished {
    pub key: String,
    pub stop_reason: StopReason,
    /// The results.csv line, as written.
    pub record: Vec<u8>,
    pub transcript: Option<PathBuf>,
    pub patch: Option<PathBuf>,
}

/// The running reporter.
pub(crate) struct Reporter {
    tx: UnboundedSender<Event>,
    thread: std::thread::JoinHandle<Loop>,
    run_json: RunJson,
    dir: PathBuf,
    run_id: String,
}

struct Loop {
    results: Vec<TaskResult>,
    error: Option<ReportError>,
}

impl Reporter {
    /// Creates the run folder, results.csv (header only) and run.json, then starts the
    /// writer task.
    pub fn start(cfg: ReporterConfig) -> Result<Reporter, ReportError> {
        // The runner creates (and locks) the folder; a run's files must not exist yet.
        if cfg.dir.join(files::RESULTS_CSV).exists() && !cfg.resume {
            return Err(ReportError::Exists(cfg.dir));
        }
        let transcripts = cfg.dir.join(files::TRANSCRIPTS);
        std::fs::create_dir_all(&transcripts).map_err(io_err(&transcripts))?;
        let csv_path = cfg.dir.join(files::RESULTS_CSV);
        let csv = if cfg.resume {
            ResultsCsv::append_to(&csv_path, &cfg.axes)
        } else {
            ResultsCsv::create(&csv_path, &cfg.axes)
        }
        .map_err(io_err(&csv_path))?;
        let mut run_json = cfg.run_json;
        run_json.status = Some("running".into());
        run_json.write(&cfg.dir.join(files::RUN_JSON))?;
        let (tx, rx) = unbounded_channel();
        let state = State {
            run_id: cfg.run_id.clone(),
            dir: cfg.dir.clone(),
            csv,
            csv_path,
            open: HashMap::new(),
            started: HashSet::new(),
            cap_waiting: HashSet::new(),
            dirty: HashSet::new(),
            patched: HashSet::new(),
            progress: Progress::new(cfg.progress, cfg.total_tasks, cfg.already_done),
            to_sync: Vec::new(),
            syncer: None,
            sync_error: Arc::new(Mutex::new(None)),
            on_fatal: cfg.on_fatal,
            results: Vec::new(),
            error: None,
            finished: cfg.finished,
            follower: cfg
                .follower
                .map(Following::start)
                .transpose()
                .map_err(io_err(&cfg.dir))?,
            follow: Vec::new(),
            flushed_at: Instant::now(),
            handed_at: Instant::now(),
        };
        // Its own thread: fsyncs and file writes never hold up the runtime's workers,
        // which drive every loop in flight.
        let thread = std::thread::Builder::new()
            .name("agentbatch-reporter".into())
            .spawn(move || state.run(rx))
            .map_err(io_err(&cfg.dir))?;
        Ok(Reporter {
            tx,
            thread,
            run_json,
            dir: cfg.dir,
            run_id: cfg.run_id,
        })
    }

    /// A sender for tasks' events.
    pub fn sender(&self) -> UnboundedSender<Event> {
        self.tx.clone()
    }

    /// Keeps what became of the run's traces for run.json.
    /// The rate limits learned from the providers' headers, for run.json (after what
    /// earlier attempts of a resumed run learned), and the adaptive rates at the end.
    pub fn note_learned_limits(
        &mut self,
        learned: std::collections::BTreeMap<String, Vec<super::LearnedLimits>>,
        adaptive_rpm: std::collections::BTreeMap<String, u32>,
    ) {
        self.run_json.adaptive_rpm.extend(adaptive_rpm);
        for (provider, changes) in learned {
            self.run_json
                .learned_limits
                .entry(provider)
                .or_default()
                .extend(changes);
        }
    }

    pub fn note_telemetry(&mut self, telemetry: Value) {
        self.run_json.telemetry = Some(telemetry);
    }

    /// Waits for every sender to be dropped and every event written, then completes
    /// run.json with the end time, status and totals.
    pub async fn finish(self, status: &str) -> Result<Summary, ReportError> {
        let Reporter {
            tx,
            thread,
            mut run_json,
            dir,
            run_id,
        } = self;
        drop(tx);
        let joined = tokio::task::spawn_blocking(move || thread.join()).await;
        let done = match joined {
            Ok(Ok(done)) => done,
            _ => {
                return Err(ReportError::Io {
                    path: dir.clone(),
                    source: std::io::Error::other("the report writer stopped"),
                })
            }
        };
        let mut totals = RunTotals::default();
        for r in &done.results {
            totals.add(r);
        }
        run_json.status = Some(status.to_string());
        run_json.finished_at = Some(Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true));
        run_json.totals = Some(serde_json::to_value(&totals).unwrap_or(Value::Null));
        // What this process used, from the OS (the last attempt's, for a resumed run).
        run_json.resources =
            Some(serde_json::to_value(crate::resources::own_usage()).unwrap_or(Value::Null));
        run_json.write(&dir.join(files::RUN_JSON))?;
        if let Some(e) = done.error {
            return Err(e);
        }
        let learned_limits = run_json
            .learned_limits
            .iter()
            .filter_map(|(p, h)| h.last().map(|l| (p.clone(), l.limits)))
            .collect();
        Ok(Summary {
            run_id,
            dir,
            totals,
            rows: done.results,
            variants: Vec::new(),
            learned_limits,
            adaptive_rpm: run_json.adaptive_rpm.clone(),
        })
    }
}

/// Drops the run folder's empty work folders at the end of a run: the private temp
/// folders, git folders and workspaces are removed task by task, their parents here.
pub(crate) fn remove_empty_work_folders(dir: &Path) {
    for sub in files::WORK_FOLDERS {
        let _ = std::fs::remove_dir(dir.join(sub));
    }
}

/// An open transcript: its file and the lines not yet written to it. Lines wait in a
/// buffer that grows as a turn needs, so that each flush is one `write` however many
/// lines the turn wrote, and a task between flushes holds only what it has not written.
struct Open {
    file: File,
    buf: Vec<u8>,
}

impl Open {
    /// Past this many bytes waiting, the lines are written at once.
    const MOST: usize = 64 << 10;

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let wrote = (&self.file).write_all(&self.buf);
        self.buf.clear();
        if self.buf.capacity() > Self::MOST {
            self.buf.shrink_to(4096);
        }
        wrote
    }
}

/// How often, at most, the live transcripts are flushed: what `tail -f` lags by.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// How often, at most, finished tasks go to the syncer and events to the page's views:
/// each hand-over wakes a thread, and what is left at the end of a run waits for both.
const HAND_ON_EVERY: Duration = Duration::from_millis(50);

struct State {
    run_id: String,
    dir: PathBuf,
    csv: ResultsCsv,
    csv_path: PathBuf,
    open: HashMap<Arc<str>, Open>,
    started: HashSet<Arc<str>>,
    /// Tasks waiting for a team's period cap (`on_cap: wait`), for the progress display.
    cap_waiting: HashSet<Arc<str>>,
    /// Transcripts written to since the last flush.
    dirty: HashSet<Arc<str>>,
    /// Tasks whose patch has been written.
    patched: HashSet<Arc<str>>,
    progress: Progress,
    /// Transcripts of tasks finished since the last commit, to be synced.
    to_sync: Vec<(File, PathBuf)>,
    /// The thread that syncs each batch's files (started with the first batch).
    syncer: Option<Syncer>,
    /// The syncer's first failure.
    sync_error: Arc<Mutex<Option<ReportError>>>,
    on_fatal: CancellationToken,
    results: Vec<TaskResult>,
    error: Option<ReportError>,
    finished: Option<std::sync::mpsc::Sender<Finished>>,
    /// The follower's thread, when there is one.
    follower: Option<Following>,
    /// What the follower is given at the end of this batch.
    follow: Vec<Follow>,
    /// When the live transcripts were last flushed.
    flushed_at: Instant,
    /// When the syncer and the follower were last handed what was new.
    handed_at: Instant,
}

impl State {
    /// Writes events as they come. Live transcripts are flushed at most every
    /// [`FLUSH_EVERY`] (a request's `reserve` line and a finished task's transcript at
    /// once), so that `tail -f` follows a task without a write per line; each batch's
    /// rows and finished transcripts go to the syncer before the writer waits again.
    fn run(mut self, mut rx: UnboundedReceiver<Event>) -> Loop {
        // A batch ends when the queue runs dry, or after this many events, so that a
        // run busy enough never to leave the queue empty still commits often.
        const MAX_BATCH: usize = 2048;
        // Waits with a deadline need a clock: a runtime of this thread's own.
        let clock = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        loop {
            let next = if !self.pending() {
                rx.blocking_recv()
            } else {
                let due = self.due();
                match &clock {
                    Ok(rt) => match rt
                        .block_on(async { tokio::time::timeout_at(due.into(), rx.recv()).await })
                    {
                        Ok(next) => next,
                        Err(_) => {
                            self.tick();
                            continue;
                        }
                    },
                    Err(_) => {
                        self.tick();
                        rx.blocking_recv()
                    }
                }
            };
            let Some(ev) = next else { break };
            self.record(ev);
            for _ in 1..MAX_BATCH {
                match rx.try_recv() {
                    Ok(ev) => self.record(ev),
                    Err(_) => break,
                }
            }
            if Instant::now() >= self.due() {
                self.tick();
            } else {
                // Between ticks, only what has piled up is handed on: each hand-over
                // wakes a thread.
                if self.to_sync.len() >= 256 {
                    if let Err(e) = self.commit() {
                        self.fail(e);
                    }
                }
                if self.follow.len() >= 1024 {
                    self.hand_on();
                }
            }
        }
        self.hand_on();
        if let Some(f) = self.follower.take() {
            drop(f.tx);
            let _ = f.thread.join();
        }
        for (task, mut w) in self.open.drain() {
            if let Err(e) = w.flush() {
                let path = self.dir.join(transcript_rel(&task));
                self.error
                    .get_or_insert(ReportError::Io { path, source: e });
            }
        }
        if let Err(e) = self.commit() {
            self.error.get_or_insert(e);
        }
        if let Some(s) = self.syncer.take() {
            drop(s.tx);
            if s.thread.join().is_err() {
                self.error.get_or_insert(ReportError::Io {
                    path: self.csv_path.clone(),
                    source: std::io::Error::other("the syncer stopped"),
                });
            }
        }
        if let Some(e) = self
            .sync_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            self.error.get_or_insert(e);
        }
        self.progress.finish();
        Loop {
            results: self.results,
            error: self.error,
        }
    }

    /// Whether a tick has work: transcripts to flush, files to sync, events to follow.
    fn pending(&self) -> bool {
        !self.dirty.is_empty()
            || !self.to_sync.is_empty()
            || !self.follow.is_empty()
            || self.csv.has_unsynced()
    }

    /// When the next tick is due: the next flush of live transcripts, or sooner the
    /// next hand-over of finished tasks and followed events.
    fn due(&self) -> Instant {
        let flush = self.flushed_at + FLUSH_EVERY;
        if self.to_sync.is_empty() && self.follow.is_empty() && !self.csv.has_unsynced() {
            return flush;
        }
        flush.min(self.handed_at + HAND_ON_EVERY)
    }

    /// Every [`HAND_ON_EVERY`], the rows and transcripts of finished tasks go to the
    /// syncer (group commit) and the events to the follower; every [`FLUSH_EVERY`], the
    /// live transcripts are flushed.
    fn tick(&mut self) {
        if self.flushed_at.elapsed() >= FLUSH_EVERY {
            self.flush_live();
        }
        self.handed_at = Instant::now();
        if let Err(e) = self.commit() {
            self.fail(e);
        }
        self.hand_on();
    }

    /// Gives the follower the events written since the last time.
    fn hand_on(&mut self) {
        if let Some(f) = &self.follower {
            if !self.follow.is_empty() {
                let _ = f.tx.send(std::mem::take(&mut self.follow));
            }
        }
    }

    /// Flushes every transcript written to since the last flush.
    fn flush_live(&mut self) {
        self.flushed_at = Instant::now();
        let dirty: Vec<Arc<str>> = self.dirty.drain().collect();
        for task in dirty {
            if let Some(w) = self.open.get_mut(&task) {
                if let Err(e) = w.flush() {
                    let path = self.dir.join(transcript_rel(&task));
                    self.fail(ReportError::Io { path, source: e });
                }
            }
        }
    }

    /// Hands the transcripts of the tasks finished since the last commit, then
    /// results.csv, to the syncer.
    fn commit(&mut self) -> Result<(), ReportError> {
        let csv = match self.csv.unsynced() {
            Some(f) => Some((f.map_err(io_err(&self.csv_path))?, self.csv_path.clone())),
            None => None,
        };
        if self.to_sync.is_empty() && csv.is_none() {
            return Ok(());
        }
        if self.syncer.is_none() {
            let s = Syncer::start(self.sync_error.clone(), self.on_fatal.clone())
                .map_err(io_err(&self.dir))?;
            self.syncer = Some(s);
        }
        let batch = (std::mem::take(&mut self.to_sync), csv);
        match &self.syncer {
            Some(s) if s.tx.send(batch).is_ok() => Ok(()),
            _ => Err(ReportError::Io {
                path: self.csv_path.clone(),
                source: std::io::Error::other("the syncer stopped"),
            }),
        }
    }

    fn record(&mut self, ev: Event) {
        if let Err(e) = self.handle(ev) {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: ReportError) {
        if self.error.is_none() {
            self.on_fatal.cancel();
            self.error = Some(e);
        }
    }

    fn transcript(&mut self, task: &Arc<str>) -> Result<&mut Open, ReportError> {
        if !self.open.contains_key(task) {
            let path = self.dir.join(transcript_rel(task));
            let file = File::create(&path).map_err(io_err(&path))?;
            self.open.insert(
                task.clone(),
                Open {
                    file,
                    buf: Vec::new(),
                },
            );
        }
        self.open.get_mut(task).ok_or_else(|| ReportError::Io {
            path: PathBuf::from(transcript_rel(task)),
            source: std::io::Error::other("transcript not open"),
        })
    }

    fn handle(&mut self, ev: Event) -> Result<(), ReportError> {
        if self.error.is_some() {
            // After a fatal write error, keep draining so senders never block, but write
            // nothing more: the run is being cancelled.
            return Ok(());
        }
        match ev {
            Event::TaskStarted { task } => {
                self.started.insert(task.clone());
                self.progress.started();
                self.transcript(&task)?;
            }
            Event::Transcript {
                task,
                line,
                written,
            } => {
                let w = self.transcript(&task)?;
                line.append_line(&mut w.buf);
                w.buf.push(b'\n');
                if written.is_some() || w.buf.len() >= Open::MOST {
                    if let Err(source) = w.flush() {
                        let path = self.dir.join(transcript_rel(&task));
                        return Err(ReportError::Io { path, source });
                    }
                }
                match written {
                    Some(ack) => {
                        let _ = ack.send(());
                    }
                    None => {
                        self.dirty.insert(task.clone());
                    }
                }
                if self.follower.is_some() {
                    self.follow.push(Follow::Event(task, line));
                }
            }
            Event::Stopping(what) => self.progress.stopping(what),
            Event::CapWaiting { task, waiting } => {
                if waiting {
                    self.cap_waiting.insert(task);
                } else {
                    self.cap_waiting.remove(&task);
                }
                self.progress.cap_waiting(self.cap_waiting.len());
            }
            Event::Patch { task, diff } => {
                let path = self.dir.join(patch_rel(&task));
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
                }
                std::fs::write(&path, diff).map_err(io_err(&path))?;
                self.patched.insert(task);
            }
            Event::TaskFinished(mut r) => {
                let key: Arc<str> = Arc::from(r.key.as_str());
                let rel = transcript_rel(&key);
                let path = self.dir.join(&rel);
                self.dirty.remove(&key);
                if let Some(mut w) = self.open.remove(&key) {
                    w.flush().map_err(io_err(&path))?;
                    self.to_sync.push((w.file, path.clone()));
                }
                // A task whose code panicked lost its own tally; its transcript, now
                // complete, says what it spent (what the ledger charged).
                if r.stop_reason == StopReason::InternalError && r.measured.cost_usd.is_some() {
                    r.measured.cost_usd = Some(super::spent_in_transcript(&path));
                }
                let transcript = if path.exists() { rel } else { String::new() };
                if self.follower.is_some() && !transcript.is_empty() {
                    self.follow
                        .push(Follow::Finished(key.clone(), transcript.clone()));
                }
                let patch = if self.patched.remove(&key) {
                    patch_rel(&key)
                } else {
                    String::new()
                };
                let record = self
                    .csv
                    .append(&self.run_id, &r, &transcript, &patch)
                    .map_err(io_err(&self.csv_path))?;
                if let Some(tx) = &self.finished {
                    let _ = tx.send(Finished {
                        key: key.to_string(),
                        stop_reason: r.stop_reason,
                        record,
                        transcript: (!transcript.is_empty()).then(|| self.dir.join(&transcript)),
                        patch: (!patch.is_empty()).then(|| self.dir.join(&patch)),
                    });
                }
                let was_started = self.started.remove(&key);
                if self.cap_waiting.remove(&key) {
                    self.progress.cap_waiting(self.cap_waiting.len());
                }
                self.progress.finished(&r, was_started);
                self.results.push(*r);
            }
        }
        Ok(())
    }
}
