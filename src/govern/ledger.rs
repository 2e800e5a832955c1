//! The ledger owns all shared money: the run's pool, each team's pool for this run, and
//! (through a [`CapStore`]) each team's period cap across runs. Before a request, the
//! worst case is reserved in every pool above the task at once, after shrinking
//! max_tokens to what they can all cover; after it, the reservation is settled with the
//! real cost, released if the request was surely not billed, or kept whole if it may
//! have been. Because reservations are taken before sending and under one lock, no
//! amount of concurrency can push a pool past its cap.
//!
//! A request that does not fit waits while the money it needs is merely reserved by
//! requests in flight; it stops (`team_budget`, `run_budget`) only once settled spend
//! alone leaves too little for its smallest allowed request. From then on the pool is
//! exhausted and no new task of it starts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use rust_decimal::Decimal;
use serde_json::json;
use tokio::sync::Notify;

use super::pricing::Price;
use super::store::{period_key, CapStore, EntryId, EntryMeta, StoreError};
use crate::agent::stop::{Stop, StopReason};
use crate::job::{Plan, TeamSpec};
use crate::report::TaskLog;

/// How often a request waiting on another process's reservations looks again.
const STORE_POLL: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct Pool {
    cap: Option<Decimal>,
    spent: Decimal,
    reserved: Decimal,
    /// Set once a request stopped because settled spend left too little.
    exhausted: bool,
}

impl Pool {
    fn left(&self) -> Option<Decimal> {
        self.cap
            .map(|c| (c - self.spent - self.reserved).max(Decimal::ZERO))
    }
}

#[derive(Debug)]
struct Pools {
    run: Pool,
    teams: HashMap<String, Pool>,
}

/// A reservation held for one request.
#[derive(Debug)]
pub struct Reservation {
    team: Option<String>,
    /// In the run and team pools of this process.
    amount: Decimal,
    /// In the persistent store, when the team has a period cap.
    entry: Option<EntryId>,
}

impl Reservation {
    /// The worst case reserved.
    pub fn usd(&self) -> Decimal {
        self.amount
    }
}

/// What a request needs from the ledger.
pub struct Need<'a> {
    pub task_id: &'a str,
    pub team: Option<&'a TeamSpec>,
    pub price: &'a Price,
    pub prompt_tokens: u64,
    /// The most the task's own budgets allow.
    pub max_tokens: u32,
    /// The least worth sending.
    pub floor: u32,
    /// How long the request may be in flight (for stale-reservation detection).
    pub in_flight_for: Duration,
}

/// The money of a run.
pub struct Ledger {
    pools: Mutex<Pools>,
    changed: Notify,
    store: Option<Arc<dyn CapStore>>,
    run_id: String,
}

enum Step {
    Granted { amount: Decimal, max_tokens: u32 },
    Wait,
    Stop(Stop, serde_json::Value),
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
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pools> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a pool over `team` is used up; tasks of it are not started then.
    pub fn exhausted(&self, team: Option<&str>) -> Option<StopReason> {
        let p = self.lock();
        if p.run.exhausted {
            return Some(StopReason::RunBudget);
        }
        team.and_then(|t| p.teams.get(t))
            .filter(|t| t.exhausted)
            .map(|_| StopReason::TeamBudget)
    }

    /// Whether any pool applies to a task of `team` (if none, no reservation is needed).
    pub fn governs(&self, team: Option<&TeamSpec>) -> bool {
        let p = self.lock();
        p.run.cap.is_some() || team.is_some_and(|t| t.max_cost_usd.is_some() || t.cap.is_some())
    }

    /// Spent so far (settled plus charged), by the run and by each team.
    pub fn spent(&self) -> (Decimal, HashMap<String, Decimal>) {
        let p = self.lock();
        (
            p.run.spent,
            p.teams.iter().map(|(k, v)| (k.clone(), v.spent)).collect(),
        )
    }

