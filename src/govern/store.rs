//! The persistent ledger of team period caps (`teams.<name>.cap`): every reservation
//! and settlement is written before the request goes out or the answer is counted, so
//! spend survives a crash and is shared by concurrent runs. [`CapStore`] is the seam a
//! server database can fill for runs spread over several machines; [`SqliteStore`] is
//! the embedded default.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Datelike, SecondsFormat, Utc};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use rust_decimal::Decimal;
use serde::Serialize;

use crate::vocab::limits::Period;

/// A ledger entry's id.
pub type EntryId = i64;

/// Why the persistent ledger could not be used.
#[derive(Debug, thiserror::Error)]
#[error("the team ledger{}: {detail}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
pub struct StoreError {
    pub path: Option<PathBuf>,
    pub detail: String,
}

/// A team's totals for one period.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PeriodTotals {
    pub settled: Decimal,
    /// Reservations not settled yet, in flight or left by a process that died.
    pub reserved: Decimal,
    /// The part of `reserved` whose request should have ended long ago: its process
    /// died. Still counted as spent (it may have been billed), but nobody waits for it.
    pub stale: Decimal,
    /// The team's cap as `agentbatch ledger set-cap` set it in the ledger, which every
    /// run on the ledger uses in place of its job's `cap.usd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cap_set: Option<Decimal>,
}

/// Who a reservation is for, and until when it may be considered in flight.
#[derive(Debug, Clone)]
pub struct EntryMeta {
    pub run_id: String,
    pub task_id: String,
    pub expires_at: DateTime<Utc>,
    /// The process that holds it while it is in flight, when that process renews its
    /// reservations (a worker of a shared run, at each heartbeat): once it stops
    /// renewing them, they are stale within a lease, not at the task's deadline.
    pub holder: Option<String>,
}

/// What a run was charged for one task in one cap (team and period), settled and still
/// open (in flight, or left by a process that died).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCharge {
    pub task_id: String,
    pub team: String,
    pub period: String,
    pub settled: Decimal,
    pub open: Decimal,
}

/// One line of `agentbatch ledger`.
#[derive(Debug, Clone, Serialize)]
pub struct PeriodRow {
    pub team: String,
    pub period: String,
    pub cap: Option<Decimal>,
    pub totals: PeriodTotals,
    pub entries: u64,
}

/// One cap a reservation is recorded in: a team's period (or a shared run's pool).
#[derive(Debug, Clone, Copy)]
pub struct CapKey<'a> {
    pub team: &'a str,
    pub period: &'a str,
    pub cap: Decimal,
}

