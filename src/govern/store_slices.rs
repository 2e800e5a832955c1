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
    /// The task id of its entry ([`slice_task`]).
    pub owner: String,
    /// Its entry; none for a new slice.
    pub id: Option<EntryId>,
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

/// How one slice changes, decided from its entry as stored. `old` is its amount,
/// idle part and whether its lease still runs; `room` is what its cap has free
/// (cap - settled - reserved, this slice's live part included in reserved).
/// Returns the size and armed part granted, or None when the cap cannot give it
/// `min_size`. A slice whose lease ran out has given its idle part back: keeping
/// more than its armed part again needs room like a new reservation.
pub(crate) fn slice_grant(
    change: &SliceChange,
    old: (Decimal, Decimal, bool),
    room: Decimal,
) -> Result<Option<(Decimal, Decimal)>, String> {
    let (amount, idle, live) = old;
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
    let granted = if change.size <= kept {
        change.size
    } else {
        let g = change.size.min(kept + room.max(Decimal::ZERO));
        if g < change.min_size {
            return Ok(None);
        }
        g
    };
    Ok(Some((
        granted,
        change.armed.min(granted).max(Decimal::ZERO),
    )))
}

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
        for ch in changes {
            let old = match ch.id {
                Some(id) => {
                    let row: Option<(String, String, String)> = tx
                        .query_row(
                            "SELECT amount, idle, expires_at FROM entries WHERE id = ?1 AND state = 'reserved'",
                            params![id],
                            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                        )
                        .optional()?;
                    let Some((amount, idle, expires)) = row else {
                        bug = Some(format!("slice {id} of {} {} is not in the ledger", ch.team, ch.period));
                        return Ok(None);
                    };
                    (dec(amount)?, dec(idle)?, expires > ts(now))
                }
                None => (Decimal::ZERO, Decimal::ZERO, true),
            };
            let t = totals_in(&tx, &ch.team, &ch.period, &ts(now))?;
            match slice_grant(ch, old, ch.cap - t.settled - t.reserved) {
                Ok(Some(g)) => plans.push((old.0, g)),
                Ok(None) => return Ok(None),
                Err(e) => {
                    bug = Some(e);
                    return Ok(None);
                }
            }
        }
        let mut grants = Vec::with_capacity(changes.len());
        for (ch, (old_amount, (size, armed))) in changes.iter().zip(plans) {
            let moved: Decimal = ch.settled.iter().map(|(_, a)| *a).sum();
            for (task, a) in &ch.settled {
                tx.execute(
                    "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at, settled_at)
                     VALUES (?1, ?2, ?3, 'settled', ?4, ?5, ?6, ?6, ?6)",
                    params![ch.team, ch.period, a.normalize().to_string(), meta.run_id, task, ts(now)],
                )?;
            }
            let id = match (ch.id, size.is_zero()) {
                (Some(id), true) => {
                    tx.execute("DELETE FROM entries WHERE id = ?1", params![id])?;
                    None
                }
                (Some(id), false) => {
                    tx.execute(
                        "UPDATE entries SET amount = ?2, idle = ?3, expires_at = ?4 WHERE id = ?1",
                        params![id, size.normalize().to_string(), (size - armed).normalize().to_string(), ts(meta.expires_at)],
                    )?;
                    Some(id)
                }
                (None, true) => None,
                (None, false) => {
                    tx.execute(
                        "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at, holder, idle)
                         VALUES (?1, ?2, ?3, 'reserved', ?4, ?5, ?6, ?7, ?8, ?9)",
                        params![ch.team, ch.period, size.normalize().to_string(), meta.run_id, ch.owner, ts(now), ts(meta.expires_at), meta.holder, (size - armed).normalize().to_string()],
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
                    (reserved + size - old_amount).normalize().to_string(),
                    ch.cap.to_string()
                ],
            )?;
            grants.push(SliceGrant {
                id,
                size,
                armed,
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