    /// Reserves the worst case of a request in every pool over the task, shrinking
    /// max_tokens to fit; waits while the money is held by requests in flight. Returns
    /// the reservation and the max_tokens it covers, or why the task must stop.
    pub async fn reserve(
        &self,
        need: &Need<'_>,
        log: &TaskLog,
    ) -> Result<(Reservation, u32), Stop> {
        let mut waited = false;
        let started = std::time::Instant::now();
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let step = self.try_memory(need);
            let (amount, max_tokens) = match step {
                Step::Granted { amount, max_tokens } => (amount, max_tokens),
                Step::Stop(stop, ev) => {
                    log.emit("budget_stop", ev);
                    return Err(stop);
                }
                Step::Wait => {
                    if !waited {
                        log.emit(
                            "budget_wait",
                            json!({"reason": "money held by requests in flight"}),
                        );
                        waited = true;
                    }
                    notified.await;
                    continue;
                }
            };
            // Held in memory; give it back if anything below fails or is cancelled.
            let mut hold = Hold {
                ledger: self,
                team: need.team.map(|t| t.name.clone()),
                amount,
                armed: true,
            };
            let period = match need.team.and_then(|t| t.cap.as_ref().map(|c| (t, c))) {
                None => None,
                Some((team, cap)) => {
                    match self
                        .reserve_period(need, team, cap.usd, cap.period, amount, max_tokens)
                        .await
                    {
                        Ok(PeriodStep::Granted {
                            entry,
                            amount: a,
                            max_tokens: m,
                        }) => Some((entry, a, m)),
                        Ok(PeriodStep::Wait) => {
                            drop(hold);
                            if !waited {
                                log.emit(
                                    "budget_wait",
                                    json!({"reason": "team period cap held by requests in flight"}),
                                );
                                waited = true;
                            }
                            tokio::time::sleep(STORE_POLL).await;
                            continue;
                        }
                        Ok(PeriodStep::Stop(stop, ev)) => {
                            drop(hold);
                            log.emit("budget_stop", ev);
                            return Err(stop);
                        }
                        Err(e) => {
                            drop(hold);
                            return Err(Stop::new(
                            StopReason::Cancelled,
                            format!("{e}: the team's period cap cannot be enforced, so the task stops"),
                        ));
                        }
                    }
                }
            };
            let (entry, amount, max_tokens) = match period {
                Some((entry, a, m)) => {
                    // The period cap may have shrunk the request further.
                    hold.shrink(a);
                    (Some(entry), a, m)
                }
                None => (None, amount, max_tokens),
            };
            hold.armed = false;
            if waited {
                log.emit(
                    "budget_granted",
                    json!({"waited_ms": started.elapsed().as_millis() as u64}),
                );
            }
            let res = Reservation {
                team: need.team.map(|t| t.name.clone()),
                amount,
                entry,
            };
            return Ok((res, max_tokens));
        }
    }

    /// The in-memory pools (run, team): reserve, wait, or stop.
    fn try_memory(&self, need: &Need<'_>) -> Step {
        let mut p = self.lock();
        let team = need.team.map(|t| t.name.as_str());
        let smallest = need
            .price
            .worst_case(need.prompt_tokens, u64::from(need.floor));
        let mut max_tokens = u64::from(need.max_tokens);
        let pools = p.pool_names(team);
        // Each request is judged on its own, even in a pool marked exhausted: a smaller
        // request may still fit (the mark only keeps new tasks from starting).
        for name in &pools {
            let pool = p.get(name);
            let Some(left) = pool.left() else { continue };
            max_tokens = max_tokens.min(need.price.affordable_output(left, need.prompt_tokens));
        }
        if max_tokens >= u64::from(need.floor) {
            let max_tokens = u32::try_from(max_tokens).unwrap_or(need.max_tokens);
            let amount = need
                .price
                .worst_case(need.prompt_tokens, u64::from(max_tokens));
            for name in &pools {
                let pool = p.get_mut(name);
                if pool.cap.is_some() {
                    pool.reserved += amount;
                }
            }
            return Step::Granted { amount, max_tokens };
        }
        // Too little is free. If settled spend alone leaves enough, the rest is held by
        // requests in flight: wait for them. Otherwise this pool is used up.
        for name in &pools {
            let pool = p.get_mut(name);
            let Some(cap) = pool.cap else { continue };
            let unspent = cap - pool.spent;
            if unspent < smallest {
                pool.exhausted = true;
                let ev = json!({
                    "pool": name, "cap_usd": cap.normalize().to_string(),
                    "spent_usd": pool.spent.normalize().to_string(),
                    "left_usd": unspent.max(Decimal::ZERO).normalize().to_string(),
                    "reserved_by_others_usd": pool.reserved.normalize().to_string(),
                    "smallest_request_usd": smallest.normalize().to_string(),
                });
                let detail = format!(
                    "{} of ${}: ${} left cannot pay for the smallest request, ${} ({}-token prompt + {} output tokens at worst case)",
                    describe(name),
                    cap.normalize(),
                    unspent.max(Decimal::ZERO).normalize(),
                    smallest.normalize(),
                    need.prompt_tokens,
                    need.floor
                );
                return Step::Stop(Stop::new(reason(name), detail), ev);
            }
        }
        Step::Wait
    }

    async fn reserve_period(
        &self,
        need: &Need<'_>,
        team: &TeamSpec,
        cap: Decimal,
        period: crate::job::schema::Period,
        amount: Decimal,
        max_tokens: u32,
    ) -> Result<PeriodStep, StoreError> {
        let Some(store) = self.store.clone() else {
            return Err(StoreError {
                path: Default::default(),
                detail: format!("team {} has a period cap but no ledger is open", team.name),
            });
        };
        let now = Utc::now();
        let key = period_key(period, now);
        let name = team.name.clone();
        let price = need.price.clone();
        let (prompt, floor) = (need.prompt_tokens, need.floor);
        let meta = EntryMeta {
            run_id: self.run_id.clone(),
            task_id: need.task_id.to_string(),
            expires_at: now
                + chrono::Duration::from_std(need.in_flight_for)
                    .unwrap_or(chrono::Duration::hours(1)),
        };
        let blocking = tokio::task::spawn_blocking(move || -> Result<PeriodStep, StoreError> {
            let t = store.totals(&name, &key, Utc::now())?;
            let free = (cap - t.settled - t.reserved).max(Decimal::ZERO);
            let fits = u64::from(max_tokens).min(price.affordable_output(free, prompt));
            if fits >= u64::from(floor) {
                let m = u32::try_from(fits).unwrap_or(max_tokens);
                let a = price.worst_case(prompt, u64::from(m)).min(amount);
                return Ok(match store.try_reserve(&name, &key, cap, a, &meta)? {
                    Some(entry) => PeriodStep::Granted { entry, amount: a, max_tokens: m },
                    // Another process got there first: look again.
                    None => PeriodStep::Wait,
                });
            }
            let smallest = price.worst_case(prompt, u64::from(floor));
            // Stale reservations (their process died) never come back.
            let could_free = cap - t.settled - t.stale;
            if could_free >= smallest {
                return Ok(PeriodStep::Wait);
            }
            let ev = json!({
                "pool": format!("team:{name}:{key}"), "cap_usd": cap.normalize().to_string(),
                "spent_usd": (t.settled + t.stale).normalize().to_string(),
                "reserved_by_others_usd": (t.reserved - t.stale).normalize().to_string(),
                "smallest_request_usd": smallest.normalize().to_string(),
            });
            let detail = format!(
                "team {name}'s {} cap of ${} ({key}): ${} left cannot pay for the smallest request, ${}",
                match period {
                    crate::job::schema::Period::Day => "daily",
                    crate::job::schema::Period::Week => "weekly",
                    crate::job::schema::Period::Month => "monthly",
                },
                cap.normalize(),
                could_free.max(Decimal::ZERO).normalize(),
                smallest.normalize()
            );
            Ok(PeriodStep::Stop(Stop::new(StopReason::TeamBudget, detail), ev))
        })
        .await
        .map_err(|e| StoreError { path: Default::default(), detail: format!("ledger worker failed: {e}") })??;
        if let PeriodStep::Stop(..) = blocking {
            if let Some(pool) = self.lock().teams.get_mut(&team.name) {
                pool.exhausted = true;
            }
        }
        Ok(blocking)
    }

    /// Replaces a reservation by the real cost of the request.
    pub async fn settle(&self, res: Reservation, actual: Decimal) -> Result<(), StoreError> {
        self.finish(res, Some(actual)).await
    }

    /// Gives a reservation back: the request was surely not billed.
    pub async fn release(&self, res: Reservation) -> Result<(), StoreError> {
        self.finish(res, None).await
    }

    async fn finish(&self, res: Reservation, actual: Option<Decimal>) -> Result<(), StoreError> {
        {
            let mut p = self.lock();
            let pools = p.pool_names(res.team.as_deref());
            for name in &pools {
                let pool = p.get_mut(name);
                if pool.cap.is_some() {
                    pool.reserved -= res.amount;
                }
                pool.spent += actual.unwrap_or_default();
            }
        }
        self.changed.notify_waiters();
        let (Some(id), Some(store)) = (res.entry, self.store.clone()) else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || match actual {
            Some(a) => store.settle(id, a),
            None => store.release(id),
        })
        .await
        .map_err(|e| StoreError {
            path: Default::default(),
            detail: format!("ledger worker failed: {e}"),
        })?
    }
}

