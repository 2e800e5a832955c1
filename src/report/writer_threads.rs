//! The report writer's two threads: the follower (the report page's views, given each
//! batch of events once it is written) and the syncer (`fdatasync` of each batch of
//! finished tasks' files), so that neither ever holds the writer back.

use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::error::ReportError;
use crate::vocab::sink::TranscriptFollower;

/// What the follower is told, in the transcripts' order.
pub(super) enum Follow {
    Event(Arc<str>, Box<crate::vocab::log::Stamped>),
    Finished(Arc<str>, String),
}

/// The follower on a thread of its own, given each batch's events once the batch is
/// written: what it builds (the page's views) never delays a line or its
/// acknowledgement, which every request waits for.
pub(super) struct Following {
    pub(super) tx: std::sync::mpsc::Sender<Vec<Follow>>,
    pub(super) thread: std::thread::JoinHandle<()>,
}

impl Following {
    pub(super) fn start(follower: Arc<dyn TranscriptFollower>) -> std::io::Result<Following> {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<Follow>>();
        let thread = std::thread::Builder::new()
            .name("agentbatch-follower".into())
            .spawn(move || {
                while let Ok(batch) = rx.recv() {
                    for f in batch {
                        match f {
                            Follow::Event(task, line) => {
                                let line = *line;
                                follower.event(&task, line.t_ms, line.event)
                            }
                            Follow::Finished(task, rel) => follower.finished(&task, &rel),
                        }
                    }
                }
            })?;
        Ok(Following { tx, thread })
    }
}

/// Starts writing `file`'s dirty pages to disk without waiting (Linux's
/// `sync_file_range`); a hint only, so a failure is left to the `fdatasync` after it.
fn start_writeback(file: &File) {
    use nix::libc;
    use std::os::fd::AsRawFd;
    // SAFETY: a plain system call on a file descriptor that `file` keeps open.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Files to make durable, in order: a batch's transcripts, then results.csv.
pub(super) type SyncBatch = (Vec<(File, PathBuf)>, Option<(File, PathBuf)>);

/// The syncer: `fdatasync`s each batch of finished tasks' files on its own thread, so
/// a slow disk never holds the writer (and with it every request's `reserve` line)
/// back. Batches that queue up while it syncs are synced together, results.csv once.
pub(super) struct Syncer {
    pub(super) tx: std::sync::mpsc::Sender<SyncBatch>,
    pub(super) thread: std::thread::JoinHandle<()>,
}

impl Syncer {
    pub(super) fn start(
        error: Arc<Mutex<Option<ReportError>>>,
        on_fatal: CancellationToken,
    ) -> std::io::Result<Syncer> {
        let (tx, rx) = std::sync::mpsc::channel::<SyncBatch>();
        let thread = std::thread::Builder::new()
            .name("agentbatch-syncer".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut files = first.0;
                    let mut csv = first.1;
                    while let Ok((more, c)) = rx.try_recv() {
                        files.extend(more);
                        csv = c.or(csv);
                    }
                    // Writeback of every file starts first, so their blocks are
                    // allocated in one journal transaction that the first sync commits
                    // for all: each later sync then finds little left to do.
                    for (f, _) in files.iter().chain(csv.iter()) {
                        start_writeback(f);
                    }
                    let failed = files
                        .iter()
                        .chain(csv.iter())
                        .find_map(|(f, path)| f.sync_data().err().map(|e| (path, e)));
                    if let Some((path, source)) = failed {
                        let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
                        if slot.is_none() {
                            on_fatal.cancel();
                            *slot = Some(ReportError::Io {
                                path: path.clone(),
                                source,
                            });
                        }
                    }
                }
            })?;
        Ok(Syncer { tx, thread })
    }
}
