//! Slices of caps (see [`super::CapStore::slices`]): what a change is, how the store decides
//! it (the same rule for every store), and the SQLite file's transaction.

use chrono::Utc;
use rusqlite::{params, OptionalExtension, TransactionBehavior};
use rust_decimal::Decimal;

use super::{
    dec, stored_sums, totals_in, ts, EntryId, EntryMeta, PeriodTotals, SqliteStore, StoreError,
};

/// A change to one process's slice of one cap, for [`super::CapStore::slices`]. A slice is a
/// reservation its holder spends from locally, request by request, telling the store
/// only now and then: what it spent (per task) and how much of the slice it may spend
/// before it tells the store again (`armed`). Should the holder die, the armed part
/// stays spent (it may have been billed) and the rest comes back when the lease ends.
#[derive(Debug, Clone)]
pub struct SliceChange {
    pub team: String,
    pub period: String,
    pub cap: Decimal,
    /// A team's period cap, which `agentbatch ledger set-cap` may have set in the store
    /// (that one is used, as it is now).
    pub period_cap: bool,
    /// The task id of its entry ([`slice_task`]).
    pub owner: String,
    /// Its entry, and the number of changes it has had as its holder knows it (a change
    /// to an entry changed since is refused); none for a new slice.
    pub id: Option<EntryId>,
    pub seq: i64,
    /// Spend that moves out of the slice into settled entries, per task (from its armed part).
    pub settled: Vec<(String, Decimal)>,
    /// The size wanted after the change, and the least that will do: the store grants
    /// as much between them as the cap has room for. A size of 0 ends the slice.
    pub size: Decimal,
    pub min_size: Decimal,
    /// How much of the slice may be spent before the next change (at most its size).
    pub armed: Decimal,
}

/// What a slice is after a change, and its cap's totals then.
#[derive(Debug, Clone)]
pub struct SliceGrant {
    /// None once the slice has ended.
    pub id: Option<EntryId>,
    pub seq: i64,
    pub size: Decimal,
    pub armed: Decimal,
    pub totals: PeriodTotals,
}

/// What the task id of a slice's entry starts with (its settled spend goes to entries
/// of their tasks).
pub const SLICE_TASK: &str = "(slice)";

/// The task id of the entry of a slice spent by tasks of `team` (empty: none) and
/// `variant`: what `collect` charges a dead worker's slice to.
pub fn slice_task(team: &str, variant: &str) -> String {
    format!("{SLICE_TASK}\u{1f}{team}\u{1f}{variant}")
}

/// The team and variant of a slice's task id; None for a task's own.
pub fn slice_of(task_id: &str) -> Option<(&str, &str)> {
    let rest = task_id.strip_prefix(SLICE_TASK)?.strip_prefix('\u{1f}')?;
    rest.split_once('\u{1f}')
}

/// A slice's entry as stored: what its holder reads back when it cannot know whether
/// its last change was made (the connection was lost while it was being committed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceState {
    pub id: EntryId,
    pub seq: i64,
    pub amount: Decimal,
    pub idle: Decimal,
}

/// A slice's entry before a change: its amount, idle part, whether its lease still
/// runs, and its number of changes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OldSlice {
    pub(crate) amount: Decimal,
    pub(crate) idle: Decimal,
    pub(crate) live: bool,
    pub(crate) seq: i64,
}

/// What a change is granted: the slice's size and armed part, and what it took from
/// the cap's room beyond what the slice kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) size: Decimal,
    pub(crate) armed: Decimal,
    pub(crate) growth: Decimal,
}

/// How one slice changes, decided from its entry as stored (`old`, the default for a
/// new one), its cap's totals `t`, and what earlier changes of the same transaction
/// took from the same cap (`grown`). None when the cap cannot give it `min_size`. A
/// slice whose lease ran out has given its idle part back: keeping more than its
/// armed part again needs room like a new reservation. Over a cap that was lowered
/// below what is reserved, a slice gets its least.
pub(crate) fn slice_grant(
    change: &SliceChange,
    old: OldSlice,
    t: &PeriodTotals,
    grown: Decimal,
) -> Result<Option<Granted>, String> {
    let OldSlice {
        amount,
        idle,
        live,
        seq,
    } = old;
    if let Some(id) = change.id.filter(|_| seq != change.seq) {
        return Err(format!(
            "slice {id} of {} {} was changed elsewhere (change {seq}, its holder knows {})",
            change.team, change.period, change.seq
        ));
    }
    let cap = match t.cap_set {
        Some(set) if change.period_cap => set,
        _ => change.cap,
    };
    let room = cap - t.settled - t.reserved - grown;
    let settled: Decimal = change.settled.iter().map(|(_, a)| *a).sum();
    if settled < Decimal::ZERO || change.size < Decimal::ZERO || change.armed < Decimal::ZERO {
        return Err(format!(
            "slice {:?} of {} {}: a negative amount (settled ${settled}, size ${}, armed ${})",
            change.id, change.team, change.period, change.size, change.armed
        ));
    }
    // A provider may bill more than a request's worst case (a prompt past its upper
    // bound): all of it is settled, out of the slice and beyond it if need be, as a
    // reservation settled above its amount is.
    let kept = (if live { amount } else { amount - idle } - settled).max(Decimal::ZERO);
    let size = if change.size <= kept {
        change.size
    } else if room > Decimal::ZERO {
        change.size.min(kept + room)
    } else {
        change.min_size
    };
    if size > kept + room.max(Decimal::ZERO) || size < change.min_size.min(change.size) {
        return Ok(None);
    }
    Ok(Some(Granted {
        size,
        armed: change.armed.min(size).max(Decimal::ZERO),
        growth: (size - kept).max(Decimal::ZERO),
    }))
}

