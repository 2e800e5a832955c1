//! A request's wait for a team's period cap (`on_cap: wait`): it holds nothing, looks
//! again within a second (a cap raised by another process, the next period), and ends
//! at the run's `--until`. The progress display is told when a wait starts and ends
//! (however it ends: granted, `--until`, or the request cut off while it waits).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::vocab::log::TaskLog;
use crate::vocab::stop::Stop;
use crate::vocab::transcript::TranscriptEvent;

/// How often a waiting request looks at the cap again.
const LOOK: Duration = Duration::from_secs(1);

/// One request's wait, from its first refusal.
#[derive(Default)]
pub(super) struct CapWait {
    since: Option<Instant>,
    /// The task's log while the progress display counts the wait: told when it ends.
    shown: Option<TaskLog>,
}

impl CapWait {
    /// The cap cannot pay for the request (`stop` says why, `event` is its budget
    /// stop): how long to wait before looking again, or the stop when `until` has come.
    /// `since` is where the caller reads when the wait started.
    pub(super) fn step(
        &mut self,
        until: Option<DateTime<Utc>>,
        since: &Mutex<Option<Instant>>,
        log: &TaskLog,
        mut stop: Stop,
        event: TranscriptEvent,
    ) -> Result<Duration, Stop> {
        let now = Utc::now();
        if let Some(until) = until.filter(|u| *u <= now) {
            log.emit(event);
            stop.detail = format!(
                "{}; waited for it until the run's --until ({})",
                stop.detail,
                until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            );
            self.ended(log, "until");
            return Err(stop);
        }
        if self.since.is_none() {
            let at = Instant::now();
            self.since = Some(at);
            *since.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
            log.cap_waiting(true);
            self.shown = Some(log.clone());
            log.emit(TranscriptEvent::BudgetWait {
                reason: format!(
                    "{}: waiting (on_cap: wait) for the next period or a raised cap, holding nothing",
                    stop.detail
                ),
            });
        }
        // Not past --until.
        let left = until.and_then(|u| (u - now).to_std().ok());
        Ok(left.map_or(LOOK, |l| LOOK.min(l.max(Duration::from_millis(10)))))
    }

    /// The request was reserved: a wait, if there was one, ends.
    pub(super) fn granted(&mut self, log: &TaskLog) {
        self.ended(log, "granted");
    }

    fn ended(&mut self, log: &TaskLog, how: &str) {
        if let Some(at) = self.since {
            log.emit(TranscriptEvent::CapWait {
                waited_ms: at.elapsed().as_millis() as u64,
                ended: how.into(),
            });
        }
        self.unshow();
    }

    /// The progress display stops counting the wait.
    fn unshow(&mut self) {
        if let Some(log) = self.shown.take() {
            log.cap_waiting(false);
        }
    }
}

/// A wait cut off (the task's time limit, the run's cancel) leaves the count too.
impl Drop for CapWait {
    fn drop(&mut self) {
        self.unshow();
    }
}
