//! The team ledger on PostgreSQL (`ledger: postgres://...`): the same reservations and
//! settlements as the SQLite file, in transactions any number of processes on any
//! number of machines share. A reservation locks the totals rows of every cap over its
//! request (`SELECT ... FOR UPDATE`, in one order) for the checks and the inserts, so no
//! two reservations can both see room that only one of them fits in.

use chrono::{DateTime, Utc};
use rust_decimal::Decimal;

use super::pg::{Conn, Pg, PgError};
use super::store::{
    slice_grant, CapKey, CapOf, CapStore, EntryId, EntryMeta, Granted, OldSlice, PeriodRow,
    PeriodTotals, SliceChange, SliceGrant, SliceState, StoreError, TaskCharge,
};

/// The ledger in a PostgreSQL database.
pub struct PgStore {
    pg: std::sync::Arc<Pg>,
}

impl PgStore {
    /// Connects and brings the schema up to date. Blocking.
    pub fn open(url: &str) -> Result<PgStore, StoreError> {
        Pg::shared(url).map(|pg| PgStore { pg }).map_err(store_err)
    }

    fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, PgError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.pg.call(f).map_err(store_err)
    }
}

fn store_err(e: PgError) -> StoreError {
    StoreError {
        path: Some(e.url.into()),
        detail: e.detail,
    }
}

/// A team and period's totals, read in `tx`.
async fn totals_in(
    tx: &tokio_postgres::Transaction<'_>,
    team: &str,
    period: &str,
    now: DateTime<Utc>,
) -> Result<PeriodTotals, tokio_postgres::Error> {
    let row = tx
        .query_one(
            "SELECT (SELECT settled FROM ledger_totals WHERE team = $1 AND period = $2),
                    (SELECT reserved FROM ledger_totals WHERE team = $1 AND period = $2),
                    (SELECT usd FROM ledger_caps WHERE team = $1)",
            &[&team, &period],
        )
        .await?;
    let settled: Option<Decimal> = row.get(0);
    let reserved: Option<Decimal> = row.get(1);
    let cap_set: Option<Decimal> = row.get(2);
    let (settled, reserved) = (settled.unwrap_or_default(), reserved.unwrap_or_default());
    // A stale slice's idle part has come back: it is neither spent nor reserved.
    let row = tx
        .query_one(
            "SELECT SUM(amount - idle), SUM(idle) FROM ledger_entries
             WHERE team = $1 AND period = $2 AND state = 'reserved' AND expires_at <= $3",
            &[&team, &period, &now],
        )
        .await?;
    let stale: Option<Decimal> = row.get(0);
    let returned: Option<Decimal> = row.get(1);
    Ok(PeriodTotals {
        settled: settled.normalize(),
        reserved: (reserved - returned.unwrap_or_default()).normalize(),
        stale: stale.unwrap_or_default().normalize(),
        cap_set: cap_set.map(|c| c.normalize()),
    })
}

/// Writes one granted slice change in `tx`: its settlements, the slice's entry (its
/// change numbered), and its cap's totals.
async fn write_slice(
    tx: &tokio_postgres::Transaction<'_>,
    ch: &SliceChange,
    old: OldSlice,
    g: Granted,
    meta: &EntryMeta,
    now: DateTime<Utc>,
) -> Result<SliceGrant, tokio_postgres::Error> {
    let moved: Decimal = ch.settled.iter().map(|(_, a)| *a).sum();
    for (task, a) in &ch.settled {
        tx.execute(
            "INSERT INTO ledger_entries
               (team, period, amount, state, run_id, task_id, created_at, expires_at, settled_at)
             VALUES ($1, $2, $3, 'settled', $4, $5, $6, $6, $6)",
            &[&ch.team, &ch.period, a, &meta.run_id, task, &now],
        )
        .await?;
    }
    let idle = g.size - g.armed;
    let seq = old.seq + 1;
    let id = match (ch.id, g.size.is_zero()) {
        (Some(id), true) => {
            tx.execute("DELETE FROM ledger_entries WHERE id = $1", &[&id])
                .await?;
            None
        }
        (Some(id), false) => {
            tx.execute(
                "UPDATE ledger_entries SET amount = $2, idle = $3, expires_at = $4, seq = $5 WHERE id = $1",
                &[&id, &g.size, &idle, &meta.expires_at, &seq],
            )
            .await?;
            Some(id)
        }
        (None, true) => None,
        (None, false) => Some(
            tx.query_one(
                "INSERT INTO ledger_entries
                   (team, period, amount, state, run_id, task_id, created_at, expires_at, holder, idle, seq)
                 VALUES ($1, $2, $3, 'reserved', $4, $5, $6, $7, $8, $9, $10) RETURNING id",
                &[
                    &ch.team,
                    &ch.period,
                    &g.size,
                    &meta.run_id,
                    &ch.owner,
                    &now,
                    &meta.expires_at,
                    &meta.holder,
                    &idle,
                    &seq,
                ],
            )
            .await?
            .get::<_, i64>(0),
        ),
    };
    tx.execute(
        "UPDATE ledger_totals SET settled = settled + $3, reserved = reserved + $4, cap = $5
         WHERE team = $1 AND period = $2",
        &[
            &ch.team,
            &ch.period,
            &moved,
            &(g.size - old.amount),
            &ch.cap,
        ],
    )
    .await?;
    Ok(SliceGrant {
        id,
        seq,
        size: g.size,
        armed: g.armed,
        totals: totals_in(tx, &ch.team, &ch.period, now).await?,
    })
}

