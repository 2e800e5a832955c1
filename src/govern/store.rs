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
}

/// Who a reservation is for, and until when it may be considered in flight.
#[derive(Debug, Clone)]
pub struct EntryMeta {
    pub run_id: String,
    pub task_id: String,
    pub expires_at: DateTime<Utc>,
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

/// Storage of period caps. Implementations must make `try_reserve` atomic across every
/// process that shares the store.
pub trait CapStore: Send + Sync {
    fn totals(
        &self,
        team: &str,
        period: &str,
        now: DateTime<Utc>,
    ) -> Result<PeriodTotals, StoreError>;
    /// Records a reservation of `amount` if settled + reserved + amount <= cap.
    fn try_reserve(
        &self,
        team: &str,
        period: &str,
        cap: Decimal,
        amount: Decimal,
        meta: &EntryMeta,
    ) -> Result<Option<EntryId>, StoreError>;
    /// Replaces a reservation by what was really spent.
    fn settle(&self, id: EntryId, actual: Decimal) -> Result<(), StoreError>;
    /// Drops a reservation whose request was never billed.
    fn release(&self, id: EntryId) -> Result<(), StoreError>;
    /// Marks every reservation still open for `run_id` as stale now: its process is
    /// known dead (a resume holds the run folder's lock), so nobody may wait for it to
    /// settle; it stays spent, since the provider may have billed it. Returns the
    /// amount so marked.
    fn abandon_run(&self, run_id: &str, now: DateTime<Utc>) -> Result<Decimal, StoreError>;
    fn report(&self, team: Option<&str>, now: DateTime<Utc>) -> Result<Vec<PeriodRow>, StoreError>;
}

/// Opens the ledger `location` names: a PostgreSQL database for a `postgres://` URL,
/// else a SQLite file. Blocking.
pub fn open(location: &Path) -> Result<std::sync::Arc<dyn CapStore>, StoreError> {
    match location.to_str() {
        Some(url) if crate::vocab::values::is_postgres_url(url) => {
            Ok(std::sync::Arc::new(super::pg_store::PgStore::open(url)?))
        }
        _ => Ok(std::sync::Arc::new(SqliteStore::open(location)?)),
    }
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
    settled_at TEXT
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
        conn.execute_batch(&format!("BEGIN IMMEDIATE; {SCHEMA} COMMIT;"))
            .inspect_err(|_| {
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
        "SELECT amount FROM entries WHERE team = ?1 AND period = ?2 AND state = 'reserved' AND expires_at <= ?3",
    )?;
    let mut stale = Decimal::ZERO;
    for a in stmt.query_map(params![team, period, now], |r| r.get::<_, String>(0))? {
        stale += dec(a?)?;
    }
    Ok(PeriodTotals {
        settled,
        reserved,
        stale,
    })
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

    fn try_reserve(
        &self,
        team: &str,
        period: &str,
        cap: Decimal,
        amount: Decimal,
        meta: &EntryMeta,
    ) -> Result<Option<EntryId>, StoreError> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = Utc::now();
            let t = totals_in(&tx, team, period, &ts(now))?;
            if t.settled + t.reserved + amount > cap {
                return Ok(None);
            }
            tx.execute(
                "INSERT INTO entries (team, period, amount, state, run_id, task_id, created_at, expires_at)
                 VALUES (?1, ?2, ?3, 'reserved', ?4, ?5, ?6, ?7)",
                params![team, period, amount.to_string(), meta.run_id, meta.task_id, ts(now), ts(meta.expires_at)],
            )?;
            let id = tx.last_insert_rowid();
            tx.execute(
                "INSERT INTO totals (team, period, settled, reserved, cap) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (team, period) DO UPDATE SET reserved = ?4, cap = ?5",
                params![team, period, t.settled.to_string(), (t.reserved + amount).normalize().to_string(), cap.to_string()],
            )?;
            tx.commit()?;
            Ok(Some(id))
        })
    }

    fn settle(&self, id: EntryId, actual: Decimal) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let entry: Option<(String, String, String, String)> = tx
                .query_row(
                    "SELECT team, period, amount, state FROM entries WHERE id = ?1",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                )
                .optional()?;
            let Some((team, period, amount, state)) = entry else {
                return Ok(());
            };
            if state != "reserved" {
                return Ok(());
            }
            let amount = dec(amount)?;
            tx.execute(
                "UPDATE entries SET amount = ?2, state = 'settled', settled_at = ?3 WHERE id = ?1",
                params![id, actual.to_string(), ts(Utc::now())],
            )?;
            let t = totals_in(&tx, &team, &period, "")?;
            tx.execute(
                "UPDATE totals SET settled = ?3, reserved = ?4 WHERE team = ?1 AND period = ?2",
                params![
                    team,
                    period,
                    (t.settled + actual).normalize().to_string(),
                    (t.reserved - amount).normalize().to_string()
                ],
            )?;
            tx.commit()
        })
    }

    fn release(&self, id: EntryId) -> Result<(), StoreError> {
        self.with(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let entry: Option<(String, String, String)> = tx
                .query_row(
                    "SELECT team, period, amount FROM entries WHERE id = ?1 AND state = 'reserved'",
                    params![id],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            let Some((team, period, amount)) = entry else {
                return Ok(());
            };
            tx.execute("DELETE FROM entries WHERE id = ?1", params![id])?;
            let t = totals_in(&tx, &team, &period, "")?;
            tx.execute(
                "UPDATE totals SET reserved = ?3 WHERE team = ?1 AND period = ?2",
                params![
                    team,
                    period,
                    (t.reserved - dec(amount)?).normalize().to_string()
                ],
            )?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn meta(expires_in: i64) -> EntryMeta {
        EntryMeta {
            run_id: "r".into(),
            task_id: "t".into(),
            expires_at: Utc::now() + chrono::Duration::seconds(expires_in),
        }
    }

    #[test]
    fn periods_are_utc_calendar_periods() {
        let t = Utc.with_ymd_and_hms(2026, 11, 29, 23, 59, 59).unwrap();
        assert_eq!(period_key(Period::Day, t), "day:2026-11-29");
        assert_eq!(period_key(Period::Week, t), "week:2026-W48");
        assert_eq!(period_key(Period::Month, t), "month:2026-11");
        let monday = Utc.with_ymd_and_hms(2026, 11, 30, 0, 0, 0).unwrap();
        assert_eq!(period_key(Period::Week, monday), "week:2026-W49");
    }

    #[test]
    fn reserve_settle_release_keep_totals_exact() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("sub/ledger.sqlite")).unwrap();
        let cap = d("1.00");
        let a = s
            .try_reserve("team", "day:x", cap, d("0.60"), &meta(60))
            .unwrap()
            .unwrap();
        assert!(s
            .try_reserve("team", "day:x", cap, d("0.41"), &meta(60))
            .unwrap()
            .is_none());
        let b = s
            .try_reserve("team", "day:x", cap, d("0.40"), &meta(60))
            .unwrap()
            .unwrap();
        s.settle(a, d("0.123456789")).unwrap();
        s.release(b).unwrap();
        let t = s.totals("team", "day:x", Utc::now()).unwrap();
        assert_eq!(
            t,
            PeriodTotals {
                settled: d("0.123456789"),
                reserved: Decimal::ZERO,
                stale: Decimal::ZERO
            }
        );
        // settling twice changes nothing
        s.settle(a, d("5")).unwrap();
        assert_eq!(
            s.totals("team", "day:x", Utc::now()).unwrap().settled,
            d("0.123456789")
        );
        let rows = s.report(None, Utc::now()).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].cap, Some(cap));
        assert_eq!(rows[0].entries, 1);
    }

    #[test]
    fn a_dead_runs_reservations_are_stale_at_once_and_stay_spent() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("l.sqlite")).unwrap();
        let now = Utc::now();
        let mine = s
            .try_reserve("t", "day:x", d("10"), d("0.4"), &meta(3600))
            .unwrap()
            .unwrap();
        let other = EntryMeta {
            run_id: "other".into(),
            ..meta(3600)
        };
        s.try_reserve("t", "day:x", d("10"), d("0.2"), &other)
            .unwrap()
            .unwrap();
        let settled = s
            .try_reserve("t", "day:x", d("10"), d("0.1"), &meta(3600))
            .unwrap()
            .unwrap();
        s.settle(settled, d("0.05")).unwrap();
        assert_eq!(s.totals("t", "day:x", now).unwrap().stale, d("0"));
        assert_eq!(s.abandon_run("r", now).unwrap(), d("0.4"));
        let t = s.totals("t", "day:x", now).unwrap();
        assert_eq!(
            (t.settled, t.reserved, t.stale),
            (d("0.05"), d("0.6"), d("0.4"))
        );
        assert_eq!(s.abandon_run("r", now).unwrap(), d("0"), "once");
        // A late settle of an abandoned reservation still counts it once.
        s.settle(mine, d("0.3")).unwrap();
        let t = s.totals("t", "day:x", now).unwrap();
        assert_eq!(
            (t.settled, t.reserved, t.stale),
            (d("0.35"), d("0.2"), d("0"))
        );
    }

    #[test]
    fn expired_reservations_stay_spent_but_are_marked_stale() {
        let dir = tempfile::tempdir().unwrap();
        let s = SqliteStore::open(&dir.path().join("ledger.sqlite")).unwrap();
        s.try_reserve("t", "p", d("1"), d("0.3"), &meta(-5))
            .unwrap()
            .unwrap();
        let t = s.totals("t", "p", Utc::now()).unwrap();
        assert_eq!((t.reserved, t.stale), (d("0.3"), d("0.3")));
        assert!(s
            .try_reserve("t", "p", d("1"), d("0.71"), &meta(60))
            .unwrap()
            .is_none());
    }

    #[test]
    fn many_processes_may_create_the_same_file_at_once() {
        for _ in 0..10 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("ledger.sqlite");
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4)
                    .map(|_| scope.spawn(|| SqliteStore::open(&path).map(|_| ())))
                    .collect();
                for h in handles {
                    h.join().unwrap().unwrap();
                }
            });
        }
    }

    #[test]
    fn two_connections_share_one_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let stores: Vec<SqliteStore> = (0..2).map(|_| SqliteStore::open(&path).unwrap()).collect();
        std::thread::scope(|scope| {
            for s in &stores {
                scope.spawn(move || {
                    for _ in 0..50 {
                        let _ = s
                            .try_reserve("t", "p", d("1"), d("0.03"), &meta(60))
                            .unwrap();
                    }
                });
            }
        });
        let t = stores[0].totals("t", "p", Utc::now()).unwrap();
        assert_eq!(t.reserved, d("0.99"));
    }
}
