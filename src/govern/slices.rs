//! A worker's slices of the caps a shared run keeps in the store (a team's period cap,
//! the run's and its teams' `max_cost_usd`). Reserving each request in the database
//! took three transactions on one row per request, which capped a shared run at a
//! third of its uncapped rate. A worker instead holds a slice of each cap: a
//! reservation in the store that it spends from in memory, request by request.
//!
//! The store knows how much of a slice is *armed*: what the worker may have spent or
//! sent without telling it. A request is taken locally only while the slice's settled
//! spend not yet written, its requests in flight and this one fit in the armed part;
//! beyond it, the worker changes the slice first (one transaction, shared by every
//! request waiting for it, which also writes what was settled, per task). So when a
//! worker dies, its armed part stays spent (it may have been billed) and the rest of
//! its slice comes back when its lease runs out: the cap never overshoots, and what a
//! dead worker keeps is what it had in flight and about one tick of its spend.
//!
//! Every tick (200 ms) each slice writes what was settled, lowers its armed part to
//! what is in flight plus the last tick's spend, and a slice nothing was taken from
//! since the last tick shrinks to what is in flight: money a worker does not use goes
//! back to the others within a tick or two.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use rust_decimal::Decimal;

use super::store::{CapStore, EntryMeta, PeriodTotals, SliceChange, SliceGrant, StoreError};

/// How often slices write their settlements and give back what they do not use.
const TICK: Duration = Duration::from_millis(200);

/// A cap a slice is of: the store's team key and period, and the cap.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct SliceKey {
    pub(super) team: String,
    pub(super) period: String,
    /// Whose slice: a team's and a variant's tasks ([`super::store::slice_task`]), so
    /// that what a dead worker's slice kept is charged to them.
    pub(super) owner: String,
}

/// Which slice a request was taken from (a slice replaced after a failed change is
/// another generation: what it held is left to its lease).
#[derive(Debug, Clone)]
pub(super) struct Taken {
    key: SliceKey,
    generation: u64,
}

/// What the ledger needs from a slice to size a request: the cap's totals when the
/// slice last changed, what this worker has settled and not written yet, and what its
/// slice has that no request of this worker holds.
#[derive(Debug, Clone)]
pub(super) struct Local {
    pub(super) totals: PeriodTotals,
    pub(super) unwritten: Decimal,
    pub(super) spare: Decimal,
}

/// A cap a request is taken from: its slice, the cap, and whether it is a team's
/// period cap (which `agentbatch ledger set-cap` may have set in the store).
#[derive(Debug, Clone)]
pub(super) struct Want {
    pub(super) key: SliceKey,
    pub(super) cap: Decimal,
    pub(super) period_cap: bool,
}

#[derive(Debug, Default)]
struct Slice {
    generation: u64,
    id: Option<i64>,
    /// The entry's number of changes, as this worker made them.
    seq: i64,
    cap: Decimal,
    period_cap: bool,
    size: Decimal,
    /// What may be spent before the next change; while one is being written (or its
    /// outcome is unknown), the lower of the old and the new.
    armed: Decimal,
    /// Worst cases of requests in flight, plus `pending` and `writing`.
    used: Decimal,
    /// Settled and not yet written, per task.
    pending: HashMap<String, Decimal>,
    /// What the change being written moves out of the slice.
    writing: Decimal,
    /// Taken since the last tick, and the last request's worst case.
    taken: Decimal,
    last: Decimal,
    totals: PeriodTotals,
    /// A change whose answer was lost (the connection dropped while it committed): the
    /// store is asked what became of it before the slice changes again.
    unknown: Option<Writing>,
}

impl Slice {
    fn fits(&self, amount: Decimal) -> bool {
        self.used + amount <= self.armed
    }

    /// Room for one more request, or for one tick at the rate of the last (what a
    /// worker that dies now may have sent beyond what is in flight).
    fn margin(&self, amount: Decimal) -> Decimal {
        amount.max(self.last).max(self.taken)
    }

    /// The change was made: the slice is what the store says.
    fn made(&mut self, out: Decimal, id: Option<i64>, seq: i64, size: Decimal, armed: Decimal) {
        self.writing -= out;
        self.used -= out;
        self.id = id;
        self.seq = seq;
        self.size = size;
        self.armed = armed;
        self.unknown = None;
    }