impl CapStore for PgStore {
    fn totals(
        &self,
        team: &str,
        period: &str,
        now: DateTime<Utc>,
    ) -> Result<PeriodTotals, StoreError> {
        let (team, period) = (team.to_string(), period.to_string());
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let tx = client.transaction().await?;
                let t = totals_in(&tx, &team, &period, now).await?;
                tx.commit().await?;
                Ok(t)
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn reserve(
        &self,
        caps: &[CapKey<'_>],
        amount: Decimal,
        meta: &EntryMeta,
    ) -> Result<Option<Vec<EntryId>>, StoreError> {
        let caps: Vec<(String, String, Decimal)> = caps
            .iter()
            .map(|k| (k.team.to_string(), k.period.to_string(), k.cap))
            .collect();
        let meta = meta.clone();
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let tx = client.transaction().await?;
                // The locks every reservation of these caps waits on, taken in one order
                // (team, then period) by every transaction, so two never wait for each other.
                let mut order: Vec<&(String, String, Decimal)> = caps.iter().collect();
                order.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
                for (team, period, cap) in order {
                    tx.execute(
                        "INSERT INTO ledger_totals (team, period, cap) VALUES ($1, $2, $3)
                         ON CONFLICT (team, period) DO NOTHING",
                        &[team, period, cap],
                    )
                    .await?;
                    tx.execute(
                        "SELECT 1 FROM ledger_totals WHERE team = $1 AND period = $2 FOR UPDATE",
                        &[team, period],
                    )
                    .await?;
                }
                let now = Utc::now();
                for (team, period, cap) in &caps {
                    let t = totals_in(&tx, team, period, now).await?;
                    if t.settled + t.reserved + amount > *cap {
                        tx.rollback().await?;
                        return Ok(None);
                    }
                }
                let mut ids = Vec::with_capacity(caps.len());
                for (team, period, cap) in &caps {
                    let id: i64 = tx
                        .query_one(
                            "INSERT INTO ledger_entries
                               (team, period, amount, state, run_id, task_id, created_at, expires_at, holder)
                             VALUES ($1, $2, $3, 'reserved', $4, $5, $6, $7, $8) RETURNING id",
                            &[
                                team,
                                period,
                                &amount,
                                &meta.run_id,
                                &meta.task_id,
                                &now,
                                &meta.expires_at,
                                &meta.holder,
                            ],
                        )
                        .await?
                        .get(0);
                    ids.push(id);
                    tx.execute(
                        "UPDATE ledger_totals SET reserved = reserved + $3, cap = $4
                         WHERE team = $1 AND period = $2",
                        &[team, period, &amount, cap],
                    )
                    .await?;
                }
                tx.commit().await?;
                Ok(Some(ids))
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn finish(&self, ids: &[EntryId], actual: Option<Decimal>) -> Result<(), StoreError> {
        let ids = ids.to_vec();
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let tx = client.transaction().await?;
                let rows = tx
                    .query(
                        "SELECT id, team, period, amount FROM ledger_entries
                         WHERE id = ANY($1) AND state = 'reserved' ORDER BY id FOR UPDATE",
                        &[&ids],
                    )
                    .await?;
                if rows.is_empty() {
                    return tx.rollback().await;
                }
                let mut entries: Vec<(i64, String, String, Decimal)> = rows
                    .iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                    .collect();
                // Totals rows in the order reservations lock them.
                entries.sort_by(|a, b| (&a.1, &a.2).cmp(&(&b.1, &b.2)));
                for (id, team, period, amount) in &entries {
                    match actual {
                        Some(actual) => {
                            tx.execute(
                                "UPDATE ledger_entries SET amount = $2, state = 'settled', settled_at = now()
                                 WHERE id = $1",
                                &[id, &actual],
                            )
                            .await?;
                        }
                        None => {
                            tx.execute("DELETE FROM ledger_entries WHERE id = $1", &[id])
                                .await?;
                        }
                    }
                    tx.execute(
                        "UPDATE ledger_totals SET settled = settled + $3, reserved = reserved - $4
                         WHERE team = $1 AND period = $2",
                        &[team, period, &actual.unwrap_or_default(), amount],
                    )
                    .await?;
                }
                tx.commit().await
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn abandon_run(&self, run_id: &str, now: DateTime<Utc>) -> Result<Decimal, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let rows = client
                    .query(
                        "UPDATE ledger_entries SET expires_at = $2
                         WHERE run_id = $1 AND state = 'reserved' AND expires_at > $2
                         RETURNING amount",
                        &[&run_id, &now],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| r.get::<_, Decimal>(0))
                    .sum::<Decimal>()
                    .normalize())
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn renew(&self, holder: &str, until: DateTime<Utc>) -> Result<u64, StoreError> {
        let holder = holder.to_string();
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                client
                    .execute(
                        // A slice whose lease ran out has given its idle part back:
                        // only a change with room in the cap takes it again.
                        "UPDATE ledger_entries SET expires_at = $2
                         WHERE holder = $1 AND state = 'reserved' AND (idle = 0 OR expires_at > now())",
                        &[&holder, &until],
                    )
                    .await
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn run_charges(&self, run_id: &str) -> Result<Vec<TaskCharge>, StoreError> {
        let run_id = run_id.to_string();
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let rows = client
                    .query(
                        "SELECT task_id, team, period,
                                COALESCE(SUM(amount) FILTER (WHERE state = 'settled'), 0),
                                COALESCE(SUM(amount - idle) FILTER (WHERE state = 'reserved'), 0)
                         FROM ledger_entries WHERE run_id = $1
                         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
                        &[&run_id],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| TaskCharge {
                        task_id: r.get(0),
                        team: r.get(1),
                        period: r.get(2),
                        settled: r.get::<_, Decimal>(3).normalize(),
                        open: r.get::<_, Decimal>(4).normalize(),
                    })
                    .collect())
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn set_cap(&self, team: &str, usd: Decimal, now: DateTime<Utc>) -> Result<(), StoreError> {
        let team = team.to_string();
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                client
                    .execute(
                        "INSERT INTO ledger_caps (team, usd, set_at) VALUES ($1, $2, $3)
                         ON CONFLICT (team) DO UPDATE SET usd = $2, set_at = $3",
                        &[&team, &usd, &now],
                    )
                    .await
                    .map(|_| ())
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn slices(
        &self,
        changes: &[SliceChange],
        meta: &EntryMeta,
    ) -> Result<Option<Vec<SliceGrant>>, StoreError> {
        let changes = changes.to_vec();
        let meta = meta.clone();
        let url = self.pg.url().to_string();
        let out = self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<Result<Option<Vec<SliceGrant>>, String>, tokio_postgres::Error> =
                rt.block_on(async {
                    let tx = client.transaction().await?;
                    // The same lock order as reservations take.
                    let mut order: Vec<&SliceChange> = changes.iter().collect();
                    order.sort_by(|a, b| (&a.team, &a.period).cmp(&(&b.team, &b.period)));
                    for ch in order {
                        tx.execute(
                            "INSERT INTO ledger_totals (team, period, cap) VALUES ($1, $2, $3)
                             ON CONFLICT (team, period) DO NOTHING",
                            &[&ch.team, &ch.period, &ch.cap],
                        )
                        .await?;
                        tx.execute(
                            "SELECT 1 FROM ledger_totals WHERE team = $1 AND period = $2 FOR UPDATE",
                            &[&ch.team, &ch.period],
                        )
                        .await?;
                    }
                    let now = Utc::now();
                    let mut plans = Vec::with_capacity(changes.len());
                    let mut grown: std::collections::HashMap<CapOf, Decimal> = Default::default();
                    for ch in &changes {
                        let old = match ch.id {
                            Some(id) => {
                                let Some(row) = tx
                                    .query_opt(
                                        "SELECT amount, idle, expires_at > $2, seq FROM ledger_entries
                                         WHERE id = $1 AND state = 'reserved' FOR UPDATE",
                                        &[&id, &now],
                                    )
                                    .await?
                                else {
                                    tx.rollback().await?;
                                    return Ok(Err(format!(
                                        "slice {id} of {} {} is not in the ledger",
                                        ch.team, ch.period
                                    )));
                                };
                                OldSlice {
                                    amount: row.get(0),
                                    idle: row.get(1),
                                    live: row.get(2),
                                    seq: row.get(3),
                                }
                            }
                            None => OldSlice {
                                live: true,
                                ..OldSlice::default()
                            },
                        };
                        let t = totals_in(&tx, &ch.team, &ch.period, now).await?;
                        let cap_of = (ch.team.clone(), ch.period.clone());
                        let before = grown.get(&cap_of).copied().unwrap_or_default();
                        match slice_grant(ch, old, &t, before) {
                            Ok(Some(g)) => {
                                *grown.entry(cap_of).or_default() += g.growth;
                                plans.push((old, g));
                            }
                            Ok(None) => {
                                tx.rollback().await?;
                                return Ok(Ok(None));
                            }
                            Err(e) => {
                                tx.rollback().await?;
                                return Ok(Err(e));
                            }
                        }
                    }
                    let mut grants = Vec::with_capacity(changes.len());
                    for (ch, (old, g)) in changes.iter().zip(plans) {
                        grants.push(write_slice(&tx, ch, old, g, &meta, now).await?);
                    }
                    tx.commit().await?;
                    Ok(Ok(Some(grants)))
                });
            r.map_err(|e| link.pg(&e))
        })?;
        out.map_err(|detail| StoreError {
            path: Some(url.into()),
            detail,
        })
    }

    fn slice_state(
        &self,
        holder: &str,
        team: &str,
        period: &str,
        owner: &str,
    ) -> Result<Option<SliceState>, StoreError> {
        let keys = [holder, team, period, owner].map(str::to_string);
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let row = client
                    .query_opt(
                        "SELECT id, seq, amount, idle FROM ledger_entries
                         WHERE holder = $1 AND team = $2 AND period = $3 AND task_id = $4
                           AND state = 'reserved'
                         ORDER BY id DESC LIMIT 1",
                        &[&keys[0], &keys[1], &keys[2], &keys[3]],
                    )
                    .await?;
                Ok(row.map(|r| SliceState {
                    id: r.get(0),
                    seq: r.get(1),
                    amount: r.get::<_, Decimal>(2).normalize(),
                    idle: r.get::<_, Decimal>(3).normalize(),
                }))
            });
            r.map_err(|e| link.pg(&e))
        })
    }

    fn report(&self, team: Option<&str>, now: DateTime<Utc>) -> Result<Vec<PeriodRow>, StoreError> {
        let team = team.map(str::to_string);
        self.call(move |Conn { rt, link }| {
            let client = link.client(rt)?;
            let r: Result<_, tokio_postgres::Error> = rt.block_on(async {
                let tx = client.transaction().await?;
                let rows = tx
                    .query(
                        "SELECT t.team, t.period, t.cap,
                                (SELECT COUNT(*) FROM ledger_entries e
                                 WHERE e.team = t.team AND e.period = t.period)
                         FROM ledger_totals t
                         WHERE $1::TEXT IS NULL OR t.team = $1
                         ORDER BY t.team, t.period",
                        &[&team],
                    )
                    .await?;
                let mut out = Vec::with_capacity(rows.len());
                for r in rows {
                    let (team, period): (String, String) = (r.get(0), r.get(1));
                    let cap: Option<Decimal> = r.get(2);
                    let entries: i64 = r.get(3);
                    out.push(PeriodRow {
                        totals: totals_in(&tx, &team, &period, now).await?,
                        cap,
                        entries: u64::try_from(entries).unwrap_or(0),
                        team,
                        period,
                    });
                }
                tx.commit().await?;
                Ok(out)
            });
            r.map_err(|e| link.pg(&e))
        })
    }
}
