//! The ledger owns all shared money: the run's pool, each team's pool for this run, and
//! (through a [`CapStore`]) each team's period cap across runs and processes.
//!
//! Before a request, its worst case is reserved in every pool above the task at once;
//! after it, the reservation is settled with the real cost, released if the request was
//! surely not billed, or kept whole if it may have been. Reservations are taken before
//! sending, under one lock (and one IMMEDIATE transaction for a period cap), so no amount
//! of concurrency can push a pool past its cap.
//!
//! Sizing a request looks only at *unspent* money (cap minus settled spend): a request is
//! shrunk when settled spend leaves too little for its full size, never because other
//! requests hold reservations. If the request does not fit in what is free right now, it
//! waits for those reservations to settle; it stops (`team_budget`, `run_budget`) only
//! when unspent money cannot pay for its smallest allowed request. So no task is cut
//! short or stopped while money for it is merely reserved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;
use tokio::sync::{oneshot, Notify};

use super::cap_wait::CapWait;
use super::pools::{Pool, Pools};
use super::slices::{Slices, Taken, Want};

#[path = "ledger_rooms.rs"]
mod rooms;
use super::store::{CapKey, CapStore, EntryId, EntryMeta, StoreError};
use crate::job::{Plan, TeamSpec};
use crate::vocab::limits::Period;
use crate::vocab::log::TaskLog;
use crate::vocab::price::Price;
use crate::vocab::stop::{Stop, StopReason};
use crate::vocab::transcript::{TranscriptEvent, Usd};
use rooms::{Room, StoreCap};

/// How often a request waiting on a period cap (money possibly held by another process)
/// looks again, at first and at most.
const POLL_FIRST: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_secs(1);

/// A reservation held for one request. Settle or release it; if it is dropped instead
/// (a task that panicked), it is charged in full, so money is never left held.
pub struct Reservation {
    ledger: Arc<Ledger>,
    team: Option<String>,
    amount: Decimal,
    /// Its entries in the store, one per cap kept there.
    entries: Vec<EntryId>,
    /// Or the slices it was taken from (a worker of a shared run), and its task.
    sliced: Vec<Taken>,
    task: String,
    open: bool,
}

impl Reservation {
    /// The worst case reserved.
    pub fn usd(&self) -> Decimal {
        self.amount
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.open {
            self.ledger
                .finish_memory(self.team.as_deref(), self.amount, Some(self.amount));
            if let Some(s) = &self.ledger.slices {
                s.finish(&self.sliced, self.amount, Some(self.amount), &self.task);
            }
        }
    }
}

/// What a request needs from the ledger.
pub struct Need<'a> {
    pub task_id: &'a str,
    /// Its variant (a worker's slices of the caps are kept per team and variant).
    pub variant: &'a str,
    pub team: Option<&'a TeamSpec>,
    pub price: &'a Price,
    pub prompt_tokens: u64,
    /// The most the task's own budgets allow.
    pub max_tokens: u32,
    /// The least worth sending.
    pub floor: u32,
    /// How long the request may be in flight (for stale-reservation detection).
    pub in_flight_for: Duration,
    /// Set when the request starts waiting for a team's period cap (`on_cap: wait`),
    /// so that the caller can count the wait however it ends (granted, stopped, cut
    /// off by the task's time limit).
    pub cap_wait_since: Mutex<Option<std::time::Instant>>,
}

/// The money of a run.
pub struct Ledger {
    pools: Mutex<Pools>,
    changed: Notify,
    store: Option<Arc<dyn CapStore>>,
    run_id: String,
    /// The run is shared by machines: its own pools are kept in the store, these caps.
    shared: Option<SharedPools>,
    /// Who holds this process's reservations in the store, when it renews them.
    holder: Option<Holder>,
    /// The run's `--until`: no task waits for a period cap past it.
    until: Option<DateTime<Utc>>,
    /// A worker of a shared run spends from slices of the caps in the store.
    slices: Option<Arc<Slices>>,
}

/// A worker of a shared run. Its reservations stay in flight while its heartbeat
/// renews them, and go stale (still spent, never waited for) within a lease once it
/// stops: so a killed worker's requests hold nobody up for longer than its tasks'
/// leases, where a process on one machine is only known dead at the task's deadline.
#[derive(Debug, Clone)]
struct Holder {
    /// The worker's name and a number of this process's own: a worker started again
    /// under the same name must not keep its dead predecessor's reservations alive.
    id: String,
    lease: Duration,
}