/// Storage of period caps. A request's reservation goes into every cap over it in one
/// transaction, and is settled or dropped in all of them in one: a process killed at
/// any moment leaves the caps agreeing on what each request holds (two transactions
/// left a kill between them an entry in one cap and none in the other). Implementations
/// must make `reserve` atomic across every process that shares the store.
pub trait CapStore: Send + Sync {
    fn totals(
        &self,
        team: &str,
        period: &str,
        now: DateTime<Utc>,
    ) -> Result<PeriodTotals, StoreError>;
    /// Records a reservation of `amount` in every cap of `caps` (their entries, in that
    /// order) if each one's settled + reserved + amount <= its cap; else in none.
    fn reserve(
        &self,
        caps: &[CapKey<'_>],
        amount: Decimal,
        meta: &EntryMeta,
    ) -> Result<Option<Vec<EntryId>>, StoreError>;
    /// Replaces reservations by what was really spent (`Some`), or drops them, when the
    /// request was never billed (`None`). Entries already settled are left alone.
    fn finish(&self, ids: &[EntryId], actual: Option<Decimal>) -> Result<(), StoreError>;
    /// [`CapStore::reserve`] in one cap.
    fn try_reserve(
        &self,
        team: &str,
        period: &str,
        cap: Decimal,
        amount: Decimal,
        meta: &EntryMeta,
    ) -> Result<Option<EntryId>, StoreError> {
        let key = CapKey { team, period, cap };
        Ok(self
            .reserve(&[key], amount, meta)?
            .and_then(|ids| ids.first().copied()))
    }
    /// Replaces a reservation by what was really spent.
    fn settle(&self, id: EntryId, actual: Decimal) -> Result<(), StoreError> {
        self.finish(&[id], Some(actual))
    }
    /// Drops a reservation whose request was never billed.
    fn release(&self, id: EntryId) -> Result<(), StoreError> {
        self.finish(&[id], None)
    }
    /// Marks every reservation still open for `run_id` as stale now: its process is
    /// known dead (a resume holds the run folder's lock), so nobody may wait for it to
    /// settle; it stays spent, since the provider may have billed it. Returns the
    /// amount so marked.
    fn abandon_run(&self, run_id: &str, now: DateTime<Utc>) -> Result<Decimal, StoreError>;
    /// Keeps every open reservation of `holder` in flight until `until`: the holder is
    /// alive (a worker's heartbeat). Returns how many it renewed.
    fn renew(&self, holder: &str, until: DateTime<Utc>) -> Result<u64, StoreError>;
    /// Everything run `run_id` was charged, per task and cap: what `collect` counts a
    /// dead worker's spend from.
    fn run_charges(&self, run_id: &str) -> Result<Vec<TaskCharge>, StoreError>;
    fn report(&self, team: Option<&str>, now: DateTime<Utc>) -> Result<Vec<PeriodRow>, StoreError>;
    /// Sets team `team`'s period cap to `usd` for every run on this ledger, from now
    /// on (in place of what their job files say).
    fn set_cap(&self, team: &str, usd: Decimal, now: DateTime<Utc>) -> Result<(), StoreError>;
    /// Changes slices (see [`SliceChange`]) of `meta.holder`, all or none, in one
    /// transaction, and renews their leases to `meta.expires_at`. None when a cap has
    /// no room for a slice's `min_size` (nothing changed).
    fn slices(
        &self,
        changes: &[SliceChange],
        meta: &EntryMeta,
    ) -> Result<Option<Vec<SliceGrant>>, StoreError>;
    /// The slice entry of `holder` for a cap and owner, as stored (None when it has
    /// none): how a holder learns whether a change it could not confirm was made.
    fn slice_state(
        &self,
        holder: &str,
        team: &str,
        period: &str,
        owner: &str,
    ) -> Result<Option<SliceState>, StoreError>;
}

/// The period a moment falls in, as stored: `day:2026-11-29`, `week:2026-W48`,
/// `month:2026-11` (UTC; ISO weeks start on Monday).
pub fn period_key(period: Period, at: DateTime<Utc>) -> String {
    match period {
        Period::Day => format!("day:{}", at.format("%Y-%m-%d")),
        Period::Week => {
            let w = at.iso_week();
            format!("week:{}-W{:02}", w.year(), w.week())
        }
        Period::Month => format!("month:{}", at.format("%Y-%m")),
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The embedded ledger: one SQLite file (WAL, so readers never block the writer; each
/// change is one IMMEDIATE transaction, so concurrent processes serialize on it).
pub struct SqliteStore {
    path: PathBuf,
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    team TEXT NOT NULL,
    period TEXT NOT NULL,
    amount TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'settled')),
    run_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    settled_at TEXT,
    holder TEXT,
    idle TEXT NOT NULL DEFAULT '0',
    seq INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_by_state ON entries (team, period, state);
CREATE TABLE IF NOT EXISTS totals (
    team TEXT NOT NULL,
    period TEXT NOT NULL,
    settled TEXT NOT NULL,
    reserved TEXT NOT NULL,
    cap TEXT,
    PRIMARY KEY (team, period)
);
CREATE TABLE IF NOT EXISTS caps (
    team TEXT PRIMARY KEY,
    usd TEXT NOT NULL,
    set_at TEXT NOT NULL
);
";

impl SqliteStore {
    /// Opens (creating if needed) the ledger file.
    pub fn open(path: &Path) -> Result<SqliteStore, StoreError> {
        let err = |e: &dyn std::fmt::Display| StoreError {
            path: Some(path.to_path_buf()),
            detail: e.to_string(),
        };
        if let Some(problem) = crate::job::source::not_a_ledger_file(path) {
            return Err(err(&problem));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        }
        let conn = Connection::open(path).map_err(|e| err(&e))?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(|e| err(&e))?;
        // Switching to WAL and creating the schema do not always wait on SQLite's busy
        // handler when several processes open a new file at once: retry them.
        let mut delay = Duration::from_millis(10);
        let started = std::time::Instant::now();
        loop {
            match Self::prepare(&conn) {
                Ok(()) => break,
                Err(e) if is_busy(&e) && started.elapsed() < Duration::from_secs(30) => {
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(err(&e)),
            }
        }
        Ok(SqliteStore {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn prepare(conn: &Connection) -> rusqlite::Result<()> {
        // WAL with synchronous=NORMAL survives a killed process (only a power cut can
        // lose the last transactions).
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        let made = conn.execute_batch(SCHEMA).and_then(|()| {
            // A file made before a column existed gets it (in the same transaction:
            // two processes opening an old file both look first): reservations'
            // holders, slices' idle parts, and the numbering of slices' changes.
            for (column, kind) in [
                ("holder", "TEXT"),
                ("idle", "TEXT NOT NULL DEFAULT '0'"),
                ("seq", "INTEGER NOT NULL DEFAULT 0"),
            ] {
                let has = conn
                    .prepare("SELECT 1 FROM pragma_table_info('entries') WHERE name = ?1")?
                    .exists([column])?;
                if !has {
                    conn.execute_batch(&format!("ALTER TABLE entries ADD COLUMN {column} {kind}"))?;
                }
            }
            conn.execute_batch("COMMIT")
        });
        made.inspect_err(|_| {
            let _ = conn.execute_batch("ROLLBACK");
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut conn).map_err(|e| StoreError {
            path: Some(self.path.clone()),
            detail: e.to_string(),
        })
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn dec(s: String) -> rusqlite::Result<Decimal> {
    Decimal::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn totals_in(
    tx: &Connection,
    team: &str,
    period: &str,
    now: &str,
) -> rusqlite::Result<PeriodTotals> {
    let row: Option<(String, String)> = tx
        .query_row(
            "SELECT settled, reserved FROM totals WHERE team = ?1 AND period = ?2",
            params![team, period],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    let (settled, reserved) = match row {
        Some((s, r)) => (dec(s)?, dec(r)?),
        None => (Decimal::ZERO, Decimal::ZERO),
    };
    let mut stmt = tx.prepare(
        "SELECT amount, idle FROM entries WHERE team = ?1 AND period = ?2 AND state = 'reserved' AND expires_at <= ?3",
    )?;
    // A stale slice's idle part has come back: it is neither spent nor reserved.
    let (mut stale, mut returned) = (Decimal::ZERO, Decimal::ZERO);
    for row in stmt.query_map(params![team, period, now], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
    })? {
        let (amount, idle) = row?;
        let (amount, idle) = (dec(amount)?, dec(idle)?);
        stale += amount - idle;
        returned += idle;
    }
    let cap_set: Option<String> = tx
        .query_row("SELECT usd FROM caps WHERE team = ?1", params![team], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(PeriodTotals {
        settled,
        reserved: (reserved - returned).normalize(),
        stale: stale.normalize(),
        cap_set: cap_set.map(dec).transpose()?,
    })
}

/// The running sums of a team's period, as stored (expired slices' idle parts in
/// `reserved` too).
fn stored_sums(tx: &Connection, team: &str, period: &str) -> rusqlite::Result<(Decimal, Decimal)> {
    let row: Option<(String, String)> = tx
        .query_row(
            "SELECT settled, reserved FROM totals WHERE team = ?1 AND period = ?2",
            params![team, period],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    match row {
        Some((s, r)) => Ok((dec(s)?, dec(r)?)),
        None => Ok((Decimal::ZERO, Decimal::ZERO)),
    }
}

impl CapStore for SqliteStore {
    fn totals(
        &self,
        team: &str,
        period: &str,
        now: DateTime<Utc>,
    ) -> Result<PeriodTotals, StoreError> {
        self.with(|c| totals_in(c, team, period, &ts(now)))
    }

    fn reserve(
        &self,
        caps: &[CapKey<'_>],
        amount: Decimal,
        meta: &EntryMeta,
    ) -> Result<Option<Vec<EntryId>>, StoreError> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = Utc::now();
            for k in caps {
                let t = totals_in(&tx, k.team, k.period, &ts(now))?;
                if t.settled + t.reserved + amount > k.cap {
                    return Ok(None);
                }
            }
            let mut ids = Vec::with_capacity(caps.len());
            for k in caps {
                let (settled, reserved) = stored_sums(&tx, k.team, k.period)?;
                tx.execute(
                    "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at, holder)
                     VALUES (?1, ?2, ?3, 'reserved', ?4, ?5, ?6, ?7, ?8)",
                    params![k.team, k.period, amount.to_string(), meta.run_id, meta.task_id, ts(now), ts(meta.expires_at), meta.holder],
                )?;
                ids.push(tx.last_insert_rowid());
                tx.execute(
                    "INSERT INTO totals (team, period, settled, reserved, cap) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (team, period) DO UPDATE SET reserved = ?4, cap = ?5",
                    params![k.team, k.period, settled.to_string(), (reserved + amount).normalize().to_string(), k.cap.to_string()],
                )?;
            }
            tx.commit()?;
            Ok(Some(ids))
        })
    }

    fn finish(&self, ids: &[EntryId], actual: Option<Decimal>) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            for id in ids {
                let entry: Option<(String, String, String)> = tx
                    .query_row(
                        "SELECT team, period, amount FROM entries WHERE id = ?1 AND state = 'reserved'",
                        params![id],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                    )
                    .optional()?;
                let Some((team, period, amount)) = entry else {
                    continue;
                };
                let amount = dec(amount)?;
                match actual {
                    Some(a) => tx.execute(
                        "UPDATE entries SET amount = ?2, state = 'settled', settled_at = ?3 WHERE id = ?1",
                        params![id, a.to_string(), ts(Utc::now())],
                    )?,
                    None => tx.execute("DELETE FROM entries WHERE id = ?1", params![id])?,
                };
                let (settled, reserved) = stored_sums(&tx, &team, &period)?;
                tx.execute(
                    "UPDATE totals SET settled = ?3, reserved = ?4 WHERE team = ?1 AND period = ?2",
                    params![
                        team,
                        period,
                        (settled + actual.unwrap_or_default()).normalize().to_string(),
                        (reserved - amount).normalize().to_string()
                    ],
                )?;
            }
            tx.commit()
        })
    }

    fn abandon_run(&self, run_id: &str, now: DateTime<Utc>) -> Result<Decimal, StoreError> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = ts(now);
            let mut total = Decimal::ZERO;
            {
                let mut stmt = tx.prepare(
                    "SELECT amount FROM entries WHERE run_id = ?1 AND state = 'reserved' AND expires_at > ?2",
                )?;
                for a in stmt.query_map(params![run_id, now], |r| r.get::<_, String>(0))? {
                    total += dec(a?)?;
                }
            }
            tx.execute(
                "UPDATE entries SET expires_at = ?2 WHERE run_id = ?1 AND state = 'reserved' AND expires_at > ?2",
                params![run_id, now],
            )?;
            tx.commit()?;
            Ok(total)
        })
    }

    fn renew(&self, holder: &str, until: DateTime<Utc>) -> Result<u64, StoreError> {
        self.with(|c| {
            // A slice whose lease ran out has given its idle part back: only a change
            // with room in the cap takes it again, never a renewal.
            let n = c.execute(
                "UPDATE entries SET expires_at = ?2 WHERE holder = ?1 AND state = 'reserved'
                 AND (idle = '0' OR expires_at > ?3)",
                params![holder, ts(until), ts(Utc::now())],
            )?;
            Ok(n as u64)
        })
    }

    fn run_charges(&self, run_id: &str) -> Result<Vec<TaskCharge>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT task_id, team, period, state, amount, idle FROM entries WHERE run_id = ?1
                 ORDER BY task_id, team, period",
            )?;
            let rows = stmt.query_map(params![run_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })?;
            let mut out: Vec<TaskCharge> = Vec::new();
            for row in rows {
                let (task_id, team, period, state, amount, idle) = row?;
                // A slice's idle part was never spendable without telling the ledger.
                let amount = dec(amount)? - dec(idle)?;
                let same = out.last().is_some_and(|l| {
                    (l.task_id.as_str(), l.team.as_str(), l.period.as_str())
                        == (task_id.as_str(), team.as_str(), period.as_str())
                });
                if !same {
                    out.push(TaskCharge {
                        task_id,
                        team,
                        period,
                        settled: Decimal::ZERO,
                        open: Decimal::ZERO,
                    });
                }
                if let Some(l) = out.last_mut() {
                    match state.as_str() {
                        "settled" => l.settled += amount,
                        _ => l.open += amount,
                    }
                }
            }
            for c in &mut out {
                c.settled = c.settled.normalize();
                c.open = c.open.normalize();
            }
            Ok(out)
        })
    }

    fn set_cap(&self, team: &str, usd: Decimal, now: DateTime<Utc>) -> Result<(), StoreError> {
        self.with(|c| {
            c.execute(
                "INSERT INTO caps (team, usd, set_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (team) DO UPDATE SET usd = ?2, set_at = ?3",
                params![team, usd.normalize().to_string(), ts(now)],
            )
            .map(|_| ())
        })
    }

    fn slices(
        &self,
        changes: &[SliceChange],
        meta: &EntryMeta,
    ) -> Result<Option<Vec<SliceGrant>>, StoreError> {
        slices::sqlite_slices(self, changes, meta)
    }

    fn slice_state(
        &self,
        holder: &str,
        team: &str,
        period: &str,
        owner: &str,
    ) -> Result<Option<SliceState>, StoreError> {
        slices::sqlite_slice_state(self, holder, team, period, owner)
    }

    fn report(&self, team: Option<&str>, now: DateTime<Utc>) -> Result<Vec<PeriodRow>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare(
                "SELECT t.team, t.period, t.cap, (SELECT COUNT(*) FROM entries e WHERE e.team = t.team AND e.period = t.period)
                 FROM totals t WHERE ?1 IS NULL OR t.team = ?1 ORDER BY t.team, t.period",
            )?;
            let rows: Vec<(String, String, Option<String>, i64)> = stmt
                .query_map(params![team], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let mut out = Vec::with_capacity(rows.len());
            for (team, period, cap, entries) in rows {
                let totals = totals_in(c, &team, &period, &ts(now))?;
                out.push(PeriodRow {
                    cap: cap.map(dec).transpose()?,
                    totals,
                    entries: u64::try_from(entries).unwrap_or(0),
                    team,
                    period,
                });
            }
            Ok(out)
        })
    }
}

#[path = "store_slices.rs"]
mod slices;
pub(crate) use slices::{slice_grant, CapOf, Granted, OldSlice};
pub use slices::{slice_of, slice_task, SliceChange, SliceGrant, SliceState, SLICE_TASK};

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