enum PeriodStep {
    Granted {
        entry: EntryId,
        amount: Decimal,
        max_tokens: u32,
    },
    Wait,
    Stop(Stop, serde_json::Value),
}

/// Gives back an in-memory reservation unless disarmed, so a cancelled or failed
/// reservation never leaves money held.
struct Hold<'a> {
    ledger: &'a Ledger,
    team: Option<String>,
    amount: Decimal,
    armed: bool,
}

impl Hold<'_> {
    fn shrink(&mut self, to: Decimal) {
        let less = self.amount - to;
        if less > Decimal::ZERO {
            let mut p = self.ledger.lock();
            for name in p.pool_names(self.team.as_deref()) {
                let pool = p.get_mut(&name);
                if pool.cap.is_some() {
                    pool.reserved -= less;
                }
            }
            self.amount = to;
            drop(p);
            self.ledger.changed.notify_waiters();
        }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut p = self.ledger.lock();
            for name in p.pool_names(self.team.as_deref()) {
                let pool = p.get_mut(&name);
                if pool.cap.is_some() {
                    pool.reserved -= self.amount;
                }
            }
            drop(p);
            self.ledger.changed.notify_waiters();
        }
    }
}

const RUN: &str = "run";

impl Pools {
    fn pool_names(&self, team: Option<&str>) -> Vec<String> {
        let mut v = vec![RUN.to_string()];
        if let Some(t) = team.filter(|t| self.teams.contains_key(*t)) {
            v.push(format!("team:{t}"));
        }
        v
    }

    fn get(&self, name: &str) -> &Pool {
        match name.strip_prefix("team:") {
            Some(t) => self.teams.get(t).unwrap_or(&self.run),
            None => &self.run,
        }
    }

    fn get_mut(&mut self, name: &str) -> &mut Pool {
        match name.strip_prefix("team:") {
            Some(t) if self.teams.contains_key(t) => self.teams.get_mut(t).unwrap_or(&mut self.run),
            _ => &mut self.run,
        }
    }
}

fn reason(pool: &str) -> StopReason {
    if pool.starts_with("team:") {
        StopReason::TeamBudget
    } else {
        StopReason::RunBudget
    }
}

fn describe(pool: &str) -> String {
    match pool.strip_prefix("team:") {
        Some(t) => format!("team {t}'s max_cost_usd"),
        None => "the run's max_cost_usd".to_string(),
    }
}