/// The run's own caps, kept in the store when the run is shared by machines.
#[derive(Debug, Clone, Default)]
struct SharedPools {
    run: Option<Decimal>,
    teams: HashMap<String, Decimal>,
}

enum Step {
    Take {
        amount: Decimal,
        max_tokens: u32,
    },
    Wait,
    /// A period cap with `on_cap: wait` cannot pay for the request: wait for the next
    /// period or a raised cap, holding nothing. What to stop with if waiting ends.
    CapWait(Stop, Box<TranscriptEvent>),
    /// The event is boxed: it is far larger than the other steps.
    Stop(Stop, Box<TranscriptEvent>),
}

fn ledger_failed(e: StoreError) -> Stop {
    Stop::new(
        StopReason::LedgerError,
        format!("{e}; the team's period cap cannot be enforced, so the task stops (check the file's disk and permissions)"),
    )
}

fn period_name(p: Period) -> &'static str {
    match p {
        Period::Day => "daily",
        Period::Week => "weekly",
        Period::Month => "monthly",
    }
}

impl Ledger {
    /// Sets up the run's pools from the plan; `store` keeps team period caps.
    pub fn new(plan: &Plan, run_id: &str, store: Option<Arc<dyn CapStore>>) -> Ledger {
        let teams = plan
            .teams
            .values()
            .map(|t| {
                (
                    t.name.clone(),
                    Pool {
                        cap: t.max_cost_usd,
                        ..Default::default()
                    },
                )
            })
            .collect();
        Ledger {
            pools: Mutex::new(Pools {
                run: Pool {
                    cap: plan.max_cost_usd,
                    ..Default::default()
                },
                teams,
            }),
            changed: Notify::new(),
            store,
            run_id: run_id.to_string(),
            shared: None,
            holder: None,
            until: None,
            slices: None,
        }
    }

    /// No task waits for a period cap (`on_cap: wait`) past `until` (the run's
    /// `--until`): it stops with `team_budget` then.
    pub fn wait_until(mut self, until: Option<DateTime<Utc>>) -> Ledger {
        self.until = until;
        self
    }

    /// Keeps the run's own pools (the run's and each team's `max_cost_usd`) in the store
    /// instead of this process's memory, so that every process running a share of the
    /// run (the workers of a shared run) spends from the same pools. Needs a store.
    /// `worker` holds the reservations this process makes, and must [`Ledger::renew`]
    /// them within every `lease`.
    pub fn share_run_pools(mut self, worker: &str, lease: Duration) -> Ledger {
        let holder = Holder {
            id: format!("{worker}#{:016x}", rand::random::<u64>()),
            lease,
        };
        self.slices = self
            .store
            .clone()
            .map(|store| Arc::new(Slices::new(store, &self.run_id, &holder.id, lease)));
        self.holder = Some(holder);
        let mut shared = SharedPools::default();
        {
            let p = self.pools.get_mut().unwrap_or_else(PoisonError::into_inner);
            shared.run = p.run.cap.take();
            for (name, pool) in p.teams.iter_mut() {
                if let Some(cap) = pool.cap.take() {
                    shared.teams.insert(name.clone(), cap);
                }
            }
        }
        self.shared = Some(shared);
        self
    }