/// The (team, period) key of a change, for what a transaction's changes took from a cap.
pub(crate) type CapOf = (String, String);

/// [`super::CapStore::slices`] on the SQLite file.
pub(super) fn sqlite_slices(
    store: &SqliteStore,
    changes: &[SliceChange],
    meta: &EntryMeta,
) -> Result<Option<Vec<SliceGrant>>, StoreError> {
    let mut bug = None;
    let out = store.with(|c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let now = Utc::now();
        let mut plans = Vec::with_capacity(changes.len());
        let mut grown: std::collections::HashMap<CapOf, Decimal> = Default::default();
        for ch in changes {
            let old = match ch.id {
                Some(id) => {
                    let row: Option<(String, String, String, i64)> = tx
                        .query_row(
                            "SELECT amount, idle, expires_at, seq FROM entries WHERE id = ?1 AND state = 'reserved'",
                            params![id],
                            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                        )
                        .optional()?;
                    let Some((amount, idle, expires, seq)) = row else {
                        bug = Some(format!("slice {id} of {} {} is not in the ledger", ch.team, ch.period));
                        return Ok(None);
                    };
                    OldSlice { amount: dec(amount)?, idle: dec(idle)?, live: expires > ts(now), seq }
                }
                None => OldSlice { live: true, ..OldSlice::default() },
            };
            let t = totals_in(&tx, &ch.team, &ch.period, &ts(now))?;
            let cap_of = (ch.team.clone(), ch.period.clone());
            let before = grown.get(&cap_of).copied().unwrap_or_default();
            match slice_grant(ch, old, &t, before) {
                Ok(Some(g)) => {
                    *grown.entry(cap_of).or_default() += g.growth;
                    plans.push((old, g));
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    bug = Some(e);
                    return Ok(None);
                }
            }
        }
        let mut grants = Vec::with_capacity(changes.len());
        for (ch, (old, g)) in changes.iter().zip(plans) {
            let moved: Decimal = ch.settled.iter().map(|(_, a)| *a).sum();
            for (task, a) in &ch.settled {
                tx.execute(
                    "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at, settled_at)
                     VALUES (?1, ?2, ?3, 'settled', ?4, ?5, ?6, ?6, ?6)",
                    params![ch.team, ch.period, a.normalize().to_string(), meta.run_id, task, ts(now)],
                )?;
            }
            let idle = (g.size - g.armed).normalize().to_string();
            let seq = old.seq + 1;
            let id = match (ch.id, g.size.is_zero()) {
                (Some(id), true) => {
                    tx.execute("DELETE FROM entries WHERE id = ?1", params![id])?;
                    None
                }
                (Some(id), false) => {
                    tx.execute(
                        "UPDATE entries SET amount = ?2, idle = ?3, expires_at = ?4, seq = ?5 WHERE id = ?1",
                        params![id, g.size.normalize().to_string(), idle, ts(meta.expires_at), seq],
                    )?;
                    Some(id)
                }
                (None, true) => None,
                (None, false) => {
                    tx.execute(
                        "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at, holder, idle, seq)
                         VALUES (?1, ?2, ?3, 'reserved', ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        params![ch.team, ch.period, g.size.normalize().to_string(), meta.run_id, ch.owner, ts(now), ts(meta.expires_at), meta.holder, idle, seq],
                    )?;
                    Some(tx.last_insert_rowid())
                }
            };
            let (settled, reserved) = stored_sums(&tx, &ch.team, &ch.period)?;
            tx.execute(
                "INSERT INTO totals (team, period, settled, reserved, cap) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (team, period) DO UPDATE SET settled = ?3, reserved = ?4, cap = ?5",
                params![
                    ch.team,
                    ch.period,
                    (settled + moved).normalize().to_string(),
                    (reserved + g.size - old.amount).normalize().to_string(),
                    ch.cap.to_string()
                ],
            )?;
            grants.push(SliceGrant {
                id,
                seq,
                size: g.size,
                armed: g.armed,
                totals: totals_in(&tx, &ch.team, &ch.period, &ts(now))?,
            });
        }
        tx.commit()?;
        Ok(Some(grants))
    })?;
    match bug {
        Some(detail) => Err(StoreError {
            path: Some(store.path.clone()),
            detail,
        }),
        None => Ok(out),
    }
}

/// [`super::CapStore::slice_state`] on the SQLite file.
pub(super) fn sqlite_slice_state(
    store: &SqliteStore,
    holder: &str,
    team: &str,
    period: &str,
    owner: &str,
) -> Result<Option<SliceState>, StoreError> {
    store.with(|c| {
        let row: Option<(i64, i64, String, String)> = c
            .query_row(
                "SELECT id, seq, amount, idle FROM entries
                 WHERE holder = ?1 AND team = ?2 AND period = ?3 AND task_id = ?4 AND state = 'reserved'
                 ORDER BY id DESC LIMIT 1",
                params![holder, team, period, owner],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()?;
        row.map(|(id, seq, amount, idle)| {
            Ok(SliceState {
                id,
                seq,
                amount: dec(amount)?,
                idle: dec(idle)?,
            })
        })
        .transpose()
    })
}
