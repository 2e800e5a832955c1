//! A gate's buckets in the database of a shared run, paced on by every process on it:
//! what a worker takes ahead so that it need not ask for each request, and the shape of
//! each limit there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::limiters::{burst_cells, RATE_SHARE};
use super::pg_rate::{SharedRates, Take};
use crate::vocab::limits::StatedLimits;

/// What a worker takes from a shared bucket beyond the request at hand, so that at high
/// rates it does not make one database call per request: this much of the bucket's
/// refill, at most a quarter of its capacity. Taken ahead by many workers at once it
/// adds to a full bucket's burst: 5 ms each stays within the 10% burst reserve for up
/// to 20 workers on one limit.
const BATCH: Duration = Duration::from_millis(5);

/// How long what was taken ahead may be used: after that it is dropped (never given
/// back, so the shared rate is never exceeded, only not quite reached).
const CREDIT_TTL: Duration = Duration::from_millis(250);

/// A pause another worker set is seen within this long: what was taken ahead is used
/// only while the database was asked this recently.
const PAUSE_CHECK: Duration = Duration::from_millis(100);

/// A gate's buckets in the database, shared with every other process on it.
pub(super) struct Shared {
    /// Tokens taken ahead, by bucket key, and until when they may be used.
    pub(super) credits: Mutex<HashMap<String, (f64, Instant)>>,
    /// When the database last answered a take (and so said there was no pause).
    pub(super) asked: Mutex<Option<Instant>>,
    pub(super) rates: Arc<SharedRates>,
    /// `provider:<name>` or `team:<name>`: the rows are `<scope>:rpm` and so on.
    pub(super) scope: String,
    /// Capacity and refill a second of each limit, as the local buckets have them
    /// (learned limits change them).
    pub(super) shapes: Mutex<Shapes>,
}

/// Capacity and refill a second of each window of a shared gate.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Shapes {
    pub(super) rpm: Option<(f64, f64)>,
    pub(super) itpm: Option<(f64, f64)>,
    pub(super) otpm: Option<(f64, f64)>,
    pub(super) tpm: Option<(f64, f64)>,
}

impl Shapes {
    pub(super) fn of(l: &StatedLimits, burst: Duration) -> Shapes {
        Shapes {
            rpm: shape(l.rpm, burst),
            itpm: shape(l.itpm, burst),
            otpm: shape(l.otpm, burst),
            tpm: shape(l.tpm, burst),
        }
    }
}

/// Capacity and refill a second of a per-minute limit, as [`TokenLimit`] makes them.
fn shape(per_minute: Option<u32>, burst: Duration) -> Option<(f64, f64)> {
    per_minute.map(|r| {
        let r = r.max(1);
        (
            f64::from(burst_cells(r, burst)),
            f64::from(r) * RATE_SHARE / 60.0,
        )
    })
}

impl Shared {
    /// What is in hand, expired credit dropped first.
    fn credits(&self) -> std::sync::MutexGuard<'_, HashMap<String, (f64, Instant)>> {
        let mut c = self.credits.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        c.retain(|_, (_, until)| *until > now);
        c
    }

    /// Pays for `takes` from what was taken ahead, if it covers all of them.
    pub(super) fn spend_credit(&self, takes: &[Take]) -> bool {
        let now = Instant::now();
        let recent = self
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| now.duration_since(at) < PAUSE_CHECK);
        let mut credits = self.credits();
        if !recent {
            return false;
        }
        let covered = takes
            .iter()
            .filter(|t| t.amount > 0.0)
            .all(|t| credits.get(&t.key).is_some_and(|(c, _)| *c >= t.amount));
        if covered {
            for t in takes.iter().filter(|t| t.amount > 0.0) {
                if let Some((c, _)) = credits.get_mut(&t.key) {
                    *c -= t.amount;
                }
            }
        }
        covered
    }

    /// What to ask the database for: each take less what is in hand, plus a batch.
    pub(super) fn asks(&self, takes: &[Take]) -> Vec<Take> {
        let credits = self.credits();
        takes
            .iter()
            .map(|t| {
                if t.amount <= 0.0 {
                    return t.clone();
                }
                let held = credits.get(&t.key).map_or(0.0, |(c, _)| *c);
                let batch = (t.per_second * BATCH.as_secs_f64()).min(t.capacity / 4.0);
                Take {
                    amount: (t.amount - held).max(0.0) + batch.max(0.0),
                    ..t.clone()
                }
            })
            .collect()
    }

    /// Adds what the database gave to what is in hand.
    pub(super) fn credit(&self, asks: &[Take]) {
        *self.asked.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        let until = Instant::now() + CREDIT_TTL;
        let mut credits = self.credits();
        for a in asks.iter().filter(|a| a.amount > 0.0) {
            // New tokens expire with what is in hand already: nothing lives longer
            // than CREDIT_TTL from when the oldest of it was taken.
            let e = credits.entry(a.key.clone()).or_insert((0.0, until));
            e.0 += a.amount;
        }
    }

    pub(super) fn shapes(&self) -> Shapes {
        *self.shapes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The takes of a request; the pause row always (taking nothing).
    pub(super) fn takes(&self, input: u64, output: u64) -> Vec<Take> {
        let shapes = self.shapes();
        let mut v = vec![Take {
            key: format!("{}:pause", self.scope),
            amount: 0.0,
            capacity: 1.0,
            per_second: 1.0,
        }];
        for (name, shape, amount) in [
            ("rpm", shapes.rpm, 1.0),
            ("itpm", shapes.itpm, input as f64),
            ("otpm", shapes.otpm, output as f64),
            ("tpm", shapes.tpm, (input + output) as f64),
        ] {
            if let Some((capacity, per_second)) = shape {
                v.push(Take {
                    key: format!("{}:{name}", self.scope),
                    amount,
                    capacity,
                    per_second,
                });
            }
        }
        v
    }

    /// Runs `f` off the async workers, not waiting for it (corrections, pauses).
    pub(super) fn later(
        &self,
        f: impl FnOnce(&SharedRates) -> Result<(), super::pg::PgError> + Send + 'static,
    ) {
        let rates = self.rates.clone();
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn_blocking(move || {
                if let Err(e) = f(&rates) {
                    eprintln!("agentbatch: the shared rate limits: {e}");
                }
            });
        }
    }
}