    /// Counts what earlier attempts of this run spent (a resumed run) as spent, so the
    /// run's and the teams' caps hold across the attempts.
    pub fn carry_over(&self, run: Decimal, teams: &HashMap<String, Decimal>) {
        let mut p = self.lock();
        p.run.spent += run;
        for (team, spent) in teams {
            if let Some(pool) = p.teams.get_mut(team) {
                pool.spent += *spent;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether any pool applies to a task of `team` (if none, no reservation is needed).
    pub fn governs(&self, team: Option<&TeamSpec>) -> bool {
        self.lock().run.cap.is_some()
            || self.shared.as_ref().is_some_and(|s| s.run.is_some())
            || team.is_some_and(|t| t.max_cost_usd.is_some() || t.cap.is_some())
    }

    /// Decides from the rooms (memory rooms re-read under the lock) and, if the request
    /// fits, takes it from the memory pools.
    fn decide(&self, need: &Need<'_>, stored: &[Room]) -> Step {
        let team = need.team.map(|t| t.name.as_str());
        let mut p = self.lock();
        let mut rooms = Self::memory_rooms(&p, team);
        rooms.extend(stored.iter().cloned());
        let smallest = need
            .price
            .worst_case(need.prompt_tokens, u64::from(need.floor));
        // Sized by unspent money only: others' reservations never shrink a request.
        let mut desired = u64::from(need.max_tokens);
        for r in &rooms {
            desired = desired.min(
                need.price
                    .affordable_output(r.unspent.max(Decimal::ZERO), need.prompt_tokens),
            );
        }
        if desired < u64::from(need.floor) {
            let Some(r) = rooms.iter().find(|r| {
                need.price
                    .affordable_output(r.unspent.max(Decimal::ZERO), need.prompt_tokens)
                    < u64::from(need.floor)
            }) else {
                return Step::Wait;
            };
            let left = r.unspent.max(Decimal::ZERO);
            let ev = Box::new(TranscriptEvent::BudgetStop {
                pool: r.label.clone(),
                cap_usd: Usd(r.cap),
                spent_usd: Usd(r.cap - r.unspent),
                left_usd: Usd(left),
                reserved_by_others_usd: Usd(r.unspent - r.free),
                smallest_request_usd: Usd(smallest),
            });
            let detail = format!(
                "{} of ${}: ${} left cannot pay for the smallest request, ${} ({}-token prompt + {} output tokens at worst case)",
                r.what,
                r.cap.normalize(),
                left.normalize(),
                smallest.normalize(),
                need.prompt_tokens,
                need.floor
            );
            if r.waits {
                return Step::CapWait(Stop::new(r.reason, detail), ev);
            }
            return Step::Stop(Stop::new(r.reason, detail), ev);
        }
        let max_tokens = u32::try_from(desired).unwrap_or(need.max_tokens);
        let amount = need
            .price
            .worst_case(need.prompt_tokens, u64::from(max_tokens));
        if rooms.iter().any(|r| r.free < amount) {
            return Step::Wait;
        }
        for pool in p.chain_mut(team) {
            if pool.cap.is_some() {
                pool.reserved += amount;
            }
        }
        Step::Take { amount, max_tokens }
    }

    /// Reserves the worst case of a request in every pool over the task, shrinking
    /// max_tokens to what unspent money can pay for; waits while the money is held by
    /// requests in flight. Returns the reservation and the max_tokens it covers, or why
    /// the task must stop.
    pub async fn reserve(
        self: &Arc<Self>,
        need: &Need<'_>,
        log: &TaskLog,
    ) -> Result<(Reservation, u32), Stop> {
        let started = std::time::Instant::now();
        let mut waited = false;
        let mut poll = POLL_FIRST;
        let mut cap_wait = CapWait::default();
        let mut caps = self.store_caps(need.team);
        // A worker's slices size most requests without asking the store; anything but
        // a request that fits is decided again on the store's own figures.
        let mut fresh = false;
        let owner = self.slice_owner(need.team, need.variant);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let cached = if fresh {
                None
            } else {
                self.sliced_rooms(&mut caps, &owner)
            };
            let from_slices = cached.is_some();
            let stored = match cached {
                Some(rooms) => rooms,
                None => self
                    .store_rooms(&mut caps, &owner)
                    .await
                    .map_err(ledger_failed)?,
            };
            let step = self.decide(need, &stored);
            if from_slices && !matches!(step, Step::Take { .. }) {
                fresh = true;
                continue;
            }
            match step {
                Step::Stop(stop, ev) => {
                    log.emit(*ev);
                    return Err(stop);
                }
                Step::CapWait(stop, ev) => {
                    let nap = cap_wait.step(self.until, &need.cap_wait_since, log, stop, *ev)?;
                    tokio::time::sleep(nap).await;
                    // The period may have rolled over: its key is taken again.
                    caps = self.store_caps(need.team);
                    continue;
                }
                Step::Take { amount, max_tokens } => {
                    let team = need.team.map(|t| t.name.clone());
                    // Until the reservation is handed out, a cancelled or failed step
                    // gives the memory reservation back (nothing was sent).
                    let mut hold = Hold {
                        ledger: self,
                        team: team.clone(),
                        amount,
                        armed: true,
                    };
                    let Some((entries, sliced)) =
                        self.take_in_store(need, &caps, &owner, amount).await?
                    else {
                        // The caps have no room for it beyond what others hold (another
                        // process took the money first): look again.
                        drop(hold);
                        fresh = true;
                        tokio::time::sleep(poll).await;
                        poll = (poll * 2).min(POLL_MAX);
                        continue;
                    };
                    hold.armed = false;
                    cap_wait.granted(log);
                    let res = Reservation {
                        ledger: self.clone(),
                        team,
                        amount,
                        entries,
                        sliced,
                        task: need.task_id.to_string(),
                        open: true,
                    };
                    if waited {
                        log.emit(TranscriptEvent::BudgetGranted {
                            waited_ms: started.elapsed().as_millis() as u64,
                        });
                    }
                    return Ok((res, max_tokens));
                }
                Step::Wait => {
                    if !waited {
                        log.emit(TranscriptEvent::BudgetWait {
                            reason: "the money is held by requests in flight".to_string(),
                        });
                        waited = true;
                    }
                    if !caps.is_empty() {
                        // Other processes do not notify us: look again now and then.
                        tokio::select! {
                            _ = notified => {}
                            _ = tokio::time::sleep(poll) => poll = (poll * 2).min(POLL_MAX),
                        }
                    } else {
                        notified.await;
                    }
                }
            }
        }
    }

    /// Takes `amount` in the caps kept in the store: from this worker's slices of them,
    /// or as entries of its own. None when they have no room for it now.
    async fn take_in_store(
        &self,
        need: &Need<'_>,
        caps: &[StoreCap],
        owner: &str,
        amount: Decimal,
    ) -> Result<Option<(Vec<EntryId>, Vec<Taken>)>, Stop> {
        if caps.is_empty() {
            return Ok(Some((Vec::new(), Vec::new())));
        }
        if let Some(slices) = &self.slices {
            let keys: Vec<Want> = caps
                .iter()
                .map(|c| Want {
                    key: c.key(owner),
                    cap: c.cap,
                    period_cap: c.period_cap,
                })
                .collect();
            return match slices.take(&keys, amount).await {
                Ok(t) => Ok(t.map(|t| (Vec::new(), t))),
                Err(e) => Err(ledger_failed(e)),
            };
        }
        match self.take_stored(need, caps, amount).await {
            Ok(ids) => Ok(ids.map(|ids| (ids, Vec::new()))),
            Err(e) => Err(ledger_failed(e)),
        }
    }

    /// Records the reservation in every cap kept in the store, all or none, in one
    /// transaction. If this future is dropped while the store works, the worker gives
    /// the entries back itself, so a cancelled request never leaves money reserved there.
    async fn take_stored(
        &self,
        need: &Need<'_>,
        caps: &[StoreCap],
        amount: Decimal,
    ) -> Result<Option<Vec<EntryId>>, StoreError> {
        let Some(store) = self.store.clone() else {
            return Err(StoreError {
                path: None,
                detail: "a cap is kept in a ledger, and no ledger is open".into(),
            });
        };
        let now = Utc::now();
        let in_flight_for = self.holder.as_ref().map_or(need.in_flight_for, |h| h.lease);
        let meta = EntryMeta {
            run_id: self.run_id.clone(),
            task_id: need.task_id.to_string(),
            expires_at: now
                + chrono::Duration::from_std(in_flight_for).unwrap_or(chrono::Duration::hours(1)),
            holder: self.holder.as_ref().map(|h| h.id.clone()),
        };
        let caps = caps.to_vec();
        let (tx, rx) = oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let keys: Vec<CapKey<'_>> = caps
                .iter()
                .map(|c| CapKey {
                    team: &c.team,
                    period: &c.period,
                    cap: c.cap,
                })
                .collect();
            let result = store.reserve(&keys, amount, &meta);
            if let Err(Ok(Some(ids))) = tx.send(result) {
                let _ = store.finish(&ids, None);
            }
        });
        rx.await.map_err(|e| StoreError {
            path: None,
            detail: format!("ledger worker failed: {e}"),
        })?
    }

