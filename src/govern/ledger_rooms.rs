//! What each cap over a task can give a request (its room): the caps kept in the
//! store, read from it or from this worker's slices of them, and the pools in memory.

use chrono::Utc;
use rust_decimal::Decimal;

use super::super::pools::{Pool, Pools};
use super::super::slices::SliceKey;
use super::super::store::{period_key, PeriodTotals, StoreError};
use super::{period_name, Ledger};
use crate::job::TeamSpec;
use crate::vocab::stop::StopReason;

/// What one pool can give a request.
#[derive(Debug, Clone)]
pub(super) struct Room {
    /// For messages and events: `run`, `team:NAME`, `team:NAME:day:2026-11-29`.
    pub(super) label: String,
    pub(super) reason: StopReason,
    pub(super) what: String,
    pub(super) cap: Decimal,
    /// Cap minus settled spend (and stale reservations): what reserved money may return to.
    pub(super) unspent: Decimal,
    /// Unspent minus the reservations of requests in flight.
    pub(super) free: Decimal,
    /// A task this room cannot pay for waits for it (`on_cap: wait`).
    pub(super) waits: bool,
}

/// A cap kept in the store rather than in memory: a team's period cap, and, when the
/// run is shared by machines, the run's own pools (`max_cost_usd` of the run and of a
/// team within it), as entries of a pseudo-period `run:<run-id>`.
#[derive(Debug, Clone)]
pub(super) struct StoreCap {
    /// The store's team key (`(run)` for the run's own pool).
    pub(super) team: String,
    pub(super) period: String,
    pub(super) cap: Decimal,
    pub(super) label: String,
    pub(super) reason: StopReason,
    pub(super) what: String,
    /// A team's period cap (`agentbatch ledger set-cap` may have set it in the store).
    pub(super) period_cap: bool,
    /// `on_cap: wait`: a task it cannot pay for waits instead of stopping.
    pub(super) waits: bool,
}

impl StoreCap {
    pub(super) fn key(&self, owner: &str) -> SliceKey {
        SliceKey {
            team: self.team.clone(),
            period: self.period.clone(),
            owner: owner.to_string(),
        }
    }

    /// What the cap has room for, from its totals and this worker's slice of it: its
    /// settled spend not yet written is spent, and what the slice has spare is free to
    /// this worker. A cap set in the ledger replaces the job's (in `self` too).
    pub(super) fn room(
        &mut self,
        t: &PeriodTotals,
        local: Option<&super::super::slices::Local>,
    ) -> Room {
        if let Some(set) = t.cap_set.filter(|_| self.period_cap) {
            self.cap = set;
        }
        let (unwritten, spare) =
            local.map_or((Decimal::ZERO, Decimal::ZERO), |l| (l.unwritten, l.spare));
        Room {
            label: self.label.clone(),
            reason: self.reason,
            what: self.what.clone(),
            cap: self.cap,
            unspent: self.cap - t.settled - t.stale - unwritten,
            free: self.cap - t.settled - t.reserved + spare,
            waits: self.waits,
        }
    }
}

impl Ledger {
    /// The caps of a task of `team` kept in the store.
    pub(super) fn store_caps(&self, team: Option<&TeamSpec>) -> Vec<StoreCap> {
        let mut caps = Vec::new();
        if let Some(t) = team {
            if let Some(c) = &t.cap {
                let key = period_key(c.period, super::super::clock::period_now());
                caps.push(StoreCap {
                    team: t.name.clone(),
                    label: format!("team:{}:{key}", t.name),
                    what: format!("team {}'s {} cap ({key})", t.name, period_name(c.period)),
                    period: key,
                    cap: c.usd,
                    reason: StopReason::TeamBudget,
                    period_cap: true,
                    waits: c.on_cap == crate::vocab::limits::OnCap::Wait,
                });
            }
        }
        if let Some(s) = &self.shared {
            let period = format!("run:{}", self.run_id);
            if let Some(cap) = s.run {
                caps.push(StoreCap {
                    team: "(run)".into(),
                    period: period.clone(),
                    cap,
                    label: "run".into(),
                    reason: StopReason::RunBudget,
                    what: "the run's max_cost_usd (shared by its workers)".into(),
                    period_cap: false,
                    waits: false,
                });
            }
            if let Some((name, cap)) = team.and_then(|t| s.teams.get_key_value(&t.name)) {
                caps.push(StoreCap {
                    team: name.clone(),
                    period,
                    cap: *cap,
                    label: format!("team:{name}"),
                    reason: StopReason::TeamBudget,
                    what: format!("team {name}'s max_cost_usd (shared by the run's workers)"),
                    period_cap: false,
                    waits: false,
                });
            }
        }
        caps
    }

    /// The rooms of `caps` from this worker's slices of them, without asking the store:
    /// None unless it holds a slice of each.
    pub(super) fn sliced_rooms(&self, caps: &mut [StoreCap], owner: &str) -> Option<Vec<Room>> {
        let slices = self.slices.as_ref()?;
        let mut rooms = Vec::with_capacity(caps.len());
        for c in caps.iter_mut() {
            let local = slices.local(&c.key(owner))?;
            rooms.push(c.room(&local.totals, Some(&local)));
        }
        Some(rooms)
    }

    /// The rooms of `caps`, from the store; a period cap set in the ledger
    /// (`agentbatch ledger set-cap`) replaces the job's, in `caps` too.
    pub(super) async fn store_rooms(
        &self,
        caps: &mut [StoreCap],
        owner: &str,
    ) -> Result<Vec<Room>, StoreError> {
        let mut rooms = Vec::with_capacity(caps.len());
        for c in caps.iter_mut() {
            let Some(store) = self.store.clone() else {
                return Err(StoreError {
                    path: None,
                    detail: format!("{} is kept in a ledger, and no ledger is open", c.what),
                });
            };
            let (name, key) = (c.team.clone(), c.period.clone());
            let t: PeriodTotals =
                tokio::task::spawn_blocking(move || store.totals(&name, &key, Utc::now()))
                    .await
                    .map_err(|e| StoreError {
                        path: None,
                        detail: format!("ledger worker failed: {e}"),
                    })??;
            let local = self.slices.as_ref().and_then(|s| s.local(&c.key(owner)));
            rooms.push(c.room(&t, local.as_ref()));
        }
        Ok(rooms)
    }

    pub(super) fn memory_rooms(p: &Pools, team: Option<&str>) -> Vec<Room> {
        let mut rooms = Vec::new();
        let mut add = |label: String, reason, what: String, pool: &Pool| {
            if let Some(cap) = pool.cap {
                rooms.push(Room {
                    label,
                    reason,
                    what,
                    cap,
                    unspent: cap - pool.spent,
                    free: cap - pool.spent - pool.reserved,
                    waits: false,
                });
            }
        };
        add(
            "run".into(),
            StopReason::RunBudget,
            "the run's max_cost_usd".into(),
            &p.run,
        );
        if let Some((name, pool)) = team.and_then(|t| p.teams.get_key_value(t)) {
            add(
                format!("team:{name}"),
                StopReason::TeamBudget,
                format!("team {name}'s max_cost_usd"),
                pool,
            );
        }
        rooms
    }
}