    /// The change was not made: what it would have written waits for the next one.
    fn not_made(&mut self, w: &Writing) {
        self.writing -= w.out();
        self.armed = w.armed_before;
        for (task, a) in &w.moved {
            *self.pending.entry(task.clone()).or_default() += *a;
        }
        self.unknown = None;
    }
}

/// A change being written: what to restore or apply when the store answers.
#[derive(Debug, Clone)]
struct Writing {
    key: SliceKey,
    generation: u64,
    moved: Vec<(String, Decimal)>,
    armed_before: Decimal,
    id_before: Option<i64>,
    seq_before: i64,
}

impl Writing {
    fn out(&self) -> Decimal {
        self.moved.iter().map(|(_, a)| *a).sum()
    }
}

/// One change at a time per worker, held until its answer is applied (even when the
/// request that asked for it was cancelled meanwhile).
type Turn = tokio::sync::OwnedMutexGuard<()>;

/// This worker's slices.
pub(super) struct Slices {
    store: Arc<dyn CapStore>,
    run_id: String,
    holder: String,
    lease: Duration,
    state: Arc<Mutex<HashMap<SliceKey, Slice>>>,
    /// Requests that need a change wait for it together.
    changing: Arc<tokio::sync::Mutex<()>>,
    generations: std::sync::atomic::AtomicU64,
    ticking: std::sync::Once,
}

fn failed(e: impl std::fmt::Display) -> StoreError {
    StoreError {
        path: None,
        detail: format!("ledger worker failed: {e}"),
    }
}