    /// Whether a task that has not started yet could pay for its smallest request
    /// (`smallest`, at worst case) from the unspent money of its pools; if not, the stop
    /// it is reported with. A period cap with `on_cap: wait` lets it start: its first
    /// request waits for the cap instead.
    pub async fn can_start(
        &self,
        team: Option<&TeamSpec>,
        variant: &str,
        smallest: Decimal,
    ) -> Option<Stop> {
        let mut caps = self.store_caps(team);
        let owner = self.slice_owner(team, variant);
        // A slice's figures may be a tick old (a cap raised since): a stop is decided
        // on the store's own.
        if let Some(rooms) = self.sliced_rooms(&mut caps, &owner) {
            self.start_stop(team, rooms, smallest)?;
        }
        let stored = match self.store_rooms(&mut caps, &owner).await {
            Ok(r) => r,
            Err(e) => return Some(ledger_failed(e)),
        };
        self.start_stop(team, stored, smallest)
    }

    /// The stop of a task whose smallest request (`smallest`) the unspent money of its
    /// rooms (`stored`, and the pools in memory) cannot pay for.
    fn start_stop(
        &self,
        team: Option<&TeamSpec>,
        stored: Vec<Room>,
        smallest: Decimal,
    ) -> Option<Stop> {
        let p = self.lock();
        let mut rooms = Self::memory_rooms(&p, team.map(|t| t.name.as_str()));
        rooms.extend(stored);
        rooms.into_iter().find(|r| r.unspent < smallest && !r.waits).map(|r| {
            Stop::new(
                r.reason,
                format!(
                    "not started: {} of ${} has ${} left, less than the task's smallest request (${})",
                    r.what,
                    r.cap.normalize(),
                    r.unspent.max(Decimal::ZERO).normalize(),
                    smallest.normalize()
                ),
            )
        })
    }