impl Slices {
    pub(super) fn new(
        store: Arc<dyn CapStore>,
        run_id: &str,
        holder: &str,
        lease: Duration,
    ) -> Slices {
        Slices {
            store,
            run_id: run_id.to_string(),
            holder: holder.to_string(),
            lease,
            state: Arc::new(Mutex::new(HashMap::new())),
            changing: Arc::new(tokio::sync::Mutex::new(())),
            generations: std::sync::atomic::AtomicU64::new(1),
            ticking: std::sync::Once::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SliceKey, Slice>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slice of `key`, when this worker holds one.
    pub(super) fn local(&self, key: &SliceKey) -> Option<Local> {
        let state = self.lock();
        let s = state.get(key)?;
        let unwritten = s.pending.values().copied().sum::<Decimal>() + s.writing;
        Some(Local {
            totals: s.totals.clone(),
            unwritten,
            spare: (s.size - s.used).max(Decimal::ZERO),
        })
    }

    /// Takes `amount` from the slice of every cap in `wants`, changing slices in the
    /// store when they cannot hold it. None when a cap has no room for it (nothing
    /// taken).
    pub(super) async fn take(
        self: &Arc<Self>,
        wants: &[Want],
        amount: Decimal,
    ) -> Result<Option<Vec<Taken>>, StoreError> {
        self.start_ticking();
        loop {
            if let Some(t) = self.take_local(wants, amount) {
                return Ok(Some(t));
            }
            let turn = self
                .reconcile(self.changing.clone().lock_owned().await)
                .await?;
            if let Some(t) = self.take_local(wants, amount) {
                return Ok(Some(t));
            }
            let (changes, writing) = {
                let mut state = self.lock();
                let mut changes = Vec::new();
                let mut writing = Vec::new();
                for want in wants {
                    let generation = self
                        .generations
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let s = state.entry(want.key.clone()).or_insert_with(|| Slice {
                        generation,
                        ..Slice::default()
                    });
                    if s.unknown.is_some() {
                        return Err(StoreError {
                            path: None,
                            detail: format!(
                                "the ledger's answer to a change of this worker's slice of {} {} was lost, and the ledger cannot tell what became of it now",
                                want.key.team, want.key.period
                            ),
                        });
                    }
                    s.cap = want.cap;
                    s.period_cap = want.period_cap;
                    let (change, w) = Self::plan(&want.key, s, Some(amount));
                    changes.push(change);
                    writing.push(w);
                }
                (changes, writing)
            };
            if !self.write(changes, writing, turn).await? {
                return Ok(None);
            }
        }
    }

    fn take_local(&self, wants: &[Want], amount: Decimal) -> Option<Vec<Taken>> {
        let mut state = self.lock();
        let all = wants
            .iter()
            .all(|w| state.get(&w.key).is_some_and(|s| s.fits(amount)));
        if !all {
            return None;
        }
        let mut taken = Vec::with_capacity(wants.len());
        for w in wants {
            if let Some(s) = state.get_mut(&w.key) {
                s.used += amount;
                s.taken += amount;
                s.last = amount;
                taken.push(Taken {
                    key: w.key.clone(),
                    generation: s.generation,
                });
            }
        }
        Some(taken)
    }

    /// The change of slice `s`: for a request of `amount` (room for it, and a margin),
    /// or a tick's (`None`: a margin of the last tick's spend if it spent, else only
    /// what is in flight). Marks what it writes, and lowers the armed part to what both
    /// the old and the new allow.
    fn plan(key: &SliceKey, s: &mut Slice, amount: Option<Decimal>) -> (SliceChange, Writing) {
        let moved: Vec<(String, Decimal)> = s.pending.drain().collect();
        let out: Decimal = moved.iter().map(|(_, a)| *a).sum();
        s.writing += out;
        let in_use = (s.used - s.writing).max(Decimal::ZERO);
        // What stays of the slice once the settlements are out (an answer billed above
        // its worst case may have taken more than the slice held).
        let rest = (s.size - out).max(Decimal::ZERO);
        let (size, min_size, armed) = match amount {
            Some(a) => {
                let margin = s.margin(a);
                let armed = in_use + a + margin;
                (rest.max(armed + margin), in_use + a, armed)
            }
            // A tick never fails for want of room: at least what the slice keeps.
            None if s.taken.is_zero() => (in_use, in_use.min(rest), in_use),
            None => {
                let size = (in_use + s.taken * Decimal::TWO).min(rest).max(in_use);
                (size, in_use.min(rest), (in_use + s.taken).min(size))
            }
        };
        if amount.is_none() {
            s.taken = Decimal::ZERO;
        }
        let armed_before = s.armed;
        // Until the store answers, only what both the old and the new armed part allow.
        s.armed = s.armed.min(armed + s.writing);
        let change = SliceChange {
            team: key.team.clone(),
            period: key.period.clone(),
            cap: s.cap,
            period_cap: s.period_cap,
            owner: key.owner.clone(),
            id: s.id,
            seq: s.seq,
            settled: moved.clone(),
            size,
            min_size,
            armed,
        };
        (
            change,
            Writing {
                key: key.clone(),
                generation: s.generation,
                moved,
                armed_before,
                id_before: s.id,
                seq_before: s.seq,
            },
        )
    }

    /// Writes `changes` in the worker's `turn`; applies the answer (even if the caller
    /// is gone) before the turn ends. False when a cap had no room.
    async fn write(
        &self,
        changes: Vec<SliceChange>,
        writing: Vec<Writing>,
        turn: Turn,
    ) -> Result<bool, StoreError> {
        if changes.is_empty() {
            return Ok(true);
        }
        let store = self.store.clone();
        let state = self.state.clone();
        let meta = EntryMeta {
            run_id: self.run_id.clone(),
            task_id: super::store::SLICE_TASK.to_string(), // each change names its own
            expires_at: chrono::Utc::now()
                + chrono::Duration::from_std(self.lease).unwrap_or(chrono::Duration::hours(1)),
            holder: Some(self.holder.clone()),
        };
        tokio::task::spawn_blocking(move || {
            let result = store.slices(&changes, &meta);
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            Self::apply(&mut state, &writing, &result);
            drop(state);
            drop(turn);
            result.map(|g| g.is_some())
        })
        .await
        .map_err(failed)?
    }

    fn apply(
        state: &mut HashMap<SliceKey, Slice>,
        writing: &[Writing],
        result: &Result<Option<Vec<SliceGrant>>, StoreError>,
    ) {
        for (i, w) in writing.iter().enumerate() {
            let Some(s) = state
                .get_mut(&w.key)
                .filter(|s| s.generation == w.generation)
            else {
                continue;
            };
            match result {
                Ok(Some(grants)) => {
                    if let Some(g) = grants.get(i) {
                        s.made(w.out(), g.id, g.seq, g.size, g.armed);
                        s.totals = g.totals.clone();
                    }
                }
                Ok(None) => s.not_made(w),
                // Whether the store made the change is unknown: until it says, the
                // slice spends only what both the old and the new armed part allow.
                Err(_) => s.unknown = Some(w.clone()),
            }
        }
        state.retain(|_, s| {
            s.id.is_some() || s.unknown.is_some() || !s.used.is_zero() || !s.pending.is_empty()
        });
    }

    /// Asks the store what became of changes whose answer was lost, in the worker's
    /// `turn`, and gives the turn back. A slice the store cannot tell about now stays
    /// unknown (and is not changed).
    async fn reconcile(&self, turn: Turn) -> Result<Turn, StoreError> {
        let unknown: Vec<Writing> = self
            .lock()
            .values()
            .filter_map(|s| s.unknown.clone())
            .collect();
        if unknown.is_empty() {
            return Ok(turn);
        }
        let (store, state, holder) = (self.store.clone(), self.state.clone(), self.holder.clone());
        tokio::task::spawn_blocking(move || {
            for w in unknown {
                let Ok(found) =
                    store.slice_state(&holder, &w.key.team, &w.key.period, &w.key.owner)
                else {
                    continue;
                };
                let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(s) = state
                    .get_mut(&w.key)
                    .filter(|s| s.generation == w.generation)
                else {
                    continue;
                };
                match (w.id_before, found) {
                    (_, Some(f)) if f.seq == w.seq_before + 1 => {
                        s.made(w.out(), Some(f.id), f.seq, f.amount, f.amount - f.idle)
                    }
                    (Some(id), Some(f)) if f.id == id && f.seq == w.seq_before => s.not_made(&w),
                    (Some(_), None) => s.made(w.out(), None, 0, Decimal::ZERO, Decimal::ZERO),
                    (None, None) => s.not_made(&w),
                    // Anything else is not this worker's doing: left unknown.
                    _ => {}
                }
            }
            turn
        })
        .await
        .map_err(failed)
    }

    /// A request taken from `taken` ended: `actual` is what it cost (None: it was
    /// surely not billed). Memory only; the next change or tick writes it.
    pub(super) fn finish(
        &self,
        taken: &[Taken],
        amount: Decimal,
        actual: Option<Decimal>,
        task: &str,
    ) {
        let mut state = self.lock();
        for t in taken {
            let Some(s) = state
                .get_mut(&t.key)
                .filter(|s| s.generation == t.generation)
            else {
                continue;
            };
            s.used -= amount;
            if let Some(a) = actual {
                s.used += a;
                *s.pending.entry(task.to_string()).or_default() += a;
            }
        }
    }

    fn start_ticking(self: &Arc<Self>) {
        self.ticking.call_once(|| {
            let me = Arc::downgrade(self);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(TICK).await;
                    let Some(me) = Weak::upgrade(&me) else { return };
                    if let Err(e) = me.tick(false).await {
                        eprintln!("agentbatch: cannot write this worker's cap slices to the ledger (they are tried again next tick; what they may have spent stays counted): {e}");
                    }
                }
            });
        });
    }

    /// Writes every slice's settlements and gives back what it does not use; `close`
    /// ends every slice with nothing in flight (the run is over).
    pub(super) async fn tick(&self, close: bool) -> Result<(), StoreError> {
        let turn = self
            .reconcile(self.changing.clone().lock_owned().await)
            .await?;
        let (changes, writing) = {
            let mut state = self.lock();
            let mut changes = Vec::new();
            let mut writing = Vec::new();
            for (key, s) in state.iter_mut() {
                if s.id.is_none() || s.unknown.is_some() {
                    continue;
                }
                if close {
                    s.taken = Decimal::ZERO;
                }
                let idle = s.pending.is_empty()
                    && s.taken.is_zero()
                    && s.size == s.used
                    && s.armed == s.used;
                if idle && !(close && s.used.is_zero()) {
                    continue;
                }
                let (change, w) = Self::plan(key, s, None);
                changes.push(change);
                writing.push(w);
            }
            (changes, writing)
        };
        self.write(changes, writing, turn).await.map(|_| ())
    }
}

#[cfg(test)]
#[path = "slices_tests.rs"]
mod tests;