    /// Whose slices a task of `team` and `variant` spends from; empty (nothing made)
    /// when this process holds no slices, as every run but a shared one.
    fn slice_owner(&self, team: Option<&TeamSpec>, variant: &str) -> String {
        match self.slices {
            Some(_) => super::store::slice_task(team.map_or("", |t| t.name.as_str()), variant),
            None => String::new(),
        }
    }

    /// Writes what this worker's slices of the caps settled and gives back the rest
    /// (the run is over here: nothing is in flight).
    pub async fn close(&self) -> Result<(), StoreError> {
        match &self.slices {
            Some(s) => s.tick(true).await,
            None => Ok(()),
        }
    }

    /// Keeps this worker's reservations in the store in flight for another lease (its
    /// heartbeat calls this). Nothing to do for a process that holds none.
    pub async fn renew(&self) -> Result<u64, StoreError> {
        let (Some(h), Some(store)) = (self.holder.clone(), self.store.clone()) else {
            return Ok(0);
        };
        let until =
            Utc::now() + chrono::Duration::from_std(h.lease).unwrap_or(chrono::Duration::hours(1));
        tokio::task::spawn_blocking(move || store.renew(&h.id, until))
            .await
            .map_err(|e| StoreError {
                path: None,
                detail: format!("ledger worker failed: {e}"),
            })?
    }

    /// Replaces a reservation by the real cost of the request.
    pub async fn settle(&self, res: Reservation, actual: Decimal) -> Result<(), StoreError> {
        self.finish(res, Some(actual)).await
    }

    /// Gives a reservation back: the request was surely not billed.
    pub async fn release(&self, res: Reservation) -> Result<(), StoreError> {
        self.finish(res, None).await
    }

    fn finish_memory(&self, team: Option<&str>, amount: Decimal, actual: Option<Decimal>) {
        {
            let mut p = self.lock();
            for pool in p.chain_mut(team) {
                if pool.cap.is_some() {
                    pool.reserved -= amount;
                }
                pool.spent += actual.unwrap_or_default();
            }
        }
        self.changed.notify_waiters();
    }

    async fn finish(
        &self,
        mut res: Reservation,
        actual: Option<Decimal>,
    ) -> Result<(), StoreError> {
        res.open = false;
        self.finish_memory(res.team.as_deref(), res.amount, actual);
        if let Some(s) = &self.slices {
            s.finish(&res.sliced, res.amount, actual, &res.task);
        }
        let entries = std::mem::take(&mut res.entries);
        let (false, Some(store)) = (entries.is_empty(), self.store.clone()) else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || store.finish(&entries, actual))
            .await
            .map_err(|e| StoreError {
                path: None,
                detail: format!("ledger worker failed: {e}"),
            })?
    }
}

/// A memory reservation not yet handed out: given back if dropped while armed.
struct Hold<'a> {
    ledger: &'a Ledger,
    team: Option<String>,
    amount: Decimal,
    armed: bool,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.ledger
                .finish_memory(self.team.as_deref(), self.amount, None);
        }
    }
}
